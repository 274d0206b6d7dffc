//! MQTT end to end: broker loss and crashes.

use super::*;

/// Offsets the broker acknowledged, as seen by the count proxy.
struct AckedOffsets {
    acked: Vec<bool>,
    /// The first offset not acknowledged.
    prefix: usize,
}

impl AckedOffsets {
    fn new(n: usize) -> Self {
        AckedOffsets {
            acked: vec![false; n],
            prefix: 0,
        }
    }

    /// Reads the stored offset, then what the proxy saw acknowledged: the stored offset must
    /// never pass the contiguous acknowledged prefix.
    fn check(&mut self, admin: &mut IggyAdmin, t: &Topic, consumer: &str, proxy: &MqttCountProxy) {
        let stored = stored(admin, t, consumer, 0);
        for p in proxy.take_acked() {
            let o: usize = std::str::from_utf8(&p).unwrap().parse().unwrap();
            self.acked[o] = true;
        }
        while self.prefix < self.acked.len() && self.acked[self.prefix] {
            self.prefix += 1;
        }
        if let Some(s) = stored {
            assert!(
                (s as usize) < self.prefix,
                "stored offset {s} passes what the broker acknowledged (contiguous up to {})",
                self.prefix as i64 - 1
            );
        }
    }
}

struct RestartCase {
    name: &'static str,
    version: MqttVersion,
    qos: u8,
    persistence: bool,
    messages: usize,
}

const RESTART_WINDOW: u64 = 2000;
const RESTART_COMMIT_EVERY: u64 = 1000;
const RESTART_MAX_INFLIGHT: u64 = 1000;

/// A stream of `messages` messages (payload = offset) through the count proxy. At about 30%
/// the broker goes away and comes back; at about 65% the engine is killed (SIGKILL) and
/// started again. Every offset reaches the subscriber at least once, duplicates stay within
/// what can have been in flight, and the stored offset never passes what the broker
/// acknowledged (checked against the proxy all along).
fn restart_case(case: &RestartCase) {
    let started = Instant::now();
    let n = case.messages;
    let mut opts = MosquittoOpts::new().max_inflight_messages(RESTART_MAX_INFLIGHT as u16);
    if case.persistence {
        opts = opts.persistence();
    }
    let mut broker = Mosquitto::start(opts).unwrap();
    let proxy = MqttCountProxy::start(broker.addr()).unwrap();
    let iggy = iggy();
    let t = topic(&iggy, case.name, 1);
    let mut admin = iggy.admin().unwrap();
    let batch: Vec<TestMessage> = (0..n as u64)
        .map(|o| TestMessage::new(u128::from(o) + 1, o.to_string().into_bytes()))
        .collect();
    send_all(&mut admin, &t, 0, &batch);
    drop(batch);

    let data_topic = format!("rs/{}", case.name);
    let sub_opts = || {
        let o = SubscriberOpts::new(case.version, data_topic.clone()).qos(case.qos);
        if case.persistence {
            o.client_id(format!("sub-{}", case.name))
                .clean_start(false)
                .session_expiry(3600)
        } else {
            o
        }
    };
    let mut sub = Subscriber::connect(broker.addr(), sub_opts()).unwrap();
    let sink = case.name;
    let cfg = engine_sections(&iggy)
        + &mqtt_sink(
            sink,
            &t,
            "partitions = [0]",
            &format!(
                "window_messages = {RESTART_WINDOW}\ncommit_every = {RESTART_COMMIT_EVERY}\ncommit_interval = \"50ms\""
            ),
            &proxy.host_port(),
            &format!(
                "protocol = \"{}\"\nqos = {}\ntopic = \"{data_topic}\"\nmax_inflight = {RESTART_MAX_INFLIGHT}\nclean_start = {}\nsession_expiry = \"1h\"\nreconnect_min = \"100ms\"\nreconnect_max = \"1s\"\n[sink.mqtt.will]\ntopic = \"status/{{sink}}\"\npayload = \"gone\"\nqos = 1",
                protocol(case.version),
                case.qos,
                !case.persistence,
            ),
        );
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::start(dir.path(), sink, &cfg);
    let mut acked = AckedOffsets::new(n);
    let mut seen = Seen::new(n);
    let deadline = started + Duration::from_secs(300);
    let progress = |seen: &mut Seen,
                    acked: &mut AckedOffsets,
                    admin: &mut IggyAdmin,
                    engine: &mut Engine,
                    sub: &Subscriber,
                    until: usize,
                    what: &str| {
        while seen.distinct < until {
            seen.absorb(sub, &data_topic);
            acked.check(admin, &t, sink, &proxy);
            assert!(
                engine.running(),
                "{}: the engine exited while waiting for {what}\n{}",
                case.name,
                tail(&engine.log(), 80)
            );
            assert!(
                Instant::now() < deadline,
                "{}: timed out waiting for {what}: {} of {n} offsets seen; proxy {:?}\n{}",
                case.name,
                seen.distinct,
                proxy.stats(),
                tail(&engine.log(), 80)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };

    // ---- the broker goes away at ~30% and comes back.
    progress(
        &mut seen,
        &mut acked,
        &mut admin,
        &mut engine,
        &sub,
        n * 3 / 10,
        "30%",
    );
    if case.persistence {
        // A graceful stop writes sessions and queued messages to disk; the engine's session
        // (clean_start = false) and the subscriber's survive.
        broker.stop_graceful(SHORT).unwrap();
        seen.absorb(&sub, &data_topic);
        std::thread::sleep(Duration::from_secs(1));
        broker.start_again().unwrap();
        sub = Subscriber::connect(broker.addr(), sub_opts()).unwrap();
        assert!(
            sub.connack().session_present,
            "the subscriber's session survived"
        );
    } else {
        // Without persistence a crashed broker loses what it acknowledged but had not
        // delivered yet. So that every loss the test sees is the engine's: hold the engine's
        // bytes, let the broker deliver everything it acknowledged, then kill it (SIGKILL).
        // The engine's unacknowledged messages die with the connection and must be re-sent.
        proxy.hold_client_to_broker(true);
        let mut last = (seen.total, Instant::now());
        while last.1.elapsed() < Duration::from_millis(700) {
            std::thread::sleep(Duration::from_millis(50));
            seen.absorb(&sub, &data_topic);
            if seen.total != last.0 {
                last = (seen.total, Instant::now());
            }
        }
        acked.check(&mut admin, &t, sink, &proxy);
        proxy.refuse_connections(true);
        broker.stop().unwrap();
        seen.absorb(&sub, &data_topic);
        // The engine retries against a broker that is down for a second.
        std::thread::sleep(Duration::from_secs(1));
        broker.start_again().unwrap();
        // The restarted broker forgot every subscription: subscribe before the engine is let
        // back in.
        seen.absorb(&sub, &data_topic);
        sub = Subscriber::connect(broker.addr(), sub_opts()).unwrap();
        proxy.hold_client_to_broker(false);
        proxy.refuse_connections(false);
    }
    let after_broker = proxy.stats();
    assert!(
        after_broker.connections >= 1,
        "{}: {after_broker:?}",
        case.name
    );

    // ---- the engine is killed at ~65% and started again.
    progress(
        &mut seen,
        &mut acked,
        &mut admin,
        &mut engine,
        &sub,
        n * 65 / 100,
        "65%",
    );
    let stats_before_kill = proxy.stats();
    assert!(
        stats_before_kill.connections >= 2 && stats_before_kill.connects >= 2,
        "{}: the engine reconnected after the broker came back: {stats_before_kill:?}",
        case.name
    );
    let will = Subscriber::connect(
        broker.addr(),
        SubscriberOpts::new(case.version, "status/#").qos(1),
    )
    .unwrap();
    engine.signal("KILL");
    engine.wait(SHORT).expect("SIGKILL ends the engine");
    let first_log = engine.log();
    acked.check(&mut admin, &t, sink, &proxy);
    let stored_at_kill = stored(&mut admin, &t, sink, 0);
    let wills = will.wait_for(1, SHORT).unwrap_or_else(|e| {
        panic!(
            "{}: the broker publishes the will of a killed engine: {e}",
            case.name
        )
    });
    assert_eq!(wills[0].topic, format!("status/{sink}"));
    assert_eq!(wills[0].payload.as_ref(), b"gone");
    let mut engine = Engine::start(dir.path(), &format!("{sink}-2"), &cfg);
    let resume_at = stored_at_kill.map_or(0, |s| s + 1);
    common::wait_until("the restarted engine resumes", LONG, || {
        engine
            .log()
            .contains(&format!("resuming at offset {resume_at}"))
            || !engine.running()
    });
    assert!(
        engine
            .log()
            .contains(&format!("resuming at offset {resume_at}")),
        "{}: resumes after the stored offset {stored_at_kill:?}\n{}",
        case.name,
        engine.log()
    );

    // ---- to the end.
    progress(
        &mut seen,
        &mut acked,
        &mut admin,
        &mut engine,
        &sub,
        n,
        "every offset",
    );
    wait_stored(&mut engine, &mut admin, &t, sink, n as u64 - 1, LONG);
    acked.check(&mut admin, &t, sink, &proxy);
    stop_clean(&mut engine, SHORT * 3);
    std::thread::sleep(Duration::from_millis(300));
    seen.absorb(&sub, &data_topic);
    let stats = proxy.stats();

    let missing = seen.missing();
    assert!(
        missing.is_empty(),
        "{}: {} offsets never arrived, first {:?}",
        case.name,
        missing.len(),
        &missing[..missing.len().min(20)]
    );
    // Duplicates: the engine's window when the broker went away (re-sent), what the broker had
    // in flight to the subscriber (re-sent on its resumed session), and, after the crash, what
    // was delivered past the stored offset (at most the unconfirmed window plus what was
    // confirmed but not stored yet).
    let bound =
        RESTART_MAX_INFLIGHT as usize * 2 + (2 * RESTART_WINDOW + RESTART_COMMIT_EVERY) as usize;
    assert!(
        seen.duplicates() <= bound,
        "{}: {} duplicates, more than could have been in flight ({bound})",
        case.name,
        seen.duplicates()
    );
    assert_eq!(stats.rejected, 0, "{}: {stats:?}", case.name);
    if case.persistence {
        // mosquitto 2.0.11 persists an MQTT 5 session only if it began with Clean Start 0 (see
        // the harness test `mosquitto_persists_a_v5_session_only_if_it_began_without_clean_start`).
        assert!(
            stats.sessions_present >= 1 && stats.dup_publishes + stats.resumed_pubrels > 0,
            "{}: after the persistent broker's restart the engine resumes its session (CONNACK \
             session present) and re-sends what was unconfirmed (PUBLISH with DUP, PUBREL): \
             {stats:?}",
            case.name
        );
    } else {
        assert_eq!(
            stats.sessions_present, 0,
            "{}: a clean start never resumes: {stats:?}",
            case.name
        );
    }
    eprintln!(
        "{}: {n} messages in {:?}, {} duplicates, proxy {:?}; first engine log tail:\n{}",
        case.name,
        started.elapsed(),
        seen.duplicates(),
        stats,
        tail(&first_log, 5)
    );
}

#[test]
fn qos1_survives_a_broker_crash_without_persistence_and_an_engine_crash() {
    restart_case(&RestartCase {
        name: "rs-q1-v311",
        version: MqttVersion::V4,
        qos: 1,
        persistence: false,
        messages: 100_000,
    });
}

#[test]
fn qos2_survives_a_persistent_broker_restart_with_a_resumed_session_and_an_engine_crash() {
    restart_case(&RestartCase {
        name: "rs-q2-v5",
        version: MqttVersion::V5,
        qos: 2,
        persistence: true,
        messages: 100_000,
    });
}
