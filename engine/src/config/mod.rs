//! The configuration file (TOML): `[iggy]`, `[runtime]`, `[metrics]` and `[[sink]]` blocks.
//!
//! Every table refuses unknown keys; a wrong type or an impossible value is a [`ConfigError`]
//! naming the file and the key (`sink[1].window_messages`). Secrets can come from the
//! environment instead of the file (`SPILLWAY_IGGY_PASSWORD`, `SPILLWAY_IGGY_TOKEN`), and any
//! string value may name environment variables as `${VAR}` ([`interpolate`]).
//! `README.md` ("Configuration") documents every key; `examples/` holds commented files.

mod interpolate;
mod mqtt;
mod s3;
mod secret;
mod validate;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

pub use mqtt::{
    BirthConfig, DEFAULT_WINDOW, Envelope, MqttSinkConfig, MqttVersion, V311_QOS2_WINDOW,
    WillConfig, password_env,
};
pub use s3::{
    AclKind, CatalogKind, ChecksumKind, ColumnType, Compression, ConditionalWrites,
    CredentialSource, Format, FormatOptions, Framing, IcebergConfig, OnShutdown,
    PARQUET_OWN_COLUMNS, ParquetColumn, ParquetCompression, ParquetConfig, ParquetPayload,
    PartitionField, PartitionTransform, S3SinkConfig, SseKind,
};
pub use secret::Secret;

/// A duration as the config writes one (`"500ms"`, `"30s"`, `"24h"`): for the command line.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    crate::units::parse_duration(text)
}

pub use crate::json::PayloadEncoding;
use crate::template::name::PathTemplate;
use crate::units::{ByteSize, Dur};

/// Environment variables read on top of the file (they win over it).
pub const ENV_IGGY_ADDRESS: &str = "SPILLWAY_IGGY_ADDRESS";
/// Username for Iggy.
pub const ENV_IGGY_USERNAME: &str = "SPILLWAY_IGGY_USERNAME";
/// Password for Iggy.
pub const ENV_IGGY_PASSWORD: &str = "SPILLWAY_IGGY_PASSWORD";
/// Personal access token for Iggy (used instead of username/password).
pub const ENV_IGGY_TOKEN: &str = "SPILLWAY_IGGY_TOKEN";
/// Environment variable for the bearer token of pause and resume (wins over the file).
pub const ENV_CONTROL_TOKEN: &str = "SPILLWAY_CONTROL_TOKEN";

/// A config problem: which file, which key, what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file it was read from (`<inline>` for a string).
    pub file: PathBuf,
    /// The key, as a path (`sink[0].window_messages`); empty for a whole-file problem.
    pub key: String,
    /// What is wrong, and what would be right.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}: {}", self.file.display(), self.message)
        } else {
            write!(
                f,
                "{}: key `{}`: {}",
                self.file.display(),
                self.key,
                self.message
            )
        }
    }
}

impl std::error::Error for ConfigError {}

/// The whole configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where this was read from (not a key).
    #[serde(skip)]
    pub path: PathBuf,
    /// The Iggy server all Iggy-sourced sinks read from.
    #[serde(default)]
    pub iggy: IggyConfig,
    /// Cores, pins and memory.
    #[serde(default)]
    pub runtime: RuntimeConfig,
    /// Prometheus endpoint and the progress line.
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// The sinks, each its own Iggy consumer.
    #[serde(default, rename = "sink")]
    pub sinks: Vec<SinkConfig>,
}

/// `[iggy]`: the server, credentials and TLS.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IggyConfig {
    /// `host:port` of the server's TCP transport; for a cluster, several nodes separated by
    /// commas (the leader is found from any of them).
    pub address: String,
    /// Username (with `password`).
    pub username: Option<String>,
    /// Password (or env `SPILLWAY_IGGY_PASSWORD`).
    pub password: Option<Secret>,
    /// Personal access token, instead of username/password (or env `SPILLWAY_IGGY_TOKEN`).
    pub token: Option<Secret>,
    /// Connect with TLS.
    pub tls: bool,
    /// PEM file of the CA to trust; without it, the Mozilla roots (webpki-roots).
    pub tls_ca: Option<PathBuf>,
    /// Name to check the server certificate against (default: the host of `address`).
    pub tls_server_name: Option<String>,
    /// Time allowed for TCP connect + TLS + login.
    pub connect_timeout: Dur,
    /// Time allowed for one request's reply.
    pub request_timeout: Dur,
    /// First wait before reconnecting after a lost connection (doubles up to `reconnect_max`).
    pub reconnect_min: Dur,
    /// Longest wait between reconnect attempts.
    pub reconnect_max: Dur,
    /// Send a ping when the connection has been idle this long (the server evicts silent
    /// clients after about 36 s).
    pub ping_interval: Dur,
}

impl IggyConfig {
    /// The addresses of `address`: one, or a cluster's nodes (comma-separated), trimmed.
    pub fn addresses(&self) -> impl Iterator<Item = &str> {
        self.address
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
    }
}

impl Default for IggyConfig {
    fn default() -> Self {
        IggyConfig {
            address: "127.0.0.1:8090".to_owned(),
            username: None,
            password: None,
            token: None,
            tls: false,
            tls_ca: None,
            tls_server_name: None,
            connect_timeout: Dur(std::time::Duration::from_secs(5)),
            request_timeout: Dur(std::time::Duration::from_secs(10)),
            reconnect_min: Dur(std::time::Duration::from_millis(100)),
            reconnect_max: Dur(std::time::Duration::from_secs(5)),
            ping_interval: Dur(std::time::Duration::from_secs(5)),
        }
    }
}

/// `[runtime]`: which cores run shards, which partitions are pinned where, memory.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeConfig {
    /// `"auto"` (every allowed core but the control thread's) or a list of core ids.
    pub cores: Cores,
    /// The core the control thread is pinned to (default: the first allowed core, or with a
    /// list of `cores`, the first allowed core not in it).
    pub control_core: Option<usize>,
    /// Explicit placements of partitions on cores.
    pub pin: Vec<PinConfig>,
    /// Per shard: the most bytes of polled, unconfirmed messages it holds before it pauses
    /// polling.
    pub shard_memory_budget: ByteSize,
    /// How long sinks may drain after SIGINT/SIGTERM before the engine stops anyway.
    pub shutdown_timeout: Dur,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            cores: Cores::Auto,
            control_core: None,
            pin: Vec::new(),
            shard_memory_budget: ByteSize(256 << 20),
            shutdown_timeout: Dur(std::time::Duration::from_secs(10)),
        }
    }
}

/// The shard cores.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Cores {
    /// Every allowed core but the control thread's (all of them when there is only one).
    #[default]
    Auto,
    /// These core ids, one shard each.
    List(Vec<usize>),
}

impl<'de> Deserialize<'de> for Cores {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Cores;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"auto\" or a list of core ids such as [2, 3, 4]")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Cores, E> {
                if v == "auto" {
                    Ok(Cores::Auto)
                } else {
                    Err(E::custom(format!(
                        "{v:?} is not \"auto\"; give \"auto\" or a list of core ids"
                    )))
                }
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Cores, A::Error> {
                let mut out = Vec::new();
                while let Some(c) = seq.next_element::<usize>()? {
                    out.push(c);
                }
                Ok(Cores::List(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// `[[runtime.pin]]`: partition `partition` of sink `sink` runs on core `core`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinConfig {
    /// The sink's name.
    pub sink: String,
    /// The partition id (of the sink's stream/topic).
    pub partition: u32,
    /// A core from `runtime.cores`.
    pub core: usize,
}

/// `[metrics]`: the HTTP listener (metrics, probes, status, pause and resume) and the
/// progress line.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Where to serve `/metrics` (Prometheus text format), `/health`, `/ready`, `/status` and
    /// the sinks' pause and resume; `""` turns it off. Port 0 picks a free port (logged).
    pub address: String,
    /// How often to log the progress line; `"0s"` turns it off.
    pub log_interval: Dur,
    /// The bearer token that pause and resume need (or env `SPILLWAY_CONTROL_TOKEN`). Without
    /// one they are taken only on a loopback address.
    pub token: Option<Secret>,
    /// A file holding the token (its first line); `token` and the environment win over it.
    pub token_file: Option<PathBuf>,
    /// `/health` answers 503 once a shard (or the control thread) has not reported for this
    /// long.
    pub health_timeout: Dur,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            address: "127.0.0.1:9464".to_owned(),
            log_interval: Dur(std::time::Duration::from_secs(10)),
            token: None,
            token_file: None,
            health_timeout: Dur(std::time::Duration::from_secs(5)),
        }
    }
}

/// A stream or topic: a name, or a numeric id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Ident {
    /// By numeric id.
    Id(u32),
    /// By name.
    Name(String),
}

impl fmt::Display for Ident {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ident::Id(id) => write!(f, "{id}"),
            Ident::Name(n) => f.write_str(n),
        }
    }
}

impl<'de> Deserialize<'de> for Ident {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Ident;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a name (string) or a numeric id")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Ident, E> {
                if v.is_empty() || v.len() > 255 {
                    return Err(E::custom("a name must be 1 to 255 bytes"));
                }
                Ok(Ident::Name(v.to_owned()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Ident, E> {
                u32::try_from(v)
                    .map(Ident::Id)
                    .map_err(|_| E::custom("an id must be between 0 and 4294967295"))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Ident, E> {
                self.visit_i64(i64::try_from(v).unwrap_or(-1))
            }
        }
        d.deserialize_any(V)
    }
}

/// The kind of sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SinkType {
    /// JSON lines to a file (`[sink.file]`).
    File,
    /// JSON lines to standard output (`[sink.file]` optional, its `path` ignored).
    Stdout,
    /// An MQTT broker (`[sink.mqtt]`).
    Mqtt,
    /// An S3-compatible object store (`[sink.s3]`).
    S3,
}

/// Where a sink's messages come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// Partitions of an Iggy topic.
    #[default]
    Iggy,
    /// Synthetic messages (`[sink.generate]`): demos and benches without a server.
    Generate,
}

/// Where to start a partition that has no stored offset for this consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StartFrom {
    /// The first message still in the partition.
    #[default]
    Earliest,
    /// Only messages appended after the start.
    Latest,
}

/// What to do with a message the sink rejects for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorPolicy {
    /// Stop the sink, commit nothing past the message, exit non-zero with the reason.
    #[default]
    Fail,
    /// Count it, log it with its offset and reason, and go on as if delivered.
    Skip,
    /// Hand it to the sink's dead-letter destination, then go on (sinks that have one).
    DeadLetter,
}

/// `[[sink]]`: one sink, its source and its flow control; then its own table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkConfig {
    /// Unique name; also the Iggy consumer name unless `consumer` is set.
    pub name: String,
    /// The kind of sink.
    #[serde(rename = "type")]
    pub kind: SinkType,
    /// Where messages come from.
    #[serde(default)]
    pub source: SourceKind,
    /// Iggy consumer name for offsets (default: `name`). Ignored with `consumer_group`.
    pub consumer: Option<String>,
    /// Stream name or id.
    pub stream: Option<Ident>,
    /// Topic name or id.
    pub topic: Option<Ident>,
    /// Explicit partition ids (0-based), spread over the shards.
    pub partitions: Option<Vec<u32>>,
    /// Consumer group name: Iggy assigns partitions to the members (one per shard).
    pub consumer_group: Option<String>,
    /// Where a partition with no stored offset starts.
    #[serde(default)]
    pub start: StartFrom,
    /// Most messages per poll.
    #[serde(default = "defaults::batch_size")]
    pub batch_size: u32,
    /// The longest wait before polling a partition whose polls come back empty (the wait
    /// starts at 200 µs after the first empty poll and doubles; see `flow::parts`).
    #[serde(default = "defaults::poll_interval")]
    pub poll_interval: Dur,
    /// Per partition: most polled, unconfirmed messages before polling pauses.
    #[serde(default = "defaults::window_messages")]
    pub window_messages: u32,
    /// Per partition: most polled, unconfirmed payload bytes before polling pauses.
    #[serde(default = "defaults::window_bytes")]
    pub window_bytes: ByteSize,
    /// Store the confirmed offset at least this often while it moves.
    #[serde(default = "defaults::commit_interval")]
    pub commit_interval: Dur,
    /// ...or as soon as this many more messages are confirmed.
    #[serde(default = "defaults::commit_every")]
    pub commit_every: u64,
    /// How often a consumer-group member re-reads its assignment.
    #[serde(default = "defaults::group_sync_interval")]
    pub group_sync_interval: Dur,
    /// Policy for messages the sink rejects for good.
    #[serde(default)]
    pub on_error: ErrorPolicy,
    /// `type = "file"` / `"stdout"` options.
    pub file: Option<FileSinkConfig>,
    /// `type = "mqtt"` options.
    pub mqtt: Option<MqttSinkConfig>,
    /// `type = "s3"` options.
    pub s3: Option<S3SinkConfig>,
    /// `source = "generate"` options.
    pub generate: Option<GenerateConfig>,
}

impl SinkConfig {
    /// The Iggy consumer name its offsets are stored under (when not in a group).
    pub fn consumer_name(&self) -> &str {
        self.consumer.as_deref().unwrap_or(&self.name)
    }
}

mod defaults {
    use crate::units::{ByteSize, Dur};
    use std::time::Duration;

    pub fn batch_size() -> u32 {
        1000
    }
    pub fn poll_interval() -> Dur {
        Dur(Duration::from_millis(20))
    }
    pub fn window_messages() -> u32 {
        10_000
    }
    pub fn window_bytes() -> ByteSize {
        ByteSize(16 << 20)
    }
    pub fn commit_interval() -> Dur {
        Dur(Duration::from_secs(1))
    }
    pub fn commit_every() -> u64 {
        10_000
    }
    pub fn group_sync_interval() -> Dur {
        Dur(Duration::from_secs(1))
    }
    pub fn generate_size() -> ByteSize {
        ByteSize(100)
    }
    pub fn one() -> u32 {
        1
    }
    pub fn yes() -> bool {
        true
    }
}

/// The order in which the file sink confirms the offsets of a batch it has written: a testing
/// aid for the commit watermark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConfirmOrder {
    /// Lowest offset first.
    #[default]
    InOrder,
    /// Highest offset first.
    Reverse,
    /// A random order.
    Shuffle,
}

/// `[sink.file]`: JSON lines, one object per message.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSinkConfig {
    /// File to append to (`"-"` for standard output).
    #[serde(default)]
    pub path: Option<PathTemplate>,
    /// Write the Iggy metadata (stream, topic, partition, offset, id, timestamps).
    #[serde(default = "defaults::yes")]
    pub metadata: bool,
    /// Write the Iggy user headers.
    #[serde(default = "defaults::yes")]
    pub headers: bool,
    /// How payloads are written.
    #[serde(default)]
    pub payload: PayloadEncoding,
    /// fdatasync before confirming (durable on power loss, slower).
    #[serde(default)]
    pub fsync: bool,
    /// Testing aid: order of confirmation within a batch.
    #[serde(default)]
    pub confirm_order: ConfirmOrder,
    /// Testing aid: hold each batch a random time up to this before writing and confirming it,
    /// so batches complete out of order.
    #[serde(default)]
    pub confirm_delay: Dur,
}

impl Default for FileSinkConfig {
    fn default() -> Self {
        FileSinkConfig {
            path: None,
            metadata: true,
            headers: true,
            payload: PayloadEncoding::Auto,
            fsync: false,
            confirm_order: ConfirmOrder::InOrder,
            confirm_delay: Dur::default(),
        }
    }
}

/// `[sink.generate]`: synthetic messages.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerateConfig {
    /// Number of partitions (ids 0..n).
    #[serde(default = "defaults::one")]
    pub partitions: u32,
    /// Messages per second over all partitions; 0 means as fast as the sink takes them.
    #[serde(default)]
    pub rate: f64,
    /// Payload size.
    #[serde(default = "defaults::generate_size")]
    pub size: ByteSize,
    /// Total messages over all partitions; 0 means no end. The engine exits once all are
    /// confirmed.
    #[serde(default)]
    pub messages: u64,
}

/// Reads, parses and validates a config file, then applies the environment overrides.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: path.to_owned(),
        key: String::new(),
        message: format!("cannot read the file: {e}"),
    })?;
    parse(&text, path, &|name| std::env::var(name).ok())
}

/// Parses and validates `text` (read from `path`), with `env` as the environment.
pub fn parse(
    text: &str,
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let err = |key: String, message: String| ConfigError {
        file: path.to_owned(),
        key,
        message,
    };
    let mut table = text.parse::<toml::Table>().map_err(|e| {
        err(
            String::new(),
            format!("not valid TOML: {}", e.to_string().trim()),
        )
    })?;
    interpolate::interpolate(&mut table, env).map_err(|(key, message)| err(key, message))?;
    let mut config: Config =
        serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
            let key = e.path().to_string();
            let inner = e.into_inner();
            err(
                if key == "." { String::new() } else { key },
                inner.message().trim().to_owned(),
            )
        })?;
    config.path = path.to_owned();
    apply_env(&mut config, env);
    validate::validate(&config).map_err(|(key, message)| err(key, message))?;
    if config.metrics.token.is_none()
        && let Some(file) = &config.metrics.token_file
    {
        let token = std::fs::read_to_string(file).map_err(|e| {
            err(
                "metrics.token_file".into(),
                format!("{}: {e}", file.display()),
            )
        })?;
        let token = token.lines().next().unwrap_or_default().trim();
        if token.is_empty() {
            return Err(err(
                "metrics.token_file".into(),
                format!("{}: the first line is empty", file.display()),
            ));
        }
        config.metrics.token = Some(Secret::new(token));
    }
    Ok(config)
}

fn apply_env(config: &mut Config, env: &dyn Fn(&str) -> Option<String>) {
    if let Some(v) = env(ENV_IGGY_ADDRESS) {
        config.iggy.address = v;
    }
    if let Some(v) = env(ENV_IGGY_USERNAME) {
        config.iggy.username = Some(v);
    }
    if let Some(v) = env(ENV_IGGY_PASSWORD) {
        config.iggy.password = Some(Secret::new(v));
    }
    if let Some(v) = env(ENV_IGGY_TOKEN) {
        config.iggy.token = Some(Secret::new(v));
    }
    if let Some(v) = env(ENV_CONTROL_TOKEN) {
        config.metrics.token = Some(Secret::new(v));
    }
    for sink in &mut config.sinks {
        if let Some(s3) = &mut sink.s3 {
            if s3.access_key_id.is_none() {
                s3.access_key_id = env("AWS_ACCESS_KEY_ID");
            }
            if s3.secret_access_key.is_none() {
                s3.secret_access_key = env("AWS_SECRET_ACCESS_KEY").map(Secret::new);
            }
            if s3.session_token.is_none() {
                s3.session_token = env("AWS_SESSION_TOKEN").map(Secret::new);
            }
            if s3.region.is_none() {
                s3.region = env("AWS_REGION").or_else(|| env("AWS_DEFAULT_REGION"));
            }
        }
        if let Some(mqtt) = &mut sink.mqtt
            && let Some(v) = env(&password_env(&sink.name))
        {
            mqtt.password = Some(Secret::new(v));
        }
    }
}

#[cfg(test)]
mod tests;
