//! Memory: every mapping of the address space, the populated pages of the
//! private ones, the mm fields (brk, arg/env, auxv, exe) and the vDSO.

use super::{Capture, Finish, PlanCx, Preflight, Resource};
use crate::error::{unsupported, Ctx, EngineError, Result};
use crate::procfs::{self, MapLine};
use crate::sys;
use libc::pid_t;
use pmig_image::PagesWriter;
use pmig_restorer::{Arg, Check};
use serde::{Deserialize, Serialize};
use std::os::unix::fs::{FileExt, MetadataExt};

pub struct Memory;

pub const PAGE: u64 = 4096;
/// Highest user address on x86_64 with 4-level paging.
pub const TASK_END: u64 = 0x7fff_ffff_f000;

const PM_PRESENT: u64 = 1 << 63;
const PM_SWAP: u64 = 1 << 62;
const PM_FILE: u64 = 1 << 61;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Backing {
    /// Private anonymous memory (heap, stacks, anonymous mmap).
    Anon,
    /// Shared anonymous memory used by this process only.
    SharedAnon,
    /// A file mapped privately; changed pages are in the image.
    PrivateFile,
    /// A file mapped shared; its contents stay in the file.
    SharedFile,
    /// System V shared memory (`shmat`), attached by this process only;
    /// its segments are in the `sysvshm` part (format 1.12).
    SysV,
}

/// A run of consecutive pages stored in the image's page data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    pub addr: u64,
    pub len: u64,
    /// Offset in pages.pmig.
    pub offset: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FileId {
    pub path: String,
    pub size: u64,
    pub mtime_ns: i128,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Vma {
    pub start: u64,
    pub end: u64,
    pub prot: i32,
    pub backing: Backing,
    pub growsdown: bool,
    pub file: Option<FileId>,
    pub offset: u64,
    /// madvise() advice to re-apply (MADV_* values).
    pub advice: Vec<i32>,
    pub locked: bool,
    /// For reports: the path or [heap]/[stack]/[anon:name].
    pub name: String,
    pub runs: Vec<Run>,
    /// Every populated page range at capture time, saved or not (a filtered
    /// capture saves only some; the destination drops pages it holds that
    /// are no longer populated here).
    pub present: Vec<(u64, u64)>,
}

impl Vma {
    pub fn len(&self) -> u64 {
        self.end - self.start
    }
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
    pub fn bytes_in_image(&self) -> u64 {
        self.runs.iter().map(|r| r.len).sum()
    }

    /// Pages populated at the source but not in the image (post-copy): the
    /// ranges of `present` less the image's runs.
    pub fn owed(&self) -> Vec<(u64, u64)> {
        let mut have: Vec<(u64, u64)> = self.runs.iter().map(|r| (r.addr, r.len)).collect();
        have.sort_unstable();
        subtract_ranges(&self.present, &have)
    }

    /// Whether this mapping's population is left to the page owner: in a
    /// post-copy handover image (`defer_population`) writable private
    /// anonymous memory is listed as wholly `present`, and the source tells
    /// the destination later which of those pages it never had.
    pub fn deferrable(&self) -> bool {
        self.backing == Backing::Anon && self.prot & libc::PROT_WRITE != 0
    }

    pub fn owes_pages(&self) -> bool {
        self.present.iter().map(|r| r.1).sum::<u64>() > self.bytes_in_image()
    }

    /// In a lazy restore: whether pages of this mapping come after the
    /// restore, through the userfaultfd it is registered with.
    fn comes_later(&self) -> bool {
        self.backing == Backing::Anon && self.owes_pages()
    }
}

/// The mm fields set back with PR_SET_MM_MAP.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MmFields {
    pub start_code: u64,
    pub end_code: u64,
    pub start_data: u64,
    pub end_data: u64,
    pub start_brk: u64,
    pub brk: u64,
    pub start_stack: u64,
    pub arg_start: u64,
    pub arg_end: u64,
    pub env_start: u64,
    pub env_end: u64,
    pub auxv: Vec<u64>,
    pub exe: FileId,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemoryState {
    pub vmas: Vec<Vma>,
    pub mm: MmFields,
    /// Start of the vvar pages and total length of vvar + vDSO.
    pub vdso: Option<(u64, u64)>,
    pub vdso_text: Option<u64>,
}

/// Mapping flags the `memory` part of format 1.3 has no field for, in a
/// part of their own (format 1.4), written only when some mapping has one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryFlags {
    /// Starts of the mappings made with `MAP_NORESERVE` (`nr` in smaps'
    /// `VmFlags`): no swap reserved, so a sparse mapping larger than the
    /// node's memory can exist (JVM heaps reserve this way).
    pub noreserve: Vec<u64>,
}

impl MemoryFlags {
    pub const PART: &'static str = "memflags";

    pub fn is_empty(&self) -> bool {
        self.noreserve.is_empty()
    }
}

impl MemoryState {
    pub fn image_bytes(&self) -> u64 {
        self.vmas.iter().map(Vma::bytes_in_image).sum()
    }
}

fn file_id(path: &str, via: &str) -> Result<FileId> {
    file_id_and_inode(path, via).map(|(id, _)| id)
}

/// [`file_id`], and the file's device and inode number.
fn file_id_and_inode(path: &str, via: &str) -> Result<(FileId, (u64, u64))> {
    let md = std::fs::metadata(via).ctx(|| format!("stat {path}"))?;
    let id = FileId {
        path: path.to_string(),
        size: md.size(),
        mtime_ns: md.mtime() as i128 * 1_000_000_000 + md.mtime_nsec() as i128,
    };
    Ok((id, (md.dev(), md.ino())))
}

/// Whether a mapped file found `now` is the one the capture named `id`:
/// its size and modification time, or, with `size_only`, its size. The
/// file of a shared mapping is the mapping's memory: the process's own
/// writes (a JVM's performance counters, SQLite's WAL index) change its
/// times while it runs. A skeleton, built from a capture taken while it
/// ran, checks such a file by its size alone, and by its times too at the
/// bring-up, when the capture of the stop was taken of the frozen process
/// ([`check_shared_files`]); a restore from the capture of the stop checks
/// both at once.
fn still_there(id: &FileId, now: &FileId, size_only: bool) -> bool {
    now.size == id.size && (size_only || now.mtime_ns == id.mtime_ns)
}

/// The bring-up's check of the files the process maps shared (see
/// [`still_there`]): each as the capture of the stop found it, or the
/// skeleton is stale (a file of the same path and size that is another,
/// on a node that does not share the source's file system, is refused
/// there by the ordinary restore).
fn check_shared_files(fin: &MemoryState) -> Result<()> {
    // Each file once, however many mappings show it (all of one capture).
    let mut seen = std::collections::HashSet::new();
    for v in &fin.vmas {
        let Some(id) = v.file.as_ref().filter(|_| v.backing == Backing::SharedFile) else {
            continue;
        };
        if super::ghosts::is_ghost_mapping(&id.path) || !seen.insert(id.path.as_str()) {
            continue;
        }
        let here = file_id(&id.path, &id.path).ok();
        if here.is_none_or(|h| !still_there(id, &h, false)) {
            return Err(crate::error::stale(format!(
                "file {} (mapped shared) is not here as the stop found it",
                id.path
            )));
        }
    }
    Ok(())
}

/// A mapping's file as a layout compares it: without the times of a
/// shared mapping's file (see [`still_there`]).
fn file_key(v: &Vma) -> Option<(&str, u64, i128)> {
    let f = v.file.as_ref()?;
    let mtime_ns = if v.backing == Backing::SharedFile {
        0
    } else {
        f.mtime_ns
    };
    Some((&f.path, f.size, mtime_ns))
}

/// The key of the executable in [`Preflight::mapped_files`].
pub const EXE_KEY: &str = "\0exe";

/// Part `mapids` (format 1.8): each mapped file and the executable, by
/// path ([`super::files::HeldInodes`]). A program that mapped a file, or
/// was started from a directory, only root may read, and then gave up its
/// privileges, gets them back on the same machine.
pub type MappedIds = super::files::HeldInodes<String>;

impl MappedIds {
    pub const PART: &'static str = "mapids";
}

fn is_special(path: &str) -> bool {
    matches!(path, "[vdso]" | "[vvar]" | "[vvar_vclock]" | "[vsyscall]")
}

/// The `VmFlags` of smaps a capture reads: the advice and lock
/// ([`advice_of`]), `MAP_NORESERVE` and `MAP_GROWSDOWN`.
const CARRIED_FLAGS: [&str; 9] = ["hg", "nh", "dd", "dc", "wf", "mg", "lo", "nr", "gd"];

/// The flags [`Layout::carried_to`] takes over only to a mapping that did not
/// change: a copy of a mapping of a process that forks (don't-fork,
/// wipe-on-fork) and a stack that grows down would behave otherwise if
/// the mapping were new memory that took them by mistake.
const EXACT_FLAGS: [&str; 3] = ["dc", "wf", "gd"];

/// The flags of `flags` a capture reads (see [`CARRIED_FLAGS`]), in the
/// order smaps gives them.
fn carried_flags(flags: &[String]) -> Vec<String> {
    flags
        .iter()
        .filter(|f| CARRIED_FLAGS.contains(&f.as_str()))
        .cloned()
        .collect()
}

fn advice_of(flags: &[String]) -> (Vec<i32>, bool) {
    let mut adv = Vec::new();
    let mut locked = false;
    for f in flags {
        match f.as_str() {
            "hg" => adv.push(libc::MADV_HUGEPAGE),
            "nh" => adv.push(libc::MADV_NOHUGEPAGE),
            "dd" => adv.push(libc::MADV_DONTDUMP),
            "dc" => adv.push(libc::MADV_DONTFORK),
            "wf" => adv.push(libc::MADV_WIPEONFORK),
            "mg" => adv.push(libc::MADV_MERGEABLE),
            "lo" => locked = true,
            _ => {}
        }
    }
    (adv, locked)
}

/// Who else maps the shared object (dev, inode)? Returns another pid.
fn other_mapper(pid: pid_t, dev: &str, inode: u64) -> Option<pid_t> {
    let probe = MapLine {
        dev: dev.to_string(),
        inode,
        ..Default::default()
    };
    other_mapper_of(pid, &[(&probe, false)]).map(|(p, _)| p)
}

/// Which other process maps one of the files of `wanted` (their device
/// and inode): shared, or at all where its flag is set. Returns the first
/// found, with the entry of `wanted` it maps. One pass over every process.
fn other_mapper_of<'a>(
    pid: pid_t,
    wanted: &[(&'a MapLine, bool)],
) -> Option<(pid_t, (&'a MapLine, bool))> {
    let rd = std::fs::read_dir("/proc").ok()?;
    for e in rd.flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<pid_t>().ok()) else {
            continue;
        };
        if p == pid {
            continue;
        }
        if let Ok(text) = procfs::slurp(&format!("/proc/{p}/maps")) {
            for m in procfs::parse_maps(&text) {
                if let Some(&w) = wanted.iter().find(|(w, private_too)| {
                    (m.shared || *private_too) && m.inode == w.inode && m.dev == w.dev
                }) {
                    return Some((p, w));
                }
            }
        }
    }
    None
}

/// A shared anonymous mapping (`MAP_SHARED | MAP_ANONYMOUS`, or of
/// `/dev/zero`): an object of its own in the kernel's shmem.
fn is_shared_anon(m: &MapLine) -> bool {
    let p = m.path.as_str();
    m.shared
        && (p == "/dev/zero (deleted)"
            || p.starts_with("[anon_shmem:")
            || (m.inode != 0 && p.is_empty()))
}

/// Refuses two mappings of the same pages of one shared anonymous object
/// (a second view made with `mremap(old, 0, …)`): each mapping is restored
/// as an object of its own, which would part the views. Parts of one object
/// that do not overlap (a mapping split by `mprotect`) are fine.
fn check_aliases(pid: pid_t, maps: &[MapLine]) -> Result<()> {
    let mut seen: Vec<&MapLine> = Vec::new();
    for m in maps.iter().filter(|m| is_shared_anon(m)) {
        let (lo, hi) = (m.offset, m.offset + (m.end - m.start));
        if let Some(o) = seen.iter().find(|o| {
            o.inode == m.inode
                && o.dev == m.dev
                && o.offset < hi
                && lo < o.offset + (o.end - o.start)
        }) {
            return Err(unsupported(
                pid,
                format!(
                    "shared anonymous memory mapped twice (the same pages at {:#x} and {:#x})",
                    o.start, m.start
                ),
            ));
        }
        seen.push(m);
    }
    Ok(())
}

/// Refuses a mapped memfd or deleted file that cannot move (see
/// [`super::ghosts`]): one that is not a regular file without a name left,
/// small enough; a memfd of huge pages; one another live process holds, or
/// maps shared (the two copies would drift apart). Another process may map
/// it privately (a library replaced by an upgrade, mapped by every process
/// started before), unless this one could write it: maps it shared, or
/// holds it.
fn check_ghost_maps(pid: pid_t, maps: &[MapLine]) -> Result<()> {
    // The deleted files and memfds the process holds, which it may write.
    let held: Vec<(u64, u64)> = if maps
        .iter()
        .any(|m| super::ghosts::is_ghost_mapping(&m.path))
    {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|rd| {
                rd.flatten()
                    .filter(|e| {
                        std::fs::read_link(e.path()).is_ok_and(|l| {
                            super::ghosts::deleted_path(&l.to_string_lossy()).is_some()
                        })
                    })
                    .filter_map(|e| std::fs::metadata(e.path()).ok())
                    .map(|md| (md.dev(), md.ino()))
                    .collect()
            })
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let mut seen: Vec<(u64, u64)> = Vec::new();
    // Each file once, and whether another process's private mapping of it
    // counts too.
    let mut wanted: Vec<(&MapLine, bool)> = Vec::new();
    for m in maps
        .iter()
        .filter(|m| super::ghosts::is_ghost_mapping(&m.path))
    {
        let via = format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end);
        let f = match std::fs::File::open(&via) {
            Ok(f) => f,
            // Unmapped since the maps were read.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).ctx(|| format!("open {via} ({})", m.path)),
        };
        // Mapped again since the maps were read (the checks before the
        // freeze look at a process that runs): the file it maps now, as
        // our own descriptor names it, decides; the capture of the frozen
        // process looks at it again.
        if procfs::link_of(&f).is_ok_and(|l| !super::ghosts::is_ghost_mapping(&l)) {
            continue;
        }
        let md = f.metadata().ctx(|| format!("stat {via} ({})", m.path))?;
        if seen.contains(&(md.dev(), md.ino())) {
            continue;
        }
        seen.push((md.dev(), md.ino()));
        if let Some(why) = super::ghosts::refusal(&md) {
            return Err(unsupported(
                pid,
                format!("{why} (mapped at {:#x}: {})", m.start, m.path),
            ));
        }
        super::ghosts::refuse_huge(pid, &f, &m.path)?;
        let writes = held.contains(&(md.dev(), md.ino()))
            || maps
                .iter()
                .any(|o| o.shared && o.inode == m.inode && o.dev == m.dev);
        wanted.push((m, writes));
    }
    // One pass over every other process's mappings for them all.
    if !wanted.is_empty() {
        if let Some((other, (m, writes))) = other_mapper_of(pid, &wanted) {
            return Err(unsupported(
                pid,
                format!(
                    "{} mapped by another live process too (pid {other}{})",
                    m.path,
                    if writes { "" } else { ", shared" }
                ),
            ));
        }
    }
    super::holders::HeldAlone {
        ghosts: seen,
        ..Default::default()
    }
    .refuse_shared(pid)
}

fn classify(pid: pid_t, m: &MapLine) -> Result<Option<Backing>> {
    let p = m.path.as_str();
    if is_special(p) {
        return Ok(None);
    }
    if super::sysvshm::is_sysv(p) {
        // Checked as a whole by the sysvshm part.
        return Ok(Some(Backing::SysV));
    }
    if p.starts_with("anon_inode:") {
        return Err(unsupported(pid, format!("a mapping of {p}")));
    }
    let anon = p.is_empty()
        || p == "[heap]"
        || p == "[stack]"
        || p.starts_with("[anon:")
        || p.starts_with("[stack:");
    if is_shared_anon(m) {
        if let Some(other) = other_mapper(pid, &m.dev, m.inode) {
            return Err(unsupported(
                pid,
                format!(
                    "memory shared with another live process (pid {other}) at {:#x}",
                    m.start
                ),
            ));
        }
        return Ok(Some(Backing::SharedAnon));
    }
    if anon {
        return Ok(Some(if m.shared {
            Backing::SharedAnon
        } else {
            Backing::Anon
        }));
    }
    // The ring of an asynchronous I/O context (io_setup) is mapped from
    // the aio file system, and reads as a deleted file.
    if p.starts_with("/[aio]") {
        return Err(unsupported(
            pid,
            format!(
                "an asynchronous I/O context (io_setup; its ring at {:#x})",
                m.start
            ),
        ));
    }
    // A memfd or a file deleted since it was mapped: mapped from the file
    // made again (see `ghosts`).
    if !p.starts_with('/') {
        return Err(unsupported(pid, format!("a mapping of {p}")));
    }
    Ok(Some(if m.shared {
        Backing::SharedFile
    } else {
        Backing::PrivateFile
    }))
}

/// The runs of pages to save in [start, end): with PAGEMAP_SCAN, which
/// reports runs, else by reading the pagemap entry of every page.
fn page_runs(
    pagemap: &std::fs::File,
    start: u64,
    end: u64,
    backing: Backing,
) -> Result<Vec<(u64, u64)>> {
    use crate::uffd::{PAGE_IS_PRESENT, PAGE_IS_SWAPPED};
    let Some(masks) = populated_masks(backing, PAGE_IS_PRESENT | PAGE_IS_SWAPPED) else {
        return Ok(Vec::new());
    };
    match scan_populated(pagemap, start, end, masks)? {
        Some(cat) => {
            let mut runs = Vec::new();
            for (a, n, _) in cat {
                push_run(&mut runs, a, n);
            }
            Ok(runs)
        }
        // No PAGEMAP_SCAN (before Linux 6.7).
        None => page_runs_read(pagemap, start, end, backing),
    }
}

/// The page scan's masks for the pages of a `backing` mapping that hold
/// data of their own, reporting the categories `ret`: present or swapped,
/// and neither the shared zero page (which a read of a page never written,
/// or released, maps: it holds zeros, like no page at all) nor, for a file
/// mapped privately, the file's own page (only private copies count).
/// `None` for a shared file mapping, whose pages are the file's.
///
/// A zero page must not count: pre-copy's destination keeps, for every page
/// the image of the stop lists as populated, the copy an earlier round sent,
/// and a page released since then (`MADV_DONTNEED`) and read again maps the
/// zero page without being written.
fn populated_masks(backing: Backing, ret: u64) -> Option<crate::uffd::ScanMasks> {
    use crate::uffd::{ScanMasks, PAGE_IS_FILE, PAGE_IS_PFNZERO, PAGE_IS_PRESENT, PAGE_IS_SWAPPED};
    let not = match backing {
        Backing::Anon | Backing::SharedAnon | Backing::SysV => PAGE_IS_PFNZERO,
        Backing::PrivateFile => PAGE_IS_PFNZERO | PAGE_IS_FILE,
        Backing::SharedFile => return None,
    };
    Some(ScanMasks {
        inverted: not,
        mask: not,
        anyof: PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
        ret,
    })
}

/// PAGEMAP_SCAN of [start, end) with `masks` (whose `ret` has
/// `PAGE_IS_PRESENT` and `PAGE_IS_SWAPPED`): the runs with their
/// categories, less the page-table markers a write tracker leaves in empty
/// entries ([`crate::uffd::drop_markers`]). `None` without PAGEMAP_SCAN.
fn scan_populated(
    pagemap: &std::fs::File,
    start: u64,
    end: u64,
    masks: crate::uffd::ScanMasks,
) -> Result<Option<Vec<(u64, u64, u64)>>> {
    let mut cat = Vec::new();
    if crate::uffd::pagemap_scan_categories(pagemap, 0, start, end, masks, &mut cat).is_err() {
        return Ok(None);
    }
    crate::uffd::drop_markers(pagemap, &mut cat)?;
    Ok(Some(cat))
}

/// The pages of the shared memory mapping `[start, end)` of `pid` (shared
/// anonymous or System V), at `offset` in its shmem object, that hold data,
/// as address ranges: the object's data extents, read through the mapping
/// (`SEEK_DATA` on `/proc/PID/map_files/START-END`). Unlike the page
/// tables, these count a page swapped out, or released from the mapping
/// (`MADV_DONTNEED` keeps a shared page's data) and not touched since.
pub(crate) fn shmem_data_runs(
    pid: pid_t,
    start: u64,
    end: u64,
    offset: u64,
) -> std::io::Result<Vec<(u64, u64)>> {
    let via = format!("/proc/{pid}/map_files/{start:x}-{end:x}");
    let f = std::fs::File::open(&via)?;
    let len = end - start;
    let ext = super::ghosts::extents_of(&f, offset + len)?;
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (o, n) in ext {
        let (lo, hi) = (o.max(offset), (o + n).min(offset + len));
        if lo < hi {
            let a = start + (lo / PAGE * PAGE - offset);
            let e = start + (hi.div_ceil(PAGE) * PAGE - offset);
            // Extents are whole pages in shmem; rounding never overlaps.
            let a = out.last().map_or(a, |&(s, n)| a.max(s + n));
            if a < e {
                push_run(&mut out, a, e - a);
            }
        }
    }
    Ok(out)
}

/// [`page_runs`] by reading the pagemap of [start, end).
fn page_runs_read(
    pagemap: &std::fs::File,
    start: u64,
    end: u64,
    backing: Backing,
) -> Result<Vec<(u64, u64)>> {
    let n = ((end - start) / PAGE) as usize;
    let mut runs: Vec<(u64, u64)> = Vec::new();
    let batch = 1 << 16;
    let mut buf = vec![0u8; batch * 8];
    let mut i = 0;
    while i < n {
        let cnt = batch.min(n - i);
        let bytes = &mut buf[..cnt * 8];
        pagemap
            .read_exact_at(bytes, (start / PAGE + i as u64) * 8)
            .ctx(|| format!("read pagemap at {start:#x}"))?;
        for k in 0..cnt {
            let e = u64::from_le_bytes(bytes[k * 8..k * 8 + 8].try_into().unwrap());
            let keep = match backing {
                Backing::Anon | Backing::SharedAnon | Backing::SysV => {
                    e & (PM_PRESENT | PM_SWAP) != 0
                }
                // Present and not the file's own page (so a private copy), or swapped.
                Backing::PrivateFile => {
                    (e & PM_PRESENT != 0 && e & PM_FILE == 0) || e & PM_SWAP != 0
                }
                Backing::SharedFile => false,
            };
            if keep {
                let addr = start + (i + k) as u64 * PAGE;
                match runs.last_mut() {
                    Some((a, l)) if *a + *l == addr => *l += PAGE,
                    _ => runs.push((addr, PAGE)),
                }
            }
        }
        i += cnt;
    }
    Ok(runs)
}

/// The mappings of a process read while it still runs, so that the stop need
/// not read `/proc/PID/smaps`. Reading smaps walks every page table (about
/// 13 ms per GiB here); `/proc/PID/maps` lists the same mappings without their
/// `VmFlags` and costs the same at any size. At the stop, [`Layout::current`]
/// reads maps and keeps this layout's flags if every mapping is still the
/// same and the locked total (`VmLck`) has not changed. A program that maps
/// and unmaps memory all the time (an allocator under several threads)
/// rarely leaves every mapping alone for that long: then each mapping takes
/// the flags of what this layout had where it lies, and private anonymous
/// memory mapped since, none (see [`Layout::carried_to`]). Only what cannot
/// be carried that way (a file mapped since, flags that differ within one
/// mapping, a changed mapping that had don't-fork, wipe-on-fork or
/// grows-down, a locked total that does not add up) makes it read smaps
/// again.
///
/// What this cannot see: a `madvise` that changes only the advice of a whole
/// mapping (huge pages, don't-dump, don't-fork, wipe-on-fork, mergeable)
/// between [`Layout::read`] and the freeze (the smaps read itself, or, for
/// pre-copy's holder, which reads during the rounds, up to a second and a
/// round), nor the advice or `MAP_NORESERVE` of anonymous memory mapped in
/// that time. [`Layout::changed_flags`] names such mappings afterwards,
/// while the process is still frozen.
#[derive(Debug, Clone)]
pub struct Layout {
    maps: Vec<MapLine>,
    locked_kib: u64,
}

impl Layout {
    /// A `syscall` instruction of `pid` found in these mappings (see
    /// [`crate::ptrace::syscall_gadget`]), to offer the freeze
    /// ([`crate::ptrace::Frozen::offer_gadget`]).
    pub fn syscall_gadget(&self, pid: pid_t) -> Option<u64> {
        crate::ptrace::syscall_gadget(
            pid,
            self.maps.iter().map(|m| {
                (
                    m.start,
                    m.end,
                    m.read && m.exec && !m.write,
                    m.path == "[vdso]",
                )
            }),
        )
    }

    /// About how many bytes of private pages a capture at the stop will
    /// copy, as smaps counted them when the layout was read: every private
    /// page no file holds, but, when `defer_population` (a post-copy
    /// handover), not those of writable anonymous memory. An estimate, for
    /// sizing what is prepared before the freeze.
    pub fn private_bytes(&self, defer_population: bool) -> u64 {
        self.maps
            .iter()
            .filter(|m| {
                let anon = m.path.is_empty() || m.path.starts_with('[');
                !(defer_population && anon && m.write && !m.shared)
            })
            .map(|m| m.anon_kib * 1024)
            .sum()
    }
}

/// Whether two lines of `/proc/PID/maps` describe the same mapping.
fn same_mapping(a: &MapLine, b: &MapLine) -> bool {
    (
        a.start, a.end, a.read, a.write, a.exec, a.shared, a.offset, a.inode,
    ) == (
        b.start, b.end, b.read, b.write, b.exec, b.shared, b.offset, b.inode,
    ) && a.dev == b.dev
        && a.path == b.path
}

/// Sum of the sizes of the mappings flagged `lo` (mlocked), in KiB.
fn locked_kib_of(maps: &[MapLine]) -> u64 {
    maps.iter()
        .filter(|m| m.flags.iter().any(|f| f == "lo"))
        .map(|m| (m.end - m.start) / 1024)
        .sum()
}

/// `VmLck` of /proc/PID/status, in KiB.
fn vm_locked_kib(pid: pid_t) -> Result<u64> {
    Ok(locked_kib_in(&procfs::status(pid)?))
}

/// `VmLck` of a status read, in KiB.
fn locked_kib_in(st: &std::collections::HashMap<String, String>) -> u64 {
    st.get("VmLck")
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

impl Layout {
    /// Reads the mappings of `pid` with their flags (`/proc/PID/smaps`).
    pub fn read(pid: pid_t) -> Result<Layout> {
        let maps = procfs::smaps(pid)?;
        let locked_kib = vm_locked_kib(pid)?;
        Ok(Layout { maps, locked_kib })
    }

    /// [`Layout::read`], the locked total known.
    fn read_smaps(pid: pid_t, locked_kib: u64) -> Result<Layout> {
        let maps = procfs::smaps(pid)?;
        Ok(Layout { maps, locked_kib })
    }

    /// Whether the mappings `now` (from `/proc/PID/maps`) and the locked total
    /// `locked_kib` are what this layout saw.
    fn still_holds(&self, now: &[MapLine], locked_kib: u64) -> bool {
        self.maps.len() == now.len()
            && self.maps.iter().zip(now).all(|(a, b)| same_mapping(a, b))
            && locked_kib == self.locked_kib
            && locked_kib == locked_kib_of(&self.maps)
    }

    /// The mappings of the (frozen) process `pid` with their flags: this
    /// layout if it still holds, carried over to the mappings of now if
    /// they can be, else read again (then the flag is true: nothing to
    /// check afterwards). `locked_kib`: its locked total (`VmLck`), read
    /// while no page of the capture's own was mapped.
    pub fn current(self, pid: pid_t, locked_kib: u64) -> Result<(Layout, bool)> {
        let now = procfs::maps(pid)?;
        if self.still_holds(&now, locked_kib) {
            return Ok((self, false));
        }
        if let Some(maps) = self.carried_to(&now, locked_kib) {
            tracing::debug!(
                "process {pid}: its mappings changed since they were read; their flags carried over"
            );
            return Ok((Layout { maps, locked_kib }, false));
        }
        tracing::debug!(
            "process {pid}: its mappings changed since they were read; reading smaps again"
        );
        Ok((Layout::read_smaps(pid, locked_kib)?, true))
    }

    /// The mappings `now` (from `/proc/PID/maps`) with the flags a capture
    /// uses (see [`CARRIED_FLAGS`]) taken from this layout: each mapping
    /// takes those of the mappings of the same object (the same file, or
    /// anonymous memory) it overlaps here, which must all agree; private
    /// anonymous memory that overlaps none was mapped since, and takes
    /// none. None where that does not hold (a file or shared memory mapped
    /// since, a mapping over another object, flags that disagree), where a
    /// mapping that changed had flags that decide what a fork or a growing
    /// stack does (see [`EXACT_FLAGS`]), or when the locked total
    /// `locked_kib` is not that of the result.
    fn carried_to(&self, now: &[MapLine], locked_kib: u64) -> Option<Vec<MapLine>> {
        let same_object = |a: &MapLine, b: &MapLine| {
            (a.shared, a.inode, &a.dev, &a.path) == (b.shared, b.inode, &b.dev, &b.path)
        };
        let mut out = Vec::with_capacity(now.len());
        for n in now {
            let i = self.maps.partition_point(|b| b.end <= n.start);
            let mut over = self.maps[i..].iter().take_while(|b| b.start < n.end);
            let mut line = n.clone();
            match over.next() {
                Some(first) => {
                    let flags = carried_flags(&first.flags);
                    let unchanged = same_mapping(first, n);
                    if !same_object(first, n)
                        || !over.all(|b| same_object(b, n) && carried_flags(&b.flags) == flags)
                        || (!unchanged && flags.iter().any(|f| EXACT_FLAGS.contains(&f.as_str())))
                    {
                        return None;
                    }
                    line.flags = flags;
                }
                None if n.path.is_empty() && !n.shared => line.flags = Vec::new(),
                None => return None,
            }
            out.push(line);
        }
        (locked_kib_of(&out) == locked_kib).then_some(out)
    }

    /// The mappings whose advice, lock or `MAP_NORESERVE` differs between
    /// this layout and `pid`'s smaps now, as "start-end" (hex).
    pub fn changed_flags(&self, pid: pid_t) -> Result<Vec<String>> {
        let now = procfs::smaps(pid)?;
        Ok(flag_changes(&self.maps, &now))
    }
}

/// Mappings of `now` whose flags a capture reads (advice, lock,
/// `MAP_NORESERVE`) are not what `before` said.
fn flag_changes(before: &[MapLine], now: &[MapLine]) -> Vec<String> {
    now.iter()
        .filter(|n| {
            let was = before.iter().find(|b| same_mapping(b, n));
            was.is_none_or(|b| carried_flags(&b.flags) != carried_flags(&n.flags))
        })
        .map(|n| format!("{:x}-{:x}", n.start, n.end))
        .collect()
}

/// The populated pages of a frozen process's private mappings, scanned in
/// another thread while the rest of the process is captured (the scan of
/// 1 GiB takes about 3.5 ms here). Keyed by the mapping's bounds when it was
/// scanned: the capture takes a mapping's runs only if it has the same
/// bounds, and scans anything else itself. A frozen process's pages do not
/// change; the calls the capture makes inside it write only to its scratch
/// page, a mapping of its own.
#[derive(Debug, Default)]
pub struct PreScan {
    runs: std::collections::HashMap<(u64, u64, Backing), Vec<(u64, u64)>>,
    /// With [`ScanFor::Written`]: the private anonymous pages not
    /// write-protected by an asynchronous userfaultfd, i.e. written since
    /// pre-copy's last round protected them (or never protected at all).
    written: Option<Vec<(u64, u64)>>,
    /// With [`ScanFor::Written`]: the mappings whose written pages were
    /// looked for (private anonymous and private file mappings), as
    /// (start, len), sorted.
    written_scope: Vec<(u64, u64)>,
}

/// What a [`PreScan`] looks for besides the populated pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanFor {
    Populated,
    /// Also which anonymous pages were written since they were
    /// write-protected, in the same walk of the page tables.
    Written,
}

/// A [`PreScan`] of a frozen process that another thread makes beside its
/// capture ([`side_scan`]), unless the capture needs it before that thread
/// has taken it on: whoever claims it first makes it. The capture then
/// never waits for a thread that has had no CPU yet (one kept off a CPU
/// that a task busy in the kernel holds, say).
pub struct SideScan {
    shared: std::sync::Arc<SideShared>,
    rx: std::sync::mpsc::Receiver<Result<PreScan>>,
}

/// The other thread's end of a [`SideScan`].
pub struct SideScanner {
    shared: std::sync::Arc<SideShared>,
    tx: std::sync::mpsc::SyncSender<Result<PreScan>>,
}

/// What is called with a [`SideScan`]'s scan, by whichever end made it,
/// before the capture has it.
pub type OnScan = Box<dyn FnOnce(&Result<PreScan>) + Send>;

/// What both ends of a [`SideScan`] hold: the scan's parameters, the
/// claim, and what sees the scan.
struct SideShared {
    pid: pid_t,
    defer_population: bool,
    what: ScanFor,
    /// Set by whoever takes the scan on.
    claim: std::sync::atomic::AtomicBool,
    on_scan: std::sync::Mutex<Option<OnScan>>,
}

impl SideShared {
    /// Whether the scan was already claimed; claims it either way.
    fn claimed(&self) -> bool {
        self.claim.swap(true, std::sync::atomic::Ordering::SeqCst)
    }

    /// Makes the scan, and calls `on_scan` with it.
    fn scan(&self) -> Result<PreScan> {
        let scan = PreScan::scan(self.pid, self.defer_population, self.what);
        let f = self.on_scan.lock().map(|mut f| f.take());
        if let Ok(Some(f)) = f {
            f(&scan);
        }
        scan
    }
}

/// A [`SideScan`] of `pid` (see [`PreScan::scan`]) and the end that makes
/// it in another thread; `on_scan` sees the scan whoever makes it.
pub fn side_scan(
    pid: pid_t,
    defer_population: bool,
    what: ScanFor,
    on_scan: Option<OnScan>,
) -> (SideScan, SideScanner) {
    let shared = std::sync::Arc::new(SideShared {
        pid,
        defer_population,
        what,
        claim: std::sync::atomic::AtomicBool::new(false),
        on_scan: std::sync::Mutex::new(on_scan),
    });
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    (
        SideScan {
            shared: shared.clone(),
            rx,
        },
        SideScanner { shared, tx },
    )
}

/// Dropped untaken (a capture that failed first), it is claimed: the
/// other thread, if it has not begun, makes no scan.
impl Drop for SideScan {
    fn drop(&mut self) {
        self.shared.claimed();
    }
}

impl SideScan {
    /// A scan already made (`made`), for the capture to take as it is.
    #[cfg(test)]
    pub(crate) fn made(made: Result<PreScan>) -> SideScan {
        let (side, scanner) = side_scan(0, false, ScanFor::Populated, None);
        side.shared.claimed();
        // Kept in the channel after its sender is gone.
        let _ = scanner.tx.send(made);
        side
    }

    /// The scan: the other thread's, waited for, if it took it on; else
    /// made here and now. A scanner gone without a word gives none (the
    /// capture then reads each mapping's pages itself).
    pub fn take(self) -> Result<PreScan> {
        if self.shared.claimed() {
            return self.rx.recv().unwrap_or_else(|_| Ok(PreScan::default()));
        }
        crate::timing::mark("memory: pages scanned by the capture");
        self.shared.scan()
    }
}

impl SideScanner {
    /// Makes the scan unless the capture has taken it on, and hands it
    /// over. Says whether it was made.
    pub fn scan(self) -> bool {
        if self.shared.claimed() {
            return false;
        }
        let _ = self.tx.send(self.shared.scan());
        true
    }
}

impl PreScan {
    /// Scans the private mappings `pid` has now (it must be frozen). With
    /// `defer_population`, writable private anonymous mappings are left out
    /// (see [`Vma::deferrable`]).
    pub fn scan(pid: pid_t, defer_population: bool, what: ScanFor) -> Result<PreScan> {
        let mut jobs = Vec::new();
        for m in procfs::maps(pid)? {
            if m.shared {
                continue;
            }
            // Unsupported mappings are refused by the capture itself.
            if let Ok(Some(b)) = classify(pid, &m) {
                if defer_population && b == Backing::Anon && m.write {
                    continue;
                }
                jobs.push((m.start, m.end, b));
            }
        }
        // The scan walks page tables: about 4-7 ms per GiB here, on the
        // stop's critical path. Above 64 MiB it is split in two halves by
        // address, each scanned by its own thread, where this thread may
        // use two CPUs or more (the holder keeps the scan off the CPU of
        // the capture, whose calls into the process would wait behind it).
        let total: u64 = jobs.iter().map(|j| j.1 - j.0).sum();
        let halves = if total > 64 << 20 && crate::ptrace::usable_cpus() >= 2 {
            split_by_size(&jobs, total / 2 / PAGE * PAGE)
        } else {
            [jobs.clone(), Vec::new()]
        };
        // (start of the piece, its runs, its written runs)
        type Scanned = Vec<(u64, Vec<(u64, u64)>, Vec<(u64, u64)>)>;
        let scan_pieces = |pieces: &[(u64, u64, Backing)]| -> Result<Scanned> {
            let pagemap = std::fs::File::open(format!("/proc/{pid}/pagemap"))
                .ctx(|| format!("open /proc/{pid}/pagemap"))?;
            pieces
                .iter()
                .map(|&(a, e, b)| {
                    if what == ScanFor::Written && matches!(b, Backing::Anon | Backing::PrivateFile)
                    {
                        let (present, written) = populated_and_written(&pagemap, a, e, b)?;
                        Ok((a, present, written))
                    } else {
                        Ok((a, page_runs(&pagemap, a, e, b)?, Vec::new()))
                    }
                })
                .collect()
        };
        let (first, second) = std::thread::scope(|s| {
            let h = (!halves[1].is_empty()).then(|| s.spawn(|| scan_pieces(&halves[1])));
            let first = scan_pieces(&halves[0]);
            let second = match h {
                Some(h) => h.join().unwrap_or_else(|_| {
                    Err(EngineError::Other("the page scan thread panicked".into()))
                }),
                None => Ok(Vec::new()),
            };
            (first, second)
        });
        let mut pieces = first?;
        pieces.extend(second?);
        let mut runs = std::collections::HashMap::new();
        for &(a, e, b) in &jobs {
            let mut r: Vec<(u64, u64)> = Vec::new();
            for (_, got, _) in pieces.iter().filter(|(s, _, _)| *s >= a && *s < e) {
                for &(x, n) in got {
                    push_run(&mut r, x, n);
                }
            }
            runs.insert((a, e, b), r);
        }
        let written = (what == ScanFor::Written).then(|| {
            let mut w: Vec<(u64, u64)> = Vec::new();
            for (_, _, got) in &pieces {
                for &(x, n) in got {
                    push_run(&mut w, x, n);
                }
            }
            w
        });
        let written_scope = match what {
            ScanFor::Written => jobs
                .iter()
                .filter(|(_, _, b)| matches!(b, Backing::Anon | Backing::PrivateFile))
                .map(|&(a, e, _)| (a, e - a))
                .collect(),
            ScanFor::Populated => Vec::new(),
        };
        Ok(PreScan {
            runs,
            written,
            written_scope,
        })
    }

    fn take(&mut self, start: u64, end: u64, b: Backing) -> Option<Vec<(u64, u64)>> {
        self.runs.remove(&(start, end, b))
    }

    /// With [`ScanFor::Written`], the written pages (sorted runs).
    pub fn written(&self) -> Option<&[(u64, u64)]> {
        self.written.as_deref()
    }

    /// With [`ScanFor::Written`], the mappings [`Self::written`] covers
    /// (sorted (start, len)); outside them nothing was looked for.
    pub fn written_scope(&self) -> &[(u64, u64)] {
        &self.written_scope
    }
}

/// Page ranges (start, len), sorted.
type Runs = Vec<(u64, u64)>;

/// The populated pages of the private anonymous range [start, end), and
/// those of them not write-protected (written since an asynchronous
/// userfaultfd protected them, or never protected), in one walk. Without
/// `PAGEMAP_SCAN` every populated page counts as written.
pub(crate) fn populated_and_written(
    pagemap: &std::fs::File,
    start: u64,
    end: u64,
    backing: Backing,
) -> Result<(Runs, Runs)> {
    use crate::uffd::{PAGE_IS_PRESENT, PAGE_IS_SWAPPED, PAGE_IS_WRITTEN};
    let Some(masks) = populated_masks(backing, PAGE_IS_PRESENT | PAGE_IS_SWAPPED | PAGE_IS_WRITTEN)
    else {
        return Ok((Vec::new(), Vec::new()));
    };
    let Some(cat) = scan_populated(pagemap, start, end, masks)? else {
        let present = page_runs_read(pagemap, start, end, backing)?;
        return Ok((present.clone(), present));
    };
    let (mut present, mut written) = (Vec::new(), Vec::new());
    for (a, n, c) in cat {
        push_run(&mut present, a, n);
        if c & PAGE_IS_WRITTEN != 0 {
            push_run(&mut written, a, n);
        }
    }
    Ok((present, written))
}

/// Splits the address ranges `jobs` (sorted) into two lists of pieces: the
/// first `at` bytes of them, and the rest (a range across the point is cut
/// there).
fn split_by_size(jobs: &[(u64, u64, Backing)], at: u64) -> [Vec<(u64, u64, Backing)>; 2] {
    let mut out = [Vec::new(), Vec::new()];
    let mut seen = 0;
    for &(a, e, b) in jobs {
        let len = e - a;
        if seen >= at {
            out[1].push((a, e, b));
        } else if seen + len <= at {
            out[0].push((a, e, b));
        } else {
            let cut = a + (at - seen);
            out[0].push((a, cut, b));
            out[1].push((cut, e, b));
        }
        seen += len;
    }
    out
}

/// Copy page runs out of the process into the image's page data. A second
/// thread hashes and writes while this one reads the next buffer. Runs are
/// packed into 4 MiB buffers, and the readable ones are read many at a time
/// (one `process_vm_readv` for up to [`sys::GATHER_MAX`] runs): a few hundred
/// scattered pages, which a pre-copy's stop saves, used to cost a buffer, a
/// system call and a hand-over to the writer each.
struct PageCopier<'p> {
    pid: pid_t,
    mem: std::fs::File,
    offset: u64,
    sink: Sink<'p>,
    /// The buffer being filled, with the bytes of it planned so far.
    cur: Option<Vec<u8>>,
    fill: usize,
    /// Planned and not read yet: the remote segments meant for
    /// `cur[read..fill]`, in order.
    pending: Vec<(u64, usize)>,
    read: usize,
}

/// Where a [`PageCopier`]'s full buffers go.
enum Sink<'p> {
    /// To a writer thread, which sends them back once written.
    Writer {
        full: std::sync::mpsc::SyncSender<(Vec<u8>, usize)>,
        empty: std::sync::mpsc::Receiver<Vec<u8>>,
    },
    /// Into the page data by the copying thread itself, the one buffer
    /// used again: for a capture that fits one buffer, which a thread
    /// would only make wait for its start and its end.
    Inline {
        pages: &'p mut PagesWriter,
        spare: Option<Vec<u8>>,
    },
}

const COPY_BUF: usize = 4 << 20;

/// A buffer for the capture's page copy, with its memory already touched:
/// made before the freeze, it saves the page faults of fresh memory (about
/// a millisecond for a few MiB on this VM) during the stop. See
/// [`Capture::copy_buffer`](super::Capture).
/// Only the first `touch` bytes are touched (a page takes about 4 µs here).
pub fn touched_copy_buffer(touch: usize) -> Vec<u8> {
    let mut b = vec![0u8; COPY_BUF];
    // Non-zero writes: stores of zero into fresh zeroed memory may be elided.
    for i in (0..touch.min(COPY_BUF)).step_by(4096) {
        b[i] = 1;
    }
    std::hint::black_box(b)
}

impl<'p> PageCopier<'p> {
    fn new(
        pid: pid_t,
        mem: std::fs::File,
        offset: u64,
        full: std::sync::mpsc::SyncSender<(Vec<u8>, usize)>,
        empty: std::sync::mpsc::Receiver<Vec<u8>>,
    ) -> Self {
        Self::with_sink(pid, mem, offset, Sink::Writer { full, empty })
    }

    /// A copier that writes `pages` itself, through `buf` (see [`Sink`]).
    fn inline(pid: pid_t, mem: std::fs::File, pages: &'p mut PagesWriter, buf: Vec<u8>) -> Self {
        let offset = pages.offset();
        Self::with_sink(
            pid,
            mem,
            offset,
            Sink::Inline {
                pages,
                spare: Some(buf),
            },
        )
    }

    fn with_sink(pid: pid_t, mem: std::fs::File, offset: u64, sink: Sink<'p>) -> Self {
        PageCopier {
            pid,
            mem,
            offset,
            sink,
            cur: None,
            fill: 0,
            pending: Vec::new(),
            read: 0,
        }
    }

    /// An empty buffer to fill.
    fn take_buffer(&mut self) -> Result<Vec<u8>> {
        match &mut self.sink {
            Sink::Writer { empty, .. } => empty
                .recv()
                .map_err(|_| EngineError::Other("page writer stopped".into())),
            Sink::Inline { spare, .. } => Ok(spare.take().unwrap_or_else(|| vec![0u8; COPY_BUF])),
        }
    }

    fn save(&mut self, vma: &mut Vma, runs: &[(u64, u64)]) -> Result<()> {
        let readable = vma.prot & libc::PROT_READ != 0;
        for &(addr, len) in runs {
            vma.runs.push(Run {
                addr,
                len,
                offset: self.offset,
            });
            let mut done = 0;
            while done < len {
                if self.cur.is_none() {
                    self.cur = Some(self.take_buffer()?);
                }
                let n = (len - done).min((COPY_BUF - self.fill) as u64) as usize;
                let at = addr + done;
                if readable {
                    self.pending.push((at, n));
                    self.fill += n;
                    if self.pending.len() == sys::GATHER_MAX {
                        self.read_pending()?;
                    }
                } else {
                    self.read_pending()?;
                    let buf = self.cur.as_mut().expect("a buffer is being filled");
                    // process_vm_readv honours protections; /proc/PID/mem does not.
                    let got = self
                        .mem
                        .read_at(&mut buf[self.fill..self.fill + n], at)
                        .ctx(|| format!("read memory at {at:#x}"))?;
                    if got != n {
                        return Err(short_read(at + got as u64));
                    }
                    self.fill += n;
                    self.read = self.fill;
                }
                done += n as u64;
                self.offset += n as u64;
                if self.fill == COPY_BUF {
                    self.flush()?;
                }
            }
        }
        Ok(())
    }

    /// Reads the planned segments into the buffer.
    fn read_pending(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let buf = self.cur.as_mut().expect("a buffer is being filled");
        let want = self.fill - self.read;
        let got = sys::process_vm_read_gather(self.pid, &self.pending, &mut buf[self.read..])?;
        if got != want {
            // The first segment not read in full.
            let mut before = 0;
            let at = self
                .pending
                .iter()
                .find_map(|&(a, n)| {
                    let hit = (before + n > got).then(|| a + (got - before) as u64);
                    before += n;
                    hit
                })
                .unwrap_or(0);
            return Err(short_read(at));
        }
        self.read = self.fill;
        self.pending.clear();
        Ok(())
    }

    /// Hands the filled part of the buffer to the writer.
    fn flush(&mut self) -> Result<()> {
        self.read_pending()?;
        if let Some(buf) = self.cur.take() {
            let n = std::mem::take(&mut self.fill);
            self.read = 0;
            match &mut self.sink {
                Sink::Writer { full, .. } if n > 0 => full
                    .send((buf, n))
                    .map_err(|_| EngineError::Other("page writer stopped".into()))?,
                Sink::Writer { .. } => {}
                Sink::Inline { pages, spare } => {
                    pages
                        .write_all(&buf[..n])
                        .ctx(|| "write page data".to_string())?;
                    *spare = Some(buf);
                }
            }
        }
        Ok(())
    }

    /// Reads and hands over whatever is still planned; after the last run.
    fn finish(&mut self) -> Result<()> {
        self.flush()
    }
}

/// Whether two mappings are the same for a skeleton: in everything but
/// their pages, a shared mapping's file judged without its times
/// ([`file_key`]).
fn same_vma(v: &Vma, w: &Vma) -> bool {
    v.start == w.start
        && v.end == w.end
        && v.prot == w.prot
        && v.backing == w.backing
        && v.growsdown == w.growsdown
        && file_key(v) == file_key(w)
        && v.offset == w.offset
        && v.advice == w.advice
        && v.locked == w.locked
        && v.name == w.name
}

/// Whether two address spaces have the same layout: their mappings
/// ([`same_vma`]), mm fields and vDSO; compared mapping by mapping, up
/// to the first that differs.
fn same_layout(a: &MemoryState, b: &MemoryState) -> bool {
    a.vmas.len() == b.vmas.len()
        && a.vdso == b.vdso
        && a.vdso_text == b.vdso_text
        && crate::skeleton::same(&a.mm, &b.mm)
        && a.vmas.iter().zip(&b.vmas).all(|(v, w)| same_vma(v, w))
}

/// A mapping's attributes, for the ranges a skeleton's layout follows
/// (see [`follow_layout`]).
#[derive(Clone, PartialEq)]
struct Attrs {
    prot: i32,
    backing: Backing,
    growsdown: bool,
    /// The file and the offset in it at this range, encoded: another one
    /// means the range was mapped again.
    source: Vec<u8>,
    /// The advice and lock, encoded: set on a mapping that came, else
    /// followed only where the same.
    extra: Vec<u8>,
    /// The name (a path, `[heap]`, `[anon:…]`): no call sets it.
    name: String,
    /// Whether its pages come later through the userfaultfd.
    later: bool,
    /// Made with `MAP_NORESERVE` (a flag no call changes afterwards).
    noreserve: bool,
}

/// The elementary ranges of two layouts: every boundary of either cuts;
/// each range with the attributes it has in `pre` and in `fin` (None:
/// unmapped there).
fn layout_ranges(
    (pre, pre_nr): (&[Vma], &[u64]),
    (fin, fin_nr): (&[Vma], &[u64]),
    lazy: bool,
) -> Vec<(u64, u64, Option<Attrs>, Option<Attrs>)> {
    let attrs = |v: &Vma, at: u64, nr: &[u64]| Attrs {
        prot: v.prot,
        backing: v.backing,
        growsdown: v.growsdown,
        source: crate::skeleton::encode(&(
            file_key(v),
            v.file.as_ref().map(|_| v.offset + (at - v.start)),
        )),
        extra: crate::skeleton::encode(&(&v.advice, v.locked)),
        name: v.name.clone(),
        later: lazy && v.comes_later(),
        noreserve: nr.contains(&v.start),
    };
    let mut cuts: Vec<u64> = pre
        .iter()
        .chain(fin)
        .flat_map(|v| [v.start, v.end])
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let find = |vs: &[Vma], at: u64, nr: &[u64]| {
        let i = vs.partition_point(|v| v.end <= at);
        vs.get(i)
            .filter(|v| v.start <= at)
            .map(|v| attrs(v, at, nr))
    };
    cuts.windows(2)
        .map(|w| (w[0], w[1], find(pre, w[0], pre_nr), find(fin, w[0], fin_nr)))
        .filter(|(_, _, a, b)| a.is_some() || b.is_some())
        .collect()
}

/// Makes a held skeleton's mappings those of `fin`, as an allocator, a
/// loader of libraries or a program mapping its files changed them (maps
/// and unmaps memory, changes its protection, moves the program break).
/// Range by range: what went is unmapped, what came is mapped, what
/// changed protection is protected anew, the program break is moved with
/// `brk`, each by a call made in the process; the userfaultfd's
/// registrations follow (a registered range is let go of before it is
/// unmapped: unmapped, it would stop the call until its event is read).
/// A file mapped since is mapped likewise, opened by path in the process
/// as the process itself ([`map_file_fd`]); its private copies are among
/// the pages of the stop. A range the process mapped again ([`replaced`])
/// is unmapped and mapped as it is now. Memory mapped in both captures,
/// and not again, stays mapped: it may hold what the restore set up (the
/// thread's rseq area, its descriptor). Then the process's mappings are
/// read back and must be `fin`'s. Anything else (shared anonymous memory
/// that came, another name, advice or lock in place, a shared file
/// mapping's protection, mm fields other than the break, a mapping where
/// the restorer area lies) is stale. Returns the ranges mapped again,
/// which hold none of the skeleton's own pages any more.
fn follow_layout(
    pre: &MemoryState,
    fin: &MemoryState,
    cx: &mut super::Update,
) -> Result<Vec<(u64, u64)>> {
    let changed = || crate::error::stale("its mappings changed");
    let mut a_mm = pre.mm.clone();
    a_mm.brk = fin.mm.brk;
    if crate::skeleton::encode(&(&a_mm, pre.vdso, pre.vdso_text))
        != crate::skeleton::encode(&(&fin.mm, fin.vdso, fin.vdso_text))
    {
        return Err(changed());
    }
    let lazy = cx.uffd.is_some();
    let (pre_nr, fin_nr) = cx.noreserve;
    let ranges = layout_ranges((&pre.vmas, pre_nr), (&fin.vmas, fin_nr), lazy);
    // The program break's range, which `brk` maps or unmaps.
    let page_up = |a: u64| (a + PAGE - 1) & !(PAGE - 1);
    let brk_range = (pre.mm.brk != fin.mm.brk).then(|| {
        let (a, b) = (page_up(pre.mm.brk), page_up(fin.mm.brk));
        (a.min(b), a.max(b))
    });
    let in_brk = |s: u64, e: u64| brk_range.is_some_and(|(a, b)| s >= a && e <= b);
    let (area, area_len) = cx.area;
    for (s, e, a, b) in &ranges {
        let (Some(a), Some(b)) = (a, b) else {
            // Any mapping may go; shared anonymous memory cannot come
            // (nothing here has its pages).
            if b.as_ref().is_some_and(|b| b.backing == Backing::SharedAnon) {
                return Err(crate::error::stale("a mapping of shared memory came"));
            }
            if b.is_some() && *s < area + area_len && area < *e {
                return Err(crate::error::stale(
                    "a new mapping lies where the restorer was",
                ));
            }
            continue;
        };
        if replaced(a, b) {
            // Mapped again by the process: unmapped and mapped anew here.
            if b.backing == Backing::SharedAnon {
                return Err(crate::error::stale("a mapping of shared memory came"));
            }
            if in_brk(*s, *e) || (*s < area + area_len && area < *e) {
                return Err(crate::error::stale(format!(
                    "the mapping at {s:#x}-{e:#x} was made again where the skeleton cannot"
                )));
            }
            continue;
        }
        // A private mapping's protection changes in place; a shared
        // file's may need the file opened for writing.
        let reprotectable = matches!(a.backing, Backing::Anon | Backing::PrivateFile);
        if !same_kind(a, b) || (a.prot != b.prot && !reprotectable) {
            return Err(crate::error::stale(format!(
                "the mapping at {s:#x}-{e:#x} changed"
            )));
        }
    }
    // Ranges that came: unmapped in the skeleton's capture, or mapped
    // again since.
    let came = |a: &Option<Attrs>, b: &Attrs| a.as_ref().is_none_or(|a| replaced(a, b));
    let call = |cx: &mut super::Update, nr: i64, args: &[u64], what: &str| -> Result<i64> {
        let r = cx.frozen.inject(0, nr, args)?;
        if r < 0 {
            return Err(crate::error::stale(format!(
                "{what} at {:#x} in the skeleton: errno {}",
                args[0], -r
            )));
        }
        Ok(r)
    };
    // Whether a range that stays mapped is mapped again (and so its
    // registration made again too).
    let again = |a: &Option<Attrs>, b: &Option<Attrs>| match (a, b) {
        (Some(a), Some(b)) => replaced(a, b),
        _ => false,
    };
    // Registrations let go of first, then what went is unmapped.
    for (s, e, a, b) in &ranges {
        let was = a.as_ref().is_some_and(|a| a.later);
        let will = b.as_ref().is_some_and(|b| b.later);
        if let Some(u) = cx.uffd.filter(|_| was && (!will || again(a, b))) {
            crate::uffd::unregister(u, *s, e - s)?;
        }
    }
    for (s, e, a, b) in &ranges {
        if (b.is_none() || again(a, b)) && !in_brk(*s, *e) {
            call(cx, libc::SYS_munmap, &[*s, e - s], "unmap")?;
        }
    }
    if brk_range.is_some() {
        let got = call(cx, libc::SYS_brk, &[fin.mm.brk], "move the program break")?;
        if got as u64 != fin.mm.brk {
            return Err(crate::error::stale(format!(
                "the program break did not move to {:#x} in the skeleton",
                fin.mm.brk
            )));
        }
    }
    // The files of new file mappings, opened in the process once each
    // (by path and access), closed once mapped.
    let mut files: Vec<((&str, bool), u64)> = Vec::new();
    for (s, e, a, b) in &ranges {
        let Some(b) = b else { continue };
        let new = came(a, b);
        match a {
            _ if new && b.backing != Backing::Anon => {
                let v = fin
                    .vmas
                    .iter()
                    .find(|v| v.start <= *s && *s < v.end)
                    .expect("a range of fin lies in one of its mappings");
                let fd = map_file_fd(cx, v, &mut files)?;
                let mut flags = libc::MAP_FIXED_NOREPLACE
                    | if b.backing == Backing::SharedFile {
                        libc::MAP_SHARED
                    } else {
                        libc::MAP_PRIVATE
                    };
                if b.growsdown {
                    flags |= libc::MAP_GROWSDOWN;
                }
                if b.noreserve {
                    flags |= libc::MAP_NORESERVE;
                }
                let off = v.offset + (s - v.start);
                let got = call(
                    cx,
                    libc::SYS_mmap,
                    &[*s, e - s, b.prot as u64, flags as u64, fd, off],
                    "map a file",
                )?;
                if got as u64 != *s {
                    return Err(crate::error::stale(format!(
                        "a new mapping of {} could not be made at {s:#x} in the skeleton",
                        v.name
                    )));
                }
            }
            _ if new && !in_brk(*s, *e) => {
                let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE;
                if b.growsdown {
                    flags |= libc::MAP_GROWSDOWN;
                }
                if b.noreserve {
                    flags |= libc::MAP_NORESERVE;
                }
                let got = call(
                    cx,
                    libc::SYS_mmap,
                    &[*s, e - s, b.prot as u64, flags as u64, u64::MAX, 0],
                    "map",
                )?;
                if got as u64 != *s {
                    return Err(crate::error::stale(format!(
                        "a new mapping could not be made at {s:#x} in the skeleton"
                    )));
                }
            }
            None => {
                // Mapped by `brk`, with the heap's protection.
            }
            Some(a) if a.prot != b.prot => {
                call(
                    cx,
                    libc::SYS_mprotect,
                    &[*s, e - s, b.prot as u64],
                    "protect",
                )?;
            }
            Some(_) => {}
        }
    }
    for (_, fd) in files {
        call(cx, libc::SYS_close, &[fd], "close a mapped file")?;
    }
    // New mappings take their advice and lock from the capture of the stop.
    for v in &fin.vmas {
        let any_came = ranges.iter().any(|(s, e, a, b)| {
            b.as_ref().is_some_and(|b| came(a, b)) && *s >= v.start && *e <= v.end
        });
        if !any_came {
            continue;
        }
        for adv in &v.advice {
            call(
                cx,
                libc::SYS_madvise,
                &[v.start, v.len(), *adv as u64],
                "advise",
            )?;
        }
        if v.locked {
            let flags = if lazy && v.comes_later() {
                libc::MLOCK_ONFAULT as u64
            } else {
                0
            };
            call(cx, libc::SYS_mlock2, &[v.start, v.len(), flags], "lock")?;
        }
    }
    for (s, e, a, b) in &ranges {
        let was = a.as_ref().is_some_and(|a| a.later);
        let will = b.as_ref().is_some_and(|b| b.later);
        if let Some(u) = cx.uffd.filter(|_| will && (!was || again(a, b))) {
            crate::uffd::register_missing(u, *s, e - s)?;
        }
    }
    check_followed(cx.pid, fin, cx.area)?;
    Ok(ranges
        .iter()
        .filter(|(_, _, a, b)| again(a, b))
        .map(|&(s, e, ..)| (s, e - s))
        .collect())
}

/// Plan: writes the image's pages of mapping `v` (mapped writable).
fn fill_from_image(b: &mut pmig_restorer::PlanBuilder, pages_fd: i32, v: &Vma) {
    for r in &v.runs {
        b.pread_full(
            0,
            pages_fd,
            r.addr,
            r.len,
            r.offset,
            format!("fill {:#x}-{:#x} from the image", r.addr, r.addr + r.len),
        );
    }
}

/// Plan: gives mapping `v`, mapped with protection `mapped`, its own
/// protection, advice and lock. `later`: its pages come after the restore,
/// through the userfaultfd.
fn finish_mapping(b: &mut pmig_restorer::PlanBuilder, v: &Vma, mapped: i32, later: bool) {
    if mapped != v.prot {
        b.syscall(
            0,
            libc::SYS_mprotect,
            &[v.start.into(), v.len().into(), v.prot.into()],
            Check::NonNeg,
            format!("protect {:#x}-{:#x}", v.start, v.end),
        );
    }
    for a in &v.advice {
        b.syscall(
            0,
            libc::SYS_madvise,
            &[v.start.into(), v.len().into(), (*a).into()],
            Check::None,
            format!("madvise({a}) {:#x}", v.start),
        );
    }
    if v.locked {
        // Memory whose pages come later, through the userfaultfd, is
        // locked as they arrive: mlock would populate it with zero pages
        // now, which no fault would ever replace.
        let (nr, args): (_, &[u64]) = if later {
            (
                libc::SYS_mlock2,
                &[v.start, v.len(), libc::MLOCK_ONFAULT as u64],
            )
        } else {
            (libc::SYS_mlock, &[v.start, v.len()])
        };
        let args: Vec<_> = args.iter().map(|&a| a.into()).collect();
        b.syscall(0, nr, &args, Check::None, format!("mlock {:#x}", v.start));
    }
}

/// Plan of a mapping of System V shared memory (see
/// [`super::sysvshm`]): the first mapping of an attach attaches the
/// segment where it was, writable (`SHM_REMAP`: nothing is mapped there
/// yet); each mapping writes its pages; the last attaches it again
/// read-only if none of its mappings was writable (`shmat` cannot make a
/// read-only attach writable, nor `mprotect` one); each then gets its own
/// protection, advice and lock.
fn plan_sysv(
    s: &MemoryState,
    v: &Vma,
    b: &mut pmig_restorer::PlanBuilder,
    pf: &super::Preflight,
    pages_fd: i32,
) -> Result<()> {
    use super::sysvshm::{SHM_EXEC, SHM_RDONLY, SHM_REMAP};
    let Some((seg, (base, end))) = pf.sysv.attach_of(v.start) else {
        return Err(EngineError::Incompatible(format!(
            "the image maps System V shared memory at {:#x} that its sysvshm part does not list",
            v.start
        )));
    };
    let pieces: Vec<&Vma> = s
        .vmas
        .iter()
        .filter(|p| p.start >= base && p.end <= end)
        .collect();
    let exec = pieces.iter().any(|p| p.prot & libc::PROT_EXEC != 0);
    let writable = pieces.iter().any(|p| p.prot & libc::PROT_WRITE != 0);
    let x = if exec { libc::PROT_EXEC } else { 0 };
    let xf = if exec { SHM_EXEC } else { 0 };
    let attach = |b: &mut pmig_restorer::PlanBuilder, flags: u64, how: &str| {
        b.syscall(
            0,
            libc::SYS_shmat,
            &[(seg.shmid as u64).into(), base.into(), flags.into()],
            Check::Eq(base),
            format!(
                "attach System V shared memory {} at {base:#x} ({how})",
                seg.shmid
            ),
        );
    };
    if v.start == base {
        attach(b, SHM_REMAP | xf, "to fill it");
    }
    fill_from_image(b, pages_fd, v);
    let rw = libc::PROT_READ | libc::PROT_WRITE | x;
    if writable {
        finish_mapping(b, v, rw, false);
    } else if v.end == end {
        attach(b, SHM_RDONLY | SHM_REMAP | xf, "read-only");
        for p in &pieces {
            finish_mapping(b, p, libc::PROT_READ | x, false);
        }
    }
    Ok(())
}

/// Whether a range has the same attributes in both captures but perhaps
/// its protection.
fn same_kind(a: &Attrs, b: &Attrs) -> bool {
    a.backing == b.backing
        && a.growsdown == b.growsdown
        && a.source == b.source
        && a.extra == b.extra
        && a.name == b.name
        && a.noreserve == b.noreserve
}

/// Whether the process mapped a range again between the captures: another
/// backing, file or offset, another `MAP_NORESERVE` or growth, under the
/// same name (which no call sets). Its contents are then all the capture
/// of the stop's.
fn replaced(a: &Attrs, b: &Attrs) -> bool {
    a.name == b.name
        && (a.backing != b.backing
            || a.source != b.source
            || a.noreserve != b.noreserve
            || a.growsdown != b.growsdown)
}

/// The descriptor, inside the held skeleton, of the file `v` maps (a new
/// mapping): opened there as the process itself, by path, read-only or,
/// for a writable shared mapping, for reading and writing (as a restore
/// opens it), once per path and access (`files`). Stale if the file here
/// is not the one mapped (its size or modification time differ) or does
/// not open.
fn map_file_fd<'a>(
    cx: &mut super::Update,
    v: &'a Vma,
    files: &mut Vec<((&'a str, bool), u64)>,
) -> Result<u64> {
    let id = v.file.as_ref().ok_or_else(|| {
        crate::error::stale(format!("the new mapping at {:#x} names no file", v.start))
    })?;
    let rw = v.backing == Backing::SharedFile && v.prot & libc::PROT_WRITE != 0;
    if let Some(&(_, fd)) = files.iter().find(|(k, _)| *k == (id.path.as_str(), rw)) {
        return Ok(fd);
    }
    let here = file_id(&id.path, &id.path).ok();
    if here.is_none_or(|h| !still_there(id, &h, false)) {
        return Err(crate::error::stale(format!(
            "{} was mapped since, and is not here as it was there",
            id.path
        )));
    }
    let flags = libc::O_CLOEXEC | if rw { libc::O_RDWR } else { libc::O_RDONLY };
    let fd = cx
        .call_with_path(
            libc::SYS_openat,
            &id.path,
            1,
            &[libc::AT_FDCWD as u64, 0, flags as u64, 0],
        )?
        .map_err(|e| {
            crate::error::stale(format!(
                "{} was mapped since, and does not open in the skeleton ({e})",
                id.path
            ))
        })? as u64;
    files.push(((id.path.as_str(), rw), fd));
    Ok(fd)
}

/// Whether the address space of `pid` is `fin`'s now (the restorer area
/// and the vDSO aside): the same bytes mapped with the same protections
/// (the kernel may have merged neighbours the source kept apart).
fn check_followed(pid: pid_t, fin: &MemoryState, (area, area_len): (u64, u64)) -> Result<()> {
    fn flatten(mut v: Vec<(u64, u64, i32)>) -> Vec<(u64, u64, i32)> {
        v.sort_unstable();
        let mut out: Vec<(u64, u64, i32)> = Vec::new();
        for (s, e, p) in v {
            match out.last_mut() {
                Some(l) if l.1 == s && l.2 == p => l.1 = e,
                _ => out.push((s, e, p)),
            }
        }
        out
    }
    let vdso = fin.vdso.map(|(a, l)| (a, a + l));
    let now: Vec<(u64, u64, i32)> = procfs::maps(pid)?
        .into_iter()
        .filter(|m| !(m.start >= area && m.end <= area + area_len))
        .filter(|m| !vdso.is_some_and(|(a, e)| m.start >= a && m.end <= e))
        .filter(|m| !is_special(&m.path) && m.start < TASK_END)
        .map(|m| {
            let p = (if m.read { libc::PROT_READ } else { 0 })
                | (if m.write { libc::PROT_WRITE } else { 0 })
                | (if m.exec { libc::PROT_EXEC } else { 0 });
            (m.start, m.end, p)
        })
        .collect();
    let want: Vec<(u64, u64, i32)> = fin.vmas.iter().map(|v| (v.start, v.end, v.prot)).collect();
    if flatten(now) != flatten(want) {
        return Err(crate::error::stale(
            "its mappings changed in a way the skeleton could not follow",
        ));
    }
    Ok(())
}

/// Copies the `planned` runs of each mapping into `pages`, a second thread
/// writing while this one reads (`first`: a buffer prepared before the
/// stop, used first).
fn copy_with_writer(
    pid: pid_t,
    mem: std::fs::File,
    pages: &mut PagesWriter,
    mut first: Option<Vec<u8>>,
    planned: &mut [(Vma, Vec<(u64, u64)>)],
) -> Result<()> {
    let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<(Vec<u8>, usize)>(3);
    let (empty_tx, empty_rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(4);
    for _ in 0..4 {
        empty_tx
            .send(first.take().unwrap_or_else(|| vec![0u8; COPY_BUF]))
            .expect("channel has room");
    }
    let offset = pages.offset();
    let mut copier = PageCopier::new(pid, mem, offset, full_tx, empty_rx);
    std::thread::scope(|sc| -> Result<()> {
        let writer = sc.spawn(move || -> std::io::Result<()> {
            for (buf, n) in full_rx {
                pages.write_all(&buf[..n])?;
                // The reader may be gone already; keep draining.
                let _ = empty_tx.send(buf);
            }
            Ok(())
        });
        let res = (|| -> Result<()> {
            for (vma, runs) in planned.iter_mut() {
                copier.save(vma, runs)?;
            }
            copier.finish()
        })();
        drop(copier);
        let w = writer
            .join()
            .map_err(|_| EngineError::Other("page writer panicked".into()))?;
        res?;
        w.ctx(|| "write page data".to_string())
    })
}

fn short_read(at: u64) -> EngineError {
    EngineError::Other(format!("short read of process memory at {at:#x}"))
}

/// Every populated page range a dump of `pid` would save, now (the process
/// may be running: this is a snapshot for pre-copy rounds).
pub fn saveable_ranges(pid: pid_t) -> Result<Vec<(u64, u64)>> {
    let pagemap = std::fs::File::open(format!("/proc/{pid}/pagemap"))
        .ctx(|| format!("open /proc/{pid}/pagemap"))?;
    let mut out = Vec::new();
    for m in procfs::maps(pid)? {
        if m.path.starts_with("[vvar") || m.path == "[vdso]" {
            continue;
        }
        if let Some(b) = classify(pid, &m)? {
            out.extend(page_runs(&pagemap, m.start, m.end, b)?);
        }
    }
    Ok(out)
}

/// The private copies (pages no file holds) in `ranges` (sorted, within
/// file mappings) of `pid`, now: what a capture would save of them.
pub fn private_file_copies(pid: pid_t, ranges: &[(u64, u64)]) -> Result<Vec<(u64, u64)>> {
    let pagemap = std::fs::File::open(format!("/proc/{pid}/pagemap"))
        .ctx(|| format!("open /proc/{pid}/pagemap"))?;
    let mut out = Vec::new();
    for &(s, l) in ranges {
        out.extend(page_runs(&pagemap, s, s + l, Backing::PrivateFile)?);
    }
    Ok(out)
}

/// Which populated pages a filtered capture saves.
pub trait PageFilter {
    /// Whether the page at `p` is saved.
    fn keep(&self, p: u64) -> bool;

    /// Appends the saved pages of [a, a + l) to `out` as runs (merged with
    /// its last run where adjacent). The default asks [`keep`](Self::keep)
    /// page by page; filters that know their pages as ranges do it per range.
    fn keep_runs(&self, a: u64, l: u64, out: &mut Vec<(u64, u64)>) {
        let mut p = a;
        while p < a + l {
            if self.keep(p) {
                push_run(out, p, PAGE);
            }
            p += PAGE;
        }
    }
}

impl<F: Fn(u64) -> bool> PageFilter for F {
    fn keep(&self, p: u64) -> bool {
        self(p)
    }
}

/// Appends [a, a + l) to `out`, merged with its last run if adjacent.
fn push_run(out: &mut Vec<(u64, u64)>, a: u64, l: u64) {
    if l == 0 {
        return;
    }
    match out.last_mut() {
        Some((s, n)) if *s + *n == a => *n += l,
        _ => out.push((a, l)),
    }
}

/// The pages present in the process whose `pagemap` is open, among those
/// from the first of `runs` to the end of the last (one `PAGEMAP_SCAN`),
/// as sorted ranges. A swapped page or a page-table marker is not present:
/// an install finds the first refused and leaves it to be written, and
/// fills the second. Narrower than [`page_runs`], which counts swapped
/// pages and leaves out the zero page. Empty where the scan cannot say
/// (before Linux 6.7): every page is then offered to the install first.
fn present_pages(pagemap: &std::fs::File, runs: &[Run]) -> Vec<(u64, u64)> {
    use crate::uffd::PAGE_IS_PRESENT;
    let start = runs.iter().map(|r| r.addr).min();
    let end = runs.iter().map(|r| r.addr + r.len).max();
    let (Some(start), Some(end)) = (start, end) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let m = crate::uffd::ScanMasks {
        inverted: 0,
        mask: 0,
        anyof: PAGE_IS_PRESENT,
        ret: PAGE_IS_PRESENT,
    };
    match crate::uffd::pagemap_scan(pagemap, 0, start, end, m, &mut out) {
        Ok(()) => out,
        Err(_) => Vec::new(),
    }
}

/// [a, a + l) cut where it enters and leaves `held` (sorted, disjoint
/// ranges): its pieces in order, each with whether it lies in `held`.
fn split_by(a: u64, l: u64, held: &[(u64, u64)]) -> Vec<(u64, u64, bool)> {
    let end = a + l;
    let mut out = Vec::new();
    let mut at = a;
    let first = held.partition_point(|&(s, n)| s + n <= a);
    for &(s, n) in &held[first..] {
        if s >= end {
            break;
        }
        if s > at {
            out.push((at, s - at, false));
            at = s;
        }
        let e = (s + n).min(end);
        if e > at {
            out.push((at, e - at, true));
            at = e;
        }
    }
    if at < end {
        out.push((at, end - at, false));
    }
    out
}

/// The parts of `ranges` outside `minus` (both sorted by start, each
/// disjoint), as sorted runs; the cost is per range, not per page.
pub fn subtract_ranges(ranges: &[(u64, u64)], minus: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut j = 0;
    for &(a, l) in ranges {
        let end = a + l;
        let mut at = a;
        while j < minus.len() && minus[j].0 + minus[j].1 <= at {
            j += 1;
        }
        let mut k = j;
        while at < end {
            match minus.get(k) {
                Some(&(s, n)) if s < end => {
                    if s > at {
                        push_run(&mut out, at, s - at);
                    }
                    at = at.max(s + n);
                    k += 1;
                }
                _ => {
                    push_run(&mut out, at, end - at);
                    at = end;
                }
            }
        }
    }
    out
}

/// The pages of the private anonymous ranges `ranges` of process `pid`
/// that hold data (present or swapped, and not the shared zero page, which
/// a page only read maps), as sorted runs: after a post-copy handover, the
/// source learns this way which pages it owes. Without `PAGEMAP_SCAN`
/// (before Linux 6.7) zero-page pages count as data.
pub fn populated_anon(pid: pid_t, ranges: &[(u64, u64)]) -> Result<Vec<(u64, u64)>> {
    use crate::uffd::{PAGE_IS_PRESENT, PAGE_IS_SWAPPED};
    let pagemap = std::fs::File::open(format!("/proc/{pid}/pagemap"))
        .ctx(|| format!("open /proc/{pid}/pagemap"))?;
    let masks = populated_masks(Backing::Anon, PAGE_IS_PRESENT | PAGE_IS_SWAPPED)
        .expect("anonymous memory has masks");
    let mut out = Vec::new();
    for &(a, l) in ranges {
        match scan_populated(&pagemap, a, a + l, masks)? {
            Some(cat) => {
                for (s, n, _) in cat {
                    push_run(&mut out, s, n);
                }
            }
            None => {
                for (s, n) in page_runs_read(&pagemap, a, a + l, Backing::Anon)? {
                    push_run(&mut out, s, n);
                }
            }
        }
    }
    Ok(out)
}

/// A [`PageFilter`] keeping the pages inside a set of ranges: its cost is
/// per range, whatever the size of the memory.
#[derive(Debug, Clone, Default)]
pub struct RangeFilter {
    /// Sorted, disjoint, not adjacent (start, len).
    ranges: Vec<(u64, u64)>,
}

impl RangeFilter {
    /// Keeps the pages of `ranges` ((start, len), in any order, may overlap).
    pub fn new(mut ranges: Vec<(u64, u64)>) -> RangeFilter {
        ranges.retain(|r| r.1 > 0);
        ranges.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
        for (a, l) in ranges {
            match merged.last_mut() {
                Some((s, n)) if a <= *s + *n => *n = (*n).max(a + l - *s),
                _ => merged.push((a, l)),
            }
        }
        RangeFilter { ranges: merged }
    }

    /// Keeps the pages of `pages` (page addresses).
    pub fn of_pages(pages: impl IntoIterator<Item = u64>) -> RangeFilter {
        RangeFilter::new(pages.into_iter().map(|p| (p, PAGE)).collect())
    }

    /// Keeps every page outside `ranges`, and the pages of `also` (pre-copy:
    /// untracked memory, and what was written in the tracked ranges).
    pub fn outside_or(ranges: Vec<(u64, u64)>, also: Vec<(u64, u64)>) -> RangeFilter {
        let inside = RangeFilter::new(ranges);
        let mut keep = also;
        let mut at = 0u64;
        for &(a, l) in &inside.ranges {
            if a > at {
                keep.push((at, a - at));
            }
            at = a.saturating_add(l);
        }
        if at < u64::MAX {
            keep.push((at, u64::MAX - at));
        }
        RangeFilter::new(keep)
    }
}

impl PageFilter for RangeFilter {
    fn keep(&self, p: u64) -> bool {
        let i = self.ranges.partition_point(|(s, _)| *s <= p);
        i > 0 && p - self.ranges[i - 1].0 < self.ranges[i - 1].1
    }

    fn keep_runs(&self, a: u64, l: u64, out: &mut Vec<(u64, u64)>) {
        let end = a + l;
        // The first range that ends after `a`.
        let mut i = self
            .ranges
            .partition_point(|(s, n)| s.saturating_add(*n) <= a);
        while let Some(&(s, n)) = self.ranges.get(i) {
            if s >= end {
                break;
            }
            let lo = s.max(a);
            let hi = s.saturating_add(n).min(end);
            push_run(out, lo, hi - lo);
            i += 1;
        }
    }
}

/// The pages of `runs` that `keep` accepts, as runs.
pub fn filter_runs(runs: &[(u64, u64)], keep: &dyn PageFilter) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &(a, l) in runs {
        keep.keep_runs(a, l, &mut out);
    }
    out
}

impl Memory {
    /// The call its capture makes in the process (see [`Capture::ask`]):
    /// where its heap ends.
    pub(crate) fn ask(cx: &mut Capture) -> Result<()> {
        cx.ask(Self::PART, 0, |_| vec![(libc::SYS_brk, vec![0])])
    }
}

impl Resource for Memory {
    const PART: &'static str = "memory";
    type State = MemoryState;

    fn precheck(pid: pid_t) -> Result<()> {
        let maps = procfs::maps(pid)?;
        for m in &maps {
            classify(pid, m)?;
        }
        check_aliases(pid, &maps)?;
        check_ghost_maps(pid, &maps)?;
        super::sysvshm::precheck_maps(pid, &maps)
    }

    fn capture(cx: &mut Capture) -> Result<MemoryState> {
        let pid = cx.pid;
        let (r, _) = cx.answers(Self::PART, Memory::ask)?;
        let brk = cx.checked(r[0], "brk(0)")?;
        // Takes the scan: the one the thread beside has begun, waited for,
        // or else made here (an error there refuses the capture); then
        // unmaps the scratch page: not while the scan reads the mappings
        // (see `Capture::scratch_mapped`).
        cx.scratch_mapped.take();
        let prescan = cx.prescan.take().map(SideScan::take);
        cx.release_scratch()?;
        let mut prescan = match prescan {
            Some(got) => got?,
            None => PreScan::default(),
        };
        crate::timing::mark("memory: pre-scan joined");
        let (layout, read) = match cx.layout.take() {
            // The status read before the scratch page was mapped: the
            // locked total of the process's own mappings.
            Some(l) => {
                let locked_kib = locked_kib_in(cx.status()?);
                l.current(pid, locked_kib)?
            }
            None => (Layout::read_smaps(pid, 0)?, true),
        };
        let maps = &layout.maps;
        // What the process wrote through shared mappings of files on a
        // network file system must reach the server before another node
        // maps them (see `files::flush_network_writes`).
        let mut flush = super::files::NetworkFlush::new(pid);
        for m in maps {
            flush.mapping(m)?;
        }
        crate::timing::mark("memory: mappings read");
        let pagemap = std::fs::File::open(format!("/proc/{pid}/pagemap"))
            .ctx(|| format!("open /proc/{pid}/pagemap"))?;
        let mem = std::fs::File::open(format!("/proc/{pid}/mem"))
            .ctx(|| format!("open /proc/{pid}/mem"))?;
        // The stop after pages were sent while the process ran (pre-copy's
        // rounds, post-copy's private file copies): of the tracked ranges
        // only the pages written since come with the scan (without it,
        // every page is saved).
        let since_round;
        let since: Option<&dyn PageFilter> = match &cx.written_since {
            Some(tracked) if cx.written_apart => {
                since_round = RangeFilter::outside_or(tracked.clone(), Vec::new());
                Some(&since_round as &dyn PageFilter)
            }
            Some(tracked) => match prescan.written() {
                Some(w) => {
                    since_round = RangeFilter::outside_or(tracked.clone(), w.to_vec());
                    Some(&since_round as &dyn PageFilter)
                }
                None => None,
            },
            None => None,
        };
        let caller_filter = cx.filter;
        let defer = cx.defer_population;
        let apart = cx.written_apart && cx.written_since.is_some();
        let mut vdso_lo = None;
        let mut vdso_hi = 0;
        let mut vdso_text = None;
        let mut mapped_ids = MappedIds::default();
        // Each mapping with the page runs to save of it, then the copy.
        let mut planned: Vec<(Vma, Vec<(u64, u64)>)> = Vec::new();
        check_aliases(pid, maps)?;
        let mut file_ids: std::collections::HashMap<(String, u64), (FileId, (u64, u64))> =
            std::collections::HashMap::new();
        for m in maps {
            if m.path.starts_with("[vvar") || m.path == "[vdso]" {
                vdso_lo.get_or_insert(m.start);
                vdso_hi = m.end;
                if m.path == "[vdso]" {
                    vdso_text = Some(m.start);
                }
                continue;
            }
            let Some(backing) = classify(pid, m)? else {
                continue;
            };
            let prot = (if m.read { libc::PROT_READ } else { 0 })
                | (if m.write { libc::PROT_WRITE } else { 0 })
                | (if m.exec { libc::PROT_EXEC } else { 0 });
            let file = match backing {
                Backing::PrivateFile | Backing::SharedFile => {
                    // A file is mapped several times (a library's
                    // text, data and read-only parts): one stat per
                    // file, not per mapping.
                    let key = (m.dev.clone(), m.inode);
                    let (id, inode) = match file_ids.get(&key).filter(|_| m.inode != 0) {
                        Some(known) => known.clone(),
                        None => {
                            let via = format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end);
                            let known = file_id_and_inode(&m.path, &via)?;
                            file_ids.insert(key, known.clone());
                            known
                        }
                    };
                    if super::ghosts::is_ghost_mapping(&m.path) {
                        cx.ghost_maps.push(super::ghosts::FoundMap {
                            start: m.start,
                            end: m.end,
                            dev: inode.0,
                            ino: inode.1,
                            writable_shared: m.shared && m.write,
                        });
                        // Its bytes and identity are in the ghosts parts; a
                        // size and modification time that change with every
                        // write would make a skeleton's mapping look made
                        // again.
                        Some(FileId {
                            path: m.path.clone(),
                            size: 0,
                            mtime_ns: 0,
                        })
                    } else {
                        mapped_ids.add(m.path.clone(), inode);
                        Some(FileId {
                            path: m.path.clone(),
                            ..id
                        })
                    }
                }
                _ => None,
            };
            let (advice, locked) = advice_of(&m.flags);
            if m.flags.iter().any(|f| f == "nr") {
                cx.memory_flags.noreserve.push(m.start);
            }
            let mut vma = Vma {
                start: m.start,
                end: m.end,
                prot,
                backing,
                growsdown: m.flags.iter().any(|f| f == "gd"),
                file,
                offset: m.offset,
                advice,
                locked,
                name: m.path.clone(),
                runs: Vec::new(),
                present: Vec::new(),
            };
            // Whether the scan made at the freeze covered this
            // mapping: only then does it say which pages were
            // written since.
            let (present, scanned) = if backing == Backing::SysV {
                cx.sysv_maps.push(super::sysvshm::FoundMap {
                    start: m.start,
                    end: m.end,
                    offset: m.offset,
                    shmid: m.inode as i32,
                });
                // Every page of the segment with data, mapped here or not.
                let runs = shmem_data_runs(pid, m.start, m.end, m.offset)
                    .ctx(|| format!("find the data of System V shared memory at {:#x}", m.start))?;
                (runs, false)
            } else if backing == Backing::SharedAnon {
                // Every page of the object with data, mapped here or not;
                // from the page tables where map_files cannot be opened
                // (without CAP_SYS_ADMIN).
                let runs = match shmem_data_runs(pid, m.start, m.end, m.offset) {
                    Ok(r) => r,
                    Err(_) => page_runs(&pagemap, m.start, m.end, backing)?,
                };
                (runs, false)
            } else if defer && vma.deferrable() {
                // Not scanned at the stop: the source scans its
                // frozen copy after the handover.
                (vec![(m.start, m.end - m.start)], false)
            } else {
                match prescan.take(m.start, m.end, backing) {
                    Some(r) => (r, true),
                    None => (page_runs(&pagemap, m.start, m.end, backing)?, false),
                }
            };
            // Saving nothing of the tracked ranges needs no scan.
            let since = since.filter(|_| scanned || apart);
            // Writable private anonymous memory: the caller's filter
            // (a post-copy handover's pages), else the pages written
            // since; a file's private copies: the pages written
            // since. Shared memory and read-only anonymous pages are
            // always saved: left to the userfaultfd, a read-only area
            // came back as zeros after a post-copy (the mem scenario
            // moved between nodes); the cause is not understood yet
            // (UFFDIO_COPY itself works on a read-only area), so such
            // pages go with the state.
            let runs = match (backing, caller_filter.or(since)) {
                (Backing::Anon, Some(keep)) if vma.prot & libc::PROT_WRITE != 0 => {
                    filter_runs(&present, keep)
                }
                (Backing::PrivateFile, _) => match since {
                    Some(keep) => filter_runs(&present, keep),
                    None => present.clone(),
                },
                _ => present.clone(),
            };
            vma.present = present;
            planned.push((vma, runs));
        }
        crate::timing::mark("memory: pages scanned");
        let total: u64 = planned.iter().flat_map(|(_, r)| r).map(|r| r.1).sum();
        let first = cx.copy_buffer.take().filter(|b| b.len() == COPY_BUF);
        if total <= COPY_BUF as u64 {
            let buf = first.unwrap_or_else(|| vec![0u8; COPY_BUF]);
            let mut copier = PageCopier::inline(pid, mem, cx.pages, buf);
            for (vma, runs) in &mut planned {
                copier.save(vma, runs)?;
            }
            copier.finish()?;
        } else {
            copy_with_writer(pid, mem, cx.pages, first, &mut planned)?;
        }
        let vmas: Vec<Vma> = planned.into_iter().map(|(v, _)| v).collect();
        crate::timing::mark("memory: pages scanned and copied");
        let st = procfs::stat_fields(pid)?;
        let f = |n| procfs::stat_field(&st, n);
        let auxv_raw =
            std::fs::read(format!("/proc/{pid}/auxv")).ctx(|| format!("read /proc/{pid}/auxv"))?;
        let auxv = auxv_raw
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let exe_path = procfs::readlink(pid, "exe")?;
        let (exe, inode) = file_id_and_inode(&exe_path, &format!("/proc/{pid}/exe"))?;
        if exe_path.ends_with(" (deleted)") {
            // Deleted (or replaced, by an upgrade) since it started: it moves
            // with its mappings' bytes, if its code is mapped.
            if !cx.ghost_maps.iter().any(|m| (m.dev, m.ino) == inode) {
                return Err(unsupported(
                    pid,
                    format!("a deleted executable that is not mapped ({exe_path})"),
                ));
            }
            cx.ghost_exe = Some(inode);
        } else {
            mapped_ids.add(exe_path.clone(), inode);
        }
        cx.mapped_ids = mapped_ids;
        let mm = MmFields {
            start_code: f(26),
            end_code: f(27),
            start_stack: f(28),
            start_data: f(45),
            end_data: f(46),
            start_brk: f(47),
            brk,
            arg_start: f(48),
            arg_end: f(49),
            env_start: f(50),
            env_end: f(51),
            auxv,
            exe,
        };
        // Flags not read at the stop are checked once it is over.
        cx.layout_used = (!read).then_some(layout);
        Ok(MemoryState {
            vmas,
            mm,
            // The vvar pages without the code that reads them (valgrind
            // unmaps the vDSO's code, not its data): a process without a
            // vDSO, restored with none.
            vdso: vdso_text.and(vdso_lo).map(|lo| (lo, vdso_hi - lo)),
            vdso_text,
        })
    }

    fn preflight(s: &MemoryState, pf: &mut Preflight) -> Result<()> {
        // The vDSO must have the same layout here (same kernel build).
        if let Some((start, len)) = s.vdso {
            let ours = procfs::maps(std::process::id() as pid_t)?;
            let lo = ours
                .iter()
                .filter(|m| m.path.starts_with("[vvar") || m.path == "[vdso]")
                .map(|m| m.start)
                .min();
            let hi = ours
                .iter()
                .filter(|m| m.path.starts_with("[vvar") || m.path == "[vdso]")
                .map(|m| m.end)
                .max();
            // The same length, and the code at the same offset in it: then
            // ARCH_MAP_VDSO puts the code where the image expects it (the
            // process holds pointers into it), without a check afterwards.
            let text = ours.iter().find(|m| m.path == "[vdso]").map(|m| m.start);
            let same_text = match (s.vdso_text, text, lo) {
                (Some(want), Some(t), Some(lo)) => Some(want - start) == t.checked_sub(lo),
                (None, _, _) => true,
                _ => false,
            };
            match (lo, hi) {
                (Some(lo), Some(hi)) if hi - lo == len && same_text => {}
                _ => {
                    return Err(EngineError::Incompatible(
                        "the vDSO layout of this kernel differs from the image's".into(),
                    ))
                }
            }
        }
        let skeleton = pf.opts.skeleton;
        let check_file = |id: &FileId, backing: Backing| -> Result<()> {
            let now = file_id(&id.path, &id.path).map_err(|_| {
                EngineError::Incompatible(format!("file {} no longer exists", id.path))
            })?;
            if !still_there(id, &now, skeleton && backing == Backing::SharedFile) {
                return Err(EngineError::Incompatible(format!(
                    "file {} changed since the dump",
                    id.path
                )));
            }
            Ok(())
        };
        // A deleted executable is the file made again (`ghosts`).
        let exe_ghost = pf.mapped_files.contains_key(EXE_KEY);
        if !exe_ghost {
            check_file(&s.mm.exe, Backing::PrivateFile)?;
        }
        // Each file once per access mode, the executable on its own key.
        let mut to_open: Vec<(String, &str, i32)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for v in &s.vmas {
            // A memfd's or deleted file's mapping maps the file made again.
            if pf.ghost_maps.contains_key(&v.start) {
                continue;
            }
            if let Some(id) = &v.file {
                check_file(id, v.backing)?;
                let rw = v.backing == Backing::SharedFile && v.prot & libc::PROT_WRITE != 0;
                let key = format!("{}\0{rw}", id.path);
                if !pf.mapped_files.contains_key(&key) && seen.insert(key.clone()) {
                    let flags = if rw { libc::O_RDWR } else { libc::O_RDONLY };
                    to_open.push((key, &id.path, flags));
                }
            }
        }
        if !exe_ghost {
            to_open.push((EXE_KEY.into(), &s.mm.exe.path, libc::O_RDONLY));
        }
        // With the process's own credentials, one switch for them all.
        let paths: Vec<(&str, i32)> = to_open.iter().map(|&(_, p, f)| (p, f)).collect();
        let opened = pf.open_all_as_owner(&paths)?;
        for ((key, path, flags), f) in to_open.into_iter().zip(opened) {
            // One the process may not open, but had mapped: that very inode,
            // opened as the restorer (see `MappedIds`).
            let f = super::files::or_held(
                pf,
                path,
                f,
                || super::open_with(path, flags),
                |h| {
                    pf.mapped_ids
                        .as_ref()
                        .is_some_and(|ids| ids.is_same(path, h))
                },
            );
            let fd = pf.keep_opened(path, f)?;
            pf.mapped_files.insert(key, fd);
        }
        Ok(())
    }

    fn plan(s: &MemoryState, cx: &mut PlanCx) -> Result<()> {
        let b = &mut *cx.b;
        // Everything but the restorer area goes.
        b.syscall(
            0,
            libc::SYS_munmap,
            &[0u64.into(), Arg::AreaStart],
            Check::NonNeg,
            "unmap the old address space below the restorer",
        );
        b.syscall(
            0,
            libc::SYS_munmap,
            &[Arg::AreaEnd, Arg::AreaEndTo(TASK_END)],
            Check::NonNeg,
            "unmap the old address space above the restorer",
        );
        for v in &s.vmas {
            if v.backing == Backing::SysV {
                plan_sysv(s, v, b, cx.pf, cx.pages_fd)?;
                continue;
            }
            let has_pages = !v.runs.is_empty();
            let map_prot = if has_pages {
                v.prot | libc::PROT_READ | libc::PROT_WRITE
            } else {
                v.prot
            };
            let mut flags = libc::MAP_FIXED;
            let mut fd: i64 = -1;
            match v.backing {
                Backing::Anon => flags |= libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                Backing::SharedAnon => flags |= libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                Backing::SysV => unreachable!("planned by plan_sysv"),
                Backing::PrivateFile | Backing::SharedFile => {
                    fd = match cx.pf.ghost_maps.get(&v.start) {
                        Some(&ghost) => ghost as i64,
                        None => {
                            let id = v.file.as_ref().expect("file-backed vma has a file");
                            let key = format!(
                                "{}\0{}",
                                id.path,
                                v.backing == Backing::SharedFile && v.prot & libc::PROT_WRITE != 0
                            );
                            cx.pf.mapped_files[&key] as i64
                        }
                    };
                    flags |= if v.backing == Backing::SharedFile {
                        libc::MAP_SHARED
                    } else {
                        libc::MAP_PRIVATE
                    };
                }
            }
            if v.growsdown {
                flags |= libc::MAP_GROWSDOWN;
            }
            if cx.pf.noreserve.contains(&v.start) {
                flags |= libc::MAP_NORESERVE;
            }
            let what = format!(
                "map {:#x}-{:#x} {}",
                v.start,
                v.end,
                if v.name.is_empty() { "[anon]" } else { &v.name }
            );
            let off = if fd >= 0 { v.offset } else { 0 };
            b.syscall(
                0,
                libc::SYS_mmap,
                &[
                    v.start.into(),
                    v.len().into(),
                    map_prot.into(),
                    flags.into(),
                    fd.into(),
                    off.into(),
                ],
                Check::Eq(v.start),
                what.clone(),
            );
            fill_from_image(b, cx.pages_fd, v);
            finish_mapping(b, v, map_prot, cx.pf.uffd_fd.is_some() && v.comes_later());
        }
        if let Some(ufd) = cx.pf.uffd_fd {
            // Post-copy: the pages of private anonymous memory that are not
            // in the image come later, through this userfaultfd. The process
            // keeps a reference so that a dying pmig cannot turn owed pages
            // into zeros: faults then wait for a new server instead.
            b.syscall_to_fd(
                0,
                libc::SYS_userfaultfd,
                &[((libc::O_CLOEXEC | libc::O_NONBLOCK) as u64).into()],
                ufd,
                "create the userfaultfd for missing pages",
            );
            let api = b.data_of(&[crate::uffd::UFFD_API, crate::uffd::LAZY_FEATURES, 0u64]);
            b.syscall(
                0,
                libc::SYS_ioctl,
                &[ufd.into(), crate::uffd::UFFDIO_API.into(), api.into()],
                Check::NonNeg,
                "userfaultfd API",
            );
            for v in s.vmas.iter().filter(|v| v.comes_later()) {
                let reg = b.data_of(&[
                    v.start,
                    v.len(),
                    crate::uffd::UFFDIO_REGISTER_MODE_MISSING,
                    0u64,
                ]);
                b.syscall(
                    0,
                    libc::SYS_ioctl,
                    &[ufd.into(), crate::uffd::UFFDIO_REGISTER.into(), reg.into()],
                    Check::NonNeg,
                    format!("register {:#x}-{:#x} for missing pages", v.start, v.end),
                );
            }
        }
        if let Some((vvar, _)) = s.vdso {
            b.syscall(
                0,
                libc::SYS_arch_prctl,
                &[0x2003u64.into(), vvar.into()],
                Check::NonNeg,
                format!("map the vDSO at {vvar:#x}"),
            );
        }
        let m = &s.mm;
        let mut auxv_bytes = Vec::new();
        for v in &m.auxv {
            auxv_bytes.extend_from_slice(&v.to_le_bytes());
        }
        let auxv = b.data(&auxv_bytes);
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct PrctlMmMap {
            f: [u64; 11],
            auxv: u64,
            auxv_size: u32,
            exe_fd: u32,
        }
        // The auxv pointer is resolved after layout: keep it in a separate
        // data blob and patch via a second data ref is not possible, so the
        // auxv address is computed from the DataRef by the builder below.
        let map = PrctlMmMap {
            f: [
                m.start_code,
                m.end_code,
                m.start_data,
                m.end_data,
                m.start_brk,
                m.brk,
                m.start_stack,
                m.arg_start,
                m.arg_end,
                m.env_start,
                m.env_end,
            ],
            auxv: 0,
            auxv_size: auxv_bytes.len() as u32,
            exe_fd: cx.pf.mapped_files[EXE_KEY] as u32,
        };
        let mapref = b.data_with_ptr(&map, 11 * 8, auxv);
        b.syscall(
            0,
            libc::SYS_prctl,
            &[
                libc::PR_SET_MM.into(),
                14i32.into(),
                mapref.into(),
                (std::mem::size_of::<PrctlMmMap>() as u64).into(),
                0u64.into(),
            ],
            Check::NonNeg,
            "set brk, arg/env, auxv and exe link (PR_SET_MM_MAP)",
        );
        Ok(())
    }

    /// The mappings must be the same, or differ only in private anonymous
    /// mappings, which are followed ([`follow_layout`]); every page the
    /// skeleton holds must be in `fin`, whose pages then replace them:
    /// through the userfaultfd where a mapping's pages come later and the
    /// page is still missing, else written through `/proc/PID/mem` (which,
    /// like a debugger, writes read-only private memory too).
    fn update(
        pre: &MemoryState,
        fin: &MemoryState,
        same: bool,
        cx: &mut super::Update,
    ) -> Result<()> {
        use crate::skeleton::covers;
        check_shared_files(fin)?;
        if fin.vmas.iter().any(|v| v.backing == Backing::SysV) {
            return Err(crate::error::stale(
                "System V shared memory is attached at the stop only",
            ));
        }
        let lazy = cx.uffd.is_some();
        // A mapping made again where one was, alike but for MAP_NORESERVE,
        // changes no layout key: the flags' lists are compared too. So are
        // the mappings whose pages come later, registered with the
        // userfaultfd: an anonymous mapping with no page at the first
        // capture may owe some at the stop without any change of layout
        // (read-only memory made writable, written and protected again, as
        // a JIT does; memory the test's plain handover capture saw empty).
        let later = |m: &MemoryState| -> Vec<(u64, u64)> {
            m.vmas
                .iter()
                .filter(|v| v.comes_later())
                .map(|v| (v.start, v.end))
                .collect()
        };
        let mut again = Vec::new();
        if (!same && !same_layout(pre, fin))
            || cx.noreserve.0 != cx.noreserve.1
            || (lazy && later(pre) != later(fin))
        {
            again = follow_layout(pre, fin, cx)?;
        }
        // Every page the skeleton holds (its first capture's runs) that is
        // still mapped must be replaced by the capture of the stop: in
        // memory that comes later, by one of its pages; elsewhere by a
        // page it still has (a private copy, an anonymous page), which is
        // in its runs.
        let mut now: Vec<(u64, u64)> = fin
            .vmas
            .iter()
            .flat_map(|v| v.runs.iter().map(|r| (r.addr, r.len)))
            .collect();
        now.sort_unstable();
        let present: Vec<(u64, u64)> = fin
            .vmas
            .iter()
            .flat_map(|v| v.present.iter().copied())
            .collect();
        for a in &pre.vmas {
            for r in &a.runs {
                for b in fin
                    .vmas
                    .iter()
                    .filter(|b| b.start < r.addr + r.len && r.addr < b.end)
                {
                    let s = r.addr.max(b.start);
                    // Memory mapped again since holds none of them.
                    let held = subtract_ranges(&[(s, (r.addr + r.len).min(b.end) - s)], &again);
                    let ok = if lazy && b.comes_later() {
                        covers(&now, &held)
                    } else {
                        covers(&present, &held)
                    };
                    if !ok {
                        return Err(crate::error::stale(format!(
                            "a page held at {s:#x} ({}) is not in the capture of the stop",
                            if b.name.is_empty() { "[anon]" } else { &b.name }
                        )));
                    }
                }
            }
        }
        let mem = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{}/mem", cx.pid))
            .ctx(|| format!("open /proc/{}/mem", cx.pid))?;
        let write = |addr: u64, data: &[u8]| {
            mem.write_all_at(data, addr)
                .ctx(|| format!("write the pages at {addr:#x} into process {}", cx.pid))
        };
        // Where pages come later, the skeleton already holds many of those
        // of the stop (its own capture's, the stacks of threads that slept
        // since): they are written whole, a run at a time, where an
        // install would be refused (`EEXIST`) page by page first.
        let pagemap = lazy
            .then(|| std::fs::File::open(format!("/proc/{}/pagemap", cx.pid)).ok())
            .flatten();
        let mut buf = Vec::new();
        for b in &fin.vmas {
            let later = lazy && b.comes_later();
            let held = match (&pagemap, later) {
                (Some(pm), true) => present_pages(pm, &b.runs),
                _ => Vec::new(),
            };
            for r in &b.runs {
                buf.resize(r.len as usize, 0);
                cx.pages
                    .read_exact_at(&mut buf, r.offset)
                    .ctx(|| format!("read the pages of {:#x} from the image", r.addr))?;
                match cx.uffd.filter(|_| later) {
                    Some(u) => {
                        for (a, l, there) in split_by(r.addr, r.len, &held) {
                            let o = (a - r.addr) as usize;
                            let data = &buf[o..o + l as usize];
                            if there {
                                write(a, data)?;
                                continue;
                            }
                            for p in crate::uffd::copy_missing(u, a, data)? {
                                let o = (p - r.addr) as usize;
                                write(p, &buf[o..o + PAGE as usize])?;
                            }
                        }
                    }
                    None => write(r.addr, &buf)?,
                }
            }
        }
        Ok(())
    }

    fn finish(_s: &MemoryState, cx: &mut Finish) -> Result<()> {
        // Where the vDSO landed was made sure of in `preflight`.
        let (a, l) = cx.area;
        let r = cx.frozen.inject(0, libc::SYS_munmap, &[a, l])?;
        if r < 0 {
            return Err(EngineError::Restore(format!(
                "remove the restorer area: errno {}",
                -r
            )));
        }
        Ok(())
    }
}

/// A new private anonymous read-write mapping of `len` bytes, for tests (the
/// caller unmaps it).
#[cfg(test)]
pub(crate) fn anon_map(len: usize) -> *mut libc::c_void {
    // SAFETY: a new mapping at an address of the kernel's choosing.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    p
}

/// An empty private anonymous [`Vma`] over [start, end) with `prot`, for
/// tests.
#[cfg(test)]
pub(crate) fn test_vma(start: u64, end: u64, prot: i32) -> Vma {
    Vma {
        start,
        end,
        prot,
        backing: Backing::Anon,
        growsdown: false,
        file: None,
        offset: 0,
        advice: vec![],
        locked: false,
        name: String::new(),
        runs: vec![],
        present: vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The runs the default, page-by-page [`PageFilter::keep_runs`] finds.
    fn per_page(f: &RangeFilter, runs: &[(u64, u64)]) -> Vec<(u64, u64)> {
        let g = |p: u64| f.keep(p);
        filter_runs(runs, &g)
    }

    /// Page-by-page reference for [`subtract_ranges`].
    fn subtract_per_page(ranges: &[(u64, u64)], minus: &[(u64, u64)]) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        for &(a, l) in ranges {
            for p in (a..a + l).step_by(PAGE as usize) {
                if !minus.iter().any(|&(s, n)| s <= p && p < s + n) {
                    push_run(&mut out, p, PAGE);
                }
            }
        }
        out
    }

    /// Held by the tests of [`three_pages_written`]'s mappings: two such
    /// mappings side by side would be merged into one.
    static READ_ONLY_MAPPING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// A read-only private anonymous mapping of 16 pages whose first three
    /// pages were written, with a page unmapped on either side (nothing
    /// merges with it), and the key of its scan: (start, end, backing).
    /// The caller holds [`READ_ONLY_MAPPING`] while it exists.
    fn three_pages_written() -> (u64, (u64, u64, Backing)) {
        let page = PAGE as usize;
        let p = anon_map(18 * page) as usize;
        // SAFETY: the first and last pages of the mapping just made.
        unsafe {
            libc::munmap(p as *mut libc::c_void, page);
            libc::munmap((p + 17 * page) as *mut libc::c_void, page);
        }
        let a = p + page;
        // SAFETY: the first three pages of what is left of it.
        unsafe { std::ptr::write_bytes(a as *mut u8, 7, 3 * page) };
        // SAFETY: what is left of the mapping just made.
        let r = unsafe { libc::mprotect(a as *mut libc::c_void, 16 * page, libc::PROT_READ) };
        assert_eq!(r, 0);
        let a = a as u64;
        (a, (a, a + 16 * PAGE, Backing::Anon))
    }

    /// A side scan of this process, and what its `on_scan` is told:
    /// whether the scan succeeded.
    fn side_scan_of_this_process() -> (std::sync::mpsc::Receiver<bool>, SideScan, SideScanner) {
        let (seen_tx, seen) = std::sync::mpsc::channel();
        let on_scan: OnScan = Box::new(move |s| seen_tx.send(s.is_ok()).unwrap());
        let me = std::process::id() as pid_t;
        let (side, scanner) = side_scan(me, false, ScanFor::Populated, Some(on_scan));
        (seen, side, scanner)
    }

    #[test]
    fn a_side_scan_the_thread_beside_has_not_begun_is_made_by_the_capture() {
        let _one = READ_ONLY_MAPPING.lock().unwrap_or_else(|e| e.into_inner());
        let (a, key) = three_pages_written();
        let (seen, side, scanner) = side_scan_of_this_process();
        let mut got = side.take().unwrap();
        assert_eq!(
            seen.try_recv(),
            Ok(true),
            "the scan was not shown before it went"
        );
        assert_eq!(got.take(key.0, key.1, key.2), Some(vec![(a, 3 * PAGE)]));
        // The thread beside, begun late, makes none.
        assert!(!scanner.scan());
        assert!(seen.try_recv().is_err(), "scanned twice");
        // SAFETY: unmapping the test's own mapping.
        unsafe { libc::munmap(a as *mut libc::c_void, 16 * PAGE as usize) };
    }

    #[test]
    fn a_side_scan_begun_beside_is_the_one_the_capture_takes() {
        let _one = READ_ONLY_MAPPING.lock().unwrap_or_else(|e| e.into_inner());
        let (a, key) = three_pages_written();
        let (seen, side, scanner) = side_scan_of_this_process();
        assert!(std::thread::spawn(move || scanner.scan()).join().unwrap());
        assert_eq!(
            seen.try_recv(),
            Ok(true),
            "the scan was not shown before it went"
        );
        let mut got = side.take().unwrap();
        assert_eq!(got.take(key.0, key.1, key.2), Some(vec![(a, 3 * PAGE)]));
        // SAFETY: unmapping the test's own mapping.
        unsafe { libc::munmap(a as *mut libc::c_void, 16 * PAGE as usize) };
        // A side scan the capture dropped (it failed first) is claimed too.
        let (_, side, scanner) = side_scan_of_this_process();
        drop(side);
        assert!(!scanner.scan(), "scanned after the capture ended");
    }

    #[test]
    fn a_run_is_cut_where_it_enters_and_leaves_the_held_ranges() {
        let held = [(0x1000, 0x2000), (0x5000, 0x1000), (0x9000, 0x3000)];
        // Across several ranges, from a gap to a gap.
        assert_eq!(
            split_by(0x0, 0x7000, &held),
            vec![
                (0x0, 0x1000, false),
                (0x1000, 0x2000, true),
                (0x3000, 0x2000, false),
                (0x5000, 0x1000, true),
                (0x6000, 0x1000, false),
            ]
        );
        // Inside one range; starting and ending inside two.
        assert_eq!(
            split_by(0x1000, 0x1000, &held),
            vec![(0x1000, 0x1000, true)]
        );
        assert_eq!(
            split_by(0x2000, 0x8000, &held),
            vec![
                (0x2000, 0x1000, true),
                (0x3000, 0x2000, false),
                (0x5000, 0x1000, true),
                (0x6000, 0x3000, false),
                (0x9000, 0x1000, true),
            ]
        );
        // Nothing held, or beyond every range.
        assert_eq!(split_by(0x2000, 0x1000, &[]), vec![(0x2000, 0x1000, false)]);
        assert_eq!(
            split_by(0xc000, 0x2000, &held),
            vec![(0xc000, 0x2000, false)]
        );
    }

    #[test]
    fn a_skeleton_judges_a_shared_mappings_file_by_its_size_alone() {
        let id = FileId {
            path: "/f".into(),
            size: 8192,
            mtime_ns: 1000,
        };
        let later = FileId {
            mtime_ns: 2000,
            ..id.clone()
        };
        let grown = FileId {
            size: 12288,
            ..id.clone()
        };
        assert!(still_there(&id, &id, false));
        assert!(!still_there(&id, &later, false));
        assert!(still_there(&id, &later, true));
        assert!(!still_there(&id, &grown, true));
        // A layout compares a shared mapping's file without its times.
        let mut v = test_vma(0x1000, 0x3000, libc::PROT_READ | libc::PROT_WRITE);
        v.file = Some(id.clone());
        v.backing = Backing::SharedFile;
        let mut w = v.clone();
        w.file = Some(later.clone());
        assert!(same_vma(&v, &w));
        v.backing = Backing::PrivateFile;
        w.backing = Backing::PrivateFile;
        assert!(!same_vma(&v, &w));
        w.file = Some(id.clone());
        assert!(same_vma(&v, &w));
        w.file = Some(grown.clone());
        assert!(!same_vma(&v, &w), "another size");
        w.file = None;
        assert!(!same_vma(&v, &w), "a file against none");
    }

    #[test]
    fn layouts_differ_in_any_mapping_mm_field_or_vdso() {
        let a = MemoryState {
            vmas: vec![
                test_vma(0x1000, 0x3000, libc::PROT_READ),
                test_vma(0x5000, 0x8000, libc::PROT_READ | libc::PROT_WRITE),
            ],
            mm: MmFields::default(),
            vdso: Some((0x7000_0000, 0x4000)),
            vdso_text: Some(0x7000_2000),
        };
        let again = |f: &dyn Fn(&mut MemoryState)| {
            let mut b = MemoryState {
                vmas: a.vmas.clone(),
                mm: a.mm.clone(),
                vdso: a.vdso,
                vdso_text: a.vdso_text,
            };
            f(&mut b);
            b
        };
        assert!(same_layout(&a, &again(&|_| {})));
        // Pages alone are no part of it.
        assert!(same_layout(
            &a,
            &again(&|b| b.vmas[1].present = vec![(0x5000, 0x1000)])
        ));
        assert!(!same_layout(
            &a,
            &again(&|b| b.vmas[1].prot = libc::PROT_READ)
        ));
        assert!(!same_layout(&a, &again(&|b| b.vmas[0].end = 0x4000)));
        assert!(!same_layout(
            &a,
            &again(&|b| {
                b.vmas.pop();
            })
        ));
        assert!(!same_layout(&a, &again(&|b| b.mm.brk = 0x9000)));
        assert!(!same_layout(&a, &again(&|b| b.vdso = None)));
        assert!(!same_layout(
            &a,
            &again(&|b| b.vdso_text = Some(0x7000_3000))
        ));
    }

    #[test]
    fn subtract_ranges_matches_page_by_page() {
        let ranges = [(0x1000, 0x8000), (0x10000, 0x1000), (0x20000, 0x10000)];
        let minuses: [&[(u64, u64)]; 5] = [
            &[],
            &[(0x0, 0x2000), (0x4000, 0x1000), (0x8000, 0x9000)],
            &[(0x21000, 0x1000), (0x2f000, 0x3000)],
            &[(0x0, 0x100000)],
            &[
                (0x1000, 0x1000),
                (0x3000, 0x1000),
                (0x11000, 0x1000),
                (0x30000, 0x1000),
            ],
        ];
        for m in minuses {
            assert_eq!(
                subtract_ranges(&ranges, m),
                subtract_per_page(&ranges, m),
                "{m:?}"
            );
        }
        // owed(): present less the runs in the image, whatever their order.
        let v = Vma {
            runs: vec![
                Run {
                    addr: 0x6000,
                    len: 0x1000,
                    offset: 0,
                },
                Run {
                    addr: 0x2000,
                    len: 0x1000,
                    offset: 0x1000,
                },
            ],
            present: vec![(0x1000, 0x8000)],
            ..test_vma(0x1000, 0x9000, libc::PROT_READ | libc::PROT_WRITE)
        };
        assert_eq!(
            v.owed(),
            vec![(0x1000, 0x1000), (0x3000, 0x3000), (0x7000, 0x2000)]
        );
        assert!(v.owes_pages() && v.deferrable());
    }

    #[test]
    fn split_by_size_cuts_the_range_across_the_point() {
        let b = Backing::Anon;
        let jobs = [
            (0x1000, 0x3000, b),
            (0x10000, 0x14000, b),
            (0x20000, 0x21000, b),
        ];
        let [one, two] = split_by_size(&jobs, 0x4000);
        assert_eq!(one, vec![(0x1000, 0x3000, b), (0x10000, 0x12000, b)]);
        assert_eq!(two, vec![(0x12000, 0x14000, b), (0x20000, 0x21000, b)]);
        let [one, two] = split_by_size(&jobs, 0x2000);
        assert_eq!(one, vec![(0x1000, 0x3000, b)]);
        assert_eq!(two.len(), 2);
    }

    #[test]
    fn a_scan_in_two_halves_finds_what_one_scan_finds() {
        // 80 MiB read-write between two inaccessible pages (so that it stays
        // a mapping of its own), every third page written.
        let len = 82usize << 20;
        let p = anon_map(len);
        let (start, end) = (p as u64 + PAGE, p as u64 + len as u64 - PAGE);
        // SAFETY: changing the protection of our own mapping's edges.
        unsafe {
            libc::mprotect(p, PAGE as usize, libc::PROT_NONE);
            libc::mprotect(
                (end as usize) as *mut libc::c_void,
                PAGE as usize,
                libc::PROT_NONE,
            );
        }
        for a in (start..end).step_by(3 * PAGE as usize) {
            // SAFETY: inside the read-write part of the mapping above.
            unsafe { std::ptr::write_volatile(a as *mut u8, 1) };
        }
        let me = std::process::id() as pid_t;
        let mut pre = PreScan::scan(me, false, ScanFor::Populated).unwrap();
        let pagemap = std::fs::File::open("/proc/self/pagemap").unwrap();
        let one = page_runs(&pagemap, start, end, Backing::Anon).unwrap();
        let halves = pre.take(start, end, Backing::Anon);
        // SAFETY: unmapping the mapping made above.
        unsafe { libc::munmap(p, len) };
        assert_eq!(halves.expect("the mapping was scanned"), one);
        assert_eq!(one.len(), (end - start).div_ceil(3 * PAGE) as usize);
    }

    #[test]
    fn populated_anon_leaves_out_untouched_and_zero_page_pages() {
        const N: usize = 16;
        let len = N * PAGE as usize;
        let p = anon_map(len);
        let base = p as u64;
        // SAFETY: inside the mapping above; volatile so that the accesses happen.
        unsafe {
            for i in [0usize, 1, 2, 7] {
                std::ptr::write_volatile((p as *mut u8).add(i * PAGE as usize), 1);
            }
            // Read only: the shared zero page.
            for i in [4usize, 5, 12] {
                std::ptr::read_volatile((p as *const u8).add(i * PAGE as usize));
            }
        }
        let got = populated_anon(std::process::id() as pid_t, &[(base, len as u64)]);
        // SAFETY: unmapping the mapping made above.
        unsafe { libc::munmap(p, len) };
        assert_eq!(
            got.unwrap(),
            vec![(base, 3 * PAGE), (base + 7 * PAGE, PAGE)]
        );
    }

    #[test]
    fn range_filter_matches_page_by_page() {
        let runs = [(0x1000, 0x5000), (0x8000, 0x1000), (0x20000, 0x10000)];
        let filters = [
            RangeFilter::of_pages([0x2000, 0x3000, 0x9000, 0x8000, 0x25000, 0x2f000]),
            RangeFilter::new(vec![(0, 0x2000), (0x1000, 0x3000), (0x22000, 0x100000)]),
            RangeFilter::outside_or(
                vec![(0x2000, 0x2000), (0x21000, 0x4000)],
                vec![(0x23000, 0x1000)],
            ),
            RangeFilter::outside_or(vec![(0, 0x100000)], vec![]),
            RangeFilter::default(),
        ];
        for f in &filters {
            assert_eq!(filter_runs(&runs, f), per_page(f, &runs), "{f:?}");
        }
        assert_eq!(
            filter_runs(&runs, &filters[0]),
            vec![
                (0x2000, 0x2000),
                (0x8000, 0x1000),
                (0x25000, 0x1000),
                (0x2f000, 0x1000)
            ]
        );
        assert!(filter_runs(&runs, &filters[3]).is_empty());
    }

    #[test]
    fn pagemap_scan_finds_what_the_pagemap_says() {
        // Every other page of a private anonymous area populated.
        let len = 64 * PAGE as usize;
        let p = anon_map(len);
        for i in (0..64).step_by(2) {
            // SAFETY: inside the mapping created above.
            unsafe { *(p as *mut u8).add(i * PAGE as usize) = 1 };
        }
        let pagemap = std::fs::File::open("/proc/self/pagemap").unwrap();
        let (a, b) = (p as u64, p as u64 + len as u64);
        let scanned = page_runs(&pagemap, a, b, Backing::Anon).unwrap();
        let read = page_runs_read(&pagemap, a, b, Backing::Anon).unwrap();
        // SAFETY: unmapping the mapping created above.
        unsafe { libc::munmap(p, len) };
        assert_eq!(scanned, read);
        assert_eq!(scanned.len(), 32);
    }

    #[test]
    fn page_copier_packs_scattered_runs_and_reads_them_in_batches() {
        const PAGES: usize = 3000;
        let len = PAGES * PAGE as usize;
        let base = anon_map(len) as u64;
        for i in 0..PAGES {
            // SAFETY: inside the mapping made above.
            unsafe { *((base + i as u64 * PAGE) as *mut u64) = 0x5a00_0000 + i as u64 };
        }
        // More single-page runs than one gather takes, then runs across the
        // end of a buffer, in two mappings; the second is unreadable, which
        // only /proc/PID/mem reads.
        let readable: Vec<(u64, u64)> = (0..1300u64)
            .map(|i| (base + 2 * i * PAGE, PAGE))
            .chain([(base + 2600 * PAGE, 300 * PAGE)])
            .collect();
        let hidden = base + 2900 * PAGE;
        // SAFETY: the last 100 pages of our own mapping become inaccessible.
        assert_eq!(
            unsafe { libc::mprotect(hidden as *mut _, 100 * PAGE as usize, libc::PROT_NONE) },
            0
        );
        let unreadable = [(hidden, 60 * PAGE), (hidden + 80 * PAGE, 20 * PAGE)];

        let mem = std::fs::File::open("/proc/self/mem").unwrap();
        let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<(Vec<u8>, usize)>(3);
        let (empty_tx, empty_rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(2);
        for _ in 0..2 {
            empty_tx.send(vec![0u8; COPY_BUF]).unwrap();
        }
        let writer = std::thread::spawn(move || {
            let mut out = Vec::new();
            let mut sends = 0;
            for (buf, n) in full_rx {
                out.extend_from_slice(&buf[..n]);
                sends += 1;
                let _ = empty_tx.send(buf);
            }
            (out, sends)
        });
        let pid = std::process::id() as pid_t;
        let mut a = test_vma(base, hidden, libc::PROT_READ | libc::PROT_WRITE);
        let mut b = test_vma(hidden, base + len as u64, libc::PROT_NONE);
        let mut copier = PageCopier::new(pid, mem, 0x10000, full_tx, empty_rx);
        copier.save(&mut a, &readable).unwrap();
        copier.save(&mut b, &unreadable).unwrap();
        copier.finish().unwrap();
        drop(copier);
        let (out, sends) = writer.join().unwrap();
        // SAFETY: our own mapping, readable again for the checks.
        assert_eq!(
            unsafe { libc::mprotect(hidden as *mut _, 100 * PAGE as usize, libc::PROT_READ) },
            0
        );

        let total: u64 = readable.iter().chain(&unreadable).map(|r| r.1).sum();
        assert_eq!(out.len() as u64, total);
        // 1600 + 80 pages fill two 4 MiB buffers (1024 pages each).
        assert_eq!(sends, 2);
        let mut want_offset = 0x10000;
        for (vma, runs) in [(&a, &readable[..]), (&b, &unreadable[..])] {
            assert_eq!(vma.runs.len(), runs.len());
            for (r, &(addr, len)) in vma.runs.iter().zip(runs) {
                assert_eq!((r.addr, r.len, r.offset), (addr, len, want_offset));
                for p in (0..len).step_by(PAGE as usize) {
                    let at = (r.offset - 0x10000 + p) as usize;
                    let got = u64::from_ne_bytes(out[at..at + 8].try_into().unwrap());
                    let page = (addr + p - base) / PAGE;
                    assert_eq!(got, 0x5a00_0000 + page, "page {page}");
                }
                want_offset += len;
            }
        }
        // SAFETY: unmapping the mapping made above, no longer used.
        unsafe { libc::munmap(base as *mut _, len) };
    }

    #[test]
    fn page_copier_names_the_page_it_could_not_read() {
        let base = anon_map(4 * PAGE as usize) as u64;
        // SAFETY: the third page of our own mapping goes away.
        assert_eq!(
            unsafe { libc::munmap((base + 2 * PAGE) as *mut _, PAGE as usize) },
            0
        );
        let mem = std::fs::File::open("/proc/self/mem").unwrap();
        let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<(Vec<u8>, usize)>(3);
        let (empty_tx, empty_rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(1);
        empty_tx.send(vec![0u8; COPY_BUF]).unwrap();
        let pid = std::process::id() as pid_t;
        let mut v = test_vma(base, base + 4 * PAGE, libc::PROT_READ | libc::PROT_WRITE);
        let mut copier = PageCopier::new(pid, mem, 0, full_tx, empty_rx);
        copier
            .save(
                &mut v,
                &[
                    (base, PAGE),
                    (base + 2 * PAGE, PAGE),
                    (base + 3 * PAGE, PAGE),
                ],
            )
            .unwrap();
        let e = copier.finish().unwrap_err().to_string();
        assert!(
            e.contains(&format!("{:#x}", base + 2 * PAGE)),
            "error does not name the page: {e}"
        );
        drop(copier);
        assert!(
            full_rx.try_recv().is_err(),
            "a short buffer was handed over"
        );
        // SAFETY: what is left of the mapping made above.
        unsafe {
            libc::munmap(base as *mut _, 2 * PAGE as usize);
            libc::munmap((base + 3 * PAGE) as *mut _, PAGE as usize);
        }
    }
}

#[cfg(test)]
mod layout_tests {
    use super::*;

    fn line(start: u64, end: u64, path: &str, flags: &[&str]) -> MapLine {
        MapLine {
            start,
            end,
            read: true,
            write: true,
            exec: false,
            shared: false,
            offset: 0,
            dev: "00:00".into(),
            inode: 0,
            path: path.into(),
            flags: flags.iter().map(|f| f.to_string()).collect(),
            anon_kib: 0,
        }
    }

    #[test]
    fn only_views_of_the_same_shared_pages_are_refused() {
        let shm = |start: u64, pages: u64, offset: u64, inode: u64| MapLine {
            shared: true,
            offset: offset * 4096,
            inode,
            ..line(start, start + pages * 4096, "/dev/zero (deleted)", &[])
        };
        // One object split by mprotect: parts that do not overlap.
        let split = [shm(0x10000, 1, 0, 7), shm(0x11000, 3, 1, 7)];
        assert!(check_aliases(1, &split).is_ok());
        // Two objects at the same offsets.
        assert!(check_aliases(1, &[shm(0x10000, 2, 0, 7), shm(0x20000, 2, 0, 8)]).is_ok());
        // A second view of the object's second page.
        let e = check_aliases(1, &[shm(0x10000, 2, 0, 7), shm(0x20000, 1, 1, 7)])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("mapped twice") && e.contains("0x10000") && e.contains("0x20000"),
            "{e}"
        );
        // Private mappings of a file at overlapping offsets are no views.
        let file = |start| MapLine {
            inode: 9,
            ..line(start, start + 4096, "/usr/lib/x.so", &[])
        };
        assert!(check_aliases(1, &[file(0x10000), file(0x20000)]).is_ok());
    }

    fn layout(maps: Vec<MapLine>) -> Layout {
        let locked_kib = locked_kib_of(&maps);
        Layout { maps, locked_kib }
    }

    #[test]
    fn a_vdso_whose_code_sits_elsewhere_in_it_is_refused_before_anything_is_made() {
        let ours = procfs::maps(std::process::id() as pid_t).unwrap();
        let special = || {
            ours.iter()
                .filter(|m| m.path.starts_with("[vvar") || m.path == "[vdso]")
        };
        let lo = special().map(|m| m.start).min().unwrap();
        let hi = special().map(|m| m.end).max().unwrap();
        let text = ours.iter().find(|m| m.path == "[vdso]").unwrap().start;
        // The image's vDSO at another address, with our layout: accepted
        // as far as the vDSO goes (the missing exe fails afterwards).
        let state = |text_off: u64| MemoryState {
            vmas: Vec::new(),
            mm: MmFields {
                exe: FileId {
                    path: "/nonexistent/pmig-test-exe".into(),
                    ..Default::default()
                },
                ..Default::default()
            },
            vdso: Some((0x7000_0000_0000, hi - lo)),
            vdso_text: Some(0x7000_0000_0000 + text_off),
        };
        let mut pf = Preflight::new(Default::default(), 2);
        let same = Memory::preflight(&state(text - lo), &mut pf).unwrap_err();
        assert!(!same.to_string().contains("vDSO"), "{same}");
        // The same total length, but the code one page further in.
        let moved = Memory::preflight(&state(text - lo + 4096), &mut pf).unwrap_err();
        assert!(moved.to_string().contains("vDSO layout"), "{moved}");
    }

    #[test]
    fn a_layout_holds_only_while_every_mapping_and_the_locked_total_are_unchanged() {
        let l = layout(vec![
            line(0x1000, 0x3000, "[heap]", &["rd", "wr", "lo"]),
            line(0x10000, 0x20000, "", &["rd", "wr", "hg"]),
        ]);
        // /proc/PID/maps has no flags.
        let same = vec![
            line(0x1000, 0x3000, "[heap]", &[]),
            line(0x10000, 0x20000, "", &[]),
        ];
        assert!(l.still_holds(&same, 8));
        // mlock/munlock elsewhere changes VmLck.
        assert!(!l.still_holds(&same, 12));
        assert!(!l.still_holds(&same, 0));
        // A mapping grew, moved, changed protection or appeared.
        let mut grown = same.clone();
        grown[1].end = 0x21000;
        assert!(!l.still_holds(&grown, 8));
        let mut ro = same.clone();
        ro[0].write = false;
        assert!(!l.still_holds(&ro, 8));
        let mut more = same.clone();
        more.push(line(0x30000, 0x31000, "", &[]));
        assert!(!l.still_holds(&more, 8));
        assert!(!l.still_holds(&same[..1], 8));
        let mut renamed = same;
        renamed[1].path = "/tmp/x".into();
        assert!(!l.still_holds(&renamed, 8));
    }

    #[test]
    fn flags_are_carried_to_mappings_that_changed_and_none_to_new_memory() {
        let l = layout(vec![
            line(0x1000, 0x3000, "[heap]", &["rd", "wr", "lo"]),
            line(0x10000, 0x20000, "", &["rd", "wr", "nr", "hg"]),
            line(0x20000, 0x30000, "", &["rd", "wr", "dc"]),
        ]);
        let mut file = line(0x40000, 0x41000, "/usr/lib/x.so", &[]);
        file.inode = 7;
        file.dev = "08:01".into();
        let flags = |v: &[MapLine]| v.iter().map(|m| m.flags.join(" ")).collect::<Vec<_>>();
        // The heap grew, the second mapping was split by an mprotect, and
        // anonymous memory was mapped where nothing was.
        let mut ro = line(0x10000, 0x18000, "", &[]);
        ro.write = false;
        let now = vec![
            line(0x1000, 0x5000, "[heap]", &[]),
            ro,
            line(0x18000, 0x20000, "", &[]),
            line(0x20000, 0x30000, "", &[]),
            line(0x30000, 0x38000, "", &[]),
        ];
        // The heap's lock was carried: 16 KiB locked, as VmLck must say.
        assert!(l.carried_to(&now, 8).is_none());
        let got = l.carried_to(&now, 16).expect("carried");
        assert_eq!(
            flags(&got),
            ["lo", "nr hg", "nr hg", "dc", ""].map(String::from)
        );
        assert!(!got[1].write, "the mapping of now is kept");
        // A mapping across two whose flags differ, a file mapped since,
        // and anonymous memory over a file's place are read again.
        let across = vec![line(0x10000, 0x30000, "", &[])];
        assert!(l.carried_to(&across, 0).is_none());
        assert!(l.carried_to(&[file.clone()], 0).is_none());
        let mut shared = line(0x50000, 0x51000, "", &[]);
        shared.shared = true;
        assert!(l.carried_to(&[shared], 0).is_none());
        let lf = layout(vec![file]);
        assert!(lf
            .carried_to(&[line(0x40000, 0x41000, "", &[])], 0)
            .is_none());
        // Don't-fork memory is carried only where its mapping is as it was:
        // shrunk, it may be other memory mapped in its place.
        let kept = vec![line(0x20000, 0x30000, "", &[])];
        assert_eq!(flags(&l.carried_to(&kept, 0).unwrap()), ["dc"]);
        assert!(l
            .carried_to(&[line(0x20000, 0x28000, "", &[])], 0)
            .is_none());
    }

    #[test]
    fn changed_advice_is_named_and_other_flags_are_not() {
        let before = vec![
            line(0x1000, 0x3000, "[heap]", &["rd", "wr"]),
            line(0x10000, 0x20000, "", &["rd", "wr", "hg"]),
        ];
        let mut now = before.clone();
        // Flags pmig does not carry (e.g. "ac", accountable) may differ.
        now[0].flags.push("ac".into());
        assert!(flag_changes(&before, &now).is_empty());
        now[1].flags = vec!["rd".into(), "wr".into(), "nh".into()];
        assert_eq!(flag_changes(&before, &now), vec!["10000-20000".to_string()]);
        now[0].flags.push("wf".into());
        assert_eq!(flag_changes(&before, &now).len(), 2);
    }

    #[test]
    fn the_layout_of_a_stopped_process_is_reused_and_a_changed_one_is_read_again() {
        /// Kills and reaps the child even when an assertion fails.
        struct Reap(std::process::Child);
        impl Drop for Reap {
            fn drop(&mut self) {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
        let child = Reap(
            std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .expect("run sleep"),
        );
        let pid = child.0.id() as pid_t;
        // SAFETY: stopping our own child; it is killed below.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        // Bounded wait until it is stopped (its mappings no longer change).
        for _ in 0..1000 {
            let st = procfs::status(pid).unwrap();
            if st.get("State").is_some_and(|s| s.starts_with('T')) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let l = Layout::read(pid).unwrap();
        let (used, read) = l.clone().current(pid, vm_locked_kib(pid).unwrap()).unwrap();
        assert!(!read);
        assert_eq!(used.maps, l.maps);
        assert!(used.maps.iter().any(|m| !m.flags.is_empty()));
        assert!(l.changed_flags(pid).unwrap().is_empty());
        // A layout whose first mapping ended a page further on: the flags
        // are carried over to the mappings of now, and check out.
        let mut stale = l.clone();
        stale.maps[0].end += PAGE;
        let (used, read) = stale
            .clone()
            .current(pid, vm_locked_kib(pid).unwrap())
            .unwrap();
        assert!(!read);
        let bounds = |v: &[MapLine]| v.iter().map(|m| (m.start, m.end)).collect::<Vec<_>>();
        assert_eq!(bounds(&used.maps), bounds(&l.maps));
        for (a, b) in used.maps.iter().zip(&l.maps) {
            assert_eq!(a.flags, carried_flags(&b.flags), "{:x}", a.start);
        }
        assert!(used.changed_flags(pid).unwrap().is_empty());
        // One whose mapping of the program's file is missing: a file
        // mapped since is read again, with every flag.
        let exe = l.maps.iter().position(|m| m.inode != 0).unwrap();
        stale.maps.remove(exe);
        let (used, read) = stale.current(pid, vm_locked_kib(pid).unwrap()).unwrap();
        assert!(read);
        assert_eq!(used.maps, l.maps);

        // The pre-scan finds, per private mapping, what the capture's own
        // scan finds, and nothing for shared mappings.
        let mut pre = PreScan::scan(pid, false, ScanFor::Populated).unwrap();
        let pagemap = std::fs::File::open(format!("/proc/{pid}/pagemap")).unwrap();
        let mut private = 0;
        for m in &used.maps {
            let Ok(Some(b)) = classify(pid, m) else {
                continue;
            };
            let own = page_runs(&pagemap, m.start, m.end, b).unwrap();
            match pre.take(m.start, m.end, b) {
                Some(r) => {
                    assert!(!m.shared);
                    assert_eq!(r, own, "{:x}-{:x} {}", m.start, m.end, m.path);
                    private += 1;
                }
                None => assert!(m.shared, "{:x}-{:x} not pre-scanned", m.start, m.end),
            }
        }
        assert!(private > 0);
        assert!(pre.runs.is_empty(), "left over: {:?}", pre.runs.keys());
        // Other bounds are not taken.
        assert!(pre.take(0x1000, 0x2000, Backing::Anon).is_none());
    }
}
