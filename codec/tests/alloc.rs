//! Design principle 10: the hot paths allocate nothing per message in steady state. A counting
//! global allocator measures it: after a warm-up, each path below runs many times with the
//! counter on, and must not allocate once.
//!
//! Counting is per thread (a thread-local flag), so tests running in parallel and the test
//! harness's own threads are never counted. On the first allocation inside a measured section
//! the allocator captures a backtrace, and a failing assertion prints it: it names the line
//! that allocated.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::backtrace::Backtrace;
use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use spillway_codec::session::{Event, Sent, Session, SessionConfig};
use spillway_codec::{
    ConnAck, Connect, DecodeOptions, Decoded, EncodeOptions, MqttStr, Outbound, Packet, PacketId,
    Protocol, Publish, QoS, ReasonCode, decode,
};

struct Counting;

thread_local! {
    // Const-initialised, no destructor: reading them never allocates.
    static ON: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<u64> = const { Cell::new(0) };
    /// The backtrace of the first allocation in the current measured section.
    static FIRST: RefCell<Option<String>> = const { RefCell::new(None) };
}

fn note() {
    let Ok(true) = ON.try_with(Cell::get) else {
        return;
    };
    let n = COUNT.with(|c| {
        c.set(c.get() + 1);
        c.get()
    });
    if n == 1 {
        // Capturing allocates: switch counting off meanwhile, so it neither counts nor
        // recurses.
        ON.with(|on| on.set(false));
        let bt = Backtrace::force_capture().to_string();
        FIRST.with(|f| *f.borrow_mut() = Some(bt));
        ON.with(|on| on.set(true));
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator; the wrapper only counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` with counting on; returns the allocation count and the first one's backtrace.
fn count<R>(f: impl FnOnce() -> R) -> (u64, Option<String>, R) {
    FIRST.with(|f| f.borrow_mut().take());
    COUNT.with(|c| c.set(0));
    ON.with(|on| on.set(true));
    let r = f();
    ON.with(|on| on.set(false));
    let n = COUNT.with(Cell::get);
    (n, FIRST.with(|f| f.borrow_mut().take()), r)
}

/// Collects the paths that allocated, to report them all at once.
#[derive(Default)]
struct Findings(Vec<String>);

impl Findings {
    /// Runs `f` once to warm up, then again counting (`ops` operations), and records any
    /// allocation.
    fn measure(&mut self, what: &str, ops: u64, mut f: impl FnMut()) {
        // Warm-up: buffers grow to their working size here.
        f();
        let (n, bt, ()) = count(&mut f);
        if n > 0 {
            self.0.push(format!(
                "{what}: {n} allocations in {ops} operations; first one at:\n{}",
                bt.unwrap_or_default()
            ));
        }
    }

    fn assert_none(self) {
        assert!(self.0.is_empty(), "allocated:\n\n{}", self.0.join("\n\n"));
    }
}

const TOPIC: &str = "spillway/alloc/sensor-7/temperature";
const ROUNDS: usize = 2_000;

/// A payload sliced from a larger shared buffer, like a payload taken from an Iggy reply.
fn payload() -> Bytes {
    Bytes::from(vec![0xa5u8; 4096]).slice(100..200)
}

fn publish(protocol: Protocol, qos: QoS, id: Option<PacketId>) -> Publish {
    let mut p = Publish::new(MqttStr::from_static(TOPIC).unwrap(), payload());
    p.qos = qos;
    p.packet_id = id;
    if protocol == Protocol::V5 {
        p.properties.user_properties = vec![
            (
                MqttStr::from_static("iggy-stream").unwrap(),
                MqttStr::from_static("telemetry").unwrap(),
            ),
            (
                MqttStr::from_static("iggy-offset").unwrap(),
                MqttStr::from_static("1234567").unwrap(),
            ),
        ];
    }
    p
}

/// Appends a PUBACK for `id` (without allocating: it is used inside measured sections).
fn put_puback(buf: &mut BytesMut, protocol: Protocol, id: u16) {
    let [hi, lo] = id.to_be_bytes();
    match protocol {
        Protocol::V311 => buf.extend_from_slice(&[0x40, 0x02, hi, lo]),
        // Reason 0x10 (no matching subscribers) and an empty property block.
        Protocol::V5 => buf.extend_from_slice(&[0x40, 0x04, hi, lo, 0x10, 0x00]),
    }
}

fn encode_header(f: &mut Findings) {
    for protocol in [Protocol::V311, Protocol::V5] {
        let p = publish(protocol, QoS::AtLeastOnce, PacketId::new(7));
        let opts = EncodeOptions::new(protocol);
        let mut buf = BytesMut::with_capacity(1024);
        f.measure(
            &format!("Publish::encode_header {protocol}"),
            ROUNDS as u64,
            || {
                for _ in 0..ROUNDS {
                    buf.clear();
                    let payload = p.encode_header(&mut buf, &opts).unwrap();
                    assert_eq!(payload.len(), 100);
                }
            },
        );
    }
}

fn outbound(f: &mut Findings) {
    // Payloads shared as their own chunks (inline_max 0), then copied next to their headers
    // (the default for 100-byte payloads).
    for inline_max in [0, 512] {
        for protocol in [Protocol::V311, Protocol::V5] {
            let opts = EncodeOptions::new(protocol);
            // More packets than fit the header buffer at once, so it is reclaimed many times.
            let p = publish(protocol, QoS::AtLeastOnce, PacketId::new(9));
            let mut out = Outbound::with_capacity(4096, 64);
            out.set_inline_max(inline_max);
            f.measure(
                &format!(
                    "Outbound push_publish + seal + advance {protocol}, inline_max {inline_max}"
                ),
                (ROUNDS * 8) as u64,
                || {
                    for _ in 0..ROUNDS {
                        for _ in 0..8 {
                            out.push_publish(&p, &opts).unwrap();
                        }
                        out.seal();
                        if inline_max == 0 {
                            assert_eq!(out.chunk_count(), 16, "8 headers, 8 shared payloads");
                        } else {
                            // One header block, or two when the block was renewed meanwhile.
                            assert!(out.chunk_count() <= 2, "{}", out.chunk_count());
                        }
                        // Written in two parts, the first ending inside a chunk.
                        let n = out.len();
                        out.advance(n / 2 + 3);
                        out.advance(n - (n / 2 + 3));
                        assert!(out.is_empty());
                    }
                },
            );
        }
    }
}

fn decode_puback(f: &mut Findings) {
    for protocol in [Protocol::V311, Protocol::V5] {
        let mut wire = BytesMut::new();
        for id in 1..=100u16 {
            put_puback(&mut wire, protocol, id);
        }
        let opts = DecodeOptions::new(protocol);
        let mut buf = BytesMut::with_capacity(wire.len());
        f.measure(
            &format!("decode PUBACK {protocol}"),
            (ROUNDS * 100) as u64,
            || {
                for _ in 0..ROUNDS {
                    // Refilled within its capacity, as a receive buffer is after each read.
                    buf.extend_from_slice(&wire);
                    for id in 1..=100u16 {
                        match decode(&mut buf, &opts).unwrap() {
                            Decoded::Packet(Packet::PubAck(a)) => {
                                assert_eq!(a.packet_id.get(), id)
                            }
                            other => panic!("{other:?}"),
                        }
                    }
                    assert!(buf.is_empty());
                }
            },
        );
    }
}

/// A connected session: CONNECT queued and drained, CONNACK fed.
fn connected(protocol: Protocol, alias_max: u16, out: &mut Outbound, now: Instant) -> Session<u64> {
    let mut cfg = SessionConfig::new(protocol, 32);
    cfg.topic_alias_maximum = alias_max;
    let mut s = Session::new(cfg);
    let c = Connect::new(protocol, MqttStr::from_static("alloc-test").unwrap());
    s.connect(&c, out, now).unwrap();
    out.seal();
    out.advance(out.len());
    let mut ack = ConnAck::new(false, ReasonCode::SUCCESS);
    if protocol == Protocol::V5 && alias_max > 0 {
        ack.properties.topic_alias_maximum = Some(alias_max);
    }
    match s.handle(Packet::ConnAck(ack), out, now).unwrap() {
        Some(Event::Connected { .. }) => {}
        other => panic!("{other:?}"),
    }
    s
}

fn session(f: &mut Findings) {
    // (protocol, topic alias maximum)
    for (protocol, alias_max) in [(Protocol::V311, 0), (Protocol::V5, 0), (Protocol::V5, 8)] {
        let now = Instant::now();
        let mut out = Outbound::with_capacity(8 * 1024, 64);
        let mut s = connected(protocol, alias_max, &mut out, now);
        let opts = s.decode_options();
        let mut rx = BytesMut::with_capacity(256);
        const BURST: usize = 8;
        let cycles = ROUNDS;
        // The messages are made before counting: making one (topic, payload, properties)
        // is the caller's work, not the session's.
        let mut pending: Vec<Publish> = Vec::with_capacity(2 * cycles * BURST);
        for _ in 0..2 * cycles * BURST {
            pending.push(publish(protocol, QoS::AtLeastOnce, None));
        }
        let mut token = 0u64;
        let mut ids: Vec<PacketId> = Vec::with_capacity(BURST);
        let mut cycle = |s: &mut Session<u64>| {
            for _ in 0..cycles {
                ids.clear();
                for _ in 0..BURST {
                    let p = pending.pop().unwrap();
                    token += 1;
                    match s.publish(p, token, &mut out, now) {
                        Ok(Sent::Tracked(id)) => ids.push(id),
                        other => panic!("{:?}", other.map_err(|e| e.kind)),
                    }
                }
                // Written to the socket.
                out.seal();
                let n = out.len();
                out.advance(n);
                // The broker acknowledges in order.
                for &id in &ids {
                    put_puback(&mut rx, protocol, id.get());
                    let packet = match decode(&mut rx, &opts).unwrap() {
                        Decoded::Packet(p) => p,
                        other => panic!("{other:?}"),
                    };
                    match s.handle(packet, &mut out, now + Duration::from_millis(1)) {
                        Ok(Some(Event::Completed(c))) => {
                            assert_eq!(c.packet_id, id);
                            assert!(c.is_success());
                        }
                        other => panic!("{other:?}"),
                    }
                }
                s.poll_transmit(&mut out, now).unwrap();
                assert!(out.is_empty());
                assert_eq!(s.in_flight(), 0);
            }
        };
        // Warm-up: every id of the window used once, buffers at their working size.
        cycle(&mut s);
        let (n, bt, ()) = count(|| cycle(&mut s));
        if n > 0 {
            f.0.push(format!(
                "Session publish QoS 1 + PUBACK {protocol} (topic alias maximum {alias_max}): \
                 {n} allocations in {} cycles; first one at:\n{}",
                cycles * BURST,
                bt.unwrap_or_default()
            ));
        }
    }
}

#[test]
fn the_counter_counts() {
    let (n, bt, v) = count(|| Vec::<u8>::with_capacity(10));
    assert_eq!(n, 1);
    assert!(bt.is_some_and(|b| b.contains("the_counter_counts")));
    drop(v);
    let (n, bt, ()) = count(|| {});
    assert_eq!((n, bt), (0, None));
}

#[test]
fn publish_encode_header_allocates_nothing() {
    let mut f = Findings::default();
    encode_header(&mut f);
    f.assert_none();
}

#[test]
fn puback_decode_allocates_nothing() {
    let mut f = Findings::default();
    decode_puback(&mut f);
    f.assert_none();
}

#[test]
fn outbound_cycle_allocates_nothing() {
    let mut f = Findings::default();
    outbound(&mut f);
    f.assert_none();
}

#[test]
fn session_publish_ack_cycle_allocates_nothing() {
    let mut f = Findings::default();
    session(&mut f);
    f.assert_none();
}
