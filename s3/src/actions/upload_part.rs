//! UploadPart: `PUT /key?partNumber=N&uploadId=ID` with the part as the body; S3 answers with
//! the part's ETag, which CompleteMultipartUpload needs.
//!
//! Idempotent: uploading the same part number again replaces the part, so a part is retried
//! alone. Only the SSE-C key and Content-MD5 (when enabled) of the options go on a part.

use crate::endpoint::Endpoint;
use crate::error::Error;
use crate::options::{ObjectOptions, Target};
use crate::request::{Body, Method, Request, Response};

pub fn request(
    endpoint: &Endpoint,
    bucket: &str,
    key: &str,
    upload_id: &str,
    part_number: u32,
    body: Body,
    options: &ObjectOptions,
) -> Result<Request, Error> {
    super::check_part_number(part_number)?;
    super::check_upload_id(upload_id)?;
    let mut req = super::object_request(endpoint, Method::Put, bucket, key)?;
    req.query
        .push(("partNumber".into(), part_number.to_string()));
    req.query.push(("uploadId".into(), upload_id.to_string()));
    req.body = body;
    options.apply(&mut req, Target::UploadPart)?;
    req.idempotent = true;
    Ok(req)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadPartOutput {
    /// As S3 sent it, with its quotes; give it back unchanged in CompleteMultipartUpload.
    pub etag: String,
}

pub fn parse(resp: Response) -> Result<UploadPartOutput, Error> {
    super::check_status(&resp)?;
    Ok(UploadPartOutput {
        etag: super::required_header(&resp, "etag", "UploadPart")?,
    })
}
