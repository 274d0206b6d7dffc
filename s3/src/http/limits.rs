//! Bounds on what a server can make the parser buffer.

/// How much a response may hold before the parser refuses it with
/// [`TransportError::Http`](crate::TransportError::Http). They bound memory against a hostile
/// or broken server: the parser never asks for more than `max_head_bytes + max_body_bytes`
/// (plus the chunk framing) to be buffered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest response head (status line and headers, with the blank line), and also the
    /// largest block of trailers after a chunked body. Default 64 KiB.
    pub max_head_bytes: usize,
    /// Most header fields in one response head. Default 128.
    pub max_headers: usize,
    /// Largest body, whatever its framing. Default 64 MiB: S3's answers to the actions the
    /// sink uses are a few KiB; raise it to read larger objects with GetObject.
    pub max_body_bytes: u64,
    /// How much of the body of an error response (status 300 and up) is read. A longer one is
    /// cut there (chunked: refused) and its connection dropped: S3's error documents are well
    /// under 1 KiB, and the fields read from them come first. Default 64 KiB.
    pub max_error_body_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_head_bytes: 64 * 1024,
            max_headers: 128,
            max_body_bytes: 64 * 1024 * 1024,
            max_error_body_bytes: 64 * 1024,
        }
    }
}
