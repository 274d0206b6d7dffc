//! Object keys, user metadata and tags, and messages the key or the format cannot take.

use super::*;

impl S3Sink {
    /// The `record_interval` bucket of a message whose time (`s3.time_source`) is `time`.
    pub(super) fn bucket_at(&self, time: u64) -> Option<u64> {
        let every = self.cfg.record_interval.0.as_micros() as u64;
        (every > 0).then(|| time / every)
    }

    /// Renders the key of the open object of `slot`'s lane `lane`.
    pub(super) fn key_of(
        &mut self,
        slot: usize,
        lane: usize,
        last: Option<u64>,
    ) -> Result<String, String> {
        let Some(w) = self.parts.get(slot).and_then(Option::as_ref) else {
            return Err("no writer".to_owned());
        };
        let Some(l) = w.lanes.get(lane) else {
            return Err("no lane".to_owned());
        };
        let Some(open) = &l.open else {
            return Err("no open object".to_owned());
        };
        if let Some(claim) = &open.claim {
            // A claimed range is written under the key the marker records.
            return Ok(claim.key.clone());
        }
        let ext = l.encoder.extension();
        let input = KeyInput {
            partition: &w.info,
            first: &open.first,
            last_offset: last,
            ext: &ext,
            split: self.splits.then_some(l.split.as_slice()),
        };
        self.cfg.key.render(
            self.data_prefix.as_deref().unwrap_or(&self.cfg.prefix),
            &self.cfg.time_zone,
            &input,
            &mut self.key_buf,
        )?;
        if self.data_prefix.is_some() {
            // A table's data file is written once under a name of its own: a range written
            // again (after a failure, a crash, by another member) is another file, and only
            // the one the table commits counts (see `table`).
            return Ok(unique(&self.key_buf, &ext));
        }
        Ok(self.key_buf.clone())
    }

    /// Whether a key can be rendered for an object that `m` (of the values in `self.values`)
    /// would start in `lane`; the reason if not.
    pub(super) fn probe_key(
        &mut self,
        slot: usize,
        lane: usize,
        m: &Message,
    ) -> Result<(), String> {
        let Some(w) = self.parts.get(slot).and_then(Option::as_ref) else {
            return Err("no writer".to_owned());
        };
        let Some(l) = w.lanes.get(lane) else {
            return Err("no lane".to_owned());
        };
        let ext = l.encoder.extension();
        let input = KeyInput {
            partition: &w.info,
            first: m,
            last_offset: Some(m.offset),
            ext: &ext,
            split: self.splits.then_some(self.values.as_slice()),
        };
        self.cfg.key.render(
            &self.cfg.prefix,
            &self.cfg.time_zone,
            &input,
            &mut self.key_buf,
        )?;
        if self.cfg.user_metadata.is_empty() && self.cfg.tags.is_empty() {
            return Ok(());
        }
        object_values(&self.cfg, &input).map(|_| ())
    }

    /// A message the sink cannot write (no key renders for it, the format refuses it): to
    /// `on_error`. Under `dead_letter` it is written on its own under the dead-letter prefix
    /// (settled once stored, in order with the partition's objects); otherwise it is reported
    /// failed (`skip` leaves it out, so it is settled; `fail` stops the engine, and the
    /// partition's watermark never passes it).
    pub(super) fn reject(&mut self, slot: usize, m: &Message, reason: String) {
        let Some(w) = self.parts.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        let Some((prefix, encoder)) = self.dead_letter.as_mut() else {
            let mut ledger = w.shared.ledger.borrow_mut();
            if self.skip_rejects {
                ledger.handed = Some(m.offset);
            } else {
                ledger.unsettled.insert(m.offset);
            }
            self.acks
                .fail(Slot(slot), Offset(m.offset), format!("no S3 key: {reason}"));
            return;
        };
        let mut key = prefix.clone();
        for part in [&w.info.stream, &w.info.topic] {
            key::escape_into(&mut key, part);
            key.push('/');
        }
        key.push_str(&format!("{}/{:020}.json", w.info.partition, m.offset));
        encoder.begin();
        encoder.push(&w.info, m);
        let record = encoder.finish();
        let mut body = Vec::with_capacity(record.len() + reason.len() + 32);
        body.extend_from_slice(b"{\"reason\":");
        crate::json::string(&mut body, reason.as_bytes());
        body.extend_from_slice(b",\"record\":");
        body.extend_from_slice(record.strip_suffix(b"\n").unwrap_or(&record));
        body.extend_from_slice(b"}\n");
        if let Some(more) = crate::ratelog::per_message(&self.dead_letter_log, Instant::now()) {
            warn!(
                sink = %self.name,
                partition = w.info.partition.0,
                offset = m.offset,
                "writing a rejected message to the dead-letter object {key}: {reason}{more}"
            );
        }
        let generation = {
            let mut ledger = w.shared.ledger.borrow_mut();
            ledger.unsettled.insert(m.offset);
            ledger.handed = Some(m.offset);
            ledger.generation
        };
        let letter = Letter {
            slot,
            epoch: w.epoch,
            generation,
            partition: w.info.partition.0,
            offset: m.offset,
            key,
            body: Bytes::from(body),
        };
        let previous = w.tail.take();
        w.tail = Some(monoio::spawn(dead_letter(
            self.finisher.clone(),
            Rc::clone(&w.shared),
            previous,
            letter,
        )));
    }
}

/// `key` with a random token before its extension `ext` (or at its end).
pub(super) fn unique(key: &str, ext: &str) -> String {
    let token = format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
    match key
        .strip_suffix(ext)
        .and_then(|stem| stem.strip_suffix('.'))
    {
        Some(stem) => format!("{stem}-{token}.{ext}"),
        None => format!("{key}-{token}"),
    }
}

/// Names and values (user metadata, tags).
pub(super) type Pairs = Vec<(String, String)>;

/// The object's `s3.user_metadata` (values made printable ASCII, as S3 requires) and
/// `s3.tags`, rendered for the object `input` begins.
pub(super) fn object_values(
    cfg: &S3SinkConfig,
    input: &KeyInput<'_>,
) -> Result<(Pairs, Pairs), String> {
    let render = |which: &str, map: &std::collections::BTreeMap<String, ValueTemplate>| {
        map.iter()
            .map(|(name, t)| {
                t.render(&cfg.time_zone, input)
                    .map(|v| (name.clone(), v))
                    .map_err(|e| format!("s3.{which}.{name}: {e}"))
            })
            .collect::<Result<Vec<_>, String>>()
    };
    let metadata = render("user_metadata", &cfg.user_metadata)?
        .into_iter()
        .map(|(k, v)| (k, ascii(&v)))
        .collect();
    let tags = render("tags", &cfg.tags)?;
    Ok((metadata, tags))
}

/// `s` as printable ASCII (what user metadata values must be): others become `_`.
pub(super) fn ascii(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
