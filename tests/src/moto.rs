//! moto's S3 (PyPI `moto`, run as `python3 -m moto.server`) as a child process on an ephemeral
//! loopback port: the store of the README's first run, which installs in seconds where s3s-fs
//! is compiled for minutes. The tests' S3 server stays s3s-fs ([`crate::S3Server`]), which
//! verifies SigV4; moto accepts any signature, and keeps its objects in memory.
//!
//! Facts about moto 5.2 checked here:
//! - it serves every AWS service on one port and tells S3 requests by their signature's scope,
//!   path-style addressing included (`http://127.0.0.1:PORT/bucket/key`);
//! - it honours `If-None-Match: *` and `If-Match` on PutObject and on CompleteMultipartUpload
//!   (412 when the condition fails), so Spillway's fencing probe passes;
//! - it takes any signature, but answers an unsigned GetObject 403.

use std::fmt;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, SystemTime};

use spillway_s3::credentials::Credentials;
use spillway_s3::http::encode_head;
use spillway_s3::sign::{PayloadMode, sign};
use spillway_s3::{Method, Request};
use tempfile::TempDir;

use crate::HarnessError;
use crate::ports::LOOPBACK;
use crate::process::ServerProcess;

/// The bucket the first run writes to.
pub const MOTO_BUCKET: &str = "spillway-first-run";

/// The longest answer [`MotoS3::objects`] reads (an object or a listing page).
const MAX_ANSWER: usize = 256 << 20;

/// A running moto server with one bucket. Killed on drop.
pub struct MotoS3 {
    // Field order matters on drop: the process stops before its directory goes.
    process: ServerProcess,
    port: u16,
    _dir: TempDir,
}

impl fmt::Debug for MotoS3 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MotoS3")
            .field("endpoint", &self.endpoint())
            .finish()
    }
}

impl MotoS3 {
    /// Starts `python3 -m moto.server` on a free loopback port, waits until it accepts
    /// connections (its first start imports for a few seconds) and creates [`MOTO_BUCKET`].
    pub fn start() -> Result<MotoS3, HarnessError> {
        let dir = tempfile::Builder::new()
            .prefix("spillway-moto-")
            .tempdir()
            .map_err(|e| HarnessError::io("creating the moto directory", e))?;
        let mut process = ServerProcess::new(
            "moto",
            "python3",
            Vec::<String>::new(),
            dir.path().join("moto.log"),
        )
        .current_dir(dir.path());
        let port = process.start_on_free_port(Duration::from_secs(60), |p, port| {
            p.set_args([
                "-m".to_owned(),
                "moto.server".to_owned(),
                "-H".to_owned(),
                LOOPBACK.to_string(),
                "-p".to_owned(),
                port.to_string(),
            ]);
            Ok(())
        })?;
        let moto = MotoS3 {
            process,
            port,
            _dir: dir,
        };
        let (status, body) = moto.request(Method::Put, &format!("/{MOTO_BUCKET}"), &[])?;
        if status != 200 {
            return Err(HarnessError::S3(format!(
                "moto: creating bucket {MOTO_BUCKET} was answered {status}: {}",
                String::from_utf8_lossy(&body)
            )));
        }
        Ok(moto)
    }

    /// `http://127.0.0.1:port` (path-style addressing).
    pub fn endpoint(&self) -> String {
        format!("http://{LOOPBACK}:{}", self.port)
    }

    /// The bucket created at start.
    pub fn bucket(&self) -> &'static str {
        MOTO_BUCKET
    }

    /// An access key id (moto takes any).
    pub fn access_key(&self) -> &'static str {
        "SPILLWAYFIRSTRUN"
    }

    /// A secret access key (moto takes any).
    pub fn secret_key(&self) -> &'static str {
        "spillway-first-run-secret"
    }

    /// What moto printed so far (one line per request).
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// The signing region.
    pub fn region(&self) -> &'static str {
        crate::REGION
    }

    /// Every object of the bucket whose key does not start with `.` in any segment (Spillway's
    /// markers live under `.spillway/`), as (key, content), in key order.
    pub fn objects(&self) -> Result<Vec<(String, Vec<u8>)>, HarnessError> {
        let mut keys = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut query = vec![("list-type", "2")];
            if let Some(t) = &token {
                query.push(("continuation-token", t));
            }
            let (status, body) = self.request(Method::Get, &format!("/{MOTO_BUCKET}"), &query)?;
            let text = String::from_utf8_lossy(&body);
            if status != 200 {
                return Err(HarnessError::S3(format!(
                    "moto: ListObjectsV2 was answered {status}: {text}"
                )));
            }
            keys.extend(elements(&text, "Key").map(unescape));
            token = if elements(&text, "IsTruncated").any(|v| v == "true") {
                elements(&text, "NextContinuationToken")
                    .next()
                    .map(unescape)
            } else {
                None
            };
            if token.is_none() {
                break;
            }
        }
        let mut out = Vec::new();
        for key in keys {
            if key.split('/').any(|s| s.starts_with('.')) {
                continue;
            }
            let (status, body) = self.request(
                Method::Get,
                &format!("/{MOTO_BUCKET}/{}", percent_encode(&key)),
                &[],
            )?;
            if status != 200 {
                return Err(HarnessError::S3(format!(
                    "moto: GetObject {key} was answered {status}"
                )));
            }
            out.push((key, body));
        }
        Ok(out)
    }

    /// One request without a body, signed with [`Self::access_key`] (moto wants a signature
    /// on GetObject, though it does not check it), on a connection of its own: (status, body).
    /// `path` is already percent-encoded; `query` pairs are not.
    fn request(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<(u16, Vec<u8>), HarnessError> {
        let what = format!("moto: {} {path}", method.as_str());
        let mut req = Request::new(method, format!("{LOOPBACK}:{}", self.port), path);
        req.query = query
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        req.set_header("connection", "close");
        let creds = Credentials::new(self.access_key(), self.secret_key(), None);
        sign(
            &mut req,
            &creds,
            self.region(),
            SystemTime::now(),
            PayloadMode::Unsigned,
        )
        .map_err(|e| HarnessError::S3(format!("{what}: signing: {e}")))?;
        let io = |e| HarnessError::io(what.clone(), e);
        let mut s = TcpStream::connect(loopback(self.port)).map_err(io)?;
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(io)?;
        s.write_all(&encode_head(&req)).map_err(io)?;
        let mut answer = Vec::new();
        s.take(MAX_ANSWER as u64 + 64 * 1024)
            .read_to_end(&mut answer)
            .map_err(io)?;
        parse_answer(&answer).ok_or_else(|| HarnessError::S3(format!("{what}: no HTTP answer")))
    }
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from((LOOPBACK, port))
}

/// An HTTP/1.1 answer read to the connection's end: (status, body), the body de-chunked when
/// it was sent chunked.
fn parse_answer(answer: &[u8]) -> Option<(u16, Vec<u8>)> {
    let end = answer.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&answer[..end]).ok()?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let body = &answer[end + 4..];
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if !chunked {
        return Some((status, body.to_vec()));
    }
    let mut out = Vec::new();
    let mut rest = body;
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&rest[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Some((status, out));
        }
        out.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}

/// The text of every `<name>…</name>` element in `xml`, in order.
fn elements<'a>(xml: &'a str, name: &str) -> impl Iterator<Item = &'a str> + 'a {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    let mut rest = xml;
    std::iter::from_fn(move || {
        let start = rest.find(&open)? + open.len();
        let len = rest[start..].find(&close)?;
        let text = &rest[start..start + len];
        rest = &rest[start + len + close.len()..];
        Some(text)
    })
}

/// XML's five predefined entities.
fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// Percent-encodes everything but unreserved characters and `/`.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_plain_and_chunked_answers() {
        let plain = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc";
        assert_eq!(parse_answer(plain), Some((200, b"abc".to_vec())));
        let chunked =
            b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse_answer(chunked), Some((404, b"abcde".to_vec())));
        assert_eq!(parse_answer(b"HTTP/1.1 200"), None);
        let cut = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nabc";
        assert_eq!(parse_answer(cut), None);
    }

    #[test]
    fn lists_keys_and_tokens() {
        let xml = "<R><IsTruncated>true</IsTruncated><Contents><Key>a&amp;b</Key></Contents>\
                   <Contents><Key>c/d</Key></Contents><NextContinuationToken>t=1</NextContinuationToken></R>";
        let keys: Vec<String> = elements(xml, "Key").map(unescape).collect();
        assert_eq!(keys, ["a&b", "c/d"]);
        assert_eq!(elements(xml, "NextContinuationToken").next(), Some("t=1"));
        assert_eq!(percent_encode("a b/c=1"), "a%20b/c%3D1");
        assert_eq!(percent_encode("k/é"), "k/%C3%A9");
    }
}
