//! CompleteMultipartUpload: `POST /key?uploadId=ID` with the list of parts; S3 assembles the
//! object and answers with its ETag (`"md5-of-part-md5s-N"`).
//!
//! S3 answers `200 OK` as soon as it starts assembling, then sends the result document, which
//! may be an `<Error>` (e.g. `InternalError`): [`parse`] treats a 200 carrying an error
//! document as the error it is.
//!
//! Retrying: marked idempotent, since completing the same parts again yields the same object.
//! But when the first attempt succeeded and only its answer was lost, the retry gets 404
//! `NoSuchUpload` (the upload no longer exists): the caller should then check the object with
//! HeadObject (its ETag ends in `-N` with the expected part count) before reporting failure.

use std::fmt::Write as _;

use crate::endpoint::Endpoint;
use crate::error::Error;
use crate::options::{ObjectOptions, Target};
use crate::request::{Body, Method, Request, Response};
use crate::xml::escape_text;

/// One uploaded part: its number and the ETag UploadPart answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletedPart {
    pub part_number: u32,
    pub etag: String,
    /// The part's `x-amz-checksum-crc32c`, when the upload declared CRC32C.
    pub checksum_crc32c: Option<String>,
}

impl From<(u32, String)> for CompletedPart {
    fn from((part_number, etag): (u32, String)) -> Self {
        CompletedPart {
            part_number,
            etag,
            checksum_crc32c: None,
        }
    }
}

/// The request. `parts` must be in ascending part-number order, without gaps in validity
/// (numbers 1 to 10,000, each once); `options` contributes only the SSE-C key.
pub fn request(
    endpoint: &Endpoint,
    bucket: &str,
    key: &str,
    upload_id: &str,
    parts: &[CompletedPart],
    options: &ObjectOptions,
) -> Result<Request, Error> {
    super::check_upload_id(upload_id)?;
    let xml = body(parts)?;
    let mut req = super::object_request(endpoint, Method::Post, bucket, key)?;
    // S3 may send whitespace to keep the connection open while it assembles a large object.
    req.max_response_body = Some(1024 * 1024);
    req.query.push(("uploadId".into(), upload_id.to_string()));
    req.set_header("content-type", "application/xml");
    req.body = Body::from(xml.into_bytes());
    options.apply(&mut req, Target::CompleteMultipartUpload)?;
    req.idempotent = true;
    Ok(req)
}

/// The XML body:
/// `<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"…"</ETag></Part>…</CompleteMultipartUpload>`.
/// Every ETag is written in double quotes, whether or not it came with them (S3 answers
/// quoted ETags; some stores do not).
pub fn body(parts: &[CompletedPart]) -> Result<String, Error> {
    if parts.is_empty() {
        return Err(Error::Config(
            "CompleteMultipartUpload needs at least one part".into(),
        ));
    }
    if parts.len() > super::MAX_PART_NUMBER as usize {
        return Err(Error::Limit(format!(
            "{} parts; S3 allows {}",
            parts.len(),
            super::MAX_PART_NUMBER
        )));
    }
    let mut out = String::with_capacity(40 + parts.len() * 90);
    out.push_str("<CompleteMultipartUpload>");
    let mut previous = 0u32;
    for p in parts {
        super::check_part_number(p.part_number)?;
        if p.part_number <= previous {
            return Err(Error::Config(format!(
                "parts must be in ascending order without repeats: part {} after part {previous}",
                p.part_number
            )));
        }
        previous = p.part_number;
        let inner = super::unquote_etag(&p.etag);
        if inner.is_empty() {
            return Err(Error::Config(format!(
                "part {} has an empty ETag",
                p.part_number
            )));
        }
        let inner = escape_text(inner)?;
        // Writing to a String cannot fail.
        let _ = write!(
            out,
            "<Part><PartNumber>{}</PartNumber><ETag>\"{inner}\"</ETag>",
            p.part_number
        );
        if let Some(crc) = &p.checksum_crc32c {
            let _ = write!(
                out,
                "<ChecksumCRC32C>{}</ChecksumCRC32C>",
                escape_text(crc)?
            );
        }
        out.push_str("</Part>");
    }
    out.push_str("</CompleteMultipartUpload>");
    Ok(out)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompleteMultipartUploadOutput {
    pub location: Option<String>,
    pub bucket: Option<String>,
    pub key: Option<String>,
    /// The object's ETag with its quotes: `"<md5 of the part MD5s>-<part count>"` on AWS.
    pub etag: String,
    pub version_id: Option<String>,
}

/// Expects `<CompleteMultipartUploadResult>`; an `<Error>` document, even in a 200, is
/// [`Error::S3`].
pub fn parse(resp: Response) -> Result<CompleteMultipartUploadOutput, Error> {
    let doc = super::success_document(
        &resp,
        "CompleteMultipartUpload",
        "CompleteMultipartUploadResult",
    )?;
    let etag = doc
        .child_text_nonempty("ETag")
        .ok_or_else(|| {
            Error::InvalidResponse("CompleteMultipartUpload: the result has no ETag".into())
        })?
        .to_string();
    Ok(CompleteMultipartUploadOutput {
        location: doc.child_text_nonempty("Location").map(str::to_string),
        bucket: doc.child_text_nonempty("Bucket").map(str::to_string),
        key: doc.child_text("Key").map(str::to_string),
        etag,
        version_id: super::optional_header(&resp, "x-amz-version-id"),
    })
}
