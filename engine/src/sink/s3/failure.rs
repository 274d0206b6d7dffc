//! Why an object failed and whether trying again can help, and the log of the S3 client's
//! retries.

use super::*;
use crate::error::ErrorClass;

/// Logs the attempts the S3 client retries: a store too slow for its deadline by name (a WARN,
/// at most one in 10 s, with how many more), the rest at debug level (the object's own failure,
/// once every attempt failed, is a WARN).
pub(super) fn retry_logger(sink: &str) -> spillway_s3::client::RetryObserver {
    let sink = sink.to_owned();
    let limit = RefCell::new(crate::ratelog::RateLimit::new(Duration::from_secs(10), 1));
    Box::new(move |e, attempt, wait| {
        let slow = matches!(
            e,
            spillway_s3::Error::Transport(spillway_s3::TransportError::TooSlow { .. })
        );
        if !slow {
            debug!(sink = %sink, attempt, "S3 request failed, retrying in {wait:.1?}: {e}");
            return;
        }
        let now = Instant::now();
        let mut limit = limit.borrow_mut();
        let more = limit
            .due(now, false)
            .map(|n| format!(" ({n} more since the last line)"));
        if limit.admit(now) {
            warn!(
                sink = %sink,
                attempt,
                "slow S3 store: {e}; retrying in {wait:.1?} (the deadline is \
                 sink.s3.request_timeout plus the request's size at sink.s3.min_transfer_rate){}",
                more.unwrap_or_default()
            );
        }
    })
}

/// An S3 client error while doing `what`, as the engine's error: permanent when no retry can
/// mend it (see [`permanent`]; the sink stops, naming it), transient otherwise.
pub(super) fn s3_failure(what: impl std::fmt::Display, e: &spillway_s3::Error) -> EngineError {
    let class = if permanent(e) {
        ErrorClass::Permanent
    } else {
        ErrorClass::Transient
    };
    EngineError::new(class, format!("{what}: {e}"))
}

/// Whether writing the object again cannot succeed: an S3 error that is not retryable (after
/// the client's own retries), except those that concern this one upload (it was aborted
/// under us, a part went missing, a body was corrupted on the way), which writing the object
/// again mends; a TLS failure; a request the client cannot build; an object over S3's limits.
pub(super) fn permanent(e: &spillway_s3::Error) -> bool {
    use spillway_s3::{Error, TransportError};
    match e {
        Error::S3(s) => {
            !s.is_retryable()
                && !matches!(
                    s.code.as_str(),
                    "NoSuchUpload"
                        | "NoSuchKey"
                        | "InvalidPart"
                        | "InvalidPartOrder"
                        | "BadDigest"
                        | "InvalidDigest"
                        | "XAmzContentSHA256Mismatch"
                        | "IncompleteBody"
                )
        }
        Error::Transport(TransportError::Tls(_) | TransportError::InvalidRequest(_)) => true,
        Error::Transport(_) | Error::InvalidResponse(_) => false,
        Error::Config(_) | Error::Limit(_) => true,
        _ => false,
    }
}
