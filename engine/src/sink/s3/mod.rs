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

mod complete;
pub mod format;
mod janitor;
mod ledger;
mod marker;
mod ownership;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use monoio::task::JoinHandle;
use spillway_s3::client::{ClientConfig, S3Client};
use spillway_s3::credentials::Credentials;
use spillway_s3::options::{CannedAcl, Condition, ObjectOptions, Sse};
use spillway_s3::upload::{Gauge, ObjectWriter, UploadConfig};
use tracing::{debug, info, warn};

use self::complete::{Job, Letter, abort_detached, complete, dead_letter};
use self::format::{Encoder, FormatOptions};
use self::janitor::process_start;
use self::ledger::{Claim, Ledger, Place};
use self::marker::{Fence, Marker, marker_key};
use super::{Acks, Sink, SinkError, SinkStatus};
use crate::config::{
    AclKind, ChecksumKind, ConditionalWrites, CredentialSource, ErrorPolicy, OnShutdown,
    S3SinkConfig, SinkConfig, SseKind,
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
    /// The marker's claim this object writes (its key and range are fixed: it closes at
    /// the claim's last offset and at no other rotation).
    claim: Option<Claim>,
    /// The key, once the upload began.
    key: Option<String>,
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

/// What a partition's completion tasks share with its writer.
struct Completion {
    /// The next backoff after a failure (doubles up to `retry_max`, reset by a success).
    backoff: Cell<Duration>,
    ledger: RefCell<Ledger>,
    /// This member's hold on the partition's marker.
    fence: RefCell<Fence>,
    /// Completion tasks waiting for the one before them: while one waits, a completed
    /// object's marker write is left to that one's claim, which carries it.
    queued: Cell<u64>,
    /// The writer was released (its partition taken away, or it was dropped after it was
    /// fenced): its tasks finish, but ask for no redelivery of what the slot holds now.
    retired: Cell<bool>,
}

/// What a completion task tells the sink.
#[derive(Debug, Clone, PartialEq, Eq)]
enum TaskEvent {
    /// An object (or dead letter) of the writer `epoch` of partition `slot` failed: the
    /// partition is being polled again from its watermark, so that writer's open objects are
    /// dropped. A writer released and made anew has another epoch: the event is not its.
    Failed { slot: usize, epoch: u64 },
    /// Another member took the partition of writer `epoch` of `slot` over in the store: the
    /// writer is dropped (the task asked for the partition to be delivered again, taken over
    /// anew first).
    Fenced { slot: usize, epoch: u64 },
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
    /// `s3.conditional_writes = "require"`: objects are written once (`If-None-Match: *`)
    /// and the marker only over the version this member wrote last (`If-Match`).
    fencing: bool,
}

/// The encoder's output is handed to the upload at the end of each batch, and within a batch
/// once this much waits: a chunk is then less than this plus one message, which keeps the
/// part window's slack small (see `buffered`) while most chunks carry many messages.
const TAKE_AT: u64 = 64 << 10;

/// Under a key that splits, the most sets of values a partition's marker carries past its
/// watermark (each with the last offset of its newest complete object); past it the oldest
/// open object is closed, which lets the watermark move.
const MAX_MARKS: usize = 1024;

/// A partition by stream, topic and id.
type PartKey = (Rc<str>, Rc<str>, u32);

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
    /// The markers of the partitions taken over, with this member's hold on each, until
    /// their writers take them.
    resumed: HashMap<PartKey, (Marker, Fence)>,
    /// The owner id this sink writes into markers.
    owner: String,
    /// The slots whose writers were fenced: taken over again before their next delivery.
    retake: std::collections::HashSet<usize>,
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
        let fencing = cfg.conditional_writes == ConditionalWrites::Require;
        if !fencing && lead && config.consumer_group.is_some() {
            warn!(
                sink = %config.name,
                "s3.conditional_writes = \"off\" in a consumer group: when a partition changes \
                 hands while its old owner is still alive (a pause, a cut from Iggy, a member \
                 leaving), the old owner's late upload may replace its successor's object"
            );
        }
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
            condition: fencing.then_some(Condition::Absent),
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
            fencing,
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
            owner: marker::owner_id(shard),
            retake: Default::default(),
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
            // What the marker this member took the partition over with says is complete
            // past its watermark, and which ranges are claimed.
            let taken = self.resumed.remove(&(
                Rc::clone(&info.stream),
                Rc::clone(&info.topic),
                info.partition,
            ));
            let fence = match taken {
                Some((marker, fence)) => {
                    ledger.done = marker.done;
                    ledger.claims = marker.claims;
                    ledger.floor = marker.last;
                    ledger.prune();
                    fence
                }
                // Not taken over (a writer dropped after it was fenced is taken over again
                // before its partition is delivered): the first conditional write of the
                // marker finds out.
                None => Fence {
                    owner: self.owner.clone(),
                    epoch: 0,
                    etag: None,
                },
            };
            self.epochs += 1;
            self.parts[slot] = Some(PartWriter {
                info: Rc::clone(info),
                lanes: vec![lane],
                shared: Rc::new(Completion {
                    backoff: Cell::new(self.cfg.retry_min.0),
                    ledger: RefCell::new(ledger),
                    fence: RefCell::new(fence),
                    queued: Cell::new(0),
                    retired: Cell::new(false),
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
        if let Some(claim) = &open.claim {
            // A claimed range is written under the key the marker records.
            return Ok(claim.key.clone());
        }
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
                TaskEvent::Fenced { slot: s, epoch } => {
                    if self.drop_fenced(s, epoch) && slot == Some(s) {
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

    /// Writer `epoch` of `slot` was fenced: it is dropped with its open objects (nothing it
    /// holds may be completed). `false` when the writer is not there any more.
    fn drop_fenced(&mut self, slot: usize, epoch: u64) -> bool {
        if !self.drop_failed(slot, epoch) {
            return false;
        }
        self.release(slot);
        self.retake.insert(slot);
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
                open.key = Some(key);
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
        let key = open.key.clone().unwrap_or_else(|| upload.key().to_owned());
        let job = Job {
            slot,
            epoch: w.epoch,
            generation: open.generation,
            claim: Claim {
                first: open.first.offset,
                last: open.last_offset,
                values: l.split.clone(),
                key,
            },
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
        shared.queued.set(shared.queued.get() + 1);
        let finisher = self.finisher.clone();
        w.tail = Some(monoio::spawn(complete(
            finisher, shared, previous, upload, job,
        )));
        true
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
    /// `s3.max_open_objects`, or past it when `force`d: a claimed range must be written
    /// whole). `None` when every lane has an object open.
    fn lane_for(&mut self, slot: usize, force: bool) -> Result<Option<usize>, String> {
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
        if w.lanes.len() >= max && !force {
            return Ok(None);
        }
        let lane = self.lane(self.values.clone())?;
        let Some(w) = self.parts[slot].as_mut() else {
            return Err("no writer".to_owned());
        };
        w.lanes.push(lane);
        Ok(Some(w.lanes.len() - 1))
    }

    /// The lane of the partition's oldest open object that may be closed early (the one its
    /// watermark waits for; an object of a claimed range closes only at its end).
    fn oldest(&self, slot: usize) -> Option<(usize, u64)> {
        let w = self.parts.get(slot)?.as_ref()?;
        w.lanes
            .iter()
            .enumerate()
            .filter_map(|(i, l)| {
                let open = l.open.as_ref()?;
                open.claim.is_none().then_some((i, open.first.offset))
            })
            .min_by_key(|&(_, first)| first)
    }

    /// Writes `m` into the object of its values, closing it before (a new record-time
    /// interval; the object would pass `max_object_size` with `m`, where the encoder can tell
    /// exactly) or after (full) as the rotation rules say; under a key that splits, the
    /// oldest open object is closed first when `m` needs a lane and every one is open, or when
    /// the partition ran `max_split_lag` past it. A message in a range the marker claims goes
    /// into that claim's object, which closes at the claim's last offset and at no other
    /// rule. `false` when an object failed: the rest of the batch is polled again.
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
            // The open object of these values, and the claim it writes.
            let current = w
                .lanes
                .iter()
                .position(|l| l.open.is_some() && l.split == self.values);
            let place = w.shared.ledger.borrow().place(
                &self.values,
                m.offset,
                current.map(|i| w.open(i).and_then(|o| o.claim.as_ref())),
            );
            let claim = match place {
                Place::Settled => {
                    // In a complete object already (delivered again after a failure, or
                    // after a crash or a takeover before the marker passed it).
                    w.shared.ledger.borrow_mut().handed = Some(m.offset);
                    return true;
                }
                Place::CloseOpen => {
                    let Some(lane) = current else {
                        return false;
                    };
                    debug!(sink = %self.name, partition = w.info.partition, offset = m.offset, "closing an object at the edge of a claimed range");
                    if !self.close(slot, lane).await {
                        return false;
                    }
                    continue;
                }
                Place::Claim(c) => Some(c),
                Place::Free => None,
            };
            if claim.is_none()
                && self.splits
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
            let lane = match self.lane_for(slot, claim.is_some()) {
                Ok(Some(lane)) => lane,
                Ok(None) => {
                    let Some((oldest, _)) = self.oldest(slot) else {
                        // Every open object writes a claimed range: one more lane.
                        match self.lane_for(slot, true) {
                            Ok(Some(_)) => continue,
                            _ => return false,
                        }
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
            let rotate_before = claim.is_none()
                && w.open(lane)
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
                if open && !self.splits && claim.is_none() {
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
                    claim: claim.clone(),
                    key: None,
                });
            }
            l.encoder.push(&w.info, m);
            if claim.is_none()
                && l.encoder.size() > self.cfg.max_object_size.0
                && l.encoder.unpush()
            {
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
            let full = match &claim {
                Some(c) => m.offset >= c.last,
                None => {
                    output_len >= self.cfg.max_object_size.0
                        || (self.cfg.max_object_messages > 0
                            && count >= self.cfg.max_object_messages)
                }
            };
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
                open.claim
                    .is_none()
                    .then_some((i, l.encoder.held() + open.pending_len))
            })
            .max_by_key(|&(_, held)| held)
            .map(|(i, _)| i)
    }
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
        self.probe_conditional_writes().await?;
        self.abort_stale_uploads().await;
        Ok(())
    }

    async fn resume(
        &mut self,
        stream: &str,
        topic: &str,
        partition: u32,
    ) -> Result<Option<u64>, SinkError> {
        self.take_over(stream, topic, partition).await
    }

    async fn deliver(&mut self, batch: Batch) -> Result<(), SinkError> {
        self.check_fatal()?;
        let info = Rc::clone(&batch.partition);
        let slot = info.slot;
        self.batch_at = Instant::now();
        if self.retake.contains(&slot) {
            // Fenced before: this member still holds the partition in Iggy, so it takes it
            // over again in the store (or tries later).
            if let Err(e) = self
                .take_over(&info.stream, &info.topic, info.partition)
                .await
            {
                let Some(first) = batch.messages.first().map(|m| m.offset) else {
                    return Ok(());
                };
                let wait = self.cfg.retry_max.0;
                warn!(sink = %self.name, partition = info.partition, "taking the partition over again failed, trying again from offset {first} in {}: {e}", Rounded(wait));
                self.acks.redeliver_at(slot, first, Instant::now() + wait);
                return Ok(());
            }
            self.retake.remove(&slot);
        }
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
                    // An object of a claimed range waits for the range's end.
                    (open.claim.is_none()
                        && !idle.is_zero()
                        && now.saturating_duration_since(open.last_append) >= idle)
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
                let Some(open) = w.open(lane) else {
                    continue;
                };
                // An object of a claimed range is written whole or not at all: one cut short
                // is left to the next owner, as `leave` does.
                let whole = open.claim.is_none();
                match self.cfg.on_shutdown {
                    OnShutdown::Flush if whole && Instant::now() < deadline => {
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
        self.retake.remove(&slot);
        if let Some(w) = self.parts.get_mut(slot).and_then(Option::take) {
            w.shared.retired.set(true);
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

#[cfg(test)]
mod sim;
