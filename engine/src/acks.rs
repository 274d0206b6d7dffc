//! What comes back from a sink to the engine: what happened to the offsets it was given
//! ([`Outcome`]), one report at a time ([`Ack`]), queued shard-locally in [`Acks`] by the sink
//! and its tasks and taken by the runner into the flow, and the sink's own figures
//! ([`SinkStatus`]). The flow core reads these types and nothing else of the sink tree.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use crate::ids::{Offset, Slot};

/// What happened to offsets `first..=last` of a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Delivered for good.
    Confirmed,
    /// Rejected for good; the reason goes to the error policy and the log.
    Failed(String),
    /// Dropped by the sink: poll again from `first` (everything after it too), not before
    /// `not_before` when the sink asks for a backoff.
    Redeliver {
        /// No poll of the partition before this.
        not_before: Option<Instant>,
    },
    /// The sink gave the partition up (another writer took it over in the sink's own store):
    /// the engine drops everything it polled of it and, if it still holds the partition,
    /// takes it up anew, not before `not_before`: from Iggy's stored offset and what the
    /// sink's `resume` finds, as for a partition newly assigned. The sink reports nothing
    /// more for the slot after this (the engine may give the slot to another partition once
    /// it released it).
    Reopen {
        /// No reopening before this.
        not_before: Option<Instant>,
    },
}

/// One report from a sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    /// `PartitionInfo::slot` of the batch.
    pub slot: Slot,
    /// First offset.
    pub first: Offset,
    /// Last offset (inclusive).
    pub last: Offset,
    /// What happened.
    pub outcome: Outcome,
}

#[derive(Default)]
struct AcksInner {
    queue: RefCell<Vec<Ack>>,
    waker: Cell<Option<Waker>>,
    /// A self-paced sink's bytes held, as last reported.
    held: Cell<u64>,
    /// `held` changed since the engine took it.
    held_fresh: Cell<bool>,
    /// `held` fell since the engine took it (room may have opened: the engine is woken).
    freed: Cell<bool>,
    /// The newest trouble the sink noted and the engine has not taken yet (for `/status`).
    trouble: RefCell<Option<String>>,
}

/// The channel from a sink (and its tasks) to the engine: shard-local, no locks.
#[derive(Clone, Default)]
pub struct Acks {
    inner: Rc<AcksInner>,
}

impl std::fmt::Debug for Acks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acks")
            .field("queued", &self.inner.queue.borrow().len())
            .field("held", &self.inner.held.get())
            .finish()
    }
}

impl Acks {
    /// A new, empty channel.
    pub fn new() -> Acks {
        Acks::default()
    }

    fn push(&self, ack: Ack) {
        self.inner.queue.borrow_mut().push(ack);
        if let Some(w) = self.inner.waker.take() {
            w.wake();
        }
    }

    /// Offsets `first..=last` of partition `slot` are delivered.
    pub fn confirm(&self, slot: Slot, first: Offset, last: Offset) {
        self.push(Ack {
            slot,
            first,
            last,
            outcome: Outcome::Confirmed,
        });
    }

    /// Offset `offset` of partition `slot` is rejected for good.
    pub fn fail(&self, slot: Slot, offset: Offset, reason: impl Into<String>) {
        self.push(Ack {
            slot,
            first: offset,
            last: offset,
            outcome: Outcome::Failed(reason.into()),
        });
    }

    /// Partition `slot` must be delivered again from `from` on.
    pub fn redeliver(&self, slot: Slot, from: Offset) {
        self.push(Ack {
            slot,
            first: from,
            last: Offset(u64::MAX),
            outcome: Outcome::Redeliver { not_before: None },
        });
    }

    /// Partition `slot` must be delivered again from `from` on, not before `at` (a backoff:
    /// the engine polls its other partitions meanwhile).
    pub fn redeliver_at(&self, slot: Slot, from: Offset, at: Instant) {
        self.push(Ack {
            slot,
            first: from,
            last: Offset(u64::MAX),
            outcome: Outcome::Redeliver {
                not_before: Some(at),
            },
        });
    }

    /// Partition `slot` is given up by the sink: the engine takes it up anew (see
    /// [`Outcome::Reopen`]), not before `at`.
    pub fn reopen_at(&self, slot: Slot, at: Instant) {
        self.push(Ack {
            slot,
            first: Offset(0),
            last: Offset(u64::MAX),
            outcome: Outcome::Reopen {
                not_before: Some(at),
            },
        });
    }

    /// A self-paced sink's bytes held now (see [`crate::sink::Sink::paced_by_memory`]), reported after
    /// every change, from the sink or its tasks. A fall wakes the engine: polling paused for
    /// the shard's budget may go on.
    pub fn hold(&self, bytes: u64) {
        let before = self.inner.held.replace(bytes);
        self.inner.held_fresh.set(true);
        if bytes < before {
            self.inner.freed.set(true);
            if let Some(w) = self.inner.waker.take() {
                w.wake();
            }
        }
    }

    /// The bytes held, when they changed since the last call.
    pub fn take_held(&self) -> Option<u64> {
        self.inner.freed.set(false);
        self.inner
            .held_fresh
            .replace(false)
            .then(|| self.inner.held.get())
    }

    /// Notes a problem with the destination that the sink works around (a connection lost, an
    /// upload tried again) for the operator's `/status`: the newest one is kept until the
    /// engine takes it. Its log line is the sink's own.
    pub fn trouble(&self, what: impl Into<String>) {
        *self.inner.trouble.borrow_mut() = Some(what.into());
    }

    /// The newest trouble noted since the last call.
    pub fn take_trouble(&self) -> Option<String> {
        self.inner.trouble.borrow_mut().take()
    }

    /// Moves the queued reports into `out`.
    pub fn drain_into(&self, out: &mut Vec<Ack>) {
        out.append(&mut self.inner.queue.borrow_mut());
    }

    /// Whether reports are waiting.
    pub fn is_empty(&self) -> bool {
        self.inner.queue.borrow().is_empty()
    }

    /// Resolves once a report is queued or the bytes held fell.
    pub fn ready(&self) -> AcksReady<'_> {
        AcksReady { acks: self }
    }
}

/// See [`Acks::ready`].
#[derive(Debug)]
pub struct AcksReady<'a> {
    acks: &'a Acks,
}

impl Future for AcksReady<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if !self.acks.is_empty() || self.acks.inner.freed.get() {
            return Poll::Ready(());
        }
        self.acks.inner.waker.set(Some(cx.waker().clone()));
        Poll::Pending
    }
}

/// What a sink reports about its destination.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkStatus {
    /// The destination cannot be reached right now: an MQTT connection is down, or the store
    /// failed the last upload and it is being tried again.
    pub failing: bool,
    /// Reconnects to the destination so far.
    pub reconnects: u64,
    /// Failed requests tried again so far (S3: objects polled again after a failure).
    pub retries: u64,
    /// Requests sent to the destination so far, retries included (S3).
    pub requests: u64,
    /// Most messages in flight at once on one connection.
    pub in_flight_peak: u64,
    /// Most bytes the sink held at once (encoded output waiting or uploading: S3).
    pub buffered_peak: u64,
    /// S3: output bytes encoded so far.
    pub encoded_bytes: u64,
    /// S3: body bytes of requests the store answered with success so far.
    pub uploaded_bytes: u64,
    /// S3: objects open now (being written or uploaded).
    pub objects_open: u64,
    /// S3: bytes held now (encoded output waiting or uploading).
    pub buffered_bytes: u64,
    /// S3 with an Iceberg table: snapshots the sink committed so far (reported by the sink's
    /// first shard only: the committer is the sink's, not a shard's).
    pub table_commits: u64,
    /// ...data files those snapshots added.
    pub table_files: u64,
    /// ...commit attempts that conflicted with another writer or failed, tried again.
    pub table_retries: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready_now(acks: &Acks) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        let mut ready = acks.ready();
        Pin::new(&mut ready).poll(&mut cx).is_ready()
    }

    /// What a self-paced sink holds reaches the engine when it changes; a fall ends the
    /// engine's wait (polling paused for the budget may go on), a rise does not.
    #[test]
    fn held_bytes_are_taken_when_changed_and_a_fall_wakes_the_engine() {
        let acks = Acks::new();
        assert_eq!(acks.take_held(), None);
        acks.hold(1_000);
        assert!(!ready_now(&acks), "more held: nothing to wake for");
        assert_eq!(acks.take_held(), Some(1_000));
        assert_eq!(acks.take_held(), None, "taken once");
        acks.hold(400);
        assert!(ready_now(&acks), "bytes freed end the wait");
        assert_eq!(acks.take_held(), Some(400));
        assert!(!ready_now(&acks), "and are taken with the figure");
        acks.confirm(Slot(0), Offset(0), Offset(0));
        assert!(ready_now(&acks));
    }
}
