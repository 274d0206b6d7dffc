//! `spillway-bench scaling`: the engine with 1, 2, 4, … shards up to every available core,
//! one partition per shard, 100-byte messages, along three paths:
//!
//! - `generate_mqtt_discard`: the generate source, the engine in-process, one MQTT connection
//!   per shard (QoS 1, window 1000) to the in-process discard broker: the engine alone;
//! - `iggy_mqtt_discard`: the pipeline scenario's path (Iggy, the `spillway` binary as its own
//!   process) to the discard broker;
//! - `iggy_s3_discard`: the same to the discard S3 endpoint (json_lines objects).
//!
//! The discard endpoints answer at once and keep nothing. The work per shard is fixed, so with
//! perfect scaling the rate grows with the shard count; the report gives msgs/s, msgs/s per
//! shard, the efficiency against linear (`rate(k) / (k x rate(1))`) and an SVG chart
//! (`target/bench/scaling.svg`). The Iggy topic holds one partition per core, filled once.
//!
//! The discard broker's threads and the engine's control thread share the machine's cores
//! with the shards (no cores are set aside for them), so on a small machine the last step
//! measures contention as much as the engine: the report says how many cores there were.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use spillway::coremap::Machine;

use crate::chart::{Chart, Series};
use crate::engine_process;
use crate::mqtt::discard::DiscardBroker;
use crate::mqtt::ours;
use crate::pipeline::{self, Dest, Job, Servers};
use crate::report::{self, Better, Row};

/// Messages per shard and run.
const PER_SHARD: u64 = 1_000_000;
const PER_SHARD_QUICK: u64 = 50_000;
const SIZE: usize = 100;

/// Shard counts for `cores` available cores: powers of two, and every core.
pub fn steps(cores: usize) -> Vec<usize> {
    let mut out: Vec<usize> = std::iter::successors(Some(1usize), |k| k.checked_mul(2))
        .take_while(|&k| k <= cores)
        .collect();
    if cores > 0 && out.last() != Some(&cores) {
        out.push(cores);
    }
    out
}

fn config(name: &str, cores: &[usize], addr: std::net::SocketAddr, messages: u64) -> String {
    let list: Vec<String> = cores.iter().map(usize::to_string).collect();
    format!(
        r#"[runtime]
cores = [{cores}]
[metrics]
address = ""
log_interval = "0s"
[[sink]]
name = "{name}"
type = "mqtt"
source = "generate"
window_messages = 10000
[sink.generate]
partitions = {partitions}
size = {SIZE}
messages = {messages}
[sink.mqtt]
address = "{addr}"
protocol = "5"
connections = 1
max_inflight = 1000
qos = 1
topic = "bench/scaling"
topic_aliases = 0
"#,
        cores = list.join(", "),
        partitions = cores.len(),
    )
}

/// One run with `k` shards: msgs/s from the engine's start to its exit.
fn one(k: usize, cores: &[usize], per_shard: u64, run: usize) -> Result<f64, String> {
    let broker = DiscardBroker::start(&[]).map_err(|e| format!("discard broker: {e}"))?;
    let total = per_shard * k as u64;
    let text = config(
        &format!("scale{k}r{run}"),
        &cores[..k],
        broker.addr(),
        total,
    );
    let start = Instant::now();
    let engine = ours::start_config(&text)?;
    let exited = engine.finish(start + Duration::from_secs(120 + total / 20_000))?;
    let got = broker.publishes()[1];
    if got < total {
        return Err(format!(
            "{k} shards: the discard broker saw {got} QoS 1 messages of {total}"
        ));
    }
    Ok(total as f64 / exited.duration_since(start).as_secs_f64())
}

/// A line of the scaling chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// The generate source to the discard broker: the engine alone, no Iggy.
    GenerateMqtt,
    /// Iggy to the discard broker.
    IggyMqtt,
    /// Iggy to the discard S3 endpoint.
    IggyS3,
}

impl Path {
    const EACH: [Path; 3] = [Path::GenerateMqtt, Path::IggyMqtt, Path::IggyS3];

    fn name(self) -> &'static str {
        match self {
            Path::GenerateMqtt => "generate_mqtt_discard",
            Path::IggyMqtt => "iggy_mqtt_discard",
            Path::IggyS3 => "iggy_s3_discard",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Path::GenerateMqtt => "generate -> MQTT QoS 1 discard broker (engine in-process)",
            Path::IggyMqtt => "Iggy -> spillway -> MQTT QoS 1 discard broker",
            Path::IggyS3 => "Iggy -> spillway -> S3 json_lines discard endpoint",
        }
    }

    fn color(self) -> &'static str {
        match self {
            Path::GenerateMqtt => "steelblue",
            Path::IggyMqtt => "darkorange",
            Path::IggyS3 => "seagreen",
        }
    }
}

/// Messages per shard of the Iggy paths (they are filled into Iggy beforehand).
const IGGY_PER_SHARD: u64 = 250_000;
const IGGY_PER_SHARD_QUICK: u64 = 10_000;

/// Runs every step of every path; rows, the text report, and the chart written next to the
/// JSON.
pub fn run(quick: bool, progress: &mut dyn FnMut(&str)) -> Result<(Vec<Row>, String), String> {
    let cores = Machine::detect().cores;
    let per_shard = if quick { PER_SHARD_QUICK } else { PER_SHARD };
    let iggy_per_shard = if quick {
        IGGY_PER_SHARD_QUICK
    } else {
        IGGY_PER_SHARD
    };
    let runs = if quick { 1 } else { 3 };
    let steps = steps(cores.len());
    let max_k = steps.last().copied().unwrap_or(1);

    let binary = engine_process::binary()?;
    let iggy = crate::harness::iggy()?;
    let servers = Servers::start(&[Dest::DiscardMqtt, Dest::DiscardS3])?;
    let stream = pipeline::fresh_stream(&iggy, "scaling")?;
    progress(&format!(
        "filling {max_k} partitions with {iggy_per_shard} messages of {SIZE} B"
    ));
    pipeline::fill_topic(
        &iggy,
        &stream,
        "events",
        u32::try_from(max_k).map_err(|_| "too many cores".to_owned())?,
        iggy_per_shard,
        SIZE,
    )?;

    let mut rows = Vec::new();
    let mut text = format!(
        "\nscaling: 1, 2, 4 … shards up to every core ({} available), one partition and one connection per shard, 100 B messages, median of {runs}\n",
        cores.len()
    );
    let mut series = Vec::new();
    let mut seq = 0;
    for path in Path::EACH {
        let mut points = Vec::new();
        for &k in &steps {
            let mut rates = Vec::new();
            for r in 0..runs {
                progress(&format!(
                    "{}: {k} shards, run {}/{runs}",
                    path.name(),
                    r + 1
                ));
                seq += 1;
                let rate = match path {
                    Path::GenerateMqtt => one(k, &cores, per_shard, r)?,
                    Path::IggyMqtt | Path::IggyS3 => {
                        let name = format!("scale{seq}");
                        let job = Job {
                            iggy: &iggy,
                            stream: &stream,
                            topic: "events",
                            partitions: u32::try_from(k)
                                .map_err(|_| "too many cores".to_owned())?,
                            per_partition: iggy_per_shard,
                            size: SIZE,
                            cores: &cores[..k],
                            name: &name,
                            dest: if path == Path::IggyMqtt {
                                Dest::DiscardMqtt
                            } else {
                                Dest::DiscardS3
                            },
                            extra: "",
                        };
                        let m = pipeline::run_once(&binary, &job, &servers)
                            .map_err(|e| format!("{} with {k} shards: {e}", path.name()))?;
                        (iggy_per_shard * k as u64) as f64 / m.wall.as_secs_f64()
                    }
                };
                rates.push(rate);
            }
            rates.sort_by(f64::total_cmp);
            points.push((k, rates[rates.len() / 2]));
        }
        let base = points.first().map_or(0.0, |p| p.1);
        let mut body = Vec::new();
        for &(k, rate) in &points {
            let efficiency = if base > 0.0 {
                rate / (k as f64 * base)
            } else {
                0.0
            };
            let scenario = format!("scaling_{}_100B_{k}_shards", path.name());
            rows.push(Row {
                scenario: scenario.clone(),
                metric: "msgs_per_s",
                ours: rate,
                peer: f64::NAN,
                peer_name: "-",
                unit: "msgs/s",
                better: Better::Higher,
            });
            rows.push(Row {
                scenario,
                metric: "efficiency_vs_linear",
                ours: efficiency,
                peer: f64::NAN,
                peer_name: "-",
                unit: "rate(k) / (k x rate(1))",
                better: Better::Neither,
            });
            body.push([
                k.to_string(),
                format!("{rate:.0}"),
                format!("{:.0}", rate / k as f64),
                format!("{:.0}%", efficiency * 100.0),
            ]);
        }
        let n = if path == Path::GenerateMqtt {
            per_shard
        } else {
            iggy_per_shard
        };
        let _ = writeln!(text, "\n  {} ({n} messages per shard)", path.what());
        let head = [
            "shards".to_owned(),
            "msgs/s".to_owned(),
            "msgs/s per shard".to_owned(),
            "of linear".to_owned(),
        ];
        text.push_str(&report::text_table(&head, &body, |_| false));
        if let (Some(&(k, rate)), true) = (points.last(), base > 0.0) {
            let _ = writeln!(
                text,
                "  {k} shards reach {:.0}% of linear ({:.2}x one shard)",
                rate / (k as f64 * base) * 100.0,
                rate / base
            );
        }
        series.push(Series {
            name: path.name().replace('_', " "),
            color: path.color(),
            dashed: false,
            points: points.iter().map(|&(k, r)| (k as f64, r)).collect(),
        });
        series.push(Series {
            name: "linear".into(),
            color: path.color(),
            dashed: true,
            points: points
                .iter()
                .map(|&(k, _)| (k as f64, base * k as f64))
                .collect(),
        });
    }
    if let Ok(mut admin) = iggy.admin() {
        let _ = admin.delete_stream(&stream);
    }
    let _ = writeln!(
        text,
        "  the servers ({}) and the engine's control thread share these cores with the shards",
        crate::harness::iggy_name(&iggy)
    );
    let chart = Chart {
        title: "msgs/s against shards (dashed: linear from one shard)".into(),
        x_label: "shards".into(),
        y_label: "msgs/s".into(),
        log_y: false,
        fmt_x: |v| format!("{v:.0}"),
        fmt_y: |v| format!("{:.2}M", v / 1e6),
        series,
    };
    let path = report::default_json_path("scaling").with_extension("svg");
    let _ = match chart.write(&path) {
        Ok(()) => {
            report::picture(&path, "msgs/s against shards");
            writeln!(text, "  chart: {}", path.display())
        }
        Err(e) => writeln!(text, "  chart not written ({}: {e})", path.display()),
    };
    Ok((rows, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_powers_of_two_and_every_core() {
        assert_eq!(steps(1), vec![1]);
        assert_eq!(steps(2), vec![1, 2]);
        assert_eq!(steps(6), vec![1, 2, 4, 6]);
        assert_eq!(steps(64), vec![1, 2, 4, 8, 16, 32, 64]);
        assert!(steps(0).is_empty());
    }

    #[test]
    fn the_config_puts_one_partition_on_each_shard() {
        let addr = "127.0.0.1:1883".parse().unwrap_or_else(|_| unreachable!());
        let text = config("s", &[3, 5], addr, 10);
        let cfg = spillway::config::parse(&text, std::path::Path::new("<t>"), &|_| None)
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(cfg.sinks.len(), 1);
        assert!(text.contains("cores = [3, 5]") && text.contains("partitions = 2"));
    }
}
