//! The flow's rules with a simulated clock: no sockets, no sleeping, `now` is an argument.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::*;
use crate::acks::{Ack, Outcome};
use crate::error::ErrorClass;

pub(super) fn config(source: SourcePlan) -> FlowConfig {
    FlowConfig {
        name: "test".to_owned(),
        stream: Rc::from("s"),
        topic: Rc::from("t"),
        batch_size: 10,
        poll_interval: Duration::from_millis(5),
        window_messages: 40,
        window_bytes: 1 << 20,
        commit_interval: Duration::from_millis(100),
        commit_every: 1_000,
        on_error: ErrorPolicy::Fail,
        start: StartFrom::Earliest,
        pacing: Pacing::Windows,
        tick_interval: Duration::from_millis(100),
        source,
        seed: 7,
    }
}

pub(super) fn iggy(explicit: &[u32], group: bool) -> SourcePlan {
    SourcePlan::Iggy(IggyPlan {
        explicit: explicit.iter().copied().map(PartitionId).collect(),
        group,
        reconnect_min: Duration::from_millis(100),
        reconnect_max: Duration::from_millis(1_600),
        ping_interval: Duration::from_secs(5),
        sync_interval: Duration::from_secs(1),
    })
}

pub(super) fn message(offset: u64, size: usize) -> Message {
    static PAYLOAD: [u8; 256] = [b'x'; 256];
    Message {
        offset,
        id: u128::from(offset),
        timestamp: 0,
        origin_timestamp: 0,
        payload: Bytes::from_static(&PAYLOAD[..size.min(PAYLOAD.len())]),
        headers: Bytes::new(),
    }
}

fn ms(t0: Instant, n: u64) -> Instant {
    t0 + Duration::from_millis(n)
}

fn confirm(slot: Slot, first: u64, last: u64) -> Ack {
    Ack {
        slot,
        first: Offset(first),
        last: Offset(last),
        outcome: Outcome::Confirmed,
    }
}

/// Answers every action that is not a poll or a store as a healthy server would, until the
/// flow asks for one of those (or waits); partitions open with nothing stored.
fn settle(flow: &mut Flow, now: Instant) -> Action {
    for _ in 0..100 {
        match flow.poll_action(now) {
            Action::Connect => flow.handle_connected(now),
            Action::JoinGroup => flow.handle_joined(now),
            Action::Open { partition, .. } => flow.handle_opened(now, partition, Opened::default()),
            Action::Ping => flow.handle_source_ok(now),
            Action::TickSink | Action::Release(_) => {}
            other => return other,
        }
    }
    panic!("the flow kept asking for set-up actions");
}

/// Polls `n` messages of `size` bytes from whatever partition the flow asks for.
fn answer_poll(flow: &mut Flow, now: Instant, action: &Action, n: u64, size: usize) -> u64 {
    let Action::Poll { offset, count, .. } = action else {
        panic!("expected a poll, got {action:?}");
    };
    let n = n.min(u64::from(*count));
    let mut batch: Vec<Message> = (0..n).map(|i| message(offset.0 + i, size)).collect();
    assert!(flow.handle_polled(now, &mut batch, None, None) || n == 0);
    batch.len() as u64
}

#[test]
fn the_window_pauses_polling_and_confirmations_resume_it() {
    let t0 = Instant::now();
    let mut flow = Flow::new(config(iggy(&[1], false)), Budget::new(1 << 30), t0);
    let mut polled = 0;
    // The window holds 40; each poll asks for what fits, at most a batch (10).
    for _ in 0..4 {
        let a = settle(&mut flow, t0);
        polled += answer_poll(&mut flow, t0, &a, 10, 10);
    }
    assert_eq!(polled, 40);
    assert!(
        matches!(settle(&mut flow, t0), Action::Wait { .. }),
        "a full window must not be polled"
    );
    // A quarter of the window (10) confirmed: a useful batch fits again.
    let slot = flow.slot(PartitionId(1)).unwrap();
    flow.handle_sink_event(t0, confirm(slot, 0, 4));
    assert!(
        matches!(settle(&mut flow, t0), Action::Wait { .. }),
        "5 free of 40 is not enough"
    );
    flow.handle_sink_event(t0, confirm(slot, 5, 9));
    let a = settle(&mut flow, t0);
    assert!(
        matches!(
            a,
            Action::Poll {
                offset: Offset(40),
                count: 10,
                ..
            }
        ),
        "{a:?}"
    );
}

#[test]
fn the_shard_budget_pauses_every_runner_on_the_shard() {
    let t0 = Instant::now();
    let budget = Budget::new(1_000);
    let mut a = Flow::new(config(iggy(&[1], false)), Rc::clone(&budget), t0);
    let mut b = Flow::new(config(iggy(&[2], false)), Rc::clone(&budget), t0);
    let poll = settle(&mut a, t0);
    answer_poll(&mut a, t0, &poll, 10, 100);
    assert_eq!(budget.held(), 1_000);
    assert!(
        matches!(settle(&mut b, t0), Action::Wait { .. }),
        "the other runner must wait while the shard is at its budget"
    );
    let slot = a.slot(PartitionId(1)).unwrap();
    a.handle_sink_event(t0, confirm(slot, 0, 0));
    assert_eq!(budget.held(), 900);
    assert!(matches!(settle(&mut b, t0), Action::Poll { .. }));
}

#[test]
fn a_self_paced_sink_is_paced_by_the_bytes_it_reports() {
    let t0 = Instant::now();
    let budget = Budget::new(1_000);
    let mut cfg = config(iggy(&[1], false));
    cfg.pacing = Pacing::SinkBuffered;
    let mut flow = Flow::new(cfg, Rc::clone(&budget), t0);
    let poll = settle(&mut flow, t0);
    // Polled bytes do not count: the sink's own figure does, and the engine's entries of the
    // messages in flight.
    answer_poll(&mut flow, t0, &poll, 10, 500);
    let entries = 10 * crate::ack::ENTRY_BYTES;
    assert_eq!(budget.held(), entries);
    flow.handle_sink_buffered(1_200);
    assert!(matches!(settle(&mut flow, t0), Action::Wait { .. }));
    flow.handle_sink_buffered(300);
    assert_eq!(budget.held(), 300 + entries);
    assert!(matches!(settle(&mut flow, t0), Action::Poll { .. }));
}

#[test]
fn a_self_paced_sink_that_holds_nothing_cannot_make_the_engine_poll_without_end() {
    // A sink that reports no bytes and confirms nothing (it dropped what it was given): the
    // messages in flight fill the budget by their tracker entries and polling stops; a
    // confirmation gives the room back.
    let t0 = Instant::now();
    let budget = Budget::new(100 * crate::ack::ENTRY_BYTES);
    let mut cfg = config(iggy(&[1], false));
    cfg.pacing = Pacing::SinkBuffered;
    let mut flow = Flow::new(cfg, Rc::clone(&budget), t0);
    let mut polled = 0;
    for _ in 0..1_000 {
        match settle(&mut flow, t0) {
            a @ Action::Poll { .. } => polled += answer_poll(&mut flow, t0, &a, 10, 1),
            Action::Wait { .. } => break,
            other => panic!("{other:?}"),
        }
    }
    assert!((100..=110).contains(&polled), "polled {polled}");
    let slot = flow.slot(PartitionId(1)).unwrap();
    flow.handle_sink_event(t0, confirm(slot, 0, 49));
    assert!(matches!(settle(&mut flow, t0), Action::Poll { .. }));
    // Stopping gives everything back.
    flow.handle_mode(t0, Mode::Stop);
    for _ in 0..20 {
        if flow.is_done() {
            break;
        }
        if let Action::Store { slot, offset, .. } = flow.poll_action(t0) {
            flow.handle_stored(t0, slot, offset);
        }
    }
    assert_eq!(budget.held(), 0);
}

#[test]
fn out_of_order_confirmations_store_only_the_contiguous_watermark() {
    let t0 = Instant::now();
    let mut flow = Flow::new(config(iggy(&[1], false)), Budget::new(1 << 30), t0);
    let poll = settle(&mut flow, t0);
    answer_poll(&mut flow, t0, &poll, 10, 1);
    let slot = flow.slot(PartitionId(1)).unwrap();
    flow.handle_sink_event(t0, confirm(slot, 5, 9));
    flow.handle_sink_event(t0, confirm(slot, 1, 3));
    // Past the commit interval: a store is due, but nothing is contiguous from 0 yet.
    let later = ms(t0, 200);
    let a = settle(&mut flow, later);
    assert!(!matches!(a, Action::Store { .. }), "{a:?}");
    flow.handle_sink_event(later, confirm(slot, 0, 0));
    assert_eq!(
        settle(&mut flow, later),
        Action::Store {
            slot,
            partition: PartitionId(1),
            offset: Offset(3)
        }
    );
}

#[test]
fn stores_are_debounced_by_interval_and_by_count() {
    let t0 = Instant::now();
    let mut cfg = config(iggy(&[1], false));
    cfg.commit_every = 20;
    cfg.window_messages = 100;
    let mut flow = Flow::new(cfg, Budget::new(1 << 30), t0);
    let poll = settle(&mut flow, t0);
    answer_poll(&mut flow, t0, &poll, 10, 1);
    let slot = flow.slot(PartitionId(1)).unwrap();
    flow.handle_sink_event(t0, confirm(slot, 0, 4));
    // Before the interval, below the count: no store.
    let a = settle(&mut flow, ms(t0, 50));
    assert!(!matches!(a, Action::Store { .. }), "{a:?}");
    // The interval passed: a store.
    let at = ms(t0, 100);
    let a = settle(&mut flow, at);
    assert_eq!(
        a,
        Action::Store {
            slot,
            partition: PartitionId(1),
            offset: Offset(4)
        }
    );
    flow.handle_stored(at, slot, Offset(4));
    assert_eq!(flow.stored(PartitionId(1)), Some(Offset(4)));
    // 20 confirmations reach the count before the next interval.
    let poll = settle(&mut flow, at);
    answer_poll(&mut flow, at, &poll, 10, 1);
    let poll = settle(&mut flow, at);
    answer_poll(&mut flow, at, &poll, 10, 1);
    flow.handle_sink_event(at, confirm(slot, 5, 23));
    let a = settle(&mut flow, ms(t0, 110));
    assert!(!matches!(a, Action::Store { .. }), "19 is below 20: {a:?}");
    flow.handle_sink_event(at, confirm(slot, 24, 24));
    assert_eq!(
        settle(&mut flow, ms(t0, 110)),
        Action::Store {
            slot,
            partition: PartitionId(1),
            offset: Offset(24)
        }
    );
}

#[test]
fn a_redelivery_rewinds_its_partition_only_and_a_stale_batch_is_dropped() {
    let t0 = Instant::now();
    let mut cfg = config(iggy(&[1, 2], false));
    cfg.window_messages = 1_000;
    let mut flow = Flow::new(cfg, Budget::new(1 << 30), t0);
    for _ in 0..4 {
        let poll = settle(&mut flow, t0);
        answer_poll(&mut flow, t0, &poll, 10, 1);
    }
    let (s1, s2) = (
        flow.slot(PartitionId(1)).unwrap(),
        flow.slot(PartitionId(2)).unwrap(),
    );
    assert_eq!(flow.next_poll(PartitionId(1)), Some(Offset(20)));
    assert_eq!(flow.next_poll(PartitionId(2)), Some(Offset(20)));
    flow.handle_sink_event(t0, confirm(s1, 0, 4));
    // A poll of partition 1 goes out, and while it is under way the sink drops 1's data
    // from 7 on.
    let poll = settle(&mut flow, t0);
    assert!(matches!(poll, Action::Poll { slot, offset: Offset(20), .. } if slot == s1));
    let later = ms(t0, 10);
    flow.handle_sink_event(
        later,
        Ack {
            slot: s1,
            first: Offset(7),
            last: Offset(u64::MAX),
            outcome: Outcome::Redeliver {
                not_before: Some(ms(t0, 50)),
            },
        },
    );
    let mut batch: Vec<Message> = (20..30).map(|o| message(o, 1)).collect();
    assert!(
        !flow.handle_polled(later, &mut batch, None, None),
        "a batch polled before the redelivery was taken continues the dropped data"
    );
    assert!(batch.is_empty());
    assert_eq!(flow.next_poll(PartitionId(1)), Some(Offset(7)));
    assert_eq!(
        flow.next_poll(PartitionId(2)),
        Some(Offset(20)),
        "partition 2 untouched"
    );
    // Until its backoff is over, partition 1 is not polled; partition 2 is.
    let a = settle(&mut flow, later);
    assert!(
        matches!(a, Action::Poll { slot, .. } if slot == s2),
        "{a:?}"
    );
    answer_poll(&mut flow, later, &a, 0, 1);
    let a = settle(&mut flow, ms(t0, 50));
    assert!(
        matches!(a, Action::Poll { slot, offset: Offset(7), .. } if slot == s1),
        "{a:?}"
    );
    assert_eq!(flow.watermark(PartitionId(1)), Some(Offset(4)));
}

#[test]
fn the_reconnect_backoff_grows_to_its_limit_and_resets_once_set_up() {
    let t0 = Instant::now();
    let mut flow = Flow::new(config(iggy(&[1], false)), Budget::new(1 << 30), t0);
    let mut now = t0;
    let mut waits = Vec::new();
    for _ in 0..7 {
        // Connect comes at the time the backoff said, not before.
        let mut at = now;
        loop {
            match flow.poll_action(at) {
                Action::Connect => break,
                Action::Wait { until } => at = until.max(at + Duration::from_millis(1)),
                other => panic!("{other:?}"),
            }
        }
        waits.push(at.duration_since(now));
        now = at;
        flow.handle_source_error(now, EngineError::transient("refused"));
    }
    // Jitter is 0.5x to 1x of 100, 200, 400, 800, 1600, 1600 ms: never past reconnect_max
    // (before, up to 1.5x: 7.4 s seen with reconnect_max = "5s").
    let nominal = [0u64, 100, 200, 400, 800, 1_600, 1_600];
    for (w, n) in waits.iter().zip(nominal) {
        let w = w.as_millis() as u64;
        assert!(w >= n / 2 && w <= n + 5, "waits {waits:?}");
    }
    // Set up at last: the next loss waits about the minimum again.
    let a = loop {
        match flow.poll_action(now) {
            Action::Wait { until } => now = until,
            other => break other,
        }
    };
    assert_eq!(a, Action::Connect);
    flow.handle_connected(now);
    let a = settle(&mut flow, now);
    assert!(matches!(a, Action::Poll { .. }));
    flow.handle_source_error(now, EngineError::transient("lost"));
    let Action::Wait { until } = flow.poll_action(now) else {
        panic!("reconnecting at once after a loss");
    };
    assert!(until.duration_since(now) <= Duration::from_millis(150));
    assert_eq!(flow.stats().borrow().counters.reconnects, 8);
}

#[test]
fn a_permanent_source_error_ends_the_run_with_its_class() {
    let t0 = Instant::now();
    let mut flow = Flow::new(config(iggy(&[1], false)), Budget::new(1 << 30), t0);
    assert_eq!(flow.poll_action(t0), Action::Connect);
    flow.handle_source_error(t0, EngineError::config("wrong protocol"));
    match flow.poll_action(t0) {
        Action::Stop(Err(e)) => assert_eq!(e.class, ErrorClass::Config),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_partition_taken_away_is_drained_and_stored_before_it_is_released() {
    let t0 = Instant::now();
    let mut flow = Flow::new(config(iggy(&[], true)), Budget::new(1 << 30), t0);
    assert_eq!(flow.poll_action(t0), Action::Connect);
    flow.handle_connected(t0);
    assert_eq!(flow.poll_action(t0), Action::JoinGroup);
    flow.handle_joined(t0);
    assert_eq!(flow.poll_action(t0), Action::SyncGroup);
    assert!(flow.handle_assignment(t0, 1, &[PartitionId(1), PartitionId(2)]));
    for _ in 0..2 {
        let poll = settle(&mut flow, t0);
        answer_poll(&mut flow, t0, &poll, 10, 1);
    }
    let s1 = flow.slot(PartitionId(1)).unwrap();
    // The group moves partition 1 to another member while 10 of its messages are in flight.
    let t1 = ms(t0, 1_000);
    assert_eq!(settle(&mut flow, t1), Action::SyncGroup);
    assert!(flow.handle_assignment(t1, 2, &[PartitionId(2)]));
    // Not polled any more, not released while in flight.
    for _ in 0..5 {
        match settle(&mut flow, t1) {
            Action::Poll { slot, .. } => {
                assert_ne!(slot, s1, "a partition taken away must not be polled");
                let mut none = Vec::new();
                flow.handle_polled(t1, &mut none, None, None);
            }
            Action::Release(_) => panic!("released with messages in flight"),
            _ => {}
        }
    }
    flow.handle_sink_event(t1, confirm(s1, 0, 9));
    let t2 = ms(t0, 1_200);
    // Stored first, then released.
    let mut seen = Vec::new();
    loop {
        match flow.poll_action(t2) {
            a @ Action::Store { slot, offset, .. } => {
                seen.push(a.clone());
                flow.handle_stored(t2, slot, offset);
            }
            a @ Action::Release(_) => {
                seen.push(a);
                break;
            }
            Action::Poll { .. } => {
                let mut none = Vec::new();
                flow.handle_polled(t2, &mut none, None, None);
            }
            Action::Wait { .. } => panic!("never released: {seen:?}"),
            _ => {}
        }
    }
    let stored_1 = seen
        .iter()
        .position(|a| matches!(a, Action::Store { slot, offset: Offset(9), .. } if *slot == s1));
    assert!(
        stored_1.is_some_and(|i| i < seen.len() - 1),
        "stored before release: {seen:?}"
    );
    assert_eq!(seen.last(), Some(&Action::Release(s1)));
    assert_eq!(flow.slot(PartitionId(1)), None);
}

/// A consumer-group member assigned `partition` alone (generation 1), after `polls` polls of
/// 5 messages each; its slot.
fn group_member_polled(t0: Instant, partition: PartitionId, polls: usize) -> (Flow, Slot) {
    let mut flow = Flow::new(config(iggy(&[], true)), Budget::new(1 << 30), t0);
    assert_eq!(settle(&mut flow, t0), Action::SyncGroup);
    flow.handle_assignment(t0, 1, &[partition]);
    for _ in 0..polls {
        let poll = settle(&mut flow, t0);
        answer_poll(&mut flow, t0, &poll, 5, 1);
    }
    let slot = flow.slot(partition).unwrap();
    (flow, slot)
}

#[test]
fn a_store_refused_after_the_group_moved_the_partition_gives_it_up() {
    let t0 = Instant::now();
    let (mut flow, slot) = group_member_polled(t0, PartitionId(3), 1);
    flow.handle_sink_event(t0, confirm(slot, 0, 4));
    let t1 = ms(t0, 150);
    let Action::Store { offset, .. } = settle(&mut flow, t1) else {
        panic!("a store is due");
    };
    flow.handle_store_refused(t1, slot, offset);
    // Given up: released (nothing in flight, nothing left to store), not polled.
    assert_eq!(flow.poll_action(t1), Action::Release(slot));
    assert_eq!(flow.slot(PartitionId(3)), None);
    assert!(matches!(settle(&mut flow, t1), Action::Wait { .. }));
}

#[test]
fn a_partition_given_back_before_it_left_stores_what_the_group_refused() {
    // Found by the flow simulation: the refused offset was taken as stored, so a partition
    // the group gave back before it was released never stored its confirmed offsets (Iggy
    // kept an older one until new messages came).
    let t0 = Instant::now();
    let (mut flow, slot) = group_member_polled(t0, PartitionId(3), 2);
    flow.handle_sink_event(t0, confirm(slot, 0, 4));
    let t1 = ms(t0, 150);
    let mut refused = Vec::new();
    // Stores of a partition the group took away are refused: 4 with 5..=9 in flight, then
    // 9 once they are confirmed.
    for (at, last) in [(t1, None), (ms(t0, 300), Some(9))] {
        if let Some(last) = last {
            flow.handle_sink_event(at, confirm(slot, 5, last));
        }
        let Action::Store { offset, .. } = settle(&mut flow, at) else {
            panic!("a store is due");
        };
        flow.handle_store_refused(at, slot, offset);
        refused.push(offset.0);
    }
    assert_eq!(refused, [4, 9]);
    // Given back before it left: its confirmed offsets are stored now.
    let t2 = ms(t0, 400);
    assert!(flow.handle_assignment(t2, 2, &[PartitionId(3)]));
    let t3 = ms(t0, 600);
    let mut stored = None;
    for _ in 0..20 {
        match flow.poll_action(t3) {
            Action::Store { slot, offset, .. } => {
                stored = Some(offset);
                flow.handle_stored(t3, slot, offset);
                break;
            }
            Action::Poll { .. } => {
                let mut none = Vec::new();
                flow.handle_polled(t3, &mut none, None, None);
            }
            Action::Wait { .. } => break,
            _ => {}
        }
    }
    assert_eq!(stored, Some(Offset(9)));
    assert_eq!(flow.stored(PartitionId(3)), Some(Offset(9)));
}

#[test]
fn a_partition_the_sink_gives_up_is_released_then_opened_anew_from_what_the_source_says() {
    let t0 = Instant::now();
    let mut flow = Flow::new(config(iggy(&[], true)), Budget::new(1 << 30), t0);
    assert_eq!(settle(&mut flow, t0), Action::SyncGroup);
    flow.handle_assignment(t0, 1, &[PartitionId(3), PartitionId(4)]);
    for _ in 0..2 {
        let poll = settle(&mut flow, t0);
        answer_poll(&mut flow, t0, &poll, 10, 1);
    }
    let slot = flow.slot(PartitionId(3)).unwrap();
    flow.handle_sink_event(t0, confirm(slot, 0, 4));
    // The sink was fenced in its store: it gives the partition up, to be taken up anew in
    // 50 ms. A batch polled before that is dropped, and the partition is not polled again.
    let poll = settle(&mut flow, t0);
    flow.handle_sink_event(
        t0,
        Ack {
            slot,
            first: Offset(0),
            last: Offset(u64::MAX),
            outcome: Outcome::Reopen {
                not_before: Some(ms(t0, 50)),
            },
        },
    );
    if let Action::Poll {
        slot: s, offset, ..
    } = poll
    {
        let mut batch: Vec<Message> = (offset.0..offset.0 + 5).map(|o| message(o, 1)).collect();
        let kept = flow.handle_polled(t0, &mut batch, None, None);
        assert!(
            s != slot || (!kept && batch.is_empty()),
            "a batch of a given-up partition is delivered"
        );
    }
    // A late confirmation of the given-up writer changes nothing.
    flow.handle_sink_event(t0, confirm(slot, 5, 9));
    for _ in 0..5 {
        match flow.poll_action(ms(t0, 10)) {
            Action::Poll { slot: s, .. } => {
                assert_ne!(s, slot, "a given-up partition is polled");
                let mut none = Vec::new();
                flow.handle_polled(ms(t0, 10), &mut none, None, None);
            }
            a @ (Action::Release(_) | Action::Open { .. }) => panic!("before its time: {a:?}"),
            _ => {}
        }
    }
    // Its time come, it is released first (the sink drops its writer), then opened anew.
    let t1 = ms(t0, 50);
    let mut seen = Vec::new();
    loop {
        match flow.poll_action(t1) {
            a @ Action::Release(_) => seen.push(a),
            a @ Action::Open { .. } => {
                seen.push(a);
                break;
            }
            Action::Poll { .. } => {
                let mut none = Vec::new();
                flow.handle_polled(t1, &mut none, None, None);
            }
            Action::Store { slot, offset, .. } => flow.handle_stored(t1, slot, offset),
            a @ Action::Wait { .. } => panic!("never reopened: {seen:?} then {a:?}"),
            _ => {}
        }
    }
    assert_eq!(
        seen,
        vec![
            Action::Release(slot),
            Action::Open {
                partition: PartitionId(3),
                need_head: false
            }
        ]
    );
    // Opened again from what Iggy stored (7) and the sink's store hold (up to 12): it
    // resumes at 13 with nothing in flight, whatever the old tracker had.
    flow.handle_opened(
        t1,
        PartitionId(3),
        Opened {
            stored: Some(Offset(7)),
            sink_done: Some(Offset(12)),
            head: None,
        },
    );
    assert_eq!(flow.next_poll(PartitionId(3)), Some(Offset(13)));
    assert_eq!(flow.watermark(PartitionId(3)), Some(Offset(12)));
}

#[test]
fn a_partition_the_sink_gives_up_after_the_group_took_it_away_is_only_released() {
    let t0 = Instant::now();
    let mut flow = Flow::new(config(iggy(&[], true)), Budget::new(1 << 30), t0);
    assert_eq!(settle(&mut flow, t0), Action::SyncGroup);
    flow.handle_assignment(t0, 1, &[PartitionId(3)]);
    let poll = settle(&mut flow, t0);
    answer_poll(&mut flow, t0, &poll, 10, 1);
    let slot = flow.slot(PartitionId(3)).unwrap();
    let t1 = ms(t0, 1_000);
    assert_eq!(settle(&mut flow, t1), Action::SyncGroup);
    flow.handle_assignment(t1, 2, &[]);
    flow.handle_sink_event(
        t1,
        Ack {
            slot,
            first: Offset(0),
            last: Offset(u64::MAX),
            outcome: Outcome::Reopen { not_before: None },
        },
    );
    assert_eq!(flow.poll_action(t1), Action::Release(slot));
    assert!(matches!(settle(&mut flow, t1), Action::Wait { .. }));
    assert_eq!(flow.slot(PartitionId(3)), None);
}

#[test]
fn a_local_source_whose_sink_gives_a_partition_up_ends_the_run_with_the_reason() {
    let t0 = Instant::now();
    let mut flow = Flow::new(
        config(SourcePlan::Local(vec![(PartitionId(0), None)])),
        Budget::new(1 << 30),
        t0,
    );
    let poll = settle(&mut flow, t0);
    answer_poll(&mut flow, t0, &poll, 10, 1);
    let slot = flow.slot(PartitionId(0)).unwrap();
    flow.handle_sink_event(
        t0,
        Ack {
            slot,
            first: Offset(0),
            last: Offset(u64::MAX),
            outcome: Outcome::Reopen { not_before: None },
        },
    );
    let mut actions = Vec::new();
    for _ in 0..10 {
        let a = flow.poll_action(t0);
        if matches!(a, Action::Wait { .. }) || flow.is_done() {
            break;
        }
        actions.push(a);
    }
    assert!(flow.is_stopping() || flow.is_done(), "{actions:?}");
}

#[test]
fn the_shutdown_deadline_stores_only_confirmed_offsets() {
    let t0 = Instant::now();
    let mut flow = Flow::new(config(iggy(&[1], false)), Budget::new(1 << 30), t0);
    let poll = settle(&mut flow, t0);
    answer_poll(&mut flow, t0, &poll, 10, 1);
    let slot = flow.slot(PartitionId(1)).unwrap();
    flow.handle_sink_event(t0, confirm(slot, 0, 2));
    flow.handle_sink_event(t0, confirm(slot, 5, 6));
    let deadline = ms(t0, 500);
    flow.handle_mode(t0, Mode::Drain(deadline));
    assert_eq!(flow.poll_action(t0), Action::DrainSink { deadline });
    flow.handle_sink_drained();
    // Before the deadline the flow waits for the rest, polling nothing.
    match flow.poll_action(ms(t0, 10)) {
        Action::Wait { until } => assert!(until <= deadline),
        other => panic!("{other:?}"),
    }
    // At the deadline: the watermark (2) is stored, not the confirmed 5..6, then it stops.
    assert_eq!(
        flow.poll_action(deadline),
        Action::Store {
            slot,
            partition: PartitionId(1),
            offset: Offset(2)
        }
    );
    flow.handle_stored(deadline, slot, Offset(2));
    assert_eq!(flow.poll_action(deadline), Action::Stop(Ok(())));
    assert!(flow.is_done());
}

#[test]
fn a_drain_ends_as_soon_as_everything_is_confirmed() {
    let t0 = Instant::now();
    let mut flow = Flow::new(config(iggy(&[1], false)), Budget::new(1 << 30), t0);
    let poll = settle(&mut flow, t0);
    answer_poll(&mut flow, t0, &poll, 3, 1);
    let slot = flow.slot(PartitionId(1)).unwrap();
    flow.handle_mode(t0, Mode::Drain(ms(t0, 30_000)));
    assert!(matches!(flow.poll_action(t0), Action::DrainSink { .. }));
    flow.handle_sink_drained();
    flow.handle_sink_event(ms(t0, 5), confirm(slot, 0, 2));
    assert!(matches!(
        flow.poll_action(ms(t0, 5)),
        Action::Store {
            offset: Offset(2),
            ..
        }
    ));
}

#[test]
fn a_rejected_message_under_fail_stores_what_is_before_it_and_stops() {
    let t0 = Instant::now();
    let mut flow = Flow::new(config(iggy(&[1], false)), Budget::new(1 << 30), t0);
    let poll = settle(&mut flow, t0);
    answer_poll(&mut flow, t0, &poll, 10, 1);
    let slot = flow.slot(PartitionId(1)).unwrap();
    flow.handle_sink_event(t0, confirm(slot, 0, 3));
    flow.handle_sink_event(
        t0,
        Ack {
            slot,
            first: Offset(4),
            last: Offset(4),
            outcome: Outcome::Failed("topic too long".to_owned()),
        },
    );
    flow.handle_sink_event(t0, confirm(slot, 5, 9));
    assert!(flow.is_stopping());
    assert!(matches!(
        flow.poll_action(t0),
        Action::Store {
            offset: Offset(3),
            ..
        }
    ));
    flow.handle_stored(t0, slot, Offset(3));
    match flow.poll_action(t0) {
        Action::Stop(Err(e)) => {
            assert_eq!(e.class, ErrorClass::Permanent);
            assert!(e.message.contains("offset 4"), "{}", e.message);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn skipped_messages_count_as_done_and_the_watermark_passes_them() {
    let t0 = Instant::now();
    let mut cfg = config(iggy(&[1], false));
    cfg.on_error = ErrorPolicy::Skip;
    let mut flow = Flow::new(cfg, Budget::new(1 << 30), t0);
    let poll = settle(&mut flow, t0);
    answer_poll(&mut flow, t0, &poll, 3, 1);
    let slot = flow.slot(PartitionId(1)).unwrap();
    flow.handle_sink_event(
        t0,
        Ack {
            slot,
            first: Offset(1),
            last: Offset(1),
            outcome: Outcome::Failed("no".to_owned()),
        },
    );
    flow.handle_sink_event(t0, confirm(slot, 0, 0));
    flow.handle_sink_event(t0, confirm(slot, 2, 2));
    assert_eq!(flow.watermark(PartitionId(1)), Some(Offset(2)));
    assert_eq!(flow.stats().borrow().counters.skipped, 1);
}

#[test]
fn a_stored_offset_and_a_sink_marker_decide_where_a_partition_resumes() {
    let t0 = Instant::now();
    let mut cfg = config(iggy(&[1, 2, 3, 4], false));
    cfg.start = StartFrom::Latest;
    let mut flow = Flow::new(cfg, Budget::new(1 << 30), t0);
    assert_eq!(flow.poll_action(t0), Action::Connect);
    flow.handle_connected(t0);
    let found = [
        // Stored 9: resume at 10.
        Opened {
            stored: Some(Offset(9)),
            sink_done: None,
            head: None,
        },
        // Nothing stored, start = latest, head at 99: start at 100.
        Opened {
            stored: None,
            sink_done: None,
            head: Some(Offset(99)),
        },
        // The sink holds up to 20, past the stored 9: start at 21.
        Opened {
            stored: Some(Offset(9)),
            sink_done: Some(Offset(20)),
            head: None,
        },
        // Nothing stored in Iggy (its commit was refused: the partition had moved), the sink
        // holds up to 31, head at 130: the marker is a position, so start at 32; `latest`
        // is for a partition with none (the flow simulation found it skipping 32..=130).
        Opened {
            stored: None,
            sink_done: Some(Offset(31)),
            head: Some(Offset(130)),
        },
    ];
    for f in found {
        let Action::Open {
            partition,
            need_head,
        } = flow.poll_action(t0)
        else {
            panic!("expected an open");
        };
        assert!(need_head);
        flow.handle_opened(t0, partition, f);
    }
    assert_eq!(flow.next_poll(PartitionId(1)), Some(Offset(10)));
    assert_eq!(flow.next_poll(PartitionId(2)), Some(Offset(100)));
    assert_eq!(flow.next_poll(PartitionId(3)), Some(Offset(21)));
    assert_eq!(flow.next_poll(PartitionId(4)), Some(Offset(32)));
    // Iggy still has 9 for it; the sink's 20 is stored at the next commit, with nothing new
    // to poll (before, the flow took 20 as stored and Iggy kept 9: a restart with no new
    // messages never moved it, seen in the S3 SIGKILL test).
    assert_eq!(flow.stored(PartitionId(3)), Some(Offset(9)));
    let later = t0 + Duration::from_secs(60);
    let mut stores = Vec::new();
    for _ in 0..10 {
        match flow.poll_action(later) {
            Action::Store {
                slot,
                partition,
                offset,
            } => {
                stores.push((partition, offset));
                flow.handle_stored(later, slot, offset);
            }
            _ => break,
        }
    }
    assert!(
        stores.contains(&(PartitionId(3), Offset(20))),
        "stores: {stores:?}"
    );
    assert_eq!(flow.stored(PartitionId(3)), Some(Offset(20)));
}

#[test]
fn a_bounded_local_source_drains_once_everything_is_confirmed() {
    let t0 = Instant::now();
    let mut flow = Flow::new(
        config(SourcePlan::Local(vec![(PartitionId(0), Some(Offset(5)))])),
        Budget::new(1 << 30),
        t0,
    );
    let poll = settle(&mut flow, t0);
    answer_poll(&mut flow, t0, &poll, 5, 1);
    let slot = flow.slot(PartitionId(0)).unwrap();
    flow.handle_sink_event(t0, confirm(slot, 0, 4));
    let a = settle(&mut flow, t0);
    // A local source stores nothing remotely, but the flow still asks (the runner answers at
    // once), then drains.
    let a = match a {
        Action::Store { slot, offset, .. } => {
            flow.handle_stored(t0, slot, offset);
            settle(&mut flow, t0)
        }
        other => other,
    };
    assert!(matches!(a, Action::DrainSink { .. }), "{a:?}");
}

#[test]
fn a_runner_that_stops_gives_its_share_of_the_budget_back() {
    let t0 = Instant::now();
    let budget = Budget::new(1 << 30);
    let mut flow = Flow::new(config(iggy(&[1], false)), Rc::clone(&budget), t0);
    let poll = settle(&mut flow, t0);
    answer_poll(&mut flow, t0, &poll, 10, 100);
    assert_eq!(budget.held(), 1_000);
    flow.handle_mode(t0, Mode::Stop);
    assert_eq!(flow.poll_action(t0), Action::Stop(Ok(())));
    assert_eq!(budget.held(), 0);
}

/// The wait after an empty poll starts short and doubles while polls stay empty, up to
/// `poll_interval` (5 ms here); a poll that brings messages is followed by another at once and
/// starts the waits again from the shortest. Before, every empty poll waited the whole interval,
/// so a message that arrived just after one waited up to 5 ms (p50 of poll-to-confirm was the
/// interval at every rate).
#[test]
fn empty_polls_back_off_from_200_us_to_the_poll_interval_and_messages_reset_it() {
    let t0 = Instant::now();
    let mut flow = Flow::new(config(iggy(&[1], false)), Budget::new(1 << 30), t0);
    let mut now = t0;
    let mut waits = Vec::new();
    for _ in 0..8 {
        let a = settle(&mut flow, now);
        answer_poll(&mut flow, now, &a, 0, 10);
        let Action::Wait { until } = settle(&mut flow, now) else {
            panic!("an empty poll is followed by a wait");
        };
        waits.push(until - now);
        now = until;
    }
    let us = |n| Duration::from_micros(n);
    assert_eq!(
        waits,
        [
            us(200),
            us(400),
            us(800),
            us(1_600),
            us(3_200),
            us(5_000),
            us(5_000),
            us(5_000)
        ],
        "doubling from 200 µs, capped at poll_interval"
    );
    // Messages: polled again at once; the next empty poll waits the shortest again.
    let a = settle(&mut flow, now);
    assert_eq!(answer_poll(&mut flow, now, &a, 3, 10), 3);
    assert!(
        matches!(
            settle(&mut flow, now),
            Action::Poll {
                offset: Offset(3),
                ..
            }
        ),
        "a poll that brought messages is followed by another at once"
    );
    let a = settle(&mut flow, now);
    answer_poll(&mut flow, now, &a, 0, 10);
    let Action::Wait { until } = settle(&mut flow, now) else {
        panic!("expected a wait");
    };
    assert_eq!(until - now, us(200), "the back-off starts again");
}

#[test]
fn a_paused_sink_polls_nothing_stores_what_confirms_and_goes_on_when_resumed() {
    let t0 = Instant::now();
    let mut flow = Flow::new(config(iggy(&[1], false)), Budget::new(1 << 30), t0);
    assert_eq!(flow.state(), SinkState::Starting);
    let a = settle(&mut flow, t0);
    assert_eq!(answer_poll(&mut flow, t0, &a, 10, 10), 10);
    assert_eq!(flow.state(), SinkState::Running);
    flow.handle_pause(true, false);
    // Nothing is polled while paused, however long it waits (and it does not spin).
    for step in 1..20 {
        let now = ms(t0, step * 50);
        match settle(&mut flow, now) {
            Action::Wait { until } => assert!(until > now, "the paused flow spins"),
            other => panic!("paused, the flow asked for {other:?}"),
        }
    }
    assert_eq!(flow.state(), SinkState::Paused);
    // What was in flight confirms and is stored.
    let slot = flow.slot(PartitionId(1)).unwrap();
    flow.handle_sink_event(ms(t0, 1_000), confirm(slot, 0, 9));
    let store = settle(&mut flow, ms(t0, 1_200));
    assert_eq!(
        store,
        Action::Store {
            slot,
            partition: PartitionId(1),
            offset: Offset(9)
        }
    );
    flow.handle_stored(ms(t0, 1_200), slot, Offset(9));
    assert!(matches!(
        settle(&mut flow, ms(t0, 1_300)),
        Action::Wait { .. }
    ));
    // A flush is asked of the sink once.
    flow.handle_pause(true, true);
    assert_eq!(settle(&mut flow, ms(t0, 1_400)), Action::FlushSink);
    assert!(matches!(
        settle(&mut flow, ms(t0, 1_400)),
        Action::Wait { .. }
    ));
    flow.handle_pause(false, false);
    assert_eq!(flow.state(), SinkState::Running);
    let a = settle(&mut flow, ms(t0, 1_500));
    assert!(
        matches!(
            a,
            Action::Poll {
                offset: Offset(10),
                ..
            }
        ),
        "{a:?}"
    );
}

#[test]
fn the_state_tells_starting_draining_and_failed() {
    let t0 = Instant::now();
    let mut flow = Flow::new(config(iggy(&[1], false)), Budget::new(1 << 30), t0);
    flow.handle_source_error(t0, EngineError::transient("refused"));
    let _ = flow.poll_action(t0);
    assert_eq!(flow.state(), SinkState::Starting);
    assert_eq!(flow.stats().borrow().source, SourceState::Down);
    assert_eq!(
        flow.stats()
            .borrow()
            .last_error
            .as_ref()
            .map(|e| e.1.as_str()),
        Some("refused")
    );
    let _ = settle(&mut flow, ms(t0, 1_000));
    assert_eq!(flow.stats().borrow().source, SourceState::Up);
    flow.handle_mode(ms(t0, 1_000), Mode::Drain(ms(t0, 2_000)));
    let _ = flow.poll_action(ms(t0, 1_000));
    assert_eq!(flow.state(), SinkState::Draining);
    let mut failing = Flow::new(config(iggy(&[1], false)), Budget::new(1 << 30), t0);
    let _ = settle(&mut failing, t0);
    failing.handle_sink_error(t0, EngineError::permanent("denied"));
    assert_eq!(failing.state(), SinkState::Failed);
    while !matches!(failing.poll_action(t0), Action::Stop(_)) {}
    assert_eq!(failing.state(), SinkState::Failed);
}
