//! Reading and writing the primitive data types of §1.5: two- and four-byte integers, Variable
//! Byte Integers, UTF-8 strings and binary data. The reader slices the packet's `Bytes` where it
//! has one, so strings and payloads are not copied.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{DecodeError, EncodeError};
use crate::packet::PacketType;
use crate::string::{MqttStr, StringError};
use crate::types::PacketId;
use crate::varint;

/// A cursor over the body of one packet (everything after the fixed header).
pub(crate) struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    /// The buffer `data` belongs to, when there is one: fields are then sliced, not copied.
    owner: Option<&'a Bytes>,
    pub(crate) packet: PacketType,
}

impl<'a> Reader<'a> {
    /// `data` is the whole packet (fixed header included) and, when `owner` is given, exactly
    /// the bytes of `owner`; reading starts at `start`, the first byte after the fixed header.
    pub(crate) fn new(
        data: &'a [u8],
        start: usize,
        owner: Option<&'a Bytes>,
        packet: PacketType,
    ) -> Self {
        Reader {
            data,
            pos: start,
            owner,
            packet,
        }
    }

    #[inline]
    pub(crate) fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    #[inline]
    fn truncated(&self, field: &'static str) -> DecodeError {
        DecodeError::Truncated {
            packet: self.packet,
            field,
        }
    }

    #[inline]
    pub(crate) fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        let b = *self
            .data
            .get(self.pos)
            .ok_or_else(|| self.truncated(field))?;
        self.pos += 1;
        Ok(b)
    }

    #[inline]
    pub(crate) fn u16(&mut self, field: &'static str) -> Result<u16, DecodeError> {
        match self.data.get(self.pos..self.pos + 2) {
            Some(&[a, b]) => {
                self.pos += 2;
                Ok(u16::from_be_bytes([a, b]))
            }
            _ => Err(self.truncated(field)),
        }
    }

    #[inline]
    pub(crate) fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        match self.data.get(self.pos..self.pos + 4) {
            Some(&[a, b, c, d]) => {
                self.pos += 4;
                Ok(u32::from_be_bytes([a, b, c, d]))
            }
            _ => Err(self.truncated(field)),
        }
    }

    pub(crate) fn varint(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        match varint::read(&self.data[self.pos..], field) {
            Ok(Some((v, n))) => {
                self.pos += n;
                Ok(v)
            }
            Ok(None) => Err(self.truncated(field)),
            // `varint::read` names the remaining length; this integer is another one.
            Err(DecodeError::MalformedRemainingLength) => Err(DecodeError::VarIntTooLong { field }),
            Err(e) => Err(e),
        }
    }

    #[inline]
    pub(crate) fn packet_id(&mut self) -> Result<PacketId, DecodeError> {
        let v = self.u16("packet identifier")?;
        PacketId::new(v).ok_or(DecodeError::ZeroPacketId {
            packet: self.packet,
        })
    }

    /// `n` bytes, sliced from the owner when there is one.
    #[inline(always)]
    pub(crate) fn take(&mut self, n: usize, field: &'static str) -> Result<Bytes, DecodeError> {
        if self.remaining() < n {
            return Err(self.truncated(field));
        }
        let start = self.pos;
        self.pos += n;
        Ok(match self.owner {
            Some(b) => b.slice(start..start + n),
            None => Bytes::copy_from_slice(&self.data[start..start + n]),
        })
    }

    /// Where the next read starts (an offset into the whole packet).
    #[inline]
    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    /// A UTF-8 Encoded String that must be a topic name: one pass decides the common case
    /// (printable ASCII without wildcards); anything else takes the full checks.
    #[inline]
    pub(crate) fn topic_name(&mut self) -> Result<MqttStr, DecodeError> {
        let n = self.u16("topic name")? as usize;
        let start = self.pos;
        let Some(raw) = self.data.get(start..start + n) else {
            return Err(self.truncated("topic name"));
        };
        if crate::topic::is_plain_topic_name(raw) {
            let bytes = self.take(n, "topic name")?;
            return Ok(MqttStr::from_validated(bytes));
        }
        let bytes = self.take(n, "topic name")?;
        let topic = MqttStr::from_bytes(bytes).map_err(|e| match e {
            StringError::NullCharacter => DecodeError::NullCharacter {
                field: "topic name",
            },
            StringError::InvalidUtf8 | StringError::TooLong(_) => DecodeError::InvalidUtf8 {
                field: "topic name",
            },
        })?;
        if !topic.is_empty() {
            crate::topic::check_topic_name(topic.as_bytes())
                .map_err(|reason| DecodeError::InvalidTopicName { reason })?;
        }
        Ok(topic)
    }

    /// Binary Data (§1.5.6): a two-byte length and that many bytes.
    #[inline(always)]
    pub(crate) fn binary(&mut self, field: &'static str) -> Result<Bytes, DecodeError> {
        let n = self.u16(field)? as usize;
        self.take(n, field)
    }

    /// A UTF-8 Encoded String (§1.5.4).
    #[inline]
    pub(crate) fn string(&mut self, field: &'static str) -> Result<MqttStr, DecodeError> {
        let bytes = self.binary(field)?;
        MqttStr::from_bytes(bytes).map_err(|e| match e {
            StringError::NullCharacter => DecodeError::NullCharacter { field },
            // A length read from two bytes cannot be too long.
            StringError::InvalidUtf8 | StringError::TooLong(_) => {
                DecodeError::InvalidUtf8 { field }
            }
        })
    }

    /// Everything that is left.
    pub(crate) fn rest(&mut self) -> Bytes {
        let n = self.remaining();
        match self.take(n, "payload") {
            Ok(b) => b,
            Err(_) => Bytes::new(),
        }
    }

    /// A sub-reader over the next `n` bytes (used for the property block).
    pub(crate) fn sub(&mut self, n: usize) -> Result<Reader<'a>, DecodeError> {
        if self.remaining() < n {
            return Err(DecodeError::PropertyLengthExceedsPacket);
        }
        let start = self.pos;
        self.pos += n;
        // The sub-reader keeps the owner by re-slicing positions relative to the owner.
        Ok(Reader {
            data: &self.data[..start + n],
            pos: start,
            owner: self.owner,
            packet: self.packet,
        })
    }

    /// Errors if any byte is left: for packets whose fields fill the remaining length exactly.
    pub(crate) fn finish(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            extra => Err(DecodeError::TrailingBytes {
                packet: self.packet,
                extra,
            }),
        }
    }
}

/// Encoded length of a string or binary field.
#[inline]
pub(crate) fn field_len(len: usize) -> usize {
    2 + len
}

/// Checks that a string or binary field fits its two-byte length prefix.
#[inline]
pub(crate) fn check_field(len: usize, field: &'static str) -> Result<(), EncodeError> {
    if len > u16::MAX as usize {
        return Err(EncodeError::FieldTooLong { field, len });
    }
    Ok(())
}

/// Appends a two-byte length and the bytes. The length must have been checked.
#[inline]
pub(crate) fn put_binary(buf: &mut BytesMut, data: &[u8]) {
    buf.put_u16(data.len() as u16);
    buf.extend_from_slice(data);
}

/// Writes the fixed header: first byte and remaining length; returns the total packet size.
/// Checks the total against `max` (the peer's Maximum Packet Size). `unwritten` is the part of
/// the remaining length the caller will not append to `buf` (a payload handed back as its own
/// `Bytes`); the rest is reserved at once.
#[inline]
pub(crate) fn put_fixed_header(
    buf: &mut BytesMut,
    first: u8,
    remaining: usize,
    max: u32,
    unwritten: usize,
) -> Result<usize, EncodeError> {
    if remaining > varint::MAX as usize {
        return Err(EncodeError::PacketTooLarge {
            size: remaining + 5,
            max: varint::MAX,
        });
    }
    let total = 1 + varint::len(remaining as u32) + remaining;
    if total > max as usize {
        return Err(EncodeError::PacketTooLarge { size: total, max });
    }
    buf.reserve(total - unwritten);
    buf.put_u8(first);
    varint::put(buf, remaining as u32);
    Ok(total)
}
