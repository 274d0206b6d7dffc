//! The checks the engine fuzz targets run. They live in a library so that each target is one
//! call, and so that `engine/tests/integration/never_panics.rs` runs the very same checks in the ordinary
//! test run (it includes this file as a module): keep to crates the `spillway` package already
//! depends on (`bytes`, `bytemuck`, `iggy_binary_protocol`, `twox-hash`, `base64`,
//! `serde_json`).
//!
//! - [`iggy_reply`]: what an Iggy server sends back, from the frame header to the messages of a
//!   poll reply and their user headers.
//! - [`json_embed`]: the JSON validator and the payload embedding of the JSON sinks, against
//!   serde_json.

use std::fmt::Write as _;

use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use iggy_binary_protocol::WireDecode;
use iggy_binary_protocol::batch::{
    BATCH_HEADER_SIZE, BATCH_MESSAGE_HEADER_SIZE, BatchHeader, calculate_batch_checksum,
};
use iggy_binary_protocol::consensus::{Command, Operation, ReplyHeader};
use iggy_binary_protocol::responses::consumer_groups::SyncConsumerGroupResponse;
use iggy_binary_protocol::responses::consumer_offsets::ConsumerOffsetResponse;
use iggy_binary_protocol::responses::topics::GetTopicResponse;
use iggy_binary_protocol::responses::users::LoginRegisterResponse;
use spillway::config::PayloadEncoding;
use spillway::iggy::proto::{HEADER_SIZE, MAX_FRAME, decode_reply, frame_size};
use spillway::iggy::{IggyError, code_name, decode_poll_reply, eviction_name};
use spillway::json;
use spillway::message::{self, Message};
use twox_hash::XxHash3_64;

// ------------------------------------------------------------------------------ Iggy replies

/// Size of the head of a poll reply (partition u32, current offset u64, message count u32).
pub const POLL_HEAD_SIZE: usize = 16;

/// Reads fuzz input as numbers; past its end every read is zero.
#[derive(Debug)]
pub struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Input { data, pos: 0 }
    }

    pub fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos = self.pos.saturating_add(1);
        b
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }

    /// `n` bytes (zeros past the end).
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.u8()).collect()
    }
}

/// Fuzz input as what an Iggy server sends. The first byte's low bit picks the mode:
///
/// - even: the rest is raw bytes, read as a stream of frames (256-byte header, body), and also
///   as a poll reply body, as user headers and as the typed replies the client decodes;
/// - odd: the rest describes batches of messages, which [`built_poll_reply`] lays out with
///   valid checksums in a reply frame (so the fuzzer gets past the checksums), then corrupts at
///   a position from the input when the first byte's bit 1 is set.
///
/// See [`reply_frame`] and [`poll_body`] for what is checked.
pub fn iggy_reply(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        raw_stream(rest);
    } else {
        built_poll_reply(mode, rest);
    }
}

/// Raw bytes: frames as `Connection::read_frame` cuts them (`frame_size` on the first 256
/// bytes, then that many bytes; a stream that ends early leaves a shorter last frame, which is
/// decoded too), then the same bytes as a reply body of every kind.
pub fn raw_stream(data: &[u8]) {
    let mut rest = data;
    for _ in 0..8 {
        let Some(head) = rest.get(..HEADER_SIZE) else {
            break;
        };
        let mut header = [0u8; HEADER_SIZE];
        header.copy_from_slice(head);
        let size = match frame_size(&header) {
            Ok(size) => size,
            Err(e) => {
                let _ = e.to_string();
                break;
            }
        };
        assert!(
            (HEADER_SIZE..=MAX_FRAME).contains(&size),
            "frame_size let {size} through"
        );
        let take = size.min(rest.len());
        let frame = Bytes::copy_from_slice(&rest[..take]);
        let at = std::mem::offset_of!(ReplyHeader, request);
        let request = u64::from_le_bytes(array8(&header[at..at + 8]));
        reply_frame(&frame, request);
        rest = &rest[take..];
    }
    let body = Bytes::copy_from_slice(data);
    let _ = poll_body(&body, None);
    typed_replies(data);
    user_headers(data);
}

fn array8(b: &[u8]) -> [u8; 8] {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    a
}

/// One reply frame (at least a header, its size field already checked by `frame_size`):
/// `decode_reply` with and without the request it answers agrees, a payload is a slice of
/// the frame after the header, and that payload goes through every body decoder.
pub fn reply_frame(frame: &Bytes, request: u64) {
    let any = decode_reply(frame, None);
    let this = decode_reply(frame, Some(request));
    let other = decode_reply(frame, Some(request.wrapping_add(1)));
    for r in [&any, &this, &other] {
        if let Err(e) = r {
            describe(e);
        }
    }
    if let Ok(body) = &this {
        match &any {
            Ok(b) => assert_eq!(b, body, "the expected request changed the payload"),
            Err(e) => panic!("a reply accepted for its request but not for any: {e}"),
        }
    }
    if this.is_ok() {
        assert!(
            other.is_err(),
            "a reply accepted for two different requests"
        );
    }
    if let Ok(body) = &any {
        assert!(
            body.len() <= frame.len() - HEADER_SIZE,
            "a payload longer than the frame"
        );
        assert!(
            within(body, frame),
            "the payload is not a slice of the frame"
        );
        let _ = poll_body(body, None);
        typed_replies(body);
    }
}

/// Whether `part` lies inside `whole` (an empty slice anywhere counts).
fn within(part: &[u8], whole: &[u8]) -> bool {
    if part.is_empty() {
        return true;
    }
    let (p, w) = (part.as_ptr() as usize, whole.as_ptr() as usize);
    p >= w && p + part.len() <= w + whole.len()
}

/// Every error formats (eviction reasons and status codes have names).
fn describe(e: &IggyError) {
    let _ = e.to_string();
    match e {
        IggyError::Evicted { reason } => {
            let _ = eviction_name(*reason);
        }
        IggyError::Status { code } => {
            let _ = code_name(code.raw());
        }
        _ => {}
    }
}

/// Decodes `body` as a poll reply after two messages already in the vector, and checks:
///
/// - on an error, nothing of the reply is kept (the vector is as before);
/// - on success, as many messages as the head counts, each taking at least its 48-byte frame
///   header, all in batches that fit the body; payloads and user headers are slices of the
///   body; offsets stay below `u64::MAX`;
/// - in both cases, room was reserved only for what the body can hold;
/// - when `expected` is given (a reply built from known messages), the messages are exactly
///   those.
///
/// Returns what the decode returned.
pub fn poll_body(
    body: &Bytes,
    expected: Option<&[Message]>,
) -> Result<Option<(u32, u64)>, IggyError> {
    let filler = Message {
        offset: 1,
        id: 2,
        timestamp: 3,
        origin_timestamp: 4,
        payload: Bytes::from_static(b"earlier"),
        headers: Bytes::new(),
    };
    let mut messages = vec![filler.clone(), filler];
    let (start, capacity) = (messages.len(), messages.capacity());
    let result = decode_poll_reply(body, &mut messages);
    // `reserve` may double what was there, or reserve the count exactly.
    let bound = (capacity * 2).max(start + body.len() / BATCH_MESSAGE_HEADER_SIZE);
    assert!(
        messages.capacity() <= bound,
        "reserved room for {} messages from a body of {} bytes",
        messages.capacity(),
        body.len()
    );
    match &result {
        Err(e) => {
            describe(e);
            assert_eq!(messages.len(), start, "a failed decode kept messages");
        }
        Ok(None) => {
            assert!(
                body.is_empty(),
                "Ok(None) for a body of {} bytes",
                body.len()
            );
            assert_eq!(messages.len(), start);
        }
        Ok(Some(_)) => {
            let got = &messages[start..];
            let count = u32::from_le_bytes([body[12], body[13], body[14], body[15]]) as usize;
            assert_eq!(got.len(), count, "the head counts {count} messages");
            let framed: usize = got
                .iter()
                .map(|m| BATCH_MESSAGE_HEADER_SIZE + m.payload.len() + m.headers.len())
                .sum();
            let batches = if got.is_empty() { 0 } else { BATCH_HEADER_SIZE };
            assert!(
                POLL_HEAD_SIZE + batches + framed <= body.len(),
                "{count} messages of {framed} bytes in a body of {}",
                body.len()
            );
            for m in got {
                assert!(within(&m.payload, body), "a payload outside the reply");
                assert!(within(&m.headers, body), "user headers outside the reply");
                assert!(m.offset < u64::MAX, "offset u64::MAX");
                user_headers(&m.headers);
            }
            if let Some(want) = expected {
                assert_eq!(got.len(), want.len(), "message count");
                for (g, w) in got.iter().zip(want) {
                    assert_eq!(
                        (
                            g.offset,
                            g.id,
                            g.timestamp,
                            g.origin_timestamp,
                            &g.payload,
                            &g.headers
                        ),
                        (
                            w.offset,
                            w.id,
                            w.timestamp,
                            w.origin_timestamp,
                            &w.payload,
                            &w.headers
                        ),
                        "a message decoded differently from how it was built"
                    );
                }
            }
        }
    }
    result
}

/// The typed reply bodies the client decodes (login, get topic, consumer offset, sync group):
/// never more consumed than there is, never more elements than the bytes can hold.
pub fn typed_replies(body: &[u8]) {
    if let Ok((_, used)) = LoginRegisterResponse::decode(body) {
        assert!(used <= body.len());
    }
    if let Ok((topic, used)) = GetTopicResponse::decode(body) {
        assert!(used <= body.len());
        assert!(
            topic.partitions.len() * 40 <= used,
            "partitions past the body"
        );
    }
    if let Ok((_, used)) = ConsumerOffsetResponse::decode(body) {
        assert!(used <= body.len());
    }
    if let Ok((sync, used)) = SyncConsumerGroupResponse::decode(body) {
        assert!(used <= body.len());
        assert!(
            12 + sync.partitions.len() * 4 <= used,
            "partitions past the body"
        );
    }
}

/// Iggy user headers as the sinks read them: each one a slice of the buffer, every value
/// formats, and the walk ends.
pub fn user_headers(raw: &[u8]) {
    let mut seen = 0usize;
    for h in message::headers(raw) {
        seen += 1;
        assert!(
            seen <= raw.len() / 10 + 1,
            "more headers than the bytes can hold"
        );
        match h {
            Ok(h) => {
                assert!(within(h.key, raw) && within(h.value, raw));
                let _ = h.key_str();
                let _ = h.value_string();
            }
            Err(_) => break,
        }
    }
    if let Some(key) = raw.get(5..9).and_then(|k| std::str::from_utf8(k).ok()) {
        let _ = message::header(raw, key);
    }
}

/// One message to lay out in a built batch.
#[derive(Debug, Clone)]
pub struct Spec {
    pub id: u128,
    pub offset_delta: u32,
    pub timestamp_delta: u32,
    pub payload: Vec<u8>,
    pub headers: Vec<u8>,
}

/// Lays out a stored batch as the server does (per-message checksums, then the batch checksum).
pub fn batch_bytes(header: &mut BatchHeader, messages: &[Spec]) -> Vec<u8> {
    let mut blob = Vec::new();
    for m in messages {
        let start = blob.len();
        blob.resize(start + BATCH_MESSAGE_HEADER_SIZE, 0);
        let frame = &mut blob[start..];
        frame[8..24].copy_from_slice(&m.id.to_le_bytes());
        frame[24..28].copy_from_slice(&m.offset_delta.to_le_bytes());
        frame[28..32].copy_from_slice(&m.timestamp_delta.to_le_bytes());
        frame[32..36].copy_from_slice(&(m.headers.len() as u32).to_le_bytes());
        frame[36..40].copy_from_slice(&(m.payload.len() as u32).to_le_bytes());
        blob.extend_from_slice(&m.payload);
        blob.extend_from_slice(&m.headers);
        let sum = XxHash3_64::oneshot(&blob[start + 8..]);
        blob[start..start + 8].copy_from_slice(&sum.to_le_bytes());
    }
    header.batch_length = (BATCH_HEADER_SIZE + blob.len()) as u64;
    header.message_count = messages.len() as u32;
    header.batch_checksum = calculate_batch_checksum(header, &blob);
    let mut out = vec![0u8; BATCH_HEADER_SIZE];
    header.encode_into(&mut out);
    out.extend_from_slice(&blob);
    out
}

/// Well-formed user headers (`[kind][len u32][key][kind][len u32][value]`), kinds and lengths
/// from the input.
fn built_headers(input: &mut Input<'_>) -> Vec<u8> {
    let mut raw = Vec::new();
    for _ in 0..input.u8() % 3 {
        for _ in 0..2 {
            let kind = input.u8() % 17;
            let len = usize::from(input.u8() % 20);
            raw.push(kind);
            raw.extend_from_slice(&(len as u32).to_le_bytes());
            raw.extend_from_slice(&input.bytes(len));
        }
    }
    raw
}

/// A poll reply built from `data`: up to 4 batches of up to 6 messages each (base offsets small,
/// random or next to `u64::MAX`; payloads and user headers from the input, the headers well
/// formed or not), the head counting them (or, with `mode` bit 2, a count from the input), in
/// a reply frame. Unless corrupted (`mode` bit 1: one byte of the frame changed), it must
/// decode to exactly those messages, or be refused only for an offset past the largest.
pub fn built_poll_reply(mode: u8, data: &[u8]) {
    let mut input = Input::new(data);
    let batches = 1 + usize::from(input.u8() % 4);
    let mut body = Vec::new();
    body.extend_from_slice(&input.u32().to_le_bytes());
    body.extend_from_slice(&input.u64().to_le_bytes());
    body.extend_from_slice(&[0; 4]);
    let mut expected: Vec<Message> = Vec::new();
    let mut offset_overflow = false;
    // Where each message's payload and headers go in `body`, to build the expected messages.
    let mut slices: Vec<(usize, usize, usize, usize)> = Vec::new();
    for _ in 0..batches {
        let base_offset = match input.u8() % 4 {
            0 => u64::from(input.u32()),
            1 => u64::MAX - u64::from(input.u8() % 4),
            2 => input.u64(),
            _ => 0,
        };
        let origin = match input.u8() % 3 {
            0 => u64::MAX - u64::from(input.u32()),
            _ => input.u64(),
        };
        let mut header = BatchHeader::new(u64::from(input.u8()), origin, 0, 0);
        header.base_offset = base_offset;
        header.base_timestamp = input.u64();
        let mut specs = Vec::new();
        for i in 0..input.u8() % 7 {
            let len = usize::from(input.u8()) * (1 + usize::from(input.u8() % 4));
            let payload = input.bytes(len);
            let headers = match input.u8() % 4 {
                0 => built_headers(&mut input),
                1 => {
                    let n = usize::from(input.u8() % 16);
                    input.bytes(n)
                }
                _ => Vec::new(),
            };
            let offset_delta = if input.u8() & 1 == 0 {
                u32::from(i)
            } else {
                input.u32()
            };
            specs.push(Spec {
                id: u128::from(input.u64()) << 64 | u128::from(input.u64()),
                offset_delta,
                timestamp_delta: input.u32(),
                payload,
                headers,
            });
        }
        let start = body.len() + BATCH_HEADER_SIZE;
        body.extend_from_slice(&batch_bytes(&mut header, &specs));
        let mut at = start;
        for s in &specs {
            let payload_at = at + BATCH_MESSAGE_HEADER_SIZE;
            let headers_at = payload_at + s.payload.len();
            slices.push((payload_at, s.payload.len(), headers_at, s.headers.len()));
            at = headers_at + s.headers.len();
            match base_offset.checked_add(u64::from(s.offset_delta)) {
                Some(o) if o < u64::MAX => expected.push(Message {
                    offset: o,
                    id: s.id,
                    timestamp: header.base_timestamp,
                    origin_timestamp: origin.saturating_add(u64::from(s.timestamp_delta)),
                    payload: Bytes::new(),
                    headers: Bytes::new(),
                }),
                _ => offset_overflow = true,
            }
        }
    }
    let built = slices.len() as u32;
    let count = if mode & 4 == 0 { built } else { input.u32() };
    body[12..16].copy_from_slice(&count.to_le_bytes());

    let request = input.u64();
    let operation = if mode & 8 == 0 {
        Operation::NonReplicated
    } else {
        Operation::StoreConsumerOffset
    };
    let mut frame = BytesMut::new();
    let reply = ReplyHeader {
        command: Command::Reply,
        size: (HEADER_SIZE + body.len()) as u32,
        operation,
        request,
        ..ReplyHeader::default()
    };
    frame.extend_from_slice(bytemuck::bytes_of(&reply));
    frame.extend_from_slice(&body);
    let corrupt = mode & 2 != 0;
    if corrupt {
        let at = input.u32() as usize % frame.len();
        frame[at] ^= input.u8().max(1);
    }
    let frame = frame.freeze();

    let mut header = [0u8; HEADER_SIZE];
    header.copy_from_slice(&frame[..HEADER_SIZE]);
    if frame_size(&header).is_err() {
        assert!(corrupt, "a built frame refused by frame_size");
        return;
    }
    reply_frame(&frame, request);
    let payload = match decode_reply(&frame, Some(request)) {
        Ok(p) => p,
        Err(e) => {
            // The StoreConsumerOffset operation is result-framed: a poll body read as a result
            // section fails unless it happens to start with a zero count.
            assert!(
                corrupt || operation != Operation::NonReplicated,
                "a built reply refused: {e}"
            );
            return;
        }
    };
    if corrupt || count != built || operation != Operation::NonReplicated {
        poll_body(&payload, None).ok();
        return;
    }
    for (m, &(p, pl, h, hl)) in expected.iter_mut().zip(&slices) {
        m.payload = payload.slice(p..p + pl);
        m.headers = payload.slice(h..h + hl);
    }
    match poll_body(&payload, Some(&expected)) {
        Ok(Some(_)) => assert!(!offset_overflow, "an offset past u64::MAX was accepted"),
        Err(IggyError::Malformed(m)) if offset_overflow => {
            assert!(m.contains("largest offset"), "{m}");
        }
        other => panic!("a valid poll reply gave {other:?}"),
    }
}

// ------------------------------------------------------------------------------ JSON

/// What serde_json makes of `p`: the value, or `Err` with its message. `None` for a number
/// beyond f64: JSON's grammar has no range (RFC 8259 section 6 leaves it to readers), serde_json
/// refuses such numbers before it reads further, and [`json::is_json`] checks the grammar only
/// (intended: such payloads are embedded as they are).
pub fn serde_says(p: &[u8]) -> Option<Result<serde_json::Value, String>> {
    match serde_json::from_slice::<serde_json::Value>(p) {
        Ok(v) => Some(Ok(v)),
        Err(e) if e.to_string().starts_with("number out of range") => None,
        Err(e) => Some(Err(e.to_string())),
    }
}

/// The deepest nesting of `[`/`{` in `p`, outside strings (a rough scan: enough for text the
/// validator accepts).
pub fn nesting(p: &[u8]) -> usize {
    let (mut depth, mut max, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &b in p {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// serde_json's default depth limit: it refuses a value nested this deep (127 levels pass).
pub const SERDE_DEPTH_LIMIT: usize = 128;

/// Fuzz input as a message payload: see [`json_validity`] and [`json_records`].
pub fn json_embed(data: &[u8]) {
    json_validity(data);
    json_records(data);
}

/// [`json::is_json`] decides as serde_json does (`from_slice::<Value>` succeeds), except:
///
/// - numbers beyond f64, which serde_json refuses and the grammar allows ([`serde_says`]):
///   intended, such payloads are embedded as they are;
/// - nothing else: duplicate keys are valid for both (serde_json keeps the last), lone
///   surrogate escapes invalid for both, and the depth limit is serde_json's (127 levels;
///   `is_json` took 128 and 129 until the differential tests here found it).
pub fn json_validity(data: &[u8]) -> bool {
    let ours = json::is_json(data);
    if let Some(theirs) = serde_says(data) {
        assert!(
            ours == theirs.is_ok(),
            "is_json says {ours}, serde_json {theirs:?}, for {:?} (nesting {})",
            String::from_utf8_lossy(data),
            nesting(data)
        );
    }
    ours
}

/// The record a sink writes around a payload: `{` + the payload field + `}`.
pub fn record(payload: &[u8], encoding: PayloadEncoding) -> Vec<u8> {
    let mut out = b"{".to_vec();
    json::payload_field(&mut out, payload, encoding);
    out.push(b'}');
    out
}

/// Parses a record with serde_json. A record nests one level deeper than its payload, so a
/// payload nested 127 deep (which serde_json reads) makes a record it refuses by its depth
/// limit: then the embedded value is read alone (`{"payload":` … `}` taken off), which is what
/// a reader with a higher limit gets.
fn parse_record(out: &[u8], payload_nesting: usize) -> serde_json::Value {
    match serde_json::from_slice::<serde_json::Value>(out) {
        Ok(v) => v,
        Err(e) if e.to_string().starts_with("recursion limit exceeded") => {
            assert!(
                payload_nesting + 1 >= SERDE_DEPTH_LIMIT,
                "a record refused for its depth with a payload nested {payload_nesting} deep"
            );
            let inner = out
                .strip_prefix(b"{\"payload\":")
                .and_then(|r| r.strip_suffix(b"}"))
                .unwrap_or_else(|| panic!("a deep record that is not an embedded payload"));
            let v: serde_json::Value = serde_json::from_slice(inner)
                .unwrap_or_else(|e| panic!("the embedded payload does not parse: {e}"));
            serde_json::json!({ "payload": v })
        }
        Err(e) => panic!(
            "the record {:?} does not parse: {e}",
            String::from_utf8_lossy(out)
        ),
    }
}

/// The record of each encoding is JSON that serde_json reads back to what the encoding
/// promises: `auto` embeds JSON as the same value (its line breaks dropped, so the record is
/// one line), other UTF-8 text as a string, anything else as `payload_base64`; `text` is the
/// lossy UTF-8 string; `base64` decodes to the payload. [`json::string`] reads back as the lossy
/// string.
pub fn json_records(data: &[u8]) {
    let is_json = json::is_json(data);
    let serde = serde_says(data);
    let depth = nesting(data);
    let lossy = String::from_utf8_lossy(data).into_owned();
    let b64 = base64::engine::general_purpose::STANDARD.encode(data);

    let auto = record(data, PayloadEncoding::Auto);
    if is_json {
        assert!(
            !auto.contains(&b'\n') && !auto.contains(&b'\r'),
            "a JSON record with a line break"
        );
        // Beyond f64, serde_json refuses the payload and so the record: nothing to compare.
        if let Some(Ok(want)) = &serde {
            let got = parse_record(&auto, depth);
            assert_eq!(
                got,
                serde_json::json!({ "payload": want }),
                "an embedded payload reads back differently: {lossy:?}"
            );
        }
    } else if std::str::from_utf8(data).is_ok() {
        let got = parse_record(&auto, 0);
        assert_eq!(got, serde_json::json!({ "payload": lossy }));
    } else {
        let got = parse_record(&auto, 0);
        assert_eq!(got, serde_json::json!({ "payload_base64": b64 }));
    }

    let text = parse_record(&record(data, PayloadEncoding::Text), 0);
    assert_eq!(text, serde_json::json!({ "payload": lossy }));

    let base64 = parse_record(&record(data, PayloadEncoding::Base64), 0);
    assert_eq!(base64, serde_json::json!({ "payload_base64": b64 }));
    let decoded = base64["payload_base64"]
        .as_str()
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok());
    assert_eq!(
        decoded.as_deref(),
        Some(data),
        "base64 does not decode back"
    );

    let mut s = Vec::new();
    json::string(&mut s, data);
    let back: Result<String, _> = serde_json::from_slice(&s);
    assert_eq!(back.ok().as_deref(), Some(lossy.as_str()), "json::string");
}

/// `data` as hex, for reports and test names.
pub fn hex(data: &[u8]) -> String {
    let mut s = String::with_capacity(data.len() * 2);
    for b in data {
        let _ = write!(s, "{b:02x}");
    }
    s
}
