//! `format = "parquet"`: Apache Parquet objects written row group by row group.
//!
//! Rows gather in Arrow column builders. Once they hold `row_group_size` bytes (payloads,
//! headers and metadata as they came, before encoding) or `row_group_rows` rows, they are
//! written as one row group by arrow-rs's `ArrowWriter` into a buffer of its own, and the
//! encoded bytes move on to the encoder's output at once, so the multipart upload streams
//! whole row groups and a partition holds at most one row group unencoded plus its encoding.
//! The file footer (schema, row-group index, statistics) is written when the object closes.
//!
//! Columns, in this order:
//!
//! | column | type | when |
//! | --- | --- | --- |
//! | `stream`, `topic` | UTF-8 | `metadata` |
//! | `partition` | uint32 | `metadata` |
//! | `offset` | uint64 | `metadata` |
//! | `id` | UTF-8, the u128 in decimal (as the JSON formats write it) | `metadata` |
//! | `timestamp`, `origin_timestamp` | timestamp, microseconds, UTC | `metadata` |
//! | `headers` | map of UTF-8 to UTF-8 (values as text, like the JSON formats) | `headers` |
//! | `payload` | binary, or UTF-8 (`payload = "string"`) | unless `payload = "none"` |
//! | each `[[parquet.columns]]` | its declared type, from the JSON payload at its pointer | always |
//!
//! A message that cannot be a row (a typed column's value is missing when required or of
//! another type, the payload is not JSON while typed columns are declared, or not UTF-8 with
//! `payload = "string"`) is refused by [`ParquetWriter::admit`] with the reason, before any
//! column took a value from it; the sink sends it to `on_error`.
//!
//! In an Iceberg table's data files (`ParquetConfig::table`) `partition` is an int32 and
//! `offset` an int64, and every field carries its Iceberg field id (`PARQUET:field_id`): the
//! columns in order from 1, then the headers map's key and value. [`table_schema`] is that
//! schema, which the table is created with.
//!
//! The same messages always make the same bytes (no wall-clock time is written), so an object
//! written again after a failure or a crash is the same object.

use std::sync::Arc;

use arrow_array::builder::{
    ArrayBuilder, BinaryBuilder, BooleanBuilder, Float64Builder, Int64Builder, MapBuilder,
    StringBuilder, TimestampMicrosecondBuilder, UInt32Builder, UInt64Builder,
};
use arrow_array::{Array as _, ArrayRef, Int32Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression as PageCodec, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;
use serde_json::Value;

use crate::config::{
    ColumnType, PARQUET_OWN_COLUMNS, ParquetColumn, ParquetCompression, ParquetConfig,
    ParquetPayload,
};
use crate::message::{Message, PartitionInfo};

/// The field metadata key of a Parquet field id (what Iceberg readers map columns by).
const FIELD_ID: &str = "PARQUET:field_id";

/// What a row is counted as besides its payload, headers and names: the fixed-size columns
/// and the builders' offsets.
const ROW_OVERHEAD: u64 = 64;

const UTC: &str = "UTC";

/// One typed column's builder.
enum Typed {
    String(StringBuilder),
    Int64(Int64Builder),
    Float64(Float64Builder),
    Boolean(BooleanBuilder),
    Timestamp(TimestampMicrosecondBuilder),
    Json(StringBuilder),
}

/// A value taken from a payload for one typed column, before it goes to its builder.
#[derive(Debug, Clone, PartialEq)]
enum Cell {
    Null,
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

enum PayloadColumn {
    Binary(BinaryBuilder),
    String(StringBuilder),
    None,
}

/// The builders of the rows not yet written.
struct Columns {
    stream: StringBuilder,
    topic: StringBuilder,
    partition: UInt32Builder,
    offset: UInt64Builder,
    id: StringBuilder,
    timestamp: TimestampMicrosecondBuilder,
    origin_timestamp: TimestampMicrosecondBuilder,
    headers: MapBuilder<StringBuilder, StringBuilder>,
    payload: PayloadColumn,
    typed: Vec<Typed>,
}

impl Columns {
    fn new(cfg: &ParquetConfig) -> Columns {
        let ts = || TimestampMicrosecondBuilder::new().with_timezone(UTC);
        Columns {
            stream: StringBuilder::new(),
            topic: StringBuilder::new(),
            partition: UInt32Builder::new(),
            offset: UInt64Builder::new(),
            id: StringBuilder::new(),
            timestamp: ts(),
            origin_timestamp: ts(),
            headers: map_builder(header_ids(cfg)),
            payload: match cfg.payload {
                ParquetPayload::Binary => PayloadColumn::Binary(BinaryBuilder::new()),
                ParquetPayload::String => PayloadColumn::String(StringBuilder::new()),
                ParquetPayload::None => PayloadColumn::None,
            },
            typed: cfg
                .columns
                .iter()
                .map(|c| match c.kind {
                    ColumnType::String => Typed::String(StringBuilder::new()),
                    ColumnType::Int64 => Typed::Int64(Int64Builder::new()),
                    ColumnType::Float64 => Typed::Float64(Float64Builder::new()),
                    ColumnType::Boolean => Typed::Boolean(BooleanBuilder::new()),
                    ColumnType::Timestamp => Typed::Timestamp(ts()),
                    ColumnType::Json => Typed::Json(StringBuilder::new()),
                })
                .collect(),
        }
    }

    /// The arrays of the rows gathered (the builders are left empty), in schema order.
    fn finish(&mut self, metadata: bool, headers: bool, table: bool) -> Vec<ArrayRef> {
        let mut out: Vec<ArrayRef> = Vec::new();
        if metadata {
            out.push(Arc::new(self.stream.finish()));
            out.push(Arc::new(self.topic.finish()));
            let partition = self.partition.finish();
            let offset = self.offset.finish();
            if table {
                // Iggy's partition ids and offsets stay far below the signed limits.
                let signed = |v: u32| i32::try_from(v).unwrap_or(i32::MAX);
                out.push(Arc::new(Int32Array::from_iter_values(
                    partition.values().iter().map(|&v| signed(v)),
                )));
                out.push(Arc::new(Int64Array::from_iter_values(
                    offset.values().iter().map(|&v| clamp_i64(v)),
                )));
            } else {
                out.push(Arc::new(partition));
                out.push(Arc::new(offset));
            }
            out.push(Arc::new(self.id.finish()));
            out.push(Arc::new(self.timestamp.finish()));
            out.push(Arc::new(self.origin_timestamp.finish()));
        }
        if headers {
            out.push(Arc::new(self.headers.finish()));
        }
        match &mut self.payload {
            PayloadColumn::Binary(b) => out.push(Arc::new(b.finish())),
            PayloadColumn::String(b) => out.push(Arc::new(b.finish())),
            PayloadColumn::None => {}
        }
        for t in &mut self.typed {
            out.push(match t {
                Typed::String(b) | Typed::Json(b) => ArrayBuilder::finish(b),
                Typed::Int64(b) => ArrayBuilder::finish(b),
                Typed::Float64(b) => ArrayBuilder::finish(b),
                Typed::Boolean(b) => ArrayBuilder::finish(b),
                Typed::Timestamp(b) => ArrayBuilder::finish(b),
            });
        }
        out
    }
}

/// The headers' builder, with Parquet's names for a map's parts (`key_value`, `key`, `value`:
/// the LogicalTypes spec's, which pyarrow and Spark use too) instead of arrow-rs's own; with
/// `ids`, its key and value carry those field ids.
fn map_builder(ids: Option<(i32, i32)>) -> MapBuilder<StringBuilder, StringBuilder> {
    let names = arrow_array::builder::MapFieldNames {
        entry: "key_value".to_owned(),
        key: "key".to_owned(),
        value: "value".to_owned(),
    };
    let builder = MapBuilder::new(Some(names), StringBuilder::new(), StringBuilder::new());
    match ids {
        Some((key, value)) => builder
            .with_keys_field(with_id(Field::new("key", DataType::Utf8, false), key))
            .with_values_field(with_id(Field::new("value", DataType::Utf8, true), value)),
        None => builder,
    }
}

fn with_id(field: Field, id: i32) -> Field {
    field.with_metadata([(FIELD_ID.to_owned(), id.to_string())].into())
}

/// The sink's own columns in a table's data files, by field id from 1 (the order of
/// [`PARQUET_OWN_COLUMNS`]).
const OWN_COLUMNS: [&str; 9] = PARQUET_OWN_COLUMNS;

/// A column's field id in a table's data files: the sink's own from 1 (whether written or
/// not), then the typed columns in their order.
pub(crate) fn field_id(cfg: &ParquetConfig, name: &str) -> i32 {
    let place = OWN_COLUMNS
        .iter()
        .position(|c| *c == name)
        .unwrap_or_else(|| {
            OWN_COLUMNS.len()
                + cfg
                    .columns
                    .iter()
                    .position(|c| c.name == name)
                    .unwrap_or(cfg.columns.len())
        });
    i32::try_from(place + 1).unwrap_or(i32::MAX)
}

/// The field ids of the headers map's key and value in a table's data files: after the
/// columns'.
fn header_ids(cfg: &ParquetConfig) -> Option<(i32, i32)> {
    cfg.table.then(|| {
        let after = i32::try_from(OWN_COLUMNS.len() + cfg.columns.len()).unwrap_or(i32::MAX - 2);
        (after + 1, after + 2)
    })
}

/// The Arrow schema of an Iceberg table's data files for `cfg` (`metadata`/`headers` as
/// `s3.metadata`/`s3.headers`), with the field ids the table is created with.
#[cfg_attr(not(feature = "iceberg"), allow(dead_code))]
pub(crate) fn table_schema(cfg: &ParquetConfig, metadata: bool, headers: bool) -> Schema {
    let cfg = ParquetConfig {
        table: true,
        ..cfg.clone()
    };
    schema(&cfg, metadata, headers)
}

/// The Arrow schema of the objects `cfg` describes.
fn schema(cfg: &ParquetConfig, metadata: bool, headers: bool) -> Schema {
    let ts = || DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into()));
    let (partition, offset) = if cfg.table {
        (DataType::Int32, DataType::Int64)
    } else {
        (DataType::UInt32, DataType::UInt64)
    };
    let mut fields = Vec::new();
    if metadata {
        fields.push(Field::new("stream", DataType::Utf8, false));
        fields.push(Field::new("topic", DataType::Utf8, false));
        fields.push(Field::new("partition", partition, false));
        fields.push(Field::new("offset", offset, false));
        fields.push(Field::new("id", DataType::Utf8, false));
        fields.push(Field::new("timestamp", ts(), false));
        fields.push(Field::new("origin_timestamp", ts(), false));
    }
    if headers {
        // The map type exactly as the builder makes it (its field names and nullability).
        let mut probe = map_builder(header_ids(cfg));
        fields.push(Field::new(
            "headers",
            probe.finish().data_type().clone(),
            false,
        ));
    }
    match cfg.payload {
        ParquetPayload::Binary => fields.push(Field::new("payload", DataType::Binary, false)),
        ParquetPayload::String => fields.push(Field::new("payload", DataType::Utf8, false)),
        ParquetPayload::None => {}
    }
    for c in &cfg.columns {
        let kind = match c.kind {
            ColumnType::String | ColumnType::Json => DataType::Utf8,
            ColumnType::Int64 => DataType::Int64,
            ColumnType::Float64 => DataType::Float64,
            ColumnType::Boolean => DataType::Boolean,
            ColumnType::Timestamp => ts(),
        };
        fields.push(Field::new(&c.name, kind, !c.required));
    }
    if cfg.table {
        // Ids by name, so a table's schema keeps its ids whichever columns a sink writes.
        fields = fields
            .into_iter()
            .map(|f| {
                let id = field_id(cfg, f.name());
                with_id(f, id)
            })
            .collect();
    }
    Schema::new(fields)
}

/// See the module docs.
pub(super) struct ParquetWriter {
    cfg: ParquetConfig,
    metadata: bool,
    headers: bool,
    schema: SchemaRef,
    props: WriterProperties,
    cols: Columns,
    /// Rows in the builders.
    rows: usize,
    /// What they hold, as counted against `row_group_size`.
    held: u64,
    /// The object being written; its buffer is emptied after each row group.
    writer: Option<ArrowWriter<Vec<u8>>>,
    /// The typed values of the message [`ParquetWriter::admit`] took last, and its offset.
    staged: Option<(u64, Vec<Cell>)>,
}

impl ParquetWriter {
    /// A writer for `cfg`; `metadata`/`headers` as `s3.metadata`/`s3.headers`.
    pub(super) fn new(cfg: &ParquetConfig, metadata: bool, headers: bool) -> Result<Self, String> {
        let codec = match (cfg.compression, cfg.compression_level) {
            (ParquetCompression::None, _) => PageCodec::UNCOMPRESSED,
            (ParquetCompression::Snappy, _) => PageCodec::SNAPPY,
            (ParquetCompression::Zstd, level) => PageCodec::ZSTD(
                ZstdLevel::try_new(level.unwrap_or(3))
                    .map_err(|e| format!("s3.parquet.compression_level: {e}"))?,
            ),
        };
        let mut props = WriterProperties::builder()
            .set_compression(codec)
            .set_max_row_group_row_count(Some(cfg.row_group_rows.max(1)))
            .set_created_by(format!("spillway {}", env!("CARGO_PKG_VERSION")));
        // Columns whose values rarely repeat: a dictionary would only be given up again.
        for unique in ["offset", "id", "timestamp", "origin_timestamp", "payload"] {
            props = props.set_column_dictionary_enabled(ColumnPath::from(unique), false);
        }
        Ok(ParquetWriter {
            schema: Arc::new(schema(cfg, metadata, headers)),
            props: props.build(),
            cols: Columns::new(cfg),
            cfg: cfg.clone(),
            metadata,
            headers,
            rows: 0,
            held: 0,
            writer: None,
            staged: None,
        })
    }

    /// Starts an object (an unfinished one is dropped); returns its first bytes (the magic).
    pub(super) fn begin(&mut self) -> Result<Vec<u8>, String> {
        self.writer = None;
        if self.rows > 0 {
            // Rows of a dropped object.
            let _ = self
                .cols
                .finish(self.metadata, self.headers, self.cfg.table);
        }
        self.rows = 0;
        self.held = 0;
        let mut writer = ArrowWriter::try_new(
            Vec::new(),
            Arc::clone(&self.schema),
            Some(self.props.clone()),
        )
        .map_err(|e| format!("parquet: {e}"))?;
        let head = std::mem::take(writer.inner_mut());
        self.writer = Some(writer);
        Ok(head)
    }

    /// Whether `m` can be a row; the reason (naming the column) if not. Its typed values are
    /// kept for the [`ParquetWriter::push`] of the same message.
    pub(super) fn admit(&mut self, m: &Message) -> Result<(), String> {
        if self.cfg.payload == ParquetPayload::String && std::str::from_utf8(&m.payload).is_err() {
            return Err("the payload is not UTF-8, and s3.parquet.payload = \"string\"".to_owned());
        }
        let cells = typed_cells(&self.cfg.columns, &m.payload)?;
        self.staged = Some((m.offset, cells));
        Ok(())
    }

    /// Adds `m` as a row (admitting it first unless [`ParquetWriter::admit`] just did); an
    /// error leaves the rows as they were.
    pub(super) fn push(&mut self, p: &PartitionInfo, m: &Message) -> Result<(), String> {
        let cells = match self.staged.take() {
            Some((offset, cells)) if offset == m.offset => cells,
            _ => {
                self.admit(m)?;
                self.staged.take().map(|(_, c)| c).unwrap_or_default()
            }
        };
        let c = &mut self.cols;
        let mut held = ROW_OVERHEAD;
        if self.metadata {
            c.stream.append_value(&*p.stream);
            c.topic.append_value(&*p.topic);
            c.partition.append_value(p.partition.0);
            c.offset.append_value(m.offset);
            c.id.append_value(itoa::Buffer::new().format(m.id));
            c.timestamp.append_value(clamp_i64(m.timestamp));
            c.origin_timestamp
                .append_value(clamp_i64(m.origin_timestamp));
            held += (p.stream.len() + p.topic.len() + 40) as u64;
        }
        if self.headers {
            for h in crate::message::headers(&m.headers).map_while(Result::ok) {
                c.headers.keys().append_value(h.key_str());
                c.headers.values().append_value(h.value_string());
            }
            // Appending a map entry only fails when the keys and values differ in number.
            c.headers
                .append(true)
                .map_err(|e| format!("parquet headers: {e}"))?;
            held += m.headers.len() as u64;
        }
        match &mut c.payload {
            PayloadColumn::Binary(b) => b.append_value(&m.payload),
            PayloadColumn::String(b) => {
                b.append_value(String::from_utf8_lossy(&m.payload));
            }
            PayloadColumn::None => {}
        }
        if !matches!(c.payload, PayloadColumn::None) {
            held += m.payload.len() as u64;
        }
        for (t, cell) in c.typed.iter_mut().zip(cells) {
            held += 16;
            match (t, cell) {
                (Typed::String(b) | Typed::Json(b), Cell::Text(s)) => {
                    held += s.len() as u64;
                    b.append_value(s);
                }
                (Typed::Int64(b), Cell::Int(v)) => b.append_value(v),
                (Typed::Timestamp(b), Cell::Int(v)) => b.append_value(v),
                (Typed::Float64(b), Cell::Float(v)) => b.append_value(v),
                (Typed::Boolean(b), Cell::Bool(v)) => b.append_value(v),
                (Typed::String(b) | Typed::Json(b), _) => b.append_null(),
                (Typed::Int64(b), _) => b.append_null(),
                (Typed::Timestamp(b), _) => b.append_null(),
                (Typed::Float64(b), _) => b.append_null(),
                (Typed::Boolean(b), _) => b.append_null(),
            }
        }
        self.rows += 1;
        self.held += held;
        Ok(())
    }

    /// Whether the rows gathered make a row group.
    pub(super) fn row_group_full(&self) -> bool {
        self.rows >= self.cfg.row_group_rows || self.held >= self.cfg.row_group_size.0
    }

    /// Bytes the rows not yet written hold (as counted against `row_group_size`).
    pub(super) fn held(&self) -> u64 {
        self.held
    }

    /// Writes the rows gathered as one row group; returns its encoded bytes.
    pub(super) fn flush(&mut self) -> Result<Vec<u8>, String> {
        if self.rows == 0 {
            return Ok(Vec::new());
        }
        let arrays = self
            .cols
            .finish(self.metadata, self.headers, self.cfg.table);
        self.rows = 0;
        self.held = 0;
        let writer = self
            .writer
            .as_mut()
            .ok_or_else(|| "parquet: no object begun".to_owned())?;
        let batch = RecordBatch::try_new(Arc::clone(&self.schema), arrays)
            .map_err(|e| format!("parquet: {e}"))?;
        writer.write(&batch).map_err(|e| format!("parquet: {e}"))?;
        writer.flush().map_err(|e| format!("parquet: {e}"))?;
        Ok(std::mem::take(writer.inner_mut()))
    }

    /// Writes the last row group and the footer; returns the rest of the object.
    pub(super) fn finish(&mut self) -> Result<Vec<u8>, String> {
        let mut out = self.flush()?;
        let writer = self
            .writer
            .take()
            .ok_or_else(|| "parquet: no object begun".to_owned())?;
        let tail = writer.into_inner().map_err(|e| format!("parquet: {e}"))?;
        out.extend_from_slice(&tail);
        Ok(out)
    }
}

fn clamp_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The typed values of `payload` for `columns`, or why it does not fit them.
fn typed_cells(columns: &[ParquetColumn], payload: &[u8]) -> Result<Vec<Cell>, String> {
    if columns.is_empty() {
        return Ok(Vec::new());
    }
    let doc: Value = serde_json::from_slice(payload).map_err(|e| {
        format!(
            "the payload is not JSON ({e}), and s3.parquet.columns take values from JSON payloads"
        )
    })?;
    columns
        .iter()
        .enumerate()
        .map(|(i, col)| {
            cell(col, doc.pointer(&col.pointer))
                .map_err(|e| format!("s3.parquet.columns[{i}] ({:?}): {e}", col.name))
        })
        .collect()
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// One typed value, or why it does not fit the column.
fn cell(col: &ParquetColumn, v: Option<&Value>) -> Result<Cell, String> {
    let v = match v {
        None | Some(Value::Null) if col.required => {
            return Err(format!(
                "no value at {:?}, and the column is required",
                col.pointer
            ));
        }
        None | Some(Value::Null) => return Ok(Cell::Null),
        Some(v) => v,
    };
    let wrong = |want: &str| {
        format!(
            "the value at {:?} is {}, not {want}",
            col.pointer,
            kind_of(v)
        )
    };
    match col.kind {
        ColumnType::String => v
            .as_str()
            .map(|s| Cell::Text(s.to_owned()))
            .ok_or_else(|| wrong("a string")),
        ColumnType::Json => Ok(Cell::Text(v.to_string())),
        ColumnType::Int64 => match v {
            Value::Number(n) => n.as_i64().map(Cell::Int).ok_or_else(|| {
                format!(
                    "the value at {:?} ({n}) is not an integer within int64",
                    col.pointer
                )
            }),
            _ => Err(wrong("an integer")),
        },
        ColumnType::Float64 => v.as_f64().map(Cell::Float).ok_or_else(|| wrong("a number")),
        ColumnType::Boolean => v
            .as_bool()
            .map(Cell::Bool)
            .ok_or_else(|| wrong("a boolean")),
        ColumnType::Timestamp => match v {
            Value::Number(n) => n
                .as_i64()
                .and_then(|ms| ms.checked_mul(1000))
                .map(Cell::Int)
                .ok_or_else(|| {
                    format!(
                        "the value at {:?} ({n}) is not a time in integer milliseconds since 1970",
                        col.pointer
                    )
                }),
            Value::String(s) => s
                .parse::<jiff::Timestamp>()
                .map(|t| Cell::Int(t.as_microsecond()))
                .map_err(|e| {
                    format!(
                        "the value at {:?} is not an RFC 3339 time: {e}",
                        col.pointer
                    )
                }),
            _ => Err(wrong("a time (integer milliseconds or an RFC 3339 string)")),
        },
    }
}

#[cfg(test)]
#[path = "parquet_tests.rs"]
mod tests;
