//! The S3 sink: Iggy partitions into objects, bounded memory, keys a replay reproduces.
//!
//! One object writer per partition (per sink, on the shard that owns the partition). Messages
//! are encoded ([`format`]) and handed to the S3 client's streaming [`ObjectWriter`]: an object
//! bigger than a part goes out as a multipart upload while it is written, so a partition holds
//! about `part_size x (parts_in_flight + 1)` whatever the object's size. An object is closed
//! when it reaches `max_object_size` (output bytes) or `max_object_messages`, when a message's
//! timestamp falls in the next `record_interval`, after `idle_flush` without messages, and on
//! shutdown. Its offsets are confirmed only once the object is complete
//! (CompleteMultipartUpload or PutObject answered); a failed upload is aborted, its offsets stay
//! unconfirmed, and the partition is polled again from the object's first offset after a
//! backoff, so the object is written again under the same key ([`key`]).
//!
//! The engine paces an S3 sink by the memory it reports ([`Sink::buffered`]) rather than by the
//! per-partition message windows: an object confirms all its messages at once.

pub mod format;
pub mod key;

use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use spillway_s3::client::{ClientConfig, S3Client};
use spillway_s3::credentials::Credentials;
use spillway_s3::endpoint::{AddressingStyle, Endpoint};
use spillway_s3::options::{ObjectOptions, Sse};
use spillway_s3::upload::{ObjectWriter, UploadConfig};
use tracing::{debug, info, warn};

use self::format::{Encoder, FormatOptions, Framing};
use self::key::{KeyInput, KeyTemplate, parse_time_zone};
use super::{Acks, Sink, SinkError, SinkStatus};
use crate::config::{OnShutdown, S3SinkConfig, SinkConfig, SseKind};
use crate::message::{Batch, Message, PartitionInfo};

/// The endpoint of `c` in `region`: the custom one (path-style unless told otherwise) or AWS.
pub fn endpoint(c: &S3SinkConfig, region: &str) -> Result<Endpoint, String> {
    let style = c.path_style.map(|p| {
        if p {
            AddressingStyle::Path
        } else {
            AddressingStyle::VirtualHosted
        }
    });
    match &c.endpoint {
        Some(url) => Endpoint::parse(url, region, style).map_err(|e| e.to_string()),
        None => {
            spillway_s3::endpoint::check_region(region).map_err(|e| e.to_string())?;
            let mut e = Endpoint::aws(region);
            if let Some(s) = style {
                e.style = s;
            }
            Ok(e)
        }
    }
}

/// The encoder options of `c`.
pub fn format_options(c: &S3SinkConfig) -> FormatOptions {
    FormatOptions {
        format: c.format,
        compression: c.compression,
        level: c.compression_level,
        metadata: c.metadata,
        headers: c.headers,
        payload: c.payload,
        framing: if c.length_prefix {
            Framing::LengthPrefix
        } else {
            Framing::Separator(c.separator.as_bytes().to_vec())
        },
    }
}

/// The object being written for a partition.
struct Open {
    /// The first message, without its payload (its time and headers make the key).
    first: Message,
    last_offset: u64,
    count: u64,
    /// `record_interval` bucket of the first message.
    bucket: Option<u64>,
    last_append: Instant,
    /// Output not handed to an upload yet (until it exceeds a part, or the object closes).
    pending: Vec<Bytes>,
    pending_len: u64,
    upload: Option<ObjectWriter>,
}

/// One partition's writer.
struct PartWriter {
    info: Rc<PartitionInfo>,
    encoder: Encoder,
    open: Option<Open>,
    /// After a failed upload: no new object before this.
    retry_at: Option<Instant>,
    backoff: Duration,
}

/// See the module docs.
pub struct S3Sink {
    name: String,
    cfg: S3SinkConfig,
    client: Rc<S3Client>,
    acks: Acks,
    template: KeyTemplate,
    tz: i32,
    upload: UploadConfig,
    parts: Vec<Option<PartWriter>>,
    key_buf: String,
    uploaded: u64,
    failures: u64,
    /// Most bytes held at once (see `buffered`).
    peak: std::cell::Cell<u64>,
}

impl std::fmt::Debug for S3Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Sink")
            .field("sink", &self.name)
            .field("bucket", &self.cfg.bucket)
            .field(
                "open",
                &self
                    .parts
                    .iter()
                    .flatten()
                    .filter(|p| p.open.is_some())
                    .count(),
            )
            .finish()
    }
}

fn sse_of(c: &S3SinkConfig) -> Option<Sse> {
    match c.sse {
        Some(SseKind::S3) => Some(Sse::S3),
        Some(SseKind::Kms) => Some(Sse::Kms {
            key_id: c.sse_kms_key_id.clone(),
        }),
        None => None,
    }
}

impl S3Sink {
    /// The sink of `config` on shard `shard`.
    pub fn new(config: &SinkConfig, shard: usize, acks: Acks) -> Result<S3Sink, SinkError> {
        process_start();
        let err = |e: String| SinkError(format!("sink {:?}: {e}", config.name));
        let cfg = config
            .s3
            .clone()
            .ok_or_else(|| err("[sink.s3] is missing".to_owned()))?;
        let region = cfg.region.clone().unwrap_or_else(|| "us-east-1".to_owned());
        let endpoint = endpoint(&cfg, &region).map_err(|e| err(format!("s3.endpoint: {e}")))?;
        let credentials = Credentials::new(
            cfg.access_key_id.clone().unwrap_or_default(),
            cfg.secret_access_key
                .as_ref()
                .map(|s| s.expose().to_owned())
                .unwrap_or_default(),
            cfg.session_token.as_ref().map(|s| s.expose().to_owned()),
        );
        let mut client_cfg = ClientConfig::new(endpoint, credentials);
        client_cfg.jitter_seed = shard as u64 + 1;
        client_cfg.retry.max_attempts = cfg.request_attempts.max(1);
        let client = S3Client::new(client_cfg).map_err(|e| err(format!("S3 client: {e}")))?;
        let template = KeyTemplate::parse(&cfg.key).map_err(|e| err(format!("s3.key: {e}")))?;
        let tz = parse_time_zone(&cfg.time_zone).map_err(|e| err(format!("s3.time_zone: {e}")))?;
        let probe = Encoder::new(format_options(&cfg)).map_err(err)?;
        let mut upload = UploadConfig::new(cfg.part_size.0, cfg.parts_in_flight);
        upload.options = ObjectOptions {
            content_type: Some(probe.content_type().to_owned()),
            content_encoding: probe.content_encoding().map(str::to_owned),
            storage_class: cfg.storage_class.clone(),
            sse: sse_of(&cfg),
            ..ObjectOptions::default()
        };
        upload
            .options
            .validate()
            .map_err(|e| err(format!("s3 object options: {e}")))?;
        Ok(S3Sink {
            name: config.name.clone(),
            client: Rc::new(client),
            acks,
            template,
            tz,
            upload,
            parts: Vec::new(),
            key_buf: String::new(),
            uploaded: 0,
            failures: 0,
            peak: std::cell::Cell::new(0),
            cfg,
        })
    }

    fn writer(&mut self, info: &Rc<PartitionInfo>) -> Result<&mut PartWriter, SinkError> {
        let slot = info.slot;
        if self.parts.len() <= slot {
            self.parts.resize_with(slot + 1, || None);
        }
        if self.parts[slot].is_none() {
            let encoder = Encoder::new(format_options(&self.cfg)).map_err(SinkError)?;
            self.parts[slot] = Some(PartWriter {
                info: Rc::clone(info),
                encoder,
                open: None,
                retry_at: None,
                backoff: self.cfg.retry_min.0,
            });
        }
        self.parts[slot]
            .as_mut()
            .ok_or_else(|| SinkError("partition writer missing".to_owned()))
    }

    fn bucket_of(&self, m: &Message) -> Option<u64> {
        let every = self.cfg.record_interval.0.as_micros() as u64;
        (every > 0).then(|| m.timestamp / every)
    }

    /// Renders the key of slot's open object.
    fn key_of(&mut self, slot: usize, last: Option<u64>) -> Result<String, String> {
        let Some(w) = self.parts.get(slot).and_then(Option::as_ref) else {
            return Err("no writer".to_owned());
        };
        let Some(open) = &w.open else {
            return Err("no open object".to_owned());
        };
        let ext = w.encoder.extension();
        let input = KeyInput {
            partition: &w.info,
            first: &open.first,
            last_offset: last,
            ext: &ext,
        };
        self.template
            .render(&self.cfg.prefix, self.tz, &input, &mut self.key_buf)?;
        Ok(self.key_buf.clone())
    }

    /// Hands pending output to the upload once it exceeds a part (or always, `all`).
    async fn push_pending(&mut self, slot: usize, all: bool) -> Result<(), String> {
        let part_size = self.cfg.part_size.0;
        let needs_upload = {
            let Some(open) = self.parts[slot].as_ref().and_then(|w| w.open.as_ref()) else {
                return Ok(());
            };
            open.upload.is_none() && (open.pending_len > part_size || all)
        };
        if needs_upload {
            let last = self.parts[slot]
                .as_ref()
                .and_then(|w| w.open.as_ref())
                .map(|o| o.last_offset);
            let key = self.key_of(slot, last)?;
            let mut options = self.upload.clone();
            if let Some(w) = self.parts[slot].as_ref()
                && let Some(o) = &w.open
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
            }
            let writer =
                ObjectWriter::new(Rc::clone(&self.client), &self.cfg.bucket, &key, &options)
                    .map_err(|e| format!("object {key}: {e}"))?;
            if let Some(open) = self.parts[slot].as_mut().and_then(|w| w.open.as_mut()) {
                open.upload = Some(writer);
            }
        }
        let Some(open) = self.parts[slot].as_mut().and_then(|w| w.open.as_mut()) else {
            return Ok(());
        };
        let Some(upload) = open.upload.as_mut() else {
            return Ok(());
        };
        for chunk in open.pending.drain(..) {
            upload.append(chunk).await.map_err(|e| e.to_string())?;
        }
        open.pending_len = 0;
        Ok(())
    }

    /// Closes slot's open object: the rest of the output, CompleteMultipartUpload or
    /// PutObject, then its offsets are confirmed.
    async fn close(&mut self, slot: usize) -> Result<(), SinkError> {
        let Some(w) = self.parts.get_mut(slot).and_then(Option::as_mut) else {
            return Ok(());
        };
        let Some(open) = w.open.as_mut() else {
            return Ok(());
        };
        let tail = w.encoder.finish();
        if !tail.is_empty() {
            open.pending_len += tail.len() as u64;
            open.pending.push(tail);
        }
        if let Some(e) = w.encoder.error().map(str::to_owned) {
            // An incomplete object must not be completed.
            self.fail(slot, &format!("encoding the object: {e}")).await;
            return Ok(());
        }
        let (first, last, count) = (open.first.offset, open.last_offset, open.count);
        let result = match self.push_pending(slot, true).await {
            Ok(()) => {
                let upload = self.parts[slot]
                    .as_mut()
                    .and_then(|w| w.open.as_mut())
                    .and_then(|o| o.upload.take());
                match upload {
                    Some(u) => {
                        // What the writer held at most, before it gives its parts away.
                        self.peak.set(self.peak.get().max(u.held().peak()));
                        u.close().await.map_err(|e| e.to_string())
                    }
                    None => Err("no upload".to_owned()),
                }
            }
            Err(e) => Err(e),
        };
        let result = match result {
            // The marker goes first: once the offsets are confirmed they may be committed, and a
            // crash before that commit must not make a replay cut different objects.
            Ok(info) => self
                .write_marker(slot, last, &info.key)
                .await
                .map(|()| info),
            Err(e) => Err(e),
        };
        match result {
            Ok(info) => {
                debug!(sink = %self.name, key = %info.key, size = info.size, first, last, count, "object complete");
                self.uploaded += 1;
                if let Some(w) = self.parts[slot].as_mut() {
                    w.open = None;
                    w.backoff = self.cfg.retry_min.0;
                }
                self.acks.confirm(slot, first, last);
                Ok(())
            }
            Err(e) => {
                self.fail(slot, &e).await;
                Ok(())
            }
        }
    }

    /// Aborts the multipart uploads an earlier run left open under the prefix: those initiated
    /// before this process started (less a minute for clock skew), once per sink and process.
    /// Where the store cannot list uploads, says so: a lifecycle rule
    /// (AbortIncompleteMultipartUpload) must clean them up there.
    async fn abort_stale_uploads(&self) {
        use spillway_s3::actions::{abort_multipart_upload, list_multipart_uploads};
        static DONE: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
        {
            let mut done = DONE
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if done.contains(&self.name) {
                return;
            }
            done.push(self.name.clone());
        }
        let cutoff = process_start() - Duration::from_secs(60);
        let mut args = list_multipart_uploads::ListMultipartUploadsArgs {
            prefix: (!self.cfg.prefix.is_empty()).then(|| self.cfg.prefix.clone()),
            key_marker: None,
            upload_id_marker: None,
            max_uploads: None,
        };
        let mut aborted = 0;
        loop {
            let listed = match list_multipart_uploads::request(
                self.client.endpoint(),
                &self.cfg.bucket,
                &args,
            ) {
                Ok(req) => {
                    self.client
                        .execute(req, list_multipart_uploads::parse)
                        .await
                }
                Err(e) => Err(e),
            };
            let page = match listed {
                Ok(p) => p,
                Err(e) => {
                    warn!(
                        sink = %self.name,
                        "cannot list open multipart uploads to abort those an earlier run left ({e}); set a lifecycle rule (AbortIncompleteMultipartUpload) on the bucket"
                    );
                    return;
                }
            };
            for u in &page.uploads {
                let stale = u.initiated_time().is_some_and(|t| t < cutoff);
                if !stale {
                    continue;
                }
                if let Ok(req) = abort_multipart_upload::request(
                    self.client.endpoint(),
                    &self.cfg.bucket,
                    &u.key,
                    &u.upload_id,
                ) && self
                    .client
                    .execute(req, abort_multipart_upload::parse)
                    .await
                    .is_ok()
                {
                    aborted += 1;
                }
            }
            match page.next_args(&args) {
                Some(next) => args = next,
                None => break,
            }
        }
        if aborted > 0 {
            info!(sink = %self.name, "aborted {aborted} multipart uploads an earlier run left open");
        }
    }

    /// Records that everything of slot's partition up to `last` is in complete objects.
    async fn write_marker(&self, slot: usize, last: u64, object: &str) -> Result<(), String> {
        let Some(w) = self.parts.get(slot).and_then(Option::as_ref) else {
            return Ok(());
        };
        let key = marker_key(
            &self.cfg.prefix,
            &self.name,
            &w.info.stream,
            &w.info.topic,
            w.info.partition,
        );
        let mut body = Vec::with_capacity(128);
        body.extend_from_slice(format!("{{\"last_offset\":{last},\"object\":").as_bytes());
        crate::json::string(&mut body, object.as_bytes());
        body.push(b'}');
        let options = ObjectOptions {
            content_type: Some("application/json".to_owned()),
            sse: self.upload.options.sse.clone(),
            ..ObjectOptions::default()
        };
        let req = spillway_s3::actions::put_object::request(
            self.client.endpoint(),
            &self.cfg.bucket,
            &key,
            spillway_s3::request::Body::from(Bytes::from(body)),
            &options,
        )
        .map_err(|e| format!("marker {key}: {e}"))?;
        self.client
            .execute(req, spillway_s3::actions::put_object::parse)
            .await
            .map(|_| ())
            .map_err(|e| format!("writing the marker {key}: {e}"))
    }

    /// A failed object: abort its upload, keep its offsets unconfirmed, poll again from its
    /// first offset after a backoff.
    async fn fail(&mut self, slot: usize, error: &str) {
        self.failures += 1;
        let Some(w) = self.parts.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        let Some(open) = w.open.take() else {
            return;
        };
        // The encoder may hold half an object: start it afresh.
        let _ = w.encoder.finish();
        let wait = w.backoff.mul_f64(0.5 + fastrand::f64());
        w.backoff = (w.backoff * 2).min(self.cfg.retry_max.0);
        w.retry_at = Some(Instant::now() + wait);
        warn!(
            sink = %self.name,
            partition = w.info.partition,
            first_offset = open.first.offset,
            "S3 upload failed, its {} messages stay unconfirmed and are written again in about {wait:?}: {error}",
            open.count
        );
        if let Some(upload) = open.upload {
            let _ = upload.abort().await;
        }
        self.acks.redeliver(slot, open.first.offset);
    }

    async fn write_message(&mut self, slot: usize, m: &Message) -> Result<bool, SinkError> {
        let bucket = self.bucket_of(m);
        let rotate_before = self.parts[slot]
            .as_ref()
            .and_then(|w| w.open.as_ref())
            .is_some_and(|o| bucket.is_some() && o.bucket != bucket);
        if rotate_before {
            self.close(slot).await?;
            if self.parts[slot]
                .as_ref()
                .is_some_and(|w| w.retry_at.is_some())
            {
                return Ok(false);
            }
        }
        let Some(w) = self.parts[slot].as_mut() else {
            return Ok(false);
        };
        if w.open.is_none() {
            w.encoder.begin();
            w.open = Some(Open {
                first: Message {
                    offset: m.offset,
                    id: m.id,
                    timestamp: m.timestamp,
                    origin_timestamp: m.origin_timestamp,
                    payload: Bytes::new(),
                    headers: Bytes::copy_from_slice(&m.headers),
                },
                last_offset: m.offset,
                count: 0,
                bucket,
                last_append: Instant::now(),
                pending: Vec::new(),
                pending_len: 0,
                upload: None,
            });
        }
        w.encoder.push(&w.info, m);
        let out = w.encoder.take();
        let output_len = w.encoder.output_len();
        let Some(open) = w.open.as_mut() else {
            return Ok(false);
        };
        open.last_offset = m.offset;
        open.count += 1;
        open.last_append = Instant::now();
        if !out.is_empty() {
            open.pending_len += out.len() as u64;
            open.pending.push(out);
        }
        let count = open.count;
        if let Err(e) = self.push_pending(slot, false).await {
            self.fail(slot, &e).await;
            return Ok(false);
        }
        let full = output_len >= self.cfg.max_object_size.0
            || (self.cfg.max_object_messages > 0 && count >= self.cfg.max_object_messages);
        if full {
            self.close(slot).await?;
            if self.parts[slot]
                .as_ref()
                .is_some_and(|w| w.retry_at.is_some())
            {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// When the first S3 sink of this process was built: uploads initiated before it belong to an
/// earlier run.
fn process_start() -> std::time::SystemTime {
    static START: std::sync::OnceLock<std::time::SystemTime> = std::sync::OnceLock::new();
    *START.get_or_init(std::time::SystemTime::now)
}

/// The key of the marker that records the last offset of `partition` written in a complete
/// object, under the sink's prefix (one per sink and partition).
fn marker_key(prefix: &str, sink: &str, stream: &str, topic: &str, partition: u32) -> String {
    let mut k = String::from(prefix);
    k.push_str(".spillway/");
    for part in [sink, stream, topic] {
        key::escape_into(&mut k, part);
        k.push('/');
    }
    k.push_str(&format!("{partition}.json"));
    k
}

/// Reads a marker body: `{"last_offset": N, ...}`.
fn parse_marker(body: &[u8]) -> Result<u64, String> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    v["last_offset"]
        .as_u64()
        .ok_or_else(|| "no last_offset".to_owned())
}

/// User metadata values must be printable ASCII.
fn ascii(s: &str) -> String {
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

impl Sink for S3Sink {
    async fn start(&mut self) -> Result<(), SinkError> {
        // The probe: a missing bucket, wrong credentials or a wrong region is reported now,
        // before anything is polled.
        let req =
            spillway_s3::actions::head_bucket::request(self.client.endpoint(), &self.cfg.bucket)
                .map_err(|e| SinkError(format!("s3: {e}")))?;
        self.client
            .execute(req, spillway_s3::actions::head_bucket::parse)
            .await
            .map_err(|e| {
                SinkError(format!(
                    "S3 bucket {:?} at {}: {e}",
                    self.cfg.bucket,
                    self.client.endpoint().authority()
                ))
            })?;
        info!(sink = %self.name, bucket = %self.cfg.bucket, "S3 bucket reachable");
        self.abort_stale_uploads().await;
        Ok(())
    }

    async fn resume(
        &mut self,
        stream: &str,
        topic: &str,
        partition: u32,
    ) -> Result<Option<u64>, SinkError> {
        let key = marker_key(&self.cfg.prefix, &self.name, stream, topic, partition);
        let req = spillway_s3::actions::get_object::request(
            self.client.endpoint(),
            &self.cfg.bucket,
            &key,
            None,
            &self.upload.options,
        )
        .map_err(|e| SinkError(format!("marker {key}: {e}")))?;
        match self
            .client
            .execute(req, spillway_s3::actions::get_object::parse)
            .await
        {
            Ok(out) => parse_marker(&out.body)
                .map(Some)
                .map_err(|e| SinkError(format!("the marker {key} is damaged ({e}); delete it to start from Iggy's stored offset"))),
            Err(spillway_s3::Error::S3(e)) if e.status == 404 => Ok(None),
            Err(e) => Err(SinkError(format!("reading the marker {key}: {e}"))),
        }
    }

    async fn deliver(&mut self, batch: Batch) -> Result<(), SinkError> {
        let info = Rc::clone(&batch.partition);
        let slot = info.slot;
        let w = self.writer(&info)?;
        if let Some(at) = w.retry_at.take() {
            let now = Instant::now();
            if at > now {
                monoio::time::sleep(at - now).await;
            }
        }
        for m in &batch.messages {
            if !self.write_message(slot, m).await? {
                // The object failed: this batch's messages are polled again.
                break;
            }
        }
        Ok(())
    }

    async fn tick(&mut self) -> Result<(), SinkError> {
        let idle = self.cfg.idle_flush.0;
        if idle.is_zero() {
            return Ok(());
        }
        let now = Instant::now();
        let due: Vec<usize> = self
            .parts
            .iter()
            .enumerate()
            .filter_map(|(slot, w)| {
                let open = w.as_ref()?.open.as_ref()?;
                (now.saturating_duration_since(open.last_append) >= idle).then_some(slot)
            })
            .collect();
        for slot in due {
            self.close(slot).await?;
        }
        Ok(())
    }

    fn tick_interval(&self) -> Duration {
        let idle = self.cfg.idle_flush.0;
        if idle.is_zero() {
            Duration::from_secs(1)
        } else {
            (idle / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
        }
    }

    async fn drain(&mut self, deadline: Instant) -> Result<(), SinkError> {
        let open: Vec<usize> = self
            .parts
            .iter()
            .enumerate()
            .filter_map(|(slot, w)| w.as_ref()?.open.as_ref().map(|_| slot))
            .collect();
        for slot in open {
            match self.cfg.on_shutdown {
                OnShutdown::Flush if Instant::now() < deadline => self.close(slot).await?,
                _ => {
                    if let Some(open) = self.parts[slot].as_mut().and_then(|w| w.open.take()) {
                        // Left for the next run: the engine need not wait for these offsets.
                        self.acks.redeliver(slot, open.first.offset);
                        if let Some(upload) = open.upload {
                            let _ = upload.abort().await;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn release(&mut self, slot: usize) {
        if let Some(w) = self.parts.get_mut(slot).and_then(Option::take)
            && let Some(open) = w.open
            && let Some(upload) = open.upload
        {
            monoio::spawn(async move {
                let _ = upload.abort().await;
            });
        }
    }

    fn status(&self) -> SinkStatus {
        SinkStatus {
            reconnects: self.failures,
            in_flight_peak: 0,
            buffered_peak: self
                .parts
                .iter()
                .flatten()
                .filter_map(|w| w.open.as_ref())
                .filter_map(|o| o.upload.as_ref().map(|u| u.held().peak() + o.pending_len))
                .fold(self.peak.get(), u64::max),
        }
    }

    fn buffered(&self) -> Option<u64> {
        let mut held = 0;
        for w in self.parts.iter().flatten() {
            if let Some(open) = &w.open {
                held += open.pending_len;
                if let Some(u) = &open.upload {
                    held += u.held().current();
                }
            }
        }
        if held > self.peak.get() {
            self.peak.set(held);
        }
        Some(held)
    }
}
