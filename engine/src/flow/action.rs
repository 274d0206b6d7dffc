//! What the flow answers with, and what a partition's opening reports back.

use std::time::Instant;

use super::{Offset, PartitionId, Slot};
use crate::error::EngineError;

/// What the flow asks the runner to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Connect to Iggy and check the stream and topic (and, in explicit mode, that the
    /// partitions exist). Answer: [`Flow::handle_connected`].
    Connect,
    /// Join the consumer group. Answer: [`Flow::handle_joined`].
    JoinGroup,
    /// Fetch the group assignment. Answer: [`Flow::handle_assignment`], or
    /// [`Flow::handle_not_member`].
    SyncGroup,
    /// Keep the session alive. Answer: [`Flow::handle_source_ok`].
    Ping,
    /// Take up a partition: read its stored offset (and its head when `need_head`), ask the
    /// sink how far it already got. Answer: [`Flow::handle_opened`].
    Open {
        /// The partition.
        partition: PartitionId,
        /// `start = "latest"`: the partition's head is needed when nothing is stored.
        need_head: bool,
    },
    /// Store `offset` as the consumer offset of `partition`. Answer: [`Flow::handle_stored`],
    /// [`Flow::handle_store_refused`] when the group took the partition away, or
    /// [`Flow::handle_store_deferred`] when the server cannot take it yet.
    Store {
        /// The runner's slot.
        slot: Slot,
        /// The partition.
        partition: PartitionId,
        /// The watermark.
        offset: Offset,
    },
    /// Poll up to `count` messages of `partition` from `offset`, and hand them to
    /// [`Flow::handle_polled`] (or [`Flow::handle_fenced`]); deliver what it keeps.
    Poll {
        /// The runner's slot.
        slot: Slot,
        /// The partition.
        partition: PartitionId,
        /// First offset.
        offset: Offset,
        /// At most this many.
        count: u32,
    },
    /// Tell the sink `slot` is no longer its (nothing in flight, all stored). No answer.
    Release(Slot),
    /// Run the sink's time-driven work. No answer (a failure: [`Flow::handle_sink_error`]).
    TickSink,
    /// The operator asked the paused sink to flush: have it finish what it holds (its
    /// confirmations come as usual). No answer (a failure: [`Flow::handle_sink_error`]).
    FlushSink,
    /// Tell the sink to finish what it holds by `deadline`. Answer:
    /// [`Flow::handle_sink_drained`].
    DrainSink {
        /// The shutdown deadline.
        deadline: Instant,
    },
    /// Nothing to do before `until`, or before the sink reports. No answer.
    Wait {
        /// Latest wake-up.
        until: Instant,
    },
    /// The runner is done: leave the group, end with this.
    Stop(Result<(), EngineError>),
}

/// What a partition's opening found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Opened {
    /// The consumer offset Iggy has stored.
    pub stored: Option<Offset>,
    /// The last offset the sink says it already wrote for good (an S3 marker).
    pub sink_done: Option<Offset>,
    /// The partition's head, when asked for and the partition is not empty: its last offset.
    pub head: Option<Offset>,
}
