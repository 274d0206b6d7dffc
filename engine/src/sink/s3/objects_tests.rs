//! Every placement and rotation rule, with a simulated clock and lanes built by hand.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use super::*;

/// An open object: first offset, bucket, claim, bytes held, last append.
type TestOpen = (u64, Option<u64>, Option<Claim>, u64, Instant);

#[derive(Debug, Clone)]
struct TestLane {
    split: Vec<String>,
    open: Option<TestOpen>,
}

impl LaneState for TestLane {
    fn split(&self) -> &[String] {
        &self.split
    }

    fn open(&self) -> Option<OpenState<'_>> {
        self.open
            .as_ref()
            .map(|(first, bucket, claim, held, last_append)| OpenState {
                first: *first,
                bucket: *bucket,
                claim: claim.as_ref(),
                held: *held,
                last_append: *last_append,
            })
    }
}

fn rules(splits: bool) -> Rules {
    Rules {
        max_object_size: 1_000,
        max_object_messages: 10,
        idle_flush: Duration::from_secs(3),
        splits,
        max_open_objects: 2,
        max_split_lag: 100,
        max_marks: 4,
        window: 5_000,
    }
}

fn v(s: &str) -> Vec<String> {
    if s.is_empty() {
        Vec::new()
    } else {
        vec![s.to_owned()]
    }
}

fn open(values: &str, first: u64, t: Instant) -> TestLane {
    TestLane {
        split: v(values),
        open: Some((first, None, None, 0, t)),
    }
}

fn claim(values: &str, first: u64, last: u64) -> Claim {
    Claim {
        first,
        last,
        values: v(values),
        key: format!("{values}-{first}"),
    }
}

#[test]
fn a_message_at_or_below_the_floor_or_its_values_newest_object_is_settled() {
    let mut ledger = Ledger {
        floor: Some(9),
        ..Ledger::default()
    };
    ledger.done.insert(v("a"), 20);
    let r = rules(true);
    let lanes: Vec<TestLane> = Vec::new();
    assert_eq!(step(&r, &lanes, &ledger, &v("b"), 9, None), Step::Settled);
    assert_eq!(step(&r, &lanes, &ledger, &v("a"), 20, None), Step::Settled);
    assert_eq!(step(&r, &lanes, &ledger, &v("b"), 10, None), Step::NewLane);
    assert_eq!(
        step(&r, &lanes, &ledger, &v("a"), 21, None),
        Step::NewLane,
        "past its values' newest object"
    );
}

#[test]
fn a_plain_key_writes_into_its_one_lane_and_opens_it_when_closed() {
    let t = Instant::now();
    let r = rules(false);
    let ledger = Ledger::default();
    let none: Vec<TestLane> = Vec::new();
    assert_eq!(step(&r, &none, &ledger, &[], 0, None), Step::NewLane);
    let closed = vec![TestLane {
        split: Vec::new(),
        open: None,
    }];
    assert_eq!(
        step(&r, &closed, &ledger, &[], 0, None),
        Step::Write {
            lane: 0,
            claim: None
        }
    );
    let lanes = vec![open("", 0, t)];
    assert_eq!(
        step(&r, &lanes, &ledger, &[], 5, None),
        Step::Write {
            lane: 0,
            claim: None
        }
    );
}

#[test]
fn a_message_of_the_next_record_interval_closes_the_object_before_it() {
    let t = Instant::now();
    let r = rules(false);
    let ledger = Ledger::default();
    let mut lane = open("", 0, t);
    lane.open.as_mut().unwrap().1 = Some(7);
    let lanes = vec![lane];
    assert_eq!(step(&r, &lanes, &ledger, &[], 5, Some(8)), Step::Close(0));
    assert_eq!(
        step(&r, &lanes, &ledger, &[], 5, Some(7)),
        Step::Write {
            lane: 0,
            claim: None
        }
    );
    assert_eq!(
        step(&r, &lanes, &ledger, &[], 5, None),
        Step::Write {
            lane: 0,
            claim: None
        },
        "without record_interval there are no buckets"
    );
    // An object of a claimed range ignores the interval.
    let mut claimed = lanes.clone();
    claimed[0].open.as_mut().unwrap().2 = Some(claim("", 0, 9));
    let ledger = Ledger {
        claims: vec![claim("", 0, 9)],
        ..Ledger::default()
    };
    assert_eq!(
        step(&r, &claimed, &ledger, &[], 5, Some(8)),
        Step::Write {
            lane: 0,
            claim: Some(claim("", 0, 9))
        }
    );
}

#[test]
fn a_split_key_keeps_a_lane_per_value_up_to_max_open_objects_then_closes_the_oldest() {
    let t = Instant::now();
    let r = rules(true);
    let ledger = Ledger::default();
    let lanes = vec![open("a", 10, t), open("b", 5, t)];
    assert_eq!(
        step(&r, &lanes, &ledger, &v("a"), 12, None),
        Step::Write {
            lane: 0,
            claim: None
        }
    );
    // A third value with two lanes open: the oldest object (b, from 5) closes first.
    assert_eq!(step(&r, &lanes, &ledger, &v("c"), 12, None), Step::Close(1));
    // With one of them closed, c takes that lane.
    let mut freed = lanes.clone();
    freed[1].open = None;
    assert_eq!(
        step(&r, &freed, &ledger, &v("c"), 12, None),
        Step::Write {
            lane: 1,
            claim: None
        }
    );
    // Below the limit, a new lane.
    assert_eq!(
        step(&r, &lanes[..1], &ledger, &v("c"), 12, None),
        Step::NewLane
    );
}

#[test]
fn the_oldest_object_closes_once_the_partition_runs_max_split_lag_past_it_or_marks_pile_up() {
    let t = Instant::now();
    let r = rules(true);
    let mut ledger = Ledger::default();
    let lanes = vec![open("a", 10, t), open("b", 50, t)];
    assert_eq!(
        step(&r, &lanes, &ledger, &v("b"), 109, None),
        Step::Write {
            lane: 1,
            claim: None
        }
    );
    assert_eq!(
        step(&r, &lanes, &ledger, &v("b"), 110, None),
        Step::Close(0)
    );
    for i in 0..=r.max_marks {
        ledger.done.insert(v(&format!("x{i}")), 1);
    }
    assert_eq!(step(&r, &lanes, &ledger, &v("b"), 60, None), Step::Close(0));
}

#[test]
fn a_claimed_range_is_written_whole_into_its_own_object() {
    let t = Instant::now();
    let r = rules(true);
    let ledger = Ledger {
        claims: vec![claim("a", 20, 29)],
        ..Ledger::default()
    };
    // An object of a open before the range closes at its edge.
    let lanes = vec![open("a", 10, t), open("b", 5, t)];
    assert_eq!(step(&r, &lanes, &ledger, &v("a"), 20, None), Step::Close(0));
    // The range begins in a new lane even past max_open_objects, and the lag rule does not
    // close anything for it.
    let others = vec![open("b", 5, t), open("c", 6, t)];
    assert_eq!(step(&r, &others, &ledger, &v("a"), 20, None), Step::NewLane);
    let mut lanes = others.clone();
    lanes.push(TestLane {
        split: Vec::new(),
        open: None,
    });
    assert_eq!(
        step(&r, &lanes, &ledger, &v("a"), 20, None),
        Step::Write {
            lane: 2,
            claim: Some(claim("a", 20, 29))
        }
    );
    // Inside the range, the lane writing it.
    lanes[2] = TestLane {
        split: v("a"),
        open: Some((20, None, Some(claim("a", 20, 29)), 0, t)),
    };
    assert_eq!(
        step(&r, &lanes, &ledger, &v("a"), 25, None),
        Step::Write {
            lane: 2,
            claim: Some(claim("a", 20, 29))
        }
    );
    // Past a range whose last message never came, its object closes.
    let past = Ledger::default();
    assert_eq!(step(&r, &lanes, &past, &v("a"), 31, None), Step::Close(2));
    // When every open object writes a claimed range, one more lane (nothing may close early).
    let all = vec![lanes[2].clone(), lanes[2].clone()];
    assert_eq!(oldest(&all), None);
    assert_eq!(step(&r, &all, &past, &v("z"), 31, None), Step::NewLane);
}

#[test]
fn an_object_is_full_at_its_size_its_count_or_its_claims_end() {
    let r = rules(false);
    assert!(!full(&r, None, 5, 999, 9));
    assert!(full(&r, None, 5, 1_000, 1));
    assert!(full(&r, None, 5, 10, 10));
    let unlimited = Rules {
        max_object_messages: 0,
        ..rules(false)
    };
    assert!(!full(&unlimited, None, 5, 10, 1_000_000));
    let c = claim("", 0, 9);
    assert!(
        !full(&r, Some(&c), 8, 5_000, 500),
        "a claim ignores size and count"
    );
    assert!(full(&r, Some(&c), 9, 1, 1));
    assert!(over_size(&r, None, 1_001));
    assert!(!over_size(&r, None, 1_000));
    assert!(!over_size(&r, Some(&c), 1_000_000));
}

#[test]
fn past_the_part_window_the_fullest_lane_without_a_claim_closes() {
    let t = Instant::now();
    let r = rules(true);
    let mut lanes = vec![open("a", 1, t), open("b", 2, t), open("c", 3, t)];
    lanes[0].open.as_mut().unwrap().3 = 1_000;
    lanes[1].open.as_mut().unwrap().3 = 3_000;
    lanes[2].open.as_mut().unwrap().3 = 4_000;
    lanes[2].open.as_mut().unwrap().2 = Some(claim("c", 3, 9));
    assert_eq!(over_window(&r, &lanes, 5_000), None, "within the window");
    assert_eq!(over_window(&r, &lanes, 8_000), Some(1));
    assert_eq!(
        over_window(&rules(false), &lanes, 8_000),
        None,
        "a plain key has one lane; the upload bounds it"
    );
}

#[test]
fn an_object_idle_for_idle_flush_closes_on_the_simulated_clock() {
    let t0 = Instant::now();
    let r = rules(true);
    let mut lanes = vec![open("a", 1, t0), open("b", 2, t0 + Duration::from_secs(2))];
    lanes.push(TestLane {
        split: v("c"),
        open: Some((3, None, Some(claim("c", 3, 9)), 0, t0)),
    });
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    assert!(idle(&r, &lanes, at(2_999)).is_empty());
    assert_eq!(idle(&r, &lanes, at(3_000)), vec![0]);
    assert_eq!(
        idle(&r, &lanes, at(60_000)),
        vec![0, 1],
        "a claimed range waits for its end"
    );
    let never = Rules {
        idle_flush: Duration::ZERO,
        ..rules(true)
    };
    assert!(idle(&never, &lanes, at(60_000)).is_empty());
}
