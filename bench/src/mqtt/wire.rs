//! The hot path of the bench's own MQTT endpoints (the discard broker and the counting
//! subscriber): a frame scanner that reads a fixed header, the PUBLISH flags and the packet
//! id in place, and the 4-byte acknowledgements written back. Everything else (CONNECT,
//! CONNACK, SUBSCRIBE, SUBACK) goes through `spillway_codec` once per connection.
//!
//! Scanning in place rather than decoding each PUBLISH with the codec keeps these endpoints
//! cheap (no `Bytes` per message), so that the client under test, not the bench, sets the pace.

use std::fmt;

/// PUBLISH, the high nibble of the first byte.
pub const PUBLISH: u8 = 3;
pub const PUBREL: u8 = 6;
pub const PINGREQ: u8 = 12;
pub const DISCONNECT: u8 = 14;

/// The largest packet the endpoints accept (fixed header included): far above a 100-byte
/// message, and a bound on what a peer can make them buffer.
pub const MAX_PACKET: usize = 1 << 20;

/// Why a byte stream is not MQTT the endpoints can follow; the connection is closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// A remaining length of more than four bytes.
    BadLength,
    /// A packet larger than [`MAX_PACKET`].
    TooLarge(usize),
    /// PUBLISH with QoS 3, or without room for its topic or packet id.
    BadPublish(&'static str),
    /// A packet id of zero.
    ZeroPacketId,
    /// A packet kind or flags this endpoint does not take at this point.
    Unexpected(u8),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::BadLength => f.write_str("malformed remaining length"),
            WireError::TooLarge(n) => write!(f, "packet of {n} bytes is too large"),
            WireError::BadPublish(why) => write!(f, "malformed PUBLISH: {why}"),
            WireError::ZeroPacketId => f.write_str("packet id 0"),
            WireError::Unexpected(b) => write!(f, "unexpected packet (first byte {b:#04x})"),
        }
    }
}

impl std::error::Error for WireError {}

/// One whole packet at the front of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// The first byte: kind (high nibble) and flags.
    pub first: u8,
    /// Bytes of the fixed header (1 + the remaining-length bytes).
    pub header_len: usize,
    /// Bytes of the whole packet.
    pub total: usize,
}

impl Frame {
    pub fn kind(&self) -> u8 {
        self.first >> 4
    }

    /// The QoS of a PUBLISH (0, 1 or 2).
    pub fn qos(&self) -> Result<u8, WireError> {
        match (self.first >> 1) & 0b11 {
            3 => Err(WireError::BadPublish("QoS 3")),
            q => Ok(q),
        }
    }
}

/// The packet at the front of `buf`, `Ok(None)` while it is incomplete.
#[inline]
pub fn scan(buf: &[u8]) -> Result<Option<Frame>, WireError> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    let mut remaining = 0usize;
    let mut shift = 0;
    let mut i = 1;
    loop {
        let Some(&b) = buf.get(i) else {
            return Ok(None);
        };
        remaining |= usize::from(b & 0x7f) << shift;
        i += 1;
        if b & 0x80 == 0 {
            break;
        }
        if i > 4 {
            return Err(WireError::BadLength);
        }
        shift += 7;
    }
    let total = i + remaining;
    if total > MAX_PACKET {
        return Err(WireError::TooLarge(total));
    }
    if buf.len() < total {
        return Ok(None);
    }
    Ok(Some(Frame {
        first,
        header_len: i,
        total,
    }))
}

fn packet_id_at(packet: &[u8], at: usize) -> Result<u16, WireError> {
    match packet.get(at..at + 2) {
        Some(&[hi, lo]) => match u16::from_be_bytes([hi, lo]) {
            0 => Err(WireError::ZeroPacketId),
            id => Ok(id),
        },
        _ => Err(WireError::BadPublish("no room for the packet id")),
    }
}

/// The packet id of a QoS 1/2 PUBLISH (`packet` is the whole packet of `frame`): it follows
/// the topic, whatever the protocol version (MQTT 5 properties come after it).
#[inline]
pub fn publish_packet_id(frame: &Frame, packet: &[u8]) -> Result<u16, WireError> {
    let at = frame.header_len;
    let topic_len = match packet.get(at..at + 2) {
        Some(&[hi, lo]) => usize::from(u16::from_be_bytes([hi, lo])),
        _ => return Err(WireError::BadPublish("no room for the topic length")),
    };
    packet_id_at(packet, at + 2 + topic_len)
}

/// The packet id of a PUBREL (`0x62`, remaining length 2 or more).
#[inline]
pub fn pubrel_packet_id(frame: &Frame, packet: &[u8]) -> Result<u16, WireError> {
    if frame.first != 0x62 {
        return Err(WireError::Unexpected(frame.first));
    }
    packet_id_at(packet, frame.header_len)
}

/// Appends a 4-byte PUBACK / PUBREC / PUBREL / PUBCOMP (success, no properties: the short
/// form both protocol versions share).
#[inline]
pub fn put_ack(out: &mut Vec<u8>, first: u8, packet_id: u16) {
    let [hi, lo] = packet_id.to_be_bytes();
    out.extend_from_slice(&[first, 2, hi, lo]);
}

pub const PUBACK: u8 = 0x40;
pub const PUBREC: u8 = 0x50;
pub const PUBCOMP: u8 = 0x70;
pub const PINGRESP: [u8; 2] = [0xD0, 0x00];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_and_packet_ids() {
        // QoS 1 PUBLISH, topic "a/b", id 0x0102, payload "xy".
        let p = [0x32, 9, 0, 3, b'a', b'/', b'b', 1, 2, b'x', b'y', 0xC0];
        let f = scan(&p).ok().flatten();
        assert_eq!(
            f,
            Some(Frame {
                first: 0x32,
                header_len: 2,
                total: 11
            })
        );
        let Some(f) = f else { return };
        assert_eq!(f.kind(), PUBLISH);
        assert_eq!(f.qos(), Ok(1));
        assert_eq!(publish_packet_id(&f, &p[..f.total]), Ok(0x0102));
        assert_eq!(scan(&p[..5]), Ok(None));
        assert_eq!(scan(&[0x30]), Ok(None));
        assert_eq!(scan(&[]), Ok(None));
        // Two-byte remaining length (200).
        let mut big = vec![0x30, 0xC8, 0x01];
        big.resize(203, 0);
        assert_eq!(scan(&big).ok().flatten().map(|f| f.total), Some(203));
        assert_eq!(
            scan(&[0x30, 0xff, 0xff, 0xff, 0xff, 1]),
            Err(WireError::BadLength)
        );
        assert_eq!(
            scan(&[0x30, 0xff, 0xff, 0xff, 0x7f]),
            Err(WireError::TooLarge(268_435_460))
        );
        // Topic length pointing past the packet, packet id 0, QoS 3.
        let bad = [0x32, 4, 0, 9, b'a', b'b'];
        let f = Frame {
            first: 0x32,
            header_len: 2,
            total: 6,
        };
        assert!(publish_packet_id(&f, &bad).is_err());
        let zero = [0x32, 5, 0, 1, b'a', 0, 0];
        let f = Frame {
            first: 0x32,
            header_len: 2,
            total: 7,
        };
        assert_eq!(publish_packet_id(&f, &zero), Err(WireError::ZeroPacketId));
        let f = Frame {
            first: 0x36,
            header_len: 2,
            total: 2,
        };
        assert!(f.qos().is_err());
        let rel = [0x62, 2, 0, 7];
        let f = Frame {
            first: 0x62,
            header_len: 2,
            total: 4,
        };
        assert_eq!(pubrel_packet_id(&f, &rel), Ok(7));
        let mut out = Vec::new();
        put_ack(&mut out, PUBCOMP, 7);
        assert_eq!(out, [0x70, 2, 0, 7]);
    }
}
