//! The peer: rust-s3 0.38 (the client of Apache Iggy's S3 sink) uploading the json_lines bytes
//! the sink produced as one 8 MiB object after another with `Bucket::put_object` (one signed
//! PUT each, the next only once the previous is answered): what Iggy's S3 sink does with each
//! file it has buffered. It runs on a tokio current-thread runtime on its own thread, set up
//! (runtime, bucket handle) before the clock starts. The records are encoded once, by ours,
//! before any peer run, so the peer's figures hold no encoding at all.

use spillway_tests::S3Server;

use super::{MIB, Measure, timed};
use crate::s3::Target;
use crate::s3::peers::rust_s3_bucket;

/// The size of each file the peer uploads.
pub const FILE: usize = 8 * MIB as usize;

pub const AVAILABLE: bool = true;

/// Uploads `data` in [`FILE`]-sized objects under `prefix`, one at a time.
pub fn run(s3: &S3Server, data: &[u8], prefix: &str) -> Result<Measure, String> {
    let target = Target {
        endpoint: s3.endpoint(),
        region: s3.region().to_owned(),
        access_key: s3.access_key().to_owned(),
        secret_key: s3.secret_key().to_owned(),
        bucket: s3.bucket().to_owned(),
    };
    let prefix = prefix.to_owned();
    let (measure, ()) = timed(
        "bench-rust-s3",
        s3,
        move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("tokio runtime: {e}"))?;
            let bucket = rust_s3_bucket(&target)?;
            Ok((rt, bucket))
        },
        move |(rt, bucket)| {
            rt.block_on(async move {
                for (n, file) in data.chunks(FILE).enumerate() {
                    let key = format!("{prefix}{n:06}.jsonl");
                    let response = bucket
                        .put_object(&key, file)
                        .await
                        .map_err(|e| format!("rust-s3 put_object {key}: {e}"))?;
                    let status = response.status_code();
                    if !(200..300).contains(&status) {
                        return Err(format!("rust-s3 put_object {key}: HTTP {status}"));
                    }
                }
                Ok(())
            })
        },
    )?;
    Ok(measure)
}
