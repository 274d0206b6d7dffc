//! Ours: spillway-s3's streaming multipart uploader ([`ObjectWriter`]) on a monoio runtime
//! (io_uring where the kernel has it), fed `Bytes` chunks sliced from the pre-generated data.

use std::rc::Rc;
use std::time::Instant;

use spillway_s3::client::{ClientConfig, S3Client};
use spillway_s3::credentials::Credentials;
use spillway_s3::endpoint::Endpoint;
use spillway_s3::sign::PayloadMode;
use spillway_s3::upload::{ObjectWriter, UploadConfig};

use super::cpu;
use super::{CHUNK, IN_FLIGHT, Job, PART, Sample};

/// Uploads `job` with ours in `mode`; times and measures the upload alone (the runtime and the
/// client are made before, nothing is sent until the first part is full).
pub fn upload(job: &Job<'_>, mode: PayloadMode) -> Result<Sample, String> {
    let mut rt = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
        .enable_timer()
        .build()
        .map_err(|e| format!("monoio runtime: {e}"))?;
    rt.block_on(async {
        let t = job.target;
        let endpoint =
            Endpoint::parse(&t.endpoint, &t.region, None).map_err(|e| format!("endpoint: {e}"))?;
        let mut cfg = ClientConfig::new(
            endpoint,
            Credentials::new(t.access_key.as_str(), t.secret_key.as_str(), None),
        );
        cfg.payload = mode;
        let client = Rc::new(S3Client::new(cfg).map_err(|e| format!("client: {e}"))?);
        let mut writer = ObjectWriter::new(
            client,
            &t.bucket,
            job.key,
            &UploadConfig::new(PART, IN_FLIGHT),
        )
        .map_err(|e| format!("writer: {e}"))?;

        let cpu_before = cpu::used(job.scope)?;
        let start = Instant::now();
        let mut sent = 0u64;
        while sent < job.total {
            let len = CHUNK.min(job.total - sent);
            let chunk = job.chunk(sent, len)?;
            writer
                .append(chunk)
                .await
                .map_err(|e| format!("append at {sent}: {e}"))?;
            sent += len;
        }
        let info = writer.close().await.map_err(|e| format!("close: {e}"))?;
        let wall = start.elapsed();
        let cpu = cpu::used(job.scope)?.since(cpu_before);
        Ok(Sample {
            wall,
            cpu,
            reported_size: Some(info.size),
        })
    })
}
