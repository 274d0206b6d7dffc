//! The `csv` format's records (RFC 4180; see the parent module for the columns).

use std::io::Write as _;

use base64::Engine as _;

use crate::config::PayloadEncoding;
use crate::json;
use crate::message::{Message, PartitionInfo};

use super::FormatOptions;

/// One CSV record with its CRLF.
pub(super) fn csv_record(
    out: &mut Vec<u8>,
    field: &mut Vec<u8>,
    o: &FormatOptions,
    p: &PartitionInfo,
    m: &Message,
) {
    if o.metadata {
        csv_field(out, p.stream.as_bytes());
        out.push(b',');
        csv_field(out, p.topic.as_bytes());
        let _ = write!(
            out,
            ",{},{},{},{},{},",
            p.partition, m.offset, m.id, m.timestamp, m.origin_timestamp
        );
    }
    if o.headers {
        field.clear();
        json::headers_object(field, &m.headers);
        csv_field(out, field);
        out.push(b',');
    }
    let payload: &[u8] = &m.payload;
    if payload.is_empty() {
        out.extend_from_slice(b"\"\"");
    } else {
        match o.payload {
            PayloadEncoding::Base64 => base64_field(out, payload),
            PayloadEncoding::Text => {
                csv_field(out, String::from_utf8_lossy(payload).as_bytes());
            }
            PayloadEncoding::Auto => {
                if std::str::from_utf8(payload).is_ok() {
                    csv_field(out, payload);
                } else {
                    base64_field(out, payload);
                }
            }
        }
    }
    out.extend_from_slice(b"\r\n");
}

/// Appends `field`, quoted (quotes doubled) when it holds `,`, `"`, CR or LF.
pub(super) fn csv_field(out: &mut Vec<u8>, field: &[u8]) {
    if !field
        .iter()
        .any(|&b| matches!(b, b',' | b'"' | b'\r' | b'\n'))
    {
        out.extend_from_slice(field);
        return;
    }
    out.push(b'"');
    for part in field.split_inclusive(|&b| b == b'"') {
        out.extend_from_slice(part);
        if part.last() == Some(&b'"') {
            out.push(b'"');
        }
    }
    out.push(b'"');
}

/// Appends `data` in standard base64 (never needs quoting).
pub(super) fn base64_field(out: &mut Vec<u8>, data: &[u8]) {
    let start = out.len();
    let Some(len) = base64::encoded_len(data.len(), true) else {
        return;
    };
    out.resize(start + len, 0);
    let written = base64::engine::general_purpose::STANDARD
        .encode_slice(data, &mut out[start..])
        .unwrap_or(0);
    out.truncate(start + written);
}
