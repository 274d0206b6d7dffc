//! The `generate` source: synthetic messages at a given rate and size, for demos and benches
//! without an Iggy server. Payloads are slices of one shared buffer (no copy, no allocation per
//! message); offsets start at 0 in every partition and nothing is stored.

use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::config::GenerateConfig;
use crate::message::Message;

/// The generator of one sink on one shard.
#[derive(Debug)]
pub struct Generator {
    pool: Bytes,
    size: usize,
    /// Messages per second for this shard's share of partitions (0: unlimited).
    rate: f64,
    started: Instant,
    produced: u64,
    /// Per partition (by position in `partitions`): how many messages it will produce in all.
    limits: Vec<u64>,
    partitions: Vec<u32>,
}

impl Generator {
    /// A generator for `partitions` (a subset of the sink's `0..cfg.partitions`).
    pub fn new(cfg: &GenerateConfig, partitions: &[u32]) -> Generator {
        let size = cfg.size.0 as usize;
        let pattern = b"spillway generated payload 0123456789 abcdefghijklmnopqrstuvwxyz ";
        let mut pool = Vec::with_capacity(size + 4096);
        while pool.len() < size + 4096 {
            pool.extend_from_slice(pattern);
        }
        let total = u64::from(cfg.partitions.max(1));
        let limits = partitions
            .iter()
            .map(|&p| {
                if cfg.messages == 0 {
                    u64::MAX
                } else {
                    cfg.messages / total + u64::from(u64::from(p) < cfg.messages % total)
                }
            })
            .collect();
        let share = partitions.len() as f64 / total as f64;
        Generator {
            pool: Bytes::from(pool),
            size,
            rate: cfg.rate * share,
            started: Instant::now(),
            produced: 0,
            limits,
            partitions: partitions.to_vec(),
        }
    }

    /// The partitions this generator produces.
    pub fn partitions(&self) -> &[u32] {
        &self.partitions
    }

    /// The last offset partition `partition` will produce (exclusive end), `u64::MAX` when
    /// unlimited.
    pub fn end(&self, partition: u32) -> u64 {
        self.partitions
            .iter()
            .position(|&p| p == partition)
            .map_or(0, |i| self.limits[i])
    }

    /// Up to `count` messages of `partition` from `offset`; when the rate allows none yet, the
    /// time to wait.
    pub fn poll(
        &mut self,
        partition: u32,
        offset: u64,
        count: u32,
        now: Instant,
        out: &mut Vec<Message>,
    ) -> Option<Duration> {
        let end = self.end(partition);
        let mut n = u64::from(count).min(end.saturating_sub(offset));
        if self.rate > 0.0 {
            let allowed = (now.duration_since(self.started).as_secs_f64() * self.rate) as u64;
            let room = allowed.saturating_sub(self.produced);
            if room == 0 {
                return Some(Duration::from_secs_f64((1.0 / self.rate).min(0.05)));
            }
            n = n.min(room);
        }
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        out.reserve(usize::try_from(n).unwrap_or(0));
        for o in offset..offset + n {
            let start = (o as usize * 7) % 4096;
            out.push(Message {
                offset: o,
                id: u128::from(o) | u128::from(partition) << 64,
                timestamp: ts,
                origin_timestamp: ts,
                payload: self.pool.slice(start..start + self.size),
                headers: Bytes::new(),
            });
        }
        self.produced += n;
        None
    }
}
