//! `pmig restore`: verify the image, prepare everything that can fail, then
//! create the process, let the restorer rebuild it, and finish it through
//! ptrace.
//!
//! Sequence (see docs/image-format.md, "Restore"):
//! 1. verify every checksum and decode every part (nothing exists yet);
//! 2. preflight: open files, check compatibility;
//! 3. build the restorer plan and lay out the restorer area;
//! 4. fork (clone3, with the original pid if free); the child waits until we
//!    have seized it, installs its fds, cwd and umask, and jumps into the
//!    restorer, which rebuilds memory, signals, timers and threads;
//! 5. each thread stops on an int3; we load the final registers, FPU state
//!    and signal masks, remove the restorer area, set limits, and detach.
//!
//! Any failure kills the half-built process (PTRACE_O_EXITKILL covers our own
//! death too), so no half-restored process is ever left behind.

use crate::error::{errno_err, Ctx, EngineError, Result};
use crate::image::ProcessImage;
use crate::ptrace::Frozen;
use crate::resources::{
    cgroups::Cgroups, clocks::Clocks, deaddirs::DeadCwd, files::Files, identity::Identity,
    jobctl::JobCtl, locks::Locks, lonesockets::LoneSockets, memory::Memory, memory::TASK_END,
    pipes::Pipes, prctl::Prctl, process::Process, sched::Sched, seccomp::Seccomp, session,
    session::Session, signals::Signals, socketpairs::SocketPairs, sysvshm::SysvShm,
    threads::Threads, threads::THREAD_CLONE_FLAGS, timers::Timers, xcomp::Xcomp, ChildSetup,
    Finish, PlanCx, Preflight, Resource, RestoreOptions, Update,
};
use crate::timing::mark;
use crate::{procfs, sys};
use libc::pid_t;
use nix::sys::ptrace;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use pmig_image::Image;
use pmig_restorer::{Area, Check, OpFailure, PlanBuilder, FAILURE_MAGIC};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

const PTRACE_EVENT_STOP: i32 = 128;
/// Child-side failures before the restorer runs are reported with op
/// indices from here.
const CHILD_STEP: u64 = 0xffff_0000;

#[derive(Debug)]
pub struct Restored {
    pub pid: pid_t,
    pub original_pid: pid_t,
    pub threads: usize,
    pub verify: Duration,
    pub total: Duration,
    /// Lazy restore: our copy of the process's userfaultfd, through which
    /// its missing pages must be served (see `lazy::LazyMemory`).
    pub uffd: Option<OwnedFd>,
    /// The fd number of the process's own reference to it.
    pub uffd_fd_in_process: Option<i32>,
    /// The threads' ids (old, new, in the image's order) where the restore
    /// rewrote them in the process's memory; empty where it did not. The
    /// pages installed later get the same rewrite
    /// ([`crate::lazy::LazyMemory::rewrite_owners`]).
    pub ids: Vec<(pid_t, pid_t)>,
    /// Every thread's id in the image and its id now (old, new), in the
    /// image's order, whatever the restore rewrote: a signal sent to a
    /// thread of the original follows it here (`signals::deliver_late`).
    pub tids: Vec<(pid_t, pid_t)>,
    /// Its session, process group and controlling terminal (None for images
    /// without a `session` part).
    pub session: Option<session::SessionReport>,
    /// CLOCK_MONOTONIC once every thread was let go (the process runs from
    /// the first; 0 until then). The host's clock: a time namespace made
    /// for the process applies to it, not to the restoring process.
    pub resumed_ns: u64,
    /// The System V shared memory segments made for it
    /// (`sysvshm::Made::list`): a caller that kills the process after the
    /// restore removes them (`sysvshm::remove_made`).
    pub sysv_made: Vec<crate::resources::sysvshm::MadeSegment>,
}

pub fn restore(dir: &Path, opts: &RestoreOptions) -> Result<Restored> {
    restore_held(dir, opts, None)
}

/// What a held restore asks before the process may run: called once the
/// process is complete but still stopped under ptrace. `Ok` lets it run (a
/// lazy restore's userfaultfd is first closed inside it: the caller has
/// provided every page through its own copy); an error kills it.
pub type Release<'a> = &'a mut dyn FnMut(&Restored) -> Result<()>;

/// [`restore`], holding the finished process stopped until `release` (if
/// any) says it may run. A total copy uses this to fill a lazily restored
/// process's memory through its userfaultfd before it runs a single
/// instruction.
pub fn restore_held(
    dir: &Path,
    opts: &RestoreOptions,
    release: Option<Release>,
) -> Result<Restored> {
    restore_held_with(dir, opts, release, Verify::Check)
}

/// Whether a restore checks every byte of the image before it creates
/// anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    Check,
    /// The caller has just verified this very directory, which only it
    /// writes (a daemon's staging directory): the manifest is still parsed
    /// and checked, the checksums of the parts are not computed again.
    AlreadyChecked,
}

/// What a held skeleton waits for (see [`crate::skeleton`]): called once
/// it is complete but still stopped under ptrace. Returns the directory of
/// the image of the stop to bring it up to, and whether that image must be
/// verified; `None` kills it (nothing ran).
pub type Bring<'a> = &'a mut dyn FnMut(&Restored) -> Result<Option<(std::path::PathBuf, Verify)>>;

/// How a restored process is let go.
enum Hold<'a> {
    /// At once.
    Run,
    /// Once `release` says so (see [`Release`]).
    Release(Release<'a>),
    /// Once it is brought up to the image `bring` names (see [`Bring`]).
    Skeleton(Bring<'a>),
}

/// [`restore_held`], verifying the image as `verify` says.
pub fn restore_held_with(
    dir: &Path,
    opts: &RestoreOptions,
    release: Option<Release>,
    verify: Verify,
) -> Result<Restored> {
    let hold = match release {
        Some(r) => Hold::Release(r),
        None => Hold::Run,
    };
    restore_dir(dir, opts, hold, verify)
}

/// Restores the image of `dir` as a skeleton (`opts.skeleton` must be
/// set): once it is complete, `bring` names the image of the stop, and the
/// process runs once brought up to it ([`crate::skeleton::bring_up`]). A
/// skeleton that cannot be brought up is killed: the error says why
/// ([`EngineError::Stale`] when the process changed in a way it cannot
/// follow).
pub fn restore_skeleton(
    dir: &Path,
    opts: &RestoreOptions,
    verify: Verify,
    bring: Bring,
) -> Result<Restored> {
    if !opts.skeleton {
        return Err(EngineError::Other(
            "internal error: a skeleton restore without the skeleton option".into(),
        ));
    }
    restore_dir(dir, opts, Hold::Skeleton(bring), verify)
}

/// Refuses, before anything is created, a Python process that holds a
/// unix socket pair when its pid is taken here. Such a pair is how
/// asyncio's event loop wakes itself, and asyncio checks by the pid that it
/// still runs in the process that started its loop: under a new pid every
/// `await` fails ("no running event loop") and the program ends. Where the
/// pid is free (another machine, a node with a pid namespace of its own)
/// it moves; so does any other program's pair, under new ids as ever.
fn refuse_event_loop_under_new_pid(pi: &ProcessImage) -> Result<()> {
    let pid = pi.process.pid;
    let python = |path: &str| {
        let base = path.rsplit('/').next().unwrap_or(path);
        base.starts_with("python") || base.starts_with("libpython")
    };
    let is_python =
        python(&pi.memory.mm.exe.path) || pi.memory.vmas.iter().any(|v| python(&v.name));
    if pi.socketpairs.is_some() && is_python && Path::new(&format!("/proc/{pid}")).exists() {
        return Err(EngineError::Incompatible(format!(
            "python process {pid} holds a unix socket pair (asyncio's event loop wakes itself through one) and its pid is taken here: under another pid asyncio takes itself for a forked child, and every await would fail"
        )));
    }
    Ok(())
}

fn restore_dir(dir: &Path, opts: &RestoreOptions, hold: Hold, verify: Verify) -> Result<Restored> {
    let t0 = Instant::now();
    mark("restore: start");
    let img = Image::open(dir)?;
    // The pages are verified after the parts are decoded. If the threads
    // cannot keep their ids (some are taken), the held mutexes to rewrite
    // are looked for meanwhile (see `OwnerScan`): then the new ids need no
    // second read of every page.
    let (mut pi, found) = match verify {
        Verify::Check => {
            img.verify_except(pmig_image::PAGES_PART)?;
            let pi = ProcessImage::read(&img)?;
            let taken = |t: pid_t| Path::new(&format!("/proc/{t}")).exists();
            let found = if pi.threads.threads.iter().any(|t| taken(t.tid)) {
                let mut scan = crate::resources::tcb::OwnerScan::new(&pi);
                img.verify_visiting(pmig_image::PAGES_PART, &mut |at, b| scan.feed(at, b))?;
                Some(scan.addresses(&pi))
            } else {
                img.verify_visiting(pmig_image::PAGES_PART, &mut |_, _| {})?;
                None
            };
            (pi, found)
        }
        Verify::AlreadyChecked => (ProcessImage::read(&img)?, None),
    };
    let verify = t0.elapsed();
    mark("restore: image verified, parts decoded");
    refuse_event_loop_under_new_pid(&pi)?;
    if opts.skeleton {
        for (fd, path) in
            crate::resources::files::stand_ins_for_gone(&mut pi.files, &mut pi.file_ids)
        {
            tracing::info!(
                "skeleton: fd {fd}: {path} is gone since the capture; /dev/null stands in until the stop"
            );
        }
    }
    let mut r = restore_image_held(&pi, &img.pages_path(), opts, hold, found.as_deref())?;
    r.verify = verify;
    r.total = t0.elapsed();
    Ok(r)
}

/// Raises this restorer's open-file limit so that it may open fds up to
/// `need` (exclusive), the helpers' numbers above the process's highest
/// fd: the hard limit too if `need` is above it (as far as `fs.nr_open`; a
/// program that keeps its files at the top of its limit, as valgrind does,
/// leaves no room under it), and the soft one up to the hard one in any
/// case. Raising the hard limit needs `CAP_SYS_RESOURCE`; without it the
/// helpers go into a gap between the process's fds instead
/// ([`Preflight::place_helpers`]). Returns the soft limit after.
fn raise_nofile(need: u64) -> u64 {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit on our own process with a valid struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } != 0 {
        return u64::MAX;
    }
    if l.rlim_max < need {
        let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
            .unwrap_or(1 << 20);
        let want = libc::rlimit {
            rlim_cur: need.min(nr_open),
            rlim_max: need.min(nr_open),
        };
        // SAFETY: setrlimit on our own process with a valid struct; a
        // refusal (no CAP_SYS_RESOURCE) leaves the limit as it was.
        if want.rlim_max > l.rlim_max && unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0
        {
            return want.rlim_cur;
        }
    }
    let all = libc::rlimit {
        rlim_cur: l.rlim_max,
        rlim_max: l.rlim_max,
    };
    // SAFETY: as above.
    if l.rlim_cur < l.rlim_max && unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &all) } == 0 {
        return l.rlim_max;
    }
    l.rlim_cur
}

fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two fds into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(errno_err("create a pipe"));
    }
    // SAFETY: both fds are fresh and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A free range of `len` bytes in both the image's layout and ours.
fn choose_base(pi: &ProcessImage, len: u64) -> Result<u64> {
    let mut used: Vec<(u64, u64)> = pi.memory.vmas.iter().map(|v| (v.start, v.end)).collect();
    if let Some((a, l)) = pi.memory.vdso {
        used.push((a, a + l));
    }
    for m in procfs::maps(std::process::id() as pid_t)? {
        used.push((m.start, m.end));
    }
    // Keep clear of the target's stack growth area.
    for v in &pi.memory.vmas {
        if v.growsdown {
            used.push((v.start.saturating_sub(64 << 20), v.start));
        }
    }
    used.retain(|&(a, _)| a < TASK_END);
    used.sort();
    let margin = 16u64 << 20;
    let mut gaps = Vec::new();
    let mut prev = 1u64 << 32;
    for (a, b) in used
        .iter()
        .copied()
        .chain(std::iter::once((TASK_END, TASK_END)))
    {
        if a > prev && a - prev >= len + 2 * margin {
            gaps.push((prev, a));
        }
        prev = prev.max(b);
    }
    let (a, b) = gaps.last().copied().ok_or_else(|| {
        EngineError::Restore("no room in the address space for the restorer".into())
    })?;
    Ok(((a + (b - a - len) / 2) & !0xfffff).max(a + margin))
}

/// Choose a base for the restorer area and hold the range at once with an
/// inaccessible reservation, so that no other thread of ours (a caller that
/// restores several processes at a time, an allocator) can take it between
/// the choice and the fork. A range taken between the maps read and the
/// reservation is chosen again.
fn reserve_base(pi: &ProcessImage, len: u64) -> Result<u64> {
    for _ in 0..8 {
        let base = choose_base(pi, len)?;
        // SAFETY: an inaccessible, unbacked mapping at an address chosen to
        // be free; MAP_FIXED_NOREPLACE refuses to clobber anything there.
        let p = unsafe {
            libc::mmap(
                base as *mut _,
                len as usize,
                libc::PROT_NONE,
                libc::MAP_PRIVATE
                    | libc::MAP_ANONYMOUS
                    | libc::MAP_NORESERVE
                    | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED && p as u64 == base {
            return Ok(base);
        }
        let err = std::io::Error::last_os_error();
        if p != libc::MAP_FAILED {
            // An old kernel that treats the flag as a hint put it elsewhere.
            // SAFETY: unmapping the mapping just made, which nothing uses.
            unsafe { libc::munmap(p, len as usize) };
        } else if err.raw_os_error() != Some(libc::EEXIST) {
            return Err(EngineError::Sys {
                what: format!("reserve the restorer area at {base:#x}"),
                source: err,
            });
        }
    }
    Err(EngineError::Restore(
        "the restorer area was taken by another mapping eight times over".into(),
    ))
}

/// Map and fill the restorer area in our own address space, over the range
/// `reserve_base` holds for it (`reserved` bytes); the child inherits it
/// through fork. On failure the whole reservation is gone.
fn map_area(area: &Area, reserved: u64) -> Result<()> {
    if area.len > reserved {
        unmap_range(area.base, reserved);
        return Err(EngineError::Restore(format!(
            "the restorer area ({} bytes) outgrew its reservation ({reserved} bytes)",
            area.len
        )));
    }
    // SAFETY: the range [base, base + len) is our own PROT_NONE reservation
    // made by reserve_base, which nothing else uses; MAP_FIXED replaces it.
    let p = unsafe {
        libc::mmap(
            area.base as *mut _,
            area.len as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED || p as u64 != area.base {
        let e = errno_err(format!("map the restorer area at {:#x}", area.base));
        unmap_range(area.base, reserved);
        return Err(e);
    }
    if reserved > area.len {
        unmap_range(area.base + area.len, reserved - area.len);
    }
    // SAFETY: the area is ours, `len` bytes long, and bytes.len() <= len.
    let protected = unsafe {
        std::ptr::copy_nonoverlapping(area.bytes.as_ptr(), p as *mut u8, area.bytes.len());
        libc::mprotect(p, area.code_len as usize, libc::PROT_READ | libc::PROT_EXEC)
    };
    if protected < 0 {
        let e = errno_err("protect the restorer code");
        unmap_area(area);
        return Err(e);
    }
    Ok(())
}

fn unmap_range(base: u64, len: u64) {
    // SAFETY: unmapping a range of our reservation or area; nothing refers
    // to it.
    unsafe { libc::munmap(base as *mut _, len as usize) };
}

fn unmap_area(area: &Area) {
    unmap_range(area.base, area.len);
}

fn child_fail(status_fd: i32, step: u64) -> ! {
    // SAFETY: only async-signal-safe calls; the record is on our stack.
    unsafe {
        let err = *libc::__errno_location();
        let f = [FAILURE_MAGIC, CHILD_STEP + step, (-(err as i64)) as u64, 0];
        libc::write(status_fd, f.as_ptr() as *const _, 32);
        libc::_exit(121);
    }
}

/// The new process between fork and the restorer. Only raw system calls:
/// the parent may be multi-threaded, so nothing here may allocate or lock.
fn child_main(setup: &ChildSetup, go_fd: i32, status_fd: i32, kept: &[i32], area: &Area) -> ! {
    // SAFETY: plain system calls on integers and on memory prepared before
    // fork; the final asm jumps into the restorer area mapped in map_area,
    // with a stack inside that area, and never returns.
    unsafe {
        let mut b = 0u8;
        if libc::read(go_fd, &mut b as *mut u8 as *mut _, 1) != 1 {
            child_fail(status_fd, 0);
        }
        for &(src, dst, cloexec) in &setup.installs {
            if libc::dup3(src, dst, if cloexec { libc::O_CLOEXEC } else { 0 }) < 0 {
                child_fail(status_fd, 1);
            }
        }
        // Close every fd that is neither a target fd nor a helper (`kept`,
        // sorted), each run between two of them with one close_range.
        let mut next = 0u32;
        for &k in kept {
            if k as u32 > next {
                libc::syscall(libc::SYS_close_range, next, k as u32 - 1, 0);
            }
            next = next.max(k as u32 + 1);
        }
        libc::syscall(libc::SYS_close_range, next, u32::MAX, 0);
        if let Some(m) = setup.umask {
            libc::umask(m);
        }
        if let Some(c) = setup.cwd {
            if libc::fchdir(c) < 0 {
                child_fail(status_fd, 2);
            }
        }
        if let Some(p) = setup.personality {
            if libc::personality(p as libc::c_ulong) < 0 {
                child_fail(status_fd, 3);
            }
        }
        std::arch::asm!(
            "mov rsp, {sp}",
            "xor ebp, ebp",
            "jmp {entry}",
            sp = in(reg) area.main_stack_top,
            entry = in(reg) area.entry,
            in("rdi") area.plan,
            options(noreturn)
        );
    }
}

fn describe_failure(f: &OpFailure, area: &Area) -> EngineError {
    let err = std::io::Error::from_raw_os_error((-f.result).clamp(0, 4095) as i32);
    if f.op_index >= CHILD_STEP {
        let what = match f.op_index - CHILD_STEP {
            0 => "wait for the tracer",
            1 => "install file descriptors",
            2 => "change to the working directory",
            _ => "set the personality",
        };
        return EngineError::RestoreStep {
            step: 0,
            what: what.into(),
            err,
        };
    }
    let what = area
        .descriptions
        .get(f.op_index as usize)
        .cloned()
        .unwrap_or_else(|| "restorer entry".into());
    EngineError::RestoreStep {
        step: f.op_index + 1,
        what,
        err,
    }
}

fn read_failure(status: &OwnedFd) -> Option<OpFailure> {
    let mut buf = [0u8; OpFailure::SIZE];
    // SAFETY: non-blocking read into our buffer.
    unsafe {
        let fl = libc::fcntl(status.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(status.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
        let n = libc::read(status.as_raw_fd(), buf.as_mut_ptr() as *mut _, buf.len());
        if n != buf.len() as isize {
            return None;
        }
    }
    OpFailure::parse(&buf)
}

/// Build everything that can be built without a process.
struct Prepared {
    pf: Preflight,
    area: Area,
    status_r: OwnedFd,
    status_w: i32,
    go_r: i32,
    go_w: OwnedFd,
    /// Bytes reserved at `area.base` by `reserve_base`.
    reserved: u64,
}

fn prepare(pi: &ProcessImage, pages: &Path, opts: &RestoreOptions) -> Result<Prepared> {
    let mut pf = Preflight::new(opts.clone(), pi.files.max_fd());
    // The helpers: at most one per fd and per mapping, and a few of the
    // restore's own (the page data, two pipes, ...).
    let room = (pi.files.fds.len() + pi.memory.vmas.len() + 64) as i32;
    let limit = raise_nofile(pf.fd_base as u64 + room as u64);
    let targets: Vec<i32> = pi.files.fds.iter().map(|f| f.fd).collect();
    pf.place_helpers(&targets, room, limit.min(i32::MAX as u64) as i32);
    pf.thread_tids = pi.threads.threads.iter().map(|t| t.tid).collect();
    if let Some(f) = &pi.memory_flags {
        pf.noreserve = f.noreserve.iter().copied().collect();
    }
    // First: a CPU that lacks what the process may use refuses the image
    // before anything is made for it.
    crate::resources::cpu::check(
        pi.cpu.as_ref(),
        crate::resources::cpu::CpuState::here(),
        &pi.threads.xstates(),
        opts.cpu_check,
    )?;
    Xcomp::preflight(&pi.xcomp, &mut pf)?;
    Process::preflight(&pi.process, &mut pf)?;
    mark("restore: preflight process");
    if let Some(c) = &pi.clocks {
        Clocks::preflight(c, &mut pf)?;
    }
    Identity::preflight(&pi.identity, &mut pf)?;
    mark("restore: preflight identity");
    // Before Files, which installs the ends.
    if let Some(p) = &pi.pipes {
        Pipes::preflight(p, &mut pf)?;
    }
    if let Some(p) = &pi.socketpairs {
        SocketPairs::preflight(p, &mut pf)?;
    }
    if let Some(l) = &pi.lonesockets {
        LoneSockets::preflight(l, &mut pf)?;
    }
    if pi.ghost_maps.is_some() && pi.ghosts.is_none() {
        return Err(EngineError::Incompatible(
            "the image has a ghostmaps part without the ghosts part it names".into(),
        ));
    }
    if let Some(g) = &pi.ghosts {
        crate::resources::ghosts::preflight_with(g, pi.ghost_maps.as_ref(), &mut pf)?;
    }
    pf.file_ids = pi.file_ids.clone();
    // Before Files, which enters the working directory by its path unless
    // this made it again.
    if let Some(d) = &pi.dead_cwd {
        DeadCwd::preflight(d, &mut pf)?;
    }
    Files::preflight(&pi.files, &mut pf)?;
    mark("restore: preflight files");
    // After Files: decides which of the fds it prepared becomes the ctty.
    if let Some(s) = &pi.session {
        Session::preflight(s, &mut pf)?;
    }
    Signals::preflight(&pi.signals, &mut pf)?;
    Timers::preflight(&pi.timers, &mut pf)?;
    Threads::preflight(&pi.threads, &mut pf)?;
    mark("restore: preflight session..threads");
    pf.mapped_ids = pi.mapped_ids.clone();
    if let Some(x) = &pi.sysv {
        // A skeleton is made while the process still runs at the source:
        // on a node that shares its IPC namespace it would write the
        // segment's old pages over the live ones.
        if opts.skeleton {
            return Err(EngineError::Incompatible(
                "System V shared memory is attached at the stop only, not in a skeleton".into(),
            ));
        }
        SysvShm::preflight(x, &mut pf)?;
        pf.sysv = x.clone();
        mark("restore: preflight sysvshm");
    }
    Memory::preflight(&pi.memory, &mut pf)?;
    mark("restore: preflight memory");
    if let Some(s) = &pi.seccomp {
        Seccomp::preflight(s, &mut pf)?;
    }
    if let Some(c) = &pi.cgroups {
        Cgroups::preflight(c, &mut pf)?;
    }
    let pages_fd = pf.open_keep(&pages.to_string_lossy(), libc::O_RDONLY)?;
    let (status_r, status_w) = pipe()?;
    let status_w = pf.keep(status_w)?;
    let (go_r, go_w) = pipe()?;
    let go_r = pf.keep(go_r)?;

    let tids: Vec<u64> = pi
        .threads
        .threads
        .iter()
        .enumerate()
        // Ask for the original thread ids only where no live task holds them.
        .map(|(i, t)| {
            if i == 0 || Path::new(&format!("/proc/{}", t.tid)).exists() {
                0
            } else {
                t.tid as u64
            }
        })
        .collect();
    let mut b = PlanBuilder::new(tids, THREAD_CLONE_FLAGS);
    // Block every signal while the restorer runs (threads inherit it).
    let all = b.data_of(&u64::MAX);
    b.syscall(
        0,
        libc::SYS_rt_sigprocmask,
        &[
            libc::SIG_SETMASK.into(),
            all.into(),
            0u64.into(),
            8u64.into(),
        ],
        Check::NonNeg,
        "block signals",
    );
    {
        let mut cx = PlanCx {
            b: &mut b,
            pf: &pf,
            pages_fd,
        };
        Memory::plan(&pi.memory, &mut cx)?;
        Signals::plan(&pi.signals, &mut cx)?;
        // Before the threads, which inherit the filters. Every call after
        // them passes no filter: they are suspended while traced.
        if let Some(s) = &pi.seccomp {
            Seccomp::plan(s, &mut cx)?;
        }
        // Before the threads: the permission is asked once, before they
        // exist, and each one's first use of AMX goes before its own ops.
        Xcomp::plan(&pi.xcomp, &mut cx)?;
        Threads::plan(&pi.threads, &mut cx)?;
        // The main thread's own filters, which the others must not inherit.
        if let Some(s) = &pi.seccomp {
            Seccomp::plan_after_threads(s, &mut cx);
        }
        // After the threads: a POSIX timer may signal one of them.
        Timers::plan(&pi.timers, &mut cx)?;
        // After the threads (some are per thread), before Identity drops
        // privileges.
        if let Some(p) = &pi.prctl {
            Prctl::plan(p, &mut cx)?;
        }
        // After Memory's ops, which it would refuse.
        if let Some(m) = &pi.mdwe {
            m.plan(&mut cx)?;
        }
        Files::plan(&pi.files, &mut cx)?;
        // Before Identity drops privileges; signals are still blocked.
        if let Some(s) = &pi.session {
            Session::plan(s, &mut cx)?;
        }
        Identity::plan(&pi.identity, &mut cx)?;
        Process::plan(&pi.process, &mut cx)?;
    }
    // Last: drop every helper fd (image, mapped files, pipes).
    let last = if pf.fd_end == i32::MAX {
        u32::MAX as u64
    } else {
        pf.fd_end as u64 - 1
    };
    b.syscall(
        0,
        libc::SYS_close_range,
        &[(pf.fd_base as u64).into(), last.into(), 0u64.into()],
        Check::None,
        "close the restorer's files",
    );
    mark("restore: planned");
    let reserved = b.area_len();
    let base = reserve_base(pi, reserved)?;
    mark("restore: base chosen");
    let area = b.finish(base, status_w);
    pf.helpers.sort();
    Ok(Prepared {
        pf,
        area,
        status_r,
        status_w,
        go_r,
        go_w,
        reserved,
    })
}

/// Restore from decoded parts and a page-data file (already verified).
pub fn restore_image(pi: &ProcessImage, pages: &Path, opts: &RestoreOptions) -> Result<Restored> {
    restore_image_held(pi, pages, opts, Hold::Run, None)
}

/// `found`: where the held mutexes of the image's threads are (an
/// `OwnerScan` of its pages), if the pages were scanned.
fn restore_image_held(
    pi: &ProcessImage,
    pages: &Path,
    opts: &RestoreOptions,
    hold: Hold,
    found: Option<&[u64]>,
) -> Result<Restored> {
    let mut p = prepare(pi, pages, opts)?;
    mark("restore: prepared");
    // The fds the new process keeps until the restorer runs: its own and
    // the helpers (allocated here: the child may not allocate).
    let mut kept: Vec<i32> = p.pf.child.installs.iter().map(|i| i.1).collect();
    kept.extend_from_slice(&p.pf.helpers);
    kept.sort_unstable();
    kept.dedup();
    let original_pid = pi.process.pid;
    map_area(&p.area, p.reserved)?;
    let free = !Path::new(&format!("/proc/{original_pid}")).exists();
    let mut forked = Err(std::io::Error::from_raw_os_error(libc::EEXIST));
    if free {
        // As for threads: a pid can stay allocated a moment after its task is gone.
        for _ in 0..200 {
            forked = sys::fork_with_pid(Some(original_pid));
            match &forked {
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                _ => break,
            }
        }
    }
    if forked.is_err() {
        forked = sys::fork_with_pid(None);
    }
    let pid = match forked {
        Ok(0) => child_main(&p.pf.child, p.go_r, p.status_w, &kept, &p.area),
        Ok(pid) => pid,
        Err(e) => {
            unmap_area(&p.area);
            return Err(EngineError::Sys {
                what: "create the process".into(),
                source: e,
            });
        }
    };
    mark("restore: forked");
    // Into its cgroups before it runs (it waits for the go below), so that
    // the memory it maps is charged there.
    crate::resources::cgroups::join(pid, &p.pf.cgroup_procs);
    unmap_area(&p.area);
    // Our copies of the child's files are no longer needed.
    p.pf.close_all();
    let result = (|| -> Result<Restored> {
        // The seccomp filters the restorer installs (`seccomp`, whose
        // preflight found that they can be) are suspended until the
        // process is let go; its threads inherit that.
        let mut options = ptrace::Options::PTRACE_O_EXITKILL
            | ptrace::Options::PTRACE_O_TRACECLONE
            | ptrace::Options::PTRACE_O_TRACESYSGOOD;
        if pi.seccomp.is_some() {
            options |= crate::ptrace::suspend_seccomp();
        }
        ptrace::seize(Pid::from_raw(pid), options)
            .ctx(|| format!("trace the new process {pid}"))?;
        if rseq_may_be_inherited() {
            unregister_inherited_rseq(pid, p.area.syscall_insn())?;
        }
        mark("restore: started");
        // SAFETY: writing one byte from a local to our pipe.
        if unsafe { libc::write(p.go_w.as_raw_fd(), b"g".as_ptr() as *const _, 1) } != 1 {
            return Err(errno_err("start the new process"));
        }
        let tids = wait_for_traps(pid, pi.threads.threads.len(), &p)?;
        mark("restore: restorer done");
        let mut frozen = Frozen::adopt(pid, &tids);
        // Dropped before `frozen` (declared after it): a failure from here
        // on kills the process while its threads are still stopped, where
        // `frozen`'s drop would let them run their half-set state until
        // `kill_and_reap` below.
        let mut kill_unless_done = KillUnlessDone { pid, armed: true };
        // The finishing steps inject calls: on one CPU with them.
        frozen.colocate();
        // Injected calls run in the restorer's code (still mapped) instead
        // of one found by reading the process's mappings.
        if let Some(g) = p.area.syscall_insn() {
            frozen.use_gadget(g);
        }
        let ids;
        let tid_pairs;
        let go_done;
        {
            let mut fin = Finish {
                pid,
                frozen: &mut frozen,
                area: (p.area.base, p.area.len),
            };
            // Before Memory, which removes the restorer area it writes in.
            Signals::finish(&pi.signals, &mut fin)?;
            mark("restore: finish signals");
            // Its file locks, with a `struct flock` in the area's scratch.
            // Not a skeleton's: the original holds them until the stop,
            // and the bring-up takes those of the stop.
            if let (Some(l), false) = (&pi.locks, opts.skeleton) {
                Locks::finish(l, &mut fin)?;
                mark("restore: finish locks");
            }
            // A skeleton keeps the area until its bring-up, whose injected
            // calls use its scratch.
            if !opts.skeleton {
                Memory::finish(&pi.memory, &mut fin)?;
            }
            mark("restore: finish memory");
            if let Some(x) = &pi.sysv {
                SysvShm::finish(x, &mut fin)?;
            }
            Threads::finish(&pi.threads, &mut fin)?;
            let lazy = p.pf.uffd_fd.is_some();
            ids = crate::resources::tcb::rewrite_tids(pi, fin.frozen, lazy, found)?;
            tid_pairs = crate::resources::threads::tid_pairs(pi, fin.frozen);
            // Held until its pages are in, it is looked at again then.
            let held = matches!(hold, Hold::Release(_));
            go_done = crate::resources::gort::rewrite_ids_or_warn(pi, fin.frozen, lazy, !held);
            mark("restore: finish threads");
            Identity::finish(&pi.identity, &mut fin)?;
            mark("restore: finish identity");
            Files::finish(&pi.files, &mut fin)?;
            mark("restore: finish files");
            Timers::finish(&pi.timers, &mut fin)?;
            mark("restore: finish timers");
            Process::finish(&pi.process, &mut fin)?;
            mark("restore: finish process");
            if let Some(s) = &pi.session {
                Session::finish(s, &mut fin)?;
            }
            if let Some(x) = &pi.sched {
                Sched::finish(x, &mut fin)?;
            }
            if let Some(j) = &pi.jobctl {
                JobCtl::finish(j, &mut fin)?;
            }
        }
        let session = match &pi.session {
            Some(s) => {
                let r = session::report(s, pid, &p.pf)?;
                if let Some(n) = &r.note {
                    tracing::info!("process {pid}: {n}");
                }
                Some(r)
            }
            None => None,
        };
        if let Some(pf) = &opts.pidfile {
            std::fs::write(pf, format!("{pid}\n"))
                .ctx(|| format!("write pid file {}", pf.display()))?;
        }
        let uffd = match p.pf.uffd_fd {
            Some(fd) => Some(crate::dirty::take_fd(pid, fd)?),
            None => None,
        };
        mark("restore: finished");
        let mut r = Restored {
            uffd,
            uffd_fd_in_process: p.pf.uffd_fd,
            ids,
            tids: tid_pairs,
            session,
            pid,
            original_pid,
            threads: tids.len(),
            verify: Duration::ZERO,
            total: Duration::ZERO,
            resumed_ns: 0,
            sysv_made: p.pf.sysv_made.list(),
        };
        if let Hold::Skeleton(bring) = hold {
            // Not kept on one CPU while it waits: this program would then
            // wait for that CPU when the image of the stop comes.
            frozen.release_cpu();
            let brought = bring(&r)?;
            let Some((dir, verify)) = brought else {
                return Err(EngineError::Other(
                    "the skeleton was not brought up (no image of the stop): killed".into(),
                ));
            };
            mark("skeleton: image of the stop named");
            let img = match verify {
                Verify::Check => Image::open_verified(&dir)?,
                Verify::AlreadyChecked => Image::open(&dir)?,
            };
            let fin = ProcessImage::read(&img)?;
            let pages = std::fs::File::open(img.pages_path())
                .ctx(|| format!("open {}", img.pages_path().display()))?;
            mark("skeleton: image of the stop decoded");
            // On one CPU with the process again for the bring-up's ptrace
            // calls; not before: reading and checking a large image goes
            // faster on every CPU.
            frozen.colocate();
            // Its signal actions are the skeleton's (one of SIGTRAP that
            // changed since makes it stale): calls injected one by one can
            // be single-stepped if SIGTRAP is not ignored.
            frozen.know_ignored(pi.signals.ignored());
            let area = (p.area.base, p.area.len);
            // Every mapping flag is followed with the mappings (the pattern
            // names each field, so a new one cannot be left out unseen).
            let noreserve = |f: &Option<crate::resources::memory::MemoryFlags>| {
                f.as_ref()
                    .map(|crate::resources::memory::MemoryFlags { noreserve }| noreserve.clone())
                    .unwrap_or_default()
            };
            let (pre_nr, fin_nr) = (noreserve(&pi.memory_flags), noreserve(&fin.memory_flags));
            let mut cx = Update {
                pid,
                frozen: &mut frozen,
                area,
                pages: &pages,
                uffd: r.uffd.as_ref(),
                process_uffd: r.uffd_fd_in_process,
                noreserve: (&pre_nr, &fin_nr),
                threads: Default::default(),
                made_ghosts: Vec::new(),
            };
            let ids = crate::skeleton::bring_up(pi, &fin, &mut cx)?;
            mark("skeleton: brought up");
            Memory::finish(&fin.memory, &mut cx.finish())?;
            mark("skeleton: restorer area removed");
            r.ids = ids;
            r.tids = crate::resources::threads::tid_pairs(&fin, &frozen);
        } else if let Hold::Release(release) = hold {
            release(&r)?;
            mark("restore: released");
            if !go_done {
                crate::resources::gort::rewrite_ids_or_warn(pi, &frozen, false, true);
            }
            if let Some(fd) = r.uffd_fd_in_process {
                // Every page was provided through the caller's copy: the
                // process's own reference is no longer needed.
                let ret = frozen.inject(0, libc::SYS_close, &[fd as u64])?;
                if ret < 0 {
                    return Err(EngineError::Sys {
                        what: format!("close the userfaultfd (fd {fd}) inside the process"),
                        source: std::io::Error::from_raw_os_error(-ret as i32),
                    });
                }
            }
        }
        kill_unless_done.armed = false;
        frozen.detach()?;
        mark("restore: detached");
        Ok(Restored {
            resumed_ns: crate::timing::mono_ns(),
            ..r
        })
    })();
    if result.is_ok() {
        // The segments made for it are the process's now.
        p.pf.sysv_made.keep();
    } else {
        kill_and_reap(pid);
        // A pid file names a process that never ran and is gone.
        if let Some(pf) = &opts.pidfile {
            if std::fs::read_to_string(pf).is_ok_and(|t| t.trim() == pid.to_string()) {
                let _ = std::fs::remove_file(pf);
            }
        }
    }
    result
}

/// Sends SIGKILL to the half-built process `pid` when dropped armed (see
/// its use in `restore_image_held`).
struct KillUnlessDone {
    pid: pid_t,
    armed: bool,
}

impl Drop for KillUnlessDone {
    fn drop(&mut self) {
        if self.armed {
            // SAFETY: killing the half-built process we created.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
        }
    }
}

/// Kills the half-built process `pid` and reaps it, its other threads first:
/// a traced group leader is reported only once every other traced thread is
/// reaped, so a blocking wait for the leader alone could wait forever.
fn kill_and_reap(pid: pid_t) {
    // SAFETY: killing the half-built process we created.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let flags = Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG);
    // Bounded: about 10 s.
    for _ in 0..10_000 {
        if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) {
            for e in rd.flatten() {
                if let Some(t) = e.file_name().to_str().and_then(|t| t.parse::<pid_t>().ok()) {
                    if t != pid {
                        let _ = waitpid(Pid::from_raw(t), flags);
                    }
                }
            }
        }
        match waitpid(Pid::from_raw(pid), flags) {
            Ok(WaitStatus::Exited(..)) | Ok(WaitStatus::Signaled(..)) | Err(_) => return,
            Ok(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    tracing::warn!("the half-built process {pid} was not reaped 10 s after SIGKILL");
}

/// Whether the forking thread may have an rseq registration the new process
/// inherits: false only when glibc says it registered none (`__rseq_size`
/// 0, as with `GLIBC_TUNABLES=glibc.pthread.rseq=0`, which a daemon sets
/// for its restores; Rust's runtime registers none of its own). Then the
/// restore skips stopping the new process to unregister it.
fn rseq_may_be_inherited() -> bool {
    // SAFETY: dlsym with a NUL-terminated name; a non-null result is glibc's
    // `const unsigned int __rseq_size`, set once at start-up.
    unsafe {
        let p = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_size".as_ptr());
        p.is_null() || std::ptr::read_volatile(p as *const libc::c_uint) != 0
    }
}

/// The new process inherited our rseq registration, whose area the restorer
/// is about to unmap: the kernel would then kill it with SIGSEGV on its next
/// return to user space. Unregister it from inside the (still waiting) child.
fn unregister_inherited_rseq(pid: pid_t, gadget: Option<u64>) -> Result<()> {
    ptrace::interrupt(Pid::from_raw(pid)).ctx(|| format!("interrupt the new process {pid}"))?;
    loop {
        match waitpid(Pid::from_raw(pid), Some(WaitPidFlag::__WALL))
            .ctx(|| format!("wait for the new process {pid}"))?
        {
            WaitStatus::PtraceEvent(_, _, ev) if ev == PTRACE_EVENT_STOP => break,
            WaitStatus::Exited(..) | WaitStatus::Signaled(..) => {
                return Err(EngineError::Restore(
                    "the new process died before it was started".into(),
                ))
            }
            WaitStatus::Stopped(t, sig) => {
                ptrace::cont(t, Some(sig)).ctx(|| format!("resume {pid}"))?
            }
            _ => {}
        }
    }
    let cfg = sys::rseq_config(pid)?;
    if cfg.ptr != 0 {
        let mut f = Frozen::adopt(pid, &[pid]);
        if let Some(g) = gadget {
            f.use_gadget(g);
        }
        let r = f.inject(
            0,
            libc::SYS_rseq,
            &[
                cfg.ptr,
                cfg.size as u64,
                1, /* RSEQ_FLAG_UNREGISTER */
                cfg.signature as u64,
            ],
        );
        let parked = f.forget();
        let r = r?;
        parked?;
        if r < 0 {
            return Err(EngineError::Restore(format!(
                "unregister the inherited rseq area: errno {}",
                -r
            )));
        }
        tracing::debug!(
            "unregistered inherited rseq {cfg:?}: {r}; now {:?}",
            sys::rseq_config(pid)
        );
    }
    ptrace::cont(Pid::from_raw(pid), None).ctx(|| format!("resume the new process {pid}"))?;
    Ok(())
}

/// The next state change of thread `t` of the new process `pid`, or `None`
/// if another of its threads died meanwhile: then the process is dying, and
/// a blocking wait for `t` could wait forever (a traced thread that has
/// exited holds its group leader's report back until it is reaped).
/// Waits for SIGCHLD between tries (see below), the other threads checked
/// after every quiet 10 ms, at most 60 s.
fn wait_thread(pid: pid_t, t: Pid) -> Result<Option<WaitStatus>> {
    // Each stop of a traced thread sends us SIGCHLD: with it blocked in this
    // thread, sigtimedwait wakes us as soon as a stop may be there (polling
    // with short sleeps added up to 0.1 ms per stop). The wait is bounded,
    // and on every quiet 10 ms the other threads are checked.
    let mut chld = nix::sys::signal::SigSet::empty();
    chld.add(nix::sys::signal::Signal::SIGCHLD);
    let mut old = nix::sys::signal::SigSet::empty();
    nix::sys::signal::pthread_sigmask(
        nix::sys::signal::SigmaskHow::SIG_BLOCK,
        Some(&chld),
        Some(&mut old),
    )
    .ctx(|| "block SIGCHLD".to_string())?;
    let r = wait_thread_blocked(pid, t, &chld);
    let _ = nix::sys::signal::pthread_sigmask(
        nix::sys::signal::SigmaskHow::SIG_SETMASK,
        Some(&old),
        None,
    );
    r
}

/// [`wait_thread`] once SIGCHLD (`chld`) is blocked.
fn wait_thread_blocked(
    pid: pid_t,
    t: Pid,
    chld: &nix::sys::signal::SigSet,
) -> Result<Option<WaitStatus>> {
    let flags = Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG);
    let quiet = libc::timespec {
        tv_sec: 0,
        tv_nsec: 10_000_000,
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    for _ in 0..1_000_000u32 {
        if std::time::Instant::now() > deadline {
            break;
        }
        match waitpid(t, flags) {
            Ok(WaitStatus::StillAlive) => {}
            Ok(s) => return Ok(Some(s)),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e).ctx(|| format!("wait for thread {t} of the new process")),
        }
        // SAFETY: sigtimedwait reads the set and the timeout, both valid; no
        // siginfo is asked for.
        let r = unsafe { libc::sigtimedwait(chld.as_ref(), std::ptr::null_mut(), &quiet) };
        if r < 0 && other_thread_dead(pid, t.as_raw()) {
            return Ok(None);
        }
    }
    Err(EngineError::Restore(format!(
        "thread {t} of the new process did not stop within 60 s"
    )))
}

/// True if a thread of `pid` other than `tid` has exited (zombie or dead).
fn other_thread_dead(pid: pid_t, tid: pid_t) -> bool {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    rd.flatten().any(|e| {
        let name = e.file_name();
        let Some(t) = name.to_str().and_then(|t| t.parse::<pid_t>().ok()) else {
            return false;
        };
        t != tid
            && std::fs::read_to_string(format!("/proc/{pid}/task/{t}/stat"))
                .ok()
                .and_then(|st| {
                    st.rsplit(')')
                        .next()
                        .map(|r| r.trim_start().starts_with(['Z', 'X']))
                })
                .unwrap_or(false)
    })
}

/// Run the new process until every thread sits on its final int3; returns
/// the tids by thread index.
fn wait_for_traps(pid: pid_t, n: usize, p: &Prepared) -> Result<Vec<pid_t>> {
    // Wait on our own threads only (never waitpid(-1)): the caller may have
    // other children, such as a daemon's earlier restores.
    let mut by_idx: Vec<Option<pid_t>> = vec![None; n];
    let mut queue = std::collections::VecDeque::from([pid]);
    let failed = |what: String| -> EngineError {
        match read_failure(&p.status_r) {
            Some(f) => describe_failure(&f, &p.area),
            None => EngineError::Restore(what),
        }
    };
    while let Some(tid) = queue.pop_front() {
        let t = Pid::from_raw(tid);
        loop {
            let st = match wait_thread(pid, t)? {
                Some(s) => s,
                None => return Err(failed("the new process died while being restored".into())),
            };
            match st {
                WaitStatus::Stopped(_, nix::sys::signal::Signal::SIGTRAP) => {
                    let r = sys::get_regs(tid)?;
                    let idx = r.r15 as usize;
                    if idx >= n || by_idx[idx].is_some() {
                        return Err(EngineError::Restore(format!(
                            "unexpected trap in thread {tid}"
                        )));
                    }
                    by_idx[idx] = Some(tid);
                    mark("restore: thread trapped");
                    break;
                }
                WaitStatus::Stopped(_, sig) => {
                    use nix::sys::signal::Signal::*;
                    if matches!(sig, SIGSEGV | SIGBUS | SIGILL | SIGFPE) {
                        // The restorer crashed: say where.
                        let r = sys::get_regs(tid)?;
                        let si = ptrace::getsiginfo(t).ok();
                        // SAFETY: si_addr is valid for these fault signals.
                        let addr = si.map(|s| unsafe { s.si_addr() } as u64).unwrap_or(0);
                        let a = &p.area;
                        let where_ = if r.rip >= a.base && r.rip < a.base + a.code_len {
                            format!("restorer+{:#x}", r.rip - a.base)
                        } else {
                            format!("{:#x}", r.rip)
                        };
                        return Err(EngineError::Restore(format!("the restorer crashed with {sig} at {where_}, fault address {addr:#x}, rdi {:#x} (area {:#x}+{:#x})", r.rdi, a.base, a.len)));
                    }
                    ptrace::cont(t, Some(sig)).ctx(|| format!("resume thread {tid}"))?;
                }
                WaitStatus::PtraceEvent(_, _, ev) => {
                    if ev == libc::PTRACE_EVENT_CLONE {
                        let new =
                            ptrace::getevent(t).ctx(|| format!("new thread of {tid}"))? as pid_t;
                        queue.push_back(new);
                        mark("restore: clone event");
                    } else {
                        mark("restore: thread start");
                    }
                    // Otherwise: the first stop of a new thread.
                    ptrace::cont(t, None).ctx(|| format!("resume thread {tid}"))?;
                }
                WaitStatus::Exited(_, code) => {
                    return Err(failed(format!(
                        "the new process exited with status {code} before it was restored"
                    )));
                }
                WaitStatus::Signaled(_, sig, _) => {
                    return Err(failed(format!(
                        "the new process was killed by {sig} while being restored"
                    )));
                }
                _ => {}
            }
        }
    }
    if by_idx.iter().any(Option::is_none) {
        return Err(EngineError::Restore(format!(
            "{} of {n} threads did not come up",
            by_idx.iter().filter(|t| t.is_none()).count()
        )));
    }
    let _ = PTRACE_EVENT_STOP;
    let _ = p.status_w;
    Ok(by_idx
        .into_iter()
        .map(|t| t.expect("all threads trapped"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::tests_support::empty_image;

    const PAGE_SIZE: u64 = 4096;

    fn mapping_at(base: u64) -> Option<procfs::MapLine> {
        procfs::maps(std::process::id() as pid_t)
            .unwrap()
            .into_iter()
            .find(|m| m.start <= base && base < m.end)
    }

    #[test]
    fn a_reserved_restorer_base_is_mapped_at_once_and_never_chosen_twice() {
        let pi = empty_image();
        let len = 3 * PAGE_SIZE;
        let first = reserve_base(&pi, len).unwrap();
        let held = mapping_at(first).expect("the reservation is in our maps");
        assert!(!held.read && !held.write && !held.exec, "{held:?}");
        // A second choice, as another thread restoring at the same time
        // makes, must not land on the first.
        let second = reserve_base(&pi, len).unwrap();
        assert!(second + len <= first || first + len <= second);

        // The area takes the front of its reservation; the tail goes.
        let area = Area {
            base: first,
            bytes: vec![0xc3; 16],
            code_len: PAGE_SIZE,
            len: 2 * PAGE_SIZE,
            entry: first,
            plan: first + PAGE_SIZE,
            main_stack_top: first + 2 * PAGE_SIZE,
            descriptions: Vec::new(),
        };
        map_area(&area, len).unwrap();
        let code = mapping_at(first).unwrap();
        assert!(code.read && code.exec && !code.write, "{code:?}");
        let data = mapping_at(first + PAGE_SIZE).unwrap();
        assert!(data.read && data.write, "{data:?}");
        assert!(mapping_at(first + 2 * PAGE_SIZE).is_none());
        // SAFETY: the first byte of the area we just mapped and filled.
        assert_eq!(unsafe { *(first as *const u8) }, 0xc3);
        unmap_area(&area);
        assert!(mapping_at(first).is_none());

        // An area larger than its reservation is refused, and the
        // reservation released.
        let big = Area {
            base: second,
            len: 2 * len,
            ..area
        };
        assert!(map_area(&big, len).is_err());
        assert!(mapping_at(second).is_none());
    }
}
