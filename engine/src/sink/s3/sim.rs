//! A seeded simulation of the S3 sink's ownership protocol (docs/architecture.md, "Ownership
//! and fencing"): members of a consumer group write one partition through a model store with
//! conditional writes, using the sink's own decisions ([`Ledger::place`], claims and
//! watermarks, [`Marker`] bodies as JSON, [`Fence::refused`]). Handovers with the old owner
//! still believing it owns the partition (a pause, a cut from Iggy), crashes, store failures,
//! lost replies and idle closes come in a random order. After every step: no offset is in two
//! complete objects, a key is never written with other content, the marker's watermark never
//! moves back, and every offset up to Iggy's stored offset and up to the marker's watermark is
//! in a complete object. At the end the owner writes everything: every offset in exactly one
//! object.
//!
//! Each run takes fresh seeds (printed); `SPILLWAY_S3_SIM_SEED=N` replays one.

use std::collections::{BTreeMap, VecDeque};

use super::ledger::{Claim, Ledger, Place};
use super::marker::{Fence, Marker, Refused, parse_marker};

/// The store: complete objects by key (their offsets), and the marker with its ETag.
#[derive(Default)]
struct Store {
    objects: BTreeMap<String, Vec<u64>>,
    marker: Option<(Vec<u8>, String)>,
    etags: u64,
}

impl Store {
    /// PutObject of the marker under a condition: the new ETag, or `None` for 412.
    fn put_marker(&mut self, body: Vec<u8>, if_match: Option<&str>) -> Option<String> {
        let holds = match (&self.marker, if_match) {
            (None, None) => true,
            (Some((_, etag)), Some(want)) => etag == want,
            _ => false,
        };
        if !holds {
            return None;
        }
        self.etags += 1;
        let etag = format!("e{}", self.etags);
        self.marker = Some((body, etag.clone()));
        Some(etag)
    }

    fn get_marker(&self) -> Option<(Marker, String)> {
        let (body, etag) = self.marker.as_ref()?;
        let marker = parse_marker(body).unwrap_or_else(|e| panic!("a damaged marker: {e}"));
        Some((marker, etag.clone()))
    }

    /// An object written with `If-None-Match: *`: `false` for 412. A refused write must carry
    /// what the key holds (only claimants of one range write a key).
    fn put_object(&mut self, key: &str, offsets: &[u64]) -> bool {
        if let Some(held) = self.objects.get(key) {
            assert_eq!(
                held, offsets,
                "{key} is written again with other offsets (it holds {held:?})"
            );
            return false;
        }
        self.objects.insert(key.to_owned(), offsets.to_vec());
        true
    }
}

/// An open object of one set of values.
struct Obj {
    offsets: Vec<u64>,
    claim: Option<Claim>,
    /// Free objects close after this many messages.
    size: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Step {
    Claim,
    Complete,
    Advance,
}

/// A closed object's completion, one step at a time, after the tasks before it.
struct Task {
    claim: Claim,
    offsets: Vec<u64>,
    generation: u64,
    step: Step,
}

/// A member's writer of the partition.
struct Writer {
    ledger: Ledger,
    fence: Fence,
    next: u64,
    open: BTreeMap<Vec<String>, Obj>,
    tasks: VecDeque<Task>,
    /// The engine released the partition: nothing is delivered, the tasks run on.
    released: bool,
}

struct Member {
    id: String,
    /// It believes it owns the partition (Iggy dealt it this member, and it has not learned
    /// otherwise).
    believes: bool,
    writer: Option<Writer>,
    /// Fenced: the engine takes the partition up anew (a takeover, then delivery from the
    /// later of the stored offset and the marker) before the next delivery.
    retake: bool,
}

/// How a marker write ended.
enum Wrote {
    Ok,
    Fenced,
    Failed,
}

struct Sim {
    rng: fastrand::Rng,
    store: Store,
    members: Vec<Member>,
    /// Iggy: who owns the partition, and its stored offset.
    owner: usize,
    stored: Option<u64>,
    /// Messages in the partition so far, and in all.
    produced: u64,
    total: u64,
    values: Vec<Vec<String>>,
    /// The highest watermark the marker had.
    high: Option<u64>,
    restarts: u64,
    /// As the sink does: a completed object's marker write is left to the next object's
    /// claim when one waits (off in some runs: every object written twice into the marker).
    skip_advance: bool,
    log: Vec<String>,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = fastrand::Rng::with_seed(seed);
        let total = rng.u64(20..160);
        let split = rng.bool();
        let values = (0..total)
            .map(|_| {
                if split {
                    vec![["a", "b", "c"][rng.usize(0..3)].to_owned()]
                } else {
                    Vec::new()
                }
            })
            .collect();
        let members = (0..2)
            .map(|i| Member {
                id: format!("m{i}"),
                believes: i == 0,
                writer: None,
                retake: true,
            })
            .collect();
        Sim {
            rng,
            store: Store::default(),
            members,
            owner: 0,
            stored: None,
            produced: 0,
            total,
            values,
            high: None,
            restarts: 0,
            skip_advance: !seed.is_multiple_of(4),
            log: Vec::new(),
        }
    }

    /// A takeover: the marker read and written back with this member as owner, next epoch.
    fn take_over(&mut self, m: usize) {
        let (old, etag) = match self.store.get_marker() {
            Some((m, e)) => (m, Some(e)),
            None => (Marker::default(), None),
        };
        let id = self.members[m].id.clone();
        let new = old.taken_over_by(&id);
        let Some(etag) = self
            .store
            .put_marker(new.to_json(&old.object), etag.as_deref())
        else {
            return;
        };
        let mut ledger = Ledger {
            done: new.done.clone(),
            claims: new.claims.clone(),
            floor: new.last,
            ..Ledger::default()
        };
        ledger.prune();
        // The engine starts after the later of Iggy's stored offset and the marker, and
        // stores the marker's at its next commit.
        let next = self.stored.max(new.last).map_or(0, |o| o + 1);
        if self.owner == m {
            self.stored = self.stored.max(new.last);
        }
        self.log.push(format!(
            "{id} takes over at epoch {} from {next} ({} claims)",
            new.epoch,
            new.claims.len()
        ));
        let member = &mut self.members[m];
        member.retake = false;
        member.writer = Some(Writer {
            ledger,
            fence: Fence {
                owner: id,
                epoch: new.epoch,
                etag: Some(etag),
            },
            next,
            open: BTreeMap::new(),
            tasks: VecDeque::new(),
            released: false,
        });
    }

    fn deliver(&mut self, m: usize) {
        if self.members[m].retake {
            self.take_over(m);
            return;
        }
        let size = self.rng.usize(1..6);
        let produced = self.produced;
        let Some(w) = self.members[m].writer.as_mut() else {
            return;
        };
        if w.released || w.next >= produced {
            return;
        }
        let offset = w.next;
        let values = self.values[offset as usize].clone();
        let open = w.open.get(&values).map(|o| o.claim.as_ref());
        match w.ledger.place(&values, offset, open) {
            Place::Settled => {
                w.ledger.handed = Some(offset);
                w.next += 1;
                self.confirm(m);
            }
            Place::CloseOpen => self.close(m, &values),
            place => {
                let claim = match place {
                    Place::Claim(c) => Some(c),
                    _ => None,
                };
                let obj = w.open.entry(values.clone()).or_insert_with(|| {
                    w.ledger.unsettled.insert(offset);
                    Obj {
                        offsets: Vec::new(),
                        claim: claim.clone(),
                        size,
                    }
                });
                obj.offsets.push(offset);
                let full = match &claim {
                    Some(c) => offset >= c.last,
                    None => obj.offsets.len() >= obj.size,
                };
                w.ledger.handed = Some(offset);
                w.next += 1;
                if full {
                    self.close(m, &values);
                }
            }
        }
    }

    /// The sink confirms what the watermark passed; the engine stores it if Iggy still deals
    /// the partition to this member.
    fn confirm(&mut self, m: usize) {
        let member = &mut self.members[m];
        let Some(w) = member.writer.as_mut() else {
            return;
        };
        let confirmed = w.ledger.watermark();
        w.ledger.confirmed = confirmed;
        if self.owner == m && member.believes && !w.released {
            self.stored = self.stored.max(confirmed);
        }
    }

    fn close(&mut self, m: usize, values: &[String]) {
        let Some(w) = self.members[m].writer.as_mut() else {
            return;
        };
        let Some(obj) = w.open.remove(values) else {
            return;
        };
        let (Some(&first), Some(&last)) = (obj.offsets.first(), obj.offsets.last()) else {
            return;
        };
        let key = match &obj.claim {
            Some(c) => c.key.clone(),
            None => format!("{}-{first:05}", values.join(".")),
        };
        let generation = w.ledger.generation;
        w.tasks.push_back(Task {
            claim: Claim {
                first,
                last,
                values: values.to_vec(),
                key,
            },
            offsets: obj.offsets,
            generation,
            step: Step::Claim,
        });
    }

    /// The marker written from the ledger, over this member's last version; a refusal is
    /// looked into as the sink does.
    fn write_marker(&mut self, m: usize, newest: Option<u64>) -> Wrote {
        let fail = self.rng.u32(0..20) == 0;
        let lose_reply = self.rng.u32(0..10) == 0;
        let Some(w) = self.members[m].writer.as_mut() else {
            return Wrote::Failed;
        };
        for _ in 0..4 {
            let marker = Marker::of(&w.ledger, &w.fence, newest);
            let body = marker.to_json("");
            if fail {
                return Wrote::Failed;
            }
            match self.store.put_marker(body.clone(), w.fence.etag.as_deref()) {
                Some(etag) if !lose_reply => {
                    w.fence.etag = Some(etag);
                    w.ledger.recorded();
                    if self.high.is_some_and(|h| marker.last < Some(h)) {
                        panic!(
                            "the marker moved back from {:?} to {:?}",
                            self.high, marker.last
                        );
                    }
                    self.high = self.high.max(marker.last);
                    return Wrote::Ok;
                }
                // Applied, its answer lost: the client's retry is refused.
                Some(_) => {}
                None => {}
            }
            let Some((stored, etag)) = self.store.get_marker() else {
                return Wrote::Fenced;
            };
            match w.fence.refused(&stored) {
                Refused::Ours => {
                    w.fence.etag = Some(etag);
                    if stored.to_json("") == body {
                        w.ledger.recorded();
                        self.high = self.high.max(stored.last);
                        return Wrote::Ok;
                    }
                }
                Refused::TakenOver { .. } => return Wrote::Fenced,
            }
        }
        Wrote::Failed
    }

    /// The next step of the member's oldest completion task.
    fn run_task(&mut self, m: usize) {
        let store_fails = self.rng.u32(0..15) == 0;
        let skip_advance = self.skip_advance;
        let Some(w) = self.members[m].writer.as_mut() else {
            return;
        };
        let Some(task) = w.tasks.front() else {
            return;
        };
        let (claim, step, generation) = (task.claim.clone(), task.step, task.generation);
        let outcome = match step {
            Step::Claim => {
                if w.ledger.add_claim(claim.clone()) {
                    self.write_marker(m, None)
                } else {
                    Wrote::Ok
                }
            }
            Step::Complete => {
                if store_fails {
                    Wrote::Failed
                } else {
                    let offsets = task.offsets.clone();
                    // Written, or refused: a claimant of this range wrote it.
                    self.store.put_object(&claim.key, &offsets);
                    Wrote::Ok
                }
            }
            // The next object's claim carries this one's completion.
            Step::Advance if skip_advance && w.tasks.len() > 1 => {
                w.ledger.completed(&claim, generation);
                Wrote::Ok
            }
            Step::Advance => {
                w.ledger.completed(&claim, generation);
                match self.write_marker(m, Some(claim.last)) {
                    // The claim stays in the marker: the object counts as complete.
                    Wrote::Failed => Wrote::Ok,
                    wrote => wrote,
                }
            }
        };
        let Some(w) = self.members[m].writer.as_mut() else {
            return;
        };
        match outcome {
            Wrote::Ok => {
                let done = match w.tasks.front_mut() {
                    Some(t) if t.step == Step::Claim => {
                        t.step = Step::Complete;
                        false
                    }
                    Some(t) if t.step == Step::Complete => {
                        t.step = Step::Advance;
                        false
                    }
                    _ => true,
                };
                if done {
                    w.tasks.pop_front();
                    self.confirm(m);
                }
            }
            Wrote::Fenced => {
                self.log.push(format!("{} fenced", self.members[m].id));
                self.members[m].writer = None;
                self.members[m].retake = true;
            }
            Wrote::Failed => {
                // The partition is written again from its watermark; the claims stay.
                let from = w.ledger.reset();
                w.open.clear();
                w.tasks.clear();
                w.next = from;
            }
        }
    }

    fn step(&mut self) {
        let m = self.rng.usize(0..self.members.len());
        match self.rng.u32(0..100) {
            0..=34 if self.members[m].believes => self.deliver(m),
            35..=64 => self.run_task(m),
            65..=74 => self.produced = (self.produced + self.rng.u64(1..8)).min(self.total),
            75..=80 => {
                // Idle: a free object closes.
                let free: Vec<Vec<String>> = self.members[m]
                    .writer
                    .as_ref()
                    .map(|w| {
                        w.open
                            .iter()
                            .filter(|(_, o)| o.claim.is_none())
                            .map(|(v, _)| v.clone())
                            .collect()
                    })
                    .unwrap_or_default();
                if let Some(v) = free.first() {
                    self.close(m, v);
                }
            }
            81..=84 => {
                // Iggy deals the partition to another member; the old one goes on believing
                // it owns it until it learns (a pause, a cut from Iggy).
                let to = (self.owner + 1) % self.members.len();
                self.log
                    .push(format!("handover to {}", self.members[to].id));
                self.owner = to;
                self.members[to].believes = true;
                self.members[to].retake = true;
            }
            // A member learns it lost the partition: released, its tasks run on.
            85..=89 if self.owner != m && self.members[m].believes => {
                self.members[m].believes = false;
                if let Some(w) = self.members[m].writer.as_mut() {
                    w.released = true;
                    w.open.clear();
                }
            }
            90..=92 => {
                // A crash: everything of the member is gone; it comes back as a new owner id.
                self.restarts += 1;
                let member = &mut self.members[m];
                self.log.push(format!("{} crashes", member.id));
                member.id = format!("m{m}r{}", self.restarts);
                member.writer = None;
                member.retake = true;
                member.believes = self.owner == m;
            }
            _ => {}
        }
        self.check();
    }

    /// Every offset up to Iggy's stored offset and the marker's watermark is in exactly one
    /// complete object, and no offset is in two.
    fn check(&self) {
        let mut seen = BTreeMap::new();
        for (key, offsets) in &self.store.objects {
            for o in offsets {
                if let Some(other) = seen.insert(*o, key) {
                    panic!("offset {o} is in {other} and in {key}");
                }
            }
        }
        let marker = self.store.get_marker().and_then(|(m, _)| m.last);
        for upto in [self.stored, marker].into_iter().flatten() {
            for o in 0..=upto {
                assert!(
                    seen.contains_key(&o),
                    "offset {o} is in no object, but the stored offset is {:?} and the \
                     marker's {marker:?}",
                    self.stored
                );
            }
        }
    }

    /// The zombies learn, the owner writes everything and completes it.
    fn finish(&mut self) {
        self.produced = self.total;
        for (i, member) in self.members.iter_mut().enumerate() {
            if i != self.owner {
                member.believes = false;
                member.writer = None;
            }
        }
        let m = self.owner;
        self.members[m].believes = true;
        for _ in 0..100_000 {
            let idle = self.members[m]
                .writer
                .as_ref()
                .is_some_and(|w| w.next >= self.total && w.tasks.is_empty() && w.open.is_empty());
            if idle && self.stored == Some(self.total - 1) {
                break;
            }
            let open: Vec<Vec<String>> = self.members[m]
                .writer
                .as_ref()
                .filter(|w| w.next >= self.total)
                .map(|w| w.open.keys().cloned().collect())
                .unwrap_or_default();
            for v in open {
                self.close(m, &v);
            }
            self.deliver(m);
            self.run_task(m);
            self.check();
        }
        let mut all: Vec<u64> = self.store.objects.values().flatten().copied().collect();
        all.sort_unstable();
        let want: Vec<u64> = (0..self.total).collect();
        assert_eq!(all, want, "every offset in exactly one object at the end");
        let w = self.members[self.owner].writer.as_ref();
        assert_eq!(
            self.stored,
            Some(self.total - 1),
            "the owner's ledger: {:?}; next {:?}; open {:?}; tasks {}",
            w.map(|w| &w.ledger),
            w.map(|w| w.next),
            w.map(|w| w.open.keys().collect::<Vec<_>>()),
            w.map_or(0, |w| w.tasks.len())
        );
    }
}

fn run(seed: u64) {
    let mut sim = Sim::new(seed);
    let steps = sim.rng.usize(200..2000);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for _ in 0..steps {
            sim.step();
        }
        sim.finish();
    }));
    if let Err(e) = result {
        let tail: Vec<&String> = sim.log.iter().rev().take(20).collect();
        eprintln!(
            "seed {seed} failed; replay with SPILLWAY_S3_SIM_SEED={seed}; last events (newest first): {tail:#?}"
        );
        std::panic::resume_unwind(e);
    }
}

#[test]
fn two_writers_through_handovers_crashes_and_lost_replies_keep_every_offset_in_one_object() {
    if let Some(seed) = std::env::var("SPILLWAY_S3_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        eprintln!("replaying seed {seed}");
        run(seed);
        return;
    }
    let base = fastrand::u64(..u64::MAX / 2);
    eprintln!(
        "S3 ownership simulation: seeds {base}..{} (SPILLWAY_S3_SIM_SEED=N replays one)",
        base + 500
    );
    for seed in base..base + 500 {
        run(seed);
    }
}
