//! What `spillway offsets` reads and moves in the store: a partition's marker.
//!
//! Setting where a partition resumes writes its marker as a new owner (`spillway-offsets/...`)
//! at the next epoch, conditionally on the version read (compare-and-swap, as a takeover
//! does): a member that still believed it owned the partition is fenced by it (its later
//! claims and marker writes are refused), and a marker that changed between the read and the
//! write is not overwritten.

use super::S3Sink;
use super::marker::{Marker, marker_key, owner_id};
use crate::error::EngineError;

/// A partition's marker, as `spillway offsets show` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerState {
    /// Its key.
    pub key: String,
    /// The last offset every object up to which is complete (`None`: none yet).
    pub last: Option<u64>,
    /// Who wrote it last, and at which epoch.
    pub owner: String,
    /// Raised at every takeover.
    pub epoch: u64,
    /// Object ranges claimed and not known complete.
    pub claims: usize,
}

impl S3Sink {
    /// The key of `partition`'s marker, and the marker with its ETag if there is one.
    async fn read_partition_marker(
        &self,
        stream: &str,
        topic: &str,
        partition: u32,
    ) -> Result<(String, Option<(Marker, Option<String>)>), EngineError> {
        let key = marker_key(&self.cfg.prefix, &self.name, stream, topic, partition);
        let found = self
            .finisher
            .read_marker(&key)
            .await
            .map_err(|e| EngineError::permanent(e.message))?;
        Ok((key, found))
    }

    /// The marker of `partition`, if there is one.
    pub async fn marker_state(
        &self,
        stream: &str,
        topic: &str,
        partition: u32,
    ) -> Result<Option<MarkerState>, EngineError> {
        let (key, found) = self.read_partition_marker(stream, topic, partition).await?;
        Ok(found.map(|(m, _)| MarkerState {
            key,
            last: m.last,
            owner: m.owner,
            epoch: m.epoch,
            claims: m.claims.len(),
        }))
    }

    /// Makes `partition` resume at `next` as far as the store is concerned: the marker's
    /// watermark becomes `next - 1` (none for 0), and what it recorded at or past `next`
    /// (claims, the newest objects of split values) stays, what lies before is dropped. No
    /// marker and `next` 0: nothing to write.
    pub async fn set_marker(
        &self,
        stream: &str,
        topic: &str,
        partition: u32,
        next: u64,
    ) -> Result<Option<MarkerState>, EngineError> {
        let (key, found) = self.read_partition_marker(stream, topic, partition).await?;
        let (old, etag) = match found {
            Some(f) => f,
            None if next == 0 => return Ok(None),
            None => (Marker::default(), None),
        };
        let mut new = old.taken_over_by(&format!("spillway-offsets/{}", owner_id(0)));
        new.last = next.checked_sub(1);
        new.claims.retain(|c| c.first >= next);
        new.done.retain(|_, o| *o >= next);
        match self
            .finisher
            .put_marker(&key, new.to_json(&old.object), etag.as_deref())
            .await
        {
            Ok(_) => Ok(Some(MarkerState {
                key,
                last: new.last,
                owner: new.owner,
                epoch: new.epoch,
                claims: new.claims.len(),
            })),
            Err(spillway_s3::Error::S3(e)) if e.is_precondition_failed() => {
                Err(EngineError::permanent(format!(
                    "the marker {key} changed while it was being set (is an engine running this sink?); nothing was changed there, run the command again"
                )))
            }
            Err(e) => Err(EngineError::permanent(format!(
                "writing the marker {key}: {e}"
            ))),
        }
    }
}
