//! `spillway-first-run`: the demo behind `scripts/first-run.sh`.
//!
//! It starts a mosquitto broker and moto's S3 (the harness's servers, on free loopback ports,
//! mosquitto in a temporary directory; moto installs in seconds where the tests' s3s-fs is
//! compiled for minutes), subscribes to the demo topic, runs the `spillway` binary
//! feeding one MQTT sink and one S3 sink, shows a live progress line from the engine's
//! `/metrics` endpoint, and finally checks that every message was received by the subscriber
//! and written to an object (read back through S3's ListObjectsV2 and GetObject).
//!
//! Where the messages come from:
//! - By default, the engine's `generate` source (no Iggy server needed). The engine exits by
//!   itself once every generated message is confirmed.
//! - With `--iggy HOST:PORT` (or `SPILLWAY_IGGY_ADDRESS`), a real Iggy server. The program logs
//!   in as `SPILLWAY_IGGY_USERNAME` / `SPILLWAY_IGGY_PASSWORD` (default `iggy` / `iggy`, the
//!   server's default root user), creates a fresh stream (`spillway-first-run-<pid>-<ms>`) with
//!   a topic of [`IGGY_PARTITIONS`] partitions, sends the messages into it (JSON payloads, in
//!   batches of [`SEND_BATCH`]) and runs the engine with the Iggy source; the password reaches
//!   the engine through `SPILLWAY_IGGY_PASSWORD`, never the config file. An engine reading Iggy
//!   does not end by itself: once both sinks have stored the last offset of every partition in
//!   Iggy (each sink is its own Iggy consumer, named after the sink), the program stops it with
//!   SIGTERM and expects exit 0. The stream is deleted at the end (best effort).
//!
//! Exit status: 0 when the three counts agree, 1 when one is off, 2 when the run itself failed.

use std::collections::{BTreeMap, HashSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use secrecy::{ExposeSecret, SecretString};
use spillway_tests::ports::free_loopback_port;
use spillway_tests::{
    IggyAdmin, Mosquitto, MosquittoOpts, MotoS3, Subscriber, SubscriberOpts, TestConsumer,
    TestMessage,
};

const USAGE: &str = "usage: spillway-first-run [--messages N] [--engine PATH] [--iggy HOST:PORT]

Runs the spillway engine feeding one MQTT sink and one S3 sink, delivering to a local
mosquitto and a local S3 (moto) it starts, and checks that every message arrived. By default the
messages come from the engine's generate source (no Iggy server needed).

  --messages N      messages per sink (default 200000; 100 bytes each)
  --engine PATH     the spillway binary (default: next to this program, then target/release,
                    then target/debug)
  --iggy HOST:PORT  read from this Iggy server instead (or set SPILLWAY_IGGY_ADDRESS): log in
                    as SPILLWAY_IGGY_USERNAME / SPILLWAY_IGGY_PASSWORD (default iggy / iggy),
                    send the messages into a new stream (2 partitions), run the engine on it,
                    stop it once both sinks stored their last offsets, delete the stream";

/// The engine's environment overrides (`engine/src/config/mod.rs`), read here too.
const ENV_IGGY_ADDRESS: &str = "SPILLWAY_IGGY_ADDRESS";
const ENV_IGGY_USERNAME: &str = "SPILLWAY_IGGY_USERNAME";
const ENV_IGGY_PASSWORD: &str = "SPILLWAY_IGGY_PASSWORD";
const ENV_IGGY_TOKEN: &str = "SPILLWAY_IGGY_TOKEN";
/// Iggy's default root user.
const DEFAULT_IGGY_USER: (&str, &str) = ("iggy", "iggy");

/// Partitions of the generate source.
const PARTITIONS: u32 = 4;
/// Partitions of the topic created on an Iggy server.
const IGGY_PARTITIONS: u32 = 2;
/// The topic created in the fresh stream.
const IGGY_TOPIC: &str = "demo";
/// Messages per send request to Iggy.
const SEND_BATCH: u64 = 1000;
const SIZE: u64 = 100;
/// The sink names. With the Iggy source each is also the Iggy consumer its offsets are stored
/// under (the engine's default when a sink sets no `consumer`).
const MQTT_SINK: &str = "mqtt";
const S3_SINK: &str = "s3";
/// The MQTT topic template: every message gets its own topic, so duplicates can be told apart.
const TOPIC: &str = "spillway/demo/{partition}/{offset}";
const FILTER: &str = "spillway/demo/#";
/// How long the engine may take to exit after SIGTERM (its default `shutdown_timeout` is 10 s).
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

struct Args {
    messages: u64,
    engine: Option<PathBuf>,
    iggy: Option<IggyTarget>,
}

/// The Iggy server to read from instead of the generate source, and who to log in as. The
/// password stays in a [`SecretString`] (its `Debug` is redacted) and is only handed to the
/// login request and to the engine's environment.
struct IggyTarget {
    /// `host:port`, as given.
    address: String,
    username: String,
    password: SecretString,
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
    match run(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("\nfirst-run: {e}");
            ExitCode::from(2)
        }
    }
}

/// A variable of the environment, `None` when unset or empty.
fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The options; `None` when help was asked for.
fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut args = Args {
        messages: 200_000,
        engine: None,
        iggy: None,
    };
    let mut iggy = env_var(ENV_IGGY_ADDRESS);
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
    if let Some(address) = iggy {
        let address = address.trim().to_owned();
        if address.rsplit_once(':').is_none_or(|(host, port)| {
            host.is_empty() || port.is_empty() || port.parse::<u16>().is_err()
        }) {
            return Err(format!(
                "--iggy / {ENV_IGGY_ADDRESS} {address:?}: expected HOST:PORT, such as \
                 127.0.0.1:8090"
            ));
        }
        args.iggy = Some(IggyTarget {
            address,
            username: env_var(ENV_IGGY_USERNAME).unwrap_or_else(|| DEFAULT_IGGY_USER.0.to_owned()),
            password: SecretString::from(
                env_var(ENV_IGGY_PASSWORD).unwrap_or_else(|| DEFAULT_IGGY_USER.1.to_owned()),
            ),
        });
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

fn run(args: Args) -> Result<bool, String> {
    let engine = find_engine(args.engine.as_deref())?;
    let n = args.messages;
    // With an Iggy server: the stream first, so an unreachable server or a wrong password
    // fails before anything else is started.
    let mut demo = match args.iggy {
        Some(target) => Some(IggyDemo::create(target, n)?),
        None => None,
    };
    let result = deliver(&engine, n, demo.as_mut());
    if let Some(demo) = demo {
        demo.delete();
    }
    result
}

/// Starts the servers and the engine, follows its progress, stops it when it is done (with an
/// Iggy source) and checks the counts. The servers, the subscriber and the temporary
/// directory are dropped on return (the servers are killed and their directories removed),
/// and so is the engine if it still runs.
fn deliver(engine: &Path, n: u64, mut demo: Option<&mut IggyDemo>) -> Result<bool, String> {
    println!("first-run: starting mosquitto and moto's S3 on loopback ports");
    // A large in-flight window on the broker, both ways, so QoS 1 is not held to 20 messages.
    let broker = Mosquitto::start(MosquittoOpts::new().max_inflight_messages(1000))
        .map_err(|e| format!("starting mosquitto: {e}"))?;
    let store = MotoS3::start().map_err(|e| format!("starting moto's S3: {e}"))?;
    let sub = Subscriber::connect(broker.addr(), SubscriberOpts::v5(FILTER).qos(1))
        .map_err(|e| format!("subscribing to {FILTER} on mosquitto: {e}"))?;
    let dir = tempfile::Builder::new()
        .prefix("spillway-first-run-")
        .tempdir()
        .map_err(|e| format!("creating a temporary directory: {e}"))?;
    let metrics_port = free_loopback_port().map_err(|e| format!("finding a free port: {e}"))?;
    let metrics = SocketAddr::from(([127, 0, 0, 1], metrics_port));

    let config_path = dir.path().join("first-run.toml");
    let config = config(n, &broker, &store, metrics, demo.as_deref());
    std::fs::write(&config_path, &config)
        .map_err(|e| format!("writing {}: {e}", config_path.display()))?;
    let log_path = dir.path().join("spillway.log");
    let log = std::fs::File::create(&log_path)
        .map_err(|e| format!("creating {}: {e}", log_path.display()))?;
    let from = match demo.as_deref() {
        None => format!("{n} generated messages of {SIZE} B over {PARTITIONS} partitions"),
        Some(d) => format!(
            "{n} messages from Iggy at {} (stream {}, topic {IGGY_TOPIC}, {IGGY_PARTITIONS} \
             partitions)",
            d.target.address, d.stream
        ),
    };
    println!(
        "first-run: {} run: {from} to MQTT (QoS 1, {}) and to S3 ({}, json_lines)",
        engine.display(),
        broker.host_port(),
        store.endpoint()
    );
    let mut command = Command::new(engine);
    command
        .arg("run")
        .arg("--config")
        .arg(&config_path)
        .env("NO_COLOR", "1")
        // The engine reads these on top of the file; set them all here so that whatever the
        // caller's environment holds, the engine logs in as this program did.
        .env_remove(ENV_IGGY_ADDRESS)
        .env_remove(ENV_IGGY_USERNAME)
        .env_remove(ENV_IGGY_PASSWORD)
        .env_remove(ENV_IGGY_TOKEN);
    if let Some(d) = demo.as_deref() {
        command
            .env(ENV_IGGY_ADDRESS, &d.target.address)
            .env(ENV_IGGY_USERNAME, &d.target.username)
            .env(ENV_IGGY_PASSWORD, d.target.password.expose_secret());
    }
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", engine.display()))?;
    let mut engine_process = EngineProcess(child);
    let child = &mut engine_process.0;

    // Generous: even a debug engine moves thousands of messages a second.
    let timeout = Duration::from_secs(120 + n / 1000);
    let started = Instant::now();
    // Rates are measured between two scrapes; the first one against zero at the start.
    let mut last = (started, Sample::default());
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) if demo.is_none() => break status,
            Ok(Some(status)) => {
                println!();
                return Err(format!(
                    "the engine exited ({status}) before both sinks stored their last \
                     offsets; its log:\n{}",
                    log_tail(&log_path)
                ));
            }
            Ok(None) => {}
            Err(e) => return Err(format!("waiting for the engine: {e}")),
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            let stored = match demo.as_deref_mut() {
                Some(d) => format!(" (stored offsets: {})", d.stored_report()),
                None => String::new(),
            };
            println!();
            return Err(format!(
                "the engine did not finish within {timeout:?}{stored}; its log:\n{}",
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
        // With an Iggy source the engine runs until stopped: stop it once both sinks have
        // stored (committed to Iggy) the last offset of every partition.
        if let Some(d) = demo.as_deref_mut()
            && d.all_stored()?
        {
            println!();
            println!(
                "first-run: both sinks stored the last offset of every partition after {:.1} s; \
                 stopping the engine (SIGTERM)",
                started.elapsed().as_secs_f64()
            );
            break terminate(child, STOP_TIMEOUT)
                .map_err(|e| format!("{e}; its log:\n{}", log_tail(&log_path)))?;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    if demo.is_none() {
        println!();
    }
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
    let (objects, lines) = count_lines(&store)?;

    println!("first-run: summary");
    match demo.as_deref() {
        None => println!("  generated per sink   {n}"),
        Some(d) => println!(
            "  sent to Iggy         {n} (Iggy at {}, stream {}, topic {IGGY_TOPIC})",
            d.target.address, d.stream
        ),
    }
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
}

/// The engine process; killed and reaped on drop when it still runs (a run that failed).
struct EngineProcess(Child);

impl Drop for EngineProcess {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Sends SIGTERM (with the `kill` command) and waits up to `timeout` for the engine to exit.
fn terminate(child: &mut Child, timeout: Duration) -> Result<ExitStatus, String> {
    if let Ok(Some(status)) = child.try_wait() {
        return Ok(status);
    }
    let sent = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .map_err(|e| format!("sending SIGTERM to the engine: {e}"))?;
    if !sent.success() {
        return Err(format!(
            "sending SIGTERM to the engine: kill exited with {sent}"
        ));
    }
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) if Instant::now() >= deadline => {
                return Err(format!(
                    "the engine did not exit within {timeout:?} of SIGTERM"
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(format!("waiting for the engine: {e}")),
        }
    }
}

/// The stream this program created on the Iggy server, and where each partition ends.
struct IggyDemo {
    target: IggyTarget,
    admin: IggyAdmin,
    stream: String,
    /// `(partition, offset of its last message)` of every partition that holds messages.
    last_offsets: Vec<(u32, u64)>,
}

impl IggyDemo {
    /// Logs in, creates a fresh stream and topic and sends `n` messages into it. When sending
    /// fails, the stream is deleted again.
    fn create(target: IggyTarget, n: u64) -> Result<IggyDemo, String> {
        let addr = resolve(&target.address)?;
        let resolved = if addr.to_string() == target.address {
            String::new()
        } else {
            format!(" ({addr})")
        };
        println!(
            "first-run: using the Iggy server at {}{resolved}, user {}",
            target.address, target.username
        );
        let admin = IggyAdmin::connect(addr, &target.username, target.password.expose_secret())
            .map_err(|e| {
                format!(
                    "logging in to Iggy at {} as {} (credentials from {ENV_IGGY_USERNAME} / \
                     {ENV_IGGY_PASSWORD}, default iggy / iggy): {e}",
                    target.address, target.username
                )
            })?;
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let stream = format!("spillway-first-run-{}-{millis}", std::process::id());
        let mut demo = IggyDemo {
            target,
            admin,
            stream,
            last_offsets: Vec::new(),
        };
        demo.admin
            .create_stream(&demo.stream)
            .map_err(|e| format!("creating stream {} on Iggy: {e}", demo.stream))?;
        match demo.fill(n) {
            Ok(()) => Ok(demo),
            Err(e) => {
                demo.delete();
                Err(e)
            }
        }
    }

    /// Creates the topic and sends `n` messages (ids 1..=n, JSON payloads) spread evenly over
    /// its partitions, then reads back where each partition ends.
    fn fill(&mut self, n: u64) -> Result<(), String> {
        self.admin
            .create_topic(&self.stream, IGGY_TOPIC, IGGY_PARTITIONS)
            .map_err(|e| format!("creating topic {IGGY_TOPIC} in stream {}: {e}", self.stream))?;
        let started = Instant::now();
        let parts = u64::from(IGGY_PARTITIONS);
        let mut seq = 0u64;
        for partition in 0..IGGY_PARTITIONS {
            let mut left = n / parts + u64::from(u64::from(partition) < n % parts);
            while left > 0 {
                let count = left.min(SEND_BATCH);
                let batch: Vec<TestMessage> = (0..count)
                    .map(|_| {
                        seq += 1;
                        TestMessage::new(u128::from(seq), payload(seq, partition))
                    })
                    .collect();
                self.admin
                    .send(&self.stream, IGGY_TOPIC, partition, &batch)
                    .map_err(|e| {
                        format!(
                            "sending messages to partition {partition} of {}/{IGGY_TOPIC}: {e}",
                            self.stream
                        )
                    })?;
                left -= count;
            }
        }
        let heads = self
            .admin
            .partition_heads(&self.stream, IGGY_TOPIC)
            .map_err(|e| format!("reading topic {}/{IGGY_TOPIC}: {e}", self.stream))?;
        let held: u64 = heads.iter().map(|&(_, _, count)| count).sum();
        if held != n {
            return Err(format!(
                "sent {n} messages to {}/{IGGY_TOPIC}, but its partitions hold {held}",
                self.stream
            ));
        }
        self.last_offsets = heads
            .iter()
            .filter(|&&(_, _, count)| count > 0)
            .map(|&(partition, last, _)| (partition, last))
            .collect();
        println!(
            "first-run: created stream {} (topic {IGGY_TOPIC}, {IGGY_PARTITIONS} partitions) and \
             sent {n} messages into it in {:.1} s",
            self.stream,
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }

    /// Whether both sinks have stored the last offset of every partition.
    fn all_stored(&mut self) -> Result<bool, String> {
        for sink in [MQTT_SINK, S3_SINK] {
            for i in 0..self.last_offsets.len() {
                let (partition, last) = self.last_offsets[i];
                if self.stored(sink, partition)?.is_none_or(|s| s < last) {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// What sink `sink` (its Iggy consumer of the same name) stored for `partition`.
    fn stored(&mut self, sink: &str, partition: u32) -> Result<Option<u64>, String> {
        self.admin
            .stored_offset(
                &TestConsumer::Named(sink.to_owned()),
                &self.stream,
                IGGY_TOPIC,
                partition,
            )
            .map_err(|e| {
                format!(
                    "reading the offset sink {sink} stored for partition {partition} of {}/\
                     {IGGY_TOPIC}: {e}",
                    self.stream
                )
            })
    }

    /// The stored offsets against the last ones, for an error message.
    fn stored_report(&mut self) -> String {
        let mut out = Vec::new();
        for sink in [MQTT_SINK, S3_SINK] {
            for i in 0..self.last_offsets.len() {
                let (partition, last) = self.last_offsets[i];
                let stored = match self.stored(sink, partition) {
                    Ok(Some(offset)) => offset.to_string(),
                    Ok(None) => "none".to_owned(),
                    Err(_) => "unknown".to_owned(),
                };
                out.push(format!("{sink} partition {partition}: {stored} of {last}"));
            }
        }
        out.join(", ")
    }

    /// Deletes the stream (best effort: a failure is reported, not fatal).
    fn delete(mut self) {
        match self.admin.delete_stream(&self.stream) {
            Ok(()) => println!(
                "first-run: deleted stream {} from the Iggy server at {}",
                self.stream, self.target.address
            ),
            Err(e) => eprintln!(
                "first-run: could not delete stream {} from the Iggy server at {} ({e}); \
                 delete it by hand",
                self.stream, self.target.address
            ),
        }
    }
}

/// The first address `host:port` resolves to.
fn resolve(address: &str) -> Result<SocketAddr, String> {
    address
        .to_socket_addrs()
        .map_err(|e| format!("resolving the Iggy address {address}: {e}"))?
        .next()
        .ok_or_else(|| format!("resolving the Iggy address {address}: no address"))
}

/// A JSON payload of [`SIZE`] bytes (padded) naming its sequence number and partition.
fn payload(seq: u64, partition: u32) -> Vec<u8> {
    let mut text =
        format!(r#"{{"seq":{seq},"partition":{partition},"from":"spillway-first-run","pad":""#);
    let end = "\"}";
    let size = usize::try_from(SIZE).unwrap_or(100);
    while text.len() + end.len() < size {
        text.push('.');
    }
    text.push_str(end);
    text.into_bytes()
}

/// `value` as a TOML basic string (quoted, `"`, `\` and control characters escaped).
fn toml_string(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The engine config: one MQTT sink and one S3 sink, both fed by the generate source, or both
/// reading the demo stream on Iggy (the password is not in the file: the engine reads it from
/// `SPILLWAY_IGGY_PASSWORD`, which [`deliver`] sets).
fn config(
    n: u64,
    broker: &Mosquitto,
    store: &MotoS3,
    metrics: SocketAddr,
    demo: Option<&IggyDemo>,
) -> String {
    // `iggy`: the [iggy] table; `source`: keys of each [[sink]]; `tables`: a table after each
    // sink's own.
    let (iggy, source, tables) = match demo {
        None => (
            String::new(),
            "source = \"generate\"\n".to_owned(),
            format!(
                "\n[sink.generate]\npartitions = {PARTITIONS}\nrate = 0\nsize = {SIZE}\n\
                 messages = {n}\n"
            ),
        ),
        Some(d) => {
            let partitions: Vec<String> = (0..IGGY_PARTITIONS).map(|p| p.to_string()).collect();
            (
                format!(
                    "[iggy]\naddress = {}\nusername = {}\n# The password comes from \
                     {ENV_IGGY_PASSWORD}, set by spillway-first-run.\n\n",
                    toml_string(&d.target.address),
                    toml_string(&d.target.username)
                ),
                format!(
                    "# Offsets are stored under the Iggy consumer named after the sink.\n\
                     stream = {}\ntopic = \"{IGGY_TOPIC}\"\npartitions = [{}]\n\
                     start = \"earliest\"\n",
                    toml_string(&d.stream),
                    partitions.join(", ")
                ),
                String::new(),
            )
        }
    };
    format!(
        r#"# Written by spillway-first-run.
{iggy}[metrics]
address = "{metrics}"
log_interval = "0s"

[[sink]]
name = "{MQTT_SINK}"
type = "mqtt"
{source}
[sink.mqtt]
address = "{mqtt}"
protocol = "5"
max_inflight = 1000
qos = 1
topic = "{TOPIC}"
{tables}
[[sink]]
name = "{S3_SINK}"
type = "s3"
{source}
[sink.s3]
bucket = "{bucket}"
endpoint = "{endpoint}"
region = "{region}"
access_key_id = "{ak}"
secret_access_key = "{sk}"
format = "json_lines"
idle_flush = "1s"
{tables}"#,
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

/// (objects, lines) in the store's bucket, read back through S3 (ListObjectsV2 and GetObject),
/// leaving out the sink's `.spillway/` marker objects.
fn count_lines(store: &MotoS3) -> Result<(u64, u64), String> {
    let objects = store
        .objects()
        .map_err(|e| format!("reading the objects back: {e}"))?;
    let lines = objects
        .iter()
        .map(|(_, body)| {
            body.split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
                .count() as u64
        })
        .sum();
    Ok((objects.len() as u64, lines))
}

/// The last lines of the engine's log.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
