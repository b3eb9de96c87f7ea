//! Records and frames: the I/O-free core shared by the blocking and the async API.
//!
//! Wire format after the handshake (see `docs/protocol.md`):
//!
//! ```text
//! stream    = record*
//! record    = len:u16be  ciphertext[len]        17 <= len <= 65535, one Noise transport message
//! plaintext = concatenation of the decrypted records = frame*
//! frame     = body_len:u32le  body[body_len]    body_len <= max frame size
//! ```
//!
//! Frames are independent of records: a large frame spans many records and several small
//! frames may share one record. Records are sealed when full or on flush.

use std::collections::VecDeque;
use std::sync::Arc;

use snow::StatelessTransportState;

use crate::error::ProtoError;

/// Largest Noise message (ciphertext of one record), fixed by the Noise specification.
pub const MAX_RECORD: usize = 65535;
/// Authentication tag added to each record by ChaChaPoly.
pub const TAG_LEN: usize = 16;
/// Largest plaintext carried by one record.
pub const MAX_RECORD_PLAINTEXT: usize = MAX_RECORD - TAG_LEN;
/// Bytes of the record length prefix.
pub const RECORD_HEADER: usize = 2;
/// Bytes of the frame length prefix.
pub const FRAME_HEADER: usize = 4;
/// Largest record on the wire, prefix included.
pub const MAX_WIRE_RECORD: usize = RECORD_HEADER + MAX_RECORD;

/// Ciphertext is written to the socket in batches of about this size.
pub(crate) const OUT_BATCH: usize = 1 << 20;
/// Ciphertext is read from the socket into a buffer of this size.
pub(crate) const IN_BUF: usize = 1 << 20;
/// A frame body buffer is preallocated up to this size; beyond, it grows as data arrives,
/// so a peer cannot make us commit memory it has not sent.
const BODY_PREALLOC: usize = 4 << 20;

/// Parses the plaintext stream into frames. Never panics; fails on a frame length above
/// the limit. After an error every later call fails too.
#[derive(Debug)]
pub struct FrameParser {
    max: usize,
    hdr: [u8; FRAME_HEADER],
    hdr_len: usize,
    /// While inside a body.
    body: Option<Body>,
    ready: VecDeque<Vec<u8>>,
    failed: bool,
    /// Bodies handed back after use ([`Self::recycle`]), for the next large
    /// frames: their memory is already touched, which on a VM saves a page
    /// fault per 4 KiB received (about 4 µs each measured here).
    spares: Vec<Vec<u8>>,
}

/// A frame body being received: `len` bytes, of which `buf[..filled]` have
/// come. What `buf` holds beyond that is left from its earlier use (a
/// recycled body keeps its bytes): zeroed again before every receive into
/// it, each byte received would cost one more write.
#[derive(Debug)]
struct Body {
    len: usize,
    buf: Vec<u8>,
    filled: usize,
}

impl Body {
    /// `buf[filled..filled + n]`, for `n` more bytes: zeros where `buf` was
    /// shorter, else whatever it held. `limit`: as [`grow`]'s.
    fn room(&mut self, n: usize, limit: usize) -> &mut [u8] {
        let need = self.filled + n;
        if need > self.buf.len() {
            let extra = need - self.buf.len();
            grow(&mut self.buf, extra, limit);
            self.buf.resize(need, 0);
        }
        &mut self.buf[self.filled..need]
    }
}

/// Frames at least this large take a recycled body.
const RECYCLE_MIN: usize = 64 << 10;
/// Recycled bodies larger than this are freed instead.
const RECYCLE_MAX: usize = 32 << 20;
/// Most bodies kept for reuse: those a receiver has in flight to a
/// consumer thread, and the one being received.
const SPARES: usize = 8;

impl FrameParser {
    /// A parser accepting frame bodies of at most `max_frame` bytes.
    pub fn new(max_frame: usize) -> Self {
        FrameParser {
            max: max_frame,
            hdr: [0; FRAME_HEADER],
            hdr_len: 0,
            body: None,
            ready: VecDeque::new(),
            failed: false,
            spares: Vec::new(),
        }
    }

    /// Takes back a frame body the caller is done with, to receive a later
    /// large frame into (up to [`SPARES`] bodies of [`RECYCLE_MIN`] to
    /// [`RECYCLE_MAX`] bytes are kept, the largest ones).
    pub fn recycle(&mut self, body: Vec<u8>) {
        if body.capacity() < RECYCLE_MIN || body.capacity() > RECYCLE_MAX {
            return;
        }
        // Kept with its bytes: a body received into it overwrites them
        // (see `Body`).
        if self.spares.len() < SPARES {
            self.spares.push(body);
            return;
        }
        if let Some(smallest) = self.spares.iter_mut().min_by_key(|v| v.capacity()) {
            if smallest.capacity() < body.capacity() {
                *smallest = body;
            }
        }
    }

    /// A kept body of at least `want` bytes' capacity, emptied, or a new
    /// empty one: for a receiver that makes a body of its own (pages it
    /// decompresses).
    pub fn spare(&mut self, want: usize) -> Vec<u8> {
        match self.spares.iter().position(|v| v.capacity() >= want) {
            Some(i) => {
                let mut v = self.spares.swap_remove(i);
                v.clear();
                v
            }
            None => Vec::with_capacity(want),
        }
    }

    /// Feeds plaintext bytes; complete frames become available through [`Self::pop`].
    pub fn push(&mut self, mut data: &[u8]) -> Result<(), ProtoError> {
        if self.failed {
            return Err(ProtoError::Malformed("frame stream already failed".into()));
        }
        while !data.is_empty() {
            match &mut self.body {
                None => {
                    let n = (FRAME_HEADER - self.hdr_len).min(data.len());
                    self.hdr[self.hdr_len..self.hdr_len + n].copy_from_slice(&data[..n]);
                    self.hdr_len += n;
                    data = &data[n..];
                    if self.hdr_len == FRAME_HEADER {
                        self.hdr_len = 0;
                        self.start_body(u32::from_le_bytes(self.hdr))?;
                    }
                }
                Some(b) => {
                    let n = (b.len - b.filled).min(data.len());
                    let limit = b.len + TAG_LEN;
                    b.room(n, limit).copy_from_slice(&data[..n]);
                    b.filled += n;
                    data = &data[n..];
                    self.finish_if_complete();
                }
            }
        }
        Ok(())
    }

    fn start_body(&mut self, len: u32) -> Result<(), ProtoError> {
        let len = len as usize;
        if len > self.max {
            self.failed = true;
            return Err(ProtoError::TooLarge {
                size: len as u64,
                max: self.max,
            });
        }
        if len == 0 {
            self.ready.push_back(Vec::new());
        } else {
            let want = len.min(BODY_PREALLOC) + TAG_LEN;
            let reuse = (len >= RECYCLE_MIN)
                .then(|| self.spares.iter().position(|v| v.capacity() >= want))
                .flatten();
            let buf = match reuse {
                Some(i) => self.spares.swap_remove(i),
                None => Vec::with_capacity(want),
            };
            self.body = Some(Body {
                len,
                buf,
                filled: 0,
            });
        }
        Ok(())
    }

    fn finish_if_complete(&mut self) {
        if matches!(&self.body, Some(b) if b.filled == b.len) {
            if let Some(mut b) = self.body.take() {
                b.buf.truncate(b.len);
                self.ready.push_back(b.buf);
            }
        }
    }

    /// The next complete frame body, if any.
    pub fn pop(&mut self) -> Option<Vec<u8>> {
        self.ready.pop_front()
    }

    /// True when no partial frame is buffered (a clean place for the stream to end).
    pub fn at_boundary(&self) -> bool {
        self.hdr_len == 0 && self.body.is_none()
    }

    /// If the parser is inside a body with at least `n` bytes still missing, returns
    /// room for its next `n + slack` bytes, to be filled in place (saves a copy on bulk
    /// data; the slack lets the cipher work in place). It holds zeros or earlier bytes
    /// of a recycled body ([`Body`]), which the caller overwrites. The caller must then
    /// call [`Self::direct_done`] with `n`: the slack does not count.
    pub(crate) fn direct(&mut self, n: usize, slack: usize) -> Option<&mut [u8]> {
        if self.failed || !self.ready.is_empty() {
            return None;
        }
        match &mut self.body {
            Some(b) if b.len - b.filled >= n => {
                let limit = b.len + slack;
                Some(b.room(n + slack, limit))
            }
            _ => None,
        }
    }

    pub(crate) fn direct_done(&mut self, n: usize) {
        if let Some(b) = &mut self.body {
            debug_assert!(b.len - b.filled >= n);
            b.filled += n;
        }
        self.finish_if_complete();
    }
}

/// Makes room for `extra` more bytes in `buf`, doubling its capacity but never beyond
/// `limit` (the final size of the frame body plus slack), so a body is allocated once
/// for small frames and without a wasteful last doubling for large ones.
fn grow(buf: &mut Vec<u8>, extra: usize, limit: usize) {
    let need = buf.len() + extra;
    if need > buf.capacity() {
        let target = (buf.capacity() * 2).max(need).min(limit.max(need));
        buf.reserve_exact(target - buf.len());
    }
}

/// Encrypts the outgoing plaintext stream into records, batching them in one buffer.
pub(crate) struct Sealer {
    ts: Arc<StatelessTransportState>,
    nonce: u64,
    /// Plaintext of the record being assembled (< MAX_RECORD_PLAINTEXT bytes).
    pending: Vec<u8>,
    /// Ciphertext records ready to be written: `out[..out_len]`.
    out: Vec<u8>,
    out_len: usize,
    max_frame: usize,
}

impl Sealer {
    pub(crate) fn new(ts: Arc<StatelessTransportState>, max_frame: usize) -> Self {
        Sealer {
            ts,
            nonce: 0,
            pending: Vec::with_capacity(MAX_RECORD_PLAINTEXT),
            out: vec![0; OUT_BATCH + MAX_WIRE_RECORD],
            out_len: 0,
            max_frame,
        }
    }

    /// Checks the size and returns the frame header for a body of `len` bytes.
    pub(crate) fn frame_header(&self, len: usize) -> Result<[u8; FRAME_HEADER], ProtoError> {
        if len > self.max_frame || len > u32::MAX as usize {
            return Err(ProtoError::TooLarge {
                size: len as u64,
                max: self.max_frame,
            });
        }
        Ok((len as u32).to_le_bytes())
    }

    /// True if the output batch must be written before more plaintext is pushed.
    pub(crate) fn must_drain(&self) -> bool {
        self.out_len >= OUT_BATCH
    }

    /// The sealed records waiting to be written.
    pub(crate) fn output(&self) -> &[u8] {
        &self.out[..self.out_len]
    }

    pub(crate) fn clear_output(&mut self) {
        self.out_len = 0;
    }

    fn seal(
        ts: &StatelessTransportState,
        nonce: &mut u64,
        pt: &[u8],
        out: &mut [u8],
        out_len: &mut usize,
    ) -> Result<(), ProtoError> {
        debug_assert!(!pt.is_empty() && pt.len() <= MAX_RECORD_PLAINTEXT);
        if *nonce == u64::MAX {
            return Err(ProtoError::Noise("nonce space exhausted".into()));
        }
        let ct_len = pt.len() + TAG_LEN;
        let at = *out_len;
        if at + RECORD_HEADER + ct_len > out.len() {
            return Err(ProtoError::Noise("internal: output batch overflow".into()));
        }
        out[at..at + RECORD_HEADER].copy_from_slice(&(ct_len as u16).to_be_bytes());
        let n = ts
            .write_message(
                *nonce,
                pt,
                &mut out[at + RECORD_HEADER..at + RECORD_HEADER + ct_len],
            )
            .map_err(|e| ProtoError::Noise(e.to_string()))?;
        debug_assert_eq!(n, ct_len);
        *nonce += 1;
        *out_len = at + RECORD_HEADER + ct_len;
        Ok(())
    }

    /// Consumes plaintext from `data` until it is used up or the output batch is full;
    /// returns how many bytes were consumed. Full records are sealed; a partial record
    /// stays pending until more data or [`Self::seal_pending`].
    pub(crate) fn push(&mut self, mut data: &[u8]) -> Result<usize, ProtoError> {
        let total = data.len();
        while !data.is_empty() && !self.must_drain() {
            if self.pending.is_empty() && data.len() >= MAX_RECORD_PLAINTEXT {
                // Bulk path: encrypt straight from the caller's buffer.
                let (rec, rest) = data.split_at(MAX_RECORD_PLAINTEXT);
                Self::seal(
                    &self.ts,
                    &mut self.nonce,
                    rec,
                    &mut self.out,
                    &mut self.out_len,
                )?;
                data = rest;
                continue;
            }
            let n = (MAX_RECORD_PLAINTEXT - self.pending.len()).min(data.len());
            self.pending.extend_from_slice(&data[..n]);
            data = &data[n..];
            if self.pending.len() == MAX_RECORD_PLAINTEXT {
                Self::seal(
                    &self.ts,
                    &mut self.nonce,
                    &self.pending,
                    &mut self.out,
                    &mut self.out_len,
                )?;
                self.pending.clear();
            }
        }
        Ok(total - data.len())
    }

    /// Seals the partial record, if any. There is always room for one more record.
    pub(crate) fn seal_pending(&mut self) -> Result<(), ProtoError> {
        if !self.pending.is_empty() {
            Self::seal(
                &self.ts,
                &mut self.nonce,
                &self.pending,
                &mut self.out,
                &mut self.out_len,
            )?;
            self.pending.clear();
        }
        Ok(())
    }
}

/// Decrypts incoming records and reassembles frames.
pub(crate) struct Opener {
    ts: Arc<StatelessTransportState>,
    nonce: u64,
    inbuf: Vec<u8>,
    start: usize,
    end: usize,
    scratch: Vec<u8>,
    parser: FrameParser,
    pub(crate) peer: String,
}

impl Opener {
    pub(crate) fn new(ts: Arc<StatelessTransportState>, max_frame: usize, peer: String) -> Self {
        Opener {
            ts,
            nonce: 0,
            inbuf: vec![0; IN_BUF],
            start: 0,
            end: 0,
            scratch: vec![0; MAX_RECORD],
            parser: FrameParser::new(max_frame),
            peer,
        }
    }

    /// See [`FrameParser::recycle`].
    pub(crate) fn recycle(&mut self, body: Vec<u8>) {
        self.parser.recycle(body);
    }

    /// See [`FrameParser::spare`].
    pub(crate) fn spare(&mut self, want: usize) -> Vec<u8> {
        self.parser.spare(want)
    }

    /// Space to read ciphertext into; follow with [`Self::filled`]. Never empty.
    pub(crate) fn read_space(&mut self) -> &mut [u8] {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.inbuf.len() - self.end < MAX_WIRE_RECORD {
            // Move the partial record to the front (at most one record is partial).
            self.inbuf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        &mut self.inbuf[self.end..]
    }

    pub(crate) fn filled(&mut self, n: usize) {
        self.end = (self.end + n).min(self.inbuf.len());
    }

    /// True if the stream may end here without losing data.
    pub(crate) fn at_boundary(&self) -> bool {
        self.start == self.end && self.parser.at_boundary()
    }

    /// Describes what an EOF here would cut.
    pub(crate) fn eof_error(&self) -> ProtoError {
        if self.at_boundary() {
            ProtoError::Closed {
                peer: self.peer.clone(),
            }
        } else {
            ProtoError::Truncated {
                peer: self.peer.clone(),
                what: if self.start != self.end {
                    "a record"
                } else {
                    "a frame"
                },
            }
        }
    }

    /// The next complete frame body from what has been read so far, if any.
    pub(crate) fn next_frame(&mut self) -> Result<Option<Vec<u8>>, ProtoError> {
        loop {
            if let Some(f) = self.parser.pop() {
                return Ok(Some(f));
            }
            let avail = self.end - self.start;
            if avail < RECORD_HEADER {
                return Ok(None);
            }
            let hdr = [self.inbuf[self.start], self.inbuf[self.start + 1]];
            let ct_len = u16::from_be_bytes(hdr) as usize;
            if ct_len <= TAG_LEN {
                return Err(ProtoError::BadFrame {
                    peer: self.peer.clone(),
                    reason: format!("record of {ct_len} bytes is too short to carry data"),
                });
            }
            if avail < RECORD_HEADER + ct_len {
                return Ok(None);
            }
            let ct = &self.inbuf[self.start + RECORD_HEADER..self.start + RECORD_HEADER + ct_len];
            let pt_len = ct_len - TAG_LEN;
            let nonce = self.nonce;
            let decrypt_err = |_| ProtoError::Decrypt {
                peer: self.peer.clone(),
                nonce,
            };
            // The cipher decrypts in place when its output buffer can hold the whole
            // ciphertext, hence `TAG_LEN` bytes of slack (and a MAX_RECORD scratch).
            if let Some(dst) = self.parser.direct(pt_len, TAG_LEN) {
                self.ts.read_message(nonce, ct, dst).map_err(decrypt_err)?;
                self.parser.direct_done(pt_len);
            } else {
                self.ts
                    .read_message(nonce, ct, &mut self.scratch[..ct_len])
                    .map_err(decrypt_err)?;
                self.parser
                    .push(&self.scratch[..pt_len])
                    .map_err(|e| match e {
                        ProtoError::TooLarge { size, max } => ProtoError::BadFrame {
                            peer: self.peer.clone(),
                            reason: format!(
                                "frame of {size} bytes exceeds the limit of {max} bytes"
                            ),
                        },
                        e => e,
                    })?;
            }
            self.nonce += 1;
            self.start += RECORD_HEADER + ct_len;
        }
    }
}

/// Entry points for the fuzz targets in `fuzz/` (and helpers for the unit tests).
#[doc(hidden)]
pub mod fuzzing {
    use super::*;
    use crate::key::ClusterKey;
    use crate::session::handshake_state;

    /// A sealer/opener pair keyed by an in-memory handshake.
    pub(crate) fn keyed_pair(max: usize) -> (Sealer, Opener) {
        let key = ClusterKey::from_bytes([7; 32]);
        let c = crate::session::Cipher::ChaChaPoly;
        let mut i = handshake_state(&key, true, c).unwrap();
        let mut r = handshake_state(&key, false, c).unwrap();
        let (mut m, mut p) = ([0u8; 256], [0u8; 256]);
        let n = i.write_message(&[], &mut m).unwrap();
        r.read_message(&m[..n], &mut p).unwrap();
        let n = r.write_message(&[], &mut m).unwrap();
        i.read_message(&m[..n], &mut p).unwrap();
        let ti = crate::session::into_transport(i).unwrap();
        let tr = crate::session::into_transport(r).unwrap();
        (Sealer::new(ti, max), Opener::new(tr, max, "peer".into()))
    }

    /// Feeds `bytes` to the opener in pieces of `step` and collects frames.
    pub(crate) fn feed(
        o: &mut Opener,
        bytes: &[u8],
        step: usize,
    ) -> Result<Vec<Vec<u8>>, ProtoError> {
        let mut out = Vec::new();
        for c in bytes.chunks(step.max(1)) {
            let mut c = c;
            while !c.is_empty() {
                let space = o.read_space();
                let n = space.len().min(c.len());
                space[..n].copy_from_slice(&c[..n]);
                o.filled(n);
                c = &c[n..];
                while let Some(f) = o.next_frame()? {
                    out.push(f);
                }
            }
        }
        Ok(out)
    }

    pub(crate) fn seal_all(s: &mut Sealer, frames: &[&[u8]]) -> Vec<u8> {
        let mut wire = Vec::new();
        for f in frames {
            let hdr = s.frame_header(f.len()).unwrap();
            for mut d in [&hdr[..], f] {
                while !d.is_empty() {
                    if s.must_drain() {
                        wire.extend_from_slice(s.output());
                        s.clear_output();
                    }
                    let n = s.push(d).unwrap();
                    d = &d[n..];
                }
            }
        }
        if s.must_drain() {
            wire.extend_from_slice(s.output());
            s.clear_output();
        }
        s.seal_pending().unwrap();
        wire.extend_from_slice(s.output());
        s.clear_output();
        wire
    }

    /// Feeds fuzzer input to a receiver's record layer. See `fuzz/fuzz_targets/records.rs`.
    pub fn open_records(data: &[u8]) {
        let Some((&mode, rest)) = data.split_first() else {
            return;
        };
        let (mut s, mut o) = keyed_pair(1 << 16);
        let step = 1 + (mode as usize >> 1) * 97;
        if mode & 1 == 1 {
            // Raw bytes as ciphertext stream.
            let _ = feed(&mut o, rest, step);
            let _ = o.eof_error();
            return;
        }
        // Valid records carrying frames cut from the input (first byte of each piece
        // is its length), then damaged according to the last two input bytes.
        let mut frames = Vec::new();
        let mut r = rest;
        while let Some((&n, tail)) = r.split_first() {
            let n = (n as usize).min(tail.len());
            frames.push(&tail[..n]);
            r = &tail[n..];
        }
        let mut wire = seal_all(&mut s, &frames);
        let damage = rest.len() >= 2 && rest[rest.len() - 1] & 0x80 != 0;
        if damage && !wire.is_empty() {
            let at = (rest[rest.len() - 2] as usize * 131) % wire.len();
            if rest[rest.len() - 1] & 0x40 != 0 {
                wire.truncate(at);
            } else {
                wire[at] ^= 0x55;
            }
        }
        match feed(&mut o, &wire, step) {
            Ok(got) if !damage => {
                assert_eq!(got.len(), frames.len());
                for (g, f) in got.iter().zip(&frames) {
                    assert_eq!(&g[..], *f);
                }
                assert!(o.at_boundary());
            }
            _ => {
                let _ = o.eof_error();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fuzzing::{feed, keyed_pair, seal_all};
    use super::*;

    #[test]
    fn sealer_opener_roundtrip() {
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7) as u8).collect();
        let frames: Vec<&[u8]> = vec![b"", b"a", &big[..65515], &big[..65519], &big, b"z"];
        for step in [1usize, 1000, 65537, 1 << 22] {
            let (mut s, mut o) = keyed_pair(1 << 24);
            // Skip byte-by-byte for the big one: too slow; use a small set.
            let set: Vec<&[u8]> = if step == 1 {
                frames[..2].to_vec()
            } else {
                frames.clone()
            };
            let wire = seal_all(&mut s, &set);
            let got = feed(&mut o, &wire, step).unwrap();
            assert_eq!(got.len(), set.len());
            for (g, e) in got.iter().zip(&set) {
                assert!(g[..] == e[..], "step {step}");
            }
            assert!(o.at_boundary());
        }
    }

    /// Bodies recycled with their bytes, received into again in place (the
    /// cipher's direct path) and through the parser's copy: each frame
    /// holds exactly its own bytes, larger or smaller than the body's last.
    #[test]
    fn recycled_bodies_hold_only_the_new_frame_after_decryption() {
        let (mut s, mut o) = keyed_pair(1 << 24);
        let sizes = [
            300 << 10,
            100 << 10,
            700 << 10,
            65 << 10,
            2 << 20,
            128 << 10,
        ];
        let frames: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(k, &n)| {
                (0..n)
                    .map(|i| (i as u32 * 31 + k as u32 * 7) as u8)
                    .collect()
            })
            .collect();
        for step in [65537usize, 1 << 22] {
            for f in &frames {
                let wire = seal_all(&mut s, &[&f[..]]);
                let got = feed(&mut o, &wire, step).unwrap();
                assert_eq!(got.len(), 1);
                assert!(got[0] == *f, "a frame of {} bytes, step {step}", f.len());
                o.recycle(got.into_iter().next().unwrap());
            }
        }
    }

    #[test]
    fn truncated_frame_is_an_error() {
        let (mut s, mut o) = keyed_pair(1 << 20);
        // A frame header announcing 100 bytes followed by only 10.
        let mut pt = 100u32.to_le_bytes().to_vec();
        pt.extend_from_slice(&[1; 10]);
        assert_eq!(s.push(&pt).unwrap(), pt.len());
        s.seal_pending().unwrap();
        let wire = s.output().to_vec();
        assert!(feed(&mut o, &wire, 5).unwrap().is_empty());
        let e = o.eof_error();
        assert!(
            matches!(
                e,
                ProtoError::Truncated {
                    what: "a frame",
                    ..
                }
            ),
            "{e}"
        );
        // A cut record.
        let (mut s, mut o) = keyed_pair(1 << 20);
        let wire = seal_all(&mut s, &[b"hello"]);
        assert!(feed(&mut o, &wire[..wire.len() - 1], 3).unwrap().is_empty());
        let e = o.eof_error();
        assert!(
            matches!(
                e,
                ProtoError::Truncated {
                    what: "a record",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn tampering_and_replay_are_detected() {
        let (mut s, mut o) = keyed_pair(1 << 20);
        let wire = seal_all(&mut s, &[b"first", b"second"]);
        let mut bad = wire.clone();
        bad[5] ^= 1;
        assert!(matches!(
            feed(&mut o, &bad, 64),
            Err(ProtoError::Decrypt { nonce: 0, .. })
        ));
        // Replaying the same records on a fresh stream position fails (nonce mismatch).
        let (mut s, mut o) = keyed_pair(1 << 20);
        let wire = seal_all(&mut s, &[b"first"]);
        assert_eq!(feed(&mut o, &wire, 64).unwrap(), vec![b"first".to_vec()]);
        assert!(matches!(
            feed(&mut o, &wire, 64),
            Err(ProtoError::Decrypt { nonce: 1, .. })
        ));
    }

    #[test]
    fn recycled_body_receives_the_next_large_frame() {
        let frame = |b: &[u8]| {
            let mut f = (b.len() as u32).to_le_bytes().to_vec();
            f.extend_from_slice(b);
            f
        };
        let mut p = FrameParser::new(1 << 20);
        let big = vec![5u8; 100 << 10];
        p.push(&frame(&big)).unwrap();
        let got = p.pop().unwrap();
        assert_eq!(got, big);
        let at = got.as_ptr();
        p.recycle(got);
        // A small frame does not take it.
        p.push(&frame(b"hi")).unwrap();
        let small = p.pop().unwrap();
        assert_eq!(small, b"hi");
        assert_ne!(small.as_ptr(), at);
        // The next large one is received into it, and holds only its own bytes.
        let next = vec![6u8; 90 << 10];
        p.push(&frame(&next)).unwrap();
        let got = p.pop().unwrap();
        assert_eq!(got, next);
        assert_eq!(got.as_ptr(), at, "the recycled body was not reused");
        // Bodies too small to matter are not kept; when full, the smallest
        // spare gives way to a larger body, and a smaller one is dropped.
        p.recycle(vec![1u8; 16]);
        assert!(p.spares.is_empty());
        for _ in 0..SPARES {
            p.recycle(vec![0u8; RECYCLE_MIN]);
        }
        p.recycle(got);
        p.recycle(vec![0u8; RECYCLE_MIN]);
        assert_eq!(p.spares.len(), SPARES);
        assert!(p.spares.iter().any(|v| v.as_ptr() == at));
    }

    #[test]
    fn parser_splits_and_joins() {
        let mut stream = Vec::new();
        let bodies: Vec<Vec<u8>> = vec![vec![], vec![1], (0..=255u8).collect(), vec![7; 70000]];
        for b in &bodies {
            stream.extend_from_slice(&(b.len() as u32).to_le_bytes());
            stream.extend_from_slice(b);
        }
        for step in [1, 3, 4, 5, 4096, stream.len()] {
            let mut p = FrameParser::new(1 << 20);
            for c in stream.chunks(step) {
                p.push(c).unwrap();
            }
            let got: Vec<_> = std::iter::from_fn(|| p.pop()).collect();
            assert_eq!(got, bodies, "step {step}");
            assert!(p.at_boundary());
        }
    }

    #[test]
    fn parser_limits() {
        let mut p = FrameParser::new(10);
        p.push(&10u32.to_le_bytes()).unwrap();
        p.push(&[0; 10]).unwrap();
        assert_eq!(p.pop(), Some(vec![0; 10]));
        assert!(matches!(
            p.push(&11u32.to_le_bytes()),
            Err(ProtoError::TooLarge { size: 11, max: 10 })
        ));
        assert!(p.push(&[0]).is_err());
        let mut p = FrameParser::new(10);
        p.push(&[5, 0]).unwrap();
        assert!(!p.at_boundary());
    }

    #[test]
    fn opener_never_panics_on_garbage() {
        let mut x: u64 = 0x1234_5678_9abc_def1;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let (mut s, _) = keyed_pair(1 << 17);
        let valid = seal_all(&mut s, &[b"abc", &[9u8; 70_000], b""]);
        for round in 0..3000 {
            let (_, mut o) = keyed_pair(1 << 16);
            let mut input = if round % 2 == 0 {
                valid.clone()
            } else {
                (0..(rnd() % 300) as usize).map(|_| rnd() as u8).collect()
            };
            if !input.is_empty() && round % 3 != 0 {
                for _ in 0..1 + rnd() % 3 {
                    let i = (rnd() as usize) % input.len();
                    input[i] ^= rnd() as u8 | 1;
                }
            }
            if round % 5 == 0 {
                let cut = (rnd() as usize) % (input.len() + 1);
                input.truncate(cut);
            }
            let step = 1 + (rnd() % 70_000) as usize;
            let _ = feed(&mut o, &input, step);
            let _ = o.eof_error();
        }
    }
}
