//! Pages sent again as what changed in them (`PageDeltas`, version 18;
//! docs/protocol.md §6.1, "Pages sent again as their changes").
//!
//! A page an iterative migration sends a second time is often changed in a
//! few words only: a counter, a pointer, a field of a record. When the
//! sender still has the copy it sent last, it may send the page as a
//! *record* of the bytes that differ from that copy, which the receiver
//! applies to its own copy of the page (the newest one it received for that
//! address). Every record carries the hash of the whole page it produces,
//! so that a receiver whose copy is not the sender's (which a correct peer
//! never causes) refuses the record instead of keeping a wrong page.
//!
//! The attachment of a `PageDeltas` message is a sequence of records:
//!
//! ```text
//! record := addr u64 | hash u64 | len u16 | runs (len bytes)      (little endian)
//! runs   := (offset u16 | count u16 | count bytes)*
//! ```
//!
//! `hash` is the XXH3-64 of the page after the runs are written into it.
//! Runs are in increasing order of offset, do not overlap, are not empty
//! and end within the page.

use crate::error::ProtoError;
use xxhash_rust::xxh3::xxh3_64;

/// Bytes of a page.
pub const PAGE: usize = 4096;
/// Bytes of a record before its runs.
pub const RECORD_HEADER: usize = 18;
/// Bytes of a run before its bytes.
const RUN_HEADER: usize = 4;

/// Appends to `out` the record that turns `old` into `new` (both one page),
/// for the page at `addr`, and returns true; or, if its runs would take
/// more than `max` bytes, leaves `out` as it was and returns false (the
/// page is better sent whole).
pub fn push_record(out: &mut Vec<u8>, addr: u64, old: &[u8], new: &[u8], max: usize) -> bool {
    assert!(old.len() == PAGE && new.len() == PAGE, "whole pages only");
    let start = out.len();
    out.extend_from_slice(&addr.to_le_bytes());
    // The hash and the length are filled in once the page is known to go
    // as its changes.
    out.extend_from_slice(&[0; 10]);
    let runs = out.len();
    // Words compared eight bytes at a time; a run of changed words is then
    // trimmed to its first and last changed byte.
    let word = |p: &[u8], i: usize| u64::from_ne_bytes(p[i * 8..i * 8 + 8].try_into().unwrap());
    let mut i = 0;
    while i < PAGE / 8 {
        if word(old, i) == word(new, i) {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < PAGE / 8 && word(old, j) != word(new, j) {
            j += 1;
        }
        let mut s = i * 8;
        while old[s] == new[s] {
            s += 1;
        }
        let mut e = j * 8;
        while old[e - 1] == new[e - 1] {
            e -= 1;
        }
        if out.len() - runs + RUN_HEADER + (e - s) > max {
            out.truncate(start);
            return false;
        }
        out.extend_from_slice(&(s as u16).to_le_bytes());
        out.extend_from_slice(&((e - s) as u16).to_le_bytes());
        out.extend_from_slice(&new[s..e]);
        i = j;
    }
    let len = (out.len() - runs) as u16;
    out[runs - 10..runs - 2].copy_from_slice(&xxh3_64(new).to_le_bytes());
    out[runs - 2..runs].copy_from_slice(&len.to_le_bytes());
    true
}

/// One record of a `PageDeltas` attachment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// The page's address at the source (page aligned).
    pub addr: u64,
    /// XXH3-64 of the page the runs produce.
    pub hash: u64,
    runs: &'a [u8],
}

impl Record<'_> {
    /// Writes the record's runs into `page`, the receiver's copy of the page
    /// at [`Record::addr`], and checks the result against the record's hash.
    /// On an error `page` may be partly written and must not be kept.
    pub fn apply(&self, page: &mut [u8]) -> Result<(), ProtoError> {
        if page.len() != PAGE {
            return Err(ProtoError::Malformed(
                "a page delta applies to one page".into(),
            ));
        }
        let mut r = self.runs;
        let mut end = 0usize;
        while !r.is_empty() {
            if r.len() < RUN_HEADER {
                return Err(self.bad("a run is cut short"));
            }
            let off = u16::from_le_bytes([r[0], r[1]]) as usize;
            let n = u16::from_le_bytes([r[2], r[3]]) as usize;
            if n == 0 || off < end || off + n > PAGE || r.len() < RUN_HEADER + n {
                return Err(self.bad("a run is empty, out of order, beyond the page or cut short"));
            }
            page[off..off + n].copy_from_slice(&r[RUN_HEADER..RUN_HEADER + n]);
            end = off + n;
            r = &r[RUN_HEADER + n..];
        }
        if xxh3_64(page) != self.hash {
            return Err(self.bad(
                "the page it produces does not match its hash (the copy it was made against is not this one)",
            ));
        }
        Ok(())
    }

    fn bad(&self, what: &str) -> ProtoError {
        ProtoError::Malformed(format!("PageDeltas: the page at {:#x}: {what}", self.addr))
    }
}

/// The records of a `PageDeltas` attachment, checked for their framing and
/// page-aligned addresses (their runs are checked by [`Record::apply`]).
pub fn records(att: &[u8]) -> Result<Vec<Record<'_>>, ProtoError> {
    let mut out = Vec::new();
    let mut r = att;
    while !r.is_empty() {
        if r.len() < RECORD_HEADER {
            return Err(ProtoError::Malformed(format!(
                "PageDeltas: record {} is cut short",
                out.len()
            )));
        }
        let addr = u64::from_le_bytes(r[0..8].try_into().unwrap());
        let hash = u64::from_le_bytes(r[8..16].try_into().unwrap());
        let len = u16::from_le_bytes([r[16], r[17]]) as usize;
        if !addr.is_multiple_of(PAGE as u64) || r.len() < RECORD_HEADER + len {
            return Err(ProtoError::Malformed(format!(
                "PageDeltas: record {} (page {addr:#x}) is not page aligned or is cut short",
                out.len()
            )));
        }
        out.push(Record {
            addr,
            hash,
            runs: &r[RECORD_HEADER..RECORD_HEADER + len],
        });
        r = &r[RECORD_HEADER + len..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..PAGE)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn a_record_turns_the_old_page_into_the_new_one() {
        let old = page(1);
        let mut new = old.clone();
        new[0] ^= 1; // first byte
        new[100..108].copy_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
        new[2001] ^= 0xff; // one byte inside a word
        new[PAGE - 1] ^= 0x80; // last byte
        let mut out = vec![0xaa]; // records append
        assert!(push_record(&mut out, 0x7000, &old, &new, 2048));
        let recs = records(&out[1..]).unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].addr, 0x7000);
        // Four runs of 1, 8, 1 and 1 bytes.
        assert_eq!(out.len() - 1, RECORD_HEADER + 4 * RUN_HEADER + 11);
        let mut mine = old.clone();
        recs[0].apply(&mut mine).unwrap();
        assert_eq!(mine, new);
        // An unchanged page is a record without runs.
        let mut out = Vec::new();
        assert!(push_record(&mut out, 0, &new, &new, 0));
        assert_eq!(out.len(), RECORD_HEADER);
        let mut same = new.clone();
        records(&out).unwrap()[0].apply(&mut same).unwrap();
        assert_eq!(same, new);
    }

    #[test]
    fn a_page_changed_too_much_is_left_to_go_whole() {
        let (old, new) = (page(1), page(2));
        let mut out = vec![7u8; 3];
        assert!(!push_record(&mut out, 0x1000, &old, &new, 2048));
        assert_eq!(out, [7, 7, 7]);
        // Every byte changed still fits a limit of a page and a header.
        assert!(push_record(&mut out, 0x1000, &old, &new, PAGE + RUN_HEADER));
        let mut mine = old.clone();
        records(&out[3..]).unwrap()[0].apply(&mut mine).unwrap();
        assert_eq!(mine, new);
    }

    #[test]
    fn records_against_another_copy_or_malformed_are_refused() {
        let old = page(3);
        let mut new = old.clone();
        new[512..520].copy_from_slice(&[9; 8]);
        let mut out = Vec::new();
        assert!(push_record(&mut out, 0x2000, &old, &new, 2048));
        // Against a copy that is not the sender's: the hash says so.
        let mut other = page(4);
        assert!(records(&out).unwrap()[0].apply(&mut other).is_err());
        // Cut anywhere inside: the framing or the runs say so.
        for cut in 1..out.len() {
            let r = records(&out[..cut]);
            assert!(r.is_err(), "cut at {cut}");
        }
        // A run beyond the page, an empty one, and two out of order.
        let bad_runs: [&[u8]; 3] = [
            &[0xff, 0x0f, 2, 0, 1, 1],
            &[0, 0, 0, 0],
            &[8, 0, 1, 0, 5, 0, 0, 1, 0, 6],
        ];
        for runs in bad_runs {
            let mut rec = Vec::new();
            rec.extend_from_slice(&0x3000u64.to_le_bytes());
            rec.extend_from_slice(&0u64.to_le_bytes());
            rec.extend_from_slice(&(runs.len() as u16).to_le_bytes());
            rec.extend_from_slice(runs);
            let recs = records(&rec).unwrap();
            let mut p = old.clone();
            assert!(recs[0].apply(&mut p).is_err(), "{runs:?}");
        }
        // An unaligned address.
        let mut rec = out.clone();
        rec[0] = 1;
        assert!(records(&rec).is_err());
        // Not a page.
        assert!(records(&out).unwrap()[0].apply(&mut [0u8; 100]).is_err());
    }
}
