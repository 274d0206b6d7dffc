//! The packet-id window of one connection: which ids are free, which messages hold them.
//! Ids run from 1 to the configured capacity and are handed out oldest-freed first, so an id
//! is reused only after its flow completed, and as late as possible (easier to read in a
//! capture). Storage is allocated once, at construction.

use std::collections::VecDeque;

use crate::packet::Publish;
use crate::types::PacketId;

/// Where a QoS 1/2 message is in its flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// PUBLISH sent (or to be re-sent); waiting for PUBACK (QoS 1) or PUBREC (QoS 2).
    AwaitAck,
    /// PUBREC received and PUBREL sent (or to be re-sent); waiting for PUBCOMP.
    AwaitComp,
}

#[derive(Debug)]
pub(crate) struct Entry<T> {
    pub(crate) publish: Publish,
    pub(crate) token: T,
    pub(crate) stage: Stage,
    /// Sent on the current network connection (counts against Receive Maximum).
    pub(crate) on_wire: bool,
    /// Order of first transmission, to re-send in the original order.
    pub(crate) seq: u64,
}

#[derive(Debug)]
pub(crate) struct Window<T> {
    slots: Vec<Option<Entry<T>>>,
    free: VecDeque<u16>,
    next_seq: u64,
}

impl<T> Window<T> {
    pub(crate) fn new(capacity: u16) -> Self {
        let capacity = capacity.max(1);
        let mut slots = Vec::with_capacity(capacity as usize);
        slots.resize_with(capacity as usize, || None);
        Window {
            slots,
            free: (1..=capacity).collect(),
            next_seq: 0,
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Messages holding an id.
    pub(crate) fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    pub(crate) fn has_free(&self) -> bool {
        !self.free.is_empty()
    }

    /// The id the next [`Window::insert`] will take.
    pub(crate) fn next_id(&self) -> Option<PacketId> {
        PacketId::new(*self.free.front()?)
    }

    /// Takes the next free id (the one [`Window::next_id`] named) and stores the message
    /// under it, already on the wire.
    #[allow(clippy::result_large_err)]
    pub(crate) fn insert(&mut self, publish: Publish, token: T) -> Result<PacketId, (Publish, T)> {
        let Some(id) = self.free.front().copied().and_then(PacketId::new) else {
            return Err((publish, token));
        };
        self.free.pop_front();
        let seq = self.next_seq;
        self.next_seq += 1;
        self.slots[id.get() as usize - 1] = Some(Entry {
            publish,
            token,
            stage: Stage::AwaitAck,
            on_wire: true,
            seq,
        });
        Ok(id)
    }

    pub(crate) fn get_mut(&mut self, id: PacketId) -> Option<&mut Entry<T>> {
        self.slots.get_mut(id.get() as usize - 1)?.as_mut()
    }

    pub(crate) fn get(&self, id: PacketId) -> Option<&Entry<T>> {
        self.slots.get(id.get() as usize - 1)?.as_ref()
    }

    /// Ends a flow and frees its id.
    pub(crate) fn remove(&mut self, id: PacketId) -> Option<Entry<T>> {
        let e = self.slots.get_mut(id.get() as usize - 1)?.take()?;
        self.free.push_back(id.get());
        Some(e)
    }

    /// Ids of every message held, in the order they were first sent.
    pub(crate) fn in_send_order(&self) -> Vec<PacketId> {
        let mut v: Vec<(u64, u16)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|e| (e.seq, i as u16 + 1)))
            .collect();
        v.sort_unstable();
        v.into_iter()
            .filter_map(|(_, id)| PacketId::new(id))
            .collect()
    }

    pub(crate) fn entries_mut(&mut self) -> impl Iterator<Item = &mut Entry<T>> {
        self.slots.iter_mut().flatten()
    }
}
