//! Ours: the Spillway engine in-process (`spillway::control::run_until`, as `spillway-bench
//! engine` runs it) on one shard, reading the stand-in's topic with a fresh consumer and
//! writing json_lines objects through the S3 sink to s3s-fs.
//!
//! Timed from the engine's start (its threads, the HeadBucket probe, the Iggy login are inside
//! the clock) until Iggy holds the last offset of every partition, i.e. until every object is
//! complete and its offsets are stored. The last object of each partition is smaller than
//! `max_object_size`; rather than wait `idle_flush` for it, the bench asks the engine to drain
//! (what SIGTERM does: open objects are closed at once) as soon as the engine's metrics show
//! every message polled. Those metrics come from the shard every 250 ms, so the tail of a run
//! holds up to about a quarter of a second of waiting, counted against ours.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use spillway::config;
use spillway::coremap::{self, Machine};
use spillway_tests::{IggyServer, S3Server, TestConsumer};

use super::Measure;
use super::data::Codec;
use super::threads::ThreadMeter;
use crate::metrics::{counter, scrape};
use crate::mqtt::cpu::ProcessCpu;

/// One run of ours.
#[derive(Debug)]
pub struct Job<'a> {
    pub iggy: &'a IggyServer,
    pub stream: &'a str,
    pub topic: &'a str,
    pub partitions: u32,
    pub per_partition: u64,
    pub s3: &'a S3Server,
    /// The sink's name: its Iggy consumer (fresh per run) and its key prefix.
    pub name: &'a str,
    pub codec: Codec,
    /// How bodies are protected on the wire.
    pub integrity: Integrity,
    /// The shard's core.
    pub core: usize,
    /// Objects of one part (`max_object_size = part_size`): each one PutObject.
    pub single: bool,
    /// `s3.format`: `json_lines`, `raw` (each payload and a line break), `parquet`.
    pub format: &'static str,
    /// More `[sink.s3]` lines (and tables after them): the Parquet writer's settings, an
    /// Iceberg table.
    pub extra: String,
}

/// The wire integrity modes of the S3 sink, each measured for its CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Integrity {
    /// The default: `x-amz-checksum-crc32c` on every body.
    Crc32c,
    /// No checksum (`checksum = "none"`), UNSIGNED-PAYLOAD.
    Nothing,
    /// CRC32C and `Content-MD5`.
    Md5,
    /// CRC32C and a signed payload (SHA-256 of every body).
    Signed,
}

impl Integrity {
    pub fn name(self) -> &'static str {
        match self {
            Integrity::Crc32c => "crc32c",
            Integrity::Nothing => "no checksum",
            Integrity::Md5 => "crc32c+content_md5",
            Integrity::Signed => "crc32c+signed_payload",
        }
    }

    pub fn tag(self) -> &'static str {
        match self {
            Integrity::Crc32c => "crc32c",
            Integrity::Nothing => "nosum",
            Integrity::Md5 => "md5",
            Integrity::Signed => "signed",
        }
    }

    fn config(self) -> &'static str {
        match self {
            Integrity::Crc32c => "checksum = \"crc32c\"",
            Integrity::Nothing => "checksum = \"none\"",
            Integrity::Md5 => "content_md5 = true",
            Integrity::Signed => "signed_payload = true",
        }
    }
}

/// `request_attempts` of the sink (default 1 here; the engine's default is 8). At start the
/// sink lists the multipart uploads an earlier run left open; s3s-fs answers
/// ListMultipartUploads with 501 NotImplemented, which the client counts as retryable (any
/// 5xx), so with 8 attempts every run would first sit through about 8 s of backoff before
/// polling anything. With 1 attempt that costs one round trip; a healthy run against s3s-fs on
/// loopback needs no retry (a failed object would still be written again by the sink).
pub const ATTEMPTS_ENV: &str = "SPILLWAY_BENCH_S3_SINK_ATTEMPTS";

/// `compression_level` for the compressed rows (unset: the sink's default), to compare levels.
pub const LEVEL_ENV: &str = "SPILLWAY_BENCH_S3_SINK_LEVEL";

/// The sink's settings, as the issue gives them.
pub const MAX_OBJECT: &str = "64MiB";

/// Overrides `max_object_size` of ours (e.g. `8MiB`), to compare object sizes.
pub const MAX_OBJECT_ENV: &str = "SPILLWAY_BENCH_S3_SINK_MAX_OBJECT";
pub const PART: &str = "8MiB";
pub const PARTS_IN_FLIGHT: u32 = 2;

fn config_text(job: &Job<'_>, metrics: SocketAddr) -> String {
    format!(
        r#"
[iggy]
address = "{iggy}"
username = "{user}"
password = "{password}"

[runtime]
cores = [{core}]
shutdown_timeout = "120s"

[metrics]
address = "{metrics}"
log_interval = "0s"

[[sink]]
name = "{name}"
type = "s3"
stream = "{stream}"
topic = "{topic}"
partitions = [{partitions}]
batch_size = 1000
commit_interval = "20ms"

[sink.s3]
bucket = "{bucket}"
endpoint = "{endpoint}"
region = "{region}"
access_key_id = "{ak}"
secret_access_key = "{sk}"
prefix = "{name}/"
format = "{format}"
compression = "{codec}"
max_object_size = "{max_object}"
part_size = "{PART}"
parts_in_flight = {PARTS_IN_FLIGHT}
idle_flush = "1s"
request_attempts = {attempts}
{integrity}
{level}
{extra}
"#,
        iggy = job.iggy.addr(),
        user = job.iggy.username(),
        password = job.iggy.password(),
        core = job.core,
        name = job.name,
        stream = job.stream,
        topic = job.topic,
        partitions = (0..job.partitions)
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        bucket = job.s3.bucket(),
        endpoint = job.s3.endpoint(),
        region = job.s3.region(),
        ak = job.s3.access_key(),
        sk = job.s3.secret_key(),
        codec = job.codec.name(),
        max_object = if job.single {
            PART.to_owned()
        } else {
            std::env::var(MAX_OBJECT_ENV)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .unwrap_or_else(|| MAX_OBJECT.to_owned())
        },
        format = job.format,
        extra = job.extra.as_str(),
        integrity = job.integrity.config(),
        level = match std::env::var(LEVEL_ENV) {
            Ok(l) if job.codec != Codec::None && !l.trim().is_empty() => {
                format!("compression_level = {}", l.trim())
            }
            _ => String::new(),
        },
        attempts = std::env::var(ATTEMPTS_ENV)
            .ok()
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(1),
    )
}

/// Runs the engine until Iggy holds the last offset of every partition for `job.name`.
pub fn run(job: &Job<'_>) -> Result<Measure, String> {
    let port = spillway_tests::ports::free_loopback_port().map_err(|e| e.to_string())?;
    let metrics = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let text = config_text(job, metrics);
    let cfg = config::parse(&text, std::path::Path::new("<bench>"), &|_| None)
        .map_err(|e| format!("the engine refused the config: {e}\n{text}"))?;
    let map = coremap::resolve(&cfg, &Machine::detect()).map_err(|(k, m)| format!("{k}: {m}"))?;
    let consumer = TestConsumer::Named(job.name.to_owned());
    // Opened before the meter starts: its stand-in connection thread counts as the bench's.
    let mut watcher = job.iggy.admin().map_err(|e| e.to_string())?;
    let last = job.per_partition - 1;
    let total = job.per_partition * u64::from(job.partitions);
    let server = job.s3.pid().map(ProcessCpu::of);

    let stop = Arc::new(AtomicUsize::new(0));
    let stop2 = Arc::clone(&stop);
    let rss_start = rss::reset_peak();
    let mut meter = ThreadMeter::start(&[]);
    let server_before = server.as_ref().and_then(ProcessCpu::read);
    let start = Instant::now();
    let engine = std::thread::Builder::new()
        .name("spillway-control".into())
        .spawn(move || spillway::control::run_until_end(cfg, map, stop2))
        .map_err(|e| format!("spawning the engine: {e}"))?;
    let deadline = start + Duration::from_secs(600);
    let mut drained = false;
    let mut next_scrape = start;
    let mut next_check = start;
    let mut stored_all = false;
    loop {
        meter.sample();
        if engine.is_finished() {
            break;
        }
        let now = Instant::now();
        if !drained && now >= next_scrape {
            next_scrape = now + Duration::from_millis(20);
            if scrape(metrics)
                .is_some_and(|b| counter(&b, "spillway_messages_in_total", job.name) >= total)
            {
                stop.store(1, Ordering::SeqCst);
                drained = true;
            }
        }
        if now >= next_check {
            next_check = now + Duration::from_millis(10);
            let mut all = true;
            for p in 0..job.partitions {
                let s = watcher
                    .stored_offset(&consumer, job.stream, job.topic, p)
                    .map_err(|e| e.to_string())?;
                if s != Some(last) {
                    all = false;
                    break;
                }
            }
            if all {
                stored_all = true;
                break;
            }
        }
        if now > deadline {
            stop.store(2, Ordering::SeqCst);
            return Err(format!(
                "{}: not every offset stored within 10 minutes",
                job.name
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let wall = start.elapsed();
    let split = meter.finish();
    let server_after = server.as_ref().and_then(ProcessCpu::read);

    // Let the engine finish (it drains, or already has).
    stop.store(1, Ordering::SeqCst);
    let give_up = Instant::now() + Duration::from_secs(150);
    while !engine.is_finished() && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(10));
    }
    if !engine.is_finished() {
        stop.store(2, Ordering::SeqCst);
    }
    let end = engine
        .join()
        .map_err(|_| "the engine thread panicked".to_owned())?;
    let rss_growth = rss_start.zip(rss::peak()).map(|(s, p)| p.saturating_sub(s));
    let status = end.status;
    if status != 0 {
        return Err(format!(
            "{}: the engine exited with status {status}",
            job.name
        ));
    }
    if !stored_all {
        for p in 0..job.partitions {
            let s = watcher
                .stored_offset(&consumer, job.stream, job.topic, p)
                .map_err(|e| e.to_string())?;
            if s != Some(last) {
                return Err(format!(
                    "{}: the engine exited with partition {p} stored at {s:?}, not {last}",
                    job.name
                ));
            }
        }
    }
    let counters = end
        .sinks
        .iter()
        .find(|(name, _)| name == job.name)
        .map(|(_, c)| c);
    let requests = counters.map(|c| c.sink_requests);
    let table = counters
        .filter(|c| c.sink_table_commits > 0)
        .map(|c| (c.sink_table_commits, c.sink_table_files));
    Ok(Measure {
        wall,
        split,
        server_cpu: server_before
            .zip(server_after)
            .map(|(b, a)| a.saturating_sub(b)),
        requests,
        rss_growth,
        table,
    })
}

/// The bench process's resident memory, for the engine's share of it: the engine runs
/// in-process, so its peak is the process's peak over the run less what the process held at
/// the start (the bench keeps the peer's bytes and its own state resident meanwhile).
mod rss {
    /// Resets the process's peak RSS to its current RSS (`/proc/self/clear_refs`, "5") and
    /// returns that, in bytes; `None` where the kernel does not offer it.
    pub fn reset_peak() -> Option<u64> {
        std::fs::write("/proc/self/clear_refs", "5").ok()?;
        field("VmRSS:")
    }

    /// The peak RSS since the reset, in bytes.
    pub fn peak() -> Option<u64> {
        field("VmHWM:")
    }

    fn field(name: &str) -> Option<u64> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kib * 1024)
    }
}
