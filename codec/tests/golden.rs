//! Golden byte vectors for every control packet of MQTT 3.1.1 (OASIS Standard, 29 October
//! 2014) and MQTT 5.0 (OASIS Standard, 7 March 2019), written out by hand from the rules of
//! the specifications. The section of the specification that each vector follows is named in
//! a comment beside it.
//!
//! Every vector is checked both ways: the struct encodes to exactly these bytes, and these
//! bytes decode (with `decode` and with `decode_bytes`) to exactly the struct, consuming the
//! whole buffer.
//!
//! The specifications do not fix the order of properties inside a property block; this codec
//! writes them in ascending identifier order, so the vectors list them that way.
//! `properties_in_any_order_decode_the_same` checks that the decoder accepts any order.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::num::{NonZeroU16, NonZeroU32};

use bytes::{Bytes, BytesMut};
use spillway_codec::{
    Ack, Auth, ConnAck, Connect, DecodeOptions, Decoded, Disconnect, EncodeOptions, MqttStr,
    Packet, PacketId, Properties, PropertyFields, Protocol, Publish, QoS, ReasonCode,
    RetainHandling, SubAck, Subscribe, Subscription, SubscriptionOptions, UnsubAck, Unsubscribe,
    Will, decode, decode_bytes, varint,
};

const V3: Protocol = Protocol::V311;
const V5: Protocol = Protocol::V5;

fn s(v: &str) -> MqttStr {
    MqttStr::from_str(v).unwrap()
}

fn pid(n: u16) -> PacketId {
    NonZeroU16::new(n).unwrap()
}

fn b(v: &[u8]) -> Bytes {
    Bytes::copy_from_slice(v)
}

/// `bytes` decodes (from a `BytesMut` and from a `Bytes`) to exactly `packet`, and nothing is
/// left in the buffer.
fn decodes_to(protocol: Protocol, bytes: &[u8], packet: &Packet) {
    let opts = DecodeOptions::new(protocol);
    let mut src = BytesMut::from(bytes);
    let got = decode(&mut src, &opts).unwrap();
    assert_eq!(got, Decoded::Packet(packet.clone()), "decode {bytes:02x?}");
    assert!(src.is_empty(), "decode left {} bytes", src.len());

    let mut src = Bytes::copy_from_slice(bytes);
    let got = decode_bytes(&mut src, &opts).unwrap();
    assert_eq!(
        got,
        Decoded::Packet(packet.clone()),
        "decode_bytes {bytes:02x?}"
    );
    assert!(src.is_empty(), "decode_bytes left {} bytes", src.len());
}

/// Both directions: `packet` encodes to `bytes` and `bytes` decodes to `packet`.
fn golden(protocol: Protocol, packet: Packet, bytes: &[u8]) {
    let mut out = BytesMut::new();
    let n = packet
        .encode(&mut out, &EncodeOptions::new(protocol))
        .unwrap();
    assert_eq!(&out[..], bytes, "encode {packet:?}");
    assert_eq!(n, bytes.len(), "encode returns the packet size");

    // Encoding appends: what was in the buffer before stays.
    let mut out = BytesMut::from(&b"prefix"[..]);
    packet
        .encode(&mut out, &EncodeOptions::new(protocol))
        .unwrap();
    assert_eq!(&out[..6], b"prefix");
    assert_eq!(&out[6..], bytes);

    decodes_to(protocol, bytes, &packet);
}

/// Concatenates byte groups (each group is one field, written out in the test).
fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

// ---------------------------------------------------------------------------------------------
// CONNECT
// ---------------------------------------------------------------------------------------------

#[test]
fn connect_v311_with_will_username_password() {
    let packet = Packet::Connect(Box::new(Connect {
        protocol: V3,
        clean_start: true,
        keep_alive: 60,
        properties: Properties::default(),
        client_id: s("spill"),
        will: Some(Will {
            topic: s("w/t"),
            payload: b(b"bye"),
            qos: QoS::AtLeastOnce,
            retain: true,
            properties: Properties::default(),
        }),
        username: Some(s("user")),
        password: Some(b(b"pw")),
    }));
    let bytes = cat(&[
        // MQTT 3.1.1 §3.1.1: type 1, flags 0; remaining length 37 = 10 (variable header) + 27
        // (payload).
        &[0x10, 37],
        // §3.1.2.1 protocol name "MQTT" as a UTF-8 string; §3.1.2.2 protocol level 4.
        &[0x00, 0x04, b'M', b'Q', b'T', b'T', 0x04],
        // §3.1.2.3 connect flags: user name (0x80) | password (0x40) | will retain (0x20) |
        // will QoS 1 (0x08) | will flag (0x04) | clean session (0x02); reserved bit 0 is 0.
        &[0xEE],
        // §3.1.2.10 keep alive 60 s, big-endian.
        &[0x00, 0x3C],
        // §3.1.3.1 client identifier "spill".
        &[0x00, 0x05, b's', b'p', b'i', b'l', b'l'],
        // §3.1.3.2 will topic "w/t"; §3.1.3.3 will message (two-byte length + bytes) "bye".
        &[0x00, 0x03, b'w', b'/', b't'],
        &[0x00, 0x03, b'b', b'y', b'e'],
        // §3.1.3.4 user name "user"; §3.1.3.5 password "pw" (binary data).
        &[0x00, 0x04, b'u', b's', b'e', b'r'],
        &[0x00, 0x02, b'p', b'w'],
    ]);
    golden(V3, packet, &bytes);
}

#[test]
fn connect_v311_minimal() {
    let packet = Packet::Connect(Box::new(Connect {
        protocol: V3,
        clean_start: true,
        keep_alive: 0,
        properties: Properties::default(),
        client_id: s(""),
        will: None,
        username: None,
        password: None,
    }));
    let bytes = cat(&[
        // MQTT 3.1.1 §3.1.1: remaining length 12 = 10 + a zero-length client id (2).
        &[0x10, 12],
        // §3.1.2.1, §3.1.2.2: "MQTT", level 4.
        &[0x00, 0x04, b'M', b'Q', b'T', b'T', 0x04],
        // §3.1.2.3: clean session (0x02) only; a zero-byte client id requires it
        // (MQTT-3.1.3-7).
        &[0x02],
        // §3.1.2.10: keep alive 0 (off).
        &[0x00, 0x00],
        // §3.1.3.1: a zero-byte client identifier is allowed.
        &[0x00, 0x00],
    ]);
    golden(V3, packet, &bytes);
}

#[test]
fn connect_v5_with_every_connect_and_will_property() {
    let props = Properties::from(PropertyFields {
        session_expiry_interval: Some(3600),
        authentication_method: Some(s("SCRAM")),
        authentication_data: Some(b(&[1, 2, 3])),
        request_problem_information: Some(false),
        request_response_information: Some(true),
        receive_maximum: NonZeroU16::new(20),
        topic_alias_maximum: Some(10),
        user_properties: vec![(s("k"), s("v"))],
        maximum_packet_size: NonZeroU32::new(1024),
        ..PropertyFields::default()
    });

    let will_props = Properties::from(PropertyFields {
        payload_format_indicator: Some(true),
        message_expiry_interval: Some(60),
        content_type: Some(s("text/plain")),
        response_topic: Some(s("r/t")),
        correlation_data: Some(b(&[0xAB, 0xCD])),
        will_delay_interval: Some(5),
        ..PropertyFields::default()
    });

    let packet = Packet::Connect(Box::new(Connect {
        protocol: V5,
        clean_start: true,
        keep_alive: 30,
        properties: props,
        client_id: s("c1"),
        will: Some(Will {
            topic: s("w"),
            payload: b(&[0x00, 0xFF]),
            qos: QoS::ExactlyOnce,
            retain: false,
            properties: will_props,
        }),
        username: Some(s("u")),
        password: Some(b(b"pw")),
    }));
    let bytes = cat(&[
        // MQTT 5 §3.1.1: type 1, flags 0; remaining length 107 = 52 (variable header) + 55
        // (payload), one Variable Byte Integer byte.
        &[0x10, 107],
        // §3.1.2.1 "MQTT"; §3.1.2.2 protocol version 5.
        &[0x00, 0x04, b'M', b'Q', b'T', b'T', 0x05],
        // §3.1.2.3 flags: user name 0x80 | password 0x40 | will QoS 2 (0x10) | will flag 0x04 |
        // clean start 0x02.
        &[0xD6],
        // §3.1.2.10 keep alive 30.
        &[0x00, 0x1E],
        // §3.1.2.11.1 property length 41.
        &[41],
        // §3.1.2.11.2 session expiry interval (0x11), four-byte integer 3600.
        &[0x11, 0x00, 0x00, 0x0E, 0x10],
        // §3.1.2.11.9 authentication method (0x15) "SCRAM".
        &[0x15, 0x00, 0x05, b'S', b'C', b'R', b'A', b'M'],
        // §3.1.2.11.10 authentication data (0x16), binary 01 02 03.
        &[0x16, 0x00, 0x03, 0x01, 0x02, 0x03],
        // §3.1.2.11.7 request problem information (0x17) 0.
        &[0x17, 0x00],
        // §3.1.2.11.6 request response information (0x19) 1.
        &[0x19, 0x01],
        // §3.1.2.11.3 receive maximum (0x21), two-byte integer 20.
        &[0x21, 0x00, 0x14],
        // §3.1.2.11.5 topic alias maximum (0x22) 10.
        &[0x22, 0x00, 0x0A],
        // §3.1.2.11.8 user property (0x26), a UTF-8 string pair ("k", "v").
        &[0x26, 0x00, 0x01, b'k', 0x00, 0x01, b'v'],
        // §3.1.2.11.4 maximum packet size (0x27), four-byte integer 1024.
        &[0x27, 0x00, 0x00, 0x04, 0x00],
        // §3.1.3.1 client identifier "c1".
        &[0x00, 0x02, b'c', b'1'],
        // §3.1.3.2.1 will property length 36.
        &[36],
        // §3.1.3.2.3 payload format indicator (0x01) 1: UTF-8.
        &[0x01, 0x01],
        // §3.1.3.2.4 message expiry interval (0x02) 60.
        &[0x02, 0x00, 0x00, 0x00, 0x3C],
        // §3.1.3.2.5 content type (0x03) "text/plain".
        &[0x03, 0x00, 0x0A],
        b"text/plain",
        // §3.1.3.2.6 response topic (0x08) "r/t".
        &[0x08, 0x00, 0x03, b'r', b'/', b't'],
        // §3.1.3.2.7 correlation data (0x09) AB CD.
        &[0x09, 0x00, 0x02, 0xAB, 0xCD],
        // §3.1.3.2.2 will delay interval (0x18) 5.
        &[0x18, 0x00, 0x00, 0x00, 0x05],
        // §3.1.3.3 will topic "w"; §3.1.3.4 will payload (binary) 00 FF.
        &[0x00, 0x01, b'w'],
        &[0x00, 0x02, 0x00, 0xFF],
        // §3.1.3.5 user name "u"; §3.1.3.6 password "pw".
        &[0x00, 0x01, b'u'],
        &[0x00, 0x02, b'p', b'w'],
    ]);
    golden(V5, packet, &bytes);
}

#[test]
fn connect_v5_password_without_user_name() {
    // MQTT 5 §3.1.2.9 drops the 3.1.1 rule MQTT-3.1.2-22: a password may come without a user
    // name.
    let mut c = Connect::new(V5, s("a"));
    c.keep_alive = 0;
    c.password = Some(b(b"p"));
    let bytes = cat(&[
        // §3.1.1: remaining length 17 = 11 + 3 + 3.
        &[0x10, 17],
        // §3.1.2.1-2: "MQTT", version 5.
        &[0x00, 0x04, b'M', b'Q', b'T', b'T', 0x05],
        // §3.1.2.3: password 0x40 | clean start 0x02.
        &[0x42],
        // §3.1.2.10 keep alive 0; §3.1.2.11.1 property length 0.
        &[0x00, 0x00, 0x00],
        // §3.1.3.1 client id "a"; §3.1.3.6 password "p".
        &[0x00, 0x01, b'a'],
        &[0x00, 0x01, b'p'],
    ]);
    golden(V5, Packet::Connect(Box::new(c)), &bytes);
}

// ---------------------------------------------------------------------------------------------
// CONNACK
// ---------------------------------------------------------------------------------------------

#[test]
fn connack_v311() {
    // MQTT 3.1.1 §3.2.1: type 2, remaining length 2; §3.2.2.2 session present 1; §3.2.2.3
    // return code 0 (accepted).
    golden(
        V3,
        Packet::ConnAck(ConnAck::new(true, ReasonCode(0))),
        &[0x20, 0x02, 0x01, 0x00],
    );
    // §3.2.2.3 table 3.1: 0x05 "not authorized"; session present must be 0 (MQTT-3.2.2-4).
    golden(
        V3,
        Packet::ConnAck(ConnAck::new(false, ReasonCode(0x05))),
        &[0x20, 0x02, 0x00, 0x05],
    );
    // 0x01 unacceptable protocol version.
    golden(
        V3,
        Packet::ConnAck(ConnAck::new(false, ReasonCode(0x01))),
        &[0x20, 0x02, 0x00, 0x01],
    );
}

#[test]
fn connack_v5_with_server_limits() {
    let p = Properties::from(PropertyFields {
        session_expiry_interval: Some(120),
        assigned_client_identifier: Some(s("auto-1")),
        server_keep_alive: Some(45),
        response_information: Some(s("resp")),
        reason_string: Some(s("ok")),
        receive_maximum: NonZeroU16::new(100),
        topic_alias_maximum: Some(16),
        maximum_qos: Some(QoS::AtLeastOnce),
        retain_available: Some(false),
        user_properties: vec![(s("a"), s("b"))],
        maximum_packet_size: NonZeroU32::new(65536),
        wildcard_subscription_available: Some(true),
        subscription_identifier_available: Some(false),
        shared_subscription_available: Some(true),
        ..PropertyFields::default()
    });
    let packet = Packet::ConnAck(ConnAck {
        session_present: true,
        code: ReasonCode::SUCCESS,
        properties: p,
    });
    let bytes = cat(&[
        // MQTT 5 §3.2.1: type 2, remaining length 60 = 2 + 1 (property length) + 57.
        &[0x20, 60],
        // §3.2.2.1.1 session present; §3.2.2.2 reason code 0x00 success.
        &[0x01, 0x00],
        // §3.2.2.3.1 property length 57.
        &[57],
        // §3.2.2.3.2 session expiry interval (0x11) 120.
        &[0x11, 0x00, 0x00, 0x00, 0x78],
        // §3.2.2.3.7 assigned client identifier (0x12) "auto-1".
        &[0x12, 0x00, 0x06, b'a', b'u', b't', b'o', b'-', b'1'],
        // §3.2.2.3.14 server keep alive (0x13) 45.
        &[0x13, 0x00, 0x2D],
        // §3.2.2.3.15 response information (0x1A) "resp".
        &[0x1A, 0x00, 0x04, b'r', b'e', b's', b'p'],
        // §3.2.2.3.9 reason string (0x1F) "ok".
        &[0x1F, 0x00, 0x02, b'o', b'k'],
        // §3.2.2.3.3 receive maximum (0x21) 100.
        &[0x21, 0x00, 0x64],
        // §3.2.2.3.8 topic alias maximum (0x22) 16.
        &[0x22, 0x00, 0x10],
        // §3.2.2.3.4 maximum QoS (0x24) 1.
        &[0x24, 0x01],
        // §3.2.2.3.5 retain available (0x25) 0.
        &[0x25, 0x00],
        // §3.2.2.3.10 user property (0x26) ("a", "b").
        &[0x26, 0x00, 0x01, b'a', 0x00, 0x01, b'b'],
        // §3.2.2.3.6 maximum packet size (0x27) 65536.
        &[0x27, 0x00, 0x01, 0x00, 0x00],
        // §3.2.2.3.11 wildcard subscription available (0x28) 1.
        &[0x28, 0x01],
        // §3.2.2.3.12 subscription identifiers available (0x29) 0.
        &[0x29, 0x00],
        // §3.2.2.3.13 shared subscription available (0x2A) 1.
        &[0x2A, 0x01],
    ]);
    golden(V5, packet, &bytes);
}

#[test]
fn connack_v5_refusals() {
    let p = Properties::from(PropertyFields {
        reason_string: Some(s("denied")),
        ..PropertyFields::default()
    });
    let packet = Packet::ConnAck(ConnAck {
        session_present: false,
        code: ReasonCode::NOT_AUTHORIZED,
        properties: p,
    });
    let bytes = cat(&[
        // MQTT 5 §3.2.1: remaining length 12 = 2 + 1 + 9.
        &[0x20, 12],
        // §3.2.2.1.1 session present 0 (MQTT-3.2.2-6); §3.2.2.2 0x87 not authorized.
        &[0x00, 0x87],
        // §3.2.2.3.1 property length 9; §3.2.2.3.9 reason string "denied".
        &[9, 0x1F, 0x00, 0x06],
        b"denied",
    ]);
    golden(V5, packet, &bytes);

    // §3.2.2.3.16: server reference (0x1C) with 0x9C "use another server".
    let p = Properties::from(PropertyFields {
        server_reference: Some(s("other")),
        ..PropertyFields::default()
    });
    let packet = Packet::ConnAck(ConnAck {
        session_present: false,
        code: ReasonCode::USE_ANOTHER_SERVER,
        properties: p,
    });
    let bytes = cat(&[&[0x20, 11, 0x00, 0x9C, 8, 0x1C, 0x00, 0x05], b"other"]);
    golden(V5, packet, &bytes);

    // §3.2.2.3.1: with no properties the property length is still there, as 0.
    golden(
        V5,
        Packet::ConnAck(ConnAck::new(false, ReasonCode::SERVER_BUSY)),
        &[0x20, 0x03, 0x00, 0x89, 0x00],
    );
}

// ---------------------------------------------------------------------------------------------
// PUBLISH
// ---------------------------------------------------------------------------------------------

fn publish(
    qos: QoS,
    dup: bool,
    retain: bool,
    topic: &str,
    id: Option<u16>,
    payload: &[u8],
) -> Publish {
    Publish {
        dup,
        qos,
        retain,
        topic: s(topic),
        packet_id: id.map(pid),
        properties: Properties::default(),
        payload: b(payload),
    }
}

#[test]
fn publish_v311_qos_0_1_2() {
    // MQTT 3.1.1 §3.3.1: type 3, DUP 0, QoS 0, RETAIN 0; remaining length 7; §3.3.2.1 topic
    // "a/b"; no packet identifier at QoS 0 (§3.3.2.2); §3.3.3 payload "hi".
    golden(
        V3,
        Packet::Publish(publish(QoS::AtMostOnce, false, false, "a/b", None, b"hi")),
        &[0x30, 0x07, 0x00, 0x03, b'a', b'/', b'b', b'h', b'i'],
    );
    // §3.3.1.2 QoS 1 (bits 2-1 = 01) and §3.3.1.3 RETAIN: 0x33; §3.3.2.2 packet id 10.
    golden(
        V3,
        Packet::Publish(publish(
            QoS::AtLeastOnce,
            false,
            true,
            "a/b",
            Some(10),
            b"hi",
        )),
        &[
            0x33, 0x09, 0x00, 0x03, b'a', b'/', b'b', 0x00, 0x0A, b'h', b'i',
        ],
    );
    // §3.3.1.1 DUP (0x08) with QoS 2 (0x04): 0x3C; packet id 0x1234; empty payload.
    golden(
        V3,
        Packet::Publish(publish(
            QoS::ExactlyOnce,
            true,
            false,
            "a/b",
            Some(0x1234),
            b"",
        )),
        &[0x3C, 0x07, 0x00, 0x03, b'a', b'/', b'b', 0x12, 0x34],
    );
    // §1.5.3: a topic of multi-byte UTF-8 characters; the length counts bytes (5), not chars.
    golden(
        V3,
        Packet::Publish(publish(QoS::AtMostOnce, false, false, "é/ü", None, b"")),
        &[0x30, 0x07, 0x00, 0x05, 0xC3, 0xA9, b'/', 0xC3, 0xBC],
    );
}

#[test]
fn publish_v311_two_byte_remaining_length() {
    // §2.2.3: remaining length 203 = 3 (topic "t") + 200 (payload) is 0xCB 0x01.
    let payload = vec![0x5A; 200];
    let mut bytes = vec![0x30, 0xCB, 0x01, 0x00, 0x01, b't'];
    bytes.extend_from_slice(&payload);
    golden(
        V3,
        Packet::Publish(publish(QoS::AtMostOnce, false, false, "t", None, &payload)),
        &bytes,
    );
}

#[test]
fn publish_v5_without_properties() {
    // MQTT 5 §3.3.2.3.1: the property length is always there; 0 here. Remaining length 8.
    golden(
        V5,
        Packet::Publish(publish(QoS::AtMostOnce, false, false, "a/b", None, b"hi")),
        &[0x30, 0x08, 0x00, 0x03, b'a', b'/', b'b', 0x00, b'h', b'i'],
    );
}

#[test]
fn publish_v5_with_every_property() {
    let p = Properties::from(PropertyFields {
        payload_format_indicator: Some(true),
        message_expiry_interval: Some(10),
        content_type: Some(s("json")),
        response_topic: Some(s("re/p")),
        correlation_data: Some(b(&[0x01, 0x02])),
        subscription_identifiers: vec![1, 300],
        topic_alias: NonZeroU16::new(5),
        user_properties: vec![(s("k"), s("v1")), (s("k"), s("v2"))],
        ..PropertyFields::default()
    });
    let packet = Packet::Publish(Publish {
        dup: true,
        qos: QoS::AtLeastOnce,
        retain: false,
        topic: s("t"),
        packet_id: Some(pid(1)),
        properties: p,
        payload: b(b"{}"),
    });
    let bytes = cat(&[
        // MQTT 5 §3.3.1: DUP 0x08 | QoS 1 0x02 = 0x3A; remaining length 58 = topic 3 + packet
        // id 2 + property length 1 + properties 50 + payload 2.
        &[0x3A, 58],
        // §3.3.2.1 topic name "t"; §3.3.2.2 packet identifier 1.
        &[0x00, 0x01, b't', 0x00, 0x01],
        // §3.3.2.3.1 property length 50.
        &[50],
        // §3.3.2.3.2 payload format indicator (0x01) 1.
        &[0x01, 0x01],
        // §3.3.2.3.3 message expiry interval (0x02) 10.
        &[0x02, 0x00, 0x00, 0x00, 0x0A],
        // §3.3.2.3.9 content type (0x03) "json".
        &[0x03, 0x00, 0x04, b'j', b's', b'o', b'n'],
        // §3.3.2.3.5 response topic (0x08) "re/p".
        &[0x08, 0x00, 0x04, b'r', b'e', b'/', b'p'],
        // §3.3.2.3.6 correlation data (0x09) 01 02.
        &[0x09, 0x00, 0x02, 0x01, 0x02],
        // §3.3.2.3.8 subscription identifier (0x0B), Variable Byte Integers 1 and 300
        // (0xAC 0x02); several may appear, in order (§3.3.4).
        &[0x0B, 0x01],
        &[0x0B, 0xAC, 0x02],
        // §3.3.2.3.4 topic alias (0x23) 5.
        &[0x23, 0x00, 0x05],
        // §3.3.2.3.7 user properties (0x26), order kept, same name twice allowed.
        &[0x26, 0x00, 0x01, b'k', 0x00, 0x02, b'v', b'1'],
        &[0x26, 0x00, 0x01, b'k', 0x00, 0x02, b'v', b'2'],
        // §3.3.3 payload.
        b"{}",
    ]);
    golden(V5, packet, &bytes);
}

#[test]
fn publish_v5_topic_alias_with_empty_topic() {
    let p = Properties::from(PropertyFields {
        topic_alias: NonZeroU16::new(5),
        ..PropertyFields::default()
    });
    let packet = Packet::Publish(Publish {
        dup: false,
        qos: QoS::ExactlyOnce,
        retain: false,
        topic: s(""),
        packet_id: Some(pid(7)),
        properties: p,
        payload: b(b"x"),
    });
    // MQTT 5 §3.3.2.3.4: a zero-length topic name with a topic alias uses the alias' topic.
    // §3.3.1 QoS 2 = 0x34; remaining length 9 = 2 + 2 + 1 + 3 + 1.
    let bytes = cat(&[
        &[0x34, 0x09],
        // §3.3.2.1 zero-length topic name.
        &[0x00, 0x00],
        // §3.3.2.2 packet id 7.
        &[0x00, 0x07],
        // §3.3.2.3.1 property length 3; §3.3.2.3.4 topic alias (0x23) 5.
        &[0x03, 0x23, 0x00, 0x05],
        // §3.3.3 payload.
        b"x",
    ]);
    golden(V5, packet, &bytes);
}

#[test]
fn publish_header_and_payload_are_the_whole_packet() {
    // `Publish::encode_header` writes everything but the payload and hands the payload back.
    let p = publish(QoS::AtLeastOnce, false, true, "a/b", Some(10), b"hi");
    let mut head = BytesMut::new();
    let payload = p.encode_header(&mut head, &EncodeOptions::new(V3)).unwrap();
    assert_eq!(
        &head[..],
        &[0x33, 0x09, 0x00, 0x03, b'a', b'/', b'b', 0x00, 0x0A]
    );
    assert_eq!(&payload[..], b"hi");
}

// ---------------------------------------------------------------------------------------------
// PUBACK, PUBREC, PUBREL, PUBCOMP
// ---------------------------------------------------------------------------------------------

fn ack(id: u16, code: u8) -> Ack {
    Ack {
        packet_id: pid(id),
        reason: ReasonCode(code),
        properties: Properties::default(),
    }
}

#[test]
fn acks_v311() {
    // MQTT 3.1.1 §3.4.1 PUBACK 0x40, §3.5.1 PUBREC 0x50, §3.6.1 PUBREL 0x62 (flags 0010),
    // §3.7.1 PUBCOMP 0x70; remaining length 2: the packet identifier.
    golden(V3, Packet::PubAck(ack(1, 0)), &[0x40, 0x02, 0x00, 0x01]);
    golden(
        V3,
        Packet::PubRec(ack(0x0102, 0)),
        &[0x50, 0x02, 0x01, 0x02],
    );
    golden(
        V3,
        Packet::PubRel(ack(0xFFFF, 0)),
        &[0x62, 0x02, 0xFF, 0xFF],
    );
    golden(V3, Packet::PubComp(ack(3, 0)), &[0x70, 0x02, 0x00, 0x03]);
}

#[test]
fn acks_v5_short_forms() {
    // MQTT 5 §3.4.2.1: reason code 0x00 and no properties: remaining length 2.
    golden(V5, Packet::PubAck(ack(1, 0)), &[0x40, 0x02, 0x00, 0x01]);
    golden(V5, Packet::PubRec(ack(1, 0)), &[0x50, 0x02, 0x00, 0x01]);
    golden(V5, Packet::PubRel(ack(1, 0)), &[0x62, 0x02, 0x00, 0x01]);
    golden(V5, Packet::PubComp(ack(1, 0)), &[0x70, 0x02, 0x00, 0x01]);
    // §3.4.2.2.1: no properties: the property length is left out, remaining length 3.
    // PUBACK 0x10 no matching subscribers (§3.4.2.1 table 3-4).
    golden(
        V5,
        Packet::PubAck(ack(1, 0x10)),
        &[0x40, 0x03, 0x00, 0x01, 0x10],
    );
    // §3.5.2.1 PUBREC 0x80 unspecified error.
    golden(
        V5,
        Packet::PubRec(ack(2, 0x80)),
        &[0x50, 0x03, 0x00, 0x02, 0x80],
    );
    // §3.6.2.1 PUBREL 0x92 packet identifier not found.
    golden(
        V5,
        Packet::PubRel(ack(3, 0x92)),
        &[0x62, 0x03, 0x00, 0x03, 0x92],
    );
    // §3.7.2.1 PUBCOMP 0x92.
    golden(
        V5,
        Packet::PubComp(ack(4, 0x92)),
        &[0x70, 0x03, 0x00, 0x04, 0x92],
    );
}

#[test]
fn acks_v5_long_form_with_reason_string() {
    let mut a = ack(5, 0x87);
    a.properties.reason_string = Some(s("nope"));
    a.properties.user_properties = vec![(s("a"), s("b"))];
    let bytes = cat(&[
        // MQTT 5 §3.4.1: remaining length 18 = 2 + 1 + 1 + 14.
        &[0x40, 18, 0x00, 0x05],
        // §3.4.2.1 reason code 0x87 not authorized; §3.4.2.2 property length 14.
        &[0x87, 14],
        // §3.4.2.2.2 reason string (0x1F) "nope"; §3.4.2.2.3 user property ("a", "b").
        &[0x1F, 0x00, 0x04, b'n', b'o', b'p', b'e'],
        &[0x26, 0x00, 0x01, b'a', 0x00, 0x01, b'b'],
    ]);
    golden(V5, Packet::PubAck(a.clone()), &bytes);
    // §3.5: PUBREC has the same layout with type 5.
    let mut rec = bytes.clone();
    rec[0] = 0x50;
    golden(V5, Packet::PubRec(a), &rec);

    // §3.6.2: PUBREL 0x92 with reason string "why": remaining length 10.
    let mut rel = ack(6, 0x92);
    rel.properties.reason_string = Some(s("why"));
    golden(
        V5,
        Packet::PubRel(rel.clone()),
        &[
            0x62, 10, 0x00, 0x06, 0x92, 6, 0x1F, 0x00, 0x03, b'w', b'h', b'y',
        ],
    );
    // §3.7.2: PUBCOMP, same layout.
    golden(
        V5,
        Packet::PubComp(rel),
        &[
            0x70, 10, 0x00, 0x06, 0x92, 6, 0x1F, 0x00, 0x03, b'w', b'h', b'y',
        ],
    );
}

#[test]
fn acks_v5_other_valid_encodings_decode() {
    // MQTT 5 §3.4.2.2.1: a sender may also send the reason code and an empty property block
    // (remaining length 4); it means the same as the short form.
    decodes_to(
        V5,
        &[0x40, 0x04, 0x00, 0x01, 0x00, 0x00],
        &Packet::PubAck(ack(1, 0)),
    );
    decodes_to(
        V5,
        &[0x62, 0x04, 0x00, 0x01, 0x92, 0x00],
        &Packet::PubRel(ack(1, 0x92)),
    );
    // Remaining length 3 with a success code.
    decodes_to(
        V5,
        &[0x70, 0x03, 0x00, 0x01, 0x00],
        &Packet::PubComp(ack(1, 0)),
    );
}

// ---------------------------------------------------------------------------------------------
// SUBSCRIBE, SUBACK
// ---------------------------------------------------------------------------------------------

fn sub(filter: &str, options: SubscriptionOptions) -> Subscription {
    Subscription {
        filter: s(filter),
        options,
    }
}

fn qos_only(qos: QoS) -> SubscriptionOptions {
    SubscriptionOptions {
        qos,
        ..SubscriptionOptions::default()
    }
}

#[test]
fn subscribe_v311() {
    let packet = Packet::Subscribe(Subscribe {
        packet_id: pid(10),
        properties: Properties::default(),
        subscriptions: vec![
            sub("a/b", qos_only(QoS::AtLeastOnce)),
            sub("#", qos_only(QoS::ExactlyOnce)),
            sub("s/+/x", qos_only(QoS::AtMostOnce)),
        ],
    });
    let bytes = cat(&[
        // MQTT 3.1.1 §3.8.1: type 8 with flags 0010 = 0x82; remaining length 20.
        &[0x82, 20],
        // §3.8.2 packet identifier 10.
        &[0x00, 0x0A],
        // §3.8.3: topic filter + requested QoS byte, per subscription.
        &[0x00, 0x03, b'a', b'/', b'b', 0x01],
        &[0x00, 0x01, b'#', 0x02],
        &[0x00, 0x05, b's', b'/', b'+', b'/', b'x', 0x00],
    ]);
    golden(V3, packet, &bytes);
}

#[test]
fn subscribe_v5_with_options_and_subscription_identifier() {
    let p = Properties::from(PropertyFields {
        subscription_identifiers: vec![128],
        user_properties: vec![(s("s"), s("1"))],
        ..PropertyFields::default()
    });
    let packet = Packet::Subscribe(Subscribe {
        packet_id: pid(11),
        properties: p,
        subscriptions: vec![
            sub(
                "a/#",
                SubscriptionOptions {
                    qos: QoS::AtLeastOnce,
                    no_local: true,
                    retain_as_published: true,
                    retain_handling: RetainHandling::DoNotSend,
                },
            ),
            sub(
                "+/b",
                SubscriptionOptions {
                    qos: QoS::AtMostOnce,
                    no_local: false,
                    retain_as_published: false,
                    retain_handling: RetainHandling::SendIfNew,
                },
            ),
            sub("c", qos_only(QoS::ExactlyOnce)),
        ],
    });
    let bytes = cat(&[
        // MQTT 5 §3.8.1: 0x82; remaining length 29 = 2 + 1 + 10 + 16.
        &[0x82, 29],
        // §3.8.2 packet identifier 11.
        &[0x00, 0x0B],
        // §3.8.2.1.1 property length 10; §3.8.2.1.2 subscription identifier (0x0B) 128 as a
        // Variable Byte Integer 0x80 0x01; §3.8.2.1.3 user property ("s", "1").
        &[10, 0x0B, 0x80, 0x01],
        &[0x26, 0x00, 0x01, b's', 0x00, 0x01, b'1'],
        // §3.8.3.1 options: QoS 1 (bits 0-1) | No Local (bit 2) | Retain As Published (bit 3)
        // | Retain Handling 2 (bits 4-5) = 0x2D.
        &[0x00, 0x03, b'a', b'/', b'#', 0x2D],
        // QoS 0, Retain Handling 1 = 0x10.
        &[0x00, 0x03, b'+', b'/', b'b', 0x10],
        // QoS 2 = 0x02.
        &[0x00, 0x01, b'c', 0x02],
    ]);
    golden(V5, packet, &bytes);
}

#[test]
fn suback_v311() {
    // MQTT 3.1.1 §3.9.1 type 9 = 0x90, remaining length 6; §3.9.2 packet id 10; §3.9.3 return
    // codes: 0x00, 0x01, 0x02 (granted QoS) and 0x80 (failure).
    let packet = Packet::SubAck(SubAck {
        packet_id: pid(10),
        properties: Properties::default(),
        codes: vec![
            ReasonCode(0x00),
            ReasonCode(0x01),
            ReasonCode(0x02),
            ReasonCode(0x80),
        ],
    });
    golden(
        V3,
        packet,
        &[0x90, 0x06, 0x00, 0x0A, 0x00, 0x01, 0x02, 0x80],
    );
}

#[test]
fn suback_v5() {
    let p = Properties::from(PropertyFields {
        reason_string: Some(s("ok")),
        ..PropertyFields::default()
    });
    let packet = Packet::SubAck(SubAck {
        packet_id: pid(11),
        properties: p,
        codes: vec![
            ReasonCode::GRANTED_QOS_1,
            ReasonCode::GRANTED_QOS_0,
            ReasonCode::WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED,
            ReasonCode::NOT_AUTHORIZED,
        ],
    });
    let bytes = cat(&[
        // MQTT 5 §3.9.1: remaining length 12 = 2 + 1 + 5 + 4.
        &[0x90, 12],
        // §3.9.2 packet id 11.
        &[0x00, 0x0B],
        // §3.9.2.1 property length 5; §3.9.2.1.2 reason string "ok".
        &[5, 0x1F, 0x00, 0x02, b'o', b'k'],
        // §3.9.3 reason codes (table 3-8): granted QoS 1, granted QoS 0, 0xA2 wildcard
        // subscriptions not supported, 0x87 not authorized.
        &[0x01, 0x00, 0xA2, 0x87],
    ]);
    golden(V5, packet, &bytes);
}

// ---------------------------------------------------------------------------------------------
// UNSUBSCRIBE, UNSUBACK
// ---------------------------------------------------------------------------------------------

#[test]
fn unsubscribe_v311() {
    let packet = Packet::Unsubscribe(Unsubscribe {
        packet_id: pid(12),
        properties: Properties::default(),
        filters: vec![s("a/b"), s("#")],
    });
    // MQTT 3.1.1 §3.10.1: type 10 with flags 0010 = 0xA2, remaining length 10; §3.10.2 packet
    // id 12; §3.10.3 topic filters.
    golden(
        V3,
        packet,
        &[
            0xA2, 10, 0x00, 0x0C, 0x00, 0x03, b'a', b'/', b'b', 0x00, 0x01, b'#',
        ],
    );
}

#[test]
fn unsubscribe_v5() {
    let p = Properties::from(PropertyFields {
        user_properties: vec![(s("u"), s("v"))],
        ..PropertyFields::default()
    });
    let packet = Packet::Unsubscribe(Unsubscribe {
        packet_id: pid(13),
        properties: p,
        filters: vec![s("a/+")],
    });
    // MQTT 5 §3.10.1: remaining length 15 = 2 + 1 + 7 + 5; §3.10.2.1 property length 7, user
    // property ("u", "v"); §3.10.3 topic filter "a/+".
    golden(
        V5,
        packet,
        &[
            0xA2, 15, 0x00, 0x0D, 7, 0x26, 0x00, 0x01, b'u', 0x00, 0x01, b'v', 0x00, 0x03, b'a',
            b'/', b'+',
        ],
    );
}

#[test]
fn unsuback_v311() {
    // MQTT 3.1.1 §3.11: 0xB0, remaining length 2, the packet id only; no payload.
    let packet = Packet::UnsubAck(UnsubAck {
        packet_id: pid(12),
        properties: Properties::default(),
        codes: vec![],
    });
    golden(V3, packet, &[0xB0, 0x02, 0x00, 0x0C]);
}

#[test]
fn unsuback_v5() {
    // MQTT 5 §3.11.2: packet id, property length 0; §3.11.3 one reason code per filter:
    // 0x00 success, 0x11 no subscription existed, 0x8F topic filter invalid.
    let packet = Packet::UnsubAck(UnsubAck {
        packet_id: pid(13),
        properties: Properties::default(),
        codes: vec![
            ReasonCode::SUCCESS,
            ReasonCode::NO_SUBSCRIPTION_EXISTED,
            ReasonCode::TOPIC_FILTER_INVALID,
        ],
    });
    golden(
        V5,
        packet,
        &[0xB0, 0x06, 0x00, 0x0D, 0x00, 0x00, 0x11, 0x8F],
    );

    // §3.11.2.1.2 reason string (0x1F) "no": remaining length 2 + 1 + 5 + 1 = 9.
    let p = Properties::from(PropertyFields {
        reason_string: Some(s("no")),
        ..PropertyFields::default()
    });
    let packet = Packet::UnsubAck(UnsubAck {
        packet_id: pid(14),
        properties: p,
        codes: vec![ReasonCode::NOT_AUTHORIZED],
    });
    golden(
        V5,
        packet,
        &[0xB0, 9, 0x00, 0x0E, 5, 0x1F, 0x00, 0x02, b'n', b'o', 0x87],
    );
}

// ---------------------------------------------------------------------------------------------
// PINGREQ, PINGRESP, DISCONNECT, AUTH
// ---------------------------------------------------------------------------------------------

#[test]
fn pings_both_versions() {
    for proto in [V3, V5] {
        // MQTT 3.1.1 §3.12 / MQTT 5 §3.12: 0xC0, remaining length 0.
        golden(proto, Packet::PingReq, &[0xC0, 0x00]);
        // §3.13: 0xD0, remaining length 0.
        golden(proto, Packet::PingResp, &[0xD0, 0x00]);
    }
}

#[test]
fn disconnect_v311() {
    // MQTT 3.1.1 §3.14: 0xE0, remaining length 0, nothing else.
    golden(V3, Packet::Disconnect(Disconnect::default()), &[0xE0, 0x00]);
}

#[test]
fn disconnect_v5() {
    // MQTT 5 §3.14.2.1: remaining length 0 means reason 0x00 normal disconnection.
    golden(V5, Packet::Disconnect(Disconnect::default()), &[0xE0, 0x00]);
    // §3.14.2.2.1: remaining length 1: the reason code only, 0x04 disconnect with will.
    golden(
        V5,
        Packet::Disconnect(Disconnect {
            reason: ReasonCode::DISCONNECT_WITH_WILL_MESSAGE,
            properties: Properties::default(),
        }),
        &[0xE0, 0x01, 0x04],
    );
    // §3.14.2.2: reason 0x9C use another server, with session expiry interval (0x11) 0,
    // server reference (0x1C) "srv2" and reason string (0x1F) "bye": property length 18,
    // remaining length 20.
    let p = Properties::from(PropertyFields {
        session_expiry_interval: Some(0),
        server_reference: Some(s("srv2")),
        reason_string: Some(s("bye")),
        ..PropertyFields::default()
    });
    let bytes = cat(&[
        &[0xE0, 20, 0x9C, 18],
        &[0x11, 0x00, 0x00, 0x00, 0x00],
        &[0x1C, 0x00, 0x04, b's', b'r', b'v', b'2'],
        &[0x1F, 0x00, 0x03, b'b', b'y', b'e'],
    ]);
    golden(
        V5,
        Packet::Disconnect(Disconnect {
            reason: ReasonCode::USE_ANOTHER_SERVER,
            properties: p,
        }),
        &bytes,
    );
    // §3.14.2.2.1: reason code and an empty property block also mean normal disconnection.
    decodes_to(
        V5,
        &[0xE0, 0x02, 0x00, 0x00],
        &Packet::Disconnect(Disconnect::default()),
    );
}

#[test]
fn auth_v5() {
    // MQTT 5 §3.15.2.1: reason 0x00 and no properties may be sent as remaining length 0.
    golden(V5, Packet::Auth(Auth::default()), &[0xF0, 0x00]);
    // §3.15.1 type 15 = 0xF0; §3.15.2.1 reason 0x18 continue authentication; §3.15.2.2
    // property length 15: authentication method (0x15) "SCRAM", authentication data (0x16)
    // DE AD BE EF. Remaining length 17.
    let p = Properties::from(PropertyFields {
        authentication_method: Some(s("SCRAM")),
        authentication_data: Some(b(&[0xDE, 0xAD, 0xBE, 0xEF])),
        ..PropertyFields::default()
    });
    let bytes = cat(&[
        &[0xF0, 17, 0x18, 15],
        &[0x15, 0x00, 0x05, b'S', b'C', b'R', b'A', b'M'],
        &[0x16, 0x00, 0x04, 0xDE, 0xAD, 0xBE, 0xEF],
    ]);
    golden(
        V5,
        Packet::Auth(Auth {
            reason: ReasonCode::CONTINUE_AUTHENTICATION,
            properties: p,
        }),
        &bytes,
    );
    // 0x19 re-authenticate with the method and a reason string (0x1F) "r": 17 - 7 + 4 = 14.
    let p = Properties::from(PropertyFields {
        authentication_method: Some(s("SCRAM")),
        reason_string: Some(s("r")),
        ..PropertyFields::default()
    });
    let bytes = cat(&[
        &[0xF0, 14, 0x19, 12],
        &[0x15, 0x00, 0x05, b'S', b'C', b'R', b'A', b'M'],
        &[0x1F, 0x00, 0x01, b'r'],
    ]);
    golden(
        V5,
        Packet::Auth(Auth {
            reason: ReasonCode::RE_AUTHENTICATE,
            properties: p,
        }),
        &bytes,
    );
}

// ---------------------------------------------------------------------------------------------
// Property order, Variable Byte Integers
// ---------------------------------------------------------------------------------------------

#[test]
fn properties_in_any_order_decode_the_same() {
    // MQTT 5 §2.2.2.2 does not fix an order. The PUBACK of `acks_v5_long_form_with_reason_string`
    // with the user property before the reason string.
    let mut a = ack(5, 0x87);
    a.properties.reason_string = Some(s("nope"));
    a.properties.user_properties = vec![(s("a"), s("b"))];
    let bytes = cat(&[
        &[0x40, 18, 0x00, 0x05, 0x87, 14],
        &[0x26, 0x00, 0x01, b'a', 0x00, 0x01, b'b'],
        &[0x1F, 0x00, 0x04, b'n', b'o', b'p', b'e'],
    ]);
    decodes_to(V5, &bytes, &Packet::PubAck(a));

    // A PUBLISH with topic alias first and payload format last.
    let p = Properties::from(PropertyFields {
        topic_alias: NonZeroU16::new(2),
        payload_format_indicator: Some(false),
        ..PropertyFields::default()
    });
    let packet = Packet::Publish(Publish {
        properties: p,
        ..publish(QoS::AtMostOnce, false, false, "t", None, b"")
    });
    decodes_to(
        V5,
        &[0x30, 9, 0x00, 0x01, b't', 5, 0x23, 0x00, 0x02, 0x01, 0x00],
        &packet,
    );
}

/// MQTT 5 §1.5.5 (and 3.1.1 §2.2.3, table 2.4): the bounds of each encoded length.
const VARINT_TABLE: &[(u32, &[u8])] = &[
    (0, &[0x00]),
    (1, &[0x01]),
    (127, &[0x7F]),
    (128, &[0x80, 0x01]),
    (16_383, &[0xFF, 0x7F]),
    (16_384, &[0x80, 0x80, 0x01]),
    (2_097_151, &[0xFF, 0xFF, 0x7F]),
    (2_097_152, &[0x80, 0x80, 0x80, 0x01]),
    (268_435_455, &[0xFF, 0xFF, 0xFF, 0x7F]),
];

#[test]
fn variable_byte_integer_table() {
    for &(value, bytes) in VARINT_TABLE {
        let mut out = BytesMut::new();
        varint::put(&mut out, value);
        assert_eq!(&out[..], bytes, "encode {value}");
        assert_eq!(varint::len(value), bytes.len());
        assert_eq!(varint::read(bytes, "t"), Ok(Some((value, bytes.len()))));
        // Followed by other bytes: only the integer is read.
        let mut longer = bytes.to_vec();
        longer.extend_from_slice(&[0x55, 0xAA]);
        assert_eq!(varint::read(&longer, "t"), Ok(Some((value, bytes.len()))));
        // Cut short: not an error, not a value.
        for cut in 0..bytes.len() {
            assert_eq!(
                varint::read(&bytes[..cut], "t"),
                Ok(None),
                "{value} cut {cut}"
            );
        }
    }
}

#[test]
fn variable_byte_integer_as_remaining_length() {
    // §2.2.3 / §1.5.5: the remaining length of a real packet at each boundary that fits in
    // memory comfortably. PUBLISH QoS 0, topic "t" (3 bytes), payload of `rl - 3` bytes.
    for &(rl, len_bytes) in &VARINT_TABLE[2..8] {
        let payload = vec![0u8; rl as usize - 3];
        let p = Packet::Publish(publish(QoS::AtMostOnce, false, false, "t", None, &payload));
        let mut out = BytesMut::new();
        let n = p.encode(&mut out, &EncodeOptions::new(V3)).unwrap();
        assert_eq!(out[0], 0x30);
        assert_eq!(
            &out[1..1 + len_bytes.len()],
            len_bytes,
            "remaining length {rl}"
        );
        assert_eq!(&out[1 + len_bytes.len()..][..3], &[0x00, 0x01, b't']);
        assert_eq!(n, 1 + len_bytes.len() + rl as usize);
        let mut src = out;
        assert_eq!(
            decode(&mut src, &DecodeOptions::new(V3)).unwrap(),
            Decoded::Packet(p)
        );
    }
}

#[test]
fn variable_byte_integer_as_subscription_identifier() {
    // MQTT 5 §3.3.2.3.8: the subscription identifier is a Variable Byte Integer, 1 to
    // 268,435,455. PUBLISH QoS 0, topic "t", one identifier, empty payload.
    for &(id, enc) in &VARINT_TABLE[1..] {
        let p = Properties::from(PropertyFields {
            subscription_identifiers: vec![id],
            ..PropertyFields::default()
        });
        let packet = Packet::Publish(Publish {
            properties: p,
            ..publish(QoS::AtMostOnce, false, false, "t", None, b"")
        });
        let props_len = 1 + enc.len() as u8;
        let mut bytes = vec![0x30, 3 + 1 + props_len, 0x00, 0x01, b't', props_len, 0x0B];
        bytes.extend_from_slice(enc);
        golden(V5, packet, &bytes);
    }
}
