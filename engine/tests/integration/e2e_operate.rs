//! End to end: what an operator asks of a running engine. `/health`, `/ready` and `/status`
//! read while the sinks are healthy, while the MQTT broker is unreachable and while the S3
//! sink is paused (the real Iggy server, mosquitto behind the count proxy that plays the
//! outage, s3s-fs); pause, flush and resume lose nothing; the token rules of the endpoints
//! that change state.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{
    Engine, engine_sections, mqtt_sink, s3_sink, send, stop_clean, stored, topic, wait_stored,
    wait_until,
};
use serde_json::Value;
use spillway::operator::request;
use spillway_tests::{IggyServer, Mosquitto, MqttCountProxy, S3Server};

const LONG: Duration = Duration::from_secs(60);

fn free_addr(ip: [u8; 4]) -> SocketAddr {
    SocketAddr::from((ip, spillway_tests::ports::free_loopback_port().unwrap()))
}

fn loopback(addr: SocketAddr) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], addr.port()))
}

fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    request(loopback(addr), "GET", path, None).unwrap()
}

fn status(addr: SocketAddr) -> Value {
    let (code, body) = get(addr, "/status");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn sink<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["sinks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no sink {name} in {status}"))
}

/// Waits until `check` holds for the `/status` document, printing the last one if it never
/// does.
fn wait_status(addr: SocketAddr, what: &str, mut check: impl FnMut(&Value) -> bool) -> Value {
    let deadline = Instant::now() + LONG;
    loop {
        let s = status(addr);
        if check(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; /status:\n{s:#}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// (partition, offset) of every record in the bucket's json_lines objects, counted.
fn records(bucket: &std::path::Path) -> BTreeMap<(u64, u64), usize> {
    let mut out = BTreeMap::new();
    for (key, path, _) in common::object_files(bucket) {
        if key.contains(".spillway/") {
            continue;
        }
        for line in std::fs::read_to_string(path).unwrap().lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            let at = (
                v["partition"].as_u64().unwrap(),
                v["offset"].as_u64().unwrap(),
            );
            *out.entry(at).or_default() += 1;
        }
    }
    out
}

/// `spillway <args>`: its exit code and standard output.
fn cli(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_spillway"));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn probes_and_status_follow_an_outage_and_a_pause_and_pause_flush_resume_lose_nothing() {
    let broker = Mosquitto::start_default().unwrap();
    let proxy = MqttCountProxy::start(broker.addr()).unwrap();
    let s3 = S3Server::start().unwrap();
    let iggy = IggyServer::start().unwrap();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "operate", 2);
    for p in 0..2 {
        send(&mut admin, &t, p, "a", 0, 100);
    }
    let metrics = free_addr([127, 0, 0, 1]);
    let cfg = engine_sections(&iggy)
        .replace("address = \"\"", &format!("address = \"{metrics}\""))
        + &mqtt_sink(
            "mqtt",
            &t,
            "partitions = [0, 1]",
            "",
            &proxy.host_port(),
            "qos = 1\ntopic = \"operate/{partition}\"\nreconnect_min = \"50ms\"\nreconnect_max = \"200ms\"",
        )
        // Objects stay open until asked: the status shows them, and a flush closes them.
        + &s3_sink(
            "s3",
            &t,
            &s3,
            "max_object_messages = 100000\nidle_flush = \"1h\"",
        );
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::start(dir.path(), "operate", &cfg);
    let config_path = dir.path().join("operate.toml");
    std::fs::write(&config_path, &cfg).unwrap();
    let config_path = config_path.to_str().unwrap();

    // Healthy: both sinks ready, MQTT stores everything, S3 holds it in open objects.
    wait_until("/ready answers 200", LONG, || {
        request(metrics, "GET", "/ready", None).is_ok_and(|(code, _)| code == 200)
    });
    assert_eq!(get(metrics, "/health"), (200, "ok\n".to_owned()));
    wait_stored(&mut engine, &mut admin, &t, "mqtt", 99, LONG);
    let s = wait_status(metrics, "S3 objects open with 100 messages each", |s| {
        sink(s, "s3")["partitions"].as_array().is_some_and(|ps| {
            ps.len() == 2
                && ps
                    .iter()
                    .all(|p| p["open_objects"][0]["messages"] == 100u64)
        })
    });
    let s3_status = sink(&s, "s3");
    assert_eq!(s3_status["state"], "running", "{s:#}");
    assert_eq!(s3_status["iggy"], "connected", "{s:#}");
    for p in s3_status["partitions"].as_array().unwrap() {
        assert_eq!(p["open_objects"][0]["first_offset"], 0u64, "{s:#}");
        assert_eq!(p["polled"], 99u64, "{s:#}");
        assert_eq!(
            p["stored"],
            Value::Null,
            "nothing is stored before an object completes"
        );
        assert!(p["open_objects"][0]["bytes"].as_u64().unwrap() > 0, "{s:#}");
    }
    let s = wait_status(metrics, "MQTT partitions stored at 99", |s| {
        sink(s, "mqtt")["partitions"]
            .as_array()
            .is_some_and(|ps| ps.len() == 2 && ps.iter().all(|p| p["stored"] == 99u64))
    });
    for p in sink(&s, "mqtt")["partitions"].as_array().unwrap() {
        assert_eq!(p["confirmed"], 99u64, "{s:#}");
        assert_eq!(p["lag"], 0u64, "{s:#}");
    }
    assert_eq!(s["ready"], true, "{s:#}");

    // Pause the S3 sink with a flush: its objects complete and their offsets are stored.
    let (code, body) = request(metrics, "POST", "/sinks/s3/pause?flush=true", None).unwrap();
    assert_eq!(code, 202, "{body}");
    wait_stored(&mut engine, &mut admin, &t, "s3", 99, LONG);
    let s = wait_status(metrics, "the S3 sink paused", |s| {
        sink(s, "s3")["state"] == "paused"
    });
    assert_eq!(s["ready"], true, "a paused sink is ready: {s:#}");
    // While paused, new messages go to MQTT and not to S3.
    for p in 0..2 {
        send(&mut admin, &t, p, "b", 100, 50);
    }
    wait_stored(&mut engine, &mut admin, &t, "mqtt", 149, LONG);
    std::thread::sleep(Duration::from_millis(700));
    let s = status(metrics);
    for p in sink(&s, "s3")["partitions"].as_array().unwrap() {
        assert_eq!(p["polled"], 99u64, "paused, the S3 sink polled on: {s:#}");
        assert_eq!(p["head"], 99u64, "{s:#}");
        assert_eq!(p["open_objects"], serde_json::json!([]), "{s:#}");
    }
    for p in 0..2 {
        assert_eq!(stored(&mut admin, &t, "s3", p), Some(99));
    }
    let (code, out, err) = cli(
        &[
            "status",
            "--config",
            config_path,
            "--address",
            &metrics.to_string(),
        ],
        &[],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("s3 ") && l.contains(" paused ")),
        "{out}"
    );

    // The broker goes away: /ready names the MQTT sink (and not the S3 one); /health holds.
    proxy.refuse_connections(true);
    proxy.close_all();
    wait_until("/ready answers 503 for the MQTT sink", LONG, || {
        let (code, body) = get(metrics, "/ready");
        code == 503 && body.contains("sink \"mqtt\": MQTT broker not connected")
    });
    let (_, body) = get(metrics, "/ready");
    assert!(!body.contains("sink \"s3\""), "{body}");
    assert_eq!(get(metrics, "/health").0, 200);
    let s = wait_status(metrics, "the MQTT sink failing with its error", |s| {
        sink(s, "mqtt")["last_error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("MQTT connection to"))
    });
    let m = sink(&s, "mqtt");
    assert_eq!(m["destination"], "failing", "{s:#}");
    assert_eq!(m["ready"], false, "{s:#}");
    assert!(
        m["last_error"]["at"].as_str().unwrap().starts_with("20"),
        "an RFC 3339 time: {s:#}"
    );
    let (_, metrics_page) = get(metrics, "/metrics");
    assert!(
        metrics_page.contains("spillway_sink_ready{sink=\"mqtt\"} 0"),
        "{metrics_page}"
    );
    assert!(
        metrics_page.contains("spillway_sink_state{sink=\"s3\",state=\"paused\"} 1"),
        "{metrics_page}"
    );

    // The broker is back; the S3 sink resumes and takes what came while it was paused.
    proxy.refuse_connections(false);
    wait_until("/ready answers 200 again", LONG, || {
        get(metrics, "/ready").0 == 200
    });
    let (code, out, err) = cli(
        &[
            "resume",
            "--config",
            config_path,
            "--sink",
            "s3",
            "--address",
            &metrics.to_string(),
        ],
        &[],
    );
    assert_eq!(code, 0, "{out}{err}");
    wait_status(
        metrics,
        "the S3 sink running and holding 150 per partition",
        |s| {
            let s3 = sink(s, "s3");
            s3["state"] == "running"
                && s3["partitions"]
                    .as_array()
                    .is_some_and(|ps| ps.iter().all(|p| p["polled"] == 149u64))
        },
    );
    // The drain completes the open objects.
    stop_clean(&mut engine, Duration::from_secs(30));
    for p in 0..2 {
        assert_eq!(stored(&mut admin, &t, "s3", p), Some(149));
    }
    let got = records(&s3.bucket_dir());
    for p in 0..2u64 {
        for o in 0..150u64 {
            assert_eq!(
                got.get(&(p, o)),
                Some(&1),
                "partition {p} offset {o} in the objects once"
            );
        }
    }
    assert_eq!(got.len(), 300, "nothing else in the objects");
}

/// A file sink fed by the generate source, its listener on `metrics`.
fn generate_config(metrics: SocketAddr, out: &std::path::Path, extra: &str) -> String {
    format!(
        r#"
[metrics]
address = "{metrics}"
log_interval = "0s"
{extra}

[[sink]]
name = "gen"
type = "file"
source = "generate"

[sink.file]
path = "{}"

[sink.generate]
partitions = 1
rate = 500
size = 10
messages = 0
"#,
        out.display()
    )
}

#[test]
fn pause_and_resume_need_the_token_beyond_loopback_and_a_wrong_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");

    // Beyond loopback without a token: refused, naming the keys; reads still answer.
    let open = free_addr([0, 0, 0, 0]);
    let mut engine = Engine::start(dir.path(), "open", &generate_config(open, &out, ""));
    wait_until("/ready answers 200", LONG, || {
        request(loopback(open), "GET", "/ready", None).is_ok_and(|(code, _)| code == 200)
    });
    let (code, body) = request(loopback(open), "POST", "/sinks/gen/pause", None).unwrap();
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("metrics.token"), "{body}");
    assert_eq!(sink(&status(open), "gen")["state"], "running");
    assert!(engine.log().contains("pause and resume are refused"));
    stop_clean(&mut engine, Duration::from_secs(10));

    // With a token (from the environment): none is 401, a wrong one 403, the right one 202.
    let guarded = free_addr([0, 0, 0, 0]);
    let token = "s3cr3t-t0ken-for-the-test";
    let mut engine = Engine::start_with_env(
        dir.path(),
        "guarded",
        &generate_config(guarded, &out, ""),
        &[("SPILLWAY_CONTROL_TOKEN", token)],
    );
    let at = loopback(guarded);
    wait_until("/ready answers 200", LONG, || {
        request(at, "GET", "/ready", None).is_ok_and(|(code, _)| code == 200)
    });
    assert_eq!(
        request(at, "POST", "/sinks/gen/pause", None).unwrap().0,
        401
    );
    assert_eq!(
        request(at, "POST", "/sinks/gen/pause", Some("wrong"))
            .unwrap()
            .0,
        403
    );
    assert_eq!(
        request(at, "POST", "/sinks/nosuch/pause", Some(token))
            .unwrap()
            .0,
        404
    );
    assert_eq!(sink(&status(at), "gen")["state"], "running");
    let (code, body) = request(at, "POST", "/sinks/gen/pause", Some(token)).unwrap();
    assert_eq!(code, 202, "{body}");
    wait_status(at, "the sink paused", |s| {
        sink(s, "gen")["state"] == "paused"
    });
    // The CLI sends the token the config (here the environment) names.
    let config_path = dir.path().join("guarded-cli.toml");
    std::fs::write(&config_path, generate_config(guarded, &out, "")).unwrap();
    let config_path = config_path.to_str().unwrap();
    let resume = ["resume", "--config", config_path, "--sink", "gen"];
    let (code, _, err) = cli(&resume, &[]);
    assert_eq!(code, 1, "without the token: {err}");
    assert!(err.contains("401"), "{err}");
    let (code, out_text, err) = cli(&resume, &[("SPILLWAY_CONTROL_TOKEN", token)]);
    assert_eq!(code, 0, "{out_text}{err}");
    wait_status(at, "the sink running again", |s| {
        sink(s, "gen")["state"] == "running"
    });
    assert!(
        !engine.log().contains(token),
        "the token reached the log:\n{}",
        engine.log()
    );
    stop_clean(&mut engine, Duration::from_secs(10));
}

/// Under systemd (`Type=notify`): `READY=1` once the sink is ready, `WATCHDOG=1` while the
/// shards report, `STOPPING=1` on SIGTERM. The notify socket is a datagram socket of the test,
/// as systemd's would be.
#[test]
fn under_systemd_the_engine_says_ready_pings_the_watchdog_and_says_it_stops() {
    use std::os::unix::net::UnixDatagram;
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify.sock");
    let systemd = UnixDatagram::bind(&socket_path).unwrap();
    systemd
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let out = dir.path().join("out.jsonl");
    let metrics = free_addr([127, 0, 0, 1]);
    let started = Instant::now();
    let mut engine = Engine::start_with_env(
        dir.path(),
        "notify",
        &generate_config(metrics, &out, ""),
        &[
            ("NOTIFY_SOCKET", socket_path.to_str().unwrap()),
            ("WATCHDOG_USEC", "1000000"),
        ],
    );
    let mut got = String::new();
    let mut ready_after = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline && got.matches("WATCHDOG=1").count() < 3 {
        if let Ok(n) = systemd.recv(&mut buf) {
            got.push_str(&String::from_utf8_lossy(&buf[..n]));
            if ready_after.is_none() && got.contains("READY=1") {
                ready_after = Some(started.elapsed());
            }
        }
    }
    assert!(got.contains("READY=1\n"), "{got:?}");
    assert!(got.contains("STATUS=ready\n"), "{got:?}");
    assert_eq!(got.matches("READY=1").count(), 1, "{got:?}");
    assert!(got.matches("WATCHDOG=1").count() >= 3, "{got:?}");
    eprintln!("READY=1 {:?} after the start", ready_after.unwrap());
    engine.signal("TERM");
    let mut tail = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && !tail.contains("STOPPING=1") {
        if let Ok(n) = systemd.recv(&mut buf) {
            tail.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    }
    assert!(tail.contains("STOPPING=1\n"), "{tail:?}");
    assert!(engine.wait(Duration::from_secs(10)).unwrap().success());
}

/// `spillway offsets <args> --config <config>`.
fn offsets(config: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["offsets"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--config", config.to_str().unwrap()]);
    cli(&all, &[])
}

/// Every object of the bucket but the markers, by key, with its bytes.
fn object_bytes(bucket: &std::path::Path) -> BTreeMap<String, Vec<u8>> {
    common::object_files(bucket)
        .into_iter()
        .filter(|(key, _, _)| !key.contains(".spillway/"))
        .map(|(key, path, _)| (key, std::fs::read(path).unwrap()))
        .collect()
}

/// Rewinding an S3 sink by 1,000 offsets moves both Iggy's stored offset and the marker (a
/// rewind of the Iggy consumer alone replays nothing: the marker is later): the next run
/// writes the same keys with the same bytes. The tool refuses while the engine runs.
#[test]
fn offsets_set_rewinds_an_s3_sink_and_the_same_objects_are_written_again() {
    let s3 = S3Server::start().unwrap();
    let iggy = IggyServer::start().unwrap();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "rewind", 2);
    for p in 0..2 {
        send(&mut admin, &t, p, "r", 0, 2_500);
    }
    let metrics = free_addr([127, 0, 0, 1]);
    let cfg = engine_sections(&iggy).replace("address = \"\"", &format!("address = \"{metrics}\""))
        + &s3_sink(
            "s3r",
            &t,
            &s3,
            "key = \"{stream}/{partition}/{first_offset}.{ext}\"\nmax_object_messages = 100\nidle_flush = \"300ms\"",
        );
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rewind.toml");
    std::fs::write(&config, &cfg).unwrap();
    let mut engine = Engine::start(dir.path(), "rewind", &cfg);
    wait_stored(&mut engine, &mut admin, &t, "s3r", 2_499, LONG);
    // Running: refused, naming the engine's status address.
    let (code, out, err) = offsets(&config, &["set", "--sink", "s3r", "--to", "-1000"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("answers at http://"), "{err}");
    stop_clean(&mut engine, Duration::from_secs(30));
    let before = object_bytes(&s3.bucket_dir());
    assert_eq!(before.len(), 50, "{:?}", before.keys());

    let (code, out, err) = offsets(&config, &["show", "--sink", "s3r"]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            ["0", "2499", "2499", "2499", "2500"],
            ["1", "2499", "2499", "2499", "2500"]
        ],
        "{out}"
    );
    // The objects of the last 1,000 offsets are lost from the store.
    let bucket = s3.bucket_dir();
    let mut removed = 0;
    for (key, path, _) in common::object_files(&bucket) {
        let first = key
            .rsplit('/')
            .next()
            .and_then(|f| f.trim_end_matches(".jsonl").parse::<u64>().ok());
        if first.is_some_and(|f| f >= 1_500) {
            std::fs::remove_file(path).unwrap();
            removed += 1;
        }
    }
    assert_eq!(removed, 20);

    // A rewind of the Iggy consumer alone would resume after the marker: nothing replayed.
    let (code, out, err) = offsets(&config, &["set", "--sink", "s3r", "--to", "-1000"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("partition 0: resumes at 1500 (was 2500)"),
        "{out}"
    );
    for p in 0..2 {
        assert_eq!(stored(&mut admin, &t, "s3r", p), Some(1_499));
    }
    let mut engine = Engine::start(dir.path(), "rewind-again", &cfg);
    wait_stored(&mut engine, &mut admin, &t, "s3r", 2_499, LONG);
    stop_clean(&mut engine, Duration::from_secs(30));
    let after = object_bytes(&bucket);
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>(),
        "the same keys"
    );
    for (key, bytes) in &before {
        assert!(after[key] == *bytes, "{key}: the same bytes");
    }
    assert!(
        engine.log().contains("resuming at offset 1500"),
        "{}",
        engine.log()
    );
}

/// `offsets skip` moves an S3 sink and an MQTT sink past one message, naming it; the next run
/// delivers everything after it, and it is in no object and no publish.
#[test]
fn offsets_skip_passes_one_message_that_then_reaches_neither_sink() {
    use spillway_tests::{Subscriber, SubscriberOpts};
    let broker = Mosquitto::start_default().unwrap();
    let s3 = S3Server::start().unwrap();
    let iggy = IggyServer::start().unwrap();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "skip", 1);
    send(&mut admin, &t, 0, "ok", 0, 5);
    let cfg = engine_sections(&iggy)
        + &mqtt_sink(
            "mq",
            &t,
            "partitions = [0]",
            "",
            &broker.host_port(),
            "qos = 1\ntopic = \"skip/out\"",
        )
        + &s3_sink(
            "s3s",
            &t,
            &s3,
            "max_object_messages = 100\nidle_flush = \"200ms\"",
        );
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("skip.toml");
    std::fs::write(&config, &cfg).unwrap();
    let sub = Subscriber::connect(broker.addr(), SubscriberOpts::v4("skip/#").qos(1)).unwrap();
    let mut engine = Engine::start(dir.path(), "skip", &cfg);
    wait_stored(&mut engine, &mut admin, &t, "mq", 4, LONG);
    wait_stored(&mut engine, &mut admin, &t, "s3s", 4, LONG);
    stop_clean(&mut engine, Duration::from_secs(30));
    // The poison message at offset 5, then four good ones.
    admin
        .send(
            &t.stream,
            &t.topic,
            0,
            &[spillway_tests::TestMessage::new(1_000, b"poison".to_vec())],
        )
        .unwrap();
    send(&mut admin, &t, 0, "ok", 6, 4);
    for sink in ["mq", "s3s"] {
        let (code, out, err) = offsets(&config, &["skip", "--sink", sink]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(
            out.contains("skipping partition 0 offset 5: id 1000, 6 bytes")
                && out.contains("payload \"poison\""),
            "{out}"
        );
        assert!(out.contains("partition 0: resumes at 6 (was 5)"), "{out}");
    }
    let mut engine = Engine::start(dir.path(), "skip-again", &cfg);
    wait_stored(&mut engine, &mut admin, &t, "mq", 9, LONG);
    wait_stored(&mut engine, &mut admin, &t, "s3s", 9, LONG);
    stop_clean(&mut engine, Duration::from_secs(30));
    let got = records(&s3.bucket_dir());
    let offsets_in_objects: Vec<u64> = got.keys().map(|(_, o)| *o).collect();
    assert_eq!(offsets_in_objects, [0, 1, 2, 3, 4, 6, 7, 8, 9]);
    assert!(got.values().all(|n| *n == 1));
    let deadline = Instant::now() + Duration::from_secs(10);
    while sub.messages().len() < 9 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let published: Vec<String> = sub
        .messages()
        .iter()
        .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
        .collect();
    assert_eq!(published.len(), 9, "{published:?}");
    assert!(
        !published.iter().any(|p| p.contains("poison")),
        "{published:?}"
    );
}

/// A consumer-group sink: the tool refuses while the group has members, and once they left
/// it sets the group's stored offsets (the next member resumes there).
#[test]
fn offsets_of_a_consumer_group_sink_are_set_once_no_member_reads_it() {
    let iggy = IggyServer::start().unwrap();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "grp", 2);
    admin
        .create_consumer_group(&t.stream, &t.topic, "g")
        .unwrap();
    for p in 0..2 {
        send(&mut admin, &t, p, "g", 0, 20);
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let cfg = common::config(&iggy, &t, "consumer_group = \"g\"", &out, "", "");
    let config = dir.path().join("grp.toml");
    std::fs::write(&config, &cfg).unwrap();
    let mut engine = Engine::start(dir.path(), "grp", &cfg);
    wait_until("the group stored 19", LONG, || {
        (0..2).all(|p| common::group_stored(&mut admin, &t, "g", p) == Some(19))
    });
    let (code, out_text, err) = offsets(&config, &["set", "--sink", "file-out", "--to", "5"]);
    assert_eq!(code, 1, "{out_text}{err}");
    assert!(err.contains("consumer group \"g\" has 1 members"), "{err}");
    stop_clean(&mut engine, Duration::from_secs(30));
    let (code, out_text, err) = offsets(&config, &["set", "--sink", "file-out", "--to", "5"]);
    assert_eq!(code, 0, "{out_text}{err}");
    for p in 0..2 {
        assert_eq!(common::group_stored(&mut admin, &t, "g", p), Some(4));
    }
    let (code, out_text, err) =
        offsets(&config, &["set", "--sink", "file-out", "--to", "earliest"]);
    assert_eq!(code, 0, "{out_text}{err}");
    for p in 0..2 {
        assert_eq!(common::group_stored(&mut admin, &t, "g", p), None);
    }
}
