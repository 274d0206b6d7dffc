//! Arbitrary bytes as the body of S3 responses (the first byte chooses statuses, headers and a
//! cut); see `spillway_s3_fuzz::xml` for what is checked.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    spillway_s3_fuzz::xml(data);
});
