//! One sink on one shard: polls its partitions, hands batches to the sink, tracks what the sink
//! confirms, and stores the confirmed watermark in Iggy.
//!
//! The loop, in order, each turn: follow the control state (run, drain, stop); apply the sink's
//! reports to the trackers; store offsets that are due (every `commit_interval` or
//! `commit_every` confirmations, never past the watermark); re-sync a consumer group when due;
//! tick the sink; poll one partition that has room in its window (round robin) and deliver the
//! batch; otherwise sleep until the next report or deadline. One request is in flight on the
//! Iggy connection at a time.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use iggy_binary_protocol::{WireConsumer, WireIdentifier};
use tracing::{info, warn};

use crate::ack::Tracker;
use crate::config::{Config, ErrorPolicy, SinkConfig, SourceKind, StartFrom};
use crate::coremap::SinkWork;
use crate::generate::Generator;
use crate::iggy::{Credentials, Endpoint, IggyClient, IggyError, PartitionState, wire_ident};
use crate::message::{Batch, Message, PartitionInfo};
use crate::metrics::{
    Command, PartitionGauge, Report, Reports, SinkCounters, SinkReport, latency_histogram,
};
use crate::ratelog::RateLimit;
use crate::sink::{Ack, Acks, AnySink, Outcome, Sink, SinkError};

/// What the shard's control task tells its runners.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Normal operation.
    Run,
    /// Stop polling, let the sink finish until the deadline.
    Drain(Instant),
    /// End now, storing only confirmed offsets.
    Stop,
}

/// Shared by the shard's runners: the control state, the memory budget, and the link to the
/// control thread.
pub struct ShardState {
    /// Shard number.
    pub index: usize,
    /// Current mode.
    pub mode: Cell<Mode>,
    /// What the shard's runners hold: polled, unconfirmed payload bytes of the windowed
    /// sinks, plus the bytes the self-paced sinks (S3) report holding.
    pub held: Cell<u64>,
    /// `runtime.shard_memory_budget`.
    pub budget: u64,
    /// Commands from the control thread.
    pub commands: Arc<ArrayQueue<Command>>,
    /// Reports to the control thread.
    pub reports: Arc<Reports>,
    /// The statistics of each runner, by sink index.
    pub stats: RefCell<Vec<(usize, Rc<RefCell<RunnerStats>>)>>,
    next_report: Cell<Instant>,
    report_seq: Cell<u64>,
}

impl std::fmt::Debug for ShardState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardState")
            .field("index", &self.index)
            .field("mode", &self.mode.get())
            .finish()
    }
}

impl ShardState {
    /// A shard's state, running.
    pub fn new(
        index: usize,
        budget: u64,
        commands: Arc<ArrayQueue<Command>>,
        reports: Arc<Reports>,
    ) -> ShardState {
        ShardState {
            index,
            mode: Cell::new(Mode::Run),
            held: Cell::new(0),
            budget,
            commands,
            reports,
            stats: RefCell::new(Vec::new()),
            next_report: Cell::new(Instant::now()),
            report_seq: Cell::new(0),
        }
    }

    /// Takes the control thread's commands and sends statistics when due. Runners call this
    /// every turn (a busy runner never lets the runtime park, and monoio fires timers only when
    /// it parks), and the shard's own task calls it on a timer when the runners are idle.
    pub fn service(&self, force_report: bool) {
        while let Some(cmd) = self.commands.pop() {
            match cmd {
                Command::Drain { deadline } => {
                    if self.mode.get() == Mode::Run {
                        self.mode.set(Mode::Drain(deadline));
                    }
                }
                Command::Stop => self.mode.set(Mode::Stop),
            }
        }
        let now = Instant::now();
        if force_report || now >= self.next_report.get() {
            self.next_report.set(now + REPORT_INTERVAL);
            let sinks = self
                .stats
                .borrow()
                .iter()
                .map(|(sink, st)| st.borrow_mut().report(*sink))
                .collect();
            let seq = self.report_seq.get() + 1;
            self.report_seq.set(seq);
            let report = Report::Stats {
                shard: self.index,
                seq,
                sinks,
            };
            if force_report {
                self.reports.deliver(report);
            } else {
                // Counters are cumulative: a report lost to a full queue is made good by the
                // next one (only that interval's latency samples are lost).
                self.reports.offer(report);
            }
        }
    }
}

/// How often a shard sends its statistics.
pub const REPORT_INTERVAL: Duration = Duration::from_millis(250);

/// Statistics a runner keeps for the shard's reporter.
#[derive(Debug)]
pub struct RunnerStats {
    /// Counters.
    pub counters: SinkCounters,
    /// Per slot.
    pub partitions: Vec<Option<PartitionGauge>>,
    /// Latency since the last report.
    pub latency: hdrhistogram::Histogram<u64>,
    /// Unconfirmed messages / bytes.
    pub in_flight: (u64, u64),
}

impl RunnerStats {
    fn new() -> RunnerStats {
        RunnerStats {
            counters: SinkCounters::default(),
            partitions: Vec::new(),
            latency: latency_histogram(),
            in_flight: (0, 0),
        }
    }

    /// A report, resetting the latency interval.
    pub fn report(&mut self, sink: usize) -> SinkReport {
        let latency = std::mem::replace(&mut self.latency, latency_histogram());
        SinkReport {
            sink,
            counters: self.counters,
            in_flight: self.in_flight.0,
            in_flight_bytes: self.in_flight.1,
            partitions: self.partitions.iter().flatten().cloned().collect(),
            latency,
        }
    }
}

struct Part {
    info: Rc<PartitionInfo>,
    tracker: Tracker,
    stored: Option<u64>,
    since_store: u64,
    last_store: Instant,
    ready_at: Instant,
    head: Option<u64>,
    /// Still assigned to this runner (a consumer group can take it away).
    owned: bool,
}

struct IggySource {
    endpoint: Endpoint,
    creds: Credentials,
    client: Option<IggyClient>,
    stream: WireIdentifier,
    topic: WireIdentifier,
    consumer: WireConsumer,
    group: Option<WireIdentifier>,
    generation: Option<u64>,
    backoff: Duration,
    next_connect: Instant,
    reconnect_min: Duration,
    reconnect_max: Duration,
    ping_interval: Duration,
    next_sync: Instant,
    sync_interval: Duration,
    /// Partitions of the topic (explicit mode): checked at start.
    explicit: Vec<u32>,
}

enum Source {
    Iggy(Box<IggySource>),
    Generate(Generator),
}

/// How often skipped messages are counted in one log line, and how many of each interval are
/// logged one by one first.
const SKIP_LOG_INTERVAL: Duration = Duration::from_secs(1);
const SKIP_LOG_BURST: u32 = 10;

/// What kind of failure ended a runner, for the exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureClass {
    /// Something failed for good at run time (exit 1).
    Runtime,
    /// The configuration cannot work with the peer it names (exit 2), e.g. an Iggy server that
    /// does not accept this protocol version.
    Config,
}

/// Why a runner ended early.
#[derive(Debug)]
pub struct Fatal {
    /// What happened, naming the sink.
    pub message: String,
    /// How the process should end.
    pub class: FailureClass,
}

impl Fatal {
    /// A run-time failure.
    pub fn new(message: impl Into<String>) -> Fatal {
        Fatal {
            message: message.into(),
            class: FailureClass::Runtime,
        }
    }

    /// A failure of the source: a configuration problem when the error says so.
    pub fn from_iggy(message: impl Into<String>, e: &IggyError) -> Fatal {
        Fatal {
            message: message.into(),
            class: if e.is_config() {
                FailureClass::Config
            } else {
                FailureClass::Runtime
            },
        }
    }
}

/// One sink on one shard.
pub struct Runner {
    index: usize,
    cfg: Arc<SinkConfig>,
    sink: AnySink,
    acks: Acks,
    source: Source,
    parts: Vec<Option<Part>>,
    cursor: usize,
    shard: Rc<ShardState>,
    stats: Rc<RefCell<RunnerStats>>,
    epoch: Instant,
    reports: Vec<Ack>,
    scratch: Vec<Message>,
    stream_name: Rc<str>,
    topic_name: Rc<str>,
    next_tick: Instant,
    /// Skipped messages (`on_error = "skip"`) are logged a few a second, the rest counted.
    skip_log: RateLimit,
    /// Polled payloads count against the windows and the shard budget until confirmed; false
    /// for a sink that reports the memory it holds itself ([`Sink::buffered`]).
    counts_payloads: bool,
    /// A sink failure found outside a sink call (resuming a partition).
    sink_error: Option<String>,
    /// A self-paced sink's bytes as last added to `shard.held`.
    buffered_in_held: Cell<u64>,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("sink", &self.cfg.name)
            .finish()
    }
}

fn now_us(epoch: Instant) -> u64 {
    epoch.elapsed().as_micros() as u64
}

impl Runner {
    /// Builds the runner of sink `index` for `work` on shard `shard_index`.
    pub fn new(
        config: &Config,
        index: usize,
        work: &SinkWork,
        shard_index: usize,
        shard: Rc<ShardState>,
        endpoint: Option<Endpoint>,
    ) -> Result<(Runner, Rc<RefCell<RunnerStats>>), Fatal> {
        let cfg = Arc::new(config.sinks[index].clone());
        let acks = Acks::new();
        let sink = crate::sink::build(&cfg, shard_index, acks.clone())
            .map_err(|e| Fatal::new(format!("sink {:?}: {e}", cfg.name)))?;
        let counts_payloads = sink.buffered().is_none();
        let fatal = |e: IggyError| Fatal::from_iggy(format!("sink {:?}: {e}", cfg.name), &e);
        let (source, stream_name, topic_name) = match cfg.source {
            SourceKind::Generate => {
                let partitions = match work {
                    SinkWork::Partitions(p) => p.clone(),
                    SinkWork::GroupMember => Vec::new(),
                };
                let gen_cfg = cfg
                    .generate
                    .clone()
                    .unwrap_or(crate::config::GenerateConfig {
                        partitions: 1,
                        rate: 0.0,
                        size: crate::units::ByteSize(100),
                        messages: 0,
                    });
                (
                    Source::Generate(Generator::new(&gen_cfg, &partitions)),
                    Rc::from("generate"),
                    Rc::from(cfg.name.as_str()),
                )
            }
            SourceKind::Iggy => {
                let iggy = &config.iggy;
                let endpoint = endpoint.ok_or_else(|| Fatal::new("no Iggy endpoint"))?;
                let creds = match (&iggy.token, &iggy.username, &iggy.password) {
                    (Some(t), _, _) => Credentials::Token(t.clone()),
                    (None, Some(u), Some(p)) => Credentials::Password {
                        username: u.clone(),
                        password: p.clone(),
                    },
                    _ => return Err(Fatal::new("iggy: no credentials")),
                };
                let (Some(stream), Some(topic)) = (&cfg.stream, &cfg.topic) else {
                    return Err(Fatal::new(format!("sink {:?}: stream and topic", cfg.name)));
                };
                let group = cfg
                    .consumer_group
                    .as_ref()
                    .map(|g| WireIdentifier::named(g.clone()))
                    .transpose()
                    .map_err(|e| Fatal::new(format!("sink {:?}: consumer_group: {e}", cfg.name)))?;
                let consumer = match &group {
                    Some(g) => WireConsumer::consumer_group(g.clone()),
                    None => WireConsumer::consumer(
                        WireIdentifier::named(cfg.consumer_name().to_owned()).map_err(|e| {
                            Fatal::new(format!("sink {:?}: consumer: {e}", cfg.name))
                        })?,
                    ),
                };
                let explicit = match work {
                    SinkWork::Partitions(p) => p.clone(),
                    SinkWork::GroupMember => Vec::new(),
                };
                let now = Instant::now();
                (
                    Source::Iggy(Box::new(IggySource {
                        endpoint,
                        creds,
                        client: None,
                        stream: wire_ident(stream).map_err(fatal)?,
                        topic: wire_ident(topic).map_err(fatal)?,
                        consumer,
                        group,
                        generation: None,
                        backoff: iggy.reconnect_min.0,
                        next_connect: now,
                        reconnect_min: iggy.reconnect_min.0,
                        reconnect_max: iggy.reconnect_max.0,
                        ping_interval: iggy.ping_interval.0,
                        next_sync: now,
                        sync_interval: cfg.group_sync_interval.0,
                        explicit,
                    })),
                    Rc::from(stream.to_string().as_str()),
                    Rc::from(topic.to_string().as_str()),
                )
            }
        };
        let stats = Rc::new(RefCell::new(RunnerStats::new()));
        let runner = Runner {
            index,
            cfg,
            sink,
            acks,
            source,
            parts: Vec::new(),
            cursor: 0,
            shard,
            stats: Rc::clone(&stats),
            epoch: Instant::now(),
            reports: Vec::new(),
            scratch: Vec::new(),
            stream_name,
            topic_name,
            next_tick: Instant::now(),
            skip_log: RateLimit::new(SKIP_LOG_INTERVAL, SKIP_LOG_BURST),
            counts_payloads,
            buffered_in_held: Cell::new(0),
            sink_error: None,
        };
        Ok((runner, stats))
    }

    /// The sink's index in the config.
    pub fn index(&self) -> usize {
        self.index
    }

    fn fatal(&self, what: impl std::fmt::Display) -> Fatal {
        Fatal::new(format!("sink {:?}: {what}", self.cfg.name))
    }

    /// Runs until the sink is done, drained or stopped; `Err` when it failed for good.
    pub async fn run(mut self) -> Result<(), Fatal> {
        let result = self.run_inner().await;
        if let Err(e) = &result {
            // Whatever else happened, store what is confirmed.
            self.apply_reports(true).ok();
            let _ = self.commit(true).await;
            warn!(sink = %self.cfg.name, "stopped: {}", e.message);
        }
        self.leave_group().await;
        // This runner's share of the shard's total leaves with it.
        let mine = self.buffered_in_held.replace(0);
        self.shard
            .held
            .set(self.shard.held.get().saturating_sub(mine));
        result
    }

    async fn run_inner(&mut self) -> Result<(), Fatal> {
        let shard = Rc::clone(&self.shard);
        match unless_stopped(&shard, self.sink.start()).await {
            None => return Ok(()),
            Some(started) => started.map_err(|e| self.fatal(e))?,
        }
        self.start_source().await?;
        loop {
            self.shard.service(false);
            match self.shard.mode.get() {
                Mode::Run => {}
                Mode::Drain(deadline) => return self.drain(deadline).await,
                Mode::Stop => {
                    self.apply_reports(true)?;
                    return self.commit(true).await;
                }
            }
            self.apply_reports(false)?;
            {
                let status = self.sink.status();
                let mut stats = self.stats.borrow_mut();
                stats.counters.sink_reconnects = status.reconnects;
                stats.counters.sink_in_flight_peak = status.in_flight_peak;
                stats.counters.sink_buffered_peak = status.buffered_peak;
            }
            self.commit(false).await?;
            self.maintain_source().await?;
            if let Some(e) = self.sink_error.take() {
                return Err(self.fatal(e));
            }
            let now = Instant::now();
            if now >= self.next_tick {
                if let Some(ticked) = unless_stopped(&shard, self.sink.tick()).await {
                    ticked.map_err(|e| self.fatal(e))?;
                }
                self.next_tick = now + self.sink.tick_interval();
            }
            if self.generator_done() {
                info!(sink = %self.cfg.name, "generate: all messages confirmed");
                return self.drain(Instant::now() + Duration::from_secs(60)).await;
            }
            if self.poll_one().await? {
                // A generate source and a file sink never wait: let the shard's other tasks
                // (reporting, other sinks) run between batches.
                YieldNow(false).await;
                continue;
            }
            let wait = self.next_wake().saturating_duration_since(Instant::now());
            if !wait.is_zero() {
                let _ = monoio::time::timeout(wait, self.acks.ready()).await;
            }
        }
    }

    async fn drain(&mut self, deadline: Instant) -> Result<(), Fatal> {
        // A second signal (Stop) cuts the drain short: whatever is confirmed by then is stored.
        let shard = Rc::clone(&self.shard);
        if let Some(result) = unless_stopped(&shard, self.sink.drain(deadline)).await {
            result.map_err(|e| self.fatal(e))?;
        }
        while Instant::now() < deadline
            && self.shard.mode.get() != Mode::Stop
            && self.parts.iter().flatten().any(|p| !p.tracker.is_idle())
        {
            self.apply_reports(false)?;
            if self.parts.iter().flatten().all(|p| p.tracker.is_idle()) {
                break;
            }
            let wait = deadline
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(20));
            let _ = monoio::time::timeout(wait, self.acks.ready()).await;
        }
        self.apply_reports(true)?;
        self.commit(true).await
    }

    /// Logs how many skipped messages went unnamed, once their interval is over (at once when
    /// stopping).
    fn report_skips(&mut self, now: Instant, stopping: bool) {
        if let Some(n) = self.skip_log.due(now, stopping) {
            warn!(
                sink = %self.cfg.name,
                skipped = n,
                "skipped {n} more messages the sink rejected in the last {:?} (on_error = \"skip\"; \
                 the first {SKIP_LOG_BURST} of each interval are logged one by one; \
                 spillway_skipped_total counts them all)",
                self.skip_log.interval()
            );
        }
    }

    fn generator_done(&self) -> bool {
        let Source::Generate(g) = &self.source else {
            return false;
        };
        self.parts
            .iter()
            .flatten()
            .all(|p| p.tracker.is_idle() && p.tracker.next_poll() >= g.end(p.info.partition))
    }

    fn next_wake(&self) -> Instant {
        self.sync_buffered();
        let now = Instant::now();
        let mut wake = now + Duration::from_millis(50);
        wake = wake.min(self.next_tick);
        for p in self.parts.iter().flatten() {
            if p.owned && self.has_room(p) {
                wake = wake.min(p.ready_at);
            }
            if p.tracker.watermark() > p.stored {
                wake = wake.min(p.last_store + self.cfg.commit_interval.0);
            }
        }
        if let Source::Iggy(src) = &self.source {
            if src.client.is_none() {
                wake = wake.min(src.next_connect);
            }
            if src.group.is_some() {
                wake = wake.min(src.next_sync);
            }
        }
        wake.max(now)
    }

    /// Moves a self-paced sink's current bytes into the shard's total (once per turn, before
    /// the partitions are looked at: the figure is the sink's, not a partition's).
    fn sync_buffered(&self) {
        if self.counts_payloads {
            return;
        }
        let now = self.sink.buffered().unwrap_or(0);
        let before = self.buffered_in_held.replace(now);
        let held = self.shard.held.get().saturating_sub(before);
        self.shard.held.set(held + now);
    }

    fn has_room(&self, p: &Part) -> bool {
        if !self.counts_payloads {
            // The sink holds encoded data, not the polled messages (an S3 object confirms
            // all its messages at once): its own memory is what counts, in the shard's total
            // with the other sinks' held payloads (see `sync_buffered`).
            return self.shard.held.get() < self.shard.budget;
        }
        // Poll again once a useful batch fits: a full batch or a quarter of the window,
        // whichever is smaller (with nothing in flight that always holds). Topping the window
        // up as acknowledgements trickle in from a slow broker would poll a few messages at a
        // time: a round trip to Iggy per few messages, and a reply buffer kept alive by each
        // few (measured: 9-13 µs of CPU per 100-byte message against mosquitto, against 0.3
        // to a broker that keeps up).
        let window = u64::from(self.cfg.window_messages);
        let step = (window / 4).min(u64::from(self.cfg.batch_size)).max(1);
        p.tracker.unconfirmed() + step <= window
            && p.tracker.unconfirmed_bytes() < self.cfg.window_bytes.0
            && self.shard.held.get() < self.shard.budget
    }

    // ------------------------------------------------------------------ partitions

    fn add_part(&mut self, partition: u32, stored: Option<u64>, next: u64) {
        let slot = self
            .parts
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.parts.len());
        let info = Rc::new(PartitionInfo {
            slot,
            stream: Rc::clone(&self.stream_name),
            topic: Rc::clone(&self.topic_name),
            partition,
        });
        let part = Part {
            info,
            tracker: Tracker::new(stored, next),
            stored,
            since_store: 0,
            last_store: Instant::now(),
            ready_at: Instant::now(),
            head: None,
            owned: true,
        };
        let gauge = PartitionGauge {
            stream: self.stream_name.to_string(),
            topic: self.topic_name.to_string(),
            partition,
            committed: stored,
            head: None,
            in_flight: 0,
        };
        if slot == self.parts.len() {
            self.parts.push(Some(part));
        } else {
            self.parts[slot] = Some(part);
        }
        let mut stats = self.stats.borrow_mut();
        if stats.partitions.len() <= slot {
            stats.partitions.resize(slot + 1, None);
        }
        stats.partitions[slot] = Some(gauge);
    }

    fn slot_of(&self, partition: u32) -> Option<usize> {
        self.parts
            .iter()
            .position(|p| p.as_ref().is_some_and(|p| p.info.partition == partition))
    }

    // ------------------------------------------------------------------ source

    async fn start_source(&mut self) -> Result<(), Fatal> {
        if let Source::Generate(g) = &self.source {
            for p in g.partitions().to_vec() {
                self.add_part(p, None, 0);
            }
            return Ok(());
        }
        // Iggy: connect (waiting out transient failures), check the stream and topic, then
        // take the partitions.
        loop {
            if self.shard.mode.get() != Mode::Run {
                return Ok(());
            }
            if self.connect().await? {
                break;
            }
            let wait = match &self.source {
                Source::Iggy(src) => src.next_connect.saturating_duration_since(Instant::now()),
                Source::Generate(_) => Duration::ZERO,
            };
            monoio::time::sleep(wait.min(Duration::from_millis(200))).await;
        }
        Ok(())
    }

    /// Connects and sets up (metadata checks, partitions or group membership); `Ok(false)`
    /// after a transient failure (retried later with backoff).
    async fn connect(&mut self) -> Result<bool, Fatal> {
        let Source::Iggy(src) = &mut self.source else {
            return Ok(true);
        };
        if src.client.is_some() {
            return Ok(true);
        }
        if Instant::now() < src.next_connect {
            return Ok(false);
        }
        let result = self.setup_connection().await;
        let Source::Iggy(src) = &mut self.source else {
            return Ok(true);
        };
        match result {
            Ok(()) => {
                src.backoff = src.reconnect_min;
                Ok(true)
            }
            Err(e) if e.is_transient() => {
                src.client = None;
                let jitter = 0.5 + fastrand::f64();
                let wait = src.backoff.mul_f64(jitter);
                src.next_connect = Instant::now() + wait;
                src.backoff = (src.backoff * 2).min(src.reconnect_max);
                self.stats.borrow_mut().counters.reconnects += 1;
                warn!(
                    sink = %self.cfg.name,
                    address = %src.endpoint.address,
                    "Iggy unavailable, retrying in {wait:?}: {e}"
                );
                Ok(false)
            }
            Err(e) => Err(Fatal::from_iggy(
                format!(
                    "sink {:?}: {e} (Iggy at {})",
                    self.cfg.name,
                    self.iggy_address()
                ),
                &e,
            )),
        }
    }

    fn iggy_address(&self) -> String {
        match &self.source {
            Source::Iggy(src) => src.endpoint.address.clone(),
            Source::Generate(_) => String::new(),
        }
    }

    async fn setup_connection(&mut self) -> Result<(), IggyError> {
        let Source::Iggy(src) = &mut self.source else {
            return Ok(());
        };
        let mut client = IggyClient::connect(&src.endpoint, &src.creds).await?;
        if !client.stream_exists(&src.stream).await? {
            return Err(IggyError::NotFound(format!(
                "stream {} not found (key sink.stream of sink {:?})",
                self.stream_name, self.cfg.name
            )));
        }
        let Some(partitions) = client.topic(&src.stream, &src.topic).await? else {
            return Err(IggyError::NotFound(format!(
                "topic {} not found in stream {} (key sink.topic of sink {:?})",
                self.topic_name, self.stream_name, self.cfg.name
            )));
        };
        let heads: Vec<PartitionState> = partitions;
        if src.group.is_none() {
            for &p in &src.explicit {
                if !heads.iter().any(|h| h.id == p) {
                    let ids: Vec<String> = heads.iter().map(|h| h.id.to_string()).collect();
                    return Err(IggyError::NotFound(format!(
                        "partition {p} not found in {}/{} (it has partitions {}; key sink.partitions of sink {:?})",
                        self.stream_name,
                        self.topic_name,
                        ids.join(", "),
                        self.cfg.name
                    )));
                }
            }
        }
        src.client = Some(client);
        let explicit = src.explicit.clone();
        if src.group.is_some() {
            self.join_and_sync().await?;
        } else {
            for p in explicit {
                if self.slot_of(p).is_none() {
                    let head = heads.iter().find(|h| h.id == p).copied();
                    self.init_partition(p, head).await?;
                }
            }
        }
        Ok(())
    }

    async fn init_partition(
        &mut self,
        partition: u32,
        head: Option<PartitionState>,
    ) -> Result<(), IggyError> {
        let Source::Iggy(src) = &mut self.source else {
            return Ok(());
        };
        let Some(client) = src.client.as_mut() else {
            return Err(IggyError::Io(std::io::ErrorKind::NotConnected.into()));
        };
        let stored = client
            .stored_offset(&src.consumer, &src.stream, &src.topic, partition)
            .await?;
        let mut next = match (stored, self.cfg.start) {
            (Some(s), _) => s + 1,
            (None, StartFrom::Earliest) => 0,
            (None, StartFrom::Latest) => match head {
                Some(h) if h.messages_count > 0 => h.current_offset + 1,
                _ => 0,
            },
        };
        let mut stored = stored;
        // The sink may know of data written past the stored offset (an S3 object completed
        // just before a crash, before its offsets were committed): start after it.
        let shard = Rc::clone(&self.shard);
        let resumed = unless_stopped(
            &shard,
            self.sink
                .resume(&self.stream_name, &self.topic_name, partition),
        )
        .await;
        let Some(resumed) = resumed else {
            // Stopping: the partition is not taken up.
            return Ok(());
        };
        match resumed {
            Ok(Some(done)) if done + 1 > next => {
                info!(
                    sink = %self.cfg.name,
                    partition,
                    "partition {}/{}/{partition}: the sink already holds up to offset {done} (Iggy has {stored:?})",
                    self.stream_name,
                    self.topic_name
                );
                next = done + 1;
                stored = Some(done);
            }
            Ok(_) => {}
            Err(e) => {
                // Not an Iggy problem: the runner stops with it at its next turn.
                self.sink_error.get_or_insert(e.0);
                return Ok(());
            }
        }
        info!(
            sink = %self.cfg.name,
            partition,
            stored = ?stored,
            "partition {}/{}/{partition}: resuming at offset {next}",
            self.stream_name,
            self.topic_name
        );
        self.add_part(partition, stored, next);
        Ok(())
    }

    async fn join_and_sync(&mut self) -> Result<(), IggyError> {
        let Source::Iggy(src) = &mut self.source else {
            return Ok(());
        };
        let (Some(client), Some(group)) = (src.client.as_mut(), src.group.clone()) else {
            return Ok(());
        };
        match client.join_group(&src.stream, &src.topic, &group).await {
            Ok(()) => {}
            Err(IggyError::Status { code: 5000 | 5003 }) => {
                return Err(IggyError::NotFound(format!(
                    "consumer group {:?} not found in {}/{} (create it first; key sink.consumer_group of sink {:?})",
                    self.cfg.consumer_group.as_deref().unwrap_or_default(),
                    self.stream_name,
                    self.topic_name,
                    self.cfg.name
                )));
            }
            Err(e) => return Err(e),
        }
        src.generation = None;
        src.next_sync = Instant::now();
        self.sync_group().await
    }

    async fn sync_group(&mut self) -> Result<(), IggyError> {
        let Source::Iggy(src) = &mut self.source else {
            return Ok(());
        };
        let (Some(client), Some(group)) = (src.client.as_mut(), src.group.clone()) else {
            return Ok(());
        };
        src.next_sync = Instant::now() + src.sync_interval;
        let Some((generation, assigned)) =
            client.sync_group(&src.stream, &src.topic, &group).await?
        else {
            // Not a member (evicted or never joined): join again.
            return Box::pin(self.join_and_sync()).await;
        };
        if src.generation == Some(generation) {
            return Ok(());
        }
        src.generation = Some(generation);
        info!(
            sink = %self.cfg.name,
            generation,
            "consumer group assignment: partitions {assigned:?}"
        );
        // Partitions taken away: stop polling them; they leave once drained and committed.
        for part in self.parts.iter_mut().flatten() {
            part.owned = assigned.contains(&part.info.partition);
        }
        // `start = "latest"` needs the heads of the partitions new to this member.
        let any_new = assigned.iter().any(|&p| self.slot_of(p).is_none());
        let heads = if !any_new || self.cfg.start != StartFrom::Latest {
            Vec::new()
        } else {
            let Source::Iggy(src) = &mut self.source else {
                return Ok(());
            };
            let Some(client) = src.client.as_mut() else {
                return Err(IggyError::Io(std::io::ErrorKind::NotConnected.into()));
            };
            client
                .topic(&src.stream, &src.topic)
                .await?
                .unwrap_or_default()
        };
        for p in assigned {
            match self.slot_of(p) {
                Some(slot) => {
                    if let Some(part) = self.parts[slot].as_mut() {
                        part.owned = true;
                    }
                }
                None => {
                    let head = heads.iter().find(|h| h.id == p).copied();
                    self.init_partition(p, head).await?
                }
            }
        }
        Ok(())
    }

    /// Reconnects, pings, re-syncs the group, and retires drained partitions.
    async fn maintain_source(&mut self) -> Result<(), Fatal> {
        let Source::Iggy(src) = &mut self.source else {
            return Ok(());
        };
        if src.client.is_none() {
            self.connect().await?;
            return Ok(());
        }
        let now = Instant::now();
        let result = if src.group.is_some() && now >= src.next_sync {
            self.sync_group().await
        } else if let Some(client) = src.client.as_mut()
            && now.duration_since(client.last_request()) >= src.ping_interval
        {
            client.ping().await
        } else {
            Ok(())
        };
        self.source_result(result)?;
        // Retire partitions no longer assigned once nothing is in flight and all is stored.
        for slot in 0..self.parts.len() {
            let retire = self.parts[slot].as_ref().is_some_and(|p| {
                !p.owned && p.tracker.is_idle() && p.tracker.watermark() <= p.stored
            });
            if retire {
                self.parts[slot] = None;
                self.stats.borrow_mut().partitions[slot] = None;
                self.sink.release(slot);
            }
        }
        Ok(())
    }

    /// Turns a source error into a reconnect (transient) or a fatal error.
    fn source_result<T>(&mut self, result: Result<T, IggyError>) -> Result<Option<T>, Fatal> {
        match result {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.is_transient() => {
                if let Source::Iggy(src) = &mut self.source {
                    warn!(sink = %self.cfg.name, "lost the Iggy connection: {e}");
                    src.client = None;
                    src.next_connect = Instant::now() + src.backoff;
                    src.generation = None;
                    self.stats.borrow_mut().counters.reconnects += 1;
                }
                Ok(None)
            }
            Err(e) => Err(self.fatal(e)),
        }
    }

    // ------------------------------------------------------------------ poll and deliver

    /// Polls one partition with room, round robin, and delivers what came; `true` when
    /// something was delivered.
    async fn poll_one(&mut self) -> Result<bool, Fatal> {
        self.sync_buffered();
        let now = Instant::now();
        let n = self.parts.len();
        let mut chosen = None;
        for i in 0..n {
            let slot = (self.cursor + i) % n;
            if let Some(p) = &self.parts[slot]
                && p.owned
                && p.ready_at <= now
                && self.has_room(p)
            {
                chosen = Some(slot);
                break;
            }
        }
        let Some(slot) = chosen else {
            return Ok(false);
        };
        self.cursor = (slot + 1) % n.max(1);
        let Some(part) = self.parts[slot].as_ref() else {
            return Ok(false);
        };
        let room = if self.counts_payloads {
            u64::from(self.cfg.window_messages).saturating_sub(part.tracker.unconfirmed())
        } else {
            u64::from(self.cfg.batch_size)
        };
        let count = u32::try_from(room.min(u64::from(self.cfg.batch_size))).unwrap_or(u32::MAX);
        let offset = part.tracker.next_poll();
        let partition = part.info.partition;
        let mut messages = std::mem::take(&mut self.scratch);
        messages.clear();
        let mut head = None;
        let mut wait = None;
        match &mut self.source {
            Source::Generate(g) => {
                wait = g.poll(partition, offset, count, now, &mut messages);
            }
            Source::Iggy(src) => {
                let Some(client) = src.client.as_mut() else {
                    self.scratch = messages;
                    return Ok(false);
                };
                let result = client
                    .poll(
                        &src.consumer,
                        &src.stream,
                        &src.topic,
                        partition,
                        offset,
                        count,
                        &mut messages,
                    )
                    .await;
                match self.source_result(result)? {
                    None => {
                        self.scratch = messages;
                        return Ok(false);
                    }
                    Some(polled) if polled.fenced() => {
                        // The group moved this partition: re-sync now.
                        if let Source::Iggy(src) = &mut self.source {
                            src.next_sync = Instant::now();
                        }
                        self.scratch = messages;
                        return Ok(false);
                    }
                    Some(polled) => head = Some(polled.head),
                }
            }
        }
        let Some(part) = self.parts[slot].as_mut() else {
            return Ok(false);
        };
        if head.is_some() {
            part.head = head;
        }
        if messages.is_empty() {
            part.ready_at = Instant::now() + wait.unwrap_or(self.cfg.poll_interval.0);
            self.scratch = messages;
            self.refresh_gauge(slot);
            return Ok(false);
        }
        let t = now_us(self.epoch);
        let mut bytes = 0u64;
        messages.retain(|m| {
            let fresh = part.tracker.push(m.offset, m.payload.len(), t);
            if fresh {
                bytes += m.payload.len() as u64;
            }
            fresh
        });
        if let Some(last) = messages.last()
            && part.head.is_none_or(|h| h < last.offset)
        {
            part.head = Some(last.offset);
        }
        let count = messages.len() as u64;
        if self.counts_payloads {
            self.shard.held.set(self.shard.held.get() + bytes);
        }
        {
            let mut stats = self.stats.borrow_mut();
            stats.counters.messages_in += count;
            stats.counters.bytes_in += bytes;
            stats.counters.messages_out += count;
            stats.counters.bytes_out += bytes;
        }
        let batch = Batch {
            partition: Rc::clone(&part.info),
            messages,
        };
        self.refresh_gauge(slot);
        if count == 0 {
            return Ok(false);
        }
        let shard = Rc::clone(&self.shard);
        match unless_stopped(&shard, self.sink.deliver(batch)).await {
            // Cut short by Stop: what it held stays unconfirmed; the loop stores the rest.
            None => Ok(false),
            Some(delivered) => delivered.map(|()| true).map_err(|e| self.fatal(e)),
        }
    }

    fn refresh_gauge(&self, slot: usize) {
        let Some(part) = self.parts.get(slot).and_then(Option::as_ref) else {
            return;
        };
        let mut stats = self.stats.borrow_mut();
        if let Some(Some(g)) = stats.partitions.get_mut(slot) {
            g.committed = part.stored;
            g.head = part.head;
            g.in_flight = part.tracker.unconfirmed();
        }
        let (mut m, mut b) = (0, 0);
        for p in self.parts.iter().flatten() {
            m += p.tracker.unconfirmed();
            b += p.tracker.unconfirmed_bytes();
        }
        stats.in_flight = (m, b);
    }

    // ------------------------------------------------------------------ reports and commits

    /// Applies the sink's reports to the trackers. With `stopping`, a failure under the `fail`
    /// policy is only logged (the runner is ending anyway).
    fn apply_reports(&mut self, stopping: bool) -> Result<(), Fatal> {
        let now = Instant::now();
        self.report_skips(now, stopping);
        let mut reports = std::mem::take(&mut self.reports);
        self.acks.drain_into(&mut reports);
        if reports.is_empty() {
            self.reports = reports;
            return Ok(());
        }
        let t = now_us(self.epoch);
        let mut fatal = None;
        let mut touched = Vec::new();
        let shard = Rc::clone(&self.shard);
        let counts = self.counts_payloads;
        let unhold = |n: u64| {
            if counts {
                shard.held.set(shard.held.get().saturating_sub(n));
            }
        };
        {
            let mut stats = self.stats.borrow_mut();
            let stats = &mut *stats;
            for ack in reports.drain(..) {
                let Some(part) = self.parts.get_mut(ack.slot).and_then(Option::as_mut) else {
                    continue;
                };
                match ack.outcome {
                    Outcome::Confirmed => {
                        let latency = &mut stats.latency;
                        let done = part.tracker.confirm(ack.first, ack.last, t, |us| {
                            latency.saturating_record(us.max(1));
                        });
                        stats.counters.confirmed += done.messages;
                        stats.counters.confirmed_bytes += done.bytes;
                        part.since_store += done.messages;
                        unhold(done.bytes);
                    }
                    Outcome::Failed(reason) => {
                        stats.counters.failed += 1;
                        match self.cfg.on_error {
                            ErrorPolicy::Skip => {
                                if self.skip_log.admit(now) {
                                    warn!(
                                        sink = %self.cfg.name,
                                        partition = part.info.partition,
                                        offset = ack.first,
                                        "skipping a message the sink rejected: {reason}"
                                    );
                                }
                                let done = part.tracker.confirm(ack.first, ack.last, t, |_| {});
                                stats.counters.skipped += done.messages;
                                part.since_store += done.messages;
                                unhold(done.bytes);
                            }
                            ErrorPolicy::Fail | ErrorPolicy::DeadLetter => {
                                if fatal.is_none() {
                                    fatal = Some(format!(
                                        "message at offset {} of {}/{}/{} rejected: {reason} (on_error = \"fail\": nothing past it is committed)",
                                        ack.first,
                                        part.info.stream,
                                        part.info.topic,
                                        part.info.partition
                                    ));
                                }
                            }
                        }
                    }
                    Outcome::Redeliver { not_before } => {
                        let before = part.tracker.unconfirmed_bytes();
                        let dropped = part.tracker.redeliver(ack.first);
                        stats.counters.redelivered += dropped;
                        let freed = before - part.tracker.unconfirmed_bytes();
                        unhold(freed);
                        part.ready_at = not_before.unwrap_or_else(Instant::now);
                    }
                }
                touched.push(ack.slot);
            }
        }
        self.reports = reports;
        touched.sort_unstable();
        touched.dedup();
        for slot in touched {
            self.refresh_gauge(slot);
        }
        match fatal {
            Some(msg) if !stopping => Err(self.fatal(msg)),
            Some(msg) => {
                warn!(sink = %self.cfg.name, "{msg}");
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Stores the watermark of partitions that are due (all that moved with `force`).
    async fn commit(&mut self, force: bool) -> Result<(), Fatal> {
        let now = Instant::now();
        for slot in 0..self.parts.len() {
            let Some(part) = self.parts[slot].as_ref() else {
                continue;
            };
            let Some(mark) = part.tracker.watermark() else {
                continue;
            };
            if part.stored.is_some_and(|s| s >= mark) {
                continue;
            }
            let due = force
                || part.since_store >= self.cfg.commit_every
                || now.duration_since(part.last_store) >= self.cfg.commit_interval.0;
            if !due {
                continue;
            }
            let partition = part.info.partition;
            let result = match &mut self.source {
                Source::Generate(_) => Ok(()),
                Source::Iggy(src) => match src.client.as_mut() {
                    None => continue,
                    Some(client) => {
                        client
                            .store_offset(&src.consumer, &src.stream, &src.topic, partition, mark)
                            .await
                    }
                },
            };
            let result = match result {
                // A group member may not store offsets of a partition it no longer owns (the
                // server answers ResourceNotFound): the new owner resumes from the last stored
                // offset, so give this one up.
                Err(IggyError::Status { code: 20 }) if self.is_group() => {
                    warn!(
                        sink = %self.cfg.name,
                        partition,
                        "partition {partition} was taken away before offset {mark} could be stored; its new owner resumes from the last stored offset"
                    );
                    if let Some(part) = self.parts[slot].as_mut() {
                        part.owned = false;
                        part.stored = Some(mark);
                    }
                    continue;
                }
                other => other,
            };
            if self.source_result(result)?.is_none() {
                return Ok(());
            }
            if let Some(part) = self.parts[slot].as_mut() {
                part.stored = Some(mark);
                part.since_store = 0;
                part.last_store = now;
            }
            self.stats.borrow_mut().counters.commits += 1;
            self.refresh_gauge(slot);
        }
        Ok(())
    }

    fn is_group(&self) -> bool {
        matches!(&self.source, Source::Iggy(src) if src.group.is_some())
    }

    async fn leave_group(&mut self) {
        let Source::Iggy(src) = &mut self.source else {
            return;
        };
        let (Some(client), Some(group)) = (src.client.as_mut(), src.group.clone()) else {
            return;
        };
        if let Err(e) = client.leave_group(&src.stream, &src.topic, &group).await {
            warn!(sink = %self.cfg.name, "leaving the consumer group: {e}");
        }
    }
}

/// Gives the other tasks of the shard a turn.
/// Runs `call` (a sink's), cut short when the shard is told to stop: the call is dropped with
/// the requests it has under way, and `None` is returned. A stalled destination can hold a sink
/// call for as long as it likes; Stop must still end the runner, which then stores what is
/// confirmed.
async fn unless_stopped<T>(
    shard: &ShardState,
    call: impl std::future::Future<Output = T>,
) -> Option<T> {
    if shard.mode.get() == Mode::Stop {
        return None;
    }
    let stopped = async {
        // The shard's own task takes the control thread's commands every 20 ms, even while
        // this runner waits.
        while shard.mode.get() != Mode::Stop {
            monoio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    monoio::select! {
        out = call => Some(out),
        () = stopped => None,
    }
}

struct YieldNow(bool);

impl std::future::Future for YieldNow {
    type Output = ();
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.0 {
            return std::task::Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

impl From<SinkError> for Fatal {
    fn from(e: SinkError) -> Self {
        Fatal::new(e.0)
    }
}
