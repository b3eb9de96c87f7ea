//! Parsing of the /proc files the engine reads.

use crate::error::{Ctx, EngineError, Result};
use libc::pid_t;
use std::collections::HashMap;

/// The whole text of a /proc (or /sys) file.
///
/// `std::fs::read_to_string` asks for the file's size first (0 for these
/// files), then reads 32 bytes, then twice as many each time: about nine
/// system calls where one `read` into a page-sized buffer and the one that
/// finds the end do. The stop reads some thirty such files.
pub fn slurp(path: &str) -> std::io::Result<String> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(len);
    String::from_utf8(buf).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

pub fn read(pid: pid_t, file: &str) -> Result<String> {
    slurp(&format!("/proc/{pid}/{file}")).map_err(|e| read_error(pid, file, e))
}

/// The error of a failed read of /proc/PID/FILE: no such process where the
/// file is not there.
fn read_error(pid: pid_t, file: &str, e: std::io::Error) -> EngineError {
    if e.kind() == std::io::ErrorKind::NotFound {
        EngineError::NoProcess(pid)
    } else {
        EngineError::Sys {
            what: format!("read /proc/{pid}/{file}"),
            source: e,
        }
    }
}

/// One line of /proc/PID/maps (plus VmFlags from smaps).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MapLine {
    pub start: u64,
    pub end: u64,
    pub read: bool,
    pub write: bool,
    pub exec: bool,
    pub shared: bool,
    pub offset: u64,
    pub dev: String,
    pub inode: u64,
    pub path: String,
    pub flags: Vec<String>,
    /// smaps' `Anonymous:` (KiB): private pages no file holds (0 from maps).
    pub anon_kib: u64,
}

fn parse_map_line(l: &str) -> Option<MapLine> {
    let mut it = l.splitn(6, ' ');
    let range = it.next()?;
    let perms = it.next()?.as_bytes();
    let offset = u64::from_str_radix(it.next()?, 16).ok()?;
    let dev = it.next()?.to_string();
    let inode = it.next()?.parse().ok()?;
    let path = it.next().unwrap_or("").trim_start().to_string();
    let (a, b) = range.split_once('-')?;
    Some(MapLine {
        start: u64::from_str_radix(a, 16).ok()?,
        end: u64::from_str_radix(b, 16).ok()?,
        read: perms.first() == Some(&b'r'),
        write: perms.get(1) == Some(&b'w'),
        exec: perms.get(2) == Some(&b'x'),
        shared: perms.get(3) == Some(&b's'),
        offset,
        dev,
        inode,
        path,
        flags: Vec::new(),
        anon_kib: 0,
    })
}

pub fn parse_maps(text: &str) -> Vec<MapLine> {
    text.lines().filter_map(parse_map_line).collect()
}

/// /proc/PID/smaps: maps lines with their VmFlags.
pub fn smaps(pid: pid_t) -> Result<Vec<MapLine>> {
    let text = read(pid, "smaps")?;
    let mut out: Vec<MapLine> = Vec::new();
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("VmFlags:") {
            if let Some(m) = out.last_mut() {
                m.flags = rest.split_whitespace().map(str::to_string).collect();
            }
        } else if let Some(rest) = l.strip_prefix("Anonymous:") {
            if let Some(m) = out.last_mut() {
                m.anon_kib = rest
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
            }
        } else if l.as_bytes().first().is_some_and(|c| c.is_ascii_hexdigit()) && l.contains('-') {
            if let Some(m) = parse_map_line(l) {
                // smaps field lines ("Size: ...") never parse as map lines.
                out.push(m);
            }
        }
    }
    Ok(out)
}

pub fn maps(pid: pid_t) -> Result<Vec<MapLine>> {
    Ok(parse_maps(&read(pid, "maps")?))
}

/// The per-thread files a [`with_proc_memo`] pass reads once.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Memo {
    /// `/proc/ID/status`.
    Status,
    /// `/proc/ID/task/ID/children`: the thread's children.
    Children,
}

impl Memo {
    fn path(self, id: pid_t) -> String {
        match self {
            Memo::Status => format!("/proc/{id}/status"),
            Memo::Children => format!("/proc/{id}/task/{id}/children"),
        }
    }
}

thread_local! {
    /// The texts read during a [`with_proc_memo`] pass, by thread and file.
    static MEMO: std::cell::RefCell<Option<HashMap<(pid_t, Memo), String>>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `f` with each thread's `/proc/ID/status` ([`status`],
/// [`tracer_of`]) and list of children ([`thread_children`]) read once: the
/// checks of one pass that each look at every thread's status (its tracer,
/// its credentials) share a read per thread, about 10 µs each. A pass
/// inside another shares the outer one's.
pub fn with_proc_memo<T>(f: impl FnOnce() -> T) -> T {
    struct Off(bool);
    impl Drop for Off {
        fn drop(&mut self) {
            if self.0 {
                MEMO.with(|m| *m.borrow_mut() = None);
            }
        }
    }
    let outer = MEMO.with(|m| {
        let mut m = m.borrow_mut();
        let outer = m.is_none();
        if outer {
            *m = Some(HashMap::new());
        }
        outer
    });
    let _off = Off(outer);
    f()
}

/// Forgets what the current [`with_proc_memo`] pass read: a check that
/// waits for a state to change reads it again.
pub fn forget_memo() {
    MEMO.with(|m| {
        if let Some(m) = m.borrow_mut().as_mut() {
            m.clear()
        }
    });
}

/// The text of `what` of thread `id`, from the memo of the current pass if
/// it holds it (see [`with_proc_memo`]).
fn memo_read(id: pid_t, what: Memo) -> std::io::Result<String> {
    if let Some(s) = MEMO.with(|m| {
        m.borrow()
            .as_ref()
            .and_then(|m| m.get(&(id, what)).cloned())
    }) {
        return Ok(s);
    }
    let s = slurp(&what.path(id))?;
    MEMO.with(|m| {
        if let Some(m) = m.borrow_mut().as_mut() {
            m.insert((id, what), s.clone());
        }
    });
    Ok(s)
}

/// The children of thread `tid` (`/proc/TID/task/TID/children`), shared
/// with the other reads of a [`with_proc_memo`] pass; an error on a kernel
/// without those files.
pub fn thread_children(tid: pid_t) -> std::io::Result<Vec<pid_t>> {
    Ok(memo_read(tid, Memo::Children)?
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect())
}

/// Reads into the current [`with_proc_memo`] pass each thread's status and
/// children of the frozen process `pid`, which its checks read again
/// (nothing changes them while it is frozen, but a child that exits), one
/// thread at a time until `enough` says so: for time that would otherwise
/// be spent waiting. Says whether every thread's are in. Outside a pass it
/// reads nothing.
pub fn remember_threads(pid: pid_t, mut enough: impl FnMut() -> bool) -> bool {
    if MEMO.with(|m| m.borrow().is_none()) {
        return false;
    }
    for tid in tids_of(pid) {
        if enough() {
            return false;
        }
        // What cannot be read now is read (and refused) by the check.
        let _ = memo_read(tid, Memo::Status);
        let _ = memo_read(tid, Memo::Children);
    }
    true
}

/// The text of /proc/ID/status (of a process or a thread), shared with the
/// other reads of a [`with_proc_memo`] pass.
pub fn status_text(id: pid_t) -> Result<String> {
    memo_read(id, Memo::Status).map_err(|e| read_error(id, "status", e))
}

/// /proc/PID/status as key → value.
pub fn status(pid: pid_t) -> Result<HashMap<String, String>> {
    Ok(status_text(pid)?
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect())
}

/// Fields of /proc/PID/stat after the command name; index 0 is field 3 (state).
pub fn stat_fields(pid: pid_t) -> Result<Vec<String>> {
    let s = read(pid, "stat")?;
    let close = s
        .rfind(')')
        .ok_or_else(|| EngineError::Other(format!("bad /proc/{pid}/stat")))?;
    Ok(s[close + 1..]
        .split_whitespace()
        .map(str::to_string)
        .collect())
}

/// The start time of `pid` (field 22 of /proc/PID/stat, clock ticks after
/// boot): with the pid, it names one process, not whichever reuses the pid.
pub fn start_time(pid: pid_t) -> Option<u64> {
    stat_fields(pid).ok()?.get(19)?.parse().ok()
}

/// Whether `pid` is a kernel thread (PF_KTHREAD in the flags, field 9 of
/// /proc/PID/stat): it has no user memory to move, now or ever.
pub fn is_kernel_thread(pid: pid_t) -> bool {
    const PF_KTHREAD: u64 = 0x0020_0000;
    stat_fields(pid)
        .ok()
        .and_then(|f| f.get(6)?.parse::<u64>().ok())
        .is_some_and(|flags| flags & PF_KTHREAD != 0)
}

/// True once `pid` has exited or is exiting: no such process, a zombie
/// (state Z or X, field 3 of /proc/PID/stat), or PF_EXITING in its flags
/// (field 9; set as the exit begins, before the state changes).
pub fn has_exited(pid: pid_t) -> bool {
    const PF_EXITING: u64 = 0x4;
    match stat_fields(pid) {
        Ok(f) => {
            f.first().is_some_and(|st| st == "Z" || st == "X")
                || f.get(6)
                    .and_then(|v| v.parse::<u64>().ok())
                    .is_some_and(|flags| flags & PF_EXITING != 0)
        }
        Err(_) => true,
    }
}

/// Whether process `pid` has exited ([`has_exited`]) or some thread of it
/// is exiting: the process may be on its way out (another thread called
/// `exit_group`), or one thread may be ending on its own.
pub fn exiting(pid: pid_t) -> bool {
    if has_exited(pid) {
        return true;
    }
    tids_of(pid).into_iter().any(has_exited)
}

/// Field number `n` (1-based, as in proc(5)) of /proc/PID/stat.
pub fn stat_field(fields: &[String], n: usize) -> u64 {
    fields
        .get(n - 3)
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(0) as u64
}

pub fn readlink(pid: pid_t, what: &str) -> Result<String> {
    std::fs::read_link(format!("/proc/{pid}/{what}"))
        .ctx(|| format!("readlink /proc/{pid}/{what}"))
        .map(|p| p.to_string_lossy().into_owned())
}

/// The path `/proc` gives the file that `f`, a descriptor of ours, names
/// (as [`readlink`] gives another process's).
pub fn link_of(f: &impl std::os::fd::AsRawFd) -> Result<String> {
    readlink(
        std::process::id() as pid_t,
        &format!("fd/{}", f.as_raw_fd()),
    )
}

pub fn hex_u64(s: &str) -> u64 {
    u64::from_str_radix(s.trim(), 16).unwrap_or(0)
}

/// The first fd of another process (neither `pid` nor this one, which may
/// hold copies while it captures) for which `is_ours(other_pid, fd, link)`
/// says it is one of `pid`'s own files: `(other_pid, link)`. Reads every
/// process's fd table: callers use it only for kinds of file that a process
/// may hold alone or share.
pub fn other_holder(
    pid: pid_t,
    mut is_ours: impl FnMut(pid_t, i32, &str) -> bool,
) -> Option<(pid_t, String)> {
    let me = std::process::id() as pid_t;
    for p in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(other) = p.file_name().to_str().and_then(|s| s.parse::<pid_t>().ok()) else {
            continue;
        };
        if other == pid || other == me {
            continue;
        }
        if let Some(link) = held_by(other, &mut is_ours) {
            return Some((other, link));
        }
    }
    None
}

/// The link of the first fd of process `other` that `is_ours(other, fd,
/// link)` accepts; None if there is none, or the process is gone or not
/// ours to read.
pub fn held_by(other: pid_t, mut is_ours: impl FnMut(pid_t, i32, &str) -> bool) -> Option<String> {
    let fds = std::fs::read_dir(format!("/proc/{other}/fd")).ok()?;
    for f in fds.flatten() {
        let Some(fd) = f.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(link) = std::fs::read_link(f.path()) else {
            continue;
        };
        let link = link.to_string_lossy();
        if is_ours(other, fd, &link) {
            return Some(link.into_owned());
        }
    }
    None
}

/// The thread group (process) of thread or process `tid`, from its status;
/// None once it is gone.
pub fn tgid_of(tid: pid_t) -> Option<pid_t> {
    let s = slurp(&format!("/proc/{tid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The thread tracing thread or process `tid` (TracerPid of its status):
/// None when it is not traced, or gone.
pub fn tracer_of(tid: pid_t) -> Option<pid_t> {
    let s = memo_read(tid, Memo::Status).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .and_then(|v| v.trim().parse().ok())
        .filter(|&t: &pid_t| t > 0)
}

/// A tracer named by [`tracer_of`], for an error: "pid T (COMM)", with the
/// process it is a thread of when that is another ("thread T of process P
/// (COMM)"), or "this program's thread T".
pub fn describe_tracer(t: pid_t) -> String {
    if is_our_thread(t) {
        return format!("this program's thread {t}");
    }
    let tgid = slurp(&format!("/proc/{t}/status")).ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Tgid:"))
            .and_then(|v| v.trim().parse::<pid_t>().ok())
    });
    let comm = |p: pid_t| {
        slurp(&format!("/proc/{p}/comm"))
            .map(|c| c.trim().to_string())
            .unwrap_or_default()
    };
    match tgid {
        Some(g) if g != t => format!("thread {t} of process {g} ({})", comm(g)),
        _ => format!("pid {t} ({})", comm(t)),
    }
}

/// Whether `tid` is a thread of this process (a tracer named by
/// [`tracer_of`] may be any of them).
pub fn is_our_thread(tid: pid_t) -> bool {
    // A system call, where a look in /proc/self/task walks a path (several
    // µs, once per thread checked).
    // SAFETY: tgkill with signal 0 sends nothing: it only says whether
    // thread `tid` is in this thread group (ESRCH if not).
    tid > 0 && unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, 0) } == 0
}

/// The threads of process `pid` (none if it is gone).
pub fn tids_of(pid: pid_t) -> Vec<pid_t> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// A thread of process `pid` traced by a program other than this one: the
/// thread and its tracer, or None.
pub fn foreign_tracer(pid: pid_t) -> Option<(pid_t, pid_t)> {
    let mut tids = tids_of(pid);
    // The leader first: a traced process is named by its leader's tracer.
    tids.sort_unstable_by_key(|&t| (t != pid, t));
    tids.into_iter().find_map(|t| {
        tracer_of(t)
            .filter(|&tr| !is_our_thread(tr))
            .map(|tr| (t, tr))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_memo_reads_each_status_once_per_pass() {
        // This test's own thread, renamed: its status shows the new name
        // only where it is read again.
        std::thread::spawn(|| {
            // SAFETY: gettid takes no arguments.
            let tid = unsafe { libc::syscall(libc::SYS_gettid) } as pid_t;
            let name = |n: &[u8]| {
                // SAFETY: PR_SET_NAME reads a NUL-ended string of at most 16 bytes.
                assert_eq!(unsafe { libc::prctl(libc::PR_SET_NAME, n.as_ptr()) }, 0);
            };
            let seen = || status(tid).unwrap()["Name"].clone();
            name(b"before\0");
            with_proc_memo(|| {
                assert_eq!(seen(), "before");
                name(b"after\0");
                assert_eq!(seen(), "before", "read again within the pass");
                assert_eq!(tracer_of(tid), None);
                with_proc_memo(|| assert_eq!(seen(), "before", "an inner pass shares it"));
                forget_memo();
                assert_eq!(seen(), "after", "forgotten");
                name(b"third\0");
                assert_eq!(seen(), "after");
            });
            assert_eq!(seen(), "third", "outside a pass every read is fresh");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn threads_remembered_ahead_are_read_once_in_the_pass() {
        // SAFETY: gettid takes no arguments.
        let me = unsafe { libc::syscall(libc::SYS_gettid) } as pid_t;
        let pid = std::process::id() as pid_t;
        assert!(
            !remember_threads(pid, || false),
            "outside a pass nothing is read"
        );
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let kid = child.id() as pid_t;
        let (ahead, asked, stopped) = with_proc_memo(|| {
            let ahead = remember_threads(pid, || false);
            // This thread's child, forked after the read: not in its list
            // within the pass.
            let mut late = std::process::Command::new("sleep")
                .arg("5")
                .spawn()
                .unwrap();
            let asked = thread_children(me).unwrap();
            let _ = late.kill();
            let _ = late.wait();
            // Told to stop at once, it reads nothing more and says so.
            let stopped = !remember_threads(pid, || true);
            (ahead, asked, stopped)
        });
        let fresh = thread_children(me).unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert!(ahead, "every thread read");
        assert_eq!(asked, vec![kid], "the list as read ahead");
        assert!(stopped);
        assert_eq!(fresh, vec![kid], "outside the pass, read again");
    }

    #[test]
    fn our_threads_are_told_from_other_processes() {
        // SAFETY: gettid takes no arguments.
        let me = unsafe { libc::syscall(libc::SYS_gettid) } as pid_t;
        assert!(is_our_thread(me));
        assert!(is_our_thread(std::process::id() as pid_t));
        let (other, done_tx, t) = crate::image::tests_support::parked_thread();
        assert!(is_our_thread(other), "a thread this process started");
        drop(done_tx);
        t.join().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let cpid = child.id() as pid_t;
        let theirs = is_our_thread(cpid);
        let _ = child.kill();
        let _ = child.wait();
        assert!(!theirs, "another process");
        assert!(!is_our_thread(1));
        assert!(!is_our_thread(0) && !is_our_thread(-1));
    }

    #[test]
    fn slurp_reads_whole_files_of_any_size() {
        let dir = tempfile::tempdir().unwrap();
        for len in [0usize, 1, 4095, 4096, 4097, 20000] {
            let text: String = (0..len).map(|i| (b'a' + (i % 26) as u8) as char).collect();
            let p = dir.path().join(format!("f{len}"));
            std::fs::write(&p, &text).unwrap();
            assert_eq!(slurp(p.to_str().unwrap()).unwrap(), text, "{len} bytes");
        }
        // A /proc file (its size reads as 0): to its last line.
        let limits = slurp("/proc/self/limits").unwrap();
        assert!(limits.starts_with("Limit") && limits.trim_end().ends_with("us"));
        std::fs::write(dir.path().join("bad"), [0xff, 0xfe]).unwrap();
        let e = slurp(dir.path().join("bad").to_str().unwrap()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        let e = slurp("/proc/self/no-such-file").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    }

    #[test]
    fn parses_map_lines() {
        let m = parse_maps(
            "7f12a2f0e000-7f12a2f10000 r-xp 00000000 00:00 0                          [vdso]\n\
             55d0c0a00000-55d0c0a21000 rw-p 00001000 fe:00 325835 /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2\n\
             7f0000000000-7f0000001000 ---s 00000000 00:01 12 /path with spaces (deleted)\n",
        );
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].path, "[vdso]");
        assert!(m[0].exec && !m[0].write && !m[0].shared);
        assert_eq!(m[1].offset, 0x1000);
        assert_eq!(m[1].inode, 325835);
        assert_eq!(m[2].path, "/path with spaces (deleted)");
        assert!(m[2].shared && !m[2].read);
    }

    #[test]
    fn smaps_of_self_has_flags() {
        let s = smaps(std::process::id() as i32).unwrap();
        assert!(s
            .iter()
            .any(|m| m.path == "[stack]" && m.flags.iter().any(|f| f == "gd")));
    }

    /// Waits until the child `pid`, ending, is a zombie (bounded; while it
    /// is exiting, PF_EXITING is set before the state says Z).
    fn wait_zombie(pid: pid_t) {
        let t0 = std::time::Instant::now();
        while stat_fields(pid).unwrap()[0] != "Z" {
            assert!(t0.elapsed().as_secs() < 10, "process {pid} never ended");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn a_zombie_and_a_missing_process_have_exited_and_we_have_not() {
        assert!(!has_exited(std::process::id() as pid_t));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as pid_t;
        // Not reaped yet: a zombie once it has ended.
        wait_zombie(pid);
        assert!(has_exited(pid), "a zombie has exited");
        child.wait().unwrap();
        // No process: pid_max itself is never given out.
        let max: pid_t = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(has_exited(max));
    }

    #[test]
    fn a_process_is_exiting_once_it_ends_and_not_while_it_sleeps() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as pid_t;
        assert!(!exiting(pid), "a sleeping process is not exiting");
        child.kill().unwrap();
        wait_zombie(pid);
        assert!(exiting(pid), "a zombie is exiting");
        child.wait().unwrap();
    }

    #[test]
    fn kernel_threads_are_told_apart() {
        assert!(!is_kernel_thread(std::process::id() as pid_t));
        // kthreadd, where this pid namespace shows it (not in every container).
        let kthreadd = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<pid_t>().ok())
            .find(|&p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|c| c.trim() == "kthreadd")
                    && std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.is_empty())
            });
        match kthreadd {
            Some(p) => assert!(
                is_kernel_thread(p),
                "kthreadd (pid {p}) not seen as a kernel thread"
            ),
            None => eprintln!("no kthreadd in this pid namespace: only the negative case checked"),
        }
    }
}
