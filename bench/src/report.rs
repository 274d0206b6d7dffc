//! Results: a table on stdout and the same rows as JSON under `target/bench/`.

use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

/// Which way a metric improves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    /// Times, CPU seconds, allocations.
    Lower,
    /// Throughput.
    Higher,
    /// Context figures beside the compared ones (a broker's CPU share, a count): no better
    /// side, no ratio.
    Neither,
}

/// One line of a report: a metric of one scenario, ours beside the peer's.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub scenario: String,
    /// `ns_per_op`, `allocs_per_op`, `MB_per_s`, `cpu_s_per_GiB` …
    pub metric: &'static str,
    pub ours: f64,
    /// Not a number when the peer was not measured (written as JSON `null`).
    pub peer: f64,
    pub peer_name: &'static str,
    pub unit: &'static str,
    pub better: Better,
}

impl Row {
    /// A row of ours alone (no peer measured for it).
    pub fn alone(
        scenario: &str,
        metric: &'static str,
        ours: f64,
        unit: &'static str,
        better: Better,
    ) -> Row {
        Row {
            scenario: scenario.to_owned(),
            metric,
            ours,
            peer: f64::NAN,
            peer_name: "-",
            unit,
            better,
        }
    }

    /// How many times ours is better: peer / ours where lower is better (times, CPU,
    /// allocations), ours / peer where higher is better (throughput); above 1 means ours wins.
    /// `None` when the divisor is zero (ours allocates nothing), a value is not finite (the
    /// peer was not measured), or neither side is better.
    pub fn ratio(&self) -> Option<f64> {
        let (num, den) = match self.better {
            Better::Lower => (self.peer, self.ours),
            Better::Higher => (self.ours, self.peer),
            Better::Neither => return None,
        };
        let r = num / den;
        (den > 0.0 && r.is_finite()).then_some(r)
    }
}

fn fmt_value(v: f64) -> String {
    if !v.is_finite() {
        "-".to_owned()
    } else if v == 0.0 {
        "0".to_owned()
    } else if v.abs() < 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.1}")
    }
}

/// The rows of one metric as an aligned text table.
pub fn table(title: &str, rows: &[Row], metric: &str) -> String {
    let rows: Vec<&Row> = rows.iter().filter(|r| r.metric == metric).collect();
    let Some(first) = rows.first() else {
        return String::new();
    };
    let unit = first.unit;
    let peer = first.peer_name;
    let head = [
        "scenario".to_owned(),
        format!("ours {unit}"),
        format!("{peer} {unit}"),
        format!("ratio ({peer} / ours)"),
    ];
    let body: Vec<[String; 4]> = rows
        .iter()
        .map(|r| {
            [
                r.scenario.clone(),
                fmt_value(r.ours),
                fmt_value(r.peer),
                match r.ratio() {
                    Some(x) => format!("{x:.2}x"),
                    None if r.ours == 0.0 && r.peer > 0.0 => "ours allocates nothing".to_owned(),
                    None => "-".to_owned(),
                },
            ]
        })
        .collect();
    let mut out = format!("{title}\n");
    out.push_str(&text_table(&head, &body, |col| col == 0));
    out
}

/// Aligns `head` and `body` into a text table with a rule under the head: columns for which
/// `left` is true are left-aligned, the others (numbers) right-aligned.
pub fn text_table<const N: usize>(
    head: &[String; N],
    body: &[[String; N]],
    left: impl Fn(usize) -> bool,
) -> String {
    let mut width = head.clone().map(|h| h.chars().count());
    for line in body {
        for (w, cell) in width.iter_mut().zip(line) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[String; N]| {
        for (col, (cell, w)) in cells.iter().zip(width).enumerate() {
            if left(col) {
                let _ = write!(out, "  {cell:<w$}");
            } else {
                let _ = write!(out, "  {cell:>w$}");
            }
        }
        out.push('\n');
    };
    line(&mut out, head);
    let rule: usize = width.iter().sum::<usize>() + 2 * width.len();
    let _ = writeln!(out, "  {}", "-".repeat(rule.saturating_sub(2)));
    for cells in body {
        line(&mut out, cells);
    }
    out
}

/// The rows of one metric as an aligned text table with the peer named on every line (for
/// scenarios that compare ours with more than one peer).
pub fn peer_table(title: &str, rows: &[Row], metric: &str) -> String {
    let rows: Vec<&Row> = rows.iter().filter(|r| r.metric == metric).collect();
    let Some(first) = rows.first() else {
        return String::new();
    };
    let unit = first.unit;
    let head = [
        "scenario".to_owned(),
        "peer".to_owned(),
        format!("ours {unit}"),
        format!("peer {unit}"),
        "ours better by".to_owned(),
    ];
    let body: Vec<[String; 5]> = rows
        .iter()
        .map(|r| {
            [
                r.scenario.clone(),
                r.peer_name.to_owned(),
                fmt_value(r.ours),
                fmt_value(r.peer),
                match r.ratio() {
                    Some(x) => format!("{x:.2}x"),
                    None => "-".to_owned(),
                },
            ]
        })
        .collect();
    let mut out = format!("{title}\n");
    out.push_str(&text_table(&head, &body, |col| col < 2));
    out
}

/// One line on how the rows of `metric` compare with a goal of `target` times better.
pub fn target_summary(rows: &[Row], metric: &str, target: f64) -> String {
    let rows: Vec<&Row> = rows.iter().filter(|r| r.metric == metric).collect();
    let missed: Vec<&str> = rows
        .iter()
        .filter(|r| r.ratio().is_none_or(|x| x < target))
        .map(|r| r.scenario.as_str())
        .collect();
    if missed.is_empty() {
        format!("target {target}x: met on all {} rows", rows.len())
    } else {
        format!(
            "target {target}x: missed on {} of {} rows: {}",
            missed.len(),
            rows.len(),
            missed.join(", ")
        )
    }
}

fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn json_number(out: &mut String, v: Option<f64>) {
    match v {
        Some(x) if x.is_finite() => {
            let _ = write!(out, "{}", (x * 1000.0).round() / 1000.0);
        }
        _ => out.push_str("null"),
    }
}

/// `s` as a JSON string literal.
pub fn json_str(s: &str) -> String {
    let mut out = String::new();
    json_string(&mut out, s);
    out
}

/// `v` as a JSON number (three decimals), `null` when not finite.
pub fn json_num(v: f64) -> String {
    let mut out = String::new();
    json_number(&mut out, Some(v));
    out
}

/// A row's fields, `"scenario": .., "metric": .., "ours": .., "peer": .., "peer_name": ..,
/// "unit": .., "ratio": ..`, without the braces.
pub fn row_fields(r: &Row) -> String {
    let mut out = String::from("\"scenario\": ");
    json_string(&mut out, &r.scenario);
    out.push_str(", \"metric\": ");
    json_string(&mut out, r.metric);
    out.push_str(", \"ours\": ");
    json_number(&mut out, Some(r.ours));
    out.push_str(", \"peer\": ");
    json_number(&mut out, Some(r.peer));
    out.push_str(", \"peer_name\": ");
    json_string(&mut out, r.peer_name);
    out.push_str(", \"unit\": ");
    json_string(&mut out, r.unit);
    out.push_str(", \"ratio\": ");
    json_number(&mut out, r.ratio());
    out
}

/// The rows as a JSON list of `{"scenario", "metric", "ours", "peer", "peer_name", "unit",
/// "ratio"}` objects (`ratio` is null when ours is zero).
pub fn to_json(rows: &[Row]) -> String {
    let mut out = String::from("[\n");
    for (i, r) in rows.iter().enumerate() {
        out.push_str("  {");
        out.push_str(&row_fields(r));
        out.push('}');
        if i + 1 < rows.len() {
            out.push(',');
        }
        out.push('\n');
    }
    out.push_str("]\n");
    out
}

/// The workspace root: the nearest directory at or above the current one whose Cargo.toml
/// declares `[workspace]`, else the one this crate was built in.
pub fn workspace_root() -> PathBuf {
    if let Ok(cwd) = std::env::current_dir() {
        for dir in cwd.ancestors() {
            let manifest = dir.join("Cargo.toml");
            if let Ok(text) = std::fs::read_to_string(&manifest)
                && text.lines().any(|l| l.trim() == "[workspace]")
            {
                return dir.to_path_buf();
            }
        }
    }
    let built_in = Path::new(env!("CARGO_MANIFEST_DIR"));
    built_in.parent().unwrap_or(built_in).to_path_buf()
}

/// `target/bench/<name>.json` under the workspace root.
pub fn default_json_path(name: &str) -> PathBuf {
    workspace_root()
        .join("target")
        .join("bench")
        .join(format!("{name}.json"))
}

/// A picture a scenario wrote (a chart, a flame graph), for the suite's `report.md` to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Picture {
    pub path: PathBuf,
    pub caption: String,
}

/// The pictures written since the last [`take_pictures`].
static PICTURES: std::sync::Mutex<Vec<Picture>> = std::sync::Mutex::new(Vec::new());

/// Records that the scenario running wrote the picture at `path`.
pub fn picture(path: &Path, caption: &str) {
    if let Ok(mut all) = PICTURES.lock() {
        all.push(Picture {
            path: path.to_owned(),
            caption: caption.to_owned(),
        });
    }
}

/// The pictures recorded since the last call, oldest first.
pub fn take_pictures() -> Vec<Picture> {
    PICTURES
        .lock()
        .map(|mut all| std::mem::take(&mut *all))
        .unwrap_or_default()
}

/// Writes the rows as JSON to `path`, creating its directory.
pub fn write_json(path: &Path, rows: &[Row]) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, to_json(rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(metric: &'static str, ours: f64, peer: f64) -> Row {
        Row {
            scenario: "encode \"x\"".to_owned(),
            metric,
            ours,
            peer,
            peer_name: "peer",
            unit: "ns/op",
            better: Better::Lower,
        }
    }

    #[test]
    fn json_rows_and_ratios() {
        let rows = [row("ns_per_op", 10.0, 35.0), row("allocs_per_op", 0.0, 2.0)];
        assert_eq!(rows[0].ratio(), Some(3.5));
        assert_eq!(rows[1].ratio(), None);
        let json = to_json(&rows);
        assert!(json.contains(r#"{"scenario": "encode \"x\"", "metric": "ns_per_op", "ours": 10, "peer": 35, "peer_name": "peer", "unit": "ns/op", "ratio": 3.5}"#), "{json}");
        assert!(json.contains(r#""ratio": null}"#), "{json}");
        let t = table("t", &rows, "ns_per_op");
        assert!(t.contains("3.50x"), "{t}");
        assert_eq!(
            target_summary(&rows, "ns_per_op", 3.0),
            "target 3x: met on all 1 rows"
        );
        assert!(target_summary(&rows, "ns_per_op", 4.0).starts_with("target 4x: missed on 1 of 1"));
    }

    #[test]
    fn throughput_ratios_and_missing_peers() {
        let mut r = row("MB_per_s", 300.0, 100.0);
        r.better = Better::Higher;
        assert_eq!(r.ratio(), Some(3.0));
        r.peer = f64::NAN;
        assert_eq!(r.ratio(), None);
        let json = to_json(std::slice::from_ref(&r));
        assert!(json.contains(r#""peer": null"#), "{json}");
        assert!(json.contains(r#""ratio": null}"#), "{json}");
        let t = peer_table("t", &[r], "MB_per_s");
        assert!(t.contains("peer") && t.contains(" - "), "{t}");
    }
}
