//! The monoio transport against servers: a small HTTP/1.1 server in a std thread (plain and
//! rustls), and s3s-fs started by the harness.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use spillway_s3::endpoint::Scheme;
use spillway_s3::transport::{Client, Target, TlsConfig, TransportConfig};
use spillway_s3::{Body, Method, Request, TransportError};
use spillway_tests::{S3Server, TestCa};

fn run<F: Future>(f: F) -> F::Output {
    monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
        .enable_timer()
        .build()
        .expect("monoio runtime")
        .block_on(f)
}

/// The same on the legacy (epoll) driver, the fallback where io_uring is missing.
fn run_legacy<F: Future>(f: F) -> F::Output {
    monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
        .enable_timer()
        .build()
        .expect("monoio legacy runtime")
        .block_on(f)
}

// ------------------------------------------------------------------------------ test server

/// A request as the test server saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
    head: Vec<u8>,
    body: Vec<u8>,
    /// Index of the connection it came on (0 = first accepted).
    conn: usize,
}

impl Seen {
    fn header(&self, name: &str) -> Option<String> {
        let head = String::from_utf8_lossy(&self.head).into_owned();
        head.lines().skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }
}

/// What the server does with a request.
enum Reply {
    /// Writes these bytes and waits for the next request.
    Send(Vec<u8>),
    /// Writes these bytes, then closes the connection.
    SendThenClose(Vec<u8>),
    /// Waits this long before answering with the bytes.
    After(Duration, Vec<u8>),
    /// Writes the bytes one at a time, this long apart (a store dripping its answer).
    Drip(Duration, Vec<u8>),
    /// Closes without answering.
    Close,
}

type Handler = Arc<dyn Fn(&Seen) -> Reply + Send + Sync>;

fn ok(body: &[u8]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body);
    out
}

struct TestServer {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
}

/// A connection the server handles: plain TCP or rustls over TCP.
trait Wire: Read + Write + Send + 'static {}
impl<T: Read + Write + Send + 'static> Wire for T {}

impl TestServer {
    fn start(handler: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> TestServer {
        Self::start_with(Arc::new(handler), None)
    }

    fn start_tls(
        tls: Arc<rustls::ServerConfig>,
        handler: impl Fn(&Seen) -> Reply + Send + Sync + 'static,
    ) -> TestServer {
        Self::start_with(Arc::new(handler), Some(tls))
    }

    fn start_with(handler: Handler, tls: Option<Arc<rustls::ServerConfig>>) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s, st) = (connections.clone(), seen.clone(), stop.clone());
        thread::spawn(move || {
            for stream in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let index = c.fetch_add(1, Ordering::SeqCst);
                let (handler, seen, tls) = (handler.clone(), s.clone(), tls.clone());
                thread::spawn(move || {
                    let wire: Box<dyn Wire> = match tls {
                        None => Box::new(stream),
                        Some(cfg) => {
                            let conn = rustls::ServerConnection::new(cfg).unwrap();
                            Box::new(rustls::StreamOwned::new(conn, stream))
                        }
                    };
                    serve(wire, index, &*handler, &seen);
                });
            }
        });
        TestServer {
            addr,
            connections,
            seen,
            stop,
        }
    }

    fn target(&self) -> Target {
        Target::new(Scheme::Http, "127.0.0.1", self.addr.port())
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.addr.port())
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

/// Reads requests (head + content-length body) and answers them until the client closes.
fn serve(
    mut wire: Box<dyn Wire>,
    conn: usize,
    handler: &dyn Fn(&Seen) -> Reply,
    seen: &Mutex<Vec<Seen>>,
) {
    let mut buf: Vec<u8> = Vec::new();
    let mut tmp = vec![0u8; 64 * 1024];
    loop {
        let head_end = loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            match wire.read(&mut tmp) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
        };
        let head: Vec<u8> = buf.drain(..head_end).collect();
        let text = String::from_utf8_lossy(&head).into_owned();
        let mut words = text.split(' ');
        let method = words.next().unwrap_or_default().to_owned();
        let target = words.next().unwrap_or_default().to_owned();
        let mut request = Seen {
            method,
            target,
            head,
            body: Vec::new(),
            conn,
        };
        let len: usize = request
            .header("content-length")
            .map(|v| v.parse().unwrap())
            .unwrap_or(0);
        if request.header("x-test-slow-read").is_some() {
            // Let the client's socket buffer fill up: its writes must then be partial.
            thread::sleep(Duration::from_millis(300));
        }
        while buf.len() < len {
            match wire.read(&mut tmp) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
        }
        request.body = buf.drain(..len).collect();
        let reply = handler(&request);
        seen.lock().unwrap().push(request);
        let result = match reply {
            Reply::Send(bytes) => wire.write_all(&bytes).and_then(|()| wire.flush()),
            Reply::After(wait, bytes) => {
                thread::sleep(wait);
                wire.write_all(&bytes).and_then(|()| wire.flush())
            }
            Reply::Drip(every, bytes) => bytes.iter().try_for_each(|b| {
                thread::sleep(every);
                wire.write_all(&[*b]).and_then(|()| wire.flush())
            }),
            Reply::SendThenClose(bytes) => {
                let _ = wire.write_all(&bytes);
                let _ = wire.flush();
                return;
            }
            Reply::Close => return,
        };
        if result.is_err() {
            return;
        }
    }
}

fn get(host: &str, path: &str) -> Request {
    Request::new(Method::Get, host, path)
}

fn quick_config() -> TransportConfig {
    TransportConfig {
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(10),
        ..TransportConfig::default()
    }
}

// ------------------------------------------------------------------------------ runtime

#[test]
fn runtime_driver_in_use_is_reported() {
    let uring = monoio::utils::detect_uring();
    let legacy = run(async { monoio::utils::is_legacy() });
    eprintln!("io_uring supported here: {uring}; runtime uses the legacy driver: {legacy}");
    assert_eq!(legacy, !uring);
}

// ------------------------------------------------------------------------------ pooling

#[test]
fn one_connection_carries_many_requests() {
    let server = TestServer::start(|req| Reply::Send(ok(req.target.as_bytes())));
    let client = Client::new(quick_config()).unwrap();
    let target = server.target();
    run(async {
        for i in 0..20 {
            let resp = client
                .send(&target, &get(&server.host(), &format!("/obj/{i}")))
                .await
                .unwrap();
            assert_eq!(resp.status, 200);
            assert_eq!(resp.body, Bytes::from(format!("/obj/{i}")));
        }
    });
    assert_eq!(server.connections(), 1);
    let stats = client.stats();
    assert_eq!(stats.requests, 20);
    assert_eq!(stats.connections_opened, 1);
    assert_eq!(stats.connections_reused, 19);
    assert_eq!(client.idle_connections(&target), 1);
    let seen = server.seen();
    assert_eq!(seen.len(), 20);
    assert_eq!(
        seen[3].head,
        format!("GET /obj/3 HTTP/1.1\r\nhost: {}\r\n\r\n", server.host()).into_bytes()
    );
}

#[test]
fn connection_close_response_is_not_pooled() {
    let server = TestServer::start(|_| {
        Reply::SendThenClose(
            b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok".to_vec(),
        )
    });
    let client = Client::new(quick_config()).unwrap();
    run(async {
        for _ in 0..3 {
            let resp = client
                .send(&server.target(), &get(&server.host(), "/"))
                .await
                .unwrap();
            assert_eq!(&resp.body[..], b"ok");
            assert_eq!(client.idle_connections(&server.target()), 0);
        }
    });
    assert_eq!(server.connections(), 3);
    assert_eq!(client.stats().stale_retries, 0);
}

#[test]
fn max_idle_zero_disables_reuse() {
    let server = TestServer::start(|_| Reply::Send(ok(b"x")));
    let client = Client::new(TransportConfig {
        max_idle_per_host: 0,
        ..quick_config()
    })
    .unwrap();
    run(async {
        for _ in 0..3 {
            client
                .send(&server.target(), &get(&server.host(), "/"))
                .await
                .unwrap();
        }
    });
    assert_eq!(client.stats().connections_opened, 3);
}

/// The server closes each connection after answering, without saying so: the next request
/// finds a closed pooled connection.
#[test]
fn closed_idle_connection_is_retried_once_if_idempotent() {
    let server = TestServer::start(|req| Reply::SendThenClose(ok(req.method.as_bytes())));
    let client = Client::new(quick_config()).unwrap();
    let target = server.target();
    run(async {
        let first = client
            .send(&target, &get(&server.host(), "/a"))
            .await
            .unwrap();
        assert_eq!(&first.body[..], b"GET");
        assert_eq!(client.idle_connections(&target), 1);
        // Let the close reach the client.
        monoio::time::sleep(Duration::from_millis(100)).await;

        let second = client
            .send(&target, &get(&server.host(), "/b"))
            .await
            .unwrap();
        assert_eq!(&second.body[..], b"GET");
        let stats = client.stats();
        assert_eq!(stats.stale_retries, 1);
        assert_eq!(stats.connections_opened, 2);

        monoio::time::sleep(Duration::from_millis(100)).await;
        let mut post = Request::new(Method::Post, server.host(), "/c?uploads");
        post.idempotent = false;
        let err = client.send(&target, &post).await.unwrap_err();
        assert!(
            matches!(err, TransportError::Closed | TransportError::Io(_)),
            "{err:?}"
        );
        assert!(err.is_retryable());
        assert_eq!(client.stats().stale_retries, 1);
        assert_eq!(client.stats().connections_opened, 2);
    });
    assert_eq!(server.connections(), 2);
    assert_eq!(
        server.seen().iter().map(|s| s.conn).collect::<Vec<_>>(),
        vec![0, 1]
    );
    // The POST never reached the server.
    assert!(server.seen().iter().all(|s| s.method == "GET"));
}

#[test]
fn fresh_connection_failure_is_not_retried() {
    let server = TestServer::start(|_| Reply::Close);
    let client = Client::new(quick_config()).unwrap();
    run(async {
        let err = client
            .send(&server.target(), &get(&server.host(), "/"))
            .await
            .unwrap_err();
        assert!(matches!(err, TransportError::Closed), "{err:?}");
    });
    assert_eq!(server.connections(), 1);
}

// ------------------------------------------------------------------------------ timeouts

#[test]
fn stalled_server_times_out() {
    let server = TestServer::start(|_| Reply::After(Duration::from_secs(3), ok(b"late")));
    let client = Client::new(TransportConfig {
        request_timeout: Duration::from_millis(300),
        ..quick_config()
    })
    .unwrap();
    let started = Instant::now();
    let err = run(async {
        client
            .send(&server.target(), &get(&server.host(), "/"))
            .await
    })
    .unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(
            err,
            TransportError::Timeout {
                phase: "waiting for the response"
            }
        ),
        "{err:?}"
    );
    assert!(err.is_retryable());
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(2),
        "{took:?}"
    );
    assert_eq!(client.idle_connections(&server.target()), 0);
}

#[test]
fn total_timeout_bounds_the_whole_exchange() {
    // The server trickles: answers after 400 ms, under the 1 s progress timeout.
    let server = TestServer::start(|_| Reply::After(Duration::from_millis(400), ok(b"x")));
    let client = Client::new(TransportConfig {
        request_timeout: Duration::from_secs(1),
        total_timeout: Some(Duration::from_millis(200)),
        ..quick_config()
    })
    .unwrap();
    let err = run(async {
        client
            .send(&server.target(), &get(&server.host(), "/"))
            .await
    })
    .unwrap_err();
    assert!(
        matches!(err, TransportError::TooSlow { min_rate: 0, .. }),
        "{err:?}"
    );
}

/// A store that answers one byte every 20 ms: each read arrives well within the 300 ms progress
/// timeout, so before the rate deadline the exchange took as long as the store liked (here
/// about 1.5 s, in the field hours). Now the deadline is the progress timeout plus the body at
/// `min_rate`: given up at about 300 ms, naming the slow store.
#[test]
fn a_dripping_store_is_given_up_on_at_the_rate_deadline() {
    let server = TestServer::start(|_| Reply::Drip(Duration::from_millis(20), ok(&[b'x'; 40])));
    let client = Client::new(TransportConfig {
        request_timeout: Duration::from_millis(300),
        min_rate: 1024 * 1024,
        ..quick_config()
    })
    .unwrap();
    let started = Instant::now();
    let err = run(async {
        client
            .send(&server.target(), &get(&server.host(), "/"))
            .await
    })
    .unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(
            err,
            TransportError::TooSlow {
                min_rate: 1_048_576,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.is_retryable());
    assert!(err.to_string().contains("too slow"), "{err}");
    assert!(took < Duration::from_millis(900), "{took:?}");

    // The deadline grows with the body: 8 MiB at 64 KiB/s is 128 s on top.
    let cfg = TransportConfig::default();
    assert_eq!(
        cfg.deadline_for(8 << 20),
        Some(cfg.request_timeout + Duration::from_secs(128))
    );
    let off = TransportConfig {
        min_rate: 0,
        ..TransportConfig::default()
    };
    assert_eq!(off.deadline_for(8 << 20), None);
}

#[test]
fn connect_refused_is_a_connect_error() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let client = Client::new(quick_config()).unwrap();
    let err = run(async {
        client
            .send(
                &Target::new(Scheme::Http, "127.0.0.1", port),
                &get("127.0.0.1", "/"),
            )
            .await
    })
    .unwrap_err();
    assert!(matches!(err, TransportError::Connect { .. }), "{err:?}");
    assert!(err.to_string().contains(&port.to_string()), "{err}");
}

#[test]
fn invalid_request_is_refused_before_connecting() {
    let client = Client::new(quick_config()).unwrap();
    let mut req = get("h", "/");
    req.set_header("x-amz-meta-a", "1\r\nx-injected: 2");
    let err = run(async {
        client
            .send(&Target::new(Scheme::Http, "127.0.0.1", 9), &req)
            .await
    })
    .unwrap_err();
    assert!(matches!(err, TransportError::InvalidRequest(_)), "{err:?}");
    assert_eq!(client.stats().connections_opened, 0);
}

// ------------------------------------------------------------------------------ bodies

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// 8 MiB in 3000 chunks of uneven sizes (more chunks than one writev takes), twice on one
/// connection, while the server reads slowly at first (partial writes).
#[test]
fn large_multi_chunk_body_arrives_byte_exact() {
    let server = TestServer::start(|req| {
        Reply::Send(ok(
            format!("{} {}", req.body.len(), checksum(&req.body)).as_bytes()
        ))
    });
    let data = pattern(8 * 1024 * 1024 + 12345, 7);
    let mut chunks = Vec::new();
    let mut at = 0;
    let mut i = 0usize;
    while at < data.len() {
        let size = (1 + (i * 7919) % 5000).min(data.len() - at);
        chunks.push(Bytes::copy_from_slice(&data[at..at + size]));
        at += size;
        i += 1;
    }
    // One big chunk at the end too.
    let n_chunks = chunks.len();
    assert!(n_chunks > 1024, "{n_chunks}");
    let client = Client::new(quick_config()).unwrap();
    run(async {
        for round in 0..2 {
            let mut req = Request::new(Method::Put, server.host(), format!("/b/big{round}"));
            req.body = Body::from_chunks(chunks.clone());
            req.set_header("x-test-slow-read", "1");
            let resp = client.send(&server.target(), &req).await.unwrap();
            assert_eq!(resp.status, 200);
            assert_eq!(
                String::from_utf8_lossy(&resp.body),
                format!("{} {}", data.len(), checksum(&data))
            );
        }
    });
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|s| s.body == data));
    assert_eq!(
        seen[0].header("content-length").unwrap(),
        data.len().to_string()
    );
    assert_eq!(server.connections(), 1);
}

/// The vectored-write path and TLS on the legacy driver.
#[test]
fn legacy_driver_sends_bodies_over_tcp_and_tls() {
    let server = TestServer::start(|req| {
        Reply::Send(ok(
            format!("{} {}", req.body.len(), checksum(&req.body)).as_bytes()
        ))
    });
    let ca = TestCa::new("legacy driver CA").unwrap();
    let tls_server = TestServer::start_tls(tls_server_config(&ca, &["localhost"]), |req| {
        Reply::Send(ok(
            format!("{} {}", req.body.len(), checksum(&req.body)).as_bytes()
        ))
    });
    let data = pattern(3 * 1024 * 1024 + 5, 5);
    let chunks: Vec<Bytes> = data.chunks(1500).map(Bytes::copy_from_slice).collect();
    let expected = format!("{} {}", data.len(), checksum(&data));
    let client = Client::new(TransportConfig {
        tls: TlsConfig::with_ca_pem(ca.cert_pem()),
        ..quick_config()
    })
    .unwrap();
    run_legacy(async {
        assert!(monoio::utils::is_legacy());
        let mut req = Request::new(Method::Put, server.host(), "/b/k");
        req.body = Body::from_chunks(chunks.clone());
        req.set_header("x-test-slow-read", "1");
        let resp = client.send(&server.target(), &req).await.unwrap();
        assert_eq!(String::from_utf8_lossy(&resp.body), expected);
        let mut req = Request::new(Method::Put, "localhost", "/b/k");
        req.body = Body::from_chunks(chunks);
        let resp = client
            .send(&tls_target(&tls_server, "localhost"), &req)
            .await
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&resp.body), expected);
        let resp = client
            .send(&server.target(), &get(&server.host(), "/"))
            .await
            .unwrap();
        assert_eq!(&resp.body[..], b"0 14695981039346656037");
    });
    assert_eq!(server.connections(), 1);
    assert_eq!(tls_server.connections(), 1);
}

fn checksum(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf29ce484222325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}

#[test]
fn chunked_response_is_decoded_and_connection_reused() {
    let server = TestServer::start(|_| {
        let mut out = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        for (i, piece) in ["<List", "Parts>", "", "</ListParts>"].iter().enumerate() {
            if piece.is_empty() {
                continue;
            }
            out.extend_from_slice(format!("{:x};n={i}\r\n{piece}\r\n", piece.len()).as_bytes());
        }
        out.extend_from_slice(b"0\r\nx-checksum: 1\r\n\r\n");
        Reply::Send(out)
    });
    let client = Client::new(quick_config()).unwrap();
    run(async {
        for _ in 0..3 {
            let resp = client
                .send(&server.target(), &get(&server.host(), "/"))
                .await
                .unwrap();
            assert_eq!(&resp.body[..], b"<ListParts></ListParts>");
        }
    });
    assert_eq!(server.connections(), 1);
}

#[test]
fn large_response_body_and_head_request() {
    let payload = pattern(3 * 1024 * 1024, 3);
    let p = payload.clone();
    let server = TestServer::start(move |req| {
        if req.method == "HEAD" {
            Reply::Send(
                format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", p.len()).into_bytes(),
            )
        } else {
            Reply::Send(ok(&p))
        }
    });
    let client = Client::new(quick_config()).unwrap();
    run(async {
        let head = client
            .send(
                &server.target(),
                &Request::new(Method::Head, server.host(), "/o"),
            )
            .await
            .unwrap();
        assert_eq!(head.header("content-length"), Some("3145728"));
        assert!(head.body.is_empty());
        let resp = client
            .send(&server.target(), &get(&server.host(), "/o"))
            .await
            .unwrap();
        assert_eq!(resp.body.len(), payload.len());
        assert!(resp.body == payload);
    });
    assert_eq!(server.connections(), 1);
}

#[test]
fn body_over_the_limit_is_refused() {
    let server = TestServer::start(|_| Reply::Send(ok(&[1u8; 5000])));
    let mut config = quick_config();
    config.limits.max_body_bytes = 4096;
    let client = Client::new(config).unwrap();
    let err = run(async {
        client
            .send(&server.target(), &get(&server.host(), "/"))
            .await
    })
    .unwrap_err();
    assert!(
        matches!(err, TransportError::Http(ref m) if m.contains("4096")),
        "{err:?}"
    );
}

#[test]
fn body_delimited_by_close() {
    let server = TestServer::start(|_| {
        Reply::SendThenClose(
            b"HTTP/1.0 200 OK\r\ncontent-type: text/plain\r\n\r\nuntil the end".to_vec(),
        )
    });
    let client = Client::new(quick_config()).unwrap();
    run(async {
        let resp = client
            .send(&server.target(), &get(&server.host(), "/"))
            .await
            .unwrap();
        assert_eq!(&resp.body[..], b"until the end");
        assert_eq!(client.idle_connections(&server.target()), 0);
    });
}

// ------------------------------------------------------------------------------ s3s-fs

/// An unsigned GET against a real S3 server: 403 AccessDenied with an XML body.
#[test]
fn s3s_fs_answers_an_anonymous_get_with_403() {
    let server = S3Server::start().expect("start s3s-fs");
    let target = Target::new(Scheme::Http, "127.0.0.1", server.port());
    let client = Client::new(quick_config()).unwrap();
    run(async {
        let req = get(
            &server.host_port(),
            &format!("/{}/missing", server.bucket()),
        );
        let resp = client.send(&target, &req).await.unwrap();
        assert_eq!(resp.status, 403, "{resp:?}");
        let body = String::from_utf8_lossy(&resp.body).into_owned();
        assert!(body.contains("<Code>AccessDenied</Code>"), "{body}");
        // And again on the same connection.
        let resp = client.send(&target, &req).await.unwrap();
        assert_eq!(resp.status, 403);
    });
    assert_eq!(client.stats().connections_opened, 1);
}

// ------------------------------------------------------------------------------ TLS

fn tls_server_config(ca: &TestCa, names: &[&str]) -> Arc<rustls::ServerConfig> {
    let issued = ca.issue_server_cert(names).unwrap();
    let chain = CertificateDer::pem_slice_iter(issued.cert_pem().as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(issued.key_pem().as_bytes()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .unwrap();
    Arc::new(config)
}

fn tls_target(server: &TestServer, host: &str) -> Target {
    Target::new(Scheme::Https, host, server.addr.port())
}

#[test]
fn tls_with_the_ca_works_and_reuses_the_connection() {
    let ca = TestCa::new("spillway transport test CA").unwrap();
    let server = TestServer::start_tls(tls_server_config(&ca, &["localhost"]), |req| {
        Reply::Send(ok(
            format!("{} {}", req.body.len(), checksum(&req.body)).as_bytes()
        ))
    });
    let client = Client::new(TransportConfig {
        tls: TlsConfig::with_ca_pem(ca.cert_pem()),
        ..quick_config()
    })
    .unwrap();
    let data = pattern(2 * 1024 * 1024 + 77, 11);
    let chunks: Vec<Bytes> = data
        .chunks(3001)
        .map(Bytes::copy_from_slice)
        .chain(std::iter::once(Bytes::copy_from_slice(&data[..100_000])))
        .collect();
    let mut expected = data.clone();
    expected.extend_from_slice(&data[..100_000]);
    let target = tls_target(&server, "localhost");
    run(async {
        let resp = client.send(&target, &get("localhost", "/")).await.unwrap();
        assert_eq!(&resp.body[..], b"0 14695981039346656037");
        let mut put = Request::new(Method::Put, "localhost", "/b/k");
        put.body = Body::from_chunks(chunks);
        let resp = client.send(&target, &put).await.unwrap();
        assert_eq!(
            String::from_utf8_lossy(&resp.body),
            format!("{} {}", expected.len(), checksum(&expected))
        );
    });
    assert_eq!(server.connections(), 1);
    assert!(server.seen()[1].body == expected);
}

#[test]
fn tls_server_name_override_checks_the_given_name() {
    let ca = TestCa::new("spillway transport test CA").unwrap();
    let server = TestServer::start_tls(tls_server_config(&ca, &["s3.internal.test"]), |_| {
        Reply::Send(ok(b"ok"))
    });
    let with_override = Client::new(TransportConfig {
        tls: TlsConfig {
            server_name: Some("s3.internal.test".to_owned()),
            ..TlsConfig::with_ca_pem(ca.cert_pem())
        },
        ..quick_config()
    })
    .unwrap();
    let without = Client::new(TransportConfig {
        tls: TlsConfig::with_ca_pem(ca.cert_pem()),
        ..quick_config()
    })
    .unwrap();
    let target = tls_target(&server, "127.0.0.1");
    run(async {
        let resp = with_override
            .send(&target, &get("s3.internal.test", "/"))
            .await
            .unwrap();
        assert_eq!(&resp.body[..], b"ok");
        let err = without
            .send(&target, &get("127.0.0.1", "/"))
            .await
            .unwrap_err();
        assert!(matches!(err, TransportError::Tls(_)), "{err:?}");
    });
}

#[test]
fn tls_without_the_ca_fails() {
    let ca = TestCa::new("the server's CA").unwrap();
    let other = TestCa::new("some other CA").unwrap();
    let server = TestServer::start_tls(tls_server_config(&ca, &["localhost"]), |_| {
        Reply::Send(ok(b"ok"))
    });
    let target = tls_target(&server, "localhost");

    let wrong_ca = Client::new(TransportConfig {
        tls: TlsConfig::with_ca_pem(other.cert_pem()),
        ..quick_config()
    })
    .unwrap();
    let err = run(async { wrong_ca.send(&target, &get("localhost", "/")).await }).unwrap_err();
    match &err {
        TransportError::Tls(msg) => assert!(msg.to_lowercase().contains("certificate"), "{msg}"),
        other => panic!("expected a TLS error, got {other:?}"),
    }
    assert!(!err.is_retryable());

    let no_roots = Client::new(quick_config()).unwrap();
    let err = run(async { no_roots.send(&target, &get("localhost", "/")).await }).unwrap_err();
    assert!(
        matches!(err, TransportError::Tls(ref m) if m.contains("trusted roots")),
        "{err:?}"
    );

    // A PEM without a certificate is refused when the client is made.
    let err = Client::new(TransportConfig {
        tls: TlsConfig::with_ca_pem(b"not a pem".to_vec()),
        ..quick_config()
    })
    .unwrap_err();
    assert!(matches!(err, TransportError::Tls(_)), "{err:?}");
}

#[test]
fn tls_config_debug_shows_no_pem() {
    let cfg = TlsConfig::with_ca_pem(b"-----BEGIN CERTIFICATE-----\nABCDEF\n".to_vec());
    let text = format!("{cfg:?}");
    assert!(!text.contains("ABCDEF"), "{text}");
}

/// The server hangs up mid-response: Closed, and the client does not park the connection.
#[test]
fn truncated_response_is_closed() {
    let server = TestServer::start(|_| {
        Reply::SendThenClose(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly a part".to_vec())
    });
    let client = Client::new(quick_config()).unwrap();
    let err = run(async {
        client
            .send(&server.target(), &get(&server.host(), "/"))
            .await
    })
    .unwrap_err();
    assert!(matches!(err, TransportError::Closed), "{err:?}");
    assert_eq!(client.idle_connections(&server.target()), 0);
}

/// The server answers before reading the body and closes: the early answer is returned.
#[test]
fn early_error_response_is_returned_when_the_write_fails() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut head = [0u8; 1024];
        let _ = s.read(&mut head);
        let body = b"<Error><Code>AccessDenied</Code></Error>";
        let _ = s.write_all(
            format!(
                "HTTP/1.1 403 Forbidden\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        );
        let _ = s.write_all(body);
        thread::sleep(Duration::from_millis(50));
        let _ = s.shutdown(Shutdown::Write);
        // Drain slowly so the client's write may or may not fail first; then close.
        thread::sleep(Duration::from_millis(200));
        drop(s);
    });
    let client = Client::new(quick_config()).unwrap();
    let mut req = Request::new(Method::Put, format!("127.0.0.1:{port}"), "/b/k");
    req.body = Body::from(vec![0u8; 32 * 1024 * 1024]);
    let resp = run(async {
        client
            .send(&Target::new(Scheme::Http, "127.0.0.1", port), &req)
            .await
    });
    match resp {
        Ok(resp) => {
            eprintln!("early answer read after the failed write");
            assert_eq!(resp.status, 403);
            assert!(String::from_utf8_lossy(&resp.body).contains("AccessDenied"));
        }
        // The kernel may drop what the server sent when the reset arrives first.
        Err(e) => {
            eprintln!("early answer lost: {e}");
            assert!(matches!(e, TransportError::Io(_)), "{e:?}");
        }
    }
}
