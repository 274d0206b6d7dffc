//! SUBSCRIBE (MQTT 3.1.1 §3.8, MQTT 5 §3.8) and its subscription options.

use bytes::{BufMut, BytesMut};

use super::{EncodeOptions, PacketType};
use crate::error::{DecodeError, EncodeError};
use crate::properties::{Properties, PropertyContext};
use crate::string::MqttStr;
use crate::topic::{check_shared_filter, check_topic_filter};
use crate::types::{PacketId, Protocol, QoS};
use crate::wire::{Reader, field_len, put_binary, put_fixed_header};

/// Retain Handling (MQTT 5 §3.8.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RetainHandling {
    /// 0: send retained messages at the time of the subscribe.
    #[default]
    SendAtSubscribe = 0,
    /// 1: send them only if the subscription does not exist yet.
    SendIfNew = 1,
    /// 2: do not send them.
    DoNotSend = 2,
}

/// The options byte of one subscription. On 3.1.1 only `qos` exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SubscriptionOptions {
    pub qos: QoS,
    pub no_local: bool,
    pub retain_as_published: bool,
    pub retain_handling: RetainHandling,
}

impl SubscriptionOptions {
    fn from_byte(b: u8, v5: bool) -> Result<Self, DecodeError> {
        let reserved = if v5 { 0xC0 } else { 0xFC };
        if b & reserved != 0 {
            return Err(DecodeError::InvalidSubscriptionOptions(b));
        }
        let qos = QoS::from_u8(b & 0b11).ok_or(DecodeError::InvalidQos {
            field: "subscription",
            value: 3,
        })?;
        let retain_handling = match (b >> 4) & 0b11 {
            0 => RetainHandling::SendAtSubscribe,
            1 => RetainHandling::SendIfNew,
            2 => RetainHandling::DoNotSend,
            _ => return Err(DecodeError::InvalidSubscriptionOptions(b)),
        };
        Ok(SubscriptionOptions {
            qos,
            no_local: b & 0x04 != 0,
            retain_as_published: b & 0x08 != 0,
            retain_handling,
        })
    }

    fn to_byte(self, v5: bool) -> Result<u8, EncodeError> {
        let b = (self.qos as u8)
            | (u8::from(self.no_local) << 2)
            | (u8::from(self.retain_as_published) << 3)
            | ((self.retain_handling as u8) << 4);
        if !v5 && b & 0xFC != 0 {
            return Err(EncodeError::NotInProtocol {
                what: "subscription options other than QoS",
            });
        }
        Ok(b)
    }
}

/// One topic filter and its options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    pub filter: MqttStr,
    pub options: SubscriptionOptions,
}

/// A request to subscribe to one or more topic filters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribe {
    pub packet_id: PacketId,
    /// MQTT 5 only (Subscription Identifier, user properties).
    pub properties: Properties,
    pub subscriptions: Vec<Subscription>,
}

impl Subscribe {
    pub(crate) fn read(r: &mut Reader<'_>, v5: bool) -> Result<Self, DecodeError> {
        let packet_id = r.packet_id()?;
        let properties = if v5 {
            Properties::decode(r, PropertyContext::Subscribe)?
        } else {
            Properties::default()
        };
        let mut subscriptions = Vec::new();
        while r.remaining() > 0 {
            let filter = r.string("topic filter")?;
            check_topic_filter(filter.as_bytes())
                .map_err(|reason| DecodeError::InvalidTopicFilter { reason })?;
            // MQTT 5 §4.8.2: `$share/{ShareName}/{filter}` (MQTT-4.8.2-1, MQTT-4.8.2-2).
            let shared = v5
                && check_shared_filter(filter.as_bytes())
                    .map_err(|reason| DecodeError::InvalidTopicFilter { reason })?;
            let byte = r.u8("subscription options")?;
            let options = SubscriptionOptions::from_byte(byte, v5)?;
            // MQTT 5 §3.8.3.1: No Local on a shared subscription is a protocol error
            // (MQTT-3.8.3-4).
            if shared && options.no_local {
                return Err(DecodeError::InvalidSubscriptionOptions(byte));
            }
            subscriptions.push(Subscription { filter, options });
        }
        if subscriptions.is_empty() {
            return Err(DecodeError::EmptyPayload {
                packet: PacketType::Subscribe,
            });
        }
        Ok(Subscribe {
            packet_id,
            properties,
            subscriptions,
        })
    }

    pub(crate) fn write(
        &self,
        out: &mut BytesMut,
        opts: &EncodeOptions,
    ) -> Result<usize, EncodeError> {
        let v5 = opts.protocol == Protocol::V5;
        if self.subscriptions.is_empty() {
            return Err(EncodeError::EmptyPayload {
                packet: PacketType::Subscribe,
            });
        }
        let mut n = 2;
        let mut props_len = 0;
        if v5 {
            props_len = self.properties.check(PropertyContext::Subscribe, None)?;
            n += crate::varint::len(props_len as u32) + props_len;
        } else if !self.properties.is_empty() {
            return Err(EncodeError::NotInProtocol {
                what: "SUBSCRIBE properties",
            });
        }
        for s in &self.subscriptions {
            check_topic_filter(s.filter.as_bytes())
                .map_err(|reason| EncodeError::InvalidTopicFilter { reason })?;
            if v5
                && check_shared_filter(s.filter.as_bytes())
                    .map_err(|reason| EncodeError::InvalidTopicFilter { reason })?
                && s.options.no_local
            {
                return Err(EncodeError::InvalidTopicFilter {
                    reason: "No Local on a shared subscription (MQTT-3.8.3-4)",
                });
            }
            s.options.to_byte(v5)?;
            n += field_len(s.filter.len()) + 1;
        }
        let total = put_fixed_header(out, 0x82, n, opts.max_packet_size, 0)?;
        out.put_u16(self.packet_id.get());
        if v5 {
            self.properties.put(out, props_len, None);
        }
        for s in &self.subscriptions {
            put_binary(out, s.filter.as_bytes());
            out.put_u8(s.options.to_byte(v5)?);
        }
        Ok(total)
    }
}
