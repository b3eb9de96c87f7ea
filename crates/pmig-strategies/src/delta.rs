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
//! file of that name (`ImageCopy`). Parts are matched by name, and compared
//! in blocks of [`BLOCK`] bytes from their starts, so a part that moved
//! because one before it grew or shrank is still found; a block that
//! differs from the one at its place is looked up among all of the
//! skeleton's part's blocks by its hash (and compared), so bytes that moved
//! within the part by whole blocks are found too.
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
}

impl Piece {
    pub fn bytes(&self) -> u64 {
        match *self {
            Piece::Copy { len, .. } | Piece::Send { len, .. } => len,
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
            _ => false,
        }
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
    let mut push = |p: Piece| {
        if p.bytes() == 0 {
            return;
        }
        if !out.last_mut().is_some_and(|last| last.join(p)) {
            out.push(p);
        }
    };
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

/// The offset of each whole block of `part` (from its start), by the
/// block's hash; the first of equal blocks.
fn blocks_of(part: &[u8]) -> HashMap<u64, u64> {
    let mut out = HashMap::with_capacity(part.len() / BLOCK as usize);
    for (n, b) in part.chunks_exact(BLOCK as usize).enumerate() {
        out.entry(xxh3_64(b)).or_insert(n as u64 * BLOCK);
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
            }
        }
        out
    }

    fn sent(pieces: &[Piece]) -> u64 {
        pieces
            .iter()
            .filter(|p| matches!(p, Piece::Send { .. }))
            .map(Piece::bytes)
            .sum()
    }

    fn bytes(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn a_part_that_moved_is_taken_from_the_skeleton_but_its_changed_block() {
        // Skeleton: "memory" of 100 bytes, then "ghosts" of 64 KiB.
        let ghost = bytes(64 << 10, 7);
        let mut base = bytes(100, 1);
        base.extend_from_slice(&ghost);
        let base_m = manifest(&[("memory", 0, 100), ("ghosts", 100, ghost.len() as u64)]);
        // The stop: "memory" grew by 37 bytes (so "ghosts" moved), and one
        // byte of the ghost's fifth block changed.
        let mut g2 = ghost.clone();
        g2[4 * 4096 + 9] ^= 0xff;
        let mut fin = bytes(137, 2);
        fin.extend_from_slice(&g2);
        let fin_m = manifest(&[("memory", 0, 137), ("ghosts", 137, g2.len() as u64)]);
        let pieces = plan(&base_m, &base, &fin_m, &fin, PARTS_FILE);
        assert_eq!(rebuild(&pieces, &base, &fin), fin);
        // The memory part's first 100 bytes differ, so it all goes; of the
        // ghost, one block.
        assert_eq!(sent(&pieces), 137 + 4096);
        assert_eq!(
            pieces,
            vec![
                Piece::Send { at: 0, len: 137 },
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
                    len: ghost.len() as u64 - 5 * 4096
                },
            ]
        );
    }

    #[test]
    fn blocks_that_moved_within_a_part_are_found_where_they_went() {
        // A sparse ghost's data: 8 pages; at the stop a page came in
        // before the fourth (the rest moved by one block) and the last
        // changed.
        let pages: Vec<Vec<u8>> = (0..8).map(|i| bytes(4096, 10 + i as u8)).collect();
        let mut base = b"head".to_vec();
        base.extend(pages.concat());
        let base_m = manifest(&[("ghosts", 0, base.len() as u64)]);
        let mut fin = b"head".to_vec();
        let mut moved = pages.clone();
        moved.insert(3, bytes(4096, 99));
        moved[8] = bytes(4096, 77);
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
        // Two whole blocks copied; the third block ends past the skeleton's
        // part, so from there on everything is sent.
        assert_eq!(pieces[0], Piece::Copy { from: 0, len: 8192 });
        assert_eq!(sent(&pieces), fin.len() as u64 - 8192);
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
}
