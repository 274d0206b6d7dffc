//! CreateMultipartUpload: `POST /key?uploads`; S3 answers with the upload id.
//!
//! **Not idempotent**: if the answer is lost and the request is sent again, S3 creates a
//! second upload and the first one is left behind, holding storage until it is aborted (or a
//! bucket lifecycle rule removes incomplete uploads). The request is therefore marked
//! `idempotent = false`: a transport failure after sending surfaces to the caller, who may
//! start over, and ListMultipartUploads (by key prefix) finds uploads left behind so they can
//! be aborted.
//!
//! The object's options (Content-Type, storage class, SSE, ACL, metadata, tags) go on this
//! request, not on the parts (except the SSE-C key, which every part carries too).

use crate::endpoint::Endpoint;
use crate::error::Error;
use crate::options::{ObjectOptions, Target};
use crate::request::{Method, Request, Response};

pub fn request(
    endpoint: &Endpoint,
    bucket: &str,
    key: &str,
    options: &ObjectOptions,
) -> Result<Request, Error> {
    let mut req = super::object_request(endpoint, Method::Post, bucket, key)?;
    req.query.push(("uploads".into(), String::new()));
    options.apply(&mut req, Target::CreateMultipartUpload)?;
    req.idempotent = false;
    Ok(req)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateMultipartUploadOutput {
    pub bucket: Option<String>,
    pub key: Option<String>,
    pub upload_id: String,
}

/// Expects `<InitiateMultipartUploadResult>` with a non-empty `<UploadId>`.
pub fn parse(resp: Response) -> Result<CreateMultipartUploadOutput, Error> {
    let doc = super::success_document(
        &resp,
        "CreateMultipartUpload",
        "InitiateMultipartUploadResult",
    )?;
    let upload_id = doc
        .child_text_nonempty("UploadId")
        .ok_or_else(|| {
            Error::InvalidResponse("CreateMultipartUpload: the response has no UploadId".into())
        })?
        .to_string();
    Ok(CreateMultipartUploadOutput {
        bucket: doc.child_text("Bucket").map(str::to_string),
        key: doc.child_text("Key").map(str::to_string),
        upload_id,
    })
}
