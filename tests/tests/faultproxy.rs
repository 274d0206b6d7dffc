//! The fault proxy between a std HTTP client and a plain HTTP upstream (std threads): each
//! fault happens as configured, deterministically for a seed, and dropping the proxy ends it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use spillway_tests::{FaultPlan, FaultProxy, FaultStats};

// ------------------------------------------------------------------------------ upstream

#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    method: String,
    target: String,
    body: Vec<u8>,
    /// False when the connection ended before the whole body arrived.
    complete: bool,
}

/// An HTTP/1.1 server answering `200` with `method target body-length` as the body.
struct Upstream {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Upstream {
    fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let _ = stream.set_nodelay(true);
                let s = s.clone();
                thread::spawn(move || serve(stream, &s));
            }
        });
        Upstream { addr, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve(mut stream: TcpStream, seen: &Mutex<Vec<Seen>>) {
    let mut buf = Vec::new();
    loop {
        let Some((head, len)) = read_head(&mut stream, &mut buf) else {
            return;
        };
        let mut words = head.split(' ');
        let method = words.next().unwrap_or_default().to_owned();
        let target = words.next().unwrap_or_default().to_owned();
        let len = len.unwrap_or(0);
        let complete = fill_to(&mut stream, &mut buf, len);
        let take = len.min(buf.len());
        let body: Vec<u8> = buf.drain(..take).collect();
        let answer = format!("{method} {target} {}", body.len());
        seen.lock().unwrap().push(Seen {
            method: method.clone(),
            target,
            body,
            complete,
        });
        if !complete {
            return;
        }
        let response = if method == "HEAD" {
            format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n",
                answer.len()
            )
        } else {
            format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{answer}",
                answer.len()
            )
        };
        if stream.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

/// Reads a head from `stream` (buffered in `buf`): its text and content-length; `None` at the
/// end of the stream or on an error.
fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(String, Option<usize>)> {
    read_head_io(stream, buf).ok().flatten()
}

/// Like [`read_head`], with the I/O error kept.
fn read_head_io(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> io::Result<Option<(String, Option<usize>)>> {
    loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head: Vec<u8> = buf.drain(..at + 4).collect();
            let text = String::from_utf8_lossy(&head).into_owned();
            let len = text.lines().find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())
                    .flatten()
            });
            return Ok(Some((text, len)));
        }
        let mut tmp = [0u8; 16 * 1024];
        match stream.read(&mut tmp)? {
            0 => return Ok(None),
            n => buf.extend_from_slice(&tmp[..n]),
        }
    }
}

/// Reads until `buf` holds `len` bytes; false if the stream ended first.
fn fill_to(stream: &mut TcpStream, buf: &mut Vec<u8>, len: usize) -> bool {
    let mut tmp = [0u8; 16 * 1024];
    while buf.len() < len {
        match stream.read(&mut tmp) {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    }
    true
}

// ------------------------------------------------------------------------------ client

#[derive(Debug)]
struct Resp {
    status: u16,
    head: String,
    body: String,
}

struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_nodelay(true).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    fn send(&mut self, method: &str, target: &str, body: &[u8]) -> io::Result<()> {
        let head = format!(
            "{method} {target} HTTP/1.1\r\nhost: s3.test\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        self.stream.write_all(head.as_bytes())?;
        self.stream.write_all(body)
    }

    fn receive(&mut self, method: &str) -> io::Result<Resp> {
        let Some((head, len)) = read_head_io(&mut self.stream, &mut self.buf)? else {
            return Err(io::ErrorKind::UnexpectedEof.into());
        };
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let len = if method == "HEAD" {
            0
        } else {
            len.unwrap_or(0)
        };
        if !fill_to(&mut self.stream, &mut self.buf, len) {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let body = String::from_utf8(self.buf.drain(..len).collect()).unwrap();
        Ok(Resp { status, head, body })
    }

    fn request(&mut self, method: &str, target: &str, body: &[u8]) -> io::Result<Resp> {
        self.send(method, target, body)?;
        self.receive(method)
    }
}

fn body(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

// ------------------------------------------------------------------------------ tests

#[test]
fn passthrough_forwards_every_request_on_one_connection() {
    let upstream = Upstream::start();
    let proxy = FaultProxy::start(upstream.addr, FaultPlan::passthrough()).unwrap();
    let mut client = Client::connect(proxy.addr());
    for i in 0..5 {
        let data = body(100_000 + i);
        let resp = client.request("PUT", &format!("/b/k{i}"), &data).unwrap();
        assert_eq!(resp.status, 200);
        assert_eq!(resp.body, format!("PUT /b/k{i} {}", data.len()));
        let resp = client.request("GET", &format!("/b/k{i}"), b"").unwrap();
        assert_eq!(resp.body, format!("GET /b/k{i} 0"));
    }
    let seen = upstream.seen();
    assert_eq!(seen.len(), 10);
    assert_eq!(seen[4].body, body(100_002));
    assert_eq!(
        proxy.stats(),
        FaultStats {
            connections: 1,
            requests: 10,
            forwarded: 10,
            ..FaultStats::default()
        }
    );
}

#[test]
fn status_500_is_answered_by_the_proxy_and_the_connection_stays_usable() {
    let upstream = Upstream::start();
    let proxy = FaultProxy::start(upstream.addr, FaultPlan::seeded(1).status_500(1.0)).unwrap();
    let mut client = Client::connect(proxy.addr());
    for _ in 0..3 {
        let resp = client
            .request("PUT", "/b/k?partNumber=1", &body(5000))
            .unwrap();
        assert_eq!(resp.status, 500);
        assert!(
            resp.body.contains("<Code>InternalError</Code>"),
            "{}",
            resp.body
        );
        assert!(
            resp.body.contains("<Resource>/b/k</Resource>"),
            "{}",
            resp.body
        );
    }
    assert!(upstream.seen().is_empty());
    let stats = proxy.stats();
    assert_eq!(stats.status_500, 3);
    assert_eq!(stats.forwarded, 0);
}

#[test]
fn slow_down_503_carries_the_s3_code_and_request_id() {
    let upstream = Upstream::start();
    let proxy = FaultProxy::start(upstream.addr, FaultPlan::seeded(1).slow_down_503(1.0)).unwrap();
    let mut client = Client::connect(proxy.addr());
    let resp = client.request("PUT", "/b/k", &body(10)).unwrap();
    assert_eq!(resp.status, 503);
    assert!(resp.body.contains("<Code>SlowDown</Code>"), "{}", resp.body);
    assert!(
        resp.head.contains("x-amz-request-id: faultproxy-1"),
        "{}",
        resp.head
    );
    assert!(resp.head.contains("content-type: application/xml"));
    assert_eq!(proxy.stats().slow_down_503, 1);
    assert!(upstream.seen().is_empty());
}

#[test]
fn drop_mid_body_cuts_the_request_and_closes_the_client() {
    let upstream = Upstream::start();
    let proxy = FaultProxy::start(upstream.addr, FaultPlan::seeded(1).drop_mid_body(1.0)).unwrap();
    let mut client = Client::connect(proxy.addr());
    // The write may fail once the proxy has closed; the read must see the end of the stream.
    let _ = client.send("PUT", "/b/k", &body(1000));
    let err = client.receive("PUT").unwrap_err();
    assert!(
        matches!(
            err.kind(),
            io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset
        ),
        "{err:?}"
    );
    // The upstream got the head and half of the body, then the close.
    let deadline = Instant::now() + Duration::from_secs(5);
    while upstream.seen().is_empty() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1);
    assert!(!seen[0].complete);
    assert_eq!(seen[0].body.len(), 500);
    assert_eq!(proxy.stats().dropped_mid_body, 1);
}

#[test]
fn stall_holds_the_response_past_the_client_timeout() {
    let upstream = Upstream::start();
    let proxy = FaultProxy::start(
        upstream.addr,
        FaultPlan::seeded(1).stall(1.0, Duration::from_millis(800)),
    )
    .unwrap();
    let mut client = Client::connect(proxy.addr());
    client
        .stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let started = Instant::now();
    client.send("GET", "/b/k", b"").unwrap();
    let err = client.receive("GET").unwrap_err();
    assert!(
        matches!(
            err.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ),
        "{err:?}"
    );
    // The server did the work; the answer comes once the stall is over.
    assert_eq!(upstream.seen().len(), 1);
    client
        .stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let resp = client.receive("GET").unwrap();
    assert_eq!(resp.body, "GET /b/k 0");
    assert!(started.elapsed() >= Duration::from_millis(750));
    assert_eq!(proxy.stats().stalled, 1);
}

#[test]
fn answer_all_gives_a_permanent_error() {
    let upstream = Upstream::start();
    let proxy =
        FaultProxy::start(upstream.addr, FaultPlan::answer_all(403, "AccessDenied")).unwrap();
    let mut client = Client::connect(proxy.addr());
    for (method, data) in [("PUT", body(3000)), ("GET", Vec::new()), ("POST", body(10))] {
        let resp = client.request(method, "/b/k?uploads", &data).unwrap();
        assert_eq!(resp.status, 403);
        assert!(
            resp.body.contains("<Code>AccessDenied</Code>"),
            "{}",
            resp.body
        );
    }
    let resp = client.request("HEAD", "/b", b"").unwrap();
    assert_eq!(resp.status, 403);
    assert!(resp.body.is_empty());
    assert!(upstream.seen().is_empty());
    assert_eq!(proxy.stats().answered_fixed, 4);
}

/// Runs `n` GETs through a fresh proxy with `plan`, reconnecting after a dropped connection;
/// returns what each request got (status, or 0 for a drop) and the proxy's counters.
fn run_mix(upstream: &Upstream, plan: FaultPlan, n: usize) -> (Vec<u16>, FaultStats) {
    let proxy = FaultProxy::start(upstream.addr, plan).unwrap();
    let mut client = Client::connect(proxy.addr());
    let mut outcomes = Vec::new();
    for i in 0..n {
        match client.request("PUT", &format!("/b/k{i}"), &body(64)) {
            Ok(resp) => outcomes.push(resp.status),
            Err(_) => {
                outcomes.push(0);
                client = Client::connect(proxy.addr());
            }
        }
    }
    (outcomes, proxy.stats())
}

#[test]
fn shares_are_followed_and_deterministic_for_a_seed() {
    let upstream = Upstream::start();
    let plan = FaultPlan::seeded(0xfeed)
        .status_500(0.2)
        .slow_down_503(0.2)
        .drop_mid_body(0.1);
    let (first, stats) = run_mix(&upstream, plan.clone(), 300);
    let (second, stats2) = run_mix(&upstream, plan, 300);
    assert_eq!(first, second);
    assert_eq!(stats.requests, 300);
    assert_eq!(stats.faults() + stats.forwarded, 300);
    assert_eq!(
        stats.status_500,
        first.iter().filter(|s| **s == 500).count()
    );
    assert_eq!(
        stats.slow_down_503,
        first.iter().filter(|s| **s == 503).count()
    );
    assert_eq!(
        stats.dropped_mid_body,
        first.iter().filter(|s| **s == 0).count()
    );
    assert!((35..=85).contains(&stats.status_500), "{stats:?}");
    assert!((35..=85).contains(&stats.slow_down_503), "{stats:?}");
    assert!((10..=50).contains(&stats.dropped_mid_body), "{stats:?}");
    assert_eq!(stats.connections, 1 + stats.dropped_mid_body);
    assert_eq!(
        (
            stats2.status_500,
            stats2.slow_down_503,
            stats2.dropped_mid_body
        ),
        (
            stats.status_500,
            stats.slow_down_503,
            stats.dropped_mid_body
        )
    );
    let (other, _) = run_mix(
        &upstream,
        FaultPlan::seeded(1)
            .status_500(0.2)
            .slow_down_503(0.2)
            .drop_mid_body(0.1),
        300,
    );
    assert_ne!(first, other);
}

#[test]
fn max_faults_caps_the_injected_faults() {
    let upstream = Upstream::start();
    let (outcomes, stats) = run_mix(
        &upstream,
        FaultPlan::seeded(3).status_500(1.0).max_faults(3),
        8,
    );
    assert_eq!(outcomes, vec![500, 500, 500, 200, 200, 200, 200, 200]);
    assert_eq!(stats.status_500, 3);
    assert_eq!(stats.forwarded, 5);
}

#[test]
fn filters_pick_the_requests_that_get_faults() {
    let upstream = Upstream::start();
    let proxy = FaultProxy::start(
        upstream.addr,
        FaultPlan::seeded(1).status_500(1.0).only_methods(&["put"]),
    )
    .unwrap();
    let mut client = Client::connect(proxy.addr());
    assert_eq!(client.request("GET", "/b/k", b"").unwrap().status, 200);
    assert_eq!(client.request("PUT", "/b/k", b"x").unwrap().status, 500);

    proxy
        .set_plan(
            FaultPlan::seeded(1)
                .status_500(1.0)
                .path_contains("partNumber="),
        )
        .unwrap();
    assert_eq!(client.request("PUT", "/b/k", b"x").unwrap().status, 200);
    assert_eq!(
        client
            .request("PUT", "/b/k?partNumber=2&uploadId=u", b"x")
            .unwrap()
            .status,
        500
    );
    assert_eq!(
        client
            .request("POST", "/b/k?uploadId=u", b"x")
            .unwrap()
            .status,
        200
    );
    let stats = proxy.stats();
    assert_eq!((stats.status_500, stats.forwarded), (2, 3));
}

#[test]
fn dropping_the_proxy_closes_its_connections_and_port() {
    let upstream = Upstream::start();
    let proxy = FaultProxy::start(
        upstream.addr,
        FaultPlan::seeded(1).stall(1.0, Duration::from_secs(60)),
    )
    .unwrap();
    let addr = proxy.addr();
    let mut client = Client::connect(addr);
    client.send("GET", "/b/k", b"").unwrap();
    // Wait until the request is forwarded (the response is now held for a minute).
    let deadline = Instant::now() + Duration::from_secs(5);
    while upstream.seen().is_empty() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    let started = Instant::now();
    drop(proxy);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "drop took {:?}",
        started.elapsed()
    );
    let err = client.receive("GET").unwrap_err();
    assert!(
        matches!(
            err.kind(),
            io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset
        ),
        "{err:?}"
    );
    assert!(TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err());
}

#[test]
fn invalid_plan_is_refused() {
    let upstream = Upstream::start();
    let err = FaultProxy::start(
        upstream.addr,
        FaultPlan::seeded(1)
            .status_500(0.7)
            .stall(0.7, Duration::from_secs(1)),
    )
    .unwrap_err();
    assert!(err.to_string().contains("more than 1"), "{err}");
}

/// Per path: requests held now, the most held at once.
type Held = Arc<Mutex<std::collections::HashMap<String, (u32, u32)>>>;

/// An upstream that holds every request 200 ms and records, per path, the most requests it
/// held at once.
fn slow_upstream() -> (SocketAddr, Held) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let held: Held = Arc::default();
    let h = Arc::clone(&held);
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let h = Arc::clone(&h);
            thread::spawn(move || {
                let mut buf = Vec::new();
                while let Some((head, len)) = read_head(&mut stream, &mut buf) {
                    if !fill_to(&mut stream, &mut buf, len.unwrap_or(0)) {
                        return;
                    }
                    buf.drain(..len.unwrap_or(0));
                    // Held per path: the query (an upload id) does not make another key.
                    let target = head.split(' ').nth(1).unwrap_or_default();
                    let target = target.split('?').next().unwrap_or_default().to_owned();
                    {
                        let mut m = h.lock().unwrap();
                        let e = m.entry(target.clone()).or_default();
                        e.0 += 1;
                        e.1 = e.1.max(e.0);
                    }
                    thread::sleep(Duration::from_millis(200));
                    h.lock().unwrap().entry(target).or_default().0 -= 1;
                    let ok = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
                    if ok.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, held)
}

/// Conditional writes to one key reach the store one at a time, as S3 applies them atomically
/// (s3s-fs checks the condition, then writes: two overlapping writes under one `If-Match` both
/// pass there). Writes to other keys, and unconditional ones, still overlap.
#[test]
fn conditional_writes_to_one_key_pass_one_at_a_time() {
    let (upstream, held) = slow_upstream();
    let proxy = FaultProxy::start(upstream, FaultPlan::passthrough()).unwrap();
    let put = |target: &'static str, condition: &'static str| {
        let addr = proxy.addr();
        thread::spawn(move || {
            let mut c = Client::connect(addr);
            let head = format!(
                "PUT {target} HTTP/1.1\r\nhost: s3.test\r\n{condition}content-length: 2\r\n\r\nhi"
            );
            c.stream.write_all(head.as_bytes()).unwrap();
            c.receive("PUT").unwrap().status
        })
    };
    let threads = vec![
        put("/b/marker.json", "if-match: \"e1\"\r\n"),
        put("/b/marker.json", "if-match: \"e1\"\r\n"),
        put("/b/object?uploadId=1", "if-none-match: *\r\n"),
        put("/b/object?uploadId=2", "if-none-match: *\r\n"),
        put("/b/plain", ""),
        put("/b/plain", ""),
    ];
    for t in threads {
        assert_eq!(t.join().unwrap(), 200);
    }
    let held = held.lock().unwrap().clone();
    assert_eq!(held["/b/marker.json"].1, 1, "{held:?}");
    assert_eq!(
        held["/b/plain"].1, 2,
        "unconditional writes overlap: {held:?}"
    );
    // Two completions of one key (different upload ids) are one key.
    assert_eq!(held["/b/object"].1, 1, "{held:?}");
}
