//! Timers: interval timers (alarm, ITIMER_REAL/VIRTUAL/PROF) and POSIX
//! timers (timer_create), which come back under their original ids
//! (`PR_TIMER_CREATE_RESTORE_IDS`, Linux 6.17+) with their clock, signal,
//! target thread and remaining time.

use super::{Capture, PlanCx, Resource};
use crate::error::{unsupported, EngineError, Result};
use libc::pid_t;
use pmig_restorer::Check;
use serde::{Deserialize, Serialize};

pub struct Timers;

const PR_TIMER_CREATE_RESTORE_IDS: i32 = 77;
const SIGEV_SIGNAL: i32 = 0;
const SIGEV_NONE: i32 = 1;
const SIGEV_THREAD_ID: i32 = 4;

/// One POSIX timer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PosixTimer {
    pub id: i32,
    pub clock: i32,
    pub signo: i32,
    pub value: u64,
    /// SIGEV_SIGNAL, SIGEV_NONE, or SIGEV_THREAD_ID (| SIGEV_SIGNAL).
    pub notify: i32,
    /// The thread signalled, for SIGEV_THREAD_ID.
    pub tid: pid_t,
    /// struct itimerspec: interval sec/nsec, value sec/nsec.
    pub spec: [u64; 4],
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TimersState {
    /// struct itimerval (interval sec/usec, value sec/usec) per ITIMER_*.
    pub itimers: Vec<[u64; 4]>,
    pub posix: Vec<PosixTimer>,
}

/// Parse /proc/PID/timers (everything but the remaining time).
pub fn parse_proc_timers(pid: pid_t, text: &str) -> Result<Vec<PosixTimer>> {
    let mut out: Vec<PosixTimer> = Vec::new();
    let bad = |l: &str| unsupported(pid, format!("a POSIX timer this pmig cannot read ({l})"));
    for l in text.lines() {
        if let Some(v) = l.strip_prefix("ID:") {
            out.push(PosixTimer {
                id: v.trim().parse().map_err(|_| bad(l))?,
                clock: 0,
                signo: 0,
                value: 0,
                notify: 0,
                tid: 0,
                spec: [0; 4],
            });
            continue;
        }
        let Some(t) = out.last_mut() else { continue };
        if let Some(v) = l.strip_prefix("signal:") {
            let (sig, val) = v.trim().split_once('/').ok_or_else(|| bad(l))?;
            t.signo = sig.parse().map_err(|_| bad(l))?;
            t.value = u64::from_str_radix(val.trim_start_matches("0x"), 16).map_err(|_| bad(l))?;
        } else if let Some(v) = l.strip_prefix("notify:") {
            // "<signal|none|thread>/<pid|tid>.N"
            let (kind, who) = v.trim().split_once('/').ok_or_else(|| bad(l))?;
            let (scope, n) = who.split_once('.').ok_or_else(|| bad(l))?;
            t.notify = match kind {
                "signal" => SIGEV_SIGNAL,
                "none" => SIGEV_NONE,
                _ => return Err(bad(l)),
            };
            if scope == "tid" {
                t.notify |= SIGEV_THREAD_ID;
                t.tid = n.parse().map_err(|_| bad(l))?;
            }
        } else if let Some(v) = l.strip_prefix("ClockID:") {
            t.clock = v.trim().parse().map_err(|_| bad(l))?;
        }
    }
    Ok(out)
}

/// An ITIMER_REAL as `getitimer` read it (interval s, µs, value s, µs): a
/// zero value with an interval means expired and not yet re-armed (the
/// kernel re-arms it when the SIGALRM is taken); it then gets one interval.
fn rearmed_real(t: [u64; 4]) -> [u64; 4] {
    let [is, ius, vs, vus] = t;
    if vs == 0 && vus == 0 && (is != 0 || ius != 0) {
        [is, ius, is, ius]
    } else {
        t
    }
}

impl Timers {
    /// The calls its capture makes in the process (see [`Capture::ask`]):
    /// the three interval timers, 32 bytes each.
    pub(crate) fn ask(cx: &mut Capture) -> Result<()> {
        cx.ask(Self::PART, 96, |out| {
            (0..3u64)
                .map(|w| (libc::SYS_getitimer, vec![w, out + w * 32]))
                .collect()
        })
    }
}

impl Resource for Timers {
    const PART: &'static str = "timers";
    type State = TimersState;

    fn precheck(pid: pid_t) -> Result<()> {
        let text = crate::procfs::read(pid, "timers").unwrap_or_default();
        for t in parse_proc_timers(pid, &text)? {
            // CPU-time clocks of other processes or threads encode a pid.
            if t.clock < 0 {
                return Err(unsupported(
                    pid,
                    format!(
                        "a POSIX timer on a CPU-time clock of another task (timer {})",
                        t.id
                    ),
                ));
            }
        }
        Ok(())
    }

    fn capture(cx: &mut Capture) -> Result<TimersState> {
        let (res, raw) = cx.answers(Self::PART, Timers::ask)?;
        let scratch = cx.scratch()?;
        let mut itimers = Vec::new();
        for w in 0..3usize {
            let v = |i: usize| {
                raw.get(w * 32 + i * 8..w * 32 + i * 8 + 8)
                    .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()))
            };
            itimers.push(if res.get(w).is_some_and(|&r| r >= 0) {
                [v(0), v(1), v(2), v(3)]
            } else {
                [0; 4]
            });
        }
        // A periodic ITIMER_REAL that expired while the process was frozen
        // waits for its SIGALRM to be taken (blocked now) to be armed again:
        // until then it reads as zero with its interval set. Restored as
        // zero it would be disarmed for good; it is restored one interval
        // from now instead, and the pending SIGALRM goes with the signals.
        if let Some(real) = itimers.first_mut() {
            *real = rearmed_real(*real);
        }
        let text = crate::procfs::read(cx.pid, "timers").unwrap_or_default();
        let mut posix = parse_proc_timers(cx.pid, &text)?;
        for t in &mut posix {
            let r = cx
                .frozen
                .inject(0, libc::SYS_timer_gettime, &[t.id as u64, scratch])?;
            if r < 0 {
                return Err(EngineError::Other(format!(
                    "read POSIX timer {} of process {}: errno {}",
                    t.id, cx.pid, -r
                )));
            }
            let b = cx.read_mem(scratch, 32)?;
            for (i, s) in t.spec.iter_mut().enumerate() {
                *s = u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
            }
        }
        Ok(TimersState { itimers, posix })
    }

    /// The same timers; armed with the time left at the stop (a
    /// skeleton's plan created them disarmed).
    fn update(
        pre: &TimersState,
        fin: &TimersState,
        _same: bool,
        cx: &mut super::Update,
    ) -> Result<()> {
        let shape = |s: &TimersState| {
            crate::skeleton::encode(&(
                s.itimers.len(),
                s.posix
                    .iter()
                    .map(|t| (t.id, t.clock, t.signo, t.value, t.notify, t.tid))
                    .collect::<Vec<_>>(),
            ))
        };
        if shape(pre) != shape(fin) {
            return Err(crate::error::stale("its POSIX timers changed"));
        }
        for (w, t) in fin.itimers.iter().enumerate() {
            if t[2] == 0 && t[3] == 0 {
                continue;
            }
            let raw: Vec<u8> = t.iter().flat_map(|x| x.to_le_bytes()).collect();
            cx.call_with(0, libc::SYS_setitimer, &raw, 1, &[w as u64, 0, 0], || {
                format!("arm interval timer {w}")
            })?;
        }
        for t in fin
            .posix
            .iter()
            .filter(|t| t.spec[2] != 0 || t.spec[3] != 0)
        {
            let raw: Vec<u8> = t.spec.iter().flat_map(|x| x.to_le_bytes()).collect();
            cx.call_with(
                0,
                libc::SYS_timer_settime,
                &raw,
                2,
                &[t.id as u64, 0, 0, 0],
                || format!("arm POSIX timer {}", t.id),
            )?;
        }
        Ok(())
    }

    fn plan(s: &TimersState, cx: &mut PlanCx) -> Result<()> {
        // A skeleton's timers are armed at its bring-up, with the values
        // of the stop.
        let arm = !cx.pf.opts.skeleton;
        for (w, t) in s.itimers.iter().enumerate() {
            if !arm || (t[2] == 0 && t[3] == 0) {
                continue; // disarmed
            }
            let d = cx.b.data_of(t);
            cx.b.syscall(
                0,
                libc::SYS_setitimer,
                &[(w as u64).into(), d.into(), 0u64.into()],
                Check::NonNeg,
                format!("arm interval timer {w}"),
            );
        }
        if s.posix.is_empty() {
            return Ok(());
        }
        // After the threads exist (a timer may signal one of them); the
        // kernel takes each timer's id from *timerid while this is on.
        let b = &mut *cx.b;
        b.syscall(
            0,
            libc::SYS_prctl,
            &[
                PR_TIMER_CREATE_RESTORE_IDS.into(),
                1u64.into(),
                0u64.into(),
                0u64.into(),
                0u64.into(),
            ],
            Check::NonNeg,
            "restore POSIX timer ids (PR_TIMER_CREATE_RESTORE_IDS)",
        );
        for t in &s.posix {
            // struct sigevent: value, signo, notify, then the thread id.
            let mut ev = [0u8; 64];
            ev[0..8].copy_from_slice(&t.value.to_le_bytes());
            ev[8..12].copy_from_slice(&t.signo.to_le_bytes());
            ev[12..16].copy_from_slice(&t.notify.to_le_bytes());
            ev[16..20].copy_from_slice(&t.tid.to_le_bytes());
            let ev = if t.notify & SIGEV_THREAD_ID != 0 {
                // The thread may come back under another tid: the restorer
                // writes the id it got into the sigevent before the call.
                let idx = cx
                    .pf
                    .thread_tids
                    .iter()
                    .position(|&x| x == t.tid)
                    .ok_or_else(|| {
                        EngineError::Other(format!(
                            "POSIX timer {} signals thread {}, which is not in the image",
                            t.id, t.tid
                        ))
                    })?;
                let ev = b.data_private(&ev);
                b.store_tid(
                    0,
                    ev.at(16),
                    idx,
                    format!("name thread {idx} (tid {}) in POSIX timer {}", t.tid, t.id),
                );
                ev
            } else {
                b.data(&ev)
            };
            let id = b.data_of(&(t.id as i64));
            b.syscall(
                0,
                libc::SYS_timer_create,
                &[(t.clock as i64).into(), ev.into(), id.into()],
                Check::NonNeg,
                format!("create POSIX timer {}", t.id),
            );
            if arm && (t.spec[2] != 0 || t.spec[3] != 0) {
                let spec = b.data_of(&t.spec);
                b.syscall(
                    0,
                    libc::SYS_timer_settime,
                    &[(t.id as u64).into(), 0u64.into(), spec.into(), 0u64.into()],
                    Check::NonNeg,
                    format!("arm POSIX timer {}", t.id),
                );
            }
        }
        b.syscall(
            0,
            libc::SYS_prctl,
            &[
                PR_TIMER_CREATE_RESTORE_IDS.into(),
                0u64.into(),
                0u64.into(),
                0u64.into(),
                0u64.into(),
            ],
            Check::NonNeg,
            "back to normal POSIX timer ids",
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expired_periodic_real_timer_gets_one_interval() {
        // Expired while frozen: zero value, 200 ms interval.
        assert_eq!(rearmed_real([0, 200_000, 0, 0]), [0, 200_000, 0, 200_000]);
        // Armed, or disarmed for good: unchanged.
        assert_eq!(rearmed_real([0, 200_000, 0, 1500]), [0, 200_000, 0, 1500]);
        assert_eq!(rearmed_real([0; 4]), [0; 4]);
        assert_eq!(rearmed_real([0, 0, 3, 0]), [0, 0, 3, 0]);
    }

    #[test]
    fn parses_proc_timers() {
        let t = parse_proc_timers(
            1,
            "ID: 7\nsignal: 10/0000000000000000\nnotify: signal/pid.13798\nClockID: 1\nID: 8\nsignal: 12/00007f00deadbeef\nnotify: signal/tid.13799\nClockID: 0\nID: 9\nsignal: 0/0000000000000000\nnotify: none/pid.5\nClockID: 7\n",
        )
        .unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(
            (t[0].id, t[0].signo, t[0].notify, t[0].clock),
            (7, 10, SIGEV_SIGNAL, 1)
        );
        assert_eq!(
            (t[1].notify, t[1].tid, t[1].value),
            (SIGEV_THREAD_ID, 13799, 0x7f00deadbeef)
        );
        assert_eq!((t[2].notify, t[2].clock), (SIGEV_NONE, 7));
        assert!(parse_proc_timers(1, "ID: x\n").is_err());
    }
}
