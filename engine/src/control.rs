//! The control thread: starts the shards, turns SIGINT/SIGTERM into drain and stop commands,
//! merges the shards' reports, serves `/metrics` and logs the progress line.

use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tracing::{error, info, warn};

use crate::config::{Config, SourceKind};
use crate::coremap::CoreMap;
use crate::iggy::Endpoint;
use crate::metrics::{Command, Merged, Report, Reports, SinkCounters};
use crate::metrics_http::{Control, MetricsServer, Request};
use crate::notify::Notifier;
use crate::shard::{self, ShardHandle};
use crate::status::{Pages, ShardLife, View};

use crate::error::{EXIT_CONFIG, EXIT_FAILED, EXIT_FORCED, EXIT_OK};

/// Signals within this long of the first one count as the first (a second signal stops at once).
pub const SECOND_SIGNAL_AFTER: Duration = Duration::from_secs(1);

/// How often the metrics page is rendered again while reports come in (shards report every
/// 250 ms).
const PAGE_INTERVAL: Duration = Duration::from_millis(200);

/// The pages are built anew at least this often, reports or not: `/health` tells a quiet
/// control thread by the age of its pages.
const PAGE_REFRESH: Duration = Duration::from_secs(1);

/// How long the shards get after a forced stop before the process leaves without them.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// The longest the control thread parks between turns. Signals, fatal reports and finished
/// shards wake it at once; a stop raised by an in-process caller (`run_until`) and the shards'
/// statistics are seen within this. Parking instead of a short sleep loop keeps an idle
/// engine's control thread near zero CPU (a 20 ms loop cost about 0.6% of a core).
const CONTROL_PARK: Duration = Duration::from_millis(100);

/// Builds the Iggy endpoint (TLS configuration included) when a sink reads from Iggy.
pub fn endpoint(config: &Config) -> Result<Option<Endpoint>, String> {
    if !config.sinks.iter().any(|s| s.source == SourceKind::Iggy) {
        return Ok(None);
    }
    let iggy = &config.iggy;
    let tls = if iggy.tls {
        let cfg = crate::tls::client_config(iggy.tls_ca.as_deref(), None, &[])
            .map_err(|e| format!("iggy.tls_ca: {e}"))?;
        for address in iggy.addresses() {
            crate::tls::server_name(address, iggy.tls_server_name.as_deref())
                .map_err(|e| format!("iggy.tls_server_name: {e}"))?;
        }
        Some((cfg, iggy.tls_server_name.clone()))
    } else {
        None
    };
    Ok(Some(Endpoint {
        addresses: iggy.addresses().map(str::to_owned).collect(),
        tls,
        connect_timeout: iggy.connect_timeout.0,
        request_timeout: iggy.request_timeout.0,
    }))
}

/// Runs the engine until it is done or stopped by SIGINT/SIGTERM; returns the exit status.
pub fn run(config: Config, map: CoreMap) -> i32 {
    let signals = Arc::new(AtomicUsize::new(0));
    // The calling thread becomes the control thread: the signal thread wakes it.
    if let Err(e) = watch_signals(Arc::clone(&signals), std::thread::current()) {
        error!("installing signal handlers: {e}");
        return EXIT_FAILED;
    }
    run_until(config, map, signals)
}

/// Runs the engine on the calling thread (which becomes the control thread) until it is done
/// or `stop` is raised: 1 drains, 2 stops at once, like the first and second signal.
pub fn run_until(config: Config, map: CoreMap, stop: Arc<AtomicUsize>) -> i32 {
    run_until_end(config, map, stop).status
}

/// How a run ended: its exit status and each sink's counters summed over its shards, as the
/// shards last reported them (the in-process benches read them after the end, when `/metrics`
/// is gone).
#[derive(Debug, Clone)]
pub struct RunEnd {
    /// The exit status.
    pub status: i32,
    /// Per sink, by config order: its name and final counters.
    pub sinks: Vec<(String, SinkCounters)>,
}

impl RunEnd {
    fn bare(status: i32) -> RunEnd {
        RunEnd {
            status,
            sinks: Vec::new(),
        }
    }

    fn of(status: i32, merged: &Merged) -> RunEnd {
        RunEnd {
            status,
            sinks: merged
                .names
                .iter()
                .cloned()
                .zip(merged.totals().into_iter().map(|(c, _, _)| c))
                .collect(),
        }
    }
}

/// [`run_until`], with the sinks' final counters.
pub fn run_until_end(config: Config, map: CoreMap, stop: Arc<AtomicUsize>) -> RunEnd {
    let signals = stop;
    if let Err(e) = monoio::utils::bind_to_cpu_set([map.control_core]) {
        warn!(
            "could not pin the control thread to core {}: {e:?}",
            map.control_core
        );
    }
    if monoio::utils::detect_uring() {
        info!("io_uring is available: shards run on io_uring");
    } else {
        warn!("io_uring is unavailable: shards use the legacy (epoll) driver");
    }
    let endpoint = match endpoint(&config) {
        Ok(e) => e,
        Err(e) => {
            error!("{e}");
            return RunEnd::bare(EXIT_FAILED);
        }
    };
    let names: Vec<String> = config.sinks.iter().map(|s| s.name.clone()).collect();
    let mut merged = Merged::new(map.shards.len(), names.clone());
    let started = Instant::now();
    let mut runs_on: Vec<Vec<usize>> = vec![Vec::new(); config.sinks.len()];
    for plan in &map.shards {
        for work in &plan.sinks {
            if let Some(r) = runs_on.get_mut(work.sink) {
                r.push(plan.index);
            }
        }
    }
    let requests = Arc::new(crossbeam_queue::ArrayQueue::new(64));
    // Served from its own thread (started after the pinning above, so it shares the control
    // core): no client of the endpoint can hold up signals, deadlines or fatal reports.
    let metrics = match config.metrics.address.as_str() {
        "" => None,
        addr => match TcpListener::bind(addr).and_then(|l| {
            let local = l.local_addr()?;
            let control = Control {
                names,
                token: config.metrics.token.clone(),
                loopback: local.ip().is_loopback(),
                health_timeout: config.metrics.health_timeout.0,
                requests: Arc::clone(&requests),
                wake: Some(std::thread::current()),
            };
            let pages = Pages::initial(merged.prometheus(), map.shards.len(), started);
            Ok((local, MetricsServer::start(l, pages, control)?))
        }) {
            Ok((a, server)) => {
                info!(
                    "metrics, health and status on http://{a}/ (/metrics, /health, /ready, /status)"
                );
                if !a.ip().is_loopback() && config.metrics.token.is_none() {
                    warn!(
                        "metrics.address {a} is beyond loopback and no token is set: pause and resume are refused (set metrics.token, metrics.token_file or SPILLWAY_CONTROL_TOKEN)"
                    );
                }
                Some(server)
            }
            Err(e) => {
                error!("metrics.address {addr}: {e}");
                return RunEnd::bare(EXIT_FAILED);
            }
        },
    };
    let mut lives = vec![ShardLife::default(); map.shards.len()];
    let mut notifier = Notifier::from_env();
    let mut last_publish = started;

    let config = Arc::new(config);
    let reports = Arc::new(Reports::new(map.shards.len()));
    reports.wake(std::thread::current());
    let mut shards: Vec<ShardHandle> = Vec::new();
    for plan in &map.shards {
        match shard::spawn(
            plan.clone(),
            Arc::clone(&config),
            endpoint.clone(),
            Arc::clone(&reports),
        ) {
            Ok(h) => shards.push(h),
            Err(e) => {
                error!("starting shard {}: {e}", plan.index);
                for h in &shards {
                    let _ = h.send(Command::Stop);
                }
                return RunEnd::bare(EXIT_FAILED);
            }
        }
    }
    info!(
        shards = shards.len(),
        control_core = map.control_core,
        "spillway {} running",
        env!("CARGO_PKG_VERSION")
    );

    let mut finished = vec![false; shards.len()];
    let mut status = EXIT_OK;
    // The distinct fatal reports logged so far.
    let mut fatal_logged: Vec<String> = Vec::new();
    let mut seen_signals = 0;
    let mut first_signal: Option<Instant> = None;
    let mut drain_deadline: Option<Instant> = None;
    let mut hard_deadline: Option<Instant> = None;
    let log_every = config.metrics.log_interval.0;
    let mut next_log = Instant::now() + log_every;
    let mut last_totals = Last::start();
    let has_s3 = config
        .sinks
        .iter()
        .any(|s| s.kind == crate::config::SinkType::S3);
    let shutdown_timeout = config.runtime.shutdown_timeout.0;
    let mut page_stale = false;
    let mut next_page = Instant::now();

    let broadcast = |shards: &[ShardHandle], cmd: Command| {
        for h in shards {
            if !h.send(cmd) {
                warn!("a shard's command queue is full");
            }
        }
    };

    loop {
        let now = Instant::now();
        let signalled = signals.load(Ordering::SeqCst);
        if signalled > seen_signals {
            let arrived = signalled - seen_signals;
            seen_signals = signalled;
            let within_grace = || {
                info!(
                    "another signal within {SECOND_SIGNAL_AFTER:?} of the first: still draining \
                     (send one more to stop now)"
                )
            };
            if first_signal.is_none() && drain_deadline.is_none() {
                let deadline = now + shutdown_timeout;
                info!(
                    "signal received: draining (up to {shutdown_timeout:?}); a second signal, \
                     {SECOND_SIGNAL_AFTER:?} or more after the first, stops at once"
                );
                first_signal = Some(now);
                drain_deadline = Some(deadline);
                broadcast(&shards, Command::Drain { deadline });
                if arrived > 1 {
                    within_grace();
                }
            } else if hard_deadline.is_none() {
                match first_signal {
                    // `timeout` and some supervisors signal the process and its group at once:
                    // that is one request to stop, not two.
                    Some(first) if now.duration_since(first) < SECOND_SIGNAL_AFTER => {
                        within_grace()
                    }
                    _ => {
                        warn!("second signal: stopping now (only confirmed offsets are stored)");
                        status = EXIT_FORCED;
                        hard_deadline = Some(now + STOP_GRACE);
                        broadcast(&shards, Command::Stop);
                    }
                }
            }
        }
        if let Some(d) = drain_deadline
            && now > d + Duration::from_millis(500)
            && hard_deadline.is_none()
        {
            warn!("the sinks did not drain in time: stopping");
            hard_deadline = Some(now + STOP_GRACE);
            broadcast(&shards, Command::Stop);
        }
        while let Some(report) = reports.pop() {
            match report {
                Report::Stats { shard, seq, sinks } => {
                    merged.absorb(shard, seq, sinks);
                    if let Some(l) = lives.get_mut(shard) {
                        l.seen = Some(now);
                    }
                    page_stale = true;
                }
                Report::Fatal {
                    shard,
                    message,
                    class,
                } => {
                    // Every shard running the sink may report the same failure: log it once.
                    if !fatal_logged.contains(&message) {
                        error!(shard, "{message}");
                        fatal_logged.push(message);
                    }
                    let exit = class.exit_code();
                    // The first configuration failure decides the status, as it names the fix.
                    if status != EXIT_CONFIG {
                        status = exit;
                    }
                    if drain_deadline.is_none() {
                        let deadline = now + shutdown_timeout;
                        drain_deadline = Some(deadline);
                        broadcast(&shards, Command::Drain { deadline });
                    }
                }
                Report::Finished { shard } => {
                    if let Some(f) = finished.get_mut(shard) {
                        *f = true;
                    }
                    if let Some(l) = lives.get_mut(shard) {
                        l.finished = true;
                    }
                }
            }
        }
        if drain_deadline.is_some()
            && let Some(n) = &mut notifier
        {
            n.stopping();
        }
        while let Some(request) = requests.pop() {
            let (command, sink, what) = match request {
                Request::Pause { sink, flush } => (
                    Command::Pause { sink, flush },
                    sink,
                    if flush {
                        "paused, flushing what it holds"
                    } else {
                        "paused"
                    },
                ),
                Request::Resume { sink } => (Command::Resume { sink }, sink, "resumed"),
            };
            let name = config.sinks.get(sink).map_or("?", |s| s.name.as_str());
            info!(sink = %name, "sink {name:?} {what} by the operator (HTTP)");
            broadcast(&shards, command);
        }
        if (metrics.is_some() || notifier.is_some())
            && ((page_stale && now >= next_page)
                || now >= last_publish + PAGE_REFRESH
                || notifier
                    .as_ref()
                    .and_then(Notifier::next_due)
                    .is_some_and(|due| now >= due))
        {
            let pages = pages(&config, &merged, &runs_on, &lives, started, now);
            if let Some(n) = &mut notifier
                && drain_deadline.is_none()
            {
                let timeout = config.metrics.health_timeout.0;
                let healthy =
                    crate::status::unhealthy(&lives, started, now, timeout, now).is_none();
                n.turn(now, &pages.not_ready, healthy);
            }
            if let Some(server) = &metrics {
                server.publish(pages);
            }
            page_stale = false;
            next_page = now + PAGE_INTERVAL;
            last_publish = now;
        }
        if !log_every.is_zero() && now >= next_log {
            next_log = now + log_every;
            last_totals = progress(&mut merged, last_totals, has_s3);
        }
        if finished.iter().all(|f| *f) {
            break;
        }
        if hard_deadline.is_some_and(|d| now > d) {
            error!("shards did not stop in time; exiting without them");
            summary(&merged);
            return RunEnd::of(status.max(EXIT_FAILED), &merged);
        }
        // Park until the next thing this loop does by the clock, or a wake-up.
        let mut until = now + CONTROL_PARK;
        if !log_every.is_zero() {
            until = until.min(next_log);
        }
        if metrics.is_some() || notifier.is_some() {
            if page_stale {
                until = until.min(next_page);
            }
            until = until.min(last_publish + PAGE_REFRESH);
        }
        if let Some(due) = notifier.as_ref().and_then(Notifier::next_due) {
            until = until.min(due);
        }
        if let Some(d) = drain_deadline
            && hard_deadline.is_none()
        {
            until = until.min(d + Duration::from_millis(501));
        }
        if let Some(d) = hard_deadline {
            until = until.min(d + Duration::from_millis(1));
        }
        if let Some(wait) = until.checked_duration_since(Instant::now()) {
            std::thread::park_timeout(wait);
        }
    }
    for h in shards {
        let _ = h.thread.join();
    }
    summary(&merged);
    RunEnd::of(status, &merged)
}

/// The operator's pages, as the shards last reported.
fn pages(
    config: &Config,
    merged: &Merged,
    runs_on: &[Vec<usize>],
    lives: &[ShardLife],
    started: Instant,
    now: Instant,
) -> Pages {
    let view = View::new(config, merged, runs_on);
    let mut metrics = merged.prometheus();
    view.prometheus(&mut metrics);
    Pages {
        metrics,
        status: view.json(now.saturating_duration_since(started), lives, now),
        not_ready: view.not_ready(),
        shards: lives.to_vec(),
        started,
        published: now,
    }
}

fn watch_signals(counter: Arc<AtomicUsize>, control: std::thread::Thread) -> std::io::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])?;
    std::thread::Builder::new()
        .name("spillway-signals".to_owned())
        .spawn(move || {
            for _ in signals.forever() {
                counter.fetch_add(1, Ordering::SeqCst);
                control.unpark();
            }
        })?;
    Ok(())
}

/// The totals at the previous progress line.
#[derive(Debug, Clone, Copy)]
struct Last {
    at: Instant,
    confirmed: u64,
    bytes: u64,
    encoded: u64,
    uploaded: u64,
}

impl Last {
    fn start() -> Last {
        Last {
            at: Instant::now(),
            confirmed: 0,
            bytes: 0,
            encoded: 0,
            uploaded: 0,
        }
    }
}

fn progress(merged: &mut Merged, last: Last, s3: bool) -> Last {
    let now = Instant::now();
    let totals = merged.totals();
    let sum = |f: fn(&SinkCounters) -> u64| totals.iter().map(|t| f(&t.0)).sum::<u64>();
    let next = Last {
        at: now,
        confirmed: sum(|c| c.confirmed),
        bytes: sum(|c| c.confirmed_bytes),
        encoded: sum(|c| c.sink_encoded_bytes),
        uploaded: sum(|c| c.sink_uploaded_bytes),
    };
    let in_flight: u64 = totals.iter().map(|t| t.1).sum();
    let lag: u64 = totals.iter().map(|t| t.2).sum();
    let secs = now.duration_since(last.at).as_secs_f64().max(1e-3);
    let per_sec = |now: u64, then: u64| (now - then.min(now)) as f64 / secs;
    let rate = per_sec(next.confirmed, last.confirmed);
    let mbps = per_sec(next.bytes, last.bytes) / 1e6;
    let p99 = merged.window.value_at_quantile(0.99) as f64 / 1e3;
    merged.window.reset();
    let confirmed = next.confirmed;
    if s3 {
        // An S3 sink confirms a whole object at once: between completions the figures above
        // stay at 0 while data moves, so say what it encodes and uploads meanwhile.
        let open = sum(|c| c.sink_objects_open);
        let buffered = sum(|c| c.sink_buffered_bytes) as f64 / 1e6;
        let encoded = per_sec(next.encoded, last.encoded) / 1e6;
        let uploaded = per_sec(next.uploaded, last.uploaded) / 1e6;
        info!(
            "progress: {rate:.0} msgs/s, {mbps:.2} MB/s confirmed, in flight {in_flight}, \
             confirmed {confirmed}, lag {lag}, p99 {p99:.2} ms; S3: encoded {encoded:.2} MB/s, \
             uploaded {uploaded:.2} MB/s, {open} objects open, {buffered:.1} MB buffered"
        );
    } else {
        info!(
            "progress: {rate:.0} msgs/s, {mbps:.2} MB/s, in flight {in_flight}, confirmed {confirmed}, lag {lag}, p99 {p99:.2} ms"
        );
    }
    next
}

fn summary(merged: &Merged) {
    for (i, (c, _, lag)) in merged.totals().iter().enumerate() {
        let p99 = merged
            .latency
            .get(i)
            .map_or(0.0, |h| h.value_at_quantile(0.99) as f64 / 1e3);
        info!(
            sink = %merged.names.get(i).map_or("?", String::as_str),
            "summary: polled {}, confirmed {} ({} bytes), failed {}, skipped {}, redelivered {}, offsets stored {}, lag {lag}, p99 {p99:.2} ms",
            c.messages_in, c.confirmed, c.confirmed_bytes, c.failed, c.skipped, c.redelivered, c.commits
        );
    }
}
