//! UNSUBSCRIBE (MQTT 3.1.1 §3.10, MQTT 5 §3.10).

use bytes::{BufMut, BytesMut};

use super::{EncodeOptions, PacketType};
use crate::error::{DecodeError, EncodeError};
use crate::properties::{Properties, PropertyContext};
use crate::string::MqttStr;
use crate::topic::{check_shared_filter, check_topic_filter};
use crate::types::{PacketId, Protocol};
use crate::wire::{Reader, field_len, put_binary, put_fixed_header};

/// A request to remove one or more subscriptions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsubscribe {
    pub packet_id: PacketId,
    pub properties: Properties,
    pub filters: Vec<MqttStr>,
}

impl Unsubscribe {
    pub(crate) fn read(r: &mut Reader<'_>, v5: bool) -> Result<Self, DecodeError> {
        let packet_id = r.packet_id()?;
        let properties = if v5 {
            Properties::decode(r, PropertyContext::Unsubscribe)?
        } else {
            Properties::default()
        };
        let mut filters = Vec::new();
        while r.remaining() > 0 {
            let filter = r.string("topic filter")?;
            check_topic_filter(filter.as_bytes())
                .map_err(|reason| DecodeError::InvalidTopicFilter { reason })?;
            if v5 {
                // MQTT 5 §4.8.2 (MQTT-4.8.2-1, MQTT-4.8.2-2).
                check_shared_filter(filter.as_bytes())
                    .map_err(|reason| DecodeError::InvalidTopicFilter { reason })?;
            }
            filters.push(filter);
        }
        if filters.is_empty() {
            return Err(DecodeError::EmptyPayload {
                packet: PacketType::Unsubscribe,
            });
        }
        Ok(Unsubscribe {
            packet_id,
            properties,
            filters,
        })
    }

    pub(crate) fn write(
        &self,
        out: &mut BytesMut,
        opts: &EncodeOptions,
    ) -> Result<usize, EncodeError> {
        if self.filters.is_empty() {
            return Err(EncodeError::EmptyPayload {
                packet: PacketType::Unsubscribe,
            });
        }
        let mut n = 2;
        let mut props_len = 0;
        if opts.protocol == Protocol::V5 {
            props_len = self.properties.check(PropertyContext::Unsubscribe, None)?;
            n += crate::varint::len(props_len as u32) + props_len;
        } else if !self.properties.is_empty() {
            return Err(EncodeError::NotInProtocol {
                what: "UNSUBSCRIBE properties",
            });
        }
        for f in &self.filters {
            check_topic_filter(f.as_bytes())
                .map_err(|reason| EncodeError::InvalidTopicFilter { reason })?;
            if opts.protocol == Protocol::V5 {
                check_shared_filter(f.as_bytes())
                    .map_err(|reason| EncodeError::InvalidTopicFilter { reason })?;
            }
            n += field_len(f.len());
        }
        let total = put_fixed_header(out, 0xA2, n, opts.max_packet_size, 0)?;
        out.put_u16(self.packet_id.get());
        if opts.protocol == Protocol::V5 {
            self.properties.put(out, props_len, None);
        }
        for f in &self.filters {
            put_binary(out, f.as_bytes());
        }
        Ok(total)
    }
}
