//! Proptest strategies for valid MQTT packets of every kind, shared by `roundtrip.rs` and
//! `differential.rs`. "Valid" follows the specifications: strings without U+0000, topic names
//! without wildcards, topic filters with wildcards only where §4.7 allows them, properties only
//! of the kinds the packet may carry (MQTT 5 §2.2.2.2 table 2-4, through
//! `PropertyContext::allowed`), reason codes only of those the packet may carry (through
//! `ReasonCode::allowed_in`).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::num::{NonZeroU16, NonZeroU32};

use bytes::Bytes;
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::sample::select;
use spillway_codec::properties::id;
use spillway_codec::{
    Ack, Auth, ConnAck, Connect, Disconnect, MqttStr, Packet, PacketId, PacketType, Properties,
    PropertyContext, PropertyFields, Protocol, Publish, QoS, ReasonCode, RetainHandling, SubAck,
    Subscribe, Subscription, SubscriptionOptions, UnsubAck, Unsubscribe, Will,
};

pub const V3: Protocol = Protocol::V311;
pub const V5: Protocol = Protocol::V5;

/// The number of proptest cases: modest by default so the suite stays fast;
/// `SPILLWAY_PROPTEST_SCALE=50` runs fifty times as many (a deeper search, e.g. before a
/// release).
pub fn cases(default: u32) -> u32 {
    let scale = std::env::var("SPILLWAY_PROPTEST_SCALE")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(1);
    default.saturating_mul(scale.max(1))
}

/// Any string MQTT allows (no U+0000), up to `max` characters.
pub fn string(max: usize) -> BoxedStrategy<MqttStr> {
    vec(any::<char>(), 0..=max)
        .prop_map(|cs| {
            let s: String = cs
                .into_iter()
                .map(|c| if c == '\0' { '0' } else { c })
                .collect();
            MqttStr::try_from(s).unwrap()
        })
        .boxed()
}

/// Like [`string`] but never empty.
pub fn nonempty_string(max: usize) -> BoxedStrategy<MqttStr> {
    string(max)
        .prop_map(|s| {
            if s.is_empty() {
                MqttStr::from_static("x").unwrap()
            } else {
                s
            }
        })
        .boxed()
}

pub fn bytes(max: usize) -> BoxedStrategy<Bytes> {
    vec(any::<u8>(), 0..=max).prop_map(Bytes::from).boxed()
}

pub fn packet_id() -> BoxedStrategy<PacketId> {
    (1..=u16::MAX)
        .prop_map(|n| NonZeroU16::new(n).unwrap())
        .boxed()
}

pub fn qos() -> BoxedStrategy<QoS> {
    select(vec![QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce]).boxed()
}

/// One topic level: any characters but `/`, the wildcards, U+0000 and `$` (so that a filter
/// never starts with `$share/` by chance).
fn level() -> BoxedStrategy<String> {
    vec(any::<char>(), 0..6)
        .prop_map(|cs| {
            cs.into_iter()
                .map(|c| match c {
                    '/' | '+' | '#' | '\0' | '$' => 'x',
                    c => c,
                })
                .collect()
        })
        .boxed()
}

/// A topic name (§4.7.3): at least one character, no wildcard; empty levels are allowed.
pub fn topic_name() -> BoxedStrategy<MqttStr> {
    vec(level(), 1..4)
        .prop_map(|levels| {
            let t = levels.join("/");
            MqttStr::try_from(if t.is_empty() { "t".to_owned() } else { t }).unwrap()
        })
        .boxed()
}

/// A topic filter (§4.7.1): `+` as whole levels, `#` only as the whole last level.
fn plain_filter() -> BoxedStrategy<String> {
    (
        vec(prop_oneof![3 => level(), 1 => Just("+".to_owned())], 0..4),
        any::<bool>(),
    )
        .prop_map(|(levels, hash)| {
            let mut f = levels.join("/");
            if hash {
                if levels.is_empty() {
                    f = "#".to_owned();
                } else {
                    f.push_str("/#");
                }
            }
            if f.is_empty() { "f".to_owned() } else { f }
        })
        .boxed()
}

/// A topic filter for `protocol`; on MQTT 5 sometimes a shared subscription (§4.8.2).
pub fn topic_filter(protocol: Protocol) -> BoxedStrategy<MqttStr> {
    let plain = plain_filter();
    if protocol == V5 {
        let share_name = vec(any::<char>(), 1..5).prop_map(|cs| {
            cs.into_iter()
                .map(|c| match c {
                    '/' | '+' | '#' | '\0' => 'g',
                    c => c,
                })
                .collect::<String>()
        });
        prop_oneof![
            6 => plain,
            1 => (share_name, plain_filter()).prop_map(|(n, f)| format!("$share/{n}/{f}")),
        ]
        .prop_map(|f| MqttStr::try_from(f).unwrap())
        .boxed()
    } else {
        plain.prop_map(|f| MqttStr::try_from(f).unwrap()).boxed()
    }
}

/// Every property, each present or not, with values in their valid ranges. Restricted to a
/// packet's allowed set by [`properties`].
fn any_properties() -> BoxedStrategy<Properties> {
    let a = (
        option::of(any::<bool>()),
        option::of(any::<u32>()),
        option::of(string(8)),
        option::of(topic_name()),
        option::of(bytes(8)),
        vec(1..=268_435_455u32, 0..3),
        option::of(any::<u32>()),
        option::of(string(8)),
        option::of(any::<u16>()),
        option::of(string(8)),
        option::of(bytes(8)),
        option::of(any::<bool>()),
    );
    let b = (
        option::of(any::<u32>()),
        option::of(any::<bool>()),
        option::of(string(8)),
        option::of(string(8)),
        option::of(string(8)),
        option::of((1..=u16::MAX).prop_map(|v| NonZeroU16::new(v).unwrap())),
        option::of(any::<u16>()),
        option::of((1..=u16::MAX).prop_map(|v| NonZeroU16::new(v).unwrap())),
        option::of(select(vec![QoS::AtMostOnce, QoS::AtLeastOnce])),
        option::of(any::<bool>()),
        vec((string(6), string(6)), 0..3),
        option::of((1..=u32::MAX).prop_map(|v| NonZeroU32::new(v).unwrap())),
    );
    let c = (
        option::of(any::<bool>()),
        option::of(any::<bool>()),
        option::of(any::<bool>()),
    );
    (a, b, c)
        .prop_map(|(a, b, c)| {
            Properties::from(PropertyFields {
                payload_format_indicator: a.0,
                message_expiry_interval: a.1,
                content_type: a.2,
                response_topic: a.3,
                correlation_data: a.4,
                subscription_identifiers: a.5,
                session_expiry_interval: a.6,
                assigned_client_identifier: a.7,
                server_keep_alive: a.8,
                authentication_method: a.9,
                authentication_data: a.10,
                request_problem_information: a.11,
                will_delay_interval: b.0,
                request_response_information: b.1,
                response_information: b.2,
                server_reference: b.3,
                reason_string: b.4,
                receive_maximum: b.5,
                topic_alias_maximum: b.6,
                topic_alias: b.7,
                maximum_qos: b.8,
                retain_available: b.9,
                user_properties: b.10,
                maximum_packet_size: b.11,
                wildcard_subscription_available: c.0,
                subscription_identifier_available: c.1,
                shared_subscription_available: c.2,
            })
        })
        .boxed()
}

/// Clears property `pid`.
fn clear(p: &mut Properties, pid: u8) {
    match pid {
        id::PAYLOAD_FORMAT_INDICATOR => p.payload_format_indicator = None,
        id::MESSAGE_EXPIRY_INTERVAL => p.message_expiry_interval = None,
        id::CONTENT_TYPE => p.content_type = None,
        id::RESPONSE_TOPIC => p.response_topic = None,
        id::CORRELATION_DATA => p.correlation_data = None,
        id::SUBSCRIPTION_IDENTIFIER => p.subscription_identifiers.clear(),
        id::SESSION_EXPIRY_INTERVAL => p.session_expiry_interval = None,
        id::ASSIGNED_CLIENT_IDENTIFIER => p.assigned_client_identifier = None,
        id::SERVER_KEEP_ALIVE => p.server_keep_alive = None,
        id::AUTHENTICATION_METHOD => p.authentication_method = None,
        id::AUTHENTICATION_DATA => p.authentication_data = None,
        id::REQUEST_PROBLEM_INFORMATION => p.request_problem_information = None,
        id::WILL_DELAY_INTERVAL => p.will_delay_interval = None,
        id::REQUEST_RESPONSE_INFORMATION => p.request_response_information = None,
        id::RESPONSE_INFORMATION => p.response_information = None,
        id::SERVER_REFERENCE => p.server_reference = None,
        id::REASON_STRING => p.reason_string = None,
        id::RECEIVE_MAXIMUM => p.receive_maximum = None,
        id::TOPIC_ALIAS_MAXIMUM => p.topic_alias_maximum = None,
        id::TOPIC_ALIAS => p.topic_alias = None,
        id::MAXIMUM_QOS => p.maximum_qos = None,
        id::RETAIN_AVAILABLE => p.retain_available = None,
        id::USER_PROPERTY => p.user_properties.clear(),
        id::MAXIMUM_PACKET_SIZE => p.maximum_packet_size = None,
        id::WILDCARD_SUBSCRIPTION_AVAILABLE => p.wildcard_subscription_available = None,
        id::SUBSCRIPTION_IDENTIFIER_AVAILABLE => p.subscription_identifier_available = None,
        id::SHARED_SUBSCRIPTION_AVAILABLE => p.shared_subscription_available = None,
        _ => {}
    }
}

/// Keeps only what `ctx` allows, and the rules between properties.
pub fn restrict(mut p: Properties, ctx: PropertyContext) -> Properties {
    let allowed = ctx.allowed();
    for pid in 0..64u8 {
        if allowed & (1u64 << pid) == 0 {
            clear(&mut p, pid);
        }
    }
    // §3.8.2.1.2: one subscription identifier in SUBSCRIBE.
    if ctx == PropertyContext::Subscribe {
        p.subscription_identifiers.truncate(1);
    }
    // §3.1.2.11.10: no authentication data without an authentication method.
    if ctx == PropertyContext::Connect && p.authentication_method.is_none() {
        p.authentication_data = None;
    }
    p
}

/// Valid properties for `ctx` on MQTT 5; none on 3.1.1.
pub fn properties(ctx: PropertyContext, protocol: Protocol) -> BoxedStrategy<Properties> {
    if protocol == V5 {
        any_properties().prop_map(move |p| restrict(p, ctx)).boxed()
    } else {
        Just(Properties::default()).boxed()
    }
}

/// The reason codes `kind` may carry on `protocol`.
pub fn reason_codes(kind: PacketType, protocol: Protocol) -> Vec<ReasonCode> {
    (0..=255u8)
        .map(ReasonCode)
        .filter(|c| c.allowed_in(kind, protocol))
        .collect()
}

pub fn reason(kind: PacketType, protocol: Protocol) -> BoxedStrategy<ReasonCode> {
    select(reason_codes(kind, protocol)).boxed()
}

pub fn will(protocol: Protocol) -> BoxedStrategy<Will> {
    (
        topic_name(),
        bytes(16),
        qos(),
        any::<bool>(),
        properties(PropertyContext::Will, protocol),
    )
        .prop_map(|(topic, payload, qos, retain, properties)| Will {
            topic,
            payload,
            qos,
            retain,
            properties,
        })
        .boxed()
}

pub fn connect(protocol: Protocol) -> BoxedStrategy<Packet> {
    (
        any::<bool>(),
        any::<u16>(),
        properties(PropertyContext::Connect, protocol),
        string(23),
        option::of(will(protocol)),
        option::of(string(12)),
        option::of(bytes(12)),
    )
        .prop_map(
            move |(clean_start, keep_alive, properties, client_id, will, username, password)| {
                // MQTT-3.1.2-22 (3.1.1 only): no password without a user name.
                let password = if protocol == V3 && username.is_none() {
                    None
                } else {
                    password
                };
                Packet::Connect(Box::new(Connect {
                    protocol,
                    clean_start,
                    keep_alive,
                    properties,
                    client_id,
                    will,
                    username,
                    password,
                }))
            },
        )
        .boxed()
}

pub fn connack(protocol: Protocol) -> BoxedStrategy<Packet> {
    (
        any::<bool>(),
        reason(PacketType::ConnAck, protocol),
        properties(PropertyContext::ConnAck, protocol),
    )
        .prop_map(|(session_present, code, properties)| {
            Packet::ConnAck(ConnAck {
                // MQTT-3.2.2-4 / MQTT-3.2.2-6: session present only with success.
                session_present: session_present && code.0 == 0,
                code,
                properties,
            })
        })
        .boxed()
}

pub fn publish_struct(protocol: Protocol) -> BoxedStrategy<Publish> {
    let topic = if protocol == V5 {
        prop_oneof![5 => topic_name(), 1 => Just(MqttStr::empty())].boxed()
    } else {
        topic_name()
    };
    (
        qos(),
        any::<bool>(),
        any::<bool>(),
        topic,
        packet_id(),
        properties(PropertyContext::Publish, protocol),
        bytes(64),
    )
        .prop_map(|(qos, dup, retain, topic, id, mut properties, payload)| {
            // §3.3.2.3.4: an empty topic name needs a topic alias.
            if topic.is_empty() && properties.topic_alias.is_none() {
                properties.topic_alias = NonZeroU16::new(1);
            }
            let qos0 = qos == QoS::AtMostOnce;
            Publish {
                dup: dup && !qos0,
                qos,
                retain,
                topic,
                packet_id: if qos0 { None } else { Some(id) },
                properties,
                payload,
            }
        })
        .boxed()
}

pub fn publish(protocol: Protocol) -> BoxedStrategy<Packet> {
    publish_struct(protocol).prop_map(Packet::Publish).boxed()
}

pub fn ack(kind: PacketType, protocol: Protocol) -> BoxedStrategy<Packet> {
    let ctx = match kind {
        PacketType::PubAck => PropertyContext::PubAck,
        PacketType::PubRec => PropertyContext::PubRec,
        PacketType::PubRel => PropertyContext::PubRel,
        _ => PropertyContext::PubComp,
    };
    (
        packet_id(),
        reason(kind, protocol),
        properties(ctx, protocol),
    )
        .prop_map(move |(packet_id, reason, properties)| {
            let a = Ack {
                packet_id,
                reason,
                properties,
            };
            match kind {
                PacketType::PubAck => Packet::PubAck(a),
                PacketType::PubRec => Packet::PubRec(a),
                PacketType::PubRel => Packet::PubRel(a),
                _ => Packet::PubComp(a),
            }
        })
        .boxed()
}

pub fn subscription(protocol: Protocol) -> BoxedStrategy<Subscription> {
    (
        topic_filter(protocol),
        qos(),
        any::<bool>(),
        any::<bool>(),
        select(vec![
            RetainHandling::SendAtSubscribe,
            RetainHandling::SendIfNew,
            RetainHandling::DoNotSend,
        ]),
    )
        .prop_map(move |(filter, qos, no_local, rap, rh)| {
            let options = if protocol == V5 {
                SubscriptionOptions {
                    qos,
                    // MQTT-3.8.3-4: no No Local on a shared subscription.
                    no_local: no_local && !filter.as_str().starts_with("$share/"),
                    retain_as_published: rap,
                    retain_handling: rh,
                }
            } else {
                SubscriptionOptions {
                    qos,
                    ..SubscriptionOptions::default()
                }
            };
            Subscription { filter, options }
        })
        .boxed()
}

pub fn subscribe(protocol: Protocol) -> BoxedStrategy<Packet> {
    (
        packet_id(),
        properties(PropertyContext::Subscribe, protocol),
        vec(subscription(protocol), 1..4),
    )
        .prop_map(|(packet_id, properties, subscriptions)| {
            Packet::Subscribe(Subscribe {
                packet_id,
                properties,
                subscriptions,
            })
        })
        .boxed()
}

pub fn suback(protocol: Protocol) -> BoxedStrategy<Packet> {
    (
        packet_id(),
        properties(PropertyContext::SubAck, protocol),
        vec(reason(PacketType::SubAck, protocol), 1..5),
    )
        .prop_map(|(packet_id, properties, codes)| {
            Packet::SubAck(SubAck {
                packet_id,
                properties,
                codes,
            })
        })
        .boxed()
}

pub fn unsubscribe(protocol: Protocol) -> BoxedStrategy<Packet> {
    (
        packet_id(),
        properties(PropertyContext::Unsubscribe, protocol),
        vec(topic_filter(protocol), 1..4),
    )
        .prop_map(|(packet_id, properties, filters)| {
            Packet::Unsubscribe(Unsubscribe {
                packet_id,
                properties,
                filters,
            })
        })
        .boxed()
}

pub fn unsuback(protocol: Protocol) -> BoxedStrategy<Packet> {
    if protocol == V3 {
        // MQTT 3.1.1 §3.11: the packet identifier only.
        return packet_id()
            .prop_map(|packet_id| {
                Packet::UnsubAck(UnsubAck {
                    packet_id,
                    properties: Properties::default(),
                    codes: vec![],
                })
            })
            .boxed();
    }
    (
        packet_id(),
        properties(PropertyContext::UnsubAck, protocol),
        vec(reason(PacketType::UnsubAck, protocol), 1..5),
    )
        .prop_map(|(packet_id, properties, codes)| {
            Packet::UnsubAck(UnsubAck {
                packet_id,
                properties,
                codes,
            })
        })
        .boxed()
}

pub fn disconnect(protocol: Protocol) -> BoxedStrategy<Packet> {
    if protocol == V3 {
        return Just(Packet::Disconnect(Disconnect::default())).boxed();
    }
    (
        reason(PacketType::Disconnect, protocol),
        properties(PropertyContext::Disconnect, protocol),
    )
        .prop_map(|(reason, properties)| Packet::Disconnect(Disconnect { reason, properties }))
        .boxed()
}

pub fn auth() -> BoxedStrategy<Packet> {
    (
        reason(PacketType::Auth, V5),
        properties(PropertyContext::Auth, V5),
    )
        .prop_map(|(reason, properties)| Packet::Auth(Auth { reason, properties }))
        .boxed()
}

/// Any valid packet of `protocol`, every kind (AUTH on MQTT 5 only).
pub fn packet(protocol: Protocol) -> BoxedStrategy<Packet> {
    let common = prop_oneof![
        1 => connect(protocol),
        1 => connack(protocol),
        3 => publish(protocol),
        1 => ack(PacketType::PubAck, protocol),
        1 => ack(PacketType::PubRec, protocol),
        1 => ack(PacketType::PubRel, protocol),
        1 => ack(PacketType::PubComp, protocol),
        1 => subscribe(protocol),
        1 => suback(protocol),
        1 => unsubscribe(protocol),
        1 => unsuback(protocol),
        1 => Just(Packet::PingReq),
        1 => Just(Packet::PingResp),
        1 => disconnect(protocol),
    ];
    if protocol == V5 {
        prop_oneof![14 => common, 1 => auth()].boxed()
    } else {
        common.boxed()
    }
}
