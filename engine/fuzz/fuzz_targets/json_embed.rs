//! Arbitrary bytes as a message payload written into the JSON records of the sinks; see
//! `spillway_engine_fuzz::json_embed` for what is checked.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    spillway_engine_fuzz::json_embed(data);
});
