//! Variable Byte Integers (§1.5.5 of MQTT 5, §2.2.3 of 3.1.1): 7 bits per byte, least
//! significant group first, at most four bytes, so at most 268,435,455.

use bytes::{BufMut, BytesMut};

use crate::error::DecodeError;

/// The largest value a Variable Byte Integer can hold.
pub const MAX: u32 = 268_435_455;

/// Bytes needed to encode `v` (which must be at most [`MAX`]).
#[inline]
pub fn len(v: u32) -> usize {
    if v < 128 {
        1
    } else if v < 16_384 {
        2
    } else if v < 2_097_152 {
        3
    } else {
        4
    }
}

/// Appends `v` (at most [`MAX`]).
#[inline]
pub fn put(buf: &mut BytesMut, mut v: u32) {
    debug_assert!(v <= MAX);
    if v < 128 {
        buf.put_u8(v as u8);
        return;
    }
    loop {
        let mut byte = (v & 0x7f) as u8;
        v >>= 7;
        if v > 0 {
            byte |= 0x80;
        }
        buf.put_u8(byte);
        if v == 0 {
            break;
        }
    }
}

/// Writes `v` (at most [`MAX`]) into the front of `dst` (at least 4 bytes); returns the
/// number of bytes written.
#[inline]
pub fn write_into(dst: &mut [u8], mut v: u32) -> usize {
    debug_assert!(v <= MAX && dst.len() >= 4);
    let mut i = 0;
    while i < dst.len() {
        let mut byte = (v & 0x7f) as u8;
        v >>= 7;
        if v > 0 {
            byte |= 0x80;
        }
        dst[i] = byte;
        i += 1;
        if v == 0 {
            break;
        }
    }
    i
}

/// Reads a Variable Byte Integer from the start of `data`.
/// `Ok(None)`: `data` ends before the integer does. `Ok(Some((value, bytes used)))` otherwise.
#[inline]
pub fn read(data: &[u8], field: &'static str) -> Result<Option<(u32, usize)>, DecodeError> {
    let mut value: u32 = 0;
    for i in 0..4 {
        let Some(&byte) = data.get(i) else {
            return Ok(None);
        };
        value |= u32::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            // A final byte of zero after a first byte means a longer encoding than needed.
            if i > 0 && byte == 0 {
                return Err(DecodeError::NonMinimalVarInt { field });
            }
            return Ok(Some((value, i + 1)));
        }
    }
    Err(DecodeError::MalformedRemainingLength)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundaries_of_table_1_1() {
        // MQTT 5 §1.5.5 table: the bounds of each encoded length.
        let cases: &[(u32, &[u8])] = &[
            (0, &[0x00]),
            (127, &[0x7f]),
            (128, &[0x80, 0x01]),
            (16_383, &[0xff, 0x7f]),
            (16_384, &[0x80, 0x80, 0x01]),
            (2_097_151, &[0xff, 0xff, 0x7f]),
            (2_097_152, &[0x80, 0x80, 0x80, 0x01]),
            (268_435_455, &[0xff, 0xff, 0xff, 0x7f]),
        ];
        for &(v, bytes) in cases {
            let mut buf = BytesMut::new();
            put(&mut buf, v);
            assert_eq!(&buf[..], bytes, "{v}");
            assert_eq!(len(v), bytes.len());
            assert_eq!(read(bytes, "t"), Ok(Some((v, bytes.len()))));
            assert_eq!(read(&bytes[..bytes.len() - 1], "t"), Ok(None));
        }
        assert_eq!(
            read(&[0xff, 0xff, 0xff, 0xff, 0x01], "t"),
            Err(DecodeError::MalformedRemainingLength)
        );
        assert_eq!(
            read(&[0x80, 0x00], "t"),
            Err(DecodeError::NonMinimalVarInt { field: "t" })
        );
    }
}
