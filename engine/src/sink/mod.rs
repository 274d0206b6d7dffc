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

use std::time::{Duration, Instant};

pub use file::FileSink;
pub use mqtt::MqttSink;
pub use s3::S3Sink;

use crate::acks::{Acks, SinkStatus};
use crate::config::{SinkConfig, SinkType};
use crate::error::EngineError;
use crate::ids::{Offset, PartitionId, Slot};
use crate::message::Batch;

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
    fn release(&mut self, slot: Slot);
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
        _partition: PartitionId,
    ) -> Result<Option<Offset>, EngineError> {
        Ok(None)
    }
    /// The objects the sink is writing now, by slot (S3), for the operator's `/status`.
    fn open_objects(&self, _out: &mut Vec<(Slot, OpenObject)>) {}
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
    fn release(&mut self, slot: Slot) {
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
        partition: PartitionId,
    ) -> Result<Option<Offset>, EngineError> {
        match self {
            AnySink::File(s) => s.resume(stream, topic, partition).await,
            AnySink::Mqtt(s) => s.resume(stream, topic, partition).await,
            AnySink::S3(s) => s.resume(stream, topic, partition).await,
        }
    }
    fn open_objects(&self, out: &mut Vec<(Slot, OpenObject)>) {
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
