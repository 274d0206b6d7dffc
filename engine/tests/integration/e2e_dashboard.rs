//! The Grafana dashboard in the repository (`dashboards/spillway.json`) against a live engine:
//! every metric its queries name is on the engine's `/metrics`, and every panel's query, run by
//! a REAL Prometheus (Debian's `prometheus`, started here on a free loopback port, scraping the
//! engine every second), comes back without an error and with data. The engine runs the
//! generate source into a file sink and an S3 sink (s3s-fs), so the S3 panels have series too.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeSet;
use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use common::Engine;
use spillway_tests::{S3Server, ServerProcess, ports};

/// Every (panel title, query) of the dashboard, the template variable and Grafana's interval
/// put in as Grafana would with "All" chosen.
fn queries(dashboard: &serde_json::Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in dashboard["panels"].as_array().unwrap() {
        let title = p["title"].as_str().unwrap().to_owned();
        for t in p["targets"].as_array().unwrap() {
            let expr = t["expr"]
                .as_str()
                .unwrap()
                .replace("$sink", ".*")
                .replace("$__rate_interval", "15s");
            out.push((title.clone(), expr));
        }
    }
    out
}

/// The `spillway_*` names a query reads.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("spillway_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

/// A GET with HTTP/1.0 (no chunked reply); the body of a 200.
fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).ok()?;
    let reply = String::from_utf8(reply).ok()?;
    let (head, body) = reply.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.0 200")
        .then(|| body.to_owned())
        .or_else(|| head.starts_with("HTTP/1.1 200").then(|| body.to_owned()))
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn free_addr() -> SocketAddr {
    SocketAddr::from((
        std::net::Ipv4Addr::LOCALHOST,
        ports::free_loopback_port().unwrap(),
    ))
}

#[test]
fn every_dashboard_query_runs_against_a_live_engine_in_a_real_prometheus() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dashboards/spillway.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let queries = queries(&dashboard);
    assert!(queries.len() >= 10, "{queries:?}");

    let s3 = S3Server::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let metrics = free_addr();
    let cfg = format!(
        r#"
[metrics]
address = "{metrics}"
log_interval = "0s"

[[sink]]
name = "dash-file"
type = "file"
source = "generate"
[sink.file]
path = "{out}"
[sink.generate]
partitions = 2
rate = 2000
size = 100
messages = 0

[[sink]]
name = "dash-s3"
type = "s3"
source = "generate"
[sink.generate]
partitions = 2
rate = 2000
size = 100
messages = 0
[sink.s3]
bucket = "{bucket}"
endpoint = "{endpoint}"
region = "{region}"
access_key_id = "{ak}"
secret_access_key = "{sk}"
max_object_size = "64KiB"
"#,
        out = dir.path().join("out.jsonl").display(),
        bucket = s3.bucket(),
        endpoint = s3.endpoint(),
        region = s3.region(),
        ak = s3.access_key(),
        sk = s3.secret_key(),
    );
    let mut engine = Engine::start(dir.path(), "dash", &cfg);

    // Every metric the dashboard reads is on /metrics.
    let mut page = None;
    common::wait_until("the metrics page", Duration::from_secs(30), || {
        page = common::scrape_metrics(metrics).filter(|p| {
            p.contains("spillway_sink_uploaded_bytes_total{")
                && p.contains("spillway_lag_messages{")
        });
        page.is_some() || !engine.running()
    });
    let page = page.unwrap_or_else(|| panic!("no metrics page\n{}", engine.log()));
    let exported: BTreeSet<&str> = page
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    for (title, expr) in &queries {
        for name in metric_names(expr) {
            assert!(
                exported.contains(name.as_str()),
                "panel {title:?} reads {name}, which /metrics does not have"
            );
        }
    }

    // Every query, run by Prometheus over what it scraped, answers with data.
    let prom_addr = free_addr();
    let prom_cfg = dir.path().join("prometheus.yml");
    std::fs::write(
        &prom_cfg,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: spillway\n    static_configs:\n      - targets: ['{metrics}']\n"
        ),
    )
    .unwrap();
    let mut prom = ServerProcess::new(
        "prometheus",
        "prometheus",
        [
            format!("--config.file={}", prom_cfg.display()),
            format!("--storage.tsdb.path={}", dir.path().join("tsdb").display()),
            format!("--web.listen-address={prom_addr}"),
        ],
        dir.path().join("prometheus.log"),
    );
    prom.spawn().unwrap();
    prom.wait_until_accepting(prom_addr, Duration::from_secs(30))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut pending: Vec<(String, String)> = queries.clone();
    let mut last = String::new();
    while !pending.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        pending.retain(|(title, expr)| {
            let reply = http_get(
                prom_addr,
                &format!("/api/v1/query?query={}", url_encode(expr)),
            );
            let Some(reply) = reply else {
                last = format!("{title}: no answer for {expr}");
                return true;
            };
            let v: serde_json::Value = serde_json::from_str(&reply).unwrap();
            assert_eq!(v["status"], "success", "{title}: {expr}: {reply}");
            // A series with a number (not NaN: a quantile of nothing yet).
            let has_data = v["data"]["result"].as_array().is_some_and(|r| {
                r.iter().any(|s| {
                    s["value"][1]
                        .as_str()
                        .and_then(|x| x.parse::<f64>().ok())
                        .is_some_and(f64::is_finite)
                })
            });
            if has_data {
                // What each panel shows (cargo test -- --nocapture prints it).
                let series = v["data"]["result"].as_array().map_or(0, Vec::len);
                let first = &v["data"]["result"][0];
                eprintln!(
                    "{title} | {expr} | {series} series | {} = {}",
                    first["metric"], first["value"][1]
                );
            } else {
                last = format!("{title}: no data yet for {expr}: {reply}");
            }
            !has_data
        });
    }
    assert!(
        pending.is_empty(),
        "queries without data after 60 s: {pending:#?}\nlast: {last}\n{}",
        prom.log_tail(20)
    );
    assert!(engine.running(), "{}", engine.log());
}
