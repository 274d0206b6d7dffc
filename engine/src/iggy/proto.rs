//! The Iggy TCP frame layer, sans-IO: request headers out, reply headers in (server
//! 0.9.0 and 0.9.0-edge.5, `iggy_binary_protocol` 0.11.0; see `engine/iggy-protocol.md`).
//!
//! Every frame is a 256-byte header (its total size at byte 48) and a body. Requests carry the
//! connection's random client id, the session from the login reply and a request number that
//! advances only on metadata-replicated operations; non-replicated commands put their code in
//! the header's reserved bytes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{Bytes, BytesMut};
use iggy_binary_protocol::codes::{LOGIN_REGISTER_CODE, LOGIN_REGISTER_WITH_PAT_CODE};
use iggy_binary_protocol::consensus::{
    Command, EvictionHeader, EvictionReason, GenericHeader, Operation, ReplyHeader, RequestHeader,
    result_code, result_section_len,
};
use twox_hash::XxHash3_64;

use super::error::IggyError;

/// Size of every frame header.
pub const HEADER_SIZE: usize = 256;
/// Offset of the total frame size in a header.
const SIZE_OFFSET: usize = 48;
/// Largest reply frame accepted (a poll of many large messages stays far below).
pub const MAX_FRAME: usize = 1 << 30;

/// Per-connection request numbering.
#[derive(Debug)]
pub struct RequestState {
    client: u128,
    session: u64,
    /// The next request number, shared by every connection of one client identity: a client
    /// id that logs in again (on a cluster, see [`super::cluster::Finder`]) must go on above
    /// the numbers it used, or the server takes its requests for ones already applied (59).
    next_request: Arc<AtomicU64>,
    last_request: u64,
}

/// A client identity kept across connections: its id and its request counter.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The client id.
    pub client: u128,
    /// The next request number.
    pub next_request: Arc<AtomicU64>,
}

impl Identity {
    /// A fresh identity: a random nonzero id, requests from 1.
    pub fn fresh() -> Identity {
        Identity {
            client: new_client_id(),
            next_request: Arc::new(AtomicU64::new(1)),
        }
    }
}

impl RequestState {
    /// A new connection with a random nonzero client id.
    pub fn new() -> RequestState {
        RequestState::for_identity(Identity::fresh())
    }

    /// A new connection of an identity (a reconnect that keeps it).
    pub fn for_identity(identity: Identity) -> RequestState {
        RequestState {
            client: identity.client,
            session: 0,
            next_request: identity.next_request,
            last_request: 0,
        }
    }

    /// This connection's identity, to log in again with.
    pub fn identity(&self) -> Identity {
        Identity {
            client: self.client,
            next_request: Arc::clone(&self.next_request),
        }
    }

    /// The connection's client id (the consumer-group member id on the server).
    pub fn client(&self) -> u128 {
        self.client
    }

    /// Records the session from the login reply.
    pub fn set_session(&mut self, session: u64) {
        self.session = session;
    }

    /// Appends the header and body of request `code` to `out`.
    pub fn encode(&mut self, code: u32, body: &[u8], out: &mut BytesMut) -> Result<(), IggyError> {
        let operation = if code == LOGIN_REGISTER_CODE || code == LOGIN_REGISTER_WITH_PAT_CODE {
            Operation::Register
        } else {
            Operation::from_command_code(code).unwrap_or(Operation::NonReplicated)
        };
        let (request, session, checksum) = match operation {
            Operation::Register => (0, 0, 0),
            Operation::NonReplicated => {
                (self.next_request.load(Ordering::Relaxed), self.session, 0)
            }
            // A partition write (send, offset store) takes a number of its own: the released
            // 0.9.0 server deduplicates them by request number (a write whose number is not
            // above the client's last is answered as applied and dropped); the edge.5 server
            // takes the gaps this leaves in the metadata numbering.
            op if op.is_partition() => {
                let r = self.next_request.fetch_add(1, Ordering::Relaxed);
                (r, self.session, 0)
            }
            _ => {
                let r = self.next_request.fetch_add(1, Ordering::Relaxed);
                (r, self.session, u128::from(XxHash3_64::oneshot(body)))
            }
        };
        self.last_request = request;
        let size = u32::try_from(HEADER_SIZE + body.len())
            .map_err(|_| IggyError::Malformed(format!("request body of {} bytes", body.len())))?;
        let mut reserved = [0u8; 60];
        if operation == Operation::NonReplicated {
            reserved[..4].copy_from_slice(&code.to_le_bytes());
        }
        let header = RequestHeader {
            command: Command::Request,
            operation,
            size,
            client: self.client,
            request,
            session,
            request_checksum: checksum,
            reserved,
            ..RequestHeader::default()
        };
        out.reserve(HEADER_SIZE + body.len());
        out.extend_from_slice(bytemuck::bytes_of(&header));
        out.extend_from_slice(body);
        Ok(())
    }

    /// Checks a reply frame against the last request and returns its payload, a slice of
    /// `frame` (no copy).
    pub fn reply_body(&self, frame: &Bytes) -> Result<Bytes, IggyError> {
        decode_reply(frame, Some(self.last_request))
    }
}

impl Default for RequestState {
    fn default() -> Self {
        RequestState::new()
    }
}

/// A random nonzero client id.
fn new_client_id() -> u128 {
    (u128::from(fastrand::u64(..)) << 64 | u128::from(fastrand::u64(..))).max(1)
}

/// The total frame size from a header, checked against the limits.
pub fn frame_size(header: &[u8; HEADER_SIZE]) -> Result<usize, IggyError> {
    let mut size = [0u8; 4];
    size.copy_from_slice(&header[SIZE_OFFSET..SIZE_OFFSET + 4]);
    let size = u32::from_le_bytes(size) as usize;
    if !(HEADER_SIZE..=MAX_FRAME).contains(&size) {
        return Err(IggyError::Malformed(format!(
            "frame size {size} outside {HEADER_SIZE}..={MAX_FRAME}"
        )));
    }
    Ok(size)
}

/// Whether `head` (the first bytes a server answered with) reads as the framing of Iggy
/// before 0.9: 8-byte heads of a little-endian status and payload length. Such a server
/// answers the 256-byte request header, which it reads as requests of its own framing, with
/// error heads (status nonzero, length 0); no 0.9 reply starts that way within a header whose
/// size field is out of range. Returns the first status.
pub fn legacy_reply(head: &[u8]) -> Option<u32> {
    let word = |at: usize| -> Option<u32> {
        let b: [u8; 4] = head.get(at..at + 4)?.try_into().ok()?;
        Some(u32::from_le_bytes(b))
    };
    let status = word(0)?;
    let length = word(4)?;
    ((1..100_000).contains(&status) && length == 0).then_some(status)
}

/// The payload of a whole reply frame: an error for an eviction, a nonzero status or a failed
/// result section.
pub fn decode_reply(frame: &Bytes, expect_request: Option<u64>) -> Result<Bytes, IggyError> {
    let head = frame
        .get(..HEADER_SIZE)
        .ok_or_else(|| IggyError::Malformed("short frame".to_owned()))?;
    let generic: GenericHeader = bytemuck::checked::try_pod_read_unaligned(head)
        .map_err(|e| IggyError::Malformed(format!("reply header: {e}")))?;
    match generic.command {
        Command::Eviction => {
            let ev: EvictionHeader = bytemuck::checked::try_pod_read_unaligned(head)
                .map_err(|e| IggyError::Malformed(format!("eviction header: {e}")))?;
            if ev.reason == EvictionReason::IncompatibleProtocol {
                return Err(IggyError::IncompatibleProtocol {
                    server_max: ev.server_protocol_version,
                    server_min: ev.server_protocol_version_min,
                });
            }
            Err(IggyError::Evicted {
                reason: ev.reason as u8,
            })
        }
        Command::Reply => {
            let reply: ReplyHeader = bytemuck::checked::try_pod_read_unaligned(head)
                .map_err(|e| IggyError::Malformed(format!("reply header: {e}")))?;
            if let Some(expected) = expect_request
                && reply.request != expected
            {
                return Err(IggyError::OutOfStep {
                    expected,
                    got: reply.request,
                });
            }
            if reply.status != 0 {
                return Err(IggyError::Status {
                    code: reply.status.into(),
                });
            }
            let size = reply.size as usize;
            if size < HEADER_SIZE {
                return Err(IggyError::Malformed(format!(
                    "reply size {size} is below the {HEADER_SIZE}-byte header"
                )));
            }
            let end = size.min(frame.len());
            let body = frame.slice(HEADER_SIZE..end);
            let framed = reply.operation.is_result_framed()
                || (reply.operation == Operation::Register && !body.is_empty());
            if !framed {
                return Ok(body);
            }
            match result_code(&body) {
                Some(0) => {
                    let skip = result_section_len(&body)
                        .ok_or_else(|| IggyError::Malformed("short result section".to_owned()))?;
                    Ok(body.slice(skip..))
                }
                Some(code) => Err(IggyError::Status { code: code.into() }),
                None => Err(IggyError::Malformed("missing result section".to_owned())),
            }
        }
        other => Err(IggyError::Malformed(format!(
            "unexpected frame command {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iggy::ResultCode;
    use iggy_binary_protocol::codes::{POLL_MESSAGES_CODE, STORE_CONSUMER_OFFSET_CODE};

    #[test]
    fn request_layout() {
        let mut s = RequestState::new();
        s.set_session(7);
        let mut out = BytesMut::new();
        let result = s.encode(POLL_MESSAGES_CODE, b"abc", &mut out);
        assert!(result.is_ok());
        assert_eq!(out.len(), 259);
        assert_eq!(&out[48..52], &259u32.to_le_bytes());
        assert_eq!(out[60], Command::Request as u8);
        assert_eq!(&out[128..144], &s.client().to_le_bytes());
        assert_eq!(&out[168..176], &1u64.to_le_bytes());
        assert_eq!(out[176], Operation::NonReplicated as u8);
        assert_eq!(&out[184..192], &7u64.to_le_bytes());
        assert_eq!(&out[196..200], &POLL_MESSAGES_CODE.to_le_bytes());
        assert_eq!(&out[256..], b"abc");

        // A partition op: no code, unstamped, a request number of its own (the non-replicated
        // poll above did not advance the counter).
        out.clear();
        assert!(s.encode(STORE_CONSUMER_OFFSET_CODE, b"x", &mut out).is_ok());
        assert_eq!(out[176], Operation::StoreConsumerOffset as u8);
        assert_eq!(&out[196..200], &[0; 4]);
        assert_eq!(&out[144..160], &[0; 16]);
        assert_eq!(&out[168..176], &1u64.to_le_bytes());
    }

    #[test]
    fn a_pre_0_9_answer_is_told_apart_from_a_reply_header() {
        // A pre-0.9 server reads the 256-byte header as 8-byte requests of its own framing and
        // answers each with an error head: status 3 (InvalidCommand), length 0.
        let run: Vec<u8> = (0..32)
            .flat_map(|_| [3u32.to_le_bytes(), 0u32.to_le_bytes()].concat())
            .collect();
        assert_eq!(legacy_reply(&run), Some(3));
        let mut head = [0u8; HEADER_SIZE];
        head.copy_from_slice(&run[..HEADER_SIZE]);
        assert!(frame_size(&head).is_err(), "its size field reads as 3");
        let reply = ReplyHeader {
            command: Command::Reply,
            size: 300,
            ..ReplyHeader::default()
        };
        assert_eq!(legacy_reply(bytemuck::bytes_of(&reply)), None);
        assert_eq!(legacy_reply(&run[..6]), None, "too short to tell");
        let e = IggyError::LegacyServer { status: 3 };
        assert!(e.is_config() && !e.is_transient());
        assert!(
            e.to_string()
                .contains("supports Iggy server 0.9.0 and 0.9.0-edge.5")
        );
    }

    #[test]
    fn replies_and_errors() {
        let reply = |status: u32, op: Operation, request: u64, body: &[u8]| {
            let h = ReplyHeader {
                command: Command::Reply,
                size: (HEADER_SIZE + body.len()) as u32,
                status,
                operation: op,
                request,
                ..ReplyHeader::default()
            };
            let mut f = BytesMut::new();
            f.extend_from_slice(bytemuck::bytes_of(&h));
            f.extend_from_slice(body);
            f.freeze()
        };
        let ok = reply(0, Operation::NonReplicated, 3, b"hello");
        assert_eq!(
            decode_reply(&ok, Some(3)).ok(),
            Some(Bytes::from_static(b"hello"))
        );
        // A reply to another request: the connection is out of step, which a reconnect cures.
        let out_of_step = decode_reply(&ok, Some(4));
        assert!(matches!(
            out_of_step,
            Err(IggyError::OutOfStep {
                expected: 4,
                got: 3
            })
        ));
        assert!(out_of_step.is_err_and(|e| e.is_transient()));
        let denied = reply(1009, Operation::NonReplicated, 3, b"");
        assert!(matches!(
            decode_reply(&denied, None),
            Err(IggyError::Status {
                code: ResultCode::StreamIdNotFound
            })
        ));
        let mut framed = 0u32.to_le_bytes().to_vec();
        framed.extend_from_slice(b"rest");
        let store = reply(0, Operation::StoreConsumerOffset, 1, &framed);
        assert_eq!(
            decode_reply(&store, None).ok(),
            Some(Bytes::from_static(b"rest"))
        );
        let ev = EvictionHeader::new(
            0,
            0,
            0,
            9,
            iggy_binary_protocol::consensus::EvictionReason::InvalidCredentials,
        );
        let frame = Bytes::copy_from_slice(bytemuck::bytes_of(&ev));
        match decode_reply(&frame, None) {
            Err(e @ IggyError::Evicted { .. }) => {
                assert!(e.to_string().contains("invalid credentials"), "{e}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_incompatible_protocol_eviction_names_both_versions_and_is_a_config_error() {
        let packed = iggy_binary_protocol::version::pack_protocol_version;
        let ev =
            EvictionHeader::incompatible_protocol(0, 0, 0, 9, packed(0, 12, 3), packed(0, 12, 0));
        let frame = Bytes::copy_from_slice(bytemuck::bytes_of(&ev));
        let e = match decode_reply(&frame, None) {
            Err(e @ IggyError::IncompatibleProtocol { .. }) => e,
            other => panic!("{other:?}"),
        };
        assert!(e.is_config() && !e.is_transient(), "{e:?}");
        let text = e.to_string();
        for part in [
            "this Iggy server does not accept protocol 0.11.0 ",
            "supports Iggy server 0.9.0 and 0.9.0-edge.5",
            "accepts wire versions 0.12.0 to 0.12.3",
        ] {
            assert!(text.contains(part), "{part:?} missing from: {text}");
        }
    }
}
