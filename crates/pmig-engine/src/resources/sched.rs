//! Scheduling: each thread's policy and priority (SCHED_BATCH, SCHED_IDLE,
//! the real-time policies, reset-on-fork, utilisation clamps) and I/O
//! priority class, and the process's OOM score adjustment. A background job
//! started with `chrt --idle`, `ionice -c3` or a raised `oom_score_adj` keeps
//! them where it moves (its nice value and CPU affinity move with
//! [`threads`](super::threads)).
//!
//! All of it is read and set from outside the process, by thread id: the
//! capture needs no injected call, and the restore sets it once the threads
//! exist, before they run. A setting this kernel refuses (a deadline
//! reservation it cannot admit, say) is logged and the process runs with
//! the default; nothing else depends on it.

use super::{Capture, Finish, Resource};
use crate::error::{errno_err, Result};
use libc::pid_t;
use serde::{Deserialize, Serialize};

pub struct Sched;

/// `struct sched_attr` (version 1, with the utilisation clamps).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedAttr {
    pub size: u32,
    pub policy: u32,
    pub flags: u64,
    pub nice: i32,
    pub priority: u32,
    pub runtime: u64,
    pub deadline: u64,
    pub period: u64,
    pub util_min: u32,
    pub util_max: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadSched {
    pub attr: SchedAttr,
    /// `ioprio_get`'s value: class << 13 | level.
    pub ioprio: i32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedState {
    /// In the image's thread order.
    pub threads: Vec<ThreadSched>,
    pub oom_score_adj: i32,
}

const SCHED_ATTR_SIZE: u32 = std::mem::size_of::<SchedAttr>() as u32;
const IOPRIO_WHO_PROCESS: i32 = 1;
const IOPRIO_CLASS_SHIFT: i32 = 13;
/// Flags `sched_setattr` takes from a `sched_getattr`: reset-on-fork and
/// the utilisation clamps (the others say how to apply the call).
const SCHED_FLAG_RESET_ON_FORK: u64 = 0x01;
const SCHED_FLAG_UTIL_CLAMP: u64 = 0x20 | 0x40;

fn get_attr(tid: pid_t) -> Result<SchedAttr> {
    let mut a = SchedAttr::default();
    // SAFETY: sched_getattr writes at most `SCHED_ATTR_SIZE` bytes into `a`,
    // a repr(C) struct of that size.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            tid,
            &mut a as *mut SchedAttr,
            SCHED_ATTR_SIZE,
            0,
        )
    };
    if r < 0 {
        return Err(errno_err(format!(
            "read the scheduling policy of thread {tid}"
        )));
    }
    Ok(a)
}

fn get_ioprio(tid: pid_t) -> Result<i32> {
    // SAFETY: ioprio_get takes two integers.
    let r = unsafe { libc::syscall(libc::SYS_ioprio_get, IOPRIO_WHO_PROCESS, tid) };
    if r < 0 {
        return Err(errno_err(format!("read the I/O priority of thread {tid}")));
    }
    Ok(r as i32)
}

/// Whether `a` is what a new thread gets anyway (SCHED_OTHER, no
/// flags, no clamps); its nice value is the threads part's.
fn is_default(a: &SchedAttr) -> bool {
    a.policy == libc::SCHED_OTHER as u32
        && a.flags & (SCHED_FLAG_RESET_ON_FORK | SCHED_FLAG_UTIL_CLAMP) == 0
}

/// Gives thread `tid` the policy and I/O priority `ts`; with `all`, the
/// defaults too (a thread started from another has that one's). A setting
/// the kernel refuses is logged.
fn set_thread(tid: pid_t, ts: &ThreadSched, all: bool) {
    if all || !is_default(&ts.attr) {
        let mut a = ts.attr;
        a.size = SCHED_ATTR_SIZE;
        a.flags &= SCHED_FLAG_RESET_ON_FORK | SCHED_FLAG_UTIL_CLAMP;
        // SAFETY: sched_setattr reads a struct of `a.size` bytes.
        let r = unsafe { libc::syscall(libc::SYS_sched_setattr, tid, &a as *const SchedAttr, 0) };
        if r < 0 {
            tracing::warn!(
                "thread {tid}: scheduling policy {} (priority {}) not restored: {}",
                a.policy,
                a.priority,
                std::io::Error::last_os_error()
            );
        }
    }
    // Class 0 (none): the priority follows the nice value.
    if all || ts.ioprio >> IOPRIO_CLASS_SHIFT != 0 {
        // SAFETY: ioprio_set takes three integers.
        let r = unsafe { libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, tid, ts.ioprio) };
        if r < 0 {
            tracing::warn!(
                "thread {tid}: I/O priority {:#x} not restored: {}",
                ts.ioprio,
                std::io::Error::last_os_error()
            );
        }
    }
}

impl Resource for Sched {
    const PART: &'static str = "sched";
    type State = SchedState;

    /// No change is followed but in the threads: an ended thread's
    /// settings go with it, and a thread started since gets its own (it
    /// was started with its creator's). A change in the others is named.
    fn update(
        pre: &SchedState,
        fin: &SchedState,
        same: bool,
        cx: &mut super::Update,
    ) -> Result<()> {
        if same {
            return Ok(());
        }
        let kept = |s: &SchedState, skip: &[usize]| -> Vec<ThreadSched> {
            (0..s.threads.len())
                .filter(|i| !skip.contains(i))
                .map(|i| s.threads[i].clone())
                .collect()
        };
        let (was, now) = (kept(pre, &cx.threads.ended), kept(fin, &cx.threads.started));
        if was.len() != now.len() {
            return Err(crate::error::stale(format!(
                "its threads changed ({} then, {} at the stop)",
                pre.threads.len(),
                fin.threads.len()
            )));
        }
        if was != now || pre.oom_score_adj != fin.oom_score_adj {
            return Err(crate::error::stale(
                "its scheduling policy, priority or OOM score changed",
            ));
        }
        for &k in &cx.threads.started {
            if let (Some(t), Some(ts)) = (cx.frozen.threads.get(k), fin.threads.get(k)) {
                set_thread(t.tid, ts, true);
            }
        }
        Ok(())
    }

    fn capture(cx: &mut Capture) -> Result<SchedState> {
        let mut threads = Vec::with_capacity(cx.n_threads());
        for t in &cx.frozen.threads {
            threads.push(ThreadSched {
                attr: get_attr(t.tid)?,
                ioprio: get_ioprio(t.tid)?,
            });
        }
        let oom_score_adj = crate::procfs::read(cx.pid, "oom_score_adj")?
            .trim()
            .parse()
            .unwrap_or(0);
        Ok(SchedState {
            threads,
            oom_score_adj,
        })
    }

    fn finish(s: &SchedState, cx: &mut Finish) -> Result<()> {
        for (t, ts) in s.threads.iter().enumerate() {
            let Some(tid) = cx.frozen.threads.get(t).map(|t| t.tid) else {
                break;
            };
            set_thread(tid, ts, false);
        }
        if s.oom_score_adj != 0 {
            let p = format!("/proc/{}/oom_score_adj", cx.pid);
            if let Err(e) = std::fs::write(&p, s.oom_score_adj.to_string()) {
                tracing::warn!(
                    "process {}: oom_score_adj {} not restored: {e}",
                    cx.pid,
                    s.oom_score_adj
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sched_attr_has_the_kernel_layout() {
        // SCHED_ATTR_SIZE_VER1: with the utilisation clamps.
        assert_eq!(SCHED_ATTR_SIZE, 56);
    }

    #[test]
    fn reads_our_own_policy_and_io_priority() {
        let tid = nix::unistd::gettid().as_raw();
        let a = get_attr(tid).unwrap();
        assert_eq!(a.size, SCHED_ATTR_SIZE);
        // Whatever the test runner's policy, the read is consistent with
        // sched_getscheduler (which ignores reset-on-fork).
        // SAFETY: sched_getscheduler takes one integer.
        let p = unsafe { libc::sched_getscheduler(tid) } & !libc::SCHED_RESET_ON_FORK;
        assert_eq!(a.policy, p as u32);
        assert!(get_ioprio(tid).is_ok());
    }
}
