//! Durations ("250ms", "10s", "1m") and byte sizes ("16MiB", "1GB", 4096) as they are written in
//! the config file.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// A duration written as a number with a unit: `ns`, `us`, `ms`, `s`, `m`, `h` (e.g. `"250ms"`,
/// `"1.5s"`). A bare integer is read as milliseconds.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Dur(pub Duration);

impl fmt::Debug for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// A backoff's wait: between half of `backoff` and all of it (`r` in `0..1`, a random draw),
/// so the wait never passes the limit the backoff is capped at (a `reconnect_max` or
/// `retry_max` is the longest a user waits, not two thirds of it).
fn jittered(backoff: Duration, r: f64) -> Duration {
    backoff.mul_f64(0.5 + 0.5 * r.clamp(0.0, 1.0))
}

/// A reconnect or retry backoff: each wait is half to all of the current step ([`jittered`]),
/// the step doubles after each wait up to `max`, and goes back to `min` once the peer answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    step: Duration,
    min: Duration,
    max: Duration,
}

impl Backoff {
    /// Starting at `min`, never above `max` (nor below `min`).
    pub fn new(min: Duration, max: Duration) -> Backoff {
        Backoff {
            step: min,
            min,
            max: max.max(min),
        }
    }

    /// The current step: the longest the next wait can be.
    pub fn step(&self) -> Duration {
        self.step
    }

    /// The next wait (`r` a random draw in `0..1`); the step doubles.
    pub fn next_wait(&mut self, r: f64) -> Duration {
        let wait = jittered(self.step, r);
        self.step = (self.step * 2).min(self.max);
        wait
    }

    /// The next wait without jitter and at least `floor` (a hand-over that must leave the
    /// other side time); the step doubles from it, up to the larger of `max` and `floor`.
    pub fn next_at_least(&mut self, floor: Duration) -> Duration {
        let wait = self.step.max(floor);
        self.step = (wait * 2).min(self.max.max(wait));
        wait
    }

    /// Back to the first step: the peer answered.
    pub fn reset(&mut self) {
        self.step = self.min;
    }
}

/// A duration for a log line: whole milliseconds below 10 s (`137ms`), tenths of a second
/// above (`12.4s`), and never the nanoseconds a jittered wait has (`137.293847ms`).
#[derive(Debug, Clone, Copy)]
pub struct Rounded(pub Duration);

impl fmt::Display for Rounded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        if d < Duration::from_millis(1) && !d.is_zero() {
            write!(f, "{}µs", d.as_micros())
        } else if d < Duration::from_secs(10) {
            write!(f, "{}ms", (d.as_secs_f64() * 1e3).round() as u64)
        } else {
            write!(f, "{:.1}s", d.as_secs_f64())
        }
    }
}

/// Parses a duration (see [`Dur`]).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num.parse().map_err(|_| {
        format!("{text:?} is not a duration (write e.g. \"250ms\", \"10s\", \"1m\")")
    })?;
    let scale = match unit.trim() {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        "" => {
            return Err(format!(
                "{text:?} has no unit (write e.g. \"250ms\", \"10s\", \"1m\")"
            ));
        }
        other => {
            return Err(format!(
                "unknown duration unit {other:?} in {text:?} (use ns, us, ms, s, m or h)"
            ));
        }
    };
    let secs = value * scale;
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(format!("{text:?} is out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a duration such as \"250ms\" or \"10s\" (an integer means milliseconds)",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
                parse_duration(v).map(Dur).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
                u64::try_from(v)
                    .map(|ms| Dur(Duration::from_millis(ms)))
                    .map_err(|_| E::custom("a duration cannot be negative"))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dur, E> {
                Ok(Dur(Duration::from_millis(v)))
            }
        }
        d.deserialize_any(V)
    }
}

/// A size in bytes: an integer, or a number with a unit `B`, `KB`, `MB`, `GB` (powers of 1000)
/// or `KiB`, `MiB`, `GiB` (powers of 1024).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct ByteSize(pub u64);

impl fmt::Debug for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} B", self.0)
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} B", self.0)
    }
}

/// Parses a byte size (see [`ByteSize`]).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{text:?} is not a size (write e.g. 4096, \"64KiB\", \"16MiB\")"))?;
    let scale: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(format!(
                "unknown size unit {other:?} in {text:?} (use B, KB, MB, GB, KiB, MiB or GiB)"
            ));
        }
    };
    let bytes = value * scale;
    if !bytes.is_finite() || !(0.0..=1e18).contains(&bytes) {
        return Err(format!("{text:?} is out of range"));
    }
    Ok(bytes.round() as u64)
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size such as 4096, \"64KiB\" or \"16MiB\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                parse_size(v).map(ByteSize).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom("a size cannot be negative"))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_backoff_doubles_to_its_max_jitters_below_its_step_and_resets() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(100), ms(1_000));
        let mut steps = Vec::new();
        for r in [0.0, 1.0, 0.5, 1.0, 1.0, 0.0] {
            let step = b.step();
            let wait = b.next_wait(r);
            assert!(
                wait >= step / 2 && wait <= step,
                "{wait:?} within half to all of {step:?}"
            );
            steps.push(step);
        }
        assert_eq!(
            steps,
            [ms(100), ms(200), ms(400), ms(800), ms(1_000), ms(1_000)]
        );
        b.reset();
        assert_eq!(b.step(), ms(100));
        // A hand-over waits at least its floor, unjittered, and doubles from there.
        assert_eq!(b.next_at_least(ms(1_500)), ms(1_500));
        assert_eq!(b.step(), ms(1_500));
        assert_eq!(b.next_at_least(ms(1_500)), ms(1_500));
        // A max below the min is raised to it.
        assert_eq!(Backoff::new(ms(50), ms(10)).next_wait(1.0), ms(50));
    }

    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        let r = |d| Rounded(d).to_string();
        assert_eq!(r(Duration::from_nanos(137_293_847)), "137ms");
        assert_eq!(r(Duration::from_nanos(9_999_600_000)), "10000ms");
        assert_eq!(r(Duration::from_millis(12_440)), "12.4s");
        assert_eq!(r(Duration::from_nanos(450_400)), "450µs");
        assert_eq!(r(Duration::ZERO), "0ms");
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("10us"), Ok(Duration::from_micros(10)));
        assert!(
            parse_duration("10")
                .err()
                .unwrap_or_default()
                .contains("no unit")
        );
        assert!(
            parse_duration("10 parsecs")
                .err()
                .unwrap_or_default()
                .contains("unknown duration unit")
        );
        assert!(parse_duration("fast").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("16MiB"), Ok(16 << 20));
        assert_eq!(parse_size("1.5KB"), Ok(1500));
        assert!(
            parse_size("3 bananas")
                .err()
                .unwrap_or_default()
                .contains("unknown size unit")
        );
    }
}
