//! `spillway-bench engine`: the engine end to end on one shard, 100-byte messages.
//!
//! - `iggy_to_file`: the harness's Iggy STAND-IN (or the real server named by
//!   `SPILLWAY_TEST_IGGY=host:port`) holds a topic of 4 partitions filled beforehand; the engine,
//!   run in-process with one shard, polls it, writes JSON lines to a file, and stores offsets.
//!   Timed from the engine's start until Iggy holds the last offset of every partition.
//! - `generate_to_file`: the same sink fed by the `generate` source: the engine's own ceiling
//!   without the Iggy server's share of the two cores.
//!
//! No peer runs beside it: there is no other Iggy sink that writes files to compare with.
//! Median of the runs; each run reads with a fresh consumer, so it starts from offset 0.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use spillway::config;
use spillway::coremap::{self, Machine};
use spillway_tests::{TestConsumer, TestMessage};

use crate::harness::median;
use crate::report::{Better, Row};

const PARTITIONS: u32 = 4;
const SIZE: usize = 100;

struct Plan {
    messages_per_partition: u64,
    runs: usize,
}

/// The core the shard runs on: the last allowed core (the control thread takes the first).
fn shard_core() -> usize {
    Machine::detect().cores.last().copied().unwrap_or(0)
}

fn run_engine(
    text: &str,
    until: &mut dyn FnMut() -> Result<bool, String>,
) -> Result<Duration, String> {
    let cfg = config::parse(text, std::path::Path::new("<bench>"), &|_| None)
        .map_err(|e| e.to_string())?;
    let map = coremap::resolve(&cfg, &Machine::detect()).map_err(|(k, m)| format!("{k}: {m}"))?;
    let stop = Arc::new(AtomicUsize::new(0));
    let stop2 = Arc::clone(&stop);
    let start = Instant::now();
    let engine = std::thread::spawn(move || spillway::control::run_until(cfg, map, stop2));
    let deadline = start + Duration::from_secs(600);
    let mut elapsed = None;
    while Instant::now() < deadline {
        if until()? {
            elapsed = Some(start.elapsed());
            break;
        }
        if engine.is_finished() {
            elapsed = Some(start.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    stop.store(1, std::sync::atomic::Ordering::SeqCst);
    let status = engine
        .join()
        .map_err(|_| "the engine thread panicked".to_owned())?;
    if status != 0 {
        return Err(format!("the engine exited with status {status}"));
    }
    elapsed.ok_or_else(|| "the engine did not finish in 10 minutes".to_owned())
}

fn file_sink(name: &str, out: &std::path::Path, core: usize) -> String {
    format!(
        r#"
[runtime]
cores = [{core}]
[metrics]
address = ""
log_interval = "0s"
[[sink]]
name = "{name}"
type = "file"
batch_size = 1000
window_messages = 20000
commit_interval = "20ms"
"#,
    ) + &format!("[sink.file]\npath = \"{}\"\n", out.display())
}

fn iggy_to_file(plan: &Plan, progress: &mut dyn FnMut(&str)) -> Result<f64, String> {
    let iggy = crate::harness::iggy()?;
    let mut admin = iggy.admin().map_err(|e| e.to_string())?;
    let stream = format!("bench-{:x}", fastrand_u32());
    admin.create_stream(&stream).map_err(|e| e.to_string())?;
    admin
        .create_topic(&stream, "events", PARTITIONS)
        .map_err(|e| e.to_string())?;
    progress("iggy_to_file: filling the topic");
    let payload = bytes::Bytes::from(vec![b'x'; SIZE]);
    for p in 0..PARTITIONS {
        let mut sent = 0;
        while sent < plan.messages_per_partition {
            let n = (plan.messages_per_partition - sent).min(1000);
            let batch: Vec<TestMessage> = (0..n)
                .map(|i| TestMessage::new(u128::from(sent + i + 1), payload.clone()))
                .collect();
            admin
                .send(&stream, "events", p, &batch)
                .map_err(|e| e.to_string())?;
            sent += n;
        }
    }
    let last = plan.messages_per_partition - 1;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let core = shard_core();
    let mut rates = Vec::new();
    for run in 0..plan.runs {
        progress(&format!("iggy_to_file run {}/{}", run + 1, plan.runs));
        let name = format!("bench-{run}");
        let out = dir.path().join(format!("{name}.jsonl"));
        let text = format!(
            "[iggy]\naddress = \"{}\"\nusername = \"{}\"\npassword = \"{}\"\n",
            iggy.addr(),
            iggy.username(),
            iggy.password()
        ) + &file_sink(&name, &out, core).replace(
            "type = \"file\"",
            &format!("type = \"file\"\nstream = \"{stream}\"\ntopic = \"events\"\npartitions = [0, 1, 2, 3]"),
        );
        let consumer = TestConsumer::Named(name.clone());
        let mut watcher = iggy.admin().map_err(|e| e.to_string())?;
        let elapsed = run_engine(&text, &mut || {
            for p in 0..PARTITIONS {
                let s = watcher
                    .stored_offset(&consumer, &stream, "events", p)
                    .map_err(|e| e.to_string())?;
                if s != Some(last) {
                    return Ok(false);
                }
            }
            Ok(true)
        })?;
        rates.push(
            (plan.messages_per_partition * u64::from(PARTITIONS)) as f64 / elapsed.as_secs_f64(),
        );
        let _ = std::fs::remove_file(&out);
    }
    let _ = admin.delete_stream(&stream);
    Ok(median(rates))
}

fn generate_to_file(plan: &Plan, progress: &mut dyn FnMut(&str)) -> Result<f64, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let core = shard_core();
    let total = plan.messages_per_partition * u64::from(PARTITIONS);
    let mut rates = Vec::new();
    for run in 0..plan.runs {
        progress(&format!("generate_to_file run {}/{}", run + 1, plan.runs));
        let out = dir.path().join(format!("gen-{run}.jsonl"));
        let text = file_sink("gen", &out, core)
            .replace("type = \"file\"", "type = \"file\"\nsource = \"generate\"")
            + &format!(
                "[sink.generate]\npartitions = {PARTITIONS}\nsize = {SIZE}\nmessages = {total}\n"
            );
        let elapsed = run_engine(&text, &mut || Ok(false))?;
        rates.push(total as f64 / elapsed.as_secs_f64());
        let _ = std::fs::remove_file(&out);
    }
    Ok(median(rates))
}

fn fastrand_u32() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
}

/// Runs both rows; returns them and the printed table.
pub fn run(quick: bool, progress: &mut dyn FnMut(&str)) -> Result<(Vec<Row>, String), String> {
    let plan = if quick {
        Plan {
            messages_per_partition: 5_000,
            runs: 1,
        }
    } else {
        Plan {
            messages_per_partition: 250_000,
            runs: 3,
        }
    };
    let iggy = iggy_to_file(&plan, progress)?;
    let generate = generate_to_file(&plan, progress)?;
    let row = |scenario: &str, value: f64| Row {
        scenario: scenario.to_owned(),
        metric: "msgs_per_s",
        ours: value,
        peer: f64::NAN,
        peer_name: "-",
        unit: "msgs/s",
        better: Better::Higher,
    };
    let rows = vec![
        row("iggy_standin_to_file_100B_1_shard", iggy),
        row("generate_to_file_100B_1_shard", generate),
    ];
    let mut text = String::from("\nengine, one shard, 100 B messages, 4 partitions (median)\n");
    for r in &rows {
        text.push_str(&format!(
            "  {:40} {:>12.0} msgs/s  {:>8.1} MB/s\n",
            r.scenario,
            r.ours,
            r.ours * SIZE as f64 / 1e6
        ));
    }
    Ok((rows, text))
}
