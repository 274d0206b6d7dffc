//! AbortMultipartUpload: `DELETE /key?uploadId=ID`; S3 answers 204 and frees the parts.
//!
//! Idempotent: when a retry finds the upload already gone (404 `NoSuchUpload`, because the
//! first attempt succeeded and its answer was lost), [`parse`] reports
//! [`AbortOutcome::AlreadyGone`] instead of an error.

use crate::endpoint::Endpoint;
use crate::error::Error;
use crate::request::{Method, Request, Response};

pub fn request(
    endpoint: &Endpoint,
    bucket: &str,
    key: &str,
    upload_id: &str,
) -> Result<Request, Error> {
    super::check_upload_id(upload_id)?;
    let mut req = super::object_request(endpoint, Method::Delete, bucket, key)?;
    req.query.push(("uploadId".into(), upload_id.to_string()));
    req.idempotent = true;
    Ok(req)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AbortOutcome {
    Aborted,
    /// S3 answered `NoSuchUpload`: the upload was already aborted or completed.
    AlreadyGone,
}

pub fn parse(resp: Response) -> Result<AbortOutcome, Error> {
    if resp.is_success() {
        return Ok(AbortOutcome::Aborted);
    }
    let err = crate::xml::parse_error(&resp);
    if resp.status == 404 && err.code == "NoSuchUpload" {
        return Ok(AbortOutcome::AlreadyGone);
    }
    Err(Error::from(err))
}
