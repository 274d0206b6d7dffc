//! Arbitrary bytes as a stream of MQTT packets on a connection of this protocol version; see
//! `spillway_codec_fuzz::decode_stream` for what is checked.

#![no_main]

use libfuzzer_sys::fuzz_target;
use spillway_codec::Protocol;

fuzz_target!(|data: &[u8]| {
    spillway_codec_fuzz::decode_stream(data, Protocol::V5);
});
