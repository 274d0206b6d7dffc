//! The request head: request line, `host`, `content-length`, the request's headers, blank line.
//! The body is not part of it: the transport writes the body chunks after the head, each as its
//! own buffer.

use std::fmt::Write as _;

use bytes::{Bytes, BytesMut};

use crate::error::TransportError;
use crate::request::{Method, Request};

/// Headers the transport writes itself; a request that carries them has them left out by
/// [`encode_head_into`].
const FRAMING_HEADERS: &[&str] = &["host", "content-length"];

/// Whether the request sends a `content-length` header: always when there is a body, and for
/// PUT and POST also when the body is empty (S3 wants `content-length: 0` there); GET, HEAD and
/// DELETE without a body send none.
fn sends_content_length(req: &Request) -> bool {
    !req.body.is_empty() || matches!(req.method, Method::Put | Method::Post)
}

/// Appends the head of `req` to `out`:
///
/// ```text
/// METHOD target HTTP/1.1\r\n
/// host: {req.host}\r\n
/// content-length: {len}\r\n      (see below)
/// {name}: {value}\r\n            (each of req.headers, in order)
/// \r\n
/// ```
///
/// `target` is [`Request::target`]. `content-length` is sent whenever the body is not empty,
/// and for PUT and POST also when it is. `host` and `content-length` entries in `req.headers`
/// are skipped (the values above are the ones that frame the request). Call [`check_request`]
/// first: this function writes what it is given.
pub fn encode_head_into(req: &Request, out: &mut BytesMut) {
    let target = req.target();
    let mut size = req.method.as_str().len() + target.len() + req.host.len() + 64;
    for (name, value) in &req.headers {
        size += name.len() + value.len() + 4;
    }
    out.reserve(size);
    out.extend_from_slice(req.method.as_str().as_bytes());
    out.extend_from_slice(b" ");
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    out.extend_from_slice(req.host.as_bytes());
    out.extend_from_slice(b"\r\n");
    if sends_content_length(req) {
        // Writing a number into a BytesMut cannot fail (it grows as needed).
        let _ = write!(out, "content-length: {}\r\n", req.body.len());
    }
    for (name, value) in &req.headers {
        if FRAMING_HEADERS.iter().any(|h| name.eq_ignore_ascii_case(h)) {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// The head of `req` as one buffer; see [`encode_head_into`].
pub fn encode_head(req: &Request) -> Bytes {
    let mut out = BytesMut::new();
    encode_head_into(req, &mut out);
    out.freeze()
}

/// Refuses a request whose head would not be valid HTTP/1.1 or would change the framing: a
/// header name that is not a token, a value or host with CR, LF or NUL (header injection), a
/// target with spaces or control characters, or a `transfer-encoding` header (the transport
/// frames bodies with `content-length` only). Error messages name the header, never its value
/// (values can be secrets).
pub fn check_request(req: &Request) -> Result<(), TransportError> {
    if req.host.is_empty() || !req.host.bytes().all(is_host_byte) {
        return Err(TransportError::InvalidRequest(format!(
            "host {:?} is empty or has characters a Host header cannot carry",
            req.host
        )));
    }
    if !req.path.starts_with('/') {
        return Err(TransportError::InvalidRequest(format!(
            "path {:?} does not start with '/'",
            req.path
        )));
    }
    if !req.path.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(TransportError::InvalidRequest(format!(
            "path {:?} has spaces, control characters or non-ASCII bytes (it must be \
             percent-encoded)",
            req.path
        )));
    }
    for (name, value) in &req.headers {
        if name.is_empty() || !name.bytes().all(is_token_byte) {
            return Err(TransportError::InvalidRequest(format!(
                "header name {name:?} is not an HTTP token"
            )));
        }
        if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(TransportError::InvalidRequest(
                "transfer-encoding is not supported: bodies are sent with content-length"
                    .to_owned(),
            ));
        }
        if !value.bytes().all(is_value_byte) {
            return Err(TransportError::InvalidRequest(format!(
                "the value of header {name:?} contains CR, LF, NUL or another control character"
            )));
        }
    }
    Ok(())
}

/// `tchar` of RFC 9110.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Field value bytes: visible ASCII, space, tab, and obs-text (0x80..=0xFF).
fn is_value_byte(b: u8) -> bool {
    b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80
}

/// Host names, IPv4 and bracketed IPv6 literals, with an optional port.
fn is_host_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~:[]%".contains(&b)
}
