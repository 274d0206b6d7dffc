//! The decoders of what Iggy sends, and the JSON embedding of payloads, on arbitrary and on
//! mutated valid input: the same checks as the fuzz targets of `engine/fuzz` (its `src/lib.rs`
//! is included here as `checks`), run on a few thousand generated inputs in the ordinary test
//! run.
//!
//! - Iggy: raw bytes as frames, poll replies, user headers and typed replies; checksum-valid
//!   poll replies built from random input decode to exactly what was built, and with a byte
//!   changed never panic, never keep part of a refused reply, never reserve room the reply
//!   cannot fill.
//! - JSON: `json::is_json` decides as serde_json does (numbers beyond f64 aside), and every
//!   record serde_json reads back to the payload's value, string or base64.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
#[path = "../../fuzz/src/lib.rs"]
mod checks;

use bytes::{Bytes, BytesMut};
use iggy_binary_protocol::consensus::{Command, Operation, ReplyHeader};
use proptest::prelude::*;
use spillway::iggy::proto::HEADER_SIZE;

// ------------------------------------------------------------------------------ Iggy

/// A reply frame with `body`, as the server sends it.
fn frame(operation: Operation, status: u32, request: u64, body: &[u8]) -> Vec<u8> {
    let h = ReplyHeader {
        command: Command::Reply,
        size: (HEADER_SIZE + body.len()) as u32,
        status,
        operation,
        request,
        ..ReplyHeader::default()
    };
    let mut f = bytemuck::bytes_of(&h).to_vec();
    f.extend_from_slice(body);
    f
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    /// Arbitrary bytes in both modes of the fuzz target (even first byte: raw; odd: a built
    /// poll reply, perhaps corrupted).
    #[test]
    fn iggy_arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..1500)) {
        checks::iggy_reply(&data);
    }

    /// Built poll replies, intact (must decode to what was built) or with one byte changed.
    #[test]
    fn iggy_built_poll_replies_decode_to_what_was_built(
        mode in any::<u8>(),
        data in proptest::collection::vec(any::<u8>(), 0..1200),
    ) {
        checks::built_poll_reply(mode | 1, &data);
    }

    /// Valid reply frames (a status, a result section or not) with a few bytes changed, cut,
    /// or followed by more frames.
    #[test]
    fn iggy_mutated_frames_never_panic(
        op in 0usize..4,
        status in prop_oneof![Just(0u32), any::<u32>()],
        request in any::<u64>(),
        body in proptest::collection::vec(any::<u8>(), 0..300),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        cut in proptest::option::of(any::<usize>()),
        twice in any::<bool>(),
    ) {
        let operation = [
            Operation::NonReplicated,
            Operation::StoreConsumerOffset,
            Operation::Register,
            Operation::JoinConsumerGroup,
        ][op];
        let mut f = frame(operation, status, request, &body);
        if twice {
            f.extend_from_slice(&frame(Operation::NonReplicated, 0, request, &body));
        }
        for (at, b) in edits {
            let i = at % f.len();
            f[i] = b;
        }
        if let Some(c) = cut {
            f.truncate(c % (f.len() + 1));
        }
        checks::raw_stream(&f);
        let frame = Bytes::from(f);
        if frame.len() >= HEADER_SIZE {
            let mut header = [0u8; HEADER_SIZE];
            header.copy_from_slice(&frame[..HEADER_SIZE]);
            if spillway::iggy::proto::frame_size(&header).is_ok() {
                checks::reply_frame(&frame, request);
            }
        }
    }

    /// User headers: well formed, or with lengths that run past the end.
    #[test]
    fn iggy_user_headers_never_panic(
        fields in proptest::collection::vec((any::<u8>(), proptest::collection::vec(any::<u8>(), 0..20), any::<bool>()), 0..8),
    ) {
        let mut raw = Vec::new();
        for (kind, data, lie) in fields {
            raw.push(kind % 18);
            let len = if lie { u32::MAX - u32::from(kind) } else { data.len() as u32 };
            raw.extend_from_slice(&len.to_le_bytes());
            raw.extend_from_slice(&data);
        }
        checks::user_headers(&raw);
    }
}

#[test]
fn a_poll_reply_counting_more_messages_than_it_can_hold_is_refused() {
    // A head counting u32::MAX messages and nothing after it.
    let mut body = BytesMut::new();
    body.extend_from_slice(&[3, 0, 0, 0]);
    body.extend_from_slice(&[0; 8]);
    body.extend_from_slice(&u32::MAX.to_le_bytes());
    body.extend_from_slice(&[0; 300]);
    assert!(checks::poll_body(&body.freeze(), None).is_err());
}

/// Found by this file's property tests: `decode_reply` sliced the frame at
/// `HEADER_SIZE..min(size, frame.len())` without checking the header's size field, so a size
/// below 256 panicked ("range start must not be greater than end: 256 <= 0";
/// `Connection::read_frame` checks the size first, a direct caller did not). Now malformed.
#[test]
fn decode_reply_with_a_size_field_below_the_header_is_malformed() {
    // A 256-byte reply header, all zero but command = Reply (byte 60 = 8) and operation =
    // NonReplicated (byte 208 = 2): its size field (bytes 48..52) is 0.
    let mut f = vec![0u8; HEADER_SIZE];
    f[60] = Command::Reply as u8;
    f[208] = Operation::NonReplicated as u8;
    let frame = Bytes::from(f);
    assert!(spillway::iggy::proto::decode_reply(&frame, None).is_err());
}

// ------------------------------------------------------------------------------ JSON

/// JSON-like text from a token alphabet: often valid, often wrong by one token.
fn jsonish() -> impl Strategy<Value = Vec<u8>> {
    let token = prop::sample::select(vec![
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        " ",
        "\n",
        "\r\n",
        "\t",
        "\u{c}",
        "\"k\"",
        "\"k\"",
        "\"v\\n\\u0041\\/\"",
        "\"\\ud83d\\ude00\"",
        "\"\\ud83d\"",
        "\"\\ude00\"",
        "\"\\u00\"",
        "true",
        "false",
        "null",
        "nul",
        "-12.5e3",
        "-0",
        "0",
        "01",
        "7",
        "1e999",
        "-1E+400",
        "1.",
        ".5",
        "1e",
        "\"é\"",
        "\"\t\"",
        "\"\\q\"",
        "\"\u{7f}\"",
        "\u{feff}",
        "\"",
        "\\",
    ]);
    proptest::collection::vec(token, 0..32).prop_map(|t| t.concat().into_bytes())
}

/// Valid JSON from a value tree, compact or pretty.
fn valid_json() -> impl Strategy<Value = Vec<u8>> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(serde_json::Value::from),
        any::<u64>().prop_map(serde_json::Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(serde_json::Value::from),
        any::<bool>().prop_map(serde_json::Value::from),
        ".{0,12}".prop_map(serde_json::Value::from),
        Just(serde_json::Value::Null),
    ];
    let tree = leaf.prop_recursive(8, 64, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
            proptest::collection::btree_map(".{0,6}", inner, 0..6)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    });
    (tree, any::<bool>()).prop_map(|(v, pretty)| {
        if pretty {
            serde_json::to_vec_pretty(&v).unwrap()
        } else {
            serde_json::to_vec(&v).unwrap()
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn json_arbitrary_bytes_agree_with_serde_json(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        checks::json_embed(&data);
    }

    #[test]
    fn json_token_text_agrees_with_serde_json(data in jsonish()) {
        checks::json_embed(&data);
    }

    #[test]
    fn json_valid_documents_are_embedded_as_themselves(data in valid_json()) {
        prop_assert!(checks::json_validity(&data));
        checks::json_records(&data);
    }

    /// Valid documents with a byte changed, inserted or removed.
    #[test]
    fn json_mutated_documents_agree_with_serde_json(
        data in valid_json(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..4),
    ) {
        let mut data = data;
        for (at, b, kind) in edits {
            let i = at % (data.len() + 1);
            match kind {
                0 if i < data.len() => data[i] = b,
                1 if i < data.len() => {
                    data.remove(i);
                }
                _ => data.insert(i, b),
            }
        }
        checks::json_embed(&data);
    }
}

/// Nesting around serde_json's limit (it reads 127 levels and refuses 128), with and without
/// an empty innermost container, and as objects: where the validator and serde_json part.
fn deep(levels: usize, object: bool, inner: &str) -> Vec<u8> {
    let (open, close) = if object { ("{\"k\":", "}") } else { ("[", "]") };
    format!("{}{inner}{}", open.repeat(levels), close.repeat(levels)).into_bytes()
}

#[test]
fn json_nesting_below_the_limit_agrees_with_serde_json() {
    for levels in [1, 2, 63, 64, 65, 100, 125, 126, 127] {
        for object in [false, true] {
            for inner in ["", "1", "[]", "{}"] {
                let levels = if inner.is_empty() { levels } else { levels - 1 };
                let doc = deep(levels, object, inner);
                assert_eq!(
                    checks::nesting(&doc),
                    levels + usize::from(inner.starts_with(['[', '{']))
                );
                checks::json_embed(&doc);
            }
        }
    }
    for levels in [200, 300, 1000] {
        checks::json_embed(&deep(levels, false, ""));
        checks::json_embed(&deep(levels, true, "1"));
    }
}

/// Found by the differential tests: `json::is_json` took 128 levels of nesting (129 with an
/// empty innermost container) for JSON, where serde_json refuses its 128th level, so a record
/// embedding such a payload could not be read back with serde_json. Now both refuse.
#[test]
fn is_json_refuses_the_nesting_serde_json_refuses() {
    for doc in [
        deep(128, false, ""),
        deep(128, false, "1"),
        deep(128, false, "[]"),
        deep(128, true, "{}"),
    ] {
        let serde = serde_json::from_slice::<serde_json::Value>(&doc).is_ok();
        assert_eq!(
            spillway::json::is_json(&doc),
            serde,
            "{}",
            String::from_utf8_lossy(&doc)
        );
    }
}
