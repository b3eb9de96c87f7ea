//! The image of the stop sent against the skeleton's (protocol 14,
//! docs/protocol.md §6.3i).
//!
//! A held skeleton means the destination already has an image of the
//! process: the one captured while it ran. Most of the image of the stop
//! repeats it byte for byte; a memfd's or deleted file's bytes (the
//! `ghosts` part: Java's ZGC heap, 64 MiB) above all, which a stop would
//! otherwise carry whole. So the source plans the state file of the image
//! of the stop ([`pmig_image::PARTS_FILE`]) as *pieces*: runs of bytes to
//! send (`ImageChunk`) and runs the destination takes from the skeleton's
//! file of that name (`ImageCopy`). Parts are matched by name, so a part
//! that moved because one before it grew or shrank is still found. A part
//! of up to [`FINE_LIMIT`] bytes that changed is matched byte by byte
//! (`fine`): a record that came or went in the list of mappings shifts
//! all after it by any number of bytes. A longer one is compared in blocks
//! of [`BLOCK`] bytes from its start; a block that differs from the one at
//! its place is looked up among all of the skeleton's part's blocks by its
//! hash (and compared), so bytes that moved within the part by whole blocks
//! are found too.
//!
//! Nothing depends on the plan being right: the destination verifies every
//! checksum of the image it rebuilt, as of any image, before it is used.

use crate::error::{io_err, Result};
use pmig_image::Manifest;
use std::collections::HashMap;
use std::path::Path;
use xxhash_rust::xxh3::xxh3_64;

/// How finely two parts are compared.
pub const BLOCK: u64 = 4096;

/// A run of the file being sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece {
    /// `len` bytes of the skeleton's file, at `from`.
    Copy { from: u64, len: u64 },
    /// `len` bytes of the file itself, at `at`.
    Send { at: u64, len: u64 },
    /// `len` zero bytes (`ImageZeros`, version 16): see [`without_zeros`].
    Zeros { len: u64 },
}

impl Piece {
    pub fn bytes(&self) -> u64 {
        match *self {
            Piece::Copy { len, .. } | Piece::Send { len, .. } | Piece::Zeros { len } => len,
        }
    }

    /// Extends `self` by `next` when the two are one run.
    fn join(&mut self, next: Piece) -> bool {
        match (self, next) {
            (Piece::Copy { from, len }, Piece::Copy { from: f, len: l }) if *from + *len == f => {
                *len += l;
                true
            }
            (Piece::Send { at, len }, Piece::Send { at: a, len: l }) if *at + *len == a => {
                *len += l;
                true
            }
            (Piece::Zeros { len }, Piece::Zeros { len: l }) => {
                *len += l;
                true
            }
            _ => false,
        }
    }
}

/// The bytes of the pieces `which` picks (e.g. how much a plan copies).
pub fn bytes_of(pieces: &[Piece], which: fn(&Piece) -> bool) -> u64 {
    pieces.iter().filter(|p| which(p)).map(Piece::bytes).sum()
}

/// Appends `p` to `out`, as a run of its own or joined to the last one.
fn append(out: &mut Vec<Piece>, p: Piece) {
    if p.bytes() == 0 {
        return;
    }
    if !out.last_mut().is_some_and(|last| last.join(p)) {
        out.push(p);
    }
}

/// Plans `file` of the image of the stop (`fin`, its manifest `fin_m`) as
/// pieces against the same file of the skeleton's image (`base`, its
/// manifest `base_m`). The pieces follow each other from offset 0 to the
/// end of `fin`, without gaps. A part of `fin` the skeleton's image does
/// not have, or any byte outside a part, is sent.
pub fn plan(
    base_m: &Manifest,
    base: &[u8],
    fin_m: &Manifest,
    fin: &[u8],
    file: &str,
) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::new();
    let mut push = |p: Piece| append(&mut out, p);
    let end = fin.len() as u64;
    let mut parts: Vec<_> = fin_m.parts.iter().filter(|p| p.file == file).collect();
    parts.sort_by_key(|p| p.offset);
    let mut at = 0u64;
    for p in parts {
        // A part that overlaps the one before or runs past the file is not
        // one this planner understands: the rest goes as it is.
        if p.offset < at || p.offset.saturating_add(p.len) > end {
            break;
        }
        push(Piece::Send {
            at,
            len: p.offset - at,
        });
        at = p.offset;
        let b = base_m
            .parts
            .iter()
            .find(|b| b.name == p.name && b.file == file)
            .filter(|b| b.offset.saturating_add(b.len) <= base.len() as u64);
        let Some(b) = b else {
            push(Piece::Send { at, len: p.len });
            at += p.len;
            continue;
        };
        let theirs = &base[b.offset as usize..(b.offset + b.len) as usize];
        let mine = &fin[p.offset as usize..(p.offset + p.len) as usize];
        if mine == theirs {
            push(Piece::Copy {
                from: b.offset,
                len: p.len,
            });
            at += p.len;
            continue;
        }
        if p.len <= FINE_LIMIT && b.len <= FINE_LIMIT {
            // A short part that changed (the list of mappings, the
            // threads' registers): bytes are added or removed anywhere
            // in it, which shifts all that follows by any number of bytes.
            for run in fine(theirs, mine) {
                push(match run {
                    Run::Same { from, at: i, len } => {
                        debug_assert_eq!(i as u64, at - p.offset);
                        Piece::Copy {
                            from: b.offset + from as u64,
                            len: len as u64,
                        }
                    }
                    Run::New { at: i, len } => Piece::Send {
                        at: p.offset + i as u64,
                        len: len as u64,
                    },
                });
                at += run.len() as u64;
            }
            continue;
        }
        // The skeleton's whole blocks by their hash, found when the block at
        // the same place differs: data that moved by whole blocks (a
        // sparse file's data after an extent that came or went) is found
        // where it went.
        let mut index: Option<HashMap<u64, u64>> = None;
        let mut i = 0u64;
        while i < p.len {
            let k = BLOCK.min(p.len - i);
            let mine = &fin[(p.offset + i) as usize..(p.offset + i + k) as usize];
            let same = i + k <= b.len && *mine == theirs[i as usize..(i + k) as usize];
            let found = match (same, k == BLOCK) {
                (true, _) => Some(i),
                (false, true) => {
                    let index = index.get_or_insert_with(|| blocks_of(theirs));
                    index
                        .get(&xxh3_64(mine))
                        .copied()
                        .filter(|&j| theirs[j as usize..(j + k) as usize] == *mine)
                }
                (false, false) => None,
            };
            push(match found {
                Some(j) => Piece::Copy {
                    from: b.offset + j,
                    len: k,
                },
                None => Piece::Send { at: at + i, len: k },
            });
            i += k;
        }
        at += p.len;
    }
    push(Piece::Send { at, len: end - at });
    out
}

/// Parts up to this long that changed (in the image of the stop and in the
/// skeleton's) are compared byte by byte (`fine`); longer ones (the data of
/// a memfd or deleted file) block by block. It bounds the index `fine`
/// builds on the stop's path.
pub const FINE_LIMIT: u64 = 1 << 20;
/// The window [`fine`] looks runs up by.
const WINDOW: usize = 32;
/// The shortest run [`fine`] takes from the skeleton's part: a copy is a
/// message of its own (32 bytes) and splits the bytes sent around it in two
/// (24 bytes more).
const MIN_RUN: usize = 96;

/// A run of a part, by [`fine`]: the same bytes as the skeleton's part at
/// `from`, or bytes of its own; `at` is where it starts in the part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    Same { from: usize, at: usize, len: usize },
    New { at: usize, len: usize },
}

impl Run {
    fn len(&self) -> usize {
        match *self {
            Run::Same { len, .. } | Run::New { len, .. } => len,
        }
    }
}

/// A rolling sum of a window of [`WINDOW`] bytes: `a` their sum, `b` their
/// sum weighted by the distance to the window's end (both modulo 2^32).
#[derive(Clone, Copy)]
struct Rolling {
    a: u32,
    b: u32,
}

impl Rolling {
    fn of(w: &[u8]) -> Rolling {
        let (mut a, mut b) = (0u32, 0u32);
        for &x in w {
            a = a.wrapping_add(x as u32);
            b = b.wrapping_add(a);
        }
        Rolling { a, b }
    }

    /// The window one byte on: `out` leaves it, `inn` enters it.
    fn roll(&mut self, out: u8, inn: u8) {
        self.a = self.a.wrapping_sub(out as u32).wrapping_add(inn as u32);
        self.b = self
            .b
            .wrapping_sub((WINDOW as u32).wrapping_mul(out as u32))
            .wrapping_add(self.a);
    }

    fn key(&self) -> u32 {
        (self.b << 16) ^ (self.a & 0xffff)
    }
}

/// The windows of a part by their rolling sum's key: an open-addressed
/// table, the first window of each key kept. It is built and read on the
/// stop's path, where a general hash map's hashing cost more than the
/// matching itself.
struct WindowIndex {
    /// (key, offset + 1); an offset + 1 of 0 is an empty slot.
    slots: Vec<(u32, u32)>,
    mask: usize,
}

impl WindowIndex {
    fn new(n: usize) -> WindowIndex {
        let size = (2 * n + 1).next_power_of_two();
        WindowIndex {
            slots: vec![(0, 0); size],
            mask: size - 1,
        }
    }

    fn slot(&self, key: u32) -> usize {
        ((key as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize & self.mask
    }

    fn insert(&mut self, key: u32, offset: usize) {
        let mut s = self.slot(key);
        loop {
            match self.slots[s] {
                (_, 0) => {
                    self.slots[s] = (key, offset as u32 + 1);
                    return;
                }
                (k, _) if k == key => return,
                _ => s = (s + 1) & self.mask,
            }
        }
    }

    fn get(&self, key: u32) -> Option<usize> {
        let mut s = self.slot(key);
        loop {
            match self.slots[s] {
                (_, 0) => return None,
                (k, o) if k == key => return Some(o as usize - 1),
                _ => s = (s + 1) & self.mask,
            }
        }
    }
}

/// How many bytes `x` and `y` have in common from their starts.
fn common_prefix(x: &[u8], y: &[u8]) -> usize {
    let n = x.len().min(y.len());
    let mut k = 0;
    while k + 64 <= n && x[k..k + 64] == y[k..k + 64] {
        k += 64;
    }
    while k < n && x[k] == y[k] {
        k += 1;
    }
    k
}

/// `mine` as runs of `theirs` and runs of its own, in order, wherever its
/// bytes moved to (the way rsync matches a file against an older copy):
/// `theirs` is indexed by the rolling sum of each of its windows of
/// [`WINDOW`] bytes at a multiple of [`WINDOW`]; `mine` is looked up at
/// every byte, and a window found (and compared) grows both ways as far as
/// the bytes agree. Runs shorter than [`MIN_RUN`] are sent instead.
fn fine(theirs: &[u8], mine: &[u8]) -> Vec<Run> {
    let mut out = Vec::new();
    let mut new_from = 0usize; // the start of the bytes not yet placed
    if theirs.len() >= WINDOW && mine.len() >= WINDOW {
        let mut index = WindowIndex::new(theirs.len() / WINDOW);
        for (n, w) in theirs.chunks_exact(WINDOW).enumerate() {
            index.insert(Rolling::of(w).key(), n * WINDOW);
        }
        let mut i = 0usize;
        let mut sum = Rolling::of(&mine[..WINDOW]);
        // Bytes compared for runs found too short: repetitive data could
        // make every byte such a find; past this much, the rest is sent.
        let mut wasted = 0usize;
        let budget = 8 * mine.len() + 4096;
        while i + WINDOW <= mine.len() && wasted <= budget {
            let found = index
                .get(sum.key())
                .filter(|&j| theirs[j..j + WINDOW] == mine[i..i + WINDOW]);
            if let Some(j) = found {
                let ahead = common_prefix(&theirs[j..], &mine[i..]);
                let mut back = 0;
                while back < i - new_from && back < j && theirs[j - back - 1] == mine[i - back - 1]
                {
                    back += 1;
                }
                if back + ahead >= MIN_RUN {
                    let (at, from) = (i - back, j - back);
                    if at > new_from {
                        out.push(Run::New {
                            at: new_from,
                            len: at - new_from,
                        });
                    }
                    out.push(Run::Same {
                        from,
                        at,
                        len: back + ahead,
                    });
                    i += ahead;
                    new_from = i;
                    if i + WINDOW <= mine.len() {
                        sum = Rolling::of(&mine[i..i + WINDOW]);
                    }
                    continue;
                }
                wasted += WINDOW + back + ahead;
            }
            if i + WINDOW < mine.len() {
                sum.roll(mine[i], mine[i + WINDOW]);
            }
            i += 1;
        }
    }
    if new_from < mine.len() {
        out.push(Run::New {
            at: new_from,
            len: mine.len() - new_from,
        });
    }
    out
}

/// The offset of each whole block of `part` (from its start), by the
/// block's hash; the first of equal blocks.
fn blocks_of(part: &[u8]) -> HashMap<u64, u64> {
    let mut out = HashMap::with_capacity(part.len() / BLOCK as usize);
    for (n, b) in part.chunks_exact(BLOCK as usize).enumerate() {
        out.entry(xxh3_64(b)).or_insert(n as u64 * BLOCK);
    }
    out
}

/// A run of pages in a page-data file, as the image's `memory` part
/// places it: `len` bytes of memory from `addr`, at `offset` of the file.
pub use pmig_engine::resources::memory::Run as PageRun;

/// How finely a page that changed is compared with the skeleton's page at
/// its address.
const SLICE: usize = 32;

/// Plans the page data of the image of the stop (`fin`, its pages placed by
/// `fin_runs`) against the skeleton's (`base`, placed by `base_runs`),
/// protocol 15. What a stop after a skeleton saves of memory (the pages of
/// file mappings written since their copies went, the pages under the
/// registers, `freeze-free`'s code, stack and heap) was mostly in the
/// skeleton's image already, at the same address: unchanged, or with a few
/// bytes rewritten (an interpreter's reference counts). So a page at an
/// address the skeleton's image has is compared with it there in slices of
/// `SLICE` bytes; runs of equal slices of at least `MIN_RUN` bytes are
/// taken from the skeleton's file, the rest is sent, as is every page the
/// skeleton's image lacks and any byte no run places. The pieces follow
/// each other from offset 0 to the end of `fin`.
pub fn plan_pages(
    base_runs: &[PageRun],
    base: &[u8],
    fin_runs: &[PageRun],
    fin: &[u8],
) -> Vec<Piece> {
    const PAGE: u64 = pmig_image::PAGE_SIZE;
    let mut out: Vec<Piece> = Vec::new();
    let mut push = |p: Piece| append(&mut out, p);
    let whole = |r: &PageRun, len: u64| {
        r.addr.is_multiple_of(PAGE)
            && r.len.is_multiple_of(PAGE)
            && r.offset.saturating_add(r.len) <= len
    };
    let mut theirs: Vec<PageRun> = base_runs
        .iter()
        .filter(|r| whole(r, base.len() as u64))
        .copied()
        .collect();
    theirs.sort_by_key(|r| r.addr);
    // Where the skeleton's file holds the page at `addr`.
    let find = |addr: u64| -> Option<u64> {
        let i = theirs.partition_point(|r| r.addr + r.len <= addr);
        theirs
            .get(i)
            .filter(|r| r.addr <= addr)
            .map(|r| r.offset + (addr - r.addr))
    };
    let end = fin.len() as u64;
    let mut mine: Vec<PageRun> = fin_runs.iter().filter(|r| r.len > 0).copied().collect();
    mine.sort_by_key(|r| r.offset);
    let mut at = 0u64;
    for r in mine {
        // Runs that overlap or are not whole pages inside the file are not
        // ones this planner understands: the rest goes as it is.
        if r.offset < at || !whole(&r, end) {
            break;
        }
        push(Piece::Send {
            at,
            len: r.offset - at,
        });
        for i in (0..r.len).step_by(PAGE as usize) {
            let at = r.offset + i;
            let page = &fin[at as usize..(at + PAGE) as usize];
            let Some(from) = find(r.addr + i) else {
                push(Piece::Send { at, len: PAGE });
                continue;
            };
            let old = &base[from as usize..(from + PAGE) as usize];
            if page == old {
                push(Piece::Copy { from, len: PAGE });
                continue;
            }
            // Runs of equal slices, each taken if long enough.
            let mut k = 0usize;
            while k < PAGE as usize {
                let same = |k: usize| page[k..k + SLICE] == old[k..k + SLICE];
                let first = same(k);
                let mut j = k + SLICE;
                while j < PAGE as usize && same(j) == first {
                    j += SLICE;
                }
                let (o, n) = (k as u64, (j - k) as u64);
                push(if first && j - k >= MIN_RUN {
                    Piece::Copy {
                        from: from + o,
                        len: n,
                    }
                } else {
                    Piece::Send { at: at + o, len: n }
                });
                k = j;
            }
        }
        at = r.offset + r.len;
    }
    push(Piece::Send { at, len: end - at });
    out
}

/// Zeros are found in blocks of this many bytes of a run to send.
const ZERO_BLOCK: usize = 64;
/// The shortest run of zero blocks sent as `ImageZeros` rather than as the
/// bytes: the message and the `ImageChunk` after it cost a few dozen bytes.
pub const ZERO_RUN: usize = 256;

/// The same plan of `file`, with every run of at least [`ZERO_RUN`] zero
/// bytes that a `Send` piece would carry made a `Zeros` piece (version 16,
/// `ImageZeros`). An image holds such runs wherever the process's memory
/// or state does: pages it wrote zeros to, and on a CPU with AMX the 8 KiB
/// of tile registers in every thread's xsave area, zero while unused.
/// Runs are found in blocks of [`ZERO_BLOCK`] bytes from each piece's start.
pub fn without_zeros(pieces: Vec<Piece>, file: &[u8]) -> Vec<Piece> {
    let zero = |b: &[u8]| b.iter().fold(0u8, |acc, &x| acc | x) == 0;
    let mut out = Vec::with_capacity(pieces.len());
    for p in pieces {
        let Piece::Send { at, len } = p else {
            append(&mut out, p);
            continue;
        };
        let bytes = &file[at as usize..(at + len) as usize];
        // Where the bytes not yet placed start (relative to `at`).
        let mut from = 0usize;
        let mut k = 0usize;
        while k + ZERO_BLOCK <= bytes.len() {
            if !zero(&bytes[k..k + ZERO_BLOCK]) {
                k += ZERO_BLOCK;
                continue;
            }
            let mut j = k + ZERO_BLOCK;
            while j + ZERO_BLOCK <= bytes.len() && zero(&bytes[j..j + ZERO_BLOCK]) {
                j += ZERO_BLOCK;
            }
            if j - k >= ZERO_RUN {
                append(
                    &mut out,
                    Piece::Send {
                        at: at + from as u64,
                        len: (k - from) as u64,
                    },
                );
                append(
                    &mut out,
                    Piece::Zeros {
                        len: (j - k) as u64,
                    },
                );
                from = j;
            }
            k = j;
        }
        append(
            &mut out,
            Piece::Send {
                at: at + from as u64,
                len: (bytes.len() - from) as u64,
            },
        );
    }
    out
}

/// Reads the manifest of the image in `dir` (checked as any manifest is).
pub fn manifest_of(dir: &Path) -> Result<Manifest> {
    let p = dir.join(pmig_image::MANIFEST_FILE);
    let raw = std::fs::read(&p).map_err(io_err(format!("read {}", p.display())))?;
    pmig_image::decode_manifest(&p, &raw)
        .map_err(|e| crate::error::StrategyError::Other(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmig_image::{PartEntry, PARTS_FILE};

    fn manifest(parts: &[(&str, u64, u64)]) -> Manifest {
        Manifest {
            pmig_version: "t".into(),
            kernel_release: "t".into(),
            hostname: "t".into(),
            pid: 1,
            created_unix_ms: 0,
            parts: parts
                .iter()
                .map(|&(name, offset, len)| PartEntry {
                    name: name.into(),
                    file: PARTS_FILE.into(),
                    offset,
                    len,
                    chunk: 1 << 20,
                    sums: Vec::new(),
                })
                .collect(),
        }
    }

    /// The file the pieces make from `base` and `fin`, as the destination
    /// makes it.
    fn rebuild(pieces: &[Piece], base: &[u8], fin: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in pieces {
            match *p {
                Piece::Copy { from, len } => {
                    out.extend_from_slice(&base[from as usize..(from + len) as usize])
                }
                Piece::Send { at, len } => {
                    assert_eq!(at, out.len() as u64, "pieces leave no gap");
                    out.extend_from_slice(&fin[at as usize..(at + len) as usize])
                }
                Piece::Zeros { len } => out.resize(out.len() + len as usize, 0),
            }
        }
        out
    }

    fn sent(pieces: &[Piece]) -> u64 {
        bytes_of(pieces, |p| matches!(p, Piece::Send { .. }))
    }

    /// `n` pseudo-random bytes (xorshift), a different sequence per seed:
    /// no run of one is found in another by chance.
    fn bytes(n: usize, seed: u32) -> Vec<u8> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (seed as u64 + 1).wrapping_mul(0x1000_0000_01b3);
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    /// Skeleton: "memory" of 100 bytes, then "ghosts" of `ghost_len`. The
    /// stop: "memory" is new (so "ghosts" moved), and one byte of the
    /// ghost's fifth page changed. The plan, checked to rebuild the stop's.
    fn a_changed_byte_in_a_ghost_that_moved(ghost_len: usize) -> Vec<Piece> {
        let ghost = bytes(ghost_len, 7);
        let mut base = bytes(100, 1);
        base.extend_from_slice(&ghost);
        let base_m = manifest(&[("memory", 0, 100), ("ghosts", 100, ghost.len() as u64)]);
        let mut g2 = ghost.clone();
        g2[4 * 4096 + 9] ^= 0xff;
        let mut fin = bytes(137, 2);
        fin.extend_from_slice(&g2);
        let fin_m = manifest(&[("memory", 0, 137), ("ghosts", 137, g2.len() as u64)]);
        let pieces = plan(&base_m, &base, &fin_m, &fin, PARTS_FILE);
        assert_eq!(rebuild(&pieces, &base, &fin), fin);
        pieces
    }

    #[test]
    fn a_part_that_moved_is_taken_from_the_skeleton_but_its_changed_byte() {
        let ghost_len = 64 << 10;
        let pieces = a_changed_byte_in_a_ghost_that_moved(ghost_len);
        // The memory part goes whole; of the ghost, the byte that changed.
        assert_eq!(sent(&pieces), 137 + 1);
        assert_eq!(
            pieces,
            vec![
                Piece::Send { at: 0, len: 137 },
                Piece::Copy {
                    from: 100,
                    len: 4 * 4096 + 9
                },
                Piece::Send {
                    at: 137 + 4 * 4096 + 9,
                    len: 1
                },
                Piece::Copy {
                    from: 100 + 4 * 4096 + 10,
                    len: ghost_len as u64 - (4 * 4096 + 10)
                },
            ]
        );
    }

    #[test]
    fn a_long_part_is_compared_by_blocks() {
        // As above, with a ghost longer than the fine comparison takes:
        // the block with the changed byte is sent whole.
        let ghost_len = FINE_LIMIT as usize + (64 << 10);
        let pieces = a_changed_byte_in_a_ghost_that_moved(ghost_len);
        assert_eq!(sent(&pieces), 137 + 4096);
        assert_eq!(
            pieces[1..],
            [
                Piece::Copy {
                    from: 100,
                    len: 4 * 4096
                },
                Piece::Send {
                    at: 137 + 4 * 4096,
                    len: 4096
                },
                Piece::Copy {
                    from: 100 + 5 * 4096,
                    len: ghost_len as u64 - 5 * 4096
                },
            ]
        );
    }

    #[test]
    fn blocks_that_moved_within_a_part_are_found_where_they_went() {
        // A sparse ghost's data, longer than the fine comparison takes;
        // at the stop a page came in before the fourth (the rest moved by
        // one block) and the last changed.
        let n = FINE_LIMIT as usize / 4096 + 8;
        let pages: Vec<Vec<u8>> = (0..n).map(|i| bytes(4096, 1000 + i as u32)).collect();
        let mut base = b"head".to_vec();
        base.extend(pages.concat());
        let base_m = manifest(&[("ghosts", 0, base.len() as u64)]);
        let mut fin = b"head".to_vec();
        let mut moved = pages.clone();
        moved.insert(3, bytes(4096, 99));
        moved[n] = bytes(4096, 77);
        fin.extend(moved.concat());
        let fin_m = manifest(&[("ghosts", 0, fin.len() as u64)]);
        let pieces = plan(&base_m, &base, &fin_m, &fin, PARTS_FILE);
        assert_eq!(rebuild(&pieces, &base, &fin), fin);
        // Blocks from the part's start (4 bytes of head, then pages): the
        // fourth block straddles pages 2 and the new one, the fifth the new
        // one and page 3; from the sixth on, each is the skeleton's block
        // before it. The last block changed, and the 4 bytes after the
        // last whole block too.
        assert_eq!(sent(&pieces), 3 * 4096 + 4);
    }

    #[test]
    fn a_part_that_shrank_from_a_long_one_is_compared_by_blocks() {
        // The skeleton's part is longer than the fine comparison indexes:
        // the new one's bytes are looked up by whole blocks only, so the
        // block after a shift of a few bytes is sent.
        let base = bytes(FINE_LIMIT as usize + 4096, 8);
        let base_m = manifest(&[("ghosts", 0, base.len() as u64)]);
        let fin = base[3..3 + 2 * 4096].to_vec();
        let fin_m = manifest(&[("ghosts", 0, fin.len() as u64)]);
        let pieces = plan(&base_m, &base, &fin_m, &fin, PARTS_FILE);
        assert_eq!(rebuild(&pieces, &base, &fin), fin);
        assert_eq!(sent(&pieces), fin.len() as u64);
    }

    #[test]
    fn repetitive_bytes_found_everywhere_in_short_runs_are_all_sent() {
        // Windows of the new part are found all along the skeleton's
        // (repetitive) part, but each run is 64 bytes: too short to take.
        let unit = bytes(64, 9);
        let base: Vec<u8> = unit.iter().cycle().take(64 << 10).copied().collect();
        let base_m = manifest(&[("a", 0, base.len() as u64)]);
        let mut fin = Vec::new();
        for k in 0..1000u32 {
            fin.extend_from_slice(&unit);
            fin.extend_from_slice(&k.to_le_bytes());
        }
        let fin_m = manifest(&[("a", 0, fin.len() as u64)]);
        let pieces = plan(&base_m, &base, &fin_m, &fin, PARTS_FILE);
        assert_eq!(rebuild(&pieces, &base, &fin), fin);
        assert_eq!(sent(&pieces), fin.len() as u64);
    }

    #[test]
    fn the_rolling_sum_rolls_to_the_sum_of_the_next_window() {
        let data = bytes(4096, 5);
        let mut sum = Rolling::of(&data[..WINDOW]);
        for i in 0..data.len() - WINDOW {
            sum.roll(data[i], data[i + WINDOW]);
            let next = Rolling::of(&data[i + 1..i + 1 + WINDOW]);
            assert_eq!((sum.a, sum.b), (next.a, next.b), "at {i}");
        }
    }

    /// A list of records of 20 to 200 bytes, like the list of mappings.
    fn records(n: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| bytes(20 + (i * 37) % 181, 5000 + i as u32))
            .collect()
    }

    #[test]
    fn records_added_removed_and_changed_anywhere_are_all_that_is_sent() {
        let mut recs = records(300);
        let base = recs.concat();
        let base_m = manifest(&[("memory", 0, base.len() as u64)]);
        // Two records come in, one goes, and a byte changes in three.
        let added = 77 + 150;
        recs.insert(10, bytes(77, 1));
        recs.insert(200, bytes(150, 2));
        recs.remove(120);
        for r in [50, 150, 250] {
            recs[r][7] ^= 0x5a;
        }
        let fin = recs.concat();
        let fin_m = manifest(&[("memory", 0, fin.len() as u64)]);
        let pieces = plan(&base_m, &base, &fin_m, &fin, PARTS_FILE);
        assert_eq!(rebuild(&pieces, &base, &fin), fin);
        let n = sent(&pieces) as usize;
        assert!(
            (3..=added + 3).contains(&n),
            "{n} bytes sent of {} for {added} added and 3 changed: {pieces:?}",
            fin.len()
        );
        // Runs of the skeleton's part between the changes, no more.
        let copies = pieces
            .iter()
            .filter(|p| matches!(p, Piece::Copy { .. }))
            .count();
        assert!(copies <= 7, "{copies} copies: {pieces:?}");
    }

    #[test]
    fn runs_shorter_than_a_copy_is_worth_are_sent() {
        let base = bytes(8192, 3);
        let base_m = manifest(&[("a", 0, 8192)]);
        // The skeleton's bytes 50 at a time, each between new ones.
        let mut fin = Vec::new();
        for k in 0..40 {
            fin.extend_from_slice(&base[k * 200..k * 200 + 50]);
            fin.extend_from_slice(&bytes(50, 100 + k as u32));
        }
        let fin_m = manifest(&[("a", 0, fin.len() as u64)]);
        let pieces = plan(&base_m, &base, &fin_m, &fin, PARTS_FILE);
        assert_eq!(rebuild(&pieces, &base, &fin), fin);
        assert_eq!(
            pieces,
            [Piece::Send {
                at: 0,
                len: fin.len() as u64
            }]
        );
        // At MIN_RUN bytes each, they are taken.
        let mut fin = Vec::new();
        for k in 0..40 {
            fin.extend_from_slice(&base[k * 200..k * 200 + MIN_RUN]);
            fin.extend_from_slice(&bytes(50, 100 + k as u32));
        }
        let fin_m = manifest(&[("a", 0, fin.len() as u64)]);
        let pieces = plan(&base_m, &base, &fin_m, &fin, PARTS_FILE);
        assert_eq!(rebuild(&pieces, &base, &fin), fin);
        assert_eq!(sent(&pieces), 40 * 50);
    }

    #[test]
    fn new_grown_and_unknown_bytes_are_sent() {
        let base = bytes(10_000, 3);
        let base_m = manifest(&[("a", 0, 10_000)]);
        // "a" grew past the skeleton's, "b" is new, and 5 bytes follow
        // every part.
        let mut fin = base.clone();
        fin.extend_from_slice(&bytes(3000, 9));
        fin.extend_from_slice(&bytes(500, 4));
        fin.extend_from_slice(b"extra");
        let fin_m = manifest(&[("a", 0, 13_000), ("b", 13_000, 500)]);
        let pieces = plan(&base_m, &base, &fin_m, &fin, PARTS_FILE);
        assert_eq!(rebuild(&pieces, &base, &fin), fin);
        // All of the skeleton's part is taken; what it grew by, "b" and the
        // bytes after it are sent.
        assert_eq!(
            pieces[0],
            Piece::Copy {
                from: 0,
                len: 10_000
            }
        );
        assert_eq!(sent(&pieces), fin.len() as u64 - 10_000);
    }

    #[test]
    fn a_part_that_runs_past_the_file_sends_the_rest_as_it_is() {
        let base = bytes(8192, 5);
        let base_m = manifest(&[("a", 0, 8192)]);
        let fin = base.clone();
        let fin_m = manifest(&[("a", 0, 4096), ("b", 4096, 9999)]);
        let pieces = plan(&base_m, &base, &fin_m, &fin, PARTS_FILE);
        assert_eq!(rebuild(&pieces, &base, &fin), fin);
        assert_eq!(sent(&pieces), 4096);
        // An empty file is no piece at all.
        assert!(plan(&base_m, &base, &manifest(&[]), &[], PARTS_FILE).is_empty());
    }

    fn run(addr: u64, pages: u64, offset: u64) -> PageRun {
        PageRun {
            addr,
            len: pages * 4096,
            offset,
        }
    }

    /// The skeleton's page data: 4 pages at 0x10000 and 2 at 0x40000.
    fn base_pages() -> (Vec<PageRun>, Vec<u8>) {
        (
            vec![run(0x10000, 4, 0), run(0x40000, 2, 4 * 4096)],
            bytes(6 * 4096, 11),
        )
    }

    #[test]
    fn pages_are_taken_from_the_skeleton_at_their_address_but_for_the_bytes_rewritten() {
        let (base_runs, base) = base_pages();
        // The stop saved 0x40000 (unchanged) first, then 0x11000 and
        // 0x12000 with a few counts rewritten, then a page the skeleton
        // never had.
        let mut fin = base[4 * 4096..5 * 4096].to_vec();
        let mut two = base[4096..3 * 4096].to_vec();
        for at in [8usize, 200, 4100, 8000] {
            two[at] = two[at].wrapping_add(1);
        }
        fin.extend_from_slice(&two);
        fin.extend_from_slice(&bytes(4096, 12));
        let fin_runs = [
            run(0x40000, 1, 0),
            run(0x11000, 2, 4096),
            run(0x90000, 1, 3 * 4096),
        ];
        let pieces = plan_pages(&base_runs, &base, &fin_runs, &fin);
        assert_eq!(rebuild(&pieces, &base, &fin), fin);
        assert_eq!(
            pieces[0],
            Piece::Copy {
                from: 4 * 4096,
                len: 4096
            }
        );
        // Four slices of 32 bytes for the rewritten bytes, and the new page.
        assert_eq!(sent(&pieces), 4 * 32 + 4096);
    }

    #[test]
    fn equal_runs_too_short_to_copy_are_sent() {
        let (base_runs, base) = base_pages();
        // One byte changed in every 64: no run of equal slices reaches
        // MIN_RUN, so the page goes whole.
        let mut fin = base[..4096].to_vec();
        for at in (0..4096).step_by(64) {
            fin[at] ^= 0x5a;
        }
        let pieces = plan_pages(&base_runs, &base, &[run(0x10000, 1, 0)], &fin);
        assert_eq!(rebuild(&pieces, &base, &fin), fin);
        assert_eq!(pieces, vec![Piece::Send { at: 0, len: 4096 }]);
    }

    #[test]
    fn page_runs_the_planner_does_not_understand_send_the_rest_as_it_is() {
        let (base_runs, base) = base_pages();
        let fin = base[..3 * 4096].to_vec();
        // A run that is not whole pages stops the plan: what follows is sent.
        let odd = [
            run(0x10000, 1, 0),
            PageRun {
                addr: 0x11000,
                len: 100,
                offset: 4096,
            },
        ];
        let pieces = plan_pages(&base_runs, &base, &odd, &fin);
        assert_eq!(rebuild(&pieces, &base, &fin), fin);
        assert_eq!(sent(&pieces), 2 * 4096);
        // So does one past the end of the file.
        let past = [run(0x10000, 1, 0), run(0x11000, 3, 4096)];
        let pieces = plan_pages(&base_runs, &base, &past, &fin);
        assert_eq!(rebuild(&pieces, &base, &fin), fin);
        assert_eq!(sent(&pieces), 2 * 4096);
        // A skeleton's run past the end of its file is never taken from,
        // and bytes no run places are sent.
        let short = &base[..4096];
        let pieces = plan_pages(
            &base_runs,
            short,
            &[run(0x11000, 1, 4096)],
            &fin[..2 * 4096],
        );
        assert_eq!(rebuild(&pieces, short, &fin[..2 * 4096]), &fin[..2 * 4096]);
        assert_eq!(sent(&pieces), 2 * 4096);
        assert!(plan_pages(&base_runs, &base, &[], &[]).is_empty());
    }

    fn zeros(pieces: &[Piece]) -> u64 {
        bytes_of(pieces, |p| matches!(p, Piece::Zeros { .. }))
    }

    /// Runs of zeros inside what a plan sends go as `Zeros` when long
    /// enough, at any offset, and the file rebuilds byte for byte; short
    /// runs, runs shorter than a block's alignment allows, and what the
    /// plan copies stay as they were.
    #[test]
    fn runs_of_zeros_are_not_sent() {
        // Random data with: 8 KiB of zeros at an odd offset (an AMX tile
        // area), 200 zeros (too short), and the file ending in zeros.
        let mut fin = bytes(40_000, 7);
        fin[1001..1001 + 8192].fill(0);
        fin[20_000..20_200].fill(0);
        let n = fin.len();
        fin[n - 3000..].fill(0);
        let whole = vec![Piece::Send {
            at: 0,
            len: n as u64,
        }];
        let pieces = without_zeros(whole, &fin);
        assert_eq!(rebuild(&pieces, &[], &fin), fin);
        // The 8 KiB run loses at most a block at each edge to alignment;
        // the tail at most one block.
        let z = zeros(&pieces);
        assert!(
            z >= (8192 - 2 * ZERO_BLOCK + 3000 - ZERO_BLOCK) as u64,
            "{z} zero bytes found: {pieces:?}"
        );
        assert!(z <= 8192 + 3000, "{pieces:?}");
        assert_eq!(sent(&pieces) + z, n as u64);
        // The 200 zeros are sent: no Zeros piece starts near them.
        let mut at = 0u64;
        for p in &pieces {
            if let Piece::Zeros { len } = p {
                assert!(at + len <= 19_900 || at >= 20_300, "{pieces:?}");
            }
            at += p.bytes();
        }

        // Copies stay copies; only what is sent is looked at.
        let base = vec![0u8; 4096];
        let plan = vec![
            Piece::Copy { from: 0, len: 4096 },
            Piece::Send {
                at: 4096,
                len: 4096,
            },
        ];
        let mut fin = bytes(8192, 3);
        fin[4096..].fill(0);
        let pieces = without_zeros(plan, &fin);
        assert_eq!(
            pieces,
            vec![
                Piece::Copy { from: 0, len: 4096 },
                Piece::Zeros { len: 4096 }
            ]
        );
        assert_eq!(rebuild(&pieces, &base, &fin)[4096..], fin[4096..]);

        // Nothing but data: the plan is unchanged.
        let fin = bytes(10_000, 9);
        let plan = vec![Piece::Send { at: 0, len: 10_000 }];
        assert_eq!(without_zeros(plan.clone(), &fin), plan);
        assert!(without_zeros(Vec::new(), &[]).is_empty());
    }
}
