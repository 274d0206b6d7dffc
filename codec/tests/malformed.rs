//! One test per decoding rule: bytes that break the rule, and the exact `DecodeError` the
//! decoder must answer (the comment names the rule of MQTT 3.1.1 / MQTT 5.0). Also the
//! incremental contract: a partial packet is `Incomplete`, never an error, and consumes
//! nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::{Bytes, BytesMut};
use spillway_codec::{
    DecodeError, DecodeOptions, Decoded, EncodeOptions, MqttStr, Packet, PacketType, Protocol,
    Publish, QoS, ReasonCode, decode, decode_bytes,
};

const V3: Protocol = Protocol::V311;
const V5: Protocol = Protocol::V5;

/// Decodes `bytes` (both entry points) and returns the error they agree on.
fn err_with(opts: DecodeOptions, bytes: &[u8]) -> DecodeError {
    let mut src = BytesMut::from(bytes);
    let e = match decode(&mut src, &opts) {
        Err(e) => e,
        Ok(d) => panic!("{bytes:02x?} decoded to {d:?}"),
    };
    let mut src = Bytes::copy_from_slice(bytes);
    let e2 = decode_bytes(&mut src, &opts).expect_err("decode_bytes accepted what decode refused");
    assert_eq!(e, e2, "decode and decode_bytes disagree on {bytes:02x?}");
    e
}

fn err(protocol: Protocol, bytes: &[u8]) -> DecodeError {
    err_with(DecodeOptions::new(protocol), bytes)
}

/// The packet `bytes` decode to (the whole buffer).
fn ok(protocol: Protocol, bytes: &[u8]) -> Packet {
    let mut src = BytesMut::from(bytes);
    match decode(&mut src, &DecodeOptions::new(protocol)) {
        Ok(Decoded::Packet(p)) => {
            assert!(src.is_empty(), "{} bytes left", src.len());
            p
        }
        other => panic!("{bytes:02x?}: {other:?}"),
    }
}

/// Builds a packet: first byte, remaining length (one byte, < 128), body.
fn pkt(first: u8, body: &[u8]) -> Vec<u8> {
    assert!(body.len() < 128);
    let mut v = vec![first, body.len() as u8];
    v.extend_from_slice(body);
    v
}

/// A UTF-8 string field: two-byte length and the bytes.
fn st(v: &[u8]) -> Vec<u8> {
    let mut out = (v.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(v);
    out
}

/// A v5 PUBLISH QoS 0 to "t" with the given property block content (length prefixed here).
fn publish_v5_props(props: &[u8]) -> Vec<u8> {
    let mut body = st(b"t");
    body.push(props.len() as u8);
    body.extend_from_slice(props);
    pkt(0x30, &body)
}

/// A v5 CONNECT (clean start, keep alive 0, client id "c") with the given property block.
fn connect_v5_props(props: &[u8]) -> Vec<u8> {
    let mut body = st(b"MQTT");
    body.extend_from_slice(&[5, 0x02, 0, 0, props.len() as u8]);
    body.extend_from_slice(props);
    body.extend_from_slice(&st(b"c"));
    pkt(0x10, &body)
}

/// A CONNECT with protocol name, level, flags and the rest of the body as given.
fn connect_raw(name: &[u8], level: u8, flags: u8, rest: &[u8]) -> Vec<u8> {
    let mut body = st(name);
    body.extend_from_slice(&[level, flags, 0, 60]);
    body.extend_from_slice(rest);
    pkt(0x10, &body)
}

/// A v5 PUBACK for id 1 with reason 0 and the given property block.
fn puback_v5_props(props: &[u8]) -> Vec<u8> {
    let mut body = vec![0, 1, 0x00, props.len() as u8];
    body.extend_from_slice(props);
    pkt(0x40, &body)
}

/// A v5 SUBSCRIBE (id 1) with a property block and subscriptions (filter, options).
fn subscribe_v5(props: &[u8], subs: &[(&[u8], u8)]) -> Vec<u8> {
    let mut body = vec![0, 1, props.len() as u8];
    body.extend_from_slice(props);
    for (f, o) in subs {
        body.extend_from_slice(&st(f));
        body.push(*o);
    }
    pkt(0x82, &body)
}

fn subscribe_v3(subs: &[(&[u8], u8)]) -> Vec<u8> {
    let mut body = vec![0, 1];
    for (f, o) in subs {
        body.extend_from_slice(&st(f));
        body.push(*o);
    }
    pkt(0x82, &body)
}

// ---------------------------------------------------------------------------------------------
// Fixed header
// ---------------------------------------------------------------------------------------------

#[test]
fn packet_type_0_is_reserved() {
    // MQTT 3.1.1 §2.2.1 table 2.1 / MQTT 5 §2.1.2 table 2-1: type 0 is reserved.
    for proto in [V3, V5] {
        assert_eq!(err(proto, &[0x00, 0x00]), DecodeError::InvalidPacketType(0));
    }
}

#[test]
fn packet_type_0_is_refused_from_the_first_byte() {
    // The type is known from the first byte: no need to wait for the remaining length.
    assert_eq!(err(V5, &[0x00]), DecodeError::InvalidPacketType(0));
}

#[test]
fn auth_does_not_exist_in_v311() {
    // MQTT 3.1.1 §2.2.1: type 15 is reserved; AUTH is MQTT 5 only (§3.15).
    assert_eq!(err(V3, &[0xF0, 0x00]), DecodeError::InvalidPacketType(15));
    assert!(matches!(ok(V5, &[0xF0, 0x00]), Packet::Auth(_)));
}

#[test]
fn reserved_fixed_header_flags() {
    // MQTT 3.1.1 §2.2.2 table 2.2 / MQTT 5 §2.1.3 table 2-2: PUBREL, SUBSCRIBE and UNSUBSCRIBE
    // carry 0010, every other packet but PUBLISH 0000 (MQTT-2.2.2-1/2).
    let cases: &[(u8, PacketType, u8)] = &[
        (0x60, PacketType::PubRel, 0b0000),
        (0x61, PacketType::PubRel, 0b0001),
        (0x80, PacketType::Subscribe, 0b0000),
        (0x8A, PacketType::Subscribe, 0b1010),
        (0xA0, PacketType::Unsubscribe, 0b0000),
        (0x41, PacketType::PubAck, 0b0001),
        (0x42, PacketType::PubAck, 0b0010),
        (0x52, PacketType::PubRec, 0b0010),
        (0x72, PacketType::PubComp, 0b0010),
        (0x12, PacketType::Connect, 0b0010),
        (0x28, PacketType::ConnAck, 0b1000),
        (0x92, PacketType::SubAck, 0b0010),
        (0xB2, PacketType::UnsubAck, 0b0010),
        (0xC2, PacketType::PingReq, 0b0010),
        (0xDF, PacketType::PingResp, 0b1111),
        (0xE1, PacketType::Disconnect, 0b0001),
    ];
    for proto in [V3, V5] {
        for &(first, packet, flags) in cases {
            // A plausible body, so the flags are the only thing wrong.
            let bytes = [first, 0x02, 0x00, 0x01];
            assert_eq!(
                err(proto, &bytes),
                DecodeError::ReservedFlags { packet, flags },
                "{first:#04x} on {proto}"
            );
            // Refused as soon as the first byte is there.
            assert_eq!(
                err(proto, &bytes[..1]),
                DecodeError::ReservedFlags { packet, flags }
            );
        }
    }
    assert_eq!(
        err(V5, &[0xF1, 0x00]),
        DecodeError::ReservedFlags {
            packet: PacketType::Auth,
            flags: 1
        }
    );
}

#[test]
fn remaining_length_of_five_bytes() {
    // MQTT 3.1.1 §2.2.3 / MQTT 5 §1.5.5: at most four bytes; a fourth byte with the
    // continuation bit is malformed, without waiting for a fifth byte.
    for proto in [V3, V5] {
        assert_eq!(
            err(proto, &[0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x01]),
            DecodeError::MalformedRemainingLength
        );
        assert_eq!(
            err(proto, &[0x30, 0x80, 0x80, 0x80, 0x80]),
            DecodeError::MalformedRemainingLength
        );
    }
}

#[test]
fn non_minimal_variable_byte_integer() {
    // MQTT 5 §1.5.5: "The encoded value MUST use the minimum number of bytes necessary to
    // represent the value" (MQTT-1.5.5-1). Remaining length 0 as 0x80 0x00:
    assert_eq!(
        err(V5, &[0xC0, 0x80, 0x00]),
        DecodeError::NonMinimalVarInt {
            field: "remaining length"
        }
    );
    // Remaining length 5 as 0x85 0x80 0x00.
    assert_eq!(
        err(V5, &[0xC0, 0x85, 0x80, 0x00]),
        DecodeError::NonMinimalVarInt {
            field: "remaining length"
        }
    );
    // A property length of 0 as 0x80 0x00 (PUBACK with reason code 0).
    assert_eq!(
        err(V5, &pkt(0x40, &[0, 1, 0x00, 0x80, 0x00])),
        DecodeError::NonMinimalVarInt {
            field: "property length"
        }
    );
    // A subscription identifier of 1 as 0x81 0x00.
    assert_eq!(
        err(V5, &publish_v5_props(&[0x0B, 0x81, 0x00])),
        DecodeError::NonMinimalVarInt {
            field: "subscription identifier"
        }
    );
}

#[test]
fn variable_byte_integer_of_five_bytes_in_the_body() {
    // MQTT 5 §1.5.5: every Variable Byte Integer has at most four bytes, not only the
    // remaining length. A subscription identifier and a property length of five bytes:
    assert_eq!(
        err(V5, &publish_v5_props(&[0x0B, 0xFF, 0xFF, 0xFF, 0xFF, 0x01])),
        DecodeError::VarIntTooLong {
            field: "subscription identifier"
        }
    );
    assert_eq!(
        err(V5, &pkt(0x40, &[0, 1, 0x00, 0x80, 0x80, 0x80, 0x80, 0x01])),
        DecodeError::VarIntTooLong {
            field: "property length"
        }
    );
    // A property identifier that does not end within four bytes.
    assert_eq!(
        err(V5, &puback_v5_props(&[0x80, 0x80, 0x80, 0x80, 0x01])),
        DecodeError::VarIntTooLong {
            field: "property identifier"
        }
    );
}

#[test]
fn packet_larger_than_maximum_packet_size_is_refused_from_its_header() {
    // MQTT 5 §3.1.2.11.4 / §3.2.2.3.6: a packet larger than the Maximum Packet Size is a
    // protocol error; the size (fixed header included) is known from the fixed header alone.
    let opts = DecodeOptions {
        protocol: V5,
        max_packet_size: 100,
    };
    // Remaining length 200 (0xC8 0x01): 203 bytes in all. Only the header has arrived.
    assert_eq!(
        err_with(opts, &[0x30, 0xC8, 0x01]),
        DecodeError::PacketTooLarge {
            size: 203,
            max: 100
        }
    );
    // Remaining length 98: 100 bytes in all, at the limit: just incomplete.
    let mut src = BytesMut::from(&[0x30, 98, 0x00][..]);
    assert_eq!(
        decode(&mut src, &opts),
        Ok(Decoded::Incomplete { needed: 97 })
    );
    // Remaining length 99: 101 bytes, one too many.
    assert_eq!(
        err_with(opts, &[0x30, 99]),
        DecodeError::PacketTooLarge {
            size: 101,
            max: 100
        }
    );
}

// ---------------------------------------------------------------------------------------------
// PUBLISH
// ---------------------------------------------------------------------------------------------

#[test]
fn publish_qos_3() {
    // MQTT 3.1.1 §3.3.1.2 / MQTT 5 §3.3.1.2: both QoS bits set is malformed (MQTT-3.3.1-4).
    for proto in [V3, V5] {
        let mut body = st(b"a");
        body.extend_from_slice(&[0, 1, 0]);
        assert_eq!(
            err(proto, &pkt(0x36, &body)),
            DecodeError::InvalidQos {
                field: "PUBLISH",
                value: 3
            }
        );
    }
}

#[test]
fn publish_dup_with_qos_0() {
    // §3.3.1.1: "In the case of a QoS 0 PUBLISH, the DUP flag MUST be set to 0"
    // (MQTT-3.3.1-2).
    assert_eq!(err(V3, &pkt(0x38, &st(b"a"))), DecodeError::DupWithQos0);
    let mut body = st(b"a");
    body.push(0);
    assert_eq!(err(V5, &pkt(0x38, &body)), DecodeError::DupWithQos0);
}

#[test]
fn packet_identifier_zero() {
    // MQTT 3.1.1 §2.3.1 / MQTT 5 §2.2.1: packet identifiers are non-zero (MQTT-2.3.1-1).
    for proto in [V3, V5] {
        let mut body = st(b"a");
        body.extend_from_slice(&[0, 0]);
        if proto == V5 {
            body.push(0);
        }
        assert_eq!(
            err(proto, &pkt(0x32, &body)),
            DecodeError::ZeroPacketId {
                packet: PacketType::Publish
            },
            "publish qos 1 on {proto}"
        );
        assert_eq!(
            err(proto, &pkt(0x34, &body)),
            DecodeError::ZeroPacketId {
                packet: PacketType::Publish
            },
            "publish qos 2 on {proto}"
        );
        for (first, packet) in [
            (0x40, PacketType::PubAck),
            (0x50, PacketType::PubRec),
            (0x62, PacketType::PubRel),
            (0x70, PacketType::PubComp),
        ] {
            assert_eq!(
                err(proto, &[first, 2, 0, 0]),
                DecodeError::ZeroPacketId { packet }
            );
        }
        // SUBSCRIBE: packet id 0, (MQTT 5: empty property block), filter "a", options 0.
        let subscribe = if proto == V5 {
            pkt(0x82, &[0, 0, 0, 0, 1, b'a', 0])
        } else {
            pkt(0x82, &[0, 0, 0, 1, b'a', 0])
        };
        assert_eq!(
            err(proto, &subscribe),
            DecodeError::ZeroPacketId {
                packet: PacketType::Subscribe
            }
        );
        assert_eq!(
            err(proto, &[0x90, 3, 0, 0, 0]),
            DecodeError::ZeroPacketId {
                packet: PacketType::SubAck
            }
        );
        assert_eq!(
            err(proto, &[0xB0, 2, 0, 0]),
            DecodeError::ZeroPacketId {
                packet: PacketType::UnsubAck
            }
        );
        assert_eq!(
            err(proto, &[0xA2, 5, 0, 0, 0, 1, b'a']),
            DecodeError::ZeroPacketId {
                packet: PacketType::Unsubscribe
            }
        );
    }
}

#[test]
fn topic_with_invalid_utf8() {
    // MQTT 3.1.1 §1.5.3 / MQTT 5 §1.5.4: strings are well-formed UTF-8 (MQTT-1.5.3-1).
    // 0xC3 0x28: a lead byte followed by a non-continuation byte.
    assert_eq!(
        err(V3, &pkt(0x30, &st(&[0xC3, 0x28]))),
        DecodeError::InvalidUtf8 {
            field: "topic name"
        }
    );
    // 0xC0 0x80: an overlong encoding of U+0000.
    assert_eq!(
        err(V3, &pkt(0x30, &st(&[b'a', 0xC0, 0x80]))),
        DecodeError::InvalidUtf8 {
            field: "topic name"
        }
    );
    // A lone continuation byte, and a string cut in the middle of a character.
    assert_eq!(
        err(V3, &pkt(0x30, &st(&[0x80]))),
        DecodeError::InvalidUtf8 {
            field: "topic name"
        }
    );
    assert_eq!(
        err(V3, &pkt(0x30, &st(&[b'a', 0xE2, 0x82]))),
        DecodeError::InvalidUtf8 {
            field: "topic name"
        }
    );
}

#[test]
fn topic_with_null_character() {
    // §1.5.3 / §1.5.4: "A UTF-8 Encoded String MUST NOT include an encoding of the null
    // character U+0000" (MQTT-1.5.4-2 / MQTT-1.5.3-2).
    for proto in [V3, V5] {
        let mut body = st(b"a\0b");
        if proto == V5 {
            body.push(0);
        }
        assert_eq!(
            err(proto, &pkt(0x30, &body)),
            DecodeError::NullCharacter {
                field: "topic name"
            }
        );
    }
}

#[test]
fn topic_with_surrogate_code_point() {
    // §1.5.4: "the character data MUST NOT include encodings of code points between U+D800
    // and U+DFFF" (MQTT-1.5.4-1). 0xED 0xA0 0x80 is U+D800.
    assert_eq!(
        err(V3, &pkt(0x30, &st(&[0xED, 0xA0, 0x80]))),
        DecodeError::InvalidUtf8 {
            field: "topic name"
        }
    );
    // U+DFFF, the last surrogate.
    assert_eq!(
        err(V3, &pkt(0x30, &st(&[b'x', 0xED, 0xBF, 0xBF]))),
        DecodeError::InvalidUtf8 {
            field: "topic name"
        }
    );
}

#[test]
fn wildcard_in_publish_topic() {
    // §3.3.2.1: "The Topic Name in the PUBLISH packet MUST NOT contain wildcard characters"
    // (MQTT-3.3.2-2).
    for topic in [&b"a/+"[..], b"#", b"a/#", b"+", b"a+b"] {
        let e = err(V3, &pkt(0x30, &st(topic)));
        assert!(matches!(e, DecodeError::InvalidTopicName { .. }), "{e:?}");
        let mut body = st(topic);
        body.push(0);
        let e = err(V5, &pkt(0x30, &body));
        assert!(matches!(e, DecodeError::InvalidTopicName { .. }), "{e:?}");
    }
}

#[test]
fn empty_topic_without_alias() {
    // MQTT 3.1.1 §4.7.3: topic names are at least one character long (MQTT-4.7.3-1).
    let e = err(V3, &pkt(0x30, &st(b"")));
    assert!(matches!(e, DecodeError::InvalidTopicName { .. }), "{e:?}");
    // MQTT 5 §3.3.2.3.4: a zero-length topic name needs a topic alias.
    let e = err(V5, &pkt(0x30, &[0, 0, 0]));
    assert!(matches!(e, DecodeError::InvalidTopicName { .. }), "{e:?}");
    // With an alias it is valid.
    let p = ok(V5, &pkt(0x30, &[0, 0, 3, 0x23, 0, 1]));
    assert!(matches!(p, Packet::Publish(ref p) if p.topic.is_empty()));
}

#[test]
fn publish_truncated_fields() {
    // A QoS 1 PUBLISH whose remaining length ends before the packet identifier.
    assert_eq!(
        err(V3, &pkt(0x32, &st(b"a"))),
        DecodeError::Truncated {
            packet: PacketType::Publish,
            field: "packet identifier"
        }
    );
    // A topic length beyond the remaining length.
    assert_eq!(
        err(V3, &pkt(0x30, &[0, 5, b'a'])),
        DecodeError::Truncated {
            packet: PacketType::Publish,
            field: "topic name"
        }
    );
    // MQTT 5: the property length is missing.
    assert_eq!(
        err(V5, &pkt(0x30, &st(b"a"))),
        DecodeError::Truncated {
            packet: PacketType::Publish,
            field: "property length"
        }
    );
}

// ---------------------------------------------------------------------------------------------
// CONNECT
// ---------------------------------------------------------------------------------------------

#[test]
fn connect_bad_protocol_name() {
    // MQTT 3.1.1 §3.1.2.1 / MQTT 5 §3.1.2.1: the protocol name is "MQTT" (MQTT-3.1.2-1).
    for name in [&b"MQIsdp"[..], b"mqtt", b"MQT", b""] {
        assert_eq!(
            err(V3, &connect_raw(name, 4, 0x02, &st(b"c"))),
            DecodeError::InvalidProtocolName,
            "{name:?}"
        );
    }
}

#[test]
fn connect_protocol_level_3_and_6() {
    // §3.1.2.2: 4 is 3.1.1, 5 is MQTT 5; MQTT 3.1 (level 3) and anything else are refused.
    for level in [0, 3, 6, 0xFF] {
        assert_eq!(
            err(V3, &connect_raw(b"MQTT", level, 0x02, &st(b"c"))),
            DecodeError::UnsupportedProtocolLevel(level)
        );
    }
}

#[test]
fn connect_reserved_flag() {
    // §3.1.2.3: "The Server MUST validate that the reserved flag in the CONNECT packet is set
    // to 0" (MQTT-3.1.2-3).
    assert_eq!(
        err(V3, &connect_raw(b"MQTT", 4, 0x03, &st(b"c"))),
        DecodeError::ReservedConnectFlag
    );
    let mut rest = vec![0];
    rest.extend_from_slice(&st(b"c"));
    assert_eq!(
        err(V5, &connect_raw(b"MQTT", 5, 0x01, &rest)),
        DecodeError::ReservedConnectFlag
    );
}

#[test]
fn connect_will_qos_or_retain_without_will_flag() {
    // MQTT 3.1.1 §3.1.2.6 (MQTT-3.1.2-13), §3.1.2.7 (MQTT-3.1.2-15); MQTT 5 §3.1.2.6
    // (MQTT-3.1.2-11), §3.1.2.7 (MQTT-3.1.2-13).
    for flags in [0x08, 0x10, 0x18, 0x20, 0x22] {
        assert_eq!(
            err(V3, &connect_raw(b"MQTT", 4, flags, &st(b"c"))),
            DecodeError::WillFieldsWithoutWill,
            "{flags:#04x}"
        );
    }
}

#[test]
fn connect_will_qos_3() {
    // §3.1.2.6: will QoS 3 is malformed (MQTT-3.1.2-14 / MQTT-3.1.2-12).
    let mut rest = st(b"c");
    rest.extend_from_slice(&st(b"w"));
    rest.extend_from_slice(&st(b"x"));
    assert_eq!(
        err(V3, &connect_raw(b"MQTT", 4, 0x1C, &rest)),
        DecodeError::InvalidQos {
            field: "will",
            value: 3
        }
    );
}

#[test]
fn connect_will_topic_with_wildcard() {
    // §3.1.3.2 / §3.1.3.3: the will topic is a topic name, so no wildcard.
    let mut rest = st(b"c");
    rest.extend_from_slice(&st(b"w/#"));
    rest.extend_from_slice(&st(b"x"));
    let e = err(V3, &connect_raw(b"MQTT", 4, 0x06, &rest));
    assert!(matches!(e, DecodeError::InvalidTopicName { .. }), "{e:?}");
}

#[test]
fn connect_password_without_user_name() {
    // MQTT 3.1.1 §3.1.2.9: "If the User Name Flag is set to 0, the Password Flag MUST be set
    // to 0" (MQTT-3.1.2-22).
    let mut rest = st(b"c");
    rest.extend_from_slice(&st(b"pw"));
    assert_eq!(
        err(V3, &connect_raw(b"MQTT", 4, 0x42, &rest)),
        DecodeError::PasswordWithoutUsername
    );
    // MQTT 5 §3.1.2.9 allows it.
    let mut rest5 = vec![0];
    rest5.extend_from_slice(&rest);
    match ok(V5, &connect_raw(b"MQTT", 5, 0x42, &rest5)) {
        Packet::Connect(c) => {
            assert_eq!(c.username, None);
            assert_eq!(c.password.as_deref(), Some(&b"pw"[..]));
        }
        p => panic!("{p:?}"),
    }
}

#[test]
fn connect_decodes_whatever_the_connection_protocol() {
    // CONNECT carries its own protocol level (§3.1.2.2): a server reads it before it knows.
    let mut rest = vec![0];
    rest.extend_from_slice(&st(b"c"));
    let v5 = connect_raw(b"MQTT", 5, 0x02, &rest);
    for proto in [V3, V5] {
        match ok(proto, &v5) {
            Packet::Connect(c) => assert_eq!(c.protocol, V5),
            p => panic!("{p:?}"),
        }
    }
}

#[test]
fn connect_missing_payload_fields() {
    // §3.1.3: a flag set means its field is present.
    // User name flag but the payload ends after the client id.
    assert_eq!(
        err(V3, &connect_raw(b"MQTT", 4, 0x82, &st(b"c"))),
        DecodeError::Truncated {
            packet: PacketType::Connect,
            field: "user name"
        }
    );
    // Will flag without a will topic.
    assert_eq!(
        err(V3, &connect_raw(b"MQTT", 4, 0x06, &st(b"c"))),
        DecodeError::Truncated {
            packet: PacketType::Connect,
            field: "will topic"
        }
    );
}

// ---------------------------------------------------------------------------------------------
// CONNACK
// ---------------------------------------------------------------------------------------------

#[test]
fn connack_reserved_flag_bits() {
    // MQTT 3.1.1 §3.2.2.1 / MQTT 5 §3.2.2.1: bits 7-1 of the acknowledge flags are reserved
    // and set to 0.
    for flags in [0x02, 0x80, 0xFE, 0x03] {
        assert_eq!(
            err(V3, &[0x20, 2, flags, 0]),
            DecodeError::InvalidConnAckFlags(flags)
        );
        assert_eq!(
            err(V5, &[0x20, 3, flags, 0, 0]),
            DecodeError::InvalidConnAckFlags(flags)
        );
    }
}

#[test]
fn connack_session_present_with_refusal() {
    // MQTT 3.1.1 §3.2.2.2 (MQTT-3.2.2-4) / MQTT 5 §3.2.2.1.1 (MQTT-3.2.2-6): a non-zero code
    // comes with session present 0.
    assert_eq!(
        err(V3, &[0x20, 2, 0x01, 0x05]),
        DecodeError::InvalidConnAckFlags(0x01)
    );
    assert_eq!(
        err(V5, &[0x20, 3, 0x01, 0x87, 0]),
        DecodeError::InvalidConnAckFlags(0x01)
    );
}

#[test]
fn connack_unknown_return_code() {
    // MQTT 3.1.1 §3.2.2.3 table 3.1: return codes 6-255 are reserved.
    assert_eq!(
        err(V3, &[0x20, 2, 0, 6]),
        DecodeError::InvalidReasonCode {
            packet: PacketType::ConnAck,
            code: 6
        }
    );
    // 0x87 is an MQTT 5 code, not a 3.1.1 one.
    assert_eq!(
        err(V3, &[0x20, 2, 0, 0x87]),
        DecodeError::InvalidReasonCode {
            packet: PacketType::ConnAck,
            code: 0x87
        }
    );
    // MQTT 5 §3.2.2.2 table 3-1: 0x05 is not a CONNACK reason code, nor 0x8B.
    for code in [0x05, 0x8B, 0x10] {
        assert_eq!(
            err(V5, &[0x20, 3, 0, code, 0]),
            DecodeError::InvalidReasonCode {
                packet: PacketType::ConnAck,
                code
            }
        );
    }
}

#[test]
fn connack_v311_trailing_bytes() {
    // MQTT 3.1.1 §3.2.1: the remaining length of CONNACK is 2.
    assert_eq!(
        err(V3, &[0x20, 3, 0, 0, 0]),
        DecodeError::TrailingBytes {
            packet: PacketType::ConnAck,
            extra: 1
        }
    );
}

// ---------------------------------------------------------------------------------------------
// Reason codes
// ---------------------------------------------------------------------------------------------

#[test]
fn reason_code_not_allowed_in_the_packet() {
    // MQTT 5 §2.4 table 2-6 and each packet's table: 0x04 is a DISCONNECT code, not a PUBACK
    // one; 0x10 is a PUBACK/PUBREC code, not a PUBREL one.
    let cases: &[(u8, PacketType, u8)] = &[
        (0x40, PacketType::PubAck, 0x04),
        (0x50, PacketType::PubRec, 0x18),
        (0x62, PacketType::PubRel, 0x10),
        (0x62, PacketType::PubRel, 0x80),
        (0x70, PacketType::PubComp, 0x87),
    ];
    for &(first, packet, code) in cases {
        assert_eq!(
            err(V5, &[first, 3, 0, 1, code]),
            DecodeError::InvalidReasonCode { packet, code },
            "{packet} {code:#04x}"
        );
    }
    // §3.9.3 SUBACK: 0x03 is not a QoS; 0x11 is an UNSUBACK code.
    for code in [0x03, 0x11] {
        assert_eq!(
            err(V5, &[0x90, 4, 0, 1, 0, code]),
            DecodeError::InvalidReasonCode {
                packet: PacketType::SubAck,
                code
            }
        );
    }
    // MQTT 3.1.1 §3.9.3: SUBACK return codes are 0x00, 0x01, 0x02 and 0x80 only.
    for code in [0x03, 0x87] {
        assert_eq!(
            err(V3, &[0x90, 3, 0, 1, code]),
            DecodeError::InvalidReasonCode {
                packet: PacketType::SubAck,
                code
            }
        );
    }
    // §3.11.3 UNSUBACK: 0x01 is not allowed.
    assert_eq!(
        err(V5, &[0xB0, 4, 0, 1, 0, 0x01]),
        DecodeError::InvalidReasonCode {
            packet: PacketType::UnsubAck,
            code: 0x01
        }
    );
    // §3.14.2.1 DISCONNECT: 0x01, 0x84 are not allowed.
    for code in [0x01, 0x84] {
        assert_eq!(
            err(V5, &[0xE0, 1, code]),
            DecodeError::InvalidReasonCode {
                packet: PacketType::Disconnect,
                code
            }
        );
    }
    // §3.15.2.1 AUTH: only 0x00, 0x18, 0x19.
    assert_eq!(
        err(V5, &[0xF0, 1, 0x87]),
        DecodeError::InvalidReasonCode {
            packet: PacketType::Auth,
            code: 0x87
        }
    );
}

#[test]
fn an_off_list_failure_code_in_puback_or_pubrec_is_taken_as_a_refusal() {
    // mosquitto 2.0.11 answers a PUBLISH over its message_size_limit with PUBACK 0x95 (Packet
    // too large), which MQTT 5 §3.4.2.1 does not list for PUBACK. A failure code is taken for
    // what it says; a success code outside the list stays a malformed packet.
    for (first, packet) in [(0x40, PacketType::PubAck), (0x50, PacketType::PubRec)] {
        for code in [0x95u8, 0x92, 0x81, 0xFF] {
            let p = ok(V5, &[first, 3, 0, 1, code]);
            let ack = match p {
                Packet::PubAck(a) | Packet::PubRec(a) => a,
                other => panic!("{other:?}"),
            };
            assert_eq!(ack.reason, ReasonCode(code), "{packet} {code:#04x}");
            assert!(ack.reason.is_error());
            assert!(ack.reason.off_list(packet, Protocol::V5));
        }
    }
    assert!(!ReasonCode::QUOTA_EXCEEDED.off_list(PacketType::PubAck, Protocol::V5));
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

#[test]
fn unknown_property_identifier() {
    // MQTT 5 §2.2.2.2 table 2-4 defines the identifiers; any other is malformed.
    for id in [0x00u8, 0x04, 0x05, 0x0A, 0x10, 0x1B, 0x20, 0x2B, 0x7F] {
        assert_eq!(
            err(V5, &puback_v5_props(&[id, 0, 0])),
            DecodeError::UnknownProperty(u32::from(id)),
            "{id:#04x}"
        );
    }
    // The identifier is a Variable Byte Integer: 0x80 0x01 is 128.
    assert_eq!(
        err(V5, &puback_v5_props(&[0x80, 0x01, 0])),
        DecodeError::UnknownProperty(128)
    );
}

#[test]
fn duplicate_property() {
    // MQTT 5 §2.2.2.2: "It is a Protocol Error to include [a property] more than once" except
    // User Property and Subscription Identifier in PUBLISH.
    // Two content types in PUBLISH (§3.3.2.3.9).
    let ct = [0x03, 0, 1, b'a'];
    assert_eq!(
        err(V5, &publish_v5_props(&[&ct[..], &ct[..]].concat())),
        DecodeError::DuplicateProperty { id: 0x03 }
    );
    // Two subscription identifiers in SUBSCRIBE (§3.8.2.1.2).
    assert_eq!(
        err(V5, &subscribe_v5(&[0x0B, 1, 0x0B, 2], &[(b"a", 0)])),
        DecodeError::DuplicateProperty { id: 0x0B }
    );
    // Two receive maximums in CONNECT (§3.1.2.11.3), two reason strings in PUBACK.
    assert_eq!(
        err(V5, &connect_v5_props(&[0x21, 0, 1, 0x21, 0, 2])),
        DecodeError::DuplicateProperty { id: 0x21 }
    );
    let rs = [0x1F, 0, 1, b'x'];
    assert_eq!(
        err(V5, &puback_v5_props(&[&rs[..], &rs[..]].concat())),
        DecodeError::DuplicateProperty { id: 0x1F }
    );
    // Twice the same topic alias value is still twice the property.
    assert_eq!(
        err(V5, &publish_v5_props(&[0x23, 0, 1, 0x23, 0, 1])),
        DecodeError::DuplicateProperty { id: 0x23 }
    );
}

#[test]
fn allowed_repeated_properties() {
    // §3.3.2.3.7 / §2.2.2.2: user properties may repeat, even with the same name, in order.
    let up = |k: u8, v: u8| [0x26, 0, 1, k, 0, 1, v];
    let props = [
        &up(b'k', b'1')[..],
        &up(b'k', b'2')[..],
        &up(b'j', b'3')[..],
    ]
    .concat();
    match ok(V5, &publish_v5_props(&props)) {
        Packet::Publish(p) => {
            let got: Vec<(&str, &str)> = p
                .properties
                .user_properties
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            assert_eq!(got, [("k", "1"), ("k", "2"), ("j", "3")]);
        }
        p => panic!("{p:?}"),
    }
    // §3.3.4: a PUBLISH to a client may carry several subscription identifiers.
    match ok(V5, &publish_v5_props(&[0x0B, 7, 0x0B, 0x80, 0x01, 0x0B, 7])) {
        Packet::Publish(p) => assert_eq!(p.properties.subscription_identifiers, [7, 128, 7]),
        p => panic!("{p:?}"),
    }
    // User properties repeat in CONNECT, SUBSCRIBE and the acknowledgements too.
    let two = [&up(b'a', b'b')[..], &up(b'a', b'b')[..]].concat();
    assert!(matches!(
        ok(V5, &connect_v5_props(&two)),
        Packet::Connect(_)
    ));
    assert!(matches!(
        ok(V5, &subscribe_v5(&two, &[(b"a", 0)])),
        Packet::Subscribe(_)
    ));
    assert!(matches!(ok(V5, &puback_v5_props(&two)), Packet::PubAck(_)));
}

#[test]
fn property_not_allowed_in_the_packet() {
    // MQTT 5 §2.2.2.2 table 2-4: each property belongs to some packets only.
    // Topic alias (0x23) in CONNECT.
    assert_eq!(
        err(V5, &connect_v5_props(&[0x23, 0, 1])),
        DecodeError::PropertyNotAllowed {
            id: 0x23,
            context: "CONNECT"
        }
    );
    // Session expiry interval (0x11) in PUBLISH.
    assert_eq!(
        err(V5, &publish_v5_props(&[0x11, 0, 0, 0, 1])),
        DecodeError::PropertyNotAllowed {
            id: 0x11,
            context: "PUBLISH"
        }
    );
    // Content type (0x03) in PUBACK.
    assert_eq!(
        err(V5, &puback_v5_props(&[0x03, 0, 1, b'a'])),
        DecodeError::PropertyNotAllowed {
            id: 0x03,
            context: "PUBACK"
        }
    );
    // Reason string (0x1F) in SUBSCRIBE.
    assert_eq!(
        err(V5, &subscribe_v5(&[0x1F, 0, 1, b'a'], &[(b"a", 0)])),
        DecodeError::PropertyNotAllowed {
            id: 0x1F,
            context: "SUBSCRIBE"
        }
    );
    // Subscription identifier (0x0B) in UNSUBSCRIBE.
    assert_eq!(
        err(V5, &pkt(0xA2, &[0, 1, 2, 0x0B, 1, 0, 1, b'a'])),
        DecodeError::PropertyNotAllowed {
            id: 0x0B,
            context: "UNSUBSCRIBE"
        }
    );
    // Receive maximum (0x21) in DISCONNECT.
    assert_eq!(
        err(V5, &[0xE0, 5, 0x00, 3, 0x21, 0, 1]),
        DecodeError::PropertyNotAllowed {
            id: 0x21,
            context: "DISCONNECT"
        }
    );
    // Session expiry interval (0x11) in AUTH.
    assert_eq!(
        err(V5, &[0xF0, 7, 0x18, 5, 0x11, 0, 0, 0, 1]),
        DecodeError::PropertyNotAllowed {
            id: 0x11,
            context: "AUTH"
        }
    );
    // Maximum QoS (0x24) is a CONNACK property, not a CONNECT one.
    assert_eq!(
        err(V5, &connect_v5_props(&[0x24, 1])),
        DecodeError::PropertyNotAllowed {
            id: 0x24,
            context: "CONNECT"
        }
    );
    // Will delay interval (0x18) belongs to the will properties, not to CONNECT's.
    assert_eq!(
        err(V5, &connect_v5_props(&[0x18, 0, 0, 0, 1])),
        DecodeError::PropertyNotAllowed {
            id: 0x18,
            context: "CONNECT"
        }
    );
    // Topic alias in the will properties (§3.1.3.2).
    let mut body = st(b"MQTT");
    body.extend_from_slice(&[5, 0x06, 0, 0, 0]);
    body.extend_from_slice(&st(b"c"));
    body.extend_from_slice(&[3, 0x23, 0, 1]);
    body.extend_from_slice(&st(b"w"));
    body.extend_from_slice(&st(b"x"));
    assert_eq!(
        err(V5, &pkt(0x10, &body)),
        DecodeError::PropertyNotAllowed {
            id: 0x23,
            context: "the will properties"
        }
    );
}

#[test]
fn invalid_property_values() {
    // §3.1.2.11.3: receive maximum 0 is a protocol error.
    assert_eq!(
        err(V5, &connect_v5_props(&[0x21, 0, 0])),
        DecodeError::InvalidPropertyValue { id: 0x21, value: 0 }
    );
    // §3.1.2.11.4: maximum packet size 0.
    assert_eq!(
        err(V5, &connect_v5_props(&[0x27, 0, 0, 0, 0])),
        DecodeError::InvalidPropertyValue { id: 0x27, value: 0 }
    );
    // §3.1.2.11.6 / §3.1.2.11.7: request response / problem information other than 0 or 1.
    assert_eq!(
        err(V5, &connect_v5_props(&[0x19, 2])),
        DecodeError::InvalidPropertyValue { id: 0x19, value: 2 }
    );
    assert_eq!(
        err(V5, &connect_v5_props(&[0x17, 0xFF])),
        DecodeError::InvalidPropertyValue {
            id: 0x17,
            value: 0xFF
        }
    );
    // §3.2.2.3.4: maximum QoS 2 (a server that supports QoS 2 leaves it out).
    assert_eq!(
        err(V5, &[0x20, 5, 0, 0, 2, 0x24, 2]),
        DecodeError::InvalidPropertyValue { id: 0x24, value: 2 }
    );
    // §3.2.2.3.5: retain available 2; §3.2.2.3.11-13 wildcard/subscription id/shared
    // available other than 0 or 1.
    for id in [0x25, 0x28, 0x29, 0x2A] {
        assert_eq!(
            err(V5, &[0x20, 5, 0, 0, 2, id, 2]),
            DecodeError::InvalidPropertyValue { id, value: 2 }
        );
    }
    // §3.3.2.3.2: payload format indicator 2.
    assert_eq!(
        err(V5, &publish_v5_props(&[0x01, 2])),
        DecodeError::InvalidPropertyValue { id: 0x01, value: 2 }
    );
    // §3.3.2.3.4: topic alias 0.
    assert_eq!(
        err(V5, &publish_v5_props(&[0x23, 0, 0])),
        DecodeError::InvalidPropertyValue { id: 0x23, value: 0 }
    );
    // §3.3.2.3.8 / §3.8.2.1.2: subscription identifier 0.
    assert_eq!(
        err(V5, &publish_v5_props(&[0x0B, 0])),
        DecodeError::InvalidPropertyValue { id: 0x0B, value: 0 }
    );
    assert_eq!(
        err(V5, &subscribe_v5(&[0x0B, 0], &[(b"a", 0)])),
        DecodeError::InvalidPropertyValue { id: 0x0B, value: 0 }
    );
}

#[test]
fn response_topic_is_a_topic_name() {
    // §3.3.2.3.5: "The Response Topic MUST NOT contain wildcard characters" (MQTT-3.3.2-14).
    let e = err(V5, &publish_v5_props(&[0x08, 0, 3, b'a', b'/', b'#']));
    assert!(matches!(e, DecodeError::InvalidTopicName { .. }), "{e:?}");
}

#[test]
fn property_strings_are_checked_too() {
    // §1.5.4 applies to every string: a user property value with U+0000, a reason string
    // that is not UTF-8.
    assert_eq!(
        err(V5, &puback_v5_props(&[0x26, 0, 1, b'k', 0, 1, 0])),
        DecodeError::NullCharacter {
            field: "user property value"
        }
    );
    assert_eq!(
        err(V5, &puback_v5_props(&[0x1F, 0, 1, 0xFF])),
        DecodeError::InvalidUtf8 {
            field: "reason string"
        }
    );
}

#[test]
fn property_length_beyond_the_packet() {
    // §2.2.2.1: the property length counts bytes of this packet.
    assert_eq!(
        err(V5, &pkt(0x40, &[0, 1, 0x00, 5])),
        DecodeError::PropertyLengthExceedsPacket
    );
    assert_eq!(
        err(V5, &pkt(0x30, &[0, 1, b't', 9, 0x01, 0x01])),
        DecodeError::PropertyLengthExceedsPacket
    );
    // A property whose value runs past the property block (but not past the packet):
    // content type of length 5 in a block of 4 bytes, followed by payload.
    assert_eq!(
        err(
            V5,
            &pkt(
                0x30,
                &[0, 1, b't', 4, 0x03, 0, 5, b'a', b'b', b'c', b'd', b'e']
            )
        ),
        DecodeError::Truncated {
            packet: PacketType::Publish,
            field: "content type"
        }
    );
}

// ---------------------------------------------------------------------------------------------
// Lengths: trailing bytes, empty payloads
// ---------------------------------------------------------------------------------------------

#[test]
fn trailing_bytes() {
    // §3.12.1 / §3.13.1: PINGREQ and PINGRESP have remaining length 0.
    for proto in [V3, V5] {
        assert_eq!(
            err(proto, &[0xC0, 1, 0]),
            DecodeError::TrailingBytes {
                packet: PacketType::PingReq,
                extra: 1
            }
        );
        assert_eq!(
            err(proto, &[0xD0, 2, 0, 0]),
            DecodeError::TrailingBytes {
                packet: PacketType::PingResp,
                extra: 2
            }
        );
    }
    // MQTT 3.1.1 §3.4.1 (and §3.5-3.7): remaining length 2.
    for first in [0x40, 0x50, 0x62, 0x70] {
        let e = err(V3, &[first, 3, 0, 1, 0]);
        assert!(
            matches!(e, DecodeError::TrailingBytes { extra: 1, .. }),
            "{first:#04x}: {e:?}"
        );
    }
    // MQTT 3.1.1 §3.11.1 UNSUBACK: remaining length 2; §3.14.1 DISCONNECT: 0.
    assert_eq!(
        err(V3, &[0xB0, 3, 0, 1, 0]),
        DecodeError::TrailingBytes {
            packet: PacketType::UnsubAck,
            extra: 1
        }
    );
    assert_eq!(
        err(V3, &[0xE0, 1, 0]),
        DecodeError::TrailingBytes {
            packet: PacketType::Disconnect,
            extra: 1
        }
    );
    // MQTT 5: bytes after the property block of an acknowledgement, a DISCONNECT, an AUTH.
    assert_eq!(
        err(V5, &[0x40, 5, 0, 1, 0x10, 0, 0xAA]),
        DecodeError::TrailingBytes {
            packet: PacketType::PubAck,
            extra: 1
        }
    );
    assert_eq!(
        err(V5, &[0xE0, 3, 0, 0, 0xAA]),
        DecodeError::TrailingBytes {
            packet: PacketType::Disconnect,
            extra: 1
        }
    );
    assert_eq!(
        err(V5, &[0xF0, 3, 0x18, 0, 0xAA]),
        DecodeError::TrailingBytes {
            packet: PacketType::Auth,
            extra: 1
        }
    );
    // CONNECT: bytes after the last field the flags announce.
    let mut rest = st(b"c");
    rest.extend_from_slice(&[0xAA, 0xBB]);
    assert_eq!(
        err(V3, &connect_raw(b"MQTT", 4, 0x02, &rest)),
        DecodeError::TrailingBytes {
            packet: PacketType::Connect,
            extra: 2
        }
    );
}

#[test]
fn empty_subscribe_and_unsubscribe() {
    // MQTT 3.1.1 §3.8.3 (MQTT-3.8.3-3) / MQTT 5 §3.8.3 (MQTT-3.8.3-2): at least one topic
    // filter; §3.10.3 (MQTT-3.10.3-2) the same for UNSUBSCRIBE.
    assert_eq!(
        err(V3, &[0x82, 2, 0, 1]),
        DecodeError::EmptyPayload {
            packet: PacketType::Subscribe
        }
    );
    assert_eq!(
        err(V5, &[0x82, 3, 0, 1, 0]),
        DecodeError::EmptyPayload {
            packet: PacketType::Subscribe
        }
    );
    assert_eq!(
        err(V3, &[0xA2, 2, 0, 1]),
        DecodeError::EmptyPayload {
            packet: PacketType::Unsubscribe
        }
    );
    assert_eq!(
        err(V5, &[0xA2, 3, 0, 1, 0]),
        DecodeError::EmptyPayload {
            packet: PacketType::Unsubscribe
        }
    );
    // §3.9.3 / §3.11.3: SUBACK (and MQTT 5 UNSUBACK) carry one code per filter.
    assert_eq!(
        err(V3, &[0x90, 2, 0, 1]),
        DecodeError::EmptyPayload {
            packet: PacketType::SubAck
        }
    );
    assert_eq!(
        err(V5, &[0xB0, 3, 0, 1, 0]),
        DecodeError::EmptyPayload {
            packet: PacketType::UnsubAck
        }
    );
}

// ---------------------------------------------------------------------------------------------
// SUBSCRIBE options and topic filters
// ---------------------------------------------------------------------------------------------

#[test]
fn subscription_options_reserved_bits() {
    // MQTT 5 §3.8.3.1: bits 6 and 7 are reserved (MQTT-3.8.3-5).
    for o in [0x40, 0x80, 0xC1] {
        assert_eq!(
            err(V5, &subscribe_v5(&[], &[(b"a", o)])),
            DecodeError::InvalidSubscriptionOptions(o)
        );
    }
    // MQTT 3.1.1 §3.8.3.1: the upper 6 bits are reserved (MQTT-3-8.3-4): the MQTT 5 option
    // bits are not options there.
    for o in [0x04, 0x08, 0x10, 0x80] {
        assert_eq!(
            err(V3, &subscribe_v3(&[(b"a", o)])),
            DecodeError::InvalidSubscriptionOptions(o)
        );
    }
}

#[test]
fn subscription_retain_handling_3() {
    // MQTT 5 §3.8.3.1: "It is a Protocol Error to send a Retain Handling value of 3".
    assert_eq!(
        err(V5, &subscribe_v5(&[], &[(b"a", 0x30)])),
        DecodeError::InvalidSubscriptionOptions(0x30)
    );
}

#[test]
fn subscription_qos_3() {
    // §3.8.3.1: requested QoS 3 is malformed (MQTT-3-8.3-4 / MQTT-3.8.3-…).
    assert_eq!(
        err(V3, &subscribe_v3(&[(b"a", 3)])),
        DecodeError::InvalidQos {
            field: "subscription",
            value: 3
        }
    );
    assert_eq!(
        err(V5, &subscribe_v5(&[], &[(b"a", 0x13)])),
        DecodeError::InvalidQos {
            field: "subscription",
            value: 3
        }
    );
}

#[test]
fn invalid_topic_filters() {
    // §4.7.1.2: "#" only as the last level and alone in it; §4.7.1.3: "+" alone in its level;
    // §4.7.3: at least one character.
    for f in [
        &b"a/#/b"[..],
        b"a+",
        b"a/b+",
        b"#a",
        b"a#",
        b"+a/b",
        b"##",
        b"",
    ] {
        let e = err(V3, &subscribe_v3(&[(b"ok/+", 0), (f, 0)]));
        assert!(
            matches!(e, DecodeError::InvalidTopicFilter { .. }),
            "{f:?}: {e:?}"
        );
        let e = err(V5, &subscribe_v5(&[], &[(f, 0)]));
        assert!(
            matches!(e, DecodeError::InvalidTopicFilter { .. }),
            "{f:?}: {e:?}"
        );
        let mut body = vec![0, 1];
        body.extend_from_slice(&st(f));
        let e = err(V3, &pkt(0xA2, &body));
        assert!(
            matches!(e, DecodeError::InvalidTopicFilter { .. }),
            "{f:?}: {e:?}"
        );
    }
    // And the valid shapes are accepted.
    for f in [&b"#"[..], b"+", b"a/#", b"+/+/#", b"/", b"a//b", b"$SYS/#"] {
        assert!(matches!(
            ok(V3, &subscribe_v3(&[(f, 1)])),
            Packet::Subscribe(_)
        ));
    }
}

#[test]
fn subscription_truncated_options() {
    // §3.8.3: each filter is followed by its options byte.
    assert_eq!(
        err(V3, &pkt(0x82, &[0, 1, 0, 1, b'a'])),
        DecodeError::Truncated {
            packet: PacketType::Subscribe,
            field: "subscription options"
        }
    );
}

// ---------------------------------------------------------------------------------------------
// Incremental decoding
// ---------------------------------------------------------------------------------------------

fn s(v: &str) -> MqttStr {
    MqttStr::from_str(v).unwrap()
}

fn sample_packets() -> Vec<(Protocol, Vec<u8>)> {
    // Hand-written encodings (see golden.rs for the rules).
    let mut out = vec![
        (V3, vec![0xC0, 0x00]),
        (V3, vec![0x40, 0x02, 0x00, 0x01]),
        (V5, vec![0x40, 0x03, 0x00, 0x01, 0x10]),
        (V5, vec![0xF0, 0x00]),
        (
            V3,
            vec![
                0x33, 0x09, 0x00, 0x03, b'a', b'/', b'b', 0x00, 0x0A, b'h', b'i',
            ],
        ),
        (V5, connect_v5_props(&[0x11, 0, 0, 0, 10, 0x21, 0, 5])),
        (V5, subscribe_v5(&[0x0B, 0x80, 0x01], &[(b"a/+", 0x2D)])),
    ];
    // A PUBLISH whose remaining length takes three bytes (20,000 bytes).
    let mut p = Publish::new(s("big/topic"), Bytes::from(vec![7u8; 20_000]));
    p.qos = QoS::AtLeastOnce;
    p.packet_id = std::num::NonZeroU16::new(9);
    let mut buf = BytesMut::new();
    Packet::Publish(p)
        .encode(&mut buf, &EncodeOptions::new(V5))
        .unwrap();
    out.push((V5, buf.to_vec()));
    out
}

#[test]
fn every_strict_prefix_is_incomplete_and_consumes_nothing() {
    for (proto, bytes) in sample_packets() {
        let opts = DecodeOptions::new(proto);
        // For the 20,000-byte packet check every prefix in the header and a stride after.
        let cuts: Vec<usize> = if bytes.len() > 512 {
            (0..16).chain((16..bytes.len()).step_by(997)).collect()
        } else {
            (0..bytes.len()).collect()
        };
        for cut in cuts {
            let mut src = BytesMut::from(&bytes[..cut]);
            match decode(&mut src, &opts) {
                Ok(Decoded::Incomplete { needed }) => {
                    assert!(needed > 0, "prefix {cut}: needed 0");
                    assert!(cut + needed <= bytes.len(), "prefix {cut}: needed {needed}");
                }
                other => panic!("prefix {cut} of {} bytes: {other:?}", bytes.len()),
            }
            assert_eq!(&src[..], &bytes[..cut], "prefix {cut}: buffer changed");
            let mut b = Bytes::copy_from_slice(&bytes[..cut]);
            assert!(matches!(
                decode_bytes(&mut b, &opts),
                Ok(Decoded::Incomplete { .. })
            ));
            assert_eq!(b.len(), cut);
        }
        let mut src = BytesMut::from(&bytes[..]);
        assert!(matches!(decode(&mut src, &opts), Ok(Decoded::Packet(_))));
        assert!(src.is_empty());
    }
}

#[test]
fn needed_is_exact_once_the_fixed_header_is_complete() {
    for (proto, bytes) in sample_packets() {
        let opts = DecodeOptions::new(proto);
        // Length of the fixed header: first byte and the remaining length bytes.
        let header = 1 + bytes[1..].iter().position(|b| b & 0x80 == 0).unwrap() + 1;
        for cut in header..bytes.len() {
            let mut src = BytesMut::from(&bytes[..cut]);
            assert_eq!(
                decode(&mut src, &opts),
                Ok(Decoded::Incomplete {
                    needed: bytes.len() - cut
                }),
                "cut {cut}"
            );
            if bytes.len() > 512 && cut > header + 4 {
                break;
            }
        }
        if header == bytes.len() {
            continue; // nothing after the fixed header (PINGREQ, AUTH with no body)
        }
        // Adding exactly `needed` bytes completes the packet.
        let mut src = BytesMut::from(&bytes[..header]);
        let Ok(Decoded::Incomplete { needed }) = decode(&mut src, &opts) else {
            panic!("header only")
        };
        src.extend_from_slice(&bytes[header..header + needed]);
        assert!(matches!(decode(&mut src, &opts), Ok(Decoded::Packet(_))));
    }
}

#[test]
fn empty_buffer_is_incomplete() {
    let mut src = BytesMut::new();
    assert!(matches!(
        decode(&mut src, &DecodeOptions::new(V5)),
        Ok(Decoded::Incomplete { needed }) if needed > 0
    ));
}

#[test]
fn packets_back_to_back() {
    // Two, then three packets in one buffer decode one after the other, each taking only its
    // own bytes; a partial third one stays in the buffer.
    let a = [0x40, 0x02, 0x00, 0x01];
    let b = [0x30, 0x07, 0x00, 0x03, b'a', b'/', b'b', b'h', b'i'];
    let c = [0xC0, 0x00];
    let mut stream = Vec::new();
    stream.extend_from_slice(&a);
    stream.extend_from_slice(&b);
    stream.extend_from_slice(&c);
    stream.extend_from_slice(&b[..4]);
    let opts = DecodeOptions::new(V3);

    let mut src = BytesMut::from(&stream[..]);
    let first = decode(&mut src, &opts).unwrap();
    assert!(matches!(first, Decoded::Packet(Packet::PubAck(ref a)) if a.packet_id.get() == 1));
    assert_eq!(src.len(), stream.len() - a.len());
    let second = decode(&mut src, &opts).unwrap();
    match second {
        Decoded::Packet(Packet::Publish(p)) => {
            assert_eq!(p.topic, "a/b");
            assert_eq!(&p.payload[..], b"hi");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        decode(&mut src, &opts).unwrap(),
        Decoded::Packet(Packet::PingReq)
    );
    assert_eq!(
        decode(&mut src, &opts).unwrap(),
        Decoded::Incomplete {
            needed: b.len() - 4
        }
    );
    assert_eq!(&src[..], &b[..4]);
    src.extend_from_slice(&b[4..]);
    assert!(matches!(
        decode(&mut src, &opts).unwrap(),
        Decoded::Packet(Packet::Publish(_))
    ));
    assert!(src.is_empty());

    // The same with `decode_bytes`.
    let mut src = Bytes::copy_from_slice(&stream[..stream.len() - 4]);
    for _ in 0..3 {
        assert!(matches!(
            decode_bytes(&mut src, &opts),
            Ok(Decoded::Packet(_))
        ));
    }
    assert!(src.is_empty());
}

#[test]
fn decoded_payload_is_not_affected_by_later_buffer_use() {
    // The payload is a slice of the receive buffer: reusing the buffer for the next bytes
    // must not change a packet already decoded.
    let mut src = BytesMut::from(&[0x30, 0x05, 0x00, 0x01, b't', b'x', b'y'][..]);
    let Ok(Decoded::Packet(Packet::Publish(p))) = decode(&mut src, &DecodeOptions::new(V3)) else {
        panic!()
    };
    src.extend_from_slice(&[0xAA; 64]);
    src.clear();
    src.extend_from_slice(&[0xBB; 64]);
    assert_eq!(&p.payload[..], b"xy");
    assert_eq!(p.topic, "t");
}

// ---------------------------------------------------------------------------------------------
// MQTT 5 rules beyond single fields
// ---------------------------------------------------------------------------------------------

#[test]
fn shared_subscription_with_no_local() {
    // MQTT 5 §3.8.3.1: "It is a Protocol Error to set the No Local bit to 1 on a Shared
    // Subscription" (MQTT-3.8.3-4).
    assert_eq!(
        err(V5, &subscribe_v5(&[], &[(b"$share/g/a/b", 0x05)])),
        DecodeError::InvalidSubscriptionOptions(0x05)
    );
    // Without No Local it is fine, and so is No Local on an ordinary filter.
    assert!(matches!(
        ok(
            V5,
            &subscribe_v5(&[], &[(b"$share/g/a/b", 0x01), (b"a/b", 0x05)])
        ),
        Packet::Subscribe(_)
    ));
}

#[test]
fn shared_subscription_filter_syntax() {
    // MQTT 5 §4.8.2: "$share/" then a ShareName of at least one character without "/", "+"
    // or "#", then "/" and a topic filter (MQTT-4.8.2-1, MQTT-4.8.2-2).
    for f in [
        &b"$share/g"[..],
        b"$share//a",
        b"$share/+/a",
        b"$share/#/a",
        b"$share/g+/a",
        b"$share/g/",
        b"$share/g/a#",
    ] {
        let e = err(V5, &subscribe_v5(&[], &[(f, 0)]));
        assert!(
            matches!(e, DecodeError::InvalidTopicFilter { .. }),
            "{f:?}: {e:?}"
        );
        let mut body = vec![0, 1, 0];
        body.extend_from_slice(&st(f));
        let e = err(V5, &pkt(0xA2, &body));
        assert!(
            matches!(e, DecodeError::InvalidTopicFilter { .. }),
            "{f:?}: {e:?}"
        );
    }
    for f in [
        &b"$share/g/#"[..],
        b"$share/g/+/b",
        b"$share/group-1/a/b",
        b"$shared/x",
    ] {
        assert!(
            matches!(ok(V5, &subscribe_v5(&[], &[(f, 1)])), Packet::Subscribe(_)),
            "{f:?}"
        );
    }
    // MQTT 3.1.1 gives "$share" no meaning: "$share/g" is an ordinary filter there.
    assert!(matches!(
        ok(V3, &subscribe_v3(&[(b"$share/g", 1)])),
        Packet::Subscribe(_)
    ));
}

#[test]
fn authentication_data_without_method() {
    // MQTT 5 §3.1.2.11.10: "It is a Protocol Error to include Authentication Data if there is
    // no Authentication Method."
    assert_eq!(
        err(V5, &connect_v5_props(&[0x16, 0, 1, 0xAA])),
        DecodeError::PropertyNotAllowed {
            id: 0x16,
            context: "CONNECT without an authentication method"
        }
    );
    // With the method, in either order, it is fine.
    assert!(matches!(
        ok(V5, &connect_v5_props(&[0x16, 0, 1, 0xAA, 0x15, 0, 1, b'm'])),
        Packet::Connect(_)
    ));
}

#[test]
fn encoder_refuses_what_the_decoder_refuses() {
    use spillway_codec::{
        Connect, EncodeError, Properties, Subscribe, Subscription, SubscriptionOptions, Unsubscribe,
    };
    let id = std::num::NonZeroU16::new(1).unwrap();
    let enc = |p: Packet| {
        let mut out = BytesMut::new();
        let r = p.encode(&mut out, &EncodeOptions::new(V5));
        assert!(out.is_empty() || r.is_ok(), "nothing is appended on error");
        r
    };
    // MQTT-3.8.3-4: No Local on a shared subscription.
    let sub = |filter: &str, no_local: bool| {
        Packet::Subscribe(Subscribe {
            packet_id: id,
            properties: Properties::default(),
            subscriptions: vec![Subscription {
                filter: s(filter),
                options: SubscriptionOptions {
                    no_local,
                    ..SubscriptionOptions::default()
                },
            }],
        })
    };
    assert!(matches!(
        enc(sub("$share/g/a", true)),
        Err(EncodeError::InvalidTopicFilter { .. })
    ));
    assert!(enc(sub("$share/g/a", false)).is_ok());
    assert!(enc(sub("a", true)).is_ok());
    // MQTT-4.8.2-1/2: share name syntax, in SUBSCRIBE and UNSUBSCRIBE.
    assert!(matches!(
        enc(sub("$share/g", false)),
        Err(EncodeError::InvalidTopicFilter { .. })
    ));
    let unsub = Packet::Unsubscribe(Unsubscribe {
        packet_id: id,
        properties: Properties::default(),
        filters: vec![s("$share//a")],
    });
    assert!(matches!(
        enc(unsub),
        Err(EncodeError::InvalidTopicFilter { .. })
    ));
    // §3.1.2.11.10: authentication data without an authentication method.
    let mut c = Connect::new(V5, s("c"));
    c.properties.authentication_data = Some(Bytes::from_static(b"x"));
    assert_eq!(
        enc(Packet::Connect(Box::new(c.clone()))),
        Err(EncodeError::PropertyNotAllowed {
            id: 0x16,
            context: "CONNECT without an authentication method"
        })
    );
    c.properties.authentication_method = Some(s("m"));
    assert!(enc(Packet::Connect(Box::new(c))).is_ok());
}
