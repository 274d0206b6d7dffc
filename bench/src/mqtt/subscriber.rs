//! A counting subscriber: connects to the broker, subscribes to one topic, then counts every
//! PUBLISH delivered to it on its own thread, reading packets in place ([`wire::scan`]) in
//! large reads, so that it takes as little of the machine's two cores as it can. It answers
//! QoS 1 and 2 deliveries (PUBACK; PUBREC, then PUBCOMP on PUBREL) should it subscribe at
//! those levels. CONNECT, SUBSCRIBE and their answers go through `spillway_codec`.
//!
//! It registers its thread with [`cpu::helper_thread`], so its CPU is not counted as the
//! publisher's, and runs it in the `SCHED_IDLE` class, unpinned: it takes whatever a core
//! leaves idle and never preempts the publisher or the broker (on two cores, a subscriber of
//! normal priority woken for every delivery kept preempting the publisher on its core, and the
//! context switches were charged to the publisher's CPU time).

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::num::NonZeroU16;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use spillway_codec::{
    Connect, DecodeOptions, Decoded, EncodeOptions, MqttStr, Packet, PacketId, Protocol, QoS,
    Subscribe, Subscription, SubscriptionOptions, decode,
};

use super::cpu;
use super::tally::Tally;
use super::wire;

const READ_BUF: usize = 2 * wire::MAX_PACKET;
const POLL: Duration = Duration::from_millis(200);

/// A connected, subscribed counter; disconnects on drop.
#[derive(Debug)]
pub struct CountingSubscriber {
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<(), String>>>,
    stream: TcpStream,
}

fn other(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Reads until the codec has a whole packet.
fn next_packet(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    protocol: Protocol,
    deadline: Instant,
    what: &str,
) -> Result<Packet, String> {
    loop {
        match decode(buf, &DecodeOptions::new(protocol)) {
            Ok(Decoded::Packet(p)) => return Ok(p),
            Ok(Decoded::Incomplete { .. }) => {}
            Err(e) => return Err(format!("waiting for {what}: {e}")),
        }
        if Instant::now() >= deadline {
            return Err(format!("no {what} in time"));
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk) {
            Ok(0) => return Err(format!("the broker closed the connection before {what}")),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("waiting for {what}: {e}")),
        }
    }
}

impl CountingSubscriber {
    /// Connects with `protocol`, subscribes to `topic` at `qos`, and returns once SUBACK has
    /// arrived (so everything published afterwards is delivered to it).
    pub fn connect(
        addr: SocketAddr,
        protocol: Protocol,
        topic: &str,
        qos: QoS,
        client_id: &str,
    ) -> Result<CountingSubscriber, String> {
        Self::connect_observed(addr, protocol, topic, qos, client_id, None)
    }

    /// [`CountingSubscriber::connect`], and `observe` is handed every PUBLISH packet as it
    /// arrives (whole, so the payload is its tail), on the subscriber's thread.
    pub fn connect_observed(
        addr: SocketAddr,
        protocol: Protocol,
        topic: &str,
        qos: QoS,
        client_id: &str,
        mut observe: Option<Observer>,
    ) -> Result<CountingSubscriber, String> {
        let timeout = Duration::from_secs(10);
        let deadline = Instant::now() + timeout;
        let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(other)?;
        stream.set_nodelay(true).map_err(other)?;
        stream.set_read_timeout(Some(POLL)).map_err(other)?;
        let opts = EncodeOptions::new(protocol);

        let mut connect = Connect::new(protocol, MqttStr::from_str(client_id).map_err(other)?);
        connect.keep_alive = 0;
        if protocol == Protocol::V5 {
            connect.properties.receive_maximum = NonZeroU16::new(u16::MAX);
        }
        let mut out = BytesMut::new();
        Packet::Connect(Box::new(connect))
            .encode(&mut out, &opts)
            .map_err(other)?;
        stream.write_all(&out).map_err(other)?;
        let mut buf = BytesMut::new();
        match next_packet(&mut stream, &mut buf, protocol, deadline, "CONNACK")? {
            Packet::ConnAck(a) if a.is_success() => {}
            Packet::ConnAck(a) => {
                return Err(format!("CONNACK refused: {}", a.describe(protocol)));
            }
            p => return Err(format!("expected CONNACK, got {}", p.packet_type())),
        }

        let subscribe = Subscribe {
            packet_id: PacketId::MIN,
            properties: Default::default(),
            subscriptions: vec![Subscription {
                filter: MqttStr::from_str(topic).map_err(other)?,
                options: SubscriptionOptions {
                    qos,
                    ..SubscriptionOptions::default()
                },
            }],
        };
        out.clear();
        Packet::Subscribe(subscribe)
            .encode(&mut out, &opts)
            .map_err(other)?;
        stream.write_all(&out).map_err(other)?;
        match next_packet(&mut stream, &mut buf, protocol, deadline, "SUBACK")? {
            Packet::SubAck(s) if s.codes.iter().all(|c| c.0 < 0x80) => {}
            Packet::SubAck(s) => return Err(format!("SUBACK refused: {:?}", s.codes)),
            p => return Err(format!("expected SUBACK, got {}", p.packet_type())),
        }

        let tally = Arc::new(Tally::default());
        let stop = Arc::new(AtomicBool::new(false));
        let reader = stream.try_clone().map_err(other)?;
        let thread = {
            let tally = tally.clone();
            let stop = stop.clone();
            let leftover = buf.to_vec();
            thread::Builder::new()
                .name("mqtt-bench-sub".into())
                .spawn(move || {
                    let _helper = cpu::helper_thread();
                    cpu::sched_idle()?;
                    count_loop(reader, &leftover, &tally, &stop, &mut observe)
                })
                .map_err(other)?
        };
        Ok(CountingSubscriber {
            tally,
            stop,
            thread: Some(thread),
            stream,
        })
    }

    /// Deliveries counted; runs arm it and wait on it.
    pub fn tally(&self) -> &Tally {
        &self.tally
    }

    /// Sends DISCONNECT, stops the thread, and returns why it failed, if it did.
    pub fn finish(mut self) -> Result<(), String> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), String> {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.stream.write_all(&[0xE0, 0x00]);
        let result = match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err("the subscriber thread panicked".into())),
            None => Ok(()),
        };
        let _ = self.stream.shutdown(Shutdown::Both);
        result
    }
}

impl Drop for CountingSubscriber {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// What [`CountingSubscriber::connect_observed`] calls with each PUBLISH packet.
pub type Observer = Box<dyn FnMut(&[u8]) + Send>;

fn count_loop(
    mut stream: TcpStream,
    leftover: &[u8],
    tally: &Tally,
    stop: &AtomicBool,
    observe: &mut Option<Observer>,
) -> Result<(), String> {
    let mut buf = vec![0u8; READ_BUF];
    buf[..leftover.len()].copy_from_slice(leftover);
    let (mut start, mut end) = (0, leftover.len());
    let mut out = Vec::with_capacity(64 << 10);
    loop {
        let mut delivered = 0u64;
        while let Some(frame) = wire::scan(&buf[start..end]).map_err(other)? {
            let packet = &buf[start..start + frame.total];
            match frame.kind() {
                wire::PUBLISH => {
                    delivered += 1;
                    if let Some(f) = observe {
                        f(packet);
                    }
                    match frame.qos().map_err(other)? {
                        1 => wire::put_ack(
                            &mut out,
                            wire::PUBACK,
                            wire::publish_packet_id(&frame, packet).map_err(other)?,
                        ),
                        2 => wire::put_ack(
                            &mut out,
                            wire::PUBREC,
                            wire::publish_packet_id(&frame, packet).map_err(other)?,
                        ),
                        _ => {}
                    }
                }
                wire::PUBREL => {
                    let id = wire::pubrel_packet_id(&frame, packet).map_err(other)?;
                    wire::put_ack(&mut out, wire::PUBCOMP, id);
                }
                // PINGRESP, and SUBACK / UNSUBACK are not expected but harmless.
                13 | 9 | 11 => {}
                wire::DISCONNECT => {
                    tally.add(delivered);
                    return Err("the broker sent DISCONNECT".into());
                }
                _ => {
                    tally.add(delivered);
                    return Err(format!("unexpected packet {:#04x}", frame.first));
                }
            }
            start += frame.total;
        }
        tally.add(delivered);
        if !out.is_empty() {
            stream.write_all(&out).map_err(other)?;
            out.clear();
        }
        if start == end {
            start = 0;
            end = 0;
        } else if buf.len() - end < wire::MAX_PACKET {
            buf.copy_within(start..end, 0);
            end -= start;
            start = 0;
        }
        loop {
            match stream.read(&mut buf[end..]) {
                Ok(0) => {
                    return if stop.load(Ordering::Relaxed) {
                        Ok(())
                    } else {
                        Err("the broker closed the connection".into())
                    };
                }
                Ok(n) => {
                    end += n;
                    break;
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    if stop.load(Ordering::Relaxed) {
                        return Ok(());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return if stop.load(Ordering::Relaxed) {
                        Ok(())
                    } else {
                        Err(e.to_string())
                    };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mqtt::discard::DiscardBroker;

    #[test]
    fn a_subscriber_needs_a_broker_that_answers_subscribe() {
        // The discard broker does not take SUBSCRIBE: connecting must fail, not hang.
        let broker = DiscardBroker::start(&[]).unwrap_or_else(|e| panic!("{e}"));
        let r = CountingSubscriber::connect(
            broker.addr(),
            Protocol::V5,
            "bench/t",
            QoS::AtMostOnce,
            "sub-test",
        );
        assert!(r.is_err());
    }
}
