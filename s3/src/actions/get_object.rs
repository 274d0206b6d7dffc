//! GetObject: `GET /key` (optionally a byte range); the object read whole into memory, for
//! tests and probes.
//!
//! Idempotent (a read).

use std::ops::RangeInclusive;

use bytes::Bytes;

use crate::endpoint::Endpoint;
use crate::error::Error;
use crate::options::{ObjectOptions, Target};
use crate::request::{Method, Request, Response};

/// `range` asks for bytes `start..=end` (S3 answers 206); `options` contributes only the
/// SSE-C key.
pub fn request(
    endpoint: &Endpoint,
    bucket: &str,
    key: &str,
    range: Option<RangeInclusive<u64>>,
    options: &ObjectOptions,
) -> Result<Request, Error> {
    let mut req = super::object_request(endpoint, Method::Get, bucket, key)?;
    // An object: as long as the transport's body limit allows.
    req.max_response_body = None;
    if let Some(r) = range {
        if r.start() > r.end() {
            return Err(Error::Config(format!(
                "byte range {}..={} is empty",
                r.start(),
                r.end()
            )));
        }
        req.set_header("range", format!("bytes={}-{}", r.start(), r.end()));
    }
    options.apply(&mut req, Target::Read)?;
    req.idempotent = true;
    Ok(req)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetObjectOutput {
    pub body: Bytes,
    pub etag: Option<String>,
    /// The Content-Length S3 announced (equal to `body.len()`, checked).
    pub content_length: u64,
    pub content_type: Option<String>,
    pub content_range: Option<String>,
    pub metadata: Vec<(String, String)>,
}

pub fn parse(resp: Response) -> Result<GetObjectOutput, Error> {
    super::check_status(&resp)?;
    let body_len = resp.body.len() as u64;
    let content_length = match resp.header("content-length") {
        None => body_len,
        Some(v) => {
            let n = v.trim().parse::<u64>().map_err(|_| {
                Error::InvalidResponse(format!("GetObject: Content-Length {v:?} is not a number"))
            })?;
            if n != body_len {
                return Err(Error::InvalidResponse(format!(
                    "GetObject: Content-Length is {n} but the body has {body_len} bytes"
                )));
            }
            n
        }
    };
    let mut out = GetObjectOutput {
        body: Bytes::new(),
        etag: super::optional_header(&resp, "etag"),
        content_length,
        content_type: super::optional_header(&resp, "content-type"),
        content_range: super::optional_header(&resp, "content-range"),
        metadata: super::metadata(&resp),
    };
    out.body = resp.body;
    Ok(out)
}
