//! The `/metrics` endpoint on a thread of its own, so that no client can hold up the control
//! thread (signals, drain deadlines, fatal reports).
//!
//! The thread owns the listener and every connection, all non-blocking: each connection has a
//! deadline ([`CONNECTION_DEADLINE`]) for the whole exchange and a bounded request head
//! ([`MAX_REQUEST_HEAD`]); at most [`MAX_CONNECTIONS`] are open, and a connection beyond that is
//! answered `503` (best effort, without waiting) and closed. The control thread hands it the
//! rendered page through a one-slot lock-free mailbox ([`MetricsServer::publish`]).

use std::io::{self, Read as _, Write as _};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use tracing::warn;

use crate::ratelog::RateLimit;

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
    page: Arc<ArrayQueue<Arc<str>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Serves `listener` (already bound) on a new thread, with `page` as the first body.
    pub fn start(listener: TcpListener, page: String) -> io::Result<MetricsServer> {
        listener.set_nonblocking(true)?;
        let mailbox = Arc::new(ArrayQueue::new(1));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (mailbox, stop) = (Arc::clone(&mailbox), Arc::clone(&stop));
            let first: Arc<str> = Arc::from(page);
            std::thread::Builder::new()
                .name("spillway-metrics".to_owned())
                .spawn(move || serve(&listener, &mailbox, &stop, first))?
        };
        Ok(MetricsServer {
            page: mailbox,
            stop,
            thread: Some(thread),
        })
    }

    /// Replaces the page served from now on.
    pub fn publish(&self, page: String) {
        let _ = self.page.force_push(Arc::from(page));
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
    mailbox: &ArrayQueue<Arc<str>>,
    stop: &AtomicBool,
    mut page: Arc<str>,
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
            moved |= c.step(&page, now);
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
    fn step(&mut self, page: &str, now: Instant) -> bool {
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
                        if let Some(answer) = answer_for(&self.head, page) {
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
fn answer_for(head: &[u8], page: &str) -> Option<Vec<u8>> {
    let complete = head.windows(4).any(|w| w == b"\r\n\r\n");
    if !complete && head.len() < MAX_REQUEST_HEAD {
        return None;
    }
    let (status, body) = if !complete {
        ("431 Request Header Fields Too Large", "")
    } else {
        let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
        let mut parts = line.split(|b| *b == b' ');
        let method = parts.next().unwrap_or_default();
        let path = parts.next().unwrap_or_default();
        let metrics = path == b"/metrics" || path.starts_with(b"/metrics?");
        match (method, metrics) {
            (b"GET", true) => ("200 OK", page),
            (b"GET", false) => ("404 Not Found", "try /metrics\n"),
            _ => ("405 Method Not Allowed", ""),
        }
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn text(answer: Option<Vec<u8>>) -> String {
        String::from_utf8(answer.unwrap()).unwrap()
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
        let server = MetricsServer::start(listener, "m 1\n".to_owned()).unwrap();
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
        assert!(answer_for(b"GET /metrics HTTP/1.1\r\nHost: x\r\n", "m 1\n").is_none());
        let ok = text(answer_for(b"GET /metrics HTTP/1.1\r\n\r\n", "m 1\n"));
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(
            ok.ends_with("Content-Length: 4\r\nConnection: close\r\n\r\nm 1\n"),
            "{ok}"
        );
        let q = text(answer_for(b"GET /metrics?x=1 HTTP/1.1\r\n\r\n", "m"));
        assert!(q.starts_with("HTTP/1.1 200"), "{q}");
        let other = text(answer_for(b"GET / HTTP/1.1\r\n\r\n", "m"));
        assert!(other.starts_with("HTTP/1.1 404"), "{other}");
        let post = text(answer_for(b"POST /metrics HTTP/1.1\r\n\r\n", "m"));
        assert!(post.starts_with("HTTP/1.1 405"), "{post}");
    }

    #[test]
    fn a_head_at_the_limit_without_its_end_is_refused() {
        let head = vec![b'a'; MAX_REQUEST_HEAD];
        let too_long = text(answer_for(&head, "m"));
        assert!(too_long.starts_with("HTTP/1.1 431"), "{too_long}");
        assert!(answer_for(&head[..MAX_REQUEST_HEAD - 1], "m").is_none());
    }

    #[test]
    fn serves_the_published_page_and_closes_connections_past_their_deadline() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let server = MetricsServer::start(listener, "first\n".to_owned()).unwrap();
        let get = || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
            let mut reply = String::new();
            s.read_to_string(&mut reply).unwrap();
            reply
        };
        assert!(get().ends_with("\r\n\r\nfirst\n"));
        server.publish("second\n".to_owned());
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
        let _server = MetricsServer::start(listener, "m\n".to_owned()).unwrap();
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
