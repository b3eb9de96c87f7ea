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
//!
//! Each call injected that way costs two stops (at the call's entry and at
//! its exit), about 0.1 ms on a small VM. Once the capture has mapped a page
//! of code in the process, [`Frozen::use_stub`] makes a batch of calls one
//! piece of code instead, run with one resume and one stop: that is what
//! keeps the many small questions of a capture (signal actions, each
//! thread's settings) from adding up at the stop.

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
    /// While [`Frozen::colocate`] keeps the thread on the tracer's CPU: the
    /// CPU affinity (mask words) to give it back before it runs.
    affinity: Option<Vec<u64>>,
}

/// Threads of one process, all stopped under our ptrace.
#[derive(Debug)]
pub struct Frozen {
    pub pid: pid_t,
    pub threads: Vec<Thread>,
    gadget: Option<u64>,
    /// Whether the process ignores SIGTRAP, once known (see
    /// [`Frozen::know_ignored`]): injected calls are single-stepped only
    /// when it does not.
    ignores_trap: Option<bool>,
    /// Where batches of injected calls run as code (see [`Frozen::use_stub`]).
    stub: Option<Stub>,
    detached: bool,
    /// Stop the process (SIGSTOP) as it is let go (see [`Frozen::detach`]).
    stop_on_detach: bool,
    /// While colocated: the tracing thread's own affinity, to set back.
    own_affinity: Option<Vec<u64>>,
}

/// How many CPUs the calling thread may run on (1 if that cannot be read).
pub fn usable_cpus() -> usize {
    read_affinity(0).map_or(1, |m| count_cpus(&m).max(1))
}

fn count_cpus(mask: &[u64]) -> usize {
    mask.iter().map(|w| w.count_ones() as usize).sum()
}

/// Runs the calling thread on the CPUs of `allowed` but `cpu`, where there
/// are any: work done beside a colocated capture ([`Frozen::colocated`])
/// then leaves that CPU to the capture's round trips with the process,
/// which would wait behind it otherwise (a long page-table walk in the
/// kernel is not cut short for them). Best effort.
pub fn avoid_cpu(cpu: usize, allowed: &[u64]) {
    let mut mask = allowed.to_vec();
    let (w, bit) = (cpu / 64, 1u64 << (cpu % 64));
    if w < mask.len() {
        mask[w] &= !bit;
    }
    if count_cpus(&mask) == 0 {
        return;
    }
    if let Err(e) = set_affinity(0, &mask) {
        tracing::debug!("CPU {cpu} not left to the capture: {e}");
    }
}

/// The CPU affinity of thread `tid` (0: the caller) as mask words.
fn read_affinity(tid: pid_t) -> std::io::Result<Vec<u64>> {
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
        return Err(std::io::Error::last_os_error());
    }
    Ok(set[..(r as usize).div_ceil(8)].to_vec())
}

/// Sets the CPU affinity of thread `tid` (0: the caller) to `mask`.
pub fn set_affinity(tid: pid_t, mask: &[u64]) -> std::io::Result<()> {
    // SAFETY: sched_setaffinity reads `mask`, which is that long.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_setaffinity,
            tid,
            std::mem::size_of_val(mask),
            mask.as_ptr(),
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A page of code in the process that runs a batch of injected calls in
/// one go (see [`Frozen::use_stub`]).
#[derive(Debug)]
struct Stub {
    /// Executable, not writable by the process; written through `mem`.
    code: u64,
    /// Writable: the code stores each call's result here (8 bytes each).
    results: u64,
    /// The process's `/proc/PID/mem`, open for writing.
    mem: std::fs::File,
    /// The code last written at `code` (only this module writes there, and
    /// the process cannot): the same calls again, in another thread, say,
    /// need no write.
    written: Vec<u8>,
}

/// Bytes of code per call in a [`Stub`]: seven `mov r64, imm64`, `syscall`,
/// and `mov [moffs64], rax`.
const STUB_CALL_BYTES: usize = 7 * 10 + 2 + 10;

/// The most calls one run of a [`Stub`] makes: its code, and the `int3`
/// that ends it, fit a page.
pub const STUB_CALLS: usize = (STUB_BYTES - 1) / STUB_CALL_BYTES;
const _: () = assert!(STUB_CALLS * STUB_CALL_BYTES < STUB_BYTES);

/// Calls for [`Frozen::inject_each`] to inject in one thread: the
/// thread's index, and each call's number and arguments.
pub type Batch<'a> = (usize, &'a [(i64, &'a [u64])]);

/// The size of a [`Stub`]'s page of code.
const STUB_BYTES: usize = 4096;

const SIGTRAP_BIT: u64 = 1 << (libc::SIGTRAP - 1);

/// The `si_code` of a trap the kernel raised (x86's `int3`).
const SI_KERNEL: i32 = 0x80;
/// `si_code`s of a single step's SIGTRAP: the kernel's report at the end of
/// a stepped system call, and the processor's debug trap.
const TRAP_BRKPT: i32 = 1;
const TRAP_TRACE: i32 = 2;

/// x86-64 code that makes `calls` one after the other, stores the result of
/// call `i` at `results + 8 * i`, and ends with `int3`.
fn stub_code(calls: &[(i64, &[u64])], results: u64) -> Vec<u8> {
    let mut c = Vec::with_capacity(calls.len() * STUB_CALL_BYTES + 1);
    for (i, (nr, args)) in calls.iter().enumerate() {
        let a = |k: usize| args.get(k).copied().unwrap_or(0);
        // mov rax/rdi/rsi/rdx/r10/r8/r9, imm64: the call's number and arguments.
        let movs = [
            ([0x48, 0xb8], *nr as u64),
            ([0x48, 0xbf], a(0)),
            ([0x48, 0xbe], a(1)),
            ([0x48, 0xba], a(2)),
            ([0x49, 0xba], a(3)),
            ([0x49, 0xb8], a(4)),
            ([0x49, 0xb9], a(5)),
        ];
        for (op, v) in movs {
            c.extend_from_slice(&op);
            c.extend_from_slice(&v.to_le_bytes());
        }
        c.extend_from_slice(&[0x0f, 0x05]); // syscall
        c.extend_from_slice(&[0x48, 0xa3]); // mov [moffs64], rax
        c.extend_from_slice(&(results + 8 * i as u64).to_le_bytes());
    }
    c.push(0xcc); // int3
    c
}

/// Calls a [`Stub`] does not run: they start a thread, whose event stop
/// the stub's run would take for a stray one.
fn starts_thread(nr: i64) -> bool {
    nr == libc::SYS_clone || nr == libc::SYS_clone3
}

/// Calls a [`Stub`] does not run: they change the mappings, and so could
/// take away its own page.
fn changes_mappings(nr: i64) -> bool {
    [
        libc::SYS_mmap,
        libc::SYS_munmap,
        libc::SYS_mremap,
        libc::SYS_mprotect,
    ]
    .contains(&nr)
}

/// Waits for thread `tid`'s next stop, or its end ([`wait_stop_until`]
/// without a deadline).
fn wait_stop(tid: pid_t) -> Result<WaitStatus> {
    // Without a deadline the poll ends only with a status (or an error).
    Ok(poll_stop(tid, None)?.expect("no deadline to pass"))
}

/// Whether `tid` has died and is a zombie.
fn is_zombie(tid: pid_t) -> bool {
    crate::procfs::stat_fields(tid)
        .ok()
        .and_then(|f| f.into_iter().next())
        .is_some_and(|st| st == "Z" || st == "X")
}

/// Reaps the other threads of `tid`'s group that are zombies: a group
/// leader that died (a SIGKILL, a seccomp filter's kill) is reported only
/// once they are, and they are traced by this thread too. Only dead ones
/// are waited for, so that no stop of a live thread is taken.
fn reap_dead_siblings(tid: pid_t) {
    let flags = Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG);
    for t in list_tids(tid).unwrap_or_default() {
        if t != tid && is_zombie(t) {
            let _ = waitpid(Pid::from_raw(t), flags);
        }
    }
}

/// How long [`Frozen::freeze`] waits for each thread to stop. A thread
/// stops within microseconds unless it sits in an uninterruptible wait
/// (state D: a disk or network file system that does not answer, a parent
/// waiting for its `vfork` child to exec); beyond this the freeze gives up
/// and the process runs on.
pub const FREEZE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// [`wait_stop`] bounded by `deadline`: None if `tid` has not changed state
/// by then.
fn wait_stop_until(tid: pid_t, deadline: std::time::Instant) -> Result<Option<WaitStatus>> {
    poll_stop(tid, Some(deadline))
}

/// Waits for thread `tid`'s next stop or its end, until `deadline` if any
/// (None once it has passed). Polls, without blocking: while `tid` is a
/// zombie, its dead siblings are reaped ([`reap_dead_siblings`]), which a
/// blocking wait would wait for ever for. For the first 0.2 ms it yields
/// the CPU between tries (an injected call returns, and a running or
/// sleeping thread stops, within microseconds), then naps from 20 µs,
/// doubling up to 0.25 ms (a longer call, such as an `munmap` of much
/// memory, is seen to end at most that late).
fn poll_stop(tid: pid_t, deadline: Option<std::time::Instant>) -> Result<Option<WaitStatus>> {
    use std::time::{Duration, Instant};
    let flags = Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG);
    let start = Instant::now();
    let mut nap = Duration::from_micros(20);
    let mut next_look = start + Duration::from_millis(5);
    loop {
        match waitpid(Pid::from_raw(tid), flags) {
            Ok(WaitStatus::StillAlive) => {}
            Ok(s) => return Ok(Some(s)),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e).ctx(|| format!("wait for thread {tid}")),
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Ok(None);
        }
        if now >= next_look {
            next_look = now + Duration::from_millis(5);
            if is_zombie(tid) {
                reap_dead_siblings(tid);
            }
        }
        if now - start < Duration::from_micros(200) {
            std::thread::yield_now();
        } else {
            let left = deadline.map_or(nap, |d| d - now);
            std::thread::sleep(nap.min(left));
            nap = (nap * 2).min(Duration::from_micros(250));
        }
    }
}

/// `PTRACE_O_SUSPEND_SECCOMP`, which nix does not name.
const PTRACE_O_SUSPEND_SECCOMP: i32 = 1 << 21;

/// Whether this process may trace with `PTRACE_O_SUSPEND_SECCOMP`: the
/// kernel allows it to a tracer with `CAP_SYS_ADMIN` that is under no
/// seccomp mode itself, if it was built with checkpoint/restore. Found
/// once, by seizing a child with it.
pub fn can_suspend_seccomp() -> bool {
    static CAN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CAN.get_or_init(|| {
        let Ok(st) = crate::procfs::status(std::process::id() as pid_t) else {
            return false;
        };
        let cap_eff = crate::procfs::hex_u64(st.get("CapEff").map(String::as_str).unwrap_or("0"));
        const CAP_SYS_ADMIN: u32 = 21;
        cap_eff & (1 << CAP_SYS_ADMIN) != 0
            && st.get("Seccomp").map(String::as_str) == Some("0")
            && suspends_seccomp()
    })
}

/// Whether a seize with `PTRACE_O_SUSPEND_SECCOMP` of a child of ours
/// works (a kernel without checkpoint/restore refuses it with EINVAL).
fn suspends_seccomp() -> bool {
    crate::check::Sleeper::new()
        .is_some_and(|s| ptrace::seize(Pid::from_raw(s.0), suspend_seccomp()).is_ok())
}

/// The options of every thread held to work on: system-call stops marked,
/// and the process's seccomp filters suspended while it is traced
/// ([`can_suspend_seccomp`]), so that no call pmig injects is refused, or
/// kills the process, under a filter of its own. Set once the thread is in
/// its stop, not at the seize: from the seize to the stop the thread runs
/// its own code, and a call it made then would pass no filter. (A thread
/// let go is detached, which ends the suspension.)
pub fn seize_options() -> ptrace::Options {
    let mut o = ptrace::Options::PTRACE_O_TRACESYSGOOD;
    if can_suspend_seccomp() {
        o |= suspend_seccomp();
    }
    o
}

/// `PTRACE_O_SUSPEND_SECCOMP` as an option.
pub fn suspend_seccomp() -> ptrace::Options {
    ptrace::Options::from_bits_retain(PTRACE_O_SUSPEND_SECCOMP)
}

/// Seizes thread `tid` of process `pid` and asks it to stop. False if it
/// is gone (or exiting, which refuses ptrace). Does not wait for the stop.
/// Its filters are not suspended yet (see [`seize_options`]).
fn seize_and_interrupt(pid: pid_t, tid: pid_t) -> Result<bool> {
    match ptrace::seize(Pid::from_raw(tid), ptrace::Options::PTRACE_O_TRACESYSGOOD) {
        Ok(()) => {}
        Err(nix::errno::Errno::ESRCH) => return Ok(false),
        // A thread that has begun to exit cannot be traced any more: as if
        // it were gone. (It refuses from the moment it starts to exit,
        // PF_EXITING, while its state still reads as running.)
        Err(nix::errno::Errno::EPERM) if crate::procfs::has_exited(tid) => return Ok(false),
        Err(nix::errno::Errno::EPERM) => {
            let why = match crate::procfs::tracer_of(tid) {
                Some(t) => format!("it is traced by {}", crate::procfs::describe_tracer(t)),
                None if tid == pid => "not permitted (not yours?)".to_string(),
                None => "not permitted".to_string(),
            };
            return Err(if tid == pid {
                EngineError::Other(format!("cannot stop process {pid}: {why}"))
            } else {
                EngineError::Other(format!("cannot stop thread {tid} of process {pid}: {why}"))
            });
        }
        Err(e) => return Err(e).ctx(|| format!("ptrace seize thread {tid}")),
    }
    match ptrace::interrupt(Pid::from_raw(tid)) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(true),
        Err(e) => Err(e).ctx(|| format!("interrupt thread {tid}")),
    }
}

/// What thread `tid` of `pid` is doing, for an error: its state and the
/// kernel function it waits in, e.g. "state D (uninterruptible wait) in
/// wait_for_vfork_done".
fn thread_state(pid: pid_t, tid: pid_t) -> String {
    let dir = format!("/proc/{pid}/task/{tid}");
    let state = crate::procfs::stat_fields(tid)
        .ok()
        .and_then(|f| f.into_iter().next())
        .unwrap_or_else(|| "?".into());
    let what = match state.as_str() {
        "D" => " (uninterruptible wait)",
        "T" | "t" => " (stopped)",
        "R" => " (running)",
        "S" => " (sleeping)",
        _ => "",
    };
    let wchan = crate::procfs::slurp(&format!("{dir}/wchan")).unwrap_or_default();
    let wchan = wchan.trim();
    if wchan.is_empty() || wchan == "0" {
        format!("state {state}{what}")
    } else {
        format!("state {state}{what} in {wchan}")
    }
}

/// Calls that end with EINTR, never restarted, when anything interrupts
/// them, our own freeze included (it stops the thread without a signal):
/// `epoll_wait` and its variants, `rt_sigtimedwait`, `semop`, `semtimedop`,
/// `io_getevents`, `io_pgetevents`.
const EINTR_ON_STOP: [i64; 8] = [
    libc::SYS_epoll_wait,
    libc::SYS_epoll_pwait,
    libc::SYS_epoll_pwait2,
    libc::SYS_rt_sigtimedwait,
    libc::SYS_semop,
    libc::SYS_semtimedop,
    libc::SYS_io_getevents,
    333, // io_pgetevents
];
const EINTR: i64 = -(libc::EINTR as i64);
/// Restart the call if no handler runs (`-ERESTARTNOHAND`): a handler
/// still gets EINTR.
const ERESTARTNOHAND: i64 = -514;

/// Thread `tid`, just stopped by our interrupt: if that ended one of the
/// [`EINTR_ON_STOP`] calls with EINTR, the call is made to restart instead,
/// as if the stop had never happened (after the freeze on this node, or
/// after the restore on another). A signal with a handler that arrived
/// meanwhile still ends it with EINTR, as it would have.
fn undo_eintr(tid: pid_t) -> Result<()> {
    let mut r = sys::get_regs(tid)?;
    if r.rax as i64 == EINTR && EINTR_ON_STOP.contains(&(r.orig_rax as i64)) {
        r.rax = ERESTARTNOHAND as u64;
        sys::set_regs(tid, &r)?;
    }
    Ok(())
}

/// Runs `work` on process `pid`, frozen, then lets it run, all from a
/// thread of its own that ends with it: for long-lived callers (the
/// daemon), whose threads would otherwise keep a thread that did not stop
/// in time seized (see [`Frozen::freeze_within`]).
pub fn with_frozen<T: Send>(
    pid: pid_t,
    work: impl FnOnce(&mut Frozen) -> Result<T> + Send,
) -> Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut f = Frozen::freeze(pid)?;
            let r = work(&mut f);
            f.detach()?;
            r
        })
        .join()
        .unwrap_or_else(|_| {
            Err(EngineError::Other(format!(
                "the work on frozen process {pid} panicked"
            )))
        })
    })
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
    /// Bounded by [`FREEZE_TIMEOUT`] per thread (see [`Frozen::freeze_within`]).
    pub fn freeze(pid: pid_t) -> Result<Frozen> {
        Self::freeze_within(pid, FREEZE_TIMEOUT)
    }

    /// [`Frozen::freeze`], waiting at most `per_thread` for each thread to
    /// stop. Every thread known is asked to stop before the first is waited
    /// for, so the freeze lasts about as long as its slowest thread takes.
    /// A thread that does not stop in time fails the freeze with an
    /// error naming it and what it waits for; the threads that stopped
    /// run on at once. That thread stays seized, and stops once its wait
    /// ends, until the calling *thread* exits (the kernel then lets it go:
    /// only the tracing thread can detach it, and it cannot while it runs).
    /// A long-lived process (the daemon) freezes from a thread of its own
    /// for that reason.
    pub fn freeze_within(pid: pid_t, per_thread: std::time::Duration) -> Result<Frozen> {
        let mut f = Frozen {
            pid,
            threads: Vec::new(),
            gadget: None,
            ignores_trap: None,
            stub: None,
            detached: false,
            stop_on_detach: false,
            own_affinity: None,
        };
        let mut seen = BTreeSet::new();
        // Threads can appear while we stop the others; loop until none is new.
        for _round in 0..1000 {
            let tids = list_tids(pid)?;
            let new: Vec<pid_t> = tids.difference(&seen).copied().collect();
            if new.is_empty() {
                break;
            }
            // Seize and interrupt every new thread before waiting for any:
            // a thread may take a while to reach its stop (waiting in the
            // kernel for the memory-map lock that its siblings' mmap calls
            // hold), and those waits then overlap instead of adding up.
            let mut interrupted = Vec::with_capacity(new.len());
            let mut failed = None;
            for tid in new {
                seen.insert(tid);
                match seize_and_interrupt(pid, tid) {
                    Ok(true) => interrupted.push(tid),
                    Ok(false) => {}
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            // Every interrupted thread is waited for, even after a failure,
            // so that those which stop are let go when `f` is dropped.
            for tid in interrupted {
                match f.settle(tid, per_thread) {
                    Ok(Some(stop_sig)) => {
                        let held = f.hold(tid, stop_sig);
                        if let Err(e) = held {
                            failed.get_or_insert(e);
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        failed.get_or_insert(e);
                    }
                }
            }
            if let Some(e) = failed {
                return Err(e);
            }
        }
        if !f.threads.iter().any(|t| t.tid == pid) {
            if f.threads.is_empty() {
                return Err(EngineError::NoProcess(pid));
            }
            return Err(EngineError::Other(format!(
                "the main thread of process {pid} has exited and its other threads run on: not supported"
            )));
        }
        // Main thread first, then by tid: the image's thread order.
        f.threads.sort_by_key(|t| (t.tid != pid, t.tid));
        Ok(f)
    }

    /// Records thread `tid`, just stopped by the freeze with `stop_sig`, as
    /// held, suspends its seccomp filters ([`seize_options`]) and blocks
    /// every signal in it while it is: its own mask is kept to be put back.
    fn hold(&mut self, tid: pid_t, stop_sig: i32) -> Result<()> {
        self.threads.push(Thread {
            tid,
            stop: StopKind::Event,
            mask: None,
            group_stop: (stop_sig != libc::SIGTRAP).then_some(stop_sig),
            affinity: None,
        });
        ptrace::setoptions(Pid::from_raw(tid), seize_options())
            .ctx(|| format!("set the trace options of thread {tid}"))?;
        if stop_sig == libc::SIGTRAP {
            undo_eintr(tid)?;
        }
        let mask = sys::get_sigmask(tid)?;
        sys::set_sigmask(tid, !0u64)?;
        if let Some(t) = self.threads.last_mut() {
            t.mask = Some(mask);
        }
        Ok(())
    }

    /// Wait until `tid` sits in an event stop; returns the stop's signal:
    /// SIGTRAP for the stop our interrupt asked for, the stopping signal for
    /// a group-stop (the process was stopped by job control). None if it
    /// exited; an error if it has not stopped `within`.
    fn settle(&mut self, tid: pid_t, within: std::time::Duration) -> Result<Option<i32>> {
        let deadline = std::time::Instant::now() + within;
        for _ in 0..64 {
            let Some(st) = wait_stop_until(tid, deadline)? else {
                return Err(EngineError::Other(format!(
                    "thread {tid} of process {} did not stop within {:?} ({})",
                    self.pid,
                    within,
                    thread_state(self.pid, tid)
                )));
            };
            match st {
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
                    affinity: None,
                })
                .collect(),
            gadget: None,
            ignores_trap: None,
            stub: None,
            detached: false,
            stop_on_detach: false,
            own_affinity: None,
        }
    }

    /// Keeps the frozen threads, and the calling thread, on the CPU the
    /// caller runs on until [`Frozen::release_cpu`] (or the threads are let
    /// go). Every injected call is a round trip between tracer and tracee:
    /// on two CPUs of a VM each costs a cross-CPU wake-up both ways (about
    /// 70 µs a call was measured here, against 4 µs on one CPU), and the
    /// scheduler wakes a tracee on the other CPU whenever it is idle. Best
    /// effort: where an affinity cannot be set, nothing changes. The
    /// threads' own affinities are what [`Frozen::affinity_of`] reports.
    pub fn colocate(&mut self) {
        if self.own_affinity.is_some() {
            return;
        }
        // SAFETY: sched_getcpu takes no arguments.
        let cpu = unsafe { libc::sched_getcpu() };
        let Ok(own) = read_affinity(0) else { return };
        if cpu < 0 || cpu as usize >= own.len() * 64 {
            return;
        }
        let mut one = vec![0u64; own.len()];
        one[cpu as usize / 64] = 1 << (cpu % 64);
        if set_affinity(0, &one).is_err() {
            return;
        }
        self.own_affinity = Some(own);
        for t in &mut self.threads {
            if let Ok(a) = read_affinity(t.tid) {
                if set_affinity(t.tid, &one).is_ok() {
                    t.affinity = Some(a);
                }
            }
        }
    }

    /// Where [`Frozen::colocate`] keeps the threads and the calling thread,
    /// while it does: that CPU and the affinity the caller had before (asked
    /// from the calling thread, whose threads started meanwhile inherit the
    /// one CPU).
    pub fn colocated(&self) -> Option<(usize, Vec<u64>)> {
        let own = self.own_affinity.clone()?;
        let mask = read_affinity(0).ok()?;
        let mut cpus = (0..mask.len() * 64).filter(|&c| mask[c / 64] & (1 << (c % 64)) != 0);
        match (cpus.next(), cpus.next()) {
            (Some(c), None) => Some((c, own)),
            _ => None,
        }
    }

    /// The CPU affinity of thread `idx` as the process had it, if
    /// [`Frozen::colocate`] changed it.
    pub fn affinity_of(&self, idx: usize) -> Option<&[u64]> {
        self.threads.get(idx)?.affinity.as_deref()
    }

    /// Thread `idx` gets `mask` as its CPU affinity: at once, or, while
    /// colocated, when it is released.
    pub fn set_affinity_at_release(&mut self, idx: usize, mask: &[u64]) -> std::io::Result<()> {
        let t = &mut self.threads[idx];
        match &mut t.affinity {
            Some(a) => {
                *a = mask.to_vec();
                Ok(())
            }
            None => set_affinity(t.tid, mask),
        }
    }

    /// Ends [`Frozen::colocate`]: the threads and the caller get their own
    /// affinities back.
    pub fn release_cpu(&mut self) {
        for t in &mut self.threads {
            if let Some(a) = t.affinity.take() {
                if let Err(e) = set_affinity(t.tid, &a) {
                    tracing::warn!("thread {}: CPU affinity not set back: {e}", t.tid);
                }
            }
        }
        if let Some(a) = self.own_affinity.take() {
            let _ = set_affinity(0, &a);
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

    /// Offers `addr`, found before the freeze by [`syscall_gadget`], for
    /// injected calls: taken if it still holds a `syscall` instruction, so
    /// that the stop need not read the mappings to find one.
    pub fn offer_gadget(&mut self, addr: u64) {
        let mut b = [0u8; 2];
        if sys::process_vm_read(self.pid, addr, &mut b).is_ok_and(|n| n == 2) && b == SYSCALL_INSN {
            self.gadget = Some(addr);
        }
    }

    /// Find a `syscall` instruction in the process to run injected calls at.
    fn gadget(&mut self) -> Result<u64> {
        if let Some(g) = self.gadget {
            return Ok(g);
        }
        let maps = crate::procfs::slurp(&format!("/proc/{}/maps", self.pid))
            .ctx(|| format!("read maps of {}", self.pid))?;
        let ranges = maps.lines().filter_map(|l| {
            let mut it = l.split_whitespace();
            let (range, perms) = (it.next()?, it.next()?);
            let (a, b) = range.split_once('-')?;
            Some((
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
                perms.starts_with("r-x"),
                l.ends_with("[vdso]"),
            ))
        });
        let g = syscall_gadget(self.pid, ranges).ok_or_else(|| {
            EngineError::Other(format!(
                "process {}: no syscall instruction found to inject at",
                self.pid
            ))
        })?;
        self.gadget = Some(g);
        Ok(g)
    }

    /// Run `nr(args)` in thread `idx` and return the raw result (negative errno).
    pub fn inject(&mut self, idx: usize, nr: i64, args: &[u64]) -> Result<i64> {
        Ok(self.inject_many(idx, &[(nr, args)])?[0])
    }

    /// Runs later batches of injected calls ([`Frozen::inject_many`]) as
    /// one piece of code written at `code`, a page of executable memory the
    /// caller mapped in the process, which stores the results at `results`
    /// (room for [`STUB_CALLS`] results, writable by the process): one
    /// resume and one stop per batch, where calls one by one take two stops
    /// each. The code ends with `int3`; so that the trap changes nothing,
    /// SIGTRAP alone is unblocked while it runs, and a process that ignores
    /// SIGTRAP (the trap would reset that) keeps the calls one by one, as
    /// does one whose memory cannot be written through `/proc/PID/mem`.
    /// Says whether the code is used.
    pub fn use_stub(&mut self, code: u64, results: u64) -> bool {
        if self.ignores_trap.is_none() {
            let ignored = crate::procfs::status(self.pid)
                .ok()
                .and_then(|st| st.get("SigIgn").map(|v| crate::procfs::hex_u64(v)));
            if let Some(m) = ignored {
                self.know_ignored(m);
            }
        }
        if self.ignores_trap != Some(false) {
            return false;
        }
        let mem = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{}/mem", self.pid));
        let Ok(mem) = mem else {
            return false;
        };
        if std::os::unix::fs::FileExt::write_all_at(&mem, &[0xcc], code).is_err() {
            return false;
        }
        self.stub = Some(Stub {
            code,
            results,
            mem,
            written: vec![0xcc],
        });
        true
    }

    /// Tells which signals the process ignores (`SigIgn` of its status, read
    /// while frozen): where SIGTRAP is not among them, a call injected one
    /// by one takes one stop of the thread (a single step over the
    /// `syscall` instruction, which the kernel reports as a SIGTRAP when
    /// the call returns) instead of two (its syscall-enter and -exit
    /// stops). A trap the kernel forces on a thread that ignores or blocks
    /// SIGTRAP resets its action to the default, so SIGTRAP alone is
    /// unblocked for the step, as for [`Frozen::use_stub`]'s code.
    pub fn know_ignored(&mut self, sig_ign: u64) {
        self.ignores_trap = Some(sig_ign & SIGTRAP_BIT != 0);
    }

    /// Injected calls go one by one again (before the stub's page goes).
    pub fn drop_stub(&mut self) {
        self.stub = None;
    }

    /// Run several system calls in a row in thread `idx`, then put it back.
    pub fn inject_many(&mut self, idx: usize, calls: &[(i64, &[u64])]) -> Result<Vec<i64>> {
        if self.stub.is_some()
            && !calls.is_empty()
            && calls.len() <= STUB_CALLS
            && !calls
                .iter()
                .any(|(nr, _)| changes_mappings(*nr) || starts_thread(*nr))
        {
            return self.run_stub(idx, calls);
        }
        if self.ignores_trap == Some(false) && !calls.iter().any(|(nr, _)| starts_thread(*nr)) {
            return self.step_calls(idx, calls);
        }
        let tid = self.threads[idx].tid;
        let saved = sys::get_regs(tid)?;
        let mut out = Vec::with_capacity(calls.len());
        let res = (|| -> Result<()> {
            for (nr, args) in calls {
                // Looked for again only when a call needs it (one that
                // unmapped the last one's memory may be the last call).
                let gadget = self.gadget()?;
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

    /// [`Frozen::inject_many`] in several threads: `batches` pairs a
    /// thread's index with its calls; the results come in the same order.
    /// With the [`Stub`] (see [`Frozen::use_stub`]), the batches that fit
    /// its page together ([`Frozen::stub_room`]) run at once: each thread's
    /// code goes to its own part of the page, and every thread is resumed
    /// before the first is waited for. The threads share the capture's CPU
    /// ([`Frozen::colocate`]), so they run their calls one after the other
    /// while this thread waits, where one thread at a time would take a
    /// round trip between them and this thread each. Calls the stub does
    /// not run go thread by thread, as [`Frozen::inject_many`] would.
    pub fn inject_each(&mut self, batches: &[Batch]) -> Result<Vec<Vec<i64>>> {
        let mut out = Vec::with_capacity(batches.len());
        let mut rest = batches;
        while !rest.is_empty() {
            let stubbed = |calls: &[(i64, &[u64])]| {
                !calls.is_empty()
                    && !calls
                        .iter()
                        .any(|(nr, _)| changes_mappings(*nr) || starts_thread(*nr))
            };
            let mut bytes = 0;
            let together = if self.stub.is_some() {
                rest.iter()
                    .take_while(|(_, calls)| {
                        bytes += calls.len() * STUB_CALL_BYTES + 1;
                        stubbed(calls) && bytes <= STUB_BYTES
                    })
                    .count()
            } else {
                0
            };
            if together < 2 {
                let (idx, calls) = rest[0];
                out.push(self.inject_many(idx, calls)?);
                rest = &rest[1..];
                continue;
            }
            out.extend(self.run_stubs(&rest[..together])?);
            rest = &rest[together..];
        }
        Ok(out)
    }

    /// How many threads' batches of `calls` calls each one run of the
    /// [`Stub`] takes at once ([`Frozen::inject_each`]); at least 1.
    pub fn stub_room(calls: usize) -> usize {
        (STUB_BYTES / (calls * STUB_CALL_BYTES + 1)).max(1)
    }

    /// [`Frozen::inject_each`]'s run of several threads' batches at once,
    /// which fit the stub's page together. Every thread resumed is waited
    /// for and put back as it was, whatever fails.
    fn run_stubs(&mut self, group: &[Batch]) -> Result<Vec<Vec<i64>>> {
        let pid = self.pid;
        let Some(stub) = self.stub.as_mut() else {
            return Err(EngineError::Other("no code page to run calls".into()));
        };
        let (base, results) = (stub.code, stub.results);
        // Each thread's code, the address after its int3, and where its
        // results start among the page's.
        let mut code = Vec::new();
        let mut slots = Vec::with_capacity(group.len());
        let mut n_results = 0;
        for (idx, calls) in group {
            let start = base + code.len() as u64;
            code.extend(stub_code(calls, results + 8 * n_results as u64));
            slots.push((
                *idx,
                start,
                base + code.len() as u64,
                n_results,
                calls.len(),
            ));
            n_results += calls.len();
        }
        if stub.written != code {
            stub.written.clear();
            std::os::unix::fs::FileExt::write_all_at(&stub.mem, &code, base)
                .ctx(|| format!("write injected code into process {pid}"))?;
            stub.written = code;
        }
        let mut failed = None;
        let mut started = Vec::with_capacity(slots.len());
        for &(idx, start, end, _, _) in &slots {
            let tid = self.threads[idx].tid;
            let saved = sys::get_regs(tid).and_then(|saved| {
                let mut r = saved;
                r.rip = start;
                r.orig_rax = u64::MAX; // no syscall restart on the way out
                sys::set_regs(tid, &r).map(|()| saved)
            });
            let saved = match saved {
                Ok(s) => s,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            self.threads[idx].stop = StopKind::Injected;
            let go = sys::set_sigmask(tid, !SIGTRAP_BIT).and_then(|()| resume(tid, false));
            let stop = go.is_err();
            started.push((idx, saved, end, go));
            if stop {
                break;
            }
        }
        for (idx, saved, end, go) in started {
            let tid = self.threads[idx].tid;
            let mut foreign = 0;
            let ran = go.and_then(|()| await_trap(tid, end, false, &mut foreign));
            if let Err(e) = self.put_back(idx, &saved, foreign, ran) {
                failed.get_or_insert(e);
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        let mut raw = vec![0u8; 8 * n_results];
        if sys::process_vm_read(self.pid, results, &mut raw)? != raw.len() {
            return Err(EngineError::Other(format!(
                "short read of injected calls' results in process {}",
                self.pid
            )));
        }
        let word =
            |i: usize| i64::from_le_bytes(raw[8 * i..8 * i + 8].try_into().unwrap_or_default());
        Ok(slots
            .iter()
            .map(|&(_, _, _, first, n)| (first..first + n).map(word).collect())
            .collect())
    }

    /// [`Frozen::inject_many`] one call at a time, each a single step of
    /// thread `idx` over the `syscall` instruction at the gadget, with every
    /// signal but SIGTRAP blocked (see [`Frozen::know_ignored`]). Not for a
    /// call that starts a thread (the new one would begin stepped). A
    /// SIGTRAP from elsewhere that arrives meanwhile is queued again once
    /// SIGTRAP is blocked again, as in [`Frozen::run_stub`].
    fn step_calls(&mut self, idx: usize, calls: &[(i64, &[u64])]) -> Result<Vec<i64>> {
        let tid = self.threads[idx].tid;
        let saved = sys::get_regs(tid)?;
        self.threads[idx].stop = StopKind::Injected;
        let mut out = Vec::with_capacity(calls.len());
        let mut foreign = 0;
        let mut ran = sys::set_sigmask(tid, !SIGTRAP_BIT);
        for (nr, args) in calls {
            if ran.is_err() {
                break;
            }
            ran = (|| {
                // Looked for again only when a call needs it (one that
                // unmapped the last one's memory may be the last call).
                let gadget = self.gadget()?;
                let mut r = saved;
                r.rax = *nr as u64;
                r.orig_rax = u64::MAX; // no syscall restart on the way out
                let a = |i: usize| args.get(i).copied().unwrap_or(0);
                (r.rdi, r.rsi, r.rdx, r.r10, r.r8, r.r9) = (a(0), a(1), a(2), a(3), a(4), a(5));
                r.rip = gadget;
                sys::set_regs(tid, &r)?;
                run_to_trap(tid, gadget + SYSCALL_INSN.len() as u64, true, &mut foreign)?;
                out.push(sys::get_regs(tid)?.rax as i64);
                if *nr == libc::SYS_munmap && gadget >= a(0) && gadget - a(0) < a(1) {
                    self.gadget = None;
                }
                Ok(())
            })();
        }
        self.put_back(idx, &saved, foreign, ran)?;
        Ok(out)
    }

    /// Ends calls injected with SIGTRAP unblocked in thread `idx`
    /// ([`Frozen::step_calls`], [`Frozen::run_stub`]), which `ran` tells how
    /// they went: every signal blocked again, the registers `saved` put
    /// back, the `foreign` SIGTRAPs withheld meanwhile sent again; after a
    /// failure the thread is parked at once (else before it runs).
    fn put_back(
        &mut self,
        idx: usize,
        saved: &UserRegs,
        foreign: u32,
        ran: Result<()>,
    ) -> Result<()> {
        let tid = self.threads[idx].tid;
        let masked = sys::set_sigmask(tid, !0u64);
        let put_back = sys::set_regs(tid, saved);
        for _ in 0..foreign {
            // SAFETY: sending a signal to a thread of the process we hold.
            unsafe { libc::syscall(libc::SYS_tgkill, self.pid, tid, libc::SIGTRAP) };
        }
        if ran.is_err() || masked.is_err() || put_back.is_err() {
            let _ = self.park(idx);
        }
        ran?;
        masked?;
        put_back
    }

    /// [`Frozen::inject_many`] with the [`Stub`]: the calls' code is written
    /// to its page and thread `idx` runs it from its current stop to the
    /// `int3`, with every signal but SIGTRAP blocked. A SIGTRAP from
    /// elsewhere that arrives meanwhile is queued again once SIGTRAP is
    /// blocked again (it stays pending until the process runs).
    fn run_stub(&mut self, idx: usize, calls: &[(i64, &[u64])]) -> Result<Vec<i64>> {
        let pid = self.pid;
        let Some(stub) = self.stub.as_mut() else {
            return Err(EngineError::Other("no code page to run calls".into()));
        };
        let tid = self.threads[idx].tid;
        let code = stub_code(calls, stub.results);
        let (start, results) = (stub.code, stub.results);
        let end = start + code.len() as u64;
        if stub.written != code {
            // Forgotten first: a write that fails part way leaves the page
            // unknown.
            stub.written.clear();
            std::os::unix::fs::FileExt::write_all_at(&stub.mem, &code, start)
                .ctx(|| format!("write injected code into process {pid}"))?;
            stub.written = code;
        }
        let saved = sys::get_regs(tid)?;
        let mut r = saved;
        r.rip = start;
        r.orig_rax = u64::MAX; // no syscall restart on the way out
        sys::set_regs(tid, &r)?;
        self.threads[idx].stop = StopKind::Injected;
        let mut foreign = 0;
        let ran = sys::set_sigmask(tid, !SIGTRAP_BIT)
            .and_then(|()| run_to_trap(tid, end, false, &mut foreign));
        // Put the thread back exactly as it was (parked before it runs).
        self.put_back(idx, &saved, foreign, ran)?;
        let mut raw = vec![0u8; 8 * calls.len()];
        if sys::process_vm_read(self.pid, results, &mut raw)? != raw.len() {
            return Err(EngineError::Other(format!(
                "short read of injected calls' results in process {}",
                self.pid
            )));
        }
        Ok(raw
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap_or_default()))
            .collect())
    }

    /// Ends thread `idx`, which must not be the group leader, as a call to
    /// `exit` would, and forgets it: the threads after it move down one
    /// index. Its robust futex list and its clear-child-tid word are let go
    /// first, so that the kernel does not touch the process's memory on the
    /// thread's way out (a lazily restored process may not have those pages
    /// yet, and nobody serves them while it is held). Waits, bounded by
    /// [`FREEZE_TIMEOUT`], until the thread is gone.
    pub fn end_thread(&mut self, idx: usize) -> Result<()> {
        let tid = self.threads[idx].tid;
        if tid == self.pid {
            return Err(EngineError::Other(format!(
                "process {}: the main thread cannot be ended alone",
                self.pid
            )));
        }
        // struct robust_list_head is three words: the size the call wants.
        let r = self.inject_many(
            idx,
            &[
                (libc::SYS_set_robust_list, &[0, 24]),
                (libc::SYS_set_tid_address, &[0]),
            ],
        )?;
        if let Some(e) = r.iter().find(|&&v| v < 0) {
            return Err(EngineError::Sys {
                what: format!("let go of the futex words of thread {tid}"),
                source: std::io::Error::from_raw_os_error(-*e as i32),
            });
        }
        let mut regs = sys::get_regs(tid)?;
        regs.rax = libc::SYS_exit as u64;
        regs.orig_rax = u64::MAX;
        regs.rdi = 0;
        regs.rip = self.gadget()?;
        sys::set_regs(tid, &regs)?;
        ptrace::cont(Pid::from_raw(tid), None).ctx(|| format!("resume thread {tid}"))?;
        let deadline = std::time::Instant::now() + FREEZE_TIMEOUT;
        loop {
            match wait_stop_until(tid, deadline)? {
                Some(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) => break,
                // Every blockable signal is blocked while frozen; any other
                // stop on the way out is let pass.
                Some(_) => {
                    let _ = ptrace::cont(Pid::from_raw(tid), None);
                }
                None => {
                    return Err(EngineError::Other(format!(
                        "thread {tid} did not end within {FREEZE_TIMEOUT:?}"
                    )))
                }
            }
        }
        self.threads.remove(idx);
        Ok(())
    }

    /// Starts a thread with the injected `call` in thread 0: a `clone` or
    /// `clone3` with a thread's flags and no new stack, which the caller
    /// traces with `PTRACE_O_TRACECLONE`. The new thread is kept at index
    /// `at`, in the stop where the kernel first stops a traced thread: it
    /// has not run an instruction, and its registers, signal mask and the
    /// rest are the caller's to set before it is let go (until then they
    /// are thread 0's). Returns its id, or the error of the call if the
    /// call failed (no thread was started: the caller may try another).
    pub fn start_thread(
        &mut self,
        at: usize,
        call: (i64, &[u64]),
    ) -> Result<std::result::Result<pid_t, std::io::Error>> {
        let r = self.inject_many(0, &[call])?[0];
        if r <= 0 {
            return Ok(Err(std::io::Error::from_raw_os_error((-r) as i32)));
        }
        let tid = r as pid_t;
        let deadline = std::time::Instant::now() + FREEZE_TIMEOUT;
        match wait_stop_until(tid, deadline)? {
            Some(WaitStatus::PtraceEvent(..) | WaitStatus::Stopped(..)) => {}
            other => {
                return Err(EngineError::Other(format!(
                    "the new thread {tid} of process {} did not stop ({other:?})",
                    self.pid
                )))
            }
        }
        // Colocated, it was born on the tracer's CPU: it gets back what
        // thread 0 had (the caller sets its own affinity at release).
        let affinity = self
            .own_affinity
            .as_ref()
            .and(self.threads[0].affinity.clone());
        self.threads.insert(
            at,
            Thread {
                tid,
                stop: StopKind::Event,
                mask: None,
                group_stop: None,
                affinity,
            },
        );
        Ok(Ok(tid))
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
        if self.settle(tid, FREEZE_TIMEOUT)?.is_none() {
            return Err(EngineError::Other(format!("thread {tid} exited")));
        }
        self.threads[idx].stop = StopKind::Event;
        Ok(())
    }

    /// Stop managing the threads without detaching (the caller keeps
    /// tracing); threads left in an injected call's stop are parked first.
    pub fn forget(mut self) -> Result<()> {
        self.detached = true;
        self.release_cpu();
        self.park_all()
    }

    /// Let every thread go on running.
    pub fn detach(mut self) -> Result<()> {
        self.detached = true;
        let parked = self.park_all();
        crate::timing::mark("detach: parked");
        self.release_cpu();
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
        let mut exiting = Vec::new();
        // The leader last: a process that answers from its main thread has
        // every other thread let go by then (another program may move it
        // right away: one still traced by us a moment longer would refuse).
        let mut order: Vec<&Thread> = self.threads.iter().collect();
        order.sort_by_key(|t| t.tid == self.pid);
        for t in order {
            match ptrace::detach(Pid::from_raw(t.tid), None) {
                Ok(()) => {}
                // Out of its stop: only SIGKILL does that, e.g. a thread let
                // go before it called exit_group. It is exiting, and stays
                // a zombie until we, its tracer, reap it; until then its
                // process's parent cannot reap the process.
                Err(nix::errno::Errno::ESRCH) if t.tid != self.pid => exiting.push(t.tid),
                // The group leader is left to the process's parent, who
                // wants its exit status (reaped here, it would be lost).
                Err(nix::errno::Errno::ESRCH) => {}
                Err(e) => {
                    if first.is_none() {
                        first = Some(e);
                    }
                }
            }
        }
        reap_exiting(&exiting);
        if self.stop_on_detach && stopped.is_ok() && first.is_none() {
            let tids: Vec<pid_t> = self.threads.iter().map(|t| t.tid).collect();
            wait_group_stopped(self.pid, &tids);
        }
        match first {
            Some(e) => Err(e).ctx(|| format!("detach from process {}", self.pid)),
            None => parked.and(stopped),
        }
    }

    /// Kill the process (after a successful dump). Its other threads are
    /// reaped here, their tracer (bounded): a traced group leader is
    /// reported to its parent only once every other traced thread is
    /// reaped. The leader is left to the parent.
    pub fn kill(mut self) -> Result<()> {
        self.detached = true;
        if let Some(a) = self.own_affinity.take() {
            let _ = set_affinity(0, &a);
        }
        // SAFETY: sending a signal.
        if unsafe { libc::kill(self.pid, libc::SIGKILL) } < 0 {
            return Err(errno_err(format!("kill process {}", self.pid)));
        }
        let others: Vec<pid_t> = self
            .threads
            .iter()
            .map(|t| t.tid)
            .filter(|&t| t != self.pid)
            .collect();
        reap_exiting(&others);
        Ok(())
    }
}

impl Frozen {
    /// Gives thread `idx` the signal mask `mask` when it is let go
    /// ([`Frozen::detach`]), and until then blocks every signal in it: a
    /// signal that comes meanwhile (from a timer the restore has armed
    /// already) waits for the thread to run, instead of stopping a later
    /// injected call.
    pub fn set_mask_at_detach(&mut self, idx: usize, mask: u64) -> Result<()> {
        sys::set_sigmask(self.threads[idx].tid, !0u64)?;
        self.threads[idx].mask = Some(mask);
        Ok(())
    }

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
            self.release_cpu();
            self.restore_masks();
            let exiting: Vec<pid_t> = self
                .threads
                .iter()
                .filter(|t| {
                    ptrace::detach(Pid::from_raw(t.tid), None) == Err(nix::errno::Errno::ESRCH)
                        && t.tid != self.pid
                })
                .map(|t| t.tid)
                .collect();
            reap_exiting(&exiting);
        }
    }
}

/// Waits (bounded) until every thread in `tids`, let go with a SIGSTOP
/// queued, has taken it and is in the group stop: a thread is running (state
/// R) from its detach until it is scheduled and takes the signal, and whoever
/// let the process go expects to find it stopped as it was. A thread that is
/// gone or exiting no longer counts; a SIGCONT from elsewhere in the
/// meantime ends the wait at its bound, with a warning, not an error.
fn wait_group_stopped(pid: pid_t, tids: &[pid_t]) {
    let mut left: Vec<pid_t> = tids.to_vec();
    for _ in 0..2000 {
        left.retain(|&tid| {
            crate::procfs::stat_fields(tid)
                .ok()
                .and_then(|f| f.into_iter().next())
                .is_some_and(|st| !matches!(st.as_str(), "T" | "Z" | "X"))
        });
        if left.is_empty() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_micros(500));
    }
    tracing::warn!("process {pid}: threads {left:?} did not stop again after the detach");
}

/// Reaps the traced threads `tids`, which are exiting (bounded: about 2 s
/// in all).
fn reap_exiting(tids: &[pid_t]) {
    let flags = Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG);
    let mut left: Vec<pid_t> = tids.to_vec();
    for _ in 0..2000 {
        left.retain(|&tid| {
            matches!(
                waitpid(Pid::from_raw(tid), flags),
                Ok(WaitStatus::StillAlive) | Err(nix::errno::Errno::EINTR)
            )
        });
        if left.is_empty() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    tracing::warn!("threads {left:?} did not finish exiting");
}

/// Resumes thread `tid` (single-stepped with `step`, else let run) until
/// it stops with a SIGTRAP at `end`, the instruction after the injected
/// code: the kernel's report of a stepped system call, or the code's
/// closing `int3`. Other SIGTRAPs (sent from elsewhere while SIGTRAP is
/// unblocked) are counted in `foreign`, to be sent again; one that comes at
/// `end` took the place of the code's own (one SIGTRAP is pending at a
/// time), which has run.
fn run_to_trap(tid: pid_t, end: u64, step: bool, foreign: &mut u32) -> Result<()> {
    resume(tid, step)?;
    await_trap(tid, end, step, foreign)
}

/// Resumes thread `tid` from its stop: a single step with `step`.
fn resume(tid: pid_t, step: bool) -> Result<()> {
    let t = Pid::from_raw(tid);
    if step {
        ptrace::step(t, None)
    } else {
        ptrace::cont(t, None)
    }
    .ctx(|| format!("resume thread {tid}"))
}

/// The rest of [`run_to_trap`] once thread `tid` is resumed.
fn await_trap(tid: pid_t, end: u64, step: bool, foreign: &mut u32) -> Result<()> {
    let t = Pid::from_raw(tid);
    let go = || resume(tid, step);
    let ours = |code: i32| {
        if step {
            code == TRAP_BRKPT || code == TRAP_TRACE
        } else {
            code == SI_KERNEL
        }
    };
    // Bounded: every stop but the trap's is a stray event or signal.
    for _ in 0..1024 {
        match wait_stop(tid)? {
            WaitStatus::Stopped(_, nix::sys::signal::Signal::SIGTRAP) => {
                let at_end = sys::get_regs(tid)?.rip == end;
                if !(at_end && ptrace::getsiginfo(t).is_ok_and(|i| ours(i.si_code))) {
                    *foreign += 1;
                }
                if at_end {
                    return Ok(());
                }
                go()?;
            }
            WaitStatus::Stopped(_, sig) => {
                return Err(EngineError::Other(format!(
                    "thread {tid} got {sig} during injected system calls"
                )))
            }
            WaitStatus::Exited(..) | WaitStatus::Signaled(..) => {
                return Err(EngineError::Other(format!(
                    "thread {tid} died during injected system calls"
                )))
            }
            WaitStatus::PtraceEvent(..) | WaitStatus::PtraceSyscall(_) => go()?,
            _ => {}
        }
    }
    Err(EngineError::Other(format!(
        "thread {tid} did not finish its injected system calls"
    )))
}

/// The bytes of `syscall` on x86-64.
const SYSCALL_INSN: [u8; 2] = [0x0f, 0x05];

/// Where process `pid` holds a `syscall` instruction to run injected calls
/// at, among its mappings `(start, end, readable and executable, is the
/// vDSO)`: in the vDSO first (always there, never changing), else in any
/// readable executable mapping. Reads the process's memory, which may run
/// meanwhile (see [`Frozen::offer_gadget`]).
pub fn syscall_gadget(
    pid: pid_t,
    maps: impl Iterator<Item = (u64, u64, bool, bool)>,
) -> Option<u64> {
    let (vdso, other): (Vec<_>, Vec<_>) = maps.filter(|m| m.2 || m.3).partition(|m| m.3);
    vdso.into_iter().chain(other).find_map(|(a, b, _, _)| {
        let mut buf = vec![0u8; (b - a).min(1 << 20) as usize];
        sys::process_vm_read(pid, a, &mut buf).ok()?;
        buf.windows(2)
            .position(|w| w == SYSCALL_INSN)
            .map(|i| a + i as u64)
    })
}

pub fn regs_of(tid: pid_t) -> Result<UserRegs> {
    sys::get_regs(tid)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child that blocks SIGTRAP, catches it, and waits to be killed.
    struct Child(pid_t);

    extern "C" fn on_trap(_: libc::c_int) {}

    impl Child {
        fn start() -> Child {
            Child::start_with(on_trap as extern "C" fn(libc::c_int) as usize)
        }

        /// With `action` (a handler, or SIG_IGN) for SIGTRAP.
        fn start_with(action: usize) -> Child {
            // SAFETY: the child only calls async-signal-safe functions
            // (sigaction, sigprocmask, pause, _exit).
            match unsafe { libc::fork() } {
                0 => unsafe {
                    let mut sa: libc::sigaction = std::mem::zeroed();
                    sa.sa_sigaction = action;
                    libc::sigaction(libc::SIGTRAP, &sa, std::ptr::null_mut());
                    let mut set: libc::sigset_t = std::mem::zeroed();
                    libc::sigemptyset(&mut set);
                    libc::sigaddset(&mut set, libc::SIGTRAP);
                    libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
                    loop {
                        libc::pause();
                    }
                },
                p if p > 0 => Child(p),
                _ => panic!("fork failed"),
            }
        }

        /// SigBlk and SigCgt of its status.
        fn masks(&self) -> (u64, u64) {
            let st = crate::procfs::status(self.0).unwrap();
            let m = |k: &str| crate::procfs::hex_u64(&st[k]);
            (m("SigBlk"), m("SigCgt"))
        }

        /// `key` of its status, a signal mask.
        fn mask(&self, key: &str) -> u64 {
            crate::procfs::hex_u64(&crate::procfs::status(self.0).unwrap()[key])
        }

        /// Waits (bounded) until it has blocked SIGTRAP.
        fn settled(self) -> Child {
            let blocked = (0..2000).any(|_| {
                self.masks().0 & SIGTRAP_BIT != 0 || {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    false
                }
            });
            assert!(blocked, "SIGTRAP never blocked: {:?}", self.masks());
            self
        }
    }

    /// Maps a page, asks for its pid and unmaps the page in `f`, whose
    /// process is `pid`, and checks the results.
    fn map_ask_unmap(f: &mut Frozen, pid: pid_t) {
        let anon = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;
        let rw = (libc::PROT_READ | libc::PROT_WRITE) as u64;
        let r = f
            .inject_many(0, &[(libc::SYS_mmap, &[0, 4096, rw, anon, u64::MAX, 0])])
            .unwrap();
        assert!(r[0] > 0, "{r:?}");
        let r = f
            .inject_many(
                0,
                &[
                    (libc::SYS_getpid, &[]),
                    (libc::SYS_munmap, &[r[0] as u64, 4096]),
                    (libc::SYS_close, &[9999]),
                ],
            )
            .unwrap();
        assert_eq!(r, vec![pid as i64, 0, -(libc::EBADF as i64)]);
    }

    /// While a frozen process is colocated, `colocated` names the one CPU
    /// and the affinity the caller had; a thread that avoids that CPU runs
    /// on the others, and on that CPU alone where there is no other (no
    /// thread is left with no CPU).
    #[test]
    fn work_beside_a_colocated_capture_keeps_off_its_cpu() {
        let child = Child::start().settled();
        let mut f = Frozen::freeze(child.0).unwrap();
        let before = read_affinity(0).unwrap();
        f.colocate();
        let (cpu, own) = f.colocated().expect("colocated on one CPU");
        assert_eq!(own, before);
        assert_eq!(count_cpus(&read_affinity(0).unwrap()), 1);
        let bit = |m: &[u64]| m[cpu / 64] & (1 << (cpu % 64)) != 0;
        assert!(
            bit(&read_affinity(child.0).unwrap()),
            "the process is not on CPU {cpu}"
        );
        // A thread started now inherits the one CPU.
        let (avoided, inherited) = std::thread::scope(|s| {
            s.spawn(|| {
                let inherited = read_affinity(0).unwrap();
                avoid_cpu(cpu, &own);
                (read_affinity(0).unwrap(), inherited)
            })
            .join()
            .unwrap()
        });
        assert_eq!(count_cpus(&inherited), 1);
        if count_cpus(&own) > 1 {
            assert!(!bit(&avoided), "still on CPU {cpu}: {avoided:x?}");
            assert_eq!(count_cpus(&avoided), count_cpus(&own) - 1);
        } else {
            assert_eq!(avoided, own);
        }
        // With no other CPU allowed, nothing changes.
        let mut only = vec![0u64; own.len()];
        only[cpu / 64] = 1 << (cpu % 64);
        let kept = std::thread::scope(|s| {
            s.spawn(|| {
                avoid_cpu(cpu, &only);
                read_affinity(0).unwrap()
            })
            .join()
            .unwrap()
        });
        assert!(bit(&kept) && count_cpus(&kept) == 1, "{kept:x?}");
        f.release_cpu();
        assert!(f.colocated().is_none());
        assert_eq!(read_affinity(0).unwrap(), before);
    }

    #[test]
    fn stepped_calls_leave_sigtrap_as_it_was_and_a_sigtrap_sent_meanwhile_pending() {
        let child = Child::start().settled();
        let before = child.masks();
        assert_ne!(before.1 & SIGTRAP_BIT, 0, "SIGTRAP not caught: {before:?}");
        let mut f = Frozen::freeze(child.0).unwrap();
        f.know_ignored(child.mask("SigIgn"));
        assert_eq!(f.ignores_trap, Some(false));
        // A SIGTRAP from elsewhere, pending while every signal is blocked:
        // the step unblocks it, and it must be handed back, not lost.
        // SAFETY: sending a signal to our own child.
        unsafe { libc::kill(child.0, libc::SIGTRAP) };
        map_ask_unmap(&mut f, child.0);
        f.detach().unwrap();
        assert_eq!(child.masks(), before, "SIGTRAP blocked/caught changed");
        let pending = child.mask("SigPnd") | child.mask("ShdPnd");
        assert_ne!(pending & SIGTRAP_BIT, 0, "the SIGTRAP sent was lost");
        let asleep = within_ms(1000, || state_of(child.0) == Some('S'));
        assert!(asleep, "the child is in state {:?}", state_of(child.0));
    }

    #[test]
    fn calls_into_a_process_that_ignores_sigtrap_are_not_stepped() {
        let child = Child::start_with(libc::SIG_IGN).settled();
        assert_ne!(child.mask("SigIgn") & SIGTRAP_BIT, 0);
        let mut f = Frozen::freeze(child.0).unwrap();
        f.know_ignored(child.mask("SigIgn"));
        assert_eq!(f.ignores_trap, Some(true));
        map_ask_unmap(&mut f, child.0);
        f.detach().unwrap();
        // A trap forced on it would have reset SIGTRAP to its default.
        assert_ne!(
            child.mask("SigIgn") & SIGTRAP_BIT,
            0,
            "SIGTRAP no longer ignored"
        );
    }

    impl Drop for Child {
        fn drop(&mut self) {
            // SAFETY: killing and reaping our own child.
            unsafe { libc::kill(self.0, libc::SIGKILL) };
            let _ = waitpid(Pid::from_raw(self.0), None);
        }
    }

    /// Maps a results page and a code page in the frozen process and runs
    /// later batches of calls from them ([`Frozen::use_stub`]); returns
    /// the two pages' addresses (results, code).
    fn map_stub(f: &mut Frozen) -> [u64; 2] {
        let anon = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;
        let rw = (libc::PROT_READ | libc::PROT_WRITE) as u64;
        let rx = (libc::PROT_READ | libc::PROT_EXEC) as u64;
        let maps = f
            .inject_many(
                0,
                &[
                    (libc::SYS_mmap, &[0, 4096, rw, anon, u64::MAX, 0]),
                    (libc::SYS_mmap, &[0, 4096, rx, anon, u64::MAX, 0]),
                ],
            )
            .unwrap();
        assert!(maps.iter().all(|&a| a > 0), "{maps:?}");
        assert!(f.use_stub(maps[1] as u64, maps[0] as u64));
        [maps[0] as u64, maps[1] as u64]
    }

    #[test]
    fn stub_runs_a_batch_of_calls_and_leaves_sigtrap_as_it_was() {
        let child = Child::start();
        // Until it blocks and catches SIGTRAP (bounded).
        for _ in 0..2000 {
            if child.masks().0 & SIGTRAP_BIT != 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let before = child.masks();
        assert_ne!(before.0 & SIGTRAP_BIT, 0, "SIGTRAP not blocked: {before:?}");
        assert_ne!(before.1 & SIGTRAP_BIT, 0, "SIGTRAP not caught: {before:?}");
        let mut f = Frozen::freeze(child.0).unwrap();
        let maps = map_stub(&mut f);
        let ppid = std::process::id() as u64;
        let calls: Vec<(i64, &[u64])> = (0..STUB_CALLS)
            .map(|i| match i % 3 {
                0 => (libc::SYS_getpid, &[][..]),
                1 => (libc::SYS_getppid, &[][..]),
                // An error comes back as a negative errno.
                _ => (libc::SYS_close, &[9999u64][..]),
            })
            .collect();
        let r = f.inject_many(0, &calls).unwrap();
        assert_eq!(r.len(), STUB_CALLS);
        for (i, v) in r.iter().enumerate() {
            let want = match i % 3 {
                0 => child.0 as i64,
                1 => ppid as i64,
                _ => -(libc::EBADF as i64),
            };
            assert_eq!(*v, want, "call {i}");
        }
        // Calls that change mappings go one by one, through the gadget.
        f.drop_stub();
        let un = f
            .inject_many(
                0,
                &[
                    (libc::SYS_munmap, &[maps[0], 4096]),
                    (libc::SYS_munmap, &[maps[1], 4096]),
                ],
            )
            .unwrap();
        assert_eq!(un, vec![0, 0]);
        f.detach().unwrap();
        assert_eq!(child.masks(), before, "SIGTRAP blocked/caught changed");
    }

    /// Calls injected in many threads at once ([`Frozen::inject_each`]):
    /// each thread runs its own (its thread id and timer slack come back,
    /// in the order asked), more threads than one run of the stub takes
    /// go in several, a call the stub does not run goes alone, and every
    /// thread's registers are as they were afterwards.
    #[test]
    fn calls_injected_in_many_threads_at_once_run_in_each_and_leave_it_as_it_was() {
        const N: usize = 30;
        let (_dir, mut child) = spawn_c(&format!(
            "#include <pthread.h>\n#include <unistd.h>\n#include <sys/prctl.h>\n\
             #include <sys/syscall.h>\n#include <stdatomic.h>\n\
             static atomic_int up;\n\
             static void slack(void) {{ prctl(PR_SET_TIMERSLACK, 1000 + syscall(SYS_gettid)); }}\n\
             static void *run(void *a) {{ (void)a; slack(); up++; for (;;) pause(); return 0; }}\n\
             int main(void) {{ pthread_t t; for (int i = 0; i < {N}; i++) pthread_create(&t, 0, run, 0);\n\
               slack(); while (up < {N}) usleep(1000); prctl(PR_SET_NAME, \"ready\");\n\
               for (;;) pause(); }}\n"
        ));
        let p = child.id() as pid_t;
        let guard = Child(p);
        let comm = || crate::procfs::slurp(&format!("/proc/{p}/comm")).unwrap_or_default();
        assert!(within_ms(5000, || comm().trim() == "ready"), "{}", comm());
        let mut f = Frozen::freeze(p).unwrap();
        map_stub(&mut f);
        let tids = f.tids();
        assert_eq!(tids.len(), N + 1);
        let regs = || -> Vec<(u64, u64, u64, u64)> {
            tids.iter()
                .map(|&t| sys::get_regs(t).unwrap())
                .map(|r| (r.rip, r.rsp, r.rax, r.orig_rax))
                .collect()
        };
        let before = regs();
        let ask: [(i64, &[u64]); 2] = [
            (libc::SYS_gettid, &[]),
            (libc::SYS_prctl, &[libc::PR_GET_TIMERSLACK as u64]),
        ];
        assert!(Frozen::stub_room(ask.len()) < N, "all in one run");
        // A call that changes mappings, amid the others: it goes alone.
        let alone: [(i64, &[u64]); 1] = [(libc::SYS_mprotect, &[0, 4096, 0])];
        let mut batches: Vec<Batch> = (0..tids.len()).map(|i| (i, &ask[..])).collect();
        batches.insert(N / 2, (3, &alone[..]));
        let r = f.inject_each(&batches).unwrap();
        assert_eq!(r.len(), batches.len());
        for ((idx, _), got) in batches.iter().zip(&r) {
            if got.len() == 1 {
                assert_eq!(got[0], -(libc::ENOMEM as i64), "the mprotect of nothing");
                continue;
            }
            let tid = tids[*idx] as i64;
            assert_eq!(got, &vec![tid, 1000 + tid], "thread {tid}");
        }
        assert_eq!(regs(), before, "registers changed");
        f.detach().unwrap();
        let asleep = within_ms(1000, || state_of(p) == Some('S'));
        assert!(asleep, "the child is in state {:?}", state_of(p));
        drop(guard);
        let _ = child.wait();
    }

    #[test]
    fn stub_code_has_one_call_per_block_and_ends_with_int3() {
        let args = [1u64, 2, 3, 4, 5, 6];
        let c = stub_code(&[(39, &args[..]), (110, &[])], 0x1000);
        assert_eq!(c.len(), 2 * STUB_CALL_BYTES + 1);
        assert_eq!(&c[..2], &[0x48, 0xb8]);
        assert_eq!(u64::from_le_bytes(c[2..10].try_into().unwrap()), 39);
        // The second block stores its result 8 bytes after the first's.
        let store = &c[2 * STUB_CALL_BYTES - 10..2 * STUB_CALL_BYTES];
        assert_eq!(&store[..2], &[0x48, 0xa3]);
        assert_eq!(u64::from_le_bytes(store[2..].try_into().unwrap()), 0x1008);
        assert_eq!(c.last(), Some(&0xcc));
    }

    /// The state letter of `pid` in its stat file.
    fn state_of(pid: pid_t) -> Option<char> {
        let st = crate::procfs::slurp(&format!("/proc/{pid}/stat")).ok()?;
        st.rsplit(')').next()?.trim_start().chars().next()
    }

    /// The state letter of thread `tid` of `pid`.
    fn thread_state_of(pid: pid_t, tid: pid_t) -> Option<char> {
        let st = crate::procfs::slurp(&format!("/proc/{pid}/task/{tid}/stat")).ok()?;
        st.rsplit(')').next()?.trim_start().chars().next()
    }

    /// Whether `cond` holds within about `ms` milliseconds (checked every
    /// millisecond).
    fn within_ms(ms: u32, mut cond: impl FnMut() -> bool) -> bool {
        (0..ms).any(|_| {
            cond() || {
                std::thread::sleep(std::time::Duration::from_millis(1));
                false
            }
        })
    }

    /// Builds the C program `code` (with pthreads) in a temporary
    /// directory and starts it; the directory goes with the returned guard.
    fn spawn_c(code: &str) -> (tempfile::TempDir, std::process::Child) {
        let d = tempfile::tempdir().unwrap();
        let (src, bin) = (d.path().join("t.c"), d.path().join("t"));
        std::fs::write(&src, code).unwrap();
        let built = std::process::Command::new("cc")
            .arg("-pthread")
            .arg("-o")
            .arg(&bin)
            .arg(&src)
            .status()
            .unwrap();
        assert!(built.success(), "cc failed");
        let child = std::process::Command::new(&bin).spawn().unwrap();
        (d, child)
    }

    #[test]
    fn a_thread_that_cannot_stop_fails_the_freeze_in_time_and_the_process_runs_on() {
        // SAFETY: the child makes raw system calls only: clone (a child
        // with its own memory, like fork, and our wait for it like vfork's:
        // uninterruptible until it exits), prctl, pause and _exit.
        let p = unsafe { libc::fork() };
        if p == 0 {
            unsafe {
                let flags = (libc::CLONE_VFORK | libc::SIGCHLD) as libc::c_long;
                let g = libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize);
                if g == 0 {
                    // Gone with its parent, whatever the test does.
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    loop {
                        libc::pause();
                    }
                }
                libc::_exit(if g > 0 { 7 } else { 1 });
            }
        }
        assert!(p > 0, "fork failed");
        let _guard = Child(p);
        // Bounded: until the child waits in the kernel for its own child.
        let mut waiting = false;
        for _ in 0..5000 {
            if state_of(p) == Some('D') {
                waiting = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(waiting, "the child never waited for its vfork-like child");
        let err = std::thread::spawn(move || {
            Frozen::freeze_within(p, std::time::Duration::from_millis(300))
                .map(|_| ())
                .expect_err("a thread in an uninterruptible wait cannot stop")
                .to_string()
        })
        .join()
        .unwrap();
        assert!(
            err.contains(&format!("thread {p} of process {p} did not stop"))
                && err.contains("state D"),
            "{err}"
        );
        // Its wait ends: it runs on and exits, not held by a trace.
        let kids = std::fs::read_to_string(format!("/proc/{p}/task/{p}/children")).unwrap();
        let g: pid_t = kids.trim().parse().expect("one grandchild");
        // SAFETY: killing the grandchild this test made.
        unsafe { libc::kill(g, libc::SIGKILL) };
        let flags = Some(WaitPidFlag::WNOHANG);
        let mut status = None;
        for _ in 0..10_000 {
            match waitpid(Pid::from_raw(p), flags) {
                Ok(WaitStatus::StillAlive) => {
                    std::thread::sleep(std::time::Duration::from_millis(1))
                }
                Ok(s) => {
                    status = Some(s);
                    break;
                }
                Err(e) => panic!("wait for {p}: {e}"),
            }
        }
        assert_eq!(
            status,
            Some(WaitStatus::Exited(Pid::from_raw(p), 7)),
            "state {:?}",
            state_of(p)
        );
    }

    #[test]
    fn a_process_whose_main_thread_exited_is_refused_and_runs_on() {
        let (_dir, mut child) = spawn_c(
            "#include <pthread.h>\n#include <unistd.h>\n\
             static void *run(void *a) { (void)a; for (;;) pause(); return 0; }\n\
             int main(void) { pthread_t t; pthread_create(&t, 0, run, 0); pthread_exit(0); }\n",
        );
        let p = child.id() as pid_t;
        let guard = Child(p);
        // Bounded: until its main thread is a zombie.
        let gone = within_ms(5000, || state_of(p) == Some('Z'));
        assert!(gone, "the main thread did not exit");
        let err = std::thread::spawn(move || Frozen::freeze(p).map(|_| ()).unwrap_err())
            .join()
            .unwrap()
            .to_string();
        assert!(
            err.contains(&format!("the main thread of process {p} has exited")),
            "{err}"
        );
        // The other thread was let go: it sleeps in pause, not stopped.
        let other = list_tids(p).unwrap().into_iter().find(|&t| t != p).unwrap();
        // Bounded: it may still be on its way back into pause.
        let asleep = within_ms(1000, || thread_state_of(p, other) == Some('S'));
        assert!(
            asleep,
            "thread {other} is in state {:?}",
            thread_state_of(p, other)
        );
        drop(guard);
        let _ = child.wait();
    }

    #[test]
    fn a_process_stopped_again_on_detach_is_stopped_when_the_detach_returns() {
        let (_dir, mut child) = spawn_c(
            "#include <pthread.h>\n#include <unistd.h>\n\
             static void *run(void *a) { (void)a; for (;;) pause(); return 0; }\n\
             int main(void) { pthread_t t; for (int i = 0; i < 15; i++) pthread_create(&t, 0, run, 0);\n\
               for (;;) pause(); }\n",
        );
        let p = child.id() as pid_t;
        let guard = Child(p);
        // Bounded: until all 16 threads exist.
        assert!(
            within_ms(5000, || list_tids(p).is_ok_and(|t| t.len() == 16)),
            "the threads were not started"
        );
        // SAFETY: signalling the child this test started.
        unsafe { libc::kill(p, libc::SIGSTOP) };
        let tids = list_tids(p).unwrap();
        let all_stopped = || tids.iter().all(|&t| thread_state_of(p, t) == Some('T'));
        assert!(within_ms(5000, all_stopped), "SIGSTOP did not stop it");
        for _ in 0..5 {
            let mut f = Frozen::freeze(p).unwrap();
            f.stop_on_detach();
            f.detach().unwrap();
            // Read once, at once: the detach's caller may look right away.
            let states: Vec<_> = tids.iter().map(|&t| thread_state_of(p, t)).collect();
            assert!(
                states.iter().all(|&s| s == Some('T')),
                "thread states right after the detach: {states:?}"
            );
        }
        drop(guard);
        let _ = child.wait();
    }

    #[test]
    fn no_call_of_a_process_passes_its_seccomp_filter_while_it_is_frozen_and_let_go() {
        // Three threads call getpriority without end, which the filter
        // fails with errno 77; any other result ends the process with 3.
        let (_dir, mut child) = spawn_c(
            "#include <errno.h>\n#include <linux/filter.h>\n#include <linux/seccomp.h>\n\
             #include <pthread.h>\n#include <stddef.h>\n#include <sys/prctl.h>\n\
             #include <sys/syscall.h>\n#include <unistd.h>\n\
             static struct sock_filter f[] = {\n\
               BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),\n\
               BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getpriority, 0, 1),\n\
               BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 77),\n\
               BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW) };\n\
             static void *spin(void *a) { (void)a; for (;;) { errno = 0;\n\
               if (syscall(SYS_getpriority, 0, 0) != -1 || errno != 77) _exit(3); } return 0; }\n\
             int main(void) { struct sock_fprog p = {4, f};\n\
               if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || syscall(SYS_seccomp, 1, 0, &p)) _exit(1);\n\
               pthread_t t; for (int i = 0; i < 2; i++) pthread_create(&t, 0, spin, 0);\n\
               spin(0); }\n",
        );
        let p = child.id() as pid_t;
        let guard = Child(p);
        assert!(
            within_ms(5000, || list_tids(p).is_ok_and(|t| t.len() == 3)),
            "the threads were not started (exit {:?})",
            child.try_wait()
        );
        for round in 0..300 {
            let mut f = Frozen::freeze(p).unwrap_or_else(|e| {
                panic!(
                    "round {round}: {e} (the process: {:?}; 3 means a call passed its filter)",
                    child.try_wait()
                )
            });
            // An injected call passes the filter where it can be suspended
            // (getpriority's raw result is 20 - nice).
            let r = f
                .inject_many(0, &[(libc::SYS_getpriority, &[0, 0])])
                .unwrap()[0];
            if can_suspend_seccomp() {
                assert!(
                    r > 0,
                    "an injected call met the filter: {r} (round {round})"
                );
            } else {
                assert_eq!(r, -77, "the filter did not hold (round {round})");
            }
            f.detach().unwrap();
            assert_eq!(
                child.try_wait().unwrap(),
                None,
                "a call of the process passed its filter (round {round})"
            );
        }
        drop(guard);
        let _ = child.wait();
    }

    #[test]
    fn a_freeze_does_not_end_an_epoll_wait_with_eintr() {
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 writes two descriptors into the array.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        let (r, w) = (fds[0], fds[1]);
        // SAFETY: the child makes raw system calls only (epoll_create1,
        // epoll_wait, write, _exit).
        let p = unsafe { libc::fork() };
        if p == 0 {
            unsafe {
                let ep = libc::epoll_create1(0);
                let mut ev: [libc::epoll_event; 1] = std::mem::zeroed();
                let ret = libc::epoll_wait(ep, ev.as_mut_ptr(), 1, 600_000);
                let e = *libc::__errno_location();
                let out = [ret, e];
                libc::write(w, out.as_ptr().cast(), 8);
                libc::_exit(0);
            }
        }
        assert!(p > 0, "fork failed");
        let _guard = Child(p);
        // SAFETY: closing our copy of the write end.
        unsafe { libc::close(w) };
        let in_epoll = |p: pid_t| {
            std::fs::read_to_string(format!("/proc/{p}/syscall"))
                .is_ok_and(|s| s.starts_with("232 "))
                && state_of(p) == Some('S')
        };
        // Bounded: until it waits in epoll_wait.
        assert!(
            (0..5000).any(|_| in_epoll(p) || {
                std::thread::sleep(std::time::Duration::from_millis(1));
                false
            }),
            "the child never waited in epoll_wait"
        );
        let f = Frozen::freeze(p).unwrap();
        f.detach().unwrap();
        // Bounded: until it waits again, or has said how epoll_wait ended.
        let mut said = [0i32; 2];
        let mut ended = false;
        // SAFETY: making our read end non-blocking.
        unsafe { libc::fcntl(r, libc::F_SETFL, libc::O_NONBLOCK) };
        for _ in 0..5000 {
            // SAFETY: reading 8 bytes into an 8-byte array.
            if unsafe { libc::read(r, said.as_mut_ptr().cast(), 8) } == 8 {
                ended = true;
                break;
            }
            if in_epoll(p) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // SAFETY: closing our read end.
        unsafe { libc::close(r) };
        assert!(
            !ended,
            "epoll_wait returned {} (errno {}) after the freeze",
            said[0], said[1]
        );
        assert!(in_epoll(p), "the child is not back in epoll_wait");
    }

    #[test]
    fn threads_interrupted_after_one_that_cannot_stop_are_let_go() {
        // The main thread waits, uninterruptibly, for a vfork child that
        // never execs; its second thread sleeps. Every thread is
        // interrupted before any is waited for, so the second one is
        // already seized when the main thread's wait times out: it must be
        // let go, not left stopped under a tracer that still runs.
        let (_dir, mut child) = spawn_c(
            "#include <pthread.h>\n#include <signal.h>\n#include <sys/prctl.h>\n#include <unistd.h>\n\
             static void *run(void *a) { (void)a; for (;;) pause(); return 0; }\n\
             int main(void) { pthread_t t; pthread_create(&t, 0, run, 0);\n\
               if (vfork() == 0) { prctl(PR_SET_PDEATHSIG, SIGKILL); for (;;) pause(); }\n\
               return 7; }\n",
        );
        let p = child.id() as pid_t;
        let guard = Child(p);
        // Bounded: until the main thread waits for its vfork child.
        let waiting = within_ms(5000, || state_of(p) == Some('D'));
        assert!(waiting, "the main thread never waited for its vfork child");
        let other = list_tids(p).unwrap().into_iter().find(|&t| t != p).unwrap();
        // The freezing thread stays alive until told: a thread it had left
        // seized would stay stopped until then.
        let (said, heard) = std::sync::mpsc::channel();
        let (go, wait_go) = std::sync::mpsc::channel::<()>();
        let freezer = std::thread::spawn(move || {
            let err = Frozen::freeze_within(p, std::time::Duration::from_millis(300))
                .map(|_| ())
                .expect_err("a thread in an uninterruptible wait cannot stop")
                .to_string();
            said.send(err).unwrap();
            let _ = wait_go.recv();
        });
        let err = heard.recv().unwrap();
        assert!(
            err.contains(&format!("thread {p} of process {p} did not stop")),
            "{err}"
        );
        // Bounded: it may still be on its way back into pause.
        let asleep = within_ms(1000, || thread_state_of(p, other) == Some('S'));
        let state = thread_state_of(p, other);
        go.send(()).unwrap();
        freezer.join().unwrap();
        assert!(
            asleep,
            "thread {other} is in state {state:?}, not back in pause"
        );
        let kids = std::fs::read_to_string(format!("/proc/{p}/task/{p}/children")).unwrap();
        if let Ok(g) = kids.trim().parse::<pid_t>() {
            // SAFETY: killing the vfork child this test made.
            unsafe { libc::kill(g, libc::SIGKILL) };
        }
        drop(guard);
        let _ = child.wait();
    }
}
