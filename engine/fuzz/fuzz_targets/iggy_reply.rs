//! Arbitrary bytes as what an Iggy server sends (raw frames, or checksum-valid poll replies
//! built from the input and then perhaps corrupted); see `spillway_engine_fuzz::iggy_reply`
//! for what is checked.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    spillway_engine_fuzz::iggy_reply(data);
});
