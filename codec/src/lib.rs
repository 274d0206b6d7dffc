//! # spillway-codec
//!
//! A sans-IO codec for MQTT 3.1.1 and MQTT 5.0, and the client session state machine that the
//! Spillway MQTT sink drives. It depends on `bytes` and nothing else: no runtime, no sockets,
//! no clock (time is an argument).
//!
//! - [`decode`] reads one packet from the front of a buffer, or says how many more bytes it
//!   needs; malformed input is a [`DecodeError`] naming the rule it broke.
//! - [`Packet::encode`] appends a packet to a `BytesMut`; [`Publish::encode_header`] appends only
//!   the header and hands the payload back as its own `Bytes`, so a payload is never copied.
//! - [`Outbound`] gathers headers and payloads into the chunk list of a vectored write.
//! - [`session::Session`] tracks the packet-id window, the QoS 1/2 flows, retransmission after
//!   a reconnect, keep-alive and topic aliases.

pub mod error;
pub mod outbound;
pub mod packet;
pub mod properties;
pub mod reason;
pub mod session;
pub mod string;
pub mod topic;
pub mod types;
pub mod varint;
mod wire;

pub use error::{DecodeError, EncodeError};
pub use outbound::Outbound;
pub use packet::{
    Ack, Auth, ConnAck, Connect, DecodeOptions, Decoded, Disconnect, EncodeOptions,
    MAX_PACKET_SIZE, Packet, PacketType, Publish, RetainHandling, SubAck, Subscribe, Subscription,
    SubscriptionOptions, UnsubAck, Unsubscribe, Will, decode, decode_bytes,
};
pub use properties::{Properties, PropertyContext, PropertyFields};
pub use reason::ReasonCode;
pub use string::{MqttStr, StringError};
pub use types::{PacketId, Protocol, QoS};
