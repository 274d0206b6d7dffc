//! The source link: connect and reconnect with a growing, jittered backoff, pings, and a
//! consumer group's membership and assignment (partitions taken away are kept until drained
//! and stored; see `retire`).

use std::time::Instant;

use tracing::{info, warn};

use super::{Action, Flow, IggyPlan, PartitionId, Phase};
use crate::config::StartFrom;
use crate::error::{EngineError, ErrorClass};
use crate::units::{Backoff, Rounded};

/// Where the link to the source is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LinkState {
    /// Not connected: connect at `at`.
    Down { at: Instant },
    /// A connect is under way.
    Connecting,
    /// Connected; `ready` once the partitions are taken up (the backoff resets then).
    Up { ready: bool },
}

/// The link to an Iggy server (for a local source: always up, no plan).
pub(super) struct Link {
    pub(super) state: LinkState,
    pub(super) plan: Option<IggyPlan>,
    pub(super) backoff: Backoff,
    pub(super) joined: bool,
    pub(super) generation: Option<u64>,
    pub(super) next_sync: Instant,
    pub(super) last_request: Instant,
}

impl Flow {
    /// A source request failed. Transient errors drop the link and reconnect with backoff;
    /// the others end the run.
    pub fn handle_source_error(&mut self, now: Instant, error: EngineError) {
        self.stats.borrow_mut().last_error = Some((now, error.message.clone()));
        self.in_poll = None;
        let was = self.link.state;
        self.link.state = LinkState::Down { at: now };
        self.link.joined = false;
        self.link.generation = None;
        self.opens.clear();
        if matches!(self.phase, Phase::Finishing { .. } | Phase::Done) {
            // Stopping anyway: whatever is not stored yet stays for the next run.
            warn!(sink = %self.cfg.name, "storing offsets while stopping: {}", error.message);
            return;
        }
        if error.class != ErrorClass::Transient {
            self.finish(Err(error));
            return;
        }
        if self.link.plan.is_none() {
            return;
        }
        let wait = self.link.backoff.next_wait(self.rng.f64());
        self.link.state = LinkState::Down { at: now + wait };
        self.stats.borrow_mut().counters.reconnects += 1;
        if matches!(was, LinkState::Up { ready: true }) {
            warn!(sink = %self.cfg.name, "lost the Iggy connection: {}", error.message);
        } else {
            warn!(sink = %self.cfg.name, "Iggy unavailable, retrying in {}: {}", Rounded(wait), error.message);
        }
    }

    /// A source request (a ping) succeeded.
    pub fn handle_source_ok(&mut self, _now: Instant) {}

    /// Connected, stream and topic checked.
    pub fn handle_connected(&mut self, _now: Instant) {
        self.link.state = LinkState::Up { ready: false };
        self.started = true;
        self.link.joined = false;
        self.link.generation = None;
        self.opens.clear();
        let Some(plan) = self.link.plan.as_ref() else {
            return;
        };
        if !plan.group {
            let missing: Vec<PartitionId> = plan
                .explicit
                .iter()
                .copied()
                .filter(|&p| self.slot_of(p).is_none())
                .collect();
            self.opens.extend(missing);
        }
        self.check_ready();
    }

    /// Joined the consumer group.
    pub fn handle_joined(&mut self, now: Instant) {
        self.link.joined = true;
        self.link.generation = None;
        self.link.next_sync = now;
    }

    /// Not a member of the group (evicted, or never joined): join again.
    pub fn handle_not_member(&mut self, _now: Instant) {
        self.link.joined = false;
        self.link.generation = None;
    }

    /// The group's assignment: `generation` and the partitions this member owns. Returns
    /// whether it changed (partitions to take up or give away).
    pub fn handle_assignment(
        &mut self,
        _now: Instant,
        generation: u64,
        assigned: &[PartitionId],
    ) -> bool {
        if self.link.generation == Some(generation) {
            return false;
        }
        self.link.generation = Some(generation);
        let list: Vec<u32> = assigned.iter().map(|p| p.0).collect();
        info!(
            sink = %self.cfg.name,
            generation,
            "consumer group assignment: partitions {list:?}"
        );
        // Partitions taken away: stop polling them; they leave once drained and stored.
        for part in self.parts.iter_mut().flatten() {
            part.owned = assigned.contains(&part.id);
            if part.owned {
                part.refused = None;
            }
        }
        self.opens.clear();
        for &p in assigned {
            if self.slot_of(p).is_none() && !self.opens.contains(&p) {
                self.opens.push_back(p);
            }
        }
        self.check_ready();
        true
    }

    pub(super) fn ping_due(&mut self, now: Instant) -> Option<Action> {
        let plan = self.link.plan.as_ref()?;
        if matches!(self.link.state, LinkState::Up { .. })
            && now.saturating_duration_since(self.link.last_request) >= plan.ping_interval
        {
            self.link.last_request = now;
            return Some(Action::Ping);
        }
        None
    }

    pub(super) fn link_action(&mut self, now: Instant) -> Option<Action> {
        let plan = self.link.plan.as_ref()?;
        let group = plan.group;
        let sync_interval = plan.sync_interval;
        match self.link.state {
            LinkState::Down { at } if now >= at => {
                self.link.state = LinkState::Connecting;
                self.link.last_request = now;
                Some(Action::Connect)
            }
            LinkState::Down { .. } | LinkState::Connecting => None,
            LinkState::Up { .. } => {
                if group && !self.link.joined {
                    self.link.last_request = now;
                    return Some(Action::JoinGroup);
                }
                if group && now >= self.link.next_sync {
                    self.link.next_sync = now + sync_interval;
                    self.link.last_request = now;
                    return Some(Action::SyncGroup);
                }
                if let Some(partition) = self.opens.pop_front() {
                    self.link.last_request = now;
                    return Some(Action::Open {
                        partition,
                        need_head: self.cfg.start == StartFrom::Latest,
                    });
                }
                self.ping_due(now)
            }
        }
    }

    pub(super) fn check_ready(&mut self) {
        let LinkState::Up { ready: false } = self.link.state else {
            return;
        };
        let Some(plan) = self.link.plan.as_ref() else {
            return;
        };
        let settled = self.opens.is_empty() && (!plan.group || self.link.generation.is_some());
        if settled {
            self.link.state = LinkState::Up { ready: true };
            self.link.backoff.reset();
        }
    }
}
