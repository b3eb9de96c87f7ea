//! `flushing` (Sprite, Noack §2.3.3): the source flushes the process's
//! pages to a page store on a shared file system and is gone at once; the
//! destination faults pages from the store. (`freeze-free` flushes to the
//! same kind of store after the resume: [`crate::freeze_free`], which uses
//! this module's store reading.)
//!
//! Source, preparation (the process runs): the pre-flush. Sprite's
//! backing store holds a process's clean pages already, and its migration
//! flushes only the dirty ones. Here a tracker of the process's writes
//! ([`DirtyTracker`], as pre-copy's) is attached, and every populated page
//! of its writable private memory is written into the page store
//! `<page store>/<id>/` (a [`PageStore`]) while the process runs. Passes over
//! the pages written meanwhile follow while they shrink, at most
//! [`PRE_FLUSH_RERUNS`]. A process whose writes cannot be tracked skips
//! the pre-flush, and one that writes more than a third of its pages
//! during a pass after the first, without halving, gives it up
//! ([`PRE_FLUSH_GIVE_UP`]): their stops flush everything.
//!
//! Source, handover: the holder freezes the process and writes into the
//! store's `final/` an image with, of the tracked ranges, only the pages
//! written since their last pass ([`CaptureMode::WrittenSince`]), and all
//! other memory. The store absorbs it and becomes a complete image
//! (without a pre-flush, the holder writes the FULL image into the store).
//! The store is a directory on a file system every node
//! shares; the local test cluster's nodes share the root file system, so the
//! default `/var/tmp/pmig-pagestore` works there. From that image a small
//! one is composed in the staging directory: the state, every page outside
//! private anonymous memory, and only the anonymous pages the restore
//! touches (`kept_pages`); the other anonymous pages are owed. `PageStore` (the store
//! path) and the small image go to the destination. After `Restored` the
//! frozen original is killed at once: nothing is left on the source node;
//! the residual dependency is the page store, until every page is read.
//!
//! Destination: lazy restore of the small image (as post-copy), then faults
//! are served by reading the page from the store image's `pages.pmig` (its
//! memory part gives the runs: address → offset), while a background fill
//! installs every other owed page from the store; when nothing is owed the
//! store directory is removed.
//!
//! Nothing lost: a failed pre-flush removes the tracker and the store, and
//! the process runs on; before `Restored` every failure resumes the source
//! (the tracker is dropped, the store directory removed); after it, a store
//! that cannot be read makes the destination kill the process and report it
//! lost.

use crate::clock::mono_ns;
use crate::error::{io_err, Result, StrategyError};
use crate::holder::{CaptureMode, Holder};
use crate::post_copy::{fail_lost, install_filled, start_lazy, Lazy, Resumable};
use crate::pre_copy::{intersect, normalize, read_protected, subtract, total, write_ranges};
use crate::stop_copy::{await_commit, send_image};
use crate::{Destination, Progress, Residual, Source, Strategy, StrategyKind};
use pmig_engine::dirty::{DirtyTracker, Scope};
use pmig_engine::image::ProcessImage;
use pmig_engine::pagestore::PageStore;
use pmig_engine::resources::memory::{saveable_ranges, Backing, PageFilter, RangeFilter};
use pmig_proto::{code, Msg};
use std::collections::HashSet;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

const PAGE: u64 = 4096;
/// Pages per background fill step.
const FILL_PAGES: usize = 256;

/// Passes of the pre-flush after the first, each over the pages written
/// during the one before; the pass after one (the first excepted) whose
/// written pages are few or did not halve is the last.
pub const PRE_FLUSH_RERUNS: u32 = 3;
/// Written bytes below which the pre-flush needs no further pass: the stop
/// flushes them in well under a millisecond.
const PRE_FLUSH_ENOUGH: u64 = 256 << 10;
/// The pre-flush is given up when the pages written during a pass after
/// the first did not halve and are more than this share (one in N) of the
/// first pass's bytes. The stop would then write about as much as a whole
/// image, and a second time, to compose the store: a stop that flushes
/// every page once costs less.
const PRE_FLUSH_GIVE_UP: u64 = 3;
/// The store's subdirectory for the image of the stop, after a pre-flush.
const FINAL_DIR: &str = "final";

/// `flushing`.
#[derive(Default)]
pub struct Flushing {
    /// `<page store>/<id>`, once chosen.
    store: Option<PathBuf>,
    /// Pages left in the store (owed).
    owed_pages: u64,
    /// The pages written into the store while the process ran, from
    /// the preparation to the handover.
    pre: Option<PreFlush>,
}

/// The pre-flush: the tracker of the process's writes, and the store with
/// the pages written into it.
struct PreFlush {
    tracker: DirtyTracker,
    pages: PageStore,
    /// Pages a pass could not read (made inaccessible or unmapped
    /// meanwhile): the stop saves them whole.
    missed: Vec<(u64, u64)>,
}

impl Flushing {
    pub fn new() -> Flushing {
        Flushing::default()
    }

    /// The pre-flush into `store`: `None` (and nothing in the store) if the
    /// process's writes cannot be tracked, or if it writes too fast for the
    /// passes to shrink ([`PRE_FLUSH_GIVE_UP`]).
    fn pre_flush(m: &mut Source, store: &Path) -> Result<Option<PreFlush>> {
        let pid = m.pid;
        let t0 = mono_ns();
        let tracker = match DirtyTracker::attach_scoped(pid, Scope::Writable) {
            Ok(t) => t,
            Err(e) => {
                tracing::info!(
                    "process {pid}: no pre-flush, its writes cannot be tracked ({e}); the stop flushes every page"
                );
                return Ok(None);
            }
        };
        std::fs::create_dir_all(store).map_err(io_err(format!(
            "create {} in the page store (--page-store)",
            store.display()
        )))?;
        let mut pre = PreFlush {
            pages: PageStore::create(store)?,
            tracker,
            missed: Vec::new(),
        };
        let mut ranges = intersect(&saveable_ranges(pid)?, &pre.tracker.tracked());
        let mut previous = u64::MAX;
        let mut last = false;
        let mut first = 0;
        for pass in 0..=PRE_FLUSH_RERUNS {
            let want = total(&ranges);
            let phase = if pass == 0 {
                "pre-flush"
            } else {
                "pre-flush again"
            };
            let mut done = 0u64;
            let (pages, progress) = (&mut pre.pages, &mut *m.progress);
            let mut sink = |a: u64, data: &[u8]| {
                pages.put(a, data)?;
                done += data.len() as u64;
                progress(Progress {
                    phase,
                    done,
                    total: want,
                });
                Ok(())
            };
            let (n, skipped) = read_protected(pid, &ranges, Some(&pre.tracker), &mut sink)?;
            pre.missed = normalize(&[pre.missed.as_slice(), &skipped].concat());
            m.rounds += 1;
            if pass == 0 {
                first = n;
            }
            tracing::info!(
                "process {pid}: pre-flush pass {pass}: {:.1} MiB written into {}",
                n as f64 / (1 << 20) as f64,
                store.display()
            );
            if last || pass == PRE_FLUSH_RERUNS {
                break;
            }
            // What was written during the pass. The scan protects those
            // pages again, so that the stop no longer sees them written:
            // the next pass must read them. It is the last one once they
            // are few or no longer halve.
            let written = intersect(&pre.tracker.scan()?, &saveable_ranges(pid)?);
            let w = total(&written);
            // The first pass, over every page, takes longest: what is
            // written during it says little. From the second on, pages
            // written that do not halve are the program's pace.
            let halved = w <= previous.min(n) / 2;
            let heavy = pass >= 1 && !halved && w > first / PRE_FLUSH_GIVE_UP;
            if heavy || m.host.hooks().give_up_pre_flush {
                tracing::info!(
                    "process {pid}: pre-flush given up: {:.1} MiB written during a pass, of {:.1} MiB; the stop flushes every page",
                    w as f64 / (1 << 20) as f64,
                    first as f64 / (1 << 20) as f64
                );
                // The tracker's protections go with it; the store is made
                // again at the stop.
                drop(pre);
                let _ = std::fs::remove_dir_all(store);
                return Ok(None);
            }
            last = w <= PRE_FLUSH_ENOUGH || (pass >= 1 && !halved);
            previous = w;
            ranges = written;
        }
        tracing::info!(
            "process {pid}: pre-flushed in {:.1} ms ({} pages could not be read)",
            (mono_ns() - t0) as f64 / 1e6,
            total(&pre.missed) / PAGE
        );
        Ok(Some(pre))
    }

    /// The handover without a pre-flush: the whole image goes into the
    /// store at the stop.
    fn flush_all(m: &mut Source, store: &Path) -> Result<(ProcessImage, pmig_image::Manifest)> {
        std::fs::create_dir_all(store).map_err(io_err(format!(
            "create {} in the page store (--page-store)",
            store.display()
        )))?;
        let holder = Holder::start_with(m.host, m.pid, m.started, store, &CaptureMode::Full)?;
        m.stopped_ns = Some(holder.captured.frozen_ns);
        m.holder = Some(holder);
        let img = pmig_image::Image::open(store)
            .map_err(StrategyError::from)
            .and_then(|img| Ok((ProcessImage::read(&img)?, img.manifest.clone())));
        img.map_err(|e| {
            StrategyError::Other(format!(
                "the page store {} does not hold the image written into it: {e} (the page \
                 store must be one directory that every node, and the process's own mount \
                 namespace, see)",
                m.page_store.display()
            ))
        })
    }

    /// The handover after the pre-flush `pre`: the holder's image of the
    /// stop holds the pages written since their last pass (and all other
    /// memory), and the store absorbs it into a complete image.
    fn flush_written(
        m: &mut Source,
        store: &Path,
        tracker: &DirtyTracker,
        pages: PageStore,
        missed: &[(u64, u64)],
    ) -> Result<(ProcessImage, pmig_image::Manifest)> {
        // Missed pages are left out of the list: the holder saves them whole.
        let listed = subtract(&tracker.tracked(), missed);
        let list = m.staging.join(crate::pre_copy::TRACKED_FILE);
        write_ranges(&list, &listed)?;
        let dir = store.join(FINAL_DIR);
        std::fs::create_dir_all(&dir).map_err(io_err(format!("create {}", dir.display())))?;
        let holder = Holder::start_with(
            m.host,
            m.pid,
            m.started,
            &dir,
            &CaptureMode::WrittenSince(list),
        )?;
        m.stopped_ns = Some(holder.captured.frozen_ns);
        holder
            .captured
            .log(m.pid, "written since the pre-flush or untracked");
        m.holder = Some(holder);
        let (pi, manifest) = crate::pre_copy::compose(pages, &dir)?;
        let _ = std::fs::remove_dir_all(&dir);
        // Every page the process had must be in the store: one the
        // destination reads from it and finds missing would read as zeros.
        for v in &pi.memory.vmas {
            let present: u64 = v.present.iter().map(|r| r.1).sum();
            if v.bytes_in_image() != present {
                return Err(StrategyError::Other(format!(
                    "the page store lacks {} pages of the mapping at {:#x} after the pre-flush",
                    (present - v.bytes_in_image().min(present)) / PAGE,
                    v.start
                )));
            }
        }
        Ok((pi, manifest))
    }

    fn handover_inner(&mut self, m: &mut Source, store: &Path) -> Result<()> {
        std::fs::create_dir_all(&m.staging)
            .map_err(io_err(format!("create {}", m.staging.display())))?;
        // The tracker lives until `Restored`, or a failure: dropped at the
        // end of this function, before the caller resumes the process, it
        // removes its protections then, not during the stop.
        let (tracker, flushed) = match self.pre.take() {
            Some(PreFlush {
                tracker,
                pages,
                missed,
            }) => {
                let r = Self::flush_written(m, store, &tracker, pages, &missed);
                (Some(tracker), r)
            }
            None => (None, Self::flush_all(m, store)),
        };
        let (image, manifest) = flushed?;
        let data = store.join(pmig_image::PAGES_FILE);
        let set = kept_pages(&image, &StorePages::of(&image, &data)?);
        let keep = RangeFilter::of_pages(set.iter().copied());
        let (kept, owed) = compose_small_from(image, manifest, &data, &m.staging, &keep)?;
        self.owed_pages = owed.iter().map(|(_, l)| l / PAGE).sum();
        m.pages_sent = kept;
        let path = store
            .to_str()
            .ok_or_else(|| StrategyError::Other(format!("{} is not UTF-8", store.display())))?;
        m.ch.send(&Msg::PageStore {
            id: m.id,
            path: path.into(),
        })?;
        m.count(32 + path.len() as u64);
        send_image(m, &m.staging.clone())?;
        let restored = crate::pre_copy::await_restored(m);
        drop(tracker);
        restored
    }
}

impl Strategy for Flushing {
    fn kind(&self) -> StrategyKind {
        StrategyKind::Flushing
    }

    fn prepare(&mut self, m: &mut Source) -> Result<()> {
        let store = m.page_store.join(m.id.to_string());
        self.store = Some(store.clone());
        match Self::pre_flush(m, &store) {
            Ok(pre) => {
                self.pre = pre;
                Ok(())
            }
            Err(e) => {
                // The tracker is gone with the pre-flush: the process runs
                // on untouched.
                let _ = std::fs::remove_dir_all(&store);
                Err(StrategyError::During {
                    what: format!(
                        "the pre-flush into the page store {} (write tracking removed)",
                        store.display()
                    ),
                    source: Box::new(e),
                })
            }
        }
    }

    fn handover(&mut self, m: &mut Source) -> Result<()> {
        let store = m.page_store.join(m.id.to_string());
        self.store = Some(store.clone());
        let r = self.handover_inner(m, &store);
        // A tracker left (an error before the stop) goes before the
        // process resumes.
        self.pre = None;
        if r.is_err() {
            // Not restored: the source resumes, the store is not needed.
            let _ = std::fs::remove_dir_all(&store);
        }
        r
    }

    fn post(&mut self, m: &mut Source) -> Result<()> {
        // Every page is in the store: the source copy goes at once.
        m.commit()?;
        let store = self.store.clone().unwrap_or_default();
        m.residual = Residual {
            what: format!("page store {} ({} pages)", store.display(), self.owed_pages),
            node: None,
            until: "every page is read (the destination then removes it)".into(),
        };
        Ok(())
    }

    fn destination(&mut self, d: &mut Destination) -> Result<i32> {
        // The restore starts while the source pre-flushes (see
        // `Prespawned`): the stop does not wait for it to start.
        let staging = d.staging.clone();
        crate::stop_copy::prespawn_restore(d, &staging, true);
        let store = recv_page_store(d)?;
        let pages = match StorePages::open(&store) {
            Ok(p) => p,
            Err(e) => {
                let text = format!(
                    "{}: cannot read the page store {}: {e} (is it on a shared file system?)",
                    d.host.node(),
                    store.display()
                );
                return Err(d.refuse(code::MIGRATION_REFUSED, text));
            }
        };
        let (pid, _) = restore_and_fill(d, false, &store, &pages)?;
        await_commit(d, pid)?;
        Ok(pid)
    }
}

/// Destination: the page store the source names first (`PageStore`).
pub(crate) fn recv_page_store(d: &mut Destination) -> Result<PathBuf> {
    match d.ch.recv()? {
        Msg::PageStore { id, path } if id == d.offer.id => Ok(PathBuf::from(path)),
        Msg::Abort { reason, .. } => Err(d.source_aborted(reason)),
        other => Err(d.unexpected("PageStore", &other)),
    }
}

/// Destination: restores the image in the staging directory lazily (with
/// `composed`, it is there already; else it is received) and fills the
/// process from the store `store` (opened as `pages`) with [`serve_store`],
/// under a takeover record that names the store. The `stall-fill-ms` test
/// hook delays the fill. A failed restore removes the store; a failed fill
/// kills the process and reports it lost. Returns the pid and the fill's
/// figures. Used by `flushing` and by pre-copy's local fill.
pub(crate) fn restore_and_fill(
    d: &mut Destination,
    composed: bool,
    store: &Path,
    pages: &StorePages,
) -> Result<(i32, pmig_engine::lazy::LazyStats)> {
    let lazy = start_lazy(
        d,
        composed,
        Some(Resumable {
            prefetch: false,
            until_exit: false,
            store: Some(store.to_path_buf()),
            pending_store: None,
            local: None,
        }),
    );
    let Lazy {
        pid,
        ufd,
        lm,
        record,
    } = match lazy {
        Ok(l) => l,
        Err(e) => {
            let _ = std::fs::remove_dir_all(store);
            return Err(e);
        }
    };
    let pause = d.hooks.stall_fill_ms.map(|ms| {
        tracing::warn!(
            "test hook: the fill of migration {} from {} waits {ms} ms",
            d.offer.id,
            store.display()
        );
        std::time::Duration::from_millis(ms)
    });
    let r = serve_store(d.host, pages, lm, pid, ufd, store, pause);
    if let Some(r) = &record {
        r.remove();
    }
    match r {
        Ok(st) => Ok((pid, st)),
        Err(e) => Err(fail_lost(
            d,
            pid,
            format!("{}: {e}; the process is lost", d.host.node()),
        )),
    }
}

/// Serves a lazily restored process from the page store `store` (opened as
/// `pages`): faults are answered from it while a background fill installs
/// every other owed page in address order, after `pause` (a test hook). When
/// nothing is owed, the registrations are removed, the process's own
/// userfaultfd (number `ufd` inside it) is closed and the store removed.
/// Used by the destination and by a daemon that takes the migration over.
/// An error means the process cannot be completed (the caller kills it).
pub(crate) fn serve_store(
    host: &dyn crate::Host,
    pages: &StorePages,
    lm: pmig_engine::lazy::LazyMemory,
    pid: i32,
    ufd: i32,
    store: &Path,
    pause: Option<std::time::Duration>,
) -> std::result::Result<pmig_engine::lazy::LazyStats, String> {
    // Until the fill is over (and the process's userfaultfd closed from
    // inside it), this node must not start moving the process on.
    let _arriving = Arriving::new(host, pid);
    let t0 = mono_ns();
    let done = AtomicBool::new(false);
    let failed: Mutex<Option<String>> = Mutex::new(None);
    std::thread::scope(|s| {
        // Faults: read the page from the store and install it.
        s.spawn(|| {
            let mut buf = vec![0u8; PAGE as usize];
            while !done.load(Ordering::Acquire) {
                if !lm.wait(10) {
                    continue;
                }
                let r = lm.handle_events().and_then(|h| {
                    for p in h.ask {
                        pages.read(p, &mut buf)?;
                        lm.install(p, &buf)?;
                    }
                    Ok(())
                });
                if let Err(e) = r {
                    if !pmig_engine::procfs::has_exited(pid) {
                        *failed.lock().unwrap() = Some(format!("serve a fault: {e}"));
                    }
                    break;
                }
            }
        });
        if let Some(p) = pause {
            let until = std::time::Instant::now() + p;
            while std::time::Instant::now() < until && !pmig_engine::procfs::has_exited(pid) {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        // Background fill, in address order.
        let mut buf = vec![0u8; FILL_PAGES * PAGE as usize];
        for _ in 0..1000 {
            let owed = lm.owed_list();
            if owed.is_empty() || failed.lock().unwrap().is_some() {
                break;
            }
            let mut i = 0;
            while i < owed.len() {
                let start = owed[i];
                let mut n = 1;
                while n < FILL_PAGES && i + n < owed.len() && owed[i + n] == start + n as u64 * PAGE
                {
                    n += 1;
                }
                let b = &mut buf[..n * PAGE as usize];
                if let Err(e) = pages
                    .read(start, b)
                    .and_then(|_| install_filled(&lm, start, b))
                {
                    if !pmig_engine::procfs::has_exited(pid) {
                        *failed.lock().unwrap() = Some(format!("fill from the store: {e}"));
                    }
                    break;
                }
                i += n;
            }
            if pmig_engine::procfs::has_exited(pid) {
                break;
            }
        }
        done.store(true, Ordering::Release);
    });
    if let Some(e) = failed.lock().unwrap().take() {
        let _ = std::fs::remove_dir_all(store);
        return Err(e);
    }
    let st = lm.stats();
    // A process that has exited needs no close: finish_in_process says Ok.
    if let Err(e) = lm.finish_in_process(pid, ufd) {
        tracing::warn!("could not close the userfaultfd inside {pid}: {e}");
    }
    if let Err(e) = std::fs::remove_dir_all(store) {
        tracing::warn!("cannot remove the page store {}: {e}", store.display());
    }
    tracing::info!(
        "pid {pid}: every page read from {} in {:.1} ms, store removed; {st:?}",
        store.display(),
        (mono_ns() - t0) as f64 / 1e6
    );
    Ok(st)
}

/// The pages of a page store image: runs (address, length, offset in
/// `pages.pmig`), sorted by address.
pub(crate) struct StorePages {
    file: std::fs::File,
    runs: Vec<(u64, u64, u64)>,
}

impl StorePages {
    /// freeze-free's store: the page data, one run after the other.
    pub(crate) const FLAT_PAGES: &'static str = "pages";
    /// freeze-free's store: the runs (address, length, offset in
    /// [`Self::FLAT_PAGES`]) as JSON.
    pub(crate) const FLAT_RUNS: &'static str = "runs.json";

    /// The store in `dir`: an image (flushing), or freeze-free's flat pages.
    pub(crate) fn open(dir: &Path) -> Result<StorePages> {
        let runs_path = dir.join(Self::FLAT_RUNS);
        if runs_path.exists() {
            let text = std::fs::read(&runs_path)
                .map_err(io_err(format!("read {}", runs_path.display())))?;
            let mut runs: Vec<(u64, u64, u64)> = serde_json::from_slice(&text)
                .map_err(|e| StrategyError::Other(format!("{}: {e}", runs_path.display())))?;
            runs.sort_unstable();
            let pages = dir.join(Self::FLAT_PAGES);
            let file =
                std::fs::File::open(&pages).map_err(io_err(format!("open {}", pages.display())))?;
            return Ok(StorePages { file, runs });
        }
        let img = pmig_image::Image::open(dir)?;
        let pi = ProcessImage::read(&img)?;
        StorePages::of(&pi, &img.pages_path())
    }

    /// The pages of the image `pi`, whose page data is `pages`.
    pub(crate) fn of(pi: &ProcessImage, pages: &Path) -> Result<StorePages> {
        let mut runs: Vec<(u64, u64, u64)> = pi
            .memory
            .vmas
            .iter()
            .flat_map(|v| v.runs.iter().map(|r| (r.addr, r.len, r.offset)))
            .collect();
        runs.sort_unstable();
        let file =
            std::fs::File::open(pages).map_err(io_err(format!("open {}", pages.display())))?;
        Ok(StorePages { file, runs })
    }

    /// The runs of pages the store holds: (address, length), by address.
    pub(crate) fn runs(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.runs.iter().map(|&(a, l, _)| (a, l))
    }

    /// Whether the store holds the page at `addr`.
    pub(crate) fn has(&self, addr: u64) -> bool {
        let k = self.runs.partition_point(|r| r.0 <= addr);
        k.checked_sub(1)
            .is_some_and(|k| addr < self.runs[k].0 + self.runs[k].1)
    }

    /// Fills `buf` with the pages at `addr`; pages the store lacks (never
    /// populated) read as zeros.
    pub(crate) fn read(&self, addr: u64, buf: &mut [u8]) -> pmig_engine::Result<()> {
        for (i, page) in buf.chunks_mut(PAGE as usize).enumerate() {
            let a = addr + i as u64 * PAGE;
            let k = self.runs.partition_point(|r| r.0 <= a);
            match k.checked_sub(1).map(|k| self.runs[k]) {
                Some((s, l, off)) if a < s + l => {
                    self.file.read_exact_at(page, off + (a - s)).map_err(|e| {
                        pmig_engine::EngineError::Other(format!(
                            "read the page store at {a:#x}: {e}"
                        ))
                    })?
                }
                _ => page.fill(0),
            }
        }
        Ok(())
    }
}

/// The private anonymous pages of a full image that travel with the state:
/// those the restore touches and the kernel reads for others
/// ([`pmig_engine::lazy::handover_set`]), and those of each thread's robust
/// mutex list and of a Go runtime's records of its threads, read from the
/// image's pages `store` (the restore rewrites the owners of those mutexes
/// and those records if the threads' ids change).
pub(crate) fn kept_pages(pi: &ProcessImage, store: &StorePages) -> HashSet<u64> {
    let regs = |t: &pmig_engine::resources::threads::ThreadState| {
        pmig_engine::resources::threads::regs_from_vec(&t.regs)
    };
    let threads = pi.threads.threads.iter().map(|t| {
        pmig_engine::lazy::ThreadPages::of(&regs(t), t.rseq.map(|(ptr, size, _)| (ptr, size)))
    });
    let mm = &pi.memory.mm;
    let mut keep = pmig_engine::lazy::handover_set(
        threads,
        [(mm.arg_start, mm.arg_end), (mm.env_start, mm.env_end)],
    );
    let read = |a: u64, n: usize| {
        let (first, last) = (a & !(PAGE - 1), (a + n as u64 - 1) & !(PAGE - 1));
        if !store.has(first) || !store.has(last) {
            return None;
        }
        let mut buf = vec![0u8; (last - first + PAGE) as usize];
        store.read(first, &mut buf).ok()?;
        let at = (a - first) as usize;
        Some(buf[at..at + n].to_vec())
    };
    for t in &pi.threads.threads {
        if t.robust_list.0 != 0 {
            if let Some(l) = pmig_engine::resources::tcb::robust_list(t.robust_list.0, &read) {
                keep.extend(l.pages());
            }
        }
    }
    // A Go runtime's records of its threads, which the restore rewrites
    // under new ids before the pages come (the restore is not held).
    let into = |a: u64, b: &mut [u8]| match read(a, b.len()) {
        Some(v) => {
            b.copy_from_slice(&v);
            true
        }
        None => false,
    };
    keep.extend(pmig_engine::resources::gort::image_pages(pi, &into));
    keep
}

/// Writes into `out` the store's image `pi` (with its `manifest`), whose
/// page data is the file `pages`, with, of its writable private anonymous
/// pages, only those `keep` accepts (the restored process will fault on the
/// others). Returns (pages kept, the other pages as runs).
pub(crate) fn compose_small_from(
    pi: ProcessImage,
    manifest: pmig_image::Manifest,
    pages: &Path,
    out: &Path,
    keep: &RangeFilter,
) -> Result<(u64, Vec<(u64, u64)>)> {
    let f = std::fs::File::open(pages).map_err(io_err(format!("open {}", pages.display())))?;
    let mut ps = PageStore::create(out)?;
    let mut kept = 0u64;
    let mut owed: Vec<(u64, u64)> = Vec::new();
    let mut owe = |a: u64, l: u64| match owed.last_mut() {
        Some((s, n)) if *s + *n == a => *n += l,
        _ => owed.push((a, l)),
    };
    let mut buf = Vec::new();
    let mut runs = Vec::new();
    for v in &pi.memory.vmas {
        for r in &v.runs {
            let lazy = v.backing == Backing::Anon && v.prot & libc::PROT_WRITE != 0;
            // Not served lazily: travels whole (read-only anonymous pages
            // too, as in the engine's filtered capture: left to the
            // userfaultfd they came back as zeros).
            runs.clear();
            if lazy {
                keep.keep_runs(r.addr, r.len, &mut runs);
            } else {
                runs.push((r.addr, r.len));
            }
            let mut at = r.addr;
            for &(a, l) in &runs {
                if a > at {
                    owe(at, a - at);
                }
                buf.resize(l as usize, 0);
                f.read_exact_at(&mut buf, r.offset + (a - r.addr))
                    .map_err(io_err("read the page store"))?;
                ps.put(a, &buf)?;
                kept += l / PAGE;
                at = a + l;
            }
            if at < r.addr + r.len {
                owe(at, r.addr + r.len - at);
            }
        }
    }
    let mut manifest = manifest;
    manifest.parts.clear();
    ps.finish(pi, manifest)?;
    Ok((kept, owed))
}

/// Marks a process as still arriving on this node ([`crate::Host::arriving`])
/// for as long as it lives.
pub(crate) struct Arriving<'a>(&'a dyn crate::Host, i32);

impl<'a> Arriving<'a> {
    pub(crate) fn new(host: &'a dyn crate::Host, pid: i32) -> Arriving<'a> {
        host.arriving(pid, true);
        Arriving(host, pid)
    }
}

impl Drop for Arriving<'_> {
    fn drop(&mut self) {
        self.0.arriving(self.1, false);
    }
}
