//! Shapes of reason codes shared by several packets: the "reason code, then properties" body
//! of MQTT 5 DISCONNECT and AUTH (§3.14.2, §3.15.2), where each part may be left out when it
//! is the default, and the list of codes that ends SUBACK and UNSUBACK (§3.9.3, §3.11.3).

use bytes::{BufMut, BytesMut};

use super::{EncodeOptions, PacketType};
use crate::error::{DecodeError, EncodeError};
use crate::properties::{Properties, PropertyContext};
use crate::reason::ReasonCode;
use crate::types::Protocol;
use crate::wire::{Reader, put_fixed_header};

/// Reads an optional reason code and optional properties (MQTT 5).
pub(crate) fn read_reason_and_properties(
    r: &mut Reader<'_>,
    ctx: PropertyContext,
) -> Result<(ReasonCode, Properties), DecodeError> {
    if r.remaining() == 0 {
        return Ok((ReasonCode::SUCCESS, Properties::default()));
    }
    let reason = ReasonCode(r.u8("reason code")?);
    if !reason.allowed_in(r.packet, Protocol::V5) {
        return Err(DecodeError::InvalidReasonCode {
            packet: r.packet,
            code: reason.0,
        });
    }
    let properties = if r.remaining() > 0 {
        Properties::decode(r, ctx)?
    } else {
        Properties::default()
    };
    Ok((reason, properties))
}

/// Writes a whole packet of that shape (MQTT 5), in its shortest form.
pub(crate) fn write_reason_and_properties(
    out: &mut BytesMut,
    opts: &EncodeOptions,
    packet: PacketType,
    reason: ReasonCode,
    properties: &Properties,
    ctx: PropertyContext,
) -> Result<usize, EncodeError> {
    let first = (packet as u8) << 4;
    if !reason.allowed_in(packet, opts.protocol) {
        return Err(EncodeError::InvalidReasonCode {
            packet,
            code: reason.0,
        });
    }
    let props_len = properties.check(ctx, None)?;
    if props_len == 0 {
        if reason == ReasonCode::SUCCESS {
            return put_fixed_header(out, first, 0, opts.max_packet_size, 0);
        }
        let total = put_fixed_header(out, first, 1, opts.max_packet_size, 0)?;
        out.put_u8(reason.0);
        return Ok(total);
    }
    let n = 1 + crate::varint::len(props_len as u32) + props_len;
    let total = put_fixed_header(out, first, n, opts.max_packet_size, 0)?;
    out.put_u8(reason.0);
    properties.put(out, props_len, None);
    Ok(total)
}

/// Reads the codes that fill the rest of a SUBACK or UNSUBACK: at least one, each allowed in
/// the packet.
pub(crate) fn read_codes(
    r: &mut Reader<'_>,
    protocol: Protocol,
) -> Result<Vec<ReasonCode>, DecodeError> {
    let mut codes = Vec::with_capacity(r.remaining());
    while r.remaining() > 0 {
        let code = ReasonCode(r.u8("reason code")?);
        if !code.allowed_in(r.packet, protocol) {
            return Err(DecodeError::InvalidReasonCode {
                packet: r.packet,
                code: code.0,
            });
        }
        codes.push(code);
    }
    if codes.is_empty() {
        return Err(DecodeError::EmptyPayload { packet: r.packet });
    }
    Ok(codes)
}

/// Checks a SUBACK or UNSUBACK code list before encoding it.
pub(crate) fn check_codes(
    codes: &[ReasonCode],
    packet: PacketType,
    protocol: Protocol,
) -> Result<(), EncodeError> {
    if codes.is_empty() {
        return Err(EncodeError::EmptyPayload { packet });
    }
    match codes.iter().find(|c| !c.allowed_in(packet, protocol)) {
        Some(c) => Err(EncodeError::InvalidReasonCode { packet, code: c.0 }),
        None => Ok(()),
    }
}
