//! The client session of one MQTT connection, sans-IO.
//!
//! The caller owns the socket and the clock. The call order is:
//!
//! 1. [`Session::connect`] queues CONNECT into an [`Outbound`]; the caller writes it.
//! 2. Every decoded packet goes to [`Session::handle`], which may queue replies (PUBREL,
//!    PUBACK, retransmissions) and returns at most one [`Event`]: connected, a message's flow
//!    completed (with the caller's token and the broker's reason code), a broker DISCONNECT …
//! 3. [`Session::publish`] takes a message and a token (e.g. the source offset), gives it a
//!    packet id from the window and queues it; when the window is full it hands the message
//!    back.
//! 4. [`Session::poll_timeout`] says when [`Session::handle_timeout`] must next be called
//!    (keep-alive).
//! 5. When the connection is lost, [`Session::connection_lost`]; then `connect` again. What
//!    was not confirmed is re-sent after the CONNACK: PUBLISH with DUP and PUBREL when the
//!    broker kept the session, the PUBLISH as new when it did not.
//!
//! The window is `min(configured in-flight, broker Receive Maximum)`; an id is reused only
//! after its flow completed.

mod alias;
mod events;
mod inbound;
mod window;

use std::collections::VecDeque;
use std::fmt;
use std::num::NonZeroU16;
use std::time::{Duration, Instant};

use crate::error::EncodeError;
use crate::outbound::Outbound;
use crate::packet::{
    Ack, Auth, ConnAck, Connect, DecodeOptions, Disconnect, EncodeOptions, MAX_PACKET_SIZE, Packet,
    PacketType, Publish, SubAck, UnsubAck,
};
use crate::reason::ReasonCode;
use crate::string::MqttStr;
use crate::types::{PacketId, Protocol, QoS};

use self::alias::{AliasUse, Aliases};
pub use self::events::{
    Completion, Event, PublishError, PublishErrorKind, Sent, SessionError, State,
};
use self::window::{Stage, Window};
use crate::packet::TopicOut;

/// What the session is configured with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionConfig {
    pub protocol: Protocol,
    /// The most QoS 1/2 messages in flight; the broker's Receive Maximum may lower it.
    pub max_inflight: u16,
    /// The most topic aliases this client uses (MQTT 5); the broker's Topic Alias Maximum
    /// may lower it. 0 turns aliases off.
    pub topic_alias_maximum: u16,
    /// The largest packet this client accepts (sent in CONNECT by the caller on MQTT 5).
    pub max_packet_size: u32,
    /// How long messages may wait on the wire with no packet at all from the broker before
    /// the connection counts as dead ([`SessionError::AckTimeout`]); `None`: never. Keep-alive
    /// catches a silent broker only while it is on; this also does with keep-alive 0 (or a
    /// broker's Server Keep Alive 0).
    pub ack_timeout: Option<Duration>,
}

impl SessionConfig {
    pub fn new(protocol: Protocol, max_inflight: u16) -> Self {
        SessionConfig {
            protocol,
            max_inflight: max_inflight.max(1),
            topic_alias_maximum: 0,
            max_packet_size: MAX_PACKET_SIZE,
            ack_timeout: None,
        }
    }
}

/// The client side of one MQTT connection (see the module documentation for the call order).
/// `T` is the caller's token carried from [`Session::publish`] to its [`Completion`].
pub struct Session<T> {
    cfg: SessionConfig,
    state: State,
    window: Window<T>,
    /// `min(configured, broker Receive Maximum)` on the current connection.
    limit: usize,
    /// Messages sent on the current connection and not completed.
    on_wire: usize,
    /// Messages to send again on the current connection, in original order.
    resend: VecDeque<PacketId>,
    aliases: Aliases,
    encode: EncodeOptions,
    maximum_qos: QoS,
    retain_available: bool,
    keep_alive: Option<Duration>,
    last_sent: Option<Instant>,
    ping_sent: Option<Instant>,
    /// Since when something on the wire waits for the broker with nothing heard from it: set at
    /// the first send onto an empty wire, moved on by every packet from the broker, cleared when
    /// nothing is on the wire.
    unanswered_since: Option<Instant>,
    /// QoS 2 messages from the broker waiting for its PUBREL (bit per packet id).
    inbound_qos2: Vec<u64>,
}

impl<T> fmt::Debug for Session<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("state", &self.state)
            .field("in_flight", &self.window.len())
            .field("on_wire", &self.on_wire)
            .field("limit", &self.limit)
            .field("resend", &self.resend.len())
            .finish_non_exhaustive()
    }
}

impl<T> Session<T> {
    pub fn new(cfg: SessionConfig) -> Self {
        let window = Window::new(cfg.max_inflight);
        Session {
            limit: window.capacity(),
            resend: VecDeque::with_capacity(window.capacity()),
            window,
            cfg,
            state: State::Disconnected,
            on_wire: 0,
            aliases: Aliases::new(),
            encode: EncodeOptions::new(cfg.protocol),
            maximum_qos: QoS::ExactlyOnce,
            retain_available: true,
            keep_alive: None,
            last_sent: None,
            ping_sent: None,
            unanswered_since: None,
            inbound_qos2: vec![0; 1024],
        }
    }

    pub fn state(&self) -> State {
        self.state
    }

    pub fn protocol(&self) -> Protocol {
        self.cfg.protocol
    }

    /// Options for decoding what the broker sends.
    pub fn decode_options(&self) -> DecodeOptions {
        DecodeOptions {
            protocol: self.cfg.protocol,
            max_packet_size: self.cfg.max_packet_size,
        }
    }

    /// Options for encoding to the broker (its Maximum Packet Size once known).
    pub fn encode_options(&self) -> EncodeOptions {
        self.encode
    }

    /// QoS 1/2 messages not yet completed (on the wire or waiting to be re-sent).
    pub fn in_flight(&self) -> usize {
        self.window.len()
    }

    /// QoS 1/2 messages (and PUBRELs) sent on the current connection and waiting for the
    /// broker's answer: each will bring at least one acknowledgement packet.
    pub fn on_wire(&self) -> usize {
        self.on_wire
    }

    /// The highest QoS the broker accepts (CONNACK Maximum QoS; 2 when it sent none).
    pub fn broker_maximum_qos(&self) -> QoS {
        self.maximum_qos
    }

    /// Whether the broker accepts retained messages (CONNACK Retain Available; true when it
    /// sent none).
    pub fn broker_retain_available(&self) -> bool {
        self.retain_available
    }

    /// The largest packet the broker takes (CONNACK Maximum Packet Size; the protocol's
    /// limit when it names none, and on MQTT 3.1.1).
    pub fn broker_maximum_packet_size(&self) -> u32 {
        self.encode.max_packet_size
    }

    /// The current window: `min(configured, broker Receive Maximum)`.
    pub fn window_limit(&self) -> usize {
        self.limit
    }

    /// Whether [`Session::publish`] would accept a QoS 1/2 message now.
    pub fn can_publish(&self) -> bool {
        self.state == State::Connected
            && self.resend.is_empty()
            && self.on_wire < self.limit
            && self.window.has_free()
    }

    /// Queues CONNECT. The session takes the keep-alive from it.
    pub fn connect(
        &mut self,
        connect: &Connect,
        out: &mut Outbound,
        now: Instant,
    ) -> Result<(), SessionError> {
        if self.state != State::Disconnected {
            return Err(SessionError::AlreadyConnected);
        }
        let opts = EncodeOptions::new(self.cfg.protocol);
        connect
            .write(out.buf(), &opts)
            .map_err(SessionError::Encode)?;
        self.state = State::Connecting;
        self.keep_alive =
            (connect.keep_alive > 0).then(|| Duration::from_secs(u64::from(connect.keep_alive)));
        self.note_sent(now);
        self.ping_sent = None;
        Ok(())
    }

    /// The network connection is gone: what was not confirmed will be re-sent after the next
    /// CONNACK. The caller should also clear its [`Outbound`].
    pub fn connection_lost(&mut self) {
        self.state = State::Disconnected;
        self.on_wire = 0;
        self.unanswered_since = None;
        self.resend.clear();
        for e in self.window.entries_mut() {
            e.on_wire = false;
        }
        self.aliases.reset(0);
        self.ping_sent = None;
        self.last_sent = None;
        self.inbound_qos2.iter_mut().for_each(|w| *w = 0);
    }

    // The error hands the message back by value: boxing it would allocate on the window-full
    // path, which is the normal back-pressure path of a busy sink.
    #[allow(clippy::result_large_err)]
    /// Queues a message. QoS 0 goes out at once and its token comes back in
    /// [`Sent::AtMostOnce`]; QoS 1/2 takes a packet id (`publish.packet_id` and `dup` are
    /// set by the session). A message that cannot go now comes back in the error.
    pub fn publish(
        &mut self,
        mut publish: Publish,
        token: T,
        out: &mut Outbound,
        now: Instant,
    ) -> Result<Sent<T>, PublishError<T>> {
        let fail = |kind, publish, token| {
            Err(PublishError {
                kind,
                publish,
                token,
            })
        };
        if self.state != State::Connected {
            return fail(PublishErrorKind::NotConnected, publish, token);
        }
        if publish.qos > self.maximum_qos {
            return fail(
                PublishErrorKind::QosNotSupported {
                    maximum: self.maximum_qos,
                },
                publish,
                token,
            );
        }
        if publish.retain && !self.retain_available {
            return fail(PublishErrorKind::RetainNotSupported, publish, token);
        }
        publish.dup = false;
        if publish.qos == QoS::AtMostOnce {
            publish.packet_id = None;
            return match encode_publish(&mut self.aliases, &self.encode, &publish, None, false, out)
            {
                Ok(()) => {
                    // The message is not kept: its payload moves into the queue.
                    out.push_payload(publish.payload);
                    self.note_sent(now);
                    Ok(Sent::AtMostOnce(token))
                }
                Err(e) => fail(PublishErrorKind::Encode(e), publish, token),
            };
        }
        if !self.can_publish() {
            return fail(PublishErrorKind::WindowFull, publish, token);
        }
        let Some(id) = self.window.next_id() else {
            return fail(PublishErrorKind::WindowFull, publish, token);
        };
        // Encode first, store after: a message that cannot be encoded never takes an id.
        if let Err(e) = encode_publish(
            &mut self.aliases,
            &self.encode,
            &publish,
            Some(id),
            false,
            out,
        ) {
            return fail(PublishErrorKind::Encode(e), publish, token);
        }
        out.push_payload_ref(&publish.payload);
        match self.window.insert(publish, token) {
            Ok(id) => {
                self.on_wire += 1;
                self.note_sent(now);
                Ok(Sent::Tracked(id))
            }
            Err((publish, token)) => fail(PublishErrorKind::WindowFull, publish, token),
        }
    }

    /// Encodes the PUBLISH (or PUBREL) of a held message and counts it on the wire.
    fn transmit(&mut self, id: PacketId, dup: bool, out: &mut Outbound) -> Result<(), EncodeError> {
        let Some(entry) = self.window.get_mut(id) else {
            return Ok(());
        };
        if entry.stage == Stage::AwaitComp {
            Packet::PubRel(Ack::new(id)).encode(out.buf(), &self.encode)?;
        } else {
            encode_publish(
                &mut self.aliases,
                &self.encode,
                &entry.publish,
                Some(id),
                dup,
                out,
            )?;
            out.push_payload_ref(&entry.publish.payload);
        }
        entry.on_wire = true;
        self.on_wire += 1;
        Ok(())
    }

    /// Processes one packet from the broker. Replies are queued in `out`.
    pub fn handle(
        &mut self,
        packet: Packet,
        out: &mut Outbound,
        now: Instant,
    ) -> Result<Option<Event<T>>, SessionError> {
        let result = self.handle_packet(packet, out, now);
        // The broker is alive: what still waits, waits from now.
        self.unanswered_since = (self.on_wire > 0).then_some(now);
        result
    }

    /// Records a send at `now` (keep-alive, and the ack timeout's start on an idle wire).
    fn note_sent(&mut self, now: Instant) {
        self.last_sent = Some(now);
        if self.on_wire > 0 && self.unanswered_since.is_none() {
            self.unanswered_since = Some(now);
        }
    }

    /// After completions free room in the window, sends waiting re-sends. Call after
    /// [`Session::handle`] returned a completion (it is cheap when nothing waits).
    pub fn poll_transmit(&mut self, out: &mut Outbound, now: Instant) -> Result<(), SessionError> {
        if self.state == State::Connected && !self.resend.is_empty() {
            self.flush_resend(out, true).map_err(SessionError::Encode)?;
            self.note_sent(now);
        }
        Ok(())
    }

    /// When [`Session::handle_timeout`] must next be called, if ever.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.state == State::Disconnected {
            return None;
        }
        let keep_alive = self.keep_alive.and_then(|ka| match self.ping_sent {
            Some(t) => Some(t + ka),
            None => self.last_sent.map(|t| t + ka),
        });
        let ack = self.ack_deadline();
        match (keep_alive, ack) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When the messages on the wire have waited the ack timeout with the broker silent.
    fn ack_deadline(&self) -> Option<Instant> {
        let timeout = self.cfg.ack_timeout?;
        if self.state != State::Connected || self.on_wire == 0 {
            return None;
        }
        self.unanswered_since.map(|t| t + timeout)
    }

    /// Keep-alive: queues a PINGREQ when nothing was sent for the keep-alive interval, and
    /// fails when a PINGREQ got no answer within it.
    pub fn handle_timeout(&mut self, out: &mut Outbound, now: Instant) -> Result<(), SessionError> {
        if let (Some(deadline), Some(waited)) = (self.ack_deadline(), self.cfg.ack_timeout)
            && now >= deadline
        {
            return Err(SessionError::AckTimeout {
                on_wire: self.on_wire,
                waited,
            });
        }
        let Some(ka) = self.keep_alive else {
            return Ok(());
        };
        if self.state == State::Disconnected {
            return Ok(());
        }
        if let Some(t) = self.ping_sent {
            if now >= t + ka {
                return Err(SessionError::KeepAliveTimeout);
            }
            return Ok(());
        }
        if self.state == State::Connected && self.last_sent.is_some_and(|t| now >= t + ka) {
            self.control(Packet::PingReq, out, now)?;
            self.ping_sent = Some(now);
        }
        Ok(())
    }

    /// Queues DISCONNECT and ends the session's connection (a controlled shutdown: messages
    /// still held stay held, to be re-sent on a later connection or taken back with
    /// [`Session::take_unconfirmed`]).
    pub fn disconnect(
        &mut self,
        disconnect: Disconnect,
        out: &mut Outbound,
        now: Instant,
    ) -> Result<(), SessionError> {
        if self.state == State::Connected {
            self.control(Packet::Disconnect(disconnect), out, now)?;
        }
        self.connection_lost();
        Ok(())
    }

    /// The message whose PUBLISH goes first after a reconnect: the oldest held whose PUBLISH
    /// the broker has not acknowledged (a QoS 2 message past PUBREC is not one). Its token, its
    /// payload size and whether it was sent on the current connection. Call it before
    /// [`Session::connection_lost`] to learn what the lost connection had sent.
    pub fn head_unacknowledged(&self) -> Option<(&T, usize, bool)> {
        self.window
            .in_send_order()
            .into_iter()
            .filter_map(|id| self.window.get(id))
            .find(|e| e.stage == Stage::AwaitAck)
            .map(|e| (&e.token, e.publish.payload.len(), e.on_wire))
    }

    /// Takes the message [`Session::head_unacknowledged`] names out of the window (the
    /// caller gives up on it), freeing its packet id.
    pub fn take_head_unacknowledged(&mut self) -> Option<(Publish, T)> {
        let id = self.window.in_send_order().into_iter().find(|&id| {
            self.window
                .get(id)
                .is_some_and(|e| e.stage == Stage::AwaitAck)
        })?;
        self.resend.retain(|&r| r != id);
        self.window.remove(id).map(|e| (e.publish, e.token))
    }

    /// Takes back every message still held (not confirmed), in original order, freeing the
    /// window. The caller decides what to do with them (e.g. leave their offsets
    /// uncommitted).
    pub fn take_unconfirmed(&mut self) -> Vec<(Publish, T)> {
        let order = self.window.in_send_order();
        self.resend.clear();
        self.on_wire = 0;
        self.unanswered_since = None;
        order
            .into_iter()
            .filter_map(|id| self.window.remove(id))
            .map(|e| (e.publish, e.token))
            .collect()
    }
}

/// Encodes the header of a PUBLISH (not its payload: the caller queues it, moved or shared)
/// with the topic alias the connection's table gives it. A free function so that the message
/// can stay borrowed from the window while the alias table changes.
fn encode_publish(
    aliases: &mut Aliases,
    opts: &EncodeOptions,
    publish: &Publish,
    id: Option<PacketId>,
    dup: bool,
    out: &mut Outbound,
) -> Result<(), EncodeError> {
    let alias = if opts.protocol == Protocol::V5 && publish.properties.topic_alias.is_none() {
        aliases.lookup(publish.topic.bytes())
    } else {
        AliasUse::None
    };
    let topic_out = match alias {
        AliasUse::None => TopicOut::Plain,
        AliasUse::Assign(a) => TopicOut::WithAlias(a),
        AliasUse::Reuse(a) => TopicOut::AliasOnly(a),
    };
    publish.encode_parts(out.buf(), opts, id, dup, topic_out)?;
    if let AliasUse::Assign(a) = alias {
        aliases.commit(publish.topic.bytes(), a);
    }
    Ok(())
}
