//! What the flow is configured with: the shard budget it shares, how it paces polling, where
//! messages come from, and the sink's settings it acts on.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use super::{Offset, PartitionId};
use crate::config::{ErrorPolicy, SinkConfig, StartFrom};

/// The shard's memory budget, shared by its runners: polled, unconfirmed payload bytes of the
/// windowed sinks plus the bytes the self-paced sinks (S3) hold.
#[derive(Debug)]
pub struct Budget {
    held: Cell<u64>,
    limit: u64,
}

impl Budget {
    /// A budget of `limit` bytes, nothing held.
    pub fn new(limit: u64) -> Rc<Budget> {
        Rc::new(Budget {
            held: Cell::new(0),
            limit,
        })
    }

    /// What is held now.
    #[cfg(test)]
    pub fn held(&self) -> u64 {
        self.held.get()
    }

    /// `runtime.shard_memory_budget`.
    #[cfg(test)]
    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub(super) fn add(&self, n: u64) {
        self.held.set(self.held.get().saturating_add(n));
    }

    pub(super) fn sub(&self, n: u64) {
        self.held.set(self.held.get().saturating_sub(n));
    }

    pub(super) fn has_room(&self) -> bool {
        self.held.get() < self.limit
    }
}

/// How polling is paced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pacing {
    /// By each partition's window of polled, unconfirmed messages and bytes (MQTT, file).
    Windows,
    /// By the bytes the sink says it holds, against the shard budget (S3: an object confirms
    /// all its messages at once, so a window would have to hold a whole object).
    SinkBuffered,
}

/// Where the messages come from.
#[derive(Debug, Clone)]
pub enum SourcePlan {
    /// A source that is always there (the demo generator): these partitions, each with the
    /// offset it ends at (exclusive; `None`: never).
    Local(Vec<(PartitionId, Option<Offset>)>),
    /// An Iggy server.
    Iggy(IggyPlan),
}

/// How the Iggy link is kept.
#[derive(Debug, Clone)]
pub struct IggyPlan {
    /// The partitions to poll; empty for a consumer-group member.
    pub explicit: Vec<PartitionId>,
    /// A consumer-group member: partitions come from the group's assignment.
    pub group: bool,
    /// First wait before reconnecting (doubles up to `reconnect_max`).
    pub reconnect_min: Duration,
    /// Longest wait before reconnecting.
    pub reconnect_max: Duration,
    /// A ping after this long without a request.
    pub ping_interval: Duration,
    /// How often a group member fetches its assignment.
    pub sync_interval: Duration,
}

/// What the flow needs of the sink's config.
#[derive(Debug, Clone)]
pub struct FlowConfig {
    /// The sink's name, for messages.
    pub name: String,
    /// Stream name, for partition infos and messages.
    pub stream: Rc<str>,
    /// Topic name.
    pub topic: Rc<str>,
    /// Messages per poll.
    pub batch_size: u32,
    /// Wait after an empty poll.
    pub poll_interval: Duration,
    /// Unconfirmed messages per partition.
    pub window_messages: u32,
    /// Unconfirmed payload bytes per partition.
    pub window_bytes: u64,
    /// Store at least this often while the watermark moves.
    pub commit_interval: Duration,
    /// Store after this many confirmations.
    pub commit_every: u64,
    /// What a rejected message does.
    pub on_error: ErrorPolicy,
    /// Where a partition without a stored offset starts.
    pub start: StartFrom,
    /// Windows or the sink's own bytes.
    pub pacing: Pacing,
    /// How often the sink's time-driven work runs.
    pub tick_interval: Duration,
    /// The source.
    pub source: SourcePlan,
    /// A seed for the reconnect jitter (tests replay with it).
    pub seed: u64,
}

impl FlowConfig {
    /// The flow of sink `cfg` reading `(stream, topic)` from `source`, paced by `pacing`, its
    /// sink ticked every `tick_interval`; the jitter seeded afresh.
    pub fn of_sink(
        cfg: &SinkConfig,
        (stream, topic): (Rc<str>, Rc<str>),
        pacing: Pacing,
        tick_interval: Duration,
        source: SourcePlan,
    ) -> FlowConfig {
        FlowConfig {
            name: cfg.name.clone(),
            stream,
            topic,
            batch_size: cfg.batch_size,
            poll_interval: cfg.poll_interval.0,
            window_messages: cfg.window_messages,
            window_bytes: cfg.window_bytes.0,
            commit_interval: cfg.commit_interval.0,
            commit_every: cfg.commit_every,
            on_error: cfg.on_error,
            start: cfg.start,
            pacing,
            tick_interval,
            source,
            seed: fastrand::u64(..),
        }
    }
}
