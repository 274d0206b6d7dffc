//! A shard: one OS thread pinned to one core, running one monoio runtime (io_uring, or the
//! legacy driver where io_uring is unavailable) with one runner task per sink that has work
//! here. It talks to the control thread only through two bounded lock-free queues: commands
//! down, reports up.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_queue::ArrayQueue;
use tracing::info;

use crate::config::Config;
use crate::coremap::ShardPlan;
use crate::error::{EngineError, ErrorClass};
use crate::iggy::Endpoint;
use crate::metrics::{Command, Report, Reports};
use crate::runner::{Runner, ShardState};

/// The control thread's handle on a shard.
#[derive(Debug)]
pub struct ShardHandle {
    /// The thread.
    pub thread: JoinHandle<()>,
    /// Commands to it.
    pub commands: Arc<ArrayQueue<Command>>,
}

/// Starts shard `plan` on its core.
pub fn spawn(
    plan: ShardPlan,
    config: Arc<Config>,
    endpoint: Option<Endpoint>,
    reports: Arc<Reports>,
) -> std::io::Result<ShardHandle> {
    let commands = Arc::new(ArrayQueue::new(16));
    let cmds = Arc::clone(&commands);
    let thread = std::thread::Builder::new()
        .name(format!("spillway-shard-{}", plan.index))
        .spawn(move || shard_thread(plan, config, endpoint, cmds, reports))?;
    Ok(ShardHandle { thread, commands })
}

fn shard_thread(
    plan: ShardPlan,
    config: Arc<Config>,
    endpoint: Option<Endpoint>,
    commands: Arc<ArrayQueue<Command>>,
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
        commands,
        Arc::clone(&reports),
    ));
    reports.deliver(Report::Finished { shard: index });
}

async fn shard_main(
    plan: ShardPlan,
    config: Arc<Config>,
    endpoint: Option<Endpoint>,
    commands: Arc<ArrayQueue<Command>>,
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
    loop {
        let done = remaining.get() == 0;
        state.service(done);
        if done {
            return;
        }
        monoio::time::sleep(Duration::from_millis(20)).await;
    }
}
