//! The streaming multipart uploader: append `Bytes` chunks to an open object; each time a
//! part's worth has gathered it is uploaded while appending goes on, with at most
//! `parts_in_flight` parts under way (append waits for one to finish when the limit is reached).
//! Memory therefore stays at about `part_size × (parts_in_flight + 1)` whatever the object's
//! size; [`ObjectWriter::held`] counts it. An object no bigger than one part goes out as one
//! PutObject at close.
//!
//! Parts are cut at exact part-size boundaries by slicing chunks (`Bytes::split_to`), never
//! by copying. Each part is retried on its own by the client; when a part or the completion
//! fails for good, the upload is aborted and the error returned, so the caller can send the
//! data again.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;

use crate::actions::complete_multipart_upload::CompletedPart;
use crate::actions::{
    abort_multipart_upload, complete_multipart_upload, create_multipart_upload, put_object,
    upload_part,
};
use crate::client::S3Client;
use crate::error::Error;
use crate::multipart::PartPlan;
use crate::options::ObjectOptions;
use crate::request::Body;

/// How objects are uploaded.
#[derive(Debug, Clone)]
pub struct UploadConfig {
    /// Bytes per part (5 MiB to 5 GiB); also the size below which an object is one PutObject.
    pub part_size: u64,
    /// Parts uploading at once (at least 1).
    pub parts_in_flight: usize,
    /// Headers of the object (content type, SSE, metadata …).
    pub options: ObjectOptions,
    /// A gauge every writer's bytes also count in (see [`Gauge`]), or none.
    pub total: Option<Rc<Gauge>>,
}

impl UploadConfig {
    pub fn new(part_size: u64, parts_in_flight: usize) -> Self {
        UploadConfig {
            part_size,
            parts_in_flight,
            options: ObjectOptions::default(),
            total: None,
        }
    }
}

/// Bytes held (buffered, or in a part being uploaded), and the most held at once.
///
/// A gauge may count within a larger one: every writer's gauge counts within
/// [`UploadConfig::total`] when one is given (a sink's figure over all its objects, including
/// those being completed or aborted by tasks it does not await). A gauge may also have a
/// watcher, told the new figure after every change: that is how the owner of a total learns
/// of bytes freed by a part that finished in a task of its own.
#[derive(Default)]
pub struct Gauge {
    current: Cell<u64>,
    peak: Cell<u64>,
    parent: Option<Rc<Gauge>>,
    watcher: Option<Box<dyn Fn(u64)>>,
}

impl fmt::Debug for Gauge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gauge")
            .field("current", &self.current.get())
            .field("peak", &self.peak.get())
            .field("within", &self.parent.is_some())
            .finish()
    }
}

impl Gauge {
    /// A gauge on its own.
    pub fn new() -> Gauge {
        Gauge::default()
    }

    /// A gauge whose changes also count in `parent`.
    pub fn within(parent: Rc<Gauge>) -> Gauge {
        Gauge {
            parent: Some(parent),
            ..Gauge::default()
        }
    }

    /// A gauge that tells `watcher` its figure after every change.
    pub fn watched(watcher: impl Fn(u64) + 'static) -> Gauge {
        Gauge {
            watcher: Some(Box::new(watcher)),
            ..Gauge::default()
        }
    }

    /// `n` more bytes held.
    pub fn add(&self, n: u64) {
        if n == 0 {
            return;
        }
        let c = self.current.get().saturating_add(n);
        self.current.set(c);
        if c > self.peak.get() {
            self.peak.set(c);
        }
        if let Some(p) = &self.parent {
            p.add(n);
        }
        if let Some(w) = &self.watcher {
            w(c);
        }
    }

    /// `n` bytes released (never below zero: what a parent loses is what this gauge held).
    pub fn sub(&self, n: u64) {
        let n = n.min(self.current.get());
        if n == 0 {
            return;
        }
        let c = self.current.get() - n;
        self.current.set(c);
        if let Some(p) = &self.parent {
            p.sub(n);
        }
        if let Some(w) = &self.watcher {
            w(c);
        }
    }

    /// Moves a share counted as `from` to `to` (`from` becomes `to`).
    pub fn adjust(&self, from: &mut u64, to: u64) {
        if to > *from {
            self.add(to - *from);
        } else {
            self.sub(*from - to);
        }
        *from = to;
    }

    pub fn current(&self) -> u64 {
        self.current.get()
    }

    pub fn peak(&self) -> u64 {
        self.peak.get()
    }
}

/// Bytes counted in a gauge until this is dropped (a request body on its way).
struct Hold {
    gauge: Rc<Gauge>,
    bytes: u64,
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.gauge.sub(self.bytes);
    }
}

/// A completed object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    pub key: String,
    pub etag: String,
    pub size: u64,
    /// 0 for a single PutObject.
    pub parts: u32,
}

/// A part that S3 accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DonePart {
    number: u32,
    etag: String,
    /// The checksum the part was sent with, for CompleteMultipartUpload.
    checksum_crc32c: Option<String>,
}

/// Part uploads report here in the order they finish, so the writer waits for whichever
/// part is done first, not for the oldest.
#[derive(Default)]
struct Finished {
    results: RefCell<VecDeque<Result<DonePart, Error>>>,
    waker: RefCell<Option<Waker>>,
}

impl Finished {
    fn push(&self, result: Result<DonePart, Error>) {
        self.results.borrow_mut().push_back(result);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }
}

/// The next part result (the writer only awaits it while a part is running).
struct NextFinished<'a>(&'a Finished);

impl Future for NextFinished<'_> {
    type Output = Result<DonePart, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(r) = self.0.results.borrow_mut().pop_front() {
            return Poll::Ready(r);
        }
        *self.0.waker.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// One object being written.
pub struct ObjectWriter {
    client: Rc<S3Client>,
    bucket: Rc<str>,
    key: Rc<str>,
    options: Rc<ObjectOptions>,
    plan: PartPlan,
    parts_in_flight: usize,
    pending: Vec<Bytes>,
    pending_len: u64,
    size: u64,
    upload_id: Option<Rc<str>>,
    next_part: u32,
    /// Parts uploading now.
    running: usize,
    finished: Rc<Finished>,
    done: Vec<DonePart>,
    held: Rc<Gauge>,
}

impl fmt::Debug for ObjectWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectWriter")
            .field("bucket", &self.bucket)
            .field("key", &self.key)
            .field("size", &self.size)
            .field("upload_id", &self.upload_id)
            .field("parts_done", &self.done.len())
            .field("parts_in_flight", &self.running)
            .field("held", &self.held.current())
            .finish()
    }
}

/// Bytes not handed to a part are released with the writer (a part under way releases its own
/// when it finishes), so a total never keeps counting a writer that is gone.
impl Drop for ObjectWriter {
    fn drop(&mut self) {
        self.held.sub(self.pending_len);
    }
}

impl ObjectWriter {
    /// Opens an object; nothing is sent until the first part is full (or close).
    pub fn new(
        client: Rc<S3Client>,
        bucket: &str,
        key: &str,
        cfg: &UploadConfig,
    ) -> Result<Self, Error> {
        let plan = PartPlan::new(cfg.part_size)?;
        if cfg.parts_in_flight == 0 {
            return Err(Error::Config("parts_in_flight must be at least 1".into()));
        }
        Ok(ObjectWriter {
            client,
            bucket: bucket.into(),
            key: key.into(),
            options: Rc::new(cfg.options.clone()),
            plan,
            parts_in_flight: cfg.parts_in_flight,
            pending: Vec::new(),
            pending_len: 0,
            size: 0,
            upload_id: None,
            next_part: 1,
            running: 0,
            finished: Rc::new(Finished::default()),
            done: Vec::new(),
            held: Rc::new(match &cfg.total {
                Some(total) => Gauge::within(Rc::clone(total)),
                None => Gauge::new(),
            }),
        })
    }

    /// The object's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The multipart upload's id, once the first part has started.
    pub fn upload_id(&self) -> Option<&str> {
        self.upload_id.as_deref()
    }

    /// Bytes appended so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// What the writer holds now and at most (buffered plus parts under way).
    pub fn held(&self) -> &Gauge {
        &self.held
    }

    /// The same gauge, shared: it keeps counting after the writer is moved into a task that
    /// closes or aborts it.
    pub fn gauge(&self) -> Rc<Gauge> {
        Rc::clone(&self.held)
    }

    /// Whether `len` more bytes fit in this object (10,000 parts, 5 TiB). When they do not,
    /// close this object and start the next: [`ObjectWriter::append`] refuses them.
    pub fn has_room_for(&self, len: u64) -> bool {
        self.plan.fits(self.size, len)
    }

    /// Appends a chunk. When a part is full it starts uploading; when `parts_in_flight` parts
    /// are under way this waits for the oldest to finish (back-pressure). On an error the
    /// upload has been aborted: the object must be written again from its start.
    pub async fn append(&mut self, chunk: Bytes) -> Result<(), Error> {
        let len = chunk.len() as u64;
        if !self.has_room_for(len) {
            return Err(Error::Limit(format!(
                "object {} would exceed {} bytes (10,000 parts of {} or 5 TiB); close it and \
                 start a new object",
                self.key,
                self.plan.max_object_size(),
                self.plan.part_size()
            )));
        }
        if chunk.is_empty() {
            return Ok(());
        }
        self.held.add(len);
        self.size += len;
        self.pending_len += len;
        self.pending.push(chunk);
        // A part is cut once more than a part waits: an object of exactly one part is still
        // one PutObject at close, and the last part of a multipart object is never empty.
        while self.pending_len > self.plan.part_size() {
            let part = self.cut_part(self.plan.part_size());
            if let Err(e) = self.start_part(part).await {
                self.abort_after_error().await;
                return Err(e);
            }
        }
        Ok(())
    }

    /// Takes the first `n` pending bytes as a part body, splitting a chunk at the boundary
    /// without copying. The body stays counted in the gauge until its hold is dropped.
    fn cut_part(&mut self, n: u64) -> (Body, Hold) {
        let mut body = Body::empty();
        let mut need = n;
        let mut taken = 0;
        for chunk in self.pending.iter_mut() {
            if need == 0 {
                break;
            }
            let len = chunk.len() as u64;
            if len <= need {
                body.push(std::mem::take(chunk));
                need -= len;
                taken += 1;
            } else {
                body.push(chunk.split_to(need as usize));
                need = 0;
            }
        }
        self.pending.drain(..taken);
        self.pending_len -= body.len();
        let hold = Hold {
            gauge: Rc::clone(&self.held),
            bytes: body.len(),
        };
        (body, hold)
    }

    /// Starts uploading one part, first waiting for room in the window.
    async fn start_part(&mut self, (body, hold): (Body, Hold)) -> Result<(), Error> {
        let upload_id = match &self.upload_id {
            Some(id) => id.clone(),
            None => {
                let req = create_multipart_upload::request(
                    self.client.endpoint(),
                    &self.bucket,
                    &self.key,
                    &self.options,
                )?;
                let out = self
                    .client
                    .execute(req, create_multipart_upload::parse)
                    .await?;
                let id: Rc<str> = out.upload_id.as_str().into();
                self.upload_id = Some(id.clone());
                id
            }
        };
        while self.running >= self.parts_in_flight {
            self.finish_one().await?;
        }
        let number = self.next_part;
        self.next_part += 1;
        let req = upload_part::request(
            self.client.endpoint(),
            &self.bucket,
            &self.key,
            &upload_id,
            number,
            body,
            &self.options,
        )?;
        let checksum_crc32c = req.header("x-amz-checksum-crc32c").map(str::to_owned);
        let client = self.client.clone();
        let finished = self.finished.clone();
        self.running += 1;
        // Detached: the result comes back through `finished`.
        let _task = monoio::spawn(async move {
            let res = client.execute(req, upload_part::parse).await;
            drop(hold);
            finished.push(res.map(|out| DonePart {
                number,
                etag: out.etag,
                checksum_crc32c,
            }));
        });
        Ok(())
    }

    /// Waits for the first running part to finish.
    async fn finish_one(&mut self) -> Result<(), Error> {
        if self.running == 0 {
            return Ok(());
        }
        let result = NextFinished(&self.finished).await;
        self.running -= 1;
        self.done.push(result?);
        Ok(())
    }

    /// Waits for every running part, ignoring their results (after a failure).
    async fn drain_running(&mut self) {
        while self.running > 0 {
            let _ = NextFinished(&self.finished).await;
            self.running -= 1;
        }
    }

    /// Uploads what is left and completes the object (or sends it as one PutObject when it
    /// never reached a part). Returns its ETag and size.
    pub async fn close(mut self) -> Result<ObjectInfo, Error> {
        if self.upload_id.is_none() {
            let body = Body::from_chunks(std::mem::take(&mut self.pending));
            let hold = Hold {
                gauge: self.held.clone(),
                bytes: body.len(),
            };
            self.pending_len = 0;
            let req = put_object::request(
                self.client.endpoint(),
                &self.bucket,
                &self.key,
                body,
                &self.options,
            )?;
            let res = self.client.execute(req, put_object::parse).await;
            drop(hold);
            let out = res?;
            return Ok(ObjectInfo {
                key: self.key.to_string(),
                etag: out.etag,
                size: self.size,
                parts: 0,
            });
        }
        match self.finish_multipart().await {
            Ok(info) => Ok(info),
            Err(e) => {
                self.abort_after_error().await;
                Err(e)
            }
        }
    }

    async fn finish_multipart(&mut self) -> Result<ObjectInfo, Error> {
        if self.pending_len > 0 {
            let n = self.pending_len;
            let part = self.cut_part(n);
            self.start_part(part).await?;
        }
        while self.running > 0 {
            self.finish_one().await?;
        }
        self.done.sort_by_key(|p| p.number);
        let Some(upload_id) = self.upload_id.clone() else {
            return Err(Error::Config("no multipart upload to complete".into()));
        };
        let parts: Vec<CompletedPart> = self
            .done
            .iter()
            .map(|p| CompletedPart {
                part_number: p.number,
                etag: p.etag.clone(),
                checksum_crc32c: p.checksum_crc32c.clone(),
            })
            .collect();
        let req = complete_multipart_upload::request(
            self.client.endpoint(),
            &self.bucket,
            &self.key,
            &upload_id,
            &parts,
            &self.options,
        )?;
        let out = self
            .client
            .execute(req, complete_multipart_upload::parse)
            .await?;
        Ok(ObjectInfo {
            key: self.key.to_string(),
            etag: out.etag,
            size: self.size,
            parts: parts.len() as u32,
        })
    }

    /// Abandons the object: parts under way are awaited, the multipart upload (if any) is
    /// aborted, nothing is completed.
    pub async fn abort(mut self) -> Result<(), Error> {
        self.drain_running().await;
        self.pending.clear();
        self.held.sub(self.pending_len);
        self.pending_len = 0;
        match self.upload_id.take() {
            Some(id) => {
                let req = abort_multipart_upload::request(
                    self.client.endpoint(),
                    &self.bucket,
                    &self.key,
                    &id,
                )?;
                self.client
                    .execute(req, abort_multipart_upload::parse)
                    .await
                    .map(|_| ())
            }
            None => Ok(()),
        }
    }

    /// After a failure: wait for the other parts, abort the upload (best effort: the error
    /// that matters is the one already being returned; an upload left behind is found by
    /// ListMultipartUploads).
    async fn abort_after_error(&mut self) {
        self.drain_running().await;
        self.held.sub(self.pending_len);
        self.pending.clear();
        self.pending_len = 0;
        if let Some(id) = self.upload_id.take()
            && let Ok(req) = abort_multipart_upload::request(
                self.client.endpoint(),
                &self.bucket,
                &self.key,
                &id,
            )
        {
            let _ = self
                .client
                .execute(req, abort_multipart_upload::parse)
                .await;
        }
    }
}
