//! Rate-limited log lines, sans-IO (the caller passes `now` and does the logging): the first
//! `burst` events of each interval are logged one by one, the rest only counted, and the count
//! is reported once the interval is over. A flood of per-message events (messages skipped under
//! `on_error = "skip"`) then costs one line a second, not one a message, while a few events are
//! still each named.

use std::time::{Duration, Instant};

/// The state of one rate-limited kind of log line.
#[derive(Debug, Clone)]
pub struct RateLimit {
    interval: Duration,
    burst: u32,
    window_end: Option<Instant>,
    logged: u32,
    suppressed: u64,
}

impl RateLimit {
    /// `burst` events logged per `interval`.
    pub fn new(interval: Duration, burst: u32) -> RateLimit {
        RateLimit {
            interval,
            burst,
            window_end: None,
            logged: 0,
            suppressed: 0,
        }
    }

    /// Whether to log this event on its own (`true`) or only count it (`false`). Call
    /// [`RateLimit::due`] first, so a count of an interval that is over comes out before the
    /// new interval's lines.
    pub fn admit(&mut self, now: Instant) -> bool {
        if self.window_end.is_none_or(|end| now >= end) {
            self.window_end = Some(now + self.interval);
            self.logged = 0;
        }
        if self.logged < self.burst {
            self.logged += 1;
            true
        } else {
            self.suppressed += 1;
            false
        }
    }

    /// The count of events only counted, once their interval is over (or at once with
    /// `flush`, at shutdown); `None` when there is nothing to report yet.
    pub fn due(&mut self, now: Instant, flush: bool) -> Option<u64> {
        let over = self.window_end.is_some_and(|end| now >= end);
        if self.suppressed > 0 && (over || flush) {
            Some(std::mem::take(&mut self.suppressed))
        } else {
            None
        }
    }

    /// The interval, for the log line that reports a count.
    pub fn interval(&self) -> Duration {
        self.interval
    }
}

/// How per-message lines of one kind are rate-limited (skipped messages, dead letters): a few
/// each interval, then a count.
pub const PER_MESSAGE_INTERVAL: Duration = Duration::from_secs(1);
/// How many per-message lines of one kind each interval logs one by one.
pub const PER_MESSAGE_BURST: u32 = 5;

/// A rate-limited per-message log line: `None` when this one is only counted, else the text
/// to append (empty, or how many went unnamed since the last line).
pub fn per_message(limit: &std::cell::RefCell<RateLimit>, now: Instant) -> Option<String> {
    let mut limit = limit.borrow_mut();
    let more = limit
        .due(now, false)
        .map(|n| format!(" ({n} more since the last line)"));
    limit.admit(now).then(|| more.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_logged_the_rest_counted_and_reported_once_the_interval_is_over() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut r = RateLimit::new(Duration::from_secs(1), 3);
        // 2,000 events in the first 100 ms: 3 lines, 1,997 counted.
        let logged = (0..2000u64).filter(|i| r.admit(ms(i / 20))).count();
        assert_eq!(logged, 3);
        assert_eq!(
            r.due(ms(500), false),
            None,
            "not before the interval is over"
        );
        assert_eq!(r.due(ms(1000), false), Some(1997));
        assert_eq!(r.due(ms(1001), false), None, "reported once");
        // A new interval: its own burst.
        assert!(r.admit(ms(1200)) && r.admit(ms(1201)) && r.admit(ms(1202)));
        assert!(!r.admit(ms(1203)));
        // Shutdown reports what is left at once.
        assert_eq!(r.due(ms(1300), true), Some(1));
        assert_eq!(r.due(ms(5000), true), None);
    }

    #[test]
    fn sparse_events_are_all_logged() {
        let t0 = Instant::now();
        let mut r = RateLimit::new(Duration::from_secs(1), 1);
        for s in 0..5u64 {
            assert!(r.admit(t0 + Duration::from_secs(s)));
            assert_eq!(r.due(t0 + Duration::from_secs(s), false), None);
        }
    }
}
