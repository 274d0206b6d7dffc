//! The fifteen MQTT control packets (§2.1.2), one file per packet kind, and the two entry
//! points: [`decode`] (incremental) and [`Packet::encode`].

use std::fmt;

use bytes::{Buf, Bytes, BytesMut};

use crate::error::{DecodeError, EncodeError};
use crate::types::{PacketId, Protocol};
use crate::varint;
use crate::wire::Reader;

mod ack;
mod auth;
mod connack;
mod connect;
mod disconnect;
mod publish;
mod reason_body;
mod suback;
mod subscribe;
mod unsuback;
mod unsubscribe;

pub use ack::Ack;
pub use auth::Auth;
pub use connack::ConnAck;
pub use connect::{Connect, Will};
pub use disconnect::Disconnect;
pub use publish::Publish;
pub(crate) use publish::TopicOut;
pub use suback::SubAck;
pub use subscribe::{RetainHandling, Subscribe, Subscription, SubscriptionOptions};
pub use unsuback::UnsubAck;
pub use unsubscribe::Unsubscribe;

/// The control packet type: the high nibble of the first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PacketType {
    Connect = 1,
    ConnAck = 2,
    Publish = 3,
    PubAck = 4,
    PubRec = 5,
    PubRel = 6,
    PubComp = 7,
    Subscribe = 8,
    SubAck = 9,
    Unsubscribe = 10,
    UnsubAck = 11,
    PingReq = 12,
    PingResp = 13,
    Disconnect = 14,
    Auth = 15,
}

impl PacketType {
    fn from_nibble(n: u8) -> Option<PacketType> {
        use PacketType::*;
        Some(match n {
            1 => Connect,
            2 => ConnAck,
            3 => Publish,
            4 => PubAck,
            5 => PubRec,
            6 => PubRel,
            7 => PubComp,
            8 => Subscribe,
            9 => SubAck,
            10 => Unsubscribe,
            11 => UnsubAck,
            12 => PingReq,
            13 => PingResp,
            14 => Disconnect,
            15 => Auth,
            _ => return None,
        })
    }

    /// The flags the fixed header must carry (§2.1.3 table 2-2); PUBLISH has its own.
    fn required_flags(self) -> u8 {
        match self {
            PacketType::PubRel | PacketType::Subscribe | PacketType::Unsubscribe => 0b0010,
            _ => 0,
        }
    }

    pub fn name(self) -> &'static str {
        use PacketType::*;
        match self {
            Connect => "CONNECT",
            ConnAck => "CONNACK",
            Publish => "PUBLISH",
            PubAck => "PUBACK",
            PubRec => "PUBREC",
            PubRel => "PUBREL",
            PubComp => "PUBCOMP",
            Subscribe => "SUBSCRIBE",
            SubAck => "SUBACK",
            Unsubscribe => "UNSUBSCRIBE",
            UnsubAck => "UNSUBACK",
            PingReq => "PINGREQ",
            PingResp => "PINGRESP",
            Disconnect => "DISCONNECT",
            Auth => "AUTH",
        }
    }
}

impl fmt::Display for PacketType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A decoded or to-be-encoded control packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet {
    /// Boxed: it is the largest packet and the rarest.
    Connect(Box<Connect>),
    ConnAck(ConnAck),
    Publish(Publish),
    PubAck(Ack),
    PubRec(Ack),
    PubRel(Ack),
    PubComp(Ack),
    Subscribe(Subscribe),
    SubAck(SubAck),
    Unsubscribe(Unsubscribe),
    UnsubAck(UnsubAck),
    PingReq,
    PingResp,
    Disconnect(Disconnect),
    /// MQTT 5 only.
    Auth(Auth),
}

/// How to decode: the connection's protocol and the largest packet this side accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeOptions {
    /// The protocol of the connection. CONNECT is decoded whatever this says (it carries its
    /// own protocol level), so a server may decode the first packet with either value.
    pub protocol: Protocol,
    /// The Maximum Packet Size this side accepts (fixed header included); a larger packet is
    /// an error as soon as its fixed header is read, before its body arrives.
    pub max_packet_size: u32,
}

impl DecodeOptions {
    pub fn new(protocol: Protocol) -> Self {
        DecodeOptions {
            protocol,
            max_packet_size: MAX_PACKET_SIZE,
        }
    }
}

/// How to encode: the connection's protocol and the peer's Maximum Packet Size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodeOptions {
    pub protocol: Protocol,
    /// The peer's Maximum Packet Size; a larger packet is an error, not sent.
    pub max_packet_size: u32,
}

impl EncodeOptions {
    pub fn new(protocol: Protocol) -> Self {
        EncodeOptions {
            protocol,
            max_packet_size: MAX_PACKET_SIZE,
        }
    }
}

/// The largest packet the wire format can express: 1 + 4 + 268,435,455 bytes.
pub const MAX_PACKET_SIZE: u32 = 1 + 4 + varint::MAX;

/// The result of a decode attempt. (Returned, never stored, so the size difference of the
/// variants costs nothing.)
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)]
pub enum Decoded {
    /// A whole packet; its bytes have been taken from the buffer.
    Packet(Packet),
    /// The buffer holds only part of a packet: at least `needed` more bytes must arrive
    /// (exactly `needed` once the fixed header is complete). Nothing was consumed.
    Incomplete { needed: usize },
}

/// The parsed fixed header of the packet at the start of a buffer.
#[derive(Debug, Clone, Copy)]
struct FixedHeader {
    kind: PacketType,
    flags: u8,
    header_len: usize,
    total: usize,
}

/// Reads the fixed header. `Ok(Err(needed))` when the buffer is too short for it or for the
/// whole packet.
#[inline(always)]
fn fixed_header(
    data: &[u8],
    opts: &DecodeOptions,
) -> Result<Result<FixedHeader, usize>, DecodeError> {
    let Some(&first) = data.first() else {
        return Ok(Err(2));
    };
    let nibble = first >> 4;
    let flags = first & 0x0f;
    let kind = match PacketType::from_nibble(nibble) {
        Some(PacketType::Auth) if opts.protocol == Protocol::V311 => {
            return Err(DecodeError::InvalidPacketType(nibble));
        }
        Some(k) => k,
        None => return Err(DecodeError::InvalidPacketType(nibble)),
    };
    if kind != PacketType::Publish && flags != kind.required_flags() {
        return Err(DecodeError::ReservedFlags {
            packet: kind,
            flags,
        });
    }
    let (remaining, len_bytes) = match varint::read(&data[1..], "remaining length")? {
        Some(v) => v,
        None => return Ok(Err(1)),
    };
    let header_len = 1 + len_bytes;
    let total = header_len + remaining as usize;
    if total > opts.max_packet_size as usize {
        return Err(DecodeError::PacketTooLarge {
            size: total,
            max: opts.max_packet_size,
        });
    }
    if data.len() < total {
        return Ok(Err(total - data.len()));
    }
    Ok(Ok(FixedHeader {
        kind,
        flags,
        header_len,
        total,
    }))
}

/// Whether a packet kind's fields can be sliced out of the shared buffer; the others
/// (acknowledgements and pings, the hot receive path) are parsed in place, which costs no
/// allocation and no reference count.
fn needs_owner(kind: PacketType) -> bool {
    !matches!(
        kind,
        PacketType::PubAck
            | PacketType::PubRec
            | PacketType::PubRel
            | PacketType::PubComp
            | PacketType::PingReq
            | PacketType::PingResp
    )
}

/// The 4-byte short form of PUBACK, PUBREC, PUBREL and PUBCOMP (remaining length 2: on MQTT
/// 5 it means reason 0x00 and no properties, §3.4.2.1): the packets a publisher receives most,
/// decoded without the general machinery. `None` sends anything else, including the error
/// cases, down the general path.
#[inline(always)]
fn short_ack(data: &[u8], opts: &DecodeOptions) -> Option<Packet> {
    let &[first, 2, hi, lo, ..] = data else {
        return None;
    };
    if opts.max_packet_size < 4 {
        return None;
    }
    let ack = Ack::new(PacketId::new(u16::from_be_bytes([hi, lo]))?);
    match first {
        0x40 => Some(Packet::PubAck(ack)),
        0x50 => Some(Packet::PubRec(ack)),
        0x62 => Some(Packet::PubRel(ack)),
        0x70 => Some(Packet::PubComp(ack)),
        _ => None,
    }
}

/// Decodes one packet from the front of `src`, consuming its bytes when it is whole.
/// A partial packet is never an error: it answers [`Decoded::Incomplete`].
/// After an error the buffer's content is unspecified and the connection must be closed.
#[inline]
pub fn decode(src: &mut BytesMut, opts: &DecodeOptions) -> Result<Decoded, DecodeError> {
    if let Some(packet) = short_ack(src, opts) {
        src.advance(4);
        return Ok(Decoded::Packet(packet));
    }
    decode_general(src, opts)
}

/// Everything but the short acknowledgements, out of line so that the fast path above stays
/// a few instructions with no stack frame to set up.
#[inline(never)]
fn decode_general(src: &mut BytesMut, opts: &DecodeOptions) -> Result<Decoded, DecodeError> {
    let h = match fixed_header(src, opts)? {
        Ok(h) => h,
        Err(needed) => return Ok(Decoded::Incomplete { needed }),
    };
    if h.kind == PacketType::Publish {
        let bytes = src.split_to(h.total).freeze();
        return decode_publish(&h, bytes, opts.protocol).map(Decoded::Packet);
    }
    if needs_owner(h.kind) {
        let bytes = src.split_to(h.total).freeze();
        let packet = decode_body(&h, &bytes, Some(&bytes), opts.protocol)?;
        Ok(Decoded::Packet(packet))
    } else {
        let packet = decode_body(&h, &src[..h.total], None, opts.protocol)?;
        src.advance(h.total);
        Ok(Decoded::Packet(packet))
    }
}

/// Like [`decode`] for a `Bytes` buffer (the front packet is split off `src`).
#[inline]
pub fn decode_bytes(src: &mut Bytes, opts: &DecodeOptions) -> Result<Decoded, DecodeError> {
    if let Some(packet) = short_ack(src, opts) {
        src.advance(4);
        return Ok(Decoded::Packet(packet));
    }
    decode_bytes_general(src, opts)
}

#[inline(never)]
fn decode_bytes_general(src: &mut Bytes, opts: &DecodeOptions) -> Result<Decoded, DecodeError> {
    let h = match fixed_header(src, opts)? {
        Ok(h) => h,
        Err(needed) => return Ok(Decoded::Incomplete { needed }),
    };
    let bytes = src.split_to(h.total);
    if h.kind == PacketType::Publish {
        return decode_publish(&h, bytes, opts.protocol).map(Decoded::Packet);
    }
    decode_body(&h, &bytes, Some(&bytes), opts.protocol).map(Decoded::Packet)
}

/// PUBLISH: the topic is sliced out of the packet and the packet's own `Bytes`, advanced past
/// the header, becomes the payload.
#[inline(always)]
fn decode_publish(
    h: &FixedHeader,
    mut bytes: Bytes,
    protocol: Protocol,
) -> Result<Packet, DecodeError> {
    let (mut publish, start) = {
        let mut r = Reader::new(&bytes, h.header_len, Some(&bytes), h.kind);
        let p = Publish::read_head(&mut r, h.flags, protocol == Protocol::V5)?;
        (p, r.position())
    };
    bytes.advance(start);
    publish.payload = bytes;
    Ok(Packet::Publish(publish))
}

#[inline(always)]
fn decode_body(
    h: &FixedHeader,
    data: &[u8],
    owner: Option<&Bytes>,
    protocol: Protocol,
) -> Result<Packet, DecodeError> {
    let mut r = Reader::new(data, h.header_len, owner, h.kind);
    let v5 = protocol == Protocol::V5;
    let packet = match h.kind {
        PacketType::Connect => Packet::Connect(Box::new(Connect::read(&mut r)?)),
        PacketType::ConnAck => Packet::ConnAck(ConnAck::read(&mut r, protocol)?),
        PacketType::Publish => {
            let mut p = Publish::read_head(&mut r, h.flags, v5)?;
            p.payload = r.rest();
            Packet::Publish(p)
        }
        PacketType::PubAck => Packet::PubAck(Ack::read(&mut r, protocol)?),
        PacketType::PubRec => Packet::PubRec(Ack::read(&mut r, protocol)?),
        PacketType::PubRel => Packet::PubRel(Ack::read(&mut r, protocol)?),
        PacketType::PubComp => Packet::PubComp(Ack::read(&mut r, protocol)?),
        PacketType::Subscribe => Packet::Subscribe(Subscribe::read(&mut r, v5)?),
        PacketType::SubAck => Packet::SubAck(SubAck::read(&mut r, protocol)?),
        PacketType::Unsubscribe => Packet::Unsubscribe(Unsubscribe::read(&mut r, v5)?),
        PacketType::UnsubAck => Packet::UnsubAck(UnsubAck::read(&mut r, protocol)?),
        PacketType::PingReq => Packet::PingReq,
        PacketType::PingResp => Packet::PingResp,
        PacketType::Disconnect => Packet::Disconnect(Disconnect::read(&mut r, protocol)?),
        PacketType::Auth => Packet::Auth(Auth::read(&mut r)?),
    };
    r.finish()?;
    Ok(packet)
}

impl Packet {
    pub fn packet_type(&self) -> PacketType {
        match self {
            Packet::Connect(_) => PacketType::Connect,
            Packet::ConnAck(_) => PacketType::ConnAck,
            Packet::Publish(_) => PacketType::Publish,
            Packet::PubAck(_) => PacketType::PubAck,
            Packet::PubRec(_) => PacketType::PubRec,
            Packet::PubRel(_) => PacketType::PubRel,
            Packet::PubComp(_) => PacketType::PubComp,
            Packet::Subscribe(_) => PacketType::Subscribe,
            Packet::SubAck(_) => PacketType::SubAck,
            Packet::Unsubscribe(_) => PacketType::Unsubscribe,
            Packet::UnsubAck(_) => PacketType::UnsubAck,
            Packet::PingReq => PacketType::PingReq,
            Packet::PingResp => PacketType::PingResp,
            Packet::Disconnect(_) => PacketType::Disconnect,
            Packet::Auth(_) => PacketType::Auth,
        }
    }

    /// Appends the whole packet to `out`, payload included (a PUBLISH payload is copied; use
    /// [`Publish::encode_header`] to keep it as its own buffer). Returns the packet size.
    /// On error nothing is appended.
    pub fn encode(&self, out: &mut BytesMut, opts: &EncodeOptions) -> Result<usize, EncodeError> {
        let start = out.len();
        let res = match self {
            Packet::Connect(p) => p.write(out, opts),
            Packet::ConnAck(p) => p.write(out, opts),
            Packet::Publish(p) => p.encode_header(out, opts).map(|payload| {
                out.extend_from_slice(&payload);
                out.len() - start
            }),
            Packet::PubAck(p) => p.write(out, opts, PacketType::PubAck),
            Packet::PubRec(p) => p.write(out, opts, PacketType::PubRec),
            Packet::PubRel(p) => p.write(out, opts, PacketType::PubRel),
            Packet::PubComp(p) => p.write(out, opts, PacketType::PubComp),
            Packet::Subscribe(p) => p.write(out, opts),
            Packet::SubAck(p) => p.write(out, opts),
            Packet::Unsubscribe(p) => p.write(out, opts),
            Packet::UnsubAck(p) => p.write(out, opts),
            Packet::PingReq => crate::wire::put_fixed_header(out, 0xC0, 0, opts.max_packet_size, 0),
            Packet::PingResp => {
                crate::wire::put_fixed_header(out, 0xD0, 0, opts.max_packet_size, 0)
            }
            Packet::Disconnect(p) => p.write(out, opts),
            Packet::Auth(p) => p.write(out, opts),
        };
        if res.is_err() {
            out.truncate(start);
        }
        res
    }
}
