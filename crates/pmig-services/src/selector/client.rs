//! The client API: what `pmig hosts request`, `pmig run --idle` and pmake call.
//!
//! ```no_run
//! use pmig_services::selector::{Class, Client};
//! # fn main() -> Result<(), pmig_services::selector::SelectorError> {
//! let mut c = Client::local()?;                  // through this node's daemon
//! let hosts = c.request(Class::Short, 2)?;       // longest-idle first, never this node
//! for h in &hosts { println!("{} {}", h.name, h.addr); }
//! for r in c.take_revoked() { eprintln!("lost {}: {}", r.host, r.reason); }
//! c.release(&[])?;                               // or just drop the client
//! # Ok(()) }
//! ```
//!
//! Hosts are held as long as the client lives: dropping it (or the process
//! exiting) closes the connection and the selector takes them back.

use super::node::{recv, send};
use super::wire::{Class, HostRow, RevokeReason, Role, SelMsg, VERSION};
use super::SelectorError;
use crate::Peer;
use pmig_proto::blocking::{self, Channel};
use pmig_proto::{ClusterKey, Config};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::time::Duration;

/// The daemon's control socket (abstract, per network namespace).
pub const CONTROL_NAME: &str = "pmig-control";

/// A host taken back from this client.
#[derive(Debug, Clone, PartialEq)]
pub struct Revoked {
    pub host: String,
    pub class: Class,
    pub reason: RevokeReason,
}

enum Conn {
    Local {
        r: BufReader<UnixStream>,
        w: UnixStream,
    },
    Direct(Box<Channel<TcpStream>>),
}

/// One client session with the selector.
pub struct Client {
    conn: Conn,
    next: u64,
    revoked: VecDeque<Revoked>,
    selector: String,
}

impl Client {
    /// Through this node's daemon (control socket `@pmig-control`). The
    /// daemon keeps one selector connection for the session and follows
    /// failovers, claiming the held hosts again.
    pub fn local() -> Result<Client, SelectorError> {
        Client::local_named(CONTROL_NAME)
    }

    pub fn local_named(name: &str) -> Result<Client, SelectorError> {
        let addr = SocketAddr::from_abstract_name(name.as_bytes())
            .map_err(|e| SelectorError::Invalid(format!("bad control socket name: {e}")))?;
        let s = UnixStream::connect_addr(&addr).map_err(|source| SelectorError::Io {
            what: format!(
                "cannot reach the pmig daemon of this node (@{name}); is `pmig daemon` running here?"
            ),
            source,
        })?;
        let io = |what: &'static str| {
            move |source| SelectorError::Io {
                what: what.into(),
                source,
            }
        };
        let mut w = s.try_clone().map_err(io("duplicate the control socket"))?;
        w.write_all(b"\"hosts\"\n")
            .map_err(io("send the request to the daemon"))?;
        let mut r = BufReader::new(s);
        let mut line = String::new();
        r.read_line(&mut line)
            .map_err(io("read the daemon's answer"))?;
        let v: serde_json::Value = serde_json::from_str(line.trim())
            .map_err(|_| SelectorError::Malformed(format!("daemon answered {:?}", line.trim())))?;
        // A daemon error event (e.g. an old daemon): {"event":"error","message":…}
        if let Some(m) = v.get("message").and_then(|m| m.as_str()) {
            return Err(SelectorError::Remote(m.into()));
        }
        let selector = match serde_json::from_value::<SelMsg>(v) {
            Ok(SelMsg::Welcome { selector }) => selector,
            Ok(SelMsg::Failed { text, .. }) => return Err(SelectorError::NoSelector(text)),
            other => {
                return Err(SelectorError::Malformed(format!(
                    "daemon answered {other:?}"
                )))
            }
        };
        Ok(Client {
            conn: Conn::Local { r, w },
            next: 1,
            revoked: VecDeque::new(),
            selector,
        })
    }

    /// Straight to the selector at `addr` over the authenticated channel
    /// (needs the cluster key; follows one redirect). `node` is this side's
    /// name in `Hello`, `label` names the client in the table.
    pub fn direct(
        addr: &str,
        key: &ClusterKey,
        node: &str,
        label: &str,
    ) -> Result<Client, SelectorError> {
        let mut addr = addr.to_string();
        for _ in 0..2 {
            let mut ch = blocking::connect(addr.as_str(), key, &Config::new(node))?;
            let (tx, rx) = ch.halves();
            send(
                tx,
                &SelMsg::Hello {
                    version: VERSION,
                    role: Role::Client {
                        label: label.into(),
                    },
                },
            )?;
            match recv(rx)? {
                SelMsg::Welcome { selector } => {
                    let _ = ch.stream().set_nodelay(true);
                    return Ok(Client {
                        conn: Conn::Direct(Box::new(ch)),
                        next: 1,
                        revoked: VecDeque::new(),
                        selector,
                    });
                }
                SelMsg::Redirect { to: Some(p) } => addr = p.addr,
                other => {
                    return Err(SelectorError::NoSelector(format!(
                        "{addr} answered {other:?}"
                    )))
                }
            }
        }
        Err(SelectorError::NoSelector("too many redirects".into()))
    }

    /// The selector's node name when the session began.
    pub fn selector(&self) -> &str {
        &self.selector
    }

    fn send(&mut self, m: &SelMsg) -> Result<(), SelectorError> {
        match &mut self.conn {
            Conn::Local { w, .. } => {
                let mut line =
                    serde_json::to_vec(m).map_err(|e| SelectorError::Invalid(e.to_string()))?;
                line.push(b'\n');
                w.write_all(&line).map_err(|source| SelectorError::Io {
                    what: "send to the daemon".into(),
                    source,
                })
            }
            Conn::Direct(ch) => Ok(send(ch.halves().0, m)?),
        }
    }

    /// The next message; `Ok(None)` when `timeout` passes first.
    fn recv(&mut self, timeout: Option<Duration>) -> Result<Option<SelMsg>, SelectorError> {
        let timed_out = |e: &std::io::Error| {
            matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            )
        };
        match &mut self.conn {
            Conn::Local { r, .. } => {
                let _ = r.get_ref().set_read_timeout(timeout);
                let mut line = String::new();
                match r.read_line(&mut line) {
                    Ok(0) => Err(SelectorError::NoSelector(
                        "the daemon closed the session".into(),
                    )),
                    Ok(_) => serde_json::from_str(line.trim())
                        .map(Some)
                        .map_err(|e| SelectorError::Malformed(format!("{e}: {:?}", line.trim()))),
                    Err(e) if timed_out(&e) => Ok(None),
                    Err(source) => Err(SelectorError::Io {
                        what: "read from the daemon".into(),
                        source,
                    }),
                }
            }
            Conn::Direct(ch) => {
                let _ = ch.stream().set_read_timeout(timeout);
                match recv(ch.halves().1) {
                    Ok(m) => Ok(Some(m)),
                    Err(SelectorError::Proto(pmig_proto::ProtoError::Io { source, .. }))
                        if timed_out(&source) =>
                    {
                        Ok(None)
                    }
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Reads until the answer to request `id`, keeping revocations aside.
    fn answer(&mut self, id: u64) -> Result<SelMsg, SelectorError> {
        loop {
            let Some(m) = self.recv(None)? else { continue };
            match m {
                SelMsg::Revoked {
                    host,
                    class,
                    reason,
                } => self.revoked.push_back(Revoked {
                    host,
                    class,
                    reason,
                }),
                SelMsg::Failed { id: 0, text } => return Err(SelectorError::Remote(text)),
                SelMsg::Granted { id: i, .. }
                | SelMsg::Denied { id: i, .. }
                | SelMsg::Released { id: i, .. }
                | SelMsg::Table { id: i, .. }
                | SelMsg::Failed { id: i, .. }
                    if i != id => {}
                m => return Ok(m),
            }
        }
    }

    fn id(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// Up to `count` idle hosts of `class`, longest-idle first, never this
    /// node. Fewer than `count` if fewer are free; `Denied` if none.
    pub fn request(&mut self, class: Class, count: u32) -> Result<Vec<Peer>, SelectorError> {
        self.request_excluding(class, count, &["@self".into()])
    }

    /// As [`Client::request`], excluding the named nodes (`@self`: the local
    /// node, only through [`Client::local`]).
    pub fn request_excluding(
        &mut self,
        class: Class,
        count: u32,
        exclude: &[String],
    ) -> Result<Vec<Peer>, SelectorError> {
        let id = self.id();
        self.send(&SelMsg::Request {
            id,
            class,
            count,
            exclude: exclude.to_vec(),
        })?;
        match self.answer(id)? {
            SelMsg::Granted { hosts, .. } => Ok(hosts),
            SelMsg::Denied { reason, .. } => Err(SelectorError::Denied(reason)),
            m => Err(SelectorError::Malformed(format!("answer {m:?}"))),
        }
    }

    /// Returns `hosts` (empty: every host held); how many allocations ended.
    pub fn release(&mut self, hosts: &[String]) -> Result<u32, SelectorError> {
        let id = self.id();
        self.send(&SelMsg::Release {
            id,
            hosts: hosts.to_vec(),
        })?;
        match self.answer(id)? {
            SelMsg::Released { count, .. } => Ok(count),
            m => Err(SelectorError::Malformed(format!("answer {m:?}"))),
        }
    }

    /// The selector's table.
    pub fn status(&mut self) -> Result<Vec<HostRow>, SelectorError> {
        let id = self.id();
        self.send(&SelMsg::Status { id })?;
        match self.answer(id)? {
            SelMsg::Table { rows, .. } => Ok(rows),
            m => Err(SelectorError::Malformed(format!("answer {m:?}"))),
        }
    }

    /// Hosts taken back since the last call.
    pub fn take_revoked(&mut self) -> Vec<Revoked> {
        self.revoked.drain(..).collect()
    }

    /// Waits up to `timeout` for a host to be taken back.
    pub fn wait_revoked(&mut self, timeout: Duration) -> Result<Option<Revoked>, SelectorError> {
        if let Some(r) = self.revoked.pop_front() {
            return Ok(Some(r));
        }
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            match self.recv(Some(left))? {
                Some(SelMsg::Revoked {
                    host,
                    class,
                    reason,
                }) => {
                    return Ok(Some(Revoked {
                        host,
                        class,
                        reason,
                    }))
                }
                Some(SelMsg::Failed { text, .. }) => return Err(SelectorError::Remote(text)),
                Some(_) => {}
                None => return Ok(None),
            }
        }
    }
}
