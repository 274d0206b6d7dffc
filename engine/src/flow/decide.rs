//! The flow's answers: which action comes next (poll, store, release, reconnect, wait) and
//! the state the runner reports, from the state the `handle_*` calls in `mod.rs` keep.

use super::*;

impl Flow {
    /// The next thing to do at `now`.
    pub fn poll_action(&mut self, now: Instant) -> Action {
        let action = self.next_action(now);
        self.publish_state();
        action
    }

    /// Where the sink is now.
    pub fn state(&self) -> SinkState {
        match &self.phase {
            Phase::Finishing { result: Err(_) } => SinkState::Failed,
            Phase::Done if self.failed => SinkState::Failed,
            Phase::Done => SinkState::Stopped,
            Phase::Finishing { .. } | Phase::Draining { .. } => SinkState::Draining,
            Phase::Run if !self.was_ready => SinkState::Starting,
            Phase::Run if self.paused => SinkState::Paused,
            Phase::Run => SinkState::Running,
        }
    }

    pub(super) fn publish_state(&mut self) {
        if matches!(self.link.state, LinkState::Up { ready: true }) {
            self.was_ready = true;
        }
        let state = self.state();
        let source = match self.link.state {
            LinkState::Down { .. } => SourceState::Down,
            LinkState::Connecting => SourceState::Connecting,
            LinkState::Up { .. } => SourceState::Up,
        };
        let mut stats = self.stats.borrow_mut();
        stats.state = state;
        stats.source = source;
        stats.generation = self.link.generation;
    }

    pub(super) fn next_action(&mut self, now: Instant) -> Action {
        loop {
            match &self.phase {
                Phase::Done => {
                    return Action::Wait {
                        until: now + RUN_WAIT,
                    };
                }
                Phase::Finishing { .. } => return self.finishing_action(now),
                Phase::Draining {
                    deadline,
                    asked,
                    drained,
                } => {
                    let (deadline, asked, drained) = (*deadline, *asked, *drained);
                    if !asked {
                        self.phase = Phase::Draining {
                            deadline,
                            asked: true,
                            drained: false,
                        };
                        return Action::DrainSink { deadline };
                    }
                    if !drained {
                        // The drain call is under way (it was asked and not answered).
                        return Action::Wait {
                            until: now + DRAIN_WAIT,
                        };
                    }
                    if now < deadline && !self.all_idle() {
                        if let Some(ping) = self.ping_due(now) {
                            return ping;
                        }
                        return Action::Wait {
                            until: deadline.min(now + DRAIN_WAIT),
                        };
                    }
                    self.report_skips(now, true);
                    self.phase = Phase::Finishing { result: Ok(()) };
                }
                Phase::Run => {
                    self.report_skips(now, false);
                    if let Some(a) = self.run_action(now) {
                        return a;
                    }
                    if !matches!(self.phase, Phase::Run) {
                        continue;
                    }
                    return Action::Wait {
                        until: self.next_wake(now),
                    };
                }
            }
        }
    }

    pub(super) fn finish(&mut self, result: Result<(), EngineError>) {
        match &self.phase {
            Phase::Finishing { .. } | Phase::Done => {}
            _ => self.phase = Phase::Finishing { result },
        }
    }

    pub(super) fn finishing_action(&mut self, now: Instant) -> Action {
        if matches!(self.link.state, LinkState::Up { .. })
            && let Some(store) = self.store_due(now, true)
        {
            return store;
        }
        let Phase::Finishing { result } = std::mem::replace(&mut self.phase, Phase::Done) else {
            return Action::Wait { until: now };
        };
        self.failed = result.is_err();
        self.release_budget();
        if self.rejected_after_end > 0 {
            warn!(
                sink = %self.cfg.name,
                "{} more messages were rejected after the first ended the run (logged at debug \
                 level); none of them is committed",
                self.rejected_after_end
            );
        }
        // An error is the runner's result: the control thread logs it, once.
        Action::Stop(result)
    }

    /// For a self-paced sink: the entries of the messages in flight count in the budget.
    pub(super) fn account_tracked(&mut self) {
        if self.cfg.pacing != Pacing::SinkBuffered {
            return;
        }
        let messages: u64 = self
            .parts
            .iter()
            .flatten()
            .map(|p| p.tracker.unconfirmed())
            .sum();
        let now = messages * crate::ack::ENTRY_BYTES;
        if now != self.tracked {
            self.budget.sub(self.tracked);
            self.budget.add(now);
            self.tracked = now;
        }
    }

    /// What this runner holds leaves the shard's budget with it.
    pub(super) fn release_budget(&mut self) {
        self.budget.sub(self.sink_held);
        self.sink_held = 0;
        self.budget.sub(self.tracked);
        self.tracked = 0;
        if self.cfg.pacing == Pacing::Windows {
            let held: u64 = self
                .parts
                .iter()
                .flatten()
                .map(|p| p.tracker.unconfirmed_bytes())
                .sum();
            self.budget.sub(held);
        }
    }

    pub(super) fn run_action(&mut self, now: Instant) -> Option<Action> {
        if matches!(self.link.state, LinkState::Up { .. })
            && let Some(store) = self.store_due(now, false)
        {
            return Some(store);
        }
        if let Some(a) = self.link_action(now) {
            return Some(a);
        }
        if let Some(a) = self.retire(now) {
            return Some(a);
        }
        if self.started && now >= self.next_tick {
            self.next_tick = now + self.cfg.tick_interval;
            return Some(Action::TickSink);
        }
        if self.paused {
            if std::mem::take(&mut self.flush_wanted) {
                return Some(Action::FlushSink);
            }
            return None;
        }
        if self.local_done() {
            info!(sink = %self.cfg.name, "generate: all messages confirmed");
            self.phase = Phase::Draining {
                deadline: now + LOCAL_END_DRAIN,
                asked: false,
                drained: false,
            };
            return None;
        }
        self.choose_poll(now)
    }

    /// A partition taken away, drained and stored leaves; one the sink gave up leaves once
    /// its time comes and, still owned, is opened anew (after the sink released it).
    pub(super) fn retire(&mut self, now: Instant) -> Option<Action> {
        for slot in 0..self.parts.len() {
            let Some(p) = self.parts[slot].as_ref() else {
                continue;
            };
            let reopen = p.reopen.is_some_and(|at| at <= now);
            let drained = !p.owned
                && p.tracker.is_idle()
                && p.tracker.watermark() <= p.store_settled().map(|s| s.0);
            if !reopen && !drained {
                continue;
            }
            let (id, owned) = (p.id, p.owned);
            self.parts[slot] = None;
            self.account_tracked();
            if let Some(g) = self.stats.borrow_mut().partitions.get_mut(slot) {
                *g = None;
            }
            if reopen && owned {
                if self.link.plan.is_none() {
                    // A local source has no one to hand the partition to: another writer
                    // of this sink's output is at work.
                    let e = self.fail_with(
                        format!(
                            "partition {id} was taken over by another writer in the sink's store \
                             (is a second engine running with this sink's name and prefix?)"
                        ),
                        ErrorClass::Permanent,
                    );
                    self.finish(Err(e));
                } else if !self.opens.contains(&id) {
                    info!(
                        sink = %self.cfg.name,
                        partition = id.0,
                        "partition {}/{}/{id}: taking it up anew (the sink gave it up)",
                        self.cfg.stream,
                        self.cfg.topic
                    );
                    self.opens.push_back(id);
                }
            }
            return Some(Action::Release(Slot(slot)));
        }
        None
    }

    pub(super) fn store_due(&mut self, now: Instant, force: bool) -> Option<Action> {
        for part in self.parts.iter().flatten() {
            let Some(mark) = part.tracker.watermark() else {
                continue;
            };
            if part.store_settled().is_some_and(|s| s.0 >= mark) {
                continue;
            }
            let due = force
                || part.since_store >= self.cfg.commit_every
                || now.saturating_duration_since(part.last_store) >= self.cfg.commit_interval;
            if due {
                self.link.last_request = now;
                return Some(Action::Store {
                    slot: part.info.slot,
                    partition: part.id,
                    offset: Offset(mark),
                });
            }
        }
        None
    }

    pub(super) fn all_idle(&self) -> bool {
        self.parts.iter().flatten().all(|p| p.tracker.is_idle())
    }

    pub(super) fn local_done(&self) -> bool {
        if self.link.plan.is_some() || self.parts.is_empty() {
            return false;
        }
        self.parts
            .iter()
            .flatten()
            .all(|p| p.tracker.is_idle() && p.end.is_some_and(|end| p.tracker.next_poll() >= end.0))
    }

    pub(super) fn has_room(&self, p: &Part) -> bool {
        if self.cfg.pacing == Pacing::SinkBuffered {
            return self.budget.has_room();
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
            && p.tracker.unconfirmed_bytes() < self.cfg.window_bytes
            && self.budget.has_room()
    }

    pub(super) fn pollable(&self) -> bool {
        match self.link.state {
            LinkState::Up { .. } => true,
            LinkState::Down { .. } | LinkState::Connecting => false,
        }
    }

    pub(super) fn choose_poll(&mut self, now: Instant) -> Option<Action> {
        if !self.pollable() {
            return None;
        }
        let n = self.parts.len();
        let slot = (0..n).map(|i| (self.cursor + i) % n).find(|&slot| {
            self.parts[slot].as_ref().is_some_and(|p| {
                p.owned && p.reopen.is_none() && p.ready_at <= now && self.has_room(p)
            })
        })?;
        self.cursor = (slot + 1) % n;
        let part = self.parts[slot].as_ref()?;
        let room = match self.cfg.pacing {
            Pacing::Windows => {
                u64::from(self.cfg.window_messages).saturating_sub(part.tracker.unconfirmed())
            }
            Pacing::SinkBuffered => u64::from(self.cfg.batch_size),
        };
        let count = u32::try_from(room.min(u64::from(self.cfg.batch_size))).unwrap_or(u32::MAX);
        let offset = Offset(part.tracker.next_poll());
        let partition = part.id;
        self.in_poll = Some((Slot(slot), offset));
        if self.link.plan.is_some() {
            self.link.last_request = now;
        }
        Some(Action::Poll {
            slot: Slot(slot),
            partition,
            offset,
            count,
        })
    }

    pub(super) fn next_wake(&self, now: Instant) -> Instant {
        let mut wake = now + RUN_WAIT;
        if self.started {
            wake = wake.min(self.next_tick);
        }
        let polling = self.pollable() && !self.paused;
        for p in self.parts.iter().flatten() {
            if let Some(at) = p.reopen {
                wake = wake.min(at);
            } else if polling && p.owned && self.has_room(p) {
                wake = wake.min(p.ready_at);
            }
            if p.tracker.watermark() > p.store_settled().map(|s| s.0) {
                wake = wake.min(p.last_store + self.cfg.commit_interval);
            }
        }
        if let Some(plan) = &self.link.plan {
            match self.link.state {
                LinkState::Down { at } => wake = wake.min(at),
                LinkState::Connecting => {}
                LinkState::Up { .. } => {
                    if plan.group {
                        wake = wake.min(self.link.next_sync);
                    }
                    wake = wake.min(self.link.last_request + plan.ping_interval);
                }
            }
        }
        wake.max(now)
    }

    /// Logs how many skipped messages went unnamed, once their interval is over (at once when
    /// stopping).
    pub(super) fn report_skips(&mut self, now: Instant, stopping: bool) {
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
}
