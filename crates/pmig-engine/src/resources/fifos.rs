//! Named pipes (FIFOs) that the process alone holds open, beyond fds 0–2:
//! the control pipes that valgrind's gdbserver keeps in `/tmp`, or a
//! command pipe that a daemon reads and other programs open now and then
//! to write into it. Each descriptor is opened again by path, like a file,
//! with its access mode and `O_NONBLOCK`. The pipe moves with the bytes
//! buffered in it and its capacity.
//!
//! The pipe buffer belongs to the kernel of one node, not to the file. A
//! writer that stays behind on the source would write into the source's
//! pipe, so a named pipe that another process also holds is refused, as
//! anonymous pipes are (see `holders`, which reads every process's
//! descriptors again at the freeze for such a process, since any process
//! may open the path meanwhile). A program that opens the path on
//! the destination after the move reaches the moved process, as it would
//! have on the source.
//!
//! Capture: `files` finds the descriptor ([`super::files::FdKind::Fifo`]).
//! The bytes are read without being consumed: a read end of our own,
//! opened through `/proc/PID/fd/N` with `O_NONBLOCK`, is `tee`d into a pipe
//! of ours while the process is frozen. They go with the first descriptor
//! of that pipe; the process's other descriptors of it carry none.
//!
//! Restore: before the new process exists, the restore makes the pipe again
//! at its path if the path is free (`mkfifo` with the process's
//! credentials and the mode it had). It refuses the image if the path
//! names something else. It then opens a read-write end of its own, which
//! never blocks, and looks at what the pipe holds:
//! - empty, as on another node: the capacity is set and the bytes are
//!   written back;
//! - exactly the bytes of the image: this is the same pipe, still held by
//!   the frozen original on this node. They are left as they are; writing
//!   them again would double them;
//! - anything else: another process has written into it since, and the
//!   image is refused.
//!
//! Each descriptor is then opened with its access mode and `O_NONBLOCK`
//! (the restore's own end lets a non-blocking writer open), and gets its
//! own `O_NONBLOCK` back. The restore's end is closed once the process
//! holds its own. A skeleton holds no named pipe: it is made while the
//! process still runs at the source, and on the same node it would open
//! the very pipe the original uses. Such a process is restored at the stop
//! instead.
//!
//! On one node the frozen original holds its ends of the pipe until it is
//! killed: for the post-copy family, until its last page has moved. Until
//! then a reader of the copy sees no end-of-file when the copy closes its
//! last write end, and a writer gets no `EPIPE` when the copy closes its
//! last read end. Between nodes there is no such overlap.
//!
//! Not kept: a named pipe deleted since it was opened is refused, as is
//! one at fds 0–2 that the home node's stdio replaces (see `files`). A pipe
//! made again on another node stays there after the process has gone (also
//! when the restore fails after making it: an empty named pipe at the path
//! the process had), and the source's stays behind, as files that a process
//! made do.

use super::{open_with, pipes, Preflight};
use crate::error::{EngineError, Result};
use libc::pid_t;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};

/// One descriptor of a named pipe (format 1.16).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fifo {
    /// Its path.
    pub path: String,
    /// Its device and inode on the source: descriptors of one pipe share
    /// its buffer.
    pub dev: u64,
    pub ino: u64,
    /// Its permission bits, to make it again where the path is free.
    pub mode: u32,
    /// Its capacity in bytes (`F_GETPIPE_SZ`).
    pub capacity: u32,
    /// What was buffered in it, unread: with the first descriptor of the
    /// pipe only (empty for the others). As bytes, see `ThreadState::xstate`.
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
}

/// A descriptor whose link is `link` and whose file is `md` (a named
/// pipe), as the image keeps it; its capacity and data are read by
/// [`capture`]. An error names what is refused.
pub fn classify(link: &str, md: &std::fs::Metadata) -> std::result::Result<Fifo, String> {
    if link.ends_with(" (deleted)") {
        return Err("a deleted named pipe".into());
    }
    Ok(Fifo {
        path: link.to_string(),
        dev: md.dev(),
        ino: md.ino(),
        mode: md.mode() & 0o7777,
        capacity: 0,
        data: Vec::new(),
    })
}

/// Whether fd `fd` of process `other`, whose link is `link`, is one of
/// the named pipes `fifos` (path, device, inode).
pub fn is_one_of(other: pid_t, fd: i32, link: &str, fifos: &[(String, u64, u64)]) -> bool {
    fifos.iter().any(|(p, ..)| p == link)
        && std::fs::metadata(format!("/proc/{other}/fd/{fd}")).is_ok_and(|md| {
            fifos
                .iter()
                .any(|(p, d, i)| p == link && (*d, *i) == (md.dev(), md.ino()))
        })
}

/// The path of a named pipe that `pid` holds beyond fds 0–2, if any (one
/// that a migration would carry). None for a process that is gone.
pub fn held_by(pid: pid_t) -> Option<String> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    fds.filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
                .is_some_and(|n| n > 2)
        })
        .find_map(|e| {
            let md = std::fs::metadata(e.path()).ok()?;
            if !md.file_type().is_fifo() {
                return None;
            }
            let link = std::fs::read_link(e.path()).ok()?;
            let link = link.to_str()?;
            // An anonymous pipe reads as "pipe:[N]".
            link.starts_with('/').then(|| link.to_string())
        })
}

/// Fills in the capacity of the named pipe at `fd` of `pid` (frozen), and,
/// if `first` (no earlier descriptor of the process is this pipe), the
/// bytes buffered in it, which stay there.
pub fn capture(pid: pid_t, fd: i32, f: &mut Fifo, first: bool) -> Result<()> {
    let path = format!("/proc/{pid}/fd/{fd}");
    // A read end of our own never blocks with O_NONBLOCK, and adds no
    // writer (a reader of the process still sees end-of-file when it
    // should).
    let ours =
        open_with(&path, libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC).map_err(|e| {
            EngineError::Sys {
                what: format!("open the named pipe of fd {fd} ({})", f.path),
                source: e,
            }
        })?;
    let ours = OwnedFd::from(ours);
    f.capacity = pipes::capacity_of(&ours)?;
    if first {
        f.data = pipes::buffered(&ours, f.capacity)?;
    }
    Ok(())
}

/// The restore's own end of each named pipe, by its device and inode on
/// the source: held until every descriptor of the process is open.
#[derive(Default)]
pub struct Ends(HashMap<(u64, u64), OwnedFd>);

/// Opens descriptor `fd` (open flags `flags`) of the named pipe `f` for the
/// new process, and returns the kept fd; the first descriptor of a pipe
/// makes it ready first (see the module's documentation).
pub fn reopen(pf: &mut Preflight, ends: &mut Ends, fd: i32, flags: i32, f: &Fifo) -> Result<i32> {
    let refuse =
        |why: String| EngineError::Incompatible(format!("fd {fd}: named pipe {}: {why}", f.path));
    if pf.opts.skeleton {
        return Err(EngineError::Incompatible(format!(
            "fd {fd}: a named pipe ({}) is opened at the stop only, not in a skeleton",
            f.path
        )));
    }
    if let std::collections::hash_map::Entry::Vacant(e) = ends.0.entry((f.dev, f.ino)) {
        e.insert(ready(pf, f).map_err(refuse)?);
    }
    let access = flags & libc::O_ACCMODE;
    let opened = pf.as_owner(|| open_with(&f.path, access | libc::O_NONBLOCK | libc::O_CLOEXEC))?;
    let file = opened.map_err(|e| refuse(format!("cannot open it again{}: {e}", pf.as_whom())))?;
    // SAFETY: fcntl(F_SETFL) on a descriptor we own.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & libc::O_NONBLOCK) } < 0 {
        return Err(crate::error::errno_err(format!("fd {fd}: set its flags")));
    }
    pf.keep(file.into())
}

/// Makes the pipe `f` again if its path is free, opens the restore's own
/// end, and gives the pipe its bytes and capacity unless it holds them.
fn ready(pf: &Preflight, f: &Fifo) -> std::result::Result<OwnedFd, String> {
    match std::fs::metadata(&f.path) {
        Ok(md) if md.file_type().is_fifo() => {}
        Ok(_) => return Err("the path is no longer a named pipe".into()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => make(pf, f)?,
        Err(e) => return Err(e.to_string()),
    }
    let end = open_with(&f.path, libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .map_err(|e| format!("cannot open it: {e}"))?;
    let end = OwnedFd::from(end);
    fill(&end, f)?;
    Ok(end)
}

/// `mkfifo` at the path with the process's credentials, then the mode it
/// had (which the umask may have narrowed).
fn make(pf: &Preflight, f: &Fifo) -> std::result::Result<(), String> {
    let mode = f.mode;
    let path = f.path.clone();
    let made = pf
        .as_owner(|| {
            nix::unistd::mkfifo(
                path.as_str(),
                nix::sys::stat::Mode::from_bits_truncate(mode),
            )
            .map_err(std::io::Error::from)
            .and_then(|()| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)))
        })
        .map_err(|e| e.to_string())?;
    made.map_err(|e| format!("cannot make it again{}: {e}", pf.as_whom()))
}

/// Gives the pipe behind `end` the bytes and capacity of `f` if it is
/// empty; leaves it if it holds exactly those bytes; else refuses.
fn fill(end: &OwnedFd, f: &Fifo) -> std::result::Result<(), String> {
    let queued = pipes::queued(end).map_err(|e| e.to_string())?;
    if queued > 0 {
        let cap = pipes::capacity_of(end).map_err(|e| e.to_string())?;
        let now = pipes::buffered(end, cap).map_err(|e| e.to_string())?;
        return if now == f.data {
            Ok(())
        } else {
            Err(format!(
                "it holds {} bytes that the process did not leave in it (another process writes to it)",
                now.len()
            ))
        };
    }
    if f.data.is_empty() {
        return Ok(());
    }
    let cap = pipes::capacity_of(end).map_err(|e| e.to_string())?;
    if f.capacity > cap {
        if let Err(e) = pipes::set_capacity(end, f.capacity) {
            if f.data.len() > cap as usize {
                return Err(format!(
                    "{} bytes need a capacity of {}: {e}",
                    f.data.len(),
                    f.capacity
                ));
            }
        }
    }
    let mut w = std::fs::File::from(end.try_clone().map_err(|e| e.to_string())?);
    // Its capacity holds all of it (the source's did): this never blocks.
    std::io::Write::write_all(&mut w, &f.data).map_err(|e| format!("write its data back: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A named pipe in a fresh directory, and our read-write end of it.
    fn fifo(data: &[u8]) -> (tempfile::TempDir, Fifo, OwnedFd) {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("p").to_str().unwrap().to_string();
        nix::unistd::mkfifo(
            path.as_str(),
            nix::sys::stat::Mode::from_bits_truncate(0o640),
        )
        .unwrap();
        let end = OwnedFd::from(open_with(&path, libc::O_RDWR | libc::O_NONBLOCK).unwrap());
        let md = std::fs::metadata(&path).unwrap();
        let mut f = classify(&path, &md).unwrap();
        f.capacity = 65536;
        f.data = data.to_vec();
        (d, f, end)
    }

    fn contents(end: &OwnedFd) -> Vec<u8> {
        pipes::buffered(end, pipes::capacity_of(end).unwrap()).unwrap()
    }

    #[test]
    fn an_empty_pipe_gets_the_bytes_and_one_holding_them_is_left_as_it_is() {
        let (_d, f, end) = fifo(b"hello, pipe");
        assert_eq!(f.mode, 0o640);
        fill(&end, &f).unwrap();
        assert_eq!(contents(&end), b"hello, pipe");
        // The same pipe again (the original still holds it): not doubled.
        fill(&end, &f).unwrap();
        assert_eq!(contents(&end), b"hello, pipe");
    }

    #[test]
    fn a_pipe_holding_other_bytes_is_refused() {
        let (_d, f, end) = fifo(b"mine");
        let mut w = std::fs::File::from(end.try_clone().unwrap());
        std::io::Write::write_all(&mut w, b"someone else's").unwrap();
        let e = fill(&end, &f).unwrap_err();
        assert!(e.contains("14 bytes that the process did not leave"), "{e}");
        assert_eq!(contents(&end), b"someone else's");
    }

    #[test]
    fn a_deleted_named_pipe_is_refused() {
        let (_d, f, _end) = fifo(b"");
        let md = std::fs::metadata(&f.path).unwrap();
        let e = classify(&format!("{} (deleted)", f.path), &md).unwrap_err();
        assert_eq!(e, "a deleted named pipe");
    }

    #[test]
    fn another_process_holding_the_pipe_is_found_by_path_and_inode() {
        let (_d, f, end) = fifo(b"");
        let me = std::process::id() as pid_t;
        let fd = end.as_raw_fd();
        let mine = vec![(f.path.clone(), f.dev, f.ino)];
        assert!(is_one_of(me, fd, &f.path, &mine));
        // Another pipe at that path (made again since): not this one.
        let other = vec![(f.path.clone(), f.dev, f.ino + 1)];
        assert!(!is_one_of(me, fd, &f.path, &other));
        assert!(!is_one_of(me, fd, "/elsewhere", &mine));
    }
}
