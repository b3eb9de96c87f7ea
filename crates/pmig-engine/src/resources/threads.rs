//! Threads: registers, FPU/xsave state, signal mask and private pending
//! signals, rseq, robust futex list, clear_child_tid, sigaltstack, name,
//! timer slack, nice and CPU affinity.

use super::{Capture, Finish, PlanCx, Resource};
use crate::error::{errno_err, Result};
use crate::sys;
use libc::pid_t;
use pmig_restorer::{Arg, Check};
use serde::{Deserialize, Serialize};

pub struct Threads;

const ERESTART_RESTARTBLOCK: i64 = -516;
const ERESTARTNOINTR: i64 = -513;
const PR_GET_TID_ADDRESS: u64 = 40;
const PR_GET_TIMERSLACK: u64 = 30;
const PR_SET_TIMERSLACK: i32 = 29;

/// The code segment selector of 64-bit user mode on x86-64 (`__USER_CS`).
const USER_CS_64: u64 = 0x33;

/// Refuses a thread running 32-bit code: a 64-bit program can switch one
/// to it (the precheck only saw the executable), and every injected call,
/// the restorer and the saved registers are x86-64. Checked before the
/// capture's first injected call.
pub fn refuse_32_bit_code(frozen: &crate::ptrace::Frozen) -> Result<()> {
    for t in &frozen.threads {
        if sys::get_regs(t.tid)?.cs != USER_CS_64 {
            return Err(crate::error::unsupported(
                frozen.pid,
                format!("a thread running 32-bit code (thread {})", t.tid),
            ));
        }
    }
    Ok(())
}

pub const THREAD_CLONE_FLAGS: u64 = (libc::CLONE_VM
    | libc::CLONE_FS
    | libc::CLONE_FILES
    | libc::CLONE_SIGHAND
    | libc::CLONE_THREAD
    | libc::CLONE_SYSVSEM) as u64;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ThreadState {
    pub tid: pid_t,
    /// user_regs_struct, 27 words.
    pub regs: Vec<u64>,
    pub xstate: Vec<u8>,
    pub sigmask: u64,
    /// Raw siginfo (128 bytes each) queued for this thread only.
    pub pending: Vec<Vec<u8>>,
    /// (address, length, signature) of the rseq area, if registered.
    pub rseq: Option<(u64, u32, u32)>,
    pub robust_list: (u64, u64),
    pub clear_child_tid: u64,
    /// (ss_sp, ss_flags, ss_size)
    pub sigaltstack: (u64, i32, u64),
    pub comm: String,
    pub timerslack: u64,
    pub nice: i32,
    pub affinity: Vec<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ThreadsState {
    pub threads: Vec<ThreadState>,
}

fn regs_to_vec(r: &sys::UserRegs) -> Vec<u64> {
    // SAFETY: user_regs_struct is 27 plain u64 fields.
    unsafe { std::slice::from_raw_parts(r as *const _ as *const u64, 27) }.to_vec()
}

pub fn regs_from_vec(v: &[u64]) -> sys::UserRegs {
    // SAFETY: all-zero is valid for this plain struct, then we copy 27 words in.
    let mut r: sys::UserRegs = unsafe { std::mem::zeroed() };
    let n = v.len().min(27);
    // SAFETY: r is 27 u64s long; we write at most that many.
    unsafe {
        std::slice::from_raw_parts_mut(&mut r as *mut _ as *mut u64, 27)[..n]
            .copy_from_slice(&v[..n])
    };
    r
}

fn affinity(tid: pid_t) -> Result<Vec<u64>> {
    let mut set = [0u64; 16];
    // SAFETY: the kernel writes at most size_of_val(set) bytes into `set`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_getaffinity,
            tid,
            std::mem::size_of_val(&set),
            set.as_mut_ptr(),
        )
    };
    if r < 0 {
        return Err(errno_err(format!("read CPU affinity of thread {tid}")));
    }
    let words = (r as usize).div_ceil(8);
    Ok(set[..words].to_vec())
}

impl Resource for Threads {
    const PART: &'static str = "threads";
    type State = ThreadsState;

    fn capture(cx: &mut Capture) -> Result<ThreadsState> {
        let scratch = cx.scratch()?;
        let mut threads = Vec::new();
        for i in 0..cx.n_threads() {
            let tid = cx.frozen.threads[i].tid;
            let calls: [(i64, &[u64]); 3] = [
                (libc::SYS_prctl, &[PR_GET_TID_ADDRESS, scratch]),
                (libc::SYS_sigaltstack, &[0, scratch + 8]),
                (libc::SYS_prctl, &[PR_GET_TIMERSLACK]),
            ];
            let res = cx.frozen.inject_many(i, &calls)?;
            let raw = cx.read_mem(scratch, 32)?;
            let w = |o: usize| u64::from_le_bytes(raw[o..o + 8].try_into().unwrap());
            let clear_child_tid = if res[0] >= 0 { w(0) } else { 0 };
            let sigaltstack = if res[1] >= 0 {
                (w(8), w(16) as i32, w(24))
            } else {
                (0, libc::SS_DISABLE, 0)
            };
            let regs = sys::get_regs(tid)?;
            let rseq = sys::rseq_config(tid)?;
            let stat = crate::procfs::read(cx.pid, &format!("task/{tid}/stat"))?;
            let nice = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .nth(16)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            threads.push(ThreadState {
                tid,
                regs: regs_to_vec(&regs),
                xstate: sys::get_xstate(tid)?,
                sigmask: cx.frozen.sigmask(i)?,
                pending: sys::peek_siginfo(tid, false)?,
                rseq: (rseq.ptr != 0).then_some((rseq.ptr, rseq.size, rseq.signature)),
                robust_list: sys::robust_list(tid)?,
                clear_child_tid,
                sigaltstack,
                comm: crate::procfs::read(cx.pid, &format!("task/{tid}/comm"))?
                    .trim_end_matches('\n')
                    .to_string(),
                timerslack: res[2].max(0) as u64,
                nice,
                affinity: affinity(tid)?,
            });
        }
        Ok(ThreadsState { threads })
    }

    fn plan(s: &ThreadsState, cx: &mut PlanCx) -> Result<()> {
        let b = &mut *cx.b;
        for t in 1..s.threads.len() {
            b.clone_thread(t);
        }
        for (t, th) in s.threads.iter().enumerate() {
            b.syscall(
                t,
                libc::SYS_set_tid_address,
                &[th.clear_child_tid.into()],
                Check::NonNeg,
                "set clear_child_tid",
            );
            if th.robust_list.0 != 0 {
                b.syscall(
                    t,
                    libc::SYS_set_robust_list,
                    &[th.robust_list.0.into(), th.robust_list.1.into()],
                    Check::NonNeg,
                    "set the robust futex list",
                );
            }
            if let Some((addr, len, sig)) = th.rseq {
                b.syscall(
                    t,
                    libc::SYS_rseq,
                    &[
                        addr.into(),
                        (len as u64).into(),
                        0u64.into(),
                        (sig as u64).into(),
                    ],
                    Check::NonNeg,
                    format!("register rseq at {addr:#x}"),
                );
            }
            let (sp, flags, size) = th.sigaltstack;
            if flags & libc::SS_DISABLE == 0 {
                let ss: [u64; 3] = [sp, (flags & !libc::SS_ONSTACK) as u32 as u64, size];
                let d = b.data_of(&ss);
                b.syscall(
                    t,
                    libc::SYS_sigaltstack,
                    &[d.into(), 0u64.into()],
                    Check::NonNeg,
                    "set the alternate signal stack",
                );
            }
            let mut name = th.comm.as_bytes().to_vec();
            name.truncate(15);
            name.push(0);
            let d = b.data(&name);
            b.syscall(
                t,
                libc::SYS_prctl,
                &[libc::PR_SET_NAME.into(), d.into()],
                Check::NonNeg,
                format!("name the thread '{}'", th.comm),
            );
            if th.timerslack != 0 {
                b.syscall(
                    t,
                    libc::SYS_prctl,
                    &[PR_SET_TIMERSLACK.into(), th.timerslack.into()],
                    Check::None,
                    "set the timer slack",
                );
            }
            for info in &th.pending {
                let sig = i32::from_le_bytes(info[0..4].try_into().unwrap());
                let d = b.data(info);
                b.syscall(
                    t,
                    libc::SYS_rt_tgsigqueueinfo,
                    &[Arg::Pid, Arg::Tid, sig.into(), d.into()],
                    Check::NonNeg,
                    format!("queue pending signal {sig} for the thread"),
                );
            }
        }
        Ok(())
    }

    fn finish(s: &ThreadsState, cx: &mut Finish) -> Result<()> {
        for (i, th) in s.threads.iter().enumerate() {
            let tid = cx.frozen.threads[i].tid;
            let mut r = regs_from_vec(&th.regs);
            // A call interrupted with a restart block cannot restart in a new
            // process (the block is gone): run the call again from the start.
            if r.orig_rax as i64 >= 0 && r.rax as i64 == ERESTART_RESTARTBLOCK {
                r.rax = ERESTARTNOINTR as u64;
            }
            sys::set_regs(tid, &r)?;
            sys::set_xstate(tid, &th.xstate)?;
            sys::set_sigmask(tid, th.sigmask)?;
            // SAFETY: sched_setaffinity reads the mask we pass.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_sched_setaffinity,
                    tid,
                    th.affinity.len() * 8,
                    th.affinity.as_ptr(),
                )
            };
            if rc < 0 {
                tracing::warn!(
                    "thread {tid}: CPU affinity not restored: {}",
                    std::io::Error::last_os_error()
                );
            }
            // SAFETY: setpriority on one thread id.
            if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as u32, th.nice) } < 0 {
                tracing::warn!(
                    "thread {tid}: nice {} not restored: {}",
                    th.nice,
                    std::io::Error::last_os_error()
                );
            }
        }
        Ok(())
    }
}
