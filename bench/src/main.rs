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
//! ```

mod codec;
mod engine;
mod harness;
mod mqtt;
mod report;
mod s3;
mod s3_sink;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use harness::Plan;
use report::Row;

#[global_allocator]
static GLOBAL: harness::CountingAlloc = harness::CountingAlloc;

const USAGE: &str = "\
usage: spillway-bench <scenario> [--quick] [--out FILE]

scenarios:
  codec    spillway-codec against mqttbytes 0.6: PUBLISH encode/decode, PUBACK streams,
           CONNECT round trips, on MQTT 3.1.1 and 5; time and allocations per operation
  s3       spillway-s3 against aws-sdk-s3 and rust-s3 0.38: one 256 MiB object in 8 MiB parts
           to an s3s-fs the bench starts (signed and unsigned payloads), then 1 GiB to an
           in-process discard endpoint; MB/s and client CPU s/GiB (the peers need the
           default `peers` feature; without it ours alone is measured)
  engine   the engine end to end on one shard, 100 B messages: the Iggy stand-in (or the
           server in SPILLWAY_TEST_IGGY) to the file sink, and the generate source to the
           file sink; msgs/s until every offset is stored
  mqtt     the engine's MQTT sink against rumqttc 0.25: 100 B messages, one MQTT 5
           connection, QoS 0/1/2, to a mosquitto the bench starts (with a counting
           subscriber; window 100) and to an in-process discard broker (window 1000);
           msgs/s, publisher CPU µs/msg, mosquitto's CPU share (rumqttc needs the default
           `peers` feature; without it ours alone is measured)
  s3-sink  the engine's S3 sink end to end: the Iggy stand-in to s3s-fs, 1 KiB messages,
           json_lines, 64 MiB objects, 8 MiB parts; uncompressed, gzip and zstd; beside
           the same bytes uploaded by rust-s3 0.38 as 8 MiB PutObjects (needs the default
           `peers` feature) and by spillway-s3 alone; MB/s, CPU s/GiB, s3s-fs's CPU share

options:
  --quick     fewer and shorter runs, smaller objects (CI smoke); the JSON is still written
  --out FILE  where to write the JSON rows (default: target/bench/<scenario>.json under the
              workspace root)";

/// The subcommands. Each new scenario adds a variant here, a module, and an arm in `run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Codec,
    S3,
    Engine,
    Mqtt,
    S3Sink,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Codec => "codec",
            Scenario::S3 => "s3",
            Scenario::Engine => "engine",
            Scenario::Mqtt => "mqtt",
            Scenario::S3Sink => "s3_sink",
        }
    }

    fn parse(s: &str) -> Option<Scenario> {
        match s {
            "codec" => Some(Scenario::Codec),
            "s3" => Some(Scenario::S3),
            "engine" => Some(Scenario::Engine),
            "mqtt" => Some(Scenario::Mqtt),
            "s3-sink" => Some(Scenario::S3Sink),
            _ => None,
        }
    }
}

#[derive(Debug)]
struct Options {
    scenario: Scenario,
    quick: bool,
    out: Option<PathBuf>,
}

#[derive(Debug)]
enum Command {
    Run(Options),
    Help,
}

fn parse_args(args: &[String]) -> Result<Command, String> {
    let mut scenario = None;
    let mut quick = false;
    let mut out = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-h" | "--help" | "help" => return Ok(Command::Help),
            "--quick" => quick = true,
            "--out" => match it.next() {
                Some(path) => out = Some(PathBuf::from(path)),
                None => return Err("--out needs a file name".to_owned()),
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
    }))
}

fn print_report(rows: &[Row], legend: &[(&str, &str)], target: Option<f64>) {
    println!();
    print!(
        "{}",
        report::table("time per operation (median)", rows, "ns_per_op")
    );
    if let Some(t) = target {
        println!("  {}", report::target_summary(rows, "ns_per_op", t));
    }
    println!();
    print!(
        "{}",
        report::table("allocations per operation", rows, "allocs_per_op")
    );
    println!();
    for (name, what) in legend {
        println!("  {name}: {what}");
    }
}

fn run_codec(quick: bool, progress: &mut dyn FnMut(&str)) -> Result<Vec<Row>, String> {
    let plan = if quick { Plan::quick() } else { Plan::full() };
    eprintln!(
        "spillway-bench codec: {} runs of ~{} ms per side and row",
        plan.runs,
        plan.run_time.as_millis()
    );
    let rows = codec::run(&plan, progress)?;
    eprintln!("{:60}", "");
    print_report(&rows, codec::LEGEND, Some(codec::TARGET_RATIO));
    Ok(rows)
}

fn run_s3(quick: bool, progress: &mut dyn FnMut(&str)) -> Result<Vec<Row>, String> {
    eprintln!(
        "spillway-bench s3: {}",
        if quick {
            "quick (one run, small objects)"
        } else {
            "5 runs per client, about a minute"
        }
    );
    let (rows, text) = s3::run(quick, progress)?;
    eprintln!("{:70}", "");
    print!("{text}");
    Ok(rows)
}

fn run(opts: &Options) -> Result<(), String> {
    let mut progress = |row: &str| {
        eprint!("  measuring {row:60}\r");
        let _ = std::io::stderr().flush();
    };
    // Problems found by a scenario that must fail the command once its report is out.
    let mut problems = Vec::new();
    let rows = match opts.scenario {
        Scenario::Codec => run_codec(opts.quick, &mut progress)?,
        Scenario::S3 => run_s3(opts.quick, &mut progress)?,
        Scenario::Engine => {
            let (rows, text) = engine::run(opts.quick, &mut progress)?;
            eprintln!("{:70}", "");
            print!("{text}");
            rows
        }
        Scenario::Mqtt => {
            eprintln!(
                "spillway-bench mqtt: {}",
                if opts.quick {
                    "quick (one run, 10x fewer messages)"
                } else {
                    "3 runs per client and QoS, a few minutes"
                }
            );
            let out = mqtt::run(opts.quick, &mut progress)?;
            eprintln!("{:70}", "");
            print!("{}", out.text);
            problems = out.problems;
            out.rows
        }
        Scenario::S3Sink => {
            eprintln!(
                "spillway-bench s3-sink: {}",
                if opts.quick {
                    "quick (one run, 32 MiB)"
                } else {
                    "3 runs per client of 512 MiB, a few minutes"
                }
            );
            let (rows, text) = s3_sink::run(opts.quick, &mut progress)?;
            eprintln!("{:70}", "");
            print!("{text}");
            rows
        }
    };
    let path = opts
        .out
        .clone()
        .unwrap_or_else(|| report::default_json_path(opts.scenario.name()));
    report::write_json(&path, &rows).map_err(|e| format!("writing {}: {e}", path.display()))?;
    println!("\nwrote {}", path.display());
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match parse_args(&args) {
        Ok(Command::Help) => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Ok(Command::Run(opts)) => match run(&opts) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("spillway-bench {}: {e}", opts.scenario.name());
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
                out: None
            }))
        ));
        assert!(parse_args(&args(&["s3", "codec"])).is_err());
        assert!(matches!(
            parse_args(&args(&["mqtt"])),
            Ok(Command::Run(Options {
                scenario: Scenario::Mqtt,
                quick: false,
                out: None
            }))
        ));
        assert!(parse_args(&args(&["codec", "--out"])).is_err());
        assert!(matches!(
            parse_args(&args(&["s3-sink", "--quick"])),
            Ok(Command::Run(Options {
                scenario: Scenario::S3Sink,
                quick: true,
                out: None
            }))
        ));
    }
}
