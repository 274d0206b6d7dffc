//! When to try a request again: exponential backoff with full jitter (the delay before retry
//! `n` is uniform in `[0, min(max_delay, base_delay × 2^(n-1))]`), a limit on attempts, and
//! only for errors that may pass (see [`crate::Error::is_retryable`]) on requests that may be
//! repeated. The random source is injectable (a seed), so tests are deterministic.

use std::time::Duration;

/// The retry settings of a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (1 = never retry).
    pub max_attempts: u32,
    /// The ceiling of the first retry's delay.
    pub base_delay: Duration,
    /// The ceiling of any delay.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 8,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(20),
        }
    }
}

impl RetryPolicy {
    /// The ceiling of the delay before retry `retry` (1 for the first retry).
    pub fn ceiling(&self, retry: u32) -> Duration {
        let shift = retry.saturating_sub(1).min(30);
        self.base_delay
            .saturating_mul(1u32 << shift)
            .min(self.max_delay)
    }

    /// Whether attempt number `attempt` (1-based) may be followed by another.
    pub fn may_retry(&self, attempt: u32) -> bool {
        attempt < self.max_attempts
    }
}

/// Draws the jittered delays of one client.
#[derive(Debug, Clone)]
pub struct Backoff {
    rng: fastrand::Rng,
}

impl Backoff {
    pub fn new(seed: u64) -> Self {
        Backoff {
            rng: fastrand::Rng::with_seed(seed),
        }
    }

    /// The delay before retry `retry` (1 for the first): uniform in `[0, ceiling]`.
    pub fn delay(&mut self, policy: &RetryPolicy, retry: u32) -> Duration {
        let ceiling = policy.ceiling(retry);
        let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(self.rng.u64(0..=nanos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceilings_double_up_to_the_maximum() {
        let p = RetryPolicy {
            max_attempts: 5,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(500),
        };
        let c: Vec<u128> = (1..=5).map(|r| p.ceiling(r).as_millis()).collect();
        assert_eq!(c, vec![100, 200, 400, 500, 500]);
        assert!(p.may_retry(4));
        assert!(!p.may_retry(5));
        // Huge retry numbers do not overflow.
        assert_eq!(p.ceiling(u32::MAX), Duration::from_millis(500));
    }

    #[test]
    fn full_jitter_stays_under_the_ceiling_and_spreads() {
        let p = RetryPolicy::default();
        let mut b = Backoff::new(7);
        let delays: Vec<Duration> = (0..200).map(|_| b.delay(&p, 3)).collect();
        assert!(delays.iter().all(|d| *d <= p.ceiling(3)));
        let min = delays.iter().min().copied().unwrap_or_default();
        let max = delays.iter().max().copied().unwrap_or_default();
        assert!(
            min < p.ceiling(3) / 4 && max > p.ceiling(3) * 3 / 4,
            "{min:?} {max:?}"
        );
        // Deterministic for a seed.
        let mut a = Backoff::new(7);
        assert_eq!(a.delay(&p, 3), delays[0]);
    }
}
