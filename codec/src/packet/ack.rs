//! PUBACK, PUBREC, PUBREL and PUBCOMP (§3.4–§3.7): a packet id and, on MQTT 5, an optional
//! reason code and properties. The four share a layout, so they share this file.

use bytes::{BufMut, BytesMut};

use super::{EncodeOptions, PacketType};
use crate::error::{DecodeError, EncodeError};
use crate::properties::{Properties, PropertyContext};
use crate::reason::ReasonCode;
use crate::types::{PacketId, Protocol};
use crate::wire::{Reader, put_fixed_header};

/// The body of PUBACK, PUBREC, PUBREL and PUBCOMP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    pub packet_id: PacketId,
    /// Always success on MQTT 3.1.1.
    pub reason: ReasonCode,
    pub properties: Properties,
}

fn context(kind: PacketType) -> PropertyContext {
    match kind {
        PacketType::PubAck => PropertyContext::PubAck,
        PacketType::PubRec => PropertyContext::PubRec,
        PacketType::PubRel => PropertyContext::PubRel,
        _ => PropertyContext::PubComp,
    }
}

impl Ack {
    /// A successful acknowledgement without properties.
    pub fn new(packet_id: PacketId) -> Self {
        Ack {
            packet_id,
            reason: ReasonCode::SUCCESS,
            properties: Properties::default(),
        }
    }

    #[inline(always)]
    pub(crate) fn read(r: &mut Reader<'_>, protocol: Protocol) -> Result<Self, DecodeError> {
        let packet_id = r.packet_id()?;
        let mut ack = Ack::new(packet_id);
        if protocol == Protocol::V5 && r.remaining() > 0 {
            // §3.4.2.1: the reason code may be left out when it is 0x00 and there are no
            // properties; the property length may be left out when there are none.
            let code = r.u8("reason code")?;
            ack.reason = ReasonCode(code);
            // A failure code (0x80 or more) outside PUBACK's and PUBREC's lists is taken for
            // what it says, the message's refusal: stock brokers send some (mosquitto 2.0
            // answers an oversized PUBLISH with PUBACK 0x95, Packet too large). See
            // [`ReasonCode::off_list`].
            let refusal = ack.reason.is_error()
                && matches!(r.packet, PacketType::PubAck | PacketType::PubRec);
            if !refusal && !ack.reason.allowed_in(r.packet, protocol) {
                return Err(DecodeError::InvalidReasonCode {
                    packet: r.packet,
                    code,
                });
            }
            if r.remaining() > 0 {
                ack.properties = Properties::decode(r, context(r.packet))?;
            }
        }
        Ok(ack)
    }

    pub(crate) fn write(
        &self,
        out: &mut BytesMut,
        opts: &EncodeOptions,
        kind: PacketType,
    ) -> Result<usize, EncodeError> {
        let first = ((kind as u8) << 4)
            | if kind == PacketType::PubRel {
                0b0010
            } else {
                0
            };
        // What the decoder takes it writes: an off-list failure code in PUBACK or PUBREC
        // (a refusal as some brokers send it) included.
        let refusal = opts.protocol == Protocol::V5
            && self.reason.is_error()
            && matches!(kind, PacketType::PubAck | PacketType::PubRec);
        if !refusal && !self.reason.allowed_in(kind, opts.protocol) {
            return Err(EncodeError::InvalidReasonCode {
                packet: kind,
                code: self.reason.0,
            });
        }
        if opts.protocol == Protocol::V311 {
            if !self.properties.is_empty() {
                return Err(EncodeError::NotInProtocol {
                    what: "acknowledgement properties",
                });
            }
            let total = put_fixed_header(out, first, 2, opts.max_packet_size, 0)?;
            out.put_u16(self.packet_id.get());
            return Ok(total);
        }
        let props_len = self.properties.check(context(kind), None)?;
        if props_len == 0 && self.reason == ReasonCode::SUCCESS {
            let total = put_fixed_header(out, first, 2, opts.max_packet_size, 0)?;
            out.put_u16(self.packet_id.get());
            return Ok(total);
        }
        if props_len == 0 {
            let total = put_fixed_header(out, first, 3, opts.max_packet_size, 0)?;
            out.put_u16(self.packet_id.get());
            out.put_u8(self.reason.0);
            return Ok(total);
        }
        let remaining = 3 + crate::varint::len(props_len as u32) + props_len;
        let total = match put_fixed_header(out, first, remaining, opts.max_packet_size, 0) {
            Ok(t) => t,
            // §3.4.2.2.2: the reason string and user properties must be left out rather than
            // exceed the receiver's Maximum Packet Size.
            Err(EncodeError::PacketTooLarge { .. }) => {
                let total = put_fixed_header(out, first, 3, opts.max_packet_size, 0)?;
                out.put_u16(self.packet_id.get());
                out.put_u8(self.reason.0);
                return Ok(total);
            }
            Err(e) => return Err(e),
        };
        out.put_u16(self.packet_id.get());
        out.put_u8(self.reason.0);
        self.properties.put(out, props_len, None);
        Ok(total)
    }
}
