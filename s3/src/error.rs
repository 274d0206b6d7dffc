//! Errors of the S3 client, typed per layer: what S3 answered ([`S3Error`], with its code,
//! request id and status), what the network did ([`TransportError`]), and what the caller
//! configured wrongly ([`Error::Config`]).

use std::fmt;
use std::io;
use std::time::Duration;

/// An error document (or an error status without one) from S3.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Error {
    /// HTTP status of the response.
    pub status: u16,
    /// The S3 error code (`NoSuchBucket`, `SignatureDoesNotMatch`, `SlowDown` …), or a code
    /// made from the status when the body had none (e.g. `Http404` for a HEAD).
    pub code: String,
    pub message: Option<String>,
    pub request_id: Option<String>,
    pub host_id: Option<String>,
    /// The bucket or key the error is about, when S3 says.
    pub resource: Option<String>,
}

impl fmt::Display for S3Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "S3 error {} (HTTP {})", self.code, self.status)?;
        if let Some(m) = &self.message {
            write!(f, ": {m}")?;
        }
        if let Some(r) = &self.resource {
            write!(f, " [resource {r}]")?;
        }
        if let Some(id) = &self.request_id {
            write!(f, " [request id {id}]")?;
        }
        Ok(())
    }
}

impl S3Error {
    /// Whether sending the same request again may succeed: 5xx (but 501 Not Implemented and
    /// 505 HTTP Version Not Supported, which a store answers every time), 503 SlowDown, 408,
    /// 429, the codes S3 documents as transient, and a body the store found changed on the way
    /// (`BadDigest`, `XAmzContentSHA256Mismatch`, `IncompleteBody`: a checksum or the signed
    /// payload hash did not match what arrived, so sending it again mends it).
    pub fn is_retryable(&self) -> bool {
        (matches!(self.status, 500..=599 | 408 | 429) && !matches!(self.status, 501 | 505))
            || matches!(
                self.code.as_str(),
                "SlowDown"
                    | "InternalError"
                    | "ServiceUnavailable"
                    | "RequestTimeout"
                    | "RequestTimeTooSkewed"
                    | "Throttling"
                    | "ThrottlingException"
                    | "BadDigest"
                    | "XAmzContentSHA256Mismatch"
                    | "IncompleteBody"
                    // AWS: a conditional write raced another on the same key; try again.
                    | "ConditionalRequestConflict"
            )
    }

    /// The store refused a conditional write because its condition did not hold (412).
    pub fn is_precondition_failed(&self) -> bool {
        self.status == 412 || self.code == "PreconditionFailed"
    }
}

/// The request got no usable answer.
#[derive(Debug)]
#[non_exhaustive]
pub enum TransportError {
    /// Could not open a connection to `addr`.
    Connect { addr: String, source: io::Error },
    /// The TLS handshake failed (bad certificate, wrong server name …).
    Tls(String),
    /// No answer within the timeout; `phase` says which part of the exchange stalled.
    Timeout { phase: &'static str },
    /// The whole exchange took longer than its deadline (`TransportConfig::deadline_for`):
    /// the store moved the request and its answer slower than the minimum rate.
    TooSlow {
        /// Request body bytes.
        bytes: u64,
        /// The deadline the exchange had.
        deadline: Duration,
        /// The minimum rate it was derived from, bytes per second (0: a fixed deadline).
        min_rate: u64,
    },
    /// The connection failed while sending or receiving (reset, broken pipe …).
    Io(io::Error),
    /// The connection closed before the response was complete.
    Closed,
    /// The response is not valid HTTP/1.1.
    Http(String),
    /// The request cannot be sent as valid HTTP/1.1 (a header value with CR/LF, a header name
    /// that is not a token, a `transfer-encoding` header …); the message names the header.
    InvalidRequest(String),
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportError::Connect { addr, source } => {
                write!(f, "cannot connect to {addr}: {source}")
            }
            TransportError::Tls(e) => write!(f, "TLS error: {e}"),
            TransportError::Timeout { phase } => write!(f, "timed out while {phase}"),
            TransportError::TooSlow {
                bytes,
                deadline,
                min_rate,
            } => {
                write!(
                    f,
                    "the store is too slow: a request of {bytes} bytes and its answer took longer \
                     than their deadline of {deadline:.1?}"
                )?;
                if *min_rate > 0 {
                    write!(f, " (a minimum rate of {min_rate} bytes/s)")?;
                }
                Ok(())
            }
            TransportError::Io(e) => write!(f, "connection failed: {e}"),
            TransportError::Closed => f.write_str("connection closed before the response ended"),
            TransportError::Http(e) => write!(f, "invalid HTTP response: {e}"),
            TransportError::InvalidRequest(e) => write!(f, "invalid HTTP request: {e}"),
        }
    }
}

impl std::error::Error for TransportError {}

impl TransportError {
    /// Whether an idempotent request may be sent again. A TLS failure or a malformed response
    /// is not a passing fault.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            TransportError::Connect { .. }
                | TransportError::Timeout { .. }
                | TransportError::TooSlow { .. }
                | TransportError::Io(_)
                | TransportError::Closed
        )
    }
}

/// Every error of the S3 client.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// Boxed: an S3 error carries several strings, and every `Result` of the crate would
    /// otherwise be as large as it.
    S3(Box<S3Error>),
    Transport(TransportError),
    /// A setting or argument that cannot work; the message names it.
    Config(String),
    /// A successful response whose body cannot be understood.
    InvalidResponse(String),
    /// An object would break S3's limits (part count, part size, object size).
    Limit(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::S3(e) => e.fmt(f),
            Error::Transport(e) => e.fmt(f),
            Error::Config(m) => write!(f, "configuration: {m}"),
            Error::InvalidResponse(m) => write!(f, "invalid S3 response: {m}"),
            Error::Limit(m) => write!(f, "S3 limit: {m}"),
        }
    }
}

impl std::error::Error for Error {}

impl Error {
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::S3(e) => e.is_retryable(),
            Error::Transport(e) => e.is_retryable(),
            _ => false,
        }
    }

    /// The S3 error code, if S3 answered with one.
    pub fn s3_code(&self) -> Option<&str> {
        match self {
            Error::S3(e) => Some(&e.code),
            _ => None,
        }
    }
}

impl From<S3Error> for Error {
    fn from(e: S3Error) -> Self {
        Error::S3(Box::new(e))
    }
}

impl From<TransportError> for Error {
    fn from(e: TransportError) -> Self {
        Error::Transport(e)
    }
}
