//! `spillway-bench all`: every scenario one after another, then one report.
//!
//! Each scenario still writes its own `target/bench/<scenario>.json`; the suite adds
//! `report.md` (the machine, then per scenario a table of ours, the peer and the ratio, and the
//! scenario's own text report) and `report.json` (the machine, how each scenario went, and all
//! rows in the common row format with the scenario's name). A scenario that fails does not stop
//! the others: the report says what failed and the command exits non-zero at the end.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use crate::report::{self, Row};

/// What a machine is, as the report states it.
#[derive(Debug, Clone, PartialEq)]
pub struct MachineInfo {
    /// Cores this process may run on.
    pub cores: usize,
    /// Cores the kernel has online.
    pub online: usize,
    pub cpu_model: String,
    pub kernel: String,
    /// 1, 5 and 15 minute load averages when the suite started.
    pub load: [f64; 3],
    pub memory_gib: f64,
    /// Which Iggy the scenarios read from (see [`crate::harness::iggy_source`]).
    pub iggy: String,
}

impl MachineInfo {
    /// Reads /proc (Linux); what cannot be read is reported as unknown.
    pub fn detect() -> MachineInfo {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpuinfo = read("/proc/cpuinfo");
        let loadavg = read("/proc/loadavg");
        let meminfo = read("/proc/meminfo");
        MachineInfo {
            cores: spillway::coremap::Machine::detect().cores.len(),
            online: std::thread::available_parallelism()
                .map(usize::from)
                .unwrap_or(0)
                .max(
                    cpuinfo
                        .lines()
                        .filter(|l| l.starts_with("processor"))
                        .count(),
                ),
            cpu_model: cpu_model(&cpuinfo),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
            load: load_average(&loadavg),
            memory_gib: mem_total_kib(&meminfo) as f64 / (1024.0 * 1024.0),
            iggy: crate::harness::iggy_source(),
        }
    }

    /// One line for a report.
    pub fn describe(&self) -> String {
        format!(
            "{} cores available ({} online), {}, kernel {}, {:.1} GiB memory, load average {:.2} {:.2} {:.2} at start",
            self.cores,
            self.online,
            if self.cpu_model.is_empty() {
                "CPU model unknown"
            } else {
                &self.cpu_model
            },
            if self.kernel.is_empty() {
                "unknown"
            } else {
                &self.kernel
            },
            self.memory_gib,
            self.load[0],
            self.load[1],
            self.load[2]
        )
    }
}

fn cpu_model(cpuinfo: &str) -> String {
    cpuinfo
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == "model name").then(|| v.trim().to_owned())
        })
        .unwrap_or_default()
}

fn load_average(loadavg: &str) -> [f64; 3] {
    let mut it = loadavg
        .split_whitespace()
        .map(|v| v.parse::<f64>().unwrap_or(f64::NAN));
    [
        it.next().unwrap_or(f64::NAN),
        it.next().unwrap_or(f64::NAN),
        it.next().unwrap_or(f64::NAN),
    ]
}

fn mem_total_kib(meminfo: &str) -> u64 {
    meminfo
        .lines()
        .find_map(|l| {
            let rest = l.strip_prefix("MemTotal:")?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or(0)
}

/// How one scenario of the suite went.
#[derive(Debug, Clone)]
pub struct Ran {
    /// The scenario's command name (`codec`, `s3-sink` …).
    pub name: &'static str,
    pub took: Duration,
    pub rows: Vec<Row>,
    /// Its own text report (tables, targets, legend).
    pub text: String,
    /// Problems that fail the command (a scenario's checks), or the error that stopped it.
    pub problems: Vec<String>,
    pub failed: Option<String>,
    /// The charts and flame graphs it wrote, shown in `report.md` as pictures.
    pub pictures: Vec<report::Picture>,
}

fn cell(v: f64) -> String {
    if !v.is_finite() {
        "-".to_owned()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// `report.md`.
pub fn markdown(
    dir: &Path,
    machine: &MachineInfo,
    quick: bool,
    started: &str,
    ran: &[Ran],
) -> String {
    let mut out = String::from("# Spillway bench report\n\n");
    let _ = writeln!(
        out,
        "`spillway-bench all{}`, started {started}.\n",
        if quick { " --quick" } else { "" }
    );
    let _ = writeln!(out, "Machine: {}.\n", machine.describe());
    let _ = writeln!(out, "Iggy: {}.\n", machine.iggy);
    if quick {
        out.push_str(
            "A quick run: one short run per row, for a smoke test. Its figures are not the \
             project's numbers; run without `--quick` for those.\n\n",
        );
    }
    out.push_str("| scenario | took | rows | outcome |\n| --- | --- | --- | --- |\n");
    for r in ran {
        let outcome = match (&r.failed, r.problems.is_empty()) {
            (Some(e), _) => format!("failed: {}", e.replace('|', "/")),
            (None, false) => format!("problems: {}", r.problems.join("; ").replace('|', "/")),
            (None, true) => "ok".to_owned(),
        };
        let _ = writeln!(
            out,
            "| {} | {:.0} s | {} | {outcome} |",
            r.name,
            r.took.as_secs_f64(),
            r.rows.len()
        );
    }
    for r in ran {
        let _ = writeln!(out, "\n## {}\n", r.name);
        if let Some(e) = &r.failed {
            let _ = writeln!(out, "Failed: {e}\n");
        }
        if !r.rows.is_empty() {
            out.push_str(
                "| scenario | metric | ours | peer | peer's value | ours better by |\n\
                 | --- | --- | ---: | --- | ---: | ---: |\n",
            );
            for row in &r.rows {
                let _ = writeln!(
                    out,
                    "| {} | {} ({}) | {} | {} | {} | {} |",
                    row.scenario,
                    row.metric,
                    row.unit,
                    cell(row.ours),
                    row.peer_name,
                    cell(row.peer),
                    row.ratio().map_or("-".to_owned(), |x| format!("{x:.2}x"))
                );
            }
        }
        if !r.text.trim().is_empty() {
            let _ = write!(out, "\n```text\n{}\n```\n", r.text.trim_end());
        }
        for p in &r.pictures {
            // Beside the report: by file name, so the report and its pictures move together.
            let link = match p.path.strip_prefix(dir) {
                Ok(rel) => rel.display().to_string(),
                Err(_) => p.path.display().to_string(),
            };
            let _ = write!(
                out,
                "\n![{}]({})\n",
                p.caption.replace(['[', ']'], ""),
                link
            );
        }
    }
    out
}

/// `report.json`.
pub fn json(machine: &MachineInfo, quick: bool, started: &str, ran: &[Ran]) -> String {
    let mut out = String::from("{\n  \"machine\": {");
    let _ = writeln!(
        out,
        "\"cores\": {}, \"online\": {}, \"cpu_model\": {}, \"kernel\": {}, \"memory_gib\": {:.1}, \"load_average\": [{}, {}, {}], \"iggy\": {}}},",
        machine.cores,
        machine.online,
        report::json_str(&machine.cpu_model),
        report::json_str(&machine.kernel),
        machine.memory_gib,
        report::json_num(machine.load[0]),
        report::json_num(machine.load[1]),
        report::json_num(machine.load[2]),
        report::json_str(&machine.iggy),
    );
    let _ = writeln!(
        out,
        "  \"quick\": {quick},\n  \"started\": {},",
        report::json_str(started)
    );
    out.push_str("  \"scenarios\": [\n");
    for (i, r) in ran.iter().enumerate() {
        let problems: Vec<String> = r.problems.iter().map(|p| report::json_str(p)).collect();
        let _ = write!(
            out,
            "    {{\"name\": {}, \"seconds\": {:.1}, \"rows\": {}, \"error\": {}, \"problems\": [{}]}}",
            report::json_str(r.name),
            r.took.as_secs_f64(),
            r.rows.len(),
            r.failed
                .as_deref()
                .map_or("null".to_owned(), report::json_str),
            problems.join(", ")
        );
        out.push_str(if i + 1 < ran.len() { ",\n" } else { "\n" });
    }
    out.push_str("  ],\n  \"rows\": [\n");
    let all: Vec<(&str, &Row)> = ran
        .iter()
        .flat_map(|r| r.rows.iter().map(move |row| (r.name, row)))
        .collect();
    for (i, (name, row)) in all.iter().enumerate() {
        let _ = write!(
            out,
            "    {{\"suite\": {}, {}",
            report::json_str(name),
            report::row_fields(row)
        );
        out.push_str(if i + 1 < all.len() { "},\n" } else { "}\n" });
    }
    out.push_str("  ]\n}\n");
    out
}

/// Writes both reports into `dir`; returns their paths.
pub fn write(
    dir: &Path,
    machine: &MachineInfo,
    quick: bool,
    started: &str,
    ran: &[Ran],
) -> std::io::Result<[std::path::PathBuf; 2]> {
    std::fs::create_dir_all(dir)?;
    let md = dir.join("report.md");
    let js = dir.join("report.json");
    std::fs::write(&md, markdown(dir, machine, quick, started, ran))?;
    std::fs::write(&js, json(machine, quick, started, ran))?;
    Ok([md, js])
}

/// Now in UTC as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn now_utc() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%d %H:%M:%S UTC")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Better;

    fn machine() -> MachineInfo {
        MachineInfo {
            cores: 2,
            online: 2,
            cpu_model: "Test CPU".to_owned(),
            kernel: "6.1.0".to_owned(),
            load: [0.5, 0.25, 0.1],
            memory_gib: 24.0,
            iggy: "the real Iggy server (test)".to_owned(),
        }
    }

    fn ran() -> Vec<Ran> {
        vec![
            Ran {
                name: "codec",
                took: Duration::from_secs(3),
                rows: vec![Row {
                    scenario: "publish_encode".to_owned(),
                    metric: "ns_per_op",
                    ours: 10.0,
                    peer: 40.0,
                    peer_name: "mqttbytes 0.6",
                    unit: "ns/op",
                    better: Better::Lower,
                }],
                text: "time per operation\n".to_owned(),
                problems: Vec::new(),
                failed: None,
                pictures: vec![report::Picture {
                    path: "/r/flame.svg".into(),
                    caption: "a [flame] graph".to_owned(),
                }],
            },
            Ran {
                name: "mqtt",
                took: Duration::from_secs(1),
                rows: Vec::new(),
                text: String::new(),
                problems: Vec::new(),
                failed: Some("mosquitto not found".to_owned()),
                pictures: Vec::new(),
            },
        ]
    }

    #[test]
    fn markdown_has_the_machine_every_scenario_and_the_ratio() {
        let md = markdown(
            Path::new("/r"),
            &machine(),
            true,
            "2026-12-01 10:00:00 UTC",
            &ran(),
        );
        assert!(md.contains("\n![a flame graph](flame.svg)\n"), "{md}");
        assert!(md.contains("2 cores available (2 online), Test CPU, kernel 6.1.0"));
        assert!(md.contains("load average 0.50 0.25 0.10"));
        assert!(md.contains("Iggy: the real Iggy server (test)."));
        assert!(md.contains("| codec | 3 s | 1 | ok |"));
        assert!(md.contains("| mqtt | 1 s | 0 | failed: mosquitto not found |"));
        assert!(md.contains(
            "| publish_encode | ns_per_op (ns/op) | 10.0 | mqttbytes 0.6 | 40.0 | 4.00x |"
        ));
        assert!(md.contains("A quick run"));
    }

    #[test]
    fn json_is_valid_and_holds_every_row() {
        let text = json(&machine(), false, "2026-12-01 10:00:00 UTC", &ran());
        let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        assert_eq!(v["machine"]["cores"], 2);
        assert_eq!(v["machine"]["load_average"][1], 0.25);
        assert_eq!(v["machine"]["iggy"], "the real Iggy server (test)");
        assert_eq!(v["scenarios"][1]["error"], "mosquitto not found");
        assert_eq!(v["rows"].as_array().map(Vec::len), Some(1));
        assert_eq!(v["rows"][0]["suite"], "codec");
        assert_eq!(v["rows"][0]["ratio"], 4.0);
    }

    #[test]
    fn proc_files_are_read() {
        assert_eq!(
            cpu_model("processor\t: 0\nmodel name\t: Some CPU @ 2.0GHz\n"),
            "Some CPU @ 2.0GHz"
        );
        assert_eq!(
            load_average("0.12 0.34 0.56 1/200 999\n"),
            [0.12, 0.34, 0.56]
        );
        assert_eq!(mem_total_kib("MemTotal:       25165824 kB\n"), 25_165_824);
        let now = now_utc();
        assert_eq!(now.len(), "2026-12-01 10:00:00 UTC".len(), "{now}");
    }
}
