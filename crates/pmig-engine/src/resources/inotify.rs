//! inotify instances (`tail -f`, file watchers): each moves with its
//! watches, each watch under its own number (`wd`), on the same file, with
//! the same events and flags. One another process also holds is refused.
//!
//! Capture, while the process is frozen: the fdinfo lists each watch's
//! number, mask, and the watched inode with a file handle. The watched
//! file's path is found from the handle (`open_by_handle_at`, which needs
//! `CAP_DAC_READ_SEARCH`), or else among the files the process holds open
//! and its working directory; a watch whose file has no path (deleted) is
//! refused. So is an instance with events not yet read: they cannot be
//! read without taking them from the process, nor put back. That refusal
//! is [`crate::error::EngineError::Busy`]: a migration's holder lets the
//! process run a moment and tries again.
//!
//! Restore: `pmig restore` creates the instance before the new process
//! exists, which inherits it, and adds the watches by path in the order of
//! their numbers. The kernel numbers the watches of an instance in turn, so
//! a number the process no longer uses is taken by a placeholder watch on a
//! file of a temporary directory, removed once every watch is in place; the
//! events that removal queues are read out before the process gets the
//! instance. Events on the watched files between the freeze and the restore
//! are not delivered (the source's queue goes with the frozen original).
//! In the image: the fd kind [`super::files::FdKind::Inotify`] (format 1.6).

use super::Preflight;
use crate::error::{busy, errno_err, unsupported, EngineError, Result};
use libc::pid_t;
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

pub const LINK: &str = "anon_inode:inotify";

/// The most watch numbers that placeholders may have to fill.
pub const MAX_GAPS: u32 = 4096;

/// One watch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Watch {
    pub wd: i32,
    /// The events and the flags the kernel keeps (`IN_ONESHOT`,
    /// `IN_EXCL_UNLINK`).
    pub mask: u32,
    pub path: String,
}

/// A watch as its fdinfo line gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawWatch {
    pub wd: i32,
    pub ino: u64,
    /// The kernel's device number (major << 20 | minor).
    pub sdev: u64,
    pub mask: u32,
    pub handle_type: i32,
    pub handle: Vec<u8>,
}

impl RawWatch {
    /// The device number as `stat` gives it.
    fn dev(&self) -> u64 {
        libc::makedev((self.sdev >> 20) as u32, (self.sdev & 0xf_ffff) as u32)
    }
}

fn hex_bytes(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The watches in an inotify fdinfo text (numbers in hex).
pub fn parse(info: &str) -> Option<Vec<RawWatch>> {
    let mut out = Vec::new();
    for l in info.lines() {
        let Some(rest) = l.strip_prefix("inotify ") else {
            continue;
        };
        let field = |k: &str| {
            rest.split_whitespace()
                .find_map(|f| f.strip_prefix(k)?.strip_prefix(':'))
        };
        let hex = |k: &str| u64::from_str_radix(field(k)?, 16).ok();
        out.push(RawWatch {
            wd: hex("wd")? as i32,
            ino: hex("ino")?,
            sdev: hex("sdev")?,
            mask: hex("mask")? as u32,
            handle_type: hex("fhandle-type").unwrap_or(0) as i32,
            handle: field("f_handle").and_then(hex_bytes).unwrap_or_default(),
        });
    }
    Some(out)
}

/// Whether `path` names the inode `w` watches.
fn names(path: &str, w: &RawWatch) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.ino() == w.ino && m.dev() == w.dev())
}

/// The mounts of `pid`'s mount table, opened once per file system and kept
/// for every watch of a capture, through which file handles are opened.
struct Mounts {
    pid: pid_t,
    table: Option<String>,
    /// By "major:minor": an fd on each mount of that file system.
    open: std::collections::HashMap<String, Vec<OwnedFd>>,
    /// `open_by_handle_at` refused us (no `CAP_DAC_READ_SEARCH`).
    denied: bool,
}

impl Mounts {
    fn new(pid: pid_t) -> Mounts {
        Mounts {
            pid,
            table: None,
            open: Default::default(),
            denied: false,
        }
    }

    /// Fds on the mounts of the file system `dev` ("major:minor").
    fn of(&mut self, dev: &str) -> &[OwnedFd] {
        if !self.open.contains_key(dev) {
            let pid = self.pid;
            let table = self
                .table
                .get_or_insert_with(|| crate::procfs::read(pid, "mountinfo").unwrap_or_default());
            let mut fds = Vec::new();
            for l in table.lines() {
                let f: Vec<&str> = l.split_whitespace().collect();
                if f.len() < 5 || f[2] != dev {
                    continue;
                }
                let Ok(at) = CString::new(format!("/proc/{pid}/root{}", f[4])) else {
                    continue;
                };
                // SAFETY: open takes a NUL-terminated path; a new fd or -1.
                let m = unsafe { libc::open(at.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
                if m >= 0 {
                    // SAFETY: a fresh fd owned by nobody else.
                    fds.push(unsafe { OwnedFd::from_raw_fd(m) });
                }
            }
            self.open.insert(dev.to_string(), fds);
        }
        &self.open[dev]
    }

    /// The path of the inode `w` watches, from its file handle.
    fn path_of(&mut self, w: &RawWatch) -> Option<String> {
        if w.handle.is_empty() || self.denied {
            return None;
        }
        // struct file_handle: handle_bytes (u32), handle_type (i32), the bytes.
        let mut fh = Vec::with_capacity(8 + w.handle.len());
        fh.extend_from_slice(&(w.handle.len() as u32).to_ne_bytes());
        fh.extend_from_slice(&w.handle_type.to_ne_bytes());
        fh.extend_from_slice(&w.handle);
        let dev = format!("{}:{}", w.sdev >> 20, w.sdev & 0xf_ffff);
        let mut denied = false;
        let mut found = None;
        for mount in self.of(&dev) {
            // SAFETY: open_by_handle_at reads the file_handle in `fh` (its
            // length field matches the bytes after it); a new fd or -1.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_open_by_handle_at,
                    mount.as_raw_fd(),
                    fh.as_ptr(),
                    libc::O_PATH | libc::O_CLOEXEC,
                )
            };
            if r < 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM) {
                    denied = true; // no other mount helps
                    break;
                }
                continue;
            }
            // SAFETY: a fresh fd owned by nobody else.
            let file = unsafe { OwnedFd::from_raw_fd(r as i32) };
            let path = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()));
            if let Some(p) = path.ok().and_then(|p| p.to_str().map(str::to_string)) {
                if names(&p, w) {
                    found = Some(p);
                    break;
                }
            }
        }
        self.denied = denied;
        found
    }
}

/// The path of the inode `w` watches, among the files `pid` holds open,
/// its working directory and its root.
fn path_among_open_files(pid: pid_t, w: &RawWatch) -> Option<String> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    let links = fds
        .filter_map(|e| Some(format!("fd/{}", e.ok()?.file_name().to_str()?)))
        .chain(["cwd".to_string(), "root".to_string()]);
    links
        .filter_map(|l| crate::procfs::readlink(pid, &l).ok())
        .find(|p| p.starts_with('/') && names(p, w))
}

/// The watches of `pid`'s inotify instance at `fd`, with their paths.
/// Refuses one with events not yet read, a watch whose file has no path,
/// and watch numbers too far apart to give back.
pub fn capture(pid: pid_t, fd: i32, info: &str) -> Result<Vec<Watch>> {
    let raw = parse(info).ok_or_else(|| {
        EngineError::Other(format!(
            "cannot parse the inotify watches of fd {fd} of process {pid}"
        ))
    })?;
    let pidfd = crate::sys::pidfd_open(pid)?;
    let copy = crate::sys::pidfd_getfd(&pidfd, fd)?;
    let mut queued: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int into our local.
    if unsafe { libc::ioctl(copy.as_raw_fd(), libc::FIONREAD, &mut queued) } < 0 {
        return Err(errno_err(format!(
            "read the event queue of the inotify at fd {fd} of process {pid}"
        )));
    }
    if queued > 0 {
        return Err(busy(
            pid,
            format!("an inotify instance with {queued} bytes of events not yet read (fd {fd})"),
        ));
    }
    let mut watches: Vec<Watch> = Vec::with_capacity(raw.len());
    let mut mounts = Mounts::new(pid);
    for w in &raw {
        let path = mounts
            .path_of(w)
            .or_else(|| path_among_open_files(pid, w))
            .ok_or_else(|| {
                unsupported(
                    pid,
                    format!(
                        "an inotify watch on a file with no path pmig can find \
                         (fd {fd}, watch {}, inode {})",
                        w.wd, w.ino
                    ),
                )
            })?;
        watches.push(Watch {
            wd: w.wd,
            mask: w.mask,
            path,
        });
    }
    watches.sort_by_key(|w| w.wd);
    let gaps = gaps(&watches);
    if gaps > MAX_GAPS {
        return Err(unsupported(
            pid,
            format!(
                "inotify watch numbers too far apart to give back ({gaps} unused below watch {}, fd {fd})",
                watches.last().map_or(0, |w| w.wd)
            ),
        ));
    }
    Ok(watches)
}

/// How many watch numbers below the highest are not in use (`watches`
/// sorted by number).
pub fn gaps(watches: &[Watch]) -> u32 {
    let top = watches.last().map_or(0, |w| w.wd.max(0) as u32);
    top.saturating_sub(watches.len() as u32)
}

fn add_watch(fd: &OwnedFd, path: &str, mask: u32) -> std::io::Result<i32> {
    let c = CString::new(path).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: inotify_add_watch takes our fd, a NUL-terminated path and a
    // mask.
    let r = unsafe { libc::inotify_add_watch(fd.as_raw_fd(), c.as_ptr(), mask) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(r)
}

/// Placeholder files, one inode each, for the watch numbers to skip.
struct Placeholders {
    dir: Option<std::path::PathBuf>,
    made: u32,
}

impl Placeholders {
    fn next(&mut self) -> Result<String> {
        let dir = match &self.dir {
            Some(d) => d.clone(),
            None => {
                let mut tmpl = std::env::temp_dir()
                    .join("pmig-inotify.XXXXXX")
                    .into_os_string()
                    .into_encoded_bytes();
                tmpl.push(0);
                // SAFETY: mkdtemp rewrites the X's of our NUL-terminated
                // template in place.
                if unsafe { libc::mkdtemp(tmpl.as_mut_ptr() as *mut libc::c_char) }.is_null() {
                    return Err(errno_err("make a directory for inotify placeholders"));
                }
                tmpl.pop();
                let d = std::path::PathBuf::from(String::from_utf8_lossy(&tmpl).into_owned());
                self.dir = Some(d.clone());
                d
            }
        };
        self.made += 1;
        let p = dir.join(self.made.to_string());
        std::fs::File::create(&p).map_err(|e| {
            EngineError::Other(format!("make an inotify placeholder {}: {e}", p.display()))
        })?;
        Ok(p.to_string_lossy().into_owned())
    }
}

impl Drop for Placeholders {
    fn drop(&mut self) {
        if let Some(d) = &self.dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// Creates the inotify instance for the new process, its watches under
/// their numbers: a helper fd it inherits.
pub fn preflight(pf: &mut Preflight, watches: &[Watch], flags: i32) -> Result<i32> {
    // Non-blocking while it is ours, to read out the placeholders' events.
    // SAFETY: inotify_init1 takes flags and returns a new fd.
    let r = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
    if r < 0 {
        return Err(errno_err("create an inotify instance"));
    }
    // SAFETY: a fresh fd owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(r) };
    let mut sorted: Vec<&Watch> = watches.iter().collect();
    sorted.sort_by_key(|w| w.wd);
    let mut holders = Placeholders { dir: None, made: 0 };
    let mut placeholders = Vec::new();
    let mut next = 1;
    for w in sorted {
        while next < w.wd {
            if placeholders.len() as u32 >= MAX_GAPS {
                return Err(EngineError::Incompatible(format!(
                    "inotify watch {}: more than {MAX_GAPS} unused numbers below it",
                    w.wd
                )));
            }
            let p = holders.next()?;
            let got = add_watch(&fd, &p, libc::IN_DELETE_SELF | libc::IN_DONT_FOLLOW)
                .map_err(|e| EngineError::Other(format!("add an inotify placeholder: {e}")))?;
            placeholders.push(got);
            next = got + 1;
        }
        // The path names the watched inode itself: never follow a link.
        // With the process's own credentials: watching needs read
        // permission on the file.
        let got = pf
            .as_owner(|| add_watch(&fd, &w.path, w.mask | libc::IN_DONT_FOLLOW))?
            .map_err(|e| {
                EngineError::Incompatible(format!(
                    "inotify watch {}: cannot watch {}{}: {e}",
                    w.wd,
                    w.path,
                    pf.as_whom()
                ))
            })?;
        if got != w.wd {
            return Err(EngineError::Incompatible(format!(
                "inotify watch {} of {} came back as watch {got}",
                w.wd, w.path
            )));
        }
        next = got + 1;
    }
    if !placeholders.is_empty() {
        for wd in placeholders {
            // SAFETY: removing a watch of our own instance.
            unsafe { libc::inotify_rm_watch(fd.as_raw_fd(), wd) };
        }
        drain(&fd);
    }
    drop(holders);
    // SAFETY: fcntl(F_SETFL) on our fd: the process's own O_NONBLOCK.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags & libc::O_NONBLOCK) } < 0 {
        return Err(errno_err("set an inotify instance's flags"));
    }
    pf.keep(fd)
}

/// Reads out every queued event (the placeholders' removal, and whatever
/// happened to the watched files while they were added: events of the move,
/// which are not delivered).
fn drain(fd: &OwnedFd) {
    let mut buf = [0u8; 4096];
    for _ in 0..65536 {
        // SAFETY: read into our local buffer, at most its length.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr() as *mut _, buf.len()) };
        if n <= 0 {
            break;
        }
    }
}

/// Reads out the events queued on the inotify instance `fd` (a copy of a
/// held skeleton's, which may be blocking): what happened to the watched
/// files while the skeleton was held, which the process saw at its source,
/// or will see there before its stop (one with events not yet read is not
/// captured at all). Each read only once `poll` says one is queued.
pub fn drain_queued(fd: &impl AsRawFd) -> Result<()> {
    let mut buf = [0u8; 4096];
    for _ in 0..65536 {
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one pollfd of ours, without waiting.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        if r < 0 {
            return Err(errno_err("poll an inotify instance"));
        }
        if r == 0 || p.revents & libc::POLLIN == 0 {
            return Ok(());
        }
        // SAFETY: read into our local buffer, at most its length; an event
        // is queued, so the read does not wait.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr() as *mut _, buf.len()) };
        if n <= 0 {
            return Err(errno_err("read an inotify instance's events"));
        }
    }
    Err(EngineError::Other(
        "an inotify instance's events did not end".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_gives_each_watch() {
        let info = "pos:\t0\nflags:\t00\nmnt_id:\t17\nino:\t1038\n\
inotify wd:2 ino:984293 sdev:fe00000 mask:2 ignored_mask:0 fhandle-bytes:8 fhandle-type:1 f_handle:93429800d9c53224\n\
inotify wd:1a ino:f sdev:800001 mask:84000002 ignored_mask:0 fhandle-bytes:8 fhandle-type:1 f_handle:924298007589f4ff\n";
        let w = parse(info).unwrap();
        assert_eq!(w.len(), 2);
        assert_eq!(
            w[0],
            RawWatch {
                wd: 2,
                ino: 0x984293,
                sdev: 0xfe00000,
                mask: 2,
                handle_type: 1,
                handle: vec![0x93, 0x42, 0x98, 0x00, 0xd9, 0xc5, 0x32, 0x24],
            }
        );
        assert_eq!(w[1].wd, 0x1a);
        assert_eq!(w[1].mask, libc::IN_ONESHOT | libc::IN_EXCL_UNLINK | 2);
        assert_eq!(w[0].dev(), libc::makedev(254, 0));
        assert_eq!(w[1].dev(), libc::makedev(8, 1));
        assert_eq!(parse("pos:\t0\nflags:\t00\n"), Some(vec![]));
    }

    #[test]
    fn gaps_count_the_unused_numbers_below_the_top() {
        let w = |wd| Watch {
            wd,
            mask: 2,
            path: "/".into(),
        };
        assert_eq!(gaps(&[]), 0);
        assert_eq!(gaps(&[w(1), w(2), w(3)]), 0);
        assert_eq!(gaps(&[w(2), w(5)]), 3);
    }

    #[test]
    fn a_watch_is_found_from_its_handle_and_given_back_under_its_number() {
        let dir = std::env::temp_dir().join(format!("pmig-inotify-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = dir.join("a");
        let b = dir.join("b");
        std::fs::write(&a, b"x").unwrap();
        std::fs::write(&b, b"y").unwrap();
        // SAFETY: inotify_init1 returns a new fd or -1.
        let fd = unsafe { OwnedFd::from_raw_fd(libc::inotify_init1(libc::IN_CLOEXEC)) };
        let wa = add_watch(&fd, a.to_str().unwrap(), libc::IN_MODIFY).unwrap();
        let gone = add_watch(&fd, dir.to_str().unwrap(), libc::IN_CREATE).unwrap();
        let wb = add_watch(&fd, b.to_str().unwrap(), libc::IN_ATTRIB | libc::IN_ONESHOT).unwrap();
        // SAFETY: removing a watch of our own instance.
        unsafe { libc::inotify_rm_watch(fd.as_raw_fd(), gone) };
        let mut buf = [0u8; 256];
        // SAFETY: reading the IN_IGNORED event into our buffer.
        unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr() as *mut _, buf.len()) };
        let me = std::process::id() as pid_t;
        let info = crate::procfs::read(me, &format!("fdinfo/{}", fd.as_raw_fd())).unwrap();
        let watches = capture(me, fd.as_raw_fd(), &info).unwrap();
        assert_eq!(
            watches,
            vec![
                Watch {
                    wd: wa,
                    mask: libc::IN_MODIFY,
                    path: a.to_str().unwrap().into()
                },
                Watch {
                    wd: wb,
                    mask: libc::IN_ATTRIB | libc::IN_ONESHOT,
                    path: b.to_str().unwrap().into()
                },
            ]
        );
        assert_eq!(gaps(&watches), 1);
        // Events not yet read are refused.
        std::fs::write(&a, b"xx").unwrap();
        let err = capture(me, fd.as_raw_fd(), &info).unwrap_err().to_string();
        assert!(err.contains("events not yet read"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
