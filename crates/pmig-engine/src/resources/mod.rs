//! One module per kind of process state. Each module has its capture and its
//! restore side by side, behind the [`Resource`] trait:
//!
//! | phase       | where it runs                         | what it does                        |
//! |-------------|---------------------------------------|-------------------------------------|
//! | `precheck`  | source, process still running         | refuse unsupported state, read-only |
//! | `capture`   | source, every thread frozen           | read the state into a serializable value |
//! | `preflight` | destination, before any process exists| open files, check compatibility     |
//! | `plan`      | destination                           | append ops for the restorer         |
//! | `finish`    | destination, threads stopped at the end of the plan | ptrace-side fixes (registers, limits) |
//! | `update`    | destination, a held skeleton          | bring it to the capture of the stop, or refuse (stale) |
//!
//! Adding a kind of resource means adding one module here and one line in
//! [`crate::image::ProcessImage`] (and one in [`crate::skeleton::bring_up`]).
//! A resource that can change while a process runs and can be followed in a
//! held skeleton overrides `update`; the default refuses any change.

pub mod cgroups;
pub mod clocks;
pub mod cpu;
pub mod deaddirs;
pub mod epoll;
pub mod eventfd;
pub mod fifos;
pub mod files;
pub mod ghosts;
pub mod gort;
pub mod holders;
pub mod identity;
pub mod inotify;
pub mod jobctl;
pub mod locks;
pub mod lonesockets;
pub mod memory;
pub mod pipes;
pub mod prctl;
pub mod process;
pub mod sched;
pub mod seccomp;
pub mod session;
pub mod signalfd;
pub mod signals;
pub mod socketpairs;
pub mod sysvshm;
pub mod tcb;
pub mod threads;
pub mod timerfd;
pub mod timers;
pub mod xcomp;

use crate::error::{Ctx, EngineError, Result};
use crate::ptrace::Frozen;
use libc::pid_t;
use pmig_image::PagesWriter;
use pmig_restorer::PlanBuilder;
use serde::{de::DeserializeOwned, Serialize};
use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd};

pub trait Resource {
    /// Name of this resource's part in the image.
    const PART: &'static str;
    type State: Serialize + DeserializeOwned + std::fmt::Debug;

    /// Refuse unsupported state. Runs before and again after the freeze.
    fn precheck(_pid: pid_t) -> Result<()> {
        Ok(())
    }
    fn capture(cx: &mut Capture) -> Result<Self::State>;
    fn preflight(_s: &Self::State, _pf: &mut Preflight) -> Result<()> {
        Ok(())
    }
    fn plan(_s: &Self::State, _cx: &mut PlanCx) -> Result<()> {
        Ok(())
    }
    fn finish(_s: &Self::State, _cx: &mut Finish) -> Result<()> {
        Ok(())
    }
    /// A skeleton's bring-up (see [`crate::skeleton`]): the held process
    /// was built from `pre`, captured while it still ran; make it what
    /// `fin`, captured at the stop, says. `same`: both encode alike. By
    /// default nothing is done when they are the same, and any change
    /// makes the skeleton stale ([`crate::error::stale`]): it is thrown
    /// away and the process restored from `fin` the ordinary way.
    fn update(_pre: &Self::State, _fin: &Self::State, same: bool, _cx: &mut Update) -> Result<()> {
        if same {
            Ok(())
        } else {
            Err(crate::error::stale(format!("its {} changed", Self::PART)))
        }
    }
}

/// Capture context: the frozen process and a scratch page inside it.
pub struct Capture<'a> {
    pub pid: pid_t,
    pub frozen: &'a mut Frozen,
    pub pages: &'a mut PagesWriter,
    /// Which populated pages to save (all when None): pre-copy saves at the
    /// stop only the pages written since they were last sent.
    pub filter: Option<&'a dyn memory::PageFilter>,
    /// The mappings as read before the freeze, if any (see [`memory::Layout`]).
    pub layout: Option<memory::Layout>,
    /// Set by the memory capture: the layout whose flags it took instead of
    /// reading them at the stop (`layout`, or `layout` carried over to the
    /// mappings of the stop; see [`memory::Layout::current`]).
    pub layout_used: Option<memory::Layout>,
    /// A [`memory::PreScan`] another thread makes beside the capture,
    /// unless the capture makes it first ([`memory::SideScan`]); an error
    /// from it (e.g. a failed check) refuses the capture.
    pub prescan: Option<memory::SideScan>,
    /// Dropped once the scratch page is mapped (or the capture goes on
    /// without one): the scan beside the capture waits for it, so that
    /// its reads of the process's mappings and page tables do not hold up
    /// the `mmap`, which needs the process's memory-map lock to itself.
    pub scratch_mapped: Option<std::sync::mpsc::Sender<()>>,
    /// Post-copy handover: list writable private anonymous mappings as
    /// wholly present instead of scanning them (see
    /// [`memory::Vma::deferrable`]).
    pub defer_population: bool,
    /// Pre-copy's stop: the ranges write-protected (tracked) since the last
    /// round. Of these only the pages the [`memory::PreScan`] finds written
    /// are saved (it must scan with [`memory::ScanFor::Written`]); this
    /// takes the place of `filter`.
    pub written_since: Option<Vec<(u64, u64)>>,
    /// With `written_since`: not even the pages written since are saved
    /// (the caller sends them apart, read from the frozen process), so
    /// nothing of the tracked ranges is; no written scan is needed.
    pub written_apart: bool,
    /// A page-copy buffer prepared before the freeze
    /// ([`memory::touched_copy_buffer`]); used first.
    pub copy_buffer: Option<Vec<u8>>,
    /// The pipe ends `files` found, for `pipes`.
    pub pipe_ends: Vec<pipes::End>,
    /// The unix socket ends `files` found, for `socketpairs`.
    pub socket_ends: Vec<socketpairs::End>,
    /// The unix sockets with no name and no live peer `files` found, for
    /// `lonesockets`.
    pub lone_sockets: Vec<lonesockets::End>,
    /// The descriptors of deleted files `files` found, for `ghosts`.
    pub ghost_fds: Vec<ghosts::GhostFd>,
    /// The file locks `files` found, each with its file as the kernel
    /// names it, for `locks`.
    pub locks: Vec<(locks::FileLock, String)>,
    /// The mappings of deleted files and memfds `memory` found, for `ghosts`.
    pub ghost_maps: Vec<ghosts::FoundMap>,
    /// The mappings of System V shared memory `memory` found, for `sysvshm`.
    pub sysv_maps: Vec<sysvshm::FoundMap>,
    /// Set by the memory capture: the device and inode of the executable
    /// when it was deleted (one of `ghost_maps`).
    pub ghost_exe: Option<(u64, u64)>,
    /// Set by the ghosts capture: its part `ghostmaps`, if anything is in it.
    pub ghost_extra: Option<ghosts::GhostMaps>,
    /// Set by the memory capture: the flags its part has no field for.
    pub memory_flags: memory::MemoryFlags,
    /// Set by the prctl capture when the process has memory-deny-write-
    /// execute (its own part, `mdwe`).
    pub mdwe: Option<prctl::MdweState>,
    /// Whether the files and memory captures record inodes (`file_ids`,
    /// `mapped_ids`): only a restore of an unprivileged process uses them.
    pub keep_inodes: bool,
    /// Set by the files capture: the inode of each file it reopens by path.
    pub file_ids: files::FileIds,
    /// Set by the memory capture: the inode of each file it maps by path.
    pub mapped_ids: memory::MappedIds,
    scratch: Option<u64>,
    /// `/proc/PID/status`, read once while frozen (see [`Capture::status`]).
    status: Option<std::collections::HashMap<String, String>>,
    /// Calls asked for ahead of the captures that take their answers (see
    /// [`Capture::ask`]).
    questions: Vec<Question>,
    /// Bytes of the scratch page the questions not answered yet write in.
    asked_out: u64,
    /// The page of code for batched injected calls, if it could be mapped.
    code: Option<u64>,
    /// The scratch, results and code pages are one mapping.
    joined: bool,
}

pub const SCRATCH_LEN: u64 = 4096;
/// After the scratch page: the results of batched injected calls.
const RESULTS_LEN: u64 = 4096;
/// The code of batched injected calls.
const CODE_LEN: u64 = 4096;

/// Calls in thread 0 asked for one part's capture ahead of it (see
/// [`Capture::ask`]).
struct Question {
    part: &'static str,
    calls: Vec<(i64, Vec<u64>)>,
    /// Where in the scratch page the calls write, and how many bytes.
    out: (u64, usize),
    /// Their results and the bytes they wrote, once run.
    answers: Option<(Vec<i64>, Vec<u8>)>,
}

impl Drop for Capture<'_> {
    /// A capture that failed leaves no page of its own in the process, which
    /// resumes (best effort: the process may be gone).
    fn drop(&mut self) {
        let _ = self.release_scratch();
    }
}

impl<'a> Capture<'a> {
    pub fn new(frozen: &'a mut Frozen, pages: &'a mut PagesWriter) -> Capture<'a> {
        Capture {
            pid: frozen.pid,
            frozen,
            pages,
            filter: None,
            layout: None,
            layout_used: None,
            prescan: None,
            scratch_mapped: None,
            defer_population: false,
            written_since: None,
            written_apart: false,
            copy_buffer: None,
            pipe_ends: Vec::new(),
            socket_ends: Vec::new(),
            lone_sockets: Vec::new(),
            ghost_fds: Vec::new(),
            locks: Vec::new(),
            ghost_maps: Vec::new(),
            sysv_maps: Vec::new(),
            ghost_exe: None,
            ghost_extra: None,
            memory_flags: Default::default(),
            mdwe: None,
            keep_inodes: false,
            file_ids: Default::default(),
            mapped_ids: Default::default(),
            scratch: None,
            status: None,
            questions: Vec::new(),
            asked_out: 0,
            code: None,
            joined: false,
        }
    }

    /// Asks, for the capture of the part `part`, the calls in thread 0 that
    /// `make(out)` lists, which write at most `out_len` bytes at `out` in
    /// the scratch page. Questions of several parts asked before any is
    /// answered go to the process together, in as few batches of injected
    /// calls as they fit in: each batch is a stop of the process.
    pub fn ask(
        &mut self,
        part: &'static str,
        out_len: usize,
        make: impl FnOnce(u64) -> Vec<(i64, Vec<u64>)>,
    ) -> Result<()> {
        let scratch = self.scratch()?;
        let len = (out_len as u64).next_multiple_of(8);
        if len > SCRATCH_LEN {
            return Err(EngineError::Other(format!(
                "internal error: the {part} capture asks for {out_len} bytes of scratch memory"
            )));
        }
        if self.asked_out + len > SCRATCH_LEN {
            self.run_questions()?;
        }
        let out = scratch + self.asked_out;
        self.asked_out += len;
        self.questions.push(Question {
            part,
            calls: make(out),
            out: (out, out_len),
            answers: None,
        });
        Ok(())
    }

    /// The results of the calls asked for `part` (negative errno on
    /// failure) and the bytes they wrote, asked with `ask` if they were not
    /// asked; every question not answered yet goes to the process with them.
    pub fn answers(
        &mut self,
        part: &'static str,
        ask: fn(&mut Capture<'a>) -> Result<()>,
    ) -> Result<(Vec<i64>, Vec<u8>)> {
        if !self.questions.iter().any(|q| q.part == part) {
            ask(self)?;
        }
        if self.questions.iter().any(|q| q.answers.is_none()) {
            self.run_questions()?;
        }
        let i = self
            .questions
            .iter()
            .position(|q| q.part == part)
            .ok_or_else(|| EngineError::Other(format!("internal error: {part} asked nothing")))?;
        let q = self.questions.remove(i);
        q.answers
            .ok_or_else(|| EngineError::Other(format!("internal error: {part} not answered")))
    }

    /// Runs the questions not answered yet in thread 0 and keeps their
    /// answers; their part of the scratch page is free again after.
    fn run_questions(&mut self) -> Result<()> {
        let pending: Vec<usize> = (0..self.questions.len())
            .filter(|&i| self.questions[i].answers.is_none())
            .collect();
        let calls: Vec<(i64, &[u64])> = pending
            .iter()
            .flat_map(|&i| self.questions[i].calls.iter().map(|(n, a)| (*n, &a[..])))
            .collect();
        let mut results = Vec::with_capacity(calls.len());
        for batch in calls.chunks(crate::ptrace::STUB_CALLS) {
            results.extend(self.frozen.inject_many(0, batch)?);
        }
        let scratch = self.scratch.unwrap_or(0);
        let written = if self.asked_out > 0 {
            self.read_mem(scratch, self.asked_out as usize)?
        } else {
            Vec::new()
        };
        let mut next = 0;
        for i in pending {
            let q = &mut self.questions[i];
            let n = q.calls.len();
            let at = (q.out.0 - scratch) as usize;
            let bytes = written.get(at..at + q.out.1).unwrap_or_default().to_vec();
            q.answers = Some((results[next..next + n].to_vec(), bytes));
            next += n;
        }
        self.asked_out = 0;
        Ok(())
    }

    /// `/proc/PID/status` of the frozen process, read at the first call.
    /// For the fields nothing the capture does changes while the process
    /// is frozen (its credentials, umask, signal actions, locked memory
    /// once the scratch page is gone), not for those that do (its
    /// pending signals, its memory's sizes).
    pub fn status(&mut self) -> Result<&std::collections::HashMap<String, String>> {
        if self.status.is_none() {
            self.status = Some(crate::procfs::status(self.pid)?);
        }
        Ok(self.status.as_ref().expect("just read"))
    }

    /// A page of memory inside the target for injected calls to write into.
    /// Mapped at the first use, with a page for the results of batched
    /// calls after it and a page of executable memory for their code (see
    /// [`Frozen::use_stub`]); without that page, calls are injected one by
    /// one.
    pub fn scratch(&mut self) -> Result<u64> {
        if let Some(s) = self.scratch {
            return Ok(s);
        }
        let r = self.map_scratch();
        self.scratch_mapped.take();
        r
    }

    /// [`Capture::scratch`] when it is not mapped yet.
    fn map_scratch(&mut self) -> Result<u64> {
        // Which signals it ignores decides how calls can be injected.
        let ignored = self
            .status()?
            .get("SigIgn")
            .map(|v| crate::procfs::hex_u64(v))
            .unwrap_or(0);
        self.frozen.know_ignored(ignored);
        let anon = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;
        let rw = (libc::PROT_READ | libc::PROT_WRITE) as u64;
        let rx = (libc::PROT_READ | libc::PROT_EXEC) as u64;
        let mmap = |len: u64, prot: u64| (libc::SYS_mmap, [0, len, prot, anon, u64::MAX, 0]);
        // One mapping for the three pages, code last, where the process may
        // map memory both writable and executable: one stop of the process
        // to map and one to unmap, where two mappings take two of each. The
        // process runs none of its own code while it is there. Refused
        // (memory-deny-write-execute, a security module's policy): two
        // mappings, the code's not writable.
        let joined = mmap(SCRATCH_LEN + RESULTS_LEN + CODE_LEN, rw | rx);
        let one = self.frozen.inject_many(0, &[(joined.0, &joined.1[..])])?;
        let r = if one[0] >= 0 {
            self.code = Some(one[0] as u64 + SCRATCH_LEN + RESULTS_LEN);
            self.joined = true;
            one
        } else {
            let (data, code) = (mmap(SCRATCH_LEN + RESULTS_LEN, rw), mmap(CODE_LEN, rx));
            let r = self
                .frozen
                .inject_many(0, &[(data.0, &data.1[..]), (code.0, &code.1[..])])?;
            if r[1] >= 0 {
                self.code = Some(r[1] as u64);
            }
            r
        };
        if r[0] < 0 {
            return Err(EngineError::Other(format!(
                "map a scratch page in process {}: errno {}",
                self.pid, -r[0]
            )));
        }
        let s = r[0] as u64;
        self.scratch = Some(s);
        if let Some(code) = self.code {
            if !self.frozen.use_stub(code, s + SCRATCH_LEN) {
                tracing::debug!("process {}: injected calls go one by one", self.pid);
            }
        }
        Ok(s)
    }

    /// Remove the scratch page and the code page (before memory is
    /// captured).
    pub fn release_scratch(&mut self) -> Result<()> {
        self.frozen.drop_stub();
        let mut calls: Vec<(i64, [u64; 2])> = Vec::new();
        if std::mem::take(&mut self.joined) {
            self.code = None;
            if let Some(s) = self.scratch.take() {
                calls.push((libc::SYS_munmap, [s, SCRATCH_LEN + RESULTS_LEN + CODE_LEN]));
            }
        }
        if let Some(s) = self.scratch.take() {
            calls.push((libc::SYS_munmap, [s, SCRATCH_LEN + RESULTS_LEN]));
        }
        if let Some(c) = self.code.take() {
            calls.push((libc::SYS_munmap, [c, CODE_LEN]));
        }
        if !calls.is_empty() {
            let calls: Vec<(i64, &[u64])> = calls.iter().map(|(n, a)| (*n, &a[..])).collect();
            self.frozen.inject_many(0, &calls)?;
        }
        Ok(())
    }

    /// Run a call in thread `idx`; a negative result becomes an error.
    pub fn call(&mut self, idx: usize, nr: i64, args: &[u64], what: &str) -> Result<u64> {
        let r = self.frozen.inject(idx, nr, args)?;
        self.checked(r, what)
    }

    /// The raw result `r` of the injected call `what`: a negative one (an
    /// errno) becomes an error.
    pub fn checked(&self, r: i64, what: &str) -> Result<u64> {
        if r < 0 {
            return Err(EngineError::Sys {
                what: format!("{what} (inside process {})", self.pid),
                source: std::io::Error::from_raw_os_error(-r as i32),
            });
        }
        Ok(r as u64)
    }

    pub fn read_mem(&self, addr: u64, len: usize) -> Result<Vec<u8>> {
        let mut b = vec![0u8; len];
        let n = crate::sys::process_vm_read(self.pid, addr, &mut b)?;
        b.truncate(n);
        Ok(b)
    }

    pub fn n_threads(&self) -> usize {
        self.frozen.threads.len()
    }
}

/// Options for restoring.
#[derive(Debug, Clone, Default)]
pub struct RestoreOptions {
    /// Replacement for stdio that was a terminal or pipe: None means the
    /// restoring process's own fd 0/1/2.
    pub stdio: [Option<std::path::PathBuf>; 3],
    /// Written with the new pid before the process resumes.
    pub pidfile: Option<std::path::PathBuf>,
    /// Post-copy: private anonymous memory whose pages are not in the image
    /// is registered with a userfaultfd; the caller gets it and serves the
    /// missing pages (see `lazy`).
    pub lazy: bool,
    /// A skeleton (see [`crate::skeleton`]): the process is built from a
    /// capture made while it still ran at the source and held until the
    /// capture of the stop brings it up to date. What depends on the
    /// moment of the stop is left out of the plan: timers are created
    /// disarmed and pending signals are not queued (the bring-up does
    /// both, from the capture of the stop).
    pub skeleton: bool,
    /// How much of the CPU the image was captured on this one must have
    /// ([`cpu::CpuCheck`]).
    pub cpu_check: cpu::CpuCheck,
}

/// What the new process does, with raw system calls only, between fork and
/// the jump to the restorer. Filled by the resources' preflight.
#[derive(Debug, Default)]
pub struct ChildSetup {
    /// (source fd, target fd, close-on-exec)
    pub installs: Vec<(i32, i32, bool)>,
    /// A helper fd of the working directory, to `fchdir` to.
    pub cwd: Option<i32>,
    pub umask: Option<u32>,
    pub personality: Option<u64>,
}

/// Destination-side preparation before any process exists.
pub struct Preflight {
    pub opts: RestoreOptions,
    /// Helper fds are numbered from here up to [`Preflight::fd_end`], where
    /// the process has no fd: above every target fd, or in a gap between
    /// them if the open-file limit leaves no room above
    /// ([`Preflight::place_helpers`]).
    pub fd_base: i32,
    /// The end (exclusive) of the helpers' numbers: `i32::MAX` when they go
    /// above every target fd.
    pub fd_end: i32,
    /// fds the child keeps (helpers, used by the restorer, closed at its end).
    pub helpers: Vec<i32>,
    owned: Vec<OwnedFd>,
    pub child: ChildSetup,
    /// Where the restored process keeps its userfaultfd (lazy restore).
    pub uffd_fd: Option<i32>,
    /// Path → helper fd for mapped files, so each file is opened once.
    pub mapped_files: std::collections::HashMap<String, i32>,
    /// Pipe inode (on the source) → helper fds of its read and write ends.
    pub pipes: std::collections::HashMap<u64, (i32, i32)>,
    /// Unix socket inode (on the source) → helper fd of that end made again.
    pub sockets: std::collections::HashMap<u64, i32>,
    /// Deleted file (device and inode on the source) → helper fd of the
    /// file made again ([`ghosts`]).
    pub ghosts: std::collections::HashMap<(u64, u64), i32>,
    /// Deleted directory (device and inode on the source) → helper fd
    /// (read-only) of the directory made again ([`deaddirs`]).
    pub dead_dirs: std::collections::HashMap<(u64, u64), i32>,
    /// Start of a mapping of a deleted file or memfd → helper fd of the file
    /// made again (`ghosts`), which it maps instead of a file by path.
    pub ghost_maps: std::collections::HashMap<u64, i32>,
    /// Which stdio fd becomes the controlling terminal (see `session`).
    pub ctty: session::CttyPlan,
    /// The thread ids of the image, by thread index (thread 0 first). A thread
    /// may get another id on restore: resources that name a thread find its
    /// index here and let the restorer fill its new id in
    /// (`PlanBuilder::store_tid`).
    pub thread_tids: Vec<libc::pid_t>,
    /// Starts of the mappings to make with `MAP_NORESERVE`
    /// ([`memory::MemoryFlags`]).
    pub noreserve: std::collections::HashSet<u64>,
    /// Whose credentials the process's own paths are opened with (set by
    /// `Identity`'s preflight, which runs first; None: the restorer's own,
    /// see [`crate::fsowner`]).
    pub owner: Option<crate::fsowner::Owner>,
    /// The inodes of the process's files where it was captured, if the image
    /// has them (see [`files::FileIds`]).
    pub file_ids: Option<files::FileIds>,
    /// The inodes of its mapped files and executable, likewise (see
    /// [`memory::MappedIds`]).
    pub mapped_ids: Option<memory::MappedIds>,
    /// The System V shared memory segments this restore made (removed
    /// again if it fails).
    pub sysv_made: sysvshm::Made,
    /// The image's segments and their attaches, for `memory`'s plan.
    pub sysv: sysvshm::SysvState,
    /// The `cgroup.procs` files of the cgroups the new process is moved
    /// into before it runs ([`cgroups`]).
    pub cgroup_procs: Vec<std::path::PathBuf>,
}

impl Preflight {
    pub fn new(opts: RestoreOptions, max_target_fd: i32) -> Preflight {
        let base = (max_target_fd + 1).max(64);
        // In lazy mode the lowest helper number is the userfaultfd the
        // process keeps while pages are owed.
        let uffd_fd = opts.lazy.then_some(base);
        Preflight {
            uffd_fd,
            opts,
            fd_base: if uffd_fd.is_some() { base + 1 } else { base },
            fd_end: i32::MAX,
            helpers: Vec::new(),
            owned: Vec::new(),
            child: ChildSetup::default(),
            mapped_files: Default::default(),
            pipes: Default::default(),
            sockets: Default::default(),
            ghosts: Default::default(),
            dead_dirs: Default::default(),
            ghost_maps: Default::default(),
            ctty: Default::default(),
            thread_tids: Vec::new(),
            noreserve: Default::default(),
            owner: None,
            file_ids: None,
            mapped_ids: None,
            sysv_made: Default::default(),
            sysv: Default::default(),
            cgroup_procs: Vec::new(),
        }
    }

    /// Where the helpers go when the numbers above the process's highest fd
    /// would pass `limit`, this restorer's open-file limit (a program that
    /// keeps its files at the top of its own limit, as valgrind does): the
    /// highest gap of at least `room` numbers between the process's fds
    /// `targets`, from 64 up. Programs take the lowest free number, so a
    /// high gap is the least likely to be wanted by the process later (the
    /// lazy restore's userfaultfd stays there). Without such a gap the
    /// numbers stay above, and [`Preflight::keep`] names the limit if they
    /// do not fit.
    pub fn place_helpers(&mut self, targets: &[i32], room: i32, limit: i32) {
        let lazy = self.uffd_fd.is_some();
        let above = self.uffd_fd.unwrap_or(self.fd_base);
        if above.saturating_add(room) <= limit {
            return;
        }
        let mut t: Vec<i32> = targets.iter().copied().filter(|&f| f >= 64).collect();
        t.sort_unstable();
        t.dedup();
        let mut prev = 63;
        let mut best = None;
        for &f in &t {
            if f - (prev + 1) >= room {
                best = Some(f);
            }
            prev = f;
        }
        let Some(end) = best else { return };
        let base = end - room;
        self.uffd_fd = lazy.then_some(base);
        self.fd_base = if lazy { base + 1 } else { base };
        self.fd_end = end;
    }

    /// Keep `fd` for the new process, renumbered at or above `fd_base`.
    pub fn keep(&mut self, fd: OwnedFd) -> Result<i32> {
        // SAFETY: fcntl(F_DUPFD_CLOEXEC) on an fd we own.
        let n = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, self.fd_base) };
        let full = || {
            EngineError::Incompatible(format!(
                "no room for the restorer's own fds from {} up, between the process's fds and under this restorer's open-file limit",
                self.fd_base
            ))
        };
        if n < 0 {
            // EINVAL: fd_base itself at or above the limit.
            let e = std::io::Error::last_os_error().raw_os_error();
            if e == Some(libc::EMFILE) || e == Some(libc::EINVAL) {
                return Err(full());
            }
            return Err(crate::error::errno_err(
                "duplicate a file descriptor for the new process",
            ));
        }
        // SAFETY: n is a fresh fd returned by fcntl and owned by nobody else.
        let owned = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(n) };
        if n >= self.fd_end {
            return Err(full());
        }
        self.owned.push(owned);
        self.helpers.push(n);
        Ok(n)
    }

    /// Closes the helper `fd`, which nothing of the restore uses any more.
    pub fn drop_helper(&mut self, fd: i32) {
        self.helpers.retain(|&h| h != fd);
        self.owned.retain(|o| o.as_raw_fd() != fd);
    }

    /// Opens one of pmig's own files (the image's page data) and keeps it
    /// for the new process.
    pub fn open_keep(&mut self, path: &str, flags: i32) -> Result<i32> {
        let f = open_with(path, flags).ctx(|| format!("open {path}"))?;
        self.keep(f.into())
    }

    /// Opens a path the process named (a file it had open or mapped) with
    /// the process's own credentials ([`Preflight::as_owner`]) and keeps it
    /// for the new process.
    pub fn open_keep_as_owner(&mut self, path: &str, flags: i32) -> Result<i32> {
        let f = self.as_owner(|| open_with(path, flags))?;
        self.keep_opened(path, f)
    }

    /// Opens each `(path, flags)` as [`Preflight::open_keep_as_owner`]
    /// does, with one switch of credentials for all; each result goes to
    /// [`Preflight::keep_opened`].
    pub fn open_all_as_owner(
        &self,
        files: &[(&str, i32)],
    ) -> Result<Vec<std::io::Result<std::fs::File>>> {
        self.as_owner(|| files.iter().map(|&(p, fl)| open_with(p, fl)).collect())
    }

    /// Keeps a file opened for the new process, or names the path (and the
    /// uid it was opened as) in the error.
    pub fn keep_opened(&mut self, path: &str, f: std::io::Result<std::fs::File>) -> Result<i32> {
        let f = f.ctx(|| format!("open {path}{}", self.as_whom()))?;
        self.keep(f.into())
    }

    /// " as uid N" when paths are opened with the process's credentials,
    /// for errors; else nothing.
    pub fn as_whom(&self) -> String {
        self.owner
            .as_ref()
            .map_or(String::new(), |o| format!(" as uid {}", o.fsuid))
    }

    /// Runs `f`, which reaches files by paths the process named, with the
    /// process's filesystem ids and groups if it is not root's
    /// ([`crate::fsowner`]), else with the restorer's.
    pub fn as_owner<T>(&self, f: impl FnOnce() -> T) -> Result<T> {
        match &self.owner {
            Some(o) => o.run(f),
            None => Ok(f()),
        }
    }

    /// Release our copies of the kept fds (the child has its own).
    pub fn close_all(&mut self) {
        self.owned.clear();
    }

    /// Hand out the kept fds without closing them (for debugging).
    pub fn leak(&mut self) {
        for f in self.owned.drain(..) {
            let _ = f.into_raw_fd();
        }
    }
}

pub(crate) fn open_with(path: &str, flags: i32) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(flags & libc::O_ACCMODE != libc::O_WRONLY)
        .write(flags & libc::O_ACCMODE != libc::O_RDONLY)
        .custom_flags(flags & !libc::O_ACCMODE)
        .open(path)
}

use std::os::unix::fs::OpenOptionsExt;

/// Restorer plan construction.
pub struct PlanCx<'a> {
    pub b: &'a mut PlanBuilder,
    pub pf: &'a Preflight,
    /// Fd of the image's page data in the new process.
    pub pages_fd: i32,
}

/// The restored process stopped at the end of the plan.
pub struct Finish<'a> {
    pub pid: pid_t,
    pub frozen: &'a mut Frozen,
    /// Start and length of the restorer area, to be removed.
    pub area: (u64, u64),
}

/// A held skeleton being brought up to the capture of the stop (see
/// [`crate::skeleton`]): the process is stopped at the end of its plan,
/// with the restorer area still mapped.
pub struct Update<'a> {
    pub pid: pid_t,
    pub frozen: &'a mut Frozen,
    /// Start and length of the restorer area (its end is the scratch of
    /// [`Finish::scratch`]).
    pub area: (u64, u64),
    /// The page data of the image of the stop.
    pub pages: &'a std::fs::File,
    /// Our copy of the process's userfaultfd (a lazy restore): the pages
    /// of mappings registered with it are installed through it.
    pub uffd: Option<&'a OwnedFd>,
    /// The descriptor number of the process's own userfaultfd, which no
    /// descriptor it opened since may take.
    pub process_uffd: Option<i32>,
    /// Starts of the mappings made with `MAP_NORESERVE`, in the skeleton's
    /// own capture and in the capture of the stop (see
    /// [`super::memory::MemoryFlags`]).
    pub noreserve: (&'a [u64], &'a [u64]),
    /// The threads that ended and started between the skeleton's own
    /// capture and the stop ([`threads::thread_changes`]): the
    /// per-thread parts compare the others, and set the new ones.
    pub threads: threads::ThreadChanges,
    /// The deleted files the process holds at the stop and did not at the
    /// skeleton's capture, made again by [`ghosts::bring_up`] (by their
    /// device and inode at the source): `files` opens them in the skeleton.
    pub made_ghosts: Vec<ghosts::MadeGhost>,
}

impl Update<'_> {
    /// The [`Finish`] context of the same process, for the steps a restore
    /// and a bring-up share.
    pub fn finish(&mut self) -> Finish<'_> {
        Finish {
            pid: self.pid,
            frozen: self.frozen,
            area: self.area,
        }
    }

    /// Runs `nr` in thread `idx` with `data` (at most a page) in the
    /// restorer area's scratch as its argument `at` (the others as given);
    /// a negative result is an error naming `what`.
    pub fn call_with(
        &mut self,
        idx: usize,
        nr: i64,
        data: &[u8],
        at: usize,
        args: &[u64],
        what: impl FnOnce() -> String,
    ) -> Result<()> {
        let args = self.args_with_scratch(data, at, args)?;
        self.call(idx, nr, &args, what)
    }

    /// `args` with argument `at` pointing at `data`, written into the
    /// restorer area's scratch.
    fn args_with_scratch(&mut self, data: &[u8], at: usize, args: &[u64]) -> Result<Vec<u64>> {
        let ptr = self.finish().scratch(data)?;
        let mut args = args.to_vec();
        if at < args.len() {
            args[at] = ptr;
        }
        Ok(args)
    }

    /// Runs `nr(args)` in thread `idx`; a negative result is an error
    /// naming `what`.
    pub fn call(
        &mut self,
        idx: usize,
        nr: i64,
        args: &[u64],
        what: impl FnOnce() -> String,
    ) -> Result<()> {
        let r = self.frozen.inject(idx, nr, args)?;
        if r < 0 {
            return Err(EngineError::Sys {
                what: what(),
                source: std::io::Error::from_raw_os_error(-r as i32),
            });
        }
        Ok(())
    }
}

impl Update<'_> {
    /// Runs `nr` in thread 0 with `path` (a path the process names, written
    /// NUL-terminated into the restorer area's scratch) as its argument `at`
    /// (the others as given): its result, or the error it failed with.
    pub fn call_with_path(
        &mut self,
        nr: i64,
        path: &str,
        at: usize,
        args: &[u64],
    ) -> Result<std::result::Result<i64, std::io::Error>> {
        let mut raw = path.as_bytes().to_vec();
        raw.push(0);
        let args = self.args_with_scratch(&raw, at, args)?;
        let r = self.frozen.inject(0, nr, &args)?;
        Ok(if r < 0 {
            Err(std::io::Error::from_raw_os_error(-r as i32))
        } else {
            Ok(r)
        })
    }
}

impl Finish<'_> {
    /// Where [`Finish::scratch`] puts `len` bytes: for data that holds
    /// pointers into itself.
    pub fn scratch_addr(&self, len: usize) -> u64 {
        let (base, area_len) = self.area;
        (base + area_len - len as u64) & !15
    }

    /// Writes `bytes` (at most a page) at the end of the restorer area and
    /// returns their address in the process, for an injected call to read.
    /// The area ends with the restorer's stacks, which nothing uses once
    /// every thread sits on its trap. Only before [`Memory::finish`]
    /// removes the area.
    ///
    /// [`Memory::finish`]: memory::Memory
    pub fn scratch(&mut self, bytes: &[u8]) -> Result<u64> {
        let at = self.scratch_addr(bytes.len());
        if bytes.len() > 4096 || at < self.area.0 {
            return Err(EngineError::Restore(format!(
                "{} bytes do not fit the restorer area's scratch",
                bytes.len()
            )));
        }
        if crate::sys::process_vm_write(self.pid, at, bytes)? != bytes.len() {
            return Err(EngineError::Restore(
                "short write into the restorer area".into(),
            ));
        }
        Ok(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the helpers go: above the process's fds while the limit leaves
    /// room there, else the highest gap between them that fits (from 64 up),
    /// else above all the same. (targets, lazy, room, limit) → (uffd_fd,
    /// fd_base, fd_end).
    #[test]
    fn helpers_go_above_the_fds_or_into_the_highest_gap_that_fits() {
        type Case<'a> = (&'a [i32], bool, i32, i32, (Option<i32>, i32, i32));
        let cases: &[Case] = &[
            // Room above: as always, from 64 or above the highest fd.
            (&[0, 1, 2], false, 100, 1024, (None, 64, i32::MAX)),
            (&[0, 1, 2, 500], true, 100, 1024, (Some(501), 502, i32::MAX)),
            // valgrind: its fds just under the limit.
            (
                &[0, 1, 2, 19990, 19999],
                false,
                100,
                20000,
                (None, 19890, 19990),
            ),
            (
                &[0, 1, 2, 19990, 19999],
                true,
                100,
                20000,
                (Some(19890), 19891, 19990),
            ),
            // The highest gap that fits, not the highest gap.
            (
                &[300, 1000, 1010, 1023],
                false,
                100,
                1024,
                (None, 900, 1000),
            ),
            // No gap fits: above, where keep() names the limit.
            (
                &[100, 150, 200, 299],
                false,
                100,
                300,
                (None, 300, i32::MAX),
            ),
        ];
        for &(targets, lazy, room, limit, want) in cases {
            let max = targets.iter().copied().max().unwrap();
            let opts = RestoreOptions {
                lazy,
                ..Default::default()
            };
            let mut pf = Preflight::new(opts, max);
            pf.place_helpers(targets, room, limit);
            assert_eq!(
                (pf.uffd_fd, pf.fd_base, pf.fd_end),
                want,
                "{targets:?} lazy {lazy} room {room} limit {limit}"
            );
        }
    }

    #[test]
    fn questions_of_several_parts_are_answered_together_each_with_its_own_bytes() {
        // A child that sleeps until killed.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "exec sleep 600"])
            .spawn()
            .unwrap();
        let pid = child.id() as pid_t;
        // Bounded: until it runs sleep (its own program, not the shell).
        for _ in 0..2000 {
            if crate::procfs::read(pid, "comm").is_ok_and(|c| c.trim() == "sleep") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let mut frozen = Frozen::freeze(pid).unwrap();
        let d = tempfile::tempdir().unwrap();
        let mut w = pmig_image::ImageWriter::create(d.path()).unwrap();
        let mut cx = Capture::new(&mut frozen, w.pages());
        cx.ask("first", 0, |_| vec![(libc::SYS_getpid, vec![])])
            .unwrap();
        // Writes its three interval timers (unarmed: zeros) where it was told.
        cx.ask("second", 96, |out| {
            (0..3u64)
                .map(|w| (libc::SYS_getitimer, vec![w, out + w * 32]))
                .collect()
        })
        .unwrap();
        // The scratch page is filled with ones where the second writes, so
        // that zeros read back came from its calls.
        let scratch = cx.scratch().unwrap();
        let mem = std::fs::OpenOptions::new()
            .write(true)
            .open(format!("/proc/{pid}/mem"))
            .unwrap();
        std::os::unix::fs::FileExt::write_all_at(&mem, &[0xffu8; 96], scratch).unwrap();
        let (r2, out2) = cx.answers("second", |_| panic!("asked already")).unwrap();
        assert_eq!(r2, vec![0, 0, 0]);
        assert_eq!(out2, vec![0u8; 96]);
        // Answered in the same batch: taken without running anything.
        let (r1, out1) = cx.answers("first", |_| panic!("asked already")).unwrap();
        assert_eq!((r1, out1), (vec![pid as i64], vec![]));
        // A part not asked ahead is asked at its answers.
        fn third(cx: &mut Capture) -> Result<()> {
            cx.ask("third", 0, |_| vec![(libc::SYS_close, vec![9999])])
        }
        let (r3, _) = cx.answers("third", third).unwrap();
        assert_eq!(r3, vec![-(libc::EBADF as i64)]);
        drop(cx);
        frozen.detach().unwrap();
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn the_scratch_pages_run_batches_and_leave_the_mappings_as_they_were() {
        use std::os::unix::process::CommandExt;
        // Twice: a plain process (one mapping for the three pages), then one
        // that denies write+execute memory (two mappings).
        for mdwe in [false, true] {
            let mut cmd = std::process::Command::new("sh");
            cmd.args(["-c", "exec sleep 600"]);
            if mdwe {
                // SAFETY: prctl with integer arguments, between fork and exec;
                // async-signal-safe.
                unsafe {
                    cmd.pre_exec(|| {
                        if libc::prctl(libc::PR_SET_MDWE, libc::PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0)
                            != 0
                        {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
                    })
                };
            }
            let mut child = cmd.spawn().unwrap();
            let pid = child.id() as pid_t;
            for _ in 0..2000 {
                if crate::procfs::read(pid, "comm").is_ok_and(|c| c.trim() == "sleep") {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let maps = || crate::procfs::read(pid, "maps").unwrap();
            let mut frozen = Frozen::freeze(pid).unwrap();
            let before = maps();
            let d = tempfile::tempdir().unwrap();
            let mut w = pmig_image::ImageWriter::create(d.path()).unwrap();
            let mut cx = Capture::new(&mut frozen, w.pages());
            cx.scratch().unwrap();
            assert_eq!(cx.joined, !mdwe, "mdwe {mdwe}");
            assert_ne!(maps(), before, "mdwe {mdwe}: nothing mapped");
            // Two calls: run as one batch from the code page.
            cx.ask("ids", 0, |_| {
                vec![(libc::SYS_getpid, vec![]), (libc::SYS_close, vec![9999])]
            })
            .unwrap();
            let (r, _) = cx.answers("ids", |_| panic!("asked already")).unwrap();
            assert_eq!(r, vec![pid as i64, -(libc::EBADF as i64)], "mdwe {mdwe}");
            cx.release_scratch().unwrap();
            assert_eq!(maps(), before, "mdwe {mdwe}");
            drop(cx);
            frozen.detach().unwrap();
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
