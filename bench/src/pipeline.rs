//! `spillway-bench pipeline`: Iggy -> the engine -> one destination at a time, the whole path
//! as a user runs it: the `spillway` binary as its own process, one shard, reading a topic of
//! 4 partitions filled beforehand (the real Iggy server started for the scenario, the server
//! given by `--iggy HOST:PORT`, or the stand-in with `--iggy stand-in`) with a fresh consumer,
//! and delivering to
//!
//! - `mosquitto`: MQTT 5, QoS 1, window 1000, with a QoS 0 subscriber counting deliveries;
//! - `discard_mqtt`: the in-process discard broker (answers every PUBLISH at once);
//! - `s3s_fs`: json_lines objects (64 MiB, 8 MiB parts, 2 in flight) to s3s-fs;
//! - `discard_s3`: the same sink to the in-process discard S3 endpoint (without fencing,
//!   `conditional_writes = "off"`: the endpoint keeps nothing, so it cannot honour them);
//!
//! with 100-byte and 1 KiB JSON payloads. Timed from the process's spawn until Iggy holds the
//! last offset of every partition (the delivery contract's end: every message confirmed and
//! its offset stored). An S3 run is asked to drain (SIGTERM) as soon as the engine's metrics
//! show every message polled, so the last, smaller objects close at once instead of after
//! `idle_flush`. CPU per message and peak RSS are the engine process's own, from `wait4(2)`
//! once it has exited: start-up and drain are inside them.
//!
//! Every server (Iggy, mosquitto, s3s-fs, the discard endpoints) shares the machine
//! with the engine; the report says how many cores there were. No peer: there is no other
//! Iggy sink to run the same path.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use spillway::coremap::Machine;
use spillway_codec::{Protocol, QoS};
use spillway_tests::{IggyServer, Mosquitto, MosquittoOpts, S3Server, TestConsumer};

use crate::engine_process::{self, EngineProcess};
use crate::harness::median;
use crate::metrics;
use crate::mqtt::discard::DiscardBroker;
use crate::mqtt::subscriber::CountingSubscriber;
use crate::report::{self, Better, Row};
use crate::s3::discard::DiscardServer;
use crate::s3_sink::data;

/// Partitions of each topic the scenario reads.
pub const PARTITIONS: u32 = 4;

/// Where the engine delivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dest {
    Mosquitto,
    DiscardMqtt,
    S3sFs,
    DiscardS3,
}

impl Dest {
    pub const EACH: [Dest; 4] = [
        Dest::Mosquitto,
        Dest::DiscardMqtt,
        Dest::S3sFs,
        Dest::DiscardS3,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Dest::Mosquitto => "mosquitto",
            Dest::DiscardMqtt => "discard_mqtt",
            Dest::S3sFs => "s3s_fs",
            Dest::DiscardS3 => "discard_s3",
        }
    }

    fn is_s3(self) -> bool {
        matches!(self, Dest::S3sFs | Dest::DiscardS3)
    }
}

/// The servers a run may deliver to; each is started only when some run needs it.
#[derive(Debug, Default)]
pub struct Servers {
    mosquitto: Option<Mosquitto>,
    discard_mqtt: Option<DiscardBroker>,
    s3: Option<S3Server>,
    discard_s3: Option<DiscardServer>,
}

impl Servers {
    /// mosquitto's address, when it runs.
    pub fn mosquitto_addr(&self) -> Option<SocketAddr> {
        self.mosquitto.as_ref().map(Mosquitto::addr)
    }

    /// Starts what `dests` need.
    pub fn start(dests: &[Dest]) -> Result<Servers, String> {
        let mut s = Servers::default();
        for d in dests {
            match d {
                Dest::Mosquitto if s.mosquitto.is_none() => {
                    s.mosquitto = Some(
                        Mosquitto::start(
                            MosquittoOpts::new()
                                .max_inflight_messages(MQTT_WINDOW)
                                .max_queued_messages(0),
                        )
                        .map_err(|e| format!("starting mosquitto: {e}"))?,
                    );
                }
                Dest::DiscardMqtt if s.discard_mqtt.is_none() => {
                    s.discard_mqtt = Some(
                        DiscardBroker::start(&[]).map_err(|e| format!("discard broker: {e}"))?,
                    );
                }
                Dest::S3sFs if s.s3.is_none() => {
                    s.s3 = Some(
                        S3Server::start_on_disk().map_err(|e| format!("starting s3s-fs: {e}"))?,
                    );
                }
                Dest::DiscardS3 if s.discard_s3.is_none() => {
                    s.discard_s3 = Some(
                        DiscardServer::start().map_err(|e| format!("discard S3 endpoint: {e}"))?,
                    );
                }
                _ => {}
            }
        }
        Ok(s)
    }
}

/// The MQTT window (the sink's `max_inflight`, mosquitto's `max_inflight_messages`).
const MQTT_WINDOW: u16 = 1000;

/// One run.
#[derive(Debug)]
pub struct Job<'a> {
    pub iggy: &'a IggyServer,
    pub stream: &'a str,
    pub topic: &'a str,
    /// Partitions read: `0..partitions`.
    pub partitions: u32,
    pub per_partition: u64,
    /// Payload bytes per message.
    pub size: usize,
    /// The shards' cores (one shard each).
    pub cores: &'a [usize],
    /// The sink's name: its Iggy consumer (fresh per run), its topic / key prefix.
    pub name: &'a str,
    pub dest: Dest,
    /// More lines of the destination's table (`[sink.s3]` or `[sink.mqtt]`).
    pub extra: &'a str,
}

impl Job<'_> {
    fn total(&self) -> u64 {
        self.per_partition * u64::from(self.partitions)
    }
}

/// What one run measured.
#[derive(Debug, Clone, Copy)]
pub struct Measure {
    /// Spawn to the last offset stored.
    pub wall: Duration,
    /// The engine process's CPU time.
    pub cpu: Duration,
    /// Its peak resident set, bytes.
    pub peak_rss: u64,
}

/// The engine's config for `job`, metrics on `metrics`.
fn config_text(job: &Job<'_>, servers: &Servers, metrics: SocketAddr) -> Result<String, String> {
    let cores: Vec<String> = job.cores.iter().map(usize::to_string).collect();
    let partitions: Vec<String> = (0..job.partitions).map(|p| p.to_string()).collect();
    let mut text = format!(
        r#"[iggy]
address = "{iggy}"
username = "{user}"

[runtime]
cores = [{cores}]
shutdown_timeout = "60s"

[metrics]
address = "{metrics}"
log_interval = "0s"

[[sink]]
name = "{name}"
type = "{kind}"
stream = "{stream}"
topic = "{topic}"
partitions = [{partitions}]
batch_size = 1000
window_messages = 10000
commit_interval = "20ms"
"#,
        iggy = job.iggy.addr(),
        user = job.iggy.username(),
        cores = cores.join(", "),
        name = job.name,
        kind = if job.dest.is_s3() { "s3" } else { "mqtt" },
        stream = job.stream,
        topic = job.topic,
        partitions = partitions.join(", "),
    );
    let missing = |what: &str| format!("{what} was not started");
    match job.dest {
        Dest::Mosquitto | Dest::DiscardMqtt => {
            let addr = match job.dest {
                Dest::Mosquitto => servers
                    .mosquitto
                    .as_ref()
                    .ok_or_else(|| missing("mosquitto"))?
                    .addr(),
                _ => servers
                    .discard_mqtt
                    .as_ref()
                    .ok_or_else(|| missing("the discard broker"))?
                    .addr(),
            };
            let _ = write!(
                text,
                r#"
[sink.mqtt]
address = "{addr}"
protocol = "5"
connections = 1
max_inflight = {MQTT_WINDOW}
qos = 1
topic = "bench/pipeline/{name}"
topic_aliases = 0
{extra}
"#,
                name = job.name,
                extra = job.extra,
            );
        }
        Dest::S3sFs | Dest::DiscardS3 => {
            let (endpoint, bucket, region, ak, sk) = match job.dest {
                Dest::S3sFs => {
                    let s3 = servers.s3.as_ref().ok_or_else(|| missing("s3s-fs"))?;
                    (
                        s3.endpoint(),
                        s3.bucket().to_owned(),
                        s3.region(),
                        s3.access_key().to_owned(),
                        s3.secret_key().to_owned(),
                    )
                }
                _ => {
                    let d = servers
                        .discard_s3
                        .as_ref()
                        .ok_or_else(|| missing("the discard S3 endpoint"))?;
                    (
                        d.endpoint(),
                        "discard".to_owned(),
                        "us-east-1",
                        "bench".to_owned(),
                        "bench-secret".to_owned(),
                    )
                }
            };
            // request_attempts = 1: s3s-fs answers ListMultipartUploads (the start-up clean-up)
            // with 501, which would otherwise be retried with backoff for seconds.
            let _ = write!(
                text,
                r#"
[sink.s3]
bucket = "{bucket}"
endpoint = "{endpoint}"
region = "{region}"
access_key_id = "{ak}"
secret_access_key = "{sk}"
prefix = "{name}/"
format = "json_lines"
max_object_size = "64MiB"
part_size = "8MiB"
parts_in_flight = 2
idle_flush = "1s"
request_attempts = 1
{fencing}{extra}"#,
                name = job.name,
                // The discard endpoint keeps nothing, so it cannot honour conditional writes
                // (the sink's start-up probe would refuse it): it measures the engine without
                // fencing. s3s-fs runs with fencing, as shipped.
                fencing = if job.dest == Dest::DiscardS3 {
                    "conditional_writes = \"off\"\n"
                } else {
                    ""
                },
                extra = job.extra,
            );
        }
    }
    Ok(text)
}

/// What the destination has received so far, to compare before and after a run.
fn received(job: &Job<'_>, servers: &Servers) -> u64 {
    match job.dest {
        Dest::DiscardMqtt => servers
            .discard_mqtt
            .as_ref()
            .map_or(0, |b| b.publishes()[1]),
        Dest::DiscardS3 => servers
            .discard_s3
            .as_ref()
            .map_or(0, DiscardServer::put_bytes),
        Dest::Mosquitto | Dest::S3sFs => 0,
    }
}

/// Starts the `spillway` binary for `job` (the Iggy password in its environment), with its
/// `/metrics` on a free loopback port; the process and that address.
pub fn start_engine_metered(
    binary: &Path,
    job: &Job<'_>,
    servers: &Servers,
) -> Result<(EngineProcess, SocketAddr), String> {
    let port = spillway_tests::ports::free_loopback_port().map_err(|e| e.to_string())?;
    let metrics = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    Ok((start_engine_at(binary, job, servers, metrics)?, metrics))
}

fn start_engine_at(
    binary: &Path,
    job: &Job<'_>,
    servers: &Servers,
    metrics: SocketAddr,
) -> Result<EngineProcess, String> {
    let text = config_text(job, servers, metrics)?;
    let password = job.iggy.password().to_owned();
    let env = [(spillway::config::ENV_IGGY_PASSWORD, password.as_str())];
    EngineProcess::start(binary, &text, &env)
}

/// Runs the engine for `job` until Iggy holds the last offset of every partition; checks
/// that the destination got every message.
pub fn run_once(binary: &Path, job: &Job<'_>, servers: &Servers) -> Result<Measure, String> {
    let port = spillway_tests::ports::free_loopback_port().map_err(|e| e.to_string())?;
    let metrics_addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let consumer = TestConsumer::Named(job.name.to_owned());
    let mut watcher = job.iggy.admin().map_err(|e| e.to_string())?;
    let total = job.total();
    let last = job.per_partition - 1;
    let subscriber = match (&servers.mosquitto, job.dest) {
        (Some(m), Dest::Mosquitto) => Some(CountingSubscriber::connect(
            m.addr(),
            Protocol::V5,
            &format!("bench/pipeline/{}", job.name),
            QoS::AtMostOnce,
            &format!("{}-sub", job.name),
        )?),
        _ => None,
    };
    let before = received(job, servers);
    let mut engine = start_engine_at(binary, job, servers, metrics_addr)?;
    let deadline = engine.started + Duration::from_secs(120 + total / 10_000);
    // An S3 run is asked to drain once everything is polled; an MQTT run once it is done.
    let mut signalled = false;
    let mut next_scrape = engine.started;
    let mut exit = None;
    let done = loop {
        let now = Instant::now();
        if now > deadline {
            let tail = engine.log_tail(20);
            return Err(format!(
                "{}: not every offset stored in time; the engine's log:\n{tail}",
                job.name
            ));
        }
        if job.dest.is_s3() && !signalled && now >= next_scrape {
            next_scrape = now + Duration::from_millis(20);
            if metrics::scrape(metrics_addr).is_some_and(|b| {
                metrics::counter(&b, "spillway_messages_in_total", job.name) >= total
            }) {
                engine.terminate();
                signalled = true;
            }
        }
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
            break Instant::now();
        }
        if let Some(e) = engine.try_exit()? {
            exit = Some(e);
            // It drained and exited: the offsets must be stored now.
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
            break e.at;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let wall = done.duration_since(engine.started);
    let exit = match exit {
        Some(e) => e,
        // A second SIGTERM would stop it at once: only wait when it was already asked.
        None if signalled => engine.wait(Instant::now() + Duration::from_secs(90))?,
        None => engine.stop(Duration::from_secs(90))?,
    };
    check_delivery(job, servers, before, subscriber)?;
    Ok(Measure {
        wall,
        cpu: exit.cpu,
        peak_rss: exit.peak_rss,
    })
}

/// Whether the destination holds every message of the run (at least once).
fn check_delivery(
    job: &Job<'_>,
    servers: &Servers,
    before: u64,
    subscriber: Option<CountingSubscriber>,
) -> Result<(), String> {
    let total = job.total();
    let short = |got: u64, what: &str| {
        Err(format!(
            "{}: {what} {got}, fewer than the {total} messages sent",
            job.name
        ))
    };
    match job.dest {
        Dest::Mosquitto => {
            let sub = subscriber.ok_or("no subscriber")?;
            // QoS 0 deliveries trail the PUBACKs a little.
            let until = Instant::now() + Duration::from_secs(10);
            while sub.tally().count() < total && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
            let got = sub.tally().count();
            sub.finish()?;
            if got < total {
                return short(got, "the subscriber received");
            }
        }
        Dest::DiscardMqtt => {
            let got = received(job, servers) - before;
            if got < total {
                return short(got, "the discard broker saw QoS 1 messages:");
            }
        }
        Dest::DiscardS3 => {
            let got = received(job, servers) - before;
            if got < total * job.size as u64 {
                return Err(format!(
                    "{}: the discard endpoint took {got} bytes, fewer than the {} payload bytes sent",
                    job.name,
                    total * job.size as u64
                ));
            }
        }
        Dest::S3sFs => {
            let s3 = servers.s3.as_ref().ok_or("s3s-fs was not started")?;
            let dir = s3.bucket_dir().join(job.name);
            let stored = data::read_objects(&dir, data::Codec::None, false)?;
            let _ = std::fs::remove_dir_all(&dir);
            if stored.lines < total {
                return short(stored.lines, "the objects hold JSON lines:");
            }
        }
    }
    Ok(())
}

/// Creates `stream`/`topic` with `partitions` partitions of `per_partition` JSON messages of
/// `size` bytes.
pub fn fill_topic(
    iggy: &IggyServer,
    stream: &str,
    topic: &str,
    partitions: u32,
    per_partition: u64,
    size: usize,
) -> Result<(), String> {
    let mut admin = iggy.admin().map_err(|e| e.to_string())?;
    admin
        .create_topic(stream, topic, partitions)
        .map_err(|e| e.to_string())?;
    data::fill_sized(&mut admin, stream, topic, partitions, per_partition, size)
}

/// A stream name no earlier run used.
pub fn fresh_stream(iggy: &IggyServer, what: &str) -> Result<String, String> {
    let stream = format!(
        "bench-{what}-{}-{:x}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    );
    let mut admin = iggy.admin().map_err(|e| e.to_string())?;
    admin.create_stream(&stream).map_err(|e| e.to_string())?;
    Ok(stream)
}

/// Runs only these destinations (comma-separated names, e.g. `discard_mqtt,s3s_fs`).
pub const DESTS_ENV: &str = "SPILLWAY_BENCH_PIPELINE_DESTS";
/// Scales the message counts (e.g. `0.2` for a fifth, `4` for four times).
pub const SCALE_ENV: &str = "SPILLWAY_BENCH_PIPELINE_SCALE";

/// The message sizes: (bytes, label, messages per partition in a full run, in a quick one).
const SIZES: [(usize, &str, u64, u64); 2] =
    [(100, "100B", 250_000, 5_000), (1024, "1KB", 50_000, 2_000)];

/// The shard's core: the last allowed one (the control thread takes the first).
fn shard_core() -> usize {
    Machine::detect().cores.last().copied().unwrap_or(0)
}

/// Runs every destination and size; rows and the text report.
pub fn run(quick: bool, progress: &mut dyn FnMut(&str)) -> Result<(Vec<Row>, String), String> {
    let binary = engine_process::binary()?;
    let iggy = crate::harness::iggy()?;
    let runs = if quick { 1 } else { 3 };
    let stream = fresh_stream(&iggy, "pipeline")?;
    let core = [shard_core()];
    let mut rows = Vec::new();
    let mut body = Vec::new();
    let mut seq = 0;
    let only = std::env::var(DESTS_ENV).ok();
    let dests: Vec<Dest> = Dest::EACH
        .into_iter()
        .filter(|d| {
            only.as_deref()
                .is_none_or(|l| l.split(',').any(|x| x.trim() == d.name()))
        })
        .collect();
    let servers = Servers::start(&dests)?;
    let scale = match std::env::var(SCALE_ENV) {
        Ok(v) => v
            .parse::<f64>()
            .ok()
            .filter(|f| *f > 0.0 && f.is_finite())
            .ok_or_else(|| format!("{SCALE_ENV}={v:?}: expected a factor above 0, like 0.5"))?,
        Err(_) => 1.0,
    };
    for (size, label, full, short) in SIZES {
        let per_partition = ((if quick { short } else { full }) as f64 * scale).max(1.0) as u64;
        let topic = format!("events-{label}");
        progress(&format!(
            "filling {PARTITIONS} partitions with {per_partition} messages of {label}"
        ));
        fill_topic(&iggy, &stream, &topic, PARTITIONS, per_partition, size)?;
        for &dest in &dests {
            let mut measures = Vec::new();
            for r in 0..runs {
                progress(&format!("{} {label} run {}/{runs}", dest.name(), r + 1));
                seq += 1;
                let name = format!("pipe{seq}");
                let job = Job {
                    iggy: &iggy,
                    stream: &stream,
                    topic: &topic,
                    partitions: PARTITIONS,
                    per_partition,
                    size,
                    cores: &core,
                    name: &name,
                    dest,
                    extra: "",
                };
                measures.push(
                    run_once(&binary, &job, &servers)
                        .map_err(|e| format!("{} {label}: {e}", dest.name()))?,
                );
            }
            let total = (per_partition * u64::from(PARTITIONS)) as f64;
            let rate = median(
                measures
                    .iter()
                    .map(|m| total / m.wall.as_secs_f64())
                    .collect(),
            );
            let cpu_us = median(
                measures
                    .iter()
                    .map(|m| m.cpu.as_secs_f64() * 1e6 / total)
                    .collect(),
            );
            let rss_mib = median(
                measures
                    .iter()
                    .map(|m| m.peak_rss as f64 / (1024.0 * 1024.0))
                    .collect(),
            );
            let scenario = format!("pipeline_{}_{label}", dest.name());
            let row = |metric, value, unit, better| Row {
                scenario: scenario.clone(),
                metric,
                ours: value,
                peer: f64::NAN,
                peer_name: "-",
                unit,
                better,
            };
            rows.push(row("msgs_per_s", rate, "msgs/s", Better::Higher));
            rows.push(row(
                "MB_per_s",
                rate * size as f64 / 1e6,
                "payload MB/s",
                Better::Higher,
            ));
            rows.push(row(
                "cpu_us_per_msg",
                cpu_us,
                "engine CPU µs/msg",
                Better::Lower,
            ));
            rows.push(row(
                "peak_rss_MiB",
                rss_mib,
                "engine peak RSS MiB",
                Better::Lower,
            ));
            body.push([
                dest.name().to_owned(),
                label.to_owned(),
                format!("{rate:.0}"),
                format!("{:.1}", rate * size as f64 / 1e6),
                format!("{cpu_us:.2}"),
                format!("{rss_mib:.1}"),
            ]);
        }
    }
    if let Ok(mut admin) = iggy.admin() {
        let _ = admin.delete_stream(&stream);
    }
    let head = [
        "destination".to_owned(),
        "size".to_owned(),
        "msgs/s".to_owned(),
        "payload MB/s".to_owned(),
        "engine CPU µs/msg".to_owned(),
        "engine peak RSS MiB".to_owned(),
    ];
    let mut text = format!(
        "\npipeline: {} -> spillway (own process, 1 shard on core {}) -> destination, {PARTITIONS} partitions, median of {runs}, {} cores available\n",
        crate::harness::iggy_name(&iggy),
        core[0],
        Machine::detect().cores.len(),
    );
    text.push_str(&report::text_table(&head, &body, |_| false));
    text.push_str(
        "  MQTT: v5, QoS 1, window 1000 (mosquitto: max_inflight_messages 1000, a QoS 0 subscriber); \
         S3: json_lines, 64 MiB objects, 8 MiB parts, 2 in flight\n  \
         timed from the engine's spawn until Iggy holds every last offset; CPU and peak RSS are \
         the engine process's own (wait4), start-up and drain included\n",
    );
    Ok((rows, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_destination_gets_a_config_the_engine_takes() -> Result<(), String> {
        let iggy = IggyServer::External {
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 8090)),
            username: "iggy".into(),
            password: "not-in-the-file".into(),
        };
        let servers = Servers {
            discard_mqtt: Some(DiscardBroker::start(&[]).map_err(|e| e.to_string())?),
            discard_s3: Some(DiscardServer::start().map_err(|e| e.to_string())?),
            ..Servers::default()
        };
        for dest in [Dest::DiscardMqtt, Dest::DiscardS3] {
            let job = Job {
                iggy: &iggy,
                stream: "s",
                topic: "t",
                partitions: 4,
                per_partition: 10,
                size: 100,
                cores: &[0],
                name: "p1",
                dest,
                // Each destination's own table takes the extra lines.
                extra: if dest.is_s3() {
                    "record_interval = \"1s\"\n"
                } else {
                    "envelope = \"properties\"\n"
                },
            };
            let text = config_text(&job, &servers, SocketAddr::from((Ipv4Addr::LOCALHOST, 9)))?;
            assert!(
                !text.contains("not-in-the-file"),
                "the password stays out of the file"
            );
            let cfg = spillway::config::parse(&text, Path::new("<t>"), &|k| {
                (k == spillway::config::ENV_IGGY_PASSWORD).then(|| "pw".to_owned())
            })
            .map_err(|e| format!("{e}\n{text}"))?;
            assert_eq!(cfg.sinks.len(), 1);
        }
        // A destination whose server is not running is an error, not a panic.
        let job = Job {
            iggy: &iggy,
            stream: "s",
            topic: "t",
            partitions: 1,
            per_partition: 1,
            size: 100,
            cores: &[0],
            name: "p2",
            dest: Dest::Mosquitto,
            extra: "",
        };
        assert!(config_text(&job, &servers, SocketAddr::from((Ipv4Addr::LOCALHOST, 9))).is_err());
        Ok(())
    }
}
