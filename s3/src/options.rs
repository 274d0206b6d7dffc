//! Per-object request options: content type and encoding, storage class, server-side
//! encryption, canned ACL, user metadata, tags and Content-MD5; and which of them go on which
//! request.
//!
//! | option                         | PutObject | CreateMultipartUpload | UploadPart | Complete | Get/Head |
//! |--------------------------------|-----------|-----------------------|------------|----------|----------|
//! | Content-Type, Content-Encoding | yes       | yes                   |            |          |          |
//! | storage class, ACL, metadata, tags | yes   | yes                   |            |          |          |
//! | SSE-S3, SSE-KMS                | yes       | yes                   |            |          |          |
//! | SSE-C (customer key)           | yes       | yes                   | yes        | yes      | yes      |
//! | Content-MD5 (of that body)     | yes       |                       | yes        |          |          |
//! | If-None-Match / If-Match       | yes       |                       |            | yes      |          |
//!
//! S3 requires the SSE-C key on every part and on every read of the object; it is also sent on
//! Complete, which S3 needs when a bucket policy demands SSE-C.

use std::fmt;

use base64::Engine as _;
use md5::{Digest as _, Md5};

use crate::endpoint::uri_encode;
use crate::error::Error;
use crate::request::Request;

/// Server-side encryption.
#[derive(Clone, PartialEq, Eq)]
pub enum Sse {
    /// SSE-S3: keys managed by S3 (`x-amz-server-side-encryption: AES256`).
    S3,
    /// SSE-KMS (`aws:kms`), with the bucket's default KMS key or the one given.
    Kms { key_id: Option<String> },
    /// SSE-C: a 256-bit key the caller keeps; S3 stores only its MD5. Every part and every
    /// read must carry it. AWS accepts it only over https.
    CustomerKey { key: [u8; 32] },
}

impl fmt::Debug for Sse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sse::S3 => f.write_str("S3"),
            Sse::Kms { key_id } => f.debug_struct("Kms").field("key_id", key_id).finish(),
            Sse::CustomerKey { .. } => f
                .debug_struct("CustomerKey")
                .field("key", &"<redacted>")
                .finish(),
        }
    }
}

/// S3's canned ACLs (`x-amz-acl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CannedAcl {
    Private,
    PublicRead,
    PublicReadWrite,
    AuthenticatedRead,
    AwsExecRead,
    BucketOwnerRead,
    BucketOwnerFullControl,
}

impl CannedAcl {
    pub fn as_str(self) -> &'static str {
        match self {
            CannedAcl::Private => "private",
            CannedAcl::PublicRead => "public-read",
            CannedAcl::PublicReadWrite => "public-read-write",
            CannedAcl::AuthenticatedRead => "authenticated-read",
            CannedAcl::AwsExecRead => "aws-exec-read",
            CannedAcl::BucketOwnerRead => "bucket-owner-read",
            CannedAcl::BucketOwnerFullControl => "bucket-owner-full-control",
        }
    }
}

/// The request options are applied to; see the table in the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    PutObject,
    CreateMultipartUpload,
    UploadPart,
    CompleteMultipartUpload,
    /// GetObject and HeadObject: only the SSE-C key.
    Read,
}

/// Options of an object written (and, for SSE-C, read).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectOptions {
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    /// `STANDARD`, `STANDARD_IA`, `INTELLIGENT_TIERING`, `GLACIER_IR` …
    pub storage_class: Option<String>,
    pub sse: Option<Sse>,
    pub acl: Option<CannedAcl>,
    /// User metadata, sent as `x-amz-meta-{name}`. Names are HTTP tokens (stored lower case
    /// by S3); values printable ASCII; 2 KiB in all.
    pub metadata: Vec<(String, String)>,
    /// Object tags (`x-amz-tagging`, URL-encoded): at most 10, keys up to 128 characters,
    /// values up to 256.
    pub tags: Vec<(String, String)>,
    /// Send `Content-MD5` with every body (PutObject, each part): S3 then refuses a body that
    /// changed on the way (`BadDigest`). Worth it with `UNSIGNED-PAYLOAD`.
    pub content_md5: bool,
    /// A checksum of every body for S3 to check and keep: [`Checksum::Crc32c`] sends
    /// `x-amz-checksum-crc32c` with PutObject and each part, declares the algorithm on
    /// CreateMultipartUpload and lists each part's checksum on CompleteMultipartUpload (S3 then
    /// keeps a composite checksum of the object).
    pub checksum: Checksum,
    /// A precondition on the write (PutObject and CompleteMultipartUpload): the store
    /// refuses the write with 412 `PreconditionFailed` when it does not hold.
    pub condition: Option<Condition>,
}

/// A conditional write: what the key must hold for the write to happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// `If-None-Match: *`: the key holds no object (a key written once).
    Absent,
    /// `If-Match: <etag>`: the key holds the object of this ETag (a compare-and-swap).
    Etag(String),
}

impl Condition {
    /// The header and its value.
    pub fn header(&self) -> (&'static str, String) {
        match self {
            Condition::Absent => ("if-none-match", "*".to_owned()),
            Condition::Etag(etag) => ("if-match", quoted(etag)),
        }
    }
}

/// An ETag in double quotes, as S3 sends and expects it (some stores send it bare).
pub fn quoted(etag: &str) -> String {
    let bare = etag.trim().trim_matches('"');
    format!("\"{bare}\"")
}

/// See [`ObjectOptions::checksum`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Checksum {
    /// No checksum header.
    #[default]
    None,
    /// CRC-32C (Castagnoli).
    Crc32c,
}

/// S3's limit on user metadata: names and values, in bytes.
pub const MAX_METADATA_BYTES: usize = 2048;
/// S3's limits on tags.
pub const MAX_TAGS: usize = 10;
pub const MAX_TAG_KEY_CHARS: usize = 128;
pub const MAX_TAG_VALUE_CHARS: usize = 256;

impl ObjectOptions {
    /// Checks every option once (the configuration step calls this so that a bad option fails
    /// at start-up rather than at the first upload). [`ObjectOptions::apply`] checks again.
    pub fn validate(&self) -> Result<(), Error> {
        if let Some(v) = &self.content_type {
            header_value("content type", v)?;
        }
        if let Some(v) = &self.content_encoding {
            header_value("content encoding", v)?;
        }
        if let Some(v) = &self.storage_class
            && (v.is_empty()
                || !v
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'))
        {
            return Err(Error::Config(format!(
                "storage class {v:?}: expected a name like STANDARD or STANDARD_IA"
            )));
        }
        if let Some(Sse::Kms { key_id: Some(k) }) = &self.sse {
            if k.is_empty() {
                return Err(Error::Config(
                    "SSE-KMS key id is empty (leave it unset for the bucket's default key)".into(),
                ));
            }
            header_value("SSE-KMS key id", k)?;
        }
        let mut total = 0;
        for (i, (name, value)) in self.metadata.iter().enumerate() {
            if name.is_empty() || !name.bytes().all(is_tchar) {
                return Err(Error::Config(format!(
                    "metadata name {name:?}: must be a non-empty HTTP token (letters, digits and !#$%&'*+-.^_`|~)"
                )));
            }
            if self.metadata[..i]
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case(name))
            {
                return Err(Error::Config(format!(
                    "metadata name {name:?} is given twice (names are case-insensitive)"
                )));
            }
            header_value(&format!("metadata {name:?}"), value)?;
            total += name.len() + value.len();
        }
        if total > MAX_METADATA_BYTES {
            return Err(Error::Config(format!(
                "user metadata is {total} bytes; S3 allows {MAX_METADATA_BYTES}"
            )));
        }
        if self.tags.len() > MAX_TAGS {
            return Err(Error::Config(format!(
                "{} tags; S3 allows {MAX_TAGS} per object",
                self.tags.len()
            )));
        }
        for (i, (k, v)) in self.tags.iter().enumerate() {
            let kc = k.chars().count();
            if kc == 0 || kc > MAX_TAG_KEY_CHARS {
                return Err(Error::Config(format!(
                    "tag key {k:?}: must be 1 to {MAX_TAG_KEY_CHARS} characters"
                )));
            }
            if v.chars().count() > MAX_TAG_VALUE_CHARS {
                return Err(Error::Config(format!(
                    "tag {k:?}: value longer than {MAX_TAG_VALUE_CHARS} characters"
                )));
            }
            if self.tags[..i].iter().any(|(o, _)| o == k) {
                return Err(Error::Config(format!("tag key {k:?} is given twice")));
            }
            if k.chars().chain(v.chars()).any(char::is_control) {
                return Err(Error::Config(format!(
                    "tag {k:?}: control characters are not allowed"
                )));
            }
        }
        Ok(())
    }

    /// Adds the headers of these options that belong on `target` to `req` (see the module
    /// documentation). Call it after the body is set: Content-MD5 is computed from it.
    pub fn apply(&self, req: &mut Request, target: Target) -> Result<(), Error> {
        self.validate()?;
        let full = matches!(target, Target::PutObject | Target::CreateMultipartUpload);
        if full {
            if let Some(v) = &self.content_type {
                req.set_header("content-type", v.as_str());
            }
            if let Some(v) = &self.content_encoding {
                req.set_header("content-encoding", v.as_str());
            }
            if let Some(v) = &self.storage_class {
                req.set_header("x-amz-storage-class", v.as_str());
            }
            if let Some(acl) = self.acl {
                req.set_header("x-amz-acl", acl.as_str());
            }
            for (name, value) in &self.metadata {
                req.set_header(
                    format!("x-amz-meta-{}", name.to_ascii_lowercase()),
                    value.as_str(),
                );
            }
            if !self.tags.is_empty() {
                req.set_header("x-amz-tagging", tagging(&self.tags));
            }
            match &self.sse {
                Some(Sse::S3) => req.set_header("x-amz-server-side-encryption", "AES256"),
                Some(Sse::Kms { key_id }) => {
                    req.set_header("x-amz-server-side-encryption", "aws:kms");
                    if let Some(k) = key_id {
                        req.set_header("x-amz-server-side-encryption-aws-kms-key-id", k.as_str());
                    }
                }
                Some(Sse::CustomerKey { .. }) | None => {}
            }
        }
        if let Some(Sse::CustomerKey { key }) = &self.sse {
            let b64 = base64::engine::general_purpose::STANDARD;
            req.set_header("x-amz-server-side-encryption-customer-algorithm", "AES256");
            req.set_header("x-amz-server-side-encryption-customer-key", b64.encode(key));
            req.set_header(
                "x-amz-server-side-encryption-customer-key-md5",
                b64.encode(Md5::digest(key)),
            );
        }
        if let Some(c) = &self.condition
            && matches!(target, Target::PutObject | Target::CompleteMultipartUpload)
        {
            let (name, value) = c.header();
            req.set_header(name, value);
        }
        if self.content_md5 && matches!(target, Target::PutObject | Target::UploadPart) {
            req.set_header("content-md5", crate::sign::content_md5_base64(&req.body));
        }
        if self.checksum == Checksum::Crc32c {
            match target {
                Target::PutObject | Target::UploadPart => {
                    req.set_header(
                        "x-amz-checksum-crc32c",
                        crate::sign::crc32c_base64(&req.body),
                    );
                }
                Target::CreateMultipartUpload => {
                    req.set_header("x-amz-checksum-algorithm", "CRC32C");
                }
                Target::CompleteMultipartUpload | Target::Read => {}
            }
        }
        Ok(())
    }
}

/// `k1=v1&k2=v2`, each part URL-encoded: the value of `x-amz-tagging`.
pub fn tagging(tags: &[(String, String)]) -> String {
    let mut s = String::new();
    for (i, (k, v)) in tags.iter().enumerate() {
        if i > 0 {
            s.push('&');
        }
        s.push_str(&uri_encode(k, true));
        s.push('=');
        s.push_str(&uri_encode(v, true));
    }
    s
}

/// RFC 9110 token characters.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A header value we can send and sign: printable ASCII, spaces and tabs (S3 does not take
/// raw UTF-8 in headers), no leading or trailing whitespace (it would not survive signing).
fn header_value(what: &str, v: &str) -> Result<(), Error> {
    if let Some(c) = v
        .chars()
        .find(|&c| !(c == ' ' || c == '\t' || c.is_ascii_graphic()))
    {
        return Err(Error::Config(format!(
            "{what}: {c:?} is not allowed in an HTTP header (printable ASCII only)"
        )));
    }
    if v.trim() != v {
        return Err(Error::Config(format!(
            "{what}: leading or trailing whitespace is not allowed"
        )));
    }
    Ok(())
}
