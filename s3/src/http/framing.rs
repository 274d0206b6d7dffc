//! How a response body is delimited (RFC 9112 section 6.3), and whether the connection can carry
//! another request afterwards.

use crate::error::TransportError;
use crate::request::Method;

use super::limits::Limits;

/// How the body of a response ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body: a response to HEAD, 204, 304.
    Empty,
    /// `content-length` bytes.
    Length(u64),
    /// `transfer-encoding: chunked`.
    Chunked,
    /// Neither: the body ends when the server closes the connection.
    UntilClose,
}

/// The framing and connection facts read from one final (non-1xx) response head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BodyPlan {
    pub framing: Framing,
    pub keep_alive: bool,
}

/// Decides the framing of a final response to a `method` request with `status`, from its
/// headers (names lower case). `minor_version` is the `x` of `HTTP/1.x`.
pub(crate) fn plan_body(
    method: Method,
    status: u16,
    minor_version: u8,
    headers: &[(String, String)],
    limits: &Limits,
) -> Result<BodyPlan, TransportError> {
    let (mut close, mut asked_keep_alive) = (false, false);
    for token in headers
        .iter()
        .filter(|(n, _)| n == "connection")
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
    {
        close |= token.eq_ignore_ascii_case("close");
        asked_keep_alive |= token.eq_ignore_ascii_case("keep-alive");
    }
    // HTTP/1.1 keeps the connection unless told to close; HTTP/1.0 closes unless told to keep.
    let mut keep_alive = !close && (minor_version >= 1 || asked_keep_alive);

    if method == Method::Head || status == 204 || status == 304 {
        return Ok(BodyPlan {
            framing: Framing::Empty,
            keep_alive,
        });
    }

    let transfer_encoding = last_transfer_coding(headers);
    let content_length = content_length(headers)?;
    if let Some(coding) = transfer_encoding {
        // With both, transfer-encoding wins, and the connection must not be reused (the
        // message may be an attempt at request smuggling).
        if content_length.is_some() {
            keep_alive = false;
        }
        return Ok(if coding.eq_ignore_ascii_case("chunked") {
            BodyPlan {
                framing: Framing::Chunked,
                keep_alive,
            }
        } else {
            BodyPlan {
                framing: Framing::UntilClose,
                keep_alive: false,
            }
        });
    }
    if let Some(len) = content_length {
        if len > limits.max_body_bytes {
            return Err(TransportError::Http(format!(
                "response body of {len} bytes (content-length) is larger than the limit of {} \
                 bytes",
                limits.max_body_bytes
            )));
        }
        return Ok(BodyPlan {
            framing: Framing::Length(len),
            keep_alive,
        });
    }
    Ok(BodyPlan {
        framing: Framing::UntilClose,
        keep_alive: false,
    })
}

/// The last transfer coding named by the `transfer-encoding` header(s), if any.
fn last_transfer_coding(headers: &[(String, String)]) -> Option<&str> {
    headers
        .iter()
        .rev()
        .filter(|(n, _)| n == "transfer-encoding")
        .flat_map(|(_, v)| v.rsplit(','))
        .map(str::trim)
        .find(|t| !t.is_empty())
}

/// The `content-length`, if present. Repeated headers or a list (`5, 5`) are accepted when
/// every value is the same; anything but digits is an error.
fn content_length(headers: &[(String, String)]) -> Result<Option<u64>, TransportError> {
    let mut found: Option<u64> = None;
    for (_, value) in headers.iter().filter(|(n, _)| n == "content-length") {
        for item in value.split(',').map(str::trim) {
            if item.is_empty() || !item.bytes().all(|b| b.is_ascii_digit()) {
                return Err(TransportError::Http(format!(
                    "content-length {value:?} is not a number"
                )));
            }
            let len: u64 = item.parse().map_err(|_| {
                TransportError::Http(format!("content-length {value:?} is too large"))
            })?;
            match found {
                Some(previous) if previous != len => {
                    return Err(TransportError::Http(format!(
                        "conflicting content-length values {previous} and {len}"
                    )));
                }
                _ => found = Some(len),
            }
        }
    }
    Ok(found)
}
