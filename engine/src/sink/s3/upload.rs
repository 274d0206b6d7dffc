//! The IO of a partition's objects: handing encoder output to the upload, closing an object
//! (its completion task), and what a task's failure or fencing does to the writer.

use super::*;

impl S3Sink {
    /// Takes the task events (see [`S3Sink::absorb`]); then the failure no retry can mend,
    /// once: the sink stops with it.
    pub(super) fn check_fatal(&mut self) -> Result<(), EngineError> {
        self.absorb(None);
        match self.fatal.take() {
            Some(e) => Err(EngineError::permanent(format!("sink {:?}: {e}", self.name))),
            None => Ok(()),
        }
    }

    /// Takes what the completion tasks reported since the last call: a failure drops its
    /// writer's open objects, a fatal failure is kept for [`S3Sink::check_fatal`]. `true`
    /// when one of them was a failure of `slot`'s writer.
    pub(super) fn absorb(&mut self, slot: Option<usize>) -> bool {
        if self.finisher.events.borrow().is_empty() {
            return false;
        }
        let events = std::mem::take(&mut *self.finisher.events.borrow_mut());
        let mut hit = false;
        for event in events {
            match event {
                TaskEvent::Failed { slot: s, epoch } => {
                    if self.drop_failed(s, epoch) && slot == Some(s) {
                        hit = true;
                    }
                }
                TaskEvent::Fenced { slot: s, epoch } => {
                    if self.drop_fenced(s, epoch) && slot == Some(s) {
                        hit = true;
                    }
                }
                TaskEvent::Fatal(text) => {
                    self.fatal.get_or_insert(text);
                }
            }
        }
        hit
    }

    /// A failure of writer `epoch` of `slot`: drops that writer's open objects (the partition
    /// is polled again from its watermark, before all of them). `false` when the writer is
    /// not there any more (released, made anew).
    pub(super) fn drop_failed(&mut self, slot: usize, epoch: u64) -> bool {
        let Some(w) = self.parts.get_mut(slot).and_then(Option::as_mut) else {
            return false;
        };
        if w.epoch != epoch {
            return false;
        }
        // The failed object's predecessors are complete, its successors are aborted by their
        // tasks: the objects written from the redelivered offset wait for none of them.
        w.tail = None;
        w.resetting = false;
        for l in &mut w.lanes {
            if let Some(open) = l.open.take() {
                let _ = l.encoder.finish();
                if let Some(upload) = open.upload {
                    abort_detached(upload);
                }
            }
        }
        self.recount(slot);
        true
    }

    /// Writer `epoch` of `slot` was fenced: it is dropped with its open objects (nothing it
    /// holds may be completed). `false` when the writer is not there any more.
    pub(super) fn drop_fenced(&mut self, slot: usize, epoch: u64) -> bool {
        if !self.drop_failed(slot, epoch) {
            return false;
        }
        self.release(Slot(slot));
        self.gave_up.insert(slot);
        true
    }

    /// Counts slot's encoder output and pending chunks in the sink's total anew.
    pub(super) fn recount(&mut self, slot: usize) {
        if let Some(w) = self.parts.get_mut(slot).and_then(Option::as_mut) {
            let now = w
                .lanes
                .iter()
                .map(|l| l.encoder.held() + l.open.as_ref().map_or(0, |o| o.pending_len))
                .sum();
            self.total.adjust(&mut w.counted, now);
        }
    }

    /// Moves a lane's encoder output to the pending list, then to the upload once it exceeds
    /// a part (or always, `all`).
    pub(super) async fn push_pending(
        &mut self,
        slot: usize,
        lane: usize,
        all: bool,
    ) -> Result<(), EngineError> {
        let part_size = self.cfg.part_size.0;
        let needs_upload = {
            let Some(l) = self.parts[slot]
                .as_mut()
                .and_then(|w| w.lanes.get_mut(lane))
            else {
                return Ok(());
            };
            let Some(open) = l.open.as_mut() else {
                return Ok(());
            };
            let out = l.encoder.take();
            self.encoded += out.len() as u64;
            if !out.is_empty() {
                open.pending_len += out.len() as u64;
                open.pending.push(out);
            }
            open.upload.is_none() && (open.pending_len > part_size || all)
        };
        if needs_upload {
            let last = self.parts[slot]
                .as_ref()
                .and_then(|w| w.open(lane))
                .map(|o| o.last_offset);
            // The key was tried when the object opened (`probe_key`): a failure now is a bug
            // no retry mends.
            let key = self
                .key_of(slot, lane, last)
                .map_err(|e| EngineError::permanent(format!("S3 key: {e}")))?;
            let mut options = self.upload.clone();
            if let Some(w) = self.parts[slot].as_ref()
                && let Some(l) = w.lanes.get(lane)
                && let Some(o) = &l.open
            {
                options.options.metadata = vec![
                    ("stream".to_owned(), ascii(&w.info.stream)),
                    ("topic".to_owned(), ascii(&w.info.topic)),
                    ("partition".to_owned(), w.info.partition.to_string()),
                    ("first-offset".to_owned(), o.first.offset.to_string()),
                ];
                if all {
                    // Sent whole at close: the range and count are known.
                    options
                        .options
                        .metadata
                        .push(("last-offset".to_owned(), o.last_offset.to_string()));
                    options
                        .options
                        .metadata
                        .push(("messages".to_owned(), o.count.to_string()));
                }
                let ext = l.encoder.extension();
                let input = KeyInput {
                    partition: &w.info,
                    first: &o.first,
                    last_offset: None,
                    ext: &ext,
                    split: self.splits.then_some(l.split.as_slice()),
                };
                // Tried when the object opened (`probe_key`), as the key was.
                let (metadata, tags) =
                    object_values(&self.cfg, &input).map_err(EngineError::permanent)?;
                options.options.metadata.extend(metadata);
                options.options.tags = tags;
            }
            let writer =
                ObjectWriter::new(Rc::clone(&self.client), &self.cfg.bucket, &key, &options)
                    .map_err(|e| s3_failure(format_args!("object {key}"), &e))?;
            if let Some(open) = self.parts[slot].as_mut().and_then(|w| w.open_mut(lane)) {
                open.upload = Some(writer);
                open.key = Some(key);
            }
        }
        // The chunks leave the sink's count as the upload's gauge takes them up.
        let chunks = match self.parts[slot].as_mut().and_then(|w| w.open_mut(lane)) {
            Some(open) if open.upload.is_some() => {
                open.pending_len = 0;
                std::mem::take(&mut open.pending)
            }
            _ => {
                self.recount(slot);
                return Ok(());
            }
        };
        self.recount(slot);
        let Some(upload) = self.parts[slot]
            .as_mut()
            .and_then(|w| w.open_mut(lane))
            .and_then(|o| o.upload.as_mut())
        else {
            return Ok(());
        };
        for chunk in chunks {
            upload
                .append(chunk)
                .await
                .map_err(|e| s3_failure("uploading a part", &e))?;
        }
        Ok(())
    }

    /// Closes the open object of slot's lane `lane`: the rest of the output goes to the
    /// upload, and a task completes it (CompleteMultipartUpload or PutObject), writes the
    /// marker and confirms what the partition's watermark passed, after the partition's
    /// previous object. `false` when the object failed here (the partition's open objects are
    /// then aborted and polled again).
    pub(super) async fn close(&mut self, slot: usize, lane: usize) -> bool {
        let done = self.close_inner(slot, lane).await;
        self.recount(slot);
        done
    }

    pub(super) async fn close_inner(&mut self, slot: usize, lane: usize) -> bool {
        if self.absorb(Some(slot)) {
            return false;
        }
        let Some(l) = self
            .parts
            .get_mut(slot)
            .and_then(Option::as_mut)
            .and_then(|w| w.lanes.get_mut(lane))
        else {
            return true;
        };
        let Some(open) = l.open.as_mut() else {
            return true;
        };
        let tail = l.encoder.finish();
        self.encoded += tail.len() as u64;
        if !tail.is_empty() {
            open.pending_len += tail.len() as u64;
            open.pending.push(tail);
        }
        if let Some(e) = l.encoder.error().map(str::to_owned) {
            // An incomplete object must not be completed.
            self.fail(
                slot,
                EngineError::transient(format!("encoding the object: {e}")),
            );
            return false;
        }
        if let Err(e) = self.push_pending(slot, lane, true).await {
            self.fail(slot, e);
            return false;
        }
        // A completion task may have failed while the output was handed over.
        if self.absorb(Some(slot)) {
            return false;
        }
        let Some(w) = self.parts.get_mut(slot).and_then(Option::as_mut) else {
            return true;
        };
        let Some(l) = w.lanes.get_mut(lane) else {
            return true;
        };
        let Some(open) = l.open.take() else {
            return true;
        };
        let Some(upload) = open.upload else {
            return true;
        };
        let key = open.key.clone().unwrap_or_else(|| upload.key().to_owned());
        let job = Job {
            slot,
            epoch: w.epoch,
            generation: open.generation,
            claim: Claim {
                first: open.first.offset,
                last: open.last_offset,
                values: l.split.clone(),
                key,
            },
            count: open.count,
            marker: marker_key(
                &self.cfg.prefix,
                &self.name,
                &w.info.stream,
                &w.info.topic,
                w.info.partition.0,
            ),
            partition: w.info.partition.0,
            time: open.first.timestamp,
        };
        let previous = w.tail.take();
        let shared = Rc::clone(&w.shared);
        shared.queued.set(shared.queued.get() + 1);
        let finisher = self.finisher.clone();
        w.tail = Some(monoio::spawn(complete(
            finisher, shared, previous, upload, job,
        )));
        true
    }

    /// An object failed in the writer: every open object of the partition is aborted,
    /// nothing is written until the objects closed before settle, then the partition is
    /// polled again from its watermark after a backoff (see [`Finisher::failed`]).
    pub(super) fn fail(&mut self, slot: usize, error: EngineError) {
        let Some(w) = self.parts.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        let mut count = 0;
        for l in &mut w.lanes {
            if let Some(open) = l.open.take() {
                // The encoder may hold half an object: start it afresh.
                let _ = l.encoder.finish();
                count += open.count;
                if let Some(upload) = open.upload {
                    abort_detached(upload);
                }
            }
        }
        if !w.resetting {
            w.resetting = true;
            let previous = w.tail.take();
            let shared = Rc::clone(&w.shared);
            let finisher = self.finisher.clone();
            let (epoch, partition) = (w.epoch, w.info.partition.0);
            w.tail = Some(monoio::spawn(async move {
                // A failed predecessor has polled the partition again already.
                if let Some(previous) = previous
                    && !previous.await
                {
                    return false;
                }
                finisher.failed(&shared, slot, epoch, partition, count, &error);
                false
            }));
        }
        self.recount(slot);
    }
}
