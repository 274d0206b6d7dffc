//! `spillway-bench scaling`: the engine with 1, 2, 4, … shards up to every available core,
//! each shard publishing one partition's share of generated 100-byte messages over its own
//! MQTT connection (QoS 1, window 1000) to the in-process discard broker, which answers every
//! PUBLISH at once and keeps nothing. The work per shard is fixed, so with perfect scaling the
//! rate grows with the shard count; the report gives msgs/s, msgs/s per shard, the efficiency
//! against linear (`rate(k) / (k x rate(1))`) and an SVG chart (`target/bench/scaling.svg`).
//!
//! The discard broker's threads and the engine's control thread share the machine's cores
//! with the shards (no cores are set aside for them), so on a small machine the last step
//! measures contention as much as the engine: the report says how many cores there were.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use spillway::coremap::Machine;

use crate::mqtt::discard::DiscardBroker;
use crate::mqtt::ours;
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

/// Runs every step; rows, the text report, and the chart written next to the JSON.
pub fn run(quick: bool, progress: &mut dyn FnMut(&str)) -> Result<(Vec<Row>, String), String> {
    let cores = Machine::detect().cores;
    let per_shard = if quick { PER_SHARD_QUICK } else { PER_SHARD };
    let runs = if quick { 1 } else { 3 };
    let mut points = Vec::new();
    for k in steps(cores.len()) {
        let mut rates = Vec::new();
        for r in 0..runs {
            progress(&format!("{k} shards, run {}/{runs}", r + 1));
            rates.push(one(k, &cores, per_shard, r)?);
        }
        rates.sort_by(f64::total_cmp);
        points.push((k, rates[rates.len() / 2]));
    }
    let base = points.first().map_or(0.0, |p| p.1);
    let mut rows = Vec::new();
    let mut body = Vec::new();
    for &(k, rate) in &points {
        let efficiency = if base > 0.0 {
            rate / (k as f64 * base)
        } else {
            0.0
        };
        let scenario = format!("mqtt_qos1_discard_100B_{k}_shards");
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
    let chart = report::default_json_path("scaling").with_extension("svg");
    let chart_note = match write_chart(&chart, &points) {
        Ok(()) => format!("chart: {}", chart.display()),
        Err(e) => format!("chart not written ({}: {e})", chart.display()),
    };
    let head = [
        "shards".to_owned(),
        "msgs/s".to_owned(),
        "msgs/s per shard".to_owned(),
        "of linear".to_owned(),
    ];
    let mut text = format!(
        "\nscaling: MQTT QoS 1 to the discard broker, 100 B, {per_shard} messages per shard, median of {runs}, {} cores available\n",
        cores.len()
    );
    text.push_str(&report::text_table(&head, &body, |_| false));
    let last = points.last().copied();
    if let (Some((k, rate)), true) = (last, base > 0.0) {
        let _ = writeln!(
            text,
            "  {k} shards reach {:.0}% of linear ({:.2}x one shard); the discard broker and the control thread share these cores",
            rate / (k as f64 * base) * 100.0,
            rate / base
        );
    }
    let _ = writeln!(text, "  {chart_note}");
    Ok((rows, text))
}

/// A line chart of msgs/s against shards, with the linear line from one shard, as SVG.
fn write_chart(path: &Path, points: &[(usize, f64)]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, chart_svg(points))
}

fn chart_svg(points: &[(usize, f64)]) -> String {
    let (w, h, left, bottom, top, right) = (640.0, 400.0, 80.0, 50.0, 30.0, 20.0);
    let max_k = points.iter().map(|p| p.0).max().unwrap_or(1).max(1) as f64;
    let base = points.first().map_or(0.0, |p| p.1);
    let max_y = points
        .iter()
        .map(|p| p.1)
        .fold(base * max_k, f64::max)
        .max(1.0);
    let x = |k: f64| left + (k - 1.0) / (max_k - 1.0).max(1.0) * (w - left - right);
    let y = |v: f64| h - bottom - v / max_y * (h - bottom - top);
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="{w}" height="{h}" fill="white"/>
<text x="{tx}" y="18" text-anchor="middle">msgs/s against shards (MQTT QoS 1, discard broker)</text>
<line x1="{left}" y1="{yb}" x2="{xr}" y2="{yb}" stroke="black"/>
<line x1="{left}" y1="{top}" x2="{left}" y2="{yb}" stroke="black"/>
"#,
        tx = w / 2.0,
        yb = h - bottom,
        xr = w - right,
    );
    for &(k, _) in points {
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{k}</text>"#,
            x(k as f64),
            h - bottom + 18.0
        );
    }
    for i in 0..=4 {
        let v = max_y * f64::from(i) / 4.0;
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{:.2}M</text>"#,
            left - 6.0,
            y(v) + 4.0,
            v / 1e6
        );
    }
    let _ = writeln!(
        s,
        r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="gray" stroke-dasharray="4 4"/>"#,
        x(1.0),
        y(base),
        x(max_k),
        y(base * max_k)
    );
    let line: Vec<String> = points
        .iter()
        .map(|&(k, v)| format!("{:.1},{:.1}", x(k as f64), y(v)))
        .collect();
    let _ = writeln!(
        s,
        r#"<polyline points="{}" fill="none" stroke="steelblue" stroke-width="2"/>"#,
        line.join(" ")
    );
    for &(k, v) in points {
        let _ = writeln!(
            s,
            r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="steelblue"/>"#,
            x(k as f64),
            y(v)
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}">shards (dashed: linear from one shard)</text>"#,
        left,
        h - 10.0
    );
    s.push_str("</svg>\n");
    s
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
        let cfg = spillway::config::parse(&text, Path::new("<t>"), &|_| None)
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(cfg.sinks.len(), 1);
        assert!(text.contains("cores = [3, 5]") && text.contains("partitions = 2"));
    }

    #[test]
    fn the_chart_is_svg_with_every_point() {
        let svg = chart_svg(&[(1, 1e6), (2, 1.8e6), (4, 3.0e6)]);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<circle").count(), 3);
        assert!(svg.contains("stroke-dasharray"));
    }
}
