//! The figures every migration reports (issue 3, "Every migration reports").

use serde::{Deserialize, Serialize};

/// Bytes sent on the node-to-node connection in each phase (both directions).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseBytes {
    /// While the process still ran on the source.
    pub preparation: u64,
    /// While the process was stopped.
    pub down: u64,
    /// After it resumed on the destination.
    pub post: u64,
}

/// What still lives where after the handover, and until when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Residual {
    /// What remains (e.g. `nothing`, `frozen source copy serving 1234 pages`).
    pub what: String,
    /// The node it remains on, if any.
    pub node: Option<String>,
    /// Until when it remains (e.g. `handover`, `the migrated process exits`).
    pub until: String,
}

/// One migration's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub strategy: String,
    /// From the request to the stop of the process.
    pub preparation_ms: f64,
    /// From the moment the source stops the process to the moment it resumes on the
    /// destination.
    pub down_ms: f64,
    /// From the resume to the end of all residual work.
    pub post_ms: f64,
    pub total_ms: f64,
    pub bytes_total: u64,
    pub bytes_per_phase: PhaseBytes,
    pub pages_sent: u64,
    pub rounds: u32,
    pub remote_faults: u64,
    pub prefetched_pages: u64,
    pub prefetch_hits: u64,
    /// Of `pages_sent`, those sent again as what changed in them since the
    /// copy the destination held (pre-copy's reruns and stop, version-18
    /// peers; `PageDeltas`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pages_as_changes: u64,
    pub residual: Residual,
    /// How long the process's faults on owed pages waited, as its
    /// destination measured them (lazy strategies, version-10 peers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault_waits: Option<FaultWaits>,
    /// Whether the destination restored the process ahead of the stop
    /// (post-copy, ampom, demand-paging, freeze-free with version-11 peers,
    /// assisted-post-copy with version-20 peers;
    /// see `pmig_engine::skeleton`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skeleton: Option<SkeletonUse>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What became of a migration's skeleton.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SkeletonUse {
    /// The skeleton ran: the stop only brought it up to date.
    pub used: bool,
    /// How long its capture paused the process during the preparation.
    pub pause_ms: f64,
    /// Why it was not used (it could not follow a change, or could not be
    /// built), if it was not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why_not: Option<String>,
}

impl SkeletonUse {
    /// One line: "skeleton: used (its capture paused the process 1.2 ms)".
    pub fn line(&self) -> String {
        match &self.why_not {
            None if self.used => format!(
                "skeleton: used (its capture paused the process {:.1} ms during the preparation)",
                self.pause_ms
            ),
            why => format!(
                "skeleton: not used, {} (its capture paused the process {:.1} ms during the preparation)",
                why.as_deref().unwrap_or("for no reason given"),
                self.pause_ms
            ),
        }
    }
}

/// How long faults waited for their pages: from the fault read by the
/// destination to its page installed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FaultWaits {
    pub max_ms: f64,
    pub mean_ms: f64,
    /// Upper bounds of `counts` but the last, which counts the longer ones.
    pub bounds_ms: Vec<u64>,
    pub counts: Vec<u64>,
}

impl FaultWaits {
    /// From the figures of `Msg::FaultWaits`.
    pub fn from_us(max_us: u64, total_us: u64, counts: Vec<u64>) -> FaultWaits {
        let n: u64 = counts.iter().sum();
        FaultWaits {
            max_ms: max_us as f64 / 1e3,
            mean_ms: if n == 0 {
                0.0
            } else {
                total_us as f64 / 1e3 / n as f64
            },
            bounds_ms: pmig_engine::lazy::FAULT_WAIT_BOUNDS_MS.to_vec(),
            counts,
        }
    }

    /// One line: "fault waits: longest 4.1 ms, mean 0.3 ms; ≤5 ms 30, ≤10 ms 2, …".
    pub fn line(&self) -> String {
        let mut parts: Vec<String> = self
            .bounds_ms
            .iter()
            .zip(&self.counts)
            .map(|(b, c)| format!("≤{b} ms {c}"))
            .collect();
        if let (Some(last), Some(c)) =
            (self.bounds_ms.last(), self.counts.get(self.bounds_ms.len()))
        {
            parts.push(format!(">{last} ms {c}"));
        }
        format!(
            "fault waits: longest {:.1} ms, mean {:.2} ms; {}",
            self.max_ms,
            self.mean_ms,
            parts.join(", ")
        )
    }
}

/// A finished migration: the report plus who moved where.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub pid: i32,
    pub new_pid: i32,
    pub comm: String,
    pub source: String,
    pub destination: String,
    #[serde(flatten)]
    pub report: Report,
    /// What did not follow the process (a pipe or terminal on its stdio, a
    /// parent waiting for it, its pid where that was not free), one line
    /// each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Outcome {
    /// One human-readable summary (several lines).
    pub fn summary(&self) -> String {
        let r = &self.report;
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        format!(
            "migrated {} (pid {}) from {} to {} as pid {} with {}\n  \
             down {:.1} ms · preparation {:.1} ms · post {:.1} ms · total {:.1} ms\n  \
             sent {:.1} MiB (preparation {:.1}, down {:.1}, post {:.1}) · {} pages{} · {} rounds\n  \
             remote faults {} · prefetched {} · prefetch hits {}{}\n  \
             residual: {}{} until {}",
            self.comm,
            self.pid,
            self.source,
            self.destination,
            self.new_pid,
            r.strategy,
            r.down_ms,
            r.preparation_ms,
            r.post_ms,
            r.total_ms,
            mib(r.bytes_total),
            mib(r.bytes_per_phase.preparation),
            mib(r.bytes_per_phase.down),
            mib(r.bytes_per_phase.post),
            r.pages_sent,
            if r.pages_as_changes > 0 {
                format!(" ({} as their changes)", r.pages_as_changes)
            } else {
                String::new()
            },
            r.rounds,
            r.remote_faults,
            r.prefetched_pages,
            r.prefetch_hits,
            r.fault_waits
                .as_ref()
                .map(|w| format!("\n  {}", w.line()))
                .unwrap_or_default()
                + &r.skeleton
                    .as_ref()
                    .map(|k| format!("\n  {}", k.line()))
                    .unwrap_or_default(),
            r.residual.what,
            r.residual
                .node
                .as_ref()
                .map(|n| format!(" on {n}"))
                .unwrap_or_default(),
            r.residual.until,
        ) + &self
            .notes
            .iter()
            .map(|n| format!("\n  note: {n}"))
            .collect::<String>()
    }
}
