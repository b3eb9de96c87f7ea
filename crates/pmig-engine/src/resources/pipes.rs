//! Pipes that belong to the process alone: a self-pipe (both ends held, the
//! way xz, event loops and signal handlers wake themselves up), or a pipe
//! whose other end is closed everywhere. Each moves with what is buffered in
//! it, its capacity and its ends' flags; the fds that shared an end keep
//! sharing it.
//!
//! A pipe another process also holds (a pipeline, a parent's pipe) connects
//! the process to something that does not move: it is refused, except at
//! fds 0–2, which the home node's stdio replaces (see `files`). A read end
//! at fds 0–2 that still holds bytes but whose writers are all gone
//! ([`unread_left`]: a here-string, a pipeline whose writer has exited)
//! leads nowhere else, and moves like any other pipe, with those bytes.
//!
//! Capture: `files` names each fd's pipe and end ([`super::files::FdKind::Pipe`]);
//! this part holds the pipes themselves. The buffered bytes are read
//! without being consumed: a copy of the read end (`pidfd_getfd`) is
//! `tee`d into a pipe of ours, so a migration that fails leaves the process
//! with its data. Restore: the restorer's process creates each pipe, sets
//! its capacity and writes the bytes back before the new process exists;
//! the new process inherits the ends it held, and an end it did not hold is
//! closed, so a reader still sees end-of-file after the data, and a writer
//! still gets EPIPE.

use super::{Capture, Preflight, Resource};
use crate::error::{errno_err, unsupported, EngineError, Result};
use serde::{Deserialize, Serialize};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub struct Pipes;

/// One end of a pipe, as `files` found it at an fd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct End {
    pub ino: u64,
    pub fd: i32,
    pub write: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PipeState {
    /// The pipe's inode on the source: how the fds name it.
    pub ino: u64,
    /// Its capacity in bytes (F_GETPIPE_SZ).
    pub capacity: u32,
    /// What was buffered in it, unread (as bytes, see `ThreadState::xstate`).
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PipesState {
    pub pipes: Vec<PipeState>,
}

/// The inode of a `pipe:[N]` fd link.
pub fn inode_of(link: &str) -> Option<u64> {
    link.strip_prefix("pipe:[")?.strip_suffix(']')?.parse().ok()
}

/// Whether an fd whose link is `link` is one of the pipes `inos`.
pub fn is_one_of(link: &str, inos: &[u64]) -> bool {
    inode_of(link).is_some_and(|i| inos.contains(&i))
}

/// Whether fd `fd` of `pid` is the read end of a pipe that still holds
/// bytes but that no process can write to any more (`poll` reports
/// `POLLHUP`): what is in it is all it will ever read. False for a write
/// end, for an empty pipe (end-of-file is all it holds, as `/dev/null`
/// would give), and when it cannot be told (the fd is gone, or this is no
/// pipe).
pub fn unread_left(pid: libc::pid_t, fd: i32) -> bool {
    let Ok(end) = crate::sys::pidfd_open(pid).and_then(|p| crate::sys::pidfd_getfd(&p, fd)) else {
        return false;
    };
    let mut p = libc::pollfd {
        fd: end.as_raw_fd(),
        events: 0,
        revents: 0,
    };
    // SAFETY: poll on one pollfd of ours, without waiting.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    if n != 1 || p.revents & libc::POLLHUP == 0 {
        return false;
    }
    let mut queued: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int.
    let r = unsafe { libc::ioctl(end.as_raw_fd(), libc::FIONREAD, &mut queued) };
    r == 0 && queued > 0
}

pub(crate) fn fresh_pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two fds into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(errno_err("create a pipe"));
    }
    // SAFETY: both fds are fresh and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

pub(crate) fn capacity_of(fd: &OwnedFd) -> Result<u32> {
    // SAFETY: fcntl(F_GETPIPE_SZ) on a pipe fd we own.
    let n = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETPIPE_SZ) };
    if n < 0 {
        return Err(errno_err("read a pipe's capacity"));
    }
    Ok(n as u32)
}

pub(crate) fn set_capacity(fd: &OwnedFd, bytes: u32) -> std::io::Result<()> {
    // SAFETY: fcntl(F_SETPIPE_SZ) on a pipe fd we own.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, bytes as libc::c_int) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// How many bytes the pipe whose read end is `reader` holds.
pub(crate) fn queued(reader: &OwnedFd) -> Result<usize> {
    let mut queued: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int.
    if unsafe { libc::ioctl(reader.as_raw_fd(), libc::FIONREAD, &mut queued) } < 0 {
        return Err(errno_err("count the bytes in a pipe"));
    }
    Ok(queued.max(0) as usize)
}

/// The bytes buffered in the pipe whose read end is `reader`, left in it.
pub(crate) fn buffered(reader: &OwnedFd, capacity: u32) -> Result<Vec<u8>> {
    let queued = queued(reader)?;
    if queued == 0 {
        return Ok(Vec::new());
    }
    let (r, w) = fresh_pipe()?;
    set_capacity(&w, capacity.max(queued as u32))
        .map_err(|e| EngineError::Other(format!("size a pipe to copy another's data: {e}")))?;
    // SAFETY: tee between two pipe fds we own; it copies without consuming.
    let n = unsafe {
        libc::tee(
            reader.as_raw_fd(),
            w.as_raw_fd(),
            queued as usize,
            libc::SPLICE_F_NONBLOCK,
        )
    };
    if n != queued as isize {
        return Err(EngineError::Other(format!(
            "copy the {queued} bytes buffered in a pipe: copied {n} ({})",
            std::io::Error::last_os_error()
        )));
    }
    drop(w);
    let mut data = vec![0u8; queued as usize];
    let mut got = 0;
    while got < data.len() {
        // SAFETY: reading into the unfilled tail of our buffer.
        let k = unsafe {
            libc::read(
                r.as_raw_fd(),
                data[got..].as_mut_ptr() as *mut _,
                data.len() - got,
            )
        };
        if k <= 0 {
            return Err(errno_err("read the copy of a pipe's data"));
        }
        got += k as usize;
    }
    Ok(data)
}

impl Resource for Pipes {
    const PART: &'static str = "pipes";
    type State = PipesState;

    /// `files` has listed the pipe ends in `cx.pipe_ends`.
    fn capture(cx: &mut Capture) -> Result<PipesState> {
        let ends = std::mem::take(&mut cx.pipe_ends);
        let mut inos: Vec<u64> = ends.iter().map(|e| e.ino).collect();
        inos.sort();
        inos.dedup();
        if inos.is_empty() {
            return Ok(PipesState::default());
        }
        let pidfd = crate::sys::pidfd_open(cx.pid)?;
        let mut pipes = Vec::new();
        for ino in inos {
            let of: Vec<&End> = ends.iter().filter(|e| e.ino == ino).collect();
            for write in [false, true] {
                if of.iter().filter(|e| e.write == write).count() > 1 {
                    return Err(unsupported(
                        cx.pid,
                        format!("a pipe end opened twice (pipe:[{ino}], not dup'ed)"),
                    ));
                }
            }
            let any = crate::sys::pidfd_getfd(&pidfd, of[0].fd)?;
            let capacity = capacity_of(&any)?;
            let data = match of.iter().find(|e| !e.write) {
                Some(r) => buffered(&crate::sys::pidfd_getfd(&pidfd, r.fd)?, capacity)?,
                // Nobody can ever read what is in it.
                None => Vec::new(),
            };
            pipes.push(PipeState {
                ino,
                capacity,
                data,
            });
        }
        Ok(PipesState { pipes })
    }

    fn preflight(s: &PipesState, pf: &mut Preflight) -> Result<()> {
        for p in &s.pipes {
            let (r, w) = fresh_pipe()?;
            if let Err(e) = set_capacity(&w, p.capacity) {
                if p.data.len() > capacity_of(&w)? as usize {
                    return Err(EngineError::Incompatible(format!(
                        "a pipe holding {} bytes needs a capacity of {}: {e}",
                        p.data.len(),
                        p.capacity
                    )));
                }
                tracing::warn!("pipe:[{}]: capacity {} not set: {e}", p.ino, p.capacity);
            }
            // Its capacity holds all of it (checked above): this never blocks.
            let mut wf = std::fs::File::from(w);
            std::io::Write::write_all(&mut wf, &p.data)
                .map_err(|e| EngineError::Other(format!("write a pipe's data back: {e}")))?;
            let w = OwnedFd::from(wf);
            let r = pf.keep(r)?;
            let w = pf.keep(w)?;
            pf.pipes.insert(p.ino, (r, w));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipe_link_names_its_inode() {
        assert_eq!(inode_of("pipe:[1361581]"), Some(1361581));
        assert_eq!(inode_of("socket:[12]"), None);
        assert_eq!(inode_of("/tmp/pipe:[1]"), None);
    }

    #[test]
    fn a_read_end_knows_when_it_holds_all_it_will_read() {
        let me = std::process::id() as libc::pid_t;
        let (r, w) = fresh_pipe().unwrap();
        assert!(!unread_left(me, r.as_raw_fd()));
        assert!(!unread_left(me, w.as_raw_fd()));
        // SAFETY: writing a local buffer into our pipe.
        assert_eq!(
            unsafe { libc::write(w.as_raw_fd(), b"x".as_ptr() as *const _, 1) },
            1
        );
        // A writer left: more may come.
        assert!(!unread_left(me, r.as_raw_fd()));
        drop(w);
        assert!(unread_left(me, r.as_raw_fd()));
        // Read out: end-of-file is all it holds.
        let mut b = [0u8; 4];
        // SAFETY: reading into a local buffer from our pipe.
        assert_eq!(
            unsafe { libc::read(r.as_raw_fd(), b.as_mut_ptr() as *mut _, 4) },
            1
        );
        assert!(!unread_left(me, r.as_raw_fd()));
        // A write end whose readers are gone is not meant.
        let (r2, w2) = fresh_pipe().unwrap();
        drop(r2);
        assert!(!unread_left(me, w2.as_raw_fd()));
        // Not a pipe, or no fd at all.
        let f = std::fs::File::open("/dev/null").unwrap();
        assert!(!unread_left(me, f.as_raw_fd()));
        drop(r);
        assert!(!unread_left(me, 100_000));
    }

    #[test]
    fn buffered_bytes_are_copied_and_left_in_the_pipe() {
        let (r, w) = fresh_pipe().unwrap();
        let msg = b"wake up";
        // SAFETY: writing a local buffer into our pipe.
        assert_eq!(
            unsafe { libc::write(w.as_raw_fd(), msg.as_ptr() as *const _, msg.len()) },
            msg.len() as isize
        );
        let cap = capacity_of(&r).unwrap();
        assert_eq!(buffered(&r, cap).unwrap(), msg);
        // Still there for the process itself.
        let mut back = [0u8; 16];
        // SAFETY: reading into a local buffer from our pipe.
        let n = unsafe { libc::read(r.as_raw_fd(), back.as_mut_ptr() as *mut _, back.len()) };
        assert_eq!(&back[..n as usize], msg);
        assert!(buffered(&r, cap).unwrap().is_empty());
    }
}
