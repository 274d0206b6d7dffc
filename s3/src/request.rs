//! A request as the sans-IO core builds it and the transport sends it. The body is a list of
//! `Bytes` chunks (a part is the chunks the uploader gathered), never joined into one buffer.

use std::fmt;

use bytes::Bytes;

/// The HTTP methods S3's actions use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    Get,
    Head,
    Put,
    Post,
    Delete,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Put => "PUT",
            Method::Post => "POST",
            Method::Delete => "DELETE",
        }
    }
}

/// A request body: chunks in order.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Body {
    chunks: Vec<Bytes>,
    len: u64,
}

impl Body {
    pub fn empty() -> Self {
        Body::default()
    }

    pub fn from_chunks(chunks: Vec<Bytes>) -> Self {
        let len = chunks.iter().map(|c| c.len() as u64).sum();
        Body { chunks, len }
    }

    pub fn push(&mut self, chunk: Bytes) {
        self.len += chunk.len() as u64;
        self.chunks.push(chunk);
    }

    pub fn chunks(&self) -> &[Bytes] {
        &self.chunks
    }

    pub fn into_chunks(self) -> Vec<Bytes> {
        self.chunks
    }

    /// Content length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl From<Bytes> for Body {
    fn from(b: Bytes) -> Self {
        Body::from_chunks(vec![b])
    }
}

impl From<Vec<u8>> for Body {
    fn from(v: Vec<u8>) -> Self {
        Body::from(Bytes::from(v))
    }
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Body(<{} bytes in {} chunks>)",
            self.len,
            self.chunks.len()
        )
    }
}

/// One HTTP request to S3.
#[derive(Clone)]
pub struct Request {
    pub method: Method,
    /// The `Host` header value (with the bucket in it for virtual-hosted-style addressing).
    pub host: String,
    /// The path, already percent-encoded as S3 expects (`/bucket/key` or `/key`).
    pub path: String,
    /// Query parameters, not encoded; in the order given (signing sorts them).
    pub query: Vec<(String, String)>,
    /// Header names in lower case. `host` and `content-length` are added by the transport.
    pub headers: Vec<(String, String)>,
    pub body: Body,
    /// Whether the request may be sent again after a failure whose outcome is unknown.
    pub idempotent: bool,
    /// The longest successful response body this action can legitimately get back (the
    /// transport's `Limits::max_body_bytes` when `None`); a longer one is refused.
    pub max_response_body: Option<u64>,
}

/// Headers whose values are secrets: shown as `<redacted>` by `Debug`.
pub(crate) const SECRET_HEADERS: &[&str] = &[
    "authorization",
    "x-amz-security-token",
    "x-amz-server-side-encryption-customer-key",
];

impl Request {
    pub fn new(method: Method, host: impl Into<String>, path: impl Into<String>) -> Self {
        Request {
            method,
            host: host.into(),
            path: path.into(),
            query: Vec::new(),
            headers: Vec::new(),
            body: Body::empty(),
            idempotent: true,
            max_response_body: None,
        }
    }

    /// The first value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Sets header `name` (lower case), replacing any value it had.
    pub fn set_header(&mut self, name: impl Into<String>, value: impl Into<String>) {
        let name = name.into();
        let value = value.into();
        match self.headers.iter_mut().find(|(n, _)| *n == name) {
            Some(h) => h.1 = value,
            None => self.headers.push((name, value)),
        }
    }

    /// `path?query` as it goes on the request line, query encoded (RFC 3986 unreserved kept).
    pub fn target(&self) -> String {
        let mut t = self.path.clone();
        for (i, (k, v)) in self.query.iter().enumerate() {
            t.push(if i == 0 { '?' } else { '&' });
            t.push_str(&crate::endpoint::uri_encode(k, true));
            if !v.is_empty() || !k.is_empty() {
                t.push('=');
                t.push_str(&crate::endpoint::uri_encode(v, true));
            }
        }
        t
    }
}

impl fmt::Debug for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(n, v)| {
                let v = if SECRET_HEADERS.contains(&n.as_str()) {
                    "<redacted>"
                } else {
                    v.as_str()
                };
                (n.as_str(), v)
            })
            .collect();
        f.debug_struct("Request")
            .field("method", &self.method)
            .field("host", &self.host)
            .field("path", &self.path)
            .field("query", &self.query)
            .field("headers", &headers)
            .field("body", &self.body)
            .finish()
    }
}

/// A response: status, headers (names lower case), and the whole body (S3's answers to the
/// actions the sink uses are small; GetObject bodies are read whole, for tests and probes).
#[derive(Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

impl fmt::Debug for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Response")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .field("body", &format_args!("<{} bytes>", self.body.len()))
            .finish()
    }
}
