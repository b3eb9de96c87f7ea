//! The copies of the pages an iterative migration sent again, so that the
//! next time they are sent only what changed in them goes (`PageDeltas`,
//! protocol 18; docs/protocol.md §6.1, "Pages sent again as their
//! changes").
//!
//! A page written during pre-copy's rounds is mostly written again: the
//! pages the stop sends are nearly all among those the last rerun sent.
//! A program that rewrites a few words of each (a counter, a pointer, a
//! field of a record) then sends its stop as a few dozen bytes per page
//! instead of 4096. The copies are kept of the pages of the reruns only
//! (round 0 sends every page, most of them never written again), up to a
//! budget; a page without a copy, or changed in more than
//! [`MAX_RUN_BYTES`], goes whole.

use crate::error::Result;
use pmig_proto::blocking::Channel;
use pmig_proto::msg::{self, Msg};
use pmig_proto::page_delta::{push_record, PAGE};
use std::collections::HashMap;
use std::net::TcpStream;

/// A page whose changed bytes (with their runs' headers) would take more
/// than this goes whole: a quarter of a page saves little on the wire and
/// costs the destination a read of its copy.
pub const MAX_RUN_BYTES: usize = 1024;
/// Records are sent once they take this many bytes.
const BATCH_BYTES: usize = 256 << 10;
/// Most bytes of copies kept, whatever the budget asked.
pub const MAX_BUDGET: u64 = 256 << 20;

/// What [`SentCopies::send`] sent.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// About the bytes that went on the wire.
    pub wire: u64,
    /// Pages sent as their changes.
    pub as_changes: u64,
}

/// The copies, by page address, of the last bytes sent of each page kept.
pub struct SentCopies {
    pages: HashMap<u64, Box<[u8]>>,
    /// Most pages kept.
    cap: usize,
    /// Records not sent yet, and how many.
    records: Vec<u8>,
    in_records: u32,
    /// Streamed ([`SentCopies::stream`]): most pages per `PageDeltas`, each
    /// flushed at once.
    streamed: Option<u32>,
    /// Pages sent as their changes so far, and their records' bytes.
    pub as_changes: u64,
    pub change_bytes: u64,
}

impl SentCopies {
    /// Copies of at most `budget` bytes (at most [`MAX_BUDGET`]).
    pub fn new(budget: u64) -> SentCopies {
        SentCopies {
            pages: HashMap::new(),
            cap: (budget.min(MAX_BUDGET) / PAGE as u64) as usize,
            records: Vec::new(),
            in_records: 0,
            streamed: None,
            as_changes: 0,
            change_bytes: 0,
        }
    }

    /// From now on the records go in batches of at most `pages` pages,
    /// each flushed once queued (`pages` 0: as before, large batches sent
    /// with the other messages). At the stop the destination then applies
    /// each batch while the next is read from the frozen process, where
    /// one message at the end made the two wait for each other.
    pub fn stream(&mut self, pages: u32) {
        self.streamed = (pages > 0).then(|| pages.min(msg::MAX_DELTA_PAGES));
    }

    /// Bytes the copies take.
    pub fn bytes(&self) -> u64 {
        (self.pages.len() * PAGE) as u64
    }

    /// Queues the whole pages `data` of migration `id` at `addr`: each page
    /// with a copy as its changes where they are few enough, the others
    /// whole (`queue_pages`: runs of zero pages as their count). Keeps a
    /// copy of every page sent, while the budget lasts. The records go in
    /// batches; [`SentCopies::finish`] sends the last one and flushes.
    pub fn send(
        &mut self,
        ch: &mut Channel<TcpStream>,
        id: u64,
        addr: u64,
        data: &[u8],
    ) -> Result<Sent> {
        let mut sent = Sent::default();
        // Pages [run, i) go whole, as one message.
        let mut run = 0;
        let pages = data.len() / PAGE;
        for i in 0..pages {
            let at = addr + (i * PAGE) as u64;
            let page = &data[i * PAGE..(i + 1) * PAGE];
            let changes = match self.pages.get_mut(&at) {
                Some(copy) => {
                    let as_changes = push_record(&mut self.records, at, copy, page, MAX_RUN_BYTES);
                    copy.copy_from_slice(page);
                    as_changes
                }
                None => {
                    if self.pages.len() < self.cap {
                        self.pages.insert(at, page.into());
                    }
                    false
                }
            };
            if !changes {
                continue;
            }
            self.in_records += 1;
            sent.as_changes += 1;
            if run < i {
                sent.wire += whole(ch, id, addr, data, run, i)?;
            }
            run = i + 1;
            let batch = self.streamed.unwrap_or(msg::MAX_DELTA_PAGES);
            if self.records.len() >= BATCH_BYTES || self.in_records >= batch {
                sent.wire += self.queue_records(ch, id)?;
                if self.streamed.is_some() {
                    ch.flush()?;
                }
            }
        }
        if run < pages {
            sent.wire += whole(ch, id, addr, data, run, pages)?;
        }
        // A tail of less than a page (callers send whole pages) goes as is.
        if data.len() > pages * PAGE {
            let s = ch.queue_pages(id, addr + (pages * PAGE) as u64, &data[pages * PAGE..])?;
            sent.wire += s.wire();
        }
        Ok(sent)
    }

    /// Sends the records not sent yet, and flushes the channel. Returns the
    /// bytes of the records' message.
    pub fn finish(&mut self, ch: &mut Channel<TcpStream>, id: u64) -> Result<u64> {
        let wire = self.queue_records(ch, id)?;
        ch.flush()?;
        Ok(wire)
    }

    fn queue_records(&mut self, ch: &mut Channel<TcpStream>, id: u64) -> Result<u64> {
        if self.in_records == 0 {
            return Ok(0);
        }
        let pages = self.in_records;
        ch.queue(&Msg::PageDeltas { id, pages }, &[&self.records])?;
        let wire = self.records.len() as u64 + pmig_proto::PagesSent::OVERHEAD;
        self.as_changes += pages as u64;
        self.change_bytes += self.records.len() as u64;
        self.records.clear();
        self.in_records = 0;
        Ok(wire)
    }
}

/// Sends pages [from, to) of `data` whole.
fn whole(
    ch: &mut Channel<TcpStream>,
    id: u64,
    addr: u64,
    data: &[u8],
    from: usize,
    to: usize,
) -> Result<u64> {
    let s = ch.send_pages(
        id,
        addr + (from * PAGE) as u64,
        &data[from * PAGE..to * PAGE],
    )?;
    Ok(s.wire())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmig_proto::blocking::{accept, connect};
    use pmig_proto::{ClusterKey, Config};
    use std::net::TcpListener;

    fn pair() -> (Channel<TcpStream>, Channel<TcpStream>) {
        let key = ClusterKey::from_bytes([7; 32]);
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let k2 = key.clone();
        let srv = std::thread::spawn(move || accept(&l, &k2, &Config::new("dst")).unwrap());
        let c = connect(addr, &key, &Config::new("src")).unwrap();
        (c, srv.join().unwrap())
    }

    /// Receives until `Commit`, into `pages` as a destination's store
    /// would: whole pages replace, changes apply to the copy held.
    fn receive(ch: &mut Channel<TcpStream>, pages: &mut HashMap<u64, Vec<u8>>) -> u64 {
        let mut changes = 0;
        loop {
            let inc = ch.recv_with().unwrap();
            match inc.msg {
                Msg::Commit { .. } => return changes,
                Msg::PageDeltas { pages: n, .. } => {
                    let recs = pmig_proto::page_delta::records(inc.attachment()).unwrap();
                    assert_eq!(recs.len(), n as usize);
                    for r in recs {
                        r.apply(pages.get_mut(&r.addr).expect("a copy is held"))
                            .unwrap();
                        changes += 1;
                    }
                }
                _ => {
                    let (_, addr, data) = inc.pages().expect("pages");
                    for (i, p) in data.chunks(PAGE).enumerate() {
                        pages.insert(addr + (i * PAGE) as u64, p.to_vec());
                    }
                }
            }
        }
    }

    /// One round through `copies`: `data` at `base` sent and finished,
    /// then `Commit`, received into `held` ([`receive`]). Returns what
    /// `send` reported, the bytes `finish` sent, and the pages received as
    /// their changes.
    fn round(
        copies: &mut SentCopies,
        (src, dst): (&mut Channel<TcpStream>, &mut Channel<TcpStream>),
        held: &mut HashMap<u64, Vec<u8>>,
        base: u64,
        data: &[u8],
    ) -> (Sent, u64, u64) {
        let s = copies.send(src, 1, base, data).unwrap();
        let finished = copies.finish(src, 1).unwrap();
        src.send(&Msg::Commit { id: 1 }).unwrap();
        (s, finished, receive(dst, held))
    }

    #[test]
    fn pages_sent_again_go_as_their_changes_and_arrive_whole() {
        let (mut src, mut dst) = pair();
        let base = 0x7f00_0000_0000u64;
        let mut data: Vec<u8> = (0..5 * PAGE).map(|i| (i * 7 % 251) as u8 + 1).collect();
        let mut copies = SentCopies::new(64 << 20);
        let mut held = HashMap::new();
        // First time: every page whole, each kept.
        let (s, finished, changes) =
            round(&mut copies, (&mut src, &mut dst), &mut held, base, &data);
        assert_eq!(finished, 0);
        assert_eq!((s.as_changes, changes), (0, 0));
        assert_eq!(copies.bytes(), 5 * PAGE as u64);
        // Again: page 0 with one word changed, page 1 unchanged, page 2
        // rewritten whole, page 3 zeroed, page 4 with two bytes apart.
        data[100] ^= 0xff;
        for b in &mut data[2 * PAGE..3 * PAGE] {
            *b = b.wrapping_mul(3).wrapping_add(1);
        }
        data[3 * PAGE..4 * PAGE].fill(0);
        data[4 * PAGE] = 0;
        data[5 * PAGE - 1] = 0;
        let (s, records, changes) =
            round(&mut copies, (&mut src, &mut dst), &mut held, base, &data);
        assert_eq!(s.as_changes, 3, "pages 0, 1 and 4");
        assert_eq!(changes, 3);
        assert!(
            s.wire + records < 2 * PAGE as u64 + 1024,
            "{s:?}, {records}"
        );
        for i in 0..5 {
            let at = base + (i * PAGE) as u64;
            assert!(held[&at] == data[i * PAGE..(i + 1) * PAGE], "page {i}");
        }
        assert_eq!(copies.as_changes, 3);
    }

    /// Streamed (the stop's round): the changes go in batches of the size
    /// asked, each on the wire before `finish`, and arrive as sent.
    #[test]
    fn streamed_changes_go_in_small_batches_each_flushed() {
        let (mut src, mut dst) = pair();
        let base = 0x7f00_0000_0000u64;
        let mut data: Vec<u8> = (0..5 * PAGE).map(|i| (i * 13 % 249) as u8 + 1).collect();
        let mut copies = SentCopies::new(64 << 20);
        let mut held = HashMap::new();
        round(&mut copies, (&mut src, &mut dst), &mut held, base, &data);
        for i in 0..5 {
            data[i * PAGE + 8] ^= 0x5a;
        }
        copies.stream(2);
        // A batch not flushed would leave the reads below waiting: fail
        // instead.
        dst.stream()
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let s = copies.send(&mut src, 1, base, &data).unwrap();
        assert_eq!(s.as_changes, 5);
        // Before `finish`: two batches of two pages, already flushed.
        for _ in 0..2 {
            let inc = dst.recv_with().unwrap();
            assert!(
                matches!(inc.msg, Msg::PageDeltas { pages: 2, .. }),
                "{:?}",
                inc.msg
            );
            for r in pmig_proto::page_delta::records(inc.attachment()).unwrap() {
                r.apply(held.get_mut(&r.addr).unwrap()).unwrap();
            }
        }
        copies.finish(&mut src, 1).unwrap();
        src.send(&Msg::Commit { id: 1 }).unwrap();
        assert_eq!(receive(&mut dst, &mut held), 1, "the last page");
        for i in 0..5 {
            let at = base + (i * PAGE) as u64;
            assert!(held[&at] == data[i * PAGE..(i + 1) * PAGE], "page {i}");
        }
        // Back to large batches: the five changes go as one message.
        copies.stream(0);
        for i in 0..5 {
            data[i * PAGE + 9] ^= 0x33;
        }
        copies.send(&mut src, 1, base, &data).unwrap();
        copies.finish(&mut src, 1).unwrap();
        let inc = dst.recv_with().unwrap();
        assert!(
            matches!(inc.msg, Msg::PageDeltas { pages: 5, .. }),
            "{:?}",
            inc.msg
        );
    }

    #[test]
    fn copies_stay_within_their_budget() {
        let (mut src, mut dst) = pair();
        let data = vec![5u8; 4 * PAGE];
        let mut copies = SentCopies::new(2 * PAGE as u64 + 100);
        let mut held = HashMap::new();
        copies.send(&mut src, 1, 0x10000, &data).unwrap();
        assert_eq!(copies.bytes(), 2 * PAGE as u64);
        let s = copies.send(&mut src, 1, 0x10000, &data).unwrap();
        copies.finish(&mut src, 1).unwrap();
        src.send(&Msg::Commit { id: 1 }).unwrap();
        assert_eq!(s.as_changes, 2, "only the pages kept go as their changes");
        receive(&mut dst, &mut held);
        assert!(held.values().all(|p| p == &data[..PAGE]));
        assert_eq!(held.len(), 4);
        assert_eq!(
            SentCopies::new(u64::MAX).cap,
            (MAX_BUDGET / PAGE as u64) as usize
        );
    }
}
