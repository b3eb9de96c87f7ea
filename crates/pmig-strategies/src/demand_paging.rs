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
type Stashed = (Vec<(u64, u64)>, Vec<(u64, u64)>);

impl Strategy for DemandPaging {
    fn kind(&self) -> StrategyKind {
        StrategyKind::DemandPaging
    }

    fn prepare(&mut self, m: &mut Source) -> Result<()> {
        self.copies = None;
        self.copies = FileCopies::prepare(m)?;
        Ok(())
    }

    fn handover(&mut self, m: &mut Source) -> Result<()> {
        FileCopies::handover(self.copies.take(), m)?;
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
        served?;
        m.residual.until = format!(
            "source, until the process exits (or moves on: every page is fetched first); ended {:.1} ms after the resume",
            (crate::clock::mono_ns().saturating_sub(m.resumed_ns.unwrap_or(0))) as f64 / 1e6
        );
        Ok(())
    }

    fn destination(&mut self, d: &mut Destination) -> Result<i32> {
        receive_with_copies(d)?;
        destination_lazy(d, false, true, true)
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
    let Some(flag) = LAZY.lock().unwrap().get(&pid).cloned() else {
        return;
    };
    tracing::info!("process {pid} still owes pages to a demand-paging source: fetching them all");
    flag.store(true, Ordering::Release);
    let t = Instant::now();
    while t.elapsed() < timeout && LAZY.lock().unwrap().contains_key(&pid) {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What the destination's fault loop does next.
pub(crate) enum Step {
    Run,
    /// Ask for these pages (everything owed: the process migrates again).
    Ask(Vec<u64>),
    /// The process exited: send this `PagesDone`.
    Exited(Msg),
}

/// Watches a lazily restored process for its exit (pidfd) and for a request
/// to fetch every page ([`settle`]); registered while it exists.
pub(crate) struct Watch {
    pid: i32,
    pidfd: OwnedFd,
    pull: Arc<AtomicBool>,
    pulled: AtomicBool,
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
            pulled: AtomicBool::new(false),
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

    pub(crate) fn step(&self, lm: &LazyMemory, id: u64) -> Step {
        if self.exited() {
            let st = lm.stats();
            return Step::Exited(Msg::PagesDone {
                id,
                installed: st.installed_pages,
                remote_faults: st.remote_faults,
                prefetched: st.prefetched,
                prefetch_hits: st.prefetch_hits,
            });
        }
        if self.pull.load(Ordering::Acquire) && !self.pulled.swap(true, Ordering::AcqRel) {
            return Step::Ask(lm.prefetch(&lm.owed_list()));
        }
        Step::Run
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        LAZY.lock().unwrap().remove(&self.pid);
    }
}
