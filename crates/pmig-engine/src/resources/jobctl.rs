//! Job control: a process stopped by a signal (SIGSTOP, or a terminal's
//! SIGTSTP, SIGTTIN, SIGTTOU) is restored stopped, and runs again when it is
//! sent SIGCONT, as it would have where it was.
//!
//! Capture: the freeze sees each thread's first stop; a group-stop (not the
//! interrupt pmig asked for) means job control had stopped the process.
//! Restore: the process is sent SIGSTOP as it is let go, so that it stops
//! before running an instruction. Whichever signal had stopped it, SIGSTOP
//! is the one sent: the others are discarded in a process group with no
//! parent in the session, which a restored process may well be in.

use super::{Capture, Finish, Resource};
use crate::error::Result;
use serde::{Deserialize, Serialize};

pub struct JobCtl;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobCtlState {
    /// The signal that had stopped the process, if it was stopped.
    pub stopped_by: Option<i32>,
}

impl Resource for JobCtl {
    const PART: &'static str = "jobctl";
    type State = JobCtlState;

    fn capture(cx: &mut Capture) -> Result<JobCtlState> {
        Ok(JobCtlState {
            stopped_by: cx.frozen.group_stop(),
        })
    }

    fn finish(s: &JobCtlState, cx: &mut Finish) -> Result<()> {
        if s.stopped_by.is_some() {
            cx.frozen.stop_on_detach();
        }
        Ok(())
    }
}
