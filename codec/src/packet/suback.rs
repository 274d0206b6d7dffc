//! SUBACK (MQTT 3.1.1 §3.9, MQTT 5 §3.9).

use bytes::{BufMut, BytesMut};

use super::reason_body::{check_codes, read_codes};
use super::{EncodeOptions, PacketType};
use crate::error::{DecodeError, EncodeError};
use crate::properties::{Properties, PropertyContext};
use crate::reason::ReasonCode;
use crate::types::{PacketId, Protocol};
use crate::wire::{Reader, put_fixed_header};

/// The answer to SUBSCRIBE: one return (3.1.1) or reason (5) code per subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubAck {
    pub packet_id: PacketId,
    pub properties: Properties,
    pub codes: Vec<ReasonCode>,
}

impl SubAck {
    pub(crate) fn read(r: &mut Reader<'_>, protocol: Protocol) -> Result<Self, DecodeError> {
        let packet_id = r.packet_id()?;
        let properties = if protocol == Protocol::V5 {
            Properties::decode(r, PropertyContext::SubAck)?
        } else {
            Properties::default()
        };
        let codes = read_codes(r, protocol)?;
        Ok(SubAck {
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
        check_codes(&self.codes, PacketType::SubAck, opts.protocol)?;
        let mut n = 2 + self.codes.len();
        let mut props_len = 0;
        if opts.protocol == Protocol::V5 {
            props_len = self.properties.check(PropertyContext::SubAck, None)?;
            n += crate::varint::len(props_len as u32) + props_len;
        } else if !self.properties.is_empty() {
            return Err(EncodeError::NotInProtocol {
                what: "SUBACK properties",
            });
        }
        let total = put_fixed_header(out, 0x90, n, opts.max_packet_size, 0)?;
        out.put_u16(self.packet_id.get());
        if opts.protocol == Protocol::V5 {
            self.properties.put(out, props_len, None);
        }
        for c in &self.codes {
            out.put_u8(c.0);
        }
        Ok(total)
    }
}
