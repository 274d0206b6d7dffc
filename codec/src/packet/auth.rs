//! AUTH (MQTT 5 §3.15): extended authentication exchanges. It does not exist in 3.1.1.

use bytes::{BufMut, BytesMut};

use super::{EncodeOptions, PacketType};
use crate::error::{DecodeError, EncodeError};
use crate::properties::{Properties, PropertyContext};
use crate::reason::ReasonCode;
use crate::types::Protocol;
use crate::wire::{Reader, put_fixed_header};

/// One step of an enhanced authentication exchange.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Auth {
    pub reason: ReasonCode,
    pub properties: Properties,
}

impl Auth {
    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let mut a = Auth::default();
        if r.remaining() == 0 {
            return Ok(a);
        }
        a.reason = ReasonCode(r.u8("reason code")?);
        if !a.reason.allowed_in(PacketType::Auth, Protocol::V5) {
            return Err(DecodeError::InvalidReasonCode {
                packet: PacketType::Auth,
                code: a.reason.0,
            });
        }
        if r.remaining() > 0 {
            a.properties = Properties::decode(r, PropertyContext::Auth)?;
        }
        Ok(a)
    }

    pub(crate) fn write(
        &self,
        out: &mut BytesMut,
        opts: &EncodeOptions,
    ) -> Result<usize, EncodeError> {
        if opts.protocol == Protocol::V311 {
            return Err(EncodeError::NotInProtocol { what: "AUTH" });
        }
        if !self.reason.allowed_in(PacketType::Auth, opts.protocol) {
            return Err(EncodeError::InvalidReasonCode {
                packet: PacketType::Auth,
                code: self.reason.0,
            });
        }
        let props_len = self.properties.check(PropertyContext::Auth, None)?;
        if props_len == 0 && self.reason.0 == 0 {
            return put_fixed_header(out, 0xF0, 0, opts.max_packet_size, 0);
        }
        let n = 1 + crate::varint::len(props_len as u32) + props_len;
        let total = put_fixed_header(out, 0xF0, n, opts.max_packet_size, 0)?;
        out.put_u8(self.reason.0);
        self.properties.put(out, props_len, None);
        Ok(total)
    }
}
