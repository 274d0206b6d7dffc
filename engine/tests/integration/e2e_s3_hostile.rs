//! The S3 sink against hostile, broken and slow stores: the real Iggy server -> the `spillway`
//! binary -> s3s-fs behind the harness's fault proxy (`spillway_tests::FaultProxy`), which
//! answers, stalls or corrupts what s3s-fs cannot be made to. Each test names what it checks:
//! memory stays bounded, nothing is committed that was not stored, and a failure is named.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::{Engine, engine_sections, send, topic};
use spillway_tests::{FaultPlan, FaultProxy, IggyServer, S3Server};

const LONG: Duration = Duration::from_secs(60);

/// An S3 sink `name` reading `t` (one partition), writing to s3s-fs `s3` through `proxy`.
fn proxied_sink(
    name: &str,
    t: &common::Topic,
    s3: &S3Server,
    proxy: &FaultProxy,
    extra: &str,
) -> String {
    common::s3_sink(name, t, s3, extra)
        .replace(&s3.endpoint(), &format!("http://{}", proxy.host_port()))
}

/// A store that answers every upload with `500 InternalError` and a 60 MiB error document.
/// Before, the body was read whole (the parser reserved its announced length up front) and
/// parsed into an element tree, on every retry: the engine's RSS went past a gigabyte. Now an
/// error body is read up to 64 KiB (the connection is then dropped) and its fields are taken by
/// a streaming reader: the code is still named, and the peak RSS stays small. Nothing is
/// committed.
#[test]
fn a_huge_error_document_is_read_within_a_small_limit_and_still_named() {
    let s3 = S3Server::start().unwrap();
    let proxy = FaultProxy::start(
        s3.addr(),
        FaultPlan::answer_all(500, "InternalError")
            .padded(60 * 1024 * 1024)
            .only_methods(&["PUT"])
            .path_excludes("/.spillway/"),
    )
    .unwrap();
    let iggy = IggyServer::start().unwrap();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "s3huge", 1);
    send(&mut admin, &t, 0, "h", 0, 20);
    let cfg = engine_sections(&iggy)
        + &proxied_sink(
            "huge",
            &t,
            &s3,
            &proxy,
            "max_object_messages = 10\nidle_flush = \"100ms\"\nrequest_attempts = 3\nretry_min = \"50ms\"\nretry_max = \"100ms\"",
        );
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::start(dir.path(), "huge", &cfg);
    common::wait_until("two uploads fail", LONG, || {
        engine.log().matches("S3 upload failed").count() >= 2
    });
    let log = engine.log();
    assert!(
        log.contains("InternalError"),
        "the error code is named\n{}",
        common::tail(&log, 10)
    );
    let peak_kib = common::proc_status_kib(engine.pid(), "VmHWM").unwrap();
    assert!(
        peak_kib < 128 * 1024,
        "peak RSS {} MiB after {} answers of 60 MiB",
        peak_kib / 1024,
        proxy.stats().answered_fixed
    );
    assert_eq!(common::stored(&mut admin, &t, "huge", 0), None);
    engine.signal("KILL");
}

/// SIGTERM while the store holds every part upload unanswered (the shard waits in an upload
/// whose part window is full). Before, the shard never saw the drain or the stop: the process
/// gave up on it after the drain deadline and exited 1 without storing the offsets of the
/// object that was already complete. Now Stop cuts the sink's calls short (their requests are
/// dropped), and the confirmed offsets are stored.
#[test]
fn sigterm_with_a_stalled_store_stores_the_confirmed_offsets_and_exits() {
    use spillway_tests::TestMessage;
    let s3 = S3Server::start().unwrap();
    let proxy = FaultProxy::start(s3.addr(), FaultPlan::passthrough()).unwrap();
    let iggy = IggyServer::start().unwrap();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "s3stall", 1);
    // Stored only when forced (at the end): what is confirmed before SIGTERM is stored then.
    let cfg = (engine_sections(&iggy)
        + &proxied_sink(
            "stall",
            &t,
            &s3,
            &proxy,
            "part_size = \"5MiB\"\nparts_in_flight = 1\nidle_flush = \"300ms\"",
        ))
        .replace(
            "commit_interval = \"50ms\"",
            "commit_interval = \"1h\"\ncommit_every = 100000000",
        )
        .replace("shutdown_timeout = \"20s\"", "shutdown_timeout = \"2s\"");
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::start(dir.path(), "stall", &cfg);
    send(&mut admin, &t, 0, "a", 0, 100);
    common::wait_until("the first object is complete", LONG, || {
        common::object_files(&s3.bucket_dir())
            .iter()
            .any(|(k, _, _)| !k.contains(".spillway/"))
    });
    // Every part upload from now on is held far longer than the test.
    proxy
        .set_plan(
            FaultPlan::seeded(1)
                .stall(1.0, Duration::from_secs(300))
                .path_contains("partNumber="),
        )
        .unwrap();
    let filler = "x".repeat(1000);
    let batch: Vec<TestMessage> = (0..15_000u64)
        .map(|n| TestMessage::new(u128::from(n) + 1000, format!("{n}-{filler}").into_bytes()))
        .collect();
    common::send_all(&mut admin, &t, 0, &batch);
    common::wait_until("a part upload is held", LONG, || proxy.stats().stalled >= 1);
    std::thread::sleep(Duration::from_millis(500));
    engine.signal("TERM");
    let code = common::wait_exit_code(&mut engine, Duration::from_secs(20));
    let log = engine.log();
    // As documented: a drain cut at `shutdown_timeout` still exits 0 once the confirmed
    // offsets are stored; the rest is polled again by the next run.
    assert_eq!(code, Some(0), "{}", common::tail(&log, 20));
    assert!(log.contains("did not drain in time"), "{log}");
    assert!(!log.contains("shards did not stop in time"), "{log}");
    assert_eq!(
        common::stored(&mut admin, &t, "stall", 0),
        Some(99),
        "the complete object's offsets are stored\n{}",
        common::tail(&log, 20)
    );
}

/// A store that answers its PUTs one byte every 200 ms: every read arrives well within the
/// progress timeout, so before, one upload took as long as the store liked (a minute for
/// s3s-fs's ~300-byte answer here; forever for the drip the issue saw), with nothing said. Now
/// each attempt has a deadline of `request_timeout` plus its size at `min_transfer_rate`; the
/// log names the slow store, nothing is committed while it drips, and once it is fast again
/// every offset is delivered.
#[test]
fn a_store_dripping_its_answers_is_given_up_on_named_and_retried() {
    let s3 = S3Server::start().unwrap();
    let proxy = FaultProxy::start(
        s3.addr(),
        FaultPlan::seeded(7)
            .drip(1.0, Duration::from_millis(200))
            .only_methods(&["PUT"])
            .path_excludes("/.spillway/"),
    )
    .unwrap();
    let iggy = IggyServer::start().unwrap();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "s3drip", 1);
    send(&mut admin, &t, 0, "d", 0, 20);
    let cfg = engine_sections(&iggy)
        + &proxied_sink(
            "drip",
            &t,
            &s3,
            &proxy,
            "idle_flush = \"100ms\"\nrequest_timeout = \"1s\"\nmin_transfer_rate = \"1MiB\"\nrequest_attempts = 2\nretry_min = \"100ms\"\nretry_max = \"200ms\"",
        );
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::start(dir.path(), "drip", &cfg);
    common::wait_until("the slow store is named", Duration::from_secs(15), || {
        engine.log().contains("slow S3 store")
    });
    common::wait_until("the object fails", Duration::from_secs(15), || {
        engine.log().contains("S3 upload failed")
    });
    let log = engine.log();
    assert!(log.contains("too slow"), "{}", common::tail(&log, 10));
    assert!(
        log.contains("sink.s3.min_transfer_rate"),
        "the key is named"
    );
    assert_eq!(common::stored(&mut admin, &t, "drip", 0), None);

    proxy.set_plan(FaultPlan::passthrough()).unwrap();
    common::wait_stored(&mut engine, &mut admin, &t, "drip", 19, LONG);
    common::stop_clean(&mut engine, Duration::from_secs(30));
    assert!(proxy.stats().dripped >= 2, "{:?}", proxy.stats());
}

/// Messages 0..=14 where offset 5 lacks the `region` header the key template needs; objects of
/// at most 5 messages, so offset 5 starts one.
fn send_with_a_keyless_message(admin: &mut spillway_tests::IggyAdmin, t: &common::Topic) {
    use spillway_tests::TestMessage;
    let batch: Vec<TestMessage> = (0..15u64)
        .map(|n| {
            let m = TestMessage::new(u128::from(n) + 1, format!("{{\"n\":{n}}}").into_bytes());
            if n == 5 {
                m
            } else {
                m.with_header("region", "eu")
            }
        })
        .collect();
    common::send_all(admin, t, 0, &batch);
}

/// A message whose key cannot be rendered (the key template names a header it does not have)
/// goes to `on_error`. Before, the S3 sink ignored the policy and polled it again forever
/// (14,000 redeliveries in the issue, the offset never stored). Now `skip` leaves it out and
/// stores past it, `dead_letter` writes it under `dead_letter_prefix` with the reason, and
/// `fail` stops the engine (exit 1) naming the header, storing nothing past it.
#[test]
fn a_message_whose_key_cannot_render_goes_to_on_error() {
    let s3 = S3Server::start().unwrap();
    let proxy = FaultProxy::start(s3.addr(), FaultPlan::passthrough()).unwrap();
    let iggy = IggyServer::start().unwrap();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "s3keyless", 1);
    send_with_a_keyless_message(&mut admin, &t);
    let sink = |name: &str, policy: &str, extra: &str| {
        proxied_sink(
            name,
            &t,
            &s3,
            &proxy,
            &format!(
                "prefix = \"{name}/\"\nkey = \"{{header.region}}/{{partition}}-{{first_offset}}.{{ext}}\"\nmax_object_messages = 5\nidle_flush = \"200ms\"\n{extra}"
            ),
        )
        .replace("partitions = [0]", &format!("partitions = [0]\non_error = \"{policy}\""))
    };
    let cfg = engine_sections(&iggy)
        + &sink("skip", "skip", "")
        + &sink("dl", "dead_letter", "dead_letter_prefix = \"dead/\"");
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::start(dir.path(), "keyless", &cfg);
    common::wait_stored(&mut engine, &mut admin, &t, "skip", 14, LONG);
    common::wait_stored(&mut engine, &mut admin, &t, "dl", 14, LONG);
    common::stop_clean(&mut engine, Duration::from_secs(30));
    let log = engine.log();
    assert!(log.contains("\"region\""), "the header is named\n{log}");
    assert!(
        log.matches("S3 upload failed").count() == 0,
        "not retried as an upload\n{}",
        common::tail(&log, 20)
    );

    let files = common::object_files(&s3.bucket_dir());
    let keys: Vec<&str> = files.iter().map(|(k, _, _)| k.as_str()).collect();
    let records = |prefix: &str| -> Vec<u64> {
        let mut offsets: Vec<u64> = files
            .iter()
            .filter(|(k, _, _)| k.starts_with(prefix))
            .flat_map(|(_, path, _)| {
                std::fs::read_to_string(path)
                    .unwrap()
                    .lines()
                    .map(|l| {
                        serde_json::from_str::<serde_json::Value>(l).unwrap()["offset"]
                            .as_u64()
                            .unwrap()
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        offsets.sort_unstable();
        offsets
    };
    let want: Vec<u64> = (0..15).filter(|n| *n != 5).collect();
    assert_eq!(records("skip/eu/"), want, "{keys:?}");
    assert_eq!(records("dl/eu/"), want, "{keys:?}");
    let dead: Vec<_> = files
        .iter()
        .filter(|(k, _, _)| k.starts_with("dead/"))
        .collect();
    assert_eq!(dead.len(), 1, "{keys:?}");
    let letter: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&dead[0].1).unwrap()).unwrap();
    assert_eq!(letter["record"]["offset"], 5, "{letter}");
    assert_eq!(letter["record"]["payload"]["n"], 5, "{letter}");
    assert!(
        letter["reason"].as_str().unwrap().contains("region"),
        "{letter}"
    );

    // fail: the engine stops by itself naming the header; nothing at or past 5 is stored.
    let cfg = engine_sections(&iggy) + &sink("fail", "fail", "");
    let mut engine = Engine::start(dir.path(), "keyless-fail", &cfg);
    let code = common::wait_exit_code(&mut engine, LONG);
    let log = engine.log();
    assert_eq!(code, Some(1), "{}", common::tail(&log, 20));
    assert!(log.contains("\"region\""), "{log}");
    let stored = common::stored(&mut admin, &t, "fail", 0);
    assert!(stored.is_none_or(|s| s < 5), "stored {stored:?}");
}

/// The store refuses every upload with `403 AccessDenied` after the start-up probe passed
/// (keys rotated, a bucket policy changed). Before, the sink retried each object forever and
/// the engine never said more than a WARN per attempt. Now an error no retry can mend stops
/// the engine: exit 1 naming the S3 error code, nothing committed.
#[test]
fn a_permanent_store_error_after_start_stops_the_engine_naming_it() {
    let s3 = S3Server::start().unwrap();
    let proxy = FaultProxy::start(
        s3.addr(),
        FaultPlan::answer_all(403, "AccessDenied")
            .only_methods(&["PUT"])
            .path_excludes("/.spillway/"),
    )
    .unwrap();
    let iggy = IggyServer::start().unwrap();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "s3denied", 1);
    send(&mut admin, &t, 0, "x", 0, 20);
    let cfg = engine_sections(&iggy)
        + &proxied_sink(
            "denied",
            &t,
            &s3,
            &proxy,
            "idle_flush = \"100ms\"\nretry_min = \"100ms\"\nretry_max = \"200ms\"",
        );
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::start(dir.path(), "denied", &cfg);
    let code = common::wait_exit_code(&mut engine, Duration::from_secs(30));
    let log = engine.log();
    assert_eq!(code, Some(1), "{}", common::tail(&log, 20));
    assert!(log.contains("AccessDenied"), "{}", common::tail(&log, 20));
    let fatal: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("ERROR") || l.contains("stopped:"))
        .collect();
    assert_eq!(fatal.len(), 1, "the fatal error is logged once: {fatal:#?}");
    assert_eq!(common::stored(&mut admin, &t, "denied", 0), None);
}

/// The payload (as JSON text) of every record in the data objects under `prefix`, by offset.
fn payloads_under(s3: &S3Server, prefix: &str) -> Vec<(u64, String)> {
    let mut out: Vec<(u64, String)> = common::object_files(&s3.bucket_dir())
        .iter()
        .filter(|(k, _, _)| k.starts_with(prefix))
        .flat_map(|(key, path, _)| {
            std::fs::read_to_string(path)
                .unwrap()
                .lines()
                .map(|l| {
                    let v: serde_json::Value = serde_json::from_str(l)
                        .unwrap_or_else(|e| panic!("{key}: a damaged record ({e}): {l}"));
                    (v["offset"].as_u64().unwrap(), v["payload"].to_string())
                })
                .collect::<Vec<_>>()
        })
        .collect();
    out.sort();
    out
}

/// The fault proxy flips a byte in the body of some uploads, as a broken link or middlebox
/// would (SigV4 with UNSIGNED-PAYLOAD does not cover the body). With the default
/// `checksum = "crc32c"` every body carries `x-amz-checksum-crc32c`, s3s-fs refuses the changed
/// ones (BadDigest), the client sends them again, and every stored record is exactly what Iggy
/// holds. With `checksum = "none"` (as before) the flipped byte was stored. s3s-fs checks the
/// checksum of PutObject only (not of parts), so the corrupted objects here are single
/// PutObjects; a multipart object is checked on the request: the algorithm declared on
/// CreateMultipartUpload and a checksum on every part.
///
/// The small sink runs with `conditional_writes = "off"`: s3s-fs stores a PutObject body
/// before it checks its checksum and leaves it there when it answers BadDigest (AWS S3 stores
/// nothing), so under write-once keys the retry would be refused as a key that exists and the
/// damaged object kept. What this test checks is the checksum, not the fencing.
#[test]
fn a_body_corrupted_on_the_way_is_refused_by_its_checksum_and_sent_again() {
    use spillway_tests::TestMessage;
    let s3 = S3Server::start().unwrap();
    let proxy = FaultProxy::start(
        s3.addr(),
        FaultPlan::seeded(3)
            .corrupt(0.3)
            .only_methods(&["PUT"])
            .path_contains("/small/")
            .path_excludes("/.spillway/")
            .max_faults(6),
    )
    .unwrap();
    let iggy = IggyServer::start().unwrap();
    let mut admin = iggy.admin().unwrap();
    let small = topic(&iggy, "s3crc", 1);
    let large = topic(&iggy, "s3crcmp", 1);
    send(&mut admin, &small, 0, "c", 0, 200);
    let filler = "z".repeat(1000);
    let batch: Vec<TestMessage> = (0..6_000u64)
        .map(|n| TestMessage::new(u128::from(n) + 1, format!("{n}-{filler}").into_bytes()))
        .collect();
    common::send_all(&mut admin, &large, 0, &batch);
    let cfg = engine_sections(&iggy)
        + &proxied_sink(
            "small",
            &small,
            &s3,
            &proxy,
            "prefix = \"small/\"\nmax_object_messages = 20\nidle_flush = \"200ms\"\nretry_min = \"50ms\"\nretry_max = \"100ms\"\nconditional_writes = \"off\"",
        )
        + &proxied_sink(
            "large",
            &large,
            &s3,
            &proxy,
            "prefix = \"large/\"\npart_size = \"5MiB\"\nidle_flush = \"300ms\"",
        );
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::start(dir.path(), "crc", &cfg);
    common::wait_stored(&mut engine, &mut admin, &small, "small", 199, LONG);
    common::wait_stored(&mut engine, &mut admin, &large, "large", 5_999, LONG);
    common::stop_clean(&mut engine, Duration::from_secs(30));
    let stats = proxy.stats();
    assert!(stats.corrupted >= 1, "{stats:?}");

    // `send` writes even offsets as JSON objects, odd ones as text.
    let want: Vec<(u64, String)> = (0..200)
        .map(|n| {
            let text = format!("c-p0-{n}");
            let v = if n % 2 == 0 {
                serde_json::json!({ "text": text })
            } else {
                serde_json::json!(text)
            };
            (n, v.to_string())
        })
        .collect();
    assert_eq!(
        payloads_under(&s3, "small/"),
        want,
        "every record as Iggy holds it"
    );

    let heads = proxy.requests();
    let header = |h: &spillway_tests::RequestHead, name: &str| {
        h.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let puts: Vec<_> = heads
        .iter()
        .filter(|h| h.method == "PUT" && !h.target.contains(".spillway"))
        .collect();
    assert!(!puts.is_empty());
    for h in &puts {
        assert!(
            header(h, "x-amz-checksum-crc32c").is_some(),
            "{} {} has no checksum: {:?}",
            h.method,
            h.target,
            h.headers
        );
    }
    assert!(
        puts.iter().any(|h| h.target.contains("partNumber=")),
        "the large object went as parts"
    );
    let create = heads
        .iter()
        .find(|h| h.method == "POST" && h.target.contains("?uploads"))
        .expect("a CreateMultipartUpload");
    assert_eq!(
        header(create, "x-amz-checksum-algorithm").as_deref(),
        Some("CRC32C")
    );
}
