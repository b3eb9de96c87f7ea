//! The pmig node daemon (`pmig daemon`).
//!
//! * **Local control** on the abstract unix socket `@pmig-control` ([`control`]):
//!   abstract sockets belong to a network namespace, so the CLI run inside a node
//!   reaches that node's daemon. Callers are identified with `SO_PEERCRED`: root may
//!   migrate any process, anyone else only processes whose real uid is theirs.
//! * **Node to node** over TCP with `pmig-proto` (authenticated with the cluster key
//!   before anything is parsed; refused peers get one log line).
//! * **Restored processes are its children**: the daemon is a child subreaper, so a
//!   process restored by a `pmig restore --detach` helper becomes its child when the
//!   helper exits; the reaper collects them (never with `waitpid(-1)`, which would steal
//!   the helpers' statuses).

mod balance;
pub mod control;
pub mod error;
pub mod evict;
mod services;

pub use error::{DaemonError, Result};

use control::{Event, MigrateRequest, Request, MAX_REQUEST};
use error::io_err;
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use pmig_proto::blocking::Channel;
use pmig_proto::{code, ClusterKey, Msg, ProtoError};
use pmig_strategies::{Hooks, Host, Progress, StrategyKind};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Most connections served at once, per listener.
pub const MAX_CONNECTIONS: usize = 64;
/// Environment variable that enables test hooks (`<state dir>/test-hook`).
pub const TEST_HOOKS_ENV: &str = "PMIG_TEST_HOOKS";
/// How long a `Resume` for a migration that is not (yet) waiting for one is
/// held before it is refused.
const RESUME_EARLY_WAIT: Duration = Duration::from_secs(5);
/// How long an `Answers` connection for a migration that does not take one
/// (yet) is held before it is refused.
const ANSWERS_EARLY_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
pub struct Config {
    pub node: String,
    /// `ADDR:PORT` to listen on for other nodes.
    pub listen: String,
    pub key_file: PathBuf,
    pub state_dir: PathBuf,
    /// The `pmig` binary (helpers are started from it).
    pub exe: PathBuf,
    /// Abstract name of the control socket.
    pub control_name: String,
    /// Where images are staged during a migration (tmpfs).
    pub staging_root: PathBuf,
    /// Every node of the cluster, this one included (`--peer NAME=ADDR:PORT`), for
    /// the cluster services.
    pub peers: Vec<pmig_services::Peer>,
    /// Host selection: measuring, thresholds, report interval.
    pub selector: pmig_services::selector::Settings,
    /// Acts on owner activity and `pmig evict` orders from the selector's admin
    /// connections (default: the daemon evicts, see [`evict`]).
    pub eviction: Option<Arc<dyn pmig_services::selector::EvictionHandler>>,
    /// Where evicted processes go and how (`--evict-to`, `--evict-strategy`).
    pub evict: evict::Settings,
    /// Load balancing (`--balance`); `None`: off.
    pub balance: Option<pmig_services::balance::Settings>,
    /// How much of the source's CPU the restores here demand
    /// (`--cpu-check`); `None`: the restore's default.
    pub cpu_check: Option<pmig_engine::resources::cpu::CpuCheck>,
}

impl Config {
    pub fn new(node: &str, listen: &str, key_file: &Path, state_dir: &Path) -> Result<Config> {
        let exe = std::env::current_exe().map_err(io_err("find the pmig binary"))?;
        Ok(Config {
            node: node.into(),
            listen: listen.into(),
            key_file: key_file.into(),
            state_dir: state_dir.into(),
            exe,
            control_name: control::CONTROL_NAME.into(),
            staging_root: PathBuf::from("/dev/shm"),
            peers: Vec::new(),
            selector: Default::default(),
            eviction: None,
            evict: Default::default(),
            balance: None,
            cpu_check: None,
        })
    }
}

/// A migration waiting for its destination's `Resume`: the destination node
/// and where to hand the new connection.
type Waiting = (String, SyncSender<Channel<TcpStream>>);

/// The daemon's shared state; implements [`Host`] for the strategies.
pub struct Node {
    cfg: Config,
    key: ClusterKey,
    /// Pids of helper processes a thread will wait for: the reaper skips them. The lock
    /// is held across spawn + insert so a helper that exits at once is never reaped by
    /// the reaper.
    helpers: Mutex<HashSet<i32>>,
    /// Pids being migrated from this node right now, and who asked
    /// ([`Host::may_leave`] checks again at the stop).
    busy: Mutex<HashMap<i32, Requester>>,
    /// Remote execution: the jobs homed here and the jobs running here.
    exec: pmig_services::exec::Exec,
    /// Post-copy migrations from this node whose destination vanished,
    /// waiting for its restarted daemon (`Resume`): id -> (destination node,
    /// where to hand the new connection).
    resumable: Mutex<HashMap<u64, Waiting>>,
    /// Lazy migrations from this node that take a second connection for
    /// their answers (`Answers`): id -> (destination node, where to hand it).
    answers: Mutex<HashMap<u64, Waiting>>,
    /// Processes still arriving here (a lazy strategy fills their pages
    /// in), each with how many of its arrivals are under way (freeze-free's
    /// fault service hands over to its page store while it is marked).
    arriving: Mutex<HashMap<i32, usize>>,
    /// Processes restored here, by source node and migration id: (pid,
    /// start time, each thread's id in the original and here), for the
    /// signals the source passes on (`Signals`).
    restored: Mutex<HashMap<(String, u64), RestoredHere>>,
    /// Host selection (reporting, and the selector role when it is ours).
    pub(crate) selector: Arc<pmig_services::selector::Selector>,
    /// Processes migrated here from other nodes, by pid (eviction, balancing).
    pub(crate) arrived: Mutex<HashMap<i32, evict::Arrived>>,
    pub(crate) evictions: evict::Evictions,
    /// The load balancer's decisions.
    pub(crate) decisions: balance::Decisions,
}

impl Host for Node {
    fn node(&self) -> &str {
        &self.cfg.node
    }
    fn exe(&self) -> &Path {
        &self.cfg.exe
    }
    fn state_dir(&self) -> &Path {
        &self.cfg.state_dir
    }
    fn staging_root(&self) -> &Path {
        &self.cfg.staging_root
    }
    fn cluster_key(&self) -> &ClusterKey {
        &self.key
    }
    fn spawn(&self, cmd: &mut Command) -> std::io::Result<Child> {
        let mut h = self.helpers.lock().unwrap_or_else(|p| p.into_inner());
        let c = cmd.spawn()?;
        h.insert(c.id() as i32);
        Ok(c)
    }
    fn wait(&self, child: &mut Child) -> std::io::Result<ExitStatus> {
        let r = child.wait();
        self.helpers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(child.id() as i32));
        r
    }
    fn hooks(&self) -> Hooks {
        read_hooks(&self.cfg.state_dir)
    }
    fn may_leave(&self, pid: i32) -> std::result::Result<(), String> {
        let who = self
            .busy
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&pid)
            .copied();
        match who {
            Some(who) => authorize(who, pid),
            None => Ok(()),
        }
    }
    fn stdio_for(&self, peer: &str, offer: &pmig_proto::Offer) -> Option<[PathBuf; 3]> {
        pmig_services::exec::remote::stdio_for(self, peer, offer.pid)
    }
    fn wrap_restore(&self, peer: &str, offer: &pmig_proto::Offer, cmd: &mut Command) {
        pmig_services::exec::remote::wrap_restore(self, peer, offer.pid, cmd)
    }
    fn arriving(&self, pid: i32, active: bool) {
        let mut a = self.arriving.lock().unwrap_or_else(|p| p.into_inner());
        if active {
            *a.entry(pid).or_insert(0) += 1;
        } else if let Some(n) = a.get_mut(&pid) {
            *n -= 1;
            if *n == 0 {
                a.remove(&pid);
            }
        }
    }
    fn peer_addr(&self, name: &str) -> Option<String> {
        self.cfg
            .peers
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.addr.clone())
    }
    fn listen_addr(&self) -> Option<String> {
        Some(self.cfg.listen.clone())
    }
    fn cpu_check(&self) -> Option<pmig_engine::resources::cpu::CpuCheck> {
        self.cfg.cpu_check
    }
    fn await_resume(&self, id: u64, peer: &str, within: Duration) -> Option<Channel<TcpStream>> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.resumable
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, (peer.to_string(), tx));
        let r = rx.recv_timeout(within).ok();
        self.resumable
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        r
    }
    fn expect_answers(
        &self,
        id: u64,
        peer: &str,
    ) -> Option<std::sync::mpsc::Receiver<Channel<TcpStream>>> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.answers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, (peer.to_string(), tx));
        Some(rx)
    }
    fn forget_answers(&self, id: u64) {
        self.answers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }
    fn restored_here(&self, id: u64, peer: &str, pid: i32, tids: &[(i32, i32)]) {
        let Some((_, _, start)) = evict::stat(pid) else {
            return;
        };
        let mut r = self.restored.lock().unwrap_or_else(|p| p.into_inner());
        // Bounded: the records of processes that ended go first.
        if r.len() >= MAX_RESTORED_RECORDS {
            r.retain(|_, (p, s, _)| {
                evict::stat(*p).is_some_and(|(st, _, start)| start == *s && st != 'Z' && st != 'X')
            });
        }
        if r.len() < MAX_RESTORED_RECORDS {
            r.insert((peer.to_string(), id), (pid, start, tids.to_vec()));
        }
    }
}

/// A process restored here: pid, start time, and each thread's id in the
/// original and here (see `Node::restored`).
type RestoredHere = (i32, u64, Vec<(i32, i32)>);

/// Most processes [`Node`] remembers as restored here (see `restored`).
const MAX_RESTORED_RECORDS: usize = 4096;

impl Node {
    /// Delivers `signals` that `peer` passes on for migration `id` to the
    /// process restored for it; the reply to send.
    fn late_signals(&self, id: u64, peer: &str, signals: &[pmig_proto::msg::LateSignal]) -> Msg {
        let rec = self
            .restored
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(peer.to_string(), id))
            .cloned();
        let text = match rec {
            Some((pid, start, tids)) => match evict::stat(pid) {
                Some((st, _, s)) if s == start && st != 'Z' && st != 'X' => {
                    let delivered = pmig_strategies::deliver_late_signals(pid, &tids, signals);
                    tracing::info!(
                            "{delivered} of {} signal(s) sent to the original on {peer} delivered to process {pid} (migration {id})",
                            signals.len()
                        );
                    return Msg::SignalsDelivered { id, delivered };
                }
                _ => format!("process {pid} of migration {id} has ended here"),
            },
            None => format!("no process was restored here for migration {id} of {peer}"),
        };
        tracing::warn!(
            "{} signal(s) from {peer} not delivered: {text}",
            signals.len()
        );
        Msg::Error {
            code: code::REFUSED,
            text,
        }
    }
}

/// Test hooks from `<state dir>/test-hook`, only with `PMIG_TEST_HOOKS=1`. One
/// directive per line: `die-after-bytes N`, `stall-after-bytes N`, `stall-fill-ms N`,
/// `answers-fail-after N`, `speak-version N`, `fail-restore`, `hang-before-restore`,
/// `give-up-pre-flush`,
/// `hold-original`, `hold-flush`, `hold-answers`, `hold-skeleton`.
fn read_hooks(dir: &Path) -> Hooks {
    let mut h = Hooks::default();
    if std::env::var(TEST_HOOKS_ENV).as_deref() != Ok("1") {
        return h;
    }
    let Ok(text) = std::fs::read_to_string(dir.join("test-hook")) else {
        return h;
    };
    for l in text.lines() {
        let mut w = l.split_whitespace();
        match (w.next(), w.next()) {
            (Some("die-after-bytes"), Some(n)) => h.die_after_bytes = n.parse().ok(),
            (Some("stall-after-bytes"), Some(n)) => h.stall_after_bytes = n.parse().ok(),
            (Some("stall-fill-ms"), Some(n)) => h.stall_fill_ms = n.parse().ok(),
            (Some("answers-fail-after"), Some(n)) => h.answers_fail_after = n.parse().ok(),
            (Some("speak-version"), Some(n)) => h.speak_version = n.parse().ok(),
            (Some("fail-restore"), _) => h.fail_restore = true,
            (Some("hang-before-restore"), _) => h.hang_before_restore = true,
            (Some("give-up-pre-flush"), _) => h.give_up_pre_flush = true,
            (Some("hold-original"), _) => h.hold_original = true,
            (Some("hold-answers"), _) => h.hold_answers = true,
            (Some("hold-skeleton"), _) => h.hold_skeleton = true,
            (Some("hold-flush"), _) => h.hold_flush = true,
            (Some("hold-rounds"), _) => h.hold_rounds = true,
            _ => {}
        }
    }
    if h != Hooks::default() {
        tracing::warn!("test hooks in force: {h:?}");
    }
    h
}

/// Runs the daemon until it is killed. Returns only on a startup error.
/// Buffers at least this large are mapped for themselves and unmapped when
/// freed ([`fix_malloc_threshold`]).
const MMAP_THRESHOLD: i32 = 128 << 10;

/// glibc raises its threshold for mapping a buffer on its own each time a
/// mapped buffer is freed, after which the large buffers of later
/// migrations come from its per-thread heaps, which keep their memory: a
/// soak test of 100 moves saw a daemon grow from 7 to 207 MiB resident,
/// with 2.4 MiB in use. A fixed threshold keeps it near its start (10 MiB
/// after 60 moves).
fn fix_malloc_threshold() {
    // SAFETY: mallopt only changes the allocator's parameters.
    if unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) } != 1 {
        tracing::warn!("cannot fix the allocator's mmap threshold: the daemon's memory may grow");
    }
}

pub fn run(cfg: Config) -> Result<()> {
    fix_malloc_threshold();
    let key = pmig_proto::load_key(&cfg.key_file)?;
    std::fs::create_dir_all(&cfg.state_dir)
        .map_err(io_err(format!("create {}", cfg.state_dir.display())))?;
    let tcp =
        TcpListener::bind(&cfg.listen).map_err(io_err(format!("listen on {}", cfg.listen)))?;
    let ctl = UnixListener::bind_addr(&control::address(&cfg.control_name)?).map_err(|e| {
        DaemonError::Io {
            what: format!(
                "bind the control socket @{} (is another daemon running in this network namespace?)",
                cfg.control_name
            ),
            source: e,
        }
    })?;
    // SAFETY: prctl with integer arguments; makes orphaned descendants (restored
    // processes whose `pmig restore` helper exited) our children.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } < 0 {
        return Err(DaemonError::Io {
            what: "become a child subreaper".into(),
            source: std::io::Error::last_os_error(),
        });
    }
    // Held while the daemon lives: tells its staging directories from a
    // dead daemon's, whatever pid namespace the looking daemon is in.
    let _alive = hold_staging_lock(&cfg.staging_root, &cfg.node);
    remove_stale_staging(&cfg.staging_root, &cfg.node);
    let me = pmig_services::Peer {
        name: cfg.node.clone(),
        addr: cfg
            .peers
            .iter()
            .find(|p| p.name == cfg.node)
            .map(|p| p.addr.clone())
            .unwrap_or_else(|| cfg.listen.clone()),
    };
    let selector = pmig_services::selector::Selector::new(
        me,
        cfg.peers.clone(),
        key.clone(),
        cfg.selector.clone(),
    );
    if let Some(h) = &cfg.eviction {
        selector.set_eviction_handler(h.clone());
    }
    let node = Arc::new(Node {
        cfg,
        key,
        helpers: Mutex::new(HashSet::new()),
        busy: Mutex::new(HashMap::new()),
        exec: pmig_services::exec::Exec::new(),
        resumable: Mutex::new(HashMap::new()),
        answers: Mutex::new(HashMap::new()),
        arriving: Mutex::new(HashMap::new()),
        restored: Mutex::new(HashMap::new()),
        selector,
        arrived: Mutex::new(HashMap::new()),
        evictions: Default::default(),
        decisions: Default::default(),
    });
    if node.cfg.eviction.is_none() {
        node.selector
            .set_eviction_handler(Arc::new(evict::DaemonEvictions(Arc::downgrade(&node))));
    }
    if let Some(b) = node.cfg.balance.clone() {
        let n = node.clone();
        std::thread::Builder::new()
            .name("balance".into())
            .spawn(move || balance::run(n, b))
            .map_err(io_err("start the load balancing thread"))?;
    }
    node.selector
        .start()
        .map_err(io_err("start the host selection thread"))?;
    tracing::info!(
        "pmig daemon {} (pid {}) listening on {} and @{}; state in {}",
        node.cfg.node,
        std::process::id(),
        node.cfg.listen,
        node.cfg.control_name,
        node.cfg.state_dir.display()
    );
    {
        let n = node.clone();
        std::thread::Builder::new()
            .name("reaper".into())
            .spawn(move || reaper(&n))
            .map_err(io_err("start the reaper thread"))?;
    }
    for (rec, act) in pmig_strategies::takeover::pending(node.as_ref()) {
        let n = node.clone();
        let (id, src) = (rec.id, rec.source_node.clone());
        tracing::info!(
            "taking over migration {id} from {src} (process {})",
            rec.pid
        );
        std::thread::Builder::new()
            .name(format!("takeover-{id}"))
            .spawn(move || match pmig_strategies::takeover::resume(n.as_ref(), rec, act) {
                Ok(pid) => tracing::info!("migration {id} from {src} done after the takeover: process runs here as pid {pid}"),
                Err(e) => tracing::error!("takeover of migration {id} from {src} failed: {e}"),
            })
            .map_err(io_err("start a takeover thread"))?;
    }
    {
        let n = node.clone();
        std::thread::Builder::new()
            .name("peers".into())
            .spawn(move || accept_peers(n, tcp))
            .map_err(io_err("start the listener thread"))?;
    }
    accept_control(node, ctl);
    Ok(())
}

/// Runs `f` on a new thread unless `count` is at `MAX_CONNECTIONS`.
fn spawn_limited(count: &Arc<AtomicUsize>, what: &str, f: impl FnOnce() + Send + 'static) {
    if count.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
        count.fetch_sub(1, Ordering::SeqCst);
        tracing::warn!("refused {what}: {MAX_CONNECTIONS} connections already");
        return;
    }
    let c = count.clone();
    let r = std::thread::Builder::new().spawn(move || {
        f();
        c.fetch_sub(1, Ordering::SeqCst);
    });
    if let Err(e) = r {
        count.fetch_sub(1, Ordering::SeqCst);
        tracing::error!("cannot start a thread for {what}: {e}");
    }
}

fn accept_peers(node: Arc<Node>, l: TcpListener) {
    let count = Arc::new(AtomicUsize::new(0));
    for s in l.incoming() {
        match s {
            Ok(s) => {
                let n = node.clone();
                let _ = s.set_nodelay(true);
                pmig_proto::congestion::apply(&s);
                spawn_limited(&count, "a node connection", move || serve_peer(&n, s));
            }
            Err(e) => {
                tracing::warn!("accept on {}: {e}", node.cfg.listen);
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// The migration `id` in `map` waiting for a connection from `peer`, taken
/// out of it; waits up to `within` (polling every `poll_ms`) for it to start
/// waiting. A migration waiting for another node keeps waiting.
fn take_waiting(
    map: &Mutex<HashMap<u64, Waiting>>,
    id: u64,
    peer: &str,
    within: Duration,
    poll_ms: u64,
) -> std::result::Result<SyncSender<Channel<TcpStream>>, ()> {
    let deadline = Instant::now() + within;
    loop {
        let mut m = map.lock().unwrap_or_else(|p| p.into_inner());
        match m.remove(&id) {
            Some((dest, tx)) if dest == peer => return Ok(tx),
            Some(w) => {
                m.insert(id, w);
                return Err(());
            }
            None if Instant::now() >= deadline => return Err(()),
            None => {}
        }
        drop(m);
        std::thread::sleep(Duration::from_millis(poll_ms));
    }
}

/// Refuses what a peer asked for on `ch` (best effort).
fn refuse(ch: &mut Channel<TcpStream>, text: String) {
    let _ = ch.send(&Msg::Error {
        code: code::REFUSED,
        text,
    });
}

/// One node-to-node connection: authenticate, then serve messages.
fn serve_peer(node: &Node, s: TcpStream) {
    let mut ch = match Channel::server(s, &node.key, &node.proto_config()) {
        Ok(c) => c,
        Err(_) => return, // pmig-proto logged one line
    };
    let peer = ch.peer().node.clone();
    tracing::debug!(
        "connection from {peer} ({}, {})",
        ch.peer().addr,
        ch.peer().cipher
    );
    // An authenticated but idle peer does not hold a thread forever.
    let _ = ch.stream().set_read_timeout(Some(Duration::from_secs(300)));
    // Where the peer's daemon listens, if it said so before its offer.
    let mut listening: Option<String> = None;
    for _ in 0..1_000_000 {
        // recv_with: a Ping may carry an attachment (auto's bandwidth probe).
        match ch.recv_with().map(|i| i.into_parts()) {
            Ok((Msg::Ping { seq }, _, _)) => {
                if ch.send(&Msg::Pong { seq }).is_err() {
                    return;
                }
            }
            Ok((Msg::Service { service }, body, att)) => {
                services::serve(node, ch, service, &body[att..]);
                return;
            }
            Ok((Msg::Resume { id, pid }, _, _)) => {
                // A restarted destination daemon can be quicker than this
                // source is to notice the loss (demand-paging first copies
                // the owed pages aside): give the migration a moment to
                // start waiting.
                let w = take_waiting(&node.resumable, id, &peer, RESUME_EARLY_WAIT, 20);
                match w {
                    Ok(tx) => {
                        tracing::info!("{peer} resumes migration {id} (process {pid} there)");
                        let _ = tx.send(ch);
                    }
                    Err(()) => {
                        tracing::warn!(
                            "{peer} asked to resume migration {id}, which is not waiting for it"
                        );
                        refuse(
                            &mut ch,
                            format!("no migration {id} to {peer} is waiting to be resumed here"),
                        );
                    }
                }
                return;
            }
            Ok((Msg::Answers { id }, _, _)) => {
                // The destination opens it right after it sent `Restored`,
                // which this side may not have read yet.
                match take_waiting(&node.answers, id, &peer, ANSWERS_EARLY_WAIT, 1) {
                    Ok(tx) => {
                        tracing::info!(
                            "{peer} takes the answers of migration {id} on a second connection"
                        );
                        // The connection waits for answers only: no read timeout.
                        let _ = ch.stream().set_read_timeout(None);
                        let _ = tx.send(ch);
                    }
                    Err(()) => {
                        tracing::warn!("{peer} asked for the answers of migration {id}, which is not serving it");
                        refuse(
                            &mut ch,
                            format!("no migration {id} to {peer} is serving pages here"),
                        );
                    }
                }
                return;
            }
            Ok((Msg::Signals { id, signals }, _, _)) => {
                let reply = node.late_signals(id, &peer, &signals);
                if ch.send(&reply).is_err() {
                    return;
                }
            }
            Ok((Msg::Listening { addr }, _, _)) => listening = Some(addr),
            Ok((Msg::MigrateOffer(offer), _, _)) => {
                let (id, pid) = (offer.id, offer.pid);
                match pmig_strategies::serve_offer(node, ch, offer, listening.as_deref()) {
                    Ok(Some(new)) => {
                        node.record_arrival(new, &peer);
                        tracing::info!(
                            "migration {id} from {peer} done: process {pid} runs here as pid {new}"
                        )
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!("migration {id} of process {pid} from {peer} failed: {e}")
                    }
                }
                return;
            }
            Ok((other, _, _)) => {
                tracing::warn!("unexpected {} from {peer}; closing", other.kind());
                let _ = ch.send(&Msg::Error {
                    code: code::UNEXPECTED,
                    text: format!("unexpected {} outside a migration", other.kind()),
                });
                return;
            }
            Err(e) if e.is_disconnect() => return,
            Err(e @ ProtoError::Malformed(_)) => {
                tracing::warn!("malformed message from {peer}: {e}; closing");
                let _ = ch.send(&Msg::Error {
                    code: code::MALFORMED,
                    text: e.to_string(),
                });
                return;
            }
            Err(e) => {
                tracing::warn!("connection from {peer}: {e}");
                return;
            }
        }
    }
}

fn accept_control(node: Arc<Node>, l: UnixListener) {
    let count = Arc::new(AtomicUsize::new(0));
    for s in l.incoming() {
        match s {
            Ok(s) => {
                let n = node.clone();
                spawn_limited(&count, "a control connection", move || serve_control(&n, s));
            }
            Err(e) => {
                tracing::warn!("accept on the control socket: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn send_event(s: &UnixStream, ev: &Event) -> bool {
    let mut line = match serde_json::to_vec(ev) {
        Ok(l) => l,
        Err(_) => return false,
    };
    line.push(b'\n');
    let mut w = s;
    w.write_all(&line).is_ok()
}

/// One control connection: one request, its events, close.
fn serve_control(node: &Node, s: UnixStream) {
    let cred = match getsockopt(&s, PeerCredentials) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("control connection without credentials: {e}");
            return;
        }
    };
    let (uid, cpid) = (cred.uid(), cred.pid());
    let caller = pmig_services::exec::home::Caller {
        uid,
        gid: cred.gid(),
        pid: cpid,
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(10)));
    let mut line = String::new();
    let n = BufReader::new((&s).take(MAX_REQUEST as u64 + 1)).read_line(&mut line);
    let error = |message: String| {
        tracing::warn!("control request from pid {cpid} (uid {uid}) refused: {message}");
        send_event(&s, &Event::Error { message });
    };
    match n {
        Ok(0) => return,
        Ok(_) if line.len() > MAX_REQUEST || !line.ends_with('\n') => {
            return error(format!(
                "bad request: not one line of at most {MAX_REQUEST} bytes"
            ))
        }
        Ok(_) => {}
        Err(e) => return error(format!("bad request: {e}")),
    }
    let req: Request = match serde_json::from_str(line.trim()) {
        Ok(r) => r,
        Err(e) => return error(format!("bad request: {e}")),
    };
    match req {
        Request::Ping => {
            send_event(
                &s,
                &Event::Pong {
                    node: node.cfg.node.clone(),
                    version: env!("CARGO_PKG_VERSION").into(),
                },
            );
        }
        Request::Run(r) => match pmig_services::exec::home::start(node, &caller, &r) {
            Ok(job) => {
                let ev = Event::Started {
                    job: job.id.clone(),
                    node: job.node.clone(),
                    pid: job.pid,
                };
                // The job runs: a client that vanished now is a hangup, served by relay.
                send_event(&s, &ev);
                pmig_services::exec::home::relay(node, job, s);
            }
            Err(e) => error(e.to_string()),
        },
        Request::Ps => {
            let _ = s.set_write_timeout(None);
            let (jobs, unreachable) = pmig_services::exec::home::ps(node);
            send_event(&s, &Event::Jobs { jobs, unreachable });
        }
        Request::Kill(k) => match pmig_services::exec::home::kill(node, &k.job, k.signal, uid) {
            Ok(n) => {
                send_event(
                    &s,
                    &Event::Killed {
                        job: k.job,
                        node: n,
                    },
                );
            }
            Err(e) => error(e.to_string()),
        },
        Request::Hosts => {
            let _ = s.set_write_timeout(Some(Duration::from_secs(30)));
            node.selector
                .clone()
                .session(s, format!("pid {cpid} uid {uid}"));
        }
        Request::HostsStatus => match node.selector.status() {
            Ok((selector, rows)) => {
                send_event(&s, &Event::Hosts { selector, rows });
            }
            Err(e) => error(e.to_string()),
        },
        Request::OwnerActive { node: target } => {
            let by = format!(
                "pmig owner active, pid {cpid} uid {uid} on {}",
                node.cfg.node
            );
            match node.selector.order_node(
                target.as_deref(),
                pmig_services::selector::Order::OwnerActive,
                &by,
            ) {
                Ok(message) => {
                    send_event(&s, &Event::Ok { message });
                }
                Err(e) => error(e.to_string()),
            }
        }
        Request::Evict { node: target } => {
            if uid != 0 {
                return error("permission denied: only root may evict".into());
            }
            let _ = s.set_write_timeout(None);
            let by = format!("pmig evict, pid {cpid} on {}", node.cfg.node);
            match node.evict_node(target.as_deref(), &by) {
                Ok(report) => {
                    send_event(&s, &Event::Evicted { report });
                }
                Err(e) => error(e),
            }
        }
        Request::BalanceStatus => {
            let _ = s.set_write_timeout(None);
            let (nodes, unreachable) = node.balance_status();
            send_event(&s, &Event::Balance { nodes, unreachable });
        }
        Request::Migrate(m) => {
            let _ = s.set_write_timeout(None);
            let who = Requester {
                uid,
                gid: cred.gid(),
            };
            match migrate(node, &s, who, &m) {
                Ok(outcome) => {
                    tracing::info!(
                        "migrated process {} ({}) to {} as pid {}: {} down {:.1} ms, {} bytes, {} remote faults; residual {} until {}",
                        outcome.pid,
                        outcome.comm,
                        outcome.destination,
                        outcome.new_pid,
                        outcome.report.strategy,
                        outcome.report.down_ms,
                        outcome.report.bytes_total,
                        outcome.report.remote_faults,
                        outcome.report.residual.what,
                        outcome.report.residual.until
                    );
                    send_event(
                        &s,
                        &Event::Done {
                            outcome: Box::new(outcome),
                        },
                    );
                }
                Err(message) => error(message),
            }
        }
    }
}

/// Who asked for a migration: a control connection's peer, or root for
/// the daemon's own services (eviction, balancing).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Requester {
    pub uid: u32,
    pub gid: u32,
}

impl Requester {
    pub(crate) const ROOT: Requester = Requester { uid: 0, gid: 0 };
}

/// Who may migrate what: root anything; anyone else only a process they
/// could trace themselves (the kernel's own rule for ptrace): every one of
/// its uids theirs, every one of its gids their gid, and dumpable (a process
/// that said so with `PR_SET_DUMPABLE`, or changed its credentials, is not;
/// the files of its `/proc/PID` then belong to root).
fn authorize(who: Requester, pid: i32) -> std::result::Result<(), String> {
    if who.uid == 0 {
        return Ok(());
    }
    let Some((uids, gids)) = pmig_strategies::process_ids(pid) else {
        return Err(format!("process {pid} does not exist"));
    };
    let uid = who.uid;
    if uids[0] != uid {
        return Err(format!(
            "permission denied: process {pid} does not belong to uid {uid}"
        ));
    }
    if uids.iter().any(|&u| u != uid) || gids.iter().any(|&g| g != who.gid) {
        return Err(format!(
            "permission denied: process {pid} runs with other ids (uids {uids:?}, gids {gids:?}) than uid {uid} gid {}, as a set-user-ID or set-group-ID program does; only root may migrate it",
            who.gid
        ));
    }
    // A file, not the directory: /proc/PID itself always shows the
    // effective uid, its files show root when the process is not dumpable.
    let owner = std::fs::metadata(format!("/proc/{pid}/stat"))
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .map_err(|_| format!("process {pid} does not exist"))?;
    if owner != uid {
        return Err(format!(
            "permission denied: process {pid} is not dumpable (it asked not to be, or changed its credentials); only root may migrate it"
        ));
    }
    Ok(())
}

/// Which progress reports of a migration go to the client: each event
/// wakes it, and the transfer of a stop's few KiB, while the process is
/// frozen, sent it three or four. None in a phase's first
/// [`ProgressThrottle::QUIET`] (a phase is a name and a total), and then at
/// most one per `QUIET`: a progress bar shows only transfers that last.
#[derive(Default)]
struct ProgressThrottle {
    /// The phase and total, and when they began.
    phase: Option<(&'static str, u64, Instant)>,
    sent: Option<Instant>,
}

impl ProgressThrottle {
    const QUIET: Duration = Duration::from_millis(50);

    fn pass(&mut self, p: &Progress, now: Instant) -> bool {
        match self.phase {
            Some((name, total, _)) if name == p.phase && total == p.total => {}
            _ => self.phase = Some((p.phase, p.total, now)),
        }
        let began = self.phase.map_or(now, |(_, _, t)| t);
        let quiet = |t: Instant| now.saturating_duration_since(t) < Self::QUIET;
        if quiet(began) || self.sent.is_some_and(quiet) {
            return false;
        }
        self.sent = Some(now);
        true
    }
}

fn migrate(
    node: &Node,
    s: &UnixStream,
    who: Requester,
    m: &MigrateRequest,
) -> std::result::Result<pmig_strategies::Outcome, String> {
    let mut throttle = ProgressThrottle::default();
    let mut progress = |p: Progress| {
        if throttle.pass(&p, Instant::now()) {
            send_event(
                s,
                &Event::Progress {
                    phase: p.phase.into(),
                    done: p.done,
                    total: p.total,
                },
            );
        }
    };
    // Strategies whose residual work lasts as long as the process
    // (demand-paging) report at the handover; the user's command returns
    // then and the daemon carries on.
    let mut handed_over = |o: &pmig_strategies::Outcome| {
        send_event(
            s,
            &Event::Done {
                outcome: Box::new(o.clone()),
            },
        );
        let _ = s.shutdown(std::net::Shutdown::Both);
    };
    migrate_core(node, who, m, &mut progress, &mut handed_over)
}

/// The daemon's one migrate path (control requests, eviction, balancing):
/// authorizes, marks the process busy, keeps a job attached to its home
/// (its stdio is prepared on the destination), runs the strategy.
/// A process that arrived here by a lazy strategy may still be arriving
/// (post-copy and the like: pages still come from its source; flushing: its
/// pages are filled in, then its userfaultfd is closed from inside it, with
/// ptrace) or briefly traced by this daemon. Waits until neither is the
/// case, so that a migration asked for right after an arrival moves the
/// process once it is whole instead of failing on its userfaultfd or as
/// "already traced". The wait is bounded by `limit` (the request's
/// timeout); a process still arriving then is refused, untouched.
fn settle(node: &Node, pid: i32, limit: Duration) -> std::result::Result<(), String> {
    let arriving = || {
        node.arriving
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&pid)
    };
    // TracerPid names the tracing thread: one of ours?
    let traced_by_us =
        || pmig_engine::procfs::tracer_of(pid).is_some_and(pmig_engine::procfs::is_our_thread);
    const STEP: Duration = Duration::from_millis(10);
    let mut said = false;
    for _ in 0..=limit.as_millis() / STEP.as_millis() {
        let busy = arriving();
        if busy {
            // A source that serves pages only when asked is asked for all.
            pmig_strategies::demand_paging::pull_all(pid);
        }
        if !busy && !traced_by_us() {
            return Ok(());
        }
        if busy && !said {
            tracing::info!(
                "process {pid} is still receiving its pages from its last migration: waiting up to {limit:?} before moving it on"
            );
            said = true;
        }
        std::thread::sleep(STEP);
    }
    if arriving() {
        return Err(format!(
            "process {pid} is still receiving its pages from its last migration after {} s; it was not touched: migrate it again once they have arrived",
            limit.as_secs()
        ));
    }
    Ok(())
}

/// Where a migration goes: a node this daemon knows by name (its
/// `--peer NAME=ADDR:PORT`), else `ADDR:PORT` or `HOST:PORT` as given.
fn destination(
    node: &Node,
    to: &str,
    name: Option<&str>,
) -> std::result::Result<(String, Option<String>), String> {
    match pmig_services::Peer::by_name(&node.cfg.peers, to) {
        Ok(p) => Ok((p.addr.clone(), Some(p.name.clone()))),
        Err(_) if to.contains(':') => Ok((to.to_string(), name.map(str::to_string))),
        Err(e) => Err(format!("{e}; give ADDR:PORT instead")),
    }
}

pub(crate) fn migrate_core(
    node: &Node,
    who: Requester,
    m: &MigrateRequest,
    progress: &mut dyn FnMut(Progress),
    handed_over: &mut dyn FnMut(&pmig_strategies::Outcome),
) -> std::result::Result<pmig_strategies::Outcome, String> {
    let strategy = StrategyKind::implemented(&m.strategy).map_err(|e| e.to_string())?;
    let precopy =
        pmig_strategies::PreCopyParams::new(m.max_rounds, m.max_dirty_fraction, m.max_down_ms)
            .map_err(|e| e.to_string())?;
    authorize(who, m.pid)?;
    let (to, to_name) = destination(node, &m.to, m.to_name.as_deref())?;
    let m = &MigrateRequest {
        to,
        to_name,
        ..m.clone()
    };
    let timeout = Duration::from_secs(m.timeout_s.unwrap_or(60).clamp(1, 3600));
    settle(node, m.pid, timeout)?;
    {
        let mut busy = node.busy.lock().unwrap_or_else(|p| p.into_inner());
        if busy.contains_key(&m.pid) {
            return Err(format!("process {} is already being migrated", m.pid));
        }
        busy.insert(m.pid, who);
    }
    let req = pmig_strategies::Request {
        pid: m.pid,
        to: m.to.clone(),
        to_name: m.to_name.clone(),
        strategy,
        timeout,
        precopy,
        page_store: m
            .page_store
            .clone()
            .unwrap_or_else(|| pmig_strategies::DEFAULT_PAGE_STORE.into()),
    };
    // A job of the exec service: its stdio is prepared on the destination and it
    // stays attached to its home.
    let departure = match pmig_services::exec::remote::depart(node, m.pid, &m.to) {
        None => None,
        Some(Ok(d)) => Some(d),
        Some(Err(e)) => {
            node.busy
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&m.pid);
            return Err(e.to_string());
        }
    };
    let notes = match departure {
        None => left_behind(node.node(), m.pid),
        Some(_) => Vec::new(),
    };
    let noted = |o: &pmig_strategies::Outcome| pmig_strategies::Outcome {
        notes: notes.iter().cloned().chain(new_ids(o)).collect(),
        ..o.clone()
    };
    let departure = Mutex::new(departure);
    // A job's new node takes it over at the handover too.
    let mut at_handover = |o: &pmig_strategies::Outcome| {
        if let Some(d) = departure.lock().unwrap_or_else(|p| p.into_inner()).take() {
            d.finish(Some(o.new_pid));
        }
        handed_over(&noted(o));
    };
    let r =
        pmig_strategies::migrate_with(node, &req, progress, &mut at_handover).map(|o| noted(&o));
    if let Some(d) = departure.lock().unwrap_or_else(|p| p.into_inner()).take() {
        d.finish(r.as_ref().ok().map(|o| o.new_pid));
    }
    node.busy
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&m.pid);
    if r.is_ok() {
        node.arrived
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&m.pid);
    }
    r.map_err(|e| e.to_string())
}

/// The report's line for a process restored under another pid than its
/// own (its pid was not free on the destination: in a local test cluster
/// without `--pid-ns`, where the frozen original holds it, always).
fn new_ids(o: &pmig_strategies::Outcome) -> Option<String> {
    (o.new_pid != o.pid).then(|| {
        format!(
            "pid {} was not free on {}, so it runs there under new ids (pid {}): the restore rewrote the copies of its thread ids that glibc and the Go runtime keep, and anything else it remembered of its old ids is stale (README, \"Known limitations\")",
            o.pid, o.destination, o.new_pid
        )
    })
}

/// What stays on this node when process `pid` moves without a home (it is
/// not a job of `pmig run`), one line each for the report: a pipe (but not
/// a read end with bytes left and no writer, which moves with the process),
/// a unix socket that leads out of it, or a terminal on its stdio, which
/// the destination replaces with `/dev/null` (stdin) or a file of its own
/// (stdout, stderr), and a parent, which sees it end killed once the move
/// is complete.
fn left_behind(node: &str, pid: i32) -> Vec<String> {
    let mut notes = Vec::new();
    for (fd, name) in [(0, "stdin"), (1, "stdout"), (2, "stderr")] {
        let Ok(link) = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")) else {
            continue;
        };
        let link = link.to_string_lossy().into_owned();
        let kind = if link.starts_with("pipe:") {
            if pmig_engine::resources::pipes::unread_left(pid, fd) {
                // Held by the process alone: it moves with the process.
                continue;
            }
            "a pipe"
        } else if link.starts_with("/dev/pts/") || link.starts_with("/dev/tty") {
            "a terminal"
        } else if let Some(ino) = pmig_engine::resources::socketpairs::inode_of(&link) {
            if !pmig_engine::resources::socketpairs::leads_out(pid, ino) {
                // One end of a pair it holds alone: it moves too.
                continue;
            }
            "a unix socket"
        } else {
            continue;
        };
        let now = if fd == 0 {
            "reads /dev/null"
        } else {
            "writes to a file in the procs/ directory of the destination daemon's state directory"
        };
        notes.push(format!(
            "its {name} was {kind} ({link}) on {node}, which does not follow it: it now {now}"
        ));
    }
    let ppid = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("PPid:").map(|v| v.trim().parse::<i32>()))
        })
        .and_then(|v| v.ok());
    if let Some(ppid) = ppid.filter(|&p| p > 1 && p as u32 != std::process::id()) {
        let comm = std::fs::read_to_string(format!("/proc/{ppid}/comm")).unwrap_or_default();
        notes.push(format!(
            "its parent {} (pid {ppid}) stays on {node} and sees it end, killed (SIGKILL), once the move is complete; a job started with `pmig run` keeps its exit status at its home",
            comm.trim_end()
        ));
    }
    notes
}

/// Removes staging directories (`pmig-<node>-<daemon pid>-in|out-…`) left behind by
/// earlier daemons of this node that died (killed in the middle of a
/// migration). Only this node's: the staging root may be shared with other
/// nodes (a local cluster's nodes share `/dev/shm`), whose daemons' pids
/// mean nothing here (each node may have a pid namespace of its own).
fn remove_stale_staging(root: &Path, node: &str) {
    let Ok(rd) = std::fs::read_dir(root) else {
        return;
    };
    let ours = format!("pmig-{node}-");
    let mut dead_locks = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(&ours) else {
            continue;
        };
        // A dead daemon's lock, with or without directories left.
        if let Some(pid) = rest
            .strip_suffix(".lock")
            .and_then(|p| p.parse::<i32>().ok())
        {
            daemon_alive(root, node, pid, &mut dead_locks);
            continue;
        }
        let parts: Vec<&str> = rest.splitn(3, '-').collect();
        let (Some(pid), Some(dir)) = (
            parts.first().and_then(|p| p.parse::<i32>().ok()),
            parts.get(1),
        ) else {
            continue;
        };
        if (*dir == "in" || *dir == "out") && !daemon_alive(root, node, pid, &mut dead_locks) {
            match std::fs::remove_dir_all(e.path()) {
                Ok(()) => tracing::info!("removed stale staging directory {}", e.path().display()),
                Err(err) => tracing::warn!("cannot remove {}: {err}", e.path().display()),
            }
        }
    }
    for l in dead_locks {
        let _ = std::fs::remove_file(l);
    }
}

/// The file a daemon of `node` with pid `pid` holds locked while it lives.
fn staging_lock(root: &Path, node: &str, pid: i32) -> PathBuf {
    root.join(format!("pmig-{node}-{pid}.lock"))
}

/// Creates and locks this daemon's [`staging_lock`]; None (with a warning)
/// if it cannot, and its staging directories are then told by its pid only.
fn hold_staging_lock(root: &Path, node: &str) -> Option<File> {
    let path = staging_lock(root, node, std::process::id() as i32);
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .ok()?;
    // SAFETY: flock on a file we just opened.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        tracing::warn!(
            "cannot lock {} ({}): another daemon of {node} with this pid, in another pid namespace?",
            path.display(),
            std::io::Error::last_os_error()
        );
        return None;
    }
    Some(f)
}

/// Whether the daemon of `node` that had pid `pid` still lives. Its lock
/// file says so wherever it runs: a daemon in another pid namespace (a
/// local cluster started with `--pid-ns` shares `/dev/shm`) has a pid that
/// means nothing here. Without a lock file (a daemon of an older pmig), its
/// pid says so. A lock file found unheld is added to `dead`.
fn daemon_alive(root: &Path, node: &str, pid: i32, dead: &mut Vec<PathBuf>) -> bool {
    let path = staging_lock(root, node, pid);
    let Ok(f) = File::open(&path) else {
        return Path::new(&format!("/proc/{pid}")).exists();
    };
    // SAFETY: flock on a file we just opened; the lock goes with `f`.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return true;
    }
    if !dead.contains(&path) {
        dead.push(path);
    }
    false
}

/// The children of this process that have exited and wait to be reaped
/// (the reaper leaves alone those a helper's owner waits for). They are
/// found among the children the daemon's threads list
/// (`/proc/self/task/*/children`): a walk over every process of the machine
/// every 200 ms cost milliseconds of CPU on a busy one.
fn zombie_children(me: i32) -> Vec<i32> {
    let Ok(rd) = std::fs::read_dir("/proc/self/task") else {
        return vec![];
    };
    let mut children = std::collections::BTreeSet::new();
    for e in rd.flatten() {
        let Ok(text) = pmig_engine::procfs::slurp(&format!("{}/children", e.path().display()))
        else {
            continue;
        };
        children.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok()),
        );
    }
    let mut out = Vec::new();
    for pid in children {
        let Ok(stat) = pmig_engine::procfs::slurp(&format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the command name: state ppid …
        let Some(rest) = stat.rsplit_once(')').map(|x| x.1) else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let (state, ppid) = (f.next(), f.next().and_then(|p| p.parse::<i32>().ok()));
        if state == Some("Z") && ppid == Some(me) {
            out.push(pid);
        }
    }
    out
}

fn reaper(node: &Node) {
    let me = std::process::id() as i32;
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let helpers = node.helpers.lock().unwrap_or_else(|p| p.into_inner());
        for pid in zombie_children(me) {
            if helpers.contains(&pid) {
                continue;
            }
            match nix::sys::wait::waitpid(
                nix::unistd::Pid::from_raw(pid),
                Some(nix::sys::wait::WaitPidFlag::WNOHANG),
            ) {
                Ok(nix::sys::wait::WaitStatus::Exited(_, c)) => {
                    tracing::info!("process {pid} exited with status {c}")
                }
                Ok(nix::sys::wait::WaitStatus::Signaled(_, sig, _)) => {
                    tracing::info!("process {pid} was killed by {sig}")
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_goes_out_only_for_transfers_that_last() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let p = |phase: &'static str, done: u64, total: u64| Progress { phase, done, total };
        let mut t = ProgressThrottle::default();
        // A stop's image: a few reports within a millisecond, none sent.
        assert!(!t.pass(&p("transfer", 0, 9000), ms(0)));
        assert!(!t.pass(&p("transfer", 4096, 9000), ms(0)));
        assert!(!t.pass(&p("transfer", 9000, 9000), ms(1)));
        // A long push: from 50 ms on, one report per 50 ms.
        let sent: Vec<u64> = (0..=200)
            .filter(|&k| t.pass(&p("push", k, 200), ms(100 + k)))
            .collect();
        assert_eq!(sent, [50, 100, 150, 200]);
        // Another total is another phase: quiet again at first.
        assert!(!t.pass(&p("push", 0, 300), ms(400)));
        assert!(t.pass(&p("push", 10, 300), ms(450)));
    }

    #[test]
    fn zombie_children_are_found_also_when_the_thread_that_forked_them_is_gone() {
        // Forked by a thread that then ends: the child passes to another
        // thread of the process, whose list names it.
        let mut child = std::thread::spawn(|| std::process::Command::new("true").spawn().unwrap())
            .join()
            .unwrap();
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        // Until it has exited, without reaping it.
        nix::sys::wait::waitid(
            nix::sys::wait::Id::Pid(pid),
            nix::sys::wait::WaitPidFlag::WEXITED | nix::sys::wait::WaitPidFlag::WNOWAIT,
        )
        .unwrap();
        let found = zombie_children(std::process::id() as i32);
        child.wait().unwrap();
        assert!(found.contains(&pid.as_raw()), "{found:?} lacks {pid}");
        assert!(!zombie_children(std::process::id() as i32).contains(&pid.as_raw()));
    }

    #[test]
    fn only_this_nodes_stale_staging_is_removed() {
        let root = tempfile::tempdir().unwrap();
        let me = std::process::id();
        // No such pid (above the kernel's pid_max limit of 2^22).
        let dead = 1 << 23;
        let names = [
            format!("pmig-n1-{dead}-in-n2-7"),
            format!("pmig-n1-{me}-out-n2-8"),
            format!("pmig-n2-{dead}-in-n1-9"),
            format!("pmig-n1x-{dead}-in-n1-10"),
            "pmig-n1-notapid-in-1".to_string(),
        ];
        for n in &names {
            std::fs::create_dir(root.path().join(n)).unwrap();
        }
        remove_stale_staging(root.path(), "n1");
        let left: Vec<bool> = names.iter().map(|n| root.path().join(n).exists()).collect();
        // Only n1's directory of a dead daemon goes: n2's daemon (and its pid)
        // may live in another pid namespace.
        assert_eq!(left, [false, true, true, true, true]);
    }

    #[test]
    fn a_staging_directory_goes_only_when_its_daemons_lock_is_free() {
        let root = tempfile::tempdir().unwrap();
        // Pids that exist nowhere here, as a daemon in another pid
        // namespace has: one holds its lock, one held it and died.
        let (live, dead) = ((1 << 23) + 1, (1 << 23) + 2);
        let names = [
            format!("pmig-n1-{live}-out-n2-7"),
            format!("pmig-n1-{dead}-in-n2-8"),
        ];
        for n in &names {
            std::fs::create_dir(root.path().join(n)).unwrap();
        }
        let held = File::create(staging_lock(root.path(), "n1", live)).unwrap();
        // SAFETY: flock on a file this test just created.
        assert_eq!(
            unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
            0
        );
        File::create(staging_lock(root.path(), "n1", dead)).unwrap();
        // A dead daemon's lock with no directory left goes too.
        let alone = staging_lock(root.path(), "n1", (1 << 23) + 3);
        File::create(&alone).unwrap();
        remove_stale_staging(root.path(), "n1");
        assert!(!alone.exists());
        let left: Vec<bool> = names.iter().map(|n| root.path().join(n).exists()).collect();
        assert_eq!(left, [true, false]);
        assert!(staging_lock(root.path(), "n1", live).exists());
        assert!(!staging_lock(root.path(), "n1", dead).exists());
        // Our own lock, held, keeps our directories.
        let me = std::process::id() as i32;
        let mine = root.path().join(format!("pmig-n1-{me}-in-n2-9"));
        std::fs::create_dir(&mine).unwrap();
        let _lock = hold_staging_lock(root.path(), "n1").unwrap();
        remove_stale_staging(root.path(), "n1");
        assert!(mine.exists());
    }
}
