//! Eviction and load balancing (service 3, `BALANCE`; `docs/protocol.md` §8.3).
//!
//! This module holds what is independent of the daemon: the messages
//! ([`BalMsg`]), the records of an eviction ([`EvictReport`]) and of the
//! balancer's decisions ([`Decision`]), and the balancing policy itself
//! ([`Balancer`], pure: loads and candidates in, a verdict out). The daemon
//! (`pmig-daemon`, modules `evict` and `balance`) finds the candidates, reads
//! the loads from the host selector and moves processes with its own migrate
//! path.

use pmig_proto::blocking::{Receiver, Sender, Stream};
use pmig_proto::{service, Msg, ProtoError};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Version of [`BalMsg`], carried by every first message.
pub const VERSION: u16 = 1;
/// Decisions kept per node for `pmig balance status`.
pub const MAX_DECISIONS: usize = 200;

#[derive(Debug, thiserror::Error)]
pub enum BalanceError {
    #[error(transparent)]
    Proto(#[from] ProtoError),
    #[error("bad balance message: {0}")]
    Malformed(String),
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Invalid(String),
}

/// Where evicted processes go (`pmig daemon --evict-to`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvictTo {
    /// A job to its home node; a process migrated here to the node it came from.
    Home,
    /// An idle host granted by the selector (not this node); home when none is.
    Idle,
}

impl std::str::FromStr for EvictTo {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "home" => Ok(EvictTo::Home),
            "idle" => Ok(EvictTo::Idle),
            _ => Err(format!("unknown eviction target `{s}` (home or idle)")),
        }
    }
}

/// One foreign process an eviction tried to move.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Moved {
    pub pid: i32,
    pub comm: String,
    /// The job id, if it is a job of `pmig run`.
    pub job: Option<String>,
    /// Its home (job) or the node it was migrated here from.
    pub home: String,
    /// The destination chosen (none: no destination could be found).
    pub to: Option<String>,
    /// Why that destination: `home`, `idle host`, `home (no idle host: …)`.
    pub why: String,
    pub strategy: String,
    /// Its pid on the destination, if it moved.
    pub new_pid: Option<i32>,
    /// From the start of its move until it ran on the destination and nothing
    /// of it was left here (or until the move failed), in ms.
    pub ms: f64,
    /// The time it was stopped (the migration's `down_ms`), if it moved.
    pub down_ms: Option<f64>,
    /// Why it could not be moved (it keeps running here), one line.
    pub error: Option<String>,
}

/// One eviction of a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvictReport {
    pub node: String,
    /// What caused it (`owner active …`, `pmig evict …`).
    pub reason: String,
    /// When it began, ms since the epoch.
    pub started_ms: u64,
    /// From the event to the last process moved (or given up), in ms.
    pub total_ms: f64,
    pub moved: Vec<Moved>,
}

impl EvictReport {
    /// One line per process, then a summary line.
    pub fn lines(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .moved
            .iter()
            .map(|m| {
                let what = match &m.job {
                    Some(j) => format!("job {j} ({} pid {})", m.comm, m.pid),
                    None => format!("{} (pid {})", m.comm, m.pid),
                };
                match (&m.error, &m.to, m.new_pid) {
                    (None, Some(to), Some(np)) => format!(
                        "{what} → {to} as pid {np} ({}, {}) in {:.0} ms, down {:.0} ms",
                        m.why,
                        m.strategy,
                        m.ms,
                        m.down_ms.unwrap_or(0.0)
                    ),
                    (e, to, _) => format!(
                        "{what} not moved{}: {}; it keeps running on {}",
                        to.as_ref().map(|t| format!(" to {t}")).unwrap_or_default(),
                        e.as_deref().unwrap_or("unknown error"),
                        self.node
                    ),
                }
            })
            .collect();
        let ok = self.moved.iter().filter(|m| m.error.is_none()).count();
        v.push(format!(
            "{}: eviction of {} foreign process{} ({}): {ok} moved, {} failed, {:.0} ms in all",
            self.node,
            self.moved.len(),
            if self.moved.len() == 1 { "" } else { "es" },
            self.reason,
            self.moved.len() - ok,
            self.total_ms
        ));
        v
    }
}

/// What the balancer did in one interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Nothing moved (see the reason).
    Hold,
    /// A process was moved.
    Move,
    /// A move was tried and failed (the process runs on here).
    MoveFailed,
}

/// Why the balancer held (or moved).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Within the cool-down after a move.
    CoolDown,
    /// This node's load is not known yet (no report in the selector's table).
    NoLoad,
    /// No other node can take work (all lost, refusing or owner-active).
    NoTarget,
    /// The difference to the least-loaded node is within the margin.
    Balanced,
    /// Over the margin, but not yet for `patience` consecutive intervals.
    Imbalanced,
    /// Imbalanced long enough, but no movable process is CPU-bound.
    NoCpuBound,
    /// Imbalanced long enough, but every CPU-bound candidate is younger than
    /// the minimum age.
    TooYoung,
    /// Imbalanced for `patience` intervals: the oldest CPU-bound candidate goes.
    Overloaded,
}

/// One decision, as logged and kept for `pmig balance status`. Identical
/// consecutive holds are kept once, with `repeat` counting them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// When (the last repeat), ms since the epoch.
    pub at_ms: u64,
    pub action: Action,
    pub reason: Reason,
    /// This node's load, and the least-loaded other node's.
    pub load: f32,
    pub target: Option<String>,
    pub target_load: Option<f32>,
    /// The process chosen (moves).
    pub pid: Option<i32>,
    pub job: Option<String>,
    pub age_ms: Option<u64>,
    pub cpu: Option<f32>,
    /// Consecutive intervals with this same decision.
    pub repeat: u32,
    /// One line with the numbers.
    pub text: String,
}

/// The balancer's settings (`pmig daemon --balance…`).
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// How often the policy runs (`--balance-interval-ms`, 2000).
    pub interval: Duration,
    /// Processes younger than this never move (`--balance-min-age-secs`, 10).
    pub min_age: Duration,
    /// A candidate must have used at least this share of a CPU over the last
    /// interval (`--balance-min-cpu`, 0.5).
    pub min_cpu: f32,
    /// Move only when this node's load exceeds the least-loaded node's by more
    /// than this (`--balance-margin`, 1.5; at least 1, see [`Balancer`]).
    pub margin: f32,
    /// … for this many consecutive intervals (`--balance-patience`, 3).
    pub patience: u32,
    /// After a move (or a failed one), no decision for this long
    /// (`--balance-cooldown-secs`, 30; a few load time constants).
    pub cooldown: Duration,
    /// The strategy of balancing moves (`--balance-strategy`, pre-copy).
    pub strategy: String,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            interval: Duration::from_secs(2),
            min_age: Duration::from_secs(10),
            min_cpu: 0.5,
            margin: 1.5,
            patience: 3,
            cooldown: Duration::from_secs(30),
            strategy: "pre-copy".into(),
        }
    }
}

/// A node's load as the selector's table shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeLoad {
    pub node: String,
    pub load: f32,
    /// It may take work: fresh report, accepting, owner not active.
    pub eligible: bool,
}

/// A process the balancer may move.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub pid: i32,
    pub job: Option<String>,
    pub age: Duration,
    /// Share of one CPU over the last interval (`None`: not measured yet).
    pub cpu: Option<f32>,
}

/// The balancer's verdict for one interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub reason: Reason,
    pub load: f32,
    pub target: Option<(String, f32)>,
    /// Set when the reason is [`Reason::Overloaded`]: move it to `target`.
    pub chosen: Option<Candidate>,
    pub text: String,
}

/// openMosix-style, conservative: a node moves its oldest CPU-bound process to
/// the least-loaded node when its load has exceeded that node's by more than
/// `margin` for `patience` consecutive intervals, and then holds still for the
/// cool-down. With `margin ≥ 1` one move cannot invite a move back: moving one
/// CPU-bound process from A to B changes `load(A) − load(B)` by −2, so if it
/// was above `m` before, `load(B) − load(A)` is below `2 − m ≤ m` after.
#[derive(Debug)]
pub struct Balancer {
    s: Settings,
    streak: u32,
    cooldown_until: Option<Instant>,
}

impl Balancer {
    pub fn new(s: Settings) -> Balancer {
        Balancer {
            s,
            streak: 0,
            cooldown_until: None,
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.s
    }

    /// One interval's decision for node `me`.
    pub fn decide(
        &mut self,
        me: &str,
        loads: &[NodeLoad],
        cands: &[Candidate],
        now: Instant,
    ) -> Verdict {
        let mine = loads.iter().find(|l| l.node == me).map(|l| l.load);
        let target = loads
            .iter()
            .filter(|l| l.node != me && l.eligible)
            .min_by(|a, b| a.load.total_cmp(&b.load).then(a.node.cmp(&b.node)))
            .map(|l| (l.node.clone(), l.load));
        let v = |reason, load, text: String| Verdict {
            reason,
            load,
            target: target.clone(),
            chosen: None,
            text,
        };
        if let Some(t) = self.cooldown_until {
            if now < t {
                return v(
                    Reason::CoolDown,
                    mine.unwrap_or(0.0),
                    format!(
                        "cool-down after a move: {:.1} s left",
                        (t - now).as_secs_f64()
                    ),
                );
            }
            self.cooldown_until = None;
        }
        let Some(load) = mine else {
            self.streak = 0;
            return v(
                Reason::NoLoad,
                0.0,
                "no load report of this node in the selector's table yet".into(),
            );
        };
        let Some((tn, tl)) = target.clone() else {
            self.streak = 0;
            return v(
                Reason::NoTarget,
                load,
                format!("load {load:.2}; no other node can take work"),
            );
        };
        let diff = load - tl;
        if diff <= self.s.margin {
            self.streak = 0;
            return v(
                Reason::Balanced,
                load,
                format!(
                    "load {load:.2}, least loaded {tn} {tl:.2}: difference {diff:.2} ≤ margin {:.2}",
                    self.s.margin
                ),
            );
        }
        self.streak = self.streak.saturating_add(1);
        if self.streak < self.s.patience {
            return v(
                Reason::Imbalanced,
                load,
                format!(
                    "load {load:.2}, least loaded {tn} {tl:.2}: difference {diff:.2} > margin {:.2} for {}/{} intervals",
                    self.s.margin, self.streak, self.s.patience
                ),
            );
        }
        let busy: Vec<&Candidate> = cands
            .iter()
            .filter(|c| c.cpu.is_some_and(|x| x >= self.s.min_cpu))
            .collect();
        if busy.is_empty() {
            return v(
                Reason::NoCpuBound,
                load,
                format!(
                    "load {load:.2} > {tn} {tl:.2} + {:.2}, but none of {} movable process{} used ≥ {:.2} CPU",
                    self.s.margin,
                    cands.len(),
                    if cands.len() == 1 { "" } else { "es" },
                    self.s.min_cpu
                ),
            );
        }
        let Some(c) = busy
            .iter()
            .filter(|c| c.age >= self.s.min_age)
            .max_by(|a, b| a.age.cmp(&b.age).then(b.pid.cmp(&a.pid)))
        else {
            let oldest = busy.iter().map(|c| c.age).max().unwrap_or_default();
            return v(
                Reason::TooYoung,
                load,
                format!(
                    "load {load:.2} > {tn} {tl:.2} + {:.2}, but the oldest of {} CPU-bound candidates is {:.1} s old (< {:.1} s)",
                    self.s.margin,
                    busy.len(),
                    oldest.as_secs_f64(),
                    self.s.min_age.as_secs_f64()
                ),
            );
        };
        Verdict {
            reason: Reason::Overloaded,
            load,
            target: target.clone(),
            chosen: Some((*c).clone()),
            text: format!(
                "load {load:.2} > {tn} {tl:.2} + {:.2} for {} intervals: move pid {}{} (age {:.1} s, cpu {:.2}) to {tn}",
                self.s.margin,
                self.streak,
                c.pid,
                c.job.as_ref().map(|j| format!(" (job {j})")).unwrap_or_default(),
                c.age.as_secs_f64(),
                c.cpu.unwrap_or(0.0)
            ),
        }
    }

    /// A move was made (or tried): hold still for the cool-down.
    pub fn moved(&mut self, now: Instant) {
        self.streak = 0;
        self.cooldown_until = Some(now + self.s.cooldown);
    }
}

/// The messages of service 3 (postcard, the attachment of
/// `Msg::Service { BALANCE }`). Variant indices are wire format: append only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum BalMsg {
    /// 0, first: evict this node's foreign processes (root's `pmig evict` on
    /// another node, `by` says who); answered by `Evicted` when done.
    Evict { version: u16, by: String },
    /// 1: the eviction's report.
    Evicted(EvictReport),
    /// 2, first: the balancer's recent decisions; answered by `Decisions`.
    Status { version: u16 },
    /// 3: answer to `Status`.
    Decisions(NodeDecisions),
    /// 4: a refusal, one line.
    Refused { text: String },
}

/// One node's balancer state for `pmig balance status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeDecisions {
    pub node: String,
    /// `--balance` is on.
    pub enabled: bool,
    /// Oldest first.
    pub decisions: Vec<Decision>,
    /// The evictions of this node since its daemon started (the last 20).
    pub evictions: Vec<EvictReport>,
}

impl BalMsg {
    pub fn encode(&self) -> Result<Vec<u8>, BalanceError> {
        postcard::to_allocvec(self).map_err(|e| BalanceError::Malformed(e.to_string()))
    }
    pub fn decode(b: &[u8]) -> Result<BalMsg, BalanceError> {
        postcard::from_bytes(b).map_err(|e| BalanceError::Malformed(e.to_string()))
    }
}

/// Sends one balance message.
pub fn send<S: Stream>(tx: &mut Sender<S>, m: &BalMsg) -> Result<(), BalanceError> {
    Ok(tx.send_with(
        &Msg::Service {
            service: service::BALANCE,
        },
        &[&m.encode()?],
    )?)
}

/// Receives one balance message.
pub fn recv<S: Stream>(rx: &mut Receiver<S>) -> Result<BalMsg, BalanceError> {
    let i = rx.recv_with()?;
    match &i.msg {
        Msg::Service {
            service: service::BALANCE,
        } => BalMsg::decode(i.attachment()),
        Msg::Error { text, .. } => Err(BalanceError::Refused(text.clone())),
        other => Err(BalanceError::Malformed(format!(
            "{} instead of a balance message",
            other.kind()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loads(v: &[(&str, f32)]) -> Vec<NodeLoad> {
        v.iter()
            .map(|(n, l)| NodeLoad {
                node: n.to_string(),
                load: *l,
                eligible: true,
            })
            .collect()
    }

    fn cand(pid: i32, age: u64, cpu: f32) -> Candidate {
        Candidate {
            pid,
            job: None,
            age: Duration::from_secs(age),
            cpu: Some(cpu),
        }
    }

    fn quick() -> Settings {
        Settings {
            patience: 2,
            ..Settings::default()
        }
    }

    #[test]
    fn moves_the_oldest_cpu_bound_process_after_patience_then_cools_down() {
        let mut b = Balancer::new(quick());
        let t = Instant::now();
        let l = loads(&[("n1", 0.2), ("n2", 3.0), ("n3", 1.0)]);
        let c = vec![cand(10, 20, 0.9), cand(11, 30, 0.9), cand(12, 60, 0.01)];
        assert_eq!(b.decide("n2", &l, &c, t).reason, Reason::Imbalanced);
        let v = b.decide("n2", &l, &c, t);
        assert_eq!(v.reason, Reason::Overloaded);
        assert_eq!(
            v.chosen.unwrap().pid,
            11,
            "oldest CPU-bound, not the idle one"
        );
        assert_eq!(v.target.unwrap().0, "n1");
        b.moved(t);
        let later = t + Duration::from_secs(5);
        assert_eq!(b.decide("n2", &l, &c, later).reason, Reason::CoolDown);
        // After the cool-down the streak starts again.
        let after = t + Duration::from_secs(31);
        assert_eq!(b.decide("n2", &l, &c, after).reason, Reason::Imbalanced);
    }

    #[test]
    fn holds_within_the_margin_and_for_young_or_idle_processes() {
        let mut b = Balancer::new(quick());
        let t = Instant::now();
        let l = loads(&[("n1", 1.0), ("n2", 2.4)]);
        assert_eq!(b.decide("n2", &l, &[], t).reason, Reason::Balanced);
        let l = loads(&[("n1", 0.0), ("n2", 3.0)]);
        b.decide("n2", &l, &[], t);
        assert_eq!(b.decide("n2", &l, &[], t).reason, Reason::NoCpuBound);
        let young = vec![cand(5, 3, 1.0)];
        let v = b.decide("n2", &l, &young, t);
        assert_eq!(v.reason, Reason::TooYoung);
        assert!(v.chosen.is_none());
        // Not measured yet counts as not CPU-bound.
        let unmeasured = vec![Candidate {
            cpu: None,
            ..cand(6, 100, 0.0)
        }];
        assert_eq!(
            b.decide("n2", &l, &unmeasured, t).reason,
            Reason::NoCpuBound
        );
    }

    #[test]
    fn no_move_back_after_a_move_with_margin_one_or_more() {
        // A: 3 CPU-bound, B: 0. Each move shifts one unit of load.
        for m in [1.0f32, 1.5, 2.0] {
            let s = Settings {
                margin: m,
                patience: 1,
                cooldown: Duration::ZERO,
                ..Settings::default()
            };
            let (mut a, mut bb) = (Balancer::new(s.clone()), Balancer::new(s));
            let (mut la, mut lb) = (3.0f32, 0.0f32);
            let mut moves = 0;
            let t = Instant::now();
            for _ in 0..10 {
                let l = loads(&[("a", la), ("b", lb)]);
                let c = vec![cand(1, 100, 1.0)];
                if a.decide("a", &l, &c, t).chosen.is_some() {
                    la -= 1.0;
                    lb += 1.0;
                    moves += 1;
                    a.moved(t);
                }
                let l = loads(&[("a", la), ("b", lb)]);
                assert!(
                    bb.decide("b", &l, &c, t).chosen.is_none(),
                    "margin {m}: b moved back at a {la} b {lb}"
                );
            }
            assert!((1..=2).contains(&moves), "margin {m}: {moves} moves");
        }
    }

    #[test]
    fn ineligible_nodes_are_no_target_and_messages_round_trip() {
        let mut b = Balancer::new(quick());
        let mut l = loads(&[("n1", 0.0), ("n2", 3.0)]);
        l[0].eligible = false;
        assert_eq!(
            b.decide("n2", &l, &[], Instant::now()).reason,
            Reason::NoTarget
        );
        let m = BalMsg::Evict {
            version: VERSION,
            by: "x".into(),
        };
        assert_eq!(BalMsg::decode(&m.encode().unwrap()).unwrap(), m);
        assert!("idle".parse::<EvictTo>().is_ok() && "x".parse::<EvictTo>().is_err());
    }
}
