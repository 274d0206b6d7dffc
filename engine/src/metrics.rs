//! Counters and latency of each sink on each shard, the reports shards send to the control
//! thread, and the Prometheus text rendering of the merged view.

use std::fmt::Write as _;
use std::time::Instant;

use crossbeam_queue::{ArrayQueue, SegQueue};
use hdrhistogram::Histogram;

/// Poll-to-confirm latency in microseconds, up to an hour, 3 significant digits.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3)
        .unwrap_or_else(|_| Histogram::new(3).unwrap_or_else(|_| unreachable_histogram()))
}

#[allow(clippy::panic)]
fn unreachable_histogram() -> Histogram<u64> {
    // The bounds above are valid constants; hdrhistogram only refuses invalid bounds.
    panic!("hdrhistogram refused constant bounds")
}

/// Monotonic counters of one sink on one shard.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkCounters {
    /// Messages polled from the source.
    pub messages_in: u64,
    /// Their payload bytes.
    pub bytes_in: u64,
    /// Messages handed to the sink.
    pub messages_out: u64,
    /// Their payload bytes.
    pub bytes_out: u64,
    /// Messages the sink confirmed.
    pub confirmed: u64,
    /// Their payload bytes.
    pub confirmed_bytes: u64,
    /// Messages the sink rejected for good.
    pub failed: u64,
    /// Of those, skipped by `on_error = "skip"`.
    pub skipped: u64,
    /// Messages the sink dropped and asked to get again.
    pub redelivered: u64,
    /// Offsets stored in Iggy.
    pub commits: u64,
    /// Reconnects to the source.
    pub reconnects: u64,
    /// Reconnects of the sink to its destination (e.g. the MQTT broker).
    pub sink_reconnects: u64,
    /// Sink requests that failed and are being tried again (S3 objects and dead letters polled
    /// again after a failure).
    pub sink_retries: u64,
    /// Requests the sink sent to its destination, retries included (S3: every attempt).
    pub sink_requests: u64,
    /// Most messages the sink had in flight at once on one connection (MQTT: QoS 1/2
    /// packet ids).
    pub sink_in_flight_peak: u64,
    /// Most bytes the sink held at once (S3: encoded output waiting or uploading).
    pub sink_buffered_peak: u64,
    /// S3: output bytes encoded so far.
    pub sink_encoded_bytes: u64,
    /// S3: body bytes the store answered with success so far.
    pub sink_uploaded_bytes: u64,
    /// S3: objects open now (a gauge).
    pub sink_objects_open: u64,
    /// S3: bytes held now (a gauge).
    pub sink_buffered_bytes: u64,
    /// Iceberg: snapshots committed, the data files they added, commit attempts tried again.
    pub sink_table_commits: u64,
    pub sink_table_files: u64,
    pub sink_table_retries: u64,
}

/// One partition of one sink on one shard.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionGauge {
    /// Stream.
    pub stream: String,
    /// Topic.
    pub topic: String,
    /// Partition id.
    pub partition: u32,
    /// Last offset stored in Iggy.
    pub committed: Option<u64>,
    /// The partition's current offset, as the last poll saw it.
    pub head: Option<u64>,
    /// Polled, unconfirmed messages.
    pub in_flight: u64,
    /// The last offset polled (or known done when the partition was taken up).
    pub polled: Option<u64>,
    /// The last offset up to which everything is confirmed.
    pub confirmed: Option<u64>,
    /// The objects being written (S3).
    pub objects: Vec<crate::sink::OpenObject>,
}

impl PartitionGauge {
    /// Messages in the partition after the committed offset.
    pub fn lag(&self) -> u64 {
        match (self.head, self.committed) {
            (Some(h), Some(c)) => h.saturating_sub(c),
            (Some(h), None) => h + 1,
            _ => 0,
        }
    }
}

/// What a shard reports about one sink.
#[derive(Debug, Clone)]
pub struct SinkReport {
    /// Index into `config.sinks`.
    pub sink: usize,
    /// Counters since start.
    pub counters: SinkCounters,
    /// Polled, unconfirmed messages.
    pub in_flight: u64,
    /// Per partition.
    pub partitions: Vec<PartitionGauge>,
    /// Latencies recorded since the previous report.
    pub latency: Histogram<u64>,
    /// Where the sink is on this shard.
    pub state: crate::flow::SinkState,
    /// Where its link to the source is.
    pub source: crate::flow::SourceState,
    /// Its destination cannot be reached right now.
    pub sink_failing: bool,
    /// The newest error and its wall-clock time.
    pub last_error: Option<(std::time::SystemTime, String)>,
    /// The consumer group's generation of the assignment.
    pub generation: Option<u64>,
}

/// Messages from a shard to the control thread.
#[derive(Debug)]
pub enum Report {
    /// Periodic statistics.
    Stats {
        /// Shard number.
        shard: usize,
        /// Counts the shard's reports: the control thread keeps the newest, whichever queue
        /// brought it first.
        seq: u64,
        /// One per sink on the shard.
        sinks: Vec<SinkReport>,
    },
    /// A sink stopped with an error: the engine drains and exits non-zero.
    Fatal {
        /// Shard number.
        shard: usize,
        /// What happened, naming the sink.
        message: String,
        /// How the process should end.
        class: crate::error::ErrorClass,
    },
    /// The shard is done (all its sinks finished or stopped).
    Finished {
        /// Shard number.
        shard: usize,
    },
}

/// The shards' way up to the control thread: two lock-free queues that never block a shard.
///
/// Periodic statistics go into a bounded queue and are dropped when it is full (their counters
/// are cumulative, so the next report makes good). What must arrive (a fatal error, the final
/// statistics, the end of a shard) goes into an unbounded queue and is never dropped: there are
/// at most a few such reports per runner and shard over a whole run, so it stays small.
#[derive(Debug)]
pub struct Reports {
    stats: ArrayQueue<Report>,
    events: SegQueue<Report>,
    /// The control thread, woken by every report that must arrive (it parks between turns).
    control: std::sync::OnceLock<std::thread::Thread>,
}

impl Reports {
    /// Queues for `shards` shards.
    pub fn new(shards: usize) -> Reports {
        Reports {
            stats: ArrayQueue::new(64 * shards.max(1)),
            events: SegQueue::new(),
            control: std::sync::OnceLock::new(),
        }
    }

    /// Names the thread to wake when a report that must arrive is delivered (the control
    /// thread, which parks between turns). Only the first call counts.
    pub fn wake(&self, control: std::thread::Thread) {
        let _ = self.control.set(control);
    }

    /// Sends periodic statistics, or drops them if the queue is full; whether they went.
    pub fn offer(&self, report: Report) -> bool {
        self.stats.push(report).is_ok()
    }

    /// Sends a report that must arrive. Never waits, never drops.
    pub fn deliver(&self, report: Report) {
        self.events.push(report);
        if let Some(t) = self.control.get() {
            t.unpark();
        }
    }

    /// The next report: statistics first, then what must arrive, each queue in order.
    pub fn pop(&self) -> Option<Report> {
        self.stats.pop().or_else(|| self.events.pop())
    }
}

/// Commands from the control thread to shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Stop polling, let sinks finish until the deadline, store offsets, end.
    Drain {
        /// When to give up waiting for the sinks.
        deadline: Instant,
    },
    /// End now, storing only what is confirmed.
    Stop,
    /// The operator paused sink `sink` (by config index); `flush`: its sink finishes what it
    /// holds (S3 objects complete).
    Pause {
        /// The sink.
        sink: usize,
        /// Flush as well.
        flush: bool,
    },
    /// The operator resumed sink `sink`.
    Resume {
        /// The sink.
        sink: usize,
    },
}

/// The control thread's merged view.
#[derive(Debug)]
pub struct Merged {
    /// Sink names, by index.
    pub names: Vec<String>,
    /// Latest report per (shard, sink).
    pub latest: Vec<Vec<SinkReport>>,
    /// Latency since start, per sink.
    pub latency: Vec<Histogram<u64>>,
    /// Latency since the last progress line, all sinks.
    pub window: Histogram<u64>,
    /// The sequence number of each shard's newest report absorbed.
    seqs: Vec<Option<u64>>,
}

impl Merged {
    /// An empty view for `shards` shards and these sinks.
    pub fn new(shards: usize, names: Vec<String>) -> Merged {
        let latency = names.iter().map(|_| latency_histogram()).collect();
        Merged {
            names,
            latest: vec![Vec::new(); shards],
            latency,
            window: latency_histogram(),
            seqs: vec![None; shards],
        }
    }

    /// Takes in one stats report, number `seq` of its shard. The latencies of every report
    /// count (each holds its own interval's); the counters and gauges of a report older than
    /// one already absorbed are left out (reports of one shard may arrive out of order, as the
    /// final one travels by the queue that never drops).
    pub fn absorb(&mut self, shard: usize, seq: u64, sinks: Vec<SinkReport>) {
        for r in &sinks {
            if let Some(h) = self.latency.get_mut(r.sink) {
                let _ = h.add(&r.latency);
            }
            let _ = self.window.add(&r.latency);
        }
        let (Some(slot), Some(newest)) = (self.latest.get_mut(shard), self.seqs.get_mut(shard))
        else {
            return;
        };
        if newest.is_none_or(|n| seq > n) {
            *newest = Some(seq);
            *slot = sinks;
        }
    }

    /// Counters summed over shards, per sink.
    pub fn totals(&self) -> Vec<(SinkCounters, u64, u64)> {
        let mut out = vec![(SinkCounters::default(), 0u64, 0u64); self.names.len()];
        for shard in &self.latest {
            for r in shard {
                if let Some((c, inf, lag)) = out.get_mut(r.sink) {
                    add(c, &r.counters);
                    *inf += r.in_flight;
                    *lag += r.partitions.iter().map(PartitionGauge::lag).sum::<u64>();
                }
            }
        }
        out
    }

    /// The Prometheus text exposition.
    pub fn prometheus(&self) -> String {
        let mut out = String::with_capacity(4096);
        let counters: [SinkFamily; 19] = [
            (
                "spillway_messages_in_total",
                "Messages polled from the source.",
                |c| c.messages_in,
            ),
            (
                "spillway_bytes_in_total",
                "Payload bytes polled from the source.",
                |c| c.bytes_in,
            ),
            (
                "spillway_messages_out_total",
                "Messages handed to the sink.",
                |c| c.messages_out,
            ),
            (
                "spillway_bytes_out_total",
                "Payload bytes handed to the sink.",
                |c| c.bytes_out,
            ),
            (
                "spillway_confirmed_total",
                "Messages the sink confirmed.",
                |c| c.confirmed,
            ),
            (
                "spillway_confirmed_bytes_total",
                "Payload bytes the sink confirmed.",
                |c| c.confirmed_bytes,
            ),
            (
                "spillway_failed_total",
                "Messages the sink rejected for good.",
                |c| c.failed,
            ),
            (
                "spillway_skipped_total",
                "Rejected messages skipped by on_error = skip.",
                |c| c.skipped,
            ),
            (
                "spillway_redelivered_total",
                "Messages dropped by the sink and polled again.",
                |c| c.redelivered,
            ),
            (
                "spillway_offset_commits_total",
                "Offsets stored in Iggy.",
                |c| c.commits,
            ),
            (
                "spillway_source_reconnects_total",
                "Reconnects to the source.",
                |c| c.reconnects,
            ),
            (
                "spillway_sink_reconnects_total",
                "Reconnects of the sink to its destination.",
                |c| c.sink_reconnects,
            ),
            (
                "spillway_sink_retries_total",
                "Failed sink requests tried again (S3 objects polled again).",
                |c| c.sink_retries,
            ),
            (
                "spillway_sink_requests_total",
                "Requests the sink sent to its destination, retries included (S3).",
                |c| c.sink_requests,
            ),
            (
                "spillway_sink_table_commits_total",
                "Snapshots an S3 sink committed to its Iceberg table.",
                |c| c.sink_table_commits,
            ),
            (
                "spillway_sink_table_files_total",
                "Data files the Iceberg snapshots of an S3 sink added.",
                |c| c.sink_table_files,
            ),
            (
                "spillway_sink_table_retries_total",
                "Iceberg commit attempts of an S3 sink tried again (a conflict with another writer, a catalog or store failure).",
                |c| c.sink_table_retries,
            ),
            (
                "spillway_sink_encoded_bytes_total",
                "Output bytes a sink encoded (S3: objects before upload).",
                |c| c.sink_encoded_bytes,
            ),
            (
                "spillway_sink_uploaded_bytes_total",
                "Body bytes the destination answered with success (S3: parts, objects, markers).",
                |c| c.sink_uploaded_bytes,
            ),
        ];
        self.per_sink(&mut out, "counter", &counters);
        let _ = writeln!(
            out,
            "# HELP spillway_in_flight_messages Polled messages not yet confirmed.\n# TYPE spillway_in_flight_messages gauge"
        );
        for (shard, reports) in self.latest.iter().enumerate() {
            for r in reports {
                let _ = writeln!(
                    out,
                    "spillway_in_flight_messages{{shard=\"{shard}\",sink=\"{}\"}} {}",
                    self.name(r.sink),
                    r.in_flight
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP spillway_sink_in_flight_peak Most messages in flight at once on one sink connection.\n# TYPE spillway_sink_in_flight_peak gauge"
        );
        for (shard, reports) in self.latest.iter().enumerate() {
            for r in reports {
                let _ = writeln!(
                    out,
                    "spillway_sink_in_flight_peak{{shard=\"{shard}\",sink=\"{}\"}} {}",
                    self.name(r.sink),
                    r.counters.sink_in_flight_peak
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP spillway_sink_buffered_peak_bytes Most bytes a sink held at once.\n# TYPE spillway_sink_buffered_peak_bytes gauge"
        );
        for (shard, reports) in self.latest.iter().enumerate() {
            for r in reports {
                let _ = writeln!(
                    out,
                    "spillway_sink_buffered_peak_bytes{{shard=\"{shard}\",sink=\"{}\"}} {}",
                    self.name(r.sink),
                    r.counters.sink_buffered_peak
                );
            }
        }
        let sink_gauges: [SinkFamily; 2] = [
            (
                "spillway_sink_objects_open",
                "Objects a sink has open now (S3: being written or uploaded).",
                |c| c.sink_objects_open,
            ),
            (
                "spillway_sink_buffered_bytes",
                "Bytes a sink holds now (S3: encoded output waiting or uploading).",
                |c| c.sink_buffered_bytes,
            ),
        ];
        self.per_sink(&mut out, "gauge", &sink_gauges);
        let gauges: [(&str, &str); 2] = [
            ("spillway_committed_offset", "Last offset stored in Iggy."),
            (
                "spillway_lag_messages",
                "Messages after the committed offset.",
            ),
        ];
        for (i, (name, help)) in gauges.iter().enumerate() {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (shard, reports) in self.latest.iter().enumerate() {
                for r in reports {
                    for p in &r.partitions {
                        let value = if i == 0 {
                            match p.committed {
                                Some(c) => c.to_string(),
                                None => continue,
                            }
                        } else {
                            p.lag().to_string()
                        };
                        let _ = writeln!(
                            out,
                            "{name}{{shard=\"{shard}\",sink=\"{}\",stream=\"{}\",topic=\"{}\",partition=\"{}\"}} {value}",
                            self.name(r.sink),
                            escape(&p.stream),
                            escape(&p.topic),
                            p.partition
                        );
                    }
                }
            }
        }
        let name = "spillway_poll_to_confirm_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Time from poll to the sink's confirmation.\n# TYPE {name} histogram"
        );
        for (sink, h) in self.latency.iter().enumerate() {
            let sink = self.name(sink);
            for (le, count) in latency_buckets(h) {
                let _ = writeln!(out, "{name}_bucket{{sink=\"{sink}\",le=\"{le}\"}} {count}");
            }
            let _ = writeln!(
                out,
                "{name}_bucket{{sink=\"{sink}\",le=\"+Inf\"}} {}",
                h.len()
            );
            let sum: f64 = h
                .iter_recorded()
                .map(|v| v.value_iterated_to() as f64 * v.count_at_value() as f64)
                .sum();
            let _ = writeln!(out, "{name}_sum{{sink=\"{sink}\"}} {}", sum / 1e6);
            let _ = writeln!(out, "{name}_count{{sink=\"{sink}\"}} {}", h.len());
        }
        out
    }

    /// Families with one sample per (shard, sink), of `kind` (`counter`, `gauge`).
    fn per_sink(&self, out: &mut String, kind: &str, families: &[SinkFamily]) {
        for (name, help, get) in families {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (shard, reports) in self.latest.iter().enumerate() {
                for r in reports {
                    let _ = writeln!(
                        out,
                        "{name}{{shard=\"{shard}\",sink=\"{}\"}} {}",
                        self.name(r.sink),
                        get(&r.counters)
                    );
                }
            }
        }
    }

    fn name(&self, sink: usize) -> String {
        escape(self.names.get(sink).map_or("?", String::as_str))
    }
}

/// A metric family read from each (shard, sink) report: name, help, the figure.
type SinkFamily = (&'static str, &'static str, fn(&SinkCounters) -> u64);

/// The upper bounds (seconds) of the poll-to-confirm histogram's buckets: sub-millisecond to
/// tens of milliseconds for MQTT acknowledgements, seconds to minutes for S3 objects (which
/// confirm a whole object at once, after `max_object_age` at most).
pub const LATENCY_BUCKETS: [&str; 20] = [
    "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1",
    "2.5", "5", "10", "30", "60", "120", "300", "600", "1800",
];

/// Cumulative counts at each bound of [`LATENCY_BUCKETS`] from a histogram of microseconds
/// (within the histogram's precision of 3 significant digits: a value just over a bound may be
/// counted in it).
fn latency_buckets(h: &Histogram<u64>) -> impl Iterator<Item = (&'static str, u64)> + '_ {
    LATENCY_BUCKETS.iter().map(move |le| {
        let micros = le.parse::<f64>().map_or(0, |s| (s * 1e6).round() as u64);
        (*le, h.count_between(0, micros))
    })
}

pub(crate) fn add(into: &mut SinkCounters, c: &SinkCounters) {
    into.messages_in += c.messages_in;
    into.bytes_in += c.bytes_in;
    into.messages_out += c.messages_out;
    into.bytes_out += c.bytes_out;
    into.confirmed += c.confirmed;
    into.confirmed_bytes += c.confirmed_bytes;
    into.failed += c.failed;
    into.skipped += c.skipped;
    into.redelivered += c.redelivered;
    into.commits += c.commits;
    into.reconnects += c.reconnects;
    into.sink_reconnects += c.sink_reconnects;
    into.sink_retries += c.sink_retries;
    into.sink_requests += c.sink_requests;
    into.sink_in_flight_peak = into.sink_in_flight_peak.max(c.sink_in_flight_peak);
    into.sink_buffered_peak = into.sink_buffered_peak.max(c.sink_buffered_peak);
    into.sink_encoded_bytes += c.sink_encoded_bytes;
    into.sink_uploaded_bytes += c.sink_uploaded_bytes;
    into.sink_objects_open += c.sink_objects_open;
    into.sink_buffered_bytes += c.sink_buffered_bytes;
    into.sink_table_commits += c.sink_table_commits;
    into.sink_table_files += c.sink_table_files;
    into.sink_table_retries += c.sink_table_retries;
}

pub(crate) fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn confirmed(n: u64) -> SinkReport {
        SinkReport {
            sink: 0,
            counters: SinkCounters {
                confirmed: n,
                ..SinkCounters::default()
            },
            in_flight: 0,
            partitions: Vec::new(),
            latency: latency_histogram(),
            state: crate::flow::SinkState::Running,
            source: crate::flow::SourceState::Up,
            sink_failing: false,
            last_error: None,
            generation: None,
        }
    }

    #[test]
    fn a_report_that_must_arrive_arrives_when_the_stats_queue_is_full() {
        let reports = Reports::new(1);
        let stats = |seq| Report::Stats {
            shard: 0,
            seq,
            sinks: Vec::new(),
        };
        let mut offered = 0;
        while reports.offer(stats(offered)) {
            offered += 1;
        }
        assert!(offered > 0 && !reports.offer(stats(offered)), "full");
        reports.deliver(Report::Fatal {
            shard: 0,
            message: "refused".into(),
            class: crate::error::ErrorClass::Permanent,
        });
        reports.deliver(Report::Finished { shard: 0 });
        let mut got = Vec::new();
        while let Some(r) = reports.pop() {
            got.push(r);
        }
        assert_eq!(got.len() as u64, offered + 2);
        assert!(matches!(got[got.len() - 2], Report::Fatal { .. }));
        assert!(matches!(got[got.len() - 1], Report::Finished { shard: 0 }));
    }

    #[test]
    fn an_older_report_arriving_late_does_not_replace_a_newer_one() {
        let mut m = Merged::new(1, vec!["s".into()]);
        m.absorb(0, 5, vec![confirmed(50)]);
        m.absorb(0, 4, vec![confirmed(40)]);
        assert_eq!(m.totals()[0].0.confirmed, 50);
        m.absorb(0, 6, vec![confirmed(60)]);
        assert_eq!(m.totals()[0].0.confirmed, 60);
    }

    #[test]
    fn renders_prometheus_text() {
        let mut m = Merged::new(2, vec!["a\"b".into()]);
        let mut latency = latency_histogram();
        let _ = latency.record(2_000);
        let report = |confirmed| SinkReport {
            sink: 0,
            counters: SinkCounters {
                confirmed,
                sink_retries: 2,
                sink_requests: 11,
                ..SinkCounters::default()
            },
            in_flight: 3,
            partitions: vec![PartitionGauge {
                stream: "s".into(),
                topic: "t".into(),
                partition: 1,
                committed: Some(9),
                head: Some(19),
                in_flight: 3,
                ..PartitionGauge::default()
            }],
            latency: latency.clone(),
            state: crate::flow::SinkState::Running,
            source: crate::flow::SourceState::Up,
            sink_failing: false,
            last_error: None,
            generation: None,
        };
        m.absorb(0, 1, vec![report(5)]);
        m.absorb(1, 1, vec![report(7)]);
        let text = m.prometheus();
        assert!(
            text.contains("spillway_confirmed_total{shard=\"1\",sink=\"a\\\"b\"} 7"),
            "{text}"
        );
        assert!(text.contains("spillway_lag_messages{shard=\"0\",sink=\"a\\\"b\",stream=\"s\",topic=\"t\",partition=\"1\"} 10"));
        assert!(text.contains("spillway_poll_to_confirm_seconds_count{sink=\"a\\\"b\"} 2"));
        // 2 ms twice: in every bucket from 2.5 ms up, none below.
        assert!(text.contains("# TYPE spillway_poll_to_confirm_seconds histogram"));
        assert!(
            text.contains(
                "spillway_poll_to_confirm_seconds_bucket{sink=\"a\\\"b\",le=\"0.001\"} 0"
            )
        );
        assert!(
            text.contains(
                "spillway_poll_to_confirm_seconds_bucket{sink=\"a\\\"b\",le=\"0.0025\"} 2"
            )
        );
        assert!(
            text.contains("spillway_poll_to_confirm_seconds_bucket{sink=\"a\\\"b\",le=\"+Inf\"} 2")
        );
        assert!(!text.contains("quantile="), "a histogram, not a summary");
        assert_eq!(m.totals()[0].0.confirmed, 12);
        assert!(
            text.contains("spillway_sink_retries_total{shard=\"0\",sink=\"a\\\"b\"} 2"),
            "{text}"
        );
        assert!(text.contains("spillway_sink_reconnects_total{shard=\"0\",sink=\"a\\\"b\"} 0"));
        assert_eq!(m.totals()[0].0.sink_retries, 4);
        assert!(text.contains("spillway_sink_requests_total{shard=\"1\",sink=\"a\\\"b\"} 11"));
        assert_eq!(m.totals()[0].0.sink_requests, 22);
    }
}
