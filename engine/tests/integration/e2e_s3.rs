//! The S3 sink end to end: the real Iggy server (see `IggyServer::start`) -> the `spillway` binary ->
//! s3s-fs started by the harness (it verifies SigV4). Objects are read back from s3s-fs's data
//! directory and parsed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{
    Engine, engine_sections, s3_sink, send, stop_clean, topic, wait_exit_code, wait_stored,
};
use spillway_tests::{IggyServer, S3Server};

const LONG: Duration = Duration::from_secs(60);

fn iggy() -> IggyServer {
    IggyServer::start().unwrap()
}

/// Every object under `dir`, by key, with its bytes (s3s-fs's bookkeeping skipped).
fn objects(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    common::object_files(dir)
        .into_iter()
        .map(|(key, path, _)| (key, std::fs::read(path).unwrap()))
        .collect()
}

/// (partition, offset) of every record of json_lines objects, per object key.
fn json_records(objects: &BTreeMap<String, Vec<u8>>) -> Vec<(String, Vec<(u64, u64)>)> {
    objects
        .iter()
        .filter(|(key, _)| !key.contains(".spillway/"))
        .map(|(key, body)| {
            let recs = String::from_utf8(body.clone())
                .unwrap()
                .lines()
                .map(|l| {
                    let v: serde_json::Value = serde_json::from_str(l).unwrap();
                    (
                        v["partition"].as_u64().unwrap(),
                        v["offset"].as_u64().unwrap(),
                    )
                })
                .collect();
            (key.clone(), recs)
        })
        .collect()
}

#[test]
fn json_lines_objects_hold_every_offset_once_with_deterministic_keys() {
    let s3 = S3Server::start().unwrap();
    let iggy = iggy();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "s3lines", 2);
    for p in 0..2 {
        send(&mut admin, &t, p, "m", 0, 250);
    }
    let cfg = engine_sections(&iggy)
        + &s3_sink(
            "s3l",
            &t,
            &s3,
            "prefix = \"raw/\"\nkey = \"{stream}/{partition}/{first_offset}.{ext}\"\nmax_object_messages = 100\nidle_flush = \"300ms\"",
        );
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::start(dir.path(), "s3l", &cfg);
    wait_stored(&mut engine, &mut admin, &t, "s3l", 249, LONG);
    stop_clean(&mut engine, Duration::from_secs(30));

    let objs = objects(&s3.bucket_dir());
    let keys: Vec<&String> = objs.keys().collect();
    let stream = t_stream_escaped(&t.stream);
    let want: Vec<String> = (0..2)
        .flat_map(|p| {
            let stream = stream.clone();
            [0u64, 100, 200]
                .into_iter()
                .map(move |o| format!("raw/{stream}/{p}/{o:020}.jsonl"))
        })
        .collect();
    assert_eq!(
        keys,
        want.iter().collect::<Vec<_>>(),
        "one object per 100 messages, keyed by partition and first offset"
    );
    for (key, recs) in json_records(&objs) {
        let p: u64 = key.split('/').nth(2).unwrap().parse().unwrap();
        let first: u64 = key
            .rsplit('/')
            .next()
            .unwrap()
            .trim_end_matches(".jsonl")
            .parse()
            .unwrap();
        let expect: Vec<(u64, u64)> = (first..(first + 100).min(250)).map(|o| (p, o)).collect();
        assert_eq!(recs, expect, "{key}: every offset once, in order");
    }
    // The metadata and headers of a record, and the payload embedded as JSON or text.
    let body = String::from_utf8(objs[&want[0]].clone()).unwrap();
    let first: serde_json::Value = serde_json::from_str(body.lines().next().unwrap()).unwrap();
    assert_eq!(first["stream"], t.stream.as_str());
    assert_eq!(first["headers"]["n"], "0");
    assert_eq!(first["payload"]["text"], "m-p0-0");
    let second: serde_json::Value = serde_json::from_str(body.lines().nth(1).unwrap()).unwrap();
    assert_eq!(second["payload"], "m-p0-1");
}

fn t_stream_escaped(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[test]
fn gzip_and_zstd_objects_decompress_to_every_record() {
    let s3 = S3Server::start().unwrap();
    let iggy = iggy();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "s3comp", 1);
    send(&mut admin, &t, 0, "c", 0, 300);
    let cfg = engine_sections(&iggy)
        + &s3_sink(
            "gz",
            &t,
            &s3,
            "prefix = \"gz/\"\ncompression = \"gzip\"\nmax_object_messages = 120\nidle_flush = \"300ms\"",
        )
        + &s3_sink(
            "zs",
            &t,
            &s3,
            "prefix = \"zs/\"\ncompression = \"zstd\"\nformat = \"json_array\"\nidle_flush = \"300ms\"",
        );
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::start(dir.path(), "comp", &cfg);
    wait_stored(&mut engine, &mut admin, &t, "gz", 299, LONG);
    wait_stored(&mut engine, &mut admin, &t, "zs", 299, LONG);
    stop_clean(&mut engine, Duration::from_secs(30));
    let objs = objects(&s3.bucket_dir());
    let mut gz_offsets = Vec::new();
    let mut zs_offsets = Vec::new();
    for (key, body) in &objs {
        if key.starts_with("gz/") {
            assert!(key.ends_with(".jsonl.gz"), "{key}");
            let mut text = String::new();
            flate2::read::MultiGzDecoder::new(&body[..])
                .read_to_string(&mut text)
                .unwrap();
            for l in text.lines() {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                gz_offsets.push(v["offset"].as_u64().unwrap());
            }
        } else if key.starts_with("zs/") {
            assert!(key.ends_with(".json.zst"), "{key}");
            let raw = zstd::stream::decode_all(&body[..]).unwrap();
            let v: serde_json::Value = serde_json::from_slice(&raw).unwrap();
            for r in v.as_array().unwrap() {
                zs_offsets.push(r["offset"].as_u64().unwrap());
            }
        }
    }
    assert_eq!(gz_offsets, (0..300).collect::<Vec<_>>());
    assert_eq!(zs_offsets, (0..300).collect::<Vec<_>>());
    assert_eq!(objs.keys().filter(|k| k.starts_with("gz/")).count(), 3);
}

/// `n` JSON messages of 700 B to 1.3 KB (ids from 1) of words and hex numbers drawn from
/// `seed`: text that compresses to about a third, like real rows, not to nothing.
fn varied_messages(n: u64, seed: u64) -> Vec<spillway_tests::TestMessage> {
    let words = [
        "order",
        "shipped",
        "north",
        "valve",
        "parcel",
        "customer",
        "express",
        "warehouse",
        "invoice",
        "return",
        "sensor",
        "pressure",
        "delivered",
        "gift",
        "priority",
        "backorder",
    ];
    let mut x: u64 = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..n)
        .map(|i| {
            let mut text = String::new();
            while text.len() < 700 + (next() % 600) as usize {
                text.push_str(words[(next() % words.len() as u64) as usize]);
                text.push_str(&format!(" {:x} ", next() % 100_000));
            }
            let payload = format!(
                "{{\"n\":{i},\"id\":\"{:016x}\",\"text\":\"{text}\"}}",
                next()
            );
            spillway_tests::TestMessage::new(u128::from(i) + 1, payload.into_bytes())
        })
        .collect()
}

/// (partition, offset) of every record of the gzip objects under `prefix`, sorted, each
/// object read whole (all its members).
fn gzip_records(s3: &S3Server, prefix: &str) -> Vec<(u64, u64)> {
    let mut all: Vec<(u64, u64)> = objects(&s3.bucket_dir())
        .into_iter()
        .filter(|(key, _)| key.starts_with(prefix))
        .flat_map(|(_, body)| {
            let mut text = String::new();
            flate2::read::MultiGzDecoder::new(&body[..])
                .read_to_string(&mut text)
                .unwrap();
            text.lines()
                .map(|l| {
                    let v: serde_json::Value = serde_json::from_str(l).unwrap();
                    (
                        v["partition"].as_u64().unwrap(),
                        v["offset"].as_u64().unwrap(),
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect();
    all.sort_unstable();
    all
}

/// The gzip encoder (members of 1 MiB, the pending block counted in rotation and memory)
/// through what production does to a sink: store faults from the fault proxy, the store
/// frozen (SIGSTOP) past `request_timeout` and let go, and SIGKILLs of the engine at varied
/// times. Iggy's stored offset never passes what complete objects hold, and in the end
/// every offset is in exactly one object, each object read whole.
#[test]
fn gzip_objects_survive_store_faults_a_frozen_store_and_sigkills_with_every_offset_once() {
    const PER_PARTITION: u64 = 8_000;
    let s3 = S3Server::start().unwrap();
    let proxy = common::faulty_store(&s3, 0x9219);
    let iggy = iggy();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "s3gzfaults", 2);
    for p in 0..2u32 {
        common::send_all(
            &mut admin,
            &t,
            p,
            &varied_messages(PER_PARTITION, 0x51 + u64::from(p)),
        );
    }
    let cfg = engine_sections(&iggy)
        + &s3_sink(
            "gzf",
            &t,
            &s3,
            "prefix = \"gzf/\"\ncompression = \"gzip\"\nmax_object_size = \"1MiB\"\npart_size = \"5MiB\"\nidle_flush = \"500ms\"\nrequest_timeout = \"1s\"\nretry_min = \"50ms\"\nretry_max = \"500ms\"",
        )
        .replace(&s3.endpoint(), &format!("http://{}", proxy.host_port()));
    let store_pid = s3.pid().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    for round in 0..4 {
        let mut engine = Engine::start(dir.path(), &format!("gzf{round}"), &cfg);
        let seed = fastrand::u64(..);
        eprintln!("round {round}: timing seed {seed}");
        let mut rng = fastrand::Rng::with_seed(seed);
        std::thread::sleep(Duration::from_millis(rng.u64(400..1500)));
        if round % 2 == 1 {
            // The store frozen past request_timeout, then let go before the kill.
            let stop = std::process::Command::new("kill")
                .args(["-STOP", &store_pid])
                .status()
                .unwrap();
            assert!(stop.success());
            std::thread::sleep(Duration::from_millis(rng.u64(1500..2500)));
            let cont = std::process::Command::new("kill")
                .args(["-CONT", &store_pid])
                .status()
                .unwrap();
            assert!(cont.success());
            std::thread::sleep(Duration::from_millis(rng.u64(200..1200)));
        }
        engine.signal("KILL");
        let _ = engine.wait(Duration::from_secs(10));
        common::assert_stored_in_objects(&mut admin, &t, "gzf", &gzip_records(&s3, "gzf/"), round);
    }
    let mut engine = Engine::start(dir.path(), "gzf-last", &cfg);
    wait_stored(
        &mut engine,
        &mut admin,
        &t,
        "gzf",
        PER_PARTITION - 1,
        Duration::from_secs(240),
    );
    stop_clean(&mut engine, Duration::from_secs(60));
    let want: Vec<(u64, u64)> = (0..2u64)
        .flat_map(|p| (0..PER_PARTITION).map(move |o| (p, o)))
        .collect();
    let all = gzip_records(&s3, "gzf/");
    assert!(
        all == want,
        "every offset in exactly one object: {} records for {} offsets",
        all.len(),
        want.len()
    );
    // Objects of 1 MiB compressed hold several members each.
    let sizes: Vec<usize> = objects(&s3.bucket_dir())
        .into_iter()
        .filter(|(key, _)| key.starts_with("gzf/"))
        .map(|(_, body)| body.len())
        .collect();
    assert!(sizes.iter().any(|&n| n > 512 << 10), "{sizes:?}");
    assert!(proxy.stats().faults() > 0, "no fault: {:?}", proxy.stats());
}

/// The readers the gzip objects must satisfy, run on the object files: Python's gzip module,
/// pyarrow's JSON reader over its gzip stream, and DuckDB's `read_json` (gzip told by the
/// extension). Prints one line per reader: name, records, distinct offsets, min, max.
const GZIP_READERS: &str = r#"
import gzip, json, sys
import pyarrow as pa, pyarrow.json as pj
import duckdb
paths = sys.argv[1:]
def line(name, offsets):
    print(name, len(offsets), len(set(offsets)), min(offsets), max(offsets))
offs = []
for p in paths:
    with gzip.open(p, "rt") as f:
        offs += [json.loads(l)["offset"] for l in f if l.strip()]
line("python-gzip", offs)
offs = []
for p in paths:
    t = pj.read_json(pa.CompressedInputStream(pa.OSFile(p), "gzip"))
    offs += t.column("offset").to_pylist()
line("pyarrow", offs)
offs = []
for p in paths:
    offs += [r[0] for r in duckdb.sql(f"select \"offset\" from read_json_auto('{p}')").fetchall()]
line("duckdb", offs)
"#;

/// gzip objects larger than a block (1 MiB of input) are several gzip members one after
/// another; every reader people point at them must read every record: flate2's multi-member
/// decoder, `gzip -dc` (zcat), Python's gzip, pyarrow and DuckDB. The first member alone holds
/// fewer records than the object, so the objects really have several members.
#[test]
fn gzip_objects_of_several_members_read_whole_in_every_reader() {
    let s3 = S3Server::start().unwrap();
    let iggy = iggy();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "s3gzmembers", 1);
    const N: u64 = 5000;
    let messages = varied_messages(N, 0x2545_F491_4F6C_DD1D);
    common::send_all(&mut admin, &t, 0, &messages);
    let cfg = engine_sections(&iggy)
        + &s3_sink(
            "gzm",
            &t,
            &s3,
            "prefix = \"gzm/\"\ncompression = \"gzip\"\nmax_object_messages = 3000\nidle_flush = \"3s\"",
        );
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::start(dir.path(), "gzm", &cfg);
    wait_stored(&mut engine, &mut admin, &t, "gzm", N - 1, LONG);
    stop_clean(&mut engine, Duration::from_secs(30));

    let files: Vec<(String, std::path::PathBuf)> = common::object_files(&s3.bucket_dir())
        .into_iter()
        .filter(|(key, _, _)| key.starts_with("gzm/"))
        .map(|(key, path, _)| (key, path))
        .collect();
    assert!(files.len() >= 2, "{files:?}");
    let mut offsets = Vec::new();
    let mut several = 0;
    for (key, path) in &files {
        assert!(key.ends_with(".jsonl.gz"), "{key}");
        let body = std::fs::read(path).unwrap();
        let mut all = String::new();
        flate2::read::MultiGzDecoder::new(&body[..])
            .read_to_string(&mut all)
            .unwrap();
        let mut first = String::new();
        flate2::read::GzDecoder::new(&body[..])
            .read_to_string(&mut first)
            .unwrap();
        // Past 1 MiB of input an object is several members.
        if all.len() > 1 << 20 {
            assert!(
                first.lines().count() < all.lines().count(),
                "{key}: one gzip member holds all {} records ({} bytes)",
                all.lines().count(),
                all.len()
            );
            several += 1;
        }
        for l in all.lines() {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            offsets.push(v["offset"].as_u64().unwrap());
        }
        let zcat = std::process::Command::new("gzip")
            .arg("-dc")
            .arg(path)
            .output()
            .expect("gzip");
        assert!(zcat.status.success(), "gzip -dc {key}: {zcat:?}");
        assert_eq!(zcat.stdout, all.as_bytes(), "gzip -dc {key}");
    }
    assert_eq!(offsets, (0..N).collect::<Vec<_>>());
    assert!(several >= 1, "no object passed 1 MiB of input: {files:?}");

    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(GZIP_READERS)
        .args(files.iter().map(|(_, p)| p))
        .output()
        .expect("python3 (scripts/setup.sh installs pyarrow and duckdb)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "readers failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = format!("{N} {N} 0 {}", N - 1);
    for reader in ["python-gzip", "pyarrow", "duckdb"] {
        assert!(
            stdout.lines().any(|l| l == format!("{reader} {want}")),
            "{reader} did not read every record once: {stdout}"
        );
    }
}

#[test]
fn a_missing_bucket_is_reported_before_anything_is_polled() {
    let s3 = S3Server::start().unwrap();
    let iggy = iggy();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "s3nobucket", 1);
    send(&mut admin, &t, 0, "x", 0, 10);
    let cfg = engine_sections(&iggy)
        + &s3_sink("nb", &t, &s3, "").replace(
            &format!("bucket = \"{}\"", s3.bucket()),
            "bucket = \"no-such-bucket\"",
        );
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::start(dir.path(), "nb", &cfg);
    assert_eq!(wait_exit_code(&mut engine, LONG), Some(1));
    let log = engine.log();
    assert!(log.contains("no-such-bucket"), "{log}");
    assert!(log.contains("NoSuchBucket") || log.contains("404"), "{log}");
    assert_eq!(common::stored(&mut admin, &t, "nb", 0), None);
}

#[test]
fn a_store_that_is_down_keeps_the_offsets_unconfirmed_and_the_objects_are_written_again() {
    let mut s3 = S3Server::start().unwrap();
    let iggy = iggy();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "s3down", 1);
    send(&mut admin, &t, 0, "a", 0, 50);
    let cfg = engine_sections(&iggy)
        + &s3_sink(
            "down",
            &t,
            &s3,
            "prefix = \"d/\"\nmax_object_messages = 50\nidle_flush = \"200ms\"\nrequest_attempts = 2\nretry_min = \"100ms\"\nretry_max = \"300ms\"",
        );
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::start(dir.path(), "down", &cfg);
    wait_stored(&mut engine, &mut admin, &t, "down", 49, LONG);

    // The store goes away: the next objects fail, their offsets are not committed.
    s3.stop().unwrap();
    send(&mut admin, &t, 0, "a", 50, 120);
    let deadline = std::time::Instant::now() + LONG;
    while !engine.log().contains("S3 upload failed") {
        assert!(std::time::Instant::now() < deadline, "{}", engine.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(common::stored(&mut admin, &t, "down", 0), Some(49));

    // Back: the objects are written again from their first offsets.
    s3.start_again().unwrap();
    wait_stored(&mut engine, &mut admin, &t, "down", 169, LONG);
    stop_clean(&mut engine, Duration::from_secs(30));
    let mut offsets = Vec::new();
    for (_, recs) in json_records(&objects(&s3.bucket_dir())) {
        offsets.extend(recs.into_iter().map(|(_, o)| o));
    }
    offsets.sort_unstable();
    assert_eq!(
        offsets,
        (0..170).collect::<Vec<_>>(),
        "every offset in exactly one object"
    );
}

#[test]
fn a_crash_between_an_upload_and_its_offset_commit_never_writes_a_message_twice() {
    let s3 = S3Server::start().unwrap();
    let iggy = iggy();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "s3crash", 1);
    // Objects are cut by the idle flush (wall clock: a replay would cut elsewhere), and Iggy
    // offsets are stored only rarely: the kill lands after the uploads, before any commit.
    let sink = |commit: &str| {
        engine_sections(&iggy)
            + &s3_sink(
                "crash",
                &t,
                &s3,
                "prefix = \"c/\"\nidle_flush = \"300ms\"\nmax_object_messages = 1000",
            )
            .replace("commit_interval = \"50ms\"", commit)
    };
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::start(
        dir.path(),
        "crash1",
        &sink("commit_interval = \"1h\"\ncommit_every = 1000000"),
    );
    let records = |s3: &S3Server| -> Vec<u64> {
        let mut all: Vec<u64> = json_records(&objects(&s3.bucket_dir()))
            .into_iter()
            .flat_map(|(_, r)| r.into_iter().map(|(_, o)| o))
            .collect();
        all.sort_unstable();
        all
    };
    let wait_records = |s3: &S3Server, n: usize| {
        let deadline = std::time::Instant::now() + LONG;
        while records(s3).len() < n {
            assert!(
                std::time::Instant::now() < deadline,
                "objects: {:?}",
                objects(&s3.bucket_dir()).keys()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    send(&mut admin, &t, 0, "k", 0, 100);
    wait_records(&s3, 100);
    send(&mut admin, &t, 0, "k", 100, 50);
    wait_records(&s3, 150);
    std::thread::sleep(Duration::from_millis(300));
    engine.signal("KILL");
    let _ = engine.wait(Duration::from_secs(10));
    assert_eq!(
        common::stored(&mut admin, &t, "crash", 0),
        None,
        "the kill came before any offset commit"
    );
    assert_eq!(
        objects(&s3.bucket_dir())
            .keys()
            .filter(|k| !k.contains(".spillway"))
            .count(),
        2
    );

    // The restart replays nothing that is already in an object, although Iggy stored nothing:
    // without the marker it would write 0..=149 again as one object (overwriting the first)
    // and leave 100..=149 in the second as well.
    let mut engine = Engine::start(dir.path(), "crash2", &sink("commit_interval = \"50ms\""));
    let deadline = std::time::Instant::now() + LONG;
    while !engine.log().contains("already holds up to offset 149") {
        assert!(std::time::Instant::now() < deadline, "{}", engine.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    send(&mut admin, &t, 0, "k", 150, 10);
    wait_stored(&mut engine, &mut admin, &t, "crash", 159, LONG);
    stop_clean(&mut engine, Duration::from_secs(30));
    assert_eq!(
        records(&s3),
        (0..160).collect::<Vec<_>>(),
        "every offset in exactly one object"
    );
}

/// 100 MB through a proxy that breaks uploads (dropped connections, 500, 503 SlowDown), and
/// five SIGKILLs at random moments, each followed by a restart.
#[test]
fn faults_and_five_sigkills_leave_every_offset_in_exactly_one_object() {
    use spillway_tests::TestMessage;
    const PER_PARTITION: u64 = 50_000;
    let s3 = S3Server::start().unwrap();
    let proxy = common::faulty_store(&s3, 0x5eed);
    let iggy = iggy();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "s3faults", 2);
    let filler = "x".repeat(980);
    for p in 0..2u32 {
        let batch: Vec<TestMessage> = (0..PER_PARTITION)
            .map(|n| {
                TestMessage::new(
                    u128::from(n) + 1,
                    format!("{p}-{n:08}-{filler}").into_bytes(),
                )
            })
            .collect();
        common::send_all(&mut admin, &t, p, &batch);
    }
    let cfg = engine_sections(&iggy)
        + &s3_sink(
            "faults",
            &t,
            &s3,
            "prefix = \"f/\"\nmax_object_size = \"12MiB\"\npart_size = \"5MiB\"\nidle_flush = \"500ms\"\nretry_min = \"50ms\"\nretry_max = \"500ms\"",
        )
        .replace(&s3.endpoint(), &format!("http://{}", proxy.host_port()));
    let records = || -> Vec<(u64, u64)> {
        let mut all: Vec<(u64, u64)> = json_records(&objects(&s3.bucket_dir()))
            .into_iter()
            .flat_map(|(_, r)| r)
            .collect();
        all.sort_unstable();
        all
    };
    let dir = tempfile::tempdir().unwrap();
    for round in 0..5 {
        let mut engine = Engine::start(dir.path(), &format!("faults{round}"), &cfg);
        std::thread::sleep(Duration::from_millis(fastrand::u64(800..3000)));
        engine.signal("KILL");
        let _ = engine.wait(Duration::from_secs(10));
        // What Iggy holds never passes what is in complete objects.
        common::assert_stored_in_objects(&mut admin, &t, "faults", &records(), round);
    }
    let mut engine = Engine::start(dir.path(), "faults-last", &cfg);
    wait_stored(
        &mut engine,
        &mut admin,
        &t,
        "faults",
        PER_PARTITION - 1,
        Duration::from_secs(240),
    );
    stop_clean(&mut engine, Duration::from_secs(60));
    let all = records();
    let want: Vec<(u64, u64)> = (0..2u64)
        .flat_map(|p| (0..PER_PARTITION).map(move |o| (p, o)))
        .collect();
    assert!(
        all == want,
        "every offset in exactly one object: {} records for {} offsets",
        all.len(),
        want.len()
    );
    assert!(
        proxy.stats().faults() > 0,
        "the proxy injected no fault: {:?}",
        proxy.stats()
    );
}

#[test]
fn record_interval_cuts_by_message_time_and_shutdown_flushes_or_leaves_open_objects() {
    let s3 = S3Server::start().unwrap();
    let iggy = iggy();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "s3time", 1);
    let cfg = |name: &str, extra: &str| {
        engine_sections(&iggy)
            + &s3_sink(
                name,
                &t,
                &s3,
                &format!("prefix = \"{name}/\"\nidle_flush = \"0s\"\n{extra}"),
            )
    };
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::start(
        dir.path(),
        "time",
        &cfg(
            "time",
            "record_interval = \"1s\"\nmax_object_messages = 100000",
        ),
    );
    send(&mut admin, &t, 0, "r", 0, 30);
    std::thread::sleep(Duration::from_millis(1200));
    send(&mut admin, &t, 0, "r", 30, 30);
    // The first burst's object closes when a message of a later second arrives; the last one
    // only at shutdown (idle flush is off), which flushes it.
    wait_stored(&mut engine, &mut admin, &t, "time", 29, LONG);
    stop_clean(&mut engine, Duration::from_secs(30));
    assert_eq!(common::stored(&mut admin, &t, "time", 0), Some(59));
    let objs = objects(&s3.bucket_dir().join("time"));
    assert!(objs.len() >= 2, "{:?}", objs.keys());
    let mut offsets = Vec::new();
    for (key, body) in &objs {
        let seconds: Vec<u64> = String::from_utf8(body.clone())
            .unwrap()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                offsets.push(v["offset"].as_u64().unwrap());
                v["timestamp"].as_u64().unwrap() / 1_000_000
            })
            .collect();
        assert!(
            seconds.windows(2).all(|w| w[0] == w[1]),
            "{key}: one object per second of message time, got {seconds:?}"
        );
    }
    offsets.sort_unstable();
    assert_eq!(offsets, (0..60).collect::<Vec<_>>());

    // on_shutdown = "leave": the open object is dropped and its offsets stay uncommitted.
    let mut engine = Engine::start(
        dir.path(),
        "leave",
        &cfg("leave", "on_shutdown = \"leave\""),
    );
    let deadline = std::time::Instant::now() + LONG;
    while !engine.log().contains("resuming at offset") {
        assert!(std::time::Instant::now() < deadline, "{}", engine.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    stop_clean(&mut engine, Duration::from_secs(30));
    assert_eq!(common::stored(&mut admin, &t, "leave", 0), None);
    assert!(
        !s3.bucket_dir().join("leave").exists()
            || objects(&s3.bucket_dir().join("leave")).is_empty()
    );
}

/// A TLS front for s3s-fs (which speaks plain HTTP): accepts TLS on a loopback port with a
/// certificate for `localhost` from `ca`, and passes the bytes to and from `backend`. Each
/// connection gets a thread that alternates between the two sides with short read timeouts.
fn tls_front(ca: &spillway_tests::TestCa, backend: u16) -> u16 {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use std::io::{ErrorKind, Write};
    use std::net::{TcpListener, TcpStream};
    let cert = ca.issue_server_cert(&["localhost"]).unwrap();
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(cert.cert_pem().as_bytes())
            .map(|c| c.unwrap())
            .collect();
    let key = PrivateKeyDer::from_pem_slice(cert.key_pem().as_bytes()).unwrap();
    let config = std::sync::Arc::new(
        rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let config = config.clone();
            std::thread::spawn(move || {
                let Ok(server) = TcpStream::connect(("127.0.0.1", backend)) else {
                    return;
                };
                let tick = Some(Duration::from_millis(2));
                let (_, _) = (client.set_read_timeout(tick), server.set_read_timeout(tick));
                let Ok(conn) = rustls::ServerConnection::new(config) else {
                    return;
                };
                let mut tls = rustls::StreamOwned::new(conn, client);
                let mut server = server;
                let mut buf = vec![0u8; 64 << 10];
                let idle = |e: &std::io::Error| {
                    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
                };
                loop {
                    match tls.read(&mut buf) {
                        Ok(0) => return,
                        Ok(n) => {
                            if server.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                        Err(e) if idle(&e) => {}
                        Err(_) => return,
                    }
                    match server.read(&mut buf) {
                        Ok(0) => return,
                        Ok(n) => {
                            if tls.write_all(&buf[..n]).and_then(|()| tls.flush()).is_err() {
                                return;
                            }
                        }
                        Err(e) if idle(&e) => {}
                        Err(_) => return,
                    }
                }
            });
        }
    });
    port
}

#[test]
fn an_https_endpoint_is_reached_with_the_configured_ca_and_refused_without_it() {
    let s3 = S3Server::start().unwrap();
    let ca = spillway_tests::TestCa::new("s3 test CA").unwrap();
    let port = tls_front(&ca, s3.port());
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.cert_pem()).unwrap();
    let iggy = iggy();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "s3tls", 1);
    send(&mut admin, &t, 0, "a", 0, 20);
    let https = |name: &str, extra: &str| {
        engine_sections(&iggy)
            + &s3_sink(name, &t, &s3, "max_object_messages = 10").replace(
                &format!("endpoint = \"{}\"", s3.endpoint()),
                &format!("endpoint = \"https://localhost:{port}\"\n{extra}"),
            )
    };
    // The store's CA trusted: every offset lands in objects written over TLS.
    let cfg = https("tls", &format!("tls_ca = \"{}\"", ca_file.display()));
    assert!(cfg.contains("https://localhost"), "{cfg}");
    let mut engine = Engine::start(dir.path(), "tls", &cfg);
    wait_stored(&mut engine, &mut admin, &t, "tls", 19, LONG);
    stop_clean(&mut engine, Duration::from_secs(30));
    let mut offsets: Vec<u64> = json_records(&objects(&s3.bucket_dir()))
        .into_iter()
        .flat_map(|(_, recs)| recs.into_iter().map(|(_, o)| o))
        .collect();
    offsets.sort_unstable();
    assert_eq!(offsets, (0..20).collect::<Vec<_>>());

    // Without it the Mozilla roots do not know the test CA: the start-up probe says so.
    let mut engine = Engine::start(dir.path(), "tls-untrusted", &https("untrusted", ""));
    assert_eq!(wait_exit_code(&mut engine, LONG), Some(1));
    let log = engine.log();
    assert!(
        log.contains("certificate") || log.contains("UnknownIssuer"),
        "{log}"
    );
}

#[test]
fn an_s3_sink_holding_the_shard_budget_pauses_the_other_sinks_on_that_shard() {
    // runtime.shard_memory_budget bounds the whole shard: the S3 sink's buffered bytes and the
    // windowed sinks' unconfirmed payloads count together (they were checked apart, so a shard
    // with both could hold about twice the budget).
    let s3 = S3Server::start().unwrap();
    let iggy = iggy();
    let mut admin = iggy.admin().unwrap();
    let held = topic(&iggy, "s3budget", 1);
    let other = topic(&iggy, "filebudget", 1);
    send(&mut admin, &held, 0, "a", 0, 12_000);
    let dir = tempfile::tempdir().unwrap();
    let core = spillway::coremap::Machine::detect()
        .cores
        .last()
        .copied()
        .unwrap();
    let file_sink = format!(
        r#"
[[sink]]
name = "budget-file"
type = "file"
stream = "{stream}"
topic = "{topic}"
partitions = [0]
poll_interval = "5ms"
commit_interval = "50ms"

[sink.file]
path = "{out}"
"#,
        stream = other.stream,
        topic = other.topic,
        out = dir.path().join("other.jsonl").display(),
    );
    // One shard for both sinks; the S3 sink keeps its objects open (a 5 MiB part is never
    // reached before the 1 MiB budget, no idle flush), so it holds the budget.
    let cfg = engine_sections(&iggy).replace(
        "[runtime]\n",
        &format!("[runtime]\ncores = [{core}]\nshard_memory_budget = \"1MiB\"\n"),
    ) + &s3_sink(
        "budget-s3",
        &held,
        &s3,
        "part_size = \"5MiB\"\nidle_flush = \"0s\"\nmax_object_size = \"64MiB\"",
    ) + &file_sink;
    let mut engine = Engine::start(dir.path(), "budget", &cfg);
    let deadline = std::time::Instant::now() + LONG;
    while !engine.log().contains(" running") {
        assert!(std::time::Instant::now() < deadline, "{}", engine.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_secs(2));
    // Now the other sink's messages arrive: the shard is at its budget, they wait.
    send(&mut admin, &other, 0, "b", 0, 100);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        common::stored(&mut admin, &other, "budget-file", 0),
        None,
        "the file sink polled while the S3 sink held the shard's budget"
    );
    let out = std::fs::read_to_string(dir.path().join("other.jsonl")).unwrap_or_default();
    assert_eq!(out.lines().count(), 0, "{out}");
    // On SIGTERM the S3 sink flushes; the engine stops cleanly.
    stop_clean(&mut engine, Duration::from_secs(30));
}

/// With `max_object_size = part_size` (5 MiB, json_lines) every object fits one part, so each
/// is one PutObject: no CreateMultipartUpload, UploadPart or Complete reaches the store (the
/// harness's fault proxy, passing everything, lists the requests). Before, an object was closed
/// only once its output had reached the limit, so it came out a record over one part and cost
/// four requests (Create, a full part, a part of one record, Complete) where one does. Each
/// object is now cut before the record that would take it past the limit: at most 5 MiB, and
/// within one record of it (but the last).
#[test]
fn objects_that_fit_one_part_are_one_put_object_each_and_never_pass_the_limit() {
    use spillway_tests::{FaultPlan, FaultProxy, TestMessage};
    const LIMIT: u64 = 5 << 20;
    const MESSAGES: u64 = 12_000;
    let s3 = S3Server::start().unwrap();
    let proxy = FaultProxy::start(s3.addr(), FaultPlan::passthrough()).unwrap();
    let iggy = iggy();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "s3fit", 1);
    let messages: Vec<TestMessage> = (0..MESSAGES)
        .map(|n| TestMessage::new(u128::from(n) + 1, format!("{n:01000}").into_bytes()))
        .collect();
    common::send_all(&mut admin, &t, 0, &messages);
    let metrics = std::net::SocketAddr::from((
        std::net::Ipv4Addr::LOCALHOST,
        spillway_tests::ports::free_loopback_port().unwrap(),
    ));
    let cfg = engine_sections(&iggy).replace("address = \"\"", &format!("address = \"{metrics}\""))
        + &s3_sink(
            "fit",
            &t,
            &s3,
            "part_size = \"5MiB\"\nmax_object_size = \"5MiB\"\nidle_flush = \"300ms\"",
        )
        .replace(&s3.endpoint(), &format!("http://{}", proxy.host_port()));
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::start(dir.path(), "fit", &cfg);
    wait_stored(&mut engine, &mut admin, &t, "fit", MESSAGES - 1, LONG);
    // The sink counts every request it sends (spillway_sink_requests_total): what the proxy saw.
    let deadline = Instant::now() + LONG;
    loop {
        let counted = common::scrape_metrics(metrics)
            .and_then(|b| common::metric_of_sink(&b, "spillway_sink_requests_total", "fit"));
        let seen = proxy.requests();
        if counted == Some(seen.len() as f64) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the sink counted {counted:?} requests, the proxy saw {}: {:?}\n{}",
            seen.len(),
            seen.iter()
                .map(|h| format!("{} {}", h.method, h.target))
                .collect::<Vec<_>>(),
            engine.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    stop_clean(&mut engine, Duration::from_secs(30));

    let objs = objects(&s3.bucket_dir());
    let data: Vec<(&String, &Vec<u8>)> = objs
        .iter()
        .filter(|(k, _)| !k.contains(".spillway/"))
        .collect();
    assert!(
        data.len() >= 3,
        "12 MB in objects of 5 MiB: {} objects",
        data.len()
    );
    let record = data[0].1.iter().position(|&b| b == b'\n').unwrap() as u64 + 1;
    for (i, (key, body)) in data.iter().enumerate() {
        let size = body.len() as u64;
        assert!(
            size <= LIMIT,
            "{key}: {size} bytes, over max_object_size {LIMIT}"
        );
        if i + 1 < data.len() {
            assert!(
                size + 2 * record > LIMIT,
                "{key}: {size} bytes, cut more than a record ({record} B) before the limit"
            );
        }
    }
    let offsets: Vec<u64> = json_records(&objs)
        .into_iter()
        .flat_map(|(_, recs)| recs.into_iter().map(|(_, o)| o))
        .collect();
    assert_eq!(
        offsets,
        (0..MESSAGES).collect::<Vec<_>>(),
        "every offset once, in order"
    );

    // (At start the sink lists open uploads, `GET ?uploads`, to abort an earlier run's.)
    let requests = proxy.requests();
    let multipart: Vec<String> = requests
        .iter()
        .filter(|r| r.method != "GET")
        .filter(|r| r.target.contains("uploads") || r.target.contains("partNumber="))
        .map(|r| format!("{} {}", r.method, r.target))
        .collect();
    assert!(multipart.is_empty(), "multipart requests: {multipart:?}");
    let puts = requests
        .iter()
        .filter(|r| r.method == "PUT" && !r.target.contains(".spillway"))
        .count();
    assert_eq!(puts, data.len(), "one PutObject per object");
}

/// The object options from config, checked on the requests the store gets (the harness's fault
/// proxy, passing everything, records each request head; s3s-fs checks every signature, and the
/// headers are signed): SSE-C with the key from an environment variable on every request that
/// writes or reads an object (CreateMultipartUpload, each UploadPart, PutObject, the marker's
/// PUT and its GET at start), the canned ACL and the templated user metadata and tags where an
/// object is created, Content-MD5 on every body. One multipart object (8 MB) and one PutObject.
/// A key that is not set stops the run with exit 2 naming the key, never a value.
#[test]
fn object_options_from_config_are_on_the_requests_the_store_gets() {
    use base64::Engine as _;
    use spillway_tests::{FaultPlan, FaultProxy, TestMessage};
    let s3 = S3Server::start().unwrap();
    let proxy = FaultProxy::start(s3.addr(), FaultPlan::passthrough()).unwrap();
    let iggy = iggy();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "s3opts", 1);
    let big: Vec<TestMessage> = (0..8000u64)
        .map(|n| {
            TestMessage::new(u128::from(n) + 1, format!("{n:01000}").into_bytes())
                .with_header("region", "eu west")
        })
        .collect();
    common::send_all(&mut admin, &t, 0, &big);
    let key = [7u8; 32];
    let b64 = base64::engine::general_purpose::STANDARD;
    let key_b64 = b64.encode(key);
    let key_md5 = b64.encode(<md5::Md5 as md5::Digest>::digest(key));
    let options = "idle_flush = \"500ms\"\ncontent_md5 = true\nsse = \"customer\"\n\
                   sse_customer_key_env = \"TEST_SSE_KEY\"\nacl = \"bucket-owner-full-control\"\n\
                   [sink.s3.user_metadata]\nteam = \"ingest\"\nsource = \"{stream}/{topic}#{partition}\"\n\
                   [sink.s3.tags]\nregion = \"{header.region}\"\nday = \"{date}\"";
    let cfg = engine_sections(&iggy).replace("log_interval = \"0s\"", "log_interval = \"100ms\"")
        + &s3_sink("opts", &t, &s3, options)
            .replace(&s3.endpoint(), &format!("http://{}", proxy.host_port()));
    let dir = tempfile::tempdir().unwrap();

    // Without the key's variable: exit 2, the key named.
    let mut engine = Engine::start(dir.path(), "opts-nokey", &cfg);
    assert_eq!(
        wait_exit_code(&mut engine, LONG),
        Some(2),
        "{}",
        engine.log()
    );
    let log = engine.log();
    assert!(
        log.contains("s3.sse_customer_key_env") && log.contains("TEST_SSE_KEY is not set"),
        "{log}"
    );
    assert!(proxy.requests().is_empty(), "nothing sent without the key");

    let mut engine = Engine::start_with_env(
        dir.path(),
        "opts",
        &cfg,
        &[("TEST_SSE_KEY", key_b64.as_str())],
    );
    wait_stored(&mut engine, &mut admin, &t, "opts", 7999, LONG);
    let small: Vec<TestMessage> = (8000..8010u64)
        .map(|n| TestMessage::new(u128::from(n) + 1, "{}").with_header("region", "eu west"))
        .collect();
    common::send_all(&mut admin, &t, 0, &small);
    wait_stored(&mut engine, &mut admin, &t, "opts", 8009, LONG);
    stop_clean(&mut engine, Duration::from_secs(30));
    let log = engine.log();
    assert!(!log.contains(&key_b64), "the key is never logged");
    // The progress line (every 100 ms here) shows the bytes moving while nothing is confirmed
    // yet: the first 8 MiB part is uploaded before the object closes (idle_flush).
    let moving = log.lines().filter(|l| l.contains("progress:")).any(|l| {
        let figure = |after: &str| {
            l.split(after)
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .and_then(|v| v.parse::<f64>().ok())
        };
        l.contains("confirmed 0,")
            && l.contains("1 objects open")
            && figure("uploaded ").is_some_and(|v| v > 0.0)
    });
    assert!(
        moving,
        "no progress line showed the upload before the first confirmation:\n{log}"
    );

    let requests = proxy.requests();
    let header = |r: &spillway_tests::RequestHead, name: &str| {
        r.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let data_key = |r: &spillway_tests::RequestHead| !r.target.contains(".spillway");
    let create: Vec<_> = requests
        .iter()
        .filter(|r| r.method == "POST" && r.target.contains("?uploads"))
        .collect();
    let parts: Vec<_> = requests
        .iter()
        .filter(|r| r.method == "PUT" && r.target.contains("partNumber="))
        .collect();
    let puts: Vec<_> = requests
        .iter()
        .filter(|r| r.method == "PUT" && !r.target.contains('?'))
        .collect();
    let objects_put: Vec<_> = puts.iter().filter(|r| data_key(r)).collect();
    let markers_put: Vec<_> = puts.iter().filter(|r| !data_key(r)).collect();
    let marker_get: Vec<_> = requests
        .iter()
        .filter(|r| r.method == "GET" && r.target.contains(".spillway"))
        .collect();
    assert_eq!(create.len(), 1, "one multipart object: {requests:#?}");
    assert!(parts.len() >= 2, "{requests:#?}");
    assert_eq!(objects_put.len(), 1, "one PutObject: {requests:#?}");
    assert!(!markers_put.is_empty() && !marker_get.is_empty());

    // SSE-C on everything that writes or reads an object.
    for r in create
        .iter()
        .copied()
        .chain(parts.iter().copied())
        .chain(puts.iter().copied())
        .chain(marker_get.iter().copied())
    {
        let at = format!("{} {}", r.method, r.target);
        assert_eq!(
            header(r, "x-amz-server-side-encryption-customer-algorithm").as_deref(),
            Some("AES256"),
            "{at}"
        );
        assert_eq!(
            header(r, "x-amz-server-side-encryption-customer-key").as_deref(),
            Some(key_b64.as_str()),
            "{at}"
        );
        assert_eq!(
            header(r, "x-amz-server-side-encryption-customer-key-md5").as_deref(),
            Some(key_md5.as_str()),
            "{at}"
        );
    }
    // Content-MD5 on every body.
    for r in parts.iter().chain(puts.iter()) {
        assert!(
            header(r, "content-md5").is_some(),
            "{} {}",
            r.method,
            r.target
        );
    }
    // ACL, metadata and tags where an object is created; the marker gets the ACL only.
    let stream_topic = format!("{}/{}#0", t.stream, t.topic);
    for r in create
        .iter()
        .copied()
        .chain(objects_put.iter().map(|r| **r))
    {
        let at = format!("{} {}", r.method, r.target);
        assert_eq!(
            header(r, "x-amz-acl").as_deref(),
            Some("bucket-owner-full-control"),
            "{at}"
        );
        assert_eq!(
            header(r, "x-amz-meta-team").as_deref(),
            Some("ingest"),
            "{at}"
        );
        assert_eq!(
            header(r, "x-amz-meta-source").as_deref(),
            Some(stream_topic.as_str()),
            "{at}"
        );
        assert!(header(r, "x-amz-meta-first-offset").is_some(), "{at}");
        let tagging = header(r, "x-amz-tagging").unwrap_or_default();
        assert!(tagging.starts_with("day=20"), "{at}: {tagging}");
        assert!(tagging.ends_with("&region=eu%20west"), "{at}: {tagging}");
    }
    for r in &markers_put {
        assert_eq!(
            header(r, "x-amz-acl").as_deref(),
            Some("bucket-owner-full-control")
        );
        assert!(header(r, "x-amz-tagging").is_none());
    }
}

/// The progress line keeps moving while the S3 sink drains after SIGTERM: the last parts of
/// the open object upload during the drain (slowly here: the harness's fault proxy hands out
/// each part's answer a byte every 4 ms), and the lines logged then show the bytes uploaded,
/// though nothing is confirmed until the object completes. Before the S3 figures were in the
/// line, a drain showed nothing but "0 msgs/s, 0.00 MB/s" until its object completed.
#[test]
fn the_progress_line_shows_the_uploads_of_a_drain() {
    use spillway_tests::{FaultPlan, FaultProxy};
    let s3 = S3Server::start().unwrap();
    let proxy = FaultProxy::start(
        s3.addr(),
        FaultPlan::passthrough()
            .drip(1.0, Duration::from_millis(4))
            .path_contains("partNumber="),
    )
    .unwrap();
    let iggy = iggy();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "s3drain", 1);
    let big: Vec<spillway_tests::TestMessage> = (0..12_000u64)
        .map(|n| spillway_tests::TestMessage::new(u128::from(n) + 1, format!("{n:01000}")))
        .collect();
    common::send_all(&mut admin, &t, 0, &big);
    let cfg = engine_sections(&iggy).replace("log_interval = \"0s\"", "log_interval = \"100ms\"")
        + &s3_sink(
            "drain",
            &t,
            &s3,
            "part_size = \"5MiB\"\nparts_in_flight = 1\nidle_flush = \"60s\"",
        )
        .replace(&s3.endpoint(), &format!("http://{}", proxy.host_port()));
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::start(dir.path(), "drain", &cfg);
    // Everything polled and encoded (the object stays open: idle_flush is long).
    common::wait_until("every message polled", LONG, || {
        engine.log().lines().any(|l| {
            l.contains("progress:")
                && l.contains("in flight 12000,")
                && l.contains("1 objects open")
        }) || !engine.running()
    });
    stop_clean(&mut engine, LONG);
    let log = engine.log();
    let drain: Vec<&str> = log
        .lines()
        .skip_while(|l| !l.contains("signal received: draining"))
        .filter(|l| l.contains("progress:"))
        .collect();
    let uploading = drain.iter().any(|l| {
        l.split("uploaded ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
            .is_some_and(|v| v > 0.0)
    });
    assert!(
        uploading,
        "no progress line of the drain shows an upload: {drain:#?}"
    );
    assert_eq!(common::stored(&mut admin, &t, "drain", 0), Some(11_999));
}

/// libfaketime (Debian's `faketime`), preloaded into the engine: its wall clock is offset as
/// the file says (read at every call), its monotonic clock untouched.
const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

fn faketime_env(file: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("LD_PRELOAD", FAKETIME_LIB.to_owned()),
        ("FAKETIME_TIMESTAMP_FILE", file.display().to_string()),
        ("FAKETIME_NO_CACHE", "1".to_owned()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()),
    ]
}

/// The engine's clock 2 h ahead of s3s-fs's (which refuses requests signed more than 15 min
/// off): at start, in `check --connect` and mid-run the error names the skew. Before, the
/// start-up HeadBucket's bodiless 403 read "access to the bucket denied: wrong secret key
/// (SignatureDoesNotMatch), unknown access key id (InvalidAccessKeyId), or missing
/// permission".
#[test]
fn a_clock_two_hours_ahead_of_the_store_is_named_at_start_in_check_and_mid_run() {
    assert!(
        Path::new(FAKETIME_LIB).exists(),
        "libfaketime is missing: run scripts/setup.sh (Debian package faketime)"
    );
    let s3 = S3Server::start().unwrap();
    let iggy = iggy();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "s3skew", 1);
    send(&mut admin, &t, 0, "x", 0, 10);
    let cfg = engine_sections(&iggy) + &s3_sink("skew", &t, &s3, "idle_flush = \"200ms\"");
    let dir = tempfile::tempdir().unwrap();
    let clock = dir.path().join("faketime");
    let env = faketime_env(&clock);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let named = "ahead of the store's";

    // At start.
    std::fs::write(&clock, "+2h").unwrap();
    let mut engine = Engine::start_with_env(dir.path(), "skew-start", &cfg, &env);
    assert_ne!(wait_exit_code(&mut engine, LONG), Some(0));
    let log = engine.log();
    assert!(log.contains(named), "the skew is named at start\n{log}");
    assert_eq!(common::stored(&mut admin, &t, "skew", 0), None);

    // In check --connect.
    let path = dir.path().join("check.toml");
    std::fs::write(&path, &cfg).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["check", "--connect", "--config"])
        .arg(&path)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains(named),
        "check --connect names the skew\n{text}"
    );

    // Mid-run: the clock is right at start, then jumps 2 h ahead.
    std::fs::write(&clock, "+0").unwrap();
    let mut engine = Engine::start_with_env(dir.path(), "skew-run", &cfg, &env);
    wait_stored(&mut engine, &mut admin, &t, "skew", 9, LONG);
    std::fs::write(&clock, "+2h").unwrap();
    send(&mut admin, &t, 0, "y", 10, 10);
    common::wait_until("the skew is named mid-run", LONG, || {
        engine.log().contains(named)
    });
    assert_eq!(
        common::stored(&mut admin, &t, "skew", 0),
        Some(9),
        "nothing past what was written before the jump is committed\n{}",
        engine.log()
    );
    engine.signal("KILL");
}

/// Hive-style keys (`year=/month=/day=`) from a time in the payload (`s3.time_source =
/// "json:/at"`), a day per object (`record_interval = "24h"`): each record lands under the day
/// its own field names, whatever Iggy's append time, and running the sink again from the start
/// writes the same keys.
#[test]
fn hive_style_keys_take_the_day_from_the_payload_and_a_replay_writes_the_same_keys() {
    let s3 = S3Server::start().unwrap();
    let iggy = iggy();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "hive", 1);
    let days = [
        "2026-12-04T23:59:59Z",
        "2026-12-05T00:00:00Z",
        "2026-12-06T12:00:00Z",
    ];
    let batch: Vec<spillway_tests::TestMessage> = (0..30u64)
        .map(|n| {
            let at = days[(n / 10) as usize];
            spillway_tests::TestMessage::new(
                u128::from(n) + 1,
                format!("{{\"at\":\"{at}\",\"n\":{n}}}").into_bytes(),
            )
        })
        .collect();
    admin.send(&t.stream, &t.topic, 0, &batch).unwrap();
    let extra = "key = \"year={year}/month={month}/day={day}/{partition}-{first_offset}.{ext}\"\ntime_source = \"json:/at\"\nrecord_interval = \"24h\"\nidle_flush = \"300ms\"";
    let cfg = engine_sections(&iggy) + &s3_sink("hive", &t, &s3, extra);
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::start(dir.path(), "hive", &cfg);
    wait_stored(&mut engine, &mut admin, &t, "hive", 29, LONG);
    stop_clean(&mut engine, Duration::from_secs(30));
    let objs = objects(&s3.bucket_dir());
    let records = json_records(&objs);
    let keys: Vec<&str> = records.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "year=2026/month=12/day=04/0-00000000000000000000.jsonl",
            "year=2026/month=12/day=05/0-00000000000000000010.jsonl",
            "year=2026/month=12/day=06/0-00000000000000000020.jsonl",
        ]
    );
    for (i, (_, recs)) in records.iter().enumerate() {
        let want: Vec<(u64, u64)> = (i as u64 * 10..i as u64 * 10 + 10)
            .map(|o| (0, o))
            .collect();
        assert_eq!(recs, &want);
    }
    // From the start again (a new consumer of the same sink name would resume from the
    // marker; the store is emptied, the marker with it): the same keys, the same bytes.
    for (_, path, _) in common::object_files(&s3.bucket_dir()) {
        std::fs::remove_file(path).unwrap();
    }
    std::fs::remove_dir_all(s3.bucket_dir().join(".spillway")).unwrap();
    let cfg = cfg.replace(
        "name = \"hive\"",
        "name = \"hive\"\nconsumer = \"hive-again\"",
    );
    let mut engine = Engine::start(dir.path(), "hive-again", &cfg);
    wait_stored(&mut engine, &mut admin, &t, "hive-again", 29, LONG);
    stop_clean(&mut engine, Duration::from_secs(30));
    let data = |all: BTreeMap<String, Vec<u8>>| {
        all.into_iter()
            .filter(|(k, _)| !k.contains(".spillway/"))
            .collect::<BTreeMap<_, _>>()
    };
    assert_eq!(data(objects(&s3.bucket_dir())), data(objs));
}
