//! Unix socket pairs that belong to the process alone: both ends of a
//! `socketpair()` held by it and by no other process. Python's asyncio
//! wakes its event loop through one (`socket.socketpair()`, watched by its
//! epoll), as other event loops and signal handlers do with a self-pipe.
//! Each pair moves with its type (stream, datagram, seqpacket), the bytes
//! or messages queued in each direction, each end's shutdown state, buffer
//! sizes and peek offset; the fds that shared an end keep sharing it.
//!
//! A unix socket bound to a name, connected to one (a server's, as
//! journald's), or whose peer another process holds, connects the process
//! to something that does not move: it is refused, as are other sockets.
//! So is a pair with descriptors or credentials in flight (`SCM_RIGHTS`,
//! `SO_PASSCRED`: they cannot be put back as they were), an out-of-band
//! byte not read, and a datagram or seqpacket end shut down for reading
//! (whose queue cannot be told from its end).
//!
//! Capture: `files` names each fd's socket ([`super::files::FdKind::UnixPair`]),
//! the kernel's socket diagnostics (`sock_diag`, through the
//! `netlink-packet-sock-diag` crate) give each socket's type, peer and
//! shutdown state; this part holds the pairs. The queued data is read
//! without being consumed, through a copy of each end (`pidfd_getfd`),
//! with `MSG_PEEK` from a peek offset (`SO_PEEK_OFF`) that is put back as
//! it was, so a migration that fails leaves the process with its data.
//! Restore: the restorer's process creates each pair, sizes its buffers,
//! writes what each end had queued through the other end, then shuts down
//! what was shut down, before the new process exists; the new process
//! inherits the ends.

use super::{Capture, Preflight, Resource};
use crate::error::{errno_err, unsupported, EngineError, Result};
use libc::pid_t;
use serde::{Deserialize, Serialize};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub struct SocketPairs;

/// A unix socket at an fd, as `files` found it: one end of a pair (or, for
/// `lonesockets`, a socket with no live peer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct End {
    pub ino: u64,
    pub fd: i32,
}

/// One end of a pair and what it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndState {
    /// The socket's inode on the source: how the fds name it.
    pub ino: u64,
    /// What was queued for this end to read, unread: one element per
    /// message for datagram and seqpacket pairs, the bytes in one element
    /// for a stream pair.
    pub queued: Vec<serde_bytes::ByteBuf>,
    /// `RCV_SHUTDOWN` (1) and `SEND_SHUTDOWN` (2), as the kernel keeps them.
    pub shutdown: u8,
    /// `SO_SNDBUF` and `SO_RCVBUF` as read (the kernel doubles what is set).
    pub sndbuf: i32,
    pub rcvbuf: i32,
    /// `SO_PEEK_OFF` (-1: off).
    pub peek_off: i32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PairState {
    /// `SOCK_STREAM`, `SOCK_DGRAM` or `SOCK_SEQPACKET`.
    pub kind: i32,
    pub a: EndState,
    pub b: EndState,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocketPairsState {
    pub pairs: Vec<PairState>,
}

/// What the kernel's socket diagnostics say of one unix socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diag {
    /// `SOCK_STREAM`, `SOCK_DGRAM`, `SOCK_SEQPACKET`.
    pub kind: i32,
    /// The peer's inode, if connected.
    pub peer: Option<u64>,
    /// Connected once, to a peer that has closed since (the kernel names
    /// a peer whose socket is released inode 0): see [`super::lonesockets`].
    pub peer_gone: bool,
    /// Bound to a name (a path or an abstract name).
    pub named: bool,
    /// `RCV_SHUTDOWN` (1), `SEND_SHUTDOWN` (2).
    pub shutdown: u8,
}

pub(super) const RCV_SHUTDOWN: u8 = 1;
pub(super) const SEND_SHUTDOWN: u8 = 2;
/// Most messages one end's queue may hold (a bound on the reading loops).
/// More than a queue can hold: each message costs its sender at least
/// several hundred bytes of a send buffer of at most 2 GiB. So a queue is
/// always taken whole, and put back in its order.
const MAX_MESSAGES: usize = 1 << 23;

/// The inode of a `socket:[N]` fd link.
pub fn inode_of(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// Whether an fd whose link is `link` is one of the sockets `inos`.
pub fn is_one_of(link: &str, inos: &[u64]) -> bool {
    inode_of(link).is_some_and(|i| inos.contains(&i))
}

/// The unix socket of inode `ino` in this network namespace, as the
/// kernel's socket diagnostics describe it; `None` if there is none (not a
/// unix socket, gone, or in another network namespace).
pub fn diag(ino: u64) -> Option<Diag> {
    use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_REQUEST};
    use netlink_packet_sock_diag::unix::{nlas::Nla, ShowFlags, StateFlags, UnixRequest};
    use netlink_packet_sock_diag::SockDiagMessage;
    use netlink_sys::{protocols::NETLINK_SOCK_DIAG, Socket, SocketAddr};

    let ino32 = u32::try_from(ino).ok()?;
    let mut sock = Socket::new(NETLINK_SOCK_DIAG).ok()?;
    sock.bind_auto().ok()?;
    sock.connect(&SocketAddr::new(0, 0)).ok()?;
    let mut hdr = NetlinkHeader::default();
    hdr.flags = NLM_F_REQUEST;
    let mut req = NetlinkMessage::new(
        hdr,
        SockDiagMessage::UnixRequest(UnixRequest {
            state_flags: StateFlags::all(),
            inode: ino32,
            show_flags: ShowFlags::PEER | ShowFlags::NAME | ShowFlags::RQLEN,
            // All ones: look the socket up by its inode alone.
            cookie: [0xff; 8],
        })
        .into(),
    );
    req.finalize();
    let mut buf = vec![0u8; req.buffer_len()];
    req.serialize(&mut buf);
    sock.send(&buf, 0).ok()?;
    let mut rx = vec![0u8; 8192];
    let n = sock.recv(&mut &mut rx[..], 0).ok()?;
    let msg = <NetlinkMessage<SockDiagMessage>>::deserialize(&rx[..n]).ok()?;
    let NetlinkPayload::InnerMessage(SockDiagMessage::UnixResponse(r)) = msg.payload else {
        return None;
    };
    if u64::from(r.header.inode) != ino {
        return None;
    }
    let mut d = Diag {
        kind: i32::from(r.header.kind),
        peer: None,
        peer_gone: false,
        named: false,
        shutdown: 0,
    };
    for nla in &r.nlas {
        match nla {
            Nla::Peer(0) => d.peer_gone = true,
            Nla::Peer(p) => d.peer = Some(u64::from(*p)),
            Nla::Name(_) => d.named = true,
            Nla::Shutdown(s) => d.shutdown = *s,
            _ => {}
        }
    }
    Some(d)
}

/// Whether the socket of inode `ino` may be one end of a pair the process
/// holds alone: an unnamed unix socket of a kind this module moves,
/// connected to an unnamed peer. Whether the peer is the process's own is
/// for [`check_pairs`]. `Err`: why not (`"a socket"`: no unix socket this
/// network namespace knows).
pub fn classify(ino: u64) -> std::result::Result<Diag, &'static str> {
    let d = diag(ino).ok_or("a socket")?;
    if !matches!(
        d.kind,
        libc::SOCK_STREAM | libc::SOCK_DGRAM | libc::SOCK_SEQPACKET
    ) {
        return Err("a unix socket of another type");
    }
    if d.named {
        return Err("a unix socket bound to a name");
    }
    let Some(peer) = d.peer else {
        return Err("a unix socket not connected to a peer");
    };
    match diag(peer) {
        Some(p) if !p.named => Ok(d),
        Some(_) => Err("a unix socket connected to a named socket"),
        None => Err("a unix socket whose peer is gone"),
    }
}

/// Refuses the sockets `ends` of `pid` unless each one's peer is one of
/// them: both ends of every pair held by the process.
pub fn check_pairs(pid: pid_t, ends: &[(u64, i32, u64)]) -> Result<()> {
    for &(ino, fd, peer) in ends {
        if !ends.iter().any(|e| e.0 == peer) {
            return Err(unsupported(
                pid,
                format!(
                    "a unix socket connected to a socket it does not hold (fd {fd}: socket:[{ino}], peer socket:[{peer}])"
                ),
            ));
        }
    }
    Ok(())
}

/// Whether the unix socket `ino` of `pid` leads out of the process: a
/// connected unix socket (in this network namespace) whose peer `pid` does
/// not hold. On fds 0–2 such a socket (a supervisor's socketpair, a stream
/// to journald) is stdio, replaced on restore like a pipe there. A
/// listening or unconnected socket, or one whose peer is gone, is not.
pub fn leads_out(pid: pid_t, ino: u64) -> bool {
    let Some(peer) = diag(ino).and_then(|d| d.peer) else {
        return false;
    };
    let want = format!("socket:[{peer}]");
    let held = super::files::list_fds(pid).is_ok_and(|fds| {
        fds.iter()
            .any(|fd| crate::procfs::readlink(pid, &format!("fd/{fd}")).is_ok_and(|l| l == want))
    });
    !held
}

/// The lowest fd of `pid` that is one end of a unix socket pair this
/// module would move, if any (the source refuses such a process to a
/// destination that cannot restore one).
pub fn held_by(pid: pid_t) -> Option<i32> {
    let fds = super::files::list_fds(pid).ok()?;
    fds.into_iter().find(|fd| {
        crate::procfs::readlink(pid, &format!("fd/{fd}"))
            .ok()
            .and_then(|l| inode_of(&l))
            .is_some_and(|ino| classify(ino).is_ok() && !(*fd <= 2 && leads_out(pid, ino)))
    })
}

pub(super) fn getsockopt_int(fd: &OwnedFd, opt: libc::c_int) -> std::io::Result<i32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes one int and its length into our locals.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            &mut v as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(v)
}

pub(super) fn setsockopt_int(fd: &OwnedFd, opt: libc::c_int, v: i32) -> std::io::Result<()> {
    // SAFETY: setsockopt reads one int from our local.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            &v as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A receive's result on a non-blocking socket: the bytes it took, or
/// `None` where it would have waited (nothing queued).
pub(super) fn unless_empty(n: isize) -> std::io::Result<Option<usize>> {
    if n >= 0 {
        return Ok(Some(n as usize));
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) => Ok(None),
        _ => Err(e),
    }
}

/// Peeks at the queue of a stream end from its current peek offset: the
/// bytes (at most `buf.len()`), `None` once nothing more is queued.
pub(super) fn peek_stream(fd: &OwnedFd, buf: &mut [u8]) -> std::io::Result<Option<(usize, i32)>> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: a zeroed msghdr is valid (no name, no control buffer).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    // SAFETY: recvmsg writes at most `buf.len()` bytes into `buf` and the
    // flags into `msg`; no control buffer is given.
    let n = unsafe {
        libc::recvmsg(
            fd.as_raw_fd(),
            &mut msg,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    Ok(unless_empty(n)?.map(|n| (n, msg.msg_flags)))
}

/// Whether a stream end holds an out-of-band byte not yet read.
pub(super) fn has_oob(fd: &OwnedFd) -> bool {
    let mut b = [0u8; 1];
    // SAFETY: recv writes at most one byte into `b`.
    let n = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            b.as_mut_ptr() as *mut libc::c_void,
            1,
            libc::MSG_OOB | libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n >= 0
}

/// The bytes queued for the stream end `end` to read, peeked from offset
/// 0 and left in place.
pub(super) fn stream_queue(
    end: &OwnedFd,
    what: &dyn Fn(String) -> EngineError,
) -> Result<Vec<Vec<u8>>> {
    let rcvbuf = getsockopt_int(end, libc::SO_RCVBUF).unwrap_or(0).max(0) as usize;
    let mut buf = vec![0u8; rcvbuf.clamp(64 << 10, 64 << 20)];
    let mut all: Vec<u8> = Vec::new();
    for _ in 0..MAX_MESSAGES {
        let Some((n, flags)) = peek_stream(end, &mut buf)
            .map_err(|e| EngineError::Other(format!("read a unix socket's queue: {e}")))?
        else {
            break;
        };
        if flags & libc::MSG_CTRUNC != 0 {
            return Err(what(
                "a unix socket pair with descriptors or credentials in flight".into(),
            ));
        }
        // End of the stream (the peer shut down its sending side).
        if n == 0 {
            break;
        }
        all.extend_from_slice(&buf[..n]);
    }
    Ok(if all.is_empty() { vec![] } else { vec![all] })
}

/// One message taken off a datagram or seqpacket queue: its bytes and the
/// descriptors that came with it (now ours).
struct Taken {
    data: Vec<u8>,
    fds: Vec<OwnedFd>,
}

/// Takes the message at the head of `end`'s queue, `None` if there is
/// none. The message is never cut: its length is peeked first (with the
/// peek offset off, a plain peek sees the head, an empty message too).
fn take_message(end: &OwnedFd, buf: &mut Vec<u8>) -> std::io::Result<Option<Taken>> {
    // SAFETY: recv with MSG_TRUNC writes at most buf.len() bytes and
    // returns the message's real length.
    let len = unsafe {
        libc::recv(
            end.as_raw_fd(),
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len(),
            libc::MSG_PEEK | libc::MSG_DONTWAIT | libc::MSG_TRUNC,
        )
    };
    let Some(len) = unless_empty(len)? else {
        return Ok(None);
    };
    if len > buf.len() {
        buf.resize(len, 0);
    }
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // Room for SCM_MAX_FD (253) descriptors and then some.
    let mut control = vec![0u8; 4096];
    // SAFETY: a zeroed msghdr is valid; it is filled with our buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = control.len();
    // SAFETY: recvmsg writes into our buffers within the lengths given.
    let n = unsafe {
        libc::recvmsg(
            end.as_raw_fd(),
            &mut msg,
            libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: walking the control messages recvmsg wrote into `control`,
    // by the kernel's lengths; the descriptors of SCM_RIGHTS are ours now.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c) as *const i32;
                let count = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / 4;
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok(Some(Taken {
        data: buf[..n as usize].to_vec(),
        fds,
    }))
}

/// Sends `m` from `from`, with its descriptors, if any.
fn send_message(from: &OwnedFd, m: &Taken) -> std::io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: m.data.as_ptr() as *mut libc::c_void,
        iov_len: m.data.len(),
    };
    // SAFETY: a zeroed msghdr is valid; it is filled with our buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    let bytes = (m.fds.len() * 4) as u32;
    // SAFETY: CMSG_SPACE is arithmetic.
    let mut control = vec![0u8; unsafe { libc::CMSG_SPACE(bytes) } as usize];
    if !m.fds.is_empty() {
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = control.len();
        // SAFETY: the control buffer has room for one header and the fds.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(bytes) as usize;
            let data = libc::CMSG_DATA(c) as *mut i32;
            for (i, fd) in m.fds.iter().enumerate() {
                std::ptr::write_unaligned(data.add(i), fd.as_raw_fd());
            }
        }
    }
    // SAFETY: sendmsg reads the message built above.
    let n = unsafe {
        libc::sendmsg(
            from.as_raw_fd(),
            &msg,
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if n as usize != m.data.len() {
        return Err(std::io::Error::other(format!(
            "{n} of {} bytes went",
            m.data.len()
        )));
    }
    Ok(())
}

/// The messages queued for the datagram or seqpacket end `end` to read.
/// A peek cannot tell them all (an empty message once peeked hides from a
/// peek at an offset), so they are taken off the queue and sent again, in
/// order, through `peer`, the other end, which the frozen process alone
/// holds: its queue is as it was, and each was read whole. A message that
/// carried descriptors goes back with them, and refuses the pair.
fn message_queue(
    end: &OwnedFd,
    peer: &OwnedFd,
    what: &dyn Fn(String) -> EngineError,
) -> Result<Vec<Vec<u8>>> {
    let mut buf = vec![0u8; 64 << 10];
    let mut taken: Vec<Taken> = Vec::new();
    let mut failed = None;
    for _ in 0..MAX_MESSAGES {
        match take_message(end, &mut buf) {
            Ok(Some(m)) => taken.push(m),
            Ok(None) => break,
            Err(e) => {
                failed = Some(EngineError::Other(format!(
                    "read a unix socket's queue: {e}"
                )));
                break;
            }
        }
    }
    // Back, whatever happened, with room enough in the sender's buffer.
    let held: usize = taken.iter().map(|m| m.data.len() + 1024).sum();
    let sndbuf = getsockopt_int(peer, libc::SO_SNDBUF).unwrap_or(0);
    let raised = held > (sndbuf.max(0) as usize) / 2
        && setsockopt_int(
            peer,
            libc::SO_SNDBUFFORCE,
            held.min(i32::MAX as usize) as i32,
        )
        .is_ok();
    let mut lost = 0usize;
    let mut first_err = None;
    for m in &taken {
        if let Err(e) = send_message(peer, m) {
            lost += 1;
            first_err.get_or_insert(e);
        }
    }
    if raised {
        let _ = setsockopt_int(peer, libc::SO_SNDBUFFORCE, (sndbuf / 2).max(1));
    }
    if let Some(e) = first_err {
        return Err(EngineError::Other(format!(
            "put {lost} of {} messages back in a unix socket pair's queue: {e}",
            taken.len()
        )));
    }
    if let Some(e) = failed {
        return Err(e);
    }
    if taken.len() >= MAX_MESSAGES {
        return Err(what(format!(
            "a unix socket pair with more than {MAX_MESSAGES} messages queued"
        )));
    }
    if taken.iter().any(|m| !m.fds.is_empty()) {
        return Err(what("a unix socket pair with descriptors in flight".into()));
    }
    Ok(taken.into_iter().map(|m| m.data).collect())
}

/// What is queued for `end` (a copy of the process's end at fd `fd`) to
/// read, left in it (`peer` is a copy of the other end), with its peek
/// offset as it was.
fn queued(
    pid: pid_t,
    fd: i32,
    end: &OwnedFd,
    peer: &OwnedFd,
    kind: i32,
    shutdown: u8,
) -> Result<Vec<Vec<u8>>> {
    let what = |w: String| unsupported(pid, format!("{w} (fd {fd})"));
    for (o, name) in [
        (libc::SO_PASSCRED, "passes credentials (SO_PASSCRED)"),
        (libc::SO_PASSSEC, "passes security labels (SO_PASSSEC)"),
    ] {
        if getsockopt_int(end, o).unwrap_or(0) != 0 {
            return Err(what(format!("a unix socket pair that {name}")));
        }
    }
    let stream = kind == libc::SOCK_STREAM;
    if stream && has_oob(end) {
        return Err(what(
            "a unix socket pair with an out-of-band byte not read".into(),
        ));
    }
    if !stream && shutdown != 0 {
        return Err(what(
            "a unix datagram or seqpacket socket pair shut down".into(),
        ));
    }
    let saved = getsockopt_int(end, libc::SO_PEEK_OFF)
        .map_err(|e| EngineError::Other(format!("read a unix socket's peek offset: {e}")))?;
    let set = |v: i32| {
        setsockopt_int(end, libc::SO_PEEK_OFF, v)
            .map_err(|e| EngineError::Other(format!("set a unix socket's peek offset: {e}")))
    };
    let r = if stream {
        set(0).and_then(|()| stream_queue(end, &what))
    } else {
        set(-1).and_then(|()| message_queue(end, peer, &what))
    };
    let back = set(saved);
    let q = r?;
    back?;
    Ok(q)
}

fn capture_end(
    pid: pid_t,
    end: (&End, &OwnedFd),
    peer: &OwnedFd,
    kind: i32,
    shutdown: u8,
) -> Result<EndState> {
    let (e, ours) = end;
    let opt = |o, name: &str| {
        getsockopt_int(ours, o)
            .map_err(|err| EngineError::Other(format!("read {name} of fd {}: {err}", e.fd)))
    };
    Ok(EndState {
        ino: e.ino,
        queued: queued(pid, e.fd, ours, peer, kind, shutdown)?
            .into_iter()
            .map(serde_bytes::ByteBuf::from)
            .collect(),
        shutdown,
        sndbuf: opt(libc::SO_SNDBUF, "SO_SNDBUF")?,
        rcvbuf: opt(libc::SO_RCVBUF, "SO_RCVBUF")?,
        peek_off: opt(libc::SO_PEEK_OFF, "SO_PEEK_OFF")?,
    })
}

/// Sets a buffer size as read from a socket (the kernel keeps twice what
/// is set), beyond the system's limit if this process may.
pub(super) fn set_buf(
    fd: &OwnedFd,
    force: libc::c_int,
    plain: libc::c_int,
    read: i32,
) -> Result<()> {
    let want = (read / 2).max(1);
    if setsockopt_int(fd, force, want).is_ok() {
        return Ok(());
    }
    setsockopt_int(fd, plain, want)
        .map_err(|e| EngineError::Other(format!("size a unix socket's buffer: {e}")))
}

/// Writes the messages `queued` into `from`, to be read at its peer.
pub(super) fn put_back(from: &OwnedFd, kind: i32, queued: &[serde_bytes::ByteBuf]) -> Result<()> {
    for m in queued {
        let mut done = 0usize;
        loop {
            // SAFETY: send reads `m.len() - done` bytes from our buffer.
            let n = unsafe {
                libc::send(
                    from.as_raw_fd(),
                    m[done..].as_ptr() as *const libc::c_void,
                    m.len() - done,
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                )
            };
            if n < 0 {
                return Err(EngineError::Other(format!(
                    "put back {} bytes queued in a unix socket pair: {}",
                    m.len() - done,
                    std::io::Error::last_os_error()
                )));
            }
            done += n as usize;
            // A message goes whole; a stream may take it in pieces.
            if done >= m.len() || kind != libc::SOCK_STREAM || n == 0 {
                break;
            }
        }
        if done != m.len() {
            return Err(EngineError::Other(format!(
                "put back a message of {} bytes in a unix socket pair: {done} went",
                m.len()
            )));
        }
    }
    Ok(())
}

pub(super) fn shut(fd: &OwnedFd, bits: u8) -> Result<()> {
    let how = match (bits & RCV_SHUTDOWN != 0, bits & SEND_SHUTDOWN != 0) {
        (false, false) => return Ok(()),
        (true, false) => libc::SHUT_RD,
        (false, true) => libc::SHUT_WR,
        (true, true) => libc::SHUT_RDWR,
    };
    // SAFETY: shutdown on a socket we own.
    if unsafe { libc::shutdown(fd.as_raw_fd(), how) } < 0 {
        return Err(errno_err("shut a unix socket down"));
    }
    Ok(())
}

/// A new pair of `kind`, both ends close-on-exec.
pub(super) fn fresh_pair(kind: i32) -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0i32; 2];
    // SAFETY: socketpair writes two fds into the array.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            kind | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } < 0
    {
        return Err(errno_err("create a unix socket pair"));
    }
    // SAFETY: both fds are fresh and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Makes the pair `p` again: its ends, with their buffers' sizes, what
/// each had queued, their shutdown states and peek offsets.
pub(crate) fn make(p: &PairState) -> Result<(OwnedFd, OwnedFd)> {
    if !matches!(
        p.kind,
        libc::SOCK_STREAM | libc::SOCK_DGRAM | libc::SOCK_SEQPACKET
    ) {
        return Err(EngineError::Incompatible(format!(
            "a unix socket pair of unknown type {}",
            p.kind
        )));
    }
    let (a, b) = fresh_pair(p.kind)?;
    for (fd, e) in [(&a, &p.a), (&b, &p.b)] {
        set_buf(fd, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, e.sndbuf)?;
        set_buf(fd, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, e.rcvbuf)?;
    }
    // What `a` had to read, `b` wrote, and the other way round. The
    // sender's buffer is made room enough for it first (the process may
    // have shrunk it since it wrote, or written in pieces that fit
    // otherwise), and its own size set again after.
    for (from, to, queued) in [(&b, &p.b, &p.a.queued), (&a, &p.a, &p.b.queued)] {
        let room: usize = queued.iter().map(|m| m.len() + 1024).sum::<usize>() + (64 << 10);
        if room / 2 > (to.sndbuf.max(0) as usize) / 2 {
            let _ = setsockopt_int(
                from,
                libc::SO_SNDBUFFORCE,
                room.min(i32::MAX as usize) as i32,
            );
        }
        put_back(from, p.kind, queued)?;
        set_buf(from, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, to.sndbuf)?;
    }
    for (fd, e) in [(&a, &p.a), (&b, &p.b)] {
        shut(fd, e.shutdown)?;
        if e.peek_off >= 0 {
            setsockopt_int(fd, libc::SO_PEEK_OFF, e.peek_off).map_err(|err| {
                EngineError::Other(format!("set a unix socket's peek offset: {err}"))
            })?;
        }
    }
    Ok((a, b))
}

impl Resource for SocketPairs {
    const PART: &'static str = "socketpairs";
    type State = SocketPairsState;

    /// `files` has listed the socket ends in `cx.socket_ends`.
    fn capture(cx: &mut Capture) -> Result<SocketPairsState> {
        let ends = std::mem::take(&mut cx.socket_ends);
        if ends.is_empty() {
            return Ok(SocketPairsState::default());
        }
        let pid = cx.pid;
        let pidfd = crate::sys::pidfd_open(pid)?;
        let mut pairs = Vec::new();
        let mut done: Vec<u64> = Vec::new();
        for e in &ends {
            if done.contains(&e.ino) {
                continue;
            }
            let d = classify(e.ino)
                .map_err(|w| unsupported(pid, format!("{w} (fd {}: socket:[{}])", e.fd, e.ino)))?;
            let peer_ino = d.peer.unwrap_or(0);
            let Some(peer) = ends.iter().find(|x| x.ino == peer_ino) else {
                return Err(unsupported(
                    pid,
                    format!(
                        "a unix socket connected to a socket it does not hold (fd {}: socket:[{}])",
                        e.fd, e.ino
                    ),
                ));
            };
            let pd = diag(peer.ino).ok_or_else(|| {
                EngineError::Other(format!("socket:[{}] vanished during the capture", peer.ino))
            })?;
            if pd.peer != Some(e.ino) {
                return Err(unsupported(
                    pid,
                    format!(
                        "a unix socket whose peer is connected elsewhere (fd {}: socket:[{}])",
                        peer.fd, peer.ino
                    ),
                ));
            }
            let ea = crate::sys::pidfd_getfd(&pidfd, e.fd)?;
            let eb = crate::sys::pidfd_getfd(&pidfd, peer.fd)?;
            pairs.push(PairState {
                kind: d.kind,
                a: capture_end(pid, (e, &ea), &eb, d.kind, d.shutdown)?,
                b: capture_end(pid, (peer, &eb), &ea, d.kind, pd.shutdown)?,
            });
            done.extend([e.ino, peer.ino]);
        }
        Ok(SocketPairsState { pairs })
    }

    fn preflight(s: &SocketPairsState, pf: &mut Preflight) -> Result<()> {
        for p in &s.pairs {
            let (a, b) = make(p)?;
            let a = pf.keep(a)?;
            let b = pf.keep(b)?;
            pf.sockets.insert(p.a.ino, a);
            pf.sockets.insert(p.b.ino, b);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_link_names_its_inode() {
        assert_eq!(inode_of("socket:[1361581]"), Some(1361581));
        assert_eq!(inode_of("pipe:[12]"), None);
        assert!(is_one_of("socket:[5]", &[4, 5]));
        assert!(!is_one_of("socket:[6]", &[4, 5]));
    }

    fn ino(fd: &OwnedFd) -> u64 {
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat writes into our local stat.
        assert_eq!(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) }, 0);
        st.st_ino
    }

    #[test]
    fn the_diagnostics_name_a_pairs_peer_and_its_shutdown() {
        let (a, b) = fresh_pair(libc::SOCK_STREAM).unwrap();
        let d = classify(ino(&a)).unwrap();
        assert_eq!(d.kind, libc::SOCK_STREAM);
        assert_eq!(d.peer, Some(ino(&b)));
        assert_eq!(d.shutdown, 0);
        shut(&a, SEND_SHUTDOWN).unwrap();
        assert_eq!(diag(ino(&a)).unwrap().shutdown, SEND_SHUTDOWN);
        assert_eq!(diag(ino(&b)).unwrap().shutdown, RCV_SHUTDOWN);
        // An unconnected socket is no pair.
        // SAFETY: a fresh socket, owned at once.
        let lone =
            unsafe { OwnedFd::from_raw_fd(libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0)) };
        assert_eq!(
            classify(ino(&lone)),
            Err("a unix socket not connected to a peer")
        );
        assert_eq!(diag(u64::from(u32::MAX) - 7), None);
    }

    fn send(fd: &OwnedFd, m: &[u8]) {
        // SAFETY: send reads `m` from our buffer.
        let n = unsafe { libc::send(fd.as_raw_fd(), m.as_ptr() as *const _, m.len(), 0) };
        assert_eq!(n, m.len() as isize);
    }

    fn recv(fd: &OwnedFd) -> Vec<u8> {
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
        assert!(n >= 0, "{}", std::io::Error::last_os_error());
        b.truncate(n as usize);
        b
    }

    #[test]
    fn queued_messages_are_read_left_in_place_and_put_back_in_a_new_pair() {
        let me = std::process::id() as pid_t;
        for kind in [libc::SOCK_STREAM, libc::SOCK_DGRAM, libc::SOCK_SEQPACKET] {
            let (a, b) = fresh_pair(kind).unwrap();
            send(&b, b"first");
            send(&b, b"");
            send(&b, b"second message");
            send(&a, b"back");
            let qa = queued(me, 3, &a, &b, kind, 0).unwrap();
            let qb = queued(me, 4, &b, &a, kind, 0).unwrap();
            // Again: an empty message once peeked hides from a peek at an
            // offset, not from this.
            assert_eq!(queued(me, 3, &a, &b, kind, 0).unwrap(), qa);
            if kind == libc::SOCK_STREAM {
                assert_eq!(qa, vec![b"firstsecond message".to_vec()]);
            } else {
                assert_eq!(
                    qa,
                    vec![b"first".to_vec(), vec![], b"second message".to_vec()]
                );
            }
            assert_eq!(qb, vec![b"back".to_vec()]);
            // Still there, and the peek offset is off again.
            assert_eq!(getsockopt_int(&a, libc::SO_PEEK_OFF).unwrap(), -1);
            let p = PairState {
                kind,
                a: EndState {
                    ino: 1,
                    queued: qa.into_iter().map(serde_bytes::ByteBuf::from).collect(),
                    shutdown: 0,
                    sndbuf: getsockopt_int(&a, libc::SO_SNDBUF).unwrap(),
                    rcvbuf: getsockopt_int(&a, libc::SO_RCVBUF).unwrap(),
                    peek_off: -1,
                },
                b: EndState {
                    ino: 2,
                    queued: qb.into_iter().map(serde_bytes::ByteBuf::from).collect(),
                    shutdown: 0,
                    sndbuf: 1 << 17,
                    rcvbuf: 1 << 17,
                    peek_off: 3,
                },
            };
            let (na, nb) = make(&p).unwrap();
            // (A read moves the peek offset back by what it took.)
            assert_eq!(getsockopt_int(&nb, libc::SO_PEEK_OFF).unwrap(), 3);
            assert_eq!(getsockopt_int(&nb, libc::SO_SNDBUF).unwrap(), 1 << 17);
            // Each end reads what it would have read, then nothing more.
            let reads_of_a = if kind == libc::SOCK_STREAM { 1 } else { 3 };
            for (old, new, reads) in [(&a, &na, reads_of_a), (&b, &nb, 1)] {
                for _ in 0..reads {
                    assert_eq!(recv(old), recv(new), "kind {kind}");
                }
                for fd in [old, new] {
                    let mut c = [0u8; 1];
                    // SAFETY: recv writes at most one byte.
                    let r = unsafe {
                        libc::recv(
                            fd.as_raw_fd(),
                            c.as_mut_ptr() as *mut _,
                            1,
                            libc::MSG_DONTWAIT,
                        )
                    };
                    assert_eq!(r, -1, "kind {kind}: more queued than was captured");
                }
            }
        }
    }

    #[test]
    fn a_queue_bigger_than_its_senders_buffer_now_is_put_back_whole() {
        let me = std::process::id() as pid_t;
        let (a, b) = fresh_pair(libc::SOCK_STREAM).unwrap();
        let big: Vec<u8> = (0..150_000u32).map(|i| (i % 251) as u8).collect();
        send(&b, &big);
        // Shrunk after the write: the queue outgrows the buffer.
        setsockopt_int(&b, libc::SO_SNDBUF, 4096).unwrap();
        // Each end as the capture takes it.
        let end = |ino, fd, ours, peer| {
            capture_end(me, (&End { ino, fd }, ours), peer, libc::SOCK_STREAM, 0).unwrap()
        };
        let p = PairState {
            kind: libc::SOCK_STREAM,
            a: end(1, 3, &a, &b),
            b: end(2, 4, &b, &a),
        };
        let (na, nb) = make(&p).unwrap();
        assert_eq!(getsockopt_int(&nb, libc::SO_SNDBUF).unwrap(), p.b.sndbuf);
        let mut got = Vec::new();
        while got.len() < big.len() {
            let r = recv(&na);
            assert!(!r.is_empty());
            got.extend(r);
        }
        assert_eq!(got, big);
    }

    #[test]
    fn descriptors_in_flight_are_refused_and_left_in_place() {
        let me = std::process::id() as pid_t;
        for kind in [libc::SOCK_STREAM, libc::SOCK_DGRAM] {
            let (a, b) = fresh_pair(kind).unwrap();
            let passed = std::fs::File::open("/dev/null").unwrap();
            let fdnum = passed.as_raw_fd();
            let mut cbuf = [0u8; 64];
            let mut byte = [7u8];
            let mut iov = libc::iovec {
                iov_base: byte.as_mut_ptr() as *mut _,
                iov_len: 1,
            };
            // SAFETY: a zeroed msghdr, filled below with our locals.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = cbuf.as_mut_ptr() as *mut _;
            // SAFETY: CMSG_SPACE is arithmetic.
            msg.msg_controllen = unsafe { libc::CMSG_SPACE(4) } as usize;
            // SAFETY: the control buffer has room for one header and one int.
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&msg);
                (*c).cmsg_level = libc::SOL_SOCKET;
                (*c).cmsg_type = libc::SCM_RIGHTS;
                (*c).cmsg_len = libc::CMSG_LEN(4) as usize;
                std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut i32, fdnum);
            }
            // SAFETY: sendmsg reads the message we built.
            assert_eq!(unsafe { libc::sendmsg(b.as_raw_fd(), &msg, 0) }, 1);
            let e = queued(me, 3, &a, &b, kind, 0).unwrap_err().to_string();
            assert!(e.contains("descriptors"), "{e}");
            assert_eq!(getsockopt_int(&a, libc::SO_PEEK_OFF).unwrap(), -1);
            // The message is back, and so is its descriptor.
            // SAFETY: a zeroed msghdr, filled with our locals.
            let mut rmsg: libc::msghdr = unsafe { std::mem::zeroed() };
            let mut rb = [0u8; 4];
            let mut riov = libc::iovec {
                iov_base: rb.as_mut_ptr() as *mut _,
                iov_len: 4,
            };
            let mut rc = [0u8; 64];
            rmsg.msg_iov = &mut riov;
            rmsg.msg_iovlen = 1;
            rmsg.msg_control = rc.as_mut_ptr() as *mut _;
            rmsg.msg_controllen = rc.len();
            // SAFETY: recvmsg writes into our locals within their lengths.
            let n = unsafe {
                libc::recvmsg(
                    a.as_raw_fd(),
                    &mut rmsg,
                    libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
                )
            };
            assert_eq!((n, rb[0]), (1, 7), "kind {kind}");
            // SAFETY: reading the header recvmsg wrote.
            let c = unsafe { libc::CMSG_FIRSTHDR(&rmsg) };
            assert!(!c.is_null(), "kind {kind}: the descriptor was lost");
            // SAFETY: c points into rc, as the kernel wrote it.
            let got = unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const i32) };
            // SAFETY: the descriptor received is ours.
            drop(unsafe { OwnedFd::from_raw_fd(got) });
        }
    }
}
