//! A discard S3 endpoint: a minimal HTTP/1.1 server on loopback that reads every request body
//! to the end, throws it away and answers as S3 would, so that an upload against it measures
//! the client alone (the ceiling of our own code, with no store in the way).
//!
//! It speaks just enough S3 for a multipart upload: `POST ?uploads` (CreateMultipartUpload)
//! gets an `InitiateMultipartUploadResult`, `POST ?uploadId=` (Complete) a
//! `CompleteMultipartUploadResult`, any `PUT` (UploadPart, PutObject) 200 with an ETag,
//! `GET ?uploads` an empty `ListMultipartUploadsResult`, a `GET` of a key 404 `NoSuchKey`
//! (nothing is kept), and anything else an empty 200. Signatures are not checked. Keep-alive, `Content-Length` and
//! chunked bodies, `Expect: 100-continue`. One thread per connection (std threads).
//!
//! It counts the body bytes of `PUT` requests, so the bench can check that every byte of an
//! upload arrived.

use std::io::{self, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::readbuf::ReadBuf;

/// Read buffer per connection: large reads keep the server's share of the CPU small.
const READ_BUF: usize = 1 << 20;
/// Most bytes a request head may take.
const MAX_HEAD: usize = 64 << 10;
/// How often a blocked connection thread looks at the stop flag.
const POLL: Duration = Duration::from_millis(200);

#[derive(Debug, Default)]
struct Shared {
    stop: AtomicBool,
    /// Body bytes of PUT requests.
    put_bytes: AtomicU64,
    /// Requests answered.
    requests: AtomicU64,
    /// Ids handed out (uploads, ETags).
    next_id: AtomicU64,
}

/// A running discard server; stopped (and its threads joined) on drop.
#[derive(Debug)]
pub struct DiscardServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl DiscardServer {
    /// Listens on an ephemeral loopback port.
    pub fn start() -> io::Result<DiscardServer> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let accept = {
            let shared = shared.clone();
            let conns = conns.clone();
            thread::Builder::new()
                .name("discard-accept".into())
                .spawn(move || accept_loop(&listener, &shared, &conns))?
        };
        Ok(DiscardServer {
            addr,
            shared,
            accept: Some(accept),
            conns,
        })
    }

    /// `http://127.0.0.1:port`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Body bytes of all PUT requests so far.
    pub fn put_bytes(&self) -> u64 {
        self.shared.put_bytes.load(Ordering::Relaxed)
    }

    /// Requests answered so far.
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::Relaxed)
    }
}

impl Drop for DiscardServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop with a connection of our own.
        let _ = TcpStream::connect_timeout(&self.addr, POLL);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
        let handles =
            std::mem::take(&mut *self.conns.lock().unwrap_or_else(PoisonError::into_inner));
        for h in handles {
            let _ = h.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>, conns: &Mutex<Vec<JoinHandle<()>>>) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let shared = shared.clone();
        let spawned = thread::Builder::new()
            .name("discard-conn".into())
            .spawn(move || {
                let mut conn = Conn::new(stream, shared);
                // A connection that fails (client gone, bad request) just ends.
                let _ = conn.serve();
                let _ = conn.stream.shutdown(Shutdown::Both);
            });
        if let Ok(h) = spawned {
            let mut list = conns.lock().unwrap_or_else(PoisonError::into_inner);
            list.retain(|h| !h.is_finished());
            list.push(h);
        }
    }
}

/// What the server needs from a request head.
#[derive(Debug, Default, PartialEq, Eq)]
struct Head {
    method: String,
    path: String,
    query: String,
    content_length: Option<u64>,
    chunked: bool,
    expect_continue: bool,
    close: bool,
}

/// Parses a request head (request line and headers, without the final empty line).
fn parse_head(text: &str) -> Result<Head, String> {
    let mut lines = text.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("bad request line {request_line:?}"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(format!("unsupported version {version:?}"));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut head = Head {
        method: method.to_owned(),
        path: path.to_owned(),
        query: query.to_owned(),
        close: version == "HTTP/1.0",
        ..Head::default()
    };
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(format!("bad header line {line:?}"));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            let n = value
                .parse::<u64>()
                .map_err(|_| format!("bad content-length {value:?}"))?;
            head.content_length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            head.chunked = value
                .rsplit(',')
                .next()
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("chunked"));
        } else if name.eq_ignore_ascii_case("expect") {
            head.expect_continue = value.eq_ignore_ascii_case("100-continue");
        } else if name.eq_ignore_ascii_case("connection") {
            head.close = value.eq_ignore_ascii_case("close");
        }
    }
    Ok(head)
}

fn has_param(query: &str, name: &str) -> bool {
    query
        .split('&')
        .any(|p| p.split_once('=').map_or(p, |(k, _)| k) == name)
}

fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

/// The answer to a request: status line, extra headers, body.
fn answer(head: &Head, id: u64) -> (&'static str, String, String) {
    let (bucket, key) = head
        .path
        .trim_start_matches('/')
        .split_once('/')
        .unwrap_or((head.path.trim_start_matches('/'), ""));
    let (bucket, key) = (xml_escape(bucket), xml_escape(key));
    const XMLNS: &str = "http://s3.amazonaws.com/doc/2006-03-01/";
    match head.method.as_str() {
        "PUT" => ("200 OK", format!("ETag: \"{id:032x}\"\r\n"), String::new()),
        "POST" if has_param(&head.query, "uploads") => (
            "200 OK",
            "Content-Type: application/xml\r\n".to_owned(),
            format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<InitiateMultipartUploadResult \
                 xmlns=\"{XMLNS}\"><Bucket>{bucket}</Bucket><Key>{key}</Key>\
                 <UploadId>discard-{id}</UploadId></InitiateMultipartUploadResult>"
            ),
        ),
        "POST" if has_param(&head.query, "uploadId") => (
            "200 OK",
            "Content-Type: application/xml\r\n".to_owned(),
            format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<CompleteMultipartUploadResult \
                 xmlns=\"{XMLNS}\"><Location>http://discard/{bucket}/{key}</Location>\
                 <Bucket>{bucket}</Bucket><Key>{key}</Key>\
                 <ETag>\"{id:032x}-1\"</ETag></CompleteMultipartUploadResult>"
            ),
        ),
        "DELETE" => ("204 No Content", String::new(), String::new()),
        // ListMultipartUploads: none open (nothing is kept).
        "GET" if has_param(&head.query, "uploads") => (
            "200 OK",
            "Content-Type: application/xml\r\n".to_owned(),
            format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListMultipartUploadsResult \
                 xmlns=\"{XMLNS}\"><Bucket>{bucket}</Bucket><IsTruncated>false</IsTruncated>\
                 </ListMultipartUploadsResult>"
            ),
        ),
        // GetObject of a key (the S3 sink's marker): nothing is kept, so no such key.
        "GET" if !key.is_empty() => (
            "404 Not Found",
            "Content-Type: application/xml\r\n".to_owned(),
            format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey</Code>\
                 <Message>The specified key does not exist.</Message><Key>{key}</Key></Error>"
            ),
        ),
        "GET" | "HEAD" | "POST" => ("200 OK", String::new(), String::new()),
        _ => ("400 Bad Request", String::new(), String::new()),
    }
}

/// One connection: a read buffer over the socket.
struct Conn {
    stream: TcpStream,
    shared: Arc<Shared>,
    input: ReadBuf,
}

impl Conn {
    fn new(stream: TcpStream, shared: Arc<Shared>) -> Conn {
        Conn {
            stream,
            shared,
            input: ReadBuf::new(READ_BUF),
        }
    }

    /// Reads more bytes into the buffer; `Ok(false)` at the end of the stream or on stop.
    fn fill(&mut self) -> io::Result<bool> {
        self.input.fill(&mut self.stream, &self.shared.stop, 1)
    }

    /// The next `\r\n`-terminated line (without it), or the next head (up to `\r\n\r\n`);
    /// `None` at a clean end of stream.
    fn take_until(&mut self, delim: &[u8], limit: usize) -> io::Result<Option<String>> {
        let mut scanned: usize = 0;
        loop {
            let window = self.input.unread();
            if let Some(i) = window[scanned.saturating_sub(delim.len())..]
                .windows(delim.len())
                .position(|w| w == delim)
            {
                let at = scanned.saturating_sub(delim.len()) + i;
                let text = String::from_utf8_lossy(&window[..at]).into_owned();
                self.input.consume(at + delim.len());
                return Ok(Some(text));
            }
            scanned = window.len();
            if scanned > limit {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "request head too long",
                ));
            }
            if !self.fill()? {
                return if self.input.unread().is_empty() {
                    Ok(None)
                } else {
                    Err(io::ErrorKind::UnexpectedEof.into())
                };
            }
        }
    }

    /// Reads and throws away `n` bytes.
    fn skip(&mut self, mut n: u64) -> io::Result<()> {
        loop {
            let have = self.input.unread().len() as u64;
            let take = have.min(n);
            self.input.consume(take as usize);
            n -= take;
            if n == 0 {
                return Ok(());
            }
            if !self.fill()? {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    }

    /// Reads a chunked body to its end; returns its decoded length.
    fn skip_chunked(&mut self) -> io::Result<u64> {
        let mut total = 0u64;
        loop {
            let line = self
                .take_until(b"\r\n", MAX_HEAD)?
                .ok_or(io::ErrorKind::UnexpectedEof)?;
            let size = line.split(';').next().unwrap_or_default().trim();
            let size = u64::from_str_radix(size, 16)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad chunk size line"))?;
            if size == 0 {
                // Trailers, up to an empty line.
                while let Some(line) = self.take_until(b"\r\n", MAX_HEAD)? {
                    if line.is_empty() {
                        break;
                    }
                }
                return Ok(total);
            }
            self.skip(size)?;
            self.skip(2)?;
            total += size;
        }
    }

    fn serve(&mut self) -> io::Result<()> {
        self.stream.set_nodelay(true)?;
        self.stream.set_read_timeout(Some(POLL))?;
        loop {
            let Some(text) = self.take_until(b"\r\n\r\n", MAX_HEAD)? else {
                return Ok(());
            };
            let head =
                parse_head(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            if head.expect_continue {
                self.stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
            }
            let body = if head.chunked {
                self.skip_chunked()?
            } else {
                let n = head.content_length.unwrap_or(0);
                self.skip(n)?;
                n
            };
            if head.method == "PUT" {
                self.shared.put_bytes.fetch_add(body, Ordering::Relaxed);
            }
            let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed) + 1;
            let (status, headers, body) = answer(&head, id);
            let response = format!(
                "HTTP/1.1 {status}\r\nx-amz-request-id: discard-{id}\r\n{headers}\
                 Content-Length: {}\r\n\r\n{body}",
                body.len()
            );
            // Counted before answering, so a client that has its answer sees the count.
            self.shared.requests.fetch_add(1, Ordering::Relaxed);
            self.stream.write_all(response.as_bytes())?;
            if head.close {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    /// Sends `request` and reads the answer: its head and the body its Content-Length
    /// announces, after an interim `100 Continue` if one comes.
    fn exchange(stream: &mut TcpStream, request: &[u8]) -> String {
        if let Err(e) = stream.write_all(request) {
            panic!("write: {e}");
        }
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = stream.read(&mut buf).unwrap_or(0);
            assert!(
                n > 0,
                "server closed early: {:?}",
                String::from_utf8_lossy(&got)
            );
            got.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&got).into_owned();
            let last = text
                .strip_prefix("HTTP/1.1 100 Continue\r\n\r\n")
                .unwrap_or(&text);
            if let Some((head, body)) = last.split_once("\r\n\r\n") {
                let len = head
                    .lines()
                    .find_map(|l| l.strip_prefix("Content-Length: "))
                    .and_then(|v| v.parse::<usize>().ok())
                    .unwrap_or(0);
                if body.len() >= len {
                    return text;
                }
            }
        }
    }

    #[test]
    fn heads_and_queries() {
        let h = parse_head(
            "PUT /b/k%20x?partNumber=1&uploadId=u HTTP/1.1\r\nHost: h\r\n\
             content-length: 12\r\nExpect: 100-continue",
        );
        assert_eq!(
            h,
            Ok(Head {
                method: "PUT".into(),
                path: "/b/k%20x".into(),
                query: "partNumber=1&uploadId=u".into(),
                content_length: Some(12),
                expect_continue: true,
                ..Head::default()
            })
        );
        assert!(parse_head("nonsense").is_err());
        assert!(parse_head("GET / HTTP/1.1\r\ncontent-length: x").is_err());
        assert!(has_param("uploads", "uploads"));
        assert!(has_param("a=1&uploads=", "uploads"));
        assert!(!has_param("uploadsX", "uploads"));
        assert!(has_param("uploadId=abc", "uploadId"));
    }

    #[test]
    fn markers_are_absent_and_no_upload_is_open() {
        let head = |line: &str| parse_head(line).unwrap_or_else(|e| panic!("{e}"));
        let (status, _, body) = answer(&head("GET /b/p/.spillway/m.json HTTP/1.1"), 1);
        assert_eq!(status, "404 Not Found");
        assert!(body.contains("<Code>NoSuchKey</Code>"));
        let (status, _, body) = answer(&head("GET /b?uploads&prefix=p%2F HTTP/1.1"), 2);
        assert_eq!(status, "200 OK");
        let parsed =
            spillway_s3::actions::list_multipart_uploads::parse(spillway_s3::request::Response {
                status: 200,
                headers: Vec::new(),
                body: bytes::Bytes::from(body.clone()),
            });
        assert!(parsed.is_ok_and(|p| p.uploads.is_empty()), "{body}");
        assert_eq!(answer(&head("HEAD /b HTTP/1.1"), 3).0, "200 OK");
    }

    #[test]
    fn a_multipart_upload_over_keep_alive() {
        let server = DiscardServer::start().unwrap_or_else(|e| panic!("{e}"));
        let mut s = TcpStream::connect(server.addr).unwrap_or_else(|e| panic!("{e}"));
        let r = exchange(
            &mut s,
            b"POST /bkt/a%26b?uploads HTTP/1.1\r\nHost: x\r\n\r\n",
        );
        assert!(r.starts_with("HTTP/1.1 200 OK"), "{r}");
        assert!(r.contains("<UploadId>discard-"), "{r}");
        assert!(r.contains("<Bucket>bkt</Bucket><Key>a%26b</Key>"), "{r}");
        let body = vec![7u8; 300_000];
        let mut put =
            b"PUT /bkt/k?partNumber=1&uploadId=u HTTP/1.1\r\nContent-Length: 300000\r\n\r\n"
                .to_vec();
        put.extend_from_slice(&body);
        let r = exchange(&mut s, &put);
        assert!(r.contains("ETag: \""), "{r}");
        let r = exchange(
            &mut s,
            b"PUT /bkt/k?partNumber=2&uploadId=u HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\
              Expect: 100-continue\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nx-t: 1\r\n\r\n",
        );
        assert!(
            r.starts_with("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK"),
            "{r}"
        );
        let r = exchange(
            &mut s,
            b"POST /bkt/k?uploadId=u HTTP/1.1\r\nContent-Length: 5\r\n\r\n<x/>\n",
        );
        assert!(r.contains("<CompleteMultipartUploadResult"), "{r}");
        assert!(r.contains("<ETag>\""), "{r}");
        assert_eq!(server.put_bytes(), 300_011);
        assert_eq!(server.requests(), 4);
    }
}
