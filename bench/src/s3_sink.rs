//! `spillway-bench s3-sink`: the S3 sink end to end. The Iggy stand-in (in this process; or
//! the real server named by `SPILLWAY_TEST_IGGY`) holds a topic of 4 partitions filled
//! beforehand with 1 KiB JSON messages; the engine (in-process, one shard) reads it with a
//! fresh consumer per run and writes json_lines objects of 64 MiB in 8 MiB parts (2 in flight
//! per partition) to an s3s-fs the bench starts, uncompressed, gzip and zstd ([`ours`]); and
//! the same on realistic rows ([`orders`], a second topic of as many messages).
//!
//! Beside it, in the same run and to the same s3s-fs, the same json_lines bytes (those ours
//! wrote in its first uncompressed run, read back from s3s-fs) are uploaded
//!
//! - by the peer, rust-s3 0.38, as 8 MiB objects with one PutObject after another, which is
//!   how Apache Iggy's S3 sink uploads ([`peer`]; behind the `peers` feature);
//! - by spillway-s3's uploader alone, in the sink's pattern (4 streams of 64 MiB objects,
//!   8 MiB parts, 2 in flight), to show what the store takes at most ([`uploader`]).
//!
//! Figures, each the median of the runs (3; 1 with `--quick`, which also moves 16x less data):
//!
//! - **MB/s of payload**: the messages' payload bytes (1 KiB each) over the wall time; for
//!   ours from the engine's start until Iggy holds the last offset of every partition, for the
//!   others from the first request to the last answer. Also **object MB/s**: bytes stored.
//! - **CPU s per GiB of payload**: the CPU time (user + system) of the client's threads per
//!   GiB of payload: for ours the engine's threads (control, shard, any io_uring worker), not
//!   the stand-in's (see [`threads`] for how they are told apart); for the others the thread
//!   they run on. All rows divide by the same payload GiB, so they compare directly.
//! - **s3s-fs CPU**: the server's CPU time over the run's wall time, in % of one core (it is
//!   multi-threaded; this machine's cores are shared by all the parts), and the stand-in's.
//!
//! Every run is checked: every offset stored, the objects' JSON lines counted (after gunzip or
//! zstd decoding) against the messages sent, the uploaded bytes against the data; then the
//! objects are removed.

pub(crate) mod data;
pub(crate) mod orders;
mod ours;
#[cfg(feature = "peers")]
mod peer;
mod summary;
mod threads;
mod uploader;

/// A stand-in for the peer when it is not compiled in.
#[cfg(not(feature = "peers"))]
mod peer {
    use super::Measure;

    pub const AVAILABLE: bool = false;
    pub const FILE: usize = 8 << 20;

    pub fn run(_: &spillway_tests::S3Server, _: &[u8], _: &str) -> Result<Measure, String> {
        Err("built without the `peers` feature".to_owned())
    }
}

use std::fmt::Write as _;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use spillway::coremap::Machine;
use spillway_tests::{IggyServer, S3Server};

use crate::harness::median;
use crate::mqtt::cpu::ProcessCpu;
use crate::profile;
use crate::report::{self, Better, Row};
use data::Codec;
use summary::{Sample, Summary, rows_of, summarize, summary_table, verdict};
use threads::{Split, ThreadMeter};

pub const MIB: u64 = 1 << 20;
const GIB: f64 = (1u64 << 30) as f64;
const PARTITIONS: u32 = 4;
const TOPIC: &str = "events";
/// The topic of realistic rows ([`orders::order_row`]), as many per partition as [`TOPIC`].
const ORDERS_TOPIC: &str = "orders";

pub const PEER: &str = "rust-s3 0.38 PutObject 8MiB";
const NO_PEER: &str = "none (built without peers)";
const LIMIT: &str = "spillway-s3 alone (store limit)";
/// Comma-separated client tags (`ours-none`, `ours-gzip`, `ours-zstd`, `ours-orders-none`,
/// `ours-orders-gzip`, `ours-orders-zstd`, `ours-none-nosum`, `ours-none-md5`,
/// `ours-none-signed`, `ours-single`, `ours-raw`, `uploader`, `peer`) to
/// measure only those, for profiling (`uploader` and `peer` bring `ours-none` along: they
/// upload its bytes).
const ONLY_ENV: &str = "SPILLWAY_BENCH_S3_SINK_CLIENTS";

/// The goals: ours at the store's limit (within 10% of what the store takes from
/// the uploader alone), with at most a third of the peer's CPU per GiB.
const TARGET_OF_LIMIT: f64 = 0.9;
const TARGET_CPU_VS_PEER: f64 = 3.0;
/// Issue 17's goals for the engine's CPU per GiB of payload: json_lines with metadata, raw.
const TARGET_CPU_JSON_LINES: f64 = 1.2;
const TARGET_CPU_RAW: f64 = 0.6;

/// What one run measured.
#[derive(Debug, Clone, Copy)]
pub struct Measure {
    pub wall: Duration,
    pub split: Split,
    /// s3s-fs's CPU time over the run.
    pub server_cpu: Option<Duration>,
    /// Requests the client sent, retries included (ours: the sink's own count).
    pub requests: Option<u64>,
    /// How far the process's RSS rose above its level at the start (ours, in-process).
    pub rss_growth: Option<u64>,
    /// Ours with an Iceberg table: the snapshots committed and the data files they added.
    pub table: Option<(u64, u64)>,
}

/// Runs `run` on a new thread named `name`, after `prepare` (on the same thread, before the
/// clock and the meter start); the wall time from its start to the thread's end, and the CPU
/// split over that time (the thread and any it started are the measured side).
pub fn timed<P, R: Send>(
    name: &str,
    s3: &S3Server,
    prepare: impl FnOnce() -> Result<P, String> + Send,
    run: impl FnOnce(P) -> Result<R, String> + Send,
) -> Result<(Measure, R), String> {
    let server = s3.pid().map(ProcessCpu::of);
    std::thread::scope(|scope| {
        let (ready_tx, ready) = mpsc::channel::<Result<u32, String>>();
        let (go, go_rx) = mpsc::channel::<()>();
        let handle = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn_scoped(scope, move || {
                let prepared = match prepare() {
                    Ok(p) => p,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.clone()));
                        return Err(e);
                    }
                };
                let _ = ready_tx.send(Ok(threads::current_tid()));
                go_rx
                    .recv()
                    .map_err(|_| "the bench gave up before the start".to_owned())?;
                run(prepared)
            })
            .map_err(|e| format!("spawning {name}: {e}"))?;
        let tid = ready
            .recv()
            .map_err(|_| format!("{name} ended before it was ready"))??;
        let mut meter = ThreadMeter::start(&[tid]);
        let server_before = server.as_ref().and_then(ProcessCpu::read);
        let start = Instant::now();
        go.send(())
            .map_err(|_| format!("{name} ended before the start"))?;
        let result = handle.join().map_err(|_| format!("{name} panicked"))?;
        let wall = start.elapsed();
        let split = meter.finish();
        let server_after = server.as_ref().and_then(ProcessCpu::read);
        let r = result?;
        Ok((
            Measure {
                wall,
                split,
                server_cpu: server_before
                    .zip(server_after)
                    .map(|(b, a)| a.saturating_sub(b)),
                requests: None,
                rss_growth: None,
                table: None,
            },
            r,
        ))
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    /// The engine, json_lines with this codec, checksum crc32c (the default).
    Ours(Codec),
    /// The same on the realistic rows of [`ORDERS_TOPIC`].
    OursOrders(Codec),
    /// The engine, json_lines uncompressed, with another integrity mode.
    OursWith(ours::Integrity),
    /// The engine, json_lines uncompressed, objects of one part: one PutObject each.
    OursSingle,
    /// The engine, `raw` format (payloads one per line), uncompressed.
    OursRaw,
    /// The engine, `parquet` format.
    OursParquet(Pq),
    /// The engine, `parquet` (zstd, payload binary) committed to an Iceberg table (SQL catalog
    /// in SQLite, [`ICEBERG_COMMIT_INTERVAL`]).
    OursIceberg,
    /// The engine, json_lines with zstd, keys split by the payload's site ([`SPLIT_KEY`]):
    /// eight objects open per partition.
    OursSplit,
    Uploader,
    Peer,
}

impl Client {
    /// The engine's rows (not the uploads of its bytes).
    fn is_ours(self) -> bool {
        !matches!(self, Client::Uploader | Client::Peer)
    }

    fn name(self) -> String {
        match self {
            Client::Ours(c) => format!("ours, json_lines, {}", c.name()),
            Client::OursOrders(c) => format!("ours, json_lines, {}, order rows", c.name()),
            Client::OursWith(i) => format!("ours, json_lines, none, {}", i.name()),
            Client::OursSingle => "ours, json_lines, none, 8 MiB objects (PutObject)".to_owned(),
            Client::OursRaw => "ours, raw, none".to_owned(),
            Client::OursParquet(pq) => format!("ours, parquet, {}", pq.name()),
            Client::OursIceberg => format!(
                "ours, parquet, {}, Iceberg table (commits every {} at most)",
                Pq::Zstd.name(),
                iceberg_interval()
            ),
            Client::OursSplit => "ours, json_lines, zstd, key split by {json./site}".to_owned(),
            Client::Uploader => LIMIT.to_owned(),
            Client::Peer => PEER.to_owned(),
        }
    }

    fn tag(self) -> String {
        match self {
            Client::Ours(c) => format!("ours-{}", c.name()),
            Client::OursOrders(c) => format!("ours-orders-{}", c.name()),
            Client::OursWith(i) => format!("ours-none-{}", i.tag()),
            Client::OursSingle => "ours-single".to_owned(),
            Client::OursRaw => "ours-raw".to_owned(),
            Client::OursParquet(pq) => format!("ours-parquet-{}", pq.tag()),
            Client::OursIceberg => "ours-iceberg".to_owned(),
            Client::OursSplit => "ours-split".to_owned(),
            Client::Uploader => "uploader".to_owned(),
            Client::Peer => "peer".to_owned(),
        }
    }
}

/// The split row's key: one object per site (8 in the data) per partition, each holding only
/// its site's messages (checked after each run).
const SPLIT_KEY: &str = "key = \"{json./site}/{partition}-{first_offset}.{ext}\"";

/// The Iceberg row's `commit_interval` (unless [`ICEBERG_INTERVAL_ENV`] says otherwise).
const ICEBERG_COMMIT_INTERVAL: &str = "1s";

/// Overrides the Iceberg row's `commit_interval` (e.g. `5s`), to see what it bounds.
const ICEBERG_INTERVAL_ENV: &str = "SPILLWAY_BENCH_ICEBERG_COMMIT_INTERVAL";

fn iceberg_interval() -> String {
    std::env::var(ICEBERG_INTERVAL_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| ICEBERG_COMMIT_INTERVAL.to_owned())
}

/// The `[sink.s3.iceberg]` of the Iceberg row, its catalog a SQLite file at `db`.
fn iceberg_config(db: &Path) -> String {
    format!(
        "{}\n[sink.s3.iceberg]\ncatalog = \"sql\"\nuri = \"sqlite://{}?mode=rwc\"\n\
         namespace = \"bench\"\ntable = \"events\"\ncommit_interval = \"{}\"",
        Pq::Zstd.config(),
        db.display(),
        iceberg_interval()
    )
}

/// The Parquet variants measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pq {
    /// Metadata, headers and the payload as binary, zstd pages (the defaults).
    Zstd,
    /// The same with snappy pages.
    Snappy,
    /// zstd, the payload's fields as typed columns (seq, device, site, temp, status) instead
    /// of the payload: one JSON parse per message.
    Typed,
}

impl Pq {
    fn name(self) -> &'static str {
        match self {
            Pq::Zstd => "zstd, payload binary",
            Pq::Snappy => "snappy, payload binary",
            Pq::Typed => "zstd, 5 typed columns, no payload",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Pq::Zstd => "zstd",
            Pq::Snappy => "snappy",
            Pq::Typed => "typed",
        }
    }

    /// The `[sink.s3.parquet]` of the variant.
    fn config(self) -> &'static str {
        match self {
            Pq::Zstd => "[sink.s3.parquet]\ncompression = \"zstd\"",
            Pq::Snappy => "[sink.s3.parquet]\ncompression = \"snappy\"",
            Pq::Typed => {
                "[sink.s3.parquet]\ncompression = \"zstd\"\npayload = \"none\"\n\
                 [[sink.s3.parquet.columns]]\nname = \"seq\"\npointer = \"/seq\"\ntype = \"int64\"\n\
                 [[sink.s3.parquet.columns]]\nname = \"device\"\npointer = \"/device\"\ntype = \"string\"\n\
                 [[sink.s3.parquet.columns]]\nname = \"site\"\npointer = \"/site\"\ntype = \"string\"\n\
                 [[sink.s3.parquet.columns]]\nname = \"temp\"\npointer = \"/temp\"\ntype = \"float64\"\n\
                 [[sink.s3.parquet.columns]]\nname = \"status\"\npointer = \"/status\"\ntype = \"string\""
            }
        }
    }
}

/// How much.
#[derive(Debug, Clone, Copy)]
struct Plan {
    per_partition: u64,
    runs: usize,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            // 32 MiB of payload.
            Plan {
                per_partition: 8 * 1024,
                runs: 1,
            }
        } else {
            // 512 MiB of payload.
            Plan {
                per_partition: 128 * 1024,
                runs: 3,
            }
        }
    }

    fn messages(&self) -> u64 {
        self.per_partition * u64::from(PARTITIONS)
    }

    fn payload(&self) -> u64 {
        self.messages() * data::SIZE as u64
    }
}

/// The core the shard runs on: the last allowed core (the control thread takes the first).
fn shard_core() -> usize {
    Machine::detect().cores.last().copied().unwrap_or(0)
}

fn remove(dir: &Path) -> Result<(), String> {
    std::fs::remove_dir_all(dir).map_err(|e| format!("removing {}: {e}", dir.display()))
}

/// The bytes stored under `dir` (removed afterwards); an error when they are not `want`.
fn check_upload(dir: &Path, want: u64, what: &str) -> Result<u64, String> {
    let files = data::object_files(dir)?;
    let mut bytes = 0;
    for f in &files {
        bytes += std::fs::metadata(f)
            .map_err(|e| format!("{}: {e}", f.display()))?
            .len();
    }
    remove(dir)?;
    if bytes != want {
        return Err(format!(
            "{what}: {bytes} bytes stored in {} objects, not {want}",
            files.len()
        ));
    }
    Ok(bytes)
}

struct Fixture<'a> {
    plan: Plan,
    s3: &'a S3Server,
    iggy: &'a IggyServer,
    stream: &'a str,
    core: usize,
}

/// One run of `client`; the json_lines bytes are kept from ours' first uncompressed run.
fn one(
    fx: &Fixture<'_>,
    client: Client,
    run: usize,
    json: &mut Option<Bytes>,
) -> Result<Sample, String> {
    let bucket = fx.s3.bucket_dir();
    let name = format!("s3sink-{}-{run}", client.tag());
    match client {
        Client::Ours(_)
        | Client::OursOrders(_)
        | Client::OursWith(_)
        | Client::OursSingle
        | Client::OursRaw
        | Client::OursParquet(_)
        | Client::OursIceberg
        | Client::OursSplit => {
            let (codec, integrity) = match client {
                Client::OursWith(i) => (Codec::None, i),
                Client::Ours(c) | Client::OursOrders(c) => (c, ours::Integrity::Crc32c),
                Client::OursSplit => (Codec::Zstd, ours::Integrity::Crc32c),
                _ => (Codec::None, ours::Integrity::Crc32c),
            };
            // The Iceberg row's catalog: a fresh SQLite file per run.
            let catalog = std::env::temp_dir().join(format!("{name}-catalog.db"));
            let _ = std::fs::remove_file(&catalog);
            let measure = ours::run(&ours::Job {
                iggy: fx.iggy,
                stream: fx.stream,
                topic: if matches!(client, Client::OursOrders(_)) {
                    ORDERS_TOPIC
                } else {
                    TOPIC
                },
                partitions: PARTITIONS,
                per_partition: fx.plan.per_partition,
                s3: fx.s3,
                name: &name,
                codec,
                integrity,
                core: fx.core,
                single: client == Client::OursSingle,
                format: match client {
                    Client::OursRaw => "raw",
                    Client::OursParquet(_) | Client::OursIceberg => "parquet",
                    _ => "json_lines",
                },
                extra: match client {
                    Client::OursParquet(pq) => pq.config().to_owned(),
                    Client::OursIceberg => iceberg_config(&catalog),
                    Client::OursSplit => SPLIT_KEY.to_owned(),
                    _ => String::new(),
                },
            });
            let _ = std::fs::remove_file(&catalog);
            let measure = measure?;
            let dir = bucket.join(&name);
            let keep = client == Client::Ours(Codec::None) && json.is_none();
            let stored = if matches!(client, Client::OursParquet(_) | Client::OursIceberg) {
                data::read_parquet(&dir)?
            } else {
                data::read_objects(&dir, codec, keep)?
            };
            if client == Client::OursSplit {
                data::check_split_by_site(&dir)?;
            }
            remove(&dir)?;
            if stored.lines != fx.plan.messages() {
                return Err(format!(
                    "{name}: {} records in {} objects, not {}",
                    stored.lines,
                    stored.objects,
                    fx.plan.messages()
                ));
            }
            if let Some(j) = stored.json {
                *json = Some(Bytes::from(j));
            }
            Ok(Sample {
                measure,
                stored: stored.bytes,
            })
        }
        Client::Uploader | Client::Peer => {
            let Some(data) = json.as_ref() else {
                return Err("no json_lines bytes from ours to upload".to_owned());
            };
            let prefix = format!("{name}/");
            let measure = if client == Client::Uploader {
                uploader::run(fx.s3, data, PARTITIONS as usize, &prefix)?
            } else {
                peer::run(fx.s3, data, &prefix)?
            };
            let stored = check_upload(&bucket.join(&name), data.len() as u64, &name)?;
            Ok(Sample { measure, stored })
        }
    }
}

/// Every client of a full run, in the order they first run.
fn all_clients() -> Vec<Client> {
    let mut clients = vec![
        Client::Ours(Codec::None),
        Client::Ours(Codec::Gzip),
        Client::Ours(Codec::Zstd),
        Client::OursOrders(Codec::None),
        Client::OursOrders(Codec::Gzip),
        Client::OursOrders(Codec::Zstd),
        Client::OursWith(ours::Integrity::Nothing),
        Client::OursWith(ours::Integrity::Md5),
        Client::OursWith(ours::Integrity::Signed),
        Client::OursSingle,
        Client::OursRaw,
        Client::OursParquet(Pq::Zstd),
        Client::OursParquet(Pq::Snappy),
        Client::OursParquet(Pq::Typed),
        Client::OursSplit,
        Client::Uploader,
    ];
    // The engine with Iceberg tables (the bench's feature `iceberg`).
    if cfg!(feature = "iceberg") {
        clients.insert(clients.len() - 1, Client::OursIceberg);
    }
    if peer::AVAILABLE {
        clients.push(Client::Peer);
    }
    clients
}

/// Runs the scenario; returns the rows and the report to print.
pub fn run(quick: bool, progress: &mut dyn FnMut(&str)) -> Result<(Vec<Row>, String), String> {
    if !threads::available() {
        return Err(
            "per-thread CPU times (/proc/self/task/*/schedstat) cannot be read here".to_owned(),
        );
    }
    let plan = Plan::new(quick);
    let s3 = S3Server::start_on_disk().map_err(|e| format!("starting s3s-fs: {e}"))?;
    let iggy = crate::harness::iggy()?;
    let stream = format!(
        "bench-s3sink-{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    );
    {
        let mut admin = iggy.admin().map_err(|e| e.to_string())?;
        admin.create_stream(&stream).map_err(|e| e.to_string())?;
        admin
            .create_topic(&stream, TOPIC, PARTITIONS)
            .map_err(|e| e.to_string())?;
        progress(&format!(
            "filling {PARTITIONS} partitions with {} MiB of 1 KiB messages",
            plan.payload() / MIB
        ));
        data::fill(&mut admin, &stream, TOPIC, PARTITIONS, plan.per_partition)?;
    }
    // The realistic rows, only when a client reads them.
    let mut clients = all_clients();
    if let Ok(only) = std::env::var(ONLY_ENV) {
        let only: Vec<&str> = only.split(',').map(str::trim).collect();
        clients.retain(|c| only.contains(&c.tag().as_str()));
        // The others upload the bytes of ours' first uncompressed run.
        if clients.iter().any(|c| !c.is_ours()) && !clients.contains(&Client::Ours(Codec::None)) {
            clients.insert(0, Client::Ours(Codec::None));
        }
    }
    let mut orders_payload = 0;
    if clients.iter().any(|c| matches!(c, Client::OursOrders(_))) {
        let mut admin = iggy.admin().map_err(|e| e.to_string())?;
        admin
            .create_topic(&stream, ORDERS_TOPIC, PARTITIONS)
            .map_err(|e| e.to_string())?;
        progress(&format!(
            "filling {PARTITIONS} partitions with {} order rows",
            plan.messages()
        ));
        orders_payload = data::fill_orders(
            &mut admin,
            &stream,
            ORDERS_TOPIC,
            PARTITIONS,
            plan.per_partition,
        )?;
    }
    let fx = Fixture {
        plan,
        s3: &s3,
        iggy: &iggy,
        stream: &stream,
        core: shard_core(),
    };
    let mut json: Option<Bytes> = None;
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); clients.len()];
    for run in 0..plan.runs {
        // Each run starts with the next client, so that none is always first; the first run
        // starts with ours uncompressed, whose objects the uploads of the others repeat.
        let n = clients.len();
        for i in (0..n).map(|k| (k + run) % n) {
            let client = clients[i];
            progress(&format!("{} run {}/{}", client.name(), run + 1, plan.runs));
            samples[i].push(one(&fx, client, run, &mut json).map_err(|e| {
                format!("{}: {e}\ns3s-fs log:\n{}", client.name(), s3.log_tail(10))
            })?);
        }
    }
    // One more run of the uncompressed json_lines, raw and gzipped order-row clients each,
    // under perf: flame graphs of the shard thread, with no effect on the figures above.
    let mut profiled = String::new();
    if profile::wanted() {
        for client in [
            Client::Ours(Codec::None),
            Client::OursRaw,
            Client::OursOrders(Codec::Gzip),
        ] {
            if !clients.contains(&client) {
                continue;
            }
            progress(&format!("{} profile run", client.name()));
            match profile_run(&fx, client, &mut json) {
                Ok(t) => profiled.push_str(&t),
                Err(e) => {
                    let _ = writeln!(profiled, "  {}: no profile: {e}", client.name());
                }
            }
        }
    }
    if let Ok(mut admin) = iggy.admin() {
        let _ = admin.delete_stream(&stream);
    }
    let summaries: Vec<Summary> = clients
        .iter()
        .zip(&samples)
        .map(|(&c, s)| {
            let payload = if matches!(c, Client::OursOrders(_)) {
                orders_payload
            } else {
                plan.payload()
            };
            summarize(c, s, payload)
        })
        .collect();
    let find = |c: Client| summaries.iter().find(|s| s.client == c);
    let peer = find(Client::Peer);
    let limit = find(Client::Uploader);

    let payload_name = format!("{}MiB", plan.payload() / MIB);
    let rows = rows_of(&summaries, &plan, &payload_name);

    let mut text = String::new();
    let _ = writeln!(
        text,
        "\nspillway-bench s3-sink: {} MiB of payload ({} messages of 1 KiB JSON over {PARTITIONS} \
         partitions) from the Iggy {} to s3s-fs ({}); json_lines, 64 MiB objects, 8 MiB parts, \
         2 in flight; one shard on core {}; median of {} run(s){}",
        plan.payload() / MIB,
        plan.messages(),
        if iggy.stand_in().is_some() {
            "stand-in (in this process)"
        } else {
            "server"
        },
        s3.endpoint(),
        fx.core,
        plan.runs,
        if peer::AVAILABLE {
            ""
        } else {
            "; built without the `peers` feature: no peer measured"
        }
    );
    let _ = writeln!(text, "\nevery client (MB = 10^6 bytes, wall clock)");
    text.push_str(&summary_table(&summaries));
    text.push_str(
        "  payload MB/s: payload bytes / wall time (runs: slowest-fastest); object MB/s: bytes \
         stored / wall time;\n  CPU s/GiB: the client's CPU (user + system; ours: the engine's \
         threads, not the stand-in's) per GiB of payload;\n  s3s-fs / stand-in CPU: their CPU \
         time over the wall time, % of one core; stored/payload: object bytes per payload byte;\n  \
         requests/GiB: S3 requests the sink sent (its spillway_sink_requests_total, retries \
         included) per GiB of payload;\n  RSS rise: the bench process's peak RSS over the run \
         less its RSS at the start (the engine runs in it)\n\n",
    );
    text.push_str(&report::peer_table(
        "throughput (median, higher is better)",
        &rows,
        "MB_per_s",
    ));
    text.push('\n');
    text.push_str(&report::peer_table(
        "CPU per GiB of payload (median, lower is better)",
        &rows,
        "cpu_s_per_GiB",
    ));
    let _ = writeln!(text, "\ntargets");
    match (find(Client::Ours(Codec::None)), limit) {
        (Some(o), Some(l)) => {
            let r = o.object_mb_s / l.object_mb_s;
            let _ = writeln!(
                text,
                "  at the s3s-fs throughput limit: ours (uncompressed) stores {:.1} MB/s, the store \
                 takes {:.1} MB/s from spillway-s3 alone in the same pattern: {r:.2}x (goal >= \
                 {TARGET_OF_LIMIT}x): {}; s3s-fs busy {:.0}% of a core under ours, {:.0}% under \
                 the uploader alone",
                o.object_mb_s,
                l.object_mb_s,
                verdict(r >= TARGET_OF_LIMIT),
                o.server_percent,
                l.server_percent,
            );
        }
        _ => {
            let _ = writeln!(text, "  at the s3s-fs throughput limit: not measured");
        }
    }
    match (find(Client::Ours(Codec::None)), peer) {
        (Some(o), Some(p)) => {
            let r = p.cpu_s_per_gib / o.cpu_s_per_gib;
            let _ = writeln!(
                text,
                "  CPU per GiB <= 1/3 of the peer's: ours {:.3} s/GiB, {PEER} {:.3} s/GiB: {r:.2}x \
                 (goal >= {TARGET_CPU_VS_PEER}x): {}",
                o.cpu_s_per_gib,
                p.cpu_s_per_gib,
                verdict(r >= TARGET_CPU_VS_PEER),
            );
        }
        _ => {
            let _ = writeln!(
                text,
                "  CPU per GiB <= 1/3 of the peer's: not measured (no peer)"
            );
        }
    }
    for (client, goal) in [
        (Client::Ours(Codec::None), TARGET_CPU_JSON_LINES),
        (Client::OursRaw, TARGET_CPU_RAW),
    ] {
        if let Some(o) = find(client) {
            let _ = writeln!(
                text,
                "  engine CPU per GiB, {}: {:.2} s/GiB (goal <= {goal} s/GiB): {}",
                client.name(),
                o.cpu_s_per_gib,
                verdict(o.cpu_s_per_gib <= goal),
            );
        }
    }
    if !profiled.is_empty() {
        let _ = writeln!(
            text,
            "\nwhere the shard thread's CPU goes (one more run of each, under `perf record -F 999 \
             -g`; not in the figures above)"
        );
        text.push_str(&profiled);
    }
    let _ = writeln!(
        text,
        "\n  ours: the engine in-process, timed from its start until Iggy holds the last offset \
         of every partition\n  (a drain is requested once every message is polled, so the last \
         objects close without waiting idle_flush;\n  request_attempts = 1, see \
         {ATTEMPTS_ENV} in bench/src/s3_sink/ours.rs);",
        ATTEMPTS_ENV = ours::ATTEMPTS_ENV,
    );
    if peer::AVAILABLE {
        let _ = writeln!(
            text,
            "  {PEER}: the same json_lines bytes ours stored (encoded once, by ours, before the \
             peer's runs: the peer's\n  figures hold no encoding), {} MiB objects one PutObject \
             after another, tokio current-thread runtime;",
            peer::FILE >> 20,
        );
    }
    let _ = writeln!(
        text,
        "  {LIMIT}: the same bytes, {PARTITIONS} streams of 64 MiB objects, 8 MiB parts, 2 in \
         flight, one monoio thread"
    );
    Ok((rows, text))
}

/// A run of `client` under perf: its flame graph next to the report, and its self-time table.
fn profile_run(
    fx: &Fixture<'_>,
    client: Client,
    json: &mut Option<Bytes>,
) -> Result<String, String> {
    let svg = report::default_json_path(&format!("profile_s3_sink_{}", client.tag()))
        .with_extension("svg");
    if let Some(dir) = svg.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    let recording = profile::start(&svg.with_extension("data"))?;
    let ran = one(fx, client, 1000, json);
    let data = recording.stop()?;
    ran?;
    let title = format!(
        "the shard thread, spillway-bench s3-sink, {}",
        client.name()
    );
    let p = profile::render(&data, "spillway-shard", &title, &svg)?;
    report::picture(&svg, &format!("flame graph: {title}"));
    Ok(format!(
        "  {} ({}):\n{}",
        client.name(),
        svg.display(),
        p.table()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_are_whole_batches_and_the_quick_one_is_small() {
        let quick = Plan::new(true);
        let full = Plan::new(false);
        assert_eq!(quick.payload(), 32 * MIB);
        assert_eq!(full.payload(), 512 * MIB);
        assert!(median(vec![3.0, 1.0, 2.0]) == 2.0);
    }
}
