//! End to end: Iggy (the real server the harness starts, see `IggyServer::start`) ->
//! `spillway run` -> file sink, checked through the file and the offsets stored in Iggy.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{Engine, by_partition, check, config, lines, send, stored, topic, wait_until};
use spillway_tests::{IggyServer, TestConsumer};

const LONG: Duration = Duration::from_secs(60);

fn server() -> IggyServer {
    IggyServer::start().unwrap()
}

#[test]
fn every_message_arrives_once_in_order_and_only_confirmed_offsets_are_stored() {
    let iggy = server();
    let t = topic(&iggy, "once", 3);
    let mut admin = iggy.admin().unwrap();
    for p in 0..3 {
        send(&mut admin, &t, p, "a", 0, 250);
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let cfg = config(&iggy, &t, "partitions = [0, 1, 2]", &out, "", "");
    let mut engine = Engine::start(dir.path(), "once", &cfg);
    common::drain_after_stored(&mut engine, &mut admin, &t, 249);
    let got = lines(&out);
    common::assert_once_in_order(&got, &t, 250);
    let l = got
        .iter()
        .find(|l| l.partition == 1 && l.offset == 7)
        .unwrap();
    assert_eq!(l.payload, "a-p1-7");
    assert_eq!(l.id, "8");
    assert_eq!(l.header_n.as_deref(), Some("7"));
    let l = got
        .iter()
        .find(|l| l.partition == 2 && l.offset == 8)
        .unwrap();
    assert_eq!(
        l.payload, "json:a-p2-8",
        "a JSON payload is embedded as JSON"
    );
    for p in 0..3 {
        assert_eq!(stored(&mut admin, &t, "file-out", p), Some(249));
    }
}

#[test]
fn a_restart_resumes_where_it_stopped() {
    let iggy = server();
    let t = topic(&iggy, "resume", 2);
    let mut admin = iggy.admin().unwrap();
    send(&mut admin, &t, 0, "first", 0, 120);
    send(&mut admin, &t, 1, "first", 0, 80);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let cfg = config(&iggy, &t, "partitions = [0, 1]", &out, "", "");
    let mut engine = Engine::start(dir.path(), "resume-1", &cfg);
    wait_until("first run stored", LONG, || {
        stored(&mut admin, &t, "file-out", 0) == Some(119)
            && stored(&mut admin, &t, "file-out", 1) == Some(79)
    });
    engine.signal("INT");
    assert!(engine.wait(Duration::from_secs(20)).unwrap().success());
    assert_eq!(lines(&out).len(), 200);

    send(&mut admin, &t, 0, "second", 120, 30);
    send(&mut admin, &t, 1, "second", 80, 40);
    let mut engine = Engine::start(dir.path(), "resume-2", &cfg);
    wait_until("second run stored", LONG, || {
        stored(&mut admin, &t, "file-out", 0) == Some(149)
            && stored(&mut admin, &t, "file-out", 1) == Some(119)
    });
    engine.signal("TERM");
    assert!(engine.wait(Duration::from_secs(20)).unwrap().success());
    let got = lines(&out);
    assert_eq!(got.len(), 270, "the second run must not repeat the first");
    let parts = by_partition(&got);
    assert_eq!(parts[&0], (0..150).collect::<Vec<u64>>());
    assert_eq!(parts[&1], (0..120).collect::<Vec<u64>>());
    assert!(
        engine.log().contains("resuming at offset 120"),
        "{}",
        engine.log()
    );
}

#[test]
fn out_of_order_confirmations_never_commit_a_gap() {
    let iggy = server();
    let t = topic(&iggy, "gaps", 2);
    let mut admin = iggy.admin().unwrap();
    for p in 0..2 {
        send(&mut admin, &t, p, "g", 0, 1500);
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    // Each batch is held a random time up to 60 ms, then written and confirmed in a shuffled
    // order: the file holds exactly what was confirmed, and batches complete out of order.
    let cfg = config(
        &iggy,
        &t,
        "partitions = [0, 1]",
        &out,
        "batch_size = 20\nwindow_messages = 100\ncommit_every = 1\ncommit_interval = \"1ms\"",
        "confirm_order = \"shuffle\"\nconfirm_delay = \"60ms\"",
    );
    let mut engine = Engine::start(dir.path(), "gaps", &cfg);
    let mut samples = 0;
    let mut moved = BTreeSet::new();
    while samples < 200 {
        let marks: Vec<Option<u64>> = (0..2)
            .map(|p| stored(&mut admin, &t, "file-out", p))
            .collect();
        let written = by_partition(&lines(&out));
        for (p, mark) in marks.iter().enumerate() {
            if let Some(mark) = mark {
                moved.insert(*mark);
                let have: BTreeSet<u64> = written
                    .get(&(p as u32))
                    .into_iter()
                    .flatten()
                    .copied()
                    .collect();
                for o in 0..=*mark {
                    assert!(
                        have.contains(&o),
                        "stored offset {mark} of partition {p} but offset {o} was never confirmed"
                    );
                }
            }
        }
        samples += 1;
        if marks.iter().all(|m| *m == Some(1499)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        moved.len() > 5,
        "the watermark should have moved many times: {moved:?}\n{}",
        engine.log()
    );
    // A crash (SIGKILL) leaves the stored offsets at or below what was confirmed.
    engine.signal("KILL");
    engine.wait(Duration::from_secs(10));
    let written = by_partition(&lines(&out));
    for p in 0..2u32 {
        if let Some(mark) = stored(&mut admin, &t, "file-out", p) {
            let have: BTreeSet<u64> = written.get(&p).into_iter().flatten().copied().collect();
            assert!((0..=mark).all(|o| have.contains(&o)));
        }
    }
}

#[test]
fn a_consumer_group_of_two_engines_splits_the_partitions_and_takes_over() {
    let iggy = server();
    let t = topic(&iggy, "group", 4);
    let mut admin = iggy.admin().unwrap();
    admin
        .create_consumer_group(&t.stream, &t.topic, "spillway")
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (out_a, out_b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    let extra = "group_sync_interval = \"100ms\"";
    let group = "consumer_group = \"spillway\"";
    let mut a = Engine::start(
        dir.path(),
        "a",
        &config(&iggy, &t, group, &out_a, extra, ""),
    );
    let b = Engine::start(
        dir.path(),
        "b",
        &config(&iggy, &t, group, &out_b, extra, ""),
    );
    // Let both join before data arrives.
    wait_until("both members joined", LONG, || {
        a.log().contains("consumer group assignment")
            && b.log().contains("consumer group assignment")
    });
    std::thread::sleep(Duration::from_millis(500));
    for p in 0..4 {
        send(&mut admin, &t, p, "one", 0, 100);
    }
    let group_stored = |admin: &mut spillway_tests::IggyAdmin, p: u32| {
        admin
            .stored_offset(
                &TestConsumer::Group("spillway".into()),
                &t.stream,
                &t.topic,
                p,
            )
            .unwrap()
    };
    wait_until("first round stored", LONG, || {
        (0..4).all(|p| group_stored(&mut admin, p) == Some(99))
    });
    let parts_a: BTreeSet<u32> = lines(&out_a).iter().map(|l| l.partition).collect();
    let parts_b: BTreeSet<u32> = lines(&out_b).iter().map(|l| l.partition).collect();
    assert!(
        !parts_a.is_empty() && !parts_b.is_empty(),
        "both members get partitions: {parts_a:?} {parts_b:?}"
    );
    assert!(
        parts_a.is_disjoint(&parts_b),
        "no partition read by both: {parts_a:?} {parts_b:?}"
    );
    assert_eq!(parts_a.len() + parts_b.len(), 4);

    // Kill A: B takes its partitions over.
    a.signal("KILL");
    a.wait(Duration::from_secs(10));
    for p in 0..4 {
        send(&mut admin, &t, p, "two", 100, 50);
    }
    wait_until("B took over", LONG, || {
        (0..4).all(|p| group_stored(&mut admin, p) == Some(149))
    });
    let after: BTreeSet<u32> = lines(&out_b)
        .iter()
        .filter(|l| l.offset >= 100)
        .map(|l| l.partition)
        .collect();
    assert_eq!(
        after,
        (0..4).collect::<BTreeSet<u32>>(),
        "B now reads every partition"
    );
    // At least once: every offset is in one of the files.
    let mut all = lines(&out_a);
    all.extend(lines(&out_b));
    for (p, offsets) in by_partition(&all) {
        let set: BTreeSet<u64> = offsets.into_iter().collect();
        assert_eq!(set, (0..150).collect::<BTreeSet<u64>>(), "partition {p}");
    }
}

#[test]
fn a_wrong_password_and_a_missing_stream_fail_with_their_names() {
    let iggy = server();
    let t = topic(&iggy, "bad", 1);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let cfg = config(&iggy, &t, "partitions = [0]", &out, "", "").replace(
        &format!("password = \"{}\"", iggy.password()),
        "password = \"not-the-password\"",
    );
    let mut engine = Engine::start(dir.path(), "badpw", &cfg);
    let status = engine
        .wait(Duration::from_secs(20))
        .expect("a wrong password ends the run");
    assert_eq!(status.code(), Some(1));
    let log = engine.log();
    assert!(log.contains("invalid credentials"), "{log}");
    assert!(
        !log.contains("not-the-password"),
        "the password must not be logged"
    );

    let cfg =
        config(&iggy, &t, "partitions = [0]", &out, "", "").replace(&t.stream, "no-such-stream");
    let mut engine = Engine::start(dir.path(), "nostream", &cfg);
    let status = engine
        .wait(Duration::from_secs(20))
        .expect("a missing stream ends the run");
    assert_eq!(status.code(), Some(1));
    assert!(
        engine.log().contains("stream no-such-stream not found"),
        "{}",
        engine.log()
    );

    let cfg = config(&iggy, &t, "partitions = [0, 5]", &out, "", "");
    let mut engine = Engine::start(dir.path(), "nopartition", &cfg);
    assert_eq!(
        engine.wait(Duration::from_secs(20)).and_then(|s| s.code()),
        Some(1)
    );
    assert!(
        engine.log().contains("partition 5 not found"),
        "{}",
        engine.log()
    );
}

#[test]
fn a_bad_config_names_the_key_and_the_file() {
    let iggy = server();
    let t = topic(&iggy, "cfg", 1);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let good = config(&iggy, &t, "partitions = [0]", &out, "", "");
    let (code, stdout, _) = check(dir.path(), "good", &good);
    assert_eq!(code, 0);
    assert!(stdout.contains("partitions 0"), "{stdout}");

    let (code, _, stderr) = check(
        dir.path(),
        "zero",
        &good.replace("poll_interval = \"5ms\"", "window_messages = 0"),
    );
    assert_eq!(code, 2);
    assert!(
        stderr.contains("zero.toml") && stderr.contains("sink[0].window_messages"),
        "{stderr}"
    );

    let (code, _, stderr) = check(
        dir.path(),
        "typo",
        &good.replace("batch_size = 50", "bach_size = 50"),
    );
    assert_eq!(code, 2);
    assert!(stderr.contains("bach_size"), "{stderr}");

    let (code, _, stderr) = check(
        dir.path(),
        "core",
        &good.replace("[runtime]", "[runtime]\ncores = [4096]"),
    );
    assert_eq!(code, 2);
    assert!(
        stderr.contains("runtime.cores[0]") && stderr.contains("4096"),
        "{stderr}"
    );
}

#[test]
fn shards_are_pinned_to_their_cores() {
    let iggy = server();
    let t = topic(&iggy, "pin", 2);
    let machine = spillway::coremap::Machine::detect();
    let core = *machine.cores.last().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let cfg = config(&iggy, &t, "partitions = [0, 1]", &out, "", "")
        .replace("[runtime]", &format!("[runtime]\ncores = [{core}]"));
    let (_, stdout, _) = check(dir.path(), "pin-check", &cfg);
    assert!(
        stdout.contains(&format!("shard 0 on core {core}:")),
        "{stdout}"
    );
    let mut engine = Engine::start(dir.path(), "pin", &cfg);
    let pid = engine.pid();
    let mut shard_cpus = None;
    wait_until("the shard thread", LONG, || {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return false;
        };
        for task in tasks.flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if comm.trim() == "spillway-shard-" || comm.trim().starts_with("spillway-shard") {
                let status =
                    std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
                shard_cpus = status
                    .lines()
                    .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                    .map(|s| s.trim().to_owned());
                return shard_cpus.is_some();
            }
        }
        false
    });
    assert_eq!(
        shard_cpus,
        Some(core.to_string()),
        "the shard thread is pinned to core {core}"
    );
    engine.signal("TERM");
    assert!(
        engine.wait(Duration::from_secs(20)).unwrap().success(),
        "{}",
        engine.log()
    );
}

/// `spillway run ... 2>&1 | head -1`: once the reader of stderr is gone, every log write fails
/// with EPIPE. Before, the logger reported that with `eprintln!` on the same stderr, which
/// panicked: exit 101 mid-run. Now lines that cannot be written are dropped and the run ends
/// as documented (0 here: the generate source's messages all delivered). No Iggy needed.
#[test]
fn a_closed_stderr_does_not_end_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let cfg = format!(
        r#"
[metrics]
address = ""
log_interval = "100ms"

[[sink]]
name = "pipe"
type = "file"
source = "generate"

[sink.file]
path = "{}"

[sink.generate]
partitions = 2
rate = 5000
size = 10
messages = 5000
"#,
        out.display()
    );
    let path = dir.path().join("pipe.toml");
    std::fs::write(&path, cfg).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_spillway"))
        .arg("run")
        .arg("--config")
        .arg(&path)
        .env("SPILLWAY_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Read the first line, then close the pipe, as `head -1` does.
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stderr, &mut first).unwrap();
    drop(stderr);
    let deadline = std::time::Instant::now() + LONG;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the engine did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "first line: {first}");
    assert_eq!(lines(&out).len(), 5000, "every message delivered");
}

/// `timeout` and some supervisors send SIGTERM to the process and to its group, so two arrive
/// within milliseconds: that is one request to stop, and the engine drains (exit 0). Before,
/// the second counted as "stop now" and the run ended with 130 without draining.
#[test]
fn two_signals_within_a_second_drain_like_one() {
    let iggy = server();
    let t = topic(&iggy, "twin", 1);
    let mut admin = iggy.admin().unwrap();
    send(&mut admin, &t, 0, "x", 0, 100);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let cfg = config(
        &iggy,
        &t,
        "partitions = [0]",
        &out,
        "batch_size = 10",
        "confirm_delay = \"300ms\"",
    );
    let mut engine = Engine::start(dir.path(), "twin", &cfg);
    wait_until("some confirmations", LONG, || !lines(&out).is_empty());
    // 50 ms apart: late enough that the kernel does not merge them into one pending signal
    // (two sent back to back often arrive as one), well within the second of grace.
    engine.signal("TERM");
    std::thread::sleep(Duration::from_millis(50));
    engine.signal("TERM");
    let status = engine.wait(LONG).expect("exits after the drain");
    let log = engine.log();
    assert_eq!(status.code(), Some(0), "a drain, not a forced stop\n{log}");
    assert!(!log.contains("stopping now"), "{log}");
    assert!(log.contains("still draining"), "{log}");
}

#[test]
fn a_second_signal_stops_at_once_and_stores_only_confirmed_offsets() {
    let iggy = server();
    let t = topic(&iggy, "twice", 1);
    let mut admin = iggy.admin().unwrap();
    send(&mut admin, &t, 0, "x", 0, 400);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    // Slow confirmations (up to 3 s per batch) and a long drain deadline.
    let cfg = config(
        &iggy,
        &t,
        "partitions = [0]",
        &out,
        "batch_size = 10",
        "confirm_delay = \"3s\"",
    )
    .replace("shutdown_timeout = \"5s\"", "shutdown_timeout = \"60s\"");
    let mut engine = Engine::start(dir.path(), "twice", &cfg);
    wait_until("some confirmations", LONG, || !lines(&out).is_empty());
    engine.signal("TERM");
    // A second signal counts once a second has passed (within it, it is the same request).
    std::thread::sleep(Duration::from_millis(1200));
    assert!(engine.running(), "the first signal drains");
    let asked = std::time::Instant::now();
    engine.signal("TERM");
    let status = engine
        .wait(Duration::from_secs(10))
        .expect("the second signal stops");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "stopped in {:?}",
        asked.elapsed()
    );
    assert_eq!(status.code(), Some(130), "{}", engine.log());
    assert!(
        !engine.log().contains("did not stop in time"),
        "the shard must cut its drain short and store offsets itself:\n{}",
        engine.log()
    );
    let have: BTreeSet<u64> = lines(&out).iter().map(|l| l.offset).collect();
    if let Some(mark) = stored(&mut admin, &t, "file-out", 0) {
        assert!(
            (0..=mark).all(|o| have.contains(&o)),
            "stored {mark} beyond what was written"
        );
    }
    assert!(
        have.len() < 400,
        "the stop must not wait for every slow batch"
    );
}
