//! The `spillway` binary: `spillway run --config F`, `spillway check --config F`.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use spillway::config;
use spillway::coremap::{self, Machine};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Exit status for a config that does not load.
const EXIT_CONFIG: u8 = spillway::control::EXIT_CONFIG as u8;

#[derive(Parser, Debug)]
#[command(
    name = "spillway",
    version,
    about = "Thread-per-core sink engine: Apache Iggy partitions to MQTT brokers and S3 stores"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run the engine until SIGINT/SIGTERM (or until a generate source is done).
    Run {
        /// The TOML config file.
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Check a config and print the core map, without connecting anywhere.
    Check {
        /// The TOML config file.
        #[arg(short, long)]
        config: PathBuf,
    },
}

fn load(path: &std::path::Path) -> Result<(config::Config, coremap::CoreMap), String> {
    let cfg = config::load(path).map_err(|e| e.to_string())?;
    let map = coremap::resolve(&cfg, &Machine::detect()).map_err(|(key, message)| {
        config::ConfigError {
            file: path.to_owned(),
            key,
            message,
        }
        .to_string()
    })?;
    Ok((cfg, map))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // A closed stderr (`spillway run ... 2>&1 | head -1`) must not end the engine: the
        // default reports a failed log write with `eprintln!`, which panics on that same
        // stderr (exit 101). Lines that cannot be written are dropped.
        .log_internal_errors(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SPILLWAY_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    match cli.command {
        Cmd::Check { config } => match load(&config) {
            Ok((cfg, map)) => {
                // Best effort, like the logs: a closed stdout changes nothing but the output.
                let mut out = std::io::stdout();
                let _ = write!(out, "{}", map.render(&cfg));
                let _ = writeln!(out, "{}: OK", config.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "error: {e}");
                ExitCode::from(EXIT_CONFIG)
            }
        },
        Cmd::Run { config } => match load(&config) {
            Ok((cfg, map)) => {
                let status = spillway::control::run(cfg, map);
                ExitCode::from(u8::try_from(status).unwrap_or(1))
            }
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "error: {e}");
                ExitCode::from(EXIT_CONFIG)
            }
        },
    }
}
