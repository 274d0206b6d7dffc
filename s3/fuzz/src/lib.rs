//! The checks the S3 fuzz targets run. They live in a library so that each target is one call,
//! and so that `s3/tests/never_panics.rs` runs the very same checks in the ordinary test run
//! (it includes this file as a module): keep to `spillway-s3` and `bytes` here.
//!
//! - [`http_response`]: the HTTP/1.1 response parser fed whole, split in two, and byte by byte.
//! - [`xml`]: every reader of S3's XML, and every action's `parse`, on one body.

use bytes::{Bytes, BytesMut};
use spillway_s3::actions::list_multipart_uploads::{self, ListMultipartUploadsArgs};
use spillway_s3::actions::{
    abort_multipart_upload, complete_multipart_upload, create_multipart_upload, delete_object,
    get_object, head_bucket, head_object, put_object, upload_part,
};
use spillway_s3::http::{Limits, Parsed, Progress, ResponseParser};
use spillway_s3::xml::{self, ErrorFields, MAX_ERROR_FIELD};
use spillway_s3::{Error, Method, Response, S3Error, TransportError};

// ------------------------------------------------------------------------------ HTTP responses

/// The longest field [`xml::error_fields`] may return: `MAX_ERROR_FIELD` bytes and the `…`
/// that marks a cut.
pub const MAX_FIELD_LEN: usize = MAX_ERROR_FIELD + '…'.len_utf8();

/// How one way of feeding a response ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A response, and the bytes left in the buffer after it.
    Complete(Parsed, Vec<u8>),
    /// Still `Partial` after the last byte (and no `finish_eof`).
    Incomplete,
    /// An error, by kind (messages may name the point the parser had reached).
    Failed(&'static str),
}

/// What the first four input bytes chose.
#[derive(Debug, Clone, Copy)]
pub struct HttpCase {
    pub method: Method,
    pub limits: Limits,
    /// For [`ResponseParser::with_body_limit`] (the per-action cap on a successful body).
    pub body_limit: Option<u64>,
    /// Whether the peer closes the connection after the input ([`ResponseParser::finish_eof`]).
    pub eof: bool,
}

impl HttpCase {
    /// The largest body any response may be given: [`Limits::max_body_bytes`] lowered by the
    /// body limit.
    pub fn max_body(&self) -> u64 {
        match self.body_limit {
            Some(b) => self.limits.max_body_bytes.min(b),
            None => self.limits.max_body_bytes,
        }
    }

    fn parser(&self) -> ResponseParser {
        ResponseParser::new(self.method, self.limits).with_body_limit(self.body_limit)
    }
}

/// Small limits chosen by one byte, so that every limit is met by short inputs.
pub fn small_limits(b: u8) -> Limits {
    Limits {
        max_head_bytes: [32, 64, 256, 1024][usize::from(b & 3)],
        max_headers: [0, 1, 4, 16][usize::from((b >> 2) & 3)],
        max_body_bytes: [0, 1, 16, 1000][usize::from((b >> 4) & 3)],
        max_error_body_bytes: [0, 1, 8, 100][usize::from(b >> 6)],
    }
}

/// Splits fuzz input into the case (first byte: method in bits 0-2, `finish_eof` bit 3, small
/// limits bit 4, a body limit bit 5; second byte: the small limits and the body limit; third
/// and fourth: where to split) and the bytes the server sends.
pub fn http_case(data: &[u8]) -> (HttpCase, usize, &[u8]) {
    let byte = |i: usize| data.get(i).copied().unwrap_or(0);
    let (ctl, lim) = (byte(0), byte(1));
    let input = data.get(4..).unwrap_or(&[]);
    let method = match ctl & 7 {
        1 | 6 => Method::Head,
        2 => Method::Put,
        3 => Method::Post,
        4 => Method::Delete,
        _ => Method::Get,
    };
    let case = HttpCase {
        method,
        limits: if ctl & 0x10 != 0 {
            small_limits(lim)
        } else {
            Limits::default()
        },
        body_limit: (ctl & 0x20 != 0).then_some(u64::from(lim)),
        eof: ctl & 0x08 != 0,
    };
    let split = usize::from(u16::from_le_bytes([byte(2), byte(3)])) % (input.len() + 1);
    (case, split, input)
}

/// Fuzz input as an S3 HTTP response: see [`http_case`] for the first four bytes, and
/// [`http_agreement`] for what is checked.
pub fn http_response(data: &[u8]) {
    let (case, split, input) = http_case(data);
    http_agreement(&case, input, split);
}

/// Feeds `input` to the parser whole, in two parts split at `split`, and one byte at a time,
/// and checks that all three end the same way (same kind of result, same response, same bytes
/// left over). Along the way (see [`feed`]): `Partial` asks for at least one byte and never
/// for more than the body limit; a response keeps within the limits; nothing panics.
pub fn http_agreement(case: &HttpCase, input: &[u8], split: usize) -> Outcome {
    let whole = feed(case, &[input]);
    let (a, b) = input.split_at(split.min(input.len()));
    let two = feed(case, &[a, b]);
    assert_eq!(
        whole, two,
        "whole and split at {split} disagree ({case:?}, input {input:02x?})"
    );
    let bytes: Vec<&[u8]> = input.chunks(1).collect();
    let one_by_one = feed(case, &bytes);
    assert_eq!(
        whole, one_by_one,
        "whole and byte by byte disagree ({case:?}, input {input:02x?})"
    );
    whole
}

/// Feeds `parts` one after the other to a new parser (then `finish_eof` when the case says
/// so), checking every answer.
pub fn feed(case: &HttpCase, parts: &[&[u8]]) -> Outcome {
    let mut parser = case.parser();
    let mut buf = BytesMut::new();
    for (i, part) in parts.iter().enumerate() {
        buf.extend_from_slice(part);
        match parser.parse(&mut buf) {
            Ok(Progress::Partial(need)) => {
                assert!(need >= 1, "Partial(0)");
                // The transport reserves what is asked for: never more than the body may be.
                assert!(
                    need as u64 <= case.max_body().max(2),
                    "Partial({need}) with a body limit of {}",
                    case.max_body()
                );
            }
            Ok(Progress::Complete(parsed)) => {
                check_parsed(case, &parsed);
                for later in &parts[i + 1..] {
                    buf.extend_from_slice(later);
                }
                assert!(
                    parser.parse(&mut buf.clone()).is_err(),
                    "the parser answered again after the response ended"
                );
                return Outcome::Complete(parsed, buf.to_vec());
            }
            Err(e) => return Outcome::Failed(error_kind(&e, false)),
        }
    }
    if !case.eof {
        return Outcome::Incomplete;
    }
    match parser.finish_eof(&mut buf) {
        Ok(parsed) => {
            check_parsed(case, &parsed);
            Outcome::Complete(parsed, buf.to_vec())
        }
        Err(e) => Outcome::Failed(error_kind(&e, true)),
    }
}

fn error_kind(e: &TransportError, at_eof: bool) -> &'static str {
    match e {
        TransportError::Http(_) => "Http",
        TransportError::Closed if at_eof => "Closed",
        other => panic!("the parser gave {other:?}"),
    }
}

fn check_parsed(case: &HttpCase, parsed: &Parsed) {
    let r = &parsed.response;
    assert!(
        !(100..200).contains(&r.status),
        "an interim response {} was returned as final",
        r.status
    );
    let len = r.body.len() as u64;
    assert!(
        len <= case.max_body(),
        "a body of {len} bytes with a limit of {}",
        case.max_body()
    );
    if r.status >= 300 {
        assert!(
            len <= case.limits.max_error_body_bytes,
            "an error body of {len} bytes with an error limit of {}",
            case.limits.max_error_body_bytes
        );
    }
    if case.method == Method::Head || r.status == 204 || r.status == 304 {
        assert!(r.body.is_empty(), "a body on a response that has none");
    }
    for (name, _) in &r.headers {
        assert_eq!(
            *name,
            name.to_ascii_lowercase(),
            "header names are lower case"
        );
    }
}

// ------------------------------------------------------------------------------ XML

/// The statuses a body is tried with: 200, then a 2xx, a 3xx/4xx and a 4xx/5xx picked by `ctl`.
pub fn statuses(ctl: u8) -> [u16; 4] {
    [
        200,
        [201, 204, 206, 299][usize::from(ctl & 3)],
        [301, 307, 400, 403][usize::from((ctl >> 2) & 3)],
        [404, 409, 500, 503][usize::from((ctl >> 4) & 3)],
    ]
}

/// Response headers picked by `ctl`: request ids, ETag, Content-Length (right, wrong, not a
/// number, too large, absent), region, delete marker, metadata.
pub fn headers(ctl: u8, body_len: usize) -> Vec<(String, String)> {
    let mut h: Vec<(String, String)> = Vec::new();
    let mut add = |n: &str, v: String| h.push((n.to_owned(), v));
    add("x-amz-request-id", "REQ1".into());
    if ctl & 1 != 0 {
        add("x-amz-id-2", "HOST/2=".into());
    }
    match (ctl >> 1) & 3 {
        0 => add("etag", "\"0123abc\"".into()),
        1 => add("etag", String::new()),
        2 => add("etag", "\"x-3\"".into()),
        _ => {}
    }
    match (ctl >> 3) & 7 {
        0 | 1 => add("content-length", body_len.to_string()),
        2 => add("content-length", format!(" {} ", body_len + 1)),
        3 => add("content-length", "abc".into()),
        4 => add("content-length", "18446744073709551616".into()),
        5 => add("content-length", "-1".into()),
        _ => {}
    }
    if ctl & 0x40 != 0 {
        add("x-amz-bucket-region", "eu-west-3".into());
        add("x-amz-delete-marker", " TRUE ".into());
        add("x-amz-version-id", "v1".into());
    }
    if ctl & 0x80 != 0 {
        add("x-amz-meta-color", "blue".into());
        add("X-Amz-Meta-Mixed", "Case".into());
        add("x-amz-meta-", "empty name".into());
    }
    h
}

/// Fuzz input as the body of S3 responses (the first byte picks statuses, headers and where
/// the body is cut): see [`xml_body`].
pub fn xml(data: &[u8]) {
    let (ctl, body) = match data.split_first() {
        Some((&c, rest)) => (c, rest),
        None => (0, data),
    };
    xml_body(ctl, body);
}

/// Runs every XML reader of the crate on `body`, and every action's `parse` on responses with
/// that body (statuses and headers from `ctl`):
///
/// - nothing panics;
/// - [`xml::error_fields`] keeps each field within [`MAX_FIELD_LEN`] bytes, on the body and on
///   the body cut short; and when the body is a well-formed `<Error>` document (by
///   [`xml::parse_document`]) it finds it, with each field that appears once holding the
///   element's text, cut with `…` at `MAX_ERROR_FIELD` bytes;
/// - [`xml::parse_error`] and [`xml::error_in_success`] keep their fields within bounds;
/// - any status outside 2xx is `Error::S3` with that status from every action (Abort may take a
///   404 `NoSuchUpload` as done); a 2xx `<Error>` document is `Error::S3` from the actions that
///   read a document; a 2xx answer parses exactly when what it needs is there;
/// - ListMultipartUploads' next page never asks for the same page again;
/// - text escaped by [`xml::escape_text`] reads back as itself.
pub fn xml_body(ctl: u8, body: &[u8]) {
    let doc = xml::parse_document(body);
    let fields = xml::error_fields(body);
    if let Some(f) = &fields {
        check_fields(f);
    }
    // The transport may cut an error body anywhere (even inside a UTF-8 sequence).
    let cut = body.len() * usize::from(ctl) / 255;
    if let Some(f) = xml::error_fields(&body[..cut]) {
        check_fields(&f);
    }
    if let Ok(root) = &doc
        && root.name == "Error"
    {
        let Some(f) = &fields else {
            panic!("parse_document reads an <Error> document that error_fields does not");
        };
        fields_match_tree(f, root);
    }

    let body_bytes = Bytes::copy_from_slice(body);
    let hdrs = headers(ctl.rotate_left(3), body.len());
    for status in statuses(ctl) {
        let resp = Response {
            status,
            headers: hdrs.clone(),
            body: body_bytes.clone(),
        };
        responses(&resp, &doc, fields.is_some());
    }

    if let Ok(text) = std::str::from_utf8(body) {
        let _ = list_multipart_uploads::parse_iso8601_utc(text);
        escape_round_trip(text);
    }
}

fn check_fields(f: &ErrorFields) {
    for (name, v) in field_list(f) {
        if let Some(v) = v {
            assert!(
                v.len() <= MAX_FIELD_LEN,
                "error_fields kept {} bytes of {name}",
                v.len()
            );
        }
    }
}

fn field_list(f: &ErrorFields) -> [(&'static str, &Option<String>); 7] {
    [
        ("Code", &f.code),
        ("Message", &f.message),
        ("RequestId", &f.request_id),
        ("HostId", &f.host_id),
        ("Resource", &f.resource),
        ("BucketName", &f.bucket),
        ("Key", &f.key),
    ]
}

/// What `error_fields` should have kept of `text`: all of it, or its first `MAX_ERROR_FIELD`
/// bytes (to a character boundary) and `…`.
pub fn expected_field(text: &str) -> String {
    if text.len() <= MAX_ERROR_FIELD {
        return text.to_owned();
    }
    let mut cut = MAX_ERROR_FIELD;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &text[..cut])
}

fn fields_match_tree(f: &ErrorFields, root: &xml::Element) {
    for (name, got) in field_list(f) {
        let mut named = root.children_named(name);
        let (Some(only), None) = (named.next(), named.next()) else {
            // Absent, or repeated (error_fields runs the repeats together): not compared.
            continue;
        };
        let got = got.as_deref().unwrap_or_default();
        let want = expected_field(&only.text);
        assert_eq!(
            got, want,
            "error_fields and parse_document disagree on <{name}>"
        );
    }
}

fn check_s3_error(e: &S3Error, status: u16) {
    assert_eq!(e.status, status);
    assert!(!e.code.is_empty(), "an S3 error without a code");
    assert!(
        e.code.len() <= MAX_FIELD_LEN,
        "code of {} bytes",
        e.code.len()
    );
    if let Some(m) = &e.message {
        // A field of the document, or what came instead (200 characters of it) with a note.
        assert!(m.len() <= 2 * MAX_FIELD_LEN, "message of {} bytes", m.len());
    }
    if let Some(r) = &e.resource {
        // BucketName/Key, each a field.
        assert!(
            r.len() <= 2 * MAX_FIELD_LEN + 1,
            "resource of {} bytes",
            r.len()
        );
    }
}

fn expect_s3(r: Result<impl std::fmt::Debug, Error>, status: u16, action: &str) {
    match r {
        Err(Error::S3(e)) => check_s3_error(&e, status),
        other => panic!("{action} answered {other:?} to a {status}"),
    }
}

/// Every action's `parse` on `resp` (see [`xml_body`]).
fn responses(resp: &Response, doc: &Result<xml::Element, Error>, is_error_doc: bool) {
    let status = resp.status;
    let success = resp.is_success();

    let e = xml::parse_error(resp);
    check_s3_error(&e, status);
    match xml::error_in_success(resp) {
        Some(e) => {
            assert!(is_error_doc, "error_in_success without an <Error> document");
            check_s3_error(&e, status);
        }
        None => assert!(!is_error_doc, "an <Error> document error_in_success missed"),
    }

    // The actions that read a document: a 2xx answer is an S3 error when the document is an
    // <Error>, unreadable when it is not XML or has another root.
    let expected_doc_error = |root: &str| match doc {
        _ if !success => Some("S3"),
        Err(_) => Some("InvalidResponse"),
        Ok(d) if d.name == "Error" => Some("S3"),
        Ok(d) if d.name != root => Some("InvalidResponse"),
        Ok(_) => None,
    };
    let check_doc = |action: &str, root: &str, r: Result<(), &Error>| {
        let Some(expected) = expected_doc_error(root) else {
            return;
        };
        match (expected, r) {
            ("S3", Err(Error::S3(err))) => check_s3_error(err, status),
            ("InvalidResponse", Err(Error::InvalidResponse(_))) => {}
            (_, r) => panic!("{action} on a {status}: {r:?}, expected {expected}"),
        }
    };
    let r = create_multipart_upload::parse(resp.clone());
    if let Ok(out) = &r {
        assert!(
            !out.upload_id.is_empty(),
            "CreateMultipartUpload without an upload id"
        );
    }
    check_doc(
        "CreateMultipartUpload",
        "InitiateMultipartUploadResult",
        r.as_ref().map(|_| ()),
    );
    let r = complete_multipart_upload::parse(resp.clone());
    if let Ok(out) = &r {
        assert!(
            !out.etag.is_empty(),
            "CompleteMultipartUpload without an ETag"
        );
    }
    check_doc(
        "CompleteMultipartUpload",
        "CompleteMultipartUploadResult",
        r.as_ref().map(|_| ()),
    );
    let r = list_multipart_uploads::parse(resp.clone());
    if let Ok(out) = &r {
        list_pages(out);
    }
    check_doc(
        "ListMultipartUploads",
        "ListMultipartUploadsResult",
        r.as_ref().map(|_| ()),
    );

    // The actions that read headers only.
    match abort_multipart_upload::parse(resp.clone()) {
        Ok(abort_multipart_upload::AbortOutcome::Aborted) => assert!(success),
        Ok(abort_multipart_upload::AbortOutcome::AlreadyGone) => {
            assert!(
                status == 404 && e.code == "NoSuchUpload",
                "AlreadyGone on {e:?}"
            );
        }
        Err(Error::S3(err)) => {
            assert!(!success);
            check_s3_error(&err, status);
        }
        Err(other) => panic!("AbortMultipartUpload: {other:?} on a {status}"),
    }
    let etag = resp.header("etag").filter(|v| !v.is_empty());
    for (action, r) in [
        ("PutObject", put_object::parse(resp.clone()).map(|o| o.etag)),
        (
            "UploadPart",
            upload_part::parse(resp.clone()).map(|o| o.etag),
        ),
    ] {
        match r {
            Ok(t) => assert!(success && Some(t.as_str()) == etag, "{action}: {t:?}"),
            Err(Error::InvalidResponse(_)) => assert!(success && etag.is_none(), "{action}"),
            other => expect_s3(other, status, action),
        }
    }
    let length = resp.header("content-length");
    let length_value = length.map(|v| v.trim().parse::<u64>());
    match head_object::parse(resp.clone()) {
        Ok(out) => assert!(success && Some(Ok(out.size)) == length_value, "HeadObject"),
        Err(Error::InvalidResponse(_)) => {
            assert!(
                success && !matches!(length_value, Some(Ok(_))),
                "HeadObject"
            );
        }
        other => expect_s3(other, status, "HeadObject"),
    }
    match get_object::parse(resp.clone()) {
        Ok(out) => {
            assert!(success && out.body == resp.body);
            assert_eq!(out.content_length, resp.body.len() as u64);
        }
        Err(Error::InvalidResponse(_)) => {
            let body_len = resp.body.len() as u64;
            assert!(
                success && length_value.is_some_and(|v| v != Ok(body_len)),
                "GetObject refused a body that matches its Content-Length"
            );
        }
        other => expect_s3(other, status, "GetObject"),
    }
    match head_bucket::parse(resp.clone()) {
        Ok(_) => assert!(success),
        other => expect_s3(other, status, "HeadBucket"),
    }
    match delete_object::parse(resp.clone()) {
        Ok(_) => assert!(success),
        other => expect_s3(other, status, "DeleteObject"),
    }
}

/// The next page of a listing never asks for the page it came from.
fn list_pages(out: &list_multipart_uploads::ListMultipartUploadsOutput) {
    for u in &out.uploads {
        let _ = u.initiated_time();
    }
    let first = ListMultipartUploadsArgs::default();
    let again = ListMultipartUploadsArgs {
        prefix: out.prefix.clone(),
        key_marker: out.next_key_marker.clone(),
        upload_id_marker: out.next_upload_id_marker.clone(),
        max_uploads: Some(10),
    };
    for args in [first, again] {
        if let Some(next) = out.next_args(&args) {
            assert!(
                next.key_marker != args.key_marker
                    || next.upload_id_marker != args.upload_id_marker,
                "next_args asks for the same page again: {args:?}"
            );
        }
    }
}

/// Text that [`xml::escape_text`] accepts reads back as itself inside an element.
fn escape_round_trip(text: &str) {
    let Ok(escaped) = xml::escape_text(text) else {
        return;
    };
    let doc = format!("<R>{escaped}</R>");
    match xml::parse_document(doc.as_bytes()) {
        Ok(root) => assert_eq!(root.text, text, "escaped text read back differently"),
        Err(e) => panic!("escaped text {text:?} does not read back: {e}"),
    }
}
