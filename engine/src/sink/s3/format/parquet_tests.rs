//! Parquet objects read back with arrow-rs's reader (the engine tests also read them with
//! pyarrow): every column of every row against the messages, row groups by size and count,
//! refusals by column, and the bytes held.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::rc::Rc;

use arrow_array::Array as _;
use arrow_array::cast::AsArray as _;
use arrow_array::types::{
    Float64Type, Int64Type, TimestampMicrosecondType, UInt32Type, UInt64Type,
};
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::super::{Encoder, Format, FormatOptions};
use crate::config::{ColumnType, ParquetColumn, ParquetCompression, ParquetConfig, ParquetPayload};
use crate::ids::{PartitionId, Slot};
use crate::message::{Message, PartitionInfo, encode_headers};

fn part() -> PartitionInfo {
    PartitionInfo {
        slot: Slot(0),
        stream: Rc::from("events"),
        topic: Rc::from("orders"),
        partition: PartitionId(3),
    }
}

fn msg(offset: u64, payload: &[u8], headers: Bytes) -> Message {
    Message {
        offset,
        id: u128::MAX - u128::from(offset),
        timestamp: 1_700_000_000_000_000 + offset,
        origin_timestamp: 1_600_000_000_000_000 + offset,
        payload: Bytes::copy_from_slice(payload),
        headers,
    }
}

fn opts(pq: ParquetConfig) -> FormatOptions {
    FormatOptions {
        format: Format::Parquet,
        parquet: pq,
        ..FormatOptions::default()
    }
}

fn col(name: &str, pointer: &str, kind: ColumnType, required: bool) -> ParquetColumn {
    ParquetColumn {
        name: name.to_owned(),
        pointer: pointer.to_owned(),
        kind,
        required,
    }
}

/// One object of `msgs`, taken out in pieces as the sink does.
fn encode(e: &mut Encoder, msgs: &[Message]) -> Vec<u8> {
    let p = part();
    e.begin();
    let mut out = Vec::new();
    for m in msgs {
        e.admit(m).unwrap();
        e.push(&p, m);
        out.extend_from_slice(&e.take());
    }
    out.extend_from_slice(&e.finish());
    assert_eq!(e.error(), None);
    out
}

fn read(bytes: Vec<u8>) -> (Vec<arrow_array::RecordBatch>, usize) {
    let builder = ParquetRecordBatchReaderBuilder::try_new(Bytes::from(bytes)).unwrap();
    let groups = builder.metadata().num_row_groups();
    let batches = builder.build().unwrap().map(Result::unwrap).collect();
    (batches, groups)
}

#[test]
fn every_column_of_every_row_reads_back_in_row_groups_by_count() {
    let pq = ParquetConfig {
        row_group_rows: 10,
        ..ParquetConfig::default()
    };
    let mut e = Encoder::new(opts(pq)).unwrap();
    assert_eq!(e.content_type(), "application/vnd.apache.parquet");
    assert_eq!(e.extension(), "parquet");
    assert_eq!(e.content_encoding(), None);
    let msgs: Vec<Message> = (0..35u64)
        .map(|o| {
            let headers = if o % 3 == 0 {
                Bytes::new()
            } else {
                encode_headers(&[("k", &format!("v{o}")), ("région", "é")])
            };
            let payload: Vec<u8> = if o == 7 {
                b"\xff\x00binary".to_vec()
            } else {
                format!("payload {o}").into_bytes()
            };
            msg(o, &payload, headers)
        })
        .collect();
    let bytes = encode(&mut e, &msgs);
    assert_eq!(&bytes[..4], b"PAR1");
    assert_eq!(&bytes[bytes.len() - 4..], b"PAR1");
    assert_eq!(e.output_len(), bytes.len() as u64);
    let (batches, groups) = read(bytes.clone());
    assert_eq!(groups, 4, "35 rows at 10 a row group");
    let mut row = 0;
    for b in &batches {
        let schema = b.schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(
            names,
            [
                "stream",
                "topic",
                "partition",
                "offset",
                "id",
                "timestamp",
                "origin_timestamp",
                "headers",
                "payload"
            ]
        );
        for i in 0..b.num_rows() {
            let m = &msgs[row];
            assert_eq!(b.column(0).as_string::<i32>().value(i), "events");
            assert_eq!(b.column(1).as_string::<i32>().value(i), "orders");
            assert_eq!(b.column(2).as_primitive::<UInt32Type>().value(i), 3);
            assert_eq!(b.column(3).as_primitive::<UInt64Type>().value(i), m.offset);
            assert_eq!(b.column(4).as_string::<i32>().value(i), m.id.to_string());
            assert_eq!(
                b.column(5)
                    .as_primitive::<TimestampMicrosecondType>()
                    .value(i),
                m.timestamp as i64
            );
            assert_eq!(
                b.column(6)
                    .as_primitive::<TimestampMicrosecondType>()
                    .value(i),
                m.origin_timestamp as i64
            );
            let map = b.column(7).as_map();
            let entries = map.value(i);
            let keys = entries.column(0).as_string::<i32>();
            let values = entries.column(1).as_string::<i32>();
            let got: Vec<(String, String)> = (0..entries.len())
                .map(|j| (keys.value(j).to_owned(), values.value(j).to_owned()))
                .collect();
            let want: Vec<(String, String)> = crate::message::headers(&m.headers)
                .map(|h| {
                    let h = h.unwrap();
                    (h.key_str().into_owned(), h.value_string())
                })
                .collect();
            assert_eq!(got, want, "headers of row {row}");
            assert_eq!(b.column(8).as_binary::<i32>().value(i), &m.payload[..]);
            row += 1;
        }
    }
    assert_eq!(row, 35);
    // The same messages make the same object (a replay writes it again, byte for byte).
    assert_eq!(encode(&mut e, &msgs), bytes);
}

#[test]
fn typed_columns_take_json_values_and_refuse_what_does_not_fit() {
    let pq = ParquetConfig {
        payload: ParquetPayload::None,
        compression: ParquetCompression::Snappy,
        columns: vec![
            col("region", "/geo/region", ColumnType::String, true),
            col("n", "/n", ColumnType::Int64, false),
            col("temp", "/temp", ColumnType::Float64, false),
            col("ok", "/ok", ColumnType::Boolean, false),
            col("at", "/at", ColumnType::Timestamp, false),
            col("tags", "/tags", ColumnType::Json, false),
        ],
        ..ParquetConfig::default()
    };
    let mut e = Encoder::new(FormatOptions {
        metadata: false,
        headers: false,
        ..opts(pq)
    })
    .unwrap();
    let good = [
        msg(
            0,
            br#"{"geo":{"region":"eu"},"n":-5,"temp":21.5,"ok":true,"at":1700000000123,"tags":["a",1]}"#,
            Bytes::new(),
        ),
        msg(
            1,
            br#"{"geo":{"region":"us west"},"n":7,"temp":3,"at":"2026-03-29T01:30:00+01:00"}"#,
            Bytes::new(),
        ),
        msg(2, br#"{"geo":{"region":"ap"},"n":null}"#, Bytes::new()),
    ];
    let refused = [
        (br#"not json"#.to_vec(), "is not JSON"),
        (
            br#"{"n":1}"#.to_vec(),
            "columns[0] (\"region\"): no value at \"/geo/region\"",
        ),
        (
            br#"{"geo":{"region":5}}"#.to_vec(),
            "columns[0] (\"region\"): the value at \"/geo/region\" is a number, not a string",
        ),
        (
            br#"{"geo":{"region":"eu"},"n":1.5}"#.to_vec(),
            "columns[1] (\"n\"): the value at \"/n\" (1.5) is not an integer within int64",
        ),
        (
            br#"{"geo":{"region":"eu"},"ok":"yes"}"#.to_vec(),
            "columns[3] (\"ok\"): the value at \"/ok\" is a string, not a boolean",
        ),
        (
            br#"{"geo":{"region":"eu"},"at":"yesterday"}"#.to_vec(),
            "columns[4] (\"at\"): the value at \"/at\" is not an RFC 3339 time",
        ),
    ];
    for (payload, reason) in &refused {
        let err = e.admit(&msg(9, payload, Bytes::new())).unwrap_err();
        assert!(err.contains(reason), "{err:?} should say {reason:?}");
    }
    let (batches, _) = read(encode(&mut e, &good));
    let b = &batches[0];
    assert_eq!(b.num_rows(), 3);
    let schema = b.schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, ["region", "n", "temp", "ok", "at", "tags"]);
    assert!(!schema.field(0).is_nullable(), "a required column");
    assert!(schema.field(1).is_nullable());
    let region = b.column(0).as_string::<i32>();
    assert_eq!(
        (0..3).map(|i| region.value(i)).collect::<Vec<_>>(),
        ["eu", "us west", "ap"]
    );
    let n = b.column(1).as_primitive::<Int64Type>();
    assert_eq!((n.value(0), n.value(1), n.is_null(2)), (-5, 7, true));
    let temp = b.column(2).as_primitive::<Float64Type>();
    assert_eq!(
        (temp.value(0), temp.value(1), temp.is_null(2)),
        (21.5, 3.0, true)
    );
    let ok = b.column(3).as_boolean();
    assert!(ok.value(0) && ok.is_null(1) && ok.is_null(2));
    let at = b.column(4).as_primitive::<TimestampMicrosecondType>();
    assert_eq!(at.value(0), 1_700_000_000_123_000);
    // 01:30 at +01:00 is 00:30 UTC.
    assert_eq!(at.value(1), 1_774_744_200_000_000);
    let tags = b.column(5).as_string::<i32>();
    assert_eq!(tags.value(0), r#"["a",1]"#);
    assert!(tags.is_null(1));
}

#[test]
fn a_string_payload_column_refuses_bytes_that_are_not_utf8() {
    let mut e = Encoder::new(opts(ParquetConfig {
        payload: ParquetPayload::String,
        ..ParquetConfig::default()
    }))
    .unwrap();
    let err = e.admit(&msg(0, b"\xff\xfe", Bytes::new())).unwrap_err();
    assert!(err.contains("not UTF-8"), "{err}");
    let (batches, _) = read(encode(&mut e, &[msg(0, "é ✓".as_bytes(), Bytes::new())]));
    assert_eq!(batches[0].column(8).as_string::<i32>().value(0), "é ✓");
}

#[test]
fn rows_held_stay_within_a_row_group_and_the_size_counts_them() {
    let row_group = 256 << 10;
    let mut e = Encoder::new(opts(ParquetConfig {
        row_group_size: crate::units::ByteSize(row_group),
        ..ParquetConfig::default()
    }))
    .unwrap();
    let p = part();
    e.begin();
    let mut taken = 0u64;
    let mut most = 0;
    let payload: Vec<u8> = (0..1000u32)
        .flat_map(|i| (i * 7919).to_le_bytes())
        .collect();
    for o in 0..2000u64 {
        let m = msg(o, &payload, Bytes::new());
        e.push(&p, &m);
        most = most.max(e.held());
        assert!(e.size() >= e.output_len());
        taken += e.take().len() as u64;
    }
    let one_row = payload.len() as u64 + 200;
    assert!(
        most <= row_group + one_row,
        "held {most} bytes, row groups are {row_group}"
    );
    taken += e.finish().len() as u64;
    let (_, groups) = {
        // Read the whole object again to count its row groups.
        let mut e2 = Encoder::new(opts(ParquetConfig {
            row_group_size: crate::units::ByteSize(row_group),
            ..ParquetConfig::default()
        }))
        .unwrap();
        let msgs: Vec<Message> = (0..2000).map(|o| msg(o, &payload, Bytes::new())).collect();
        let bytes = encode(&mut e2, &msgs);
        assert_eq!(bytes.len() as u64, taken);
        read(bytes)
    };
    let raw = 2000 * (payload.len() as u64 + 64 + 6 + 6 + 40);
    assert_eq!(
        groups as u64,
        raw.div_ceil(row_group),
        "row groups of {row_group} bytes"
    );
}

#[test]
fn an_object_with_no_rows_is_a_valid_empty_file() {
    let mut e = Encoder::new(opts(ParquetConfig::default())).unwrap();
    let (batches, groups) = read(encode(&mut e, &[]));
    assert_eq!(groups, 0);
    assert!(batches.iter().all(|b| b.num_rows() == 0));
}

#[test]
fn object_compression_is_refused_with_parquet() {
    let err = Encoder::new(FormatOptions {
        compression: super::super::Compression::Zstd,
        ..opts(ParquetConfig::default())
    })
    .unwrap_err();
    assert!(err.contains("s3.parquet.compression"), "{err}");
}

use proptest::prelude::Strategy as _;

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, ..Default::default() })]

    /// Whatever a producer sends (any payload bytes, any header bytes, JSON or not), a message
    /// is either refused with a reason or becomes a row, and the object always reads back
    /// whole, with one row per message admitted and the payloads as they were.
    #[test]
    fn any_payload_and_headers_make_a_row_or_a_reason(
        msgs in proptest::collection::vec(
            (
                proptest::prop_oneof![
                    proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
                    proptest::string::string_regex(r#"\{"a":(-?[0-9]{1,20}(\.[0-9]{1,3})?|"[a-z]{0,5}"|true|null|\[1\]),"t":("2026-0[1-9]-1[0-9]T0[0-9]:00:00Z"|[0-9]{1,15}|"x")\}"#).unwrap()
                        .prop_map(String::into_bytes)
                ],
                proptest::collection::vec(proptest::prelude::any::<u8>(), 0..24),
            ),
            0..40,
        )
    ) {
        let mut e = Encoder::new(opts(ParquetConfig {
            row_group_rows: 7,
            columns: vec![
                col("a_int", "/a", ColumnType::Int64, false),
                col("a_num", "/a", ColumnType::Float64, false),
                col("a_text", "/a", ColumnType::String, false),
                col("a_json", "/a", ColumnType::Json, true),
                col("t", "/t", ColumnType::Timestamp, false),
            ],
            ..ParquetConfig::default()
        }))
        .unwrap();
        let p = part();
        e.begin();
        let mut out = Vec::new();
        let mut admitted = Vec::new();
        for (o, (payload, headers)) in msgs.iter().enumerate() {
            let m = msg(o as u64, payload, Bytes::copy_from_slice(headers));
            match e.admit(&m) {
                Ok(()) => {
                    e.push(&p, &m);
                    admitted.push(m.payload.clone());
                }
                Err(reason) => proptest::prop_assert!(!reason.is_empty()),
            }
            out.extend_from_slice(&e.take());
        }
        out.extend_from_slice(&e.finish());
        proptest::prop_assert_eq!(e.error(), None);
        let (batches, _) = read(out);
        let payloads: Vec<Bytes> = batches
            .iter()
            .flat_map(|b| {
                let col = b.column_by_name("payload").unwrap().as_binary::<i32>().clone();
                (0..b.num_rows()).map(move |i| Bytes::copy_from_slice(col.value(i)))
            })
            .collect();
        proptest::prop_assert_eq!(payloads, admitted);
    }
}
