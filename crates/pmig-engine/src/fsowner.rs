//! File access as the restored process, not as the restorer.
//!
//! A restore reopens the files the process had open or mapped, adds its
//! inotify watches and enters its working directory, by path. Run by a
//! daemon, `pmig restore` is root: were it to open those paths with its own
//! credentials, an unprivileged process could come back holding a file it
//! may not open (the same path on this node, or a path whose directory was
//! swapped for a link while the image was on its way). So these accesses are
//! made with the process's own filesystem ids and supplementary groups.
//!
//! Linux keeps credentials per thread, and the raw `setfsuid`, `setfsgid`
//! and `setgroups` calls change only the calling thread's (glibc's wrapper
//! of the last would change every thread's): [`Owner::run`] switches the
//! calling thread for the length of one closure and switches it back, even
//! if the closure panics. Changing the filesystem uid from 0 to another
//! also clears the file capabilities (`CAP_DAC_OVERRIDE`,
//! `CAP_DAC_READ_SEARCH`, `CAP_FOWNER`, …) from the thread's effective set,
//! and switching back restores them (capabilities(7)). Of those, the ones
//! the process itself has in its effective set (a backup tool given
//! `CAP_DAC_READ_SEARCH`, say) are raised again for the switch, so the
//! kernel checks exactly what it would check for the process.

use crate::error::{EngineError, Result};

/// The filesystem credentials a restored process accesses files with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub fsuid: u32,
    pub fsgid: u32,
    pub groups: Vec<u32>,
    /// The file capabilities ([`FILE_CAPS`]) in the process's effective
    /// set, raised for the switch.
    pub caps: u64,
    /// The restorer's own, to switch back to (read once: a restore opens
    /// hundreds of files, and each switch costs a few system calls).
    own: Ids,
}

/// A thread's filesystem ids and groups.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Ids {
    fsuid: u32,
    fsgid: u32,
    groups: Vec<u32>,
}

/// The capabilities a change of the filesystem uid from 0 clears from the
/// effective set (capabilities(7)): `CAP_CHOWN`, `CAP_DAC_OVERRIDE`,
/// `CAP_DAC_READ_SEARCH`, `CAP_FOWNER`, `CAP_FSETID`, `CAP_LINUX_IMMUTABLE`,
/// `CAP_MKNOD`, `CAP_MAC_OVERRIDE`.
pub const FILE_CAPS: u64 =
    (1 << 0) | (1 << 1) | (1 << 2) | (1 << 3) | (1 << 4) | (1 << 9) | (1 << 27) | (1 << 32);

impl Owner {
    /// The owner whose credentials a restore must use, if they differ from
    /// what the restorer may do anyway: None for a process whose filesystem
    /// uid is root (it had root's file access), and None when this restorer
    /// is not root (the kernel then checks its own, unprivileged, ids; it
    /// could not switch to another user's).
    /// `effective_caps`: the process's effective capability set.
    pub fn for_process(
        fsuid: u32,
        fsgid: u32,
        groups: &[u32],
        effective_caps: u64,
    ) -> Result<Option<Owner>> {
        // SAFETY: geteuid has no arguments and cannot fail.
        if fsuid == 0 || unsafe { libc::geteuid() } != 0 {
            return Ok(None);
        }
        Ok(Some(Owner {
            fsuid,
            fsgid,
            groups: groups.to_vec(),
            caps: effective_caps & FILE_CAPS,
            own: current()?,
        }))
    }

    /// Runs `f` with the calling thread's filesystem uid, gid and
    /// supplementary groups switched to the owner's, and switches back.
    /// Call it from the thread that made this `Owner`: its ids are the ones
    /// switched back to.
    pub fn run<T>(&self, f: impl FnOnce() -> T) -> Result<T> {
        let back = SwitchBack(&self.own);
        set(self.fsuid, self.fsgid, &self.groups)
            .and_then(|()| raise(self.caps))
            .map_err(|e| {
                EngineError::Other(format!(
                    "take the credentials of uid {} gid {} to open its files: {e}",
                    self.fsuid, self.fsgid
                ))
            })?;
        let out = f();
        drop(back);
        Ok(out)
    }
}

/// Switches the thread back to these ids when dropped.
struct SwitchBack<'a>(&'a Ids);

impl Drop for SwitchBack<'_> {
    fn drop(&mut self) {
        let s = self.0;
        // Staying with another user's credentials would make every later
        // access of this restore wrong: not a state to carry on from.
        if let Err(e) = set(s.fsuid, s.fsgid, &s.groups) {
            panic!("cannot switch back to this restorer's own credentials: {e}");
        }
    }
}

fn current() -> Result<Ids> {
    // SAFETY: setfsuid/setfsgid with -1 (an invalid id) change nothing and
    // return the current value.
    let (fsuid, fsgid) = unsafe {
        (
            libc::syscall(libc::SYS_setfsuid, -1i64) as u32,
            libc::syscall(libc::SYS_setfsgid, -1i64) as u32,
        )
    };
    // SAFETY: getgroups with size 0 only counts the groups.
    let n = unsafe { libc::syscall(libc::SYS_getgroups, 0i64, std::ptr::null_mut::<u32>()) };
    if n < 0 {
        return Err(crate::error::errno_err("count this restorer's groups"));
    }
    let mut groups = vec![0u32; n as usize];
    // SAFETY: getgroups writes at most `groups.len()` ids into our buffer.
    let n = unsafe {
        libc::syscall(
            libc::SYS_getgroups,
            groups.len() as i64,
            groups.as_mut_ptr(),
        )
    };
    if n < 0 {
        return Err(crate::error::errno_err("read this restorer's groups"));
    }
    groups.truncate(n as usize);
    Ok(Ids {
        fsuid,
        fsgid,
        groups,
    })
}

/// Sets the calling thread's groups, filesystem gid and filesystem uid (in
/// that order: once the uid is not root, the others could not be changed),
/// and checks that they took.
fn set(fsuid: u32, fsgid: u32, groups: &[u32]) -> std::io::Result<()> {
    // SAFETY: the raw setgroups reads `groups.len()` ids from our slice and
    // changes only this thread's credentials.
    let r = unsafe { libc::syscall(libc::SYS_setgroups, groups.len() as i64, groups.as_ptr()) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: setfsgid/setfsuid take an id and change only this thread's
    // credentials; they return the previous value, so each is read back
    // with -1, which changes nothing.
    let now = unsafe {
        libc::syscall(libc::SYS_setfsgid, fsgid as i64);
        libc::syscall(libc::SYS_setfsuid, fsuid as i64);
        (
            libc::syscall(libc::SYS_setfsuid, -1i64) as u32,
            libc::syscall(libc::SYS_setfsgid, -1i64) as u32,
        )
    };
    if now != (fsuid, fsgid) {
        return Err(std::io::Error::from_raw_os_error(libc::EPERM));
    }
    Ok(())
}

/// Adds `caps` (of those permitted) to the calling thread's effective set.
/// Switching the filesystem uid back to 0 later puts every file
/// capability of the permitted set back in the effective one, so nothing
/// raised here outlives the switch.
fn raise(caps: u64) -> std::io::Result<()> {
    if caps == 0 {
        return Ok(());
    }
    // struct __user_cap_header_struct, version 3, this thread.
    let mut hdr = [0x2008_0522u32, 0];
    // Two struct __user_cap_data_struct: effective, permitted, inheritable.
    let mut data = [0u32; 6];
    // SAFETY: capget fills the two data structs we pass, for this thread.
    if unsafe { libc::syscall(libc::SYS_capget, hdr.as_mut_ptr(), data.as_mut_ptr()) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let permitted = data[1] as u64 | (data[4] as u64) << 32;
    let effective = (data[0] as u64 | (data[3] as u64) << 32) | (caps & permitted);
    data[0] = effective as u32;
    data[3] = (effective >> 32) as u32;
    // SAFETY: capset reads the header and the two data structs; it changes
    // only this thread's capabilities.
    if unsafe { libc::syscall(libc::SYS_capset, hdr.as_mut_ptr(), data.as_ptr()) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_root_owned_process_needs_no_switch() {
        assert_eq!(Owner::for_process(0, 0, &[], 0).unwrap(), None);
    }

    /// As root: a file only root may read does not open as uid 65534, one
    /// that 65534 owns does, and afterwards the thread has its own ids and
    /// groups again. A thread that existed before the switch keeps root's
    /// access throughout.
    #[test]
    fn the_switch_is_for_this_thread_and_this_closure_only() {
        // SAFETY: geteuid has no arguments.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        let secret = d.path().join("secret");
        std::fs::write(&secret, b"x").unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let theirs = d.path().join("theirs");
        std::fs::write(&theirs, b"y").unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();

        let before = current().unwrap();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let (res_tx, res_rx) = std::sync::mpsc::channel::<bool>();
        let other = std::thread::spawn({
            let secret = secret.clone();
            move || {
                go_rx.recv().unwrap();
                res_tx.send(std::fs::read(secret).is_ok()).unwrap();
            }
        });
        let o = Owner::for_process(65534, 65534, &[65534], 0)
            .unwrap()
            .unwrap();
        let (other_thread, s, t) = o
            .run(|| {
                go_tx.send(()).unwrap();
                let other_thread = res_rx.recv().unwrap();
                (other_thread, std::fs::read(&secret), std::fs::read(&theirs))
            })
            .unwrap();
        other.join().unwrap();
        assert!(other_thread, "another thread lost root's access");
        let e = s.expect_err("uid 65534 read a file only root may read");
        assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e}");
        assert_eq!(t.unwrap(), b"y");
        assert_eq!(
            std::fs::read(&secret).unwrap(),
            b"x",
            "not root again after the switch"
        );
        assert_eq!(current().unwrap(), before, "the thread's ids are not back");
    }

    /// A process that has `CAP_DAC_READ_SEARCH` in its effective set (and
    /// others that do not matter here) reads what its uid alone could not;
    /// the thread is as before afterwards.
    #[test]
    fn the_process_s_own_file_capabilities_count() {
        // SAFETY: geteuid has no arguments.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let secret = d.path().join("secret");
        std::fs::write(&secret, b"x").unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let before = current().unwrap();
        let cap_net_raw = 1u64 << 13;
        let with = Owner::for_process(65534, 65534, &[], (1 << 2) | cap_net_raw)
            .unwrap()
            .unwrap();
        assert_eq!(with.caps, 1 << 2, "only file capabilities are raised");
        let read = with.run(|| std::fs::read(&secret)).unwrap();
        assert_eq!(read.unwrap(), b"x", "CAP_DAC_READ_SEARCH did not count");
        let without = Owner::for_process(65534, 65534, &[], cap_net_raw)
            .unwrap()
            .unwrap();
        let read = without.run(|| std::fs::read(&secret)).unwrap();
        assert!(read.is_err(), "read a root-only file without a capability");
        assert_eq!(current().unwrap(), before, "the thread's ids are not back");
        assert_eq!(std::fs::read(&secret).unwrap(), b"x", "not root again");
    }
}
