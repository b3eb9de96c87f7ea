//! Blocking API over `std` streams (TCP, or Unix sockets for tests and local use).
//!
//! ```no_run
//! use pmig_proto::{blocking, load_key, Config, Msg};
//! # fn main() -> Result<(), pmig_proto::ProtoError> {
//! let key = load_key("/etc/pmig/cluster.key")?;
//! let mut ch = blocking::connect("10.77.0.2:7070", &key, &Config::new("n1"))?;
//! ch.send(&Msg::Ping { seq: 1 })?;
//! assert_eq!(ch.recv()?, Msg::Pong { seq: 1 });
//! # Ok(()) }
//! ```

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use crate::compress::{self, Packer};
use crate::error::ProtoError;
use crate::frame::{Opener, Sealer, RECORD_HEADER};
use crate::key::ClusterKey;
use crate::msg::{self, Msg};
use crate::session::{self, Config, HelloOutcome, PeerInfo, MAX_HANDSHAKE_MSG};

/// A byte stream the protocol can run over.
pub trait Stream: Read + Write + Send + Sized + 'static {
    /// Sets both read and write timeouts (`None`: block forever).
    fn set_timeouts(&self, t: Option<Duration>) -> io::Result<()>;
    /// A second handle on the same connection (for [`Channel::split`]).
    fn try_clone_stream(&self) -> io::Result<Self>;
    /// A label for the remote end, used in errors and logs.
    fn peer_label(&self) -> String;
    /// Shuts the connection down in both directions (errors ignored).
    fn shutdown_both(&self);
    /// The peer's address, the connection's delivery rate as the kernel
    /// measures it (bytes a second) and whether the kernel marks that rate
    /// application-limited, for [`compress::Mode::Auto`]; `None` where
    /// there is no such measure.
    fn link_sample(&self) -> Option<(std::net::IpAddr, u64, bool)> {
        None
    }
}

impl Stream for TcpStream {
    fn set_timeouts(&self, t: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(t)?;
        self.set_write_timeout(t)
    }
    fn try_clone_stream(&self) -> io::Result<Self> {
        self.try_clone()
    }
    fn peer_label(&self) -> String {
        self.peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| "unknown peer".into())
    }
    fn shutdown_both(&self) {
        let _ = self.shutdown(Shutdown::Both);
    }
    fn link_sample(&self) -> Option<(std::net::IpAddr, u64, bool)> {
        use std::os::fd::AsFd;
        let (rate, app_limited) = compress::delivery_rate(self.as_fd())?;
        Some((self.peer_addr().ok()?.ip(), rate, app_limited))
    }
}

impl Stream for UnixStream {
    fn set_timeouts(&self, t: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(t)?;
        self.set_write_timeout(t)
    }
    fn try_clone_stream(&self) -> io::Result<Self> {
        self.try_clone()
    }
    fn peer_label(&self) -> String {
        match self
            .peer_addr()
            .ok()
            .and_then(|a| a.as_pathname().map(|p| p.to_owned()))
        {
            Some(p) => format!("unix:{}", p.display()),
            None => "unix socket".into(),
        }
    }
    fn shutdown_both(&self) {
        let _ = self.shutdown(Shutdown::Both);
    }
}

fn io_err(what: &str, peer: &str, e: io::Error) -> ProtoError {
    let e = if matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    ) {
        io::Error::new(io::ErrorKind::TimedOut, "timed out")
    } else {
        e
    };
    ProtoError::io(format!("{what} {peer}"), e)
}

/// Connects over TCP (with `TCP_NODELAY`), authenticates and exchanges `Hello`.
///
/// The cipher (docs/protocol.md §2): with `cfg.cipher` AES-GCM, a peer whose
/// `Hello` offered AES-GCM on an earlier connection of this process is reached
/// with AES-GCM; any other with ChaChaPoly, which every pmig accepts, and its
/// `Hello` is remembered for the next connection ([`connect_for_bulk`] learns it
/// first).
pub fn connect(
    addr: impl ToSocketAddrs,
    key: &ClusterKey,
    cfg: &Config,
) -> Result<Channel<TcpStream>, ProtoError> {
    connect_with(addr, key, cfg, false)
}

/// [`connect`] for a connection that carries bulk data (a migration's pages) to
/// a pmig daemon: a peer this process has not reached before is first asked
/// what it offers, on a short connection of its own (closed after `Hello`), so
/// that this one already uses the faster cipher where both ends have it. The
/// peer must accept more than one connection.
pub fn connect_for_bulk(
    addr: impl ToSocketAddrs,
    key: &ClusterKey,
    cfg: &Config,
) -> Result<Channel<TcpStream>, ProtoError> {
    connect_with(addr, key, cfg, true)
}

fn connect_with(
    addr: impl ToSocketAddrs,
    key: &ClusterKey,
    cfg: &Config,
    learn_first: bool,
) -> Result<Channel<TcpStream>, ProtoError> {
    let addrs: Vec<_> = addr
        .to_socket_addrs()
        .map_err(|e| ProtoError::io("resolving peer address", e))?
        .collect();
    let mut last = None;
    for a in &addrs {
        if learn_first && session::client_cipher(a, cfg.cipher).is_none() {
            // ChaChaPoly, and what the peer offers is remembered: this is the
            // connection unless the peer offers the faster cipher.
            match tcp_connect(a, cfg) {
                Ok(s) => {
                    let first = client_to(s, a, key, cfg)?;
                    if session::client_cipher(a, cfg.cipher) != Some(session::Cipher::AesGcm) {
                        return Ok(first);
                    }
                }
                Err(e) => {
                    last = Some(e);
                    continue;
                }
            }
        }
        match tcp_connect(a, cfg) {
            Ok(s) => return client_to(s, a, key, cfg),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        ProtoError::io(
            "resolving peer address",
            io::Error::new(io::ErrorKind::NotFound, "no address"),
        )
    }))
}

fn tcp_connect(a: &SocketAddr, cfg: &Config) -> Result<TcpStream, ProtoError> {
    let s = match cfg.handshake_timeout {
        Some(t) => TcpStream::connect_timeout(a, t),
        None => TcpStream::connect(a),
    }
    .map_err(|e| io_err("connecting to", &a.to_string(), e))?;
    s.set_nodelay(true)
        .map_err(|e| io_err("setting TCP_NODELAY for", &a.to_string(), e))?;
    crate::congestion::apply(&s);
    Ok(s)
}

/// The client side on `s`, connected to `a`, with the cipher [`connect`]
/// describes; remembers what the peer offers.
fn client_to(
    s: TcpStream,
    a: &SocketAddr,
    key: &ClusterKey,
    cfg: &Config,
) -> Result<Channel<TcpStream>, ProtoError> {
    let r = Channel::client(s, key, &session::config_for(a, cfg));
    session::learn_peer(a, r.as_ref().ok().map(|c| c.peer().hello.features));
    r
}

/// Accepts one TCP connection and runs the server side of the handshake on it.
///
/// A refused peer is logged (one `warn` line) and returned as `Err`; the listener stays
/// usable. A daemon serving many peers would rather accept in a loop and call
/// [`Channel::server`] on a thread per connection.
pub fn accept(
    listener: &TcpListener,
    key: &ClusterKey,
    cfg: &Config,
) -> Result<Channel<TcpStream>, ProtoError> {
    let (s, a) = listener
        .accept()
        .map_err(|e| ProtoError::io("accepting a connection", e))?;
    s.set_nodelay(true)
        .map_err(|e| io_err("setting TCP_NODELAY for", &a.to_string(), e))?;
    crate::congestion::apply(&s);
    Channel::server(s, key, cfg)
}

/// An authenticated connection, usable from one thread; [`Channel::split`] gives two
/// halves for full-duplex use from two threads.
pub struct Channel<S: Stream> {
    tx: Sender<S>,
    rx: Receiver<S>,
}

/// The sending half of a connection.
pub struct Sender<S: Stream> {
    stream: S,
    sealer: Sealer,
    peer: Arc<PeerInfo>,
    packer: Packer,
}

/// The receiving half of a connection.
pub struct Receiver<S: Stream> {
    stream: S,
    opener: Opener,
    peer: Arc<PeerInfo>,
}

/// What [`Sender::send_pages`] sent.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PagesSent {
    /// Bytes of pages sent as they are (`PageData`).
    pub data: u64,
    /// Bytes of pages sent as their count (`PageZeros`).
    pub zeros: u64,
    /// Bytes of pages sent compressed (`PageLz4`).
    pub packed: u64,
    /// The bytes of those pages' blocks.
    pub packed_wire: u64,
    /// Messages sent.
    pub messages: u64,
}

impl PagesSent {
    /// Per message, about what travels besides the pages' bytes (frame
    /// header, message, authentication tag).
    pub const OVERHEAD: u64 = 32;

    fn add(&mut self, bytes: usize, zeros: bool) {
        if zeros {
            self.zeros += bytes as u64;
        } else {
            self.data += bytes as u64;
        }
        self.messages += 1;
    }

    fn add_packed(&mut self, bytes: usize, block: usize) {
        self.packed += bytes as u64;
        self.packed_wire += block as u64;
        self.messages += 1;
    }

    /// About the bytes that went on the wire.
    pub fn wire(&self) -> u64 {
        self.data + self.packed_wire + self.messages * Self::OVERHEAD
    }

    /// The bytes of pages it stood for, zeros and compressed pages included.
    pub fn pages_bytes(&self) -> u64 {
        self.data + self.zeros + self.packed
    }
}

/// Most pages of one `PageLz4` a sender makes: runs of data are cut in
/// pieces of this many pages (128 KiB), each compressed apart, so that data
/// that does not compress is found a piece at a time.
pub const LZ4_RUN: usize = 32;

/// A received message with its attachment (raw bytes after the encoded message).
#[derive(Debug)]
pub struct Incoming {
    pub msg: Msg,
    body: Vec<u8>,
    att: usize,
}

impl Incoming {
    pub(crate) fn parse(body: Vec<u8>) -> Result<Self, ProtoError> {
        let (msg, rest) = msg::decode_with_attachment(&body)?;
        let att = body.len() - rest.len();
        Ok(Incoming { msg, body, att })
    }

    /// The attachment bytes (empty if none).
    pub fn attachment(&self) -> &[u8] {
        &self.body[self.att..]
    }

    /// The whole frame body and the offset where the attachment starts (no copy).
    pub fn into_parts(self) -> (Msg, Vec<u8>, usize) {
        (self.msg, self.body, self.att)
    }

    /// For `PageData` and `PageZeros`: the migration, the source address
    /// and the pages' bytes (zeros from a static buffer for `PageZeros`,
    /// which stands for a `PageData` of them). `None` for other messages.
    pub fn pages(&self) -> Option<(u64, u64, &[u8])> {
        match self.msg {
            Msg::PageData { id, addr } => Some((id, addr, self.attachment())),
            Msg::PageZeros { id, addr, pages } => Some((id, addr, msg::zero_pages(pages))),
            _ => None,
        }
    }

    /// Whether this is a `PageZeros`: the bytes [`Self::pages`] gives are
    /// zeros it stands for, which a receiver may install as such.
    pub fn is_zeros(&self) -> bool {
        matches!(self.msg, Msg::PageZeros { .. })
    }

    /// The frame body, for [`Receiver::recycle`] once the attachment has
    /// been used.
    pub fn into_body(self) -> Vec<u8> {
        self.body
    }
}

fn write_hs<S: Stream>(s: &mut S, msg: &[u8]) -> io::Result<()> {
    let mut v = Vec::with_capacity(RECORD_HEADER + msg.len());
    v.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    v.extend_from_slice(msg);
    s.write_all(&v)?;
    s.flush()
}

/// Reads a length-prefixed handshake message; `Ok(None)` on EOF before the first byte.
fn read_hs<S: Stream>(
    s: &mut S,
    peer: &str,
    from_initiator: bool,
) -> Result<Option<Vec<u8>>, ProtoError> {
    let mut len = [0u8; RECORD_HEADER];
    match s.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(io_err("handshake with", peer, e)),
    }
    let n = u16::from_be_bytes(len) as usize;
    session::check_handshake_len(n, peer, from_initiator)?;
    let mut m = vec![0u8; n];
    s.read_exact(&mut m).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            ProtoError::Handshake {
                peer: peer.to_string(),
                reason: "connection closed in the middle of a handshake message".into(),
            }
        } else {
            io_err("handshake with", peer, e)
        }
    })?;
    Ok(Some(m))
}

impl<S: Stream> Channel<S> {
    /// Runs the initiator side on an established stream.
    pub fn client(mut stream: S, key: &ClusterKey, cfg: &Config) -> Result<Self, ProtoError> {
        let addr = stream.peer_label();
        stream
            .set_timeouts(cfg.handshake_timeout)
            .map_err(|e| io_err("configuring connection to", &addr, e))?;
        let cipher = cfg.cipher;
        let mut hs = session::handshake_state(key, true, cipher)?;
        let mut buf = [0u8; MAX_HANDSHAKE_MSG];
        let n = hs
            .write_message(&[], &mut buf)
            .map_err(|e| ProtoError::Noise(e.to_string()))?;
        write_hs(&mut stream, &buf[..n]).map_err(|e| match e.kind() {
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => {
                session::closed_during_handshake(&addr)
            }
            _ => io_err("handshake with", &addr, e),
        })?;
        let reply = match read_hs(&mut stream, &addr, false) {
            Ok(Some(m)) => m,
            Ok(None) => return Err(session::closed_during_handshake(&addr)),
            Err(ProtoError::Io { source, .. })
                if source.kind() == io::ErrorKind::ConnectionReset =>
            {
                return Err(session::closed_during_handshake(&addr))
            }
            Err(e) => return Err(e),
        };
        hs.read_message(&reply, &mut buf)
            .map_err(|_| session::reply_auth_failed(&addr))?;
        let ts = session::into_transport(hs)?;
        Self::finish(stream, ts, cfg, addr, cipher)
    }

    /// Runs the responder side on an accepted stream. A refusal is logged as one
    /// `warn` line and returned as `Err`.
    pub fn server(stream: S, key: &ClusterKey, cfg: &Config) -> Result<Self, ProtoError> {
        let addr = stream.peer_label();
        let r = Self::server_inner(stream, key, cfg, &addr);
        if let Err(e) = &r {
            tracing::warn!("refused connection from {addr}: {e}");
        }
        r
    }

    fn server_inner(
        mut stream: S,
        key: &ClusterKey,
        cfg: &Config,
        addr: &str,
    ) -> Result<Self, ProtoError> {
        let addr = addr.to_string();
        stream
            .set_timeouts(cfg.handshake_timeout)
            .map_err(|e| io_err("configuring connection from", &addr, e))?;
        let first = match read_hs(&mut stream, &addr, true) {
            Ok(Some(m)) => m,
            Ok(None) => {
                return Err(ProtoError::Handshake {
                    peer: addr,
                    reason: "connection closed before the handshake".into(),
                })
            }
            Err(e) => {
                stream.shutdown_both();
                return Err(e);
            }
        };
        let Some((mut hs, cipher)) = session::respond(key, &first)? else {
            stream.shutdown_both();
            return Err(ProtoError::AuthFailed { peer: addr });
        };
        let mut buf = [0u8; MAX_HANDSHAKE_MSG];
        let n = hs
            .write_message(&[], &mut buf)
            .map_err(|e| ProtoError::Noise(e.to_string()))?;
        write_hs(&mut stream, &buf[..n]).map_err(|e| io_err("handshake with", &addr, e))?;
        let ts = session::into_transport(hs)?;
        Self::finish(stream, ts, cfg, addr, cipher)
    }

    /// Both sides: send our `Hello`, read and check the peer's.
    fn finish(
        stream: S,
        ts: Arc<snow::StatelessTransportState>,
        cfg: &Config,
        addr: String,
        cipher: session::Cipher,
    ) -> Result<Self, ProtoError> {
        let stream2 = stream
            .try_clone_stream()
            .map_err(|e| io_err("duplicating the connection to", &addr, e))?;
        let provisional = Arc::new(PeerInfo {
            node: addr.clone(),
            addr: addr.clone(),
            version: 0,
            features: 0,
            hello: cfg.hello(),
            cipher,
        });
        let mut tx = Sender {
            stream,
            sealer: Sealer::new(ts.clone(), cfg.max_message_size),
            peer: provisional.clone(),
            packer: Packer::default(),
        };
        let mut rx = Receiver {
            stream: stream2,
            opener: Opener::new(ts, cfg.max_message_size, addr.clone()),
            peer: provisional,
        };
        tx.send(&Msg::Hello(cfg.hello()))?;
        let frame = rx.recv_frame()?;
        match session::check_hello(cfg, &addr, &frame, cipher) {
            HelloOutcome::Ok(info) => {
                let info = Arc::new(info);
                rx.opener.peer = info.node.clone();
                tx.peer = info.clone();
                rx.peer = info;
                tx.stream
                    .set_timeouts(None)
                    .map_err(|e| io_err("configuring connection to", &addr, e))?;
                Ok(Channel { tx, rx })
            }
            HelloOutcome::Refuse(msg, err) => {
                let _ = tx.send(&msg);
                tx.stream.shutdown_both();
                Err(err)
            }
            HelloOutcome::Fail(err) => {
                tx.stream.shutdown_both();
                Err(err)
            }
        }
    }

    /// The peer, as established by the handshake and `Hello`.
    pub fn peer(&self) -> &PeerInfo {
        &self.tx.peer
    }

    /// The underlying stream (e.g. to set timeouts).
    pub fn stream(&self) -> &S {
        &self.tx.stream
    }

    /// Sends a message and flushes.
    pub fn send(&mut self, msg: &Msg) -> Result<(), ProtoError> {
        self.tx.send(msg)
    }

    /// Sends a message followed by raw attachment bytes, gathered from `attachment`
    /// without an intermediate copy, and flushes.
    pub fn send_with(&mut self, msg: &Msg, attachment: &[&[u8]]) -> Result<(), ProtoError> {
        self.tx.send_with(msg, attachment)
    }

    /// Like [`Self::send_with`] but without flushing: small messages are batched until
    /// [`Self::flush`] (or until about 1 MiB of records is ready).
    pub fn queue(&mut self, msg: &Msg, attachment: &[&[u8]]) -> Result<(), ProtoError> {
        self.tx.queue(msg, attachment)
    }

    /// See [`Sender::send_pages`].
    pub fn send_pages(&mut self, id: u64, addr: u64, data: &[u8]) -> Result<PagesSent, ProtoError> {
        self.tx.send_pages(id, addr, data)
    }

    /// See [`Sender::set_compression`].
    pub fn set_compression(&mut self, mode: compress::Mode) {
        self.tx.set_compression(mode);
    }

    /// See [`Sender::queue_image_chunk`].
    pub fn queue_image_chunk(
        &mut self,
        id: u64,
        offset: u64,
        data: &[u8],
    ) -> Result<u64, ProtoError> {
        self.tx.queue_image_chunk(id, offset, data)
    }

    /// See [`Sender::queue_pages`].
    pub fn queue_pages(
        &mut self,
        id: u64,
        addr: u64,
        data: &[u8],
    ) -> Result<PagesSent, ProtoError> {
        self.tx.queue_pages(id, addr, data)
    }

    pub fn flush(&mut self) -> Result<(), ProtoError> {
        self.tx.flush()
    }

    /// Sends one raw frame whose body is the concatenation of `parts`, and flushes.
    pub fn send_frame(&mut self, parts: &[&[u8]]) -> Result<(), ProtoError> {
        self.tx.send_frame(parts)
    }

    /// Receives a message that has no attachment.
    pub fn recv(&mut self) -> Result<Msg, ProtoError> {
        self.rx.recv()
    }

    /// Receives a message and its attachment.
    pub fn recv_with(&mut self) -> Result<Incoming, ProtoError> {
        self.rx.recv_with()
    }

    /// See [`Receiver::recycle`].
    pub fn recycle(&mut self, body: Vec<u8>) {
        self.rx.recycle(body);
    }

    /// Receives one raw frame body.
    pub fn recv_frame(&mut self) -> Result<Vec<u8>, ProtoError> {
        self.rx.recv_frame()
    }

    /// Splits into independently usable halves (e.g. one thread pushes pages while
    /// another reads fault requests).
    /// Both halves at once, borrowed (e.g. for two scoped threads).
    pub fn halves(&mut self) -> (&mut Sender<S>, &mut Receiver<S>) {
        (&mut self.tx, &mut self.rx)
    }

    pub fn split(self) -> (Sender<S>, Receiver<S>) {
        (self.tx, self.rx)
    }

    /// Reassembles halves split from the same channel.
    pub fn unsplit(tx: Sender<S>, rx: Receiver<S>) -> Self {
        Channel { tx, rx }
    }

    /// Flushes, then shuts the connection down.
    pub fn close(mut self) -> Result<(), ProtoError> {
        let r = self.tx.flush();
        self.tx.stream.shutdown_both();
        r
    }
}

impl<S: Stream> Sender<S> {
    pub fn peer(&self) -> &PeerInfo {
        &self.peer
    }

    /// Sends the pages `data` (whole pages) of migration `id` at source
    /// address `addr`, and flushes. To a version-17 peer each run of pages
    /// that are all zeros goes as `PageZeros` (at most
    /// [`msg::MAX_ZERO_PAGES`] a message) and the rest as `PageData`; to an
    /// older one all of it goes as one `PageData`.
    pub fn send_pages(&mut self, id: u64, addr: u64, data: &[u8]) -> Result<PagesSent, ProtoError> {
        let sent = self.queue_pages(id, addr, data)?;
        self.flush()?;
        Ok(sent)
    }

    /// [`Self::send_pages`] without the flush: many small runs of pages (a
    /// round of scattered single pages) then go in a few records and
    /// writes, at the next [`Self::flush`] (or once about 1 MiB is ready).
    pub fn queue_pages(
        &mut self,
        id: u64,
        addr: u64,
        data: &[u8],
    ) -> Result<PagesSent, ProtoError> {
        const PAGE: usize = 4096;
        let mut sent = PagesSent::default();
        if self.peer.version < msg::PAGE_ZEROS || data.len() < PAGE {
            self.queue(&Msg::PageData { id, addr }, &[data])?;
            sent.add(data.len(), false);
            return Ok(sent);
        }
        let pages = data.len() / PAGE;
        let zero = |i: usize| msg::is_zero(&data[i * PAGE..(i + 1) * PAGE]);
        let mut i = 0;
        while i < pages {
            let z = zero(i);
            let mut j = i + 1;
            while j < pages && zero(j) == z && (!z || j - i < msg::MAX_ZERO_PAGES as usize) {
                j += 1;
            }
            let at = addr + (i * PAGE) as u64;
            if z {
                let n = (j - i) as u32;
                self.queue(
                    &Msg::PageZeros {
                        id,
                        addr: at,
                        pages: n,
                    },
                    &[],
                )?;
                sent.add((j - i) * PAGE, true);
            } else {
                self.queue_data(id, at, &data[i * PAGE..j * PAGE], &mut sent)?;
            }
            i = j;
        }
        // A tail of less than a page (callers send whole pages) goes as is.
        if data.len() > pages * PAGE {
            let at = addr + (pages * PAGE) as u64;
            self.queue(&Msg::PageData { id, addr: at }, &[&data[pages * PAGE..]])?;
            sent.add(data.len() - pages * PAGE, false);
        }
        Ok(sent)
    }

    /// Queues whole pages of data: as `PageData`, or, to a version-19 peer
    /// while compression is wanted ([`compress`]), in runs of at most
    /// [`LZ4_RUN`] pages, each as `PageLz4` where it compresses.
    fn queue_data(
        &mut self,
        id: u64,
        addr: u64,
        data: &[u8],
        sent: &mut PagesSent,
    ) -> Result<(), ProtoError> {
        self.queue_packed(
            data,
            |at, packed| {
                let addr = addr + at as u64;
                match packed {
                    Some(len) => Msg::PageLz4 {
                        id,
                        addr,
                        pages: (len / 4096) as u32,
                    },
                    None => Msg::PageData { id, addr },
                }
            },
            |len, block| match block {
                Some(b) => sent.add_packed(len, b),
                None => sent.add(len, false),
            },
        )
    }

    /// Queues `data`, bytes of the current image file from `offset` on: as
    /// one `ImageChunk`, or, to a version-19 peer while compression is
    /// wanted ([`compress`]), in pieces of [`LZ4_RUN`] pages' size, each as
    /// `ImageLz4` where it compresses. Returns about the bytes that went on
    /// the wire.
    pub fn queue_image_chunk(
        &mut self,
        id: u64,
        offset: u64,
        data: &[u8],
    ) -> Result<u64, ProtoError> {
        const OVERHEAD: u64 = 24;
        let mut wire = 0;
        self.queue_packed(
            data,
            |at, packed| {
                let offset = offset + at as u64;
                match packed {
                    Some(len) => Msg::ImageLz4 {
                        id,
                        offset,
                        len: len as u32,
                    },
                    None => Msg::ImageChunk { id, offset },
                }
            },
            |len, block| wire += block.unwrap_or(len) as u64 + OVERHEAD,
        )?;
        Ok(wire)
    }

    /// Queues `data` as the messages `msg(at, packed)` make for its bytes
    /// from `at` on: all of it in one plain message (`packed` `None`) to a
    /// peer older than version 19 or while compression is not wanted;
    /// otherwise in pieces of [`LZ4_RUN`] pages' size, each compressed
    /// (`packed`: the piece's length; the block attached) where it
    /// compresses and plain where it does not. `sent(len, block)` is told
    /// each message's bytes and, if compressed, its block's.
    fn queue_packed(
        &mut self,
        data: &[u8],
        msg: impl Fn(usize, Option<usize>) -> Msg,
        mut sent: impl FnMut(usize, Option<usize>),
    ) -> Result<(), ProtoError> {
        const PIECE: usize = LZ4_RUN * 4096;
        let stream = &self.stream;
        if self.peer.version < msg::PAGE_LZ4 || !self.packer.wanted(|| stream.link_sample()) {
            self.queue(&msg(0, None), &[data])?;
            sent(data.len(), None);
            return Ok(());
        }
        let mut packer = std::mem::take(&mut self.packer);
        let r = data.chunks(PIECE).enumerate().try_for_each(|(k, piece)| {
            let at = k * PIECE;
            match packer.pack(piece) {
                Some(block) => {
                    self.queue(&msg(at, Some(piece.len())), &[block])?;
                    sent(piece.len(), Some(block.len()));
                }
                None => {
                    self.queue(&msg(at, None), &[piece])?;
                    sent(piece.len(), None);
                }
            }
            Ok(())
        });
        self.packer = packer;
        r
    }

    /// Overrides this sender's compression mode (the process's
    /// [`compress::mode`] otherwise).
    pub fn set_compression(&mut self, mode: compress::Mode) {
        self.packer = Packer::new(mode);
    }

    pub fn send(&mut self, msg: &Msg) -> Result<(), ProtoError> {
        self.send_with(msg, &[])
    }

    pub fn send_with(&mut self, msg: &Msg, attachment: &[&[u8]]) -> Result<(), ProtoError> {
        self.queue(msg, attachment)?;
        self.flush()
    }

    pub fn queue(&mut self, msg: &Msg, attachment: &[&[u8]]) -> Result<(), ProtoError> {
        let enc = msg::encode(msg)?;
        let mut parts: Vec<&[u8]> = Vec::with_capacity(1 + attachment.len());
        parts.push(&enc);
        parts.extend_from_slice(attachment);
        self.write_frame(&parts)
    }

    pub fn send_frame(&mut self, parts: &[&[u8]]) -> Result<(), ProtoError> {
        self.write_frame(parts)?;
        self.flush()
    }

    fn write_frame(&mut self, parts: &[&[u8]]) -> Result<(), ProtoError> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let hdr = self.sealer.frame_header(total)?;
        for part in std::iter::once(&hdr[..]).chain(parts.iter().copied()) {
            let mut d = part;
            loop {
                if self.sealer.must_drain() {
                    self.drain()?;
                }
                if d.is_empty() {
                    break;
                }
                let n = self.sealer.push(d)?;
                d = &d[n..];
            }
        }
        Ok(())
    }

    fn drain(&mut self) -> Result<(), ProtoError> {
        let out = self.sealer.output();
        if !out.is_empty() {
            self.stream
                .write_all(out)
                .map_err(|e| io_err("sending to", &self.peer.node, e))?;
            self.sealer.clear_output();
        }
        Ok(())
    }

    /// Seals the partial record and writes everything out.
    pub fn flush(&mut self) -> Result<(), ProtoError> {
        if self.sealer.must_drain() {
            self.drain()?;
        }
        self.sealer.seal_pending()?;
        self.drain()
    }

    pub fn stream(&self) -> &S {
        &self.stream
    }
}

impl<S: Stream> Receiver<S> {
    pub fn peer(&self) -> &PeerInfo {
        &self.peer
    }

    pub fn recv(&mut self) -> Result<Msg, ProtoError> {
        let f = self.recv_frame()?;
        msg::decode(&f)
    }

    /// Receives a message and its attachment. A `PageLz4` comes out as the
    /// `PageData` it stands for, decompressed, and an `ImageLz4` as its
    /// `ImageChunk`.
    pub fn recv_with(&mut self) -> Result<Incoming, ProtoError> {
        let f = self.recv_frame()?;
        self.inflate(Incoming::parse(f)?)
    }

    /// Turns a `PageLz4` into its `PageData` and an `ImageLz4` into its
    /// `ImageChunk` (anything else is given back as it is); a block that
    /// does not give its bytes exactly is refused.
    fn inflate(&mut self, inc: Incoming) -> Result<Incoming, ProtoError> {
        let (msg, body) = match inc.msg {
            Msg::PageLz4 { id, addr, pages } => {
                let mut body = self.opener.spare(pages as usize * 4096);
                compress::unpack(inc.attachment(), pages, &mut body)
                    .map_err(|reason| self.bad_block(reason))?;
                (Msg::PageData { id, addr }, body)
            }
            Msg::ImageLz4 { id, offset, len } => {
                let mut body = self.opener.spare(len as usize);
                compress::unpack_image(inc.attachment(), len, &mut body)
                    .map_err(|reason| self.bad_block(reason))?;
                (Msg::ImageChunk { id, offset }, body)
            }
            _ => return Ok(inc),
        };
        self.opener.recycle(inc.into_body());
        Ok(Incoming { msg, body, att: 0 })
    }

    fn bad_block(&self, reason: String) -> ProtoError {
        ProtoError::BadFrame {
            peer: self.peer.node.clone(),
            reason,
        }
    }

    /// Hands back a received message the caller is done with: a later large
    /// frame is received into its memory (see [`Incoming::into_body`]).
    pub fn recycle(&mut self, body: Vec<u8>) {
        self.opener.recycle(body);
    }

    pub fn recv_frame(&mut self) -> Result<Vec<u8>, ProtoError> {
        loop {
            if let Some(f) = self.opener.next_frame()? {
                return Ok(f);
            }
            self.read_some(false)?;
        }
    }

    /// One read from the stream into the opener: nothing on an interrupted
    /// read, nor, when the caller `polled` first, on a read that would block
    /// (otherwise that is the stream's read timeout: an error).
    fn read_some(&mut self, polled: bool) -> Result<(), ProtoError> {
        let space = self.opener.read_space();
        match self.stream.read(space) {
            Ok(0) => Err(self.opener.eof_error()),
            Ok(n) => {
                self.opener.filled(n);
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(e) if polled && e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => Err(self.opener.eof_error()),
            Err(e) => Err(io_err("receiving from", &self.opener.peer, e)),
        }
    }

    pub fn stream(&self) -> &S {
        &self.stream
    }
}

impl<S: Stream + std::os::fd::AsRawFd> Receiver<S> {
    /// Like [`Receiver::recv_with`], but gives up after about `wait` without
    /// a whole message: `Ok(None)`. Whatever part of a message arrived is
    /// kept for the next call, so the stream stays in step.
    pub fn recv_with_within(&mut self, wait: Duration) -> Result<Option<Incoming>, ProtoError> {
        if let Some(f) = self.opener.next_frame()? {
            return self.inflate(Incoming::parse(f)?).map(Some);
        }
        let mut pfd = libc::pollfd {
            fd: self.stream.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = wait.as_millis().min(i32::MAX as u128) as libc::c_int;
        // SAFETY: one valid pollfd, for the duration of the call.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(None);
            }
            return Err(io_err("waiting for", &self.opener.peer, e));
        }
        if r == 0 {
            return Ok(None);
        }
        // Readable (or closed, or failed: the read says which).
        self.read_some(true)?;
        match self.opener.next_frame()? {
            Some(f) => self.inflate(Incoming::parse(f)?).map(Some),
            None => Ok(None),
        }
    }
}
