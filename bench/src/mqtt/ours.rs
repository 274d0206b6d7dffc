//! Ours: the Spillway engine in-process, as `spillway-bench engine` runs it, with the
//! `generate` source (one partition of 100-byte messages, no rate limit) feeding one MQTT
//! sink with one connection. The engine exits by itself once every generated message is
//! confirmed (PUBACK, PUBCOMP, or written to the socket at QoS 0).
//!
//! The config is printed by [`config_text`]; the calling thread becomes the engine's control
//! thread (pinned by the engine to the control core) and the shard runs on the shard core.

/// Overrides the sink's `ack_batching` (`true` / `false`) for tuning runs.
pub const ACK_BATCHING_ENV: &str = "SPILLWAY_BENCH_MQTT_ACK_BATCHING";

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use spillway::config;
use spillway::coremap::{self, Machine};

use super::Job;

/// The engine's config for `job`.
pub fn config_text(job: &Job<'_>) -> String {
    let protocol = if job.protocol == spillway_codec::Protocol::V5 {
        "5"
    } else {
        "3.1.1"
    };
    format!(
        r#"[runtime]
cores = [{core}]
[metrics]
address = ""
log_interval = "0s"
[[sink]]
name = "{name}"
type = "mqtt"
source = "generate"
window_messages = {engine_window}
[sink.generate]
partitions = 1
size = {size}
messages = {messages}
[sink.mqtt]
address = "{addr}"
protocol = "{protocol}"
connections = 1
max_inflight = {window}
qos = {qos}
topic = "{topic}"
topic_aliases = 0
{coalesce}
"#,
        core = job.core,
        name = job.name,
        engine_window = ENGINE_WINDOW.max(u32::from(job.window)),
        size = job.size,
        messages = job.messages,
        addr = job.addr,
        window = job.window,
        qos = job.qos,
        topic = job.topic,
        coalesce = std::env::var(ACK_BATCHING_ENV)
            .map(|v| format!("ack_batching = {}", v == "true"))
            .unwrap_or_default(),
    )
}

/// The engine's own per-partition window of polled, unconfirmed messages: well above the
/// MQTT window, so that the packet-id window is what limits.
const ENGINE_WINDOW: u32 = 10_000;

/// A running engine.
pub struct Running {
    stop: Arc<AtomicUsize>,
    thread: Option<JoinHandle<i32>>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running").finish_non_exhaustive()
    }
}

/// Parses the config and starts the engine on a new thread.
pub fn start(job: &Job<'_>) -> Result<Running, String> {
    start_config(&config_text(job))
}

/// Starts the engine in-process on a new thread with the config `text`.
pub fn start_config(text: &str) -> Result<Running, String> {
    let cfg = config::parse(text, std::path::Path::new("<bench>"), &|_| None)
        .map_err(|e| format!("the engine refused the config: {e}\n{text}"))?;
    let map = coremap::resolve(&cfg, &Machine::detect()).map_err(|(k, m)| format!("{k}: {m}"))?;
    let stop = Arc::new(AtomicUsize::new(0));
    let stop2 = Arc::clone(&stop);
    let thread = std::thread::Builder::new()
        .name("spillway-control".into())
        .spawn(move || spillway::control::run_until(cfg, map, stop2))
        .map_err(|e| format!("spawning the engine: {e}"))?;
    Ok(Running {
        stop,
        thread: Some(thread),
    })
}

impl Running {
    /// Whether the engine has exited.
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Waits for the engine to exit by itself until `deadline`, then asks it to drain, then to
    /// stop. Ok with the time it exited; an error when its status is not 0 or it hangs.
    pub fn finish(mut self, deadline: Instant) -> Result<Instant, String> {
        let Some(thread) = self.thread.take() else {
            return Err("the engine was already finished".into());
        };
        let mut forced = None;
        let mut signals = 0;
        let mut next_signal = deadline;
        while !thread.is_finished() {
            let now = Instant::now();
            if now >= next_signal {
                signals += 1;
                self.stop.store(signals, Ordering::SeqCst);
                forced = Some(signals);
                if signals > 2 {
                    return Err(
                        "the engine hung: it did not exit after a drain and a stop request \
                         (its thread is left behind)"
                            .into(),
                    );
                }
                next_signal = now + Duration::from_secs(15);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let exited = Instant::now();
        let status = thread
            .join()
            .map_err(|_| "the engine thread panicked".to_owned())?;
        match (status, forced) {
            (0, None) => Ok(exited),
            (s, None) => Err(format!("the engine exited with status {s}")),
            (s, Some(n)) => Err(format!(
                "the engine did not exit by itself in time; after {n} stop request(s) it \
                 exited with status {s}"
            )),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.stop.store(2, Ordering::SeqCst);
            // Leave it if it does not stop: a hung engine must not hang the bench.
            let deadline = Instant::now() + Duration::from_secs(10);
            while !thread.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if thread.is_finished() {
                let _ = thread.join();
            }
        }
    }
}
