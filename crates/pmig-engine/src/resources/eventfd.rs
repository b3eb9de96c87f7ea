//! eventfd counters (the wake-up channel of event loops and thread pools):
//! each moves with its count, its semaphore mode and its flags; fds that
//! shared one keep sharing it. An eventfd another process also holds (one
//! end of a wake-up between two processes) is refused.
//!
//! Capture reads the count from the fd's fdinfo, while the process is
//! frozen, without touching it. Restore: the restorer's process creates
//! the eventfd with that count before the new process exists, which
//! inherits it (`files` installs it at its fd). What is in the image is the
//! fd kind [`super::files::FdKind::EventFd`] (format 1.3).

use super::Preflight;
use crate::error::{errno_err, EngineError, Result};
use libc::pid_t;
use std::os::fd::{FromRawFd, OwnedFd};

pub const LINK: &str = "anon_inode:[eventfd]";

/// An eventfd's state from its fdinfo text: (id, count, semaphore).
pub fn parse(info: &str) -> Option<(u64, u64, bool)> {
    let field = |k: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(k))
            .map(|v| v.trim().to_string())
    };
    // The count is printed in hex; the id in decimal.
    let count = u64::from_str_radix(&field("eventfd-count:")?, 16).ok()?;
    let id = field("eventfd-id:")?.parse().ok()?;
    let semaphore = field("eventfd-semaphore:").as_deref() == Some("1");
    Some((id, count, semaphore))
}

/// The count and mode of `pid`'s eventfd at `fd`, from its fdinfo text.
pub fn capture(pid: pid_t, fd: i32, info: &str) -> Result<(u64, bool)> {
    let (_, count, semaphore) = parse(info).ok_or_else(|| {
        EngineError::Other(format!(
            "cannot parse the eventfd state of fd {fd} of process {pid}"
        ))
    })?;
    Ok((count, semaphore))
}

/// The id of `pid`'s eventfd at `fd` (unique on this kernel).
pub fn id_of(pid: pid_t, fd: i32) -> Option<u64> {
    let info = crate::procfs::read(pid, &format!("fdinfo/{fd}")).ok()?;
    parse(&info).map(|(id, _, _)| id)
}

/// Whether fd `fd` of process `other`, whose link is `link`, is one of
/// the eventfds `ids`.
pub fn is_one_of(other: pid_t, fd: i32, link: &str, ids: &[u64]) -> bool {
    link == LINK && id_of(other, fd).is_some_and(|id| ids.contains(&id))
}

/// Creates the eventfd for the new process: a helper fd it inherits.
pub fn preflight(pf: &mut Preflight, count: u64, semaphore: bool, flags: i32) -> Result<i32> {
    if count > u32::MAX as u64 {
        // eventfd() takes an initial count of 32 bits: write the rest.
        return with_large_count(pf, count, semaphore, flags);
    }
    let fd = create(count as u32, semaphore, flags)?;
    pf.keep(fd)
}

/// Sets the count of the eventfd `fd` (a copy of a held skeleton's, whose
/// count is `current`, since nothing else reads or writes it) to `want`:
/// reads take the count to 0 (one read, or one per unit in semaphore
/// mode), a write gives it the new one.
pub fn set_count(
    fd: &impl std::os::fd::AsRawFd,
    current: u64,
    want: u64,
    semaphore: bool,
) -> Result<()> {
    const MOST_READS: u64 = 1 << 16;
    let reads = match (current, semaphore) {
        (0, _) => 0,
        (_, false) => 1,
        (n, true) if n <= MOST_READS => n,
        (n, true) => {
            return Err(crate::error::stale(format!(
                "a semaphore eventfd's count changed from {n}"
            )))
        }
    };
    let mut v = [0u8; 8];
    for _ in 0..reads {
        // SAFETY: reading 8 bytes into our local; the count is not 0, so
        // the read does not wait.
        if unsafe { libc::read(fd.as_raw_fd(), v.as_mut_ptr().cast(), 8) } != 8 {
            return Err(errno_err("read an eventfd"));
        }
    }
    if want > 0 {
        let w = want.to_ne_bytes();
        // SAFETY: writing 8 bytes from our local; the count is 0, so the
        // write does not wait.
        if unsafe { libc::write(fd.as_raw_fd(), w.as_ptr().cast(), 8) } != 8 {
            return Err(errno_err(format!("set an eventfd's count to {want}")));
        }
    }
    Ok(())
}

fn create(initial: u32, semaphore: bool, flags: i32) -> Result<OwnedFd> {
    let mut f = libc::EFD_CLOEXEC;
    if semaphore {
        f |= libc::EFD_SEMAPHORE;
    }
    if flags & libc::O_NONBLOCK != 0 {
        f |= libc::EFD_NONBLOCK;
    }
    // SAFETY: eventfd takes a count and flags and returns a new fd.
    let r = unsafe { libc::eventfd(initial, f) };
    if r < 0 {
        return Err(errno_err("create an eventfd"));
    }
    // SAFETY: a fresh fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

fn with_large_count(pf: &mut Preflight, count: u64, semaphore: bool, flags: i32) -> Result<i32> {
    use std::os::fd::AsRawFd;
    let fd = create(0, semaphore, flags)?;
    // SAFETY: writing one u64 from a local to our eventfd; the count is
    // below the eventfd maximum (it was an eventfd's count), so it does not
    // block.
    let n = unsafe { libc::write(fd.as_raw_fd(), &count as *const u64 as *const _, 8) };
    if n != 8 {
        return Err(errno_err(format!("set an eventfd's count to {count}")));
    }
    pf.keep(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_gives_count_id_and_mode() {
        let info = "pos:\t0\nflags:\t04002\nmnt_id:\t17\nino:\t1038\neventfd-count:               1f\neventfd-id: 12\neventfd-semaphore: 1\n";
        assert_eq!(parse(info), Some((12, 31, true)));
        let older = "pos:\t0\nflags:\t02\neventfd-count:                0\neventfd-id: 3\n";
        assert_eq!(parse(older), Some((3, 0, false)));
        assert_eq!(parse("pos:\t0\nflags:\t02\n"), None);
    }
}
