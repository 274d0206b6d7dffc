//! PUBLISH (MQTT 3.1.1 §3.3, MQTT 5 §3.3).

use std::fmt;
use std::num::NonZeroU16;

use bytes::{Bytes, BytesMut};

use super::EncodeOptions;
use crate::error::{DecodeError, EncodeError};
use crate::properties::{Properties, PropertyContext};
use crate::string::MqttStr;
use crate::topic::is_plain_topic_name;
use crate::types::{PacketId, Protocol, QoS};
use crate::wire::{Reader, field_len};

/// An application message. The payload is its own `Bytes`: decoding slices it out of the
/// receive buffer, and [`Publish::encode_header`] hands it back instead of copying it.
#[derive(Clone, PartialEq, Eq)]
pub struct Publish {
    pub dup: bool,
    pub qos: QoS,
    pub retain: bool,
    /// Empty only in a decoded MQTT 5 PUBLISH that names its topic by alias alone.
    pub topic: MqttStr,
    /// Present exactly when `qos` is 1 or 2.
    pub packet_id: Option<PacketId>,
    /// MQTT 5 only; must be empty on a 3.1.1 connection.
    pub properties: Properties,
    pub payload: Bytes,
}

impl Publish {
    /// A QoS 0 message without properties.
    pub fn new(topic: MqttStr, payload: Bytes) -> Self {
        Publish {
            dup: false,
            qos: QoS::AtMostOnce,
            retain: false,
            topic,
            packet_id: None,
            properties: Properties::default(),
            payload,
        }
    }

    /// Reads everything but the payload, which starts at `r.position()` and runs to the end
    /// of the packet; the caller attaches it (moving the packet's `Bytes`, not slicing it).
    #[inline(always)]
    pub(crate) fn read_head(r: &mut Reader<'_>, flags: u8, v5: bool) -> Result<Self, DecodeError> {
        let dup = flags & 0b1000 != 0;
        let qos = QoS::from_u8((flags >> 1) & 0b11).ok_or(DecodeError::InvalidQos {
            field: "PUBLISH",
            value: 3,
        })?;
        let retain = flags & 1 != 0;
        if dup && qos == QoS::AtMostOnce {
            return Err(DecodeError::DupWithQos0);
        }
        let topic = r.topic_name()?;
        let packet_id = if qos == QoS::AtMostOnce {
            None
        } else {
            Some(r.packet_id()?)
        };
        let properties = if v5 {
            Properties::decode(r, PropertyContext::Publish)?
        } else {
            Properties::default()
        };
        if topic.is_empty() && properties.topic_alias.is_none() {
            return Err(DecodeError::InvalidTopicName {
                reason: "empty topic name without a topic alias",
            });
        }
        Ok(Publish {
            dup,
            qos,
            retain,
            topic,
            packet_id,
            properties,
            payload: Bytes::new(),
        })
    }

    /// Appends the fixed header, topic, packet id and properties to `out`, and returns the
    /// payload, which the caller writes after them (as its own buffer in a vectored write).
    /// Nothing is appended on error.
    pub fn encode_header(
        &self,
        out: &mut BytesMut,
        opts: &EncodeOptions,
    ) -> Result<Bytes, EncodeError> {
        self.encode_parts(out, opts, self.packet_id, self.dup, TopicOut::Plain)?;
        Ok(self.payload.clone())
    }

    /// The size of the whole packet as it would be encoded (for Maximum Packet Size checks).
    pub fn encoded_len(&self, protocol: Protocol) -> Result<usize, EncodeError> {
        let remaining = self.remaining_len(protocol, self.packet_id, TopicOut::Plain)?;
        Ok(
            1 + crate::varint::len(remaining.0.min(crate::varint::MAX as usize) as u32)
                + remaining.0,
        )
    }

    /// Remaining length and property-block length.
    #[inline]
    fn remaining_len(
        &self,
        protocol: Protocol,
        packet_id: Option<PacketId>,
        topic_out: TopicOut,
    ) -> Result<(usize, usize), EncodeError> {
        let topic_len = match topic_out {
            TopicOut::AliasOnly(_) => 0,
            _ => self.topic.len(),
        };
        let mut n = field_len(topic_len) + self.payload.len();
        if packet_id.is_some() {
            n += 2;
        }
        let mut props_len = 0;
        if protocol == Protocol::V5 {
            props_len = self
                .properties
                .check(PropertyContext::Publish, topic_out.alias())?;
            n += crate::varint::len(props_len as u32) + props_len;
        } else if !self.properties.is_empty() {
            return Err(EncodeError::NotInProtocol {
                what: "PUBLISH properties",
            });
        }
        Ok((n, props_len))
    }

    /// The encoder behind [`Publish::encode_header`], with the fields a session decides per
    /// connection: packet id, DUP, and how the topic goes out (plain, alias only, or both).
    /// Returns the packet size.
    #[inline]
    pub(crate) fn encode_parts(
        &self,
        out: &mut BytesMut,
        opts: &EncodeOptions,
        packet_id: Option<PacketId>,
        dup: bool,
        topic_out: TopicOut,
    ) -> Result<usize, EncodeError> {
        if packet_id.is_some() != (self.qos != QoS::AtMostOnce) {
            return Err(EncodeError::PacketIdMismatch);
        }
        if dup && self.qos == QoS::AtMostOnce {
            return Err(EncodeError::DupWithQos0);
        }
        let topic: &[u8] = match topic_out {
            TopicOut::AliasOnly(_) => &[],
            _ => self.topic.as_bytes(),
        };
        // One pass settles the usual topic; anything else gets the full rules.
        if !matches!(topic_out, TopicOut::AliasOnly(_)) && !is_plain_topic_name(topic) {
            if topic.is_empty() {
                let alias_in_props = matches!(topic_out, TopicOut::Plain)
                    && self.properties.topic_alias.is_some()
                    && opts.protocol == Protocol::V5;
                if !alias_in_props {
                    return Err(EncodeError::InvalidTopicName {
                        reason: "empty topic name",
                    });
                }
            } else if has_wildcard(topic) {
                return Err(EncodeError::InvalidTopicName {
                    reason: "wildcard character in a topic name",
                });
            }
        }
        let (remaining, props_len) = self.remaining_len(opts.protocol, packet_id, topic_out)?;
        let first = 0x30 | (u8::from(dup) << 3) | ((self.qos as u8) << 1) | u8::from(self.retain);
        if remaining > crate::varint::MAX as usize {
            return Err(EncodeError::PacketTooLarge {
                size: remaining + 5,
                max: crate::varint::MAX,
            });
        }
        // Fixed header and topic length in one small array: fewer appends, each of which
        // checks the buffer's capacity.
        let mut head = [0u8; 7];
        head[0] = first;
        let vlen = crate::varint::write_into(&mut head[1..5], remaining as u32);
        let total = 1 + vlen + remaining;
        if total > opts.max_packet_size as usize {
            return Err(EncodeError::PacketTooLarge {
                size: total,
                max: opts.max_packet_size,
            });
        }
        let topic_len = (topic.len() as u16).to_be_bytes();
        head[1 + vlen] = topic_len[0];
        head[2 + vlen] = topic_len[1];
        out.reserve(total - self.payload.len());
        out.extend_from_slice(&head[..3 + vlen]);
        out.extend_from_slice(topic);
        if let Some(id) = packet_id {
            out.extend_from_slice(&id.get().to_be_bytes());
        }
        if opts.protocol == Protocol::V5 {
            self.properties.put(out, props_len, topic_out.alias());
        }
        Ok(total)
    }
}

/// How a session sends the topic of a PUBLISH on MQTT 5 (§3.3.2.3.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TopicOut {
    /// The topic name as it is, with the struct's own topic alias property (if any).
    Plain,
    /// The topic name and a new alias for it.
    WithAlias(NonZeroU16),
    /// An empty topic name and an alias the broker already knows.
    AliasOnly(NonZeroU16),
}

impl TopicOut {
    fn alias(self) -> Option<Option<NonZeroU16>> {
        match self {
            TopicOut::Plain => None,
            TopicOut::WithAlias(a) | TopicOut::AliasOnly(a) => Some(Some(a)),
        }
    }
}

/// `+` or `#` anywhere (written as a fold so it vectorises; topics are short).
#[inline]
fn has_wildcard(topic: &[u8]) -> bool {
    topic
        .iter()
        .fold(false, |acc, &b| acc | (b == b'+') | (b == b'#'))
}

impl fmt::Debug for Publish {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Publish")
            .field("dup", &self.dup)
            .field("qos", &self.qos)
            .field("retain", &self.retain)
            .field("topic", &self.topic)
            .field("packet_id", &self.packet_id)
            .field("properties", &self.properties)
            .field("payload", &format_args!("<{} bytes>", self.payload.len()))
            .finish()
    }
}
