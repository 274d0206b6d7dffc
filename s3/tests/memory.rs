//! Memory stays bounded while streaming: 1 GiB goes through the uploader into s3s-fs while a
//! counting global allocator records the peak of live heap bytes. The bound is the issue's:
//! part size × (parts in flight + 1) + 1 MiB.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::rc::Rc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use spillway_s3::actions::head_object;
use spillway_s3::client::{ClientConfig, S3Client};
use spillway_s3::credentials::Credentials;
use spillway_s3::endpoint::Endpoint;
use spillway_s3::multipart::MIB;
use spillway_s3::options::ObjectOptions;
use spillway_s3::retry::RetryPolicy;
use spillway_s3::sign::PayloadMode;
use spillway_s3::upload::{ObjectWriter, UploadConfig};
use spillway_tests::S3Server;

struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);
static PEAK: AtomicI64 = AtomicI64::new(0);

fn grew(n: usize) {
    let now = LIVE.fetch_add(n as i64, Ordering::Relaxed) + n as i64;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn shrank(n: usize) {
    LIVE.fetch_sub(n as i64, Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to the system allocator; the wrapper only counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            grew(new_size - layout.size());
        } else {
            shrank(layout.size() - new_size);
        }
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        shrank(layout.size());
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn streaming_one_gib_holds_at_most_part_size_times_in_flight_plus_one() {
    let server = S3Server::start().unwrap();
    let part = 8 * MIB;
    let in_flight = 2usize;
    let total = 1024 * MIB;
    let chunk_len = 256 * 1024usize;
    let bound = (part * (in_flight as u64 + 1) + MIB) as i64;
    let (peak_heap, peak_held) = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
        .enable_timer()
        .build()
        .expect("runtime")
        .block_on(async {
            let ep = Endpoint::parse(&server.endpoint(), server.region(), None).unwrap();
            let mut cfg = ClientConfig::new(
                ep,
                Credentials::new(server.access_key(), server.secret_key(), None),
            );
            cfg.payload = PayloadMode::Unsigned;
            cfg.retry = RetryPolicy {
                max_attempts: 4,
                base_delay: Duration::from_millis(10),
                max_delay: Duration::from_millis(200),
            };
            let client = Rc::new(S3Client::new(cfg).unwrap());
            let mut w = ObjectWriter::new(
                client.clone(),
                server.bucket(),
                "stream/1gib.bin",
                &UploadConfig::new(part, in_flight),
            )
            .unwrap();
            // Everything set up: measure from here.
            let base = LIVE.load(Ordering::Relaxed);
            PEAK.store(base, Ordering::Relaxed);
            let mut sent = 0u64;
            let mut i = 0u8;
            while sent < total {
                // A fresh allocation per chunk, as chunks of a poll reply would be.
                let c = Bytes::from(vec![i; chunk_len]);
                w.append(c).await.unwrap();
                sent += chunk_len as u64;
                i = i.wrapping_add(1);
            }
            let peak_held = w.held().peak();
            let info = w.close().await.unwrap();
            assert_eq!((info.size, info.parts), (total, 128));
            let peak = PEAK.load(Ordering::Relaxed) - base;
            let req = head_object::request(
                client.endpoint(),
                server.bucket(),
                "stream/1gib.bin",
                &ObjectOptions::default(),
            )
            .unwrap();
            assert_eq!(
                client.execute(req, head_object::parse).await.unwrap().size,
                total
            );
            (peak, peak_held)
        });
    eprintln!(
        "peak heap {:.1} MiB, peak held by the uploader {:.1} MiB, bound {:.1} MiB",
        peak_heap as f64 / MIB as f64,
        peak_held as f64 / MIB as f64,
        bound as f64 / MIB as f64
    );
    assert!(
        peak_held as i64 <= bound,
        "uploader held {peak_held} > {bound}"
    );
    assert!(peak_heap <= bound, "heap peak {peak_heap} > {bound}");
    // And it really streamed: more than one part was held at some point.
    assert!(peak_held > part, "{peak_held}");
}
