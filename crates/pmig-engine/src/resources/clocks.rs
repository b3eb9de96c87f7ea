//! Clocks: the process's CLOCK_MONOTONIC and CLOCK_BOOTTIME keep running
//! where it moves, instead of jumping to the new node's (which started at
//! another time): deadlines it computed from them (a condition variable's
//! timeout, an absolute sleep, its own timestamps) keep their meaning, and
//! they never go back.
//!
//! Capture: how far each clock, as the process sees it (its time
//! namespace's offsets, `/proc/PID/timens_offsets`, included), is from the
//! wall clock. Restore: where the same distance to the wall clock differs
//! from this node's clocks (another node, or a process that was in a time
//! namespace), the process is created in a new time namespace whose offsets
//! make up the difference. The wall clocks of the nodes are the common
//! reference, so the continuity is as good as their synchronisation (NTP:
//! milliseconds). On the same kernel the distances agree and nothing is
//! made.

use super::{Capture, Preflight, Resource};
use crate::error::{EngineError, Result};
use serde::{Deserialize, Serialize};

pub struct Clocks;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClocksState {
    /// The process's CLOCK_MONOTONIC minus CLOCK_REALTIME at the capture, ns.
    pub monotonic_minus_realtime_ns: i64,
    /// The process's CLOCK_BOOTTIME minus CLOCK_REALTIME at the capture, ns.
    pub boottime_minus_realtime_ns: i64,
}

/// Differences below this are the noise of reading two clocks one after
/// the other, not a different clock.
const SAME_CLOCK_NS: i64 = 1_000_000;

fn now_ns(id: nix::time::ClockId) -> i64 {
    // Every clock used here exists on any kernel pmig runs on.
    let t = nix::time::clock_gettime(id).expect("clock_gettime");
    t.tv_sec() * 1_000_000_000 + t.tv_nsec()
}

/// A reading whose two wall-clock reads lie closer than this is taken at
/// once: its error is at most half of it.
const CLOSE_READ_NS: i64 = 20_000;

/// Readings taken at most, the closest kept: a thread preempted between
/// the two wall-clock reads (a 4 ms tick on a loaded machine, a vCPU the
/// host took away) would otherwise misplace the other clocks by
/// milliseconds, and a skeleton would be found stale for it.
const READS: usize = 8;

/// This node's monotonic and boot-time clocks minus its wall clock, ns:
/// of [`READS`] readings, the one with the wall clock read twice closest
/// together (the others read between them).
fn host_distances() -> (i64, i64) {
    use nix::time::ClockId;
    let mut best: Option<(i64, (i64, i64))> = None;
    for _ in 0..READS {
        let r1 = now_ns(ClockId::CLOCK_REALTIME);
        let mono = now_ns(ClockId::CLOCK_MONOTONIC);
        let boot = now_ns(ClockId::CLOCK_BOOTTIME);
        let r2 = now_ns(ClockId::CLOCK_REALTIME);
        let (spread, real) = (r2 - r1, r1 + (r2 - r1) / 2);
        if best.is_none_or(|(s, _)| spread < s) {
            best = Some((spread, (mono - real, boot - real)));
        }
        if spread < CLOSE_READ_NS {
            break;
        }
    }
    best.expect("at least one reading").1
}

/// The offsets of a time namespace (`/proc/PID/timens_offsets`): monotonic
/// and boottime, ns. Lines are `monotonic <secs> <nanosecs>`.
fn parse_offsets(text: &str) -> (i64, i64) {
    let mut out = (0, 0);
    for l in text.lines() {
        let mut it = l.split_whitespace();
        let (Some(clock), Some(s), Some(ns)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        let (Ok(s), Ok(ns)) = (s.parse::<i64>(), ns.parse::<i64>()) else {
            continue;
        };
        let v = s * 1_000_000_000 + ns;
        match clock {
            "monotonic" | "1" => out.0 = v,
            "boottime" | "7" => out.1 = v,
            _ => {}
        }
    }
    out
}

/// `offset` ns as a `timens_offsets` line's seconds and nanoseconds
/// (nanoseconds in [0, 1e9), as the kernel wants them).
fn split_ns(offset: i64) -> (i64, i64) {
    (
        offset.div_euclid(1_000_000_000),
        offset.rem_euclid(1_000_000_000),
    )
}

/// The time namespace offsets that give a process `s`'s clocks here, or
/// None where this node's clocks already do (within [`SAME_CLOCK_NS`]).
fn offsets_for(s: &ClocksState, host: (i64, i64)) -> Option<(i64, i64)> {
    let mono = s.monotonic_minus_realtime_ns - host.0;
    let boot = s.boottime_minus_realtime_ns - host.1;
    (mono.abs() >= SAME_CLOCK_NS || boot.abs() >= SAME_CLOCK_NS).then_some((mono, boot))
}

/// Why a skeleton made from `pre` does not stand for `fin`: the clocks
/// moved against the wall clock by a millisecond or more (a step of the
/// wall clock, a suspend), or None.
fn moved(pre: &ClocksState, fin: &ClocksState) -> Option<String> {
    let mono = fin.monotonic_minus_realtime_ns - pre.monotonic_minus_realtime_ns;
    let boot = fin.boottime_minus_realtime_ns - pre.boottime_minus_realtime_ns;
    (mono.abs() >= SAME_CLOCK_NS || boot.abs() >= SAME_CLOCK_NS).then(|| {
        format!(
            "its clocks moved against the wall clock (monotonic by {:+.3} ms, boot time by {:+.3} ms)",
            mono as f64 / 1e6,
            boot as f64 / 1e6
        )
    })
}

impl Resource for Clocks {
    const PART: &'static str = "clocks";
    type State = ClocksState;

    fn capture(cx: &mut Capture) -> Result<ClocksState> {
        // Absent without time namespaces: the process sees the host's clocks.
        let ns = crate::procfs::read(cx.pid, "timens_offsets")
            .map(|t| parse_offsets(&t))
            .unwrap_or((0, 0));
        let (mono, boot) = host_distances();
        Ok(ClocksState {
            monotonic_minus_realtime_ns: mono + ns.0,
            boottime_minus_realtime_ns: boot + ns.1,
        })
    }

    /// The skeleton's time namespace was made from `pre`: it stands if
    /// the clocks are still as far from the wall clock (the noise of
    /// reading them aside).
    fn update(
        pre: &ClocksState,
        fin: &ClocksState,
        _same: bool,
        _cx: &mut super::Update,
    ) -> Result<()> {
        match moved(pre, fin) {
            Some(why) => Err(crate::error::stale(why)),
            None => Ok(()),
        }
    }

    /// Runs in `pmig restore` before the process is created: the time
    /// namespace made here is the one its next child (the process) enters.
    fn preflight(s: &ClocksState, _pf: &mut Preflight) -> Result<()> {
        let Some((mono, boot)) = offsets_for(s, host_distances()) else {
            return Ok(());
        };
        let fail = |what: &str, e: std::io::Error| {
            EngineError::Incompatible(format!(
                "cannot keep the process's clocks (monotonic {:+.3} s, boot time {:+.3} s from this node's): {what}: {e}",
                mono as f64 / 1e9,
                boot as f64 / 1e9
            ))
        };
        nix::sched::unshare(nix::sched::CloneFlags::from_bits_retain(
            libc::CLONE_NEWTIME,
        ))
        .map_err(|e| fail("create a time namespace", e.into()))?;
        let (ms, mns) = split_ns(mono);
        let (bs, bns) = split_ns(boot);
        std::fs::write(
            "/proc/self/timens_offsets",
            format!("monotonic {ms} {mns}\nboottime {bs} {bns}\n"),
        )
        .map_err(|e| fail("set its offsets", e))?;
        tracing::info!(
            "the process gets a time namespace: monotonic {:+.3} s, boot time {:+.3} s from this node's clocks",
            mono as f64 / 1e9,
            boot as f64 / 1e9
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_kernels_offsets_file() {
        let t = "monotonic     1000000         0\nboottime     -5       250000000\n";
        assert_eq!(
            parse_offsets(t),
            (1_000_000 * 1_000_000_000, -5 * 1_000_000_000 + 250_000_000)
        );
        assert_eq!(parse_offsets(""), (0, 0));
    }

    #[test]
    fn negative_offsets_split_as_the_kernel_wants() {
        assert_eq!(split_ns(-1), (-1, 999_999_999));
        assert_eq!(split_ns(1_500_000_000), (1, 500_000_000));
        assert_eq!(split_ns(-2_500_000_000), (-3, 500_000_000));
    }

    #[test]
    fn same_clocks_need_no_namespace_and_others_do() {
        let host = host_distances();
        let same = ClocksState {
            monotonic_minus_realtime_ns: host.0,
            boottime_minus_realtime_ns: host.1,
        };
        assert_eq!(offsets_for(&same, host_distances()), None);
        let ahead = ClocksState {
            monotonic_minus_realtime_ns: host.0 + 3_000_000_000,
            boottime_minus_realtime_ns: host.1,
        };
        let (mono, boot) = offsets_for(&ahead, host).unwrap();
        assert_eq!((mono, boot), (3_000_000_000, 0));
    }

    #[test]
    fn a_skeleton_stands_while_the_clocks_keep_their_distance() {
        let pre = ClocksState {
            monotonic_minus_realtime_ns: -1_700_000_000_000_000_000,
            boottime_minus_realtime_ns: -1_699_999_990_000_000_000,
        };
        let mut fin = pre.clone();
        assert_eq!(moved(&pre, &fin), None);
        fin.monotonic_minus_realtime_ns += SAME_CLOCK_NS - 1;
        assert_eq!(moved(&pre, &fin), None, "reading noise");
        fin.boottime_minus_realtime_ns -= 2 * SAME_CLOCK_NS;
        let why = moved(&pre, &fin).expect("a 2 ms step of the wall clock");
        assert!(why.contains("boot time by -2.000 ms"), "{why}");
    }

    #[test]
    fn this_nodes_distances_read_twice_agree() {
        // Each is the closest of several readings: a preemption between
        // the reads of one does not move it.
        let (a, b) = (host_distances(), host_distances());
        assert!((a.0 - b.0).abs() < SAME_CLOCK_NS, "{a:?} {b:?}");
        assert!((a.1 - b.1).abs() < SAME_CLOCK_NS, "{a:?} {b:?}");
    }
}
