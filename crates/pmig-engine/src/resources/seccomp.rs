//! Seccomp filters: the BPF programs a process installed to limit its own
//! system calls (`seccomp(SECCOMP_SET_MODE_FILTER)`, or
//! `prctl(PR_SET_SECCOMP)`), as sandboxes, language runtimes and services
//! started with a system-call filter have them.
//!
//! Every thread that pmig works on is traced with
//! `PTRACE_O_SUSPEND_SECCOMP` where the kernel allows it, from the moment
//! it is stopped ([`crate::ptrace::seize_options`]): the calls pmig injects and the
//! restorer's own calls then pass no filter, and none of them can be
//! refused, or kill the process, under a filter written for the program.
//! The suspension ends when a thread is let go (detached).
//!
//! The capture reads each thread's filters with
//! `PTRACE_SECCOMP_GET_FILTER` (the instructions) and
//! `PTRACE_SECCOMP_GET_METADATA` (the `SECCOMP_FILTER_FLAG_LOG` flag),
//! newest first as the kernel numbers them, and keeps them oldest first:
//! each distinct program once, and for each thread the list of those it
//! has. Threads may differ (a thread that installed a filter after the
//! others existed, without `SECCOMP_FILTER_FLAG_TSYNC`, as libseccomp does
//! by default). It refuses:
//! - a filter that can hand a call to a supervisor
//!   (`SECCOMP_RET_USER_NOTIF`): the supervisor holds the other end, which
//!   does not move;
//! - a process with filters when this tracer cannot suspend them (it lacks
//!   `CAP_SYS_ADMIN`, or is under seccomp itself).
//!
//! The restorer installs, oldest first, the filters every thread has (the
//! longest start their lists share) in the main thread, right after the
//! memory is in place and before the other threads exist, which inherit
//! them; then each thread installs the rest of its own list, a new thread
//! as its first calls, the main thread once the others exist. It sets
//! `no_new_privs` first when the process had it (a filter needs it, or
//! `CAP_SYS_ADMIN`, which the restore drops later, after these). The
//! restore's later calls pass no filter (suspended), and the filters hold
//! from the moment the process is let go. A restore that cannot suspend
//! them refuses the image before anything is created.
//!
//! Written only when the process has a filter (format 1.15). A 1.14 reader
//! does not know the part and would restore the process without its
//! filters: a migration's source refuses such a process to a peer older
//! than protocol 23 ([`has_filters`]).
//!
//! Not kept: `SECCOMP_FILTER_FLAG_SPEC_ALLOW` (the kernel does not report
//! it): a filter restored without it turns on the speculative store bypass
//! mitigation for the process, as filters do by default.

use super::{Capture, PlanCx, Preflight, Resource};
use crate::error::{unsupported, EngineError, Result};
use libc::pid_t;
use pmig_restorer::Check;
use serde::{Deserialize, Serialize};

pub struct Seccomp;

/// One filter: its flags and its classic BPF program.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filter {
    /// `SECCOMP_FILTER_FLAG_LOG` or 0.
    pub flags: u64,
    /// The program as `struct sock_filter` entries (8 bytes each: code,
    /// jt, jf, k), in the byte order of the machine. As bytes, see
    /// `ThreadState::xstate`.
    #[serde(with = "serde_bytes")]
    pub insns: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeccompState {
    /// Each distinct filter once.
    pub filters: Vec<Filter>,
    /// For each thread, in the order of the `threads` part (the main thread
    /// first): its filters, as indices into `filters`, oldest first (the
    /// order to install them in).
    pub threads: Vec<Vec<u32>>,
    /// `no_new_privs` of the main thread, set again before the filters.
    pub no_new_privs: bool,
}

impl SeccompState {
    /// Whether no thread has a filter.
    pub fn is_empty(&self) -> bool {
        self.threads.iter().all(Vec::is_empty)
    }

    /// How many filters, oldest first, every thread has in common.
    fn shared(&self) -> usize {
        let Some(first) = self.threads.first() else {
            return 0;
        };
        (0..first.len())
            .take_while(|&i| self.threads.iter().all(|t| t.get(i) == Some(&first[i])))
            .count()
    }
}

const PTRACE_SECCOMP_GET_FILTER: libc::c_uint = 0x420c;
const PTRACE_SECCOMP_GET_METADATA: libc::c_uint = 0x420d;
const SECCOMP_SET_MODE_FILTER: u64 = 1;
const SECCOMP_FILTER_FLAG_LOG: u64 = 2;
/// `BPF_RET | BPF_K`: return the constant `k`.
const BPF_RET_K: u16 = 0x06;
const SECCOMP_RET_ACTION_FULL: u32 = 0xffff_0000;
const SECCOMP_RET_USER_NOTIF: u32 = 0x7fc0_0000;
/// `BPF_MAXINSNS`: the longest program one filter may have.
const MAX_INSNS: usize = 4096;
/// The kernel's limit on a thread's filters: their instructions, plus 4
/// for each filter, at most `MAX_INSNS_PER_PATH`.
const MAX_INSNS_PER_PATH: usize = 32768;
/// Bound on the filters read from one thread (the limit above allows at
/// most 32768 / 5).
const MAX_FILTERS: u64 = 6554;

/// Whether any thread of `pid` is in seccomp filter mode (mode 2 in its
/// `/proc` status). False for a process that is gone.
pub fn has_filters(pid: pid_t) -> bool {
    crate::ptrace::list_tids(pid)
        .unwrap_or_default()
        .into_iter()
        .any(|t| {
            crate::procfs::status(t)
                .is_ok_and(|st| st.get("Seccomp").map(String::as_str) == Some("2"))
        })
}

/// The refusal of a process with filters by a tracer that cannot suspend
/// (nor read) them.
fn cannot_suspend(pid: pid_t) -> EngineError {
    unsupported(
        pid,
        "a seccomp filter without CAP_SYS_ADMIN (pmig must suspend the filter while it works on the process)",
    )
}

/// Thread `tid`'s filters, oldest first (it must be in a ptrace stop of
/// ours). Empty when it has none.
fn filters_of(tid: pid_t) -> Result<Vec<Filter>> {
    let mut newest_first = Vec::new();
    for index in 0..MAX_FILTERS {
        // SAFETY: with a null buffer the kernel only returns the number of
        // instructions of filter `index`.
        let n = unsafe {
            libc::ptrace(
                PTRACE_SECCOMP_GET_FILTER,
                tid,
                index as usize,
                std::ptr::null_mut::<libc::c_void>(),
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                // Past the oldest filter.
                Some(libc::ENOENT) => break,
                // Not in filter mode: no filter at all.
                Some(libc::EINVAL) if index == 0 => break,
                _ => {
                    return Err(EngineError::Sys {
                        what: format!("read seccomp filter {index} of thread {tid}"),
                        source: e,
                    })
                }
            }
        }
        let n = n as usize;
        let mut insns = vec![0u8; n * 8];
        // SAFETY: the buffer holds `n` struct sock_filter (8 bytes each),
        // as many as the kernel just said filter `index` has; a filter
        // never changes once installed.
        let got = unsafe {
            libc::ptrace(
                PTRACE_SECCOMP_GET_FILTER,
                tid,
                index as usize,
                insns.as_mut_ptr() as *mut libc::c_void,
            )
        };
        if got < 0 {
            return Err(EngineError::Sys {
                what: format!("read seccomp filter {index} of thread {tid}"),
                source: std::io::Error::last_os_error(),
            });
        }
        if got as usize != n {
            return Err(EngineError::Other(format!(
                "seccomp filter {index} of thread {tid} had {n} instructions, then {got}"
            )));
        }
        // struct seccomp_metadata { __u64 filter_off; __u64 flags; }
        let mut md = [index, 0u64];
        // SAFETY: the kernel reads filter_off from and writes at most
        // size_of_val(md) bytes into `md`.
        let r = unsafe {
            libc::ptrace(
                PTRACE_SECCOMP_GET_METADATA,
                tid,
                std::mem::size_of_val(&md),
                md.as_mut_ptr() as *mut libc::c_void,
            )
        };
        if r < 0 {
            return Err(EngineError::Sys {
                what: format!("read the flags of seccomp filter {index} of thread {tid}"),
                source: std::io::Error::last_os_error(),
            });
        }
        newest_first.push(Filter {
            flags: md[1] & SECCOMP_FILTER_FLAG_LOG,
            insns,
        });
    }
    newest_first.reverse();
    Ok(newest_first)
}

/// The instructions of a program, as (code, k).
fn code_and_k(insns: &[u8]) -> impl Iterator<Item = (u16, u32)> + '_ {
    insns.chunks_exact(8).map(|i| {
        (
            u16::from_ne_bytes([i[0], i[1]]),
            u32::from_ne_bytes([i[4], i[5], i[6], i[7]]),
        )
    })
}

/// Whether `f` can hand a call to a user-space supervisor.
fn notifies(f: &Filter) -> bool {
    code_and_k(&f.insns)
        .any(|(code, k)| code == BPF_RET_K && k & SECCOMP_RET_ACTION_FULL == SECCOMP_RET_USER_NOTIF)
}

/// Checks the shape of the part read from an image: programs the kernel
/// accepts, and threads' lists of them it accepts, so that a damaged part
/// is refused before anything is created.
fn check_chain(s: &SeccompState) -> std::result::Result<(), String> {
    for (i, f) in s.filters.iter().enumerate() {
        let n = f.insns.len() / 8;
        if f.insns.len() % 8 != 0 || n == 0 || n > MAX_INSNS {
            return Err(format!(
                "seccomp filter {i} has {} bytes of program (whole instructions of 8 bytes, 1 to {MAX_INSNS} of them, expected)",
                f.insns.len()
            ));
        }
        if f.flags & !SECCOMP_FILTER_FLAG_LOG != 0 {
            return Err(format!(
                "seccomp filter {i} has unknown flags {:#x}",
                f.flags
            ));
        }
    }
    for (t, chain) in s.threads.iter().enumerate() {
        let mut total = 0;
        for &i in chain {
            let f = s.filters.get(i as usize).ok_or_else(|| {
                format!(
                    "thread {t} names seccomp filter {i}, of {}",
                    s.filters.len()
                )
            })?;
            total += f.insns.len() / 8 + 4;
        }
        if total > MAX_INSNS_PER_PATH {
            return Err(format!(
                "the seccomp filters of thread {t} have {total} instructions with their overhead, more than the kernel's {MAX_INSNS_PER_PATH}"
            ));
        }
    }
    Ok(())
}

/// Appends to thread `t`'s ops the install of `filters[i]` for each `i` of
/// `chain`, in order.
fn install(b: &mut pmig_restorer::PlanBuilder, t: usize, filters: &[Filter], chain: &[u32]) {
    for &i in chain {
        let f = &filters[i as usize];
        let prog = b.data(&f.insns);
        // struct sock_fprog { unsigned short len; struct sock_filter *filter; }
        let fprog: [u64; 2] = [(f.insns.len() / 8) as u64, 0];
        let fprog = b.data_with_ptr(&fprog, 8, prog);
        b.syscall(
            t,
            libc::SYS_seccomp,
            &[SECCOMP_SET_MODE_FILTER.into(), f.flags.into(), fprog.into()],
            Check::NonNeg,
            format!("install seccomp filter {i} in thread {t}"),
        );
    }
}

impl Resource for Seccomp {
    const PART: &'static str = "seccomp";
    /// No filter at all: not written.
    type State = SeccompState;

    fn precheck(pid: pid_t) -> Result<()> {
        // Read only where it matters: this runs again in the stop.
        if !crate::ptrace::can_suspend_seccomp() && has_filters(pid) {
            return Err(cannot_suspend(pid));
        }
        Ok(())
    }

    fn capture(cx: &mut Capture) -> Result<Self::State> {
        let pid = cx.pid;
        let mut state = SeccompState {
            filters: Vec::new(),
            threads: Vec::with_capacity(cx.frozen.threads.len()),
            no_new_privs: false,
        };
        // Reading a filter needs CAP_SYS_ADMIN (and no seccomp mode of our
        // own), as suspending one does; without it only the mode shows.
        if !crate::ptrace::can_suspend_seccomp() {
            if has_filters(pid) {
                return Err(cannot_suspend(pid));
            }
            state.threads = vec![Vec::new(); cx.frozen.threads.len()];
            return Ok(state);
        }
        for t in &cx.frozen.threads {
            let mut chain = Vec::new();
            for f in filters_of(t.tid)? {
                let i = match state.filters.iter().position(|g| *g == f) {
                    Some(i) => i,
                    None => {
                        state.filters.push(f);
                        state.filters.len() - 1
                    }
                };
                chain.push(i as u32);
            }
            state.threads.push(chain);
        }
        if state.is_empty() {
            return Ok(state);
        }
        if state.filters.iter().any(notifies) {
            return Err(unsupported(
                pid,
                "a seccomp filter that hands system calls to a supervisor (SECCOMP_RET_USER_NOTIF)",
            ));
        }
        state.no_new_privs = cx.status()?.get("NoNewPrivs").map(String::as_str) == Some("1");
        Ok(state)
    }

    fn preflight(s: &Self::State, _pf: &mut Preflight) -> Result<()> {
        check_chain(s)
            .map_err(|e| EngineError::Incompatible(format!("image part 'seccomp': {e}")))?;
        if !crate::ptrace::can_suspend_seccomp() {
            return Err(EngineError::Incompatible(
                "the process has seccomp filters, and restoring them needs CAP_SYS_ADMIN (run the restore as root)".into(),
            ));
        }
        Ok(())
    }

    /// Before the threads are created: `no_new_privs`, the filters every
    /// thread has in the main thread, and each other thread's own as its
    /// first calls. [`Seccomp::plan_after_threads`] adds the main thread's
    /// own.
    fn plan(s: &Self::State, cx: &mut PlanCx) -> Result<()> {
        let b = &mut *cx.b;
        if s.threads.len() != b.n_threads() {
            return Err(EngineError::Incompatible(format!(
                "image part 'seccomp' lists {} threads, the process has {}",
                s.threads.len(),
                b.n_threads()
            )));
        }
        if s.no_new_privs {
            b.syscall(
                0,
                libc::SYS_prctl,
                &[
                    (libc::PR_SET_NO_NEW_PRIVS as u64).into(),
                    1u64.into(),
                    0u64.into(),
                    0u64.into(),
                    0u64.into(),
                ],
                Check::NonNeg,
                "set no_new_privs (before the seccomp filters)",
            );
        }
        let shared = s.shared();
        install(b, 0, &s.filters, &s.threads[0][..shared]);
        for (t, chain) in s.threads.iter().enumerate().skip(1) {
            install(b, t, &s.filters, &chain[shared..]);
        }
        Ok(())
    }
}

impl Seccomp {
    /// After the threads are created (they must not inherit them): the
    /// main thread's own filters, those not every thread has.
    pub fn plan_after_threads(s: &SeccompState, cx: &mut PlanCx) {
        let shared = s.shared();
        if let Some(main) = s.threads.first() {
            install(cx.b, 0, &s.filters, &main[shared..]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insn(code: u16, k: u32) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[..2].copy_from_slice(&code.to_ne_bytes());
        b[4..].copy_from_slice(&k.to_ne_bytes());
        b
    }

    fn filter(insns: &[[u8; 8]]) -> Filter {
        Filter {
            flags: 0,
            insns: insns.concat(),
        }
    }

    #[test]
    fn a_filter_that_returns_user_notif_is_found() {
        let allow = insn(BPF_RET_K, 0x7fff_0000);
        let notif = insn(BPF_RET_K, SECCOMP_RET_USER_NOTIF | 5);
        // A load whose constant looks like the action is no return.
        let load = insn(0x20, SECCOMP_RET_USER_NOTIF);
        assert!(notifies(&filter(&[load, notif, allow])));
        assert!(!notifies(&filter(&[load, allow])));
    }

    #[test]
    fn chains_the_kernel_would_refuse_are_found() {
        let ok = SeccompState {
            filters: vec![filter(&[insn(BPF_RET_K, 0x7fff_0000)])],
            threads: vec![vec![0], vec![0, 0]],
            no_new_privs: true,
        };
        assert!(check_chain(&ok).is_ok());
        let mut torn = ok.clone();
        torn.filters[0].insns.pop();
        assert!(check_chain(&torn).unwrap_err().contains("7 bytes"));
        let mut empty = ok.clone();
        empty.filters[0].insns.clear();
        assert!(check_chain(&empty).is_err());
        let mut flagged = ok.clone();
        flagged.filters[0].flags = 8;
        assert!(check_chain(&flagged).unwrap_err().contains("unknown flags"));
        let mut unknown = ok.clone();
        unknown.threads[1].push(1);
        assert!(check_chain(&unknown)
            .unwrap_err()
            .contains("names seccomp filter 1"));
        let big = filter(&vec![insn(BPF_RET_K, 0); MAX_INSNS]);
        let too_many = SeccompState {
            filters: vec![big],
            threads: vec![vec![0; 8]],
            no_new_privs: false,
        };
        assert!(check_chain(&too_many).unwrap_err().contains("32768"));
    }

    #[test]
    fn the_filters_all_threads_share_are_the_start_of_their_lists() {
        let st = |threads: Vec<Vec<u32>>| SeccompState {
            filters: Vec::new(),
            threads,
            no_new_privs: false,
        };
        assert_eq!(st(vec![vec![0, 1], vec![0, 1]]).shared(), 2);
        // A thread that installed one of its own after the others existed.
        assert_eq!(st(vec![vec![0], vec![0, 1], vec![0]]).shared(), 1);
        // The main thread's own, installed after it made the others.
        assert_eq!(st(vec![vec![0, 2], vec![0]]).shared(), 1);
        assert_eq!(st(vec![vec![], vec![3]]).shared(), 0);
        assert_eq!(st(vec![]).shared(), 0);
        assert!(st(vec![vec![], vec![]]).is_empty());
        assert!(!st(vec![vec![], vec![3]]).is_empty());
    }
}
