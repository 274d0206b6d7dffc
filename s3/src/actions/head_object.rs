//! HeadObject: `HEAD /key`; the object's size, ETag and metadata without its body.
//!
//! As for every HEAD, errors carry no document: 404 → `NoSuchKey`, 403 → `AccessDenied`,
//! inferred from the status. An SSE-C object needs its key (from the options) to be read.
//!
//! Idempotent (a read).

use crate::endpoint::Endpoint;
use crate::error::Error;
use crate::options::{ObjectOptions, Target};
use crate::request::{Method, Request, Response};

/// `options` contributes only the SSE-C key.
pub fn request(
    endpoint: &Endpoint,
    bucket: &str,
    key: &str,
    options: &ObjectOptions,
) -> Result<Request, Error> {
    let mut req = super::object_request(endpoint, Method::Head, bucket, key)?;
    options.apply(&mut req, Target::Read)?;
    req.idempotent = true;
    Ok(req)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadObjectOutput {
    /// Content-Length: the object's size in bytes.
    pub size: u64,
    /// With its quotes; `"…-N"` for an object uploaded in N parts.
    pub etag: Option<String>,
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    pub last_modified: Option<String>,
    pub storage_class: Option<String>,
    /// `x-amz-server-side-encryption` (`AES256`, `aws:kms`).
    pub server_side_encryption: Option<String>,
    pub version_id: Option<String>,
    /// User metadata (`x-amz-meta-*`), names without the prefix, as the store sent them.
    pub metadata: Vec<(String, String)>,
}

pub fn parse(resp: Response) -> Result<HeadObjectOutput, Error> {
    if !resp.is_success() {
        return Err(Error::from(super::status_error(
            &resp,
            "the object",
            "NoSuchKey",
        )));
    }
    let len = super::required_header(&resp, "content-length", "HeadObject")?;
    let size = len.trim().parse::<u64>().map_err(|_| {
        Error::InvalidResponse(format!(
            "HeadObject: Content-Length {len:?} is not a number"
        ))
    })?;
    Ok(HeadObjectOutput {
        size,
        etag: super::optional_header(&resp, "etag"),
        content_type: super::optional_header(&resp, "content-type"),
        content_encoding: super::optional_header(&resp, "content-encoding"),
        last_modified: super::optional_header(&resp, "last-modified"),
        storage_class: super::optional_header(&resp, "x-amz-storage-class"),
        server_side_encryption: super::optional_header(&resp, "x-amz-server-side-encryption"),
        version_id: super::optional_header(&resp, "x-amz-version-id"),
        metadata: super::metadata(&resp),
    })
}
