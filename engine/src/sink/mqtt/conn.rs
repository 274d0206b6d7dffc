//! One broker connection of the MQTT sink, on the shard's monoio runtime.
//!
//! The sink queues PUBLISH packets on a [`Link`]; the connection task owns the socket. After
//! CONNECT/CONNACK the socket is split: the writer moves queued messages into the codec's
//! [`Session`] while its window has room, gathers every encoded header and payload into one
//! vectored write, and confirms QoS 0 messages once written; the reader decodes the broker's
//! packets, hands them to the session, and turns completions into confirmations (coalesced into
//! ranges) or rejections (the sink's error policy). Whatever ends the connection (I/O error,
//! protocol error, broker DISCONNECT, keep-alive timeout) leads to a reconnect with exponential
//! backoff and jitter; the session then re-sends what was not confirmed, with DUP and the
//! pending PUBRELs when the broker kept the session, as new otherwise.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::num::NonZeroU32;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use monoio::io::{AsyncReadRent, AsyncWriteRent, Split, Splitable};
use monoio::time::timeout;
use spillway_codec::session::{Event, Sent, Session, SessionConfig, SessionError};
use spillway_codec::{
    Connect, DecodeError, Decoded, Disconnect, MqttStr, Outbound, PacketType, Protocol, Publish,
    QoS, ReasonCode, Will, decode,
};
use spillway_net::IoVecs;
use tracing::{info, warn};

use super::shape::{Kept, Shaper};
use crate::acks::Acks;
use crate::config::{ErrorPolicy, MqttSinkConfig, MqttVersion};
use crate::error::{EngineError, ErrorClass};
use crate::ids::{Offset, Slot};
use crate::template::name::Place;
use crate::template::topic::topic_name;
use crate::units::{Backoff, Rounded};

/// The most bytes gathered into one vectored write.
const MAX_WRITE: usize = 1 << 20;
/// Smallest room made in the read buffer before a read.
const MIN_READ: usize = 64 * 1024;

/// What a queued message carries back to the engine.
#[derive(Debug)]
pub struct Token {
    /// Partition slot.
    pub slot: Slot,
    /// Offset.
    pub offset: Offset,
    /// The message, kept for the dead-letter topic (only under `on_error = "dead_letter"`).
    pub kept: Option<Box<Kept>>,
    /// This is the dead letter of the message: its failure is final.
    pub dead_letter: bool,
    /// A status message of the connection (the birth message, or the will published at a
    /// controlled shutdown): no Iggy offset stands behind it.
    pub status: bool,
}

impl Token {
    /// The token of a status message: its slot matches no partition.
    fn status() -> Token {
        Token {
            slot: Slot(usize::MAX),
            offset: Offset(0),
            kept: None,
            dead_letter: false,
            status: true,
        }
    }
}

/// A message waiting for the connection.
#[derive(Debug)]
pub struct Item {
    pub publish: Publish,
    pub token: Token,
}

/// What every connection of the sink on this shard shares.
pub struct Ctx {
    pub cfg: MqttSinkConfig,
    pub sink: String,
    pub shard: usize,
    pub acks: Acks,
    pub policy: ErrorPolicy,
    pub dead_letter_topic: Option<MqttStr>,
    pub shaper: Rc<RefCell<Shaper>>,
    /// The TLS configuration, and the name to check for each broker address.
    pub tls: Option<(
        Arc<rustls::ClientConfig>,
        Vec<rustls::pki_types::ServerName<'static>>,
    )>,
    /// A failure that stops the sink.
    pub fatal: RefCell<Option<EngineError>>,
    /// The per-message lines of dead letters (a few a second, then a count).
    pub dead_letter_log: RefCell<crate::ratelog::RateLimit>,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("sink", &self.sink)
            .field("shard", &self.shard)
            .finish_non_exhaustive()
    }
}

impl Ctx {
    fn set_fatal(&self, e: EngineError) {
        let mut f = self.fatal.borrow_mut();
        if f.is_none() {
            *f = Some(e);
        }
    }

    /// A message the broker (or the session) will not take: the error policy decides.
    pub fn reject(&self, link: &Link, token: Token, reason: String, code: Option<ReasonCode>) {
        if token.status {
            warn!(
                sink = %self.sink,
                conn = link.index,
                "the birth message (sink.mqtt.birth) was not taken: {reason}"
            );
            return;
        }
        if token.dead_letter {
            self.acks.fail(
                token.slot,
                token.offset,
                format!("its dead letter was rejected too: {reason}"),
            );
            return;
        }
        if self.policy == ErrorPolicy::DeadLetter
            && let (Some(topic), Some(kept)) = (&self.dead_letter_topic, token.kept)
        {
            if let Some(more) = crate::ratelog::per_message(&self.dead_letter_log, Instant::now()) {
                warn!(
                    sink = %self.sink,
                    partition = kept.partition.partition.0,
                    offset = token.offset.0,
                    "sending a rejected message to the dead-letter topic: {reason}{more}"
                );
            }
            let publish = self.shaper.borrow().dead_letter(
                topic,
                &kept.partition,
                &kept.message,
                &reason,
                code,
            );
            link.queue.borrow_mut().push_front(Item {
                publish,
                token: Token {
                    slot: token.slot,
                    offset: token.offset,
                    kept: None,
                    dead_letter: true,
                    status: false,
                },
            });
            link.wake();
            return;
        }
        self.acks.fail(token.slot, token.offset, reason);
    }
}

/// The state of one connection, shared by the sink and the connection task.
pub struct Link {
    /// Connection number on the shard.
    pub index: usize,
    pub queue: RefCell<VecDeque<Item>>,
    pub session: RefCell<Session<Token>>,
    out: RefCell<Outbound>,
    /// QoS 0 messages encoded into `out` and not written yet.
    qos0: RefCell<Vec<Token>>,
    writer: Cell<Option<Waker>>,
    /// Connected (CONNACK received) right now.
    pub up: Cell<bool>,
    /// When the current connection got its CONNACK.
    pub up_since: Cell<Option<Instant>>,
    /// The first connection attempt has an outcome.
    pub tried: Cell<bool>,
    /// Drain: send DISCONNECT once nothing is queued or in flight.
    pub closing: Cell<bool>,
    /// End now.
    pub stop: Cell<bool>,
    /// The task has ended.
    pub finished: Cell<bool>,
    /// Most QoS 1/2 messages in flight at once.
    pub peak_in_flight: Cell<usize>,
    /// Connections made after the first.
    pub reconnects: Cell<u64>,
    /// The broker sent an acknowledgement code its packet may not carry on this connection
    /// (logged once per connection).
    off_spec: Cell<bool>,
    /// The largest payload the broker accepted on this link: only a message larger than any
    /// accepted is suspected of a size limit when connections close right after it.
    largest_accepted: Cell<usize>,
    /// `max_publish_rate`: PUBLISH packets paced on this connection.
    pace: RefCell<Option<Pace>>,
    /// Which of the broker addresses this connection uses now (they are tried in turn).
    at: Cell<usize>,
}

/// A token bucket of PUBLISH packets (`mqtt.max_publish_rate`): a tenth of a second's worth
/// may go at once, the rest waits for tokens; nothing is dropped.
#[derive(Debug, Clone, Copy)]
struct Pace {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl Pace {
    fn new(rate: f64, now: Instant) -> Pace {
        let burst = (rate / 10.0).max(1.0);
        Pace {
            rate,
            burst,
            tokens: burst,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let secs = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + secs * self.rate).min(self.burst);
        self.at = now;
    }

    /// Takes a token if there is one.
    fn take(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// When the next token comes.
    fn next(&self) -> Instant {
        let missing = (1.0 - self.tokens).max(0.0);
        self.at + Duration::from_secs_f64(missing / self.rate)
    }
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("index", &self.index)
            .field("queued", &self.queue.borrow().len())
            .field("up", &self.up.get())
            .finish_non_exhaustive()
    }
}

impl Link {
    pub fn new(index: usize, cfg: &MqttSinkConfig) -> Link {
        let protocol = match cfg.protocol {
            MqttVersion::V311 => Protocol::V311,
            MqttVersion::V5 => Protocol::V5,
        };
        let mut scfg = SessionConfig::new(protocol, cfg.window());
        scfg.topic_alias_maximum = cfg.topic_aliases;
        scfg.max_packet_size = cfg.max_incoming_packet();
        scfg.ack_timeout = (!cfg.ack_timeout.0.is_zero()).then_some(cfg.ack_timeout.0);
        let mut out = Outbound::with_capacity(64 * 1024, 256);
        out.set_inline_max(256);
        Link {
            index,
            queue: RefCell::new(VecDeque::new()),
            session: RefCell::new(Session::new(scfg)),
            out: RefCell::new(out),
            qos0: RefCell::new(Vec::new()),
            writer: Cell::new(None),
            up: Cell::new(false),
            up_since: Cell::new(None),
            tried: Cell::new(false),
            closing: Cell::new(false),
            stop: Cell::new(false),
            finished: Cell::new(false),
            peak_in_flight: Cell::new(0),
            off_spec: Cell::new(false),
            largest_accepted: Cell::new(0),
            reconnects: Cell::new(0),
            pace: RefCell::new(
                (cfg.max_publish_rate > 0.0)
                    .then(|| Pace::new(cfg.max_publish_rate, Instant::now())),
            ),
            at: Cell::new(0),
        }
    }

    /// The broker address this connection uses now.
    pub fn address<'a>(&self, cfg: &'a MqttSinkConfig) -> &'a str {
        let n = cfg.addresses().count().max(1);
        cfg.addresses()
            .nth(self.at.get() % n)
            .unwrap_or(&cfg.address)
    }

    /// Moves on to the next broker address (with one, stays).
    fn next_address(&self) {
        self.at.set(self.at.get().wrapping_add(1));
    }

    /// Wakes the writer (new messages, room in the window, replies to send, closing).
    pub fn wake(&self) {
        if let Some(w) = self.writer.take() {
            w.wake();
        }
    }

    /// Nothing queued, nothing in flight, nothing unwritten.
    pub fn idle(&self) -> bool {
        self.queue.borrow().is_empty()
            && self.session.borrow().in_flight() == 0
            && self.qos0.borrow().is_empty()
            && self.out.borrow().is_empty()
    }

    /// Drops queued messages of `slot` (the partition is no longer this sink's).
    pub fn release(&self, slot: Slot) {
        self.queue.borrow_mut().retain(|i| i.token.slot != slot);
    }
}

/// Contiguous confirmations of one partition, reported as one range.
#[derive(Default)]
struct Run {
    run: Option<(Slot, Offset, Offset)>,
}

impl Run {
    fn push(&mut self, acks: &Acks, slot: Slot, offset: Offset) {
        match &mut self.run {
            Some((s, _, last)) if *s == slot && offset == last.next() => *last = offset,
            _ => {
                self.flush(acks);
                self.run = Some((slot, offset, offset));
            }
        }
    }

    fn flush(&mut self, acks: &Acks) {
        if let Some((slot, first, last)) = self.run.take() {
            acks.confirm(slot, first, last);
        }
    }
}

/// CONNACK codes worth retrying: the broker is unavailable, busy or rate-limiting for now.
fn transient_refusal(protocol: Protocol, code: ReasonCode) -> bool {
    match protocol {
        Protocol::V311 => code.0 == 3,
        Protocol::V5 => matches!(code.0, 0x88 | 0x89 | 0x97 | 0x9F),
    }
}

/// How long a connection must have lasted after its CONNACK for the reconnect backoff to start
/// over at `reconnect_min` when it ends.
const HEALTHY_CONNECTION: Duration = Duration::from_secs(5);

/// Closes in a row right after the same message went out before that message is given up
/// as refused by the broker (see the reconnect loop).
const HEAD_STRIKES: u32 = 3;

/// Runs connection `link` until it is stopped, closed after a drain, or fails for good.
pub async fn run(ctx: Rc<Ctx>, link: Rc<Link>) {
    let cfg = &ctx.cfg;
    let mut backoff = Backoff::new(cfg.reconnect_min.0, cfg.reconnect_max.0);
    let mut first = true;
    // A persistent session must begin with a connection made with Clean Start (Session) 0:
    // MQTT 3.1.1 keeps no session for a clean connection, and mosquitto persists an MQTT 5
    // session across its own restarts only when it began that way. But such a connection would
    // also resume a session an earlier process left (with packet ids this process knows
    // nothing of), so the first connection clears it with a clean connection, disconnects,
    // and then connects with Clean Start 0.
    let mut clear_first = !cfg.clean_start;
    // The message at the head when connections closed right after it went out, and how many
    // times in a row.
    let mut strikes: Option<((Slot, Offset, usize), u32)> = None;
    while !link.stop.get() {
        let clean = first || cfg.clean_start;
        let result = connection(&ctx, &link, clean, clear_first).await;
        let was_up = link.up.replace(false);
        let lasted = link
            .up_since
            .take()
            .map_or(Duration::ZERO, |since| since.elapsed());
        // The connection that only clears an old session is not the first attempt: the one
        // after it is (the sink waits for that one's outcome before it polls).
        if !matches!(result, Ok(Closed::Cleared)) {
            link.tried.set(true);
        }
        let head = link
            .session
            .borrow()
            .head_unacknowledged()
            .map(|(t, size, sent)| (t.slot, t.offset, t.status, size, sent));
        // Everything not confirmed goes again on the next connection (the session keeps
        // QoS 1/2 messages); QoS 0 messages not written are polled again.
        lost(&ctx, &link);
        // A broker that closes the connection right after the same message went out, again
        // and again, refuses that message: mosquitto drops the connection of a packet over
        // its max_packet_size, and MQTT 3.1.1 has no way to say why. After HEAD_STRIKES such
        // closes in a row the message goes to on_error, named with its size, when it is larger
        // than every message the broker accepted, and it accepted some (a broker that breaks
        // every connection whatever was sent accepts none; one that accepted larger messages
        // has no size limit this one breaks).
        let suspect = match (&result, head) {
            (Err(e), Some((slot, offset, false, size, true)))
                if e.is_transient()
                    && was_up
                    && lasted < HEALTHY_CONNECTION
                    && link.largest_accepted.get() > 0
                    && size > link.largest_accepted.get() =>
            {
                Some((slot, offset, size))
            }
            _ => None,
        };
        strikes = match (suspect, strikes) {
            (Some(s), Some((last, n))) if (s.0, s.1) == (last.0, last.1) => Some((s, n + 1)),
            (Some(s), _) => Some((s, 1)),
            (None, _) => None,
        };
        if let Some(((_, offset, size), n)) = strikes
            && n >= HEAD_STRIKES
        {
            strikes = None;
            let taken = link.session.borrow_mut().take_head_unacknowledged();
            if let Some((_, token)) = taken {
                let reason = format!(
                    "the broker closed the connection {n} times in a row right after this \
                     message (offset {offset}, {size} bytes of payload) was sent: it refuses it, \
                     most likely over a size limit of the broker (MQTT 3.1.1 cannot say why; \
                     MQTT 5 names the limit)"
                );
                ctx.reject(&link, token, reason, None);
            }
        }
        match result {
            Ok(Closed::Drained) => break,
            Ok(Closed::Cleared) => {
                clear_first = false;
                first = false;
                continue;
            }
            Err(e) if !e.is_transient() => {
                // The engine logs it once, as the reason it stops.
                ctx.set_fatal(e);
                break;
            }
            Err(e) => {
                if link.stop.get() {
                    break;
                }
                let address = link.address(cfg);
                warn!(
                    sink = %ctx.sink,
                    conn = link.index,
                    "MQTT connection to {address}: {}; reconnecting in about {}",
                    e.message,
                    Rounded(backoff.step())
                );
                ctx.acks
                    .trouble(format!("MQTT connection to {address}: {}", e.message));
                link.next_address();
            }
        }
        if was_up {
            first = false;
            // Only a connection that held up for a while resets the backoff: a broker that
            // answers CONNACK and then breaks every connection at once must not be
            // reconnected to at `reconnect_min` over and over.
            if lasted >= HEALTHY_CONNECTION {
                backoff.reset();
            }
        }
        if link.closing.get() && link.idle() {
            // Draining and nothing left to send: no reason to come back.
            break;
        }
        let wait = backoff.next_wait(fastrand::f64());
        let until = Instant::now() + wait;
        while !link.stop.get() && Instant::now() < until {
            monoio::time::sleep(
                until
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(50)),
            )
            .await;
        }
        link.reconnects.set(link.reconnects.get() + 1);
    }
    link.finished.set(true);
}

/// After a connection ended: the session forgets the wire, unwritten QoS 0 messages are
/// polled again (with everything queued after them in their partitions).
fn lost(ctx: &Ctx, link: &Link) {
    link.session.borrow_mut().connection_lost();
    link.out.borrow_mut().clear();
    let unwritten = std::mem::take(&mut *link.qos0.borrow_mut());
    if unwritten.is_empty() {
        return;
    }
    let mut from: Vec<(Slot, Offset)> = Vec::new();
    for t in unwritten.into_iter().filter(|t| !t.status) {
        match from.iter_mut().find(|(s, _)| *s == t.slot) {
            Some((_, o)) => *o = (*o).min(t.offset),
            None => from.push((t.slot, t.offset)),
        }
    }
    let mut queue = link.queue.borrow_mut();
    for &(slot, offset) in &from {
        queue.retain(|i| i.token.slot != slot || i.token.offset < offset);
        ctx.acks.redeliver(slot, offset);
    }
}

enum Closed {
    /// DISCONNECT sent after a drain.
    Drained,
    /// The clean 3.1.1 connection that clears an old session is done.
    Cleared,
}

/// One connection: TCP (and TLS), CONNECT/CONNACK, then the reader and writer until it ends.
async fn connection(
    ctx: &Rc<Ctx>,
    link: &Rc<Link>,
    clean: bool,
    clear_first: bool,
) -> Result<Closed, EngineError> {
    let cfg = &ctx.cfg;
    let address = link.address(cfg);
    let tcp = spillway_net::connect_address(address, cfg.connect_timeout.0)
        .await
        .map_err(|e| EngineError::transient(e.to_string()))?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&tcp);
    match &ctx.tls {
        None => session(ctx, link, fd, tcp, clean, clear_first).await,
        Some((config, names)) => {
            use spillway_net::tls::HandshakeError;
            let Some(name) = names.get(link.at.get() % names.len().max(1)) else {
                return Err(EngineError::permanent(format!(
                    "MQTT broker {address}: no TLS server name"
                )));
            };
            let tls =
                spillway_net::tls::handshake(config, name.clone(), tcp, cfg.connect_timeout.0)
                    .await
                    .map_err(|e| match e {
                        HandshakeError::TimedOut => {
                            EngineError::transient("the TLS handshake timed out")
                        }
                        HandshakeError::Io(e) => {
                            EngineError::transient(format!("TLS handshake with {address}: {e}"))
                        }
                        HandshakeError::Tls(tls) => EngineError::permanent(format!(
                            "MQTT broker {address}: TLS handshake with {address}: {tls}"
                        )),
                    })?;
            session(ctx, link, fd, tls, clean, clear_first).await
        }
    }
}

fn connect_packet(ctx: &Ctx, link: &Link, clean: bool) -> Result<Connect, EngineError> {
    let cfg = &ctx.cfg;
    let protocol = link.session.borrow().protocol();
    let place = Place {
        sink: &ctx.sink,
        shard: ctx.shard,
        conn: link.index,
    };
    let bad = |what: &str, e: String| EngineError::permanent(format!("{what}: {e}"));
    let id = cfg.client_id.render(place);
    if protocol == Protocol::V311 && !link.tried.get() && !portable_v311_id(&id) {
        warn!(
            sink = %ctx.sink,
            conn = link.index,
            "client id {id:?} is {} bytes{}: an MQTT 3.1.1 broker only has to accept 1-23 \
             letters and digits (mosquitto takes more; a strict broker answers CONNACK 2, \
             identifier rejected); set mqtt.client_id if this broker refuses it",
            id.len(),
            if id.bytes().all(|b| b.is_ascii_alphanumeric()) {
                ""
            } else {
                " with characters other than letters and digits"
            }
        );
    }
    let client_id = MqttStr::from_str(&id).map_err(|e| bad("mqtt.client_id", e.to_string()))?;
    let mut c = Connect::new(protocol, client_id);
    c.clean_start = clean;
    c.keep_alive = cfg.keep_alive_secs();
    if let Some(u) = &cfg.username {
        c.username = Some(MqttStr::from_str(u).map_err(|e| bad("mqtt.username", e.to_string()))?);
    }
    if let Some(p) = &cfg.password {
        c.password = Some(Bytes::copy_from_slice(p.expose().as_bytes()));
    }
    if protocol == Protocol::V5 && !clean {
        c.properties.session_expiry_interval = Some(cfg.session_expiry_secs());
    }
    if protocol == Protocol::V5 {
        // Tell the broker what the decoder refuses (MQTT 5 §3.1.2.11.4): it must not send a
        // larger packet (it drops or truncates what would be).
        c.properties.maximum_packet_size = NonZeroU32::new(cfg.max_incoming_packet());
    }
    if let Some(w) = &cfg.will {
        let topic = topic_name(w.topic.render(place)).map_err(|e| bad("mqtt.will.topic", e))?;
        c.will = Some(Will {
            topic,
            payload: Bytes::copy_from_slice(w.payload.as_bytes()),
            qos: QoS::from_u8(w.qos).unwrap_or(QoS::AtMostOnce),
            retain: w.retain,
            properties: Default::default(),
        });
    }
    Ok(c)
}

/// The place of this connection, for the name templates.
fn place<'a>(ctx: &'a Ctx, link: &Link) -> Place<'a> {
    Place {
        sink: &ctx.sink,
        shard: ctx.shard,
        conn: link.index,
    }
}

/// After CONNACK: the birth message goes first in the queue (ahead of new messages; what the
/// session re-sends goes out before it). A birth still queued from a connection that ended
/// before writing it is dropped: one per connection.
fn queue_birth(ctx: &Ctx, link: &Link) -> Result<(), EngineError> {
    let Some(b) = &ctx.cfg.birth else {
        return Ok(());
    };
    let topic = topic_name(b.topic.render(place(ctx, link)))
        .map_err(|e| EngineError::permanent(format!("mqtt.birth.topic: {e}")))?;
    let mut publish = Publish::new(topic, Bytes::copy_from_slice(b.payload.as_bytes()));
    publish.qos = QoS::from_u8(b.qos).unwrap_or(QoS::AtMostOnce);
    publish.retain = b.retain;
    let mut queue = link.queue.borrow_mut();
    queue.retain(|i| !i.token.status);
    queue.push_front(Item {
        publish,
        token: Token::status(),
    });
    Ok(())
}

/// At a controlled shutdown of a sink with both a birth message and a will: the will as a
/// message (QoS 0, its retain flag), so the status topic does not keep saying online.
fn shutdown_will(ctx: &Ctx, link: &Link) -> Option<Publish> {
    let (Some(_), Some(w)) = (&ctx.cfg.birth, &ctx.cfg.will) else {
        return None;
    };
    let topic = topic_name(w.topic.render(place(ctx, link))).ok()?;
    let mut publish = Publish::new(topic, Bytes::copy_from_slice(w.payload.as_bytes()));
    publish.retain = w.retain;
    Some(publish)
}

async fn read_more<R: AsyncReadRent>(r: &mut R, buf: &mut BytesMut) -> io::Result<()> {
    match spillway_net::io::read_more(r, buf, MIN_READ).await {
        Ok(0) => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the broker closed the connection",
        )),
        Ok(_) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Writes everything queued in `out` (one vectored write, more if the kernel takes part).
/// `spare` keeps the iovec list between writes (refilled, not allocated per write); a write
/// that fails or times out takes it along and the next one starts a new list.
async fn write_out<W: AsyncWriteRent>(
    w: &mut W,
    link: &Link,
    spare: &mut Option<IoVecs>,
    limit: Duration,
) -> io::Result<()> {
    let mut iov = spare.take().unwrap_or_else(IoVecs::empty);
    {
        let mut out = link.out.borrow_mut();
        out.seal();
        iov.refill(std::iter::from_fn(|| out.pop_chunk()));
    }
    let mut sent = spillway_net::io::write_vectored(w, iov, limit).await?;
    // Let go of the buffers written (payloads shared with a poll's reply among them).
    sent.refill(std::iter::empty());
    *spare = Some(sent);
    spillway_net::io::flush(w, limit).await
}

async fn session<S>(
    ctx: &Rc<Ctx>,
    link: &Rc<Link>,
    fd: std::os::fd::RawFd,
    mut stream: S,
    clean: bool,
    clear_first: bool,
) -> Result<Closed, EngineError>
where
    S: AsyncReadRent + AsyncWriteRent + Split + 'static,
{
    let cfg = &ctx.cfg;
    let connect = connect_packet(ctx, link, clean || clear_first)?;
    let io_err = |what: &str, e: io::Error| EngineError::transient(format!("{what}: {e}"));
    {
        let mut out = link.out.borrow_mut();
        out.clear();
        link.session
            .borrow_mut()
            .connect(&connect, &mut out, Instant::now())
            .map_err(|e| EngineError::permanent(format!("CONNECT: {e}")))?;
    }
    let limit = cfg.connect_timeout.0;
    let mut chunks: Option<IoVecs> = None;
    write_out(&mut stream, link, &mut chunks, limit)
        .await
        .map_err(|e| io_err("sending CONNECT", e))?;
    let mut buf = BytesMut::with_capacity(MIN_READ);
    let deadline = Instant::now() + limit;
    let opts = link.session.borrow().decode_options();
    let (present, resent) = loop {
        match decode(&mut buf, &opts) {
            Ok(Decoded::Packet(packet)) => {
                let event = {
                    let mut out = link.out.borrow_mut();
                    link.session
                        .borrow_mut()
                        .handle(packet, &mut out, Instant::now())
                };
                match event {
                    Ok(Some(Event::Connected {
                        session_present,
                        resent,
                    })) => break (session_present, resent),
                    Ok(Some(Event::Disconnected(d))) => {
                        return Err(EngineError::transient(format!(
                            "the broker sent DISCONNECT instead of CONNACK: {} ({:#04x})",
                            d.reason.name(),
                            d.reason.0
                        )));
                    }
                    Ok(_) => {}
                    Err(SessionError::ConnectionRefused {
                        protocol,
                        code,
                        reason_string,
                    }) => {
                        let e = SessionError::ConnectionRefused {
                            protocol,
                            code,
                            reason_string,
                        };
                        let class = if transient_refusal(protocol, code) {
                            ErrorClass::Transient
                        } else {
                            ErrorClass::Permanent
                        };
                        let message = format!("MQTT broker {}: {e}", link.address(cfg));
                        return Err(EngineError::new(class, message));
                    }
                    Err(e) => return Err(EngineError::transient(e.to_string())),
                }
            }
            Ok(Decoded::Incomplete { .. }) => {
                let left = deadline.saturating_duration_since(Instant::now());
                timeout(left, read_more(&mut stream, &mut buf))
                    .await
                    .map_err(|_| EngineError::transient("no CONNACK within connect_timeout"))?
                    .map_err(|e| match spillway_net::tls::rustls_cause(&e) {
                        // TLS 1.3 delivers a refused client certificate as an alert after
                        // the handshake: a retry will not fix it.
                        Some(tls) => EngineError::permanent(format!(
                            "MQTT broker {}: TLS: {tls} (waiting for CONNACK)",
                            link.address(cfg)
                        )),
                        None => io_err("waiting for CONNACK", e),
                    })?;
            }
            Err(e) => return Err(EngineError::transient(inbound_error(&e))),
        }
    };
    refuse_unsendable(cfg, link)?;
    let limit_window = link.session.borrow().window_limit();
    if clear_first {
        // The old session is gone; now the persistent one.
        {
            let mut out = link.out.borrow_mut();
            let _ = link.session.borrow_mut().disconnect(
                Disconnect::default(),
                &mut out,
                Instant::now(),
            );
        }
        let _ = write_out(&mut stream, link, &mut chunks, limit).await;
        return Ok(Closed::Cleared);
    }
    link.up.set(true);
    link.off_spec.set(false);
    link.up_since.set(Some(Instant::now()));
    link.tried.set(true);
    queue_birth(ctx, link)?;
    info!(
        sink = %ctx.sink,
        conn = link.index,
        "connected to MQTT broker {} (MQTT {}, session present: {present}, window {limit_window}, re-sending {resent})",
        link.address(cfg),
        cfg.protocol
    );
    let write_limit = cfg.keep_alive.0.max(cfg.connect_timeout.0);
    let (r, w) = stream.into_split();
    let batched = BatchedRead::default();
    let reader = read_loop(ctx, link, r, buf, fd, &batched);
    let writer = write_loop(ctx, link, w, write_limit);
    let cutter = cut_batched_reads(fd, &batched);
    let result = monoio::select! {
        r = reader => r,
        w = writer => w,
        c = cutter => c,
    };
    match result {
        // The broker closing the socket after our DISCONNECT (or racing it) ends a drain.
        Err(_) if link.closing.get() && link.idle() => Ok(Closed::Drained),
        r => r.map_err(EngineError::transient),
    }
}

/// A batched read of acknowledgements (one that completes only once several can be read),
/// shared by the read loop and [`cut_batched_reads`].
#[derive(Default)]
struct BatchedRead {
    /// When the batched read now waiting began.
    since: Cell<Option<Instant>>,
    /// The cutter, parked until a batched read begins.
    cutter: Cell<Option<Waker>>,
    /// The cutter lowered `SO_RCVLOWAT` to one acknowledgement.
    cut: Cell<bool>,
}

impl BatchedRead {
    fn begin(&self) {
        self.since.set(Some(Instant::now()));
        if let Some(w) = self.cutter.take() {
            w.wake();
        }
    }

    fn end(&self) {
        self.since.set(None);
    }
}

/// How long a batched read may wait before it completes with what has arrived.
const CUT_AFTER: Duration = Duration::from_millis(1);

/// Ends a batched read that has waited [`CUT_AFTER`]: lowers `SO_RCVLOWAT` to one
/// acknowledgement, which completes the read at once with what has arrived (the kernel
/// checks a lowered mark against its queue). A read held back by `SO_RCVLOWAT` leaves the
/// small segments it has queued unACKed at the TCP level (the kernel ACKs a small segment
/// early only once the reader has emptied the queue; `TCP_QUICKACK` does not change that),
/// so a broker that holds its next acknowledgements until the last segment is ACKed
/// (Nagle's algorithm: mosquitto's default) waited for this side's delayed-ACK timer, 40 ms
/// or more, while this side waited for those acknowledgements: every batch took that long,
/// and the connection turned batching off. Cut at 1 ms, the read takes what is there, its
/// ACK releases what the broker held back, and the next batched read goes on. No timer
/// runs between batched reads: a connection that reads each acknowledgement as it comes
/// never wakes this. Never ends; it is dropped with the connection.
async fn cut_batched_reads(
    fd: std::os::fd::RawFd,
    batched: &BatchedRead,
) -> Result<Closed, String> {
    loop {
        let since = poll_fn(|cx| match batched.since.get() {
            Some(since) => Poll::Ready(since),
            None => {
                batched.cutter.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        })
        .await;
        let due = since + CUT_AFTER;
        let now = Instant::now();
        if due > now {
            monoio::time::sleep(due - now).await;
        }
        if batched.since.get() == Some(since) {
            // Still the same read, still waiting.
            spillway_net::sockopt::set_rcvlowat(fd, MIN_ACK_BYTES);
            batched.cut.set(true);
            batched.since.set(None);
        }
    }
}

async fn read_loop<R: AsyncReadRent>(
    ctx: &Ctx,
    link: &Link,
    mut r: R,
    mut buf: BytesMut,
    fd: std::os::fd::RawFd,
    batched: &BatchedRead,
) -> Result<Closed, String> {
    // How many acknowledgements one wake-up waits for (see `ack_batching`): the PUBRELs of
    // QoS 2 must not wait long, or the broker runs out of work.
    let divisor = if ctx.cfg.qos == 2 || ctx.cfg.qos_header.is_some() {
        8
    } else {
        4
    };
    let mut lowat = 1usize;
    let mut batching = ctx.cfg.ack_batching;
    let mut stalls = 0u32;
    loop {
        process(ctx, link, &mut buf)?;
        if batching {
            let (on_wire, limit) = {
                let s = link.session.borrow();
                (s.on_wire(), s.window_limit())
            };
            // Only acknowledgements that are sure to come: each message on the wire brings
            // at least one packet of at least MIN_ACK_BYTES. Nothing is held back while
            // draining or with few messages out.
            let batch = (limit / divisor).max(1);
            let want = if on_wire >= batch && !link.closing.get() {
                batch
            } else {
                1
            };
            if want != lowat {
                spillway_net::sockopt::set_rcvlowat(fd, want * MIN_ACK_BYTES);
                lowat = want;
            }
        }
        // Acknowledge what arrives at once rather than after the delayed-ACK timer: a broker
        // with Nagle's algorithm on (mosquitto unless `set_tcp_nodelay true`) holds back every
        // PUBACK after the first until that first is acknowledged, and while the window is
        // closed this side has no data to carry the ACK. Without this each window round
        // waited ~40 ms (450 msgs/s against a default mosquitto). The flag is not sticky:
        // set again before every read.
        spillway_net::sockopt::set_quickack(fd);
        let waited = Instant::now();
        if lowat > 1 {
            batched.begin();
        }
        let read = read_more(&mut r, &mut buf).await;
        batched.end();
        if batched.cut.take() {
            // The mark is one acknowledgement now: the next turn sets it again.
            lowat = 1;
        }
        read.map_err(|e| e.to_string())?;
        // A batched read is cut after CUT_AFTER (see cut_batched_reads). Reads that still
        // waited ACK_STALL, twice running, mean the cut did not come in time (a shard too
        // busy to run its timers): read every acknowledgement as it comes from then on.
        if lowat > 1 {
            stalls = if waited.elapsed() >= ACK_STALL {
                stalls + 1
            } else {
                0
            };
            if stalls >= 2 {
                batching = false;
                lowat = 1;
                spillway_net::sockopt::set_rcvlowat(fd, MIN_ACK_BYTES);
                info!(
                    sink = %ctx.sink,
                    conn = link.index,
                    "batched reads of acknowledgements waited over {} ms twice running, \
                     though each is cut after {} ms (this shard runs its timers late): \
                     ack_batching is off on this connection",
                    ACK_STALL.as_millis(),
                    CUT_AFTER.as_millis()
                );
            }
        }
    }
}

/// How long a batched read may wait (though cut after [`CUT_AFTER`]) before batching is
/// turned off for the connection.
const ACK_STALL: Duration = Duration::from_millis(30);

/// Whether an MQTT 3.1.1 broker must accept `id` (1-23 bytes of 0-9, a-z, A-Z; MQTT-3.1.3-5).
fn portable_v311_id(id: &str) -> bool {
    (1..=23).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// The smallest acknowledgement on the wire (PUBACK, PUBREC, PUBCOMP: fixed header and
/// packet id).
const MIN_ACK_BYTES: usize = 4;

/// A CONNACK limit that refuses every message this sink would send (its static QoS above the
/// broker's Maximum QoS, its static retain flag where retain is not available) is a
/// configuration problem, stopped at CONNACK like a refused CONNECT: sent anyway, each message
/// would be rejected on its own and, under `on_error = "skip"`, committed undelivered. A limit
/// only some messages break (a QoS or retain header) goes to `on_error` per message.
fn refuse_unsendable(cfg: &MqttSinkConfig, link: &Link) -> Result<(), EngineError> {
    let (maximum_qos, retain_available, maximum_packet) = {
        let s = link.session.borrow();
        (
            s.broker_maximum_qos(),
            s.broker_retain_available(),
            s.broker_maximum_packet_size(),
        )
    };
    let refuse = |why: String| {
        EngineError::permanent(format!(
            "MQTT broker {}: {why}; no message of this sink could be delivered",
            link.address(cfg)
        ))
    };
    if cfg.qos_header.is_none() && cfg.qos > maximum_qos as u8 {
        return Err(refuse(format!(
            "CONNACK Maximum QoS is {}, below sink.mqtt.qos = {}: lower sink.mqtt.qos or allow \
             QoS {} on the broker",
            maximum_qos as u8, cfg.qos, cfg.qos
        )));
    }
    let smallest = smallest_publish(cfg);
    if (maximum_packet as usize) < smallest {
        return Err(refuse(format!(
            "CONNACK Maximum Packet Size is {maximum_packet} bytes, below the smallest PUBLISH \
             this sink can send ({smallest} bytes: header, topic and packet id, no payload); \
             raise the broker's limit"
        )));
    }
    if cfg.retain && cfg.retain_header.is_none() && !retain_available {
        return Err(refuse(
            "CONNACK Retain Available is 0 (the broker takes no retained messages), but \
             sink.mqtt.retain = true: set it to false or allow retain on the broker"
                .to_owned(),
        ));
    }
    Ok(())
}

/// The fewest bytes a PUBLISH of this sink takes on the wire: the fixed header (2), the topic
/// (its length and bytes: the static topic, else at least one byte), the packet id when every
/// message goes at QoS 1 or 2, the MQTT 5 property length (1), an empty payload.
fn smallest_publish(cfg: &MqttSinkConfig) -> usize {
    let topic = match (&cfg.topic, &cfg.topic_header) {
        (Some(t), None) if t.is_static() => t.literal().len(),
        _ => 1,
    };
    let packet_id = if cfg.qos_header.is_none() && cfg.qos > 0 {
        2
    } else {
        0
    };
    let properties = usize::from(cfg.protocol == MqttVersion::V5);
    2 + 2 + topic + packet_id + properties
}

/// What a packet from the broker that does not decode is called in the log.
fn inbound_error(e: &DecodeError) -> String {
    match e {
        DecodeError::PacketTooLarge { size, max } => format!(
            "the broker sent a packet of {size} bytes, more than \
             sink.mqtt.max_incoming_packet_size ({max} bytes); dropping the connection"
        ),
        other => format!("malformed packet from the broker: {other}"),
    }
}

/// Decodes and handles every whole packet in `buf`; returns how many there were.
fn process(ctx: &Ctx, link: &Link, buf: &mut BytesMut) -> Result<usize, String> {
    let now = Instant::now();
    let opts = link.session.borrow().decode_options();
    let mut run = Run::default();
    let mut rejected = Vec::new();
    let mut result = Ok(());
    let mut packets = 0;
    loop {
        match decode(buf, &opts) {
            Ok(Decoded::Packet(packet)) => {
                packets += 1;
                let event = {
                    let mut out = link.out.borrow_mut();
                    link.session.borrow_mut().handle(packet, &mut out, now)
                };
                match event {
                    Ok(Some(Event::Completed(c))) => {
                        if c.token.status {
                            if !c.is_success() {
                                rejected.push((
                                    c.token,
                                    format!("reason {:#04x} ({})", c.reason.0, c.reason.name()),
                                    c.reason,
                                ));
                            }
                        } else if c.is_success() {
                            link.largest_accepted
                                .set(link.largest_accepted.get().max(c.payload_len));
                            run.push(&ctx.acks, c.token.slot, c.token.offset);
                        } else {
                            let (ack, kind) = if c.qos == QoS::AtLeastOnce {
                                ("PUBACK", PacketType::PubAck)
                            } else {
                                ("PUBREC", PacketType::PubRec)
                            };
                            let mut reason = format!(
                                "the broker rejected it: {ack} reason {:#04x} ({})",
                                c.reason.0,
                                c.reason.name()
                            );
                            if c.reason.off_list(kind, Protocol::V5) {
                                reason.push_str(&format!(
                                    " [a code MQTT 5 does not list for {ack}: the broker is off \
                                     the specification; taken as this message's refusal]"
                                ));
                                if !link.off_spec.replace(true) {
                                    warn!(
                                        sink = %ctx.sink,
                                        conn = link.index,
                                        "the MQTT broker answered a PUBLISH with {ack} reason \
                                         {:#04x} ({}), a code MQTT 5 does not list for {ack}; \
                                         each such answer is taken as that message's refusal \
                                         (to on_error), the connection is kept",
                                        c.reason.0,
                                        c.reason.name()
                                    );
                                }
                            }
                            if let Some(s) = &c.reason_string {
                                reason.push_str(": ");
                                reason.push_str(s.as_str());
                            }
                            rejected.push((c.token, reason, c.reason));
                        }
                    }
                    Ok(Some(Event::Disconnected(d))) => {
                        let mut why = format!(
                            "the broker sent DISCONNECT: {} ({:#04x})",
                            d.reason.name(),
                            d.reason.0
                        );
                        if let Some(s) = d.properties.reason_string.as_ref() {
                            why.push_str(": ");
                            why.push_str(s.as_str());
                        }
                        result = Err(why);
                        break;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        result = Err(e.to_string());
                        break;
                    }
                }
            }
            Ok(Decoded::Incomplete { .. }) => break,
            Err(e) => {
                result = Err(inbound_error(&e));
                break;
            }
        }
    }
    run.flush(&ctx.acks);
    for (token, reason, code) in rejected {
        ctx.reject(link, token, reason, Some(code));
    }
    if result.is_ok() {
        let mut out = link.out.borrow_mut();
        link.session
            .borrow_mut()
            .poll_transmit(&mut out, now)
            .map_err(|e| e.to_string())?;
    }
    link.wake();
    result.map(|()| packets)
}

/// When a paced connection (`max_publish_rate`) with messages queued gets its next token.
fn paced_until(link: &Link) -> Option<Instant> {
    if link.queue.borrow().is_empty() {
        return None;
    }
    link.pace
        .borrow()
        .as_ref()
        .filter(|p| p.tokens < 1.0)
        .map(Pace::next)
}

/// Moves queued messages into the session while its window has room (QoS 0 always), up to
/// [`MAX_WRITE`] bytes per write.
fn fill(ctx: &Ctx, link: &Link, now: Instant) {
    let mut rejected = Vec::new();
    {
        let mut queue = link.queue.borrow_mut();
        let mut session = link.session.borrow_mut();
        let mut out = link.out.borrow_mut();
        let mut qos0 = link.qos0.borrow_mut();
        let mut pace = link.pace.borrow_mut();
        // Refill the window in batches: a broker that acknowledges one message per write
        // (mosquitto) would otherwise get one PUBLISH per PUBACK, a system call or two each
        // way per message. QoS 1/2 messages wait until a quarter of the window is free (or
        // nothing is in flight); the cost is at most a quarter window of latency.
        let limit = session.window_limit();
        let held = session.in_flight();
        let gated = held > 0 && limit.saturating_sub(held) < (limit / 4).max(1);
        while out.len() < MAX_WRITE {
            if gated
                && queue
                    .front()
                    .is_some_and(|i| i.publish.qos != QoS::AtMostOnce)
            {
                break;
            }
            if queue.is_empty() {
                break;
            }
            if let Some(p) = pace.as_mut()
                && !p.take(now)
            {
                // Paced: the writer sleeps until the next token (`paced_until`).
                break;
            }
            let Some(item) = queue.pop_front() else {
                break;
            };
            match session.publish(item.publish, item.token, &mut out, now) {
                Ok(Sent::AtMostOnce(token)) => qos0.push(token),
                Ok(Sent::Tracked(_)) => {}
                Err(e) if !e.kind.is_permanent() => {
                    queue.push_front(Item {
                        publish: e.publish,
                        token: e.token,
                    });
                    if let Some(p) = pace.as_mut() {
                        p.tokens += 1.0;
                    }
                    break;
                }
                Err(e) => {
                    let reason = format!("cannot be sent to this broker: {}", e.kind);
                    rejected.push((e.token, reason));
                }
            }
        }
        let n = session.in_flight();
        if n > link.peak_in_flight.get() {
            link.peak_in_flight.set(n);
        }
    }
    for (token, reason) in rejected {
        ctx.reject(link, token, reason, None);
    }
}

enum Work {
    Write,
    Disconnect,
}

async fn write_loop<W: AsyncWriteRent>(
    ctx: &Ctx,
    link: &Link,
    mut w: W,
    limit: Duration,
) -> Result<Closed, String> {
    let mut chunks: Option<IoVecs> = None;
    loop {
        let work = loop {
            let wait = poll_fn(|cx| {
                if link.stop.get() {
                    return Poll::Ready(Err("stopped".to_owned()));
                }
                fill(ctx, link, Instant::now());
                if !link.out.borrow().is_empty() {
                    return Poll::Ready(Ok(Work::Write));
                }
                if link.closing.get() && link.idle() {
                    return Poll::Ready(Ok(Work::Disconnect));
                }
                link.writer.set(Some(cx.waker().clone()));
                Poll::Pending
            });
            let due = link.session.borrow().poll_timeout();
            let due = match (due, paced_until(link)) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let Some(t) = due else {
                break wait.await?;
            };
            let sleep = monoio::time::sleep(t.saturating_duration_since(Instant::now()));
            let woke = monoio::select! {
                r = wait => Some(r),
                () = sleep => None,
            };
            match woke {
                Some(r) => break r?,
                None => {
                    let mut out = link.out.borrow_mut();
                    link.session
                        .borrow_mut()
                        .handle_timeout(&mut out, Instant::now())
                        .map_err(|e| match e {
                            SessionError::AckTimeout { .. } => {
                                format!("{e}: sink.mqtt.ack_timeout")
                            }
                            other => other.to_string(),
                        })?;
                }
            }
        };
        if let Work::Disconnect = work {
            let mut out = link.out.borrow_mut();
            let mut session = link.session.borrow_mut();
            let mut disconnect = Disconnect::default();
            if let Some(will) = shutdown_will(ctx, link) {
                match session.protocol() {
                    // Disconnect with Will Message (MQTT 5 §3.14.2.1): the broker publishes it.
                    Protocol::V5 => disconnect.reason = ReasonCode(0x04),
                    // 3.1.1 has no such DISCONNECT: publish the will's message here, at QoS 0
                    // (nothing waits for its acknowledgement), just before DISCONNECT.
                    Protocol::V311 => {
                        if let Ok(Sent::AtMostOnce(t)) =
                            session.publish(will, Token::status(), &mut out, Instant::now())
                        {
                            link.qos0.borrow_mut().push(t);
                        }
                    }
                }
            }
            let _ = session.disconnect(disconnect, &mut out, Instant::now());
        }
        let written = std::mem::take(&mut *link.qos0.borrow_mut());
        if let Err(e) = write_out(&mut w, link, &mut chunks, limit).await {
            // Not written: polled again after the reconnect (see `lost`).
            link.qos0.borrow_mut().extend(written);
            return Err(e.to_string());
        }
        let mut run = Run::default();
        for t in written.into_iter().filter(|t| !t.status) {
            run.push(&ctx.acks, t.slot, t.offset);
        }
        run.flush(&ctx.acks);
        if let Work::Disconnect = work {
            info!(sink = %ctx.sink, conn = link.index, "sent DISCONNECT to the MQTT broker");
            return Ok(Closed::Drained);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `max_publish_rate`: a tenth of a second's worth at once, then one token per 1/rate,
    /// and the next token's time is when it comes.
    #[test]
    fn the_publish_pace_allows_a_tenth_of_a_second_at_once_then_the_rate() {
        let t0 = Instant::now();
        let mut p = Pace::new(100.0, t0);
        let burst = (0..20).filter(|_| p.take(t0)).count();
        assert_eq!(burst, 10);
        let next = p.next();
        assert!(
            next >= t0 + Duration::from_micros(9_900) && next <= t0 + Duration::from_micros(10_100),
            "{:?}",
            next - t0
        );
        assert!(!p.take(t0 + Duration::from_millis(5)));
        assert!(p.take(t0 + Duration::from_millis(11)));
        // A second later: a full burst again, not a second's worth.
        let later = t0 + Duration::from_secs(1);
        assert_eq!((0..200).filter(|_| p.take(later)).count(), 10);
        let mut slow = Pace::new(0.5, t0);
        assert!(slow.take(t0));
        assert!(!slow.take(t0 + Duration::from_secs(1)));
        assert!(slow.take(t0 + Duration::from_secs(2)));
    }

    #[test]
    fn portable_311_client_ids_are_short_letters_and_digits() {
        assert!(portable_v311_id("spillway0sink0"));
        assert!(portable_v311_id("a"));
        assert!(portable_v311_id("abcdefghijklmnopqrstuvw")); // 23
        assert!(!portable_v311_id("abcdefghijklmnopqrstuvwx")); // 24
        assert!(!portable_v311_id("spillway-sink-0-0"));
        assert!(!portable_v311_id(""));
    }
}
