//! The engine as its own process: the `spillway` binary, started with a config file, for the
//! scenarios that report figures of the engine alone. Its CPU time comes from `wait4(2)` once
//! it has exited, so nothing of the bench's own threads, servers or allocator is in it. Its
//! peak resident set is `VmHWM` from `/proc/<pid>/status`, read every time the bench looks at
//! the process, NOT `wait4`'s `ru_maxrss`: Linux folds the address space a child had before
//! `exec` into that figure, and a child spawned by the bench starts out sharing the bench's
//! memory (which holds the Iggy stand-in's messages), so `ru_maxrss` reported the bench's size.
//!
//! The binary is looked for in `SPILLWAY_BENCH_ENGINE`, next to `spillway-bench`, then under
//! the workspace's `target/release`; build it with `cargo build --release -p spillway`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::report;

/// Names the binary to run instead of looking for it.
pub const ENGINE_ENV: &str = "SPILLWAY_BENCH_ENGINE";

/// The `spillway` binary to run.
pub fn binary() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os(ENGINE_ENV).filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("{ENGINE_ENV}={}: no such file", p.display()))
        };
    }
    let mut candidates = Vec::new();
    if let Ok(exe) = std::env::current_exe()
        && let Some(dir) = exe.parent()
    {
        candidates.push(dir.join("spillway"));
    }
    candidates.push(
        report::workspace_root()
            .join("target")
            .join("release")
            .join("spillway"),
    );
    candidates.into_iter().find(|p| p.is_file()).ok_or_else(|| {
        "the spillway binary is neither next to spillway-bench nor in target/release: build \
         it with `cargo build --release -p spillway` (or name it in SPILLWAY_BENCH_ENGINE)"
            .to_owned()
    })
}

/// How the engine process ended.
#[derive(Debug, Clone, Copy)]
pub struct Exit {
    /// When the bench saw it gone.
    pub at: Instant,
    /// User + system CPU time of every thread, over the process's whole life.
    pub cpu: Duration,
    /// Peak resident set size (`VmHWM`, bytes) as last read while it ran: growth in the
    /// last few milliseconds before the exit may be missed.
    pub peak_rss: u64,
}

/// A running engine process; killed (and reaped) on drop if still running.
#[derive(Debug)]
pub struct EngineProcess {
    child: Option<Child>,
    pid: i32,
    log: PathBuf,
    /// The largest `VmHWM` read so far, bytes.
    hwm: u64,
    _dir: tempfile::TempDir,
    /// When it was spawned.
    pub started: Instant,
}

impl EngineProcess {
    /// Writes `config` to a file and runs `spillway run --config FILE` with `env` added (the
    /// Iggy password goes there, not into the file), its log (stdout and stderr) in a file
    /// beside it.
    pub fn start(
        binary: &Path,
        config: &str,
        env: &[(&str, &str)],
    ) -> Result<EngineProcess, String> {
        let dir = tempfile::Builder::new()
            .prefix("spillway-bench-engine-")
            .tempdir()
            .map_err(|e| format!("temporary directory: {e}"))?;
        let path = dir.path().join("spillway.toml");
        std::fs::write(&path, config).map_err(|e| format!("writing {}: {e}", path.display()))?;
        let log = dir.path().join("spillway.log");
        let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out
            .try_clone()
            .map_err(|e| format!("{}: {e}", log.display()))?;
        let started = Instant::now();
        let child = Command::new(binary)
            .arg("run")
            .arg("--config")
            .arg(&path)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", binary.display()))?;
        let pid = i32::try_from(child.id()).map_err(|_| "pid out of range".to_owned())?;
        Ok(EngineProcess {
            child: Some(child),
            pid,
            log,
            hwm: 0,
            _dir: dir,
            started,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        u32::try_from(self.pid).unwrap_or(0)
    }

    /// Asks it to drain and stop (SIGTERM: the engine stops polling, waits for what is in
    /// flight, closes open objects and stores the confirmed offsets).
    pub fn terminate(&self) {
        self.signal(libc::SIGTERM);
    }

    /// Freezes it (SIGSTOP): every thread stops where it is, its connections stay open and
    /// silent, as in a VM pause. [`EngineProcess::resume`] thaws it.
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// Thaws a frozen process (SIGCONT); nothing for a running one.
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    /// Sends `sig` while the process is ours (not reaped yet).
    fn signal(&self, sig: libc::c_int) {
        if self.child.is_some() {
            // SAFETY: kill(2) on the pid of our own child, which is not reaped yet (it is
            // reaped only in `try_exit` or `kill`, which take `child` first), so the pid is
            // still ours.
            #[allow(unsafe_code)]
            unsafe {
                libc::kill(self.pid, sig);
            }
        }
    }

    /// Reads its `VmHWM` now (while it runs) and returns the largest so far, bytes.
    pub fn sample_rss(&mut self) -> u64 {
        if self.child.is_some()
            && let Ok(text) = std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            && let Some(kib) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        {
            self.hwm = self.hwm.max(kib * 1024);
        }
        self.hwm
    }

    /// The exit, if the process has ended (reaps it); `Ok(None)` while it runs.
    pub fn try_exit(&mut self) -> Result<Option<Exit>, String> {
        if self.child.is_none() {
            return Err("the engine process was already reaped".into());
        }
        self.sample_rss();
        let mut status: libc::c_int = 0;
        // SAFETY: a zeroed rusage is a valid value of the plain C struct.
        #[allow(unsafe_code)]
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: wait4 on our own child's pid with valid pointers to locals.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::wait4(self.pid, &mut status, libc::WNOHANG, &mut usage) };
        if rc == 0 {
            return Ok(None);
        }
        if rc < 0 {
            return Err(format!(
                "waiting for the engine: {}",
                std::io::Error::last_os_error()
            ));
        }
        // Reaped: std must not wait on it again (the pid may be reused).
        drop(self.child.take());
        let at = Instant::now();
        let tv = |t: libc::timeval| {
            Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
                + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
        };
        let exit = Exit {
            at,
            cpu: tv(usage.ru_utime) + tv(usage.ru_stime),
            peak_rss: self.hwm,
        };
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
            Ok(Some(exit))
        } else {
            let how = if libc::WIFEXITED(status) {
                format!("exited with status {}", libc::WEXITSTATUS(status))
            } else if libc::WIFSIGNALED(status) {
                format!("was killed by signal {}", libc::WTERMSIG(status))
            } else {
                format!("ended with wait status {status:#x}")
            };
            Err(format!("the engine {how}; its log:\n{}", self.log_tail(30)))
        }
    }

    /// Waits for it to exit until `deadline`; past it, kills it and says so.
    pub fn wait(&mut self, deadline: Instant) -> Result<Exit, String> {
        loop {
            if let Some(exit) = self.try_exit()? {
                return Ok(exit);
            }
            if Instant::now() >= deadline {
                let tail = self.log_tail(30);
                self.kill();
                return Err(format!(
                    "the engine did not exit in time (killed); its log:\n{tail}"
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// SIGTERM, then waits up to `grace` for the exit.
    pub fn stop(&mut self, grace: Duration) -> Result<Exit, String> {
        self.terminate();
        self.wait(Instant::now() + grace)
    }

    /// Its whole log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// SIGKILL (a crash; a frozen process dies too), then reaps it. Its log stays readable
    /// until it is dropped.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for EngineProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
