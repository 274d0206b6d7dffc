//! Object keys from a template. Everything that goes into a key comes from the object's data
//! (its partition, its first message's time and headers, its offsets), never from the wall
//! clock, so writing the same messages again gives the same key: a replay overwrites an
//! object instead of adding a second copy.

use std::fmt::Write as _;

use crate::message::{Message, PartitionInfo, header};

/// S3's limit on a key, in bytes.
pub const MAX_KEY: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Lit(String),
    Stream,
    Topic,
    Partition,
    Date,
    Hour,
    Minute,
    Timestamp,
    FirstOffset,
    LastOffset,
    Header(String),
    Ext,
}

/// Placeholders a key template may use, for error messages.
pub const PLACEHOLDERS: &str = "{stream}, {topic}, {partition}, {date}, {hour}, {minute}, {timestamp}, {first_offset}, {last_offset}, {header.NAME}, {ext}";

/// A parsed key template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTemplate {
    parts: Vec<Part>,
}

/// What a key is made of.
#[derive(Debug)]
pub struct KeyInput<'a> {
    pub partition: &'a PartitionInfo,
    /// The object's first message (time and headers).
    pub first: &'a Message,
    /// Its last offset, when known (objects whose key needs it are written at close).
    pub last_offset: Option<u64>,
    /// The file extension of the format and compression.
    pub ext: &'a str,
}

impl KeyTemplate {
    /// Parses `text`; an unknown placeholder is an error naming it.
    pub fn parse(text: &str) -> Result<KeyTemplate, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(i) = rest.find('{') {
            if i > 0 {
                parts.push(Part::Lit(rest[..i].to_owned()));
            }
            let tail = &rest[i..];
            let Some(end) = tail.find('}') else {
                return Err(format!("unclosed '{{' in {text:?}"));
            };
            let name = &tail[1..end];
            parts.push(match name {
                "stream" => Part::Stream,
                "topic" => Part::Topic,
                "partition" => Part::Partition,
                "date" => Part::Date,
                "hour" => Part::Hour,
                "minute" => Part::Minute,
                "timestamp" => Part::Timestamp,
                "first_offset" => Part::FirstOffset,
                "last_offset" => Part::LastOffset,
                "ext" => Part::Ext,
                _ => match name.strip_prefix("header.").filter(|h| !h.is_empty()) {
                    Some(h) => Part::Header(h.to_owned()),
                    None => {
                        return Err(format!(
                            "unknown placeholder {{{name}}} in {text:?}; use {PLACEHOLDERS}"
                        ));
                    }
                },
            });
            rest = &tail[end + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Lit(rest.to_owned()));
        }
        if !parts.iter().any(|p| matches!(p, Part::FirstOffset)) {
            return Err(format!(
                "{text:?} has no {{first_offset}}: without it two objects of a partition would get the same key"
            ));
        }
        if !parts.iter().any(|p| matches!(p, Part::Partition)) {
            return Err(format!(
                "{text:?} has no {{partition}}: without it objects of two partitions could get the same key"
            ));
        }
        Ok(KeyTemplate { parts })
    }

    /// Whether the key needs the object's last offset (then the object is sent whole at
    /// close, so it must fit in one part).
    pub fn needs_last_offset(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Part::LastOffset))
    }

    /// Renders `prefix` + the template into `out`.
    pub fn render(
        &self,
        prefix: &str,
        tz_offset_secs: i32,
        input: &KeyInput<'_>,
        out: &mut String,
    ) -> Result<(), String> {
        out.clear();
        out.push_str(prefix);
        let secs = i64::try_from(input.first.timestamp / 1_000_000).unwrap_or(i64::MAX)
            + i64::from(tz_offset_secs);
        let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
        let day_secs = secs.rem_euclid(86_400);
        for part in &self.parts {
            match part {
                Part::Lit(l) => out.push_str(l),
                Part::Stream => escape_into(out, &input.partition.stream),
                Part::Topic => escape_into(out, &input.partition.topic),
                Part::Partition => {
                    let _ = write!(out, "{}", input.partition.partition);
                }
                Part::Date => {
                    let _ = write!(out, "{y:04}-{mo:02}-{d:02}");
                }
                Part::Hour => {
                    let _ = write!(out, "{:02}", day_secs / 3600);
                }
                Part::Minute => {
                    let _ = write!(out, "{:02}", day_secs % 3600 / 60);
                }
                Part::Timestamp => {
                    let _ = write!(out, "{}", input.first.timestamp);
                }
                Part::FirstOffset => {
                    let _ = write!(out, "{:020}", input.first.offset);
                }
                Part::LastOffset => match input.last_offset {
                    Some(o) => {
                        let _ = write!(out, "{o:020}");
                    }
                    None => return Err("the key needs {last_offset}, not known yet".to_owned()),
                },
                Part::Header(name) => match header(&input.first.headers, name) {
                    Some(h) => escape_into(out, &h.value_string()),
                    None => {
                        return Err(format!(
                            "the key template needs header {name:?}, which the object's first message (offset {}) does not have",
                            input.first.offset
                        ));
                    }
                },
                Part::Ext => out.push_str(input.ext),
            }
        }
        if out.len() > MAX_KEY {
            return Err(format!(
                "the key would be {} bytes, more than S3's {MAX_KEY}: {}…",
                out.len(),
                out.chars().take(80).collect::<String>()
            ));
        }
        Ok(())
    }
}

/// Appends `value` with every byte outside `A-Z a-z 0-9 - _ . ~` percent-encoded (a `/` in a
/// stream name does not make a new level; spaces, `+`, `&`, non-ASCII are safe everywhere).
pub fn escape_into(out: &mut String, value: &str) {
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

/// Parses `"UTC"`, `"Z"` or a fixed offset `"+02:00"` / `"-0530"` into seconds east of UTC.
pub fn parse_time_zone(tz: &str) -> Result<i32, String> {
    if tz.eq_ignore_ascii_case("utc") || tz == "Z" {
        return Ok(0);
    }
    let bad = || format!("{tz:?} is not \"UTC\" or an offset such as \"+02:00\"");
    let (sign, rest) = match tz.as_bytes().first() {
        Some(b'+') => (1, &tz[1..]),
        Some(b'-') => (-1, &tz[1..]),
        _ => return Err(bad()),
    };
    let digits: String = rest.chars().filter(|c| *c != ':').collect();
    if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let h: i32 = digits[..2].parse().map_err(|_| bad())?;
    let m: i32 = digits[2..].parse().map_err(|_| bad())?;
    if h > 14 || m > 59 {
        return Err(bad());
    }
    Ok(sign * (h * 3600 + m * 60))
}

/// The proleptic Gregorian date of a day number (days since 1970-01-01).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::rc::Rc;

    use bytes::Bytes;

    use super::*;
    use crate::message::encode_headers;

    fn part() -> PartitionInfo {
        PartitionInfo {
            slot: 0,
            stream: Rc::from("my stream/1"),
            topic: Rc::from("orders"),
            partition: 3,
        }
    }

    fn msg(ts_us: u64) -> Message {
        Message {
            offset: 42,
            id: 1,
            timestamp: ts_us,
            origin_timestamp: ts_us,
            payload: Bytes::new(),
            headers: encode_headers(&[("site", "north pole")]),
        }
    }

    #[test]
    fn renders_every_placeholder_from_the_data() {
        let t = KeyTemplate::parse(
            "{stream}/{topic}/{date}/{hour}/{minute}/{header.site}/{partition}-{first_offset}-{last_offset}.{ext}",
        )
        .unwrap();
        // 2024-02-29T23:59:30Z
        let m = msg(1_709_251_170_000_000);
        let mut out = String::new();
        let input = KeyInput {
            partition: &part(),
            first: &m,
            last_offset: Some(99),
            ext: "jsonl.gz",
        };
        t.render("raw/", 0, &input, &mut out).unwrap();
        assert_eq!(
            out,
            "raw/my%20stream%2F1/orders/2024-02-29/23/59/north%20pole/3-00000000000000000042-00000000000000000099.jsonl.gz"
        );
        // The same instant at +01:00 is the next day.
        t.render("", 3600, &input, &mut out).unwrap();
        assert!(out.contains("/2024-03-01/00/59/"), "{out}");
    }

    #[test]
    fn templates_that_cannot_work_are_refused() {
        assert!(
            KeyTemplate::parse("{stream}/{partition}.json")
                .unwrap_err()
                .contains("first_offset")
        );
        assert!(
            KeyTemplate::parse("{stream}/{first_offset}")
                .unwrap_err()
                .contains("{partition}")
        );
        assert!(
            KeyTemplate::parse("{partition}/{first_offset}/{nope}")
                .unwrap_err()
                .contains("{nope}")
        );
        assert!(
            KeyTemplate::parse("{partition}/{first_offset}/{date")
                .unwrap_err()
                .contains("unclosed")
        );
        let t = KeyTemplate::parse("{partition}-{first_offset}-{header.x}").unwrap();
        let m = msg(0);
        let input = KeyInput {
            partition: &part(),
            first: &m,
            last_offset: None,
            ext: "",
        };
        let mut out = String::new();
        assert!(
            t.render("", 0, &input, &mut out)
                .unwrap_err()
                .contains("\"x\"")
        );
        let long = "p".repeat(1100);
        let t = KeyTemplate::parse("{partition}-{first_offset}").unwrap();
        assert!(
            t.render(&long, 0, &input, &mut out)
                .unwrap_err()
                .contains("1024")
        );
    }

    #[test]
    fn time_zones_and_dates() {
        assert_eq!(parse_time_zone("UTC").unwrap(), 0);
        assert_eq!(parse_time_zone("+02:00").unwrap(), 7200);
        assert_eq!(parse_time_zone("-0530").unwrap(), -19_800);
        assert!(parse_time_zone("Europe/Paris").is_err());
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }
}
