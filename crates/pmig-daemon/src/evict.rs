//! Eviction (Sprite): when the owner of this node becomes active, or on `pmig
//! evict`, every foreign process leaves the node.
//!
//! **Foreign processes** are
//! * the jobs of `pmig run` that run here and whose home is another node (the
//!   exec service's table), and
//! * the processes that were migrated here from another node and still run
//!   (recorded when the migration succeeded, with the node they came from and
//!   their start time, so that a reused pid is never mistaken for one).
//!
//! Processes started on this node (jobs homed here included) are never touched.
//!
//! **Where they go** (`--evict-to`): `home` (default) sends a job to its home
//! and a migrated process back to the node it came from; `idle` asks the host
//! selector for idle hosts other than this one (class `long`, one per process,
//! handed out round robin when fewer are granted) and falls back to home when
//! it grants none. The selector allocation is held for the duration of the
//! eviction only.
//!
//! **How**: one at a time, with `--evict-strategy` (default `pre-copy`: no
//! residual dependency on this node, whose owner wants it back, and a short
//! freeze), through the daemon's own migrate path, so that a job stays
//! attached to its home. Sequential rather than concurrent: the moves share
//! one link and two cores; in parallel none would finish sooner and every
//! process would stay frozen longer. A process that cannot be moved keeps
//! running here and the failure is reported in one line.

use crate::control::MigrateRequest;
use crate::Node;
use pmig_services::balance::{self, BalMsg, EvictReport, EvictTo, Moved, VERSION};
use pmig_services::selector::{Class, Client, EvictionHandler, NodeEvent};
use std::collections::HashMap;
use std::sync::{Mutex, Weak};
use std::time::{Duration, Instant};

/// Most eviction reports kept for `pmig balance status`.
const KEEP: usize = 20;

/// The eviction settings (`pmig daemon --evict-to`, `--evict-strategy`).
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub to: EvictTo,
    pub strategy: String,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            to: EvictTo::Home,
            strategy: "pre-copy".into(),
        }
    }
}

/// A process migrated here from another node.
#[derive(Debug, Clone)]
pub(crate) struct Arrived {
    pub from: String,
    /// Start time of the process (`/proc/PID/stat` field 22), against pid reuse.
    pub start: u64,
    pub at: Instant,
}

/// The daemon's eviction state.
#[derive(Default)]
pub(crate) struct Evictions {
    /// One eviction at a time.
    running: Mutex<()>,
    pub(crate) done: Mutex<Vec<EvictReport>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `(state, start time)` of a process from `/proc/PID/stat`.
pub(crate) fn stat(pid: i32) -> Option<(char, u64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = s.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the command: state(0) ppid(1) … utime(11) stime(12) … starttime(19)
    let state = f.first()?.chars().next()?;
    let cpu = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    let start = f.get(19)?.parse().ok()?;
    Some((state, cpu, start))
}

fn alive(pid: i32) -> bool {
    stat(pid).is_some_and(|(st, _, _)| st != 'Z' && st != 'X')
}

impl Node {
    /// A process migrated here from `from` runs here as `pid`.
    pub(crate) fn record_arrival(&self, pid: i32, from: &str) {
        if let Some((_, _, start)) = stat(pid) {
            lock(&self.arrived).insert(
                pid,
                Arrived {
                    from: from.into(),
                    start,
                    at: Instant::now(),
                },
            );
        }
    }

    /// The processes migrated here that still run (stale records dropped).
    pub(crate) fn arrivals(&self) -> HashMap<i32, Arrived> {
        let mut a = lock(&self.arrived);
        a.retain(|pid, r| {
            stat(*pid).is_some_and(|(st, _, start)| start == r.start && st != 'Z' && st != 'X')
        });
        a.clone()
    }
}

/// One foreign process.
#[derive(Debug, Clone)]
pub(crate) struct Foreign {
    pub pid: i32,
    pub job: Option<String>,
    /// Its home (job), or the node it came from.
    pub home: String,
    /// Since the job started (cluster-wide), or since it arrived here.
    pub age: Duration,
}

/// The movable processes of this node: with `foreign_only`, only those whose
/// home is elsewhere (eviction); otherwise also the jobs that run on their
/// home node (load balancing). Processes being migrated are left out.
pub(crate) fn movable(node: &Node, foreign_only: bool) -> Vec<Foreign> {
    let me = node.cfg.node.as_str();
    let busy = lock(&node.busy).clone();
    let now_ms = now_ms();
    let mut out: Vec<Foreign> = Vec::new();
    for j in node.exec.running_here() {
        if j.pid <= 0 || busy.contains_key(&j.pid) || !alive(j.pid) {
            continue;
        }
        if foreign_only && j.home == me {
            continue;
        }
        out.push(Foreign {
            pid: j.pid,
            job: Some(j.id.clone()),
            home: j.home.clone(),
            age: Duration::from_millis(now_ms.saturating_sub(j.started_ms)),
        });
    }
    for (pid, a) in node.arrivals() {
        if busy.contains_key(&pid) || out.iter().any(|f| f.pid == pid) {
            continue;
        }
        out.push(Foreign {
            pid,
            job: None,
            home: a.from.clone(),
            age: a.at.elapsed(),
        });
    }
    out.sort_by_key(|f| f.pid);
    out
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Evicts every foreign process of this node; waits until each has moved or
/// failed. `reason` says what caused it.
pub(crate) fn evict(node: &Node, reason: &str) -> EvictReport {
    let _one = lock(&node.evictions.running);
    let t0 = Instant::now();
    let started_ms = now_ms();
    let me = node.cfg.node.clone();
    let foreign = movable(node, true);
    tracing::info!(
        "eviction on {me} ({reason}): {} foreign process{} to move ({:?}, {})",
        foreign.len(),
        if foreign.len() == 1 { "" } else { "es" },
        node.cfg.evict.to,
        node.cfg.evict.strategy
    );
    // Idle hosts, if asked for; held until the eviction ends.
    let mut why_home = "home".to_string();
    let mut idle: Vec<pmig_services::Peer> = Vec::new();
    let mut _client: Option<Client> = None;
    if node.cfg.evict.to == EvictTo::Idle && !foreign.is_empty() {
        match request_idle(node, foreign.len() as u32) {
            Ok((c, hosts)) => {
                idle = hosts;
                _client = Some(c);
            }
            Err(e) => {
                tracing::info!("eviction on {me}: no idle host ({e}); sending processes home");
                why_home = format!("home (no idle host: {e})");
            }
        }
    }
    let mut moved = Vec::new();
    for (i, f) in foreign.iter().enumerate() {
        let (to, why) = match idle.get(i % idle.len().max(1)) {
            Some(p) if !idle.is_empty() => (Some(p.clone()), "idle host".to_string()),
            _ => (
                node.cfg
                    .peers
                    .iter()
                    .find(|p| p.name == f.home && p.name != me)
                    .cloned(),
                why_home.clone(),
            ),
        };
        moved.push(move_one(node, f, to, why, &node.cfg.evict.strategy));
    }
    let r = EvictReport {
        node: me,
        reason: reason.into(),
        started_ms,
        total_ms: t0.elapsed().as_secs_f64() * 1000.0,
        moved,
    };
    for l in r.lines() {
        tracing::info!("eviction: {l}");
    }
    let mut d = lock(&node.evictions.done);
    d.push(r.clone());
    let n = d.len();
    if n > KEEP {
        d.drain(..n - KEEP);
    }
    r
}

/// How long an eviction waits for this daemon to find the host selector.
const SELECTOR_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

fn request_idle(
    node: &Node,
    count: u32,
) -> Result<(Client, Vec<pmig_services::Peer>), pmig_services::selector::SelectorError> {
    // Right after this daemon starts, its reporting thread may not have
    // found the selector yet: wait for it a little (bounded).
    let t0 = std::time::Instant::now();
    let sel = loop {
        if let Some(s) = node.selector.current() {
            break s;
        }
        if t0.elapsed() >= SELECTOR_WAIT {
            return Err(pmig_services::selector::SelectorError::NoSelector(format!(
                "none found within {SELECTOR_WAIT:?}"
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let label = format!("eviction from {}", node.cfg.node);
    let mut c = Client::direct(&sel.addr, &node.key, &node.cfg.node, &label)?;
    let hosts = c.request_excluding(Class::Long, count, std::slice::from_ref(&node.cfg.node))?;
    Ok((c, hosts))
}

/// Moves one process to `to` with `strategy`, timing it.
pub(crate) fn move_one(
    node: &Node,
    f: &Foreign,
    to: Option<pmig_services::Peer>,
    why: String,
    strategy: &str,
) -> Moved {
    let t0 = Instant::now();
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", f.pid))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default();
    let strategy = strategy.to_string();
    let mut m = Moved {
        pid: f.pid,
        comm,
        job: f.job.clone(),
        home: f.home.clone(),
        to: to.as_ref().map(|p| p.name.clone()),
        why,
        strategy: strategy.clone(),
        new_pid: None,
        ms: 0.0,
        down_ms: None,
        error: None,
    };
    let Some(to) = to else {
        m.error = Some(format!("its home {} is not a known peer", f.home));
        return m;
    };
    let req = MigrateRequest {
        pid: f.pid,
        to: to.addr.clone(),
        to_name: Some(to.name.clone()),
        strategy,
        timeout_s: None,
        max_rounds: None,
        max_dirty_fraction: None,
        max_down_ms: None,
        page_store: None,
    };
    let r = crate::migrate_core(node, crate::Requester::ROOT, &req, &mut |_| {}, &mut |_| {});
    m.ms = t0.elapsed().as_secs_f64() * 1000.0;
    match r {
        Ok(o) => {
            m.new_pid = Some(o.new_pid);
            m.down_ms = Some(o.report.down_ms);
            m.strategy = o.report.strategy;
        }
        Err(e) => m.error = Some(e),
    }
    m
}

/// The daemon's [`EvictionHandler`]: owner activity and evict orders (from the
/// selector's admin connections) start an eviction in the background.
#[derive(Debug)]
pub(crate) struct DaemonEvictions(pub Weak<Node>);

impl EvictionHandler for DaemonEvictions {
    fn handle(&self, ev: &NodeEvent) {
        let reason = match ev {
            NodeEvent::OwnerActive { node } => {
                tracing::info!("eviction: owner active on {node}: foreign processes leave");
                "owner active".to_string()
            }
            NodeEvent::Evict { node, by } => {
                tracing::info!("eviction: asked by {by} to evict the foreign processes of {node}");
                format!("asked by {by}")
            }
            NodeEvent::Reclaimed {
                host,
                class,
                from,
                to,
            } => {
                // The fairness reclaim takes the allocation back; the work on it
                // (started by `from`) is not moved: it was placed there legitimately.
                tracing::info!(
                    "eviction: host {host} ({class}) reclaimed from {from} for {to}; its work stays"
                );
                return;
            }
        };
        let Some(node) = self.0.upgrade() else {
            return;
        };
        let r = std::thread::Builder::new()
            .name("evict".into())
            .spawn(move || {
                evict(&node, &reason);
            });
        if let Err(e) = r {
            tracing::error!("cannot start the eviction thread: {e}");
        }
    }
}

fn proto_config(node: &Node) -> pmig_proto::Config {
    let mut c = pmig_proto::Config::new(node.cfg.node.clone());
    c.handshake_timeout = Some(Duration::from_secs(5));
    c
}

/// Longest wait for another node's eviction report.
const REMOTE_EVICTION: Duration = Duration::from_secs(900);

impl Node {
    /// Evicts `target` (this node by default), waiting for the report; another
    /// node is asked over the balance service.
    pub(crate) fn evict_node(&self, target: Option<&str>, by: &str) -> Result<EvictReport, String> {
        let me = self.cfg.node.as_str();
        let target = target.unwrap_or(me);
        if target == me {
            tracing::info!("evict requested on {me} by {by}");
            return Ok(evict(self, &format!("asked by {by}")));
        }
        let p = self
            .cfg
            .peers
            .iter()
            .find(|p| p.name == target)
            .ok_or_else(|| {
                format!(
                    "unknown node `{target}` (peers: {})",
                    self.cfg
                        .peers
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })?;
        ask(
            self,
            &p.addr,
            &BalMsg::Evict {
                version: VERSION,
                by: by.into(),
            },
            REMOTE_EVICTION,
        )
        .and_then(|m| match m {
            BalMsg::Evicted(r) => Ok(r),
            BalMsg::Refused { text } => Err(text),
            other => Err(format!("{target} answered {other:?}")),
        })
        .map_err(|e| format!("eviction of {target}: {e}"))
    }
}

/// One request of the balance service to the daemon at `addr`.
pub(crate) fn ask(node: &Node, addr: &str, m: &BalMsg, wait: Duration) -> Result<BalMsg, String> {
    let mut ch = pmig_proto::blocking::connect(addr, &node.key, &proto_config(node))
        .map_err(|e| e.to_string())?;
    let _ = ch.stream().set_read_timeout(Some(wait));
    let _ = ch.stream().set_write_timeout(Some(Duration::from_secs(10)));
    let (tx, rx) = ch.halves();
    balance::send(tx, m).map_err(|e| e.to_string())?;
    balance::recv(rx).map_err(|e| e.to_string())
}
