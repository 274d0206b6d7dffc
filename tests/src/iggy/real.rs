//! [`IggyProcess`]: the real Apache Iggy server (0.9.0-edge.5) run by the harness as a child
//! process, in a temporary data directory, on a free loopback port, stopped on drop. It is
//! started with the environment `../shared/iggy/start-server.sh` sets (one shard, unpinned, TCP
//! only, root user `iggy`/`iggy`, logging to standard output, which goes to the log file).
//!
//! With `SPILLWAY_IGGY_SERVER_CPUS=LIST` (a `taskset` CPU list such as `0` or `0-3`) every
//! thread of the server is pinned to those CPUs once it listens, to measure placements (see
//! tuning.md).
//!
//! Where the binary comes from, first found wins: `SPILLWAY_IGGY_SERVER_BIN`, then
//! `../shared/iggy/iggy-server` beside the workspace, then `iggy-server` on `PATH`. Its config
//! is `SPILLWAY_IGGY_SERVER_CONFIG`, or the `config.toml` beside the binary when there is one.

use std::ffi::OsString;
use std::net::{SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::HarnessError;
use crate::certs::TestCa;
use crate::ports::{LOOPBACK, free_loopback_port};
use crate::process::ServerProcess;
use crate::tls::DEFAULT_SERVER_NAME;

use super::DEFAULT_CREDENTIALS;

/// How many ports to try when another process takes the one picked.
const PORT_ATTEMPTS: usize = 5;
/// How long the server may take to listen (about 0.1 s on these machines).
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a clean shutdown (SIGTERM) may take before the server is killed.
const TERMINATE_TIMEOUT: Duration = Duration::from_secs(10);

/// Options of an [`IggyProcess`] (a builder: each method returns the changed options).
#[derive(Clone, Default)]
pub struct IggyProcessOpts {
    tls: bool,
    heartbeat_interval: Option<Duration>,
    root: Option<(String, String)>,
    envs: Vec<(String, String)>,
}

// By hand: the root password stays out of `Debug`.
impl std::fmt::Debug for IggyProcessOpts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IggyProcessOpts")
            .field("tls", &self.tls)
            .field("heartbeat_interval", &self.heartbeat_interval)
            .field("root_user", &self.root.as_ref().map(|(u, _)| u))
            .field(
                "envs",
                &self.envs.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl IggyProcessOpts {
    /// Default options: plain TCP, the server's own heartbeat (30 s: a silent group member is
    /// evicted after 36 s).
    pub fn new() -> Self {
        IggyProcessOpts::default()
    }

    /// Serves TLS only, with a certificate for [`DEFAULT_SERVER_NAME`] and `127.0.0.1` issued by
    /// a CA made for this server ([`IggyProcess::ca_pem`]); `IGGY_TCP_TLS_SELF_SIGNED=false`.
    pub fn tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// The heartbeat interval (`IGGY_HEARTBEAT_INTERVAL`): a consumer-group member that sends
    /// nothing for 1.2 x this is evicted.
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.heartbeat_interval = Some(interval);
        self
    }

    /// The root user's name and password (`IGGY_ROOT_USERNAME` / `IGGY_ROOT_PASSWORD`) instead
    /// of `iggy`/`iggy`.
    pub fn root_user(mut self, username: &str, password: &str) -> Self {
        self.root = Some((username.to_owned(), password.to_owned()));
        self
    }

    /// Whether [`IggyProcessOpts::tls`] was asked for.
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// Any other server setting as an `IGGY_*` variable.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.envs.push((key.to_owned(), value.to_owned()));
        self
    }
}

/// The real Iggy server, started for one test (see the [module docs](self)).
pub struct IggyProcess {
    // Killed on drop (SIGKILL), before the directory holding its data goes.
    process: ServerProcess,
    port: u16,
    username: String,
    password: String,
    ca_pem: Option<String>,
    binary: PathBuf,
    dir: tempfile::TempDir,
}

impl std::fmt::Debug for IggyProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IggyProcess")
            .field("binary", &self.binary)
            .field("port", &self.port)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .field("pid", &self.process.pid())
            .field("tls", &self.ca_pem.is_some())
            .finish()
    }
}

/// The real server binary to run, if one is at hand: `SPILLWAY_IGGY_SERVER_BIN`, then
/// `../shared/iggy/iggy-server` beside the workspace, then `iggy-server` on `PATH`. A
/// `SPILLWAY_IGGY_SERVER_BIN` that names no file is an error, not a fallback.
pub fn server_binary() -> Result<Option<PathBuf>, HarnessError> {
    if let Some(bin) = std::env::var_os("SPILLWAY_IGGY_SERVER_BIN").filter(|v| !v.is_empty()) {
        let bin = PathBuf::from(bin);
        if bin.is_file() {
            return Ok(Some(bin));
        }
        return Err(HarnessError::InvalidOption(format!(
            "SPILLWAY_IGGY_SERVER_BIN={} is not a file",
            bin.display()
        )));
    }
    let shared = shared_binary();
    if shared.is_file() {
        return Ok(Some(shared));
    }
    Ok(on_path("iggy-server"))
}

/// `../shared/iggy/iggy-server`, seen from the workspace root.
pub fn shared_binary() -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or_else(|| Path::new("."));
    workspace.join("../shared/iggy/iggy-server")
}

fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

impl IggyProcess {
    /// Starts the real server found by [`server_binary`]; [`HarnessError::BinaryMissing`] when
    /// there is none.
    pub fn start_with(opts: IggyProcessOpts) -> Result<IggyProcess, HarnessError> {
        let binary = server_binary()?.ok_or_else(|| HarnessError::BinaryMissing {
            binary: "iggy-server".to_owned(),
        })?;
        Self::start_binary(&binary, opts)
    }

    /// Starts `binary` as the server.
    pub fn start_binary(binary: &Path, opts: IggyProcessOpts) -> Result<IggyProcess, HarnessError> {
        let dir = tempfile::Builder::new()
            .prefix("spillway-iggy-")
            .tempdir()
            .map_err(|e| HarnessError::io("creating the Iggy server directory", e))?;
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data)
            .map_err(|e| HarnessError::io(format!("creating {}", data.display()), e))?;
        let config = std::env::var_os("SPILLWAY_IGGY_SERVER_CONFIG")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                let beside = binary.with_file_name("config.toml");
                beside.is_file().then_some(beside)
            });

        let (username, password) = opts.root.clone().unwrap_or_else(|| {
            (
                DEFAULT_CREDENTIALS.0.to_owned(),
                DEFAULT_CREDENTIALS.1.to_owned(),
            )
        });
        let mut envs: Vec<(OsString, OsString)> = vec![
            ("IGGY_SYSTEM_PATH".into(), data.clone().into()),
            ("IGGY_TCP_ENABLED".into(), "true".into()),
            ("IGGY_HTTP_ENABLED".into(), "false".into()),
            ("IGGY_QUIC_ENABLED".into(), "false".into()),
            ("IGGY_WEBSOCKET_ENABLED".into(), "false".into()),
            ("IGGY_SYSTEM_SHARDING_CPU_ALLOCATION".into(), "1".into()),
            ("IGGY_SYSTEM_SHARDING_PIN_CORES".into(), "false".into()),
            ("IGGY_SYSTEM_LOGGING_FILE_ENABLED".into(), "false".into()),
            ("IGGY_ROOT_USERNAME".into(), username.clone().into()),
            ("IGGY_ROOT_PASSWORD".into(), password.clone().into()),
            ("NO_COLOR".into(), "1".into()),
        ];
        if let Some(config) = &config {
            envs.push(("IGGY_CONFIG_PATH".into(), config.clone().into()));
        }
        if let Some(interval) = opts.heartbeat_interval {
            envs.push((
                "IGGY_HEARTBEAT_INTERVAL".into(),
                format!("{}ms", interval.as_millis()).into(),
            ));
        }
        let ca_pem = if opts.tls {
            let ca = TestCa::new("spillway Iggy server CA")?;
            let cert = ca.issue_server_cert(&[DEFAULT_SERVER_NAME, "127.0.0.1"])?;
            let (cert_path, key_path) = cert.write_to(dir.path(), "iggy-server")?;
            envs.push(("IGGY_TCP_TLS_ENABLED".into(), "true".into()));
            envs.push(("IGGY_TCP_TLS_SELF_SIGNED".into(), "false".into()));
            envs.push(("IGGY_TCP_TLS_CERT_FILE".into(), cert_path.into()));
            envs.push(("IGGY_TCP_TLS_KEY_FILE".into(), key_path.into()));
            Some(ca.cert_pem().to_owned())
        } else {
            None
        };
        for (key, value) in &opts.envs {
            envs.push((key.into(), value.into()));
        }

        let mut process = ServerProcess::new(
            "iggy-server",
            binary.as_os_str().to_owned(),
            Vec::<OsString>::new(),
            dir.path().join("iggy-server.log"),
        )
        .current_dir(&data);
        for (key, value) in envs {
            process = process.env(key, value);
        }
        let mut attempt = 0;
        let port = loop {
            attempt += 1;
            let port = free_loopback_port()?;
            process.set_env(
                "IGGY_TCP_ADDRESS",
                format!("{}", SocketAddrV4::new(LOOPBACK, port)),
            );
            process.spawn()?;
            match process.wait_until_accepting(loopback(port), START_TIMEOUT) {
                Ok(()) => break port,
                Err(HarnessError::ServerExited { log_tail, .. })
                    if attempt < PORT_ATTEMPTS && log_tail.contains("in use") => {}
                Err(e) => return Err(e),
            }
        };
        if let Some(cpus) = std::env::var("SPILLWAY_IGGY_SERVER_CPUS")
            .ok()
            .filter(|v| !v.trim().is_empty())
        {
            pin(&process, cpus.trim())?;
        }
        Ok(IggyProcess {
            process,
            port,
            username,
            password,
            ca_pem,
            binary: binary.to_owned(),
            dir,
        })
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        loopback(self.port)
    }

    /// The PEM certificate of the CA that issued the server certificate, when it serves TLS
    /// (clients trust it and verify the name [`DEFAULT_SERVER_NAME`]).
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// The root user's name.
    pub fn username(&self) -> &str {
        &self.username
    }

    /// The root user's password.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// The binary that runs.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// The server's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// Its log (standard output and error of every run so far).
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// The temporary directory (data in `data/`, certificates, the log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Kills the server (SIGKILL, a crash) and starts it again on the same port and data.
    pub fn kill_and_restart(&mut self) -> Result<(), HarnessError> {
        self.process.stop()?;
        self.start_again()
    }

    /// Stops the server cleanly (SIGTERM; SIGKILL after 10 s).
    pub fn stop(&mut self) -> Result<(), HarnessError> {
        self.process.terminate(TERMINATE_TIMEOUT)
    }

    /// Starts the stopped server again on the same port and data.
    pub fn start_again(&mut self) -> Result<(), HarnessError> {
        self.process.spawn()?;
        self.process
            .wait_until_accepting(self.addr(), START_TIMEOUT)
    }
}

/// Pins every thread of the running server to `cpus` (`taskset -a -p -c`).
fn pin(process: &ServerProcess, cpus: &str) -> Result<(), HarnessError> {
    let pid = process
        .pid()
        .ok_or_else(|| HarnessError::InvalidOption("the Iggy server is not running".into()))?;
    let out = std::process::Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &pid.to_string()])
        .output()
        .map_err(|e| HarnessError::io("running taskset", e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(HarnessError::CommandFailed {
            command: format!("taskset -a -p -c {cpus} {pid}"),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(LOOPBACK, port))
}
