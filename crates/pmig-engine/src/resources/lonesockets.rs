//! Unix sockets that lead nowhere: unnamed, and either never connected
//! or connected once to a peer that has closed since. Java keeps one
//! open in every process that uses its file channels (a socket pair,
//! one end closed at once, whose other end it `dup2`s over descriptors
//! it closes while other threads may still use them); a program may also
//! hold a socket it has made and not yet connected, or the end of a pair
//! whose other end it has closed.
//!
//! Nothing can reach such a socket any more (it has no name and no live
//! peer), so it moves whole: its type, each of its options this module
//! knows (buffer sizes, peek offset), its shutdown state, and, for a
//! stream, the bytes its peer wrote before it closed, still unread, with
//! the end-of-file after them. A stream or seqpacket end whose peer
//! closed with bytes of ours unread has `ECONNRESET` pending, and gets it
//! again. A datagram end whose peer closed still names it (its next send
//! fails with `ECONNREFUSED`), and does again.
//!
//! Refused: descriptors or credentials in flight or passed
//! (`SO_PASSCRED`, `SO_PASSSEC`), an out-of-band byte, and a datagram or
//! seqpacket end with a message queued (nothing could send it again
//! without consuming it: there is no peer to send it through). A
//! socket bound to a name, or connected to a live peer, is not this
//! module's (see [`super::socketpairs`]).
//!
//! Capture: the kernel's socket diagnostics (`sock_diag`) tell the kind
//! and whether a peer existed (`UNIX_DIAG_PEER` names a released peer
//! inode 0); the queue is peeked through a copy of the descriptor
//! (`pidfd_getfd`), the peek offset put back; a pending error is seen
//! with `poll` (`POLLERR`), which leaves it in place.
//! Restore: a pair is made, the bytes written into our end through the
//! other, a byte written the other way if the error was pending, and the
//! other end closed; or, for a socket never connected, a fresh socket.

use super::socketpairs::{
    diag, fresh_pair, getsockopt_int, has_oob, peek_stream, put_back, set_buf, setsockopt_int,
    shut, unless_empty, Diag, RCV_SHUTDOWN,
};
use super::{Capture, Preflight, Resource};
use crate::error::{errno_err, unsupported, EngineError, Result};
use libc::pid_t;
use serde::{Deserialize, Serialize};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub struct LoneSockets;

/// A lone socket, as `files` found it at an fd (its inode, the fd).
pub use super::socketpairs::End;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoneState {
    /// The socket's inode on the source: how the fds name it.
    pub ino: u64,
    /// `SOCK_STREAM`, `SOCK_DGRAM` or `SOCK_SEQPACKET`.
    pub kind: i32,
    /// Connected once, to a peer that has closed since (else never
    /// connected).
    pub peer_gone: bool,
    /// `ECONNRESET` pending (its peer closed with bytes unread).
    pub reset: bool,
    /// A stream's bytes its peer wrote and it has not read.
    pub queued: serde_bytes::ByteBuf,
    /// `RCV_SHUTDOWN` (1) and `SEND_SHUTDOWN` (2), as the kernel keeps them.
    pub shutdown: u8,
    /// `SO_SNDBUF` and `SO_RCVBUF` as read (the kernel doubles what is set).
    pub sndbuf: i32,
    pub rcvbuf: i32,
    /// `SO_PEEK_OFF` (-1: off).
    pub peek_off: i32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoneSocketsState {
    pub sockets: Vec<LoneState>,
}

/// Whether the socket of inode `ino` (in this network namespace) is a
/// lone one this module moves: an unnamed unix socket of a kind it
/// knows, with no live peer.
pub fn lone(ino: u64) -> Option<Diag> {
    let d = diag(ino)?;
    let known = matches!(
        d.kind,
        libc::SOCK_STREAM | libc::SOCK_DGRAM | libc::SOCK_SEQPACKET
    );
    (known && !d.named && d.peer.is_none()).then_some(d)
}

/// The lowest fd of `pid` that is a lone socket, if any (the source
/// refuses such a process to a destination that cannot restore one).
pub fn held_by(pid: pid_t) -> Option<i32> {
    let fds = super::files::list_fds(pid).ok()?;
    fds.into_iter().find(|fd| {
        crate::procfs::readlink(pid, &format!("fd/{fd}"))
            .ok()
            .and_then(|l| super::socketpairs::inode_of(&l))
            .is_some_and(|ino| lone(ino).is_some())
    })
}

/// Whether an error is pending on `fd` (`sk_err`), without taking it as
/// `SO_ERROR` would.
fn error_pending(fd: &OwnedFd) -> std::io::Result<bool> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: 0,
        revents: 0,
    };
    // SAFETY: poll reads and writes the one pollfd we pass, and does not wait.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(p.revents & libc::POLLERR != 0)
}

/// The bytes queued for a stream end to read (its peek offset at 0),
/// peeked and left in place. Never more than `FIONREAD` counts: a read
/// that starts at the end of the queue would take a pending error.
/// `Err(None)`: descriptors or credentials in flight.
fn stream_bytes(end: &OwnedFd) -> std::result::Result<Vec<u8>, Option<std::io::Error>> {
    let mut q: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int into our local.
    if unsafe { libc::ioctl(end.as_raw_fd(), libc::FIONREAD, &mut q) } < 0 {
        return Err(Some(std::io::Error::last_os_error()));
    }
    let mut buf = vec![0u8; q.max(0) as usize];
    let mut got = 0;
    // Each peek takes at least a byte, or ends the loop.
    while got < buf.len() {
        match peek_stream(end, &mut buf[got..]).map_err(Some)? {
            Some((_, flags)) if flags & libc::MSG_CTRUNC != 0 => return Err(None),
            Some((n, _)) if n > 0 => got += n,
            _ => break,
        }
    }
    buf.truncate(got);
    Ok(buf)
}

/// Whether a datagram or seqpacket end holds a message a read would
/// tell from the end of its queue: any message while it may still read,
/// one with bytes once it is shut down for reading (an empty message
/// then reads as the end-of-file after it does).
fn holds_message(end: &OwnedFd, kind: i32, shutdown: u8) -> std::io::Result<bool> {
    let mut b = [0u8; 1];
    // SAFETY: recv writes at most one byte into `b` and returns the
    // head message's length (MSG_TRUNC), leaving it queued (MSG_PEEK).
    let n = unsafe {
        libc::recv(
            end.as_raw_fd(),
            b.as_mut_ptr() as *mut libc::c_void,
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT | libc::MSG_TRUNC,
        )
    };
    let Some(n) = unless_empty(n)? else {
        return Ok(false);
    };
    if n > 0 || shutdown & RCV_SHUTDOWN == 0 {
        return Ok(true);
    }
    // Shut down, the head message empty: a seqpacket's count is every
    // queued message's bytes; a datagram's only its head's, so an empty
    // head may hide others.
    if kind == libc::SOCK_DGRAM {
        return Ok(true);
    }
    let mut q: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int into our local.
    if unsafe { libc::ioctl(end.as_raw_fd(), libc::FIONREAD, &mut q) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(q > 0)
}

/// Takes the lone socket `e` of `pid` (described by `d`); `ours` is a
/// copy of it. Leaves it as it was.
fn capture_one(pid: pid_t, e: &End, d: &Diag, ours: &OwnedFd) -> Result<LoneState> {
    let what = |w: String| unsupported(pid, format!("{w} (fd {}: socket:[{}])", e.fd, e.ino));
    let io = |step: &str, err: std::io::Error| {
        EngineError::Other(format!("{step} of fd {} (socket:[{}]): {err}", e.fd, e.ino))
    };
    for (o, name) in [
        (libc::SO_PASSCRED, "passes credentials (SO_PASSCRED)"),
        (libc::SO_PASSSEC, "passes security labels (SO_PASSSEC)"),
    ] {
        if getsockopt_int(ours, o).unwrap_or(0) != 0 {
            return Err(what(format!("a unix socket that {name}")));
        }
    }
    let peek_off =
        getsockopt_int(ours, libc::SO_PEEK_OFF).map_err(|err| io("read SO_PEEK_OFF", err))?;
    let set = |v: i32| {
        setsockopt_int(ours, libc::SO_PEEK_OFF, v).map_err(|err| io("set SO_PEEK_OFF", err))
    };
    let stream = d.kind == libc::SOCK_STREAM;
    // A stream or seqpacket socket never connected has nothing queued (and
    // refuses reads: EINVAL, ENOTCONN).
    let queued = if !d.peer_gone && d.kind != libc::SOCK_DGRAM {
        Vec::new()
    } else if stream {
        if has_oob(ours) {
            return Err(what(
                "a unix socket with an out-of-band byte not read".into(),
            ));
        }
        let r = set(0).and_then(|()| {
            stream_bytes(ours).map_err(|e| match e {
                Some(err) => io("read the queue", err),
                None => what("a unix socket with descriptors or credentials in flight".into()),
            })
        });
        let back = set(peek_off);
        let q = r?;
        back?;
        q
    } else {
        let r = set(-1).and_then(|()| {
            holds_message(ours, d.kind, d.shutdown).map_err(|err| io("read the queue", err))
        });
        let back = set(peek_off);
        let held = r?;
        back?;
        if held {
            return Err(what(
                "a unix datagram or seqpacket socket with no live peer and a message queued".into(),
            ));
        }
        Vec::new()
    };
    // Only a closing peer sets an error on a unix socket.
    let reset = d.kind != libc::SOCK_DGRAM
        && d.peer_gone
        && error_pending(ours).map_err(|err| io("poll", err))?;
    Ok(LoneState {
        ino: e.ino,
        kind: d.kind,
        peer_gone: d.peer_gone,
        reset,
        queued: serde_bytes::ByteBuf::from(queued),
        shutdown: d.shutdown,
        sndbuf: getsockopt_int(ours, libc::SO_SNDBUF).map_err(|err| io("read SO_SNDBUF", err))?,
        rcvbuf: getsockopt_int(ours, libc::SO_RCVBUF).map_err(|err| io("read SO_RCVBUF", err))?,
        peek_off,
    })
}

/// Makes the lone socket `s` again.
pub(crate) fn make(s: &LoneState) -> Result<OwnedFd> {
    if !matches!(
        s.kind,
        libc::SOCK_STREAM | libc::SOCK_DGRAM | libc::SOCK_SEQPACKET
    ) {
        return Err(EngineError::Incompatible(format!(
            "a unix socket of unknown type {}",
            s.kind
        )));
    }
    if !s.queued.is_empty() && (s.kind != libc::SOCK_STREAM || !s.peer_gone) {
        return Err(EngineError::Incompatible(
            "a lone unix socket with bytes queued that no peer sent".into(),
        ));
    }
    let ours = if s.peer_gone {
        let (a, b) = fresh_pair(s.kind)?;
        set_buf(&a, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, s.rcvbuf)?;
        // Room for the bytes in the sender's buffer, whatever ours says.
        let room = s.queued.len() + (64 << 10);
        let _ = setsockopt_int(&b, libc::SO_SNDBUFFORCE, room.min(i32::MAX as usize) as i32);
        // (Only a stream's: an empty message would be one more message.)
        if !s.queued.is_empty() {
            put_back(&b, s.kind, std::slice::from_ref(&s.queued))?;
        }
        if s.reset {
            // A byte left unread at the peer when it closes: ECONNRESET.
            put_back(&a, s.kind, &[serde_bytes::ByteBuf::from(vec![0u8])])?;
        }
        drop(b);
        a
    } else {
        // SAFETY: socket() takes no pointers; the fd it returns is ours.
        let fd = unsafe { libc::socket(libc::AF_UNIX, s.kind | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(errno_err("create a unix socket"));
        }
        // SAFETY: a fresh fd owned by nobody else.
        let a = unsafe { OwnedFd::from_raw_fd(fd) };
        set_buf(&a, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, s.rcvbuf)?;
        a
    };
    set_buf(&ours, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, s.sndbuf)?;
    // (A stream or seqpacket end is shut down both ways once its peer
    // closes; what else was shut down is shut down again.)
    shut(&ours, s.shutdown)?;
    if s.peek_off >= 0 {
        setsockopt_int(&ours, libc::SO_PEEK_OFF, s.peek_off)
            .map_err(|err| EngineError::Other(format!("set a unix socket's peek offset: {err}")))?;
    }
    Ok(ours)
}

impl Resource for LoneSockets {
    const PART: &'static str = "lonesockets";
    type State = LoneSocketsState;

    /// `files` has listed the lone sockets in `cx.lone_sockets`.
    fn capture(cx: &mut Capture) -> Result<LoneSocketsState> {
        let ends = std::mem::take(&mut cx.lone_sockets);
        if ends.is_empty() {
            return Ok(LoneSocketsState::default());
        }
        let pid = cx.pid;
        let pidfd = crate::sys::pidfd_open(pid)?;
        let mut sockets: Vec<LoneState> = Vec::new();
        for e in &ends {
            if sockets.iter().any(|s| s.ino == e.ino) {
                continue;
            }
            let d = lone(e.ino).ok_or_else(|| {
                EngineError::Other(format!(
                    "socket:[{}] of fd {} changed during the capture",
                    e.ino, e.fd
                ))
            })?;
            let ours = crate::sys::pidfd_getfd(&pidfd, e.fd)?;
            sockets.push(capture_one(pid, e, &d, &ours)?);
        }
        Ok(LoneSocketsState { sockets })
    }

    fn preflight(s: &LoneSocketsState, pf: &mut Preflight) -> Result<()> {
        for l in &s.sockets {
            let fd = pf.keep(make(l)?)?;
            pf.sockets.insert(l.ino, fd);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ino(fd: &OwnedFd) -> u64 {
        // SAFETY: a zeroed stat is valid; fstat fills it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat writes into our local stat.
        assert_eq!(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) }, 0);
        st.st_ino
    }

    fn take(fd: &OwnedFd) -> LoneState {
        let i = ino(fd);
        let d = lone(i).expect("a lone socket");
        let me = std::process::id() as pid_t;
        capture_one(me, &End { ino: i, fd: 3 }, &d, fd).unwrap()
    }

    fn send(fd: &OwnedFd, m: &[u8]) -> std::io::Result<usize> {
        // SAFETY: send reads `m` from our buffer.
        let n = unsafe {
            libc::send(
                fd.as_raw_fd(),
                m.as_ptr() as *const _,
                m.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    fn recv(fd: &OwnedFd) -> std::io::Result<Vec<u8>> {
        let mut b = vec![0u8; 1 << 16];
        // SAFETY: recv writes at most b.len() bytes into b.
        let n = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                b.as_mut_ptr() as *mut _,
                b.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        b.truncate(n as usize);
        Ok(b)
    }

    /// What a program sees of an end, in order: each read until the end
    /// of the stream or an error, then a send's result.
    fn behaviour(fd: &OwnedFd) -> (Vec<std::result::Result<Vec<u8>, i32>>, Option<i32>) {
        let mut reads = Vec::new();
        for _ in 0..8 {
            match recv(fd) {
                Ok(b) if b.is_empty() => {
                    reads.push(Ok(b));
                    break;
                }
                Ok(b) => reads.push(Ok(b)),
                Err(e) => {
                    reads.push(Err(e.raw_os_error().unwrap()));
                    break;
                }
            }
        }
        let sent = send(fd, b"x").err().map(|e| e.raw_os_error().unwrap());
        (reads, sent)
    }

    #[test]
    fn a_stream_whose_peer_closed_keeps_its_bytes_then_end_of_file() {
        let (a, b) = fresh_pair(libc::SOCK_STREAM).unwrap();
        send(&b, b"last words").unwrap();
        drop(b);
        let s = take(&a);
        assert!(s.peer_gone && !s.reset);
        assert_eq!(&s.queued[..], b"last words");
        // Taken without consuming: the original still holds them.
        assert_eq!(take(&a), s);
        let n = make(&s).unwrap();
        assert_eq!(
            lone(ino(&n)).map(|d| (d.peer_gone, d.shutdown)),
            Some((true, 3))
        );
        let want = behaviour(&a);
        assert_eq!(want.1, Some(libc::EPIPE));
        assert_eq!(behaviour(&n), want);
    }

    #[test]
    fn a_peer_that_closed_with_bytes_unread_leaves_econnreset_pending() {
        let (a, b) = fresh_pair(libc::SOCK_STREAM).unwrap();
        send(&a, b"never read").unwrap();
        drop(b);
        let s = take(&a);
        assert!(s.reset, "{s:?}");
        // The pending error is still there after the capture.
        assert!(error_pending(&a).unwrap());
        let n = make(&s).unwrap();
        assert!(error_pending(&n).unwrap());
        let want = behaviour(&a);
        assert_eq!(want.0.first(), Some(&Err(libc::ECONNRESET)));
        assert_eq!(behaviour(&n), want);
    }

    #[test]
    fn javas_pre_close_socket_and_sockets_never_connected_move() {
        for kind in [libc::SOCK_STREAM, libc::SOCK_SEQPACKET, libc::SOCK_DGRAM] {
            // A pair with one end closed at once (Java's pre-close fd).
            let (a, b) = fresh_pair(kind).unwrap();
            drop(b);
            setsockopt_int(&a, libc::SO_SNDBUF, 30000).unwrap();
            let s = take(&a);
            assert!(s.peer_gone && !s.reset && s.queued.is_empty(), "{s:?}");
            let n = make(&s).unwrap();
            assert_eq!(
                take(&n),
                LoneState {
                    ino: ino(&n),
                    ..s.clone()
                }
            );
            assert_eq!(behaviour(&n), behaviour(&a), "kind {kind}");
            // Never connected: a fresh socket of the kind.
            // SAFETY: a fresh socket, owned at once.
            let lone_fd = unsafe { OwnedFd::from_raw_fd(libc::socket(libc::AF_UNIX, kind, 0)) };
            setsockopt_int(&lone_fd, libc::SO_PEEK_OFF, 5).unwrap();
            let s = take(&lone_fd);
            assert!(!s.peer_gone && s.peek_off == 5, "{s:?}");
            let n = make(&s).unwrap();
            assert_eq!(
                take(&n),
                LoneState {
                    ino: ino(&n),
                    ..s.clone()
                }
            );
            assert_eq!(behaviour(&n), behaviour(&lone_fd), "kind {kind}");
        }
    }

    #[test]
    fn a_message_queued_with_no_peer_left_is_refused_and_kept() {
        for kind in [libc::SOCK_DGRAM, libc::SOCK_SEQPACKET] {
            for msg in [&b"kept"[..], b""] {
                let (a, b) = fresh_pair(kind).unwrap();
                send(&b, msg).unwrap();
                drop(b);
                let i = ino(&a);
                let d = lone(i).unwrap();
                let me = std::process::id() as pid_t;
                let e = capture_one(me, &End { ino: i, fd: 3 }, &d, &a);
                let shut_down = kind == libc::SOCK_SEQPACKET;
                if msg.is_empty() && shut_down {
                    // Reads as the end-of-file after it does.
                    assert!(e.is_ok(), "kind {kind}: {e:?}");
                } else {
                    let e = e.unwrap_err().to_string();
                    assert!(e.contains("message queued"), "kind {kind}: {e}");
                }
                assert_eq!(recv(&a).unwrap(), msg, "kind {kind}: the message was lost");
            }
        }
    }

    #[test]
    fn a_pair_or_a_named_socket_is_not_lone() {
        let (a, _b) = fresh_pair(libc::SOCK_STREAM).unwrap();
        assert!(lone(ino(&a)).is_none());
        // SAFETY: a fresh socket, owned at once.
        let named =
            unsafe { OwnedFd::from_raw_fd(libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0)) };
        // SAFETY: a zeroed sockaddr_un is valid; an abstract name follows.
        let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let name = format!("pmig-lone-test-{}", std::process::id());
        for (i, c) in name.bytes().enumerate() {
            sa.sun_path[i + 1] = c as libc::c_char;
        }
        let len = (std::mem::size_of::<libc::sa_family_t>() + 1 + name.len()) as libc::socklen_t;
        // SAFETY: bind reads `len` bytes of our sockaddr_un.
        let r = unsafe {
            libc::bind(
                named.as_raw_fd(),
                &sa as *const _ as *const libc::sockaddr,
                len,
            )
        };
        assert_eq!(r, 0);
        assert!(lone(ino(&named)).is_none());
    }
}
