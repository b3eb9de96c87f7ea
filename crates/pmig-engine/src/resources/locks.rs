//! File locks: whole-file `flock` locks, open-file-description record locks
//! (`F_OFD_SETLK`) and POSIX record locks (`F_SETLK`), advisory all.
//!
//! A lock moves with the process. The capture reads the locks each of its
//! descriptors holds from the descriptor's fdinfo (the kernel lists there
//! the `flock` and OFD locks of its open file, and the POSIX locks the
//! process holds on the file). A migration's holder lets them go in the
//! frozen original ([`release`]) before the image goes anywhere, the
//! restore takes them again in the new process before it runs an
//! instruction of its own ([`Locks`]'s finish, or a skeleton's bring-up),
//! and a migration that fails before the handover gives them back to the
//! original before it runs again ([`retake`]). Between the release and the
//! take, a process that asks for a conflicting lock gets it; so:
//!
//! * a lock another process already waits for, or one on a file another
//!   process has open too (it may ask for the lock at any moment: a
//!   database several processes share), refuses the freeze as busy
//!   ([`contested`], [`refuse_contested`]): the other process would get it
//!   between the release and the take, in the middle of what it protects.
//!   Such a lock is waited out as every lock was before locks moved: the
//!   process is frozen at a moment it holds none;
//! * a restore that finds a lock taken fails with the holder named, and
//!   the migration is undone;
//! * a `flock` or OFD lock belongs to the open file, not to the process: a
//!   lock on an open file another process shares (a parent that took it
//!   and forked) is refused, since letting it go would take it from that
//!   process too.
//!
//! Leases (`F_SETLEASE`) are refused: the kernel breaks a lease by
//! signalling its holder, which a moving process cannot answer.
//!
//! Capture and restore of this part sit side by side below; the image part
//! is `locks` (format 1.13), written only when the process holds a lock.

use super::{Capture, Finish, Resource, Update};
use crate::error::{busy, unsupported, EngineError, Result};
use crate::ptrace::Frozen;
use libc::pid_t;
use serde::{Deserialize, Serialize};

pub struct Locks;

/// The `locks` part: every lock the process holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocksState {
    pub locks: Vec<FileLock>,
}

/// One lock, as the process holds it through descriptor `fd`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileLock {
    pub fd: i32,
    pub kind: LockKind,
    /// A write (exclusive) lock, else a read (shared) one.
    pub write: bool,
    /// The first byte locked (0 for `flock`).
    pub start: u64,
    /// The last byte locked; `None`: to the end of the file, however long
    /// it grows.
    pub end: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockKind {
    /// `flock(2)`: the whole file, owned by the open file description.
    Flock,
    /// `F_OFD_SETLK`: a byte range, owned by the open file description.
    Ofd,
    /// `F_SETLK`: a byte range, owned by the process.
    Posix,
}

impl LockKind {
    /// Owned by the open file, which another process may share.
    fn of_open_file(self) -> bool {
        matches!(self, LockKind::Flock | LockKind::Ofd)
    }
}

/// One `lock:` line of an fdinfo, or one line of `/proc/locks`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Line {
    /// A request waiting for the lock of the line above (`->`).
    waiter: bool,
    /// `POSIX`, `FLOCK`, `OFDLCK`, `LEASE`, …
    kind: String,
    /// `ADVISORY`, or a lease's state.
    mode: String,
    write: bool,
    pid: i64,
    /// The file, as the kernel prints it: `MAJOR:MINOR:INODE`, the device
    /// numbers in hex.
    file: String,
    start: u64,
    end: Option<u64>,
}

/// Parses "1: POSIX  ADVISORY  WRITE 1234 fe:00:9986800 5 EOF" (the
/// fdinfo's lines without their `lock:` prefix, and `/proc/locks`).
fn parse_line(l: &str) -> Option<Line> {
    let mut w = l.split_whitespace();
    w.next()?.strip_suffix(':')?;
    let mut kind = w.next()?;
    let waiter = kind == "->";
    if waiter {
        kind = w.next()?;
    }
    let mode = w.next()?;
    let write = match w.next()? {
        "WRITE" => true,
        "READ" => false,
        _ => return None,
    };
    let pid = w.next()?.parse().ok()?;
    let file = w.next()?;
    let start = w.next()?.parse().ok()?;
    let end = match w.next()? {
        "EOF" => None,
        e => Some(e.parse().ok()?),
    };
    Some(Line {
        waiter,
        kind: kind.into(),
        mode: mode.into(),
        write,
        pid,
        file: file.into(),
        start,
        end,
    })
}

/// The locks held through fd `fd` of `pid` (`info`: its fdinfo), each with
/// its file as the kernel names it; refuses a lock that cannot move.
fn held_through(pid: pid_t, fd: i32, info: &str) -> Result<Vec<(FileLock, String)>> {
    let mut v = Vec::new();
    for l in info.lines().filter_map(|l| l.strip_prefix("lock:")) {
        let link = || crate::procfs::readlink(pid, &format!("fd/{fd}")).unwrap_or_default();
        let Some(p) = parse_line(l) else {
            return Err(unsupported(
                pid,
                format!(
                    "a file lock pmig cannot read ({} on fd {fd}: {})",
                    l.trim(),
                    link()
                ),
            ));
        };
        let kind = match p.kind.as_str() {
            "POSIX" => LockKind::Posix,
            "FLOCK" => LockKind::Flock,
            "OFDLCK" => LockKind::Ofd,
            "LEASE" | "DELEG" => {
                return Err(unsupported(
                    pid,
                    format!("a file lease (fd {fd}: {})", link()),
                ))
            }
            k => {
                return Err(unsupported(
                    pid,
                    format!("a file lock of kind {k} (fd {fd}: {})", link()),
                ))
            }
        };
        if p.mode != "ADVISORY" {
            return Err(unsupported(
                pid,
                format!(
                    "a {} file lock (fd {fd}: {})",
                    p.mode.to_lowercase(),
                    link()
                ),
            ));
        }
        let lock = FileLock {
            fd,
            kind,
            write: p.write,
            start: p.start,
            end: p.end,
        };
        v.push((lock, p.file));
    }
    Ok(v)
}

/// The check before the freeze, for fd `fd` of `pid` (`info`: its
/// fdinfo): refuses a lock that cannot move; notes the fd of a lock owned
/// by its open file in `open_files`, with its link (another process must
/// not share that open file), and the file of every lock in `files`, as
/// the kernel names it and by its link (for [`refuse_contested`]).
pub fn check(
    pid: pid_t,
    fd: i32,
    info: &str,
    open_files: &mut Vec<(i32, String)>,
    files: &mut Vec<(String, String)>,
) -> Result<()> {
    for (l, file) in held_through(pid, fd, info)? {
        let link = || crate::procfs::readlink(pid, &format!("fd/{fd}")).unwrap_or_default();
        if l.kind.of_open_file() && !open_files.iter().any(|(f, _)| *f == fd) {
            open_files.push((fd, link()));
        }
        if !files.iter().any(|(f, _)| *f == file) {
            files.push((file, link()));
        }
    }
    Ok(())
}

/// The lock `pid` holds on one of `files` (as the kernel names them, and
/// by their links) that another process waits for, named, or `None`. Its
/// waiter would get the lock the moment the frozen original let go of it,
/// before the copy could take it.
fn waited_for(pid: pid_t, files: &[(String, String)]) -> Result<Option<String>> {
    if files.is_empty() {
        return Ok(None);
    }
    let all = std::fs::read_to_string("/proc/locks").map_err(|e| EngineError::Sys {
        what: "read /proc/locks".into(),
        source: e,
    })?;
    Ok(waiter_of(pid, files, &all))
}

/// Whether `all`, the text of `/proc/locks`, has a request waiting for a
/// lock (without one, [`waiter_of`] finds none).
fn any_waiter(all: &str) -> bool {
    all.lines().filter_map(parse_line).any(|l| l.waiter)
}

/// [`waited_for`] in `all`, the text of `/proc/locks`, where each waiting
/// request follows the lock it waits for, under the same number. A POSIX
/// lock names its owner's pid, so one of another process does not count
/// (another process may wait for it on a file this one locks too); a
/// `flock` or OFD lock names whoever took it (an OFD lock: nobody), so any
/// of those on one of `files` counts.
fn waiter_of(pid: pid_t, files: &[(String, String)], all: &str) -> Option<String> {
    let mut blocker: Option<(String, Line)> = None;
    for raw in all.lines() {
        let Some(l) = parse_line(raw) else { continue };
        let id = raw.split(':').next().unwrap_or_default().trim().to_string();
        if !l.waiter {
            blocker = Some((id, l));
            continue;
        }
        let Some((bid, b)) = &blocker else { continue };
        let Some((_, link)) = files.iter().find(|(f, _)| *f == b.file) else {
            continue;
        };
        let ours = b.kind != "POSIX" || b.pid == pid as i64;
        if *bid != id || !ours || l.pid == pid as i64 {
            continue;
        }
        let who = if l.pid > 0 {
            format!("process {}", l.pid)
        } else {
            "another process".to_string()
        };
        return Some(format!(
            "it holds a file lock {who} waits for ({} on {link})",
            b.kind
        ));
    }
    None
}

/// Refuses, as busy, a lock of `pid` on one of `files` that another
/// process waits for (see [`waited_for`]), or on a file another process
/// has open too (see [`open_elsewhere`]).
pub fn refuse_contested(pid: pid_t, files: &[(String, String)]) -> Result<()> {
    if let Some(what) = waited_for(pid, files)? {
        return Err(busy(pid, what));
    }
    if let Some((other, link, file)) = open_elsewhere(pid, files) {
        note_exposed(pid, file);
        return Err(busy(
            pid,
            format!(
                "it holds a file lock on {link}, which process {other} has open too (it could take the lock while this one moves)"
            ),
        ));
    }
    Ok(())
}

/// Another process that has one of `files` open (as the kernel names them,
/// and by their links): its pid, and the file's link and kernel name. A
/// process that has the file open may ask for a lock on it at any moment,
/// and would get it between the release in the frozen original and the
/// take in the copy, in the middle of what the lock protects (a database
/// shared by several processes). Such a lock keeps the freeze away as all
/// locks did before they moved. Processes in a tracing stop are passed
/// over: they run nothing while stopped (a frozen original that still
/// serves pages, a skeleton waiting for its bring-up, which will take the
/// locks). The files of another node are not seen.
fn open_elsewhere(pid: pid_t, files: &[(String, String)]) -> Option<(pid_t, String, String)> {
    if files.is_empty() {
        return None;
    }
    let (other, link) = crate::procfs::other_holder(pid, |other, fd, link| {
        files.iter().any(|(f, l)| {
            l == link && kernel_name(other, fd).as_ref() == Some(f) && !in_tracing_stop(other)
        })
    })?;
    let (file, _) = files.iter().find(|(_, l)| *l == link)?;
    Some((other, link, file.clone()))
}

/// Whether process `pid` sits in a tracing stop (state `t`).
fn in_tracing_stop(pid: pid_t) -> bool {
    crate::procfs::read(pid, "stat")
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.trim_start().starts_with('t'))
        })
        .unwrap_or(false)
}

/// The file of fd `fd` of `pid` as the kernel names it in lock lines:
/// `MAJOR:MINOR:INODE`, the device numbers in hex.
fn kernel_name(pid: pid_t, fd: i32) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(format!("/proc/{pid}/fd/{fd}")).ok()?;
    Some(format!(
        "{:02x}:{:02x}:{}",
        libc::major(md.dev()),
        libc::minor(md.dev()),
        md.ino()
    ))
}

/// The files on which a process was last found holding a lock while
/// another process had the file open ([`open_elsewhere`]): the process (pid
/// and start time) and the files, as the kernel names them. The freeze
/// waits for a moment without a lock on one of them ([`contested`]).
static EXPOSED: std::sync::Mutex<Option<Exposed>> = std::sync::Mutex::new(None);

/// A process (pid and start time), and files as the kernel names them.
type Exposed = ((pid_t, u64), Vec<String>);

fn note_exposed(pid: pid_t, file: String) {
    let Some(start) = crate::procfs::start_time(pid) else {
        return;
    };
    let mut e = EXPOSED.lock().unwrap_or_else(|p| p.into_inner());
    match e.as_mut() {
        Some((p, files)) if *p == (pid, start) => {
            if !files.contains(&file) {
                files.push(file);
            }
        }
        _ => *e = Some(((pid, start), vec![file])),
    }
}

/// The files [`note_exposed`] noted for `pid`.
fn exposed(pid: pid_t) -> Vec<String> {
    let e = EXPOSED.lock().unwrap_or_else(|p| p.into_inner());
    match e.as_ref() {
        Some((p, files)) if Some(*p) == crate::procfs::start_time(pid).map(|s| (pid, s)) => {
            files.clone()
        }
        _ => Vec::new(),
    }
}

/// The first lock of `pid` that another process waits for, or that is on
/// a file another process was found to have open too (by the checks, see
/// [`refuse_contested`]), named as its refusal names it, or `None`. Read
/// while the process runs, this is a sample.
pub fn contested(pid: pid_t) -> Result<Option<String>> {
    let exposed = exposed(pid);
    // With no file noted as exposed and no request waiting for any lock,
    // no lock the process may hold is contested: its descriptors are not
    // read (one fdinfo each, right after the freeze: 9.8 ms for a process
    // holding a thousand files).
    if exposed.is_empty() {
        if let Ok(all) = std::fs::read_to_string("/proc/locks") {
            if !any_waiter(&all) {
                return Ok(None);
            }
        }
    }
    let mut files = Vec::new();
    for fd in super::files::list_fds(pid)? {
        // An fd closed since the listing holds no lock.
        let Ok(info) = crate::procfs::read(pid, &format!("fdinfo/{fd}")) else {
            continue;
        };
        let mut open_files = Vec::new();
        // A lock that cannot move is the checks' to refuse.
        let _ = check(pid, fd, &info, &mut open_files, &mut files);
    }
    if let Some((_, link)) = files.iter().find(|(f, _)| exposed.contains(f)) {
        return Ok(Some(format!(
            "it holds a file lock on {link}, which another process has open too (it could take the lock while this one moves)"
        )));
    }
    waited_for(pid, &files)
}

/// The capture, for fd `fd` (`info`: its fdinfo): adds the locks held
/// through it to `found`. A POSIX lock is the process's, listed with every
/// descriptor of its file: it is kept once, with the first.
pub fn found(pid: pid_t, fd: i32, info: &str, found: &mut Vec<(FileLock, String)>) -> Result<()> {
    for (l, file) in held_through(pid, fd, info)? {
        let again = l.kind == LockKind::Posix
            && found.iter().any(|(o, f)| {
                o.kind == LockKind::Posix
                    && *f == file
                    && (o.write, o.start, o.end) == (l.write, l.start, l.end)
            });
        if !again {
            found.push((l, file));
        }
    }
    Ok(())
}

impl FileLock {
    /// How errors and logs name it: "POSIX write lock of bytes 5–14 on fd 3".
    pub fn describe(&self) -> String {
        let kind = match self.kind {
            LockKind::Flock => "flock",
            LockKind::Ofd => "OFD",
            LockKind::Posix => "POSIX",
        };
        let how = if self.write { "write" } else { "read" };
        let range = match (self.kind, self.end) {
            (LockKind::Flock, _) => String::new(),
            (_, None) if self.start == 0 => " of the whole file".into(),
            (_, None) => format!(" of bytes {} to the end", self.start),
            (_, Some(e)) => format!(" of bytes {}–{e}", self.start),
        };
        format!("{kind} {how} lock{range} on fd {}", self.fd)
    }

    /// The call that takes it (`take`) or lets it go, in the process that
    /// holds fd `fd`: the call's number and arguments, with a `struct
    /// flock` (to be written in the process, its address as argument 2)
    /// for the record locks.
    fn call(&self, take: bool) -> LockCall {
        let fd = self.fd as u64;
        match self.kind {
            LockKind::Flock => {
                let op = match (take, self.write) {
                    (false, _) => libc::LOCK_UN,
                    (true, true) => libc::LOCK_EX | libc::LOCK_NB,
                    (true, false) => libc::LOCK_SH | libc::LOCK_NB,
                };
                (libc::SYS_flock, [fd, op as u64, 0], None)
            }
            LockKind::Ofd | LockKind::Posix => {
                let cmd = if self.kind == LockKind::Ofd {
                    libc::F_OFD_SETLK
                } else {
                    libc::F_SETLK
                };
                let ty = match (take, self.write) {
                    (false, _) => libc::F_UNLCK,
                    (true, true) => libc::F_WRLCK,
                    (true, false) => libc::F_RDLCK,
                };
                // A length of 0 reaches to the end of the file, however
                // long it grows.
                let len = self.end.map_or(0, |e| e + 1 - self.start);
                let raw = flock_bytes(ty as i16, self.start, len);
                (libc::SYS_fcntl, [fd, cmd as u64, 0], Some(raw))
            }
        }
    }
}

/// A `struct flock` (x86_64: type, whence, 4 bytes of padding, start,
/// length, pid, padding) for a range from the start of the file.
fn flock_bytes(ty: i16, start: u64, len: u64) -> [u8; 32] {
    let mut b = [0u8; 32];
    b[0..2].copy_from_slice(&ty.to_le_bytes());
    b[2..4].copy_from_slice(&(libc::SEEK_SET as i16).to_le_bytes());
    b[8..16].copy_from_slice(&start.to_le_bytes());
    b[16..24].copy_from_slice(&len.to_le_bytes());
    b
}

/// The process on this node that holds a lock on the file of fd `fd` of
/// `pid`, other than `pid` itself, if `/proc/locks` names one.
fn holder_here(pid: pid_t, fd: i32) -> Option<i64> {
    let file = kernel_name(pid, fd)?;
    let all = std::fs::read_to_string("/proc/locks").ok()?;
    all.lines()
        .filter_map(parse_line)
        .find(|l| !l.waiter && l.file == file && l.pid > 0 && l.pid != pid as i64)
        .map(|l| l.pid)
}

/// The error of a lock `l` of `pid` that could not be taken (`err`, the
/// call's negative result).
fn not_taken(pid: pid_t, l: &FileLock, err: i64) -> EngineError {
    let link = crate::procfs::readlink(pid, &format!("fd/{}", l.fd)).unwrap_or_default();
    let e = -err as i32;
    if e == libc::EAGAIN || e == libc::EACCES {
        let who = match holder_here(pid, l.fd) {
            Some(p) => format!("process {p}"),
            None => "another process".into(),
        };
        return EngineError::Restore(format!(
            "the {} ({link}) is held by {who} here",
            l.describe()
        ));
    }
    EngineError::Sys {
        what: format!("take the {} ({link})", l.describe()),
        source: std::io::Error::from_raw_os_error(e),
    }
}

impl Resource for Locks {
    const PART: &'static str = "locks";
    type State = LocksState;

    /// The locks the files capture found (`Capture::locks`).
    fn capture(cx: &mut Capture) -> Result<LocksState> {
        Ok(LocksState {
            locks: std::mem::take(&mut cx.locks)
                .into_iter()
                .map(|(l, _)| l)
                .collect(),
        })
    }

    /// Takes every lock in the new process, each at once or not at all
    /// (another process holds it here: the restore fails, naming it).
    fn finish(s: &LocksState, cx: &mut Finish) -> Result<()> {
        for l in &s.locks {
            let (nr, mut args, raw) = l.call(true);
            if let Some(raw) = raw {
                args[2] = cx.scratch(&raw)?;
            }
            let r = cx.frozen.inject(0, nr, &args)?;
            if r < 0 {
                return Err(not_taken(cx.pid, l, r));
            }
        }
        Ok(())
    }

    /// A skeleton holds no lock (the original held them when it was
    /// made): it takes those of the stop, once its descriptors are those
    /// of the stop.
    fn update(_pre: &LocksState, fin: &LocksState, _same: bool, cx: &mut Update) -> Result<()> {
        Locks::finish(fin, &mut cx.finish())
    }
}

/// A call [`FileLock::call`] makes: its number, its arguments, and the
/// `struct flock` its argument 2 points to, if any.
type LockCall = (i64, [u64; 3], Option<[u8; 32]>);

/// Runs `calls` (see [`FileLock::call`]) in the frozen process, a `struct
/// flock` each in a page mapped for them, which is removed again; stops at
/// the first that fails, with its index and result.
fn run_in(frozen: &mut Frozen, calls: &[LockCall]) -> Result<Option<(usize, i64)>> {
    let anon = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;
    let rw = (libc::PROT_READ | libc::PROT_WRITE) as u64;
    let page = if calls.iter().any(|c| c.2.is_some()) {
        let r = frozen.inject(0, libc::SYS_mmap, &[0, 4096, rw, anon, u64::MAX, 0])?;
        if r < 0 {
            return Err(EngineError::Sys {
                what: format!("map a page in process {} for its locks", frozen.pid),
                source: std::io::Error::from_raw_os_error(-r as i32),
            });
        }
        Some(r as u64)
    } else {
        None
    };
    let mut failed = None;
    let mut result = Ok(());
    for (i, (nr, args, raw)) in calls.iter().enumerate() {
        let mut args = *args;
        if let (Some(raw), Some(p)) = (raw, page) {
            match crate::sys::process_vm_write(frozen.pid, p, raw) {
                Ok(n) if n == raw.len() => args[2] = p,
                Ok(_) => {
                    result = Err(EngineError::Other(format!(
                        "a short write into process {}",
                        frozen.pid
                    )));
                    break;
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        match frozen.inject(0, *nr, &args) {
            Ok(r) if r < 0 => {
                failed = Some((i, r));
                break;
            }
            Ok(_) => {}
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    if let Some(p) = page {
        let _ = frozen.inject(0, libc::SYS_munmap, &[p, 4096]);
    }
    result.map(|_| failed)
}

/// Lets every lock of `s` go in the frozen original (a migration's
/// holder, after the capture): the copy takes them. On an error, those
/// already let go are taken again.
pub fn release(frozen: &mut Frozen, s: &LocksState) -> Result<()> {
    let calls: Vec<_> = s.locks.iter().map(|l| l.call(false)).collect();
    let failed = match run_in(frozen, &calls) {
        Ok(None) => return Ok(()),
        Ok(Some((i, r))) => EngineError::Sys {
            what: format!(
                "let the {} go in the frozen original",
                s.locks[i].describe()
            ),
            source: std::io::Error::from_raw_os_error(-r as i32),
        },
        Err(e) => e,
    };
    if let Err(e) = retake(frozen, s) {
        tracing::error!("process {}: {e}", frozen.pid);
    }
    Err(failed)
}

/// Takes every lock of `s` again in the frozen original, whose migration
/// failed: the error names the first that another process holds now.
/// Taking a lock the process holds already changes nothing, so this may be
/// tried again.
pub fn retake(frozen: &mut Frozen, s: &LocksState) -> Result<()> {
    let calls: Vec<_> = s.locks.iter().map(|l| l.call(true)).collect();
    match run_in(frozen, &calls)? {
        None => Ok(()),
        Some((i, r)) => Err(not_taken(frozen.pid, &s.locks[i], r)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn the_kernels_lock_lines_are_read() {
        let l = parse_line("1: POSIX  ADVISORY  WRITE 13734 fe:00:9977873 5 14").unwrap();
        assert_eq!(
            l,
            Line {
                waiter: false,
                kind: "POSIX".into(),
                mode: "ADVISORY".into(),
                write: true,
                pid: 13734,
                file: "fe:00:9977873".into(),
                start: 5,
                end: Some(14),
            }
        );
        let w = parse_line("2: -> FLOCK  ADVISORY  READ 13775 fe:00:9977906 0 EOF").unwrap();
        assert!(w.waiter && !w.write && w.end.is_none() && w.kind == "FLOCK");
        let o = parse_line("1: OFDLCK ADVISORY  WRITE -1 fe:00:9977918 0 EOF").unwrap();
        assert_eq!((o.pid, o.kind.as_str()), (-1, "OFDLCK"));
        assert!(parse_line("garbage").is_none());
        assert!(parse_line("1: POSIX ADVISORY UNLCK 1 fe:00:1 0 EOF").is_none());
    }

    /// A request waiting for this process's lock counts; one waiting for
    /// another process's POSIX lock on the same file does not; one waiting
    /// for an flock on the file counts whoever took it.
    #[test]
    fn a_waiter_counts_only_for_a_lock_of_this_process() {
        let files = [("fe:00:7".to_string(), "/db".to_string())];
        let ours = "1: POSIX  ADVISORY  WRITE 10 fe:00:7 0 EOF\n\
                    1: -> POSIX  ADVISORY  WRITE 20 fe:00:7 0 EOF\n";
        let w = waiter_of(10, &files, ours).expect("our lock is waited for");
        assert!(any_waiter(ours));
        assert!(!any_waiter("1: POSIX  ADVISORY  WRITE 10 fe:00:7 0 EOF\n1: FLOCK  ADVISORY  WRITE 3 fe:00:8 0 EOF\n"));
        assert!(!any_waiter(""));
        assert_eq!(waiter_of(10, &files, ""), None);
        assert!(w.contains("process 20") && w.contains("/db"), "{w}");
        let theirs = "1: POSIX  ADVISORY  READ 10 fe:00:7 120 120\n\
                      2: POSIX  ADVISORY  WRITE 30 fe:00:7 0 EOF\n\
                      2: -> POSIX  ADVISORY  WRITE 20 fe:00:7 0 EOF\n";
        assert_eq!(waiter_of(10, &files, theirs), None);
        let other_file = "1: POSIX  ADVISORY  WRITE 10 fe:00:8 0 EOF\n\
                          1: -> POSIX  ADVISORY  WRITE 20 fe:00:8 0 EOF\n";
        assert_eq!(waiter_of(10, &files, other_file), None);
        let flock = "3: FLOCK  ADVISORY  WRITE 5 fe:00:7 0 EOF\n\
                     3: -> FLOCK  ADVISORY  WRITE 20 fe:00:7 0 EOF\n";
        assert!(waiter_of(10, &files, flock).is_some());
        // Its own request, waiting for another's lock, is no reason.
        let own = "4: POSIX  ADVISORY  WRITE 10 fe:00:7 0 EOF\n\
                   4: -> POSIX  ADVISORY  WRITE 10 fe:00:7 0 EOF\n";
        assert_eq!(waiter_of(10, &files, own), None);
    }

    #[test]
    fn a_struct_flock_is_laid_out_as_the_kernel_reads_it() {
        let b = flock_bytes(libc::F_WRLCK as i16, 5, 10);
        assert_eq!(std::mem::size_of::<libc::flock>(), b.len());
        let at = |o: usize, n: usize| &b[o..o + n];
        assert_eq!(
            at(std::mem::offset_of!(libc::flock, l_type), 2),
            (libc::F_WRLCK as i16).to_le_bytes()
        );
        assert_eq!(
            at(std::mem::offset_of!(libc::flock, l_whence), 2),
            (libc::SEEK_SET as i16).to_le_bytes()
        );
        assert_eq!(
            at(std::mem::offset_of!(libc::flock, l_start), 8),
            5u64.to_le_bytes()
        );
        assert_eq!(
            at(std::mem::offset_of!(libc::flock, l_len), 8),
            10u64.to_le_bytes()
        );
    }

    fn set(f: &std::fs::File, cmd: i32, ty: i32, start: i64, len: i64) {
        // SAFETY: flock is plain data, for which all zeros is a value.
        let mut l: libc::flock = unsafe { std::mem::zeroed() };
        l.l_type = ty as i16;
        l.l_whence = libc::SEEK_SET as i16;
        l.l_start = start;
        l.l_len = len;
        // SAFETY: F_SETLK and F_OFD_SETLK read one flock from our local.
        let r = unsafe { libc::fcntl(f.as_raw_fd(), cmd, &l) };
        assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    }

    /// Every kind held by this process is found with its range, a POSIX
    /// lock once for two descriptors of its file, and a lock let go is
    /// not found.
    #[test]
    fn held_locks_are_found_with_their_ranges_and_a_released_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let open = |n: &str| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(dir.path().join(n))
                .unwrap()
        };
        let (a, a2, b, c) = (open("a"), open("a"), open("b"), open("c"));
        set(&a, libc::F_SETLK, libc::F_WRLCK, 5, 10);
        set(&a, libc::F_SETLK, libc::F_RDLCK, 50, 0);
        set(&b, libc::F_OFD_SETLK, libc::F_WRLCK, 0, 0);
        // SAFETY: flock on a descriptor we hold.
        assert_eq!(unsafe { libc::flock(c.as_raw_fd(), libc::LOCK_SH) }, 0);
        let me = std::process::id() as pid_t;
        let mut all = Vec::new();
        for f in [&a, &a2, &b, &c] {
            let info = crate::procfs::read(me, &format!("fdinfo/{}", f.as_raw_fd())).unwrap();
            found(me, f.as_raw_fd(), &info, &mut all).unwrap();
        }
        let locks: Vec<FileLock> = all.into_iter().map(|(l, _)| l).collect();
        let fa = a.as_raw_fd();
        let want = |fd, kind, write, start, end| FileLock {
            fd,
            kind,
            write,
            start,
            end,
        };
        assert!(locks.contains(&want(fa, LockKind::Posix, true, 5, Some(14))));
        assert!(locks.contains(&want(fa, LockKind::Posix, false, 50, None)));
        assert!(locks.contains(&want(b.as_raw_fd(), LockKind::Ofd, true, 0, None)));
        assert!(locks.contains(&want(c.as_raw_fd(), LockKind::Flock, false, 0, None)));
        assert_eq!(locks.len(), 4, "{locks:?}");
        assert_eq!(
            locks[0].describe(),
            format!("POSIX write lock of bytes 5–14 on fd {fa}")
        );
        // Nobody waits for them.
        assert_eq!(contested(me).unwrap(), None);
        set(&b, libc::F_OFD_SETLK, libc::F_UNLCK, 0, 0);
        let info = crate::procfs::read(me, &format!("fdinfo/{}", b.as_raw_fd())).unwrap();
        assert!(held_through(me, b.as_raw_fd(), &info).unwrap().is_empty());
    }
}
