//! What the broker sends: CONNACK, the acknowledgements of our messages (PUBACK, PUBREC,
//! PUBCOMP) and the packets a client only answers (inbound PUBLISH, PUBREL, PINGRESP,
//! DISCONNECT, AUTH), each moving the session and the window on.

use super::*;

impl<T> Session<T> {
    pub(super) fn handle_packet(
        &mut self,
        packet: Packet,
        out: &mut Outbound,
        now: Instant,
    ) -> Result<Option<Event<T>>, SessionError> {
        let kind = packet.packet_type();
        match (self.state, packet) {
            (State::Connecting, Packet::ConnAck(ack)) => self.on_connack(ack, out, now).map(Some),
            (State::Connected, Packet::PubAck(ack)) => self.on_ack(ack, PacketType::PubAck),
            (State::Connected, Packet::PubRec(ack)) => self.on_pubrec(ack, out, now),
            (State::Connected, Packet::PubComp(ack)) => self.on_ack(ack, PacketType::PubComp),
            (State::Connected, Packet::PingResp) => {
                self.ping_sent = None;
                Ok(None)
            }
            (State::Connected, Packet::Publish(p)) => self.on_inbound_publish(p, out, now),
            (State::Connected, Packet::PubRel(ack)) => {
                let id = ack.packet_id;
                let known = self.take_inbound_qos2(id);
                let mut comp = Ack::new(id);
                if !known && self.cfg.protocol == Protocol::V5 {
                    comp.reason = ReasonCode::PACKET_IDENTIFIER_NOT_FOUND;
                }
                self.control(Packet::PubComp(comp), out, now)?;
                Ok(None)
            }
            (State::Connected, Packet::SubAck(s)) => Ok(Some(Event::SubAck(s))),
            (State::Connected, Packet::UnsubAck(s)) => Ok(Some(Event::UnsubAck(s))),
            (State::Connecting | State::Connected, Packet::Auth(a))
                if self.cfg.protocol == Protocol::V5 =>
            {
                Ok(Some(Event::Auth(a)))
            }
            (State::Connecting | State::Connected, Packet::Disconnect(d))
                if self.cfg.protocol == Protocol::V5 =>
            {
                self.connection_lost();
                Ok(Some(Event::Disconnected(d)))
            }
            (state, _) => Err(SessionError::UnexpectedPacket {
                packet: kind,
                state,
            }),
        }
    }

    pub(super) fn control(
        &mut self,
        packet: Packet,
        out: &mut Outbound,
        now: Instant,
    ) -> Result<(), SessionError> {
        let opts = self.encode;
        packet
            .encode(out.buf(), &opts)
            .map_err(SessionError::Encode)?;
        self.note_sent(now);
        Ok(())
    }

    pub(super) fn on_connack(
        &mut self,
        mut ack: ConnAck,
        out: &mut Outbound,
        now: Instant,
    ) -> Result<Event<T>, SessionError> {
        if !ack.is_success() {
            self.state = State::Disconnected;
            return Err(SessionError::ConnectionRefused {
                protocol: self.cfg.protocol,
                code: ack.code,
                reason_string: ack.properties.take_reason_string(),
            });
        }
        self.state = State::Connected;
        let p = &ack.properties;
        let receive_max = p.receive_maximum.map_or(u16::MAX, NonZeroU16::get);
        self.limit = self.window.capacity().min(receive_max as usize);
        self.encode.max_packet_size = p.maximum_packet_size.map_or(MAX_PACKET_SIZE, |m| m.get());
        self.maximum_qos = p.maximum_qos.unwrap_or(QoS::ExactlyOnce);
        self.retain_available = p.retain_available.unwrap_or(true);
        let alias_max = if self.cfg.protocol == Protocol::V5 {
            self.cfg
                .topic_alias_maximum
                .min(p.topic_alias_maximum.unwrap_or(0))
        } else {
            0
        };
        self.aliases.reset(alias_max);
        if let Some(k) = p.server_keep_alive {
            self.keep_alive = (k > 0).then(|| Duration::from_secs(u64::from(k)));
        }
        self.ping_sent = None;
        self.on_wire = 0;
        // Everything held goes again, in original order. Without a session on the broker,
        // a message past PUBREC is published again as new: the broker forgot it.
        let order = self.window.in_send_order();
        for &id in &order {
            if let Some(e) = self.window.get_mut(id) {
                e.on_wire = false;
                if !ack.session_present {
                    e.stage = Stage::AwaitAck;
                }
            }
        }
        let resent = order.len();
        self.resend.clear();
        self.resend.extend(order);
        self.flush_resend(out, ack.session_present)
            .map_err(SessionError::Encode)?;
        self.note_sent(now);
        Ok(Event::Connected {
            session_present: ack.session_present,
            resent,
        })
    }

    /// Sends queued re-sends while the window allows.
    pub(super) fn flush_resend(
        &mut self,
        out: &mut Outbound,
        dup: bool,
    ) -> Result<(), EncodeError> {
        while self.on_wire < self.limit {
            let Some(id) = self.resend.pop_front() else {
                break;
            };
            match self.window.get(id) {
                Some(e) if !e.on_wire => self.transmit(id, dup, out)?,
                _ => {}
            }
        }
        Ok(())
    }

    pub(super) fn complete(
        &mut self,
        id: PacketId,
        reason: ReasonCode,
        reason_string: Option<MqttStr>,
    ) -> Option<Event<T>> {
        let entry = self.window.remove(id)?;
        if entry.on_wire {
            self.on_wire = self.on_wire.saturating_sub(1);
        }
        Some(Event::Completed(Completion {
            token: entry.token,
            packet_id: id,
            qos: entry.publish.qos,
            payload_len: entry.publish.payload.len(),
            reason,
            reason_string,
        }))
    }

    pub(super) fn on_ack(
        &mut self,
        mut ack: Ack,
        kind: PacketType,
    ) -> Result<Option<Event<T>>, SessionError> {
        let id = ack.packet_id;
        let expected = match kind {
            PacketType::PubAck => (QoS::AtLeastOnce, Stage::AwaitAck),
            _ => (QoS::ExactlyOnce, Stage::AwaitComp),
        };
        match self.window.get(id) {
            Some(e) if (e.publish.qos, e.stage) == expected => {}
            _ => {
                return Err(SessionError::UnknownPacketId {
                    packet: kind,
                    packet_id: id,
                });
            }
        }
        let ev = self.complete(id, ack.reason, ack.properties.take_reason_string());
        Ok(ev)
    }

    pub(super) fn on_pubrec(
        &mut self,
        mut ack: Ack,
        out: &mut Outbound,
        now: Instant,
    ) -> Result<Option<Event<T>>, SessionError> {
        let id = ack.packet_id;
        let stage = match self.window.get(id) {
            Some(e) if e.publish.qos == QoS::ExactlyOnce => e.stage,
            _ => {
                return Err(SessionError::UnknownPacketId {
                    packet: PacketType::PubRec,
                    packet_id: id,
                });
            }
        };
        if ack.reason.is_error() {
            // MQTT 5 §4.3.3: a PUBREC with an error code ends the flow; no PUBREL.
            return Ok(self.complete(id, ack.reason, ack.properties.take_reason_string()));
        }
        if stage == Stage::AwaitAck
            && let Some(e) = self.window.get_mut(id)
        {
            e.stage = Stage::AwaitComp;
        }
        // A repeated PUBREC (after a re-send) is answered with PUBREL again.
        self.control(Packet::PubRel(Ack::new(id)), out, now)?;
        Ok(None)
    }

    pub(super) fn on_inbound_publish(
        &mut self,
        p: Publish,
        out: &mut Outbound,
        now: Instant,
    ) -> Result<Option<Event<T>>, SessionError> {
        match (p.qos, p.packet_id) {
            (QoS::AtMostOnce, _) => Ok(Some(Event::Message(p))),
            (QoS::AtLeastOnce, Some(id)) => {
                self.control(Packet::PubAck(Ack::new(id)), out, now)?;
                Ok(Some(Event::Message(p)))
            }
            (QoS::ExactlyOnce, Some(id)) => {
                let first = !self.inbound_qos2_contains(id);
                self.set_inbound_qos2(id);
                self.control(Packet::PubRec(Ack::new(id)), out, now)?;
                // A DUP re-delivery of a message already received is acknowledged, not
                // delivered twice.
                Ok(first.then_some(Event::Message(p)))
            }
            _ => Err(SessionError::ProtocolViolation(
                "QoS 1/2 PUBLISH without a packet id",
            )),
        }
    }

    pub(super) fn inbound_qos2_contains(&self, id: PacketId) -> bool {
        let i = id.get() as usize;
        self.inbound_qos2[i / 64] & (1 << (i % 64)) != 0
    }

    pub(super) fn set_inbound_qos2(&mut self, id: PacketId) {
        let i = id.get() as usize;
        self.inbound_qos2[i / 64] |= 1 << (i % 64);
    }

    pub(super) fn take_inbound_qos2(&mut self, id: PacketId) -> bool {
        let had = self.inbound_qos2_contains(id);
        let i = id.get() as usize;
        self.inbound_qos2[i / 64] &= !(1 << (i % 64));
        had
    }
}
