//! A partition's writer: its lanes (one open object each), what its completion tasks share
//! with it, and what they report back.

use super::*;
use crate::units::Backoff;

/// An object being written.
pub(super) struct Open {
    /// The first message, without its payload (its time and headers make the key).
    pub(super) first: Message,
    pub(super) last_offset: u64,
    pub(super) count: u64,
    /// `record_interval` bucket of the first message.
    pub(super) bucket: Option<u64>,
    pub(super) last_append: Instant,
    /// Output not handed to an upload yet (until it exceeds a part, or the object closes).
    pub(super) pending: Vec<Bytes>,
    pub(super) pending_len: u64,
    pub(super) upload: Option<ObjectWriter>,
    /// The generation of the partition's [`Ledger`] the object is counted in.
    pub(super) generation: u64,
    /// The marker's claim this object writes (its key and range are fixed: it closes at
    /// the claim's last offset and at no other rotation).
    pub(super) claim: Option<Claim>,
    /// The key, once the upload began.
    pub(super) key: Option<String>,
}

/// One object at a time of a partition: the only one, or under a key that splits
/// ([`key::KeyTemplate::splits`]) the one of a set of values.
pub(super) struct Lane {
    /// The values of the key's header and JSON fields its objects hold (empty when the key
    /// does not split).
    pub(super) split: Vec<String>,
    pub(super) encoder: Encoder,
    pub(super) open: Option<Open>,
}

impl LaneState for Lane {
    fn split(&self) -> &[String] {
        &self.split
    }

    fn open(&self) -> Option<OpenState<'_>> {
        self.open.as_ref().map(|o| OpenState {
            first: o.first.offset,
            bucket: o.bucket,
            claim: o.claim.as_ref(),
            held: self.encoder.held() + o.pending_len,
            last_append: o.last_append,
        })
    }
}

/// What a partition's completion tasks share with its writer.
pub(super) struct Completion {
    /// The next backoff after a failure (doubles up to `retry_max`, reset by a success).
    pub(super) backoff: Cell<Backoff>,
    pub(super) ledger: RefCell<Ledger>,
    /// This member's hold on the partition's marker.
    pub(super) fence: RefCell<Fence>,
    /// Completion tasks waiting for the one before them: while one waits, a completed
    /// object's marker write is left to that one's claim, which carries it.
    pub(super) queued: Cell<u64>,
    /// The writer was released (its partition taken away, or it was dropped after it was
    /// fenced): its tasks finish, but confirm nothing and ask for no redelivery (the slot
    /// may hold another partition now).
    pub(super) retired: Cell<bool>,
    /// `[sink.s3.iceberg]`: the lease the partition was taken up with.
    pub(super) lease: u64,
}

/// What a completion task tells the sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum TaskEvent {
    /// An object (or dead letter) of the writer `epoch` of partition `slot` failed: the
    /// partition is being polled again from its watermark, so that writer's open objects are
    /// dropped. A writer released and made anew has another epoch: the event is not its.
    Failed { slot: usize, epoch: u64 },
    /// Another member took the partition of writer `epoch` of `slot` over in the store: the
    /// writer is dropped (the task gave the partition up to the engine, which takes it up
    /// anew if it still holds it).
    Fenced { slot: usize, epoch: u64 },
    /// A failure no retry can mend: the sink stops with the first.
    Fatal(String),
}

/// The queue from the completion tasks to their sink (shard-local).
pub(super) type TaskEvents = Rc<RefCell<Vec<TaskEvent>>>;

/// One partition's writer.
pub(super) struct PartWriter {
    pub(super) info: Rc<PartitionInfo>,
    /// One lane, or under a key that splits up to `s3.max_open_objects`.
    pub(super) lanes: Vec<Lane>,
    pub(super) shared: Rc<Completion>,
    /// Tells this writer's task events from those of an earlier writer of the same slot.
    pub(super) epoch: u64,
    /// Bytes of this writer's encoder output and pending chunks counted in the sink's total.
    pub(super) counted: u64,
    /// The task completing this partition's latest closed object; the next one waits for it,
    /// so objects complete and markers move in the order they closed.
    pub(super) tail: Option<JoinHandle<bool>>,
    /// An object failed in the writer: its offsets and everything after them are delivered
    /// again once the objects closed before it settle; until then nothing is written.
    pub(super) resetting: bool,
}

impl PartWriter {
    pub(super) fn opens(&self) -> impl Iterator<Item = &Open> {
        self.lanes.iter().filter_map(|l| l.open.as_ref())
    }

    pub(super) fn open(&self, lane: usize) -> Option<&Open> {
        self.lanes.get(lane).and_then(|l| l.open.as_ref())
    }

    pub(super) fn open_mut(&mut self, lane: usize) -> Option<&mut Open> {
        self.lanes.get_mut(lane).and_then(|l| l.open.as_mut())
    }
}

/// Everything a completion task needs, cloned out of the sink.
#[derive(Clone)]
pub(super) struct Finisher {
    pub(super) sink: Rc<str>,
    pub(super) client: Rc<S3Client>,
    pub(super) bucket: Rc<str>,
    /// The options of the small JSON objects the sink writes itself (markers, dead letters).
    pub(super) small: ObjectOptions,
    pub(super) acks: Acks,
    pub(super) failures: Rc<Cell<u64>>,
    /// The newest object to settle failed (it is being tried again): the store is failing.
    pub(super) failing: Rc<Cell<bool>>,
    pub(super) events: TaskEvents,
    /// `s3.conditional_writes = "require"`: objects are written once (`If-None-Match: *`)
    /// and the marker only over the version this member wrote last (`If-Match`).
    pub(super) fencing: bool,
    /// `[sink.s3.iceberg]`: the table complete objects are committed to, and where each
    /// partition field's value comes from.
    pub(super) table: Option<super::table::Table>,
    pub(super) part_sources: Rc<[super::table::spec::ValueSource]>,
}

impl S3Sink {
    pub(super) fn writer(
        &mut self,
        info: &Rc<PartitionInfo>,
    ) -> Result<&mut PartWriter, EngineError> {
        let slot = info.slot.0;
        if self.parts.len() <= slot {
            self.parts.resize_with(slot + 1, || None);
        }
        if self.parts[slot].is_none() {
            let lane = self.lane(Vec::new()).map_err(EngineError::config)?;
            let mut ledger = Ledger::default();
            // What the marker this member took the partition over with says is complete
            // past its watermark, and which ranges are claimed.
            let taken = self.resumed.remove(&(
                Rc::clone(&info.stream),
                Rc::clone(&info.topic),
                info.partition.0,
            ));
            let fence = match taken {
                Some((marker, fence)) => {
                    ledger.done = marker.done;
                    ledger.claims = marker.claims;
                    ledger.floor = marker.last;
                    ledger.prune();
                    fence
                }
                // Not taken over (a writer dropped after it was fenced is taken over again
                // before its partition is delivered): the first conditional write of the
                // marker finds out.
                None => Fence {
                    owner: self.owner.clone(),
                    epoch: 0,
                    etag: None,
                },
            };
            self.epochs += 1;
            self.parts[slot] = Some(PartWriter {
                info: Rc::clone(info),
                lanes: vec![lane],
                shared: Rc::new(Completion {
                    backoff: Cell::new(Backoff::new(self.cfg.retry_min.0, self.cfg.retry_max.0)),
                    ledger: RefCell::new(ledger),
                    fence: RefCell::new(fence),
                    queued: Cell::new(0),
                    retired: Cell::new(false),
                    lease: self.leases.get(&info.partition.0).copied().unwrap_or(0),
                }),
                epoch: self.epochs,
                counted: 0,
                tail: None,
                resetting: false,
            });
        }
        self.parts[slot]
            .as_mut()
            .ok_or_else(|| EngineError::permanent("partition writer missing".to_owned()))
    }

    /// A lane for objects of `split`.
    pub(super) fn lane(&self, split: Vec<String>) -> Result<Lane, String> {
        let mut encoder = Encoder::new(self.cfg.format_options())?;
        // The parts in flight and the one gathering hold the chunks of that many bytes,
        // shared between the lanes a key that splits may open.
        let lanes = if self.splits {
            self.cfg.max_open_objects.max(1) as u64
        } else {
            1
        };
        encoder.keep_for_reuse(
            self.cfg
                .part_size
                .0
                .saturating_mul(self.cfg.parts_in_flight as u64 + 1)
                / lanes,
        );
        Ok(Lane {
            split,
            encoder,
            open: None,
        })
    }
}
