//! What a runner counts for the shard's reporter.

use std::time::Instant;

use crate::metrics::{PartitionGauge, SinkCounters, SinkReport, latency_histogram};

/// Where a sink is, as `/status` and `/ready` show it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum SinkState {
    /// Connecting to Iggy and taking up its partitions for the first time.
    #[default]
    Starting,
    /// Polling and delivering.
    Running,
    /// Paused by the operator: no polls; what is in flight confirms and is stored.
    Paused,
    /// Draining for a shutdown: no polls, finishing what it holds.
    Draining,
    /// Failed for good: the engine drains and exits non-zero.
    Failed,
    /// Ended (drained, or its bounded source is done).
    Stopped,
}

impl SinkState {
    /// The name `/status` uses.
    pub fn name(self) -> &'static str {
        match self {
            SinkState::Starting => "starting",
            SinkState::Running => "running",
            SinkState::Paused => "paused",
            SinkState::Draining => "draining",
            SinkState::Failed => "failed",
            SinkState::Stopped => "stopped",
        }
    }

    /// Every state, in the order the dashboard lists them.
    pub const ALL: [SinkState; 6] = [
        SinkState::Starting,
        SinkState::Running,
        SinkState::Paused,
        SinkState::Draining,
        SinkState::Failed,
        SinkState::Stopped,
    ];
}

/// Where the link to the source is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SourceState {
    /// Not connected (waiting to connect again).
    #[default]
    Down,
    /// Connecting and logging in.
    Connecting,
    /// Logged in (for a local source: always).
    Up,
}

impl SourceState {
    /// The name `/status` uses.
    pub fn name(self) -> &'static str {
        match self {
            SourceState::Down => "down",
            SourceState::Connecting => "connecting",
            SourceState::Up => "connected",
        }
    }
}

/// Statistics of one runner, read by the shard when it reports.
#[derive(Debug)]
pub struct RunnerStats {
    /// Counters.
    pub counters: SinkCounters,
    /// Per slot.
    pub partitions: Vec<Option<PartitionGauge>>,
    /// Latency since the last report.
    pub latency: hdrhistogram::Histogram<u64>,
    /// Unconfirmed messages / bytes.
    pub in_flight: (u64, u64),
    /// Where the sink is.
    pub state: SinkState,
    /// Where its link to the source is.
    pub source: SourceState,
    /// The sink cannot reach its destination right now (see [`crate::acks::SinkStatus`]).
    pub sink_failing: bool,
    /// The newest error (source or sink, transient ones included) and when it came.
    pub last_error: Option<(Instant, String)>,
    /// The consumer group's generation of this member's assignment.
    pub generation: Option<u64>,
}

impl RunnerStats {
    pub(crate) fn new() -> RunnerStats {
        RunnerStats {
            counters: SinkCounters::default(),
            partitions: Vec::new(),
            latency: latency_histogram(),
            in_flight: (0, 0),
            state: SinkState::Starting,
            source: SourceState::Down,
            sink_failing: false,
            last_error: None,
            generation: None,
        }
    }

    /// A report, resetting the latency interval; times are told as wall-clock times, `now`
    /// being `wall`.
    pub fn report(&mut self, sink: usize, now: Instant, wall: std::time::SystemTime) -> SinkReport {
        let latency = std::mem::replace(&mut self.latency, latency_histogram());
        let last_error = self.last_error.as_ref().map(|(at, text)| {
            let ago = now.saturating_duration_since(*at);
            (wall.checked_sub(ago).unwrap_or(wall), text.clone())
        });
        SinkReport {
            state: self.state,
            source: self.source,
            sink_failing: self.sink_failing,
            last_error,
            generation: self.generation,
            sink,
            counters: self.counters,
            in_flight: self.in_flight.0,
            partitions: self.partitions.iter().flatten().cloned().collect(),
            latency,
        }
    }
}
