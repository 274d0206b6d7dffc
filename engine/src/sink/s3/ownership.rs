//! Taking a partition over in the store, and the start-up probe of conditional writes (see
//! docs/architecture.md, "Ownership and fencing"; the decisions are in `marker.rs`).

use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use spillway_s3::options::{Condition, ObjectOptions};
use tracing::{debug, info, warn};

use super::marker::{Fence, marker_key};
use super::{S3Sink, s3_failure};
use crate::error::EngineError;
use crate::template::key;
use crate::units::{Backoff, Rounded};

impl S3Sink {
    /// Takes partition `partition` over in the store: reads its marker and, with fencing,
    /// writes it back with this member as owner and the next epoch, over the version read
    /// (another member's later writes of it are refused from then on). Keeps what the
    /// marker says for the partition's writer; the marker's watermark, past which the engine
    /// starts.
    pub(super) async fn take_over(
        &mut self,
        stream: &str,
        topic: &str,
        partition: u32,
    ) -> Result<Option<u64>, EngineError> {
        let key = marker_key(&self.cfg.prefix, &self.name, stream, topic, partition);
        let began = Instant::now();
        let mut refusals = 0u32;
        let mut backoff = Backoff::new(self.cfg.retry_min.0, self.cfg.retry_max.0);
        // A store that fails for now is waited for (the engine stops this while stopping);
        // one that refuses for good stops the sink.
        let mut transient = async |e: EngineError| -> Result<(), EngineError> {
            if !e.is_transient() {
                return Err(EngineError::permanent(format!(
                    "taking partition {partition} over: {}",
                    e.message
                )));
            }
            let wait = backoff.next_wait(fastrand::f64());
            warn!(sink = %self.name, partition, "taking partition {partition} over failed, trying again in {}: {}", Rounded(wait), e.message);
            monoio::time::sleep(wait).await;
            Ok(())
        };
        loop {
            let (old, etag) = match self.finisher.read_marker(&key).await {
                Ok(found) => found.unwrap_or_default(),
                Err(e) => {
                    transient(e).await?;
                    continue;
                }
            };
            let new = old.taken_over_by(&self.owner);
            let mut fence = Fence {
                owner: self.owner.clone(),
                epoch: new.epoch,
                etag: etag.clone(),
            };
            if self.finisher.fencing {
                let written = self
                    .finisher
                    .put_marker(&key, new.to_json(&old.object), etag.as_deref())
                    .await;
                match written {
                    Ok(out) => fence.etag = Some(out.etag),
                    Err(spillway_s3::Error::S3(e)) if e.is_precondition_failed() => {
                        // Another member wrote it between the read and this write.
                        refusals += 1;
                        if refusals >= 8 {
                            return Err(EngineError::permanent(format!(
                                "taking partition {partition} over: its marker {key} changed \
                                 under {refusals} tries in a row"
                            )));
                        }
                        monoio::time::sleep(Duration::from_millis(
                            20 * u64::from(refusals) + fastrand::u64(0..50),
                        ))
                        .await;
                        continue;
                    }
                    Err(e) => {
                        transient(s3_failure(format_args!("writing its marker {key}"), &e)).await?;
                        continue;
                    }
                }
                info!(
                    sink = %self.name,
                    partition,
                    epoch = new.epoch,
                    took_ms = began.elapsed().as_secs_f64() * 1e3,
                    "took partition {partition} over in the store{}{}",
                    if old.owner.is_empty() {
                        String::new()
                    } else {
                        format!(" from {:?}", old.owner)
                    },
                    if new.claims.is_empty() {
                        String::new()
                    } else {
                        format!(
                            "; {} claimed objects are written again with the same ranges",
                            new.claims.len()
                        )
                    }
                );
            }
            let last = new.last;
            self.resumed
                .insert((Rc::from(stream), Rc::from(topic), partition), (new, fence));
            return Ok(last);
        }
    }

    /// With `s3.conditional_writes = "require"`, once per sink and process (its first
    /// shard): whether the store honours `If-None-Match: *` and `If-Match` on PutObject, on a
    /// probe key under the sink's marker prefix (deleted after). A store that refuses or
    /// ignores them is a configuration error naming `s3.conditional_writes`.
    pub(super) async fn probe_conditional_writes(&self) -> Result<(), EngineError> {
        use spillway_s3::actions::{delete_object, put_object};
        if !self.finisher.fencing || !self.lead {
            return Ok(());
        }
        let mut key = self.cfg.prefix.clone();
        key.push_str(".spillway/");
        key::escape_into(&mut key, &self.name);
        key.push_str(&format!("/probe-{:016x}.json", fastrand::u64(..)));
        let put = |condition: Condition| {
            let options = ObjectOptions {
                condition: Some(condition),
                ..self.finisher.small.clone()
            };
            let key = key.clone();
            async move {
                let req = put_object::request(
                    self.client.endpoint(),
                    &self.cfg.bucket,
                    &key,
                    spillway_s3::request::Body::from(Bytes::from_static(b"{}")),
                    &options,
                )?;
                self.client.execute(req, put_object::parse).await
            }
        };
        let refuse = |what: String| {
            EngineError::config(format!(
                "sink {:?}: the S3 store at {} does not honour conditional writes: {what}. \
                 Spillway writes each object once (If-None-Match) and its markers over the \
                 version it wrote (If-Match), so that a member that lost a partition cannot \
                 overwrite its successor's objects; set s3.conditional_writes = \"off\" to run \
                 without them, safe only while no two members ever write one partition at \
                 once (README, \"Ownership and fencing\")",
                self.name,
                self.client.endpoint().authority()
            ))
        };
        let answered = |r: &Result<put_object::PutObjectOutput, spillway_s3::Error>| match r {
            Ok(_) => "200 (written)".to_owned(),
            Err(e) => e.to_string(),
        };
        let first = put(Condition::Absent).await;
        if let Err(e) = &first {
            return Err(match e {
                spillway_s3::Error::S3(s) if !s.is_retryable() && s.status != 403 => {
                    refuse(format!(
                        "PutObject with If-None-Match: * on a new key {key} was answered {}",
                        answered(&first)
                    ))
                }
                _ => EngineError::permanent(format!(
                    "sink {:?}: probing conditional writes ({key}): {e}",
                    self.name
                )),
            });
        }
        let again = put(Condition::Absent).await;
        let wrong = put(Condition::Etag(
            "00000000000000000000000000000000".to_owned(),
        ))
        .await;
        if let Ok(req) = delete_object::request(self.client.endpoint(), &self.cfg.bucket, &key) {
            let _ = self.client.execute(req, delete_object::parse).await;
        }
        let refused = |r: &Result<_, spillway_s3::Error>| matches!(r, Err(spillway_s3::Error::S3(e)) if e.is_precondition_failed());
        if !refused(&again) {
            return Err(refuse(format!(
                "a second PutObject with If-None-Match: * on {key} was answered {}, not 412",
                answered(&again)
            )));
        }
        if !refused(&wrong) {
            return Err(refuse(format!(
                "PutObject with If-Match of an ETag {key} does not have was answered {}, not 412",
                answered(&wrong)
            )));
        }
        debug!(sink = %self.name, "the store honours conditional writes");
        Ok(())
    }
}
