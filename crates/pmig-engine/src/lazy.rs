//! Post-copy at the destination: the restored process runs while some of
//! its private anonymous pages still live at the source. Its userfaultfd
//! reports each fault on a missing page; [`LazyMemory`] says which source
//! pages to ask for, installs pages as they arrive (pushed in the background
//! or asked for), and maps zero pages where the source had none.
//!
//! Addresses: pages are owed by their *source* address. If the process moves
//! memory (mremap) while pages are owed, the destination address changes and
//! the source address does not; the map below keeps both.

use crate::error::Result;
use crate::uffd::{self, Event};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Mutex;

const PAGE: u64 = 4096;

#[derive(Debug, Default, Clone, Copy)]
pub struct LazyStats {
    /// Faults on pages still owed by the source (remote faults).
    pub remote_faults: u64,
    /// Faults on pages the source never had (served with the zero page).
    pub zero_faults: u64,
    pub installed_pages: u64,
    /// Owed pages dropped because the process released or unmapped them.
    pub dropped_pages: u64,
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
}

#[derive(Default)]
struct State {
    /// source page -> destination page, for every page still owed.
    owed: HashMap<u64, u64>,
    /// destination page -> source page.
    at: BTreeMap<u64, u64>,
    /// source pages asked for and not yet installed.
    requested: HashSet<u64>,
    /// prefetched pages not yet installed, and whether a fault hit them first.
    prefetched: HashMap<u64, bool>,
    /// when each fault request was made (for the latency estimate).
    asked_at: HashMap<u64, std::time::Instant>,
    /// when the first fault on each owed page was read (for the wait stats).
    faulted_at: HashMap<u64, std::time::Instant>,
    /// smoothed request-to-install latency, seconds.
    latency: Option<f64>,
    first_install: Option<std::time::Instant>,
    installed_bytes: u64,
    stats: LazyStats,
    /// Where every change of `owed`/`at` is appended (see [`Journal`]).
    journal: Option<std::fs::File>,
    /// Destination ranges memory was moved to (mremap) while pages were owed.
    remapped: Vec<(u64, u64)>,
}

/// The journal of a [`LazyMemory`]: what a restarted daemon needs to rebuild
/// which pages are still owed and where they live now. One record per
/// change, appended with one `write` right after the change happens (page
/// cache: it survives the daemon, not the node):
/// `tag: u8, a: u64, b: u64, c: u64` (little endian), with tag
/// 1 = pages installed (`a` source page, `b` count), 2 = destination range
/// `[a, b)` released or unmapped, 3 = `b` bytes moved from `a` to `c` (mremap).
pub struct Journal;

impl Journal {
    pub const RECORD: usize = 25;
    const INSTALLED: u8 = 1;
    const DROPPED: u8 = 2;
    const REMAPPED: u8 = 3;
}

impl State {
    fn log(&mut self, tag: u8, a: u64, b: u64, c: u64) {
        if let Some(j) = &mut self.journal {
            let mut r = [0u8; Journal::RECORD];
            r[0] = tag;
            r[1..9].copy_from_slice(&a.to_le_bytes());
            r[9..17].copy_from_slice(&b.to_le_bytes());
            r[17..25].copy_from_slice(&c.to_le_bytes());
            if let Err(e) = j.write_all(&r) {
                // Without the journal a takeover would go wrong: stop
                // writing it so that the record is known to be incomplete.
                tracing::error!("post-copy journal write failed ({e}); a restarted daemon could not take this process over");
                self.journal = None;
            }
        }
    }

    /// Source pages `src..src + n` are here (or the source copy no longer matters).
    fn installed(&mut self, src: u64, n: u64) {
        for k in 0..n {
            let s = src + k * PAGE;
            if let Some(d) = self.owed.remove(&s) {
                self.at.remove(&d);
            }
            self.requested.remove(&s);
        }
    }

    /// Destination range `[start, end)` was released or unmapped.
    fn dropped(&mut self, start: u64, end: u64) {
        let gone: Vec<(u64, u64)> = self.at.range(start..end).map(|(d, s)| (*d, *s)).collect();
        for (d, s) in gone {
            self.at.remove(&d);
            self.owed.remove(&s);
            self.requested.remove(&s);
            self.faulted_at.remove(&s);
            self.stats.dropped_pages += 1;
        }
    }

    fn remapped(&mut self, from: u64, to: u64, len: u64) {
        let moved: Vec<(u64, u64)> = self
            .at
            .range(from..from + len)
            .map(|(d, s)| (*d, *s))
            .collect();
        for (d, _) in &moved {
            self.at.remove(d);
        }
        for (d, s) in moved {
            let nd = to + (d - from);
            self.at.insert(nd, s);
            self.owed.insert(s, nd);
        }
        self.remapped.push((to, len));
    }
}

pub struct LazyMemory {
    uffd: OwnedFd,
    /// The ranges registered at restore (to unregister at the end).
    registered: Vec<(u64, u64)>,
    state: Mutex<State>,
}

impl LazyMemory {
    /// `owed`: page ranges the source still has; `registered`: the ranges
    /// the restore registered with the userfaultfd.
    pub fn new(uffd: OwnedFd, owed: &[(u64, u64)], registered: Vec<(u64, u64)>) -> LazyMemory {
        // Built in bulk: this runs after the restored process has resumed
        // and before its first fault can be served (inserting 262144 pages
        // of a 1 GiB process one by one into both maps took 30-40 ms).
        let mut pages: Vec<u64> = owed
            .iter()
            .flat_map(|&(a, l)| (a..a + l).step_by(PAGE as usize))
            .collect();
        pages.sort_unstable();
        pages.dedup();
        let mut st = State::default();
        st.owed.reserve(pages.len());
        st.owed.extend(pages.iter().map(|&p| (p, p)));
        st.at = pages.into_iter().map(|p| (p, p)).collect();
        LazyMemory {
            uffd,
            registered,
            state: Mutex::new(st),
        }
    }

    /// From now on, append every change to `journal` (see [`Journal`]).
    pub fn set_journal(&self, journal: std::fs::File) {
        self.state.lock().unwrap().journal = Some(journal);
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
            let mut st = lm.state.lock().unwrap();
            let mut recs = journal.chunks_exact(Journal::RECORD);
            for r in &mut recs {
                let f = |i: usize| u64::from_le_bytes(r[i..i + 8].try_into().unwrap());
                match r[0] {
                    Journal::INSTALLED => st.installed(f(1), f(9)),
                    Journal::DROPPED => st.dropped(f(1), f(9)),
                    Journal::REMAPPED => st.remapped(f(1), f(17), f(9)),
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
        let st = self.state.lock().unwrap();
        for &(s, l) in self.registered.iter().chain(st.remapped.iter()) {
            let _ = uffd::wake(&self.uffd, s, l);
        }
    }

    pub fn owed_pages(&self) -> usize {
        self.state.lock().unwrap().owed.len()
    }

    pub fn stats(&self) -> LazyStats {
        self.state.lock().unwrap().stats
    }

    /// Source pages still owed, in address order (for the background push).
    pub fn owed_list(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.state.lock().unwrap().owed.keys().copied().collect();
        v.sort_unstable();
        v
    }

    pub fn is_owed(&self, src_page: u64) -> bool {
        self.state.lock().unwrap().owed.contains_key(&src_page)
    }

    /// Install the source pages [src, src + data.len()) that are still owed.
    /// Returns how many pages were installed.
    pub fn install(&self, src: u64, data: &[u8]) -> Result<u64> {
        let mut st = self.state.lock().unwrap();
        let n = data.len() as u64 / PAGE;
        let mut installed = 0;
        let mut i = 0;
        while i < n {
            let Some(&dst) = st.owed.get(&(src + i * PAGE)) else {
                i += 1;
                continue;
            };
            // Extend over pages that are owed and contiguous on both sides.
            let mut j = i + 1;
            while j < n && st.owed.get(&(src + j * PAGE)) == Some(&(dst + (j - i) * PAGE)) {
                j += 1;
            }
            uffd::copy(
                &self.uffd,
                dst,
                &data[(i * PAGE) as usize..(j * PAGE) as usize],
            )?;
            st.log(Journal::INSTALLED, src + i * PAGE, j - i, 0);
            let now = std::time::Instant::now();
            st.installed(src + i * PAGE, j - i);
            for k in i..j {
                let s = src + k * PAGE;
                if let Some(faulted) = st.prefetched.remove(&s) {
                    if !faulted {
                        st.stats.prefetch_hits += 1;
                    }
                }
                if let Some(t) = st.faulted_at.remove(&s) {
                    let us = now.duration_since(t).as_micros() as u64;
                    st.stats.fault_waited(us);
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
            st.installed_bytes += (j - i) * PAGE;
            installed += j - i;
            i = j;
        }
        st.stats.installed_pages += installed;
        Ok(installed)
    }

    /// Wait up to `ms` for events; returns true if some are ready.
    pub fn wait(&self, ms: i32) -> bool {
        let mut p = libc::pollfd {
            fd: self.uffd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: polling one fd we own.
        unsafe { libc::poll(&mut p, 1, ms) > 0 }
    }

    /// Mark owed, not yet requested source pages as asked for ahead of a
    /// fault; returns those (the others are already on their way or here).
    pub fn prefetch(&self, pages: &[u64]) -> Vec<u64> {
        let mut st = self.state.lock().unwrap();
        let mut out = Vec::new();
        for &p in pages {
            if st.owed.contains_key(&p) && st.requested.insert(p) {
                st.prefetched.insert(p, false);
                out.push(p);
            }
        }
        st.stats.prefetched += out.len() as u64;
        out
    }

    /// Measured (latency of a fault request in seconds, seconds per page
    /// installed), once known.
    pub fn measured(&self) -> (Option<f64>, Option<f64>) {
        let st = self.state.lock().unwrap();
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
        let mut evs = Vec::new();
        uffd::read_events(&self.uffd, &mut evs)?;
        let mut st = self.state.lock().unwrap();
        let mut h = Handled::default();
        for e in evs {
            match e {
                Event::Fault { addr, .. } => {
                    let page = addr & !(PAGE - 1);
                    match st.at.get(&page).copied() {
                        Some(src) => {
                            st.stats.remote_faults += 1;
                            h.faults.push(src);
                            let now = std::time::Instant::now();
                            st.faulted_at.entry(src).or_insert(now);
                            if let Some(f) = st.prefetched.get_mut(&src) {
                                *f = true; // prefetched, but too late
                            }
                            if st.requested.insert(src) {
                                st.asked_at.insert(src, now);
                                h.ask.push(src);
                            }
                        }
                        None => {
                            // Never populated at the source (or released
                            // since): what the process expects there is zeros.
                            st.stats.zero_faults += 1;
                            uffd::zeropage(&self.uffd, page, PAGE)?;
                        }
                    }
                }
                Event::Remove { start, end } | Event::Unmap { start, end } => {
                    st.log(Journal::DROPPED, start, end, 0);
                    st.dropped(start, end);
                }
                Event::Remap { from, to, len } => {
                    st.log(Journal::REMAPPED, from, len, to);
                    st.remapped(from, to, len);
                }
                Event::Other(_) => {}
            }
        }
        Ok(h)
    }

    /// Nothing is owed any more: stop intercepting faults.
    pub fn finish(self) {
        for (s, l) in &self.registered {
            let _ = uffd::unregister(&self.uffd, *s, *l);
        }
    }
}

/// Most pages of the argument and environment strings sent with the state.
const MAX_ARG_ENV_PAGES: u64 = 256;

/// Pages the restorer and the kernel touch before the process runs (each
/// thread's rseq area, written when rseq is registered), the page each
/// thread's stack pointer is on, and the pages of the argument and
/// environment strings: a post-copy handover sends these along. The kernel
/// reads the last ones for other processes (`/proc/PID/cmdline` and
/// `environ`, which `ps` shows), and such a read of a page not yet arrived
/// fails instead of waiting for it: it cannot wait on a userfaultfd.
pub fn handover_pages(frozen: &crate::ptrace::Frozen) -> Result<HashSet<u64>> {
    let mut keep = HashSet::new();
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
    for (a, b) in [(45, 46), (47, 48)] {
        if let (Some(&start), Some(&end)) = (f.get(a), f.get(b)) {
            let mut p = start & !(PAGE - 1);
            while p < end && keep.len() < MAX_ARG_ENV_PAGES as usize * 2 {
                keep.insert(p);
                p += PAGE;
            }
        }
    }
    for t in &frozen.threads {
        let r = crate::sys::rseq_config(t.tid)?;
        if r.ptr != 0 {
            keep.insert(r.ptr & !(PAGE - 1));
            keep.insert((r.ptr + r.size as u64 - 1) & !(PAGE - 1));
        }
        let regs = crate::sys::get_regs(t.tid)?;
        keep.insert(regs.rsp & !(PAGE - 1));
        // The red zone and a call or two below the stack pointer.
        keep.insert((regs.rsp - 256) & !(PAGE - 1));
    }
    Ok(keep)
}

/// Close fd `fd` inside process `pid` (briefly stopping it): the
/// userfaultfd it kept while pages were owed.
pub fn close_in_process(pid: libc::pid_t, fd: i32) -> Result<()> {
    let mut f = crate::ptrace::Frozen::freeze(pid)?;
    let r = f.inject(0, libc::SYS_close, &[fd as u64]);
    f.detach()?;
    r.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let st = lm.state.lock().unwrap();
        // Source page 0x13000 now lives at 0x81000.
        assert_eq!(st.owed.get(&0x13000), Some(&0x81000));
        assert_eq!(st.at.get(&0x81000), Some(&0x13000));
        assert_eq!(st.remapped, vec![(0x80000, 2 * PAGE)]);
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
        let st = lm.state.lock().unwrap();
        assert_eq!(st.at.keys().copied().collect::<Vec<_>>(), want);
        assert!(want.iter().all(|p| st.owed.get(p) == Some(p)));
    }

    #[test]
    fn journal_records_what_recover_reads() {
        let dir = std::env::temp_dir().join(format!("pmig-journal-{}", std::process::id()));
        let lm = LazyMemory::new(any_fd(), &[(0x10000, 4 * PAGE)], Vec::new());
        lm.set_journal(std::fs::File::create(&dir).unwrap());
        {
            let mut st = lm.state.lock().unwrap();
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
}
