//! The sink's own bookkeeping, without a store: what the completion tasks report and what the
//! sink reports it holds. Nothing here reaches the network (the endpoint is a loopback port
//! nobody listens on, and no object grows past its first part, so no request is made).

use std::path::Path;

use super::marker::parse_marker;
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
            slot: Slot(0),
            stream: Rc::from("s"),
            topic: Rc::from("t"),
            partition: PartitionId(1),
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

/// A hold on a marker, for the tests.
fn fence() -> Fence {
    Fence {
        owner: "me".to_owned(),
        epoch: 3,
        etag: None,
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
    let open = sink.parts.first()?.as_ref()?.open(0)?;
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
        sink.release(Slot(0));
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
        sink.release(Slot(0));
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

/// [`CONFIG`] (json_lines) with a key split by the `region` header, two objects open at most.
fn split_config() -> String {
    CONFIG.replace(
        "format = \"raw\"\n",
        "key = \"{header.region}/{partition}-{first_offset}.{ext}\"\nmax_open_objects = 2\n",
    )
}

fn split_sink(extra: &str) -> (S3Sink, Acks) {
    let mut text = format!("{}{extra}\n", split_config());
    if extra.contains("max_open_objects") {
        text = text.replacen("max_open_objects = 2\n", "", 1);
    }
    let config = crate::config::parse(&text, Path::new("t.toml"), &|_| None)
        .unwrap_or_else(|e| panic!("{e}"));
    let acks = Acks::new();
    let sink =
        S3Sink::new(&config.sinks[0], 0, false, acks.clone()).unwrap_or_else(|e| panic!("{e}"));
    (sink, acks)
}

/// Messages at `offsets` with the header `region` from `regions` (by offset, cycled).
fn regional(offsets: std::ops::Range<u64>, regions: &[&str]) -> Batch {
    let mut b = batch(offsets, 10);
    for m in &mut b.messages {
        let r = regions[(m.offset as usize) % regions.len()];
        m.headers = crate::message::encode_headers(&[("region", r)]);
    }
    b
}

/// The open objects of slot 0: (values, first offset, count), by first offset.
fn opens_of(sink: &S3Sink) -> Vec<(Vec<String>, u64, u64)> {
    let mut v: Vec<_> = sink
        .parts
        .first()
        .and_then(Option::as_ref)
        .map(|w| {
            w.lanes
                .iter()
                .filter_map(|l| {
                    let o = l.open.as_ref()?;
                    Some((l.split.clone(), o.first.offset, o.count))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort_by_key(|o| o.1);
    v
}

fn ledger_of(sink: &S3Sink) -> std::cell::Ref<'_, Ledger> {
    match sink.parts[0].as_ref() {
        Some(w) => w.shared.ledger.borrow(),
        None => panic!("no writer"),
    }
}

fn values(v: &str) -> Vec<String> {
    vec![v.to_owned()]
}

fn confirmed(acks: &Acks) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    acks.drain_into(&mut out);
    out.into_iter()
        .filter(|a| a.outcome == crate::acks::Outcome::Confirmed)
        .map(|a| (a.first.0, a.last.0))
        .collect()
}

/// A key with a header field keeps one open object per value, each holding only its own
/// messages; a third value while `max_open_objects` (2) are open closes the oldest first.
/// The watermark stays before the oldest object not complete, closing ones included.
#[test]
fn a_key_that_splits_keeps_one_open_object_per_value_and_closes_the_oldest_for_a_new_one() {
    let (mut sink, _acks) = split_sink("");
    block_on(async {
        sink.deliver(regional(0..4, &["eu", "us"]))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            opens_of(&sink),
            [(values("eu"), 0, 2), (values("us"), 1, 2)],
            "eu holds 0 and 2, us holds 1 and 3"
        );
        assert_eq!(
            ledger_of(&sink).watermark(),
            None,
            "offset 0 is in an open object"
        );
        sink.deliver(regional(4..5, &["ap"]))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            opens_of(&sink),
            [(values("us"), 1, 2), (values("ap"), 4, 1)],
            "eu, the oldest, was closed for ap"
        );
        let ledger = ledger_of(&sink);
        assert_eq!(
            ledger.unsettled.iter().copied().collect::<Vec<_>>(),
            [0, 1, 4],
            "eu's object is closing, not complete"
        );
        assert_eq!(ledger.watermark(), None);
        assert_eq!(ledger.handed, Some(4));
    });
}

/// A partition running `max_split_lag` messages past its oldest open object closes it (else
/// a rare value would hold the watermark, and the engine's tracking of every message past it,
/// without bound).
#[test]
fn the_oldest_object_is_closed_once_the_partition_runs_max_split_lag_past_it() {
    let (mut sink, _acks) = split_sink("max_split_lag = 10");
    block_on(async {
        sink.deliver(regional(0..1, &["rare"]))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        sink.deliver(regional(1..10, &["common"]))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            opens_of(&sink),
            [(values("rare"), 0, 1), (values("common"), 1, 9)]
        );
        sink.deliver(regional(10..11, &["common"]))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            opens_of(&sink),
            [(values("common"), 1, 10)],
            "offset 10 is 10 past rare's first: rare is closed"
        );
    });
}

/// A message of values whose complete object already holds it (a redelivery after a failure,
/// or a restart before the marker's watermark passed it) is settled without being written;
/// what the watermark passes is confirmed once per batch.
#[test]
fn messages_in_a_complete_object_of_their_values_are_confirmed_without_being_written() {
    let (mut sink, acks) = split_sink("");
    sink.resumed.insert(
        (Rc::from("s"), Rc::from("t"), 1),
        (
            Marker {
                last: Some(1),
                done: [(values("us"), 5)].into_iter().collect(),
                ..Marker::default()
            },
            fence(),
        ),
    );
    block_on(async {
        sink.deliver(regional(2..6, &["us"]))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(opens_of(&sink), [], "2..=5 are in us's complete object");
        assert_eq!(confirmed(&acks), [(0, 5)]);
        sink.deliver(regional(6..8, &["us", "eu"]))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            opens_of(&sink),
            [(values("us"), 6, 1), (values("eu"), 7, 1)]
        );
        assert_eq!(confirmed(&acks), [], "6 and 7 are in open objects");
    });
}

/// A message without the key's header goes to `on_error`, named; under `fail` the watermark
/// never passes it (the engine stops there), under `skip` it is settled.
#[test]
fn a_message_without_the_split_field_goes_to_on_error_and_fail_holds_the_watermark() {
    for (policy, watermark) in [("fail", None), ("skip", Some(0))] {
        let text = split_config().replace(
            "source = \"generate\"",
            &format!("source = \"generate\"\non_error = \"{policy}\""),
        );
        let config = crate::config::parse(&text, Path::new("t.toml"), &|_| None)
            .unwrap_or_else(|e| panic!("{e}"));
        let acks = Acks::new();
        let mut sink =
            S3Sink::new(&config.sinks[0], 0, false, acks.clone()).unwrap_or_else(|e| panic!("{e}"));
        block_on(async {
            sink.deliver(batch(0..1, 10))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        });
        let mut out = Vec::new();
        acks.drain_into(&mut out);
        let failed = out.iter().find_map(|a| match &a.outcome {
            crate::acks::Outcome::Failed(r) => Some(r.clone()),
            _ => None,
        });
        assert!(
            failed
                .as_deref()
                .is_some_and(|r| r.contains("header \"region\"")),
            "{policy}: {out:?}"
        );
        assert_eq!(ledger_of(&sink).watermark(), watermark, "{policy}");
    }
}

/// The ledger's watermark is before its oldest unsettled first offset, or the last offset
/// taken; a reset after a failure starts delivery again just past it and counts nothing past.
#[test]
fn the_ledger_watermark_and_its_reset() {
    let mut l = Ledger::default();
    assert_eq!(l.watermark(), None);
    l.handed = Some(9);
    assert_eq!(l.watermark(), Some(9));
    l.unsettled.extend([7, 3]);
    assert_eq!(l.watermark(), Some(2));
    l.done.insert(values("a"), 2);
    l.done.insert(values("b"), 8);
    l.prune();
    assert_eq!(l.done.len(), 1, "a's mark is at the watermark: forgotten");
    assert_eq!(l.reset(), 3);
    assert_eq!((l.watermark(), l.generation), (Some(2), 1));
    assert!(l.unsettled.is_empty());
    let acks = Acks::new();
    l.advance(&acks, 0);
    l.advance(&acks, 0);
    l.handed = Some(4);
    l.advance(&acks, 0);
    assert_eq!(
        confirmed(&acks),
        [(0, 2), (3, 4)],
        "each offset confirmed once"
    );
    l.unsettled.insert(0);
    assert_eq!(l.watermark(), None, "offset 0 unsettled: nothing is");
}

/// Markers: the watermark (or null), and the split marks past it, sorted; an earlier run's
/// marker without marks reads as it did; a damaged one is named.
#[test]
fn markers_round_trip_and_damaged_ones_are_named() {
    let mut l = Ledger::default();
    l.unsettled.insert(10);
    l.done.insert(values("z"), 30);
    l.done.insert(vec!["a".to_owned(), "\"q\"".to_owned()], 20);
    l.done.insert(values("old"), 4);
    l.claims.push(Claim {
        first: 10,
        last: 12,
        values: values("b"),
        key: "k/\"10\"".to_owned(),
    });
    let m = Marker::of(&l, &fence(), Some(30));
    let json = m.to_json("k/1");
    assert_eq!(
        String::from_utf8_lossy(&json),
        r#"{"last_offset":9,"object":"k/1","owner":"me","epoch":3,"claims":[{"first":10,"last":12,"key":"k/\"10\"","values":["b"]}],"split":[{"values":["a","\"q\""],"last_offset":20},{"values":["z"],"last_offset":30}]}"#
    );
    assert_eq!(
        parse_marker(&json),
        Ok(Marker {
            object: "k/1".to_owned(),
            ..m
        })
    );
    assert_eq!(
        parse_marker(br#"{"last_offset":149,"object":"c/x"}"#),
        Ok(Marker {
            last: Some(149),
            object: "c/x".to_owned(),
            ..Marker::default()
        }),
        "a marker from before fencing: epoch 0 of nobody"
    );
    assert_eq!(
        parse_marker(br#"{"last_offset":null,"object":"c/x"}"#).map(|m| m.last),
        Ok(None)
    );
    for (body, says) in [
        (&br#"{"object":"c/x"}"#[..], "no last_offset"),
        (br#"{"last_offset":1,"split":{}}"#, "not a list"),
        (
            br#"{"last_offset":1,"split":[{"values":[1],"last_offset":2}]}"#,
            "values",
        ),
        (
            br#"{"last_offset":1,"split":[{"values":["a"]}]}"#,
            "last_offset",
        ),
        (b"{", "not JSON"),
        (
            br#"{"last_offset":1,"claims":[{"first":5,"last":4,"key":"k","values":[]}]}"#,
            "5..=4",
        ),
        (
            br#"{"last_offset":1,"claims":[{"first":5,"last":6,"values":[]}]}"#,
            "key",
        ),
        (br#"{"last_offset":1,"epoch":"x"}"#, "epoch"),
    ] {
        let e = parse_marker(body).unwrap_err();
        assert!(e.contains(says), "{e}");
    }
}

/// Lanes upload only once they hold a part: many lanes each holding most of one would hold
/// many part windows per partition, past what the shard's budget is sized for, and wait for
/// messages the engine does not poll while that budget is full. Together they hold at most
/// one window (here 5 MiB x 2) plus a message: the lane holding the most is closed past it.
#[test]
fn the_lanes_of_a_partition_together_hold_at_most_one_part_window() {
    let (mut sink, _acks) = split_sink(
        "max_open_objects = 8\npart_size = \"5MiB\"\nparts_in_flight = 1\nformat = \"raw\"",
    );
    let regions = ["a", "b", "c", "d", "e", "f", "g", "h"];
    let window = 10u64 << 20;
    let message = 1u64 << 20;
    let mut peak = 0;
    let mut closed = 0;
    block_on(async {
        for n in 0..40u64 {
            let mut b = batch(n..n + 1, message as usize);
            b.messages[0].headers =
                crate::message::encode_headers(&[("region", regions[n as usize % 8])]);
            let before = opens_of(&sink).len();
            sink.deliver(b).await.unwrap_or_else(|e| panic!("{e}"));
            let counted = sink.parts[0].as_ref().map_or(0, |w| w.counted);
            peak = peak.max(counted);
            if opens_of(&sink).len() <= before && n >= 8 {
                closed += 1;
            }
        }
    });
    assert!(
        peak <= window + message + 1,
        "the lanes held {peak} bytes, more than a window ({window}) and a message"
    );
    assert!(closed > 0, "no lane was closed for the window");
}
