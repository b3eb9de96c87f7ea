//! Deterministic "fuzzing": many pseudo-random, truncated and mutated buffers fed to the
//! message decoder and the frame parser. Nothing may panic. (The coverage-guided
//! version lives in `fuzz/`.)

use pmig_proto::{code, decode, decode_with_attachment, encode, FrameParser, Hello, Msg};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    /// Between 0 and `max - 1` random bytes.
    fn some_bytes(&mut self, max: usize) -> Vec<u8> {
        let n = self.below(max);
        self.bytes(n)
    }
}

fn samples(r: &mut Rng) -> Vec<Vec<u8>> {
    let msgs = [
        Msg::Hello(Hello {
            proto_version: 1,
            min_version: 1,
            node: "n1".into(),
            features: u64::MAX,
        }),
        Msg::Error {
            code: code::INCOMPATIBLE_VERSION,
            text: "peer n2 speaks protocol version 3".into(),
        },
        Msg::Ping { seq: r.next() },
        Msg::Pong { seq: 0 },
    ];
    msgs.iter().map(|m| encode(m).unwrap()).collect()
}

fn mutate(r: &mut Rng, mut b: Vec<u8>) -> Vec<u8> {
    for _ in 0..1 + r.below(4) {
        match r.below(6) {
            0 if !b.is_empty() => {
                let i = r.below(b.len());
                b[i] ^= 1 << r.below(8);
            }
            1 if !b.is_empty() => {
                let i = r.below(b.len());
                b[i] = r.next() as u8;
            }
            2 => {
                let cut = r.below(b.len() + 1);
                b.truncate(cut);
            }
            3 => {
                let i = r.below(b.len() + 1);
                let extra = {
                    let n = 1 + r.below(8);
                    r.bytes(n)
                };
                b.splice(i..i, extra);
            }
            4 if !b.is_empty() => {
                // Large varint where a length is expected.
                let i = r.below(b.len());
                b.splice(i..i, [0xff, 0xff, 0xff, 0xff, 0x0f]);
            }
            _ => b.extend(r.some_bytes(16)),
        }
    }
    b
}

#[test]
fn decoder_never_panics() {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    let base = samples(&mut r);
    let mut ok = 0;
    for i in 0..200_000 {
        let input = match i % 4 {
            0 => r.some_bytes(64),
            1 => {
                let b = base[r.below(base.len())].clone();
                let cut = r.below(b.len() + 1);
                b[..cut].to_vec()
            }
            _ => {
                let b = base[r.below(base.len())].clone();
                mutate(&mut r, b)
            }
        };
        if let Ok(m) = decode(&input) {
            ok += 1;
            // Whatever decodes must re-encode to the same bytes (canonical encoding)
            // or at least decode again to the same message.
            assert_eq!(decode(&encode(&m).unwrap()).unwrap(), m);
        }
        let _ = decode_with_attachment(&input);
    }
    println!("{ok} of 200000 inputs decoded to valid messages");
}

#[test]
fn frame_parser_never_panics() {
    let mut r = Rng(42);
    for round in 0..2_000 {
        let max = [0usize, 1, 100, 70_000][round % 4];
        let mut p = FrameParser::new(max);
        // A mix of valid frames and garbage, split at random points.
        let mut stream = Vec::new();
        for _ in 0..r.below(20) {
            if r.below(3) == 0 {
                stream.extend(r.some_bytes(100));
            } else {
                let len = r.below(max.saturating_add(10).min(2000));
                stream.extend_from_slice(&(len as u32).to_le_bytes());
                stream.extend(r.bytes(len));
            }
        }
        if r.below(2) == 0 {
            let cut = r.below(stream.len() + 1);
            stream.truncate(cut);
        }
        let mut rest = &stream[..];
        while !rest.is_empty() {
            let n = 1 + r.below(rest.len().min(5000));
            let res = p.push(&rest[..n]);
            rest = &rest[n..];
            while let Some(f) = p.pop() {
                assert!(f.len() <= max);
                let _ = decode(&f);
            }
            if res.is_err() {
                assert!(p.push(b"x").is_err(), "parser must stay failed");
                break;
            }
        }
        let _ = p.at_boundary();
    }
}

#[test]
fn huge_length_claims_do_not_allocate() {
    // A frame header claiming 4 GiB with a limit of 3 GiB must fail without allocating,
    // and a claim within the limit must only allocate as data arrives.
    let mut p = FrameParser::new(3 << 30);
    assert!(p.push(&u32::MAX.to_le_bytes()).is_err());
    let mut p = FrameParser::new(3 << 30);
    p.push(&(3u32 << 30).to_le_bytes()).unwrap();
    p.push(&[0; 10]).unwrap();
    assert!(p.pop().is_none());
}

/// `PageDeltas` records (version 18): valid ones built from pages changed at
/// random, then cut and mutated, are parsed and applied to the page they
/// were made against. Nothing panics; an intact record gives the new page;
/// and whatever a mutated record is let through gives a page whose hash is
/// the record's (it is refused otherwise).
#[test]
fn page_delta_records_never_panic() {
    use pmig_proto::page_delta::{push_record, records, PAGE};
    let mut r = Rng(0x5eed_0018);
    let (mut intact, mut let_through) = (0, 0);
    for i in 0..20_000 {
        let old = r.bytes(PAGE);
        let mut new = old.clone();
        for _ in 0..r.below(40) {
            let at = r.below(PAGE);
            new[at] = r.next() as u8;
        }
        let mut rec = Vec::new();
        if !push_record(&mut rec, (r.next() & !0xfff) >> 12 << 12, &old, &new, 2048) {
            continue;
        }
        let input = if i % 3 == 0 { rec } else { mutate(&mut r, rec) };
        let Ok(recs) = records(&input) else { continue };
        for rc in recs {
            let mut page = old.clone();
            if rc.apply(&mut page).is_ok() {
                assert_eq!(xxhash_rust::xxh3::xxh3_64(&page), rc.hash);
                if page == new {
                    intact += 1;
                } else {
                    let_through += 1;
                }
            }
        }
    }
    assert!(intact > 6_000, "only {intact} intact records applied");
    println!("{intact} intact, {let_through} mutated records applied");
}
