//! The incremental response parser: head with `httparse`, then the body by its framing.

use bytes::{Buf, Bytes, BytesMut};

use crate::error::TransportError;
use crate::request::{Method, Response};

use super::chunked::{ChunkedDecoder, Decoded};
use super::framing::{Framing, plan_body};
use super::limits::Limits;

/// Most interim (1xx) responses skipped before the final one.
const MAX_INTERIM: usize = 16;

/// A complete response and what it says about its connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub response: Response,
    /// Whether the connection may carry another request: HTTP/1.1 without `connection: close`,
    /// or HTTP/1.0 with `connection: keep-alive`; never after a body delimited by the close.
    /// (Bytes left in the buffer after the response are the caller's to judge: unsolicited
    /// bytes make a connection unfit for reuse.)
    pub keep_alive: bool,
}

/// What [`ResponseParser::parse`] got to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Need at least this many more bytes (at least 1) before the next step; the caller may
    /// reserve that much room in its buffer. Not an error.
    Partial(usize),
    /// The response is complete; bytes after it stay in the buffer.
    Complete(Parsed),
}

#[derive(Debug)]
enum State {
    Head,
    Body {
        status: u16,
        headers: Vec<(String, String)>,
        keep_alive: bool,
        body: BodyState,
        /// The most body bytes kept.
        cap: u64,
        /// Whether a longer body is cut at `cap` (an error response) rather than refused.
        cut: bool,
    },
    Done,
}

#[derive(Debug)]
enum BodyState {
    Empty,
    Length(u64),
    /// An error response longer than the cap: its first bytes, then the connection is dropped.
    Prefix(u64),
    Chunked(ChunkedDecoder),
    UntilClose,
}

/// Parses one response, fed with the bytes of a `BytesMut` as they arrive. It consumes the
/// bytes it has used from the front of the buffer (the head is dropped, the body split off), so
/// the caller appends new bytes at the end and calls again.
///
/// It skips interim `1xx` responses (`100 Continue`, `103 Early Hints`; a `101` is an error),
/// knows that responses to HEAD and `204`/`304` responses have no body, and reads bodies framed
/// by `content-length`, by `transfer-encoding: chunked` (extensions ignored, trailers read and
/// dropped) or by the close of the connection ([`ResponseParser::finish_eof`]). Sizes are
/// bounded by [`Limits`]; malformed input is an error, never a panic.
#[derive(Debug)]
pub struct ResponseParser {
    method: Method,
    limits: Limits,
    state: State,
    /// Where in the buffer the next LF that may begin the blank line is searched from.
    lf_from: usize,
    interim: usize,
}

impl ResponseParser {
    /// A parser for the response to a `method` request.
    pub fn new(method: Method, limits: Limits) -> Self {
        ResponseParser {
            method,
            limits,
            state: State::Head,
            lf_from: 0,
            interim: 0,
        }
    }

    /// Keeps at most `max` bytes of a successful body (the most the action can legitimately
    /// get back), below [`Limits::max_body_bytes`].
    pub fn with_body_limit(mut self, max: Option<u64>) -> Self {
        if let Some(max) = max {
            self.limits.max_body_bytes = self.limits.max_body_bytes.min(max);
        }
        self
    }

    /// Whether the final response head has been read (the body may still be arriving).
    pub fn head_complete(&self) -> bool {
        !matches!(self.state, State::Head)
    }

    /// Consumes what it can from the front of `buf`.
    pub fn parse(&mut self, buf: &mut BytesMut) -> Result<Progress, TransportError> {
        loop {
            match &mut self.state {
                State::Head => {
                    if let Some(need) = self.parse_head(buf)? {
                        return Ok(Progress::Partial(need));
                    }
                }
                State::Body {
                    body,
                    cap,
                    cut,
                    status,
                    ..
                } => {
                    let data = match body {
                        BodyState::Empty => Bytes::new(),
                        BodyState::Length(remaining) | BodyState::Prefix(remaining) => {
                            let have = buf.len() as u64;
                            if have < *remaining {
                                return Ok(Progress::Partial(clamp_usize(*remaining - have)));
                            }
                            buf.split_to(clamp_usize(*remaining)).freeze()
                        }
                        BodyState::Chunked(decoder) => {
                            let limits = Limits {
                                max_body_bytes: *cap,
                                ..self.limits
                            };
                            match decoder.decode(buf, &limits) {
                                Ok(Decoded::Partial(need)) => {
                                    return Ok(Progress::Partial(need.max(1)));
                                }
                                Ok(Decoded::Complete(data)) => data,
                                Err(e) if *cut => {
                                    return Err(TransportError::Http(format!(
                                        "error response {status}: {e}"
                                    )));
                                }
                                Err(e) => return Err(e),
                            }
                        }
                        BodyState::UntilClose => {
                            if buf.len() as u64 > *cap {
                                if !*cut {
                                    return Err(body_too_large(*cap));
                                }
                                buf.split_to(clamp_usize(*cap)).freeze()
                            } else {
                                return Ok(Progress::Partial(1));
                            }
                        }
                    };
                    return Ok(Progress::Complete(self.complete(data)?));
                }
                State::Done => {
                    return Err(TransportError::Http(
                        "the response parser was called again after the response ended".to_owned(),
                    ));
                }
            }
        }
    }

    /// The peer closed the connection: a body delimited by the close is complete with what
    /// `buf` holds; anything else is [`TransportError::Closed`].
    pub fn finish_eof(&mut self, buf: &mut BytesMut) -> Result<Parsed, TransportError> {
        match &self.state {
            State::Body {
                body: BodyState::UntilClose,
                cap,
                cut,
                ..
            } => {
                let (cap, cut) = (*cap, *cut);
                if buf.len() as u64 > cap {
                    if !cut {
                        return Err(body_too_large(cap));
                    }
                    buf.truncate(clamp_usize(cap));
                }
                let data = buf.split().freeze();
                self.complete(data)
            }
            _ => Err(TransportError::Closed),
        }
    }

    fn complete(&mut self, data: Bytes) -> Result<Parsed, TransportError> {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Body {
                status,
                headers,
                keep_alive,
                body,
                ..
            } => Ok(Parsed {
                response: Response {
                    status,
                    headers,
                    body: data,
                },
                keep_alive: keep_alive
                    && !matches!(body, BodyState::UntilClose | BodyState::Prefix(_)),
            }),
            _ => Err(TransportError::Http(
                "internal: response completed before its head".to_owned(),
            )),
        }
    }

    /// Reads a head if one is complete in `buf`: `Ok(None)` when the state moved on (final
    /// head read, or an interim one skipped), `Ok(Some(need))` when more bytes are needed.
    fn parse_head(&mut self, buf: &mut BytesMut) -> Result<Option<usize>, TransportError> {
        let mut slots = vec![httparse::EMPTY_HEADER; self.limits.max_headers];
        let mut head = httparse::Response::new(&mut slots);
        let used = loop {
            let Some(end) = self.find_head_end(buf) else {
                if buf.len() > self.limits.max_head_bytes {
                    return Err(head_too_large(self.limits.max_head_bytes));
                }
                return Ok(Some(1));
            };
            if end > self.limits.max_head_bytes {
                return Err(head_too_large(self.limits.max_head_bytes));
            }
            match head.parse(&buf[..end]) {
                Ok(httparse::Status::Complete(used)) => break used,
                // Only empty lines so far (httparse skips them before the status line): look
                // for the end of the head further on, from the last LF of this blank line.
                Ok(httparse::Status::Partial) => self.lf_from = end.saturating_sub(1),
                Err(httparse::Error::TooManyHeaders) => {
                    return Err(TransportError::Http(format!(
                        "response head has more than {} header fields",
                        self.limits.max_headers
                    )));
                }
                Err(e) => {
                    return Err(TransportError::Http(format!(
                        "malformed response head: {e}"
                    )));
                }
            }
        };
        let (Some(status), Some(minor)) = (head.code, head.version) else {
            return Err(TransportError::Http(
                "response head without status code or version".to_owned(),
            ));
        };
        let headers: Vec<(String, String)> = head
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_ascii_lowercase(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect();
        buf.advance(used);
        self.lf_from = 0;

        if (100..200).contains(&status) {
            if status == 101 {
                return Err(TransportError::Http(
                    "server switched protocols (101), which an S3 request never asks for"
                        .to_owned(),
                ));
            }
            self.interim += 1;
            if self.interim > MAX_INTERIM {
                return Err(TransportError::Http(format!(
                    "more than {MAX_INTERIM} interim (1xx) responses"
                )));
            }
            return Ok(None);
        }

        // An error response is read only as far as an error document can go; the fields read
        // from it come first, so what is cut does not matter.
        let cut = status >= 300;
        let cap = if cut {
            self.limits
                .max_body_bytes
                .min(self.limits.max_error_body_bytes)
        } else {
            self.limits.max_body_bytes
        };
        let planning = Limits {
            max_body_bytes: if cut { u64::MAX } else { cap },
            ..self.limits
        };
        let plan = plan_body(self.method, status, minor, &headers, &planning)?;
        let body = match plan.framing {
            Framing::Empty | Framing::Length(0) => BodyState::Empty,
            Framing::Length(n) if n > cap => BodyState::Prefix(cap),
            Framing::Length(n) => BodyState::Length(n),
            Framing::Chunked => BodyState::Chunked(ChunkedDecoder::new()),
            Framing::UntilClose => BodyState::UntilClose,
        };
        self.state = State::Body {
            status,
            headers,
            keep_alive: plan.keep_alive,
            body,
            cap,
            cut,
        };
        Ok(None)
    }

    /// The end of the head (just past the blank line) if it is in `buf`. Lines may end in CRLF
    /// or a bare LF. Each LF is looked at once (or again, only while the bytes after it have not
    /// arrived), so feeding a head byte by byte costs linear time.
    fn find_head_end(&mut self, buf: &BytesMut) -> Option<usize> {
        let mut i = self.lf_from.min(buf.len());
        while let Some(at) = buf[i..].iter().position(|&b| b == b'\n') {
            let lf = i + at;
            match (buf.get(lf + 1), buf.get(lf + 2)) {
                (Some(b'\n'), _) => return Some(lf + 2),
                (Some(b'\r'), Some(b'\n')) => return Some(lf + 3),
                (None, _) | (Some(b'\r'), None) => {
                    self.lf_from = lf;
                    return None;
                }
                _ => i = lf + 1,
            }
        }
        self.lf_from = buf.len();
        None
    }
}

fn clamp_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

fn head_too_large(max: usize) -> TransportError {
    TransportError::Http(format!(
        "response head larger than the limit of {max} bytes"
    ))
}

fn body_too_large(max: u64) -> TransportError {
    TransportError::Http(format!(
        "response body larger than the limit of {max} bytes"
    ))
}
