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
//! So is the owner of each robust mutex a thread holds, found through the
//! thread's robust list ([`robust_list`]): the lock word's id bits, which
//! the thread's unlock and the kernel (when the thread exits holding it)
//! compare with the thread's id, and glibc's `__owner`.
//!
//! And so is the owner of every other held mutex that checks it (recursive,
//! error-checking, priority inheritance), found by glibc's layout
//! ([`held_mutexes`]): in the image's pages by the restore, and in each page
//! installed later by `LazyMemory` with the ids the restore reports, one
//! across the edge of two pages installed apart too ([`held_across`]). The
//! dynamic loader's locks are such mutexes (recursive): one held across the
//! migration, by a thread inside `dlopen` or `dl_iterate_phdr`, lies in the
//! loader's data, a private copy of its file that travels with the state.
//!
//! Not rewritten here: ids that a program or a runtime copied elsewhere
//! (Go's thread ids have a module of their own, `gort`; a saved pid is not
//! rewritten at all).

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

/// What was read from files, each value kept for as long as its file (path
/// and identity, [`FileId`]) stays the same.
pub(crate) struct FileCache<T: Copy>(std::sync::Mutex<Vec<(String, FileId, T)>>);

impl<T: Copy> FileCache<T> {
    pub(crate) const fn new() -> Self {
        FileCache(std::sync::Mutex::new(Vec::new()))
    }

    /// The value of the file at `path`: the one kept, or `read`'s.
    pub(crate) fn get(&self, path: &str, read: impl FnOnce(&str) -> Result<T>) -> Result<T> {
        let id = file_id(path);
        let entries = || self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(v) = entries()
            .iter()
            .find(|(p, i, _)| p == path && Some(*i) == id)
            .map(|k| k.2)
        {
            return Ok(v);
        }
        let v = read(path)?;
        if let Some(id) = id {
            entries().push((path.to_string(), id, v));
        }
        Ok(v)
    }

    #[cfg(test)]
    fn entries(&self, path: &str) -> usize {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|k| k.0 == path)
            .count()
    }
}

/// Where each glibc looked up keeps the thread id ([`tid_offset`]).
static TID_OFFSETS: FileCache<Option<u64>> = FileCache::new();

/// [`tid_offset`], looked up once per file: reading a symbol from the file
/// takes about 0.4 ms, which a restore would spend while the process is
/// stopped.
fn tid_offset_known(path: &str) -> Result<Option<u64>> {
    TID_OFFSETS.get(path, tid_offset)
}

/// Looks up the glibc this process runs with, ahead of a restore: a
/// restore that waits for its image does it (`pmig restore --wait-go`),
/// since the image's glibc is most often the same file, whose lookup then
/// costs one `stat` at the stop.
pub fn learn_own_glibc() {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return;
    };
    for lib in maps.lines().filter_map(|l| l.split_whitespace().nth(5)) {
        if is_glibc(lib) {
            let _ = tid_offset_known(lib);
        }
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

/// glibc's `pthread_mutex_t` on x86-64: lock word, count, owner's thread
/// id, users, kind, then spin count and list links.
const MUTEX_BYTES: u64 = 40;
/// A mutex's type, in the low bits of its kind: recursive
/// (`PTHREAD_MUTEX_RECURSIVE_NP`, as the loader's locks) and error-checking.
const MUTEX_TYPE_MASK: u32 = 3;
const MUTEX_RECURSIVE: u32 = 1;
const MUTEX_ERRORCHECK: u32 = 2;
/// Priority inheritance: the lock word holds the owner's id too.
const MUTEX_PI: u32 = 32;
/// Shared between processes (kept as it is).
const MUTEX_PSHARED: u32 = 128;
/// Flags glibc may add to a mutex's kind (lock elision on or off).
const MUTEX_ELISION_FLAGS: u32 = 0x300;
/// `FUTEX_OWNER_DIED` in a priority-inheritance lock word.
const FUTEX_OWNER_DIED: u32 = 0x4000_0000;

/// A held mutex found by [`held_mutexes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldMutex {
    /// Its offset in the bytes searched.
    pub at: usize,
    /// Its owner's new id.
    pub new: pid_t,
    /// A priority-inheritance mutex, whose lock word holds the id as well.
    pub pi: bool,
}

/// The glibc mutexes in `mem` held by a thread whose id changed (`ids`:
/// old, new) that check their owner: recursive and error-checking ones,
/// and any with priority inheritance. Their owner's unlock would fail
/// with EPERM and leave them held for good, and a recursive one's owner
/// would wait for itself at its next lock. A mutex that is not robust
/// (a robust one is found through its owner's list, [`robust_list`]),
/// held, reads: a lock word of 1 or 2 (with priority inheritance, the
/// owner's id), a count of at least 1 if recursive or with priority
/// inheritance and 0 if not, the
/// owner's id, 1 to 65535 users, one of those kinds, then zeros (no spin
/// count, no elision, no list links). Mutexes are 8-byte aligned; one that
/// `mem` does not hold whole is not found.
pub fn held_mutexes(mem: &[u8], ids: &[(pid_t, pid_t)]) -> Vec<HeldMutex> {
    let moved = moved_ids(ids);
    let (Some(lo), Some(hi)) = (
        moved.iter().map(|m| m.0).min(),
        moved.iter().map(|m| m.0).max(),
    ) else {
        return Vec::new();
    };
    let could_be_owner = |w: &[u8]| {
        u32::from_le_bytes(w[..4].try_into().unwrap_or_default()).wrapping_sub(lo) <= hi - lo
    };
    let mut held = Vec::new();
    // The owner's id is the low half of a mutex's second 8-byte word. The
    // words are looked at a block at a time (a loop the compiler
    // vectorises), and only a block with a word that could be a moved
    // thread's id is looked at closely.
    const BLOCK: usize = 64;
    let words = mem.len() / 8;
    let mut b = 0;
    while b < words {
        let e = (b + BLOCK).min(words);
        let maybe = mem[b * 8..e * 8]
            .chunks_exact(8)
            .fold(false, |a, w| a | could_be_owner(w));
        // j: the owner's word; the mutex starts one word before it.
        let closely = if maybe { b.max(1)..e } else { e..e };
        b = e;
        for j in closely {
            let o = (j - 1) * 8;
            if o + MUTEX_BYTES as usize > mem.len() {
                break;
            }
            if let Some(h) = held_at(mem, o, &moved, &|_| true) {
                held.push(h);
            }
        }
    }
    held
}

/// Of `ids` (old, new), those that changed, the old one as a mutex's
/// owner field holds it.
fn moved_ids(ids: &[(pid_t, pid_t)]) -> Vec<(u32, pid_t)> {
    ids.iter()
        .filter(|&&(old, new)| old > 0 && old != new)
        .map(|&(old, new)| (old as u32, new))
        .collect()
}

/// The held mutex of [`held_mutexes`] at offset `o` of `mem`, if it is
/// one, judged by the bytes `known` accepts (their offsets in `mem`; the
/// owner's must be one): a check on a field whose bytes are not known
/// passes.
fn held_at(
    mem: &[u8],
    o: usize,
    moved: &[(u32, pid_t)],
    known: &dyn Fn(usize) -> bool,
) -> Option<HeldMutex> {
    let word = |o: usize| u32::from_le_bytes(mem[o..o + 4].try_into().unwrap_or_default());
    let quad = |o: usize| u64::from_le_bytes(mem[o..o + 8].try_into().unwrap_or_default());
    let owner = word(o + 8);
    let &(_, new) = moved.iter().find(|m| m.0 == owner)?;
    let (lock, count, users, kind) = (word(o), word(o + 4), word(o + 12), word(o + 16));
    let pi = kind & MUTEX_PI != 0;
    let kind_ok = match kind & !(MUTEX_ELISION_FLAGS | MUTEX_PSHARED | MUTEX_PI) {
        MUTEX_RECURSIVE | MUTEX_ERRORCHECK => true,
        0 => pi,
        _ => false,
    };
    let lock_ok = if pi {
        lock & FUTEX_TID_MASK == owner && lock & FUTEX_OWNER_DIED == 0
    } else {
        matches!(lock, 1 | 2)
    };
    // glibc counts a priority-inheritance mutex's holds whatever its type.
    let count_ok = if pi || kind & MUTEX_TYPE_MASK == MUTEX_RECURSIVE {
        (1..1 << 16).contains(&count)
    } else {
        count == 0
    };
    let ok = |at: usize, good: bool| good || !known(at);
    (known(o + 8)
        && known(o + 16)
        && kind_ok
        && ok(o, lock_ok)
        && ok(o + 4, count_ok)
        && ok(o + 12, (1..1 << 16).contains(&users))
        && ok(o + 20, word(o + 20) == 0)
        && ok(o + 24, quad(o + 24) == 0)
        && ok(o + 32, quad(o + 32) == 0))
    .then_some(HeldMutex { at: o, new, pi })
}

impl HeldMutex {
    /// The words to write, at their offsets in `mem` (where it was found):
    /// the owner's new id, and with priority inheritance the lock word with
    /// the new id in its id bits.
    fn rewrites(&self, mem: &[u8]) -> impl Iterator<Item = (usize, [u8; 4])> {
        let lock = u32::from_le_bytes(mem[self.at..self.at + 4].try_into().unwrap_or_default());
        let lock = (lock & !FUTEX_TID_MASK) | self.new as u32;
        std::iter::once((self.at + 8, self.new.to_le_bytes()))
            .chain(self.pi.then_some((self.at, lock.to_le_bytes())))
    }
}

/// Rewrites in `mem` the mutexes [`held_mutexes`] found in it
/// ([`HeldMutex::rewrites`]).
pub fn rewrite_held_mutexes(mem: &mut [u8], held: &[HeldMutex]) {
    for h in held {
        for (o, w) in h.rewrites(mem).collect::<Vec<_>>() {
            mem[o..o + 4].copy_from_slice(&w);
        }
    }
}

/// How much of a mutex may lie on one side of an edge between two pages
/// (it is 40 bytes and 8-byte aligned).
pub const EDGE_BYTES: usize = MUTEX_BYTES as usize - 8;

/// A word to rewrite across an edge ([`held_across`]): at `at` bytes from
/// the edge, the thread id `old` in its id bits becomes `new` (an owner
/// field is all id; a priority-inheritance lock word keeps its flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdWrite {
    pub at: i64,
    pub old: u32,
    pub new: u32,
}

impl IdWrite {
    /// `w` rewritten, if it still names the old id.
    pub fn apply(&self, w: u32) -> Option<u32> {
        (w & FUTEX_TID_MASK == self.old).then_some((w & !FUTEX_TID_MASK) | self.new)
    }
}

/// The held mutexes of [`held_mutexes`] that lie across an edge: `before`,
/// the [`EDGE_BYTES`] that end at it, and `after`, those that start there;
/// None for a side not there yet (a page still owed). Without one side,
/// only a mutex whose kind and owner both lie on the side there is judged,
/// by what that side shows: glibc reads a mutex's kind first, then its
/// owner, so where either lies on the missing side an operation on it
/// waits for that page, whose install sees the whole mutex. Returns the
/// words to rewrite. A mutex that lies wholly on one side is not found
/// here (the window holds none whole).
pub fn held_across(
    before: Option<&[u8]>,
    after: Option<&[u8]>,
    ids: &[(pid_t, pid_t)],
) -> Vec<IdWrite> {
    let moved = moved_ids(ids);
    let unknown = [0u8; EDGE_BYTES];
    let (b, a) = (before.unwrap_or(&unknown), after.unwrap_or(&unknown));
    if b.len() != EDGE_BYTES || a.len() != EDGE_BYTES || (before.is_none() && after.is_none()) {
        return Vec::new();
    }
    let seam = [b, a].concat();
    let known = |o: usize| {
        if o < EDGE_BYTES {
            before.is_some()
        } else {
            after.is_some()
        }
    };
    let word = |o: usize| u32::from_le_bytes(seam[o..o + 4].try_into().unwrap_or_default());
    let mut writes = Vec::new();
    for o in (0..=EDGE_BYTES - 8).step_by(8) {
        let Some(h) = held_at(&seam, o, &moved, &known) else {
            continue;
        };
        let old = word(o + 8);
        let at = |x: usize| x as i64 - EDGE_BYTES as i64;
        writes.push(IdWrite {
            at: at(o + 8),
            old,
            new: h.new as u32,
        });
        if h.pi {
            writes.push(IdWrite {
                at: at(o),
                old,
                new: h.new as u32,
            });
        }
    }
    writes
}

/// `n` bytes of process `pid`'s memory at `a`; None unless all of them
/// could be read.
fn peek(pid: pid_t, a: u64, n: usize) -> Option<Vec<u8>> {
    let mut b = vec![0u8; n];
    (sys::process_vm_read(pid, a, &mut b).ok()? == n).then_some(b)
}

/// `FUTEX_TID_MASK`: the owner's thread id in a robust futex's word.
const FUTEX_TID_MASK: u32 = 0x3fff_ffff;
/// `sizeof(struct robust_list_head)`: the list's first link, the offset
/// from a link to its futex word, and the operation in progress.
const ROBUST_HEAD_BYTES: u64 = 24;
/// The kernel's `ROBUST_LIST_LIMIT`: it walks no more entries either.
const ROBUST_LIST_LIMIT: usize = 2048;
/// glibc's offset from a mutex's list link to its lock word; the owner's
/// id is 8 bytes past the lock word (`__owner`).
const GLIBC_FUTEX_OFFSET: i64 = -32;

/// What a thread's robust mutex list names ([`robust_list`]).
#[derive(Debug, PartialEq, Eq)]
pub struct RobustList {
    /// The futex words' addresses.
    pub words: Vec<u64>,
    /// The entries' addresses (their links), the head's included.
    pub links: Vec<u64>,
    pub futex_offset: i64,
    /// Whether the walk came back to the head (a list cut short by memory
    /// that could not be read, or longer than the kernel walks, did not).
    pub complete: bool,
}

/// The robust list at `head`, walked as the kernel walks it when the
/// thread exits: the futex words of its entries (each link plus the head's
/// futex offset) and that of the operation in progress. Bit 0 of a link
/// marks a priority-inheritance futex and is not part of the address.
/// `read` gives the process's memory, None where it cannot; None if the
/// head cannot be read.
pub fn robust_list(head: u64, read: &dyn Fn(u64, usize) -> Option<Vec<u8>>) -> Option<RobustList> {
    let h =
        read(head, ROBUST_HEAD_BYTES as usize).filter(|h| h.len() == ROBUST_HEAD_BYTES as usize)?;
    let w = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or_default());
    let futex_offset = w(&h, 8) as i64;
    let pending = w(&h, 16) & !1;
    let mut l = RobustList {
        words: Vec::new(),
        links: vec![head],
        futex_offset,
        complete: false,
    };
    let mut entry = w(&h, 0) & !1;
    for _ in 0..ROBUST_LIST_LIMIT {
        if entry == head {
            l.complete = true;
            break;
        }
        if entry == 0 {
            break;
        }
        l.links.push(entry);
        if entry != pending {
            l.words.push(entry.wrapping_add(futex_offset as u64));
        }
        match read(entry, 8).filter(|n| n.len() == 8) {
            Some(n) => entry = w(&n, 0) & !1,
            None => break,
        }
    }
    if pending != 0 {
        l.links.push(pending);
        l.words.push(pending.wrapping_add(futex_offset as u64));
    }
    Some(l)
}

/// The pages of the robust list whose head a thread of the frozen process
/// `pid` registered at `head` (`len` bytes, as `get_robust_list` says):
/// its links, futex words and glibc owner fields. A lazy handover sends
/// them along, so that the restore can rewrite the owner of each mutex the
/// thread holds ([`rewrite_robust`]) without waiting for a page.
pub fn robust_pages_at(pid: pid_t, head: u64, len: u64) -> Vec<u64> {
    if head == 0 || len != ROBUST_HEAD_BYTES {
        return Vec::new();
    }
    robust_list(head, &|a, n| peek(pid, a, n))
        .map(|l| l.pages())
        .unwrap_or_default()
}

impl RobustList {
    /// The pages the list lies on: its links, and its futex words with
    /// glibc's owner fields after them.
    pub fn pages(&self) -> Vec<u64> {
        let pg = |a: u64| a & !(PAGE - 1);
        let mut pages = Vec::new();
        for &a in &self.links {
            pages.extend([pg(a), pg(a + ROBUST_HEAD_BYTES - 1)]);
        }
        for &a in &self.words {
            pages.extend([pg(a), pg(a + 11)]);
        }
        pages.sort_unstable();
        pages.dedup();
        pages
    }
}

/// Rewrites, in the restored process `pid`, the owner of each robust mutex
/// on the robust list at `head` of a thread whose id went from `old` to
/// `new`: the lock word's id bits, and with glibc's layout (`glibc`: the
/// list's head lies in the thread's descriptor, and the futex offset is
/// glibc's) the mutex's `__owner`. The thread's own unlock would otherwise
/// fail with EPERM, and if it died holding one the kernel would not mark
/// it dead (it matches the word against the exiting thread's id), leaving
/// its waiters waiting for good. Returns how many were rewritten.
fn rewrite_robust(
    pid: pid_t,
    head: u64,
    (old, new): (pid_t, pid_t),
    glibc: bool,
    readable: &dyn Fn(u64, u64) -> bool,
) -> Result<usize> {
    let read = |a: u64, n: usize| readable(a, n as u64).then(|| peek(pid, a, n)).flatten();
    let Some(l) = robust_list(head, &read) else {
        return Ok(0);
    };
    let word_at =
        |a: u64| read(a, 4).map(|b| u32::from_le_bytes(b[..4].try_into().unwrap_or_default()));
    let mut n = 0;
    for &a in &l.words {
        let Some(word) = word_at(a) else { continue };
        if (word & FUTEX_TID_MASK) as pid_t != old {
            continue;
        }
        let now = (word & !FUTEX_TID_MASK) | new as u32;
        sys::process_vm_write(pid, a, &now.to_le_bytes())?;
        if glibc && l.futex_offset == GLIBC_FUTEX_OFFSET && word_at(a + 8) == Some(old as u32) {
            sys::process_vm_write(pid, a + 8, &new.to_le_bytes())?;
        }
        n += 1;
    }
    if !l.complete {
        tracing::warn!(
            "process {pid}: the robust mutex list of thread {old} was not walked to its end (a page not here yet, or a broken list); mutexes past {} entries keep the old id",
            l.words.len()
        );
    }
    Ok(n)
}

/// Rewrites glibc's copy of each thread's id in the restored process
/// (threads of `frozen`, in the image's order) where the ids changed, then
/// the owners that name those threads: each thread's robust mutexes, and
/// the mutexes held in the image's pages ([`held_mutexes`]), the loader's
/// locks among them. Returns the ids rewritten (old, new; every thread's,
/// in the image's order), so that the pages still to come can be rewritten
/// as they are installed ([`rewrite_held_mutexes`]); none if the ids are
/// kept or the process does not use glibc's layout. With `lazy`, pages
/// missing from the image are owed, and only descriptors the image holds
/// are read. `found`: where an [`OwnerScan`] of the image's pages found
/// held mutexes; without it, the pages are read back from the process.
pub fn rewrite_tids(
    pi: &ProcessImage,
    frozen: &Frozen,
    lazy: bool,
    found: Option<&[u64]>,
) -> Result<Vec<(pid_t, pid_t)>> {
    let pairs = super::threads::renamed(pi, frozen);
    if pairs.iter().all(|(old, new, _)| old == new) {
        return Ok(Vec::new());
    }
    let Some(lib) = pi.memory.vmas.iter().find_map(|v| {
        let f = v.file.as_ref()?;
        if v.offset != 0 {
            return None;
        }
        match super::ghosts::deleted_path(&f.path) {
            // Deleted (an upgrade): the file made again, which the new
            // process maps there.
            Some(p) if is_glibc(p) => Some(format!(
                "/proc/{}/map_files/{:x}-{:x}",
                frozen.pid, v.start, v.end
            )),
            None if is_glibc(&f.path) => Some(f.path.clone()),
            _ => None,
        }
    }) else {
        return Ok(Vec::new());
    };
    let Some(off) = tid_offset_known(&lib)? else {
        return Ok(Vec::new());
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
            return Ok(Vec::new());
        }
    }
    // Every thread's id in its descriptor, read in one call (a few at most).
    let ids_read = read_words(pid, pairs.iter().map(|p| p.2 + off));
    for (&(old, _, fs_base), got) in pairs.iter().zip(&ids_read) {
        if fs_base == 0 || *got != Some(old as u32) {
            tracing::debug!(
                "process {pid}: thread {old}'s descriptor does not hold its id at {off:#x}; ids left as they are"
            );
            return Ok(Vec::new());
        }
    }
    let changed: Vec<(u64, u32)> = pairs
        .iter()
        .filter(|p| p.0 != p.1)
        .map(|&(_, new, fs_base)| (fs_base + off, new as u32))
        .collect();
    write_words(pid, &changed)?;
    let n = changed.len();
    // Now that glibc names each thread by its new id, the mutexes the
    // threads hold must too. A lazy restore reads a robust list only where
    // it is in a file's mapping or in the image: any other page is owed.
    let ids: Vec<(pid_t, pid_t)> = pairs.iter().map(|&(old, new, _)| (old, new)).collect();
    let readable = |a: u64, len: u64| {
        !lazy
            || (a..a + len)
                .step_by(PAGE as usize)
                .chain([a + len.saturating_sub(4)])
                .all(|p| {
                    pi.memory
                        .vmas
                        .iter()
                        .any(|v| v.start <= p && p < v.end && v.file.is_some())
                        || in_image(p)
                })
    };
    // A list whose head links to itself, with no operation in progress, is
    // empty: the heads are read together, and only the others walked.
    let walk: Vec<(pid_t, pid_t, u64, u64)> = pi
        .threads
        .threads
        .iter()
        .zip(&pairs)
        .filter(|(th, &(old, new, _))| {
            let (head, len) = th.robust_list;
            // One a lazy restore cannot read yet is not walked either.
            old != new && head != 0 && len == ROBUST_HEAD_BYTES && readable(head, len)
        })
        .map(|(th, &(old, new, fs_base))| (old, new, fs_base, th.robust_list.0))
        .collect();
    // Each head's first link and operation in progress, as 32-bit halves.
    let heads = read_words(
        pid,
        walk.iter().flat_map(|w| [w.3, w.3 + 4, w.3 + 16, w.3 + 20]),
    );
    for (i, &(old, new, fs_base, head)) in walk.iter().enumerate() {
        let word = |k: usize| heads.get(4 * i + k).copied().flatten();
        let quad = |k: usize| Some(word(k)? as u64 | (word(k + 1)? as u64) << 32);
        if quad(0).map(|next| next & !1) == Some(head) && quad(2) == Some(0) {
            continue;
        }
        let glibc = (fs_base..fs_base + DESCRIPTOR_BYTES).contains(&head);
        let k = rewrite_robust(pid, head, (old, new), glibc, &readable)?;
        if k > 0 {
            tracing::info!(
                "process {pid}: {k} robust mutexes held by thread {old} now name its new id {new}"
            );
        }
    }
    let k = match found {
        Some(addrs) => rewrite_mutexes_at(pid, addrs, &ids)?,
        None => rewrite_image_mutexes(pi, pid, &ids)?,
    };
    if k > 0 {
        tracing::info!(
            "process {pid}: {k} mutexes held across the move now name their owners' new ids"
        );
    }
    tracing::debug!("process {pid}: new ids written into {n} thread descriptors");
    Ok(ids)
}

/// The 32-bit words at `addrs` in process `pid`, read in as few calls as
/// [`sys::GATHER_MAX`] allows: None for a word that could not be read, and
/// for every word after it in the same call (the kernel stops at the first
/// it cannot read).
fn read_words(pid: pid_t, addrs: impl Iterator<Item = u64>) -> Vec<Option<u32>> {
    let addrs: Vec<u64> = addrs.collect();
    let mut out = Vec::with_capacity(addrs.len());
    for batch in addrs.chunks(sys::GATHER_MAX) {
        let segs: Vec<(u64, usize)> = batch.iter().map(|&a| (a, 4)).collect();
        let mut buf = vec![0u8; 4 * batch.len()];
        let got = sys::process_vm_read_gather(pid, &segs, &mut buf).unwrap_or(0) / 4;
        out.extend(
            buf.chunks_exact(4).enumerate().map(|(i, w)| {
                (i < got).then(|| u32::from_le_bytes(w.try_into().unwrap_or_default()))
            }),
        );
    }
    out
}

/// Writes each word of `words` (address, value) into process `pid`, in as
/// few calls as [`sys::GATHER_MAX`] allows; an error names the first that
/// could not be written.
fn write_words(pid: pid_t, words: &[(u64, u32)]) -> Result<()> {
    for batch in words.chunks(sys::GATHER_MAX) {
        let segs: Vec<(u64, usize)> = batch.iter().map(|&(a, _)| (a, 4)).collect();
        let buf: Vec<u8> = batch.iter().flat_map(|w| w.1.to_le_bytes()).collect();
        let put = sys::process_vm_write_scatter(pid, &segs, &buf)? / 4;
        // The kernel stopped at a word it could not write: the rest one by
        // one, the first of them with its error.
        for &(a, v) in &batch[put.min(batch.len())..] {
            sys::process_vm_write(pid, a, &v.to_le_bytes())?;
        }
    }
    Ok(())
}

/// Finds, while an image's pages are read to verify their checksums
/// ([`pmig_image::Image::verify_visiting`]), the mutexes that its threads
/// hold under their ids ([`held_mutexes`], whichever of them change), so
/// that a restore that gives them new ids rewrites those mutexes without
/// reading every page back ([`rewrite_tids`]).
pub struct OwnerScan {
    /// The image's thread ids, each with -1 as its new id (not known yet).
    owners: Vec<(pid_t, pid_t)>,
    /// The last bytes seen (less than a mutex), and their offset: a mutex
    /// across two pieces is found with the second.
    tail: Vec<u8>,
    tail_at: u64,
    /// Offsets in the pages file.
    found: Vec<u64>,
}

impl OwnerScan {
    pub fn new(pi: &ProcessImage) -> OwnerScan {
        let tids: Vec<pid_t> = pi.threads.threads.iter().map(|t| t.tid).collect();
        OwnerScan::of(&tids)
    }

    fn of(tids: &[pid_t]) -> OwnerScan {
        OwnerScan {
            owners: tids.iter().map(|&t| (t, -1)).collect(),
            tail: Vec::new(),
            tail_at: 0,
            found: Vec::new(),
        }
    }

    /// The next `data`, at offset `at` of the pages file.
    pub fn feed(&mut self, at: u64, data: &[u8]) {
        const KEEP: usize = MUTEX_BYTES as usize - 8;
        for h in held_mutexes(data, &self.owners) {
            self.found.push(at + h.at as u64);
        }
        if self.tail_at + self.tail.len() as u64 != at {
            self.tail.clear();
        }
        // A mutex that starts in the last bytes seen and ends in `data`.
        if !self.tail.is_empty() {
            let mut seam = self.tail.clone();
            seam.extend_from_slice(&data[..data.len().min(MUTEX_BYTES as usize)]);
            for h in held_mutexes(&seam, &self.owners) {
                if h.at < self.tail.len() {
                    self.found.push(self.tail_at + h.at as u64);
                }
            }
        }
        // Mutexes are 8-byte aligned: a seam is looked at only between
        // pieces that keep the alignment (the verification's do).
        if !at.is_multiple_of(8) || !data.len().is_multiple_of(8) {
            self.tail.clear();
            return;
        }
        self.tail
            .extend_from_slice(&data[data.len().saturating_sub(KEEP)..]);
        let extra = self.tail.len().saturating_sub(KEEP);
        self.tail.drain(..extra);
        self.tail_at = at + data.len() as u64 - self.tail.len() as u64;
    }

    /// The addresses of the mutexes found, in the process restored from
    /// `pi`.
    pub fn addresses(self, pi: &ProcessImage) -> Vec<u64> {
        let runs: Vec<_> = pi.memory.vmas.iter().flat_map(|v| &v.runs).collect();
        self.found
            .iter()
            .filter_map(|&o| {
                let r = runs
                    .iter()
                    .find(|r| r.offset <= o && o + MUTEX_BYTES <= r.offset + r.len)?;
                Some(r.addr + (o - r.offset))
            })
            .collect()
    }
}

/// Rewrites the mutexes at `addrs` (an [`OwnerScan`]'s) that moved threads
/// hold, once [`held_mutexes`] finds them there in the process. Returns
/// how many.
fn rewrite_mutexes_at(pid: pid_t, addrs: &[u64], ids: &[(pid_t, pid_t)]) -> Result<usize> {
    let mut n = 0;
    for &a in addrs {
        let Some(b) = peek(pid, a, MUTEX_BYTES as usize) else {
            continue;
        };
        for h in held_mutexes(&b, ids) {
            for (o, w) in h.rewrites(&b) {
                sys::process_vm_write(pid, a + o as u64, &w)?;
            }
            n += 1;
        }
    }
    Ok(n)
}

/// Rewrites the mutexes held by moved threads ([`held_mutexes`]) in the
/// pages the image holds, which the restore put in the process (the pages
/// that come later are rewritten as they are installed). Returns how many.
fn rewrite_image_mutexes(pi: &ProcessImage, pid: pid_t, ids: &[(pid_t, pid_t)]) -> Result<usize> {
    // A piece at a time; pieces of a run overlap by less than a mutex, so
    // that one across two pieces is whole in one of them.
    const PIECE: u64 = 4 << 20;
    const OVERLAP: u64 = MUTEX_BYTES - 8;
    let mut pieces: Vec<(u64, usize)> = Vec::new();
    for r in pi.memory.vmas.iter().flat_map(|v| &v.runs) {
        let mut a = r.addr;
        while a < r.addr + r.len {
            let len = PIECE.min(r.addr + r.len - a);
            pieces.push((a, len as usize));
            if a + len >= r.addr + r.len {
                break;
            }
            a += len - OVERLAP;
        }
    }
    let mut n = 0;
    let mut scan = |a: u64, mem: &[u8]| -> Result<()> {
        for h in held_mutexes(mem, ids) {
            for (o, w) in h.rewrites(mem) {
                sys::process_vm_write(pid, a + o as u64, &w)?;
            }
            n += 1;
        }
        Ok(())
    };
    // As many pieces as one call reads, up to BATCH bytes in all (an image
    // of the stop holds many short runs), into one buffer: memory new to
    // the process costs a fault a page.
    const BATCH: usize = 64 << 10;
    let mut buf = Vec::new();
    let mut i = 0;
    while i < pieces.len() {
        let (mut j, mut total) = (i, 0);
        while j < pieces.len()
            && j - i < sys::GATHER_MAX
            && (j == i || total + pieces[j].1 <= BATCH)
        {
            total += pieces[j].1;
            j += 1;
        }
        buf.resize(total, 0);
        let got = sys::process_vm_read_gather(pid, &pieces[i..j], &mut buf).unwrap_or(0);
        let mut off = 0;
        for &(a, len) in &pieces[i..j] {
            if off + len <= got {
                scan(a, &buf[off..off + len])?;
            } else {
                // Past one the call could not read: alone, as each can.
                let mut one = vec![0u8; len];
                if sys::process_vm_read(pid, a, &mut one).ok() == Some(len) {
                    scan(a, &one)?;
                } else {
                    tracing::debug!("process {pid}: the pages at {a:#x} cannot be read; mutexes there left as they are");
                }
            }
            off += len;
        }
        i = j;
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

    /// The bytes of this process's writable mappings of its dynamic loader
    /// (`ld-linux…`), where its data lies (`_rtld_global` and its locks).
    fn own_loader_data() -> Option<Vec<u8>> {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        // SAFETY: getpid has no arguments.
        let me = unsafe { libc::getpid() };
        let mut mem = Vec::new();
        for l in maps.lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            let name = f.get(5).and_then(|p| p.rsplit('/').next()).unwrap_or("");
            if !name.starts_with("ld-linux") || !f[1].starts_with("rw") {
                continue;
            }
            let (a, b) = f[0].split_once('-')?;
            let (a, b) = (
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
            );
            let at = mem.len();
            mem.resize(at + (b - a) as usize, 0);
            assert_eq!(
                sys::process_vm_read(me, a, &mut mem[at..]).unwrap(),
                (b - a) as usize
            );
        }
        (!mem.is_empty()).then_some(mem)
    }

    extern "C" fn inside_the_loader_lock(
        _info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is the &mut Option<Vec<u8>> the test passed.
        let out = unsafe { &mut *(data as *mut Option<Vec<u8>>) };
        *out = own_loader_data();
        1 // one object is enough
    }

    #[test]
    fn a_loader_lock_this_thread_holds_is_found_in_the_loaders_data() {
        let Some(outside) = own_loader_data() else {
            return; // not linked with glibc's loader: nothing to check
        };
        // SAFETY: gettid has no arguments.
        let me = unsafe { libc::syscall(libc::SYS_gettid) } as pid_t;
        let moved = [(me, me + 1)];
        // dl_iterate_phdr calls back under the loader's write lock.
        let mut inside: Option<Vec<u8>> = None;
        // SAFETY: the callback only reads this process's memory and writes
        // the Option passed as its data, which outlives the call.
        unsafe {
            libc::dl_iterate_phdr(
                Some(inside_the_loader_lock),
                &mut inside as *mut Option<Vec<u8>> as *mut libc::c_void,
            )
        };
        let inside = inside.expect("read inside the callback");
        let held = held_mutexes(&inside, &moved);
        assert_eq!(held.len(), 1, "held inside dl_iterate_phdr: {held:?}");
        assert_eq!((held[0].new, held[0].pi), (me + 1, false));
        let o = held[0].at;
        assert_eq!(&inside[o + 8..o + 12], &me.to_le_bytes());
        // Not held outside, not by another thread, and not rewritten when
        // the id stays.
        assert!(held_mutexes(&outside, &moved).is_empty());
        assert!(held_mutexes(&inside, &[(me + 7, me + 8)]).is_empty());
        assert!(held_mutexes(&inside, &[(me, me)]).is_empty());
    }

    /// Memory of a pretend process, in 8-byte words.
    fn words(w: &[(u64, u64)]) -> impl Fn(u64, usize) -> Option<Vec<u8>> + '_ {
        move |a, n| {
            let mut out = Vec::new();
            for k in (0..n as u64).step_by(8) {
                let v = w.iter().find(|(at, _)| *at == a + k)?.1;
                out.extend_from_slice(&v.to_le_bytes());
            }
            out.truncate(n);
            Some(out)
        }
    }

    #[test]
    fn words_are_read_and_written_together_up_to_one_that_cannot_be() {
        let me = std::process::id() as pid_t;
        let mut mem = [11u32, 22, 33, 44];
        let at = |i: usize, m: &[u32; 4]| m.as_ptr() as u64 + 4 * i as u64;
        // The kernel stops at the address that cannot be read (page 0).
        let got = read_words(
            me,
            [at(0, &mem), at(2, &mem), 0x10, at(3, &mem)].into_iter(),
        );
        assert_eq!(got, [Some(11), Some(33), None, None]);
        // More words than one call takes.
        let many: Vec<u64> = (0..sys::GATHER_MAX + 3).map(|i| at(i % 4, &mem)).collect();
        let got = read_words(me, many.into_iter());
        assert_eq!(got.len(), sys::GATHER_MAX + 3);
        assert!(got.iter().enumerate().all(|(i, w)| *w == Some(mem[i % 4])));
        let (a1, a3) = (at(1, &mem), at(3, &mem));
        write_words(me, &[(a1, 5), (a3, 7)]).unwrap();
        assert_eq!(std::hint::black_box(&mut mem), &[11, 5, 33, 7]);
        // The words before one that cannot be written are, and the error
        // says where.
        let e = write_words(me, &[(a1, 6), (0x10, 8), (a3, 9)]).unwrap_err();
        assert!(e.to_string().contains("0x10"), "{e}");
        assert_eq!(std::hint::black_box(&mut mem), &[11, 6, 33, 7]);
    }

    #[test]
    fn a_robust_list_is_walked_as_the_kernel_walks_it() {
        let (h, e1, e2, e3) = (0x1000u64, 0x2020u64, 0x3020u64, 0x4020u64);
        let off = (-32i64) as u64;
        // head -> e1 -> e2 (a PI futex: bit 0 of its link) -> head; e3 pending.
        let mem = [(h, e1), (h + 8, off), (h + 16, e3), (e1, e2 | 1), (e2, h)];
        let l = robust_list(h, &words(&mem)).unwrap();
        assert_eq!(l.words, vec![e1 - 32, e2 - 32, e3 - 32]);
        assert_eq!(l.links, vec![h, e1, e2, e3]);
        assert_eq!(l.futex_offset, -32);
        assert!(l.complete);
        // The pending entry, on the list too, counts once.
        let mem = [(h, e1), (h + 8, off), (h + 16, e1), (e1, h)];
        assert_eq!(robust_list(h, &words(&mem)).unwrap().words, vec![e1 - 32]);
        // An entry that cannot be read cuts the walk short.
        let mem = [(h, e1), (h + 8, off), (h + 16, 0), (e1, e2)];
        let l = robust_list(h, &words(&mem)).unwrap();
        assert_eq!(l.words, vec![e1 - 32, e2 - 32]);
        assert!(!l.complete);
        // A cycle that never comes back to the head stops where the kernel
        // stops.
        let mem = [(h, e1), (h + 8, off), (h + 16, 0), (e1, e2), (e2, e1)];
        let l = robust_list(h, &words(&mem)).unwrap();
        assert_eq!(l.words.len(), ROBUST_LIST_LIMIT);
        assert!(!l.complete);
        // An empty list; a head that cannot be read.
        let mem = [(h, h), (h + 8, off), (h + 16, 0)];
        let l = robust_list(h, &words(&mem)).unwrap();
        assert!(l.words.is_empty() && l.complete);
        assert_eq!(robust_list(0x9000, &words(&mem)), None);
    }

    /// A glibc mutex's 40 bytes: lock word, count, owner, users, kind, then
    /// `tail` (spin count, elision, list links).
    fn mutex(lock: u32, count: u32, owner: i32, users: u32, kind: u32, tail: u8) -> Vec<u8> {
        let mut m = vec![tail; MUTEX_BYTES as usize];
        for (i, w) in [lock, count, owner as u32, users, kind].iter().enumerate() {
            m[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        m
    }

    #[test]
    fn held_mutexes_are_those_that_check_an_owner_whose_id_changed() {
        let ids = [(100, 200), (101, 101), (102, 300)];
        let mut mem = vec![0xffu8; 8];
        let at = |mem: &mut Vec<u8>, m: Vec<u8>| {
            let o = mem.len();
            mem.extend(m);
            o
        };
        let recursive = at(&mut mem, mutex(1, 1, 100, 1, 1, 0));
        let elided = at(&mut mem, mutex(2, 3, 100, 1, 0x101, 0)); // waiters, elision flag
        at(&mut mem, mutex(1, 1, 101, 1, 1, 0)); // its owner kept its id
        at(&mut mem, mutex(0, 0, 0, 0, 1, 0)); // free
        at(&mut mem, mutex(1, 1, 100, 1, 0, 0)); // a plain mutex: no check
        at(&mut mem, mutex(1, 1, 100, 1, 3, 0)); // adaptive: no check
        at(&mut mem, mutex(1, 0, 100, 1, 1, 0)); // recursive without a count
        let errorcheck = at(&mut mem, mutex(1, 0, 102, 1, 2, 0));
        at(&mut mem, mutex(1, 1, 102, 1, 2, 0)); // error-checking with a count
        let pi = at(&mut mem, mutex(0x8000_0000 | 102, 1, 102, 1, 0x220, 0));
        at(&mut mem, mutex(101, 1, 102, 1, 32, 0)); // lock word names another
        at(&mut mem, mutex(0x4000_0000 | 102, 1, 102, 1, 32, 0)); // owner died
        at(&mut mem, mutex(102, 0, 102, 1, 32, 0)); // no count
        at(&mut mem, mutex(1, 1, 100, 1, 1 | 16, 0)); // robust: its list's
        at(&mut mem, mutex(1, 1, 100, 0, 1, 0)); // no user
        at(&mut mem, mutex(1, 1, 100, 1, 1, 7)); // not zeros after the kind
        mem.extend(&mutex(1, 1, 100, 1, 1, 0)[..32]); // not whole
        let held = held_mutexes(&mem, &ids);
        let want = [
            (recursive, 200, false),
            (elided, 200, false),
            (errorcheck, 300, false),
            (pi, 300, true),
        ];
        assert_eq!(
            held.iter().map(|h| (h.at, h.new, h.pi)).collect::<Vec<_>>(),
            want
        );
        // Rewritten: the owner, and a priority-inheritance lock word's id
        // bits (its waiters bit kept); nothing else.
        let before = mem.clone();
        rewrite_held_mutexes(&mut mem, &held);
        let word = |m: &[u8], o: usize| u32::from_le_bytes(m[o..o + 4].try_into().unwrap());
        for &(o, new, _) in &want {
            assert_eq!(word(&mem, o + 8), new as u32);
        }
        assert_eq!(word(&mem, pi), 0x8000_0000 | 300);
        let changed = (0..mem.len()).filter(|&i| mem[i] != before[i]).count();
        assert!(changed <= 4 * 4 + 4, "{changed} bytes changed");
        assert!(
            held_mutexes(&mem, &ids).is_empty(),
            "found again once rewritten"
        );
        assert!(held_mutexes(&before, &[(100, 100), (102, 102)]).is_empty());
        assert!(held_mutexes(&before, &[]).is_empty());
    }

    #[test]
    fn a_held_mutex_is_found_at_any_aligned_offset_and_in_any_block() {
        // Past the first block of words the scan looks at together, and at
        // the very end of the memory.
        for o in [0usize, 8, 504, 512, 520, 4096 - 40] {
            let mut mem = vec![0u8; 4096];
            mem[o..o + 40].copy_from_slice(&mutex(1, 2, 4242, 1, 1, 0));
            let held = held_mutexes(&mem, &[(4242, 77)]);
            assert_eq!(
                held,
                vec![HeldMutex {
                    at: o,
                    new: 77,
                    pi: false
                }],
                "at {o}"
            );
        }
    }

    #[test]
    fn a_held_mutex_across_an_edge_is_found_from_both_halves_or_the_half_with_kind_and_owner() {
        let ids = [(4242, 77)];
        let w = |at: i64| IdWrite {
            at,
            old: 4242,
            new: 77,
        };
        // Recursive (kind 1), and with priority inheritance (32, whose lock
        // word holds the owner's id).
        for (lock, kind) in [(1u32, 1u32), (4242, 32)] {
            for start in [-32i64, -24, -16, -8] {
                let mut seam = [0u8; 2 * EDGE_BYTES];
                let at = (EDGE_BYTES as i64 + start) as usize;
                seam[at..at + 40].copy_from_slice(&mutex(lock, 1, 4242, 1, kind, 0));
                let (before, after) = seam.split_at(EDGE_BYTES);
                let mut want = vec![w(start + 8)];
                if kind == 32 {
                    want.push(w(start));
                }
                let got = held_across(Some(before), Some(after), &ids);
                assert_eq!(got, want, "kind {kind}, at {start} from the edge");
                // One side only: judged where the kind and the owner lie
                // on the side there (8 before the edge: after it; 24 or 32
                // before: before it).
                let (only_after, only_before) = (start == -8, start <= -24);
                let got = held_across(None, Some(after), &ids);
                assert_eq!(
                    got,
                    if only_after { want.clone() } else { vec![] },
                    "{start}"
                );
                let got = held_across(Some(before), None, &ids);
                assert_eq!(
                    got,
                    if only_before { want.clone() } else { vec![] },
                    "{start}"
                );
            }
        }
        // Wholly on one side, or of a thread whose id did not change: not
        // found here; nor with neither side.
        let mut seam = [0u8; 2 * EDGE_BYTES];
        seam[EDGE_BYTES..EDGE_BYTES + 32].copy_from_slice(&mutex(1, 1, 4242, 1, 1, 0)[..32]);
        let (before, after) = seam.split_at(EDGE_BYTES);
        assert!(held_across(Some(before), Some(after), &ids).is_empty());
        let mut seam = [0u8; 2 * EDGE_BYTES];
        seam[16..56].copy_from_slice(&mutex(1, 1, 4242, 1, 1, 0));
        let (before, after) = seam.split_at(EDGE_BYTES);
        assert!(held_across(Some(before), Some(after), &[(4242, 4242)]).is_empty());
        assert_eq!(held_across(Some(before), Some(after), &ids).len(), 1);
        assert!(held_across(Some(&before[8..]), Some(after), &ids).is_empty());
        assert!(held_across(None, None, &ids).is_empty());
        // The half there must look like a mutex's: a free one, or one with
        // another kind, is not rewritten.
        let mut seam = [0u8; 2 * EDGE_BYTES];
        seam[24..64].copy_from_slice(&mutex(1, 1, 4242, 1, 7, 0));
        assert!(held_across(None, Some(&seam[EDGE_BYTES..]), &ids).is_empty());
        seam[24..64].copy_from_slice(&mutex(1, 1, 4242, 0, 1, 0));
        assert!(held_across(None, Some(&seam[EDGE_BYTES..]), &ids).is_empty());
        seam[24..64].copy_from_slice(&mutex(1, 1, 4242, 1, 1, 9));
        assert!(held_across(None, Some(&seam[EDGE_BYTES..]), &ids).is_empty());
        // A rewrite changes only the id bits, and only of a word that
        // still names the old id.
        assert_eq!(w(0).apply(0x8000_0000 | 4242), Some(0x8000_0000 | 77));
        assert_eq!(w(0).apply(77), None);
    }

    #[test]
    fn an_owner_scan_fed_in_pieces_finds_what_one_look_at_the_whole_finds() {
        // Two pages as the pages file holds them, with held mutexes of
        // threads 4242 and 4343 at offsets around the pieces' edges (the
        // first across the pages' edge).
        let mut mem = vec![0u8; 8192];
        for (o, owner) in [
            (4096 - 16, 4242),
            (0, 4343),
            (56, 4242),
            (8152, 4343),
            (1000, 4242),
        ] {
            mem[o..o + 40].copy_from_slice(&mutex(1, 1, owner, 1, 1, 0));
        }
        // A free one, and one of a thread not in the image.
        mem[2000..2040].copy_from_slice(&mutex(0, 0, 0, 0, 1, 0));
        mem[3000..3040].copy_from_slice(&mutex(1, 1, 77, 1, 1, 0));
        let base = 3 * 4096;
        let mut want: Vec<u64> = held_mutexes(&mem, &[(4242, -1), (4343, -1)])
            .iter()
            .map(|h| base + h.at as u64)
            .collect();
        want.sort();
        assert_eq!(want.len(), 5);
        for piece in [8, 24, 40, 64, 4096, 8192] {
            let mut scan = OwnerScan::of(&[4242, 4343]);
            for (k, c) in mem.chunks(piece).enumerate() {
                scan.feed(base + (k * piece) as u64, c);
            }
            let mut got = scan.found.clone();
            got.sort();
            assert_eq!(got, want, "pieces of {piece} bytes");
        }
        // Pieces that are not contiguous are not joined.
        let mut scan = OwnerScan::of(&[4242]);
        scan.feed(0, &mem[..4096]);
        scan.feed(100 * 4096, &mem[4096..]);
        assert!(!scan.found.contains(&(4096 - 16)), "{:?}", scan.found);
    }

    #[test]
    fn a_library_is_read_once_until_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libc.so.6");
        let lib = lib.to_str().unwrap();
        // Not an ELF file: no offset, remembered as such.
        std::fs::write(lib, b"not a library").unwrap();
        assert_eq!(tid_offset_known(lib).unwrap(), None);
        let entries = |p: &str| TID_OFFSETS.entries(p);
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
