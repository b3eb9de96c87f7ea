//! Deleted directories: a working directory removed while the process sat
//! in it (a build tree removed under a running job, `mkdir d; cd d; rmdir
//! d`), and descriptors of directories removed since they were opened (a
//! traversal's `opendir`, an `O_PATH` handle).
//!
//! Such a directory is empty (only an empty directory can be removed) and
//! can never hold an entry again: creating anything in it fails with
//! `ENOENT`, `getcwd` fails with `ENOENT` when it is the working directory,
//! and listing it gives nothing. No other process can reach the process
//! through it, so whoever else holds it does not matter. What the process
//! can still tell is its mode and owner (`stat`), that it has no links,
//! which of its descriptors and working directory are that one directory,
//! and where `..` leads.
//!
//! Capture: the kernel names it `PATH (deleted)`; a directory without links
//! is taken with its device and inode, mode, owner and the path it had:
//! the working directory in part `deadcwd` (format 1.14; `files` keeps the
//! kernel's name for it), a descriptor as fd kind `DeadDir` of `files`.
//! Restore: for each deleted directory (by device and inode on the source),
//! a new empty directory is made where it was (in its old parent if that
//! exists, else in `/tmp`), with the same mode and owner, opened, and
//! removed again before the process exists. The new process enters it and
//! opens its descriptors of it through that handle, so it again has an
//! empty deleted directory, one for each it had, whose `..` is its old
//! parent where there is one. A reader older than 1.14 refuses such an
//! image before anything is created: it does not know fd kind `DeadDir`,
//! and it cannot enter the cwd `PATH (deleted)` ("does not exist").

use super::{Capture, Preflight, Resource};
use crate::error::{Ctx, EngineError, Result};
use libc::pid_t;
use serde::{Deserialize, Serialize};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The working directory, when it was deleted: part `deadcwd`.
pub struct DeadCwd;

/// A deleted directory: its device and inode on the source (which
/// descriptors and the working directory are the same one), mode
/// (permission bits, with setgid and sticky), owner, and the path it had.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadDir {
    pub dev: u64,
    pub ino: u64,
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
    dead_cwd(pid).is_ok_and(|d| d.is_some())
}

/// The deleted directory `md` (its `stat`), which the kernel names `link`;
/// `None` if it is not a directory without links.
pub fn of(md: &std::fs::Metadata, link: &str) -> Option<DeadDir> {
    (md.is_dir() && md.nlink() == 0).then(|| DeadDir {
        dev: md.dev(),
        ino: md.ino(),
        mode: md.permissions().mode() & 0o7777,
        uid: md.uid(),
        gid: md.gid(),
        path: link.strip_suffix(DELETED).unwrap_or(link).to_string(),
    })
}

/// The working directory of `pid` if it was deleted (one `stat`; the
/// link is read only then); `None` also if it cannot be read (the `files`
/// capture reads it, and says why).
pub fn dead_cwd(pid: pid_t) -> Result<Option<DeadDir>> {
    let Ok(md) = std::fs::metadata(format!("/proc/{pid}/cwd")) else {
        return Ok(None);
    };
    if md.nlink() != 0 {
        return Ok(None);
    }
    let link = crate::procfs::readlink(pid, "cwd")?;
    Ok(of(&md, &link))
}

impl Resource for DeadCwd {
    const PART: &'static str = "deadcwd";
    type State = DeadDir;

    fn capture(cx: &mut Capture) -> Result<DeadDir> {
        let pid = cx.pid;
        dead_cwd(pid)?.ok_or_else(|| {
            let link = crate::procfs::readlink(pid, "cwd").unwrap_or_default();
            EngineError::Other(format!(
                "the working directory of process {pid} ({link}) is no deleted directory"
            ))
        })
    }

    /// Runs before `files`' preflight, which then leaves the working
    /// directory alone.
    fn preflight(s: &DeadDir, pf: &mut Preflight) -> Result<()> {
        pf.child.cwd = Some(made(pf, s)?);
        Ok(())
    }
}

/// The helper fd (read-only) of deleted directory `d` made again, made on
/// its first use in this restore: the working directory and every
/// descriptor of the same directory share it.
pub fn made(pf: &mut Preflight, d: &DeadDir) -> Result<i32> {
    if let Some(&fd) = pf.dead_dirs.get(&(d.dev, d.ino)) {
        return Ok(fd);
    }
    let fd = pf.keep(made_again(d)?)?;
    pf.dead_dirs.insert((d.dev, d.ino), fd);
    Ok(fd)
}

/// A new open of deleted directory `d` made again, with `flags` (those of
/// the process's descriptor): kept for the new process, its helper fd.
pub fn reopen(pf: &mut Preflight, d: &DeadDir, fd: i32, flags: i32) -> Result<i32> {
    let handle = made(pf, d)?;
    let f = super::open_with(&format!("/proc/self/fd/{handle}"), flags)
        .ctx(|| format!("fd {fd}: open the deleted directory made again"))?;
    pf.keep(f.into())
}

/// Where the directory is made again: its old parent if that is still a
/// directory, then `/tmp`.
fn places(d: &DeadDir) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = Path::new(&d.path)
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

/// A new empty directory with `d`'s mode and owner, opened and removed
/// again.
fn made_again(d: &DeadDir) -> Result<OwnedFd> {
    let mut why = Vec::new();
    for parent in places(d) {
        match make_in(&parent, d) {
            Ok(fd) => return Ok(fd),
            Err(e) => why.push(format!("in {}: {e}", parent.display())),
        }
    }
    Err(EngineError::Incompatible(format!(
        "cannot make the deleted directory {} again: {}",
        d.path,
        why.join("; ")
    )))
}

/// [`made_again`] in `parent`. Made, checked, given its owner and mode
/// and removed through descriptors, never by path alone: whoever else may
/// write `parent` cannot have a file of theirs (or a link to one) taken for
/// it and given away.
fn make_in(parent: &Path, d: &DeadDir) -> std::io::Result<OwnedFd> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::{mkdirat, Mode};
    use nix::unistd::{unlinkat, UnlinkatFlags};
    let other = |what: &str| std::io::Error::other(what.to_string());
    let dir = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(parent)?;
    let at = Some(dir.as_raw_fd());
    // A name nobody uses: at most 100 tries.
    let mut name = None;
    for n in 0..100u32 {
        let try_name = format!(".pmig-dir-{}-{n}", std::process::id());
        match mkdirat(at, try_name.as_str(), Mode::S_IRWXU) {
            Ok(()) => {
                name = Some(try_name);
                break;
            }
            Err(nix::errno::Errno::EEXIST) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    let name = name.ok_or_else(|| std::io::Error::from_raw_os_error(libc::EEXIST))?;
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = match openat(at, name.as_str(), flags, Mode::empty()) {
        // SAFETY: openat returned a new descriptor that nothing else owns.
        Ok(fd) => unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) },
        Err(e) => {
            let _ = unlinkat(at, name.as_str(), UnlinkatFlags::RemoveDir);
            return Err(e.into());
        }
    };
    let f = std::fs::File::from(fd);
    let md = f.metadata()?;
    // Still the empty directory this made (its owner: this process).
    if !(md.is_dir() && md.uid() == nix::unistd::geteuid().as_raw() && md.nlink() == 2) {
        return Err(other(
            "the directory made was replaced before it was opened",
        ));
    }
    let set = std::os::unix::fs::fchown(&f, Some(d.uid), Some(d.gid))
        .and_then(|()| f.set_permissions(std::fs::Permissions::from_mode(d.mode)));
    let removed = unlinkat(at, name.as_str(), UnlinkatFlags::RemoveDir);
    set?;
    removed?;
    if f.metadata()?.nlink() != 0 {
        return Err(other("the directory made was not the one removed"));
    }
    Ok(f.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `stat` of the file behind fd `fd` of this process.
    fn stat_of(fd: &impl AsRawFd) -> std::fs::Metadata {
        std::fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap()
    }

    fn dead(path: &Path, mode: u32) -> DeadDir {
        DeadDir {
            dev: 1,
            ino: 2,
            mode,
            uid: 65534,
            gid: 65534,
            path: path.to_string_lossy().into(),
        }
    }

    #[test]
    fn the_directory_is_made_again_empty_deleted_and_as_it_was() {
        let d = tempfile::tempdir().unwrap();
        let fd = match made_again(&dead(&d.path().join("gone"), 0o2751)) {
            Ok(fd) => fd,
            // chown needs root; without it, the error names the cause.
            Err(e) if !nix::unistd::geteuid().is_root() => {
                assert!(e.to_string().contains("cannot make"), "{e}");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        let md = stat_of(&fd);
        assert!(md.is_dir());
        assert_eq!(md.nlink(), 0, "not deleted");
        assert_eq!(md.permissions().mode() & 0o7777, 0o2751);
        assert_eq!((md.uid(), md.gid()), (65534, 65534));
        // Made in the old parent, and nothing left there.
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
        let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
        assert!(
            link.starts_with(d.path()) && link.to_string_lossy().ends_with(DELETED),
            "{link:?}"
        );
        // What `of` takes from it is what it was made from.
        let again = of(&md, &link.to_string_lossy()).expect("a deleted directory");
        assert_eq!((again.mode, again.uid, again.gid), (0o2751, 65534, 65534));
        assert_eq!(Path::new(&again.path).parent(), Some(d.path()), "{again:?}");
    }

    #[test]
    fn without_its_old_parent_it_is_made_in_tmp() {
        let s = dead(Path::new("/nonexistent-pmig-parent/gone"), 0o700);
        assert_eq!(places(&s), vec![PathBuf::from("/tmp")]);
        let s = dead(Path::new("/tmp/gone"), 0o700);
        assert_eq!(places(&s), vec![PathBuf::from("/tmp")]);
    }

    #[test]
    fn a_live_directory_or_a_deleted_file_is_no_deleted_directory() {
        let d = tempfile::tempdir().unwrap();
        let md = std::fs::metadata(d.path()).unwrap();
        assert_eq!(of(&md, "/x (deleted)"), None);
        let f = tempfile::tempfile().unwrap();
        assert_eq!(of(&f.metadata().unwrap(), "/tmp/#1 (deleted)"), None);
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
