//! The store's limit for this load: spillway-s3's [`ObjectWriter`] alone (no Iggy, no
//! encoding) uploading the same json_lines bytes the sink produced, in the same pattern: one
//! writer per partition (4 at once), objects of 64 MiB, 8 MiB parts, 2 in flight, on one
//! monoio thread, fed 1 MiB `Bytes` slices of the data.

use std::rc::Rc;

use bytes::Bytes;
use spillway_s3::client::{ClientConfig, S3Client};
use spillway_s3::credentials::Credentials;
use spillway_s3::endpoint::Endpoint;
use spillway_s3::upload::{ObjectWriter, UploadConfig};
use spillway_tests::S3Server;

use super::{MIB, Measure, timed};

const OBJECT: u64 = 64 * MIB;
const PART: u64 = 8 * MIB;
const IN_FLIGHT: usize = 2;
const CHUNK: u64 = MIB;

/// Uploads `data` as `writers` streams of 64 MiB objects under `prefix`.
pub fn run(s3: &S3Server, data: &Bytes, writers: usize, prefix: &str) -> Result<Measure, String> {
    let len = data.len() as u64;
    let share = len.div_ceil(writers as u64);
    let ranges: Vec<(u64, u64)> = (0..writers as u64)
        .map(|w| (w * share, ((w + 1) * share).min(len)))
        .filter(|(a, b)| a < b)
        .collect();
    let endpoint = s3.endpoint();
    let region = s3.region().to_owned();
    let (ak, sk) = (s3.access_key().to_owned(), s3.secret_key().to_owned());
    let bucket = s3.bucket().to_owned();
    let prefix = prefix.to_owned();
    let (measure, ()) = timed(
        "bench-uploader",
        s3,
        move || {
            let rt = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
                .enable_timer()
                .build()
                .map_err(|e| format!("monoio runtime: {e}"))?;
            let endpoint =
                Endpoint::parse(&endpoint, &region, None).map_err(|e| format!("endpoint: {e}"))?;
            let client = S3Client::new(ClientConfig::new(
                endpoint,
                Credentials::new(ak.as_str(), sk.as_str(), None),
            ))
            .map_err(|e| format!("client: {e}"))?;
            Ok((rt, Rc::new(client)))
        },
        move |(mut rt, client)| {
            let bucket: Rc<str> = Rc::from(bucket.as_str());
            rt.block_on(async move {
                let mut tasks = Vec::new();
                for (w, (from, to)) in ranges.into_iter().enumerate() {
                    let client = Rc::clone(&client);
                    let bucket = Rc::clone(&bucket);
                    let data = data.clone();
                    let prefix = prefix.clone();
                    tasks.push(monoio::spawn(async move {
                        let cfg = UploadConfig::new(PART, IN_FLIGHT);
                        let mut at = from;
                        let mut n = 0;
                        while at < to {
                            let end = (at + OBJECT).min(to);
                            let key = format!("{prefix}{w}/{n:06}.jsonl");
                            let mut writer =
                                ObjectWriter::new(Rc::clone(&client), &bucket, &key, &cfg)
                                    .map_err(|e| format!("{key}: {e}"))?;
                            while at < end {
                                let next = (at + CHUNK).min(end);
                                writer
                                    .append(data.slice(at as usize..next as usize))
                                    .await
                                    .map_err(|e| format!("{key}: {e}"))?;
                                at = next;
                            }
                            writer.close().await.map_err(|e| format!("{key}: {e}"))?;
                            n += 1;
                        }
                        Ok::<(), String>(())
                    }));
                }
                for t in tasks {
                    t.await?;
                }
                Ok(())
            })
        },
    )?;
    Ok(measure)
}
