//! An ejabberd (Debian's 23.01) MQTT broker (`mod_mqtt`) run as a child process on an ephemeral
//! loopback port, with its own config, spool (Mnesia) and logs in a temporary directory: a
//! second real broker, an Erlang implementation like EMQX and VerneMQ, next to mosquitto.
//!
//! Facts about Debian's ejabberd 23.01 this relies on (checked by hand):
//! - `ejabberdctl` run as root re-executes itself through `su ejabberd` without the options it
//!   parsed, and Debian's `/etc/ejabberd/ejabberdctl.cfg` sets `EJABBERD_CONFIG_PATH` to the
//!   system config, which overrides `--config`. So the harness runs it as user `ejabberd`
//!   (`setpriv`, which execs) with a config directory of its own holding its own
//!   `ejabberdctl.cfg`;
//! - `ejabberdctl foreground` starts the Erlang VM as a child of its shell: the harness kills
//!   the VM by the pid file ejabberd writes (`EJABBERD_PID_PATH`), then the shell;
//! - `ejabberdctl register USER HOST PASSWORD` adds a user to the spool, which a stop and
//!   start keep; MQTT clients log in as `USER@HOST` or, with one host, `USER`;
//! - over MQTT 5 it answers a PUBLISH nobody subscribed to with PUBACK 0x10 (No matching
//!   subscribers), a success code, and one `access_publish` denies (a topic none of its
//!   entries matches) with PUBACK 0x90 (Topic Name invalid); an entry `"#": all` allows every
//!   topic whatever other entries say.

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::certs::TestCa;
use crate::error::HarnessError;
use crate::fsutil::{running_as_root, write_file};
use crate::ports::{LOOPBACK, free_loopback_port};
use crate::process::ServerProcess;

/// The one MQTT user the harness registers.
pub const EJABBERD_USER: &str = "spw";
/// Its password.
pub const EJABBERD_PASSWORD: &str = "spw-secret";
/// The XMPP host the user belongs to.
const HOST: &str = "localhost";
/// How long the VM may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// What to start.
#[derive(Debug, Clone, Default)]
pub struct EjabberdOpts {
    tls: bool,
    publish_only: Option<String>,
}

impl EjabberdOpts {
    /// A plain listener, the user registered.
    pub fn new() -> Self {
        Self::default()
    }

    /// The MQTT listener speaks TLS, with a server certificate of its own CA.
    pub fn tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// PUBLISH is allowed to topics matching `filter` only (`mod_mqtt`'s `access_publish`:
    /// a topic no entry matches is denied).
    pub fn publish_only(mut self, filter: impl Into<String>) -> Self {
        self.publish_only = Some(filter.into());
        self
    }
}

/// A running ejabberd (killed on drop).
pub struct Ejabberd {
    process: ServerProcess,
    port: u16,
    node: String,
    ca: Option<TestCa>,
    dir: TempDir,
}

impl fmt::Debug for Ejabberd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ejabberd")
            .field("port", &self.port)
            .field("node", &self.node)
            .field("tls", &self.ca.is_some())
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl Ejabberd {
    /// Writes the config, starts ejabberd on a free loopback port, waits until it accepts
    /// connections and registers [`EJABBERD_USER`].
    pub fn start(opts: EjabberdOpts) -> Result<Ejabberd, HarnessError> {
        if !Path::new("/usr/sbin/ejabberdctl").exists() {
            return Err(HarnessError::BinaryMissing {
                binary: "ejabberdctl (Debian package ejabberd; run scripts/setup.sh)".to_owned(),
            });
        }
        if !running_as_root() {
            return Err(HarnessError::InvalidOption(
                "ejabberd runs as its own user: the harness must run as root".to_owned(),
            ));
        }
        let dir = tempfile::Builder::new()
            .prefix("spillway-ejabberd-")
            .tempdir()
            .map_err(|e| HarnessError::io("creating the ejabberd directory", e))?;
        let root = dir.path().to_owned();
        for sub in ["conf", "logs", "spool", "modules.d"] {
            std::fs::create_dir_all(root.join(sub))
                .map_err(|e| HarnessError::io("creating the ejabberd directories", e))?;
        }
        let port = free_loopback_port()?;
        let node = format!("spw{port}@localhost");
        let mut certfiles = Vec::new();
        let ca = if opts.tls {
            let ca = TestCa::new("spillway test CA")?;
            let server = ca.issue_server_cert_for_days(&["localhost", "127.0.0.1"], 30)?;
            let (cert, key) = server.write_to(&root.join("conf"), "server")?;
            certfiles.push(cert);
            certfiles.push(key);
            Some(ca)
        } else {
            None
        };
        let certs = if certfiles.is_empty() {
            "certfiles: []\n".to_owned()
        } else {
            let mut s = "certfiles:\n".to_owned();
            for c in &certfiles {
                s.push_str(&format!("  - \"{}\"\n", c.display()));
            }
            s
        };
        let access = match &opts.publish_only {
            Some(filter) => format!("    access_publish:\n      \"{filter}\": all\n"),
            None => String::new(),
        };
        let config = format!(
            "hosts:\n  - {HOST}\nloglevel: info\n{certs}\
             listen:\n  -\n    port: {port}\n    ip: \"{LOOPBACK}\"\n    module: mod_mqtt\n    \
             backlog: 1000\n    tls: {tls}\n\
             auth_method: internal\n\
             acl:\n  local:\n    user_regexp: \"\"\n\
             access_rules:\n  local:\n    allow: local\n\
             api_permissions:\n  \"console commands\":\n    from:\n      - ejabberd_ctl\n    \
             who: all\n    what: \"*\"\n\
             modules:\n  mod_mqtt:\n    max_queue: 100000\n{access}",
            tls = opts.tls,
        );
        write_file(&root.join("conf/ejabberd.yml"), config.as_bytes())?;
        let ctl = format!(
            "ERL_OPTIONS=\"-env ERL_CRASH_DUMP_BYTES 0\"\nEJABBERD_PID_PATH={}\n\
             CONTRIB_MODULES_CONF_DIR={}\n",
            root.join("ejabberd.pid").display(),
            root.join("modules.d").display()
        );
        write_file(&root.join("conf/ejabberdctl.cfg"), ctl.as_bytes())?;
        write_file(
            &root.join("conf/inetrc"),
            b"{lookup,[\"file\",\"native\"]}.\n{host,{127,0,0,1}, [\"localhost\"]}.\n",
        )?;
        let status = Command::new("chown")
            .args(["-R", "ejabberd:ejabberd"])
            .arg(&root)
            .status()
            .map_err(|e| HarnessError::io("chown of the ejabberd directory", e))?;
        if !status.success() {
            return Err(HarnessError::CommandFailed {
                command: format!("chown -R ejabberd {}", root.display()),
                status: status.to_string(),
                stderr: String::new(),
            });
        }
        let mut args = as_ejabberd();
        args.extend(ctl_args(&root, &node));
        args.push("foreground".to_owned());
        // The Erlang cookie lives in $HOME: the instance's own directory, for the node and
        // for the ctl calls alike.
        let process = ServerProcess::new("ejabberd", "setpriv", args, root.join("out.log"))
            .env("HOME", &root);
        let mut e = Ejabberd {
            process,
            port,
            node,
            ca,
            dir,
        };
        e.spawn_and_wait()?;
        e.ctl(&["register", EJABBERD_USER, HOST, EJABBERD_PASSWORD])?;
        Ok(e)
    }

    /// Starts the VM and waits until the MQTT listener accepts a connection. The listening
    /// socket belongs to the VM, a grandchild (setpriv execs ejabberdctl, a shell that runs
    /// erl), so the process harness's check that the child owns it does not apply here.
    fn spawn_and_wait(&mut self) -> Result<(), HarnessError> {
        self.process.spawn()?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if !self.process.is_running() {
                return Err(HarnessError::ServerExited {
                    server: "ejabberd",
                    status: "exited".to_owned(),
                    log_tail: self.process.log_tail(40),
                });
            }
            if std::net::TcpStream::connect_timeout(&self.addr(), Duration::from_millis(200))
                .is_ok()
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let _ = self.process.stop();
                return Err(HarnessError::StartTimeout {
                    server: "ejabberd",
                    waited: START_TIMEOUT,
                    log_tail: self.process.log_tail(40),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs `ejabberdctl <args>` against this node (as user ejabberd), retrying for a few
    /// seconds while the node is still coming up.
    fn ctl(&self, args: &[&str]) -> Result<(), HarnessError> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mut cmd = Command::new("setpriv");
            cmd.args(as_ejabberd())
                .args(ctl_args(self.dir.path(), &self.node))
                .args(args)
                .env("HOME", self.dir.path());
            let out = cmd
                .output()
                .map_err(|e| HarnessError::io("running ejabberdctl", e))?;
            let said = String::from_utf8_lossy(&out.stdout);
            // A user kept in the spool through a restart is registered already.
            if out.status.success() || said.contains("already registered") {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(HarnessError::CommandFailed {
                    command: format!("ejabberdctl {}", args.first().copied().unwrap_or("")),
                    status: out.status.to_string(),
                    stderr: format!(
                        "{}{}",
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The loopback address of the MQTT listener.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(LOOPBACK.into(), self.port)
    }

    /// `127.0.0.1:port`.
    pub fn host_port(&self) -> String {
        self.addr().to_string()
    }

    /// The CA of the TLS listener.
    pub fn ca(&self) -> Option<&TestCa> {
        self.ca.as_ref()
    }

    /// The server log (ejabberd's own, with what the VM printed).
    pub fn log(&self) -> String {
        let own =
            std::fs::read_to_string(self.dir.path().join("logs/ejabberd.log")).unwrap_or_default();
        format!("{}{own}", self.process.log())
    }

    /// Stops the broker (`ejabberdctl stop`, as an operator's restart does) and starts it
    /// again on the same port, spool and config; waits until it accepts connections. (After a
    /// SIGKILL the restarted node refused the user with 0x87 for a while: Mnesia had not
    /// written it out, or was still loading it.)
    pub fn restart(&mut self) -> Result<(), HarnessError> {
        self.ctl(&["stop"])?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.process.is_running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill_vm();
        let _ = self.process.stop();
        self.spawn_and_wait()
    }

    fn kill_vm(&self) {
        let pid_path = self.dir.path().join("ejabberd.pid");
        if let Some(pid) = std::fs::read_to_string(&pid_path)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
        {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            let deadline = Instant::now() + Duration::from_secs(5);
            while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = std::fs::remove_file(pid_path);
    }
}

impl Drop for Ejabberd {
    fn drop(&mut self) {
        self.kill_vm();
        let _ = self.process.stop();
    }
}

/// `setpriv` arguments that run the rest as user and group ejabberd.
fn as_ejabberd() -> Vec<String> {
    [
        "--reuid=ejabberd",
        "--regid=ejabberd",
        "--init-groups",
        "--",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// `ejabberdctl` with this instance's directories and node.
fn ctl_args(root: &Path, node: &str) -> Vec<String> {
    let p = |s: &str| -> String { root.join(s).display().to_string() };
    vec![
        "/usr/sbin/ejabberdctl".to_owned(),
        "--config-dir".to_owned(),
        p("conf"),
        "--config".to_owned(),
        p("conf/ejabberd.yml"),
        "--logs".to_owned(),
        p("logs"),
        "--spool".to_owned(),
        p("spool"),
        "--node".to_owned(),
        node.to_owned(),
    ]
}
