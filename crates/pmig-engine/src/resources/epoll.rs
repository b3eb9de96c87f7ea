//! epoll instances: each moves with what it watches (the fd, the events
//! asked for with their flags, e.g. edge-triggered or one-shot, and the
//! user's data word). An epoll another process also holds is refused, and
//! so is one that watches a file through an fd number that no longer names
//! it (the fd was closed or replaced after a dup kept the file open).
//!
//! Capture reads the watch list from the fd's fdinfo and checks each entry
//! against the process's fd table with `kcmp(KCMP_EPOLL_TFD)`. Restore: the
//! restorer's process creates the epoll instance, which the new process
//! inherits, and the restorer adds every watch from inside the new
//! process, once all its fds are at their numbers: an epoll names what it
//! watches by file and fd number, so the calls must come from there. The
//! kernel then finds what is ready by itself: level-triggered watches
//! report as before; an edge-triggered one on a file with data reports
//! once more, which such programs handle (they read until EAGAIN); nothing
//! that was pending is lost.

use super::{PlanCx, Preflight};
use crate::error::{errno_err, unsupported, EngineError, Result};
use libc::pid_t;
use pmig_restorer::Check;
use serde::{Deserialize, Serialize};
use std::os::fd::{FromRawFd, OwnedFd};

pub const LINK: &str = "anon_inode:[eventpoll]";

const KCMP_EPOLL_TFD: i32 = 7;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Watch {
    /// The watched fd's number.
    pub fd: i32,
    /// The events and flags asked for (EPOLLIN, EPOLLET, EPOLLONESHOT, ...).
    pub events: u32,
    pub data: u64,
}

/// The watches listed in an epoll fd's fdinfo text:
/// `tfd: N events: HEX data: HEX  pos:N ino:HEX sdev:HEX`.
pub fn parse(info: &str) -> Option<Vec<Watch>> {
    let mut out = Vec::new();
    for l in info.lines().filter(|l| l.starts_with("tfd:")) {
        let mut it = l.split_whitespace();
        let mut next_after = |key: &str| -> Option<String> {
            it.by_ref().find(|w| *w == key)?;
            it.next().map(str::to_string)
        };
        let fd = next_after("tfd:")?.parse().ok()?;
        let events = u32::from_str_radix(&next_after("events:")?, 16).ok()?;
        let data = u64::from_str_radix(&next_after("data:")?, 16).ok()?;
        out.push(Watch { fd, events, data });
    }
    Some(out)
}

/// The watches of `pid`'s epoll at `fd` (fdinfo text `info`), each checked
/// to watch the file its fd number names now.
pub fn capture(pid: pid_t, fd: i32, info: &str) -> Result<Vec<Watch>> {
    let watches = parse(info).ok_or_else(|| {
        EngineError::Other(format!(
            "cannot parse the epoll watch list of fd {fd} of process {pid}"
        ))
    })?;
    for (i, w) in watches.iter().enumerate() {
        // Several watches of one fd number: the second is another file
        // (the first was dup'ed and closed); which is which is offset `toff`.
        let toff = watches[..i].iter().filter(|o| o.fd == w.fd).count() as u32;
        let slot: [u32; 3] = [fd as u32, w.fd as u32, toff];
        // SAFETY: kcmp reads the three-word slot from our memory; it only
        // compares kernel objects.
        let r = unsafe {
            libc::syscall(
                libc::SYS_kcmp,
                pid,
                pid,
                KCMP_EPOLL_TFD,
                w.fd,
                slot.as_ptr(),
            )
        };
        if r != 0 {
            return Err(unsupported(
                pid,
                format!(
                    "an epoll (fd {fd}) watching a file that fd {} no longer names",
                    w.fd
                ),
            ));
        }
    }
    Ok(watches)
}

/// Whether fd `ofd` of process `other`, whose link is `link`, is one of
/// the epolls at `fds` of `pid`.
pub fn is_one_of(pid: pid_t, other: pid_t, ofd: i32, link: &str, fds: &[i32]) -> bool {
    link == LINK
        && fds
            .iter()
            .any(|&fd| crate::sys::same_file_of(pid, fd, other, ofd) == Some(true))
}

/// Creates the epoll instance for the new process: a helper fd it inherits.
pub fn preflight(pf: &mut Preflight) -> Result<i32> {
    // SAFETY: epoll_create1 takes flags and returns a new fd.
    let r = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if r < 0 {
        return Err(errno_err("create an epoll instance"));
    }
    // SAFETY: a fresh fd owned by nobody else.
    pf.keep(unsafe { OwnedFd::from_raw_fd(r) })
}

/// The restorer adds the watches of the epoll at fd `epfd` of the new
/// process (every fd is at its number by then).
pub fn plan(cx: &mut PlanCx, epfd: i32, watches: &[Watch]) {
    for w in watches {
        // struct epoll_event is packed on x86-64: 4 bytes of events, 8 of data.
        let mut ev = [0u8; 12];
        ev[..4].copy_from_slice(&w.events.to_le_bytes());
        ev[4..].copy_from_slice(&w.data.to_le_bytes());
        let ev = cx.b.data(&ev);
        cx.b.syscall(
            0,
            libc::SYS_epoll_ctl,
            &[
                (epfd as u64).into(),
                (libc::EPOLL_CTL_ADD as u64).into(),
                (w.fd as u64).into(),
                ev.into(),
            ],
            Check::NonNeg,
            format!("watch fd {} in epoll fd {epfd}", w.fd),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_gives_every_watch() {
        let info = "pos:\t0\nflags:\t02000002\nmnt_id:\t17\nino:\t1038\n\
tfd:        5 events:       19 data:             1234  pos:0 ino:3f2 sdev:e\n\
tfd:       12 events: 80000001 data: ffffffffffffffff  pos:0 ino:40e sdev:f\n";
        assert_eq!(
            parse(info),
            Some(vec![
                Watch {
                    fd: 5,
                    events: 0x19,
                    data: 0x1234
                },
                Watch {
                    fd: 12,
                    events: 0x8000_0001,
                    data: u64::MAX
                },
            ])
        );
        assert_eq!(parse("pos:\t0\nflags:\t02\n"), Some(vec![]));
        assert_eq!(parse("tfd: x events: 1 data: 2\n"), None);
    }
}
