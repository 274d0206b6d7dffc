//! A recording MQTT subscriber: connects (3.1.1 or 5, plain or TLS), subscribes, waits for
//! SUBACK, then records every PUBLISH the broker delivers from a background thread, answering
//! QoS 1 and 2 and keeping the connection alive.
//!
//! It is built on the independent `mqttbytes` crate so that it can check Spillway's own codec
//! and sinks from the outside.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use bytes::BytesMut;

use crate::HarnessError;
use crate::mqtt_wire::{
    self, Ack, ConnAckInfo, ConnectParams, Incoming, MqttVersion, connack_reason,
};
use crate::received::Received;
use crate::tls::ClientTls;
use crate::transport::{Transport, tls_io_error};

/// How often the background thread wakes up to check for shutdown and keep-alive.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// The packet id of the one SUBSCRIBE the subscriber sends.
const SUBSCRIBE_PKID: u16 = 1;

static CLIENT_SEQ: AtomicU64 = AtomicU64::new(0);

/// How to connect and what to subscribe to.
#[derive(Clone)]
pub struct SubscriberOpts {
    /// MQTT 3.1.1 or 5.
    pub version: MqttVersion,
    /// Topic filters, all subscribed in one SUBSCRIBE. Empty: connect only.
    pub filters: Vec<String>,
    /// The maximum QoS requested for every filter.
    pub qos: u8,
    /// User name and password.
    pub credentials: Option<(String, String)>,
    /// TLS: the CA to trust and an optional client certificate.
    pub tls: Option<ClientTls>,
    /// Client identifier; a unique one is generated when `None`.
    pub client_id: Option<String>,
    /// Clean session (3.1.1) / clean start (5). Default true.
    pub clean_start: bool,
    /// Keep-alive in seconds; a PINGREQ goes out after half of it without other writes.
    pub keep_alive: u16,
    /// MQTT 5 Receive Maximum the subscriber announces.
    pub receive_maximum: Option<u16>,
    /// MQTT 5 Topic Alias Maximum the subscriber announces (the broker may then use aliases).
    pub topic_alias_maximum: Option<u16>,
    /// MQTT 5 Session Expiry Interval in seconds.
    pub session_expiry: Option<u32>,
    /// MQTT 5 Subscription Identifier for the SUBSCRIBE.
    pub subscription_id: Option<usize>,
    /// Time allowed for TCP connect, TLS handshake, CONNACK and SUBACK.
    pub connect_timeout: Duration,
}

impl Default for SubscriberOpts {
    fn default() -> Self {
        SubscriberOpts {
            version: MqttVersion::V4,
            filters: Vec::new(),
            qos: 0,
            credentials: None,
            tls: None,
            client_id: None,
            clean_start: true,
            keep_alive: 30,
            receive_maximum: None,
            topic_alias_maximum: None,
            session_expiry: None,
            subscription_id: None,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

impl fmt::Debug for SubscriberOpts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubscriberOpts")
            .field("version", &self.version)
            .field("filters", &self.filters)
            .field("qos", &self.qos)
            .field(
                "credentials",
                &self
                    .credentials
                    .as_ref()
                    .map(|(user, _)| (user, "<redacted>")),
            )
            .field("tls", &self.tls)
            .field("client_id", &self.client_id)
            .field("clean_start", &self.clean_start)
            .field("keep_alive", &self.keep_alive)
            .field("receive_maximum", &self.receive_maximum)
            .field("topic_alias_maximum", &self.topic_alias_maximum)
            .field("session_expiry", &self.session_expiry)
            .field("subscription_id", &self.subscription_id)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

impl SubscriberOpts {
    /// Subscribes to `filter` with protocol `version`, QoS 0.
    pub fn new(version: MqttVersion, filter: impl Into<String>) -> Self {
        SubscriberOpts {
            version,
            filters: vec![filter.into()],
            ..SubscriberOpts::default()
        }
    }

    /// MQTT 3.1.1 subscription to `filter`.
    pub fn v4(filter: impl Into<String>) -> Self {
        Self::new(MqttVersion::V4, filter)
    }

    /// MQTT 5 subscription to `filter`.
    pub fn v5(filter: impl Into<String>) -> Self {
        Self::new(MqttVersion::V5, filter)
    }

    /// Adds another topic filter.
    pub fn filter(mut self, filter: impl Into<String>) -> Self {
        self.filters.push(filter.into());
        self
    }

    /// Sets the requested QoS (0, 1 or 2) of every filter.
    pub fn qos(mut self, qos: u8) -> Self {
        self.qos = qos;
        self
    }

    /// Logs in with a user name and password.
    pub fn credentials(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.credentials = Some((user.into(), password.into()));
        self
    }

    /// Connects with TLS.
    pub fn tls(mut self, tls: ClientTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Uses this client identifier.
    pub fn client_id(mut self, id: impl Into<String>) -> Self {
        self.client_id = Some(id.into());
        self
    }

    /// Sets clean session / clean start.
    pub fn clean_start(mut self, clean: bool) -> Self {
        self.clean_start = clean;
        self
    }

    /// Sets the keep-alive in seconds.
    pub fn keep_alive(mut self, seconds: u16) -> Self {
        self.keep_alive = seconds;
        self
    }

    /// Announces an MQTT 5 Receive Maximum.
    pub fn receive_maximum(mut self, max: u16) -> Self {
        self.receive_maximum = Some(max);
        self
    }

    /// Announces an MQTT 5 Topic Alias Maximum.
    pub fn topic_alias_maximum(mut self, max: u16) -> Self {
        self.topic_alias_maximum = Some(max);
        self
    }

    /// Sets an MQTT 5 Session Expiry Interval.
    pub fn session_expiry(mut self, seconds: u32) -> Self {
        self.session_expiry = Some(seconds);
        self
    }

    /// Tags the subscription with an MQTT 5 Subscription Identifier.
    pub fn subscription_id(mut self, id: usize) -> Self {
        self.subscription_id = Some(id);
        self
    }

    /// Sets the time allowed to connect and subscribe.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }
}

/// A connected subscriber recording what the broker delivers. Disconnects on drop.
#[derive(Debug)]
pub struct Subscriber {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    connack: ConnAckInfo,
    suback: Vec<u8>,
    client_id: String,
    version: MqttVersion,
}

impl Subscriber {
    /// Connects to the broker at `addr`, subscribes, and returns once SUBACK has arrived (so a
    /// message published afterwards will be delivered).
    ///
    /// Errors: [`HarnessError::ConnectRefused`] with the CONNACK code,
    /// [`HarnessError::SubscribeRefused`] with the SUBACK codes, [`HarnessError::Tls`] for a
    /// failed handshake, [`HarnessError::ConnectionClosed`] if the broker hangs up, or
    /// [`HarnessError::Timeout`].
    pub fn connect(addr: SocketAddr, opts: SubscriberOpts) -> Result<Subscriber, HarnessError> {
        mqtt_wire::to_qos(opts.qos)?;
        let version = opts.version;
        let client_id = opts.client_id.clone().unwrap_or_else(|| {
            format!(
                "spillway-sub-{}-{}",
                std::process::id(),
                CLIENT_SEQ.fetch_add(1, Ordering::Relaxed)
            )
        });
        let transport = Transport::connect(addr, opts.tls.as_ref(), opts.connect_timeout)?;
        transport.set_read_timeout(Some(POLL_INTERVAL))?;
        let shared = Arc::new(Shared::default());
        let mut session = Session {
            transport,
            version,
            buf: BytesMut::with_capacity(16 * 1024),
            last_write: Instant::now(),
            awaiting_rel: HashSet::new(),
            aliases: HashMap::new(),
            shared: Arc::clone(&shared),
        };
        let deadline = Instant::now() + opts.connect_timeout;

        let connect = mqtt_wire::encode_connect(
            version,
            &ConnectParams {
                client_id: &client_id,
                keep_alive: opts.keep_alive,
                clean_start: opts.clean_start,
                credentials: opts
                    .credentials
                    .as_ref()
                    .map(|(u, p)| (u.as_str(), p.as_str())),
                receive_maximum: opts.receive_maximum,
                topic_alias_maximum: opts.topic_alias_maximum,
                session_expiry: opts.session_expiry,
            },
        )?;
        session.send(&connect)?;
        let connack = match session.next_before(deadline, "CONNACK", opts.connect_timeout)? {
            Incoming::ConnAck(info) => info,
            other => {
                return Err(HarnessError::Protocol(format!(
                    "expected CONNACK, got {}",
                    other.name()
                )));
            }
        };
        if connack.code != 0 {
            return Err(HarnessError::ConnectRefused {
                code: connack.code,
                reason: connack_reason(version, connack.code).to_owned(),
            });
        }

        let mut suback = Vec::new();
        if !opts.filters.is_empty() {
            let subscribe = mqtt_wire::encode_subscribe(
                version,
                SUBSCRIBE_PKID,
                &opts.filters,
                opts.qos,
                opts.subscription_id,
            )?;
            session.send(&subscribe)?;
            suback = loop {
                match session.next_before(deadline, "SUBACK", opts.connect_timeout)? {
                    Incoming::SubAck { pkid, codes } if pkid == SUBSCRIBE_PKID => break codes,
                    Incoming::Publish { pkid, msg } => session.on_publish(pkid, msg)?,
                    Incoming::PubRel { pkid } => session.on_pubrel(pkid)?,
                    Incoming::Disconnect { reason } => {
                        return Err(HarnessError::ConnectionClosed {
                            waiting_for: "SUBACK",
                            detail: format!("broker sent DISCONNECT with reason {reason}"),
                        });
                    }
                    other => {
                        return Err(HarnessError::Protocol(format!(
                            "expected SUBACK, got {}",
                            other.name()
                        )));
                    }
                }
            };
            if suback.iter().any(|code| *code >= 0x80) {
                return Err(HarnessError::SubscribeRefused { codes: suback });
            }
        }

        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = Arc::clone(&stop);
        let keep_alive = Duration::from_secs(u64::from(opts.keep_alive));
        let thread = thread::Builder::new()
            .name(format!("sub-{client_id}"))
            .spawn(move || session.run(&thread_stop, keep_alive))
            .map_err(|e| HarnessError::io("spawning the subscriber thread", e))?;
        Ok(Subscriber {
            shared,
            stop,
            thread: Some(thread),
            connack,
            suback,
            client_id,
            version,
        })
    }

    /// Every message received so far, in arrival order.
    pub fn messages(&self) -> Vec<Received> {
        self.shared.lock().messages.clone()
    }

    /// Removes and returns the messages received so far.
    pub fn take(&self) -> Vec<Received> {
        std::mem::take(&mut self.shared.lock().messages)
    }

    /// How many messages have arrived.
    pub fn count(&self) -> usize {
        self.shared.lock().messages.len()
    }

    /// Waits until at least `n` messages have arrived and returns all of them (possibly more
    /// than `n`). The error says how many arrived, or why the connection ended.
    pub fn wait_for(&self, n: usize, timeout: Duration) -> Result<Vec<Received>, HarnessError> {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.lock();
        loop {
            let received = state.messages.len();
            if received >= n {
                return Ok(state.messages.clone());
            }
            if let Some(reason) = &state.closed {
                return Err(HarnessError::ConnectionClosed {
                    waiting_for: "messages",
                    detail: format!("{received} of {n} messages had arrived; {reason}"),
                });
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(HarnessError::MessagesTimeout {
                    expected: n,
                    received,
                    waited: timeout,
                });
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, deadline - now)
                .map(|(guard, _)| guard)
                .unwrap_or_else(|poisoned| poisoned.into_inner().0);
        }
    }

    /// What the broker answered in CONNACK.
    pub fn connack(&self) -> &ConnAckInfo {
        &self.connack
    }

    /// The SUBACK return / reason codes, one per filter (empty when nothing was subscribed).
    pub fn suback_codes(&self) -> &[u8] {
        &self.suback
    }

    /// The client identifier used.
    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    /// The protocol version used.
    pub fn version(&self) -> MqttVersion {
        self.version
    }

    /// Whether the connection is still up.
    pub fn is_connected(&self) -> bool {
        self.shared.lock().closed.is_none()
    }

    /// Why the connection ended, once it has.
    pub fn closed_reason(&self) -> Option<String> {
        self.shared.lock().closed.clone()
    }

    /// Sends DISCONNECT and closes the connection (also done on drop).
    pub fn disconnect(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            // A panicked recorder thread has nothing left to clean up.
            let _ = thread.join();
        }
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    messages: Vec<Received>,
    closed: Option<String>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn record(&self, msg: Received) {
        self.lock().messages.push(msg);
        self.changed.notify_all();
    }

    fn close(&self, reason: String) {
        let mut state = self.lock();
        if state.closed.is_none() {
            state.closed = Some(reason);
        }
        drop(state);
        self.changed.notify_all();
    }
}

/// What one attempt to read a packet gave.
enum ReadOutcome {
    Packet(Incoming),
    Idle,
    Closed(String),
}

/// The connection and the per-connection protocol state.
struct Session {
    transport: Transport,
    version: MqttVersion,
    buf: BytesMut,
    last_write: Instant,
    /// QoS 2 packet ids received and PUBREC'd, waiting for PUBREL.
    awaiting_rel: HashSet<u16>,
    /// MQTT 5 topic aliases the broker set up.
    aliases: HashMap<u16, String>,
    shared: Arc<Shared>,
}

impl Session {
    fn send(&mut self, bytes: &[u8]) -> Result<(), HarnessError> {
        self.transport
            .write_all(bytes)
            .and_then(|()| self.transport.flush())
            .map_err(|e| tls_io_error("writing to the broker", e))?;
        self.last_write = Instant::now();
        Ok(())
    }

    /// Decodes a buffered packet, or reads once (up to the poll interval) and tries again.
    fn next(&mut self) -> Result<ReadOutcome, HarnessError> {
        if let Some(packet) = mqtt_wire::decode(self.version, &mut self.buf)? {
            return Ok(ReadOutcome::Packet(packet));
        }
        let mut chunk = [0u8; 16 * 1024];
        match self.transport.read(&mut chunk) {
            Ok(0) => Ok(ReadOutcome::Closed(
                "the broker closed the connection".to_owned(),
            )),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                match mqtt_wire::decode(self.version, &mut self.buf)? {
                    Some(packet) => Ok(ReadOutcome::Packet(packet)),
                    None => Ok(ReadOutcome::Idle),
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(ReadOutcome::Idle)
            }
            Err(e) => Err(tls_io_error("reading from the broker", e)),
        }
    }

    /// The next packet, during connection set-up.
    fn next_before(
        &mut self,
        deadline: Instant,
        waiting_for: &'static str,
        waited: Duration,
    ) -> Result<Incoming, HarnessError> {
        loop {
            match self.next()? {
                ReadOutcome::Packet(packet) => return Ok(packet),
                ReadOutcome::Closed(detail) => {
                    return Err(HarnessError::ConnectionClosed {
                        waiting_for,
                        detail,
                    });
                }
                ReadOutcome::Idle => {
                    if Instant::now() >= deadline {
                        return Err(HarnessError::Timeout {
                            waiting_for,
                            waited,
                        });
                    }
                }
            }
        }
    }

    fn on_publish(&mut self, pkid: u16, mut msg: Received) -> Result<(), HarnessError> {
        let alias = msg.properties.as_ref().and_then(|p| p.topic_alias);
        if let Some(alias) = alias {
            if msg.topic.is_empty() {
                match self.aliases.get(&alias) {
                    Some(topic) => msg.topic.clone_from(topic),
                    None => {
                        return Err(HarnessError::Protocol(format!(
                            "PUBLISH uses unknown topic alias {alias}"
                        )));
                    }
                }
            } else {
                self.aliases.insert(alias, msg.topic.clone());
            }
        }
        match msg.qos {
            0 => self.shared.record(msg),
            1 => {
                self.shared.record(msg);
                self.send(&mqtt_wire::encode_ack(self.version, Ack::Publish, pkid)?)?;
            }
            _ => {
                // Exactly once: a PUBLISH re-sent before PUBREL is the same message.
                if self.awaiting_rel.insert(pkid) {
                    self.shared.record(msg);
                }
                self.send(&mqtt_wire::encode_ack(self.version, Ack::Received, pkid)?)?;
            }
        }
        Ok(())
    }

    fn on_pubrel(&mut self, pkid: u16) -> Result<(), HarnessError> {
        self.awaiting_rel.remove(&pkid);
        self.send(&mqtt_wire::encode_ack(self.version, Ack::Complete, pkid)?)
    }

    /// The background loop: record, acknowledge, ping, until stopped or disconnected.
    fn run(mut self, stop: &AtomicBool, keep_alive: Duration) {
        let ping_every = keep_alive / 2;
        let reason = loop {
            if stop.load(Ordering::Relaxed) {
                let goodbye =
                    mqtt_wire::encode_disconnect(self.version).and_then(|bytes| self.send(&bytes));
                break match goodbye {
                    Ok(()) => "disconnected by the test".to_owned(),
                    Err(e) => format!("disconnected by the test (DISCONNECT failed: {e})"),
                };
            }
            if !ping_every.is_zero() && self.last_write.elapsed() >= ping_every {
                let ping =
                    mqtt_wire::encode_pingreq(self.version).and_then(|bytes| self.send(&bytes));
                if let Err(e) = ping {
                    break e.to_string();
                }
            }
            let step = match self.next() {
                Ok(ReadOutcome::Packet(Incoming::Publish { pkid, msg })) => {
                    self.on_publish(pkid, msg).map(|()| None)
                }
                Ok(ReadOutcome::Packet(Incoming::PubRel { pkid })) => {
                    self.on_pubrel(pkid).map(|()| None)
                }
                Ok(ReadOutcome::Packet(Incoming::Disconnect { reason })) => {
                    Ok(Some(format!("broker sent DISCONNECT with reason {reason}")))
                }
                Ok(ReadOutcome::Packet(_)) | Ok(ReadOutcome::Idle) => Ok(None),
                Ok(ReadOutcome::Closed(why)) => Ok(Some(why)),
                Err(e) => Err(e),
            };
            match step {
                Ok(None) => {}
                Ok(Some(reason)) => break reason,
                Err(e) => break e.to_string(),
            }
        };
        self.shared.close(reason);
    }
}
