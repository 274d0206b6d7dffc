//! `transfer-encoding: chunked` bodies: chunk-size lines (with extensions, which are ignored),
//! chunk data, and trailers (read and dropped).

use bytes::{Buf, Bytes, BytesMut};

use crate::error::TransportError;

use super::limits::Limits;

/// Longest chunk-size line accepted, extensions included.
const MAX_SIZE_LINE: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading a `hex-size[;extensions]\r\n` line.
    Size,
    /// Reading chunk data; this many bytes left in the chunk.
    Data(u64),
    /// Reading the CRLF after chunk data.
    DataEnd,
    /// Reading trailer lines up to the empty line; this many trailer bytes so far.
    Trailers(usize),
    Done,
}

/// What one call to [`ChunkedDecoder::decode`] got to.
#[derive(Debug)]
pub(crate) enum Decoded {
    /// At least this many more bytes are needed.
    Partial(usize),
    /// The whole body.
    Complete(Bytes),
}

/// Decodes a chunked body incrementally; data is split off the caller's buffer.
#[derive(Debug)]
pub(crate) struct ChunkedDecoder {
    state: State,
    /// Body data received so far, in order: slices split off the read buffer.
    pieces: Vec<Bytes>,
    /// Sum of the chunk sizes announced so far.
    total: u64,
    /// Bytes at the start of the buffer already searched for the end of a line.
    scanned: usize,
}

impl ChunkedDecoder {
    pub(crate) fn new() -> Self {
        ChunkedDecoder {
            state: State::Size,
            pieces: Vec::new(),
            total: 0,
            scanned: 0,
        }
    }

    /// Consumes what it can of `buf`.
    pub(crate) fn decode(
        &mut self,
        buf: &mut BytesMut,
        limits: &Limits,
    ) -> Result<Decoded, TransportError> {
        loop {
            match self.state {
                State::Size => {
                    let Some(line_len) =
                        self.take_line_len(buf, MAX_SIZE_LINE, "chunk-size line")?
                    else {
                        return Ok(Decoded::Partial(1));
                    };
                    let line = &buf[..line_len];
                    let size = match httparse::parse_chunk_size(line) {
                        Ok(httparse::Status::Complete((used, size)))
                            if used == line_len
                                && line.first().is_some_and(u8::is_ascii_hexdigit) =>
                        {
                            size
                        }
                        _ => {
                            return Err(TransportError::Http(format!(
                                "invalid chunk-size line {:?}",
                                String::from_utf8_lossy(&line[..line_len.min(64)])
                            )));
                        }
                    };
                    buf.advance(line_len);
                    if size == 0 {
                        self.state = State::Trailers(0);
                        continue;
                    }
                    self.total = self.total.saturating_add(size);
                    if self.total > limits.max_body_bytes {
                        return Err(TransportError::Http(format!(
                            "chunked response body is larger than the limit of {} bytes",
                            limits.max_body_bytes
                        )));
                    }
                    self.state = State::Data(size);
                }
                State::Data(remaining) => {
                    if buf.is_empty() {
                        return Ok(Decoded::Partial(clamp_usize(remaining)));
                    }
                    let take = clamp_usize(remaining).min(buf.len());
                    self.pieces.push(buf.split_to(take).freeze());
                    let left = remaining - take as u64;
                    self.state = if left == 0 {
                        State::DataEnd
                    } else {
                        State::Data(left)
                    };
                }
                State::DataEnd => match (buf.first(), buf.get(1)) {
                    (None, _) => return Ok(Decoded::Partial(2)),
                    (Some(b'\r'), None) => return Ok(Decoded::Partial(1)),
                    (Some(b'\r'), Some(b'\n')) => {
                        buf.advance(2);
                        self.state = State::Size;
                    }
                    _ => return Err(missing_crlf()),
                },
                State::Trailers(seen) => {
                    let room = limits.max_head_bytes.saturating_sub(seen);
                    let Some(line_len) = self.take_line_len(buf, room, "trailer section")? else {
                        return Ok(Decoded::Partial(1));
                    };
                    let line = &buf[..line_len];
                    let empty = line == b"\r\n";
                    if !empty && !line.contains(&b':') {
                        return Err(TransportError::Http(format!(
                            "invalid trailer line {:?}",
                            String::from_utf8_lossy(&line[..line.len().min(64)])
                        )));
                    }
                    buf.advance(line_len);
                    self.state = if empty {
                        State::Done
                    } else {
                        State::Trailers(seen + line_len)
                    };
                }
                State::Done => return Ok(Decoded::Complete(self.take_body())),
            }
        }
    }

    /// The length (with the LF) of the line at the start of `buf`, once it is complete; `None`
    /// when more bytes are needed. Lines longer than `max` are an error naming `what`.
    fn take_line_len(
        &mut self,
        buf: &BytesMut,
        max: usize,
        what: &str,
    ) -> Result<Option<usize>, TransportError> {
        let from = self.scanned.min(buf.len());
        match buf[from..].iter().position(|&b| b == b'\n') {
            Some(at) => {
                let len = from + at + 1;
                if len > max {
                    return Err(too_long(what, max));
                }
                self.scanned = 0;
                Ok(Some(len))
            }
            None => {
                if buf.len() > max {
                    return Err(too_long(what, max));
                }
                self.scanned = buf.len();
                Ok(None)
            }
        }
    }

    fn take_body(&mut self) -> Bytes {
        let pieces = std::mem::take(&mut self.pieces);
        if pieces.len() <= 1 {
            return pieces.into_iter().next().unwrap_or_default();
        }
        // Several chunks: one copy into a contiguous body.
        let mut body = BytesMut::with_capacity(clamp_usize(self.total));
        for piece in pieces {
            body.extend_from_slice(&piece);
        }
        body.freeze()
    }
}

fn clamp_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

fn missing_crlf() -> TransportError {
    TransportError::Http("chunk data is not followed by CRLF".to_owned())
}

fn too_long(what: &str, max: usize) -> TransportError {
    TransportError::Http(format!("{what} longer than the limit of {max} bytes"))
}
