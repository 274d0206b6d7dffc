//! A server run as a child process: its output goes to a log file, readiness is "accepts TCP",
//! and it is killed and reaped on drop.

use std::ffi::OsString;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::HarnessError;
use crate::fsutil::{read_lossy, tail};
use crate::ports::{accepts_tcp, listener_owned_by};

/// How many log lines an error message carries.
pub const LOG_TAIL_LINES: usize = 40;

/// One server binary with fixed arguments, which can be started, stopped and started again.
///
/// Standard output and standard error are appended to one log file, so the log of every run is
/// kept across restarts.
pub struct ServerProcess {
    name: &'static str,
    program: OsString,
    args: Vec<OsString>,
    envs: Vec<(OsString, OsString)>,
    current_dir: Option<PathBuf>,
    log_path: PathBuf,
    child: Option<Child>,
}

impl ServerProcess {
    /// Describes a server; nothing runs until [`ServerProcess::spawn`].
    ///
    /// `name` is used in error messages, `program` is a path or looked up on `PATH`.
    pub fn new(
        name: &'static str,
        program: impl Into<OsString>,
        args: impl IntoIterator<Item = impl Into<OsString>>,
        log_path: impl Into<PathBuf>,
    ) -> Self {
        ServerProcess {
            name,
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            envs: Vec::new(),
            current_dir: None,
            log_path: log_path.into(),
            child: None,
        }
    }

    /// Sets an environment variable for the server.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.envs.push((key.into(), value.into()));
        self
    }

    /// Sets an environment variable for the next start, replacing an earlier value.
    pub fn set_env(&mut self, key: impl Into<OsString>, value: impl Into<OsString>) {
        let key = key.into();
        let value = value.into();
        match self.envs.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value,
            None => self.envs.push((key, value)),
        }
    }

    /// Runs the server in `dir` (so it picks up no stray files from the test's directory).
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.current_dir = Some(dir.into());
        self
    }

    /// Replaces the arguments (for example to use a new port after a failed start).
    pub fn set_args(&mut self, args: impl IntoIterator<Item = impl Into<OsString>>) {
        self.args = args.into_iter().map(Into::into).collect();
    }

    /// Starts the process. Fails with [`HarnessError::BinaryMissing`] when the program is not
    /// installed, and with [`HarnessError::InvalidOption`] when it is already running.
    pub fn spawn(&mut self) -> Result<(), HarnessError> {
        if self.is_running() {
            return Err(HarnessError::InvalidOption(format!(
                "{} is already running",
                self.name
            )));
        }
        let log = self.open_log()?;
        let log_err = log
            .try_clone()
            .map_err(|e| HarnessError::io("duplicating the log file handle", e))?;
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err));
        for (key, value) in &self.envs {
            command.env(key, value);
        }
        if let Some(dir) = &self.current_dir {
            command.current_dir(dir);
        }
        let child = command.spawn().map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                HarnessError::BinaryMissing {
                    binary: self.program.to_string_lossy().into_owned(),
                }
            } else {
                HarnessError::io(
                    format!(
                        "starting {} ({})",
                        self.name,
                        self.program.to_string_lossy()
                    ),
                    e,
                )
            }
        })?;
        self.child = Some(child);
        Ok(())
    }

    /// Starts the server on a free loopback port and waits until it accepts there: `prepare`
    /// gets the port first (to set the arguments or write a config file). A start that fails
    /// because another process took the port meanwhile is tried again on a new port, up to
    /// three times; the port in use is returned.
    pub fn start_on_free_port(
        &mut self,
        timeout: Duration,
        mut prepare: impl FnMut(&mut Self, u16) -> Result<(), HarnessError>,
    ) -> Result<u16, HarnessError> {
        const ATTEMPTS: usize = 3;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let port = crate::ports::free_loopback_port()?;
            prepare(self, port)?;
            self.spawn()?;
            match self
                .wait_until_accepting(SocketAddr::from((crate::ports::LOOPBACK, port)), timeout)
            {
                Ok(()) => return Ok(port),
                Err(HarnessError::ServerExited { log_tail, .. })
                    if attempt < ATTEMPTS && log_tail.contains("Address already in use") => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits until the server listens on `addr` (its own socket, see
    /// [`crate::ports::listener_owned_by`]). If the process exits first, or `timeout` passes, the
    /// process is stopped and the error carries the tail of the log.
    pub fn wait_until_accepting(
        &mut self,
        addr: SocketAddr,
        timeout: Duration,
    ) -> Result<(), HarnessError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exit_status()? {
                self.child = None;
                return Err(HarnessError::ServerExited {
                    server: self.name,
                    status,
                    log_tail: self.log_tail(LOG_TAIL_LINES),
                });
            }
            if self.listens_on(addr) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                // Best effort: the timeout is the error worth reporting.
                let _ = self.stop();
                return Err(HarnessError::StartTimeout {
                    server: self.name,
                    waited: timeout,
                    log_tail: self.log_tail(LOG_TAIL_LINES),
                });
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the server is ready on `addr`: it accepts a TCP connection, and the listening
    /// socket is the server's own (checked in `/proc` where possible, so another process that
    /// took the same port does not count; the check runs only after a connection succeeded,
    /// because reading `/proc/net/tcp` is slow with many sockets in TIME_WAIT).
    fn listens_on(&self, addr: SocketAddr) -> bool {
        accepts_tcp(addr, Duration::from_millis(200))
            && self
                .pid()
                .and_then(|pid| listener_owned_by(pid, addr.port()))
                .unwrap_or(true)
    }

    /// Kills the process (SIGKILL) and reaps it. Does nothing when it is not running.
    pub fn stop(&mut self) -> Result<(), HarnessError> {
        if let Some(mut child) = self.child.take() {
            match child.kill() {
                Ok(()) => {}
                // Already exited: reaping below is all that is left.
                Err(e) if e.kind() == io::ErrorKind::InvalidInput => {}
                Err(e) => return Err(HarnessError::io(format!("killing {}", self.name), e)),
            }
            child
                .wait()
                .map_err(|e| HarnessError::io(format!("waiting for {} to exit", self.name), e))?;
        }
        Ok(())
    }

    /// Asks the process to end (SIGTERM, sent with the `kill` command) and waits up to
    /// `timeout` for it to exit; then kills it (SIGKILL). Does nothing when it is not running.
    pub fn terminate(&mut self, timeout: Duration) -> Result<(), HarnessError> {
        let Some(pid) = self.pid() else {
            return Ok(());
        };
        if !self.is_running() {
            return self.stop();
        }
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status()
            .map_err(|e| HarnessError::io(format!("sending SIGTERM to {}", self.name), e))?;
        if status.success() {
            let deadline = Instant::now() + timeout;
            while Instant::now() < deadline {
                if self.exit_status()?.is_some() {
                    break;
                }
                thread::sleep(Duration::from_millis(10));
            }
        }
        self.stop()
    }

    /// Whether the process is running (started and not exited).
    pub fn is_running(&mut self) -> bool {
        matches!(self.exit_status(), Ok(None)) && self.child.is_some()
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The path of the log file.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The whole log (all runs so far).
    pub fn log(&self) -> String {
        read_lossy(&self.log_path)
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log(), lines)
    }

    /// `Some(status)` if the child has exited, `None` if it runs or was never started.
    fn exit_status(&mut self) -> Result<Option<String>, HarnessError> {
        match self.child.as_mut() {
            None => Ok(None),
            Some(child) => match child.try_wait() {
                Ok(Some(status)) => Ok(Some(status.to_string())),
                Ok(None) => Ok(None),
                Err(e) => Err(HarnessError::io(format!("polling {}", self.name), e)),
            },
        }
    }

    fn open_log(&self) -> Result<File, HarnessError> {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| HarnessError::io(format!("opening {}", self.log_path.display()), e))
    }
}

impl fmt::Debug for ServerProcess {
    // Arguments and environment are left out: they can carry secrets (S3 keys).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerProcess")
            .field("name", &self.name)
            .field("program", &self.program)
            .field("pid", &self.pid())
            .field("log_path", &self.log_path)
            .finish_non_exhaustive()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // Nothing useful can be done with a failure while dropping.
        let _ = self.stop();
    }
}
