//! Load balancing (openMosix), opt-in with `pmig daemon --balance`.
//!
//! Every interval the daemon reads every node's load from the host selector's
//! table (the reports the daemons already send, §8.1), measures the CPU share
//! of its movable processes over the interval (`/proc/PID/stat`, user +
//! system time), and asks the policy ([`pmig_services::balance::Balancer`])
//! what to do. **Movable** are the jobs of `pmig run` running here (homed here
//! or elsewhere) and the processes migrated here from another node: never any
//! other process of the node. A move goes through the daemon's own migrate
//! path (a job keeps its home). Every decision is logged (a new decision at
//! `info`, a repeat of the previous hold at `debug`) and kept for `pmig
//! balance status`.

use crate::evict::{self, Foreign};
use crate::Node;
use pmig_services::balance::{Action, Balancer, Candidate, Decision, NodeLoad, Reason, Settings};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The balancer's decisions, newest last.
#[derive(Default)]
pub(crate) struct Decisions(Mutex<VecDeque<Decision>>);

impl Decisions {
    pub(crate) fn list(&self) -> Vec<Decision> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// Keeps `d`, folding it into the previous one if it is the same hold.
    fn record(&self, node: &str, mut d: Decision) {
        let mut q = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(last) = q.back_mut() {
            if d.action == Action::Hold
                && last.action == Action::Hold
                && last.reason == d.reason
                && last.target == d.target
            {
                d.repeat = last.repeat + 1;
                tracing::debug!("balance {node}: hold ({:?}) {}", d.reason, d.text);
                *last = d;
                return;
            }
        }
        match d.action {
            Action::Hold => tracing::info!("balance {node}: hold ({:?}): {}", d.reason, d.text),
            Action::Move => tracing::info!("balance {node}: move: {}", d.text),
            Action::MoveFailed => tracing::warn!("balance {node}: move failed: {}", d.text),
        }
        q.push_back(d);
        while q.len() > pmig_services::balance::MAX_DECISIONS {
            q.pop_front();
        }
    }
}

fn clk_tck() -> f64 {
    // SAFETY: sysconf with a constant name has no side effects.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// The balancer thread.
pub(crate) fn run(node: Arc<Node>, s: Settings) {
    let me = node.cfg.node.clone();
    let tck = clk_tck();
    let mut b = Balancer::new(s.clone());
    // pid → (start time, cpu ticks, when): the previous sample.
    let mut prev: HashMap<i32, (u64, u64, Instant)> = HashMap::new();
    tracing::info!(
        "balance {me}: on; every {:?}, margin {:.2}, patience {}, min age {:?}, min cpu {:.2}, cool-down {:?}, strategy {}",
        s.interval,
        s.margin,
        s.patience,
        s.min_age,
        s.min_cpu,
        s.cooldown,
        s.strategy
    );
    loop {
        std::thread::sleep(s.interval);
        let now = Instant::now();
        let movable = evict::movable(&node, false);
        let mut next = HashMap::new();
        let mut cands = Vec::new();
        for f in &movable {
            let Some((_, cpu, start)) = evict::stat(f.pid) else {
                continue;
            };
            let share = prev.get(&f.pid).and_then(|&(st, c0, t0)| {
                let dt = now.saturating_duration_since(t0).as_secs_f64();
                (st == start && dt > 0.0).then(|| (cpu.saturating_sub(c0) as f64 / tck / dt) as f32)
            });
            next.insert(f.pid, (start, cpu, now));
            cands.push(Candidate {
                pid: f.pid,
                job: f.job.clone(),
                age: f.age,
                cpu: share,
            });
        }
        prev = next;
        let loads: Vec<NodeLoad> = match node.selector.status() {
            Ok((_, rows)) => rows
                .into_iter()
                .map(|r| NodeLoad {
                    eligible: r.state == "idle" || r.state == "busy",
                    node: r.node,
                    load: r.load,
                })
                .collect(),
            Err(e) => {
                node.decisions.record(
                    &me,
                    decision(
                        Action::Hold,
                        Reason::NoLoad,
                        0.0,
                        None,
                        None,
                        format!("no loads: {e}"),
                    ),
                );
                continue;
            }
        };
        let v = b.decide(&me, &loads, &cands, now);
        let Some(c) = v.chosen.clone() else {
            node.decisions.record(
                &me,
                decision(Action::Hold, v.reason, v.load, v.target, None, v.text),
            );
            continue;
        };
        let target = v.target.clone();
        let to = target
            .as_ref()
            .and_then(|(t, _)| node.cfg.peers.iter().find(|p| &p.name == t).cloned());
        let f = movable
            .iter()
            .find(|f| f.pid == c.pid)
            .cloned()
            .unwrap_or(Foreign {
                pid: c.pid,
                job: c.job.clone(),
                home: me.clone(),
                age: c.age,
            });
        let m = evict::move_one(&node, &f, to, "balance".into(), &s.strategy);
        b.moved(Instant::now());
        let (action, text) = match (&m.error, m.new_pid) {
            (None, Some(np)) => (
                Action::Move,
                format!(
                    "{}; moved as pid {np} in {:.0} ms (down {:.0} ms)",
                    v.text,
                    m.ms,
                    m.down_ms.unwrap_or(0.0)
                ),
            ),
            (e, _) => (
                Action::MoveFailed,
                format!(
                    "{}; failed: {}; it keeps running here",
                    v.text,
                    e.as_deref().unwrap_or("unknown error")
                ),
            ),
        };
        node.decisions.record(
            &me,
            decision(action, Reason::Overloaded, v.load, target, Some(&c), text),
        );
    }
}

fn decision(
    action: Action,
    reason: Reason,
    load: f32,
    target: Option<(String, f32)>,
    c: Option<&Candidate>,
    text: String,
) -> Decision {
    Decision {
        at_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
        action,
        reason,
        load,
        target_load: target.as_ref().map(|t| t.1),
        target: target.map(|t| t.0),
        pid: c.map(|c| c.pid),
        job: c.and_then(|c| c.job.clone()),
        age_ms: c.map(|c| c.age.as_millis() as u64),
        cpu: c.and_then(|c| c.cpu),
        repeat: 1,
        text,
    }
}

impl Node {
    /// This node's balancer state.
    pub(crate) fn own_decisions(&self) -> pmig_services::balance::NodeDecisions {
        pmig_services::balance::NodeDecisions {
            node: self.cfg.node.clone(),
            enabled: self.cfg.balance.is_some(),
            decisions: self.decisions.list(),
            evictions: self
                .evictions
                .done
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        }
    }

    /// Every node's balancer state (asked in parallel), and the nodes that did
    /// not answer.
    pub(crate) fn balance_status(
        &self,
    ) -> (Vec<pmig_services::balance::NodeDecisions>, Vec<String>) {
        use pmig_services::balance::{BalMsg, VERSION};
        let me = self.cfg.node.as_str();
        let answers: Vec<(String, Result<BalMsg, String>)> = std::thread::scope(|sc| {
            let hs: Vec<_> = self
                .cfg
                .peers
                .iter()
                .filter(|p| p.name != me)
                .map(|p| {
                    sc.spawn(move || {
                        let m = BalMsg::Status { version: VERSION };
                        (
                            p.name.clone(),
                            evict::ask(self, &p.addr, &m, std::time::Duration::from_secs(5)),
                        )
                    })
                })
                .collect();
            hs.into_iter().filter_map(|h| h.join().ok()).collect()
        });
        let mut nodes = vec![self.own_decisions()];
        let mut unreachable = Vec::new();
        for (n, a) in answers {
            match a {
                Ok(BalMsg::Decisions(d)) => nodes.push(d),
                Ok(other) => unreachable.push(format!("{n} ({other:?})")),
                Err(e) => unreachable.push(format!("{n} ({e})")),
            }
        }
        nodes.sort_by(|a, b| a.node.cmp(&b.node));
        (nodes, unreachable)
    }
}
