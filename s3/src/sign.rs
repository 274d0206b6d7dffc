//! AWS Signature Version 4 in the `Authorization` header, computed by the `aws-sigv4` crate.
//!
//! [`sign`] signs a [`Request`] exactly as the transport will send it: the `host` header is
//! `Request::host`, the path is `Request::path` as is (already encoded once, never normalized:
//! S3 takes keys literally), and the query is the one `Request::target()` writes. The query
//! encodings agree: `target()` keeps RFC 3986 unreserved characters and writes `%XX` for every
//! other byte, and `aws-sigv4` decodes the query it is given and re-encodes it with a set that
//! leaves exactly the same characters alone, then sorts the pairs. `content-length` is not
//! signed (the transport adds it after signing; SigV4 does not require it).
//!
//! Time is an argument: nothing here reads the clock.

use std::time::SystemTime;

use aws_sigv4::http_request::{
    PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode,
};
use aws_sigv4::sign::v4;
use base64::Engine as _;
use md5::{Digest as _, Md5};
use sha2::Sha256;

use crate::credentials::Credentials;
use crate::error::Error;
use crate::request::{Body, Request};

/// The payload hash S3 accepts in place of the body's SHA-256.
pub const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";

/// Whether the body's SHA-256 goes into the signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PayloadMode {
    /// `x-amz-content-sha256` is the SHA-256 of the body (hashed chunk by chunk): S3 checks
    /// the body against it. Costs one SHA-256 pass over every byte sent.
    Signed,
    /// `x-amz-content-sha256: UNSIGNED-PAYLOAD`: the body is not hashed. The sensible default
    /// over TLS, which already protects the body; add Content-MD5 for an end-to-end check.
    #[default]
    Unsigned,
}

/// Headers the signer sets; any old value is removed before signing again (a retry).
const SIGNER_HEADERS: &[&str] = &[
    "authorization",
    "x-amz-date",
    "x-amz-content-sha256",
    "x-amz-security-token",
];

/// Signs `req` for S3 in `region` at time `now`: sets `x-amz-date`, `x-amz-content-sha256`,
/// `x-amz-security-token` (with a session token) and `authorization`. Signing again (a retry
/// at a later time) replaces them.
///
/// Signed: `host`, every header in `req.headers`, `x-amz-date`, `x-amz-content-sha256` and
/// the security token.
pub fn sign(
    req: &mut Request,
    creds: &Credentials,
    region: &str,
    now: SystemTime,
    mode: PayloadMode,
) -> Result<(), Error> {
    sign_with(req, creds, region, "s3", now, mode, s3_settings()).map(|_| ())
}

/// The `aws-sigv4` settings for S3: the path is used as given (encoded once, not normalized)
/// and `x-amz-content-sha256` is sent and signed.
pub fn s3_settings() -> SigningSettings {
    let mut s = SigningSettings::default();
    s.percent_encoding_mode = PercentEncodingMode::Single;
    s.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    s.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    s
}

/// The code path of [`sign`] with the service name and settings open, so the generic SigV4
/// test suite (service `service`, no `x-amz-content-sha256`) runs through it. Returns the
/// signature (hex). Not for use outside tests.
#[doc(hidden)]
pub fn sign_with(
    req: &mut Request,
    creds: &Credentials,
    region: &str,
    service: &str,
    now: SystemTime,
    mode: PayloadMode,
    settings: SigningSettings,
) -> Result<String, Error> {
    if req.header("host").is_some() {
        return Err(Error::Config(
            "request has a `host` header; the transport sends Request::host as Host, set that"
                .into(),
        ));
    }
    req.headers
        .retain(|(n, _)| !SIGNER_HEADERS.contains(&n.as_str()));

    let payload_hash = match mode {
        PayloadMode::Signed => payload_sha256_hex(&req.body),
        PayloadMode::Unsigned => UNSIGNED_PAYLOAD.to_string(),
    };

    let identity = creds.to_identity();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(service)
        .time(now)
        .settings(settings)
        .build()
        .map_err(|e| Error::Config(format!("cannot sign: {e}")))?
        .into();

    // The scheme does not matter: the host header is given, so the URI's authority is not
    // used for the canonical `host`.
    let uri = format!("http://{}{}", req.host, req.target());
    let headers = std::iter::once(("host", req.host.as_str()))
        .chain(req.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())));
    let signable = SignableRequest::new(
        req.method.as_str(),
        uri.as_str(),
        headers,
        SignableBody::Precomputed(payload_hash),
    )
    .map_err(|e| Error::Config(format!("cannot sign request to {}: {e}", req.host)))?;
    let (instructions, signature) = aws_sigv4::http_request::sign(signable, &params)
        .map_err(|e| Error::Config(format!("cannot sign request to {}: {e}", req.host)))?
        .into_parts();
    let (new_headers, _params) = instructions.into_parts();
    for h in new_headers {
        req.set_header(h.name(), h.value());
    }
    Ok(signature)
}

/// SHA-256 of the body, lower-case hex, computed chunk by chunk (the chunks are not joined).
pub fn payload_sha256_hex(body: &Body) -> String {
    let mut h = Sha256::new();
    for c in body.chunks() {
        h.update(c);
    }
    hex::encode(h.finalize())
}

/// MD5 of the body, base64: the value of `Content-MD5`. Computed chunk by chunk.
/// The CRC-32C (Castagnoli) of `body` as S3 takes it in `x-amz-checksum-crc32c`: the four
/// bytes big-endian, base64. Hardware-accelerated (SSE 4.2 / ARMv8 CRC) where the CPU has it.
pub fn crc32c_base64(body: &Body) -> String {
    let crc = body
        .chunks()
        .iter()
        .fold(0u32, |crc, c| crc32c::crc32c_append(crc, c));
    base64::engine::general_purpose::STANDARD.encode(crc.to_be_bytes())
}

pub fn content_md5_base64(body: &Body) -> String {
    let mut h = Md5::new();
    for c in body.chunks() {
        h.update(c);
    }
    base64::engine::general_purpose::STANDARD.encode(h.finalize())
}
