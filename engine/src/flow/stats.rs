//! What a runner counts for the shard's reporter.

use crate::metrics::{PartitionGauge, SinkCounters, SinkReport, latency_histogram};

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
}

impl RunnerStats {
    pub(crate) fn new() -> RunnerStats {
        RunnerStats {
            counters: SinkCounters::default(),
            partitions: Vec::new(),
            latency: latency_histogram(),
            in_flight: (0, 0),
        }
    }

    /// A report, resetting the latency interval.
    pub fn report(&mut self, sink: usize) -> SinkReport {
        let latency = std::mem::replace(&mut self.latency, latency_histogram());
        SinkReport {
            sink,
            counters: self.counters,
            in_flight: self.in_flight.0,
            in_flight_bytes: self.in_flight.1,
            partitions: self.partitions.iter().flatten().cloned().collect(),
            latency,
        }
    }
}
