//! `[sink.s3]`: the store, the objects (format, compression, rotation, keys) and the upload.

use std::fmt;

use serde::Deserialize;

use super::{PayloadEncoding, Secret};
use crate::units::{ByteSize, Dur};

pub use crate::sink::s3::format::{Compression, Format};

/// What happens to open objects on SIGINT/SIGTERM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnShutdown {
    /// Close and upload them (their offsets are then committed).
    #[default]
    Flush,
    /// Drop them: their messages are polled and written again after the restart.
    Leave,
}

/// The checksum sent with every body for the store to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChecksumKind {
    /// `x-amz-checksum-crc32c` on PutObject and each part, the composite on Complete.
    #[default]
    Crc32c,
    /// None (a store that refuses the checksum headers).
    None,
}

/// Server-side encryption.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SseKind {
    /// SSE-S3 (`AES256`).
    S3,
    /// SSE-KMS (`aws:kms`), with `sse_kms_key_id` or the bucket's default key.
    Kms,
}

/// `[sink.s3]`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3SinkConfig {
    /// The bucket (must exist: the start-up probe checks it).
    pub bucket: String,
    /// `http[s]://host[:port]` of an S3-compatible store; without it, AWS in `region`.
    pub endpoint: Option<String>,
    /// The region (SigV4 scope); env `AWS_REGION` when absent, else `us-east-1`.
    pub region: Option<String>,
    /// Path-style addressing (`host/bucket/key`); default: path-style for custom endpoints,
    /// virtual-hosted for AWS.
    pub path_style: Option<bool>,
    /// PEM file of the CA certificates to trust for an `https` endpoint (a store with a
    /// private CA); without it, the Mozilla roots (webpki-roots).
    #[serde(default)]
    pub tls_ca: Option<std::path::PathBuf>,
    /// Access key id; env `AWS_ACCESS_KEY_ID` when absent.
    pub access_key_id: Option<String>,
    /// Secret key; env `AWS_SECRET_ACCESS_KEY` when absent.
    pub secret_access_key: Option<Secret>,
    /// Session token; env `AWS_SESSION_TOKEN` when absent.
    pub session_token: Option<Secret>,
    /// Put before every key (e.g. `"raw/"`); also where the sink's markers live.
    #[serde(default)]
    pub prefix: String,
    /// Key template: `{stream}`, `{topic}`, `{partition}`, `{date}`, `{hour}`, `{minute}`,
    /// `{timestamp}`, `{first_offset}`, `{last_offset}`, `{header.NAME}`, `{ext}`; times are of
    /// the object's first message, offsets zero-padded to 20 digits.
    #[serde(default = "defaults::key")]
    pub key: String,
    /// Time zone of `{date}` `{hour}` `{minute}`: `"UTC"` or a fixed offset like `"+02:00"`.
    #[serde(default = "defaults::utc")]
    pub time_zone: String,
    /// `json_lines`, `json_array`, `raw`, `csv`.
    #[serde(default)]
    pub format: Format,
    /// `none`, `gzip`, `zstd`.
    #[serde(default)]
    pub compression: Compression,
    /// gzip 0-9, zstd 1-22.
    pub compression_level: Option<i32>,
    /// Write the Iggy metadata (json and csv formats).
    #[serde(default = "defaults::yes")]
    pub metadata: bool,
    /// Write the Iggy user headers (json and csv formats).
    #[serde(default = "defaults::yes")]
    pub headers: bool,
    /// How payloads are written in json and csv formats.
    #[serde(default)]
    pub payload: PayloadEncoding,
    /// `raw`: the bytes between payloads.
    #[serde(default = "defaults::newline")]
    pub separator: String,
    /// `raw`: a 4-byte big-endian length before each payload instead of a separator.
    #[serde(default)]
    pub length_prefix: bool,
    /// Close an object at this many output (compressed) bytes.
    #[serde(default = "defaults::max_object_size")]
    pub max_object_size: ByteSize,
    /// ...or at this many messages (0: no limit).
    #[serde(default)]
    pub max_object_messages: u64,
    /// ...or when a message's timestamp falls in the next interval of this length (record
    /// time, so a replay cuts the same objects; `"0s"`: off).
    #[serde(default)]
    pub record_interval: Dur,
    /// ...or when no message came for this long (wall clock; `"0s"`: off).
    #[serde(default = "defaults::idle_flush")]
    pub idle_flush: Dur,
    /// `flush` or `leave` open objects on shutdown.
    #[serde(default)]
    pub on_shutdown: OnShutdown,
    /// Multipart part size (5 MiB to 5 GiB); smaller objects are one PutObject.
    #[serde(default = "defaults::part_size")]
    pub part_size: ByteSize,
    /// Parts uploading at once per object.
    #[serde(default = "defaults::parts_in_flight")]
    pub parts_in_flight: usize,
    /// Storage class (`STANDARD`, `STANDARD_IA`, …).
    pub storage_class: Option<String>,
    /// Server-side encryption.
    pub sse: Option<SseKind>,
    /// KMS key for `sse = "kms"`.
    pub sse_kms_key_id: Option<String>,
    /// Attempts per S3 request (with full-jitter backoff from 100 ms up to 20 s) before the
    /// object counts as failed.
    #[serde(default = "defaults::request_attempts")]
    pub request_attempts: u32,
    /// The checksum of every body, checked by the store: `crc32c` or `none`.
    #[serde(default)]
    pub checksum: ChecksumKind,
    /// Also send `Content-MD5` with every body (PutObject, each part).
    #[serde(default)]
    pub content_md5: bool,
    /// Sign the SHA-256 of every body (`x-amz-content-sha256`) instead of `UNSIGNED-PAYLOAD`.
    #[serde(default)]
    pub signed_payload: bool,
    /// Where messages rejected under `on_error = "dead_letter"` go: one JSON object per
    /// message, `{dead_letter_prefix}{stream}/{topic}/{partition}/{offset}.json`, holding the
    /// reason and the record.
    pub dead_letter_prefix: Option<String>,
    /// Progress timeout of one S3 request: every read and write must make progress within
    /// it; also the base of its whole deadline.
    #[serde(default = "defaults::request_timeout")]
    pub request_timeout: Dur,
    /// The slowest transfer accepted, per second: a request must be done within
    /// `request_timeout` plus its body at this rate, else it is given up (and retried);
    /// `"0"`: no such deadline.
    #[serde(default = "defaults::min_transfer_rate")]
    pub min_transfer_rate: ByteSize,
    /// First wait after a failed upload before the object is written again.
    #[serde(default = "defaults::retry_min")]
    pub retry_min: Dur,
    /// Longest wait between attempts.
    #[serde(default = "defaults::retry_max")]
    pub retry_max: Dur,
}

impl fmt::Debug for S3SinkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3SinkConfig")
            .field("bucket", &self.bucket)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &self.secret_access_key)
            .field("key", &self.key)
            .field("format", &self.format)
            .field("compression", &self.compression)
            .finish_non_exhaustive()
    }
}

mod defaults {
    use super::*;
    use std::time::Duration;

    pub fn key() -> String {
        "{stream}/{topic}/{date}/{hour}/{partition}-{first_offset}.{ext}".to_owned()
    }
    pub fn utc() -> String {
        "UTC".to_owned()
    }
    pub fn yes() -> bool {
        true
    }
    pub fn newline() -> String {
        "\n".to_owned()
    }
    pub fn max_object_size() -> ByteSize {
        ByteSize(64 << 20)
    }
    pub fn idle_flush() -> Dur {
        Dur(Duration::from_secs(30))
    }
    pub fn part_size() -> ByteSize {
        ByteSize(8 << 20)
    }
    pub fn parts_in_flight() -> usize {
        2
    }
    pub fn request_attempts() -> u32 {
        8
    }
    pub fn request_timeout() -> Dur {
        Dur(Duration::from_secs(30))
    }
    pub fn min_transfer_rate() -> ByteSize {
        ByteSize(64 << 10)
    }
    pub fn retry_min() -> Dur {
        Dur(Duration::from_millis(200))
    }
    pub fn retry_max() -> Dur {
        Dur(Duration::from_secs(30))
    }
}
