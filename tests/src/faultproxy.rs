//! A fault-injecting HTTP/1.1 proxy for S3 tests: forwards bytes between a client and an
//! upstream server (s3s-fs), and injects faults into a share of the requests.
//!
//! It reads request boundaries (the head, then a `content-length` body; S3 clients send one),
//! so faults hit whole requests:
//! - drop mid-body: forwards the head and half of the body, then closes both connections;
//! - 500 / 503: reads the request without forwarding it and answers with an S3 error document
//!   itself (`InternalError`, `SlowDown`);
//! - stall: forwards the request, then holds the response for [`FaultPlan::stall_for`] before
//!   passing it on (longer than the client's timeout, so the client gives up; the server did
//!   the work, so the retry repeats it);
//! - corrupt: forwards the request with one byte of its body flipped (in the middle), as a
//!   broken link or middlebox might: a store that checks a checksum refuses it;
//! - drip: forwards the request, then passes the rest of the connection's answer on one byte
//!   every [`FaultPlan::drip_every`] (each read arrives in time; the whole never does);
//! - answer all: every matching request gets a fixed status and S3 error code (a permanent
//!   `403 AccessDenied`, say).
//!
//! Which request gets which fault is decided from the seed and the position of the request
//! among the matching requests, in the order they arrive: one client sending one request at a
//! time sees the same faults for the same seed. A request with `transfer-encoding` (no
//! boundary known) turns its connection into a plain byte pipe without faults.
//!
//! Std threads, no async: one thread accepts, two threads per connection (one per direction).
//! Dropping the proxy closes every connection and joins every thread.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::HarnessError;
use crate::ports::{LOOPBACK, free_loopback_port};

/// Largest request head the proxy parses; a longer one turns the connection into a pipe.
const MAX_HEAD: usize = 1024 * 1024;
/// How long connecting to the upstream may take.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Granularity of sleeps that watch for the proxy being dropped.
const TICK: Duration = Duration::from_millis(10);

/// A fixed answer for every matching request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixedAnswer {
    /// HTTP status, e.g. 403.
    pub status: u16,
    /// S3 error code, e.g. `AccessDenied`.
    pub code: String,
    /// The `<Message>` of the error document.
    pub message: String,
    /// Bytes of empty `<a/>` elements after the `<Message>` (a hostile or broken store's
    /// oversized error document); 0 for none.
    pub padding: usize,
}

/// Which faults to inject, into which share of the requests.
///
/// The four shares are probabilities per matching request (each in 0..=1, summing to at most
/// 1); the rest is forwarded untouched.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultPlan {
    /// Forward the head and half of the body, then close both connections.
    pub drop_mid_body: f64,
    /// Answer `500 InternalError` without forwarding.
    pub status_500: f64,
    /// Answer `503 SlowDown` without forwarding.
    pub slow_down_503: f64,
    /// Forward, then hold the response for `stall_for`.
    pub stall: f64,
    /// How long a stalled response is held.
    pub stall_for: Duration,
    /// Forward with one body byte flipped.
    pub corrupt: f64,
    /// Forward, then pass the answer on a byte at a time.
    pub drip: f64,
    /// The pause before each dripped byte.
    pub drip_every: Duration,
    /// Seed of the fault decisions.
    pub seed: u64,
    /// Stop injecting after this many faults (forward everything then).
    pub max_faults: Option<usize>,
    /// Only requests with one of these methods (upper case) get faults; empty means all.
    pub only_methods: Vec<String>,
    /// Only requests whose target (path and query) contains this get faults.
    pub path_contains: Option<String>,
    /// ...and do not contain this.
    pub path_excludes: Option<String>,
    /// Answer every matching request with this instead (the shares are not used). Counts
    /// toward `max_faults`.
    pub answer_all: Option<FixedAnswer>,
}

impl Default for FaultPlan {
    fn default() -> Self {
        FaultPlan {
            drop_mid_body: 0.0,
            status_500: 0.0,
            slow_down_503: 0.0,
            stall: 0.0,
            stall_for: Duration::from_secs(5),
            corrupt: 0.0,
            drip: 0.0,
            drip_every: Duration::from_secs(1),
            seed: 0,
            max_faults: None,
            only_methods: Vec::new(),
            path_contains: None,
            path_excludes: None,
            answer_all: None,
        }
    }
}

impl FaultPlan {
    /// No faults: a plain forwarding proxy.
    pub fn passthrough() -> Self {
        FaultPlan::default()
    }

    /// No faults yet, decisions seeded with `seed`.
    pub fn seeded(seed: u64) -> Self {
        FaultPlan {
            seed,
            ..FaultPlan::default()
        }
    }

    /// Every request answered with `status` and the S3 error `code`.
    pub fn answer_all(status: u16, code: &str) -> Self {
        FaultPlan {
            answer_all: Some(FixedAnswer {
                status,
                code: code.to_owned(),
                message: format!("{code} (injected by the fault proxy)"),
                padding: 0,
            }),
            ..FaultPlan::default()
        }
    }

    /// The fixed answer's error document padded with `bytes` of `<a/>` elements.
    pub fn padded(mut self, bytes: usize) -> Self {
        if let Some(a) = &mut self.answer_all {
            a.padding = bytes;
        }
        self
    }

    pub fn drop_mid_body(mut self, share: f64) -> Self {
        self.drop_mid_body = share;
        self
    }

    pub fn status_500(mut self, share: f64) -> Self {
        self.status_500 = share;
        self
    }

    pub fn slow_down_503(mut self, share: f64) -> Self {
        self.slow_down_503 = share;
        self
    }

    /// A share of the requests (with a body) forwarded with one body byte flipped.
    pub fn corrupt(mut self, share: f64) -> Self {
        self.corrupt = share;
        self
    }

    /// A share of the requests whose answers come one byte every `every`.
    pub fn drip(mut self, share: f64, every: Duration) -> Self {
        self.drip = share;
        self.drip_every = every;
        self
    }

    pub fn stall(mut self, share: f64, stall_for: Duration) -> Self {
        self.stall = share;
        self.stall_for = stall_for;
        self
    }

    pub fn max_faults(mut self, max: usize) -> Self {
        self.max_faults = Some(max);
        self
    }

    /// Only requests with these methods get faults (e.g. `["PUT"]` for parts).
    pub fn only_methods(mut self, methods: &[&str]) -> Self {
        self.only_methods = methods.iter().map(|m| m.to_ascii_uppercase()).collect();
        self
    }

    /// Only requests whose target contains `needle` get faults (e.g. `partNumber=`).
    pub fn path_contains(mut self, needle: &str) -> Self {
        self.path_contains = Some(needle.to_owned());
        self
    }

    /// Requests whose target contains `needle` get no faults (e.g. `/.spillway/`: the S3
    /// sink's markers and probe, so that a fault meant for objects does not stop the sink
    /// at start).
    pub fn path_excludes(mut self, needle: &str) -> Self {
        self.path_excludes = Some(needle.to_owned());
        self
    }

    fn validate(&self) -> Result<(), HarnessError> {
        let shares = [
            ("drop_mid_body", self.drop_mid_body),
            ("status_500", self.status_500),
            ("slow_down_503", self.slow_down_503),
            ("stall", self.stall),
            ("drip", self.drip),
            ("corrupt", self.corrupt),
        ];
        for (name, share) in shares {
            if !(0.0..=1.0).contains(&share) {
                return Err(HarnessError::InvalidOption(format!(
                    "fault share {name} = {share} is not within 0..=1"
                )));
            }
        }
        let sum: f64 = shares.iter().map(|(_, s)| s).sum();
        if sum > 1.0 + 1e-9 {
            return Err(HarnessError::InvalidOption(format!(
                "fault shares add up to {sum}, more than 1"
            )));
        }
        Ok(())
    }

    fn matches(&self, req: &RequestHead) -> bool {
        (self.only_methods.is_empty()
            || self
                .only_methods
                .iter()
                .any(|m| m.eq_ignore_ascii_case(&req.method)))
            && self
                .path_contains
                .as_deref()
                .is_none_or(|needle| req.target.contains(needle))
            && self
                .path_excludes
                .as_deref()
                .is_none_or(|needle| !req.target.contains(needle))
    }
}

/// How many requests went which way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Client connections accepted.
    pub connections: usize,
    /// Requests read from clients (all of them, faulted or not).
    pub requests: usize,
    /// Requests forwarded to the upstream untouched.
    pub forwarded: usize,
    /// Requests cut off mid-body.
    pub dropped_mid_body: usize,
    /// Requests answered 500.
    pub status_500: usize,
    /// Requests answered 503 SlowDown.
    pub slow_down_503: usize,
    /// Requests whose response was held.
    pub stalled: usize,
    /// Requests whose answer was dripped.
    pub dripped: usize,
    /// Requests forwarded with a body byte flipped.
    pub corrupted: usize,
    /// Requests answered with the fixed answer.
    pub answered_fixed: usize,
}

impl FaultStats {
    /// Faults injected in total.
    pub fn faults(&self) -> usize {
        self.dropped_mid_body
            + self.status_500
            + self.slow_down_503
            + self.stalled
            + self.dripped
            + self.corrupted
            + self.answered_fixed
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    DropMidBody,
    Status500,
    SlowDown503,
    Stall(Duration),
    Drip(Duration),
    Corrupt,
    Fixed,
}

/// What the response side does with the next answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    /// Holds it this long.
    Stall(Duration),
    /// Passes it (and everything after it on the connection) on a byte at a time.
    Drip(Duration),
}

struct Counters {
    stats: FaultStats,
    /// Matching requests decided so far (the index fed to the decision hash).
    decided: u64,
    /// The heads of the requests read, oldest first (the latest [`MAX_KEPT_HEADS`]).
    heads: std::collections::VecDeque<RequestHead>,
}

/// How many request heads the proxy keeps for [`FaultProxy::requests`].
pub const MAX_KEPT_HEADS: usize = 10_000;

struct Shared {
    upstream: SocketAddr,
    plan: Mutex<FaultPlan>,
    counters: Mutex<Counters>,
    stop: AtomicBool,
    /// Sockets of live connections, to shut them down on drop.
    sockets: Mutex<HashMap<u64, Vec<TcpStream>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    next_conn: AtomicU64,
    /// Keys with a conditional write (`If-Match` / `If-None-Match`) upstream now: the next
    /// one to the same key waits until the answer comes (see [`Shared::claim_key`]).
    busy_keys: Mutex<std::collections::HashSet<String>>,
    key_freed: std::sync::Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// Waits until no other conditional write to `key` is upstream, then takes the key. S3
    /// applies a conditional write atomically; s3s-fs checks the condition and then writes,
    /// so two writes under the same `If-Match` both pass when they overlap (seen in the chaos
    /// campaign: two members both won a partition's marker, and offsets were lost). Passing them
    /// one at a time gives the store the contract S3 gives.
    fn claim_key(&self, key: &str) {
        let mut busy = lock(&self.busy_keys);
        while busy.contains(key) && !self.stopping() {
            busy = match self.key_freed.wait_timeout(busy, TICK) {
                Ok((b, _)) => b,
                Err(p) => p.into_inner().0,
            };
        }
        busy.insert(key.to_owned());
    }

    fn free_key(&self, key: &str) {
        lock(&self.busy_keys).remove(key);
        self.key_freed.notify_all();
    }

    /// Counts the request and decides its fault.
    fn decide(&self, req: &RequestHead) -> (Fault, Option<FixedAnswer>, u64) {
        let plan = lock(&self.plan).clone();
        let mut c = lock(&self.counters);
        c.stats.requests += 1;
        if c.heads.len() >= MAX_KEPT_HEADS {
            c.heads.pop_front();
        }
        c.heads.push_back(req.clone());
        let request_no = c.stats.requests as u64;
        let limited = plan.max_faults.is_some_and(|max| c.stats.faults() >= max);
        let fault = if !plan.matches(req) || limited {
            Fault::None
        } else if plan.answer_all.is_some() {
            Fault::Fixed
        } else {
            let n = c.decided;
            c.decided += 1;
            let r = unit(plan.seed, n);
            let choices = [
                (plan.drop_mid_body, Fault::DropMidBody),
                (plan.status_500, Fault::Status500),
                (plan.slow_down_503, Fault::SlowDown503),
                (plan.stall, Fault::Stall(plan.stall_for)),
                (plan.drip, Fault::Drip(plan.drip_every)),
                (plan.corrupt, Fault::Corrupt),
            ];
            let mut edge = 0.0;
            let mut pick = Fault::None;
            for (share, fault) in choices {
                edge += share;
                if r < edge {
                    pick = fault;
                    break;
                }
            }
            pick
        };
        let s = &mut c.stats;
        match fault {
            Fault::None => s.forwarded += 1,
            Fault::DropMidBody => s.dropped_mid_body += 1,
            Fault::Status500 => s.status_500 += 1,
            Fault::SlowDown503 => s.slow_down_503 += 1,
            Fault::Stall(_) => s.stalled += 1,
            Fault::Drip(_) => s.dripped += 1,
            Fault::Corrupt => s.corrupted += 1,
            Fault::Fixed => s.answered_fixed += 1,
        }
        (fault, plan.answer_all, request_no)
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

/// A uniform number in [0, 1) from the seed and the decision index (splitmix64).
fn unit(seed: u64, n: u64) -> f64 {
    let mut z = seed ^ n.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// A running fault proxy on a loopback port. Dropping it closes all its connections and
/// joins its threads.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.shared.upstream)
            .field("plan", &*lock(&self.shared.plan))
            .field("stats", &self.stats())
            .finish()
    }
}

impl FaultProxy {
    /// Starts a proxy to `upstream` on a free loopback port.
    pub fn start(upstream: SocketAddr, plan: FaultPlan) -> Result<FaultProxy, HarnessError> {
        plan.validate()?;
        let listener = bind_loopback()?;
        let addr = listener
            .local_addr()
            .map_err(|e| HarnessError::io("reading the fault proxy's address", e))?;
        let shared = Arc::new(Shared {
            upstream,
            plan: Mutex::new(plan),
            counters: Mutex::new(Counters {
                stats: FaultStats::default(),
                decided: 0,
                heads: std::collections::VecDeque::new(),
            }),
            stop: AtomicBool::new(false),
            sockets: Mutex::new(HashMap::new()),
            threads: Mutex::new(Vec::new()),
            next_conn: AtomicU64::new(0),
            busy_keys: Mutex::new(std::collections::HashSet::new()),
            key_freed: std::sync::Condvar::new(),
        });
        let accept_shared = Arc::clone(&shared);
        let accept = thread::Builder::new()
            .name("faultproxy-accept".to_owned())
            .spawn(move || accept_loop(&listener, &accept_shared))
            .map_err(|e| HarnessError::io("spawning the fault proxy thread", e))?;
        Ok(FaultProxy {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `host:port` of the proxy.
    pub fn host_port(&self) -> String {
        self.addr.to_string()
    }

    /// The address requests are forwarded to.
    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    /// Counters so far.
    pub fn stats(&self) -> FaultStats {
        lock(&self.shared.counters).stats
    }

    /// The heads of the requests read so far (the latest [`MAX_KEPT_HEADS`]), oldest first:
    /// what a client sent, to check on the request.
    pub fn requests(&self) -> Vec<RequestHead> {
        lock(&self.shared.counters).heads.iter().cloned().collect()
    }

    /// Replaces the plan for the requests that come next (counters and the decision index
    /// carry on).
    pub fn set_plan(&self, plan: FaultPlan) -> Result<(), HarnessError> {
        plan.validate()?;
        *lock(&self.shared.plan) = plan;
        Ok(())
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        for sockets in lock(&self.shared.sockets).values() {
            for s in sockets {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        let threads = std::mem::take(&mut *lock(&self.shared.threads));
        for t in threads {
            let _ = t.join();
        }
    }
}

/// Binds a loopback port handed out by the harness (never one another harness server got).
fn bind_loopback() -> Result<TcpListener, HarnessError> {
    let mut last = None;
    for _ in 0..8 {
        let port = free_loopback_port()?;
        match TcpListener::bind((LOOPBACK, port)) {
            Ok(l) => return Ok(l),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => last = Some(e),
            Err(e) => return Err(HarnessError::io("binding the fault proxy port", e)),
        }
    }
    Err(HarnessError::io(
        "binding the fault proxy port",
        last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AddrInUse)),
    ))
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for client in listener.incoming() {
        if shared.stopping() {
            break;
        }
        let Ok(client) = client else { continue };
        lock(&shared.counters).stats.connections += 1;
        let Ok(upstream) = TcpStream::connect_timeout(&shared.upstream, UPSTREAM_CONNECT_TIMEOUT)
        else {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = upstream.set_nodelay(true);
        let id = shared.next_conn.fetch_add(1, Ordering::SeqCst);
        let (Ok(c2), Ok(u2), Ok(c3), Ok(u3)) = (
            client.try_clone(),
            upstream.try_clone(),
            client.try_clone(),
            upstream.try_clone(),
        ) else {
            continue;
        };
        lock(&shared.sockets).insert(id, vec![c3, u3]);
        let stall = Arc::new(Mutex::new(None));
        let release: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
        let (s1, s2) = (Arc::clone(shared), Arc::clone(shared));
        let stall2 = Arc::clone(&stall);
        let (release1, release2) = (Arc::clone(&release), release);
        let up = thread::Builder::new()
            .name(format!("faultproxy-{id}-req"))
            .spawn(move || {
                let mut pump = RequestPump {
                    client,
                    upstream,
                    shared: &s1,
                    stall,
                    release: Arc::clone(&release1),
                    buf: Vec::new(),
                };
                pump.run();
                pump.close_both();
                if let Some(key) = lock(&release1).take() {
                    s1.free_key(&key);
                }
                lock(&s1.sockets).remove(&id);
            });
        let down = thread::Builder::new()
            .name(format!("faultproxy-{id}-resp"))
            .spawn(move || response_pump(u2, c2, &s2, &stall2, &release2));
        let mut threads = lock(&shared.threads);
        threads.extend(up.ok());
        threads.extend(down.ok());
    }
}

/// The head of a request, as far as the proxy needs it.
/// A request head as the proxy read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// `PUT`, `GET` …
    pub method: String,
    /// Path and query.
    pub target: String,
    /// Header fields, names lower case, in order.
    pub headers: Vec<(String, String)>,
    /// When the proxy read the head.
    pub received: std::time::SystemTime,
    content_length: Option<u64>,
    chunked_or_unknown: bool,
    expect_continue: bool,
}

/// The object key (the path) of a PUT or POST carrying `If-Match` or `If-None-Match`.
fn conditional_write_key(req: &RequestHead) -> Option<String> {
    if req.method != "PUT" && req.method != "POST" {
        return None;
    }
    req.headers
        .iter()
        .any(|(name, _)| name == "if-match" || name == "if-none-match")
        .then(|| {
            req.target
                .split_once('?')
                .map_or(req.target.as_str(), |(path, _)| path)
                .to_owned()
        })
}

/// Parses a request head (everything up to and with the blank line). `None` if it is not
/// HTTP/1.x as the proxy understands it.
fn parse_head(head: &[u8]) -> Option<RequestHead> {
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split("\r\n");
    let mut words = lines.next()?.split(' ');
    let method = words.next()?.to_owned();
    let target = words.next()?.to_owned();
    if !words.next()?.starts_with("HTTP/1.") {
        return None;
    }
    let mut req = RequestHead {
        method,
        target,
        headers: Vec::new(),
        received: std::time::SystemTime::now(),
        content_length: None,
        chunked_or_unknown: false,
        expect_continue: false,
    };
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':')?;
        let value = value.trim();
        req.headers
            .push((name.to_ascii_lowercase(), value.to_owned()));
        if name.eq_ignore_ascii_case("content-length") {
            req.content_length = Some(value.parse().ok()?);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            req.chunked_or_unknown = true;
        } else if name.eq_ignore_ascii_case("expect") && value.eq_ignore_ascii_case("100-continue")
        {
            req.expect_continue = true;
        }
    }
    Some(req)
}

struct RequestPump<'a> {
    client: TcpStream,
    upstream: TcpStream,
    shared: &'a Shared,
    /// Set to hold the next response for this long.
    stall: Arc<Mutex<Option<Hold>>>,
    /// The key of a conditional write upstream now, freed when its answer comes.
    release: Arc<Mutex<Option<String>>>,
    /// Bytes read from the client, not handled yet.
    buf: Vec<u8>,
}

impl RequestPump<'_> {
    fn run(&mut self) {
        loop {
            let Some(head_len) = self.read_head() else {
                return;
            };
            let head: Vec<u8> = self.buf.drain(..head_len).collect();
            let Some(req) = parse_head(&head).filter(|r| !r.chunked_or_unknown) else {
                // No boundaries known: pass everything through without faults.
                if self.upstream.write_all(&head).is_ok() {
                    self.pipe();
                }
                return;
            };
            let (fault, fixed, request_no) = self.shared.decide(&req);
            let body_len = req.content_length.unwrap_or(0);
            let forwarded = !matches!(fault, Fault::Status500 | Fault::SlowDown503 | Fault::Fixed);
            if forwarded && let Some(key) = conditional_write_key(&req) {
                self.shared.claim_key(&key);
                *lock(&self.release) = Some(key);
            }
            let done = match fault {
                Fault::None => self.forward(&head, body_len),
                Fault::Stall(d) => {
                    *lock(&self.stall) = Some(Hold::Stall(d));
                    self.forward(&head, body_len)
                }
                Fault::Drip(d) => {
                    *lock(&self.stall) = Some(Hold::Drip(d));
                    self.forward(&head, body_len)
                }
                Fault::Corrupt => self.forward_corrupted(&head, body_len),
                Fault::DropMidBody => {
                    let _ = self.forward(&head, body_len / 2);
                    return;
                }
                Fault::Status500 => self.answer(
                    &req,
                    500,
                    "InternalError",
                    "We encountered an internal error. Please try again.",
                    request_no,
                    0,
                ),
                Fault::SlowDown503 => self.answer(
                    &req,
                    503,
                    "SlowDown",
                    "Please reduce your request rate.",
                    request_no,
                    0,
                ),
                Fault::Fixed => match fixed {
                    Some(a) => {
                        self.answer(&req, a.status, &a.code, &a.message, request_no, a.padding)
                    }
                    None => false,
                },
            };
            if !done {
                return;
            }
        }
    }

    /// Reads until `buf` holds a whole head; its length, or `None` at the end of the stream.
    fn read_head(&mut self) -> Option<usize> {
        let mut searched: usize = 0;
        loop {
            let from = searched.saturating_sub(3);
            if let Some(at) = self.buf[from..].windows(4).position(|w| w == b"\r\n\r\n") {
                return Some(from + at + 4);
            }
            searched = self.buf.len();
            if self.buf.len() > MAX_HEAD {
                // Not a head the proxy understands: pass the connection through.
                if self.upstream.write_all(&self.buf).is_ok() {
                    self.buf.clear();
                    self.pipe();
                }
                return None;
            }
            if !self.fill() {
                return None;
            }
        }
    }

    /// Reads more from the client into `buf`; false at the end of the stream or on error.
    fn fill(&mut self) -> bool {
        let mut tmp = [0u8; 64 * 1024];
        match self.client.read(&mut tmp) {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&tmp[..n]);
                true
            }
        }
    }

    /// Sends the head and `body_len` bytes of body upstream; false if a side failed.
    fn forward(&mut self, head: &[u8], body_len: u64) -> bool {
        if self.upstream.write_all(head).is_err() {
            return false;
        }
        let mut left = body_len;
        while left > 0 {
            if self.buf.is_empty() && !self.fill() {
                return false;
            }
            let n = usize::try_from(left)
                .unwrap_or(usize::MAX)
                .min(self.buf.len());
            if self.upstream.write_all(&self.buf[..n]).is_err() {
                return false;
            }
            self.buf.drain(..n);
            left -= n as u64;
        }
        true
    }

    /// As [`Self::forward`], with the byte in the middle of the body flipped.
    fn forward_corrupted(&mut self, head: &[u8], body_len: u64) -> bool {
        let flip_at = body_len / 2;
        if self.upstream.write_all(head).is_err() {
            return false;
        }
        let mut sent = 0u64;
        while sent < body_len {
            if self.buf.is_empty() && !self.fill() {
                return false;
            }
            let n = usize::try_from(body_len - sent)
                .unwrap_or(usize::MAX)
                .min(self.buf.len());
            if (sent..sent + n as u64).contains(&flip_at)
                && let Some(b) = self.buf.get_mut((flip_at - sent) as usize)
            {
                *b ^= 0x01;
            }
            if self.upstream.write_all(&self.buf[..n]).is_err() {
                return false;
            }
            self.buf.drain(..n);
            sent += n as u64;
        }
        true
    }

    /// Reads the body without forwarding it and answers with an S3 error document.
    fn answer(
        &mut self,
        req: &RequestHead,
        status: u16,
        code: &str,
        message: &str,
        request_no: u64,
        padding: usize,
    ) -> bool {
        // A client waiting for 100 Continue sends no body: answer at once and close.
        let close = req.expect_continue;
        if !close {
            let mut left = req.content_length.unwrap_or(0);
            while left > 0 {
                if self.buf.is_empty() && !self.fill() {
                    return false;
                }
                let n = usize::try_from(left)
                    .unwrap_or(usize::MAX)
                    .min(self.buf.len());
                self.buf.drain(..n);
                left -= n as u64;
            }
        }
        let response = error_response(req, status, code, message, request_no, close, padding);
        if self.client.write_all(&response).is_err() {
            return false;
        }
        !close
    }

    /// Copies client bytes upstream until either side ends.
    fn pipe(&mut self) {
        let _ = self.upstream.write_all(&self.buf);
        self.buf.clear();
        let _ = io::copy(&mut self.client, &mut self.upstream);
    }

    fn close_both(&self) {
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.upstream.shutdown(Shutdown::Both);
    }
}

/// Copies upstream bytes to the client, holding a response when the request side asked for a
/// stall. Ends (and closes both sides) when either side does.
fn response_pump(
    mut upstream: TcpStream,
    mut client: TcpStream,
    shared: &Shared,
    stall: &Mutex<Option<Hold>>,
    release: &Mutex<Option<String>>,
) {
    let free = || {
        if let Some(key) = lock(release).take() {
            shared.free_key(&key);
        }
    };
    let mut tmp = vec![0u8; 64 * 1024];
    let mut drip: Option<Duration> = None;
    let wait = |d: Duration| {
        let mut waited = Duration::ZERO;
        while waited < d && !shared.stopping() {
            let step = TICK.min(d - waited);
            thread::sleep(step);
            waited += step;
        }
    };
    'conn: loop {
        let n = match upstream.read(&mut tmp) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        // The store answered: the conditional write it was given is applied (or refused).
        free();
        match lock(stall).take() {
            Some(Hold::Stall(d)) => wait(d),
            Some(Hold::Drip(d)) => drip = Some(d),
            None => {}
        }
        if let Some(every) = drip {
            for b in &tmp[..n] {
                wait(every);
                if shared.stopping() || client.write_all(&[*b]).is_err() {
                    break 'conn;
                }
            }
            continue;
        }
        if shared.stopping() || client.write_all(&tmp[..n]).is_err() {
            break;
        }
    }
    free();
    let _ = client.shutdown(Shutdown::Both);
    let _ = upstream.shutdown(Shutdown::Both);
}

/// An S3-style error response (`<Error><Code>…`), with no body for HEAD.
fn error_response(
    req: &RequestHead,
    status: u16,
    code: &str,
    message: &str,
    request_no: u64,
    close: bool,
    padding: usize,
) -> Vec<u8> {
    let request_id = format!("faultproxy-{request_no}");
    let resource = req.target.split('?').next().unwrap_or("/");
    let body = if req.method.eq_ignore_ascii_case("HEAD") {
        String::new()
    } else {
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{}</Code><Message>{}</Message>\
             {}<Resource>{}</Resource><RequestId>{request_id}</RequestId></Error>",
            xml_escape(code),
            xml_escape(message),
            "<a/>".repeat(padding / 4),
            xml_escape(resource)
        )
    };
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        500 => "Internal Server Error",
        503 => "Slow Down",
        _ => "Error",
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/xml\r\ncontent-length: {}\r\n\
         x-amz-request-id: {request_id}\r\n",
        body.len()
    );
    if close {
        out.push_str("connection: close\r\n");
    }
    out.push_str("\r\n");
    out.push_str(&body);
    out.into_bytes()
}

fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_are_uniform_enough_and_deterministic() {
        let below: usize = (0..10_000).filter(|&n| unit(42, n) < 0.25).count();
        assert!((2200..2800).contains(&below), "{below}");
        assert_eq!(unit(7, 3), unit(7, 3));
        assert_ne!(unit(7, 3), unit(8, 3));
    }

    #[test]
    fn parses_request_heads() {
        let req = parse_head(
            b"PUT /b/k?partNumber=2&uploadId=x HTTP/1.1\r\nHost: h\r\nContent-Length: 12\r\nExpect: 100-continue\r\n\r\n",
        )
        .unwrap_or_else(|| panic!("valid head"));
        assert_eq!(req.method, "PUT");
        assert_eq!(req.target, "/b/k?partNumber=2&uploadId=x");
        assert_eq!(req.content_length, Some(12));
        assert!(req.expect_continue);
        assert!(!req.chunked_or_unknown);
        assert!(parse_head(b"garbage\r\n\r\n").is_none());
        assert!(parse_head(b"GET / HTTP/1.1\r\ncontent-length: x\r\n\r\n").is_none());
    }

    #[test]
    fn invalid_shares_are_refused() {
        assert!(FaultPlan::seeded(1).status_500(1.5).validate().is_err());
        assert!(
            FaultPlan::seeded(1)
                .status_500(0.6)
                .slow_down_503(0.6)
                .validate()
                .is_err()
        );
        assert!(
            FaultPlan::seeded(1)
                .status_500(0.5)
                .slow_down_503(0.5)
                .validate()
                .is_ok()
        );
    }
}
