//! `spillway-bench s3`: one object uploaded in 8 MiB parts by spillway-s3 (signed payload and
//! UNSIGNED-PAYLOAD) and by the peers, aws-sdk-s3 and rust-s3 0.38, against one s3s-fs started
//! by the bench (it verifies SigV4 and stores the object as a file); then ours and aws-sdk-s3
//! against a discard endpoint in this process (see [`discard`]), to show the client's own
//! ceiling with no store in the way.
//!
//! Every upload is timed with the wall clock from the first request to the completed object,
//! and its client CPU time (user + system) read with `getrusage` around it: `RUSAGE_SELF`
//! against s3s-fs (a separate process; nothing else in this one is busy then), `RUSAGE_THREAD`
//! against the discard endpoint (its server threads share this process; every client runs on
//! the calling thread: ours on a monoio runtime, the peers on a tokio current-thread runtime).
//! Clients, runtimes and data are made before the clock starts; connections are opened within
//! it. Runs of the clients alternate (each run starting with the next client), and each figure
//! is the median over the runs (5; 1 with `--quick`, which also uses smaller objects).
//!
//! Every upload is checked to have landed: the stored file's size (s3s-fs) or the body bytes
//! the discard server read. The data is generated once and handed out as `Bytes` slices (ours,
//! aws-sdk-s3) or a `&[u8]` (rust-s3), so making it costs nothing in the timed part.
//!
//! The peers are behind the default cargo feature `peers` (they take minutes to compile);
//! built without it, the scenario measures ours alone and its rows say so. To profile one
//! client, name it in `SPILLWAY_BENCH_S3_CLIENTS` (tags: ours-signed, ours-unsigned,
//! aws-signed, aws-unsigned, rust-s3-stream, rust-s3-put; comma-separated) and run the bench
//! under `perf record -e cpu-clock -g`.

mod cpu;
pub(crate) mod discard;
mod ours;
#[cfg(feature = "peers")]
pub(crate) mod peers;

/// Stand-ins for the peers when they are not compiled in.
#[cfg(not(feature = "peers"))]
mod peers {
    use super::{Job, Sample};

    pub const AVAILABLE: bool = false;
    const MISSING: &str = "built without the `peers` feature";

    pub fn aws(_: &Job<'_>, _signed: bool) -> Result<Sample, String> {
        Err(MISSING.to_owned())
    }

    pub fn rust_s3_put(_: &Job<'_>) -> Result<Sample, String> {
        Err(MISSING.to_owned())
    }

    pub fn rust_s3_stream(_: &Job<'_>) -> Result<Sample, String> {
        Err(MISSING.to_owned())
    }
}

use std::fmt::{self, Write as _};
use std::time::Duration;

use bytes::Bytes;
use spillway_s3::multipart::MIB;
use spillway_s3::sign::PayloadMode;
use spillway_tests::S3Server;

use crate::harness::median;
use crate::report::{self, Better, Row};
use cpu::{CpuTime, Scope};
use discard::DiscardServer;

/// Part size, for ours and every peer (rust-s3's multipart part size is fixed at 8 MiB).
pub const PART: u64 = 8 * MIB;
/// Size of the chunks appended to ours.
pub const CHUNK: u64 = MIB;
/// Parts under way at once.
pub const IN_FLIGHT: usize = 4;

const GIB: f64 = (1u64 << 30) as f64;

pub const AWS: &str = "aws-sdk-s3";
pub const RUST_S3: &str = "rust-s3 0.38";
const NO_PEER: &str = "none (built without peers)";
const PEER_SKIPPED: &str = "none (not measured)";
/// Comma-separated client tags (`ours-signed`, `aws-unsigned` …) to measure only those: for
/// profiling one client with `perf`.
const ONLY_ENV: &str = "SPILLWAY_BENCH_S3_CLIENTS";

/// The goals.
const TARGET_THROUGHPUT_VS_AWS: f64 = 1.0;
const TARGET_CPU_VS_AWS_SIGNED: f64 = 2.0;
const TARGET_CPU_VS_AWS_UNSIGNED: f64 = 10.0;
const TARGET_DISCARD_GB_PER_CORE: f64 = 1.5;

/// What each row measures, printed under the tables.
pub const LEGEND: &[(&str, &str)] = &[
    (
        "upload_*_8MiB_parts_signed",
        "one object in 8 MiB parts, 4 in flight, to s3s-fs; ours: ObjectWriter with signed \
         payloads (SHA-256 of every part), fed 1 MiB Bytes chunks; aws-sdk-s3: \
         Create/UploadPart/Complete with its defaults (payload signed, CRC32 checksums); \
         rust-s3: put_object_stream (its multipart upload, 8 MiB parts, 4 in flight)",
    ),
    (
        "upload_*_8MiB_parts_unsigned",
        "the same with UNSIGNED-PAYLOAD: ours PayloadMode::Unsigned, aws-sdk-s3 \
         disable_payload_signing() on every part",
    ),
    (
        "upload_*_iggy_put_object_signed",
        "ours as in _signed beside rust-s3 put_object with the whole object in one PUT, as \
         Apache Iggy's S3 sink uploads a file",
    ),
    (
        "discard_*",
        "ours and aws-sdk-s3 against the in-process discard endpoint (reads every body, \
         answers 200): the client's own ceiling; CPU of the client thread alone",
    ),
];

/// Where uploads go.
#[derive(Clone)]
pub struct Target {
    pub endpoint: String,
    pub region: String,
    pub access_key: String,
    pub secret_key: String,
    pub bucket: String,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key", &self.access_key)
            .field("secret_key", &"<redacted>")
            .field("bucket", &self.bucket)
            .finish()
    }
}

/// One upload to make.
#[derive(Debug)]
pub struct Job<'a> {
    pub target: &'a Target,
    pub key: &'a str,
    /// Object size.
    pub total: u64,
    /// The data: the object is this buffer repeated (its length is a multiple of the part
    /// size), so objects larger than the buffer cost no more memory.
    pub data: &'a Bytes,
    pub scope: Scope,
}

impl Job<'_> {
    /// `len` bytes of the object from `offset`, sliced from the data without copying.
    pub fn chunk(&self, offset: u64, len: u64) -> Result<Bytes, String> {
        let size = self.data.len() as u64;
        let from = offset.checked_rem(size).ok_or("no data")?;
        let to = from + len;
        if to > size || offset + len > self.total {
            return Err(format!(
                "chunk {offset}+{len} crosses the data ({size}) or the object ({})",
                self.total
            ));
        }
        Ok(self.data.slice(from as usize..to as usize))
    }
}

/// What one upload measured.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub wall: Duration,
    pub cpu: CpuTime,
    /// The object size the client reported, where it reports one.
    pub reported_size: Option<u64>,
}

/// The clients measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    OursSigned,
    OursUnsigned,
    AwsSigned,
    AwsUnsigned,
    RustS3Stream,
    RustS3Put,
}

impl Client {
    fn name(self) -> &'static str {
        match self {
            Client::OursSigned => "ours, signed payload",
            Client::OursUnsigned => "ours, UNSIGNED-PAYLOAD",
            Client::AwsSigned => "aws-sdk-s3, signed payload",
            Client::AwsUnsigned => "aws-sdk-s3, disable_payload_signing",
            Client::RustS3Stream => "rust-s3 0.38 put_object_stream",
            Client::RustS3Put => "rust-s3 0.38 put_object (whole object)",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Client::OursSigned => "ours-signed",
            Client::OursUnsigned => "ours-unsigned",
            Client::AwsSigned => "aws-signed",
            Client::AwsUnsigned => "aws-unsigned",
            Client::RustS3Stream => "rust-s3-stream",
            Client::RustS3Put => "rust-s3-put",
        }
    }

    fn upload(self, job: &Job<'_>) -> Result<Sample, String> {
        match self {
            Client::OursSigned => ours::upload(job, PayloadMode::Signed),
            Client::OursUnsigned => ours::upload(job, PayloadMode::Unsigned),
            Client::AwsSigned => peers::aws(job, true),
            Client::AwsUnsigned => peers::aws(job, false),
            Client::RustS3Stream => peers::rust_s3_stream(job),
            Client::RustS3Put => peers::rust_s3_put(job),
        }
    }
}

/// How much and how often.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    /// The object uploaded to s3s-fs.
    object: u64,
    /// The object uploaded to the discard endpoint.
    discard: u64,
    runs: usize,
    /// One untimed upload of two parts per client first.
    warmup: bool,
}

impl Sizes {
    fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                object: 32 * MIB,
                discard: 128 * MIB,
                runs: 1,
                warmup: false,
            }
        } else {
            Sizes {
                object: 256 * MIB,
                discard: 1024 * MIB,
                runs: 5,
                warmup: true,
            }
        }
    }
}

/// Where the bytes land, and how to check that they did.
enum Store<'a> {
    Fs(&'a S3Server),
    Discard(&'a DiscardServer),
}

impl Store<'_> {
    fn name(&self) -> &'static str {
        match self {
            Store::Fs(_) => "s3s-fs",
            Store::Discard(_) => "discard",
        }
    }

    fn scope(&self) -> Scope {
        match self {
            Store::Fs(_) => Scope::Process,
            Store::Discard(_) => Scope::Thread,
        }
    }

    /// A reading taken before an upload, for [`Store::check`].
    fn before(&self) -> u64 {
        match self {
            Store::Fs(_) => 0,
            Store::Discard(d) => d.put_bytes(),
        }
    }

    /// Checks that the object `key` of `total` bytes landed, and clears it away.
    fn check(&self, key: &str, total: u64, before: u64, sample: &Sample) -> Result<(), String> {
        if let Some(size) = sample.reported_size
            && size != total
        {
            return Err(format!(
                "{key}: the client reports {size} bytes, not {total}"
            ));
        }
        match self {
            Store::Fs(server) => {
                let path = server.object_path(key);
                let size = std::fs::metadata(&path)
                    .map_err(|e| format!("{key}: not stored ({}): {e}", path.display()))?
                    .len();
                std::fs::remove_file(&path)
                    .map_err(|e| format!("removing {}: {e}", path.display()))?;
                if size != total {
                    return Err(format!("{key}: stored {size} bytes, not {total}"));
                }
            }
            Store::Discard(d) => {
                let got = d.put_bytes().saturating_sub(before);
                if got != total {
                    return Err(format!(
                        "{key}: the discard server read {got} bytes, not {total}"
                    ));
                }
            }
        }
        Ok(())
    }

    fn context(&self) -> String {
        match self {
            Store::Fs(server) => format!("\ns3s-fs log:\n{}", server.log_tail(20)),
            Store::Discard(d) => format!(
                " (the discard server answered {} requests, read {} PUT body bytes)",
                d.requests(),
                d.put_bytes()
            ),
        }
    }
}

/// The medians of one client on one store.
#[derive(Debug, Clone, Copy)]
struct Measured {
    client: Client,
    store: &'static str,
    scope: Scope,
    total: u64,
    mb_per_s: f64,
    /// The lowest and highest MB/s of the runs.
    mb_per_s_range: (f64, f64),
    cpu_s_per_gib: f64,
    /// The user-space share of `cpu_s_per_gib` (the rest is kernel time).
    user_s_per_gib: f64,
}

impl Measured {
    /// Bytes sent per second of client CPU, in GB/s: what one core of this client carries.
    fn gb_per_core(&self) -> f64 {
        (GIB / 1e9) / self.cpu_s_per_gib
    }
}

/// Deterministic, incompressible data: `len` bytes of xorshift output.
fn pattern(len: u64) -> Bytes {
    let mut v = Vec::with_capacity(len as usize);
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    while (v.len() as u64) < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len as usize);
    Bytes::from(v)
}

fn size_name(n: u64) -> String {
    if n >= 1 << 30 && n.is_multiple_of(1 << 30) {
        format!("{}GiB", n >> 30)
    } else {
        format!("{}MiB", n >> 20)
    }
}

/// Uploads `total` bytes with each client, `sizes.runs` times interleaved; the medians.
fn measure(
    clients: &[Client],
    store: &Store<'_>,
    target: &Target,
    data: &Bytes,
    total: u64,
    sizes: &Sizes,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Measured>, String> {
    let scope = store.scope();
    let one = |client: Client, key: &str, total: u64| -> Result<Sample, String> {
        let job = Job {
            target,
            key,
            total,
            data,
            scope,
        };
        let before = store.before();
        let sample = client.upload(&job).map_err(|e| {
            format!(
                "{} to {}: {e}{}",
                client.name(),
                store.name(),
                store.context()
            )
        })?;
        store.check(key, total, before, &sample)?;
        Ok(sample)
    };
    if sizes.warmup {
        for &client in clients {
            progress(&format!("{}: warming up {}", store.name(), client.name()));
            one(
                client,
                &format!("bench/warmup-{}.bin", client.tag()),
                2 * PART,
            )?;
        }
    }
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); clients.len()];
    for run in 0..sizes.runs {
        // Each run starts with the next client, so that none is always first or last.
        let n = clients.len();
        for i in (0..n).map(|k| (k + run) % n) {
            let client = clients[i];
            progress(&format!(
                "{}: {} run {}/{}",
                store.name(),
                client.name(),
                run + 1,
                sizes.runs
            ));
            let key = format!("bench/{}-{run}.bin", client.tag());
            samples[i].push(one(client, &key, total)?);
        }
    }
    let gib = total as f64 / GIB;
    Ok(clients
        .iter()
        .zip(samples)
        .map(|(&client, s)| {
            let mb: Vec<f64> = s
                .iter()
                .map(|x| total as f64 / x.wall.as_secs_f64() / 1e6)
                .collect();
            let lowest = mb.iter().copied().fold(f64::INFINITY, f64::min);
            let highest = mb.iter().copied().fold(0.0, f64::max);
            Measured {
                client,
                store: store.name(),
                scope,
                total,
                mb_per_s: median(mb),
                mb_per_s_range: (lowest, highest),
                cpu_s_per_gib: median(
                    s.iter()
                        .map(|x| x.cpu.total().as_secs_f64() / gib)
                        .collect(),
                ),
                user_s_per_gib: median(s.iter().map(|x| x.cpu.user.as_secs_f64() / gib).collect()),
            }
        })
        .collect())
}

/// The two rows (MB/s, CPU s/GiB) of `ours` beside `peer` in `scenario`.
fn rows_for(
    out: &mut Vec<Row>,
    results: &[Measured],
    scenario: &str,
    ours: Client,
    peer: Client,
    peer_name: &'static str,
) {
    let find = |c: Client| results.iter().find(|m| m.client == c);
    let Some(o) = find(ours) else { return };
    let p = find(peer);
    let peer_name = match p {
        Some(_) => peer_name,
        None if peers::AVAILABLE => PEER_SKIPPED,
        None => NO_PEER,
    };
    out.push(Row {
        scenario: scenario.to_owned(),
        metric: "MB_per_s",
        ours: o.mb_per_s,
        peer: p.map_or(f64::NAN, |p| p.mb_per_s),
        peer_name,
        unit: "MB/s",
        better: Better::Higher,
    });
    out.push(Row {
        scenario: scenario.to_owned(),
        metric: "cpu_s_per_GiB",
        ours: o.cpu_s_per_gib,
        peer: p.map_or(f64::NAN, |p| p.cpu_s_per_gib),
        peer_name,
        unit: "CPU s/GiB",
        better: Better::Lower,
    });
}

fn results_table(results: &[Measured]) -> String {
    let head = [
        "store",
        "client",
        "size",
        "MB/s",
        "MB/s runs",
        "CPU s/GiB",
        "user s/GiB",
        "GB/s/core",
        "CPU of",
    ]
    .map(str::to_owned);
    let body: Vec<[String; 9]> = results
        .iter()
        .map(|m| {
            [
                m.store.to_owned(),
                m.client.name().to_owned(),
                size_name(m.total),
                format!("{:.1}", m.mb_per_s),
                format!("{:.0}-{:.0}", m.mb_per_s_range.0, m.mb_per_s_range.1),
                format!("{:.3}", m.cpu_s_per_gib),
                format!("{:.3}", m.user_s_per_gib),
                format!("{:.2}", m.gb_per_core()),
                m.scope.name().to_owned(),
            ]
        })
        .collect();
    report::text_table(&head, &body, |col| col < 2 || col == 8)
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

/// One line per goal of the issue.
fn target_lines(rows: &[Row], results: &[Measured], object: &str, discard: &str) -> Vec<String> {
    let ratio = |scenario: &str, metric: &str| {
        rows.iter()
            .find(|r| r.scenario == scenario && r.metric == metric && r.peer_name == AWS)
            .and_then(Row::ratio)
    };
    let mut lines = Vec::new();
    let goals = [
        (
            format!("upload_{object}_8MiB_parts_signed"),
            "MB_per_s",
            TARGET_THROUGHPUT_VS_AWS,
            "throughput >= aws-sdk-s3's (signed)",
        ),
        (
            format!("upload_{object}_8MiB_parts_unsigned"),
            "MB_per_s",
            TARGET_THROUGHPUT_VS_AWS,
            "throughput >= aws-sdk-s3's (unsigned)",
        ),
        (
            format!("upload_{object}_8MiB_parts_signed"),
            "cpu_s_per_GiB",
            TARGET_CPU_VS_AWS_SIGNED,
            "CPU/GiB <= 1/2 of aws-sdk-s3's, signed",
        ),
        (
            format!("upload_{object}_8MiB_parts_unsigned"),
            "cpu_s_per_GiB",
            TARGET_CPU_VS_AWS_UNSIGNED,
            "CPU/GiB <= 1/10 of aws-sdk-s3's, unsigned",
        ),
    ];
    for (scenario, metric, goal, what) in goals {
        lines.push(match ratio(&scenario, metric) {
            Some(x) => format!("{what}: {} ({x:.2}x, goal {goal}x)", verdict(x >= goal)),
            None => format!("{what}: not measured"),
        });
    }
    for client in [Client::OursUnsigned, Client::OursSigned] {
        if let Some(m) = results
            .iter()
            .find(|m| m.client == client && m.store == "discard")
        {
            let wall = m.mb_per_s / 1000.0;
            let per_core = m.gb_per_core();
            lines.push(format!(
                ">= {TARGET_DISCARD_GB_PER_CORE} GB/s per core to the discard endpoint ({discard}, \
                 {}): wall {wall:.2} GB/s on one client thread: {}; bytes per client CPU \
                 second {per_core:.2} GB/s: {}",
                client.name(),
                verdict(wall >= TARGET_DISCARD_GB_PER_CORE),
                verdict(per_core >= TARGET_DISCARD_GB_PER_CORE),
            ));
        }
    }
    lines
}

/// Runs the scenario; returns the rows and the report to print.
pub fn run(quick: bool, progress: &mut dyn FnMut(&str)) -> Result<(Vec<Row>, String), String> {
    let sizes = Sizes::new(quick);
    if !sizes.object.is_multiple_of(PART) || !sizes.discard.is_multiple_of(sizes.object) {
        return Err("sizes must be whole parts and the discard size whole objects".to_owned());
    }
    let only: Option<Vec<String>> = std::env::var(ONLY_ENV)
        .ok()
        .map(|v| v.split(',').map(|t| t.trim().to_owned()).collect());
    let wanted = |c: &Client| only.as_ref().is_none_or(|o| o.iter().any(|t| t == c.tag()));
    let object = size_name(sizes.object);
    let discard_size = size_name(sizes.discard);
    let data = pattern(sizes.object);

    let peers: &[Client] = if peers::AVAILABLE {
        &[
            Client::AwsSigned,
            Client::AwsUnsigned,
            Client::RustS3Stream,
            Client::RustS3Put,
        ]
    } else {
        &[]
    };

    // 1. Against s3s-fs.
    let server = S3Server::start_on_disk().map_err(|e| format!("starting s3s-fs: {e}"))?;
    let target = Target {
        endpoint: server.endpoint(),
        region: server.region().to_owned(),
        access_key: server.access_key().to_owned(),
        secret_key: server.secret_key().to_owned(),
        bucket: server.bucket().to_owned(),
    };
    let fs_endpoint = target.endpoint.clone();
    let mut clients = vec![Client::OursSigned, Client::OursUnsigned];
    clients.extend_from_slice(peers);
    clients.retain(wanted);
    let mut results = measure(
        &clients,
        &Store::Fs(&server),
        &target,
        &data,
        sizes.object,
        &sizes,
        progress,
    )?;
    drop(server);

    // 2. Against the discard endpoint.
    let discard = DiscardServer::start().map_err(|e| format!("discard server: {e}"))?;
    let target = Target {
        endpoint: discard.endpoint(),
        ..target
    };
    let mut clients = vec![Client::OursUnsigned, Client::OursSigned];
    if peers::AVAILABLE {
        clients.extend_from_slice(&[Client::AwsUnsigned, Client::AwsSigned]);
    }
    clients.retain(wanted);
    let discard_results = measure(
        &clients,
        &Store::Discard(&discard),
        &target,
        &data,
        sizes.discard,
        &sizes,
        progress,
    )?;
    drop(discard);

    let mut rows = Vec::new();
    {
        let fs = &results;
        let signed = format!("upload_{object}_8MiB_parts_signed");
        let unsigned = format!("upload_{object}_8MiB_parts_unsigned");
        rows_for(
            &mut rows,
            fs,
            &signed,
            Client::OursSigned,
            Client::AwsSigned,
            AWS,
        );
        rows_for(
            &mut rows,
            fs,
            &unsigned,
            Client::OursUnsigned,
            Client::AwsUnsigned,
            AWS,
        );
        if peers::AVAILABLE {
            rows_for(
                &mut rows,
                fs,
                &signed,
                Client::OursSigned,
                Client::RustS3Stream,
                RUST_S3,
            );
            let iggy = format!("upload_{object}_iggy_put_object_signed");
            rows_for(
                &mut rows,
                fs,
                &iggy,
                Client::OursSigned,
                Client::RustS3Put,
                RUST_S3,
            );
        }
        let d = &discard_results;
        let unsigned = format!("discard_{discard_size}_8MiB_parts_unsigned");
        let signed = format!("discard_{discard_size}_8MiB_parts_signed");
        rows_for(
            &mut rows,
            d,
            &unsigned,
            Client::OursUnsigned,
            Client::AwsUnsigned,
            AWS,
        );
        rows_for(
            &mut rows,
            d,
            &signed,
            Client::OursSigned,
            Client::AwsSigned,
            AWS,
        );
    }
    results.extend(discard_results);

    let mut text = String::new();
    let _ = writeln!(
        text,
        "\nspillway-bench s3: {object} to s3s-fs ({fs_endpoint}) and {discard_size} to the \
         discard endpoint, in {} MiB parts, {IN_FLIGHT} in flight, {} MiB chunks for ours; \
         median of {} run(s){}",
        PART / MIB,
        CHUNK / MIB,
        sizes.runs,
        if peers::AVAILABLE {
            ""
        } else {
            "; built without the `peers` feature: no peers measured"
        }
    );
    let _ = writeln!(text, "\nevery client (MB = 10^6 bytes, wall clock)");
    text.push_str(&results_table(&results));
    text.push_str(
        "  MB/s runs: slowest-fastest run; CPU s/GiB: the client's user + system CPU \
         (getrusage) per GiB sent;\n  user s/GiB: its user-space share (exact total, split \
         by the kernel's tick samples); GB/s/core: bytes sent per client CPU second\n\n",
    );
    text.push_str(&report::peer_table(
        "throughput (median, higher is better)",
        &rows,
        "MB_per_s",
    ));
    text.push('\n');
    text.push_str(&report::peer_table(
        "client CPU per GiB (median, lower is better)",
        &rows,
        "cpu_s_per_GiB",
    ));
    let _ = writeln!(text, "\ntargets");
    for line in target_lines(&rows, &results, &object, &discard_size) {
        let _ = writeln!(text, "  {line}");
    }
    text.push('\n');
    for (name, what) in LEGEND {
        let _ = writeln!(text, "  {name}: {what}");
    }
    Ok((rows, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_slice_the_data_without_crossing_it() {
        let data = pattern(2 * PART);
        let target = Target {
            endpoint: String::new(),
            region: String::new(),
            access_key: String::new(),
            secret_key: String::new(),
            bucket: String::new(),
        };
        let job = Job {
            target: &target,
            key: "k",
            total: 6 * PART,
            data: &data,
            scope: Scope::Thread,
        };
        let a = job.chunk(0, MIB);
        let b = job.chunk(2 * PART, MIB);
        assert_eq!(a, b, "the object repeats the data");
        assert!(job.chunk(2 * PART - 1, 2).is_err());
        assert!(job.chunk(6 * PART - 1, 2).is_err());
        assert_eq!(size_name(256 * MIB), "256MiB");
        assert_eq!(size_name(1024 * MIB), "1GiB");
        assert!(median(vec![3.0, 1.0, 2.0]) == 2.0);
    }
}
