//! Consumer groups as the VSR server runs them (`core/metadata/src/stm/consumer_group.rs`):
//! members are client ids (one per connection), each owning a set of partitions.
//!
//! - A join rebalances cooperatively: partitions nobody owns go to idle members at once; the
//!   excess of over-assigned members moves to idle members at once when nothing is in flight on
//!   it, and otherwise becomes a pending revocation: the source keeps owning it (it may still
//!   commit it) but may no longer poll it, until it commits what it polled or the revocation
//!   times out. Then the partition moves.
//! - A leave, or a member removed because its connection closed or went stale, rebalances in
//!   full: pending revocations are dropped and the partitions are dealt out round-robin.
//! - The generation goes up on every rebalance and every completed revocation; clients cache
//!   it and re-sync when it changes.
//!
//! Members sit in slots numbered from 0, a new member taking the lowest free slot, and every
//! walk goes in slot order: that order decides who gets which partition, as on the server.

use std::collections::HashSet;
use std::time::Instant;

use super::state::Slots;

/// A partition being handed over from one member to another.
#[derive(Debug, Clone)]
struct Handover {
    partition: u32,
    /// Slot of the member that gets the partition.
    to_slot: usize,
    since: Instant,
}

#[derive(Debug, Clone)]
struct Member {
    client: u128,
    partitions: Vec<u32>,
    handovers: Vec<Handover>,
}

impl Member {
    fn is_handing_over(&self, partition: u32) -> bool {
        self.handovers.iter().any(|h| h.partition == partition)
    }

    fn may_poll(&self, partition: u32) -> bool {
        self.partitions.contains(&partition) && !self.is_handing_over(partition)
    }

    fn pollable(&self) -> Vec<u32> {
        self.partitions
            .iter()
            .copied()
            .filter(|&p| !self.is_handing_over(p))
            .collect()
    }
}

/// One consumer group of a topic.
#[derive(Debug)]
pub(crate) struct Group {
    /// Per-topic id, never reused; also the key of the group's offsets in each partition.
    pub(crate) id: u64,
    pub(crate) name: String,
    generation: u64,
    members: Slots<Member>,
}

impl Group {
    pub(crate) fn new(id: u64, name: String) -> Self {
        Group {
            id,
            name,
            generation: 0,
            members: Slots::default(),
        }
    }

    pub(crate) fn is_member(&self, client: u128) -> bool {
        self.slot_of(client).is_some()
    }

    fn slot_of(&self, client: u128) -> Option<usize> {
        self.members
            .iter()
            .find(|(_, m)| m.client == client)
            .map(|(slot, _)| slot)
    }

    /// Every partition some member owns.
    pub(crate) fn assigned(&self) -> HashSet<u32> {
        self.members
            .iter()
            .flat_map(|(_, m)| m.partitions.iter().copied())
            .collect()
    }

    /// `(generation, pollable partitions)` of `client`, `None` when it is not a member.
    pub(crate) fn assignment(&self, client: u128) -> Option<(u64, Vec<u32>)> {
        let slot = self.slot_of(client)?;
        let member = self.members.get(slot)?;
        Some((self.generation, member.pollable()))
    }

    /// Whether `client` may touch `partition`: poll it (`for_poll`: owned and not being handed
    /// over) or commit it (owned, handed over or not).
    pub(crate) fn owns(&self, client: u128, partition: u32, for_poll: bool) -> bool {
        let Some(member) = self.slot_of(client).and_then(|s| self.members.get(s)) else {
            return false;
        };
        if for_poll {
            member.may_poll(partition)
        } else {
            member.partitions.contains(&partition)
        }
    }

    /// Adds `client` and rebalances cooperatively. A client that is a member already stays as
    /// it is (joining twice is a no-op). `in_flight`: partitions polled but not yet committed.
    pub(crate) fn join(
        &mut self,
        client: u128,
        partitions: &[u32],
        in_flight: &HashSet<u32>,
        now: Instant,
    ) {
        if self.is_member(client) {
            return;
        }
        self.members.insert(Member {
            client,
            partitions: Vec::new(),
            handovers: Vec::new(),
        });
        self.rebalance_cooperatively(partitions, in_flight, now);
    }

    /// Removes `client` and rebalances in full; `false` when it was not a member.
    pub(crate) fn remove(&mut self, client: u128, partitions: &[u32]) -> bool {
        let Some(slot) = self.slot_of(client) else {
            return false;
        };
        self.members.remove(slot);
        self.rebalance(partitions);
        true
    }

    /// Deals `partitions` out round-robin over the members in slot order, dropping every
    /// pending handover.
    fn rebalance(&mut self, partitions: &[u32]) {
        self.generation += 1;
        let slots: Vec<usize> = self.members.iter().map(|(slot, _)| slot).collect();
        for &slot in &slots {
            if let Some(member) = self.members.get_mut(slot) {
                member.partitions.clear();
                member.handovers.clear();
            }
        }
        if slots.is_empty() {
            return;
        }
        for (i, &partition) in partitions.iter().enumerate() {
            if let Some(member) = self.members.get_mut(slots[i % slots.len()]) {
                member.partitions.push(partition);
            }
        }
    }

    fn idle_slots(&self, exclude: &HashSet<usize>) -> Vec<usize> {
        self.members
            .iter()
            .filter(|(slot, m)| m.partitions.is_empty() && !exclude.contains(slot))
            .map(|(slot, _)| slot)
            .collect()
    }

    fn rebalance_cooperatively(
        &mut self,
        partitions: &[u32],
        in_flight: &HashSet<u32>,
        now: Instant,
    ) {
        self.generation += 1;
        let member_count = self.members.len();
        if member_count == 0 || partitions.is_empty() {
            return;
        }

        // Partitions nobody owns go straight to the idle members.
        let assigned = self.assigned();
        let orphans: Vec<u32> = partitions
            .iter()
            .copied()
            .filter(|p| !assigned.contains(p))
            .collect();
        let idle = self.idle_slots(&HashSet::new());
        if !orphans.is_empty() && !idle.is_empty() {
            for (i, partition) in orphans.into_iter().enumerate() {
                if let Some(member) = self.members.get_mut(idle[i % idle.len()]) {
                    member.partitions.push(partition);
                }
            }
        }

        // Members above their fair share give the excess to idle members that are not already
        // waiting for a handover.
        let awaiting: HashSet<usize> = self
            .members
            .iter()
            .flat_map(|(_, m)| m.handovers.iter().map(|h| h.to_slot))
            .collect();
        let receivers = self.idle_slots(&awaiting);
        if receivers.is_empty() {
            return;
        }
        let fair = partitions.len() / member_count;
        let mut with_extra = partitions.len() % member_count;
        let mut excess: Vec<(u32, usize)> = Vec::new();
        for (slot, member) in self.members.iter() {
            let kept: Vec<u32> = member.pollable();
            let allowed = if with_extra > 0 { fair + 1 } else { fair };
            if kept.len() > fair {
                with_extra = with_extra.saturating_sub(1);
            }
            if kept.len() <= allowed {
                continue;
            }
            let surplus = kept.len() - allowed;
            excess.extend(kept.into_iter().rev().take(surplus).map(|p| (p, slot)));
        }
        for (i, (partition, from_slot)) in excess.into_iter().enumerate() {
            let to_slot = receivers[i % receivers.len()];
            if in_flight.contains(&partition) {
                if let Some(source) = self.members.get_mut(from_slot) {
                    source.handovers.push(Handover {
                        partition,
                        to_slot,
                        since: now,
                    });
                }
            } else {
                if let Some(source) = self.members.get_mut(from_slot) {
                    source.partitions.retain(|&p| p != partition);
                }
                if let Some(target) = self.members.get_mut(to_slot) {
                    target.partitions.push(partition);
                }
            }
        }
    }

    /// Every pending handover: `(source client, partition, since)`.
    pub(crate) fn handovers(&self) -> Vec<(u128, u32, Instant)> {
        self.members
            .iter()
            .flat_map(|(_, m)| m.handovers.iter().map(|h| (m.client, h.partition, h.since)))
            .collect()
    }

    /// Moves `partition` from `source` to the member its handover names (generation + 1). When
    /// that slot is empty now, rebalances in full instead. `false` when no such handover exists.
    pub(crate) fn complete_handover(&mut self, source: u128, partition: u32) -> bool {
        let Some(from_slot) = self.slot_of(source) else {
            return false;
        };
        let Some(member) = self.members.get_mut(from_slot) else {
            return false;
        };
        let Some(index) = member
            .handovers
            .iter()
            .position(|h| h.partition == partition)
        else {
            return false;
        };
        let handover = member.handovers.remove(index);
        member.partitions.retain(|&p| p != partition);
        if let Some(target) = self.members.get_mut(handover.to_slot) {
            target.partitions.push(partition);
            self.generation += 1;
        } else {
            let mut all: Vec<u32> = self.assigned().into_iter().collect();
            all.push(partition);
            all.sort_unstable();
            all.dedup();
            self.rebalance(&all);
        }
        true
    }
}
