//! DISCONNECT (MQTT 3.1.1 §3.14, MQTT 5 §3.14).

use bytes::BytesMut;

use super::reason_body::{read_reason_and_properties, write_reason_and_properties};
use super::{EncodeOptions, PacketType};
use crate::error::{DecodeError, EncodeError};
use crate::properties::{Properties, PropertyContext};
use crate::reason::ReasonCode;
use crate::types::Protocol;
use crate::wire::{Reader, put_fixed_header};

/// The last packet of a connection; on MQTT 5 either side may send it, with a reason.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Disconnect {
    pub reason: ReasonCode,
    pub properties: Properties,
}

impl Disconnect {
    pub(crate) fn read(r: &mut Reader<'_>, protocol: Protocol) -> Result<Self, DecodeError> {
        let mut d = Disconnect::default();
        if protocol == Protocol::V311 || r.remaining() == 0 {
            // §3.14.2.1: a remaining length of 0 means Normal disconnection.
            return Ok(d);
        }
        (d.reason, d.properties) = read_reason_and_properties(r, PropertyContext::Disconnect)?;
        Ok(d)
    }

    pub(crate) fn write(
        &self,
        out: &mut BytesMut,
        opts: &EncodeOptions,
    ) -> Result<usize, EncodeError> {
        if opts.protocol == Protocol::V311 {
            if self.reason.0 != 0 || !self.properties.is_empty() {
                return Err(EncodeError::NotInProtocol {
                    what: "a DISCONNECT reason code or properties",
                });
            }
            return put_fixed_header(out, 0xE0, 0, opts.max_packet_size, 0);
        }
        write_reason_and_properties(
            out,
            opts,
            PacketType::Disconnect,
            self.reason,
            &self.properties,
            PropertyContext::Disconnect,
        )
    }
}
