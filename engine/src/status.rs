//! What an operator asks of a running engine: each sink's state, readiness and partitions,
//! merged over the shards it runs on, as `/status` (JSON), `/ready` (lines) and the
//! `spillway_sink_state` gauges; and `/health` from when each shard last reported.
//!
//! The control thread builds these from the shards' reports ([`View::new`]) and hands them to
//! the HTTP thread ([`crate::metrics_http`]) as one [`Pages`] snapshot.

use std::fmt::Write as _;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

use crate::config::{Config, SinkType};
use crate::flow::{SinkState, SourceState};
use crate::metrics::{Merged, SinkCounters};

/// How bad a state is, for merging the shards' states of one sink (the worst shows).
fn rank(s: SinkState) -> u8 {
    match s {
        SinkState::Stopped => 0,
        SinkState::Running => 1,
        SinkState::Paused => 2,
        SinkState::Starting => 3,
        SinkState::Draining => 4,
        SinkState::Failed => 5,
    }
}

fn source_rank(s: SourceState) -> u8 {
    match s {
        SourceState::Up => 0,
        SourceState::Connecting => 1,
        SourceState::Down => 2,
    }
}

/// One partition of a sink, on the shard that holds it.
#[derive(Debug, Clone)]
pub struct PartitionView {
    /// The shard.
    pub shard: usize,
    /// What the shard reported.
    pub gauge: crate::metrics::PartitionGauge,
}

/// One sink, merged over its shards.
#[derive(Debug, Clone)]
pub struct SinkView {
    /// Its name.
    pub name: String,
    /// `mqtt`, `s3`, `file` or `stdout`.
    pub kind: &'static str,
    /// The worst state of its shards (a shard that has not reported yet is starting).
    pub state: SinkState,
    /// Its link to the source, the worst of its shards; `None` for a generate source.
    pub source: Option<SourceState>,
    /// Its destination cannot be reached on some shard.
    pub failing: bool,
    /// The newest error of any of its shards.
    pub last_error: Option<(SystemTime, String)>,
    /// The Iggy consumer (or group) it reads as.
    pub consumer: String,
    /// The consumer group, if any.
    pub group: Option<String>,
    /// The newest generation of its assignment, in a group.
    pub generation: Option<u64>,
    /// Counters summed over its shards.
    pub counters: SinkCounters,
    /// Polled, unconfirmed messages.
    pub in_flight: u64,
    /// Its partitions.
    pub partitions: Vec<PartitionView>,
}

impl SinkView {
    /// Why the sink is not ready, or `None` when it is: running (or paused by the operator),
    /// logged in to Iggy, and its destination reachable.
    pub fn not_ready(&self) -> Option<String> {
        let mut why = Vec::new();
        match self.state {
            SinkState::Running | SinkState::Paused => {}
            s => why.push(s.name().to_owned()),
        }
        if let Some(src) = self.source
            && src != SourceState::Up
        {
            why.push(format!("Iggy {}", src.name()));
        }
        if self.failing {
            why.push(match self.kind {
                "mqtt" => "MQTT broker not connected".to_owned(),
                "s3" => "S3 uploads failing".to_owned(),
                _ => "destination failing".to_owned(),
            });
        }
        if why.is_empty() {
            return None;
        }
        let mut line = format!("sink {:?}: {}", self.name, why.join(", "));
        if let Some((_, e)) = &self.last_error {
            let _ = write!(line, " (last error: {e})");
        }
        Some(line)
    }
}

/// Everything the operator's endpoints show, built by the control thread.
#[derive(Debug, Clone)]
pub struct View {
    /// Per sink, in config order.
    pub sinks: Vec<SinkView>,
}

impl View {
    /// The view of `merged`, where sink `i` runs on shards `runs_on[i]`.
    pub fn new(config: &Config, merged: &Merged, runs_on: &[Vec<usize>]) -> View {
        let mut sinks: Vec<SinkView> = config
            .sinks
            .iter()
            .map(|s| SinkView {
                name: s.name.clone(),
                kind: match s.kind {
                    SinkType::Mqtt => "mqtt",
                    SinkType::S3 => "s3",
                    SinkType::File => "file",
                    SinkType::Stdout => "stdout",
                },
                state: SinkState::Stopped,
                source: (s.source == crate::config::SourceKind::Iggy).then_some(SourceState::Up),
                failing: false,
                last_error: None,
                consumer: s.consumer_name().to_owned(),
                group: s.consumer_group.clone(),
                generation: None,
                counters: SinkCounters::default(),
                in_flight: 0,
                partitions: Vec::new(),
            })
            .collect();
        for (i, view) in sinks.iter_mut().enumerate() {
            let shards = runs_on.get(i).map_or(&[][..], Vec::as_slice);
            if shards.is_empty() {
                view.state = SinkState::Starting;
            }
            for &shard in shards {
                let report = merged
                    .latest
                    .get(shard)
                    .and_then(|rs| rs.iter().find(|r| r.sink == i));
                let Some(r) = report else {
                    // Not reported yet.
                    if rank(SinkState::Starting) > rank(view.state) {
                        view.state = SinkState::Starting;
                    }
                    if let Some(src) = &mut view.source
                        && source_rank(SourceState::Connecting) > source_rank(*src)
                    {
                        *src = SourceState::Connecting;
                    }
                    continue;
                };
                if rank(r.state) > rank(view.state) {
                    view.state = r.state;
                }
                if let Some(src) = &mut view.source
                    && source_rank(r.source) > source_rank(*src)
                {
                    *src = r.source;
                }
                view.failing |= r.sink_failing;
                if let Some((at, e)) = &r.last_error
                    && view.last_error.as_ref().is_none_or(|(t, _)| at > t)
                {
                    view.last_error = Some((*at, e.clone()));
                }
                view.generation = view.generation.max(r.generation);
                crate::metrics::add(&mut view.counters, &r.counters);
                view.in_flight += r.in_flight;
                view.partitions
                    .extend(r.partitions.iter().map(|g| PartitionView {
                        shard,
                        gauge: g.clone(),
                    }));
            }
            view.partitions.sort_by_key(|p| p.gauge.partition);
        }
        View { sinks }
    }

    /// The `/ready` lines of the sinks that are not ready; empty when all are.
    pub fn not_ready(&self) -> Vec<String> {
        self.sinks.iter().filter_map(SinkView::not_ready).collect()
    }

    /// `/status`, as JSON.
    pub fn json(&self, uptime: Duration, shards: &[ShardLife], now: Instant) -> String {
        let sinks: Vec<Value> = self.sinks.iter().map(sink_json).collect();
        let shards: Vec<Value> = shards
            .iter()
            .enumerate()
            .map(|(i, s)| {
                json!({
                    "shard": i,
                    "finished": s.finished,
                    "last_report_ms": s.seen.map(|t| now.saturating_duration_since(t).as_millis() as u64),
                })
            })
            .collect();
        let doc = json!({
            "version": env!("CARGO_PKG_VERSION"),
            "uptime_seconds": uptime.as_secs(),
            "ready": self.not_ready().is_empty(),
            "shards": shards,
            "sinks": sinks,
        });
        let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
        text.push('\n');
        text
    }

    /// The `spillway_sink_state` and `spillway_sink_ready` gauges.
    pub fn prometheus(&self, out: &mut String) {
        out.push_str(
            "# HELP spillway_sink_state The sink's state (1 for the state it is in): starting, running, paused, draining, failed, stopped.\n# TYPE spillway_sink_state gauge\n",
        );
        for s in &self.sinks {
            for state in SinkState::ALL {
                let _ = writeln!(
                    out,
                    "spillway_sink_state{{sink=\"{}\",state=\"{}\"}} {}",
                    crate::metrics::escape(&s.name),
                    state.name(),
                    u8::from(s.state == state)
                );
            }
        }
        out.push_str(
            "# HELP spillway_sink_ready Whether the sink is ready (as /ready): running or paused, logged in to Iggy, its destination reachable.\n# TYPE spillway_sink_ready gauge\n",
        );
        for s in &self.sinks {
            let _ = writeln!(
                out,
                "spillway_sink_ready{{sink=\"{}\"}} {}",
                crate::metrics::escape(&s.name),
                u8::from(s.not_ready().is_none())
            );
        }
    }
}

fn sink_json(s: &SinkView) -> Value {
    let partitions: Vec<Value> = s
        .partitions
        .iter()
        .map(|p| {
            let g = &p.gauge;
            let objects: Vec<Value> = g
                .objects
                .iter()
                .map(|o| {
                    json!({
                        "first_offset": o.first_offset,
                        "last_offset": o.last_offset,
                        "messages": o.messages,
                        "bytes": o.bytes,
                    })
                })
                .collect();
            json!({
                "stream": g.stream,
                "topic": g.topic,
                "partition": g.partition,
                "shard": p.shard,
                "polled": g.polled,
                "confirmed": g.confirmed,
                "stored": g.committed,
                "head": g.head,
                "lag": g.lag(),
                "in_flight": g.in_flight,
                "open_objects": objects,
            })
        })
        .collect();
    let c = &s.counters;
    json!({
        "name": s.name,
        "type": s.kind,
        "state": s.state.name(),
        "ready": s.not_ready().is_none(),
        "not_ready": s.not_ready(),
        "iggy": s.source.map(SourceState::name),
        "destination": if s.failing { "failing" } else { "ok" },
        "last_error": s.last_error.as_ref().map(|(at, e)| json!({
            "at": rfc3339(*at),
            "message": e,
        })),
        "consumer": s.consumer,
        "consumer_group": s.group,
        "generation": s.generation,
        "polled": c.messages_in,
        "confirmed": c.confirmed,
        "failed": c.failed,
        "skipped": c.skipped,
        "redelivered": c.redelivered,
        "offsets_stored": c.commits,
        "in_flight": s.in_flight,
        "lag": s.partitions.iter().map(|p| p.gauge.lag()).sum::<u64>(),
        "partitions": partitions,
    })
}

/// A wall-clock time as RFC 3339, UTC.
pub fn rfc3339(at: SystemTime) -> String {
    jiff::Timestamp::try_from(at).map_or_else(|_| "?".to_owned(), |t| t.to_string())
}

/// When a shard last reported, and whether it is done.
#[derive(Debug, Clone, Copy, Default)]
pub struct ShardLife {
    /// Its newest report.
    pub seen: Option<Instant>,
    /// It ended (its sinks are done): it reports no more.
    pub finished: bool,
}

/// The `/health` verdict at `now`: `None` when the control thread published within
/// `timeout` and every shard still running reported within it (a shard that has not reported
/// yet gets `timeout` from the start), else the lines naming what did not.
pub fn unhealthy(
    shards: &[ShardLife],
    started: Instant,
    published: Instant,
    timeout: Duration,
    now: Instant,
) -> Option<String> {
    let mut out = String::new();
    let quiet = now.saturating_duration_since(published);
    if quiet > timeout {
        let _ = writeln!(
            out,
            "control thread: no update for {:.1} s (limit {:.1} s)",
            quiet.as_secs_f64(),
            timeout.as_secs_f64()
        );
    }
    for (i, s) in shards.iter().enumerate() {
        if s.finished {
            continue;
        }
        let since = s.seen.unwrap_or(started);
        let quiet = now.saturating_duration_since(since);
        if quiet > timeout {
            let what = if s.seen.is_some() {
                "no report"
            } else {
                "no report since the start"
            };
            let _ = writeln!(
                out,
                "shard {i}: {what} for {:.1} s (limit {:.1} s)",
                quiet.as_secs_f64(),
                timeout.as_secs_f64()
            );
        }
    }
    (!out.is_empty()).then_some(out)
}

/// What the HTTP thread serves, as the control thread last built it.
#[derive(Debug, Clone)]
pub struct Pages {
    /// `/metrics`.
    pub metrics: String,
    /// `/status`.
    pub status: String,
    /// `/ready`: the lines of the sinks not ready (empty: ready).
    pub not_ready: Vec<String>,
    /// Per shard, for `/health`.
    pub shards: Vec<ShardLife>,
    /// When the engine started.
    pub started: Instant,
    /// When these pages were built.
    pub published: Instant,
}

impl Pages {
    /// The pages of an engine that has not reported anything yet.
    pub fn initial(metrics: String, shards: usize, now: Instant) -> Pages {
        Pages {
            metrics,
            status: "{}\n".to_owned(),
            not_ready: vec!["starting".to_owned()],
            shards: vec![ShardLife::default(); shards],
            started: now,
            published: now,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn health_names_the_shard_that_went_quiet_and_the_control_thread() {
        let t0 = Instant::now();
        let timeout = Duration::from_secs(5);
        let shards = [
            ShardLife {
                seen: Some(t0 + Duration::from_secs(9)),
                finished: false,
            },
            ShardLife {
                seen: Some(t0 + Duration::from_secs(2)),
                finished: false,
            },
            ShardLife {
                seen: None,
                finished: true,
            },
        ];
        let now = t0 + Duration::from_secs(10);
        let bad = unhealthy(&shards, t0, now, timeout, now).unwrap();
        assert_eq!(bad, "shard 1: no report for 8.0 s (limit 5.0 s)\n");
        let quiet = unhealthy(&shards[..1], t0, t0 + Duration::from_secs(4), timeout, now);
        assert_eq!(
            quiet.as_deref(),
            Some("control thread: no update for 6.0 s (limit 5.0 s)\n")
        );
        assert!(unhealthy(&shards[..1], t0, now, timeout, now).is_none());
        // A shard that never reported gets the timeout from the start.
        let fresh = [ShardLife::default()];
        assert!(unhealthy(&fresh, t0, t0, timeout, t0 + Duration::from_secs(4)).is_none());
        let late = unhealthy(&fresh, t0, now, timeout, now).unwrap();
        assert!(
            late.contains("shard 0: no report since the start"),
            "{late}"
        );
    }
}
