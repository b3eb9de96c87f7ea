//! `stop-copy`: total copy while the process is stopped.
//!
//! Source: freeze the process and capture it into a tmpfs staging directory (the
//! holder keeps it frozen), stream every image file to the destination in large
//! chunks, wait for `Restored`, then kill the frozen original (`Commit`).
//! Destination: write the files into its own staging directory, verify the image,
//! restore it with `pmig restore --detach` in a helper process, reply `Restored`.
//!
//! See docs/protocol.md, "stop-copy", for the sequence diagram.

use crate::clock::{mark, mono_ns};
use crate::error::{io_err, Result, StrategyError};
use crate::holder::{CaptureMode, Holder};
use crate::post_copy::{owed_of, read_image};
use crate::{Destination, Progress, Source, Strategy, StrategyKind};
use pmig_engine::lazy::LazyMemory;
use pmig_engine::resources::{memory::Memory, Resource};
use pmig_proto::blocking::Incoming;
use pmig_proto::{code, Msg};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

const PAGE: u64 = pmig_image::PAGE_SIZE;

/// Bytes of image data per `ImageChunk` message.
pub const CHUNK: usize = 16 << 20;

/// Files of an image, in sending order (the manifest last).
const FILES: [&str; 3] = [
    pmig_image::PARTS_FILE,
    pmig_image::PAGES_FILE,
    pmig_image::MANIFEST_FILE,
];

#[derive(Debug, Default)]
pub struct StopCopy;

/// A read-only memory map of a whole file (zero-copy sending).
struct Map {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Map {
    fn new(f: &File, len: usize) -> std::io::Result<Map> {
        if len == 0 {
            return Ok(Map {
                ptr: std::ptr::null_mut(),
                len: 0,
            });
        }
        // SAFETY: a private read-only mapping of a file we hold open; the staging
        // file is not modified while mapped (the holder finished writing it).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                f.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Map { ptr, len })
    }

    fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `ptr` maps `len` readable bytes for the lifetime of `self`.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: unmapping exactly the mapping created in `new`.
            unsafe { libc::munmap(self.ptr, self.len) };
        }
    }
}

/// The skeleton's image as the source holds it, for the images sent after
/// it to be planned against ([`crate::delta`]): read when the destination
/// says it holds the skeleton, so that the stop reads none of it. Its
/// manifest, its state file and page data mapped, and where its pages lie.
pub(crate) struct DeltaBase {
    manifest: pmig_image::Manifest,
    parts: Map,
    runs: Vec<crate::delta::PageRun>,
    pages: Map,
}

impl DeltaBase {
    pub(crate) fn read(dir: &Path) -> Result<DeltaBase> {
        let manifest = crate::delta::manifest_of(dir)?;
        let parts = map_file(&dir.join(pmig_image::PARTS_FILE))?;
        let runs = page_runs(&manifest, parts.bytes())?;
        let pages = map_file(&dir.join(pmig_image::PAGES_FILE))?;
        Ok(DeltaBase {
            manifest,
            parts,
            runs,
            pages,
        })
    }
}

/// Where the pages of an image's page data lie: the runs of its `memory`
/// part, decoded from `parts`, its state file (placed by `manifest`).
fn page_runs(manifest: &pmig_image::Manifest, parts: &[u8]) -> Result<Vec<crate::delta::PageRun>> {
    let mem: <Memory as Resource>::State = manifest
        .decode_part(Memory::PART, pmig_image::PARTS_FILE, parts)
        .map_err(|e| StrategyError::Other(e.to_string()))?;
    Ok(mem
        .vmas
        .iter()
        .flat_map(|v| v.runs.iter().copied())
        .collect())
}

/// Streams the image files of `dir` to the destination; after a skeleton
/// it holds, the state file and page data against the skeleton's
/// ([`crate::delta`], [`DeltaBase`]); to a version-16 destination, runs of
/// zeros as their length ([`crate::delta::without_zeros`]).
pub(crate) fn send_image(m: &mut Source, dir: &Path) -> Result<u64> {
    let mut maps = Vec::new();
    for name in FILES {
        let p = dir.join(name);
        maps.push(map_file(&p)?);
    }
    let total: u64 = maps.iter().map(|m| m.len as u64).sum();
    let mut done = 0u64;
    (m.progress)(Progress {
        phase: "transfer",
        done,
        total,
    });
    let of = |name: &str| {
        maps[FILES
            .iter()
            .position(|f| *f == name)
            .expect("an image file")]
        .bytes()
    };
    // The skeleton's image, and this image's own manifest (read once for
    // both plans); without that manifest, the files go whole.
    let planning = m.delta_base.clone().and_then(|base| {
        let p = dir.join(pmig_image::MANIFEST_FILE);
        match pmig_image::decode_manifest(&p, of(pmig_image::MANIFEST_FILE)) {
            Ok(fin_m) => Some((base, fin_m)),
            Err(e) => {
                tracing::info!("the image goes whole, not against the skeleton's: {e}");
                None
            }
        }
    });
    let parts = of(pmig_image::PARTS_FILE);
    for (name, map) in FILES.iter().zip(&maps) {
        let size = map.len as u64;
        let pieces = match (name, &planning) {
            (&pmig_image::PARTS_FILE, Some((base, fin_m))) => planned(
                "image",
                "state bytes",
                map.bytes(),
                Ok(against(base, fin_m, map.bytes())),
            ),
            (&pmig_image::PAGES_FILE, Some((base, fin_m)))
                if m.ch.peer().version >= pmig_proto::msg::PAGES_AGAINST_SKELETON =>
            {
                let plan = pages_against(base, fin_m, parts, map.bytes());
                planned("page data", "bytes", map.bytes(), plan)
            }
            _ => vec![crate::delta::Piece::Send { at: 0, len: size }],
        };
        let pieces = if m.ch.peer().version >= pmig_proto::msg::IMAGE_ZEROS {
            let pieces = crate::delta::without_zeros(pieces, map.bytes());
            let zeros =
                crate::delta::bytes_of(&pieces, |p| matches!(p, crate::delta::Piece::Zeros { .. }));
            mark(&format!(
                "src: {name}: {zeros} of {size} bytes are runs of zeros, not sent"
            ));
            pieces
        } else {
            pieces
        };
        m.ch.queue(
            &Msg::ImageFile {
                id: m.id,
                name: name.to_string(),
                size,
            },
            &[],
        )?;
        m.count(32);
        // Queued: flushed about every MiB, and by `ImageDone` at the end
        // (a small image goes out in one write).
        for piece in pieces {
            let (at, len) = match piece {
                crate::delta::Piece::Copy { from, len } => {
                    m.ch.queue(
                        &Msg::ImageCopy {
                            id: m.id,
                            from,
                            len,
                        },
                        &[],
                    )?;
                    m.count(32);
                    done += len;
                    continue;
                }
                crate::delta::Piece::Zeros { len } => {
                    m.ch.queue(&Msg::ImageZeros { id: m.id, len }, &[])?;
                    m.count(24);
                    done += len;
                    continue;
                }
                crate::delta::Piece::Send { at, len } => (at as usize, len as usize),
            };
            for (i, chunk) in map.bytes()[at..at + len].chunks(CHUNK).enumerate() {
                let wire =
                    m.ch.queue_image_chunk(m.id, (at + i * CHUNK) as u64, chunk)?;
                m.count(wire);
                done += chunk.len() as u64;
                (m.progress)(Progress {
                    phase: "transfer",
                    done,
                    total,
                });
            }
        }
        // Each file as soon as it is planned: the destination takes in
        // one while the next is planned (the last goes with `ImageDone`).
        if *name != FILES[FILES.len() - 1] {
            m.ch.flush()?;
        }
    }
    m.ch.send(&Msg::ImageDone {
        id: m.id,
        files: FILES.len() as u32,
        bytes: total,
    })?;
    m.count(24);
    Ok(total)
}

/// The pieces of the state file `fin` of an image (its manifest `fin_m`)
/// against the skeleton's.
fn against(base: &DeltaBase, fin_m: &pmig_image::Manifest, fin: &[u8]) -> Vec<crate::delta::Piece> {
    crate::delta::plan(
        &base.manifest,
        base.parts.bytes(),
        fin_m,
        fin,
        pmig_image::PARTS_FILE,
    )
}

/// The file at `p`, mapped whole.
fn map_file(p: &Path) -> Result<Map> {
    let f = File::open(p).map_err(io_err(format!("open {}", p.display())))?;
    let len = f
        .metadata()
        .map_err(io_err(format!("stat {}", p.display())))?
        .len();
    Map::new(&f, len as usize).map_err(io_err(format!("map {}", p.display())))
}

/// The plan made of `fin`, marked with how much of it the skeleton's file
/// gives (`what`: the file, `unit`: its bytes); or, if it could not be
/// made, the whole file, sent.
fn planned(
    what: &str,
    unit: &str,
    fin: &[u8],
    read: Result<Vec<crate::delta::Piece>>,
) -> Vec<crate::delta::Piece> {
    match read {
        Ok(pieces) => {
            let copied =
                crate::delta::bytes_of(&pieces, |p| matches!(p, crate::delta::Piece::Copy { .. }));
            mark(&format!(
                "src: {what} planned against the skeleton's ({copied} of {} {unit} taken from it)",
                fin.len()
            ));
            pieces
        }
        Err(e) => {
            tracing::info!("the {what} goes whole: the skeleton's cannot be read: {e}");
            vec![crate::delta::Piece::Send {
                at: 0,
                len: fin.len() as u64,
            }]
        }
    }
}

/// The pieces of the page data `fin` of an image (its manifest `fin_m`,
/// its state file `parts`) against the skeleton's page data, page by page
/// at the same address ([`crate::delta::plan_pages`]).
fn pages_against(
    base: &DeltaBase,
    fin_m: &pmig_image::Manifest,
    parts: &[u8],
    fin: &[u8],
) -> Result<Vec<crate::delta::Piece>> {
    if fin.is_empty() {
        return Ok(Vec::new());
    }
    let fin_runs = page_runs(fin_m, parts)?;
    Ok(crate::delta::plan_pages(
        &base.runs,
        base.pages.bytes(),
        &fin_runs,
        fin,
    ))
}

impl Strategy for StopCopy {
    fn kind(&self) -> StrategyKind {
        StrategyKind::StopCopy
    }

    fn prepare(&mut self, _m: &mut Source) -> Result<()> {
        Ok(())
    }

    fn handover(&mut self, m: &mut Source) -> Result<()> {
        let host = m.host;
        std::fs::create_dir_all(&m.staging)
            .map_err(io_err(format!("create {}", m.staging.display())))?;
        let staging = m.staging.clone();
        // The image holds everything but the private anonymous pages, which
        // go straight from the frozen process to the destination's.
        let holder = Holder::start_with(host, m.pid, m.started, &staging, &CaptureMode::Handover)?;
        m.stopped_ns = Some(holder.captured.frozen_ns);
        m.pages_sent = holder.captured.page_bytes / PAGE;
        holder.captured.log(m.pid, "in the image");
        m.holder = Some(holder);
        send_image(m, &staging)?;
        mark("src: image sent");
        let owed = owed_of(&read_image(&staging)?).0;
        let pages = push_all(m, &owed)?;
        m.pages_sent += pages;
        mark("src: pages sent");
        m.await_restored()
    }

    fn post(&mut self, m: &mut Source) -> Result<()> {
        // Nothing is owed after a total copy: remove the source copy now.
        m.commit()?;
        m.residual.until = "handover (nothing remains on the source)".into();
        Ok(())
    }

    fn destination(&mut self, d: &mut Destination) -> Result<i32> {
        let dir = d.staging.clone();
        prespawn(d, &dir, Mode::Held);
        receive_image(d)?;
        let t_done = mono_ns();
        mark("dst: image received");
        hang_hook(d);
        let fail = |d: &mut Destination, code: u32, e: String| {
            let text = format!("{}: {e}", d.host.node());
            let _ = d.ch.send(&Msg::Error {
                code,
                text: text.chars().take(4000).collect(),
            });
            drain(d);
            StrategyError::Other(text)
        };
        // Verified first, then decoded for the owed pages.
        let held = match restore_held(d, &dir) {
            Ok(h) => h,
            Err((c, e)) => return Err(fail(d, c, e)),
        };
        let pi = match read_image(&dir) {
            Ok(pi) => pi,
            Err(e) => return Err(fail(d, code::BAD_IMAGE, e.to_string())),
        };
        let uffd = match pmig_engine::dirty::take_fd(held.pid, held.uffd_fd) {
            Ok(f) => f,
            Err(e) => {
                let e = format!("take the restored process's userfaultfd: {e}");
                return Err(fail(d, code::RESTORE_FAILED, e));
            }
        };
        let (owed, registered) = owed_of(&pi);
        let lm = LazyMemory::new(uffd, &owed, registered);
        lm.rewrite_owners(held.pid, held.ids.clone());
        // Until released, the held process is killed on any failure (the
        // source then resumes its own copy).
        let total = owed.iter().map(|r| r.1).sum();
        if let Err(e) = receive_pages(d, &lm, total) {
            tracing::warn!(
                "migration {}: {e}; the held copy (pid {}) is killed",
                d.offer.id,
                held.pid
            );
            let code = match e {
                StrategyError::Protocol { .. } => code::UNEXPECTED,
                _ => code::RESTORE_FAILED,
            };
            return Err(fail(d, code, e.to_string()));
        }
        mark("dst: pages installed");
        lm.finish();
        let (pid, original_pid, tids) = (held.pid, held.original_pid, held.tids.clone());
        let made = held.sysv_made.clone();
        let resumed_ns = match held.release() {
            Ok(t) => t,
            Err(e) => return Err(fail(d, code::RESTORE_FAILED, e)),
        };
        d.host.restored_here(d.offer.id, &d.peer, pid, &tids);
        d.made_segments = made;
        d.ch.send(&Msg::Restored {
            id: d.offer.id,
            pid,
            original_pid,
            restore_us: resumed_ns.saturating_sub(t_done) / 1000,
            since_resume_us: mono_ns().saturating_sub(resumed_ns) / 1000,
        })?;
        await_commit(d, pid)?;
        Ok(pid)
    }
}

/// Bytes of pages per `PageData` message of a total copy.
const PUSH_BYTES: usize = 1 << 20;

/// Source, at the handover: sends the pages `owed` (runs of bytes) from the
/// frozen process, read by a second thread while this one sends. Returns
/// the number of pages sent.
fn push_all(m: &mut Source, owed: &[(u64, u64)]) -> Result<u64> {
    let total: u64 = owed.iter().map(|r| r.1).sum();
    let (pid, id) = (m.pid, m.id);
    let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<(u64, Vec<u8>, usize)>(3);
    let (empty_tx, empty_rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(4);
    for _ in 0..4 {
        empty_tx
            .send(vec![0u8; PUSH_BYTES])
            .expect("the channel has room");
    }
    std::thread::scope(|sc| -> Result<()> {
        let reader = sc.spawn(move || -> Result<()> {
            for &(start, len) in owed {
                let mut off = 0;
                while off < len {
                    let n = (len - off).min(PUSH_BYTES as u64) as usize;
                    // The sender has stopped: it reports why.
                    let Ok(mut buf) = empty_rx.recv() else {
                        return Ok(());
                    };
                    let got = pmig_engine::sys::process_vm_read(pid, start + off, &mut buf[..n])
                        .map_err(|e| StrategyError::Other(e.to_string()))?;
                    if got != n {
                        return Err(StrategyError::Other(format!(
                            "short read of the frozen process at {:#x}",
                            start + off
                        )));
                    }
                    if full_tx.send((start + off, buf, n)).is_err() {
                        return Ok(());
                    }
                    off += n as u64;
                }
            }
            Ok(())
        });
        let mut done = 0u64;
        let sent = (|| -> Result<()> {
            for (addr, buf, n) in full_rx {
                // The destination speaks only to refuse (its restore failed,
                // say): stop and report its reason.
                if readable(m.ch.stream()) {
                    return Err(reason_for_stop(m));
                }
                let sent = match m.ch.send_pages(id, addr, &buf[..n]) {
                    Ok(s) => s,
                    Err(e) => {
                        // Its reason, if it sent one before closing, is
                        // still ours to read.
                        return Err(match m.recv("nothing") {
                            Err(r @ StrategyError::Refused { .. }) => r,
                            _ => e.into(),
                        });
                    }
                };
                m.count(sent.wire());
                done += n as u64;
                (m.progress)(Progress {
                    phase: "transfer",
                    done,
                    total,
                });
                let _ = empty_tx.send(buf);
            }
            Ok(())
        })();
        drop(empty_tx);
        let read = reader
            .join()
            .map_err(|_| StrategyError::Other("the page reader panicked".into()))?;
        sent?;
        read?;
        if done != total {
            return Err(StrategyError::Other(format!(
                "sent {done} of {total} bytes of pages"
            )));
        }
        Ok(())
    })?;
    Ok(total / PAGE)
}

/// Whether `s` has something to read (or has failed) now.
fn readable(s: &std::net::TcpStream) -> bool {
    let mut p = libc::pollfd {
        fd: s.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: polling one valid descriptor, without waiting.
    unsafe { libc::poll(&mut p, 1, 0) > 0 }
}

/// The destination spoke while pages were still being sent: its message
/// (normally `Error`) as an error.
fn reason_for_stop(m: &mut Source) -> StrategyError {
    match m.recv("nothing while pages are sent") {
        Err(e) => e,
        Ok(other) => StrategyError::Protocol {
            node: m.peer.clone(),
            what: format!("unexpected {} while pages were sent", other.kind()),
        },
    }
}

/// Threads that install the pages of a total copy side by side: copying
/// into fresh memory, where the host backs it on first touch (a VM), is
/// the slowest step of the transfer, and such copies overlap.
const INSTALLERS: usize = 2;

/// Destination of a total copy: installs `PageData` into the held process
/// until nothing is owed. This thread receives (and decrypts) while
/// [`INSTALLERS`] others install.
fn receive_pages(d: &mut Destination, lm: &LazyMemory, total: u64) -> Result<()> {
    let bad = |what: String| StrategyError::Protocol {
        node: String::new(),
        what,
    };
    if lm.owed_pages() == 0 {
        return Ok(());
    }
    let (tx, rx) = std::sync::mpsc::sync_channel::<Incoming>(4);
    // Shared by the installers; gone, and the channel closed, once the
    // last of them has ended.
    let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
    // An installer failed: the others stop too.
    let stop = std::sync::atomic::AtomicBool::new(false);
    // Installed messages come back to be received into again.
    let (done_tx, done_rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::scope(|sc| -> Result<()> {
        let installers: Vec<_> = (0..INSTALLERS)
            .map(|_| {
                let (rx, done_tx, stop) = (rx.clone(), done_tx.clone(), &stop);
                sc.spawn(move || -> Result<()> {
                    use std::sync::atomic::Ordering;
                    while !stop.load(Ordering::Acquire) {
                        let Ok(inc) = rx.lock().unwrap().recv() else {
                            // The receiver stopped first: it reports why.
                            return Ok(());
                        };
                        if let Some((_, addr, data)) = inc.pages() {
                            if let Err(e) = crate::post_copy::install_pages(lm, &inc, addr, data) {
                                stop.store(true, Ordering::Release);
                                return Err(StrategyError::Other(format!("install pages: {e}")));
                            }
                        }
                        if lm.owed_pages() == 0 {
                            return Ok(());
                        }
                        let _ = done_tx.send(inc.into_body());
                    }
                    Ok(())
                })
            })
            .collect();
        drop((rx, done_tx));
        let received = (|| -> Result<()> {
            // The source sends exactly the owed pages, each once.
            let mut got = 0u64;
            while got < total {
                while let Ok(b) = done_rx.try_recv() {
                    d.ch.recycle(b);
                }
                let inc = d.ch.recv_with()?;
                if let Some((_, addr, data)) = inc.pages().filter(|p| p.0 == d.offer.id) {
                    let n = data.len();
                    if n == 0 || !(n as u64).is_multiple_of(PAGE) {
                        return Err(bad(format!(
                            "{} of {n} bytes at {addr:#x} is not whole pages",
                            inc.msg.kind()
                        )));
                    }
                    d.count_received(inc.attachment().len() as u64);
                    got += n as u64;
                    // Gone: the installer failed, or has every page.
                    if tx.send(inc).is_err() {
                        return Ok(());
                    }
                    continue;
                }
                match inc.msg {
                    Msg::Abort { reason, .. } => return Err(d.source_aborted(reason)),
                    other => {
                        return Err(bad(format!(
                            "unexpected {} during the page transfer",
                            other.kind()
                        )))
                    }
                }
            }
            Ok(())
        })();
        drop(tx);
        for installer in installers {
            installer
                .join()
                .map_err(|_| StrategyError::Other("the page installer panicked".into()))??;
        }
        received?;
        if lm.owed_pages() != 0 {
            return Err(StrategyError::Other(format!(
                "{} pages still missing after the transfer",
                lm.owed_pages()
            )));
        }
        Ok(())
    })
}

/// After an `Error` sent while the source may still be sending pages: read
/// and drop what comes until it closes (for at most 5 s), so that closing
/// first does not reset the connection and lose the `Error` on its way.
fn drain(d: &mut Destination) {
    let t0 = std::time::Instant::now();
    let _ =
        d.ch.stream()
            .set_read_timeout(Some(Duration::from_millis(500)));
    while t0.elapsed() < Duration::from_secs(5) {
        if d.ch.recv_with().is_err() {
            break;
        }
    }
}

/// Test hook `hang-before-restore`: never answer.
fn hang_hook(d: &Destination) {
    if d.hooks.hang_before_restore {
        tracing::warn!("test hook: not answering migration {}", d.offer.id);
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// Destination: receive `ImageFile`/`ImageChunk` until `ImageDone`.
pub(crate) fn receive_image(d: &mut Destination) -> Result<u64> {
    let dir = d.staging.clone();
    receive_image_into(d, &dir)
}

/// [`receive_image`] into another directory than the staging one.
pub(crate) fn receive_image_into(d: &mut Destination, dir: &Path) -> Result<u64> {
    receive_image_after(d, dir, None)
}

/// [`receive_image_into`] whose first message (`ImageFile`) may have been
/// received already, e.g. by a pre-copy destination reading pages until the
/// image starts.
pub(crate) fn receive_image_after(
    d: &mut Destination,
    dir: &Path,
    mut first: Option<Incoming>,
) -> Result<u64> {
    let mut current: Option<FileIn> = None;
    let mut base: Option<Arc<SkeletonFile>> = None; // the skeleton's file of that name
    let mut files = 0u32;
    let mut total = 0u64;
    let bad = |what: String| StrategyError::Protocol {
        node: String::new(),
        what,
    };
    // The image of the stop after a skeleton's: its files gather in memory
    // touched when the skeleton's image came ([`SkeletonBase::read`]).
    let mut gather = d
        .delta_base
        .as_mut()
        .map(|b| std::mem::take(&mut b.gather))
        .unwrap_or_default();
    loop {
        let inc = match first.take() {
            Some(inc) => inc,
            None => d.ch.recv_with()?,
        };
        let (msg, body, att) = inc.into_parts();
        let data = &body[att..];
        match msg {
            Msg::ImageFile { id, name, size } if id == d.offer.id => {
                if let Some(done) = current.take() {
                    gather = done.finish(dir)?;
                }
                if !pmig_proto::is_safe_file_name(&name) {
                    return Err(bad(format!("invalid file name {name:?}")));
                }
                let p = dir.join(&name);
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&p)
                    .map_err(io_err(format!("create {}", p.display())))?;
                files += 1;
                current = Some(FileIn {
                    name,
                    file: f,
                    size,
                    written: 0,
                    pending: std::mem::take(&mut gather),
                });
                base = None;
            }
            Msg::ImageCopy { id, from, len } if id == d.offer.id => {
                let Some(cur) = current.as_mut() else {
                    return Err(bad("image data before any ImageFile".into()));
                };
                if cur.written.saturating_add(len) > cur.size {
                    return Err(bad(format!(
                        "a copy of {len} bytes runs past file {} ({} of {} bytes written)",
                        cur.name, cur.written, cur.size
                    )));
                }
                if base.is_none() {
                    let Some(skeleton) = d.delta_base.as_ref() else {
                        return Err(bad("ImageCopy, but no skeleton's image is here".into()));
                    };
                    base = Some(skeleton.file(&cur.name)?);
                }
                let b = base.as_ref().expect("opened above");
                if from.saturating_add(len) > b.len {
                    return Err(bad(format!(
                        "a copy of {len} bytes at {from} runs past the skeleton's {} ({} bytes)",
                        cur.name, b.len
                    )));
                }
                let into = dir.join(&cur.name);
                match &b.bytes {
                    Some(bytes) => cur.put(&bytes[from as usize..(from + len) as usize]),
                    None => cur.flush().and_then(|()| {
                        copy_from(&b.file, from, &mut cur.file, len)?;
                        cur.written += len;
                        Ok(())
                    }),
                }
                .map_err(io_err(format!("copy into {}", into.display())))?;
                total += len;
            }
            Msg::ImageZeros { id, len } if id == d.offer.id => {
                let Some(cur) = current.as_mut() else {
                    return Err(bad("image data before any ImageFile".into()));
                };
                if cur.written.saturating_add(len) > cur.size {
                    return Err(bad(format!(
                        "{len} zero bytes run past file {} ({} of {} bytes written)",
                        cur.name, cur.written, cur.size
                    )));
                }
                cur.put_zeros(len)
                    .map_err(io_err(format!("write {}", dir.join(&cur.name).display())))?;
                total += len;
            }
            Msg::ImageChunk { id, offset } if id == d.offer.id => {
                let Some(cur) = current.as_mut() else {
                    return Err(bad("image data before any ImageFile".into()));
                };
                if offset != cur.written || cur.written + data.len() as u64 > cur.size {
                    return Err(bad(format!(
                        "chunk of {} bytes at offset {offset} does not continue file {} ({} of {} bytes written)",
                        data.len(),
                        cur.name,
                        cur.written,
                        cur.size
                    )));
                }
                cur.put(data)
                    .map_err(io_err(format!("write {}", dir.join(&cur.name).display())))?;
                total += data.len() as u64;
                d.count_received(data.len() as u64);
                d.ch.recycle(body);
            }
            Msg::ImageDone {
                id,
                files: n,
                bytes,
            } if id == d.offer.id => {
                if let Some(done) = current.take() {
                    done.finish(dir)?;
                }
                if n != files || bytes != total {
                    return Err(bad(format!(
                        "image announced {n} files and {bytes} bytes, got {files} and {total}"
                    )));
                }
                return Ok(total);
            }
            Msg::Abort { reason, .. } => return Err(d.source_aborted(reason)),
            other => {
                let e = format!("unexpected {} during the image transfer", other.kind());
                let _ = d.ch.send(&Msg::Error {
                    code: code::UNEXPECTED,
                    text: e.clone(),
                });
                return Err(bad(e));
            }
        }
    }
}

/// Pending bytes of a received file are written once they reach this many,
/// and a piece this long, with none pending, is written at once.
const GATHER: usize = 1 << 20;
/// A skeleton's file up to this long is read into memory for the copies
/// taken from it; a longer one is copied from in the kernel.
const SKELETON_IN_MEMORY: u64 = 16 << 20;

/// A file of an image being received. Its bytes are gathered and written
/// in large pieces: an image of the stop planned against a skeleton's
/// arrives as many short runs, sent or taken from the skeleton's file, and
/// a system call each would cost more than the bytes they save. Not larger
/// than [`pmig_image::WRITE_PIECE`] each, though: the page cache would
/// take the folios of a larger write from memory a VM's host may have to
/// back again.
struct FileIn {
    name: String,
    file: File,
    size: u64,
    /// Bytes received so far (written or pending).
    written: u64,
    pending: Vec<u8>,
}

impl FileIn {
    fn put(&mut self, data: &[u8]) -> std::io::Result<()> {
        if self.pending.is_empty() && data.len() >= GATHER {
            pmig_image::write_in_pieces(&mut self.file, data)?;
        } else {
            self.pending.extend_from_slice(data);
            if self.pending.len() >= GATHER {
                self.flush()?;
            }
        }
        self.written += data.len() as u64;
        Ok(())
    }

    /// [`put`](Self::put) of `len` zero bytes (`ImageZeros`).
    fn put_zeros(&mut self, mut len: u64) -> std::io::Result<()> {
        while len > 0 {
            let n = len.min(GATHER.saturating_sub(self.pending.len()).max(1) as u64);
            self.pending.resize(self.pending.len() + n as usize, 0);
            self.written += n;
            len -= n;
            if self.pending.len() >= GATHER {
                self.flush()?;
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if !self.pending.is_empty() {
            pmig_image::write_in_pieces(&mut self.file, &self.pending)?;
            self.pending.clear();
        }
        Ok(())
    }

    /// The file is complete: all its bytes came and are written. Gives
    /// back the memory they gathered in, for the next file.
    fn finish(mut self, dir: &Path) -> Result<Vec<u8>> {
        if self.written != self.size {
            return Err(StrategyError::Protocol {
                node: String::new(),
                what: format!(
                    "file {} ended after {} of {} bytes",
                    self.name, self.written, self.size
                ),
            });
        }
        self.flush()
            .map_err(io_err(format!("write {}", dir.join(&self.name).display())))?;
        Ok(self.pending)
    }
}

/// An empty buffer with room for `len` bytes, every page of which has been
/// written: a file of the image of the stop gathers in it without a page
/// fault per 4 KiB while the process is stopped, where a buffer that grows
/// takes fresh memory, with a fault per page, at each doubling (a JVM's
/// copies from the skeleton's file took 0.30–0.35 ms that way on the
/// 2-vCPU VM, 0.06–0.10 ms in touched memory: BENCHMARKS.md, "The image of
/// the stop gathers in touched memory").
fn touched(len: usize) -> Vec<u8> {
    let mut b = vec![1u8; len];
    std::hint::black_box(&mut b);
    b.clear();
    b
}

/// The skeleton's image as the destination received it, whose files the
/// images after it take bytes from (`ImageCopy`): its state file and page
/// data are read as soon as it is received, so that the stop does not
/// read them.
pub(crate) struct SkeletonBase {
    dir: PathBuf,
    files: Vec<(&'static str, Arc<SkeletonFile>)>,
    /// Memory the files of the image of the stop gather in ([`touched`]):
    /// as much as a file gathers before it is written, since the image of
    /// the stop is not bounded by the skeleton's.
    gather: Vec<u8>,
}

impl SkeletonBase {
    /// The image in `dir`; a file that cannot be read now is tried again
    /// when a copy is taken from it (and its error reported then).
    pub(crate) fn read(dir: &Path) -> SkeletonBase {
        let files = [pmig_image::PARTS_FILE, pmig_image::PAGES_FILE]
            .into_iter()
            .filter_map(|name| {
                let f = SkeletonFile::open(&dir.join(name)).ok()?;
                Some((name, Arc::new(f)))
            })
            .collect();
        SkeletonBase {
            dir: dir.to_path_buf(),
            files,
            gather: touched(GATHER),
        }
    }

    fn file(&self, name: &str) -> Result<Arc<SkeletonFile>> {
        if let Some((_, f)) = self.files.iter().find(|(n, _)| *n == name) {
            return Ok(f.clone());
        }
        let p = self.dir.join(name);
        let f = SkeletonFile::open(&p).map_err(io_err(format!("open {}", p.display())))?;
        Ok(Arc::new(f))
    }
}

/// The skeleton's file that copies are taken from; its bytes in memory when
/// it is short.
struct SkeletonFile {
    file: File,
    len: u64,
    bytes: Option<Vec<u8>>,
}

impl SkeletonFile {
    fn open(p: &Path) -> std::io::Result<SkeletonFile> {
        let mut file = File::open(p)?;
        let len = file.metadata()?.len();
        let bytes = if len <= SKELETON_IN_MEMORY {
            let mut b = Vec::with_capacity(len as usize);
            file.read_to_end(&mut b)?;
            if b.len() as u64 != len {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the skeleton's file changed while it was read",
                ));
            }
            Some(b)
        } else {
            None
        };
        Ok(SkeletonFile { file, len, bytes })
    }
}

/// Appends `len` bytes of `from_file` at `from` to `to` (at its offset),
/// in the kernel.
fn copy_from(from_file: &File, from: u64, to: &mut File, len: u64) -> std::io::Result<()> {
    let mut off = from as i64;
    let mut left = len as usize;
    while left > 0 {
        let n = nix::fcntl::copy_file_range(from_file, Some(&mut off), &*to, None, left)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the skeleton's file ended",
            ));
        }
        left -= n;
    }
    Ok(())
}

fn stdio_file(d: &Destination) -> std::path::PathBuf {
    let dir = d.host.state_dir().join("procs");
    let _ = std::fs::create_dir_all(&dir);
    let comm: String = d
        .offer
        .comm
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    dir.join(format!("{comm}-{}-{}.out", d.offer.pid, d.offer.id))
}

/// What [`restore_from`] started.
pub(crate) struct Started {
    pub pid: i32,
    pub original_pid: i32,
    /// CLOCK_MONOTONIC when it was resumed.
    pub resumed_ns: u64,
    /// Lazy restores: the fd number of the userfaultfd the process keeps.
    pub uffd_fd: Option<i32>,
    /// The threads' ids (old, new) the restore rewrote in the process's
    /// memory (`pmig_engine::Restored::ids`).
    pub ids: Vec<(i32, i32)>,
    /// Every thread's id in the image and here (`Restored::tids`).
    pub tids: Vec<(i32, i32)>,
    /// The System V shared memory the restore made (`Restored::sysv_made`).
    pub sysv_made: Vec<pmig_engine::resources::sysvshm::MadeSegment>,
}

/// A `pmig restore --wait-go` started while the image is still on its way:
/// starting the program costs about 1.5 ms here, which would otherwise count
/// in the process's down time. Dropped unused, it reads end-of-file and exits
/// having done nothing.
pub(crate) struct Prespawned<'a> {
    helper: Helper<'a>,
    dir: PathBuf,
    mode: Mode,
    out: PathBuf,
    err: ErrLog,
}

/// How `pmig restore` is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Every page from the image.
    Full,
    /// `--lazy`: the pages missing from the image are served afterwards.
    Lazy,
    /// `--lazy --hold`: the pages missing from the image are provided before
    /// the process runs (see [`Held`]).
    Held,
    /// `--lazy --skeleton`: held until brought up to the image of the stop
    /// (see [`HeldSkeleton`]).
    Skeleton,
}

/// A `pmig restore` process and its stdin. Dropped, its stdin closes (a
/// restore waiting for `go` then does nothing; one holding a process kills
/// it) and it is reaped.
struct Helper<'a> {
    host: &'a dyn crate::Host,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
}

impl Drop for Helper<'_> {
    fn drop(&mut self) {
        drop(self.stdin.take());
        if let Some(mut c) = self.child.take() {
            let _ = self.host.wait(&mut c);
        }
    }
}

impl Prespawned<'_> {
    /// Tells it to go on; None if it is gone (then a fresh one is started).
    /// A held restore keeps its stdin for `release`. Called only once the
    /// image in its directory has been verified ([`start_restore`]), so it
    /// is told not to verify it again.
    fn go(mut self) -> Option<Spawned> {
        let mut stdin = self.helper.stdin.take()?;
        if stdin.write_all(b"go verified\n").is_err() {
            return None;
        }
        let stdin = (self.mode == Mode::Held).then_some(stdin);
        let child = self.helper.child.take()?;
        Some(Spawned {
            child,
            stdin,
            out: self.out.clone(),
            err: self.err,
        })
    }
}

/// A running `pmig restore`.
struct Spawned {
    child: Child,
    /// `--hold`: where `release` goes.
    stdin: Option<ChildStdin>,
    /// Where the process's terminal or pipe stdio goes.
    out: PathBuf,
    err: ErrLog,
}

/// A `pmig restore`'s error output: a file created in `dir` and unlinked at
/// once, read through our own descriptor. Its directory may be renamed or
/// removed while the restore runs (pre-copy sets its staging directory aside
/// as its page store), and nothing is left behind.
pub(crate) struct ErrLog(File);

impl ErrLog {
    /// The log and the descriptor to give the restore as its stderr.
    fn new(dir: &Path) -> std::io::Result<(ErrLog, File)> {
        let path = dir.join(format!("restore-{}.err", mono_ns()));
        let w = File::create(&path)?;
        let r = File::open(&path);
        let _ = std::fs::remove_file(&path);
        Ok((ErrLog(r?), w))
    }

    /// Everything written so far.
    fn text(&self) -> String {
        let mut buf = Vec::new();
        let mut off = 0u64;
        let mut chunk = [0u8; 8192];
        // Bounded: the output of one restore, read to its current end.
        while let Ok(n) = std::os::unix::fs::FileExt::read_at(&self.0, &mut chunk, off) {
            if n == 0 || buf.len() > 16 << 20 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            off += n as u64;
        }
        String::from_utf8_lossy(&buf).into_owned()
    }
}

/// The last line of a failed `pmig restore`'s error output.
fn restore_failure(err: &ErrLog) -> String {
    let err = err.text();
    err.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no error output")
        .trim_start_matches("pmig: ")
        .to_string()
}

/// The flags of a destination's `pmig restore` that follow its image
/// directory: how lazy it is, and the CPU check the daemon was told.
fn restore_flags(
    mode: Mode,
    cpu_check: Option<pmig_engine::resources::cpu::CpuCheck>,
) -> Vec<&'static str> {
    let mut v = match mode {
        Mode::Full => vec![],
        Mode::Lazy => vec!["--lazy"],
        Mode::Held => vec!["--lazy", "--hold"],
        Mode::Skeleton => vec!["--lazy", "--skeleton"],
    };
    if let Some(c) = cpu_check {
        v.extend(["--cpu-check", c.as_str()]);
    }
    v
}

/// The `pmig restore --detach --json` command for the image in `dir` (with
/// `--lazy` for post-copy), its stdout file and its error output.
fn restore_command(
    d: &Destination,
    dir: &Path,
    mode: Mode,
) -> std::result::Result<(Command, PathBuf, ErrLog), (u32, String)> {
    let [stdin, out, stderr] = match d.host.stdio_for(&d.peer, &d.offer) {
        Some(s) => s,
        None => {
            let out = stdio_file(d);
            [PathBuf::from("/dev/null"), out.clone(), out]
        }
    };
    let (err, err_file) = ErrLog::new(&d.staging).map_err(|e| (code::INTERNAL, e.to_string()))?;
    let mut cmd = Command::new(d.host.exe());
    cmd.args(["restore", "--detach", "--json", "--dir"])
        .arg(dir)
        .args(restore_flags(mode, d.host.cpu_check()))
        .arg("--stdin")
        .arg(&stdin)
        .arg("--stdout")
        .arg(&out)
        .arg("--stderr")
        .arg(&stderr)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(err_file));
    // No rseq area in the restoring process, so none the new process could
    // inherit: the restore need not stop it to unregister one. The
    // restored process's own environment is in its memory, not this.
    let tunables = match std::env::var("GLIBC_TUNABLES") {
        Ok(t) if !t.is_empty() => format!("{t}:glibc.pthread.rseq=0"),
        _ => "glibc.pthread.rseq=0".to_string(),
    };
    cmd.env("GLIBC_TUNABLES", tunables);
    // A session of its own, whose process group (the session's, led by
    // `pmig restore`) the restored process joins; it is not made a session
    // leader unless it was one. In the daemon's group, a `kill(0, sig)` of
    // the program, a shell's `trap 'kill 0' EXIT` or any signal to its group
    // would reach this daemon too; in the daemon's session, it would share
    // the daemon's CPU share (the kernel's autogroup is per session), and a
    // program with hundreds of busy threads starved the daemon. No SIGHUP
    // when `pmig restore` exits, even to a stopped process: the kernel
    // sends one to a group that an exit orphans only if the exiting process
    // is the parent of a member in another group of its session, or a
    // member whose parent is in another group of its session. Here the
    // restored process is in `pmig restore`'s group (or, a session leader,
    // in a session of its own), and this daemon in another session. (A job
    // on a pty gets a session on its new terminal from `wrap_restore`,
    // whose keeper's `setsid` comes after this one, in a forked child that
    // leads no group.)
    // SAFETY: setsid is async-signal-safe and touches no memory.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    d.host.wrap_restore(&d.peer, &d.offer, &mut cmd);
    Ok((cmd, out, err))
}

/// Starts the restore of the image that will arrive in `dir` ahead of it
/// (see [`Prespawned`]). Without success nothing is lost: [`restore_from`]
/// then starts it as before.
pub(crate) fn prespawn_restore(d: &mut Destination, dir: &Path, lazy: bool) {
    prespawn(d, dir, if lazy { Mode::Lazy } else { Mode::Full })
}

fn prespawn(d: &mut Destination, dir: &Path, mode: Mode) {
    // One waits already for the same image (flushing's, started during
    // the pre-flush): it is kept.
    if d.restorer
        .as_ref()
        .is_some_and(|r| r.dir == dir && r.mode == mode)
    {
        return;
    }
    let Ok((mut cmd, out, err)) = restore_command(d, dir, mode) else {
        return;
    };
    cmd.arg("--wait-go").stdin(Stdio::piped());
    match d.host.spawn(&mut cmd) {
        Ok(mut child) => {
            let stdin = child.stdin.take();
            d.restorer = Some(Prespawned {
                helper: Helper {
                    host: d.host,
                    child: Some(child),
                    stdin,
                },
                dir: dir.to_path_buf(),
                mode,
                out,
                err,
            });
        }
        Err(e) => tracing::debug!("pmig restore not started ahead: {e}"),
    }
}

/// Verify the image in `dir` and restore it in a helper (`pmig restore
/// --detach`, with `--lazy` for post-copy): the one started ahead by
/// [`prespawn_restore`] for the same image, else a new one. `meanwhile`
/// is called with `dir` while the restore runs.
pub(crate) fn restore_from<'a>(
    d: &mut Destination<'a>,
    dir: &Path,
    lazy: bool,
    meanwhile: &mut dyn FnMut(&Path),
) -> std::result::Result<Started, (u32, String)> {
    let Spawned {
        mut child,
        out,
        err,
        ..
    } = start_restore(d, dir, if lazy { Mode::Lazy } else { Mode::Full })?;
    meanwhile(dir);
    let mut stdout = child.stdout.take().map(std::io::BufReader::new);
    let (mut json, reported) = match stdout.as_mut() {
        Some(s) => report_of(s),
        None => (String::new(), Err("pmig restore has no output".into())),
    };
    let r = match reported {
        // It reported the process running, and only exits now.
        Ok(r) => {
            mark("dst: pmig restore reported");
            d.exiting.push(Exiting::new(d.host, child, stdout, err));
            r
        }
        Err(why) => {
            if let Some(mut s) = stdout {
                let _ = s.read_to_string(&mut json);
            }
            mark("dst: pmig restore output read");
            let st = d.host.wait(&mut child).map_err(|e| {
                (
                    code::RESTORE_FAILED,
                    format!("waiting for pmig restore: {e}"),
                )
            })?;
            mark("dst: pmig restore exited");
            log_restore_output(&err);
            if !st.success() {
                return Err((code::RESTORE_FAILED, restore_failure(&err)));
            }
            // It exited well without reporting a process.
            return Err((code::RESTORE_FAILED, why));
        }
    };
    tracing::info!(
        "restored process {} ({}) from {} as pid {}; its terminal/pipe stdio goes to {}",
        d.offer.pid,
        d.offer.comm,
        d.peer,
        r.pid,
        out.display()
    );
    Ok(r)
}

/// The first line of a `pmig restore --json`'s output `out`, and the process
/// it reports running (resumed at the instant it reported, or else when the
/// line was read), or why it reports none: read without waiting for the
/// restore to exit.
fn report_of(
    out: &mut std::io::BufReader<std::process::ChildStdout>,
) -> (String, std::result::Result<Started, String>) {
    let mut line = String::new();
    let _ = std::io::BufRead::read_line(out, &mut line);
    let read_ns = mono_ns();
    let started = parse_restored(&line)
        .map(|r| Started {
            resumed_ns: resumed_at(r.resumed_ns, read_ns),
            ..r
        })
        .map_err(|(_, why)| why);
    (line, started)
}

/// A `pmig restore` that reported its process running (its one line of
/// output) and has only to exit. It is waited for when dropped, at the end
/// of the migration ([`Destination::exiting`]), and its warnings logged
/// then: reading its output to the end waited for that exit, a third of a
/// millisecond in which nothing answered the restored process's faults.
pub(crate) struct Exiting<'a> {
    helper: Helper<'a>,
    /// Kept open until it has exited.
    _stdout: Option<std::io::BufReader<std::process::ChildStdout>>,
    err: ErrLog,
}

impl<'a> Exiting<'a> {
    fn new(
        host: &'a dyn crate::Host,
        child: Child,
        stdout: Option<std::io::BufReader<std::process::ChildStdout>>,
        err: ErrLog,
    ) -> Exiting<'a> {
        Exiting {
            helper: Helper {
                host,
                child: Some(child),
                stdin: None,
            },
            _stdout: stdout,
            err,
        }
    }
}

impl Drop for Exiting<'_> {
    fn drop(&mut self) {
        if let Some(mut c) = self.helper.child.take() {
            match self.helper.host.wait(&mut c) {
                Ok(s) if !s.success() => tracing::warn!(
                    "pmig restore {s} after its process ran: {}",
                    restore_failure(&self.err)
                ),
                Err(e) => tracing::warn!("waiting for pmig restore: {e}"),
                Ok(_) => {}
            }
        }
        log_restore_output(&self.err);
    }
}

/// The timing marks `pmig restore` wrote to its error output, when they
/// are logged; else its warnings (a cgroup it could not move the process
/// into, say), which would otherwise go unseen.
fn log_restore_output(err: &ErrLog) {
    let text = err.text();
    if tracing::enabled!(target: "pmig_timing", tracing::Level::DEBUG) {
        for l in text.lines() {
            tracing::debug!(target: "pmig_timing", "pmig restore: {l}");
        }
        return;
    }
    for l in warnings_in(&text) {
        tracing::warn!("pmig restore: {l}");
    }
}

/// The lines of a log that `tracing`'s formatter wrote at level WARN or
/// ERROR (after a timestamp, if any).
fn warnings_in(text: &str) -> impl Iterator<Item = &str> {
    text.lines().filter(|l| {
        l.split_whitespace()
            .take(2)
            .any(|w| w == "WARN" || w == "ERROR")
    })
}

/// When the restored process started to run: the instant `pmig restore`
/// reported (`reported`, its CLOCK_MONOTONIC once it let the process go;
/// the same clock as ours, on the same node), else `eof_ns`, when its
/// output ended (it exits right after the process runs: later by the
/// helper's exit, so a down time measured to it is a little long).
fn resumed_at(reported: u64, eof_ns: u64) -> u64 {
    if reported > 0 && reported <= eof_ns {
        reported
    } else {
        eof_ns
    }
}

/// The instant in the last line of `pmig restore --json` that reports one
/// (`resumed_ns`), or 0.
fn reported_resume(json: &str) -> u64 {
    json.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l.trim()).ok())
        .find_map(|v| v["resumed_ns"].as_u64().filter(|&n| n > 0))
        .unwrap_or(0)
}

/// The pairs of ids `key` (`ids`: those `pmig restore` rewrote; `tids`:
/// every thread's) from its last line that has them (a skeleton's first
/// line has those of its own restore, the last those of its bring-up).
fn reported_ids(json: &str, key: &str) -> Vec<(i32, i32)> {
    reported(json, key)
}

/// The value `key` of `pmig restore`'s last line that has it in that type
/// (else the type's default).
fn reported<T: serde::de::DeserializeOwned + Default>(json: &str, key: &str) -> T {
    json.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l.trim()).ok())
        .find_map(|v| serde_json::from_value(v[key].clone()).ok())
        .unwrap_or_default()
}

/// `pmig restore --json`'s line, with the instant the process was let run
/// if it says (else `resumed_ns` is 0).
fn parse_restored(json: &str) -> std::result::Result<Started, (u32, String)> {
    let line = json.lines().next().unwrap_or("");
    let v: serde_json::Value = serde_json::from_str(line.trim()).map_err(|e| {
        (
            code::RESTORE_FAILED,
            format!("pmig restore printed {json:?}: {e}"),
        )
    })?;
    let pid = v["pid"].as_i64().unwrap_or(0) as i32;
    if pid <= 0 {
        return Err((
            code::RESTORE_FAILED,
            format!("pmig restore printed {json:?}"),
        ));
    }
    Ok(Started {
        pid,
        original_pid: v["original_pid"].as_i64().unwrap_or(0) as i32,
        resumed_ns: reported_resume(json),
        uffd_fd: v["uffd_fd"].as_i64().map(|f| f as i32),
        ids: reported_ids(json, "ids"),
        tids: reported_ids(json, "tids"),
        sysv_made: reported(json, "sysv_made"),
    })
}

/// A process restored lazily and held stopped by `pmig restore --hold`
/// until its missing pages are in. Dropped without [`Held::release`], the
/// restore reads end-of-file and kills it: it never ran.
pub(crate) struct Held<'a> {
    helper: Helper<'a>,
    stdout: Option<std::io::BufReader<std::process::ChildStdout>>,
    err: ErrLog,
    pub pid: i32,
    pub original_pid: i32,
    /// The number of the userfaultfd inside the process.
    pub uffd_fd: i32,
    /// As [`Started::ids`].
    pub ids: Vec<(i32, i32)>,
    /// As [`Started::tids`].
    pub tids: Vec<(i32, i32)>,
    /// As [`Started::sysv_made`].
    pub sysv_made: Vec<pmig_engine::resources::sysvshm::MadeSegment>,
}

impl Held<'_> {
    /// Lets the process run; returns CLOCK_MONOTONIC when it did.
    pub(crate) fn release(mut self) -> std::result::Result<u64, String> {
        let mut stdin = self.helper.stdin.take().ok_or("pmig restore is gone")?;
        stdin
            .write_all(b"release\n")
            .map_err(|e| format!("release the restored process: {e}"))?;
        drop(stdin);
        let mut rest = String::new();
        if let Some(mut s) = self.stdout.take() {
            let _ = s.read_to_string(&mut rest);
        }
        let resumed_ns = resumed_at(reported_resume(&rest), mono_ns());
        let mut child = self.helper.child.take().ok_or("pmig restore is gone")?;
        let st = self
            .helper
            .host
            .wait(&mut child)
            .map_err(|e| format!("waiting for pmig restore: {e}"))?;
        mark("dst: held process released");
        log_restore_output(&self.err);
        if !st.success() {
            return Err(restore_failure(&self.err));
        }
        Ok(resumed_ns)
    }
}

/// A skeleton restored by `pmig restore --skeleton` and held stopped at the
/// end of its plan until the image of the stop comes (see
/// `pmig_engine::skeleton`). Dropped without [`HeldSkeleton::bring_up`],
/// the restore reads end-of-file and kills it: it never ran.
pub(crate) struct HeldSkeleton<'a> {
    helper: Helper<'a>,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    err: ErrLog,
    out: PathBuf,
    /// The skeleton's pid.
    pub pid: i32,
}

/// Why a skeleton did not run.
pub(crate) enum NotBrought {
    /// It could not follow the process's changes (one line why); it was
    /// killed, and the image of the stop is to be restored instead.
    Stale(String),
    /// It failed otherwise (one line why).
    Failed(String),
}

/// Starts `pmig restore --skeleton` on the image in `dir` (verified here
/// first) and returns once the skeleton is held.
pub(crate) fn start_skeleton<'a>(
    d: &Destination<'a>,
    dir: &Path,
) -> std::result::Result<HeldSkeleton<'a>, (u32, String)> {
    pmig_image::Image::open_verified(dir).map_err(|e| {
        (
            code::BAD_IMAGE,
            format!("the skeleton's image failed verification: {e}"),
        )
    })?;
    let (mut cmd, out, err) = restore_command(d, dir, Mode::Skeleton)?;
    cmd.stdin(Stdio::piped());
    let mut child = d.host.spawn(&mut cmd).map_err(|e| {
        (
            code::RESTORE_FAILED,
            format!("cannot run pmig restore: {e}"),
        )
    })?;
    let stdin = child.stdin.take();
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("piped stdout"));
    let helper = Helper {
        host: d.host,
        child: Some(child),
        stdin,
    };
    let mut line = String::new();
    let _ = std::io::BufRead::read_line(&mut stdout, &mut line);
    if line.trim().is_empty() {
        // It failed before the skeleton was complete: its error says why.
        drop(helper);
        log_restore_output(&err);
        return Err((code::RESTORE_FAILED, restore_failure(&err)));
    }
    let r = parse_restored(&line)?;
    Ok(HeldSkeleton {
        helper,
        stdout,
        err,
        out,
        pid: r.pid,
    })
}

impl<'a> HeldSkeleton<'a> {
    /// Brings the skeleton up to the image of the stop in `dir`, verified
    /// by the caller, and lets it run: what [`restore_from`] would have
    /// started, with the restore left to exit ([`Exiting`]), or why not.
    /// `meanwhile` is called with `dir` while the restore brings it up.
    pub(crate) fn bring_up(
        mut self,
        dir: &Path,
        meanwhile: &mut dyn FnMut(&Path),
    ) -> std::result::Result<(Started, Exiting<'a>), NotBrought> {
        let mut stdin = self
            .helper
            .stdin
            .take()
            .ok_or_else(|| NotBrought::Failed("pmig restore is gone".into()))?;
        let line = format!("final-verified {}\n", dir.display());
        if let Err(e) = stdin.write_all(line.as_bytes()) {
            return Err(NotBrought::Failed(format!("bring the skeleton up: {e}")));
        }
        drop(stdin);
        meanwhile(dir);
        // Its one line: the process running, or why not.
        let (mut json, reported) = report_of(&mut self.stdout);
        mark("dst: skeleton's restore reported");
        let why = match reported {
            Ok(started) => {
                tracing::info!(
                    "skeleton {} brought up and running; its terminal/pipe stdio goes to {}",
                    started.pid,
                    self.out.display()
                );
                let child = self.helper.child.take().expect("the restore runs");
                let exiting = Exiting::new(self.helper.host, child, Some(self.stdout), self.err);
                return Ok((started, exiting));
            }
            Err(why) => why,
        };
        let _ = self.stdout.read_to_string(&mut json);
        mark("dst: skeleton's restore output read");
        let mut child = self.helper.child.take().expect("the restore runs");
        let st = self.helper.host.wait(&mut child);
        log_restore_output(&self.err);
        let stale = json
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l.trim()).ok())
            .find_map(|v| v["stale"].as_str().map(str::to_string));
        if let Some(why) = stale {
            return Err(NotBrought::Stale(why));
        }
        match st {
            Ok(s) if s.success() => {}
            Ok(_) => return Err(NotBrought::Failed(restore_failure(&self.err))),
            Err(e) => return Err(NotBrought::Failed(format!("waiting for pmig restore: {e}"))),
        }
        // It exited well without reporting a process.
        Err(NotBrought::Failed(why))
    }
}

/// Verifies the image in `dir` and restores it lazily, held stopped (see
/// [`Held`]).
pub(crate) fn restore_held<'a>(
    d: &mut Destination<'a>,
    dir: &Path,
) -> std::result::Result<Held<'a>, (u32, String)> {
    let Spawned {
        mut child,
        stdin,
        out,
        err,
    } = start_restore(d, dir, Mode::Held)?;
    let mut stdout = child.stdout.take().map(std::io::BufReader::new);
    let mut line = String::new();
    if let Some(s) = stdout.as_mut() {
        let _ = std::io::BufRead::read_line(s, &mut line);
    }
    let mut held = Held {
        helper: Helper {
            host: d.host,
            child: Some(child),
            stdin,
        },
        stdout,
        err,
        pid: 0,
        original_pid: 0,
        uffd_fd: -1,
        ids: Vec::new(),
        tids: Vec::new(),
        sysv_made: Vec::new(),
    };
    mark("dst: pmig restore holds the process");
    if line.trim().is_empty() {
        // It failed before the process was complete: its error says why.
        let Held { helper, err, .. } = held;
        drop(helper);
        log_restore_output(&err);
        return Err((code::RESTORE_FAILED, restore_failure(&err)));
    }
    let r = parse_restored(&line)?;
    held.pid = r.pid;
    held.original_pid = r.original_pid;
    held.ids = r.ids;
    held.tids = r.tids;
    held.sysv_made = r.sysv_made;
    held.uffd_fd = r.uffd_fd.ok_or((
        code::RESTORE_FAILED,
        "the held restore reported no userfaultfd".to_string(),
    ))?;
    tracing::info!(
        "restored process {} ({}) from {} as pid {}, held until its pages are in; its terminal/pipe stdio goes to {}",
        d.offer.pid,
        d.offer.comm,
        d.peer,
        r.pid,
        out.display()
    );
    Ok(held)
}

/// Verifies the image in `dir` and starts `pmig restore` for it: the one
/// started ahead by [`prespawn_restore`] for the same image, else a new one.
fn start_restore(
    d: &mut Destination,
    dir: &Path,
    mode: Mode,
) -> std::result::Result<Spawned, (u32, String)> {
    let ahead = d.restorer.take().filter(|p| p.dir == dir && p.mode == mode);
    let composed = d.composed.as_deref() == Some(dir);
    let check = if composed {
        pmig_image::Image::open
    } else {
        pmig_image::Image::open_verified
    };
    check(dir).map_err(|e| {
        (
            code::BAD_IMAGE,
            format!("the image failed verification: {e}"),
        )
    })?;
    mark("dst: image verified");
    if d.hooks.fail_restore {
        return Err((
            code::RESTORE_FAILED,
            "restore failed: test hook fail-restore".into(),
        ));
    }
    let spawned = match ahead.and_then(Prespawned::go) {
        Some(x) => x,
        None => {
            let (mut cmd, out, err) = restore_command(d, dir, mode)?;
            if mode == Mode::Held {
                cmd.stdin(Stdio::piped());
            }
            let mut child = d.host.spawn(&mut cmd).map_err(|e| {
                (
                    code::RESTORE_FAILED,
                    format!("cannot run pmig restore: {e}"),
                )
            })?;
            Spawned {
                stdin: child.stdin.take(),
                child,
                out,
                err,
            }
        }
    };
    mark("dst: pmig restore started");
    Ok(spawned)
}

/// Destination, after `Restored`: wait until the source confirms that its copy is
/// gone. An `Abort` means the source resumed its copy (it gave up waiting): kill ours.
pub(crate) fn await_commit(d: &mut Destination, pid: i32) -> Result<()> {
    let _ =
        d.ch.stream()
            .set_read_timeout(Some(Duration::from_secs(60)));
    match d.ch.recv() {
        Ok(Msg::Commit { id }) if id == d.offer.id => {
            tracing::info!(
                "migration {} committed: process {} runs here as pid {pid}",
                d.offer.id,
                d.offer.comm
            );
            Ok(())
        }
        Ok(Msg::Abort { reason, .. }) => {
            tracing::warn!(
                "the source aborted migration {} after the restore ({reason}); killing the restored copy {pid}",
                d.offer.id
            );
            crate::post_copy::kill_restored(pid, &d.made_segments);
            Err(StrategyError::Other(format!(
                "the source aborted after the restore: {reason}"
            )))
        }
        Ok(other) => Err(StrategyError::Protocol {
            node: d.peer.clone(),
            what: format!("expected Commit, got {}", other.kind()),
        }),
        Err(e) => {
            tracing::warn!(
                "no Commit for migration {} ({e}); the restored process {pid} keeps running (the source kills its copy once it has our reply)",
                d.offer.id
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_destination_restore_gets_the_daemons_cpu_check() {
        use pmig_engine::resources::cpu::CpuCheck;
        assert!(restore_flags(Mode::Full, None).is_empty());
        assert_eq!(restore_flags(Mode::Held, None), ["--lazy", "--hold"]);
        assert_eq!(
            restore_flags(Mode::Skeleton, Some(CpuCheck::Xsave)),
            ["--lazy", "--skeleton", "--cpu-check", "xsave"]
        );
        assert_eq!(
            restore_flags(Mode::Full, Some(CpuCheck::Features)),
            ["--cpu-check", "features"]
        );
    }

    #[test]
    fn a_restores_warnings_are_told_from_its_other_output() {
        let log = "restore: start\n\
                   2026-12-07T13:01:02.000Z  WARN pmig_engine::resources::cgroups: the process's cgroup /a is not on this node\n\
                   \x20INFO pmig_engine: restored\n\
                   \x20WARN pmig_engine::resources::threads: thread 7: nice 5 not restored\n\
                   ERROR pmig: something\n\
                   a line that says WARN later on\n";
        let w: Vec<&str> = warnings_in(log).collect();
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(w[0].contains("cgroup /a"));
        assert!(w[1].contains("nice 5"));
        assert!(w[2].starts_with("ERROR"));
    }

    #[test]
    fn error_log_is_read_through_its_descriptor_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (log, mut w) = ErrLog::new(dir.path()).unwrap();
        // Unlinked at once: the directory may be renamed or removed.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let moved = dir.path().with_extension("moved");
        std::fs::rename(dir.path(), &moved).unwrap();
        writeln!(w, "restore: start").unwrap();
        writeln!(w, "pmig: the image failed verification").unwrap();
        assert_eq!(
            restore_failure(&log),
            "the image failed verification",
            "{}",
            log.text()
        );
        std::fs::remove_dir(&moved).unwrap();
        writeln!(w, "pmig: later").unwrap();
        assert_eq!(restore_failure(&log), "later");
    }

    /// A host that counts the helpers it waited for.
    struct Waits {
        waited: std::sync::atomic::AtomicUsize,
        key: pmig_proto::ClusterKey,
    }

    impl crate::Host for Waits {
        fn node(&self) -> &str {
            "n1"
        }
        fn exe(&self) -> &Path {
            Path::new("/bin/false")
        }
        fn state_dir(&self) -> &Path {
            Path::new("/nonexistent")
        }
        fn staging_root(&self) -> &Path {
            Path::new("/nonexistent")
        }
        fn spawn(&self, cmd: &mut Command) -> std::io::Result<Child> {
            cmd.spawn()
        }
        fn wait(&self, child: &mut Child) -> std::io::Result<std::process::ExitStatus> {
            self.waited
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            child.wait()
        }
        fn cluster_key(&self) -> &pmig_proto::ClusterKey {
            &self.key
        }
    }

    #[test]
    fn a_restore_is_taken_at_its_report_and_waited_for_only_when_dropped() {
        use std::sync::atomic::Ordering::SeqCst;
        let dir = tempfile::tempdir().unwrap();
        let (err, w) = ErrLog::new(dir.path()).unwrap();
        let line = r#"{"pid":7,"original_pid":7,"uffd_fd":5,"held":false,"resumed_ns":1500}"#;
        // Reports, then stays until its stdin closes, and fails.
        let mut child = Command::new("/bin/sh")
            .args([
                "-c",
                &format!("echo '{line}'; read x; echo 'WARN late' >&2; exit 3"),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(w)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let (text, started) = report_of(&mut out);
        assert_eq!(text.trim_end(), line);
        let r = started.expect("a process reported");
        assert_eq!((r.pid, r.uffd_fd, r.resumed_ns), (7, Some(5), 1500));
        assert!(child.try_wait().unwrap().is_none(), "it still runs");
        let host = Waits {
            waited: Default::default(),
            key: pmig_proto::ClusterKey::from_bytes([1; pmig_proto::key::KEY_LEN]),
        };
        let pid = child.id() as i32;
        let exiting = Exiting::new(&host, child, Some(out), err);
        assert_eq!(host.waited.load(SeqCst), 0);
        drop(stdin);
        drop(exiting);
        assert_eq!(host.waited.load(SeqCst), 1);
        // Reaped: no such child any more.
        // SAFETY: waitpid on a pid with WNOHANG only asks about it.
        let r = unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
        assert_eq!(r, -1);

        // A line that reports no process (a stale skeleton's) is not taken.
        let mut child = Command::new("/bin/sh")
            .args(["-c", r#"echo '{"stale":"its files changed"}'"#])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let (text, started) = report_of(&mut out);
        assert!(started.is_err() && text.contains("stale"), "{text}");
        child.wait().unwrap();
    }

    #[test]
    fn the_resume_is_the_instant_pmig_restore_reports_and_never_after_its_output() {
        let held = r#"{"pid":7,"original_pid":7,"uffd_fd":5,"held":true,"resumed_ns":0}"#;
        let done = r#"{"pid":7,"original_pid":7,"uffd_fd":5,"held":false,"resumed_ns":1500}"#;
        // Held: the line before the release says nothing; the last one does.
        assert_eq!(reported_resume(held), 0);
        assert_eq!(reported_resume(&format!("{held}\n{done}\n")), 1500);
        let r = parse_restored(&format!("{done}\n")).unwrap();
        assert_eq!((r.pid, r.resumed_ns), (7, 1500));
        assert_eq!(resumed_at(r.resumed_ns, 2000), 1500);
        // Not reported (an older pmig restore), or later than the end of its
        // output (impossible on one clock): the end of the output.
        assert_eq!(resumed_at(0, 2000), 2000);
        assert_eq!(resumed_at(2500, 2000), 2000);
        assert_eq!(reported_resume("not json\n"), 0);
    }
}
