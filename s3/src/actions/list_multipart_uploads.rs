//! ListMultipartUploads: `GET /?uploads` (with prefix and markers); S3 answers with the
//! uploads in progress, up to 1,000 per page. Used to find and abort uploads a crash left
//! behind.
//!
//! Paging: while `is_truncated`, ask again with `key-marker` = `NextKeyMarker` and
//! `upload-id-marker` = `NextUploadIdMarker`; [`ListMultipartUploadsOutput::next_args`] builds
//! those arguments.
//!
//! Idempotent (a read).

use std::time::SystemTime;

use crate::endpoint::Endpoint;
use crate::error::Error;
use crate::request::{Method, Request, Response};
use crate::xml::Element;

/// The arguments: all optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListMultipartUploadsArgs {
    /// Only uploads of keys that start with this.
    pub prefix: Option<String>,
    /// Start after this key (with `upload_id_marker`: after that upload of this key).
    pub key_marker: Option<String>,
    pub upload_id_marker: Option<String>,
    /// At most this many uploads per page (1 to 1,000; S3's default is 1,000).
    pub max_uploads: Option<u16>,
}

pub fn request(
    endpoint: &Endpoint,
    bucket: &str,
    args: &ListMultipartUploadsArgs,
) -> Result<Request, Error> {
    let mut req = super::bucket_request(endpoint, Method::Get, bucket)?;
    // Up to 1,000 uploads, each with a key of up to 1 KiB.
    req.max_response_body = Some(16 * 1024 * 1024);
    req.query.push(("uploads".into(), String::new()));
    if let Some(p) = &args.prefix {
        req.query.push(("prefix".into(), p.clone()));
    }
    if let Some(m) = &args.key_marker {
        req.query.push(("key-marker".into(), m.clone()));
    }
    if let Some(m) = &args.upload_id_marker {
        if args.key_marker.is_none() {
            return Err(Error::Config(
                "upload-id-marker without key-marker is ignored by S3; give both".into(),
            ));
        }
        req.query.push(("upload-id-marker".into(), m.clone()));
    }
    if let Some(n) = args.max_uploads {
        if n == 0 || n > 1000 {
            return Err(Error::Config(format!(
                "max-uploads {n}: S3 takes 1 to 1000"
            )));
        }
        req.query.push(("max-uploads".into(), n.to_string()));
    }
    req.idempotent = true;
    Ok(req)
}

/// One upload in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultipartUpload {
    pub key: String,
    pub upload_id: String,
    /// When it was created, as S3 wrote it (`2010-11-10T20:48:33.000Z`).
    pub initiated: Option<String>,
    pub storage_class: Option<String>,
}

impl MultipartUpload {
    /// `initiated` as a time, when it is in S3's ISO 8601 UTC form.
    pub fn initiated_time(&self) -> Option<SystemTime> {
        self.initiated.as_deref().and_then(parse_iso8601_utc)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListMultipartUploadsOutput {
    pub bucket: Option<String>,
    pub prefix: Option<String>,
    pub key_marker: Option<String>,
    pub upload_id_marker: Option<String>,
    pub next_key_marker: Option<String>,
    pub next_upload_id_marker: Option<String>,
    pub max_uploads: Option<u32>,
    pub is_truncated: bool,
    pub uploads: Vec<MultipartUpload>,
    /// With a delimiter (not used by this client), the grouped prefixes.
    pub common_prefixes: Vec<String>,
}

impl ListMultipartUploadsOutput {
    /// The arguments for the next page, or `None` when this was the last one. When S3 said
    /// the list is truncated but gave no next markers, the last upload's key and id are used;
    /// with neither, `None` (rather than asking for the same page forever).
    pub fn next_args(&self, args: &ListMultipartUploadsArgs) -> Option<ListMultipartUploadsArgs> {
        if !self.is_truncated {
            return None;
        }
        let (key, id) = match (&self.next_key_marker, &self.next_upload_id_marker) {
            (Some(k), id) => (k.clone(), id.clone()),
            (None, _) => {
                let last = self.uploads.last()?;
                (last.key.clone(), Some(last.upload_id.clone()))
            }
        };
        if args.key_marker.as_deref() == Some(key.as_str()) && args.upload_id_marker == id {
            return None;
        }
        Some(ListMultipartUploadsArgs {
            prefix: args.prefix.clone(),
            key_marker: Some(key),
            upload_id_marker: id,
            max_uploads: args.max_uploads,
        })
    }
}

/// Expects `<ListMultipartUploadsResult>`. Keys are URL-decoded when the response says
/// `<EncodingType>url</EncodingType>`.
pub fn parse(resp: Response) -> Result<ListMultipartUploadsOutput, Error> {
    const ACTION: &str = "ListMultipartUploads";
    let doc = super::success_document(&resp, ACTION, "ListMultipartUploadsResult")?;
    let url = doc
        .child_text("EncodingType")
        .is_some_and(|e| e.eq_ignore_ascii_case("url"));
    let text = |e: &Element, name: &str| -> Result<Option<String>, Error> {
        match e.child_text_nonempty(name) {
            None => Ok(None),
            Some(t) if url => url_decode(t, name).map(Some),
            Some(t) => Ok(Some(t.to_string())),
        }
    };
    let is_truncated = match doc.child_text("IsTruncated").map(str::trim) {
        None | Some("") => false,
        Some(t) if t.eq_ignore_ascii_case("true") => true,
        Some(t) if t.eq_ignore_ascii_case("false") => false,
        Some(t) => {
            return Err(Error::InvalidResponse(format!(
                "{ACTION}: IsTruncated is {t:?}, not true or false"
            )));
        }
    };
    let max_uploads = match doc.child_text_nonempty("MaxUploads") {
        None => None,
        Some(t) => Some(t.trim().parse::<u32>().map_err(|_| {
            Error::InvalidResponse(format!("{ACTION}: MaxUploads is {t:?}, not a number"))
        })?),
    };
    let mut uploads = Vec::new();
    for u in doc.children_named("Upload") {
        let key = text(u, "Key")?
            .ok_or_else(|| Error::InvalidResponse(format!("{ACTION}: an Upload has no Key")))?;
        let upload_id = u
            .child_text_nonempty("UploadId")
            .ok_or_else(|| {
                Error::InvalidResponse(format!("{ACTION}: the upload of {key:?} has no UploadId"))
            })?
            .to_string();
        uploads.push(MultipartUpload {
            key,
            upload_id,
            initiated: u.child_text_nonempty("Initiated").map(str::to_string),
            storage_class: u.child_text_nonempty("StorageClass").map(str::to_string),
        });
    }
    let mut common_prefixes = Vec::new();
    for cp in doc.children_named("CommonPrefixes") {
        if let Some(p) = text(cp, "Prefix")? {
            common_prefixes.push(p);
        }
    }
    Ok(ListMultipartUploadsOutput {
        bucket: doc.child_text_nonempty("Bucket").map(str::to_string),
        prefix: text(&doc, "Prefix")?,
        key_marker: text(&doc, "KeyMarker")?,
        upload_id_marker: doc
            .child_text_nonempty("UploadIdMarker")
            .map(str::to_string),
        next_key_marker: text(&doc, "NextKeyMarker")?,
        next_upload_id_marker: doc
            .child_text_nonempty("NextUploadIdMarker")
            .map(str::to_string),
        max_uploads,
        is_truncated,
        uploads,
        common_prefixes,
    })
}

/// Decodes a value S3 URL-encoded (`encoding-type=url`: `%XX`, and `+` for a space).
fn url_decode(s: &str, what: &str) -> Result<String, Error> {
    let plus = s.replace('+', " ");
    percent_encoding::percent_decode_str(&plus)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| {
            Error::InvalidResponse(format!(
                "ListMultipartUploads: {what} {s:?} does not URL-decode to UTF-8"
            ))
        })
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fraction]Z` (UTC, as S3 writes `Initiated`; an offset other
/// than `Z` or a time before 1970 is refused).
pub fn parse_iso8601_utc(s: &str) -> Option<SystemTime> {
    if !s.ends_with('Z') || s.len() < 20 {
        return None;
    }
    let t: jiff::Timestamp = s.parse().ok()?;
    if t.as_second() < 0 {
        return None;
    }
    SystemTime::try_from(t).ok()
}
