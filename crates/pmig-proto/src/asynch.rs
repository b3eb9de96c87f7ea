//! Async (tokio) API: same wire format and behaviour as [`crate::blocking`].
//!
//! Encryption runs on the calling task; a 1 MiB batch takes about a millisecond, so
//! bulk senders on a busy runtime may prefer `spawn_blocking` with the blocking API.

use std::io;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};

use crate::blocking::Incoming;
use crate::error::ProtoError;
use crate::frame::{Opener, Sealer, RECORD_HEADER};
use crate::key::ClusterKey;
use crate::msg::{self, Msg};
use crate::session::{self, Config, HelloOutcome, PeerInfo, MAX_HANDSHAKE_MSG};

fn io_err(what: &str, peer: &str, e: io::Error) -> ProtoError {
    ProtoError::io(format!("{what} {peer}"), e)
}

fn timed_out(peer: &str) -> ProtoError {
    ProtoError::Handshake {
        peer: peer.to_string(),
        reason: "timed out".into(),
    }
}

/// Connects over TCP, authenticates and exchanges `Hello`, with the cipher
/// [`crate::blocking::connect`] describes.
pub async fn connect(
    addr: impl ToSocketAddrs,
    key: &ClusterKey,
    cfg: &Config,
) -> Result<Channel, ProtoError> {
    let s = TcpStream::connect(addr)
        .await
        .map_err(|e| ProtoError::io("connecting to peer", e))?;
    let a = s
        .peer_addr()
        .map_err(|e| ProtoError::io("connecting to peer", e))?;
    let r = Channel::client(s, key, &session::config_for(&a, cfg)).await;
    session::learn_peer(&a, r.as_ref().ok().map(|c| c.peer().hello.features));
    r
}

/// Accepts one connection and runs the server side; a refusal is logged and returned.
pub async fn accept(
    listener: &TcpListener,
    key: &ClusterKey,
    cfg: &Config,
) -> Result<Channel, ProtoError> {
    let (s, _) = listener
        .accept()
        .await
        .map_err(|e| ProtoError::io("accepting a connection", e))?;
    Channel::server(s, key, cfg).await
}

/// An authenticated connection over a tokio TCP stream.
pub struct Channel<R = OwnedReadHalf, W = OwnedWriteHalf> {
    tx: Sender<W>,
    rx: Receiver<R>,
}

pub struct Sender<W> {
    w: W,
    sealer: Sealer,
    peer: Arc<PeerInfo>,
}

pub struct Receiver<R> {
    r: R,
    opener: Opener,
    peer: Arc<PeerInfo>,
}

async fn write_hs<W: AsyncWrite + Unpin>(w: &mut W, m: &[u8]) -> io::Result<()> {
    let mut v = Vec::with_capacity(RECORD_HEADER + m.len());
    v.extend_from_slice(&(m.len() as u16).to_be_bytes());
    v.extend_from_slice(m);
    w.write_all(&v).await?;
    w.flush().await
}

async fn read_hs<R: AsyncRead + Unpin>(
    r: &mut R,
    peer: &str,
    from_initiator: bool,
) -> Result<Option<Vec<u8>>, ProtoError> {
    let mut len = [0u8; RECORD_HEADER];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset
            ) =>
        {
            return Ok(None)
        }
        Err(e) => return Err(io_err("handshake with", peer, e)),
    }
    let n = u16::from_be_bytes(len) as usize;
    session::check_handshake_len(n, peer, from_initiator)?;
    let mut m = vec![0u8; n];
    r.read_exact(&mut m)
        .await
        .map_err(|e| io_err("handshake with", peer, e))?;
    Ok(Some(m))
}

impl Channel {
    /// Initiator side on an established TCP stream.
    pub async fn client(s: TcpStream, key: &ClusterKey, cfg: &Config) -> Result<Self, ProtoError> {
        let addr = s.peer_addr().map(|a| a.to_string()).unwrap_or_default();
        let _ = s.set_nodelay(true);
        let (r, w) = s.into_split();
        Self::client_on(r, w, addr, key, cfg).await
    }

    /// Responder side on an accepted TCP stream; a refusal is logged as one `warn` line.
    pub async fn server(s: TcpStream, key: &ClusterKey, cfg: &Config) -> Result<Self, ProtoError> {
        let addr = s.peer_addr().map(|a| a.to_string()).unwrap_or_default();
        let _ = s.set_nodelay(true);
        let (r, w) = s.into_split();
        let res = Self::server_on(r, w, addr.clone(), key, cfg).await;
        if let Err(e) = &res {
            tracing::warn!("refused connection from {addr}: {e}");
        }
        res
    }
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Channel<R, W> {
    /// Initiator side on any pair of stream halves; `addr` labels the peer.
    pub async fn client_on(
        r: R,
        w: W,
        addr: String,
        key: &ClusterKey,
        cfg: &Config,
    ) -> Result<Self, ProtoError> {
        let fut = Self::client_inner(r, w, addr.clone(), key, cfg);
        match cfg.handshake_timeout {
            Some(t) => tokio::time::timeout(t, fut)
                .await
                .map_err(|_| timed_out(&addr))?,
            None => fut.await,
        }
    }

    /// Responder side on any pair of stream halves; `addr` labels the peer.
    pub async fn server_on(
        r: R,
        w: W,
        addr: String,
        key: &ClusterKey,
        cfg: &Config,
    ) -> Result<Self, ProtoError> {
        let fut = Self::server_inner(r, w, addr.clone(), key, cfg);
        match cfg.handshake_timeout {
            Some(t) => tokio::time::timeout(t, fut)
                .await
                .map_err(|_| timed_out(&addr))?,
            None => fut.await,
        }
    }

    async fn client_inner(
        mut r: R,
        mut w: W,
        addr: String,
        key: &ClusterKey,
        cfg: &Config,
    ) -> Result<Self, ProtoError> {
        let cipher = cfg.cipher;
        let mut hs = session::handshake_state(key, true, cipher)?;
        let mut buf = [0u8; MAX_HANDSHAKE_MSG];
        let n = hs
            .write_message(&[], &mut buf)
            .map_err(|e| ProtoError::Noise(e.to_string()))?;
        write_hs(&mut w, &buf[..n])
            .await
            .map_err(|_| session::closed_during_handshake(&addr))?;
        let reply = read_hs(&mut r, &addr, false)
            .await?
            .ok_or_else(|| session::closed_during_handshake(&addr))?;
        hs.read_message(&reply, &mut buf)
            .map_err(|_| session::reply_auth_failed(&addr))?;
        let ts = session::into_transport(hs)?;
        Self::finish(r, w, ts, cfg, addr, cipher).await
    }

    async fn server_inner(
        mut r: R,
        mut w: W,
        addr: String,
        key: &ClusterKey,
        cfg: &Config,
    ) -> Result<Self, ProtoError> {
        let first = read_hs(&mut r, &addr, true)
            .await?
            .ok_or_else(|| ProtoError::Handshake {
                peer: addr.clone(),
                reason: "connection closed before the handshake".into(),
            })?;
        let Some((mut hs, cipher)) = session::respond(key, &first)? else {
            let _ = w.shutdown().await;
            return Err(ProtoError::AuthFailed { peer: addr });
        };
        let mut buf = [0u8; MAX_HANDSHAKE_MSG];
        let n = hs
            .write_message(&[], &mut buf)
            .map_err(|e| ProtoError::Noise(e.to_string()))?;
        write_hs(&mut w, &buf[..n])
            .await
            .map_err(|e| io_err("handshake with", &addr, e))?;
        let ts = session::into_transport(hs)?;
        Self::finish(r, w, ts, cfg, addr, cipher).await
    }

    async fn finish(
        r: R,
        w: W,
        ts: Arc<snow::StatelessTransportState>,
        cfg: &Config,
        addr: String,
        cipher: session::Cipher,
    ) -> Result<Self, ProtoError> {
        let provisional = Arc::new(PeerInfo {
            node: addr.clone(),
            addr: addr.clone(),
            version: 0,
            features: 0,
            hello: cfg.hello(),
            cipher,
        });
        let mut tx = Sender {
            w,
            sealer: Sealer::new(ts.clone(), cfg.max_message_size),
            peer: provisional.clone(),
        };
        let mut rx = Receiver {
            r,
            opener: Opener::new(ts, cfg.max_message_size, addr.clone()),
            peer: provisional,
        };
        tx.send(&Msg::Hello(cfg.hello())).await?;
        let frame = rx.recv_frame().await?;
        match session::check_hello(cfg, &addr, &frame, cipher) {
            HelloOutcome::Ok(info) => {
                let info = Arc::new(info);
                rx.opener.peer = info.node.clone();
                tx.peer = info.clone();
                rx.peer = info;
                Ok(Channel { tx, rx })
            }
            HelloOutcome::Refuse(msg, err) => {
                let _ = tx.send(&msg).await;
                let _ = tx.w.shutdown().await;
                Err(err)
            }
            HelloOutcome::Fail(err) => {
                let _ = tx.w.shutdown().await;
                Err(err)
            }
        }
    }

    pub fn peer(&self) -> &PeerInfo {
        &self.tx.peer
    }

    pub async fn send(&mut self, msg: &Msg) -> Result<(), ProtoError> {
        self.tx.send(msg).await
    }

    pub async fn send_with(&mut self, msg: &Msg, att: &[&[u8]]) -> Result<(), ProtoError> {
        self.tx.send_with(msg, att).await
    }

    pub async fn queue(&mut self, msg: &Msg, att: &[&[u8]]) -> Result<(), ProtoError> {
        self.tx.queue(msg, att).await
    }

    pub async fn flush(&mut self) -> Result<(), ProtoError> {
        self.tx.flush().await
    }

    pub async fn send_frame(&mut self, parts: &[&[u8]]) -> Result<(), ProtoError> {
        self.tx.send_frame(parts).await
    }

    pub async fn recv(&mut self) -> Result<Msg, ProtoError> {
        self.rx.recv().await
    }

    pub async fn recv_with(&mut self) -> Result<Incoming, ProtoError> {
        self.rx.recv_with().await
    }

    pub async fn recv_frame(&mut self) -> Result<Vec<u8>, ProtoError> {
        self.rx.recv_frame().await
    }

    pub fn split(self) -> (Sender<W>, Receiver<R>) {
        (self.tx, self.rx)
    }
}

impl<W: AsyncWrite + Unpin> Sender<W> {
    pub fn peer(&self) -> &PeerInfo {
        &self.peer
    }

    pub async fn send(&mut self, msg: &Msg) -> Result<(), ProtoError> {
        self.send_with(msg, &[]).await
    }

    pub async fn send_with(&mut self, msg: &Msg, att: &[&[u8]]) -> Result<(), ProtoError> {
        self.queue(msg, att).await?;
        self.flush().await
    }

    pub async fn queue(&mut self, msg: &Msg, att: &[&[u8]]) -> Result<(), ProtoError> {
        let enc = msg::encode(msg)?;
        let mut parts: Vec<&[u8]> = Vec::with_capacity(1 + att.len());
        parts.push(&enc);
        parts.extend_from_slice(att);
        self.write_frame(&parts).await
    }

    pub async fn send_frame(&mut self, parts: &[&[u8]]) -> Result<(), ProtoError> {
        self.write_frame(parts).await?;
        self.flush().await
    }

    async fn write_frame(&mut self, parts: &[&[u8]]) -> Result<(), ProtoError> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let hdr = self.sealer.frame_header(total)?;
        for part in std::iter::once(&hdr[..]).chain(parts.iter().copied()) {
            let mut d = part;
            loop {
                if self.sealer.must_drain() {
                    self.drain().await?;
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

    async fn drain(&mut self) -> Result<(), ProtoError> {
        let out = self.sealer.output();
        if !out.is_empty() {
            self.w
                .write_all(out)
                .await
                .map_err(|e| io_err("sending to", &self.peer.node, e))?;
            self.sealer.clear_output();
        }
        Ok(())
    }

    pub async fn flush(&mut self) -> Result<(), ProtoError> {
        if self.sealer.must_drain() {
            self.drain().await?;
        }
        self.sealer.seal_pending()?;
        self.drain().await?;
        self.w
            .flush()
            .await
            .map_err(|e| io_err("sending to", &self.peer.node, e))
    }

    /// Flushes and shuts down the write side.
    pub async fn close(mut self) -> Result<(), ProtoError> {
        self.flush().await?;
        let _ = self.w.shutdown().await;
        Ok(())
    }
}

impl<R: AsyncRead + Unpin> Receiver<R> {
    pub fn peer(&self) -> &PeerInfo {
        &self.peer
    }

    pub async fn recv(&mut self) -> Result<Msg, ProtoError> {
        let f = self.recv_frame().await?;
        msg::decode(&f)
    }

    pub async fn recv_with(&mut self) -> Result<Incoming, ProtoError> {
        let f = self.recv_frame().await?;
        Incoming::parse(f)
    }

    pub async fn recv_frame(&mut self) -> Result<Vec<u8>, ProtoError> {
        loop {
            if let Some(f) = self.opener.next_frame()? {
                return Ok(f);
            }
            let space = self.opener.read_space();
            match self.r.read(space).await {
                Ok(0) => return Err(self.opener.eof_error()),
                Ok(n) => self.opener.filled(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                    return Err(self.opener.eof_error())
                }
                Err(e) => return Err(io_err("receiving from", &self.opener.peer, e)),
            }
        }
    }
}
