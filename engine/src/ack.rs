//! Delivery tracking per partition: which polled offsets the sink has confirmed, and the
//! contiguous low watermark below which everything is confirmed, the only offset ever stored
//! in Iggy.
//!
//! Sinks confirm out of order (MQTT acknowledgements race, S3 objects complete per partition),
//! so the tracker keeps one small entry per polled, not-yet-passed offset in offset order. An
//! offset the server skipped (deleted by retention) has no entry and does not hold the
//! watermark back.

use std::collections::VecDeque;

#[derive(Debug, Clone, Copy)]
struct Entry {
    offset: u64,
    polled_us: u64,
    size: u32,
    done: bool,
}

/// What one confirmation did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Confirmed {
    /// Messages newly confirmed.
    pub messages: u64,
    /// Their payload bytes.
    pub bytes: u64,
}

/// What the tracker keeps per message polled and not confirmed yet: the engine's own memory
/// per message in flight, counted in the shard's budget for a self-paced sink.
pub const ENTRY_BYTES: u64 = std::mem::size_of::<Entry>() as u64;

/// The tracker of one partition.
#[derive(Debug)]
pub struct Tracker {
    entries: VecDeque<Entry>,
    /// Every offset ≤ this is confirmed (or does not exist); `None` before the first.
    watermark: Option<u64>,
    next_poll: u64,
    unconfirmed: u64,
    unconfirmed_bytes: u64,
}

impl Tracker {
    /// A partition whose next offset to poll is `next` and below which everything is done
    /// (`next - 1` is the stored offset, or nothing is stored when `next` is 0 and `stored`
    /// is `None`).
    pub fn new(stored: Option<u64>, next: u64) -> Tracker {
        Tracker {
            entries: VecDeque::new(),
            watermark: stored.or_else(|| next.checked_sub(1)),
            next_poll: next,
            unconfirmed: 0,
            unconfirmed_bytes: 0,
        }
    }

    /// The next offset to poll.
    pub fn next_poll(&self) -> u64 {
        self.next_poll
    }

    /// The highest offset below which everything is confirmed: what may be stored.
    pub fn watermark(&self) -> Option<u64> {
        self.watermark
    }

    /// Polled messages not yet confirmed.
    pub fn unconfirmed(&self) -> u64 {
        self.unconfirmed
    }

    /// Their payload bytes.
    pub fn unconfirmed_bytes(&self) -> u64 {
        self.unconfirmed_bytes
    }

    /// Whether nothing polled is waiting for the sink.
    pub fn is_idle(&self) -> bool {
        self.unconfirmed == 0
    }

    /// Records a polled message. Offsets must come in ascending order from
    /// [`next_poll`](Self::next_poll) on; an older one (a duplicate) is refused with `false`
    /// and must not be delivered.
    pub fn push(&mut self, offset: u64, size: usize, now_us: u64) -> bool {
        if offset < self.next_poll {
            return false;
        }
        self.entries.push_back(Entry {
            offset,
            polled_us: now_us,
            size: u32::try_from(size).unwrap_or(u32::MAX),
            done: false,
        });
        self.next_poll = offset + 1;
        self.unconfirmed += 1;
        self.unconfirmed_bytes += size as u64;
        true
    }

    fn index_of(&self, offset: u64) -> Result<usize, usize> {
        // Fast path: offsets are usually contiguous.
        if let Some(front) = self.entries.front()
            && offset >= front.offset
        {
            let guess = (offset - front.offset) as usize;
            if self.entries.get(guess).is_some_and(|e| e.offset == offset) {
                return Ok(guess);
            }
        }
        self.entries.binary_search_by_key(&offset, |e| e.offset)
    }

    /// Marks `first..=last` confirmed; calls `latency(µs)` for each newly confirmed message.
    /// Offsets not polled (or already passed) are ignored.
    pub fn confirm(
        &mut self,
        first: u64,
        last: u64,
        now_us: u64,
        mut latency: impl FnMut(u64),
    ) -> Confirmed {
        let mut out = Confirmed::default();
        if last < first {
            return out;
        }
        let mut i = match self.index_of(first) {
            Ok(i) | Err(i) => i,
        };
        while let Some(e) = self.entries.get_mut(i) {
            if e.offset > last {
                break;
            }
            if !e.done {
                e.done = true;
                out.messages += 1;
                out.bytes += u64::from(e.size);
                latency(now_us.saturating_sub(e.polled_us));
            }
            i += 1;
        }
        self.unconfirmed -= out.messages;
        self.unconfirmed_bytes -= out.bytes;
        self.advance();
        out
    }

    fn advance(&mut self) {
        while let Some(front) = self.entries.front() {
            if !front.done {
                return;
            }
            self.watermark = Some(front.offset);
            self.entries.pop_front();
        }
        // Nothing outstanding: everything polled so far is done (a gap the server skipped
        // included).
        if let Some(last_polled) = self.next_poll.checked_sub(1)
            && self.watermark.is_none_or(|w| w < last_polled)
        {
            self.watermark = Some(last_polled);
        }
    }

    /// Forgets everything polled from `from` on and polls it again: the sink dropped those
    /// messages and wants them redelivered. Returns how many unconfirmed messages were
    /// dropped.
    pub fn redeliver(&mut self, from: u64) -> u64 {
        let from = match self.watermark {
            Some(w) if from <= w => w + 1,
            _ => from,
        };
        let keep = match self.index_of(from) {
            Ok(i) | Err(i) => i,
        };
        let mut dropped = 0;
        for e in self.entries.drain(keep..) {
            if !e.done {
                dropped += 1;
                self.unconfirmed -= 1;
                self.unconfirmed_bytes -= u64::from(e.size);
            }
        }
        if from < self.next_poll {
            self.next_poll = from;
        }
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn confirm(t: &mut Tracker, first: u64, last: u64) -> Confirmed {
        t.confirm(first, last, 0, |_| {})
    }

    #[test]
    fn watermark_only_moves_over_contiguous_confirmations() {
        let mut t = Tracker::new(None, 0);
        for o in 0..10 {
            assert!(t.push(o, 10, 0));
        }
        assert_eq!(t.unconfirmed(), 10);
        assert_eq!(confirm(&mut t, 5, 9).messages, 5);
        assert_eq!(t.watermark(), None, "a gap at 0..5 must hold the watermark");
        confirm(&mut t, 1, 3);
        assert_eq!(t.watermark(), None);
        confirm(&mut t, 0, 0);
        assert_eq!(t.watermark(), Some(3));
        confirm(&mut t, 4, 4);
        assert_eq!(t.watermark(), Some(9));
        assert_eq!((t.unconfirmed(), t.unconfirmed_bytes()), (0, 0));
    }

    #[test]
    fn duplicates_and_unknown_offsets_are_ignored() {
        let mut t = Tracker::new(Some(99), 100);
        assert!(!t.push(50, 1, 0));
        assert!(t.push(100, 1, 0));
        assert_eq!(confirm(&mut t, 100, 100).messages, 1);
        assert_eq!(confirm(&mut t, 100, 100).messages, 0);
        assert_eq!(confirm(&mut t, 500, 600).messages, 0);
        assert_eq!(t.watermark(), Some(100));
    }

    #[test]
    fn gaps_left_by_retention_do_not_block() {
        let mut t = Tracker::new(None, 0);
        t.push(1000, 1, 0);
        t.push(1001, 1, 0);
        confirm(&mut t, 1001, 1001);
        assert_eq!(t.watermark(), None);
        confirm(&mut t, 1000, 1000);
        assert_eq!(t.watermark(), Some(1001));
    }

    #[test]
    fn redelivery_rewinds_and_drops() {
        let mut t = Tracker::new(None, 0);
        for o in 0..10 {
            t.push(o, 2, 0);
        }
        confirm(&mut t, 0, 2);
        confirm(&mut t, 7, 7);
        assert_eq!(t.redeliver(5), 4);
        assert_eq!(t.next_poll(), 5);
        assert_eq!(t.unconfirmed(), 2);
        assert_eq!(t.unconfirmed_bytes(), 4);
        // Never below the watermark.
        assert_eq!(t.redeliver(1), 2);
        assert_eq!(t.next_poll(), 3);
        assert_eq!(t.watermark(), Some(2));
    }

    #[test]
    fn latency_is_reported_once_per_message() {
        let mut t = Tracker::new(None, 0);
        t.push(0, 1, 100);
        t.push(1, 1, 200);
        let mut seen = Vec::new();
        t.confirm(0, 1, 1_000, |l| seen.push(l));
        t.confirm(0, 1, 2_000, |l| seen.push(l));
        assert_eq!(seen, vec![900, 800]);
    }
}
