//! Messages as sinks see them: Iggy metadata plus payload and user headers, both `Bytes`
//! slices of the poll reply (never copied).

use std::rc::Rc;

use bytes::Bytes;

use crate::ids::{PartitionId, Slot};

/// A partition of one sink on one shard. `slot` is the index sinks use to report outcomes.
#[derive(Debug)]
pub struct PartitionInfo {
    /// The runner's index for this partition (stable while the partition is owned).
    pub slot: Slot,
    /// Stream name (or id, as text).
    pub stream: Rc<str>,
    /// Topic name (or id, as text).
    pub topic: Rc<str>,
    /// Partition id.
    pub partition: PartitionId,
}

/// One message. Its `Debug` shows the metadata and the sizes, never the payload or headers.
#[derive(Clone)]
pub struct Message {
    /// Offset in its partition.
    pub offset: u64,
    /// Message id (from the producer, or assigned by Iggy).
    pub id: u128,
    /// Broker append time, µs since the Unix epoch.
    pub timestamp: u64,
    /// Producer time, µs since the Unix epoch.
    pub origin_timestamp: u64,
    /// The payload.
    pub payload: Bytes,
    /// Raw Iggy user headers (see [`headers`]); empty when there are none.
    pub headers: Bytes,
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Message")
            .field("offset", &self.offset)
            .field("id", &self.id)
            .field("timestamp", &self.timestamp)
            .field("payload_len", &self.payload.len())
            .field("headers_len", &self.headers.len())
            .finish()
    }
}

/// Messages of one partition, in offset order.
#[derive(Debug)]
pub struct Batch {
    /// Where they come from.
    pub partition: Rc<PartitionInfo>,
    /// The messages (at least one).
    pub messages: Vec<Message>,
}

impl Batch {
    /// Payload bytes in the batch.
    pub fn payload_bytes(&self) -> u64 {
        self.messages.iter().map(|m| m.payload.len() as u64).sum()
    }
}

/// An Iggy header value kind (`HeaderKind` of the server).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderKind {
    /// Bytes.
    Raw,
    /// UTF-8 text.
    String,
    /// One byte, 0 or 1.
    Bool,
    /// Little-endian signed integer of this many bytes.
    Int(u8),
    /// Little-endian unsigned integer of this many bytes.
    Uint(u8),
    /// Little-endian IEEE float of this many bytes.
    Float(u8),
    /// A code this version does not know.
    Unknown(u8),
}

impl HeaderKind {
    fn from_code(code: u8) -> HeaderKind {
        match code {
            1 => HeaderKind::Raw,
            2 => HeaderKind::String,
            3 => HeaderKind::Bool,
            4 => HeaderKind::Int(1),
            5 => HeaderKind::Int(2),
            6 => HeaderKind::Int(4),
            7 => HeaderKind::Int(8),
            8 => HeaderKind::Int(16),
            9 => HeaderKind::Uint(1),
            10 => HeaderKind::Uint(2),
            11 => HeaderKind::Uint(4),
            12 => HeaderKind::Uint(8),
            13 => HeaderKind::Uint(16),
            14 => HeaderKind::Float(4),
            15 => HeaderKind::Float(8),
            other => HeaderKind::Unknown(other),
        }
    }
}

/// One user header.
#[derive(Debug, Clone, Copy)]
pub struct Header<'a> {
    /// Kind of the key (normally `String`).
    pub key_kind: HeaderKind,
    /// Key bytes.
    pub key: &'a [u8],
    /// Kind of the value.
    pub kind: HeaderKind,
    /// Value bytes.
    pub value: &'a [u8],
}

impl Header<'_> {
    /// The key as text (lossy for a non-UTF-8 key).
    pub fn key_str(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(self.key)
    }

    /// The value as text: strings as they are, numbers and booleans in decimal, raw bytes as
    /// lossy UTF-8.
    pub fn value_string(&self) -> String {
        let v = self.value;
        let int = |n: u8| -> Option<i128> {
            let n = usize::from(n);
            (v.len() == n).then(|| {
                let mut buf = [0u8; 16];
                buf[..n].copy_from_slice(v);
                let raw = i128::from_le_bytes(buf);
                // Sign-extend from n bytes.
                let shift = 128 - 8 * n as u32;
                (raw << shift) >> shift
            })
        };
        let uint = |n: u8| -> Option<u128> {
            let n = usize::from(n);
            (v.len() == n).then(|| {
                let mut buf = [0u8; 16];
                buf[..n].copy_from_slice(v);
                u128::from_le_bytes(buf)
            })
        };
        match self.kind {
            HeaderKind::Bool => match v {
                [0] => "false".to_owned(),
                [_] => "true".to_owned(),
                _ => String::from_utf8_lossy(v).into_owned(),
            },
            HeaderKind::Int(n) => int(n).map_or_else(|| hex(v), |x| x.to_string()),
            HeaderKind::Uint(n) => uint(n).map_or_else(|| hex(v), |x| x.to_string()),
            HeaderKind::Float(4) if v.len() == 4 => {
                f32::from_le_bytes([v[0], v[1], v[2], v[3]]).to_string()
            }
            HeaderKind::Float(8) if v.len() == 8 => {
                let mut b = [0u8; 8];
                b.copy_from_slice(v);
                f64::from_le_bytes(b).to_string()
            }
            _ => String::from_utf8_lossy(v).into_owned(),
        }
    }
}

fn hex(v: &[u8]) -> String {
    v.iter().map(|b| format!("{b:02x}")).collect()
}

/// Iterates the user headers of a message: `[key kind u8][key len u32][key][value kind
/// u8][value len u32][value]`... A malformed buffer yields an error and ends.
pub fn headers(raw: &[u8]) -> HeaderIter<'_> {
    HeaderIter { raw, pos: 0 }
}

/// See [`headers`].
#[derive(Debug)]
pub struct HeaderIter<'a> {
    raw: &'a [u8],
    pos: usize,
}

impl<'a> HeaderIter<'a> {
    fn field(&mut self) -> Option<(u8, &'a [u8])> {
        let kind = *self.raw.get(self.pos)?;
        let len_bytes = self.raw.get(self.pos + 1..self.pos + 5)?;
        let len = u32::from_le_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]);
        let start = self.pos + 5;
        let data = self.raw.get(start..start.checked_add(len as usize)?)?;
        self.pos = start + len as usize;
        Some((kind, data))
    }
}

impl<'a> Iterator for HeaderIter<'a> {
    type Item = Result<Header<'a>, &'static str>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.raw.len() {
            return None;
        }
        let parsed = self.field().and_then(|(kk, key)| {
            self.field().map(|(vk, value)| Header {
                key_kind: HeaderKind::from_code(kk),
                key,
                kind: HeaderKind::from_code(vk),
                value,
            })
        });
        match parsed {
            Some(h) => Some(Ok(h)),
            None => {
                self.pos = self.raw.len();
                Some(Err("malformed user headers"))
            }
        }
    }
}

/// The value of header `name` (first match), if present and well formed.
pub fn header<'a>(raw: &'a [u8], name: &str) -> Option<Header<'a>> {
    headers(raw)
        .map_while(Result::ok)
        .find(|h| h.key == name.as_bytes())
}

/// Encodes string headers the way Iggy does (for tests).
#[cfg(test)]
pub fn encode_headers(pairs: &[(&str, &str)]) -> Bytes {
    let mut raw = Vec::new();
    for (k, v) in pairs {
        for data in [k.as_bytes(), v.as_bytes()] {
            raw.push(2);
            raw.extend_from_slice(&(data.len() as u32).to_le_bytes());
            raw.extend_from_slice(data);
        }
    }
    Bytes::from(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_no_payload() {
        let m = Message {
            offset: 7,
            id: 1,
            timestamp: 0,
            origin_timestamp: 0,
            payload: Bytes::from_static(b"secret-card-number"),
            headers: Bytes::from_static(b"hidden"),
        };
        let shown = format!("{m:?}");
        assert!(shown.contains("payload_len: 18"), "{shown}");
        assert!(
            !shown.contains("secret") && !shown.contains("hidden"),
            "{shown}"
        );
    }

    fn tlv(out: &mut Vec<u8>, kind: u8, data: &[u8]) {
        out.push(kind);
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        out.extend_from_slice(data);
    }

    #[test]
    fn parses_headers_of_each_kind() {
        let mut raw = Vec::new();
        tlv(&mut raw, 2, b"name");
        tlv(&mut raw, 2, b"value");
        tlv(&mut raw, 2, b"n");
        tlv(&mut raw, 6, &(-5i32).to_le_bytes());
        tlv(&mut raw, 2, b"u");
        tlv(&mut raw, 12, &7u64.to_le_bytes());
        tlv(&mut raw, 2, b"b");
        tlv(&mut raw, 3, &[1]);
        let all: Vec<(String, String)> = headers(&raw)
            .map(|h| h.map(|h| (h.key_str().into_owned(), h.value_string())))
            .collect::<Result<_, _>>()
            .unwrap_or_default();
        assert_eq!(
            all,
            vec![
                ("name".into(), "value".into()),
                ("n".into(), "-5".into()),
                ("u".into(), "7".into()),
                ("b".into(), "true".into())
            ]
        );
        assert_eq!(
            header(&raw, "u").map(|h| h.value_string()),
            Some("7".into())
        );
        assert!(header(&raw, "missing").is_none());
    }

    #[test]
    fn malformed_headers_are_an_error_not_a_panic() {
        let mut raw = Vec::new();
        tlv(&mut raw, 2, b"name");
        raw.extend_from_slice(&[2, 255, 255, 255, 255, b'x']);
        let items: Vec<_> = headers(&raw).collect();
        assert_eq!(items.len(), 1);
        assert!(items[0].is_err());
    }
}
