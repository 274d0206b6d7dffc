//! Completing what the writer closed, one task per object after the partition's previous one:
//! the claim in the marker, the object (written once), the marker moved past it, the
//! confirmations; and dead letters. What fails resets the partition's ledger; a member found
//! fenced drops its writer.

use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use monoio::task::JoinHandle;
use spillway_s3::options::{Condition, ObjectOptions};
use spillway_s3::upload::ObjectWriter;
use tracing::{debug, warn};

use super::ledger::Claim;
use super::marker::{Marker, Refused, parse_marker};
use super::{Completion, Finisher, TaskEvent, s3_failure};
use crate::error::EngineError;
use crate::ids::{Offset, Slot};
use crate::units::Rounded;

/// A closed object handed to its completion task.
pub(super) struct Job {
    pub(super) slot: usize,
    pub(super) epoch: u64,
    /// The ledger generation it is counted in.
    pub(super) generation: u64,
    /// Its key, split values and range, as the marker records them.
    pub(super) claim: Claim,
    pub(super) partition: u32,
    pub(super) count: u64,
    pub(super) marker: String,
    /// The time (`s3.time_source`, µs) of its first message.
    pub(super) time: u64,
}

/// Why a conditional write of the marker did not happen.
pub(super) enum MarkerError {
    /// Another member owns the partition now.
    Fenced(String),
    /// The write failed (and may be tried again).
    Failed(EngineError),
}

impl Finisher {
    /// An object of `slot` is complete (and its range settled in the ledger): the backoff
    /// starts over, the sink is not failing, and what the watermark passed is confirmed.
    pub(super) fn settled(&self, shared: &Completion, slot: usize) {
        let mut backoff = shared.backoff.get();
        backoff.reset();
        shared.backoff.set(backoff);
        self.failing.set(false);
        // A released writer's slot may hold another partition now (or this one taken up
        // anew, from what the store and Iggy say): its confirmations go nowhere.
        if !shared.retired.get() {
            shared.ledger.borrow_mut().advance(&self.acks, slot);
        }
    }

    /// An object or letter of writer `epoch` of `slot` failed after those closed before it
    /// settled: the ledger is reset, the writer drops its open objects, and the partition is
    /// polled again from the watermark after a backoff.
    pub(super) fn failed(
        &self,
        shared: &Completion,
        slot: usize,
        epoch: u64,
        partition: u32,
        count: u64,
        error: &EngineError,
    ) {
        let from = shared.ledger.borrow_mut().reset();
        self.events
            .borrow_mut()
            .push(TaskEvent::Failed { slot, epoch });
        self.retry(shared, slot, partition, from, count, error);
    }

    /// A failure: the partition is polled again from `first` after a backoff.
    fn retry(
        &self,
        shared: &Completion,
        slot: usize,
        partition: u32,
        first: u64,
        count: u64,
        error: &EngineError,
    ) {
        self.failures.set(self.failures.get() + 1);
        self.failing.set(true);
        self.acks.trouble(format!(
            "S3 upload of partition {partition} from offset {first}: {}",
            error.message
        ));
        if !error.is_transient() {
            self.events.borrow_mut().push(TaskEvent::Fatal(format!(
                "S3 refused an upload for good, so the sink stops (nothing past offset {first} of partition {partition} is committed): {}",
                error.message
            )));
            return;
        }
        let mut backoff = shared.backoff.get();
        let wait = backoff.next_wait(fastrand::f64());
        shared.backoff.set(backoff);
        warn!(
            sink = %self.sink,
            partition,
            first_offset = first,
            "S3 upload failed, its {count} messages stay unconfirmed and the partition is written again from offset {first} in about {}: {}",
            Rounded(wait),
            error.message
        );
        // A released writer's partition is not this slot's any more.
        if !shared.retired.get() {
            self.acks
                .redeliver_at(Slot(slot), Offset(first), Instant::now() + wait);
        }
    }

    /// Another member took partition `slot` of writer `epoch` over: nothing of this writer
    /// counts any more. The writer is dropped and the engine gives the partition up; after
    /// a backoff, if this member still holds it in Iggy, the engine takes it up anew like a
    /// partition newly assigned (the sink takes it over in the store again and starts after
    /// what its successor wrote and Iggy stored), else it lets it go.
    pub(super) fn fenced(
        &self,
        shared: &Completion,
        slot: usize,
        epoch: u64,
        partition: u32,
        why: &str,
    ) {
        shared.ledger.borrow_mut().reset();
        let mut next = shared.backoff.get();
        let backoff = next.next_at_least(Duration::from_secs(1));
        self.events
            .borrow_mut()
            .push(TaskEvent::Fenced { slot, epoch });
        // A writer released already (its partition taken away, or made anew) must not touch
        // the partition its slot holds now.
        if !shared.retired.get() {
            self.acks.reopen_at(Slot(slot), Instant::now() + backoff);
        }
        shared.backoff.set(next);
        warn!(
            sink = %self.sink,
            partition,
            "partition {partition} is owned by another member in the store ({why}): this \
             one stops writing it, and nothing it had not completed counts; it is taken up \
             anew in about {} if this member still holds it",
            Rounded(backoff)
        );
    }

    /// Writes the marker with what the ledger says now, over the version this member wrote
    /// last (`If-Match`; `If-None-Match: *` when there is none yet). A refusal is looked into:
    /// a version of this member's own (a write whose answer was lost) is carried on from,
    /// another owner's fences this member.
    pub(super) async fn write_marker(
        &self,
        shared: &Completion,
        key: &str,
        object: &str,
        newest: Option<u64>,
    ) -> Result<(), MarkerError> {
        for _ in 0..4 {
            let claims_then = shared.ledger.borrow().claims.clone();
            let (body, etag) = {
                let fence = shared.fence.borrow();
                let marker = Marker::of(&shared.ledger.borrow(), &fence, newest);
                (marker.to_json(object), fence.etag.clone())
            };
            let refused = match self.put_marker(key, body.clone(), etag.as_deref()).await {
                Ok(out) => {
                    shared.fence.borrow_mut().etag = Some(out.etag);
                    if claims_then == shared.ledger.borrow().claims {
                        shared.ledger.borrow_mut().recorded();
                    }
                    return Ok(());
                }
                Err(spillway_s3::Error::S3(e)) if self.fencing && e.is_precondition_failed() => e,
                Err(e) => {
                    return Err(MarkerError::Failed(s3_failure(
                        format_args!("writing the marker {key}"),
                        &e,
                    )));
                }
            };
            let (stored, etag) = match self.read_marker(key).await {
                Ok(Some(found)) => found,
                Ok(None) => {
                    return Err(MarkerError::Fenced(format!(
                        "its marker {key} is gone ({})",
                        refused.code
                    )));
                }
                Err(e) => return Err(MarkerError::Failed(e)),
            };
            let verdict = shared.fence.borrow().refused(&stored);
            match verdict {
                Refused::Ours => {
                    shared.fence.borrow_mut().etag = etag;
                    if stored.to_json(object) == body {
                        if claims_then == shared.ledger.borrow().claims {
                            shared.ledger.borrow_mut().recorded();
                        }
                        return Ok(());
                    }
                }
                Refused::TakenOver { owner, epoch } => {
                    return Err(MarkerError::Fenced(format!(
                        "its marker {key} was taken over by {owner:?} at epoch {epoch}"
                    )));
                }
            }
        }
        Err(MarkerError::Failed(EngineError::transient(format!(
            "the marker {key} kept changing under this member's writes"
        ))))
    }

    /// The marker the store holds and its ETag; `None` when there is none.
    /// Writes a marker body under `key`: with fencing over the version `etag` this member
    /// read or wrote (`If-Match`; `If-None-Match: *` when there is none), plainly without.
    pub(super) async fn put_marker(
        &self,
        key: &str,
        body: Vec<u8>,
        etag: Option<&str>,
    ) -> Result<spillway_s3::actions::put_object::PutObjectOutput, spillway_s3::Error> {
        let options = ObjectOptions {
            condition: self.fencing.then(|| match etag {
                Some(e) => Condition::Etag(e.to_owned()),
                None => Condition::Absent,
            }),
            ..self.small.clone()
        };
        let req = spillway_s3::actions::put_object::request(
            self.client.endpoint(),
            &self.bucket,
            key,
            spillway_s3::request::Body::from(Bytes::from(body)),
            &options,
        )?;
        self.client
            .execute(req, spillway_s3::actions::put_object::parse)
            .await
    }

    pub(super) async fn read_marker(
        &self,
        key: &str,
    ) -> Result<Option<(Marker, Option<String>)>, EngineError> {
        let req = spillway_s3::actions::get_object::request(
            self.client.endpoint(),
            &self.bucket,
            key,
            None,
            &self.small,
        )
        .map_err(|e| s3_failure(format_args!("marker {key}"), &e))?;
        match self
            .client
            .execute(req, spillway_s3::actions::get_object::parse)
            .await
        {
            Ok(out) => {
                let marker = parse_marker(&out.body).map_err(|e| {
                    EngineError::permanent(format!(
                        "the marker {key} is damaged ({e}); delete it to start from Iggy's \
                         stored offset"
                    ))
                })?;
                Ok(Some((marker, out.etag)))
            }
            Err(spillway_s3::Error::S3(e)) if e.status == 404 => Ok(None),
            Err(e) => Err(s3_failure(format_args!("reading the marker {key}"), &e)),
        }
    }
}

/// Completes one object after the partition's previous one. With fencing: its range goes
/// into the marker first (a claim, over the version this member wrote last, so a member that
/// lost the partition learns it here and completes nothing), then the upload's last part and
/// CompleteMultipartUpload (or its PutObject) with `If-None-Match: *` (refused when the key
/// holds an object already: only a claimant of the same range writes it, so the range is
/// complete), then the marker with the partition's new watermark (first: once the offsets are
/// confirmed they may be committed, and a crash before that commit must not make a replay cut
/// different objects), then what the watermark passed is confirmed. On failure the partition
/// is polled again from its watermark; an object after a failed one is aborted (the failed
/// one's redelivery covers it). `true` when the object is complete.
pub(super) async fn complete(
    f: Finisher,
    shared: Rc<Completion>,
    previous: Option<JoinHandle<bool>>,
    upload: ObjectWriter,
    job: Job,
) -> bool {
    let waited = match previous {
        Some(previous) => previous.await,
        None => true,
    };
    shared.queued.set(shared.queued.get().saturating_sub(1));
    if !waited {
        let _ = upload.abort().await;
        return false;
    }
    if let Some(table) = &f.table {
        return super::table::commit_object(&f, &shared, table, upload, &job).await;
    }
    if f.fencing {
        let new = shared.ledger.borrow_mut().add_claim(job.claim.clone());
        if new {
            match f
                .write_marker(&shared, &job.marker, &job.claim.key, None)
                .await
            {
                Ok(()) => {}
                Err(MarkerError::Fenced(why)) => {
                    let _ = upload.abort().await;
                    f.fenced(&shared, job.slot, job.epoch, job.partition, &why);
                    return false;
                }
                Err(MarkerError::Failed(e)) => {
                    let _ = upload.abort().await;
                    f.failed(&shared, job.slot, job.epoch, job.partition, job.count, &e);
                    return false;
                }
            }
        }
    }
    let completed = match upload.close().await {
        Ok(info) => Ok(info.size),
        Err(spillway_s3::Error::S3(e)) if f.fencing && e.is_precondition_failed() => {
            // Written once already, by a claimant of this range: this member before a lost
            // answer or a crash, or the member that owned the partition before it.
            debug!(sink = %f.sink, key = %job.claim.key, first = job.claim.first, last = job.claim.last, "object complete already (If-None-Match refused)");
            Ok(0)
        }
        Err(e) => Err(s3_failure("completing the object", &e)),
    };
    let result = match completed {
        Ok(size) => {
            shared
                .ledger
                .borrow_mut()
                .completed(&job.claim, job.generation);
            let written = if f.fencing && shared.queued.get() > 0 {
                // The next object's claim writes the marker with this one complete.
                Ok(())
            } else {
                f.write_marker(&shared, &job.marker, &job.claim.key, Some(job.claim.last))
                    .await
            };
            match written {
                // With fencing the object's claim is in the marker: a replay writes that
                // range again under that key (refused: complete), and a restart resumes after
                // Iggy's stored offset, so its offsets may be confirmed before the marker
                // says they are complete; the next marker write moves it. Without fencing
                // the object is written again.
                Err(MarkerError::Failed(e)) if f.fencing => {
                    warn!(sink = %f.sink, partition = job.partition, "the marker could not be moved past the complete object {} ({}); its claim stays in the marker until the next write", job.claim.key, e.message);
                    Ok(size)
                }
                written => written.map(|()| size),
            }
        }
        Err(e) => Err(MarkerError::Failed(e)),
    };
    match result {
        Ok(size) => {
            debug!(sink = %f.sink, key = %job.claim.key, size, first = job.claim.first, last = job.claim.last, count = job.count, "object complete");
            f.settled(&shared, job.slot);
            true
        }
        Err(MarkerError::Fenced(why)) => {
            f.fenced(&shared, job.slot, job.epoch, job.partition, &why);
            false
        }
        Err(MarkerError::Failed(e)) => {
            f.failed(&shared, job.slot, job.epoch, job.partition, job.count, &e);
            false
        }
    }
}

/// A rejected message on its way to the dead-letter prefix.
pub(super) struct Letter {
    pub(super) slot: usize,
    pub(super) epoch: u64,
    pub(super) generation: u64,
    pub(super) partition: u32,
    pub(super) offset: u64,
    pub(super) key: String,
    pub(super) body: Bytes,
}

/// Writes a dead letter after the partition's previous object or letter (so the partition's
/// marker, which the objects after it move, never passes a letter not yet stored), then
/// confirms its offset. On failure the partition is polled again from the letter's offset, as
/// for a failed object. `true` when the letter is stored.
pub(super) async fn dead_letter(
    f: Finisher,
    shared: Rc<Completion>,
    previous: Option<JoinHandle<bool>>,
    letter: Letter,
) -> bool {
    if let Some(previous) = previous
        && !previous.await
    {
        return false;
    }
    // Written once (a letter's key is its offset): a refusal means it is stored already.
    let options = ObjectOptions {
        condition: f.fencing.then_some(Condition::Absent),
        ..f.small.clone()
    };
    let put = match spillway_s3::actions::put_object::request(
        f.client.endpoint(),
        &f.bucket,
        &letter.key,
        spillway_s3::request::Body::from(letter.body),
        &options,
    ) {
        Ok(req) => match f
            .client
            .execute(req, spillway_s3::actions::put_object::parse)
            .await
        {
            Ok(_) => Ok(()),
            Err(spillway_s3::Error::S3(e)) if f.fencing && e.is_precondition_failed() => Ok(()),
            Err(e) => Err(s3_failure(format_args!("dead letter {}", letter.key), &e)),
        },
        Err(e) => Err(s3_failure(format_args!("dead letter {}", letter.key), &e)),
    };
    match put {
        Ok(()) => {
            let mut ledger = shared.ledger.borrow_mut();
            if ledger.generation == letter.generation {
                ledger.unsettled.remove(&letter.offset);
            }
            if !shared.retired.get() {
                ledger.advance(&f.acks, letter.slot);
            }
            true
        }
        Err(e) => {
            f.failed(&shared, letter.slot, letter.epoch, letter.partition, 1, &e);
            false
        }
    }
}

/// Abandons an upload in a task (its parts under way are awaited there); its bytes stay in the
/// sink's total until they are released.
pub(super) fn abort_detached(upload: ObjectWriter) {
    monoio::spawn(async move {
        let _ = upload.abort().await;
    });
}
