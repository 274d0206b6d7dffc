//! A shard-local signal: a count of changes and the waker of the one task that waits for the
//! next. What would otherwise sleep a few milliseconds and look again (a sink waiting for its
//! connections or its delayed writes) waits on it and wakes when something changed.

use std::cell::Cell;
use std::future::poll_fn;
use std::task::{Poll, Waker};

/// See the module documentation. Not `Send`: one shard's tasks share it.
#[derive(Default)]
pub struct Signal {
    seen: Cell<u64>,
    waiter: Cell<Option<Waker>>,
}

impl std::fmt::Debug for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signal")
            .field("seen", &self.seen.get())
            .finish()
    }
}

impl Signal {
    /// Something changed: wakes the waiting task.
    pub fn bump(&self) {
        self.seen.set(self.seen.get().wrapping_add(1));
        if let Some(w) = self.waiter.take() {
            w.wake();
        }
    }

    /// Resolves at the first change after the call.
    pub async fn next(&self) {
        let at = self.seen.get();
        poll_fn(|cx| {
            if self.seen.get() != at {
                return Poll::Ready(());
            }
            self.waiter.set(Some(cx.waker().clone()));
            Poll::Pending
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::*;

    #[test]
    fn a_wait_resolves_at_the_first_change_after_it_began() {
        let signal = Signal::default();
        signal.bump();
        let mut cx = Context::from_waker(Waker::noop());
        let mut wait = pin!(signal.next());
        assert_eq!(
            wait.as_mut().poll(&mut cx),
            Poll::Pending,
            "a change before the wait does not count"
        );
        signal.bump();
        assert_eq!(wait.as_mut().poll(&mut cx), Poll::Ready(()));
    }
}
