//! `[sink.s3]`: the store, the objects (format, compression, rotation, keys) and the upload.

use std::fmt;

use serde::Deserialize;
use spillway_s3::endpoint::{AddressingStyle, Endpoint};

use super::{PayloadEncoding, Secret};
use crate::template::key::{KeyTemplate, KeyZone, TimeSource, ValueTemplate};
use crate::units::{ByteSize, Dur};

/// Record format of objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// One JSON object per line.
    #[default]
    JsonLines,
    /// One JSON array of objects.
    JsonArray,
    /// The payloads, framed by [`Framing`].
    Raw,
    /// RFC 4180 CSV with a header line.
    Csv,
    /// Apache Parquet: columns for the metadata, headers and payload, plus typed columns from
    /// JSON payloads (`[sink.s3.parquet]`).
    Parquet,
}

/// The page codec of Parquet objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ParquetCompression {
    /// Pages stored as encoded.
    None,
    /// Snappy pages.
    Snappy,
    /// zstd pages.
    #[default]
    Zstd,
}

/// How the payload is stored in a Parquet object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ParquetPayload {
    /// A BYTE_ARRAY column (`binary`): every payload as it is.
    #[default]
    Binary,
    /// A UTF-8 string column; a payload that is not UTF-8 goes to `on_error`.
    String,
    /// No payload column (the typed columns carry what is wanted).
    None,
}

/// The type of a column taken from JSON payloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ColumnType {
    /// A JSON string.
    String,
    /// A JSON integer within i64.
    Int64,
    /// Any JSON number (as f64).
    Float64,
    /// `true` or `false`.
    Boolean,
    /// A time: an integer of milliseconds since the Unix epoch, or an RFC 3339 string; stored
    /// as microseconds, UTC.
    Timestamp,
    /// Any JSON value, as its JSON text.
    Json,
}

/// `[[sink.s3.parquet.columns]]`: one typed column taken from JSON payloads.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParquetColumn {
    /// The column's name (not one of the sink's own: stream, topic, partition, offset, id,
    /// timestamp, origin_timestamp, headers, payload).
    pub name: String,
    /// An RFC 6901 JSON pointer into the payload (`/user/id`; `""` is the whole payload).
    pub pointer: String,
    /// `string`, `int64`, `float64`, `boolean`, `timestamp`, `json`.
    #[serde(rename = "type")]
    pub kind: ColumnType,
    /// A message without the value (or with `null` there) goes to `on_error`; otherwise the
    /// column is null for it.
    #[serde(default)]
    pub required: bool,
}

/// `[sink.s3.parquet]`: the Parquet writer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParquetConfig {
    /// Page codec: `zstd`, `snappy` or `none`.
    #[serde(default)]
    pub compression: ParquetCompression,
    /// zstd 1-22 (default 3).
    pub compression_level: Option<i32>,
    /// A row group is written once its rows hold this many bytes (payloads, headers and
    /// metadata, before encoding); what one partition holds unencoded is at most this.
    #[serde(default = "defaults::row_group_size")]
    pub row_group_size: ByteSize,
    /// ...or this many rows.
    #[serde(default = "defaults::row_group_rows")]
    pub row_group_rows: usize,
    /// `binary`, `string` or `none`.
    #[serde(default)]
    pub payload: ParquetPayload,
    /// Typed columns from JSON payloads.
    #[serde(default)]
    pub columns: Vec<ParquetColumn>,
    /// Set by the sink, not the config: the objects are data files of an Iceberg table
    /// (`[sink.s3.iceberg]`): every column carries its Iceberg field id, and `partition` and
    /// `offset` are signed (int, long), as Iceberg has no unsigned types.
    #[serde(skip)]
    pub table: bool,
}

impl Default for ParquetConfig {
    fn default() -> Self {
        ParquetConfig {
            compression: ParquetCompression::default(),
            compression_level: None,
            row_group_size: defaults::row_group_size(),
            row_group_rows: defaults::row_group_rows(),
            payload: ParquetPayload::default(),
            columns: Vec::new(),
            table: false,
        }
    }
}

/// The columns a Parquet object always may have; a typed column may not take their names.
pub const PARQUET_OWN_COLUMNS: [&str; 9] = [
    "stream",
    "topic",
    "partition",
    "offset",
    "id",
    "timestamp",
    "origin_timestamp",
    "headers",
    "payload",
];

/// Compression of objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// Stored as encoded.
    #[default]
    None,
    /// gzip (RFC 1952), `Content-Encoding: gzip`.
    Gzip,
    /// zstd (RFC 8878), `Content-Encoding: zstd`.
    Zstd,
}

/// How `raw` separates payloads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Framing {
    /// These bytes after each payload (may be empty: payloads back to back).
    Separator(Vec<u8>),
    /// The payload's length as a big-endian u32 before each payload.
    LengthPrefix,
}

impl Default for Framing {
    fn default() -> Self {
        Framing::Separator(b"\n".to_vec())
    }
}

/// What [`Encoder`] writes.
#[derive(Debug, Clone)]
pub struct FormatOptions {
    /// Record format.
    pub format: Format,
    /// Compression.
    pub compression: Compression,
    /// gzip 0-9 (default 6), zstd 1-22 (default 3); None = the codec default.
    pub level: Option<i32>,
    /// JSON formats and csv: stream, topic, partition, offset, id, timestamp, origin_timestamp.
    pub metadata: bool,
    /// JSON formats: a "headers" object; csv: a "headers" column holding a JSON object.
    pub headers: bool,
    /// How payloads are written (JSON formats and csv).
    pub payload: PayloadEncoding,
    /// `raw` only.
    pub framing: Framing,
    /// `parquet` only.
    pub parquet: ParquetConfig,
}

impl Default for FormatOptions {
    fn default() -> Self {
        FormatOptions {
            format: Format::JsonLines,
            compression: Compression::None,
            level: None,
            metadata: true,
            headers: true,
            payload: PayloadEncoding::Auto,
            framing: Framing::default(),
            parquet: ParquetConfig::default(),
        }
    }
}

/// libdeflate's level 3, chosen by measurement on the bench's order rows (tuning.md,
/// "Compression"): objects about 10% larger than the old default's (zlib-style level 6) at a
/// quarter of its CPU; level 4 is 5% larger at a third, level 6 the same size at 40%.
const GZIP_DEFAULT_LEVEL: i32 = 3;
const ZSTD_DEFAULT_LEVEL: i32 = 3;

impl FormatOptions {
    /// The compression level in use (the codec's default filled in; 0 without compression),
    /// or why the configured one cannot be used.
    pub fn level_in_use(&self) -> Result<i32, String> {
        let out_of_range = |level: i32, codec: &str, range: &str| {
            format!("s3.compression_level = {level} is out of range for {codec}: use {range}")
        };
        match (self.compression, self.level) {
            (Compression::None, None) => Ok(0),
            (Compression::None, Some(level)) => Err(format!(
                "s3.compression_level = {level} needs a compression: set s3.compression to \
                 \"gzip\" or \"zstd\", or remove s3.compression_level"
            )),
            (Compression::Gzip, level) => {
                let level = level.unwrap_or(GZIP_DEFAULT_LEVEL);
                if (0..=12).contains(&level) {
                    Ok(level)
                } else {
                    Err(out_of_range(level, "gzip", "0 to 12"))
                }
            }
            (Compression::Zstd, level) => {
                let level = level.unwrap_or(ZSTD_DEFAULT_LEVEL);
                if (1..=22).contains(&level) {
                    Ok(level)
                } else {
                    Err(out_of_range(level, "zstd", "1 to 22"))
                }
            }
        }
    }
}

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

/// Whether objects and markers are written with conditional requests (fencing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConditionalWrites {
    /// `If-None-Match: *` on every object and `If-Match` on the marker; the store is probed
    /// at start and a store that does not honour them is refused.
    #[default]
    Require,
    /// Plain writes: safe only while no two members ever write one partition at once.
    Off,
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
    /// SSE-C: a 256-bit key of the user's, from `sse_customer_key_file` or the environment
    /// variable `sse_customer_key_env` (never inline); every request that writes or reads an
    /// object carries it, and the store keeps only its MD5.
    Customer,
}

/// Where an S3 sink's credentials come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialSource {
    /// The static keys when there are any (`access_key_id` and `secret_access_key`, or
    /// `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`), else the AWS credential chain.
    #[default]
    Auto,
    /// The static keys only (refused at start when there are none).
    Static,
    /// The AWS credential chain (environment, profiles, web identity, ECS, EC2 IMDSv2),
    /// refreshed before expiry.
    Chain,
}

/// A canned ACL (`x-amz-acl`) for every object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AclKind {
    /// `private`.
    Private,
    /// `public-read`.
    PublicRead,
    /// `public-read-write`.
    PublicReadWrite,
    /// `authenticated-read`.
    AuthenticatedRead,
    /// `aws-exec-read`.
    AwsExecRead,
    /// `bucket-owner-read`.
    BucketOwnerRead,
    /// `bucket-owner-full-control`.
    BucketOwnerFullControl,
}

/// The user metadata names the sink sets itself on every object.
pub const OWN_METADATA: [&str; 6] = [
    "stream",
    "topic",
    "partition",
    "first-offset",
    "last-offset",
    "messages",
];

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
    /// `auto` (static keys if given, else the AWS credential chain), `static` or `chain`.
    #[serde(default)]
    pub credentials: CredentialSource,
    /// The profile of the shared config/credentials files the chain reads (default: the
    /// `AWS_PROFILE` variable, else `default`).
    pub profile: Option<String>,
    /// Put before every key (e.g. `"raw/"`); also where the sink's markers live.
    #[serde(default)]
    pub prefix: String,
    /// Key template: `{stream}`, `{topic}`, `{partition}`, `{date}`, `{year}`, `{month}`,
    /// `{day}`, `{hour}`, `{minute}`, `{timestamp}`, `{first_offset}`, `{last_offset}`,
    /// `{header.NAME}`, `{json./POINTER}`, `{ext}`; times are of the object's first message,
    /// offsets zero-padded to 20 digits.
    #[serde(default)]
    pub key: KeyTemplate,
    /// Time zone of `{date}` `{hour}` `{minute}`: `"UTC"`, a fixed offset like `"+02:00"`, or
    /// an IANA zone like `"Europe/Berlin"`.
    #[serde(default)]
    pub time_zone: KeyZone,
    /// Where the time of the key's date fields and of `record_interval` comes from:
    /// `"timestamp"` (Iggy's append time), `"origin_timestamp"` (the producer's), or
    /// `"json:/POINTER"` (a payload field: RFC 3339, or a number since the epoch).
    #[serde(default)]
    pub time_source: TimeSource,
    /// `json_lines`, `json_array`, `raw`, `csv`, `parquet`.
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
    /// `format = "parquet"`: the writer and the columns.
    #[serde(default)]
    pub parquet: ParquetConfig,
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
    /// A key that splits (`{header.NAME}`, `{json./POINTER}`): objects open at once per
    /// partition, one per distinct set of values; the oldest is closed for a new one.
    #[serde(default = "defaults::max_open_objects")]
    pub max_open_objects: usize,
    /// A key that splits: the oldest open object is closed once the partition is this many
    /// messages past its first (until then the engine tracks each of them, and the
    /// partition's stored offset stays before it).
    #[serde(default = "defaults::max_split_lag")]
    pub max_split_lag: u64,
    /// `flush` or `leave` open objects on shutdown.
    #[serde(default)]
    pub on_shutdown: OnShutdown,
    /// `require` (fencing with conditional writes) or `off`.
    #[serde(default)]
    pub conditional_writes: ConditionalWrites,
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
    /// `sse = "customer"`: a file holding the 256-bit key, as 32 bytes or their base64.
    pub sse_customer_key_file: Option<std::path::PathBuf>,
    /// `sse = "customer"`: the environment variable holding the key's base64.
    pub sse_customer_key_env: Option<String>,
    /// A canned ACL for every object (`x-amz-acl`): `private`, `bucket-owner-full-control`, …
    pub acl: Option<AclKind>,
    /// User metadata on every object (`x-amz-meta-NAME`), besides the sink's own (stream,
    /// topic, partition, offsets): name = value, each value static or a template of the
    /// object's partition and first message (`{stream}`, `{topic}`, `{partition}`, `{date}`,
    /// `{hour}`, `{minute}`, `{timestamp}`, `{first_offset}`, `{header.NAME}`, `{ext}`).
    #[serde(default)]
    pub user_metadata: std::collections::BTreeMap<String, ValueTemplate>,
    /// Tags on every object (`x-amz-tagging`; at most 10), values as in `user_metadata`.
    #[serde(default)]
    pub tags: std::collections::BTreeMap<String, ValueTemplate>,
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
    /// The objects are the data files of an Apache Iceberg table, committed to it with the
    /// offsets they hold (`format = "parquet"`, engine feature `iceberg`).
    pub iceberg: Option<IcebergConfig>,
}

/// The kind of an Iceberg catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CatalogKind {
    /// The SQL catalog (iceberg-rust's, PyIceberg's and Java's `JdbcCatalog` layout) in a
    /// SQLite database.
    Sql,
    /// An Iceberg REST catalog server (Polaris, Lakekeeper, Nessie, Gravitino, Unity, AWS Glue's
    /// REST endpoint, …).
    Rest,
}

/// `[sink.s3.iceberg]`: the table the sink's objects are committed to.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IcebergConfig {
    /// `sql` or `rest`.
    pub catalog: CatalogKind,
    /// The SQL catalog's database, `sqlite:///PATH` (created when missing with
    /// `sqlite:///PATH?mode=rwc`); the REST catalog's base URL, `http[s]://HOST[:PORT][/PATH]`
    /// (its API under `/v1`).
    pub uri: String,
    /// REST: a bearer token for every request (`${VAR}` from the environment).
    pub token: Option<Secret>,
    /// REST: OAuth2 client credentials `CLIENT_ID:SECRET`, exchanged for a token at the
    /// catalog's `/v1/oauth/tokens` (`${VAR}` from the environment).
    pub credential: Option<Secret>,
    /// The catalog's name (the SQL catalog's `catalog_name` column).
    #[serde(default = "defaults::catalog_name")]
    pub catalog_name: String,
    /// The table's namespace (dots separate levels); created when missing.
    pub namespace: String,
    /// The table; created when missing with the sink's columns, unpartitioned.
    pub table: String,
    /// SQL: where the catalog puts new tables, `s3://BUCKET/PATH` in the sink's bucket (default
    /// `s3://{bucket}/{prefix}warehouse`). REST: the warehouse the server is asked for, as it
    /// names them (optional).
    pub warehouse: Option<String>,
    /// The least time between two commits of the sink; the data files closed meanwhile go
    /// into one snapshot.
    #[serde(default = "defaults::commit_interval")]
    pub commit_interval: Dur,
    /// The table's partition spec: `"COLUMN"` (identity) and `"day(COLUMN)"` / `"hour(COLUMN)"`
    /// (of a timestamp column); the sink creates the table with it, and an existing table must
    /// have it.
    #[serde(default)]
    pub partition_by: Vec<PartitionField>,
}

/// An Iceberg partition transform the sink can write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionTransform {
    Identity,
    Day,
    Hour,
}

/// One field of `s3.iceberg.partition_by`: a column and its transform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionField {
    pub column: String,
    pub transform: PartitionTransform,
}

impl PartitionField {
    /// Parses `"COLUMN"`, `"identity(COLUMN)"`, `"day(COLUMN)"` or `"hour(COLUMN)"`.
    pub fn parse(text: &str) -> Result<PartitionField, String> {
        let text = text.trim();
        let (transform, column) = match text.split_once('(') {
            Some((name, rest)) => {
                let column = rest.strip_suffix(')').ok_or_else(|| {
                    format!("{text:?}: a transform is written name(COLUMN), with the closing )")
                })?;
                let transform = match name.trim() {
                    "identity" => PartitionTransform::Identity,
                    "day" => PartitionTransform::Day,
                    "hour" => PartitionTransform::Hour,
                    other => {
                        return Err(format!(
                            "{text:?}: the transform {other:?} is not one the sink writes: \
                             identity, day or hour"
                        ));
                    }
                };
                (transform, column.trim())
            }
            None => (PartitionTransform::Identity, text),
        };
        if column.is_empty() {
            return Err(format!("{text:?} names no column"));
        }
        Ok(PartitionField {
            column: column.to_owned(),
            transform,
        })
    }

    /// The partition field's name in the table: the column's for identity, else
    /// `COLUMN_day` / `COLUMN_hour`.
    pub fn name(&self) -> String {
        match self.transform {
            PartitionTransform::Identity => self.column.clone(),
            PartitionTransform::Day => format!("{}_day", self.column),
            PartitionTransform::Hour => format!("{}_hour", self.column),
        }
    }
}

crate::template::from_text!(PartitionField);

impl S3SinkConfig {
    /// The SSE-C key of `sse = "customer"`, from its file or its environment variable (read
    /// through `env`); `None` for other `sse`. A problem names the key and never the value.
    pub fn customer_key(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<[u8; 32]>, (String, String)> {
        use base64::Engine as _;
        if self.sse != Some(SseKind::Customer) {
            return Ok(None);
        }
        let b64 = base64::engine::general_purpose::STANDARD;
        let decode = |text: &[u8]| -> Option<[u8; 32]> {
            let text = std::str::from_utf8(text).ok()?.trim();
            b64.decode(text).ok()?.try_into().ok()
        };
        match (&self.sse_customer_key_file, &self.sse_customer_key_env) {
            (Some(path), None) => {
                let bytes = std::fs::read(path).map_err(|e| {
                    (
                        "sse_customer_key_file".to_owned(),
                        format!("cannot read {}: {e}", path.display()),
                    )
                })?;
                let raw: Option<[u8; 32]> = bytes.as_slice().try_into().ok();
                raw.or_else(|| decode(&bytes)).map(Some).ok_or_else(|| {
                    (
                        "sse_customer_key_file".to_owned(),
                        format!(
                            "{} holds {} bytes: give the 256-bit key as 32 bytes or as their \
                             base64 (44 characters)",
                            path.display(),
                            bytes.len()
                        ),
                    )
                })
            }
            (None, Some(var)) => {
                let value = env(var).ok_or_else(|| {
                    (
                        "sse_customer_key_env".to_owned(),
                        format!("the environment variable {var} is not set"),
                    )
                })?;
                decode(value.as_bytes()).map(Some).ok_or_else(|| {
                    (
                        "sse_customer_key_env".to_owned(),
                        format!(
                            "the environment variable {var} is not the base64 of a 256-bit key \
                             (32 bytes, 44 characters)"
                        ),
                    )
                })
            }
            (Some(_), Some(_)) => Err((
                "sse_customer_key_file".to_owned(),
                "give sse_customer_key_file or sse_customer_key_env, not both".to_owned(),
            )),
            (None, None) => Err((
                "sse".to_owned(),
                "\"customer\" needs the key: set sse_customer_key_file or \
                 sse_customer_key_env (a key is never written in the config)"
                    .to_owned(),
            )),
        }
    }

    /// The endpoint in `region`: the custom one (path-style unless told otherwise) or AWS.
    pub fn endpoint(&self, region: &str) -> Result<Endpoint, String> {
        let style = self.path_style.map(|p| {
            if p {
                AddressingStyle::Path
            } else {
                AddressingStyle::VirtualHosted
            }
        });
        match &self.endpoint {
            Some(url) => Endpoint::parse(url, region, style).map_err(|e| e.to_string()),
            None => {
                spillway_s3::endpoint::check_region(region).map_err(|e| e.to_string())?;
                let mut e = Endpoint::aws(region);
                if let Some(s) = style {
                    e.style = s;
                }
                Ok(e)
            }
        }
    }

    /// What the objects' encoder writes.
    pub fn format_options(&self) -> FormatOptions {
        FormatOptions {
            format: self.format,
            compression: self.compression,
            level: self.compression_level,
            metadata: self.metadata,
            headers: self.headers,
            payload: self.payload,
            framing: if self.length_prefix {
                Framing::LengthPrefix
            } else {
                Framing::Separator(self.separator.as_bytes().to_vec())
            },
            parquet: ParquetConfig {
                table: self.iceberg.is_some(),
                ..self.parquet.clone()
            },
        }
    }
}

impl fmt::Debug for S3SinkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3SinkConfig")
            .field("bucket", &self.bucket)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &self.secret_access_key)
            .field("key", &self.key.template().text())
            .field("format", &self.format)
            .field("compression", &self.compression)
            .finish_non_exhaustive()
    }
}

mod defaults {
    use super::*;
    use std::time::Duration;

    pub fn yes() -> bool {
        true
    }
    pub fn newline() -> String {
        "\n".to_owned()
    }
    pub fn max_object_size() -> ByteSize {
        ByteSize(64 << 20)
    }
    pub fn max_open_objects() -> usize {
        16
    }
    pub fn max_split_lag() -> u64 {
        1_000_000
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
    pub fn row_group_size() -> ByteSize {
        ByteSize(8 << 20)
    }
    pub fn row_group_rows() -> usize {
        1 << 20
    }
    pub fn catalog_name() -> String {
        "spillway".to_owned()
    }
    pub fn commit_interval() -> Dur {
        Dur(Duration::from_secs(10))
    }
    pub fn retry_max() -> Dur {
        Dur(Duration::from_secs(30))
    }
}
