//! The engine's Prometheus endpoint, read by the scenarios that run it: `GET /metrics`, the
//! sum of a counter over one sink's samples, and a histogram's buckets.

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

/// The cumulative buckets `(le in seconds, count)` of histogram `name` for sink `sink`, summed
/// over its samples (shards), in the order of their bounds; `+Inf` last.
pub fn buckets(body: &str, name: &str, sink: &str) -> Vec<(f64, u64)> {
    let prefix = format!("{name}_bucket{{");
    let label = format!("sink=\"{sink}\"");
    let mut out: Vec<(f64, u64)> = Vec::new();
    for l in body.lines() {
        if !l.starts_with(&prefix) || !l.contains(&label) {
            continue;
        }
        let Some(le) = l
            .split("le=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .and_then(|v| {
                if v == "+Inf" {
                    Some(f64::INFINITY)
                } else {
                    v.parse().ok()
                }
            })
        else {
            continue;
        };
        let Some(count) = l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        match out.iter_mut().find(|(b, _)| *b == le) {
            Some((_, c)) => *c += count as u64,
            None => out.push((le, count as u64)),
        }
    }
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

/// The smallest bucket bound (seconds) at or under which a fraction `q` of the observations
/// lie: a quantile as far as the buckets tell it (NaN without observations).
pub fn quantile_bound(buckets: &[(f64, u64)], q: f64) -> f64 {
    let total = buckets.last().map_or(0, |b| b.1);
    if total == 0 {
        return f64::NAN;
    }
    let want = (q * total as f64).ceil() as u64;
    buckets
        .iter()
        .find(|(_, c)| *c >= want)
        .map_or(f64::INFINITY, |b| b.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_sum_over_shards_and_give_quantile_bounds() {
        let body = "x_bucket{shard=\"0\",sink=\"a\",le=\"0.001\"} 50\n\
                    x_bucket{shard=\"0\",sink=\"a\",le=\"0.0025\"} 98\n\
                    x_bucket{shard=\"0\",sink=\"a\",le=\"+Inf\"} 100\n\
                    x_bucket{shard=\"1\",sink=\"a\",le=\"0.001\"} 50\n\
                    x_bucket{shard=\"1\",sink=\"a\",le=\"0.0025\"} 100\n\
                    x_bucket{shard=\"1\",sink=\"a\",le=\"+Inf\"} 100\n\
                    x_bucket{shard=\"0\",sink=\"b\",le=\"0.001\"} 7\n\
                    x_sum{sink=\"a\"} 1\n";
        let b = buckets(body, "x", "a");
        assert_eq!(b, vec![(0.001, 100), (0.0025, 198), (f64::INFINITY, 200)]);
        assert_eq!(quantile_bound(&b, 0.5), 0.001);
        assert_eq!(quantile_bound(&b, 0.99), 0.0025);
        assert_eq!(quantile_bound(&b, 1.0), f64::INFINITY);
        assert!(quantile_bound(&[], 0.5).is_nan());
    }

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
