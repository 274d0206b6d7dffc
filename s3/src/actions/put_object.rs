//! PutObject: `PUT /key` with the whole object as the body; S3 answers with the ETag.
//!
//! Idempotent: sending the same body to the same key again leaves the same object.

use crate::endpoint::Endpoint;
use crate::error::Error;
use crate::options::{ObjectOptions, Target};
use crate::request::{Body, Method, Request, Response};

/// The request: body, options (Content-Type, SSE, metadata, tags, Content-MD5 …).
pub fn request(
    endpoint: &Endpoint,
    bucket: &str,
    key: &str,
    body: Body,
    options: &ObjectOptions,
) -> Result<Request, Error> {
    let mut req = super::object_request(endpoint, Method::Put, bucket, key)?;
    req.body = body;
    options.apply(&mut req, Target::PutObject)?;
    req.idempotent = true;
    Ok(req)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutObjectOutput {
    /// As S3 sent it, with its quotes (`"9b2cf535f27731c974343645a3985328"`).
    pub etag: String,
    /// Set on versioned buckets.
    pub version_id: Option<String>,
}

pub fn parse(resp: Response) -> Result<PutObjectOutput, Error> {
    super::check_status(&resp)?;
    Ok(PutObjectOutput {
        etag: super::required_header(&resp, "etag", "PutObject")?,
        version_id: super::optional_header(&resp, "x-amz-version-id"),
    })
}
