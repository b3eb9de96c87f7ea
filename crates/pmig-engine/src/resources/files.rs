//! Open files, the working directory and the umask.
//!
//! * Regular files and directories are reopened by path with their flags and
//!   offset; descriptors that shared one open file keep sharing it.
//! * /dev/null, /dev/zero, /dev/full, /dev/random and /dev/urandom are
//!   reopened by path.
//! * fds 0, 1 and 2 that were a terminal or a pipe are connected to the
//!   restoring command's own fds 0, 1 and 2, or to files named by the user.
//! * Pipes held by this process alone move with their data (see `pipes`),
//!   eventfds with their count (see `eventfd`), epoll instances with what
//!   they watch (see `epoll`), signalfds with their mask (see `signalfd`),
//!   timerfds with their settings and times (see `timerfd`), inotify
//!   instances with their watches (see `inotify`), named pipes by path with
//!   their data (see `fifos`).
//! * Anything else (sockets, shared pipes, eventfds, epolls, timerfds and
//!   inotify instances, io_uring, ...) is refused at dump time.

use super::holders::HeldAlone;
use super::{Capture, Preflight, Resource};
use crate::error::{unsupported, Ctx, EngineError, Result};
use crate::procfs;
use libc::pid_t;
use serde::{Deserialize, Serialize};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};

pub struct Files;

const REOPENABLE_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];
/// Open flags that survive a reopen.
const KEEP_FLAGS: i32 = libc::O_ACCMODE
    | libc::O_APPEND
    | libc::O_NONBLOCK
    | libc::O_DSYNC
    | libc::O_SYNC
    | libc::O_DIRECT
    | libc::O_NOATIME
    | libc::O_DIRECTORY
    | libc::O_LARGEFILE
    | libc::O_PATH;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StdioKind {
    Terminal,
    /// A pipe, or a unix socket that leads out of the process (format
    /// 1.18): either is replaced on restore.
    Pipe,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FdKind {
    /// A regular file or directory, reopened by path.
    File { path: String, pos: u64, size: u64 },
    /// A harmless character device, reopened by path.
    Device { path: String },
    /// fd 0/1/2 on a terminal or pipe: reconnected on restore.
    Stdio(StdioKind),
    /// Shares the open file description of an earlier fd.
    SameAs(i32),
    /// One end of a pipe the process holds alone (format 1.3; the pipe
    /// itself is in the `pipes` part).
    Pipe { ino: u64, write: bool },
    /// An eventfd the process holds alone (format 1.3; see `eventfd`).
    EventFd { count: u64, semaphore: bool },
    /// An epoll instance the process holds alone (format 1.3; see `epoll`).
    Epoll { watches: Vec<super::epoll::Watch> },
    /// A signalfd (format 1.3; see `signalfd`).
    SignalFd { mask: u64 },
    /// A timerfd the process holds alone (format 1.6; see `timerfd`).
    TimerFd(super::timerfd::TimerFd),
    /// An inotify instance the process holds alone, with its watches
    /// (format 1.6; see `inotify`).
    Inotify { watches: Vec<super::inotify::Watch> },
    /// A deleted file the process holds alone, by its device and inode
    /// (format 1.9; its bytes are in the `ghosts` part), and the offset.
    Ghost { dev: u64, ino: u64, pos: u64 },
    /// A directory deleted since it was opened (format 1.14; see
    /// `deaddirs`): made again, empty and deleted, at the restore.
    DeadDir(super::deaddirs::DeadDir),
    /// A named pipe the process holds alone, reopened by path, with the
    /// bytes buffered in it (format 1.16; see `fifos`).
    Fifo(super::fifos::Fifo),
    /// One end of a unix socket pair the process holds alone, both ends
    /// (format 1.18; the pair itself is in the `socketpairs` part).
    UnixPair { ino: u64 },
    /// A unix socket with no name and no live peer (format 1.19; the
    /// socket itself is in the `lonesockets` part): Java's pre-close
    /// socket, one never connected.
    UnixLone { ino: u64 },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fd {
    pub fd: i32,
    pub flags: i32,
    pub cloexec: bool,
    pub kind: FdKind,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FilesState {
    pub cwd: String,
    pub umask: u32,
    pub fds: Vec<Fd>,
}

/// Which inode each thing a process named by path was, keyed by `K`, on
/// which running kernel. A restore of an unprivileged process opens those
/// paths with the process's own ids ([`crate::fsowner`]); one it may not
/// open itself (a file its shell opened for it as root, say) it still gets
/// back on the same machine, if the path names the very inode it had. The
/// original still holds that inode while the restore runs, so no other
/// file can have its number on its device; `boot_id` makes sure that is
/// this machine. Two parts: [`FileIds`] and [`super::memory::MappedIds`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldInodes<K> {
    /// `/proc/sys/kernel/random/boot_id` where the process was captured.
    pub boot_id: String,
    /// (key, `st_dev`, `st_ino`)
    pub files: Vec<(K, u64, u64)>,
}

/// Part `fileids` (format 1.7): each fd of [`FdKind::File`] by its number,
/// and the working directory under `AT_FDCWD`.
pub type FileIds = HeldInodes<i32>;

impl FileIds {
    pub const PART: &'static str = "fileids";
}

impl<K: PartialEq> HeldInodes<K> {
    /// This machine's boot id (empty if it cannot be read: then no inode
    /// is ever taken for the one captured).
    pub fn this_boot() -> String {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    }

    /// Records `key`'s device and inode, once.
    pub fn add(&mut self, key: K, (dev, ino): (u64, u64)) {
        if !self.files.iter().any(|f| f.0 == key) {
            self.files.push((key, dev, ino));
        }
    }

    /// These, captured on the machine whose boot id is `boot_id`; None if
    /// there are none.
    pub fn stamped(mut self, boot_id: &str) -> Option<Self> {
        self.boot_id = boot_id.to_string();
        (!self.files.is_empty()).then_some(self)
    }

    /// Whether two captures of one process (`self` the earlier) agree on
    /// the inode of every key both have, on the same machine. A key in one
    /// of them only (a file mapped or unmapped between them) does not
    /// matter.
    pub fn agree(&self, later: &Self) -> bool {
        self.boot_id == later.boot_id
            && self.files.iter().all(|(k, dev, ino)| {
                later
                    .files
                    .iter()
                    .find(|f| f.0 == *k)
                    .is_none_or(|f| (f.1, f.2) == (*dev, *ino))
            })
    }

    /// Whether `file`, open here, is the inode captured under `key`.
    pub fn is_same<Q>(&self, key: &Q, file: &std::fs::File) -> bool
    where
        K: std::borrow::Borrow<Q>,
        Q: PartialEq + ?Sized,
    {
        let here = Self::this_boot();
        !here.is_empty()
            && here == self.boot_id
            && self
                .files
                .iter()
                .find(|f| f.0.borrow() == key)
                .is_some_and(|&(_, dev, ino)| {
                    file.metadata()
                        .is_ok_and(|m| (m.dev(), m.ino()) == (dev, ino))
                })
    }
}

impl FilesState {
    pub fn max_fd(&self) -> i32 {
        self.fds.iter().map(|f| f.fd).max().unwrap_or(2)
    }
}

/// fd `fd`'s offset and flags, and its whole fdinfo text.
fn fdinfo(pid: pid_t, fd: i32) -> Result<(u64, i32, String)> {
    let t = procfs::read(pid, &format!("fdinfo/{fd}"))?;
    let pos = t
        .lines()
        .find_map(|l| l.strip_prefix("pos:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let flags = flags_of(&t);
    if flags & libc::O_ASYNC != 0 {
        // Its owner and signal (F_SETOWN, F_SETSIG) are not in the fdinfo;
        // reopened without them, the process would wait for signals that
        // never come.
        let link = procfs::readlink(pid, &format!("fd/{fd}")).unwrap_or_default();
        return Err(unsupported(
            pid,
            format!("signal-driven I/O (O_ASYNC on fd {fd}: {link})"),
        ));
    }
    Ok((pos, flags, t))
}

/// The mount and inode of the file an fd's fdinfo text describes: two
/// descriptors of one open file description agree on both (None where the
/// kernel does not show them).
fn file_key(info: &str) -> Option<(u64, u64)> {
    let field = |k: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.trim().parse().ok())
    };
    Some((field("mnt_id:")?, field("ino:")?))
}

/// The open flags in an fdinfo text.
fn flags_of(info: &str) -> i32 {
    info.lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|v| i32::from_str_radix(v.trim(), 8).ok())
        .unwrap_or(0)
}

/// Refuses a pipe end that a new pipe's end could not be: in packet mode,
/// or (reopened through /proc/PID/fd/N) reading and writing at once.
fn refuse_pipe_flags(pid: pid_t, fd: i32, flags: i32) -> Result<()> {
    if flags & libc::O_DIRECT != 0 {
        return Err(unsupported(pid, format!("a pipe in packet mode (fd {fd})")));
    }
    if flags & libc::O_ACCMODE == libc::O_RDWR {
        return Err(unsupported(
            pid,
            format!("a pipe open for both reading and writing (fd {fd})"),
        ));
    }
    Ok(())
}

pub(crate) fn list_fds(pid: pid_t) -> Result<Vec<i32>> {
    let rd =
        std::fs::read_dir(format!("/proc/{pid}/fd")).map_err(|_| EngineError::NoProcess(pid))?;
    let mut v: Vec<i32> = rd
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    v.sort();
    Ok(v)
}

/// A copy of a descriptor of the process, taken to look at its file: one
/// `pidfd_getfd` and questions asked of the copy, where each question
/// through `/proc/PID/fd/N` walks that path again (about 4 µs a walk here,
/// three or four of them per file, all in the stop for a process with a
/// thousand files).
struct Held {
    file: std::fs::File,
    /// A copy of the process's descriptor (the same open file), not a
    /// path-only descriptor opened through `/proc`: it can be synced.
    copy: bool,
    md: std::fs::Metadata,
    /// The magic number of its file system.
    fs: u32,
}

impl Held {
    /// fd `fd` of `pid`, through `pidfd` where the kernel lets us take a
    /// copy, else through `/proc/PID/fd/N` (opened as a path only). None
    /// if the fd is closed.
    fn take(pid: pid_t, fd: i32, pidfd: Option<&OwnedFd>) -> Result<Option<Held>> {
        let copy = pidfd.and_then(|p| crate::sys::pidfd_getfd(p, fd).ok());
        let (file, copy) = match copy {
            Some(f) => (std::fs::File::from(f), true),
            None => match std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH)
                .open(format!("/proc/{pid}/fd/{fd}"))
            {
                Ok(f) => (f, false),
                // Closed since it was listed (a running process, before the
                // freeze: `find` opens and closes directories all the time).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e).ctx(|| format!("open fd {fd} of process {pid}")),
            },
        };
        let md = match file.metadata() {
            Ok(md) => md,
            Err(e) => return Err(e).ctx(|| format!("stat fd {fd} of process {pid}")),
        };
        let fs = nix::sys::statfs::fstatfs(&file)
            .map(|st| st.filesystem_type().0 as u32)
            .unwrap_or(0);
        Ok(Some(Held { file, copy, md, fs }))
    }
}

/// Classify one fd of a process that may be running, refusing what cannot
/// be restored. Its files are looked at through path-only descriptors: a
/// copy of its descriptor that it closes meanwhile would leave the last
/// close of the file to us (a FIFO's readers would see its end later).
fn classify(pid: pid_t, fd: i32) -> Result<Option<FdKind>> {
    classify_held(pid, fd, None, &mut None)
}

/// Classify one fd, refusing what cannot be restored; the copy of a file's
/// descriptor it looked at is left in `held` (taken through `pidfd`, where
/// given: for a process that is stopped).
fn classify_held(
    pid: pid_t,
    fd: i32,
    pidfd: Option<&OwnedFd>,
    held: &mut Option<Held>,
) -> Result<Option<FdKind>> {
    let link = match procfs::readlink(pid, &format!("fd/{fd}")) {
        Ok(l) => l,
        Err(_) => return Ok(None), // closed meanwhile
    };
    let what = |w: &str| unsupported(pid, format!("{w} (fd {fd}: {link})"));
    if link.starts_with("socket:") {
        // One end of a pair the process holds alone moves (see
        // `socketpairs`; whether it holds the peer too, the precheck and
        // the capture see).
        if let Some(ino) = super::socketpairs::inode_of(&link) {
            // A unix socket on fds 0-2 that leads out of the process (a
            // supervisor's socketpair, journald's stream) is stdio, replaced
            // on restore as a pipe there is.
            if fd <= 2 && super::socketpairs::leads_out(pid, ino) {
                return Ok(Some(FdKind::Stdio(StdioKind::Pipe)));
            }
            match super::socketpairs::classify(ino) {
                Ok(_) => return Ok(Some(FdKind::UnixPair { ino })),
                Err(_) if super::lonesockets::lone(ino).is_some() => {
                    return Ok(Some(FdKind::UnixLone { ino }))
                }
                // Why this unix socket is none of those.
                Err(why) if why != "a socket" => return Err(what(why)),
                Err(_) => {}
            }
        }
        return Err(what(socket_kind(pid, &link)));
    }
    if link.contains("io_uring") {
        return Err(what("io_uring"));
    }
    if link.starts_with("pipe:") {
        // A standard stream on a pipe is replaced by the destination's
        // stdio, except a read end that still holds bytes but whose
        // writers are all gone (the shell's here-string, the end of a
        // pipeline that has exited): nothing else will come, and it moves
        // as a pipe, with those bytes. (Empty, it gives end-of-file, as
        // `/dev/null` does.)
        if fd <= 2 && !super::pipes::unread_left(pid, fd) {
            return Ok(Some(FdKind::Stdio(StdioKind::Pipe)));
        }
        return match super::pipes::inode_of(&link) {
            // Which end: from the fd's flags, in the capture.
            Some(ino) => Ok(Some(FdKind::Pipe { ino, write: false })),
            None => Err(what("this kind of pipe")),
        };
    }
    if link == super::epoll::LINK {
        // What it watches: from the fdinfo, in the capture.
        return Ok(Some(FdKind::Epoll { watches: vec![] }));
    }
    if link == super::signalfd::LINK {
        // Its mask: from the fdinfo, in the capture.
        return Ok(Some(FdKind::SignalFd { mask: 0 }));
    }
    if link == super::eventfd::LINK {
        // Its count: from the fdinfo, in the capture.
        return Ok(Some(FdKind::EventFd {
            count: 0,
            semaphore: false,
        }));
    }
    if link == super::timerfd::LINK {
        // Its clock and times: from the fdinfo, in the capture.
        return Ok(Some(FdKind::TimerFd(super::timerfd::TimerFd::default())));
    }
    if link == super::inotify::LINK {
        // Its watches: from the fdinfo, in the capture.
        return Ok(Some(FdKind::Inotify { watches: vec![] }));
    }
    if link.starts_with("anon_inode:") {
        return Err(what(
            link.trim_start_matches("anon_inode:")
                .trim_matches(|c| c == '[' || c == ']'),
        ));
    }
    // Looked at through a descriptor of our own: a process that runs (the
    // checks before the freeze) may close fd `fd` and open another file
    // under its number between two looks at it.
    let Some(h) = Held::take(pid, fd, pidfd)? else {
        return Ok(None);
    };
    let h = &*held.insert(h);
    let (md, fs) = (&h.md, h.fs);
    // A POSIX message queue reads as a path (its name, "(deleted)" once
    // unlinked) but lives in the mqueue file system: reopened by path on
    // another node it would be some other file, or nothing.
    if fs == MQUEUE_MAGIC {
        return Err(what("a POSIX message queue"));
    }
    if super::ghosts::deleted_path(&link).is_some() {
        // No path leads to it: its bytes move in the image (see `ghosts`).
        if procfs::link_of(&h.file).is_ok_and(|now| now != link) {
            // Another file now: what the process holds at its freeze is
            // what the capture takes (and checks again).
            return Ok(None);
        }
        if let Some(d) = super::deaddirs::of(md, &link) {
            return Ok(Some(FdKind::DeadDir(d)));
        }
        if let Some(why) = super::ghosts::refusal(md) {
            return Err(what(&why));
        }
        // A memfd reads as "/memfd:NAME (deleted)": made again by
        // `memfd_create`, unless it holds huge pages.
        if fs == nix::sys::statfs::HUGETLBFS_MAGIC.0 as u32 {
            return Err(what("a file of huge pages (hugetlbfs)"));
        }
        return Ok(Some(FdKind::Ghost {
            dev: md.dev(),
            ino: md.ino(),
            pos: 0,
        }));
    }
    if names_a_process(&link) {
        // Reopened by path it would name the frozen original, then
        // nothing (or another node's process of that number).
        return Err(what("a file of a process's /proc directory"));
    }
    if !link.starts_with('/') {
        return Err(what("this kind of file"));
    }
    let ft = md.file_type();
    if ft.is_file() || ft.is_dir() {
        return Ok(Some(FdKind::File {
            path: link,
            pos: 0,
            size: md.size(),
        }));
    }
    if ft.is_char_device() {
        if REOPENABLE_DEVICES.contains(&link.as_str()) {
            return Ok(Some(FdKind::Device { path: link }));
        }
        let major = libc::major(md.rdev());
        let is_tty = major == 136
            || major == 4
            || major == 5
            || link.starts_with("/dev/pts/")
            || link.starts_with("/dev/tty");
        if is_tty && fd <= 2 {
            return Ok(Some(FdKind::Stdio(StdioKind::Terminal)));
        }
        return Err(what(if is_tty {
            "a terminal other than stdio"
        } else {
            "a character device"
        }));
    }
    if ft.is_fifo() {
        if fd <= 2 {
            return Ok(Some(FdKind::Stdio(StdioKind::Pipe)));
        }
        return super::fifos::classify(&link, md)
            .map(|f| Some(FdKind::Fifo(f)))
            .map_err(|why| what(&why));
    }
    Err(what("this kind of file"))
}

/// A thread of `pid` that does not share the process's filesystem
/// attributes (working directory, root, umask): it unshared them
/// (`unshare(CLONE_FS)`). The capture takes the process's, and every
/// thread of the restored process shares them. One `kcmp` per thread
/// against the leader; a thread that exits meanwhile does not count, and
/// neither does any once the leader has exited (it has no attributes
/// left to compare with).
fn thread_with_own_fs(pid: pid_t) -> Option<pid_t> {
    let odd = crate::procfs::tids_of(pid)
        .into_iter()
        .find(|&t| t != pid && crate::sys::same_fs(pid, t) == Some(false))?;
    let exited = crate::procfs::has_exited;
    (!exited(pid) && !exited(odd)).then_some(odd)
}

/// Sets the offset of the open file behind `f` (shared with every
/// descriptor of it) to `pos`.
fn seek(f: &impl std::os::fd::AsRawFd, pos: u64) -> std::io::Result<()> {
    // SAFETY: lseek on a descriptor the caller holds.
    if unsafe { libc::lseek(f.as_raw_fd(), pos as i64, libc::SEEK_SET) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

impl Resource for Files {
    const PART: &'static str = "files";
    type State = FilesState;

    fn precheck(pid: pid_t) -> Result<()> {
        let mut alone = HeldAlone::default();
        let mut stdio_pipes = Vec::new();
        // The files of the locks it holds (see `locks`).
        let mut locked = Vec::new();
        // Unix socket ends: inode, fd, peer.
        let mut socket_ends = Vec::new();
        for fd in list_fds(pid)? {
            let kind = classify(pid, fd)?;
            match kind {
                Some(FdKind::Stdio(StdioKind::Pipe)) => stdio_pipes.push(fd),
                Some(FdKind::Pipe { ino, .. }) => alone.pipes.push(ino),
                Some(FdKind::UnixPair { ino }) => {
                    alone.sockets.push(ino);
                    let peer = super::socketpairs::diag(ino).and_then(|d| d.peer);
                    socket_ends.push((ino, fd, peer.unwrap_or(0)));
                }
                Some(FdKind::UnixLone { ino }) => alone.sockets.push(ino),
                Some(FdKind::EventFd { .. }) => {
                    alone.eventfds.extend(super::eventfd::id_of(pid, fd));
                }
                Some(FdKind::Epoll { .. }) => alone.epolls.push(fd),
                Some(FdKind::TimerFd(_) | FdKind::Inotify { .. }) => alone.by_file.push(fd),
                Some(FdKind::Ghost { dev, ino, .. }) => alone.ghosts.push((dev, ino)),
                Some(FdKind::Fifo(ref f)) => alone.fifos.push((f.path.clone(), f.dev, f.ino)),
                _ => {}
            }
            if kind.is_some() {
                if let Ok(info) = procfs::read(pid, &format!("fdinfo/{fd}")) {
                    super::locks::check(pid, fd, &info, &mut alone.locked, &mut locked)?;
                    if matches!(kind, Some(FdKind::Pipe { .. })) {
                        refuse_pipe_flags(pid, fd, flags_of(&info))?;
                    }
                }
            }
        }
        // Stdio is replaced on restore: a pipe from it to another fd of the
        // process would be cut in two.
        for &fd in &stdio_pipes {
            let link = procfs::readlink(pid, &format!("fd/{fd}")).unwrap_or_default();
            if let Some(ino) = super::pipes::inode_of(&link) {
                if alone.pipes.contains(&ino) {
                    return Err(unsupported(
                        pid,
                        format!("a pipe between fd {fd} (stdio) and another fd ({link})"),
                    ));
                }
            }
        }
        super::socketpairs::check_pairs(pid, &socket_ends)?;
        alone.refuse_shared(pid)?;
        super::locks::refuse_contested(pid, &locked)?;
        let root = procfs::readlink(pid, "root")?;
        if root != "/" {
            return Err(unsupported(pid, format!("a chroot ({root})")));
        }
        // A deleted working directory moves (see `deaddirs`).
        if let Some(tid) = thread_with_own_fs(pid) {
            return Err(unsupported(
                pid,
                format!(
                    "a thread ({tid}) with a working directory, root and umask of its own (unshare(CLONE_FS))"
                ),
            ));
        }
        Ok(())
    }

    fn capture(cx: &mut Capture) -> Result<FilesState> {
        let pid = cx.pid;
        let mut fds: Vec<Fd> = Vec::new();
        // Beside each of `fds`: its open file's mount and inode.
        let mut keys: Vec<Option<(u64, u64)>> = Vec::new();
        let mut flush = NetworkFlush::new(pid);
        // Copies of the files' descriptors are taken through it (`Held`).
        let pidfd = crate::sys::pidfd_open(pid).ok();
        for fd in list_fds(pid)? {
            let mut held = None;
            let Some(mut kind) = classify_held(pid, fd, pidfd.as_ref(), &mut held)? else {
                continue;
            };
            let (pos, flags, info) = fdinfo(pid, fd)?;
            super::locks::found(pid, fd, &info, &mut cx.locks)?;
            if matches!(kind, FdKind::File { .. }) {
                match &held {
                    Some(h) if h.copy => flush.held(h, flags, || format!("fd {fd}"))?,
                    _ => flush.fd(fd, flags)?,
                }
            }
            if let FdKind::Ghost { dev, ino, pos: p } = &mut kind {
                *p = pos;
                cx.ghost_fds.push(super::ghosts::GhostFd {
                    fd,
                    dev: *dev,
                    ino: *ino,
                });
            }
            if let FdKind::File { pos: p, .. } = &mut kind {
                *p = pos;
                if cx.keep_inodes {
                    if let Some(h) = &held {
                        cx.file_ids.add(fd, (h.md.dev(), h.md.ino()));
                    }
                }
            }
            if let FdKind::SignalFd { mask } = &mut kind {
                *mask = super::signalfd::capture(pid, fd, &info)?;
            }
            if let FdKind::Epoll { watches } = &mut kind {
                *watches = super::epoll::capture(pid, fd, &info)?;
            }
            if let FdKind::Inotify { watches } = &mut kind {
                *watches = super::inotify::capture(pid, fd, &info)?;
            }
            if let FdKind::TimerFd(t) = &mut kind {
                *t = super::timerfd::capture(pid, fd)?;
            }
            if let FdKind::EventFd { count, semaphore } = &mut kind {
                (*count, *semaphore) = super::eventfd::capture(pid, fd, &info)?;
            }
            if let FdKind::Pipe { write, .. } = &mut kind {
                *write = flags & libc::O_ACCMODE == libc::O_WRONLY;
                refuse_pipe_flags(pid, fd, flags)?;
            }
            if let FdKind::Fifo(f) = &mut kind {
                let first = !fds.iter().any(
                    |p| matches!(&p.kind, FdKind::Fifo(g) if (g.dev, g.ino) == (f.dev, f.ino)),
                );
                super::fifos::capture(pid, fd, f, first)?;
            }
            // Shared open file description with an earlier fd? Asked of
            // the kernel only for the fds of the same file (one call per
            // pair: a process with a thousand files would otherwise take
            // half a million calls, about half a second, in its stop).
            let key = file_key(&info);
            if !matches!(kind, FdKind::Stdio(_)) {
                if let Some((prev, _)) = fds.iter().zip(&keys).find(|(p, k)| {
                    !matches!(p.kind, FdKind::SameAs(_) | FdKind::Stdio(_))
                        && (key.is_none() || k.is_none() || **k == key)
                        && crate::sys::same_file(pid, p.fd, fd) == Some(true)
                }) {
                    kind = FdKind::SameAs(prev.fd);
                }
            }
            if let FdKind::Pipe { ino, write } = kind {
                cx.pipe_ends.push(super::pipes::End { ino, fd, write });
            }
            if let FdKind::UnixPair { ino } = kind {
                cx.socket_ends.push(super::socketpairs::End { ino, fd });
            }
            if let FdKind::UnixLone { ino } = kind {
                cx.lone_sockets.push(super::lonesockets::End { ino, fd });
            }
            fds.push(Fd {
                fd,
                flags: flags & !libc::O_CLOEXEC,
                cloexec: flags & libc::O_CLOEXEC != 0,
                kind,
            });
            keys.push(key);
        }
        let st = cx.status()?;
        let umask = st
            .get("Umask")
            .and_then(|u| u32::from_str_radix(u, 8).ok())
            .unwrap_or(0o022);
        if cx.keep_inodes {
            if let Ok(md) = std::fs::metadata(format!("/proc/{pid}/cwd")) {
                cx.file_ids.add(libc::AT_FDCWD, (md.dev(), md.ino()));
            }
        }
        Ok(FilesState {
            cwd: procfs::readlink(pid, "cwd")?,
            umask,
            fds,
        })
    }

    /// Descriptors opened, closed, duplicated or given other flags since
    /// the skeleton's capture are followed ([`Follow`]): files and devices
    /// are opened again by path inside the skeleton, as the process itself,
    /// copies are made with `dup3`; a new descriptor of any other kind
    /// makes it stale. So are a new working directory and umask.
    ///
    /// What the kernel objects of the descriptors it keeps hold may have
    /// moved on, and is set through a copy of the process's descriptor
    /// (which shares it): a file's offset; a timerfd's settings, time left
    /// and expirations not read (a skeleton's are created disarmed, and
    /// armed here); an eventfd's count. An inotify instance's queue is
    /// emptied: its events happened while the skeleton was held (the
    /// source process saw them).
    fn update(
        pre: &FilesState,
        fin: &FilesState,
        same: bool,
        cx: &mut super::Update,
    ) -> Result<()> {
        let was: Vec<Option<&Fd>> = if same {
            pre.fds.iter().map(Some).collect()
        } else {
            let follow = Follow::plan(pre, fin)?;
            follow.apply(pre, fin, cx)?;
            let pre_fds = by_number(pre);
            fin.fds
                .iter()
                .map(|b| {
                    follow
                        .kept
                        .contains(&b.fd)
                        .then(|| pre_fds.get(&b.fd).copied())
                        .flatten()
                })
                .collect()
        };
        let mut pidfd = None;
        for (a, b) in was.into_iter().zip(&fin.fds) {
            let needed = match (a.map(|a| &a.kind), &b.kind) {
                (Some(FdKind::File { pos: was, .. }), FdKind::File { pos, .. })
                | (Some(FdKind::Ghost { pos: was, .. }), FdKind::Ghost { pos, .. }) => was != pos,
                // Opened again just now, at offset 0.
                (None, FdKind::File { pos, .. } | FdKind::Ghost { pos, .. }) => *pos != 0,
                (Some(FdKind::EventFd { count: was, .. }), FdKind::EventFd { count, .. }) => {
                    was != count
                }
                (_, FdKind::TimerFd(_) | FdKind::Inotify { .. }) => true,
                _ => false,
            };
            if !needed {
                continue;
            }
            if pidfd.is_none() {
                pidfd = Some(crate::sys::pidfd_open(cx.pid)?);
            }
            let f = crate::sys::pidfd_getfd(pidfd.as_ref().expect("just opened"), b.fd)?;
            match (a.map(|a| &a.kind), &b.kind) {
                (_, FdKind::File { pos, .. } | FdKind::Ghost { pos, .. }) => seek(&f, *pos)
                    .map_err(|_| crate::error::errno_err(format!("fd {}: seek to {pos}", b.fd)))?,
                (_, FdKind::TimerFd(t)) => super::timerfd::arm(&f, t)?,
                (
                    Some(FdKind::EventFd { count: was, .. }),
                    FdKind::EventFd { count, semaphore },
                ) => super::eventfd::set_count(&f, *was, *count, *semaphore)?,
                (_, FdKind::Inotify { .. }) => super::inotify::drain_queued(&f)?,
                _ => {}
            }
        }
        Ok(())
    }

    fn preflight(s: &FilesState, pf: &mut Preflight) -> Result<()> {
        let mut src_of: std::collections::HashMap<i32, i32> = Default::default();
        // Held until every descriptor is open.
        let mut fifo_ends = super::fifos::Ends::default();
        for f in &s.fds {
            let src = match &f.kind {
                FdKind::File { path, pos, .. } => {
                    let fd = reopen(pf, f, path).map_err(|e| {
                        EngineError::Incompatible(format!("fd {}: cannot reopen {path}: {e}", f.fd))
                    })?;
                    // The offset lives in the open file description, which the
                    // new process shares with us.
                    // SAFETY: lseek on an fd we own.
                    if f.flags & libc::O_PATH == 0
                        && unsafe { libc::lseek(fd, *pos as i64, libc::SEEK_SET) } < 0
                    {
                        return Err(crate::error::errno_err(format!(
                            "fd {}: seek {path} to {pos}",
                            f.fd
                        )));
                    }
                    fd
                }
                FdKind::Device { path } => pf.open_keep_as_owner(path, f.flags & KEEP_FLAGS)?,
                FdKind::DeadDir(d) => super::deaddirs::reopen(pf, d, f.fd, f.flags & KEEP_FLAGS)?,
                FdKind::Ghost { dev, ino, pos } => {
                    let made = *pf.ghosts.get(&(*dev, *ino)).ok_or_else(|| {
                        EngineError::Image(pmig_image::ImageError::MissingPart(format!(
                            "ghosts: the deleted file of fd {}",
                            f.fd
                        )))
                    })?;
                    // A new open of the file made again: an offset and
                    // flags of its own, as the process's descriptor had.
                    let path = format!("/proc/self/fd/{made}");
                    let file = super::open_with(&path, f.flags & KEEP_FLAGS)
                        .ctx(|| format!("open the deleted file of fd {} again", f.fd))?;
                    seek(&file, *pos)
                        .ctx(|| format!("fd {}: seek the deleted file to {pos}", f.fd))?;
                    pf.keep(file.into())?
                }
                FdKind::Stdio(_) => match &pf.opts.stdio[f.fd as usize] {
                    Some(path) => {
                        let flags = if f.fd == 0 {
                            libc::O_RDONLY
                        } else {
                            libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND
                        };
                        // O_NOCTTY: were pmig a session leader without a
                        // controlling terminal, opening a terminal would
                        // make it ours, and the process could not take it.
                        let file = std::fs::OpenOptions::new()
                            .read(f.fd == 0)
                            .append(f.fd != 0)
                            .create(f.fd != 0)
                            .custom_flags(libc::O_NOCTTY)
                            .open(path)
                            .ctx(|| {
                                format!(
                                    "open {} for fd {} (flags {flags:#o})",
                                    path.display(),
                                    f.fd
                                )
                            })?;
                        pf.keep(file.into())?
                    }
                    None => {
                        // SAFETY: fds 0-2 of this process stay open while we borrow them.
                        let ours = unsafe { BorrowedFd::borrow_raw(f.fd) };
                        let dup: OwnedFd = ours.try_clone_to_owned().ctx(|| {
                            format!("duplicate our fd {} for the restored process", f.fd)
                        })?;
                        pf.keep(dup)?
                    }
                },
                FdKind::Pipe { ino, write } => {
                    let (r, w) = *pf.pipes.get(ino).ok_or_else(|| {
                        EngineError::Image(pmig_image::ImageError::MissingPart(format!(
                            "pipes: pipe:[{ino}] of fd {}",
                            f.fd
                        )))
                    })?;
                    let end = if *write { w } else { r };
                    set_nonblocking(end, f)?;
                    end
                }
                FdKind::UnixPair { ino } | FdKind::UnixLone { ino } => {
                    let part = match &f.kind {
                        FdKind::UnixPair { .. } => "socketpairs",
                        _ => "lonesockets",
                    };
                    let end = *pf.sockets.get(ino).ok_or_else(|| {
                        EngineError::Image(pmig_image::ImageError::MissingPart(format!(
                            "{part}: socket:[{ino}] of fd {}",
                            f.fd
                        )))
                    })?;
                    set_nonblocking(end, f)?;
                    end
                }
                FdKind::EventFd { count, semaphore } => {
                    super::eventfd::preflight(pf, *count, *semaphore, f.flags)?
                }
                FdKind::SignalFd { mask } => super::signalfd::preflight(pf, *mask, f.flags)?,
                FdKind::Fifo(ff) => super::fifos::reopen(pf, &mut fifo_ends, f.fd, f.flags, ff)?,
                FdKind::TimerFd(t) => super::timerfd::preflight(pf, t, f.flags)?,
                FdKind::Inotify { watches } => super::inotify::preflight(pf, watches, f.flags)?,
                FdKind::Epoll { .. } => {
                    let ep = super::epoll::preflight(pf)?;
                    set_nonblocking(ep, f)?;
                    ep
                }
                FdKind::SameAs(other) => *src_of.get(other).ok_or_else(|| {
                    EngineError::Image(pmig_image::ImageError::MissingPart(format!(
                        "files: fd {other}"
                    )))
                })?,
            };
            src_of.insert(f.fd, src);
            pf.child.installs.push((src, f.fd, f.cloexec));
        }
        // Unless `deaddirs` made it again: a deleted one.
        if pf.child.cwd.is_none() {
            pf.child.cwd = Some(cwd_fd(pf, &s.cwd)?);
        }
        pf.child.umask = Some(s.umask);
        Ok(())
    }

    fn plan(s: &FilesState, cx: &mut super::PlanCx) -> Result<()> {
        for f in &s.fds {
            if let FdKind::Epoll { watches } = &f.kind {
                super::epoll::plan(cx, f.fd, watches);
            }
        }
        Ok(())
    }
}

/// The open-file-description flags `fcntl(F_SETFL)` sets; a descriptor
/// whose other flags differ is another open.
const SETFL_FLAGS: i32 =
    libc::O_APPEND | libc::O_ASYNC | libc::O_DIRECT | libc::O_NOATIME | libc::O_NONBLOCK;

/// `k` without what moves on while a process runs (a file's offset and
/// size, a timerfd's times, an eventfd's count): what a descriptor a
/// skeleton keeps must already be.
fn settled(k: &FdKind) -> FdKind {
    match k {
        FdKind::File { path, .. } => FdKind::File {
            path: path.clone(),
            pos: 0,
            size: 0,
        },
        FdKind::Ghost { dev, ino, .. } => FdKind::Ghost {
            dev: *dev,
            ino: *ino,
            pos: 0,
        },
        FdKind::TimerFd(t) => FdKind::TimerFd(super::timerfd::TimerFd {
            clock: t.clock,
            ..Default::default()
        }),
        FdKind::EventFd { semaphore, .. } => FdKind::EventFd {
            count: 0,
            semaphore: *semaphore,
        },
        FdKind::Fifo(f) => FdKind::Fifo(super::fifos::Fifo {
            capacity: 0,
            data: Vec::new(),
            ..f.clone()
        }),
        k => k.clone(),
    }
}

/// What kind of descriptor `k` is, for messages.
fn kind_name(k: &FdKind) -> &'static str {
    match k {
        FdKind::File { .. } => "a file",
        FdKind::Device { .. } => "a device",
        FdKind::Stdio(_) => "a standard stream",
        FdKind::SameAs(_) => "a copy of another descriptor",
        FdKind::Pipe { .. } => "a pipe",
        FdKind::EventFd { .. } => "an eventfd",
        FdKind::Epoll { .. } => "an epoll instance",
        FdKind::SignalFd { .. } => "a signalfd",
        FdKind::TimerFd(_) => "a timerfd",
        FdKind::Inotify { .. } => "an inotify instance",
        FdKind::Ghost { .. } => "a deleted file",
        FdKind::DeadDir(_) => "a deleted directory",
        FdKind::Fifo(_) => "a named pipe",
        FdKind::UnixPair { .. } => "a unix socket pair",
        FdKind::UnixLone { .. } => "a unix socket with no peer",
    }
}

/// The stand-in a skeleton holds where the file of a descriptor is gone.
const STAND_IN: &str = "/dev/null";

/// A skeleton is restored from a capture made while the process ran, and
/// a file it had open then may be gone by the time the skeleton is made:
/// a temporary file it has deleted since, as compilers, `sort` and
/// databases do all the time. The skeleton holds such a descriptor open
/// on `/dev/null` instead, and `s` and `ids` (the skeleton's own state)
/// say so, so that the bring-up never takes the stand-in for the file: the
/// capture of the stop then closes it, opens what the process has there
/// by then, or, if the process still holds the deleted file, finds the
/// skeleton stale (and the stop is restored the ordinary way). Returns
/// the descriptors given a stand-in, and the paths they had.
pub fn stand_ins_for_gone(s: &mut FilesState, ids: &mut Option<FileIds>) -> Vec<(i32, String)> {
    let gone = |path: &str| match std::fs::symlink_metadata(path) {
        Ok(_) => false,
        Err(e) => {
            e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR)
        }
    };
    let mut stood_in = Vec::new();
    for f in &mut s.fds {
        let FdKind::File { path, .. } = &f.kind else {
            continue;
        };
        if !gone(path) {
            continue;
        }
        stood_in.push((f.fd, path.clone()));
        f.kind = FdKind::Device {
            path: STAND_IN.into(),
        };
        f.flags = libc::O_RDONLY;
    }
    if let Some(ids) = ids {
        ids.files
            .retain(|(k, ..)| !stood_in.iter().any(|(fd, _)| fd == k));
    }
    stood_in
}

/// A capture's descriptors by number.
fn by_number(s: &FilesState) -> std::collections::HashMap<i32, &Fd> {
    s.fds.iter().map(|a| (a.fd, a)).collect()
}

/// How a held skeleton's descriptors become those of the capture of the
/// stop (`fin`) from those of its own capture (`pre`).
#[derive(Debug, Default)]
struct Follow<'a> {
    /// The descriptors (numbers) whose open file the skeleton already
    /// has: the same number of the same kind, path and open flags in both
    /// captures, and, for a copy, a copy of a kept one.
    kept: std::collections::BTreeSet<i32>,
    /// The skeleton's descriptors to close: gone, or another open now.
    close: Vec<i32>,
    /// `fin`'s descriptors to open (files and devices, by path) or to copy
    /// (`dup3`), in order, so that a copy's original comes first.
    open: Vec<&'a Fd>,
    /// Kept descriptors whose `F_SETFL` flags or close-on-exec changed.
    flags: Vec<&'a Fd>,
}

impl<'a> Follow<'a> {
    /// Stale if `fin` has a new descriptor of a kind that is not reopened
    /// by path or copied, or a changed standard stream.
    fn plan(pre: &FilesState, fin: &'a FilesState) -> Result<Follow<'a>> {
        let mut f = Follow::default();
        let pre_fds = by_number(pre);
        for b in &fin.fds {
            let was = pre_fds.get(&b.fd).copied();
            let kept = was.is_some_and(|a| {
                settled(&a.kind) == settled(&b.kind)
                    && (a.flags & !SETFL_FLAGS) == (b.flags & !SETFL_FLAGS)
                    && match b.kind {
                        FdKind::SameAs(x) => f.kept.contains(&x),
                        _ => true,
                    }
            });
            if kept {
                f.kept.insert(b.fd);
                let a = was.expect("kept");
                if a.flags != b.flags || a.cloexec != b.cloexec {
                    f.flags.push(b);
                }
                continue;
            }
            match b.kind {
                FdKind::File { .. }
                | FdKind::Device { .. }
                | FdKind::Ghost { .. }
                | FdKind::SameAs(_) => f.open.push(b),
                ref k => {
                    return Err(crate::error::stale(format!(
                        "its open files changed: fd {} ({}) is new or changed",
                        b.fd,
                        kind_name(k)
                    )))
                }
            }
        }
        f.close = pre
            .fds
            .iter()
            .map(|a| a.fd)
            .filter(|fd| !f.kept.contains(fd))
            .collect();
        Ok(f)
    }

    /// Does it in the held skeleton (thread 0): closes, opens and copies,
    /// flags, then the working directory and umask.
    fn apply(&self, pre: &FilesState, fin: &FilesState, cx: &mut super::Update) -> Result<()> {
        if let Some(b) = self.open.iter().find(|b| Some(b.fd) == cx.process_uffd) {
            return Err(crate::error::stale(format!(
                "its open files changed: fd {} is new, and the skeleton holds its userfaultfd there",
                b.fd
            )));
        }
        for &fd in &self.close {
            cx.call(0, libc::SYS_close, &[fd as u64], || {
                format!("close fd {fd}")
            })?;
        }
        for b in &self.open {
            let cloexec = if b.cloexec { libc::O_CLOEXEC } else { 0 };
            match &b.kind {
                FdKind::File { path, .. } | FdKind::Device { path } => {
                    open_in_skeleton(cx, b, path)?
                }
                FdKind::Ghost { dev, ino, .. } => {
                    // Through another descriptor of the same file that the
                    // skeleton keeps, else the file made again for the stop
                    // (`ghosts::bring_up`), named for the moment it takes.
                    let same = fin.fds.iter().find(|k| {
                        self.kept.contains(&k.fd)
                            && matches!(k.kind, FdKind::Ghost { dev: d, ino: i, .. } if (d, i) == (*dev, *ino))
                    });
                    if let Some(k) = same {
                        open_in_skeleton(cx, b, &format!("/proc/self/fd/{}", k.fd))?;
                        continue;
                    }
                    let made = cx
                        .made_ghosts
                        .iter()
                        .find(|m| m.source == (*dev, *ino))
                        .ok_or_else(|| {
                            crate::error::stale(format!(
                                "its open files changed: fd {} is a deleted file not made again",
                                b.fd
                            ))
                        })?;
                    let name = made
                        .named(&b.fd.to_string())
                        .map_err(|e| crate::error::stale(e.to_string()))?;
                    let opened = open_in_skeleton(cx, b, &name);
                    let _ = std::fs::remove_file(&name);
                    opened?;
                }
                FdKind::SameAs(x) => cx.call(
                    0,
                    libc::SYS_dup3,
                    &[*x as u64, b.fd as u64, cloexec as u64],
                    || format!("copy fd {x} to fd {}", b.fd),
                )?,
                _ => unreachable!("only files, deleted files, devices and copies are opened"),
            }
        }
        for b in &self.flags {
            let fl = (b.flags & SETFL_FLAGS) as u64;
            cx.call(
                0,
                libc::SYS_fcntl,
                &[b.fd as u64, libc::F_SETFL as u64, fl],
                || format!("set fd {}'s flags", b.fd),
            )?;
            let fd_flags = if b.cloexec { libc::FD_CLOEXEC } else { 0 } as u64;
            cx.call(
                0,
                libc::SYS_fcntl,
                &[b.fd as u64, libc::F_SETFD as u64, fd_flags],
                || format!("set fd {}'s close-on-exec", b.fd),
            )?;
        }
        if pre.cwd != fin.cwd {
            cx.call_with_path(libc::SYS_chdir, &fin.cwd, 0, &[0])?
                .map_err(|e| {
                    crate::error::stale(format!(
                        "its working directory changed, and {} is not one in the skeleton ({e})",
                        fin.cwd
                    ))
                })?;
        }
        if pre.umask != fin.umask {
            cx.frozen.inject(0, libc::SYS_umask, &[fin.umask as u64])?;
        }
        Ok(())
    }
}

/// Opens `path` in the held skeleton as the process itself, as fd `b.fd`
/// with `b`'s flags (stale if it does not open).
fn open_in_skeleton(cx: &mut super::Update, b: &Fd, path: &str) -> Result<()> {
    let cloexec = if b.cloexec { libc::O_CLOEXEC } else { 0 };
    let flags = (b.flags & KEEP_FLAGS) | libc::O_CLOEXEC;
    let r = cx.call_with_path(
        libc::SYS_openat,
        path,
        1,
        &[libc::AT_FDCWD as u64, 0, flags as u64, 0],
    )?;
    let got = r.map_err(|e| {
        crate::error::stale(format!(
            "its open files changed: fd {}: {path} does not open in the skeleton ({e})",
            b.fd
        ))
    })? as i32;
    if got != b.fd {
        cx.call(
            0,
            libc::SYS_dup3,
            &[got as u64, b.fd as u64, cloexec as u64],
            || format!("move {path} to fd {}", b.fd),
        )?;
        cx.call(0, libc::SYS_close, &[got as u64], || {
            format!("close fd {got}")
        })?;
    } else if !b.cloexec {
        cx.call(
            0,
            libc::SYS_fcntl,
            &[got as u64, libc::F_SETFD as u64, 0],
            || format!("clear fd {got}'s close-on-exec"),
        )?;
    }
    Ok(())
}

/// The inodes of the open files ([`FileIds`]) of both captures, as far as
/// a skeleton holds them: those of the descriptors it keeps, and of the
/// working directory if that stays. The others it opens by path as the
/// process itself, as a restore does first. Stale if they differ (a file
/// replaced under the same path and opened again), or if the descriptors
/// cannot be followed at all.
pub fn compare_ids(
    pre: &FilesState,
    fin: &FilesState,
    pre_ids: &Option<FileIds>,
    fin_ids: &Option<FileIds>,
) -> Result<()> {
    if pre_ids == fin_ids {
        return Ok(());
    }
    let kept = Follow::plan(pre, fin)?.kept;
    let held = |ids: &Option<FileIds>| {
        let mut v: Vec<(i32, u64, u64)> = ids
            .iter()
            .flat_map(|i| i.files.iter().copied())
            .filter(|&(k, ..)| {
                if k == libc::AT_FDCWD {
                    pre.cwd == fin.cwd
                } else {
                    kept.contains(&k)
                }
            })
            .collect();
        v.sort_unstable();
        v
    };
    let boots = pre_ids.as_ref().zip(fin_ids.as_ref());
    if boots.is_some_and(|(a, b)| a.boot_id != b.boot_id) || held(pre_ids) != held(fin_ids) {
        return Err(crate::error::stale("its open files' inodes changed"));
    }
    Ok(())
}

/// Reopens the file of fd `f` by `path` ([`open_as_owner`]).
fn reopen(pf: &mut Preflight, f: &Fd, path: &str) -> Result<i32> {
    let flags = f.flags & KEEP_FLAGS;
    let file = open_as_owner(pf, f.fd, path, || super::open_with(path, flags))?;
    pf.keep_opened(path, file)
}

/// Opens `path` with `open` and the process's own credentials; if they may
/// not, with the restorer's, but only if that gives the very inode the
/// process had under `key` (an fd, or `AT_FDCWD` for its working directory;
/// see [`FileIds`]): something it may not open itself, which it held all
/// along.
fn open_as_owner(
    pf: &Preflight,
    key: i32,
    path: &str,
    open: impl Fn() -> std::io::Result<std::fs::File>,
) -> Result<std::io::Result<std::fs::File>> {
    let first = pf.as_owner(&open)?;
    Ok(or_held(pf, path, first, open, |f| {
        pf.file_ids.as_ref().is_some_and(|ids| ids.is_same(&key, f))
    }))
}

/// `first`, the result of opening `path` with the process's credentials;
/// if they were denied, `open` as the restorer instead, kept only if
/// `held` says it is what the process had.
pub(crate) fn or_held(
    pf: &Preflight,
    path: &str,
    first: std::io::Result<std::fs::File>,
    open: impl Fn() -> std::io::Result<std::fs::File>,
    held: impl Fn(&std::fs::File) -> bool,
) -> std::io::Result<std::fs::File> {
    let denied = |e: &std::io::Error| matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM));
    match first {
        Err(e) if pf.owner.is_some() && denied(&e) => match open() {
            Ok(f) if held(&f) => {
                tracing::info!(
                    "{path} opened with the restorer's credentials: the process may not open it, but it is what it held"
                );
                Ok(f)
            }
            _ => Err(e),
        },
        other => other,
    }
}

/// The working directory `cwd`, opened (`O_PATH`) as [`open_as_owner`]
/// does: a helper fd the new process enters with `fchdir`, so that what was
/// checked is what it gets. Being in a directory it may not search gives a
/// process nothing (the kernel checks every lookup from it), so only the
/// path to it is checked.
fn cwd_fd(pf: &mut Preflight, cwd: &str) -> Result<i32> {
    let open = || {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(cwd)
    };
    let dir =
        open_as_owner(pf, libc::AT_FDCWD, cwd, open)?.map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ENOTDIR) => {
                EngineError::Incompatible(format!("working directory {cwd} does not exist"))
            }
            _ => EngineError::Incompatible(format!(
                "working directory {cwd} is not accessible{}: {e}",
                pf.as_whom()
            )),
        })?;
    pf.keep(dir.into())
}

/// Gives the helper fd `helper`, which will become `f`, `f`'s O_NONBLOCK:
/// the flag lives in the open file description, which the new process
/// shares with us.
fn set_nonblocking(helper: i32, f: &Fd) -> Result<()> {
    // SAFETY: fcntl(F_SETFL) on a helper fd we hold.
    if unsafe { libc::fcntl(helper, libc::F_SETFL, f.flags & libc::O_NONBLOCK) } < 0 {
        return Err(crate::error::errno_err(format!(
            "fd {}: set its flags",
            f.fd
        )));
    }
    Ok(())
}

/// File systems whose files other nodes reach through a server (statfs
/// `f_type`), and so may see without what this node still caches.
const NETWORK_FS: &[(u32, &str)] = &[
    (0x6969, "nfs"),
    (0xff53_4d42, "cifs"),
    (0xfe53_4d42, "smb2"),
    (0x00c3_6400, "ceph"),
    (0x6573_5546, "fuse"),
    (0x5346_414f, "afs"),
    (0x0102_1997, "9p"),
    (0x7461_636f, "ocfs2"),
    (0x0116_1970, "gfs2"),
    (0x0bd0_0bd0, "lustre"),
];

/// What kind of socket `link` ("socket:[INODE]") of `pid` is, from the
/// process's network tables (its own network namespace).
fn socket_kind(pid: pid_t, link: &str) -> &'static str {
    let Some(inode) = link
        .strip_prefix("socket:[")
        .and_then(|r| r.strip_suffix(']'))
    else {
        return "a socket";
    };
    // The inode is the 10th column of tcp/udp/raw and the 7th of unix.
    let tables: [(&str, usize, &'static str); 8] = [
        ("tcp", 9, "a TCP socket"),
        ("tcp6", 9, "a TCP socket"),
        ("udp", 9, "a UDP socket"),
        ("udp6", 9, "a UDP socket"),
        ("raw", 9, "a raw socket"),
        ("raw6", 9, "a raw socket"),
        ("unix", 6, "a unix socket"),
        ("netlink", 9, "a netlink socket"),
    ];
    for (table, col, kind) in tables {
        let Ok(text) = procfs::read(pid, &format!("net/{table}")) else {
            continue;
        };
        if text
            .lines()
            .skip(1)
            .any(|l| l.split_whitespace().nth(col) == Some(inode))
        {
            return kind;
        }
    }
    "a socket"
}

/// Whether `path` lies in the /proc directory of a process or thread
/// (`/proc/self/…` reads as the process's own number).
fn names_a_process(path: &str) -> bool {
    path.strip_prefix("/proc/")
        .and_then(|rest| rest.split('/').next())
        .is_some_and(|first| !first.is_empty() && first.bytes().all(|b| b.is_ascii_digit()))
}

/// The magic number of the mqueue file system (POSIX message queues).
const MQUEUE_MAGIC: u32 = 0x1980_0202;

/// The network file system `fd` is on, if it is on one.
fn network_fs(fd: BorrowedFd) -> Option<&'static str> {
    let st = nix::sys::statfs::fstatfs(fd).ok()?;
    let t = st.filesystem_type().0 as u32;
    NETWORK_FS.iter().find(|(m, _)| *m == t).map(|(_, n)| *n)
}

/// Writes back to their servers the data a process wrote to files on
/// network file systems (see [`flush_network_writes`]), each file once.
pub struct NetworkFlush {
    pid: pid_t,
    pidfd: Option<OwnedFd>,
    seen: std::collections::HashSet<(u64, u64)>,
    /// Files written back so far.
    pub flushed: usize,
}

impl NetworkFlush {
    pub fn new(pid: pid_t) -> NetworkFlush {
        NetworkFlush {
            pid,
            pidfd: None,
            seen: Default::default(),
            flushed: 0,
        }
    }

    /// fd `fd` of the process, open with `flags` (from its fdinfo).
    pub fn fd(&mut self, fd: i32, flags: i32) -> Result<()> {
        if flags & libc::O_ACCMODE == libc::O_RDONLY || flags & libc::O_PATH != 0 {
            return Ok(());
        }
        if self.pidfd.is_none() {
            self.pidfd = Some(crate::sys::pidfd_open(self.pid)?);
        }
        let Some(pidfd) = &self.pidfd else {
            return Ok(());
        };
        // A copy of the process's descriptor: unlike opening
        // `/proc/PID/fd/N`, it needs no permission on the file itself,
        // which a file server may deny a root that it squashes.
        match crate::sys::pidfd_getfd(pidfd, fd) {
            Ok(f) => self.file(f, || format!("fd {fd}")),
            Err(_) => Ok(()), // closed meanwhile
        }
    }

    /// A mapping of the process: only shared writable file mappings matter.
    pub fn mapping(&mut self, m: &procfs::MapLine) -> Result<()> {
        if !(m.shared && m.write && m.path.starts_with('/')) {
            return Ok(());
        }
        // The mapping's own file, whatever its path is now.
        let p = format!("/proc/{}/map_files/{:x}-{:x}", self.pid, m.start, m.end);
        let f = std::fs::File::open(&p).map_err(|e| {
            EngineError::Other(format!(
                "cannot open {} (mapped shared and writable by process {}) to check where it lives: {e}",
                m.path, self.pid
            ))
        })?;
        self.file(f.into(), || m.path.clone())
    }

    /// A file the capture holds a copy of (fd `what`), open with `flags`:
    /// its file system and identity are known already.
    fn held(&mut self, h: &Held, flags: i32, what: impl Fn() -> String) -> Result<()> {
        use std::os::fd::AsFd;
        if flags & libc::O_ACCMODE == libc::O_RDONLY || flags & libc::O_PATH != 0 {
            return Ok(());
        }
        if !NETWORK_FS.iter().any(|(m, _)| *m == h.fs) {
            return Ok(());
        }
        self.write_back(h.file.as_fd(), (h.md.dev(), h.md.ino()), what)
    }

    fn file(&mut self, f: OwnedFd, what: impl Fn() -> String) -> Result<()> {
        use std::os::fd::{AsFd, AsRawFd};
        if network_fs(f.as_fd()).is_none() {
            return Ok(());
        }
        let Ok(st) = nix::sys::stat::fstat(f.as_raw_fd()) else {
            return Ok(());
        };
        self.write_back(f.as_fd(), (st.st_dev, st.st_ino), what)
    }

    /// Syncs `f`, the file `id` (device, inode) on a network file system,
    /// unless it was synced already.
    fn write_back(
        &mut self,
        f: BorrowedFd,
        id: (u64, u64),
        what: impl Fn() -> String,
    ) -> Result<()> {
        use std::os::fd::AsRawFd;
        if !self.seen.insert(id) {
            return Ok(());
        }
        // fsync writes back every dirty page of the file from this node,
        // whichever open file or mapping made it dirty.
        nix::unistd::fsync(f.as_raw_fd()).map_err(|e| {
            EngineError::Other(format!(
                "cannot write {} of process {} back to its file server: {e}",
                what(),
                self.pid
            ))
        })?;
        self.flushed += 1;
        Ok(())
    }
}

/// Writes back to their servers the data process `pid` wrote to files on
/// network file systems, through its open fds (opened for writing) and its
/// shared writable file mappings, and returns how many files it flushed.
///
/// A migrated process reopens its files on another node: whatever this
/// node's client still holds (writes not yet sent, dirty pages of a shared
/// mapping) the other node would not see, and the process would read its
/// own writes back stale. On local file systems nothing is needed: a file
/// only another kernel could open is not shared, and nodes of one kernel
/// (a local test cluster) share its page cache. The migration's holder
/// calls this while the process runs, to do most of the writing off the
/// stop; the capture then does the same for each fd and mapping it reads
/// (`Files::capture`, `Memory::capture`), at the cost of one `fstatfs` per
/// writable fd where nothing is on a network file system.
pub fn flush_network_writes(pid: pid_t) -> Result<usize> {
    let mut nf = NetworkFlush::new(pid);
    for fd in list_fds(pid)? {
        if let Ok((_, flags, _)) = fdinfo(pid, fd) {
            nf.fd(fd, flags)?;
        }
    }
    for m in procfs::maps(pid)? {
        nf.mapping(&m)?;
    }
    Ok(nf.flushed)
}

#[cfg(test)]
mod network_tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn local_files_are_not_on_a_network_file_system() {
        let d = tempfile::tempdir().unwrap();
        let f = std::fs::File::create(d.path().join("x")).unwrap();
        assert_eq!(network_fs(f.as_fd()), None);
        let dev = std::fs::File::open("/dev/null").unwrap();
        assert_eq!(network_fs(dev.as_fd()), None);
    }

    #[test]
    fn nothing_to_flush_for_a_process_on_local_files() {
        // This test process has files open for writing (its output), and
        // none on a network file system here.
        let d = tempfile::tempdir().unwrap();
        let _w = std::fs::File::create(d.path().join("w")).unwrap();
        assert_eq!(
            flush_network_writes(std::process::id() as pid_t).unwrap(),
            0
        );
    }

    #[test]
    fn the_table_knows_nfs_and_fuse() {
        let has = |n: &str| NETWORK_FS.iter().any(|(_, x)| *x == n);
        assert!(has("nfs") && has("fuse") && has("cifs") && has("ceph"));
    }
}

#[cfg(test)]
mod file_ids_tests {
    use super::*;

    /// A file counts as the one an fd held only with that fd's device and
    /// inode, on the machine (boot) where it was captured.
    #[test]
    fn a_file_is_the_one_held_only_by_device_inode_and_boot() {
        let held = tempfile::NamedTempFile::new().unwrap();
        let other = tempfile::NamedTempFile::new().unwrap();
        let md = held.as_file().metadata().unwrap();
        let ids = FileIds {
            boot_id: FileIds::this_boot(),
            files: vec![(3, md.dev(), md.ino())],
        };
        assert!(!ids.boot_id.is_empty(), "no boot id on this machine");
        assert!(ids.is_same(&3, held.as_file()));
        assert!(!ids.is_same(&4, held.as_file()), "another fd's entry");
        assert!(!ids.is_same(&3, other.as_file()), "another inode");
        let elsewhere = FileIds {
            boot_id: "another machine".into(),
            ..ids.clone()
        };
        assert!(!elsewhere.is_same(&3, held.as_file()), "another boot");
    }
}

#[cfg(test)]
mod key_tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// Two descriptors of one open file share a key; another open of the
    /// same file shares it too (the kernel then tells them apart), another
    /// file does not; a kernel without the fields gives none.
    #[test]
    fn a_held_copy_answers_what_the_path_through_proc_does() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        std::fs::write(&a, b"xyz").unwrap();
        let f = std::fs::File::open(&a).unwrap();
        let fd = f.as_raw_fd();
        let me = std::process::id() as pid_t;
        let path = format!("/proc/{me}/fd/{fd}");
        let md = std::fs::metadata(&path).unwrap();
        let fs = nix::sys::statfs::statfs(path.as_str())
            .unwrap()
            .filesystem_type()
            .0 as u32;
        let pidfd = crate::sys::pidfd_open(me).unwrap();
        for (through, copy) in [(Some(&pidfd), true), (None, false)] {
            let h = Held::take(me, fd, through).unwrap().expect("fd open");
            assert_eq!(h.copy, copy);
            assert_eq!(
                (h.md.dev(), h.md.ino(), h.md.len()),
                (md.dev(), md.ino(), 3)
            );
            assert_eq!(h.fs, fs);
            assert_eq!(procfs::link_of(&h.file).unwrap(), a.to_str().unwrap());
        }
        // A copy shares the open file: its offset is the process's.
        let h = Held::take(me, fd, Some(&pidfd)).unwrap().unwrap();
        seek(&h.file, 2).unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut &f, &mut rest).unwrap();
        assert_eq!(rest, "z");
        drop(f);
        for through in [Some(&pidfd), None] {
            assert!(Held::take(me, fd, through).unwrap().is_none(), "fd closed");
        }
        // As `classify` sees it, either way.
        let again = std::fs::File::open(&a).unwrap();
        let mut held = None;
        let k = classify_held(me, again.as_raw_fd(), Some(&pidfd), &mut held).unwrap();
        assert!(matches!(k, Some(FdKind::File { size: 3, .. })), "{k:?}");
        assert!(held.is_some_and(|h| h.copy));
        let k = classify(me, again.as_raw_fd()).unwrap();
        assert!(matches!(k, Some(FdKind::File { size: 3, .. })), "{k:?}");
    }

    #[test]
    fn an_open_files_key_is_its_mount_and_inode() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        std::fs::write(&a, b"x").unwrap();
        std::fs::write(&b, b"y").unwrap();
        let f = std::fs::File::open(&a).unwrap();
        let dup = f.try_clone().unwrap();
        let again = std::fs::File::open(&a).unwrap();
        let other = std::fs::File::open(&b).unwrap();
        let me = std::process::id() as pid_t;
        let key = |f: &std::fs::File| {
            file_key(&procfs::read(me, &format!("fdinfo/{}", f.as_raw_fd())).unwrap())
        };
        let k = key(&f);
        assert!(k.is_some(), "this kernel shows mnt_id and ino");
        assert_eq!(key(&dup), k);
        assert_eq!(key(&again), k);
        assert_ne!(key(&other), k);
        assert_eq!(
            crate::sys::same_file(me, f.as_raw_fd(), again.as_raw_fd()),
            Some(false)
        );
        assert_eq!(file_key("pos:\t0\nflags:\t0100000\n"), None);
        assert_eq!(
            file_key("pos:\t0\nflags:\t02\nmnt_id:\t24\nino:\t3\n"),
            Some((24, 3))
        );
    }
}

#[cfg(test)]
mod follow_tests {
    use super::*;

    fn file(fd: i32, path: &str, pos: u64, flags: i32) -> Fd {
        Fd {
            fd,
            flags,
            cloexec: false,
            kind: FdKind::File {
                path: path.into(),
                pos,
                size: 100,
            },
        }
    }

    fn copy(fd: i32, of: i32) -> Fd {
        Fd {
            fd,
            flags: libc::O_RDWR,
            cloexec: false,
            kind: FdKind::SameAs(of),
        }
    }

    fn state(cwd: &str, fds: Vec<Fd>) -> FilesState {
        FilesState {
            cwd: cwd.into(),
            umask: 0o022,
            fds,
        }
    }

    fn fds(v: &[&Fd]) -> Vec<i32> {
        v.iter().map(|f| f.fd).collect()
    }

    #[test]
    fn a_skeleton_keeps_what_only_moved_on_and_reopens_the_rest() {
        let rw = libc::O_RDWR;
        let pre = state(
            "/",
            vec![
                file(3, "/a", 0, rw),
                copy(4, 3),
                file(5, "/gone", 0, libc::O_RDONLY),
                file(6, "/b", 0, libc::O_RDONLY),
                file(7, "/c", 0, rw),
            ],
        );
        let mut nonblock = file(6, "/b", 9, libc::O_RDONLY | libc::O_NONBLOCK);
        nonblock.cloexec = true;
        let fin = state(
            "/",
            vec![
                // Moved on (offset): kept.
                file(3, "/a", 77, rw),
                // Still a copy of a kept one: kept.
                copy(4, 3),
                // F_SETFL flags and close-on-exec: kept, flags set.
                nonblock,
                // Same number, opened for writing now: another open.
                file(7, "/c", 0, libc::O_WRONLY),
                // New, and a copy of the new one.
                file(8, "/new", 5, rw),
                copy(9, 8),
            ],
        );
        let f = Follow::plan(&pre, &fin).unwrap();
        assert_eq!(f.kept.iter().copied().collect::<Vec<_>>(), [3, 4, 6]);
        assert_eq!(f.close, [5, 7]);
        assert_eq!(fds(&f.open), [7, 8, 9]);
        assert_eq!(fds(&f.flags), [6]);
    }

    #[test]
    fn a_copy_of_a_descriptor_opened_again_is_made_again() {
        let rw = libc::O_RDWR;
        let pre = state("/", vec![file(3, "/a", 0, rw), copy(4, 3)]);
        let fin = state("/", vec![file(3, "/other", 0, rw), copy(4, 3)]);
        let f = Follow::plan(&pre, &fin).unwrap();
        assert!(f.kept.is_empty());
        assert_eq!(f.close, [3, 4]);
        assert_eq!(fds(&f.open), [3, 4]);
    }

    #[test]
    fn a_new_descriptor_that_is_not_a_file_is_stale() {
        let pre = state("/", vec![]);
        let pipe = Fd {
            fd: 3,
            flags: libc::O_RDONLY,
            cloexec: false,
            kind: FdKind::Pipe {
                ino: 1,
                write: false,
            },
        };
        let e = Follow::plan(&pre, &state("/", vec![pipe])).unwrap_err();
        assert!(
            matches!(&e, EngineError::Stale(w) if w.contains("fd 3 (a pipe)")),
            "{e}"
        );
        let term = Fd {
            fd: 0,
            flags: libc::O_RDWR,
            cloexec: false,
            kind: FdKind::Stdio(StdioKind::Terminal),
        };
        assert!(Follow::plan(&pre, &state("/", vec![term])).is_err());
    }

    #[test]
    fn the_inodes_compared_are_those_of_kept_descriptors_and_a_kept_directory() {
        let ids = |v: &[(i32, u64, u64)]| {
            Some(FileIds {
                boot_id: "b".into(),
                files: v.to_vec(),
            })
        };
        let rw = libc::O_RDWR;
        let pre = state("/d", vec![file(3, "/a", 0, rw), file(4, "/x", 0, rw)]);
        let fin = state("/d", vec![file(3, "/a", 0, rw), file(5, "/y", 0, rw)]);
        let cwd = libc::AT_FDCWD;
        // fd 4 closed and fd 5 opened: their inodes do not matter.
        compare_ids(
            &pre,
            &fin,
            &ids(&[(3, 1, 10), (4, 1, 11), (cwd, 1, 2)]),
            &ids(&[(cwd, 1, 2), (3, 1, 10), (5, 1, 12)]),
        )
        .unwrap();
        // fd 3 kept by path, but another inode: replaced under its name.
        assert!(compare_ids(&pre, &fin, &ids(&[(3, 1, 10)]), &ids(&[(3, 1, 13)])).is_err());
        // The directory, kept by path, another inode.
        assert!(compare_ids(&pre, &fin, &ids(&[(cwd, 1, 2)]), &ids(&[(cwd, 1, 3)])).is_err());
        // Another directory by path: entered anew, its inode does not matter.
        let moved = state("/e", fin.fds.clone());
        compare_ids(&pre, &moved, &ids(&[(cwd, 1, 2)]), &ids(&[(cwd, 1, 3)])).unwrap();
        // Another machine's capture.
        let other = Some(FileIds {
            boot_id: "c".into(),
            files: vec![(3, 1, 10)],
        });
        assert!(compare_ids(&pre, &fin, &ids(&[(3, 1, 10)]), &other).is_err());
    }
}
