//! Stopping a process's threads and running system calls inside them.
//!
//! [`Frozen`] holds every thread of a process in a ptrace event stop. While
//! frozen, [`Frozen::inject`] makes a thread execute one system call at a
//! `syscall` instruction that already exists in the process (in its vDSO), and
//! puts the thread's registers back exactly as they were. The thread then
//! waits in the stop after its last injected call; it is parked in an event
//! stop again before it may run ([`Frozen::detach`], and on drop), so that
//! an interrupted system call of its own restarts as it would have. Parking
//! once, not after every injection, saves two context switches per
//! injection while the process is stopped.

use crate::error::{errno_err, Ctx, EngineError, Result};
use crate::sys::{self, UserRegs};
use libc::pid_t;
use nix::sys::ptrace;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::collections::BTreeSet;

const PTRACE_EVENT_STOP: i32 = 128;

/// How a seized thread is stopped right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopKind {
    Event,
    /// Our own int3 (restore) or a signal-delivery stop.
    Signal,
    /// The syscall-exit stop of an injected call, registers put back: must
    /// be parked before the thread runs.
    Injected,
}

#[derive(Debug)]
pub struct Thread {
    pub tid: pid_t,
    stop: StopKind,
    /// The thread's own signal mask; while frozen every signal is blocked so
    /// that none is delivered (or lost) while we work on the thread.
    mask: Option<u64>,
    /// The signal that had stopped the thread's process (job control), if
    /// it was stopped when frozen: its first stop was a group-stop.
    group_stop: Option<i32>,
}

/// Threads of one process, all stopped under our ptrace.
#[derive(Debug)]
pub struct Frozen {
    pub pid: pid_t,
    pub threads: Vec<Thread>,
    gadget: Option<u64>,
    detached: bool,
    /// Stop the process (SIGSTOP) as it is let go (see [`Frozen::detach`]).
    stop_on_detach: bool,
}

fn wait_stop(tid: pid_t) -> Result<WaitStatus> {
    loop {
        match waitpid(Pid::from_raw(tid), Some(WaitPidFlag::__WALL)) {
            Ok(s) => return Ok(s),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e).ctx(|| format!("wait for thread {tid}")),
        }
    }
}

pub fn list_tids(pid: pid_t) -> Result<BTreeSet<pid_t>> {
    let rd =
        std::fs::read_dir(format!("/proc/{pid}/task")).map_err(|_| EngineError::NoProcess(pid))?;
    Ok(rd
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect())
}

impl Frozen {
    /// Seize and stop every thread of `pid`. Signals that were about to be
    /// delivered are delivered first (they happened before the freeze).
    pub fn freeze(pid: pid_t) -> Result<Frozen> {
        let mut f = Frozen {
            pid,
            threads: Vec::new(),
            gadget: None,
            detached: false,
            stop_on_detach: false,
        };
        let mut seen = BTreeSet::new();
        // Threads can appear while we stop the others; loop until none is new.
        for _round in 0..1000 {
            let tids = list_tids(pid)?;
            let new: Vec<pid_t> = tids.difference(&seen).copied().collect();
            if new.is_empty() {
                break;
            }
            for tid in new {
                seen.insert(tid);
                match ptrace::seize(Pid::from_raw(tid), ptrace::Options::PTRACE_O_TRACESYSGOOD) {
                    Ok(()) => {}
                    Err(nix::errno::Errno::ESRCH) => continue,
                    Err(nix::errno::Errno::EPERM) => {
                        return Err(if tid == pid {
                            EngineError::Other(format!("cannot stop process {pid}: ptrace not permitted (already traced, or not yours)"))
                        } else {
                            EngineError::Other(format!(
                                "cannot stop thread {tid} of process {pid}: ptrace not permitted"
                            ))
                        });
                    }
                    Err(e) => return Err(e).ctx(|| format!("ptrace seize thread {tid}")),
                }
                if let Err(e) = ptrace::interrupt(Pid::from_raw(tid)) {
                    if e != nix::errno::Errno::ESRCH {
                        return Err(e).ctx(|| format!("interrupt thread {tid}"));
                    }
                }
                if let Some(stop_sig) = f.settle(tid)? {
                    let mask = sys::get_sigmask(tid)?;
                    sys::set_sigmask(tid, !0u64)?;
                    f.threads.push(Thread {
                        tid,
                        stop: StopKind::Event,
                        mask: Some(mask),
                        group_stop: (stop_sig != libc::SIGTRAP).then_some(stop_sig),
                    });
                }
            }
        }
        if !f.threads.iter().any(|t| t.tid == pid) {
            return Err(EngineError::NoProcess(pid));
        }
        // Main thread first, then by tid: the image's thread order.
        f.threads.sort_by_key(|t| (t.tid != pid, t.tid));
        Ok(f)
    }

    /// Wait until `tid` sits in an event stop; returns the stop's signal:
    /// SIGTRAP for the stop our interrupt asked for, the stopping signal for
    /// a group-stop (the process was stopped by job control). None if it
    /// exited.
    fn settle(&mut self, tid: pid_t) -> Result<Option<i32>> {
        for _ in 0..64 {
            match wait_stop(tid)? {
                WaitStatus::PtraceEvent(_, sig, ev) if ev == PTRACE_EVENT_STOP => {
                    return Ok(Some(sig as i32))
                }
                WaitStatus::Stopped(_, sig) => {
                    // A signal was being delivered: let it be (the interrupt
                    // is still pending and stops the thread right after).
                    ptrace::cont(Pid::from_raw(tid), Some(sig))
                        .ctx(|| format!("resume thread {tid}"))?;
                }
                WaitStatus::PtraceEvent(..) | WaitStatus::PtraceSyscall(_) => {
                    ptrace::cont(Pid::from_raw(tid), None)
                        .ctx(|| format!("resume thread {tid}"))?;
                }
                WaitStatus::Exited(..) | WaitStatus::Signaled(..) => return Ok(None),
                _ => {}
            }
        }
        Err(EngineError::Other(format!("thread {tid} did not stop")))
    }

    /// Adopt threads that are already traced by us and stopped (restore).
    pub fn adopt(pid: pid_t, tids: &[pid_t]) -> Frozen {
        Frozen {
            pid,
            threads: tids
                .iter()
                .map(|&tid| Thread {
                    tid,
                    stop: StopKind::Signal,
                    mask: None,
                    group_stop: None,
                })
                .collect(),
            gadget: None,
            detached: false,
            stop_on_detach: false,
        }
    }

    /// The signal that had stopped the process when it was frozen, if job
    /// control had stopped it (SIGSTOP, SIGTSTP, SIGTTIN or SIGTTOU).
    pub fn group_stop(&self) -> Option<i32> {
        self.threads.iter().find_map(|t| t.group_stop)
    }

    /// Makes [`Frozen::detach`] leave the process stopped by job control,
    /// as if by SIGSTOP, instead of running.
    pub fn stop_on_detach(&mut self) {
        self.stop_on_detach = true;
    }

    /// The signal mask thread `idx` had before the freeze.
    pub fn sigmask(&self, idx: usize) -> Result<u64> {
        match self.threads[idx].mask {
            Some(m) => Ok(m),
            None => sys::get_sigmask(self.threads[idx].tid),
        }
    }

    pub fn tids(&self) -> Vec<pid_t> {
        self.threads.iter().map(|t| t.tid).collect()
    }

    /// Runs injected calls at `addr`, which must hold a `syscall`
    /// instruction in executable memory of the process (e.g. the restorer's
    /// own code, known without reading the process's mappings). An injected
    /// `munmap` over it makes the next call look for another.
    pub fn use_gadget(&mut self, addr: u64) {
        self.gadget = Some(addr);
    }

    /// Find a `syscall` instruction in the process to run injected calls at.
    fn gadget(&mut self) -> Result<u64> {
        if let Some(g) = self.gadget {
            return Ok(g);
        }
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", self.pid))
            .ctx(|| format!("read maps of {}", self.pid))?;
        // The vDSO first (always there, never changes), then any executable mapping.
        let mut cands: Vec<(u64, u64)> = Vec::new();
        for pass in 0..2 {
            for l in maps.lines() {
                let mut it = l.split_whitespace();
                let (range, perms) = (it.next().unwrap_or(""), it.next().unwrap_or(""));
                let is_vdso = l.ends_with("[vdso]");
                if (pass == 0 && is_vdso) || (pass == 1 && !is_vdso && perms.starts_with("r-x")) {
                    if let Some((a, b)) = range.split_once('-') {
                        if let (Ok(a), Ok(b)) =
                            (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16))
                        {
                            cands.push((a, b));
                        }
                    }
                }
            }
        }
        for (a, b) in cands {
            let mut buf = vec![0u8; (b - a).min(1 << 20) as usize];
            if sys::process_vm_read(self.pid, a, &mut buf).is_err() {
                continue;
            }
            if let Some(i) = buf.windows(2).position(|w| w == [0x0f, 0x05]) {
                self.gadget = Some(a + i as u64);
                return Ok(a + i as u64);
            }
        }
        Err(EngineError::Other(format!(
            "process {}: no syscall instruction found to inject at",
            self.pid
        )))
    }

    /// Run `nr(args)` in thread `idx` and return the raw result (negative errno).
    pub fn inject(&mut self, idx: usize, nr: i64, args: &[u64]) -> Result<i64> {
        Ok(self.inject_many(idx, &[(nr, args)])?[0])
    }

    /// Run several system calls in a row in thread `idx`, then put it back.
    pub fn inject_many(&mut self, idx: usize, calls: &[(i64, &[u64])]) -> Result<Vec<i64>> {
        let mut gadget = self.gadget()?;
        let tid = self.threads[idx].tid;
        let saved = sys::get_regs(tid)?;
        let mut out = Vec::with_capacity(calls.len());
        let res = (|| -> Result<()> {
            for (nr, args) in calls {
                let mut r = saved;
                r.rax = *nr as u64;
                r.orig_rax = u64::MAX; // no syscall restart on the way out
                let a = |i: usize| args.get(i).copied().unwrap_or(0);
                r.rdi = a(0);
                r.rsi = a(1);
                r.rdx = a(2);
                r.r10 = a(3);
                r.r8 = a(4);
                r.r9 = a(5);
                r.rip = gadget;
                sys::set_regs(tid, &r)?;
                // syscall-enter stop, then syscall-exit stop
                for _ in 0..2 {
                    ptrace::syscall(Pid::from_raw(tid), None)
                        .ctx(|| format!("step thread {tid}"))?;
                    loop {
                        match wait_stop(tid)? {
                            WaitStatus::PtraceSyscall(_) => break,
                            WaitStatus::Exited(..) | WaitStatus::Signaled(..) => {
                                return Err(EngineError::Other(format!(
                                    "thread {tid} died during an injected system call"
                                )))
                            }
                            // Every blockable signal is blocked while frozen.
                            WaitStatus::Stopped(_, sig) => {
                                return Err(EngineError::Other(format!(
                                    "thread {tid} got {sig} during an injected system call"
                                )))
                            }
                            WaitStatus::PtraceEvent(..) => {
                                ptrace::syscall(Pid::from_raw(tid), None)
                                    .ctx(|| format!("step thread {tid}"))?;
                            }
                            _ => {}
                        }
                    }
                }
                out.push(sys::get_regs(tid)?.rax as i64);
                // The instruction may be gone with the memory it was in.
                if *nr == libc::SYS_munmap && gadget >= a(0) && gadget - a(0) < a(1) {
                    self.gadget = None;
                    gadget = self.gadget()?;
                }
            }
            Ok(())
        })();
        // Put the thread's registers back exactly as they were. It stays in
        // the injected call's stop until parked (see the module's comment);
        // after a failure it is parked at once.
        sys::set_regs(tid, &saved)?;
        self.threads[idx].stop = StopKind::Injected;
        if res.is_err() {
            self.park(idx)?;
        }
        res?;
        Ok(out)
    }

    /// Park every thread left in the stop of an injected call (see the
    /// module's comment).
    pub fn park_all(&mut self) -> Result<()> {
        let mut first = Ok(());
        for idx in 0..self.threads.len() {
            if self.threads[idx].stop == StopKind::Injected {
                if let Err(e) = self.park(idx) {
                    if first.is_ok() {
                        first = Err(e);
                    }
                }
            }
        }
        first
    }

    /// Leave thread `idx` (registers already restored) waiting in an event stop.
    fn park(&mut self, idx: usize) -> Result<()> {
        let tid = self.threads[idx].tid;
        ptrace::interrupt(Pid::from_raw(tid)).ctx(|| format!("interrupt thread {tid}"))?;
        ptrace::cont(Pid::from_raw(tid), None).ctx(|| format!("resume thread {tid}"))?;
        if self.settle(tid)?.is_none() {
            return Err(EngineError::Other(format!("thread {tid} exited")));
        }
        self.threads[idx].stop = StopKind::Event;
        Ok(())
    }

    /// Stop managing the threads without detaching (the caller keeps
    /// tracing); threads left in an injected call's stop are parked first.
    pub fn forget(mut self) -> Result<()> {
        self.detached = true;
        self.park_all()
    }

    /// Let every thread go on running.
    pub fn detach(mut self) -> Result<()> {
        self.detached = true;
        let parked = self.park_all();
        self.restore_masks();
        // Queued while every thread is held: the first thing each does once
        // let go is to take it and stop, before any instruction of its own.
        // (Not earlier: a thread resumed under ptrace, to park it or for an
        // injected call, would report the signal to us.)
        // SAFETY: sending a signal to the process we hold.
        let stopped = if self.stop_on_detach && unsafe { libc::kill(self.pid, libc::SIGSTOP) } < 0 {
            Err(errno_err(format!("stop process {}", self.pid)))
        } else {
            Ok(())
        };
        let mut first = None;
        for t in &self.threads {
            if let Err(e) = ptrace::detach(Pid::from_raw(t.tid), None) {
                if e != nix::errno::Errno::ESRCH && first.is_none() {
                    first = Some(e);
                }
            }
        }
        match first {
            Some(e) => Err(e).ctx(|| format!("detach from process {}", self.pid)),
            None => parked.and(stopped),
        }
    }

    /// Kill the process (after a successful dump).
    pub fn kill(mut self) -> Result<()> {
        self.detached = true;
        // SAFETY: sending a signal.
        if unsafe { libc::kill(self.pid, libc::SIGKILL) } < 0 {
            return Err(errno_err(format!("kill process {}", self.pid)));
        }
        Ok(())
    }
}

impl Frozen {
    fn restore_masks(&self) {
        for t in &self.threads {
            if let Some(m) = t.mask {
                let _ = sys::set_sigmask(t.tid, m);
            }
        }
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        if !self.detached {
            let _ = self.park_all();
            self.restore_masks();
            for t in &self.threads {
                let _ = ptrace::detach(Pid::from_raw(t.tid), None);
            }
        }
    }
}

pub fn regs_of(tid: pid_t) -> Result<UserRegs> {
    sys::get_regs(tid)
}
