//! The executor of one sink on one shard: it performs what the flow core ([`crate::flow`])
//! decides, with the Iggy client (or the generator) and the sink, and reports back how it went.
//!
//! Each turn: take the shard's commands and the sink's reports into the flow, ask it for the
//! next action, perform it, answer it. Every decision (what to poll, when to store, when to
//! reconnect, when a drain is over) is the flow's; this file holds only IO and the mapping of
//! its results. One request is in flight on the Iggy connection at a time.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::warn;

use crate::acks::{Ack, Acks};
use crate::config::{Config, SinkConfig, SourceKind};
use crate::coremap::SinkWork;
pub use crate::error::{EngineError, ErrorClass};
use crate::flow::{Action, Flow, FlowConfig, IggyPlan, Opened, Pacing, SourcePlan};
pub use crate::flow::{Mode, RunnerStats};
use crate::generate::Generator;
use crate::ids::{Offset, PartitionId, Slot};
use crate::iggy::{Credentials, Endpoint, IggyError, IggySource, ResultCode, Target};
use crate::message::{Batch, Message};
use crate::shard::{REPORT_INTERVAL, ShardState};
use crate::sink::{AnySink, Sink};

enum Source {
    Iggy(Box<IggySource>),
    Generate(Generator),
}

/// One sink on one shard.
pub struct Runner {
    index: usize,
    cfg: Arc<SinkConfig>,
    sink: AnySink,
    acks: Acks,
    source: Source,
    flow: Flow,
    shard: Rc<ShardState>,
    reports: Vec<Ack>,
    scratch: Vec<Message>,
    stream_name: Rc<str>,
    topic_name: Rc<str>,
    /// When the source's requests end once the shard was told to stop.
    stop_cap: Option<Instant>,
    /// The operator's flushes taken so far.
    flushes: u64,
    /// When the sink's open objects are next copied into the statistics.
    next_objects: Instant,
    objects: Vec<(Slot, crate::sink::OpenObject)>,
}

/// How long a request to the source may take once the shard was told to stop (the control
/// thread waits 2 s for a stopping shard).
const STOP_REQUEST: Duration = Duration::from_millis(1_200);

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("sink", &self.cfg.name)
            .field("flow", &self.flow)
            .finish()
    }
}

impl Runner {
    /// Builds the runner of sink `index` for `work` on shard `shard_index` (`lead`: the first
    /// shard the sink runs on).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        config: &Config,
        index: usize,
        work: &SinkWork,
        lead: bool,
        shard_index: usize,
        shard: Rc<ShardState>,
        endpoint: Option<Endpoint>,
    ) -> Result<(Runner, Rc<RefCell<RunnerStats>>), EngineError> {
        let cfg = Arc::new(config.sinks[index].clone());
        let named = |what: &dyn std::fmt::Display| format!("sink {:?}: {what}", cfg.name);
        let acks = Acks::new();
        let sink = crate::sink::build(&cfg, shard_index, lead, acks.clone())
            .map_err(|e| EngineError::new(e.class, named(&e)))?;
        let self_paced = sink.paced_by_memory();
        let partitions = match work {
            SinkWork::Partitions(p) => p.clone(),
            SinkWork::GroupMember => Vec::new(),
        };
        let (source, plan, stream_name, topic_name) = match cfg.source {
            SourceKind::Generate => {
                let gen_cfg = cfg
                    .generate
                    .clone()
                    .unwrap_or(crate::config::GenerateConfig {
                        partitions: 1,
                        rate: 0.0,
                        size: crate::units::ByteSize(100),
                        messages: 0,
                    });
                let generator = Generator::new(&gen_cfg, &partitions);
                let parts = generator
                    .partitions()
                    .iter()
                    .map(|&p| {
                        let end = generator.end(p);
                        (PartitionId(p), (end != u64::MAX).then_some(Offset(end)))
                    })
                    .collect();
                (
                    Source::Generate(generator),
                    SourcePlan::Local(parts),
                    Rc::from("generate"),
                    Rc::from(cfg.name.as_str()),
                )
            }
            SourceKind::Iggy => {
                let iggy = &config.iggy;
                let endpoint =
                    endpoint.ok_or_else(|| EngineError::permanent("no Iggy endpoint"))?;
                let creds = match (&iggy.token, &iggy.username, &iggy.password) {
                    (Some(t), _, _) => Credentials::Token(t.clone()),
                    (None, Some(u), Some(p)) => Credentials::Password {
                        username: u.clone(),
                        password: p.clone(),
                    },
                    _ => return Err(EngineError::config("iggy: no credentials")),
                };
                let target = Target::of(&cfg).map_err(|e| EngineError::new(e.class, named(&e)))?;
                let plan = IggyPlan {
                    explicit: partitions.iter().copied().map(PartitionId).collect(),
                    group: target.group.is_some(),
                    reconnect_min: iggy.reconnect_min.0,
                    reconnect_max: iggy.reconnect_max.0,
                    ping_interval: iggy.ping_interval.0,
                    sync_interval: cfg.group_sync_interval.0,
                };
                let (stream_name, topic_name) = (
                    Rc::from(target.stream_name.as_str()),
                    Rc::from(target.topic_name.as_str()),
                );
                let src = IggySource::new(&cfg, target, endpoint, creds, partitions);
                (
                    Source::Iggy(Box::new(src)),
                    SourcePlan::Iggy(plan),
                    stream_name,
                    topic_name,
                )
            }
        };
        let pacing = if self_paced {
            Pacing::SinkBuffered
        } else {
            Pacing::Windows
        };
        let names = (Rc::clone(&stream_name), Rc::clone(&topic_name));
        let flow_cfg = FlowConfig::of_sink(&cfg, names, pacing, sink.tick_interval(), plan);
        let flow = Flow::new(flow_cfg, Rc::clone(&shard.budget), Instant::now());
        let stats = flow.stats();
        let runner = Runner {
            index,
            cfg,
            sink,
            acks,
            source,
            flow,
            shard,
            reports: Vec::new(),
            scratch: Vec::new(),
            stream_name,
            topic_name,
            stop_cap: None,
            flushes: 0,
            next_objects: Instant::now(),
            objects: Vec::new(),
        };
        Ok((runner, stats))
    }

    /// The sink's index in the config.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Runs until the sink is done, drained or stopped; `Err` when it failed for good.
    pub async fn run(mut self) -> Result<(), EngineError> {
        let shard = Rc::clone(&self.shard);
        match unless_stopped(&shard, self.sink.start()).await {
            None | Some(Ok(())) => {}
            Some(Err(e)) => {
                let e = self.sink_failure(&e);
                self.flow.handle_sink_error(Instant::now(), e);
            }
        }
        let result = loop {
            self.shard.service(false);
            let now = Instant::now();
            self.flow.handle_mode(now, self.shard.mode.get());
            self.take_pause();
            self.take_reports(now);
            self.flow.handle_sink_status(self.sink.status());
            self.copy_objects(now);
            let action = self.flow.poll_action(now);
            self.cap_requests(now);
            match action {
                Action::Stop(result) => break result,
                Action::Wait { until } => {
                    let wait = until.saturating_duration_since(Instant::now());
                    if !wait.is_zero() {
                        let _ = monoio::time::timeout(wait, self.acks.ready()).await;
                    }
                }
                Action::Connect => self.connect().await,
                Action::JoinGroup => self.join_group().await,
                Action::SyncGroup => self.sync_group().await,
                Action::Ping => self.ping().await,
                Action::Open {
                    partition,
                    need_head,
                } => self.open(partition, need_head).await,
                Action::Store {
                    slot,
                    partition,
                    offset,
                } => self.store(slot, partition, offset).await,
                Action::Poll {
                    slot,
                    partition,
                    offset,
                    count,
                } => {
                    if self.poll(slot, partition, offset, count).await {
                        // A generate source and a file sink never wait: let the shard's other
                        // tasks (reporting, other sinks) run between batches.
                        YieldNow(false).await;
                    }
                }
                Action::Release(slot) => self.sink.release(slot),
                Action::TickSink => {
                    if let Some(Err(e)) = unless_stopped(&shard, self.sink.tick()).await {
                        let e = self.sink_failure(&e);
                        self.flow.handle_sink_error(Instant::now(), e);
                    }
                }
                Action::FlushSink => {
                    if let Some(Err(e)) = unless_stopped(&shard, self.sink.flush()).await {
                        let e = self.sink_failure(&e);
                        self.flow.handle_sink_error(Instant::now(), e);
                    }
                }
                Action::DrainSink { deadline } => {
                    // A second signal (Stop) cuts the drain short: whatever is confirmed by
                    // then is stored.
                    if let Some(Err(e)) = unless_stopped(&shard, self.sink.drain(deadline)).await {
                        let e = self.sink_failure(&e);
                        self.flow.handle_sink_error(Instant::now(), e);
                    }
                    self.flow.handle_sink_drained();
                }
            }
        };
        self.leave_group().await;
        result
    }

    /// The operator's pause and flushes of this sink, into the flow.
    fn take_pause(&mut self) {
        let (paused, flushes) = self.shard.pause_of(self.index);
        let flush = flushes > self.flushes;
        self.flushes = flushes;
        if paused != self.flow.is_paused() || flush {
            self.flow.handle_pause(paused, flush);
        }
    }

    /// Copies the sink's open objects into the partitions' gauges, once per report.
    fn copy_objects(&mut self, now: Instant) {
        if now < self.next_objects {
            return;
        }
        self.next_objects = now + REPORT_INTERVAL;
        self.objects.clear();
        self.sink.open_objects(&mut self.objects);
        let stats = self.flow.stats();
        let mut stats = stats.borrow_mut();
        for (slot, gauge) in stats.partitions.iter_mut().enumerate() {
            if let Some(g) = gauge {
                g.objects.clear();
                g.objects.extend(
                    self.objects
                        .iter()
                        .filter(|(s, _)| s.0 == slot)
                        .map(|(_, o)| *o),
                );
            }
        }
    }

    /// Moves the sink's reports (and a self-paced sink's memory, when it changed) into the
    /// flow.
    fn take_reports(&mut self, now: Instant) {
        if let Some(trouble) = self.acks.take_trouble() {
            self.flow.handle_sink_trouble(now, trouble);
        }
        self.acks.drain_into(&mut self.reports);
        for ack in self.reports.drain(..) {
            self.flow.handle_sink_event(now, ack);
        }
        if let Some(bytes) = self.acks.take_held() {
            self.flow.handle_sink_buffered(bytes);
        }
    }

    fn sink_failure(&self, e: &EngineError) -> EngineError {
        EngineError::new(e.class, format!("sink {:?}: {e}", self.cfg.name))
    }

    /// An Iggy error as the flow takes it: transient ones as they are (the flow logs them),
    /// the others naming the sink (and the server, while setting up).
    fn source_failure(&mut self, e: &IggyError, setting_up: bool) -> EngineError {
        let class = e.class();
        let mut at = String::new();
        if let Source::Iggy(src) = &mut self.source {
            src.disconnect(e);
            if setting_up {
                at = src.location();
            }
        }
        if class == ErrorClass::Transient {
            return EngineError::transient(e.to_string());
        }
        EngineError::new(class, format!("sink {:?}: {e}{at}", self.cfg.name))
    }

    fn fail_source(&mut self, e: &IggyError, setting_up: bool) {
        let e = self.source_failure(e, setting_up);
        self.flow.handle_source_error(Instant::now(), e);
    }

    // ------------------------------------------------------------------ source actions

    async fn connect(&mut self) {
        let result = match &mut self.source {
            Source::Iggy(src) => src.connect().await,
            Source::Generate(_) => Ok(()),
        };
        match result {
            Ok(()) => self.flow.handle_connected(Instant::now()),
            Err(e) => self.fail_source(&e, true),
        }
    }

    async fn join_group(&mut self) {
        let Source::Iggy(src) = &mut self.source else {
            return;
        };
        match src.join().await {
            None => {}
            Some(Ok(())) => self.flow.handle_joined(Instant::now()),
            Some(Err(e)) => self.fail_source(&e, true),
        }
    }

    async fn sync_group(&mut self) {
        let Source::Iggy(src) = &mut self.source else {
            return;
        };
        match src.sync().await {
            None => {}
            Some(Ok(None)) => self.flow.handle_not_member(Instant::now()),
            Some(Ok(Some((generation, assigned)))) => {
                let changed = self
                    .flow
                    .handle_assignment(Instant::now(), generation, &assigned);
                if changed {
                    // Partitions new to this member start from heads fetched after the change.
                    src.forget_heads();
                }
            }
            Some(Err(e)) => self.fail_source(&e, false),
        }
    }

    async fn ping(&mut self) {
        let Source::Iggy(src) = &mut self.source else {
            return;
        };
        match src.ping().await {
            None => {}
            Some(Ok(())) => self.flow.handle_source_ok(Instant::now()),
            Some(Err(e)) => self.fail_source(&e, false),
        }
    }

    async fn open(&mut self, partition: PartitionId, need_head: bool) {
        let found = match self.open_source(partition, need_head).await {
            Ok(found) => found,
            Err(e) => return self.fail_source(&e, true),
        };
        // The sink may know of data written past the stored offset (an S3 marker).
        let shard = Rc::clone(&self.shard);
        let resumed = unless_stopped(
            &shard,
            self.sink
                .resume(&self.stream_name, &self.topic_name, partition),
        )
        .await;
        match resumed {
            // Stopping: the partition is not taken up.
            None => {}
            Some(Ok(done)) => {
                let found = Opened {
                    sink_done: done,
                    ..found
                };
                self.flow.handle_opened(Instant::now(), partition, found);
            }
            Some(Err(e)) => {
                let e = self.sink_failure(&e);
                self.flow.handle_sink_error(Instant::now(), e);
            }
        }
    }

    async fn open_source(
        &mut self,
        partition: PartitionId,
        need_head: bool,
    ) -> Result<Opened, IggyError> {
        let Source::Iggy(src) = &mut self.source else {
            return Ok(Opened::default());
        };
        let (stored, head) = src.open(partition, need_head).await?;
        Ok(Opened {
            stored,
            sink_done: None,
            head,
        })
    }

    /// Bounds the source's requests by the shard's mode: a drain's deadline, a stop's
    /// [`STOP_REQUEST`] (the control thread gives a stopping shard 2 s in all); running, by
    /// `request_timeout` alone. A server that keeps refusing (an offset store answered with a
    /// transient refusal, retried) cannot hold the shard past its shutdown.
    fn cap_requests(&mut self, now: Instant) {
        let Source::Iggy(src) = &mut self.source else {
            return;
        };
        let cap = match self.shard.mode.get() {
            Mode::Run => None,
            Mode::Drain(deadline) => Some(deadline),
            Mode::Stop => Some(*self.stop_cap.get_or_insert(now + STOP_REQUEST)),
        };
        src.cap_requests(cap);
    }

    async fn store(&mut self, slot: Slot, partition: PartitionId, offset: Offset) {
        let (result, group, clustered) = match &mut self.source {
            Source::Generate(_) => (Ok(()), false, false),
            Source::Iggy(src) => (
                src.store(partition, offset).await,
                src.in_group(),
                src.clustered(),
            ),
        };
        match result {
            Ok(()) => self.flow.handle_stored(Instant::now(), slot, offset),
            // A group member may not store offsets of a partition it no longer owns (the
            // server answers ResourceNotFound).
            Err(IggyError::Status {
                code: ResultCode::ResourceNotFound,
            }) if group => self.flow.handle_store_refused(Instant::now(), slot, offset),
            // A cluster's leader serves polls from its log before the followers have the
            // messages, and refuses to store an offset past what it has committed: the store
            // waits for the commit.
            Err(IggyError::Status {
                code: ResultCode::InvalidOffset,
            }) if clustered => self
                .flow
                .handle_store_deferred(Instant::now(), slot, offset),
            Err(e) => self.fail_source(&e, false),
        }
    }

    /// Polls and delivers what the flow keeps; `true` when something was delivered.
    async fn poll(
        &mut self,
        slot: Slot,
        partition: PartitionId,
        offset: Offset,
        count: u32,
    ) -> bool {
        let mut messages = std::mem::take(&mut self.scratch);
        messages.clear();
        let mut head = None;
        let mut wait = None;
        match &mut self.source {
            Source::Generate(g) => {
                wait = g.poll(partition.0, offset.0, count, Instant::now(), &mut messages);
            }
            Source::Iggy(src) => {
                let Some(result) = src.poll(partition, offset, count, &mut messages).await else {
                    self.scratch = messages;
                    return false;
                };
                match result {
                    Err(e) => {
                        self.scratch = messages;
                        self.fail_source(&e, false);
                        return false;
                    }
                    Ok(polled) if polled.fenced() => {
                        self.scratch = messages;
                        self.flow.handle_fenced(Instant::now());
                        return false;
                    }
                    Ok(polled) => head = Some(Offset(polled.head)),
                }
            }
        }
        let now = Instant::now();
        // Reports that came in while polling first: a redelivery taken now makes this batch
        // stale, and the flow drops it.
        self.take_reports(now);
        let keep = self.flow.handle_polled(now, &mut messages, head, wait);
        let info = self.flow.info(slot);
        let (true, Some(info)) = (keep, info) else {
            self.scratch = messages;
            return false;
        };
        let batch = Batch {
            partition: info,
            messages,
        };
        let shard = Rc::clone(&self.shard);
        match unless_stopped(&shard, self.sink.deliver(batch)).await {
            // Cut short by Stop: what it held stays unconfirmed; the flow stores the rest.
            None => false,
            Some(Ok(())) => true,
            Some(Err(e)) => {
                let e = self.sink_failure(&e);
                self.flow.handle_sink_error(Instant::now(), e);
                false
            }
        }
    }

    async fn leave_group(&mut self) {
        let Source::Iggy(src) = &mut self.source else {
            return;
        };
        if let Some(Err(e)) = src.leave().await {
            warn!(sink = %self.cfg.name, "leaving the consumer group: {e}");
        }
    }
}

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
        // The shard's own task takes the control thread's commands as they come, even while
        // this runner waits, and the mode's change wakes this.
        while shard.mode.get() != Mode::Stop {
            shard.changed.next().await;
        }
    };
    monoio::select! {
        out = call => Some(out),
        () = stopped => None,
    }
}

/// Gives the other tasks of the shard a turn.
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
