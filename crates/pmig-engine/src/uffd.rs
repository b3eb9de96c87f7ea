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

pub const PAGEMAP_SCAN: u64 = 0xc060_6610;
pub const PM_SCAN_WP_MATCHING: u64 = 1 << 0;
pub const PM_SCAN_CHECK_WPASYNC: u64 = 1 << 1;
pub const PAGE_IS_WRITTEN: u64 = 1 << 1;

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

/// PAGEMAP_SCAN for pages written since they were last protected, which it
/// protects again. Appends (start, len) ranges to `out`.
pub fn scan_written(
    pagemap: &std::fs::File,
    start: u64,
    end: u64,
    out: &mut Vec<(u64, u64)>,
) -> Result<()> {
    const N: usize = 512;
    let mut regions = vec![[0u64; 3]; N];
    let mut at = start;
    // Each call makes progress (walk_end advances) or finishes.
    for _ in 0..(1 << 24) {
        if at >= end {
            return Ok(());
        }
        let mut arg: [u64; 12] = [
            96,
            PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
            at,
            end,
            0,
            regions.as_mut_ptr() as u64,
            N as u64,
            0,
            0,
            PAGE_IS_WRITTEN,
            0,
            PAGE_IS_WRITTEN,
        ];
        let n = ioctl(pagemap, PAGEMAP_SCAN, arg.as_mut_ptr(), || {
            format!("scan written pages in {at:#x}-{end:#x}")
        })? as usize;
        for r in &regions[..n] {
            match out.last_mut() {
                Some((s, l)) if *s + *l == r[0] => *l += r[1] - r[0],
                _ => out.push((r[0], r[1] - r[0])),
            }
        }
        let walk_end = arg[4];
        if walk_end <= at {
            return Ok(());
        }
        at = walk_end;
    }
    Ok(())
}
