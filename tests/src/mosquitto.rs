//! A mosquitto broker run as a child process on an ephemeral loopback port, with its config,
//! password file, ACL file, certificates and log in a temporary directory.
//!
//! Facts about mosquitto 2.0.11 the defaults rely on:
//! - run as root it drops privileges to user `mosquitto` unless the config says `user root`, and
//!   then cannot read the 0600 key and password files; the harness adds `user root` when it runs
//!   as root;
//! - `max_inflight_messages` (default 20) is also what MQTT 5 clients get as Receive Maximum;
//! - `max_queued_messages` (default 1000) silently drops QoS 1/2 messages queued for a slow
//!   subscriber, so the harness raises it to 1,000,000 and sets `max_queued_bytes 0` (no limit);
//! - a wrong password is refused with CONNACK 5 (3.1.1) / 135 "not authorized" (5), not with
//!   "bad user name or password";
//! - a subscription to a topic the ACL does not allow to read is granted in SUBACK; the broker
//!   just never delivers to it.

use std::fmt;
use std::net::{SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use tempfile::TempDir;

use crate::HarnessError;
use crate::certs::{IssuedCert, TestCa};
use crate::fsutil::{running_as_root, write_file};
use crate::ports::LOOPBACK;
use crate::process::{LOG_TAIL_LINES, ServerProcess};
use crate::tls::ClientTls;

/// Whether and how the listener uses TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsMode {
    /// Plain TCP.
    #[default]
    Off,
    /// TLS with a server certificate signed by a test CA.
    Server,
    /// TLS, and clients must present a certificate signed by the test CA.
    Mutual,
}

/// Options for [`Mosquitto::start`], builder style.
#[derive(Clone)]
pub struct MosquittoOpts {
    users: Vec<(String, String)>,
    tls: TlsMode,
    acl: Option<String>,
    max_inflight_messages: Option<u16>,
    max_queued_messages: u64,
    max_queued_bytes: u64,
    persistence: bool,
    extra_lines: Vec<String>,
    verbose_log: bool,
    start_timeout: Duration,
    /// `set_tcp_nodelay true` (the harness's default; mosquitto's own is false).
    tcp_nodelay: bool,
}

impl Default for MosquittoOpts {
    fn default() -> Self {
        MosquittoOpts {
            users: Vec::new(),
            tls: TlsMode::Off,
            acl: None,
            max_inflight_messages: None,
            max_queued_messages: 1_000_000,
            max_queued_bytes: 0,
            persistence: false,
            extra_lines: Vec::new(),
            verbose_log: false,
            start_timeout: Duration::from_secs(10),
            tcp_nodelay: true,
        }
    }
}

impl fmt::Debug for MosquittoOpts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let users: Vec<&str> = self.users.iter().map(|(u, _)| u.as_str()).collect();
        f.debug_struct("MosquittoOpts")
            .field("users", &users)
            .field("tls", &self.tls)
            .field("acl", &self.acl)
            .field("max_inflight_messages", &self.max_inflight_messages)
            .field("max_queued_messages", &self.max_queued_messages)
            .field("max_queued_bytes", &self.max_queued_bytes)
            .field("persistence", &self.persistence)
            .field("extra_lines", &self.extra_lines)
            .field("verbose_log", &self.verbose_log)
            .field("start_timeout", &self.start_timeout)
            .field("tcp_nodelay", &self.tcp_nodelay)
            .finish()
    }
}

impl MosquittoOpts {
    /// A plain listener allowing anonymous clients.
    pub fn new() -> Self {
        Self::default()
    }

    /// Leaves Nagle's algorithm on for client sockets, as a stock mosquitto does
    /// (`set_tcp_nodelay false`): it then holds back small writes such as PUBACKs until the
    /// previous one is ACKed. The harness otherwise sets `set_tcp_nodelay true`.
    pub fn nagle(mut self) -> Self {
        self.tcp_nodelay = false;
        self
    }

    /// Adds a user (written with `mosquitto_passwd`); with at least one user anonymous clients
    /// are refused.
    pub fn user(mut self, name: impl Into<String>, password: impl Into<String>) -> Self {
        self.users.push((name.into(), password.into()));
        self
    }

    /// TLS with a server certificate for `localhost` and `127.0.0.1` signed by a fresh test CA.
    pub fn tls(mut self) -> Self {
        self.tls = TlsMode::Server;
        self
    }

    /// Mutual TLS: as [`MosquittoOpts::tls`], and clients must present a certificate signed by
    /// the test CA (`require_certificate true`); see [`Mosquitto::issue_client_cert`].
    pub fn mutual_tls(mut self) -> Self {
        self.tls = TlsMode::Mutual;
        self
    }

    /// Uses `text` as the ACL file (mosquitto `acl_file` syntax).
    pub fn acl(mut self, text: impl Into<String>) -> Self {
        self.acl = Some(text.into());
        self
    }

    /// Sets `max_inflight_messages` (mosquitto's default is 20).
    pub fn max_inflight_messages(mut self, n: u16) -> Self {
        self.max_inflight_messages = Some(n);
        self
    }

    /// Sets `max_queued_messages` (harness default 1,000,000; 0 means no limit).
    pub fn max_queued_messages(mut self, n: u64) -> Self {
        self.max_queued_messages = n;
        self
    }

    /// Sets `max_queued_bytes` (harness default 0, no limit).
    pub fn max_queued_bytes(mut self, n: u64) -> Self {
        self.max_queued_bytes = n;
        self
    }

    /// Keeps sessions, subscriptions and queued messages across restarts: `persistence true`
    /// with the database in the broker's directory. mosquitto writes the database when it
    /// shuts down, so stop it with [`Mosquitto::stop_graceful`] for sessions to survive
    /// ([`Mosquitto::stop`] is a crash: only what an autosave wrote survives).
    pub fn persistence(mut self) -> Self {
        self.persistence = true;
        self
    }

    /// Appends a raw line to mosquitto.conf (after the harness's own lines).
    pub fn config_line(mut self, line: impl Into<String>) -> Self {
        self.extra_lines.push(line.into());
        self
    }

    /// Logs everything (`log_type all`), including each packet; useful when debugging a test.
    pub fn verbose_log(mut self) -> Self {
        self.verbose_log = true;
        self
    }

    /// How long start-up may take before it fails (default 10 s).
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    fn validate(&self) -> Result<(), HarnessError> {
        for (user, password) in &self.users {
            if user.is_empty() || user.contains([':', '\n', '\r']) {
                return Err(HarnessError::InvalidOption(format!(
                    "mosquitto user name {user:?} must be non-empty without ':' or newlines"
                )));
            }
            if password.contains(['\n', '\r']) {
                return Err(HarnessError::InvalidOption(format!(
                    "the password of mosquitto user {user:?} contains a newline"
                )));
            }
        }
        if let Some(line) = self.extra_lines.iter().find(|l| l.contains(['\n', '\r'])) {
            return Err(HarnessError::InvalidOption(format!(
                "config line {line:?} contains a newline; add one line per call"
            )));
        }
        Ok(())
    }
}

/// The TLS material of a broker.
#[derive(Debug)]
struct BrokerTls {
    mode: TlsMode,
    ca: TestCa,
    ca_path: PathBuf,
    /// Certificate and key for `mosquitto_pub` under mutual TLS.
    cli_cert: Option<(PathBuf, PathBuf)>,
}

/// A running mosquitto broker. Killed on drop; its directory is removed then.
pub struct Mosquitto {
    // Field order matters on drop: the process stops before its directory goes.
    process: ServerProcess,
    port: u16,
    config_path: PathBuf,
    tls: Option<BrokerTls>,
    users: Vec<(String, String)>,
    start_timeout: Duration,
    dir: TempDir,
}

impl fmt::Debug for Mosquitto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let users: Vec<&str> = self.users.iter().map(|(u, _)| u.as_str()).collect();
        f.debug_struct("Mosquitto")
            .field("addr", &self.addr())
            .field("tls", &self.tls_mode())
            .field("users", &users)
            .field("dir", &self.dir.path())
            .field("process", &self.process)
            .finish_non_exhaustive()
    }
}

impl Mosquitto {
    /// Writes the configuration, starts mosquitto on a free loopback port and waits until it
    /// accepts connections.
    pub fn start(opts: MosquittoOpts) -> Result<Mosquitto, HarnessError> {
        opts.validate()?;
        let dir = tempfile::Builder::new()
            .prefix("spillway-mosquitto-")
            .tempdir()
            .map_err(|e| HarnessError::io("creating the mosquitto directory", e))?;
        let root = dir.path();

        let mut fixed = Vec::new();
        if running_as_root() {
            fixed.push("user root".to_owned());
        }
        if opts.persistence {
            fixed.push("persistence true".to_owned());
            fixed.push(format!("persistence_location {}/", root.display()));
        } else {
            fixed.push("persistence false".to_owned());
        }
        fixed.push("log_dest stderr".to_owned());
        fixed.push("log_timestamp_format %H:%M:%S".to_owned());
        if opts.verbose_log {
            fixed.push("log_type all".to_owned());
        }
        if opts.tcp_nodelay {
            fixed.push("set_tcp_nodelay true".to_owned());
        }
        fixed.push(format!("max_queued_messages {}", opts.max_queued_messages));
        fixed.push(format!("max_queued_bytes {}", opts.max_queued_bytes));
        if let Some(n) = opts.max_inflight_messages {
            fixed.push(format!("max_inflight_messages {n}"));
        }

        if opts.users.is_empty() {
            fixed.push("allow_anonymous true".to_owned());
        } else {
            let passwd = root.join("passwd");
            write_password_file(&passwd, &opts.users)?;
            fixed.push("allow_anonymous false".to_owned());
            fixed.push(format!("password_file {}", passwd.display()));
        }
        if let Some(acl) = &opts.acl {
            let acl_path = root.join("acl");
            write_file(&acl_path, acl.as_bytes())?;
            fixed.push(format!("acl_file {}", acl_path.display()));
        }

        let mut listener_lines = Vec::new();
        let tls = match opts.tls {
            TlsMode::Off => None,
            mode => {
                let ca = TestCa::new("spillway test CA")?;
                let ca_path = root.join("ca.crt");
                write_file(&ca_path, ca.cert_pem().as_bytes())?;
                let server = ca.issue_server_cert(&["localhost", "127.0.0.1"])?;
                let (cert_path, key_path) = server.write_to(root, "server")?;
                listener_lines.push(format!("cafile {}", ca_path.display()));
                listener_lines.push(format!("certfile {}", cert_path.display()));
                listener_lines.push(format!("keyfile {}", key_path.display()));
                let cli_cert = if mode == TlsMode::Mutual {
                    listener_lines.push("require_certificate true".to_owned());
                    let cli = ca.issue_client_cert("mosquitto_pub")?;
                    Some(cli.write_to(root, "cli-client")?)
                } else {
                    None
                };
                Some(BrokerTls {
                    mode,
                    ca,
                    ca_path,
                    cli_cert,
                })
            }
        };

        let config_path = root.join("mosquitto.conf");
        let log_path = root.join("mosquitto.log");
        let mut process = ServerProcess::new(
            "mosquitto",
            "mosquitto",
            ["-c".into(), config_path.clone().into_os_string()],
            log_path,
        );

        let port = process.start_on_free_port(opts.start_timeout, |_, port| {
            let mut lines = vec![format!("listener {port} {LOOPBACK}")];
            lines.extend(listener_lines.iter().cloned());
            lines.extend(fixed.iter().cloned());
            lines.extend(opts.extra_lines.iter().cloned());
            lines.push(String::new());
            write_file(&config_path, lines.join("\n").as_bytes())
        })?;

        Ok(Mosquitto {
            process,
            port,
            config_path,
            tls,
            users: opts.users,
            start_timeout: opts.start_timeout,
            dir,
        })
    }

    /// Starts a plain broker with default options.
    pub fn start_default() -> Result<Mosquitto, HarnessError> {
        Self::start(MosquittoOpts::default())
    }

    /// The listener port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The listener host, `127.0.0.1`.
    pub fn host(&self) -> String {
        LOOPBACK.to_string()
    }

    /// The listener address.
    pub fn addr(&self) -> SocketAddr {
        loopback(self.port)
    }

    /// `host:port`.
    pub fn host_port(&self) -> String {
        format!("{LOOPBACK}:{}", self.port)
    }

    /// `mqtt://127.0.0.1:port`, or `mqtts://…` with TLS.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "mqtts" } else { "mqtt" };
        format!("{scheme}://{LOOPBACK}:{}", self.port)
    }

    /// The TLS mode of the listener.
    pub fn tls_mode(&self) -> TlsMode {
        self.tls.as_ref().map_or(TlsMode::Off, |t| t.mode)
    }

    /// The test CA, with TLS.
    pub fn ca(&self) -> Option<&TestCa> {
        self.tls.as_ref().map(|t| &t.ca)
    }

    /// The CA certificate PEM clients should trust, with TLS.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca().map(TestCa::cert_pem)
    }

    /// The CA certificate file, with TLS.
    pub fn ca_path(&self) -> Option<&Path> {
        self.tls.as_ref().map(|t| t.ca_path.as_path())
    }

    /// Client TLS settings trusting this broker's CA (no client certificate), with TLS.
    pub fn client_tls(&self) -> Option<ClientTls> {
        self.ca_pem().map(ClientTls::new)
    }

    /// Issues a client certificate signed by this broker's CA (for mutual TLS).
    pub fn issue_client_cert(&self, common_name: &str) -> Result<IssuedCert, HarnessError> {
        match self.ca() {
            Some(ca) => ca.issue_client_cert(common_name),
            None => Err(HarnessError::InvalidOption(
                "this broker has no TLS, so no CA to issue client certificates".to_owned(),
            )),
        }
    }

    /// The first configured user and password, if any.
    pub fn credentials(&self) -> Option<(&str, &str)> {
        self.users
            .first()
            .map(|(user, pass)| (user.as_str(), pass.as_str()))
    }

    /// The temporary directory holding config, log and certificates.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The mosquitto.conf path.
    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// The broker log so far (all runs).
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// The last `lines` lines of the broker log.
    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }

    /// The process id while the broker runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// Whether the broker process is running.
    pub fn is_running(&mut self) -> bool {
        self.process.is_running()
    }

    /// Kills the broker (SIGKILL, like a crash) and waits for it to exit. The port is then
    /// refused until [`Mosquitto::start_again`].
    pub fn stop(&mut self) -> Result<(), HarnessError> {
        self.process.stop()
    }

    /// Stops the broker as an operator would (SIGTERM): it closes its clients' connections,
    /// writes its persistence database (with [`MosquittoOpts::persistence`]) and exits. Falls
    /// back to SIGKILL when it has not exited within `timeout`.
    pub fn stop_graceful(&mut self, timeout: Duration) -> Result<(), HarnessError> {
        self.process.terminate(timeout)
    }

    /// Starts the stopped broker again with the same config on the same port, and waits until
    /// it accepts connections.
    pub fn start_again(&mut self) -> Result<(), HarnessError> {
        if self.process.is_running() {
            return Err(HarnessError::InvalidOption(
                "mosquitto is already running; stop() it first or use restart()".to_owned(),
            ));
        }
        self.process.spawn()?;
        self.process
            .wait_until_accepting(self.addr(), self.start_timeout)
    }

    /// Stops (SIGKILL) and starts the broker on the same port; sessions are lost unless an
    /// autosave of [`MosquittoOpts::persistence`] kept them.
    pub fn restart(&mut self) -> Result<(), HarnessError> {
        self.stop()?;
        self.start_again()
    }

    /// A `mosquitto_pub` command with host, port and, as configured, the CA file, the first
    /// user's credentials and (mutual TLS) a client certificate. Add `-t`, `-m`, `-q`, … and run.
    pub fn mosquitto_pub(&self) -> Command {
        let mut cmd = Command::new("mosquitto_pub");
        cmd.arg("-h")
            .arg(LOOPBACK.to_string())
            .arg("-p")
            .arg(self.port.to_string());
        if let Some(tls) = &self.tls {
            cmd.arg("--cafile").arg(&tls.ca_path);
            if let Some((cert, key)) = &tls.cli_cert {
                cmd.arg("--cert").arg(cert).arg("--key").arg(key);
            }
        }
        if let Some((user, pass)) = self.credentials() {
            cmd.arg("-u").arg(user).arg("-P").arg(pass);
        }
        cmd
    }

    /// Runs [`Mosquitto::mosquitto_pub`] with `args` added and checks that it succeeded.
    pub fn publish_cli(&self, args: &[&str]) -> Result<(), HarnessError> {
        let mut cmd = self.mosquitto_pub();
        cmd.args(args);
        let output = cmd.output().map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                HarnessError::BinaryMissing {
                    binary: "mosquitto_pub".to_owned(),
                }
            } else {
                HarnessError::io("running mosquitto_pub", e)
            }
        })?;
        if output.status.success() {
            Ok(())
        } else {
            Err(HarnessError::CommandFailed {
                command: format!("mosquitto_pub {}", args.join(" ")),
                status: output.status.to_string(),
                stderr: format!(
                    "{}\nbroker log tail:\n{}",
                    String::from_utf8_lossy(&output.stderr),
                    self.log_tail(LOG_TAIL_LINES)
                ),
            })
        }
    }
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(LOOPBACK, port))
}

/// Writes a mosquitto password file with `mosquitto_passwd -b` (`-c` for the first user).
fn write_password_file(path: &Path, users: &[(String, String)]) -> Result<(), HarnessError> {
    for (i, (user, pass)) in users.iter().enumerate() {
        let mut cmd = Command::new("mosquitto_passwd");
        cmd.arg("-b");
        if i == 0 {
            cmd.arg("-c");
        }
        cmd.arg(path).arg(user).arg(pass);
        let output = cmd.output().map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                HarnessError::BinaryMissing {
                    binary: "mosquitto_passwd".to_owned(),
                }
            } else {
                HarnessError::io("running mosquitto_passwd", e)
            }
        })?;
        if !output.status.success() {
            return Err(HarnessError::CommandFailed {
                command: format!("mosquitto_passwd -b {} {user} <password>", path.display()),
                status: output.status.to_string(),
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            });
        }
    }
    Ok(())
}
