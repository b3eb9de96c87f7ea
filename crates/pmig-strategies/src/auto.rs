//! `auto`: pick the algorithm per process and link, from measurements made
//! just before the migration starts.
//!
//! Measured:
//! * R, the bytes a dump would move (populated private memory);
//! * D, the dirty rate: bytes written per second over a 200 ms window, with
//!   the same write tracking pre-copy uses (the process runs meanwhile);
//! * B, the link's bandwidth: a probe (a `Ping` with an attachment) timed
//!   to its `Pong`, minus the round-trip time. A first probe of 256 KiB
//!   gives an estimate; unless it took [`PROBE_TIME`] by itself, a second
//!   one sized to take about that long at the estimate (at most 8 MiB) is
//!   the measurement. A slow link costs a fraction of a second, not the
//!   seconds an 8 MiB probe takes on 10 Mbit.
//!
//! Rule (documented in the README):
//! 1. R / B ≤ 50 ms: **stop-copy** — moving everything while stopped costs
//!    little, moves the least data and leaves nothing behind;
//! 2. otherwise, D ≤ 0.2 · B: **pre-copy** — each round shrinks the dirty set
//!    by at least a factor of five, so the final stop is short and nothing is
//!    left behind. Unless the request sets one, pre-copy chosen this way gets
//!    a down-time budget of [`PRE_COPY_BUDGET_MS`] (`--max-down-ms`): after
//!    Noack's rule is met it reruns while the last round took longer than
//!    that to send and rounds still shrink;
//! 3. otherwise: **post-copy** — the process writes faster than pre-copy can
//!    catch up; resuming at once bounds the down time whatever the size, at
//!    the price of a residual dependency while the pages drain.

use crate::clock::mono_ns;
use crate::error::{Result, StrategyError};
use crate::{PreCopyParams, Source, StrategyKind};
use pmig_proto::Msg;
use std::time::Duration;

pub const PROBE_BYTES: usize = 8 << 20;
/// The first, estimating probe.
pub const FIRST_PROBE_BYTES: usize = 256 << 10;
/// About how long the measuring probe should take.
pub const PROBE_TIME: Duration = Duration::from_millis(200);
/// The down-time budget of a pre-copy that `auto` chose (see the rule).
pub const PRE_COPY_BUDGET_MS: f64 = 10.0;
pub const WINDOW: Duration = Duration::from_millis(200);

/// What `auto` measured and chose.
#[derive(Debug, Clone)]
pub struct Choice {
    pub kind: StrategyKind,
    pub rss: u64,
    pub dirty_per_s: f64,
    pub bandwidth: f64,
    pub why: String,
}

/// The rule, separate from the measurements (unit-tested).
pub fn rule(rss: u64, dirty_per_s: f64, bandwidth: f64) -> (StrategyKind, String) {
    let copy_s = rss as f64 / bandwidth.max(1.0);
    if copy_s <= 0.05 {
        (
            StrategyKind::StopCopy,
            format!(
                "copying {:.1} MiB takes {:.0} ms at {:.0} MB/s",
                rss as f64 / 1048576.0,
                copy_s * 1e3,
                bandwidth / 1e6
            ),
        )
    } else if dirty_per_s <= 0.2 * bandwidth {
        (
            StrategyKind::PreCopy,
            format!(
                "dirty rate {:.1} MB/s is at most 0.2 of the bandwidth {:.0} MB/s",
                dirty_per_s / 1e6,
                bandwidth / 1e6
            ),
        )
    } else {
        (
            StrategyKind::PostCopy,
            format!(
                "dirty rate {:.1} MB/s exceeds 0.2 of the bandwidth {:.0} MB/s",
                dirty_per_s / 1e6,
                bandwidth / 1e6
            ),
        )
    }
}

/// The parameters of the strategy chosen, from the request's `p`: a pre-copy
/// gets the down-time budget unless the request set one.
pub fn params_for(kind: StrategyKind, p: PreCopyParams) -> PreCopyParams {
    match kind {
        StrategyKind::PreCopy if p.max_down_ms.is_none() => PreCopyParams {
            max_down_ms: Some(PRE_COPY_BUDGET_MS),
            ..p
        },
        _ => p,
    }
}

/// Measure and choose. The process keeps running; write tracking is removed
/// before this returns.
pub fn choose(m: &mut Source) -> Result<Choice> {
    let pid = m.pid;
    let other = |e: pmig_engine::EngineError| StrategyError::Other(e.to_string());
    let rss: u64 = pmig_engine::resources::memory::saveable_ranges(pid)
        .map_err(other)?
        .iter()
        .map(|r| r.1)
        .sum();
    let dirty = {
        let mut t = pmig_engine::dirty::DirtyTracker::attach(pid).map_err(other)?;
        t.scan().map_err(other)?;
        let t0 = mono_ns();
        std::thread::sleep(WINDOW);
        let d: u64 = t.scan().map_err(other)?.iter().map(|r| r.1).sum();
        d as f64 / ((mono_ns() - t0) as f64 / 1e9)
    };
    let (first, secs) = probe(m, FIRST_PROBE_BYTES, 0x5a5a)?;
    let bandwidth = match second_probe_bytes(first, secs) {
        Some(n) => {
            let (n, secs) = probe(m, n, 0xa5a5)?;
            n as f64 / secs.max(1e-6)
        }
        None => first as f64 / secs.max(1e-6),
    };
    let (kind, why) = rule(rss, dirty, bandwidth);
    tracing::info!(
        "auto for process {pid}: {} ({why}; {:.1} MiB to move)",
        kind,
        rss as f64 / 1048576.0
    );
    Ok(Choice {
        kind,
        rss,
        dirty_per_s: dirty,
        bandwidth,
        why,
    })
}

/// Sends a `Ping` with `bytes` of attachment and waits for its `Pong`;
/// returns the bytes and the seconds they took, less the round trip.
fn probe(m: &mut Source, bytes: usize, tag: u64) -> Result<(usize, f64)> {
    let data = vec![0u8; bytes];
    let seq = m.id ^ tag;
    let t0 = mono_ns();
    m.ch.send_with(&Msg::Ping { seq }, &[&data])?;
    m.count(bytes as u64);
    match m.recv("Pong")? {
        Msg::Pong { seq: s } if s == seq => {}
        other => {
            return Err(StrategyError::Protocol {
                node: m.peer.clone(),
                what: format!("expected Pong, got {}", other.kind()),
            })
        }
    }
    Ok((
        bytes,
        ((mono_ns() - t0).saturating_sub(m.rtt_ns)) as f64 / 1e9,
    ))
}

/// The size of the measuring probe after a first one of `bytes` took
/// `secs`: about [`PROBE_TIME`] at that rate, at most [`PROBE_BYTES`];
/// None when the first took that long already (it is the measurement).
fn second_probe_bytes(bytes: usize, secs: f64) -> Option<usize> {
    let target = PROBE_TIME.as_secs_f64();
    if secs >= target / 2.0 {
        return None;
    }
    let n = (bytes as f64 / secs.max(1e-6) * target) as usize;
    Some(n.clamp(bytes, PROBE_BYTES))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_measuring_probe_takes_about_the_probe_time() {
        // 10 Mbit: 256 KiB took 0.21 s; that is the measurement.
        assert_eq!(second_probe_bytes(256 << 10, 0.21), None);
        // 100 Mbit: 256 KiB in 21 ms -> about 2.5 MB for 200 ms.
        let n = second_probe_bytes(256 << 10, 0.021).unwrap();
        assert!((2_300_000..2_700_000).contains(&n), "{n}");
        // 1 Gbit and faster: capped at 8 MiB.
        assert_eq!(second_probe_bytes(256 << 10, 0.002), Some(PROBE_BYTES));
        assert_eq!(second_probe_bytes(256 << 10, 0.0), Some(PROBE_BYTES));
    }

    #[test]
    fn a_chosen_pre_copy_gets_a_budget_unless_the_request_set_one() {
        let d = PreCopyParams::default();
        assert_eq!(
            params_for(StrategyKind::PreCopy, d).max_down_ms,
            Some(PRE_COPY_BUDGET_MS)
        );
        let own = PreCopyParams {
            max_down_ms: Some(25.0),
            ..d
        };
        assert_eq!(params_for(StrategyKind::PreCopy, own), own);
        assert_eq!(params_for(StrategyKind::PostCopy, d), d);
        assert_eq!(params_for(StrategyKind::StopCopy, d), d);
    }

    #[test]
    fn the_rule() {
        // 10 MiB over 1 GB/s: 10 ms -> stop-copy.
        assert_eq!(rule(10 << 20, 0.0, 1e9).0, StrategyKind::StopCopy);
        // 1 GiB over 1 GB/s, writing 16 MB/s -> pre-copy.
        assert_eq!(rule(1 << 30, 16e6, 1e9).0, StrategyKind::PreCopy);
        // 1 GiB over 100 MB/s, writing 50 MB/s -> post-copy.
        assert_eq!(rule(1 << 30, 50e6, 100e6).0, StrategyKind::PostCopy);
        // The boundary of rule 2 is inclusive.
        assert_eq!(rule(1 << 30, 20e6, 100e6).0, StrategyKind::PreCopy);
    }
}
