//! The client and the streaming uploader against a real S3 server: s3s-fs started by the
//! harness (it verifies SigV4 signatures and stores objects as files), and the harness's
//! fault-injecting proxy in front of it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use md5::{Digest, Md5};
use spillway_s3::actions::{get_object, head_bucket, head_object, put_object};
use spillway_s3::client::{ClientConfig, S3Client};
use spillway_s3::credentials::Credentials;
use spillway_s3::endpoint::Endpoint;
use spillway_s3::multipart::MIB;
use spillway_s3::options::ObjectOptions;
use spillway_s3::retry::RetryPolicy;
use spillway_s3::sign::PayloadMode;
use spillway_s3::upload::{Gauge, ObjectWriter, UploadConfig};
use spillway_s3::{Body, Error};
use spillway_tests::{FaultPlan, FaultProxy, S3Server};

/// Runs `f` on a monoio runtime (io_uring where the kernel has it) with timers enabled.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
        .enable_timer()
        .build()
        .expect("monoio runtime")
        .block_on(f)
}

fn client_for(endpoint: &str, server: &S3Server, secret: &str, mode: PayloadMode) -> S3Client {
    let ep = Endpoint::parse(endpoint, server.region(), None).unwrap();
    let mut cfg = ClientConfig::new(ep, Credentials::new(server.access_key(), secret, None));
    cfg.payload = mode;
    cfg.retry = RetryPolicy {
        max_attempts: 8,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(100),
    };
    cfg.transport.request_timeout = Duration::from_secs(2);
    S3Client::new(cfg).unwrap()
}

/// A client (unsigned payloads) whose requests go through the fault proxy to `server`.
fn proxied_client(proxy: &FaultProxy, server: &S3Server) -> S3Client {
    let endpoint = format!("http://{}", proxy.host_port());
    client_for(
        &endpoint,
        server,
        server.secret_key(),
        PayloadMode::Unsigned,
    )
}

fn client(server: &S3Server, mode: PayloadMode) -> S3Client {
    client_for(&server.endpoint(), server, server.secret_key(), mode)
}

/// Deterministic data: chunk `i` of `len` bytes, different everywhere.
fn chunk(i: u64, len: usize) -> Bytes {
    let mut v = Vec::with_capacity(len);
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    Bytes::from(v)
}

/// Streams `total` bytes in chunks of odd sizes (so parts split chunks) into `w`; returns the
/// md5 of every part boundary's data as S3 computes the multipart ETag, and the whole md5.
async fn stream(w: &mut ObjectWriter, total: u64, part_size: u64) -> (Vec<[u8; 16]>, [u8; 16]) {
    let mut whole = Md5::new();
    let mut part = Md5::new();
    let mut in_part = 0u64;
    let mut part_md5s = Vec::new();
    let mut sent = 0u64;
    let mut i = 0;
    while sent < total {
        let len = (((i * 7919) % 700_000) + 300_000).min(total - sent) as usize;
        let c = chunk(i, len);
        whole.update(&c);
        let mut rest = &c[..];
        while !rest.is_empty() {
            let take = rest.len().min((part_size - in_part) as usize);
            part.update(&rest[..take]);
            in_part += take as u64;
            rest = &rest[take..];
            if in_part == part_size {
                part_md5s.push(part.finalize_reset().into());
                in_part = 0;
            }
        }
        w.append(c).await.unwrap();
        sent += len as u64;
        i += 1;
    }
    if in_part > 0 {
        part_md5s.push(part.finalize().into());
    }
    (part_md5s, whole.finalize().into())
}

fn multipart_etag(part_md5s: &[[u8; 16]]) -> String {
    let mut all = Md5::new();
    for p in part_md5s {
        all.update(p);
    }
    format!("{}-{}", hex::encode(all.finalize()), part_md5s.len())
}

fn file_md5(path: &std::path::Path) -> [u8; 16] {
    use std::io::Read;
    let mut f = std::fs::File::open(path).unwrap();
    let mut h = Md5::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    h.finalize().into()
}

#[test]
fn multipart_256_mib_reads_back_byte_for_byte_with_the_multipart_etag() {
    let server = S3Server::start().unwrap();
    block_on(async {
        let client = Rc::new(client(&server, PayloadMode::Signed));
        let part = 8 * MIB;
        let mut w = ObjectWriter::new(
            client.clone(),
            server.bucket(),
            "big/object.bin",
            &UploadConfig::new(part, 4),
        )
        .unwrap();
        let (parts, whole) = stream(&mut w, 256 * MIB, part).await;
        let info = w.close().await.unwrap();
        assert_eq!(info.size, 256 * MIB);
        assert_eq!(info.parts, 32);
        assert_eq!(info.etag.trim_matches('"'), multipart_etag(&parts));
        assert_eq!(file_md5(&server.object_path("big/object.bin")), whole);
        // And through the API: HEAD gives the size, a ranged GET the bytes at a part boundary.
        let req = head_object::request(
            client.endpoint(),
            server.bucket(),
            "big/object.bin",
            &ObjectOptions::default(),
        )
        .unwrap();
        let head = client.execute(req, head_object::parse).await.unwrap();
        assert_eq!(head.size, 256 * MIB);
    });
}

#[test]
fn small_objects_are_one_put_object_in_both_payload_modes() {
    let server = S3Server::start().unwrap();
    block_on(async {
        for (mode, key) in [
            (PayloadMode::Signed, "small/signed.txt"),
            (PayloadMode::Unsigned, "small/unsigned.txt"),
        ] {
            let client = Rc::new(client(&server, mode));
            let mut w = ObjectWriter::new(
                client.clone(),
                server.bucket(),
                key,
                &UploadConfig::new(5 * MIB, 2),
            )
            .unwrap();
            w.append(Bytes::from_static(b"hello ")).await.unwrap();
            w.append(Bytes::from_static(b"world")).await.unwrap();
            let info = w.close().await.unwrap();
            assert_eq!((info.size, info.parts), (11, 0));
            assert_eq!(
                info.etag.trim_matches('"'),
                hex::encode(Md5::digest(b"hello world"))
            );
            let req = get_object::request(
                client.endpoint(),
                server.bucket(),
                key,
                None,
                &ObjectOptions::default(),
            )
            .unwrap();
            let got = client.execute(req, get_object::parse).await.unwrap();
            assert_eq!(&got.body[..], b"hello world");
            assert_eq!(client.stats().retries, 0);
        }
    });
}

#[test]
fn a_wrong_secret_is_signature_does_not_match_without_retries() {
    let server = S3Server::start().unwrap();
    block_on(async {
        let client = client_for(
            &server.endpoint(),
            &server,
            "not-the-secret",
            PayloadMode::Signed,
        );
        let req = put_object::request(
            client.endpoint(),
            server.bucket(),
            "k",
            Body::from(b"x".to_vec()),
            &ObjectOptions::default(),
        )
        .unwrap();
        let err = client.execute(req, put_object::parse).await.unwrap_err();
        assert_eq!(err.s3_code(), Some("SignatureDoesNotMatch"), "{err}");
        assert!(err.to_string().contains("SignatureDoesNotMatch"), "{err}");
        assert_eq!(
            client.stats().attempts,
            1,
            "a permanent error is not retried"
        );
    });
}

#[test]
fn the_probe_names_a_missing_bucket() {
    let server = S3Server::start().unwrap();
    block_on(async {
        let client = client(&server, PayloadMode::Unsigned);
        let req = head_bucket::request(client.endpoint(), "no-such-bucket").unwrap();
        let err = client.execute(req, head_bucket::parse).await.unwrap_err();
        assert_eq!(err.s3_code(), Some("NoSuchBucket"), "{err}");
        let req = head_bucket::request(client.endpoint(), server.bucket()).unwrap();
        client.execute(req, head_bucket::parse).await.unwrap();
    });
}

#[test]
fn metadata_reaches_the_store() {
    let server = S3Server::start().unwrap();
    block_on(async {
        let client = client(&server, PayloadMode::Signed);
        let opts = ObjectOptions {
            content_type: Some("application/x-ndjson".into()),
            metadata: vec![("first-offset".into(), "42".into())],
            content_md5: true,
            ..ObjectOptions::default()
        };
        let req = put_object::request(
            client.endpoint(),
            server.bucket(),
            "meta.jsonl",
            Body::from(b"{}\n".to_vec()),
            &opts,
        )
        .unwrap();
        client.execute(req, put_object::parse).await.unwrap();
        let req = head_object::request(
            client.endpoint(),
            server.bucket(),
            "meta.jsonl",
            &ObjectOptions::default(),
        )
        .unwrap();
        let head = client.execute(req, head_object::parse).await.unwrap();
        assert_eq!(head.size, 3);
        assert!(
            head.metadata
                .iter()
                .any(|(k, v)| k == "first-offset" && v == "42"),
            "{:?}",
            head.metadata
        );
    });
}

#[test]
fn faults_on_a_share_of_requests_still_give_a_byte_identical_object() {
    let server = S3Server::start().unwrap();
    let plan = FaultPlan::seeded(11)
        .drop_mid_body(0.15)
        .status_500(0.1)
        .slow_down_503(0.1)
        .stall(0.05, Duration::from_secs(4))
        .only_methods(&["PUT", "POST"]);
    let proxy = FaultProxy::start(server.addr(), plan).unwrap();
    block_on(async {
        let client = Rc::new(proxied_client(&proxy, &server));
        let part = 5 * MIB;
        let mut w = ObjectWriter::new(
            client.clone(),
            server.bucket(),
            "faulty/object.bin",
            &UploadConfig::new(part, 3),
        )
        .unwrap();
        let (parts, whole) = stream(&mut w, 64 * MIB, part).await;
        let info = w.close().await.unwrap();
        assert_eq!(info.etag.trim_matches('"'), multipart_etag(&parts));
        assert_eq!(file_md5(&server.object_path("faulty/object.bin")), whole);
        let stats = proxy.stats();
        assert!(stats.faults() >= 3, "faults were injected: {stats:?}");
        assert!(client.stats().retries >= 3, "{:?}", client.stats());
    });
}

#[test]
fn a_permanent_403_stops_at_once_with_the_s3_code() {
    let server = S3Server::start().unwrap();
    let proxy =
        FaultProxy::start(server.addr(), FaultPlan::answer_all(403, "AccessDenied")).unwrap();
    block_on(async {
        let client = Rc::new(proxied_client(&proxy, &server));
        let mut w = ObjectWriter::new(
            client.clone(),
            server.bucket(),
            "denied.bin",
            &UploadConfig::new(5 * MIB, 2),
        )
        .unwrap();
        let err = match w.append(chunk(1, 6 * MIB as usize)).await {
            Err(e) => e,
            Ok(()) => w.close().await.unwrap_err(),
        };
        assert!(
            matches!(&err, Error::S3(e) if e.code == "AccessDenied" && e.status == 403),
            "{err}"
        );
        assert!(client.stats().attempts <= 2, "{:?}", client.stats());
    });
}

#[test]
fn a_part_refused_for_good_aborts_the_upload_and_tells_the_caller() {
    let server = S3Server::start().unwrap();
    // Only UploadPart requests are refused; creating and aborting the upload go through.
    let plan = FaultPlan::answer_all(403, "AccessDenied").path_contains("partNumber=");
    let proxy = FaultProxy::start(server.addr(), plan).unwrap();
    block_on(async {
        let via_proxy = Rc::new(proxied_client(&proxy, &server));
        let mut w = ObjectWriter::new(
            via_proxy.clone(),
            server.bucket(),
            "refused.bin",
            &UploadConfig::new(5 * MIB, 3),
        )
        .unwrap();
        // A byte more than a part: the first part starts at once, the byte is the last part.
        w.append(chunk(1, 5 * MIB as usize + 1)).await.unwrap();
        let upload_id = w
            .upload_id()
            .expect("the first part started the upload")
            .to_owned();
        let err = w.close().await.unwrap_err();
        assert_eq!(err.s3_code(), Some("AccessDenied"), "{err}");
        let stats = proxy.stats();
        assert_eq!(stats.answered_fixed, 2, "both parts refused: {stats:?}");
        assert_eq!(
            stats.forwarded, 2,
            "create and abort reached the store: {stats:?}"
        );
        // The upload is gone: a part sent to it straight to the store is refused.
        let direct = client(&server, PayloadMode::Unsigned);
        let req = spillway_s3::actions::upload_part::request(
            direct.endpoint(),
            server.bucket(),
            "refused.bin",
            &upload_id,
            1,
            Body::from(vec![0u8; 16]),
            &ObjectOptions::default(),
        )
        .unwrap();
        let gone = direct
            .execute(req, spillway_s3::actions::upload_part::parse)
            .await;
        assert!(gone.is_err(), "the aborted upload still takes parts");
        assert!(!server.object_path("refused.bin").exists());
    });
}

/// A total over several writers (a sink's figure, as `UploadConfig::total`) counts what each
/// holds, tells its watcher every change, and is back at zero once each writer is completed,
/// refused or dropped unsent: a count left behind by a writer that is gone would keep an
/// engine paced by it from polling again.
#[test]
fn a_total_counts_every_writer_and_is_zero_after_completion_refusal_and_drop() {
    let server = S3Server::start().unwrap();
    let plan = FaultPlan::answer_all(403, "AccessDenied").path_contains("partNumber=");
    let proxy = FaultProxy::start(server.addr(), plan).unwrap();
    block_on(async {
        let seen = Rc::new(RefCell::new(Vec::new()));
        let told = Rc::clone(&seen);
        let total = Rc::new(Gauge::watched(move |n| told.borrow_mut().push(n)));
        let mut cfg = UploadConfig::new(5 * MIB, 2);
        cfg.total = Some(Rc::clone(&total));
        let direct = Rc::new(client(&server, PayloadMode::Unsigned));
        let refusing = Rc::new(proxied_client(&proxy, &server));

        // A multipart object (a part under way, 1 MiB waiting) and a small one never sent.
        let mut a =
            ObjectWriter::new(direct.clone(), server.bucket(), "total/a.bin", &cfg).unwrap();
        a.append(chunk(1, 6 * MIB as usize)).await.unwrap();
        let mut b =
            ObjectWriter::new(direct.clone(), server.bucket(), "total/b.bin", &cfg).unwrap();
        b.append(chunk(2, 1000)).await.unwrap();
        assert_eq!(
            total.current(),
            a.held().current() + b.held().current(),
            "the total is the writers' sum"
        );
        assert!(b.held().current() == 1000 && a.held().current() >= MIB);
        drop(b);
        assert_eq!(
            total.current(),
            a.held().current(),
            "a dropped writer leaves the total"
        );

        // An object whose parts the store refuses: the error comes back, its bytes go.
        let mut c = ObjectWriter::new(refusing, server.bucket(), "total/c.bin", &cfg).unwrap();
        c.append(chunk(3, 5 * MIB as usize + 1)).await.unwrap();
        let err = c.close().await.unwrap_err();
        assert_eq!(err.s3_code(), Some("AccessDenied"), "{err}");
        assert_eq!(total.current(), a.held().current());

        let info = a.close().await.unwrap();
        assert_eq!((info.size, info.parts), (6 * MIB, 2));
        assert_eq!(total.current(), 0, "everything released");
        assert!(total.peak() >= 6 * MIB + 1000, "peak {}", total.peak());
        let seen = seen.borrow();
        assert_eq!(seen.last(), Some(&0), "the watcher saw the last change");
        assert!(seen.len() >= 6, "every change is told: {seen:?}");
    });
}

/// An object of exactly one part is one PutObject (before, a part was cut as soon as a part's
/// worth waited, so it cost CreateMultipartUpload, one UploadPart and Complete); one of exactly
/// two parts is two parts, with no empty part after them.
#[test]
fn an_object_of_exactly_one_part_is_one_put_object() {
    let server = S3Server::start().unwrap();
    block_on(async {
        let client = Rc::new(client(&server, PayloadMode::Unsigned));
        let part = 5 * MIB;
        for (key, size, parts) in [("exact/one.bin", part, 0), ("exact/two.bin", 2 * part, 2)] {
            let mut w = ObjectWriter::new(
                client.clone(),
                server.bucket(),
                key,
                &UploadConfig::new(part, 2),
            )
            .unwrap();
            let mut sent = 0;
            let mut i = 0;
            while sent < size {
                let len = (size - sent).min(MIB + 12_345);
                w.append(chunk(i, len as usize)).await.unwrap();
                sent += len;
                i += 1;
            }
            let info = w.close().await.unwrap();
            assert_eq!((info.size, info.parts), (size, parts), "{key}");
            assert_eq!(
                std::fs::metadata(server.object_path(key)).unwrap().len(),
                size
            );
        }
    });
}
