//! HTTP/1.1 framing, sans-IO: the request head the transport writes before the body chunks
//! ([`encode_head`]), and an incremental response parser ([`ResponseParser`]) fed with bytes as
//! they arrive, built on `httparse`.
//!
//! Nothing here touches a socket or a clock. The caller owns the buffers: the head is appended
//! to the caller's `BytesMut`, and a response body is split off the caller's read buffer
//! (`BytesMut::split_to(..).freeze()`), not copied, unless it arrives in several
//! `transfer-encoding: chunked` chunks.
//!
//! Call order for one exchange:
//! 1. [`check_request`] once (refuses headers that would break the framing), then
//!    [`encode_head`] or [`encode_head_into`];
//! 2. write the head and then `req.body.chunks()`;
//! 3. [`ResponseParser::new`] with the request method; append received bytes to a `BytesMut`
//!    and call [`ResponseParser::parse`] until it answers [`Progress::Complete`]; when the peer
//!    closes the connection, call [`ResponseParser::finish_eof`] (a body delimited by the close
//!    ends there; anything else is [`TransportError::Closed`](crate::TransportError::Closed)).

mod chunked;
mod framing;
mod head;
mod limits;
mod parser;

pub use head::{check_request, encode_head, encode_head_into};
pub use limits::Limits;
pub use parser::{Parsed, Progress, ResponseParser};
