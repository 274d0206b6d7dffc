//! The sink's own bookkeeping, without a store: what the completion tasks report and what the
//! sink reports it holds. Nothing here reaches the network (the endpoint is a loopback port
//! nobody listens on, and no object grows past its first part, so no request is made).

use std::path::Path;

use super::*;

const CONFIG: &str = r#"
[[sink]]
name = "lake"
type = "s3"
source = "generate"
[sink.s3]
bucket = "lake"
endpoint = "http://127.0.0.1:9"
access_key_id = "ak"
secret_access_key = "sk"
format = "raw"
"#;

fn sink() -> (S3Sink, Acks) {
    let config = crate::config::parse(CONFIG, Path::new("t.toml"), &|_| None)
        .unwrap_or_else(|e| panic!("{e}"));
    let acks = Acks::new();
    let sink =
        S3Sink::new(&config.sinks[0], 0, false, acks.clone()).unwrap_or_else(|e| panic!("{e}"));
    (sink, acks)
}

fn batch(offsets: std::ops::Range<u64>, len: usize) -> Batch {
    Batch {
        partition: Rc::new(PartitionInfo {
            slot: 0,
            stream: Rc::from("s"),
            topic: Rc::from("t"),
            partition: 1,
        }),
        messages: offsets
            .map(|offset| Message {
                offset,
                id: u128::from(offset),
                timestamp: 1_700_000_000_000_000,
                origin_timestamp: 0,
                payload: Bytes::from(vec![b'x'; len]),
                headers: Bytes::new(),
            })
            .collect(),
    }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
        .enable_timer()
        .build()
        .unwrap_or_else(|e| panic!("monoio runtime: {e}"))
        .block_on(f)
}

/// The open object's first offset and message count on slot 0.
fn open_of(sink: &S3Sink) -> Option<(u64, u64)> {
    let open = sink.parts.first()?.as_ref()?.open.as_ref()?;
    Some((open.first.offset, open.count))
}

fn epoch_of(sink: &S3Sink) -> u64 {
    sink.parts[0].as_ref().map_or(0, |w| w.epoch)
}

/// A failure reported by a task of a partition's earlier writer (the partition was released,
/// then given back) is not the new writer's: its open object stays. One of the current writer
/// drops it, and the next message starts a new object. Without the epoch the first failure
/// would drop the new writer's object, and its messages would wait for a redelivery that the
/// engine, having taken the partition anew, never asks for.
#[test]
fn a_failure_of_an_earlier_writer_does_not_drop_the_current_object() {
    let (mut sink, _acks) = sink();
    block_on(async {
        sink.deliver(batch(0..2, 10))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(open_of(&sink), Some((0, 2)));
        let old = epoch_of(&sink);
        sink.release(0);
        sink.deliver(batch(5..6, 10))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let new = epoch_of(&sink);
        assert_ne!(old, new);

        sink.finisher.events.borrow_mut().push(TaskEvent::Failed {
            slot: 0,
            epoch: old,
        });
        sink.deliver(batch(6..7, 10))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(open_of(&sink), Some((5, 2)), "the earlier writer's failure");

        sink.finisher.events.borrow_mut().push(TaskEvent::Failed {
            slot: 0,
            epoch: new,
        });
        sink.deliver(batch(9..10, 10))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(open_of(&sink), Some((9, 1)), "the current writer's failure");
    });
}

/// A failure that arrives between two messages of a batch stops the batch there: the rest is
/// polled again from the failed object's first offset, so writing it now would put it in an
/// object after the redelivered ones.
#[test]
fn a_failure_arriving_during_a_batch_stops_it_at_the_next_message() {
    let (mut sink, _acks) = sink();
    block_on(async {
        sink.deliver(batch(0..3, 10))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let epoch = epoch_of(&sink);
        sink.finisher
            .events
            .borrow_mut()
            .push(TaskEvent::Failed { slot: 0, epoch });
        // What `deliver` does per message, with the event queued mid-batch.
        assert!(!sink.write_message(0, &batch(3..4, 10).messages[0]).await);
        assert_eq!(open_of(&sink), None, "the open object is dropped");
        assert!(sink.write_message(0, &batch(0..1, 10).messages[0]).await);
        assert_eq!(open_of(&sink), Some((0, 1)));
    });
}

/// A fatal failure a task reported stops the sink at its next call, naming the failure, once.
#[test]
fn a_fatal_task_event_stops_the_sink_at_its_next_call() {
    let (mut sink, _acks) = sink();
    block_on(async {
        sink.finisher
            .events
            .borrow_mut()
            .push(TaskEvent::Fatal("AccessDenied: keys rotated".to_owned()));
        sink.finisher
            .events
            .borrow_mut()
            .push(TaskEvent::Fatal("a later one".to_owned()));
        let e = sink.tick().await.err().map(|e| e.message);
        assert_eq!(
            e.as_deref(),
            Some("sink \"lake\": AccessDenied: keys rotated"),
            "the first fatal failure"
        );
        assert!(sink.tick().await.is_ok(), "reported once");
    });
}

/// The sink pushes what it holds after every change (the engine paces polling by it and never
/// asks): the encoder's output as messages come, nothing once the partition is released or its
/// object dropped for a failure; the peak is the most held at once.
#[test]
fn the_sink_reports_what_it_holds_as_it_changes() {
    let (mut sink, acks) = sink();
    assert!(sink.paced_by_memory());
    block_on(async {
        assert_eq!(
            acks.take_held(),
            None,
            "nothing reported before anything is held"
        );
        sink.deliver(batch(0..4, 100))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            acks.take_held(),
            Some(404),
            "four raw payloads of 100 bytes, each with its newline"
        );
        assert_eq!(acks.take_held(), None, "no change since");
        sink.deliver(batch(4..5, 50))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(acks.take_held(), Some(455));
        sink.release(0);
        assert_eq!(
            acks.take_held(),
            Some(0),
            "a released partition holds nothing"
        );

        sink.deliver(batch(0..2, 100))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(acks.take_held(), Some(202));
        let epoch = epoch_of(&sink);
        sink.finisher
            .events
            .borrow_mut()
            .push(TaskEvent::Failed { slot: 0, epoch });
        sink.tick().await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(acks.take_held(), Some(0), "a dropped object holds nothing");
        assert_eq!(sink.status().buffered_peak, 455);
    });
}
