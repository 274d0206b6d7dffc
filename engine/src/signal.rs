//! A shard-local signal: a count of changes and the wakers of the tasks that wait for the
//! next. What would otherwise sleep a few milliseconds and look again (a sink waiting for its
//! connections or its delayed writes, a runner waiting for the shard to be told to stop) waits
//! on it and wakes when something changed.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::task::{Poll, Waker};

/// See the module documentation. Not `Send`: one shard's tasks share it. A waiter dropped
/// before the change leaves its waker until the next bump (one per task at most).
#[derive(Default)]
pub struct Signal {
    seen: Cell<u64>,
    waiters: RefCell<Vec<Waker>>,
}

impl std::fmt::Debug for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signal")
            .field("seen", &self.seen.get())
            .finish()
    }
}

impl Signal {
    /// Something changed: wakes the waiting tasks.
    pub fn bump(&self) {
        self.seen.set(self.seen.get().wrapping_add(1));
        let waiters = std::mem::take(&mut *self.waiters.borrow_mut());
        for w in waiters {
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
            let mut waiters = self.waiters.borrow_mut();
            if !waiters.iter().any(|w| w.will_wake(cx.waker())) {
                waiters.push(cx.waker().clone());
            }
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

    #[test]
    fn every_waiting_task_is_woken() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::task::Wake;
        struct Count(AtomicUsize);
        impl Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let signal = Signal::default();
        let (a, b) = (
            Arc::new(Count(AtomicUsize::new(0))),
            Arc::new(Count(AtomicUsize::new(0))),
        );
        let (wa, wb) = (Waker::from(Arc::clone(&a)), Waker::from(Arc::clone(&b)));
        let mut first = pin!(signal.next());
        let mut second = pin!(signal.next());
        assert!(
            first
                .as_mut()
                .poll(&mut Context::from_waker(&wa))
                .is_pending()
        );
        assert!(
            first
                .as_mut()
                .poll(&mut Context::from_waker(&wa))
                .is_pending()
        );
        assert!(
            second
                .as_mut()
                .poll(&mut Context::from_waker(&wb))
                .is_pending()
        );
        signal.bump();
        assert_eq!(
            a.0.load(Ordering::SeqCst),
            1,
            "once, however often it was polled"
        );
        assert_eq!(b.0.load(Ordering::SeqCst), 1);
    }
}
