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
        let mut stopped_by = cx.frozen.group_stop();
        if stopped_by.is_some() {
            // A SIGCONT sent while it was frozen ended the stop; being
            // traced, the process also keeps it pending (it is restored
            // with the other pending signals), and the SIGSTOP sent at the
            // restore would discard it: the process must simply run.
            let st = crate::procfs::status(cx.pid)?;
            let pending =
                |k: &str| crate::procfs::hex_u64(st.get(k).map(String::as_str).unwrap_or("0"));
            if (pending("ShdPnd") | pending("SigPnd")) & (1 << (libc::SIGCONT - 1)) != 0 {
                stopped_by = None;
            }
        }
        Ok(JobCtlState { stopped_by })
    }

    fn finish(s: &JobCtlState, cx: &mut Finish) -> Result<()> {
        if s.stopped_by.is_some() {
            cx.frozen.stop_on_detach();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ptrace::Frozen;

    /// Freezes a `sleep` in the given job-control state and captures it.
    fn captured(stop: bool, cont_while_frozen: bool) -> JobCtlState {
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let pid = child.id() as libc::pid_t;
        let state = || crate::procfs::status(pid).ok()?.get("State").cloned();
        if stop {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(pid, libc::SIGSTOP) };
            for _ in 0..2000 {
                if state().is_some_and(|s| s.starts_with('T')) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        let mut frozen = Frozen::freeze(pid).unwrap();
        if cont_while_frozen {
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGCONT) };
        }
        let d = tempfile::tempdir().unwrap();
        let mut w = pmig_image::ImageWriter::create(d.path()).unwrap();
        let mut cx = Capture::new(&mut frozen, w.pages());
        let s = JobCtl::capture(&mut cx).unwrap();
        drop(cx);
        drop(frozen);
        let _ = child.kill();
        let _ = child.wait();
        s
    }

    #[test]
    fn a_stop_by_job_control_is_seen_and_a_sigcont_while_frozen_ends_it() {
        assert_eq!(captured(false, false).stopped_by, None);
        assert_eq!(captured(true, false).stopped_by, Some(libc::SIGSTOP));
        assert_eq!(captured(true, true).stopped_by, None);
    }
}
