//! The peers, each on a tokio current-thread runtime (so that everything the client does runs
//! on the calling thread, and `RUSAGE_THREAD` sees all of it):
//!
//! - aws-sdk-s3 (default features off; static credentials; hyper client from
//!   aws-smithy-http-client): CreateMultipartUpload, UploadPart of 8 MiB parts with
//!   [`IN_FLIGHT`] parts under way (tokio tasks), CompleteMultipartUpload. Its defaults
//!   otherwise: SHA-256 payload signing (or `disable_payload_signing()` on every part for the
//!   unsigned rows) and a CRC32 checksum on every part (`RequestChecksumCalculation::
//!   WhenSupported`).
//! - rust-s3 0.38 (the client of Apache Iggy's S3 sink): `Bucket::put_object` with the whole
//!   object in one signed PUT, as that sink calls it; and `put_object_stream` (its multipart
//!   upload, 8 MiB parts, [`IN_FLIGHT`] at once) for the like-for-like row.

use std::time::Instant;

use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_s3::error::DisplayErrorContext;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};

use super::cpu;
use super::{IN_FLIGHT, Job, PART, Sample, Target};

/// The peers are compiled in.
pub const AVAILABLE: bool = true;

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))
}

fn aws_client(t: &Target) -> aws_sdk_s3::Client {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    let config = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(&t.endpoint)
        .region(Region::new(t.region.clone()))
        .credentials_provider(Credentials::new(
            &t.access_key,
            &t.secret_key,
            None,
            None,
            "spillway-bench",
        ))
        .force_path_style(true)
        .http_client(http)
        .build();
    aws_sdk_s3::Client::from_conf(config)
}

/// aws-sdk-s3 multipart upload; `signed` false disables payload signing on the parts.
pub fn aws(job: &Job<'_>, signed: bool) -> Result<Sample, String> {
    let rt = runtime()?;
    let client = aws_client(job.target);
    let bucket = job.target.bucket.clone();
    let key = job.key.to_owned();
    let parts = job.total.div_ceil(PART);
    let bodies = (0..parts)
        .map(|i| {
            let offset = i * PART;
            job.chunk(offset, PART.min(job.total - offset))
        })
        .collect::<Result<Vec<_>, String>>()?;
    rt.block_on(async move {
        let cpu_before = cpu::used(job.scope)?;
        let start = Instant::now();
        let created = client
            .create_multipart_upload()
            .bucket(&bucket)
            .key(&key)
            .send()
            .await
            .map_err(|e| format!("CreateMultipartUpload: {}", DisplayErrorContext(&e)))?;
        let upload_id = created
            .upload_id()
            .ok_or("CreateMultipartUpload: no upload id")?
            .to_owned();
        let mut tasks = tokio::task::JoinSet::new();
        let mut done: Vec<CompletedPart> = Vec::with_capacity(bodies.len());
        for (number, body) in (1i32..).zip(bodies) {
            while tasks.len() >= IN_FLIGHT {
                done.push(joined(tasks.join_next().await)?);
            }
            let request = client
                .upload_part()
                .bucket(&bucket)
                .key(&key)
                .upload_id(&upload_id)
                .part_number(number)
                .body(ByteStream::from(body));
            tasks.spawn(async move {
                let sent = if signed {
                    request.send().await
                } else {
                    request.customize().disable_payload_signing().send().await
                };
                let out =
                    sent.map_err(|e| format!("UploadPart {number}: {}", DisplayErrorContext(&e)))?;
                let etag = out
                    .e_tag()
                    .ok_or_else(|| format!("UploadPart {number}: no ETag"))?;
                Ok::<_, String>(
                    CompletedPart::builder()
                        .part_number(number)
                        .e_tag(etag)
                        .build(),
                )
            });
        }
        while let Some(r) = tasks.join_next().await {
            done.push(joined(Some(r))?);
        }
        done.sort_by_key(|p| p.part_number());
        client
            .complete_multipart_upload()
            .bucket(&bucket)
            .key(&key)
            .upload_id(&upload_id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(done))
                    .build(),
            )
            .send()
            .await
            .map_err(|e| format!("CompleteMultipartUpload: {}", DisplayErrorContext(&e)))?;
        let wall = start.elapsed();
        let cpu = cpu::used(job.scope)?.since(cpu_before);
        Ok(Sample {
            wall,
            cpu,
            reported_size: None,
        })
    })
}

type Joined = Option<Result<Result<CompletedPart, String>, tokio::task::JoinError>>;

fn joined(r: Joined) -> Result<CompletedPart, String> {
    match r {
        Some(Ok(part)) => part,
        Some(Err(e)) => Err(format!("UploadPart task: {e}")),
        None => Err("UploadPart: no task to wait for".to_owned()),
    }
}

pub(crate) fn rust_s3_bucket(t: &Target) -> Result<Box<s3::Bucket>, String> {
    let credentials =
        s3::creds::Credentials::new(Some(&t.access_key), Some(&t.secret_key), None, None, None)
            .map_err(|e| format!("rust-s3 credentials: {e}"))?;
    let region = s3::Region::Custom {
        region: t.region.clone(),
        endpoint: t.endpoint.clone(),
    };
    let mut bucket = s3::Bucket::new(&t.bucket, region, credentials)
        .map_err(|e| format!("rust-s3 bucket: {e}"))?;
    bucket.set_path_style();
    Ok(bucket)
}

/// The whole object as one slice of the data (rust-s3 takes `&[u8]` or a reader).
fn whole<'a>(job: &'a Job<'_>) -> Result<&'a [u8], String> {
    usize::try_from(job.total)
        .ok()
        .and_then(|n| job.data.get(..n))
        .ok_or_else(|| format!("{} bytes is more than the data buffer", job.total))
}

/// rust-s3 `put_object` with the whole object, as Iggy's S3 sink uploads a file.
pub fn rust_s3_put(job: &Job<'_>) -> Result<Sample, String> {
    let rt = runtime()?;
    let bucket = rust_s3_bucket(job.target)?;
    let body = whole(job)?;
    rt.block_on(async {
        let cpu_before = cpu::used(job.scope)?;
        let start = Instant::now();
        let response = bucket
            .put_object(job.key, body)
            .await
            .map_err(|e| format!("rust-s3 put_object: {e}"))?;
        let wall = start.elapsed();
        let cpu = cpu::used(job.scope)?.since(cpu_before);
        let status = response.status_code();
        if !(200..300).contains(&status) {
            return Err(format!("rust-s3 put_object: HTTP {status}"));
        }
        Ok(Sample {
            wall,
            cpu,
            reported_size: None,
        })
    })
}

/// rust-s3 `put_object_stream` (multipart, 8 MiB parts) from a reader over the object.
pub fn rust_s3_stream(job: &Job<'_>) -> Result<Sample, String> {
    let rt = runtime()?;
    let bucket = rust_s3_bucket(job.target)?;
    let mut reader = whole(job)?;
    rt.block_on(async {
        let cpu_before = cpu::used(job.scope)?;
        let start = Instant::now();
        let response = bucket
            .put_object_stream_builder(job.key)
            .with_max_concurrent_chunks(IN_FLIGHT)
            .execute_stream(&mut reader)
            .await
            .map_err(|e| format!("rust-s3 put_object_stream: {e}"))?;
        let wall = start.elapsed();
        let cpu = cpu::used(job.scope)?.since(cpu_before);
        let status = response.status_code();
        if !(200..300).contains(&status) {
            return Err(format!("rust-s3 put_object_stream: HTTP {status}"));
        }
        Ok(Sample {
            wall,
            cpu,
            reported_size: u64::try_from(response.uploaded_bytes()).ok(),
        })
    })
}
