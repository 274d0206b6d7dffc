//! `spillway-bench codec`: spillway-codec against mqttbytes 0.6 (modules v4 and v5) on the
//! same packets.
//!
//! What "encode" means differs by design. Ours appends the PUBLISH header to a reusable
//! `BytesMut` and hands the payload back as its own `Bytes` (it goes out as its own iovec, so
//! it is never copied; handing it back costs a reference-count increment, and dropping it a
//! decrement, both counted here). mqttbytes writes the whole packet, payload copied, into a
//! reusable `BytesMut`. Both clear their buffer before every operation.
//!
//! Decoding reads from a `BytesMut` filled with a batch of packets back to back, the way a
//! receive buffer looks after a read; refilling it is not timed, for either side.
//!
//! Before anything is timed, both sides encode the same bytes and decode each other's
//! packets, so the two are known to do the same work.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use mqttbytes::{v4, v5};
use spillway_codec::{
    Connect, DecodeOptions, Decoded, EncodeOptions, MqttStr, Outbound, Packet, PacketId, Protocol,
    Publish, QoS, decode,
};

use crate::harness::{Body, Plan, compare, each};
use crate::report::{Better, Row};

pub const PEER: &str = "mqttbytes 0.6";

/// The goal: ours at least this many times faster than the peer on every time row.
pub const TARGET_RATIO: f64 = 3.0;

const TOPIC: &str = "spillway/bench/sensor-0042/temperature";
const PAYLOAD_LEN: usize = 100;
const PACKET_ID: u16 = 4242;
const USER_PROPERTIES: [(&str, &str); 2] =
    [("iggy-stream", "telemetry"), ("iggy-offset", "1234567")];
const CLIENT_ID: &str = "spillway-shard-03-mqtt-01";
const USERNAME: &str = "spillway";
const PASSWORD: &str = "s3cr3t-passw0rd";
const KEEP_ALIVE: u16 = 30;
const SESSION_EXPIRY: u32 = 3600;
const RECEIVE_MAXIMUM: u16 = 1024;
/// Packets per receive buffer in the decode rows.
const BATCH: usize = 1000;
/// mqttbytes' limit on the remaining length it accepts.
const PEER_MAX: usize = 1 << 20;

/// What each row measures, printed under the tables.
pub const LEGEND: &[(&str, &str)] = &[
    (
        "publish_encode_v311",
        "PUBLISH QoS 1, 100-byte payload, 38-byte topic; ours: header + payload handed back",
    ),
    (
        "publish_encode_v5_2props",
        "the same on MQTT 5 with two user properties",
    ),
    (
        "publish_queue_v311",
        "the sink's write path: 64 PUBLISH (100 B) queued in an Outbound for one vectored \
         write (small payloads copied next to their header), then consumed; mqttbytes: the same \
         64 written into one buffer; per packet",
    ),
    (
        "publish_queue_v5_2props",
        "the same on MQTT 5 with two user properties",
    ),
    (
        "publish_encode_v311_1KiB",
        "publish_encode_v311 with a 1 KiB payload",
    ),
    (
        "publish_encode_v311_16KiB",
        "publish_encode_v311 with a 16 KiB payload",
    ),
    (
        "publish_decode_v311",
        "decode those PUBLISH packets from a buffer of 1,000",
    ),
    ("publish_decode_v5_2props", "the same on MQTT 5"),
    (
        "puback_stream_v311",
        "1,000 PUBACKs (ids 1..1000) decoded one after another; per PUBACK",
    ),
    (
        "puback_stream_v5",
        "the same on MQTT 5, each with reason 0x10 and an empty property block",
    ),
    (
        "connect_roundtrip_v311",
        "encode then decode CONNECT: client id, user name, password, keep alive",
    ),
    (
        "connect_roundtrip_v5",
        "the same on MQTT 5 with Session Expiry Interval and Receive Maximum",
    ),
];

type Result<T> = std::result::Result<T, String>;

fn mqtt_str(s: &'static str) -> Result<MqttStr> {
    MqttStr::from_static(s).map_err(|e| format!("{s:?}: {e}"))
}

fn packet_id() -> Result<PacketId> {
    PacketId::new(PACKET_ID).ok_or_else(|| "packet id 0".to_owned())
}

/// A 100-byte payload sliced out of a larger shared buffer, as a payload sliced out of an
/// Iggy poll reply is: cloning it is an atomic increment, not a copy.
fn payload() -> Bytes {
    payload_of(PAYLOAD_LEN)
}

/// A `len`-byte payload sliced out of a larger shared buffer.
fn payload_of(len: usize) -> Bytes {
    let reply: Vec<u8> = (0..(len + 512) as u32).map(|i| (i % 251) as u8).collect();
    Bytes::from(reply).slice(256..256 + len)
}

/// Payload sizes of the extra encode rows: where handing the payload back (a reference count)
/// starts to beat copying it.
const LARGE_PAYLOADS: [(usize, &str); 2] = [
    (1024, "publish_encode_v311_1KiB"),
    (16 * 1024, "publish_encode_v311_16KiB"),
];

fn our_publish(protocol: Protocol, payload: &Bytes) -> Result<Publish> {
    let mut p = Publish::new(mqtt_str(TOPIC)?, payload.clone());
    p.qos = QoS::AtLeastOnce;
    p.packet_id = Some(packet_id()?);
    if protocol == Protocol::V5 {
        for (k, v) in USER_PROPERTIES {
            p.properties
                .user_properties
                .push((mqtt_str(k)?, mqtt_str(v)?));
        }
    }
    Ok(p)
}

fn peer_publish_v4(payload: &Bytes) -> v4::Publish {
    let mut p = v4::Publish::from_bytes(TOPIC, mqttbytes::QoS::AtLeastOnce, payload.clone());
    p.pkid = PACKET_ID;
    p
}

fn peer_publish_v5(payload: &Bytes) -> v5::Publish {
    let mut p = v5::Publish::from_bytes(TOPIC, mqttbytes::QoS::AtLeastOnce, payload.clone());
    p.pkid = PACKET_ID;
    p.properties = Some(v5::PublishProperties {
        payload_format_indicator: None,
        message_expiry_interval: None,
        topic_alias: None,
        response_topic: None,
        correlation_data: None,
        user_properties: USER_PROPERTIES
            .iter()
            .map(|&(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        subscription_identifiers: Vec::new(),
        content_type: None,
    });
    p
}

fn our_connect(protocol: Protocol) -> Result<Packet> {
    let mut c = Connect::new(protocol, mqtt_str(CLIENT_ID)?);
    c.keep_alive = KEEP_ALIVE;
    c.username = Some(mqtt_str(USERNAME)?);
    c.password = Some(Bytes::from_static(PASSWORD.as_bytes()));
    if protocol == Protocol::V5 {
        c.properties.session_expiry_interval = Some(SESSION_EXPIRY);
        c.properties.receive_maximum = std::num::NonZeroU16::new(RECEIVE_MAXIMUM);
    }
    Ok(Packet::Connect(Box::new(c)))
}

fn peer_connect_v4() -> v4::Connect {
    let mut c = v4::Connect::new(CLIENT_ID);
    c.keep_alive = KEEP_ALIVE;
    c.set_login(USERNAME, PASSWORD);
    c
}

fn peer_connect_v5() -> v5::Connect {
    let mut c = v5::Connect::new(CLIENT_ID);
    c.keep_alive = KEEP_ALIVE;
    c.set_login(USERNAME, PASSWORD);
    c.properties = Some(v5::ConnectProperties {
        session_expiry_interval: Some(SESSION_EXPIRY),
        receive_maximum: Some(RECEIVE_MAXIMUM),
        max_packet_size: None,
        topic_alias_max: None,
        request_response_info: None,
        request_problem_info: None,
        user_properties: Vec::new(),
        authentication_method: None,
        authentication_data: None,
    });
    c
}

/// A PUBACK for `id`: the short form on 3.1.1; on 5 with reason 0x10 (No matching
/// subscribers, what a broker answers when nobody listens) and an empty property block.
fn puback_wire(protocol: Protocol, id: u16) -> Vec<u8> {
    let [hi, lo] = id.to_be_bytes();
    match protocol {
        Protocol::V311 => vec![0x40, 0x02, hi, lo],
        Protocol::V5 => vec![0x40, 0x04, hi, lo, 0x10, 0x00],
    }
}

fn puback_stream(protocol: Protocol) -> Bytes {
    let mut v = Vec::new();
    for id in 1..=BATCH as u16 {
        v.extend_from_slice(&puback_wire(protocol, id));
    }
    Bytes::from(v)
}

fn repeat(packet: &[u8], times: usize) -> Bytes {
    Bytes::from(packet.repeat(times))
}

/// Our PUBLISH as one buffer (header, then the payload handed back).
fn our_publish_wire(p: &Publish, protocol: Protocol) -> Result<Vec<u8>> {
    let mut buf = BytesMut::new();
    let payload = p
        .encode_header(&mut buf, &EncodeOptions::new(protocol))
        .map_err(|e| format!("our PUBLISH does not encode: {e}"))?;
    if payload.as_ptr() != p.payload.as_ptr() {
        return Err("our PUBLISH payload was copied".to_owned());
    }
    let mut v = buf.to_vec();
    v.extend_from_slice(&payload);
    Ok(v)
}

fn check_same(what: &str, ours: &[u8], peer: &[u8]) -> Result<()> {
    if ours == peer {
        Ok(())
    } else {
        Err(format!(
            "{what}: the encodings differ, so the rows would not compare the same work\n ours: {ours:02x?}\n peer: {peer:02x?}"
        ))
    }
}

fn our_decode_all(wire: &Bytes, protocol: Protocol) -> Result<Vec<Packet>> {
    let mut buf = BytesMut::from(&wire[..]);
    let opts = DecodeOptions::new(protocol);
    let mut out = Vec::new();
    while !buf.is_empty() {
        match decode(&mut buf, &opts) {
            Ok(Decoded::Packet(p)) => out.push(p),
            Ok(Decoded::Incomplete { needed }) => {
                return Err(format!(
                    "ours: incomplete packet, {needed} more bytes needed"
                ));
            }
            Err(e) => return Err(format!("ours: {e}")),
        }
    }
    Ok(out)
}

fn peer_decode_all_v4(wire: &Bytes) -> Result<Vec<v4::Packet>> {
    let mut buf = BytesMut::from(&wire[..]);
    let mut out = Vec::new();
    while !buf.is_empty() {
        out.push(v4::read(&mut buf, PEER_MAX).map_err(|e| format!("mqttbytes v4: {e:?}"))?);
    }
    Ok(out)
}

fn peer_decode_all_v5(wire: &Bytes) -> Result<Vec<v5::Packet>> {
    let mut buf = BytesMut::from(&wire[..]);
    let mut out = Vec::new();
    while !buf.is_empty() {
        out.push(v5::read(&mut buf, PEER_MAX).map_err(|e| format!("mqttbytes v5: {e:?}"))?);
    }
    Ok(out)
}

fn expect(cond: bool, what: &str) -> Result<()> {
    if cond {
        Ok(())
    } else {
        Err(format!("sanity check failed: {what}"))
    }
}

/// Both sides encode the same bytes and decode the same values.
fn sanity_checks(payload: &Bytes) -> Result<()> {
    // PUBLISH, both versions.
    let ours = our_publish_wire(&our_publish(Protocol::V311, payload)?, Protocol::V311)?;
    let mut peer = BytesMut::new();
    peer_publish_v4(payload)
        .write(&mut peer)
        .map_err(|e| format!("{e:?}"))?;
    check_same("PUBLISH 3.1.1", &ours, &peer)?;
    let ours_v5 = our_publish_wire(&our_publish(Protocol::V5, payload)?, Protocol::V5)?;
    let mut peer = BytesMut::new();
    peer_publish_v5(payload)
        .write(&mut peer)
        .map_err(|e| format!("{e:?}"))?;
    check_same("PUBLISH 5", &ours_v5, &peer)?;

    let wire = repeat(&ours, 3);
    for p in our_decode_all(&wire, Protocol::V311)? {
        expect(
            matches!(&p, Packet::Publish(p) if p.topic == TOPIC && p.payload == *payload
                && p.packet_id.map(|i| i.get()) == Some(PACKET_ID)),
            "ours decodes the 3.1.1 PUBLISH",
        )?;
    }
    for p in peer_decode_all_v4(&wire)? {
        expect(
            matches!(&p, v4::Packet::Publish(p) if p.topic == TOPIC && p.payload == *payload
                && p.pkid == PACKET_ID),
            "mqttbytes decodes the 3.1.1 PUBLISH",
        )?;
    }
    let wire = repeat(&ours_v5, 3);
    for p in our_decode_all(&wire, Protocol::V5)? {
        expect(
            matches!(&p, Packet::Publish(p) if p.payload == *payload
                && p.properties.user_properties.len() == 2),
            "ours decodes the 5 PUBLISH",
        )?;
    }
    for p in peer_decode_all_v5(&wire)? {
        expect(
            matches!(&p, v5::Packet::Publish(p) if p.payload == *payload
                && p.properties.as_ref().is_some_and(|x| x.user_properties.len() == 2)),
            "mqttbytes decodes the 5 PUBLISH",
        )?;
    }

    // PUBACK streams.
    for protocol in [Protocol::V311, Protocol::V5] {
        let wire = puback_stream(protocol);
        let ours = our_decode_all(&wire, protocol)?;
        expect(ours.len() == BATCH, "ours decodes every PUBACK")?;
        for (i, p) in ours.iter().enumerate() {
            expect(
                matches!(p, Packet::PubAck(a) if usize::from(a.packet_id.get()) == i + 1),
                "ours decodes the PUBACK ids in order",
            )?;
        }
        let ids: Vec<u16> = match protocol {
            Protocol::V311 => peer_decode_all_v4(&wire)?
                .iter()
                .filter_map(|p| match p {
                    v4::Packet::PubAck(a) => Some(a.pkid),
                    _ => None,
                })
                .collect(),
            Protocol::V5 => peer_decode_all_v5(&wire)?
                .iter()
                .filter_map(|p| match p {
                    v5::Packet::PubAck(a) => Some(a.pkid),
                    _ => None,
                })
                .collect(),
        };
        expect(
            ids.iter().copied().eq(1..=BATCH as u16),
            "mqttbytes decodes the PUBACK ids in order",
        )?;
    }
    // CONNECT.
    for protocol in [Protocol::V311, Protocol::V5] {
        let mut ours = BytesMut::new();
        our_connect(protocol)?
            .encode(&mut ours, &EncodeOptions::new(protocol))
            .map_err(|e| e.to_string())?;
        let mut peer = BytesMut::new();
        match protocol {
            Protocol::V311 => peer_connect_v4().write(&mut peer),
            Protocol::V5 => peer_connect_v5().write(&mut peer),
        }
        .map_err(|e| format!("{e:?}"))?;
        check_same(&format!("CONNECT {protocol}"), &ours, &peer)?;
        let wire = ours.freeze();
        let decoded = our_decode_all(&wire, protocol)?;
        expect(
            matches!(decoded.as_slice(), [Packet::Connect(c)] if c.client_id == CLIENT_ID
                && c.password.as_deref() == Some(PASSWORD.as_bytes())
                && c.keep_alive == KEEP_ALIVE),
            "ours decodes CONNECT",
        )?;
        let peer_ok = match protocol {
            Protocol::V311 => matches!(peer_decode_all_v4(&wire)?.as_slice(),
                [v4::Packet::Connect(c)] if c.client_id == CLIENT_ID
                    && c.login.as_ref().is_some_and(|l| l.password == PASSWORD)),
            Protocol::V5 => matches!(peer_decode_all_v5(&wire)?.as_slice(),
                [v5::Packet::Connect(c)] if c.client_id == CLIENT_ID
                    && c.properties.as_ref().is_some_and(|p| p.receive_maximum == Some(RECEIVE_MAXIMUM))),
        };
        expect(peer_ok, "mqttbytes decodes CONNECT")?;
    }
    Ok(())
}

/// A decode body: `decode_one` is called `BATCH` times per fill of a buffer holding `wire`
/// (exactly `BATCH` packets); only the decoding is timed.
fn batch_decoder<F: FnMut(&mut BytesMut)>(
    wire: Bytes,
    mut decode_one: F,
) -> impl FnMut(u64) -> (Duration, u64) {
    let mut buf = BytesMut::with_capacity(wire.len());
    move |n| {
        let mut spent = Duration::ZERO;
        let mut done = 0u64;
        while done < n {
            buf.clear();
            buf.extend_from_slice(&wire);
            let start = Instant::now();
            for _ in 0..BATCH {
                decode_one(&mut buf);
            }
            spent += start.elapsed();
            done += BATCH as u64;
        }
        (spent, done)
    }
}

/// mqttbytes' PUBLISH of either version, written into a buffer.
trait PeerPublish {
    fn write_into(&self, buf: &mut BytesMut) -> bool;
}

impl PeerPublish for v4::Publish {
    #[inline]
    fn write_into(&self, buf: &mut BytesMut) -> bool {
        self.write(buf).is_ok()
    }
}

impl PeerPublish for v5::Publish {
    #[inline]
    fn write_into(&self, buf: &mut BytesMut) -> bool {
        self.write(buf).is_ok()
    }
}

/// The peer's encode body: `per_clear` packets written into a buffer cleared before them
/// (1 for the encode rows, [`QUEUE_BATCH`] for the queue rows).
fn peer_encoder<P: PeerPublish>(p: P, per_clear: usize) -> impl FnMut(u64) -> (Duration, u64) {
    let mut buf = BytesMut::with_capacity(per_clear * 256 + 1024);
    move |n| {
        let start = Instant::now();
        let mut done = 0u64;
        while done < n {
            buf.clear();
            for _ in 0..per_clear {
                let r = black_box(&p).write_into(&mut buf);
                let _ = black_box(r);
            }
            black_box(&mut buf);
            done += per_clear as u64;
        }
        (start.elapsed(), done)
    }
}

/// Packets per batch in the queue rows.
const QUEUE_BATCH: usize = 64;

/// A body that runs `batch` (which handles `QUEUE_BATCH` packets) until `n` packets are done.
fn batch_writer<F: FnMut()>(mut batch: F) -> impl FnMut(u64) -> (Duration, u64) {
    move |n| {
        let start = Instant::now();
        let mut done = 0u64;
        while done < n {
            batch();
            done += QUEUE_BATCH as u64;
        }
        (start.elapsed(), done)
    }
}

fn ours_decoder(wire: Bytes, protocol: Protocol) -> impl FnMut(u64) -> (Duration, u64) {
    let opts = DecodeOptions::new(protocol);
    batch_decoder(wire, move |buf| {
        let _ = black_box(decode(buf, black_box(&opts)));
    })
}

fn peer_decoder_v4(wire: Bytes) -> impl FnMut(u64) -> (Duration, u64) {
    batch_decoder(wire, |buf| {
        let _ = black_box(v4::read(buf, black_box(PEER_MAX)));
    })
}

fn peer_decoder_v5(wire: Bytes) -> impl FnMut(u64) -> (Duration, u64) {
    batch_decoder(wire, |buf| {
        let _ = black_box(v5::read(buf, black_box(PEER_MAX)));
    })
}

fn rows(scenario: &str, plan: &Plan, ours: &mut dyn Body, peer: &mut dyn Body) -> [Row; 2] {
    let (o, p) = compare(plan, ours, peer);
    [
        Row {
            scenario: scenario.to_owned(),
            metric: "ns_per_op",
            ours: o.ns_per_op,
            peer: p.ns_per_op,
            peer_name: PEER,
            unit: "ns/op",
            better: Better::Lower,
        },
        Row {
            scenario: scenario.to_owned(),
            metric: "allocs_per_op",
            ours: o.allocs_per_op,
            peer: p.allocs_per_op,
            peer_name: PEER,
            unit: "allocs/op",
            better: Better::Lower,
        },
    ]
}

/// Runs every codec row and returns the time rows, then the allocation rows.
pub fn run(plan: &Plan, progress: &mut dyn FnMut(&str)) -> Result<Vec<Row>> {
    let payload = payload();
    sanity_checks(&payload)?;
    let mut out: Vec<[Row; 2]> = Vec::new();

    // Encode PUBLISH.
    for protocol in [Protocol::V311, Protocol::V5] {
        let scenario = match protocol {
            Protocol::V311 => "publish_encode_v311",
            Protocol::V5 => "publish_encode_v5_2props",
        };
        progress(scenario);
        let ours_publish = our_publish(protocol, &payload)?;
        let opts = EncodeOptions::new(protocol);
        let mut buf = BytesMut::with_capacity(1024);
        let mut ours = each(move || {
            buf.clear();
            let payload = black_box(&ours_publish).encode_header(&mut buf, black_box(&opts));
            black_box(&mut buf);
            let _ = black_box(payload);
        });
        let r = match protocol {
            Protocol::V311 => {
                let mut peer = peer_encoder(peer_publish_v4(&payload), 1);
                rows(scenario, plan, &mut ours, &mut peer)
            }
            Protocol::V5 => {
                let mut peer = peer_encoder(peer_publish_v5(&payload), 1);
                rows(scenario, plan, &mut ours, &mut peer)
            }
        };
        out.push(r);
    }

    // Encode PUBLISH with larger payloads (3.1.1): the cost of copying grows with the
    // payload, the cost of handing it back does not.
    for (len, scenario) in LARGE_PAYLOADS {
        progress(scenario);
        let payload = payload_of(len);
        let ours_publish = our_publish(Protocol::V311, &payload)?;
        let opts = EncodeOptions::new(Protocol::V311);
        let mut buf = BytesMut::with_capacity(len + 1024);
        let mut ours = each(move || {
            buf.clear();
            let payload = black_box(&ours_publish).encode_header(&mut buf, black_box(&opts));
            black_box(&mut buf);
            let _ = black_box(payload);
        });
        let p = peer_publish_v4(&payload);
        let mut buf = BytesMut::with_capacity(len + 1024);
        let mut peer = each(move || {
            buf.clear();
            let r = black_box(&p).write(&mut buf);
            black_box(&mut buf);
            let _ = black_box(r);
        });
        out.push(rows(scenario, plan, &mut ours, &mut peer));
    }

    // The sink's write path: PUBLISH packets queued for one vectored write (64 at a time,
    // then the queue is consumed as if written) against mqttbytes writing the same 64
    // packets into one buffer.
    for protocol in [Protocol::V311, Protocol::V5] {
        let scenario = match protocol {
            Protocol::V311 => "publish_queue_v311",
            Protocol::V5 => "publish_queue_v5_2props",
        };
        progress(scenario);
        let ours_publish = our_publish(protocol, &payload)?;
        let opts = EncodeOptions::new(protocol);
        let mut queue = Outbound::default();
        let mut ours = batch_writer(move || {
            for _ in 0..QUEUE_BATCH {
                let r = queue.push_publish(black_box(&ours_publish), black_box(&opts));
                let _ = black_box(r);
            }
            queue.seal();
            black_box(&queue);
            let n = queue.len();
            queue.advance(n);
        });
        let r = match protocol {
            Protocol::V311 => {
                let mut peer = peer_encoder(peer_publish_v4(&payload), QUEUE_BATCH);
                rows(scenario, plan, &mut ours, &mut peer)
            }
            Protocol::V5 => {
                let mut peer = peer_encoder(peer_publish_v5(&payload), QUEUE_BATCH);
                rows(scenario, plan, &mut ours, &mut peer)
            }
        };
        out.push(r);
    }

    // Decode PUBLISH: the packets the encoders above produce, both sides the same bytes.
    for protocol in [Protocol::V311, Protocol::V5] {
        let scenario = match protocol {
            Protocol::V311 => "publish_decode_v311",
            Protocol::V5 => "publish_decode_v5_2props",
        };
        progress(scenario);
        let packet = our_publish_wire(&our_publish(protocol, &payload)?, protocol)?;
        let wire = repeat(&packet, BATCH);
        let mut ours = ours_decoder(wire.clone(), protocol);
        let r = match protocol {
            Protocol::V311 => rows(scenario, plan, &mut ours, &mut peer_decoder_v4(wire)),
            Protocol::V5 => rows(scenario, plan, &mut ours, &mut peer_decoder_v5(wire)),
        };
        out.push(r);
    }

    // A stream of PUBACKs.
    for protocol in [Protocol::V311, Protocol::V5] {
        let scenario = match protocol {
            Protocol::V311 => "puback_stream_v311",
            Protocol::V5 => "puback_stream_v5",
        };
        progress(scenario);
        let wire = puback_stream(protocol);
        let mut ours = ours_decoder(wire.clone(), protocol);
        let r = match protocol {
            Protocol::V311 => rows(scenario, plan, &mut ours, &mut peer_decoder_v4(wire)),
            Protocol::V5 => rows(scenario, plan, &mut ours, &mut peer_decoder_v5(wire)),
        };
        out.push(r);
    }

    // CONNECT: encode into a cleared buffer, then decode it from there.
    for protocol in [Protocol::V311, Protocol::V5] {
        let scenario = match protocol {
            Protocol::V311 => "connect_roundtrip_v311",
            Protocol::V5 => "connect_roundtrip_v5",
        };
        progress(scenario);
        let connect = our_connect(protocol)?;
        let eopts = EncodeOptions::new(protocol);
        let dopts = DecodeOptions::new(protocol);
        let mut buf = BytesMut::with_capacity(1024);
        let mut ours = each(move || {
            buf.clear();
            let n = black_box(&connect).encode(&mut buf, black_box(&eopts));
            let _ = black_box(n);
            let _ = black_box(decode(&mut buf, black_box(&dopts)));
        });
        let mut buf = BytesMut::with_capacity(1024);
        let r = match protocol {
            Protocol::V311 => {
                let c = peer_connect_v4();
                let mut peer = each(move || {
                    buf.clear();
                    let _ = black_box(black_box(&c).write(&mut buf));
                    let _ = black_box(v4::read(&mut buf, black_box(PEER_MAX)));
                });
                rows(scenario, plan, &mut ours, &mut peer)
            }
            Protocol::V5 => {
                let c = peer_connect_v5();
                let mut peer = each(move || {
                    buf.clear();
                    let _ = black_box(black_box(&c).write(&mut buf));
                    let _ = black_box(v5::read(&mut buf, black_box(PEER_MAX)));
                });
                rows(scenario, plan, &mut ours, &mut peer)
            }
        };
        out.push(r);
    }

    let (time, allocs): (Vec<Row>, Vec<Row>) = out.into_iter().map(|[t, a]| (t, a)).unzip();
    Ok(time.into_iter().chain(allocs).collect())
}
