//! S3 object key templates (`s3.key`) and the zone their dates are written in
//! (`s3.time_zone`). Everything that goes into a key comes from the object's data (its
//! partition, its first message's time and headers, its offsets), never from the wall clock,
//! so writing the same messages again gives the same key: a replay overwrites an object
//! instead of adding a second copy.

use std::fmt::Write as _;

use jiff::Timestamp;
use jiff::tz::{Offset, TimeZone};

use super::{Field, Name, Piece, Template, Vocabulary};
use crate::message::{Message, PartitionInfo, header};

/// S3's limit on a key, in bytes.
pub const MAX_KEY: usize = 1024;

/// The placeholders of keys; all but the last (the last offset) are also those of values.
const KEY_NAMES: &[(&str, Name)] = &[
    ("stream", Name::Stream),
    ("topic", Name::Topic),
    ("partition", Name::Partition),
    ("date", Name::Date),
    ("year", Name::Year),
    ("month", Name::Month),
    ("day", Name::Day),
    ("hour", Name::Hour),
    ("minute", Name::Minute),
    ("timestamp", Name::Timestamp),
    ("first_offset", Name::FirstOffset),
    ("ext", Name::Ext),
    ("last_offset", Name::LastOffset),
];

/// What a key template takes.
pub const VOCABULARY: Vocabulary = Vocabulary {
    names: KEY_NAMES,
    header: true,
    json: true,
};

/// The default `s3.key`.
pub const DEFAULT: &str = "{stream}/{topic}/{date}/{hour}/{partition}-{first_offset}.{ext}";

/// A parsed `s3.key`: it has `{partition}` and `{first_offset}`, so no two objects share a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTemplate(Template);

super::from_text!(KeyTemplate);

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
    /// The object's values of the template's `{header.NAME}` and `{json./POINTER}` fields, in
    /// their order ([`KeyTemplate::split_values`]): every message of a split object has them.
    /// `None`: taken from `first`.
    pub split: Option<&'a [String]>,
}

impl KeyTemplate {
    /// Parses `text`; an unknown placeholder, or a template that would give two objects one
    /// key, is an error saying so.
    pub fn parse(text: &str) -> Result<KeyTemplate, String> {
        let t = Template::parse(text, &VOCABULARY)?;
        if !t.has(Name::FirstOffset) {
            return Err(format!(
                "{text:?} has no {{first_offset}}: without it two objects of a partition would get the same key"
            ));
        }
        if !t.has(Name::Partition) {
            return Err(format!(
                "{text:?} has no {{partition}}: without it objects of two partitions could get the same key"
            ));
        }
        Ok(KeyTemplate(t))
    }

    /// The template itself.
    pub fn template(&self) -> &Template {
        &self.0
    }

    /// Whether the key needs the object's last offset (then the object is sent whole at
    /// close, so it must fit in one part).
    pub fn needs_last_offset(&self) -> bool {
        self.0.has(Name::LastOffset)
    }

    /// Whether the key takes values from the messages (`{header.NAME}`, `{json./POINTER}`):
    /// then a partition's messages are split into one object per distinct set of values.
    pub fn splits(&self) -> bool {
        self.0
            .pieces()
            .iter()
            .any(|p| matches!(p, Piece::Field(Field::Header(_) | Field::Json(_))))
    }

    /// The pointers of the template's split fields in their order (`None` for a header).
    pub fn split_pointers(&self) -> Vec<Option<&str>> {
        self.0
            .pieces()
            .iter()
            .filter_map(|p| match p {
                Piece::Field(Field::Json(pointer)) => Some(Some(pointer.as_str())),
                Piece::Field(Field::Header(_)) => Some(None),
                _ => None,
            })
            .collect()
    }

    /// The values of `m` for the template's `{header.NAME}` and `{json./POINTER}` fields, in
    /// their order, into `out` (cleared first); the error names the field `m` lacks.
    pub fn split_values(&self, m: &Message, out: &mut Vec<String>) -> Result<(), String> {
        out.clear();
        for piece in self.0.pieces() {
            match piece {
                Piece::Field(Field::Header(name)) => match header(&m.headers, name) {
                    Some(h) => out.push(h.value_string()),
                    None => {
                        return Err(format!(
                            "the key template needs header {name:?}, which the message at offset {} does not have",
                            m.offset
                        ));
                    }
                },
                Piece::Field(Field::Json(pointer)) => {
                    out.push(json_field(&m.payload, pointer, m.offset)?);
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Renders `prefix` + the template into `out` (cleared first), dates in `zone`.
    pub fn render(
        &self,
        prefix: &str,
        zone: &KeyZone,
        input: &KeyInput<'_>,
        out: &mut String,
    ) -> Result<(), String> {
        out.clear();
        out.push_str(prefix);
        render_fields(&self.0, zone, input, out, true)?;
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

/// Renders the fields of a key or value template for `input` into `out` (appended to);
/// `escape`: percent-encode what comes from the data (keys), or take it as it is (values).
fn render_fields(
    t: &Template,
    zone: &KeyZone,
    input: &KeyInput<'_>,
    out: &mut String,
    escape: bool,
) -> Result<(), String> {
    let put = |out: &mut String, v: &str| {
        if escape {
            escape_into(out, v);
        } else {
            out.push_str(v);
        }
    };
    let mut civil = None;
    // The object's values of the header and JSON fields, in order (a split object's).
    let mut values = input.split.filter(|_| escape).map(|v| v.iter());
    t.render_into(out, |field, out| {
        if let (Some(values), Field::Header(_) | Field::Json(_)) = (values.as_mut(), field) {
            match values.next() {
                Some(v) => put(out, v),
                None => return Err("the object has fewer split values than the key template".to_owned()),
            }
            return Ok(());
        }
        match field {
            Field::Named(Name::Stream) => put(out, &input.partition.stream),
            Field::Named(Name::Topic) => put(out, &input.partition.topic),
            Field::Named(Name::Partition) => {
                let _ = write!(out, "{}", input.partition.partition);
            }
            Field::Named(
                n @ (Name::Date | Name::Year | Name::Month | Name::Day | Name::Hour | Name::Minute),
            ) => {
                let t = match civil {
                    Some(t) => t,
                    None => *civil.insert(zone.civil(input.first.timestamp)?),
                };
                let _ = match n {
                    Name::Date => write!(out, "{:04}-{:02}-{:02}", t.year(), t.month(), t.day()),
                    Name::Year => write!(out, "{:04}", t.year()),
                    Name::Month => write!(out, "{:02}", t.month()),
                    Name::Day => write!(out, "{:02}", t.day()),
                    Name::Hour => write!(out, "{:02}", t.hour()),
                    _ => write!(out, "{:02}", t.minute()),
                };
            }
            Field::Named(Name::Timestamp) => {
                let _ = write!(out, "{}", input.first.timestamp);
            }
            Field::Named(Name::FirstOffset) => {
                let _ = write!(out, "{:020}", input.first.offset);
            }
            Field::Named(Name::LastOffset) => match input.last_offset {
                Some(o) => {
                    let _ = write!(out, "{o:020}");
                }
                None => return Err("the key needs {last_offset}, not known yet".to_owned()),
            },
            Field::Named(Name::Ext) => out.push_str(input.ext),
            Field::Header(name) => match header(&input.first.headers, name) {
                Some(h) => put(out, &h.value_string()),
                None => {
                    return Err(format!(
                        "the template needs header {name:?}, which the object's first message (offset {}) does not have",
                        input.first.offset
                    ));
                }
            },
            Field::Json(pointer) => {
                put(out, &json_field(&input.first.payload, pointer, input.first.offset)?);
            }
            Field::Named(_) => {}
        }
        Ok(())
    })?;
    Ok(())
}

/// The value of a key's `{json./POINTER}` in the payload of the message at `offset`; the error
/// names the pointer and what is wrong.
fn json_field(payload: &[u8], pointer: &str, offset: u64) -> Result<String, String> {
    use super::pointer::{Found, find};
    match find(payload, pointer) {
        Ok(Found::Scalar(v)) => Ok(v),
        Ok(Found::NotScalar) => Err(format!(
            "the key template reads {{json.{pointer}}}: the payload's {pointer} is not a string, number or boolean (offset {offset})"
        )),
        Ok(Found::Missing) => Err(format!(
            "the key template reads {{json.{pointer}}}: the payload has no field {pointer} (offset {offset})"
        )),
        Err(e) => Err(format!(
            "the key template reads {{json.{pointer}}} but the payload at offset {offset} is not JSON: {e}"
        )),
    }
}

/// What a value template (`s3.user_metadata`, `s3.tags`) takes: what a key takes but the last
/// offset, which is not known when a multipart upload begins.
pub const VALUE_VOCABULARY: Vocabulary = Vocabulary {
    names: KEY_NAMES.split_at(KEY_NAMES.len() - 1).0,
    header: true,
    json: false,
};

/// A user metadata or tag value of an object: static, or a template of the object's
/// partition and first message, rendered as it is (not percent-encoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueTemplate(Template);

super::from_text!(ValueTemplate);

impl ValueTemplate {
    /// Parses `text`; an unknown placeholder is an error naming it.
    pub fn parse(text: &str) -> Result<ValueTemplate, String> {
        Template::parse(text, &VALUE_VOCABULARY).map(ValueTemplate)
    }

    /// The template itself.
    pub fn template(&self) -> &Template {
        &self.0
    }

    /// The value for the object `input` begins, dates in `zone`.
    pub fn render(&self, zone: &KeyZone, input: &KeyInput<'_>) -> Result<String, String> {
        let mut out = String::new();
        render_fields(&self.0, zone, input, &mut out, false)?;
        Ok(out)
    }
}

impl Default for KeyTemplate {
    fn default() -> Self {
        match KeyTemplate::parse(DEFAULT) {
            Ok(t) => t,
            // DEFAULT is a constant that the tests parse.
            Err(e) => unreachable!("the default key template does not parse: {e}"),
        }
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

/// Where the time of a message's key fields (`{date}`, `{year}` ... `{minute}`,
/// `{timestamp}`) and of `record_interval` comes from (`s3.time_source`): always from the
/// message itself, so a replay gives the same keys and cuts the same objects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum TimeSource {
    /// Iggy's append timestamp (`"timestamp"`).
    #[default]
    Append,
    /// The producer's origin timestamp (`"origin_timestamp"`).
    Origin,
    /// A field of the JSON payload (`"json:/POINTER"`): an RFC 3339 time, or a number of
    /// seconds, milliseconds, microseconds or nanoseconds since the Unix epoch (told apart by
    /// size: below 10^11 seconds, 10^14 milliseconds, 10^17 microseconds).
    Json(String),
    /// A field of the JSON payload read as a Parquet `timestamp` column reads it: integer
    /// milliseconds since the epoch, or RFC 3339. Not in the config: an Iceberg table
    /// partitioned by the day or hour of such a column cuts its files by it, so a file's
    /// partition value is the column's own.
    JsonMillis(String),
}

super::from_text!(TimeSource);

impl TimeSource {
    /// Parses `"timestamp"`, `"origin_timestamp"` or `"json:/POINTER"`.
    pub fn parse(text: &str) -> Result<TimeSource, String> {
        match text {
            "timestamp" => Ok(TimeSource::Append),
            "origin_timestamp" => Ok(TimeSource::Origin),
            _ => match text.strip_prefix("json:") {
                Some(p) if p.starts_with('/') => Ok(TimeSource::Json(p.to_owned())),
                _ => Err(format!(
                    "{text:?} is not \"timestamp\", \"origin_timestamp\" or \"json:/POINTER\" (e.g. \"json:/created_at\")"
                )),
            },
        }
    }

    /// The time of `m` in µs since the Unix epoch; the error names what is missing.
    pub fn micros(&self, m: &Message) -> Result<u64, String> {
        match self {
            TimeSource::Append => Ok(m.timestamp),
            TimeSource::Origin => Ok(m.origin_timestamp),
            TimeSource::Json(pointer) => {
                let v = json_field(&m.payload, pointer, m.offset)
                    .map_err(|e| e.replacen("the key template reads", "s3.time_source reads", 1))?;
                parse_time(&v).map_err(|e| {
                    format!(
                        "s3.time_source reads {pointer} of the payload at offset {}: {e}",
                        m.offset
                    )
                })
            }
            TimeSource::JsonMillis(pointer) => {
                let v = json_field(&m.payload, pointer, m.offset)
                    .map_err(|e| e.replacen("the key template reads", "s3.time_source reads", 1))?;
                let micros = match v.parse::<i64>() {
                    Ok(ms) => ms.checked_mul(1000),
                    Err(_) => v.parse::<Timestamp>().ok().map(|t| t.as_microsecond()),
                };
                micros.and_then(|us| u64::try_from(us).ok()).ok_or_else(|| {
                    format!(
                        "the partition column at {pointer} of the payload at offset {} is \
                             {v:?}: not a time since 1970 in integer milliseconds or RFC 3339",
                        m.offset
                    )
                })
            }
        }
    }
}

/// A time from a payload field: RFC 3339, or a number since the epoch in the unit its size
/// tells (see [`TimeSource::Json`]).
fn parse_time(v: &str) -> Result<u64, String> {
    if let Ok(n) = v.parse::<u64>() {
        return Ok(match n {
            0..100_000_000_000 => n * 1_000_000,
            100_000_000_000..100_000_000_000_000 => n * 1_000,
            100_000_000_000_000..100_000_000_000_000_000 => n,
            _ => n / 1_000,
        });
    }
    let t: Timestamp = v.parse().map_err(|e| {
        format!("{v:?} is neither an RFC 3339 time nor a number since the epoch ({e})")
    })?;
    u64::try_from(t.as_microsecond()).map_err(|_| format!("{v:?} is before 1970"))
}

/// The zone of `{date}`, `{hour}` and `{minute}` (`s3.time_zone`): `"UTC"`, `"Z"`, a fixed
/// offset such as `"+02:00"` or `"-0530"`, or an IANA zone such as `"Europe/Berlin"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyZone(TimeZone);

super::from_text!(KeyZone);

impl Default for KeyZone {
    fn default() -> Self {
        KeyZone(TimeZone::UTC)
    }
}

impl KeyZone {
    /// Parses a zone; the error says what is accepted.
    pub fn parse(tz: &str) -> Result<KeyZone, String> {
        if tz.eq_ignore_ascii_case("utc") || tz == "Z" {
            return Ok(KeyZone(TimeZone::UTC));
        }
        let bad = || {
            format!(
                "{tz:?} is not \"UTC\", an offset such as \"+02:00\" or an IANA zone such as \
                 \"Europe/Berlin\""
            )
        };
        let (sign, rest) = match tz.as_bytes().first() {
            Some(b'+') => (1, &tz[1..]),
            Some(b'-') => (-1, &tz[1..]),
            // An IANA name, with its daylight-saving rules: from the system's tz database when
            // it has the zone, else from the copy built into the binary.
            Some(_) if tz.contains('/') || tz.bytes().all(|b| b.is_ascii_alphabetic()) => {
                return TimeZone::get(tz)
                    .map(KeyZone)
                    .map_err(|e| format!("{}: {e}", bad()));
            }
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
        let offset = Offset::from_seconds(sign * (h * 3600 + m * 60)).map_err(|_| bad())?;
        Ok(KeyZone(TimeZone::fixed(offset)))
    }

    /// The civil time in this zone of `micros` µs since the Unix epoch.
    pub fn civil(&self, micros: u64) -> Result<jiff::civil::DateTime, String> {
        let t = i64::try_from(micros)
            .ok()
            .and_then(|us| Timestamp::from_microsecond(us).ok())
            .ok_or_else(|| {
                format!("the timestamp {micros} µs is beyond the dates a key can hold")
            })?;
        Ok(self.0.to_datetime(t))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::rc::Rc;

    use crate::ids::{PartitionId, Slot};

    use bytes::Bytes;

    #[test]
    fn a_partition_column_s_time_is_read_as_the_column_reads_it() {
        let m = |payload: &str| Message {
            offset: 9,
            id: 1,
            timestamp: 0,
            origin_timestamp: 0,
            payload: Bytes::from(payload.to_owned()),
            headers: Bytes::new(),
        };
        let secs = m(r#"{"ts":1796601600}"#);
        let json = TimeSource::Json("/ts".to_owned());
        let column = TimeSource::JsonMillis("/ts".to_owned());
        // By size as seconds, but as a Parquet timestamp column reads it: milliseconds.
        assert_eq!(json.micros(&secs).unwrap(), 1_796_601_600_000_000);
        assert_eq!(column.micros(&secs).unwrap(), 1_796_601_600_000);
        let text = m(r#"{"ts":"2026-12-07T00:00:00Z"}"#);
        assert_eq!(column.micros(&text).unwrap(), 1_796_601_600_000_000);
        assert!(
            column
                .micros(&m(r#"{"ts":-5}"#))
                .unwrap_err()
                .contains("since 1970")
        );
    }

    use super::*;
    use crate::message::encode_headers;

    fn part() -> PartitionInfo {
        PartitionInfo {
            slot: Slot(0),
            stream: Rc::from("my stream/1"),
            topic: Rc::from("orders"),
            partition: PartitionId(3),
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
            split: None,
        };
        t.render("raw/", &KeyZone::default(), &input, &mut out)
            .unwrap();
        assert_eq!(
            out,
            "raw/my%20stream%2F1/orders/2024-02-29/23/59/north%20pole/3-00000000000000000042-00000000000000000099.jsonl.gz"
        );
        // The same instant at +01:00 is the next day.
        let plus1 = KeyZone::parse("+01:00").unwrap();
        t.render("", &plus1, &input, &mut out).unwrap();
        assert!(out.contains("/2024-03-01/00/59/"), "{out}");
        let t = KeyTemplate::parse("{timestamp}-{partition}-{first_offset}").unwrap();
        t.render("", &plus1, &input, &mut out).unwrap();
        assert_eq!(out, "1709251170000000-3-00000000000000000042");
    }

    /// A key with header or JSON fields splits, and takes each object's values in the order
    /// of its fields (escaped as the rest of the data is); a message without one is told
    /// apart by the field it lacks.
    #[test]
    fn header_and_json_fields_split_and_render_the_objects_values() {
        assert!(!KeyTemplate::default().splits());
        let t = KeyTemplate::parse(
            "{json./region}/{header.site}/{json.a.b}/{partition}-{first_offset}",
        )
        .unwrap();
        assert!(t.splits());
        let mut m = msg(0);
        m.payload = Bytes::from_static(br#"{"region":"us west","a":{"b":7}}"#);
        let mut values = Vec::new();
        t.split_values(&m, &mut values).unwrap();
        assert_eq!(values, ["us west", "north pole", "7"]);
        let p = part();
        let first = msg(0);
        let input = KeyInput {
            partition: &p,
            first: &first,
            last_offset: None,
            ext: "",
            split: Some(&values),
        };
        let mut out = String::new();
        t.render("", &KeyZone::default(), &input, &mut out).unwrap();
        assert_eq!(out, "us%20west/north%20pole/7/3-00000000000000000042");
        // Without split values the fields come from the first message itself.
        let input = KeyInput {
            first: &m,
            split: None,
            ..input
        };
        t.render("", &KeyZone::default(), &input, &mut out).unwrap();
        assert_eq!(out, "us%20west/north%20pole/7/3-00000000000000000042");

        m.payload = Bytes::from_static(br#"{"a":{"b":7}}"#);
        let e = t.split_values(&m, &mut values).unwrap_err();
        assert!(e.contains("/region") && e.contains("offset 42"), "{e}");
        m.payload = Bytes::from_static(br#"{"region":{"x":1}}"#);
        let e = t.split_values(&m, &mut values).unwrap_err();
        assert!(e.contains("not a string, number or boolean"), "{e}");
        m.payload = Bytes::from_static(b"not json");
        let e = t.split_values(&m, &mut values).unwrap_err();
        assert!(e.contains("not JSON"), "{e}");
        m.payload = Bytes::from_static(br#"{"region":"eu","a":{"b":true}}"#);
        m.headers = Bytes::new();
        let e = t.split_values(&m, &mut values).unwrap_err();
        assert!(e.contains("header \"site\""), "{e}");
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
        assert!(
            KeyTemplate::parse("{partition}/{first_offset}/{jsn.a}")
                .unwrap_err()
                .contains("{json./POINTER}")
        );
        let t = KeyTemplate::parse("{partition}-{first_offset}-{header.x}").unwrap();
        let m = msg(0);
        let input = KeyInput {
            partition: &part(),
            first: &m,
            last_offset: None,
            ext: "",
            split: None,
        };
        let mut out = String::new();
        let utc = KeyZone::default();
        assert!(
            t.render("", &utc, &input, &mut out)
                .unwrap_err()
                .contains("\"x\"")
        );
        let long = "p".repeat(1100);
        let t = KeyTemplate::parse("{partition}-{first_offset}").unwrap();
        assert!(
            t.render(&long, &utc, &input, &mut out)
                .unwrap_err()
                .contains("1024")
        );
        let t = KeyTemplate::parse("{partition}-{first_offset}-{last_offset}").unwrap();
        assert!(t.render("", &utc, &input, &mut out).is_err());
    }

    /// Hive-style partition paths for Athena and Glue partition projection, from the time
    /// the config names: Iggy's, the producer's, or a payload field (RFC 3339 or a number in
    /// the unit its size tells).
    #[test]
    fn hive_style_dates_from_the_time_source() {
        let t = KeyTemplate::parse(
            "year={year}/month={month}/day={day}/hour={hour}/{partition}-{first_offset}.{ext}",
        )
        .unwrap();
        let render = |first: &Message| {
            let mut out = String::new();
            let input = KeyInput {
                partition: &part(),
                first,
                last_offset: None,
                ext: "jsonl",
                split: None,
            };
            t.render("", &KeyZone::default(), &input, &mut out).unwrap();
            out
        };
        // 2026-12-06T09:05:00Z.
        let dec6 = 1_796_547_900_000_000;
        assert_eq!(
            render(&msg(dec6)),
            "year=2026/month=12/day=06/hour=09/3-00000000000000000042.jsonl"
        );
        let mut m = msg(0);
        m.origin_timestamp = dec6;
        m.payload = Bytes::from_static(br#"{"at":"2025-03-04T05:06:07Z","n":1741064767123}"#);
        let micros = |source: &str| TimeSource::parse(source).unwrap().micros(&m).unwrap();
        assert_eq!(micros("timestamp"), 0);
        assert_eq!(micros("origin_timestamp"), dec6);
        let at = 1_741_064_767_000_000;
        assert_eq!(micros("json:/at"), at);
        assert_eq!(micros("json:/n"), at + 123_000, "milliseconds");
        let mut copy = m.clone();
        copy.timestamp = micros("json:/at");
        assert_eq!(
            render(&copy),
            "year=2025/month=03/day=04/hour=05/3-00000000000000000042.jsonl"
        );
        // Seconds, milliseconds, microseconds and nanoseconds of one instant.
        for n in [
            "1741064767",
            "1741064767000",
            "1741064767000000",
            "1741064767000000000",
        ] {
            assert_eq!(parse_time(n), Ok(at), "{n}");
        }
        let missing = TimeSource::parse("json:/when")
            .unwrap()
            .micros(&m)
            .unwrap_err();
        assert!(
            missing.contains("s3.time_source reads {json./when}") && missing.contains("offset 42"),
            "{missing}"
        );
        m.payload = Bytes::from_static(br#"{"when":"yesterday"}"#);
        let bad = TimeSource::parse("json:/when")
            .unwrap()
            .micros(&m)
            .unwrap_err();
        assert!(
            bad.contains("neither an RFC 3339 time nor a number"),
            "{bad}"
        );
        let wrong = TimeSource::parse("payload.at").unwrap_err();
        assert!(wrong.contains("json:/POINTER"), "{wrong}");
    }

    #[test]
    fn the_default_parses() {
        let t = KeyTemplate::default();
        assert_eq!(t.template().text(), DEFAULT);
        assert!(!t.needs_last_offset());
    }

    #[test]
    fn zones_and_dates() {
        let utc = KeyZone::default();
        assert_eq!(KeyZone::parse("UTC").unwrap(), utc);
        assert_eq!(KeyZone::parse("Z").unwrap(), utc);
        let at = |z: &KeyZone, us: u64| {
            let t = z.civil(us).unwrap();
            (t.year(), t.month(), t.day(), t.hour(), t.minute())
        };
        assert_eq!(at(&utc, 0), (1970, 1, 1, 0, 0));
        // 2024-02-29T00:00:00Z, a leap day.
        assert_eq!(at(&utc, 1_709_164_800_000_000), (2024, 2, 29, 0, 0));
        assert_eq!(
            at(&KeyZone::parse("+02:00").unwrap(), 0),
            (1970, 1, 1, 2, 0)
        );
        assert_eq!(
            at(&KeyZone::parse("-0530").unwrap(), 0),
            (1969, 12, 31, 18, 30)
        );
        for bad in [
            "Europe/Atlantis",
            "+2",
            "+15:00",
            "+01:60",
            "",
            "02:00",
            "Mars",
        ] {
            assert!(KeyZone::parse(bad).is_err(), "{bad}");
        }
        assert!(utc.civil(u64::MAX).is_err());
    }

    /// Europe/Berlin around both daylight-saving changes of 2026: on 29 March the clocks go
    /// from 02:00 CET to 03:00 CEST (01:00 UTC), so the hour before is 01 and the hour after
    /// is 03, with no 02; on 25 October from 03:00 CEST back to 02:00 CET (01:00 UTC), so the
    /// hour 02 comes twice, an hour apart.
    #[test]
    fn iana_zones_follow_daylight_saving_time() {
        let berlin = KeyZone::parse("Europe/Berlin").unwrap();
        let at = |iso: &str| {
            let ts: Timestamp = iso.parse().unwrap();
            let t = berlin
                .civil(u64::try_from(ts.as_microsecond()).unwrap())
                .unwrap();
            (t.month(), t.day(), t.hour(), t.minute())
        };
        assert_eq!(at("2026-03-29T00:59:59Z"), (3, 29, 1, 59));
        assert_eq!(at("2026-03-29T01:00:00Z"), (3, 29, 3, 0));
        assert_eq!(at("2026-03-29T01:30:00Z"), (3, 29, 3, 30));
        assert_eq!(at("2026-10-25T00:30:00Z"), (10, 25, 2, 30));
        assert_eq!(at("2026-10-25T01:30:00Z"), (10, 25, 2, 30));
        assert_eq!(at("2026-10-25T02:30:00Z"), (10, 25, 3, 30));
        // Winter and summer offsets.
        assert_eq!(at("2026-01-15T23:30:00Z"), (1, 16, 0, 30));
        assert_eq!(at("2026-07-15T22:30:00Z"), (7, 16, 0, 30));
        // The key a template makes in that zone, the hour before and after the change.
        let t = KeyTemplate::parse("{date}/{hour}/{partition}-{first_offset}").unwrap();
        let p = part();
        let key = |iso: &str| {
            let ts: Timestamp = iso.parse().unwrap();
            let mut m = msg(u64::try_from(ts.as_microsecond()).unwrap());
            m.offset = 7;
            let input = KeyInput {
                partition: &p,
                first: &m,
                last_offset: None,
                ext: "jsonl",
                split: None,
            };
            let mut out = String::new();
            t.render("", &berlin, &input, &mut out).unwrap();
            out
        };
        assert_eq!(
            key("2026-03-29T00:30:00Z"),
            "2026-03-29/01/3-00000000000000000007"
        );
        assert_eq!(
            key("2026-03-29T01:30:00Z"),
            "2026-03-29/03/3-00000000000000000007"
        );
        assert!(KeyZone::parse("UTC").is_ok() && KeyZone::parse("America/New_York").is_ok());
    }
}
