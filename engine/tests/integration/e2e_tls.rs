//! End to end over TLS: the real Iggy server serving TLS (`IGGY_TCP_TLS_*`, a certificate for
//! `iggy.test` and 127.0.0.1 from a CA made in the test, `self_signed = false`) -> `spillway
//! run` with `[iggy] tls = true` -> file sink. With the right CA everything arrives; with
//! another CA, or a server name the certificate does not hold, the handshake fails, which is
//! not transient: the engine stops with exit status 1 and names the TLS problem.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::{Engine, config, lines, send, stored, topic};
use spillway_tests::{DEFAULT_SERVER_NAME, IggyProcessOpts, IggyServer, TestCa};

const LONG: Duration = Duration::from_secs(60);

/// The real server with TLS on (a TLS stand-in only where no real server is at hand).
fn tls_server() -> IggyServer {
    let server = IggyServer::start_with(IggyProcessOpts::new().tls()).unwrap();
    assert!(
        server.ca_pem().is_some(),
        "a TLS server (SPILLWAY_TEST_IGGY names a plain one?)"
    );
    server
}

/// The file-sink config of `common::config` with TLS on, trusting the CA in `ca_file`.
fn tls_config(plain: &str, ca_file: &Path) -> String {
    tls_config_named(plain, ca_file, DEFAULT_SERVER_NAME)
}

/// As [`tls_config`], checking the certificate for `server_name`.
fn tls_config_named(plain: &str, ca_file: &Path, server_name: &str) -> String {
    let with_tls = plain.replacen(
        "[iggy]\n",
        &format!(
            "[iggy]\ntls = true\ntls_ca = \"{}\"\ntls_server_name = \"{server_name}\"\n",
            ca_file.display()
        ),
        1,
    );
    assert_ne!(with_tls, plain, "the config has an [iggy] section");
    with_tls
}

#[test]
fn every_message_arrives_over_tls_with_the_right_ca() {
    let iggy = tls_server();
    assert!(iggy.is_real() || !spillway_tests::iggy::real_iggy_required());
    let ca_pem = iggy.ca_pem().unwrap().to_owned();
    let t = topic(&iggy, "tls", 2);
    let mut admin = iggy.admin().unwrap();
    for p in 0..2 {
        send(&mut admin, &t, p, "tls", 0, 300);
    }
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("iggy-ca.pem");
    std::fs::write(&ca_file, &ca_pem).unwrap();
    let out = dir.path().join("out.jsonl");
    let plain = config(&iggy, &t, "partitions = [0, 1]", &out, "", "");
    let mut engine = Engine::start(dir.path(), "tls", &tls_config(&plain, &ca_file));
    common::drain_after_stored(&mut engine, &mut admin, &t, 299);
    let got = lines(&out);
    common::assert_once_in_order(&got, &t, 300);
    let l = got
        .iter()
        .find(|l| l.partition == 1 && l.offset == 7)
        .unwrap();
    assert_eq!(l.payload, "tls-p1-7");
    assert_eq!(l.header_n.as_deref(), Some("7"));
    let log = engine.log();
    assert!(!log.contains("TLS to Iggy"), "{log}");
}

/// Runs the engine against `iggy` trusting `ca_pem` and checking `server_name`, and asserts
/// that the handshake failure ends it by itself (not retried) with exit 1, a log that names
/// the TLS problem by one of `names`, nothing delivered and nothing stored.
fn assert_tls_refused(
    iggy: &IggyServer,
    name: &str,
    ca_pem: &str,
    server_name: &str,
    names: &[&str],
) {
    let t = topic(iggy, name, 1);
    let mut admin = iggy.admin().unwrap();
    send(&mut admin, &t, 0, "never", 0, 20);
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca_pem).unwrap();
    let out = dir.path().join("out.jsonl");
    let plain = config(iggy, &t, "partitions = [0]", &out, "", "");
    let cfg = tls_config_named(&plain, &ca_file, server_name);
    let mut engine = Engine::start(dir.path(), name, &cfg);
    let status = engine
        .wait(LONG)
        .expect("a TLS handshake failure is not retried: the engine stops by itself");
    let log = engine.log();
    assert_eq!(status.code(), Some(1), "exit {status:?}\n{log}");
    assert!(log.contains("TLS to Iggy"), "{log}");
    assert!(log.contains("handshake with"), "{log}");
    let lower = log.to_lowercase();
    assert!(
        names
            .iter()
            .any(|n| log.contains(n) || lower.contains(&n.to_lowercase())),
        "the log names the certificate problem ({names:?})\n{log}"
    );
    assert!(!log.contains("Iggy unavailable, retrying"), "{log}");
    assert!(lines(&out).is_empty(), "nothing is delivered");
    assert_eq!(stored(&mut admin, &t, "file-out", 0), None);
}

#[test]
fn a_server_certificate_from_another_ca_stops_the_engine_with_a_tls_error() {
    let iggy = tls_server();
    let other = TestCa::new("not the Iggy CA").unwrap();
    assert_tls_refused(
        &iggy,
        "tls-wrong-ca",
        other.cert_pem(),
        DEFAULT_SERVER_NAME,
        &["UnknownIssuer", "unknown issuer"],
    );
}

#[test]
fn a_server_name_the_certificate_does_not_hold_stops_the_engine_with_a_tls_error() {
    let iggy = tls_server();
    let ca_pem = iggy.ca_pem().unwrap().to_owned();
    assert_tls_refused(
        &iggy,
        "tls-wrong-name",
        &ca_pem,
        "not-iggy.test",
        &["NotValidForName", "not valid for"],
    );
}

/// `mqtt.alpn`: a TLS front that, like AWS IoT Core on port 443, takes MQTT only from clients
/// that negotiate `x-amzn-mqtt-ca` (a stand-in: mosquitto's listeners have no ALPN setting)
/// in front of mosquitto. With the key the sink delivers everything through it; without it
/// `check --connect` reports the broker unreachable and the front counts a refusal.
#[test]
fn an_mqtt_sink_with_alpn_reaches_a_broker_that_requires_it() {
    use spillway_tests::{AlpnTlsProxy, Mosquitto, Subscriber, SubscriberOpts};
    let broker = Mosquitto::start_default().unwrap();
    let front = AlpnTlsProxy::start(broker.addr(), "x-amzn-mqtt-ca").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("front-ca.pem");
    std::fs::write(&ca_file, front.ca_pem()).unwrap();
    let config = |alpn: &str| {
        format!(
            r#"
[metrics]
address = ""
log_interval = "0s"

[[sink]]
name = "iot"
type = "mqtt"
source = "generate"

[sink.generate]
partitions = 1
rate = 0
size = 20
messages = 50

[sink.mqtt]
address = "{}"
tls = true
tls_ca = "{}"
tls_server_name = "localhost"
topic = "iot/out"
qos = 1
connect_timeout = "2s"
{alpn}
"#,
            front.host_port(),
            ca_file.display()
        )
    };
    let without = dir.path().join("no-alpn.toml");
    std::fs::write(&without, config("")).unwrap();
    let checked = std::process::Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["check", "--connect", "--config"])
        .arg(&without)
        .output()
        .unwrap();
    let (code, out, err) = (
        checked.status.code(),
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr),
    );
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(out.contains("PROBLEM sink \"iot\" mqtt"), "{out}");
    assert!(front.refused() >= 1);
    let sub = Subscriber::connect(broker.addr(), SubscriberOpts::v4("iot/#").qos(1)).unwrap();
    let with = config("alpn = [\"x-amzn-mqtt-ca\"]");
    let mut engine = Engine::start(dir.path(), "alpn", &with);
    let status = engine.wait(LONG).expect("the generate run ends by itself");
    assert!(status.success(), "{}", engine.log());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while sub.messages().len() < 50 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(sub.messages().len(), 50);
    assert!(front.accepted() >= 1);
}
