//! The engine's Prometheus endpoint, read by the scenarios that run it: `GET /metrics` and
//! the sum of a counter over one sink's samples.

use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// `GET /metrics` of the engine; the body.
pub fn scrape(addr: SocketAddr) -> Option<String> {
    use std::io::{Read as _, Write as _};
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).ok()?;
    reply
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
}

/// The sum of a counter over the samples of sink `sink`.
pub fn counter(body: &str, name: &str, sink: &str) -> u64 {
    let label = format!("sink=\"{sink}\"");
    body.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{') && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_summed_per_sink() {
        let body = "# HELP x\nspillway_messages_in_total{shard=\"0\",sink=\"a\"} 10\n\
                    spillway_messages_in_total{shard=\"1\",sink=\"a\"} 5\n\
                    spillway_messages_in_total{shard=\"0\",sink=\"b\"} 7\n\
                    spillway_messages_in_total_x{shard=\"0\",sink=\"a\"} 100\n";
        assert_eq!(counter(body, "spillway_messages_in_total", "a"), 15);
        assert_eq!(counter(body, "spillway_messages_in_total", "b"), 7);
        assert_eq!(counter(body, "spillway_messages_in_total", "c"), 0);
    }
}
