//! glibc's copy of each thread's id. glibc keeps the id of every thread in
//! the thread's descriptor (`struct pthread`, at the thread pointer:
//! `fs_base` on x86-64) and uses it for calls on a `pthread_t`:
//! `pthread_kill`, `pthread_getattr_np`, `pthread_getaffinity_np` and more.
//! When a process gets new ids at the destination (its pid was taken
//! there), those copies would name threads that do not exist: Java, for
//! one, aborts in `pthread_getattr_np` with ESRCH. So the restore rewrites
//! each thread's copy with its new id.
//!
//! Where the id lies in the descriptor is what glibc tells debuggers: the
//! dynamic symbol `_thread_db_pthread_tid` of `libc.so.6` (size in bits,
//! count, offset). The restore reads it from the file of the libc the
//! image maps, and rewrites a thread's copy only if every thread's copy
//! holds that thread's old id: a process without glibc, or with another
//! layout, is left alone. Nothing is added to the image. For a lazy
//! restore the capture sends the descriptor's pages with the handover
//! ([`handover_pages`]), so that the rewrite never waits for a page.
//!
//! Not rewritten: ids that a program copied elsewhere, such as the owner
//! of a mutex held across the migration (error-checking, recursive, robust
//! and priority-inheritance mutexes check it).

use crate::error::{Ctx, Result};
use crate::image::ProcessImage;
use crate::ptrace::Frozen;
use crate::sys;
use libc::pid_t;
use object::{Object, ObjectSection, ObjectSymbol};

/// The most bytes of a thread descriptor read or sent: glibc's
/// `struct pthread` is about 2.3 KiB on x86-64.
const DESCRIPTOR_BYTES: u64 = 4096;
const PAGE: u64 = 4096;

/// The pages of the thread descriptor at `fs_base`.
pub fn handover_pages(fs_base: u64) -> [u64; 2] {
    [
        fs_base & !(PAGE - 1),
        (fs_base + DESCRIPTOR_BYTES - 1) & !(PAGE - 1),
    ]
}

/// Whether `path` names glibc's shared C library.
fn is_glibc(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or("");
    name == "libc.so.6" || (name.starts_with("libc-2.") && name.ends_with(".so"))
}

/// Which file a path names now, and as of when: a library replaced or
/// rewritten in place (an upgrade) is another file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
}

fn file_id(path: &str) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(FileId {
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime: (m.mtime(), m.mtime_nsec()),
    })
}

/// The libraries looked up already ([`tid_offset_known`]).
static KNOWN: std::sync::Mutex<Vec<(String, FileId, Option<u64>)>> =
    std::sync::Mutex::new(Vec::new());

/// [`tid_offset`], looked up once per file: reading the symbol from the
/// file takes about 0.4 ms, which a restore would spend while the process
/// is stopped.
fn tid_offset_known(path: &str) -> Result<Option<u64>> {
    let id = file_id(path);
    let known = |k: &Vec<(String, FileId, Option<u64>)>| {
        k.iter()
            .find(|(p, i, _)| p == path && Some(*i) == id)
            .map(|k| k.2)
    };
    if let Some(off) = known(&KNOWN.lock().unwrap_or_else(|p| p.into_inner())) {
        return Ok(off);
    }
    let off = tid_offset(path)?;
    if let Some(id) = id {
        KNOWN
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((path.to_string(), id, off));
    }
    Ok(off)
}

/// Looks up the glibc this process runs with, ahead of a restore: a
/// restore that waits for its image does it (`pmig restore --wait-go`),
/// since the image's glibc is most often the same file, whose lookup then
/// costs one `stat` at the stop.
pub fn learn_own_glibc() {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return;
    };
    if let Some(lib) = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| is_glibc(p))
    {
        let _ = tid_offset_known(lib);
    }
}

/// The offset of the thread id in glibc's thread descriptor, as the library
/// at `path` describes it to debuggers; None if it does not.
fn tid_offset(path: &str) -> Result<Option<u64>> {
    let file = std::fs::File::open(path).ctx(|| format!("open {path}"))?;
    let cache = object::ReadCache::new(&file);
    let Ok(elf) = object::File::parse(&cache) else {
        return Ok(None);
    };
    let Some(sym) = elf
        .dynamic_symbols()
        .find(|s| s.name() == Ok("_thread_db_pthread_tid"))
    else {
        return Ok(None);
    };
    let Some(section) = sym
        .section_index()
        .and_then(|i| elf.section_by_index(i).ok())
    else {
        return Ok(None);
    };
    let Some((at, _)) = section.file_range() else {
        return Ok(None);
    };
    let mut desc = [0u8; 12];
    let pos = at + (sym.address() - section.address());
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut desc, pos)
        .ctx(|| format!("read the thread descriptor layout in {path}"))?;
    let word = |i: usize| u32::from_le_bytes(desc[i * 4..i * 4 + 4].try_into().unwrap_or_default());
    // (bits, count, offset): a 32-bit pid_t, one of it.
    if word(0) != 32 || word(1) != 1 || word(2) as u64 + 4 > DESCRIPTOR_BYTES {
        return Ok(None);
    }
    Ok(Some(word(2) as u64))
}

/// Rewrites glibc's copy of each thread's id in the restored process
/// (threads of `frozen`, in the image's order) where the ids changed.
/// Returns how many were rewritten; 0 if the ids are kept or the process
/// does not use glibc's layout. With `lazy`, pages missing from the image
/// are owed, and only descriptors the image holds are read.
pub fn rewrite_tids(pi: &ProcessImage, frozen: &Frozen, lazy: bool) -> Result<usize> {
    let pairs: Vec<(pid_t, pid_t, u64)> = pi
        .threads
        .threads
        .iter()
        .zip(&frozen.threads)
        .map(|(th, now)| {
            let fs_base = super::threads::regs_from_vec(&th.regs).fs_base;
            (th.tid, now.tid, fs_base)
        })
        .collect();
    if pairs.iter().all(|(old, new, _)| old == new) {
        return Ok(0);
    }
    let Some(lib) = pi.memory.vmas.iter().find_map(|v| {
        let f = v.file.as_ref()?;
        (v.offset == 0 && is_glibc(&f.path)).then_some(f.path.as_str())
    }) else {
        return Ok(0);
    };
    let Some(off) = tid_offset_known(lib)? else {
        return Ok(0);
    };
    let pid = frozen.pid;
    // In a lazy restore a page the image does not hold would be waited for
    // (from a server that is not running yet): only pages it holds are read.
    let in_image = |a: u64| {
        pi.memory
            .vmas
            .iter()
            .flat_map(|v| &v.runs)
            .any(|r| r.addr <= a && a + 4 <= r.addr + r.len)
    };
    for &(old, _, fs_base) in &pairs {
        if lazy && !in_image(fs_base + off) {
            tracing::debug!(
                "process {pid}: thread {old}'s descriptor is not in the image; ids left as they are"
            );
            return Ok(0);
        }
        let mut b = [0u8; 4];
        let read = sys::process_vm_read(pid, fs_base + off, &mut b).unwrap_or(0);
        if fs_base == 0 || read != 4 || i32::from_le_bytes(b) != old {
            tracing::debug!(
                "process {pid}: thread {old}'s descriptor does not hold its id at {off:#x}; ids left as they are"
            );
            return Ok(0);
        }
    }
    let mut n = 0;
    for &(old, new, fs_base) in &pairs {
        if old != new {
            sys::process_vm_write(pid, fs_base + off, &new.to_le_bytes())?;
            n += 1;
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_glibc_tells_where_a_thread_keeps_its_id() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let Some(lib) = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| is_glibc(p))
        else {
            return; // not linked with glibc: nothing to check
        };
        let off = tid_offset(lib)
            .unwrap()
            .expect("glibc describes its thread id");
        // Our own descriptor holds our id there.
        let mut fs_base = 0u64;
        // SAFETY: arch_prctl(ARCH_GET_FS) writes one u64.
        let rc = unsafe { libc::syscall(libc::SYS_arch_prctl, 0x1003, &mut fs_base) };
        assert_eq!(rc, 0);
        // SAFETY: reading 4 bytes of our own thread descriptor, which is
        // mapped while this thread runs.
        let id = unsafe { std::ptr::read_unaligned((fs_base + off) as *const i32) };
        // SAFETY: gettid takes no arguments.
        assert_eq!(id as libc::c_long, unsafe {
            libc::syscall(libc::SYS_gettid)
        });
    }

    #[test]
    fn only_glibc_is_read_and_descriptor_pages_are_covered() {
        assert!(is_glibc("/usr/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(is_glibc("/lib/libc-2.31.so"));
        assert!(!is_glibc("/usr/lib/libcrypto.so.3"));
        assert!(!is_glibc("/usr/lib/musl/libc.so"));
        assert_eq!(
            handover_pages(0x7f00_0000_0740),
            [0x7f00_0000_0000, 0x7f00_0000_1000]
        );
        assert_eq!(handover_pages(0x7f00_0000_0000), [0x7f00_0000_0000; 2]);
    }

    #[test]
    fn a_library_is_read_once_until_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libc.so.6");
        let lib = lib.to_str().unwrap();
        // Not an ELF file: no offset, remembered as such.
        std::fs::write(lib, b"not a library").unwrap();
        assert_eq!(tid_offset_known(lib).unwrap(), None);
        let entries = |p: &str| KNOWN.lock().unwrap().iter().filter(|k| k.0 == p).count();
        assert_eq!(entries(lib), 1);
        assert_eq!(tid_offset_known(lib).unwrap(), None);
        assert_eq!(entries(lib), 1, "looked up again though unchanged");
        // Replaced by another file (an upgrade): looked up again.
        let real = std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5).map(String::from))
            .find(|p| is_glibc(p));
        let Some(real) = real else {
            return; // not linked with glibc: the rest needs one
        };
        std::fs::copy(&real, dir.path().join("new")).unwrap();
        std::fs::rename(dir.path().join("new"), lib).unwrap();
        assert_eq!(
            tid_offset_known(lib).unwrap(),
            tid_offset(&real).unwrap(),
            "the replaced file's offset"
        );
        assert!(tid_offset_known(lib).unwrap().is_some());
        assert_eq!(entries(lib), 2);
    }
}
