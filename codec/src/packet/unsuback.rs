//! UNSUBACK (MQTT 3.1.1 §3.11, MQTT 5 §3.11).

use bytes::{BufMut, BytesMut};

use super::reason_body::{check_codes, read_codes};
use super::{EncodeOptions, PacketType};
use crate::error::{DecodeError, EncodeError};
use crate::properties::{Properties, PropertyContext};
use crate::reason::ReasonCode;
use crate::types::{PacketId, Protocol};
use crate::wire::{Reader, put_fixed_header};

/// The answer to UNSUBSCRIBE. On 3.1.1 it carries only the packet id (`codes` is empty); on 5
/// one reason code per topic filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsubAck {
    pub packet_id: PacketId,
    pub properties: Properties,
    pub codes: Vec<ReasonCode>,
}

impl UnsubAck {
    pub(crate) fn read(r: &mut Reader<'_>, protocol: Protocol) -> Result<Self, DecodeError> {
        let packet_id = r.packet_id()?;
        if protocol == Protocol::V311 {
            return Ok(UnsubAck {
                packet_id,
                properties: Properties::default(),
                codes: Vec::new(),
            });
        }
        let properties = Properties::decode(r, PropertyContext::UnsubAck)?;
        let codes = read_codes(r, protocol)?;
        Ok(UnsubAck {
            packet_id,
            properties,
            codes,
        })
    }

    pub(crate) fn write(
        &self,
        out: &mut BytesMut,
        opts: &EncodeOptions,
    ) -> Result<usize, EncodeError> {
        if opts.protocol == Protocol::V311 {
            if !self.properties.is_empty() || !self.codes.is_empty() {
                return Err(EncodeError::NotInProtocol {
                    what: "UNSUBACK reason codes and properties",
                });
            }
            let total = put_fixed_header(out, 0xB0, 2, opts.max_packet_size, 0)?;
            out.put_u16(self.packet_id.get());
            return Ok(total);
        }
        check_codes(&self.codes, PacketType::UnsubAck, opts.protocol)?;
        let props_len = self.properties.check(PropertyContext::UnsubAck, None)?;
        let n = 2 + crate::varint::len(props_len as u32) + props_len + self.codes.len();
        let total = put_fixed_header(out, 0xB0, n, opts.max_packet_size, 0)?;
        out.put_u16(self.packet_id.get());
        self.properties.put(out, props_len, None);
        for c in &self.codes {
            out.put_u8(c.0);
        }
        Ok(total)
    }
}
