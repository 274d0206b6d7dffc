//! Frames on the wire: reading one 256-byte-header frame from a socket (tolerating read
//! timeouts mid-frame), and building the server's replies (ok, deny, result section, eviction).
//!
//! Every frame is a 256-byte consensus header followed by a body; the header's `size` field
//! (bytes 48..52) is the whole frame length. The header structs come from
//! `iggy_binary_protocol` and are read with `bytemuck::checked::try_pod_read_unaligned`, since
//! a `Vec<u8>` does not give the 16-byte alignment the `u128` fields would need for a cast.

use std::io::{self, Read};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{BufMut, BytesMut};
use iggy_binary_protocol::consensus::RESULT_COUNT_LEN;
use iggy_binary_protocol::{
    Command, ConsensusHeader, EvictionHeader, EvictionReason, HEADER_SIZE, ReplyHeader,
    RequestHeader, WireEncode, read_size_field,
};

/// Largest frame accepted, as the server's framing does (64 MiB).
pub(crate) const MAX_FRAME_SIZE: usize = 64 * 1024 * 1024;

/// What one attempt to read a frame produced.
#[derive(Debug)]
pub(crate) enum ReadOutcome {
    /// A whole frame: header and body.
    Frame(Vec<u8>),
    /// The read timed out before a whole frame arrived (bytes read so far are kept).
    Idle,
    /// The peer closed the connection (or the socket failed).
    Closed,
    /// The header announces a size outside `256..=64 MiB`: the connection is unusable.
    BadSize(usize),
}

/// Accumulates bytes from a socket until a whole frame is there. Survives read timeouts, so a
/// caller can poll with a short timeout and do housekeeping between reads.
#[derive(Debug, Default)]
pub(crate) struct FrameReader {
    buf: Vec<u8>,
}

impl FrameReader {
    /// Reads until one frame is complete, the socket's read timeout fires, or the peer goes.
    pub(crate) fn read(&mut self, stream: &mut impl Read) -> ReadOutcome {
        let mut scratch = [0u8; 64 * 1024];
        loop {
            if let Some(outcome) = self.take_frame() {
                return outcome;
            }
            let wanted = self.wanted().min(scratch.len());
            match stream.read(&mut scratch[..wanted]) {
                Ok(0) => return ReadOutcome::Closed,
                Ok(n) => self.buf.extend_from_slice(&scratch[..n]),
                Err(e) if is_timeout(&e) => return ReadOutcome::Idle,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return ReadOutcome::Closed,
            }
        }
    }

    /// How many more bytes the current frame needs (at least one).
    fn wanted(&self) -> usize {
        if self.buf.len() < HEADER_SIZE {
            return HEADER_SIZE - self.buf.len();
        }
        let size = read_size_field(&self.buf).unwrap_or(0) as usize;
        size.saturating_sub(self.buf.len()).max(1)
    }

    fn take_frame(&mut self) -> Option<ReadOutcome> {
        if self.buf.len() < HEADER_SIZE {
            return None;
        }
        let size = read_size_field(&self.buf)? as usize;
        if !(HEADER_SIZE..=MAX_FRAME_SIZE).contains(&size) {
            return Some(ReadOutcome::BadSize(size));
        }
        if self.buf.len() < size {
            return None;
        }
        let rest = self.buf.split_off(size);
        let frame = std::mem::replace(&mut self.buf, rest);
        Some(ReadOutcome::Frame(frame))
    }
}

/// Whether an I/O error is a read/write timeout (`WouldBlock` on Unix, `TimedOut` elsewhere).
pub(crate) fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Microseconds since the Unix epoch (the unit of every Iggy timestamp).
pub(crate) fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Decodes and validates a request header the way the server's ingress does: the command must
/// be `Request`, every enum byte valid, the client id nonzero, and session/request consistent
/// with the operation. `None` means the server drops the frame without answering.
pub(crate) fn parse_request_header(frame: &[u8]) -> Option<RequestHeader> {
    let header_bytes = frame.get(..HEADER_SIZE)?;
    let header: RequestHeader = bytemuck::checked::try_pod_read_unaligned(header_bytes).ok()?;
    header.validate().ok()?;
    Some(header)
}

/// The non-replicated command code a request carries in `reserved[0..4]`.
pub(crate) fn non_replicated_code(header: &RequestHeader) -> u32 {
    let mut code = [0u8; 4];
    code.copy_from_slice(&header.reserved[..4]);
    u32::from_le_bytes(code)
}

/// Builds a reply frame echoing the request (client, request, request checksum, timestamp,
/// operation), with `op` = `session`, `commit`, `status`, and `body` after the header.
pub(crate) fn reply(
    request: &RequestHeader,
    session: u64,
    commit: u64,
    status: u32,
    body: &[u8],
) -> Vec<u8> {
    let size = u32::try_from(HEADER_SIZE + body.len()).unwrap_or(u32::MAX);
    let header = ReplyHeader {
        cluster: request.cluster,
        size,
        view: request.view,
        release: request.release,
        command: Command::Reply,
        replica: request.replica,
        request_checksum: request.request_checksum,
        client: request.client,
        op: session,
        commit,
        timestamp: request.timestamp,
        request: request.request,
        operation: request.operation,
        status,
        ..ReplyHeader::default()
    };
    let mut out = Vec::with_capacity(HEADER_SIZE + body.len());
    out.extend_from_slice(bytemuck::bytes_of(&header));
    out.extend_from_slice(body);
    out
}

/// A denial before the request took effect: empty body, nonzero `status`, `op` 0.
pub(crate) fn deny(request: &RequestHeader, commit: u64, status: u32) -> Vec<u8> {
    reply(request, 0, commit, status, &[])
}

/// A result-framed success: `[count = 0]` then the encoded payload.
pub(crate) fn result_ok(
    request: &RequestHeader,
    session: u64,
    commit: u64,
    payload: Option<&dyn WireEncode>,
) -> Vec<u8> {
    let mut body =
        BytesMut::with_capacity(RESULT_COUNT_LEN + payload.map_or(0, |p| p.encoded_size()));
    body.put_u32_le(0);
    if let Some(payload) = payload {
        payload.encode(&mut body);
    }
    reply(request, session, commit, 0, &body)
}

/// A result-framed rejection: one `{index 0, result code}` entry and no payload.
pub(crate) fn result_rejected(
    request: &RequestHeader,
    session: u64,
    commit: u64,
    code: u32,
) -> Vec<u8> {
    let mut body = Vec::with_capacity(12);
    body.extend_from_slice(&1u32.to_le_bytes());
    body.extend_from_slice(&0u32.to_le_bytes());
    body.extend_from_slice(&code.to_le_bytes());
    reply(request, session, commit, 0, &body)
}

/// A session-terminal Eviction frame (header only) addressed to `client`.
pub(crate) fn eviction(client: u128, reason: EvictionReason) -> Vec<u8> {
    if reason == EvictionReason::IncompatibleProtocol {
        return incompatible_protocol(client, None);
    }
    bytemuck::bytes_of(&EvictionHeader::new(0, 0, 0, client, reason)).to_vec()
}

/// The eviction for a login whose protocol version is outside `window` (`(min, max)`; the
/// crate's own when `None`), carrying that window as the server does.
pub(crate) fn incompatible_protocol(client: u128, window: Option<(u32, u32)>) -> Vec<u8> {
    let (min, max) = window.unwrap_or((
        iggy_binary_protocol::version::IGGY_PROTOCOL_VERSION_MIN,
        iggy_binary_protocol::IGGY_PROTOCOL_VERSION,
    ));
    let header = EvictionHeader::incompatible_protocol(0, 0, 0, client, max, min);
    bytemuck::bytes_of(&header).to_vec()
}
