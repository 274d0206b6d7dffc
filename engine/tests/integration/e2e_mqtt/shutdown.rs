//! MQTT end to end: controlled shutdown.

use super::*;

#[test]
fn sigterm_mid_stream_waits_for_acks_disconnects_and_stores_exactly_what_was_confirmed() {
    const N: usize = 100_000;
    let broker = Mosquitto::start(MosquittoOpts::new().max_inflight_messages(1000)).unwrap();
    let proxy = MqttCountProxy::start(broker.addr()).unwrap();
    let iggy = iggy();
    let t = topic(&iggy, "term", 1);
    let mut admin = iggy.admin().unwrap();
    let batch: Vec<TestMessage> = (0..N as u64)
        .map(|o| TestMessage::new(u128::from(o) + 1, o.to_string().into_bytes()))
        .collect();
    send_all(&mut admin, &t, 0, &batch);
    let sub = Subscriber::connect(broker.addr(), SubscriberOpts::v5("term").qos(1)).unwrap();
    let will = Subscriber::connect(broker.addr(), SubscriberOpts::v5("status/#").qos(1)).unwrap();
    let cfg = engine_sections(&iggy)
        + &mqtt_sink(
            "term",
            &t,
            "partitions = [0]",
            "window_messages = 2000",
            &proxy.host_port(),
            "protocol = \"5\"\nqos = 1\ntopic = \"term\"\nmax_inflight = 1000\n[sink.mqtt.will]\ntopic = \"status/{sink}\"\npayload = \"gone\"\nqos = 1",
        );
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::start(dir.path(), "term", &cfg);
    let mut seen = Seen::new(N);
    let deadline = Instant::now() + LONG;
    while seen.distinct < 5_000 {
        seen.absorb(&sub, "term");
        assert!(
            Instant::now() < deadline && engine.running(),
            "no progress: {} seen\n{}",
            seen.distinct,
            engine.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    stop_clean(&mut engine, LONG);
    let log = engine.log();
    assert!(!log.contains("did not stop in time"), "{log}");
    let stats = proxy.stats();
    assert_eq!(
        stats.outstanding_at_disconnect,
        vec![0],
        "one DISCONNECT, sent once every message in flight was acknowledged: {stats:?}"
    );
    let stored_at_end = stored(&mut admin, &t, "term", 0).expect("an offset is stored") as usize;
    assert!(
        stored_at_end < N - 1,
        "stopped mid-stream (stored {stored_at_end})"
    );
    let mut acked: Vec<usize> = proxy
        .take_acked()
        .iter()
        .map(|p| std::str::from_utf8(p).unwrap().parse().unwrap())
        .collect();
    acked.sort_unstable();
    acked.dedup();
    assert_eq!(
        acked,
        (0..=stored_at_end).collect::<Vec<usize>>(),
        "the stored offset is the highest contiguous acknowledged one, and nothing past it was acknowledged"
    );
    let deadline = Instant::now() + SHORT;
    while (0..=stored_at_end).any(|o| seen.count[o] == 0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        seen.absorb(&sub, "term");
    }
    let missing: Vec<usize> = (0..=stored_at_end)
        .filter(|o| seen.count[*o] == 0)
        .collect();
    assert!(
        missing.is_empty(),
        "every stored offset was received: {} missing, first {:?}",
        missing.len(),
        &missing[..missing.len().min(20)]
    );
    assert!(
        settled(&will, Duration::from_millis(500)).is_empty(),
        "a clean DISCONNECT discards the will"
    );
}

/// SIGTERM while idle: every connection says DISCONNECT once and none reconnects. Four sinks
/// (four connections) through the count proxy, five rounds: a race between the engine's
/// DISCONNECT and the broker closing the connection shows up in some rounds.
#[test]
fn sigterm_while_idle_disconnects_every_connection_once_without_reconnecting() {
    const ROUNDS: usize = 5;
    let broker = Mosquitto::start_default().unwrap();
    let iggy = iggy();
    let mut admin = iggy.admin().unwrap();
    let sinks = ["idle-a", "idle-b", "idle-c", "idle-d"];
    let mut failures = Vec::new();
    for round in 0..ROUNDS {
        let proxy = MqttCountProxy::start(broker.addr()).unwrap();
        let t = topic(&iggy, &format!("idle{round}"), 1);
        small_batch(&mut admin, &t, "idle", 5);
        let mut cfg = engine_sections(&iggy);
        for (i, sink) in sinks.iter().enumerate() {
            cfg += &mqtt_sink(
                sink,
                &t,
                "partitions = [0]",
                "",
                &proxy.host_port(),
                &format!(
                    "protocol = \"{}\"\nqos = {}\ntopic = \"idle/{sink}\"",
                    if i % 2 == 0 { "5" } else { "3.1.1" },
                    i % 3
                ),
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let mut engine = Engine::start(dir.path(), "idle", &cfg);
        for sink in sinks {
            wait_stored(&mut engine, &mut admin, &t, sink, 4, LONG);
        }
        std::thread::sleep(Duration::from_millis(200));
        stop_clean(&mut engine, SHORT * 3);
        let log = engine.log();
        let after_signal = log
            .split_once("signal received")
            .map_or("", |(_, rest)| rest);
        let stats = proxy.stats();
        if after_signal.contains("reconnecting") || (stats.connections, stats.disconnects) != (4, 4)
        {
            failures.push(format!(
                "round {round}: connections {}, DISCONNECTs {} (want 4 and 4)\n{}",
                stats.connections,
                stats.disconnects,
                tail(after_signal, 40)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "a controlled shutdown sends one DISCONNECT per connection and never reconnects; \
         {} of {ROUNDS} rounds did not:\n{}",
        failures.len(),
        failures.join("\n----\n")
    );
}

/// mosquitto behind the count proxy, a topic of one partition, a QoS 1 subscriber on
/// `{name}/#`, and the engine's sink `name` (topic `{name}/{partition}`, quick reconnects, the
/// extra `[sink.mqtt]` lines `mqtt`) connected through the proxy.
struct ProxiedRun {
    _broker: Mosquitto,
    iggy: IggyServer,
    admin: IggyAdmin,
    proxy: MqttCountProxy,
    t: Topic,
    sub: Subscriber,
    engine: Engine,
    _dir: tempfile::TempDir,
}

fn proxied_run(name: &str, mqtt: &str) -> ProxiedRun {
    let broker = Mosquitto::start_default().unwrap();
    let iggy = iggy();
    let admin = iggy.admin().unwrap();
    let proxy = MqttCountProxy::start(broker.addr()).unwrap();
    let t = topic(&iggy, name, 1);
    let sub = Subscriber::connect(
        broker.addr(),
        SubscriberOpts::v5(format!("{name}/#")).qos(1),
    )
    .unwrap();
    let cfg = engine_sections(&iggy)
        + &mqtt_sink(
            name,
            &t,
            "partitions = [0]",
            "",
            &proxy.host_port(),
            &format!(
                "{mqtt}\nreconnect_min = \"100ms\"\nreconnect_max = \"200ms\"\ntopic = \"{name}/{{partition}}\""
            ),
        );
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::start(dir.path(), name, &cfg);
    ProxiedRun {
        _broker: broker,
        iggy,
        admin,
        proxy,
        t,
        sub,
        engine,
        _dir: dir,
    }
}

/// Keep-alive off (`keep_alive = "0s"`): a broker that goes silent with messages in flight is
/// caught by `ack_timeout`, and the sink delivers on a new connection. Before, nothing noticed:
/// the window stayed held for as long as the TCP connection lived.
#[test]
fn with_keep_alive_off_a_silent_broker_is_caught_by_the_ack_timeout() {
    let ProxiedRun {
        iggy: _iggy,
        mut admin,
        proxy,
        t,
        sub,
        mut engine,
        // Named, so the broker and the engine's directory live to the end of the test.
        _broker,
        _dir,
    } = proxied_run("at", "keep_alive = \"0s\"\nack_timeout = \"1s\"");
    common::wait_until("connected", LONG, || {
        engine.log().contains("connected to MQTT broker")
    });
    proxy.black_hole(true);
    small_batch(&mut admin, &t, "at", 5);
    common::wait_until("the silent broker is noticed", SHORT, || {
        engine.log().contains("sink.mqtt.ack_timeout")
    });
    proxy.black_hole(false);
    wait_stored(&mut engine, &mut admin, &t, "at", 4, LONG);
    let got = settled(&sub, Duration::from_millis(300));
    // At least once: what the dead connection had written may still reach the broker when
    // the network comes back, beside the new connection's re-sends.
    let distinct: BTreeSet<String> = got.iter().map(text).collect();
    let want: BTreeSet<String> = (0..5).map(|n| format!("at-{n}")).collect();
    assert_eq!(distinct, want, "every message arrived: {got:?}");
    stop_clean(&mut engine, SHORT * 3);
}

#[test]
fn keep_alive_pings_an_idle_broker_and_a_silent_one_is_replaced_by_a_new_connection() {
    let ProxiedRun {
        iggy: _iggy,
        mut admin,
        proxy,
        t,
        sub,
        mut engine,
        // Named, so the broker and the engine's directory live to the end of the test.
        _broker,
        _dir,
    } = proxied_run("ka", "keep_alive = \"1s\"");

    // Idle: a PINGREQ about every second, each answered, on the one connection.
    let deadline = Instant::now() + LONG;
    while proxy.stats().pingresps < 3 {
        assert!(
            Instant::now() < deadline,
            "no PINGREQs: {:?}",
            proxy.stats()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let stats = proxy.stats();
    assert_eq!(stats.connections, 1, "{stats:?}");
    assert!(stats.pingreqs >= 3, "{stats:?}");

    // A broker that stops answering: the PINGREQ goes unanswered and the engine gives up on
    // the connection within about two keep-alive intervals, then connects again. The network
    // is black-holed both ways: with only the engine's bytes held, mosquitto's own keep-alive
    // timeout (1.5 intervals) closed the connection first in some runs, and the engine saw a
    // close instead of a silence.
    proxy.black_hole(true);
    let deadline = Instant::now() + LONG;
    while !engine.log().contains("no PINGRESP within the keep-alive") {
        assert!(
            Instant::now() < deadline,
            "a silent broker was not detected:\n{}",
            tail(&engine.log(), 20)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    proxy.black_hole(false);
    let deadline = Instant::now() + LONG;
    while proxy.stats().connack_codes.len() < 2 {
        assert!(
            Instant::now() < deadline,
            "no new connection: {:?}",
            proxy.stats()
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // And it delivers on the new connection.
    small_batch(&mut admin, &t, "ka", 5);
    wait_stored(&mut engine, &mut admin, &t, "ka", 4, LONG);
    let got = settled(&sub, Duration::from_millis(300));
    assert_payloads(&got, "ka/0", "ka", 5);
    stop_clean(&mut engine, SHORT * 3);
}
