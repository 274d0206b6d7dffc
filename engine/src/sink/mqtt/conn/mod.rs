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
use crate::signal::Signal;
use crate::template::name::Place;
use crate::template::topic::topic_name;
use crate::units::{Backoff, Rounded};

mod connect;
mod inbound;
mod outbound;
mod reject;

use self::connect::*;
use self::inbound::*;
use self::outbound::*;

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
    /// What the sink's waits wake on: a link's phase changed, or a fatal error was set.
    pub changes: Signal,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("sink", &self.sink)
            .field("shard", &self.shard)
            .finish_non_exhaustive()
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
    /// Where the connection task is (set by the task; see [`Link::set_phase`]).
    phase: Cell<Phase>,
    /// What the sink asks of the connection (set by the sink).
    order: Cell<Order>,
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
            .field("phase", &self.phase.get())
            .field("order", &self.order.get())
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
            phase: Cell::new(Phase::Starting),
            order: Cell::new(Order::Run),
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

    /// Where the connection task is.
    pub fn phase(&self) -> Phase {
        self.phase.get()
    }

    /// Moves the task to `phase` and tells the sink's waits ([`Ctx::changes`]).
    fn set_phase(&self, ctx: &Ctx, phase: Phase) {
        self.phase.set(phase);
        ctx.changes.bump();
    }

    /// The first connection attempt has an outcome (or the task ended before one).
    pub fn tried(&self) -> bool {
        self.phase.get() != Phase::Starting
    }

    /// Drain: send DISCONNECT once nothing is queued or in flight, then end. An order to stop
    /// stays one.
    pub fn drain(&self) {
        if self.order.get() == Order::Run {
            self.order.set(Order::Drain);
        }
        self.wake();
    }

    /// End now.
    pub fn stop(&self) {
        self.order.set(Order::Stop);
        self.wake();
    }

    /// Told to drain or to stop.
    fn closing(&self) -> bool {
        self.order.get() != Order::Run
    }

    /// Told to stop.
    pub fn stopped(&self) -> bool {
        self.order.get() == Order::Stop
    }

    /// Resolves once the link is told to stop; the waker shares the writer's slot, which is
    /// free while no connection runs.
    async fn stop_ordered(&self) {
        poll_fn(|cx| {
            if self.stopped() {
                return Poll::Ready(());
            }
            self.writer.set(Some(cx.waker().clone()));
            Poll::Pending
        })
        .await;
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

/// Where a connection task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No connection attempt has an outcome yet.
    Starting,
    /// Connected: CONNACK received at this instant.
    Up(Instant),
    /// Not connected, after an attempt: waiting to try again, or trying.
    Down,
    /// The task has ended.
    Finished,
}

/// What the sink asks of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    /// Deliver.
    Run,
    /// Finish what is queued and in flight, DISCONNECT, end.
    Drain,
    /// End now.
    Stop,
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
    while !link.stopped() {
        let clean = first || cfg.clean_start;
        let result = connection(&ctx, &link, clean, clear_first).await;
        let (was_up, lasted) = match link.phase() {
            Phase::Up(since) => (true, since.elapsed()),
            _ => (false, Duration::ZERO),
        };
        // The connection that only clears an old session is not the first attempt: the one
        // after it is (the sink waits for that one's outcome before it polls).
        if was_up || !matches!(result, Ok(Closed::Cleared)) {
            link.set_phase(&ctx, Phase::Down);
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
                if link.stopped() {
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
        if link.closing() && link.idle() {
            // Draining and nothing left to send: no reason to come back.
            break;
        }
        let wait = backoff.next_wait(fastrand::f64());
        // Cut short by an order to stop.
        let _ = timeout(wait, link.stop_ordered()).await;
        link.reconnects.set(link.reconnects.get() + 1);
    }
    link.set_phase(&ctx, Phase::Finished);
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
    link.set_phase(ctx, Phase::Up(Instant::now()));
    link.off_spec.set(false);
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
        Err(_) if link.closing() && link.idle() => Ok(Closed::Drained),
        r => r.map_err(EngineError::transient),
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
