//! The one JSON writer of the sinks: escaped strings, payloads embedded as JSON when they are
//! JSON (else text or base64), and the records built from them: the flat record of the file
//! sink and the S3 JSON formats ([`RecordWriter`]) and the MQTT JSON envelope ([`envelope`]).

use base64::Engine as _;
use bytes::BufMut;

use std::rc::Rc;

use serde::Deserialize;

use crate::message::{self, HeaderKind, Message, PartitionInfo};

/// How a payload is written into JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PayloadEncoding {
    /// Embedded as JSON when it is valid JSON, else as UTF-8 text when it is valid UTF-8,
    /// else base64.
    #[default]
    Auto,
    /// Always base64.
    Base64,
    /// UTF-8 text (invalid sequences replaced); JSON is not embedded.
    Text,
}

/// The index of the first byte of `s` that a JSON string cannot hold as it is: `"`, `\\` or
/// a control character (below 0x20).
fn find_special(s: &[u8]) -> Option<usize> {
    scan::<false>(s)
}

/// [`find_special`], and with `NON_ASCII` also the first byte of 0x80 or above (where UTF-8
/// must be checked). Sixteen bytes a step with SSE2 (every x86_64 has it), else eight bytes
/// a step in a u64; the tail byte by byte.
fn scan<const NON_ASCII: bool>(s: &[u8]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    // SAFETY: the function needs SSE2, which every x86_64 target has (it is in the baseline
    // of the architecture; the Rust target enables it).
    let (base, found) = unsafe { sse2::scan::<NON_ASCII>(s) };
    #[cfg(not(target_arch = "x86_64"))]
    let (base, found) = swar::<NON_ASCII>(s);
    if found.is_some() {
        return found;
    }
    s[base..]
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20 || (NON_ASCII && b >= 0x80))
        .map(|i| base + i)
}

/// Eight bytes at a time: the first stop byte within the whole words of `s`, or how far the
/// words went.
#[cfg(any(not(target_arch = "x86_64"), test))]
fn swar<const NON_ASCII: bool>(s: &[u8]) -> (usize, Option<usize>) {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Per byte, the high bit is set where the byte is zero (for `x ^ c`: equal to c) or below
    // 0x20. Borrows can mark bytes above a true hit, never below it: the lowest mark is exact.
    let marks = |x: u64| {
        let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
        let m = zero(x ^ (ONES * u64::from(b'"')))
            | zero(x ^ (ONES * u64::from(b'\\')))
            | (x.wrapping_sub(ONES * 0x20) & !x & HIGH);
        if NON_ASCII { m | (x & HIGH) } else { m }
    };
    let mut base = 0;
    for chunk in s.chunks_exact(8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let m = marks(u64::from_le_bytes(word));
        if m != 0 {
            return (base, Some(base + m.trailing_zeros() as usize / 8));
        }
        base += 8;
    }
    (base, None)
}

#[cfg(target_arch = "x86_64")]
mod sse2 {
    use core::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8,
    };

    /// The first stop byte (see [`super::scan`]) within the whole 16-byte blocks of `s`, or how
    /// far the blocks went.
    #[target_feature(enable = "sse2")]
    pub(super) fn scan<const NON_ASCII: bool>(s: &[u8]) -> (usize, Option<usize>) {
        let quote = _mm_set1_epi8(b'"' as i8);
        let backslash = _mm_set1_epi8(b'\\' as i8);
        let control = _mm_set1_epi8(0x1f);
        let mut base = 0;
        for block in s.chunks_exact(16) {
            let v = load(block);
            // v <= 0x1f (unsigned) exactly where min(v, 0x1f) == v.
            let hits = _mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                _mm_cmpeq_epi8(_mm_min_epu8(v, control), v),
            );
            // The sign bit of every byte: its hit, and with NON_ASCII the byte's own high bit.
            let mut bits = _mm_movemask_epi8(hits) as u32;
            if NON_ASCII {
                bits |= _mm_movemask_epi8(v) as u32;
            }
            if bits != 0 {
                return (base, Some(base + bits.trailing_zeros() as usize));
            }
            base += 16;
        }
        (base, None)
    }

    /// The 16 bytes of `block` as a vector.
    #[allow(unsafe_code)]
    #[target_feature(enable = "sse2")]
    fn load(block: &[u8]) -> __m128i {
        assert!(block.len() >= 16);
        // SAFETY: `block` holds at least 16 readable bytes (checked above); the load is
        // unaligned (`loadu`), and SSE2 is part of every x86_64 target.
        unsafe { _mm_loadu_si128(block.as_ptr().cast()) }
    }
}

/// Appends `s` as a JSON string literal.
pub fn string(out: &mut impl BufMut, s: &[u8]) {
    out.put_u8(b'"');
    let text = String::from_utf8_lossy(s);
    let mut rest = text.as_bytes();
    while let Some(i) = find_special(rest) {
        out.put_slice(&rest[..i]);
        let b = rest[i];
        match b {
            b'"' => out.put_slice(b"\\\""),
            b'\\' => out.put_slice(b"\\\\"),
            b'\n' => out.put_slice(b"\\n"),
            b'\r' => out.put_slice(b"\\r"),
            b'\t' => out.put_slice(b"\\t"),
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.put_slice(&[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[usize::from(b >> 4)],
                    HEX[usize::from(b & 15)],
                ]);
            }
        }
        rest = &rest[i + 1..];
    }
    out.put_slice(rest);
    out.put_u8(b'"');
}

/// Containers nested this deep are not taken for JSON: serde_json refuses its 128th level, so
/// at most 127 are (empty containers count too).
const MAX_DEPTH: usize = 128;

/// Whether `payload` is one complete JSON value (RFC 8259, UTF-8), with whitespace around it
/// allowed. One pass, no allocation: this runs for every payload of a JSON sink in `auto`
/// mode, where a parse by serde_json cost more than the rest of the encoding.
pub fn is_json(payload: &[u8]) -> bool {
    // Most payloads that are not JSON give themselves away at their first byte.
    let first = payload.iter().find(|b| !b.is_ascii_whitespace());
    let may_be = matches!(
        first,
        Some(b'{' | b'[' | b'"' | b'-' | b'0'..=b'9' | b't' | b'f' | b'n')
    );
    // UTF-8 is checked inside strings only (see Scanner::string): outside them the grammar
    // takes ASCII bytes alone.
    may_be && Scanner { p: payload, i: 0 }.document()
}

/// The validator behind [`is_json`]: a loop over values with the open containers kept as a
/// bit stack (1 = object).
struct Scanner<'a> {
    p: &'a [u8],
    i: usize,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.p.get(self.i).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn document(mut self) -> bool {
        let mut stack = [0u64; MAX_DEPTH / 64];
        let mut depth = 0usize;
        let is_object = |stack: &[u64], d: usize| stack[(d - 1) / 64] >> ((d - 1) % 64) & 1 == 1;
        'value: loop {
            // A value is expected.
            self.skip_ws();
            match self.peek() {
                Some(open @ (b'{' | b'[')) => {
                    if depth + 1 >= MAX_DEPTH {
                        return false;
                    }
                    self.i += 1;
                    self.skip_ws();
                    let close = if open == b'{' { b'}' } else { b']' };
                    if !self.eat(close) {
                        let (word, bit) = (depth / 64, depth % 64);
                        if open == b'{' {
                            stack[word] |= 1 << bit;
                        } else {
                            stack[word] &= !(1 << bit);
                        }
                        depth += 1;
                        if open == b'{' && !self.key() {
                            return false;
                        }
                        continue 'value;
                    }
                }
                Some(b'"') => {
                    if !self.string() {
                        return false;
                    }
                }
                Some(b't') => {
                    if !self.literal(b"true") {
                        return false;
                    }
                }
                Some(b'f') => {
                    if !self.literal(b"false") {
                        return false;
                    }
                }
                Some(b'n') => {
                    if !self.literal(b"null") {
                        return false;
                    }
                }
                Some(b'-' | b'0'..=b'9') => {
                    if !self.number() {
                        return false;
                    }
                }
                _ => return false,
            }
            // After a value: close containers, or a comma and the next member.
            loop {
                self.skip_ws();
                if depth == 0 {
                    return self.i == self.p.len();
                }
                let object = is_object(&stack, depth);
                match self.peek() {
                    Some(b',') => {
                        self.i += 1;
                        if object && !self.key() {
                            return false;
                        }
                        continue 'value;
                    }
                    Some(b'}') if object => depth -= 1,
                    Some(b']') if !object => depth -= 1,
                    _ => return false,
                }
                self.i += 1;
            }
        }
    }

    /// An object member's name and its colon.
    fn key(&mut self) -> bool {
        self.skip_ws();
        if self.peek() != Some(b'"') || !self.string() {
            return false;
        }
        self.skip_ws();
        self.eat(b':')
    }

    /// A string, at its opening quote.
    fn string(&mut self) -> bool {
        self.i += 1;
        loop {
            // Plain ASCII in a run.
            match scan::<true>(&self.p[self.i..]) {
                None => return false,
                Some(n) => self.i += n,
            }
            match self.p[self.i] {
                b'"' => {
                    self.i += 1;
                    return true;
                }
                b'\\' => {
                    self.i += 1;
                    match self.peek() {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.i += 1,
                        Some(b'u') => {
                            // A surrogate escape must be a high one followed by a low one: a
                            // lone one is valid JSON text but no reader makes a string of it.
                            match self.hex4() {
                                Some(0xD800..=0xDBFF) => {
                                    if !(self.eat(b'\\')
                                        && self.peek() == Some(b'u')
                                        && matches!(self.hex4(), Some(0xDC00..=0xDFFF)))
                                    {
                                        return false;
                                    }
                                }
                                Some(0xDC00..=0xDFFF) | None => return false,
                                Some(_) => {}
                            }
                        }
                        _ => return false,
                    }
                }
                0x80.. => {
                    // Non-ASCII text up to the next quote, backslash or control byte: none
                    // of those can be inside a UTF-8 sequence, so the run is checked whole.
                    let run = &self.p[self.i..];
                    let end = find_special(run).unwrap_or(run.len());
                    if std::str::from_utf8(&run[..end]).is_err() {
                        return false;
                    }
                    self.i += end;
                }
                _ => return false, // a control character
            }
        }
    }

    /// At the `u` of a `\uXXXX` escape: the code unit, past it.
    fn hex4(&mut self) -> Option<u32> {
        let hex = self.p.get(self.i + 1..self.i + 5)?;
        let mut n = 0;
        for &h in hex {
            n = n * 16 + char::from(h).to_digit(16)?;
        }
        self.i += 5;
        Some(n)
    }

    fn literal(&mut self, word: &[u8]) -> bool {
        if self.p[self.i..].starts_with(word) {
            self.i += word.len();
            true
        } else {
            false
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.i += 1;
        }
        self.i - start
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    fn number(&mut self) -> bool {
        self.eat(b'-');
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return false,
        }
        if self.eat(b'.') && self.digits() == 0 {
            return false;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if !self.eat(b'+') {
                self.eat(b'-');
            }
            if self.digits() == 0 {
                return false;
            }
        }
        true
    }
}

/// Appends `"payload": ...` (or `"payload_base64": "..."`) for `payload` under `encoding`:
/// JSON is embedded as it is (its line breaks, which JSON only allows as whitespace, dropped
/// so the record stays on one line), UTF-8 text as a string, anything else as base64.
pub fn payload_field<B: BufMut>(out: &mut B, payload: &[u8], encoding: PayloadEncoding) {
    let as_base64 = |out: &mut B| {
        out.put_slice(b"\"payload_base64\":\"");
        let mut b64 = String::new();
        base64::engine::general_purpose::STANDARD.encode_string(payload, &mut b64);
        out.put_slice(b64.as_bytes());
        out.put_u8(b'"');
    };
    match encoding {
        PayloadEncoding::Base64 => as_base64(out),
        PayloadEncoding::Text => {
            out.put_slice(b"\"payload\":");
            string(out, payload);
        }
        PayloadEncoding::Auto => {
            if is_json(payload) {
                out.put_slice(b"\"payload\":");
                // Copied in runs between line breaks (most payloads have none).
                let mut rest = payload;
                while let Some(i) = memchr::memchr2(b'\n', b'\r', rest) {
                    out.put_slice(&rest[..i]);
                    rest = &rest[i + 1..];
                }
                out.put_slice(rest);
            } else if std::str::from_utf8(payload).is_ok() {
                out.put_slice(b"\"payload\":");
                string(out, payload);
            } else {
                as_base64(out);
            }
        }
    }
}

/// Which Iggy metadata a flat record carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meta {
    /// Stream, topic, partition, offset, id, timestamp, origin timestamp.
    All,
    /// The offset alone (the file sink without `metadata`).
    Offset,
    /// None.
    Off,
}

/// What a flat record holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordOptions {
    /// The metadata fields.
    pub meta: Meta,
    /// A `"headers"` object (written only for a message that has headers).
    pub headers: bool,
    /// How the payload is written.
    pub payload: PayloadEncoding,
}

/// Writes flat records, `{"stream":..,"topic":..,"partition":N,"offset":N,"id":"<decimal>",
/// "timestamp":N,"origin_timestamp":N,"headers":{"k":"v"},"payload":...}`, keeping the
/// partition's fields rendered while records of one partition follow each other.
#[derive(Debug, Default)]
pub struct RecordWriter {
    of: Option<(Rc<str>, Rc<str>, u32)>,
    partition: Vec<u8>,
}

impl RecordWriter {
    /// Appends one record (no separator) of `m` from `p` to `out`.
    pub fn record(
        &mut self,
        out: &mut impl BufMut,
        o: RecordOptions,
        p: &PartitionInfo,
        m: &Message,
    ) {
        out.put_u8(b'{');
        match o.meta {
            Meta::All => {
                out.put_slice(self.partition_fields(p));
                message_fields(out, m);
                out.put_u8(b',');
            }
            Meta::Offset => {
                out.put_slice(b"\"offset\":");
                decimal(out, u128::from(m.offset));
                out.put_u8(b',');
            }
            Meta::Off => {}
        }
        if o.headers && !m.headers.is_empty() {
            out.put_slice(b"\"headers\":");
            headers_object(out, &m.headers);
            out.put_u8(b',');
        }
        payload_field(out, &m.payload, o.payload);
        out.put_u8(b'}');
    }

    /// `"stream":..,"topic":..,"partition":N,` of `p`, rendered again only when `p` is not
    /// the partition of the last call.
    fn partition_fields(&mut self, p: &PartitionInfo) -> &[u8] {
        let same = self.of.as_ref().is_some_and(|(stream, topic, partition)| {
            *partition == p.partition.0 && **stream == *p.stream && **topic == *p.topic
        });
        if !same {
            self.partition.clear();
            partition_fields(&mut self.partition, p);
            self.of = Some((p.stream.clone(), p.topic.clone(), p.partition.0));
        }
        &self.partition
    }
}

/// `"stream":..,"topic":..,"partition":N,`.
fn partition_fields(out: &mut impl BufMut, p: &PartitionInfo) {
    out.put_slice(b"\"stream\":");
    string(out, p.stream.as_bytes());
    out.put_slice(b",\"topic\":");
    string(out, p.topic.as_bytes());
    out.put_slice(b",\"partition\":");
    decimal(out, u128::from(p.partition.0));
    out.put_u8(b',');
}

/// `"offset":N,"id":"<decimal>","timestamp":N,"origin_timestamp":N`.
fn message_fields(out: &mut impl BufMut, m: &Message) {
    out.put_slice(b"\"offset\":");
    decimal(out, u128::from(m.offset));
    out.put_slice(b",\"id\":\"");
    decimal(out, m.id);
    out.put_slice(b"\",\"timestamp\":");
    decimal(out, u128::from(m.timestamp));
    out.put_slice(b",\"origin_timestamp\":");
    decimal(out, u128::from(m.origin_timestamp));
}

/// The MQTT JSON envelope, `{"metadata":{...},"headers":{...},"payload":...}`, with
/// `"error"` before the payload for a dead letter.
pub fn envelope(
    out: &mut impl BufMut,
    p: &PartitionInfo,
    m: &Message,
    error: Option<&str>,
    payload: PayloadEncoding,
) {
    out.put_slice(b"{\"metadata\":{");
    partition_fields(out, p);
    message_fields(out, m);
    out.put_slice(b"},\"headers\":");
    headers_object(out, &m.headers);
    out.put_u8(b',');
    if let Some(e) = error {
        out.put_slice(b"\"error\":");
        string(out, e.as_bytes());
        out.put_u8(b',');
    }
    payload_field(out, &m.payload, payload);
    out.put_u8(b'}');
}

/// The Iggy user headers in `raw` as a JSON object of strings, `{"k":"v",...}`.
pub fn headers_object(out: &mut impl BufMut, raw: &[u8]) {
    out.put_u8(b'{');
    for (i, h) in message::headers(raw).map_while(Result::ok).enumerate() {
        if i > 0 {
            out.put_u8(b',');
        }
        string(out, h.key);
        out.put_u8(b':');
        match h.kind {
            // What value_string() gives for these, without its String.
            HeaderKind::Raw | HeaderKind::String | HeaderKind::Unknown(_) => string(out, h.value),
            _ => string(out, h.value_string().as_bytes()),
        }
    }
    out.put_u8(b'}');
}

/// Appends `n` in decimal (itoa: two digits a step; a value that fits a u64, as every
/// offset and timestamp and most ids do, takes 64-bit arithmetic).
pub fn decimal(out: &mut impl BufMut, n: u128) {
    let mut buf = itoa::Buffer::new();
    let text = match u64::try_from(n) {
        Ok(small) => buf.format(small),
        Err(_) => buf.format(n),
    };
    out.put_slice(text.as_bytes());
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ids::{PartitionId, Slot};

    fn part(stream: &str, partition: u32) -> PartitionInfo {
        PartitionInfo {
            slot: Slot(0),
            stream: Rc::from(stream),
            topic: Rc::from("t\"x"),
            partition: PartitionId(partition),
        }
    }

    fn msg(headers: bytes::Bytes) -> Message {
        Message {
            offset: 41,
            id: u128::MAX,
            timestamp: 1_700_000_000_000_000,
            origin_timestamp: 7,
            payload: bytes::Bytes::from_static(br#"{"a":1}"#),
            headers,
        }
    }

    fn text(out: &[u8]) -> &str {
        std::str::from_utf8(out).unwrap_or("<not UTF-8>")
    }

    #[test]
    fn flat_records_carry_what_is_asked() {
        let h = message::encode_headers(&[("k", "v")]);
        let (p, m) = (part("s", 3), msg(h));
        let mut w = RecordWriter::default();
        let mut out = Vec::new();
        let o = RecordOptions {
            meta: Meta::All,
            headers: true,
            payload: PayloadEncoding::Auto,
        };
        w.record(&mut out, o, &p, &m);
        assert_eq!(
            text(&out),
            r#"{"stream":"s","topic":"t\"x","partition":3,"offset":41,"id":"340282366920938463463374607431768211455","timestamp":1700000000000000,"origin_timestamp":7,"headers":{"k":"v"},"payload":{"a":1}}"#
        );
        out.clear();
        w.record(
            &mut out,
            RecordOptions {
                meta: Meta::Offset,
                headers: false,
                payload: PayloadEncoding::Text,
            },
            &p,
            &m,
        );
        assert_eq!(text(&out), r#"{"offset":41,"payload":"{\"a\":1}"}"#);
        out.clear();
        let bare = msg(bytes::Bytes::new());
        w.record(
            &mut out,
            RecordOptions {
                meta: Meta::Off,
                headers: true,
                payload: PayloadEncoding::Auto,
            },
            &p,
            &bare,
        );
        assert_eq!(text(&out), r#"{"payload":{"a":1}}"#);
    }

    #[test]
    fn decimals_on_both_sides_of_u64() {
        for n in [
            0,
            9,
            10,
            u128::from(u64::MAX),
            u128::from(u64::MAX) + 1,
            u128::MAX,
        ] {
            let mut out = Vec::new();
            decimal(&mut out, n);
            assert_eq!(text(&out), n.to_string());
        }
    }

    #[test]
    fn the_partition_fields_follow_the_partition() {
        let o = RecordOptions {
            meta: Meta::All,
            headers: false,
            payload: PayloadEncoding::Auto,
        };
        let m = msg(bytes::Bytes::new());
        let mut w = RecordWriter::default();
        for (stream, partition) in [("a", 1), ("a", 2), ("b", 2), ("a", 1)] {
            let mut out = Vec::new();
            w.record(&mut out, o, &part(stream, partition), &m);
            let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(v["stream"], stream);
            assert_eq!(v["partition"], partition);
        }
    }

    #[test]
    fn the_envelope_nests_metadata_and_names_the_error() {
        let h = message::encode_headers(&[("k", "v")]);
        let mut out = Vec::new();
        envelope(
            &mut out,
            &part("s", 0),
            &msg(h),
            Some("no route"),
            PayloadEncoding::Auto,
        );
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["metadata"]["offset"], 41);
        assert_eq!(v["metadata"]["topic"], "t\"x");
        assert_eq!(v["metadata"]["id"], u128::MAX.to_string());
        assert_eq!(v["headers"]["k"], "v");
        assert_eq!(v["error"], "no route");
        assert_eq!(v["payload"]["a"], 1);
        out.clear();
        envelope(
            &mut out,
            &part("s", 0),
            &msg(bytes::Bytes::new()),
            None,
            PayloadEncoding::Base64,
        );
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["headers"], serde_json::json!({}));
        assert!(v.get("error").is_none());
        assert_eq!(v["payload_base64"], "eyJhIjoxfQ==");
    }

    fn s(input: &[u8]) -> String {
        let mut out = Vec::new();
        string(&mut out, input);
        String::from_utf8(out).unwrap_or_default()
    }

    #[test]
    fn special_bytes_are_found_first_in_any_position() {
        for len in 0..40 {
            for at in 0..len {
                for special in [b'"', b'\\', 0u8, 0x1f, b'\n'] {
                    // Bytes around the boundaries of the tricks: 0x20, 0x21, 0x5b, 0x5d, 0x80+.
                    let mut s: Vec<u8> = (0..len)
                        .map(|i| [0x20, 0x21, 0x5b, 0x5d, 0xc3, 0xff][i % 6])
                        .collect();
                    s[at] = special;
                    if at + 1 < len {
                        s[at + 1] = b'"';
                    }
                    assert_eq!(find_special(&s), Some(at), "{s:?}");
                }
            }
            let plain: Vec<u8> = (0..len)
                .map(|i| (0x20 + i * 7 % 0x60) as u8)
                .filter(|&b| b != b'"' && b != b'\\')
                .collect();
            assert_eq!(find_special(&plain), None);
        }
    }

    /// The stop bytes by the definition, one byte at a time.
    fn naive(s: &[u8], non_ascii: bool) -> Option<usize> {
        s.iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20 || (non_ascii && b >= 0x80))
    }

    /// [`swar`] with its tail, as [`scan`] finishes it.
    fn swar_whole<const N: bool>(s: &[u8]) -> Option<usize> {
        let (base, found) = swar::<N>(s);
        found.or_else(|| naive(&s[base..], N).map(|i| base + i))
    }

    #[test]
    fn every_byte_value_is_classified_alike_by_every_scanner() {
        // Each byte value at each position of inputs across the 8- and 16-byte steps, in a
        // field of plain bytes and in front of a later stop byte.
        for len in [1usize, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47] {
            for at in 0..len {
                for b in 0..=255u8 {
                    let mut s = vec![b'a'; len];
                    s[at] = b;
                    if at + 2 < len {
                        s[at + 2] = b'"';
                    }
                    for (non_ascii, got, by_words) in [
                        (false, scan::<false>(&s), swar_whole::<false>(&s)),
                        (true, scan::<true>(&s), swar_whole::<true>(&s)),
                    ] {
                        let want = naive(&s, non_ascii);
                        assert_eq!(got, want, "scan, byte {b:#x} at {at} of {len}");
                        assert_eq!(by_words, want, "swar, byte {b:#x} at {at} of {len}");
                    }
                }
            }
        }
    }

    #[test]
    fn utf8_is_checked_inside_strings_and_refused_outside() {
        assert!(is_json("\"grüße, 日本, 🎉\"".as_bytes()));
        assert!(is_json(
            "{\"ключ\":\"значение\",\"n\":[\"é\\n\",\"x\"]}".as_bytes()
        ));
        // A truncated sequence at the end of a run, before the quote.
        assert!(!is_json(b"\"ab\xc3\""));
        // An overlong encoding, a surrogate, a stray continuation byte, long runs included.
        assert!(!is_json(b"\"\xc0\xaf\""));
        assert!(!is_json(b"\"\xed\xa0\x80\""));
        let mut long = b"\"".to_vec();
        long.extend("é".repeat(40).as_bytes());
        long.push(0x80);
        long.extend(b"abc\"");
        assert!(!is_json(&long));
        // Non-ASCII outside a string.
        assert!(!is_json("[1,\u{a0}2]".as_bytes()));
        assert!(!is_json("{\"a\"\u{3000}:1}".as_bytes()));
    }

    #[test]
    fn escapes() {
        assert_eq!(s(b"a\"b\\c\nd\x01"), r#""a\"b\\c\nd\u0001""#);
        let v: serde_json::Value = serde_json::from_str(&s(b"tab\there")).unwrap_or_default();
        assert_eq!(v, "tab\there");
    }

    #[test]
    fn json_is_recognised() {
        for yes in [
            &b"{}"[..],
            b" [1]",
            b"\"s\"",
            b"-1",
            b"12",
            b"true",
            b"false",
            b"null",
        ] {
            assert!(is_json(yes), "{:?}", String::from_utf8_lossy(yes));
        }
        for no in [&b""[..], b"  ", b"m-p0-1", b"{", b"tru", b"nul l", b"\xff"] {
            assert!(!is_json(no), "{:?}", String::from_utf8_lossy(no));
        }
    }

    /// serde_json's full parse, the reference for [`is_json`]; `None` for a number beyond
    /// f64: JSON's grammar has no range (RFC 8259 section 6 leaves it to readers), serde_json
    /// refuses such numbers before it looks further, and [`is_json`] checks the grammar only.
    fn serde_says(p: &[u8]) -> Option<bool> {
        match serde_json::from_slice::<serde_json::Value>(p) {
            Ok(_) => Some(true),
            Err(e) if e.to_string().starts_with("number out of range") => None,
            Err(_) => Some(false),
        }
    }

    #[test]
    fn validator_agrees_with_serde_json_on_edge_cases() {
        let cases: &[&[u8]] = &[
            b"0",
            b"-0",
            b"01",
            b"-",
            b"1.",
            b"1.5",
            b".5",
            b"1e5",
            b"1E+5",
            b"1e-5",
            b"1e",
            b"1e+",
            b"-1.25e3",
            b"2.",
            b"[1,]",
            b"[,1]",
            b"[]",
            b"[ ]",
            b"{}",
            b"{ }",
            b"{\"a\":1,}",
            b"{\"a\" : [true, false, null] }",
            b"{\"a\"}",
            b"{1:2}",
            b"{\"a\":1 \"b\":2}",
            b"[1 2]",
            b"\"\\u00e9\"",
            b"\"\\u00g9\"",
            b"\"\\x\"",
            b"\"a\tb\"",
            b"\"a\\tb\"",
            b"\"\\ud83d\\ude00\"",
            b"\"\\ud83d\"",
            b"\"\\ude00\"",
            b"\"\\ud83d\\u0041\"",
            b"\"\xc3\xa9\"",
            b"\"\xc3\"",
            b"[\"\xff\"]",
            b"truee",
            b"nul",
            b"[true]x",
            b" \n{\"a\":\n1}\r\n ",
            b"{\"a\":{\"b\":[{}]}}",
            b"[[[]]]",
            b"[[[]]",
            b"[]]",
            b"{\"a\":1}}",
            b"\"abc",
            b"\"",
            b"",
        ];
        for &c in cases {
            assert_eq!(
                Some(is_json(c)),
                serde_says(c),
                "{:?}",
                String::from_utf8_lossy(c)
            );
        }
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(is_json(deep(100).as_bytes()));
        assert!(!is_json(deep(300).as_bytes()));
        // The grammar has no range: embedded as they are.
        assert!(is_json(b"[1e400, -2E+999]"));
    }

    /// JSON-like text from a token alphabet, often valid, often not by a token.
    fn jsonish() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let token = prop_oneof![
            Just("{"),
            Just("}"),
            Just("["),
            Just("]"),
            Just(","),
            Just(":"),
            Just(" "),
            Just("\n"),
            Just("\"k\""),
            Just("\"v\\n\\u0041\""),
            Just("\"\\ud83d\\ude00\""),
            Just("\"\\ud83d\""),
            Just("true"),
            Just("null"),
            Just("-12.5e3"),
            Just("0"),
            Just("7"),
            Just("\"é\""),
            Just("\"\t\""),
            Just("1."),
            Just("\"\\q\""),
        ];
        proptest::collection::vec(token, 0..24).prop_map(|t| t.concat().into_bytes())
    }

    /// Valid JSON built from a value tree.
    fn valid_json() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            any::<i64>().prop_map(serde_json::Value::from),
            (-1e12f64..1e12).prop_map(serde_json::Value::from),
            any::<bool>().prop_map(serde_json::Value::from),
            ".{0,12}".prop_map(serde_json::Value::from),
            Just(serde_json::Value::Null),
        ];
        let tree = leaf.prop_recursive(6, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
                proptest::collection::btree_map(".{0,6}", inner, 0..6)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        });
        (tree, any::<bool>()).prop_map(|(v, pretty)| {
            if pretty {
                serde_json::to_vec_pretty(&v).unwrap_or_default()
            } else {
                serde_json::to_vec(&v).unwrap_or_default()
            }
        })
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_become_a_string_serde_json_reads_back(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let mut out = Vec::new();
            string(&mut out, &bytes);
            let back: Result<String, _> = serde_json::from_slice(&out);
            proptest::prop_assert_eq!(back.ok(), Some(String::from_utf8_lossy(&bytes).into_owned()));
        }

        #[test]
        fn validator_agrees_with_serde_json(text in jsonish()) {
            let want = serde_says(&text);
            proptest::prop_assume!(want.is_some());
            proptest::prop_assert_eq!(Some(is_json(&text)), want, "{:?}", String::from_utf8_lossy(&text));
        }

        #[test]
        fn valid_json_is_recognised_and_embedded_whole(text in valid_json()) {
            proptest::prop_assert!(is_json(&text), "{:?}", String::from_utf8_lossy(&text));
            let mut out = b"{".to_vec();
            payload_field(&mut out, &text, PayloadEncoding::Auto);
            out.push(b'}');
            let back: serde_json::Value = serde_json::from_slice(&out).unwrap_or_default();
            let want: serde_json::Value = serde_json::from_slice(&text).unwrap_or_default();
            proptest::prop_assert_eq!(&back["payload"], &want);
            proptest::prop_assert!(!out.contains(&b'\n'));
        }

        #[test]
        fn bytes_with_a_flipped_byte_agree_with_serde_json(text in valid_json(), at in proptest::prelude::any::<proptest::sample::Index>(), b in proptest::prelude::any::<u8>()) {
            let mut text = text;
            if !text.is_empty() {
                let i = at.index(text.len());
                text[i] = b;
            }
            let want = serde_says(&text);
            proptest::prop_assume!(want.is_some());
            proptest::prop_assert_eq!(Some(is_json(&text)), want, "{:?}", String::from_utf8_lossy(&text));
        }
    }

    #[test]
    fn payloads() {
        let field = |p: &[u8], e| {
            let mut out = b"{".to_vec();
            payload_field(&mut out, p, e);
            out.push(b'}');
            serde_json::from_slice::<serde_json::Value>(&out).unwrap_or_default()
        };
        assert_eq!(
            field(b"{\n \"a\": [1, 2]\n}", PayloadEncoding::Auto)["payload"]["a"][1],
            2
        );
        assert_eq!(
            field(b"plain text", PayloadEncoding::Auto)["payload"],
            "plain text"
        );
        assert_eq!(
            field(b"\xff\x00", PayloadEncoding::Auto)["payload_base64"],
            "/wA="
        );
        assert_eq!(field(b"{}", PayloadEncoding::Text)["payload"], "{}");
        assert_eq!(
            field(b"hi", PayloadEncoding::Base64)["payload_base64"],
            "aGk="
        );
    }
}
