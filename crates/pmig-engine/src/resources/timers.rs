//! Interval timers (alarm, ITIMER_REAL/VIRTUAL/PROF). POSIX timers are
//! refused for now.

use super::{Capture, PlanCx, Resource};
use crate::error::{unsupported, Result};
use libc::pid_t;
use pmig_restorer::Check;
use serde::{Deserialize, Serialize};

pub struct Timers;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TimersState {
    /// struct itimerval (interval sec/usec, value sec/usec) per ITIMER_*.
    pub itimers: Vec<[u64; 4]>,
}

impl Resource for Timers {
    const PART: &'static str = "timers";
    type State = TimersState;

    fn precheck(pid: pid_t) -> Result<()> {
        let t = crate::procfs::read(pid, "timers").unwrap_or_default();
        if t.lines().any(|l| l.starts_with("ID:")) {
            return Err(unsupported(pid, "POSIX timers (timer_create)"));
        }
        Ok(())
    }

    fn capture(cx: &mut Capture) -> Result<TimersState> {
        let scratch = cx.scratch()?;
        let args: Vec<[u64; 2]> = (0..3u64).map(|w| [w, scratch + w * 32]).collect();
        let calls: Vec<(i64, &[u64])> =
            args.iter().map(|a| (libc::SYS_getitimer, &a[..])).collect();
        let res = cx.frozen.inject_many(0, &calls)?;
        let raw = cx.read_mem(scratch, 96)?;
        let mut itimers = Vec::new();
        for w in 0..3usize {
            let v = |i: usize| {
                u64::from_le_bytes(raw[w * 32 + i * 8..w * 32 + i * 8 + 8].try_into().unwrap())
            };
            itimers.push(if res[w] >= 0 {
                [v(0), v(1), v(2), v(3)]
            } else {
                [0; 4]
            });
        }
        Ok(TimersState { itimers })
    }

    fn plan(s: &TimersState, cx: &mut PlanCx) -> Result<()> {
        for (w, t) in s.itimers.iter().enumerate() {
            if t[2] == 0 && t[3] == 0 {
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
        Ok(())
    }
}
