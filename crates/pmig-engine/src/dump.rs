//! `pmig dump`: freeze, capture, write, verify, then kill or resume.

use crate::error::{EngineError, Result};
use crate::image::{freeze_settled, precheck_all, precheck_settled, ProcessImage};
use crate::ptrace::Frozen;
use crate::resources::{
    cgroups::Cgroups,
    clocks::Clocks,
    deaddirs,
    files::{FileIds, Files},
    ghosts::Ghosts,
    identity::Identity,
    jobctl::JobCtl,
    locks::Locks,
    lonesockets::LoneSockets,
    memory::{Layout, Memory},
    pipes::Pipes,
    prctl::Prctl,
    process::Process,
    sched::Sched,
    session::Session,
    signals::Signals,
    socketpairs::SocketPairs,
    sysvshm::SysvShm,
    threads::Threads,
    timers::Timers,
    xcomp::Xcomp,
    Capture, Resource,
};
use libc::pid_t;
use pmig_image::{Image, ImageWriter, Manifest};
use std::path::Path;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct DumpOptions {
    pub leave_running: bool,
    /// How long a state that usually passes (a file lock held, an inotify
    /// event not read yet) is waited out before the dump is refused
    /// ([`crate::image::BUSY_WAIT`] by default).
    pub busy_wait: Duration,
}

impl Default for DumpOptions {
    fn default() -> Self {
        DumpOptions {
            leave_running: false,
            busy_wait: crate::image::BUSY_WAIT,
        }
    }
}

#[derive(Debug, Clone)]
pub struct DumpReport {
    pub pid: pid_t,
    pub threads: usize,
    pub vmas: usize,
    pub page_bytes: u64,
    /// From the freeze to the end of writing the image.
    pub frozen_for: Duration,
    pub capture: Duration,
    pub verify: Duration,
}

/// Capture every resource of a frozen process, in dependency order: the
/// parts that run code inside the process first, memory last (after the
/// scratch page is gone).
pub fn capture(frozen: &mut Frozen, w: &mut ImageWriter) -> Result<ProcessImage> {
    capture_filtered(frozen, w, None)
}

/// [`capture`], saving only the populated pages `filter` accepts.
pub fn capture_filtered(
    frozen: &mut Frozen,
    w: &mut ImageWriter,
    filter: Option<&dyn crate::resources::memory::PageFilter>,
) -> Result<ProcessImage> {
    capture_with(frozen, w, filter, Aids::default()).map(|o| o.image)
}

/// Work done for a capture outside the stop or alongside it.
#[derive(Default)]
pub struct Aids {
    /// The mappings as read before the freeze (see [`Layout`]).
    pub layout: Option<Layout>,
    /// A [`PreScan`] another thread makes beside the capture (see
    /// [`SideScan`](crate::resources::memory::SideScan)).
    pub prescan: Option<crate::resources::memory::SideScan>,
    /// See [`Capture::scratch_mapped`](crate::resources::Capture).
    pub scratch_mapped: Option<std::sync::mpsc::Sender<()>>,
    /// See [`Capture::defer_population`](crate::resources::Capture).
    pub defer_population: bool,
    /// See [`Capture::written_since`](crate::resources::Capture).
    pub written_since: Option<Vec<(u64, u64)>>,
    /// See [`Capture::written_apart`](crate::resources::Capture).
    pub written_apart: bool,
    /// See [`Capture::copy_buffer`](crate::resources::Capture).
    pub copy_buffer: Option<Vec<u8>>,
    /// A lazy handover's capture: of the private memory, only the pages
    /// [`crate::lazy::handover_pages`] names and these are saved, the
    /// former found from the threads' state the capture reads anyway (not
    /// read again before it, which would also hold back the scan beside
    /// it). Takes the place of `filter`; the pages kept are returned in
    /// [`CaptureOut::kept`].
    pub handover: Option<std::collections::HashSet<u64>>,
}

/// What [`capture_with`] returns.
pub struct CaptureOut {
    pub image: ProcessImage,
    /// The layout whose flags the capture took without reading them at the
    /// stop (see
    /// [`Layout::current`](crate::resources::memory::Layout::current)).
    pub layout_used: Option<crate::resources::memory::Layout>,
    /// With [`Aids::handover`]: the pages the handover kept.
    pub kept: Option<std::collections::HashSet<u64>>,
}

/// [`capture_filtered`] with `aids`.
pub fn capture_with(
    frozen: &mut Frozen,
    w: &mut ImageWriter,
    filter: Option<&dyn crate::resources::memory::PageFilter>,
    aids: Aids,
) -> Result<CaptureOut> {
    // The capture injects calls into the process: on one CPU with it
    // (see `Frozen::colocate`); its own affinity is captured.
    frozen.colocate();
    let r = capture_colocated(frozen, w, filter, aids);
    frozen.release_cpu();
    r
}

fn capture_colocated(
    frozen: &mut Frozen,
    w: &mut ImageWriter,
    filter: Option<&dyn crate::resources::memory::PageFilter>,
    aids: Aids,
) -> Result<CaptureOut> {
    // The handover's pages, once the threads are read (see `Aids::handover`).
    let late_keep: crate::resources::memory::RangeFilter;
    let mut kept = None;
    let mut cx = Capture::new(frozen, w.pages());
    cx.filter = filter;
    cx.layout = aids.layout;
    cx.prescan = aids.prescan;
    cx.scratch_mapped = aids.scratch_mapped;
    cx.defer_population = aids.defer_population;
    cx.written_since = aids.written_since;
    cx.written_apart = aids.written_apart;
    cx.copy_buffer = aids.copy_buffer;
    let t = Instant::now();
    let lap = |what: &str| {
        tracing::debug!("capture {what}: {:.2} ms", t.elapsed().as_secs_f64() * 1e3);
        crate::timing::mark(&format!("capture: {what}"));
    };
    crate::resources::threads::refuse_32_bit_code(cx.frozen)?;
    // First: it refuses what it cannot move before any call is injected.
    let seccomp = crate::resources::seccomp::Seccomp::capture(&mut cx)?;
    let cpu = crate::resources::cpu::Cpu::capture(&mut cx)?;
    let process = Process::capture(&mut cx)?;
    lap("process");
    // What these captures ask the process goes to it in one batch of
    // injected calls (one stop), at the first of them.
    Identity::ask(&mut cx)?;
    Signals::ask(&mut cx)?;
    Timers::ask(&mut cx)?;
    Threads::ask(&mut cx)?;
    Prctl::ask(&mut cx)?;
    Xcomp::ask(&mut cx)?;
    Memory::ask(&mut cx)?;
    let identity = Identity::capture(&mut cx)?;
    // Only a restore that opens files with the process's own ids (a
    // filesystem uid other than root's) uses their inodes.
    cx.keep_inodes = identity.creds.uid[3] != 0;
    lap("identity");
    let files = Files::capture(&mut cx)?;
    let pipes = Pipes::capture(&mut cx)?;
    let socketpairs = SocketPairs::capture(&mut cx)?;
    let lonesockets = LoneSockets::capture(&mut cx)?;
    // The locks the files capture found.
    let locks = Locks::capture(&mut cx)?;
    let dead_cwd = deaddirs::dead_cwd(cx.pid)?;
    lap("files");
    let session = Session::capture(&mut cx)?;
    lap("session");
    let signals = Signals::capture(&mut cx)?;
    lap("signals");
    let timers = Timers::capture(&mut cx)?;
    lap("timers");
    let threads = Threads::capture(&mut cx)?;
    lap("threads");
    if let Some(also) = aids.handover {
        let mut k = crate::lazy::handover_of(cx.frozen, &threads);
        k.extend(also);
        late_keep = crate::resources::memory::RangeFilter::of_pages(k.clone());
        cx.filter = Some(&late_keep);
        kept = Some(k);
        lap("handover pages");
    }
    let prctl = Prctl::capture(&mut cx)?;
    let xcomp = Xcomp::capture(&mut cx)?;
    lap("prctl");
    let memory = Memory::capture(&mut cx)?;
    lap("memory");
    // After memory, which finds the segments' mappings.
    let sysv = SysvShm::capture(&mut cx)?;
    // After both files and memory, which list the deleted files and memfds
    // the process holds and maps.
    let ghosts = Ghosts::capture(&mut cx)?;
    let ghost_maps = cx.ghost_extra.take();
    lap("ghosts");
    let jobctl = JobCtl::capture(&mut cx)?;
    let sched = Sched::capture(&mut cx)?;
    let clocks = Clocks::capture(&mut cx)?;
    let cgroups = Cgroups::capture(&mut cx)?;
    let used = cx.layout_used.take();
    let memory_flags = std::mem::take(&mut cx.memory_flags);
    let mdwe = cx.mdwe.take();
    let (file_ids, mapped_ids) = if cx.keep_inodes {
        let boot = FileIds::this_boot();
        (
            std::mem::take(&mut cx.file_ids).stamped(&boot),
            std::mem::take(&mut cx.mapped_ids).stamped(&boot),
        )
    } else {
        (None, None)
    };
    Ok(CaptureOut {
        image: ProcessImage {
            process,
            identity,
            files,
            signals,
            timers,
            threads,
            memory,
            session: Some(session),
            jobctl: Some(jobctl),
            sched: Some(sched),
            clocks: Some(clocks),
            // Only images with pipes need format 1.3.
            pipes: (!pipes.pipes.is_empty()).then_some(pipes),
            // Only images with a unix socket pair need format 1.18.
            socketpairs: (!socketpairs.pairs.is_empty()).then_some(socketpairs),
            // Only images with a lone unix socket need format 1.19.
            lonesockets: (!lonesockets.sockets.is_empty()).then_some(lonesockets),
            // Only images with an attribute set need format 1.4.
            prctl: (!prctl.is_default()).then_some(prctl),
            memory_flags: (!memory_flags.is_empty()).then_some(memory_flags),
            // Only images of a process with MDWE need format 1.5.
            mdwe,
            // Only images of an unprivileged process need formats 1.7 and 1.8.
            file_ids,
            mapped_ids,
            // Only images of a process holding a deleted file need format 1.9.
            ghosts: (!ghosts.files.is_empty()).then_some(ghosts),
            // Only images with a memfd or a mapped deleted file need 1.10.
            ghost_maps,
            // Only images with System V shared memory need format 1.12.
            sysv: (!sysv.segments.is_empty()).then_some(sysv),
            // Only images of a process holding a file lock need format 1.13.
            locks: (!locks.locks.is_empty()).then_some(locks),
            // Only images of a process in a deleted directory need 1.14.
            dead_cwd,
            // Only images of a process with seccomp filters need 1.15.
            seccomp: (!seccomp.is_empty()).then_some(seccomp),
            // Only images of a process that may use AMX need format 1.17.
            xcomp,
            cpu: Some(cpu),
            // Only images of a process in cgroups other than pmig's need
            // format 1.20.
            cgroups: (!cgroups.groups.is_empty()).then_some(cgroups),
        },
        layout_used: used,
        kept,
    })
}

/// Write the parts of a captured image and its manifest (the image is
/// complete afterwards). Checks that every page run lies inside the page
/// data that was written.
pub fn finish_image(img: &ProcessImage, mut w: ImageWriter, pid: pid_t) -> Result<Manifest> {
    let written = w.pages().offset();
    if let Some(r) = img
        .memory
        .vmas
        .iter()
        .flat_map(|v| &v.runs)
        .find(|r| r.offset + r.len > written)
    {
        return Err(EngineError::Other(format!(
            "internal error: page run at {:#x} lies beyond the written page data",
            r.addr
        )));
    }
    img.write_parts(&mut w)?;
    Ok(w.finish(manifest_for(pid))?)
}

pub fn manifest_for(pid: pid_t) -> Manifest {
    Manifest {
        pmig_version: env!("CARGO_PKG_VERSION").to_string(),
        kernel_release: crate::sys::kernel_release(),
        hostname: crate::sys::hostname(),
        pid,
        created_unix_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
        parts: vec![],
    }
}

pub fn dump(pid: pid_t, dir: &Path, opts: &DumpOptions) -> Result<DumpReport> {
    if pid <= 0 || !Path::new(&format!("/proc/{pid}")).exists() {
        return Err(EngineError::NoProcess(pid));
    }
    if pid == std::process::id() as pid_t {
        return Err(EngineError::Other("pmig cannot dump itself".into()));
    }
    // Refuse unsupported state before touching the process.
    precheck_settled(pid, opts.busy_wait)?;
    // Read before the freeze: about 0.1 ms of CPUID on a VM.
    crate::resources::cpu::CpuState::here();
    let mut t0 = Instant::now();
    let mut frozen = freeze_settled(pid, opts.busy_wait, || t0 = Instant::now())?;
    tracing::debug!("freeze: {:.2} ms", t0.elapsed().as_secs_f64() * 1e3);
    // Anything that can fail from here on leaves the process as it was:
    // `frozen` detaches on drop.
    precheck_all(pid)?;
    tracing::debug!(
        "precheck after freeze: {:.2} ms",
        t0.elapsed().as_secs_f64() * 1e3
    );
    let mut w = ImageWriter::create(dir)?;
    let img = capture(&mut frozen, &mut w)?;
    let capture_t = t0.elapsed();
    finish_image(&img, w, pid)?;
    let frozen_for = t0.elapsed();
    // Verify the image we wrote before the process is killed.
    let tv = Instant::now();
    Image::open_verified(dir)?;
    let verify = tv.elapsed();
    let report = DumpReport {
        pid,
        threads: img.threads.threads.len(),
        vmas: img.memory.vmas.len(),
        page_bytes: img.memory.image_bytes(),
        frozen_for,
        capture: capture_t,
        verify,
    };
    if opts.leave_running {
        frozen.detach()?;
    } else {
        frozen.kill()?;
    }
    Ok(report)
}
