//! signalfd descriptors: each moves with its signal mask and flags. Its
//! reader receives its own pending signals, whoever else holds the fd, so
//! one shared with another process is no different and is not refused.
//! What is pending moves with the process (see `signals`, `threads`).
//!
//! Capture: the mask from the fd's fdinfo (`sigmask:` in hex). Restore: the
//! restorer's process creates the signalfd before the new process exists,
//! which inherits it. In the image: the fd kind
//! [`super::files::FdKind::SignalFd`] (format 1.3).

use super::Preflight;
use crate::error::{errno_err, EngineError, Result};
use libc::pid_t;
use std::os::fd::{FromRawFd, OwnedFd};

pub const LINK: &str = "anon_inode:[signalfd]";

/// The signal mask in a signalfd's fdinfo text.
pub fn parse(info: &str) -> Option<u64> {
    let v = info.lines().find_map(|l| l.strip_prefix("sigmask:"))?;
    u64::from_str_radix(v.trim(), 16).ok()
}

/// The mask of `pid`'s signalfd at `fd`, from its fdinfo text.
pub fn capture(pid: pid_t, fd: i32, info: &str) -> Result<u64> {
    parse(info).ok_or_else(|| {
        EngineError::Other(format!(
            "cannot parse the signalfd mask of fd {fd} of process {pid}"
        ))
    })
}

/// Creates the signalfd for the new process: a helper fd it inherits.
pub fn preflight(pf: &mut Preflight, mask: u64, flags: i32) -> Result<i32> {
    let mut f = libc::SFD_CLOEXEC;
    if flags & libc::O_NONBLOCK != 0 {
        f |= libc::SFD_NONBLOCK;
    }
    // The kernel's sigset_t is the 64-bit mask; signalfd4 takes its size.
    // SAFETY: signalfd4 reads 8 bytes of mask from our local and returns a
    // new fd.
    let r = unsafe { libc::syscall(libc::SYS_signalfd4, -1, &mask as *const u64, 8usize, f) };
    if r < 0 {
        return Err(errno_err(format!("create a signalfd for mask {mask:#x}")));
    }
    // SAFETY: a fresh fd owned by nobody else.
    pf.keep(unsafe { OwnedFd::from_raw_fd(r as i32) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_gives_the_mask() {
        let info = "pos:\t0\nflags:\t04002\nmnt_id:\t17\nino:\t1038\nsigmask:\t0000000800000200\n";
        assert_eq!(parse(info), Some(0x0000_0008_0000_0200));
        assert_eq!(parse("pos:\t0\n"), None);
    }
}
