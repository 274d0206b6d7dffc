//! The decoders of what an S3 server sends, on arbitrary and on mutated valid input: the same
//! checks as the fuzz targets of `s3/fuzz` (its `src/lib.rs` is included here as `checks`), run
//! on a few thousand generated inputs in the ordinary test run.
//!
//! - HTTP responses: fed whole, split in two and byte by byte, all three agree; `Partial` asks
//!   for at least one byte and no more than the body limit; nothing panics.
//! - XML: every reader and every action's `parse` on the body, with 2xx, 3xx, 4xx and 5xx
//!   statuses: no panic, fields within bounds, the streaming error reader consistent with the
//!   tree.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
#[path = "../fuzz/src/lib.rs"]
mod checks;

use std::path::Path;

use proptest::prelude::*;
use spillway_s3::Method;
use spillway_s3::http::Limits;

// ------------------------------------------------------------------------------ HTTP

/// Valid responses of every framing, to mutate.
const RESPONSES: &[&[u8]] = &[
    b"HTTP/1.1 200 OK\r\nETag: \"abc\"\r\nContent-Length: 11\r\nx-amz-request-id: R\r\n\r\nhello world",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\n0\r\nx-t: 1\r\n\r\nNEXT",
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the connection closes",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
    b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n\r\n",
    b"HTTP/1.1 404 Not Found\nContent-Length: 20\n\n<Error><Code>x</Code",
    b"HTTP/1.1 500 Internal Error\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 4\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    b"\r\n\nHTTP/1.1 503 Slow Down\r\nConnection: close\r\n\r\n<Error><Code>SlowDown</Code></Error>",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\nContent-Length: 5\r\n\r\n12345",
];

fn case_strategy() -> impl Strategy<Value = checks::HttpCase> {
    (
        0u8..5,
        any::<bool>(),
        any::<bool>(),
        any::<u8>(),
        proptest::option::of(0u64..2000),
    )
        .prop_map(|(m, eof, small, lim, body_limit)| checks::HttpCase {
            method: [
                Method::Get,
                Method::Head,
                Method::Put,
                Method::Post,
                Method::Delete,
            ][usize::from(m)],
            limits: if small {
                checks::small_limits(lim)
            } else {
                Limits::default()
            },
            body_limit,
            eof,
        })
}

/// A mutation of `base`: some bytes changed, some inserted or removed, perhaps cut short.
fn mutate(base: &[u8], edits: &[(usize, u8, u8)], cut: Option<usize>) -> Vec<u8> {
    let mut v = base.to_vec();
    for &(at, kind, b) in edits {
        let i = at % (v.len() + 1);
        match kind % 4 {
            0 if i < v.len() => v[i] = b,
            1 => v.insert(i, b),
            2 if i < v.len() => {
                v.remove(i);
            }
            // A framing byte where random bytes rarely put one.
            _ => v.insert(i, b"\r\n:;0aF \t"[usize::from(b) % 9]),
        }
    }
    if let Some(c) = cut {
        v.truncate(c % (v.len() + 1));
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    /// Arbitrary bytes, the first four choosing the case as in the fuzz target.
    #[test]
    fn http_arbitrary_bytes_agree_fed_whole_split_and_byte_by_byte(
        data in proptest::collection::vec(any::<u8>(), 0..700),
    ) {
        checks::http_response(&data);
    }

    /// Valid responses with a few bytes changed, inserted or removed, under any method and
    /// limits, split anywhere.
    #[test]
    fn http_mutated_responses_agree_fed_whole_split_and_byte_by_byte(
        case in case_strategy(),
        which in 0usize..RESPONSES.len(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 0..6),
        cut in proptest::option::of(any::<usize>()),
        split in any::<usize>(),
    ) {
        let input = mutate(RESPONSES[which], &edits, cut);
        checks::http_agreement(&case, &input, split % (input.len() + 1));
    }

    /// Text from the alphabet of HTTP framing after a status line.
    #[test]
    fn http_framing_alphabet_agrees(
        case in case_strategy(),
        tokens in proptest::collection::vec(
            prop::sample::select(vec![
                "\r\n", "\n", "\r", ":", ";", " ", "0", "5", "a", "F", "HTTP/1.1 ", "200 OK",
                "100 Continue", "content-length: ", "transfer-encoding: chunked",
                "connection: close", "1\r\nx\r\n", "0\r\n\r\n",
            ]),
            0..60,
        ),
        split in any::<usize>(),
    ) {
        let mut input = b"HTTP/1.1 200 OK\r\n".to_vec();
        input.extend(tokens.concat().bytes());
        checks::http_agreement(&case, &input, split % (input.len() + 1));
    }
}

#[test]
fn every_valid_response_agrees_at_every_split() {
    for input in RESPONSES {
        for method in [Method::Get, Method::Head] {
            for eof in [false, true] {
                let case = checks::HttpCase {
                    method,
                    limits: Limits::default(),
                    body_limit: None,
                    eof,
                };
                for split in 0..=input.len() {
                    checks::http_agreement(&case, input, split);
                }
            }
        }
    }
}

// ------------------------------------------------------------------------------ XML

fn xml_documents() -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/xml");
    let mut docs: Vec<Vec<u8>> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    docs.sort();
    docs
}

fn xml_token() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "<Error>",
            "</Error>",
            "<Code>",
            "</Code>",
            "<Message>",
            "</Message>",
            "<RequestId>",
            "</RequestId>",
            "<HostId>",
            "</HostId>",
            "<Resource>",
            "</Resource>",
            "<BucketName>",
            "</BucketName>",
            "<Key>",
            "</Key>",
            "<InitiateMultipartUploadResult>",
            "</InitiateMultipartUploadResult>",
            "<UploadId>",
            "</UploadId>",
            "<CompleteMultipartUploadResult>",
            "</CompleteMultipartUploadResult>",
            "<ETag>",
            "</ETag>",
            "<ListMultipartUploadsResult>",
            "</ListMultipartUploadsResult>",
            "<Upload>",
            "</Upload>",
            "<IsTruncated>",
            "</IsTruncated>",
            "true",
            "<MaxUploads>",
            "</MaxUploads>",
            "<EncodingType>url</EncodingType>",
            "<Initiated>",
            "</Initiated>",
            "2010-11-10T20:48:33.000Z",
            "<NextKeyMarker>",
            "</NextKeyMarker>",
            "<x:Code xmlns:x=\"u\">",
            "</x:Code>",
            "<E/>",
            "&amp;",
            "&lt;",
            "&#233;",
            "&#x1F600;",
            "&#0;",
            "&bad;",
            "<![CDATA[<&>]]>",
            "<!-- c -->",
            "<?xml version=\"1.0\"?>",
            "%2F",
            "%ff",
            "+",
            "é",
            "\r\n",
            " ",
            "<",
            ">",
            "&",
            "]]>",
            "\u{fffe}",
            "\u{1}",
        ])
        .prop_map(str::to_owned),
        "[a-z]{0,8}",
        (1usize..1100).prop_map(|n| "v".repeat(n)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn xml_arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        checks::xml(&data);
    }

    /// Documents from the alphabet of S3's XML: tags of every action and of error documents,
    /// references, CDATA, long text.
    #[test]
    fn xml_token_documents_never_panic(
        ctl in any::<u8>(),
        tokens in proptest::collection::vec(xml_token(), 0..40),
    ) {
        checks::xml_body(ctl, tokens.concat().as_bytes());
    }

    /// The documents of `tests/data/xml` (real S3 answers) with a few bytes changed, inserted
    /// or removed.
    #[test]
    fn xml_mutated_s3_documents_never_panic(
        ctl in any::<u8>(),
        which in any::<prop::sample::Index>(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 0..5),
        cut in proptest::option::of(any::<usize>()),
    ) {
        let docs = xml_documents();
        let base: &Vec<u8> = which.get(&docs);
        let doc = mutate(base, &edits, cut);
        checks::xml_body(ctl, &doc);
    }
}

#[test]
fn every_s3_document_passes_the_checks_with_many_statuses_and_header_sets() {
    for doc in xml_documents() {
        // Every fifth control byte: each status and header choice many times over.
        for ctl in (0..=255u8).step_by(5) {
            checks::xml_body(ctl, &doc);
        }
    }
}

/// Found by the property tests: a field whose text reached `MAX_ERROR_FIELD` bytes exactly at
/// the end of one piece and went on after an entity reference was cut without the `…` that
/// marks a cut. Fixed in `xml::error_fields`.
#[test]
fn an_error_field_cut_at_a_reference_boundary_is_marked() {
    let max = spillway_s3::xml::MAX_ERROR_FIELD;
    let text = "a".repeat(max);
    let doc = format!("<Error><Message>{text}&amp;more</Message></Error>");
    let fields = spillway_s3::xml::error_fields(doc.as_bytes()).unwrap();
    assert_eq!(fields.message.unwrap(), format!("{text}…"));
}

/// The same field cut inside a piece is marked (what the tolerated case should match).
#[test]
fn an_error_field_cut_inside_a_piece_is_marked() {
    let max = spillway_s3::xml::MAX_ERROR_FIELD;
    let text = "a".repeat(max + 10);
    let doc = format!("<Error><Message>{text}&amp;more</Message></Error>");
    let fields = spillway_s3::xml::error_fields(doc.as_bytes()).unwrap();
    assert_eq!(fields.message.unwrap(), format!("{}…", &text[..max]));
    checks::xml_body(0, doc.as_bytes());
    // The tolerated case passes the checks.
    let doc = format!(
        "<Error><Message>{}&amp;more</Message></Error>",
        "a".repeat(max)
    );
    checks::xml_body(0, doc.as_bytes());
}
