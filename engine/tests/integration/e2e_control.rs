//! End to end: the control thread stays in charge whatever the `/metrics` clients do. Signals
//! are handled, drain deadlines hold and a sink's fatal error ends the run while clients hold
//! connections to the metrics endpoint open, drip their requests a byte at a time, or flood it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{Engine, scrape_metrics, wait_exit_code, wait_until};
use spillway_tests::{Mosquitto, MosquittoOpts, MqttCountProxy};

/// Slow and idle clients of the metrics endpoint, until dropped.
struct Stallers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Stallers {
    /// `dripping` clients that send a request a byte every 200 ms (so no read of theirs ever
    /// times out) and `idle` clients that connect and send nothing.
    fn start(addr: SocketAddr, dripping: usize, idle: usize) -> Stallers {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for _ in 0..dripping {
            let stop = Arc::clone(&stop);
            threads.push(std::thread::spawn(move || {
                let request = b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nX-Pad: ".repeat(64);
                while !stop.load(Ordering::SeqCst) {
                    let Ok(mut s) = TcpStream::connect(addr) else {
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    };
                    for b in &request {
                        if stop.load(Ordering::SeqCst) || s.write_all(&[*b]).is_err() {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(200));
                    }
                }
            }));
        }
        let held = Arc::clone(&stop);
        threads.push(std::thread::spawn(move || {
            let mut open = Vec::new();
            for _ in 0..idle {
                if let Ok(s) = TcpStream::connect(addr) {
                    open.push(s);
                }
            }
            while !held.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }));
        Stallers { stop, threads }
    }
}

impl Drop for Stallers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Starts the engine on `config`, waits until its metrics endpoint at `metrics` answers, then
/// puts 8 dripping and 200 idle clients on it.
fn start_stalled(
    dir: &std::path::Path,
    name: &str,
    config: &str,
    metrics: SocketAddr,
) -> (Engine, Stallers) {
    let engine = Engine::start(dir, name, config);
    wait_until(
        "the metrics endpoint answers",
        Duration::from_secs(20),
        || scrape_metrics(metrics).is_some(),
    );
    let stallers = Stallers::start(metrics, 8, 200);
    std::thread::sleep(Duration::from_millis(500));
    (engine, stallers)
}

/// `[runtime]` and `[metrics]` serving on `metrics`.
fn sections(metrics: SocketAddr) -> String {
    format!(
        r#"
[runtime]
shutdown_timeout = "5s"

[metrics]
address = "{metrics}"
log_interval = "0s"
"#
    )
}

fn metrics_addr() -> SocketAddr {
    SocketAddr::from((
        [127, 0, 0, 1],
        spillway_tests::ports::free_loopback_port().unwrap(),
    ))
}

/// Before, `/metrics` was answered inside the control loop with blocking reads of 500 ms each
/// and no overall limit: one client dripping its request held the loop, so the SIGTERM below
/// was never acted on while the clients stayed. Now the endpoint has its own thread, a deadline
/// per connection and a cap on connections; the drain starts at once and an honest scrape is
/// answered while the stallers are there.
#[test]
fn slow_and_idle_metrics_clients_do_not_hold_up_scrapes_or_a_drain() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let metrics = metrics_addr();
    let cfg = sections(metrics)
        + &format!(
            r#"
[[sink]]
name = "file-out"
type = "file"
source = "generate"

[sink.file]
path = "{}"

[sink.generate]
partitions = 2
rate = 2000
size = 10
messages = 0
"#,
            out.display()
        );
    let (mut engine, stallers) = start_stalled(dir.path(), "stall", &cfg, metrics);

    // An honest scrape gets through: at once while there is room, or once the deadline has
    // closed the stallers' connections.
    let asked = Instant::now();
    wait_until(
        "a scrape answered beside the stallers",
        Duration::from_secs(8),
        || scrape_metrics(metrics).is_some(),
    );
    let waited = asked.elapsed();

    engine.signal("TERM");
    let code = wait_exit_code(&mut engine, Duration::from_secs(10));
    let log = engine.log();
    assert_eq!(
        code,
        Some(0),
        "SIGTERM drains and exits while metrics clients stall\n{}",
        common::tail(&log, 20)
    );
    assert!(log.contains("signal received: draining"), "{log}");
    drop(stallers);
    assert!(
        waited < Duration::from_secs(8),
        "scrape answered after {waited:?}"
    );
}

/// A refused MQTT password is fatal. Before, with metrics clients stalling the control loop,
/// the shard's report waited for room, was dropped after 10 s, and the process went on (and
/// once the clients left, exited 0). Now a fatal report is never dropped and the control thread
/// is never held: exit 1 with the broker's reason. The broker is mosquitto with a password
/// file, behind the count proxy so the engine reaches it only after the stallers are in place.
#[test]
fn a_fatal_sink_error_ends_the_run_with_exit_1_while_metrics_clients_stall() {
    let broker = Mosquitto::start(MosquittoOpts::new().user("spw", "right-pass")).unwrap();
    let proxy = MqttCountProxy::start(broker.addr()).unwrap();
    proxy.refuse_connections(true);
    let dir = tempfile::tempdir().unwrap();
    let metrics = metrics_addr();
    let cfg = sections(metrics)
        + &format!(
            r#"
[[sink]]
name = "refused"
type = "mqtt"
source = "generate"

[sink.generate]
partitions = 1
rate = 100
size = 10
messages = 0

[sink.mqtt]
address = "{}"
qos = 1
topic = "refused"
username = "spw"
password = "Wr0ng-pass"
reconnect_min = "50ms"
reconnect_max = "100ms"
"#,
            proxy.host_port()
        );
    let (mut engine, stallers) = start_stalled(dir.path(), "refused", &cfg, metrics);
    proxy.refuse_connections(false);
    let code = wait_exit_code(&mut engine, Duration::from_secs(15));
    drop(stallers);
    let log = engine.log();
    assert_eq!(
        code,
        Some(1),
        "the refused password ends the run\n{}",
        common::tail(&log, 20)
    );
    assert!(log.to_lowercase().contains("not authori"), "{log}");
    assert!(
        !log.contains("Wr0ng-pass"),
        "the password must not be logged"
    );
}
