//! Seccomp filters: the BPF programs a process installed to limit its own
//! system calls (`seccomp(SECCOMP_SET_MODE_FILTER)`, or
//! `prctl(PR_SET_SECCOMP)`), as sandboxes, language runtimes and services
//! started with a system-call filter have them.
//!
//! Every thread that pmig works on is traced with
//! `PTRACE_O_SUSPEND_SECCOMP` where the kernel allows it
//! ([`crate::ptrace::seize_options`]): the calls pmig injects and the
//! restorer's own calls then pass no filter, and none of them can be
//! refused, or kill the process, under a filter written for the program.
//! The suspension ends when a thread is let go (detached).
//!
//! The capture reads each thread's filters with
//! `PTRACE_SECCOMP_GET_FILTER` (the instructions) and
//! `PTRACE_SECCOMP_GET_METADATA` (the `SECCOMP_FILTER_FLAG_LOG` flag),
//! newest first as the kernel numbers them, and keeps them oldest first. It
//! refuses:
//! - threads whose filters differ (a thread that installed one of its own
//!   without `SECCOMP_FILTER_FLAG_TSYNC`): the restore installs the chain
//!   once, in the main thread, before it creates the others, which
//!   inherit it;
//! - a filter that can hand a call to a supervisor
//!   (`SECCOMP_RET_USER_NOTIF`): the supervisor holds the other end, which
//!   does not move;
//! - a process with filters when this tracer cannot suspend them (it lacks
//!   `CAP_SYS_ADMIN`, or is under seccomp itself).
//!
//! The restorer installs the chain, oldest first, in the main thread,
//! right after the memory is in place and before the other threads exist;
//! it sets `no_new_privs` first when the process had it (a filter needs it,
//! or `CAP_SYS_ADMIN`, which the restore drops later). The restore's later
//! calls pass no filter (suspended), and the filters hold from the moment
//! the process is let go. A restore that cannot suspend them refuses the
//! image before anything is created.
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
    /// jt, jf, k), in the byte order of the machine.
    pub insns: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeccompState {
    /// Oldest first: the order to install them in.
    pub filters: Vec<Filter>,
    /// `no_new_privs` of the main thread, set again before the filters.
    pub no_new_privs: bool,
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
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    rd.filter_map(|e| e.ok()).any(|e| {
        std::fs::read_to_string(e.path().join("status")).is_ok_and(|s| {
            s.lines().any(|l| {
                l.split_once(':')
                    .is_some_and(|(k, v)| k == "Seccomp" && v.trim() == "2")
            })
        })
    })
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
        if got < 0 || got as usize != n {
            return Err(EngineError::Sys {
                what: format!("read seccomp filter {index} of thread {tid}"),
                source: std::io::Error::last_os_error(),
            });
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

/// Checks the shape of a chain read from an image: what the kernel
/// accepts, so that a damaged part is refused before anything is created.
fn check_chain(s: &SeccompState) -> std::result::Result<(), String> {
    let mut total = 0;
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
        total += n + 4;
    }
    if total > MAX_INSNS_PER_PATH {
        return Err(format!(
            "the seccomp filters have {total} instructions with their overhead, more than the kernel's {MAX_INSNS_PER_PATH}"
        ));
    }
    Ok(())
}

impl Resource for Seccomp {
    const PART: &'static str = "seccomp";
    /// No filter at all: not written.
    type State = SeccompState;

    fn precheck(pid: pid_t) -> Result<()> {
        // Read only where it matters: this runs again in the stop.
        if !crate::ptrace::can_suspend_seccomp() && has_filters(pid) {
            return Err(unsupported(
                pid,
                "a seccomp filter without CAP_SYS_ADMIN (pmig must suspend the filter while it works on the process)",
            ));
        }
        Ok(())
    }

    fn capture(cx: &mut Capture) -> Result<Self::State> {
        let pid = cx.pid;
        let mut chain: Option<Vec<Filter>> = None;
        for t in &cx.frozen.threads {
            let mine = filters_of(t.tid)?;
            match &chain {
                None => chain = Some(mine),
                Some(c) if *c == mine => {}
                Some(_) => {
                    return Err(unsupported(
                        pid,
                        format!(
                            "threads with different seccomp filters (thread {} installed one of its own)",
                            t.tid
                        ),
                    ))
                }
            }
        }
        let filters = chain.unwrap_or_default();
        if filters.is_empty() {
            return Ok(SeccompState {
                filters,
                no_new_privs: false,
            });
        }
        if !crate::ptrace::can_suspend_seccomp() {
            return Err(unsupported(
                pid,
                "a seccomp filter without CAP_SYS_ADMIN (pmig must suspend the filter while it works on the process)",
            ));
        }
        if filters.iter().any(notifies) {
            return Err(unsupported(
                pid,
                "a seccomp filter that hands system calls to a supervisor (SECCOMP_RET_USER_NOTIF)",
            ));
        }
        let no_new_privs = cx.status()?.get("NoNewPrivs").map(String::as_str) == Some("1");
        Ok(SeccompState {
            filters,
            no_new_privs,
        })
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

    fn plan(s: &Self::State, cx: &mut PlanCx) -> Result<()> {
        let b = &mut *cx.b;
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
        let n = s.filters.len();
        for (i, f) in s.filters.iter().enumerate() {
            let prog = b.data(&f.insns);
            // struct sock_fprog { unsigned short len; struct sock_filter *filter; }
            let fprog: [u64; 2] = [(f.insns.len() / 8) as u64, 0];
            let fprog = b.data_with_ptr(&fprog, 8, prog);
            b.syscall(
                0,
                libc::SYS_seccomp,
                &[SECCOMP_SET_MODE_FILTER.into(), f.flags.into(), fprog.into()],
                Check::NonNeg,
                format!("install seccomp filter {} of {n}", i + 1),
            );
        }
        Ok(())
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
        let big = filter(&vec![insn(BPF_RET_K, 0); MAX_INSNS]);
        let too_many = SeccompState {
            filters: vec![big; 8],
            no_new_privs: false,
        };
        assert!(check_chain(&too_many).unwrap_err().contains("32768"));
    }
}
