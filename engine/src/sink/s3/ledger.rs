//! Which offsets of a partition are settled, and which ranges are claimed in its marker.
//! Without IO: the writer and the completion tasks keep one [`Ledger`] per partition.

use std::collections::{BTreeSet, HashMap};

use crate::acks::Acks;
use crate::ids::{Offset, Slot};

/// An object whose range the partition's marker records before the object is completed: the
/// key it is written under, the split values of its messages and its first and last offsets.
/// Whoever owns the partition later writes exactly this range under exactly this key (see
/// docs/architecture.md, "Ownership and fencing").
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Claim {
    pub first: u64,
    pub last: u64,
    pub values: Vec<String>,
    pub key: String,
}

impl Claim {
    /// Whether a message of `values` at `offset` belongs to this claim's object.
    pub fn holds(&self, values: &[String], offset: u64) -> bool {
        self.values == values && self.first <= offset && offset <= self.last
    }
}

/// Where a message goes, by the ledger alone (see [`Ledger::place`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Place {
    /// It is in a complete object already: settled without being written.
    Settled,
    /// The open object of its values must close first (it ends before a claimed range, or it
    /// writes a claimed range the message is past); then place it again.
    CloseOpen,
    /// Into the object of this claim: the open one of its values, or a new one it begins.
    Claim(Claim),
    /// Wherever the rotation rules put it.
    Free,
}

/// Which offsets of a partition are settled: in a complete object, in a stored dead letter,
/// skipped by `on_error`, or already in a complete object of a run before. The writer and the
/// completion tasks keep it together; the partition's marker and its confirmations to the
/// engine never pass [`Ledger::watermark`], below which every offset is settled.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    /// The first offsets of the objects (open or completing) and dead letters not settled
    /// yet, and of messages rejected under `on_error = "fail"` (never settled).
    pub unsettled: BTreeSet<u64>,
    /// The last offset the writer took (into an object or a letter, or settled at once).
    pub handed: Option<u64>,
    /// Per set of split values, the last offset of its newest complete object: a message of
    /// those values at or below it is settled already (delivered again after a failure, or
    /// after a crash past the marker, which carries these).
    pub done: HashMap<Vec<String>, u64>,
    /// The watermark of the marker this member took the partition over with: everything at
    /// or below it is in complete objects, whoever wrote them.
    pub floor: Option<u64>,
    /// The objects recorded in the marker and not complete yet (by this member, or by an
    /// owner before it): their ranges are fixed.
    pub claims: Vec<Claim>,
    /// A claim was added that no marker write has carried to the store yet (a write that
    /// failed may or may not have): the next claim step writes the marker even when its
    /// claim is known already.
    pub unrecorded: bool,
    /// The watermark last confirmed to the engine.
    pub confirmed: Option<u64>,
    /// Counts the resets after failures: an object counted in an earlier one is not in
    /// `unsettled` any more.
    pub generation: u64,
}

impl Ledger {
    /// The offset at and below which every offset the writer took is settled.
    pub fn watermark(&self) -> Option<u64> {
        let own = match self.unsettled.first() {
            Some(&first) => first.checked_sub(1),
            None => self.handed,
        };
        own.max(self.floor)
    }

    /// Whether `offset` is settled by the marker the partition was taken over with.
    pub fn below_floor(&self, offset: u64) -> bool {
        self.floor.is_some_and(|f| offset <= f)
    }

    /// Forgets the marks and claims at or below the watermark (no delivery goes back there,
    /// and a claim the watermark passed is complete).
    pub fn prune(&mut self) {
        if let Some(w) = self.watermark() {
            self.done.retain(|_, last| *last > w);
            self.claims.retain(|c| c.last > w);
        }
    }

    /// The claim a message of `values` at `offset` belongs to.
    pub fn claim_of(&self, values: &[String], offset: u64) -> Option<&Claim> {
        self.claims.iter().find(|c| c.holds(values, offset))
    }

    /// Where a message of `values` at `offset` goes. `open`: whether an object of those
    /// values is open, and the claim it writes if it writes one.
    pub fn place(&self, values: &[String], offset: u64, open: Option<Option<&Claim>>) -> Place {
        let settled =
            self.below_floor(offset) || self.done.get(values).is_some_and(|&last| offset <= last);
        if settled {
            return Place::Settled;
        }
        match (self.claim_of(values, offset), open) {
            (Some(c), Some(Some(writing))) if writing == c => Place::Claim(c.clone()),
            // The object before a claimed range ends before it.
            (Some(_), Some(_)) => Place::CloseOpen,
            // Delivery began inside a claimed range (Iggy's stored offset passed the marker):
            // only a complete object of the range lets an offset be stored.
            (Some(c), None) if offset != c.first => Place::Settled,
            (Some(c), None) => Place::Claim(c.clone()),
            // Past a claimed range whose last message never came (removed by retention): its
            // object ends with what it has.
            (None, Some(Some(_))) => Place::CloseOpen,
            (None, _) => Place::Free,
        }
    }

    /// Adds a claim; `true` when the marker must be written for it to be in the store (it is
    /// new, or a claim added before may not have reached the store). `false` when the store
    /// has it (an object written again after a failure, or one an earlier owner claimed).
    pub fn add_claim(&mut self, claim: Claim) -> bool {
        if !self.claims.contains(&claim) {
            self.claims.push(claim);
            self.claims.sort();
            self.unrecorded = true;
        }
        self.unrecorded
    }

    /// A marker write with the ledger as it is now reached the store.
    pub fn recorded(&mut self) {
        self.unrecorded = false;
    }

    /// The object of `claim` is complete: its offsets are settled (in `generation`), its
    /// values' mark moves to its last offset, and it is no longer pending.
    pub fn completed(&mut self, claim: &Claim, generation: u64) {
        if self.generation == generation {
            self.unsettled.remove(&claim.first);
        }
        let last = self.done.entry(claim.values.clone()).or_insert(claim.last);
        *last = (*last).max(claim.last);
        self.claims.retain(|c| c != claim);
        self.prune();
    }

    /// Confirms to the engine what the watermark passed since the last call.
    pub fn advance(&mut self, acks: &Acks, slot: usize) {
        let Some(w) = self.watermark() else {
            return;
        };
        if self.confirmed.is_some_and(|c| c >= w) {
            return;
        }
        let from = self.confirmed.map_or(0, |c| c + 1);
        acks.confirm(Slot(slot), Offset(from), Offset(w));
        self.confirmed = Some(w);
    }

    /// After a failure: everything past the watermark is delivered again, so nothing past it
    /// is counted any more (the claims stay: their ranges are fixed). The offset delivery
    /// starts again from.
    pub fn reset(&mut self) -> u64 {
        let w = self.watermark();
        self.unsettled.clear();
        self.handed = w;
        self.generation += 1;
        w.map_or(0, |w| w + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<String> {
        vec![s.to_owned()]
    }

    fn claim(values: &str, first: u64, last: u64) -> Claim {
        Claim {
            first,
            last,
            values: v(values),
            key: format!("{values}-{first}"),
        }
    }

    /// Where a message goes: below the marker's watermark or its values' newest complete
    /// object it is settled; in a claimed range it goes into that claim's object, which an
    /// object of the same values open before the range must leave first; a delivery that
    /// begins inside a claimed range settles it (only a complete object of the range lets
    /// an offset be stored); past a claim whose last message never came its object closes.
    #[test]
    fn placement_follows_the_watermark_the_marks_and_the_claims() {
        let c = claim("a", 10, 14);
        let l = Ledger {
            floor: Some(4),
            done: [(v("b"), 8)].into_iter().collect(),
            claims: vec![c.clone()],
            ..Ledger::default()
        };
        assert_eq!(l.place(&v("a"), 4, None), Place::Settled, "below the floor");
        assert_eq!(
            l.place(&v("b"), 8, None),
            Place::Settled,
            "b's complete object"
        );
        assert_eq!(l.place(&v("b"), 9, None), Place::Free);
        assert_eq!(
            l.place(&v("a"), 9, Some(None)),
            Place::Free,
            "before the claim"
        );
        assert_eq!(
            l.place(&v("a"), 10, Some(None)),
            Place::CloseOpen,
            "an open free object of a ends before a's claim"
        );
        assert_eq!(l.place(&v("a"), 10, None), Place::Claim(c.clone()));
        assert_eq!(
            l.place(&v("a"), 12, Some(Some(&c))),
            Place::Claim(c.clone())
        );
        assert_eq!(
            l.place(&v("a"), 12, None),
            Place::Settled,
            "begun inside the claim: its object is complete"
        );
        assert_eq!(
            l.place(&v("b"), 12, None),
            Place::Free,
            "b is not in a's claim"
        );
        assert_eq!(
            l.place(&v("a"), 15, Some(Some(&c))),
            Place::CloseOpen,
            "past the claim's end: its object closes"
        );
        let other = claim("a", 20, 22);
        assert_eq!(
            l.place(&v("a"), 12, Some(Some(&other))),
            Place::CloseOpen,
            "an object of another claim is not this one's"
        );
    }

    /// A claim must reach the store before its object completes: a new claim asks for a
    /// marker write, a known one does not, unless a write that should have carried it failed.
    /// The watermark passing a claim forgets it.
    #[test]
    fn claims_are_written_until_recorded_and_forgotten_once_complete() {
        let mut l = Ledger::default();
        let c = claim("", 0, 3);
        assert!(l.add_claim(c.clone()), "new");
        assert!(
            l.add_claim(c.clone()),
            "not recorded yet (the write failed)"
        );
        l.recorded();
        assert!(!l.add_claim(c.clone()), "recorded");
        l.unsettled.insert(0);
        l.handed = Some(3);
        assert_eq!(l.watermark(), None);
        l.completed(&c, 0);
        assert_eq!(l.watermark(), Some(3));
        assert!(l.claims.is_empty());
        assert_eq!(l.done.len(), 0, "the mark is at the watermark: forgotten");
        // A claim below a floor taken over is complete: pruned.
        let mut l = Ledger {
            floor: Some(9),
            claims: vec![claim("x", 5, 9), claim("x", 10, 12)],
            ..Ledger::default()
        };
        l.prune();
        assert_eq!(l.claims, vec![claim("x", 10, 12)]);
        assert_eq!(
            l.reset(),
            10,
            "a reset starts past the floor; the claims stay"
        );
        assert_eq!(l.claims.len(), 1);
    }
}
