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

impl SignalsState {
    /// The signals whose action is to ignore them, as a mask (bit 0 is
    /// signal 1), like `SigIgn` of a process's status.
    pub fn ignored(&self) -> u64 {
        self.actions
            .iter()
            .take(64)
            .enumerate()
            .filter(|(_, a)| a.handler == libc::SIG_IGN as u64)
            .fold(0, |m, (i, _)| m | 1 << i)
    }
}

fn settable(sig: u64) -> bool {
    sig != libc::SIGKILL as u64 && sig != libc::SIGSTOP as u64
}

/// The bytes of one signal action as `rt_sigaction` writes it.
const ACTION_BYTES: u64 = 32;
const _: () = assert!(64 * ACTION_BYTES <= super::SCRATCH_LEN);

/// The signals whose actions the capture asks for: only those caught or
/// ignored can have an action other than the default (SigCgt/SigIgn), and
/// SIGCHLD, whose flags matter even with the default action. Each is a
/// system call injected into the process.
fn asked(cx: &mut Capture) -> Result<Vec<u64>> {
    let st = cx.status()?;
    let mask = |k: &str| crate::procfs::hex_u64(st.get(k).map(String::as_str).unwrap_or("0"));
    let interesting = mask("SigCgt") | mask("SigIgn") | 1 << (libc::SIGCHLD - 1);
    Ok((1..=64u64)
        .filter(|s| settable(*s) && interesting & (1 << (s - 1)) != 0)
        .collect())
}

impl Signals {
    /// The calls its capture makes in the process (see [`Capture::ask`]):
    /// each action asked for lands in its own 32 bytes, in the order asked.
    pub(crate) fn ask(cx: &mut Capture) -> Result<()> {
        let sigs = asked(cx)?;
        cx.ask(Self::PART, sigs.len() * ACTION_BYTES as usize, |out| {
            (0..sigs.len() as u64)
                .zip(&sigs)
                .map(|(k, &s)| {
                    (
                        libc::SYS_rt_sigaction,
                        vec![s, 0, out + k * ACTION_BYTES, 8],
                    )
                })
                .collect()
        })
    }
}

impl Resource for Signals {
    const PART: &'static str = "signals";
    type State = SignalsState;

    fn capture(cx: &mut Capture) -> Result<SignalsState> {
        let sigs = asked(cx)?;
        let (res, raw) = cx.answers(Self::PART, Signals::ask)?;
        let mut actions = vec![Action::default(); 64];
        for (k, &s) in sigs.iter().enumerate() {
            let o = k * ACTION_BYTES as usize;
            if res.get(k).is_none_or(|&r| r < 0) || raw.len() < o + ACTION_BYTES as usize {
                continue;
            }
            let w =
                |i: usize| u64::from_le_bytes(raw[o + i * 8..o + i * 8 + 8].try_into().unwrap());
            actions[(s - 1) as usize] = Action {
                handler: w(0),
                flags: w(1),
                restorer: w(2),
                mask: w(3),
            };
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
        // A skeleton's pending signals are queued at its bring-up.
        let pending = if cx.pf.opts.skeleton {
            &[][..]
        } else {
            &s.shared_pending[..]
        };
        for info in pending {
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

    /// The actions of the stop, each one that changed set again (glibc
    /// sets two when a program starts its first thread); SIGTRAP's is not
    /// followed (stale), for the injected calls that follow end on a trap.
    /// The process-wide pending signals of the stop, queued (every signal
    /// is blocked until the process is let go).
    fn update(
        pre: &SignalsState,
        fin: &SignalsState,
        same: bool,
        cx: &mut super::Update,
    ) -> Result<()> {
        if !same && pre.actions.len() != fin.actions.len() {
            return Err(crate::error::stale("its signal actions changed"));
        }
        for (i, (a, b)) in pre.actions.iter().zip(&fin.actions).enumerate() {
            let sig = i as u64 + 1;
            if a == b || !settable(sig) {
                continue;
            }
            if sig == libc::SIGTRAP as u64 {
                return Err(crate::error::stale("its action of SIGTRAP changed"));
            }
            let raw: Vec<u8> = [b.handler, b.flags, b.restorer, b.mask]
                .iter()
                .flat_map(|w| w.to_le_bytes())
                .collect();
            cx.call_with(0, libc::SYS_rt_sigaction, &raw, 1, &[sig, 0, 0, 8], || {
                format!("set the action of signal {sig}")
            })?;
        }
        for info in &fin.shared_pending {
            let sig = i32::from_le_bytes(info[0..4].try_into().unwrap());
            cx.call_with(
                0,
                libc::SYS_rt_sigqueueinfo,
                info,
                2,
                &[cx.pid as u64, sig as u64, 0],
                || format!("queue pending signal {sig}"),
            )?;
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

/// A signal that landed on the frozen original after its capture, to be
/// delivered to the copy instead (see [`LateSignals`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LateSignal {
    /// The original thread's id, or None for the process-wide queue.
    pub tid: Option<libc::pid_t>,
    /// Whether that thread is the main thread.
    pub main_thread: bool,
    /// Raw `siginfo_t` (128 bytes).
    pub info: Vec<u8>,
}

const SI_USER: i32 = 0;
const SI_QUEUE: i32 = -1;
const SI_TKILL: i32 = -6;

/// The signal number and `si_code` of a raw `siginfo_t`.
fn signo_code(info: &[u8]) -> Option<(i32, i32)> {
    let word = |o: usize| Some(i32::from_le_bytes(info.get(o..o + 4)?.try_into().ok()?));
    Some((word(0)?, word(8)?))
}

/// Whether a signal found on the frozen original was sent by someone to the
/// process (`kill`, `sigqueue`, `tgkill`): those are the ones to deliver to
/// its copy. Others are the original's own doing (its timers keep firing
/// while it is frozen, and the copy has them too) or the kernel's.
pub fn sent_by_someone(info: &[u8]) -> bool {
    matches!(signo_code(info), Some((s, SI_USER | SI_QUEUE | SI_TKILL)) if (1..=64).contains(&s))
}

/// The signals queued on a frozen process after it was captured, a batch
/// at a time. The process is frozen, so nothing takes signals off its
/// queues: the first entries of each queue are those the image holds, and
/// whatever is behind them arrived since. A standard (non-real-time) signal
/// already queued is not queued again by the kernel, so a second one of the
/// same number sent to the original is merged into the first, as it would
/// be in a process that has it blocked.
#[derive(Debug, Clone)]
pub struct LateSignals {
    shared_seen: usize,
    /// By thread index, as in the image.
    thread_seen: Vec<usize>,
}

impl LateSignals {
    /// After a capture whose image holds `shared` process-wide pending
    /// signals and `per_thread[i]` for thread `i`.
    pub fn after(shared: usize, per_thread: Vec<usize>) -> LateSignals {
        LateSignals {
            shared_seen: shared,
            thread_seen: per_thread,
        }
    }

    /// The signals sent to the process since the last call (or the capture).
    pub fn take(&mut self, frozen: &crate::ptrace::Frozen) -> Result<Vec<LateSignal>> {
        let mut out = Vec::new();
        let Some(main) = frozen.threads.first().map(|t| t.tid) else {
            return Ok(out);
        };
        let shared = sys::peek_siginfo(main, true)?;
        for info in shared.iter().skip(self.shared_seen) {
            if sent_by_someone(info) {
                out.push(LateSignal {
                    tid: None,
                    main_thread: false,
                    info: info.clone(),
                });
            }
        }
        self.shared_seen = self.shared_seen.max(shared.len());
        for (i, t) in frozen.threads.iter().enumerate() {
            let seen = self.thread_seen.get(i).copied().unwrap_or(0);
            let private = sys::peek_siginfo(t.tid, false)?;
            for info in private.iter().skip(seen) {
                if sent_by_someone(info) {
                    out.push(LateSignal {
                        tid: Some(t.tid),
                        main_thread: i == 0,
                        info: info.clone(),
                    });
                }
            }
            if i >= self.thread_seen.len() {
                self.thread_seen.resize(i + 1, 0);
            }
            self.thread_seen[i] = seen.max(private.len());
        }
        Ok(out)
    }
}

/// Delivers `s`, a signal sent to the original of process `pid` (see
/// [`LateSignals`]), to `pid`, keeping what the sender put in it: a
/// `sigqueue` keeps its value and sender, a `kill` arrives as a `kill` from
/// the caller. A thread-directed one goes to the thread restored from the
/// one it was sent to: `tids` pairs each thread's id in the original with
/// its id here (`Restored::tids`; empty if unknown, when only a thread that
/// kept its id is found). Some programs count on that thread and no other
/// getting it: the Go runtime stops a goroutine by a signal to its thread
/// and sends no second one until that thread has handled the first, so one
/// handled by another thread held that goroutine up for good. The main
/// thread gets one sent to it even if its id is not known, and the process
/// gets one whose thread has ended. Returns where it went.
pub fn deliver_late(
    pid: libc::pid_t,
    tids: &[(libc::pid_t, libc::pid_t)],
    s: &LateSignal,
) -> Result<&'static str> {
    let (sig, code) = signo_code(&s.info)
        .filter(|_| s.info.len() == sys::SIGINFO_SIZE && sent_by_someone(&s.info))
        .ok_or_else(|| EngineError::Other("not a signal sent by a process".into()))?;
    let tid = s.tid.and_then(|t| late_target(pid, tids, t, s.main_thread));
    // SAFETY: plain system calls on integers, and on a 128-byte siginfo
    // buffer the kernel only reads.
    let r = unsafe {
        match (tid, code) {
            (None, SI_QUEUE) => libc::syscall(libc::SYS_rt_sigqueueinfo, pid, sig, s.info.as_ptr()),
            (None, _) => libc::kill(pid, sig) as libc::c_long,
            (Some(t), SI_QUEUE) => {
                libc::syscall(libc::SYS_rt_tgsigqueueinfo, pid, t, sig, s.info.as_ptr())
            }
            (Some(t), _) => libc::syscall(libc::SYS_tgkill, pid, t, sig),
        }
    };
    if r < 0 {
        return Err(crate::error::errno_err(format!(
            "deliver signal {sig} to process {pid}"
        )));
    }
    Ok(match tid {
        None => "the process",
        Some(t) if t == pid => "its main thread",
        Some(_) => "the same thread",
    })
}

/// The thread of process `pid` restored from the original's thread `old`
/// (see [`deliver_late`]); None if it has ended.
fn late_target(
    pid: libc::pid_t,
    tids: &[(libc::pid_t, libc::pid_t)],
    old: libc::pid_t,
    main_thread: bool,
) -> Option<libc::pid_t> {
    let alive = |t: libc::pid_t| std::path::Path::new(&format!("/proc/{pid}/task/{t}")).exists();
    let now = match tids.iter().find(|p| p.0 == old) {
        Some(&(_, new)) => new,
        None if main_thread => pid,
        None => old,
    };
    alive(now).then_some(now)
}

#[cfg(test)]
mod late_tests {
    use super::*;

    fn info(sig: i32, code: i32) -> Vec<u8> {
        let mut v = vec![0u8; sys::SIGINFO_SIZE];
        v[0..4].copy_from_slice(&sig.to_le_bytes());
        v[8..12].copy_from_slice(&code.to_le_bytes());
        v
    }

    #[test]
    fn only_signals_someone_sent_are_passed_on() {
        assert!(sent_by_someone(&info(libc::SIGTERM, SI_USER)));
        assert!(sent_by_someone(&info(libc::SIGRTMIN() + 1, SI_QUEUE)));
        assert!(sent_by_someone(&info(libc::SIGUSR1, SI_TKILL)));
        // The original's own timers: SI_TIMER, and itimers' SI_KERNEL.
        assert!(!sent_by_someone(&info(libc::SIGALRM, -2)));
        assert!(!sent_by_someone(&info(libc::SIGALRM, 0x80)));
        // A fault, a child's exit.
        assert!(!sent_by_someone(&info(libc::SIGSEGV, 1)));
        assert!(!sent_by_someone(&info(libc::SIGCHLD, 1)));
        assert!(!sent_by_someone(&info(0, SI_USER)));
        assert!(!sent_by_someone(&[0u8; 4]));
    }

    #[test]
    fn a_queued_signal_keeps_its_value_and_a_bad_one_is_refused() {
        // To ourselves, blocked, then read back with sigtimedwait.
        let me = std::process::id() as libc::pid_t;
        let sig = libc::SIGRTMIN() + 3;
        // SAFETY: a zeroed sigset_t is valid; sigaddset/pthread_sigmask on it.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        unsafe {
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
        let mut i = info(sig, SI_QUEUE);
        i[16..20].copy_from_slice(&4242i32.to_le_bytes()); // si_pid
        i[24..32].copy_from_slice(&77u64.to_le_bytes()); // si_value
        let tid = nix::unistd::gettid().as_raw();
        let s = LateSignal {
            tid: Some(tid),
            main_thread: false,
            info: i,
        };
        assert_eq!(deliver_late(me, &[], &s).unwrap(), "the same thread");
        // SAFETY: a zeroed siginfo_t is valid output storage.
        let mut got: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let ts = libc::timespec {
            tv_sec: 5,
            tv_nsec: 0,
        };
        // SAFETY: valid set, output and timeout pointers.
        let r = unsafe { libc::sigtimedwait(&set, &mut got, &ts) };
        // SAFETY: restoring our own mask.
        unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
        assert_eq!(r, sig);
        // SAFETY: reading the union members of a SI_QUEUE siginfo.
        unsafe {
            assert_eq!(got.si_code, SI_QUEUE);
            assert_eq!(got.si_pid(), 4242);
            assert_eq!(got.si_value().sival_ptr as u64, 77);
        }
        let bad = LateSignal {
            tid: None,
            main_thread: false,
            info: info(libc::SIGALRM, -2),
        };
        assert!(deliver_late(me, &[], &bad).is_err());
    }

    /// A thread-directed signal goes to the thread restored from the one it
    /// was sent to, by the pairs of ids, before one that has the old id.
    #[test]
    fn a_signal_to_a_thread_follows_it_to_its_new_id() {
        let me = std::process::id() as libc::pid_t;
        let this = nix::unistd::gettid().as_raw();
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            tx.send(nix::unistd::gettid().as_raw()).unwrap();
            let _ = done_rx.recv();
        });
        let other_tid = rx.recv().unwrap();
        // An id no thread has here (ids are at most 2^22).
        let gone = 1 << 23;
        // Renamed: the original's `gone` is `other_tid` now; the original's
        // `this` is `other_tid` too, although a thread here has `this`.
        assert_eq!(
            late_target(me, &[(gone, other_tid)], gone, false),
            Some(other_tid)
        );
        assert_eq!(
            late_target(me, &[(this, other_tid)], this, false),
            Some(other_tid)
        );
        // Ids not known: one kept is found, the main thread is the main
        // thread, one that is gone goes to the process.
        assert_eq!(late_target(me, &[], this, false), Some(this));
        assert_eq!(late_target(me, &[], gone, true), Some(me));
        assert_eq!(late_target(me, &[], gone, false), None);
        // Its thread has ended here.
        done_tx.send(()).unwrap();
        other.join().unwrap();
        let t0 = std::time::Instant::now();
        while std::path::Path::new(&format!("/proc/{me}/task/{other_tid}")).exists() {
            assert!(t0.elapsed() < std::time::Duration::from_secs(10));
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(late_target(me, &[(gone, other_tid)], gone, false), None);
    }
}
