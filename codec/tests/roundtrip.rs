//! Property tests: every valid packet of both protocol versions survives encode → decode
//! unchanged; `Publish::encode_header` plus the payload is the same bytes as `Packet::encode`;
//! and the decoder never panics, on arbitrary bytes or on valid encodings cut into arbitrary
//! chunks or mutated, and never consumes anything when it answers `Incomplete`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::{Bytes, BytesMut};
use common::{V3, V5, cases, packet, publish_struct};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use spillway_codec::{
    DecodeOptions, Decoded, EncodeOptions, MAX_PACKET_SIZE, Packet, Protocol, decode, decode_bytes,
};

fn encode(p: &Packet, protocol: Protocol) -> Vec<u8> {
    let mut out = BytesMut::new();
    let n = p
        .encode(&mut out, &EncodeOptions::new(protocol))
        .unwrap_or_else(|e| panic!("encode {p:?}: {e}"));
    assert_eq!(n, out.len(), "encode returns the packet size");
    out.to_vec()
}

fn check_roundtrip(protocol: Protocol, p: &Packet) -> Result<(), TestCaseError> {
    let bytes = encode(p, protocol);
    let opts = DecodeOptions::new(protocol);

    let mut src = BytesMut::from(&bytes[..]);
    let got = decode(&mut src, &opts);
    prop_assert_eq!(got, Ok(Decoded::Packet(p.clone())));
    prop_assert!(src.is_empty());

    let mut src = Bytes::from(bytes.clone());
    let got = decode_bytes(&mut src, &opts);
    prop_assert_eq!(got, Ok(Decoded::Packet(p.clone())));
    prop_assert!(src.is_empty());

    if let Packet::Publish(publ) = p {
        let mut head = BytesMut::new();
        let payload = publ
            .encode_header(&mut head, &EncodeOptions::new(protocol))
            .unwrap();
        let mut joined = head.to_vec();
        joined.extend_from_slice(&payload);
        prop_assert_eq!(&joined, &bytes);
        prop_assert_eq!(payload, publ.payload.clone());
        prop_assert_eq!(publ.encoded_len(protocol).unwrap(), bytes.len());
    }
    Ok(())
}

/// Decodes everything it can from `buf`; checks the incremental contract on the way. Every
/// packet decoded is re-encoded and must decode to itself.
fn drive(buf: &mut BytesMut, opts: &DecodeOptions) -> Result<Vec<Packet>, TestCaseError> {
    let mut out = Vec::new();
    loop {
        let before = buf.clone();
        match decode(buf, opts) {
            Ok(Decoded::Packet(p)) => {
                prop_assert!(buf.len() < before.len(), "a packet consumed nothing");
                // The same bytes through `decode_bytes` give the same packet.
                let mut b = before.clone().freeze();
                prop_assert_eq!(decode_bytes(&mut b, opts), Ok(Decoded::Packet(p.clone())));
                prop_assert_eq!(b.len(), buf.len());
                check_reencodes(&p, opts.protocol)?;
                out.push(p);
            }
            Ok(Decoded::Incomplete { needed }) => {
                prop_assert!(needed > 0);
                prop_assert_eq!(&buf[..], &before[..], "Incomplete consumed bytes");
                return Ok(out);
            }
            Err(_) => return Ok(out),
        }
    }
}

/// What the decoder accepted, the encoder can write back, and it decodes to the same packet.
fn check_reencodes(p: &Packet, protocol: Protocol) -> Result<(), TestCaseError> {
    let mut out = BytesMut::new();
    let res = p.encode(&mut out, &EncodeOptions::new(protocol));
    prop_assert!(res.is_ok(), "decoded {p:?} but cannot encode it: {res:?}");
    let again = decode(&mut out, &DecodeOptions::new(protocol));
    prop_assert_eq!(again, Ok(Decoded::Packet(p.clone())));
    Ok(())
}

fn protocol() -> impl Strategy<Value = Protocol> {
    prop_oneof![Just(V3), Just(V5)]
}

fn max_packet_size() -> impl Strategy<Value = u32> {
    prop_oneof![3 => Just(MAX_PACKET_SIZE), 1 => 2..300u32]
}

/// A first byte, a correct remaining length, and an arbitrary body: gets past the framing
/// into the body decoders far more often than uniform bytes do.
fn framed() -> impl Strategy<Value = Vec<u8>> {
    (any::<u8>(), vec(any::<u8>(), 0..200)).prop_map(|(first, body)| {
        let mut v = vec![first];
        let mut n = body.len();
        loop {
            let mut b = (n % 128) as u8;
            n /= 128;
            if n > 0 {
                b |= 0x80;
            }
            v.push(b);
            if n == 0 {
                break;
            }
        }
        v.extend_from_slice(&body);
        v
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(256), ..ProptestConfig::default() })]

    #[test]
    fn roundtrip_v311(p in packet(V3)) {
        check_roundtrip(V3, &p)?;
    }

    #[test]
    fn roundtrip_v5(p in packet(V5)) {
        check_roundtrip(V5, &p)?;
    }

    #[test]
    fn publish_header_plus_payload_is_the_packet(
        p3 in publish_struct(V3),
        p5 in publish_struct(V5),
    ) {
        check_roundtrip(V3, &Packet::Publish(p3))?;
        check_roundtrip(V5, &Packet::Publish(p5))?;
    }

    /// Several packets in one stream, delivered in arbitrary chunks: the same packets come
    /// out, in order, and nothing is left over.
    #[test]
    fn arbitrary_chunking_of_valid_streams(
        proto in protocol(),
        cuts in vec(any::<Index>(), 0..8),
        v3 in vec(packet(V3), 1..4),
        v5 in vec(packet(V5), 1..4),
    ) {
        let packets = if proto == V3 { v3 } else { v5 };
        let stream: Vec<u8> = packets.iter().flat_map(|p| encode(p, proto)).collect();
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(stream.len() + 1)).collect();
        points.push(0);
        points.push(stream.len());
        points.sort_unstable();
        points.dedup();
        let opts = DecodeOptions::new(proto);
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for w in points.windows(2) {
            buf.extend_from_slice(&stream[w[0]..w[1]]);
            got.extend(drive(&mut buf, &opts)?);
        }
        prop_assert_eq!(got, packets);
        prop_assert!(buf.is_empty());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(2000), ..ProptestConfig::default() })]

    #[test]
    fn decode_never_panics_on_arbitrary_bytes(
        bytes in vec(any::<u8>(), 0..300),
        proto in protocol(),
        max in max_packet_size(),
    ) {
        let opts = DecodeOptions { protocol: proto, max_packet_size: max };
        drive(&mut BytesMut::from(&bytes[..]), &opts)?;
    }

    #[test]
    fn decode_never_panics_on_framed_garbage(
        bytes in framed(),
        proto in protocol(),
        max in max_packet_size(),
    ) {
        let opts = DecodeOptions { protocol: proto, max_packet_size: max };
        drive(&mut BytesMut::from(&bytes[..]), &opts)?;
    }

    /// Valid encodings with a few bytes overwritten, or cut short: the decoder answers a
    /// packet, an error or `Incomplete`, and never panics.
    #[test]
    fn decode_never_panics_on_mutated_packets(
        proto in protocol(),
        v3 in packet(V3),
        v5 in packet(V5),
        edits in vec((any::<Index>(), any::<u8>()), 1..4),
        cut in any::<Index>(),
        truncate in any::<bool>(),
    ) {
        let p = if proto == V3 { v3 } else { v5 };
        let mut bytes = encode(&p, proto);
        for (i, v) in &edits {
            let i = i.index(bytes.len());
            bytes[i] = *v;
        }
        if truncate {
            bytes.truncate(cut.index(bytes.len() + 1));
        }
        // Decode with both protocol settings: a packet of one version read as the other.
        for decode_as in [V3, V5] {
            drive(&mut BytesMut::from(&bytes[..]), &DecodeOptions::new(decode_as))?;
        }
    }
}
