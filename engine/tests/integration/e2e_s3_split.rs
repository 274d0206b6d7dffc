//! S3 keys split by the data (`{json./POINTER}`, `{header.NAME}`): the real Iggy server ->
//! the `spillway` binary -> s3s-fs (it verifies SigV4). One open object per distinct set of
//! values, each rotated on its own; the partition's marker and its stored offset never pass an
//! offset that is not in a complete object, so SIGKILLs at any moment leave every offset in
//! exactly one object, and every object holds only the values its key names.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::Topic;
use common::{Engine, engine_sections, s3_sink, stop_clean, topic, wait_stored};
use serde_json::Value;
use spillway_tests::{IggyAdmin, IggyServer, S3Server, TestMessage};

const LONG: Duration = Duration::from_secs(60);

/// What a record of a json_lines object holds: (partition, offset, region, tier).
type Record = (u64, u64, String, String);

/// Every data object under the bucket, by key, with its records.
fn records_by_object(dir: &Path) -> BTreeMap<String, Vec<Record>> {
    common::object_files(dir)
        .into_iter()
        .filter(|(key, _, _)| !key.contains(".spillway/"))
        .map(|(key, path, _)| {
            let body = std::fs::read(path).unwrap();
            let recs = String::from_utf8(body)
                .unwrap()
                .lines()
                .map(|l| {
                    let v: Value = serde_json::from_str(l).unwrap();
                    let payload = match &v["payload"] {
                        Value::String(s) => serde_json::from_str(s).unwrap(),
                        p => p.clone(),
                    };
                    let tier = v["headers"]["tier"].as_str().unwrap_or("").to_owned();
                    (
                        v["partition"].as_u64().unwrap(),
                        v["offset"].as_u64().unwrap(),
                        payload["region"].as_str().unwrap().to_owned(),
                        tier,
                    )
                })
                .collect();
            (key, recs)
        })
        .collect()
}

/// Every (partition, offset) in the objects, sorted (duplicates kept).
fn offsets(dir: &Path) -> Vec<(u64, u64)> {
    let mut all: Vec<(u64, u64)> = records_by_object(dir)
        .into_values()
        .flatten()
        .map(|(p, o, _, _)| (p, o))
        .collect();
    all.sort_unstable();
    all
}

/// Each object's records all have the region and tier its key begins with.
fn assert_each_object_holds_only_its_values(dir: &Path, prefix: &str) {
    for (key, recs) in records_by_object(dir) {
        let rest = key.strip_prefix(prefix).unwrap_or_else(|| panic!("{key}"));
        let mut parts = rest.split('/');
        let (region, tier) = (parts.next().unwrap(), parts.next().unwrap());
        assert!(!recs.is_empty(), "{key} is empty");
        for (_, offset, r, t) in &recs {
            assert_eq!(
                (r.as_str(), t.as_str()),
                (region, tier),
                "{key} holds offset {offset} of {r}/{t}"
            );
        }
    }
}

/// A skewed region for message `n`: most are eu, a few us and ap, one in a hundred rare.
fn region(n: u64) -> &'static str {
    match n % 100 {
        0 => "rare",
        1..=9 => "ap",
        10..=29 => "us",
        _ => "eu",
    }
}

fn message(p: u32, n: u64, filler: &str) -> TestMessage {
    let tier = if n.is_multiple_of(7) { "gold" } else { "std" };
    TestMessage::new(
        u128::from(n) + 1,
        format!(
            r#"{{"region":"{}","p":{p},"n":{n},"pad":"{filler}"}}"#,
            region(n)
        )
        .into_bytes(),
    )
    .with_header("tier", tier)
}

fn send_range(admin: &mut IggyAdmin, t: &Topic, p: u32, range: std::ops::Range<u64>, filler: &str) {
    let batch: Vec<TestMessage> = range.map(|n| message(p, n, filler)).collect();
    common::send_all(admin, t, p, &batch);
}

/// 20 MB through a proxy that breaks uploads, keys split by a JSON field and a header into
/// eight sets of values of very different rates (at most five objects open per partition:
/// the oldest is closed for a new set), and five SIGKILLs at random moments, each followed by a
/// restart. After each kill, Iggy's stored offset of a partition never passes what complete
/// objects hold; at the end every offset is in exactly one object, and every object holds only
/// the values its key names.
#[test]
fn split_objects_survive_faults_and_sigkills_with_every_offset_once_and_only_their_values() {
    const PER_PARTITION: u64 = 10_000;
    let s3 = S3Server::start().unwrap();
    let proxy = common::faulty_store(&s3, 0x5b117);
    let iggy = IggyServer::start().unwrap();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "s3split", 2);
    let filler = "x".repeat(900);
    for p in 0..2u32 {
        send_range(&mut admin, &t, p, 0..PER_PARTITION, &filler);
    }
    let cfg = engine_sections(&iggy)
        + &s3_sink(
            "split",
            &t,
            &s3,
            "prefix = \"s/\"\nkey = \"{json./region}/{header.tier}/{partition}-{first_offset}.{ext}\"\n\
             max_open_objects = 5\nmax_object_messages = 300\nidle_flush = \"700ms\"\n\
             retry_min = \"50ms\"\nretry_max = \"500ms\"",
        )
        .replace(&s3.endpoint(), &format!("http://{}", proxy.host_port()));
    let dir = tempfile::tempdir().unwrap();
    for round in 0..5 {
        let mut engine = Engine::start(dir.path(), &format!("split{round}"), &cfg);
        std::thread::sleep(Duration::from_millis(fastrand::u64(800..2500)));
        engine.signal("KILL");
        let _ = engine.wait(Duration::from_secs(10));
        common::assert_stored_in_objects(
            &mut admin,
            &t,
            "split",
            &offsets(&s3.bucket_dir()),
            round,
        );
    }
    let mut engine = Engine::start(dir.path(), "split-last", &cfg);
    wait_stored(
        &mut engine,
        &mut admin,
        &t,
        "split",
        PER_PARTITION - 1,
        Duration::from_secs(240),
    );
    stop_clean(&mut engine, Duration::from_secs(60));
    let all = offsets(&s3.bucket_dir());
    let want: Vec<(u64, u64)> = (0..2u64)
        .flat_map(|p| (0..PER_PARTITION).map(move |o| (p, o)))
        .collect();
    if all != want {
        let mut seen = BTreeMap::new();
        for o in &all {
            *seen.entry(*o).or_insert(0) += 1;
        }
        let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).take(10).collect();
        let missing: Vec<_> = want
            .iter()
            .filter(|o| !seen.contains_key(o))
            .take(10)
            .collect();
        panic!(
            "every offset in exactly one object: {} records for {} offsets; twice: {twice:?}; missing: {missing:?}",
            all.len(),
            want.len()
        );
    }
    assert_each_object_holds_only_its_values(&s3.bucket_dir(), "s/");
    let objects = records_by_object(&s3.bucket_dir());
    assert!(
        objects.keys().any(|k| k.starts_with("s/rare/")),
        "the rare region has its own objects: {:?}",
        objects.keys().take(20).collect::<Vec<_>>()
    );
    assert!(
        proxy.stats().faults() > 0,
        "the proxy injected no fault: {:?}",
        proxy.stats()
    );
}

/// A rare value's object is still open while a common one's completes; the engine is killed
/// before Iggy stores any offset, then restarted and drained. With the watermark kept over all
/// open objects, the marker says nothing before the rare object's first offset is safe, and
/// the restart writes the rare message again (the complete common object it skips, by its
/// mark): every offset once. With the marker taken from the newest object
/// (`SPILLWAY_FAULT_SPLIT_MARKER_FROM_NEWEST_OBJECT`, a fault the debug build takes for this
/// test only), the restart starts past the common object and the rare message is lost.
#[test]
fn the_marker_keeps_the_watermark_over_all_open_objects_and_taken_from_the_newest_loses_data() {
    fn run(fault: bool) -> Vec<(u64, u64)> {
        let s3 = S3Server::start().unwrap();
        let iggy = IggyServer::start().unwrap();
        let mut admin = iggy.admin().unwrap();
        let name = if fault { "s3newest" } else { "s3watermark" };
        let t = topic(&iggy, name, 1);
        let cfg = |commit: &str| {
            engine_sections(&iggy)
                + &s3_sink(
                    "w",
                    &t,
                    &s3,
                    "prefix = \"w/\"\nkey = \"{json./region}/{header.tier}/{partition}-{first_offset}.{ext}\"\n\
                     max_object_messages = 50\nidle_flush = \"1h\"",
                )
                .replace("commit_interval = \"50ms\"", commit)
        };
        let env: &[(&str, &str)] = if fault {
            &[("SPILLWAY_FAULT_SPLIT_MARKER_FROM_NEWEST_OBJECT", "1")]
        } else {
            &[]
        };
        // Offset 0 is rare; 1..=50 are eu/std and fill one object; 51..=60 are eu/std too.
        let msgs: Vec<TestMessage> = (0..61u64)
            .map(|n| {
                let region = if n == 0 { "rare" } else { "eu" };
                TestMessage::new(
                    u128::from(n) + 1,
                    format!(r#"{{"region":"{region}","n":{n}}}"#).into_bytes(),
                )
                .with_header("tier", "std")
            })
            .collect();
        common::send_all(&mut admin, &t, 0, &msgs);
        let dir = tempfile::tempdir().unwrap();
        let mut engine = Engine::start_with_env(
            dir.path(),
            "w1",
            &cfg("commit_interval = \"1h\"\ncommit_every = 1000000"),
            env,
        );
        let deadline = Instant::now() + LONG;
        while offsets(&s3.bucket_dir()).len() < 50 {
            assert!(Instant::now() < deadline, "{}", engine.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        // The marker is written before the offsets are confirmed; give it a moment.
        std::thread::sleep(Duration::from_millis(500));
        engine.signal("KILL");
        let _ = engine.wait(Duration::from_secs(10));
        assert_eq!(
            common::stored(&mut admin, &t, "w", 0),
            None,
            "the kill came before any offset commit"
        );
        let mut engine =
            Engine::start_with_env(dir.path(), "w2", &cfg("commit_interval = \"50ms\""), env);
        // Everything the restart is given is written by the drain (on_shutdown = "flush").
        let deadline = Instant::now() + LONG;
        while !engine.log().contains("resuming at offset") {
            assert!(Instant::now() < deadline, "{}", engine.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(500));
        stop_clean(&mut engine, Duration::from_secs(30));
        assert_each_object_holds_only_its_values(&s3.bucket_dir(), "w/");
        offsets(&s3.bucket_dir())
    }
    let want: Vec<(u64, u64)> = (0..61).map(|o| (0, o)).collect();
    assert_eq!(run(false), want, "every offset in exactly one object");
    let lost = run(true);
    assert!(
        !lost.contains(&(0, 0)) && lost.len() == 60,
        "with the marker taken from the newest object the rare message is lost: {lost:?}"
    );
}
