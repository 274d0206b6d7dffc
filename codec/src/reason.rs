//! Reason codes (MQTT 5 §2.4, table 2-6) and the 3.1.1 CONNACK return codes (§3.2.2.3), with
//! the set each packet may carry.

use std::fmt;

use crate::packet::PacketType;
use crate::types::Protocol;

/// A one-byte reason code. Values below 0x80 are success, 0x80 and above are failures.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ReasonCode(pub u8);

#[allow(missing_docs)]
impl ReasonCode {
    pub const SUCCESS: ReasonCode = ReasonCode(0x00);
    pub const NORMAL_DISCONNECTION: ReasonCode = ReasonCode(0x00);
    pub const GRANTED_QOS_0: ReasonCode = ReasonCode(0x00);
    pub const GRANTED_QOS_1: ReasonCode = ReasonCode(0x01);
    pub const GRANTED_QOS_2: ReasonCode = ReasonCode(0x02);
    pub const DISCONNECT_WITH_WILL_MESSAGE: ReasonCode = ReasonCode(0x04);
    pub const NO_MATCHING_SUBSCRIBERS: ReasonCode = ReasonCode(0x10);
    pub const NO_SUBSCRIPTION_EXISTED: ReasonCode = ReasonCode(0x11);
    pub const CONTINUE_AUTHENTICATION: ReasonCode = ReasonCode(0x18);
    pub const RE_AUTHENTICATE: ReasonCode = ReasonCode(0x19);
    pub const UNSPECIFIED_ERROR: ReasonCode = ReasonCode(0x80);
    pub const MALFORMED_PACKET: ReasonCode = ReasonCode(0x81);
    pub const PROTOCOL_ERROR: ReasonCode = ReasonCode(0x82);
    pub const IMPLEMENTATION_SPECIFIC_ERROR: ReasonCode = ReasonCode(0x83);
    pub const UNSUPPORTED_PROTOCOL_VERSION: ReasonCode = ReasonCode(0x84);
    pub const CLIENT_IDENTIFIER_NOT_VALID: ReasonCode = ReasonCode(0x85);
    pub const BAD_USER_NAME_OR_PASSWORD: ReasonCode = ReasonCode(0x86);
    pub const NOT_AUTHORIZED: ReasonCode = ReasonCode(0x87);
    pub const SERVER_UNAVAILABLE: ReasonCode = ReasonCode(0x88);
    pub const SERVER_BUSY: ReasonCode = ReasonCode(0x89);
    pub const BANNED: ReasonCode = ReasonCode(0x8A);
    pub const SERVER_SHUTTING_DOWN: ReasonCode = ReasonCode(0x8B);
    pub const BAD_AUTHENTICATION_METHOD: ReasonCode = ReasonCode(0x8C);
    pub const KEEP_ALIVE_TIMEOUT: ReasonCode = ReasonCode(0x8D);
    pub const SESSION_TAKEN_OVER: ReasonCode = ReasonCode(0x8E);
    pub const TOPIC_FILTER_INVALID: ReasonCode = ReasonCode(0x8F);
    pub const TOPIC_NAME_INVALID: ReasonCode = ReasonCode(0x90);
    pub const PACKET_IDENTIFIER_IN_USE: ReasonCode = ReasonCode(0x91);
    pub const PACKET_IDENTIFIER_NOT_FOUND: ReasonCode = ReasonCode(0x92);
    pub const RECEIVE_MAXIMUM_EXCEEDED: ReasonCode = ReasonCode(0x93);
    pub const TOPIC_ALIAS_INVALID: ReasonCode = ReasonCode(0x94);
    pub const PACKET_TOO_LARGE: ReasonCode = ReasonCode(0x95);
    pub const MESSAGE_RATE_TOO_HIGH: ReasonCode = ReasonCode(0x96);
    pub const QUOTA_EXCEEDED: ReasonCode = ReasonCode(0x97);
    pub const ADMINISTRATIVE_ACTION: ReasonCode = ReasonCode(0x98);
    pub const PAYLOAD_FORMAT_INVALID: ReasonCode = ReasonCode(0x99);
    pub const RETAIN_NOT_SUPPORTED: ReasonCode = ReasonCode(0x9A);
    pub const QOS_NOT_SUPPORTED: ReasonCode = ReasonCode(0x9B);
    pub const USE_ANOTHER_SERVER: ReasonCode = ReasonCode(0x9C);
    pub const SERVER_MOVED: ReasonCode = ReasonCode(0x9D);
    pub const SHARED_SUBSCRIPTIONS_NOT_SUPPORTED: ReasonCode = ReasonCode(0x9E);
    pub const CONNECTION_RATE_EXCEEDED: ReasonCode = ReasonCode(0x9F);
    pub const MAXIMUM_CONNECT_TIME: ReasonCode = ReasonCode(0xA0);
    pub const SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED: ReasonCode = ReasonCode(0xA1);
    pub const WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED: ReasonCode = ReasonCode(0xA2);

    /// MQTT 3.1.1 SUBACK failure return code.
    pub const V311_SUBACK_FAILURE: ReasonCode = ReasonCode(0x80);

    /// True for 0x80 and above.
    pub fn is_error(self) -> bool {
        self.0 >= 0x80
    }

    /// The name the MQTT 5 specification gives this code (context-free: 0x00 is "success").
    pub fn name(self) -> &'static str {
        match self.0 {
            0x00 => "success",
            0x01 => "granted QoS 1",
            0x02 => "granted QoS 2",
            0x04 => "disconnect with will message",
            0x10 => "no matching subscribers",
            0x11 => "no subscription existed",
            0x18 => "continue authentication",
            0x19 => "re-authenticate",
            0x80 => "unspecified error",
            0x81 => "malformed packet",
            0x82 => "protocol error",
            0x83 => "implementation specific error",
            0x84 => "unsupported protocol version",
            0x85 => "client identifier not valid",
            0x86 => "bad user name or password",
            0x87 => "not authorized",
            0x88 => "server unavailable",
            0x89 => "server busy",
            0x8A => "banned",
            0x8B => "server shutting down",
            0x8C => "bad authentication method",
            0x8D => "keep alive timeout",
            0x8E => "session taken over",
            0x8F => "topic filter invalid",
            0x90 => "topic name invalid",
            0x91 => "packet identifier in use",
            0x92 => "packet identifier not found",
            0x93 => "receive maximum exceeded",
            0x94 => "topic alias invalid",
            0x95 => "packet too large",
            0x96 => "message rate too high",
            0x97 => "quota exceeded",
            0x98 => "administrative action",
            0x99 => "payload format invalid",
            0x9A => "retain not supported",
            0x9B => "QoS not supported",
            0x9C => "use another server",
            0x9D => "server moved",
            0x9E => "shared subscriptions not supported",
            0x9F => "connection rate exceeded",
            0xA0 => "maximum connect time",
            0xA1 => "subscription identifiers not supported",
            0xA2 => "wildcard subscriptions not supported",
            _ => "unknown reason code",
        }
    }

    /// The name of a 3.1.1 CONNACK return code (§3.2.2.3, table 3.1).
    pub fn v311_connack_name(self) -> &'static str {
        match self.0 {
            0 => "connection accepted",
            1 => "unacceptable protocol version",
            2 => "identifier rejected",
            3 => "server unavailable",
            4 => "bad user name or password",
            5 => "not authorized",
            _ => "unknown return code",
        }
    }

    /// Whether a code the decoder took is outside the list `packet` may carry: a failure
    /// code in PUBACK or PUBREC that the specification does not list there (a broker off the
    /// specification, taken as the message's refusal).
    pub fn off_list(self, packet: PacketType, protocol: Protocol) -> bool {
        !self.allowed_in(packet, protocol)
    }

    /// Whether `packet` may carry this code on a `protocol` connection.
    pub fn allowed_in(self, packet: PacketType, protocol: Protocol) -> bool {
        let set: &[u8] = match (protocol, packet) {
            (Protocol::V311, PacketType::ConnAck) => &[0, 1, 2, 3, 4, 5],
            (Protocol::V311, PacketType::SubAck) => &[0, 1, 2, 0x80],
            (Protocol::V311, _) => &[0],
            (Protocol::V5, PacketType::ConnAck) => &[
                0x00, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A, 0x8C, 0x90,
                0x95, 0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F,
            ],
            (Protocol::V5, PacketType::PubAck | PacketType::PubRec) => {
                &[0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99]
            }
            (Protocol::V5, PacketType::PubRel | PacketType::PubComp) => &[0x00, 0x92],
            (Protocol::V5, PacketType::SubAck) => &[
                0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2,
            ],
            (Protocol::V5, PacketType::UnsubAck) => &[0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91],
            (Protocol::V5, PacketType::Disconnect) => &[
                0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F, 0x90, 0x93,
                0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9E, 0x9F, 0xA0, 0xA1,
                0xA2,
            ],
            (Protocol::V5, PacketType::Auth) => &[0x00, 0x18, 0x19],
            (Protocol::V5, _) => &[0x00],
        };
        set.contains(&self.0)
    }
}

impl fmt::Debug for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#04x} ({})", self.0, self.name())
    }
}

impl fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:#04x})", self.name(), self.0)
    }
}
