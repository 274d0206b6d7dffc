//! CONNACK (MQTT 3.1.1 §3.2, MQTT 5 §3.2).

use bytes::{BufMut, BytesMut};

use super::{EncodeOptions, PacketType};
use crate::error::{DecodeError, EncodeError};
use crate::properties::{Properties, PropertyContext};
use crate::reason::ReasonCode;
use crate::types::Protocol;
use crate::wire::{Reader, put_fixed_header};

/// The server's answer to CONNECT. On 3.1.1 `code` is the return code (0–5); on 5 the reason
/// code. The MQTT 5 properties carry the server's limits (Receive Maximum, Maximum Packet
/// Size, Topic Alias Maximum, Maximum QoS, Retain Available …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnAck {
    pub session_present: bool,
    pub code: ReasonCode,
    pub properties: Properties,
}

impl ConnAck {
    pub fn new(session_present: bool, code: ReasonCode) -> Self {
        ConnAck {
            session_present,
            code,
            properties: Properties::default(),
        }
    }

    /// A human-readable description of the code for this protocol version.
    pub fn describe(&self, protocol: Protocol) -> &'static str {
        match protocol {
            Protocol::V311 => self.code.v311_connack_name(),
            Protocol::V5 => self.code.name(),
        }
    }

    /// Whether the server accepted the connection.
    pub fn is_success(&self) -> bool {
        self.code.0 == 0
    }

    pub(crate) fn read(r: &mut Reader<'_>, protocol: Protocol) -> Result<Self, DecodeError> {
        let flags = r.u8("connect acknowledge flags")?;
        if flags & 0xFE != 0 {
            return Err(DecodeError::InvalidConnAckFlags(flags));
        }
        let code = r.u8("connect reason code")?;
        let code = ReasonCode(code);
        if !code.allowed_in(PacketType::ConnAck, protocol) {
            return Err(DecodeError::InvalidReasonCode {
                packet: PacketType::ConnAck,
                code: code.0,
            });
        }
        let session_present = flags & 1 != 0;
        if session_present && code.0 != 0 {
            // MQTT-3.2.2-4 (3.1.1), MQTT-3.2.2-6 (5).
            return Err(DecodeError::InvalidConnAckFlags(flags));
        }
        let properties = if protocol == Protocol::V5 {
            Properties::decode(r, PropertyContext::ConnAck)?
        } else {
            Properties::default()
        };
        Ok(ConnAck {
            session_present,
            code,
            properties,
        })
    }

    pub(crate) fn write(
        &self,
        out: &mut BytesMut,
        opts: &EncodeOptions,
    ) -> Result<usize, EncodeError> {
        if !self.code.allowed_in(PacketType::ConnAck, opts.protocol) {
            return Err(EncodeError::InvalidReasonCode {
                packet: PacketType::ConnAck,
                code: self.code.0,
            });
        }
        let flags = u8::from(self.session_present && self.code.0 == 0);
        if opts.protocol == Protocol::V311 {
            if !self.properties.is_empty() {
                return Err(EncodeError::NotInProtocol {
                    what: "CONNACK properties",
                });
            }
            let total = put_fixed_header(out, 0x20, 2, opts.max_packet_size, 0)?;
            out.put_u8(flags);
            out.put_u8(self.code.0);
            return Ok(total);
        }
        let props_len = self.properties.check(PropertyContext::ConnAck, None)?;
        let remaining = 2 + crate::varint::len(props_len as u32) + props_len;
        let total = put_fixed_header(out, 0x20, remaining, opts.max_packet_size, 0)?;
        out.put_u8(flags);
        out.put_u8(self.code.0);
        self.properties.put(out, props_len, None);
        Ok(total)
    }
}
