//! The whole process image: one part per resource.

use crate::error::{busy, EngineError, Result};
use crate::ptrace::Frozen;
use crate::resources::{
    cgroups::Cgroups,
    clocks::Clocks,
    cpu::CpuState,
    deaddirs::{DeadCwd, DeadDir},
    files::{FileIds, Files},
    ghosts::{GhostMaps, Ghosts, SparseGhosts},
    identity::Identity,
    jobctl::JobCtl,
    locks::{self, Locks, LocksState},
    lonesockets::LoneSockets,
    memory::{MappedIds, Memory, MemoryFlags},
    pipes::Pipes,
    prctl::{MdweState, Prctl},
    process::Process,
    sched::Sched,
    seccomp::{Seccomp, SeccompState},
    session::Session,
    signals::Signals,
    socketpairs::SocketPairs,
    sysvshm::{SysvShm, SysvState},
    threads::Threads,
    timers::Timers,
    xcomp::XcompState,
    Resource,
};
use pmig_image::{Image, ImageWriter};
use std::time::{Duration, Instant};

/// Every resource's state. Adding a resource adds a field here.
#[derive(Debug)]
pub struct ProcessImage {
    pub process: <Process as Resource>::State,
    pub identity: <Identity as Resource>::State,
    pub files: <Files as Resource>::State,
    pub signals: <Signals as Resource>::State,
    pub timers: <Timers as Resource>::State,
    pub threads: <Threads as Resource>::State,
    pub memory: <Memory as Resource>::State,
    /// None in images written before the `session` part existed (format
    /// 1.0): such a process is restored into pmig restore's session.
    pub session: Option<<Session as Resource>::State>,
    /// None in images written before the `jobctl` part existed (format
    /// 1.1 and older): such a process is restored running.
    pub jobctl: Option<<JobCtl as Resource>::State>,
    /// None in images written before the `sched` part existed (format 1.1
    /// and older): the process gets this node's defaults.
    pub sched: Option<<Sched as Resource>::State>,
    /// None in images written before the `clocks` part existed (format 1.1
    /// and older): the process gets this node's clocks.
    pub clocks: Option<<Clocks as Resource>::State>,
    /// None in images written before the `pipes` part existed (format 1.2
    /// and older), which held no pipe other than stdio.
    pub pipes: Option<<Pipes as Resource>::State>,
    /// None when the process holds no unix socket pair, and in images
    /// written before the `socketpairs` part existed (format 1.17 and
    /// older).
    pub socketpairs: Option<<SocketPairs as Resource>::State>,
    /// None when the process holds no unix socket without a name and a
    /// live peer, and in images written before the `lonesockets` part
    /// existed (format 1.18 and older).
    pub lonesockets: Option<<LoneSockets as Resource>::State>,
    /// None when every prctl attribute is at its default, and in images
    /// written before the `prctl` part existed (format 1.3 and older).
    pub prctl: Option<<Prctl as Resource>::State>,
    /// None when no mapping has a flag the `memory` part lacks, and in
    /// images written before this part existed (format 1.3 and older).
    pub memory_flags: Option<MemoryFlags>,
    /// The process's memory-deny-write-execute flags; None when it has
    /// none, and in images written before this part existed (format 1.4
    /// and older).
    pub mdwe: Option<MdweState>,
    /// The inode of each file the process had open by path, and the boot
    /// of the machine; None when it has none, and in images written before
    /// this part existed (format 1.6 and older).
    pub file_ids: Option<FileIds>,
    /// The inode of each file the process mapped, and of its executable;
    /// None in images written before this part existed (format 1.7 and
    /// older).
    pub mapped_ids: Option<MappedIds>,
    /// The deleted files the process holds; None when it holds none, and in
    /// images written before this part existed (format 1.8 and older).
    /// Written as two parts: `ghosts`, and `sparseghosts` (1.11) for the
    /// sparse ones.
    pub ghosts: Option<<Ghosts as Resource>::State>,
    /// Which ghosts are memfds, and the mappings of ghosts; None when there
    /// are neither, and in images written before this part existed (format
    /// 1.9 and older).
    pub ghost_maps: Option<GhostMaps>,
    /// The System V shared memory segments the process has attached; None
    /// when it has none, and in images written before this part existed
    /// (format 1.11 and older).
    pub sysv: Option<SysvState>,
    /// The file locks the process holds; None when it holds none, and in
    /// images written before this part existed (format 1.12 and older).
    pub locks: Option<LocksState>,
    /// The working directory, when it was deleted; None when it was not,
    /// and in images written before this part existed (format 1.13 and
    /// older).
    pub dead_cwd: Option<DeadDir>,
    /// The process's seccomp filters; None when it has none, and in images
    /// written before this part existed (format 1.14 and older).
    pub seccomp: Option<SeccompState>,
    /// The xsave features (AMX) the process has permission for beyond a
    /// new process's; None when it has none, and in images written before
    /// this part existed (format 1.16 and older).
    pub xcomp: Option<XcompState>,
    /// The CPU the image was captured on; None in images written before
    /// this part existed (format 1.16 and older).
    pub cpu: Option<CpuState>,
    /// The cgroups the process was in where they differ from the capturing
    /// pmig's; None when none differs, and in images written before this
    /// part existed (format 1.19 and older).
    pub cgroups: Option<<Cgroups as Resource>::State>,
}

impl ProcessImage {
    pub fn write_parts(&self, w: &mut ImageWriter) -> Result<()> {
        w.put(Process::PART, &self.process)?;
        w.put(Identity::PART, &self.identity)?;
        w.put(Files::PART, &self.files)?;
        w.put(Signals::PART, &self.signals)?;
        w.put(Timers::PART, &self.timers)?;
        w.put(Threads::PART, &self.threads)?;
        w.put(Memory::PART, &self.memory)?;
        put_optional(w, Session::PART, &self.session)?;
        put_optional(w, JobCtl::PART, &self.jobctl)?;
        put_optional(w, Sched::PART, &self.sched)?;
        put_optional(w, Clocks::PART, &self.clocks)?;
        put_optional(w, Pipes::PART, &self.pipes)?;
        put_optional(w, SocketPairs::PART, &self.socketpairs)?;
        put_optional(w, LoneSockets::PART, &self.lonesockets)?;
        put_optional(w, Prctl::PART, &self.prctl)?;
        put_optional(w, MemoryFlags::PART, &self.memory_flags)?;
        put_optional(w, MdweState::PART, &self.mdwe)?;
        put_optional(w, FileIds::PART, &self.file_ids)?;
        put_optional(w, MappedIds::PART, &self.mapped_ids)?;
        SparseGhosts::put(&self.ghosts, w)?;
        put_optional(w, GhostMaps::PART, &self.ghost_maps)?;
        put_optional(w, SysvShm::PART, &self.sysv)?;
        put_optional(w, Locks::PART, &self.locks)?;
        put_optional(w, DeadCwd::PART, &self.dead_cwd)?;
        put_optional(w, Seccomp::PART, &self.seccomp)?;
        put_optional(w, XcompState::PART, &self.xcomp)?;
        put_optional(w, CpuState::PART, &self.cpu)?;
        put_optional(w, Cgroups::PART, &self.cgroups)?;
        Ok(())
    }

    pub fn read(img: &Image) -> Result<ProcessImage> {
        Ok(ProcessImage {
            process: img.get(Process::PART)?,
            identity: img.get(Identity::PART)?,
            files: img.get(Files::PART)?,
            signals: img.get(Signals::PART)?,
            timers: img.get(Timers::PART)?,
            threads: img.get(Threads::PART)?,
            memory: img.get(Memory::PART)?,
            session: optional(img, Session::PART)?,
            jobctl: optional(img, JobCtl::PART)?,
            sched: optional(img, Sched::PART)?,
            clocks: optional(img, Clocks::PART)?,
            pipes: optional(img, Pipes::PART)?,
            socketpairs: optional(img, SocketPairs::PART)?,
            lonesockets: optional(img, LoneSockets::PART)?,
            prctl: optional(img, Prctl::PART)?,
            memory_flags: optional(img, MemoryFlags::PART)?,
            mdwe: optional(img, MdweState::PART)?,
            file_ids: optional(img, FileIds::PART)?,
            mapped_ids: optional(img, MappedIds::PART)?,
            ghosts: SparseGhosts::join(
                optional(img, Ghosts::PART)?,
                optional(img, SparseGhosts::PART)?,
            ),
            ghost_maps: optional(img, GhostMaps::PART)?,
            sysv: optional(img, SysvShm::PART)?,
            locks: optional(img, Locks::PART)?,
            dead_cwd: optional(img, DeadCwd::PART)?,
            seccomp: optional(img, Seccomp::PART)?,
            xcomp: optional(img, XcompState::PART)?,
            cpu: optional(img, CpuState::PART)?,
            cgroups: optional(img, Cgroups::PART)?,
        })
    }
}

/// The part `part` of `img`, None if the image has none (a part added by a
/// minor format version, which older writers did not write).
fn optional<T: serde::de::DeserializeOwned>(img: &Image, part: &str) -> Result<Option<T>> {
    match img.manifest.part(part) {
        Some(_) => Ok(Some(img.get(part)?)),
        None => Ok(None),
    }
}

/// Writes `value` as part `part`, if there is one.
fn put_optional<T: serde::Serialize>(
    w: &mut ImageWriter,
    part: &str,
    value: &Option<T>,
) -> Result<()> {
    if let Some(v) = value {
        w.put(part, v)?;
    }
    Ok(())
}

/// Run every resource's precheck (read-only refusals).
pub fn precheck_all(pid: libc::pid_t) -> Result<()> {
    // The process's and the identity's checks read every thread's status.
    crate::procfs::with_proc_memo(|| prechecks(pid))
}

/// Every resource's precheck, in the order they are made: the first
/// refusal in this order is the one reported. Each is marked by its name
/// once made. The two that read every thread's status (the process's and
/// the identity's) come first and together, then four that read little or
/// nothing: a thread of [`SharedPrechecks`] makes them in one pass of
/// `/proc` reads, which the holder's thread beside the capture has begun
/// during the freeze. Those that read other files (every descriptor, the
/// mappings) come last, where the capture, when it ends first, takes them
/// from that thread.
const PRECHECKS: [Precheck; 9] = [
    ("process", Process::precheck),
    ("identity", Identity::precheck),
    ("signals", Signals::precheck),
    ("threads", Threads::precheck),
    ("session", Session::precheck),
    ("seccomp", Seccomp::precheck),
    ("files", Files::precheck),
    // With System V shared memory's (sysvshm::precheck_maps).
    ("memory", Memory::precheck),
    ("timers", Timers::precheck),
];

/// A resource's precheck, and its name.
type Precheck = (&'static str, fn(libc::pid_t) -> Result<()>);

fn prechecks(pid: libc::pid_t) -> Result<()> {
    for (name, check) in PRECHECKS {
        check(pid)?;
        crate::timing::mark(&format!("precheck: {name}"));
    }
    Ok(())
}

/// The prechecks of [`precheck_all`] shared by several threads: each
/// thread that calls [`Self::take_part`] makes the next check none has
/// begun, until none is left. So a thread that comes late (the capture,
/// once its image is written) takes what another (the thread beside it)
/// has not reached yet, instead of waiting for that thread to make them
/// all. [`Self::result`] waits for the checks begun to end and reports
/// what [`precheck_all`] would: the first refusal in [`PRECHECKS`]' order
/// (once one is found no further check is begun).
pub struct SharedPrechecks {
    pid: libc::pid_t,
    /// [`PRECHECKS`] (others in tests).
    list: &'static [Precheck],
    /// The next check to take.
    next: std::sync::atomic::AtomicUsize,
    /// A check refused: those taken after it are not made.
    refused: std::sync::atomic::AtomicBool,
    /// How many checks were taken and have ended (made, or not made after
    /// a refusal), and the first refusal by order.
    state: std::sync::Mutex<(usize, Option<(usize, EngineError)>)>,
    ended: std::sync::Condvar,
}

impl SharedPrechecks {
    pub fn new(pid: libc::pid_t) -> SharedPrechecks {
        Self::of(pid, &PRECHECKS)
    }

    fn of(pid: libc::pid_t, list: &'static [Precheck]) -> SharedPrechecks {
        SharedPrechecks {
            pid,
            list,
            next: std::sync::atomic::AtomicUsize::new(0),
            refused: std::sync::atomic::AtomicBool::new(false),
            state: std::sync::Mutex::new((0, None)),
            ended: std::sync::Condvar::new(),
        }
    }

    /// Takes the checks no thread has taken, one after the other, until
    /// none is left, in one pass of `/proc` reads of this thread's (see
    /// [`crate::procfs::with_proc_memo`]). Returns how many it made.
    pub fn take_part(&self) -> usize {
        use std::sync::atomic::Ordering;
        crate::procfs::with_proc_memo(|| {
            let mut made = 0;
            loop {
                let i = self.next.fetch_add(1, Ordering::SeqCst);
                let Some((name, check)) = self.list.get(i) else {
                    return made;
                };
                // Ends the check even if it panics (as a refusal), so that
                // `result` never waits for it.
                let mut ending = Ending {
                    checks: self,
                    i,
                    name,
                    r: None,
                };
                if self.refused.load(Ordering::SeqCst) {
                    ending.r = Some(Ok(()));
                } else {
                    made += 1;
                    ending.r = Some(check(self.pid));
                    crate::timing::mark(&format!("precheck: {name}"));
                }
            }
        })
    }

    /// Records the end of check `i` with `r`.
    fn end(&self, i: usize, r: Result<()>) {
        use std::sync::atomic::Ordering;
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = r {
            self.refused.store(true, Ordering::SeqCst);
            if st.1.as_ref().is_none_or(|(j, _)| i < *j) {
                st.1 = Some((i, e));
            }
        }
        st.0 += 1;
        self.ended.notify_all();
    }

    /// Once every check has ended: the first refusal by order, or Ok.
    /// Call it after [`Self::take_part`], which leaves no check untaken
    /// (each taken one then ends in the thread that took it).
    pub fn result(&self) -> Result<()> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while st.0 < self.list.len() {
            st = self.ended.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        match st.1.take() {
            Some((_, e)) => Err(e),
            None => Ok(()),
        }
    }
}

/// A check of [`SharedPrechecks`] taken: its end, recorded when dropped
/// (without a result, if the check panicked: a refusal).
struct Ending<'a> {
    checks: &'a SharedPrechecks,
    i: usize,
    name: &'static str,
    r: Option<Result<()>>,
}

impl Drop for Ending<'_> {
    fn drop(&mut self) {
        let r = self.r.take().unwrap_or_else(|| {
            Err(EngineError::Other(format!(
                "the check of the process's {} ended without a result",
                self.name
            )))
        });
        self.checks.end(self.i, r);
    }
}

/// How long a state that usually passes in a moment
/// ([`EngineError::Busy`]: a file lock another process waits for, an
/// inotify event not read yet)
/// is waited out by default before its refusal stands.
pub const BUSY_WAIT: Duration = Duration::from_secs(1);

/// Between two looks at a running process that is busy.
const BUSY_POLL: Duration = Duration::from_micros(50);

/// [`precheck_all`], again while it refuses only a state that usually
/// passes in a moment ([`EngineError::Busy`]), until it passes or `wait`
/// has gone by; then that refusal stands. The process is not touched.
pub fn precheck_settled(pid: libc::pid_t, wait: Duration) -> Result<()> {
    let end = Instant::now() + wait;
    loop {
        match precheck_all(pid) {
            // All of it again, not the locks alone first: the checks must
            // themselves see a moment without a lock, and a program that
            // lets go for microseconds shows one to a few in a hundred looks.
            Err(EngineError::Busy { .. }) if Instant::now() < end => std::thread::sleep(BUSY_POLL),
            Err(EngineError::Busy { pid, what }) => {
                return Err(busy(pid, waited(what, "still so after", wait)))
            }
            r => return r,
        }
    }
}

/// `what` a refusal as busy names, with how it lasted through a wait of
/// `wait` (nothing to add without a wait).
fn waited(what: String, how: &str, wait: Duration) -> String {
    if wait.is_zero() {
        what
    } else {
        format!("{what}, {how} a wait of {} ms", wait.as_millis())
    }
}

/// Looks at the file locks of the running process `pid` (every
/// [`BUSY_POLL`]) until none of them is waited for by another process, or
/// `end` has come: the lock still waited for then, or `None`.
fn lock_left_at(pid: libc::pid_t, end: Instant) -> Result<Option<String>> {
    loop {
        match locks::contested(pid)? {
            Some(_) if Instant::now() < end => std::thread::sleep(BUSY_POLL),
            left => return Ok(left),
        }
    }
}

/// Freezes `pid` (calling `before` just before each try) at a moment no
/// other process waits for a file lock it holds (the waiter would get the
/// lock while it moves: see [`locks`]). A freeze that finds one lets the
/// process go again at once, and the next try waits until the running
/// process shows none, so a lock contended throughout costs no freeze.
/// After `wait`, a lock still waited for is refused
/// ([`EngineError::Busy`]), the process running as before.
pub fn freeze_settled(
    pid: libc::pid_t,
    wait: Duration,
    mut before: impl FnMut(),
) -> Result<Frozen> {
    let end = Instant::now() + wait;
    let mut tries = 0u32;
    loop {
        tries += 1;
        if let Some(what) = lock_left_at(pid, end)? {
            let how = match tries {
                1 => "so throughout".to_string(),
                n => format!("so at each of {} freezes in", n - 1),
            };
            return Err(busy(pid, waited(what, &how, wait)));
        }
        before();
        let frozen = Frozen::freeze(pid)?;
        // An error drops `frozen`, which lets the process go.
        match locks::contested(pid)? {
            None => return Ok(frozen),
            Some(what) => {
                frozen.detach()?;
                tracing::debug!(
                    "process {pid}: frozen holding a lock waited for, let go (try {tries})"
                );
                if Instant::now() >= end {
                    let how = format!("so at each of {tries} freezes in");
                    return Err(busy(pid, waited(what, &how, wait)));
                }
            }
        }
    }
}

#[cfg(test)]
pub mod tests_support {
    use super::*;
    use crate::resources::{files, identity, memory, process, signals, threads, timers};

    /// A child process of a test, killed with its own children when
    /// dropped: a test's processes go even when it fails.
    pub struct Reaped(pub std::process::Child);

    impl Reaped {
        pub fn pid(&self) -> libc::pid_t {
            self.0.id() as libc::pid_t
        }
    }

    impl Drop for Reaped {
        fn drop(&mut self) {
            for k in process::children(self.pid()) {
                // SAFETY: kill takes no pointers.
                unsafe { libc::kill(k, libc::SIGKILL) };
            }
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// A thread of this process that waits until the returned sender is
    /// dropped, its id, and its handle to join.
    pub fn parked_thread() -> (
        libc::pid_t,
        std::sync::mpsc::Sender<()>,
        std::thread::JoinHandle<()>,
    ) {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid takes no arguments.
            let tid = unsafe { libc::syscall(libc::SYS_gettid) } as libc::pid_t;
            tx.send(tid).unwrap();
            let _ = done_rx.recv();
        });
        (rx.recv().unwrap(), done_tx, t)
    }

    /// A process image with nothing in it, for tests of image plumbing.
    pub fn empty_image() -> ProcessImage {
        ProcessImage {
            process: process::ProcessState {
                pid: 1,
                comm: "t".into(),
                cmdline: vec![],
            },
            identity: identity::IdentityState {
                creds: identity::Creds {
                    uid: [0; 4],
                    gid: [0; 4],
                    groups: vec![],
                    caps: [0; 5],
                    securebits: 0,
                    no_new_privs: false,
                },
                dumpable: 1,
                personality: 0,
                rlimits: vec![],
            },
            files: files::FilesState {
                cwd: "/".into(),
                umask: 0o22,
                fds: vec![],
            },
            signals: signals::SignalsState {
                actions: vec![],
                shared_pending: vec![],
            },
            timers: timers::TimersState {
                itimers: vec![],
                posix: vec![],
            },
            threads: threads::ThreadsState { threads: vec![] },
            memory: memory::MemoryState {
                vmas: vec![],
                mm: Default::default(),
                vdso: None,
                vdso_text: None,
            },
            session: None,
            jobctl: None,
            sched: None,
            clocks: None,
            pipes: None,
            socketpairs: None,
            lonesockets: None,
            prctl: None,
            memory_flags: None,
            mdwe: None,
            file_ids: None,
            mapped_ids: None,
            ghosts: None,
            ghost_maps: None,
            sysv: None,
            locks: None,
            dead_cwd: None,
            seccomp: None,
            xcomp: None,
            cpu: None,
            cgroups: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::session::SessionState;

    fn roundtrip(pi: &ProcessImage) -> (ProcessImage, pmig_image::Manifest) {
        let d = tempfile::tempdir().unwrap();
        let mut w = ImageWriter::create(d.path()).unwrap();
        pi.write_parts(&mut w).unwrap();
        let m = w.finish(crate::dump::manifest_for(1)).unwrap();
        let img = Image::open_verified(d.path()).unwrap();
        (ProcessImage::read(&img).unwrap(), m)
    }

    #[test]
    fn image_without_session_part_still_reads() {
        // What a format 1.0 writer produced: no `session` part.
        let (pi, m) = roundtrip(&tests_support::empty_image());
        assert!(m.part(Session::PART).is_none());
        assert!(pi.session.is_none());
    }

    #[test]
    fn session_part_round_trips() {
        let mut pi = tests_support::empty_image();
        let s = SessionState {
            pid: 7,
            sid: 7,
            pgid: 7,
            tpgid: 7,
            ctty: None,
        };
        pi.session = Some(s.clone());
        let (back, m) = roundtrip(&pi);
        assert!(m.part(Session::PART).is_some());
        assert_eq!(back.session, Some(s));
    }

    #[test]
    fn jobctl_part_is_optional_and_round_trips() {
        // Format 1.1 and older: no `jobctl` part, the process runs.
        let (pi, m) = roundtrip(&tests_support::empty_image());
        assert!(m.part(JobCtl::PART).is_none());
        assert!(pi.jobctl.is_none());
        let mut pi = tests_support::empty_image();
        let j = crate::resources::jobctl::JobCtlState {
            stopped_by: Some(libc::SIGTSTP),
        };
        pi.jobctl = Some(j.clone());
        let (back, m) = roundtrip(&pi);
        assert!(m.part(JobCtl::PART).is_some());
        assert_eq!(back.jobctl, Some(j));
    }

    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    /// Waits (bounded) until `flag` is set.
    fn wait_for(flag: &AtomicBool) {
        let end = Instant::now() + Duration::from_secs(10);
        while !flag.load(Ordering::SeqCst) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(flag.load(Ordering::SeqCst), "waited 10 s in vain");
    }

    static FIRST_BEGUN: AtomicBool = AtomicBool::new(false);
    static FIRST_GO: AtomicBool = AtomicBool::new(false);
    static MADE: AtomicUsize = AtomicUsize::new(0);

    fn refused(what: &str) -> Result<()> {
        Err(EngineError::Other(format!("refused by {what}")))
    }

    const ORDERED: [Precheck; 4] = [
        ("first", |_| {
            FIRST_BEGUN.store(true, Ordering::SeqCst);
            wait_for(&FIRST_GO);
            MADE.fetch_add(1, Ordering::SeqCst);
            refused("first")
        }),
        ("second", |_| {
            MADE.fetch_add(1, Ordering::SeqCst);
            refused("second")
        }),
        ("third", |_| {
            MADE.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }),
        ("fourth", |_| {
            MADE.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }),
    ];

    #[test]
    fn shared_prechecks_report_the_first_refusal_by_order_and_make_no_check_after_one() {
        let checks = std::sync::Arc::new(SharedPrechecks::of(1, &ORDERED));
        let other = checks.clone();
        // It takes the first check, which waits.
        let t = std::thread::spawn(move || other.take_part());
        wait_for(&FIRST_BEGUN);
        // This thread takes the second, refused at once: the two after it
        // are not made.
        assert_eq!(checks.take_part(), 1);
        assert_eq!(MADE.load(Ordering::SeqCst), 1);
        FIRST_GO.store(true, Ordering::SeqCst);
        // The first, refused later, is the one reported.
        let e = checks.result().unwrap_err().to_string();
        assert!(e.contains("refused by first"), "{e}");
        assert_eq!(t.join().unwrap(), 1);
        assert_eq!(MADE.load(Ordering::SeqCst), 2);
    }

    static PANICS: AtomicUsize = AtomicUsize::new(0);

    const PANICKING: [Precheck; 2] = [
        ("first", |_| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            panic!("a check that panics")
        }),
        ("second", |_| Ok(())),
    ];

    #[test]
    fn a_shared_precheck_that_panics_is_a_refusal_not_a_wait() {
        let checks = std::sync::Arc::new(SharedPrechecks::of(1, &PANICKING));
        let other = checks.clone();
        assert!(std::thread::spawn(move || other.take_part())
            .join()
            .is_err());
        assert_eq!(PANICS.load(Ordering::SeqCst), 1);
        // What is left is taken here; the result comes at once.
        checks.take_part();
        let e = checks.result().unwrap_err().to_string();
        assert!(
            e.contains("check of the process's first ended without a result"),
            "{e}"
        );
    }

    #[test]
    fn shared_prechecks_find_what_the_checks_one_after_the_other_find() {
        use tests_support::Reaped;
        // A process with nothing to refuse, and one with a child.
        let plain = Reaped(
            std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .unwrap(),
        );
        let parent = Reaped(
            std::process::Command::new("sh")
                .args(["-c", "sleep 30 & wait"])
                .spawn()
                .unwrap(),
        );
        // The shell's child is there once it shows in its children.
        let end = Instant::now() + Duration::from_secs(10);
        while crate::resources::process::children(parent.pid()).is_empty() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
        }
        for pid in [plain.pid(), parent.pid()] {
            let alone = precheck_all(pid).map_err(|e| e.to_string());
            let checks = std::sync::Arc::new(SharedPrechecks::new(pid));
            let other = checks.clone();
            let t = std::thread::spawn(move || other.take_part());
            let here = checks.take_part();
            let shared = checks.result().map_err(|e| e.to_string());
            let beside = t.join().unwrap();
            assert_eq!(shared, alone);
            if alone.is_ok() {
                assert_eq!(here + beside, PRECHECKS.len());
            }
        }
        assert!(precheck_all(parent.pid()).is_err());
    }
}
