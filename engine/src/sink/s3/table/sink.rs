//! The sink's side of its table: taking a partition up from what the table records, and a
//! complete object's commit.

use std::rc::Rc;
use std::time::Instant;

use spillway_s3::upload::ObjectWriter;
use tracing::{debug, warn};

use super::super::complete::Job;
use super::super::failure::s3_failure;
use super::super::{Completion, Finisher, S3Sink};
use super::{Committed, NewFile};
use crate::error::EngineError;
use crate::units::{Backoff, Rounded};

impl S3Sink {
    /// The table's commit counts, from the sink's first shard (zeros from the others and
    /// without a table).
    pub(in super::super) fn table_status(&self) -> crate::acks::SinkStatus {
        match &self.finisher.table {
            Some(table) if self.lead => table.stats(),
            _ => crate::acks::SinkStatus::default(),
        }
    }

    /// Takes `partition` up from the table: the last offset it records (the engine starts
    /// after it), under a new lease the partition's commits carry. A catalog that fails for
    /// now is waited for; one that refuses for good stops the sink.
    pub(in super::super) async fn take_up_from_table(
        &mut self,
        partition: u32,
    ) -> Result<Option<u64>, EngineError> {
        let Some(table) = self.finisher.table.clone() else {
            return Ok(None);
        };
        let mut backoff = Backoff::new(self.cfg.retry_min.0, self.cfg.retry_max.0);
        loop {
            match table.resume(partition).await {
                Ok(lease) => {
                    self.leases.insert(partition, lease.id);
                    return Ok(lease.last);
                }
                Err(e) if e.is_transient() => {
                    let wait = backoff.next_wait(fastrand::f64());
                    warn!(sink = %self.name, partition, "taking partition {partition} up from the Iceberg table failed, trying again in {}: {}", Rounded(wait), e.message);
                    monoio::time::sleep(wait).await;
                }
                Err(e) => {
                    return Err(EngineError::permanent(format!(
                        "taking partition {partition} up from the Iceberg table: {}",
                        e.message
                    )));
                }
            }
        }
    }
}

/// Completes an object of a table's partition: the upload, then its commit (with the files of
/// other partitions that come meanwhile); its offsets are confirmed once the table holds it.
/// A failure polls the partition again (the file left behind is an orphan); a file the table
/// refuses because another member committed the partition fences this member's writer.
/// `true` when the table holds the object.
pub(in super::super) async fn commit_object(
    f: &Finisher,
    shared: &Rc<Completion>,
    table: &super::Table,
    upload: ObjectWriter,
    job: &Job,
) -> bool {
    let values =
        match super::spec::values(&f.part_sources, &job.claim.values, job.partition, job.time) {
            Ok(v) => v,
            Err(e) => {
                let e = EngineError::permanent(format!(
                    "the partition values of the data file {}: {e}",
                    job.claim.key
                ));
                let _ = upload.abort().await;
                f.failed(shared, job.slot, job.epoch, job.partition, job.count, &e);
                return false;
            }
        };
    let size = match upload.close().await {
        Ok(info) => info.size,
        Err(e) => {
            let e = s3_failure("completing the data file", &e);
            f.failed(shared, job.slot, job.epoch, job.partition, job.count, &e);
            return false;
        }
    };
    let file = NewFile {
        partition: job.partition,
        first: job.claim.first,
        last: job.claim.last,
        key: job.claim.key.clone(),
        records: job.count,
        size,
        lease: shared.lease,
        values,
    };
    let asked = Instant::now();
    match table.commit(file).await {
        Ok(Committed::Yes) => {
            debug!(sink = %f.sink, key = %job.claim.key, first = job.claim.first, last = job.claim.last, count = job.count, waited = ?asked.elapsed(), "data file committed");
            shared
                .ledger
                .borrow_mut()
                .completed(&job.claim, job.generation);
            f.settled(shared, job.slot);
            true
        }
        Ok(Committed::Fenced(why)) => {
            f.fenced(shared, job.slot, job.epoch, job.partition, &why);
            false
        }
        Err(e) => {
            f.failed(shared, job.slot, job.epoch, job.partition, job.count, &e);
            false
        }
    }
}
