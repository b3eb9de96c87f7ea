//! A working directory that was deleted while the process sat in it (a
//! build tree removed under a running job, `mkdir d; cd d; rmdir d`).
//!
//! Such a directory is empty (only an empty directory can be removed) and
//! can never hold an entry again: creating anything in it fails with
//! `ENOENT`, `getcwd` fails with `ENOENT`, and listing it gives nothing. No
//! other process can reach the process through it, so whoever else sits in
//! it does not matter. What the process can still tell is its mode and
//! owner (`stat(".")`), that it has no links, and where `..` leads.
//!
//! Capture: the kernel names it `PATH (deleted)` in `/proc/PID/cwd` (the
//! `files` part keeps that name); this part (format 1.14) is written only
//! when the directory has no links, with its mode, owner and the path it
//! had. Restore: a new empty directory is made beside where it was (in its
//! old parent if that exists, else in `/tmp`), with the same mode and
//! owner, opened, and removed again before the process exists; the new
//! process enters it through that descriptor. So it is again in an empty
//! deleted directory, whose `..` is its old parent where there is one. A
//! reader older than 1.14 does not know this part and refuses the image
//! with "working directory … (deleted) does not exist".

use super::{Capture, Preflight, Resource};
use crate::error::{Ctx, EngineError, Result};
use libc::pid_t;
use serde::{Deserialize, Serialize};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub struct DeadCwd;

/// The deleted working directory: its mode (permission bits, with setgid
/// and sticky), owner, and the path it had.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadCwdState {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub path: String,
}

/// The kernel's mark on the name of an unlinked file or directory.
const DELETED: &str = " (deleted)";

/// Whether the working directory of `pid` has been deleted: it has no
/// links left (a live directory whose name ends in " (deleted)" has).
pub fn is_deleted(pid: pid_t) -> bool {
    std::fs::metadata(format!("/proc/{pid}/cwd")).is_ok_and(|m| m.nlink() == 0)
}

impl Resource for DeadCwd {
    const PART: &'static str = "deadcwd";
    type State = DeadCwdState;

    fn capture(cx: &mut Capture) -> Result<DeadCwdState> {
        let pid = cx.pid;
        let md = std::fs::metadata(format!("/proc/{pid}/cwd"))
            .ctx(|| format!("stat the working directory of process {pid}"))?;
        let link = crate::procfs::readlink(pid, "cwd")?;
        Ok(DeadCwdState {
            mode: md.permissions().mode() & 0o7777,
            uid: md.uid(),
            gid: md.gid(),
            path: link.strip_suffix(DELETED).unwrap_or(&link).to_string(),
        })
    }

    fn preflight(s: &DeadCwdState, pf: &mut Preflight) -> Result<()> {
        let dir = made_again(s)?;
        pf.child.cwd = Some(pf.keep(dir)?);
        Ok(())
    }
}

/// Where the directory is made again: its old parent if that is still a
/// directory, then `/tmp`.
fn places(s: &DeadCwdState) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = Path::new(&s.path)
        .parent()
        .filter(|p| p.is_absolute() && p.is_dir())
        .map(Path::to_path_buf)
        .into_iter()
        .collect();
    if !v.iter().any(|p| p == Path::new("/tmp")) {
        v.push("/tmp".into());
    }
    v
}

/// A new empty directory with `s`'s mode and owner, opened (`O_PATH`) and
/// removed again: the descriptor the new process enters.
fn made_again(s: &DeadCwdState) -> Result<std::os::fd::OwnedFd> {
    let mut why = Vec::new();
    for parent in places(s) {
        match make_in(&parent, s) {
            Ok(fd) => return Ok(fd),
            Err(e) => why.push(format!("in {}: {e}", parent.display())),
        }
    }
    Err(EngineError::Incompatible(format!(
        "cannot make its deleted working directory ({}) again: {}",
        s.path,
        why.join("; ")
    )))
}

fn make_in(parent: &Path, s: &DeadCwdState) -> std::io::Result<std::os::fd::OwnedFd> {
    // A name nobody uses: at most 100 tries (another restore may pick the
    // same pid-based names only after this one removed its directory).
    let mut path = None;
    for n in 0..100u32 {
        let p = parent.join(format!(".pmig-cwd-{}-{n}", std::process::id()));
        match std::fs::create_dir(&p) {
            Ok(()) => {
                path = Some(p);
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    let path = path.ok_or_else(|| std::io::Error::from_raw_os_error(libc::EEXIST))?;
    let opened = (|| {
        std::os::unix::fs::chown(&path, Some(s.uid), Some(s.gid))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(s.mode))?;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(&path)
    })();
    let removed = std::fs::remove_dir(&path);
    let f = opened?;
    removed?;
    Ok(f.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_is_made_again_empty_deleted_and_as_it_was() {
        let d = tempfile::tempdir().unwrap();
        let s = DeadCwdState {
            mode: 0o2751,
            uid: 65534,
            gid: 65534,
            path: d.path().join("gone").to_string_lossy().into(),
        };
        let fd = match made_again(&s) {
            Ok(fd) => fd,
            // chown needs root; without it, the error names the cause.
            Err(e) if !nix::unistd::geteuid().is_root() => {
                assert!(e.to_string().contains("cannot make"), "{e}");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        let md = std::fs::metadata(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&fd)
        ))
        .unwrap();
        assert!(md.is_dir());
        assert_eq!(md.nlink(), 0, "not deleted");
        assert_eq!(md.permissions().mode() & 0o7777, 0o2751);
        assert_eq!((md.uid(), md.gid()), (65534, 65534));
        // Made in the old parent, and nothing left there.
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
        let link = std::fs::read_link(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&fd)
        ))
        .unwrap();
        assert!(
            link.starts_with(d.path()) && link.to_string_lossy().ends_with(DELETED),
            "{link:?}"
        );
    }

    #[test]
    fn without_its_old_parent_it_is_made_in_tmp() {
        let s = DeadCwdState {
            mode: 0o700,
            uid: 0,
            gid: 0,
            path: "/nonexistent-pmig-parent/gone".into(),
        };
        assert_eq!(places(&s), vec![PathBuf::from("/tmp")]);
        let s = DeadCwdState {
            path: "/tmp/gone".into(),
            ..s
        };
        assert_eq!(places(&s), vec![PathBuf::from("/tmp")]);
    }

    #[test]
    fn a_deleted_working_directory_is_told_from_a_live_one_named_alike() {
        let d = tempfile::tempdir().unwrap();
        // A live directory whose name ends like the kernel's mark.
        let live = d.path().join("x (deleted)");
        std::fs::create_dir(&live).unwrap();
        let gone = d.path().join("gone");
        std::fs::create_dir(&gone).unwrap();
        let sleeper = |dir: &Path| {
            std::process::Command::new("sleep")
                .arg("30")
                .current_dir(dir)
                .spawn()
                .unwrap()
        };
        let mut a = sleeper(&live);
        let mut b = sleeper(&gone);
        std::fs::remove_dir(&gone).unwrap();
        let (da, db) = (is_deleted(a.id() as pid_t), is_deleted(b.id() as pid_t));
        for c in [&mut a, &mut b] {
            let _ = c.kill();
            let _ = c.wait();
        }
        assert!(!da, "a live directory read as deleted");
        assert!(db, "a deleted directory read as live");
    }
}
