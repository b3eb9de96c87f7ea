//! Signal dispositions (handlers, flags, masks) and the process-wide queue of
//! pending signals. Per-thread pending signals belong to `threads`.

use super::{Capture, Finish, PlanCx, Resource};
use crate::error::{EngineError, Result};
use crate::sys;
use pmig_restorer::{Arg, Check};
use serde::{Deserialize, Serialize};

pub struct Signals;

/// struct kernel_sigaction as rt_sigaction sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Action {
    pub handler: u64,
    pub flags: u64,
    pub restorer: u64,
    pub mask: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SignalsState {
    /// Index 0 is signal 1.
    pub actions: Vec<Action>,
    pub shared_pending: Vec<Vec<u8>>,
}

fn settable(sig: u64) -> bool {
    sig != libc::SIGKILL as u64 && sig != libc::SIGSTOP as u64
}

impl Resource for Signals {
    const PART: &'static str = "signals";
    type State = SignalsState;

    fn capture(cx: &mut Capture) -> Result<SignalsState> {
        let scratch = cx.scratch()?;
        // Only signals that are caught or ignored can have an action other
        // than the default (SigCgt/SigIgn); SIGCHLD is always asked, since
        // its flags matter even with the default action. Each question is a
        // system call injected into the process, so this keeps the stop short.
        let st = crate::procfs::status(cx.pid)?;
        let mask = |k: &str| crate::procfs::hex_u64(st.get(k).map(String::as_str).unwrap_or("0"));
        let interesting = mask("SigCgt") | mask("SigIgn") | 1 << (libc::SIGCHLD - 1);
        // 64 actions x 32 bytes do not fit one page with room to spare, so two rounds.
        let mut actions = vec![Action::default(); 64];
        for half in 0..2u64 {
            let sigs: Vec<u64> = (1 + half * 32..=32 + half * 32)
                .filter(|s| settable(*s) && interesting & (1 << (s - 1)) != 0)
                .collect();
            if sigs.is_empty() {
                continue;
            }
            let args: Vec<[u64; 4]> = sigs
                .iter()
                .map(|&s| [s, 0, scratch + (s - 1 - half * 32) * 32, 8])
                .collect();
            let calls: Vec<(i64, &[u64])> = args
                .iter()
                .map(|a| (libc::SYS_rt_sigaction, &a[..]))
                .collect();
            let res = cx.frozen.inject_many(0, &calls)?;
            let raw = cx.read_mem(scratch, 32 * 32)?;
            for (k, &s) in sigs.iter().enumerate() {
                if res[k] < 0 {
                    continue;
                }
                let o = ((s - 1 - half * 32) * 32) as usize;
                let w = |i: usize| {
                    u64::from_le_bytes(raw[o + i * 8..o + i * 8 + 8].try_into().unwrap())
                };
                actions[(s - 1) as usize] = Action {
                    handler: w(0),
                    flags: w(1),
                    restorer: w(2),
                    mask: w(3),
                };
            }
        }
        let main = cx.frozen.threads[0].tid;
        Ok(SignalsState {
            actions,
            shared_pending: sys::peek_siginfo(main, true)?,
        })
    }

    fn plan(s: &SignalsState, cx: &mut PlanCx) -> Result<()> {
        let b = &mut *cx.b;
        for (i, a) in s.actions.iter().enumerate() {
            let sig = i as u64 + 1;
            // SIGTRAP's action is set in `finish`: each thread ends the plan
            // on an int3, and the kernel resets the action of a trap signal
            // that is blocked (every signal is, while the restorer runs).
            if !settable(sig) || sig == libc::SIGTRAP as u64 || *a == Action::default() {
                continue;
            }
            let d = b.data_of(&[a.handler, a.flags, a.restorer, a.mask]);
            b.syscall(
                0,
                libc::SYS_rt_sigaction,
                &[sig.into(), d.into(), 0u64.into(), 8u64.into()],
                Check::NonNeg,
                format!("set the action of signal {sig}"),
            );
        }
        for info in &s.shared_pending {
            let sig = i32::from_le_bytes(info[0..4].try_into().unwrap());
            let d = b.data(info);
            b.syscall(
                0,
                libc::SYS_rt_sigqueueinfo,
                &[Arg::Pid, sig.into(), d.into()],
                Check::NonNeg,
                format!("queue pending signal {sig}"),
            );
        }
        Ok(())
    }

    /// Sets SIGTRAP's action, once every thread has passed its trap (see
    /// `plan`). Runs before the restorer area is removed, whose end holds
    /// the action for the call to read.
    fn finish(s: &SignalsState, cx: &mut Finish) -> Result<()> {
        let Some(a) = s.actions.get(libc::SIGTRAP as usize - 1) else {
            return Ok(());
        };
        if *a == Action::default() {
            return Ok(());
        }
        let raw: Vec<u8> = [a.handler, a.flags, a.restorer, a.mask]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        let at = cx.scratch(&raw)?;
        let r = cx
            .frozen
            .inject(0, libc::SYS_rt_sigaction, &[libc::SIGTRAP as u64, at, 0, 8])?;
        if r < 0 {
            return Err(EngineError::RestoreStep {
                step: 0,
                what: "set the action of signal 5 (SIGTRAP)".into(),
                err: std::io::Error::from_raw_os_error(-r as i32),
            });
        }
        Ok(())
    }
}
