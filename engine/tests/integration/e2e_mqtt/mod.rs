//! End to end: Iggy (the real server the harness starts, see `IggyServer::start`) ->
//! `spillway run` -> the MQTT sink -> a REAL mosquitto 2.0.11 started by the harness, observed
//! by the harness's independent subscriber (built on `mqttbytes`) and, where counting matters,
//! through the harness's MQTT count proxy between the engine and the broker.
//!
//! Facts about mosquitto 2.0.11 these tests rely on (checked with mosquitto_pub/sub and in
//! `spillway-tests`' own tests):
//! - a wrong password is refused with CONNACK 5 "not authorized" (3.1.1) and 0x87 "Not
//!   authorized" (5), not with 4 / 0x86 "bad user name or password";
//! - an ACL-denied MQTT 5 PUBLISH is answered with PUBACK 0x87 (QoS 1) or PUBREC 0x87 (QoS 2);
//!   over 3.1.1 it is acknowledged as if delivered, so broker rejections are MQTT 5 only;
//! - live deliveries carry RETAIN 0 (no retain-as-published on the harness subscriber); a
//!   retained message shows RETAIN 1 only to a subscription made after it was stored;
//! - MQTT 5 Receive Maximum is mosquitto's `max_inflight_messages` (default 20); a 3.1.1
//!   client that has more QoS 2 messages in flight than that loses the excess silently (PUBREC
//!   and PUBCOMP still come);
//! - with persistence, sessions and queued messages survive a graceful stop (SIGTERM writes
//!   the database), not a SIGKILL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::{
    Engine, Topic, engine_sections, mqtt_sink, send_all, stop_clean, stored, tail, topic,
    wait_exit_code, wait_stored,
};
use spillway_tests::{
    IggyAdmin, IggyServer, Mosquitto, MosquittoOpts, MqttCountProxy, MqttVersion,
    PolledTestMessage, Received, Subscriber, SubscriberOpts, TestConsumer, TestMessage,
};

const LONG: Duration = Duration::from_secs(60);
const SHORT: Duration = Duration::from_secs(10);

fn iggy() -> IggyServer {
    IggyServer::start().unwrap()
}

fn protocol(v: MqttVersion) -> &'static str {
    match v {
        MqttVersion::V4 => "3.1.1",
        MqttVersion::V5 => "5",
    }
}

/// Every message the broker delivered so far, waiting `settle` first so late ones are in.
fn settled(sub: &Subscriber, settle: Duration) -> Vec<Received> {
    std::thread::sleep(settle);
    sub.messages()
}

/// What Iggy holds for partition `p` of `t` (offsets, timestamps), read by an independent
/// poll.
fn polled(admin: &mut IggyAdmin, t: &Topic, p: u32, count: u32) -> Vec<PolledTestMessage> {
    admin
        .poll(
            &TestConsumer::Named("probe".into()),
            &t.stream,
            &t.topic,
            p,
            0,
            count,
        )
        .unwrap()
}

fn text(r: &Received) -> String {
    String::from_utf8_lossy(&r.payload).into_owned()
}

fn json(r: &Received) -> serde_json::Value {
    serde_json::from_slice(&r.payload)
        .unwrap_or_else(|e| panic!("payload on {} is not JSON ({e}): {}", r.topic, text(r)))
}

/// Whether a log line names offset `offset` (`offset=7`, `offset 7`, `offset: 7`).
fn mentions_offset(line: &str, offset: u64) -> bool {
    ["offset=", "offset ", "offset: "].iter().any(|p| {
        line.match_indices(p).any(|(i, m)| {
            let rest = &line[i + m.len()..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits == offset.to_string()
        })
    })
}

/// `count` messages `{tag}-{n}` into partition 0 of `t`.
fn small_batch(admin: &mut IggyAdmin, t: &Topic, tag: &str, count: u64) {
    let batch: Vec<TestMessage> = (0..count)
        .map(|n| TestMessage::new(u128::from(n) + 1, format!("{tag}-{n}").into_bytes()))
        .collect();
    send_all(admin, t, 0, &batch);
}

/// What arrived on `topic` is `{tag}-0`.. in order, each once.
fn assert_payloads(got: &[Received], topic: &str, tag: &str, count: u64) {
    let on_topic: Vec<String> = got.iter().filter(|r| r.topic == topic).map(text).collect();
    assert_eq!(
        on_topic,
        (0..count).map(|n| format!("{tag}-{n}")).collect::<Vec<_>>(),
        "everything on {topic}, once, in order"
    );
}

/// What one or more subscribers received, by offset.
struct Seen {
    count: Vec<u32>,
    distinct: usize,
    total: usize,
}

impl Seen {
    fn new(n: usize) -> Self {
        Seen {
            count: vec![0; n],
            distinct: 0,
            total: 0,
        }
    }

    fn absorb(&mut self, sub: &Subscriber, topic: &str) {
        for r in sub.take() {
            if r.topic != topic {
                continue;
            }
            let o: usize = text(&r).parse().unwrap();
            if self.count[o] == 0 {
                self.distinct += 1;
            }
            self.count[o] += 1;
            self.total += 1;
        }
    }

    fn duplicates(&self) -> usize {
        self.total - self.distinct
    }

    fn missing(&self) -> Vec<usize> {
        (0..self.count.len())
            .filter(|o| self.count[*o] == 0)
            .collect()
    }
}

mod auth;
mod connection;
mod matrix;
mod pipelining;
mod properties;
mod rejections;
mod restarts;
mod shutdown;
