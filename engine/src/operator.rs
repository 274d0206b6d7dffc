//! The operator's commands against a running engine's HTTP listener: `spillway status`
//! (`/status` as a table for a person) and `spillway pause` / `resume`.

use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::Value;

use crate::config::Config;

/// How long one exchange with the engine may take.
const TIMEOUT: Duration = Duration::from_secs(5);
/// The most of an answer read (a status of many partitions is well below).
const MAX_ANSWER: u64 = 64 * 1024 * 1024;

/// The engine's listener: `address` when given, else the config's `metrics.address`.
pub fn listener(config: &Config, address: Option<&str>) -> Result<SocketAddr, String> {
    let (text, key) = match address {
        Some(a) => (a, "--address"),
        None => (config.metrics.address.as_str(), "metrics.address"),
    };
    if text.is_empty() {
        return Err(
            "metrics.address is \"\": the engine serves no status (set it, or pass --address)"
                .to_owned(),
        );
    }
    let addr: SocketAddr = text
        .parse()
        .map_err(|_| format!("{key}: {text:?} is not an IP address and port"))?;
    if addr.port() == 0 {
        return Err(format!(
            "{key} has port 0 (the engine picked one and logged it): pass --address HOST:PORT"
        ));
    }
    // An engine listening on every address is reached on loopback.
    let addr = if addr.ip().is_unspecified() {
        let local: std::net::IpAddr = if addr.is_ipv4() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        };
        SocketAddr::new(local, addr.port())
    } else {
        addr
    };
    Ok(addr)
}

/// One HTTP/1.1 exchange: the status code and the body.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, String), String> {
    let fail = |e: std::io::Error| format!("http://{addr}{path}: {e}");
    let mut s = TcpStream::connect_timeout(&addr, TIMEOUT).map_err(|e| {
        format!("http://{addr}{path}: {e} (is the engine running with this metrics.address?)")
    })?;
    s.set_read_timeout(Some(TIMEOUT)).map_err(fail)?;
    s.set_write_timeout(Some(TIMEOUT)).map_err(fail)?;
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .map_err(fail)?;
    let mut answer = Vec::new();
    s.take(MAX_ANSWER).read_to_end(&mut answer).map_err(fail)?;
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("http://{addr}{path}: an answer without a complete head"))?;
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("http://{addr}{path}: no status code in {head:?}"))?;
    Ok((code, body.to_owned()))
}

/// `/status` (its JSON) as tables: one line per sink, then its partitions.
pub fn render(status: &Value) -> String {
    let mut out = String::new();
    let text = |v: &Value| match v {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        Value::Bool(true) => "yes".to_owned(),
        Value::Bool(false) => "no".to_owned(),
        other => other.to_string(),
    };
    let none = Vec::new();
    let sinks = status["sinks"].as_array().unwrap_or(&none);
    let mut rows = vec![
        [
            "SINK",
            "TYPE",
            "STATE",
            "READY",
            "IGGY",
            "DEST",
            "CONFIRMED",
            "STORED",
            "LAG",
            "IN FLIGHT",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for s in sinks {
        rows.push(
            [
                "name",
                "type",
                "state",
                "ready",
                "iggy",
                "destination",
                "confirmed",
                "offsets_stored",
                "lag",
                "in_flight",
            ]
            .iter()
            .map(|k| text(&s[*k]))
            .collect(),
        );
    }
    table(&mut out, &rows, "");
    for s in sinks {
        let _ = writeln!(out);
        let mut line = format!("sink {}", text(&s["name"]));
        if let Some(g) = s["consumer_group"].as_str() {
            let _ = write!(line, " (group {g}, generation {})", text(&s["generation"]));
        } else {
            let _ = write!(line, " (consumer {})", text(&s["consumer"]));
        }
        let _ = writeln!(out, "{line}");
        if let Some(why) = s["not_ready"].as_str() {
            let _ = writeln!(out, "  not ready: {why}");
        }
        if let Some(e) = s["last_error"].as_object() {
            let _ = writeln!(
                out,
                "  last error at {}: {}",
                text(&e["at"]),
                text(&e["message"])
            );
        }
        let parts = s["partitions"].as_array().unwrap_or(&none);
        if parts.is_empty() {
            let _ = writeln!(out, "  no partitions taken up");
            continue;
        }
        let mut rows = vec![
            [
                "PARTITION",
                "SHARD",
                "POLLED",
                "CONFIRMED",
                "STORED",
                "HEAD",
                "LAG",
                "IN FLIGHT",
                "OPEN OBJECTS",
            ]
            .map(str::to_owned)
            .to_vec(),
        ];
        for p in parts {
            let objects = p["open_objects"].as_array().unwrap_or(&none);
            let open = if objects.is_empty() {
                "-".to_owned()
            } else {
                objects
                    .iter()
                    .map(|o| {
                        format!(
                            "from {} ({} msgs, {} B)",
                            text(&o["first_offset"]),
                            text(&o["messages"]),
                            text(&o["bytes"])
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            };
            let mut row: Vec<String> = [
                "partition",
                "shard",
                "polled",
                "confirmed",
                "stored",
                "head",
                "lag",
                "in_flight",
            ]
            .iter()
            .map(|k| text(&p[*k]))
            .collect();
            row.push(open);
            rows.push(row);
        }
        table(&mut out, &rows, "  ");
    }
    out
}

/// Columns padded to their widest cell.
fn table(out: &mut String, rows: &[Vec<String>], indent: &str) {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        let mut line = indent.to_owned();
        for (c, cell) in r.iter().enumerate() {
            if c + 1 == r.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}  ", w = widths[c]);
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn renders_sinks_and_partitions_as_tables() {
        let status: Value = serde_json::from_str(
            r#"{"sinks":[{"name":"s3","type":"s3","state":"paused","ready":true,
            "iggy":"connected","destination":"ok","confirmed":10,"offsets_stored":3,"lag":0,
            "in_flight":0,"consumer":"s3","consumer_group":null,"generation":null,
            "not_ready":null,"last_error":{"at":"2026-12-06T16:00:00Z","message":"boom"},
            "partitions":[{"partition":1,"shard":0,"polled":9,"confirmed":9,"stored":9,
            "head":9,"lag":0,"in_flight":0,"open_objects":[{"first_offset":10,
            "last_offset":12,"messages":3,"bytes":300}]}]}]}"#,
        )
        .unwrap();
        let text = render(&status);
        assert!(text.contains("SINK  TYPE  STATE   READY"), "{text}");
        assert!(text.contains("s3    s3    paused  yes"), "{text}");
        assert!(
            text.contains("last error at 2026-12-06T16:00:00Z: boom"),
            "{text}"
        );
        assert!(text.contains("from 10 (3 msgs, 300 B)"), "{text}");
    }
}
