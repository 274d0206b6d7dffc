//! `spillway-first-run`: the demo behind `scripts/first-run.sh`.
//!
//! It starts a mosquitto broker and an s3s-fs store (the harness's servers, on free loopback
//! ports in temporary directories), subscribes to the demo topic, runs the `spillway` binary
//! with the `generate` source feeding one MQTT sink and one S3 sink, shows a live progress line
//! from the engine's `/metrics` endpoint, and finally checks that every generated message was
//! received by the subscriber and written to an object.
//!
//! Exit status: 0 when the three counts agree, 1 when one is off, 2 when the run itself failed.

use std::collections::{BTreeMap, HashSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use spillway_tests::ports::free_loopback_port;
use spillway_tests::{Mosquitto, MosquittoOpts, S3Server, Subscriber, SubscriberOpts};

const USAGE: &str = "usage: spillway-first-run [--messages N] [--engine PATH]

Runs the spillway engine with the generate source (no Iggy server needed), delivering to a
local mosquitto and a local s3s-fs it starts, and checks that every message arrived.

  --messages N    messages per sink (default 200000; 100 bytes each over 4 partitions)
  --engine PATH   the spillway binary (default: next to this program, then target/release,
                  then target/debug)
  --iggy H:P      read from an Iggy server instead (not supported yet)";

const PARTITIONS: u32 = 4;
const SIZE: u64 = 100;
/// The MQTT topic template: every message gets its own topic, so duplicates can be told apart.
const TOPIC: &str = "spillway/demo/{partition}/{offset}";
const FILTER: &str = "spillway/demo/#";

struct Args {
    messages: u64,
    engine: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("first-run: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("\nfirst-run: {e}");
            ExitCode::from(2)
        }
    }
}

/// The options; `None` when help was asked for.
fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut args = Args {
        messages: 200_000,
        engine: None,
    };
    let mut iggy = std::env::var("SPILLWAY_IGGY_ADDRESS")
        .ok()
        .filter(|a| !a.is_empty());
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--messages" => {
                let v = value("--messages")?;
                args.messages = v
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or(format!("--messages {v:?}: expected a positive integer"))?;
            }
            "--engine" => args.engine = Some(PathBuf::from(value("--engine")?)),
            "--iggy" => iggy = Some(value("--iggy")?),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if let Some(addr) = iggy {
        return Err(format!(
            "reading from an Iggy server ({addr}, from --iggy or SPILLWAY_IGGY_ADDRESS) is not \
             supported yet; the first run uses the built-in generate source (unset \
             SPILLWAY_IGGY_ADDRESS), and examples/iggy-to-mqtt.toml shows an Iggy config"
        ));
    }
    Ok(Some(args))
}

/// The engine binary: `--engine`, else next to this program, else under `target/`.
fn find_engine(given: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(path) = given {
        return if path.is_file() {
            Ok(path.to_path_buf())
        } else {
            Err(format!("--engine {}: no such file", path.display()))
        };
    }
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
    {
        candidates.push(dir.join("spillway"));
    }
    candidates.push(PathBuf::from("target/release/spillway"));
    candidates.push(PathBuf::from("target/debug/spillway"));
    candidates.into_iter().find(|p| p.is_file()).ok_or_else(|| {
        "the spillway binary was not found next to this program or under target/; build it \
         with `cargo build --release -p spillway` or pass --engine PATH"
            .to_owned()
    })
}

fn run(args: &Args) -> Result<bool, String> {
    let engine = find_engine(args.engine.as_deref())?;
    let n = args.messages;
    println!("first-run: starting mosquitto and s3s-fs on loopback ports");
    // A large in-flight window on the broker, both ways, so QoS 1 is not held to 20 messages.
    let broker = Mosquitto::start(MosquittoOpts::new().max_inflight_messages(1000))
        .map_err(|e| format!("starting mosquitto: {e}"))?;
    let store = S3Server::start().map_err(|e| format!("starting s3s-fs: {e}"))?;
    let sub = Subscriber::connect(broker.addr(), SubscriberOpts::v5(FILTER).qos(1))
        .map_err(|e| format!("subscribing to {FILTER} on mosquitto: {e}"))?;
    let dir = tempfile::Builder::new()
        .prefix("spillway-first-run-")
        .tempdir()
        .map_err(|e| format!("creating a temporary directory: {e}"))?;
    let metrics_port = free_loopback_port().map_err(|e| format!("finding a free port: {e}"))?;
    let metrics = SocketAddr::from(([127, 0, 0, 1], metrics_port));

    let config_path = dir.path().join("first-run.toml");
    let config = config(n, &broker, &store, metrics);
    std::fs::write(&config_path, &config)
        .map_err(|e| format!("writing {}: {e}", config_path.display()))?;
    let log_path = dir.path().join("spillway.log");
    let log = std::fs::File::create(&log_path)
        .map_err(|e| format!("creating {}: {e}", log_path.display()))?;
    println!(
        "first-run: {} run: {n} messages of {SIZE} B over {PARTITIONS} partitions to MQTT \
         (QoS 1, {}) and to S3 ({}, json_lines)",
        engine.display(),
        broker.host_port(),
        store.endpoint()
    );
    let mut child = Command::new(&engine)
        .arg("run")
        .arg("--config")
        .arg(&config_path)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", engine.display()))?;

    // Generous: even a debug engine moves thousands of messages a second.
    let timeout = Duration::from_secs(120 + n / 1000);
    let started = Instant::now();
    // Rates are measured between two scrapes; the first one against zero at the start.
    let mut last = (started, Sample::default());
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => return Err(format!("waiting for the engine: {e}")),
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "the engine did not finish within {timeout:?}; its log:\n{}",
                log_tail(&log_path)
            ));
        }
        if let Some(now) = scrape(metrics) {
            let at = Instant::now();
            let secs = at.duration_since(last.0).as_secs_f64().max(1e-3);
            let msgs = now
                .total_confirmed()
                .saturating_sub(last.1.total_confirmed());
            let rate = msgs as f64 / secs;
            let mbs = now.bytes.saturating_sub(last.1.bytes) as f64 / secs / 1e6;
            let per_sink: Vec<String> = now
                .confirmed
                .iter()
                .map(|(sink, c)| format!("{sink} {c}/{n}"))
                .collect();
            print!(
                "\r{:>6.1} s  {rate:>9.0} msgs/s  {mbs:>7.1} MB/s  in flight {:>6}  confirmed: {}   ",
                started.elapsed().as_secs_f64(),
                now.in_flight,
                per_sink.join(", ")
            );
            let _ = std::io::stdout().flush();
            last = (at, now);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    println!();
    if !status.success() {
        return Err(format!(
            "the engine exited with {status}; its log:\n{}",
            log_tail(&log_path)
        ));
    }
    println!(
        "first-run: the engine finished in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // Deliveries to the subscriber may trail the engine's PUBACKs by a moment.
    let _ = sub.wait_for(n as usize, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(300));
    let received = sub.messages();
    let distinct = received
        .iter()
        .map(|m| m.topic.as_str())
        .collect::<HashSet<_>>()
        .len() as u64;
    let duplicates = received.len() as u64 - distinct;
    let (objects, lines) = count_lines(&store.bucket_dir())?;

    println!("first-run: summary");
    println!("  generated per sink   {n}");
    println!("  MQTT subscriber      {distinct} distinct messages ({duplicates} duplicates)");
    println!("  S3 objects           {lines} JSON lines in {objects} objects");
    let mut off = Vec::new();
    if distinct != n {
        off.push(format!("the subscriber received {distinct}, not {n}"));
    }
    if lines != n {
        off.push(format!("the S3 objects hold {lines} lines, not {n}"));
    }
    if off.is_empty() {
        println!("first-run: OK: sent {n} = received {distinct} = in objects {lines}");
        Ok(true)
    } else {
        println!("first-run: MISMATCH: {}", off.join("; "));
        Ok(false)
    }
    // The broker, the store, the subscriber and the directory are dropped here: the servers
    // are killed and their temporary directories removed.
}

/// The engine config: the generate source feeding one MQTT sink and one S3 sink.
fn config(n: u64, broker: &Mosquitto, store: &S3Server, metrics: SocketAddr) -> String {
    let generate = format!(
        "[sink.generate]\npartitions = {PARTITIONS}\nrate = 0\nsize = {SIZE}\nmessages = {n}\n"
    );
    format!(
        r#"# Written by spillway-first-run.
[metrics]
address = "{metrics}"
log_interval = "0s"

[[sink]]
name = "mqtt"
type = "mqtt"
source = "generate"

[sink.mqtt]
address = "{mqtt}"
protocol = "5"
max_inflight = 1000
qos = 1
topic = "{TOPIC}"

{generate}
[[sink]]
name = "s3"
type = "s3"
source = "generate"

[sink.s3]
bucket = "{bucket}"
endpoint = "{endpoint}"
region = "{region}"
access_key_id = "{ak}"
secret_access_key = "{sk}"
format = "json_lines"
idle_flush = "1s"

{generate}"#,
        mqtt = broker.host_port(),
        bucket = store.bucket(),
        endpoint = store.endpoint(),
        region = store.region(),
        ak = store.access_key(),
        sk = store.secret_key(),
    )
}

/// What one `/metrics` scrape says, summed over shards.
#[derive(Default)]
struct Sample {
    /// Confirmed messages per sink.
    confirmed: BTreeMap<String, u64>,
    /// Confirmed payload bytes, all sinks.
    bytes: u64,
    /// Messages in flight, all sinks.
    in_flight: u64,
}

impl Sample {
    fn total_confirmed(&self) -> u64 {
        self.confirmed.values().sum()
    }
}

/// Reads the engine's Prometheus endpoint; `None` while it is not up (or already gone).
fn scrape(addr: SocketAddr) -> Option<Sample> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(300)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    if !head.starts_with("HTTP/1.1 200") {
        return None;
    }
    let mut sample = Sample::default();
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<u64>() else {
            continue;
        };
        let name = series.split('{').next().unwrap_or("");
        let sink = series
            .split_once("sink=\"")
            .and_then(|(_, rest)| rest.split('"').next())
            .unwrap_or("");
        match name {
            "spillway_confirmed_total" => {
                *sample.confirmed.entry(sink.to_owned()).or_default() += value;
            }
            "spillway_confirmed_bytes_total" => sample.bytes += value,
            "spillway_in_flight_messages" => sample.in_flight += value,
            _ => {}
        }
    }
    Some(sample)
}

/// (objects, lines) under s3s-fs's bucket directory, leaving out s3s-fs's own bookkeeping and
/// the sink's `.spillway/` marker objects.
fn count_lines(bucket_dir: &Path) -> Result<(u64, u64), String> {
    let files = spillway_tests::object_files(bucket_dir)
        .map_err(|e| format!("listing {}: {e}", bucket_dir.display()))?;
    let mut lines = 0;
    for path in &files {
        let body = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        lines += body
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .count() as u64;
    }
    Ok((files.len() as u64, lines))
}

/// The last lines of the engine's log.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
