//! The figures of a client's runs: their medians (`Summary`), the rows that set one of ours
//! beside another, and the table of every client.

use super::*;

/// One run of one client, checked.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sample {
    pub(super) measure: Measure,
    /// Bytes stored.
    pub(super) stored: u64,
}

/// The medians of one client.
#[derive(Debug, Clone, Copy)]
pub(super) struct Summary {
    pub(super) client: Client,
    pub(super) payload_mb_s: f64,
    pub(super) payload_mb_s_range: (f64, f64),
    pub(super) object_mb_s: f64,
    pub(super) cpu_s_per_gib: f64,
    /// s3s-fs's CPU in % of one core.
    pub(super) server_percent: f64,
    /// The stand-in's CPU in % of one core.
    pub(super) stand_in_percent: f64,
    /// Stored bytes per payload byte.
    pub(super) size_ratio: f64,
    /// Requests per GiB of payload (NaN where not counted).
    pub(super) requests_per_gib: f64,
    /// The engine's RSS rise over the run, MiB (NaN where not measured).
    pub(super) rss_growth_mib: f64,
    /// An Iceberg table's snapshots per minute of the run and data files per snapshot (NaN
    /// without a table).
    pub(super) commits_per_min: f64,
    pub(super) files_per_commit: f64,
}

pub(super) fn summarize(client: Client, samples: &[Sample], payload: u64) -> Summary {
    let gib = payload as f64 / GIB;
    let secs = |s: &Sample| s.measure.wall.as_secs_f64();
    let mb: Vec<f64> = samples
        .iter()
        .map(|s| payload as f64 / secs(s) / 1e6)
        .collect();
    let percent =
        |d: Option<Duration>, s: &Sample| d.map_or(f64::NAN, |d| 100.0 * d.as_secs_f64() / secs(s));
    Summary {
        client,
        payload_mb_s_range: (
            mb.iter().copied().fold(f64::INFINITY, f64::min),
            mb.iter().copied().fold(0.0, f64::max),
        ),
        payload_mb_s: median(mb),
        object_mb_s: median(
            samples
                .iter()
                .map(|s| s.stored as f64 / secs(s) / 1e6)
                .collect(),
        ),
        cpu_s_per_gib: median(
            samples
                .iter()
                .map(|s| s.measure.split.measured.as_secs_f64() / gib)
                .collect(),
        ),
        server_percent: median(
            samples
                .iter()
                .map(|s| percent(s.measure.server_cpu, s))
                .collect(),
        ),
        stand_in_percent: median(
            samples
                .iter()
                .map(|s| percent(Some(s.measure.split.stand_in), s))
                .collect(),
        ),
        size_ratio: median(
            samples
                .iter()
                .map(|s| s.stored as f64 / payload as f64)
                .collect(),
        ),
        requests_per_gib: median(
            samples
                .iter()
                .map(|s| s.measure.requests.map_or(f64::NAN, |r| r as f64 / gib))
                .collect(),
        ),
        rss_growth_mib: median(
            samples
                .iter()
                .map(|s| {
                    s.measure
                        .rss_growth
                        .map_or(f64::NAN, |b| b as f64 / MIB as f64)
                })
                .collect(),
        ),
        commits_per_min: median(
            samples
                .iter()
                .map(|s| {
                    s.measure
                        .table
                        .map_or(f64::NAN, |(c, _)| c as f64 * 60.0 / secs(s))
                })
                .collect(),
        ),
        files_per_commit: median(
            samples
                .iter()
                .map(|s| {
                    s.measure
                        .table
                        .map_or(f64::NAN, |(c, f)| f as f64 / c.max(1) as f64)
                })
                .collect(),
        ),
    }
}

/// The rows of one of ours against another of ours on the same data (`base`, named
/// `base_name`): speed, CPU, object size and memory.
pub(super) fn versus(
    scenario: &str,
    o: &Summary,
    base: Option<&Summary>,
    base_name: &'static str,
) -> Vec<Row> {
    [
        (
            "MB_per_s",
            "MB/s of payload",
            Better::Higher,
            o.payload_mb_s,
            base.map(|z| z.payload_mb_s),
        ),
        (
            "cpu_s_per_GiB",
            "CPU s/GiB of payload",
            Better::Lower,
            o.cpu_s_per_gib,
            base.map(|z| z.cpu_s_per_gib),
        ),
        (
            "stored_per_payload",
            "object bytes per payload byte",
            Better::Lower,
            o.size_ratio,
            base.map(|z| z.size_ratio),
        ),
        (
            "rss_rise_MiB",
            "MiB of RSS over the process's start level",
            Better::Lower,
            o.rss_growth_mib,
            base.map(|z| z.rss_growth_mib),
        ),
    ]
    .into_iter()
    .map(|(metric, unit, better, ours, peer)| Row {
        scenario: scenario.to_owned(),
        metric,
        ours,
        peer: peer.unwrap_or(f64::NAN),
        peer_name: base_name,
        unit,
        better,
    })
    .collect()
}

pub(super) fn summary_table(summaries: &[Summary]) -> String {
    let head = [
        "client",
        "payload MB/s",
        "runs",
        "object MB/s",
        "CPU s/GiB",
        "s3s-fs CPU",
        "stand-in CPU",
        "stored/payload",
        "requests/GiB",
        "RSS rise MiB",
    ]
    .map(str::to_owned);
    let pct = |v: f64| {
        if v.is_finite() {
            format!("{v:.0}%")
        } else {
            "-".to_owned()
        }
    };
    let num = |v: f64, places: usize| {
        if v.is_finite() {
            format!("{v:.places$}")
        } else {
            "-".to_owned()
        }
    };
    let body: Vec<[String; 10]> = summaries
        .iter()
        .map(|s| {
            [
                s.client.name(),
                format!("{:.1}", s.payload_mb_s),
                format!(
                    "{:.0}-{:.0}",
                    s.payload_mb_s_range.0, s.payload_mb_s_range.1
                ),
                format!("{:.1}", s.object_mb_s),
                format!("{:.3}", s.cpu_s_per_gib),
                pct(s.server_percent),
                if s.client.is_ours() {
                    pct(s.stand_in_percent)
                } else {
                    "-".to_owned()
                },
                format!("{:.3}", s.size_ratio),
                num(s.requests_per_gib, 1),
                num(s.rss_growth_mib, 0),
            ]
        })
        .collect();
    report::text_table(&head, &body, |col| col == 0)
}

pub(super) fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

/// The report's rows: each codec of ours against the peer (the uncompressed one) or alone,
/// realistic rows, wire integrity, requests and memory, Parquet, split keys, the store limit.
pub(super) fn rows_of(summaries: &[Summary], plan: &Plan, payload_name: &str) -> Vec<Row> {
    let find = |c: Client| summaries.iter().find(|s| s.client == c);
    let peer = find(Client::Peer);
    let limit = find(Client::Uploader);
    let peer_name = if peer.is_some() { PEER } else { NO_PEER };
    let mut rows = Vec::new();
    for codec in [Codec::None, Codec::Gzip, Codec::Zstd] {
        let Some(o) = find(Client::Ours(codec)) else {
            continue;
        };
        // The peer uploads the uncompressed json_lines: it is the peer of that row only.
        let p = if codec == Codec::None { peer } else { None };
        let name = if codec == Codec::None { peer_name } else { "-" };
        let scenario = format!("iggy_to_s3_{payload_name}_1KiB_json_lines_{}", codec.name());
        rows.push(Row {
            scenario: scenario.clone(),
            metric: "MB_per_s",
            ours: o.payload_mb_s,
            peer: p.map_or(f64::NAN, |p| p.payload_mb_s),
            peer_name: name,
            unit: "MB/s of payload",
            better: Better::Higher,
        });
        rows.push(Row {
            scenario: scenario.clone(),
            metric: "cpu_s_per_GiB",
            ours: o.cpu_s_per_gib,
            peer: p.map_or(f64::NAN, |p| p.cpu_s_per_gib),
            peer_name: name,
            unit: "CPU s/GiB of payload",
            better: Better::Lower,
        });
        rows.push(Row {
            scenario,
            metric: "s3s_fs_cpu_percent",
            ours: o.server_percent,
            peer: p.map_or(f64::NAN, |p| p.server_percent),
            peer_name: name,
            unit: "% of a core",
            better: Better::Neither,
        });
    }
    // The codecs on realistic rows: speed, CPU and what is stored per payload byte, each
    // beside the same codec on the padded 1 KiB payloads.
    for codec in [Codec::None, Codec::Gzip, Codec::Zstd] {
        if let Some(o) = find(Client::OursOrders(codec)) {
            let scenario = format!(
                "iggy_to_s3_{}_order_rows_json_lines_{}",
                plan.messages(),
                codec.name()
            );
            rows.extend(versus(
                &scenario,
                o,
                find(Client::Ours(codec)),
                "ours, same codec, padded 1 KiB payloads",
            ));
        }
    }
    // What each way of protecting the bodies on the wire costs, beside the default (crc32c).
    for integrity in [
        ours::Integrity::Nothing,
        ours::Integrity::Md5,
        ours::Integrity::Signed,
    ] {
        let (Some(o), Some(base)) = (
            find(Client::OursWith(integrity)),
            find(Client::Ours(Codec::None)),
        ) else {
            continue;
        };
        rows.push(Row {
            scenario: format!(
                "iggy_to_s3_{payload_name}_1KiB_json_lines_none_{}_vs_crc32c",
                integrity.tag()
            ),
            metric: "cpu_s_per_GiB",
            ours: o.cpu_s_per_gib,
            peer: base.cpu_s_per_gib,
            peer_name: "ours, crc32c (default)",
            unit: "CPU s/GiB of payload",
            better: Better::Lower,
        });
    }
    // Requests and memory of each of ours: 64 MiB multipart objects against objects of one
    // part (one PutObject each), same data.
    let single = find(Client::OursSingle);
    for (o, tag) in [
        (find(Client::Ours(Codec::None)), "none"),
        (find(Client::Ours(Codec::Gzip)), "gzip"),
        (find(Client::Ours(Codec::Zstd)), "zstd"),
        (single, "none_8MiB_objects"),
        (find(Client::OursRaw), "raw"),
    ] {
        let Some(o) = o else {
            continue;
        };
        let scenario = if tag == "raw" {
            format!("iggy_to_s3_{payload_name}_1KiB_raw_none")
        } else {
            format!("iggy_to_s3_{payload_name}_1KiB_json_lines_{tag}")
        };
        rows.push(Row::alone(
            &scenario,
            "requests_per_GiB",
            o.requests_per_gib,
            "S3 requests per GiB of payload",
            Better::Lower,
        ));
        rows.push(Row::alone(
            &scenario,
            "rss_rise_MiB",
            o.rss_growth_mib,
            "MiB of RSS over the process's start level",
            Better::Lower,
        ));
        if tag == "none_8MiB_objects" || tag == "raw" {
            for (metric, unit, better, value) in [
                (
                    "MB_per_s",
                    "MB/s of payload",
                    Better::Higher,
                    o.payload_mb_s,
                ),
                (
                    "cpu_s_per_GiB",
                    "CPU s/GiB of payload",
                    Better::Lower,
                    o.cpu_s_per_gib,
                ),
                (
                    "s3s_fs_cpu_percent",
                    "% of a core",
                    Better::Neither,
                    o.server_percent,
                ),
            ] {
                rows.push(Row::alone(&scenario, metric, value, unit, better));
            }
        }
    }
    // Parquet against json_lines with zstd, on the same data: speed, CPU and object size.
    let zstd_lines = find(Client::Ours(Codec::Zstd));
    for pq in [Pq::Zstd, Pq::Snappy, Pq::Typed] {
        if let Some(o) = find(Client::OursParquet(pq)) {
            let scenario = format!("iggy_to_s3_{payload_name}_1KiB_parquet_{}", pq.tag());
            rows.extend(versus(&scenario, o, zstd_lines, "ours, json_lines, zstd"));
        }
    }
    // Parquet committed to an Iceberg table against the same Parquet as plain objects: what the
    // commits cost, and how often they came.
    if let Some(o) = find(Client::OursIceberg) {
        let scenario = format!("iggy_to_s3_{payload_name}_1KiB_parquet_zstd_iceberg");
        rows.extend(versus(
            &scenario,
            o,
            find(Client::OursParquet(Pq::Zstd)),
            "ours, parquet, zstd, plain objects",
        ));
        for (metric, value, unit) in [
            (
                "commits_per_min",
                o.commits_per_min,
                "snapshots committed per minute",
            ),
            (
                "files_per_commit",
                o.files_per_commit,
                "data files per snapshot",
            ),
        ] {
            rows.push(Row::alone(&scenario, metric, value, unit, Better::Neither));
        }
    }
    // Keys split by a field against the same json_lines + zstd without: eight open objects
    // per partition instead of one.
    if let Some(o) = find(Client::OursSplit) {
        let scenario = format!("iggy_to_s3_{payload_name}_1KiB_json_lines_zstd_split_by_site");
        rows.extend(versus(
            &scenario,
            o,
            zstd_lines,
            "ours, json_lines, zstd, one object per partition",
        ));
    }
    if let (Some(o), Some(l)) = (find(Client::Ours(Codec::None)), limit) {
        rows.push(Row {
            scenario: format!("iggy_to_s3_{payload_name}_1KiB_json_lines_none_vs_store_limit"),
            metric: "object_MB_per_s",
            ours: o.object_mb_s,
            peer: l.object_mb_s,
            peer_name: LIMIT,
            unit: "MB/s stored",
            better: Better::Higher,
        });
        rows.push(Row {
            scenario: format!("store_limit_{payload_name}_json_lines"),
            metric: "s3s_fs_cpu_percent",
            ours: f64::NAN,
            peer: l.server_percent,
            peer_name: LIMIT,
            unit: "% of a core",
            better: Better::Neither,
        });
    }
    rows
}
