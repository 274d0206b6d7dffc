//! Arbitrary bytes as what an S3 server answers (the first four choose the request method,
//! the limits, an EOF and a split point); see `spillway_s3_fuzz::http_response` for what is
//! checked.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    spillway_s3_fuzz::http_response(data);
});
