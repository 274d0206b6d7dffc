//! The `spillway` binary: `spillway run --config F`, `spillway check --config F`.

use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use spillway::config;
use spillway::coremap::{self, Machine};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Exit status for a config that does not load.
const EXIT_CONFIG: u8 = spillway::error::EXIT_CONFIG as u8;

/// Where to read on, shown under `--help` and `run --help`.
const MORE: &str = "\
Configuration: one TOML file. Every key, its type and default is in the README's
\"Configuration\" section (README.md in the source, /usr/share/doc/spillway/README.md from the
.deb); commented example files are in examples/ (/usr/share/doc/spillway/examples, and
/etc/spillway/spillway.toml from the .deb). Any string value may name environment variables as
${NAME} or ${NAME:-fallback}.

Environment:
  SPILLWAY_LOG            log filter (default info; e.g. debug, spillway=debug)
  SPILLWAY_LOG_FORMAT     text (default) or json, as --log-format
  SPILLWAY_IGGY_ADDRESS, SPILLWAY_IGGY_USERNAME, SPILLWAY_IGGY_PASSWORD, SPILLWAY_IGGY_TOKEN
                          the Iggy server and login (win over the file)
  SPILLWAY_MQTT_PASSWORD_<SINK>
                          an MQTT sink's password (sink name upper-cased, - and . as _)
  AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION
                          S3 credentials and region where the sink names none
  NO_COLOR                no colour in text logs (there is none when stderr is not a terminal)

Exit status: 0 after a drain, 1 when a sink failed for good, 2 for a config problem, 130 after
a second signal.";

#[derive(Parser, Debug)]
#[command(
    name = "spillway",
    version,
    about = "Thread-per-core sink engine: Apache Iggy partitions to MQTT brokers and S3 stores",
    after_help = MORE
)]
struct Cli {
    /// Log lines as text, or as one JSON object per line (for log shippers).
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "SPILLWAY_LOG_FORMAT"
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run the engine until SIGINT/SIGTERM (or until a generate source is done).
    #[command(after_help = MORE)]
    Run {
        /// The TOML config file.
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Check a config and print the core map; with --connect, also reach every endpoint.
    #[command(after_help = MORE)]
    Check {
        /// The TOML config file.
        #[arg(short, long)]
        config: PathBuf,
        /// Also reach every endpoint, as `run` would (Iggy login, stream, topic, partitions
        /// and consumer group; MQTT CONNECT and the CONNACK's limits against the sink; S3
        /// HeadBucket), and report every problem, by sink. Nothing is published, written or
        /// committed. Exit 1 when something is wrong.
        #[arg(long)]
        connect: bool,
    },
    /// Show a running engine's sinks and partitions (its GET /status, as tables).
    Status {
        /// The engine's TOML config file (its metrics.address is asked).
        #[arg(short, long)]
        config: PathBuf,
        /// Ask this HOST:PORT instead of metrics.address.
        #[arg(long)]
        address: Option<String>,
        /// Print the JSON as the engine answers it.
        #[arg(long)]
        json: bool,
    },
    /// Pause a sink of a running engine: it stops polling, lets what is in flight confirm,
    /// stores the offsets and keeps its connections (the others run on).
    Pause {
        /// The engine's TOML config file.
        #[arg(short, long)]
        config: PathBuf,
        /// The sink's name.
        #[arg(long)]
        sink: String,
        /// Have the sink finish what it holds (S3: complete its open objects).
        #[arg(long)]
        flush: bool,
        /// Ask this HOST:PORT instead of metrics.address.
        #[arg(long)]
        address: Option<String>,
    },
    /// Where each partition of a sink resumes (Iggy's stored offset, the S3 marker, the
    /// head), and moving it: `show`, `set --to ...`, `skip`.
    Offsets {
        #[command(subcommand)]
        action: OffsetsCmd,
    },
    /// List the data files of an S3 sink's Iceberg table that no snapshot references (left by
    /// a crash between upload and commit, a failed commit or a fenced member); with --delete,
    /// remove them.
    Orphans {
        /// The engine's TOML config file.
        #[arg(short, long)]
        config: PathBuf,
        /// The sink's name.
        #[arg(long)]
        sink: String,
        /// Leave files younger than this (a running engine may not have committed them yet).
        #[arg(long, default_value = "24h", value_parser = spillway_duration)]
        older_than: std::time::Duration,
        /// Delete the orphans listed.
        #[arg(long)]
        delete: bool,
    },
    /// Resume a paused sink of a running engine.
    Resume {
        /// The engine's TOML config file.
        #[arg(short, long)]
        config: PathBuf,
        /// The sink's name.
        #[arg(long)]
        sink: String,
        /// Ask this HOST:PORT instead of metrics.address.
        #[arg(long)]
        address: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
enum OffsetsCmd {
    /// Print each partition's stored offset, S3 marker, head and where it resumes.
    Show {
        #[command(flatten)]
        which: Which,
    },
    /// Make the next run resume where asked: Iggy's stored offset and the S3 marker both.
    Set {
        #[command(flatten)]
        which: Which,
        /// OFFSET (resume at it), earliest, latest (only what comes next), +N or -N (from
        /// where it resumes now).
        #[arg(long, allow_hyphen_values = true)]
        to: spillway::offsets::Target,
        /// Even while an engine seems to run the sink.
        #[arg(long)]
        force: bool,
    },
    /// Move past the next message(s) where each partition resumes (a poison message),
    /// naming what is skipped.
    Skip {
        #[command(flatten)]
        which: Which,
        /// How many messages.
        #[arg(long, default_value_t = 1)]
        count: u64,
        /// Even while an engine seems to run the sink.
        #[arg(long)]
        force: bool,
    },
}

#[derive(clap::Args, Debug)]
struct Which {
    /// The engine's TOML config file.
    #[arg(short, long)]
    config: PathBuf,
    /// The sink's name.
    #[arg(long)]
    sink: String,
    /// One partition only.
    #[arg(long)]
    partition: Option<u32>,
}

fn spillway_duration(text: &str) -> Result<std::time::Duration, String> {
    spillway::config::parse_duration(text)
}

/// `spillway orphans`: the report on stdout; exit 1 when it could not be made.
fn orphans(
    config: &std::path::Path,
    sink: &str,
    older_than: std::time::Duration,
    delete: bool,
) -> ExitCode {
    let cfg = match config::load(config) {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    match spillway::orphans::run(&cfg, sink, older_than, delete) {
        Ok(report) => {
            let _ = write!(std::io::stdout(), "{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: {e}");
            ExitCode::from(1)
        }
    }
}

fn offsets(action: OffsetsCmd) -> ExitCode {
    use spillway::offsets::Op;
    let (which, op, force) = match action {
        OffsetsCmd::Show { which } => (which, Op::Show, false),
        OffsetsCmd::Set { which, to, force } => (which, Op::Set(to), force),
        OffsetsCmd::Skip {
            which,
            count,
            force,
        } => (which, Op::Skip(count), force),
    };
    let cfg = match config::load(&which.config) {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    match spillway::offsets::run(&cfg, &which.sink, which.partition, op, force) {
        Ok(report) => {
            let _ = write!(std::io::stdout(), "{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: {e}");
            ExitCode::from(1)
        }
    }
}

/// `spillway status|pause|resume`: one request to the running engine; the exit status.
fn operate(
    config: &std::path::Path,
    address: Option<&str>,
    method: &str,
    path: &str,
    json: bool,
) -> ExitCode {
    let mut err = std::io::stderr();
    let cfg = match config::load(config) {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let addr = match spillway::operator::listener(&cfg, address) {
        Ok(a) => a,
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let token = cfg.metrics.token.as_ref().map(config::Secret::expose);
    let token = if method == "POST" { token } else { None };
    match spillway::operator::request(addr, method, path, token) {
        Ok((200, body)) if method == "GET" && !json => match serde_json::from_str(&body) {
            Ok(v) => {
                let _ = write!(std::io::stdout(), "{}", spillway::operator::render(&v));
                ExitCode::SUCCESS
            }
            Err(e) => {
                let _ = writeln!(
                    err,
                    "error: http://{addr}{path} answered what is not JSON: {e}"
                );
                ExitCode::from(1)
            }
        },
        Ok((code, body)) if (200..300).contains(&code) => {
            let _ = write!(std::io::stdout(), "{body}");
            ExitCode::SUCCESS
        }
        Ok((code, body)) => {
            let _ = writeln!(
                err,
                "error: http://{addr}{path} answered {code}: {}",
                body.trim_end()
            );
            ExitCode::from(1)
        }
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            ExitCode::from(1)
        }
    }
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

fn init_logs(format: LogFormat) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    // `SPILLWAY_LOG`: a default level and `target=level` directives, comma-separated
    // (`info,spillway::sink=debug`); one that does not parse leaves the default.
    let filter = std::env::var("SPILLWAY_LOG")
        .ok()
        .and_then(|v| v.parse::<tracing_subscriber::filter::Targets>().ok())
        // The AWS SDK's credential chain warns of every provider it tries; the engine logs
        // the outcome itself (with every cause, at most once a minute).
        .unwrap_or_else(|| {
            tracing_subscriber::filter::Targets::new()
                .with_default(tracing::Level::INFO)
                .with_target("aws_config", tracing::Level::ERROR)
                .with_target("aws_runtime", tracing::Level::ERROR)
        });
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // A closed stderr (`spillway run ... 2>&1 | head -1`) must not end the engine: the
        // default reports a failed log write with `eprintln!`, which panics on that same
        // stderr (exit 101). Lines that cannot be written are dropped.
        .log_internal_errors(false);
    match format {
        LogFormat::Text => {
            // Colour only for a person at a terminal: a journal, a file or a pipe gets plain
            // text, and NO_COLOR (https://no-color.org) turns it off there too.
            let colour = std::io::stderr().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
            logs.with_ansi(colour).finish().with(filter).init();
        }
        LogFormat::Json => logs
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_ansi(false)
            .finish()
            .with(filter)
            .init(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logs(cli.log_format);
    match cli.command {
        Cmd::Check { config, connect } => match load(&config) {
            Ok((cfg, map)) => {
                // Best effort, like the logs: a closed stdout changes nothing but the output.
                let mut out = std::io::stdout();
                let _ = write!(out, "{}", map.render(&cfg));
                if !connect {
                    let _ = writeln!(out, "{}: OK", config.display());
                    return ExitCode::SUCCESS;
                }
                let (text, ok) = spillway::check::render(&spillway::check::run(&cfg));
                let _ = write!(out, "{text}");
                if ok {
                    let _ = writeln!(out, "{}: OK, every endpoint reached", config.display());
                    ExitCode::SUCCESS
                } else {
                    let _ = writeln!(out, "{}: problems found (above)", config.display());
                    ExitCode::from(1)
                }
            }
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "error: {e}");
                ExitCode::from(EXIT_CONFIG)
            }
        },
        Cmd::Status {
            config,
            address,
            json,
        } => operate(&config, address.as_deref(), "GET", "/status", json),
        Cmd::Pause {
            config,
            sink,
            flush,
            address,
        } => {
            let path = format!(
                "/sinks/{sink}/pause{}",
                if flush { "?flush=true" } else { "" }
            );
            operate(&config, address.as_deref(), "POST", &path, false)
        }
        Cmd::Resume {
            config,
            sink,
            address,
        } => operate(
            &config,
            address.as_deref(),
            "POST",
            &format!("/sinks/{sink}/resume"),
            false,
        ),
        Cmd::Offsets { action } => offsets(action),
        Cmd::Orphans {
            config,
            sink,
            older_than,
            delete,
        } => orphans(&config, &sink, older_than, delete),
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
