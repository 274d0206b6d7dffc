//! HeadBucket: `HEAD /` on the bucket; the start-up probe. 200 means the bucket exists and
//! the credentials may use it.
//!
//! A HEAD answer has no body, so S3's error code is not sent; [`parse`] infers it from the
//! status and says so in the message: 404 → `NoSuchBucket`, 403 → `AccessDenied` (a wrong
//! secret, an unknown key id or a missing permission all look the same here), 301 →
//! `PermanentRedirect` (the bucket is in another region, named by `x-amz-bucket-region`).
//!
//! Idempotent (a read).

use crate::endpoint::Endpoint;
use crate::error::Error;
use crate::request::{Method, Request, Response};

pub fn request(endpoint: &Endpoint, bucket: &str) -> Result<Request, Error> {
    let mut req = super::bucket_request(endpoint, Method::Head, bucket)?;
    req.idempotent = true;
    Ok(req)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadBucketOutput {
    /// The bucket's region, when the store says (`x-amz-bucket-region`).
    pub region: Option<String>,
}

pub fn parse(resp: Response) -> Result<HeadBucketOutput, Error> {
    if !resp.is_success() {
        return Err(Error::from(super::status_error(
            &resp,
            "the bucket",
            "NoSuchBucket",
        )));
    }
    Ok(HeadBucketOutput {
        region: super::optional_header(&resp, "x-amz-bucket-region"),
    })
}
