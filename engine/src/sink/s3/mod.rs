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
mod failure;
pub mod format;
mod janitor;
mod keys;
mod ledger;
mod marker;
mod objects;
mod ownership;
mod rewind;
mod setup;
pub(crate) mod table;
mod upload;
mod writer;

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
use self::failure::{retry_logger, s3_failure};
use self::format::{Encoder, FormatOptions};
use self::janitor::process_start;
use self::keys::{ascii, object_values};
use self::ledger::{Claim, Ledger};
use self::marker::{Fence, Marker, marker_key};
use self::objects::{LaneState, OpenState, Rules};
pub use self::rewind::MarkerState;
use self::writer::{Completion, Finisher, Open, PartWriter, TaskEvent, TaskEvents};
use super::Sink;
use crate::acks::{Acks, SinkStatus};
use crate::config::{
    AclKind, ChecksumKind, ConditionalWrites, CredentialSource, ErrorPolicy, OnShutdown,
    S3SinkConfig, SinkConfig, SseKind,
};
use crate::error::EngineError;
use crate::ids::{Offset, PartitionId, Slot};
use crate::message::{Batch, Message, PartitionInfo};
use crate::template::key::{self, KeyInput, ValueTemplate};

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
    /// The placement and rotation rules.
    rules: Rules,
    /// The values of the message being written.
    values: Vec<String>,
    /// `on_error = "skip"`: a rejected message is settled at once.
    skip_rejects: bool,
    /// The markers of the partitions taken over, with this member's hold on each, until
    /// their writers take them.
    resumed: HashMap<PartKey, (Marker, Fence)>,
    /// The owner id this sink writes into markers.
    owner: String,
    /// The slots whose writers were fenced, until the engine releases them (it takes their
    /// partitions up anew): what is delivered to them meanwhile is dropped unconfirmed.
    gave_up: std::collections::HashSet<usize>,
    /// When the batch being delivered came (the lanes' idle clock).
    batch_at: Instant,
    /// The per-message lines of dead letters (a few a second, then a count).
    dead_letter_log: RefCell<crate::ratelog::RateLimit>,
    /// `[sink.s3.iceberg]`: where the table's data files go (known once the sink started).
    data_prefix: Option<String>,
    /// `[sink.s3.iceberg]`: the lease each partition was taken up with.
    leases: HashMap<u32, u64>,
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

impl S3Sink {
    /// Writes `m` into the object of its values, closing objects before it or after it as the
    /// placement and rotation rules say ([`objects`]); the encoder adds one rule of its own: a
    /// message that would take an object past `max_object_size` (where the encoder can tell
    /// exactly) closes it before the message. `false` when an object failed: the rest of the
    /// batch is polled again.
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
            // The message's time for its key and the record-time rotation: from the message
            // itself, so a replay cuts the same objects under the same keys.
            let time = match self.cfg.time_source.micros(m) {
                Ok(t) => t,
                Err(reason) => {
                    self.reject(slot, m, reason);
                    return true;
                }
            };
            let bucket = self.bucket_at(time);
            let step = objects::step(
                &self.rules,
                &w.lanes,
                &w.shared.ledger.borrow(),
                &self.values,
                m.offset,
                bucket,
            );
            let (lane, claim) = match step {
                objects::Step::Settled => {
                    // In a complete object already (delivered again after a failure, or
                    // after a crash or a takeover before the marker passed it).
                    w.shared.ledger.borrow_mut().handed = Some(m.offset);
                    return true;
                }
                objects::Step::Close(lane) => {
                    if !self.close(slot, lane).await {
                        return false;
                    }
                    continue;
                }
                objects::Step::NewLane => {
                    let lane = match self.lane(self.values.clone()) {
                        Ok(lane) => lane,
                        Err(e) => {
                            self.fail(slot, EngineError::transient(e));
                            return false;
                        }
                    };
                    let Some(w) = self.parts[slot].as_mut() else {
                        return false;
                    };
                    w.lanes.push(lane);
                    continue;
                }
                objects::Step::Write { lane, claim } => (lane, claim),
            };
            let Some(w) = self.parts[slot].as_mut() else {
                return false;
            };
            let open = w.open(lane).is_some();
            let Some(l) = w.lanes.get_mut(lane) else {
                return false;
            };
            if !open {
                l.split.clone_from(&self.values);
            }
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
                        // The time the key's fields are of (`s3.time_source`).
                        timestamp: time,
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
            if objects::over_size(&self.rules, claim.as_ref(), l.encoder.size())
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
            let full = objects::full(&self.rules, claim.as_ref(), m.offset, output_len, count);
            if full && !self.close(slot, lane).await {
                return false;
            }
            let fullest = self.parts[slot]
                .as_ref()
                .and_then(|w| objects::over_window(&self.rules, &w.lanes, w.counted));
            if let Some(fullest) = fullest
                && !self.close(slot, fullest).await
            {
                return false;
            }
            return true;
        }
    }
}

impl Sink for S3Sink {
    async fn start(&mut self) -> Result<(), EngineError> {
        self.probe().await?;
        info!(sink = %self.name, bucket = %self.cfg.bucket, "S3 bucket reachable");
        self.probe_conditional_writes().await?;
        if let Some(table) = &self.finisher.table {
            let path = table.open().await?;
            info!(sink = %self.name, prefix = %path.prefix, "Iceberg table open; its data files go under the prefix");
            self.data_prefix = Some(path.prefix);
        }
        self.abort_stale_uploads().await;
        Ok(())
    }

    async fn resume(
        &mut self,
        stream: &str,
        topic: &str,
        partition: PartitionId,
    ) -> Result<Option<Offset>, EngineError> {
        if self.finisher.table.is_some() {
            return Ok(self.take_up_from_table(partition.0).await?.map(Offset));
        }
        let done = self.take_over(stream, topic, partition.0).await?;
        Ok(done.map(Offset))
    }

    async fn deliver(&mut self, batch: Batch) -> Result<(), EngineError> {
        self.check_fatal()?;
        let info = Rc::clone(&batch.partition);
        let slot = info.slot.0;
        self.batch_at = Instant::now();
        if self.gave_up.contains(&slot) {
            // Fenced: the engine drops the partition and takes it up anew.
            return Ok(());
        }
        self.writer(&info)?;
        for m in &batch.messages {
            if !self.write_message(slot, m).await {
                // Not written: an object failed, or the writer waits for the objects before a
                // failed one to settle (its task asks for the partition again from the
                // watermark). The rest of the batch is delivered again, and the partition
                // rests meanwhile: a source that answers at once (`generate`) would otherwise
                // be polled on and on, every message held unconfirmed by the engine.
                let wait = self.parts[slot]
                    .as_ref()
                    .map_or(self.cfg.retry_min.0, |w| w.shared.backoff.get().step());
                self.acks
                    .redeliver_at(info.slot, Offset(m.offset), Instant::now() + wait);
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

    async fn tick(&mut self) -> Result<(), EngineError> {
        self.check_fatal()?;
        let now = Instant::now();
        let due: Vec<(usize, usize)> = self
            .parts
            .iter()
            .enumerate()
            .filter_map(|(slot, w)| Some((slot, w.as_ref()?)))
            .flat_map(|(slot, w)| {
                objects::idle(&self.rules, &w.lanes, now)
                    .into_iter()
                    .map(move |lane| (slot, lane))
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

    async fn drain(&mut self, deadline: Instant) -> Result<(), EngineError> {
        if let Some(n) = self.dead_letter_log.borrow_mut().due(Instant::now(), true) {
            warn!(
                sink = %self.name,
                "{n} more rejected messages went to dead-letter objects without a line of their \
                 own (a few a second are logged one by one)"
            );
        }
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
                            self.acks.redeliver(Slot(slot), Offset(open.first.offset));
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

    fn release(&mut self, slot: Slot) {
        let slot = slot.0;
        self.gave_up.remove(&slot);
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

    fn open_objects(&self, out: &mut Vec<(Slot, super::OpenObject)>) {
        for (slot, w) in self.parts.iter().enumerate() {
            let Some(w) = w else { continue };
            for open in w.opens() {
                out.push((
                    Slot(slot),
                    super::OpenObject {
                        first_offset: open.first.offset,
                        last_offset: open.last_offset,
                        messages: open.count,
                        bytes: open.upload.as_ref().map_or(0, ObjectWriter::size)
                            + open.pending_len,
                    },
                ));
            }
        }
    }

    async fn flush(&mut self) -> Result<(), EngineError> {
        self.check_fatal()?;
        for slot in 0..self.parts.len() {
            let lanes = self.parts[slot].as_ref().map_or(0, |w| w.lanes.len());
            for lane in 0..lanes {
                self.absorb(None);
                let Some(open) = self.parts[slot].as_ref().and_then(|w| w.open(lane)) else {
                    continue;
                };
                // An object of a claimed range closes at the claim's last offset only.
                if open.claim.is_none() {
                    self.close(slot, lane).await;
                }
            }
        }
        self.check_fatal()
    }

    fn status(&self) -> SinkStatus {
        let stats = self.client.stats();
        let open = self.parts.iter().flatten().map(|w| w.opens().count());
        SinkStatus {
            failing: self.finisher.failing.get(),
            reconnects: 0,
            retries: self.finisher.failures.get(),
            requests: stats.attempts,
            in_flight_peak: 0,
            buffered_peak: self.total.peak(),
            encoded_bytes: self.encoded,
            uploaded_bytes: stats.body_bytes,
            objects_open: open.sum::<usize>() as u64,
            buffered_bytes: self.total.current(),
            ..self.table_status()
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
