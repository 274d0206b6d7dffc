//! Arbitrary bytes as what a broker sends to a client session; see
//! `spillway_codec_fuzz::session` for what is checked.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    spillway_codec_fuzz::session(data);
});
