//! The client session state machine driven through its flows without sockets: packets in,
//! packets out, time passed as an argument.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::num::{NonZeroU16, NonZeroU32};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use spillway_codec::session::{
    Completion, Event, PublishErrorKind, Sent, Session, SessionConfig, SessionError, State,
};
use spillway_codec::{
    Ack, ConnAck, Connect, DecodeOptions, Decoded, Disconnect, EncodeError, MqttStr, Outbound,
    Packet, PacketId, Protocol, Publish, QoS, ReasonCode, decode,
};

fn pid(n: u16) -> PacketId {
    NonZeroU16::new(n).unwrap()
}

fn s(v: &str) -> MqttStr {
    MqttStr::from_str(v).unwrap()
}

/// Everything queued in `out`, decoded, and `out` emptied (as if written to the socket).
fn drain(out: &mut Outbound, protocol: Protocol) -> Vec<Packet> {
    out.seal();
    let mut buf = BytesMut::from(&out.to_vec()[..]);
    let n = out.len();
    out.advance(n);
    let mut packets = Vec::new();
    let opts = DecodeOptions::new(protocol);
    while let Decoded::Packet(p) = decode(&mut buf, &opts).unwrap() {
        packets.push(p);
    }
    assert!(buf.is_empty(), "a partial packet was queued");
    packets
}

fn msg(topic: &str, qos: QoS, payload: &'static [u8]) -> Publish {
    let mut p = Publish::new(s(topic), Bytes::from_static(payload));
    p.qos = qos;
    p
}

struct Harness {
    session: Session<u64>,
    out: Outbound,
    now: Instant,
    protocol: Protocol,
}

impl Harness {
    fn new(protocol: Protocol, max_inflight: u16) -> Self {
        Harness {
            session: Session::new(SessionConfig::new(protocol, max_inflight)),
            out: Outbound::default(),
            now: Instant::now(),
            protocol,
        }
    }

    fn with_config(cfg: SessionConfig) -> Self {
        Harness {
            protocol: cfg.protocol,
            session: Session::new(cfg),
            out: Outbound::default(),
            now: Instant::now(),
        }
    }

    fn connect(&mut self, keep_alive: u16) -> Connect {
        let mut c = Connect::new(self.protocol, s("spillway-test"));
        c.keep_alive = keep_alive;
        self.session.connect(&c, &mut self.out, self.now).unwrap();
        let sent = self.drain();
        assert_eq!(sent, vec![Packet::Connect(Box::new(c.clone()))]);
        c
    }

    fn connack(&mut self, ack: ConnAck) -> Result<Option<Event<u64>>, SessionError> {
        self.session
            .handle(Packet::ConnAck(ack), &mut self.out, self.now)
    }

    fn connected(&mut self, session_present: bool) -> Event<u64> {
        self.connect(0);
        self.connack(ConnAck::new(session_present, ReasonCode::SUCCESS))
            .unwrap()
            .unwrap()
    }

    fn publish(&mut self, p: Publish, token: u64) -> PacketId {
        match self.session.publish(p, token, &mut self.out, self.now) {
            Ok(Sent::Tracked(id)) => id,
            other => panic!("expected a tracked publish, got {other:?}"),
        }
    }

    fn handle(&mut self, p: Packet) -> Result<Option<Event<u64>>, SessionError> {
        self.session.handle(p, &mut self.out, self.now)
    }

    fn drain(&mut self) -> Vec<Packet> {
        drain(&mut self.out, self.protocol)
    }
}

fn completed(ev: Option<Event<u64>>) -> Completion<u64> {
    match ev {
        Some(Event::Completed(c)) => c,
        other => panic!("expected a completion, got {other:?}"),
    }
}

fn publishes(packets: &[Packet]) -> Vec<(u16, bool, QoS)> {
    packets
        .iter()
        .filter_map(|p| match p {
            Packet::Publish(p) => Some((p.packet_id.map_or(0, |i| i.get()), p.dup, p.qos)),
            _ => None,
        })
        .collect()
}

#[test]
fn qos1_flow_completes_with_the_token() {
    for protocol in [Protocol::V311, Protocol::V5] {
        let mut h = Harness::new(protocol, 8);
        assert_eq!(
            h.connected(false),
            Event::Connected {
                session_present: false,
                resent: 0
            }
        );
        let id = h.publish(msg("a/b", QoS::AtLeastOnce, b"one"), 41);
        let sent = h.drain();
        assert_eq!(publishes(&sent), vec![(id.get(), false, QoS::AtLeastOnce)]);
        let Packet::Publish(p) = &sent[0] else {
            panic!()
        };
        assert_eq!(&p.payload[..], b"one");
        assert_eq!(h.session.in_flight(), 1);
        let c = completed(h.handle(Packet::PubAck(Ack::new(id))).unwrap());
        assert_eq!((c.token, c.packet_id, c.qos), (41, id, QoS::AtLeastOnce));
        assert!(c.is_success());
        assert_eq!(h.session.in_flight(), 0);
        // The same ack again is for an id no longer in flight: a protocol violation.
        assert_eq!(
            h.handle(Packet::PubAck(Ack::new(id))),
            Err(SessionError::UnknownPacketId {
                packet: spillway_codec::PacketType::PubAck,
                packet_id: id
            })
        );
    }
}

#[test]
fn qos2_flow_sends_pubrel_then_completes_on_pubcomp() {
    let mut h = Harness::new(Protocol::V5, 8);
    h.connected(false);
    let id = h.publish(msg("t", QoS::ExactlyOnce, b"x"), 7);
    h.drain();
    assert_eq!(h.handle(Packet::PubRec(Ack::new(id))).unwrap(), None);
    assert_eq!(h.drain(), vec![Packet::PubRel(Ack::new(id))]);
    // PUBACK is the wrong acknowledgement for a QoS 2 message.
    assert!(h.handle(Packet::PubAck(Ack::new(id))).is_err());
    let c = completed(h.handle(Packet::PubComp(Ack::new(id))).unwrap());
    assert_eq!((c.token, c.qos), (7, QoS::ExactlyOnce));
}

#[test]
fn qos0_hands_the_token_back_and_takes_no_id() {
    let mut h = Harness::new(Protocol::V311, 1);
    h.connected(false);
    for i in 0..3 {
        let sent = h
            .session
            .publish(msg("t", QoS::AtMostOnce, b"z"), i, &mut h.out, h.now)
            .unwrap();
        assert_eq!(sent, Sent::AtMostOnce(i));
    }
    assert_eq!(publishes(&h.drain()).len(), 3);
    assert_eq!(h.session.in_flight(), 0);
}

#[test]
fn window_is_min_of_config_and_receive_maximum_and_ids_wait_for_completion() {
    let mut h = Harness::new(Protocol::V5, 3);
    h.connect(0);
    let mut ack = ConnAck::new(false, ReasonCode::SUCCESS);
    ack.properties.receive_maximum = NonZeroU16::new(2);
    h.connack(ack).unwrap();
    assert_eq!(h.session.window_limit(), 2);
    let a = h.publish(msg("t", QoS::AtLeastOnce, b"1"), 1);
    let b = h.publish(msg("t", QoS::AtLeastOnce, b"2"), 2);
    assert!(!h.session.can_publish());
    let err = h
        .session
        .publish(msg("t", QoS::AtLeastOnce, b"3"), 3, &mut h.out, h.now)
        .unwrap_err();
    assert_eq!(err.kind, PublishErrorKind::WindowFull);
    assert_eq!((err.token, &err.publish.payload[..]), (3, &b"3"[..]));
    assert!(!err.kind.is_permanent());
    // Completing `a` opens the window; the new id is neither `a` (just freed) nor `b`.
    completed(h.handle(Packet::PubAck(Ack::new(a))).unwrap());
    let c = h.publish(msg("t", QoS::AtLeastOnce, b"3"), 3);
    assert_ne!(c, b);
    assert_ne!(c, a, "the id freed last is reused last");
    assert_eq!(h.session.in_flight(), 2);
}

#[test]
fn window_without_receive_maximum_is_the_configured_one() {
    let mut h = Harness::new(Protocol::V311, 5);
    h.connected(false);
    let ids: Vec<PacketId> = (0..5)
        .map(|i| h.publish(msg("t", QoS::AtLeastOnce, b"p"), i))
        .collect();
    let mut sorted: Vec<u16> = ids.iter().map(|i| i.get()).collect();
    sorted.dedup();
    assert_eq!(sorted.len(), 5, "ids are distinct");
    assert!(!h.session.can_publish());
}

/// Three QoS 1 messages and one QoS 2 message past PUBREC, the first QoS 1 confirmed, then the
/// connection drops.
fn in_flight_then_lost(h: &mut Harness) -> (PacketId, PacketId, PacketId, PacketId) {
    h.connected(false);
    let a = h.publish(msg("t", QoS::AtLeastOnce, b"a"), 1);
    let b = h.publish(msg("t", QoS::AtLeastOnce, b"b"), 2);
    let q2 = h.publish(msg("t", QoS::ExactlyOnce, b"q"), 3);
    let c = h.publish(msg("t", QoS::AtLeastOnce, b"c"), 4);
    completed(h.handle(Packet::PubAck(Ack::new(a))).unwrap());
    h.handle(Packet::PubRec(Ack::new(q2))).unwrap();
    h.drain();
    h.session.connection_lost();
    h.out.clear();
    assert_eq!(h.session.state(), State::Disconnected);
    assert!(
        h.session
            .publish(msg("t", QoS::AtLeastOnce, b"n"), 9, &mut h.out, h.now)
            .is_err_and(|e| e.kind == PublishErrorKind::NotConnected)
    );
    (a, b, q2, c)
}

#[test]
fn resumed_session_resends_unconfirmed_with_dup_and_pubrel_in_order() {
    let mut h = Harness::new(Protocol::V311, 10);
    let (_a, b, q2, c) = in_flight_then_lost(&mut h);
    h.connect(0);
    let ev = h
        .connack(ConnAck::new(true, ReasonCode::SUCCESS))
        .unwrap()
        .unwrap();
    assert_eq!(
        ev,
        Event::Connected {
            session_present: true,
            resent: 3
        }
    );
    let sent = h.drain();
    assert_eq!(
        sent.len(),
        3,
        "only unconfirmed messages go again: {sent:?}"
    );
    assert_eq!(
        publishes(&sent[..1]),
        vec![(b.get(), true, QoS::AtLeastOnce)]
    );
    assert_eq!(sent[1], Packet::PubRel(Ack::new(q2)));
    assert_eq!(
        publishes(&sent[2..]),
        vec![(c.get(), true, QoS::AtLeastOnce)]
    );
    // The flows finish on the new connection.
    assert_eq!(
        completed(h.handle(Packet::PubAck(Ack::new(b))).unwrap()).token,
        2
    );
    assert_eq!(
        completed(h.handle(Packet::PubComp(Ack::new(q2))).unwrap()).token,
        3
    );
    assert_eq!(
        completed(h.handle(Packet::PubAck(Ack::new(c))).unwrap()).token,
        4
    );
    assert_eq!(h.session.in_flight(), 0);
}

#[test]
fn new_session_republishes_unconfirmed_as_new_messages() {
    let mut h = Harness::new(Protocol::V5, 10);
    let (_a, b, q2, c) = in_flight_then_lost(&mut h);
    h.connect(0);
    h.connack(ConnAck::new(false, ReasonCode::SUCCESS)).unwrap();
    let sent = h.drain();
    // The broker forgot everything: the QoS 2 message past PUBREC is published again, as a
    // PUBLISH without DUP, not as a PUBREL.
    assert_eq!(
        publishes(&sent),
        vec![
            (b.get(), false, QoS::AtLeastOnce),
            (q2.get(), false, QoS::ExactlyOnce),
            (c.get(), false, QoS::AtLeastOnce)
        ]
    );
    assert_eq!(sent.len(), 3);
    h.handle(Packet::PubRec(Ack::new(q2))).unwrap();
    assert_eq!(h.drain(), vec![Packet::PubRel(Ack::new(q2))]);
}

#[test]
fn resend_respects_a_smaller_window_after_reconnect() {
    let mut h = Harness::new(Protocol::V5, 10);
    h.connected(false);
    let ids: Vec<PacketId> = (0..4)
        .map(|i| h.publish(msg("t", QoS::AtLeastOnce, b"m"), i))
        .collect();
    h.drain();
    h.session.connection_lost();
    h.connect(0);
    let mut ack = ConnAck::new(true, ReasonCode::SUCCESS);
    ack.properties.receive_maximum = NonZeroU16::new(2);
    h.connack(ack).unwrap();
    assert_eq!(
        publishes(&h.drain()),
        vec![
            (ids[0].get(), true, QoS::AtLeastOnce),
            (ids[1].get(), true, QoS::AtLeastOnce)
        ]
    );
    assert!(!h.session.can_publish(), "re-sends go before new messages");
    completed(h.handle(Packet::PubAck(Ack::new(ids[0]))).unwrap());
    h.session.poll_transmit(&mut h.out, h.now).unwrap();
    assert_eq!(
        publishes(&h.drain()),
        vec![(ids[2].get(), true, QoS::AtLeastOnce)]
    );
    completed(h.handle(Packet::PubAck(Ack::new(ids[1]))).unwrap());
    h.session.poll_transmit(&mut h.out, h.now).unwrap();
    completed(h.handle(Packet::PubAck(Ack::new(ids[2]))).unwrap());
    h.session.poll_transmit(&mut h.out, h.now).unwrap();
    assert_eq!(
        publishes(&h.drain()),
        vec![(ids[3].get(), true, QoS::AtLeastOnce)]
    );
    completed(h.handle(Packet::PubAck(Ack::new(ids[3]))).unwrap());
    assert!(h.session.can_publish());
}

#[test]
fn broker_reason_codes_reach_the_completion() {
    let mut h = Harness::new(Protocol::V5, 4);
    h.connected(false);
    let a = h.publish(msg("t", QoS::AtLeastOnce, b"a"), 1);
    let b = h.publish(msg("t", QoS::ExactlyOnce, b"b"), 2);
    h.drain();
    let mut nack = Ack::new(a);
    nack.reason = ReasonCode::NOT_AUTHORIZED;
    nack.properties.reason_string = Some(s("acl says no"));
    let c = completed(h.handle(Packet::PubAck(nack)).unwrap());
    assert!(!c.is_success());
    assert_eq!(c.reason, ReasonCode(0x87));
    assert_eq!(c.reason_string, Some(s("acl says no")));
    let mut rec = Ack::new(b);
    rec.reason = ReasonCode::QUOTA_EXCEEDED;
    let c = completed(h.handle(Packet::PubRec(rec)).unwrap());
    assert_eq!((c.token, c.reason), (2, ReasonCode(0x97)));
    assert!(h.drain().is_empty(), "no PUBREL after a refused PUBREC");
    assert_eq!(h.session.in_flight(), 0);
}

#[test]
fn connack_refusal_is_an_error_with_the_code() {
    let mut h = Harness::new(Protocol::V5, 4);
    h.connect(30);
    let mut ack = ConnAck::new(false, ReasonCode::BAD_USER_NAME_OR_PASSWORD);
    ack.properties.reason_string = Some(s("bad credentials"));
    let err = h.connack(ack).unwrap_err();
    assert_eq!(
        err,
        SessionError::ConnectionRefused {
            protocol: Protocol::V5,
            code: ReasonCode(0x86),
            reason_string: Some(s("bad credentials")),
        }
    );
    assert!(
        err.to_string().contains("bad user name or password (0x86)"),
        "{err}"
    );
    assert_eq!(h.session.state(), State::Disconnected);

    let mut h = Harness::new(Protocol::V311, 4);
    h.connect(30);
    let err = h.connack(ConnAck::new(false, ReasonCode(5))).unwrap_err();
    assert!(err.to_string().contains("not authorized (0x05)"), "{err}");
}

#[test]
fn protocol_violations_are_errors_not_panics() {
    let mut h = Harness::new(Protocol::V5, 4);
    // Before CONNACK nothing but CONNACK, AUTH or DISCONNECT may come.
    h.connect(0);
    assert!(matches!(
        h.handle(Packet::PubAck(Ack::new(pid(1)))),
        Err(SessionError::UnexpectedPacket { .. })
    ));
    h.connack(ConnAck::new(false, ReasonCode::SUCCESS)).unwrap();
    // A second CONNACK, a PINGREQ or an ack for nothing in flight.
    assert!(h.connack(ConnAck::new(false, ReasonCode::SUCCESS)).is_err());
    assert!(h.handle(Packet::PingReq).is_err());
    assert!(h.handle(Packet::PubComp(Ack::new(pid(9)))).is_err());
    assert!(h.handle(Packet::PubRec(Ack::new(pid(9)))).is_err());
    // PUBCOMP for a message still waiting for PUBREC.
    let id = h.publish(msg("t", QoS::ExactlyOnce, b"x"), 1);
    assert!(h.handle(Packet::PubComp(Ack::new(id))).is_err());
}

#[test]
fn broker_disconnect_ends_the_connection_and_keeps_messages() {
    let mut h = Harness::new(Protocol::V5, 4);
    h.connected(false);
    h.publish(msg("t", QoS::AtLeastOnce, b"x"), 1);
    let d = Disconnect {
        reason: ReasonCode::SERVER_SHUTTING_DOWN,
        ..Default::default()
    };
    assert_eq!(
        h.handle(Packet::Disconnect(d.clone())).unwrap(),
        Some(Event::Disconnected(d))
    );
    assert_eq!(h.session.state(), State::Disconnected);
    assert_eq!(h.session.in_flight(), 1);
    let back = h.session.take_unconfirmed();
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].1, 1);
    assert_eq!(h.session.in_flight(), 0);
}

#[test]
fn keep_alive_pings_when_idle_and_times_out_without_pingresp() {
    let mut h = Harness::new(Protocol::V311, 4);
    h.connect(10);
    h.connack(ConnAck::new(false, ReasonCode::SUCCESS)).unwrap();
    let t0 = h.now;
    assert_eq!(h.session.poll_timeout(), Some(t0 + Duration::from_secs(10)));
    h.session
        .handle_timeout(&mut h.out, t0 + Duration::from_secs(9))
        .unwrap();
    assert!(h.drain().is_empty());
    // Sending something moves the deadline.
    let t5 = t0 + Duration::from_secs(5);
    h.session
        .publish(msg("t", QoS::AtMostOnce, b"x"), 0, &mut h.out, t5)
        .unwrap();
    h.drain();
    assert_eq!(h.session.poll_timeout(), Some(t5 + Duration::from_secs(10)));
    let t15 = t5 + Duration::from_secs(10);
    h.session.handle_timeout(&mut h.out, t15).unwrap();
    assert_eq!(h.drain(), vec![Packet::PingReq]);
    // Answered: the next ping is due a keep-alive later.
    h.session.handle(Packet::PingResp, &mut h.out, t15).unwrap();
    let t25 = t15 + Duration::from_secs(10);
    h.session.handle_timeout(&mut h.out, t25).unwrap();
    assert_eq!(h.drain(), vec![Packet::PingReq]);
    // Not answered within the keep-alive: the connection is dead.
    assert_eq!(
        h.session
            .handle_timeout(&mut h.out, t25 + Duration::from_secs(10)),
        Err(SessionError::KeepAliveTimeout)
    );
}

#[test]
fn with_keep_alive_off_a_silent_broker_is_caught_by_the_ack_timeout() {
    let mut cfg = SessionConfig::new(Protocol::V5, 4);
    cfg.ack_timeout = Some(Duration::from_secs(3));
    let mut h = Harness::with_config(cfg);
    h.connect(0);
    h.connack(ConnAck::new(false, ReasonCode::SUCCESS)).unwrap();
    h.drain();
    let t0 = h.now;
    // Nothing on the wire: no deadline at all (keep-alive is off).
    assert_eq!(h.session.poll_timeout(), None);
    // A QoS 1 message at t0+1: the broker has until t0+4.
    let t1 = t0 + Duration::from_secs(1);
    let id = match h
        .session
        .publish(msg("t", QoS::AtLeastOnce, b"a"), 1, &mut h.out, t1)
    {
        Ok(Sent::Tracked(id)) => id,
        other => panic!("{other:?}"),
    };
    let b = match h
        .session
        .publish(msg("t", QoS::AtLeastOnce, b"b"), 2, &mut h.out, t1)
    {
        Ok(Sent::Tracked(id)) => id,
        other => panic!("{other:?}"),
    };
    h.drain();
    assert_eq!(h.session.poll_timeout(), Some(t1 + Duration::from_secs(3)));
    // An acknowledgement at t0+3 moves the deadline for what still waits.
    let t3 = t0 + Duration::from_secs(3);
    h.session
        .handle(Packet::PubAck(Ack::new(id)), &mut h.out, t3)
        .unwrap();
    assert_eq!(h.session.poll_timeout(), Some(t3 + Duration::from_secs(3)));
    assert_eq!(
        h.session
            .handle_timeout(&mut h.out, t3 + Duration::from_secs(2)),
        Ok(())
    );
    assert_eq!(
        h.session
            .handle_timeout(&mut h.out, t3 + Duration::from_secs(3)),
        Err(SessionError::AckTimeout {
            on_wire: 1,
            waited: Duration::from_secs(3)
        })
    );
    // Once everything is acknowledged there is nothing to wait for.
    h.session
        .handle(Packet::PubAck(Ack::new(b)), &mut h.out, t3)
        .unwrap();
    assert_eq!(h.session.poll_timeout(), None);
    assert_eq!(
        h.session
            .handle_timeout(&mut h.out, t3 + Duration::from_secs(60)),
        Ok(())
    );
}

#[test]
fn server_keep_alive_overrides_the_requested_one() {
    let mut h = Harness::new(Protocol::V5, 4);
    h.connect(60);
    let mut ack = ConnAck::new(false, ReasonCode::SUCCESS);
    ack.properties.server_keep_alive = Some(5);
    h.connack(ack).unwrap();
    assert_eq!(
        h.session.poll_timeout(),
        Some(h.now + Duration::from_secs(5))
    );
}

#[test]
fn topic_aliases_are_assigned_reused_capped_and_reset_on_reconnect() {
    let mut cfg = SessionConfig::new(Protocol::V5, 8);
    cfg.topic_alias_maximum = 10;
    let mut h = Harness::with_config(cfg);
    h.connect(0);
    let mut ack = ConnAck::new(false, ReasonCode::SUCCESS);
    ack.properties.topic_alias_maximum = Some(2);
    h.connack(ack.clone()).unwrap();
    for t in ["a/1", "a/1", "b/2", "c/3"] {
        h.session
            .publish(msg(t, QoS::AtMostOnce, b"p"), 0, &mut h.out, h.now)
            .unwrap();
    }
    let sent: Vec<(String, Option<u16>)> = h
        .drain()
        .into_iter()
        .map(|p| match p {
            Packet::Publish(p) => (
                p.topic.to_string(),
                p.properties.topic_alias.map(|a| a.get()),
            ),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        sent,
        vec![
            ("a/1".to_string(), Some(1)),
            (String::new(), Some(1)),
            ("b/2".to_string(), Some(2)),
            ("c/3".to_string(), None),
        ]
    );
    h.session.connection_lost();
    h.connect(0);
    h.connack(ack).unwrap();
    h.session
        .publish(msg("a/1", QoS::AtMostOnce, b"p"), 0, &mut h.out, h.now)
        .unwrap();
    let Packet::Publish(p) = &h.drain()[0] else {
        panic!()
    };
    assert_eq!(
        (p.topic.as_str(), p.properties.topic_alias.map(|a| a.get())),
        ("a/1", Some(1)),
        "aliases do not survive a reconnect"
    );
}

#[test]
fn no_aliases_unless_both_sides_allow_them() {
    let mut h = Harness::new(Protocol::V5, 8); // topic_alias_maximum 0 in our config
    h.connect(0);
    let mut ack = ConnAck::new(false, ReasonCode::SUCCESS);
    ack.properties.topic_alias_maximum = Some(100);
    h.connack(ack).unwrap();
    for _ in 0..2 {
        h.session
            .publish(msg("a", QoS::AtMostOnce, b"p"), 0, &mut h.out, h.now)
            .unwrap();
    }
    for p in h.drain() {
        let Packet::Publish(p) = p else { panic!() };
        assert_eq!(p.properties.topic_alias, None);
        assert_eq!(p.topic.as_str(), "a");
    }
}

#[test]
fn connack_limits_are_honoured() {
    let mut h = Harness::new(Protocol::V5, 8);
    h.connect(0);
    let mut ack = ConnAck::new(false, ReasonCode::SUCCESS);
    ack.properties.maximum_packet_size = NonZeroU32::new(64);
    ack.properties.maximum_qos = Some(QoS::AtLeastOnce);
    ack.properties.retain_available = Some(false);
    h.connack(ack).unwrap();

    let big = Publish {
        qos: QoS::AtLeastOnce,
        ..Publish::new(s("t"), Bytes::from(vec![7u8; 100]))
    };
    let err = h.session.publish(big, 1, &mut h.out, h.now).unwrap_err();
    assert!(matches!(
        err.kind,
        PublishErrorKind::Encode(EncodeError::PacketTooLarge { max: 64, .. })
    ));
    assert!(err.kind.is_permanent());
    assert_eq!((err.token, err.publish.payload.len()), (1, 100));
    assert_eq!(h.session.in_flight(), 0, "a rejected message takes no id");
    assert!(h.drain().is_empty(), "nothing was queued for it");

    let err = h
        .session
        .publish(msg("t", QoS::ExactlyOnce, b"x"), 2, &mut h.out, h.now)
        .unwrap_err();
    assert_eq!(
        err.kind,
        PublishErrorKind::QosNotSupported {
            maximum: QoS::AtLeastOnce
        }
    );
    let mut retained = msg("t", QoS::AtLeastOnce, b"x");
    retained.retain = true;
    let err = h
        .session
        .publish(retained, 3, &mut h.out, h.now)
        .unwrap_err();
    assert_eq!(err.kind, PublishErrorKind::RetainNotSupported);
    // A message within the limits still goes, with the first id.
    assert_eq!(h.publish(msg("t", QoS::AtLeastOnce, b"ok"), 4), pid(1));
}

#[test]
fn inbound_qos2_is_acknowledged_and_delivered_once() {
    let mut h = Harness::new(Protocol::V5, 4);
    h.connected(false);
    let mut p = msg("in", QoS::ExactlyOnce, b"hi");
    p.packet_id = Some(pid(77));
    assert_eq!(
        h.handle(Packet::Publish(p.clone())).unwrap(),
        Some(Event::Message(p.clone()))
    );
    assert_eq!(h.drain(), vec![Packet::PubRec(Ack::new(pid(77)))]);
    // A DUP re-delivery before PUBREL is acknowledged again but not delivered twice.
    p.dup = true;
    assert_eq!(h.handle(Packet::Publish(p)).unwrap(), None);
    assert_eq!(h.drain(), vec![Packet::PubRec(Ack::new(pid(77)))]);
    h.handle(Packet::PubRel(Ack::new(pid(77)))).unwrap();
    assert_eq!(h.drain(), vec![Packet::PubComp(Ack::new(pid(77)))]);
    // A PUBREL for an unknown id gets PUBCOMP with "packet identifier not found".
    h.handle(Packet::PubRel(Ack::new(pid(78)))).unwrap();
    let mut nf = Ack::new(pid(78));
    nf.reason = ReasonCode::PACKET_IDENTIFIER_NOT_FOUND;
    assert_eq!(h.drain(), vec![Packet::PubComp(nf)]);
}

#[test]
fn controlled_disconnect_keeps_unconfirmed_messages_for_later() {
    let mut h = Harness::new(Protocol::V311, 4);
    h.connected(false);
    h.publish(msg("t", QoS::AtLeastOnce, b"1"), 10);
    h.publish(msg("t", QoS::AtLeastOnce, b"2"), 11);
    h.drain();
    h.session
        .disconnect(Disconnect::default(), &mut h.out, h.now)
        .unwrap();
    assert_eq!(h.drain(), vec![Packet::Disconnect(Disconnect::default())]);
    let back: Vec<u64> = h
        .session
        .take_unconfirmed()
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    assert_eq!(back, vec![10, 11], "in original order");
}
