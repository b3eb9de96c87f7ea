//! Post-copy at the destination: the restored process runs while some of
//! its private anonymous pages still live at the source. Its userfaultfd
//! reports each fault on a missing page; [`LazyMemory`] says which source
//! pages to ask for, installs pages as they arrive (pushed in the background
//! or asked for), and maps zero pages where the source had none.
//!
//! Addresses: pages are owed by their *source* address. If the process moves
//! memory (mremap) while pages are owed, the destination address changes and
//! the source address does not; the map below keeps both.

use crate::error::{Ctx, Result};
use crate::resources::tcb::IdWrite;
use crate::uffd::{self, Event};
use parking_lot::{Mutex, MutexGuard, RwLock};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const PAGE: u64 = 4096;
/// Pages per `UFFDIO_COPY` of [`LazyMemory::install_bulk`].
pub const BULK_PIECE: usize = 8;
/// The fewest pages of a run that are copied apart from the state's lock
/// (see [`LazyMemory::install`]): below that, taking the lock again costs
/// more than the copy it would let run alongside another.
const APART_MIN: u64 = 2;

/// Tests only: a pause between looking up a run and copying its pages
/// apart from the lock, which widens the window a release could slip into.
#[cfg(test)]
static APART_PAUSE_US: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[derive(Debug, Default, Clone, Copy)]
pub struct LazyStats {
    /// Faults on pages still owed by the source (remote faults).
    pub remote_faults: u64,
    /// Faults on pages the source never had (served with the zero page).
    pub zero_faults: u64,
    pub installed_pages: u64,
    /// Owed pages dropped because the process released or unmapped them.
    pub dropped_pages: u64,
    /// Pages listed as owed that the source then said it never had
    /// (`NotOwed`, post-copy with the population deferred).
    pub not_owed_pages: u64,
    /// Pages asked for ahead of any fault (prefetch).
    pub prefetched: u64,
    /// Prefetched pages installed before the process faulted on them.
    pub prefetch_hits: u64,
    /// How long remote faults waited, from reading the fault to installing
    /// its page: the longest, the sum, and how many waited at most
    /// 5, 10, 20, 50, 100 ms and longer ([`FAULT_WAIT_BOUNDS_MS`]).
    pub fault_wait_max_us: u64,
    pub fault_wait_total_us: u64,
    pub fault_wait_hist: [u64; 6],
    /// Fills the kernel refused while a change of the address space waited
    /// for its event to be read, each followed by a read of the events and
    /// a retry ([`uffd::Fill::Busy`]).
    pub busy_fills: u64,
    /// Pages asked for again because a fault had waited for them too long
    /// ([`LazyMemory::overdue`]).
    pub asked_again: u64,
}

/// The upper bounds of [`LazyStats::fault_wait_hist`]'s buckets but the last.
pub const FAULT_WAIT_BOUNDS_MS: [u64; 5] = [5, 10, 20, 50, 100];

impl LazyStats {
    fn fault_waited(&mut self, us: u64) {
        self.fault_wait_max_us = self.fault_wait_max_us.max(us);
        self.fault_wait_total_us += us;
        let b = FAULT_WAIT_BOUNDS_MS
            .iter()
            .position(|&ms| us <= ms * 1000)
            .unwrap_or(FAULT_WAIT_BOUNDS_MS.len());
        self.fault_wait_hist[b] += 1;
    }
}

/// What [`LazyMemory::handle_events`] found.
#[derive(Debug, Default)]
pub struct Handled {
    /// Source pages to ask for (each once).
    pub ask: Vec<u64>,
    /// Source pages of the remote faults, in order.
    pub faults: Vec<u64>,
    /// Source pages asked for as predictions ([`LazyMemory::prefetch`])
    /// that a fault now waits for, each once: a source that answers
    /// predictions after faults should be asked for them again, as faults.
    pub promote: Vec<u64>,
}

/// One range of owed pages still at their own address.
#[derive(Clone)]
struct InPlace {
    start: u64,
    pages: u64,
    /// Bit i: page `start + i * PAGE` is owed.
    bits: Vec<u64>,
}

impl InPlace {
    fn end(&self) -> u64 {
        self.start + self.pages * PAGE
    }
    fn get(&self, i: u64) -> bool {
        self.bits[(i / 64) as usize] & (1 << (i % 64)) != 0
    }
    fn clear(&mut self, i: u64) -> bool {
        let w = &mut self.bits[(i / 64) as usize];
        let was = *w & (1 << (i % 64)) != 0;
        *w &= !(1 << (i % 64));
        was
    }
}

/// The pages still owed, as source page -> destination page and back. Until
/// the process moves memory (mremap), every page is owed at its own address:
/// those are kept as a bitmap per owed range, built in microseconds. (A map
/// entry per page took 10-40 ms for 1 GiB, time after the resume in which no
/// fault could be served.) Pages moved since are kept in two maps.
#[derive(Clone, Default)]
struct Owed {
    /// Sorted, disjoint.
    in_place: Vec<InPlace>,
    in_place_count: usize,
    /// source page -> destination page, for owed pages that moved.
    moved: HashMap<u64, u64>,
    /// destination page -> source page, for the same.
    moved_at: BTreeMap<u64, u64>,
}

impl Owed {
    /// Owes each page of `ranges` ((start, len), any order, may overlap) once.
    fn new(ranges: &[(u64, u64)]) -> Owed {
        let mut r: Vec<(u64, u64)> = ranges
            .iter()
            .filter(|r| r.1 > 0)
            .map(|&(a, l)| (a & !(PAGE - 1), (a + l).div_ceil(PAGE) * PAGE))
            .collect();
        r.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(r.len());
        for (a, e) in r {
            match merged.last_mut() {
                Some((_, me)) if a <= *me => *me = (*me).max(e),
                _ => merged.push((a, e)),
            }
        }
        let mut o = Owed::default();
        for (a, e) in merged {
            let pages = (e - a) / PAGE;
            let mut bits = vec![u64::MAX; pages.div_ceil(64) as usize];
            if !pages.is_multiple_of(64) {
                *bits.last_mut().unwrap() = (1u64 << (pages % 64)) - 1;
            }
            o.in_place.push(InPlace {
                start: a,
                pages,
                bits,
            });
            o.in_place_count += pages as usize;
        }
        o
    }

    /// The in-place range holding page `p`, and the page's index in it.
    fn slot(&self, p: u64) -> Option<(usize, u64)> {
        let i = self.in_place.partition_point(|r| r.start <= p);
        let r = self.in_place.get(i.checked_sub(1)?)?;
        (p < r.end()).then(|| (i - 1, (p - r.start) / PAGE))
    }

    fn is_in_place(&self, p: u64) -> bool {
        self.slot(p).is_some_and(|(r, i)| self.in_place[r].get(i))
    }

    fn len(&self) -> usize {
        self.in_place_count + self.moved.len()
    }

    /// Where source page `src` is to go, if it is owed.
    fn dst_of(&self, src: u64) -> Option<u64> {
        if self.is_in_place(src) {
            Some(src)
        } else {
            self.moved.get(&src).copied()
        }
    }

    /// Which owed source page belongs at destination page `dst`.
    fn src_at(&self, dst: u64) -> Option<u64> {
        if self.is_in_place(dst) {
            Some(dst)
        } else {
            self.moved_at.get(&dst).copied()
        }
    }

    /// Source page `src` is owed no more; returns where it was to go.
    fn remove(&mut self, src: u64) -> Option<u64> {
        if let Some((r, i)) = self.slot(src) {
            if self.in_place[r].clear(i) {
                self.in_place_count -= 1;
                return Some(src);
            }
        }
        let d = self.moved.remove(&src)?;
        self.moved_at.remove(&d);
        Some(d)
    }

    /// The in-place ranges that overlap `[start, end)`, each with the
    /// indices `lo..hi` of its pages inside it.
    fn spans(&mut self, start: u64, end: u64) -> impl Iterator<Item = (&mut InPlace, u64, u64)> {
        let first = self.in_place.partition_point(|r| r.end() <= start);
        self.in_place[first..]
            .iter_mut()
            .take_while(move |r| r.start < end)
            .map(move |r| {
                let lo = (start.max(r.start) - r.start) / PAGE;
                let hi = (end.min(r.end()) - r.start).div_ceil(PAGE);
                (r, lo, hi)
            })
    }

    /// Removes every owed page whose destination is in `[start, end)`;
    /// returns (destination, source) of each.
    fn take_dst_range(&mut self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        for (r, lo, hi) in self.spans(start, end) {
            for i in lo..hi {
                if r.clear(i) {
                    let p = r.start + i * PAGE;
                    out.push((p, p));
                }
            }
        }
        self.in_place_count -= out.len();
        let moved: Vec<(u64, u64)> = self
            .moved_at
            .range(start..end)
            .map(|(d, s)| (*d, *s))
            .collect();
        for &(d, s) in &moved {
            self.moved_at.remove(&d);
            self.moved.remove(&s);
        }
        out.extend(moved);
        out.sort_unstable();
        out
    }

    /// Removes the owed source pages in `[start, end)` for which `keep`
    /// is false; returns how many.
    fn remove_src_range(&mut self, start: u64, end: u64, keep: impl Fn(u64) -> bool) -> usize {
        let mut n = 0;
        for (r, lo, hi) in self.spans(start, end) {
            let mut i = lo;
            while i < hi {
                let w = r.bits[(i / 64) as usize];
                if w == 0 {
                    // Skip to the next word.
                    i = (i / 64 + 1) * 64;
                    continue;
                }
                if w & (1 << (i % 64)) != 0 && !keep(r.start + i * PAGE) {
                    r.clear(i);
                    n += 1;
                }
                i += 1;
            }
        }
        self.in_place_count -= n;
        if !self.moved.is_empty() {
            let gone: Vec<u64> = self
                .moved
                .keys()
                .copied()
                .filter(|&s| s >= start && s < end && !keep(s))
                .collect();
            for s in gone {
                self.remove(s);
                n += 1;
            }
        }
        n
    }

    /// The run of `data`'s pages from index `i` (of `n`, source pages from
    /// `src`) that is owed and contiguous on both sides: its destination
    /// and the index after it; `None` when page `i` is not owed.
    fn run_at(&self, src: u64, i: u64, n: u64) -> Option<(u64, u64)> {
        let dst = self.dst_of(src + i * PAGE)?;
        let mut j = i + 1;
        while j < n && self.dst_of(src + j * PAGE) == Some(dst + (j - i) * PAGE) {
            j += 1;
        }
        Some((dst, j))
    }

    /// The owed pages at `[from, from + len)` moved to `to` (mremap; what
    /// was owed at the target is dropped by the caller first).
    fn move_range(&mut self, from: u64, to: u64, len: u64) {
        for (d, s) in self.take_dst_range(from, from + len) {
            self.put_moved(s, to + (d - from));
        }
    }

    /// Owed source page `src` now goes to `dst`.
    fn put_moved(&mut self, src: u64, dst: u64) {
        self.moved.insert(src, dst);
        self.moved_at.insert(dst, src);
    }

    /// Owed source pages in address order.
    fn sorted(&self) -> Vec<u64> {
        let mut v: Vec<u64> = Vec::with_capacity(self.len());
        for r in &self.in_place {
            for (w, &bits) in r.bits.iter().enumerate() {
                let mut b = bits;
                while b != 0 {
                    let k = b.trailing_zeros() as u64;
                    v.push(r.start + (w as u64 * 64 + k) * PAGE);
                    b &= b - 1;
                }
            }
        }
        if !self.moved.is_empty() {
            v.extend(self.moved.keys().copied());
            v.sort_unstable();
        }
        v
    }
}

/// A child the process forked while pages were owed. The child's copy of
/// the owed memory is registered with a userfaultfd of its own (the kernel
/// hands it to the reader of the fork event), and the child owes what the
/// parent owed at the fork, at the same places: pages installed in the
/// parent after the fork are installed in the child too, and a fault of
/// the child asks the source as the parent's do.
struct Child {
    uffd: OwnedFd,
    owed: Owed,
}

impl Child {
    /// Applies the child's own events: its faults are appended to `faults`
    /// (page addresses in the child), its own children to `forks`.
    fn apply(
        &mut self,
        evs: Vec<Event>,
        faults: &mut Vec<u64>,
        forks: &mut Vec<Child>,
    ) -> Result<()> {
        for e in evs {
            match e {
                Event::Fault { addr, .. } => faults.push(addr & !(PAGE - 1)),
                Event::Remove { start, end } | Event::Unmap { start, end } => {
                    self.owed.take_dst_range(start, end);
                    uffd::wake(&self.uffd, start, end.saturating_sub(start))?;
                }
                Event::Remap { from, to, len } => {
                    self.owed.take_dst_range(to, to + len);
                    self.owed.move_range(from, to, len);
                    uffd::wake(&self.uffd, from, len)?;
                }
                Event::Fork { ufd } => forks.push(Child {
                    // SAFETY: the kernel installed this descriptor in this
                    // process with the read of the event; nothing else owns it.
                    uffd: unsafe { OwnedFd::from_raw_fd(ufd) },
                    owed: self.owed.clone(),
                }),
                Event::Other(_) => {}
            }
        }
        Ok(())
    }

    /// Installs the source pages [src, src + data.len()) the child still
    /// owes. `Ok(false)`: the child is gone (it exited or replaced its
    /// program).
    fn install(&mut self, src: u64, data: &[u8], forks: &mut Vec<Child>) -> Result<bool> {
        let n = data.len() as u64 / PAGE;
        let mut i = 0;
        // Each round installs or skips a page, or waits for a change of
        // the child's address space (bounded, as the parent's).
        for _ in 0..(n + 20_000) {
            if i >= n {
                return Ok(true);
            }
            let Some((dst, j)) = self.owed.run_at(src, i, n) else {
                i += 1;
                continue;
            };
            let (bytes, fill) = uffd::copy(
                &self.uffd,
                dst,
                &data[(i * PAGE) as usize..(j * PAGE) as usize],
            )?;
            let k = i + bytes / PAGE;
            for p in i..k {
                self.owed.remove(src + p * PAGE);
            }
            i = k;
            match fill {
                uffd::Fill::Done => {}
                uffd::Fill::Gone => return Ok(false),
                uffd::Fill::Busy => {
                    let mut evs = Vec::new();
                    uffd::read_events(&self.uffd, &mut evs)?;
                    let mut faults = Vec::new();
                    self.apply(evs, &mut faults, forks)?;
                    // Faults come again once answered: wake them to refault.
                    for f in faults {
                        uffd::wake(&self.uffd, f, PAGE)?;
                    }
                    std::thread::sleep(std::time::Duration::from_micros(100));
                }
            }
        }
        Err(crate::error::EngineError::Other(
            "a child's address space kept changing: pages could not be installed".into(),
        ))
    }
}

#[derive(Default)]
struct State {
    /// Every page still owed, by source and by destination address.
    owed: Owed,
    /// Words of held mutexes to rewrite in pages still owed, by address
    /// (see [`Owners::across_edges`]).
    pending_ids: Vec<(u64, IdWrite)>,
    /// The children forked while pages were owed (see [`Child`]).
    children: Vec<Child>,
    /// source pages asked for and not yet installed.
    requested: HashSet<u64>,
    /// prefetched pages not yet installed, and whether a fault hit them first.
    prefetched: HashMap<u64, bool>,
    /// when each fault request was made (for the latency estimate).
    asked_at: HashMap<u64, std::time::Instant>,
    /// when the first fault on each owed page was read (for the wait stats).
    faulted_at: HashMap<u64, std::time::Instant>,
    /// when a page a fault waits for was last asked for again
    /// ([`LazyMemory::overdue`]).
    asked_again_at: HashMap<u64, std::time::Instant>,
    /// smoothed request-to-install latency, seconds.
    latency: Option<f64>,
    first_install: Option<std::time::Instant>,
    installed_bytes: u64,
    stats: LazyStats,
    /// Where every change of `owed`/`at` is appended (see [`Journal`]).
    journal: Option<std::fs::File>,
    /// Destination ranges memory was moved to (mremap) while pages were owed.
    remapped: Vec<(u64, u64)>,
    /// Faults read while a fill waited for a change of the address space
    /// (see [`uffd::Fill`]): handled with the next events.
    deferred: Vec<u64>,
    /// Destination ranges `[start, end)` of owed pages a thread is copying
    /// apart from the lock: no other thread copies them meanwhile.
    filling: Vec<(u64, u64)>,
}

/// The journal of a [`LazyMemory`]: what a restarted daemon needs to rebuild
/// which pages are still owed and where they live now. One record per
/// change, appended with one `write` right after the change happens (page
/// cache: it survives the daemon, not the node):
/// `tag: u8, a: u64, b: u64, c: u64` (little endian), with tag
/// 1 = pages installed (`a` source page, `b` count), 2 = destination range
/// `[a, b)` released or unmapped, 3 = `b` bytes moved from `a` to `c` (mremap),
/// 4 = source range `[a, a + b)` not owed (the source never had those pages).
pub struct Journal;

impl Journal {
    pub const RECORD: usize = 25;
    const INSTALLED: u8 = 1;
    const DROPPED: u8 = 2;
    const REMAPPED: u8 = 3;
    const NOT_OWED: u8 = 4;
}

/// A timing mark (`pmig_timing`, debug) when something took `us`
/// microseconds, at least `limit`: `what()`, then the milliseconds.
fn slow(us: u64, limit: u64, what: impl FnOnce() -> String) {
    if us >= limit {
        tracing::debug!(
            target: "pmig_timing",
            "{} {} {:.2} ms",
            crate::timing::mono_ns(),
            what(),
            us as f64 / 1e3
        );
    }
}

impl State {
    fn log(&mut self, tag: u8, a: u64, b: u64, c: u64) {
        if let Some(j) = &mut self.journal {
            let mut r = [0u8; Journal::RECORD];
            r[0] = tag;
            r[1..9].copy_from_slice(&a.to_le_bytes());
            r[9..17].copy_from_slice(&b.to_le_bytes());
            r[17..25].copy_from_slice(&c.to_le_bytes());
            let t = std::time::Instant::now();
            let wrote = j.write_all(&r);
            slow(t.elapsed().as_micros() as u64, 1_000, || {
                "slow journal write:".into()
            });
            if let Err(e) = wrote {
                // Without the journal a takeover would go wrong: stop
                // writing it so that the record is known to be incomplete.
                tracing::error!("post-copy journal write failed ({e}); a restarted daemon could not take this process over");
                self.journal = None;
            }
        }
    }

    /// Source pages `src..src + n` are here (or the source copy no longer matters).
    /// The first destination page of `[start, end)` some thread is
    /// copying apart from the lock (see [`State::filling`]), if any.
    fn filling_in(&self, start: u64, end: u64) -> Option<u64> {
        self.filling
            .iter()
            .filter(|&&(s, e)| s < end && start < e)
            .map(|&(s, _)| s.max(start))
            .min()
    }

    fn installed(&mut self, src: u64, n: u64) {
        for k in 0..n {
            let s = src + k * PAGE;
            self.owed.remove(s);
            if !self.requested.is_empty() {
                self.requested.remove(&s);
            }
        }
    }

    /// The process's address space is gone (it exited, or replaced its
    /// program): no page is owed any more.
    fn gone(&mut self) {
        if self.owed.len() == 0 {
            return;
        }
        tracing::info!("the process's memory is gone (it exited): no page is owed any more");
        self.dropped(0, u64::MAX);
    }

    /// Destination range `[start, end)` was released or unmapped.
    fn dropped(&mut self, start: u64, end: u64) {
        for (_, s) in self.owed.take_dst_range(start, end) {
            self.requested.remove(&s);
            self.faulted_at.remove(&s);
            self.asked_again_at.remove(&s);
            self.stats.dropped_pages += 1;
        }
    }

    /// The source never had its pages in `[start, start + len)`: none of
    /// them is owed, except those already asked for (the source answers
    /// those, with zeros, and the faulting threads wait for that answer).
    fn not_owed(&mut self, start: u64, len: u64) {
        let requested = &self.requested;
        let n = self
            .owed
            .remove_src_range(start, start.saturating_add(len), |p| requested.contains(&p));
        self.stats.not_owed_pages += n as u64;
    }

    fn remapped(&mut self, from: u64, to: u64, len: u64) {
        // Whatever was owed at the target is gone (the kernel unmaps it
        // first and reports that as well).
        self.dropped(to, to + len);
        self.owed.move_range(from, to, len);
        self.remapped.push((to, len));
    }
}

pub struct LazyMemory {
    uffd: OwnedFd,
    /// The ranges registered at restore (to unregister at the end).
    registered: Vec<(u64, u64)>,
    state: Mutex<State>,
    /// Held to read by a thread that fills pages (`UFFDIO_COPY`,
    /// `UFFDIO_ZEROPAGE`), and alone by one that reads the userfaultfd's
    /// events. A fill looks up where an owed page lives now and then
    /// copies it there; an event read in between (memory released, moved,
    /// unmapped) would make that copy land in memory that must read as
    /// zeros, or somewhere else. While events are not read, the kernel
    /// refuses any fill behind a change that waits for its event to be
    /// read ([`uffd::Fill::Busy`]), so a fill under this lock is never
    /// stale, and fills may run side by side.
    fills: RwLock<()>,
    /// The threads' ids the restore rewrote: the mutexes they hold in the
    /// pages installed later are rewritten the same way.
    owners: std::sync::OnceLock<Owners>,
}

/// The ids (old, new) of [`LazyMemory::rewrite_owners`], and the process's
/// `/proc/PID/mem`, through which the half of a mutex across an edge that
/// lies in memory the process already has is read and rewritten: unlike
/// `process_vm_readv`, it fails on a page still owed instead of waiting for
/// it (which, from the thread that installs pages, would be for good).
struct Owners {
    ids: Vec<(libc::pid_t, libc::pid_t)>,
    mem: Option<std::fs::File>,
}

impl Owners {
    /// `run`, about to be installed at `dst`, with the held mutexes across
    /// its two edges (its left one only if `left`) rewritten
    /// ([`crate::resources::tcb::held_across`]), and the rewrites that
    /// waited for its pages (`pending`) done. A word outside `run` is
    /// rewritten in the process at once where it is there, and where its
    /// page is still owed (`owed`, by its address) it waits in `pending`.
    /// None if `run` is unchanged.
    fn across_edges(
        &self,
        dst: u64,
        run: &[u8],
        left: bool,
        owed: &dyn Fn(u64) -> bool,
        pending: &mut Vec<(u64, IdWrite)>,
    ) -> Option<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        const SIDE: usize = crate::resources::tcb::EDGE_BYTES;
        let mem = self.mem.as_ref()?;
        let end = dst + run.len() as u64;
        if run.len() < SIDE {
            return None;
        }
        let word =
            |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or_default());
        let mut copy: Option<Vec<u8>> = None;
        let put = |copy: &mut Option<Vec<u8>>, a: u64, w: &IdWrite| {
            let c = copy.get_or_insert_with(|| run.to_vec());
            let o = (a - dst) as usize;
            if let Some(v) = w.apply(word(c, o)) {
                c[o..o + 4].copy_from_slice(&v.to_le_bytes());
            }
        };
        // What waited for these pages.
        pending.retain(|(a, w)| {
            let here = (dst..end).contains(a);
            if here {
                put(&mut copy, *a, w);
            }
            !here
        });
        let mut side = [0u8; SIDE];
        let before = dst.checked_sub(SIDE as u64).filter(|_| left);
        for (at, outside_first) in [(before, true), (Some(end), false)] {
            let Some(at) = at else { continue };
            let there = mem.read_exact_at(&mut side, at).is_ok();
            // Not there and not owed: not mapped, nothing lies across.
            if !there && !owed(at & !(PAGE - 1)) {
                continue;
            }
            let outside = there.then_some(&side[..]);
            let here = copy.as_deref().unwrap_or(run);
            let (edge, found) = if outside_first {
                let w = crate::resources::tcb::held_across(outside, Some(&here[..SIDE]), &self.ids);
                (dst, w)
            } else {
                let w = crate::resources::tcb::held_across(
                    Some(&here[here.len() - SIDE..]),
                    outside,
                    &self.ids,
                );
                (end, w)
            };
            for w in found {
                let a = edge.wrapping_add_signed(w.at);
                if (dst..end).contains(&a) {
                    put(&mut copy, a, &w);
                } else if !there {
                    pending.push((a, w));
                } else {
                    let o = (a - at) as usize;
                    let Some(v) = w.apply(word(&side, o)) else {
                        continue;
                    };
                    if let Err(e) = mem.write_all_at(&v.to_le_bytes(), a) {
                        tracing::warn!(
                            "the owner of a held mutex at {a:#x} could not be rewritten: {e}"
                        );
                    }
                }
            }
        }
        copy
    }
}

impl LazyMemory {
    /// `owed`: page ranges the source still has; `registered`: the ranges
    /// the restore registered with the userfaultfd.
    pub fn new(uffd: OwnedFd, owed: &[(u64, u64)], registered: Vec<(u64, u64)>) -> LazyMemory {
        // This runs after the restored process has resumed and before its
        // first fault can be served: see [`Owed`].
        let st = State {
            owed: Owed::new(owed),
            ..State::default()
        };
        LazyMemory {
            uffd,
            registered,
            state: Mutex::new(st),
            fills: RwLock::new(()),
            owners: std::sync::OnceLock::new(),
        }
    }

    /// The restore gave the threads new ids and rewrote them in the
    /// process's memory (`Restored::ids`, old and new): from now on, a held
    /// mutex that names an old id in a page installed is rewritten with the
    /// new one before the page is installed
    /// ([`crate::resources::tcb::rewrite_held_mutexes`]), and so is one
    /// across an edge of the pages installed, half in memory the process
    /// `pid` has already. Set once; an empty list changes nothing.
    pub fn rewrite_owners(&self, pid: libc::pid_t, ids: Vec<(libc::pid_t, libc::pid_t)>) {
        if ids.iter().any(|(old, new)| old != new) {
            let mem = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(format!("/proc/{pid}/mem"));
            if let Err(e) = &mem {
                tracing::warn!("process {pid}: /proc/{pid}/mem cannot be opened ({e}): a held mutex across the edge of two pages installed apart keeps its old owner");
            }
            let _ = self.owners.set(Owners { ids, mem: mem.ok() });
        }
    }

    /// From now on, append every change to `journal` (see [`Journal`]).
    pub fn set_journal(&self, journal: std::fs::File) {
        self.state.lock().journal = Some(journal);
    }

    /// Rebuilds the memory of a restarted daemon: the state at the handover
    /// (`owed`, `registered`) with the journal's changes applied, for the
    /// process's userfaultfd `uffd`. Returns the memory and whether the
    /// journal ended in a torn record (ignored: its change is redone).
    pub fn recover(
        uffd: OwnedFd,
        owed: &[(u64, u64)],
        registered: Vec<(u64, u64)>,
        journal: &[u8],
    ) -> (LazyMemory, bool) {
        let lm = LazyMemory::new(uffd, owed, registered);
        {
            let mut st = lm.state.lock();
            let mut recs = journal.chunks_exact(Journal::RECORD);
            for r in &mut recs {
                let f = |i: usize| u64::from_le_bytes(r[i..i + 8].try_into().unwrap());
                match r[0] {
                    Journal::INSTALLED => st.installed(f(1), f(9)),
                    Journal::DROPPED => st.dropped(f(1), f(9)),
                    Journal::REMAPPED => st.remapped(f(1), f(17), f(9)),
                    Journal::NOT_OWED => st.not_owed(f(1), f(9)),
                    _ => {}
                }
            }
            st.stats = LazyStats::default();
            let torn = !recs.remainder().is_empty();
            drop(st);
            (lm, torn)
        }
    }

    /// After a takeover: wake every thread that may wait on a fault the dead
    /// daemon read but never answered; each faults again if its page is
    /// still missing, and this time the fault reaches us.
    pub fn wake_all(&self) {
        let st = self.state.lock();
        for &(s, l) in self.registered.iter().chain(st.remapped.iter()) {
            let _ = uffd::wake(&self.uffd, s, l);
        }
    }

    pub fn owed_pages(&self) -> usize {
        self.state.lock().owed.len()
    }

    pub fn stats(&self) -> LazyStats {
        self.state.lock().stats
    }

    /// Source pages still owed, in address order (for the background push).
    /// `n` of the faults counted as remote were answered from a copy on
    /// this node (assisted-post-copy's round 0): they are not remote.
    pub fn answered_here(&self, n: u64) {
        let mut st = self.state.lock();
        st.stats.remote_faults = st.stats.remote_faults.saturating_sub(n);
    }

    pub fn owed_list(&self) -> Vec<u64> {
        self.state.lock().owed.sorted()
    }

    pub fn is_owed(&self, src_page: u64) -> bool {
        self.state.lock().owed.dst_of(src_page).is_some()
    }

    /// Install the source pages [src, src + data.len()) that are still owed.
    /// Returns how many pages were installed.
    pub fn install(&self, src: u64, data: &[u8]) -> Result<u64> {
        self.install_as(src, data, false)
    }

    /// [`Self::install`] of pages that hold nothing but zeros (a
    /// `PageZeros` of the protocol): `zeros` is that many zero bytes, and
    /// each owed page gets the zero page (`UFFDIO_ZEROPAGE`) instead of a
    /// copy of them, which costs neither the copy nor a page of memory
    /// until the process writes there. So quick that the whole run goes
    /// under the lock at once, even where [`Self::install_bulk`] would
    /// take it piece by piece. Where a held mutex across an edge of the
    /// run has a word to rewrite inside it, the run is copied, as
    /// [`Self::install`] does.
    pub fn install_zeros(&self, src: u64, zeros: &[u8]) -> Result<u64> {
        debug_assert!(zeros.iter().all(|&b| b == 0));
        self.install_as(src, zeros, true)
    }

    /// [`Self::install`]; with `zeros`, `data` is all zeros and goes as
    /// [`Self::install_zeros`] says.
    ///
    /// Each run of owed pages is looked up under the state's lock. Its
    /// pages of data are copied apart from that lock, where they may run
    /// alongside another thread's ([`Self::fills`]); only the pages at its
    /// two edges, where a held mutex may lie across into a neighbouring
    /// run ([`Owners::across_edges`]), are copied under it, when thread ids
    /// are rewritten at all.
    fn install_as(&self, src: u64, data: &[u8], zeros: bool) -> Result<u64> {
        // Rare: a copy of the pages, with those mutexes rewritten (none is
        // held in pages of zeros).
        let owners = self.owners.get();
        let rewritten = owners.filter(|_| !zeros).and_then(|o| {
            let held = crate::resources::tcb::held_mutexes(data, &o.ids);
            (!held.is_empty()).then(|| {
                let mut copy = data.to_vec();
                crate::resources::tcb::rewrite_held_mutexes(&mut copy, &held);
                copy
            })
        });
        let data = rewritten.as_deref().unwrap_or(data);
        let mut fills = self.fills.read();
        let mut st = self.state.lock();
        let n = data.len() as u64 / PAGE;
        let mut installed = 0;
        let mut busy = 0;
        let mut i = 0;
        // Where the pages installed last from `data` end.
        let mut after = None;
        while i < n {
            // Looked up again after a wait: the events read meanwhile may
            // have moved or released the page.
            let Some((dst, mut j)) = st.owed.run_at(src, i, n) else {
                i += 1;
                continue;
            };
            // Up to the first page another thread is copying: that thread
            // installs it.
            if let Some(stop) = st.filling_in(dst, dst + (j - i) * PAGE) {
                if stop == dst {
                    i += 1;
                    continue;
                }
                j = i + (stop - dst) / PAGE;
            }
            let run = &data[(i * PAGE) as usize..(j * PAGE) as usize];
            // The edge with the pages just installed from `data` was
            // looked at with the whole of it.
            let left = after != Some(dst);
            let edged = owners.and_then(|o| {
                let State {
                    owed, pending_ids, ..
                } = &mut *st;
                let owed = |p: u64| owed.src_at(p).is_some();
                o.across_edges(dst, run, left, &owed, pending_ids)
            });
            let body = edged.as_deref().unwrap_or(run);
            // The pages copied apart from the lock: all of them, or all but
            // the two edges' (copied first, under it).
            let edge = u64::from(owners.is_some());
            let apart = (!zeros || edged.is_some()) && j - i >= APART_MIN + 2 * edge;
            let (copied, fill) = if apart {
                let (a, b) = (i + edge, j - edge);
                let part =
                    |s: u64, e: u64| &body[((s - i) * PAGE) as usize..((e - i) * PAGE) as usize];
                let mut fill = uffd::Fill::Done;
                // (first page, pages installed) of each copy: at most three.
                let mut copied = [(0, 0); 3];
                for (s, e) in [(i, a), (b, j)] {
                    if s == e || !matches!(fill, uffd::Fill::Done) {
                        continue;
                    }
                    let (bytes, f) = uffd::copy(&self.uffd, dst + (s - i) * PAGE, part(s, e))?;
                    copied[usize::from(s != i)] = (s, bytes / PAGE);
                    fill = f;
                }
                if matches!(fill, uffd::Fill::Done) {
                    let at = dst + (a - i) * PAGE;
                    let range = (at, dst + (b - i) * PAGE);
                    st.filling.push(range);
                    MutexGuard::unlock_fair(st);
                    #[cfg(test)]
                    std::thread::sleep(std::time::Duration::from_micros(
                        APART_PAUSE_US.load(std::sync::atomic::Ordering::Relaxed),
                    ));
                    let r = uffd::copy(&self.uffd, at, part(a, b));
                    st = self.state.lock();
                    st.filling.retain(|&x| x != range);
                    let (bytes, f) = r?;
                    copied[2] = (a, bytes / PAGE);
                    fill = f;
                }
                (copied, fill)
            } else {
                let (bytes, fill) = match edged.as_deref() {
                    Some(edged) => uffd::copy(&self.uffd, dst, edged)?,
                    None if zeros => uffd::zeros(&self.uffd, dst, run.len() as u64)?,
                    None => uffd::copy(&self.uffd, dst, run)?,
                };
                ([(i, bytes / PAGE), (0, 0), (0, 0)], fill)
            };
            for &(s, k) in &copied {
                if k > 0 {
                    self.installed_run(&mut st, src + s * PAGE, k);
                    installed += k;
                }
            }
            match fill {
                uffd::Fill::Done => {
                    after = Some(dst + (j - i) * PAGE);
                    i = j;
                }
                uffd::Fill::Busy => {
                    // Whatever of the run is not installed yet is looked up
                    // again once the events are read.
                    after = None;
                    // Events are read only by a thread that holds `fills`
                    // alone.
                    drop(st);
                    drop(fills);
                    {
                        let _w = self.fills.write();
                        let mut s2 = self.state.lock();
                        self.changing(&mut s2, &mut busy)?;
                    }
                    fills = self.fills.read();
                    st = self.state.lock();
                }
                uffd::Fill::Gone => {
                    st.gone();
                    break;
                }
            }
        }
        st.stats.installed_pages += installed;
        if !st.children.is_empty() {
            let mut forks = Vec::new();
            let mut kept = Vec::new();
            for mut c in std::mem::take(&mut st.children) {
                // A child's trouble is the child's: it is let go, and the
                // parent's pages go on.
                match c.install(src, data, &mut forks) {
                    Ok(true) => kept.push(c),
                    Ok(false) => {}
                    Err(e) => tracing::warn!(
                        "a child of the process is no longer served ({} pages owed): {e}",
                        c.owed.len()
                    ),
                }
            }
            kept.extend(forks);
            // A child that owes nothing more is let go: closing its
            // userfaultfd ends its registrations.
            kept.retain(|c| c.owed.len() > 0);
            st.children = kept;
            for k in 0..n {
                st.requested.remove(&(src + k * PAGE));
            }
        }
        // Handed straight to a thread waiting for it, if any (see
        // `install_bulk`).
        MutexGuard::unlock_fair(st);
        drop(fills);
        Ok(installed)
    }

    /// Installs a long run of pages nothing waits for yet (a background
    /// push, a local copy), as [`Self::install`] does, in pieces of
    /// [`BULK_PIECE`] pages. Each piece takes the lock by itself and hands
    /// it over at its end: an answer to a fault, or the read of a fault,
    /// waiting for the lock goes before the next piece instead of after the
    /// whole run. Filling memory the host has not backed yet (a VM whose
    /// balloon gave freed memory back) took about 1 ms for 32 pages on the
    /// test machine, and faults waited that long behind a push.
    pub fn install_bulk(&self, src: u64, data: &[u8]) -> Result<u64> {
        let mut installed = 0;
        for (k, piece) in data.chunks(BULK_PIECE * PAGE as usize).enumerate() {
            installed += self.install(src + (k * BULK_PIECE) as u64 * PAGE, piece)?;
        }
        Ok(installed)
    }

    /// Bookkeeping of `n` source pages from `src` just installed.
    fn installed_run(&self, st: &mut State, src: u64, n: u64) {
        st.log(Journal::INSTALLED, src, n, 0);
        let now = std::time::Instant::now();
        st.installed(src, n);
        for s in (src..src + n * PAGE).step_by(PAGE as usize) {
            if let Some(faulted) = st.prefetched.remove(&s) {
                if !faulted {
                    st.stats.prefetch_hits += 1;
                }
            }
            if let Some(t) = st.faulted_at.remove(&s) {
                st.asked_again_at.remove(&s);
                let us = now.duration_since(t).as_micros() as u64;
                st.stats.fault_waited(us);
                slow(us, 2_000, || format!("slow fault: page {s:#x} waited"));
            }
            if let Some(t) = st.asked_at.remove(&s) {
                let l = now.duration_since(t).as_secs_f64();
                st.latency = Some(match st.latency {
                    Some(old) => 0.8 * old + 0.2 * l,
                    None => l,
                });
            }
        }
        st.first_install.get_or_insert(now);
        st.installed_bytes += n * PAGE;
    }

    /// A fill was refused because a change of the address space waits for
    /// its event to be read (see [`uffd::Fill`]): read the pending events
    /// here, whichever thread this is (their faults are kept for the fault
    /// loop), and give the changing thread a moment to go on. Fails after
    /// about two seconds of this. The caller holds [`Self::fills`] alone.
    fn changing(&self, st: &mut State, tries: &mut u32) -> Result<()> {
        const MAX_TRIES: u32 = 20_000;
        *tries += 1;
        st.stats.busy_fills += 1;
        if *tries > MAX_TRIES {
            return Err(crate::error::EngineError::Other(
                "the process's address space kept changing: pages could not be installed for 2 s"
                    .into(),
            ));
        }
        let mut evs = Vec::new();
        uffd::read_events(&self.uffd, &mut evs)?;
        let mut faults = Vec::new();
        self.apply_events(st, evs, &mut faults)?;
        st.deferred.extend(faults);
        std::thread::sleep(std::time::Duration::from_micros(100));
        Ok(())
    }

    /// Apply the changes of the address space in `evs` to the state; their
    /// faults go to `faults`. Threads waiting on a fault in a released,
    /// unmapped or moved range are woken: the answer they wait for would
    /// now be dropped (the page is owed no more, or owed elsewhere), so each
    /// faults again and is answered for what is there now.
    fn apply_events(&self, st: &mut State, evs: Vec<Event>, faults: &mut Vec<u64>) -> Result<()> {
        for e in evs {
            match e {
                Event::Fault { addr, .. } => faults.push(addr),
                Event::Remove { start, end } | Event::Unmap { start, end } => {
                    st.log(Journal::DROPPED, start, end, 0);
                    let before = st.stats.dropped_pages;
                    st.dropped(start, end);
                    tracing::debug!(
                        "{e:x?}: {} owed pages dropped",
                        st.stats.dropped_pages - before
                    );
                    uffd::wake(&self.uffd, start, end.saturating_sub(start))?;
                }
                Event::Remap { from, to, len } => {
                    st.log(Journal::REMAPPED, from, len, to);
                    let (before, owed) = (st.stats.dropped_pages, st.owed.len());
                    st.remapped(from, to, len);
                    tracing::debug!(
                        "{e:x?}: {} owed pages dropped at the target, {} owed in all",
                        st.stats.dropped_pages - before,
                        owed
                    );
                    uffd::wake(&self.uffd, from, len)?;
                }
                Event::Fork { ufd } => {
                    tracing::info!(
                        "the process forked while {} pages were owed: its child is served as well",
                        st.owed.len()
                    );
                    st.children.push(Child {
                        // SAFETY: the kernel installed this descriptor in
                        // this process with the read of the event; nothing
                        // else owns it.
                        uffd: unsafe { OwnedFd::from_raw_fd(ufd) },
                        owed: st.owed.clone(),
                    });
                }
                Event::Other(_) => {}
            }
        }
        Ok(())
    }

    /// The children's events: their faults on owed pages ask the source
    /// (through `h`), the others get zero pages; a child that is gone is
    /// let go.
    fn handle_children(&self, st: &mut State, h: &mut Handled) {
        let mut forks = Vec::new();
        let mut kept = Vec::new();
        for mut c in std::mem::take(&mut st.children) {
            let mut evs = Vec::new();
            let mut faults = Vec::new();
            let mut alive = uffd::read_events(&c.uffd, &mut evs)
                .and_then(|_| c.apply(evs, &mut faults, &mut forks))
                .is_ok();
            for page in faults {
                if !alive {
                    break;
                }
                match c.owed.src_at(page) {
                    Some(src) => {
                        if st.requested.insert(src) {
                            h.ask.push(src);
                        }
                    }
                    None => match uffd::zeropage(&c.uffd, page, PAGE) {
                        Ok(uffd::Fill::Done) => {}
                        Ok(uffd::Fill::Gone) => alive = false,
                        // The fault comes again after its change is read.
                        Ok(uffd::Fill::Busy) => alive = uffd::wake(&c.uffd, page, PAGE).is_ok(),
                        Err(e) => {
                            tracing::warn!("a child of the process is no longer served: {e}");
                            alive = false;
                        }
                    },
                }
            }
            if alive {
                kept.push(c);
            }
        }
        kept.extend(forks);
        kept.retain(|c| c.owed.len() > 0);
        st.children = kept;
    }

    /// The source never had the pages of `ranges` (source addresses): they
    /// are owed no more, and a fault there gets a zero page here. Pages
    /// already asked for stay owed until their answer arrives.
    pub fn not_owed(&self, ranges: &[(u64, u64)]) {
        let mut st = self.state.lock();
        for &(a, l) in ranges {
            st.log(Journal::NOT_OWED, a, l, 0);
            let before = st.stats.not_owed_pages;
            st.not_owed(a, l);
            tracing::debug!(
                "not owed: {a:#x}+{l:#x}, {} pages",
                st.stats.not_owed_pages - before
            );
            let State {
                children,
                requested,
                ..
            } = &mut *st;
            for c in children.iter_mut() {
                c.owed
                    .remove_src_range(a, a.saturating_add(l), |p| requested.contains(&p));
            }
        }
    }

    /// Wait up to `ms` for events; returns true if some are ready (or
    /// faults read meanwhile wait to be handled).
    pub fn wait(&self, ms: i32) -> bool {
        let mut fds = vec![self.uffd.as_raw_fd()];
        {
            let st = self.state.lock();
            if !st.deferred.is_empty() {
                return true;
            }
            fds.extend(st.children.iter().map(|c| c.uffd.as_raw_fd()));
        }
        let mut p: Vec<libc::pollfd> = fds
            .iter()
            .map(|&fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: polling descriptors we own, `p.len()` of them.
        unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms) > 0 }
    }

    /// How many source pages are asked for and still owed.
    pub fn requested_count(&self) -> usize {
        let st = self.state.lock();
        st.requested
            .iter()
            .filter(|&&p| st.owed.dst_of(p).is_some())
            .count()
    }

    /// Source pages asked for and still owed (their answers are on their
    /// way), in address order.
    pub fn requested_pages(&self) -> Vec<u64> {
        let st = self.state.lock();
        let mut v: Vec<u64> = st
            .requested
            .iter()
            .copied()
            .filter(|&p| st.owed.dst_of(p).is_some())
            .collect();
        v.sort_unstable();
        v
    }

    /// Mark owed, not yet requested source pages as asked for ahead of a
    /// fault; returns those (the others are already on their way or here).
    pub fn prefetch(&self, pages: &[u64]) -> Vec<u64> {
        let mut st = self.state.lock();
        let mut out = Vec::new();
        for &p in pages {
            if st.owed.dst_of(p).is_some() && st.requested.insert(p) {
                st.prefetched.insert(p, false);
                out.push(p);
            }
        }
        st.stats.prefetched += out.len() as u64;
        out
    }

    /// Source pages a fault has waited for at least `after` since they were
    /// last asked for (or, if prefetched, since the fault): to ask for
    /// again. An answer can be held up where nothing here can see it (a
    /// pushed copy the source counted on, stuck behind a stream of answers
    /// in a link's queue that serves them first); asking again bounds what
    /// such a fault waits. Marks them asked for now.
    pub fn overdue(&self, after: std::time::Duration) -> Vec<u64> {
        let mut st = self.state.lock();
        if st.faulted_at.is_empty() {
            return Vec::new();
        }
        let now = std::time::Instant::now();
        let st = &mut *st;
        let mut out = Vec::new();
        for (&p, &t) in &st.faulted_at {
            let last = st
                .asked_again_at
                .get(&p)
                .or_else(|| st.asked_at.get(&p))
                .copied()
                .unwrap_or(t)
                .max(t);
            if now.duration_since(last) >= after
                && st.requested.contains(&p)
                && st.owed.dst_of(p).is_some()
            {
                out.push(p);
            }
        }
        for &p in &out {
            st.asked_again_at.insert(p, now);
        }
        st.stats.asked_again += out.len() as u64;
        out.sort_unstable();
        out
    }

    /// Measured (latency of a fault request in seconds, seconds per page
    /// installed), once known.
    pub fn measured(&self) -> (Option<f64>, Option<f64>) {
        let st = self.state.lock();
        let td = st.first_install.and_then(|t| {
            let secs = t.elapsed().as_secs_f64();
            (st.installed_bytes > 64 * PAGE && secs > 0.0)
                .then(|| secs / (st.installed_bytes / PAGE) as f64)
        });
        (st.latency, td)
    }

    /// Handle every pending event: which source pages to ask for (each page
    /// once; the faulting thread waits until it is installed) and which
    /// faults happened.
    pub fn handle_events(&self) -> Result<Handled> {
        // Events are read and applied under the lock, here and in
        // `changing`: the state must see the changes in their order. And
        // with no fill under way (see `fills`).
        let _alone = self.fills.write();
        let mut st = self.state.lock();
        let mut evs = Vec::new();
        uffd::read_events(&self.uffd, &mut evs)?;
        // The kernel hands out faults before other events: apply the
        // changes of the address space first, so that a fault on memory
        // just moved or released is answered for what is there now.
        let mut faults = std::mem::take(&mut st.deferred);
        self.apply_events(&mut st, evs, &mut faults)?;
        let mut h = Handled::default();
        let mut busy = 0;
        let mut k = 0;
        while k < faults.len() {
            let page = faults[k] & !(PAGE - 1);
            match st.owed.src_at(page) {
                Some(src) => {
                    tracing::debug!("remote fault at {page:#x}");
                    st.stats.remote_faults += 1;
                    h.faults.push(src);
                    let now = std::time::Instant::now();
                    st.faulted_at.entry(src).or_insert(now);
                    // Prefetched, but too late (the first fault on it).
                    let late = st
                        .prefetched
                        .get_mut(&src)
                        .is_some_and(|f| !std::mem::replace(f, true));
                    if st.requested.insert(src) {
                        st.asked_at.insert(src, now);
                        h.ask.push(src);
                    } else if late {
                        h.promote.push(src);
                    }
                }
                // Never populated at the source (or released since): what
                // the process expects there is zeros.
                None => {
                    // Ok(false): refused while the address space changes.
                    // An error's `usize` is where the faults still to
                    // handle start: this one again after the refusals
                    // lasted too long, the next one after a plain failure.
                    let r = match uffd::zeropage(&self.uffd, page, PAGE) {
                        Ok(uffd::Fill::Done) => Ok(true),
                        Ok(uffd::Fill::Gone) => {
                            st.gone();
                            return Ok(h);
                        }
                        // Read what is changing, then look at this fault again.
                        Ok(uffd::Fill::Busy) => self
                            .changing(&mut st, &mut busy)
                            .map(|_| false)
                            .map_err(|e| (e, k)),
                        Err(e) => Err((e, k + 1)),
                    };
                    match r {
                        Ok(true) => {
                            tracing::debug!("zero page at {page:#x}");
                            st.stats.zero_faults += 1
                        }
                        Ok(false) => {
                            let more = std::mem::take(&mut st.deferred);
                            faults.extend(more);
                            continue;
                        }
                        Err((e, from)) => {
                            // Not lost: the other faults come again with
                            // the next events.
                            let rest = faults.split_off(from.min(faults.len()));
                            st.deferred.extend(rest);
                            return Err(e);
                        }
                    }
                }
            }
            k += 1;
        }
        if !st.children.is_empty() {
            self.handle_children(&mut st, &mut h);
        }
        Ok(h)
    }

    /// Nothing is owed any more: stop intercepting faults.
    pub fn finish(self) {
        self.unregister_all();
    }

    /// Unregisters the ranges registered at restore and those moved since.
    fn unregister_all(&self) {
        let moved = self.state.lock().remapped.clone();
        for (s, l) in self.registered.iter().chain(moved.iter()) {
            let _ = uffd::unregister(&self.uffd, *s, *l);
        }
    }

    /// Nothing is owed any more and process `pid` runs on: unregisters
    /// every range and closes the userfaultfd the process holds as `fd`,
    /// reading its events until the close is done. A thread of the process
    /// that unmaps, releases or moves registered memory waits in the kernel
    /// until its event has been read, and such a thread cannot be stopped
    /// to inject the close: without a reader, the close would wait for the
    /// stop and the thread for the reader, forever. A process that has
    /// exited meanwhile needs no close.
    pub fn finish_in_process(self, pid: libc::pid_t, fd: i32) -> Result<()> {
        let closing = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !closing.load(std::sync::atomic::Ordering::Acquire) {
                    // Faults here are on pages not owed: zero pages.
                    if self.wait(5) && self.handle_events().is_err() {
                        break;
                    }
                }
            });
            self.unregister_all();
            let r = close_in_process(pid, fd, &self.uffd);
            closing.store(true, std::sync::atomic::Ordering::Release);
            r
        })
    }
}

/// Most pages of the argument and environment strings sent with the state.
const MAX_ARG_ENV_PAGES: u64 = 256;

/// Most pages sent along because a thread's register points into them.
const MAX_POINTED_PAGES: usize = 1024;

/// What the restore touches of one thread's memory before the process
/// runs, and what the thread works on at the stop.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadPages {
    /// The rseq area (address, length), written when rseq is registered.
    pub rseq: Option<(u64, u32)>,
    pub rsp: u64,
    /// glibc's thread descriptor, whose copy of the thread id the restore
    /// may rewrite (see [`crate::resources::tcb`]).
    pub fs_base: u64,
    /// The instruction pointer and the other general registers: the code
    /// and data pages the thread is working on (Choices' "current code and
    /// heap pages", Noack §2.3.4). Values that are not addresses of
    /// private memory select nothing: the caller keeps only pages present
    /// in writable private anonymous mappings.
    pub pointers: [u64; 16],
}

impl ThreadPages {
    pub fn of(regs: &crate::sys::UserRegs, rseq: Option<(u64, u32)>) -> ThreadPages {
        ThreadPages {
            rseq,
            rsp: regs.rsp,
            fs_base: regs.fs_base,
            pointers: [
                regs.rip, regs.rax, regs.rbx, regs.rcx, regs.rdx, regs.rsi, regs.rdi, regs.rbp,
                regs.r8, regs.r9, regs.r10, regs.r11, regs.r12, regs.r13, regs.r14, regs.r15,
            ],
        }
    }
}

/// Pages the restorer and the kernel touch before the process runs (each
/// thread's rseq area and thread descriptor), the page each thread's stack
/// pointer is on with the red zone below it, and the pages of the argument
/// and environment strings `arg_env` ([start, end) each), and the pages
/// the threads' registers point into (at most [`MAX_POINTED_PAGES`]): a
/// lazy handover sends these along. The kernel reads the last ones for other processes
/// (`/proc/PID/cmdline` and `environ`, which `ps` shows), and such a read
/// of a page not yet arrived fails instead of waiting for it: it cannot
/// wait on a userfaultfd.
pub fn handover_set(
    threads: impl IntoIterator<Item = ThreadPages>,
    arg_env: [(u64, u64); 2],
) -> HashSet<u64> {
    let pg = |a: u64| a & !(PAGE - 1);
    let mut keep = HashSet::new();
    for (start, end) in arg_env {
        let mut p = pg(start);
        while p < end && keep.len() < MAX_ARG_ENV_PAGES as usize * 2 {
            keep.insert(p);
            p += PAGE;
        }
    }
    let mut pointed = 0;
    for t in threads {
        for &p in &t.pointers {
            // Page 0 and the kernel's half are never the process's memory.
            if (PAGE..1 << 47).contains(&p) && pointed < MAX_POINTED_PAGES && keep.insert(pg(p)) {
                pointed += 1;
            }
        }
        if let Some((ptr, size)) = t.rseq.filter(|r| r.0 != 0) {
            keep.insert(pg(ptr));
            keep.insert(pg(ptr + size.max(1) as u64 - 1));
        }
        if t.fs_base != 0 {
            keep.extend(crate::resources::tcb::handover_pages(t.fs_base));
        }
        keep.insert(pg(t.rsp));
        // The red zone and a call or two below the stack pointer.
        keep.insert(pg(t.rsp.wrapping_sub(256)));
    }
    keep
}

/// [`handover_set`] of the frozen process `frozen`, from its threads'
/// registers and rseq registrations, with the pages of each thread's
/// robust mutex list ([`crate::resources::tcb::robust_pages_at`]).
pub fn handover_pages(frozen: &crate::ptrace::Frozen) -> Result<HashSet<u64>> {
    let mut threads = Vec::with_capacity(frozen.threads.len());
    for t in &frozen.threads {
        let r = crate::sys::rseq_config(t.tid)?;
        let regs = crate::sys::get_regs(t.tid)?;
        let robust = crate::sys::robust_list(t.tid).ok();
        threads.push((ThreadPages::of(&regs, Some((r.ptr, r.size))), robust));
    }
    Ok(handover_with(frozen, threads))
}

/// [`handover_pages`] from what the capture of the frozen process `frozen`
/// read of its threads (`threads`), which it does not read again.
pub fn handover_of(
    frozen: &crate::ptrace::Frozen,
    threads: &crate::resources::threads::ThreadsState,
) -> HashSet<u64> {
    let each = threads.threads.iter().map(|t| {
        let regs = crate::resources::threads::regs_from_vec(&t.regs);
        let rseq = t.rseq.map(|(ptr, len, _)| (ptr, len));
        (ThreadPages::of(&regs, rseq), Some(t.robust_list))
    });
    handover_with(frozen, each)
}

/// [`handover_set`] of `frozen` for its threads' pages and robust list
/// heads (address, length; None where it could not be read).
fn handover_with(
    frozen: &crate::ptrace::Frozen,
    threads: impl IntoIterator<Item = (ThreadPages, Option<(u64, u64)>)>,
) -> HashSet<u64> {
    let stat = crate::procfs::read(frozen.pid, "stat").unwrap_or_default();
    // Fields 48–51 of /proc/PID/stat: arg_start, arg_end, env_start, env_end
    // (the first field after the command's closing parenthesis is field 3).
    let f: Vec<u64> = stat
        .rsplit_once(')')
        .map(|(_, rest)| {
            rest.split_whitespace()
                .map(|x| x.parse().unwrap_or(0))
                .collect()
        })
        .unwrap_or_default();
    let at = |k: usize| f.get(k).copied().unwrap_or(0);
    let (pages, robust): (Vec<ThreadPages>, Vec<_>) = threads.into_iter().unzip();
    let mut keep = handover_set(pages, [(at(45), at(46)), (at(47), at(48))]);
    // The mutexes on each thread's robust list, whose owner the restore
    // rewrites if the thread's id changes (bounded as the kernel bounds
    // the list).
    for (head, len) in robust.into_iter().flatten() {
        keep.extend(crate::resources::tcb::robust_pages_at(
            frozen.pid, head, len,
        ));
    }
    // The Go runtime's records of its threads, whose ids the restore
    // rewrites if they change.
    keep.extend(crate::resources::gort::handover_pages(frozen));
    keep
}

/// Close fd `fd` inside process `pid` (briefly stopping it): the
/// userfaultfd it kept while pages were owed, `ours` being our copy of it.
/// Only if `fd` is still that userfaultfd: one the process no longer holds
/// (it replaced its program, and the descriptor, opened close-on-exec, is
/// gone; the number may name another file now) is left alone.
fn close_in_process(pid: libc::pid_t, fd: i32, ours: &OwnedFd) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let ours = nix::sys::stat::fstat(ours.as_raw_fd()).ctx(|| "stat the userfaultfd".into())?;
    match crate::ptrace::with_frozen(pid, |f| {
        // Looked at while the process is stopped: it cannot change.
        let path = format!("/proc/{pid}/fd/{fd}");
        let same = std::fs::read_link(&path)
            .is_ok_and(|l| l.as_os_str() == "anon_inode:[userfaultfd]")
            && std::fs::metadata(&path)
                .is_ok_and(|m| m.dev() == ours.st_dev && m.ino() == ours.st_ino);
        if !same {
            tracing::info!(
                "process {pid} no longer holds its userfaultfd as fd {fd} (it replaced its program?): nothing to close"
            );
            return Ok(());
        }
        f.inject(0, libc::SYS_close, &[fd as u64]).map(|_| ())
    }) {
        // It has exited (its descriptors with it): nothing is left to close.
        Err(crate::EngineError::NoProcess(_)) => Ok(()),
        r => r,
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_pages_registers_point_into_go_with_the_state() {
        let mut t = ThreadPages {
            rsp: 0x7000_0000_1008,
            ..Default::default()
        };
        t.pointers[0] = 0x40_1234; // rip
        t.pointers[1] = 0x5555_0000_2fff; // a heap pointer
        t.pointers[2] = 42; // a count, not an address
        t.pointers[3] = 0xffff_ffff_8100_0000; // a kernel address
        let keep = handover_set([t], [(0, 0), (0, 0)]);
        assert!(keep.contains(&0x40_1000));
        assert!(keep.contains(&0x5555_0000_2000));
        assert!(keep.contains(&0x7000_0000_1000));
        assert!(!keep.contains(&0));
        assert!(!keep.contains(&0xffff_ffff_8100_0000));
        // Bounded however many threads there are.
        let many = (0..1000u64).map(|k| {
            let mut t = ThreadPages::default();
            for (i, p) in t.pointers.iter_mut().enumerate() {
                *p = 0x1000_0000 + (k * 16 + i as u64) * PAGE;
            }
            t
        });
        let keep = handover_set(many, [(0, 0), (0, 0)]);
        let pointed = keep
            .iter()
            .filter(|&&p| (0x1000_0000..0x1000_0000 + 16_000 * PAGE).contains(&p))
            .count();
        assert_eq!(pointed, MAX_POINTED_PAGES);
    }

    use super::*;
    use std::os::fd::FromRawFd;

    fn rec(tag: u8, a: u64, b: u64, c: u64) -> Vec<u8> {
        let mut r = vec![tag];
        for v in [a, b, c] {
            r.extend_from_slice(&v.to_le_bytes());
        }
        r
    }

    fn any_fd() -> OwnedFd {
        std::fs::File::open("/dev/null").unwrap().into()
    }

    /// A userfaultfd of this process with the lazy restore's features,
    /// `n` fresh pages registered for missing pages, and a second
    /// descriptor of it to poll without reading.
    fn registered_here(n: u64) -> Option<(OwnedFd, OwnedFd, u64)> {
        // SAFETY: userfaultfd returns a new descriptor or -1.
        let fd =
            unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK) };
        if fd < 0 {
            return None; // not allowed here (not root): nothing to test
        }
        // SAFETY: a new descriptor nothing else owns.
        let uffd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        uffd::api(&uffd, uffd::LAZY_FEATURES).unwrap();
        let base = crate::resources::memory::anon_map((n * PAGE) as usize) as u64;
        let mut r = [base, n * PAGE, uffd::UFFDIO_REGISTER_MODE_MISSING, 0u64];
        // SAFETY: UFFDIO_REGISTER with the uapi struct laid out in `r`.
        assert_eq!(
            unsafe { libc::ioctl(uffd.as_raw_fd(), uffd::UFFDIO_REGISTER as _, r.as_mut_ptr()) },
            0
        );
        let peek = uffd.try_clone().unwrap();
        Some((uffd, peek, base))
    }

    /// Whether this is the run of test `name` in a process of its own,
    /// which then goes on; if not, starts that run, checks that it passed,
    /// and returns false.
    ///
    /// A test whose userfaultfd reports forks runs alone: a fork anywhere
    /// in the process (another test's) waits until its event is read, and
    /// glibc's `fork` holds the allocator's locks meanwhile, which the
    /// thread that reads the events may need for an allocation.
    fn alone(name: &str) -> bool {
        const ALONE: &str = "PMIG_TEST_ALONE";
        if std::env::var_os(ALONE).is_some() {
            return true;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--test-threads=1"])
            .env(ALONE, "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "the test run alone failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        false
    }

    fn resident(addr: u64) -> bool {
        let mut v = 0u8;
        // SAFETY: mincore of one page of our own mapping into one byte.
        let r = unsafe { libc::mincore(addr as *mut _, PAGE as usize, &mut v) };
        r == 0 && v & 1 == 1
    }

    fn wchan_of(tid: i32) -> String {
        std::fs::read_to_string(format!("/proc/self/task/{tid}/wchan")).unwrap_or_default()
    }

    #[test]
    fn a_fault_read_with_a_release_is_answered_once_the_release_is_through() {
        let Some((uffd, _peek, base)) = registered_here(16) else {
            return;
        };
        // Pages 0-7 owed; 8-15 were never populated at the source.
        let lm = LazyMemory::new(uffd, &[(base, 8 * PAGE)], vec![(base, 16 * PAGE)]);
        let (tx, rx) = std::sync::mpsc::channel();
        // One thread releases pages 12-13 (held until its event is read) ...
        let tx2 = tx.clone();
        let releaser = std::thread::spawn(move || {
            // SAFETY: gettid has no arguments.
            tx2.send(("release", unsafe { libc::gettid() } as u64))
                .unwrap();
            // SAFETY: releasing pages of the mapping made above.
            unsafe {
                libc::madvise(
                    (base + 12 * PAGE) as *mut _,
                    2 * PAGE as usize,
                    libc::MADV_DONTNEED,
                )
            }
        });
        let (_, rtid) = rx.recv().unwrap();
        let t0 = std::time::Instant::now();
        while !wchan_of(rtid as i32).contains("userfault") {
            assert!(
                t0.elapsed().as_secs() < 10,
                "the release never waited for its event"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // ... and another faults on page 10, which is owed no more.
        let faulter = std::thread::spawn(move || {
            // SAFETY: gettid has no arguments.
            tx.send(("fault", unsafe { libc::gettid() } as u64))
                .unwrap();
            // SAFETY: reading a page of the mapping made above (served below).
            let v = unsafe { std::ptr::read_volatile((base + 10 * PAGE) as *const u8) };
            tx.send(("read", v as u64)).unwrap();
        });
        let (_, ftid) = rx.recv().unwrap();
        while !wchan_of(ftid as i32).contains("handle_userfault") {
            assert!(
                t0.elapsed().as_secs() < 10,
                "the fault never reached the userfaultfd"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // Both events are read together; the zero page for the fault is
        // refused until the release has gone through.
        let h = lm.handle_events().unwrap();
        assert!(
            h.ask.is_empty(),
            "asked for a page that is not owed: {:?}",
            h.ask
        );
        let got = rx.recv_timeout(std::time::Duration::from_secs(10));
        assert_eq!(
            got.ok(),
            Some(("read", 0)),
            "the faulting thread was not answered"
        );
        faulter.join().unwrap();
        assert_eq!(releaser.join().unwrap(), 0);
        assert_eq!(lm.owed_pages(), 8);
        drop((lm, _peek));
        // SAFETY: unmapping the test's mapping.
        unsafe { libc::munmap(base as *mut _, (16 * PAGE) as usize) };
    }

    /// A process that moves memory with owed pages (a `realloc` that
    /// glibc does with `mremap`): the move is reported, the moved mapping
    /// stays registered, and a fault at the new address asks for the page
    /// of the old one. (pmig asked for the fork event instead of the remap
    /// event: the kernel then dropped the moved mapping's registration, and
    /// the owed pages read as zeros there.)
    #[test]
    fn memory_moved_with_owed_pages_keeps_them_owed_at_its_new_address() {
        let Some((uffd, _peek, base)) = registered_here(8) else {
            return;
        };
        let lm = LazyMemory::new(uffd, &[(base, 8 * PAGE)], vec![(base, 8 * PAGE)]);
        // A place to move to, made free again just before the move.
        let to = crate::resources::memory::anon_map((16 * PAGE) as usize) as u64;
        let (tx, rx) = std::sync::mpsc::channel();
        let mover = std::thread::spawn(move || {
            // SAFETY: moving the test's own mapping onto the test's own
            // reservation (MREMAP_FIXED replaces it).
            let got = unsafe {
                libc::mremap(
                    base as *mut _,
                    (8 * PAGE) as usize,
                    (16 * PAGE) as usize,
                    libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                    to as *mut libc::c_void,
                )
            };
            tx.send(("moved", got as u64)).unwrap();
            // SAFETY: reading page 3 of the moved mapping (served below).
            let v = unsafe { std::ptr::read_volatile((to + 3 * PAGE + 5) as *const u8) };
            tx.send(("read", v as u64)).unwrap();
        });
        // The move waits until its event is read; then the read faults.
        let t0 = std::time::Instant::now();
        let mut said = Vec::new();
        let mut asked = Vec::new();
        while asked.is_empty() {
            assert!(
                t0.elapsed().as_secs() < 10,
                "no fault came from the moved memory (the thread said {said:?})"
            );
            if lm.wait(10) {
                asked.extend(lm.handle_events().unwrap().ask);
            }
            said.extend(rx.try_iter());
        }
        assert_eq!(
            asked,
            vec![base + 3 * PAGE],
            "the fault asked for another page"
        );
        let mut page = vec![0u8; PAGE as usize];
        page[5] = 0x5a;
        assert_eq!(lm.install(base + 3 * PAGE, &page).unwrap(), 1);
        while said.len() < 2 {
            said.push(
                rx.recv_timeout(std::time::Duration::from_secs(10))
                    .expect("the moving thread was not answered"),
            );
        }
        assert_eq!(said, vec![("moved", to), ("read", 0x5a)]);
        mover.join().unwrap();
        assert_eq!(lm.owed_pages(), 7);
        drop((lm, _peek));
        // SAFETY: unmapping the test's mapping.
        unsafe { libc::munmap(to as *mut _, (16 * PAGE) as usize) };
    }

    /// A process that forks while pages are owed: the child's copy of the
    /// owed memory stays registered (with a userfaultfd of its own, read
    /// from the fork event), a fault of the child asks the source for the
    /// page, and the page arrives in both processes.
    ///
    /// The fork runs in a test process of its own: a fork waits until every
    /// userfaultfd with registered memory in the process has read its event,
    /// and the other tests' userfaultfds are not read for that.
    #[test]
    fn a_child_forked_while_pages_are_owed_gets_them_too() {
        if !alone("lazy::tests::a_child_forked_while_pages_are_owed_gets_them_too") {
            return;
        }
        let Some((uffd, _peek, base)) = registered_here(8) else {
            return;
        };
        let lm = LazyMemory::new(uffd, &[(base, 8 * PAGE)], vec![(base, 8 * PAGE)]);
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 fills the two descriptors.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        let (rd, wr) = (fds[0], fds[1]);
        // The fork waits in the kernel until its event is read.
        let forker = std::thread::spawn(move || {
            // SAFETY: the child only reads memory, writes to a pipe and
            // exits, all async-signal-safe.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                // SAFETY: reading page 2 of the mapping (served by the test).
                let v = unsafe { std::ptr::read_volatile((base + 2 * PAGE + 7) as *const u8) };
                // SAFETY: writing one byte to the pipe, then leaving.
                unsafe {
                    libc::write(wr, (&v as *const u8).cast(), 1);
                    libc::_exit(0);
                }
            }
            pid
        });
        let t0 = std::time::Instant::now();
        let mut asked = Vec::new();
        while asked.is_empty() {
            assert!(
                t0.elapsed().as_secs() < 10,
                "no fault of the child reached the lazy memory"
            );
            if lm.wait(10) {
                asked.extend(lm.handle_events().unwrap().ask);
            }
        }
        assert_eq!(
            asked,
            vec![base + 2 * PAGE],
            "the child's fault asked for another page"
        );
        let mut page = vec![0u8; PAGE as usize];
        page[7] = 0x77;
        assert_eq!(lm.install(base + 2 * PAGE, &page).unwrap(), 1);
        let mut p = libc::pollfd {
            fd: rd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: polling the pipe for up to 10 s.
        assert_eq!(
            unsafe { libc::poll(&mut p, 1, 10_000) },
            1,
            "the child was not answered"
        );
        let mut got = 0u8;
        // SAFETY: reading one byte from the pipe.
        assert_eq!(
            unsafe { libc::read(rd, (&mut got as *mut u8).cast(), 1) },
            1
        );
        assert_eq!(got, 0x77, "the child read another byte than the page's");
        let pid = forker.join().unwrap();
        let mut status = 0;
        // SAFETY: reaping the test's child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        // The page is the parent's too, without a fault.
        // SAFETY: reading page 2 of the mapping, installed above.
        assert_eq!(
            unsafe { std::ptr::read_volatile((base + 2 * PAGE + 7) as *const u8) },
            0x77
        );
        assert_eq!(lm.owed_pages(), 7);
        drop((lm, _peek));
        // SAFETY: closing the pipe and unmapping the test's mapping.
        unsafe {
            libc::close(rd);
            libc::close(wr);
            libc::munmap(base as *mut _, (8 * PAGE) as usize);
        }
    }

    #[test]
    fn an_install_while_memory_is_released_waits_for_the_release_instead_of_skipping_the_page() {
        let Some((uffd, peek, base)) = registered_here(16) else {
            return;
        };
        let lm = LazyMemory::new(uffd, &[(base, 16 * PAGE)], vec![(base, 16 * PAGE)]);
        // Another thread releases pages 8-11: its madvise waits until the
        // REMOVE event is read, and until then the kernel refuses to fill
        // any page of this userfaultfd (EAGAIN).
        let releaser = std::thread::spawn(move || {
            // SAFETY: releasing pages of the mapping made above.
            unsafe {
                libc::madvise(
                    (base + 8 * PAGE) as *mut _,
                    4 * PAGE as usize,
                    libc::MADV_DONTNEED,
                )
            }
        });
        let mut p = libc::pollfd {
            fd: peek.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: polling one descriptor we own, for at most 10 s.
        assert_eq!(
            unsafe { libc::poll(&mut p, 1, 10_000) },
            1,
            "no REMOVE event"
        );
        let data = vec![0x5au8; PAGE as usize];
        assert_eq!(lm.install(base, &data).unwrap(), 1);
        assert!(
            resident(base),
            "the page was counted as installed but is not there"
        );
        // SAFETY: the page is present (checked above).
        assert_eq!(unsafe { *(base as *const u8) }, 0x5a);
        assert_eq!(releaser.join().unwrap(), 0);
        // The released pages are owed no more; the others still are.
        assert_eq!(lm.owed_pages(), 16 - 1 - 4);
        // Closed first: with the descriptor open, munmap would wait for its
        // UNMAP event to be read.
        drop((lm, peek));
        // SAFETY: unmapping the test's mapping.
        unsafe { libc::munmap(base as *mut _, (16 * PAGE) as usize) };
    }

    /// A held mutex across the edge of two pages installed apart, in
    /// either order, its owner's id on either side: the second install
    /// rewrites it, in the page installed first if the id lies there. Where
    /// its kind and owner lie in the page installed first, that install
    /// rewrites them (glibc would not touch the other page), and the lock
    /// word of a priority-inheritance mutex on the other side waits for it.
    #[test]
    fn a_held_mutex_across_two_pages_installed_apart_gets_its_owners_new_id() {
        use std::os::unix::fs::FileExt;
        // (bytes before the edge where it starts, kind, lock word, the
        // pages installed in order: 0 is the page before the edge).
        let cases: [(usize, u32, u32, &[usize]); 10] = [
            (16, 2, 1, &[0, 1]),
            (16, 2, 1, &[1, 0]),
            (8, 1, 1, &[0, 1]),
            (8, 1, 1, &[1, 0]),
            (8, 1, 1, &[1]),
            (32, 1, 1, &[0]),
            (8, 32, 4242, &[1, 0]),
            (24, 32, 4242, &[0, 1]),
            // The mutex's trailing zeros on page 1, which is all zeros and
            // goes as the zero page.
            (24, 1, 1, &[1, 0]),
            (24, 2, 1, &[0, 1]),
        ];
        for (start, kind, lock, order) in cases {
            let Some((uffd, peek, base)) = registered_here(4) else {
                return;
            };
            let lm = LazyMemory::new(uffd, &[(base, 4 * PAGE)], vec![(base, 4 * PAGE)]);
            lm.rewrite_owners(std::process::id() as i32, vec![(4242, 77)]);
            // Pages 1 and 2: the mutex (owner 4242, 1 user; held once,
            // which an error-checking one does not count).
            let mut pages = vec![0u8; 2 * PAGE as usize];
            let at = PAGE as usize - start;
            let count = u32::from(kind != 2);
            for (i, w) in [lock, count, 4242, 1, kind].iter().enumerate() {
                pages[at + 4 * i..at + 4 * i + 4].copy_from_slice(&w.to_le_bytes());
            }
            pages[100] = 0xab;
            if start < 24 {
                pages[PAGE as usize + 100] = 0xcd;
            }
            for &k in order {
                let data = &pages[k * PAGE as usize..(k + 1) * PAGE as usize];
                let at = base + (1 + k as u64) * PAGE;
                let n = if data.iter().all(|&b| b == 0) {
                    lm.install_zeros(at, data)
                } else {
                    lm.install(at, data)
                };
                assert_eq!(n.unwrap(), 1);
            }
            let mut want = pages.clone();
            want[at + 8..at + 12].copy_from_slice(&77i32.to_le_bytes());
            if kind == 32 {
                want[at..at + 4].copy_from_slice(&77u32.to_le_bytes());
            }
            let mem = std::fs::File::open("/proc/self/mem").unwrap();
            for &k in order {
                let mut got = vec![0u8; PAGE as usize];
                mem.read_exact_at(&mut got, base + (1 + k as u64) * PAGE)
                    .unwrap();
                let page = k * PAGE as usize..(k + 1) * PAGE as usize;
                assert!(
                    got == want[page],
                    "kind {kind} {start} bytes before the edge, pages {order:?}: page {k} differs"
                );
            }
            // Closed first: with the descriptor open, munmap would wait for
            // its UNMAP event to be read.
            drop((lm, peek));
            // SAFETY: unmapping the test's mapping.
            unsafe { libc::munmap(base as *mut _, (4 * PAGE) as usize) };
        }
    }

    #[test]
    fn an_install_across_two_mappings_fills_both() {
        let Some((uffd, peek, base)) = registered_here(16) else {
            return;
        };
        // Pages 8-15 made executable: two mappings, both registered (a
        // JIT's code heap next to other anonymous memory). One UFFDIO_COPY
        // over both is refused with ENOENT.
        // SAFETY: changing the protection of the test's own mapping.
        let r = unsafe {
            libc::mprotect(
                (base + 8 * PAGE) as *mut _,
                (8 * PAGE) as usize,
                libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
            )
        };
        assert_eq!(r, 0);
        let lm = LazyMemory::new(uffd, &[(base, 16 * PAGE)], vec![(base, 16 * PAGE)]);
        let data: Vec<u8> = (0..16 * PAGE).map(|i| (i / PAGE) as u8 + 1).collect();
        assert_eq!(lm.install(base, &data).unwrap(), 16);
        assert_eq!(lm.owed_pages(), 0);
        for k in 0..16 {
            let a = base + k * PAGE;
            assert!(
                resident(a),
                "page {k} was counted as installed but is not there"
            );
            // SAFETY: the page is present (checked above).
            assert_eq!(unsafe { *(a as *const u8) }, k as u8 + 1, "page {k}");
        }
        drop((lm, peek));
        // SAFETY: unmapping the test's mapping.
        unsafe { libc::munmap(base as *mut _, (16 * PAGE) as usize) };
    }

    #[test]
    fn a_bulk_install_fills_every_owed_page_across_its_pieces() {
        // Not a multiple of the piece, with two pages installed before
        // (answered first): those keep what they got.
        let n = 2 * BULK_PIECE as u64 + 5;
        let Some((uffd, peek, base)) = registered_here(n) else {
            return;
        };
        let lm = LazyMemory::new(uffd, &[(base, n * PAGE)], vec![(base, n * PAGE)]);
        let answered = [3, BULK_PIECE as u64 + 1];
        for k in answered {
            assert_eq!(
                lm.install(base + k * PAGE, &[0xaa; PAGE as usize]).unwrap(),
                1
            );
        }
        let data: Vec<u8> = (0..n * PAGE).map(|i| (i / PAGE) as u8 + 1).collect();
        assert_eq!(lm.install_bulk(base, &data).unwrap(), n - 2);
        assert_eq!(lm.owed_pages(), 0);
        for k in 0..n {
            let a = base + k * PAGE;
            assert!(resident(a), "page {k} is not there");
            let want = if answered.contains(&k) {
                0xaa
            } else {
                k as u8 + 1
            };
            // SAFETY: the page is present (checked above).
            assert_eq!(unsafe { *(a as *const u8) }, want, "page {k}");
        }
        drop((lm, peek));
        // SAFETY: unmapping the test's mapping.
        unsafe { libc::munmap(base as *mut _, (n * PAGE) as usize) };
    }

    /// Two threads install the same pages side by side (one forwards, one
    /// backwards, so each also meets pages the other is copying), while a
    /// third releases a range of them and a fourth reads the events. Once
    /// the release has returned, its pages must read as zeros: an install
    /// that looked a page up before the release and copied it after would
    /// leave old data there. Every other page holds its data, each counted
    /// once.
    #[test]
    fn installs_side_by_side_never_land_in_memory_released_meanwhile() {
        if !alone("lazy::tests::installs_side_by_side_never_land_in_memory_released_meanwhile") {
            return;
        }
        let n = 512u64;
        let released = 200..264u64;
        // Each copy apart from the lock starts a moment after its look-up.
        APART_PAUSE_US.store(100, std::sync::atomic::Ordering::Relaxed);
        for round in 0..20 {
            let Some((uffd, peek, base)) = registered_here(n) else {
                return;
            };
            let lm = LazyMemory::new(uffd, &[(base, n * PAGE)], vec![(base, n * PAGE)]);
            let data: Vec<u8> = (0..n * PAGE).map(|i| (i / PAGE % 250) as u8 + 1).collect();
            let stop = std::sync::atomic::AtomicBool::new(false);
            let piece = 4 * BULK_PIECE;
            std::thread::scope(|s| {
                let (lm, data, stop) = (&lm, &data, &stop);
                s.spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Acquire) {
                        if lm.wait(2) {
                            lm.handle_events().unwrap();
                        }
                    }
                });
                let forwards = s.spawn(move || {
                    for (k, d) in data.chunks(piece * PAGE as usize).enumerate() {
                        lm.install_bulk(base + (k * piece) as u64 * PAGE, d)
                            .unwrap();
                    }
                });
                let backwards = s.spawn(move || {
                    let pieces: Vec<_> = data.chunks(piece * PAGE as usize).enumerate().collect();
                    for (k, d) in pieces.into_iter().rev() {
                        lm.install_bulk(base + (k * piece) as u64 * PAGE, d)
                            .unwrap();
                    }
                });
                // Released at a different moment of the installs each round.
                std::thread::sleep(std::time::Duration::from_micros(300 * round));
                // SAFETY: releasing pages of the mapping made above.
                let r = unsafe {
                    libc::madvise(
                        (base + released.start * PAGE) as *mut _,
                        ((released.end - released.start) * PAGE) as usize,
                        libc::MADV_DONTNEED,
                    )
                };
                assert_eq!(r, 0);
                forwards.join().unwrap();
                backwards.join().unwrap();
                stop.store(true, std::sync::atomic::Ordering::Release);
            });
            assert_eq!(lm.owed_pages(), 0, "round {round}");
            let st = lm.stats();
            assert!(
                st.installed_pages <= n && st.installed_pages + st.dropped_pages == n,
                "round {round}: {} installed, {} dropped of {n}",
                st.installed_pages,
                st.dropped_pages
            );
            for k in 0..n {
                let a = base + k * PAGE;
                if released.contains(&k) {
                    assert!(
                        !resident(a),
                        "round {round}: page {k}, released, was filled after its release"
                    );
                } else {
                    assert!(resident(a), "round {round}: page {k} is not there");
                    // SAFETY: the page is present (checked above).
                    let got = unsafe { *(a as *const u8) };
                    assert_eq!(got, (k % 250) as u8 + 1, "round {round}: page {k}");
                }
            }
            drop((lm, peek));
            // SAFETY: unmapping the test's mapping.
            unsafe { libc::munmap(base as *mut _, (n * PAGE) as usize) };
        }
    }

    /// The page frame mapped at `addr` of this process, if pagemap shows
    /// it (it does to root).
    fn frame(addr: u64) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::open("/proc/self/pagemap").ok()?;
        let mut e = [0u8; 8];
        f.read_exact_at(&mut e, addr / PAGE * 8).ok()?;
        let e = u64::from_le_bytes(e);
        let pfn = e & ((1 << 55) - 1);
        (e >> 63 == 1 && pfn != 0).then_some(pfn)
    }

    #[test]
    fn pages_of_zeros_get_the_zero_page_and_are_written_as_any_other() {
        let n = 12;
        let Some((uffd, peek, base)) = registered_here(n) else {
            return;
        };
        let lm = LazyMemory::new(uffd, &[(base, n * PAGE)], vec![(base, n * PAGE)]);
        // Page 3 was answered first: it keeps what it got.
        assert_eq!(
            lm.install(base + 3 * PAGE, &[0xaa; PAGE as usize]).unwrap(),
            1
        );
        let zeros = vec![0u8; (n * PAGE) as usize];
        assert_eq!(lm.install_zeros(base, &zeros).unwrap(), n - 1);
        assert_eq!(lm.owed_pages(), 0);
        assert_eq!(lm.stats().installed_pages, n);
        for k in 0..n {
            let a = base + k * PAGE;
            assert!(resident(a), "page {k} is not there");
            let want = if k == 3 { 0xaa } else { 0 };
            // SAFETY: the page is present (checked above).
            let got = unsafe { std::slice::from_raw_parts(a as *const u8, PAGE as usize) };
            assert!(got.iter().all(|&b| b == want), "page {k}");
        }
        // One frame, the kernel's zero page, behind every page of zeros
        // (where pagemap shows frames), and not behind page 3.
        if let (Some(z), Some(z1), Some(d)) = (
            frame(base),
            frame(base + (n - 1) * PAGE),
            frame(base + 3 * PAGE),
        ) {
            assert_eq!(z, z1, "two pages of zeros on different frames");
            assert_ne!(z, d);
        }
        // The process writes there as anywhere: its own page, the others
        // still zeros.
        // SAFETY: writing into the test's mapping, whose pages are there.
        unsafe { *((base + 5 * PAGE + 7) as *mut u8) = 0x5b };
        // SAFETY: reading the test's mapping.
        let (five, six) = unsafe {
            (
                *((base + 5 * PAGE + 7) as *const u8),
                *((base + 6 * PAGE + 7) as *const u8),
            )
        };
        assert_eq!((five, six), (0x5b, 0));
        if let (Some(z), Some(w)) = (frame(base), frame(base + 5 * PAGE)) {
            assert_ne!(z, w, "the page written is still the zero page");
        }
        drop((lm, peek));
        // SAFETY: unmapping the test's mapping.
        unsafe { libc::munmap(base as *mut _, (n * PAGE) as usize) };
    }

    #[test]
    fn recover_replays_installs_drops_and_moves() {
        // Eight owed pages at 0x10000.
        let owed = [(0x10000, 8 * PAGE)];
        let mut j = Vec::new();
        // Pages 0 and 1 installed; pages 2-3 moved to 0x80000; the first
        // moved page released there; page 7 unmapped.
        j.extend(rec(Journal::INSTALLED, 0x10000, 2, 0));
        j.extend(rec(Journal::REMAPPED, 0x12000, 2 * PAGE, 0x80000));
        j.extend(rec(Journal::DROPPED, 0x80000, 0x81000, 0));
        j.extend(rec(Journal::DROPPED, 0x17000, 0x18000, 0));
        // A torn last record is ignored.
        j.extend(&rec(Journal::INSTALLED, 0x14000, 1, 0)[..10]);
        let (lm, torn) = LazyMemory::recover(any_fd(), &owed, vec![(0x10000, 8 * PAGE)], &j);
        assert!(torn);
        assert_eq!(lm.owed_list(), vec![0x13000, 0x14000, 0x15000, 0x16000]);
        let st = lm.state.lock();
        // Source page 0x13000 now lives at 0x81000.
        assert_eq!(st.owed.dst_of(0x13000), Some(0x81000));
        assert_eq!(st.owed.src_at(0x81000), Some(0x13000));
        assert_eq!(st.owed.src_at(0x13000), None);
        assert_eq!(st.remapped, vec![(0x80000, 2 * PAGE)]);
    }

    #[test]
    fn not_owed_keeps_pages_asked_for_and_is_replayed() {
        // 130 owed pages at 0x100000 (three bitmap words), and one that
        // moved (mremap) from 0x200000 to 0x900000.
        let owed = [(0x100000, 130 * PAGE), (0x200000, PAGE)];
        let lm = LazyMemory::new(any_fd(), &owed, vec![]);
        {
            let mut st = lm.state.lock();
            st.remapped(0x200000, 0x900000, PAGE);
            // Page 5 was asked for (a fault): its answer is on the way.
            st.requested.insert(0x100000 + 5 * PAGE);
        }
        // The source never had pages 0..=69 and the moved page.
        lm.not_owed(&[(0x100000, 70 * PAGE), (0x200000, PAGE)]);
        let mut want: Vec<u64> = (70..130).map(|i| 0x100000 + i * PAGE).collect();
        want.insert(0, 0x100000 + 5 * PAGE);
        assert_eq!(lm.owed_list(), want);
        assert_eq!(lm.stats().not_owed_pages, 70);
        // A range past every owed page changes nothing.
        lm.not_owed(&[(0x400000, 64 * PAGE)]);
        assert_eq!(lm.owed_pages(), 61);
        // A restarted daemon replays it from the journal.
        let j = [
            rec(Journal::REMAPPED, 0x200000, PAGE, 0x900000),
            rec(Journal::NOT_OWED, 0x100000, 70 * PAGE, 0),
            rec(Journal::NOT_OWED, 0x200000, PAGE, 0),
        ]
        .concat();
        let (lm2, torn) = LazyMemory::recover(any_fd(), &owed, vec![], &j);
        assert!(!torn);
        assert_eq!(
            lm2.owed_list(),
            (70..130).map(|i| 0x100000 + i * PAGE).collect::<Vec<_>>()
        );
    }

    #[test]
    fn new_owes_each_page_of_the_ranges_once() {
        // Out of order and overlapping.
        let owed = [
            (0x20000, 2 * PAGE),
            (0x10000, 3 * PAGE),
            (0x11000, 2 * PAGE),
        ];
        let lm = LazyMemory::new(any_fd(), &owed, Vec::new());
        let want = vec![0x10000, 0x11000, 0x12000, 0x20000, 0x21000];
        assert_eq!(lm.owed_list(), want);
        assert_eq!(lm.owed_pages(), 5);
        let st = lm.state.lock();
        assert!(want.iter().all(|&p| st.owed.dst_of(p) == Some(p)));
        assert!(want.iter().all(|&p| st.owed.src_at(p) == Some(p)));
        assert_eq!(st.owed.dst_of(0x13000), None);
        assert_eq!(st.owed.dst_of(0x1f000), None);
        assert_eq!(st.owed.dst_of(0x22000), None);
    }

    #[test]
    fn journal_records_what_recover_reads() {
        let dir = std::env::temp_dir().join(format!("pmig-journal-{}", std::process::id()));
        let lm = LazyMemory::new(any_fd(), &[(0x10000, 4 * PAGE)], Vec::new());
        lm.set_journal(std::fs::File::create(&dir).unwrap());
        {
            let mut st = lm.state.lock();
            st.log(Journal::DROPPED, 0x11000, 0x12000, 0);
            st.dropped(0x11000, 0x12000);
        }
        let bytes = std::fs::read(&dir).unwrap();
        let _ = std::fs::remove_file(&dir);
        assert_eq!(bytes.len(), Journal::RECORD);
        let (back, torn) =
            LazyMemory::recover(any_fd(), &[(0x10000, 4 * PAGE)], Vec::new(), &bytes);
        assert!(!torn);
        assert_eq!(back.owed_list(), lm.owed_list());
        assert_eq!(back.owed_list(), vec![0x10000, 0x12000, 0x13000]);
    }

    /// The old representation, one map entry per page, as the reference.
    #[derive(Default)]
    struct Model {
        owed: HashMap<u64, u64>,
        at: BTreeMap<u64, u64>,
    }

    impl Model {
        fn install(&mut self, s: u64) {
            if let Some(d) = self.owed.remove(&s) {
                self.at.remove(&d);
            }
        }
        fn drop_range(&mut self, a: u64, b: u64) -> usize {
            let gone: Vec<(u64, u64)> = self.at.range(a..b).map(|(d, s)| (*d, *s)).collect();
            for (d, s) in &gone {
                self.at.remove(d);
                self.owed.remove(s);
            }
            gone.len()
        }
        fn remap(&mut self, from: u64, to: u64, len: u64) {
            self.drop_range(to, to + len);
            let moved: Vec<(u64, u64)> = self
                .at
                .range(from..from + len)
                .map(|(d, s)| (*d, *s))
                .collect();
            for (d, _) in &moved {
                self.at.remove(d);
            }
            for (d, s) in moved {
                self.at.insert(to + (d - from), s);
                self.owed.insert(s, to + (d - from));
            }
        }
    }

    #[test]
    fn owed_pages_match_a_page_by_page_model_through_random_changes() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let base = 0x100_0000u64;
        for round in 0..20 {
            // A few ranges, some overlapping, some not a multiple of 64 pages.
            let ranges: Vec<(u64, u64)> = (0..1 + next(4))
                .map(|_| (base + next(300) * PAGE, (1 + next(200)) * PAGE))
                .collect();
            let mut st = State {
                owed: Owed::new(&ranges),
                ..State::default()
            };
            let mut m = Model::default();
            for &(a, l) in &ranges {
                for p in (a..a + l).step_by(PAGE as usize) {
                    m.owed.insert(p, p);
                    m.at.insert(p, p);
                }
            }
            assert_eq!(st.owed.len(), m.owed.len(), "round {round}");
            for _ in 0..200 {
                let p = base + next(700) * PAGE;
                match next(4) {
                    0 => {
                        let n = 1 + next(8);
                        st.installed(p, n);
                        for k in 0..n {
                            m.install(p + k * PAGE);
                        }
                    }
                    1 => {
                        let e = p + (1 + next(40)) * PAGE;
                        let before = st.stats.dropped_pages;
                        st.dropped(p, e);
                        let n = m.drop_range(p, e);
                        assert_eq!(st.stats.dropped_pages - before, n as u64);
                    }
                    2 => {
                        let len = (1 + next(30)) * PAGE;
                        let to = base + (800 + next(400)) * PAGE;
                        st.remapped(p, to, len);
                        m.remap(p, to, len);
                    }
                    _ => {
                        let n = 1 + next(8);
                        // Faults look up destinations.
                        for k in 0..n {
                            let d = p + k * PAGE;
                            assert_eq!(st.owed.src_at(d), m.at.get(&d).copied());
                        }
                    }
                }
                assert_eq!(st.owed.len(), m.owed.len(), "round {round}");
            }
            let mut want: Vec<u64> = m.owed.keys().copied().collect();
            want.sort_unstable();
            assert_eq!(st.owed.sorted(), want, "round {round}");
            for (&s, &d) in &m.owed {
                assert_eq!(st.owed.dst_of(s), Some(d));
                assert_eq!(st.owed.src_at(d), Some(s));
            }
        }
    }

    #[test]
    fn a_gib_is_owed_with_a_few_words_per_range() {
        let o = Owed::new(&[(0x7f00_0000_0000, 1 << 30), (0x5000, 3 * PAGE)]);
        assert_eq!(o.len(), (1 << 18) + 3);
        assert_eq!(o.in_place.len(), 2);
        assert_eq!(o.in_place[1].bits.len(), (1 << 18) / 64);
        assert_eq!(o.in_place[0].bits, vec![0b111]);
        assert_eq!(o.sorted().len(), o.len());
    }
}
