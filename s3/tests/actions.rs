//! Endpoints, request options, and every action: the request it builds (method, host, path,
//! query, headers, for both addressing styles) and how it reads S3's answers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use spillway_s3::actions::{
    self, abort_multipart_upload, complete_multipart_upload, create_multipart_upload,
    delete_object, get_object, head_bucket, head_object, list_multipart_uploads, put_object,
    upload_part,
};
use spillway_s3::endpoint::{AddressingStyle, Endpoint, Scheme};
use spillway_s3::options::{CannedAcl, Checksum, ObjectOptions, Sse, Target};
use spillway_s3::{Body, Error, Method, Request, Response};

use complete_multipart_upload::CompletedPart;
use list_multipart_uploads::ListMultipartUploadsArgs;

fn data(name: &str) -> Bytes {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/xml")
        .join(name);
    Bytes::from(std::fs::read(p).unwrap())
}

fn response(status: u16, headers: &[(&str, &str)], body: impl Into<Bytes>) -> Response {
    Response {
        status,
        headers: headers
            .iter()
            .map(|(n, v)| ((*n).to_string(), (*v).to_string()))
            .collect(),
        body: body.into(),
    }
}

fn s3_err(e: Error) -> spillway_s3::S3Error {
    match e {
        Error::S3(e) => *e,
        other => panic!("expected an S3 error, got {other:?}"),
    }
}

fn config_msg<T: std::fmt::Debug>(r: Result<T, Error>) -> String {
    match r {
        Err(Error::Config(m)) => m,
        other => panic!("expected a configuration error, got {other:?}"),
    }
}

/// AWS, virtual-hosted style.
fn aws() -> Endpoint {
    Endpoint::aws("eu-west-1")
}

/// MinIO-like, path style chosen automatically.
fn minio() -> Endpoint {
    Endpoint::parse("http://127.0.0.1:9000", "us-east-1", None).unwrap()
}

fn no_options() -> ObjectOptions {
    ObjectOptions::default()
}

// ---------------------------------------------------------------------------------------------
// Endpoint.

#[test]
fn aws_endpoint() {
    let e = aws();
    assert_eq!(e.scheme, Scheme::Https);
    assert_eq!(e.host, "s3.eu-west-1.amazonaws.com");
    assert_eq!(e.port, 443);
    assert_eq!(e.region, "eu-west-1");
    assert_eq!(e.style, AddressingStyle::VirtualHosted);
    assert!(e.is_aws());
    assert_eq!(e.host_header("logs"), "logs.s3.eu-west-1.amazonaws.com");
}

#[test]
fn parse_chooses_the_style_from_the_host() {
    let e = Endpoint::parse("https://s3.us-west-2.amazonaws.com", "us-west-2", None).unwrap();
    assert_eq!((e.port, e.style), (443, AddressingStyle::VirtualHosted));
    let e = Endpoint::parse(
        "https://s3.cn-north-1.amazonaws.com.cn/",
        "cn-north-1",
        None,
    )
    .unwrap();
    assert_eq!(e.style, AddressingStyle::VirtualHosted);

    let e = minio();
    assert_eq!(
        (e.scheme, e.host.as_str(), e.port),
        (Scheme::Http, "127.0.0.1", 9000)
    );
    assert_eq!(e.style, AddressingStyle::Path);
    assert_eq!(e.host_header("logs"), "127.0.0.1:9000");

    let e = Endpoint::parse("https://abc123.r2.cloudflarestorage.com", "auto", None).unwrap();
    assert_eq!((e.port, e.style), (443, AddressingStyle::Path));
    assert_eq!(e.host_header("logs"), "abc123.r2.cloudflarestorage.com");

    // Configured style wins.
    let e = Endpoint::parse(
        "http://minio.local:9000",
        "us-east-1",
        Some(AddressingStyle::VirtualHosted),
    )
    .unwrap();
    assert_eq!(e.host_header("logs"), "logs.minio.local:9000");
    let e = Endpoint::parse(
        "https://s3.eu-west-1.amazonaws.com",
        "eu-west-1",
        Some(AddressingStyle::Path),
    )
    .unwrap();
    assert_eq!(e.host_header("logs"), "s3.eu-west-1.amazonaws.com");
}

#[test]
fn parse_ports_case_and_ipv6() {
    let e = Endpoint::parse("HTTP://Garage.Example.COM:80", "garage", None).unwrap();
    assert_eq!((e.host.as_str(), e.port), ("garage.example.com", 80));
    assert_eq!(
        e.host_header("b"),
        "garage.example.com",
        "default port left out"
    );
    let e = Endpoint::parse("https://ceph.example.com:443", "default", None).unwrap();
    assert_eq!(e.authority(), "ceph.example.com");
    let e = Endpoint::parse("https://ceph.example.com:8443", "default", None).unwrap();
    assert_eq!(e.authority(), "ceph.example.com:8443");
    let e = Endpoint::parse("http://[::1]:9000", "us-east-1", None).unwrap();
    assert_eq!((e.host.as_str(), e.port), ("::1", 9000));
    assert_eq!(e.host_header("b"), "[::1]:9000");
    let e = Endpoint::parse(
        "http://[::1]",
        "us-east-1",
        Some(AddressingStyle::VirtualHosted),
    )
    .unwrap();
    assert_eq!(
        e.host_header("bucket"),
        "[::1]",
        "an IP cannot take a bucket label"
    );
}

#[test]
fn parse_errors_say_what_is_wrong() {
    assert_eq!(
        Endpoint::parse("ftp://x", "us-east-1", None)
            .unwrap_err()
            .to_string(),
        "configuration: endpoint \"ftp://x\": scheme must be http or https"
    );
    let cases = [
        ("s3.amazonaws.com", "scheme"),
        ("http://", "host is empty"),
        ("http://:9000", "host is empty"),
        ("http://host/bucket", "path"),
        ("http://host?x=1", "path, query"),
        ("http://host:0", "port"),
        ("http://host:99999", "port"),
        ("http://host:port", "port"),
        ("http://user:pw@host", "credentials"),
        ("http://ho st", "host may contain"),
        ("http://[::1", "']'"),
    ];
    for (url, want) in cases {
        let m = config_msg(Endpoint::parse(url, "us-east-1", None));
        assert!(m.contains(want), "{url}: {m}");
        assert!(m.contains(url), "the message names the endpoint: {m}");
    }
    assert!(config_msg(Endpoint::parse("http://h", "", None)).contains("region is empty"));
    assert!(config_msg(Endpoint::parse("http://h", "us/east", None)).contains("\"us/east\""));
}

#[test]
fn request_paths_in_both_styles() {
    let r = aws().request(Method::Get, "logs", Some("a b/c+d/ü"));
    assert_eq!(r.host, "logs.s3.eu-west-1.amazonaws.com");
    assert_eq!(r.path, "/a%20b/c%2Bd/%C3%BC", "keys keep '/'");
    let r = minio().request(Method::Get, "logs", Some("a b/c+d/ü"));
    assert_eq!(r.host, "127.0.0.1:9000");
    assert_eq!(r.path, "/logs/a%20b/c%2Bd/%C3%BC");
    assert_eq!(aws().request(Method::Head, "logs", None).path, "/");
    assert_eq!(minio().request(Method::Head, "logs", None).path, "/logs");
    assert_eq!(
        aws().request(Method::Get, "logs", Some("/lead")).path,
        "//lead"
    );
}

#[test]
fn buckets_that_cannot_be_virtual_hosted_fall_back_to_path_style() {
    let e = aws();
    for bucket in [
        "my.bucket",
        "MyBucket",
        "under_score",
        "ab",
        "-dash",
        "dash-",
    ] {
        assert_eq!(e.style_for(bucket), AddressingStyle::Path, "{bucket}");
        let r = e.request(Method::Get, bucket, Some("k"));
        assert_eq!(r.host, "s3.eu-west-1.amazonaws.com", "{bucket}");
        assert_eq!(r.path, format!("/{bucket}/k"));
    }
    // Dots are fine over http (no wildcard certificate to match).
    let e = Endpoint::parse(
        "http://s3.example.com",
        "us-east-1",
        Some(AddressingStyle::VirtualHosted),
    )
    .unwrap();
    assert_eq!(e.style_for("my.bucket"), AddressingStyle::VirtualHosted);
    assert_eq!(e.host_header("my.bucket"), "my.bucket.s3.example.com");
}

#[test]
fn check_bucket() {
    let e = aws();
    assert_eq!(
        e.check_bucket("logs").unwrap(),
        AddressingStyle::VirtualHosted
    );
    assert_eq!(e.check_bucket("my.logs").unwrap(), AddressingStyle::Path);
    assert!(config_msg(e.check_bucket("")).contains("empty"));
    assert!(config_msg(e.check_bucket("a/b")).contains("'/'"));
    assert!(config_msg(e.check_bucket("a b")).contains("' '"));
    assert!(config_msg(e.check_bucket(&"a".repeat(256))).contains("255"));
}

#[test]
fn endpoint_debug() {
    assert_eq!(
        format!("{:?}", minio()),
        "Endpoint(http://127.0.0.1:9000 us-east-1 Path)"
    );
}

// ---------------------------------------------------------------------------------------------
// Options.

fn key32() -> [u8; 32] {
    std::array::from_fn(|i| i as u8)
}

fn full_options() -> ObjectOptions {
    ObjectOptions {
        content_type: Some("application/x-ndjson".into()),
        content_encoding: Some("zstd".into()),
        storage_class: Some("STANDARD_IA".into()),
        sse: Some(Sse::CustomerKey { key: key32() }),
        acl: Some(CannedAcl::BucketOwnerFullControl),
        metadata: vec![
            ("Partition".into(), "7".into()),
            ("first-offset".into(), "1000".into()),
        ],
        tags: vec![
            ("team".into(), "data eng".into()),
            ("k&v".into(), "a=b/c".into()),
        ],
        content_md5: true,
        checksum: Checksum::None,
        condition: None,
    }
}

const SSE_C: [(&str, &str); 3] = [
    ("x-amz-server-side-encryption-customer-algorithm", "AES256"),
    (
        "x-amz-server-side-encryption-customer-key",
        "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
    ),
    (
        "x-amz-server-side-encryption-customer-key-md5",
        "tP/LI3N87DFaSk0aoqYgzg==",
    ),
];

fn names(req: &Request) -> Vec<&str> {
    let mut n: Vec<&str> = req.headers.iter().map(|(n, _)| n.as_str()).collect();
    n.sort_unstable();
    n
}

#[test]
fn options_on_put_object() {
    let body = Body::from_chunks(vec![
        Bytes::from_static(b"part one"),
        Bytes::from_static(b"|"),
        Bytes::from_static(b"part two"),
    ]);
    let req = put_object::request(&minio(), "b", "k", body, &full_options()).unwrap();
    assert_eq!(req.header("content-type"), Some("application/x-ndjson"));
    assert_eq!(req.header("content-encoding"), Some("zstd"));
    assert_eq!(req.header("x-amz-storage-class"), Some("STANDARD_IA"));
    assert_eq!(req.header("x-amz-acl"), Some("bucket-owner-full-control"));
    assert_eq!(
        req.header("x-amz-meta-partition"),
        Some("7"),
        "names lower case"
    );
    assert_eq!(req.header("x-amz-meta-first-offset"), Some("1000"));
    assert_eq!(
        req.header("x-amz-tagging"),
        Some("team=data%20eng&k%26v=a%3Db%2Fc")
    );
    for (n, v) in SSE_C {
        assert_eq!(req.header(n), Some(v), "{n}");
    }
    assert_eq!(req.header("content-md5"), Some("3P02QoKomZM8jUbA8ZEG+A=="));
    assert_eq!(
        req.header("x-amz-server-side-encryption"),
        None,
        "SSE-C has its own headers"
    );
    assert_eq!(req.body.chunks().len(), 3, "the body is not joined");
}

#[test]
fn options_on_create_multipart_upload_part_complete_and_reads() {
    let o = full_options();
    let create = create_multipart_upload::request(&aws(), "logs", "k", &o).unwrap();
    assert_eq!(
        names(&create),
        [
            "content-encoding",
            "content-type",
            "x-amz-acl",
            "x-amz-meta-first-offset",
            "x-amz-meta-partition",
            "x-amz-server-side-encryption-customer-algorithm",
            "x-amz-server-side-encryption-customer-key",
            "x-amz-server-side-encryption-customer-key-md5",
            "x-amz-storage-class",
            "x-amz-tagging",
        ],
        "no Content-MD5 on an empty body"
    );

    let part = upload_part::request(
        &aws(),
        "logs",
        "k",
        "up",
        1,
        Body::from(b"part one|part two".to_vec()),
        &o,
    )
    .unwrap();
    assert_eq!(
        names(&part),
        [
            "content-md5",
            "x-amz-server-side-encryption-customer-algorithm",
            "x-amz-server-side-encryption-customer-key",
            "x-amz-server-side-encryption-customer-key-md5",
        ]
    );
    assert_eq!(part.header("content-md5"), Some("3P02QoKomZM8jUbA8ZEG+A=="));

    let parts = [CompletedPart::from((1, "\"e\"".to_string()))];
    let complete =
        complete_multipart_upload::request(&aws(), "logs", "k", "up", &parts, &o).unwrap();
    assert_eq!(
        names(&complete),
        [
            "content-type",
            "x-amz-server-side-encryption-customer-algorithm",
            "x-amz-server-side-encryption-customer-key",
            "x-amz-server-side-encryption-customer-key-md5",
        ]
    );
    assert_eq!(complete.header("content-type"), Some("application/xml"));

    for req in [
        head_object::request(&aws(), "logs", "k", &o).unwrap(),
        get_object::request(&aws(), "logs", "k", None, &o).unwrap(),
    ] {
        assert_eq!(
            names(&req),
            [
                "x-amz-server-side-encryption-customer-algorithm",
                "x-amz-server-side-encryption-customer-key",
                "x-amz-server-side-encryption-customer-key-md5",
            ]
        );
    }
}

#[test]
fn sse_s3_and_kms() {
    let mut o = ObjectOptions {
        sse: Some(Sse::S3),
        ..no_options()
    };
    let mut req = Request::new(Method::Put, "h", "/k");
    o.apply(&mut req, Target::PutObject).unwrap();
    assert_eq!(
        req.headers,
        [("x-amz-server-side-encryption".into(), "AES256".into())]
    );
    let mut req = Request::new(Method::Put, "h", "/k");
    o.apply(&mut req, Target::UploadPart).unwrap();
    assert!(
        req.headers.is_empty(),
        "SSE-S3 is decided at creation, not per part"
    );

    o.sse = Some(Sse::Kms {
        key_id: Some("arn:aws:kms:eu-west-1:111122223333:key/abcd".into()),
    });
    let mut req = Request::new(Method::Post, "h", "/k");
    o.apply(&mut req, Target::CreateMultipartUpload).unwrap();
    assert_eq!(req.header("x-amz-server-side-encryption"), Some("aws:kms"));
    assert_eq!(
        req.header("x-amz-server-side-encryption-aws-kms-key-id"),
        Some("arn:aws:kms:eu-west-1:111122223333:key/abcd")
    );
    o.sse = Some(Sse::Kms { key_id: None });
    let mut req = Request::new(Method::Post, "h", "/k");
    o.apply(&mut req, Target::CreateMultipartUpload).unwrap();
    assert_eq!(req.headers.len(), 1);
}

#[test]
fn customer_key_is_redacted() {
    let o = full_options();
    let dbg = format!("{o:?} {:?}", Sse::CustomerKey { key: key32() });
    assert!(dbg.contains("<redacted>"), "{dbg}");
    assert!(!dbg.contains("AAECAwQF"), "{dbg}");
    assert!(!dbg.contains("0, 1, 2, 3"), "{dbg}");
    let req = put_object::request(&aws(), "logs", "k", Body::empty(), &o).unwrap();
    let dbg = format!("{req:?}");
    assert!(!dbg.contains("AAECAwQF"), "{dbg}");
}

/// CRC-32C on the wire: the checksum of each body (the standard check value of "123456789" is
/// 0xE3069283), the algorithm declared on CreateMultipartUpload, each part's checksum listed on
/// CompleteMultipartUpload; and a body the store found changed is worth sending again.
#[test]
fn crc32c_checksums_go_on_every_body_and_on_complete() {
    let o = ObjectOptions {
        checksum: Checksum::Crc32c,
        ..ObjectOptions::default()
    };
    let body = Body::from_chunks(vec![
        Bytes::from_static(b"1234"),
        Bytes::from_static(b"56789"),
    ]);
    let put = put_object::request(&minio(), "b", "k", body.clone(), &o).unwrap();
    assert_eq!(put.header("x-amz-checksum-crc32c"), Some("4waSgw=="));
    let part = upload_part::request(&minio(), "b", "k", "up1", 3, body, &o).unwrap();
    assert_eq!(part.header("x-amz-checksum-crc32c"), Some("4waSgw=="));
    let create = create_multipart_upload::request(&minio(), "b", "k", &o).unwrap();
    assert_eq!(create.header("x-amz-checksum-algorithm"), Some("CRC32C"));
    let parts = [CompletedPart {
        part_number: 3,
        etag: "\"e\"".into(),
        checksum_crc32c: Some("4waSgw==".into()),
    }];
    let xml = complete_multipart_upload::body(&parts).unwrap();
    assert!(
        xml.contains("<Part><PartNumber>3</PartNumber><ETag>\"e\"</ETag><ChecksumCRC32C>4waSgw==</ChecksumCRC32C></Part>"),
        "{xml}"
    );
    let none =
        put_object::request(&minio(), "b", "k", Body::empty(), &ObjectOptions::default()).unwrap();
    assert_eq!(none.header("x-amz-checksum-crc32c"), None);

    let bad_digest = Response {
        status: 400,
        headers: Vec::new(),
        body: Bytes::from_static(b"<Error><Code>BadDigest</Code></Error>"),
    };
    let e = put_object::parse(bad_digest).unwrap_err();
    assert!(e.is_retryable(), "{e}");
}

#[test]
fn options_are_validated() {
    let bad = |o: ObjectOptions| config_msg(o.validate());
    let meta = |n: &str, v: &str| ObjectOptions {
        metadata: vec![(n.into(), v.into())],
        ..no_options()
    };
    assert!(bad(meta("bad name", "v")).contains("\"bad name\""));
    assert!(bad(meta("", "v")).contains("metadata name"));
    assert!(bad(meta("k", "line\nbreak")).contains("not allowed"));
    assert!(bad(meta("k", "ünï")).contains("printable ASCII"));
    assert!(bad(meta("k", " padded")).contains("whitespace"));
    assert!(bad(meta("k", &"v".repeat(3000))).contains("2048"));
    assert!(
        bad(ObjectOptions {
            metadata: vec![("Key".into(), "1".into()), ("key".into(), "2".into())],
            ..no_options()
        })
        .contains("twice")
    );
    let tags = |t: Vec<(String, String)>| ObjectOptions {
        tags: t,
        ..no_options()
    };
    assert!(
        bad(tags(
            (0..11).map(|i| (format!("k{i}"), "v".into())).collect()
        ))
        .contains("10")
    );
    assert!(bad(tags(vec![(String::new(), "v".into())])).contains("tag key"));
    assert!(bad(tags(vec![("k".repeat(129), "v".into())])).contains("128"));
    assert!(bad(tags(vec![("k".into(), "v".repeat(257))])).contains("256"));
    assert!(
        bad(tags(vec![
            ("k".into(), "1".into()),
            ("k".into(), "2".into())
        ]))
        .contains("twice")
    );
    assert!(
        bad(ObjectOptions {
            storage_class: Some("standard ia".into()),
            ..no_options()
        })
        .contains("storage class")
    );
    assert!(
        bad(ObjectOptions {
            content_type: Some("text/plain\r\nx-evil: 1".into()),
            ..no_options()
        })
        .contains("content type")
    );
    assert!(
        bad(ObjectOptions {
            sse: Some(Sse::Kms {
                key_id: Some(String::new())
            }),
            ..no_options()
        })
        .contains("KMS")
    );
    // apply refuses the same things, and builders pass the error on.
    let r = put_object::request(&aws(), "logs", "k", Body::empty(), &meta("bad name", "v"));
    assert!(config_msg(r).contains("bad name"));
    assert!(full_options().validate().is_ok());
}

// ---------------------------------------------------------------------------------------------
// Arguments common to every action.

#[test]
fn keys_and_buckets_are_checked_by_every_object_action() {
    let o = no_options();
    let e = aws();
    let results: Vec<(&str, Result<Request, Error>)> = vec![
        (
            "put",
            put_object::request(&e, "logs", "", Body::empty(), &o),
        ),
        (
            "create",
            create_multipart_upload::request(&e, "logs", "", &o),
        ),
        (
            "part",
            upload_part::request(&e, "logs", "", "u", 1, Body::empty(), &o),
        ),
        (
            "complete",
            complete_multipart_upload::request(
                &e,
                "logs",
                "",
                "u",
                &[CompletedPart::from((1, "e".to_string()))],
                &o,
            ),
        ),
        (
            "abort",
            abort_multipart_upload::request(&e, "logs", "", "u"),
        ),
        ("get", get_object::request(&e, "logs", "", None, &o)),
        ("head", head_object::request(&e, "logs", "", &o)),
        ("delete", delete_object::request(&e, "logs", "")),
    ];
    for (what, r) in results {
        assert!(config_msg(r).contains("key is empty"), "{what}");
    }
    let long = "k".repeat(1025);
    assert!(config_msg(delete_object::request(&e, "logs", &long)).contains("1024"));
    assert!(delete_object::request(&e, "logs", &"k".repeat(1024)).is_ok());
    assert!(config_msg(delete_object::request(&e, "", "k")).contains("bucket"));
    assert!(config_msg(head_bucket::request(&e, "a/b")).contains("bucket"));
}

#[test]
fn unquote_etag() {
    assert_eq!(actions::unquote_etag("\"abc\""), "abc");
    assert_eq!(actions::unquote_etag("\"abc-9\""), "abc-9");
    assert_eq!(actions::unquote_etag("abc"), "abc");
    assert_eq!(actions::unquote_etag("\""), "\"");
}

// ---------------------------------------------------------------------------------------------
// PutObject.

#[test]
fn put_object_request() {
    let body = Body::from(b"hello".to_vec());
    let r =
        put_object::request(&aws(), "logs", "p/0001.json", body.clone(), &no_options()).unwrap();
    assert_eq!(r.method, Method::Put);
    assert_eq!(r.host, "logs.s3.eu-west-1.amazonaws.com");
    assert_eq!(r.target(), "/p/0001.json");
    assert!(r.headers.is_empty());
    assert_eq!(r.body, body);
    assert!(r.idempotent);
    let r = put_object::request(&minio(), "logs", "p/0001.json", body, &no_options()).unwrap();
    assert_eq!(
        (r.host.as_str(), r.target().as_str()),
        ("127.0.0.1:9000", "/logs/p/0001.json")
    );
}

#[test]
fn put_object_parse() {
    let out = put_object::parse(response(
        200,
        &[
            ("ETag", "\"1b2cf535f27731c974343645a3985328\""),
            ("x-amz-version-id", "v1"),
        ],
        Bytes::new(),
    ))
    .unwrap();
    assert_eq!(out.etag, "\"1b2cf535f27731c974343645a3985328\"");
    assert_eq!(out.version_id.as_deref(), Some("v1"));

    match put_object::parse(response(200, &[], Bytes::new())) {
        Err(Error::InvalidResponse(m)) => assert!(m.contains("etag"), "{m}"),
        other => panic!("{other:?}"),
    }
    let e =
        s3_err(put_object::parse(response(403, &[], data("error_access_denied.xml"))).unwrap_err());
    assert_eq!(e.code, "AccessDenied");
    let e = s3_err(
        put_object::parse(response(
            403,
            &[],
            data("error_signature_does_not_match.xml"),
        ))
        .unwrap_err(),
    );
    assert_eq!(e.code, "SignatureDoesNotMatch");
    let err = put_object::parse(response(503, &[], data("error_slow_down.xml"))).unwrap_err();
    assert!(err.is_retryable());
    assert_eq!(err.s3_code(), Some("SlowDown"));
}

// ---------------------------------------------------------------------------------------------
// CreateMultipartUpload.

#[test]
fn create_multipart_upload_request() {
    let r = create_multipart_upload::request(&aws(), "logs", "p/big.bin", &no_options()).unwrap();
    assert_eq!(r.method, Method::Post);
    assert_eq!(r.host, "logs.s3.eu-west-1.amazonaws.com");
    assert_eq!(r.query, [("uploads".to_string(), String::new())]);
    assert_eq!(r.target(), "/p/big.bin?uploads=");
    assert!(!r.idempotent, "a retry would create a second upload");
    assert!(r.body.is_empty());
    let r = create_multipart_upload::request(&minio(), "logs", "p/big.bin", &no_options()).unwrap();
    assert_eq!(r.target(), "/logs/p/big.bin?uploads=");
}

#[test]
fn create_multipart_upload_parse() {
    let out =
        create_multipart_upload::parse(response(200, &[], data("initiate_multipart_upload.xml")))
            .unwrap();
    assert_eq!(
        out.upload_id,
        "VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA"
    );
    assert_eq!(out.bucket.as_deref(), Some("example-bucket"));
    assert_eq!(out.key.as_deref(), Some("example-object"));

    let e = s3_err(
        create_multipart_upload::parse(response(200, &[], data("error_slow_down.xml")))
            .unwrap_err(),
    );
    assert_eq!((e.status, e.code.as_str()), (200, "SlowDown"));

    for body in [
        &b"<InitiateMultipartUploadResult><Bucket>b</Bucket></InitiateMultipartUploadResult>"[..],
        b"<InitiateMultipartUploadResult><UploadId></UploadId></InitiateMultipartUploadResult>",
        b"<Other/>",
        b"",
        b"garbage",
    ] {
        match create_multipart_upload::parse(response(200, &[], Bytes::copy_from_slice(body))) {
            Err(Error::InvalidResponse(m)) => assert!(m.contains("CreateMultipartUpload"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
    let e = s3_err(
        create_multipart_upload::parse(response(404, &[], data("error_no_such_bucket.xml")))
            .unwrap_err(),
    );
    assert_eq!(e.code, "NoSuchBucket");
}

// ---------------------------------------------------------------------------------------------
// UploadPart.

#[test]
fn upload_part_request() {
    let id = "2~abc/def+ghi=";
    let body = Body::from_chunks(vec![Bytes::from_static(b"ab"), Bytes::from_static(b"cd")]);
    let r = upload_part::request(&aws(), "logs", "p/big.bin", id, 42, body, &no_options()).unwrap();
    assert_eq!(r.method, Method::Put);
    assert_eq!(
        r.target(),
        "/p/big.bin?partNumber=42&uploadId=2~abc%2Fdef%2Bghi%3D"
    );
    assert_eq!(r.body.len(), 4);
    assert_eq!(r.body.chunks().len(), 2);
    assert!(r.idempotent, "the same part number overwrites");
    assert!(r.headers.is_empty());
    let r =
        upload_part::request(&minio(), "logs", "k", "u", 1, Body::empty(), &no_options()).unwrap();
    assert_eq!(
        (r.host.as_str(), r.target().as_str()),
        ("127.0.0.1:9000", "/logs/k?partNumber=1&uploadId=u")
    );

    for n in [0, 10_001] {
        match upload_part::request(&aws(), "logs", "k", "u", n, Body::empty(), &no_options()) {
            Err(Error::Limit(m)) => assert!(m.contains("10000"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
    assert!(
        upload_part::request(
            &aws(),
            "logs",
            "k",
            "u",
            10_000,
            Body::empty(),
            &no_options()
        )
        .is_ok()
    );
    let m = config_msg(upload_part::request(
        &aws(),
        "logs",
        "k",
        "",
        1,
        Body::empty(),
        &no_options(),
    ));
    assert!(m.contains("upload id"), "{m}");
}

#[test]
fn upload_part_parse() {
    let out = upload_part::parse(response(
        200,
        &[("etag", "\"b54357faf0632cce46e942fa68356b38\"")],
        Bytes::new(),
    ))
    .unwrap();
    assert_eq!(out.etag, "\"b54357faf0632cce46e942fa68356b38\"");
    let e = s3_err(
        upload_part::parse(response(404, &[], data("error_no_such_upload.xml"))).unwrap_err(),
    );
    assert_eq!(e.code, "NoSuchUpload");
    let e = s3_err(upload_part::parse(response(500, &[], Bytes::new())).unwrap_err());
    assert_eq!(e.code, "Http500");
    assert!(e.is_retryable());
}

// ---------------------------------------------------------------------------------------------
// CompleteMultipartUpload.

#[test]
fn complete_multipart_upload_request_and_body() {
    let parts = vec![
        CompletedPart::from((1, "\"a54357aff0632cce46d942af68356b38\"".to_string())),
        CompletedPart::from((2, "0c78aef83f66abc1fa1e8477f296d394".to_string())),
        CompletedPart::from((3, "\"acbd18db4cc2f85cedef654fccc4a4d8\"".to_string())),
    ];
    let r = complete_multipart_upload::request(
        &minio(),
        "logs",
        "p/big.bin",
        "u-1",
        &parts,
        &no_options(),
    )
    .unwrap();
    assert_eq!(r.method, Method::Post);
    assert_eq!(r.target(), "/logs/p/big.bin?uploadId=u-1");
    assert!(r.idempotent);
    let body: Vec<u8> = r.body.chunks().iter().flat_map(|c| c.to_vec()).collect();
    assert_eq!(
        String::from_utf8(body).unwrap(),
        "<CompleteMultipartUpload>\
         <Part><PartNumber>1</PartNumber><ETag>\"a54357aff0632cce46d942af68356b38\"</ETag></Part>\
         <Part><PartNumber>2</PartNumber><ETag>\"0c78aef83f66abc1fa1e8477f296d394\"</ETag></Part>\
         <Part><PartNumber>3</PartNumber><ETag>\"acbd18db4cc2f85cedef654fccc4a4d8\"</ETag></Part>\
         </CompleteMultipartUpload>"
    );
    let r = complete_multipart_upload::request(
        &aws(),
        "logs",
        "p/big.bin",
        "u-1",
        &parts,
        &no_options(),
    )
    .unwrap();
    assert_eq!(r.host, "logs.s3.eu-west-1.amazonaws.com");
    assert_eq!(r.target(), "/p/big.bin?uploadId=u-1");
}

#[test]
fn complete_body_escapes_and_checks() {
    let odd = [CompletedPart::from((1, "\"x&y<z>\"".to_string()))];
    assert_eq!(
        complete_multipart_upload::body(&odd).unwrap(),
        "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>\"x&amp;y&lt;z&gt;\"</ETag></Part></CompleteMultipartUpload>"
    );
    let p = |n: u32| CompletedPart::from((n, "e".to_string()));
    assert!(config_msg(complete_multipart_upload::body(&[])).contains("at least one"));
    assert!(config_msg(complete_multipart_upload::body(&[p(2), p(1)])).contains("ascending"));
    assert!(config_msg(complete_multipart_upload::body(&[p(1), p(1)])).contains("repeats"));
    assert!(matches!(
        complete_multipart_upload::body(&[p(0)]),
        Err(Error::Limit(_))
    ));
    assert!(
        config_msg(complete_multipart_upload::body(&[CompletedPart::from((
            1,
            "\"\"".to_string()
        ))]))
        .contains("empty ETag")
    );
    assert!(
        complete_multipart_upload::body(&[CompletedPart::from((1, "bad\u{1}".to_string()))])
            .is_err()
    );
    let many: Vec<CompletedPart> = (1..=10_001).map(p).collect();
    assert!(complete_multipart_upload::body(&many).is_err());
    assert!(complete_multipart_upload::body(&many[..10_000]).is_ok());
}

#[test]
fn complete_multipart_upload_parse() {
    let out = complete_multipart_upload::parse(response(
        200,
        &[("x-amz-version-id", "v9")],
        data("complete_multipart_upload.xml"),
    ))
    .unwrap();
    assert_eq!(out.etag, "\"3858f62230ac3c915f300c664312c11f-9\"");
    assert_eq!(
        actions::unquote_etag(&out.etag),
        "3858f62230ac3c915f300c664312c11f-9"
    );
    assert_eq!(
        out.location.as_deref(),
        Some("http://Example-Bucket.s3.us-east-1.amazonaws.com/Example-Object")
    );
    assert_eq!(out.bucket.as_deref(), Some("Example-Bucket"));
    assert_eq!(out.key.as_deref(), Some("Example-Object"));
    assert_eq!(out.version_id.as_deref(), Some("v9"));

    // The ETag escaped as &quot; (as some stores write it) reads the same.
    let escaped = "<CompleteMultipartUploadResult><Key>a&amp;b</Key><ETag>&quot;abc-2&quot;</ETag></CompleteMultipartUploadResult>";
    let out = complete_multipart_upload::parse(response(200, &[], escaped)).unwrap();
    assert_eq!(
        (out.etag.as_str(), out.key.as_deref()),
        ("\"abc-2\"", Some("a&b"))
    );
}

#[test]
fn complete_200_with_error_is_an_error() {
    let err = complete_multipart_upload::parse(response(
        200,
        &[("x-amz-request-id", "5A37448A37622243")],
        data("complete_multipart_upload_200_error.xml"),
    ))
    .unwrap_err();
    assert!(err.is_retryable(), "InternalError");
    let e = s3_err(err);
    assert_eq!((e.status, e.code.as_str()), (200, "InternalError"));
    assert_eq!(
        e.message.as_deref(),
        Some("We encountered an internal error. Please try again.")
    );
    assert_eq!(
        e.request_id.as_deref(),
        Some("656c76696e6727732072657175657374")
    );
    assert_eq!(
        e.host_id.as_deref(),
        Some("Uuag1LuByRx9e6j5OnimrSAMPLEtRPfTaOAa==")
    );
}

#[test]
fn complete_errors() {
    let e = s3_err(
        complete_multipart_upload::parse(response(400, &[], data("error_invalid_part.xml")))
            .unwrap_err(),
    );
    assert_eq!(e.code, "InvalidPart");
    assert!(!e.is_retryable());
    let e = s3_err(
        complete_multipart_upload::parse(response(400, &[], data("error_entity_too_small.xml")))
            .unwrap_err(),
    );
    assert_eq!(e.code, "EntityTooSmall");
    let e = s3_err(
        complete_multipart_upload::parse(response(404, &[], data("error_no_such_upload.xml")))
            .unwrap_err(),
    );
    assert_eq!(e.code, "NoSuchUpload");
    match complete_multipart_upload::parse(response(
        200,
        &[],
        "<CompleteMultipartUploadResult><Key>k</Key></CompleteMultipartUploadResult>",
    )) {
        Err(Error::InvalidResponse(m)) => assert!(m.contains("ETag"), "{m}"),
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// AbortMultipartUpload.

#[test]
fn abort_multipart_upload() {
    use abort_multipart_upload::AbortOutcome;
    let r = abort_multipart_upload::request(&aws(), "logs", "p/big.bin", "u 1").unwrap();
    assert_eq!(r.method, Method::Delete);
    assert_eq!(r.target(), "/p/big.bin?uploadId=u%201");
    assert!(r.idempotent);
    let r = abort_multipart_upload::request(&minio(), "logs", "p/big.bin", "u").unwrap();
    assert_eq!(r.target(), "/logs/p/big.bin?uploadId=u");

    assert_eq!(
        abort_multipart_upload::parse(response(204, &[], Bytes::new())).unwrap(),
        AbortOutcome::Aborted
    );
    assert_eq!(
        abort_multipart_upload::parse(response(404, &[], data("error_no_such_upload.xml")))
            .unwrap(),
        AbortOutcome::AlreadyGone
    );
    let e = s3_err(
        abort_multipart_upload::parse(response(404, &[], data("error_no_such_bucket.xml")))
            .unwrap_err(),
    );
    assert_eq!(e.code, "NoSuchBucket");
    let e = s3_err(
        abort_multipart_upload::parse(response(403, &[], data("error_access_denied.xml")))
            .unwrap_err(),
    );
    assert_eq!(e.code, "AccessDenied");
}

// ---------------------------------------------------------------------------------------------
// ListMultipartUploads.

#[test]
fn list_multipart_uploads_request() {
    let args = ListMultipartUploadsArgs {
        prefix: Some("spill/p 7/".into()),
        key_marker: Some("spill/p 7/0001".into()),
        upload_id_marker: Some("id+1".into()),
        max_uploads: Some(100),
    };
    let r = list_multipart_uploads::request(&aws(), "logs", &args).unwrap();
    assert_eq!(r.method, Method::Get);
    assert_eq!(r.host, "logs.s3.eu-west-1.amazonaws.com");
    assert_eq!(
        r.target(),
        "/?uploads=&prefix=spill%2Fp%207%2F&key-marker=spill%2Fp%207%2F0001&upload-id-marker=id%2B1&max-uploads=100"
    );
    assert!(r.idempotent);
    let r = list_multipart_uploads::request(&minio(), "logs", &ListMultipartUploadsArgs::default())
        .unwrap();
    assert_eq!(
        (r.host.as_str(), r.target().as_str()),
        ("127.0.0.1:9000", "/logs?uploads=")
    );

    let m = config_msg(list_multipart_uploads::request(
        &aws(),
        "logs",
        &ListMultipartUploadsArgs {
            upload_id_marker: Some("x".into()),
            ..Default::default()
        },
    ));
    assert!(m.contains("key-marker"), "{m}");
    for n in [0, 1001] {
        let m = config_msg(list_multipart_uploads::request(
            &aws(),
            "logs",
            &ListMultipartUploadsArgs {
                max_uploads: Some(n),
                ..Default::default()
            },
        ));
        assert!(m.contains("max-uploads"), "{m}");
    }
}

#[test]
fn list_multipart_uploads_first_page() {
    let out =
        list_multipart_uploads::parse(response(200, &[], data("list_multipart_uploads_page1.xml")))
            .unwrap();
    assert_eq!(out.bucket.as_deref(), Some("bucket"));
    assert_eq!(
        (out.key_marker.as_deref(), out.upload_id_marker.as_deref()),
        (None, None)
    );
    assert!(out.is_truncated);
    assert_eq!(out.next_key_marker.as_deref(), Some("my-movie.m2ts"));
    assert_eq!(
        out.next_upload_id_marker.as_deref(),
        Some("YW55IGlkZWEgd2h5IGVsdmluZydzIHVwbG9hZCBmYWlsZWQ")
    );
    assert_eq!(out.max_uploads, Some(3));
    let got: Vec<(&str, &str)> = out
        .uploads
        .iter()
        .map(|u| (u.key.as_str(), u.upload_id.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (
                "my-divisor",
                "XMgbGlrZSBlbHZpbmcncyBub3QgaGF2aW5nIG11Y2ggbHVjaw"
            ),
            (
                "my-movie.m2ts",
                "VXBsb2FkIElEIGZvciBlbHZpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA"
            ),
            (
                "my-movie.m2ts",
                "YW55IGlkZWEgd2h5IGVsdmluZydzIHVwbG9hZCBmYWlsZWQ"
            ),
        ]
    );
    let first = &out.uploads[0];
    assert_eq!(first.initiated.as_deref(), Some("2010-11-10T20:48:33.000Z"));
    assert_eq!(first.storage_class.as_deref(), Some("STANDARD"));
    assert_eq!(
        first.initiated_time(),
        Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_289_422_113))
    );

    let args = ListMultipartUploadsArgs {
        prefix: Some("my-".into()),
        max_uploads: Some(3),
        ..Default::default()
    };
    let next = out.next_args(&args).unwrap();
    assert_eq!(
        next,
        ListMultipartUploadsArgs {
            prefix: Some("my-".into()),
            key_marker: Some("my-movie.m2ts".into()),
            upload_id_marker: Some("YW55IGlkZWEgd2h5IGVsdmluZydzIHVwbG9hZCBmYWlsZWQ".into()),
            max_uploads: Some(3),
        }
    );
    assert_eq!(
        out.next_args(&next),
        None,
        "the same markers again would loop"
    );
}

#[test]
fn list_multipart_uploads_last_page_with_odd_keys() {
    let out = list_multipart_uploads::parse(response(
        200,
        &[],
        data("list_multipart_uploads_last_page.xml"),
    ))
    .unwrap();
    assert!(!out.is_truncated);
    assert_eq!(out.next_args(&ListMultipartUploadsArgs::default()), None);
    assert_eq!(out.key_marker.as_deref(), Some("my-movie.m2ts"));
    assert_eq!(out.uploads.len(), 2);
    assert_eq!(out.uploads[0].key, "spill/p&q <7>/000042.json");
    assert_eq!(out.uploads[0].storage_class.as_deref(), Some("STANDARD_IA"));
    assert_eq!(
        out.uploads[0].initiated_time(),
        Some(SystemTime::UNIX_EPOCH + Duration::new(1_709_251_199, 500_000_000))
    );
    assert_eq!(out.uploads[1].key, " spaced key ☃ é'\" ");
    assert_eq!(out.uploads[1].upload_id, "3~abc");
}

#[test]
fn list_multipart_uploads_empty_and_odd_pages() {
    let out =
        list_multipart_uploads::parse(response(200, &[], data("list_multipart_uploads_empty.xml")))
            .unwrap();
    assert!(out.uploads.is_empty() && !out.is_truncated);
    assert_eq!(out.prefix.as_deref(), Some("spill/"));
    assert_eq!(out.next_key_marker, None);

    // Truncated without next markers: continue after the last upload.
    let body = "<ListMultipartUploadsResult><IsTruncated>true</IsTruncated>\
        <Upload><Key>a</Key><UploadId>1</UploadId></Upload></ListMultipartUploadsResult>";
    let out = list_multipart_uploads::parse(response(200, &[], body)).unwrap();
    let next = out.next_args(&ListMultipartUploadsArgs::default()).unwrap();
    assert_eq!(
        (next.key_marker.as_deref(), next.upload_id_marker.as_deref()),
        (Some("a"), Some("1"))
    );
    // Truncated with nothing to continue from: stop.
    let body =
        "<ListMultipartUploadsResult><IsTruncated>true</IsTruncated></ListMultipartUploadsResult>";
    let out = list_multipart_uploads::parse(response(200, &[], body)).unwrap();
    assert_eq!(out.next_args(&ListMultipartUploadsArgs::default()), None);

    // encoding-type=url: keys and markers are decoded.
    let body = "<ListMultipartUploadsResult><EncodingType>url</EncodingType>\
        <NextKeyMarker>a%2Fb+c</NextKeyMarker><IsTruncated>false</IsTruncated>\
        <Upload><Key>a%2Fb+c%E2%98%83</Key><UploadId>1</UploadId></Upload></ListMultipartUploadsResult>";
    let out = list_multipart_uploads::parse(response(200, &[], body)).unwrap();
    assert_eq!(out.uploads[0].key, "a/b c☃");
    assert_eq!(out.next_key_marker.as_deref(), Some("a/b c"));

    for bad in [
        "<ListMultipartUploadsResult><IsTruncated>maybe</IsTruncated></ListMultipartUploadsResult>",
        "<ListMultipartUploadsResult><MaxUploads>x</MaxUploads></ListMultipartUploadsResult>",
        "<ListMultipartUploadsResult><Upload><UploadId>1</UploadId></Upload></ListMultipartUploadsResult>",
        "<ListMultipartUploadsResult><Upload><Key>k</Key></Upload></ListMultipartUploadsResult>",
        "<ListBucketResult/>",
    ] {
        match list_multipart_uploads::parse(response(200, &[], bad)) {
            Err(Error::InvalidResponse(m)) => assert!(m.contains("ListMultipartUploads"), "{m}"),
            other => panic!("{bad}: {other:?}"),
        }
    }
    // A store without ListMultipartUploads (s3s-fs answers NotImplemented).
    let body = "<Error><Code>NotImplemented</Code><Message>A header you provided implies functionality that is not implemented</Message></Error>";
    let e = s3_err(list_multipart_uploads::parse(response(501, &[], body)).unwrap_err());
    assert_eq!(e.code, "NotImplemented");
}

#[test]
fn iso8601_times() {
    use list_multipart_uploads::parse_iso8601_utc as p;
    let t = |s: u64, n: u32| Some(SystemTime::UNIX_EPOCH + Duration::new(s, n));
    assert_eq!(p("1970-01-01T00:00:00Z"), t(0, 0));
    assert_eq!(p("2000-02-29T12:00:00.123Z"), t(951_825_600, 123_000_000));
    assert_eq!(p("2038-01-19T03:14:08.000000001Z"), t(2_147_483_648, 1));
    for bad in [
        "",
        "2010-11-10",
        "2010-11-10T20:48:33",
        "2010-13-10T20:48:33Z",
        "2010-11-10T20:48:33+01:00",
        "2010-11-10T20:48:33.Z",
        "1969-12-31T23:59:59Z",
        "2010-11-10T2a:48:33Z",
    ] {
        assert_eq!(p(bad), None, "{bad}");
    }
}

// ---------------------------------------------------------------------------------------------
// HeadBucket.

#[test]
fn head_bucket_request() {
    let r = head_bucket::request(&aws(), "logs").unwrap();
    assert_eq!(
        (r.method, r.host.as_str(), r.target().as_str()),
        (Method::Head, "logs.s3.eu-west-1.amazonaws.com", "/")
    );
    assert!(r.idempotent);
    let r = head_bucket::request(&minio(), "logs").unwrap();
    assert_eq!(
        (r.host.as_str(), r.target().as_str()),
        ("127.0.0.1:9000", "/logs")
    );
}

#[test]
fn head_bucket_parse() {
    let out = head_bucket::parse(response(
        200,
        &[("x-amz-bucket-region", "eu-west-1")],
        Bytes::new(),
    ))
    .unwrap();
    assert_eq!(out.region.as_deref(), Some("eu-west-1"));

    let e = s3_err(
        head_bucket::parse(response(404, &[("x-amz-request-id", "R404")], Bytes::new()))
            .unwrap_err(),
    );
    assert_eq!((e.status, e.code.as_str()), (404, "NoSuchBucket"));
    assert_eq!(e.request_id.as_deref(), Some("R404"));
    let m = e.message.unwrap();
    assert!(m.contains("does not exist") && m.contains("no body"), "{m}");

    let e = s3_err(head_bucket::parse(response(403, &[], Bytes::new())).unwrap_err());
    assert_eq!(e.code, "AccessDenied");
    assert!(!e.is_retryable());
    let m = e.message.unwrap();
    assert!(
        m.contains("SignatureDoesNotMatch") && m.contains("no body"),
        "{m}"
    );

    let e = s3_err(
        head_bucket::parse(response(
            301,
            &[("x-amz-bucket-region", "ap-south-1")],
            Bytes::new(),
        ))
        .unwrap_err(),
    );
    assert_eq!(e.code, "PermanentRedirect");
    assert!(e.message.unwrap().contains("ap-south-1"));

    let err = head_bucket::parse(response(503, &[], Bytes::new())).unwrap_err();
    assert!(err.is_retryable());
    let err = head_bucket::parse(response(500, &[], Bytes::new())).unwrap_err();
    assert!(err.is_retryable());
    assert_eq!(err.s3_code(), Some("Http500"));

    // A store that does send a document with its HEAD answer: its code is kept.
    let e = s3_err(
        head_bucket::parse(response(404, &[], data("error_no_such_bucket.xml"))).unwrap_err(),
    );
    assert_eq!(e.code, "NoSuchBucket");
    assert_eq!(
        e.message.as_deref(),
        Some("The specified bucket does not exist")
    );
    let e = s3_err(
        head_bucket::parse(response(
            403,
            &[],
            data("error_signature_does_not_match.xml"),
        ))
        .unwrap_err(),
    );
    assert_eq!(e.code, "SignatureDoesNotMatch");
}

// ---------------------------------------------------------------------------------------------
// GetObject, HeadObject, DeleteObject.

#[test]
fn get_object_request_and_parse() {
    let r = get_object::request(&aws(), "logs", "p/0001.json", Some(0..=9), &no_options()).unwrap();
    assert_eq!(
        (r.method, r.target().as_str()),
        (Method::Get, "/p/0001.json")
    );
    assert_eq!(r.header("range"), Some("bytes=0-9"));
    assert!(r.idempotent);
    let r = get_object::request(&minio(), "logs", "p/0001.json", None, &no_options()).unwrap();
    assert_eq!(r.target(), "/logs/p/0001.json");
    assert_eq!(r.header("range"), None);
    #[allow(clippy::reversed_empty_ranges)]
    let bad = get_object::request(&aws(), "logs", "k", Some(5..=4), &no_options());
    assert!(config_msg(bad).contains("empty"));

    let out = get_object::parse(response(
        200,
        &[
            ("Content-Length", "11"),
            ("ETag", "\"5eb63bbbe01eeed093cb22bb8f5acdc3\""),
            ("Content-Type", "text/plain"),
            ("x-amz-meta-partition", "7"),
        ],
        "hello world",
    ))
    .unwrap();
    assert_eq!(out.body, Bytes::from_static(b"hello world"));
    assert_eq!(out.content_length, 11);
    assert_eq!(
        out.etag.as_deref(),
        Some("\"5eb63bbbe01eeed093cb22bb8f5acdc3\"")
    );
    assert_eq!(out.content_type.as_deref(), Some("text/plain"));
    assert_eq!(out.metadata, [("partition".to_string(), "7".to_string())]);

    let out = get_object::parse(response(
        206,
        &[("content-length", "5"), ("content-range", "bytes 0-4/11")],
        "hello",
    ))
    .unwrap();
    assert_eq!(out.content_range.as_deref(), Some("bytes 0-4/11"));

    match get_object::parse(response(200, &[("content-length", "12")], "hello world")) {
        Err(Error::InvalidResponse(m)) => assert!(m.contains("12") && m.contains("11"), "{m}"),
        other => panic!("{other:?}"),
    }
    let e =
        s3_err(get_object::parse(response(404, &[], data("error_no_such_key.xml"))).unwrap_err());
    assert_eq!(e.code, "NoSuchKey");
}

#[test]
fn head_object_request_and_parse() {
    let r = head_object::request(&aws(), "logs", "p/0001.json", &no_options()).unwrap();
    assert_eq!(
        (r.method, r.target().as_str()),
        (Method::Head, "/p/0001.json")
    );
    assert!(r.idempotent);

    let out = head_object::parse(response(
        200,
        &[
            ("Content-Length", "268435456"),
            ("ETag", "\"d41d8cd98f00b204e9800998ecf8427e-32\""),
            ("Content-Type", "application/octet-stream"),
            ("Last-Modified", "Wed, 12 Oct 2009 17:50:00 GMT"),
            ("x-amz-storage-class", "STANDARD_IA"),
            ("x-amz-server-side-encryption", "aws:kms"),
            ("X-Amz-Meta-Partition", "7"),
            ("x-amz-meta-first-offset", "1000"),
        ],
        Bytes::new(),
    ))
    .unwrap();
    assert_eq!(out.size, 268_435_456);
    assert_eq!(
        out.etag.as_deref(),
        Some("\"d41d8cd98f00b204e9800998ecf8427e-32\"")
    );
    assert_eq!(out.storage_class.as_deref(), Some("STANDARD_IA"));
    assert_eq!(out.server_side_encryption.as_deref(), Some("aws:kms"));
    assert_eq!(
        out.metadata,
        [
            ("partition".to_string(), "7".to_string()),
            ("first-offset".to_string(), "1000".to_string())
        ]
    );

    let e = s3_err(head_object::parse(response(404, &[], Bytes::new())).unwrap_err());
    assert_eq!(e.code, "NoSuchKey");
    assert!(e.message.unwrap().contains("object does not exist"));
    let e = s3_err(head_object::parse(response(403, &[], Bytes::new())).unwrap_err());
    assert_eq!(e.code, "AccessDenied");
    match head_object::parse(response(200, &[("content-length", "big")], Bytes::new())) {
        Err(Error::InvalidResponse(m)) => assert!(m.contains("Content-Length"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        head_object::parse(response(200, &[], Bytes::new())),
        Err(Error::InvalidResponse(_))
    ));
}

#[test]
fn delete_object_request_and_parse() {
    let r = delete_object::request(&aws(), "logs", "p/0001.json").unwrap();
    assert_eq!(
        (r.method, r.target().as_str()),
        (Method::Delete, "/p/0001.json")
    );
    assert!(r.idempotent);
    let r = delete_object::request(&minio(), "logs", "p/0001.json").unwrap();
    assert_eq!(r.target(), "/logs/p/0001.json");

    let out = delete_object::parse(response(204, &[], Bytes::new())).unwrap();
    assert!(!out.delete_marker);
    let out = delete_object::parse(response(
        204,
        &[
            ("x-amz-delete-marker", "true"),
            ("x-amz-version-id", "3/L4kqtJl"),
        ],
        Bytes::new(),
    ))
    .unwrap();
    assert!(out.delete_marker);
    assert_eq!(out.version_id.as_deref(), Some("3/L4kqtJl"));
    let e = s3_err(
        delete_object::parse(response(403, &[], data("error_access_denied.xml"))).unwrap_err(),
    );
    assert_eq!(e.code, "AccessDenied");
}

#[test]
fn not_implemented_is_not_retried_but_other_5xx_are() {
    use spillway_s3::S3Error;
    let err = |status: u16, code: &str| S3Error {
        status,
        code: code.to_owned(),
        message: None,
        request_id: None,
        host_id: None,
        resource: None,
    };
    // A store without ListMultipartUploads (s3s-fs) answers 501 every time.
    assert!(!err(501, "NotImplemented").is_retryable());
    assert!(!err(505, "Http505").is_retryable());
    assert!(err(500, "InternalError").is_retryable());
    assert!(err(502, "Http502").is_retryable());
    assert!(err(503, "SlowDown").is_retryable());
}

/// A write condition goes on PutObject and CompleteMultipartUpload only (the writes that make
/// an object visible): `If-None-Match: *` for a key written once, `If-Match` with the ETag in
/// quotes (added when a store sent it bare) for a compare-and-swap.
#[test]
fn a_write_condition_is_on_the_requests_that_make_the_object() {
    use spillway_s3::options::Condition;
    let once = ObjectOptions {
        condition: Some(Condition::Absent),
        ..no_options()
    };
    let put = put_object::request(
        &aws(),
        "b",
        "k",
        Body::from(Bytes::from_static(b"x")),
        &once,
    )
    .unwrap();
    assert_eq!(put.header("if-none-match"), Some("*"));
    assert_eq!(put.header("if-match"), None);
    let parts = [CompletedPart::from((1, "\"e1\"".to_owned()))];
    let complete =
        complete_multipart_upload::request(&aws(), "b", "k", "up1", &parts, &once).unwrap();
    assert_eq!(complete.header("if-none-match"), Some("*"));
    let create = create_multipart_upload::request(&aws(), "b", "k", &once).unwrap();
    assert_eq!(create.header("if-none-match"), None, "checked at Complete");
    let part = upload_part::request(
        &aws(),
        "b",
        "k",
        "up1",
        1,
        Body::from(Bytes::from_static(b"x")),
        &once,
    )
    .unwrap();
    assert_eq!(part.header("if-none-match"), None);
    for etag in ["abc123", "\"abc123\""] {
        let cas = ObjectOptions {
            condition: Some(Condition::Etag(etag.to_owned())),
            ..no_options()
        };
        let put = put_object::request(
            &aws(),
            "b",
            "m",
            Body::from(Bytes::from_static(b"{}")),
            &cas,
        )
        .unwrap();
        assert_eq!(put.header("if-match"), Some("\"abc123\""), "{etag}");
        assert_eq!(put.header("if-none-match"), None);
    }
    let refused = s3_err(
        put_object::parse(response(
            412,
            &[],
            "<Error><Code>PreconditionFailed</Code><Message>At least one of the pre-conditions you specified did not hold</Message></Error>",
        ))
        .unwrap_err(),
    );
    assert!(refused.is_precondition_failed());
    assert!(
        !refused.is_retryable(),
        "a refusal is an answer, not a fault"
    );
}
