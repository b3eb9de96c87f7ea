//! The selector inside each daemon: measuring and reporting, serving the role
//! when this daemon is the first reachable peer, following otherwise, and the
//! control-socket sessions of local clients.
//!
//! Role rule (docs/protocol.md §8.1): the selector is the first peer, in
//! `--peer` order, that answers an authenticated connection. A daemon that
//! reaches none before itself serves; a serving daemon probes the peers before
//! it every interval and hands the role over (redirecting every connection)
//! as soon as one answers.

use super::measure::{Sampler, Settings};
use super::table::{ClientId, Revocation, Table};
use super::wire::{Class, HostRow, Order, Role, SelMsg, MAX_COUNT, VERSION};
use super::SelectorError;
use crate::Peer;
use pmig_proto::blocking::{self, Channel, Receiver, Sender, Stream};
use pmig_proto::{code, service, ClusterKey, Config, Msg, ProtoError};
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

/// Sends one selector message.
pub fn send<S: Stream>(tx: &mut Sender<S>, m: &SelMsg) -> Result<(), ProtoError> {
    tx.send_with(
        &Msg::Service {
            service: service::SELECTOR,
        },
        &[&m.encode()],
    )
}

/// Receives one selector message.
pub fn recv<S: Stream>(rx: &mut Receiver<S>) -> Result<SelMsg, SelectorError> {
    let i = rx.recv_with()?;
    match &i.msg {
        Msg::Service {
            service: service::SELECTOR,
        } => SelMsg::decode(i.attachment()).map_err(SelectorError::Malformed),
        Msg::Error { text, .. } => Err(SelectorError::Remote(text.clone())),
        other => Err(SelectorError::Malformed(format!(
            "{} instead of a selector message",
            other.kind()
        ))),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Something that happened on this node that should make foreign work leave.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeEvent {
    /// The owner of `node` became active (`pmig owner active`, terminal input).
    OwnerActive { node: String },
    /// `pmig evict` was asked for `node` by `by`.
    Evict { node: String, by: String },
    /// (At the selector) a host was taken from a client for fairness: that
    /// client's work on `host` should leave it.
    Reclaimed {
        host: String,
        class: Class,
        from: String,
        to: String,
    },
}

/// Acts on [`NodeEvent`]s: the migration code plugs in here to evict foreign
/// processes. The default, [`LogEvictions`], logs and keeps a list.
pub trait EvictionHandler: Send + Sync + std::fmt::Debug {
    fn handle(&self, ev: &NodeEvent);
}

/// The default handler: one log line per event, and a list of pending events
/// ([`LogEvictions::take_pending`]) for whoever will act on them.
#[derive(Debug, Default)]
pub struct LogEvictions {
    pending: Mutex<Vec<NodeEvent>>,
}

impl LogEvictions {
    pub fn take_pending(&self) -> Vec<NodeEvent> {
        std::mem::take(&mut *lock(&self.pending))
    }
}

impl EvictionHandler for LogEvictions {
    fn handle(&self, ev: &NodeEvent) {
        match ev {
            NodeEvent::OwnerActive { node } => tracing::info!(
                "eviction: owner active on {node}: foreign processes must leave (no eviction handler installed; recorded as pending)"
            ),
            NodeEvent::Evict { node, by } => tracing::info!(
                "eviction: asked by {by} to evict the foreign processes of {node} (no eviction handler installed; recorded as pending)"
            ),
            NodeEvent::Reclaimed {
                host,
                class,
                from,
                to,
            } => tracing::info!(
                "eviction: host {host} ({class}) reclaimed from {from} for {to}: {from}'s work there must leave"
            ),
        }
        lock(&self.pending).push(ev.clone());
    }
}

/// A handler that passes every event on to a channel, for code that acts on
/// them in its own thread.
#[derive(Debug)]
pub struct ChannelEvictions(Mutex<std::sync::mpsc::Sender<NodeEvent>>);

impl ChannelEvictions {
    pub fn new() -> (ChannelEvictions, std::sync::mpsc::Receiver<NodeEvent>) {
        let (tx, rx) = std::sync::mpsc::channel();
        (ChannelEvictions(Mutex::new(tx)), rx)
    }
}

impl EvictionHandler for ChannelEvictions {
    fn handle(&self, ev: &NodeEvent) {
        tracing::info!("eviction: {ev:?} passed on to the eviction handler");
        let _ = lock(&self.0).send(ev.clone());
    }
}

#[derive(Debug, Clone, PartialEq)]
enum RoleState {
    Serving,
    Following(Option<Peer>),
}

type SharedSender = Arc<Mutex<Sender<TcpStream>>>;

/// One per daemon.
pub struct Selector {
    me: Peer,
    peers: Vec<Peer>,
    key: ClusterKey,
    sampler: Mutex<Sampler>,
    interval: Duration,
    stale: Duration,
    role: Mutex<RoleState>,
    table: Mutex<Table>,
    conns: Mutex<HashMap<ClientId, SharedSender>>,
    next_id: AtomicU64,
    handler: RwLock<Arc<dyn EvictionHandler>>,
    wake: (Mutex<bool>, Condvar),
    started: Instant,
}

impl Selector {
    /// `me` must be among `peers` (it is appended if not).
    pub fn new(me: Peer, mut peers: Vec<Peer>, key: ClusterKey, s: Settings) -> Arc<Selector> {
        if !peers.iter().any(|p| p.name == me.name) {
            peers.push(me.clone());
        }
        let interval = s.interval.max(Duration::from_millis(50));
        let stale = (interval * 3).max(Duration::from_secs(2));
        let first = peers.first().is_some_and(|p| p.name == me.name);
        Arc::new(Selector {
            me,
            peers,
            key,
            sampler: Mutex::new(Sampler::new(s)),
            interval,
            stale,
            role: Mutex::new(if first {
                RoleState::Serving
            } else {
                RoleState::Following(None)
            }),
            table: Mutex::new(Table::new(stale)),
            conns: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            handler: RwLock::new(Arc::new(LogEvictions::default())),
            wake: (Mutex::new(false), Condvar::new()),
            started: Instant::now(),
        })
    }

    /// A selector that always serves and never reports (benchmarks): reports
    /// are injected with [`Selector::inject`].
    pub fn standalone(key: ClusterKey) -> Arc<Selector> {
        let me = Peer {
            name: "bench".into(),
            addr: "127.0.0.1:0".into(),
        };
        let s = Selector::new(me.clone(), vec![me], key, Settings::default());
        *lock(&s.table) = Table::new(Duration::from_secs(3600 * 24));
        s
    }

    pub fn inject(&self, r: super::wire::Report) {
        lock(&self.table).report(r, Instant::now());
    }

    /// Replaces the eviction handler.
    pub fn set_eviction_handler(&self, h: Arc<dyn EvictionHandler>) {
        *self.handler.write().unwrap_or_else(|p| p.into_inner()) = h;
    }

    fn handler(&self) -> Arc<dyn EvictionHandler> {
        self.handler
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn serving(&self) -> bool {
        *lock(&self.role) == RoleState::Serving
    }

    /// The selector as this daemon knows it.
    pub fn current(&self) -> Option<Peer> {
        match &*lock(&self.role) {
            RoleState::Serving => Some(self.me.clone()),
            RoleState::Following(p) => p.clone(),
        }
    }

    fn proto_config(&self) -> Config {
        let mut c = Config::new(self.me.name.clone());
        c.handshake_timeout = Some(Duration::from_secs(2));
        c
    }

    /// Starts the measuring and reporting thread.
    pub fn start(self: &Arc<Self>) -> std::io::Result<()> {
        let me = self.clone();
        std::thread::Builder::new()
            .name("selector".into())
            .spawn(move || me.run())
            .map(|_| ())
    }

    // ---- the selector side ------------------------------------------------

    /// Serves one connection whose first message was `Service { SELECTOR }`
    /// with attachment `body`.
    pub fn serve(&self, mut ch: Channel<TcpStream>, body: &[u8]) {
        let peer = ch.peer().node.clone();
        let refuse = |ch: &mut Channel<TcpStream>, text: String| {
            tracing::warn!("selector connection from {peer} refused: {text}");
            let _ = ch.send(&Msg::Error {
                code: code::REFUSED,
                text,
            });
        };
        let role = match SelMsg::decode(body) {
            Ok(SelMsg::Hello { version, role }) if version == VERSION => role,
            Ok(SelMsg::Hello { version, .. }) => {
                return refuse(
                    &mut ch,
                    format!(
                        "host selection message version {version} is not offered (this daemon speaks {VERSION})"
                    ),
                )
            }
            Ok(_) => return refuse(&mut ch, "first selector message is not Hello".into()),
            Err(e) => return refuse(&mut ch, e),
        };
        let (mut tx, mut rx) = ch.split();
        let label = match role {
            Role::Probe => {
                let _ = send(&mut tx, &self.welcome_or_redirect());
                return;
            }
            Role::Admin { order } => {
                let text = self.order(order, &peer);
                let _ = send(&mut tx, &SelMsg::Done { text });
                return;
            }
            Role::Reporter { node } => {
                if node != peer {
                    let _ = send(
                        &mut tx,
                        &SelMsg::Failed {
                            id: 0,
                            text: format!("{peer} may not report for {node}"),
                        },
                    );
                    return;
                }
                None
            }
            Role::Client { label } => Some(label),
        };
        let hello = self.welcome_or_redirect();
        let welcomed = matches!(hello, SelMsg::Welcome { .. });
        if send(&mut tx, &hello).is_err() || !welcomed {
            return;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let _ = tx.stream().set_write_timeout(Some(Duration::from_secs(10)));
        keepalive(rx.stream());
        let tx = Arc::new(Mutex::new(tx));
        lock(&self.conns).insert(id, tx.clone());
        if let Some(l) = &label {
            lock(&self.table).add_client(id, &format!("{l}@{peer}"));
        }
        loop {
            let m = match recv(&mut rx) {
                Ok(m) => m,
                Err(SelectorError::Proto(e)) if e.is_disconnect() => break,
                Err(e) => {
                    tracing::debug!("selector connection from {peer}: {e}");
                    break;
                }
            };
            let Some(reply) = self.handle(id, label.is_some(), m) else {
                break;
            };
            if send(&mut lock(&tx), &reply).is_err() {
                break;
            }
        }
        lock(&self.conns).remove(&id);
        if label.is_some() {
            let n = lock(&self.table).remove_client(id);
            if n > 0 {
                tracing::info!(
                    "selector: client {} from {peer} gone; {n} allocations returned",
                    label.as_deref().unwrap_or("?")
                );
            }
        }
    }

    fn welcome_or_redirect(&self) -> SelMsg {
        match &*lock(&self.role) {
            RoleState::Serving => SelMsg::Welcome {
                selector: self.me.name.clone(),
            },
            RoleState::Following(p) => SelMsg::Redirect { to: p.clone() },
        }
    }

    /// One message of a welcomed connection; `None` closes it.
    fn handle(&self, id: ClientId, client: bool, m: SelMsg) -> Option<SelMsg> {
        let now = Instant::now();
        if !self.serving() {
            return Some(SelMsg::Redirect { to: self.current() });
        }
        let reply = match (client, m) {
            (false, SelMsg::Report(r)) => {
                let revs = lock(&self.table).report(r, now);
                self.notify(revs);
                SelMsg::ReportAck
            }
            (
                true,
                SelMsg::Request {
                    id: rid,
                    class,
                    count,
                    exclude,
                },
            ) => {
                if count > MAX_COUNT {
                    return Some(SelMsg::Denied {
                        id: rid,
                        reason: format!("at most {MAX_COUNT} hosts per request"),
                    });
                }
                let r = lock(&self.table).request(id, class, count, &exclude, now);
                match r {
                    Ok(a) => {
                        self.notify(a.revoked);
                        SelMsg::Granted {
                            id: rid,
                            hosts: a.hosts,
                        }
                    }
                    Err(reason) => SelMsg::Denied { id: rid, reason },
                }
            }
            (true, SelMsg::Release { id: rid, hosts }) => SelMsg::Released {
                id: rid,
                count: lock(&self.table).release(id, &hosts),
            },
            (
                true,
                SelMsg::Claim {
                    id: rid,
                    class,
                    hosts,
                },
            ) => SelMsg::Granted {
                id: rid,
                hosts: lock(&self.table).claim(id, class, &hosts, now),
            },
            (_, SelMsg::Status { id: rid }) => SelMsg::Table {
                id: rid,
                rows: lock(&self.table).rows(now),
            },
            (_, other) => {
                tracing::warn!("selector: unexpected message {other:?}; closing");
                return None;
            }
        };
        Some(reply)
    }

    /// Tells the holders of revoked hosts, and the eviction handler.
    fn notify(&self, revs: Vec<Revocation>) {
        if revs.is_empty() {
            return;
        }
        let handler = self.handler();
        for r in revs {
            let from = lock(&self.table).client_label(r.client);
            tracing::info!(
                "selector: host {} ({}) taken back from {from}: {}",
                r.host,
                r.class,
                r.reason
            );
            if let super::wire::RevokeReason::Fairness { to } = &r.reason {
                handler.handle(&NodeEvent::Reclaimed {
                    host: r.host.clone(),
                    class: r.class,
                    from: from.clone(),
                    to: to.clone(),
                });
            }
            let tx = lock(&self.conns).get(&r.client).cloned();
            if let Some(tx) = tx {
                let _ = send(
                    &mut lock(&tx),
                    &SelMsg::Revoked {
                        host: r.host,
                        class: r.class,
                        reason: r.reason,
                    },
                );
            }
        }
    }

    fn become_serving(&self, why: &str) {
        let mut role = lock(&self.role);
        if *role != RoleState::Serving {
            *role = RoleState::Serving;
            *lock(&self.table) = Table::new(self.stale);
            tracing::info!("selector: {} is now the selector ({why})", self.me.name);
        }
    }

    fn step_down(&self, to: Peer) {
        *lock(&self.role) = RoleState::Following(Some(to.clone()));
        tracing::info!(
            "selector: {} hands the selector role over to {} (earlier in --peer order and reachable)",
            self.me.name,
            to.name
        );
        let conns: Vec<SharedSender> = lock(&self.conns).drain().map(|(_, t)| t).collect();
        for c in conns {
            let mut c = lock(&c);
            let _ = send(
                &mut c,
                &SelMsg::Redirect {
                    to: Some(to.clone()),
                },
            );
            c.stream().shutdown_both();
        }
        *lock(&self.table) = Table::new(self.stale);
    }

    // ---- orders (owner activity, eviction) ---------------------------------

    /// The owner of this node is active now (`by` says who noticed).
    pub fn owner_active(&self, by: &str) -> String {
        lock(&self.sampler).owner_active(Instant::now());
        tracing::info!(
            "owner active on {} ({by}): not idle for the next {:?}; evicting foreign processes",
            self.me.name,
            lock(&self.sampler).settings().idle_owner
        );
        self.handler().handle(&NodeEvent::OwnerActive {
            node: self.me.name.clone(),
        });
        self.wake();
        format!(
            "{}: owner active; not idle for the owner threshold; eviction of foreign processes triggered",
            self.me.name
        )
    }

    /// Evicts this node's foreign processes.
    pub fn evict(&self, by: &str) -> String {
        tracing::info!("evict requested on {} by {by}", self.me.name);
        self.handler().handle(&NodeEvent::Evict {
            node: self.me.name.clone(),
            by: by.into(),
        });
        format!("{}: eviction of foreign processes triggered", self.me.name)
    }

    fn order(&self, o: Order, by: &str) -> String {
        match o {
            Order::OwnerActive => self.owner_active(by),
            Order::Evict => self.evict(by),
        }
    }

    /// Carries `o` out on `node` (this one, or another daemon of `--peer`).
    pub fn order_node(
        &self,
        node: Option<&str>,
        o: Order,
        by: &str,
    ) -> Result<String, SelectorError> {
        let node = node.unwrap_or(&self.me.name);
        if node == self.me.name {
            return Ok(self.order(o, by));
        }
        let p = self
            .peers
            .iter()
            .find(|p| p.name == node)
            .ok_or_else(|| {
                SelectorError::Invalid(format!(
                    "unknown node `{node}` (peers: {})",
                    self.peers
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?
            .clone();
        let (_, ans) = self.connect(&p, Role::Admin { order: o })?;
        match ans {
            SelMsg::Done { text } => Ok(text),
            other => Err(SelectorError::Malformed(format!(
                "{node} answered {other:?}"
            ))),
        }
    }

    // ---- connections to other daemons --------------------------------------

    fn connect(&self, p: &Peer, role: Role) -> Result<(Channel<TcpStream>, SelMsg), SelectorError> {
        let mut ch = blocking::connect(&p.addr, &self.key, &self.proto_config())?;
        let t = (self.interval * 3).max(Duration::from_secs(2));
        let _ = ch.stream().set_read_timeout(Some(t));
        let _ = ch.stream().set_write_timeout(Some(t));
        let (tx, rx) = ch.halves();
        send(
            tx,
            &SelMsg::Hello {
                version: VERSION,
                role,
            },
        )?;
        let ans = recv(rx)?;
        if let SelMsg::Failed { text, .. } = &ans {
            return Err(SelectorError::Remote(text.clone()));
        }
        Ok((ch, ans))
    }

    /// Connects to the selector with `role`, following one redirect.
    fn connect_selector(&self, role: Role) -> Result<(Channel<TcpStream>, String), SelectorError> {
        let mut tried = HashSet::new();
        let mut order: Vec<Peer> = self.current().into_iter().collect();
        order.extend(self.peers.iter().cloned());
        let mut last = None;
        let mut i = 0;
        while i < order.len() && i < 16 {
            let p = order[i].clone();
            i += 1;
            if !tried.insert(p.name.clone()) {
                continue;
            }
            match self.connect(&p, role.clone()) {
                Ok((ch, SelMsg::Welcome { selector })) => return Ok((ch, selector)),
                Ok((_, SelMsg::Redirect { to: Some(q) })) => order.insert(i, q),
                Ok((_, other)) => last = Some(format!("{} answered {other:?}", p.name)),
                Err(e) => last = Some(format!("{}: {e}", p.name)),
            }
        }
        Err(SelectorError::NoSelector(
            last.unwrap_or_else(|| "no peers".into()),
        ))
    }

    /// The table, from whichever daemon is the selector.
    pub fn status(&self) -> Result<(String, Vec<HostRow>), SelectorError> {
        if self.serving() {
            return Ok((self.me.name.clone(), lock(&self.table).rows(Instant::now())));
        }
        let (mut ch, sel) = self.connect_selector(Role::Client {
            label: "status".into(),
        })?;
        let (tx, rx) = ch.halves();
        send(tx, &SelMsg::Status { id: 1 })?;
        match recv(rx)? {
            SelMsg::Table { rows, .. } => Ok((sel, rows)),
            other => Err(SelectorError::Malformed(format!(
                "{sel} answered {other:?}"
            ))),
        }
    }

    // ---- measuring, reporting, following -----------------------------------

    fn wake(&self) {
        *lock(&self.wake.0) = true;
        self.wake.1.notify_all();
    }

    fn pause(&self, d: Duration) {
        let g = lock(&self.wake.0);
        let (mut g, _) = self
            .wake
            .1
            .wait_timeout_while(g, d, |woken| !*woken)
            .unwrap_or_else(|p| p.into_inner());
        *g = false;
    }

    /// The first peer before this one that answers, if any.
    fn earlier_alive(&self) -> Option<Peer> {
        for p in self.peers.iter().take_while(|p| p.name != self.me.name) {
            if self.connect(p, Role::Probe).is_ok() {
                return Some(p.clone());
            }
        }
        None
    }

    /// Finds the selector in `--peer` order; serves if this daemon comes first
    /// among those that answer. An earlier peer that answers but does not
    /// know the selector yet (it is looking too) has precedence: this daemon
    /// waits for it rather than serve and hand over again at once.
    fn find_selector(&self) -> Option<(Channel<TcpStream>, Peer)> {
        let me = Role::Reporter {
            node: self.me.name.clone(),
        };
        let mut earlier = None;
        for p in &self.peers {
            if p.name == self.me.name {
                // Right after start, earlier daemons of a cluster being started
                // may not listen yet: give them two intervals before serving.
                match earlier {
                    Some(e) => tracing::debug!(
                        "selector: {} waits for {e}, earlier in --peer order and looking for the selector too",
                        self.me.name
                    ),
                    None if self.started.elapsed() >= self.interval * 2 => {
                        self.become_serving("no peer before it in --peer order answers")
                    }
                    None => {}
                }
                return None;
            }
            match self.connect(p, me.clone()) {
                Ok((ch, SelMsg::Welcome { .. })) => return Some((ch, p.clone())),
                Ok((_, SelMsg::Redirect { to: Some(q) })) if q.name != self.me.name => {
                    if let Ok((ch, SelMsg::Welcome { .. })) = self.connect(&q, me.clone()) {
                        return Some((ch, q));
                    }
                    earlier.get_or_insert(p.name.clone());
                }
                Ok((_, SelMsg::Redirect { to: None })) => {
                    earlier.get_or_insert(p.name.clone());
                }
                Ok(_) => {}
                Err(e) => tracing::debug!("selector: {} does not answer: {e}", p.name),
            }
        }
        None
    }

    fn run(self: Arc<Self>) {
        let mut link: Option<(Channel<TcpStream>, Peer)> = None;
        loop {
            let now = Instant::now();
            let (report, owner_came) = {
                let mut s = lock(&self.sampler);
                let came = s.sample(now);
                (s.report(&self.me.name, &self.me.addr, now), came)
            };
            if owner_came {
                tracing::info!(
                    "owner active on {} (terminal input): evicting foreign processes",
                    self.me.name
                );
                self.handler().handle(&NodeEvent::OwnerActive {
                    node: self.me.name.clone(),
                });
            }
            let mut pause = self.interval;
            if self.serving() {
                link = None;
                if let Some(p) = self.earlier_alive() {
                    self.step_down(p);
                    continue;
                }
                let revs = {
                    let mut t = lock(&self.table);
                    let mut r = t.report(report, now);
                    r.extend(t.expire(now));
                    r
                };
                self.notify(revs);
            } else {
                if link.is_none() {
                    link = self.find_selector();
                    if let Some((_, p)) = &link {
                        let mut role = lock(&self.role);
                        if *role != RoleState::Following(Some(p.clone())) {
                            tracing::info!("selector: {} reports to {}", self.me.name, p.name);
                            *role = RoleState::Following(Some(p.clone()));
                        }
                    }
                    if self.serving() {
                        continue;
                    }
                }
                if let Some((ch, p)) = link.as_mut() {
                    let (tx, rx) = ch.halves();
                    let r = send(tx, &SelMsg::Report(report))
                        .map_err(SelectorError::from)
                        .and_then(|_| recv(rx));
                    match r {
                        Ok(SelMsg::ReportAck) => {}
                        Ok(SelMsg::Redirect { to }) => {
                            tracing::info!(
                                "selector: {} redirects to {}",
                                p.name,
                                to.as_ref().map(|t| t.name.as_str()).unwrap_or("nobody")
                            );
                            *lock(&self.role) = RoleState::Following(to);
                            link = None;
                            pause = Duration::from_millis(20);
                        }
                        other => {
                            let why = match other {
                                Err(e) => e.to_string(),
                                Ok(m) => format!("unexpected {m:?}"),
                            };
                            tracing::warn!(
                                "selector: lost {} ({why}); looking for the next selector",
                                p.name
                            );
                            *lock(&self.role) = RoleState::Following(None);
                            link = None;
                            pause = Duration::from_millis(20);
                        }
                    }
                } else {
                    pause = Duration::from_millis(200).min(self.interval);
                }
            }
            self.pause(pause);
        }
    }

    // ---- local client sessions (control socket) ----------------------------

    /// Serves a `"hosts"` session of the control socket: JSON [`SelMsg`]s one
    /// per line both ways, forwarded to the selector over one connection
    /// that lives as long as the session. `label` names the client.
    pub fn session(self: &Arc<Self>, ctl: UnixStream, label: String) {
        let w = match ctl.try_clone() {
            Ok(w) => Arc::new(Mutex::new(w)),
            Err(_) => return,
        };
        let role = Role::Client {
            label: label.clone(),
        };
        let (ch, sel) = match self.connect_selector(role.clone()) {
            Ok(x) => x,
            Err(e) => {
                write_json(
                    &w,
                    &SelMsg::Failed {
                        id: 0,
                        text: e.to_string(),
                    },
                );
                return;
            }
        };
        if !write_json(&w, &SelMsg::Welcome { selector: sel }) {
            return;
        }
        // A session may stay quiet for hours.
        let _ = ch.stream().set_read_timeout(None);
        let (tx, rx) = ch.split();
        let st = Arc::new(Proxy {
            tx: Mutex::new(Some(tx)),
            pending: Mutex::new(HashMap::new()),
            held: Mutex::new(HashSet::new()),
            closing: std::sync::atomic::AtomicBool::new(false),
        });
        let back = {
            let (me, st, w, role) = (self.clone(), st.clone(), w.clone(), role.clone());
            std::thread::Builder::new()
                .name("hosts-session".into())
                .spawn(move || me.session_back(rx, st, w, role))
        };
        let _ = ctl.set_read_timeout(None);
        let r = BufReader::new(&ctl);
        for line in r.lines() {
            let Ok(line) = line else { break };
            let m = match serde_json::from_str::<SelMsg>(line.trim()) {
                Ok(m) => m,
                Err(e) => {
                    write_json(
                        &w,
                        &SelMsg::Failed {
                            id: 0,
                            text: format!("bad request: {e}"),
                        },
                    );
                    continue;
                }
            };
            let m = match m {
                SelMsg::Request {
                    id,
                    class,
                    count,
                    exclude,
                } => {
                    lock(&st.pending).insert(id, class);
                    SelMsg::Request {
                        id,
                        class,
                        count,
                        exclude: exclude
                            .into_iter()
                            .map(|e| {
                                if e == "@self" {
                                    self.me.name.clone()
                                } else {
                                    e
                                }
                            })
                            .collect(),
                    }
                }
                m @ (SelMsg::Release { .. } | SelMsg::Status { .. }) => m,
                other => {
                    write_json(
                        &w,
                        &SelMsg::Failed {
                            id: 0,
                            text: format!("not a client message: {other:?}"),
                        },
                    );
                    continue;
                }
            };
            if let SelMsg::Release { hosts, .. } = &m {
                lock(&st.held).retain(|(h, _)| !(hosts.is_empty() || hosts.contains(h)));
            }
            let sent = lock(&st.tx).as_mut().map(|tx| send(tx, &m));
            if !matches!(sent, Some(Ok(()))) {
                write_json(
                    &w,
                    &SelMsg::Failed {
                        id: 0,
                        text: "the selector is being changed; try again".into(),
                    },
                );
            }
        }
        // The client is gone: closing the selector connection returns its hosts.
        st.closing.store(true, Ordering::SeqCst);
        if let Some(tx) = lock(&st.tx).take() {
            tx.stream().shutdown_both();
        }
        if let Ok(h) = back {
            let _ = h.join();
        }
    }

    /// The selector → client half of a session; reconnects after a failover and
    /// claims the hosts held so far.
    fn session_back(
        self: Arc<Self>,
        mut rx: Receiver<TcpStream>,
        st: Arc<Proxy>,
        w: Arc<Mutex<UnixStream>>,
        role: Role,
    ) {
        let mut claims: HashMap<u64, Vec<(String, Class)>> = HashMap::new();
        let mut claim_id = 1u64 << 62;
        loop {
            let m = recv(&mut rx).and_then(|m| match m {
                SelMsg::Redirect { .. } => Err(SelectorError::NoSelector("redirected".into())),
                m => Ok(m),
            });
            match m {
                Ok(SelMsg::Granted { id, hosts }) if claims.contains_key(&id) => {
                    let wanted = claims.remove(&id).unwrap_or_default();
                    for (h, c) in wanted {
                        if hosts.iter().any(|p| p.name == h) {
                            lock(&st.held).insert((h, c));
                        } else {
                            write_json(
                                &w,
                                &SelMsg::Revoked {
                                    host: h,
                                    class: c,
                                    reason: super::wire::RevokeReason::SelectorChanged,
                                },
                            );
                        }
                    }
                }
                Ok(m) => {
                    match &m {
                        SelMsg::Granted { id, hosts } => {
                            if let Some(c) = lock(&st.pending).remove(id) {
                                let mut held = lock(&st.held);
                                for p in hosts {
                                    held.insert((p.name.clone(), c));
                                }
                            }
                        }
                        SelMsg::Denied { id, .. } => {
                            lock(&st.pending).remove(id);
                        }
                        SelMsg::Revoked { host, class, .. } => {
                            lock(&st.held).remove(&(host.clone(), *class));
                        }
                        _ => {}
                    }
                    if !write_json(&w, &m) {
                        return;
                    }
                }
                Err(_) => {
                    if st.closing.load(Ordering::SeqCst) {
                        return;
                    }
                    tracing::info!("hosts session: selector connection lost; reconnecting");
                    if let Some(tx) = lock(&st.tx).take() {
                        tx.stream().shutdown_both();
                    }
                    // Bounded: about 10 s, while the daemons agree on a new selector.
                    let mut got = None;
                    for _ in 0..40 {
                        std::thread::sleep(Duration::from_millis(250));
                        if st.closing.load(Ordering::SeqCst) {
                            return;
                        }
                        if let Ok(x) = self.connect_selector(role.clone()) {
                            got = Some(x);
                            break;
                        }
                    }
                    let Some((ch, sel)) = got else {
                        let held: Vec<_> = lock(&st.held).drain().collect();
                        for (h, c) in held {
                            write_json(
                                &w,
                                &SelMsg::Revoked {
                                    host: h,
                                    class: c,
                                    reason: super::wire::RevokeReason::SelectorChanged,
                                },
                            );
                        }
                        write_json(
                            &w,
                            &SelMsg::Failed {
                                id: 0,
                                text: "no selector reachable".into(),
                            },
                        );
                        if let Ok(s) = lock(&w).try_clone() {
                            let _ = s.shutdown(std::net::Shutdown::Both);
                        }
                        return;
                    };
                    tracing::info!("hosts session: now served by selector {sel}");
                    let _ = ch.stream().set_read_timeout(None);
                    let (mut tx, nrx) = ch.split();
                    rx = nrx;
                    // Everything held, and what was being claimed when the
                    // connection was lost again.
                    let mut held: Vec<_> = lock(&st.held).drain().collect();
                    for (_, hs) in claims.drain() {
                        held.extend(hs);
                    }
                    held.sort();
                    held.dedup();
                    for class in [Class::Short, Class::Long] {
                        let hosts: Vec<String> = held
                            .iter()
                            .filter(|(_, c)| *c == class)
                            .map(|(h, _)| h.clone())
                            .collect();
                        if hosts.is_empty() {
                            continue;
                        }
                        claim_id += 1;
                        claims.insert(claim_id, hosts.iter().map(|h| (h.clone(), class)).collect());
                        let _ = send(
                            &mut tx,
                            &SelMsg::Claim {
                                id: claim_id,
                                class,
                                hosts,
                            },
                        );
                    }
                    *lock(&st.tx) = Some(tx);
                    if st.closing.load(Ordering::SeqCst) {
                        if let Some(tx) = lock(&st.tx).take() {
                            tx.stream().shutdown_both();
                        }
                        return;
                    }
                }
            }
        }
    }
}

/// The state of one control-socket session.
struct Proxy {
    tx: Mutex<Option<Sender<TcpStream>>>,
    /// Request id → class, until answered.
    pending: Mutex<HashMap<u64, Class>>,
    held: Mutex<HashSet<(String, Class)>>,
    closing: std::sync::atomic::AtomicBool,
}

fn write_json(w: &Mutex<UnixStream>, m: &SelMsg) -> bool {
    let Ok(mut line) = serde_json::to_vec(m) else {
        return false;
    };
    line.push(b'\n');
    lock(w).write_all(&line).is_ok()
}

/// TCP keepalive, so that the connection of a client whose node vanished ends
/// (and its hosts come back) within about a minute.
fn keepalive(s: &TcpStream) {
    use std::os::fd::AsRawFd;
    let fd = s.as_raw_fd();
    for (level, opt, val) in [
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 20),
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 5),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 4),
    ] {
        let v: libc::c_int = val;
        // SAFETY: setsockopt on a socket we own, with a pointer to a live c_int
        // and its size.
        unsafe {
            libc::setsockopt(
                fd,
                level,
                opt,
                &v as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn standalone() -> Arc<Selector> {
        Selector::standalone(ClusterKey::from_bytes([7; pmig_proto::KEY_LEN]))
    }

    #[test]
    fn owner_activity_and_evict_reach_the_handler() {
        let s = standalone();
        let (h, rx) = ChannelEvictions::new();
        s.set_eviction_handler(Arc::new(h));
        assert!(s.owner_active("test").contains("owner active"));
        assert!(s.evict("someone").contains("eviction"));
        assert_eq!(
            rx.try_recv().unwrap(),
            NodeEvent::OwnerActive {
                node: "bench".into()
            }
        );
        assert_eq!(
            rx.try_recv().unwrap(),
            NodeEvent::Evict {
                node: "bench".into(),
                by: "someone".into()
            }
        );
        let log = Arc::new(LogEvictions::default());
        s.set_eviction_handler(log.clone());
        s.order_node(None, Order::Evict, "t").unwrap();
        assert_eq!(log.take_pending().len(), 1);
        assert!(s.order_node(Some("nowhere"), Order::Evict, "t").is_err());
    }

    #[test]
    fn the_first_peer_serves_from_the_start_others_search() {
        let k = ClusterKey::from_bytes([7; pmig_proto::KEY_LEN]);
        let p = |n: &str| Peer {
            name: n.into(),
            addr: "127.0.0.1:1".into(),
        };
        let peers = vec![p("n1"), p("n2")];
        let s1 = Selector::new(p("n1"), peers.clone(), k.clone(), Settings::default());
        let s2 = Selector::new(p("n2"), peers, k, Settings::default());
        assert!(s1.serving() && s1.current().unwrap().name == "n1");
        assert!(!s2.serving() && s2.current().is_none());
        assert!(matches!(
            s2.welcome_or_redirect(),
            SelMsg::Redirect { to: None }
        ));
    }
}
