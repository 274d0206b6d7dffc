//! Idle keep-alive connections per target, newest reused first.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::client::Target;
use super::conn::Conn;

pub(crate) struct Pool {
    idle: HashMap<Target, Vec<(Instant, Conn)>>,
    max_per_target: usize,
    max_age: Duration,
}

impl Pool {
    pub(crate) fn new(max_per_target: usize, max_age: Duration) -> Self {
        Pool {
            idle: HashMap::new(),
            max_per_target,
            max_age,
        }
    }

    /// The most recently parked connection to `target` that has not been idle too long; older
    /// ones are closed on the way.
    pub(crate) fn take(&mut self, target: &Target, now: Instant) -> Option<Conn> {
        let list = self.idle.get_mut(target)?;
        let max_age = self.max_age;
        list.retain(|(since, _)| now.saturating_duration_since(*since) <= max_age);
        list.pop().map(|(_, conn)| conn)
    }

    /// Parks `conn` for reuse; the oldest idle connection is closed when the target has too
    /// many.
    pub(crate) fn put(&mut self, target: &Target, conn: Conn, now: Instant) {
        if self.max_per_target == 0 {
            return;
        }
        let list = match self.idle.get_mut(target) {
            Some(list) => list,
            None => self.idle.entry(target.clone()).or_default(),
        };
        if list.len() >= self.max_per_target {
            list.remove(0);
        }
        list.push((now, conn));
    }

    pub(crate) fn idle_count(&self, target: &Target) -> usize {
        self.idle.get(target).map_or(0, Vec::len)
    }

    pub(crate) fn clear(&mut self) {
        self.idle.clear();
    }
}
