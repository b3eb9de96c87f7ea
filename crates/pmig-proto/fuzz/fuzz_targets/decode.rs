//! The message decoder must never panic, and whatever it accepts must re-encode to a
//! message that decodes to the same value. A `PageDeltas`' records must parse or be
//! refused, and apply or be refused, without a panic; so must a `PageLz4`'s or `ImageLz4`'s block
//! decompress or be refused.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pmig_proto::{decode, decode_with_attachment, encode};

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = decode(data) {
        let again = encode(&m).expect("a decoded message must encode");
        assert_eq!(decode(&again).expect("re-encoded message must decode"), m);
    }
    if let Ok((m, rest)) = decode_with_attachment(data) {
        assert!(rest.len() < data.len());
        let _ = m.kind();
        // A page delta's records, applied to a page of zeros.
        if let (pmig_proto::Msg::PageDeltas { .. }, Ok(records)) =
            (&m, pmig_proto::page_delta::records(rest))
        {
            let mut page = [0u8; pmig_proto::page_delta::PAGE];
            for r in records {
                let _ = r.apply(&mut page);
            }
        }
        let mut out = Vec::new();
        match m {
            pmig_proto::Msg::PageLz4 { pages, .. } => {
                if pmig_proto::compress::unpack(rest, pages, &mut out).is_ok() {
                    assert_eq!(out.len(), pages as usize * 4096);
                }
            }
            pmig_proto::Msg::ImageLz4 { len, .. } => {
                if pmig_proto::compress::unpack_image(rest, len, &mut out).is_ok() {
                    assert_eq!(out.len(), len as usize);
                }
            }
            _ => {}
        }
    }
});
