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

/// `restart_syscall`: what a thread runs after a stop (ptrace, job control)
/// interrupted a call that resumes from a block of kernel state, the
/// *restart block*: a relative `nanosleep` or `clock_nanosleep`, a `futex`
/// wait with a timeout, a `poll` (with or without a timeout).
const SYS_RESTART_SYSCALL: u64 = libc::SYS_restart_syscall as u64;

/// The call a thread stopped in `restart_syscall` was making, told from its
/// argument registers (which still hold the original call's) and the memory
/// they point to (`read(addr, len)`); None if it is none of the four calls
/// that restart that way, or the arguments do not say which.
///
/// The restart block stays with the source's kernel: re-run there, the
/// call would find an empty one and fail with EINTR, which a program that
/// does not expect it (a `sleep` in perl, a C `nanosleep` loop) turns into
/// a visible change. Known, the call is re-run from its start instead, with
/// its own arguments: a sleep whose remaining time the kernel wrote back
/// into its request (glibc's `sleep`, which passes one struct as both)
/// sleeps what was left; other relative timeouts start over.
fn restarted_call(r: &sys::UserRegs, read: &dyn Fn(u64, usize) -> Option<Vec<u8>>) -> Option<i64> {
    let user_ptr = |a: u64| (4096..1 << 47).contains(&a);
    let ptr_or_null = |a: u64| a == 0 || user_ptr(a);
    let timespec_at = |a: u64| {
        user_ptr(a)
            && read(a, 16).is_some_and(|b| {
                b.len() == 16 && {
                    let s = i64::from_le_bytes(b[..8].try_into().unwrap());
                    let ns = i64::from_le_bytes(b[8..].try_into().unwrap());
                    s >= 0 && (0..1_000_000_000).contains(&ns)
                }
            })
    };
    let (a0, a1, a2, a3) = (r.rdi, r.rsi, r.rdx, r.r10);
    // clock_nanosleep(clock, 0, req, rem): a clock id is an int (its upper
    // half zero; CPU clocks are negative ints), and only relative sleeps
    // (flags 0) restart this way.
    let clock = a0 as u32 as i32;
    if a0 >> 32 == 0 && (clock < 0 || clock <= 11) && a1 == 0 && timespec_at(a2) && ptr_or_null(a3)
    {
        return Some(libc::SYS_clock_nanosleep);
    }
    // futex(word, FUTEX_WAIT or FUTEX_WAIT_BITSET [| PRIVATE | CLOCK_REALTIME],
    // value, timeout), the word still holding the value it waits on.
    let op = a1 & !(128 | 256);
    if (op == 0 || op == 9)
        && user_ptr(a0)
        && a0 % 4 == 0
        && timespec_at(a3)
        && read(a0, 4).is_some_and(|b| b.len() == 4 && b[..] == (a2 as u32).to_le_bytes())
    {
        return Some(libc::SYS_futex);
    }
    // nanosleep(req, rem)
    if timespec_at(a0) && ptr_or_null(a1) {
        return Some(libc::SYS_nanosleep);
    }
    // poll(fds, nfds, timeout in ms): no fds or a readable array of them,
    // and an int timeout other than 0 (which never waits): positive, or
    // negative for no timeout (`tail -f` waits so), which restarts this way
    // too; the caller may have widened the int with its sign.
    let fds_ok = (a0 == 0 && a1 == 0)
        || (user_ptr(a0)
            && (1..=1 << 20).contains(&a1)
            && read(a0, 8).is_some_and(|b| b.len() == 8));
    let timeout = a2 as u32 as i32;
    let int_arg = a2 >> 32 == 0 || (a2 >> 32 == 0xffff_ffff && timeout < 0);
    if fds_ok && int_arg && timeout != 0 {
        return Some(libc::SYS_poll);
    }
    None
}

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
    /// Encoded as bytes, not byte by byte (2432 bytes a thread on the AMD
    /// VM, some 56 KB for a JVM's 23 threads): postcard writes the two alike, so images read the
    /// same either way (`byte_fields_encode_as_the_sequences_they_were`).
    #[serde(with = "serde_bytes")]
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

impl ThreadsState {
    /// Each thread's id in the image and its saved xsave area, for
    /// [`super::cpu::check`].
    pub fn xstates(&self) -> Vec<(i32, &[u8])> {
        self.threads
            .iter()
            .map(|t| (t.tid, &t.xstate[..]))
            .collect()
    }
}

fn regs_to_vec(r: &sys::UserRegs) -> Vec<u64> {
    // SAFETY: user_regs_struct is 27 plain u64 fields.
    unsafe { std::slice::from_raw_parts(r as *const _ as *const u64, 27) }.to_vec()
}

/// Each thread of the image restored as a thread of `frozen` (in the
/// image's order): its id in the image, its id now, and its thread pointer
/// (`fs`), which the restore kept.
pub fn renamed(
    pi: &crate::image::ProcessImage,
    frozen: &crate::ptrace::Frozen,
) -> Vec<(libc::pid_t, libc::pid_t, u64)> {
    pi.threads
        .threads
        .iter()
        .zip(&frozen.threads)
        .map(|(th, now)| (th.tid, now.tid, regs_from_vec(&th.regs).fs_base))
        .collect()
}

/// A thread stopped as a `getpid` or `gettid` call returned (the last entry
/// into the kernel was that call: `orig_rax`) holds in `rax` the id it had
/// in the original, and goes on with it: a `tgkill(getpid(), …)` would aim
/// at a process that is not there (the Go runtime's preemption signal
/// among them, lost for good, and its goroutine with it), a `procid =
/// gettid()` would record an id no thread has. It gets its new id
/// instead: `pid` and `tid` are (old, new). Returns whether it did. A stop
/// anywhere after the return, with the old id already copied elsewhere,
/// is not mended.
fn own_id_returned(r: &mut sys::UserRegs, pid: (pid_t, pid_t), tid: (pid_t, pid_t)) -> bool {
    let (old, new) = match r.orig_rax as i64 {
        libc::SYS_getpid => pid,
        libc::SYS_gettid => tid,
        _ => return false,
    };
    if old == new || r.rax as i64 != old as i64 {
        return false;
    }
    r.rax = new as u64;
    true
}

/// [`renamed`] without the thread pointers: (old, new) for each thread.
pub fn tid_pairs(
    pi: &crate::image::ProcessImage,
    frozen: &crate::ptrace::Frozen,
) -> Vec<(libc::pid_t, libc::pid_t)> {
    renamed(pi, frozen)
        .into_iter()
        .map(|(old, new, _)| (old, new))
        .collect()
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

/// How the threads of `fin` follow from those of `pre` (two captures of
/// one process, matched by thread id): the indices in `pre` of the threads
/// that ended, and in `fin` of those that started, each in order. Stale if
/// the main thread is not the same, or the threads both list are listed in
/// another order.
pub fn thread_changes(pre: &ThreadsState, fin: &ThreadsState) -> Result<ThreadChanges> {
    let main = |s: &ThreadsState| s.threads.first().map(|t| t.tid);
    if main(pre) != main(fin) {
        return Err(crate::error::stale(format!(
            "its main thread {} ended",
            main(pre).unwrap_or(0)
        )));
    }
    let at: std::collections::HashMap<pid_t, usize> = pre
        .threads
        .iter()
        .enumerate()
        .map(|(i, t)| (t.tid, i))
        .collect();
    let mut kept = vec![false; pre.threads.len()];
    let mut started = Vec::new();
    let mut last = None;
    for (k, t) in fin.threads.iter().enumerate() {
        match at.get(&t.tid) {
            Some(&i) if last.is_some_and(|l| i <= l) => {
                return Err(crate::error::stale(format!(
                    "its threads are listed in another order (thread {})",
                    t.tid
                )))
            }
            Some(&i) => {
                kept[i] = true;
                last = Some(i);
            }
            None => started.push(k),
        }
    }
    let ended = (0..pre.threads.len()).filter(|&i| !kept[i]).collect();
    Ok(ThreadChanges { ended, started })
}

/// What [`thread_changes`] found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ThreadChanges {
    /// Indices in the first capture of the threads that ended.
    pub ended: Vec<usize>,
    /// Indices in the capture of the stop of the threads that started.
    pub started: Vec<usize>,
}

/// Makes the threads of the held skeleton (`cx.frozen`, in the order of
/// `pre`) those of `fin`: the threads that ended end
/// ([`crate::ptrace::Frozen::end_thread`]), and the threads that started
/// start, stopped before their first instruction, at their index in `fin`
/// ([`crate::ptrace::Frozen::start_thread`]); with the ids they had when the
/// skeleton kept its ids, else new ones. What a new thread holds
/// (registers, attributes) is set by the parts, as for any thread.
pub fn follow_membership(
    pre: &ThreadsState,
    fin: &ThreadsState,
    cx: &mut super::Update,
) -> Result<()> {
    let changes = cx.threads.clone();
    // From the last, so that the indices of the others hold.
    for &i in changes.ended.iter().rev() {
        cx.frozen.end_thread(i)?;
    }
    let kept_ids = pre.threads.first().map(|t| t.tid) == Some(cx.pid);
    for &k in &changes.started {
        let tid = fin.threads[k].tid;
        let mut got: Option<pid_t> = None;
        if kept_ids {
            // clone3 with set_tid: struct clone_args (11 words), then the id.
            let at = cx.finish().scratch_addr(12 * 8);
            let mut args = [0u64; 12];
            args[0] = THREAD_CLONE_FLAGS;
            args[8] = at + 11 * 8;
            args[9] = 1;
            args[11] = tid as u64;
            let raw: Vec<u8> = args.iter().flat_map(|w| w.to_le_bytes()).collect();
            let ptr = cx.finish().scratch(&raw)?;
            // Refused (the id is taken, or the process may not choose it):
            // a new id, as the restore gives.
            got = cx
                .frozen
                .start_thread(k, (libc::SYS_clone3, &[ptr, 11 * 8]))?
                .ok();
        }
        let got = match got {
            Some(t) => t,
            None => cx
                .frozen
                .start_thread(k, (libc::SYS_clone, &[THREAD_CLONE_FLAGS, 0, 0, 0, 0]))?
                .map_err(|e| crate::error::EngineError::Sys {
                    what: format!("start thread {tid} in process {}", cx.pid),
                    source: e,
                })?,
        };
        if got != tid {
            tracing::debug!("thread {tid}, started since the skeleton's capture, runs as {got}");
        }
    }
    if changes != ThreadChanges::default() {
        tracing::debug!(
            "process {}: threads ended since the skeleton's capture: {}, started: {}",
            cx.pid,
            changes.ended.len(),
            changes.started.len()
        );
    }
    Ok(())
}

/// The `stack_t` (sp, flags, size) that gives a thread `th`'s alternate
/// signal stack: its flags without `SS_ONSTACK`, which says where the
/// thread ran, not what it set.
fn altstack_arg(th: &ThreadState) -> [u64; 3] {
    let (sp, flags, size) = th.sigaltstack;
    if flags & libc::SS_DISABLE == 0 {
        [sp, (flags & !libc::SS_ONSTACK) as u32 as u64, size]
    } else {
        [0, libc::SS_DISABLE as u64, 0]
    }
}

/// `PR_SET_NAME`'s argument for thread name `comm`: at most 15 bytes and a NUL.
fn name_arg(comm: &str) -> Vec<u8> {
    let mut name = comm.as_bytes().to_vec();
    name.truncate(15);
    name.push(0);
    name
}

/// Sets on skeleton thread `idx` (captured as `was`; None for a thread
/// started since, which has what its creator had) what the thread set on
/// itself, as `now` has it: its robust futex list, clear-child-tid word,
/// alternate signal stack, name and timer slack. (A new thread's rseq
/// area is registered once the pages are in: [`register_rseq_of_new`].)
fn follow_attributes(
    was: Option<&ThreadState>,
    now: &ThreadState,
    idx: usize,
    cx: &mut super::Update,
) -> Result<()> {
    let tid = now.tid;
    let check = |r: i64, what: &str| {
        if r < 0 {
            Err(crate::error::EngineError::Sys {
                what: format!("thread {tid}: {what}"),
                source: std::io::Error::from_raw_os_error(-r as i32),
            })
        } else {
            Ok(())
        }
    };
    if was.is_none_or(|w| w.robust_list != now.robust_list) {
        let (head, len) = now.robust_list;
        // A list let go of reads back as none of the size the call wants.
        let len = if head == 0 { 24 } else { len };
        let r = cx
            .frozen
            .inject(idx, libc::SYS_set_robust_list, &[head, len])?;
        check(r, "set the robust futex list")?;
    }
    if was.is_none_or(|w| w.clear_child_tid != now.clear_child_tid) {
        let r = cx
            .frozen
            .inject(idx, libc::SYS_set_tid_address, &[now.clear_child_tid])?;
        check(r, "set clear_child_tid")?;
    }
    if was.is_none_or(|w| altstack_arg(w) != altstack_arg(now)) {
        let ss: Vec<u8> = altstack_arg(now)
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        cx.call_with(idx, libc::SYS_sigaltstack, &ss, 0, &[0, 0], || {
            format!("thread {tid}: set the alternate signal stack")
        })?;
    }
    if was.is_none_or(|w| w.comm != now.comm) {
        let name = name_arg(&now.comm);
        cx.call_with(
            idx,
            libc::SYS_prctl,
            &name,
            1,
            &[libc::PR_SET_NAME as u64, 0],
            || format!("thread {tid}: name it '{}'", now.comm),
        )?;
    }
    if was.is_none_or(|w| w.timerslack != now.timerslack) {
        // 0 sets the thread's default slack back, as a thread that never
        // set one has.
        let r = cx.frozen.inject(
            idx,
            libc::SYS_prctl,
            &[PR_SET_TIMERSLACK as u64, now.timerslack],
        )?;
        check(r, "set the timer slack")?;
    }
    Ok(())
}

/// Registers the rseq area of each thread started since the skeleton's
/// capture: once the pages of the stop are in place, for the kernel
/// writes to the area as it registers it (the area is in the new thread's
/// memory, which the image of the stop carries, as it carries every
/// thread's).
pub fn register_rseq_of_new(fin: &ThreadsState, cx: &mut super::Update) -> Result<()> {
    for &k in &cx.threads.started {
        let Some((addr, len, sig)) = fin.threads[k].rseq else {
            continue;
        };
        let r = cx
            .frozen
            .inject(k, libc::SYS_rseq, &[addr, len as u64, 0, sig as u64])?;
        if r < 0 {
            return Err(crate::error::EngineError::Sys {
                what: format!("thread {}: register rseq at {addr:#x}", fin.threads[k].tid),
                source: std::io::Error::from_raw_os_error(-r as i32),
            });
        }
    }
    Ok(())
}

/// The calls that read a thread's attributes no other interface gives,
/// writing [`THREAD_OUT`] bytes at `out`: its clear-child-tid address, its
/// signal stack, its timer slack, and its name (which `/proc` gives too,
/// at the cost of a file read per thread while the process is stopped).
fn thread_calls(out: u64) -> Vec<(i64, Vec<u64>)> {
    vec![
        (libc::SYS_prctl, vec![PR_GET_TID_ADDRESS, out]),
        (libc::SYS_sigaltstack, vec![0, out + 8]),
        (libc::SYS_prctl, vec![PR_GET_TIMERSLACK]),
        (libc::SYS_prctl, vec![libc::PR_GET_NAME as u64, out + 32]),
    ]
}

/// The bytes [`thread_calls`] write.
const THREAD_OUT: usize = 48;

/// A thread's name as `PR_GET_NAME` wrote it (up to 16 bytes, NUL-ended).
fn name_from(raw: &[u8]) -> String {
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    String::from_utf8_lossy(&raw[..end]).into_owned()
}

/// A thread's nice value, asked of the kernel (`getpriority` of the
/// thread; the system call gives 20 − nice); `None` if it cannot say.
fn nice_of(tid: pid_t) -> Option<i32> {
    // SAFETY: getpriority takes two integers and returns one.
    let r = unsafe { libc::syscall(libc::SYS_getpriority, libc::PRIO_PROCESS, tid) };
    (r > 0).then(|| 20 - r as i32)
}

impl Threads {
    /// The calls its capture makes in the main thread (see
    /// [`Capture::ask`]).
    pub(crate) fn ask(cx: &mut Capture) -> Result<()> {
        cx.ask(Self::PART, THREAD_OUT, thread_calls)
    }
}

impl Resource for Threads {
    const PART: &'static str = "threads";
    type State = ThreadsState;

    fn capture(cx: &mut Capture) -> Result<ThreadsState> {
        let n = cx.n_threads();
        // The main thread's were asked with the other parts' questions; the
        // others are asked theirs several at a time, each writing to its own
        // part of the scratch page.
        let mut asked = Vec::with_capacity(n);
        asked.push(cx.answers(Self::PART, Threads::ask)?);
        if n > 1 {
            let scratch = cx.scratch()?;
            let room = crate::ptrace::Frozen::stub_room(thread_calls(0).len())
                .min(super::SCRATCH_LEN as usize / THREAD_OUT);
            let others: Vec<usize> = (1..n).collect();
            for chunk in others.chunks(room) {
                let calls: Vec<_> = (0..chunk.len())
                    .map(|j| thread_calls(scratch + (j * THREAD_OUT) as u64))
                    .collect();
                let calls: Vec<Vec<(i64, &[u64])>> = calls
                    .iter()
                    .map(|c| c.iter().map(|(nr, a)| (*nr, &a[..])).collect())
                    .collect();
                let batches: Vec<crate::ptrace::Batch> = chunk
                    .iter()
                    .zip(&calls)
                    .map(|(&i, c)| (i, &c[..]))
                    .collect();
                let results = cx.frozen.inject_each(&batches)?;
                let raw = cx.read_mem(scratch, chunk.len() * THREAD_OUT)?;
                for (j, res) in results.into_iter().enumerate() {
                    let out = raw.get(j * THREAD_OUT..(j + 1) * THREAD_OUT);
                    asked.push((res, out.unwrap_or_default().to_vec()));
                }
            }
        }
        let mut threads = Vec::new();
        for (i, (res, raw)) in asked.into_iter().enumerate() {
            let tid = cx.frozen.threads[i].tid;
            let w = |o: usize| {
                raw.get(o..o + 8)
                    .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()))
            };
            let clear_child_tid = if res[0] >= 0 { w(0) } else { 0 };
            let sigaltstack = if res[1] >= 0 {
                (w(8), w(16) as i32, w(24))
            } else {
                (0, libc::SS_DISABLE, 0)
            };
            let mut regs = sys::get_regs(tid)?;
            if regs.orig_rax == SYS_RESTART_SYSCALL && regs.rax as i64 == ERESTART_RESTARTBLOCK {
                let read = |a: u64, n: usize| cx.read_mem(a, n).ok();
                match restarted_call(&regs, &read) {
                    Some(nr) => {
                        tracing::debug!(
                            "thread {tid} was restarting an interrupted call: system call {nr}, re-run from its start"
                        );
                        regs.orig_rax = nr as u64;
                    }
                    None => tracing::warn!(
                        "thread {tid} was restarting an interrupted call that cannot be told from its arguments: it will fail with EINTR"
                    ),
                }
            }
            let rseq = sys::rseq_config(tid)?;
            let nice = match nice_of(tid) {
                Some(n) => n,
                // Field 19 of its stat.
                None => crate::procfs::stat_fields(tid)?
                    .get(16)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
            };
            let comm = match (res.get(3), raw.get(32..THREAD_OUT)) {
                (Some(&r), Some(name)) if r >= 0 => name_from(name),
                _ => crate::procfs::read(cx.pid, &format!("task/{tid}/comm"))?
                    .trim_end_matches('\n')
                    .to_string(),
            };
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
                comm,
                timerslack: res[2].max(0) as u64,
                nice,
                affinity: match cx.frozen.affinity_of(i) {
                    Some(a) => a.to_vec(),
                    None => affinity(tid)?,
                },
            });
        }
        Ok(ThreadsState { threads })
    }

    fn plan(s: &ThreadsState, cx: &mut PlanCx) -> Result<()> {
        let skeleton = cx.pf.opts.skeleton;
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
            // Set either way: the main thread inherits the restoring
            // program's alternate stack across the fork, in memory that is
            // gone once the restorer has run.
            let d = b.data_of(&altstack_arg(th));
            b.syscall(
                t,
                libc::SYS_sigaltstack,
                &[d.into(), 0u64.into()],
                Check::NonNeg,
                "set the alternate signal stack",
            );
            let d = b.data(&name_arg(&th.comm));
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
            // A skeleton's pending signals are queued at its bring-up.
            let pending = if skeleton { &[][..] } else { &th.pending[..] };
            for info in pending {
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

    /// The threads of the stop (those that ended or started since the
    /// skeleton's capture already did, [`follow_membership`]), with what
    /// each set on itself since; the registers, FPU state, signal mask and
    /// pending signals of the stop. A changed rseq registration is not
    /// followed (stale).
    fn update(
        pre: &ThreadsState,
        fin: &ThreadsState,
        _same: bool,
        cx: &mut super::Update,
    ) -> Result<()> {
        let mut kept = (0..pre.threads.len())
            .filter(|i| !cx.threads.ended.contains(i))
            .map(|i| &pre.threads[i]);
        let mut was = Vec::with_capacity(fin.threads.len());
        for k in 0..fin.threads.len() {
            was.push(if cx.threads.started.contains(&k) {
                None
            } else {
                kept.next()
            });
        }
        if let Some(a) = was
            .iter()
            .zip(&fin.threads)
            .find_map(|(a, b)| a.filter(|a| a.rseq != b.rseq))
        {
            return Err(crate::error::stale(format!(
                "thread {} changed its rseq registration",
                a.tid
            )));
        }
        // What a thread sets on itself, set again in the skeleton's thread
        // where it changed, and all of it in a new thread (its nice value
        // and affinity are set below, by `finish`, either way).
        for (k, b) in fin.threads.iter().enumerate() {
            follow_attributes(was[k], b, k, cx)?;
        }
        Threads::finish(fin, &mut cx.finish())?;
        for (t, th) in fin.threads.iter().enumerate() {
            let tid = cx.frozen.threads[t].tid;
            for info in &th.pending {
                let sig = i32::from_le_bytes(info[0..4].try_into().unwrap());
                cx.call_with(
                    t,
                    libc::SYS_rt_tgsigqueueinfo,
                    info,
                    3,
                    &[cx.pid as u64, tid as u64, sig as u64, 0],
                    || format!("queue pending signal {sig} for thread {tid}"),
                )?;
            }
        }
        Ok(())
    }

    fn finish(s: &ThreadsState, cx: &mut Finish) -> Result<()> {
        let old_pid = s.threads.first().map_or(0, |t| t.tid);
        for (i, th) in s.threads.iter().enumerate() {
            let tid = cx.frozen.threads[i].tid;
            let mut r = regs_from_vec(&th.regs);
            // A call interrupted with a restart block cannot restart in a new
            // process (the block is gone): run the call again from the start.
            if r.orig_rax as i64 >= 0 && r.rax as i64 == ERESTART_RESTARTBLOCK {
                r.rax = ERESTARTNOINTR as u64;
            }
            if own_id_returned(&mut r, (old_pid, cx.pid), (th.tid, tid)) {
                tracing::debug!(
                    "thread {tid} was stopped as system call {} returned its old id: it returns the new one",
                    r.orig_rax
                );
            }
            sys::set_regs(tid, &r)?;
            // This CPU's size (the image's may come from another CPU).
            let here = super::cpu::CpuState::here();
            sys::set_xstate(tid, &super::cpu::fit_xstate(&th.xstate, here))?;
            // Set when the process is let go: the timers armed below, and
            // any signal sent to it meanwhile, must not interrupt the
            // calls injected until then (a held restore's release).
            cx.frozen.set_mask_at_detach(i, th.sigmask)?;
            // Likewise its affinity, if it is kept on the tracer's CPU
            // meanwhile (`Frozen::colocate`).
            if let Err(e) = cx.frozen.set_affinity_at_release(i, &th.affinity) {
                tracing::warn!("thread {tid}: CPU affinity not restored: {e}");
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Memory of a pretend process: address -> bytes.
    struct Mem(BTreeMap<u64, Vec<u8>>);

    impl Mem {
        fn read(&self, a: u64, n: usize) -> Option<Vec<u8>> {
            let (start, b) = self.0.range(..=a).next_back()?;
            let off = (a - start) as usize;
            (off < b.len()).then(|| b[off..(off + n).min(b.len())].to_vec())
        }
    }

    fn timespec(s: i64, ns: i64) -> Vec<u8> {
        [s.to_le_bytes(), ns.to_le_bytes()].concat()
    }

    fn call(mem: &Mem, a: [u64; 4]) -> Option<i64> {
        // SAFETY: user_regs_struct is plain integers: all zero is valid.
        let mut r: sys::UserRegs = unsafe { std::mem::zeroed() };
        (r.rdi, r.rsi, r.rdx, r.r10) = (a[0], a[1], a[2], a[3]);
        r.orig_rax = SYS_RESTART_SYSCALL;
        r.rax = ERESTART_RESTARTBLOCK as u64;
        restarted_call(&r, &|addr, n| mem.read(addr, n))
    }

    #[test]
    fn a_thread_stopped_as_getpid_or_gettid_returned_gets_its_new_id() {
        let at = |nr: i64, rax: i64| {
            // SAFETY: user_regs_struct is plain integers: all zero is valid.
            let mut r: sys::UserRegs = unsafe { std::mem::zeroed() };
            r.orig_rax = nr as u64;
            r.rax = rax as u64;
            r
        };
        let (pid, tid) = ((100, 200), (105, 207));
        let mut r = at(libc::SYS_getpid, 100);
        assert!(own_id_returned(&mut r, pid, tid));
        assert_eq!(r.rax, 200);
        let mut r = at(libc::SYS_gettid, 105);
        assert!(own_id_returned(&mut r, pid, tid));
        assert_eq!(r.rax, 207);
        // Another call, another value, no call (an interrupt's -1), ids kept.
        for (nr, rax) in [
            (libc::SYS_getppid, 100),
            (libc::SYS_getpid, 105),
            (libc::SYS_gettid, 100),
            (-1, 100),
        ] {
            let mut r = at(nr, rax);
            assert!(!own_id_returned(&mut r, pid, tid));
            assert_eq!(r.rax, rax as u64);
        }
        let mut r = at(libc::SYS_getpid, 100);
        assert!(!own_id_returned(&mut r, (100, 100), tid));
        assert_eq!(r.rax, 100);
    }

    const TS: u64 = 0x7ffd_0000_1000;
    const WORD: u64 = 0x5555_0000_2000;
    const FDS: u64 = 0x5555_0000_3000;

    fn mem() -> Mem {
        let mut m = BTreeMap::new();
        m.insert(TS, timespec(5, 250_000_000));
        m.insert(WORD, 7u32.to_le_bytes().to_vec());
        m.insert(FDS, [3i32.to_le_bytes(), 1u32.to_le_bytes()].concat());
        Mem(m)
    }

    fn threads(tids: &[pid_t]) -> ThreadsState {
        ThreadsState {
            threads: tids
                .iter()
                .map(|&tid| ThreadState {
                    tid,
                    regs: vec![0; 27],
                    xstate: vec![],
                    sigmask: 0,
                    pending: vec![],
                    rseq: None,
                    robust_list: (0, 0),
                    clear_child_tid: 0,
                    sigaltstack: (0, libc::SS_DISABLE, 0),
                    comm: String::new(),
                    timerslack: 0,
                    nice: 0,
                    affinity: vec![],
                })
                .collect(),
        }
    }

    #[test]
    fn threads_that_ended_or_started_since_the_first_capture_are_found() {
        let changes = |a: &[pid_t], b: &[pid_t]| {
            thread_changes(&threads(a), &threads(b)).map(|c| (c.ended, c.started))
        };
        let none: Vec<usize> = vec![];
        assert_eq!(
            changes(&[10, 11, 12], &[10, 11, 12]).unwrap(),
            (none.clone(), none.clone())
        );
        assert_eq!(
            changes(&[10, 11, 12], &[10, 12]).unwrap(),
            (vec![1], none.clone())
        );
        assert_eq!(
            changes(&[10, 11, 12, 13], &[10]).unwrap(),
            (vec![1, 2, 3], none.clone())
        );
        assert_eq!(
            changes(&[10, 11], &[10, 11, 14]).unwrap(),
            (none.clone(), vec![2])
        );
        assert_eq!(
            changes(&[10, 11, 12], &[10, 14, 12, 15]).unwrap(),
            (vec![1], vec![1, 3])
        );
        let stale = |a: &[pid_t], b: &[pid_t]| match changes(a, b) {
            Err(crate::error::EngineError::Stale(w)) => w,
            other => panic!("{a:?} -> {b:?}: {other:?}"),
        };
        // Listed in another order: which came first cannot be told.
        assert!(stale(&[10, 11, 12], &[10, 12, 11]).contains("another order"));
        assert!(stale(&[10, 11], &[11]).contains("main thread 10 ended"));
        assert!(stale(&[10, 11], &[14, 11]).contains("main thread 10 ended"));
    }

    #[test]
    fn a_threads_nice_and_name_are_what_proc_says() {
        // SAFETY: gettid takes no arguments.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as pid_t;
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
        let nice: i32 = stat
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .nth(16)
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(nice_of(tid), Some(nice));
        let mut name = [0u8; 16];
        // SAFETY: PR_GET_NAME writes at most 16 bytes into `name`.
        assert_eq!(
            unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) },
            0
        );
        let comm = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).unwrap();
        assert_eq!(name_from(&name), comm.trim_end_matches('\n'));
        assert_eq!(name_from(b"abc\0\0junk"), "abc");
        assert_eq!(name_from(b"0123456789abcdef"), "0123456789abcdef");
    }

    /// The fields encoded with `serde_bytes` (a thread's FPU state, a pipe's
    /// or FIFO's bytes, a seccomp program) were sequences of `u8` before:
    /// postcard gives both the same bytes, and each reads the other's.
    #[test]
    fn byte_fields_encode_as_the_sequences_they_were() {
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        struct Seq(Vec<u8>, u32);
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        struct Bytes(#[serde(with = "serde_bytes")] Vec<u8>, u32);
        for len in [0usize, 1, 127, 128, 3000, 70000] {
            let v: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let a = postcard::to_allocvec(&Seq(v.clone(), 9)).unwrap();
            let b = postcard::to_allocvec(&Bytes(v.clone(), 9)).unwrap();
            assert_eq!(a, b, "{len} bytes");
            let back: Bytes = postcard::from_bytes(&a).unwrap();
            assert_eq!(back, Bytes(v.clone(), 9));
            let back: Seq = postcard::from_bytes(&b).unwrap();
            assert_eq!(back, Seq(v, 9));
        }
    }

    #[test]
    fn the_calls_that_restart_are_told_from_their_arguments() {
        let m = mem();
        // glibc's sleep(): clock_nanosleep(CLOCK_REALTIME, 0, &ts, &ts).
        assert_eq!(call(&m, [0, 0, TS, TS]), Some(libc::SYS_clock_nanosleep));
        // A CPU clock (a negative int, upper half zero) and no rem.
        let cpu = (-6i32) as u32 as u64;
        assert_eq!(call(&m, [cpu, 0, TS, 0]), Some(libc::SYS_clock_nanosleep));
        // futex(word, FUTEX_WAIT_PRIVATE, 7, &timeout) with the word at 7.
        assert_eq!(call(&m, [WORD, 128, 7, TS]), Some(libc::SYS_futex));
        assert_eq!(
            call(&m, [WORD, 9 | 128 | 256, 7, TS]),
            Some(libc::SYS_futex)
        );
        // nanosleep(&req, &rem) and nanosleep(&req, NULL).
        assert_eq!(call(&m, [TS, TS, 0, 0]), Some(libc::SYS_nanosleep));
        assert_eq!(call(&m, [TS, 0, 0, 0]), Some(libc::SYS_nanosleep));
        // poll(fds, 1, 300) and poll(NULL, 0, 300).
        assert_eq!(call(&m, [FDS, 1, 300, 0]), Some(libc::SYS_poll));
        assert_eq!(call(&m, [0, 0, 300, 0]), Some(libc::SYS_poll));
        // poll(fds, 1, -1), the int as it is and widened with its sign.
        assert_eq!(call(&m, [FDS, 1, u32::MAX as u64, 0]), Some(libc::SYS_poll));
        assert_eq!(call(&m, [FDS, 1, u64::MAX, 0]), Some(libc::SYS_poll));
    }

    #[test]
    fn arguments_that_fit_no_call_give_none() {
        let m = mem();
        // A futex whose word no longer holds the value waited on, with no
        // other reading: the timeout pointer is not a request.
        assert_eq!(call(&m, [WORD, 128, 8, TS]), None);
        // A "clock id" whose upper half is set is a pointer, not an int.
        assert_eq!(call(&m, [0x7ffd_0000_0001, 0, TS, 0]), None);
        // Absolute sleeps never restart this way; flags 1 is not clock_nanosleep.
        assert_eq!(call(&m, [1, 1, TS, 0]), None);
        // A request that is not a timespec (nanoseconds out of range).
        let mut bad = mem();
        bad.0.insert(TS, timespec(1, 2_000_000_000));
        assert_eq!(call(&bad, [TS, 0, 0, 0]), None);
        // poll with a timeout of 0 never waits, so never restarts; a
        // "timeout" wider than an int is not poll's.
        assert_eq!(call(&m, [FDS, 1, 0, 0]), None);
        assert_eq!(call(&m, [FDS, 1, 1 << 40, 0]), None);
        // Unreadable memory.
        assert_eq!(call(&Mem(BTreeMap::new()), [0, 0, TS, 0]), None);
    }
}
