//! CPU time per thread of this process, to tell the engine's threads from the Iggy stand-in's
//! (which runs in this process too) and from the bench's own.
//!
//! Each thread's on-CPU time (user + system, nanoseconds) is the first field of
//! `/proc/self/task/<tid>/schedstat`; its name is `/proc/self/task/<tid>/comm`. A thread that
//! ends takes its reading with it, so [`ThreadMeter`] samples every thread often during a run
//! (see [`ThreadMeter::sample`]) and keeps each thread's last reading.
//!
//! What a run is charged:
//!
//! ```text
//! measured = Δ CPU of the whole process − Δ CPU of the threads that are not the measured
//!            client's (every thread that existed at the start: the bench's own, the stand-in's
//!            accept and admin-connection threads; and every stand-in thread started since)
//! ```
//!
//! So the measured side is every thread started during the run that is not the stand-in's (the
//! engine's control and shard threads, io_uring workers, a tokio blocking thread), plus
//! whatever a thread that ended between two samples did after its last sample: that goes to
//! the measured side, which can only make ours look worse.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::mqtt::cpu;

/// The prefix of the Iggy stand-in's thread names (`iggy-standin-accept`,
/// `iggy-standin-conn-N`; the kernel keeps the first 15 bytes).
const STAND_IN_PREFIX: &str = "iggy-standin";

/// One thread's reading.
#[derive(Debug, Clone)]
struct Seen {
    name: String,
    /// CPU time at the start (0 for a thread started since).
    first: Duration,
    /// The latest reading.
    last: Duration,
    /// Existed when the meter started.
    old: bool,
}

/// A run's CPU accounting; see the module docs.
#[derive(Debug)]
pub struct ThreadMeter {
    process: Duration,
    threads: BTreeMap<u32, Seen>,
}

/// What a run spent, split by whose threads.
#[derive(Debug, Clone, Copy, Default)]
pub struct Split {
    /// The measured client (see the module docs).
    pub measured: Duration,
    /// The Iggy stand-in's threads.
    pub stand_in: Duration,
    /// The bench's own threads (and any other thread that existed at the start).
    pub others: Duration,
}

fn read_task(tid: u32) -> Option<(String, Duration)> {
    let dir = format!("/proc/self/task/{tid}");
    let stat = std::fs::read_to_string(format!("{dir}/schedstat")).ok()?;
    let ns: u64 = stat.split_whitespace().next()?.parse().ok()?;
    let name = std::fs::read_to_string(format!("{dir}/comm")).ok()?;
    Some((name.trim_end().to_owned(), Duration::from_nanos(ns)))
}

fn tasks() -> Vec<(u32, String, Duration)> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|tid| read_task(tid).map(|(name, cpu)| (tid, name, cpu)))
        .collect()
}

/// The calling thread's id (its `/proc/self/task` entry).
pub fn current_tid() -> u32 {
    // SAFETY: gettid has no preconditions and only returns the caller's thread id.
    #[allow(unsafe_code)]
    let tid = unsafe { libc::gettid() };
    u32::try_from(tid).unwrap_or(0)
}

/// Whether per-thread CPU times can be read here (Linux with schedstat).
pub fn available() -> bool {
    read_task(std::process::id()).is_some()
}

impl ThreadMeter {
    /// Reads every thread and the process; the run starts now. The threads in `measured`
    /// exist already but belong to the measured client (it was set up on them before the
    /// clock started).
    pub fn start(measured: &[u32]) -> ThreadMeter {
        // Threads first: whatever they do before the process reading counts on both sides.
        let threads = tasks()
            .into_iter()
            .map(|(tid, name, cpu)| {
                (
                    tid,
                    Seen {
                        name,
                        first: cpu,
                        last: cpu,
                        old: !measured.contains(&tid),
                    },
                )
            })
            .collect();
        ThreadMeter {
            process: cpu::process(),
            threads,
        }
    }

    /// Reads every thread again (call it every few tens of milliseconds during a run).
    pub fn sample(&mut self) {
        for (tid, name, cpu) in tasks() {
            let seen = self.threads.entry(tid).or_insert(Seen {
                name: String::new(),
                first: Duration::ZERO,
                last: Duration::ZERO,
                old: false,
            });
            seen.name = name;
            seen.last = seen.last.max(cpu);
        }
    }

    /// The split since the start, with a last sample taken now.
    pub fn finish(&mut self) -> Split {
        self.sample();
        let process = cpu::process().saturating_sub(self.process);
        let mut split = Split::default();
        for seen in self.threads.values() {
            let spent = seen.last.saturating_sub(seen.first);
            if seen.name.starts_with(STAND_IN_PREFIX) {
                split.stand_in += spent;
            } else if seen.old {
                split.others += spent;
            }
        }
        split.measured = process.saturating_sub(split.stand_in + split.others);
        split
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn burn(d: Duration) {
        let start = cpu::this_thread();
        let mut x = 1u64;
        while cpu::this_thread() < start + d {
            for _ in 0..1000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
    }

    #[test]
    fn new_threads_are_measured_and_stand_in_threads_are_not() {
        if !available() {
            return;
        }
        let mut meter = ThreadMeter::start(&[]);
        let measured = std::thread::spawn(|| burn(Duration::from_millis(60)));
        let (burned_tx, burned) = std::sync::mpsc::channel::<()>();
        let (done, done_rx) = std::sync::mpsc::channel::<()>();
        let stand_in = std::thread::Builder::new()
            .name("iggy-standin-conn-9".into())
            .spawn(move || {
                burn(Duration::from_millis(60));
                let _ = burned_tx.send(());
                // Stay alive until the meter has read it.
                let _ = done_rx.recv();
            });
        let _ = measured.join();
        let _ = burned.recv();
        let split = meter.finish();
        let _ = done.send(());
        if let Ok(h) = stand_in {
            let _ = h.join();
        }
        // Tests running beside this one can only add to the measured side.
        assert!(
            split.measured >= Duration::from_millis(55),
            "measured {split:?}"
        );
        assert!(
            split.stand_in >= Duration::from_millis(55),
            "stand-in {split:?}"
        );
    }
}
