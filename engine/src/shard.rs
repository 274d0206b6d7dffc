//! A shard: one OS thread pinned to one core, running one monoio runtime (io_uring, or the
//! legacy driver where io_uring is unavailable) with one runner task per sink that has work
//! here. It talks to the control thread only through two bounded lock-free queues: commands
//! down, reports up.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::task::{Poll, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use tracing::info;

use crate::config::Config;
use crate::coremap::ShardPlan;
use crate::error::{EngineError, ErrorClass};
use crate::flow::{Budget, Mode, RunnerStats};
use crate::iggy::Endpoint;
use crate::metrics::{Command, Report, Reports};
use crate::runner::Runner;
use crate::signal::Signal;

/// The control thread's handle on a shard.
#[derive(Debug)]
pub struct ShardHandle {
    /// The thread.
    pub thread: JoinHandle<()>,
    /// Commands to it.
    commands: Arc<ArrayQueue<Command>>,
    /// Rung with each command, so the shard takes it at once.
    doorbell: Arc<Doorbell>,
}

impl ShardHandle {
    /// Sends `cmd` and wakes the shard for it; `false` when its queue is full.
    pub fn send(&self, cmd: Command) -> bool {
        let sent = self.commands.push(cmd).is_ok();
        self.doorbell.ring();
        sent
    }
}

/// The control thread's ring on a shard: rung with each command, it wakes the shard's task,
/// which takes the commands at once (instead of looking every few milliseconds).
#[derive(Debug, Default)]
pub struct Doorbell {
    rung: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Doorbell {
    /// Wakes the shard's task (from any thread).
    pub fn ring(&self) {
        self.rung.store(true, Ordering::SeqCst);
        let waker = self
            .waker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Resolves once rung since the last wait ended.
    pub async fn wait(&self) {
        poll_fn(|cx| {
            if self.rung.swap(false, Ordering::SeqCst) {
                return Poll::Ready(());
            }
            *self.waker.lock().unwrap_or_else(PoisonError::into_inner) = Some(cx.waker().clone());
            // A ring between the first look and the waker's store is not lost.
            if self.rung.swap(false, Ordering::SeqCst) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }
}

/// Starts shard `plan` on its core.
pub fn spawn(
    plan: ShardPlan,
    config: Arc<Config>,
    endpoint: Option<Endpoint>,
    reports: Arc<Reports>,
) -> std::io::Result<ShardHandle> {
    let commands = Arc::new(ArrayQueue::new(16));
    let doorbell = Arc::new(Doorbell::default());
    let link = (Arc::clone(&commands), Arc::clone(&doorbell));
    let thread = std::thread::Builder::new()
        .name(format!("spillway-shard-{}", plan.index))
        .spawn(move || shard_thread(plan, config, endpoint, link, reports))?;
    Ok(ShardHandle {
        thread,
        commands,
        doorbell,
    })
}

fn shard_thread(
    plan: ShardPlan,
    config: Arc<Config>,
    endpoint: Option<Endpoint>,
    link: (Arc<ArrayQueue<Command>>, Arc<Doorbell>),
    reports: Arc<Reports>,
) {
    let index = plan.index;
    if let Err(e) = monoio::utils::bind_to_cpu_set([plan.core]) {
        reports.deliver(Report::Fatal {
            shard: index,
            message: format!("pinning shard {index} to core {}: {e:?}", plan.core),
            class: ErrorClass::Permanent,
        });
        reports.deliver(Report::Finished { shard: index });
        return;
    }
    let runtime = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
        .enable_timer()
        .build();
    let mut runtime = match runtime {
        Ok(rt) => rt,
        Err(e) => {
            reports.deliver(Report::Fatal {
                shard: index,
                message: format!("starting the runtime of shard {index}: {e}"),
                class: ErrorClass::Permanent,
            });
            reports.deliver(Report::Finished { shard: index });
            return;
        }
    };
    runtime.block_on(shard_main(
        plan,
        config,
        endpoint,
        link,
        Arc::clone(&reports),
    ));
    reports.deliver(Report::Finished { shard: index });
}

async fn shard_main(
    plan: ShardPlan,
    config: Arc<Config>,
    endpoint: Option<Endpoint>,
    (commands, doorbell): (Arc<ArrayQueue<Command>>, Arc<Doorbell>),
    reports: Arc<Reports>,
) {
    let index = plan.index;
    let state = Rc::new(ShardState::new(
        index,
        config.runtime.shard_memory_budget.0,
        commands,
        Arc::clone(&reports),
    ));
    let remaining = Rc::new(Cell::new(0usize));
    // Bumped as each runner ends.
    let ended = Rc::new(Signal::default());
    for work in &plan.sinks {
        match Runner::new(
            &config,
            work.sink,
            &work.work,
            work.lead,
            index,
            Rc::clone(&state),
            endpoint.clone(),
        ) {
            Ok((runner, st)) => {
                state.stats.borrow_mut().push((runner.index(), st));
                remaining.set(remaining.get() + 1);
                let remaining = Rc::clone(&remaining);
                let ended = Rc::clone(&ended);
                let reports = Arc::clone(&reports);
                monoio::spawn(async move {
                    // Logged by the control thread, once (not here as well).
                    if let Err(EngineError { message, class }) = runner.run().await {
                        reports.deliver(Report::Fatal {
                            shard: index,
                            message,
                            class,
                        });
                    }
                    remaining.set(remaining.get() - 1);
                    ended.bump();
                });
            }
            Err(EngineError { message, class }) => {
                reports.deliver(Report::Fatal {
                    shard: index,
                    message,
                    class,
                });
            }
        }
    }
    info!(
        shard = index,
        core = plan.core,
        sinks = remaining.get(),
        "shard started"
    );
    // Woken by the control thread's commands, a runner's end, or the next report; runners
    // that are busy also take the commands on each turn.
    loop {
        let done = remaining.get() == 0;
        state.service(done);
        if done {
            return;
        }
        let report_in = state
            .next_report
            .get()
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        monoio::select! {
            () = doorbell.wait() => {}
            () = ended.next() => {}
            () = monoio::time::sleep(report_in) => {}
        }
    }
}

/// Shared by the shard's runners: the control state, the memory budget, and the link to the
/// control thread.
pub struct ShardState {
    /// Shard number.
    pub index: usize,
    /// Current mode.
    pub mode: Cell<Mode>,
    /// The memory budget the shard's runners share (`runtime.shard_memory_budget`).
    pub budget: Rc<Budget>,
    /// Commands from the control thread.
    pub commands: Arc<ArrayQueue<Command>>,
    /// Reports to the control thread.
    pub reports: Arc<Reports>,
    /// The statistics of each runner, by sink index.
    pub stats: RefCell<Vec<(usize, Rc<RefCell<RunnerStats>>)>>,
    /// Bumped when the mode changes (what a runner waiting for a stop wakes on).
    pub changed: Signal,
    /// The operator's pauses, by sink index: paused, and how many flushes were asked for.
    pauses: RefCell<Vec<(bool, u64)>>,
    next_report: Cell<Instant>,
    report_seq: Cell<u64>,
}

impl std::fmt::Debug for ShardState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardState")
            .field("index", &self.index)
            .field("mode", &self.mode.get())
            .finish()
    }
}

impl ShardState {
    /// A shard's state, running.
    pub fn new(
        index: usize,
        budget: u64,
        commands: Arc<ArrayQueue<Command>>,
        reports: Arc<Reports>,
    ) -> ShardState {
        ShardState {
            index,
            mode: Cell::new(Mode::Run),
            budget: Budget::new(budget),
            commands,
            reports,
            stats: RefCell::new(Vec::new()),
            pauses: RefCell::new(Vec::new()),
            changed: Signal::default(),
            next_report: Cell::new(Instant::now()),
            report_seq: Cell::new(0),
        }
    }

    /// Takes the control thread's commands and sends statistics when due. Runners call this
    /// every turn (a busy runner never lets the runtime park, and monoio fires timers only when
    /// it parks), and the shard's own task calls it on a timer when the runners are idle.
    pub fn service(&self, force_report: bool) {
        let mode = self.mode.get();
        while let Some(cmd) = self.commands.pop() {
            match cmd {
                Command::Drain { deadline } => {
                    if self.mode.get() == Mode::Run {
                        self.mode.set(Mode::Drain(deadline));
                    }
                }
                Command::Stop => self.mode.set(Mode::Stop),
                Command::Pause { sink, flush } => {
                    let mut pauses = self.pauses.borrow_mut();
                    if pauses.len() <= sink {
                        pauses.resize(sink + 1, (false, 0));
                    }
                    pauses[sink].0 = true;
                    pauses[sink].1 += u64::from(flush);
                }
                Command::Resume { sink } => {
                    if let Some(p) = self.pauses.borrow_mut().get_mut(sink) {
                        p.0 = false;
                    }
                }
            }
        }
        if self.mode.get() != mode {
            self.changed.bump();
        }
        let now = Instant::now();
        if force_report || now >= self.next_report.get() {
            self.next_report.set(now + REPORT_INTERVAL);
            let wall = std::time::SystemTime::now();
            let sinks = self
                .stats
                .borrow()
                .iter()
                .map(|(sink, st)| st.borrow_mut().report(*sink, now, wall))
                .collect();
            let seq = self.report_seq.get() + 1;
            self.report_seq.set(seq);
            let report = Report::Stats {
                shard: self.index,
                seq,
                sinks,
            };
            if force_report {
                self.reports.deliver(report);
            } else {
                // Counters are cumulative: a report lost to a full queue is made good by the
                // next one (only that interval's latency samples are lost).
                self.reports.offer(report);
            }
        }
    }
}

impl ShardState {
    /// The operator's pause of sink `sink`: paused, and how many flushes were asked for.
    pub fn pause_of(&self, sink: usize) -> (bool, u64) {
        self.pauses
            .borrow()
            .get(sink)
            .copied()
            .unwrap_or((false, 0))
    }
}

/// How often a shard sends its statistics.
pub const REPORT_INTERVAL: Duration = Duration::from_millis(250);

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring from another thread wakes a task parked in the shard's runtime (monoio's `sync`
    /// feature): without the wake the wait below sleeps until its 10 s timer.
    #[test]
    fn a_ring_from_another_thread_wakes_the_shard() {
        let doorbell = Arc::new(Doorbell::default());
        let mut runtime = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
            .enable_timer()
            .build()
            .unwrap_or_else(|e| panic!("runtime: {e}"));
        let ring = Arc::clone(&doorbell);
        let ringer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            ring.ring();
        });
        let started = Instant::now();
        runtime.block_on(async {
            let _ = monoio::time::timeout(Duration::from_secs(10), doorbell.wait()).await;
        });
        let _ = ringer.join();
        // Woken by the ring, not by the timer (which wakes the runtime at 10 s, when the rung
        // bell is found as well).
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the ring did not wake the shard's task: it slept {:?}",
            started.elapsed()
        );
        // A ring while nobody waits is kept for the next wait.
        doorbell.ring();
        let kept = runtime.block_on(async {
            monoio::time::timeout(Duration::from_secs(10), doorbell.wait())
                .await
                .is_ok()
        });
        assert!(kept);
    }
}
