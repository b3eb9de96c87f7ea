//! userfaultfd and PAGEMAP_SCAN, by their kernel ABI.
//!
//! The `userfaultfd` crate covers register/copy/read-event, but its
//! write-protect support needs bindgen (libclang) at build time and it has no
//! `UFFD_FEATURE_WP_ASYNC`; the handful of ioctls pmig needs for dirty
//! tracking are wrapped here instead, with the values of the kernel's uapi
//! headers (`linux/userfaultfd.h`, `linux/fs.h`).

use crate::error::{errno_err, Result};
use std::os::fd::{AsRawFd, OwnedFd};

pub const UFFD_API: u64 = 0xaa;
pub const UFFDIO_API: u64 = 0xc018_aa3f;
pub const UFFDIO_REGISTER: u64 = 0xc020_aa00;
pub const UFFDIO_UNREGISTER: u64 = 0x8010_aa01;
pub const UFFDIO_WRITEPROTECT: u64 = 0xc018_aa06;
pub const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
pub const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1 << 0;
pub const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;
pub const UFFDIO_REGISTER_MODE_MISSING: u64 = 1 << 0;
pub const UFFDIO_WAKE: u64 = 0x8010_aa02;
pub const UFFDIO_COPY: u64 = 0xc028_aa03;
pub const UFFDIO_ZEROPAGE: u64 = 0xc020_aa04;
// (1 << 1 is UFFD_FEATURE_EVENT_FORK.)
pub const UFFD_FEATURE_EVENT_REMAP: u64 = 1 << 2;
pub const UFFD_FEATURE_EVENT_FORK: u64 = 1 << 1;
pub const UFFD_FEATURE_EVENT_REMOVE: u64 = 1 << 3;
pub const UFFD_FEATURE_EVENT_UNMAP: u64 = 1 << 6;
/// What a post-copy restore asks for: to hear about memory the process
/// moves (mremap) or releases (madvise, munmap) while pages are owed, and
/// about its children (fork): a child's copy of the owed memory stays
/// registered, with a userfaultfd of its own that the reader receives.
pub const LAZY_FEATURES: u64 = UFFD_FEATURE_EVENT_REMAP
    | UFFD_FEATURE_EVENT_REMOVE
    | UFFD_FEATURE_EVENT_UNMAP
    | UFFD_FEATURE_EVENT_FORK;
pub const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
pub const UFFD_EVENT_FORK: u8 = 0x13;
pub const UFFD_EVENT_REMAP: u8 = 0x14;
pub const UFFD_EVENT_REMOVE: u8 = 0x15;
pub const UFFD_EVENT_UNMAP: u8 = 0x16;

/// Whether a fill went through, or stopped because the address space is
/// changing: while a `munmap`, `madvise(MADV_DONTNEED)` or `mremap` of a
/// registered range waits for its event to be read, the kernel refuses to
/// fill pages (`EAGAIN`). The caller reads the pending events and tries
/// again; skipping the page would leave its faulting thread asleep, or a
/// later fault there answered with zeros.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    Done,
    Busy,
    /// The address space is gone: the process has exited (or replaced its
    /// program). Nothing can be installed there any more, nor is needed.
    Gone,
}

/// Install `data` at `dst` (page aligned) and wake the threads waiting for
/// it. Returns the bytes dealt with from the start (installed, or skipped
/// because the page is present already or its range is gone) and whether
/// it stopped there because the address space is changing ([`Fill::Busy`]).
///
/// One UFFDIO_COPY must stay inside one mapping: a range that spans two
/// (adjacent mappings with different protections, as a JIT's code heap
/// next to its data) is refused whole with `ENOENT`, like a range that is
/// gone. So on `ENOENT` the piece tried is halved, down to one page, and
/// only a page refused on its own is skipped as gone; after a success the
/// piece grows again.
pub fn copy(uffd: &OwnedFd, dst: u64, data: &[u8]) -> Result<(u64, Fill)> {
    fill(uffd, dst, data.len() as u64, Some(data))
}

/// As [`copy`] of `len` bytes of zeros, but without the bytes: each missing
/// page of [dst, dst + len) gets the zero page (`UFFDIO_ZEROPAGE`), which
/// neither copies nor allocates until the process writes there, as an
/// anonymous page never written reads.
pub fn zeros(uffd: &OwnedFd, dst: u64, len: u64) -> Result<(u64, Fill)> {
    fill(uffd, dst, len, None)
}

/// [`copy`] (`data`) or [`zeros`] (`None`).
fn fill(uffd: &OwnedFd, dst: u64, len: u64, data: Option<&[u8]>) -> Result<(u64, Fill)> {
    const PG: u64 = 4096;
    let mut done = 0u64;
    let mut piece = len;
    // Each round installs or skips at least one page, stops, or halves the
    // piece (at most 64 times in a row).
    for _ in 0..(len / PG + 1) * 66 {
        if done >= len {
            break;
        }
        let chunk = piece.min(len - done).max(PG);
        let (r, copied) = match data {
            Some(data) => {
                let mut c = [dst + done, data.as_ptr() as u64 + done, chunk, 0u64, 0u64];
                // SAFETY: UFFDIO_COPY reads `chunk` bytes from our buffer
                // (`data` has `len` bytes, and done + chunk <= len) and
                // writes the result count into c[4].
                let r = unsafe { libc::ioctl(uffd.as_raw_fd(), UFFDIO_COPY as _, c.as_mut_ptr()) };
                (r, c[4] as i64)
            }
            None => {
                let mut z = [dst + done, chunk, 0u64, 0u64];
                // SAFETY: UFFDIO_ZEROPAGE reads the range and writes the
                // result count into z[3].
                let r =
                    unsafe { libc::ioctl(uffd.as_raw_fd(), UFFDIO_ZEROPAGE as _, z.as_mut_ptr()) };
                (r, z[3] as i64)
            }
        };
        if r == 0 {
            done += chunk;
            piece = piece.saturating_mul(2);
            continue;
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            // Partial copy: go on after what was done.
            Some(libc::EAGAIN) if copied > 0 => done += copied as u64,
            // Nothing done: a change of the address space waits for its
            // event to be read.
            Some(libc::EAGAIN) => return Ok((done, Fill::Busy)),
            // The page exists already (faulted in, or installed twice): skip it.
            Some(libc::EEXIST) => {
                if copied > 0 {
                    done += copied as u64;
                }
                tracing::debug!("install: the page at {:#x} exists", dst + done);
                done += PG;
            }
            // The piece spans mappings, or part of it is gone (unmapped
            // meanwhile): try half of it.
            Some(libc::ENOENT) | Some(libc::EINVAL) if copied <= 0 && chunk > PG => {
                piece = (chunk / 2) & !(PG - 1)
            }
            // This page is gone: nothing to install there.
            Some(libc::ENOENT) | Some(libc::EINVAL) if copied <= 0 => done += PG,
            Some(libc::ESRCH) => return Ok((done, Fill::Gone)),
            _ => {
                return Err(crate::error::EngineError::Sys {
                    what: format!("install pages at {:#x}", dst + done),
                    source: e,
                })
            }
        }
    }
    Ok((done.min(len), Fill::Done))
}

/// Installs `data` at `dst` (page aligned, inside one registered mapping)
/// in a process that is held stopped, so that nothing waits for the pages
/// and nothing else installs them: each missing page gets its data.
/// Returns the pages that were there already (`EEXIST`), which the caller
/// must write another way; any other refusal is an error.
pub fn copy_missing(uffd: &OwnedFd, dst: u64, data: &[u8]) -> Result<Vec<u64>> {
    const PG: u64 = 4096;
    let len = data.len() as u64;
    let mut done = 0u64;
    let mut present = Vec::new();
    // Each round installs at least a page, skips one, or fails.
    for _ in 0..=len / PG + 1 {
        if done >= len {
            break;
        }
        let mut c = [
            dst + done,
            data.as_ptr() as u64 + done,
            len - done,
            0u64,
            0u64,
        ];
        // SAFETY: UFFDIO_COPY reads `len - done` bytes from our buffer, which
        // has them, and writes the count it copied into c[4].
        let r = unsafe { libc::ioctl(uffd.as_raw_fd(), UFFDIO_COPY as _, c.as_mut_ptr()) };
        if r == 0 {
            done = len;
            break;
        }
        let e = std::io::Error::last_os_error();
        let copied = (c[4] as i64).max(0) as u64;
        match e.raw_os_error() {
            Some(libc::EAGAIN) if copied > 0 => done += copied,
            Some(libc::EEXIST) => {
                done += copied;
                present.push(dst + done);
                done += PG;
            }
            _ => {
                return Err(crate::error::EngineError::Sys {
                    what: format!("install pages at {:#x}", dst + done),
                    source: e,
                })
            }
        }
    }
    if done < len {
        return Err(crate::error::EngineError::Other(format!(
            "install pages at {dst:#x}: stopped after {done} of {len} bytes"
        )));
    }
    Ok(present)
}

/// Map the zero page at `dst` (a page the source never had) and wake; see
/// [`Fill`] for `Busy`.
pub fn zeropage(uffd: &OwnedFd, dst: u64, len: u64) -> Result<Fill> {
    let mut z = [dst, len, 0u64, 0u64];
    // SAFETY: UFFDIO_ZEROPAGE reads the range and writes a count into z[3].
    let r = unsafe { libc::ioctl(uffd.as_raw_fd(), UFFDIO_ZEROPAGE as _, z.as_mut_ptr()) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) => return Ok(Fill::Busy),
            Some(libc::ESRCH) => return Ok(Fill::Gone),
            Some(libc::EEXIST) | Some(libc::ENOENT) => {}
            _ => {
                return Err(crate::error::EngineError::Sys {
                    what: format!("map a zero page at {dst:#x}"),
                    source: e,
                })
            }
        }
        wake(uffd, dst, len)?;
    }
    Ok(Fill::Done)
}

pub fn wake(uffd: &OwnedFd, start: u64, len: u64) -> Result<()> {
    let mut w = [start, len];
    ioctl(uffd, UFFDIO_WAKE, w.as_mut_ptr(), || {
        format!("wake waiters at {start:#x}")
    })?;
    Ok(())
}

/// One event read from a userfaultfd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Fault {
        addr: u64,
        write: bool,
    },
    Remap {
        from: u64,
        to: u64,
        len: u64,
    },
    Remove {
        start: u64,
        end: u64,
    },
    Unmap {
        start: u64,
        end: u64,
    },
    /// The process forked: `ufd` is the child's userfaultfd, which the
    /// kernel installed in the reading process with the read.
    Fork {
        ufd: i32,
    },
    Other(u8),
}

/// Read pending events (non-blocking fd); empty when there are none.
pub fn read_events(uffd: &OwnedFd, out: &mut Vec<Event>) -> Result<()> {
    let mut buf = [0u8; 32 * 64];
    // SAFETY: reading into our buffer.
    let n = unsafe { libc::read(uffd.as_raw_fd(), buf.as_mut_ptr() as *mut _, buf.len()) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EAGAIN) {
            return Ok(());
        }
        return Err(crate::error::EngineError::Sys {
            what: "read userfaultfd events".into(),
            source: e,
        });
    }
    for m in buf[..n as usize].chunks_exact(32) {
        let u = |o: usize| u64::from_le_bytes(m[o..o + 8].try_into().unwrap());
        out.push(match m[0] {
            UFFD_EVENT_PAGEFAULT => Event::Fault {
                addr: u(16),
                write: u(8) & 1 != 0,
            },
            UFFD_EVENT_REMAP => Event::Remap {
                from: u(8),
                to: u(16),
                len: u(24),
            },
            UFFD_EVENT_REMOVE => Event::Remove {
                start: u(8),
                end: u(16),
            },
            UFFD_EVENT_UNMAP => Event::Unmap {
                start: u(8),
                end: u(16),
            },
            UFFD_EVENT_FORK => Event::Fork {
                ufd: u32::from_le_bytes(m[8..12].try_into().unwrap()) as i32,
            },
            e => Event::Other(e),
        });
    }
    Ok(())
}

pub const PAGEMAP_SCAN: u64 = 0xc060_6610;
pub const PM_SCAN_WP_MATCHING: u64 = 1 << 0;
pub const PM_SCAN_CHECK_WPASYNC: u64 = 1 << 1;
pub const PAGE_IS_WRITTEN: u64 = 1 << 1;
pub const PAGE_IS_FILE: u64 = 1 << 2;
pub const PAGE_IS_PRESENT: u64 = 1 << 3;
pub const PAGE_IS_SWAPPED: u64 = 1 << 4;
/// Mapped to the shared zero page (read, never written).
pub const PAGE_IS_PFNZERO: u64 = 1 << 5;

fn ioctl(fd: &impl AsRawFd, req: u64, arg: *mut u64, what: impl FnOnce() -> String) -> Result<i32> {
    // SAFETY: `arg` points to a live, correctly sized struct for `req`
    // (callers pass arrays laid out as the uapi structs).
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), req as _, arg) };
    if r < 0 {
        return Err(errno_err(what()));
    }
    Ok(r)
}

/// UFFDIO_API handshake asking for `features`; returns the features granted.
pub fn api(uffd: &OwnedFd, features: u64) -> Result<u64> {
    let mut a = [UFFD_API, features, 0u64];
    ioctl(uffd, UFFDIO_API, a.as_mut_ptr(), || {
        format!("userfaultfd API (features {features:#x})")
    })?;
    Ok(a[1])
}

pub fn register_wp(uffd: &OwnedFd, start: u64, len: u64) -> Result<()> {
    let mut r = [start, len, UFFDIO_REGISTER_MODE_WP, 0u64];
    ioctl(uffd, UFFDIO_REGISTER, r.as_mut_ptr(), || {
        format!("register {start:#x}+{len:#x} for write tracking")
    })?;
    Ok(())
}

pub fn register_missing(uffd: &OwnedFd, start: u64, len: u64) -> Result<()> {
    let mut r = [start, len, UFFDIO_REGISTER_MODE_MISSING, 0u64];
    ioctl(uffd, UFFDIO_REGISTER, r.as_mut_ptr(), || {
        format!("register {start:#x}+{len:#x} for missing pages")
    })?;
    Ok(())
}

pub fn unregister(uffd: &OwnedFd, start: u64, len: u64) -> Result<()> {
    let mut r = [start, len];
    ioctl(uffd, UFFDIO_UNREGISTER, r.as_mut_ptr(), || {
        format!("unregister {start:#x}+{len:#x}")
    })?;
    Ok(())
}

pub fn write_protect(uffd: &OwnedFd, start: u64, len: u64) -> Result<()> {
    let mut w = [start, len, UFFDIO_WRITEPROTECT_MODE_WP];
    ioctl(uffd, UFFDIO_WRITEPROTECT, w.as_mut_ptr(), || {
        format!("write-protect {start:#x}+{len:#x}")
    })?;
    Ok(())
}

/// PAGEMAP_SCAN for populated pages (present or swapped) written since they
/// were last protected, which it protects again. Appends (start, len)
/// ranges to `out`.
///
/// An empty entry is neither reported nor protected. Asked for written
/// pages alone, the kernel would report, and fill with a marker, every
/// empty entry of every page table the range has that was never protected
/// (the tracker protects only the populated pages of a mapping, with this
/// same scan, see [`crate::dirty`]).
pub fn scan_written(
    pagemap: &std::fs::File,
    start: u64,
    end: u64,
    out: &mut Vec<(u64, u64)>,
) -> Result<()> {
    pagemap_scan(
        pagemap,
        PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
        start,
        end,
        ScanMasks {
            inverted: 0,
            mask: PAGE_IS_WRITTEN,
            anyof: PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
            ret: PAGE_IS_WRITTEN,
        },
        out,
    )
}

/// The page categories PAGEMAP_SCAN matches on (see the kernel's
/// `struct pm_scan_arg`): a page matches if its categories, with those in
/// `inverted` flipped, include all of `mask` and (when not 0) one of
/// `anyof`; matching pages are reported by their categories in `ret`.
#[derive(Debug, Clone, Copy)]
pub struct ScanMasks {
    pub inverted: u64,
    pub mask: u64,
    pub anyof: u64,
    pub ret: u64,
}

/// PAGEMAP_SCAN over [start, end) with `flags`: appends the matching pages
/// to `out` as (start, len) ranges, adjacent ranges merged. The kernel walks
/// the page tables and reports runs, so the cost in user space is per run,
/// not per page.
pub fn pagemap_scan(
    pagemap: &std::fs::File,
    flags: u64,
    start: u64,
    end: u64,
    m: ScanMasks,
    out: &mut Vec<(u64, u64)>,
) -> Result<()> {
    pagemap_scan_with(
        pagemap,
        flags,
        start,
        end,
        m,
        &mut |a, e, _| match out.last_mut() {
            Some((s, l)) if *s + *l == a => *l += e - a,
            _ => out.push((a, e - a)),
        },
    )
}

/// [`pagemap_scan`] that also reports each run's categories (those of
/// `m.ret`): appends (start, len, categories) to `out`, adjacent runs with
/// the same categories merged.
pub fn pagemap_scan_categories(
    pagemap: &std::fs::File,
    flags: u64,
    start: u64,
    end: u64,
    m: ScanMasks,
    out: &mut Vec<(u64, u64, u64)>,
) -> Result<()> {
    pagemap_scan_with(
        pagemap,
        flags,
        start,
        end,
        m,
        &mut |a, e, c| match out.last_mut() {
            Some((s, l, k)) if *s + *l == a && *k == c => *l += e - a,
            _ => out.push((a, e - a, c)),
        },
    )
}

/// How long one PAGEMAP_SCAN call should walk, about: the call holds the
/// process's mmap lock (for reading), and a writer waiting for it (an
/// `mmap`, a userfaultfd's registration) holds back every reader after it,
/// such as the reads of the pages a migrated process faults on.
const SCAN_CALL_NS: u128 = 500_000;
/// The first span of addresses a call walks; later ones adapt to
/// [`SCAN_CALL_NS`] (one call took 14 ms over 4 GiB of populated memory
/// here; empty page tables cost far less, and the span then grows), down
/// to [`SCAN_SPAN_MIN`].
const SCAN_SPAN: u64 = 64 << 20;
const SCAN_SPAN_MIN: u64 = 2 << 20;

/// The PAGEMAP_SCAN loop: calls `sink(start, end, categories)` for each
/// region the kernel reports, in address order. Each call walks a span
/// sized to take about [`SCAN_CALL_NS`], so that the mmap lock is let go
/// that often (one call over 4 GiB of memory held it 14 ms).
fn pagemap_scan_with(
    pagemap: &std::fs::File,
    flags: u64,
    start: u64,
    end: u64,
    m: ScanMasks,
    sink: &mut dyn FnMut(u64, u64, u64),
) -> Result<()> {
    const N: usize = 512;
    let mut regions = vec![[0u64; 3]; N];
    let mut at = start;
    let mut span = SCAN_SPAN;
    // Each call makes progress (walk_end advances) or finishes.
    for _ in 0..(1 << 24) {
        if at >= end {
            return Ok(());
        }
        let to = end.min(at.saturating_add(span));
        let mut arg: [u64; 12] = [
            96,
            flags,
            at,
            to,
            0,
            regions.as_mut_ptr() as u64,
            N as u64,
            0,
            m.inverted,
            m.mask,
            m.anyof,
            m.ret,
        ];
        let t = std::time::Instant::now();
        let n = ioctl(pagemap, PAGEMAP_SCAN, arg.as_mut_ptr(), || {
            format!("scan the pages of {at:#x}-{to:#x}")
        })? as usize;
        let took = t.elapsed().as_nanos();
        if took < SCAN_CALL_NS / 2 {
            span = span.saturating_mul(2);
        } else if took > SCAN_CALL_NS * 2 {
            span = (span / 2).max(SCAN_SPAN_MIN);
        }
        for r in &regions[..n] {
            sink(r[0], r[1], r[2]);
        }
        let walk_end = arg[4];
        if walk_end <= at {
            return Ok(());
        }
        at = walk_end;
    }
    Ok(())
}

/// `/proc/PID/pagemap`: the entry is a swap entry (bit 62); with the
/// reader's `CAP_SYS_ADMIN`, its bits 0–4 hold the swap type.
const PM_SWAP: u64 = 1 << 62;
const PM_SWAP_TYPE: u64 = 0x1f;

/// The swap type the kernel gives a page-table marker (the kind a
/// write-protect in asynchronous mode leaves in an empty entry), as
/// `/proc/PID/pagemap` shows it; `None` when it cannot be learnt here (no
/// userfaultfd, or entries without their swap type). Its value depends on
/// the kernel's configuration, so it is measured once: a fresh page of
/// this process is protected and its entry read.
pub fn marker_swap_type() -> Option<u64> {
    static TYPE: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *TYPE.get_or_init(|| {
        let t = measure_marker_type();
        tracing::debug!("page-table marker swap type: {t:?}");
        t
    })
}

fn measure_marker_type() -> Option<u64> {
    use std::os::fd::FromRawFd;
    use std::os::unix::fs::FileExt;
    // SAFETY: userfaultfd returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK) };
    if fd < 0 {
        return None;
    }
    // SAFETY: a new descriptor nothing else owns.
    let uffd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    api(&uffd, UFFD_FEATURE_WP_ASYNC).ok()?;
    // SAFETY: a fresh private anonymous page, unmapped below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let a = p as u64;
    let entry = (|| {
        register_wp(&uffd, a, 4096).ok()?;
        write_protect(&uffd, a, 4096).ok()?;
        let pm = std::fs::File::open("/proc/self/pagemap").ok()?;
        let mut b = [0u8; 8];
        pm.read_exact_at(&mut b, a / 4096 * 8).ok()?;
        Some(u64::from_le_bytes(b))
    })();
    drop(uffd);
    // SAFETY: unmapping the page mapped above, which nothing else uses.
    unsafe { libc::munmap(p, 4096) };
    let e = entry?;
    // A marker reads as a swap entry; without the type bits (a reader
    // without CAP_SYS_ADMIN) it cannot be told from a swapped page.
    (e & PM_SWAP != 0 && e & ((1 << 55) - 1) != 0).then_some(e & PM_SWAP_TYPE)
}

/// Drops from `runs` (start, len, categories of a PAGEMAP_SCAN whose `ret`
/// had `PAGE_IS_PRESENT` and `PAGE_IS_SWAPPED`) the page-table markers:
/// PAGEMAP_SCAN counts a marker as a swapped page, and an asynchronous
/// write-protect leaves one in every empty entry of the range it protects,
/// so without this every untouched page of protected memory (a reserved
/// heap, a thread's stack) would look populated. Only runs reported
/// swapped and not present are looked at, entry by entry, in `pagemap`.
/// When markers cannot be told apart here ([`marker_swap_type`]), `runs`
/// stays as it is: more pages, never fewer.
pub fn drop_markers(pagemap: &std::fs::File, runs: &mut Vec<(u64, u64, u64)>) -> Result<()> {
    use std::os::unix::fs::FileExt;
    if !runs
        .iter()
        .any(|r| r.2 & PAGE_IS_SWAPPED != 0 && r.2 & PAGE_IS_PRESENT == 0)
    {
        return Ok(());
    }
    let Some(marker) = marker_swap_type() else {
        return Ok(());
    };
    const BATCH: u64 = 8192;
    let mut buf = vec![0u8; BATCH as usize * 8];
    let mut out: Vec<(u64, u64, u64)> = Vec::with_capacity(runs.len());
    let mut push = |a: u64, l: u64, c: u64| match out.last_mut() {
        Some((s, n, k)) if *s + *n == a && *k == c => *n += l,
        _ => out.push((a, l, c)),
    };
    for &(a, l, c) in runs.iter() {
        if c & PAGE_IS_SWAPPED == 0 || c & PAGE_IS_PRESENT != 0 {
            push(a, l, c);
            continue;
        }
        let pages = l / 4096;
        let mut i = 0;
        while i < pages {
            let n = BATCH.min(pages - i);
            let b = &mut buf[..n as usize * 8];
            pagemap.read_exact_at(b, (a / 4096 + i) * 8).map_err(|e| {
                crate::error::EngineError::Sys {
                    what: format!("read the page map at {:#x}", a + i * 4096),
                    source: e,
                }
            })?;
            for (k, e) in b.chunks_exact(8).enumerate() {
                let e = u64::from_le_bytes(e.try_into().unwrap());
                if e & PM_SWAP != 0 && e & PM_SWAP_TYPE == marker {
                    continue;
                }
                push(a + (i + k as u64) * 4096, 4096, c);
            }
            i += n;
        }
    }
    *runs = out;
    Ok(())
}
