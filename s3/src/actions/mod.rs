//! S3 actions, one file each. Every action has a `request(...)` builder that checks its
//! arguments and returns the unsigned [`Request`](crate::Request) (sign it with
//! [`crate::sign::sign`], send it, and hand the answer to the action's `parse`), and a
//! `parse(Response)` that turns the answer into the action's output or a typed error: any
//! status outside 2xx becomes [`Error::S3`] with the code from S3's error document.
//!
//! Retrying: every request is marked `idempotent` except CreateMultipartUpload (a second
//! attempt would create a second upload; see its module).

pub mod abort_multipart_upload;
pub mod complete_multipart_upload;
pub mod create_multipart_upload;
pub mod delete_object;
pub mod get_object;
pub mod head_bucket;
pub mod head_object;
pub mod list_multipart_uploads;
pub mod put_object;
pub mod upload_part;

use crate::endpoint::Endpoint;
use crate::error::{Error, S3Error};
use crate::request::{Method, Request, Response};
use crate::xml::{self, Element};

/// S3's longest key, in bytes of UTF-8.
pub const MAX_KEY_BYTES: usize = 1024;
/// S3's part numbers: 1 to 10,000.
pub const MAX_PART_NUMBER: u32 = 10_000;

/// Checks an object key: not empty (an empty key would turn an object request into a bucket
/// request: `DELETE /bucket/` deletes the bucket), at most 1,024 bytes.
pub fn check_key(key: &str) -> Result<(), Error> {
    if key.is_empty() {
        return Err(Error::Config("object key is empty".into()));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(Error::Config(format!(
            "object key is {} bytes; S3 allows {MAX_KEY_BYTES}",
            key.len()
        )));
    }
    Ok(())
}

/// Checks a part number: 1 to 10,000.
pub fn check_part_number(n: u32) -> Result<(), Error> {
    if n == 0 || n > MAX_PART_NUMBER {
        return Err(Error::Limit(format!(
            "part number {n}: S3 takes 1 to {MAX_PART_NUMBER}"
        )));
    }
    Ok(())
}

/// An ETag without its double quotes (`"abc"` → `abc`; `"…-9"` stays with its `-9`).
pub fn unquote_etag(etag: &str) -> &str {
    etag.strip_prefix('"')
        .and_then(|e| e.strip_suffix('"'))
        .unwrap_or(etag)
}

/// The longest successful body of an action that answers with at most a short document.
pub const SMALL_RESPONSE: u64 = 64 * 1024;

/// A bucket request (no key) after checking the bucket name; its answer may hold at most
/// [`SMALL_RESPONSE`] unless the action says otherwise.
fn bucket_request(endpoint: &Endpoint, method: Method, bucket: &str) -> Result<Request, Error> {
    endpoint.check_bucket(bucket)?;
    let mut req = endpoint.request(method, bucket, None);
    req.max_response_body = Some(SMALL_RESPONSE);
    Ok(req)
}

/// An object request after checking the bucket name and the key; its answer may hold at most
/// [`SMALL_RESPONSE`] unless the action says otherwise.
fn object_request(
    endpoint: &Endpoint,
    method: Method,
    bucket: &str,
    key: &str,
) -> Result<Request, Error> {
    endpoint.check_bucket(bucket)?;
    check_key(key)?;
    let mut req = endpoint.request(method, bucket, Some(key));
    req.max_response_body = Some(SMALL_RESPONSE);
    Ok(req)
}

fn check_upload_id(upload_id: &str) -> Result<(), Error> {
    if upload_id.is_empty() {
        return Err(Error::Config("upload id is empty".into()));
    }
    Ok(())
}

/// `Err(Error::S3)` for a status outside 2xx.
fn check_status(resp: &Response) -> Result<(), Error> {
    if resp.is_success() {
        Ok(())
    } else {
        Err(Error::from(xml::parse_error(resp)))
    }
}

/// The XML document of a successful response, which must have root `root`; an `<Error>`
/// document in a 2xx response is an S3 error.
fn success_document(resp: &Response, action: &str, root: &str) -> Result<Element, Error> {
    check_status(resp)?;
    let doc = xml::parse_document(&resp.body)
        .map_err(|e| Error::InvalidResponse(format!("{action}: {e}")))?;
    if doc.name == "Error" {
        return Err(Error::from(xml::error_in_success(resp).unwrap_or_else(
            || S3Error {
                status: resp.status,
                code: "InternalError".into(),
                message: Some(format!(
                    "{action}: error document in a {} response",
                    resp.status
                )),
                request_id: resp.header("x-amz-request-id").map(str::to_string),
                host_id: resp.header("x-amz-id-2").map(str::to_string),
                resource: None,
            },
        )));
    }
    if doc.name != root {
        return Err(Error::InvalidResponse(format!(
            "{action}: expected a <{root}> document, got <{}>",
            doc.name
        )));
    }
    Ok(doc)
}

/// A header the action cannot do without.
fn required_header(resp: &Response, name: &str, action: &str) -> Result<String, Error> {
    match resp.header(name) {
        Some(v) if !v.is_empty() => Ok(v.to_string()),
        _ => Err(Error::InvalidResponse(format!(
            "{action}: the {} response has no {name} header",
            resp.status
        ))),
    }
}

fn optional_header(resp: &Response, name: &str) -> Option<String> {
    resp.header(name).map(str::to_string)
}

/// The user metadata of a response: `x-amz-meta-*` headers, names without the prefix.
fn metadata(resp: &Response) -> Vec<(String, String)> {
    resp.headers
        .iter()
        .filter_map(|(n, v)| {
            let lower = n.to_ascii_lowercase();
            lower
                .strip_prefix("x-amz-meta-")
                .map(|name| (name.to_string(), v.clone()))
        })
        .collect()
}

/// The error of a HEAD response (or any without an error document): the code is inferred
/// from the status, since a HEAD answer has no body, and the message says so.
fn status_error(resp: &Response, what: &str, not_found_code: &str) -> S3Error {
    let mut e = xml::parse_error(resp);
    if e.code != format!("Http{}", resp.status) {
        // The server did send an error document: keep its code.
        return e;
    }
    let region = resp
        .header("x-amz-bucket-region")
        .map(|r| format!(" The bucket is in region {r}; configure that region."))
        .unwrap_or_default();
    let note = "(HEAD responses have no body: the code is inferred from the HTTP status)";
    let (code, message) = match resp.status {
        404 => (
            not_found_code.to_string(),
            format!("{what} does not exist {note}"),
        ),
        403 => (
            "AccessDenied".to_string(),
            format!(
                "access to {what} denied: wrong secret key (SignatureDoesNotMatch), unknown access key id (InvalidAccessKeyId), or missing permission {note}"
            ),
        ),
        301 | 307 => (
            "PermanentRedirect".to_string(),
            format!("{what} must be addressed at another endpoint or region{region} {note}"),
        ),
        400 => (
            "BadRequest".to_string(),
            format!("bad request for {what}{region} {note}"),
        ),
        503 => (
            "ServiceUnavailable".to_string(),
            format!("service unavailable or slowing down requests {note}"),
        ),
        s => (
            format!("Http{s}"),
            format!("HTTP {s} for {what}{region} {note}"),
        ),
    };
    e.code = code;
    e.message = Some(message);
    e
}
