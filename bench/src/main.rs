//! `spillway-bench`: Spillway's bench suite. Each scenario is a subcommand in its own module
//! that returns report rows (ours beside a peer); this file parses the command line, runs the
//! scenario, prints its tables and writes its JSON under `target/bench/`.
//!
//! ```text
//! spillway-bench codec [--quick] [--out FILE]
//! spillway-bench s3 [--quick] [--out FILE]
//! spillway-bench engine [--quick] [--out FILE]
//! spillway-bench mqtt [--quick] [--out FILE]
//! spillway-bench s3-sink [--quick] [--out FILE]
//! spillway-bench pipeline [--quick] [--iggy HOST:PORT] [--out FILE]
//! spillway-bench scaling [--quick] [--iggy HOST:PORT] [--out FILE]
//! spillway-bench latency [--quick] [--iggy HOST:PORT] [--out FILE]
//! spillway-bench all [--quick] [--iggy HOST:PORT] [--out DIR]
//! spillway-bench chaos [--quick] [--out FILE]
//! ```

mod chaos;
mod chart;
mod codec;
mod engine;
mod engine_process;
mod harness;
mod latency;
mod metrics;
mod mqtt;
mod pipeline;
mod profile;
mod readbuf;
mod report;
mod s3;
mod s3_sink;
mod scaling;
mod suite;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use harness::Plan;
use report::Row;

#[global_allocator]
static GLOBAL: harness::CountingAlloc = harness::CountingAlloc;

const USAGE: &str = "\
usage: spillway-bench <scenario> [--quick] [--iggy HOST:PORT] [--out FILE]

scenarios:
  all      every scenario below, one after another (each starts and stops the servers it
           needs), then one report: target/bench/report.md and report.json (the machine,
           and per scenario ours, the peer and the ratio); each scenario's own JSON too
  codec    spillway-codec against mqttbytes 0.6: PUBLISH encode/decode, PUBACK streams,
           CONNECT round trips, on MQTT 3.1.1 and 5; time and allocations per operation
  s3       spillway-s3 against aws-sdk-s3 and rust-s3 0.38: one 256 MiB object in 8 MiB parts
           to an s3s-fs the bench starts (signed and unsigned payloads), then 1 GiB to an
           in-process discard endpoint; MB/s and client CPU s/GiB (the peers need the
           default `peers` feature; without it ours alone is measured)
  engine   the engine end to end on one shard, 100 B messages: Iggy (see --iggy) to the
           file sink, and the generate source to the
           file sink; msgs/s until every offset is stored
  mqtt     the engine's MQTT sink against rumqttc 0.25: 100 B messages, one MQTT 5
           connection, QoS 0/1/2, to a mosquitto the bench starts (with a counting
           subscriber; window 100) and to an in-process discard broker (window 1000);
           msgs/s, publisher CPU µs/msg, mosquitto's CPU share (rumqttc needs the default
           `peers` feature; without it ours alone is measured)
  s3-sink  the engine's S3 sink end to end: Iggy (see --iggy) to s3s-fs, 1 KiB messages,
           json_lines, 64 MiB objects, 8 MiB parts; uncompressed, gzip and zstd; beside
           the same bytes uploaded by rust-s3 0.38 as 8 MiB PutObjects (needs the default
           `peers` feature) and by spillway-s3 alone; MB/s, CPU s/GiB, s3s-fs's CPU share
  pipeline Iggy -> the spillway binary (its own process, one shard) -> mosquitto, the
           discard broker, s3s-fs and the discard S3 endpoint, one at a time; 100 B and
           1 KiB JSON messages over 4 partitions; msgs/s, MB/s, engine CPU µs/msg and the
           engine's peak RSS (needs target/release/spillway: cargo build --release -p spillway)
  scaling  the engine with 1, 2, 4 … shards up to every available core, one partition and
           one MQTT connection per shard, QoS 1 to the discard broker; msgs/s, efficiency
           against linear, and a chart (target/bench/scaling.svg)
  latency  offered -> confirmed latency (p50, p99, p99.9, max) at fixed offered rates from
           10% to 90% of what the path sustains (or SPILLWAY_BENCH_LATENCY_RATES=r1,r2,…),
           measured from each message's scheduled time (coordinated omission corrected):
           MQTT QoS 1 to mosquitto, and S3 objects (1 s) to s3s-fs; charts
           target/bench/latency_mqtt_qos1.svg and latency_s3.svg
  chaos    a fault campaign (not part of `all`): the real Iggy server (2 s heartbeat),
           mosquitto and s3s-fs behind fault proxies, two engines in one consumer group per
           sink (MQTT and S3) on four partitions, and a nemesis that SIGKILLs and restarts
           either engine, pauses one past its eviction (SIGSTOP 3-6 s), cuts one off from Iggy
           alone (4-7 s), SIGKILLs and restarts Iggy and s3s-fs, restarts mosquitto, drops and
           black-holes MQTT connections and stalls or fails S3 requests; then every offset is
           checked: acknowledged by the broker at least once, in exactly one S3 object, never
           stored before it was confirmed. One minute with --quick, else three
           (SPILLWAY_BENCH_CHAOS_SECS); a fresh seed each run, printed, replayed with
           SPILLWAY_BENCH_CHAOS_SEED; logs in target/bench/chaos/; fails on any loss

options:
  --quick     fewer and shorter runs, smaller objects (CI smoke); the JSON is still written
  --iggy H:P  read from the Iggy server at H:P (user/password from SPILLWAY_TEST_IGGY_USERNAME
              and SPILLWAY_TEST_IGGY_PASSWORD, default iggy/iggy) in every scenario that reads
              Iggy (engine, s3-sink, pipeline, scaling, latency); by default each of them
              starts the real Iggy server (../shared/iggy/iggy-server or
              SPILLWAY_IGGY_SERVER_BIN) in a fresh data directory, fills it and measures
              without a restart in between
  --iggy stand-in
              the harness's Iggy stand-in instead (in the bench process; not Iggy's speed)
  --out FILE  where to write the JSON rows (default: target/bench/<scenario>.json under the
              workspace root); with `all`, the directory for every file (default: target/bench)";

/// The subcommands. Each new scenario adds a variant here, a module, and an arm in `run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    All,
    Codec,
    S3,
    Engine,
    Mqtt,
    S3Sink,
    Pipeline,
    Scaling,
    Latency,
    /// Not part of `all`: a fault campaign, not a measurement.
    Chaos,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::All => "report",
            Scenario::Codec => "codec",
            Scenario::S3 => "s3",
            Scenario::Engine => "engine",
            Scenario::Mqtt => "mqtt",
            Scenario::S3Sink => "s3_sink",
            Scenario::Pipeline => "pipeline",
            Scenario::Scaling => "scaling",
            Scenario::Latency => "latency",
            Scenario::Chaos => "chaos",
        }
    }

    /// The scenarios `all` runs, in order.
    const EACH: [Scenario; 8] = [
        Scenario::Codec,
        Scenario::S3,
        Scenario::Engine,
        Scenario::Mqtt,
        Scenario::S3Sink,
        Scenario::Pipeline,
        Scenario::Scaling,
        Scenario::Latency,
    ];

    /// Its name on the command line.
    fn command(self) -> &'static str {
        match self {
            Scenario::S3Sink => "s3-sink",
            Scenario::All => "all",
            other => other.name(),
        }
    }

    fn parse(s: &str) -> Option<Scenario> {
        match s {
            "all" => Some(Scenario::All),
            "codec" => Some(Scenario::Codec),
            "s3" => Some(Scenario::S3),
            "engine" => Some(Scenario::Engine),
            "mqtt" => Some(Scenario::Mqtt),
            "s3-sink" => Some(Scenario::S3Sink),
            "pipeline" => Some(Scenario::Pipeline),
            "scaling" => Some(Scenario::Scaling),
            "latency" => Some(Scenario::Latency),
            "chaos" => Some(Scenario::Chaos),
            _ => None,
        }
    }
}

#[derive(Debug)]
struct Options {
    scenario: Scenario,
    quick: bool,
    out: Option<PathBuf>,
    /// `--iggy HOST:PORT`.
    iggy: Option<String>,
}

#[derive(Debug)]
enum Command {
    Run(Options),
    Help,
    /// `latency-producer ...`: the latency scenario's producer, in a process of its own.
    Producer(Vec<String>),
}

fn parse_args(args: &[String]) -> Result<Command, String> {
    if let Some((first, rest)) = args.split_first()
        && first == "latency-producer"
    {
        return Ok(Command::Producer(rest.to_vec()));
    }
    let mut scenario = None;
    let mut quick = false;
    let mut out = None;
    let mut iggy = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-h" | "--help" | "help" => return Ok(Command::Help),
            "--quick" => quick = true,
            "--out" => match it.next() {
                Some(path) => out = Some(PathBuf::from(path)),
                None => return Err("--out needs a file name".to_owned()),
            },
            "--iggy" => match it.next() {
                Some(target) if !target.trim().is_empty() => iggy = Some(target.clone()),
                _ => return Err("--iggy needs HOST:PORT or stand-in".to_owned()),
            },
            s if s.starts_with('-') => return Err(format!("unknown option {s}")),
            s => match (scenario, Scenario::parse(s)) {
                (None, Some(sc)) => scenario = Some(sc),
                (Some(_), Some(_)) => return Err("give one scenario".to_owned()),
                (_, None) => return Err(format!("unknown scenario {s:?}")),
            },
        }
    }
    let scenario = scenario.ok_or_else(|| "no scenario given".to_owned())?;
    Ok(Command::Run(Options {
        scenario,
        quick,
        out,
        iggy,
    }))
}

fn codec_text(rows: &[Row], legend: &[(&str, &str)], target: Option<f64>) -> String {
    let mut out = String::from("\n");
    out.push_str(&report::table(
        "time per operation (median)",
        rows,
        "ns_per_op",
    ));
    if let Some(t) = target {
        out.push_str(&format!(
            "  {}\n",
            report::target_summary(rows, "ns_per_op", t)
        ));
    }
    out.push('\n');
    out.push_str(&report::table(
        "allocations per operation",
        rows,
        "allocs_per_op",
    ));
    out.push('\n');
    for (name, what) in legend {
        out.push_str(&format!("  {name}: {what}\n"));
    }
    out
}

/// What one scenario gives: its rows, its text report, and problems its checks found (they
/// fail the command once the report is out).
struct Measured {
    rows: Vec<Row>,
    text: String,
    problems: Vec<String>,
}

fn measure(
    scenario: Scenario,
    quick: bool,
    progress: &mut dyn FnMut(&str),
) -> Result<Measured, String> {
    let said = |what: &str| eprintln!("spillway-bench {}: {what}", scenario.command());
    let (rows, text, problems) = match scenario {
        Scenario::All => return Err("`all` is not one scenario".to_owned()),
        Scenario::Codec => {
            let plan = if quick { Plan::quick() } else { Plan::full() };
            said(&format!(
                "{} runs of ~{} ms per side and row",
                plan.runs,
                plan.run_time.as_millis()
            ));
            let rows = codec::run(&plan, progress)?;
            let text = codec_text(&rows, codec::LEGEND, Some(codec::TARGET_RATIO));
            (rows, text, Vec::new())
        }
        Scenario::S3 => {
            said(if quick {
                "quick (one run, small objects)"
            } else {
                "5 runs per client, about a minute"
            });
            let (rows, text) = s3::run(quick, progress)?;
            (rows, text, Vec::new())
        }
        Scenario::Engine => {
            let (rows, text) = engine::run(quick, progress)?;
            (rows, text, Vec::new())
        }
        Scenario::Mqtt => {
            said(if quick {
                "quick (one run, 10x fewer messages)"
            } else {
                "3 runs per client and QoS, a few minutes"
            });
            let out = mqtt::run(quick, progress)?;
            (out.rows, out.text, out.problems)
        }
        Scenario::S3Sink => {
            said(if quick {
                "quick (one run, 32 MiB)"
            } else {
                "3 runs per client of 512 MiB, a few minutes"
            });
            let (rows, text) = s3_sink::run(quick, progress)?;
            (rows, text, Vec::new())
        }
        Scenario::Pipeline => {
            said(if quick {
                "quick (one run per destination and size, 20,000 / 8,000 messages)"
            } else {
                "3 runs per destination and size (1,000,000 x 100 B, 200,000 x 1 KiB)"
            });
            let (rows, text) = pipeline::run(quick, progress)?;
            (rows, text, Vec::new())
        }
        Scenario::Scaling => {
            said(if quick {
                "quick (one run per step, 50,000 messages per shard)"
            } else {
                "1, 2, 4 … shards up to every core, 3 runs each"
            });
            let (rows, text) = scaling::run(quick, progress)?;
            (rows, text, Vec::new())
        }
        Scenario::Latency => {
            said(if quick {
                "quick (3 rates, one 1 s run each, per destination)"
            } else {
                "5 rates from 10% to 90% of a probe, 3 runs of 5 s each, per destination"
            });
            let (rows, text) = latency::run(quick, progress)?;
            (rows, text, Vec::new())
        }
        Scenario::Chaos => {
            said(if quick {
                "quick: one minute of faults, then the checks"
            } else {
                "three minutes of faults, then the checks"
            });
            chaos::run(quick, progress)?
        }
    };
    eprintln!("{:70}", "");
    Ok(Measured {
        rows,
        text,
        problems,
    })
}

fn run(opts: &Options) -> Result<(), String> {
    if let Some(target) = &opts.iggy {
        harness::set_iggy_target(target.clone());
    }
    let mut progress = |row: &str| {
        eprint!("  measuring {row:60}\r");
        let _ = std::io::stderr().flush();
    };
    if opts.scenario == Scenario::All {
        return run_all(opts, &mut progress);
    }
    let m = measure(opts.scenario, opts.quick, &mut progress)?;
    print!("{}", m.text);
    let path = opts
        .out
        .clone()
        .unwrap_or_else(|| report::default_json_path(opts.scenario.name()));
    report::write_json(&path, &m.rows).map_err(|e| format!("writing {}: {e}", path.display()))?;
    println!("\nwrote {}", path.display());
    if m.problems.is_empty() {
        Ok(())
    } else {
        Err(m.problems.join("; "))
    }
}

/// Every scenario, then the suite's report (see [`suite`]).
fn run_all(opts: &Options, progress: &mut dyn FnMut(&str)) -> Result<(), String> {
    let machine = suite::MachineInfo::detect();
    let started = suite::now_utc();
    let dir = opts.out.clone().unwrap_or_else(|| {
        report::default_json_path("report")
            .parent()
            .map(PathBuf::from)
            .unwrap_or_default()
    });
    eprintln!(
        "spillway-bench all{}: {}",
        if opts.quick { " --quick" } else { "" },
        machine.describe()
    );
    let mut ran = Vec::new();
    for scenario in Scenario::EACH {
        let start = std::time::Instant::now();
        let mut done = suite::Ran {
            name: scenario.command(),
            took: Duration::ZERO,
            rows: Vec::new(),
            text: String::new(),
            problems: Vec::new(),
            failed: None,
            pictures: Vec::new(),
        };
        let _ = report::take_pictures();
        match measure(scenario, opts.quick, progress) {
            Ok(m) => {
                print!("{}", m.text);
                let path = dir.join(format!("{}.json", scenario.name()));
                if let Err(e) = report::write_json(&path, &m.rows) {
                    done.problems
                        .push(format!("writing {}: {e}", path.display()));
                }
                done.rows = m.rows;
                done.text = m.text;
                done.problems.extend(m.problems);
            }
            Err(e) => {
                eprintln!("spillway-bench {}: {e}", scenario.command());
                done.failed = Some(e);
            }
        }
        done.took = start.elapsed();
        done.pictures = report::take_pictures();
        ran.push(done);
    }
    let paths = suite::write(&dir, &machine, opts.quick, &started, &ran)
        .map_err(|e| format!("writing the report into {}: {e}", dir.display()))?;
    println!();
    for p in paths {
        println!("wrote {}", p.display());
    }
    let bad: Vec<String> = ran
        .iter()
        .filter_map(|r| {
            let mut why: Vec<String> = r.failed.iter().cloned().collect();
            why.extend(r.problems.iter().cloned());
            (!why.is_empty()).then(|| format!("{}: {}", r.name, why.join("; ")))
        })
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(bad.join(" | "))
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match parse_args(&args) {
        Ok(Command::Help) => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Ok(Command::Producer(args)) => match latency::producer_main(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("spillway-bench latency-producer: {e}");
                ExitCode::FAILURE
            }
        },
        Ok(Command::Run(opts)) => match run(&opts) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("spillway-bench {}: {e}", opts.scenario.command());
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("spillway-bench: {e}\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn command_line() {
        match parse_args(&args(&["codec", "--quick", "--out", "x.json"])) {
            Ok(Command::Run(o)) => {
                assert_eq!(o.scenario, Scenario::Codec);
                assert!(o.quick);
                assert_eq!(o.out, Some(PathBuf::from("x.json")));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(parse_args(&args(&["--help"])), Ok(Command::Help)));
        assert!(parse_args(&args(&[])).is_err());
        assert!(parse_args(&args(&["codec", "--bogus"])).is_err());
        assert!(parse_args(&args(&["nope"])).is_err());
        assert!(matches!(
            parse_args(&args(&["s3", "--quick"])),
            Ok(Command::Run(Options {
                scenario: Scenario::S3,
                quick: true,
                out: None,
                iggy: None
            }))
        ));
        assert!(parse_args(&args(&["s3", "codec"])).is_err());
        assert!(matches!(
            parse_args(&args(&["mqtt"])),
            Ok(Command::Run(Options {
                scenario: Scenario::Mqtt,
                quick: false,
                out: None,
                iggy: None
            }))
        ));
        assert!(parse_args(&args(&["codec", "--out"])).is_err());
        assert!(matches!(
            parse_args(&args(&["all", "--quick"])),
            Ok(Command::Run(Options {
                scenario: Scenario::All,
                quick: true,
                out: None,
                iggy: None
            }))
        ));
        assert!(parse_args(&args(&["all", "codec"])).is_err());
        assert!(matches!(
            parse_args(&args(&["s3-sink", "--quick"])),
            Ok(Command::Run(Options {
                scenario: Scenario::S3Sink,
                quick: true,
                out: None,
                iggy: None
            }))
        ));
        match parse_args(&args(&["pipeline", "--iggy", "10.0.0.5:8090"])) {
            Ok(Command::Run(o)) => {
                assert_eq!(o.scenario, Scenario::Pipeline);
                assert_eq!(o.iggy.as_deref(), Some("10.0.0.5:8090"));
            }
            other => panic!("{other:?}"),
        }
        assert!(parse_args(&args(&["pipeline", "--iggy"])).is_err());
        assert!(parse_args(&args(&["pipeline", "--iggy", " "])).is_err());
    }
}
