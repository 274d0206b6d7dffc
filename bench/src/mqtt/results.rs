//! The scenario's results: medians per client, broker and QoS; the JSON rows; the table; one
//! line per goal of the issue.

use crate::report::{self, Better, Row};

use super::{BrokerKind, Client, DISCARD_WINDOW, PEER, SIZE, Sample, peer};
use crate::harness::median;

const NO_PEER: &str = "none (built without peers)";
const PEER_SKIPPED: &str = "none (not measured)";

/// The goals.
const TARGET_THROUGHPUT_VS_PEER: f64 = 1.5;
/// mosquitto at or above this share of a core counts as saturated.
const SATURATED_PERCENT: f64 = 90.0;
const TARGET_CPU_VS_PEER: f64 = 4.0;
const TARGET_DISCARD_QOS1: f64 = 1.5e6;

/// The medians of one client on one broker at one QoS.
#[derive(Debug, Clone)]
pub(super) struct Measured {
    pub(super) broker: BrokerKind,
    pub(super) qos: u8,
    pub(super) client: Client,
    messages: u64,
    window: u16,
    msgs_per_s: f64,
    /// Slowest and fastest run.
    range: (f64, f64),
    cpu_us_per_msg: f64,
    broker_percent: f64,
    /// Allocations on the engine's shard thread per message sent (ours; NaN for the peer).
    allocs_per_msg: f64,
    /// Runs whose deliveries differ from the messages sent (or that stalled): "run: got".
    pub(super) bad_runs: Vec<String>,
    delivered_min: u64,
}

impl Measured {
    /// Messages per second of publisher CPU: what one core of this client carries.
    fn msgs_per_cpu_s(&self) -> f64 {
        1e6 / self.cpu_us_per_msg
    }
}

pub(super) fn summarize(
    broker: BrokerKind,
    qos: u8,
    client: Client,
    window: u16,
    samples: &[Sample],
) -> Measured {
    let rates: Vec<f64> = samples
        .iter()
        .map(|s| s.sent as f64 / s.wall.as_secs_f64())
        .collect();
    let bad_runs = samples
        .iter()
        .enumerate()
        .filter(|(_, s)| s.stalled || s.delivered != s.sent)
        .map(|(i, s)| {
            format!(
                "run {}: {} of {} delivered{}",
                i + 1,
                s.delivered,
                s.sent,
                if s.stalled { " (stalled)" } else { "" }
            )
        })
        .collect();
    Measured {
        broker,
        qos,
        client,
        messages: samples.first().map_or(0, |s| s.sent),
        window,
        msgs_per_s: median(rates.clone()),
        range: (
            rates.iter().copied().fold(f64::INFINITY, f64::min),
            rates.iter().copied().fold(0.0, f64::max),
        ),
        cpu_us_per_msg: median(
            samples
                .iter()
                .map(|s| s.cpu.as_secs_f64() * 1e6 / s.sent as f64)
                .collect(),
        ),
        broker_percent: median(samples.iter().map(|s| s.broker_percent).collect()),
        allocs_per_msg: median(
            samples
                .iter()
                .map(|s| {
                    s.shard_allocs
                        .map_or(f64::NAN, |a| a as f64 / s.sent as f64)
                })
                .collect(),
        ),
        bad_runs,
        delivered_min: samples.iter().map(|s| s.delivered).min().unwrap_or(0),
    }
}

fn scenario_name(broker: BrokerKind, qos: u8, window: u16) -> String {
    format!("{}_qos{qos}_{SIZE}B_window{window}", broker.name())
}

/// The JSON rows: msgs/s, CPU µs/msg, and (mosquitto) the broker's CPU share and the
/// deliveries counted, ours beside the peer.
pub(super) fn rows(results: &[Measured]) -> Vec<Row> {
    let mut rows = Vec::new();
    for o in results.iter().filter(|m| m.client == Client::Ours) {
        let p = results
            .iter()
            .find(|m| m.client == Client::Peer && m.broker == o.broker && m.qos == o.qos);
        let peer_name = match p {
            Some(_) => PEER,
            None if peer::AVAILABLE => PEER_SKIPPED,
            None => NO_PEER,
        };
        let scenario = scenario_name(o.broker, o.qos, o.window);
        let mut row = |metric, ours: f64, peer: Option<f64>, unit, better| {
            rows.push(Row {
                scenario: scenario.clone(),
                metric,
                ours,
                peer: peer.unwrap_or(f64::NAN),
                peer_name,
                unit,
                better,
            });
        };
        row(
            "msgs_per_s",
            o.msgs_per_s,
            p.map(|p| p.msgs_per_s),
            "msgs/s",
            Better::Higher,
        );
        row(
            "cpu_us_per_msg",
            o.cpu_us_per_msg,
            p.map(|p| p.cpu_us_per_msg),
            "CPU µs/msg",
            Better::Lower,
        );
        if o.broker == BrokerKind::Mosquitto {
            row(
                "broker_cpu_percent",
                o.broker_percent,
                p.map(|p| p.broker_percent),
                "% of a core",
                Better::Neither,
            );
        }
        row(
            "delivered",
            o.delivered_min as f64,
            p.map(|p| p.delivered_min as f64),
            "messages (fewest of the runs)",
            Better::Neither,
        );
        if o.allocs_per_msg.is_finite() {
            rows.push(Row::alone(
                &scenario,
                "shard_allocs_per_msg",
                o.allocs_per_msg,
                "allocations on the shard thread per message (the engine's start and end included)",
                Better::Lower,
            ));
        }
    }
    // Peer rows without an ours beside them (only the peer was measured).
    for p in results.iter().filter(|m| m.client == Client::Peer) {
        if results
            .iter()
            .any(|o| o.client == Client::Ours && o.broker == p.broker && o.qos == p.qos)
        {
            continue;
        }
        let scenario = scenario_name(p.broker, p.qos, p.window);
        for (metric, value, unit, better) in [
            ("msgs_per_s", p.msgs_per_s, "msgs/s", Better::Higher),
            (
                "cpu_us_per_msg",
                p.cpu_us_per_msg,
                "CPU µs/msg",
                Better::Lower,
            ),
        ] {
            rows.push(Row {
                scenario: scenario.clone(),
                metric,
                ours: f64::NAN,
                peer: value,
                peer_name: PEER,
                unit,
                better,
            });
        }
    }
    rows
}

pub(super) fn results_table(results: &[Measured]) -> String {
    let head = [
        "broker",
        "QoS",
        "client",
        "messages",
        "window",
        "msgs/s",
        "msgs/s runs",
        "CPU µs/msg",
        "msgs/CPU-s",
        "broker CPU",
        "shard allocs/msg",
        "delivered",
    ]
    .map(str::to_owned);
    let body: Vec<[String; 12]> = results
        .iter()
        .map(|m| {
            [
                m.broker.name().to_owned(),
                m.qos.to_string(),
                m.client.name().to_owned(),
                m.messages.to_string(),
                m.window.to_string(),
                format!("{:.0}", m.msgs_per_s),
                format!("{:.0}-{:.0}", m.range.0, m.range.1),
                format!("{:.2}", m.cpu_us_per_msg),
                format!("{:.0}", m.msgs_per_cpu_s()),
                if m.broker_percent.is_finite() {
                    format!("{:.0}%", m.broker_percent)
                } else {
                    "-".to_owned()
                },
                if m.allocs_per_msg.is_finite() {
                    format!("{:.4}", m.allocs_per_msg)
                } else {
                    "-".to_owned()
                },
                if m.bad_runs.is_empty() {
                    "all".to_owned()
                } else {
                    format!("MISMATCH: {}", m.bad_runs.join("; "))
                },
            ]
        })
        .collect();
    report::text_table(&head, &body, |col| col < 3 || col == 11)
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

/// One line per goal of the issue.
pub(super) fn target_lines(results: &[Measured]) -> Vec<String> {
    let find = |broker: BrokerKind, qos: u8, client: Client| {
        results
            .iter()
            .find(|m| m.broker == broker && m.qos == qos && m.client == client)
    };
    let mut lines = Vec::new();
    for qos in [1, 2] {
        let what = format!(
            "QoS {qos} on mosquitto: msgs/s >= {TARGET_THROUGHPUT_VS_PEER}x rumqttc's, or the \
             broker saturated (>= {SATURATED_PERCENT:.0}% of a core)"
        );
        lines.push(
            match (
                find(BrokerKind::Mosquitto, qos, Client::Ours),
                find(BrokerKind::Mosquitto, qos, Client::Peer),
            ) {
                (Some(o), p) => {
                    let ratio = p.map(|p| o.msgs_per_s / p.msgs_per_s);
                    let saturated = o.broker_percent >= SATURATED_PERCENT;
                    let faster = ratio.is_some_and(|r| r >= TARGET_THROUGHPUT_VS_PEER);
                    format!(
                        "{what}: {} ({}, mosquitto at {:.1}% during ours' runs)",
                        verdict(faster || saturated),
                        ratio.map_or("rumqttc not measured".to_owned(), |r| format!("{r:.2}x")),
                        o.broker_percent
                    )
                }
                _ => format!("{what}: not measured"),
            },
        );
    }
    for qos in 0..=2u8 {
        let what = format!(
            "QoS {qos} on mosquitto: publisher CPU/msg <= 1/{TARGET_CPU_VS_PEER} of rumqttc's"
        );
        lines.push(
            match (
                find(BrokerKind::Mosquitto, qos, Client::Ours),
                find(BrokerKind::Mosquitto, qos, Client::Peer),
            ) {
                (Some(o), Some(p)) => {
                    let r = p.cpu_us_per_msg / o.cpu_us_per_msg;
                    format!(
                        "{what}: {} ({r:.2}x less: {:.2} vs {:.2} µs)",
                        verdict(r >= TARGET_CPU_VS_PEER),
                        o.cpu_us_per_msg,
                        p.cpu_us_per_msg
                    )
                }
                _ => format!("{what}: not measured"),
            },
        );
    }
    let what = format!(
        ">= {:.1}M msgs/s of QoS 1 on one core against the discard broker (window \
         {DISCARD_WINDOW})",
        TARGET_DISCARD_QOS1 / 1e6
    );
    lines.push(match find(BrokerKind::Discard, 1, Client::Ours) {
        Some(o) => format!(
            "{what}: wall {:.2}M msgs/s on the one shard core: {}; per publisher CPU second \
             {:.2}M msgs: {}",
            o.msgs_per_s / 1e6,
            verdict(o.msgs_per_s >= TARGET_DISCARD_QOS1),
            o.msgs_per_cpu_s() / 1e6,
            verdict(o.msgs_per_cpu_s() >= TARGET_DISCARD_QOS1),
        ),
        None => format!("{what}: not measured"),
    });
    let what = format!(
        "QoS 1, {SIZE} B, to the discard broker: engine CPU <= {TARGET_DISCARD_QOS1_CPU_US} µs \
         per message and no allocation per message on the shard"
    );
    lines.push(match find(BrokerKind::Discard, 1, Client::Ours) {
        Some(o) => format!(
            "{what}: {} ({:.3} µs/msg; {:.4} shard allocations/msg, the engine's start and end \
             included)",
            verdict(
                o.cpu_us_per_msg <= TARGET_DISCARD_QOS1_CPU_US && o.allocs_per_msg < ALLOCS_NONE
            ),
            o.cpu_us_per_msg,
            o.allocs_per_msg
        ),
        None => format!("{what}: not measured"),
    });
    lines
}

/// Issue 17's end-to-end codec target: engine CPU per QoS 1 message against the discard broker.
const TARGET_DISCARD_QOS1_CPU_US: f64 = 0.15;
/// Below this many allocations per message a run allocates nothing per message: what it
/// allocates is its start, its connection and its end, spread over its millions of messages.
const ALLOCS_NONE: f64 = 0.001;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_and_targets() {
        let m = |client, broker, qos, rate: f64, cpu: f64, pct: f64| Measured {
            broker,
            qos,
            client,
            messages: 1000,
            window: 100,
            msgs_per_s: rate,
            range: (rate, rate),
            cpu_us_per_msg: cpu,
            broker_percent: pct,
            allocs_per_msg: f64::NAN,
            bad_runs: Vec::new(),
            delivered_min: 1000,
        };
        let results = vec![
            m(Client::Ours, BrokerKind::Mosquitto, 1, 100_000.0, 1.0, 95.0),
            m(Client::Peer, BrokerKind::Mosquitto, 1, 90_000.0, 5.0, 80.0),
            m(Client::Ours, BrokerKind::Discard, 1, 2e6, 0.5, f64::NAN),
        ];
        let rows = rows(&results);
        let r = rows
            .iter()
            .find(|r| r.metric == "cpu_us_per_msg" && r.scenario.starts_with("mosquitto_qos1"));
        assert_eq!(r.and_then(Row::ratio), Some(5.0));
        assert!(
            rows.iter()
                .filter(|r| r.metric == "broker_cpu_percent")
                .all(|r| r.ratio().is_none())
        );
        let lines = target_lines(&results);
        assert!(
            lines[0].contains(": met (1.11x, mosquitto at 95.0%"),
            "{}",
            lines[0]
        );
        assert!(lines[2].contains("not measured"), "{}", lines[2]);
        assert!(lines[3].contains(": met (5.00x less"), "{}", lines[3]);
        assert!(
            lines[5].contains("wall 2.00M msgs/s on the one shard core: met"),
            "{}",
            lines[5]
        );
    }
}
