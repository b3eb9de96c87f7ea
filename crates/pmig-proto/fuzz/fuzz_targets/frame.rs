//! The plaintext frame parser: arbitrary bytes, split at arbitrary points, with a
//! limit chosen by the input. Must never panic nor return a frame above the limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pmig_proto::FrameParser;

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let max = u16::from_le_bytes([data[0], data[1]]) as usize;
    let step = 1 + data[2] as usize;
    let mut p = FrameParser::new(max);
    for chunk in data[3..].chunks(step) {
        let r = p.push(chunk);
        while let Some(f) = p.pop() {
            assert!(f.len() <= max);
            let _ = pmig_proto::decode(&f);
        }
        if r.is_err() {
            assert!(p.push(b"x").is_err());
            return;
        }
    }
    let _ = p.at_boundary();
});
