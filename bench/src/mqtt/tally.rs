//! A count of messages that arrived at the receiving end (the counting subscriber, the
//! discard broker), and the moment it reached a target: the end of a run's clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long deliveries may pause after the sender has ended before a wait gives up.
pub const GONE_IDLE: Duration = Duration::from_secs(2);

#[derive(Debug)]
pub struct Tally {
    count: AtomicU64,
    /// The count that ends the run (`u64::MAX`: none armed).
    target: AtomicU64,
    reached: Mutex<Option<Instant>>,
    changed: Condvar,
}

impl Default for Tally {
    fn default() -> Self {
        Tally {
            count: AtomicU64::new(0),
            target: AtomicU64::new(u64::MAX),
            reached: Mutex::new(None),
            changed: Condvar::new(),
        }
    }
}

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// The target was reached at this moment.
    Reached(Instant),
    /// No message arrived for the idle time, or the deadline passed.
    Stalled,
}

impl Tally {
    /// Counts `n` more messages (called once per read batch by the receiving thread).
    #[inline]
    pub fn add(&self, n: u64) {
        if n == 0 {
            return;
        }
        let total = self.count.fetch_add(n, Ordering::AcqRel) + n;
        if total >= self.target.load(Ordering::Acquire) {
            let now = Instant::now();
            let mut r = self.reached.lock().unwrap_or_else(PoisonError::into_inner);
            if r.is_none() {
                *r = Some(now);
                self.changed.notify_all();
            }
        }
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Acquire)
    }

    /// Sets the run's end at `more` messages after the current count; returns that count.
    pub fn arm(&self, more: u64) -> u64 {
        let mut r = self.reached.lock().unwrap_or_else(PoisonError::into_inner);
        *r = None;
        let base = self.count();
        self.target.store(base + more, Ordering::Release);
        if more == 0 {
            *r = Some(Instant::now());
        }
        base
    }

    /// Waits until the armed target is reached, giving up after `idle` without progress or
    /// at `deadline`; once `gone()` says the sender has ended, after [`GONE_IDLE`] without
    /// progress (what it sent may still be on its way through the broker).
    pub fn wait(&self, idle: Duration, deadline: Instant, gone: &dyn Fn() -> bool) -> Waited {
        let mut last = self.count();
        let mut last_change = Instant::now();
        let mut r = self.reached.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(at) = *r {
                return Waited::Reached(at);
            }
            let now = Instant::now();
            let n = self.count();
            if n != last {
                last = n;
                last_change = now;
            }
            let quiet = now.duration_since(last_change);
            if now >= deadline || quiet >= idle || (quiet >= GONE_IDLE && gone()) {
                return Waited::Stalled;
            }
            let step = Duration::from_millis(100).min(deadline - now);
            r = self
                .changed
                .wait_timeout(r, step)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arms_counts_and_stalls() {
        let t = Tally::default();
        t.add(5);
        assert_eq!(t.arm(10), 5);
        t.add(9);
        let soon = Instant::now() + Duration::from_millis(300);
        assert_eq!(
            t.wait(Duration::from_millis(100), soon, &|| false),
            Waited::Stalled
        );
        // A sender that has ended: the wait gives up after GONE_IDLE, before `idle`.
        let started = Instant::now();
        let far = started + Duration::from_secs(60);
        assert_eq!(
            t.wait(Duration::from_secs(30), far, &|| true),
            Waited::Stalled
        );
        assert!(started.elapsed() < Duration::from_secs(10));
        t.add(1);
        assert!(matches!(
            t.wait(Duration::from_millis(100), soon, &|| false),
            Waited::Reached(_)
        ));
        assert_eq!(t.count(), 15);
    }
}
