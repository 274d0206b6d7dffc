//! The S3 sink: Iggy partitions into objects, bounded memory, keys a replay reproduces.
//!
//! One object writer per partition (per sink, on the shard that owns the partition). Messages
//! are encoded ([`format`]) and handed to the S3 client's streaming [`ObjectWriter`]: an object
//! bigger than a part goes out as a multipart upload while it is written, so a partition holds
//! about `part_size x (parts_in_flight + 1)` whatever the object's size. An object is closed
//! when it reaches `max_object_size` (output bytes) or `max_object_messages`, when a message's
//! timestamp falls in the next `record_interval`, after `idle_flush` without messages, and on
//! shutdown. Its offsets are confirmed only once the object is complete
//! (CompleteMultipartUpload or PutObject answered); a failed upload is aborted, its offsets stay
//! unconfirmed, and the partition is polled again from the object's first offset after a
//! backoff, so the object is written again under the same key ([`key`]).
//!
//! The engine paces an S3 sink by the memory it reports ([`Sink::paced_by_memory`]) rather than
//! by the per-partition message windows: an object confirms all its messages at once. One
//! gauge counts everything the sink holds (each partition's encoder output and pending chunks,
//! each upload's buffer and parts, also while a task completes or aborts it) and reports every
//! change through [`Acks::hold`]; the engine never asks.
//!
//! The completion tasks report to the engine through the sink's [`Acks`] (confirmed, polled
//! again) and to the sink through one queue of [`TaskEvent`]s, which the sink takes at each of
//! its entry points and between messages (a task may finish during any await of a delivery).

pub mod format;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use monoio::task::JoinHandle;
use spillway_s3::client::{ClientConfig, S3Client};
use spillway_s3::credentials::Credentials;
use spillway_s3::options::{CannedAcl, ObjectOptions, Sse};
use spillway_s3::upload::{Gauge, ObjectWriter, UploadConfig};
use tracing::{debug, info, warn};

use self::format::{Encoder, FormatOptions};
use super::{Acks, Sink, SinkError, SinkStatus};
use crate::config::{
    AclKind, ChecksumKind, CredentialSource, ErrorPolicy, OnShutdown, S3SinkConfig, SinkConfig,
    SseKind,
};
use crate::message::{Batch, Message, PartitionInfo};
use crate::template::key::{self, KeyInput, ValueTemplate};
use crate::units::Rounded;

/// Logs the attempts the S3 client retries: a store too slow for its deadline by name (a WARN,
/// at most one in 10 s, with how many more), the rest at debug level (the object's own failure,
/// once every attempt failed, is a WARN).
fn retry_logger(sink: &str) -> spillway_s3::client::RetryObserver {
    let sink = sink.to_owned();
    let limit = RefCell::new(crate::ratelog::RateLimit::new(Duration::from_secs(10), 1));
    Box::new(move |e, attempt, wait| {
        let slow = matches!(
            e,
            spillway_s3::Error::Transport(spillway_s3::TransportError::TooSlow { .. })
        );
        if !slow {
            debug!(sink = %sink, attempt, "S3 request failed, retrying in {wait:.1?}: {e}");
            return;
        }
        let now = Instant::now();
        let mut limit = limit.borrow_mut();
        let more = limit
            .due(now, false)
            .map(|n| format!(" ({n} more since the last line)"));
        if limit.admit(now) {
            warn!(
                sink = %sink,
                attempt,
                "slow S3 store: {e}; retrying in {wait:.1?} (the deadline is \
                 sink.s3.request_timeout plus the request's size at sink.s3.min_transfer_rate){}",
                more.unwrap_or_default()
            );
        }
    })
}

/// Why an object (or a dead letter) failed, and whether trying it again can help.
#[derive(Debug, Clone)]
struct Failure {
    text: String,
    /// No retry can mend it (access denied, a bucket gone or moved, a limit the object
    /// breaks): the sink stops, naming it.
    permanent: bool,
}

impl Failure {
    /// A failure that may pass.
    fn passing(text: impl Into<String>) -> Failure {
        Failure {
            text: text.into(),
            permanent: false,
        }
    }

    /// An S3 client error while doing `what`, classified by [`permanent`].
    fn s3(what: impl std::fmt::Display, e: &spillway_s3::Error) -> Failure {
        Failure {
            text: format!("{what}: {e}"),
            permanent: permanent(e),
        }
    }
}

/// Whether writing the object again cannot succeed: an S3 error that is not retryable (after
/// the client's own retries), except those that concern this one upload (it was aborted
/// under us, a part went missing, a body was corrupted on the way), which writing the object
/// again mends; a TLS failure; a request the client cannot build; an object over S3's limits.
fn permanent(e: &spillway_s3::Error) -> bool {
    use spillway_s3::{Error, TransportError};
    match e {
        Error::S3(s) => {
            !s.is_retryable()
                && !matches!(
                    s.code.as_str(),
                    "NoSuchUpload"
                        | "NoSuchKey"
                        | "InvalidPart"
                        | "InvalidPartOrder"
                        | "BadDigest"
                        | "InvalidDigest"
                        | "XAmzContentSHA256Mismatch"
                        | "IncompleteBody"
                )
        }
        Error::Transport(TransportError::Tls(_) | TransportError::InvalidRequest(_)) => true,
        Error::Transport(_) | Error::InvalidResponse(_) => false,
        Error::Config(_) | Error::Limit(_) => true,
        _ => false,
    }
}

/// An object being written.
struct Open {
    /// The first message, without its payload (its time and headers make the key).
    first: Message,
    last_offset: u64,
    count: u64,
    /// `record_interval` bucket of the first message.
    bucket: Option<u64>,
    last_append: Instant,
    /// Output not handed to an upload yet (until it exceeds a part, or the object closes).
    pending: Vec<Bytes>,
    pending_len: u64,
    upload: Option<ObjectWriter>,
    /// The generation of the partition's [`Ledger`] the object is counted in.
    generation: u64,
}

/// One object at a time of a partition: the only one, or under a key that splits
/// ([`key::KeyTemplate::splits`]) the one of a set of values.
struct Lane {
    /// The values of the key's header and JSON fields its objects hold (empty when the key
    /// does not split).
    split: Vec<String>,
    encoder: Encoder,
    open: Option<Open>,
}

/// Which offsets of a partition are settled: in a complete object, in a stored dead letter,
/// skipped by `on_error`, or already in a complete object of a run before. The writer and the
/// completion tasks keep it together; the partition's marker and its confirmations to the
/// engine never pass [`Ledger::watermark`], below which every offset is settled.
#[derive(Default)]
struct Ledger {
    /// The first offsets of the objects (open or completing) and dead letters not settled
    /// yet, and of messages rejected under `on_error = "fail"` (never settled).
    unsettled: BTreeSet<u64>,
    /// The last offset the writer took (into an object or a letter, or settled at once).
    handed: Option<u64>,
    /// Per set of split values, the last offset of its newest complete object: a message of
    /// those values at or below it is settled already (delivered again after a failure, or
    /// after a crash past the marker, which carries these).
    done: HashMap<Vec<String>, u64>,
    /// The watermark last confirmed to the engine.
    confirmed: Option<u64>,
    /// Counts the resets after failures: an object counted in an earlier one is not in
    /// `unsettled` any more.
    generation: u64,
}

impl Ledger {
    /// The offset at and below which every offset the writer took is settled.
    fn watermark(&self) -> Option<u64> {
        match self.unsettled.first() {
            Some(&first) => first.checked_sub(1),
            None => self.handed,
        }
    }

    /// Forgets the marks at or below the watermark (no delivery goes back there).
    fn prune(&mut self) {
        if let Some(w) = self.watermark() {
            self.done.retain(|_, last| *last > w);
        }
    }

    /// Confirms to the engine what the watermark passed since the last call.
    fn advance(&mut self, acks: &Acks, slot: usize) {
        let Some(w) = self.watermark() else {
            return;
        };
        if self.confirmed.is_some_and(|c| c >= w) {
            return;
        }
        let from = self.confirmed.map_or(0, |c| c + 1);
        acks.confirm(slot, from, w);
        self.confirmed = Some(w);
    }

    /// After a failure: everything past the watermark is delivered again, so nothing past it
    /// is counted any more. The offset delivery starts again from.
    fn reset(&mut self) -> u64 {
        let w = self.watermark();
        self.unsettled.clear();
        self.handed = w;
        self.generation += 1;
        w.map_or(0, |w| w + 1)
    }
}

/// What a partition's completion tasks share with its writer.
struct Completion {
    /// The next backoff after a failure (doubles up to `retry_max`, reset by a success).
    backoff: Cell<Duration>,
    ledger: RefCell<Ledger>,
}

/// What a completion task tells the sink.
#[derive(Debug, Clone, PartialEq, Eq)]
enum TaskEvent {
    /// An object (or dead letter) of the writer `epoch` of partition `slot` failed: the
    /// partition is being polled again from its watermark, so that writer's open objects are
    /// dropped. A writer released and made anew has another epoch: the event is not its.
    Failed { slot: usize, epoch: u64 },
    /// A failure no retry can mend: the sink stops with the first.
    Fatal(String),
}

/// The queue from the completion tasks to their sink (shard-local).
type TaskEvents = Rc<RefCell<Vec<TaskEvent>>>;

/// One partition's writer.
struct PartWriter {
    info: Rc<PartitionInfo>,
    /// One lane, or under a key that splits up to `s3.max_open_objects`.
    lanes: Vec<Lane>,
    shared: Rc<Completion>,
    /// Tells this writer's task events from those of an earlier writer of the same slot.
    epoch: u64,
    /// Bytes of this writer's encoder output and pending chunks counted in the sink's total.
    counted: u64,
    /// The task completing this partition's latest closed object; the next one waits for it,
    /// so objects complete and markers move in the order they closed.
    tail: Option<JoinHandle<bool>>,
    /// An object failed in the writer: its offsets and everything after them are delivered
    /// again once the objects closed before it settle; until then nothing is written.
    resetting: bool,
}

impl PartWriter {
    fn opens(&self) -> impl Iterator<Item = &Open> {
        self.lanes.iter().filter_map(|l| l.open.as_ref())
    }

    fn open(&self, lane: usize) -> Option<&Open> {
        self.lanes.get(lane).and_then(|l| l.open.as_ref())
    }

    fn open_mut(&mut self, lane: usize) -> Option<&mut Open> {
        self.lanes.get_mut(lane).and_then(|l| l.open.as_mut())
    }
}

/// Everything a completion task needs, cloned out of the sink.
#[derive(Clone)]
struct Finisher {
    sink: Rc<str>,
    client: Rc<S3Client>,
    bucket: Rc<str>,
    /// The options of the small JSON objects the sink writes itself (markers, dead letters).
    small: ObjectOptions,
    acks: Acks,
    retry_min: Duration,
    retry_max: Duration,
    failures: Rc<Cell<u64>>,
    events: TaskEvents,
}

/// The encoder's output is handed to the upload at the end of each batch, and within a batch
/// once this much waits: a chunk is then less than this plus one message, which keeps the
/// part window's slack small (see `buffered`) while most chunks carry many messages.
const TAKE_AT: u64 = 64 << 10;

/// Under a key that splits, the most sets of values a partition's marker carries past its
/// watermark (each with the last offset of its newest complete object); past it the oldest
/// open object is closed, which lets the watermark move.
const MAX_MARKS: usize = 1024;

/// See the module docs.
pub struct S3Sink {
    name: String,
    /// The sink's first shard: it sweeps stale uploads at start.
    lead: bool,
    cfg: S3SinkConfig,
    client: Rc<S3Client>,
    acks: Acks,
    upload: UploadConfig,
    parts: Vec<Option<PartWriter>>,
    key_buf: String,
    finisher: Finisher,
    /// `on_error = "dead_letter"`: the prefix and the encoder of dead letters.
    dead_letter: Option<(String, Encoder)>,
    /// Everything the sink holds (the uploads' gauges count within it); each change is
    /// reported through `acks`.
    total: Rc<Gauge>,
    /// The first failure no retry can mend, taken from the task events.
    fatal: Option<String>,
    /// The epoch of the next partition writer.
    epochs: u64,
    /// Output bytes the encoders made so far (before upload).
    encoded: u64,
    /// The AWS credential chain the client signs with, when there are no static keys.
    chain: Option<crate::credentials::Chain>,
    /// The key splits a partition's messages by their values (see [`Lane`]).
    splits: bool,
    /// The values of the message being written.
    values: Vec<String>,
    /// `on_error = "skip"`: a rejected message is settled at once.
    skip_rejects: bool,
    /// The marks of the partitions' markers read at resume, until their writers take them.
    resumed: HashMap<(Rc<str>, Rc<str>, u32), Marker>,
    /// When the batch being delivered came (the lanes' idle clock).
    batch_at: Instant,
}

impl std::fmt::Debug for S3Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Sink")
            .field("sink", &self.name)
            .field("bucket", &self.cfg.bucket)
            .field(
                "open",
                &self
                    .parts
                    .iter()
                    .flatten()
                    .map(|p| p.opens().count())
                    .sum::<usize>(),
            )
            .finish()
    }
}

fn checksum_of(c: &S3SinkConfig) -> spillway_s3::options::Checksum {
    match c.checksum {
        ChecksumKind::Crc32c => spillway_s3::options::Checksum::Crc32c,
        ChecksumKind::None => spillway_s3::options::Checksum::None,
    }
}

fn sse_of(c: &S3SinkConfig, customer_key: Option<[u8; 32]>) -> Option<Sse> {
    match (c.sse, customer_key) {
        (Some(SseKind::S3), _) => Some(Sse::S3),
        (Some(SseKind::Kms), _) => Some(Sse::Kms {
            key_id: c.sse_kms_key_id.clone(),
        }),
        (Some(SseKind::Customer), Some(key)) => Some(Sse::CustomerKey { key }),
        (Some(SseKind::Customer), None) | (None, _) => None,
    }
}

fn acl_of(c: &S3SinkConfig) -> Option<CannedAcl> {
    c.acl.map(|a| match a {
        AclKind::Private => CannedAcl::Private,
        AclKind::PublicRead => CannedAcl::PublicRead,
        AclKind::PublicReadWrite => CannedAcl::PublicReadWrite,
        AclKind::AuthenticatedRead => CannedAcl::AuthenticatedRead,
        AclKind::AwsExecRead => CannedAcl::AwsExecRead,
        AclKind::BucketOwnerRead => CannedAcl::BucketOwnerRead,
        AclKind::BucketOwnerFullControl => CannedAcl::BucketOwnerFullControl,
    })
}

impl S3Sink {
    /// The sink of `config` on shard `shard`.
    pub fn new(
        config: &SinkConfig,
        shard: usize,
        lead: bool,
        acks: Acks,
    ) -> Result<S3Sink, SinkError> {
        process_start();
        let err = |e: String| SinkError::config(format!("sink {:?}: {e}", config.name));
        let cfg = config
            .s3
            .clone()
            .ok_or_else(|| err("[sink.s3] is missing".to_owned()))?;
        let region = cfg.region.clone().unwrap_or_else(|| "us-east-1".to_owned());
        let endpoint = cfg
            .endpoint(&region)
            .map_err(|e| err(format!("s3.endpoint: {e}")))?;
        let credentials = Credentials::new(
            cfg.access_key_id.clone().unwrap_or_default(),
            cfg.secret_access_key
                .as_ref()
                .map(|s| s.expose().to_owned())
                .unwrap_or_default(),
            cfg.session_token.as_ref().map(|s| s.expose().to_owned()),
        );
        let has_keys = cfg.access_key_id.is_some() && cfg.secret_access_key.is_some();
        let chain = match (cfg.credentials, has_keys) {
            (CredentialSource::Static, false) => {
                return Err(err(
                    "s3.credentials = \"static\" but there are no keys: set \
                     s3.access_key_id and s3.secret_access_key (or AWS_ACCESS_KEY_ID and \
                     AWS_SECRET_ACCESS_KEY)"
                        .to_owned(),
                ));
            }
            (CredentialSource::Static, true) | (CredentialSource::Auto, true) => None,
            (CredentialSource::Chain, _) | (CredentialSource::Auto, false) => {
                Some(crate::credentials::chain(cfg.profile.as_deref(), &region).map_err(err)?)
            }
        };
        let mut client_cfg = ClientConfig::new(endpoint, credentials);
        client_cfg.shared_credentials = chain.as_ref().map(|c| c.shared.clone());
        // https: the Mozilla roots, or the store's own CA.
        client_cfg.transport.tls.client_config = Some(
            crate::tls::client_config(cfg.tls_ca.as_deref(), None, &[b"http/1.1"])
                .map_err(|e| err(format!("s3.tls_ca: {e}")))?,
        );
        client_cfg.jitter_seed = shard as u64 + 1;
        client_cfg.retry.max_attempts = cfg.request_attempts.max(1);
        client_cfg.transport.request_timeout = cfg.request_timeout.0;
        if cfg.signed_payload {
            client_cfg.payload = spillway_s3::sign::PayloadMode::Signed;
        }
        client_cfg.transport.min_rate = cfg.min_transfer_rate.0;
        let client = S3Client::new(client_cfg)
            .map_err(|e| err(format!("S3 client: {e}")))?
            .with_retry_observer(retry_logger(&config.name));
        let probe = Encoder::new(cfg.format_options()).map_err(err)?;
        let total = {
            let acks = acks.clone();
            Rc::new(Gauge::watched(move |bytes| acks.hold(bytes)))
        };
        let customer_key = cfg
            .customer_key(&|name| std::env::var(name).ok())
            .map_err(|(key, e)| err(format!("s3.{key}: {e}")))?;
        let sse = sse_of(&cfg, customer_key);
        let mut upload = UploadConfig::new(cfg.part_size.0, cfg.parts_in_flight);
        upload.total = Some(Rc::clone(&total));
        upload.options = ObjectOptions {
            content_type: Some(probe.content_type().to_owned()),
            content_encoding: probe.content_encoding().map(str::to_owned),
            storage_class: cfg.storage_class.clone(),
            sse,
            acl: acl_of(&cfg),
            content_md5: cfg.content_md5,
            checksum: checksum_of(&cfg),
            ..ObjectOptions::default()
        };
        upload
            .options
            .validate()
            .map_err(|e| err(format!("s3 object options: {e}")))?;
        let client = Rc::new(client);
        let finisher = Finisher {
            sink: config.name.as_str().into(),
            client: Rc::clone(&client),
            bucket: cfg.bucket.as_str().into(),
            small: ObjectOptions {
                content_type: Some("application/json".to_owned()),
                sse: upload.options.sse.clone(),
                acl: upload.options.acl,
                content_md5: cfg.content_md5,
                checksum: checksum_of(&cfg),
                ..ObjectOptions::default()
            },
            acks: acks.clone(),
            retry_min: cfg.retry_min.0,
            retry_max: cfg.retry_max.0,
            failures: Rc::default(),
            events: TaskEvents::default(),
        };
        let dead_letter = match (config.on_error, &cfg.dead_letter_prefix) {
            (ErrorPolicy::DeadLetter, Some(prefix)) => Some((
                prefix.clone(),
                Encoder::new(FormatOptions::default()).map_err(err)?,
            )),
            (ErrorPolicy::DeadLetter, None) => {
                return Err(err(
                    "on_error = \"dead_letter\" needs s3.dead_letter_prefix".to_owned(),
                ));
            }
            _ => None,
        };
        Ok(S3Sink {
            name: config.name.clone(),
            lead,
            client,
            acks,
            upload,
            parts: Vec::new(),
            key_buf: String::new(),
            encoded: 0,
            chain,
            finisher,
            dead_letter,
            total,
            fatal: None,
            epochs: 0,
            splits: cfg.key.splits(),
            values: Vec::new(),
            skip_rejects: config.on_error == ErrorPolicy::Skip,
            resumed: HashMap::new(),
            batch_at: Instant::now(),
            cfg,
        })
    }

    fn writer(&mut self, info: &Rc<PartitionInfo>) -> Result<&mut PartWriter, SinkError> {
        let slot = info.slot;
        if self.parts.len() <= slot {
            self.parts.resize_with(slot + 1, || None);
        }
        if self.parts[slot].is_none() {
            let lane = self.lane(Vec::new()).map_err(SinkError::config)?;
            let mut ledger = Ledger::default();
            // What an earlier run's marker says is complete past its offset.
            if let Some(marker) = self.resumed.remove(&(
                Rc::clone(&info.stream),
                Rc::clone(&info.topic),
                info.partition,
            )) {
                ledger.done = marker.done;
            }
            self.epochs += 1;
            self.parts[slot] = Some(PartWriter {
                info: Rc::clone(info),
                lanes: vec![lane],
                shared: Rc::new(Completion {
                    backoff: Cell::new(self.cfg.retry_min.0),
                    ledger: RefCell::new(ledger),
                }),
                epoch: self.epochs,
                counted: 0,
                tail: None,
                resetting: false,
            });
        }
        self.parts[slot]
            .as_mut()
            .ok_or_else(|| SinkError::permanent("partition writer missing".to_owned()))
    }

    /// A lane for objects of `split`.
    fn lane(&self, split: Vec<String>) -> Result<Lane, String> {
        let mut encoder = Encoder::new(self.cfg.format_options())?;
        // The parts in flight and the one gathering hold the chunks of that many bytes,
        // shared between the lanes a key that splits may open.
        let lanes = if self.splits {
            self.cfg.max_open_objects.max(1) as u64
        } else {
            1
        };
        encoder.keep_for_reuse(
            self.cfg
                .part_size
                .0
                .saturating_mul(self.cfg.parts_in_flight as u64 + 1)
                / lanes,
        );
        Ok(Lane {
            split,
            encoder,
            open: None,
        })
    }

    fn bucket_of(&self, m: &Message) -> Option<u64> {
        let every = self.cfg.record_interval.0.as_micros() as u64;
        (every > 0).then(|| m.timestamp / every)
    }

    /// Renders the key of the open object of `slot`'s lane `lane`.
    fn key_of(&mut self, slot: usize, lane: usize, last: Option<u64>) -> Result<String, String> {
        let Some(w) = self.parts.get(slot).and_then(Option::as_ref) else {
            return Err("no writer".to_owned());
        };
        let Some(l) = w.lanes.get(lane) else {
            return Err("no lane".to_owned());
        };
        let Some(open) = &l.open else {
            return Err("no open object".to_owned());
        };
        let ext = l.encoder.extension();
        let input = KeyInput {
            partition: &w.info,
            first: &open.first,
            last_offset: last,
            ext: &ext,
            split: self.splits.then_some(l.split.as_slice()),
        };
        self.cfg.key.render(
            &self.cfg.prefix,
            &self.cfg.time_zone,
            &input,
            &mut self.key_buf,
        )?;
        Ok(self.key_buf.clone())
    }

    /// Whether a key can be rendered for an object that `m` (of the values in `self.values`)
    /// would start in `lane`; the reason if not.
    fn probe_key(&mut self, slot: usize, lane: usize, m: &Message) -> Result<(), String> {
        let Some(w) = self.parts.get(slot).and_then(Option::as_ref) else {
            return Err("no writer".to_owned());
        };
        let Some(l) = w.lanes.get(lane) else {
            return Err("no lane".to_owned());
        };
        let ext = l.encoder.extension();
        let input = KeyInput {
            partition: &w.info,
            first: m,
            last_offset: Some(m.offset),
            ext: &ext,
            split: self.splits.then_some(self.values.as_slice()),
        };
        self.cfg.key.render(
            &self.cfg.prefix,
            &self.cfg.time_zone,
            &input,
            &mut self.key_buf,
        )?;
        if self.cfg.user_metadata.is_empty() && self.cfg.tags.is_empty() {
            return Ok(());
        }
        object_values(&self.cfg, &input).map(|_| ())
    }

    /// A message the sink cannot write (no key renders for it, the format refuses it): to
    /// `on_error`. Under `dead_letter` it is written on its own under the dead-letter prefix
    /// (settled once stored, in order with the partition's objects); otherwise it is reported
    /// failed (`skip` leaves it out, so it is settled; `fail` stops the engine, and the
    /// partition's watermark never passes it).
    fn reject(&mut self, slot: usize, m: &Message, reason: String) {
        let Some(w) = self.parts.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        let Some((prefix, encoder)) = self.dead_letter.as_mut() else {
            let mut ledger = w.shared.ledger.borrow_mut();
            if self.skip_rejects {
                ledger.handed = Some(m.offset);
            } else {
                ledger.unsettled.insert(m.offset);
            }
            self.acks
                .fail(slot, m.offset, format!("no S3 key: {reason}"));
            return;
        };
        let mut key = prefix.clone();
        for part in [&w.info.stream, &w.info.topic] {
            key::escape_into(&mut key, part);
            key.push('/');
        }
        key.push_str(&format!("{}/{:020}.json", w.info.partition, m.offset));
        encoder.begin();
        encoder.push(&w.info, m);
        let record = encoder.finish();
        let mut body = Vec::with_capacity(record.len() + reason.len() + 32);
        body.extend_from_slice(b"{\"reason\":");
        crate::json::string(&mut body, reason.as_bytes());
        body.extend_from_slice(b",\"record\":");
        body.extend_from_slice(record.strip_suffix(b"\n").unwrap_or(&record));
        body.extend_from_slice(b"}\n");
        warn!(
            sink = %self.name,
            partition = w.info.partition,
            offset = m.offset,
            "writing a rejected message to the dead-letter object {key}: {reason}"
        );
        let generation = {
            let mut ledger = w.shared.ledger.borrow_mut();
            ledger.unsettled.insert(m.offset);
            ledger.handed = Some(m.offset);
            ledger.generation
        };
        let letter = Letter {
            slot,
            epoch: w.epoch,
            generation,
            partition: w.info.partition,
            offset: m.offset,
            key,
            body: Bytes::from(body),
        };
        let previous = w.tail.take();
        w.tail = Some(monoio::spawn(dead_letter(
            self.finisher.clone(),
            Rc::clone(&w.shared),
            previous,
            letter,
        )));
    }

    /// Takes the task events (see [`S3Sink::absorb`]); then the failure no retry can mend,
    /// once: the sink stops with it.
    fn check_fatal(&mut self) -> Result<(), SinkError> {
        self.absorb(None);
        match self.fatal.take() {
            Some(e) => Err(SinkError::permanent(format!("sink {:?}: {e}", self.name))),
            None => Ok(()),
        }
    }

    /// Takes what the completion tasks reported since the last call: a failure drops its
    /// writer's open objects, a fatal failure is kept for [`S3Sink::check_fatal`]. `true`
    /// when one of them was a failure of `slot`'s writer.
    fn absorb(&mut self, slot: Option<usize>) -> bool {
        if self.finisher.events.borrow().is_empty() {
            return false;
        }
        let events = std::mem::take(&mut *self.finisher.events.borrow_mut());
        let mut hit = false;
        for event in events {
            match event {
                TaskEvent::Failed { slot: s, epoch } => {
                    if self.drop_failed(s, epoch) && slot == Some(s) {
                        hit = true;
                    }
                }
                TaskEvent::Fatal(text) => {
                    self.fatal.get_or_insert(text);
                }
            }
        }
        hit
    }

    /// A failure of writer `epoch` of `slot`: drops that writer's open objects (the partition
    /// is polled again from its watermark, before all of them). `false` when the writer is
    /// not there any more (released, made anew).
    fn drop_failed(&mut self, slot: usize, epoch: u64) -> bool {
        let Some(w) = self.parts.get_mut(slot).and_then(Option::as_mut) else {
            return false;
        };
        if w.epoch != epoch {
            return false;
        }
        // The failed object's predecessors are complete, its successors are aborted by their
        // tasks: the objects written from the redelivered offset wait for none of them.
        w.tail = None;
        w.resetting = false;
        for l in &mut w.lanes {
            if let Some(open) = l.open.take() {
                let _ = l.encoder.finish();
                if let Some(upload) = open.upload {
                    abort_detached(upload);
                }
            }
        }
        self.recount(slot);
        true
    }

    /// Counts slot's encoder output and pending chunks in the sink's total anew.
    fn recount(&mut self, slot: usize) {
        if let Some(w) = self.parts.get_mut(slot).and_then(Option::as_mut) {
            let now = w
                .lanes
                .iter()
                .map(|l| l.encoder.held() + l.open.as_ref().map_or(0, |o| o.pending_len))
                .sum();
            self.total.adjust(&mut w.counted, now);
        }
    }

    /// Moves a lane's encoder output to the pending list, then to the upload once it exceeds
    /// a part (or always, `all`).
    async fn push_pending(&mut self, slot: usize, lane: usize, all: bool) -> Result<(), Failure> {
        let part_size = self.cfg.part_size.0;
        let needs_upload = {
            let Some(l) = self.parts[slot]
                .as_mut()
                .and_then(|w| w.lanes.get_mut(lane))
            else {
                return Ok(());
            };
            let Some(open) = l.open.as_mut() else {
                return Ok(());
            };
            let out = l.encoder.take();
            self.encoded += out.len() as u64;
            if !out.is_empty() {
                open.pending_len += out.len() as u64;
                open.pending.push(out);
            }
            open.upload.is_none() && (open.pending_len > part_size || all)
        };
        if needs_upload {
            let last = self.parts[slot]
                .as_ref()
                .and_then(|w| w.open(lane))
                .map(|o| o.last_offset);
            // The key was tried when the object opened (`probe_key`): a failure now is a bug
            // no retry mends.
            let key = self.key_of(slot, lane, last).map_err(|e| Failure {
                text: format!("S3 key: {e}"),
                permanent: true,
            })?;
            let mut options = self.upload.clone();
            if let Some(w) = self.parts[slot].as_ref()
                && let Some(l) = w.lanes.get(lane)
                && let Some(o) = &l.open
            {
                options.options.metadata = vec![
                    ("stream".to_owned(), ascii(&w.info.stream)),
                    ("topic".to_owned(), ascii(&w.info.topic)),
                    ("partition".to_owned(), w.info.partition.to_string()),
                    ("first-offset".to_owned(), o.first.offset.to_string()),
                ];
                if all {
                    // Sent whole at close: the range and count are known.
                    options
                        .options
                        .metadata
                        .push(("last-offset".to_owned(), o.last_offset.to_string()));
                    options
                        .options
                        .metadata
                        .push(("messages".to_owned(), o.count.to_string()));
                }
                let ext = l.encoder.extension();
                let input = KeyInput {
                    partition: &w.info,
                    first: &o.first,
                    last_offset: None,
                    ext: &ext,
                    split: self.splits.then_some(l.split.as_slice()),
                };
                // Tried when the object opened (`probe_key`), as the key was.
                let (metadata, tags) = object_values(&self.cfg, &input).map_err(|e| Failure {
                    text: e,
                    permanent: true,
                })?;
                options.options.metadata.extend(metadata);
                options.options.tags = tags;
            }
            let writer =
                ObjectWriter::new(Rc::clone(&self.client), &self.cfg.bucket, &key, &options)
                    .map_err(|e| Failure::s3(format_args!("object {key}"), &e))?;
            if let Some(open) = self.parts[slot].as_mut().and_then(|w| w.open_mut(lane)) {
                open.upload = Some(writer);
            }
        }
        // The chunks leave the sink's count as the upload's gauge takes them up.
        let chunks = match self.parts[slot].as_mut().and_then(|w| w.open_mut(lane)) {
            Some(open) if open.upload.is_some() => {
                open.pending_len = 0;
                std::mem::take(&mut open.pending)
            }
            _ => {
                self.recount(slot);
                return Ok(());
            }
        };
        self.recount(slot);
        let Some(upload) = self.parts[slot]
            .as_mut()
            .and_then(|w| w.open_mut(lane))
            .and_then(|o| o.upload.as_mut())
        else {
            return Ok(());
        };
        for chunk in chunks {
            upload
                .append(chunk)
                .await
                .map_err(|e| Failure::s3("uploading a part", &e))?;
        }
        Ok(())
    }

    /// Closes the open object of slot's lane `lane`: the rest of the output goes to the
    /// upload, and a task completes it (CompleteMultipartUpload or PutObject), writes the
    /// marker and confirms what the partition's watermark passed, after the partition's
    /// previous object. `false` when the object failed here (the partition's open objects are
    /// then aborted and polled again).
    async fn close(&mut self, slot: usize, lane: usize) -> bool {
        let done = self.close_inner(slot, lane).await;
        self.recount(slot);
        done
    }

    async fn close_inner(&mut self, slot: usize, lane: usize) -> bool {
        if self.absorb(Some(slot)) {
            return false;
        }
        let Some(l) = self
            .parts
            .get_mut(slot)
            .and_then(Option::as_mut)
            .and_then(|w| w.lanes.get_mut(lane))
        else {
            return true;
        };
        let Some(open) = l.open.as_mut() else {
            return true;
        };
        let tail = l.encoder.finish();
        self.encoded += tail.len() as u64;
        if !tail.is_empty() {
            open.pending_len += tail.len() as u64;
            open.pending.push(tail);
        }
        if let Some(e) = l.encoder.error().map(str::to_owned) {
            // An incomplete object must not be completed.
            self.fail(slot, Failure::passing(format!("encoding the object: {e}")));
            return false;
        }
        if let Err(e) = self.push_pending(slot, lane, true).await {
            self.fail(slot, e);
            return false;
        }
        // A completion task may have failed while the output was handed over.
        if self.absorb(Some(slot)) {
            return false;
        }
        let Some(w) = self.parts.get_mut(slot).and_then(Option::as_mut) else {
            return true;
        };
        let Some(l) = w.lanes.get_mut(lane) else {
            return true;
        };
        let Some(open) = l.open.take() else {
            return true;
        };
        let Some(upload) = open.upload else {
            return true;
        };
        let job = Job {
            slot,
            epoch: w.epoch,
            generation: open.generation,
            split: l.split.clone(),
            first: open.first.offset,
            last: open.last_offset,
            count: open.count,
            marker: marker_key(
                &self.cfg.prefix,
                &self.name,
                &w.info.stream,
                &w.info.topic,
                w.info.partition,
            ),
            partition: w.info.partition,
        };
        let previous = w.tail.take();
        let shared = Rc::clone(&w.shared);
        let finisher = self.finisher.clone();
        w.tail = Some(monoio::spawn(complete(
            finisher, shared, previous, upload, job,
        )));
        true
    }

    /// Aborts the multipart uploads an earlier run left open under the prefix: those initiated
    /// before this process started (less a minute for clock skew), once per sink and process (by its first shard).
    /// Where the store cannot list uploads, says so: a lifecycle rule
    /// (AbortIncompleteMultipartUpload) must clean them up there.
    async fn abort_stale_uploads(&self) {
        use spillway_s3::actions::{abort_multipart_upload, list_multipart_uploads};
        // Only the sink's first shard sweeps (the core map says which): shards share nothing.
        if !self.lead {
            return;
        }
        let cutoff = process_start() - Duration::from_secs(60);
        let mut args = list_multipart_uploads::ListMultipartUploadsArgs {
            prefix: (!self.cfg.prefix.is_empty()).then(|| self.cfg.prefix.clone()),
            key_marker: None,
            upload_id_marker: None,
            max_uploads: None,
        };
        let mut aborted = 0;
        loop {
            let listed = match list_multipart_uploads::request(
                self.client.endpoint(),
                &self.cfg.bucket,
                &args,
            ) {
                Ok(req) => {
                    self.client
                        .execute(req, list_multipart_uploads::parse)
                        .await
                }
                Err(e) => Err(e),
            };
            let page = match listed {
                Ok(p) => p,
                Err(e) => {
                    warn!(
                        sink = %self.name,
                        "cannot list open multipart uploads to abort those an earlier run left ({e}); set a lifecycle rule (AbortIncompleteMultipartUpload) on the bucket"
                    );
                    return;
                }
            };
            for u in &page.uploads {
                let stale = u.initiated_time().is_some_and(|t| t < cutoff);
                if !stale {
                    continue;
                }
                if let Ok(req) = abort_multipart_upload::request(
                    self.client.endpoint(),
                    &self.cfg.bucket,
                    &u.key,
                    &u.upload_id,
                ) && self
                    .client
                    .execute(req, abort_multipart_upload::parse)
                    .await
                    .is_ok()
                {
                    aborted += 1;
                }
            }
            match page.next_args(&args) {
                Some(next) => args = next,
                None => break,
            }
        }
        if aborted > 0 {
            info!(sink = %self.name, "aborted {aborted} multipart uploads an earlier run left open");
        }
    }

    /// An object failed in the writer: every open object of the partition is aborted,
    /// nothing is written until the objects closed before settle, then the partition is
    /// polled again from its watermark after a backoff (see [`Finisher::failed`]).
    fn fail(&mut self, slot: usize, error: Failure) {
        let Some(w) = self.parts.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        let mut count = 0;
        for l in &mut w.lanes {
            if let Some(open) = l.open.take() {
                // The encoder may hold half an object: start it afresh.
                let _ = l.encoder.finish();
                count += open.count;
                if let Some(upload) = open.upload {
                    abort_detached(upload);
                }
            }
        }
        if !w.resetting {
            w.resetting = true;
            let previous = w.tail.take();
            let shared = Rc::clone(&w.shared);
            let finisher = self.finisher.clone();
            let (epoch, partition) = (w.epoch, w.info.partition);
            w.tail = Some(monoio::spawn(async move {
                // A failed predecessor has polled the partition again already.
                if let Some(previous) = previous
                    && !previous.await
                {
                    return false;
                }
                finisher.failed(&shared, slot, epoch, partition, count, &error);
                false
            }));
        }
        self.recount(slot);
    }

    /// The lane for a message of the values in `self.values`: the one with an open object of
    /// them, or one with none open (a new one while there are fewer than
    /// `s3.max_open_objects`). `None` when every lane has an object open.
    fn lane_for(&mut self, slot: usize) -> Result<Option<usize>, String> {
        let max = if self.splits {
            self.cfg.max_open_objects.max(1)
        } else {
            1
        };
        let Some(w) = self.parts.get(slot).and_then(Option::as_ref) else {
            return Err("no writer".to_owned());
        };
        let values = &self.values;
        if let Some(i) = w
            .lanes
            .iter()
            .position(|l| l.open.is_some() && l.split == *values)
        {
            return Ok(Some(i));
        }
        if let Some(i) = w.lanes.iter().position(|l| l.open.is_none()) {
            if let Some(l) = self.parts[slot].as_mut().and_then(|w| w.lanes.get_mut(i)) {
                l.split.clone_from(&self.values);
            }
            return Ok(Some(i));
        }
        if w.lanes.len() >= max {
            return Ok(None);
        }
        let lane = self.lane(self.values.clone())?;
        let Some(w) = self.parts[slot].as_mut() else {
            return Err("no writer".to_owned());
        };
        w.lanes.push(lane);
        Ok(Some(w.lanes.len() - 1))
    }

    /// The lane of the partition's oldest open object (the one its watermark waits for).
    fn oldest(&self, slot: usize) -> Option<(usize, u64)> {
        let w = self.parts.get(slot)?.as_ref()?;
        w.lanes
            .iter()
            .enumerate()
            .filter_map(|(i, l)| Some((i, l.open.as_ref()?.first.offset)))
            .min_by_key(|&(_, first)| first)
    }

    /// Writes `m` into the object of its values, closing it before (a new record-time
    /// interval; the object would pass `max_object_size` with `m`, where the encoder can tell
    /// exactly) or after (full) as the rotation rules say; under a key that splits, the
    /// oldest open object is closed first when `m` needs a lane and every one is open, or when
    /// the partition ran `max_split_lag` past it. `false` when an object failed: the rest of
    /// the batch is polled again.
    ///
    /// Between the check for task failures at the top of the loop and the ledger's update
    /// there is no await: a reset of the ledger (a task's failure) is always seen first.
    async fn write_message(&mut self, slot: usize, m: &Message) -> bool {
        loop {
            if self.absorb(Some(slot)) {
                return false;
            }
            let Some(w) = self.parts.get(slot).and_then(Option::as_ref) else {
                return false;
            };
            if w.resetting {
                return false;
            }
            if self.splits
                && let Err(reason) = self.cfg.key.split_values(m, &mut self.values)
            {
                self.reject(slot, m, reason);
                return true;
            }
            let settled = {
                let ledger = w.shared.ledger.borrow();
                ledger
                    .done
                    .get(&self.values)
                    .is_some_and(|&last| m.offset <= last)
            };
            if settled {
                // In a complete object already (delivered again after a failure, or after
                // a crash before the marker passed it).
                w.shared.ledger.borrow_mut().handed = Some(m.offset);
                return true;
            }
            if self.splits
                && let Some((lane, first)) = self.oldest(slot)
            {
                let lagging = m.offset.saturating_sub(first) >= self.cfg.max_split_lag;
                let marks = w.shared.ledger.borrow().done.len() > MAX_MARKS;
                if lagging || marks {
                    if !self.close(slot, lane).await {
                        return false;
                    }
                    continue;
                }
            }
            let lane = match self.lane_for(slot) {
                Ok(Some(lane)) => lane,
                Ok(None) => {
                    let Some((oldest, _)) = self.oldest(slot) else {
                        return false;
                    };
                    if !self.close(slot, oldest).await {
                        return false;
                    }
                    continue;
                }
                Err(e) => {
                    self.fail(slot, Failure::passing(e));
                    return false;
                }
            };
            let bucket = self.bucket_of(m);
            let Some(w) = self.parts[slot].as_mut() else {
                return false;
            };
            let rotate_before = w
                .open(lane)
                .is_some_and(|o| bucket.is_some() && o.bucket != bucket);
            if rotate_before {
                if !self.close(slot, lane).await {
                    return false;
                }
                continue;
            }
            let open = w.open(lane).is_some();
            let Some(l) = w.lanes.get_mut(lane) else {
                return false;
            };
            if let Err(reason) = l.encoder.admit(m) {
                if open && !self.splits {
                    // Not a record of any object: the open one is closed before it, so each
                    // object's offsets stay one range.
                    if !self.close(slot, lane).await {
                        return false;
                    }
                    continue;
                }
                self.reject(slot, m, reason);
                return true;
            }
            if !open && let Err(reason) = self.probe_key(slot, lane, m) {
                self.reject(slot, m, reason);
                return true;
            }
            let Some(w) = self.parts[slot].as_mut() else {
                return false;
            };
            let Some(l) = w.lanes.get_mut(lane) else {
                return false;
            };
            if l.open.is_none() {
                l.encoder.begin();
                let generation = {
                    let mut ledger = w.shared.ledger.borrow_mut();
                    ledger.unsettled.insert(m.offset);
                    ledger.generation
                };
                l.open = Some(Open {
                    first: Message {
                        offset: m.offset,
                        id: m.id,
                        timestamp: m.timestamp,
                        origin_timestamp: m.origin_timestamp,
                        payload: Bytes::new(),
                        headers: Bytes::copy_from_slice(&m.headers),
                    },
                    last_offset: m.offset,
                    count: 0,
                    bucket,
                    last_append: self.batch_at,
                    pending: Vec::new(),
                    pending_len: 0,
                    upload: None,
                    generation,
                });
            }
            l.encoder.push(&w.info, m);
            if l.encoder.size() > self.cfg.max_object_size.0 && l.encoder.unpush() {
                // Full without `m`: closed as it is (so it needs no part past max_object_size,
                // and one that fits a part goes out as one PutObject); `m` starts the next.
                if !self.close(slot, lane).await {
                    return false;
                }
                continue;
            }
            let output_len = l.encoder.size();
            let waiting = l.encoder.waiting();
            let Some(open) = l.open.as_mut() else {
                return false;
            };
            open.last_offset = m.offset;
            open.count += 1;
            open.last_append = self.batch_at;
            let count = open.count;
            w.shared.ledger.borrow_mut().handed = Some(m.offset);
            self.recount(slot);
            if waiting >= TAKE_AT
                && let Err(e) = self.push_pending(slot, lane, false).await
            {
                self.fail(slot, e);
                return false;
            }
            let full = output_len >= self.cfg.max_object_size.0
                || (self.cfg.max_object_messages > 0 && count >= self.cfg.max_object_messages);
            if full && !self.close(slot, lane).await {
                return false;
            }
            if let Some(fullest) = self.over_window(slot)
                && !self.close(slot, fullest).await
            {
                return false;
            }
            return true;
        }
    }

    /// Under a key that splits: when the partition's lanes together hold more than one part
    /// window (`part_size x (parts_in_flight + 1)`) of output not yet uploaded, the lane
    /// holding the most, to be closed. A lane uploads only once it holds a part, so without
    /// this many lanes could hold most of a part each, past what the shard's budget allows,
    /// and wait for messages the engine does not poll while the budget is full.
    fn over_window(&self, slot: usize) -> Option<usize> {
        if !self.splits {
            return None;
        }
        let w = self.parts.get(slot)?.as_ref()?;
        let window = self
            .cfg
            .part_size
            .0
            .saturating_mul(self.cfg.parts_in_flight as u64 + 1);
        if w.counted <= window {
            return None;
        }
        w.lanes
            .iter()
            .enumerate()
            .filter_map(|(i, l)| {
                let open = l.open.as_ref()?;
                Some((i, l.encoder.held() + open.pending_len))
            })
            .max_by_key(|&(_, held)| held)
            .map(|(i, _)| i)
    }
}

/// A closed object handed to its completion task.
struct Job {
    slot: usize,
    epoch: u64,
    /// The ledger generation it is counted in.
    generation: u64,
    /// Its split values.
    split: Vec<String>,
    partition: u32,
    first: u64,
    last: u64,
    count: u64,
    marker: String,
}

impl Finisher {
    /// An object or letter of writer `epoch` of `slot` failed after those closed before it
    /// settled: the ledger is reset, the writer drops its open objects, and the partition is
    /// polled again from the watermark after a backoff.
    fn failed(
        &self,
        shared: &Completion,
        slot: usize,
        epoch: u64,
        partition: u32,
        count: u64,
        error: &Failure,
    ) {
        let from = shared.ledger.borrow_mut().reset();
        self.events
            .borrow_mut()
            .push(TaskEvent::Failed { slot, epoch });
        self.retry(shared, slot, partition, from, count, error);
    }

    /// A failure: the partition is polled again from `first` after a backoff.
    fn retry(
        &self,
        shared: &Completion,
        slot: usize,
        partition: u32,
        first: u64,
        count: u64,
        error: &Failure,
    ) {
        self.failures.set(self.failures.get() + 1);
        if error.permanent {
            self.events.borrow_mut().push(TaskEvent::Fatal(format!(
                "S3 refused an upload for good, so the sink stops (nothing past offset {first} of partition {partition} is committed): {}",
                error.text
            )));
            return;
        }
        let backoff = shared.backoff.get();
        let wait = backoff.mul_f64(0.5 + fastrand::f64());
        shared.backoff.set((backoff * 2).min(self.retry_max));
        warn!(
            sink = %self.sink,
            partition,
            first_offset = first,
            "S3 upload failed, its {count} messages stay unconfirmed and the partition is written again from offset {first} in about {}: {}",
            Rounded(wait),
            error.text
        );
        self.acks.redeliver_at(slot, first, Instant::now() + wait);
    }

    /// Records that everything of a partition up to `last` is in complete objects (or
    /// settled otherwise), and past it, per set of split values, the last offset of its
    /// newest complete object.
    async fn write_marker(&self, key: &str, marker: &Marker, object: &str) -> Result<(), Failure> {
        let body = marker.to_json(object);
        let options = &self.small;
        let req = spillway_s3::actions::put_object::request(
            self.client.endpoint(),
            &self.bucket,
            key,
            spillway_s3::request::Body::from(Bytes::from(body)),
            options,
        )
        .map_err(|e| Failure::s3(format_args!("marker {key}"), &e))?;
        self.client
            .execute(req, spillway_s3::actions::put_object::parse)
            .await
            .map(|_| ())
            .map_err(|e| Failure::s3(format_args!("writing the marker {key}"), &e))
    }
}

/// Completes one object after the partition's previous one: the upload's last part and
/// CompleteMultipartUpload (or its PutObject), then the marker with the partition's new
/// watermark (first: once the offsets are confirmed they may be committed, and a crash before
/// that commit must not make a replay cut different objects), then what the watermark passed
/// is confirmed. On failure the partition is polled again from its watermark; an object after
/// a failed one is aborted (the failed one's redelivery covers it). `true` when the object is
/// complete.
async fn complete(
    f: Finisher,
    shared: Rc<Completion>,
    previous: Option<JoinHandle<bool>>,
    upload: ObjectWriter,
    job: Job,
) -> bool {
    if let Some(previous) = previous
        && !previous.await
    {
        let _ = upload.abort().await;
        return false;
    }
    let result = match upload.close().await {
        Ok(info) => {
            let marker = {
                let mut ledger = shared.ledger.borrow_mut();
                if ledger.generation == job.generation {
                    ledger.unsettled.remove(&job.first);
                    let last = ledger.done.entry(job.split.clone()).or_insert(job.last);
                    *last = (*last).max(job.last);
                    ledger.prune();
                }
                Marker::of(&ledger, job.last)
            };
            f.write_marker(&job.marker, &marker, &info.key)
                .await
                .map(|()| info)
        }
        Err(e) => Err(Failure::s3("completing the object", &e)),
    };
    match result {
        Ok(info) => {
            debug!(sink = %f.sink, key = %info.key, size = info.size, first = job.first, last = job.last, count = job.count, "object complete");
            shared.backoff.set(f.retry_min);
            shared.ledger.borrow_mut().advance(&f.acks, job.slot);
            true
        }
        Err(e) => {
            f.failed(&shared, job.slot, job.epoch, job.partition, job.count, &e);
            false
        }
    }
}

/// A rejected message on its way to the dead-letter prefix.
struct Letter {
    slot: usize,
    epoch: u64,
    generation: u64,
    partition: u32,
    offset: u64,
    key: String,
    body: Bytes,
}

/// Writes a dead letter after the partition's previous object or letter (so the partition's
/// marker, which the objects after it move, never passes a letter not yet stored), then
/// confirms its offset. On failure the partition is polled again from the letter's offset, as
/// for a failed object. `true` when the letter is stored.
async fn dead_letter(
    f: Finisher,
    shared: Rc<Completion>,
    previous: Option<JoinHandle<bool>>,
    letter: Letter,
) -> bool {
    if let Some(previous) = previous
        && !previous.await
    {
        return false;
    }
    let options = &f.small;
    let put = match spillway_s3::actions::put_object::request(
        f.client.endpoint(),
        &f.bucket,
        &letter.key,
        spillway_s3::request::Body::from(letter.body),
        options,
    ) {
        Ok(req) => f
            .client
            .execute(req, spillway_s3::actions::put_object::parse)
            .await
            .map(|_| ())
            .map_err(|e| Failure::s3(format_args!("dead letter {}", letter.key), &e)),
        Err(e) => Err(Failure::s3(format_args!("dead letter {}", letter.key), &e)),
    };
    match put {
        Ok(()) => {
            let mut ledger = shared.ledger.borrow_mut();
            if ledger.generation == letter.generation {
                ledger.unsettled.remove(&letter.offset);
            }
            ledger.advance(&f.acks, letter.slot);
            true
        }
        Err(e) => {
            f.failed(&shared, letter.slot, letter.epoch, letter.partition, 1, &e);
            false
        }
    }
}

/// Abandons an upload in a task (its parts under way are awaited there); its bytes stay in the
/// sink's total until they are released.
fn abort_detached(upload: ObjectWriter) {
    monoio::spawn(async move {
        let _ = upload.abort().await;
    });
}

/// When the first S3 sink of this process was built: uploads initiated before it belong to an
/// earlier run.
fn process_start() -> std::time::SystemTime {
    static START: std::sync::OnceLock<std::time::SystemTime> = std::sync::OnceLock::new();
    *START.get_or_init(std::time::SystemTime::now)
}

/// The key of the marker that records the last offset of `partition` written in a complete
/// object, under the sink's prefix (one per sink and partition).
fn marker_key(prefix: &str, sink: &str, stream: &str, topic: &str, partition: u32) -> String {
    let mut k = String::from(prefix);
    k.push_str(".spillway/");
    for part in [sink, stream, topic] {
        key::escape_into(&mut k, part);
        k.push('/');
    }
    k.push_str(&format!("{partition}.json"));
    k
}

/// A partition's marker: the watermark, and past it the last offset of the newest complete
/// object of each set of split values.
#[derive(Debug, Default, PartialEq, Eq)]
struct Marker {
    last: Option<u64>,
    done: HashMap<Vec<String>, u64>,
}

impl Marker {
    /// What the ledger says now (`newest`: the last offset of the object just complete).
    fn of(ledger: &Ledger, newest: u64) -> Marker {
        #[cfg(debug_assertions)]
        if std::env::var_os("SPILLWAY_FAULT_SPLIT_MARKER_FROM_NEWEST_OBJECT").is_some() {
            // A fault for the tests to show what this guards against: the marker taken from
            // the newest object alone passes offsets still in other open objects.
            return Marker {
                last: Some(newest),
                done: HashMap::new(),
            };
        }
        let _ = newest;
        let last = ledger.watermark();
        let done = ledger
            .done
            .iter()
            .filter(|&(_, &o)| last.is_none_or(|w| o > w))
            .map(|(v, &o)| (v.clone(), o))
            .collect();
        Marker { last, done }
    }

    /// `{"last_offset": N or null, "object": KEY, "split": [{"values": [...], "last_offset": N}]}`
    /// (`split` only when there are marks), sorted so that equal markers are equal bytes.
    fn to_json(&self, object: &str) -> Vec<u8> {
        let mut body = Vec::with_capacity(128);
        body.extend_from_slice(b"{\"last_offset\":");
        match self.last {
            Some(o) => body.extend_from_slice(o.to_string().as_bytes()),
            None => body.extend_from_slice(b"null"),
        }
        body.extend_from_slice(b",\"object\":");
        crate::json::string(&mut body, object.as_bytes());
        if !self.done.is_empty() {
            let mut marks: Vec<_> = self.done.iter().collect();
            marks.sort();
            body.extend_from_slice(b",\"split\":[");
            for (i, (values, last)) in marks.into_iter().enumerate() {
                if i > 0 {
                    body.push(b',');
                }
                body.extend_from_slice(b"{\"values\":[");
                for (j, v) in values.iter().enumerate() {
                    if j > 0 {
                        body.push(b',');
                    }
                    crate::json::string(&mut body, v.as_bytes());
                }
                body.extend_from_slice(format!("],\"last_offset\":{last}}}").as_bytes());
            }
            body.push(b']');
        }
        body.push(b'}');
        body
    }
}

/// Reads a marker body (see [`Marker::to_json`]).
fn parse_marker(body: &[u8]) -> Result<Marker, String> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let last = match &v["last_offset"] {
        serde_json::Value::Null if v.get("last_offset").is_some() => None,
        o => Some(o.as_u64().ok_or_else(|| "no last_offset".to_owned())?),
    };
    let mut done = HashMap::new();
    if let Some(split) = v.get("split") {
        let marks = split
            .as_array()
            .ok_or_else(|| "split is not a list".to_owned())?;
        for mark in marks {
            let values = mark["values"]
                .as_array()
                .and_then(|vs| {
                    vs.iter()
                        .map(|v| v.as_str().map(str::to_owned))
                        .collect::<Option<Vec<_>>>()
                })
                .ok_or_else(|| "a split mark without its values (strings)".to_owned())?;
            let last = mark["last_offset"]
                .as_u64()
                .ok_or_else(|| "a split mark without its last_offset".to_owned())?;
            done.insert(values, last);
        }
    }
    Ok(Marker { last, done })
}

/// User metadata values must be printable ASCII.
/// The object's `s3.user_metadata` (values made printable ASCII, as S3 requires) and
/// `s3.tags`, rendered for the object `input` begins.
type Pairs = Vec<(String, String)>;
fn object_values(cfg: &S3SinkConfig, input: &KeyInput<'_>) -> Result<(Pairs, Pairs), String> {
    let render = |which: &str, map: &std::collections::BTreeMap<String, ValueTemplate>| {
        map.iter()
            .map(|(name, t)| {
                t.render(&cfg.time_zone, input)
                    .map(|v| (name.clone(), v))
                    .map_err(|e| format!("s3.{which}.{name}: {e}"))
            })
            .collect::<Result<Vec<_>, String>>()
    };
    let metadata = render("user_metadata", &cfg.user_metadata)?
        .into_iter()
        .map(|(k, v)| (k, ascii(&v)))
        .collect();
    let tags = render("tags", &cfg.tags)?;
    Ok((metadata, tags))
}

fn ascii(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

impl S3Sink {
    /// HeadBucket with the sink's endpoint, credentials and TLS: a missing bucket, wrong
    /// credentials or a wrong region is found before anything is polled (`spillway check
    /// --connect` runs it alone). What was seen, or the problem.
    pub async fn probe(&self) -> Result<String, SinkError> {
        if let Some(chain) = &self.chain {
            // The first set of credentials from the chain (resolved on its own thread).
            let deadline = Instant::now() + self.cfg.request_timeout.0;
            while !self.client.has_credentials() {
                if Instant::now() >= deadline {
                    return Err(SinkError::permanent(format!(
                        "S3 bucket {:?}: no credentials within s3.request_timeout ({}): {}",
                        self.cfg.bucket,
                        self.cfg.request_timeout,
                        chain.error().unwrap_or_else(|| {
                            "the AWS credential chain has not answered".to_owned()
                        })
                    )));
                }
                monoio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let req =
            spillway_s3::actions::head_bucket::request(self.client.endpoint(), &self.cfg.bucket)
                .map_err(|e| SinkError::permanent(format!("s3: {e}")))?;
        self.client
            .execute(req, spillway_s3::actions::head_bucket::parse)
            .await
            .map_err(|e| {
                SinkError::permanent(format!(
                    "S3 bucket {:?} at {}: {e}",
                    self.cfg.bucket,
                    self.client.endpoint().authority()
                ))
            })?;
        Ok(format!(
            "bucket {:?} at {} reachable (HeadBucket)",
            self.cfg.bucket,
            self.client.endpoint().authority()
        ))
    }
}

impl Sink for S3Sink {
    async fn start(&mut self) -> Result<(), SinkError> {
        self.probe().await?;
        info!(sink = %self.name, bucket = %self.cfg.bucket, "S3 bucket reachable");
        self.abort_stale_uploads().await;
        Ok(())
    }

    async fn resume(
        &mut self,
        stream: &str,
        topic: &str,
        partition: u32,
    ) -> Result<Option<u64>, SinkError> {
        let key = marker_key(&self.cfg.prefix, &self.name, stream, topic, partition);
        let req = spillway_s3::actions::get_object::request(
            self.client.endpoint(),
            &self.cfg.bucket,
            &key,
            None,
            &self.upload.options,
        )
        .map_err(|e| SinkError::permanent(format!("marker {key}: {e}")))?;
        match self
            .client
            .execute(req, spillway_s3::actions::get_object::parse)
            .await
        {
            Ok(out) => {
                let marker = parse_marker(&out.body).map_err(|e| SinkError::permanent(format!("the marker {key} is damaged ({e}); delete it to start from Iggy's stored offset")))?;
                if !marker.done.is_empty() {
                    self.resumed.insert(
                        (Rc::from(stream), Rc::from(topic), partition),
                        Marker {
                            last: marker.last,
                            done: marker.done,
                        },
                    );
                }
                Ok(marker.last)
            }
            Err(spillway_s3::Error::S3(e)) if e.status == 404 => Ok(None),
            Err(e) => Err(SinkError::permanent(format!(
                "reading the marker {key}: {e}"
            ))),
        }
    }

    async fn deliver(&mut self, batch: Batch) -> Result<(), SinkError> {
        self.check_fatal()?;
        let info = Rc::clone(&batch.partition);
        let slot = info.slot;
        self.batch_at = Instant::now();
        self.writer(&info)?;
        for m in &batch.messages {
            if !self.write_message(slot, m).await {
                // An object failed: the rest of the batch is polled again.
                return Ok(());
            }
        }
        let lanes = self.parts[slot].as_ref().map_or(0, |w| w.lanes.len());
        for lane in 0..lanes {
            if let Err(e) = self.push_pending(slot, lane, false).await {
                self.fail(slot, e);
                return Ok(());
            }
        }
        // Messages settled without an object (already complete, skipped) move the watermark.
        if let Some(w) = self.parts[slot].as_ref()
            && !w.resetting
        {
            w.shared.ledger.borrow_mut().advance(&self.acks, slot);
        }
        Ok(())
    }

    async fn tick(&mut self) -> Result<(), SinkError> {
        self.check_fatal()?;
        let idle = self.cfg.idle_flush.0;
        let now = Instant::now();
        let due: Vec<(usize, usize)> = self
            .parts
            .iter()
            .enumerate()
            .filter_map(|(slot, w)| Some((slot, w.as_ref()?)))
            .flat_map(|(slot, w)| {
                w.lanes.iter().enumerate().filter_map(move |(lane, l)| {
                    let open = l.open.as_ref()?;
                    (!idle.is_zero() && now.saturating_duration_since(open.last_append) >= idle)
                        .then_some((slot, lane))
                })
            })
            .collect();
        for (slot, lane) in due {
            self.close(slot, lane).await;
            // Gone idle: its encoder keeps no buffers for reuse.
            if let Some(l) = self.parts[slot]
                .as_mut()
                .and_then(|w| w.lanes.get_mut(lane))
            {
                l.encoder.release_spare();
            }
        }
        Ok(())
    }

    fn tick_interval(&self) -> Duration {
        let idle = self.cfg.idle_flush.0;
        if idle.is_zero() {
            Duration::from_secs(1)
        } else {
            (idle / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
        }
    }

    async fn drain(&mut self, deadline: Instant) -> Result<(), SinkError> {
        self.check_fatal()?;
        for slot in 0..self.parts.len() {
            let lanes = self.parts[slot].as_ref().map_or(0, |w| w.lanes.len());
            for lane in 0..lanes {
                // A close below may have let another partition's failure in.
                self.absorb(None);
                let Some(w) = self.parts[slot].as_mut() else {
                    continue;
                };
                if w.open(lane).is_none() {
                    continue;
                }
                match self.cfg.on_shutdown {
                    OnShutdown::Flush if Instant::now() < deadline => {
                        self.close(slot, lane).await;
                    }
                    _ => {
                        if let Some(l) = w.lanes.get_mut(lane)
                            && let Some(open) = l.open.take()
                        {
                            let _ = l.encoder.finish();
                            // Left for the next run: the engine need not wait for these offsets.
                            self.acks.redeliver(slot, open.first.offset);
                            if let Some(upload) = open.upload {
                                abort_detached(upload);
                            }
                        }
                        self.recount(slot);
                    }
                }
            }
        }
        // The completions run on; the engine waits for their confirmations until the deadline.
        Ok(())
    }

    fn release(&mut self, slot: usize) {
        if let Some(w) = self.parts.get_mut(slot).and_then(Option::take) {
            self.total.sub(w.counted);
            for l in w.lanes {
                if let Some(open) = l.open
                    && let Some(upload) = open.upload
                {
                    abort_detached(upload);
                }
            }
        }
    }

    fn status(&self) -> SinkStatus {
        let stats = self.client.stats();
        let open = self.parts.iter().flatten().map(|w| w.opens().count());
        SinkStatus {
            reconnects: 0,
            retries: self.finisher.failures.get(),
            requests: stats.attempts,
            in_flight_peak: 0,
            buffered_peak: self.total.peak(),
            encoded_bytes: self.encoded,
            uploaded_bytes: stats.body_bytes,
            objects_open: open.sum::<usize>() as u64,
            buffered_bytes: self.total.current(),
        }
    }

    fn paced_by_memory(&self) -> bool {
        true
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
