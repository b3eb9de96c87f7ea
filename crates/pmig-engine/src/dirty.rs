//! Dirty-page tracking of a running process from outside, without
//! soft-dirty bits: a userfaultfd created inside the process (by an injected
//! system call) registers its writable private memory in asynchronous
//! write-protect mode, and PAGEMAP_SCAN reports (and re-protects) the pages
//! written since the previous scan.
//!
//! The process is stopped only while the userfaultfd is created (a few
//! hundred microseconds). Dropping the tracker closes the only reference to
//! the userfaultfd, and the kernel then removes every registration and
//! protection: the process is left as it was.
//!
//! The userfaultfd also asks for the remap event, which a thread of the
//! tracker reads (and a scan needs nothing of: a moved mapping is a new one,
//! reported whole). Without it the kernel drops the registration of memory
//! the process moves with `mremap`, and a part of a mapping moved away and
//! back no longer merges with the rest: the process would see its mapping
//! cut in two, and an `mremap` across the cut fail (`EFAULT`).

use crate::error::{EngineError, Result};
use crate::procfs::{self, MapLine};
use crate::uffd;
use libc::pid_t;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;

pub struct DirtyTracker {
    pid: pid_t,
    scope: Scope,
    uffd: Arc<OwnedFd>,
    /// Reads the userfaultfd's events while the tracker lives (see the
    /// module's documentation); `Drop` closes the socket, which ends it at
    /// once.
    events: Option<(UnixStream, std::thread::JoinHandle<()>)>,
    pagemap: std::fs::File,
    /// Ranges registered and protected, by start.
    tracked: std::collections::BTreeMap<u64, u64>,
}

/// Which mappings a tracker covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Writable private memory, anonymous or a file's private copies
    /// (pre-copy).
    Writable,
    /// Private mappings of files only, writable or not: their private
    /// copies (a library's data) are what a post-copy handover would
    /// otherwise copy at the stop; anonymous memory moves after the resume.
    PrivateFiles,
    /// Both: writable private memory, and the private copies in read-only
    /// mappings of files (assisted-post-copy: its round 0 sends those too,
    /// so that the stop need not copy a library's relocated data).
    WritableAndPrivateFiles,
}

/// `userfaultfd` flag: only faults from user mode are handled (what an
/// unprivileged process may create when `vm.unprivileged_userfaultfd` is 0).
const UFFD_USER_MODE_ONLY: u64 = 1;

/// Memory whose writes we track: private, not special; writable for
/// [`Scope::Writable`]; for [`Scope::PrivateFiles`], mappings of a file,
/// read-only ones too (a library's relocated data, made read-only after
/// the relocations, holds private copies; a write after `mprotect` is seen
/// like any other).
fn trackable(scope: Scope, m: &MapLine) -> bool {
    let file = m.inode != 0 && m.path.starts_with('/');
    let ours = match scope {
        Scope::Writable => m.write,
        Scope::PrivateFiles => file,
        Scope::WritableAndPrivateFiles => m.write || file,
    };
    ours && !m.shared && !m.path.starts_with("[v")
}

impl DirtyTracker {
    /// Create the userfaultfd inside `pid`, register all its writable
    /// private memory and protect its populated pages (a page populated
    /// later counts as written). Every write from now on is seen by
    /// [`scan`](Self::scan).
    pub fn attach(pid: pid_t) -> Result<DirtyTracker> {
        Self::attach_scoped(pid, Scope::Writable)
    }

    /// [`attach`](Self::attach), tracking the mappings of `scope`.
    pub fn attach_scoped(pid: pid_t, scope: Scope) -> Result<DirtyTracker> {
        let uffd = crate::ptrace::with_frozen(pid, |f| {
            let flags = (libc::O_CLOEXEC | libc::O_NONBLOCK) as u64;
            let mut fd = f.inject(0, libc::SYS_userfaultfd, &[flags])?;
            if fd == -(libc::EPERM as i64) {
                // An unprivileged process, where vm.unprivileged_userfaultfd
                // is 0, may only handle faults from user mode. Asynchronous
                // write-protect handles none at all (the kernel clears the
                // protection of any write, from the kernel too, and the page
                // shows as written), so that is all tracking needs.
                fd = f.inject(0, libc::SYS_userfaultfd, &[flags | UFFD_USER_MODE_ONLY])?;
            }
            if fd < 0 {
                return Err(EngineError::Sys {
                    what: format!("create a userfaultfd inside process {pid}"),
                    source: std::io::Error::from_raw_os_error(-fd as i32),
                });
            }
            let taken = take_fd(pid, fd as i32);
            // Close the process's own copy whatever happened: it must not
            // keep a descriptor it never opened.
            let _ = f.inject(0, libc::SYS_close, &[fd as u64]);
            taken
        })?;
        let got = uffd::api(
            &uffd,
            uffd::UFFD_FEATURE_WP_ASYNC | uffd::UFFD_FEATURE_EVENT_REMAP,
        )?;
        if got & uffd::UFFD_FEATURE_WP_ASYNC == 0 {
            return Err(EngineError::Other(
                "this kernel's userfaultfd lacks asynchronous write-protect".into(),
            ));
        }
        let uffd = Arc::new(uffd);
        let events = read_events_until_dropped(pid, uffd.clone())?;
        let pagemap =
            std::fs::File::open(format!("/proc/{pid}/pagemap")).map_err(|e| EngineError::Sys {
                what: format!("open /proc/{pid}/pagemap"),
                source: e,
            })?;
        let mut t = DirtyTracker {
            pid,
            scope,
            uffd,
            events: Some(events),
            pagemap,
            tracked: Default::default(),
        };
        t.track_new()?;
        Ok(t)
    }

    /// Register and protect writable private mappings created since the last
    /// call. Returns them: all their pages count as dirty.
    pub fn track_new(&mut self) -> Result<Vec<(u64, u64)>> {
        let mut new = Vec::new();
        let maps = procfs::maps(self.pid)?;
        let scope = self.scope;
        // Forget ranges that are gone or changed.
        self.tracked.retain(|s, l| {
            maps.iter()
                .any(|m| m.start == *s && m.end - m.start == *l && trackable(scope, m))
        });
        for m in maps.iter().filter(|m| trackable(scope, m)) {
            if self.tracked.get(&m.start) == Some(&(m.end - m.start)) {
                continue;
            }
            let len = m.end - m.start;
            // A range we cannot register (e.g. a special mapping) is simply
            // reported dirty every round.
            if uffd::register_wp(&self.uffd, m.start, len).is_ok() && self.protect(m).is_ok() {
                self.tracked.insert(m.start, len);
            }
            new.push((m.start, len));
        }
        Ok(new)
    }

    /// Write-protects a registered mapping. [`Scope::PrivateFiles`], and a
    /// read-only mapping with [`Scope::WritableAndPrivateFiles`]: only its
    /// private copies, read first. Protecting the rest of a file mapping
    /// would leave a marker in every empty entry, which the page scans
    /// count as a swapped page, so that every page of the file would look
    /// like a private copy. A page copied after the read is not protected,
    /// so it shows as written, and is saved at the stop.
    fn protect(&self, m: &MapLine) -> Result<()> {
        let whole = match self.scope {
            Scope::Writable => true,
            Scope::PrivateFiles => false,
            Scope::WritableAndPrivateFiles => m.write,
        };
        if whole {
            // The populated pages, protected by the scan that finds them,
            // and no empty entry (see `protect_populated`).
            return self.protect_populated(m);
        }
        let copies =
            crate::resources::memory::private_file_copies(self.pid, &[(m.start, m.end - m.start)])?;
        for (a, l) in copies {
            uffd::write_protect(&self.uffd, a, l)?;
        }
        Ok(())
    }

    /// Protects the populated pages (present or swapped) of mapping `m`,
    /// and leaves its empty entries as they are: one `PAGEMAP_SCAN` that
    /// protects the written pages it finds, which, in memory registered
    /// just now, are all the populated ones. Protecting the whole mapping
    /// (`UFFDIO_WRITEPROTECT`) would put a marker into each empty entry,
    /// allocating page tables for all of it: a program that reserves far
    /// more than it uses (GNU sort's 9 GiB buffer, of which it filled
    /// 550 MB) got 18 MiB of page tables, and every later scan of its
    /// memory walked their markers (25 ms inside assisted-post-copy's
    /// stop). A page populated later, where nothing was protected, has no
    /// protection, and the next scan reports it written and protects it.
    /// If the scan fails, the whole mapping.
    fn protect_populated(&self, m: &MapLine) -> Result<()> {
        let mut populated = Vec::new();
        if uffd::scan_written(&self.pagemap, m.start, m.end, &mut populated).is_err() {
            return uffd::write_protect(&self.uffd, m.start, m.end - m.start);
        }
        Ok(())
    }

    /// Pages written since the last scan (or since attach), as ranges; they
    /// are protected again. Includes every page of mappings that are new
    /// since the last scan.
    pub fn scan(&mut self) -> Result<Vec<(u64, u64)>> {
        let mut out = self.track_new()?;
        let ranges: Vec<(u64, u64)> = self.tracked.iter().map(|(s, l)| (*s, *l)).collect();
        for (s, l) in ranges {
            if out.iter().any(|(a, _)| *a == s) {
                continue;
            }
            match uffd::scan_written(&self.pagemap, s, s + l, &mut out) {
                Ok(()) => {}
                // The mapping changed under us (munmap/mremap): report it all.
                Err(_) => {
                    self.tracked.remove(&s);
                    out.push((s, l));
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Protects again the written pages of `ranges` (inside tracked
    /// memory) just before the caller reads all of them: a write that came
    /// before that read goes with it and is no longer reported by the next
    /// [`Self::scan`]; a write after the protection still is. Pages outside
    /// `ranges` are left as they are. A range whose mapping changed
    /// meanwhile may be left partly unprotected, which only reports its
    /// writes again.
    pub fn protect_before_read(&self, ranges: &[(u64, u64)]) {
        let mut written = Vec::new();
        for &(s, l) in ranges {
            written.clear();
            // What was written is read with the rest of `ranges`, and a
            // scan that failed part way protected less: nothing to report.
            let _ = uffd::scan_written(&self.pagemap, s, s + l, &mut written);
        }
    }

    /// Is the page at `addr` in a range whose writes are tracked?
    pub fn is_tracked(&self, addr: u64) -> bool {
        self.tracked
            .range(..=addr)
            .next_back()
            .is_some_and(|(s, l)| addr < s + l)
    }

    pub fn tracked_bytes(&self) -> u64 {
        self.tracked.values().sum()
    }

    /// The ranges whose writes are tracked, as (start, len), sorted by start.
    pub fn tracked(&self) -> Vec<(u64, u64)> {
        self.tracked.iter().map(|(s, l)| (*s, *l)).collect()
    }
}

impl Drop for DirtyTracker {
    fn drop(&mut self) {
        for (s, l) in &self.tracked {
            let _ = uffd::unregister(&self.uffd, *s, *l);
        }
        if let Some((waker, t)) = self.events.take() {
            drop(waker);
            let _ = t.join();
        }
    }
}

/// The thread that reads the tracker's userfaultfd: a process that moves
/// memory (`mremap`) waits in the kernel until its remap event is read.
/// Nothing else is asked for, and the events themselves are not needed.
/// The thread ends as soon as the returned socket is closed (its peer then
/// reads the end), so that dropping a tracker at a stop waits for nothing.
fn read_events_until_dropped(
    pid: pid_t,
    ufd: Arc<OwnedFd>,
) -> Result<(UnixStream, std::thread::JoinHandle<()>)> {
    let sys = |what: &str, e: std::io::Error| EngineError::Sys {
        what: what.into(),
        source: e,
    };
    let (waker, woken) =
        UnixStream::pair().map_err(|e| sys("create the write tracker's wake-up socket", e))?;
    let t = std::thread::Builder::new()
        .name(format!("pmig-track-{pid}"))
        .spawn(move || {
            let mut evs = Vec::new();
            loop {
                let mut p = [ufd.as_raw_fd(), woken.as_raw_fd()].map(|fd| libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                });
                // SAFETY: two pollfds of descriptors this thread holds.
                if unsafe { libc::poll(p.as_mut_ptr(), 2, -1) } <= 0 {
                    continue;
                }
                if p[1].revents != 0 {
                    return;
                }
                if p[0].revents & (libc::POLLERR | libc::POLLNVAL) != 0 {
                    // Never for a userfaultfd set up as ours is; reading on
                    // would spin.
                    tracing::warn!("write tracking of process {pid}: its userfaultfd failed");
                    return;
                }
                evs.clear();
                if let Err(e) = uffd::read_events(&ufd, &mut evs) {
                    tracing::warn!("write tracking of process {pid}: {e}");
                    return;
                }
                tracing::debug!("write tracking of process {pid}: {evs:x?}");
            }
        })
        .map_err(|e| sys("start the write tracker's event thread", e))?;
    Ok((waker, t))
}

/// Duplicate fd `fd` of process `pid` into ours.
pub fn take_fd(pid: pid_t, fd: i32) -> Result<OwnedFd> {
    // SAFETY: pidfd_open/pidfd_getfd return new fds we own; closed on error.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0);
        if pidfd < 0 {
            return Err(crate::error::errno_err(format!("pidfd_open {pid}")));
        }
        let got = libc::syscall(libc::SYS_pidfd_getfd, pidfd, fd, 0);
        let err = std::io::Error::last_os_error();
        libc::close(pidfd as i32);
        if got < 0 {
            return Err(EngineError::Sys {
                what: format!("take fd {fd} of process {pid}"),
                source: err,
            });
        }
        Ok(OwnedFd::from_raw_fd(got as i32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ptrace::Frozen;
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};

    /// Whether the tests may create a userfaultfd in another process (they
    /// say that they are skipped when not).
    fn root() -> bool {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if !root {
            eprintln!("skipped: needs root to create a userfaultfd in another process");
        }
        root
    }

    /// A python3 program driven line by line: it first prints the address
    /// of its memory (hex), then one line for each line it is sent. Killed
    /// when dropped.
    struct Driven {
        child: std::process::Child,
        stdin: std::process::ChildStdin,
        out: BufReader<std::process::ChildStdout>,
        base: u64,
    }

    impl Driven {
        fn start(prog: &str) -> Driven {
            let mut child = Command::new("python3")
                .args(["-c", prog])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("python3");
            let stdin = child.stdin.take().unwrap();
            let mut out = BufReader::new(child.stdout.take().unwrap());
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            let base = u64::from_str_radix(line.trim().trim_start_matches("0x"), 16).unwrap();
            Driven {
                child,
                stdin,
                out,
                base,
            }
        }

        fn pid(&self) -> i32 {
            self.child.id() as i32
        }

        /// Sends `line`; returns the program's answer, trimmed.
        fn say(&mut self, line: &str) -> String {
            writeln!(self.stdin, "{line}").unwrap();
            let mut l = String::new();
            self.out.read_line(&mut l).unwrap();
            l.trim().to_string()
        }
    }

    impl Drop for Driven {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// python3 writing one byte into page i of a buffer for each line i
    /// (answering `ok`); with its output and the buffer's address.
    fn python_writer() -> (
        std::process::Child,
        BufReader<std::process::ChildStdout>,
        u64,
    ) {
        let mut c = Command::new("python3")
            .args(["-c", "import ctypes,sys\nbuf=ctypes.create_string_buffer(64*4096)\nprint(hex(ctypes.addressof(buf)),flush=True)\nfor line in sys.stdin:\n    i=int(line)\n    buf[i*4096]=b'x'\n    print('ok',flush=True)\n"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let mut out = BufReader::new(c.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let base = u64::from_str_radix(line.trim().trim_start_matches("0x"), 16).unwrap();
        (c, out, base)
    }

    #[test]
    fn reports_exactly_the_pages_written() {
        if !root() {
            return;
        }
        let (mut c, mut out, base) = python_writer();
        let mut line = String::new();
        let page0 = (base + 4095) & !4095; // first whole page of the buffer
        let mut t = DirtyTracker::attach(c.id() as i32).unwrap();
        let _ = t.scan().unwrap(); // settle: first scan after attach
        let mut stdin = c.stdin.take().unwrap();
        let idx = (page0 - base) / 4096 + 5; // page index 5 within aligned part
        writeln!(stdin, "{}", idx).unwrap();
        line.clear();
        out.read_line(&mut line).unwrap();
        let target = base + idx * 4096;
        let target_page = target & !4095;
        // The stop's scan (one walk for populated and written pages) sees
        // the same: the page written is populated and written, the page
        // after it (populated by python, not written since) only populated.
        let pagemap = std::fs::File::open(format!("/proc/{}/pagemap", c.id())).unwrap();
        let within = |r: &[(u64, u64)], p: u64| r.iter().any(|(s, l)| *s <= p && p < s + l);
        let (present, written) = crate::resources::memory::populated_and_written(
            &pagemap,
            target_page,
            target_page + 2 * 4096,
            crate::resources::memory::Backing::Anon,
        )
        .unwrap();
        assert!(within(&present, target_page) && within(&written, target_page));
        assert!(within(&present, target_page + 4096), "{present:x?}");
        assert!(!within(&written, target_page + 4096), "{written:x?}");
        let dirty = t.scan().unwrap();
        assert!(
            dirty
                .iter()
                .any(|(s, l)| *s <= target_page && target_page < s + l),
            "written page {target_page:#x} not reported: {dirty:x?}"
        );
        // Nothing written since: the next scan must not report that page again.
        let (present, written) = crate::resources::memory::populated_and_written(
            &pagemap,
            target_page,
            target_page + 4096,
            crate::resources::memory::Backing::Anon,
        )
        .unwrap();
        assert!(
            within(&present, target_page) && written.is_empty(),
            "{written:x?}"
        );
        let again = t.scan().unwrap();
        assert!(
            !again
                .iter()
                .any(|(s, l)| *s <= target_page && target_page < s + l),
            "page reported twice: {again:x?}"
        );
        drop(t);
        let _ = c.kill();
        let _ = c.wait();
    }

    /// A write before [`DirtyTracker::protect_before_read`] is not
    /// reported again, one after it is, and pages outside its ranges keep
    /// what they had.
    #[test]
    fn a_write_before_the_read_is_not_reported_again() {
        if !root() {
            return;
        }
        let (mut c, mut out, base) = python_writer();
        let mut line = String::new();
        let page0 = (base + 4095) & !4095;
        let first = (page0 - base) / 4096 + 1;
        let mut t = DirtyTracker::attach(c.id() as i32).unwrap();
        let _ = t.scan().unwrap();
        let mut stdin = c.stdin.take().unwrap();
        let mut write = |i: u64| {
            writeln!(stdin, "{i}").unwrap();
            line.clear();
            out.read_line(&mut line).unwrap();
            assert_eq!(line.trim(), "ok");
        };
        let page = |i: u64| (base + i * 4096) & !4095;
        // Pages first, first + 1 and first + 2 written; the first two then
        // read (as a round would), and the second written again.
        for i in first..first + 3 {
            write(i);
        }
        t.protect_before_read(&[(page(first), 2 * 4096)]);
        write(first + 1);
        let dirty = t.scan().unwrap();
        let reported = |p: u64| dirty.iter().any(|(s, l)| *s <= p && p < s + l);
        assert!(
            !reported(page(first)),
            "written before the read, reported: {dirty:x?}"
        );
        assert!(
            reported(page(first + 1)),
            "written after the read, not reported: {dirty:x?}"
        );
        assert!(
            reported(page(first + 2)),
            "written outside the ranges read, not reported: {dirty:x?}"
        );
        drop(t);
        let _ = c.kill();
        let _ = c.wait();
    }

    /// The page tables of `pid`, in KiB (`VmPTE`).
    fn page_table_kib(pid: i32) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmPTE:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// A mapping far larger than what the process uses (a reserved buffer):
    /// the tracker gives it no page tables beyond those of its populated
    /// pages, and a first touch far from them is seen, alone, once.
    #[test]
    fn a_large_sparse_mapping_gets_no_page_tables_and_its_first_touches_are_seen() {
        if !root() {
            return;
        }
        // 1 GiB reserved (no huge pages: a first touch then populates one
        // page), pages 0-3 touched; each line i writes into page i.
        let prog = "import ctypes,mmap,sys\nn=262144\nm=mmap.mmap(-1,n*4096,flags=mmap.MAP_PRIVATE|mmap.MAP_ANONYMOUS)\nm.madvise(mmap.MADV_NOHUGEPAGE)\nfor i in range(4):\n    m[i*4096]=1\nprint(hex(ctypes.addressof(ctypes.c_char.from_buffer(m))),flush=True)\nfor line in sys.stdin:\n    m[int(line)*4096]=2\n    print('ok',flush=True)\n";
        let mut py = Driven::start(prog);
        let (pid, base) = (py.pid(), py.base);
        let end = base + (1 << 30);
        let in_map = |r: &[(u64, u64)]| -> Vec<u64> {
            let mut pages = Vec::new();
            for &(s, l) in r {
                let (a, e) = (s.max(base), (s + l).min(end));
                pages.extend((a..e).step_by(4096).map(|p| (p - base) / 4096));
            }
            pages
        };
        let before = page_table_kib(pid);
        let mut t = DirtyTracker::attach(pid).unwrap();
        assert!(t.is_tracked(end - 4096));
        // Protecting all of it would take 2 MiB of page tables (a marker
        // in each of its 262,144 entries).
        let grown = page_table_kib(pid).saturating_sub(before);
        assert!(grown < 256, "page tables grew by {grown} KiB");
        let populated = crate::resources::memory::saveable_ranges(pid).unwrap();
        assert_eq!(in_map(&populated), vec![0, 1, 2, 3]);
        assert!(in_map(&t.scan().unwrap()).is_empty());
        // A first touch 300 MiB in, where nothing was protected, and a
        // write to page 2, which was: both seen, and nothing else of the
        // new page table's empty entries.
        let far = 300 * 256;
        py.say(&far.to_string());
        py.say("2");
        assert_eq!(in_map(&t.scan().unwrap()), vec![2, far]);
        // Protected now: seen again only when written again.
        assert!(in_map(&t.scan().unwrap()).is_empty());
        py.say(&far.to_string());
        assert_eq!(in_map(&t.scan().unwrap()), vec![far]);
        let populated = crate::resources::memory::saveable_ranges(pid).unwrap();
        assert_eq!(in_map(&populated), vec![0, 1, 2, 3, far]);
        drop(t);
    }

    #[test]
    fn untouched_private_memory_stays_unpopulated_and_a_first_touch_is_seen() {
        if !root() {
            return;
        }
        // python3 with a private anonymous mapping of 256 pages, pages 0-3
        // touched; each line i writes into page i.
        let prog = "import ctypes,mmap,sys\nm=mmap.mmap(-1,256*4096,flags=mmap.MAP_PRIVATE|mmap.MAP_ANONYMOUS)\nfor i in range(4):\n    m[i*4096]=1\nprint(hex(ctypes.addressof(ctypes.c_char.from_buffer(m))),flush=True)\nfor line in sys.stdin:\n    m[int(line)*4096]=2\n    print('ok',flush=True)\n";
        let mut py = Driven::start(prog);
        let (pid, base) = (py.pid(), py.base);
        let end = base + 256 * 4096;
        let in_map = |r: &[(u64, u64)]| -> u64 {
            r.iter()
                .map(|&(s, l)| (s + l).min(end).saturating_sub(s.max(base)) / 4096)
                .sum()
        };
        let mut t = DirtyTracker::attach(pid).unwrap();
        assert!(t.is_tracked(base + 100 * 4096));
        // Tracking must not make the untouched pages look populated (a
        // write-protect marker in an empty entry reads as a swapped page).
        let populated = crate::resources::memory::saveable_ranges(pid).unwrap();
        assert_eq!(in_map(&populated), 4, "{populated:x?}");
        let _ = t.scan().unwrap();
        // The first write to page 100 (populated after the protection) is seen.
        py.say("100");
        let dirty = t.scan().unwrap();
        let p100 = base + 100 * 4096;
        assert!(
            dirty.iter().any(|&(s, l)| s <= p100 && p100 < s + l),
            "first touch of {p100:#x} not reported: {dirty:x?}"
        );
        assert_eq!(in_map(&dirty), 1, "{dirty:x?}");
        let populated = crate::resources::memory::saveable_ranges(pid).unwrap();
        assert_eq!(in_map(&populated), 5, "{populated:x?}");
        drop(t);
    }

    /// python3 with a file mapped privately (8 pages); each line `w i`
    /// writes into page i of it, `p ro` and `p rw` make it read-only or
    /// writable again.
    fn python_file_writer(path: &std::path::Path) -> Option<std::process::Child> {
        let prog = format!(
            "import ctypes,mmap,os,sys\nos.closerange(3,65536)\nf=open('{}','r+b')\nm=mmap.mmap(f.fileno(),8*4096,flags=mmap.MAP_PRIVATE,prot=mmap.PROT_READ|mmap.PROT_WRITE)\nprint(hex(ctypes.addressof(ctypes.c_char.from_buffer(m))),flush=True)\na=ctypes.addressof(ctypes.c_char.from_buffer(m))\nlibc=ctypes.CDLL(None)\nfor line in sys.stdin:\n    c,x=line.split()\n    if c=='p':\n        assert libc.mprotect(ctypes.c_void_p(a),8*4096,1 if x=='ro' else 3)==0\n    else:\n        m[int(x)*4096]=0x41\n    print('ok',flush=True)\n",
            path.display()
        );
        Command::new("python3")
            .args(["-c", &prog])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .ok()
    }

    /// [`python_file_writer`] on an 8-page file of 7s in a directory: its
    /// pid, the mapping's address, and its commands answered `ok`.
    struct FileWriter {
        c: std::process::Child,
        pid: i32,
        base: u64,
        stdin: std::process::ChildStdin,
        out: BufReader<std::process::ChildStdout>,
    }

    impl FileWriter {
        fn start(dir: &std::path::Path) -> FileWriter {
            let file = dir.join("data");
            std::fs::write(&file, vec![7u8; 8 * 4096]).unwrap();
            let mut c = python_file_writer(&file).expect("python3");
            let mut out = BufReader::new(c.stdout.take().unwrap());
            let stdin = c.stdin.take().unwrap();
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            let base = u64::from_str_radix(line.trim().trim_start_matches("0x"), 16).unwrap();
            FileWriter {
                pid: c.id() as i32,
                c,
                base,
                stdin,
                out,
            }
        }

        /// [`Self::start`], then private copies of pages 0-3 made and the
        /// mapping made read-only (like a library's relocated data), and a
        /// tracker of `scope` attached, which must cover the mapping.
        fn with_read_only_copies(
            dir: &std::path::Path,
            scope: Scope,
        ) -> (FileWriter, DirtyTracker) {
            let mut w = FileWriter::start(dir);
            for i in 0..4 {
                w.say(&format!("w {i}"));
            }
            w.say("p ro");
            let t = DirtyTracker::attach_scoped(w.pid, scope).unwrap();
            let tracked = t.tracked();
            assert!(
                tracked.contains(&(w.base, 8 * 4096)),
                "{:#x} (read-only, of a file) not tracked: {tracked:x?}",
                w.base
            );
            (w, t)
        }

        fn say(&mut self, what: &str) {
            writeln!(self.stdin, "{what}").unwrap();
            let mut l = String::new();
            self.out.read_line(&mut l).unwrap();
            assert_eq!(l.trim(), "ok");
        }
    }

    /// Killed and reaped however the test ends.
    impl Drop for FileWriter {
        fn drop(&mut self) {
            let _ = self.c.kill();
            let _ = self.c.wait();
        }
    }

    /// assisted-post-copy's scope: the python heap (writable anonymous
    /// memory) and a read-only private file mapping's copies are both
    /// tracked, and a write to the file mapping after `mprotect` is
    /// reported while its unwritten copies are not.
    #[test]
    fn writable_memory_and_read_only_file_copies_are_tracked_together() {
        if !root() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let (mut writer, mut t) =
            FileWriter::with_read_only_copies(dir.path(), Scope::WritableAndPrivateFiles);
        let (pid, base) = (writer.pid, writer.base);
        let mut say = |what: &str| writer.say(what);
        let tracked = t.tracked();
        let maps = procfs::maps(pid).unwrap();
        let anon = maps
            .iter()
            .filter(|m| m.write && !m.shared && m.inode == 0 && !m.path.starts_with("[v"))
            .collect::<Vec<_>>();
        assert!(!anon.is_empty());
        for m in anon {
            assert!(
                tracked.contains(&(m.start, m.end - m.start)),
                "writable anonymous {m:?} not tracked: {tracked:x?}"
            );
        }
        // Of its private copies (pages 0-3), none written since the
        // attach; then page 1, once the mapping is writable again.
        let copies = |w: &[(u64, u64)]| -> Vec<u64> {
            w.iter()
                .flat_map(|&(a, l)| (0..l / 4096).map(move |k| a + k * 4096))
                .filter(|a| (base..base + 4 * 4096).contains(a))
                .map(|a| (a - base) / 4096)
                .collect()
        };
        let first = t.scan().unwrap();
        assert_eq!(copies(&first), Vec::<u64>::new(), "{first:x?}");
        say("p rw");
        say("w 1");
        let written = t.scan().unwrap();
        assert_eq!(copies(&written), vec![1], "{written:x?}");
        drop(writer);
    }

    /// Post-copy's private file copies: a tracker scoped to file mappings
    /// covers the mapping (and no anonymous memory), reports its private
    /// copies, and a capture told the tracked ranges saves, of the mapping,
    /// only the pages written since while still listing every copy as
    /// present.
    #[test]
    fn file_copies_written_since_are_all_a_capture_saves_of_them() {
        if !root() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        // Read-only while tracking starts, writable again later.
        let (mut writer, t) = FileWriter::with_read_only_copies(dir.path(), Scope::PrivateFiles);
        let (pid, base) = (writer.pid, writer.base);
        let mut say = |what: &str| writer.say(what);
        let tracked = t.tracked();
        // No anonymous memory: the python heap is not tracked.
        for (s, l) in &tracked {
            let m = procfs::maps(pid)
                .unwrap()
                .into_iter()
                .find(|m| m.start == *s)
                .unwrap();
            assert!(m.path.starts_with('/') && m.end - m.start == *l, "{m:?}");
        }
        let copies =
            crate::resources::memory::private_file_copies(pid, &[(base, 8 * 4096)]).unwrap();
        assert_eq!(copies, vec![(base, 4 * 4096)]);
        // Page 2 again, and page 6 copied for the first time.
        say("p rw");
        say("w 2");
        say("w 6");
        let mut frozen = Frozen::freeze(pid).unwrap();
        let made = crate::resources::memory::PreScan::scan(
            pid,
            true,
            crate::resources::memory::ScanFor::Written,
        );
        let img_dir = dir.path().join("img");
        let mut w = pmig_image::ImageWriter::create(&img_dir).unwrap();
        let pi = crate::dump::capture_with(
            &mut frozen,
            &mut w,
            None,
            crate::dump::Aids {
                prescan: Some(crate::resources::memory::SideScan::made(made)),
                defer_population: true,
                written_since: Some(tracked.clone()),
                ..Default::default()
            },
        )
        .unwrap()
        .image;
        drop(frozen);
        let v = pi.memory.vmas.iter().find(|v| v.start == base).unwrap();
        let pages = |r: &mut dyn Iterator<Item = (u64, u64)>| -> Vec<u64> {
            r.flat_map(|(a, l)| (0..l / 4096).map(move |k| (a - base) / 4096 + k))
                .collect()
        };
        assert_eq!(
            pages(&mut v.present.iter().copied()),
            vec![0, 1, 2, 3, 6],
            "{v:x?}"
        );
        assert_eq!(
            pages(&mut v.runs.iter().map(|r| (r.addr, r.len))),
            vec![2, 6],
            "{v:x?}"
        );
        // Pre-copy's stop: the written pages are sent apart, so the image
        // holds no page of the tracked ranges, yet lists every copy as
        // present; the tracker's scan, within those, names exactly the
        // pages to send (outside them it also reports pages never
        // populated, which have no protection to lose).
        let mut frozen = Frozen::freeze(pid).unwrap();
        let made = crate::resources::memory::PreScan::scan(
            pid,
            true,
            crate::resources::memory::ScanFor::Populated,
        );
        let mut w = pmig_image::ImageWriter::create(&dir.path().join("img2")).unwrap();
        let pi = crate::dump::capture_with(
            &mut frozen,
            &mut w,
            None,
            crate::dump::Aids {
                prescan: Some(crate::resources::memory::SideScan::made(made)),
                defer_population: true,
                written_since: Some(tracked.clone()),
                written_apart: true,
                ..Default::default()
            },
        )
        .unwrap()
        .image;
        let mut t = t;
        let written = t.scan().unwrap();
        drop(frozen);
        let v = pi.memory.vmas.iter().find(|v| v.start == base).unwrap();
        assert_eq!(
            pages(&mut v.present.iter().copied()),
            vec![0, 1, 2, 3, 6],
            "{v:x?}"
        );
        assert!(v.runs.is_empty(), "{v:x?}");
        let present: std::collections::HashSet<u64> =
            pages(&mut v.present.iter().copied()).into_iter().collect();
        let to_send: Vec<u64> = pages(
            &mut written
                .into_iter()
                .filter(|&(a, _)| a >= base && a < base + 8 * 4096),
        )
        .into_iter()
        .filter(|p| present.contains(p))
        .collect();
        assert_eq!(to_send, vec![2, 6], "written since the tracker attached");
        drop(t);
        drop(writer);
    }

    /// A page the process releases (`MADV_DONTNEED`) after a round sent it
    /// must not look populated at the stop: pre-copy's destination keeps a
    /// page of an earlier round only where the image of the stop lists one.
    #[test]
    fn a_page_released_after_a_scan_is_not_populated_at_the_stop() {
        if !root() {
            return;
        }
        // python3 with 16 anonymous pages, all written; `d i n` releases n
        // pages from page i, `w i` writes page i, `r i` reads it.
        let prog = "import ctypes,mmap,sys\nm=mmap.mmap(-1,16*4096,flags=mmap.MAP_PRIVATE|mmap.MAP_ANONYMOUS)\nfor i in range(16):\n    m[i*4096]=1\nprint(hex(ctypes.addressof(ctypes.c_char.from_buffer(m))),flush=True)\nfor line in sys.stdin:\n    c=line.split()\n    if c[0]=='d':\n        m.madvise(mmap.MADV_DONTNEED,int(c[1])*4096,int(c[2])*4096)\n    elif c[0]=='r':\n        assert m[int(c[1])*4096]==0\n    else:\n        m[int(c[1])*4096]=2\n    print('ok',flush=True)\n";
        let mut py = Driven::start(prog);
        let (pid, base) = (py.pid(), py.base);
        let mut say = |what: &str| assert_eq!(py.say(what), "ok");
        let pages_of = |r: &[(u64, u64)]| -> Vec<u64> {
            r.iter()
                .flat_map(|&(a, l)| (0..l / 4096).map(move |k| a + k * 4096))
                .filter(|&a| a >= base && a < base + 16 * 4096)
                .map(|a| (a - base) / 4096)
                .collect()
        };
        let mut t = DirtyTracker::attach(pid).unwrap();
        let _ = t.scan().unwrap();
        // Released after the round that sent them, and page 9 written.
        say("d 2 3");
        say("w 9");
        // The released pages may be reported too (their markers went with
        // them): a round then sends them as zeros.
        let written = pages_of(&t.scan().unwrap());
        assert!(
            written.contains(&9) && written.iter().all(|p| [2, 3, 4, 9].contains(p)),
            "{written:?}"
        );
        let populated = crate::resources::memory::saveable_ranges(pid).unwrap();
        let expect: Vec<u64> = (0..16).filter(|p| !(2..5).contains(p)).collect();
        assert_eq!(pages_of(&populated), expect, "{populated:x?}");
        // Released after the last scan: the stop's own scan. Page 3, read
        // again, maps the zero page, which the scan just protected: it is
        // not written, and must not count as populated either, or the
        // destination would keep the copy a round sent before the release.
        say("d 12 1");
        say("r 3");
        let mut frozen = Frozen::freeze(pid).unwrap();
        let made = crate::resources::memory::PreScan::scan(
            pid,
            false,
            crate::resources::memory::ScanFor::Populated,
        );
        let dir = tempfile::tempdir().unwrap();
        let mut w = pmig_image::ImageWriter::create(dir.path()).unwrap();
        let pi = crate::dump::capture_with(
            &mut frozen,
            &mut w,
            None,
            crate::dump::Aids {
                prescan: Some(crate::resources::memory::SideScan::made(made)),
                written_since: Some(t.tracked()),
                written_apart: true,
                ..Default::default()
            },
        )
        .unwrap()
        .image;
        drop(frozen);
        let v = pi
            .memory
            .vmas
            .iter()
            .find(|v| v.start <= base && base < v.end)
            .unwrap();
        let expect: Vec<u64> = (0..16)
            .filter(|p| !(2..5).contains(p) && *p != 12)
            .collect();
        assert_eq!(pages_of(&v.present), expect, "{v:x?}");
        drop(t);
    }

    /// Memory moved away and back while its writes are tracked stays one
    /// mapping, as it would untracked: an `mremap` across the place where it
    /// was cut works. A page written while away counts as written; the
    /// others kept their place and content.
    #[test]
    fn memory_moved_away_and_back_stays_one_mapping_and_its_writes_are_seen() {
        if !root() {
            return;
        }
        // python3 with 16 written anonymous pages and 16 reserved ones;
        // `m` moves pages 4-7 into the reserve, writes page 5 there, moves
        // them back, then all 16 pages into the reserve and back, and says
        // whether each move worked.
        let prog = "import ctypes,sys\nlibc=ctypes.CDLL(None,use_errno=True)\nlibc.mmap.restype=ctypes.c_void_p\nlibc.mremap.restype=ctypes.c_void_p\nlibc.mremap.argtypes=[ctypes.c_void_p,ctypes.c_size_t,ctypes.c_size_t,ctypes.c_int,ctypes.c_void_p]\nlibc.mmap.argtypes=[ctypes.c_void_p,ctypes.c_size_t,ctypes.c_int,ctypes.c_int,ctypes.c_int,ctypes.c_long]\nP=4096\na=libc.mmap(None,16*P,3,0x22,-1,0)\nr=libc.mmap(None,16*P,0,0x22,-1,0)\nctypes.memset(a,1,16*P)\nprint(hex(a),flush=True)\ndef mv(src,n,dst):\n    x=libc.mremap(src,n*P,n*P,3,dst)\n    return x==dst\nfor line in sys.stdin:\n    ok=mv(a+4*P,4,r)\n    ctypes.memset(r+P,2,1)\n    ok=ok and mv(r,4,a+4*P)\n    whole=mv(a,16,r) and mv(r,16,a)\n    print(ok,whole,ctypes.get_errno(),flush=True)\n";
        let mut py = Driven::start(prog);
        let base = py.base;
        let mut t = DirtyTracker::attach(py.pid()).unwrap();
        assert!(t.is_tracked(base));
        let _ = t.scan().unwrap();
        assert_eq!(
            py.say("m"),
            "True True 0",
            "the moves work as they would untracked"
        );
        let written = t.scan().unwrap();
        let p5 = base + 5 * 4096;
        assert!(
            written.iter().any(|&(s, l)| s <= p5 && p5 < s + l),
            "page 5, written while away, not reported: {written:x?}"
        );
        // Still tracked after the moves: a page not written since is not
        // reported again.
        assert!(t.is_tracked(base));
        let again = t.scan().unwrap();
        assert!(
            !again
                .iter()
                .any(|&(s, l)| s < base + 16 * 4096 && base < s + l),
            "{again:x?}"
        );
        drop(t);
    }
}
