//! The encrypted record layer as a receiver sees it after the handshake: arbitrary
//! bytes (mostly failing authentication) and, when the input starts with 0x00, valid
//! records built from the input's frames, then truncated/mutated by the input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    pmig_proto::frame::fuzzing::open_records(data);
});
