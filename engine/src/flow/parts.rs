//! The partitions of one flow: each with its tracker, what is stored, its poll readiness and
//! ownership, and the gauges the metrics show.

use std::rc::Rc;
use std::time::{Duration, Instant};

use super::{Flow, Offset, PartitionId, Slot};
use crate::ack::Tracker;
use crate::message::PartitionInfo;
use crate::metrics::PartitionGauge;

/// The first wait after an empty poll. A partition whose polls bring messages is polled
/// again at once; once one comes back empty the wait starts here and doubles while they stay
/// empty, up to `poll_interval`: a message arriving after a quiet spell waits about as long
/// as the spell lasted, not a whole interval, and an idle partition costs one poll per
/// interval.
pub(super) const IDLE_WAIT_MIN: Duration = Duration::from_micros(200);

/// One partition: its tracker and what the flow decides by (stored offset, commit debounce,
/// poll readiness, ownership).
pub(super) struct Part {
    pub(super) info: Rc<PartitionInfo>,
    pub(super) id: PartitionId,
    pub(super) tracker: Tracker,
    pub(super) stored: Option<Offset>,
    pub(super) since_store: u64,
    pub(super) last_store: Instant,
    pub(super) ready_at: Instant,
    /// The wait after the next empty poll: [`IDLE_WAIT_MIN`] after a poll that brought
    /// messages, doubling with each empty one up to `poll_interval`.
    pub(super) idle_wait: Duration,
    pub(super) head: Option<Offset>,
    /// Still assigned to this runner (a consumer group can take it away).
    pub(super) owned: bool,
    /// The offset the source ends at (exclusive), for a bounded local source.
    pub(super) end: Option<Offset>,
    /// The sink gave the partition up ([`crate::acks::Outcome::Reopen`]): nothing of it is
    /// polled any more; from this time on it leaves and, still owned, is opened anew.
    pub(super) reopen: Option<Instant>,
    /// The offset whose store the group refused: the partition had been taken away. It is
    /// not stored again while the partition is not ours (see [`Part::store_settled`]).
    pub(super) refused: Option<Offset>,
}

impl Part {
    /// The offset up to which nothing is left to store: the stored one, or, while the
    /// partition is not ours, the one the group refused (its new owner stores from the last
    /// stored offset). A partition given back keeps what was really stored, so its watermark
    /// is stored again.
    pub(super) fn store_settled(&self) -> Option<Offset> {
        if self.owned {
            self.stored
        } else {
            self.stored.max(self.refused)
        }
    }
}

impl Flow {
    pub(super) fn part(&self, slot: Slot) -> Option<&Part> {
        self.parts.get(slot.0).and_then(Option::as_ref)
    }

    pub(super) fn part_mut(&mut self, slot: Slot) -> Option<&mut Part> {
        self.parts.get_mut(slot.0).and_then(Option::as_mut)
    }

    pub(super) fn slot_of(&self, partition: PartitionId) -> Option<Slot> {
        self.parts
            .iter()
            .position(|p| p.as_ref().is_some_and(|p| p.id == partition))
            .map(Slot)
    }

    pub(super) fn add_part(
        &mut self,
        partition: PartitionId,
        stored: Option<Offset>,
        next: Offset,
        now: Instant,
    ) -> Slot {
        let slot = self
            .parts
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.parts.len());
        let info = Rc::new(PartitionInfo {
            slot: Slot(slot),
            stream: Rc::clone(&self.cfg.stream),
            topic: Rc::clone(&self.cfg.topic),
            partition,
        });
        let part = Part {
            info,
            id: partition,
            tracker: Tracker::new(stored.map(|s| s.0), next.0),
            stored,
            since_store: 0,
            last_store: now,
            ready_at: now,
            idle_wait: IDLE_WAIT_MIN,
            head: None,
            owned: true,
            end: None,
            reopen: None,
            refused: None,
        };
        let gauge = PartitionGauge {
            stream: self.cfg.stream.to_string(),
            topic: self.cfg.topic.to_string(),
            partition: partition.0,
            committed: stored.map(|s| s.0),
            head: None,
            in_flight: 0,
            polled: next.0.checked_sub(1),
            confirmed: part.tracker.watermark(),
            objects: Vec::new(),
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
        Slot(slot)
    }

    pub(super) fn refresh_gauge(&self, slot: Slot) {
        let Some(part) = self.part(slot) else {
            return;
        };
        let mut stats = self.stats.borrow_mut();
        if let Some(Some(g)) = stats.partitions.get_mut(slot.0) {
            g.committed = part.stored.map(|s| s.0);
            g.head = part.head.map(|h| h.0);
            g.in_flight = part.tracker.unconfirmed();
            g.polled = part.tracker.next_poll().checked_sub(1);
            g.confirmed = part.tracker.watermark();
        }
        let (mut m, mut b) = (0, 0);
        for p in self.parts.iter().flatten() {
            m += p.tracker.unconfirmed();
            b += p.tracker.unconfirmed_bytes();
        }
        stats.in_flight = (m, b);
    }

    /// The watermark of `partition`: every offset up to it is confirmed.
    #[cfg(test)]
    pub fn watermark(&self, partition: PartitionId) -> Option<Offset> {
        let slot = self.slot_of(partition)?;
        self.part(slot)?.tracker.watermark().map(Offset)
    }

    /// The offset last stored for `partition`, as the flow knows it.
    #[cfg(test)]
    pub fn stored(&self, partition: PartitionId) -> Option<Offset> {
        let slot = self.slot_of(partition)?;
        self.part(slot)?.stored
    }

    /// The next offset `partition` is polled from.
    #[cfg(test)]
    pub fn next_poll(&self, partition: PartitionId) -> Option<Offset> {
        let slot = self.slot_of(partition)?;
        Some(Offset(self.part(slot)?.tracker.next_poll()))
    }

    /// The slot of `partition`, while it is this runner's.
    #[cfg(test)]
    pub fn slot(&self, partition: PartitionId) -> Option<Slot> {
        self.slot_of(partition)
    }
}
