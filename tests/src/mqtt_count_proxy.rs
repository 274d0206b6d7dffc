//! A TCP proxy between an MQTT client (the engine) and a broker that reads the MQTT byte stream
//! in both directions and counts, independently of both ends, what is in flight.
//!
//! For every connection it keeps the QoS 1/2 packet ids the client has sent a PUBLISH for and
//! the broker has not finished yet (PUBACK for QoS 1, PUBCOMP for QoS 2, or a PUBACK / PUBREC
//! with a reason code of 0x80 or more), and records the largest number ever outstanding. It also
//! records the payload of every message the broker acknowledged (QoS 1 PUBACK, QoS 2 PUBCOMP;
//! QoS 0 when the client wrote it), so a test can check that a stored offset never passes what
//! the broker acknowledged.
//!
//! A packet from the broker is counted before its bytes are forwarded to the client, and a
//! packet from the client before its bytes are forwarded to the broker, so the count is exact
//! as the client sees it: the client cannot send a new PUBLISH for a slot the proxy has not
//! freed yet.
//!
//! Test controls: [`MqttCountProxy::refuse_connections`] (new connections are closed at once,
//! like a broker that is down), [`MqttCountProxy::hold_client_to_broker`] (stop forwarding
//! client bytes; the broker's acknowledgements still flow), [`MqttCountProxy::black_hole`]
//! (nothing flows either way) and [`MqttCountProxy::close_all`].
//!
//! The parser is a minimal one of its own (fixed header, remaining length, the few fields it
//! needs) and is tested against packets encoded by the independent `mqttbytes` crate.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};

use crate::HarnessError;
use crate::ports::LOOPBACK;

/// MQTT control packet types (the high nibble of the first byte).
mod kind {
    pub const CONNECT: u8 = 1;
    pub const CONNACK: u8 = 2;
    pub const PUBLISH: u8 = 3;
    pub const PUBACK: u8 = 4;
    pub const PUBREC: u8 = 5;
    pub const PUBREL: u8 = 6;
    pub const PUBCOMP: u8 = 7;
    pub const PINGREQ: u8 = 12;
    pub const PINGRESP: u8 = 13;
    pub const DISCONNECT: u8 = 14;
}

/// The largest remaining length MQTT allows.
const MAX_REMAINING: usize = 268_435_455;

/// How long a blocked read waits before the thread checks its flags again.
const READ_TICK: Duration = Duration::from_millis(20);

/// A byte stream that is not MQTT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameError(pub String);

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Splits a byte stream into MQTT control packets: the first byte, and the packet body after
/// the fixed header.
#[derive(Debug, Default)]
pub struct MqttFramer {
    buf: BytesMut,
}

impl MqttFramer {
    /// Appends bytes read from the stream.
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next complete packet, `Ok(None)` when more bytes are needed.
    pub fn next_packet(&mut self) -> Result<Option<(u8, Bytes)>, FrameError> {
        let Some(&first) = self.buf.first() else {
            return Ok(None);
        };
        let Some((remaining, len_bytes)) = remaining_length(&self.buf[1..])? else {
            return Ok(None);
        };
        let total = 1 + len_bytes + remaining;
        if self.buf.len() < total {
            return Ok(None);
        }
        let mut packet = self.buf.split_to(total);
        packet.advance(1 + len_bytes);
        Ok(Some((first, packet.freeze())))
    }

    /// Bytes held that do not form a complete packet yet.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

/// Decodes the variable-length "remaining length": `(value, bytes used)`, or `None` when the
/// bytes end inside it.
fn remaining_length(bytes: &[u8]) -> Result<Option<(usize, usize)>, FrameError> {
    let mut value = 0usize;
    for (i, &b) in bytes.iter().enumerate() {
        if i == 4 {
            return Err(FrameError(
                "remaining length longer than 4 bytes".to_owned(),
            ));
        }
        value |= usize::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            if value > MAX_REMAINING {
                return Err(FrameError(format!("remaining length {value} too large")));
            }
            return Ok(Some((value, i + 1)));
        }
    }
    if bytes.len() >= 4 {
        return Err(FrameError(
            "remaining length longer than 4 bytes".to_owned(),
        ));
    }
    Ok(None)
}

fn read_u16(body: &[u8], at: usize, what: &str) -> Result<u16, FrameError> {
    match body.get(at..at + 2) {
        Some(b) => Ok(u16::from_be_bytes([b[0], b[1]])),
        None => Err(FrameError(format!("{what}: body too short"))),
    }
}

/// A PUBLISH as far as the proxy needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PublishInfo {
    qos: u8,
    dup: bool,
    pkid: u16,
    payload: Bytes,
}

fn parse_publish(first: u8, body: &Bytes, version: u8) -> Result<PublishInfo, FrameError> {
    let qos = (first >> 1) & 0b11;
    if qos == 3 {
        return Err(FrameError("PUBLISH with QoS 3".to_owned()));
    }
    let dup = first & 0b1000 != 0;
    let topic_len = usize::from(read_u16(body, 0, "PUBLISH topic")?);
    let mut at = 2 + topic_len;
    let mut pkid = 0;
    if qos > 0 {
        pkid = read_u16(body, at, "PUBLISH packet id")?;
        at += 2;
    }
    if version == 5 {
        let rest = body
            .get(at..)
            .ok_or_else(|| FrameError("PUBLISH properties: body too short".to_owned()))?;
        let (props_len, used) = remaining_length(rest)?
            .ok_or_else(|| FrameError("PUBLISH properties length cut short".to_owned()))?;
        at += used + props_len;
    }
    if at > body.len() {
        return Err(FrameError("PUBLISH: body too short".to_owned()));
    }
    Ok(PublishInfo {
        qos,
        dup,
        pkid,
        payload: body.slice(at..),
    })
}

/// `(protocol level, clean start, client id)` of a CONNECT.
fn parse_connect(body: &[u8]) -> Result<(u8, bool, String), FrameError> {
    let name_len = usize::from(read_u16(body, 0, "CONNECT protocol name")?);
    let mut at = 2 + name_len;
    let level = *body
        .get(at)
        .ok_or_else(|| FrameError("CONNECT: no protocol level".to_owned()))?;
    let flags = *body
        .get(at + 1)
        .ok_or_else(|| FrameError("CONNECT: no flags".to_owned()))?;
    at += 4; // level, flags, keep-alive
    if level == 5 {
        let rest = body
            .get(at..)
            .ok_or_else(|| FrameError("CONNECT properties: body too short".to_owned()))?;
        let (props_len, used) = remaining_length(rest)?
            .ok_or_else(|| FrameError("CONNECT properties length cut short".to_owned()))?;
        at += used + props_len;
    }
    let id_len = usize::from(read_u16(body, at, "CONNECT client id")?);
    let id = body
        .get(at + 2..at + 2 + id_len)
        .ok_or_else(|| FrameError("CONNECT client id: body too short".to_owned()))?;
    Ok((
        level,
        flags & 0b10 != 0,
        String::from_utf8_lossy(id).into_owned(),
    ))
}

/// What the proxy has counted so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Client connections forwarded to the broker.
    pub connections: u64,
    /// Client connections closed at once because of [`MqttCountProxy::refuse_connections`].
    pub refused: u64,
    /// Client connections closed because the broker could not be reached.
    pub upstream_failures: u64,
    /// CONNECT packets from clients.
    pub connects: u64,
    /// The CONNACK return / reason codes, in order.
    pub connack_codes: Vec<u8>,
    /// CONNACKs with the Session Present flag set (a resumed session).
    pub sessions_present: u64,
    /// DISCONNECT packets from clients.
    pub disconnects: u64,
    /// For each DISCONNECT from a client: how many of its QoS 1/2 messages were still
    /// outstanding on that connection when it was sent (a clean shutdown waits for 0).
    pub outstanding_at_disconnect: Vec<usize>,
    /// PUBLISH packets from clients, by QoS.
    pub publishes: [u64; 3],
    /// Of those, with the DUP flag.
    pub dup_publishes: u64,
    /// QoS 1/2 PUBLISH packets without DUP whose packet id was still outstanding on the
    /// connection (a protocol error: the broker takes a QoS 2 one for a re-send and drops it).
    pub reused_packet_ids: u64,
    /// PUBREL packets from clients.
    pub pubrels: u64,
    /// Of those, for a packet id with no PUBLISH outstanding on the connection: re-sent on a
    /// resumed session after a reconnect.
    pub resumed_pubrels: u64,
    /// PUBACK packets from the broker (any reason code).
    pub pubacks: u64,
    /// PUBREC packets from the broker (any reason code).
    pub pubrecs: u64,
    /// PUBCOMP packets from the broker.
    pub pubcomps: u64,
    /// PUBACK / PUBREC with a reason code of 0x80 or more.
    pub rejected: u64,
    /// QoS 1/2 packet ids outstanding now, over all open connections.
    pub outstanding: usize,
    /// The most QoS 1/2 packet ids ever outstanding on one connection.
    pub max_outstanding: usize,
    /// Packets that could not be parsed (the connection is closed then).
    pub parse_errors: u64,
    /// PINGREQ packets from clients.
    pub pingreqs: u64,
    /// PINGRESP packets from the broker.
    pub pingresps: u64,
}

/// Per connection state.
#[derive(Debug, Default)]
struct ConnState {
    version: u8,
    client_id: String,
    outstanding: HashSet<u16>,
}

/// The sans-IO counting core, shared by a proxy's connections.
#[derive(Debug, Default)]
pub(crate) struct Counter {
    stats: ProxyStats,
    conns: HashMap<u64, ConnState>,
    /// Per client id: payloads of QoS 1/2 messages not finished yet, by packet id (kept across
    /// connections so a resumed session's PUBREL / PUBCOMP still finds its message).
    sessions: HashMap<String, HashMap<u16, Bytes>>,
    acked: Vec<Bytes>,
    rejected: Vec<(Bytes, u8)>,
}

impl Counter {
    pub(crate) fn open(&mut self, conn: u64) {
        self.conns.insert(
            conn,
            ConnState {
                version: 4,
                ..ConnState::default()
            },
        );
    }

    pub(crate) fn close(&mut self, conn: u64) {
        if let Some(state) = self.conns.remove(&conn) {
            self.stats.outstanding -= state.outstanding.len();
        }
    }

    fn session(&mut self, conn: u64) -> Option<(&mut ConnState, &mut HashMap<u16, Bytes>)> {
        let state = self.conns.get_mut(&conn)?;
        let session = self.sessions.entry(state.client_id.clone()).or_default();
        Some((state, session))
    }

    /// A packet the client sent.
    pub(crate) fn on_client_packet(
        &mut self,
        conn: u64,
        first: u8,
        body: &Bytes,
    ) -> Result<(), FrameError> {
        match first >> 4 {
            kind::CONNECT => {
                let (level, clean, client_id) = parse_connect(body)?;
                self.stats.connects += 1;
                if clean {
                    self.sessions.remove(&client_id);
                }
                if let Some(state) = self.conns.get_mut(&conn) {
                    state.version = level;
                    state.client_id = client_id;
                }
            }
            kind::PUBLISH => {
                let version = self.conns.get(&conn).map_or(4, |c| c.version);
                let p = parse_publish(first, body, version)?;
                self.stats.publishes[usize::from(p.qos)] += 1;
                if p.dup {
                    self.stats.dup_publishes += 1;
                }
                if p.qos == 0 {
                    self.acked.push(Bytes::copy_from_slice(&p.payload));
                    return Ok(());
                }
                let Some((state, session)) = self.session(conn) else {
                    return Ok(());
                };
                session.insert(p.pkid, Bytes::copy_from_slice(&p.payload));
                let added = state.outstanding.insert(p.pkid);
                let now = state.outstanding.len();
                if added {
                    self.stats.outstanding += 1;
                } else if !p.dup {
                    self.stats.reused_packet_ids += 1;
                }
                self.stats.max_outstanding = self.stats.max_outstanding.max(now);
            }
            kind::PUBREL => {
                let pkid = read_u16(body, 0, "PUBREL")?;
                self.stats.pubrels += 1;
                // A PUBREL re-sent on a resumed session holds its slot until PUBCOMP.
                let Some(state) = self.conns.get_mut(&conn) else {
                    return Ok(());
                };
                if state.outstanding.insert(pkid) {
                    self.stats.outstanding += 1;
                    self.stats.resumed_pubrels += 1;
                }
                let now = state.outstanding.len();
                self.stats.max_outstanding = self.stats.max_outstanding.max(now);
            }
            kind::PINGREQ => self.stats.pingreqs += 1,
            kind::DISCONNECT => {
                self.stats.disconnects += 1;
                let now = self.conns.get(&conn).map_or(0, |c| c.outstanding.len());
                self.stats.outstanding_at_disconnect.push(now);
            }
            _ => {}
        }
        Ok(())
    }

    /// A packet the broker sent.
    pub(crate) fn on_broker_packet(
        &mut self,
        conn: u64,
        first: u8,
        body: &Bytes,
    ) -> Result<(), FrameError> {
        match first >> 4 {
            kind::PINGRESP => self.stats.pingresps += 1,
            kind::CONNACK => {
                let code = *body
                    .get(1)
                    .ok_or_else(|| FrameError("CONNACK: body too short".to_owned()))?;
                self.stats.connack_codes.push(code);
                if body.first().is_some_and(|flags| flags & 1 == 1) {
                    self.stats.sessions_present += 1;
                }
            }
            kind::PUBACK | kind::PUBREC | kind::PUBCOMP => {
                let packet = first >> 4;
                let pkid = read_u16(body, 0, "acknowledgement")?;
                // MQTT 5 omits the reason code when it is 0 (success).
                let reason = body.get(2).copied().unwrap_or(0);
                match packet {
                    kind::PUBACK => self.stats.pubacks += 1,
                    kind::PUBREC => self.stats.pubrecs += 1,
                    _ => self.stats.pubcomps += 1,
                }
                let rejected = packet != kind::PUBCOMP && reason >= 0x80;
                if packet == kind::PUBREC && !rejected {
                    // QoS 2 goes on with PUBREL / PUBCOMP: still outstanding.
                    return Ok(());
                }
                let Some((state, session)) = self.session(conn) else {
                    return Ok(());
                };
                let removed = state.outstanding.remove(&pkid);
                let payload = session.remove(&pkid);
                if removed {
                    self.stats.outstanding -= 1;
                }
                if rejected {
                    self.stats.rejected += 1;
                    if let Some(p) = payload {
                        self.rejected.push((p, reason));
                    }
                } else if let Some(p) = payload {
                    self.acked.push(p);
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// One proxied connection: both sockets, so either side can close both.
#[derive(Debug)]
struct Link {
    client: TcpStream,
    broker: TcpStream,
    closed: AtomicBool,
}

impl Link {
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        // Either may be closed already; nothing else to do then.
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.broker.shutdown(Shutdown::Both);
    }
}

#[derive(Debug, Default)]
struct Shared {
    counter: Mutex<Counter>,
    stop: AtomicBool,
    refuse: AtomicBool,
    hold: AtomicBool,
    /// Neither direction is read nor forwarded (a network black hole).
    black_hole: AtomicBool,
    next_conn: AtomicU64,
    links: Mutex<Vec<Weak<Link>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Shared {
    fn counter(&self) -> MutexGuard<'_, Counter> {
        self.counter.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The counting proxy. Listens on a free loopback port; stops (closing every connection) on
/// drop.
pub struct MqttCountProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl fmt::Debug for MqttCountProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MqttCountProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.upstream)
            .finish_non_exhaustive()
    }
}

impl MqttCountProxy {
    /// Starts a proxy to the broker at `upstream`.
    pub fn start(upstream: SocketAddr) -> Result<MqttCountProxy, HarnessError> {
        let listener = TcpListener::bind((LOOPBACK, 0))
            .map_err(|e| HarnessError::io("binding the MQTT count proxy", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| HarnessError::io("reading the proxy address", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| HarnessError::io("making the proxy listener non-blocking", e))?;
        let shared = Arc::new(Shared::default());
        let accept_shared = Arc::clone(&shared);
        let accept = thread::Builder::new()
            .name("mqtt-count-proxy".to_owned())
            .spawn(move || accept_loop(&listener, upstream, &accept_shared))
            .map_err(|e| HarnessError::io("spawning the proxy thread", e))?;
        Ok(MqttCountProxy {
            addr,
            upstream,
            shared,
            accept: Some(accept),
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `host:port` clients connect to.
    pub fn host_port(&self) -> String {
        self.addr.to_string()
    }

    /// A snapshot of the counts.
    pub fn stats(&self) -> ProxyStats {
        self.shared.counter().stats.clone()
    }

    /// Removes and returns the payloads of the messages the broker acknowledged so far, in the
    /// order of the acknowledgements (QoS 0: in the order the client wrote them).
    pub fn take_acked(&self) -> Vec<Bytes> {
        std::mem::take(&mut self.shared.counter().acked)
    }

    /// Removes and returns the payloads the broker rejected (reason code 0x80 or more) with
    /// the reason code.
    pub fn take_rejected(&self) -> Vec<(Bytes, u8)> {
        std::mem::take(&mut self.shared.counter().rejected)
    }

    /// While on, new connections are closed as soon as they are accepted (like a broker that
    /// is down); open ones are left alone.
    pub fn refuse_connections(&self, on: bool) {
        self.shared.refuse.store(on, Ordering::SeqCst);
    }

    /// While on, bytes from clients are not read nor forwarded (they wait in the socket);
    /// bytes from the broker still flow.
    pub fn hold_client_to_broker(&self, on: bool) {
        self.shared.hold.store(on, Ordering::SeqCst);
    }

    /// While on, bytes are neither read nor forwarded in either direction, and a side that
    /// closes is not seen by the other: a peer that went silent behind a black-holed network
    /// (the broker's own keep-alive timeout, which closes its side, stays unseen).
    pub fn black_hole(&self, on: bool) {
        self.shared.black_hole.store(on, Ordering::SeqCst);
    }

    /// Closes every open connection (both sides).
    pub fn close_all(&self) {
        let links = self
            .shared
            .links
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for link in links.iter().filter_map(Weak::upgrade) {
            link.close();
        }
    }

    /// How many connections are open.
    pub fn open_connections(&self) -> usize {
        self.shared.counter().conns.len()
    }
}

impl Drop for MqttCountProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.close_all();
        if let Some(accept) = self.accept.take() {
            // A panicked accept thread has nothing left to clean up.
            let _ = accept.join();
        }
        let threads = std::mem::take(
            &mut *self
                .shared
                .threads
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for t in threads {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, upstream: SocketAddr, shared: &Arc<Shared>) {
    while !shared.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                if shared.refuse.load(Ordering::SeqCst) {
                    shared.counter().stats.refused += 1;
                    drop(client);
                    continue;
                }
                if forward(client, upstream, shared).is_err() {
                    // The client sees its connection closed, as if the broker were down.
                    shared.counter().stats.upstream_failures += 1;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(2));
            }
            Err(_) => thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn forward(client: TcpStream, upstream: SocketAddr, shared: &Arc<Shared>) -> io::Result<()> {
    client.set_nonblocking(false)?;
    let broker = TcpStream::connect_timeout(&upstream, Duration::from_secs(2))?;
    for s in [&client, &broker] {
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(READ_TICK))?;
    }
    let link = Arc::new(Link {
        client: client.try_clone()?,
        broker: broker.try_clone()?,
        closed: AtomicBool::new(false),
    });
    let conn = shared.next_conn.fetch_add(1, Ordering::SeqCst);
    {
        let mut counter = shared.counter();
        counter.open(conn);
        counter.stats.connections += 1;
    }
    {
        let mut links = shared.links.lock().unwrap_or_else(PoisonError::into_inner);
        links.retain(|l| l.strong_count() > 0);
        links.push(Arc::downgrade(&link));
    }
    let up = {
        let (shared, link) = (Arc::clone(shared), Arc::clone(&link));
        let (from, to) = (client, broker.try_clone()?);
        thread::Builder::new()
            .name(format!("proxy-up-{conn}"))
            .spawn(move || pump(&shared, &link, conn, from, to, Direction::ClientToBroker))?
    };
    let down = {
        let (shared, link) = (Arc::clone(shared), Arc::clone(&link));
        let to = link.client.try_clone()?;
        thread::Builder::new()
            .name(format!("proxy-down-{conn}"))
            .spawn(move || pump(&shared, &link, conn, broker, to, Direction::BrokerToClient))?
    };
    let mut threads = shared
        .threads
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    threads.retain(|t| !t.is_finished());
    threads.push(up);
    threads.push(down);
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    ClientToBroker,
    BrokerToClient,
}

/// Whether `dir` is stopped by [`MqttCountProxy::hold_client_to_broker`] or
/// [`MqttCountProxy::black_hole`].
fn paused(shared: &Shared, dir: Direction) -> bool {
    (dir == Direction::ClientToBroker && shared.hold.load(Ordering::SeqCst))
        || shared.black_hole.load(Ordering::SeqCst)
}

/// Copies one direction of a connection, counting every complete packet before forwarding the
/// bytes that carry it.
fn pump(
    shared: &Shared,
    link: &Link,
    conn: u64,
    mut from: TcpStream,
    mut to: TcpStream,
    dir: Direction,
) {
    let mut framer = MqttFramer::default();
    let mut chunk = vec![0u8; 64 * 1024];
    while !link.closed.load(Ordering::SeqCst) && !shared.stop.load(Ordering::SeqCst) {
        if paused(shared, dir) {
            thread::sleep(Duration::from_millis(5));
            continue;
        }
        let n = match from.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            Err(_) => break,
        };
        // The flags may have been set while the read was waiting: bytes read then are held
        // until the flag is cleared, as a partitioned network holds them, never forwarded early.
        while paused(shared, dir)
            && !link.closed.load(Ordering::SeqCst)
            && !shared.stop.load(Ordering::SeqCst)
        {
            thread::sleep(Duration::from_millis(5));
        }
        framer.push(&chunk[..n]);
        let counted = {
            let mut counter = shared.counter();
            let mut result = Ok(());
            loop {
                match framer.next_packet() {
                    Ok(Some((first, body))) => {
                        let r = match dir {
                            Direction::ClientToBroker => {
                                counter.on_client_packet(conn, first, &body)
                            }
                            Direction::BrokerToClient => {
                                counter.on_broker_packet(conn, first, &body)
                            }
                        };
                        if let Err(e) = r {
                            result = Err(e);
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            if result.is_err() {
                counter.stats.parse_errors += 1;
            }
            result
        };
        if counted.is_err() || to.write_all(&chunk[..n]).is_err() {
            break;
        }
    }
    link.close();
    shared.counter().close(conn);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use mqttbytes::{QoS, v4, v5};

    fn frames(bytes: &[u8]) -> Vec<(u8, Bytes)> {
        let mut f = MqttFramer::default();
        f.push(bytes);
        let mut out = Vec::new();
        while let Some(p) = f.next_packet().unwrap() {
            out.push(p);
        }
        assert_eq!(f.pending(), 0);
        out
    }

    fn v4_publish(pkid: u16, qos: QoS, payload: &str) -> BytesMut {
        let mut p = v4::Publish::new("a/b", qos, payload.as_bytes().to_vec());
        p.pkid = pkid;
        let mut out = BytesMut::new();
        p.write(&mut out).unwrap();
        out
    }

    fn v5_publish(pkid: u16, qos: QoS, payload: &str, dup: bool) -> BytesMut {
        let mut p = v5::Publish::new("x/y/z", qos, payload.as_bytes().to_vec());
        p.pkid = pkid;
        p.dup = dup;
        p.properties = Some(v5::PublishProperties {
            payload_format_indicator: Some(1),
            message_expiry_interval: Some(60),
            topic_alias: None,
            response_topic: Some("r/t".to_owned()),
            correlation_data: Some(Bytes::from_static(b"cd")),
            user_properties: vec![("k".to_owned(), "v".to_owned())],
            subscription_identifiers: Vec::new(),
            content_type: Some("text/plain".to_owned()),
        });
        let mut out = BytesMut::new();
        p.write(&mut out).unwrap();
        out
    }

    fn connect(version: u8, id: &str, clean: bool) -> BytesMut {
        let mut out = BytesMut::new();
        if version == 5 {
            let mut c = v5::Connect::new(id);
            c.clean_session = clean;
            c.properties = Some(v5::ConnectProperties {
                session_expiry_interval: Some(3600),
                receive_maximum: Some(100),
                max_packet_size: None,
                topic_alias_max: None,
                request_response_info: None,
                request_problem_info: None,
                user_properties: Vec::new(),
                authentication_method: None,
                authentication_data: None,
            });
            c.write(&mut out).unwrap();
        } else {
            let mut c = v4::Connect::new(id);
            c.clean_session = clean;
            c.write(&mut out).unwrap();
        }
        out
    }

    fn feed_client(c: &mut Counter, conn: u64, bytes: &[u8]) {
        for (first, body) in frames(bytes) {
            c.on_client_packet(conn, first, &body).unwrap();
        }
    }

    fn feed_broker(c: &mut Counter, conn: u64, bytes: &[u8]) {
        for (first, body) in frames(bytes) {
            c.on_broker_packet(conn, first, &body).unwrap();
        }
    }

    fn puback5(pkid: u16, reason: v5::PubAckReason) -> BytesMut {
        let mut a = v5::PubAck::new(pkid);
        a.reason = reason;
        let mut out = BytesMut::new();
        a.write(&mut out).unwrap();
        out
    }

    #[test]
    fn remaining_length_boundaries() {
        for (value, encoded) in [
            (0usize, vec![0x00]),
            (127, vec![0x7f]),
            (128, vec![0x80, 0x01]),
            (16_383, vec![0xff, 0x7f]),
            (16_384, vec![0x80, 0x80, 0x01]),
            (2_097_152, vec![0x80, 0x80, 0x80, 0x01]),
            (268_435_455, vec![0xff, 0xff, 0xff, 0x7f]),
        ] {
            assert_eq!(
                remaining_length(&encoded).unwrap(),
                Some((value, encoded.len())),
                "{value}"
            );
            assert_eq!(
                remaining_length(&encoded[..encoded.len() - 1]).unwrap(),
                None
            );
        }
        assert!(remaining_length(&[0x80, 0x80, 0x80, 0x80, 0x01]).is_err());
        assert!(remaining_length(&[0x80, 0x80, 0x80, 0x80]).is_err());
    }

    #[test]
    fn framer_splits_packets_across_reads_byte_by_byte() {
        let mut stream = BytesMut::new();
        stream.extend_from_slice(&v4_publish(1, QoS::AtLeastOnce, "one"));
        stream.extend_from_slice(&v4_publish(0, QoS::AtMostOnce, &"x".repeat(300)));
        stream.extend_from_slice(&v4_publish(2, QoS::ExactlyOnce, ""));
        let mut f = MqttFramer::default();
        let mut got = Vec::new();
        for b in stream.iter() {
            f.push(&[*b]);
            while let Some(p) = f.next_packet().unwrap() {
                got.push(p);
            }
        }
        assert_eq!(got.len(), 3);
        assert_eq!(f.pending(), 0);
        let p = parse_publish(got[1].0, &got[1].1, 4).unwrap();
        assert_eq!((p.qos, p.pkid, p.payload.len()), (0, 0, 300));
        let p = parse_publish(got[2].0, &got[2].1, 4).unwrap();
        assert_eq!((p.qos, p.pkid, p.payload.len()), (2, 2, 0));
    }

    #[test]
    fn v5_publish_payload_skips_the_properties() {
        let got = frames(&v5_publish(9, QoS::AtLeastOnce, "the payload", true));
        let p = parse_publish(got[0].0, &got[0].1, 5).unwrap();
        assert_eq!(
            p,
            PublishInfo {
                qos: 1,
                dup: true,
                pkid: 9,
                payload: Bytes::from_static(b"the payload"),
            }
        );
    }

    #[test]
    fn connect_gives_level_clean_flag_and_client_id() {
        let got = frames(&connect(5, "engine-1", false));
        assert_eq!(
            parse_connect(&got[0].1).unwrap(),
            (5, false, "engine-1".to_owned())
        );
        let got = frames(&connect(4, "old", true));
        assert_eq!(
            parse_connect(&got[0].1).unwrap(),
            (4, true, "old".to_owned())
        );
    }

    #[test]
    fn qos1_window_rises_and_falls_with_pubacks() {
        let mut c = Counter::default();
        c.open(0);
        feed_client(&mut c, 0, &connect(4, "a", true));
        for pkid in 1..=5u16 {
            feed_client(
                &mut c,
                0,
                &v4_publish(pkid, QoS::AtLeastOnce, &pkid.to_string()),
            );
        }
        assert_eq!((c.stats.outstanding, c.stats.max_outstanding), (5, 5));
        for pkid in [2u16, 1, 3] {
            let mut out = BytesMut::new();
            v4::PubAck::new(pkid).write(&mut out).unwrap();
            feed_broker(&mut c, 0, &out);
        }
        assert_eq!((c.stats.outstanding, c.stats.max_outstanding), (2, 5));
        feed_client(&mut c, 0, &v4_publish(6, QoS::AtLeastOnce, "6"));
        feed_client(&mut c, 0, &v4_publish(0, QoS::AtMostOnce, "q0"));
        assert_eq!((c.stats.outstanding, c.stats.max_outstanding), (3, 5));
        assert_eq!(c.stats.publishes, [1, 6, 0]);
        let acked: Vec<&[u8]> = c.acked.iter().map(|b| b.as_ref()).collect();
        assert_eq!(acked, vec![&b"2"[..], b"1", b"3", b"q0"]);
        let mut out = BytesMut::new();
        v4::Disconnect.write(&mut out).unwrap();
        feed_client(&mut c, 0, &out);
        assert_eq!(c.stats.outstanding_at_disconnect, vec![3]);
        c.close(0);
        assert_eq!(c.stats.outstanding, 0);
    }

    #[test]
    fn a_packet_id_reused_before_its_ack_is_counted_and_a_dup_resend_is_not() {
        let mut c = Counter::default();
        c.open(0);
        feed_client(&mut c, 0, &connect(5, "r", true));
        feed_client(&mut c, 0, &v5_publish(4, QoS::ExactlyOnce, "four", false));
        feed_client(&mut c, 0, &v5_publish(4, QoS::ExactlyOnce, "four", true));
        assert_eq!(c.stats.reused_packet_ids, 0, "a DUP re-send is allowed");
        feed_client(&mut c, 0, &v5_publish(4, QoS::ExactlyOnce, "other", false));
        assert_eq!(c.stats.reused_packet_ids, 1, "4 is not complete yet");
        assert_eq!(c.stats.outstanding, 1);
    }

    #[test]
    fn qos2_is_outstanding_until_pubcomp_and_reason_codes_reject() {
        let mut c = Counter::default();
        c.open(0);
        feed_client(&mut c, 0, &connect(5, "b", true));
        feed_client(&mut c, 0, &v5_publish(1, QoS::ExactlyOnce, "two", false));
        feed_client(
            &mut c,
            0,
            &v5_publish(2, QoS::ExactlyOnce, "denied2", false),
        );
        feed_client(
            &mut c,
            0,
            &v5_publish(3, QoS::AtLeastOnce, "denied1", false),
        );
        let mut out = BytesMut::new();
        v5::PubRec::new(1).write(&mut out).unwrap();
        let mut rec = v5::PubRec::new(2);
        rec.reason = v5::PubRecReason::NotAuthorized;
        rec.write(&mut out).unwrap();
        out.extend_from_slice(&puback5(3, v5::PubAckReason::NotAuthorized));
        feed_broker(&mut c, 0, &out);
        assert_eq!(c.stats.outstanding, 1, "PUBREC success keeps the slot");
        assert_eq!(c.stats.rejected, 2);
        let mut rejected = c.rejected.clone();
        rejected.sort();
        assert_eq!(
            rejected,
            vec![
                (Bytes::from_static(b"denied1"), 0x87),
                (Bytes::from_static(b"denied2"), 0x87)
            ]
        );
        let mut out = BytesMut::new();
        v5::PubRel::new(1).write(&mut out).unwrap();
        feed_client(&mut c, 0, &out);
        assert_eq!((c.stats.outstanding, c.stats.resumed_pubrels), (1, 0));
        let mut out = BytesMut::new();
        v5::PubComp::new(1).write(&mut out).unwrap();
        feed_broker(&mut c, 0, &out);
        assert_eq!(c.stats.outstanding, 0);
        assert_eq!(c.acked, vec![Bytes::from_static(b"two")]);
        assert_eq!(c.stats.max_outstanding, 3);
        // MQTT 5 success with a non-error reason (0x10 no matching subscribers) is an ack.
        feed_client(&mut c, 0, &v5_publish(4, QoS::AtLeastOnce, "nobody", false));
        feed_broker(
            &mut c,
            0,
            &puback5(4, v5::PubAckReason::NoMatchingSubscribers),
        );
        assert_eq!(c.acked.last(), Some(&Bytes::from_static(b"nobody")));
    }

    #[test]
    fn a_resumed_session_keeps_its_messages_and_a_clean_one_drops_them() {
        let mut c = Counter::default();
        c.open(0);
        feed_client(&mut c, 0, &connect(5, "s", true));
        feed_client(&mut c, 0, &v5_publish(7, QoS::ExactlyOnce, "seven", false));
        feed_client(&mut c, 0, &v5_publish(8, QoS::AtLeastOnce, "eight", false));
        let mut out = BytesMut::new();
        v5::PubRec::new(7).write(&mut out).unwrap();
        feed_broker(&mut c, 0, &out);
        c.close(0);
        assert_eq!(c.stats.outstanding, 0);

        c.open(1);
        feed_client(&mut c, 1, &connect(5, "s", false));
        let mut out = BytesMut::new();
        v5::ConnAck::new(v5::ConnectReturnCode::Success, true)
            .write(&mut out)
            .unwrap();
        feed_broker(&mut c, 1, &out);
        assert_eq!(
            (c.stats.connack_codes.clone(), c.stats.sessions_present),
            (vec![0], 1)
        );
        let mut out = BytesMut::new();
        v5::PubRel::new(7).write(&mut out).unwrap();
        feed_client(&mut c, 1, &out);
        feed_client(&mut c, 1, &v5_publish(8, QoS::AtLeastOnce, "eight", true));
        assert_eq!((c.stats.outstanding, c.stats.dup_publishes), (2, 1));
        assert_eq!((c.stats.pubrels, c.stats.resumed_pubrels), (1, 1));
        let mut out = BytesMut::new();
        v5::PubComp::new(7).write(&mut out).unwrap();
        out.extend_from_slice(&puback5(8, v5::PubAckReason::Success));
        feed_broker(&mut c, 1, &out);
        assert_eq!(
            c.acked,
            vec![Bytes::from_static(b"seven"), Bytes::from_static(b"eight")]
        );

        feed_client(&mut c, 1, &v5_publish(9, QoS::AtLeastOnce, "nine", false));
        c.close(1);
        c.open(2);
        feed_client(&mut c, 2, &connect(5, "s", true));
        feed_broker(&mut c, 2, &puback5(9, v5::PubAckReason::Success));
        assert_eq!(c.acked.len(), 2, "a clean start forgets the old session");
    }

    /// A broker stand-in for socket tests: reads `n` PUBLISH packets, then answers them all.
    fn fake_broker(n: usize) -> (SocketAddr, JoinHandle<Vec<u16>>) {
        let listener = TcpListener::bind((LOOPBACK, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let handle = thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut framer = MqttFramer::default();
            let mut pkids = Vec::new();
            let mut buf = [0u8; 4096];
            while pkids.len() < n {
                let got = s.read(&mut buf).unwrap();
                assert!(got > 0, "client closed early");
                framer.push(&buf[..got]);
                while let Some((first, body)) = framer.next_packet().unwrap() {
                    if first >> 4 == kind::PUBLISH {
                        pkids.push(parse_publish(first, &body, 4).unwrap().pkid);
                    }
                }
            }
            let mut out = BytesMut::new();
            for pkid in &pkids {
                v4::PubAck::new(*pkid).write(&mut out).unwrap();
            }
            s.write_all(&out).unwrap();
            // Wait for the client to close.
            let _ = s.read(&mut buf);
            pkids
        });
        (addr, handle)
    }

    fn wait_until(mut f: impl FnMut() -> bool) {
        for _ in 0..500 {
            if f() {
                return;
            }
            thread::sleep(Duration::from_millis(10));
        }
        panic!("timed out");
    }

    #[test]
    fn counts_a_window_through_sockets_and_holds_and_refuses_on_demand() {
        let (broker, handle) = fake_broker(40);
        let proxy = MqttCountProxy::start(broker).unwrap();
        let mut client = TcpStream::connect(proxy.addr()).unwrap();
        let mut out = BytesMut::new();
        out.extend_from_slice(&connect(4, "sock", true));
        for pkid in 1..=40u16 {
            out.extend_from_slice(&v4_publish(pkid, QoS::AtLeastOnce, &pkid.to_string()));
        }
        proxy.hold_client_to_broker(true);
        client.write_all(&out).unwrap();
        thread::sleep(Duration::from_millis(100));
        assert_eq!(
            proxy.stats().publishes[1],
            0,
            "held bytes are neither read nor counted"
        );
        proxy.hold_client_to_broker(false);
        let mut acks = Vec::new();
        let mut framer = MqttFramer::default();
        let mut buf = [0u8; 4096];
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        while acks.len() < 40 {
            let n = client.read(&mut buf).unwrap();
            assert!(n > 0);
            framer.push(&buf[..n]);
            while let Some((first, body)) = framer.next_packet().unwrap() {
                assert_eq!(first >> 4, kind::PUBACK);
                acks.push(read_u16(&body, 0, "ack").unwrap());
            }
        }
        let stats = proxy.stats();
        assert_eq!(stats.max_outstanding, 40, "all 40 were out before any ack");
        assert_eq!((stats.outstanding, stats.pubacks), (0, 40));
        assert_eq!(proxy.take_acked().len(), 40);
        assert!(proxy.take_acked().is_empty(), "taken");
        drop(client);
        assert_eq!(handle.join().unwrap(), (1..=40).collect::<Vec<u16>>());
        wait_until(|| proxy.open_connections() == 0);

        proxy.refuse_connections(true);
        let mut refused = TcpStream::connect(proxy.addr()).unwrap();
        refused
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        assert_eq!(refused.read(&mut buf).unwrap_or(0), 0, "closed at once");
        assert_eq!(proxy.stats().refused, 1);
    }

    /// Bytes the client writes the moment the black hole starts (while the proxy's pump is
    /// already waiting in a read) are held, not forwarded. Before, that read forwarded them, so
    /// a test that black-holed the broker and then published sometimes got its PUBACK.
    #[test]
    fn a_black_hole_holds_what_a_waiting_read_returns() {
        let listener = TcpListener::bind((LOOPBACK, 0)).unwrap();
        let proxy = MqttCountProxy::start(listener.local_addr().unwrap()).unwrap();
        let mut client = TcpStream::connect(proxy.addr()).unwrap();
        let (mut upstream, _) = listener.accept().unwrap();
        wait_until(|| proxy.open_connections() == 1);
        upstream
            .set_read_timeout(Some(Duration::from_millis(150)))
            .unwrap();
        let mut buf = [0u8; 4096];
        for round in 0..10 {
            // Let the pump settle into a read before the flag goes on.
            thread::sleep(Duration::from_millis(7));
            proxy.black_hole(true);
            client
                .write_all(&v4_publish(1, QoS::AtMostOnce, "x"))
                .unwrap();
            let early = match upstream.read(&mut buf) {
                Ok(n) => n,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    0
                }
                Err(e) => panic!("{e}"),
            };
            assert_eq!(early, 0, "round {round}: bytes passed the black hole");
            proxy.black_hole(false);
            let n = upstream.read(&mut buf).unwrap();
            assert!(n > 0, "round {round}: released when the black hole ends");
        }
    }

    #[test]
    fn close_all_ends_open_connections() {
        let listener = TcpListener::bind((LOOPBACK, 0)).unwrap();
        let proxy = MqttCountProxy::start(listener.local_addr().unwrap()).unwrap();
        let mut client = TcpStream::connect(proxy.addr()).unwrap();
        let (_upstream, _) = listener.accept().unwrap();
        wait_until(|| proxy.open_connections() == 1);
        proxy.close_all();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(client.read(&mut buf).unwrap_or(0), 0);
        wait_until(|| proxy.open_connections() == 0);
    }

    #[test]
    fn a_broker_that_is_down_closes_the_client() {
        let port = crate::ports::free_loopback_port().unwrap();
        let proxy = MqttCountProxy::start(SocketAddr::from((LOOPBACK, port))).unwrap();
        let mut client = TcpStream::connect(proxy.addr()).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(client.read(&mut buf).unwrap_or(0), 0);
        wait_until(|| proxy.stats().upstream_failures == 1);
    }
}
