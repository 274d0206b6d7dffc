//! The S3 sink's object encoder: record formats and compression, sans-IO.
//!
//! One [`Encoder`] encodes the objects of one writer one after another:
//!
//! ```text
//! begin() → push()* (take() as often as wanted) → finish() → begin() → …
//! ```
//!
//! Formats:
//!
//! - `json_lines` (`application/x-ndjson`, `.jsonl`): one JSON object per record, each ending
//!   in `\n`, laid out like the file sink's lines:
//!   `{"stream":..,"topic":..,"partition":N,"offset":N,"id":"<decimal>","timestamp":N,
//!   "origin_timestamp":N,"headers":{"k":"v"},"payload":...}`. Without `metadata` none of the
//!   metadata fields are written; `"headers"` is written (with `headers`) only for a message
//!   that has headers. The payload goes through [`json::payload_field`]: JSON embedded as JSON,
//!   else a string, else `"payload_base64"`.
//! - `json_array` (`application/json`, `.json`): the same records in one array,
//!   `[` + records separated by `,` + `]`; an object without records is `[]`.
//! - `raw` (`application/octet-stream`, `.bin`): the payloads as they are, each followed by
//!   the separator ([`Framing::Separator`], `\n` by default), or each preceded by its length as
//!   a big-endian u32 ([`Framing::LengthPrefix`]). No metadata, no headers.
//! - `csv` (`text/csv`, `.csv`): RFC 4180, lines ending in CRLF, a header line naming the
//!   columns `stream,topic,partition,offset,id,timestamp,origin_timestamp` (with `metadata`),
//!   `headers` (with `headers`: a JSON object, `{}` for a message without headers) and
//!   `payload`: the payload as text when it is UTF-8 (JSON included, as it is), else base64;
//!   `payload = "base64"` always writes base64, `"text"` always text (invalid UTF-8 replaced).
//!   A field is quoted when it holds `,`, `"`, CR or LF (quotes doubled); an empty payload is
//!   written `""` so that a payload-only record never is an empty line. Note that with `auto`
//!   a reader cannot tell a base64 payload from a text payload that looks like base64: use
//!   `payload = "base64"` (or a JSON format) when binary payloads must be told apart.
//!
//! - `parquet` (`application/vnd.apache.parquet`, `.parquet`): see [`parquet`]; its pages are
//!   compressed by the Parquet codec (`s3.parquet.compression`), never the object as a whole.
//!
//! Compression keeps its codec contexts across objects. zstd streams (one frame per object,
//! with its content checksum). gzip is libdeflate, which compresses whole buffers: the input
//! gathers into blocks of 1 MiB and each block becomes a gzip member, so an object is a
//! series of members (RFC 1952 allows it; every gzip reader reads it as one stream). It costs
//! the encoder far less CPU than a streaming deflate at the same ratio (tuning.md). The encoded
//! bytes go from the codec into the output buffer that [`Encoder::take`] hands out, so memory
//! stays bounded by what the caller leaves untaken, plus gzip's pending block.
//!
//! [`Encoder::output_len`] counts what the codec has emitted, and a codec holds back what it
//! has not yet written out. gzip holds up to a block of input (1 MiB; its compressed size is
//! what [`Encoder::size`] adds for rotation, at the ratio of the last member); zstd writes a
//! block per 128 KiB of input, so `output_len` lags the size the object would have if it were
//! finished now by at most about 128 KiB (128 KiB on random data, 16 KiB on JSON text), plus 4
//! bytes of checksum and a block header. Uncompressed, it never lags.
//!
//! The per-record path reuses the encoder's buffers and allocates nothing in steady state,
//! except for a few cases: a header value of a numeric kind (rendered through
//! [`crate::message::Header::value_string`]) and a non-UTF-8 payload in a JSON format (base64 through
//! [`json::payload_field`]).

use std::fmt;

use bytes::{BufMut as _, Bytes};
use zstd::stream::raw::CParameter;

pub use crate::config::{Compression, Format, FormatOptions, Framing};
use crate::json;
use crate::message::{Message, PartitionInfo};

mod compress;
mod csv;
#[cfg(feature = "parquet")]
pub(crate) mod parquet;
#[cfg(not(feature = "parquet"))]
#[path = "format/parquet_off.rs"]
mod parquet;

use self::compress::{Codec, Gzip, OutBuf, Sink};
use self::csv::csv_record;

/// The least free room handed to a codec for one step.
const MIN_ROOM: usize = 8 * 1024;
/// How much the output buffer grows when a codec needs room.
const GROW: usize = 64 * 1024;
/// The size of a new output buffer once the current one is used up. Above the allocator's
/// medium size classes (mimalloc: 128 KiB), so each buffer is an allocation of its own, given
/// back whole, and shared only by consecutive chunks of one partition's objects, which are
/// freed together. With buffers of 64-128 KiB (what `BytesMut` reallocates by itself) the
/// chunks of different partitions' objects shared the allocator's pages, and a page stayed
/// committed while any of them lived: 191 MiB committed for 64 MiB held (4 partitions of
/// single-PutObject objects, `e2e_s3_memory.rs`).
const ALLOC: usize = 256 * 1024;

/// Encodes the records of one object after another; reusable across objects.
pub struct Encoder {
    opts: FormatOptions,
    /// The level in use (the codec default filled in), 0 without compression.
    level: i32,
    sink: Sink,
    /// One record, before it goes to the sink.
    scratch: Vec<u8>,
    /// csv: the headers column, before it is quoted.
    field: Vec<u8>,
    /// JSON formats: the record writer (the partition's fields rendered once).
    json: json::RecordWriter,
    /// Records pushed into the current object.
    records: u64,
    /// Output bytes of the last record pushed, while it can be taken back (uncompressed, not
    /// taken yet); see [`Encoder::unpush`].
    last_len: Option<usize>,
    /// Between begin() and finish().
    open: bool,
    /// `parquet`: the row groups and the footer.
    parquet: Option<Box<parquet::ParquetWriter>>,
}

impl fmt::Debug for Encoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Encoder")
            .field("format", &self.opts.format)
            .field("compression", &self.opts.compression)
            .field("level", &self.level)
            .field("metadata", &self.opts.metadata)
            .field("headers", &self.opts.headers)
            .field("payload", &self.opts.payload)
            .field("framing", &self.opts.framing)
            .field("open", &self.open)
            .field("records", &self.records)
            .field("input_len", &self.sink.input)
            .field("output_len", &self.output_len())
            .field("error", &self.sink.error)
            .finish_non_exhaustive()
    }
}

/// The zstd parameters of the default `compression_level`: a 256 KiB window, hash and chain
/// tables of 2^14 entries. Level 3's own (a 2 MiB window, 2^17 and 2^16 entries: 768 KiB of
/// tables) made each compressor's state larger than its share of the cache: on the bench's
/// 1 KiB JSON (`spillway-bench s3-sink`, 4 partitions on one shard) json_lines + zstd ran at
/// 126 MB/s and 5.6 CPU s/GiB, and split into 8 open objects per partition at 87 MB/s and
/// 9.6 s/GiB (perf: the match finder's samples per byte nearly doubled); with these 167 MB/s,
/// 3.8 s/GiB and 121 MB/s, 6.4 s/GiB, objects as small (0.209 of the payload against 0.211).
/// A level set in `compression_level` takes zstd's own parameters for it.
const ZSTD_TABLES: [CParameter; 3] = [
    CParameter::WindowLog(18),
    CParameter::HashLog(14),
    CParameter::ChainLog(14),
];

impl Encoder {
    /// An encoder for `opts`; a level out of range is an error naming
    /// `s3.compression_level` (the check is the config's, [`FormatOptions::level_in_use`]).
    pub fn new(opts: FormatOptions) -> Result<Encoder, String> {
        let level = opts.level_in_use()?;
        let codec = match opts.compression {
            Compression::None => Codec::None,
            Compression::Gzip => Codec::Gzip(Box::new(Gzip::new(level)?)),
            Compression::Zstd => {
                let mut zstd = zstd::stream::raw::Encoder::new(level)
                    .map_err(|e| format!("s3.compression = \"zstd\": {e}"))?;
                zstd.set_parameter(CParameter::ChecksumFlag(true))
                    .map_err(|e| format!("s3.compression = \"zstd\": {e}"))?;
                if opts.level.is_none() {
                    // The default: level 3 with a 256 KiB window and 16 Ki-entry tables
                    // instead of its 2 MiB and 128/64 Ki: every open object of a shard has
                    // its own compressor, and with the level's own tables they no longer stay
                    // in cache (see ZSTD_TABLES).
                    for p in ZSTD_TABLES {
                        zstd.set_parameter(p)
                            .map_err(|e| format!("s3.compression = \"zstd\": {e}"))?;
                    }
                }
                Codec::Zstd(Box::new(zstd))
            }
        };
        let parquet = match opts.format {
            Format::Parquet => {
                if opts.compression != Compression::None {
                    return Err("a Parquet object compresses its pages: set \
                                s3.parquet.compression and leave s3.compression out"
                        .to_owned());
                }
                Some(Box::new(parquet::ParquetWriter::new(
                    &opts.parquet,
                    opts.metadata,
                    opts.headers,
                )?))
            }
            _ => None,
        };
        Ok(Encoder {
            parquet,
            opts,
            level,
            sink: Sink {
                out: OutBuf::new(),
                codec,
                input: 0,
                taken: 0,
                error: None,
            },
            scratch: Vec::with_capacity(4096),
            field: Vec::new(),
            json: json::RecordWriter::default(),
            records: 0,
            last_len: None,
            open: false,
        })
    }

    /// Starts an object: json_array writes `[`, csv writes its header line. An object begun
    /// and not finished is discarded, with the output take() did not return.
    pub fn begin(&mut self) {
        self.sink.begin();
        self.records = 0;
        self.last_len = None;
        self.open = true;
        match self.opts.format {
            Format::JsonArray => self.sink.write(b"["),
            Format::Csv => {
                self.scratch.clear();
                if self.opts.metadata {
                    self.scratch.extend_from_slice(
                        b"stream,topic,partition,offset,id,timestamp,origin_timestamp,",
                    );
                }
                if self.opts.headers {
                    self.scratch.extend_from_slice(b"headers,");
                }
                self.scratch.extend_from_slice(b"payload\r\n");
                self.sink.write(&self.scratch);
            }
            Format::Parquet => {
                let head = match self.parquet.as_mut().map(|p| p.begin()) {
                    Some(Ok(head)) => head,
                    Some(Err(e)) => return self.sink.fail(e),
                    None => return self.sink.fail("parquet: no writer".to_owned()),
                };
                self.sink.write(&head);
            }
            Format::JsonLines | Format::Raw => {}
        }
    }

    /// Whether `m` can be written as a record; the reason if not. Only `parquet` refuses
    /// messages (a typed column without its value, a payload that does not fit; see
    /// [`parquet`]); a message refused goes to `on_error`, and the object is as it was.
    pub fn admit(&mut self, m: &Message) -> Result<(), String> {
        match self.parquet.as_mut() {
            Some(p) => p.admit(m),
            None => Ok(()),
        }
    }

    /// Appends one record (begins an object first if none is open).
    pub fn push(&mut self, p: &PartitionInfo, m: &Message) {
        if !self.open {
            self.begin();
        }
        let before = self.sink.out.filled;
        if let Some(pq) = self.parquet.as_mut() {
            self.last_len = None;
            if self.sink.error.is_some() {
                return;
            }
            if let Err(e) = pq.push(p, m) {
                return self.sink.fail(e);
            }
            self.records += 1;
            if pq.row_group_full() {
                match pq.flush() {
                    Ok(group) => self.sink.write(&group),
                    Err(e) => self.sink.fail(e),
                }
            }
            return;
        }
        let o = &self.opts;
        if matches!(o.format, Format::JsonLines | Format::JsonArray)
            && matches!(self.sink.codec, Codec::None)
            && self.sink.error.is_none()
        {
            // Uncompressed JSON: the record is written straight into the output, so the
            // payload is copied once (from the poll's reply) instead of twice.
            let out = self.sink.out.direct(record_room(m));
            let start = out.len();
            if o.format == Format::JsonArray && self.records > 0 {
                out.put_u8(b',');
            }
            self.json.record(out, record_options(o), p, m);
            if o.format == Format::JsonLines {
                out.put_u8(b'\n');
            }
            let n = out.len() - start;
            self.sink.out.filled += n;
            self.sink.input += n as u64;
            self.records += 1;
            self.last_len = Some(n);
            return;
        }
        let out = &mut self.scratch;
        out.clear();
        match o.format {
            Format::JsonLines => {
                self.json.record(out, record_options(o), p, m);
                out.push(b'\n');
            }
            Format::JsonArray => {
                if self.records > 0 {
                    out.push(b',');
                }
                self.json.record(out, record_options(o), p, m);
            }
            Format::Csv => csv_record(out, &mut self.field, o, p, m),
            // Written above.
            Format::Parquet => {}
            Format::Raw => {
                // Straight to the sink: no copy of the payload into the scratch buffer.
                match &o.framing {
                    Framing::Separator(sep) => {
                        self.sink.write(&m.payload);
                        self.sink.write(sep);
                    }
                    Framing::LengthPrefix => match u32::try_from(m.payload.len()) {
                        Ok(len) => {
                            self.sink.write(&len.to_be_bytes());
                            self.sink.write(&m.payload);
                        }
                        Err(_) => self.sink.fail(format!(
                            "raw framing: a payload of {} bytes does not fit a u32 length prefix",
                            m.payload.len()
                        )),
                    },
                }
            }
        }
        if !out.is_empty() {
            self.sink.write(out);
        }
        self.records += 1;
        self.last_len = (matches!(self.sink.codec, Codec::None) && self.sink.error.is_none())
            .then(|| self.sink.out.filled.saturating_sub(before));
    }

    /// Takes the last record pushed back out of the object, when that can be done exactly:
    /// without compression (a compressor's state cannot be wound back), before take() handed
    /// its bytes out, and when it is not the object's only record. The caller then closes the
    /// object without it and pushes it into the next, so an object never passes its size limit
    /// because of one record. `false`: nothing changed.
    pub fn unpush(&mut self) -> bool {
        let Some(len) = self.last_len.take() else {
            return false;
        };
        if self.records < 2 || len > self.sink.out.filled {
            return false;
        }
        self.sink.out.filled -= len;
        self.sink.input -= len as u64;
        self.records -= 1;
        true
    }

    /// Output bytes (compressed) ready to upload so far, taken out (may be empty while a
    /// compressor buffers). Call often; the caller appends them to the upload.
    pub fn take(&mut self) -> Bytes {
        self.last_len = None;
        self.sink.take()
    }

    /// Total output bytes this object has produced so far, including what take() returned
    /// (the compressed size; see the module docs for how much a compressor holds back). It
    /// keeps the object's total after finish(), until the next begin().
    pub fn output_len(&self) -> u64 {
        self.sink.taken + self.sink.out.filled as u64
    }

    /// Output buffers allocated so far; used-up ones are reused once the chunks taken from
    /// them are dropped.
    pub fn buffers_allocated(&self) -> u64 {
        self.sink.out.allocated
    }

    /// Keeps up to enough used-up output buffers for reuse to cover `bytes` of output held
    /// elsewhere (the uploads' parts in flight and the part gathering): a buffer is reused
    /// only after every chunk of it is dropped, so fewer would be let go before their parts
    /// are sent.
    pub fn keep_for_reuse(&mut self, bytes: u64) {
        let n = bytes.div_ceil(ALLOC as u64) + 1;
        self.sink.out.keep = usize::try_from(n).unwrap_or(usize::MAX);
    }

    /// Lets go of the used-up buffers kept for reuse (a writer gone idle keeps no memory
    /// beyond what its chunks hold).
    pub fn release_spare(&mut self) {
        self.sink.out.spare.clear();
        self.sink.release_pending();
    }

    /// Output bytes not taken yet.
    pub fn waiting(&self) -> u64 {
        self.sink.out.filled as u64
    }

    /// What the encoder holds for the current object: the output not taken yet, gzip's input
    /// not yet compressed (less than a block), and for `parquet` the rows not yet written as a
    /// row group (their size as they came).
    pub fn held(&self) -> u64 {
        self.waiting()
            + self.sink.pending_input() as u64
            + self.parquet.as_ref().map_or(0, |p| p.held())
    }

    /// The object's size so far, as rotation by `max_object_size` counts it: the output
    /// (see [`Encoder::output_len`]); gzip's pending input at the last member's ratio (at
    /// its full size before the encoder's first member); and for `parquet` the rows not yet
    /// written, at their size before encoding (so an object closed at the limit stays within
    /// it, its footer aside).
    pub fn size(&self) -> u64 {
        self.output_len()
            + self.sink.pending_estimate()
            + self.parquet.as_ref().map_or(0, |p| p.held())
    }

    /// Uncompressed bytes encoded for this object so far.
    pub fn input_len(&self) -> u64 {
        self.sink.input
    }

    /// Ends the object: json_array `]`, the compressor's trailer; returns the rest of the
    /// output. The encoder is then ready for begin() of the next object. Without an open
    /// object, it begins one first (an object with no records).
    pub fn finish(&mut self) -> Bytes {
        if !self.open {
            self.begin();
        }
        self.last_len = None;
        if self.opts.format == Format::JsonArray {
            self.sink.write(b"]");
        }
        if let Some(pq) = self.parquet.as_mut()
            && self.sink.error.is_none()
        {
            match pq.finish() {
                Ok(tail) => self.sink.write(&tail),
                Err(e) => self.sink.fail(e),
            }
        }
        self.sink.finish();
        self.open = false;
        self.sink.take()
    }

    /// The first error of the current object, if any: a compressor failure (which the codecs
    /// only report for resource exhaustion) or a raw payload too long for its length prefix.
    /// The object's output is then incomplete and must not be completed; the next begin()
    /// clears it.
    pub fn error(&self) -> Option<&str> {
        self.sink.error.as_deref()
    }

    /// Records pushed into the current object.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Content-Type for the object: application/x-ndjson (json_lines), application/json
    /// (json_array), application/octet-stream (raw), text/csv (csv).
    pub fn content_type(&self) -> &'static str {
        match self.opts.format {
            Format::JsonLines => "application/x-ndjson",
            Format::JsonArray => "application/json",
            Format::Raw => "application/octet-stream",
            Format::Csv => "text/csv",
            Format::Parquet => "application/vnd.apache.parquet",
        }
    }

    /// Content-Encoding: None, Some("gzip"), Some("zstd").
    pub fn content_encoding(&self) -> Option<&'static str> {
        match self.opts.compression {
            Compression::None => None,
            Compression::Gzip => Some("gzip"),
            Compression::Zstd => Some("zstd"),
        }
    }

    /// File extension for keys (without the leading dot): "jsonl", "json", "bin", "csv", plus
    /// ".gz" / ".zst".
    pub fn extension(&self) -> String {
        let base = match self.opts.format {
            Format::JsonLines => "jsonl",
            Format::JsonArray => "json",
            Format::Raw => "bin",
            Format::Csv => "csv",
            Format::Parquet => "parquet",
        };
        match self.opts.compression {
            Compression::None => base.to_owned(),
            Compression::Gzip => format!("{base}.gz"),
            Compression::Zstd => format!("{base}.zst"),
        }
    }
}

/// About the most a JSON record of `m` takes: its metadata and separators, the payload and
/// headers as they are, or base64 or escaped (base64 is 4/3 of its input, and text that needs
/// escaping rarely doubles; the buffer grows by itself past this).
fn record_room(m: &Message) -> usize {
    512 + 2 * (m.payload.len() + m.headers.len())
}

/// The JSON record of `o` (the file sink's layout, without the offset-only metadata).
fn record_options(o: &FormatOptions) -> json::RecordOptions {
    json::RecordOptions {
        meta: if o.metadata {
            json::Meta::All
        } else {
            json::Meta::Off
        },
        headers: o.headers,
        payload: o.payload,
    }
}

#[cfg(test)]
mod tests;
