//! The sink interface.
//!
//! A sink lives on one shard, per sink config: it receives [`Batch`]es of one partition in
//! offset order and later reports, through its [`Acks`], an outcome for every offset it was
//! given: confirmed (delivered for good: PUBACK, PUBCOMP, a completed S3 object, a written
//! line), failed for good (with a reason, handled by the sink's `on_error` policy), or to be
//! redelivered (the sink dropped it; the engine polls again from that offset). Outcomes may
//! come in any order and from any task of the shard; the engine commits to Iggy only the
//! contiguous low watermark of confirmed offsets. A batch polled before the engine took a
//! redelivery of its partition is never delivered (the flow drops it), so a sink need not
//! look for one.

mod file;
pub mod mqtt;
pub mod s3;

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

pub use file::FileSink;
pub use mqtt::MqttSink;
pub use s3::S3Sink;

use crate::config::{SinkConfig, SinkType};
use crate::error::EngineError;
use crate::message::Batch;

/// What happened to offsets `first..=last` of a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Delivered for good.
    Confirmed,
    /// Rejected for good; the reason goes to the error policy and the log.
    Failed(String),
    /// Dropped by the sink: poll again from `first` (everything after it too), not before
    /// `not_before` when the sink asks for a backoff.
    Redeliver {
        /// No poll of the partition before this.
        not_before: Option<Instant>,
    },
    /// The sink gave the partition up (another writer took it over in the sink's own store):
    /// the engine drops everything it polled of it and, if it still holds the partition,
    /// takes it up anew, not before `not_before`: from Iggy's stored offset and what the
    /// sink's `resume` finds, as for a partition newly assigned. The sink reports nothing
    /// more for the slot after this (the engine may give the slot to another partition once
    /// it released it).
    Reopen {
        /// No reopening before this.
        not_before: Option<Instant>,
    },
}

/// One report from a sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    /// `PartitionInfo::slot` of the batch.
    pub slot: usize,
    /// First offset.
    pub first: u64,
    /// Last offset (inclusive).
    pub last: u64,
    /// What happened.
    pub outcome: Outcome,
}

#[derive(Default)]
struct AcksInner {
    queue: RefCell<Vec<Ack>>,
    waker: Cell<Option<Waker>>,
    /// A self-paced sink's bytes held, as last reported.
    held: Cell<u64>,
    /// `held` changed since the engine took it.
    held_fresh: Cell<bool>,
    /// `held` fell since the engine took it (room may have opened: the engine is woken).
    freed: Cell<bool>,
    /// The newest trouble the sink noted and the engine has not taken yet (for `/status`).
    trouble: RefCell<Option<String>>,
}

/// The channel from a sink (and its tasks) to the engine: shard-local, no locks.
#[derive(Clone, Default)]
pub struct Acks {
    inner: Rc<AcksInner>,
}

impl std::fmt::Debug for Acks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acks")
            .field("queued", &self.inner.queue.borrow().len())
            .field("held", &self.inner.held.get())
            .finish()
    }
}

impl Acks {
    /// A new, empty channel.
    pub fn new() -> Acks {
        Acks::default()
    }

    fn push(&self, ack: Ack) {
        self.inner.queue.borrow_mut().push(ack);
        if let Some(w) = self.inner.waker.take() {
            w.wake();
        }
    }

    /// Offsets `first..=last` of partition `slot` are delivered.
    pub fn confirm(&self, slot: usize, first: u64, last: u64) {
        self.push(Ack {
            slot,
            first,
            last,
            outcome: Outcome::Confirmed,
        });
    }

    /// Offset `offset` of partition `slot` is rejected for good.
    pub fn fail(&self, slot: usize, offset: u64, reason: impl Into<String>) {
        self.push(Ack {
            slot,
            first: offset,
            last: offset,
            outcome: Outcome::Failed(reason.into()),
        });
    }

    /// Partition `slot` must be delivered again from `from` on.
    pub fn redeliver(&self, slot: usize, from: u64) {
        self.push(Ack {
            slot,
            first: from,
            last: u64::MAX,
            outcome: Outcome::Redeliver { not_before: None },
        });
    }

    /// Partition `slot` must be delivered again from `from` on, not before `at` (a backoff:
    /// the engine polls its other partitions meanwhile).
    pub fn redeliver_at(&self, slot: usize, from: u64, at: Instant) {
        self.push(Ack {
            slot,
            first: from,
            last: u64::MAX,
            outcome: Outcome::Redeliver {
                not_before: Some(at),
            },
        });
    }

    /// Partition `slot` is given up by the sink: the engine takes it up anew (see
    /// [`Outcome::Reopen`]), not before `at`.
    pub fn reopen_at(&self, slot: usize, at: Instant) {
        self.push(Ack {
            slot,
            first: 0,
            last: u64::MAX,
            outcome: Outcome::Reopen {
                not_before: Some(at),
            },
        });
    }

    /// A self-paced sink's bytes held now (see [`Sink::paced_by_memory`]), reported after
    /// every change, from the sink or its tasks. A fall wakes the engine: polling paused for
    /// the shard's budget may go on.
    pub fn hold(&self, bytes: u64) {
        let before = self.inner.held.replace(bytes);
        self.inner.held_fresh.set(true);
        if bytes < before {
            self.inner.freed.set(true);
            if let Some(w) = self.inner.waker.take() {
                w.wake();
            }
        }
    }

    /// The bytes held, when they changed since the last call.
    pub fn take_held(&self) -> Option<u64> {
        self.inner.freed.set(false);
        self.inner
            .held_fresh
            .replace(false)
            .then(|| self.inner.held.get())
    }

    /// Notes a problem with the destination that the sink works around (a connection lost, an
    /// upload tried again) for the operator's `/status`: the newest one is kept until the
    /// engine takes it. Its log line is the sink's own.
    pub fn trouble(&self, what: impl Into<String>) {
        *self.inner.trouble.borrow_mut() = Some(what.into());
    }

    /// The newest trouble noted since the last call.
    pub fn take_trouble(&self) -> Option<String> {
        self.inner.trouble.borrow_mut().take()
    }

    /// Moves the queued reports into `out`.
    pub fn drain_into(&self, out: &mut Vec<Ack>) {
        out.append(&mut self.inner.queue.borrow_mut());
    }

    /// Whether reports are waiting.
    pub fn is_empty(&self) -> bool {
        self.inner.queue.borrow().is_empty()
    }

    /// Resolves once a report is queued or the bytes held fell.
    pub fn ready(&self) -> AcksReady<'_> {
        AcksReady { acks: self }
    }
}

/// See [`Acks::ready`].
#[derive(Debug)]
pub struct AcksReady<'a> {
    acks: &'a Acks,
}

impl Future for AcksReady<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if !self.acks.is_empty() || self.acks.inner.freed.get() {
            return Poll::Ready(());
        }
        self.acks.inner.waker.set(Some(cx.waker().clone()));
        Poll::Pending
    }
}

/// What every sink implements. Shard-local: futures need not be `Send`.
#[allow(async_fn_in_trait)]
pub trait Sink {
    /// Checks the destination before anything is polled (connects, probes).
    async fn start(&mut self) -> Result<(), EngineError>;
    /// Takes a batch; the outcome of each offset comes later through the sink's [`Acks`].
    async fn deliver(&mut self, batch: Batch) -> Result<(), EngineError>;
    /// Time-driven work (flushes, rotation); called about every [`Sink::tick_interval`].
    async fn tick(&mut self) -> Result<(), EngineError>;
    /// How often [`Sink::tick`] wants to run.
    fn tick_interval(&self) -> Duration {
        Duration::from_millis(100)
    }
    /// Stops taking messages and finishes (and reports) what it holds, until `deadline`.
    async fn drain(&mut self, deadline: Instant) -> Result<(), EngineError>;
    /// Partition `slot` is no longer this sink's (consumer-group rebalance): forget what is
    /// held for it without reporting.
    fn release(&mut self, slot: usize);
    /// The sink's own figures for the metrics.
    fn status(&self) -> SinkStatus {
        SinkStatus::default()
    }
    /// Before partition `partition` of `stream`/`topic` is polled: the last offset the sink
    /// knows it has already written for good, when that may be past what Iggy has stored (an
    /// S3 sink's marker: its object completed but the offset commit did not happen). The
    /// engine then starts after it.
    async fn resume(
        &mut self,
        _stream: &str,
        _topic: &str,
        _partition: u32,
    ) -> Result<Option<u64>, EngineError> {
        Ok(None)
    }
    /// The objects the sink is writing now, by slot (S3), for the operator's `/status`.
    fn open_objects(&self, _out: &mut Vec<(usize, OpenObject)>) {}
    /// The operator asked a paused sink to flush: finish what it holds (an S3 sink completes
    /// its open objects) and report it, then go on taking messages once resumed.
    async fn flush(&mut self) -> Result<(), EngineError> {
        Ok(())
    }
    /// Whether the sink confirms late and in bulk (an S3 object confirms all its messages
    /// when it is complete) and reports the bytes it holds through [`Acks::hold`] after each
    /// change. The engine then paces polling by that figure against
    /// `runtime.shard_memory_budget` instead of by the per-partition windows, which would
    /// otherwise have to hold a whole object. `false`: paced by the windows.
    fn paced_by_memory(&self) -> bool {
        false
    }
}

/// An object a sink is writing (S3), as `/status` shows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenObject {
    /// Its first offset.
    pub first_offset: u64,
    /// Its last offset so far.
    pub last_offset: u64,
    /// Messages in it so far.
    pub messages: u64,
    /// Output bytes so far (uploaded parts and what waits for the next one).
    pub bytes: u64,
}

/// What a sink reports about its destination.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkStatus {
    /// The destination cannot be reached right now: an MQTT connection is down, or the store
    /// failed the last upload and it is being tried again.
    pub failing: bool,
    /// Reconnects to the destination so far.
    pub reconnects: u64,
    /// Failed requests tried again so far (S3: objects polled again after a failure).
    pub retries: u64,
    /// Requests sent to the destination so far, retries included (S3).
    pub requests: u64,
    /// Most messages in flight at once on one connection.
    pub in_flight_peak: u64,
    /// Most bytes the sink held at once (encoded output waiting or uploading: S3).
    pub buffered_peak: u64,
    /// S3: output bytes encoded so far.
    pub encoded_bytes: u64,
    /// S3: body bytes of requests the store answered with success so far.
    pub uploaded_bytes: u64,
    /// S3: objects open now (being written or uploaded).
    pub objects_open: u64,
    /// S3: bytes held now (encoded output waiting or uploading).
    pub buffered_bytes: u64,
}

/// Every sink type, for static dispatch.
#[derive(Debug)]
pub enum AnySink {
    /// JSON lines to a file or standard output.
    File(FileSink),
    /// An MQTT broker.
    Mqtt(MqttSink),
    /// An S3-compatible object store (boxed: it is much larger than the others).
    S3(Box<S3Sink>),
}

/// Builds the sink of `config` for shard `shard`; `lead` on the first shard the sink runs on
/// (it does the sink's once-per-process work).
pub fn build(
    config: &SinkConfig,
    shard: usize,
    lead: bool,
    acks: Acks,
) -> Result<AnySink, EngineError> {
    match config.kind {
        SinkType::File | SinkType::Stdout => Ok(AnySink::File(FileSink::new(config, shard, acks)?)),
        SinkType::Mqtt => Ok(AnySink::Mqtt(MqttSink::new(config, shard, acks)?)),
        SinkType::S3 => Ok(AnySink::S3(Box::new(S3Sink::new(
            config, shard, lead, acks,
        )?))),
    }
}

impl Sink for AnySink {
    async fn start(&mut self) -> Result<(), EngineError> {
        match self {
            AnySink::File(s) => s.start().await,
            AnySink::Mqtt(s) => s.start().await,
            AnySink::S3(s) => s.start().await,
        }
    }
    async fn deliver(&mut self, batch: Batch) -> Result<(), EngineError> {
        match self {
            AnySink::File(s) => s.deliver(batch).await,
            AnySink::Mqtt(s) => s.deliver(batch).await,
            AnySink::S3(s) => s.deliver(batch).await,
        }
    }
    async fn tick(&mut self) -> Result<(), EngineError> {
        match self {
            AnySink::File(s) => s.tick().await,
            AnySink::Mqtt(s) => s.tick().await,
            AnySink::S3(s) => s.tick().await,
        }
    }
    fn tick_interval(&self) -> Duration {
        match self {
            AnySink::File(s) => s.tick_interval(),
            AnySink::Mqtt(s) => s.tick_interval(),
            AnySink::S3(s) => s.tick_interval(),
        }
    }
    async fn drain(&mut self, deadline: Instant) -> Result<(), EngineError> {
        match self {
            AnySink::File(s) => s.drain(deadline).await,
            AnySink::Mqtt(s) => s.drain(deadline).await,
            AnySink::S3(s) => s.drain(deadline).await,
        }
    }
    fn release(&mut self, slot: usize) {
        match self {
            AnySink::File(s) => s.release(slot),
            AnySink::Mqtt(s) => s.release(slot),
            AnySink::S3(s) => s.release(slot),
        }
    }
    fn status(&self) -> SinkStatus {
        match self {
            AnySink::File(s) => s.status(),
            AnySink::Mqtt(s) => s.status(),
            AnySink::S3(s) => s.status(),
        }
    }
    async fn resume(
        &mut self,
        stream: &str,
        topic: &str,
        partition: u32,
    ) -> Result<Option<u64>, EngineError> {
        match self {
            AnySink::File(s) => s.resume(stream, topic, partition).await,
            AnySink::Mqtt(s) => s.resume(stream, topic, partition).await,
            AnySink::S3(s) => s.resume(stream, topic, partition).await,
        }
    }
    fn open_objects(&self, out: &mut Vec<(usize, OpenObject)>) {
        if let AnySink::S3(s) = self {
            s.open_objects(out);
        }
    }
    async fn flush(&mut self) -> Result<(), EngineError> {
        match self {
            AnySink::S3(s) => s.flush().await,
            _ => Ok(()),
        }
    }
    fn paced_by_memory(&self) -> bool {
        match self {
            AnySink::File(s) => s.paced_by_memory(),
            AnySink::Mqtt(s) => s.paced_by_memory(),
            AnySink::S3(s) => s.paced_by_memory(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready_now(acks: &Acks) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        let mut ready = acks.ready();
        Pin::new(&mut ready).poll(&mut cx).is_ready()
    }

    /// What a self-paced sink holds reaches the engine when it changes; a fall ends the
    /// engine's wait (polling paused for the budget may go on), a rise does not.
    #[test]
    fn held_bytes_are_taken_when_changed_and_a_fall_wakes_the_engine() {
        let acks = Acks::new();
        assert_eq!(acks.take_held(), None);
        acks.hold(1_000);
        assert!(!ready_now(&acks), "more held: nothing to wake for");
        assert_eq!(acks.take_held(), Some(1_000));
        assert_eq!(acks.take_held(), None, "taken once");
        acks.hold(400);
        assert!(ready_now(&acks), "bytes freed end the wait");
        assert_eq!(acks.take_held(), Some(400));
        assert!(!ready_now(&acks), "and are taken with the figure");
        acks.confirm(0, 0, 0);
        assert!(ready_now(&acks));
    }
}
