//! Helpers for the engine's end-to-end tests: the `spillway` binary as a child process, its
//! config, and the JSON lines the file sink writes.
//!
//! Iggy is the real server the harness starts for each test (`IggyServer::start`; the stand-in
//! only where no server binary is at hand, or where a test says why); every test creates its
//! own stream.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use spillway_tests::{IggyAdmin, IggyServer, TestConsumer, TestMessage};

/// The engine as a child process.
pub struct Engine {
    child: Child,
    log: PathBuf,
}

impl Engine {
    /// Writes `config` to `dir/name.toml` and starts `spillway run` on it.
    pub fn start(dir: &Path, name: &str, config: &str) -> Engine {
        Self::start_with_env(dir, name, config, &[])
    }

    /// As [`Engine::start`], with extra environment variables.
    pub fn start_with_env(dir: &Path, name: &str, config: &str, env: &[(&str, &str)]) -> Engine {
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(&path, config).unwrap();
        let log = dir.join(format!("{name}.log"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_spillway"));
        cmd.arg("run")
            .arg("--config")
            .arg(&path)
            .env("SPILLWAY_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().unwrap();
        Engine { child, log }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal (`TERM`, `INT`, `KILL`).
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{sig} failed");
    }

    /// Waits for the process to end.
    pub fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Its log (stderr) so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `spillway check` on a config; returns (exit code, stdout, stderr).
pub fn check(dir: &Path, name: &str, config: &str) -> (i32, String, String) {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, config).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .arg("check")
        .arg("--config")
        .arg(&path)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Waits until `f` is true.
pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out waiting for {what}");
}

/// A stream with one topic of `partitions` partitions, unique to this test.
pub struct Topic {
    pub stream: String,
    pub topic: String,
    pub partitions: u32,
}

/// Creates a unique stream and topic on `server`.
pub fn topic(server: &IggyServer, test: &str, partitions: u32) -> Topic {
    let stream = format!("spw-{test}-{:x}", fastrand::u32(..));
    let mut admin = server.admin().unwrap();
    admin.create_stream(&stream).unwrap();
    admin.create_topic(&stream, "events", partitions).unwrap();
    Topic {
        stream,
        topic: "events".to_owned(),
        partitions,
    }
}

/// Sends `count` messages to `partition`, payloads `"<tag>-p<partition>-<n>"` (JSON strings
/// for even n, plain text for odd n), ids `n + 1`, a header on each.
pub fn send(admin: &mut IggyAdmin, t: &Topic, partition: u32, tag: &str, from: u64, count: u64) {
    let mut batch = Vec::new();
    for n in from..from + count {
        let text = format!("{tag}-p{partition}-{n}");
        let payload = if n % 2 == 0 {
            format!("{{\"text\":\"{text}\"}}")
        } else {
            text
        };
        batch.push(
            TestMessage::new(u128::from(n) + 1, payload.into_bytes())
                .with_header("n", &n.to_string()),
        );
        if batch.len() == 100 {
            admin.send(&t.stream, &t.topic, partition, &batch).unwrap();
            batch.clear();
        }
    }
    if !batch.is_empty() {
        admin.send(&t.stream, &t.topic, partition, &batch).unwrap();
    }
}

/// The stored offset of a named consumer.
pub fn stored(admin: &mut IggyAdmin, t: &Topic, consumer: &str, partition: u32) -> Option<u64> {
    admin
        .stored_offset(
            &TestConsumer::Named(consumer.to_owned()),
            &t.stream,
            &t.topic,
            partition,
        )
        .unwrap()
}

/// The offset consumer group `group` stored for `t`'s `partition`.
pub fn group_stored(admin: &mut IggyAdmin, t: &Topic, group: &str, partition: u32) -> Option<u64> {
    admin
        .stored_offset(
            &TestConsumer::Group(group.to_owned()),
            &t.stream,
            &t.topic,
            partition,
        )
        .unwrap()
}

/// One line of the file sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub partition: u32,
    pub offset: u64,
    pub id: String,
    pub payload: String,
    pub header_n: Option<String>,
}

/// Reads the JSON lines of a file sink (a partial last line, being written, is skipped).
pub fn lines(path: &Path) -> Vec<Line> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            let payload = match &v["payload"] {
                serde_json::Value::String(s) => s.clone(),
                other => other["text"]
                    .as_str()
                    .map(|s| format!("json:{s}"))
                    .unwrap_or_default(),
            };
            Line {
                partition: v["partition"].as_u64().unwrap() as u32,
                offset: v["offset"].as_u64().unwrap(),
                id: v["id"].as_str().unwrap_or_default().to_owned(),
                payload,
                header_n: v["headers"]["n"].as_str().map(str::to_owned),
            }
        })
        .collect()
}

/// Lines grouped by partition, in file order.
pub fn by_partition(lines: &[Line]) -> BTreeMap<u32, Vec<u64>> {
    let mut out: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for l in lines {
        out.entry(l.partition).or_default().push(l.offset);
    }
    out
}

/// A file-sink config reading `partitions` of `t` (or a consumer group).
pub fn config(
    server: &IggyServer,
    t: &Topic,
    source: &str,
    out: &Path,
    sink_extra: &str,
    file_extra: &str,
) -> String {
    format!(
        r#"
[iggy]
address = "{addr}"
username = "{user}"
password = "{password}"
reconnect_min = "50ms"
reconnect_max = "500ms"

[runtime]
shutdown_timeout = "5s"

[metrics]
address = ""
log_interval = "0s"

[[sink]]
name = "file-out"
type = "file"
stream = "{stream}"
topic = "{topic}"
{source}
poll_interval = "5ms"
{defaults}
{sink_extra}

[sink.file]
path = "{out}"
{file_extra}
"#,
        addr = server.addr(),
        user = server.username(),
        password = server.password(),
        stream = t.stream,
        topic = t.topic,
        out = out.display(),
        defaults = [
            ("batch_size", "batch_size = 50"),
            ("commit_interval", "commit_interval = \"50ms\"")
        ]
        .iter()
        .filter(|(key, _)| !sink_extra.contains(key))
        .map(|(_, line)| *line)
        .collect::<Vec<_>>()
        .join("\n"),
    )
}

/// Waits until the named consumer `file-out` has stored `last` on every partition of `t`, then
/// sends SIGTERM and asserts a clean exit.
pub fn drain_after_stored(engine: &mut Engine, admin: &mut IggyAdmin, t: &Topic, last: u64) {
    wait_until("all offsets stored", Duration::from_secs(60), || {
        (0..t.partitions).all(|p| stored(admin, t, "file-out", p) == Some(last))
    });
    engine.signal("TERM");
    let status = engine
        .wait(Duration::from_secs(20))
        .expect("exits after SIGTERM");
    assert!(status.success(), "exit {status:?}\n{}", engine.log());
}

/// Asserts that every partition of `t` holds offsets `0..per_partition` once, in order.
pub fn assert_once_in_order(got: &[Line], t: &Topic, per_partition: u64) {
    assert_eq!(
        got.len() as u64,
        per_partition * u64::from(t.partitions),
        "every message exactly once"
    );
    for (p, offsets) in by_partition(got) {
        assert_eq!(
            offsets,
            (0..per_partition).collect::<Vec<u64>>(),
            "partition {p} in order, no gaps, no duplicates"
        );
    }
}

// ---------------------------------------------------------------- MQTT sink helpers

/// `[iggy]`, `[runtime]` and `[metrics]` for an engine reading `server` (add `[[sink]]` blocks
/// from [`mqtt_sink`]).
pub fn engine_sections(server: &IggyServer) -> String {
    format!(
        r#"
[iggy]
address = "{addr}"
username = "{user}"
password = "{password}"
reconnect_min = "50ms"
reconnect_max = "500ms"

[runtime]
shutdown_timeout = "20s"

[metrics]
address = ""
log_interval = "0s"
"#,
        addr = server.addr(),
        user = server.username(),
        password = server.password(),
    )
}

/// One `[[sink]]` of type `mqtt` named `name` reading `t` (`source`: `partitions = [...]` or
/// `consumer_group = "..."`). `sink_extra` lines go into `[[sink]]` (with `poll_interval =
/// "5ms"` and `commit_interval = "50ms"` unless it sets them); `mqtt` lines into `[sink.mqtt]`
/// after `address` (a `[sink.mqtt.will]` table may follow at the end).
pub fn mqtt_sink(
    name: &str,
    t: &Topic,
    source: &str,
    sink_extra: &str,
    address: &str,
    mqtt: &str,
) -> String {
    let defaults = [
        ("poll_interval", "poll_interval = \"5ms\""),
        ("commit_interval", "commit_interval = \"50ms\""),
    ]
    .iter()
    .filter(|(key, _)| !sink_extra.contains(key))
    .map(|(_, line)| *line)
    .collect::<Vec<_>>()
    .join("\n");
    format!(
        r#"
[[sink]]
name = "{name}"
type = "mqtt"
stream = "{stream}"
topic = "{topic}"
{source}
{defaults}
{sink_extra}

[sink.mqtt]
address = "{address}"
{mqtt}
"#,
        stream = t.stream,
        topic = t.topic,
    )
}

/// Waits until consumer `consumer` has stored `last` on every partition of `t`; fails at once
/// with the engine log if the engine exits first.
pub fn wait_stored(
    engine: &mut Engine,
    admin: &mut IggyAdmin,
    t: &Topic,
    consumer: &str,
    last: u64,
    timeout: Duration,
) {
    let deadline = Instant::now() + timeout;
    loop {
        if (0..t.partitions).all(|p| stored(admin, t, consumer, p) == Some(last)) {
            return;
        }
        if !engine.running() {
            panic!(
                "the engine exited before {consumer} stored offset {last}: {:?}\n{}",
                (0..t.partitions)
                    .map(|p| stored(admin, t, consumer, p))
                    .collect::<Vec<_>>(),
                engine.log()
            );
        }
        if Instant::now() >= deadline {
            panic!(
                "timed out waiting for {consumer} to store offset {last}: {:?}\n{}",
                (0..t.partitions)
                    .map(|p| stored(admin, t, consumer, p))
                    .collect::<Vec<_>>(),
                engine.log()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends SIGTERM and asserts that the engine exits 0 within `timeout`.
pub fn stop_clean(engine: &mut Engine, timeout: Duration) {
    // The engine installs its signal handlers before it logs "running"; a SIGTERM sent
    // earlier (a test whose work was already done by an earlier run) would kill it outright.
    let ready = Instant::now() + Duration::from_secs(30);
    while !engine.log().contains(" running") && engine.running() && Instant::now() < ready {
        std::thread::sleep(Duration::from_millis(20));
    }
    engine.signal("TERM");
    let status = engine.wait(timeout).unwrap_or_else(|| {
        panic!(
            "the engine did not exit within {timeout:?} of SIGTERM\n{}",
            engine.log()
        )
    });
    assert!(status.success(), "exit {status:?}\n{}", engine.log());
}

/// Waits for the engine to exit on its own and returns its exit code.
pub fn wait_exit_code(engine: &mut Engine, timeout: Duration) -> Option<i32> {
    let status = engine.wait(timeout).unwrap_or_else(|| {
        panic!(
            "the engine did not stop by itself within {timeout:?}\n{}",
            engine.log()
        )
    });
    status.code()
}

/// Sends `messages` to `partition` in batches of 1000.
pub fn send_all(admin: &mut IggyAdmin, t: &Topic, partition: u32, messages: &[TestMessage]) {
    for chunk in messages.chunks(1000) {
        admin.send(&t.stream, &t.topic, partition, chunk).unwrap();
    }
}

/// The last `n` lines of a log, for panic messages about long logs.
pub fn tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

// ---------------------------------------------------------------- metrics and process helpers

/// `GET /metrics` from the engine's endpoint at `addr` over a plain TCP connection; the body,
/// or `None` while the endpoint does not answer (not bound yet, or the engine has exited).
pub fn scrape_metrics(addr: std::net::SocketAddr) -> Option<String> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).ok()?;
    let reply = String::from_utf8(reply).ok()?;
    let (head, body) = reply.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
}

/// The value of metric `name` on the sample whose labels include `sink="<sink>"`, from a
/// Prometheus text body.
pub fn metric_of_sink(body: &str, name: &str, sink: &str) -> Option<f64> {
    let label = format!("sink=\"{sink}\"");
    body.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
        .filter(|l| l.contains(&label))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

/// A `/proc/<pid>/status` field in KiB (`VmHWM`: peak resident set size, `VmRSS` …); `None`
/// once the process has exited (a zombie has no memory fields).
pub fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
}

/// The object files s3s-fs stores under a bucket directory: (key, path, size), skipping its
/// own bookkeeping (names starting with a dot, `.metadata.json` sidecars, `.upload` parts).
pub fn object_files(bucket_dir: &Path) -> Vec<(String, PathBuf, u64)> {
    spillway_tests::object_files(bucket_dir)
        .unwrap()
        .into_iter()
        .map(|path| {
            let key = path
                .strip_prefix(bucket_dir)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let size = std::fs::metadata(&path).unwrap().len();
            (key, path, size)
        })
        .collect()
}

/// An S3 sink `name` reading every partition of `t` into the bucket of `s3`, with the extra
/// `[sink.s3]` lines `extra`.
pub fn s3_sink(name: &str, t: &Topic, s3: &spillway_tests::S3Server, extra: &str) -> String {
    format!(
        r#"
[[sink]]
name = "{name}"
type = "s3"
stream = "{stream}"
topic = "{topic}"
partitions = [{parts}]
poll_interval = "5ms"
commit_interval = "50ms"

[sink.s3]
bucket = "{bucket}"
endpoint = "{endpoint}"
region = "{region}"
access_key_id = "{ak}"
secret_access_key = "{sk}"
{extra}
"#,
        stream = t.stream,
        topic = t.topic,
        parts = (0..t.partitions)
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        bucket = s3.bucket(),
        endpoint = s3.endpoint(),
        region = s3.region(),
        ak = s3.access_key(),
        sk = s3.secret_key(),
    )
}

/// A fault proxy in front of `s3` for the SIGKILL tests: 3% of bodies dropped midway, 3% of
/// requests answered 500 and 3% 503 SlowDown, in the order `seed` gives.
pub fn faulty_store(s3: &spillway_tests::S3Server, seed: u64) -> spillway_tests::FaultProxy {
    use spillway_tests::{FaultPlan, FaultProxy};
    FaultProxy::start(
        s3.addr(),
        FaultPlan::seeded(seed)
            .drop_mid_body(0.03)
            .status_500(0.03)
            .slow_down_503(0.03),
    )
    .unwrap()
}

/// After a kill (`round`): for each of `t`'s partitions, the offset Iggy stores for
/// `consumer` never passes what complete objects hold. `done`: the (partition, offset) of every
/// record in the bucket; each offset up to the stored one must be there exactly once.
pub fn assert_stored_in_objects(
    admin: &mut IggyAdmin,
    t: &Topic,
    consumer: &str,
    done: &[(u64, u64)],
    round: usize,
) {
    for p in 0..t.partitions {
        if let Some(stored) = stored(admin, t, consumer, p) {
            let p = u64::from(p);
            let have = done.iter().filter(|(q, o)| *q == p && *o <= stored).count() as u64;
            assert_eq!(
                have,
                stored + 1,
                "round {round}: partition {p} stored {stored} but {have} records of those offsets are in objects"
            );
        }
    }
}
