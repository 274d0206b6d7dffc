//! What every scenario shares: the counting allocator, and the timing loop (warm-up, then
//! several timed runs of ours and the peer interleaved, median ns/op).
//!
//! Counting costs next to nothing while it is off (one thread-local load per allocation), so
//! the timed runs are not slowed by it; allocations are counted in a separate pass.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mimalloc::MiMalloc;

/// mimalloc (the engine's allocator) with an allocation counter that can be switched on.
#[derive(Debug)]
pub struct CountingAlloc;

thread_local! {
    // Per thread, so that nothing running beside a measurement (a test in parallel) is
    // counted. Const-initialised and without a destructor: reading them never allocates.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

#[inline]
fn note_alloc() {
    let _ = COUNTING.try_with(|on| {
        if on.get() {
            let _ = ALLOCS.try_with(|n| n.set(n.get() + 1));
        }
    });
    if SHARD_COUNTING.load(Ordering::Relaxed) {
        note_shard_alloc();
    }
}

/// Counting the allocations of the in-process engine's shard threads (named
/// `spillway-shard-N`), whatever thread turned it on: see [`ShardAllocs`].
static SHARD_COUNTING: AtomicBool = AtomicBool::new(false);
static SHARD_ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    // Whether this thread is a shard: 0 not known yet, 1 yes, 2 no. Decided at the thread's
    // first allocation while counting is on (a thread is named before it runs its closure).
    static IS_SHARD: Cell<u8> = const { Cell::new(0) };
}

#[cold]
fn note_shard_alloc() {
    let _ = IS_SHARD.try_with(|is| {
        if is.get() == 0 {
            is.set(if thread_is_shard() { 1 } else { 2 });
        }
        if is.get() == 1 {
            SHARD_ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
    });
}

/// The calling thread's name starts with `spillway-shard` (read from the kernel, which keeps
/// 15 bytes of it: no allocation, as the allocator may not allocate).
#[allow(unsafe_code)]
fn thread_is_shard() -> bool {
    let mut name = [0u8; 16];
    // SAFETY: PR_GET_NAME writes at most 16 bytes (the name and its NUL) into the buffer
    // passed, which is 16 bytes long.
    let rc = unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) };
    rc == 0 && name.starts_with(b"spillway-shard")
}

/// Counts the allocations (and reallocations) made by the engine's shard threads from
/// [`ShardAllocs::start`] to [`ShardAllocs::stop`]: for the in-process engine runs, where the
/// shard thread is the engine's and every allocation on it is the engine's. One counter for
/// the process: one measurement at a time.
#[derive(Debug)]
pub struct ShardAllocs(());

impl ShardAllocs {
    pub fn start() -> ShardAllocs {
        SHARD_ALLOCS.store(0, Ordering::Relaxed);
        SHARD_COUNTING.store(true, Ordering::Relaxed);
        ShardAllocs(())
    }

    /// The count since start.
    pub fn stop(self) -> u64 {
        SHARD_COUNTING.store(false, Ordering::Relaxed);
        SHARD_ALLOCS.load(Ordering::Relaxed)
    }
}

// SAFETY: every method forwards its arguments unchanged to mimalloc, which upholds the
// `GlobalAlloc` contract; the wrapper only bumps a counter and never touches the memory.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_alloc();
        // SAFETY: forwarded unchanged (see the impl).
        unsafe { MiMalloc.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_alloc();
        // SAFETY: forwarded unchanged (see the impl).
        unsafe { MiMalloc.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // A reallocation is an allocation on the hot path as much as a fresh one.
        note_alloc();
        // SAFETY: forwarded unchanged (see the impl).
        unsafe { MiMalloc.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged (see the impl).
        unsafe { MiMalloc.dealloc(ptr, layout) }
    }
}

/// How long and how often to measure.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Timed runs per side; the median is reported.
    pub runs: usize,
    /// Roughly how long one timed run lasts.
    pub run_time: Duration,
    /// Time spent warming up each side before its iteration count is fixed.
    pub warmup: Duration,
    /// Operations in the allocation-counting pass.
    pub alloc_ops: u64,
}

impl Plan {
    pub fn full() -> Self {
        Plan {
            runs: 7,
            run_time: Duration::from_millis(60),
            warmup: Duration::from_millis(150),
            alloc_ops: 20_000,
        }
    }

    /// For CI smoke runs: the same rows, a fraction of the time.
    pub fn quick() -> Self {
        Plan {
            runs: 3,
            run_time: Duration::from_millis(3),
            warmup: Duration::from_millis(5),
            alloc_ops: 2_000,
        }
    }
}

/// A measurable body: performs at least `n` operations and returns the time spent in the
/// measured part and the number of operations it performed. Setup that is not part of an
/// operation (refilling a receive buffer) may run outside the measured part.
pub trait Body {
    fn run(&mut self, n: u64) -> (Duration, u64);
}

impl<F: FnMut(u64) -> (Duration, u64)> Body for F {
    fn run(&mut self, n: u64) -> (Duration, u64) {
        self(n)
    }
}

/// A body that repeats one operation `n` times back to back.
pub fn each<F: FnMut()>(mut op: F) -> impl FnMut(u64) -> (Duration, u64) {
    move |n| {
        let start = Instant::now();
        for _ in 0..n {
            op();
        }
        (start.elapsed(), n)
    }
}

/// What one side measured.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    /// Median over the runs.
    pub ns_per_op: f64,
    /// Allocation calls (alloc, alloc_zeroed, realloc) per operation.
    pub allocs_per_op: f64,
}

fn ns_per_op((d, ops): (Duration, u64)) -> f64 {
    d.as_secs_f64() * 1e9 / ops.max(1) as f64
}

/// Warms `body` up for `plan.warmup` and returns the iteration count for one timed run.
fn calibrate(body: &mut dyn Body, plan: &Plan) -> u64 {
    let start = Instant::now();
    let mut n = 16u64;
    let mut best = f64::INFINITY;
    while start.elapsed() < plan.warmup {
        best = best.min(ns_per_op(body.run(n)));
        if n < (1 << 24) {
            n *= 2;
        }
    }
    if !best.is_finite() || best <= 0.0 {
        return 1_000;
    }
    ((plan.run_time.as_secs_f64() * 1e9 / best) as u64).clamp(16, 1 << 30)
}

/// The median (the mean of the middle two for an even count; NaN for none).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Counts allocation calls (on this thread) over about `ops` operations of `body`.
pub fn allocs_per_op(body: &mut dyn Body, ops: u64) -> f64 {
    let before = ALLOCS.with(Cell::get);
    COUNTING.with(|c| c.set(true));
    let (_, done) = body.run(ops);
    COUNTING.with(|c| c.set(false));
    let n = ALLOCS.with(Cell::get) - before;
    n as f64 / done.max(1) as f64
}

/// Measures ours and the peer on the same plan. Their timed runs alternate, so a burst of
/// background load (another build on this machine) hits both sides rather than one.
pub fn compare(plan: &Plan, ours: &mut dyn Body, peer: &mut dyn Body) -> (Measured, Measured) {
    let n_ours = calibrate(ours, plan);
    let n_peer = calibrate(peer, plan);
    let mut t_ours = Vec::with_capacity(plan.runs);
    let mut t_peer = Vec::with_capacity(plan.runs);
    for _ in 0..plan.runs {
        t_ours.push(ns_per_op(ours.run(n_ours)));
        t_peer.push(ns_per_op(peer.run(n_peer)));
    }
    let ours = Measured {
        ns_per_op: median(t_ours),
        allocs_per_op: allocs_per_op(ours, plan.alloc_ops),
    };
    let peer = Measured {
        ns_per_op: median(t_peer),
        allocs_per_op: allocs_per_op(peer, plan.alloc_ops),
    };
    (ours, peer)
}

/// The Iggy server given by `--iggy HOST:PORT` (set once by `main`).
static IGGY_TARGET: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Records `--iggy HOST:PORT` for [`iggy`].
pub fn set_iggy_target(target: String) {
    let _ = IGGY_TARGET.set(target);
}

/// `--iggy stand-in`: the harness's stand-in instead of the real server.
pub const STAND_IN: &str = "stand-in";

/// The Iggy server a scenario reads from, started for it: by default the real Iggy server
/// (`../shared/iggy/iggy-server`, or `SPILLWAY_IGGY_SERVER_BIN`) in a fresh data directory,
/// filled and then measured without a restart in between (a restarted server serves reads
/// slower, see `../shared/iggy/README.md`); the server at `--iggy HOST:PORT` (or
/// `SPILLWAY_TEST_IGGY`; credentials from `SPILLWAY_TEST_IGGY_USERNAME` / `_PASSWORD`, default
/// `iggy`/`iggy`); or, with `--iggy stand-in` (or where no server binary is found), the
/// harness's stand-in in this process (built on the real wire format, not the Iggy server: its
/// speed is not Iggy's).
pub fn iggy() -> Result<spillway_tests::IggyServer, String> {
    let found = match IGGY_TARGET.get().map(String::as_str) {
        Some(STAND_IN) => {
            spillway_tests::IggyStandIn::start().map(spillway_tests::IggyServer::StandIn)
        }
        Some(t) => spillway_tests::IggyServer::at_or_start(t, "--iggy"),
        None => spillway_tests::IggyServer::start(),
    };
    found.map_err(|e| format!("Iggy: {e}"))
}

/// Which Iggy the scenarios read from, for the machine line of the report.
pub fn iggy_source() -> String {
    let external = IGGY_TARGET
        .get()
        .cloned()
        .or_else(|| std::env::var("SPILLWAY_TEST_IGGY").ok())
        .filter(|t| !t.trim().is_empty());
    match external.as_deref() {
        Some(STAND_IN) => "the harness's Iggy stand-in (on request: --iggy stand-in)".to_owned(),
        Some(t) => format!("the external Iggy server at {t}"),
        None => match spillway_tests::iggy::server_binary() {
            Ok(Some(bin)) => format!(
                "the real Iggy server ({}), a fresh one per scenario run, filled then measured",
                bin.display()
            ),
            Ok(None) => "the harness's Iggy stand-in (no Iggy server binary found)".to_owned(),
            Err(e) => format!("unknown ({e})"),
        },
    }
}

/// Which Iggy a report row came from, for the text reports.
pub fn iggy_name(server: &spillway_tests::IggyServer) -> String {
    server.describe()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_allocation_counting() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(Vec::new()).is_nan());

        let mut body = each(|| {
            std::hint::black_box(Vec::<u8>::with_capacity(16));
        });
        assert_eq!(allocs_per_op(&mut body, 100), 1.0);
        let mut none = each(|| {
            std::hint::black_box(1 + 1);
        });
        assert_eq!(allocs_per_op(&mut none, 100), 0.0);
    }
}
