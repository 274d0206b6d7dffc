//! The HTTP listener on a thread of its own, so that no client can hold up the control thread
//! (signals, drain deadlines, fatal reports): `GET /metrics`, `/health`, `/ready`, `/status`,
//! and `POST /sinks/{name}/pause` (`?flush=true`) and `/resume`, which are handed to the
//! control thread through a bounded queue. Those that change state need the bearer token when
//! one is configured, and are refused without one on an address beyond loopback.
//!
//! The thread owns the listener and every connection, all non-blocking: each connection has a
//! deadline ([`CONNECTION_DEADLINE`]) for the whole exchange and a bounded request head
//! ([`MAX_REQUEST_HEAD`]); at most [`MAX_CONNECTIONS`] are open, and a connection beyond that is
//! answered `503` (best effort, without waiting) and closed. The control thread hands it the
//! rendered pages through a one-slot lock-free mailbox ([`MetricsServer::publish`]).

use std::io::{self, Read as _, Write as _};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use tracing::warn;

use crate::config::Secret;
use crate::ratelog::RateLimit;
use crate::status::Pages;

/// How many connections may be open at once.
pub const MAX_CONNECTIONS: usize = 32;
/// How long one connection may take, from accept to the last byte of the answer.
pub const CONNECTION_DEADLINE: Duration = Duration::from_secs(2);
/// The longest request head read; a longer one is answered `431`.
pub const MAX_REQUEST_HEAD: usize = 8 * 1024;
/// How long the thread sleeps when nothing moved while connections are open.
const IDLE_TICK: Duration = Duration::from_millis(5);
/// Without connections the thread waits for one to arrive, up to this long (then it looks at
/// the stop flag again): an engine nobody scrapes does not wake this thread 200 times a
/// second.
const IDLE_WAIT: Duration = Duration::from_millis(100);

/// The running endpoint.
#[derive(Debug)]
pub struct MetricsServer {
    pages: Arc<ArrayQueue<Arc<Pages>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// What the operator asked for with a `POST`, for the control thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// Pause sink `sink` (config index); `flush`: its sink finishes what it holds.
    Pause {
        /// The sink.
        sink: usize,
        /// Flush as well.
        flush: bool,
    },
    /// Resume sink `sink`.
    Resume {
        /// The sink.
        sink: usize,
    },
}

/// How the endpoint takes requests that change state.
#[derive(Debug, Clone)]
pub struct Control {
    /// The sinks' names, by config index.
    pub names: Vec<String>,
    /// The bearer token those requests need.
    pub token: Option<Secret>,
    /// The listener is on a loopback address (without a token, requests that change state
    /// are taken only then).
    pub loopback: bool,
    /// `/health`'s limit.
    pub health_timeout: Duration,
    /// Where requests go.
    pub requests: Arc<ArrayQueue<Request>>,
    /// The thread to wake for them (the control thread).
    pub wake: Option<std::thread::Thread>,
}

impl Control {
    /// Taking nothing that changes state (the unit tests of the page routes).
    #[cfg(test)]
    pub fn read_only(names: Vec<String>) -> Control {
        Control {
            names,
            token: None,
            loopback: false,
            health_timeout: Duration::from_secs(5),
            requests: Arc::new(ArrayQueue::new(1)),
            wake: None,
        }
    }
}

impl MetricsServer {
    /// Serves `listener` (already bound) on a new thread, with `pages` until others are
    /// published.
    pub fn start(
        listener: TcpListener,
        pages: Pages,
        control: Control,
    ) -> io::Result<MetricsServer> {
        listener.set_nonblocking(true)?;
        let mailbox = Arc::new(ArrayQueue::new(1));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (mailbox, stop) = (Arc::clone(&mailbox), Arc::clone(&stop));
            let first = Arc::new(pages);
            std::thread::Builder::new()
                .name("spillway-metrics".to_owned())
                .spawn(move || serve(&listener, &mailbox, &stop, first, &control))?
        };
        Ok(MetricsServer {
            pages: mailbox,
            stop,
            thread: Some(thread),
        })
    }

    /// Replaces the pages served from now on.
    pub fn publish(&self, pages: Pages) {
        let _ = self.pages.force_push(Arc::new(pages));
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(
    listener: &TcpListener,
    mailbox: &ArrayQueue<Arc<Pages>>,
    stop: &AtomicBool,
    mut page: Arc<Pages>,
    control: &Control,
) {
    let mut conns: Vec<Conn> = Vec::with_capacity(MAX_CONNECTIONS);
    let mut refusals = RateLimit::new(Duration::from_secs(10), 1);
    while !stop.load(Ordering::SeqCst) {
        if let Some(p) = mailbox.pop() {
            page = p;
        }
        let now = Instant::now();
        let mut moved = false;
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    moved = true;
                    if conns.len() >= MAX_CONNECTIONS {
                        refuse(stream);
                        if refusals.admit(now) {
                            warn!(
                                "metrics: {MAX_CONNECTIONS} connections are open; refusing more \
                                 (each may take up to {CONNECTION_DEADLINE:?})"
                            );
                        }
                        continue;
                    }
                    match Conn::new(stream, now) {
                        Ok(c) => conns.push(c),
                        Err(e) => warn!("metrics connection: {e}"),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Out of descriptors and the like: try again on the next tick.
                    if refusals.admit(now) {
                        warn!("metrics: accepting a connection: {e}");
                    }
                    break;
                }
            }
        }
        for c in &mut conns {
            moved |= c.step(&page, control, now);
        }
        conns.retain(|c| !c.done);
        if !moved {
            if conns.is_empty() {
                wait_readable(listener.as_raw_fd(), IDLE_WAIT);
            } else {
                std::thread::sleep(IDLE_TICK);
            }
        }
    }
}

/// Waits until `fd` is readable (for the listener: a connection to accept), at most
/// `timeout`. An error (an interrupted wait) returns early, which the loop takes as a tick.
#[allow(unsafe_code)]
fn wait_readable(fd: std::os::fd::RawFd, timeout: Duration) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: `p` is one valid pollfd and the count passed is 1; poll only writes `revents`.
    let _ = unsafe { libc::poll(&mut p, 1, ms) };
}

/// Answers a connection beyond the cap without waiting for it.
fn refuse(mut stream: TcpStream) {
    let _ = stream.set_nonblocking(true);
    let _ = stream.write(
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    let _ = stream.shutdown(Shutdown::Both);
}

/// One connection: reading its request head, then writing the answer.
struct Conn {
    stream: TcpStream,
    deadline: Instant,
    head: Vec<u8>,
    answer: Option<(Vec<u8>, usize)>,
    done: bool,
}

impl Conn {
    fn new(stream: TcpStream, now: Instant) -> io::Result<Conn> {
        stream.set_nonblocking(true)?;
        Ok(Conn {
            stream,
            deadline: now + CONNECTION_DEADLINE,
            head: Vec::new(),
            answer: None,
            done: false,
        })
    }

    /// Moves the exchange on as far as the socket allows; whether anything moved.
    fn step(&mut self, page: &Pages, control: &Control, now: Instant) -> bool {
        if now >= self.deadline {
            self.close();
            return false;
        }
        let mut moved = false;
        if self.answer.is_none() {
            let mut buf = [0u8; 2048];
            loop {
                match self.stream.read(&mut buf) {
                    Ok(0) => {
                        // The client closed before its request was complete.
                        self.close();
                        return true;
                    }
                    Ok(n) => {
                        moved = true;
                        let room = MAX_REQUEST_HEAD - self.head.len();
                        self.head.extend_from_slice(&buf[..n.min(room)]);
                        if let Some(answer) = answer_for(&self.head, page, control, now) {
                            self.answer = Some((answer, 0));
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return moved,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        self.close();
                        return true;
                    }
                }
            }
        }
        if let Some((answer, sent)) = &mut self.answer {
            while *sent < answer.len() {
                match self.stream.write(&answer[*sent..]) {
                    Ok(0) => break,
                    Ok(n) => {
                        *sent += n;
                        moved = true;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return moved,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            self.close();
        }
        moved
    }

    fn close(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
        self.done = true;
    }
}

/// The answer to a request whose head is (so far) `head`: `None` while the head is incomplete
/// and below the limit.
fn answer_for(head: &[u8], pages: &Pages, control: &Control, now: Instant) -> Option<Vec<u8>> {
    let complete = head.windows(4).any(|w| w == b"\r\n\r\n");
    if !complete && head.len() < MAX_REQUEST_HEAD {
        return None;
    }
    let (status, kind, body): (&str, &str, std::borrow::Cow<'_, str>) = if !complete {
        ("431 Request Header Fields Too Large", TEXT, "".into())
    } else {
        route(head, pages, control, now)
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    Some(out)
}

const TEXT: &str = "text/plain; charset=utf-8";
const PROMETHEUS: &str = "text/plain; version=0.0.4";
const JSON: &str = "application/json";

type Answer<'a> = (&'static str, &'static str, std::borrow::Cow<'a, str>);

fn route<'a>(head: &[u8], pages: &'a Pages, control: &Control, now: Instant) -> Answer<'a> {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let mut parts = line.split(|b| *b == b' ');
    let method = parts.next().unwrap_or_default();
    let target = parts.next().unwrap_or_default();
    let target = std::str::from_utf8(target).unwrap_or_default();
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    match (method, path) {
        (b"GET", "/metrics") => ("200 OK", PROMETHEUS, pages.metrics.as_str().into()),
        (b"GET", "/health") => match crate::status::unhealthy(
            &pages.shards,
            pages.started,
            pages.published,
            control.health_timeout,
            now,
        ) {
            None => ("200 OK", TEXT, "ok\n".into()),
            Some(lines) => ("503 Service Unavailable", TEXT, lines.into()),
        },
        (b"GET", "/ready") => {
            if pages.not_ready.is_empty() {
                ("200 OK", TEXT, "ready\n".into())
            } else {
                let mut body = pages.not_ready.join("\n");
                body.push('\n');
                ("503 Service Unavailable", TEXT, body.into())
            }
        }
        (b"GET", "/status") => ("200 OK", JSON, pages.status.as_str().into()),
        (_, "/metrics" | "/health" | "/ready" | "/status") => {
            ("405 Method Not Allowed", TEXT, "use GET\n".into())
        }
        _ => match path
            .strip_prefix("/sinks/")
            .and_then(|r| r.rsplit_once('/'))
        {
            Some((name, verb @ ("pause" | "resume"))) => {
                if method != b"POST" {
                    return ("405 Method Not Allowed", TEXT, "use POST\n".into());
                }
                change(head, name, verb, query, control)
            }
            _ => (
                "404 Not Found",
                TEXT,
                "try /metrics, /health, /ready, /status, POST /sinks/{name}/pause or /resume\n"
                    .into(),
            ),
        },
    }
}

/// `POST /sinks/{name}/{verb}`.
fn change<'a>(head: &[u8], name: &str, verb: &str, query: &str, control: &Control) -> Answer<'a> {
    if let Err(refusal) = authorized(head, control) {
        return refusal;
    }
    let Some(sink) = control.names.iter().position(|n| n == name) else {
        return (
            "404 Not Found",
            TEXT,
            format!(
                "no sink named {name:?} (sinks: {})\n",
                control.names.join(", ")
            )
            .into(),
        );
    };
    let flush = query
        .split('&')
        .any(|kv| kv == "flush=true" || kv == "flush");
    let request = match verb {
        "pause" => Request::Pause { sink, flush },
        _ => Request::Resume { sink },
    };
    if control.requests.push(request).is_err() {
        return (
            "503 Service Unavailable",
            TEXT,
            "too many requests waiting for the control thread; try again\n".into(),
        );
    }
    if let Some(t) = &control.wake {
        t.unpark();
    }
    let what = match request {
        Request::Pause { flush: true, .. } => "pausing and flushing",
        Request::Pause { .. } => "pausing",
        Request::Resume { .. } => "resuming",
    };
    (
        "202 Accepted",
        TEXT,
        format!("sink {name:?}: {what} (GET /status shows its state)\n").into(),
    )
}

/// Whether a request that changes state may: with a token configured, it must carry
/// `Authorization: Bearer <token>`; without one, only on a loopback listener.
fn authorized<'a>(head: &[u8], control: &Control) -> Result<(), Answer<'a>> {
    let Some(token) = &control.token else {
        if control.loopback {
            return Ok(());
        }
        return Err((
            "403 Forbidden",
            TEXT,
            "pause and resume need a token on an address beyond loopback: set metrics.token, metrics.token_file or SPILLWAY_CONTROL_TOKEN\n"
                .into(),
        ));
    };
    let given = head
        .split(|b| *b == b'\n')
        .skip(1)
        .filter_map(|l| {
            let l = l.strip_suffix(b"\r").unwrap_or(l);
            let colon = l.iter().position(|b| *b == b':')?;
            let (name, value) = l.split_at(colon);
            name.eq_ignore_ascii_case(b"authorization")
                .then(|| value[1..].trim_ascii())
        })
        .next();
    let expected = token.expose().as_bytes();
    match given.and_then(|v| {
        v.get(..7)
            .filter(|p| p.eq_ignore_ascii_case(b"bearer "))
            .map(|_| v[7..].trim_ascii())
    }) {
        Some(v) if same(v, expected) => Ok(()),
        Some(_) => Err(("403 Forbidden", TEXT, "wrong token\n".into())),
        None => Err((
            "401 Unauthorized",
            TEXT,
            "send Authorization: Bearer <token> (metrics.token)\n".into(),
        )),
    }
}

/// Compares in time that depends on the lengths only.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn text(answer: Option<Vec<u8>>) -> String {
        String::from_utf8(answer.unwrap()).unwrap()
    }

    fn pages(metrics: &str) -> Pages {
        Pages::initial(metrics.to_owned(), 1, Instant::now())
    }

    fn start(listener: TcpListener, metrics: &str) -> MetricsServer {
        MetricsServer::start(listener, pages(metrics), Control::read_only(vec![])).unwrap()
    }

    /// The answer to `head` with `metrics` as the page and nothing that changes state taken.
    fn ask(head: &[u8], metrics: &str) -> Option<Vec<u8>> {
        answer_for(
            head,
            &pages(metrics),
            &Control::read_only(vec![]),
            Instant::now(),
        )
    }

    /// Each metrics thread of this process (the kernel keeps 15 bytes of the name:
    /// `spillway-metric`) by thread id, with its voluntary context switches (its sleeps).
    fn metrics_threads() -> std::collections::BTreeMap<String, u64> {
        let mut out = std::collections::BTreeMap::new();
        for task in std::fs::read_dir("/proc/self/task").unwrap() {
            let dir = task.unwrap().path();
            let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
                continue;
            };
            if comm.trim() != "spillway-metric" {
                continue;
            }
            let Ok(status) = std::fs::read_to_string(dir.join("status")) else {
                continue;
            };
            if let Some(n) = status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse().ok())
            {
                out.insert(dir.display().to_string(), n);
            }
        }
        out
    }

    #[test]
    fn an_idle_endpoint_waits_for_connections_instead_of_ticking_and_still_answers() {
        let others = metrics_threads();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = start(listener, "m 1\n");
        std::thread::sleep(Duration::from_millis(200));
        let before = metrics_threads();
        std::thread::sleep(Duration::from_secs(1));
        let after = metrics_threads();
        // This test's thread is one of those started since (tests run in parallel; any idle
        // one will do, a ticking one never would): the fewest wake-ups among them.
        let woke = after
            .iter()
            .filter(|(tid, _)| !others.contains_key(*tid))
            .filter_map(|(tid, n)| before.get(tid).map(|b| n - b))
            .min()
            .unwrap();
        // With a 5 ms tick it woke about 200 times a second; waiting on the listener, ~10.
        assert!(
            woke <= 30,
            "the idle metrics thread woke {woke} times in 1 s"
        );
        let started = Instant::now();
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        let mut answer = String::new();
        c.read_to_string(&mut answer).unwrap();
        assert!(answer.ends_with("m 1\n"), "{answer}");
        assert!(started.elapsed() < Duration::from_secs(2));
        drop(server);
    }

    #[test]
    fn answers_a_complete_head_and_waits_for_an_incomplete_one() {
        assert!(ask(b"GET /metrics HTTP/1.1\r\nHost: x\r\n", "m 1\n").is_none());
        let ok = text(ask(b"GET /metrics HTTP/1.1\r\n\r\n", "m 1\n"));
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(
            ok.ends_with("Content-Length: 4\r\nConnection: close\r\n\r\nm 1\n"),
            "{ok}"
        );
        let q = text(ask(b"GET /metrics?x=1 HTTP/1.1\r\n\r\n", "m"));
        assert!(q.starts_with("HTTP/1.1 200"), "{q}");
        let other = text(ask(b"GET / HTTP/1.1\r\n\r\n", "m"));
        assert!(other.starts_with("HTTP/1.1 404"), "{other}");
        let post = text(ask(b"POST /metrics HTTP/1.1\r\n\r\n", "m"));
        assert!(post.starts_with("HTTP/1.1 405"), "{post}");
    }

    #[test]
    fn a_head_at_the_limit_without_its_end_is_refused() {
        let head = vec![b'a'; MAX_REQUEST_HEAD];
        let too_long = text(ask(&head, "m"));
        assert!(too_long.starts_with("HTTP/1.1 431"), "{too_long}");
        assert!(ask(&head[..MAX_REQUEST_HEAD - 1], "m").is_none());
    }

    #[test]
    fn serves_the_published_page_and_closes_connections_past_their_deadline() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let server = start(listener, "first\n");
        let get = || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
            let mut reply = String::new();
            s.read_to_string(&mut reply).unwrap();
            reply
        };
        assert!(get().ends_with("\r\n\r\nfirst\n"));
        server.publish(pages("second\n"));
        let deadline = Instant::now() + Duration::from_secs(5);
        while !get().ends_with("second\n") {
            assert!(Instant::now() < deadline, "the new page is served");
        }
        // A client that never finishes its request is closed at the deadline.
        let mut idle = TcpStream::connect(addr).unwrap();
        idle.set_read_timeout(Some(CONNECTION_DEADLINE * 3))
            .unwrap();
        idle.write_all(b"GET /met").unwrap();
        let start = Instant::now();
        let mut buf = [0u8; 16];
        assert_eq!(idle.read(&mut buf).unwrap_or(0), 0);
        let took = start.elapsed();
        assert!(
            took >= CONNECTION_DEADLINE - Duration::from_millis(100)
                && took < CONNECTION_DEADLINE * 2,
            "{took:?}"
        );
    }

    #[test]
    fn connections_beyond_the_cap_are_answered_503_at_once() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let _server = start(listener, "m\n");
        let held: Vec<TcpStream> = (0..MAX_CONNECTIONS)
            .map(|_| TcpStream::connect(addr).unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        let mut extra = TcpStream::connect(addr).unwrap();
        extra
            .set_read_timeout(Some(Duration::from_secs(1)))
            .unwrap();
        let mut reply = String::new();
        let _ = extra.read_to_string(&mut reply);
        assert!(reply.starts_with("HTTP/1.1 503"), "{reply:?}");
        drop(held);
    }
}
