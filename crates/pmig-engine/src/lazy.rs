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
}

#[derive(Default)]
struct State {
    /// source page -> destination page, for every page still owed.
    owed: HashMap<u64, u64>,
    /// destination page -> source page.
    at: BTreeMap<u64, u64>,
    /// source pages asked for and not yet installed.
    requested: HashSet<u64>,
    stats: LazyStats,
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
        let mut st = State::default();
        for &(a, l) in owed {
            for p in (a..a + l).step_by(PAGE as usize) {
                st.owed.insert(p, p);
                st.at.insert(p, p);
            }
        }
        LazyMemory {
            uffd,
            registered,
            state: Mutex::new(st),
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
            for k in i..j {
                let s = src + k * PAGE;
                st.owed.remove(&s);
                st.at.remove(&(dst + (k - i) * PAGE));
                st.requested.remove(&s);
            }
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

    /// Handle every pending event. Returns the source pages to ask the source
    /// for (each page once; the faulting thread waits until it is installed),
    /// with the fault that caused each request first.
    pub fn handle_events(&self) -> Result<Vec<u64>> {
        let mut evs = Vec::new();
        uffd::read_events(&self.uffd, &mut evs)?;
        let mut st = self.state.lock().unwrap();
        let mut ask = Vec::new();
        for e in evs {
            match e {
                Event::Fault { addr, .. } => {
                    let page = addr & !(PAGE - 1);
                    match st.at.get(&page).copied() {
                        Some(src) => {
                            st.stats.remote_faults += 1;
                            if st.requested.insert(src) {
                                ask.push(src);
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
                    let gone: Vec<(u64, u64)> =
                        st.at.range(start..end).map(|(d, s)| (*d, *s)).collect();
                    for (d, s) in gone {
                        st.at.remove(&d);
                        st.owed.remove(&s);
                        st.requested.remove(&s);
                        st.stats.dropped_pages += 1;
                    }
                }
                Event::Remap { from, to, len } => {
                    let moved: Vec<(u64, u64)> = st
                        .at
                        .range(from..from + len)
                        .map(|(d, s)| (*d, *s))
                        .collect();
                    for (d, _) in &moved {
                        st.at.remove(d);
                    }
                    for (d, s) in moved {
                        let nd = to + (d - from);
                        st.at.insert(nd, s);
                        st.owed.insert(s, nd);
                    }
                }
                Event::Other(_) => {}
            }
        }
        Ok(ask)
    }

    /// Nothing is owed any more: stop intercepting faults.
    pub fn finish(self) {
        for (s, l) in &self.registered {
            let _ = uffd::unregister(&self.uffd, *s, *l);
        }
    }
}

/// Pages the restorer and the kernel touch before the process runs (each
/// thread's rseq area, written when rseq is registered) and the page each
/// thread's stack pointer is on: a post-copy handover sends these along.
pub fn handover_pages(frozen: &crate::ptrace::Frozen) -> Result<HashSet<u64>> {
    let mut keep = HashSet::new();
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
