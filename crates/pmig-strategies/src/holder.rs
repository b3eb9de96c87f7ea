//! The *holder*: a helper process that freezes the migrating process, captures it
//! into an image directory, and keeps it frozen until the daemon says `kill` (the
//! destination runs it) or `resume` (anything went wrong).
//!
//! Why a separate process rather than a daemon thread:
//! * ptrace belongs to the thread that seized; a short-lived single-threaded
//!   process owns the frozen process for exactly as long as needed;
//! * it can join the target's mount namespace first (`ip netns exec` gives every
//!   command its own one, and the engine refuses a process in another mount
//!   namespace than its own), which a multithreaded daemon cannot do;
//! * if the daemon dies, the holder reads end-of-file on its stdin and resumes the
//!   process: nothing is lost before the handover, even on a daemon crash.
//!
//! Protocol on the holder's stdio, one JSON object per line:
//!
//! ```text
//! holder → daemon  {"captured":{"frozen_ns":…,"captured_ns":…,"page_bytes":…,"threads":…}}
//!                  or {"error":"…"} (the process was not touched, or was resumed)
//! daemon → holder  handover [ADDR ID NODE KEY]   (any number of times)
//!                  kill | resume          (end of file = resume, or kill
//!                                          after a handover)
//! holder → daemon  {"done":"killed"} | {"done":"resumed"} | {"error":"…"}
//! ```
//!
//! A process that holds file locks has them let go in the frozen original
//! once its capture has succeeded, before `captured` is said: the restore on
//! the destination takes them. `resume` takes them back first (waiting up
//! to 5 s for the failed copy to let them go); if another process holds one
//! by then, the original is left stopped (SIGSTOP) and the holder says so.
//!
//! After `handover` the original never runs again. With the destination's
//! `ADDR`, the migration `ID`, this node's name and the cluster key (hex),
//! the holder also passes on the signals sent to the frozen original after
//! its capture: it looks every [`LATE_SIGNAL_POLL`] and once more before
//! the kill, and sends what it finds to the destination (`Signals`,
//! docs/protocol.md §6.3h), which delivers it to the copy.
//!
//! A *primed* holder (`--hold-wait`, [`Primed`]) first does everything that
//! comes before the freeze (the mount namespace, the checks, the mappings
//! with their flags: about 13 ms per GiB) and then waits, while the process
//! runs on untouched:
//!
//! ```text
//! holder → daemon  "ready" | {"error":"…"}
//! daemon → holder  refresh        (read the mappings again; answered by ready)
//!                  precapture DIR (freeze, capture into DIR, resume; answered
//!                                  by {"precaptured":{…}} or {"error":"…"},
//!                                  after which the holder has exited)
//!                  go             (freeze and capture, then as above)
//!                  end of file    (exit; the process was never touched)
//! ```
//!
//! A *precapture* is a skeleton's first capture (post-copy, ampom: see
//! `pmig_engine::skeleton`): made while the process runs, with a short
//! freeze of its own. The capture at `go` then keeps every page it kept
//! besides its own handover pages, so that the skeleton holds no page the
//! image of the stop does not replace.
//!
//! The capture at the stop of pre-copy, queued-pre-copy
//! ([`CaptureMode::WrittenApart`]) and assisted-post-copy
//! ([`CaptureMode::HandoverWritten`]) also leaves, next to its list of
//! write-tracked ranges, the pages of those ranges written since
//! they were last protected, as its page scan at the freeze found them
//! ([`written_at_freeze_file`]): the source then need not scan the frozen
//! process again.
//!
//! Pre-copy primes its holder during the rounds: the pages written between
//! its decision to stop and the freeze are then not those of a smaps read.

use crate::clock::{mark, mono_ns};
use crate::error::{io_err, Result, StrategyError};
use crate::Host;
use pmig_engine::dump::{capture_with, finish_image, Aids};
use pmig_engine::image::{freeze_settled, precheck_settled, SharedPrechecks, BUSY_WAIT};
use pmig_engine::ptrace::Frozen;
use pmig_engine::resources::locks::LocksState;
use pmig_engine::resources::memory::{Layout, OnScan, ScanFor, SideScanner};
use pmig_engine::resources::signals::LateSignals;
use pmig_image::ImageWriter;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

/// What the holder reports once the image is complete.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Captured {
    /// CLOCK_MONOTONIC just before the freeze.
    pub frozen_ns: u64,
    /// CLOCK_MONOTONIC when the image was complete.
    pub captured_ns: u64,
    pub page_bytes: u64,
    pub threads: usize,
    /// The process has System V shared memory attached (see
    /// [`Holder::handed_over`]).
    #[serde(default)]
    pub sysv: bool,
}

impl Captured {
    /// Logs the capture of process `pid`: how long it was frozen before
    /// its image was complete, and the pages in it (`what` they are).
    pub(crate) fn log(&self, pid: i32, what: &str) {
        tracing::info!(
            "process {pid} frozen and captured in {:.1} ms ({:.1} MiB of pages {what})",
            (self.captured_ns - self.frozen_ns) as f64 / 1e6,
            self.page_bytes as f64 / (1 << 20) as f64
        );
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum HolderMsg {
    Ready,
    Precaptured(Captured),
    Captured(Captured),
    Done(String),
    Error(String),
}

fn say(m: &HolderMsg) {
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, m);
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

/// Joins the mount namespace of `pid` if it differs from ours (needs a
/// single-threaded caller and CAP_SYS_ADMIN).
fn join_mount_ns(pid: i32) -> Result<()> {
    let theirs = std::fs::read_link(format!("/proc/{pid}/ns/mnt")).map_err(|e| {
        // An exited process not yet reaped keeps its pid but not its namespaces.
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit(')')
                    .next()?
                    .split_whitespace()
                    .next()
                    .map(String::from)
            });
        match state.as_deref() {
            Some("Z") | Some("X") => StrategyError::Other(format!(
                "process {pid} has exited (a zombie its parent has not reaped)"
            )),
            _ => io_err(format!("read the mount namespace of process {pid}"))(e),
        }
    })?;
    let ours =
        std::fs::read_link("/proc/self/ns/mnt").map_err(io_err("read our mount namespace"))?;
    if theirs == ours {
        return Ok(());
    }
    let f = std::fs::File::open(format!("/proc/{pid}/ns/mnt"))
        .map_err(io_err(format!("open the mount namespace of process {pid}")))?;
    // SAFETY: setns on a valid namespace fd; we are single-threaded here.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNS) } < 0 {
        return Err(StrategyError::Io {
            what: format!("join the mount namespace of process {pid}"),
            source: std::io::Error::last_os_error(),
        });
    }
    tracing::debug!("holder joined the mount namespace of {pid}");
    Ok(())
}

/// Which pages the holder puts in the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaptureMode {
    /// Every populated page (stop-copy).
    Full,
    /// Private anonymous memory only where the restore itself touches it
    /// (rseq areas, stack pages); the rest stays at the source (post-copy).
    Handover,
    /// [`CaptureMode::Handover`] without scanning writable private anonymous
    /// memory at the stop: the image lists it as wholly present, and the
    /// source scans its frozen copy after the handover (post-copy, ampom).
    HandoverDeferred,
    /// Pre-copy: in the write-tracked ranges listed in this file (one
    /// `start len` per line, hex), only pages written since the last scan;
    /// everything else in full.
    WrittenSince(std::path::PathBuf),
    /// Pre-copy: nothing of the write-tracked ranges listed in this file;
    /// everything else in full. The source sends the pages written since
    /// the last round itself, read from the frozen process (its last round).
    WrittenApart(std::path::PathBuf),
    /// [`CaptureMode::HandoverDeferred`] after the private copies of file
    /// mappings were sent while the process ran (post-copy, ampom): in the
    /// write-tracked ranges listed in this file, only the pages written
    /// since.
    HandoverDeferredWritten(std::path::PathBuf),
    /// [`CaptureMode::Handover`] after round 0 sent the memory while the
    /// process ran (assisted-post-copy): writable private anonymous memory
    /// scanned, and of its pages only those the restore touches; in the
    /// write-tracked ranges listed in this file, only the pages written
    /// since (round 0's copies of the others are on the destination).
    HandoverWritten(std::path::PathBuf),
}

impl CaptureMode {
    pub fn arg(&self) -> String {
        match self {
            CaptureMode::Full => "full".into(),
            CaptureMode::Handover => "handover".into(),
            CaptureMode::HandoverDeferred => "handover-deferred".into(),
            CaptureMode::WrittenSince(p) => format!("written:{}", p.display()),
            CaptureMode::WrittenApart(p) => format!("written-apart:{}", p.display()),
            CaptureMode::HandoverDeferredWritten(p) => {
                format!("handover-deferred-written:{}", p.display())
            }
            CaptureMode::HandoverWritten(p) => format!("handover-written:{}", p.display()),
        }
    }

    pub fn parse(s: &str) -> Option<CaptureMode> {
        match s {
            "full" => Some(CaptureMode::Full),
            "handover" => Some(CaptureMode::Handover),
            "handover-deferred" => Some(CaptureMode::HandoverDeferred),
            _ => match s.strip_prefix("handover-deferred-written:") {
                Some(p) => Some(CaptureMode::HandoverDeferredWritten(p.into())),
                None if s.starts_with("handover-written:") => s
                    .strip_prefix("handover-written:")
                    .map(|p| CaptureMode::HandoverWritten(p.into())),
                None if s.starts_with("written-apart:") => s
                    .strip_prefix("written-apart:")
                    .map(|p| CaptureMode::WrittenApart(p.into())),
                None => s
                    .strip_prefix("written:")
                    .map(|p| CaptureMode::WrittenSince(p.into())),
            },
        }
    }
}

/// A frozen and captured process, as the holder keeps it.
struct Held {
    frozen: Frozen,
    captured: Captured,
    /// The layout whose flags the capture took instead of reading them at
    /// the stop, if it did (see [`Layout::current`]).
    layout: Option<Layout>,
    /// The signals sent to it since the capture.
    late: LateSignals,
    /// The file locks it holds, which `holder_main` lets go in it for the
    /// copy to take (and takes back if the migration fails).
    locks: Option<LocksState>,
}

/// How often, and after how long, a capture refused as busy
/// ([`pmig_engine::EngineError::Busy`]) is tried again.
const BUSY_RETRIES: usize = 5;
const BUSY_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

/// Freezes `pid` and captures it into `dir`, keeping `also` (see [`Ready`]).
fn freeze_and_capture(
    pid: i32,
    dir: &Path,
    mode: &CaptureMode,
    also: &HashSet<u64>,
) -> Result<Held> {
    let mut ready = prepare(pid, dir, mode)?;
    ready.also = also.clone();
    freeze_and_capture_prepared(pid, mode, ready)
}

/// The most page data prepared for before the freeze (see [`prepare`]).
const PREPARED_PAGES: u64 = 4 << 20;

/// How long the scan beside a capture waits for the capture's scratch page
/// to be mapped before it starts anyway (it takes one call into the
/// process, well under a millisecond).
const SCRATCH_WAIT: std::time::Duration = std::time::Duration::from_millis(20);

/// What is made before the freeze (see [`prepare`]).
struct Ready {
    layout: Layout,
    writer: ImageWriter,
    copy_buffer: Vec<u8>,
    /// Pages a handover capture keeps besides its own handover pages
    /// (those a precapture kept).
    also: HashSet<u64>,
    /// The bytes of page data to prepare a buffer for.
    expected: u64,
    /// A `syscall` instruction in the process, for the calls injected at
    /// the stop ([`Frozen::offer_gadget`]).
    gadget: Option<u64>,
}

use std::collections::HashSet;

/// What comes before the freeze: the target's mount namespace, the checks,
/// its mappings with their flags, read while it runs so that the stop need
/// not walk its page tables for them, and the image's files and a copy
/// buffer, with their memory and storage allocated, so that the stop does
/// not wait for fresh memory.
fn prepare(pid: i32, dir: &Path, mode: &CaptureMode) -> Result<Ready> {
    join_mount_ns(pid)?;
    // A state that passes in a moment (a file lock held) is waited out.
    precheck_settled(pid, BUSY_WAIT)?;
    pmig_engine::resources::gort::learn(pid);
    mark("hold: prechecked");
    // Most of what must reach a file server before another node opens the
    // files goes now, while the process runs; the capture sends the rest.
    let flushed = pmig_engine::resources::files::flush_network_writes(pid)?;
    if flushed > 0 {
        tracing::debug!("process {pid}: {flushed} files on network file systems written back");
    }
    let layout = Layout::read(pid)?;
    let gadget = layout.syscall_gadget(pid);
    // The CPU the image records (part `cpu`): about 0.1 ms of CPUID on a
    // VM, read once, now rather than at the stop.
    pmig_engine::resources::cpu::CpuState::here();
    mark("hold: layout read");
    // A handover copies about the private pages outside writable anonymous
    // memory, or, when the file copies went before, little more than the
    // stacks; the others a few MiB at most (pre-copy's last pages), or the
    // whole memory, in a stream that reuses its buffers.
    let expected = match mode {
        CaptureMode::Handover | CaptureMode::HandoverDeferred => {
            layout.private_bytes(true) + (256 << 10)
        }
        CaptureMode::HandoverDeferredWritten(_) | CaptureMode::HandoverWritten(_) => 512 << 10,
        _ => PREPARED_PAGES,
    }
    .min(PREPARED_PAGES);
    let mut writer = ImageWriter::create(dir)?;
    writer.pages().reserve(expected);
    let copy_buffer = pmig_engine::resources::memory::touched_copy_buffer(expected as usize);
    mark("hold: buffers ready");
    Ok(Ready {
        layout,
        writer,
        copy_buffer,
        also: HashSet::new(),
        expected,
        gadget,
    })
}

/// A skeleton's first capture (see the module's documentation): freezes
/// `pid`, captures it into `dir` as `mode` says, and lets it run on; the
/// capture at the stop will keep the pages this one kept (`ready.also`).
fn precapture(pid: i32, dir: &Path, mode: &CaptureMode, ready: &mut Ready) -> Result<Captured> {
    let mut writer = ImageWriter::create(dir)?;
    writer.pages().reserve(ready.expected);
    let buffer = pmig_engine::resources::memory::touched_copy_buffer(ready.expected as usize);
    let (held, kept) = capture_once(
        pid,
        mode,
        (ready.layout.clone(), ready.gadget),
        writer,
        buffer,
        &ready.also,
    )?;
    let mut c = held.captured;
    held.frozen.detach()?;
    // The pause ends here, when the process runs again.
    c.captured_ns = mono_ns();
    mark("hold: precaptured, resumed");
    ready.also = kept;
    Ok(c)
}

/// [`freeze_and_capture`] once [`prepare`] has read `layout`.
fn freeze_and_capture_prepared(pid: i32, mode: &CaptureMode, ready: Ready) -> Result<Held> {
    let Ready {
        layout,
        writer,
        copy_buffer,
        also,
        gadget,
        ..
    } = ready;
    capture_once(pid, mode, (layout, gadget), writer, copy_buffer, &also).map(|(held, _)| held)
}

/// Freezes `pid` and captures it into `writer`, keeping `also` besides the
/// handover pages of a handover capture; returns the frozen process and
/// the pages kept. `prepared`: the layout read before the freeze, and a
/// `syscall` instruction found in it.
fn capture_once(
    pid: i32,
    mode: &CaptureMode,
    prepared: (Layout, Option<u64>),
    writer: ImageWriter,
    copy_buffer: Vec<u8>,
    also: &HashSet<u64>,
) -> Result<(Held, HashSet<u64>)> {
    let list = match mode {
        CaptureMode::WrittenSince(list)
        | CaptureMode::WrittenApart(list)
        | CaptureMode::HandoverDeferredWritten(list)
        | CaptureMode::HandoverWritten(list) => Some(list),
        _ => None,
    };
    let tracked = list.map(|l| read_tracked(l)).transpose()?;
    // The modes whose source reads the pages found written (pre-copy's,
    // assisted-post-copy's stop: `written_at_stop`). What an earlier
    // capture found written is not this one's.
    let written_out = match mode {
        CaptureMode::WrittenApart(l) | CaptureMode::HandoverWritten(l) => {
            Some(written_at_freeze_file(l))
        }
        _ => None,
    };
    if let Some(f) = &written_out {
        let _ = std::fs::remove_file(f);
    }
    // Another thread scans the pages while the rest is captured (the
    // capture of memory waits for a scan that thread has begun), then makes
    // the checks again, now that nothing changes: only the end of the
    // capture waits for those, once begun.
    let defer_population = matches!(
        mode,
        CaptureMode::HandoverDeferred | CaptureMode::HandoverDeferredWritten(_)
    );
    let what = match mode {
        CaptureMode::WrittenSince(_)
        | CaptureMode::WrittenApart(_)
        | CaptureMode::HandoverDeferredWritten(_)
        | CaptureMode::HandoverWritten(_) => ScanFor::Written,
        _ => ScanFor::Populated,
    };
    // Of the `listed` ranges, the pages written since they were last
    // protected, as the scan of the frozen process finds them (whichever
    // thread makes it).
    let listed = tracked.clone().filter(|_| written_out.is_some());
    let (written_tx, written_rx) = std::sync::mpsc::channel::<Option<Vec<(u64, u64)>>>();
    let on_scan: OnScan = Box::new(move |scan| {
        let written = match (scan, listed) {
            (Ok(p), Some(listed)) => p
                .written()
                .map(|w| written_in(&listed, w, p.written_scope())),
            _ => None,
        };
        let _ = written_tx.send(written);
    });
    let (side, scanner) =
        pmig_engine::resources::memory::side_scan(pid, defer_population, what, Some(on_scan));
    let (mapped_tx, mapped_rx) = std::sync::mpsc::channel::<()>();
    // The checks again after the scan: the other thread's, and, once the
    // capture ends, the capture's too: each takes the next check neither
    // has begun (`SharedPrechecks`).
    let checks = Arc::new(SharedPrechecks::new(pid));
    let mut frozen_ns = 0;
    // That thread starts before the freeze, its start no part of the stop
    // (nor held up by the capture, which keeps one CPU from the freeze on).
    // It waits for the CPU the capture runs on, to keep off it; without
    // that word (the freeze failed) it ends. The stop never waits for it
    // to end, nor for work it has not begun: on a CPU that a task busy in
    // the kernel holds (a large process exiting, say) it may get no turn
    // for milliseconds, and the capture then does that work itself.
    let (cpu_tx, cpu_rx) = std::sync::mpsc::channel::<Option<(usize, Vec<u64>)>>();
    let beside_checks = checks.clone();
    #[cfg(test)]
    let no_beside = tests::NO_BESIDE.with(|n| n.get());
    #[cfg(not(test))]
    let no_beside = false;
    let beside = std::thread::Builder::new().spawn(move || {
        if no_beside {
            return;
        }
        let Ok(capture_cpu) = cpu_rx.recv() else {
            return;
        };
        if let Some((cpu, allowed)) = &capture_cpu {
            pmig_engine::ptrace::avoid_cpu(*cpu, allowed);
        }
        // One pass: what the checks read while the capture maps its
        // scratch page, they do not read again after the scan.
        pmig_engine::procfs::with_proc_memo(|| {
            after_scratch(pid, &mapped_rx);
            checks_beside(scanner, &beside_checks)
        })
    });
    if let Err(e) = &beside {
        tracing::debug!(
            "process {pid}: no thread beside the capture ({e}): it scans and checks alone"
        );
    }
    (|| {
        // Frozen at a moment it holds no file lock; the stop begins at the
        // freeze that finds none.
        same_process(pid)?;
        let mut frozen = freeze_settled(pid, BUSY_WAIT, || {
            frozen_ns = mono_ns();
            mark("hold: freeze");
        })?;
        // Checked again now that it is frozen: dropped, `frozen` lets a
        // process that reused the pid go.
        same_process(pid)?;
        let (layout, gadget) = prepared;
        if let Some(g) = gadget {
            frozen.offer_gadget(g);
        }
        mark("hold: frozen");
        // From here on any error drops `frozen`, which resumes the process.
        // The capture runs on one CPU with the process (`Frozen::colocate`,
        // which `capture_with` keeps); the scan and the checks keep off it.
        frozen.colocate();
        let _ = cpu_tx.send(frozen.colocated());
        let aids = Aids {
            layout: Some(layout),
            prescan: Some(side),
            scratch_mapped: Some(mapped_tx),
            defer_population,
            written_since: tracked,
            written_apart: matches!(mode, CaptureMode::WrittenApart(_)),
            copy_buffer: Some(copy_buffer),
            handover: None,
        };
        let captured = capture_frozen(&mut frozen, frozen_ns, writer, mode, aids, also);
        // Also after a capture that failed: a refusal names the cause
        // better than the error it may have led to.
        let made = checks.take_part();
        let checked = checks.result();
        mark(&format!(
            "hold: prechecked again ({made} checks by the capture)"
        ));
        // Sent by whichever made the scan, before the capture had it.
        let written = written_rx.try_recv().ok().flatten();
        let captured = checked.map_err(Into::into).and(captured)?;
        // Only for a capture that succeeded; without the file the source
        // scans the frozen process again itself.
        if let (Some(f), Some(w)) = (&written_out, written) {
            if let Err(e) = crate::pre_copy::write_ranges(f, &w) {
                tracing::debug!("process {pid}: the pages written at the freeze not listed: {e}");
            }
        }
        Ok((frozen, captured))
    })()
    .map(|(frozen, o)| {
        (
            Held {
                frozen,
                captured: o.captured,
                layout: o.used,
                late: o.late,
                locks: o.locks,
            },
            o.kept,
        )
    })
}

/// In the checks thread of [`capture_once`], until the capture says
/// its scratch page is mapped (`mapped`: a message, or its sender gone),
/// or [`SCRATCH_WAIT`] has gone by: the scan waits for the process's final
/// mappings. Meanwhile each thread's status and children, which the checks
/// after the scan read, are read into the pass
/// ([`pmig_engine::procfs::remember_threads`]), as many as there is time for.
fn after_scratch(pid: libc::pid_t, mapped: &std::sync::mpsc::Receiver<()>) {
    use std::sync::mpsc::TryRecvError;
    let end = Instant::now() + SCRATCH_WAIT;
    let mut said = false;
    pmig_engine::procfs::remember_threads(pid, || {
        said = !matches!(mapped.try_recv(), Err(TryRecvError::Empty));
        said || Instant::now() >= end
    });
    mark("hold: threads read ahead");
    if !said {
        let _ = mapped.recv_timeout(end.saturating_duration_since(Instant::now()));
    }
}

/// The checks thread of [`capture_once`] once the scratch page is
/// mapped: scans the pages, unless the capture has taken that on
/// ([`SideScanner`]), then makes the checks again, now that nothing
/// changes, each that the capture has not taken ([`SharedPrechecks`]).
fn checks_beside(scanner: SideScanner, checks: &SharedPrechecks) {
    if scanner.scan() {
        mark("hold: pages scanned");
    }
    let made = checks.take_part();
    mark(&format!("hold: {made} checks made beside"));
}

/// The capture of [`freeze_and_capture`] once the process is frozen.
fn capture_frozen(
    frozen: &mut Frozen,
    frozen_ns: u64,
    mut w: ImageWriter,
    mode: &CaptureMode,
    aids: Aids,
    also: &HashSet<u64>,
) -> Result<CaptureOutcome> {
    let pid = frozen.pid;
    let out = match mode {
        CaptureMode::Full => capture_with(frozen, &mut w, None, aids)?,
        // The pages the handover keeps, found by the capture from the
        // threads it reads.
        CaptureMode::Handover
        | CaptureMode::HandoverDeferred
        | CaptureMode::HandoverDeferredWritten(_)
        | CaptureMode::HandoverWritten(_) => {
            let aids = Aids {
                handover: Some(also.clone()),
                ..aids
            };
            capture_with(frozen, &mut w, None, aids)?
        }
        // The pages written since the last round come with the scan
        // started at the freeze (`Aids::written_since`).
        CaptureMode::WrittenSince(_) | CaptureMode::WrittenApart(_) => {
            capture_with(frozen, &mut w, None, aids)?
        }
    };
    let (img, used) = (out.image, out.layout_used);
    let kept = out.kept.unwrap_or_default();
    mark("hold: captured");
    finish_image(&img, w, pid)?;
    mark("hold: image written");
    let c = Captured {
        frozen_ns,
        captured_ns: mono_ns(),
        page_bytes: img.memory.image_bytes(),
        threads: img.threads.threads.len(),
        sysv: img.sysv.is_some(),
    };
    let late = LateSignals::after(
        img.signals.shared_pending.len(),
        img.threads
            .threads
            .iter()
            .map(|t| t.pending.len())
            .collect(),
    );
    Ok(CaptureOutcome {
        captured: c,
        used,
        late,
        kept,
        locks: img.locks,
    })
}

/// What [`capture_frozen`] leaves besides the image.
struct CaptureOutcome {
    captured: Captured,
    /// The layout whose flags the capture took (see [`Held::layout`]).
    used: Option<Layout>,
    late: LateSignals,
    /// The pages kept besides the handover pages (see [`Ready::also`]).
    kept: HashSet<u64>,
    /// The file locks the process holds.
    locks: Option<LocksState>,
}

/// The ranges pre-copy write-protected since its last round: `start len`
/// lines (hex), as [`CaptureMode::WrittenSince`] names them; sorted.
fn read_tracked(list: &Path) -> Result<Vec<(u64, u64)>> {
    let text = std::fs::read_to_string(list).map_err(io_err(format!("read {}", list.display())))?;
    let mut tracked: Vec<(u64, u64)> = text
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((
                u64::from_str_radix(it.next()?, 16).ok()?,
                u64::from_str_radix(it.next()?, 16).ok()?,
            ))
        })
        .collect();
    tracked.sort();
    Ok(tracked)
}

/// The file in which the capture at pre-copy's and assisted-post-copy's
/// stop, with the list of write-tracked ranges `list`, leaves the pages of
/// those ranges written since they were last protected, as its scan at the
/// freeze found them (same format): next to the list. The source reads it
/// with [`read_written_at_freeze`].
pub(crate) fn written_at_freeze_file(list: &Path) -> std::path::PathBuf {
    list.with_file_name("written-at-freeze.ranges")
}

/// The pages of `listed` written since they were protected: those of
/// `written` (a scan's written pages) inside `listed`, and whole every part
/// of `listed` the scan did not look at (`scope`: a tracked range that is
/// no longer a private mapping), as the tracker's own scan counts a range
/// whose mapping changed.
fn written_in(
    listed: &[(u64, u64)],
    written: &[(u64, u64)],
    scope: &[(u64, u64)],
) -> Vec<(u64, u64)> {
    let mut w = crate::pre_copy::intersect(written, listed);
    w.extend(crate::pre_copy::subtract(listed, scope));
    crate::pre_copy::intersect(&w, listed)
}

/// The pages the holder's capture found written at the freeze
/// ([`written_at_freeze_file`] of `list`), if it left them; the file is
/// removed.
pub(crate) fn read_written_at_freeze(list: &Path) -> Option<Vec<(u64, u64)>> {
    let f = written_at_freeze_file(list);
    let w = read_tracked(&f).ok();
    let _ = std::fs::remove_file(&f);
    w
}

/// After the handover, once the original is to be killed (still frozen): names the mappings
/// whose flags (advice, lock, `MAP_NORESERVE`) the image does not carry as
/// they were at the stop: changed, or mapped, between reading `layout` and
/// the freeze.
fn check_layout(pid: i32, layout: &Layout) {
    match layout.changed_flags(pid) {
        Ok(v) if v.is_empty() => {}
        Ok(v) => tracing::warn!(
            "process {pid}: mapping(s) {} were advised or mapped just before the stop; the migrated process has them with the flags they had before (none for new memory)",
            v.join(", ")
        ),
        Err(e) => tracing::debug!("process {pid}: mappings not checked after the handover: {e}"),
    }
}

/// Kills the frozen process and waits (bounded) until every thread is gone, so that
/// its parent can reap it.
fn kill_and_reap(frozen: Frozen) -> Result<()> {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    // The kill reaps the other threads (a traced group leader reports its
    // exit only once every other thread is gone); the leader is waited for
    // here, once its exit has been reported to us, its tracer.
    let leader = frozen.pid;
    let mut left = vec![leader];
    frozen.kill()?;
    // Bounded: at most about 10 s.
    for _ in 0..10_000 {
        left.retain(|&tid| {
            match waitpid(
                nix::unistd::Pid::from_raw(tid),
                Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG),
            ) {
                Ok(WaitStatus::Exited(..)) | Ok(WaitStatus::Signaled(..)) | Err(_) => false,
                // Not yet, or a last stop on the way out.
                Ok(_) => true,
            }
        });
        if left.is_empty() {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    tracing::warn!("process {leader}: threads {left:?} not reaped 10 s after SIGKILL");
    Ok(())
}

/// The start time of the process this holder was started for: with its
/// pid, it tells that process from one that reuses the pid after it exits.
static STARTED: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();

/// Fails if `pid` no longer names the process this holder was started for
/// (it exited, and its pid is free or another process's): a capture must
/// never freeze another process. A holder started for a process already
/// gone has nothing recorded, and the freeze finds out.
fn same_process(pid: i32) -> Result<()> {
    let Some(Some(started)) = STARTED.get() else {
        return Ok(());
    };
    if pmig_engine::procfs::start_time(pid) == Some(*started) {
        return Ok(());
    }
    Err(StrategyError::Other(format!(
        "process {pid} has exited (its pid is free or names another process now)"
    )))
}

/// The holder process's main function (`pmig daemon --hold PID --image-dir DIR`).
/// Returns the exit code.
/// With `wait`, the holder is primed (see the module's documentation).
/// `started` is the start time the migration recorded for `pid`; without
/// it the holder records the start time of whatever `pid` names now.
pub fn holder_main(
    pid: i32,
    started: Option<u64>,
    dir: &Path,
    mode: &CaptureMode,
    wait: bool,
) -> i32 {
    // SAFETY: ignoring SIGPIPE: a dead daemon must not kill us while we hold a
    // frozen process (we resume it instead).
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let _ = STARTED.set(started.or_else(|| pmig_engine::procfs::start_time(pid)));
    // Before any check reads it: what they would say is about another
    // process.
    if let Err(e) = same_process(pid) {
        say(&HolderMsg::Error(e.to_string()));
        return 1;
    }
    mark("hold: started");
    // The pages a precapture kept, kept again by every capture at the stop.
    let mut also = HashSet::new();
    let mut captured = if wait {
        match wait_for_go(pid, dir, mode) {
            Ok(Some(ready)) => {
                also = ready.also.clone();
                freeze_and_capture_prepared(pid, mode, ready)
            }
            // Not asked to go: the process was never touched, or only
            // paused for a precapture.
            Ok(None) => return 0,
            // Before `go` (its preparation, a refresh): the daemon waits
            // for `ready`, not for a capture, so a state that passes in a
            // moment is not waited out with one here.
            Err(e) => {
                say(&HolderMsg::Error(e.to_string()));
                return 1;
            }
        }
    } else {
        freeze_and_capture(pid, dir, mode, &also)
    };
    // A state that passes in a moment (an inotify event the process has
    // not read yet): it ran on when the failed capture let it go; try
    // again a few times before giving up.
    for _ in 0..BUSY_RETRIES {
        if !matches!(
            captured,
            Err(StrategyError::Engine(pmig_engine::EngineError::Busy { .. }))
        ) {
            break;
        }
        std::thread::sleep(BUSY_PAUSE);
        mark("hold: busy, freeze again");
        captured = freeze_and_capture(pid, dir, mode, &also);
    }
    let Held {
        mut frozen,
        captured: c,
        layout,
        mut late,
        locks,
    } = match captured {
        Ok(x) => x,
        Err(e) => {
            say(&HolderMsg::Error(e.to_string()));
            return 1;
        }
    };
    // The copy takes the file locks: the original lets them go before the
    // image goes anywhere (an error takes them again, and dropping
    // `frozen` lets the process run on).
    if let Some(l) = &locks {
        if let Err(e) = pmig_engine::resources::locks::release(&mut frozen, l) {
            say(&HolderMsg::Error(e.to_string()));
            return 1;
        }
        mark("hold: locks let go");
        tracing::info!(
            "process {pid}: {} file lock(s) let go for its copy to take",
            l.locks.len()
        );
    }
    say(&HolderMsg::Captured(c));
    mark("hold: capture reported");
    // `handover`: the destination runs the process now, so if the daemon
    // vanishes (end of input) the original must not run again next to it.
    let mut handed_over = false;
    let mut forward: Option<Forward> = None;
    let mut input = Input::default();
    let mut cmd = loop {
        let wait = forward.as_ref().map(|_| LATE_SIGNAL_POLL);
        let line = match input.next(wait) {
            Got::Line(l) => l,
            Got::Timeout => {
                if let Some(f) = forward.as_mut() {
                    f.pass_on(&frozen, &mut late);
                }
                continue;
            }
            Got::End => break String::new(),
        };
        let mut words = line.split_whitespace();
        if line.trim() == SYSV_DETACH && handed_over {
            // Always answered: the daemon waits for it.
            let said = match pmig_engine::resources::sysvshm::detach_frozen(&mut frozen) {
                Ok((n, gone)) => format!(
                    "{n} System V shared memory attaches let go, {gone} segments removed (attached on the destination only)"
                ),
                Err(e) => {
                    tracing::warn!("holder of {pid}: {e}");
                    format!("System V shared memory not let go: {e}")
                }
            };
            say(&HolderMsg::Done(said));
            continue;
        }
        if words.next() != Some("handover") {
            break line;
        }
        handed_over = true;
        if forward.is_none() {
            forward = Forward::parse(pid, &words.collect::<Vec<_>>());
        }
    };
    if cmd.is_empty() && handed_over {
        tracing::error!("holder of {pid}: the daemon vanished after the handover; killing the original, which runs elsewhere");
        cmd = "kill".into();
    }
    if cmd != "kill" && handed_over {
        // The copy runs on the destination: the original never runs again.
        tracing::error!("holder of {pid}: told to {cmd:?} after the handover; killing the original, which runs elsewhere");
        cmd = "kill".into();
    }
    if cmd == "kill" {
        // The last look: what came since is lost (microseconds).
        if let Some(f) = forward.as_mut() {
            f.pass_on(&frozen, &mut late);
        }
        // Only now, with every page moved: reading the flags (smaps) walks
        // the page tables under the process's mmap lock (50 ms for 4 GiB),
        // and the source's calls that need that lock for writing, and every
        // read of pages queued behind them, would wait for it while the
        // migrated process faults.
        if handed_over {
            if let Some(l) = &layout {
                check_layout(pid, l);
            }
        }
        match kill_and_reap(frozen) {
            Ok(()) => {
                say(&HolderMsg::Done("killed".into()));
                0
            }
            Err(e) => {
                say(&HolderMsg::Error(e.to_string()));
                1
            }
        }
    } else {
        if cmd != "resume" {
            tracing::warn!("holder of {pid}: no instruction from the daemon; resuming the process");
        }
        if let Some(l) = &locks {
            if let Err(e) = take_locks_back(&mut frozen, l) {
                // Run on, it would act as the holder of a lock another
                // process holds: it is left stopped, for its owner to
                // decide.
                frozen.stop_on_detach();
                let left = frozen.detach();
                say(&HolderMsg::Error(format!(
                    "process {pid} was left stopped (SIGSTOP{}): {e}; `kill -CONT {pid}` lets it run on without that lock",
                    left.err().map_or(String::new(), |e| format!("; {e}"))
                )));
                return 1;
            }
        }
        match frozen.detach() {
            Ok(()) => {
                say(&HolderMsg::Done("resumed".into()));
                0
            }
            Err(e) => {
                say(&HolderMsg::Error(e.to_string()));
                1
            }
        }
    }
}

/// How long [`take_locks_back`] tries: the copy whose restore failed may
/// still hold the locks until the destination has killed it.
const LOCKS_BACK_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Gives the frozen original, whose migration failed, the file locks it
/// let go at the capture, trying again every few milliseconds within
/// [`LOCKS_BACK_WITHIN`]; the error names a lock another process holds
/// then.
fn take_locks_back(frozen: &mut Frozen, locks: &LocksState) -> Result<()> {
    let end = std::time::Instant::now() + LOCKS_BACK_WITHIN;
    loop {
        match pmig_engine::resources::locks::retake(frozen, locks) {
            Ok(()) => return Ok(()),
            // Held by another process (see `locks::retake`): for now.
            Err(pmig_engine::EngineError::Restore(_)) if std::time::Instant::now() < end => {
                std::thread::sleep(std::time::Duration::from_millis(5))
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// How often a holder looks for signals sent to the frozen original once
/// the copy runs (see `Forward`).
pub const LATE_SIGNAL_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// The daemon's instruction, after the handover, to let the original's
/// System V shared memory go (see [`Holder::handed_over`]); answered with
/// `Done`.
const SYSV_DETACH: &str = "sysv-detach";

/// What [`Input::next`] got.
enum Got {
    Line(String),
    Timeout,
    End,
}

/// The daemon's instructions on the holder's stdin, one per line, read
/// straight from the descriptor so that a wait for the next one can end
/// after a while.
#[derive(Default)]
struct Input {
    buf: Vec<u8>,
    end: bool,
}

impl Input {
    /// The next line; after `wait` (if any) with none, `Timeout`.
    fn next(&mut self, wait: Option<std::time::Duration>) -> Got {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Got::Line(String::from_utf8_lossy(&line).trim().to_string());
            }
            if self.end {
                return Got::End;
            }
            let stdin = std::io::stdin();
            let timeout = match wait {
                Some(d) => PollTimeout::try_from(d).unwrap_or(PollTimeout::MAX),
                None => PollTimeout::NONE,
            };
            let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, timeout) {
                Ok(0) => return Got::Timeout,
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => self.end = true,
            }
            let mut chunk = [0u8; 512];
            match nix::unistd::read(stdin.as_raw_fd(), &mut chunk) {
                Ok(n) if n > 0 => self.buf.extend_from_slice(&chunk[..n]),
                Err(nix::errno::Errno::EINTR) => {}
                _ => self.end = true,
            }
        }
    }
}

/// Where the signals sent to the frozen original after its capture go:
/// the destination daemon, for the process it restored.
struct Forward {
    pid: i32,
    addr: String,
    id: u64,
    node: String,
    key: pmig_proto::ClusterKey,
    /// Set after a failure: the rest is logged, not sent.
    failed: bool,
}

impl Forward {
    /// From the words after `handover`: ADDR ID NODE KEY.
    fn parse(pid: i32, w: &[&str]) -> Option<Forward> {
        let [addr, id, node, key] = w else {
            return None;
        };
        Some(Forward {
            pid,
            addr: addr.to_string(),
            id: id.parse().ok()?,
            node: node.to_string(),
            key: pmig_proto::ClusterKey::from_hex(key)?,
            failed: false,
        })
    }

    /// Looks for new signals on `frozen` and sends them to the destination.
    fn pass_on(&mut self, frozen: &Frozen, late: &mut LateSignals) {
        if self.failed {
            return;
        }
        let found = match late.take(frozen) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(
                    "holder of {}: cannot look for signals sent to the original any more: {e}",
                    self.pid
                );
                self.failed = true;
                return;
            }
        };
        if found.is_empty() {
            return;
        }
        let n = found.len();
        match self.send(found) {
            Ok(d) => tracing::info!(
                "holder of {}: {d} of {n} signal(s) sent to the original after its capture passed on to {} (migration {})",
                self.pid, self.addr, self.id
            ),
            Err(e) => {
                tracing::warn!(
                    "holder of {}: {n} signal(s) sent to the original after its capture could not be passed on to {}: {e}",
                    self.pid, self.addr
                );
                self.failed = true;
            }
        }
    }

    fn send(&self, found: Vec<pmig_engine::resources::signals::LateSignal>) -> Result<u32> {
        use pmig_proto::Msg;
        let cfg = pmig_proto::Config::new(&self.node);
        let mut ch = pmig_proto::blocking::connect(&self.addr, &self.key, &cfg)?;
        let _ = ch
            .stream()
            .set_read_timeout(Some(std::time::Duration::from_secs(10)));
        let mut delivered = 0;
        for batch in found.chunks(pmig_proto::msg::MAX_LATE_SIGNALS) {
            ch.send(&Msg::Signals {
                id: self.id,
                signals: batch
                    .iter()
                    .map(|s| pmig_proto::msg::LateSignal {
                        tid: s.tid.unwrap_or(0),
                        main_thread: s.main_thread,
                        info: s.info.clone(),
                    })
                    .collect(),
            })?;
            match ch.recv()? {
                Msg::SignalsDelivered { id, delivered: d } if id == self.id => delivered += d,
                Msg::Error { text, .. } => return Err(StrategyError::Other(text)),
                other => {
                    return Err(StrategyError::Other(format!(
                        "expected SignalsDelivered, got {}",
                        other.kind()
                    )))
                }
            }
        }
        Ok(delivered)
    }
}

/// A primed holder's side: prepares, says `ready`, and reads the mappings
/// again on each `refresh`, until `go` (returns the newest layout) or the end
/// of its input (returns None).
fn wait_for_go(pid: i32, dir: &Path, mode: &CaptureMode) -> Result<Option<Ready>> {
    let mut ready = prepare(pid, dir, mode)?;
    say(&HolderMsg::Ready);
    // Bounded: a refresh per pre-copy round at most.
    for _ in 0..(crate::pre_copy::MAX_ROUNDS_LIMIT + 16) {
        let mut line = String::new();
        match std::io::stdin().lock().read_line(&mut line) {
            Ok(n) if n > 0 => {}
            _ => {
                // Not told to go: leave no image behind.
                ready.writer.discard();
                return Ok(None);
            }
        }
        let line = line.trim();
        if let Some(to) = line.strip_prefix("precapture ") {
            let mut got = precapture(pid, Path::new(to), mode, &mut ready);
            // As at the stop: a state that passes in a moment (an event
            // not yet read) is waited out a few times.
            for _ in 0..BUSY_RETRIES {
                if !matches!(
                    got,
                    Err(StrategyError::Engine(pmig_engine::EngineError::Busy { .. }))
                ) {
                    break;
                }
                std::thread::sleep(BUSY_PAUSE);
                mark("hold: busy, precapture again");
                let _ = std::fs::remove_dir_all(to);
                got = precapture(pid, Path::new(to), mode, &mut ready);
            }
            match got {
                Ok(c) => say(&HolderMsg::Precaptured(c)),
                Err(e) => {
                    // The process runs on (the failed capture let it go);
                    // the daemon gives the migration up, and this exits
                    // without touching it again.
                    say(&HolderMsg::Error(e.to_string()));
                    ready.writer.discard();
                    return Ok(None);
                }
            }
            continue;
        }
        match line {
            "go" => return Ok(Some(ready)),
            "refresh" => {
                ready.layout = Layout::read(pid)?;
                mark("hold: layout read again");
                say(&HolderMsg::Ready);
            }
            other => {
                ready.writer.discard();
                return Err(StrategyError::Other(format!(
                    "holder of {pid}: unexpected instruction `{other}`"
                )));
            }
        }
    }
    ready.writer.discard();
    Ok(None)
}

/// The daemon's handle on a primed holder (see the module's documentation):
/// nothing is frozen yet. Dropping it lets the holder exit.
pub struct Primed<'h> {
    h: Option<Holder<'h>>,
    /// `refresh` sent and not answered yet.
    refreshing: bool,
}

impl<'h> Primed<'h> {
    /// Starts a holder that captures `pid` into `dir` as `mode` says once
    /// told to go; returns when it is ready.
    pub fn start(
        host: &'h dyn Host,
        pid: i32,
        started: Option<u64>,
        dir: &Path,
        mode: &CaptureMode,
    ) -> Result<Primed<'h>> {
        let mut p = Primed {
            h: Some(Holder::spawn(host, pid, started, dir, mode, true)?),
            refreshing: false,
        };
        let h = p.h.as_mut().expect("just set");
        match h.read()? {
            HolderMsg::Ready => Ok(p),
            HolderMsg::Error(e) => Err(StrategyError::Other(format!(
                "cannot prepare the capture of process {pid}: {e}"
            ))),
            other => Err(StrategyError::Other(format!(
                "holder of {pid}: unexpected reply {other:?}"
            ))),
        }
    }

    /// Asks the holder to read the mappings again, unless it is still at
    /// it; does not wait.
    pub fn refresh(&mut self) {
        let Some(h) = self.h.as_mut() else { return };
        if self.refreshing {
            if !h.reply_waiting() {
                return;
            }
            match h.read() {
                Ok(HolderMsg::Ready) => self.refreshing = false,
                _ => return,
            }
        }
        if let Some(s) = h.stdin.as_mut() {
            if s.write_all(b"refresh\n").is_ok() {
                self.refreshing = true;
            }
        }
    }

    /// A skeleton's first capture, into `dir` (see the module's
    /// documentation): the process is frozen briefly and runs on. On an
    /// error the holder has exited (the process runs on).
    pub fn precapture(&mut self, dir: &Path) -> Result<Captured> {
        let h = self.h.as_mut().expect("a primed holder until go");
        let pid = h.pid;
        if self.refreshing {
            match h.read()? {
                HolderMsg::Ready => self.refreshing = false,
                other => return Err(h.refuse(other)),
            }
        }
        let line = format!("precapture {}\n", dir.display());
        if let Some(s) = h.stdin.as_mut() {
            s.write_all(line.as_bytes())
                .map_err(io_err(format!("instruct the holder of {pid}")))?;
        }
        match h.read() {
            Ok(HolderMsg::Precaptured(c)) => Ok(c),
            Ok(HolderMsg::Error(e)) => {
                h.reap();
                Err(StrategyError::Other(format!(
                    "cannot capture process {pid} for its skeleton: {e}"
                )))
            }
            Ok(other) => Err(h.refuse(other)),
            Err(e) => {
                h.reap();
                Err(e)
            }
        }
    }

    /// Freezes and captures the process; from then on the holder is an
    /// ordinary [`Holder`].
    pub fn go(mut self) -> Result<Holder<'h>> {
        let mut h = self.h.take().expect("a primed holder goes once");
        let pid = h.pid;
        let sent = match h.stdin.as_mut() {
            Some(s) => s.write_all(b"go\n"),
            None => Err(std::io::ErrorKind::BrokenPipe.into()),
        };
        if let Err(e) = sent {
            // It has exited: its last word says why, if it said one.
            let why = match h.read() {
                Ok(HolderMsg::Error(why)) => why,
                _ => e.to_string(),
            };
            h.reap();
            return Err(StrategyError::Other(format!(
                "cannot capture process {pid}: {why}"
            )));
        }
        if self.refreshing {
            // The answer to the last refresh comes first.
            match h.read() {
                Ok(HolderMsg::Ready) => {}
                Ok(other) => return Err(h.refuse(other)),
                Err(e) => {
                    h.reap();
                    return Err(e);
                }
            }
        }
        h.await_capture()?;
        Ok(h)
    }
}

impl Drop for Primed<'_> {
    fn drop(&mut self) {
        if let Some(mut h) = self.h.take() {
            // End of input: the holder exits without touching the process.
            h.reap();
        }
    }
}

/// The daemon's handle on a running holder: the process `pid` is frozen and its
/// image complete while this exists. Dropping it resumes the process.
pub struct Holder<'h> {
    host: &'h dyn Host,
    pid: i32,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    pub captured: Captured,
    /// The destination runs the process (see [`Holder::handed_over`]).
    handed: bool,
}

impl<'h> Holder<'h> {
    /// Starts a holder and waits until the process is frozen and captured
    /// into `dir`, with the pages `mode` selects.
    pub fn start_with(
        host: &'h dyn Host,
        pid: i32,
        started: Option<u64>,
        dir: &Path,
        mode: &CaptureMode,
    ) -> Result<Holder<'h>> {
        let mut h = Self::spawn(host, pid, started, dir, mode, false)?;
        h.await_capture()?;
        Ok(h)
    }

    /// Spawns `pmig daemon --hold PID ...` (`--hold-wait` with `wait`).
    /// `started` is the start time the migration recorded for `pid`
    /// ([`pmig_engine::procfs::start_time`]): the holder captures nothing
    /// if the pid names another process by the time it runs.
    fn spawn(
        host: &'h dyn Host,
        pid: i32,
        started: Option<u64>,
        dir: &Path,
        mode: &CaptureMode,
        wait: bool,
    ) -> Result<Holder<'h>> {
        let mut cmd = Command::new(host.exe());
        cmd.args([
            "daemon",
            "--hold",
            &pid.to_string(),
            "--hold-mode",
            &mode.arg(),
            "--image-dir",
        ])
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        if wait {
            cmd.arg("--hold-wait");
        }
        if let Some(t) = started {
            cmd.args(["--hold-started", &t.to_string()]);
        }
        let mut child = host
            .spawn(&mut cmd)
            .map_err(io_err(format!("start a holder for process {pid}")))?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Ok(Holder {
            host,
            pid,
            child: Some(child),
            stdin,
            stdout,
            handed: false,
            captured: Captured::default(),
        })
    }

    /// Waits until the process is frozen and captured. On an error the
    /// holder has exited (the process runs on, untouched or resumed).
    fn await_capture(&mut self) -> Result<()> {
        match self.read() {
            Ok(HolderMsg::Captured(c)) => {
                self.captured = c;
                if let Err(why) = self.host.may_leave(self.pid) {
                    // End of input before the handover: the holder resumes it.
                    self.reap();
                    return Err(StrategyError::Other(format!(
                        "cannot migrate process {}: {why}",
                        self.pid
                    )));
                }
                Ok(())
            }
            Ok(other) => Err(self.refuse(other)),
            Err(e) => {
                self.reap();
                Err(e)
            }
        }
    }

    /// The error for a reply other than `Captured`; reaps the holder.
    fn refuse(&mut self, m: HolderMsg) -> StrategyError {
        self.reap();
        match m {
            HolderMsg::Error(e) => {
                StrategyError::Other(format!("cannot capture process {}: {e}", self.pid))
            }
            other => StrategyError::Other(format!(
                "holder of {}: unexpected reply {other:?}",
                self.pid
            )),
        }
    }

    /// Whether a reply can be read without waiting.
    fn reply_waiting(&self) -> bool {
        if !self.stdout.buffer().is_empty() {
            return true;
        }
        let mut fds = [nix::poll::PollFd::new(
            self.stdout.get_ref().as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        matches!(nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO), Ok(n) if n > 0)
    }

    fn read(&mut self) -> Result<HolderMsg> {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line).map_err(io_err(format!(
            "read from the holder of process {}",
            self.pid
        )))?;
        if n == 0 {
            return Err(StrategyError::Other(format!(
                "the holder of process {} died (see the daemon log)",
                self.pid
            )));
        }
        serde_json::from_str(&line).map_err(|e| {
            StrategyError::Other(format!("holder of {}: bad reply {line:?}: {e}", self.pid))
        })
    }

    fn command(&mut self, cmd: &str) -> Result<()> {
        let mut stdin = self.stdin.take();
        if let Some(s) = stdin.as_mut() {
            s.write_all(format!("{cmd}\n").as_bytes())
                .map_err(io_err(format!("instruct the holder of {}", self.pid)))?;
        }
        drop(stdin);
        let r = self.read();
        self.reap();
        match r? {
            HolderMsg::Done(_) => Ok(()),
            HolderMsg::Error(e) => Err(StrategyError::Other(format!(
                "cannot {cmd} process {}: {e}",
                self.pid
            ))),
            HolderMsg::Captured(_) | HolderMsg::Precaptured(_) | HolderMsg::Ready => Err(
                StrategyError::Other(format!("holder of {}: unexpected reply", self.pid)),
            ),
        }
    }

    fn reap(&mut self) {
        if let Some(mut c) = self.child.take() {
            drop(self.stdin.take());
            let _ = self.host.wait(&mut c);
        }
    }

    /// The destination runs the process: from now on the original must never
    /// run again, even if this daemon dies (the holder then kills it). With
    /// the destination's address `to` and the migration `id`, the holder
    /// passes the signals sent to the original from now on to the copy.
    pub fn handed_over(&mut self, to: Option<(std::net::SocketAddr, u64)>) {
        let line = match to {
            Some((addr, id)) => format!(
                "handover {addr} {id} {} {}\n",
                self.host.node(),
                self.host.cluster_key().to_hex()
            ),
            None => "handover\n".into(),
        };
        if let Some(s) = self.stdin.as_mut() {
            if let Err(e) = s.write_all(line.as_bytes()) {
                tracing::warn!("tell the holder of {} about the handover: {e}", self.pid);
            }
        }
        self.handed = true;
        // The copy shares the original's System V segments where both
        // nodes share an IPC namespace: the original lets go of them before
        // the copy is reported running, so that its attach counts are
        // right from the start.
        if self.captured.sysv {
            let sent = self
                .stdin
                .as_mut()
                .map(|s| s.write_all(format!("{SYSV_DETACH}\n").as_bytes()));
            match sent.map(|r| r.map_err(|e| e.to_string()).map(|_| self.read())) {
                Some(Ok(Ok(HolderMsg::Done(said)))) => {
                    tracing::debug!("holder of {}: {said}", self.pid)
                }
                Some(Ok(Ok(_))) => {
                    tracing::warn!("holder of {}: unexpected reply to {SYSV_DETACH}", self.pid)
                }
                Some(Ok(Err(e))) => tracing::warn!("{e}"),
                Some(Err(e)) => tracing::warn!("tell the holder of {}: {e}", self.pid),
                None => {}
            }
        }
    }

    /// The destination runs the process: kill the frozen original.
    pub fn kill(mut self) -> Result<()> {
        if self.handed && self.host.hooks().hold_original {
            self.hold_for_test();
        }
        self.command("kill")
    }

    /// The `hold-original` test hook: waits (at most 60 s) for
    /// `<state dir>/release-original`, which it then removes.
    fn hold_for_test(&self) {
        let release = self.host.state_dir().join("release-original");
        tracing::warn!(
            "test hook: holding the original of {} until {} exists",
            self.pid,
            release.display()
        );
        if crate::await_release(&release) {
            return;
        }
        tracing::warn!(
            "test hook: {} never came; killing the original",
            release.display()
        );
    }

    /// Let the original run on, exactly as it was: only before the handover.
    /// After it the copy runs on the destination, so the original is killed
    /// instead and the error says so.
    pub fn resume(mut self) -> Result<()> {
        if self.handed {
            let pid = self.pid;
            self.command("kill")?;
            return Err(StrategyError::Other(format!(
                "process {pid} was not resumed: its copy runs on the destination since the handover (the original was killed)"
            )));
        }
        self.command("resume")
    }
}

impl Drop for Holder<'_> {
    fn drop(&mut self) {
        if self.child.is_some() {
            let cmd = if self.handed { "kill" } else { "resume" };
            if let Err(e) = self.command(cmd) {
                tracing::error!("{e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// The thread beside a capture of this thread does nothing (as
        /// one that gets no CPU until the stop is over).
        pub(super) static NO_BESIDE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// A capture whose thread beside never gets to work makes the scan and
    /// the checks itself, and its image is whole.
    #[test]
    fn a_capture_with_no_turn_for_the_thread_beside_scans_and_checks_alone() {
        use std::os::unix::process::CommandExt;
        let mut sleep = std::process::Command::new("sleep");
        sleep
            .arg("60")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: between fork and exec the child only closes descriptors
        // (the test harness's pipes, which a capture refuses to share).
        unsafe {
            sleep.pre_exec(|| {
                libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
                Ok(())
            })
        };
        /// Kills and reaps the child even when an assertion fails.
        struct Reap(std::process::Child);
        impl Drop for Reap {
            fn drop(&mut self) {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
        let child = Reap(sleep.spawn().unwrap());
        let pid = child.0.id() as i32;
        // Bounded: until it sleeps in its call.
        for _ in 0..2000 {
            let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if st
                .rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('S'))
            {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("img");
        NO_BESIDE.with(|n| n.set(true));
        let held = freeze_and_capture(pid, &dir, &CaptureMode::HandoverDeferred, &HashSet::new());
        NO_BESIDE.with(|n| n.set(false));
        let held = held.unwrap();
        assert_eq!(held.captured.threads, 1);
        drop(held);
        let img = pmig_image::Image::open_verified(&dir).unwrap();
        let pi = pmig_engine::image::ProcessImage::read(&img).unwrap();
        assert_eq!(pi.threads.threads.len(), 1);
        drop(child);
    }

    #[test]
    fn written_at_the_freeze_covers_the_listed_ranges_the_scan_did_not() {
        const P: u64 = 4096;
        // Listed: two tracked ranges. The scan looked at the first and at
        // part of the second (the rest is no longer a private mapping), and
        // at memory outside the list, where it found pages written too.
        let listed = [(0x10 * P, 8 * P), (0x40 * P, 8 * P)];
        let scope = [(0x10 * P, 8 * P), (0x40 * P, 4 * P), (0x80 * P, 4 * P)];
        let written = [(0x12 * P, 2 * P), (0x41 * P, P), (0x80 * P, 2 * P)];
        assert_eq!(
            written_in(&listed, &written, &scope),
            vec![(0x12 * P, 2 * P), (0x41 * P, P), (0x44 * P, 4 * P)]
        );
        // Nothing written, everything looked at: nothing.
        assert!(written_in(&listed, &[], &listed).is_empty());
        // The file goes next to the list, and is read back as written.
        let d = tempfile::tempdir().unwrap();
        let list = d.path().join("written-since.ranges");
        let f = written_at_freeze_file(&list);
        assert_eq!(f.parent(), list.parent());
        assert_ne!(f, list);
        let w = written_in(&listed, &written, &scope);
        crate::pre_copy::write_ranges(&f, &w).unwrap();
        assert_eq!(read_written_at_freeze(&list), Some(w));
        // Read once: a later stop does not find an earlier capture's list.
        assert_eq!(read_written_at_freeze(&list), None);
    }

    #[test]
    fn capture_modes_survive_the_command_line() {
        for m in [
            CaptureMode::Full,
            CaptureMode::Handover,
            CaptureMode::HandoverDeferred,
            CaptureMode::WrittenSince("/tmp/a b/written-since.ranges".into()),
            CaptureMode::WrittenApart("/tmp/a b/written-since.ranges".into()),
            CaptureMode::HandoverDeferredWritten("/tmp/x/written-since.ranges".into()),
            CaptureMode::HandoverWritten("/tmp/y z/written-since.ranges".into()),
        ] {
            assert_eq!(CaptureMode::parse(&m.arg()), Some(m.clone()), "{}", m.arg());
        }
        assert_eq!(CaptureMode::parse("handover-deferred-"), None);
    }
}
