//! `demand-paging` (copy-on-reference, Noack §2.3.2 after Accent/V): the
//! process resumes on the destination at once, like `post-copy`, but nothing
//! is pushed in the background: a page moves only when the process faults on
//! it. The source serves pages until the migrated process exits.
//!
//! Source: the preparation and the handover are post-copy's: the private
//! copies of file mappings go while the process runs, and the stop takes a
//! small image (state, the pages the restore touches, the file copies
//! written since), leaving private anonymous memory unscanned. The report
//! goes to the user at the handover ([`Strategy::reports_at_handover`]); the
//! residual work goes on in the daemon. Right after `Restored` the frozen
//! original is scanned, and the destination is told which claimed pages the
//! source never had (`NotOwed`). Then the pages it has are copied aside
//! (into the daemon's memory, [`Stash`]) and the original is killed, so no
//! second copy of the process lingers; requests are answered meanwhile from
//! the frozen original (copying 1 GiB aside takes about a second, which a
//! fault used to wait for), and from the copy once it is complete, until
//! `PagesDone`.
//!
//! Destination: post-copy's lazy restore and fault loop without a push; the
//! loop also watches the process ([`Watch`], a pidfd): when it exits with
//! pages still owed, `PagesDone` tells the source, which drops the stash and
//! answers `Commit`. If every page has been touched before the exit, the
//! dependency ends as in post-copy.
//!
//! Migrating again: a process that still owes pages to a demand-paging source
//! cannot be captured as it is (owed pages are not populated here). [`settle`]
//! therefore asks the fault loop to fetch every owed page first, and waits
//! (bounded by the request's timeout) until nothing is owed.
//!
//! Risk: until the process exits the source node must stay up; if it
//! disappears, the process is lost at its next remote fault.

use crate::error::{Result, StrategyError};
use crate::post_copy::{
    destination_lazy, owed_of, read_image, receive_with_copies, serve_source, FileCopies, Owing,
};
use crate::{Destination, Residual, Source, Strategy, StrategyKind};
use pmig_engine::lazy::LazyMemory;
use pmig_proto::Msg;
use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PAGE: u64 = 4096;

/// `demand-paging`.
#[derive(Default)]
pub struct DemandPaging {
    /// The private copies of file mappings sent while the process ran.
    copies: Option<FileCopies>,
    /// From the handover to the end of the residual work.
    stash: Option<Stashed>,
}

/// The pages the image claimed as owed, and those the source had.
pub(crate) type Stashed = (Vec<(u64, u64)>, Vec<(u64, u64)>);

impl DemandPaging {
    /// After the handover: the pages the image claimed as owed, and those
    /// the frozen original has (freeze-free serves them as this does).
    pub(crate) fn take_owed(&mut self) -> Option<Stashed> {
        self.stash.take()
    }

    /// Removes the write tracking of the copies, kept from the handover on
    /// (see `FileCopies::handover`): once nothing is read from the frozen
    /// original any more.
    pub(crate) fn untrack_copies(&mut self) {
        self.copies = None;
    }
}

impl Strategy for DemandPaging {
    fn kind(&self) -> StrategyKind {
        StrategyKind::DemandPaging
    }

    fn prepare(&mut self, m: &mut Source) -> Result<()> {
        self.copies = None;
        self.copies = FileCopies::prepare_with_skeleton(m)?;
        Ok(())
    }

    fn handover(&mut self, m: &mut Source) -> Result<()> {
        // Kept until the post ends (see `FileCopies::handover`).
        self.copies = FileCopies::handover(self.copies.take(), m)?;
        // The destination runs the process: from here on a failure loses it.
        // The stop left private anonymous memory unscanned (all of it is
        // claimed): the frozen original says which pages it has.
        let claimed = match read_image(&m.staging) {
            Ok(pi) => owed_of(&pi).0,
            Err(e) => return Err(lost(m, e)),
        };
        let found = match pmig_engine::resources::memory::populated_anon(m.pid, &claimed) {
            Ok(f) => f,
            Err(e) => {
                return Err(lost(
                    m,
                    StrategyError::Other(format!("scan the frozen process: {e}")),
                ))
            }
        };
        self.stash = Some((claimed, found));
        m.residual = Residual {
            what: "the pages not yet referenced (in the frozen original until they are copied aside, then in the daemon's memory)".into(),
            node: Some(m.host.node().into()),
            until: "source, until the process exits".into(),
        };
        Ok(())
    }

    fn post(&mut self, m: &mut Source) -> Result<()> {
        let (claimed, found) = self.stash.take().ok_or_else(|| {
            StrategyError::Other("internal error: no stash after the handover".into())
        })?;
        let stash = Stash::new(m.pid);
        let holder = m.holder.take();
        let owing = Owing::Deferred {
            claimed,
            found: Some(found.clone()),
        };
        let (served, _kept) = std::thread::scope(|s| {
            let filling = s.spawn(|| stash.fill(&found, holder));
            let served = serve_source(m, owing, Some(&stash));
            stash.cancel.store(true, Ordering::Release);
            // A holder the copy could not replace goes (killing the
            // original) only now that nothing is read from it any more.
            (served, filling.join().ok().flatten())
        });
        self.untrack_copies();
        served?;
        m.residual.until = format!(
            "source, until the process exits (or moves on: every page is fetched first); ended {:.1} ms after the resume",
            (crate::clock::mono_ns().saturating_sub(m.resumed_ns.unwrap_or(0))) as f64 / 1e6
        );
        Ok(())
    }

    fn destination(&mut self, d: &mut Destination) -> Result<i32> {
        receive_with_copies(d)?;
        destination_lazy(d, false, true, true, None, None)
    }

    fn reports_at_handover(&self) -> bool {
        true
    }
}

/// After `Restored`: the frozen original must not resume.
fn lost(m: &mut Source, e: StrategyError) -> StrategyError {
    let peer = m.peer.clone();
    m.lost(format!(
        "the process runs on {peer} but its pages could not be kept here ({e}): it is lost"
    ))
}

/// The owed pages of a frozen process, copied aside so that the process
/// itself can go. Until the copy is complete, pages are read from the
/// frozen process.
pub(crate) struct Stash {
    pid: i32,
    copy: std::sync::RwLock<Option<Copied>>,
    /// Stop copying: nothing is served any more.
    cancel: AtomicBool,
}

struct Copied {
    data: Vec<u8>,
    /// page address -> offset in `data`
    index: HashMap<u64, usize>,
}

impl Stash {
    /// Pages of the frozen process `pid`, until [`Stash::fill`] has copied
    /// them.
    pub(crate) fn new(pid: i32) -> Stash {
        Stash {
            pid,
            copy: std::sync::RwLock::new(None),
            cancel: AtomicBool::new(false),
        }
    }

    /// Copies the pages of `owed` from the frozen process, then serves
    /// from the copy and kills the process (its `holder`). A page it cannot
    /// give leaves the process as it is (the holder is returned, to be
    /// dropped once nothing is read from it): reads go on going to it, and
    /// a fault on that page fails (the process is lost then).
    pub(crate) fn fill<'h>(
        &self,
        owed: &[(u64, u64)],
        holder: Option<crate::holder::Holder<'h>>,
    ) -> Option<crate::holder::Holder<'h>> {
        let mut c = Copied {
            data: Vec::new(),
            index: HashMap::new(),
        };
        let r = pmig_engine::pagestore::read_ranges(self.pid, owed, 4 << 20, &mut |addr, b| {
            if self.cancel.load(Ordering::Acquire) {
                return Err(pmig_engine::EngineError::Other("no longer needed".into()));
            }
            let off = c.data.len();
            c.data.extend_from_slice(b);
            for i in 0..b.len() / PAGE as usize {
                c.index
                    .insert(addr + (i as u64) * PAGE, off + i * PAGE as usize);
            }
            Ok(())
        });
        match r {
            Ok((_, skipped)) if skipped.is_empty() => {}
            Ok((_, skipped)) => {
                tracing::error!(
                    "demand paging of {}: cannot read {} owed pages of the frozen process (the first at {:#x}); it keeps them, and a fault there loses the process",
                    self.pid,
                    skipped.iter().map(|r| r.1 / PAGE).sum::<u64>(),
                    skipped[0].0
                );
                return holder;
            }
            Err(_) if self.cancel.load(Ordering::Acquire) => return holder,
            Err(e) => {
                tracing::error!(
                    "demand paging of {}: the owed pages could not be copied aside ({e}); they are read from the frozen process",
                    self.pid
                );
                return holder;
            }
        }
        let pages = c.index.len();
        *self.copy.write().unwrap() = Some(c);
        // No read goes to the process any more.
        if let Some(h) = holder {
            if let Err(e) = h.kill() {
                tracing::warn!("demand paging of {}: {e}", self.pid);
            }
        }
        tracing::info!(
            "demand paging of {}: {pages} owed pages copied aside, the original is gone",
            self.pid
        );
        None
    }

    /// Fills `buf` with the pages at `addr` (pages not stashed read as
    /// zeros: the source had none there). Returns the bytes filled.
    pub(crate) fn read(&self, addr: u64, buf: &mut [u8]) -> Result<usize> {
        // Held while the frozen process is read: it is killed only once
        // the copy has taken its place.
        let g = self.copy.read().unwrap();
        let Some(c) = &*g else {
            return pmig_engine::sys::process_vm_read(self.pid, addr, buf)
                .map_err(|e| StrategyError::Other(e.to_string()));
        };
        for (i, page) in buf.chunks_mut(PAGE as usize).enumerate() {
            match c.index.get(&(addr + i as u64 * PAGE)) {
                Some(&o) => page.copy_from_slice(&c.data[o..o + PAGE as usize]),
                None => page.fill(0),
            }
        }
        Ok(buf.len())
    }
}

/// Lazily restored processes on this node whose pages a demand-paging
/// source still serves: pid -> "fetch everything now".
static LAZY: Mutex<BTreeMap<i32, Arc<AtomicBool>>> = Mutex::new(BTreeMap::new());

/// Before `pid` migrates again: if it still owes pages to a demand-paging
/// source, fetch them all and wait (at most `timeout`) until nothing is owed.
pub fn settle(pid: i32, timeout: Duration) {
    if !pull_all(pid) {
        return;
    }
    let t = Instant::now();
    while t.elapsed() < timeout && LAZY.lock().unwrap().contains_key(&pid) {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// If `pid` still owes pages to a source that serves them until it exits
/// (demand-paging, freeze-free before its store is complete), asks its fault
/// loop to fetch them all; true if it does.
pub fn pull_all(pid: i32) -> bool {
    let Some(flag) = LAZY.lock().unwrap().get(&pid).cloned() else {
        return false;
    };
    if !flag.swap(true, Ordering::AcqRel) {
        tracing::info!("process {pid} still owes pages to its source: fetching them all");
    }
    true
}

/// What the destination's fault loop does next.
pub(crate) enum Step {
    Run,
    /// Ask for these pages (everything owed: the process migrates again).
    Ask(Vec<u64>),
    /// The process exited: send these (`FaultWaits` to a version-10
    /// source, then `PagesDone`).
    Exited(Vec<Msg>),
}

/// Watches a lazily restored process for its exit (pidfd) and for a request
/// to fetch every page ([`settle`]); registered while it exists.
pub(crate) struct Watch {
    pid: i32,
    pidfd: OwnedFd,
    pull: Arc<AtomicBool>,
    pulling: Mutex<Option<Pull>>,
}

/// How much of a pull ([`settle`]) may be asked for ahead: about this long
/// at the rate the pull has reached. The source answers requests in their
/// order, so a fault of the running process waits behind what the pull has
/// asked for and not received yet: asking for everything at once made a
/// fault wait for the whole rest (31 s for 500 MB over 100 Mbit).
const PULL_AHEAD: Duration = Duration::from_millis(20);
/// Bounds of the pull's window, in pages.
const PULL_MIN: usize = 64;
const PULL_MAX: usize = 16384;

/// How often the pull's window is resized, at most.
const PULL_PERIOD: Duration = Duration::from_millis(5);

/// Every page still owed, asked for a window at a time.
struct Pull {
    pages: Vec<u64>,
    next: usize,
    /// Pages asked for so far.
    asked: u64,
    window: usize,
    /// When the window was last resized, and the pages received by then.
    last: Option<(Instant, u64)>,
}

impl Pull {
    fn new(pages: Vec<u64>) -> Pull {
        Pull {
            pages,
            next: 0,
            asked: 0,
            window: PULL_MIN,
            last: None,
        }
    }

    /// The window after `got` pages arrived in `dt`: [`PULL_AHEAD`] at that
    /// rate, or twice `window` if nothing asked for was left (the window,
    /// not the link, held the pull back); within [`PULL_MIN`, `PULL_MAX`].
    fn resize(window: usize, got: u64, dt: Duration, drained: bool) -> usize {
        let secs = dt.as_secs_f64().max(1e-6);
        let at_rate = (got as f64 / secs * PULL_AHEAD.as_secs_f64()) as usize;
        let w = if drained {
            at_rate.max(window * 2)
        } else {
            at_rate
        };
        w.clamp(PULL_MIN, PULL_MAX)
    }

    /// The next pages to ask for, with `outstanding` pages asked for and
    /// still owed; `ask` marks pages asked for and returns those that were
    /// owed and not asked for yet.
    fn next(&mut self, outstanding: usize, ask: impl Fn(&[u64]) -> Vec<u64>) -> Vec<u64> {
        let done = self.asked.saturating_sub(outstanding as u64);
        let now = Instant::now();
        match self.last {
            None => self.last = Some((now, done)),
            Some((t, d)) if now.duration_since(t) >= PULL_PERIOD => {
                self.window = Self::resize(
                    self.window,
                    done - d.min(done),
                    now.duration_since(t),
                    outstanding == 0,
                );
                self.last = Some((now, done));
            }
            Some(_) => {}
        }
        let room = self.window.saturating_sub(outstanding);
        let mut out = Vec::new();
        while out.len() < room && self.next < self.pages.len() {
            let end = (self.next + room - out.len()).min(self.pages.len());
            out.extend(ask(&self.pages[self.next..end]));
            self.next = end;
        }
        self.asked += out.len() as u64;
        out
    }
}

impl Watch {
    pub(crate) fn new(pid: i32) -> Result<Watch> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(StrategyError::Io {
                what: format!("open a pidfd for process {pid}"),
                source: std::io::Error::last_os_error(),
            });
        }
        // SAFETY: fd is a new descriptor that nothing else owns.
        let pidfd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let pull = Arc::new(AtomicBool::new(false));
        LAZY.lock().unwrap().insert(pid, pull.clone());
        Ok(Watch {
            pid,
            pidfd,
            pull,
            pulling: Mutex::new(None),
        })
    }

    fn exited(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: polling one fd we own, without waiting.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n > 0 && p.revents != 0
    }

    /// `waits`: the source takes `FaultWaits` (version 10).
    pub(crate) fn step(&self, lm: &LazyMemory, id: u64, waits: bool) -> Step {
        if self.exited() {
            let st = lm.stats();
            let mut msgs = Vec::with_capacity(2);
            if waits {
                msgs.push(Msg::FaultWaits {
                    id,
                    max_us: st.fault_wait_max_us,
                    total_us: st.fault_wait_total_us,
                    hist: st.fault_wait_hist.to_vec(),
                });
            }
            msgs.push(Msg::PagesDone {
                id,
                installed: st.installed_pages,
                remote_faults: st.remote_faults,
                prefetched: st.prefetched,
                prefetch_hits: st.prefetch_hits,
            });
            return Step::Exited(msgs);
        }
        if self.pull.load(Ordering::Acquire) {
            let mut g = self.pulling.lock().unwrap();
            let p = g.get_or_insert_with(|| Pull::new(lm.owed_list()));
            let ask = p.next(lm.requested_count(), |pages| lm.prefetch(pages));
            if !ask.is_empty() {
                return Step::Ask(ask);
            }
        }
        Step::Run
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        LAZY.lock().unwrap().remove(&self.pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_pull_window_holds_about_its_time_at_the_rate_reached() {
        // 3000 pages/s (100 Mbit/s): 20 ms of it is 60 pages, below the floor.
        assert_eq!(Pull::resize(PULL_MIN, 30, 10 * MS, false), PULL_MIN);
        // 250 000 pages/s (about 1 GB/s): 5000 pages.
        assert_eq!(Pull::resize(PULL_MIN, 2500, 10 * MS, false), 5000);
        // Drained: the window held the pull back, so it at least doubles.
        assert_eq!(Pull::resize(1000, 1000, 10 * MS, true), 2000);
        // Never beyond the ceiling, whatever the rate.
        assert_eq!(
            Pull::resize(PULL_MAX, PULL_MAX as u64, 1 * MS, true),
            PULL_MAX
        );
        assert_eq!(Pull::resize(100, 0, 10 * MS, false), PULL_MIN);
    }

    #[test]
    fn the_pull_asks_a_window_at_a_time_and_each_page_once() {
        let pages: Vec<u64> = (0..1000u64).map(|i| i * PAGE).collect();
        let mut p = Pull::new(pages);
        let asked = std::cell::RefCell::new(std::collections::HashSet::new());
        // Pages a fault asked for already are not asked again.
        asked.borrow_mut().insert(3 * PAGE);
        let ask = |ps: &[u64]| -> Vec<u64> {
            ps.iter()
                .copied()
                .filter(|&pg| asked.borrow_mut().insert(pg))
                .collect()
        };
        let first = p.next(0, ask);
        assert_eq!(first.len(), PULL_MIN);
        assert!(!first.contains(&(3 * PAGE)));
        // Nothing more while the window is full.
        assert!(p.next(PULL_MIN, ask).is_empty());
        // Half of it arrived: room for that half again.
        assert_eq!(p.next(PULL_MIN / 2, ask).len(), PULL_MIN / 2);
        // To the end, every page asked for exactly once.
        let mut n = 0;
        while p.next < p.pages.len() {
            p.next(0, ask);
            n += 1;
            assert!(n < 1000, "the pull does not end");
        }
        assert_eq!(asked.borrow().len(), 1000);
        assert!(p.next(0, ask).is_empty());
    }
}
