//! The XML reader, S3 error documents, and escaping.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use bytes::Bytes;
use spillway_s3::xml::{self, Element, escape_text, parse_document, parse_error};
use spillway_s3::{Error, Response};

fn data(name: &str) -> Bytes {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/xml")
        .join(name);
    Bytes::from(std::fs::read(p).unwrap())
}

fn response(status: u16, headers: &[(&str, &str)], body: Bytes) -> Response {
    Response {
        status,
        headers: headers
            .iter()
            .map(|(n, v)| ((*n).to_string(), (*v).to_string()))
            .collect(),
        body,
    }
}

#[test]
fn tree_text_and_children() {
    let doc = parse_document(
        br#"<?xml version="1.0"?><!-- c --><R xmlns="ns"><A>1</A><B><C>x</C><C>y</C></B><A>2</A><E/><F></F></R>"#,
    )
    .unwrap();
    assert_eq!(doc.name, "R");
    assert_eq!(doc.child_text("A"), Some("1"), "the first A");
    let b = doc.child("B").unwrap();
    let cs: Vec<&str> = b.children_named("C").map(|c| c.text.as_str()).collect();
    assert_eq!(cs, ["x", "y"]);
    assert_eq!(doc.child_text("E"), Some(""), "an empty element is present");
    assert_eq!(doc.child_text_nonempty("F"), None);
    assert_eq!(doc.child("Z"), None);
}

#[test]
fn entities_character_references_and_cdata_are_resolved() {
    let doc = parse_document(
        "<R><K>a&amp;b &lt;c&gt; &quot;d&quot; &apos;e&apos; &#x2603;&#233;&#10;</K><D><![CDATA[<raw & text>]]></D></R>"
            .as_bytes(),
    )
    .unwrap();
    assert_eq!(doc.child_text("K"), Some("a&b <c> \"d\" 'e' ☃é\n"));
    assert_eq!(doc.child_text("D"), Some("<raw & text>"));
}

#[test]
fn text_is_kept_exactly() {
    let doc = parse_document(b"<R><K>  two  spaces  </K><N>line1\r\nline2</N></R>").unwrap();
    assert_eq!(doc.child_text("K"), Some("  two  spaces  "));
    assert_eq!(
        doc.child_text("N"),
        Some("line1\nline2"),
        "XML end-of-line handling"
    );
}

#[test]
fn namespace_prefixes_are_dropped() {
    let doc = parse_document(br#"<s3:R xmlns:s3="ns"><s3:A>1</s3:A></s3:R>"#).unwrap();
    assert_eq!(doc.name, "R");
    assert_eq!(doc.child_text("A"), Some("1"));
}

#[test]
fn malformed_documents_are_errors() {
    let cases: &[&[u8]] = &[
        b"",
        b"   ",
        b"<R><A></B></R>",
        b"<R><A>unterminated",
        b"<R>&bogus;</R>",
        b"<R>&#0;</R>",
        b"\xff\xfe<R/>",
        b"not xml at all",
    ];
    for c in cases {
        match parse_document(c) {
            Err(Error::InvalidResponse(m)) => assert!(!m.is_empty()),
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(c)),
        }
    }
}

#[test]
fn doctype_entities_are_not_expanded() {
    let doc = br#"<?xml version="1.0"?><!DOCTYPE R [<!ENTITY x "expanded">]><R>&x;</R>"#;
    assert!(parse_document(doc).is_err());
}

#[test]
fn nesting_is_limited() {
    let deep = "<a>".repeat(xml::MAX_DEPTH + 1) + &"</a>".repeat(xml::MAX_DEPTH + 1);
    match parse_document(deep.as_bytes()) {
        Err(Error::InvalidResponse(m)) => assert!(m.contains("deeper"), "{m}"),
        other => panic!("{other:?}"),
    }
    let ok = "<a>".repeat(xml::MAX_DEPTH) + &"</a>".repeat(xml::MAX_DEPTH);
    assert!(parse_document(ok.as_bytes()).is_ok());
}

#[test]
fn element_default_is_empty() {
    let e = Element::default();
    assert!(e.name.is_empty() && e.children.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Error documents.

#[test]
fn no_such_bucket() {
    let e = parse_error(&response(
        404,
        &[
            ("x-amz-request-id", "HEADER-ID"),
            ("x-amz-id-2", "HEADER-HOST"),
        ],
        data("error_no_such_bucket.xml"),
    ));
    assert_eq!(e.status, 404);
    assert_eq!(e.code, "NoSuchBucket");
    assert_eq!(
        e.message.as_deref(),
        Some("The specified bucket does not exist")
    );
    assert_eq!(
        e.request_id.as_deref(),
        Some("4442587FB7D0A2F9"),
        "the document's id wins"
    );
    assert_eq!(
        e.host_id.as_deref(),
        Some("JkfiV5tB0ZQ0T0ZUZpYUl9ZQ2L4r0s8mEXAMPLE=")
    );
    assert_eq!(
        e.resource.as_deref(),
        Some("spill-missing"),
        "from BucketName"
    );
    assert!(!e.is_retryable());
    let shown = e.to_string();
    assert!(
        shown.contains("NoSuchBucket") && shown.contains("404"),
        "{shown}"
    );
    assert!(shown.contains("4442587FB7D0A2F9"), "{shown}");
}

#[test]
fn access_denied() {
    let e = parse_error(&response(403, &[], data("error_access_denied.xml")));
    assert_eq!((e.status, e.code.as_str()), (403, "AccessDenied"));
    assert_eq!(e.request_id.as_deref(), Some("TXDNK3NPB1P1FAV1"));
    assert!(!e.is_retryable());
}

#[test]
fn signature_does_not_match() {
    let e = parse_error(&response(
        403,
        &[],
        data("error_signature_does_not_match.xml"),
    ));
    assert_eq!(e.code, "SignatureDoesNotMatch");
    assert!(
        e.message
            .as_deref()
            .unwrap()
            .starts_with("The request signature")
    );
    assert_eq!(e.request_id.as_deref(), Some("5V1GEXAMPLE4ZC8K"));
    assert!(!e.is_retryable());
}

#[test]
fn slow_down_is_retryable() {
    let e = parse_error(&response(503, &[], data("error_slow_down.xml")));
    assert_eq!((e.status, e.code.as_str()), (503, "SlowDown"));
    assert_eq!(
        e.message.as_deref(),
        Some("Please reduce your request rate.")
    );
    assert!(e.is_retryable());
}

#[test]
fn entity_too_small_and_invalid_part() {
    let e = parse_error(&response(400, &[], data("error_entity_too_small.xml")));
    assert_eq!((e.status, e.code.as_str()), (400, "EntityTooSmall"));
    assert!(!e.is_retryable());
    let e = parse_error(&response(400, &[], data("error_invalid_part.xml")));
    assert_eq!(e.code, "InvalidPart");
    assert!(e.message.as_deref().unwrap().contains("part's entity tag"));
    assert!(!e.is_retryable());
}

#[test]
fn no_such_key_with_resource() {
    let e = parse_error(&response(404, &[], data("error_no_such_key.xml")));
    assert_eq!(e.code, "NoSuchKey");
    assert_eq!(e.resource.as_deref(), Some("/mybucket/myfoto.jpg"));
}

#[test]
fn no_body_takes_ids_from_headers_and_code_from_status() {
    let e = parse_error(&response(
        404,
        &[("X-Amz-Request-Id", "R1"), ("x-amz-id-2", "H1")],
        Bytes::new(),
    ));
    assert_eq!(e.code, "Http404");
    assert_eq!(e.request_id.as_deref(), Some("R1"));
    assert_eq!(e.host_id.as_deref(), Some("H1"));
    assert_eq!(e.message, None);
}

#[test]
fn html_from_a_proxy_is_reported_not_parsed() {
    let body = Bytes::from_static(
        b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>nginx</body>\r\n</html>\r\n",
    );
    let e = parse_error(&response(502, &[], body));
    assert_eq!(e.code, "Http502");
    let m = e.message.unwrap();
    assert!(m.contains("502 Bad Gateway"), "{m}");
    assert!(!m.contains('\r') && !m.contains('\n'), "{m:?}");
    assert!(e.status == 502);

    let junk = Bytes::from(vec![b'x'; 5000]);
    let e = parse_error(&response(500, &[], junk));
    assert!(
        e.message.unwrap().chars().count() < 300,
        "long bodies are cut"
    );
}

#[test]
fn error_in_a_200_response() {
    let resp = response(
        200,
        &[("x-amz-request-id", "5A37448A37622243")],
        data("complete_multipart_upload_200_error.xml"),
    );
    let e = xml::error_in_success(&resp).unwrap();
    assert_eq!(e.status, 200);
    assert_eq!(e.code, "InternalError");
    assert_eq!(
        e.request_id.as_deref(),
        Some("656c76696e6727732072657175657374")
    );
    assert!(e.is_retryable(), "InternalError may pass");
    let ok = response(200, &[], data("complete_multipart_upload.xml"));
    assert_eq!(xml::error_in_success(&ok), None);
    assert_eq!(
        xml::error_in_success(&response(200, &[], Bytes::new())),
        None
    );
}

// ---------------------------------------------------------------------------------------------
// Escaping.

/// An error document cut short (the transport keeps only the first 64 KiB of an error body)
/// still gives the fields before the cut; elements of no interest, however many, are skipped
/// without being kept; a field is kept up to `MAX_ERROR_FIELD` bytes.
#[test]
fn error_fields_are_read_as_a_stream_from_cut_and_padded_documents() {
    let mut body = b"<Error><Code>InternalError</Code><Message>m &amp; n</Message>".to_vec();
    body.extend_from_slice(&b"<a/>".repeat(16 * 1024));
    body.extend_from_slice(b"<RequestId>r1</Req");
    let e = parse_error(&response(500, &[], Bytes::from(body)));
    assert_eq!(e.code, "InternalError");
    assert_eq!(e.message.as_deref(), Some("m & n"));

    let long = "x".repeat(10_000);
    let body = format!(
        "<Error><Code>C</Code><Message>{long}</Message><Key>k</Key><BucketName>b</BucketName></Error>"
    );
    let fields = xml::error_fields(body.as_bytes()).unwrap();
    let message = fields.message.unwrap();
    assert!(
        message.len() <= xml::MAX_ERROR_FIELD + '…'.len_utf8(),
        "{}",
        message.len()
    );
    assert!(message.ends_with('…'));
    assert_eq!(
        (fields.key.as_deref(), fields.bucket.as_deref()),
        (Some("k"), Some("b"))
    );

    // Exactly full, then a reference: still marked as cut (found by the property test).
    let body = format!(
        "<Error><Message>{}&amp;</Message></Error>",
        "y".repeat(xml::MAX_ERROR_FIELD)
    );
    let message = xml::error_fields(body.as_bytes()).unwrap().message.unwrap();
    assert!(message.ends_with('…'), "{message}");
    assert_eq!(message.len(), xml::MAX_ERROR_FIELD + '…'.len_utf8());

    // Nested deeper than a field: not taken as the field's text.
    let fields = xml::error_fields(b"<Error><Code>A<b>B</b>C</Code></Error>").unwrap();
    assert_eq!(fields.code.as_deref(), Some("AC"));
    // Another root, or no root: not an error document.
    assert!(xml::error_fields(b"<InitiateMultipartUploadResult/>").is_none());
    assert!(xml::error_fields(b"not xml").is_none());
    // Invalid UTF-8 after the code ends the reading there.
    let mut body = b"<Error><Code>Denied</Code><Message>ab".to_vec();
    body.push(0xff);
    let fields = xml::error_fields(&body).unwrap();
    assert_eq!(fields.code.as_deref(), Some("Denied"));
}

#[test]
fn escape_text_round_trips_odd_text() {
    for s in [
        "plain",
        "a&b<c>d",
        "\"quoted\" 'single'",
        "&amp; already escaped",
        "tabs\tand\nnewlines\r\nand CR",
        "ünïcödé ☃ 鍵",
        " spaced ",
    ] {
        let escaped = escape_text(s).unwrap();
        let doc = parse_document(format!("<K>{escaped}</K>").as_bytes()).unwrap();
        assert_eq!(doc.text, s, "{escaped}");
    }
    assert!(matches!(
        escape_text("plain").unwrap(),
        std::borrow::Cow::Borrowed(_)
    ));
}

#[test]
fn escape_text_refuses_what_xml_cannot_carry() {
    for s in ["nul\0", "bell\x07", "esc\x1b", "\u{fffe}"] {
        match escape_text(s) {
            Err(Error::Config(m)) => assert!(m.contains("XML"), "{m}"),
            other => panic!("{s:?}: {other:?}"),
        }
    }
}
