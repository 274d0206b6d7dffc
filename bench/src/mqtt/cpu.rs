//! CPU time for the mqtt scenario: the publisher's, and the broker's.
//!
//! **The publisher** (the engine, or rumqttc on its tokio thread) shares this process with the
//! bench's own threads (the counting subscriber, the discard broker, the thread that waits).
//! Its threads come and go during a run (the engine's shard thread ends when the engine does;
//! tokio may start a blocking-pool thread to resolve the broker address), so they cannot be
//! read one by one after the run. Instead:
//!
//! ```text
//! publisher CPU = Δ CPU of the whole process  −  Δ CPU of the bench's own threads
//! ```
//!
//! over the same interval. The process figure is `CLOCK_PROCESS_CPUTIME_ID` (user + system, in
//! nanoseconds, including threads that ended during the interval). Every bench thread
//! registers itself with [`helper_thread`] for as long as it runs: its thread CPU clock
//! (`pthread_getcpuclockid`) is read while it lives, and when it ends the guard adds its final
//! CPU time to a retired total under the same lock, so [`helpers_cpu`] never misses a thread
//! nor counts one twice. What is left is the CPU of every thread the publisher ran, exactly.
//!
//! **The broker** (mosquitto, a child process) is read with `clock_getcpuclockid(pid)`
//! (nanoseconds, all its threads), or from `/proc/PID/stat` (utime + stime, in clock ticks)
//! where that clock cannot be had.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

fn clock(id: libc::clockid_t) -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes it.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    if rc != 0 {
        return None;
    }
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u32::try_from(ts.tv_nsec).ok()?;
    Some(Duration::new(secs, nanos))
}

/// CPU time of this whole process so far (every thread, ended ones included).
pub fn process() -> Duration {
    clock(libc::CLOCK_PROCESS_CPUTIME_ID).unwrap_or_default()
}

/// CPU time of the calling thread so far.
pub fn this_thread() -> Duration {
    clock(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or_default()
}

#[derive(Debug, Default)]
struct Helpers {
    next: u64,
    /// Live bench threads: key and CPU clock.
    live: Vec<(u64, libc::clockid_t)>,
    /// CPU time of bench threads that have ended.
    retired: Duration,
}

static HELPERS: Mutex<Helpers> = Mutex::new(Helpers {
    next: 0,
    live: Vec::new(),
    retired: Duration::ZERO,
});

fn helpers() -> std::sync::MutexGuard<'static, Helpers> {
    HELPERS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Marks the calling thread as the bench's own (not the publisher's) until the guard drops.
/// Create it first thing in the thread and keep it to the end.
#[derive(Debug)]
pub struct HelperGuard {
    key: Option<u64>,
}

pub fn helper_thread() -> HelperGuard {
    let mut id: libc::clockid_t = 0;
    // SAFETY: pthread_self() is the calling thread, alive for the call; `id` is writable.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut id) };
    if rc != 0 {
        return HelperGuard { key: None };
    }
    let mut h = helpers();
    h.next += 1;
    let key = h.next;
    h.live.push((key, id));
    HelperGuard { key: Some(key) }
}

impl Drop for HelperGuard {
    fn drop(&mut self) {
        let Some(key) = self.key else { return };
        let mut h = helpers();
        // Read under the lock, so a concurrent helpers_cpu sees this thread either live or
        // retired, never both or neither.
        let spent = this_thread();
        h.live.retain(|(k, _)| *k != key);
        h.retired += spent;
    }
}

/// CPU time of all bench threads so far (live and ended).
pub fn helpers_cpu() -> Duration {
    let h = helpers();
    h.retired
        + h.live
            .iter()
            .filter_map(|(_, id)| clock(*id))
            .sum::<Duration>()
}

/// A reading of the publisher's CPU: take one before the run, [`PublisherMeter::spent`] after.
#[derive(Debug, Clone, Copy)]
pub struct PublisherMeter {
    process: Duration,
    helpers: Duration,
}

impl PublisherMeter {
    pub fn start() -> PublisherMeter {
        // Helpers first: anything a helper does between the two readings counts on both
        // sides of the subtraction, never against the publisher.
        let helpers = helpers_cpu();
        let process = process();
        PublisherMeter { process, helpers }
    }

    /// The publisher's CPU since `start`.
    pub fn spent(&self) -> Duration {
        let process = process().saturating_sub(self.process);
        let helpers = helpers_cpu().saturating_sub(self.helpers);
        process.saturating_sub(helpers)
    }
}

/// The CPU clock of another process (the broker).
#[derive(Debug, Clone, Copy)]
pub struct ProcessCpu {
    pid: u32,
    clock: Option<libc::clockid_t>,
}

impl ProcessCpu {
    pub fn of(pid: u32) -> ProcessCpu {
        let mut id: libc::clockid_t = 0;
        let clock = libc::pid_t::try_from(pid).ok().and_then(|p| {
            // SAFETY: `id` is writable; the call only writes it.
            #[allow(unsafe_code)]
            let rc = unsafe { libc::clock_getcpuclockid(p, &mut id) };
            (rc == 0).then_some(id)
        });
        ProcessCpu { pid, clock }
    }

    /// Its CPU time so far, `None` once it cannot be read.
    pub fn read(&self) -> Option<Duration> {
        if let Some(t) = self.clock.and_then(clock) {
            return Some(t);
        }
        proc_stat_cpu(self.pid)
    }
}

/// Pins process `pid` (its main thread: all of mosquitto, which has one) to `cores`.
pub fn pin_process(pid: u32, cores: &[usize]) -> Result<(), String> {
    let pid = libc::pid_t::try_from(pid).map_err(|e| e.to_string())?;
    // SAFETY: an all-zero cpu_set_t is the empty set.
    #[allow(unsafe_code)]
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let capacity = 8 * std::mem::size_of::<libc::cpu_set_t>();
    for &core in cores {
        if core >= capacity {
            return Err(format!("core {core} is beyond the CPU set"));
        }
        // SAFETY: `core` is within the set (checked above); CPU_SET only sets its bit.
        #[allow(unsafe_code)]
        unsafe {
            libc::CPU_SET(core, &mut set)
        };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    Ok(())
}

/// Puts the calling thread in the `SCHED_IDLE` class: it runs only on a core that has
/// nothing else to run, and never preempts the publisher.
pub fn sched_idle() -> Result<(), String> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    if rc != 0 {
        return Err(format!(
            "sched_setscheduler(SCHED_IDLE): {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// utime + stime of `pid` from `/proc/PID/stat`.
fn proc_stat_cpu(pid: u32) -> Option<Duration> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count from the last
    // ')'. utime and stime are fields 14 and 15, so the 12th and 13th after it.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    #[allow(unsafe_code)]
    let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let tck = u64::try_from(tck).ok().filter(|t| *t > 0)?;
    Some(Duration::from_nanos((utime + stime) * 1_000_000_000 / tck))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Burns `d` of this thread's CPU time.
    fn burn(d: Duration) {
        let start = this_thread();
        let mut x = 1u64;
        while this_thread() < start + d {
            for _ in 0..1000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
    }

    #[test]
    fn ended_threads_count_on_their_side() {
        let _main = helper_thread();
        let meter = PublisherMeter::start();
        let helpers_before = helpers_cpu();
        // A helper and a "publisher" thread, each burning 40 ms of CPU and ending inside the
        // interval. (Other tests running at the same time can only add to either side.)
        let helper = std::thread::spawn(|| {
            let _g = helper_thread();
            burn(Duration::from_millis(40));
        });
        let publisher = std::thread::spawn(|| burn(Duration::from_millis(40)));
        let _ = helper.join();
        let _ = publisher.join();
        let spent = meter.spent();
        let helpers = helpers_cpu() - helpers_before;
        assert!(spent >= Duration::from_millis(40), "publisher {spent:?}");
        assert!(helpers >= Duration::from_millis(40), "helpers {helpers:?}");
    }

    #[test]
    fn another_process_is_readable() {
        let me = ProcessCpu::of(std::process::id());
        let before = me.read();
        burn(Duration::from_millis(30));
        let after = me.read();
        assert!(
            matches!((before, after), (Some(b), Some(a)) if a >= b + Duration::from_millis(30)),
            "{before:?} {after:?}"
        );
        assert!(proc_stat_cpu(std::process::id()).is_some());
    }
}
