//! Everything written is read back with independent means: flate2's and zstd's decoders,
//! serde_json, and a strict RFC 4180 reader written here.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read as _;
use std::rc::Rc;

use base64::Engine as _;
use bytes::Bytes;
use serde_json::{Value, json};

use super::*;
use crate::config::PayloadEncoding;
use crate::ids::{PartitionId, Slot};
use crate::message::encode_headers;

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
        // Beyond u64, to check the decimal rendering of the whole u128.
        id: u128::MAX - u128::from(offset),
        timestamp: 1_700_000_000_000_000 + offset,
        origin_timestamp: 1_600_000_000_000_000 + offset,
        payload: Bytes::copy_from_slice(payload),
        headers,
    }
}

/// Payloads that trip up formats: JSON (compact, pretty, scalars), text with separators,
/// quotes and line breaks, empty, binary.
fn nasty_payloads() -> Vec<Vec<u8>> {
    [
        &br#"{"a":1,"b":[true,null],"c":"x,y"}"#[..],
        b"plain text",
        b"",
        b"with, comma",
        b"quote \" inside",
        b"\"",
        b"\"\"",
        b"line\nbreak",
        b"crlf\r\nend",
        b"trailing\r",
        b"\xff\xfe\x00binary",
        b"\x00",
        "unicode é ✓ 🦀".as_bytes(),
        b"{\n  \"pretty\": \"json\"\n}\n",
        b"  spaced  ",
        b"123",
        b"null",
        b"aGk=",
        b"tab\there",
    ]
    .iter()
    .map(|p| p.to_vec())
    .collect()
}

/// Messages over the nasty payloads, every other one with headers.
fn nasty_messages() -> Vec<Message> {
    nasty_payloads()
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let headers = if i % 2 == 0 {
                encode_headers(&[("k", "v"), ("quo\"te", "va,l\r\nue")])
            } else {
                Bytes::new()
            };
            msg(100 + i as u64, p, headers)
        })
        .collect()
}

fn opts(format: Format, compression: Compression) -> FormatOptions {
    FormatOptions {
        format,
        compression,
        ..FormatOptions::default()
    }
}

/// Encodes one object, taking after every record; checks output_len against what came out.
fn object(enc: &mut Encoder, msgs: &[Message]) -> Vec<u8> {
    let p = part();
    enc.begin();
    let mut out = Vec::new();
    for m in msgs {
        enc.push(&p, m);
        out.extend_from_slice(&enc.take());
        assert_eq!(enc.output_len(), out.len() as u64);
    }
    out.extend_from_slice(&enc.finish());
    assert_eq!(
        enc.output_len(),
        out.len() as u64,
        "output_len after finish"
    );
    assert!(enc.error().is_none());
    out
}

fn encode(o: FormatOptions, msgs: &[Message]) -> Vec<u8> {
    let mut enc = Encoder::new(o).unwrap();
    let out = object(&mut enc, msgs);
    if enc.content_encoding().is_none() {
        assert_eq!(enc.input_len(), out.len() as u64);
    }
    out
}

/// Decompresses one object, checking that it is whole gzip members, one per started block
/// of input ([`compress::GZIP_BLOCK`]), or exactly one zstd frame.
fn decompress(c: Compression, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match c {
        Compression::None => out.extend_from_slice(data),
        Compression::Gzip => {
            let mut rest = data;
            let mut members = 0;
            loop {
                assert_eq!(&rest[..3], &[0x1f, 0x8b, 8], "gzip magic and deflate");
                let mut d = flate2::bufread::GzDecoder::new(rest);
                let before = out.len();
                d.read_to_end(&mut out).unwrap();
                members += 1;
                rest = d.into_inner();
                if rest.is_empty() {
                    break;
                }
                assert_eq!(
                    out.len() - before,
                    compress::GZIP_BLOCK,
                    "a member before the last"
                );
            }
            assert_eq!(members, out.len().div_ceil(compress::GZIP_BLOCK).max(1));
        }
        Compression::Zstd => {
            assert_eq!(&data[..4], &[0x28, 0xb5, 0x2f, 0xfd], "zstd magic");
            assert_ne!(data[4] & 0x04, 0, "zstd content checksum flag");
            assert_eq!(
                zstd::zstd_safe::find_frame_compressed_size(data).unwrap(),
                data.len(),
                "exactly one zstd frame"
            );
            out = zstd::stream::decode_all(data).unwrap();
        }
    }
    out
}

/// What `Auto` makes of a payload in JSON: (key, value).
fn expected_json_payload(p: &[u8], enc: PayloadEncoding) -> (&'static str, Value) {
    let b64 = || Value::String(base64::engine::general_purpose::STANDARD.encode(p));
    match enc {
        PayloadEncoding::Base64 => ("payload_base64", b64()),
        PayloadEncoding::Text => (
            "payload",
            Value::String(String::from_utf8_lossy(p).into_owned()),
        ),
        PayloadEncoding::Auto => {
            if let Ok(v) = serde_json::from_slice::<Value>(p) {
                ("payload", v)
            } else if let Ok(s) = std::str::from_utf8(p) {
                ("payload", Value::String(s.to_owned()))
            } else {
                ("payload_base64", b64())
            }
        }
    }
}

fn expected_headers(m: &Message) -> serde_json::Map<String, Value> {
    crate::message::headers(&m.headers)
        .map(|h| {
            let h = h.unwrap();
            (h.key_str().into_owned(), Value::String(h.value_string()))
        })
        .collect()
}

/// Checks one decoded JSON record field by field, and that it has no other field.
fn check_json_record(v: &Value, m: &Message, o: &FormatOptions) {
    let obj = v.as_object().unwrap();
    let mut keys = 0;
    if o.metadata {
        assert_eq!(obj["stream"], "events");
        assert_eq!(obj["topic"], "orders");
        assert_eq!(obj["partition"], 3);
        assert_eq!(obj["offset"], m.offset);
        assert_eq!(obj["id"], m.id.to_string());
        assert_eq!(obj["timestamp"], m.timestamp);
        assert_eq!(obj["origin_timestamp"], m.origin_timestamp);
        keys += 7;
    }
    if o.headers && !m.headers.is_empty() {
        assert_eq!(obj["headers"], Value::Object(expected_headers(m)));
        keys += 1;
    }
    let (key, value) = expected_json_payload(&m.payload, o.payload);
    assert_eq!(obj[key], value, "payload of offset {}", m.offset);
    keys += 1;
    assert_eq!(obj.len(), keys, "fields of {v}");
}

fn json_lines(data: &[u8]) -> Vec<Value> {
    assert!(data.is_empty() || data.ends_with(b"\n"));
    data.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}

/// A strict RFC 4180 reader: CRLF after every record, quotes only around whole fields.
fn parse_csv(data: &[u8]) -> Vec<Vec<Vec<u8>>> {
    #[derive(PartialEq)]
    enum St {
        FieldStart,
        Plain,
        Quoted,
        QuoteInQuoted,
    }
    let mut records = Vec::new();
    let mut record = Vec::new();
    let mut field = Vec::new();
    let mut st = St::FieldStart;
    let mut i = 0;
    while i < data.len() {
        let b = data[i];
        match st {
            St::Quoted => {
                if b == b'"' {
                    st = St::QuoteInQuoted;
                } else {
                    field.push(b);
                }
            }
            St::QuoteInQuoted if b == b'"' => {
                field.push(b'"');
                st = St::Quoted;
            }
            St::FieldStart if b == b'"' => st = St::Quoted,
            _ => match b {
                b',' => {
                    record.push(std::mem::take(&mut field));
                    st = St::FieldStart;
                }
                b'\r' => {
                    assert_eq!(data.get(i + 1), Some(&b'\n'), "bare CR at {i}");
                    record.push(std::mem::take(&mut field));
                    records.push(std::mem::take(&mut record));
                    st = St::FieldStart;
                    i += 1;
                }
                b'"' | b'\n' => panic!("unquoted {:?} at {i}", b as char),
                _ => {
                    assert!(st != St::QuoteInQuoted, "text after a closing quote at {i}");
                    field.push(b);
                    st = St::Plain;
                }
            },
        }
        i += 1;
    }
    assert!(
        st == St::FieldStart && field.is_empty() && record.is_empty(),
        "the last record does not end in CRLF"
    );
    records
}

#[test]
fn json_lines_matches_the_file_sink_layout() {
    let m = Message {
        offset: 41,
        id: 7,
        timestamp: 1_700_000_000_000_000,
        origin_timestamp: 1_700_000_000_000_001,
        payload: Bytes::from_static(br#"{"any":"json"}"#),
        headers: encode_headers(&[("k", "v")]),
    };
    let out = encode(FormatOptions::default(), &[m]);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        concat!(
            r#"{"stream":"events","topic":"orders","partition":3,"offset":41,"id":"7","#,
            r#""timestamp":1700000000000000,"origin_timestamp":1700000000000001,"#,
            r#""headers":{"k":"v"},"payload":{"any":"json"}}"#,
            "\n"
        )
    );
}

#[test]
fn json_lines_has_every_record_in_order_with_exact_fields() {
    let msgs = nasty_messages();
    for (metadata, headers) in [(true, true), (true, false), (false, true), (false, false)] {
        for payload in [
            PayloadEncoding::Auto,
            PayloadEncoding::Base64,
            PayloadEncoding::Text,
        ] {
            let o = FormatOptions {
                metadata,
                headers,
                payload,
                ..FormatOptions::default()
            };
            let out = encode(o.clone(), &msgs);
            // One line per record: JSON payloads' line breaks do not split records.
            assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), msgs.len());
            let values = json_lines(&out);
            assert_eq!(values.len(), msgs.len());
            for (v, m) in values.iter().zip(&msgs) {
                check_json_record(v, m, &o);
            }
        }
    }
}

#[test]
fn without_metadata_only_headers_and_payload_are_written() {
    let o = FormatOptions {
        metadata: false,
        ..FormatOptions::default()
    };
    let out = encode(
        o,
        &[
            msg(1, b"x", encode_headers(&[("a", "b")])),
            msg(2, b"{\"y\":2}", Bytes::new()),
        ],
    );
    assert_eq!(
        out,
        b"{\"headers\":{\"a\":\"b\"},\"payload\":\"x\"}\n{\"payload\":{\"y\":2}}\n"
    );
}

#[test]
fn header_values_of_every_kind_are_strings() {
    fn tlv(out: &mut Vec<u8>, kind: u8, data: &[u8]) {
        out.push(kind);
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        out.extend_from_slice(data);
    }
    let mut raw = Vec::new();
    tlv(&mut raw, 2, b"int");
    tlv(&mut raw, 6, &(-5i32).to_le_bytes());
    tlv(&mut raw, 2, b"uint");
    tlv(&mut raw, 12, &7u64.to_le_bytes());
    tlv(&mut raw, 2, b"bool");
    tlv(&mut raw, 3, &[1]);
    tlv(&mut raw, 2, b"raw");
    tlv(&mut raw, 1, b"\xffbytes");
    tlv(&mut raw, 2, b"text");
    tlv(&mut raw, 2, b"a\"b");
    let m = msg(1, b"p", Bytes::from(raw));
    let v = &json_lines(&encode(FormatOptions::default(), std::slice::from_ref(&m)))[0];
    assert_eq!(
        v["headers"],
        json!({"int": "-5", "uint": "7", "bool": "true", "raw": "\u{fffd}bytes", "text": "a\"b"})
    );
    assert_eq!(v["headers"], Value::Object(expected_headers(&m)));
}

#[test]
fn json_array_is_valid_with_zero_one_and_many_records() {
    let msgs = nasty_messages();
    for n in [0, 1, 2, msgs.len()] {
        let o = opts(Format::JsonArray, Compression::None);
        let out = encode(o.clone(), &msgs[..n]);
        let v: Value = serde_json::from_slice(&out).unwrap();
        let items = v.as_array().unwrap();
        assert_eq!(items.len(), n);
        for (v, m) in items.iter().zip(&msgs) {
            check_json_record(v, m, &o);
        }
    }
    assert_eq!(
        encode(opts(Format::JsonArray, Compression::None), &[]),
        b"[]"
    );
    let two = encode(
        FormatOptions {
            format: Format::JsonArray,
            metadata: false,
            ..FormatOptions::default()
        },
        &[msg(1, b"a", Bytes::new()), msg(2, b"2", Bytes::new())],
    );
    assert_eq!(two, br#"[{"payload":"a"},{"payload":2}]"#);
}

#[test]
fn raw_separator_framing() {
    let msgs = nasty_messages();
    let sep = b"\r\n--8<--\r\n".to_vec();
    let o = FormatOptions {
        format: Format::Raw,
        framing: Framing::Separator(sep.clone()),
        ..FormatOptions::default()
    };
    let out = encode(o, &msgs);
    let mut expected = Vec::new();
    for m in &msgs {
        expected.extend_from_slice(&m.payload);
        expected.extend_from_slice(&sep);
    }
    assert_eq!(
        out, expected,
        "payloads as they are, no metadata, no headers"
    );

    // The default separator is a newline after each payload.
    let out = encode(
        opts(Format::Raw, Compression::None),
        &[msg(1, b"a", Bytes::new()), msg(2, b"bc", Bytes::new())],
    );
    assert_eq!(out, b"a\nbc\n");
    // An empty separator puts the payloads back to back.
    let o = FormatOptions {
        format: Format::Raw,
        framing: Framing::Separator(Vec::new()),
        ..FormatOptions::default()
    };
    let out = encode(
        o,
        &[msg(1, b"a", Bytes::new()), msg(2, b"bc", Bytes::new())],
    );
    assert_eq!(out, b"abc");
}

#[test]
fn raw_length_prefix_framing() {
    let msgs = nasty_messages();
    let o = FormatOptions {
        format: Format::Raw,
        framing: Framing::LengthPrefix,
        ..FormatOptions::default()
    };
    let out = encode(o, &msgs);
    let mut rest = &out[..];
    let mut got = Vec::new();
    while !rest.is_empty() {
        let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        got.push(rest[4..4 + len].to_vec());
        rest = &rest[4 + len..];
    }
    assert_eq!(got, nasty_payloads());
    assert_eq!(&out[..4], &(nasty_payloads()[0].len() as u32).to_be_bytes());
}

#[test]
fn csv_header_line_and_exact_fields() {
    let msgs = nasty_messages();
    for (metadata, headers) in [(true, true), (true, false), (false, true), (false, false)] {
        let o = FormatOptions {
            format: Format::Csv,
            metadata,
            headers,
            ..FormatOptions::default()
        };
        let out = encode(o, &msgs);
        let rows = parse_csv(&out);
        let mut columns: Vec<&str> = Vec::new();
        if metadata {
            columns.extend([
                "stream",
                "topic",
                "partition",
                "offset",
                "id",
                "timestamp",
                "origin_timestamp",
            ]);
        }
        if headers {
            columns.push("headers");
        }
        columns.push("payload");
        let header: Vec<Vec<u8>> = columns.iter().map(|c| c.as_bytes().to_vec()).collect();
        assert_eq!(rows[0], header);
        assert_eq!(rows.len(), msgs.len() + 1);
        for (row, m) in rows[1..].iter().zip(&msgs) {
            assert_eq!(row.len(), columns.len());
            let mut f = row.iter();
            if metadata {
                let text = |v: &Vec<u8>| String::from_utf8(v.clone()).unwrap();
                assert_eq!(text(f.next().unwrap()), "events");
                assert_eq!(text(f.next().unwrap()), "orders");
                assert_eq!(text(f.next().unwrap()), "3");
                assert_eq!(text(f.next().unwrap()), m.offset.to_string());
                assert_eq!(text(f.next().unwrap()), m.id.to_string());
                assert_eq!(text(f.next().unwrap()), m.timestamp.to_string());
                assert_eq!(text(f.next().unwrap()), m.origin_timestamp.to_string());
            }
            if headers {
                let v: Value = serde_json::from_slice(f.next().unwrap()).unwrap();
                assert_eq!(v, Value::Object(expected_headers(m)));
            }
            let payload = f.next().unwrap();
            match std::str::from_utf8(&m.payload) {
                Ok(_) => assert_eq!(payload, &m.payload.to_vec()),
                Err(_) => assert_eq!(
                    base64::engine::general_purpose::STANDARD
                        .decode(payload)
                        .unwrap(),
                    m.payload.to_vec()
                ),
            }
        }
    }
}

#[test]
fn csv_quotes_exactly_what_needs_quoting() {
    let o = FormatOptions {
        format: Format::Csv,
        metadata: false,
        headers: false,
        ..FormatOptions::default()
    };
    let msgs: Vec<Message> = [
        &b"plain"[..],
        b"a,b",
        b"say \"hi\"",
        b"two\nlines",
        b"cr\rhere",
        b"",
        b"\"",
    ]
    .iter()
    .enumerate()
    .map(|(i, p)| msg(i as u64, p, Bytes::new()))
    .collect();
    let out = encode(o, &msgs);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "payload\r\nplain\r\n\"a,b\"\r\n\"say \"\"hi\"\"\"\r\n\"two\nlines\"\r\n\"cr\rhere\"\r\n\"\"\r\n\"\"\"\"\r\n"
    );
    // Stream and topic names are quoted too.
    let p = PartitionInfo {
        slot: Slot(0),
        stream: Rc::from("a,\"b\""),
        topic: Rc::from("t\r\n"),
        partition: PartitionId(0),
    };
    let mut enc = Encoder::new(opts(Format::Csv, Compression::None)).unwrap();
    enc.begin();
    enc.push(&p, &msg(0, b"x", Bytes::new()));
    let out = enc.finish();
    let rows = parse_csv(&out);
    assert_eq!(rows[1][0], b"a,\"b\"");
    assert_eq!(rows[1][1], b"t\r\n");
    assert_eq!(rows[1][7], b"{}", "no headers: an empty object");
}

#[test]
fn csv_payload_encodings() {
    let msgs = vec![
        msg(1, b"\xff\x00\xfe", Bytes::new()),
        msg(2, b"text, too", Bytes::new()),
        msg(3, b"{\"j\": [1,\n2]}", Bytes::new()),
    ];
    let payloads = |payload| {
        let o = FormatOptions {
            format: Format::Csv,
            metadata: false,
            headers: false,
            payload,
            ..FormatOptions::default()
        };
        parse_csv(&encode(o, &msgs))[1..]
            .iter()
            .map(|r| String::from_utf8(r[0].clone()).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        payloads(PayloadEncoding::Auto),
        ["/wD+", "text, too", "{\"j\": [1,\n2]}"]
    );
    assert_eq!(
        payloads(PayloadEncoding::Base64),
        ["/wD+", "dGV4dCwgdG9v", "eyJqIjogWzEsCjJdfQ=="]
    );
    assert_eq!(
        payloads(PayloadEncoding::Text),
        ["\u{fffd}\0\u{fffd}", "text, too", "{\"j\": [1,\n2]}"]
    );
}

#[test]
fn json_payload_encodings() {
    let msgs = vec![
        msg(1, b"\xff\x00\xfe", Bytes::new()),
        msg(2, b"{\"j\":1}", Bytes::new()),
    ];
    for format in [Format::JsonLines, Format::JsonArray] {
        let payloads = |payload| {
            let o = FormatOptions {
                format,
                metadata: false,
                payload,
                ..FormatOptions::default()
            };
            let out = encode(o, &msgs);
            let values = match format {
                Format::JsonArray => serde_json::from_slice::<Vec<Value>>(&out).unwrap(),
                _ => json_lines(&out),
            };
            Value::Array(values)
        };
        assert_eq!(
            payloads(PayloadEncoding::Auto),
            json!([{"payload_base64": "/wD+"}, {"payload": {"j": 1}}])
        );
        assert_eq!(
            payloads(PayloadEncoding::Base64),
            json!([{"payload_base64": "/wD+"}, {"payload_base64": "eyJqIjoxfQ=="}])
        );
        assert_eq!(
            payloads(PayloadEncoding::Text),
            json!([{"payload": "\u{fffd}\0\u{fffd}"}, {"payload": "{\"j\":1}"}])
        );
    }
}

/// Each compressed object decodes to exactly what the uncompressed encoder writes, across
/// several objects (0, 1, many records) from one reused encoder, for every format.
#[test]
fn compression_round_trips_across_objects_reusing_one_encoder() {
    let msgs = nasty_messages();
    let objects: [&[Message]; 5] = [&msgs, &[], &msgs[..1], &msgs[3..], &msgs];
    for format in [
        Format::JsonLines,
        Format::JsonArray,
        Format::Raw,
        Format::Csv,
    ] {
        for compression in [Compression::Gzip, Compression::Zstd] {
            let mut plain = Encoder::new(opts(format, Compression::None)).unwrap();
            let mut enc = Encoder::new(opts(format, compression)).unwrap();
            for records in objects {
                let expected = object(&mut plain, records);
                let out = object(&mut enc, records);
                assert_eq!(enc.input_len(), expected.len() as u64);
                assert_eq!(
                    decompress(compression, &out),
                    expected,
                    "{format:?} {compression:?}, {} records",
                    records.len()
                );
            }
        }
    }
}

#[test]
fn compressed_objects_are_smaller_and_output_len_is_exact() {
    // Repetitive records: the codecs must actually compress.
    let msgs: Vec<Message> = (0..2000)
        .map(|i| {
            msg(
                i,
                format!("{{\"n\":{i},\"pad\":\"abcabcabc\"}}").as_bytes(),
                Bytes::new(),
            )
        })
        .collect();
    for compression in [Compression::Gzip, Compression::Zstd] {
        let mut enc = Encoder::new(opts(Format::JsonLines, compression)).unwrap();
        let mut plain = Encoder::new(opts(Format::JsonLines, Compression::None)).unwrap();
        let expected = object(&mut plain, &msgs);
        // Taking only at the end: the whole object comes out of finish().
        let p = part();
        enc.begin();
        for m in &msgs {
            enc.push(&p, m);
        }
        assert_eq!(enc.input_len(), expected.len() as u64);
        let before = enc.output_len();
        let out = enc.finish();
        assert_eq!(enc.output_len(), out.len() as u64);
        assert!(before <= out.len() as u64);
        assert!(
            out.len() * 5 < expected.len(),
            "{compression:?}: {} of {}",
            out.len(),
            expected.len()
        );
        assert_eq!(decompress(compression, &out), expected);
    }
}

/// Incompressible data, the worst case: how far output_len lags input_len is bounded by what
/// the module docs state, and take() hands out everything the codec emitted.
#[test]
fn output_len_lag_is_bounded() {
    let mut rng = fastrand::Rng::with_seed(7);
    let msgs: Vec<Message> = (0..600)
        .map(|i| {
            let mut p = vec![0u8; 1000 + rng.usize(..4000)];
            rng.fill(&mut p);
            msg(i, &p, Bytes::new())
        })
        .collect();
    for (compression, bound) in [
        (Compression::Gzip, compress::GZIP_BLOCK + 4096),
        (Compression::Zstd, 128 * 1024 + 4096),
    ] {
        let o = FormatOptions {
            format: Format::Raw,
            compression,
            framing: Framing::LengthPrefix,
            ..FormatOptions::default()
        };
        let mut enc = Encoder::new(o).unwrap();
        let p = part();
        enc.begin();
        let mut out = Vec::new();
        let mut max_lag = 0;
        for m in &msgs {
            enc.push(&p, m);
            let chunk = enc.take();
            assert!(chunk.len() <= bound + 5000, "one take() of {}", chunk.len());
            out.extend_from_slice(&chunk);
            assert_eq!(enc.output_len(), out.len() as u64);
            max_lag = max_lag.max(enc.input_len().saturating_sub(enc.output_len()));
            // Rotation's size counts gzip's pending input: never less than the output.
            assert!(enc.size() >= enc.output_len());
        }
        let input = enc.input_len();
        out.extend_from_slice(&enc.finish());
        eprintln!("{compression:?}: output_len lagged input_len by at most {max_lag} bytes");
        assert!(
            max_lag <= bound as u64,
            "{compression:?}: output_len lagged by {max_lag}"
        );
        assert!(input > 1_000_000);
        assert_eq!(decompress(compression, &out).len() as u64, input);
    }
}

/// Compressible records cut into objects at many points: what finish() still has to write
/// (the lag of output_len plus the trailer) stays within the bound in output bytes, although
/// far more input than that may be pending.
#[test]
fn output_len_lag_is_bounded_in_output_bytes() {
    let mut rng = fastrand::Rng::with_seed(11);
    let words = [
        "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta",
    ];
    let msgs: Vec<Message> = (0..20_000)
        .map(|i| {
            let text: Vec<&str> = (0..rng.usize(5..60))
                .map(|_| words[rng.usize(..words.len())])
                .collect();
            let payload = format!("{{\"n\":{},\"text\":\"{}\"}}", rng.u32(..), text.join(" "));
            msg(i, payload.as_bytes(), Bytes::new())
        })
        .collect();
    let p = part();
    // gzip: one block of input compressed (this text to about a fifth of it).
    for (compression, bound) in [
        (Compression::Gzip, compress::GZIP_BLOCK / 4),
        (Compression::Zstd, 128 * 1024 + 4096),
    ] {
        let mut enc = Encoder::new(opts(Format::JsonLines, compression)).unwrap();
        let mut plain = Encoder::new(opts(Format::JsonLines, Compression::None)).unwrap();
        let (mut max_tail, mut max_pending_input) = (0, 0);
        let mut rest = &msgs[..];
        while !rest.is_empty() {
            let n = rng.usize(1..=rest.len().min(8000));
            let (records, tail) = rest.split_at(n);
            rest = tail;
            enc.begin();
            let mut out = Vec::new();
            for m in records {
                enc.push(&p, m);
                out.extend_from_slice(&enc.take());
            }
            let input = enc.input_len();
            let last = enc.finish();
            max_tail = max_tail.max(last.len());
            out.extend_from_slice(&last);
            let ratio = input as f64 / out.len() as f64;
            max_pending_input = max_pending_input.max((last.len() as f64 * ratio) as u64);
            assert_eq!(decompress(compression, &out), object(&mut plain, records));
        }
        eprintln!(
            "{compression:?}: finish() wrote at most {max_tail} bytes (about {max_pending_input} \
             bytes of input)"
        );
        assert!(
            max_tail <= bound,
            "{compression:?}: finish() wrote {max_tail} bytes"
        );
    }
}

/// With the caller dropping what take() returned, the output buffer is reclaimed rather
/// than reallocated: chunks keep starting at the first chunk's address. (gzip emits a member
/// per 1 MiB of input: its objects are 1.5 MiB of text here, whose members fit one buffer.)
#[test]
fn output_buffer_is_reused_once_taken_bytes_are_dropped() {
    let mut rng = fastrand::Rng::with_seed(3);
    let random: Vec<Message> = (0..2000)
        .map(|i| {
            let mut p = vec![0u8; 500];
            rng.fill(&mut p);
            msg(i, &p, Bytes::new())
        })
        .collect();
    let words = ["north", "valve", "pump", "ok", "drift", "cycle"];
    let text: Vec<Message> = (0..24_000)
        .map(|i| {
            let p: Vec<&str> = (0..80).map(|_| words[rng.usize(..words.len())]).collect();
            msg(i, p.join(" ").as_bytes(), Bytes::new())
        })
        .collect();
    for compression in [Compression::None, Compression::Gzip, Compression::Zstd] {
        let o = FormatOptions {
            format: Format::Raw,
            compression,
            ..FormatOptions::default()
        };
        let mut enc = Encoder::new(o).unwrap();
        let p = part();
        let mut first = None;
        let mut reused = 0;
        let (msgs, per_object) = match compression {
            Compression::Gzip => (&text, 3000),
            _ => (&random, 500),
        };
        for object in msgs.chunks(per_object) {
            enc.begin();
            for m in object {
                enc.push(&p, m);
                let chunk = enc.take();
                if chunk.is_empty() {
                    continue;
                }
                match first {
                    None => first = Some(chunk.as_ptr()),
                    Some(f) if f == chunk.as_ptr() => reused += 1,
                    Some(_) => {}
                }
            }
            enc.finish();
        }
        assert!(reused >= 3, "{compression:?}: reused {reused} times");
    }
}

/// Pushes 32 MiB of raw records, holding the last `hold` bytes of chunks alive (as parts in
/// flight hold them) and dropping older ones; the buffers allocated.
fn buffers_for(enc: &mut Encoder, hold: usize) -> u64 {
    let payload = vec![b'x'; 1000];
    let m = msg(0, &payload, Bytes::new());
    let p = part();
    let mut held: std::collections::VecDeque<Bytes> = std::collections::VecDeque::new();
    let mut held_bytes = 0usize;
    let mut total = 0usize;
    enc.begin();
    while total < 32 << 20 {
        enc.push(&p, &m);
        let chunk = enc.take();
        total += chunk.len();
        held_bytes += chunk.len();
        held.push_back(chunk);
        while held_bytes > hold {
            held_bytes -= held.pop_front().map_or(0, |c| c.len());
        }
    }
    enc.finish();
    enc.buffers_allocated()
}

/// Used-up output buffers are taken again once their chunks are dropped: a few buffers serve
/// any amount of output, as long as the encoder keeps enough of them waiting to cover what
/// is held.
#[test]
fn used_up_buffers_are_reused_once_their_chunks_are_dropped() {
    let raw = || {
        Encoder::new(FormatOptions {
            format: Format::Raw,
            ..FormatOptions::default()
        })
        .unwrap()
    };
    // 1 MiB held is 4-5 buffers of 256 KiB; without reuse 32 MiB would take 128.
    let n = buffers_for(&mut raw(), 1 << 20);
    assert!(n <= 8, "{n} buffers allocated for 32 MiB, 1 MiB held");
    // 16 MiB held (two 8 MiB parts): the default keeps too few waiting to reuse any...
    let n = buffers_for(&mut raw(), 16 << 20);
    assert!(n > 100, "{n} buffers allocated for 32 MiB, 16 MiB held");
    // ...and told what is held, it reuses them.
    let mut enc = raw();
    enc.keep_for_reuse(16 << 20);
    let n = buffers_for(&mut enc, 16 << 20);
    assert!(
        n <= 70,
        "{n} buffers allocated for 32 MiB, 16 MiB held, kept for reuse"
    );
    enc.release_spare();
    assert!(enc.sink.out.spare.is_empty());
}

#[test]
fn empty_objects_are_valid() {
    for format in [
        Format::JsonLines,
        Format::JsonArray,
        Format::Raw,
        Format::Csv,
    ] {
        for compression in [Compression::None, Compression::Gzip, Compression::Zstd] {
            let mut enc = Encoder::new(opts(format, compression)).unwrap();
            let out = object(&mut enc, &[]);
            let data = decompress(compression, &out);
            let expected: &[u8] = match format {
                Format::JsonArray => b"[]",
                Format::Csv => b"stream,topic,partition,offset,id,timestamp,origin_timestamp,headers,payload\r\n",
                Format::JsonLines | Format::Raw => b"",
                Format::Parquet => unreachable!("parquet has tests of its own"),
            };
            assert_eq!(data, expected, "{format:?} {compression:?}");
            assert_eq!(enc.input_len(), expected.len() as u64);
        }
    }
}

#[test]
fn begin_discards_an_unfinished_object_and_push_begins_one() {
    for compression in [Compression::None, Compression::Gzip, Compression::Zstd] {
        let mut enc = Encoder::new(opts(Format::JsonArray, compression)).unwrap();
        let p = part();
        // push() without begin() begins the object.
        enc.push(&p, &msg(1, b"1", Bytes::new()));
        assert_eq!(enc.records(), 1);
        // An abandoned object leaves nothing behind: a new object starts with `[` (gzip and
        // zstd hold it back until a block or the end).
        enc.begin();
        let expected = match compression {
            Compression::None => 1,
            Compression::Gzip | Compression::Zstd => 0,
        };
        assert_eq!(enc.output_len(), expected);
        assert_eq!(enc.input_len(), 1);
        assert_eq!(enc.records(), 0);
        enc.push(&p, &msg(2, b"2", Bytes::new()));
        let out = enc.finish();
        let v: Value = serde_json::from_slice(&decompress(compression, &out)).unwrap();
        assert_eq!(v[0]["offset"], 2);
        assert_eq!(v.as_array().unwrap().len(), 1);
        // finish() without begin() gives an empty object.
        let out = enc.finish();
        assert_eq!(decompress(compression, &out), b"[]");
    }
}

#[test]
fn level_validation() {
    let level = |compression, level| {
        Encoder::new(FormatOptions {
            compression,
            level,
            ..FormatOptions::default()
        })
        .map(|e| e.level)
    };
    for (c, bad) in [
        (Compression::Gzip, -1),
        (Compression::Gzip, 13),
        (Compression::Zstd, 0),
        (Compression::Zstd, -3),
        (Compression::Zstd, 23),
        (Compression::None, 5),
    ] {
        let err = level(c, Some(bad)).unwrap_err();
        assert!(err.contains("s3.compression_level"), "{err}");
        assert!(err.contains(&bad.to_string()), "{err}");
    }
    assert!(
        level(Compression::Gzip, Some(13))
            .unwrap_err()
            .contains("0 to 12")
    );
    assert!(
        level(Compression::Zstd, Some(23))
            .unwrap_err()
            .contains("1 to 22")
    );
    assert_eq!(level(Compression::Gzip, None).unwrap(), 3);
    assert_eq!(level(Compression::Zstd, None).unwrap(), 3);
    assert_eq!(level(Compression::None, None).unwrap(), 0);
    // The extremes are accepted and produce valid streams.
    let msgs = nasty_messages();
    let expected = encode(FormatOptions::default(), &msgs);
    for (c, l) in [
        (Compression::Gzip, 0),
        (Compression::Gzip, 1),
        (Compression::Gzip, 9),
        (Compression::Zstd, 1),
        (Compression::Zstd, 22),
    ] {
        let o = FormatOptions {
            compression: c,
            level: Some(l),
            ..FormatOptions::default()
        };
        assert_eq!(decompress(c, &encode(o, &msgs)), expected, "{c:?} {l}");
    }
}

#[test]
fn content_type_encoding_and_extension() {
    let cases = [
        (Format::JsonLines, "application/x-ndjson", "jsonl"),
        (Format::JsonArray, "application/json", "json"),
        (Format::Raw, "application/octet-stream", "bin"),
        (Format::Csv, "text/csv", "csv"),
    ];
    for (format, content_type, ext) in cases {
        for (compression, encoding, suffix) in [
            (Compression::None, None, ""),
            (Compression::Gzip, Some("gzip"), ".gz"),
            (Compression::Zstd, Some("zstd"), ".zst"),
        ] {
            let enc = Encoder::new(opts(format, compression)).unwrap();
            assert_eq!(enc.content_type(), content_type);
            assert_eq!(enc.content_encoding(), encoding);
            assert_eq!(enc.extension(), format!("{ext}{suffix}"));
        }
    }
}

#[test]
fn options_deserialize_from_snake_case() {
    let f: Vec<Format> =
        serde_json::from_str(r#"["json_lines","json_array","raw","csv","parquet"]"#).unwrap();
    assert_eq!(
        f,
        [
            Format::JsonLines,
            Format::JsonArray,
            Format::Raw,
            Format::Csv,
            Format::Parquet
        ]
    );
    let c: Vec<Compression> = serde_json::from_str(r#"["none","gzip","zstd"]"#).unwrap();
    assert_eq!(c, [Compression::None, Compression::Gzip, Compression::Zstd]);
    assert!(serde_json::from_str::<Format>(r#""avro""#).is_err());
    assert_eq!(Format::default(), Format::JsonLines);
    assert_eq!(Compression::default(), Compression::None);
    assert_eq!(Framing::default(), Framing::Separator(b"\n".to_vec()));
}

#[test]
fn debug_shows_no_payload() {
    let mut enc = Encoder::new(opts(Format::JsonLines, Compression::None)).unwrap();
    enc.begin();
    enc.push(
        &part(),
        &msg(
            1,
            b"secret-payload",
            encode_headers(&[("hk", "hidden-header")]),
        ),
    );
    let shown = format!("{enc:?}");
    assert!(!shown.contains("secret-payload"), "{shown}");
    assert!(!shown.contains("hidden-header"), "{shown}");
    assert!(shown.contains("JsonLines"), "{shown}");
}

/// A record taken back with `unpush` leaves the object exactly as if it had never been
/// pushed (json_array's comma and csv's header included), in every uncompressed format;
/// compressed output, the only record and a record already taken out stay as they are.
#[test]
fn unpush_takes_the_last_record_back_exactly() {
    let p = part();
    let msgs = nasty_messages();
    let layouts = [
        opts(Format::JsonLines, Compression::None),
        opts(Format::JsonArray, Compression::None),
        opts(Format::Csv, Compression::None),
        opts(Format::Raw, Compression::None),
    ];
    for o in layouts {
        let format = o.format;
        let want = encode(o.clone(), &msgs[..3]);
        let mut enc = Encoder::new(o).unwrap();
        enc.begin();
        for m in &msgs[..3] {
            enc.push(&p, m);
        }
        let before = (enc.output_len(), enc.input_len(), enc.records());
        enc.push(&p, &msgs[3]);
        assert!(enc.unpush(), "{format:?}");
        assert_eq!((enc.output_len(), enc.input_len(), enc.records()), before);
        assert!(!enc.unpush(), "{format:?}: only the last record");
        let mut got = enc.take().to_vec();
        got.extend_from_slice(&enc.finish());
        assert_eq!(got, want, "{format:?}");

        enc.begin();
        enc.push(&p, &msgs[0]);
        assert!(!enc.unpush(), "{format:?}: the object's only record stays");
        enc.push(&p, &msgs[1]);
        let _ = enc.take();
        assert!(
            !enc.unpush(),
            "{format:?}: a record already taken out stays"
        );
        let _ = enc.finish();
    }
    for c in [Compression::Gzip, Compression::Zstd] {
        let mut enc = Encoder::new(opts(Format::JsonLines, c)).unwrap();
        enc.begin();
        enc.push(&p, &msgs[0]);
        enc.push(&p, &msgs[1]);
        assert!(!enc.unpush(), "{c:?}: a compressor cannot be wound back");
        let out = decompress(c, &enc.finish());
        assert_eq!(json_lines(&out).len(), 2);
    }
}

/// The window a zstd frame declares (its header's Window_Descriptor), as a power of two.
fn zstd_window_log(frame: &[u8]) -> u32 {
    assert_eq!(frame[..4], [0x28, 0xb5, 0x2f, 0xfd], "a zstd frame");
    let descriptor = frame[4];
    assert_eq!(descriptor & 0x20, 0, "not a single-segment frame");
    u32::from(frame[5] >> 3) + 10
}

/// The default zstd level compresses with a 256 KiB window (and small tables, see
/// ZSTD_TABLES); a level set explicitly takes zstd's own parameters (level 3: 2 MiB). Both
/// decode to the records.
#[test]
fn default_zstd_compresses_with_a_small_window_and_a_set_level_with_its_own() {
    let msgs: Vec<Message> = (0..3000)
        .map(|i| {
            msg(
                i,
                format!("{{\"n\":{i},\"pad\":\"{}\"}}", "q".repeat(i as usize % 300)).as_bytes(),
                Bytes::new(),
            )
        })
        .collect();
    let mut plain = Encoder::new(opts(Format::JsonLines, Compression::None)).unwrap();
    let expected = object(&mut plain, &msgs);
    for (level, window_log) in [(None, 18), (Some(3), 21)] {
        let mut enc = Encoder::new(FormatOptions {
            level,
            ..opts(Format::JsonLines, Compression::Zstd)
        })
        .unwrap();
        let out = object(&mut enc, &msgs);
        assert_eq!(zstd_window_log(&out), window_log, "level {level:?}");
        assert_eq!(zstd::stream::decode_all(&out[..]).unwrap(), expected);
    }
}
