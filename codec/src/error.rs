//! Typed errors of the codec: one enum for decoding (each variant names the rule of the
//! specification that the input broke) and one for encoding (what the caller asked for that
//! cannot be put on the wire).

use std::fmt;

use crate::packet::PacketType;

/// A packet that cannot be decoded. The connection it came from should be closed: MQTT has no
/// way to resynchronise a byte stream after a malformed packet (MQTT 5 §4.13).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// The packet type nibble is reserved (0), or AUTH (15) on an MQTT 3.1.1 connection.
    InvalidPacketType(u8),
    /// The fixed-header flags are not the ones the packet type requires (§2.1.3 / §2.2.2).
    ReservedFlags { packet: PacketType, flags: u8 },
    /// The remaining length uses more than four bytes (§1.5.5 / §2.2.3).
    MalformedRemainingLength,
    /// A Variable Byte Integer is not encoded in the minimum number of bytes (MQTT 5 §1.5.5).
    NonMinimalVarInt { field: &'static str },
    /// A Variable Byte Integer in the body (a property length, a property identifier, a
    /// Subscription Identifier) that runs over four bytes (MQTT 5 §1.5.5).
    VarIntTooLong { field: &'static str },
    /// The packet is larger than the negotiated Maximum Packet Size.
    PacketTooLarge { size: usize, max: u32 },
    /// QoS 3 in a PUBLISH header, a will or a subscription.
    InvalidQos { field: &'static str, value: u8 },
    /// DUP set on a QoS 0 PUBLISH (§3.3.1.1).
    DupWithQos0,
    /// A packet identifier of zero (§2.3.1).
    ZeroPacketId { packet: PacketType },
    /// The remaining length ended before a field that must be there.
    Truncated {
        packet: PacketType,
        field: &'static str,
    },
    /// Bytes left over after the last field of a packet that has no payload.
    TrailingBytes { packet: PacketType, extra: usize },
    /// A string that is not well-formed UTF-8 (§1.5.4).
    InvalidUtf8 { field: &'static str },
    /// A string containing U+0000 (§1.5.4, MQTT-1.5.4-2).
    NullCharacter { field: &'static str },
    /// The CONNECT protocol name is not "MQTT".
    InvalidProtocolName,
    /// The CONNECT protocol level is neither 4 (3.1.1) nor 5.
    UnsupportedProtocolLevel(u8),
    /// The reserved bit 0 of the CONNECT flags is set (§3.1.2.3).
    ReservedConnectFlag,
    /// Will QoS or Will Retain set while the Will Flag is clear (§3.1.2.5-7).
    WillFieldsWithoutWill,
    /// Password flag set without the user name flag on MQTT 3.1.1 (MQTT-3.1.2-22).
    PasswordWithoutUsername,
    /// CONNACK acknowledge flags with reserved bits set, or session present with an error code.
    InvalidConnAckFlags(u8),
    /// A reason (or return) code that this packet may not carry.
    InvalidReasonCode { packet: PacketType, code: u8 },
    /// A property identifier that MQTT 5 does not define.
    UnknownProperty(u32),
    /// A property that appears twice where only one is allowed (§2.2.2.2).
    DuplicateProperty { id: u8 },
    /// A property that this packet may not carry (§2.2.2.2).
    PropertyNotAllowed { id: u8, context: &'static str },
    /// A property with a value outside its range (e.g. Receive Maximum 0, Maximum QoS 2).
    InvalidPropertyValue { id: u8, value: u32 },
    /// The property length runs past the end of the packet.
    PropertyLengthExceedsPacket,
    /// A PUBLISH topic name that is empty (without a topic alias) or contains a wildcard.
    InvalidTopicName { reason: &'static str },
    /// A topic filter with a misplaced wildcard or no characters.
    InvalidTopicFilter { reason: &'static str },
    /// A SUBSCRIBE, SUBACK, UNSUBSCRIBE (or MQTT 5 UNSUBACK) without any entry.
    EmptyPayload { packet: PacketType },
    /// Subscription options with reserved bits set or Retain Handling 3 (§3.8.3.1).
    InvalidSubscriptionOptions(u8),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use DecodeError::*;
        match self {
            InvalidPacketType(t) => write!(f, "malformed packet: packet type {t} is reserved"),
            ReservedFlags { packet, flags } => write!(
                f,
                "malformed packet: {packet} fixed-header flags {flags:#06b} are reserved"
            ),
            MalformedRemainingLength => {
                f.write_str("malformed packet: remaining length longer than 4 bytes")
            }
            NonMinimalVarInt { field } => write!(
                f,
                "malformed packet: variable byte integer `{field}` not in its minimum encoding"
            ),
            VarIntTooLong { field } => write!(
                f,
                "malformed packet: variable byte integer `{field}` longer than 4 bytes"
            ),
            PacketTooLarge { size, max } => write!(
                f,
                "packet of {size} bytes is larger than the maximum packet size {max}"
            ),
            InvalidQos { field, value } => write!(f, "malformed packet: {field} QoS {value}"),
            DupWithQos0 => f.write_str("malformed packet: DUP set on a QoS 0 PUBLISH"),
            ZeroPacketId { packet } => write!(f, "malformed packet: {packet} with packet id 0"),
            Truncated { packet, field } => write!(
                f,
                "malformed packet: {packet} remaining length ends before `{field}`"
            ),
            TrailingBytes { packet, extra } => {
                write!(
                    f,
                    "malformed packet: {extra} unexpected bytes at the end of {packet}"
                )
            }
            InvalidUtf8 { field } => write!(f, "malformed packet: `{field}` is not valid UTF-8"),
            NullCharacter { field } => write!(f, "malformed packet: `{field}` contains U+0000"),
            InvalidProtocolName => f.write_str("malformed packet: protocol name is not \"MQTT\""),
            UnsupportedProtocolLevel(l) => write!(f, "unsupported protocol level {l}"),
            ReservedConnectFlag => f.write_str("malformed packet: CONNECT reserved flag set"),
            WillFieldsWithoutWill => {
                f.write_str("malformed packet: will QoS/retain set without the will flag")
            }
            PasswordWithoutUsername => {
                f.write_str("malformed packet: password flag without user name flag (MQTT 3.1.1)")
            }
            InvalidConnAckFlags(b) => write!(f, "malformed packet: CONNACK flags {b:#04x}"),
            InvalidReasonCode { packet, code } => {
                write!(
                    f,
                    "malformed packet: reason code {code:#04x} is not allowed in {packet}"
                )
            }
            UnknownProperty(id) => write!(f, "malformed packet: unknown property {id:#04x}"),
            DuplicateProperty { id } => {
                write!(
                    f,
                    "protocol error: property {id:#04x} included more than once"
                )
            }
            PropertyNotAllowed { id, context } => {
                write!(
                    f,
                    "protocol error: property {id:#04x} is not allowed in {context}"
                )
            }
            InvalidPropertyValue { id, value } => {
                write!(
                    f,
                    "protocol error: property {id:#04x} has invalid value {value}"
                )
            }
            PropertyLengthExceedsPacket => {
                f.write_str("malformed packet: property length runs past the packet")
            }
            InvalidTopicName { reason } => write!(f, "invalid topic name: {reason}"),
            InvalidTopicFilter { reason } => write!(f, "invalid topic filter: {reason}"),
            EmptyPayload { packet } => write!(f, "protocol error: {packet} without any entry"),
            InvalidSubscriptionOptions(b) => {
                write!(f, "malformed packet: subscription options {b:#04x}")
            }
        }
    }
}

impl std::error::Error for DecodeError {}

/// A packet that cannot be encoded as asked.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EncodeError {
    /// A string or binary field longer than 65,535 bytes.
    FieldTooLong { field: &'static str, len: usize },
    /// The encoded packet is larger than the peer's Maximum Packet Size (or 256 MiB).
    PacketTooLarge { size: usize, max: u32 },
    /// A property this packet may not carry.
    PropertyNotAllowed { id: u8, context: &'static str },
    /// A property value out of range (e.g. a Subscription Identifier of 0).
    InvalidPropertyValue { id: u8, value: u32 },
    /// QoS > 0 without a packet identifier, or QoS 0 with one.
    PacketIdMismatch,
    /// DUP requested on a QoS 0 PUBLISH.
    DupWithQos0,
    /// A topic name that cannot be published to.
    InvalidTopicName { reason: &'static str },
    /// A topic filter that cannot be subscribed to.
    InvalidTopicFilter { reason: &'static str },
    /// A SUBSCRIBE or UNSUBSCRIBE with no entry.
    EmptyPayload { packet: PacketType },
    /// The packet (or a part of it) does not exist in this protocol version.
    NotInProtocol { what: &'static str },
    /// A reason code this packet may not carry.
    InvalidReasonCode { packet: PacketType, code: u8 },
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use EncodeError::*;
        match self {
            FieldTooLong { field, len } => {
                write!(
                    f,
                    "`{field}` is {len} bytes, longer than the 65535 MQTT allows"
                )
            }
            PacketTooLarge { size, max } => write!(
                f,
                "packet of {size} bytes is larger than the maximum packet size {max}"
            ),
            PropertyNotAllowed { id, context } => {
                write!(f, "property {id:#04x} is not allowed in {context}")
            }
            InvalidPropertyValue { id, value } => {
                write!(f, "property {id:#04x} cannot have the value {value}")
            }
            PacketIdMismatch => {
                f.write_str("a PUBLISH needs a packet id exactly when its QoS is 1 or 2")
            }
            DupWithQos0 => f.write_str("DUP cannot be set on a QoS 0 PUBLISH"),
            InvalidTopicName { reason } => write!(f, "invalid topic name: {reason}"),
            InvalidTopicFilter { reason } => write!(f, "invalid topic filter: {reason}"),
            EmptyPayload { packet } => write!(f, "{packet} needs at least one entry"),
            NotInProtocol { what } => write!(f, "{what} does not exist in MQTT 3.1.1"),
            InvalidReasonCode { packet, code } => {
                write!(f, "reason code {code:#04x} is not allowed in {packet}")
            }
        }
    }
}

impl std::error::Error for EncodeError {}
