//! DeleteObject: `DELETE /key`; S3 answers 204 whether or not the key existed.
//!
//! Idempotent.

use crate::endpoint::Endpoint;
use crate::error::Error;
use crate::request::{Method, Request, Response};

pub fn request(endpoint: &Endpoint, bucket: &str, key: &str) -> Result<Request, Error> {
    let mut req = super::object_request(endpoint, Method::Delete, bucket, key)?;
    req.idempotent = true;
    Ok(req)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteObjectOutput {
    /// On a versioned bucket: whether a delete marker was created.
    pub delete_marker: bool,
    pub version_id: Option<String>,
}

pub fn parse(resp: Response) -> Result<DeleteObjectOutput, Error> {
    super::check_status(&resp)?;
    Ok(DeleteObjectOutput {
        delete_marker: resp
            .header("x-amz-delete-marker")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true")),
        version_id: super::optional_header(&resp, "x-amz-version-id"),
    })
}
