//! The MQTT count proxy and mosquitto persistence, against the real mosquitto: what the proxy
//! counts matches what a client sent and the broker answered, and a persistent broker stopped
//! gracefully keeps a subscriber's session and its queued messages.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use mqttbytes::{QoS, v4, v5};
use spillway_tests::mqtt_count_proxy::MqttFramer;
use spillway_tests::{Mosquitto, MosquittoOpts, MqttCountProxy, Subscriber, SubscriberOpts};

const WAIT: Duration = Duration::from_secs(5);

/// Reads packets until `want` acknowledgements of type `kind` (4 PUBACK, 5 PUBREC) arrived;
/// returns their `(packet id, reason code)`.
fn read_acks(s: &mut TcpStream, kind: u8, want: usize) -> Vec<(u16, u8)> {
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut framer = MqttFramer::default();
    let mut buf = [0u8; 4096];
    let mut acks = Vec::new();
    while acks.len() < want {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "the broker closed the connection");
        framer.push(&buf[..n]);
        while let Some((first, body)) = framer.next_packet().unwrap() {
            if first >> 4 == kind {
                acks.push((
                    u16::from_be_bytes([body[0], body[1]]),
                    body.get(2).copied().unwrap_or(0),
                ));
            }
        }
    }
    acks
}

#[test]
fn the_proxy_counts_what_a_v4_client_sends_and_mosquitto_acknowledges() {
    let broker = Mosquitto::start(MosquittoOpts::new()).expect("start mosquitto");
    let proxy = MqttCountProxy::start(broker.addr()).unwrap();
    let sub = Subscriber::connect(broker.addr(), SubscriberOpts::v4("c/#").qos(1)).unwrap();
    let mut s = TcpStream::connect(proxy.addr()).unwrap();
    let mut out = BytesMut::new();
    v4::Connect::new("proxy-v4").write(&mut out).unwrap();
    for pkid in 1..=50u16 {
        let mut p = v4::Publish::new("c/x", QoS::AtLeastOnce, pkid.to_string().into_bytes());
        p.pkid = pkid;
        p.write(&mut out).unwrap();
    }
    v4::Publish::new("c/x", QoS::AtMostOnce, b"q0".to_vec())
        .write(&mut out)
        .unwrap();
    s.write_all(&out).unwrap();
    let acks = read_acks(&mut s, 4, 50);
    assert_eq!(
        acks.iter().map(|a| a.0).collect::<Vec<u16>>(),
        (1..=50).collect::<Vec<u16>>()
    );
    let stats = proxy.stats();
    assert_eq!(stats.connack_codes, vec![0]);
    assert_eq!(stats.publishes, [1, 50, 0]);
    assert_eq!(
        (stats.pubacks, stats.outstanding, stats.rejected),
        (50, 0, 0)
    );
    assert!(
        (1..=50).contains(&stats.max_outstanding),
        "{}",
        stats.max_outstanding
    );
    let acked: BTreeSet<Bytes> = proxy.take_acked().into_iter().collect();
    let mut expected: BTreeSet<Bytes> = (1..=50u16)
        .map(|n| Bytes::from(n.to_string().into_bytes()))
        .collect();
    expected.insert(Bytes::from_static(b"q0"));
    assert_eq!(acked, expected);
    assert_eq!(sub.wait_for(51, WAIT).unwrap().len(), 51);

    let mut out = BytesMut::new();
    v4::Disconnect.write(&mut out).unwrap();
    s.write_all(&out).unwrap();
    drop(s);
    let deadline = std::time::Instant::now() + WAIT;
    while proxy.open_connections() > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(proxy.stats().disconnects, 1);
    assert_eq!(proxy.open_connections(), 0);
}

#[test]
fn mosquitto_rejects_an_acl_denied_v5_publish_with_0x87_and_the_proxy_sees_it() {
    let acl = "topic readwrite ok/#\ntopic read denied/#\n";
    let broker = Mosquitto::start(MosquittoOpts::new().acl(acl)).expect("start mosquitto");
    let proxy = MqttCountProxy::start(broker.addr()).unwrap();
    let mut s = TcpStream::connect(proxy.addr()).unwrap();
    let mut out = BytesMut::new();
    v5::Connect::new("proxy-v5").write(&mut out).unwrap();
    for (pkid, topic, qos) in [
        (1u16, "ok/a", QoS::AtLeastOnce),
        (2, "denied/a", QoS::AtLeastOnce),
        (3, "denied/b", QoS::ExactlyOnce),
    ] {
        let mut p = v5::Publish::new(topic, qos, format!("m{pkid}").into_bytes());
        p.pkid = pkid;
        p.write(&mut out).unwrap();
    }
    s.write_all(&out).unwrap();
    let pubacks = read_acks(&mut s, 4, 2);
    assert_eq!(pubacks[0].0, 1);
    assert!(pubacks[0].1 < 0x80, "{pubacks:?}");
    assert_eq!(pubacks[1], (2, 0x87), "ACL denial of a QoS 1 PUBLISH");
    let stats = proxy.stats();
    let deadline = std::time::Instant::now() + WAIT;
    let mut rejected = proxy.take_rejected();
    while rejected.len() < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        rejected.extend(proxy.take_rejected());
    }
    rejected.sort();
    assert_eq!(
        rejected,
        vec![
            (Bytes::from_static(b"m2"), 0x87),
            (Bytes::from_static(b"m3"), 0x87)
        ],
        "the QoS 2 PUBLISH is refused in PUBREC with 0x87: {stats:?}"
    );
    assert_eq!(proxy.stats().outstanding, 0);
    assert_eq!(proxy.take_acked(), vec![Bytes::from_static(b"m1")]);
}

#[test]
fn a_persistent_broker_stopped_gracefully_keeps_queued_messages() {
    let mut broker = Mosquitto::start(MosquittoOpts::new().persistence()).expect("start mosquitto");
    let opts = SubscriberOpts::v5("p/#")
        .qos(1)
        .client_id("persistent-sub")
        .clean_start(false)
        .session_expiry(3600);
    let sub = Subscriber::connect(broker.addr(), opts.clone()).unwrap();
    sub.disconnect();
    broker
        .publish_cli(&["-t", "p/x", "-m", "queued", "-q", "1"])
        .unwrap();
    broker.stop_graceful(WAIT).unwrap();
    assert!(!broker.is_running());
    assert!(broker.dir().join("mosquitto.db").exists());
    broker.start_again().unwrap();
    let sub = Subscriber::connect(broker.addr(), opts).unwrap();
    assert!(sub.connack().session_present, "the session survived");
    let got = sub.wait_for(1, WAIT).unwrap();
    assert_eq!(got[0].payload.as_ref(), b"queued");

    // Without persistence the same steps lose the session.
    let mut plain = Mosquitto::start(MosquittoOpts::new()).expect("start mosquitto");
    let opts = SubscriberOpts::v5("p/#")
        .qos(1)
        .client_id("forgotten-sub")
        .clean_start(false)
        .session_expiry(3600);
    Subscriber::connect(plain.addr(), opts.clone())
        .unwrap()
        .disconnect();
    plain.stop_graceful(WAIT).unwrap();
    plain.start_again().unwrap();
    let sub = Subscriber::connect(plain.addr(), opts).unwrap();
    assert!(!sub.connack().session_present);
}

/// A fact the MQTT sink's tests and tuning rely on: mosquitto 2.0.11 keeps at most
/// `max_inflight_messages` (default 20) incoming QoS 2 messages of a 3.1.1 client awaiting
/// PUBREL; the ones past that are dropped, yet still answered with PUBREC and, after PUBREL,
/// PUBCOMP. 3.1.1 has no Receive Maximum to tell the client about the limit.
#[test]
fn mosquitto_silently_drops_v311_qos2_beyond_max_inflight_messages() {
    let broker = Mosquitto::start(MosquittoOpts::new()).expect("start mosquitto");
    let sub = Subscriber::connect(broker.addr(), SubscriberOpts::v4("q2/#").qos(2)).unwrap();
    let mut s = TcpStream::connect(broker.addr()).unwrap();
    let mut out = BytesMut::new();
    v4::Connect::new("q2-burst").write(&mut out).unwrap();
    for pkid in 1..=30u16 {
        let mut p = v4::Publish::new("q2/x", QoS::ExactlyOnce, pkid.to_string().into_bytes());
        p.pkid = pkid;
        p.write(&mut out).unwrap();
    }
    s.write_all(&out).unwrap();
    let recs = read_acks(&mut s, 5, 30);
    assert_eq!(recs.len(), 30, "every PUBLISH gets a PUBREC");
    let mut out = BytesMut::new();
    for pkid in 1..=30u16 {
        v4::PubRel::new(pkid).write(&mut out).unwrap();
    }
    s.write_all(&out).unwrap();
    assert_eq!(read_acks(&mut s, 7, 30).len(), 30, "and a PUBCOMP");
    std::thread::sleep(Duration::from_millis(500));
    let got: Vec<String> = sub
        .messages()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.payload).into_owned())
        .collect();
    assert_eq!(
        got,
        (1..=20).map(|n| n.to_string()).collect::<Vec<_>>(),
        "only the first 20 are delivered"
    );
}

/// A fact the MQTT sink's restart test runs into: mosquitto 2.0.11 writes an MQTT 5 session to
/// its persistence database only when the session was started with Clean Start 0. A session
/// started with Clean Start 1 and a Session Expiry Interval survives reconnects, but not a
/// broker restart; one started (or resumed) with Clean Start 0 survives both.
#[test]
fn mosquitto_persists_a_v5_session_only_if_it_began_without_clean_start() {
    let mut broker = Mosquitto::start(MosquittoOpts::new().persistence()).expect("start mosquitto");
    let opts = |id: &str| {
        SubscriberOpts::v5("p/#")
            .qos(1)
            .client_id(id)
            .session_expiry(3600)
    };
    Subscriber::connect(broker.addr(), opts("began-clean").clean_start(true))
        .unwrap()
        .disconnect();
    let resumed =
        Subscriber::connect(broker.addr(), opts("began-clean").clean_start(false)).unwrap();
    assert!(
        resumed.connack().session_present,
        "a reconnect resumes the session"
    );
    resumed.disconnect();
    Subscriber::connect(broker.addr(), opts("began-clean-once").clean_start(true))
        .unwrap()
        .disconnect();
    Subscriber::connect(broker.addr(), opts("began-persistent").clean_start(false))
        .unwrap()
        .disconnect();

    broker.stop_graceful(WAIT).unwrap();
    broker.start_again().unwrap();
    for (id, survives) in [
        ("began-clean-once", false),
        ("began-clean", true),
        ("began-persistent", true),
    ] {
        let sub = Subscriber::connect(broker.addr(), opts(id).clean_start(false)).unwrap();
        assert_eq!(sub.connack().session_present, survives, "{id}");
    }
}
