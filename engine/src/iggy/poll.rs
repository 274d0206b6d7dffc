//! The poll reply: a 16-byte head, then stored batches, each checked (layout, every message
//! checksum, the batch checksum) before its messages are handed out as slices of the reply.

use bytes::Bytes;
use iggy_binary_protocol::batch::{
    BATCH_HEADER_SIZE, BATCH_MESSAGE_HEADER_SIZE, decode_batch_slice,
};

use super::error::IggyError;
use crate::message::Message;

/// The partition id a consumer-group poll answers with when this member may not poll the
/// partition (any more): re-sync the assignment.
pub const RESYNC_SENTINEL: u32 = u32::MAX;

/// Size of the poll reply head: partition id (u32), current offset (u64), message count (u32).
const HEAD_SIZE: usize = 16;

/// The head of a poll reply (the messages go to the caller's vector).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Polled {
    /// The partition polled, or [`RESYNC_SENTINEL`].
    pub partition: u32,
    /// The partition's current (last) offset.
    pub head: u64,
}

impl Polled {
    /// Whether the server fenced this poll (consumer-group member does not own the partition).
    pub fn fenced(&self) -> bool {
        self.partition == RESYNC_SENTINEL
    }
}

/// Decodes and verifies a poll reply body into `messages` (payloads and headers are slices of
/// `body`) and returns the head's (partition, current offset); `None` for an empty body, which
/// is how the server answers a poll it could not serve.
pub fn decode(body: &Bytes, messages: &mut Vec<Message>) -> Result<Option<(u32, u64)>, IggyError> {
    if body.is_empty() {
        return Ok(None);
    }
    let head = body
        .get(..HEAD_SIZE)
        .ok_or_else(|| IggyError::Malformed(format!("poll reply of {} bytes", body.len())))?;
    let partition = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    let mut off = [0u8; 8];
    off.copy_from_slice(&head[4..12]);
    let current = u64::from_le_bytes(off);
    let count = u32::from_le_bytes([head[12], head[13], head[14], head[15]]) as usize;
    // The count is not covered by a checksum: check it against what the reply can hold before
    // reserving room for it (every message takes at least its 48-byte header, every batch 256).
    let room = body.len().saturating_sub(HEAD_SIZE + BATCH_HEADER_SIZE) / BATCH_MESSAGE_HEADER_SIZE;
    if count > room {
        return Err(IggyError::Malformed(format!(
            "poll reply head counts {count} messages, but its {} bytes hold at most {room}",
            body.len()
        )));
    }
    let start = messages.len();
    messages.reserve(count);
    // Nothing of a reply that fails to decode is kept.
    if let Err(e) = decode_batches(body, count, messages) {
        messages.truncate(start);
        return Err(e);
    }
    Ok(Some((partition, current)))
}

/// Appends the messages of every batch after the head, checked; fails on the first problem
/// (the caller drops what was appended).
fn decode_batches(
    body: &Bytes,
    count: usize,
    messages: &mut Vec<Message>,
) -> Result<(), IggyError> {
    let start = messages.len();
    let mut pos = HEAD_SIZE;
    while pos < body.len() {
        let batch = decode_batch_slice(&body[pos..])
            .map_err(|e| IggyError::Malformed(format!("poll reply batch at byte {pos}: {e}")))?;
        let h = batch.header;
        for m in batch.iter() {
            // The engine counts on `offset + 1`: an offset at or past u64::MAX is corruption,
            // never a wrap.
            let offset = h
                .base_offset
                .checked_add(u64::from(m.header.offset_delta))
                .filter(|&o| o < u64::MAX)
                .ok_or_else(|| {
                    IggyError::Malformed(format!(
                        "poll reply batch at byte {pos}: base offset {} + delta {} is past the \
                         largest offset",
                        h.base_offset, m.header.offset_delta
                    ))
                })?;
            messages.push(Message {
                offset,
                id: m.header.id,
                timestamp: h.base_timestamp,
                origin_timestamp: h
                    .origin_timestamp
                    .saturating_add(u64::from(m.header.timestamp_delta)),
                payload: body.slice_ref(m.payload),
                headers: if m.user_headers.is_empty() {
                    Bytes::new()
                } else {
                    body.slice_ref(m.user_headers)
                },
            });
        }
        pos = pos.saturating_add(h.total_size());
    }
    let decoded = messages.len() - start;
    if decoded != count {
        return Err(IggyError::Malformed(format!(
            "poll reply head counts {count} messages, its batches hold {decoded}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use iggy_binary_protocol::batch::{BATCH_HEADER_SIZE, BatchHeader, calculate_batch_checksum};
    use twox_hash::XxHash3_64;

    /// Builds a stored batch the way the server lays it out.
    fn batch(base: u64, payloads: &[&[u8]]) -> Vec<u8> {
        let mut blob = Vec::new();
        for (i, p) in payloads.iter().enumerate() {
            let mut frame = vec![0u8; 48];
            frame[8..24].copy_from_slice(&(100 + i as u128).to_le_bytes());
            frame[24..28].copy_from_slice(&(i as u32).to_le_bytes());
            frame[28..32].copy_from_slice(&(i as u32 * 10).to_le_bytes());
            frame[36..40].copy_from_slice(&(p.len() as u32).to_le_bytes());
            frame.extend_from_slice(p);
            let sum = XxHash3_64::oneshot(&frame[8..]);
            frame[..8].copy_from_slice(&sum.to_le_bytes());
            blob.extend_from_slice(&frame);
        }
        let mut h = BatchHeader::new(
            3,
            1_000,
            (BATCH_HEADER_SIZE + blob.len()) as u64,
            payloads.len() as u32,
        );
        h.base_offset = base;
        h.base_timestamp = 5_000;
        h.batch_checksum = calculate_batch_checksum(&h, &blob);
        let mut out = vec![0u8; BATCH_HEADER_SIZE];
        h.encode_into(&mut out);
        out.extend_from_slice(&blob);
        out
    }

    fn reply(batches: &[Vec<u8>], count: u32) -> Bytes {
        let mut b = BytesMut::new();
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&41u64.to_le_bytes());
        b.extend_from_slice(&count.to_le_bytes());
        for x in batches {
            b.extend_from_slice(x);
        }
        b.freeze()
    }

    #[test]
    fn decodes_and_slices_without_copying() {
        let body = reply(&[batch(37, &[b"a", b"bb"]), batch(39, &[b"ccc"])], 3);
        let mut out = Vec::new();
        let (partition, head) = decode(&body, &mut out).ok().flatten().unwrap_or_default();
        assert_eq!((partition, head), (3, 41));
        let offsets: Vec<u64> = out.iter().map(|m| m.offset).collect();
        assert_eq!(offsets, vec![37, 38, 39]);
        assert_eq!(out[1].payload, Bytes::from_static(b"bb"));
        assert_eq!(out[1].id, 101);
        assert_eq!(out[1].origin_timestamp, 1_010);
        assert_eq!(out[1].timestamp, 5_000);
        // The payload points into the reply buffer.
        let start = body.as_ptr() as usize;
        let p = out[2].payload.as_ptr() as usize;
        assert!(p > start && p < start + body.len());
    }

    #[test]
    fn a_message_count_the_reply_cannot_hold_is_refused_before_anything_is_reserved() {
        // One batch of one message, with a head that counts u32::MAX messages (the head has no
        // checksum): before the check this reserved room for 4 billion messages.
        let body = reply(&[batch(0, &[b"x"])], u32::MAX);
        let mut out = Vec::new();
        match decode(&body, &mut out) {
            Err(IggyError::Malformed(m)) => assert!(m.contains("4294967295"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert!(out.capacity() < 1024, "reserved {}", out.capacity());
        // A count that fits the frame but not the batches is refused too, and nothing is kept.
        let big = [7u8; 100];
        let body = reply(&[batch(0, &[&big, &big])], 3);
        let mut out = Vec::new();
        match decode(&body, &mut out) {
            Err(IggyError::Malformed(m)) => assert!(m.contains("hold 2"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert!(out.is_empty());
    }

    #[test]
    fn an_offset_past_the_largest_is_refused_not_wrapped() {
        for base in [u64::MAX - 1, u64::MAX] {
            let body = reply(&[batch(base, &[b"a", b"b"])], 2);
            let mut out = Vec::new();
            match decode(&body, &mut out) {
                Err(IggyError::Malformed(m)) => assert!(m.contains("largest offset"), "{m}"),
                other => panic!("base {base}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_corrupted_payload_is_refused() {
        let mut b = batch(0, &[b"hello"]);
        let last = b.len() - 1;
        b[last] ^= 1;
        let body = reply(&[b], 1);
        let mut out = Vec::new();
        match decode(&body, &mut out) {
            Err(IggyError::Malformed(m)) => assert!(m.contains("checksum"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}
