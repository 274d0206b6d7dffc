//! MQTT end to end: rejections.

use super::*;

const ACL: &str = "topic readwrite ok/#\ntopic readwrite dlq/#\ntopic read denied/#\n";
const ACL_MESSAGES: u64 = 12;

/// Message n of the ACL tests goes to `ok/<n>`, except 3 (QoS 1) and 7 (QoS 2 from the header)
/// which go to a topic the ACL does not let the engine write.
fn acl_messages() -> Vec<TestMessage> {
    (0..ACL_MESSAGES)
        .map(|n| {
            let m = TestMessage::new(u128::from(n) + 1, format!("acl-{n}").into_bytes());
            match n {
                3 => m.with_header("mqtt_topic", "denied/three"),
                7 => m
                    .with_header("mqtt_topic", "denied/seven")
                    .with_header("mqtt_qos", "2"),
                _ => m.with_header("mqtt_topic", &format!("ok/{n}")),
            }
        })
        .collect()
}

/// `dead_letter_topic` is only allowed with `on_error = "dead_letter"`.
fn dead_letter_line(policy: &str, topic: &str) -> String {
    if policy == "dead_letter" {
        format!("dead_letter_topic = \"{topic}\"")
    } else {
        String::new()
    }
}

struct AclRun {
    _broker: Mosquitto,
    _iggy: IggyServer,
    _dir: tempfile::TempDir,
    admin: IggyAdmin,
    t: Topic,
    sub: Subscriber,
    engine: Engine,
    sink: String,
}

fn acl_run(policy: &str) -> AclRun {
    let broker = Mosquitto::start(MosquittoOpts::new().acl(ACL)).unwrap();
    let iggy = iggy();
    let t = topic(&iggy, &format!("acl-{policy}"), 1);
    let mut admin = iggy.admin().unwrap();
    send_all(&mut admin, &t, 0, &acl_messages());
    let sub = Subscriber::connect(
        broker.addr(),
        SubscriberOpts::v5("ok/#").filter("dlq/#").qos(2),
    )
    .unwrap();
    let sink = format!("acl-{}", policy.replace('_', "-"));
    let cfg = engine_sections(&iggy)
        + &mqtt_sink(
            &sink,
            &t,
            "partitions = [0]",
            &format!("on_error = \"{policy}\""),
            &broker.host_port(),
            &format!(
                "protocol = \"5\"\nqos = 1\ntopic_header = \"mqtt_topic\"\nqos_header = \"mqtt_qos\"\n{}",
                dead_letter_line(policy, "dlq/acl")
            ),
        );
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::start(dir.path(), &sink, &cfg);
    AclRun {
        _broker: broker,
        _iggy: iggy,
        _dir: dir,
        admin,
        t,
        sub,
        engine,
        sink,
    }
}

#[test]
fn acl_rejection_with_on_error_fail_stops_at_the_offset_and_commits_nothing_past_it() {
    let mut run = acl_run("fail");
    let code = wait_exit_code(&mut run.engine, LONG);
    let log = run.engine.log();
    assert_eq!(code, Some(1), "{log}");
    let line = log
        .lines()
        .find(|l| mentions_offset(&l.to_lowercase(), 3) && l.contains("reject"))
        .unwrap_or_else(|| panic!("the log names offset 3 and the rejection\n{log}"));
    let lower = line.to_lowercase();
    assert!(
        lower.contains("0x87") || lower.contains("not authori"),
        "the log names the broker's reason: {line}"
    );
    assert_eq!(
        stored(&mut run.admin, &run.t, &run.sink, 0),
        Some(2),
        "everything before offset 3 is committed, nothing at or past it\n{log}"
    );
    let got = settled(&run.sub, Duration::from_millis(200));
    let payloads: Vec<String> = got.iter().map(text).collect();
    for n in 0..3 {
        assert!(
            payloads.contains(&format!("acl-{n}")),
            "acl-{n} delivered: {payloads:?}"
        );
    }
    assert!(
        !got.iter().any(|r| r.topic.starts_with("dlq/")),
        "fail does not dead-letter: {got:?}"
    );
}

#[test]
fn acl_rejection_with_on_error_skip_logs_the_offsets_and_confirms_them() {
    let mut run = acl_run("skip");
    wait_stored(
        &mut run.engine,
        &mut run.admin,
        &run.t,
        &run.sink,
        ACL_MESSAGES - 1,
        LONG,
    );
    run.sub.wait_for(10, SHORT).unwrap();
    stop_clean(&mut run.engine, SHORT * 3);
    let got = settled(&run.sub, Duration::from_millis(200));
    assert_eq!(
        got.iter().map(|r| r.topic.clone()).collect::<Vec<_>>(),
        (0..ACL_MESSAGES)
            .filter(|n| *n != 3 && *n != 7)
            .map(|n| format!("ok/{n}"))
            .collect::<Vec<_>>(),
        "the allowed ones, once, in order; nothing dead-lettered"
    );
    let log = run.engine.log();
    for n in [3, 7] {
        let line = log
            .lines()
            .find(|l| l.to_lowercase().contains("skip") && mentions_offset(&l.to_lowercase(), n))
            .unwrap_or_else(|| panic!("a skip line naming offset {n}\n{log}"));
        assert!(
            line.contains("0x87") || line.to_lowercase().contains("not authori"),
            "the skip names the broker's reason: {line}"
        );
    }
}

#[test]
fn acl_rejection_with_on_error_dead_letter_publishes_the_message_with_the_reason() {
    let mut run = acl_run("dead_letter");
    wait_stored(
        &mut run.engine,
        &mut run.admin,
        &run.t,
        &run.sink,
        ACL_MESSAGES - 1,
        LONG,
    );
    run.sub.wait_for(12, SHORT).unwrap();
    stop_clean(&mut run.engine, SHORT * 3);
    let got = settled(&run.sub, Duration::from_millis(200));
    let ok: Vec<String> = got
        .iter()
        .filter(|r| r.topic.starts_with("ok/"))
        .map(text)
        .collect();
    assert_eq!(
        ok,
        (0..ACL_MESSAGES)
            .filter(|n| *n != 3 && *n != 7)
            .map(|n| format!("acl-{n}"))
            .collect::<Vec<_>>()
    );
    let mut dead: Vec<&Received> = got.iter().filter(|r| r.topic == "dlq/acl").collect();
    assert_eq!(dead.len(), 2, "{got:?}");
    // 3 was QoS 1 and 7 QoS 2: their rejections may come in either order.
    dead.sort_by_key(|r| text(r));
    let polled = polled(&mut run.admin, &run.t, 0, 20);
    for (r, n) in dead.iter().zip([3u64, 7]) {
        assert_eq!(text(r), format!("acl-{n}"), "the payload unchanged");
        let props = r.properties.as_ref().unwrap();
        assert_eq!(
            props.user_property("spillway-reason-code"),
            Some("0x87"),
            "{props:?}"
        );
        assert!(
            props
                .user_property("spillway-error")
                .is_some_and(|e| !e.is_empty()),
            "{props:?}"
        );
        let m = &polled[n as usize];
        for (key, value) in [
            ("iggy-stream", run.t.stream.clone()),
            ("iggy-topic", run.t.topic.clone()),
            ("iggy-partition", "0".to_owned()),
            ("iggy-offset", n.to_string()),
            ("iggy-id", (n + 1).to_string()),
            ("iggy-timestamp", m.timestamp.to_string()),
            ("iggy-origin-timestamp", m.origin_timestamp.to_string()),
        ] {
            assert_eq!(
                props.user_property(key),
                Some(value.as_str()),
                "{key}: {props:?}"
            );
        }
    }
}

/// Render failures. Sink A routes by the `mqtt_topic` header, else by the template `{json.t}`;
/// sink B by the template `okb/{header.dev}`. Message n: what A and B make of it.
/// mosquitto 2.0.11 with `message_size_limit` answers an oversized MQTT 5 QoS 1 PUBLISH
/// with PUBACK 0x95 (Packet too large), a code MQTT 5 does not list for PUBACK. It is taken
/// as that message's refusal: to `on_error`, the connection kept, nothing re-sent. (Before,
/// the decoder refused the PUBACK as malformed and the sink reconnected and re-sent everything
/// unconfirmed, about 20 copies of each later message in 15 s, `on_error` never reached.)
#[test]
fn an_oversized_message_refused_with_puback_0x95_goes_to_on_error_and_keeps_the_connection() {
    const COUNT: u64 = 12;
    const BIG: u64 = 4;
    for policy in ["skip", "fail"] {
        let broker =
            Mosquitto::start(MosquittoOpts::new().config_line("message_size_limit 2000")).unwrap();
        let iggy = iggy();
        let t = topic(&iggy, &format!("size-limit-{policy}"), 1);
        let mut admin = iggy.admin().unwrap();
        let messages: Vec<TestMessage> = (0..COUNT)
            .map(|n| {
                let body = if n == BIG {
                    "x".repeat(5_000)
                } else {
                    format!("small-{n}")
                };
                TestMessage::new(u128::from(n) + 1, body.into_bytes())
            })
            .collect();
        send_all(&mut admin, &t, 0, &messages);
        let sub = Subscriber::connect(broker.addr(), SubscriberOpts::v5("size/#").qos(1)).unwrap();
        let sink = format!("size-limit-{policy}");
        let cfg = engine_sections(&iggy)
            + &mqtt_sink(
                &sink,
                &t,
                "partitions = [0]",
                &format!("on_error = \"{policy}\""),
                &broker.host_port(),
                "protocol = \"5\"\nqos = 1\ntopic = \"size/{partition}\"",
            );
        let dir = tempfile::tempdir().unwrap();
        let mut engine = Engine::start(dir.path(), &sink, &cfg);
        if policy == "skip" {
            wait_stored(&mut engine, &mut admin, &t, &sink, COUNT - 1, LONG);
            sub.wait_for(COUNT as usize - 1, SHORT).unwrap();
            // Time for a storm to show, were there one.
            std::thread::sleep(Duration::from_secs(2));
            stop_clean(&mut engine, SHORT * 3);
        } else {
            assert_eq!(
                wait_exit_code(&mut engine, LONG),
                Some(1),
                "{}",
                engine.log()
            );
            assert_eq!(
                stored(&mut admin, &t, &sink, 0),
                Some(BIG - 1),
                "everything before the oversized message is committed, nothing from it on\n{}",
                engine.log()
            );
        }
        let log = engine.log();
        let got = settled(&sub, Duration::from_millis(300));
        let mut counts = BTreeMap::new();
        for r in &got {
            *counts.entry(text(r)).or_insert(0u32) += 1;
        }
        assert!(
            counts.values().all(|&n| n == 1),
            "each message delivered once, no re-sends: {counts:?}\n{log}"
        );
        let expected: BTreeSet<String> = (0..COUNT)
            .filter(|&n| n != BIG && (policy == "skip" || n < BIG))
            .map(|n| format!("small-{n}"))
            .collect();
        let delivered: BTreeSet<String> = counts.keys().cloned().collect();
        if policy == "skip" {
            assert_eq!(delivered, expected, "{log}");
        } else {
            assert!(delivered.is_superset(&expected), "{delivered:?}\n{log}");
            assert!(!delivered.contains(&"x".repeat(5_000)));
        }
        let lower = log.to_lowercase();
        assert!(
            !lower.contains("reconnecting"),
            "the connection is kept\n{log}"
        );
        let named = log
            .lines()
            .filter(|l| l.contains("0x95") && mentions_offset(&l.to_lowercase(), BIG))
            .count();
        assert!(named >= 1, "the refusal names offset {BIG} and 0x95\n{log}");
        assert_eq!(
            log.lines()
                .filter(|l| l.contains("does not list for PUBACK; each such answer"))
                .count(),
            1,
            "the broker's deviation is logged once per connection\n{log}"
        );
    }
}

/// MQTT 3.1.1 against mosquitto's `max_packet_size`: the broker drops the connection at an
/// oversized PUBLISH (3.1.1 has no way to say why). After 3 closes in a row right after the
/// same message went out, that message goes to `on_error`, named with its size. Before, the
/// sink reconnected for ever (25 reconnects in 15 s), nothing naming the message.
#[test]
fn on_3_1_1_a_message_the_broker_drops_the_connection_for_goes_to_on_error_named() {
    const COUNT: u64 = 12;
    const BIG: u64 = 4;
    for policy in ["skip", "fail"] {
        let broker =
            Mosquitto::start(MosquittoOpts::new().config_line("max_packet_size 1000")).unwrap();
        let iggy = iggy();
        let t = topic(&iggy, &format!("v311-size-{policy}"), 1);
        let mut admin = iggy.admin().unwrap();
        let messages: Vec<TestMessage> = (0..COUNT)
            .map(|n| {
                let body = if n == BIG {
                    "x".repeat(5_000)
                } else {
                    format!("small-{n}")
                };
                TestMessage::new(u128::from(n) + 1, body.into_bytes())
            })
            .collect();
        send_all(&mut admin, &t, 0, &messages);
        let sub =
            Subscriber::connect(broker.addr(), SubscriberOpts::v5("size311/#").qos(1)).unwrap();
        let sink = format!("v311-size-{policy}");
        let cfg = engine_sections(&iggy)
            + &mqtt_sink(
                &sink,
                &t,
                "partitions = [0]",
                &format!("on_error = \"{policy}\""),
                &broker.host_port(),
                "protocol = \"3.1.1\"\nqos = 1\ntopic = \"size311/{partition}\"\nreconnect_min = \"50ms\"\nreconnect_max = \"200ms\"",
            );
        let dir = tempfile::tempdir().unwrap();
        let mut engine = Engine::start(dir.path(), &sink, &cfg);
        if policy == "skip" {
            wait_stored(&mut engine, &mut admin, &t, &sink, COUNT - 1, LONG);
            sub.wait_for(COUNT as usize - 1, SHORT).unwrap();
            stop_clean(&mut engine, SHORT * 3);
        } else {
            assert_eq!(
                wait_exit_code(&mut engine, LONG),
                Some(1),
                "{}",
                engine.log()
            );
            assert_eq!(
                stored(&mut admin, &t, &sink, 0),
                Some(BIG - 1),
                "nothing from the refused message on is committed\n{}",
                engine.log()
            );
        }
        let log = engine.log();
        let got = settled(&sub, Duration::from_millis(300));
        let delivered: BTreeSet<String> = got.iter().map(text).collect();
        let expected: BTreeSet<String> = (0..COUNT)
            .filter(|&n| n != BIG && (policy == "skip" || n < BIG))
            .map(|n| format!("small-{n}"))
            .collect();
        assert!(delivered.is_superset(&expected), "{delivered:?}\n{log}");
        assert!(!delivered.iter().any(|d| d.len() > 100));
        let line = log
            .lines()
            .find(|l| {
                l.contains("5000 bytes of payload") && mentions_offset(&l.to_lowercase(), BIG)
            })
            .unwrap_or_else(|| panic!("the refused message is named with its size\n{log}"));
        assert!(line.contains("3 times in a row"), "{line}");
    }
}

fn render_messages() -> Vec<TestMessage> {
    let with_t = |n: u64, t: &str| {
        TestMessage::new(
            u128::from(n) + 1,
            format!("{{\"t\":\"{t}\",\"n\":{n}}}").into_bytes(),
        )
    };
    vec![
        // 0: A ok/a/0, B okb/d0
        with_t(0, "unused")
            .with_header("mqtt_topic", "ok/a/0")
            .with_header("dev", "d0"),
        // 1: A empty topic, B okb/d1
        with_t(1, "").with_header("dev", "d1"),
        // 2: A has '+', B okb/d2
        with_t(2, "unused")
            .with_header("mqtt_topic", "ok/+/x")
            .with_header("dev", "d2"),
        // 3: A has '#', B header missing
        with_t(3, "unused").with_header("mqtt_topic", "ok/#"),
        // 4: A has NUL, B okb/d4 (MQTT 5: its NUL header cannot be a user property)
        with_t(4, "unused")
            .with_header("mqtt_topic", "ok/a\u{0}b")
            .with_header("dev", "d4"),
        // 5: A too long (70,000 bytes > 65,535), B okb/d5
        with_t(5, &"x".repeat(70_000)).with_header("dev", "d5"),
        // 6: A ok/a/6, B header missing
        with_t(6, "ok/a/6"),
        // 7: A ok/a/7, B renders "okb/d+"
        with_t(7, "unused")
            .with_header("mqtt_topic", "ok/a/7")
            .with_header("dev", "d+"),
        // 8: A ok/a/8, B okb/d8
        with_t(8, "ok/a/8").with_header("dev", "d8"),
    ]
}

const RENDER_A_REJECTS: [u64; 5] = [1, 2, 3, 4, 5];
const RENDER_B_REJECTS: [u64; 3] = [3, 6, 7];
/// Over MQTT 5, B sends the Iggy headers as user properties, and message 4's `mqtt_topic`
/// header holds a U+0000, which an MQTT string may not: B cannot send it either.
const RENDER_B_REJECTS_V5: [u64; 4] = [3, 4, 6, 7];

fn render_config(iggy: &IggyServer, t: &Topic, addr: &str, proto: &str, policy: &str) -> String {
    engine_sections(iggy)
        + &mqtt_sink(
            "render-a",
            t,
            "partitions = [0]",
            &format!("on_error = \"{policy}\""),
            addr,
            &format!(
                "protocol = \"{proto}\"\nqos = 1\ntopic_header = \"mqtt_topic\"\ntopic = \"{{json.t}}\"\n{}",
                dead_letter_line(policy, "dlq/a")
            ),
        )
        + &mqtt_sink(
            "render-b",
            t,
            "partitions = [0]",
            &format!("on_error = \"{policy}\""),
            addr,
            &format!(
                "protocol = \"{proto}\"\nqos = 1\ntopic = \"okb/{{header.dev}}\"\n{}",
                dead_letter_line(policy, "dlq/b")
            ),
        )
}

fn offsets_of_json(got: &[Received], topic: &str) -> Vec<u64> {
    got.iter()
        .filter(|r| r.topic == topic)
        .map(|r| json(r)["n"].as_u64().unwrap())
        .collect()
}

#[test]
fn unroutable_messages_are_skipped_with_their_offsets_logged() {
    let broker = Mosquitto::start_default().unwrap();
    let iggy = iggy();
    let t = topic(&iggy, "render-skip", 1);
    let mut admin = iggy.admin().unwrap();
    send_all(&mut admin, &t, 0, &render_messages());
    let sub = Subscriber::connect(
        broker.addr(),
        SubscriberOpts::v5("ok/#")
            .filter("okb/#")
            .filter("dlq/#")
            .qos(1),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = render_config(&iggy, &t, &broker.host_port(), "5", "skip");
    let mut engine = Engine::start(dir.path(), "render-skip", &cfg);
    wait_stored(&mut engine, &mut admin, &t, "render-a", 8, LONG);
    wait_stored(&mut engine, &mut admin, &t, "render-b", 8, LONG);
    sub.wait_for(9, SHORT).unwrap_or_else(|e| {
        panic!(
            "{e}: {:?}\n{}",
            sub.messages()
                .iter()
                .map(|r| r.topic.as_str())
                .collect::<Vec<_>>(),
            engine.log()
        )
    });
    stop_clean(&mut engine, SHORT * 3);
    let got = settled(&sub, Duration::from_millis(200));
    let a: Vec<(String, u64)> = got
        .iter()
        .filter(|r| r.topic.starts_with("ok/"))
        .map(|r| (r.topic.clone(), json(r)["n"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        a,
        vec![
            ("ok/a/0".to_owned(), 0),
            ("ok/a/6".to_owned(), 6),
            ("ok/a/7".to_owned(), 7),
            ("ok/a/8".to_owned(), 8)
        ]
    );
    let b: Vec<(String, u64)> = got
        .iter()
        .filter(|r| r.topic.starts_with("okb/"))
        .map(|r| (r.topic.clone(), json(r)["n"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        b,
        [0u64, 1, 2, 5, 8]
            .iter()
            .map(|n| (format!("okb/d{n}"), *n))
            .collect::<Vec<_>>()
    );
    assert!(!got.iter().any(|r| r.topic.starts_with("dlq/")));
    let log = engine.log();
    for (sink, rejects) in [
        ("render-a", &RENDER_A_REJECTS[..]),
        ("render-b", &RENDER_B_REJECTS_V5[..]),
    ] {
        let skipped: BTreeSet<u64> = log
            .lines()
            .filter(|l| l.to_lowercase().contains("skipping") && l.contains(sink))
            .filter_map(|l| (0..9).find(|n| mentions_offset(&l.to_lowercase(), *n)))
            .collect();
        assert_eq!(
            skipped,
            rejects.iter().copied().collect::<BTreeSet<u64>>(),
            "{sink}: one skip line per unroutable offset\n{}",
            tail(&log, 60)
        );
    }
}

/// 2,000 unroutable messages under `on_error = "skip"`: the first few of each second are
/// named one by one, the rest counted in one line a second; every offset is still committed
/// and counted in `spillway_skipped_total`. Before, each of the 2,000 had its own WARN line.
#[test]
fn a_flood_of_skipped_messages_is_logged_a_few_lines_a_second_with_the_count() {
    let broker = Mosquitto::start_default().unwrap();
    let iggy = iggy();
    let t = topic(&iggy, "skip-flood", 1);
    let mut admin = iggy.admin().unwrap();
    let n = 2_000u64;
    // No `dev` header: `okb/{header.dev}` renders for none of them.
    let batch: Vec<TestMessage> = (0..n)
        .map(|i| TestMessage::new(u128::from(i) + 1, format!("{i}").into_bytes()))
        .collect();
    send_all(&mut admin, &t, 0, &batch);
    let cfg = engine_sections(&iggy)
        + &mqtt_sink(
            "flood",
            &t,
            "partitions = [0]",
            "on_error = \"skip\"",
            &broker.host_port(),
            "protocol = \"5\"\nqos = 1\ntopic = \"okb/{header.dev}\"",
        );
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::start(dir.path(), "flood", &cfg);
    wait_stored(&mut engine, &mut admin, &t, "flood", n - 1, LONG);
    stop_clean(&mut engine, SHORT * 3);
    let log = engine.log();
    let one_by_one = log.matches("skipping a message the sink rejected").count();
    let counted: u64 = log
        .lines()
        .filter_map(|l| {
            l.split("skipped ")
                .nth(1)?
                .split(" more messages")
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert!(
        one_by_one < 200,
        "{one_by_one} lines for {n} skipped messages: a WARN per message"
    );
    assert_eq!(
        one_by_one as u64 + counted,
        n,
        "every skipped message is named or counted\n{}",
        tail(&log, 20)
    );
}

/// `dead_letter` and `fail` log per-message lines a few a second like `skip`: before, 5,001
/// lines for 5,000 dead letters, and under `fail` one per remaining message of the batch.
#[test]
fn dead_letters_and_a_failing_batch_are_logged_a_few_lines_with_the_count() {
    for policy in ["dead_letter", "fail"] {
        let broker = Mosquitto::start_default().unwrap();
        let iggy = iggy();
        let t = topic(&iggy, &format!("flood-{policy}"), 1);
        let mut admin = iggy.admin().unwrap();
        let n = 2_000u64;
        let batch: Vec<TestMessage> = (0..n)
            .map(|i| TestMessage::new(u128::from(i) + 1, format!("{i}").into_bytes()))
            .collect();
        send_all(&mut admin, &t, 0, &batch);
        let sink = format!("flood-{}", policy.replace('_', "-"));
        let cfg = engine_sections(&iggy)
            + &mqtt_sink(
                &sink,
                &t,
                "partitions = [0]\nbatch_size = 1000",
                &format!("on_error = \"{policy}\""),
                &broker.host_port(),
                &format!(
                    "protocol = \"5\"\nqos = 1\ntopic = \"okb/{{header.dev}}\"\n{}",
                    dead_letter_line(policy, "dlq/flood")
                ),
            );
        let dir = tempfile::tempdir().unwrap();
        let mut engine = Engine::start(dir.path(), &sink, &cfg);
        if policy == "fail" {
            assert_eq!(
                wait_exit_code(&mut engine, LONG),
                Some(1),
                "{}",
                engine.log()
            );
        } else {
            wait_stored(&mut engine, &mut admin, &t, &sink, n - 1, LONG);
            stop_clean(&mut engine, SHORT * 3);
        }
        let log = engine.log();
        let warned = log
            .lines()
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
            .count();
        assert!(
            warned < 100,
            "{policy}: {warned} WARN/ERROR lines for {n} rejected messages\n{}",
            tail(&log, 20)
        );
        if policy == "dead_letter" {
            assert!(
                log.contains("more since the last line")
                    || log.contains("more rejected messages went to the dead-letter topic"),
                "the unnamed dead letters are counted\n{}",
                tail(&log, 20)
            );
        }
    }
}

#[test]
fn unroutable_messages_go_to_the_dead_letter_topic_as_json_on_mqtt_3_1_1() {
    let broker = Mosquitto::start_default().unwrap();
    let iggy = iggy();
    let t = topic(&iggy, "render-dlq", 1);
    let mut admin = iggy.admin().unwrap();
    send_all(&mut admin, &t, 0, &render_messages());
    let sub = Subscriber::connect(
        broker.addr(),
        SubscriberOpts::v4("ok/#")
            .filter("okb/#")
            .filter("dlq/#")
            .qos(1),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = render_config(&iggy, &t, &broker.host_port(), "3.1.1", "dead_letter");
    let mut engine = Engine::start(dir.path(), "render-dlq", &cfg);
    wait_stored(&mut engine, &mut admin, &t, "render-a", 8, LONG);
    wait_stored(&mut engine, &mut admin, &t, "render-b", 8, LONG);
    sub.wait_for(18, SHORT).unwrap();
    stop_clean(&mut engine, SHORT * 3);
    let got = settled(&sub, Duration::from_millis(200));
    assert_eq!(got.len(), 18, "{got:?}");
    for (dlq, rejects) in [
        ("dlq/a", &RENDER_A_REJECTS[..]),
        ("dlq/b", &RENDER_B_REJECTS[..]),
    ] {
        let dead: Vec<&Received> = got.iter().filter(|r| r.topic == dlq).collect();
        let mut offsets: Vec<u64> = dead
            .iter()
            .map(|r| json(r)["metadata"]["offset"].as_u64().unwrap_or(u64::MAX))
            .collect();
        offsets.sort_unstable();
        assert_eq!(
            offsets,
            rejects.to_vec(),
            "{dlq}: one dead letter per reject"
        );
        for r in dead {
            let v = json(r);
            assert!(
                v["error"].as_str().is_some_and(|e| !e.is_empty()),
                "{dlq}: a JSON envelope with the error: {}",
                tail(&text(r), 3)
            );
            let n = v["metadata"]["offset"].as_u64().unwrap();
            assert_eq!(
                v["payload"]["n"], n,
                "{dlq}: the original JSON payload is in the envelope"
            );
            assert_eq!(v["metadata"]["stream"], t.stream.as_str());
        }
    }
    assert_eq!(offsets_of_json(&got, "ok/a/8"), vec![8]);
    assert_eq!(offsets_of_json(&got, "okb/d5"), vec![5]);
}

#[test]
fn an_unroutable_message_with_on_error_fail_stops_the_engine_at_its_offset() {
    let broker = Mosquitto::start_default().unwrap();
    let iggy = iggy();
    let t = topic(&iggy, "render-fail", 1);
    let mut admin = iggy.admin().unwrap();
    send_all(&mut admin, &t, 0, &render_messages());
    let dir = tempfile::tempdir().unwrap();
    let cfg = engine_sections(&iggy)
        + &mqtt_sink(
            "render-fail",
            &t,
            "partitions = [0]",
            "on_error = \"fail\"",
            &broker.host_port(),
            "protocol = \"5\"\nqos = 1\ntopic_header = \"mqtt_topic\"\ntopic = \"{json.t}\"",
        );
    let mut engine = Engine::start(dir.path(), "render-fail", &cfg);
    let code = wait_exit_code(&mut engine, LONG);
    let log = engine.log();
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.lines()
            .any(|l| mentions_offset(&l.to_lowercase(), 1) && l.contains("reject")),
        "the log names offset 1 and the rejection\n{log}"
    );
    // Offset 0 was published before offset 1 failed to route, but the engine may stop before
    // its PUBACK is in: it may or may not be committed; nothing past it may.
    let at_stop = stored(&mut admin, &t, "render-fail", 0);
    assert!(
        at_stop.is_none_or(|s| s == 0),
        "nothing at or past the unroutable offset 1 committed: {at_stop:?}\n{log}"
    );
}
