//! The checks the fuzz targets run, kept in a library so that each target is one line and the
//! checks can be run on stable (`cargo test` here, or a corpus replay) as well.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use spillway_codec::session::{Session, SessionConfig};
use spillway_codec::{
    Connect, DecodeOptions, Decoded, EncodeOptions, MqttStr, Outbound, Packet, Protocol, Publish,
    QoS, decode, decode_bytes,
};

/// Decodes `data` as a stream of packets of `protocol` until it needs more bytes or meets an
/// error, with both entry points, and checks:
///
/// - `decode` and `decode_bytes` agree on every result;
/// - `Incomplete` asks for at least one byte and consumes nothing;
/// - a decoded packet consumed at least its two-byte fixed header;
/// - every decoded packet encodes again (what the decoder accepts the encoder can write), and
///   that encoding decodes to the same packet;
/// - for PUBLISH, `encode_header` + payload is the same bytes as `Packet::encode`.
///
/// The first byte, when there is one, also picks a small Maximum Packet Size for a second pass,
/// so the size check runs on every header.
pub fn decode_stream(data: &[u8], protocol: Protocol) {
    run(data, DecodeOptions::new(protocol));
    if let Some(&b) = data.first() {
        run(
            data,
            DecodeOptions {
                protocol,
                max_packet_size: 2 + u32::from(b),
            },
        );
    }
}

fn run(data: &[u8], opts: DecodeOptions) {
    let mut buf = BytesMut::from(data);
    let mut shared = Bytes::copy_from_slice(data);
    loop {
        let before = buf.len();
        let a = decode(&mut buf, &opts);
        let b = decode_bytes(&mut shared, &opts);
        assert_eq!(a, b, "decode and decode_bytes disagree");
        match a {
            Ok(Decoded::Packet(p)) => {
                assert!(before - buf.len() >= 2, "a packet took under two bytes");
                assert_eq!(buf.len(), shared.len());
                reencode(&p, opts.protocol);
            }
            Ok(Decoded::Incomplete { needed }) => {
                assert!(needed > 0, "Incomplete with needed 0");
                assert_eq!(buf.len(), before, "Incomplete consumed bytes");
                return;
            }
            Err(_) => return,
        }
    }
}

fn reencode(p: &Packet, protocol: Protocol) {
    let eopts = EncodeOptions::new(protocol);
    let mut out = BytesMut::new();
    let n = match p.encode(&mut out, &eopts) {
        Ok(n) => n,
        Err(e) => panic!("decoded {p:?} but cannot encode it: {e}"),
    };
    assert_eq!(n, out.len());
    if let Packet::Publish(publ) = p {
        let mut head = BytesMut::new();
        let payload = publ
            .encode_header(&mut head, &eopts)
            .unwrap_or_else(|e| panic!("encode_header failed where encode did not: {e}"));
        head.extend_from_slice(&payload);
        assert_eq!(head, out, "encode_header + payload differs from encode");
    }
    let again = decode(&mut out, &DecodeOptions::new(protocol));
    assert_eq!(
        again,
        Ok(Decoded::Packet(p.clone())),
        "re-encoding changed {p:?}"
    );
    assert!(out.is_empty());
}

/// Drives a client [`Session`] with whatever packets `data` decodes to, publishing a message
/// of each QoS in turn between them and advancing time: it may refuse a packet with an error
/// (then the connection is dropped and made again), but it never panics.
pub fn session(data: &[u8]) {
    let Some((&ctl, rest)) = data.split_first() else {
        return;
    };
    let protocol = if ctl & 1 == 0 {
        Protocol::V311
    } else {
        Protocol::V5
    };
    let mut cfg = SessionConfig::new(protocol, 1 + u16::from(ctl >> 4));
    cfg.topic_alias_maximum = u16::from((ctl >> 1) & 0x07);
    let mut s: Session<u32> = Session::new(cfg);
    let mut out = Outbound::default();
    let t0 = Instant::now();
    let mut connect = Connect::new(protocol, MqttStr::from_static("fuzz").unwrap_or_default());
    connect.keep_alive = 5;
    if s.connect(&connect, &mut out, t0).is_err() {
        return;
    }
    let mut buf = BytesMut::from(rest);
    let mut n: u32 = 0;
    loop {
        let packet = match decode(&mut buf, &s.decode_options()) {
            Ok(Decoded::Packet(p)) => p,
            _ => return,
        };
        n += 1;
        let now = t0 + Duration::from_millis(u64::from(n) * 700);
        if s.handle(packet, &mut out, now).is_err() {
            s.connection_lost();
            out.clear();
            if s.connect(&connect, &mut out, now).is_err() {
                return;
            }
            continue;
        }
        let topic = if n.is_multiple_of(2) { "a/b" } else { "c" };
        let mut p = Publish::new(
            MqttStr::from_static(topic).unwrap_or_default(),
            Bytes::from_static(b"payload"),
        );
        p.qos = QoS::from_u8((n % 3) as u8).unwrap_or_default();
        let _ = s.publish(p, n, &mut out, now);
        let _ = s.poll_transmit(&mut out, now);
        if s.handle_timeout(&mut out, now).is_err() {
            s.connection_lost();
            out.clear();
            if s.connect(&connect, &mut out, now).is_err() {
                return;
            }
        }
        // What the session queued must decode as packets of its protocol.
        out.seal();
        let mut written = BytesMut::from(&out.to_vec()[..]);
        out.clear();
        while !written.is_empty() {
            match decode(&mut written, &DecodeOptions::new(protocol)) {
                Ok(Decoded::Packet(_)) => {}
                other => panic!("the session wrote something undecodable: {other:?}"),
            }
        }
    }
}
