//! SigV4: the AWS test suite vectors and the S3 documentation examples, byte for byte, through
//! the code path of `sign()`; plus an independent verifier (written here from the SigV4
//! specification) that checks what the transport sends against the signature, for odd keys
//! and query values; and credentials.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use aws_sigv4::http_request::{
    PayloadChecksumKind, PercentEncodingMode, SessionTokenMode, SigningSettings,
    UriPathNormalizationMode,
};
use bytes::Bytes;
use sha2::{Digest, Sha256};
use spillway_s3::actions::{list_multipart_uploads, put_object, upload_part};
use spillway_s3::credentials::Credentials;
use spillway_s3::endpoint::{Endpoint, uri_encode};
use spillway_s3::options::ObjectOptions;
use spillway_s3::sign::{self, PayloadMode, content_md5_base64, payload_sha256_hex, sign_with};
use spillway_s3::{Body, Error, Method, Request};

fn at(unix: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(unix)
}

const T2015: u64 = 1_440_938_160; // 2015-08-30T12:36:00Z
const T2013: u64 = 1_369_353_600; // 2013-05-24T00:00:00Z

// ---------------------------------------------------------------------------------------------
// The AWS SigV4 test suite (tests/data/sigv4-suite, see its README).

struct Context {
    access_key_id: String,
    secret: String,
    token: Option<String>,
    region: String,
    service: String,
    normalize: bool,
    sign_body: bool,
    omit_session_token: bool,
}

/// The value of `"key": …` in the suite's small, flat JSON files (strings and booleans).
fn json_field(json: &str, key: &str) -> Option<String> {
    let at = json.find(&format!("\"{key}\""))?;
    let rest = json[at + key.len() + 2..].trim_start();
    let rest = rest.strip_prefix(':')?.trim_start();
    if let Some(s) = rest.strip_prefix('"') {
        let end = s.find('"')?;
        Some(s[..end].to_string())
    } else {
        let end = rest.find([',', '}', '\n']).unwrap_or(rest.len());
        Some(rest[..end].trim().to_string())
    }
}

fn read_context(dir: &Path) -> Context {
    let json = std::fs::read_to_string(dir.join("context.json")).unwrap();
    let flag = |k: &str| json_field(&json, k).as_deref() == Some("true");
    assert_eq!(
        json_field(&json, "timestamp").unwrap(),
        "2015-08-30T12:36:00Z"
    );
    Context {
        access_key_id: json_field(&json, "access_key_id").unwrap(),
        secret: json_field(&json, "secret_access_key").unwrap(),
        token: json_field(&json, "token"),
        region: json_field(&json, "region").unwrap(),
        service: json_field(&json, "service").unwrap(),
        normalize: flag("normalize"),
        sign_body: flag("sign_body"),
        omit_session_token: flag("omit_session_token"),
    }
}

/// Percent-encodes the bytes of a request-line path that cannot appear in a URI (spaces,
/// non-ASCII), as an HTTP client puts the suite's raw paths on the wire; `%XX` stays.
fn wire_path(raw: &str) -> String {
    let mut out = String::new();
    for &b in raw.as_bytes() {
        if b.is_ascii_graphic()
            && !matches!(
                b,
                b'"' | b'<' | b'>' | b'\\' | b'^' | b'`' | b'{' | b'|' | b'}'
            )
        {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .unwrap()
        .into_owned()
}

/// `request.txt` as our `Request`: request line, headers (continuation lines unfolded), body.
/// The query is decoded into raw pairs, so that `Request::target()` encodes it again.
fn read_request(dir: &Path) -> Request {
    let raw = std::fs::read_to_string(dir.join("request.txt")).unwrap();
    let (head, body) = match raw.split_once("\n\n") {
        Some((h, b)) => (h.to_string(), b.to_string()),
        None => (raw.clone(), String::new()),
    };
    let mut lines = head.lines();
    let request_line = lines.next().unwrap();
    let method = request_line.split(' ').next().unwrap();
    let target = request_line[method.len() + 1..]
        .strip_suffix(" HTTP/1.1")
        .unwrap();
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    let method = match method {
        "GET" => Method::Get,
        "POST" => Method::Post,
        other => panic!("method {other}"),
    };
    let mut headers: Vec<(String, String)> = Vec::new();
    for line in lines {
        if line.starts_with([' ', '\t']) {
            headers.last_mut().unwrap().1.push_str(line);
        } else {
            let (n, v) = line.split_once(':').unwrap();
            headers.push((
                n.to_ascii_lowercase(),
                v.trim_matches([' ', '\t']).to_string(),
            ));
        }
    }
    let host = headers
        .iter()
        .find(|(n, _)| n == "host")
        .map(|(_, v)| v.clone())
        .unwrap();
    let mut req = Request::new(method, host, wire_path(path));
    req.headers = headers.into_iter().filter(|(n, _)| n != "host").collect();
    if let Some(q) = query {
        for pair in q.split('&') {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            req.query.push((percent_decode(k), percent_decode(v)));
        }
    }
    req.body = Body::from(body.into_bytes());
    req
}

/// The header lines of `header-signed-request.txt`, names lower case.
fn expected_headers(dir: &Path) -> Vec<(String, String)> {
    let raw = std::fs::read_to_string(dir.join("header-signed-request.txt")).unwrap();
    raw.split("\n\n")
        .next()
        .unwrap()
        .lines()
        .skip(1)
        .filter(|l| !l.starts_with([' ', '\t']))
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.to_ascii_lowercase(), v.trim().to_string())
        })
        .collect()
}

fn suite_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/sigv4-suite")
        .join(name)
}

fn run_suite_case(name: &str) {
    let dir = suite_dir(name);
    let cx = read_context(&dir);
    let mut req = read_request(&dir);
    let creds = Credentials::new(cx.access_key_id, cx.secret, cx.token);
    let mut settings = SigningSettings::default();
    // The request's path is on the wire already encoded once (see `wire_path`).
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = if cx.normalize {
        UriPathNormalizationMode::Enabled
    } else {
        UriPathNormalizationMode::Disabled
    };
    settings.payload_checksum_kind = if cx.sign_body {
        PayloadChecksumKind::XAmzSha256
    } else {
        PayloadChecksumKind::NoHeader
    };
    settings.session_token_mode = if cx.omit_session_token {
        SessionTokenMode::Exclude
    } else {
        SessionTokenMode::Include
    };
    let signature = sign_with(
        &mut req,
        &creds,
        &cx.region,
        &cx.service,
        at(T2015),
        PayloadMode::Signed,
        settings,
    )
    .unwrap();

    let expected_sig = std::fs::read_to_string(dir.join("header-signature.txt")).unwrap();
    assert_eq!(signature, expected_sig.trim(), "{name}: signature");
    for (n, v) in expected_headers(&dir) {
        let signer_set = matches!(
            n.as_str(),
            "authorization" | "x-amz-date" | "x-amz-security-token" | "x-amz-content-sha256"
        );
        if signer_set {
            assert_eq!(req.header(&n), Some(v.as_str()), "{name}: header {n}");
        }
    }
    assert!(
        req.header("authorization")
            .unwrap()
            .ends_with(expected_sig.trim()),
        "{name}"
    );
}

macro_rules! suite {
    ($($test:ident => $name:literal,)*) => {
        $(
            #[test]
            fn $test() {
                run_suite_case($name);
            }
        )*

        /// Every case in the data directory has a test above.
        #[test]
        fn suite_cases_all_listed() {
            let listed = [$($name),*];
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/sigv4-suite");
            let mut n = 0;
            for entry in std::fs::read_dir(dir).unwrap() {
                let name = entry.unwrap().file_name().into_string().unwrap();
                assert!(listed.contains(&name.as_str()), "no test for suite case {name}");
                n += 1;
            }
            assert_eq!(n, listed.len());
        }
    };
}

suite! {
    suite_get_header_key_duplicate => "get-header-key-duplicate",
    suite_get_header_value_multiline => "get-header-value-multiline",
    suite_get_header_value_order => "get-header-value-order",
    suite_get_header_value_trim => "get-header-value-trim",
    suite_get_relative_normalized => "get-relative-normalized",
    suite_get_relative_relative_normalized => "get-relative-relative-normalized",
    suite_get_relative_relative_unnormalized => "get-relative-relative-unnormalized",
    suite_get_relative_unnormalized => "get-relative-unnormalized",
    suite_get_slash_dot_slash_normalized => "get-slash-dot-slash-normalized",
    suite_get_slash_dot_slash_unnormalized => "get-slash-dot-slash-unnormalized",
    suite_get_slash_normalized => "get-slash-normalized",
    suite_get_slash_pointless_dot_normalized => "get-slash-pointless-dot-normalized",
    suite_get_slash_pointless_dot_unnormalized => "get-slash-pointless-dot-unnormalized",
    suite_get_slash_unnormalized => "get-slash-unnormalized",
    suite_get_slashes_normalized => "get-slashes-normalized",
    suite_get_slashes_unnormalized => "get-slashes-unnormalized",
    suite_get_space_normalized => "get-space-normalized",
    suite_get_space_unnormalized => "get-space-unnormalized",
    suite_get_unreserved => "get-unreserved",
    suite_get_utf8 => "get-utf8",
    suite_get_vanilla => "get-vanilla",
    suite_get_vanilla_empty_query_key => "get-vanilla-empty-query-key",
    suite_get_vanilla_query => "get-vanilla-query",
    suite_get_vanilla_query_order_encoded => "get-vanilla-query-order-encoded",
    suite_get_vanilla_query_order_key_case => "get-vanilla-query-order-key-case",
    suite_get_vanilla_query_unreserved => "get-vanilla-query-unreserved",
    suite_get_vanilla_utf8_query => "get-vanilla-utf8-query",
    suite_get_vanilla_with_session_token => "get-vanilla-with-session-token",
    suite_post_header_key_case => "post-header-key-case",
    suite_post_header_key_sort => "post-header-key-sort",
    suite_post_header_value_case => "post-header-value-case",
    suite_post_sts_header_after => "post-sts-header-after",
    suite_post_sts_header_before => "post-sts-header-before",
    suite_post_vanilla => "post-vanilla",
    suite_post_vanilla_empty_query_value => "post-vanilla-empty-query-value",
    suite_post_vanilla_query => "post-vanilla-query",
    suite_post_x_www_form_urlencoded => "post-x-www-form-urlencoded",
    suite_post_x_www_form_urlencoded_parameters => "post-x-www-form-urlencoded-parameters",
}

// ---------------------------------------------------------------------------------------------
// The S3 API Reference examples ("Signature Calculations for the Authorization Header:
// Transferring Payload in a Single Chunk", section "Examples: Signature Calculations"),
// through `sign()` with service s3.

const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

fn doc_creds() -> Credentials {
    Credentials::new(
        "AKIAIOSFODNN7EXAMPLE",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        None,
    )
}

/// `https://s3.amazonaws.com`: an AWS host, so virtual-hosted style:
/// `examplebucket.s3.amazonaws.com`, as in the examples.
fn doc_endpoint() -> Endpoint {
    Endpoint::parse("https://s3.amazonaws.com", "us-east-1", None).unwrap()
}

/// The documentation writes `Credential=…,SignedHeaders=…,Signature=…`; aws-sigv4 writes a
/// space after each comma. S3 accepts both; the parts are compared exactly.
fn assert_authorization(req: &Request, signed_headers: &str, signature: &str) {
    assert_eq!(
        req.header("authorization").unwrap(),
        format!(
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
             SignedHeaders={signed_headers}, Signature={signature}"
        )
    );
    assert_eq!(req.header("x-amz-date"), Some("20130524T000000Z"));
}

#[test]
fn s3_doc_get_object_with_range() {
    let mut req = doc_endpoint().request(Method::Get, "examplebucket", Some("test.txt"));
    assert_eq!(req.host, "examplebucket.s3.amazonaws.com");
    assert_eq!(req.path, "/test.txt");
    req.set_header("range", "bytes=0-9");
    sign::sign(
        &mut req,
        &doc_creds(),
        "us-east-1",
        at(T2013),
        PayloadMode::Signed,
    )
    .unwrap();
    assert_eq!(req.header("x-amz-content-sha256"), Some(EMPTY_SHA256));
    assert_authorization(
        &req,
        "host;range;x-amz-content-sha256;x-amz-date",
        "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
    );
}

fn doc_put_object(body: Body) -> Request {
    let options = ObjectOptions {
        storage_class: Some("REDUCED_REDUNDANCY".into()),
        ..ObjectOptions::default()
    };
    let mut req = put_object::request(
        &doc_endpoint(),
        "examplebucket",
        "test$file.text",
        body,
        &options,
    )
    .unwrap();
    assert_eq!(req.path, "/test%24file.text");
    req.set_header("date", "Fri, 24 May 2013 00:00:00 GMT");
    sign::sign(
        &mut req,
        &doc_creds(),
        "us-east-1",
        at(T2013),
        PayloadMode::Signed,
    )
    .unwrap();
    req
}

#[test]
fn s3_doc_put_object_with_storage_class() {
    let req = doc_put_object(Body::from(b"Welcome to Amazon S3.".to_vec()));
    assert_eq!(
        req.header("x-amz-content-sha256"),
        Some("44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072")
    );
    assert_authorization(
        &req,
        "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class",
        "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd",
    );
}

#[test]
fn s3_doc_put_object_body_in_chunks_signs_the_same() {
    let chunks = ["Welcome", " to ", "", "Amazon S3", "."]
        .iter()
        .map(|s| Bytes::from_static(s.as_bytes()))
        .collect();
    let req = doc_put_object(Body::from_chunks(chunks));
    assert_eq!(req.body.chunks().len(), 5, "the body is not joined");
    assert_authorization(
        &req,
        "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class",
        "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd",
    );
}

#[test]
fn s3_doc_get_bucket_lifecycle() {
    let mut req = doc_endpoint().request(Method::Get, "examplebucket", None);
    assert_eq!(req.path, "/");
    req.query.push(("lifecycle".into(), String::new()));
    sign::sign(
        &mut req,
        &doc_creds(),
        "us-east-1",
        at(T2013),
        PayloadMode::Signed,
    )
    .unwrap();
    assert_authorization(
        &req,
        "host;x-amz-content-sha256;x-amz-date",
        "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543",
    );
}

#[test]
fn s3_doc_get_bucket_list_objects() {
    let mut req = doc_endpoint().request(Method::Get, "examplebucket", None);
    // Given out of order: signing sorts.
    req.query.push(("prefix".into(), "J".into()));
    req.query.push(("max-keys".into(), "2".into()));
    sign::sign(
        &mut req,
        &doc_creds(),
        "us-east-1",
        at(T2013),
        PayloadMode::Signed,
    )
    .unwrap();
    assert_eq!(req.target(), "/?prefix=J&max-keys=2");
    assert_authorization(
        &req,
        "host;x-amz-content-sha256;x-amz-date",
        "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7",
    );
}

// ---------------------------------------------------------------------------------------------
// An independent verifier, as a server does it: from the request line and headers the
// transport sends (`target()`, `host`, the signed headers), rebuild the canonical request and
// the signature (HMAC-SHA256 written here from RFC 2104), and compare.

fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    inner.update(data);
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// What the server checks: true when the signature matches what was sent.
fn server_verifies(req: &Request, secret: &str, region: &str) -> bool {
    let auth = req.header("authorization").unwrap();
    let rest = auth.strip_prefix("AWS4-HMAC-SHA256 ").unwrap();
    let mut credential = "";
    let mut signed_headers = "";
    let mut signature = "";
    for part in rest.split(", ") {
        let (k, v) = part.split_once('=').unwrap();
        match k {
            "Credential" => credential = v,
            "SignedHeaders" => signed_headers = v,
            "Signature" => signature = v,
            _ => panic!("{k}"),
        }
    }
    let scope = credential.split_once('/').unwrap().1;
    let date = scope.split('/').next().unwrap();
    let amz_date = req.header("x-amz-date").unwrap();

    // The request line the transport writes.
    let target = req.target();
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (
                uri_encode(&percent_decode(k), true),
                uri_encode(&percent_decode(v), true),
            )
        })
        .collect();
    pairs.sort();
    let canonical_query = pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&");
    let mut canonical_headers = String::new();
    for name in signed_headers.split(';') {
        let value = if name == "host" {
            req.host.clone()
        } else {
            req.headers
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, v)| v.split_whitespace().collect::<Vec<_>>().join(" "))
                .collect::<Vec<_>>()
                .join(",")
        };
        canonical_headers.push_str(&format!("{name}:{value}\n"));
    }
    let payload = req.header("x-amz-content-sha256").unwrap();
    let creq = format!(
        "{}\n{path}\n{canonical_query}\n{canonical_headers}\n{signed_headers}\n{payload}",
        req.method.as_str()
    );
    let sts = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex::encode(Sha256::digest(creq.as_bytes()))
    );
    let k_date = hmac_sha256(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let k_region = hmac_sha256(&k_date, region.as_bytes());
    let k_service = hmac_sha256(&k_region, b"s3");
    let k_signing = hmac_sha256(&k_service, b"aws4_request");
    hex::encode(hmac_sha256(&k_signing, sts.as_bytes())) == signature
}

const ODD: &[&str] = &[
    "plain/key.bin",
    "a b/c+d/e=f&g",
    "ünïcödé/ключ/鍵",
    "!$&'()*,;:@[]",
    "%41%2F already-encoded-looking",
    "tilde~dash-under_score.dot",
    "//double//slash/./dot/../dotdot",
    "quote\"back\\tick`caret^pipe|brace{}",
    " leading and trailing ",
];

#[test]
fn server_side_verification_of_odd_keys_and_query_values() {
    let creds = Credentials::new("AKID", "secret/with+odd=chars", Some("token".into()));
    for style in [None, Some(spillway_s3::endpoint::AddressingStyle::Path)] {
        let endpoint =
            Endpoint::parse("https://s3.eu-west-1.amazonaws.com", "eu-west-1", style).unwrap();
        for key in ODD {
            for mode in [PayloadMode::Signed, PayloadMode::Unsigned] {
                let mut req = upload_part::request(
                    &endpoint,
                    "my-bucket",
                    key,
                    &format!("id/{key}"),
                    7,
                    Body::from(b"part".to_vec()),
                    &ObjectOptions::default(),
                )
                .unwrap();
                sign::sign(&mut req, &creds, "eu-west-1", at(T2013), mode).unwrap();
                assert!(
                    server_verifies(&req, &creds.secret_access_key, "eu-west-1"),
                    "{key:?}"
                );

                let args = list_multipart_uploads::ListMultipartUploadsArgs {
                    prefix: Some((*key).to_string()),
                    key_marker: Some(format!("{key}~")),
                    upload_id_marker: Some("a+b c/d=e".into()),
                    max_uploads: Some(5),
                };
                let mut req =
                    list_multipart_uploads::request(&endpoint, "my-bucket", &args).unwrap();
                sign::sign(&mut req, &creds, "eu-west-1", at(T2013), mode).unwrap();
                assert!(
                    server_verifies(&req, &creds.secret_access_key, "eu-west-1"),
                    "{key:?}"
                );
            }
        }
    }
}

#[test]
fn verifier_rejects_a_changed_request() {
    let creds = doc_creds();
    let mut req = doc_endpoint().request(Method::Get, "examplebucket", Some("a b"));
    req.query.push(("x".into(), "1 2".into()));
    sign::sign(
        &mut req,
        &creds,
        "us-east-1",
        at(T2013),
        PayloadMode::Signed,
    )
    .unwrap();
    assert!(server_verifies(&req, &creds.secret_access_key, "us-east-1"));
    let mut changed = req.clone();
    changed.query[0].1 = "1+2".into();
    assert!(!server_verifies(
        &changed,
        &creds.secret_access_key,
        "us-east-1"
    ));
    assert!(!server_verifies(&req, "wrong", "us-east-1"));
}

// ---------------------------------------------------------------------------------------------
// Behaviour of sign().

#[test]
fn unsigned_payload_and_session_token() {
    let creds = Credentials::new("AKID", "SECRET", Some("TOKEN/+=".into()));
    let mut req = doc_endpoint().request(Method::Put, "examplebucket", Some("k"));
    req.body = Body::from(vec![1u8; 1000]);
    sign::sign(
        &mut req,
        &creds,
        "us-east-1",
        at(T2013),
        PayloadMode::Unsigned,
    )
    .unwrap();
    assert_eq!(req.header("x-amz-content-sha256"), Some("UNSIGNED-PAYLOAD"));
    assert_eq!(req.header("x-amz-security-token"), Some("TOKEN/+="));
    let auth = req.header("authorization").unwrap();
    assert!(
        auth.contains("SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token,"),
        "{auth}"
    );
    assert!(
        !auth.contains("content-length"),
        "content-length is not signed"
    );
    assert!(server_verifies(&req, "SECRET", "us-east-1"));
    // The token is a secret: Debug of the request hides it and the signature.
    let dbg = format!("{req:?}");
    assert!(!dbg.contains("TOKEN/+="), "{dbg}");
    assert!(!dbg.contains("Signature="), "{dbg}");
}

#[test]
fn signing_again_replaces_the_signer_headers() {
    let creds = Credentials::new("AKID", "SECRET", Some("TOKEN".into()));
    let mut req = doc_endpoint().request(Method::Get, "examplebucket", Some("k"));
    sign::sign(
        &mut req,
        &creds,
        "us-east-1",
        at(T2013),
        PayloadMode::Signed,
    )
    .unwrap();
    let first = req.header("authorization").unwrap().to_string();
    sign::sign(
        &mut req,
        &creds,
        "us-east-1",
        at(T2013 + 60),
        PayloadMode::Signed,
    )
    .unwrap();
    for name in [
        "authorization",
        "x-amz-date",
        "x-amz-content-sha256",
        "x-amz-security-token",
    ] {
        assert_eq!(
            req.headers.iter().filter(|(n, _)| n == name).count(),
            1,
            "{name} once"
        );
    }
    assert_eq!(req.header("x-amz-date"), Some("20130524T000100Z"));
    assert_ne!(req.header("authorization").unwrap(), first);
    assert!(server_verifies(&req, "SECRET", "us-east-1"));
}

#[test]
fn a_host_header_in_the_request_is_refused() {
    let mut req = doc_endpoint().request(Method::Get, "examplebucket", Some("k"));
    req.set_header("host", "other.example");
    let err = sign::sign(
        &mut req,
        &doc_creds(),
        "us-east-1",
        at(T2013),
        PayloadMode::Signed,
    )
    .unwrap_err();
    assert!(
        matches!(err, Error::Config(ref m) if m.contains("host")),
        "{err}"
    );
}

#[test]
fn custom_endpoint_port_is_in_the_signed_host() {
    let endpoint = Endpoint::parse("http://127.0.0.1:9000", "us-east-1", None).unwrap();
    let mut req = endpoint.request(Method::Put, "bucket", Some("k"));
    assert_eq!(req.host, "127.0.0.1:9000");
    sign::sign(
        &mut req,
        &doc_creds(),
        "us-east-1",
        at(T2013),
        PayloadMode::Signed,
    )
    .unwrap();
    assert!(server_verifies(
        &req,
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "us-east-1"
    ));

    let endpoint = Endpoint::parse("http://[fd00::1]:9000", "us-east-1", None).unwrap();
    let mut req = endpoint.request(Method::Put, "bucket", Some("k"));
    assert_eq!(req.host, "[fd00::1]:9000");
    sign::sign(
        &mut req,
        &doc_creds(),
        "us-east-1",
        at(T2013),
        PayloadMode::Signed,
    )
    .unwrap();
    assert!(server_verifies(
        &req,
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "us-east-1"
    ));
}

#[test]
fn payload_hashes_over_chunks() {
    assert_eq!(payload_sha256_hex(&Body::empty()), EMPTY_SHA256);
    assert_eq!(
        content_md5_base64(&Body::empty()),
        "1B2M2Y8AsgTpgAmY7PhCfg=="
    );
    let whole = Body::from(b"The quick brown fox jumps over the lazy dog".to_vec());
    let parts = Body::from_chunks(
        ["The quick ", "brown fox", "", " jumps over the lazy dog"]
            .iter()
            .map(|s| Bytes::from_static(s.as_bytes()))
            .collect(),
    );
    assert_eq!(
        payload_sha256_hex(&whole),
        "d7a8fbb307d7809469ca9abcb0082e4f8d5651e46d3cdb762d02d0bf37c9e592"
    );
    assert_eq!(payload_sha256_hex(&parts), payload_sha256_hex(&whole));
    // MD5 9e107d9d372bb6826bd81d3542a419d6
    assert_eq!(content_md5_base64(&whole), "nhB9nTcrtoJr2B01QqQZ1g==");
    assert_eq!(content_md5_base64(&parts), content_md5_base64(&whole));
}

// ---------------------------------------------------------------------------------------------
// Credentials.

fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |name| {
        vars.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| (*v).to_string())
    }
}

#[test]
fn credentials_from_lookup() {
    let c = Credentials::from_lookup(env(&[
        ("AWS_ACCESS_KEY_ID", "AKID"),
        ("AWS_SECRET_ACCESS_KEY", "SECRET"),
        ("AWS_SESSION_TOKEN", "TOKEN"),
    ]))
    .unwrap();
    assert_eq!(c, Credentials::new("AKID", "SECRET", Some("TOKEN".into())));

    let c = Credentials::from_lookup(env(&[
        ("AWS_ACCESS_KEY_ID", "AKID"),
        ("AWS_SECRET_ACCESS_KEY", "SECRET"),
        ("AWS_SESSION_TOKEN", ""),
    ]))
    .unwrap();
    assert_eq!(c.session_token, None, "an empty token is no token");
}

#[test]
fn credentials_errors_name_the_variable() {
    let msg = |vars: &[(&str, &str)]| match Credentials::from_lookup(env(vars)) {
        Err(Error::Config(m)) => m,
        other => panic!("{other:?}"),
    };
    assert!(msg(&[]).contains("AWS_ACCESS_KEY_ID"));
    assert!(msg(&[("AWS_ACCESS_KEY_ID", "AKID")]).contains("AWS_SECRET_ACCESS_KEY"));
    assert!(
        msg(&[("AWS_ACCESS_KEY_ID", "AKID"), ("AWS_SECRET_ACCESS_KEY", "")])
            .contains("AWS_SECRET_ACCESS_KEY")
    );
    let m = msg(&[
        ("AWS_ACCESS_KEY_ID", "AKID"),
        ("AWS_SECRET_ACCESS_KEY", "SECRET\n"),
    ]);
    assert!(
        m.contains("AWS_SECRET_ACCESS_KEY") && m.contains("whitespace"),
        "{m}"
    );
    assert!(!m.contains("SECRET\n"), "the value is not repeated: {m}");
}

#[test]
fn region_from_lookup_prefers_aws_region() {
    let r = Credentials::region_from_lookup(env(&[
        ("AWS_REGION", "eu-west-3"),
        ("AWS_DEFAULT_REGION", "us-west-2"),
    ]));
    assert_eq!(r.unwrap(), "eu-west-3");
    let r = Credentials::region_from_lookup(env(&[("AWS_DEFAULT_REGION", "us-west-2")]));
    assert_eq!(r.unwrap(), "us-west-2");
    match Credentials::region_from_lookup(env(&[])) {
        Err(Error::Config(m)) => {
            assert!(
                m.contains("AWS_REGION") && m.contains("AWS_DEFAULT_REGION"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn credentials_debug_redacts_secret_and_token() {
    let c = Credentials::new(
        "AKIAIOSFODNN7EXAMPLE",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        Some("FwoGZXIvYXdzEXAMPLETOKEN".into()),
    );
    let dbg = format!("{c:?} {c:#?}");
    assert!(
        dbg.contains("AKIAIOSFODNN7EXAMPLE"),
        "the key id is shown: {dbg}"
    );
    assert!(!dbg.contains("wJalrXUtnFEMI"), "{dbg}");
    assert!(!dbg.contains("FwoGZXIvYXdzEXAMPLETOKEN"), "{dbg}");
    assert!(dbg.contains("<redacted>"));
    let none = format!("{:?}", Credentials::new("A", "B", None));
    assert!(none.contains("session_token: None"), "{none}");
}
