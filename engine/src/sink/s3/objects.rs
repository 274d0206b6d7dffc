//! Placement and rotation of a partition's objects, without IO: where a message goes (which
//! lane, which object closes before it), when an object is full, which one closes to keep the
//! partition's memory within its part window, and when an idle one closes. The sink asks with
//! its writer's state, the message and `now`, and does what the answer says (closing an
//! object is an upload, so it is the sink's); nothing here awaits or reads a clock.
//!
//! The ledger's verdict comes first ([`Ledger::place`]: settled, inside a claimed range, or
//! free), then the rules of the key that splits (`max_split_lag`, the marks a marker carries,
//! `max_open_objects`), then the record-time interval. A claimed range is written whole into
//! its own object: no rotation rule closes it before its last offset.

use std::time::{Duration, Instant};

use super::ledger::{Claim, Ledger, Place};

/// The rotation and lane rules of one sink (from its `s3.*` settings).
#[derive(Debug, Clone)]
pub(super) struct Rules {
    /// `max_object_size`: output bytes at which an object is full.
    pub max_object_size: u64,
    /// `max_object_messages` (0: no limit).
    pub max_object_messages: u64,
    /// `idle_flush` (zero: never by idleness).
    pub idle_flush: Duration,
    /// The key splits a partition's messages by their values.
    pub splits: bool,
    /// `max_open_objects`: the lanes a partition keeps open under a key that splits.
    pub max_open_objects: usize,
    /// `max_split_lag`: offsets the partition may run past its oldest open object.
    pub max_split_lag: u64,
    /// The most sets of values a marker carries past its watermark.
    pub max_marks: usize,
    /// `part_size x (parts_in_flight + 1)`: what a partition's lanes may hold together.
    pub window: u64,
}

/// An open object, as the rules see it.
#[derive(Debug, Clone, Copy)]
pub(super) struct OpenState<'a> {
    /// Its first offset.
    pub first: u64,
    /// The `record_interval` bucket of its first message.
    pub bucket: Option<u64>,
    /// The claimed range it writes.
    pub claim: Option<&'a Claim>,
    /// Output it holds not uploaded yet.
    pub held: u64,
    /// When it last took a message.
    pub last_append: Instant,
}

/// One lane of a partition (one object open at a time).
pub(super) trait LaneState {
    /// The split values its objects hold.
    fn split(&self) -> &[String];
    /// Its open object.
    fn open(&self) -> Option<OpenState<'_>>;
}

/// What to do with a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Step {
    /// It is in a complete object already: nothing to write.
    Settled,
    /// Close this lane's object first, then ask again.
    Close(usize),
    /// Add a lane for the message's values, then ask again.
    NewLane,
    /// Write it into `lane`: into its open object, or one opened for it (of `claim` when it
    /// begins a claimed range; the lane takes the message's values when it has none open).
    Write {
        /// The lane.
        lane: usize,
        /// The claimed range the object writes.
        claim: Option<Claim>,
    },
}

/// Where a message of `values` at `offset` (in `bucket`) goes, given the partition's `lanes`
/// and `ledger`.
pub(super) fn step<L: LaneState>(
    rules: &Rules,
    lanes: &[L],
    ledger: &Ledger,
    values: &[String],
    offset: u64,
    bucket: Option<u64>,
) -> Step {
    let current = lanes
        .iter()
        .position(|l| l.open().is_some() && l.split() == values);
    let writing = current.map(|i| lanes[i].open().and_then(|o| o.claim));
    let claim = match ledger.place(values, offset, writing) {
        Place::Settled => return Step::Settled,
        // Only answered with an object open: the object before a claimed range (or past one
        // that never ended) closes first.
        Place::CloseOpen => return current.map_or(Step::NewLane, Step::Close),
        Place::Claim(c) => Some(c),
        Place::Free => None,
    };
    if claim.is_none()
        && rules.splits
        && let Some((lane, first)) = oldest(lanes)
    {
        let lagging = offset.saturating_sub(first) >= rules.max_split_lag;
        let marks = ledger.done.len() > rules.max_marks;
        if lagging || marks {
            return Step::Close(lane);
        }
    }
    let lane = match current {
        Some(i) => i,
        None => match lanes.iter().position(|l| l.open().is_none()) {
            Some(i) => i,
            None => {
                let max = if rules.splits {
                    rules.max_open_objects.max(1)
                } else {
                    1
                };
                // A claimed range must be written whole: it takes a lane past the limit.
                if lanes.len() < max || claim.is_some() {
                    return Step::NewLane;
                }
                return match oldest(lanes) {
                    Some((oldest, _)) => Step::Close(oldest),
                    // Every open object writes a claimed range: one more lane.
                    None => Step::NewLane,
                };
            }
        },
    };
    // A message of the next record-time interval starts a new object.
    let next_interval = claim.is_none()
        && bucket.is_some()
        && lanes[lane].open().is_some_and(|o| o.bucket != bucket);
    if next_interval {
        return Step::Close(lane);
    }
    Step::Write { lane, claim }
}

/// Whether an object is full after a message at `offset`: at the last offset of its claimed
/// range, else at `max_object_size` output bytes or `max_object_messages`.
pub(super) fn full(
    rules: &Rules,
    claim: Option<&Claim>,
    offset: u64,
    output_len: u64,
    count: u64,
) -> bool {
    match claim {
        Some(c) => offset >= c.last,
        None => {
            output_len >= rules.max_object_size
                || (rules.max_object_messages > 0 && count >= rules.max_object_messages)
        }
    }
}

/// Whether a message that would take an object (without a claim) past `max_object_size`
/// closes it before the message instead.
pub(super) fn over_size(rules: &Rules, claim: Option<&Claim>, output_len: u64) -> bool {
    claim.is_none() && output_len > rules.max_object_size
}

/// The lane of the oldest open object that may be closed early (the one the partition's
/// watermark waits for; an object of a claimed range closes only at its end), with its first
/// offset.
pub(super) fn oldest<L: LaneState>(lanes: &[L]) -> Option<(usize, u64)> {
    lanes
        .iter()
        .enumerate()
        .filter_map(|(i, l)| {
            let open = l.open()?;
            open.claim.is_none().then_some((i, open.first))
        })
        .min_by_key(|&(_, first)| first)
}

/// Under a key that splits, when the lanes together hold `held` bytes, more than the part
/// window: the lane holding the most, to be closed. A lane uploads only once it holds a part,
/// so without this many lanes could each hold most of a part, past what the shard's budget
/// allows, and wait for messages the engine does not poll while the budget is full.
pub(super) fn over_window<L: LaneState>(rules: &Rules, lanes: &[L], held: u64) -> Option<usize> {
    if !rules.splits || held <= rules.window {
        return None;
    }
    lanes
        .iter()
        .enumerate()
        .filter_map(|(i, l)| {
            let open = l.open()?;
            open.claim.is_none().then_some((i, open.held))
        })
        .max_by_key(|&(_, held)| held)
        .map(|(i, _)| i)
}

/// The lanes whose objects went `idle_flush` without a message by `now` (an object of a
/// claimed range waits for the range's end).
pub(super) fn idle<L: LaneState>(rules: &Rules, lanes: &[L], now: Instant) -> Vec<usize> {
    if rules.idle_flush.is_zero() {
        return Vec::new();
    }
    lanes
        .iter()
        .enumerate()
        .filter_map(|(i, l)| {
            let open = l.open()?;
            (open.claim.is_none()
                && now.saturating_duration_since(open.last_append) >= rules.idle_flush)
                .then_some(i)
        })
        .collect()
}

#[cfg(test)]
#[path = "objects_tests.rs"]
mod tests;
