//! The sans-IO HTTP/1.1 layer: request heads byte for byte, and the incremental response
//! parser fed whole, split at every byte boundary, and with hostile input.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use spillway_s3::http::{
    Limits, Parsed, Progress, ResponseParser, check_request, encode_head, encode_head_into,
};
use spillway_s3::{Body, Method, Request, TransportError};

// ------------------------------------------------------------------------------ request heads

#[test]
fn get_head_is_byte_exact() {
    let mut req = Request::new(Method::Get, "bucket.s3.amazonaws.com", "/some/key.txt");
    req.query = vec![
        ("versionId".to_owned(), "3/L4kq".to_owned()),
        ("uploads".to_owned(), String::new()),
    ];
    req.headers = vec![
        ("x-amz-date".to_owned(), "20240101T000000Z".to_owned()),
        (
            "authorization".to_owned(),
            "AWS4-HMAC-SHA256 Credential=x".to_owned(),
        ),
    ];
    let head = encode_head(&req);
    assert_eq!(
        &head[..],
        &b"GET /some/key.txt?versionId=3%2FL4kq&uploads= HTTP/1.1\r\n\
           host: bucket.s3.amazonaws.com\r\n\
           x-amz-date: 20240101T000000Z\r\n\
           authorization: AWS4-HMAC-SHA256 Credential=x\r\n\
           \r\n"[..]
    );
}

#[test]
fn put_head_carries_content_length_but_not_the_body() {
    let mut req = Request::new(Method::Put, "127.0.0.1:9000", "/b/k");
    req.body = Body::from_chunks(vec![
        Bytes::from_static(b"hello "),
        Bytes::from_static(b"world"),
    ]);
    req.set_header("content-type", "text/plain");
    assert_eq!(
        &encode_head(&req)[..],
        &b"PUT /b/k HTTP/1.1\r\nhost: 127.0.0.1:9000\r\ncontent-length: 11\r\n\
           content-type: text/plain\r\n\r\n"[..]
    );
}

#[test]
fn empty_put_and_post_send_content_length_zero_get_head_delete_none() {
    for (method, line) in [
        (Method::Put, Some("content-length: 0\r\n")),
        (Method::Post, Some("content-length: 0\r\n")),
        (Method::Get, None),
        (Method::Head, None),
        (Method::Delete, None),
    ] {
        let req = Request::new(method, "h", "/");
        let head = String::from_utf8(encode_head(&req).to_vec()).unwrap();
        let expected = format!(
            "{} / HTTP/1.1\r\nhost: h\r\n{}\r\n",
            method.as_str(),
            line.unwrap_or("")
        );
        assert_eq!(head, expected);
    }
}

#[test]
fn framing_headers_from_the_request_are_not_repeated() {
    let mut req = Request::new(Method::Post, "real-host", "/b?delete");
    req.body = Body::from(b"xyz".to_vec());
    req.headers = vec![
        ("host".to_owned(), "other".to_owned()),
        ("Content-Length".to_owned(), "999".to_owned()),
        ("content-md5".to_owned(), "abc=".to_owned()),
    ];
    assert_eq!(
        &encode_head(&req)[..],
        &b"POST /b?delete HTTP/1.1\r\nhost: real-host\r\ncontent-length: 3\r\ncontent-md5: abc=\r\n\r\n"[..]
    );
}

#[test]
fn encode_head_into_appends_to_the_callers_buffer() {
    let req = Request::new(Method::Head, "h", "/x");
    let mut out = BytesMut::from(&b"prefix|"[..]);
    encode_head_into(&req, &mut out);
    assert_eq!(&out[..], &b"prefix|HEAD /x HTTP/1.1\r\nhost: h\r\n\r\n"[..]);
}

#[test]
fn check_request_refuses_header_injection_without_echoing_values() {
    let ok = Request::new(Method::Get, "h:1", "/a%20b");
    check_request(&ok).unwrap();

    let mut bad_value = ok.clone();
    bad_value.set_header("authorization", "secret-signature\r\nx-evil: 1");
    let err = check_request(&bad_value).unwrap_err();
    assert!(matches!(err, TransportError::InvalidRequest(_)), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("authorization"), "{text}");
    assert!(!text.contains("secret-signature"), "{text}");

    let mut bad_name = ok.clone();
    bad_name.headers.push(("x bad".to_owned(), "v".to_owned()));
    assert!(matches!(
        check_request(&bad_name),
        Err(TransportError::InvalidRequest(_))
    ));

    let mut te = ok.clone();
    te.set_header("transfer-encoding", "chunked");
    assert!(matches!(
        check_request(&te),
        Err(TransportError::InvalidRequest(_))
    ));

    let mut bad_path = ok.clone();
    bad_path.path = "/a b".to_owned();
    assert!(check_request(&bad_path).is_err());
    bad_path.path = "no-slash".to_owned();
    assert!(check_request(&bad_path).is_err());

    let mut bad_host = ok.clone();
    bad_host.host = "h\r\nx: y".to_owned();
    assert!(check_request(&bad_host).is_err());
}

// ------------------------------------------------------------------------------ parser helpers

/// Feeds `parts` one after the other; returns the parsed response and what is left over.
fn feed_parts(
    method: Method,
    limits: Limits,
    parts: &[&[u8]],
    eof: bool,
) -> Result<(Parsed, BytesMut), TransportError> {
    let mut parser = ResponseParser::new(method, limits);
    let mut buf = BytesMut::new();
    for (i, part) in parts.iter().enumerate() {
        buf.extend_from_slice(part);
        match parser.parse(&mut buf)? {
            Progress::Complete(parsed) => {
                // Whatever comes later stays with the caller.
                for later in &parts[i + 1..] {
                    buf.extend_from_slice(later);
                }
                return Ok((parsed, buf));
            }
            Progress::Partial(need) => assert!(need >= 1),
        }
    }
    if eof {
        let parsed = parser.finish_eof(&mut buf)?;
        return Ok((parsed, buf));
    }
    Err(TransportError::Http(
        "incomplete after all input".to_owned(),
    ))
}

fn feed(method: Method, input: &[u8], eof: bool) -> Result<(Parsed, BytesMut), TransportError> {
    feed_parts(method, Limits::default(), &[input], eof)
}

/// Parses `input` whole, split in two at every byte boundary, and byte by byte; all must agree.
fn parse_every_way(method: Method, input: &[u8], eof: bool) -> (Parsed, Vec<u8>) {
    let (whole, rest) = feed(method, input, eof).expect("whole input parses");
    let rest = rest.to_vec();
    for cut in 0..=input.len() {
        let (a, b) = input.split_at(cut);
        let (parsed, left) = feed_parts(method, Limits::default(), &[a, b], eof)
            .unwrap_or_else(|e| panic!("split at {cut}: {e}"));
        assert_eq!(parsed, whole, "split at {cut}");
        assert_eq!(&left[..], &rest[..], "split at {cut}");
    }
    let bytes: Vec<&[u8]> = input.chunks(1).collect();
    let (parsed, left) = feed_parts(method, Limits::default(), &bytes, eof).expect("byte by byte");
    assert_eq!(parsed, whole);
    assert_eq!(&left[..], &rest[..]);
    (whole, rest)
}

fn header<'a>(p: &'a Parsed, name: &str) -> Option<&'a str> {
    p.response.header(name)
}

// ------------------------------------------------------------------------------ responses

#[test]
fn content_length_response_at_every_split() {
    let input = b"HTTP/1.1 200 OK\r\nETag: \"abc\"\r\nContent-Length: 11\r\nX-Amz-Request-Id: R1\r\n\r\nhello world";
    let (p, rest) = parse_every_way(Method::Get, input, false);
    assert_eq!(p.response.status, 200);
    assert_eq!(&p.response.body[..], b"hello world");
    assert!(p.keep_alive);
    assert!(rest.is_empty());
    assert_eq!(
        p.response.headers,
        vec![
            ("etag".to_owned(), "\"abc\"".to_owned()),
            ("content-length".to_owned(), "11".to_owned()),
            ("x-amz-request-id".to_owned(), "R1".to_owned()),
        ]
    );
}

#[test]
fn chunked_with_extensions_and_trailers_at_every_split() {
    let input = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
        5;name=value;other=\"q\"\r\nhello\r\n\
        1 \r\n \r\n\
        A\r\n0123456789\r\n\
        0;last\r\nx-trailer: 1\r\nx-amz-checksum: abc\r\n\r\n";
    let (p, rest) = parse_every_way(Method::Get, input, false);
    assert_eq!(&p.response.body[..], b"hello 0123456789");
    assert!(p.keep_alive);
    assert!(rest.is_empty());
}

#[test]
fn chunked_without_trailers_leaves_the_next_bytes() {
    let input = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nNEXT";
    let (p, rest) = parse_every_way(Method::Get, input, false);
    assert_eq!(&p.response.body[..], b"abc");
    assert_eq!(rest, b"NEXT");
}

#[test]
fn head_response_has_no_body_despite_content_length() {
    let input = b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\nETag: \"e\"\r\n\r\n";
    let (p, rest) = parse_every_way(Method::Head, input, false);
    assert!(p.response.body.is_empty());
    assert_eq!(header(&p, "content-length"), Some("5000"));
    assert!(p.keep_alive);
    assert!(rest.is_empty());
}

#[test]
fn no_content_and_not_modified_have_no_body() {
    for status in ["204 No Content", "304 Not Modified"] {
        let input = format!("HTTP/1.1 {status}\r\nContent-Length: 10\r\n\r\n");
        let (p, _) = parse_every_way(Method::Get, input.as_bytes(), false);
        assert!(p.response.body.is_empty());
    }
}

#[test]
fn interim_responses_are_skipped() {
    let input = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n\
        HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    let (p, _) = parse_every_way(Method::Put, input, false);
    assert_eq!(p.response.status, 200);
    assert_eq!(&p.response.body[..], b"ok");
    assert_eq!(header(&p, "link"), None);
}

#[test]
fn switching_protocols_is_an_error() {
    let err = feed(
        Method::Get,
        b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
        false,
    )
    .unwrap_err();
    assert!(matches!(err, TransportError::Http(_)), "{err:?}");
}

#[test]
fn body_delimited_by_close() {
    let input = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall of this until EOF";
    let (p, rest) = parse_every_way(Method::Get, input, true);
    assert_eq!(&p.response.body[..], b"all of this until EOF");
    assert!(!p.keep_alive);
    assert!(rest.is_empty());
}

#[test]
fn unknown_transfer_coding_reads_until_close() {
    let input = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nxyz";
    let (p, _) = parse_every_way(Method::Get, input, true);
    assert_eq!(&p.response.body[..], b"xyz");
    assert!(!p.keep_alive);
}

#[test]
fn transfer_encoding_wins_over_content_length_and_closes() {
    let input = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n";
    let (p, _) = parse_every_way(Method::Get, input, false);
    assert_eq!(&p.response.body[..], b"ab");
    assert!(!p.keep_alive);
}

#[test]
fn keep_alive_rules() {
    let cases: [(&[u8], bool); 5] = [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", true),
        (
            b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            false,
        ),
        (
            b"HTTP/1.1 200 OK\r\nConnection: foo, Close\r\nContent-Length: 0\r\n\r\n",
            false,
        ),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false),
        (
            b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
            true,
        ),
    ];
    for (input, keep) in cases {
        let (p, _) = feed(Method::Get, input, false).unwrap();
        assert_eq!(p.keep_alive, keep, "{}", String::from_utf8_lossy(input));
    }
}

#[test]
fn bare_lf_line_endings_in_the_head_are_accepted() {
    let (p, _) = parse_every_way(
        Method::Get,
        b"HTTP/1.1 404 Not Found\nContent-Length: 3\n\nabc",
        false,
    );
    assert_eq!(p.response.status, 404);
    assert_eq!(&p.response.body[..], b"abc");
}

#[test]
fn empty_lines_before_the_status_line_are_skipped() {
    for prefix in ["\n\n", "\r\n\r\n", "\r\n\n\r\n\r\n", "\n"] {
        let input = format!("{prefix}HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        let (p, _) = parse_every_way(Method::Get, input.as_bytes(), false);
        assert_eq!(&p.response.body[..], b"ok");
    }
    // Only empty lines: more bytes are needed (and the parser does not spin).
    let mut parser = ResponseParser::new(Method::Get, Limits::default());
    let mut buf = BytesMut::from(&b"\n\n\r\n\r\n\n"[..]);
    assert_eq!(parser.parse(&mut buf).unwrap(), Progress::Partial(1));
    assert_eq!(parser.parse(&mut buf).unwrap(), Progress::Partial(1));
}

#[test]
fn body_is_split_off_the_read_buffer_not_copied() {
    let mut buf = BytesMut::with_capacity(4096);
    buf.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n");
    buf.extend_from_slice(&[7u8; 1000]);
    let start = buf.as_ptr() as usize;
    let end = start + buf.len();
    let mut parser = ResponseParser::new(Method::Get, Limits::default());
    let Progress::Complete(p) = parser.parse(&mut buf).unwrap() else {
        panic!("complete input");
    };
    let body = p.response.body.as_ptr() as usize;
    assert!(body >= start && body + 1000 <= end, "body was copied");
}

#[test]
fn single_chunk_body_is_not_copied_either() {
    let mut buf = BytesMut::with_capacity(4096);
    buf.extend_from_slice(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3e8\r\n");
    buf.extend_from_slice(&[9u8; 1000]);
    buf.extend_from_slice(b"\r\n0\r\n\r\n");
    let start = buf.as_ptr() as usize;
    let end = start + buf.len();
    let mut parser = ResponseParser::new(Method::Get, Limits::default());
    let Progress::Complete(p) = parser.parse(&mut buf).unwrap() else {
        panic!("complete input");
    };
    let body = p.response.body.as_ptr() as usize;
    assert_eq!(p.response.body.len(), 1000);
    assert!(body >= start && body + 1000 <= end, "body was copied");
}

#[test]
fn partial_says_how_much_body_is_missing() {
    let mut parser = ResponseParser::new(Method::Get, Limits::default());
    let mut buf = BytesMut::from(&b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789"[..]);
    assert_eq!(parser.parse(&mut buf).unwrap(), Progress::Partial(90));
    assert!(parser.head_complete());
}

#[test]
fn eof_before_the_end_is_closed() {
    let mut parser = ResponseParser::new(Method::Get, Limits::default());
    let mut buf = BytesMut::from(&b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123"[..]);
    assert!(matches!(parser.parse(&mut buf), Ok(Progress::Partial(_))));
    assert!(matches!(
        parser.finish_eof(&mut buf),
        Err(TransportError::Closed)
    ));
    let mut parser = ResponseParser::new(Method::Get, Limits::default());
    assert!(matches!(
        parser.finish_eof(&mut BytesMut::new()),
        Err(TransportError::Closed)
    ));
}

// ------------------------------------------------------------------------------ limits, errors

fn http_error(result: Result<(Parsed, BytesMut), TransportError>) -> String {
    match result {
        Err(TransportError::Http(msg)) => msg,
        other => panic!("expected an HTTP error, got {other:?}"),
    }
}

#[test]
fn head_larger_than_the_limit_is_refused() {
    let limits = Limits {
        max_head_bytes: 256,
        ..Limits::default()
    };
    let mut input = b"HTTP/1.1 200 OK\r\n".to_vec();
    while input.len() < 300 {
        input.extend_from_slice(b"x-filler: aaaaaaaaaaaaaaaa\r\n");
    }
    // Without the end of the head: refused once more than the limit is buffered.
    let msg = http_error(feed_parts(Method::Get, limits, &[&input], false));
    assert!(msg.contains("256"), "{msg}");
    // With it.
    input.extend_from_slice(b"\r\n");
    let msg = http_error(feed_parts(Method::Get, limits, &[&input], false));
    assert!(msg.contains("head larger"), "{msg}");
}

/// An error response announcing 60 MiB: before, the parser asked for the whole announced
/// length at once (the connection reserved it) and kept it all. Now it asks for no more than
/// `max_error_body_bytes`, keeps that much and marks the connection unfit for reuse; a
/// success response of the same size is refused as before.
#[test]
fn an_error_body_is_read_only_up_to_the_error_limit() {
    let limits = Limits::default();
    let head = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 62914560\r\n\r\n";
    let mut parser = ResponseParser::new(Method::Put, limits);
    let mut buf = BytesMut::from(&head[..]);
    match parser.parse(&mut buf).unwrap() {
        Progress::Partial(need) => assert!(
            need as u64 <= limits.max_error_body_bytes,
            "asked for {need} bytes"
        ),
        Progress::Complete(p) => panic!("complete without a body: {p:?}"),
    }
    let doc = b"<Error><Code>InternalError</Code>";
    buf.extend_from_slice(doc);
    buf.extend_from_slice(&vec![b'x'; 100 * 1024]);
    let Progress::Complete(parsed) = parser.parse(&mut buf).unwrap() else {
        panic!("the first 64 KiB complete it");
    };
    assert_eq!(parsed.response.status, 500);
    assert_eq!(
        parsed.response.body.len() as u64,
        limits.max_error_body_bytes
    );
    assert!(parsed.response.body.starts_with(doc));
    assert!(!parsed.keep_alive, "the rest of the body is never read");

    // Delimited by the close of the connection: cut the same way.
    let mut input = b"HTTP/1.1 403 Forbidden\r\n\r\n".to_vec();
    input.extend_from_slice(&vec![b'y'; 200 * 1024]);
    let (parsed, _) = feed_parts(Method::Get, limits, &[&input], true).unwrap();
    assert_eq!(parsed.response.status, 403);
    assert_eq!(
        parsed.response.body.len() as u64,
        limits.max_error_body_bytes
    );

    // Chunked beyond the limit: refused, naming the status.
    let mut input = b"HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..100 {
        input.extend_from_slice(b"400\r\n");
        input.extend_from_slice(&[b'z'; 0x400]);
        input.extend_from_slice(b"\r\n");
    }
    let msg = http_error(feed_parts(Method::Get, limits, &[&input], false));
    assert!(msg.contains("error response 500"), "{msg}");

    // A success body is bounded by the request's own limit.
    let mut parser = ResponseParser::new(Method::Put, limits).with_body_limit(Some(1000));
    let mut buf = BytesMut::from(&b"HTTP/1.1 200 OK\r\nContent-Length: 1001\r\n\r\n"[..]);
    let msg = match parser.parse(&mut buf) {
        Err(TransportError::Http(m)) => m,
        other => panic!("{other:?}"),
    };
    assert!(msg.contains("1000"), "{msg}");
}

#[test]
fn too_many_headers_is_refused() {
    let limits = Limits {
        max_headers: 4,
        ..Limits::default()
    };
    let input =
        b"HTTP/1.1 200 OK\r\na: 1\r\nb: 1\r\nc: 1\r\nd: 1\r\ne: 1\r\nContent-Length: 0\r\n\r\n";
    let msg = http_error(feed_parts(Method::Get, limits, &[input], false));
    assert!(msg.contains("more than 4"), "{msg}");
}

#[test]
fn body_larger_than_the_limit_is_refused_before_it_arrives() {
    let limits = Limits {
        max_body_bytes: 1000,
        ..Limits::default()
    };
    let msg = http_error(feed_parts(
        Method::Get,
        limits,
        &[b"HTTP/1.1 200 OK\r\nContent-Length: 1001\r\n\r\n"],
        false,
    ));
    assert!(msg.contains("1000"), "{msg}");
    let msg = http_error(feed_parts(
        Method::Get,
        limits,
        &[
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3e8\r\n",
            &[0u8; 1000],
            b"\r\n1\r\n",
        ],
        false,
    ));
    assert!(msg.contains("1000"), "{msg}");
    let msg = http_error(feed_parts(
        Method::Get,
        limits,
        &[b"HTTP/1.1 200 OK\r\n\r\n", &[0u8; 1001]],
        false,
    ));
    assert!(msg.contains("1000"), "{msg}");
}

#[test]
fn malformed_responses_are_errors() {
    let cases: &[&[u8]] = &[
        b"HTTP/1.1 2OO OK\r\n\r\n",
        b"HTTX/1.1 200 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nabcde",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nabcdef",
        b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n11111111111111111\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nno colon here\r\n\r\n",
    ];
    for input in cases {
        let result = feed(Method::Get, input, false);
        assert!(
            matches!(result, Err(TransportError::Http(_))),
            "{:?} gave {result:?}",
            String::from_utf8_lossy(input)
        );
    }
}

#[test]
fn long_chunk_size_line_is_refused() {
    let mut input = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;".to_vec();
    input.extend(std::iter::repeat_n(b'e', 5000));
    let msg = http_error(feed(Method::Get, &input, false));
    assert!(msg.contains("chunk-size line"), "{msg}");
}

#[test]
fn parser_refuses_to_be_called_after_completion() {
    let mut parser = ResponseParser::new(Method::Get, Limits::default());
    let mut buf = BytesMut::from(&b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"[..]);
    assert!(matches!(parser.parse(&mut buf), Ok(Progress::Complete(_))));
    assert!(parser.parse(&mut buf).is_err());
}

// ------------------------------------------------------------------------------ properties

fn small_limits() -> Limits {
    Limits {
        max_head_bytes: 2048,
        max_headers: 16,
        max_body_bytes: 4096,
        max_error_body_bytes: 1024,
    }
}

/// Encodes `body` as chunks of the given sizes (the rest in a last chunk), with extensions on
/// some of them.
fn chunked(body: &[u8], sizes: &[usize]) -> Vec<u8> {
    let mut out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    let mut rest = body;
    for (i, size) in sizes.iter().enumerate() {
        let n = (*size).min(rest.len());
        if n == 0 {
            break;
        }
        let ext = if i % 2 == 0 { ";ext=1" } else { "" };
        out.extend_from_slice(format!("{n:x}{ext}\r\n").as_bytes());
        out.extend_from_slice(&rest[..n]);
        out.extend_from_slice(b"\r\n");
        rest = &rest[n..];
    }
    if !rest.is_empty() {
        out.extend_from_slice(format!("{:X}\r\n", rest.len()).as_bytes());
        out.extend_from_slice(rest);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\nx-t: v\r\n\r\n");
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Arbitrary bytes in arbitrary pieces: an answer or an error, never a panic, and the
    /// buffer never holds much more than the limits allow.
    #[test]
    fn arbitrary_bytes_never_panic(
        data in proptest::collection::vec(any::<u8>(), 0..3000),
        cuts in proptest::collection::vec(0usize..3000, 0..8),
        head in any::<bool>(),
    ) {
        let method = if head { Method::Head } else { Method::Get };
        let limits = small_limits();
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(data.len())).collect();
        cuts.push(data.len());
        cuts.sort_unstable();
        let mut parser = ResponseParser::new(method, limits);
        let mut buf = BytesMut::new();
        let mut from = 0;
        for cut in cuts {
            buf.extend_from_slice(&data[from..cut]);
            from = cut;
            match parser.parse(&mut buf) {
                Ok(Progress::Partial(need)) => {
                    prop_assert!(need >= 1);
                    prop_assert!(buf.len() <= limits.max_head_bytes + limits.max_body_bytes as usize + 4096 + 3000);
                }
                Ok(Progress::Complete(p)) => {
                    prop_assert!(p.response.body.len() as u64 <= limits.max_body_bytes);
                    return Ok(());
                }
                Err(_) => return Ok(()),
            }
        }
        let _ = parser.finish_eof(&mut buf);
    }

    /// Bytes from the alphabet of HTTP framing (line ends, digits, separators), which random
    /// bytes rarely hit: never a panic or a hang.
    #[test]
    fn framing_alphabet_never_panics(
        data in proptest::collection::vec(
            prop::sample::select(&b"\r\n\r\n:; 0aF1HTTP/.12"[..]),
            0..400,
        ),
        cut in 0usize..400,
    ) {
        let mut input = b"HTTP/1.1 200 OK\r\n".to_vec();
        input.extend_from_slice(&data);
        let cut = cut.min(input.len());
        let _ = feed_parts(Method::Get, small_limits(), &[&data[..cut.min(data.len())], &data[cut.min(data.len())..]], true);
        let _ = feed_parts(Method::Get, small_limits(), &[&input[..cut], &input[cut..]], true);
        let _ = feed_parts(Method::Get, small_limits(), &[b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", &data], true);
    }

    /// Arbitrary bytes after a valid head, in every framing.
    #[test]
    fn arbitrary_bodies_never_panic(
        framing in 0usize..3,
        data in proptest::collection::vec(any::<u8>(), 0..2000),
        cut in 0usize..2000,
    ) {
        let head: &[u8] = match framing {
            0 => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            1 => b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n",
            _ => b"HTTP/1.1 200 OK\r\n\r\n",
        };
        let mut input = head.to_vec();
        input.extend_from_slice(&data);
        let cut = cut.min(input.len());
        let _ = feed_parts(Method::Get, small_limits(), &[&input[..cut], &input[cut..]], true);
    }

    /// A chunked body, chunked any way and delivered in any pieces, decodes to itself.
    #[test]
    fn chunked_round_trip(
        body in proptest::collection::vec(any::<u8>(), 0..3000),
        sizes in proptest::collection::vec(1usize..700, 0..10),
        cuts in proptest::collection::vec(0usize..5000, 0..6),
    ) {
        let input = chunked(&body, &sizes);
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(input.len())).collect();
        cuts.push(input.len());
        cuts.sort_unstable();
        let mut parts: Vec<&[u8]> = Vec::new();
        let mut from = 0;
        for cut in cuts {
            parts.push(&input[from..cut]);
            from = cut;
        }
        let (p, rest) = feed_parts(Method::Get, Limits::default(), &parts, false).unwrap();
        prop_assert_eq!(&p.response.body[..], &body[..]);
        prop_assert!(rest.is_empty());
    }
}
