//! A FAKE EC2 instance metadata service (IMDSv2) on a loopback port, for tests of the AWS
//! credential chain: no real IMDS can be reached here (and none may be: tests point
//! `AWS_EC2_METADATA_SERVICE_ENDPOINT` at this fake, never at 169.254.169.254).
//!
//! It serves what the SDK's IMDS credentials provider asks for, IMDSv2 only: `PUT
//! /latest/api/token` gives a session token; `GET /latest/meta-data/iam/security-credentials/`
//! (with the token) names one role; `GET .../security-credentials/<role>` gives credentials
//! that expire `ttl` after they are served: the same access key and secret each time (the
//! S3 server the tests run knows one key pair) with a new session token each time
//! (`session-1`, `session-2`, ...), so rotation shows in the requests the store gets. A request
//! without the session token is refused with 401, as IMDSv2 does.
//!
//! It also plays the ECS container credentials endpoint: `GET /ecs/credentials` with the
//! `Authorization` header [`ECS_AUTH`] (what `AWS_CONTAINER_AUTHORIZATION_TOKEN` sends) gives
//! the same credentials, from the same sequence; without the header it answers 401.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use crate::HarnessError;

/// The role the fake names.
pub const ROLE: &str = "spillway-test-role";
const API_TOKEN: &str = "imds-session-token";
/// The authorization token the ECS endpoint wants.
pub const ECS_AUTH: &str = "ecs-test-authorization";
/// The path of the ECS endpoint (for `AWS_CONTAINER_CREDENTIALS_FULL_URI`).
pub const ECS_PATH: &str = "/ecs/credentials";

/// One set of credentials the fake served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    /// The session token (`session-N`).
    pub token: String,
    /// When it was served.
    pub at: SystemTime,
    /// When it expires.
    pub expires: SystemTime,
}

struct Shared {
    access_key: String,
    secret_key: String,
    ttl: Duration,
    served: Mutex<Vec<Served>>,
    refused: Mutex<u64>,
    stop: AtomicBool,
}

/// The fake IMDS; stops when dropped.
pub struct FakeImds {
    addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl FakeImds {
    /// Starts the fake on a free loopback port, serving `access_key`/`secret_key` with a new
    /// session token each time, each valid for `ttl`.
    pub fn start(
        access_key: &str,
        secret_key: &str,
        ttl: Duration,
    ) -> Result<FakeImds, HarnessError> {
        let io = |e| HarnessError::io("fake IMDS: binding a loopback port", e);
        let listener = TcpListener::bind("127.0.0.1:0").map_err(io)?;
        listener.set_nonblocking(true).map_err(io)?;
        let addr = listener.local_addr().map_err(io)?;
        let shared = Arc::new(Shared {
            access_key: access_key.to_owned(),
            secret_key: secret_key.to_owned(),
            ttl,
            served: Mutex::new(Vec::new()),
            refused: Mutex::new(0),
            stop: AtomicBool::new(false),
        });
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("fake-imds".to_owned())
            .spawn(move || {
                while !s.stop.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((sock, _)) => {
                            let s = Arc::clone(&s);
                            std::thread::spawn(move || {
                                let _ = serve(&s, sock);
                            });
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        Err(_) => break,
                    }
                }
            })
            .map_err(|e| HarnessError::io("fake IMDS: starting its thread", e))?;
        Ok(FakeImds {
            addr,
            shared,
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:PORT`, for `AWS_EC2_METADATA_SERVICE_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every set served so far, in order.
    pub fn served(&self) -> Vec<Served> {
        self.shared
            .served
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Requests refused for want of the IMDSv2 session token.
    pub fn refused(&self) -> u64 {
        *self
            .shared
            .refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl std::fmt::Debug for FakeImds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeImds")
            .field("addr", &self.addr)
            .field("served", &self.served().len())
            .finish_non_exhaustive()
    }
}

impl Drop for FakeImds {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(s: &Shared, sock: TcpStream) -> std::io::Result<()> {
    sock.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(sock.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_owned();
    let path = parts.next().unwrap_or("").to_owned();
    let mut token = None;
    let mut auth = None;
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_owned());
            if k == "x-aws-ec2-metadata-token" {
                token = Some(v);
            } else if k == "authorization" {
                auth = Some(v);
            } else if k == "content-length" {
                length = v.parse().unwrap_or(0);
            }
        }
    }
    if length > 0 {
        let mut body = vec![0u8; length.min(64 * 1024)];
        std::io::Read::read_exact(&mut reader, &mut body)?;
    }
    let role_path = format!("/latest/meta-data/iam/security-credentials/{ROLE}");
    let (status, body) = match (method.as_str(), path.as_str()) {
        ("PUT", "/latest/api/token") => (200, API_TOKEN.to_owned()),
        ("GET", ECS_PATH) if auth.as_deref() == Some(ECS_AUTH) => (200, credentials(s)),
        ("GET", ECS_PATH) => {
            *s.refused.lock().unwrap_or_else(PoisonError::into_inner) += 1;
            (401, String::new())
        }
        _ if token.as_deref() != Some(API_TOKEN) => {
            *s.refused.lock().unwrap_or_else(PoisonError::into_inner) += 1;
            (401, String::new())
        }
        ("GET", "/latest/meta-data/iam/security-credentials/") => (200, ROLE.to_owned()),
        ("GET", p) if p == role_path => (200, credentials(s)),
        _ => (404, String::new()),
    };
    let reason = match status {
        200 => "OK",
        401 => "Unauthorized",
        _ => "Not Found",
    };
    // The token's answer says how long the token lives, as IMDSv2 does.
    let ttl = if path == "/latest/api/token" {
        "x-aws-ec2-metadata-token-ttl-seconds: 21600\r\n"
    } else {
        ""
    };
    let mut sock = sock;
    write!(
        sock,
        "HTTP/1.1 {status} {reason}\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n{ttl}Connection: close\r\n\r\n{body}",
        body.len()
    )?;
    sock.flush()
}

/// The next set of credentials, recorded, as the JSON both endpoints answer.
fn credentials(s: &Shared) -> String {
    let at = SystemTime::now();
    let expires = at + s.ttl;
    let mut served = s.served.lock().unwrap_or_else(PoisonError::into_inner);
    let token = format!("session-{}", served.len() + 1);
    served.push(Served {
        token: token.clone(),
        at,
        expires,
    });
    format!(
        r#"{{"Code":"Success","LastUpdated":"{}","Type":"AWS-HMAC","AccessKeyId":"{}","SecretAccessKey":"{}","Token":"{}","Expiration":"{}"}}"#,
        rfc3339(at),
        s.access_key,
        s.secret_key,
        token,
        rfc3339(expires)
    )
}

/// `YYYY-MM-DDTHH:MM:SSZ`.
fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let ts = jiff::Timestamp::from_second(secs as i64).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}
