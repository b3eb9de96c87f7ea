//! Files the process holds open after they were deleted: a shell's
//! here-document or long here-string, `tmpfile()`, Python's
//! `TemporaryFile`, any "open, unlink, use" scratch file. No path leads to
//! one any more, so it cannot be reopened by path on another node: its bytes
//! move in the image, up to [`MAX_BYTES`] per file.
//!
//! Capture: `files` names each descriptor of such a file
//! ([`FdKind::Ghost`](super::files::FdKind::Ghost), by device and inode)
//! and lists it in `cx.ghost_fds`; this part reads each file once, through
//! `/proc/PID/fd/N` (a new open, so the process's offset does not move): its
//! mode, owner and bytes. Only a regular file with no name left (`st_nlink`
//! 0) that no other process holds (`holders`) is taken: one still named
//! elsewhere, or shared, would become two files that drift apart.
//!
//! Restore: each file is made again, unnamed (`O_TMPFILE`), in the
//! directory it was deleted from if that is here and can hold one, else in
//! `/tmp`, filled and given its mode and owner; every descriptor of it is a
//! new open of that file with the descriptor's flags, at its offset
//! (`files`). The process sees it in /proc as "DIR/#INODE (deleted)" instead
//! of its old name.

use super::{Capture, Preflight, Resource};
use crate::error::{EngineError, Result};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};

pub struct Ghosts;

/// The largest deleted file whose bytes a capture copies; a larger one is
/// refused (the process runs on).
pub const MAX_BYTES: u64 = 64 << 20;

/// One deleted file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ghost {
    /// `st_dev` and `st_ino` where it was captured: how `files` names it.
    pub dev: u64,
    pub ino: u64,
    /// The path it had (its descriptors' link, without " (deleted)").
    pub path: String,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Its bytes, all of them.
    pub data: Vec<u8>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GhostsState {
    pub files: Vec<Ghost>,
}

/// A descriptor of a deleted file, as `files` found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GhostFd {
    pub fd: i32,
    pub dev: u64,
    pub ino: u64,
}

/// The path an fd link names once its file was deleted, if it was.
pub fn deleted_path(link: &str) -> Option<&str> {
    link.strip_suffix(" (deleted)")
}

/// What refuses the deleted file `md` (the `stat` of the process's fd),
/// if anything: only a regular file without a name left, small enough.
pub fn refusal(md: &std::fs::Metadata) -> Option<String> {
    if !md.file_type().is_file() {
        return Some("a deleted directory or special file".into());
    }
    if md.nlink() > 0 {
        let n = md.nlink();
        return Some(format!(
            "a deleted name of a file that still has {n} other name{}",
            if n == 1 { "" } else { "s" }
        ));
    }
    (md.size() > MAX_BYTES).then(|| {
        format!(
            "a deleted file of {} MiB (pmig copies deleted files of up to {} MiB)",
            md.size().div_ceil(1 << 20),
            MAX_BYTES >> 20
        )
    })
}

/// Whether fd `fd` of process `other`, whose link is `link`, is the deleted
/// file `(dev, ino)`.
pub fn is_one_of(other: libc::pid_t, fd: i32, link: &str, files: &[(u64, u64)]) -> bool {
    deleted_path(link).is_some()
        && std::fs::metadata(format!("/proc/{other}/fd/{fd}"))
            .is_ok_and(|md| files.contains(&(md.dev(), md.ino())))
}

impl Resource for Ghosts {
    const PART: &'static str = "ghosts";
    type State = GhostsState;

    /// `files` has listed the descriptors in `cx.ghost_fds`.
    fn capture(cx: &mut Capture) -> Result<GhostsState> {
        let fds = std::mem::take(&mut cx.ghost_fds);
        let mut files: Vec<Ghost> = Vec::new();
        for g in fds {
            if files.iter().any(|f| (f.dev, f.ino) == (g.dev, g.ino)) {
                continue;
            }
            let via = format!("/proc/{}/fd/{}", cx.pid, g.fd);
            let link = crate::procfs::readlink(cx.pid, &format!("fd/{}", g.fd))?;
            let mut f = std::fs::File::open(&via)
                .map_err(|e| EngineError::Other(format!("open {via} ({link}): {e}")))?;
            let md = f
                .metadata()
                .map_err(|e| EngineError::Other(format!("stat {via}: {e}")))?;
            if (md.dev(), md.ino()) != (g.dev, g.ino) {
                return Err(EngineError::Other(format!(
                    "fd {} of process {} is no longer the deleted file it was",
                    g.fd, cx.pid
                )));
            }
            if let Some(why) = refusal(&md) {
                return Err(crate::error::unsupported(
                    cx.pid,
                    format!("{why} (fd {}: {link})", g.fd),
                ));
            }
            let mut data = Vec::with_capacity(md.size() as usize);
            // One byte more than allowed: a file that grew past it is refused.
            (&mut f)
                .take(MAX_BYTES + 1)
                .read_to_end(&mut data)
                .map_err(|e| EngineError::Other(format!("read {via} ({link}): {e}")))?;
            if data.len() as u64 > MAX_BYTES {
                return Err(crate::error::unsupported(
                    cx.pid,
                    format!(
                        "a deleted file of more than {} MiB (fd {}: {link})",
                        MAX_BYTES >> 20,
                        g.fd
                    ),
                ));
            }
            files.push(Ghost {
                dev: g.dev,
                ino: g.ino,
                path: deleted_path(&link).unwrap_or(&link).to_string(),
                mode: md.mode() & 0o7777,
                uid: md.uid(),
                gid: md.gid(),
                data,
            });
        }
        Ok(GhostsState { files })
    }

    fn preflight(s: &GhostsState, pf: &mut Preflight) -> Result<()> {
        for g in &s.files {
            let f = make(g)?;
            let fd = pf.keep(f)?;
            pf.ghosts.insert((g.dev, g.ino), fd);
        }
        Ok(())
    }
}

/// An unnamed file (`O_TMPFILE`) in `dir`.
fn unnamed_in(dir: &str) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .mode(0o600)
        .open(dir)
}

/// The file `g` made again, unnamed, with its bytes, mode and owner.
fn make(g: &Ghost) -> Result<OwnedFd> {
    let dir = std::path::Path::new(&g.path)
        .parent()
        .and_then(|d| d.to_str())
        .filter(|d| !d.is_empty())
        .unwrap_or("/tmp");
    let mut f = unnamed_in(dir)
        .or_else(|_| unnamed_in("/tmp"))
        .map_err(|e| {
            EngineError::Incompatible(format!(
                "cannot make the deleted file {} again (O_TMPFILE in {dir} and /tmp): {e}",
                g.path
            ))
        })?;
    let again = |what: &str, e: std::io::Error| {
        EngineError::Other(format!("{what} of the deleted file {} again: {e}", g.path))
    };
    f.write_all(&g.data)
        .map_err(|e| again("write the bytes", e))?;
    // The owner is best effort: a restore that is not root keeps its own.
    let _ = std::os::unix::fs::fchown(&f, Some(g.uid), Some(g.gid));
    f.set_permissions(std::fs::Permissions::from_mode(g.mode))
        .map_err(|e| again("set the mode", e))?;
    Ok(f.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, SeekFrom};
    use std::os::fd::AsRawFd;

    #[test]
    fn a_deleted_link_names_its_path() {
        assert_eq!(
            deleted_path("/tmp/sh-thd.x (deleted)"),
            Some("/tmp/sh-thd.x")
        );
        assert_eq!(deleted_path("/tmp/x"), None);
    }

    #[test]
    fn only_an_unnamed_regular_file_small_enough_is_taken() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        let f = std::fs::File::create(&p).unwrap();
        let named = refusal(&f.metadata().unwrap());
        assert!(
            named
                .as_deref()
                .is_some_and(|w| w.ends_with("still has 1 other name")),
            "{named:?}"
        );
        std::fs::remove_file(&p).unwrap();
        assert_eq!(refusal(&f.metadata().unwrap()), None);
        f.set_len(MAX_BYTES + 1).unwrap();
        let big = refusal(&f.metadata().unwrap());
        assert!(
            big.as_deref().is_some_and(|w| w.contains("65 MiB")),
            "{big:?}"
        );
        let dir = refusal(&std::fs::metadata(d.path()).unwrap());
        assert!(dir.is_some());
    }

    #[test]
    fn a_ghost_is_made_again_unnamed_with_its_bytes_and_mode() {
        let d = tempfile::tempdir().unwrap();
        let g = Ghost {
            dev: 1,
            ino: 2,
            path: d.path().join("gone").to_str().unwrap().to_string(),
            mode: 0o640,
            uid: 0,
            gid: 0,
            data: b"still here".to_vec(),
        };
        let fd = make(&g).unwrap();
        let mut f = std::fs::File::from(fd);
        let md = f.metadata().unwrap();
        assert_eq!(md.nlink(), 0);
        assert_eq!(md.mode() & 0o7777, 0o640);
        f.seek(SeekFrom::Start(0)).unwrap();
        let mut back = String::new();
        f.read_to_string(&mut back).unwrap();
        assert_eq!(back, "still here");
        // In the directory it was deleted from.
        let link = std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap();
        assert!(link.starts_with(d.path()), "{link:?}");
        // Nothing named was left there.
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
        f.write_all(b"!").unwrap();
        // A directory that is not here: /tmp.
        let elsewhere = Ghost {
            path: "/no/such/dir/x".into(),
            ..g
        };
        let f2 = std::fs::File::from(make(&elsewhere).unwrap());
        let link = std::fs::read_link(format!("/proc/self/fd/{}", f2.as_raw_fd())).unwrap();
        assert!(link.starts_with("/tmp"), "{link:?}");
    }
}
