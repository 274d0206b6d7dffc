//! The engine's decisions for one sink on one shard, as a state machine without IO.
//!
//! [`Flow`] owns the partitions (their trackers, windows and the shard's memory budget), the
//! commit debounce, redelivery, the source link (reconnect backoff, pings, consumer-group
//! membership and assignment changes with drain-before-drop) and the shutdown deadline. It
//! owns no socket and reads no clock: every event comes in with `now`, and the runner
//! ([`crate::runner`]) performs what [`Flow::poll_action`] answers, then reports how it went.
//!
//! The call order, as in quinn-proto's `Connection`:
//!
//! 1. Feed what happened: [`Flow::handle_mode`] for the shard's control state,
//!    [`Flow::handle_sink_event`] for each report the sink queued (confirmed, failed,
//!    redeliver), [`Flow::handle_sink_buffered`] for a self-paced sink's memory.
//! 2. Ask [`Flow::poll_action`]`(now)` for the next thing to do and do it.
//! 3. Answer it: a source action with its `handle_*` (or [`Flow::handle_source_error`]); a
//!    sink call that failed with [`Flow::handle_sink_error`]. Then back to 1.
//!
//! Actions are answered one at a time, in the order asked (one request is in flight on the
//! Iggy connection), except [`Action::Wait`], [`Action::Release`] and [`Action::TickSink`],
//! which need no answer.
//!
//! The rules, each tested in `tests.rs` with a simulated clock and checked over random
//! interleavings in `sim.rs`: an offset is stored only when every offset up to it is confirmed;
//! a partition is polled only while its window and the shard's budget have room; a redelivery
//! rewinds its partition only, and a batch polled before it was taken is discarded; a
//! partition taken away by the group is stored (when it may still be) and released only once
//! it is drained; on stop only confirmed offsets are stored.

mod action;
mod config;
mod decide;
mod link;
mod parts;
mod stats;

#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use crate::ids::{Offset, PartitionId, Slot};
pub use action::{Action, Opened};
pub use config::{Budget, FlowConfig, IggyPlan, Pacing, SourcePlan};
pub use stats::{RunnerStats, SinkState, SourceState};

use link::{Link, LinkState};
use parts::Part;

use crate::acks::{Ack, Outcome};
use crate::config::{ErrorPolicy, StartFrom};
use crate::error::{EngineError, ErrorClass};
use crate::message::{Message, PartitionInfo};
use crate::ratelog::RateLimit;
use crate::units::Backoff;

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

#[derive(Debug)]
enum Phase {
    Run,
    Draining {
        deadline: Instant,
        asked: bool,
        drained: bool,
    },
    /// Storing what is confirmed, then stopping with `result`.
    Finishing {
        result: Result<(), EngineError>,
    },
    Done,
}

/// How often skipped messages are counted in one log line, and how many of each interval are
/// logged one by one first.
const SKIP_LOG_INTERVAL: Duration = Duration::from_secs(1);
const SKIP_LOG_BURST: u32 = 10;
/// The longest wait while running: the runner looks at the shard's commands this often.
const RUN_WAIT: Duration = Duration::from_millis(50);
/// The longest wait while draining.
const DRAIN_WAIT: Duration = Duration::from_millis(20);
/// A bounded local source, all confirmed, drains this long at most.
const LOCAL_END_DRAIN: Duration = Duration::from_secs(60);

/// One sink's flow on one shard. See the module docs for the call order.
pub struct Flow {
    cfg: FlowConfig,
    budget: Rc<Budget>,
    stats: Rc<RefCell<RunnerStats>>,
    parts: Vec<Option<Part>>,
    cursor: usize,
    link: Link,
    opens: VecDeque<PartitionId>,
    phase: Phase,
    epoch: Instant,
    next_tick: Instant,
    started: bool,
    /// The poll asked for and not yet answered.
    in_poll: Option<(Slot, Offset)>,
    /// A self-paced sink's bytes, as last added to the budget.
    sink_held: u64,
    /// A self-paced sink's messages in flight, as last added to the budget: their trackers'
    /// entries ([`crate::ack::ENTRY_BYTES`] each). Whatever the sink does with what it is
    /// given, the engine never holds more than the budget allows.
    tracked: u64,
    /// Messages rejected under `on_error = "fail"` after the first one ended the run.
    rejected_after_end: u64,
    rng: fastrand::Rng,
    skip_log: RateLimit,
    /// Paused by the operator: nothing is polled; the rest goes on.
    paused: bool,
    /// The operator asked the paused sink to flush what it holds.
    flush_wanted: bool,
    /// The link was ready once (the sink is past starting).
    was_ready: bool,
    /// The run ended with an error.
    failed: bool,
}

impl std::fmt::Debug for Flow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flow")
            .field("sink", &self.cfg.name)
            .field("phase", &self.phase)
            .field("link", &self.link.state)
            .field("partitions", &self.parts.iter().flatten().count())
            .finish()
    }
}

impl Flow {
    /// A flow starting at `now`, sharing the shard's `budget`.
    pub fn new(cfg: FlowConfig, budget: Rc<Budget>, now: Instant) -> Flow {
        let (state, plan, local) = match &cfg.source {
            SourcePlan::Local(parts) => (LinkState::Up { ready: true }, None, parts.clone()),
            SourcePlan::Iggy(plan) => (LinkState::Down { at: now }, Some(plan.clone()), vec![]),
        };
        let backoff = plan
            .as_ref()
            .map_or(Backoff::new(Duration::ZERO, Duration::ZERO), |p| {
                Backoff::new(p.reconnect_min, p.reconnect_max)
            });
        let rng = fastrand::Rng::with_seed(cfg.seed);
        let mut flow = Flow {
            link: Link {
                state,
                plan,
                backoff,
                joined: false,
                generation: None,
                next_sync: now,
                last_request: now,
            },
            cfg,
            budget,
            stats: Rc::new(RefCell::new(RunnerStats::new())),
            parts: Vec::new(),
            cursor: 0,
            opens: VecDeque::new(),
            phase: Phase::Run,
            epoch: now,
            next_tick: now,
            started: false,
            in_poll: None,
            sink_held: 0,
            tracked: 0,
            rejected_after_end: 0,
            rng,
            skip_log: RateLimit::new(SKIP_LOG_INTERVAL, SKIP_LOG_BURST),
            paused: false,
            flush_wanted: false,
            was_ready: false,
            failed: false,
        };
        if !local.is_empty() || flow.link.plan.is_none() {
            flow.started = true;
            for (p, end) in local {
                let slot = flow.add_part(p, None, Offset(0), now);
                if let Some(part) = flow.parts[slot.0].as_mut() {
                    part.end = end;
                }
            }
        }
        flow
    }

    /// The statistics the shard reports.
    pub fn stats(&self) -> Rc<RefCell<RunnerStats>> {
        Rc::clone(&self.stats)
    }

    /// The partition info of `slot` (what batches carry).
    pub fn info(&self, slot: Slot) -> Option<Rc<PartitionInfo>> {
        self.part(slot).map(|p| Rc::clone(&p.info))
    }

    /// Whether the run is over ([`Action::Stop`] was answered).
    #[cfg(test)]
    pub fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done)
    }

    /// Whether a stop (not a drain) is under way: sink calls are cut short.
    #[cfg(test)]
    pub fn is_stopping(&self) -> bool {
        matches!(self.phase, Phase::Finishing { .. } | Phase::Done)
    }

    fn now_us(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_micros() as u64
    }

    fn fail_with(&self, what: impl std::fmt::Display, class: ErrorClass) -> EngineError {
        EngineError::new(class, format!("sink {:?}: {what}", self.cfg.name))
    }

    // ------------------------------------------------------------------ events

    /// The shard's control state.
    pub fn handle_mode(&mut self, now: Instant, mode: Mode) {
        match (mode, &self.phase) {
            (Mode::Run, _) => {}
            (Mode::Drain(deadline), Phase::Run) => {
                self.phase = Phase::Draining {
                    deadline,
                    asked: false,
                    drained: false,
                }
            }
            (Mode::Stop, Phase::Run | Phase::Draining { .. }) => {
                self.report_skips(now, true);
                self.phase = Phase::Finishing { result: Ok(()) };
            }
            _ => {}
        }
    }

    /// The operator's pause (`paused`), and whether a flush was asked for with it: while
    /// paused nothing is polled; what is in flight confirms and is stored as usual, the
    /// connections stay, and (with `flush`) the sink finishes what it holds.
    pub fn handle_pause(&mut self, paused: bool, flush: bool) {
        self.paused = paused;
        self.flush_wanted |= paused && flush;
        if !paused {
            self.flush_wanted = false;
        }
    }

    /// Whether the operator paused the sink.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// A problem the sink works around (a connection lost, an upload tried again), for
    /// `/status`.
    pub fn handle_sink_trouble(&mut self, now: Instant, what: String) {
        self.stats.borrow_mut().last_error = Some((now, what));
    }

    /// A report of the sink.
    pub fn handle_sink_event(&mut self, now: Instant, ack: Ack) {
        let t = self.now_us(now);
        let windowed = self.cfg.pacing == Pacing::Windows;
        let slot = ack.slot;
        let policy = self.cfg.on_error;
        let finishing = matches!(self.phase, Phase::Finishing { .. } | Phase::Done);
        let mut fatal = None;
        {
            let Some(part) = self.parts.get_mut(slot.0).and_then(Option::as_mut) else {
                return;
            };
            let mut stats = self.stats.borrow_mut();
            let stats = &mut *stats;
            match ack.outcome {
                Outcome::Confirmed => {
                    let latency = &mut stats.latency;
                    let done = part.tracker.confirm(ack.first.0, ack.last.0, t, |us| {
                        latency.saturating_record(us.max(1));
                    });
                    stats.counters.confirmed += done.messages;
                    stats.counters.confirmed_bytes += done.bytes;
                    part.since_store += done.messages;
                    if windowed {
                        self.budget.sub(done.bytes);
                    }
                }
                Outcome::Failed(reason) => {
                    stats.counters.failed += 1;
                    match policy {
                        ErrorPolicy::Skip => {
                            if self.skip_log.admit(now) {
                                warn!(
                                    sink = %self.cfg.name,
                                    partition = part.info.partition.0,
                                    offset = ack.first.0,
                                    "skipping a message the sink rejected: {reason}"
                                );
                            }
                            let done = part.tracker.confirm(ack.first.0, ack.last.0, t, |_| {});
                            stats.counters.skipped += done.messages;
                            part.since_store += done.messages;
                            if windowed {
                                self.budget.sub(done.bytes);
                            }
                        }
                        ErrorPolicy::Fail | ErrorPolicy::DeadLetter => {
                            fatal = Some(format!(
                                "message at offset {} of {}/{}/{} rejected: {reason} (on_error = \"fail\": nothing past it is committed)",
                                ack.first, part.info.stream, part.info.topic, part.info.partition
                            ));
                        }
                    }
                }
                Outcome::Redeliver { not_before } => {
                    let before = part.tracker.unconfirmed_bytes();
                    let dropped = part.tracker.redeliver(ack.first.0);
                    stats.counters.redelivered += dropped;
                    if windowed {
                        self.budget
                            .sub(before.saturating_sub(part.tracker.unconfirmed_bytes()));
                    }
                    part.ready_at = not_before.unwrap_or(now);
                }
                Outcome::Reopen { not_before } => {
                    // What was polled and not confirmed is dropped with the partition: its
                    // next owner (this member again, or another) starts from what Iggy and
                    // the sink's store say.
                    let before = part.tracker.unconfirmed_bytes();
                    let dropped = part.tracker.redeliver(0);
                    stats.counters.redelivered += dropped;
                    if windowed {
                        self.budget
                            .sub(before.saturating_sub(part.tracker.unconfirmed_bytes()));
                    }
                    if part.reopen.is_none() {
                        part.reopen = Some(not_before.unwrap_or(now));
                    }
                }
            }
        }
        self.refresh_gauge(slot);
        self.account_tracked();
        if let Some(msg) = fatal {
            if finishing {
                // The run ends with the first: the rest of its batch is rejected as well, and
                // only counted (one line per message was the batch's size in lines).
                self.rejected_after_end += 1;
                debug!(sink = %self.cfg.name, "{msg}");
            } else {
                self.finish(Err(self.fail_with(msg, ErrorClass::Permanent)));
            }
        }
    }

    /// A self-paced sink's bytes held now (pushed by the sink after each change).
    pub fn handle_sink_buffered(&mut self, bytes: u64) {
        if self.cfg.pacing != Pacing::SinkBuffered {
            return;
        }
        self.budget.sub(self.sink_held);
        self.budget.add(bytes);
        self.sink_held = bytes;
    }

    /// A sink call failed for good: the run ends with it, after storing what is confirmed.
    pub fn handle_sink_error(&mut self, now: Instant, error: EngineError) {
        self.stats.borrow_mut().last_error = Some((now, error.message.clone()));
        self.finish(Err(error));
    }

    /// The sink's drain call returned.
    pub fn handle_sink_drained(&mut self) {
        if let Phase::Draining { drained, .. } = &mut self.phase {
            *drained = true;
        }
    }

    /// A partition asked for with [`Action::Open`] is taken up.
    pub fn handle_opened(&mut self, now: Instant, partition: PartitionId, found: Opened) {
        if self.slot_of(partition).is_some() {
            return;
        }
        // `start` applies to a partition with no position at all: a sink marker is one (its
        // offsets were written, and their commit may have been refused because the partition
        // moved), so it is never jumped over to the head.
        let mut next = match (found.stored, found.sink_done, self.cfg.start) {
            (Some(s), _, _) => s.next(),
            (None, Some(_), _) | (None, None, StartFrom::Earliest) => Offset(0),
            (None, None, StartFrom::Latest) => found.head.map_or(Offset(0), Offset::next),
        };
        let mut stored = found.stored;
        // The sink may know of data written past the stored offset (an S3 object completed
        // just before a crash, before its offsets were committed): start after it.
        if let Some(done) = found.sink_done
            && done.next() > next
        {
            info!(
                sink = %self.cfg.name,
                partition = partition.0,
                "partition {}/{}/{partition}: the sink already holds up to offset {done} (Iggy has {:?})",
                self.cfg.stream,
                self.cfg.topic,
                stored.map(|s| s.0)
            );
            next = done.next();
            stored = Some(done);
        }
        info!(
            sink = %self.cfg.name,
            partition = partition.0,
            stored = ?stored.map(|s| s.0),
            "partition {}/{}/{partition}: resuming at offset {next}",
            self.cfg.stream,
            self.cfg.topic
        );
        let slot = self.add_part(partition, stored, next, now);
        // The tracker starts past what the sink already holds, but Iggy still has its own
        // stored offset: keep that one, so the sink's offset is stored at the next commit
        // (else a partition with nothing new to poll would keep its old offset in Iggy).
        if let Some(part) = self.part_mut(slot) {
            part.stored = found.stored;
        }
        self.check_ready();
    }

    /// A consumer offset asked for with [`Action::Store`] is stored.
    pub fn handle_stored(&mut self, now: Instant, slot: Slot, offset: Offset) {
        let Some(part) = self.part_mut(slot) else {
            return;
        };
        if part.stored.is_none_or(|s| s < offset) {
            part.stored = Some(offset);
        }
        part.since_store = 0;
        part.last_store = now;
        self.stats.borrow_mut().counters.commits += 1;
        self.refresh_gauge(slot);
    }

    /// The server refused to store the offset of a partition this member no longer owns:
    /// its new owner resumes from the last stored offset, so this one gives it up.
    pub fn handle_store_refused(&mut self, _now: Instant, slot: Slot, offset: Offset) {
        let name = self.cfg.name.clone();
        let Some(part) = self.part_mut(slot) else {
            return;
        };
        warn!(
            sink = %name,
            partition = part.id.0,
            "partition {} was taken away before offset {offset} could be stored; its new owner resumes from the last stored offset",
            part.id
        );
        part.owned = false;
        part.refused = Some(offset);
    }

    /// The server could not take the store yet (a cluster's leader refuses an offset past what
    /// it has committed, and it serves polls from its log before the followers have it): the
    /// same watermark is stored again after `commit_interval`.
    pub fn handle_store_deferred(&mut self, now: Instant, slot: Slot, offset: Offset) {
        let name = self.cfg.name.clone();
        let Some(part) = self.part_mut(slot) else {
            return;
        };
        debug!(
            sink = %name,
            partition = part.id.0,
            "the server does not take offset {offset} of {} yet; storing it again later",
            part.id
        );
        part.last_store = now;
        part.since_store = 0;
    }

    /// The group moved the polled partition: re-sync now.
    pub fn handle_fenced(&mut self, now: Instant) {
        self.in_poll = None;
        self.link.next_sync = now;
    }

    /// What the poll asked for brought: `messages` (kept in place are the ones to deliver,
    /// in offset order), the partition's `head` when the source knows it, and for a
    /// rate-limited local source how long to `wait` before the next poll. Returns whether
    /// anything is left to deliver.
    ///
    /// A batch polled from an offset the partition no longer continues from (a redelivery
    /// was taken while the poll was under way) is dropped whole: it is polled again.
    pub fn handle_polled(
        &mut self,
        now: Instant,
        messages: &mut Vec<Message>,
        head: Option<Offset>,
        wait: Option<Duration>,
    ) -> bool {
        let polled = messages.len() as u64;
        let polled_bytes: u64 = messages.iter().map(|m| m.payload.len() as u64).sum();
        {
            let mut stats = self.stats.borrow_mut();
            stats.counters.messages_in += polled;
            stats.counters.bytes_in += polled_bytes;
        }
        let Some((slot, from)) = self.in_poll.take() else {
            messages.clear();
            return false;
        };
        let t = self.now_us(now);
        let poll_interval = self.cfg.poll_interval;
        let Some(part) = self.parts.get_mut(slot.0).and_then(Option::as_mut) else {
            messages.clear();
            return false;
        };
        if part.tracker.next_poll() != from.0 || part.reopen.is_some() {
            messages.clear();
            return false;
        }
        if head.is_some() {
            part.head = head;
        }
        if messages.is_empty() {
            let idle = part.idle_wait.min(poll_interval);
            part.idle_wait = (idle * 2).min(poll_interval);
            part.ready_at = now + wait.unwrap_or(idle);
            self.refresh_gauge(slot);
            return false;
        }
        part.idle_wait = parts::IDLE_WAIT_MIN;
        let mut bytes = 0u64;
        messages.retain(|m| {
            let fresh = part.tracker.push(m.offset, m.payload.len(), t);
            if fresh {
                bytes += m.payload.len() as u64;
            }
            fresh
        });
        if let Some(last) = messages.last()
            && part.head.is_none_or(|h| h.0 < last.offset)
        {
            part.head = Some(Offset(last.offset));
        }
        let count = messages.len() as u64;
        if self.cfg.pacing == Pacing::Windows {
            self.budget.add(bytes);
        }
        {
            let mut stats = self.stats.borrow_mut();
            stats.counters.messages_out += count;
            stats.counters.bytes_out += bytes;
        }
        self.refresh_gauge(slot);
        self.account_tracked();
        count > 0
    }

    /// The sink's own figures, for the metrics.
    pub fn handle_sink_status(&mut self, status: crate::acks::SinkStatus) {
        let mut stats = self.stats.borrow_mut();
        stats.sink_failing = status.failing;
        stats.counters.sink_reconnects = status.reconnects;
        stats.counters.sink_retries = status.retries;
        stats.counters.sink_requests = status.requests;
        stats.counters.sink_in_flight_peak = status.in_flight_peak;
        stats.counters.sink_buffered_peak = status.buffered_peak;
        stats.counters.sink_encoded_bytes = status.encoded_bytes;
        stats.counters.sink_uploaded_bytes = status.uploaded_bytes;
        stats.counters.sink_objects_open = status.objects_open;
        stats.counters.sink_buffered_bytes = status.buffered_bytes;
        stats.counters.sink_table_commits = status.table_commits;
        stats.counters.sink_table_files = status.table_files;
        stats.counters.sink_table_retries = status.table_retries;
    }
}
