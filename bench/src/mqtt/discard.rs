//! A discard MQTT broker: accepts MQTT 3.1.1 and 5 connections on loopback, acknowledges
//! every PUBLISH as fast as it can and throws the payloads away, so that a publisher against
//! it measures the client alone (the ceiling of our own sink, with no real broker in the way).
//!
//! - CONNECT is decoded with `spillway_codec` (either protocol level) and answered with a
//!   CONNACK; on MQTT 5 it advertises Receive Maximum 65535, so the client's own window is the
//!   only limit.
//! - PUBLISH QoS 1 gets PUBACK, QoS 2 gets PUBREC, PUBREL gets PUBCOMP (no QoS 2 state is
//!   kept: a discard broker delivers nothing, so there is nothing to deliver twice), PINGREQ
//!   gets PINGRESP, DISCONNECT ends the connection. The hot path reads packets in place with
//!   [`wire::scan`] and answers everything one read brought in with one write.
//! - Anything else, or malformed input, closes the connection (never a panic).
//!
//! One thread per connection (std blocking sockets, 2 MiB reads), pinned to the cores given
//! (the bench keeps them off the publisher's core). Every thread registers itself with
//! [`cpu::helper_thread`], so its CPU is not counted as the publisher's. The
//! broker counts the PUBLISH packets it received per QoS, and a [`Tally`] the runs wait on.

use std::io::{self, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::num::NonZeroU16;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use bytes::BytesMut;
use spillway_codec::{
    ConnAck, DecodeOptions, Decoded, EncodeOptions, Packet, Protocol, ReasonCode, decode,
};

use crate::readbuf::ReadBuf;

use super::cpu;
use super::tally::Tally;
use super::wire::{self, Frame, WireError};

/// Read buffer per connection: room for the largest packet accepted and then some.
const READ_BUF: usize = 2 * wire::MAX_PACKET;
/// How often a blocked connection looks at the stop flag.
const POLL: Duration = Duration::from_millis(200);
/// The Receive Maximum advertised on MQTT 5.
pub const RECEIVE_MAXIMUM: u16 = u16::MAX;

#[derive(Debug, Default)]
struct Shared {
    stop: AtomicBool,
    /// PUBLISH packets received, by QoS.
    publishes: [AtomicU64; 3],
    /// Connections accepted.
    connections: AtomicU64,
    /// Why the last connection that failed was closed.
    last_error: Mutex<Option<String>>,
    tally: Tally,
    /// Where its threads run.
    cores: Vec<usize>,
}

impl Shared {
    /// Registers the calling thread as the bench's and pins it.
    fn enter_thread(&self) -> cpu::HelperGuard {
        let guard = cpu::helper_thread();
        if !self.cores.is_empty()
            && let Err(e) = monoio::utils::bind_to_cpu_set(self.cores.iter().copied())
        {
            *self
                .last_error
                .lock()
                .unwrap_or_else(PoisonError::into_inner) =
                Some(format!("pinning to cores {:?}: {e:?}", self.cores));
        }
        guard
    }
}

/// A running discard broker; stopped, and its threads joined, on drop.
#[derive(Debug)]
pub struct DiscardBroker {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl DiscardBroker {
    /// Listens on an ephemeral loopback port; its threads run on `cores` (any core when
    /// empty), so that it never takes the publisher's.
    pub fn start(cores: &[usize]) -> io::Result<DiscardBroker> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            cores: cores.to_vec(),
            ..Shared::default()
        });
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let accept = {
            let shared = shared.clone();
            let conns = conns.clone();
            thread::Builder::new()
                .name("mqtt-discard-accept".into())
                .spawn(move || {
                    let _helper = shared.enter_thread();
                    accept_loop(&listener, &shared, &conns);
                })?
        };
        Ok(DiscardBroker {
            addr,
            shared,
            accept: Some(accept),
            conns,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// PUBLISH packets received so far at QoS 0, 1 and 2.
    pub fn publishes(&self) -> [u64; 3] {
        let p = &self.shared.publishes;
        [0, 1, 2].map(|q| p[q].load(Ordering::Relaxed))
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::Relaxed)
    }

    /// Why the last failed connection was closed, if one was.
    pub fn last_error(&self) -> Option<String> {
        self.shared
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Every PUBLISH received, whatever its QoS; runs arm it and wait on it.
    pub fn tally(&self) -> &Tally {
        &self.shared.tally
    }
}

impl Drop for DiscardBroker {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop with a connection of our own.
        let _ = TcpStream::connect_timeout(&self.addr, POLL);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
        let handles =
            std::mem::take(&mut *self.conns.lock().unwrap_or_else(PoisonError::into_inner));
        for h in handles {
            let _ = h.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>, conns: &Mutex<Vec<JoinHandle<()>>>) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        shared.connections.fetch_add(1, Ordering::Relaxed);
        let shared = shared.clone();
        let spawned = thread::Builder::new()
            .name("mqtt-discard-conn".into())
            .spawn(move || {
                let _helper = shared.enter_thread();
                let mut conn = Conn {
                    stream,
                    shared,
                    input: ReadBuf::new(READ_BUF),
                    out: Vec::with_capacity(64 << 10),
                };
                if let Err(e) = conn.serve() {
                    *conn
                        .shared
                        .last_error
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) = Some(e.to_string());
                }
                let _ = conn.stream.shutdown(Shutdown::Both);
            });
        if let Ok(h) = spawned {
            let mut list = conns.lock().unwrap_or_else(PoisonError::into_inner);
            list.retain(|h| !h.is_finished());
            list.push(h);
        }
    }
}

fn invalid(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

/// One connection: a read buffer over the socket and the acknowledgements to write.
struct Conn {
    stream: TcpStream,
    shared: Arc<Shared>,
    input: ReadBuf,
    out: Vec<u8>,
}

impl Conn {
    /// Reads more bytes; `Ok(false)` at the end of the stream or on stop. Keeps room for a
    /// whole packet after a partial one.
    fn fill(&mut self) -> io::Result<bool> {
        self.input
            .fill(&mut self.stream, &self.shared.stop, wire::MAX_PACKET)
    }

    /// The protocol of the connection, from its CONNECT (answered with CONNACK).
    fn handshake(&mut self) -> io::Result<Option<Protocol>> {
        let frame = loop {
            match wire::scan(self.input.unread()).map_err(invalid)? {
                Some(f) => break f,
                None => {
                    if !self.fill()? {
                        return Ok(None);
                    }
                }
            }
        };
        if frame.kind() != 1 {
            return Err(invalid(WireError::Unexpected(frame.first)));
        }
        let mut packet = BytesMut::from(&self.input.unread()[..frame.total]);
        self.input.consume(frame.total);
        // The codec reads CONNECT whatever protocol the options name (it carries its own).
        let connect = match decode(&mut packet, &DecodeOptions::new(Protocol::V5)) {
            Ok(Decoded::Packet(Packet::Connect(c))) => c,
            Ok(_) => return Err(invalid("the first packet is not a CONNECT")),
            Err(e) => return Err(invalid(format!("CONNECT: {e}"))),
        };
        let protocol = connect.protocol;
        let mut connack = ConnAck::new(false, ReasonCode::SUCCESS);
        if protocol == Protocol::V5 {
            connack.properties.receive_maximum = NonZeroU16::new(RECEIVE_MAXIMUM);
        }
        let mut out = BytesMut::new();
        Packet::ConnAck(connack)
            .encode(&mut out, &EncodeOptions::new(protocol))
            .map_err(|e| invalid(format!("CONNACK: {e}")))?;
        self.stream.write_all(&out)?;
        Ok(Some(protocol))
    }

    /// Handles one packet of the steady state; `Ok(false)` on DISCONNECT.
    #[inline]
    fn on_packet(&mut self, frame: &Frame, counts: &mut [u64; 3]) -> Result<bool, WireError> {
        let packet = &self.input.unread()[..frame.total];
        match frame.kind() {
            wire::PUBLISH => {
                let qos = frame.qos()?;
                counts[usize::from(qos)] += 1;
                match qos {
                    1 => wire::put_ack(
                        &mut self.out,
                        wire::PUBACK,
                        wire::publish_packet_id(frame, packet)?,
                    ),
                    2 => wire::put_ack(
                        &mut self.out,
                        wire::PUBREC,
                        wire::publish_packet_id(frame, packet)?,
                    ),
                    _ => {}
                }
            }
            wire::PUBREL => {
                let id = wire::pubrel_packet_id(frame, packet)?;
                wire::put_ack(&mut self.out, wire::PUBCOMP, id);
            }
            wire::PINGREQ if frame.first == 0xC0 => self.out.extend_from_slice(&wire::PINGRESP),
            wire::DISCONNECT if frame.first == 0xE0 => return Ok(false),
            _ => return Err(WireError::Unexpected(frame.first)),
        }
        Ok(true)
    }

    fn serve(&mut self) -> io::Result<()> {
        self.stream.set_nodelay(true)?;
        self.stream.set_read_timeout(Some(POLL))?;
        if self.handshake()?.is_none() {
            return Ok(());
        }
        loop {
            let mut counts = [0u64; 3];
            let mut open = true;
            while let Some(frame) = wire::scan(self.input.unread()).map_err(invalid)? {
                let more = self.on_packet(&frame, &mut counts);
                self.input.consume(frame.total);
                match more {
                    Ok(true) => {}
                    Ok(false) => {
                        open = false;
                        break;
                    }
                    Err(e) => {
                        self.count(counts);
                        return Err(invalid(e));
                    }
                }
            }
            // Counted before the acknowledgements go out, so a client holding its last
            // acknowledgement finds its messages counted.
            self.count(counts);
            if !self.out.is_empty() {
                self.stream.write_all(&self.out)?;
                self.out.clear();
            }
            if !open || !self.fill()? {
                return Ok(());
            }
        }
    }

    fn count(&self, counts: [u64; 3]) {
        for (q, n) in counts.iter().enumerate() {
            if *n > 0 {
                self.shared.publishes[q].fetch_add(*n, Ordering::Relaxed);
            }
        }
        self.shared.tally.add(counts.iter().sum());
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;
    use bytes::Bytes;
    use spillway_codec::{Ack, MqttStr, PacketId, Publish, QoS};

    fn pid(n: u16) -> PacketId {
        PacketId::new(n).unwrap_or(PacketId::MIN)
    }

    struct Client {
        stream: TcpStream,
        buf: BytesMut,
        protocol: Protocol,
    }

    impl Client {
        fn connect(addr: SocketAddr, protocol: Protocol) -> Client {
            let stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect: {e}"));
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let mut c = Client {
                stream,
                buf: BytesMut::new(),
                protocol,
            };
            let connect = spillway_codec::Connect::new(
                protocol,
                MqttStr::from_static("t").unwrap_or_else(|e| panic!("{e}")),
            );
            c.send(&Packet::Connect(Box::new(connect)));
            c
        }

        fn send(&mut self, p: &Packet) {
            let mut out = BytesMut::new();
            if let Err(e) = p.encode(&mut out, &EncodeOptions::new(self.protocol)) {
                panic!("encode: {e}");
            }
            if let Err(e) = self.stream.write_all(&out) {
                panic!("write: {e}");
            }
        }

        fn next(&mut self) -> Packet {
            loop {
                match decode(&mut self.buf, &DecodeOptions::new(self.protocol)) {
                    Ok(Decoded::Packet(p)) => return p,
                    Ok(Decoded::Incomplete { .. }) => {}
                    Err(e) => panic!("decode: {e}"),
                }
                let mut chunk = [0u8; 4096];
                let n = self.stream.read(&mut chunk).unwrap_or(0);
                assert!(n > 0, "closed");
                self.buf.extend_from_slice(&chunk[..n]);
            }
        }

        /// Whether the server closed the connection (within the read timeout).
        fn closed(&mut self) -> bool {
            let mut chunk = [0u8; 64];
            matches!(self.stream.read(&mut chunk), Ok(0) | Err(_))
        }
    }

    fn publish(qos: QoS, id: u16) -> Packet {
        let mut p = Publish::new(
            MqttStr::from_static("bench/t").unwrap_or_else(|e| panic!("{e}")),
            Bytes::from_static(&[7; 100]),
        );
        p.qos = qos;
        p.packet_id = (qos != QoS::AtMostOnce).then(|| pid(id));
        Packet::Publish(p)
    }

    #[test]
    fn acknowledges_every_qos_on_both_protocols() {
        let broker = DiscardBroker::start(&[]).unwrap_or_else(|e| panic!("{e}"));
        for protocol in [Protocol::V311, Protocol::V5] {
            let mut c = Client::connect(broker.addr(), protocol);
            match c.next() {
                Packet::ConnAck(a) => {
                    assert!(a.is_success());
                    if protocol == Protocol::V5 {
                        assert_eq!(
                            a.properties.receive_maximum.map(NonZeroU16::get),
                            Some(RECEIVE_MAXIMUM)
                        );
                    }
                }
                other => panic!("{other:?}"),
            }
            c.send(&publish(QoS::AtMostOnce, 0));
            c.send(&publish(QoS::AtLeastOnce, 1));
            assert_eq!(c.next(), Packet::PubAck(Ack::new(pid(1))));
            c.send(&publish(QoS::ExactlyOnce, 2));
            assert_eq!(c.next(), Packet::PubRec(Ack::new(pid(2))));
            c.send(&Packet::PubRel(Ack::new(pid(2))));
            assert_eq!(c.next(), Packet::PubComp(Ack::new(pid(2))));
            c.send(&Packet::PingReq);
            assert_eq!(c.next(), Packet::PingResp);
            // Many at once: one write answers them all.
            let mut batch = BytesMut::new();
            for id in 10..1010u16 {
                if let Err(e) =
                    publish(QoS::AtLeastOnce, id).encode(&mut batch, &EncodeOptions::new(protocol))
                {
                    panic!("{e}");
                }
            }
            if let Err(e) = c.stream.write_all(&batch) {
                panic!("{e}");
            }
            for id in 10..1010u16 {
                assert_eq!(c.next(), Packet::PubAck(Ack::new(pid(id))));
            }
            c.send(&Packet::Disconnect(spillway_codec::Disconnect::default()));
            assert!(c.closed());
        }
        assert_eq!(broker.publishes(), [2, 2002, 2]);
        assert_eq!(broker.tally().count(), 2006);
        assert_eq!(broker.connections(), 2);
    }

    #[test]
    fn bad_input_closes_the_connection() {
        let broker = DiscardBroker::start(&[]).unwrap_or_else(|e| panic!("{e}"));
        let cases: [&[u8]; 4] = [
            // Not a CONNECT first.
            &[0x30, 3, 0, 1, b'a'],
            // A remaining length of five bytes.
            &[0x10, 0xff, 0xff, 0xff, 0xff, 0x01],
            // A CONNECT with a bad protocol name.
            &[0x10, 6, 0, 4, b'M', b'Q', b'T', b'X'],
            // Garbage.
            &[0xff; 16],
        ];
        for bytes in cases {
            let mut s = TcpStream::connect(broker.addr()).unwrap_or_else(|e| panic!("{e}"));
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = s.write_all(bytes);
            let mut chunk = [0u8; 64];
            assert!(
                matches!(s.read(&mut chunk), Ok(0) | Err(_)),
                "{bytes:?} was answered"
            );
        }
        // After a good CONNECT: QoS 3, a PUBLISH whose topic overruns it, packet id 0.
        let bad_after_connect: [&[u8]; 3] = [
            &[0x36, 3, 0, 1, b'a'],
            &[0x32, 4, 0, 9, b'a', b'b'],
            &[0x32, 5, 0, 1, b'a', 0, 0],
        ];
        for bytes in bad_after_connect {
            let mut c = Client::connect(broker.addr(), Protocol::V311);
            assert!(matches!(c.next(), Packet::ConnAck(_)));
            let _ = c.stream.write_all(bytes);
            assert!(c.closed(), "{bytes:?} was answered");
        }
        assert!(broker.last_error().is_some());
        // The broker still serves.
        let mut c = Client::connect(broker.addr(), Protocol::V5);
        assert!(matches!(c.next(), Packet::ConnAck(_)));
        c.send(&publish(QoS::AtLeastOnce, 9));
        assert_eq!(c.next(), Packet::PubAck(Ack::new(pid(9))));
    }
}
