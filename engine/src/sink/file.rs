//! The `file` / `stdout` sink: one JSON object per message and line, written with one write per
//! batch, confirmed once written (after fdatasync with `fsync = true`).
//!
//! ```json
//! {"stream":"events","topic":"orders","partition":0,"offset":41,"id":"7","timestamp":1700000000000000,
//!  "origin_timestamp":1700000000000000,"headers":{"k":"v"},"payload":{"any":"json"}}
//! ```
//! A payload that is not JSON is written as a string (UTF-8) or as `"payload_base64"`. A
//! `{shard}` in the path gives each shard its own file; without it the shards append to one
//! file, each batch in one `write` (Linux keeps those whole on a regular file).
//!
//! Writes block the shard's thread: this sink is for demos, tests and modest rates.

use std::cell::{Cell, RefCell};
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::Sink;
use crate::acks::Acks;
use crate::config::{ConfirmOrder, FileSinkConfig, SinkConfig, SinkType};
use crate::error::EngineError;
use crate::ids::{Offset, Slot};
use crate::json;
use crate::message::Batch;
use crate::signal::Signal;
use crate::template::name::Place;

enum Output {
    Stdout,
    File(File),
}

/// See the module docs.
pub struct FileSink {
    path: Option<PathBuf>,
    out: Rc<RefCell<Option<Output>>>,
    cfg: FileSinkConfig,
    acks: Acks,
    buf: Vec<u8>,
    records: json::RecordWriter,
    /// Batches written whose delayed confirmation has not run yet.
    pending: Rc<Cell<usize>>,
    /// Bumped as each delayed write ends (what the drain waits on).
    written: Rc<Signal>,
}

impl std::fmt::Debug for FileSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSink")
            .field("path", &self.path)
            .finish()
    }
}

impl FileSink {
    /// The sink for shard `shard`.
    pub fn new(config: &SinkConfig, shard: usize, acks: Acks) -> Result<FileSink, EngineError> {
        let cfg = config.file.clone().unwrap_or_default();
        let path = match (config.kind, &cfg.path) {
            (SinkType::Stdout, _) => None,
            (_, Some(p)) if p.is_stdout() => None,
            (_, Some(p)) => Some(p.render(Place {
                sink: &config.name,
                shard,
                conn: 0,
            })),
            (_, None) => {
                return Err(EngineError::config(format!(
                    "sink {:?}: file.path is missing",
                    config.name
                )));
            }
        };
        Ok(FileSink {
            path,
            out: Rc::new(RefCell::new(None)),
            cfg,
            acks,
            buf: Vec::with_capacity(64 * 1024),
            records: json::RecordWriter::default(),
            pending: Rc::new(Cell::new(0)),
            written: Rc::new(Signal::default()),
        })
    }

    fn encode(&mut self, batch: &Batch) {
        let o = json::RecordOptions {
            meta: if self.cfg.metadata {
                json::Meta::All
            } else {
                json::Meta::Offset
            },
            headers: self.cfg.headers,
            payload: self.cfg.payload,
        };
        self.buf.clear();
        for m in &batch.messages {
            self.records.record(&mut self.buf, o, &batch.partition, m);
            self.buf.push(b'\n');
        }
    }
}

/// Writes `buf` (and syncs with `fsync`); the error names the destination.
fn write_out(
    out: &RefCell<Option<Output>>,
    path: Option<&PathBuf>,
    fsync: bool,
    buf: &[u8],
) -> Result<(), EngineError> {
    let result = match &mut *out.borrow_mut() {
        Some(Output::File(f)) => f
            .write_all(buf)
            .and_then(|()| if fsync { f.sync_data() } else { Ok(()) }),
        Some(Output::Stdout) | None => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(buf).and_then(|()| stdout.flush())
        }
    };
    result.map_err(|e| {
        let shown = path.map_or_else(|| "standard output".to_owned(), |p| p.display().to_string());
        EngineError::permanent(format!("writing to {shown}: {e}"))
    })
}

impl Sink for FileSink {
    async fn start(&mut self) -> Result<(), EngineError> {
        let out = match &self.path {
            None => Output::Stdout,
            Some(p) => Output::File(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map_err(|e| EngineError::permanent(format!("opening {}: {e}", p.display())))?,
            ),
        };
        *self.out.borrow_mut() = Some(out);
        Ok(())
    }

    async fn deliver(&mut self, batch: Batch) -> Result<(), EngineError> {
        let (Some(first), Some(last)) = (batch.messages.first(), batch.messages.last()) else {
            return Ok(());
        };
        let (first, last) = (first.offset, last.offset);
        let slot = batch.partition.slot;
        let mut offsets: Vec<u64> = Vec::new();
        if self.cfg.confirm_order != ConfirmOrder::InOrder {
            offsets = batch.messages.iter().map(|m| m.offset).collect();
            match self.cfg.confirm_order {
                ConfirmOrder::Reverse => offsets.reverse(),
                ConfirmOrder::Shuffle => fastrand::shuffle(&mut offsets),
                ConfirmOrder::InOrder => {}
            }
        }
        let acks = self.acks.clone();
        let confirm = move || {
            if offsets.is_empty() {
                acks.confirm(slot, Offset(first), Offset(last));
            } else {
                for o in offsets {
                    acks.confirm(slot, Offset(o), Offset(o));
                }
            }
        };
        let max_delay = self.cfg.confirm_delay.0;
        self.encode(&batch);
        drop(batch);
        if max_delay.is_zero() {
            write_out(&self.out, self.path.as_ref(), self.cfg.fsync, &self.buf)?;
            confirm();
            return Ok(());
        }
        // Testing aid: hold the batch a random time up to confirm_delay, then write and
        // confirm it, so batches complete out of order and the file holds exactly what was
        // confirmed.
        let buf = std::mem::take(&mut self.buf);
        let delay = max_delay.mul_f64(fastrand::f64());
        let (out, path, fsync) = (Rc::clone(&self.out), self.path.clone(), self.cfg.fsync);
        let pending = Rc::clone(&self.pending);
        let written = Rc::clone(&self.written);
        pending.set(pending.get() + 1);
        monoio::spawn(async move {
            monoio::time::sleep(delay).await;
            match write_out(&out, path.as_ref(), fsync, &buf) {
                Ok(()) => confirm(),
                Err(e) => tracing::error!("{e}"),
            }
            pending.set(pending.get() - 1);
            written.bump();
        });
        Ok(())
    }

    async fn tick(&mut self) -> Result<(), EngineError> {
        Ok(())
    }

    fn tick_interval(&self) -> Duration {
        Duration::from_secs(1)
    }

    async fn drain(&mut self, deadline: Instant) -> Result<(), EngineError> {
        while self.pending.get() > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero()
                || monoio::time::timeout(left, self.written.next())
                    .await
                    .is_err()
            {
                break;
            }
        }
        Ok(())
    }

    fn release(&mut self, _slot: Slot) {}
}
