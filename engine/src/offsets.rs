//! `spillway offsets show|set|skip`: where each partition of a sink resumes, and moving it.
//!
//! A partition resumes after the later of Iggy's stored offset (of the sink's consumer or
//! group) and, for an S3 sink, its marker's watermark. `show` prints both beside the
//! partition's head; `set` and `skip` move both, the marker first (a compare-and-swap that
//! fences a member still writing the partition), so the next run resumes exactly where asked.
//! Both refuse while an engine runs the sink (its `/status` answers at the config's
//! `metrics.address`, or its consumer group has members) unless `--force`.

use std::fmt::Write as _;

use tracing::info;

use iggy_binary_protocol::{WireConsumer, WireIdentifier};

use crate::acks::Acks;
use crate::config::{Config, SinkConfig, SinkType, SourceKind, StartFrom};
use crate::iggy::{IggyClient, PartitionState, Target as IggyTarget};
use crate::message::Message;
use crate::sink::S3Sink;

/// Where to move a partition, as `--to` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Resume at this offset.
    At(u64),
    /// At the partition's first offset.
    Earliest,
    /// Past its last message: only what comes next.
    Latest,
    /// This many past where it resumes now.
    Forward(u64),
    /// This many before where it resumes now.
    Back(u64),
}

impl std::str::FromStr for Target {
    type Err = String;
    fn from_str(s: &str) -> Result<Target, String> {
        let number = |n: &str| {
            n.parse::<u64>()
                .map_err(|_| format!("--to {s:?}: use an offset, earliest, latest, +N or -N"))
        };
        match s {
            "earliest" => Ok(Target::Earliest),
            "latest" => Ok(Target::Latest),
            _ => match (s.strip_prefix('+'), s.strip_prefix('-')) {
                (Some(n), _) => number(n).map(Target::Forward),
                (_, Some(n)) => number(n).map(Target::Back),
                _ => number(s).map(Target::At),
            },
        }
    }
}

/// What to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Print where each partition stands.
    Show,
    /// Move each partition to the target.
    Set(Target),
    /// Move each partition past this many messages from where it resumes (a poison message),
    /// naming them.
    Skip(u64),
}

/// One partition as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The partition.
    pub partition: u32,
    /// Iggy's stored offset for the sink's consumer (or group).
    pub stored: Option<u64>,
    /// The S3 marker's watermark (`None` as well for a sink that has no marker).
    pub marker: Option<u64>,
    /// The partition's last offset (`None`: empty).
    pub head: Option<u64>,
}

impl Row {
    /// Where the partition resumes: after the later of the stored offset and the marker;
    /// with neither, where `start` says.
    pub fn resumes_at(&self, start: StartFrom) -> u64 {
        match (self.stored, self.marker) {
            (None, None) => match start {
                StartFrom::Earliest => 0,
                StartFrom::Latest => self.head.map_or(0, |h| h + 1),
            },
            (a, b) => a.max(b).map_or(0, |o| o + 1),
        }
    }

    /// Where `target` puts it.
    pub fn target(&self, target: Target, start: StartFrom) -> u64 {
        let now = self.resumes_at(start);
        let end = self.head.map_or(0, |h| h + 1);
        match target {
            Target::At(o) => o,
            Target::Earliest => 0,
            Target::Latest => end,
            Target::Forward(n) => now.saturating_add(n),
            Target::Back(n) => now.saturating_sub(n),
        }
    }
}

/// Runs `op` for sink `sink_name` of `config` (its `partition` only, when given); the
/// report for the operator, or the error.
pub fn run(
    config: &Config,
    sink_name: &str,
    partition: Option<u32>,
    op: Op,
    force: bool,
) -> Result<String, String> {
    let Some(sink) = config.sinks.iter().find(|s| s.name == sink_name) else {
        let names: Vec<&str> = config.sinks.iter().map(|s| s.name.as_str()).collect();
        return Err(format!(
            "no sink named {sink_name:?} in the config (sinks: {})",
            names.join(", ")
        ));
    };
    if sink.source != SourceKind::Iggy {
        return Err(format!(
            "sink {sink_name:?} reads the generate source: it has no offsets"
        ));
    }
    let (config, sink) = (config.clone(), sink.clone());
    let worker = std::thread::Builder::new()
        .name("spillway-offsets".to_owned())
        .spawn(move || {
            let mut rt = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
                .enable_timer()
                .build()
                .map_err(|e| format!("cannot start the I/O runtime: {e}"))?;
            rt.block_on(run_on(&config, &sink, partition, op, force))
        })
        .map_err(|e| format!("cannot start a thread: {e}"))?;
    worker
        .join()
        .map_err(|_| "the offsets thread failed".to_owned())?
}

struct Source {
    client: IggyClient,
    target: IggyTarget,
}

async fn run_on(
    config: &Config,
    sink: &SinkConfig,
    partition: Option<u32>,
    op: Op,
    force: bool,
) -> Result<String, String> {
    let (client, _finder) = crate::check::iggy_login(config).await?;
    let target = IggyTarget::of(sink).map_err(|e| format!("sink {:?}: {e}", sink.name))?;
    let mut src = Source { client, target };
    let iggy_err = |e: crate::iggy::IggyError| format!("Iggy: {e}");
    let Some(heads) = src
        .client
        .topic(&src.target.stream, &src.target.topic)
        .await
        .map_err(iggy_err)?
    else {
        return Err(format!(
            "topic {} not found in stream {} (or the stream is missing)",
            src.target.topic_name, src.target.stream_name
        ));
    };
    let mut ids: Vec<u32> = match &sink.partitions {
        Some(list) => list.clone(),
        None => heads.iter().map(|h| h.id).collect(),
    };
    if let Some(p) = partition {
        if !ids.contains(&p) {
            return Err(format!(
                "partition {p} is not one of sink {:?}'s (it reads {ids:?})",
                sink.name
            ));
        }
        ids = vec![p];
    }
    ids.sort_unstable();
    let s3 = match sink.kind {
        SinkType::S3 => Some(S3Sink::new(sink, 0, false, Acks::new()).map_err(|e| e.message)?),
        _ => None,
    };
    let mut rows = Vec::new();
    for &id in &ids {
        rows.push(row(&mut src, s3.as_ref(), &heads, id).await?);
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "sink {} ({}) reading {}/{}",
        sink.name,
        match &sink.consumer_group {
            Some(g) => format!("consumer group {g}"),
            None => format!("consumer {}", sink.consumer_name()),
        },
        src.target.stream_name,
        src.target.topic_name
    );
    table(&mut out, &rows, s3.is_some(), sink.start);
    let moves: Vec<(u32, u64, u64)> = match op {
        Op::Show => return Ok(out),
        Op::Set(target) => rows
            .iter()
            .map(|r| {
                (
                    r.partition,
                    r.resumes_at(sink.start),
                    r.target(target, sink.start),
                )
            })
            .collect(),
        Op::Skip(n) => rows
            .iter()
            .map(|r| {
                let now = r.resumes_at(sink.start);
                (r.partition, now, now.saturating_add(n))
            })
            .collect(),
    };
    if !force {
        refuse_if_running(config, sink, &mut src).await?;
    }
    for (r, &(p, _, to)) in rows.iter().zip(&moves) {
        let end = r.head.map_or(0, |h| h + 1);
        if to > end {
            return Err(format!(
                "partition {p} ends at offset {end} (its next message): it cannot resume at {to}"
            ));
        }
        if to == 0 && sink.start == StartFrom::Latest {
            return Err(format!(
                "partition {p}: sink {:?} has start = \"latest\", and with nothing stored it starts at the head, not at 0 (set start = \"earliest\" first)",
                sink.name
            ));
        }
    }
    let _ = writeln!(out);
    // A group's offsets are stored by a member that holds the partition: the tool joins
    // (alone, since it refused while others are in), and leaves once done.
    let joined = match src.target.group.clone() {
        Some(group) => Some(join_alone(&mut src, group, &ids).await?),
        None => None,
    };
    let result = apply(&mut out, &mut src, s3.as_ref(), sink, op, &moves).await;
    if let Some(group) = joined
        && let Err(e) = src
            .client
            .leave_group(&src.target.stream, &src.target.topic, &group)
            .await
    {
        let _ = writeln!(
            out,
            "leaving consumer group: {e} (the server drops the member when the connection closes)"
        );
    }
    result?;
    let mut after = Vec::new();
    for &id in &ids {
        after.push(row(&mut src, s3.as_ref(), &heads, id).await?);
    }
    let _ = writeln!(out, "\nnow:");
    table(&mut out, &after, s3.is_some(), sink.start);
    Ok(out)
}

/// Joins the consumer group and waits until it is assigned every partition of `ids`.
async fn join_alone(
    src: &mut Source,
    group: WireIdentifier,
    ids: &[u32],
) -> Result<WireIdentifier, String> {
    src.client
        .join_group(&src.target.stream, &src.target.topic, &group)
        .await
        .map_err(|e| format!("joining the consumer group to store its offsets: {e}"))?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let assigned = src
            .client
            .sync_group(&src.target.stream, &src.target.topic, &group)
            .await
            .map_err(|e| format!("reading the group's assignment: {e}"))?;
        let held = assigned.map(|(_, p)| p).unwrap_or_default();
        if ids.iter().all(|id| held.contains(id)) {
            return Ok(group);
        }
        if std::time::Instant::now() >= deadline {
            let _ = src
                .client
                .leave_group(&src.target.stream, &src.target.topic, &group)
                .await;
            return Err(format!(
                "the consumer group assigned the tool partitions {held:?}, not all of {ids:?} (other members are in it)"
            ));
        }
        monoio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

async fn apply(
    out: &mut String,
    src: &mut Source,
    s3: Option<&S3Sink>,
    sink: &SinkConfig,
    op: Op,
    moves: &[(u32, u64, u64)],
) -> Result<(), String> {
    for &(p, from, to) in moves {
        if let Op::Skip(_) = op {
            describe_skipped(out, src, p, from, to).await?;
        }
        if from == to {
            let _ = writeln!(out, "partition {p}: resumes at {to} already");
            continue;
        }
        if let Some(s3) = s3 {
            s3.set_marker(&src.target.stream_name, &src.target.topic_name, p, to)
                .await
                .map_err(|e| e.message)?;
        }
        match to.checked_sub(1) {
            Some(last) => src
                .client
                .store_offset(&src.target, p, last)
                .await
                .map_err(|e| format!("storing offset {last} of partition {p} in Iggy: {e}"))?,
            None => src
                .client
                .delete_offset(&src.target, p)
                .await
                .map_err(|e| format!("deleting the stored offset of partition {p}: {e}"))?,
        }
        info!(
            sink = %sink.name,
            partition = p,
            "offsets: partition {p} of sink {:?} resumes at {to} (it resumed at {from})",
            sink.name
        );
        let _ = writeln!(out, "partition {p}: resumes at {to} (was {from})");
    }
    Ok(())
}

async fn row(
    src: &mut Source,
    s3: Option<&S3Sink>,
    heads: &[PartitionState],
    id: u32,
) -> Result<Row, String> {
    let stored = src
        .client
        .stored_offset(&src.target, id)
        .await
        .map_err(|e| format!("reading the stored offset of partition {id}: {e}"))?;
    let marker = match s3 {
        Some(s3) => s3
            .marker_state(&src.target.stream_name, &src.target.topic_name, id)
            .await
            .map_err(|e| e.message)?
            .and_then(|m| m.last),
        None => None,
    };
    let head = heads
        .iter()
        .find(|h| h.id == id)
        .filter(|h| h.messages_count > 0)
        .map(|h| h.current_offset);
    Ok(Row {
        partition: id,
        stored,
        marker,
        head,
    })
}

fn table(out: &mut String, rows: &[Row], marker: bool, start: StartFrom) {
    let cell = |o: Option<u64>| o.map_or_else(|| "-".to_owned(), |o| o.to_string());
    let _ = writeln!(
        out,
        "{:<10} {:>12} {:>12} {:>12} {:>12}",
        "PARTITION",
        "STORED",
        if marker { "S3 MARKER" } else { "" },
        "HEAD",
        "RESUMES AT"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:<10} {:>12} {:>12} {:>12} {:>12}",
            r.partition,
            cell(r.stored),
            if marker {
                cell(r.marker)
            } else {
                String::new()
            },
            cell(r.head),
            r.resumes_at(start)
        );
    }
}

/// Refuses while an engine runs the sink: its `/status` answers at `metrics.address` and
/// names it, or its consumer group has members.
async fn refuse_if_running(
    config: &Config,
    sink: &SinkConfig,
    src: &mut Source,
) -> Result<(), String> {
    if let Ok(addr) = crate::operator::listener(config, None)
        && let Ok((200, body)) = crate::operator::request(addr, "GET", "/status", None)
        && serde_json::from_str::<serde_json::Value>(&body).is_ok_and(|v| {
            v["sinks"]
                .as_array()
                .is_some_and(|s| s.iter().any(|s| s["name"] == sink.name.as_str()))
        })
    {
        return Err(format!(
            "an engine running sink {:?} answers at http://{addr}/status: stop it first (its offsets would be stored over these), or pass --force",
            sink.name
        ));
    }
    if let Some(group) = &src.target.group {
        let members = src
            .client
            .group_members(&src.target.stream, &src.target.topic, group)
            .await
            .map_err(|e| format!("reading the consumer group: {e}"))?;
        if let Some(n) = members.filter(|n| *n > 0) {
            return Err(format!(
                "consumer group {:?} has {n} members: an engine (this sink elsewhere) is reading it; stop them first, or pass --force",
                sink.consumer_group.as_deref().unwrap_or_default()
            ));
        }
    }
    Ok(())
}

/// Names the messages `from..to` of partition `p` that a skip passes (at most 20 one by one).
async fn describe_skipped(
    out: &mut String,
    src: &mut Source,
    p: u32,
    from: u64,
    to: u64,
) -> Result<(), String> {
    const NAMED: u64 = 20;
    let mut messages: Vec<Message> = Vec::new();
    let count = u32::try_from(to.saturating_sub(from).min(NAMED)).unwrap_or(1);
    // A plain consumer of its own: a group's polls are for its members, and a poll at an
    // offset stores nothing.
    let reader = IggyTarget {
        consumer: WireConsumer::consumer(
            WireIdentifier::named("spillway-offsets".to_owned()).map_err(|e| e.to_string())?,
        ),
        ..src.target.clone()
    };
    if count > 0 {
        src.client
            .poll(&reader, p, from, count, &mut messages)
            .await
            .map_err(|e| format!("reading the messages skipped in partition {p}: {e}"))?;
    }
    for m in messages.iter().filter(|m| m.offset < to) {
        let preview: String = String::from_utf8_lossy(&m.payload[..m.payload.len().min(60)])
            .chars()
            .map(|c| if c.is_control() { '.' } else { c })
            .collect();
        let line = format!(
            "skipping partition {p} offset {}: id {}, {} bytes, timestamp {} us, payload {preview:?}{}",
            m.offset,
            m.id,
            m.payload.len(),
            m.timestamp,
            if m.payload.len() > 60 { "..." } else { "" }
        );
        info!("offsets: {line}");
        let _ = writeln!(out, "{line}");
    }
    if to - from > NAMED {
        let _ = writeln!(
            out,
            "skipping {} more messages of partition {p}",
            to - from - NAMED
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn targets_parse_and_resolve_against_where_a_partition_resumes() {
        assert_eq!("earliest".parse(), Ok(Target::Earliest));
        assert_eq!("latest".parse(), Ok(Target::Latest));
        assert_eq!("+3".parse(), Ok(Target::Forward(3)));
        assert_eq!("-1000".parse(), Ok(Target::Back(1000)));
        assert_eq!("42".parse(), Ok(Target::At(42)));
        assert!(
            "soon"
                .parse::<Target>()
                .unwrap_err()
                .contains("--to \"soon\"")
        );
        let r = Row {
            partition: 1,
            stored: Some(1_499),
            marker: Some(1_999),
            head: Some(2_499),
        };
        // The later of the stored offset and the marker.
        assert_eq!(r.resumes_at(StartFrom::Earliest), 2_000);
        assert_eq!(r.target(Target::Back(1_000), StartFrom::Earliest), 1_000);
        assert_eq!(r.target(Target::Forward(1), StartFrom::Earliest), 2_001);
        assert_eq!(r.target(Target::Latest, StartFrom::Earliest), 2_500);
        assert_eq!(r.target(Target::Back(5_000), StartFrom::Earliest), 0);
        let fresh = Row {
            partition: 1,
            stored: None,
            marker: None,
            head: Some(9),
        };
        assert_eq!(fresh.resumes_at(StartFrom::Earliest), 0);
        assert_eq!(fresh.resumes_at(StartFrom::Latest), 10);
    }
}
