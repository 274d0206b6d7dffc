//! The MQTT interop cases against two real brokers started by the harness: mosquitto 2.0.11
//! (C) and ejabberd 23.01's `mod_mqtt` (Erlang, like EMQX and VerneMQ), with the real Iggy
//! server: both protocols at QoS 0, 1 and 2, TLS, a broker killed and started again mid-run,
//! and a PUBLISH the broker refuses. Each case runs the same engine config against both; what
//! a broker does differently is said where the test allows for it.
//!
//! ejabberd facts these tests meet: it answers an MQTT 5 PUBLISH nobody subscribed to with
//! PUBACK 0x10 (No matching subscribers, a success: the offset is committed); users log in as
//! `user@host`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{
    Engine, Topic, engine_sections, mqtt_sink, send_all, stop_clean, stored, topic, wait_exit_code,
    wait_stored,
};
use spillway_tests::{
    ClientTls, EJABBERD_PASSWORD, EJABBERD_USER, Ejabberd, EjabberdOpts, IggyServer, Mosquitto,
    MosquittoOpts, Received, Subscriber, SubscriberOpts, TestMessage,
};

const LONG: Duration = Duration::from_secs(60);
const SHORT: Duration = Duration::from_secs(10);

fn iggy() -> IggyServer {
    IggyServer::start().expect("an Iggy server (SPILLWAY_IGGY_BIN, or the stand-in)")
}

/// One of the two brokers.
enum Broker {
    Mosquitto(Mosquitto),
    Ejabberd(Ejabberd),
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Mosquitto,
    Ejabberd,
}

const BOTH: [Kind; 2] = [Kind::Mosquitto, Kind::Ejabberd];

impl Broker {
    fn start(kind: Kind, tls: bool) -> Broker {
        match kind {
            Kind::Mosquitto => {
                let opts = MosquittoOpts::new()
                    .user(EJABBERD_USER, EJABBERD_PASSWORD)
                    .persistence();
                let opts = if tls { opts.tls() } else { opts };
                Broker::Mosquitto(Mosquitto::start(opts).unwrap())
            }
            Kind::Ejabberd => {
                let opts = EjabberdOpts::new();
                let opts = if tls { opts.tls() } else { opts };
                Broker::Ejabberd(Ejabberd::start(opts).unwrap())
            }
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Broker::Mosquitto(_) => "mosquitto",
            Broker::Ejabberd(_) => "ejabberd",
        }
    }

    fn addr(&self) -> std::net::SocketAddr {
        match self {
            Broker::Mosquitto(b) => b.addr(),
            Broker::Ejabberd(b) => b.addr(),
        }
    }

    fn host_port(&self) -> String {
        match self {
            Broker::Mosquitto(b) => b.host_port(),
            Broker::Ejabberd(b) => b.host_port(),
        }
    }

    /// The user name each broker takes (ejabberd's carry the XMPP host).
    fn user(&self) -> String {
        match self {
            Broker::Mosquitto(_) => EJABBERD_USER.to_owned(),
            Broker::Ejabberd(_) => format!("{EJABBERD_USER}@localhost"),
        }
    }

    fn ca_pem(&self) -> Option<String> {
        match self {
            Broker::Mosquitto(b) => b.ca_pem().map(str::to_owned),
            Broker::Ejabberd(b) => b.ca().map(|c| c.cert_pem().to_owned()),
        }
    }

    /// The sink lines that reach this broker: credentials and, with TLS, the CA.
    fn sink_lines(&self, dir: &std::path::Path) -> String {
        let mut lines = format!(
            "username = \"{}\"\npassword = \"{EJABBERD_PASSWORD}\"\n",
            self.user()
        );
        if let Some(pem) = self.ca_pem() {
            let path = dir.join("broker-ca.crt");
            std::fs::write(&path, pem).unwrap();
            lines.push_str(&format!(
                "tls = true\ntls_ca = \"{}\"\ntls_server_name = \"localhost\"\n",
                path.display()
            ));
        }
        lines
    }

    fn subscribe(&self, filter: &str, qos: u8) -> Subscriber {
        let mut opts = SubscriberOpts::v5(filter)
            .qos(qos)
            .credentials(self.user(), EJABBERD_PASSWORD);
        if let Some(pem) = self.ca_pem() {
            opts = opts.tls(ClientTls::new(pem));
        }
        Subscriber::connect(self.addr(), opts)
            .unwrap_or_else(|e| panic!("{}: subscribing: {e}\n{}", self.name(), self.log()))
    }

    /// Restarted on the same port and storage: mosquitto killed (SIGKILL), ejabberd stopped
    /// (see `Ejabberd::restart`).
    fn restart(&mut self) {
        match self {
            Broker::Mosquitto(b) => b.restart().unwrap(),
            Broker::Ejabberd(b) => b.restart().unwrap(),
        }
    }

    fn log(&self) -> String {
        match self {
            Broker::Mosquitto(b) => b.log(),
            Broker::Ejabberd(b) => b.log(),
        }
    }
}

fn messages(tag: &str, n: u64) -> Vec<TestMessage> {
    (0..n)
        .map(|i| TestMessage::new(u128::from(i) + 1, format!("{tag}-{i}").into_bytes()))
        .collect()
}

fn counts(got: &[Received]) -> BTreeMap<String, u32> {
    let mut m = BTreeMap::new();
    for r in got {
        *m.entry(String::from_utf8_lossy(&r.payload).into_owned())
            .or_insert(0) += 1;
    }
    m
}

fn sink_cfg(
    iggy: &IggyServer,
    t: &Topic,
    name: &str,
    broker: &Broker,
    mqtt: &str,
    dir: &std::path::Path,
) -> String {
    engine_sections(iggy)
        + &mqtt_sink(
            name,
            t,
            "partitions = [0]",
            "",
            &broker.host_port(),
            &format!("{mqtt}\n{}", broker.sink_lines(dir)),
        )
}

/// Both protocols at QoS 0, 1 and 2, to each broker: every message arrives (exactly once at
/// QoS 1 and 2 here: no fault), in order, and the last offset is committed.
#[test]
fn both_brokers_take_every_protocol_and_qos() {
    let iggy = iggy();
    for kind in BOTH {
        let broker = Broker::start(kind, false);
        for proto in ["3.1.1", "5"] {
            for qos in 0..=2u8 {
                let tag = format!("{}-{}-{qos}", broker.name(), proto.replace('.', ""));
                let t = topic(&iggy, &tag, 1);
                let mut admin = iggy.admin().unwrap();
                let n = 200;
                send_all(&mut admin, &t, 0, &messages(&tag, n));
                let sub = broker.subscribe(&format!("interop/{tag}"), 2);
                let dir = tempfile::tempdir().unwrap();
                let cfg = sink_cfg(
                    &iggy,
                    &t,
                    &tag,
                    &broker,
                    &format!("protocol = \"{proto}\"\nqos = {qos}\ntopic = \"interop/{tag}\""),
                    dir.path(),
                );
                let mut engine = Engine::start(dir.path(), &tag, &cfg);
                wait_stored(&mut engine, &mut admin, &t, &tag, n - 1, LONG);
                let got = sub
                    .wait_for(n as usize, SHORT)
                    .unwrap_or_else(|e| panic!("{tag}: {e}\n{}\n{}", engine.log(), broker.log()));
                stop_clean(&mut engine, SHORT * 3);
                let payloads: Vec<String> = got
                    .iter()
                    .map(|r| String::from_utf8_lossy(&r.payload).into_owned())
                    .collect();
                let expected: Vec<String> = (0..n).map(|i| format!("{tag}-{i}")).collect();
                assert_eq!(payloads, expected, "{tag}: every message, once, in order");
            }
        }
    }
}

/// TLS to each broker with its CA: delivered, committed.
#[test]
fn both_brokers_over_tls() {
    let iggy = iggy();
    for kind in BOTH {
        let broker = Broker::start(kind, true);
        let tag = format!("{}-tls", broker.name());
        let t = topic(&iggy, &tag, 1);
        let mut admin = iggy.admin().unwrap();
        send_all(&mut admin, &t, 0, &messages(&tag, 50));
        let sub = broker.subscribe(&format!("interop/{tag}"), 1);
        let dir = tempfile::tempdir().unwrap();
        let cfg = sink_cfg(
            &iggy,
            &t,
            &tag,
            &broker,
            &format!("protocol = \"5\"\nqos = 1\ntopic = \"interop/{tag}\""),
            dir.path(),
        );
        let mut engine = Engine::start(dir.path(), &tag, &cfg);
        wait_stored(&mut engine, &mut admin, &t, &tag, 49, LONG);
        sub.wait_for(50, SHORT).unwrap();
        stop_clean(&mut engine, SHORT * 3);
    }
}

/// Each broker restarted mid-run (mosquitto killed, ejabberd stopped), at QoS 1: the engine
/// reconnects by itself, and everything produced after the restart reaches a subscriber and
/// is committed.
#[test]
fn each_broker_restarted_mid_run_is_reconnected_to_and_delivered_to() {
    let iggy = iggy();
    for kind in BOTH {
        let mut broker = Broker::start(kind, false);
        let tag = format!("{}-crash", broker.name());
        let t = topic(&iggy, &tag, 1);
        let mut admin = iggy.admin().unwrap();
        let n = 500u64;
        let all = messages(&tag, 2 * n);
        send_all(&mut admin, &t, 0, &all[..n as usize]);
        let dir = tempfile::tempdir().unwrap();
        let cfg = sink_cfg(
            &iggy,
            &t,
            &tag,
            &broker,
            &format!(
                "protocol = \"5\"\nqos = 1\ntopic = \"interop/{tag}\"\nreconnect_min = \"50ms\"\nreconnect_max = \"500ms\""
            ),
            dir.path(),
        );
        let mut engine = Engine::start(dir.path(), &tag, &cfg);
        wait_stored(&mut engine, &mut admin, &t, &tag, n - 1, LONG);
        broker.restart();
        let sub = broker.subscribe(&format!("interop/{tag}"), 1);
        send_all(&mut admin, &t, 0, &all[n as usize..]);
        wait_stored(&mut engine, &mut admin, &t, &tag, 2 * n - 1, LONG);
        let got = counts(
            &sub.wait_for(n as usize, SHORT)
                .unwrap_or_else(|e| panic!("{tag}: {e}\n{}\n{}", engine.log(), broker.log())),
        );
        stop_clean(&mut engine, SHORT * 3);
        for i in n..2 * n {
            let m = format!("{tag}-{i}");
            assert!(got.contains_key(&m), "{m} never arrived\n{}", engine.log());
        }
        assert!(
            engine.log().contains("reconnecting"),
            "the engine saw the broker go\n{}",
            engine.log()
        );
    }
}

/// A PUBLISH nobody subscribed to: ejabberd answers PUBACK 0x10 (No matching subscribers, seen
/// with mosquitto_pub); a success code, so every offset is committed, on both brokers.
#[test]
fn a_publish_nobody_subscribed_to_is_a_success_on_both() {
    let iggy = iggy();
    for kind in BOTH {
        let broker = Broker::start(kind, false);
        let tag = format!("{}-nosub", broker.name());
        let t = topic(&iggy, &tag, 1);
        let mut admin = iggy.admin().unwrap();
        send_all(&mut admin, &t, 0, &messages(&tag, 20));
        let dir = tempfile::tempdir().unwrap();
        let cfg = sink_cfg(
            &iggy,
            &t,
            &tag,
            &broker,
            &format!("protocol = \"5\"\nqos = 1\ntopic = \"nobody/{tag}\""),
            dir.path(),
        );
        let mut engine = Engine::start(dir.path(), &tag, &cfg);
        wait_stored(&mut engine, &mut admin, &t, &tag, 19, LONG);
        stop_clean(&mut engine, SHORT * 3);
    }
}

/// A PUBLISH the broker's access rules deny: mosquitto (ACL) answers PUBACK 0x87 (Not
/// authorized), ejabberd (`mod_mqtt`'s `access_publish`) 0x90 (Topic Name invalid). Under
/// `on_error = "fail"` the engine stops at that offset on both, committing nothing from it
/// on, and names the broker's code; the denied topic gets nothing.
#[test]
fn a_denied_publish_on_both_brokers() {
    let iggy = iggy();
    for kind in BOTH {
        let broker = match kind {
            Kind::Mosquitto => Broker::Mosquitto(
                Mosquitto::start(
                    MosquittoOpts::new()
                        .user(EJABBERD_USER, EJABBERD_PASSWORD)
                        .acl(format!("user {EJABBERD_USER}\ntopic readwrite ok/#\n")),
                )
                .unwrap(),
            ),
            Kind::Ejabberd => {
                Broker::Ejabberd(Ejabberd::start(EjabberdOpts::new().publish_only("ok/#")).unwrap())
            }
        };
        let tag = format!("{}-refused", broker.name());
        let t = topic(&iggy, &tag, 1);
        let mut admin = iggy.admin().unwrap();
        let msgs: Vec<TestMessage> = (0..10u64)
            .map(|i| {
                let m = TestMessage::new(u128::from(i) + 1, format!("{tag}-{i}").into_bytes());
                if i == 5 {
                    m.with_header("mqtt_topic", "denied/five")
                } else {
                    m.with_header("mqtt_topic", &format!("ok/{i}"))
                }
            })
            .collect();
        send_all(&mut admin, &t, 0, &msgs);
        let sub = broker.subscribe("ok/#", 1);
        let sub_denied = broker.subscribe("denied/#", 1);
        let dir = tempfile::tempdir().unwrap();
        let cfg = engine_sections(&iggy)
            + &mqtt_sink(
                &tag,
                &t,
                "partitions = [0]",
                "on_error = \"fail\"",
                &broker.host_port(),
                &format!(
                    "protocol = \"5\"\nqos = 1\ntopic_header = \"mqtt_topic\"\n{}",
                    broker.sink_lines(dir.path())
                ),
            );
        let mut engine = Engine::start(dir.path(), &tag, &cfg);
        let code = wait_exit_code(&mut engine, LONG);
        let log = engine.log();
        assert_eq!(code, Some(1), "{}: {log}\n{}", broker.name(), broker.log());
        assert_eq!(
            stored(&mut admin, &t, &tag, 0),
            Some(4),
            "{}: nothing from the refused offset on is committed\n{log}",
            broker.name()
        );
        let line = log
            .lines()
            .find(|l| l.contains("offset 5") && l.contains("reason"))
            .unwrap_or_else(|| panic!("{}: the refusal names offset 5\n{log}", broker.name()));
        assert!(line.contains("0x"), "the broker's code is named: {line}");
        let got = counts(&sub.messages());
        for i in 0..5 {
            assert!(
                got.contains_key(&format!("{tag}-{i}")),
                "{}: offset {i} delivered: {got:?}",
                broker.name()
            );
        }
        assert!(
            sub_denied.messages().is_empty(),
            "the denied topic got a message"
        );
    }
}

/// `max_publish_rate = 100` (AWS IoT Core's limit per connection): 300 messages take about
/// 2.9 s (a burst of 10, then 100/s) instead of well under one, and none is dropped.
#[test]
fn max_publish_rate_paces_publishes_and_drops_none() {
    let broker = Mosquitto::start_default().unwrap();
    let sub = Subscriber::connect(broker.addr(), SubscriberOpts::v4("paced/#").qos(1)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = format!(
        r#"
[metrics]
address = ""
log_interval = "0s"

[[sink]]
name = "paced"
type = "mqtt"
source = "generate"

[sink.generate]
partitions = 1
rate = 0
size = 20
messages = 300

[sink.mqtt]
address = "{}"
topic = "paced/out"
qos = 1
max_publish_rate = 100
"#,
        broker.host_port()
    );
    let started = std::time::Instant::now();
    let mut engine = Engine::start(dir.path(), "paced", &cfg);
    let status = engine.wait(LONG).expect("the generate run ends by itself");
    assert!(status.success(), "{}", engine.log());
    let deadline = std::time::Instant::now() + SHORT;
    while sub.messages().len() < 300 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = started.elapsed();
    assert_eq!(sub.messages().len(), 300);
    assert!(
        took >= Duration::from_millis(2_500),
        "300 publishes at 100/s took {took:?}"
    );
}

/// `mqtt.address` with several brokers: they are tried in turn. The first here refuses
/// connections (nothing listens); the sink moves on to the second and delivers everything.
#[test]
fn a_list_of_broker_addresses_is_tried_in_turn() {
    let broker = Mosquitto::start_default().unwrap();
    let dead = spillway_tests::ports::free_loopback_port().unwrap();
    let sub = Subscriber::connect(broker.addr(), SubscriberOpts::v4("turn/#").qos(1)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = format!(
        r#"
[metrics]
address = ""
log_interval = "0s"

[[sink]]
name = "turn"
type = "mqtt"
source = "generate"

[sink.generate]
partitions = 2
rate = 0
size = 20
messages = 200

[sink.mqtt]
address = "127.0.0.1:{dead}, {}"
topic = "turn/out"
qos = 1
reconnect_min = "20ms"
"#,
        broker.host_port()
    );
    let mut engine = Engine::start(dir.path(), "turn", &cfg);
    let status = engine.wait(LONG).expect("the generate run ends by itself");
    assert!(status.success(), "{}", engine.log());
    let deadline = std::time::Instant::now() + SHORT;
    while sub.messages().len() < 200 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(sub.messages().len(), 200);
    let log = engine.log();
    assert!(
        log.contains(&format!("MQTT connection to 127.0.0.1:{dead}")),
        "{log}"
    );
    assert!(
        log.contains(&format!("connected to MQTT broker {}", broker.host_port())),
        "{log}"
    );
}
