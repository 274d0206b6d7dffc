//! A small JSON writer for the sinks' envelopes: escaped strings, payloads embedded as JSON
//! when they are JSON, else text or base64.

use base64::Engine as _;

use crate::config::PayloadEncoding;

/// Appends `s` as a JSON string literal.
pub fn string(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    let text = String::from_utf8_lossy(s);
    let mut start = 0;
    let bytes = text.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        let esc: Option<&[u8]> = match b {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            b'\n' => Some(b"\\n"),
            b'\r' => Some(b"\\r"),
            b'\t' => Some(b"\\t"),
            0..=0x1f => None,
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        match esc {
            Some(e) => out.extend_from_slice(e),
            None => {
                let _ = std::io::Write::write_fmt(out, format_args!("\\u{b:04x}"));
            }
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Whether `payload` is one complete JSON value.
pub fn is_json(payload: &[u8]) -> bool {
    // Most payloads that are not JSON give themselves away at their first byte; only the
    // others pay for a full parse.
    let first = payload.iter().find(|b| !b.is_ascii_whitespace());
    let may_be = matches!(
        first,
        Some(b'{' | b'[' | b'"' | b'-' | b'0'..=b'9' | b't' | b'f' | b'n')
    );
    may_be && serde_json::from_slice::<serde::de::IgnoredAny>(payload).is_ok()
}

/// Appends `"payload": ...` (or `"payload_base64": "..."`) for `payload` under `encoding`:
/// JSON is embedded as it is (its line breaks, which JSON only allows as whitespace, dropped
/// so the record stays on one line), UTF-8 text as a string, anything else as base64.
pub fn payload_field(out: &mut Vec<u8>, payload: &[u8], encoding: PayloadEncoding) {
    let as_base64 = |out: &mut Vec<u8>| {
        out.extend_from_slice(b"\"payload_base64\":\"");
        let mut b64 = String::new();
        base64::engine::general_purpose::STANDARD.encode_string(payload, &mut b64);
        out.extend_from_slice(b64.as_bytes());
        out.push(b'"');
    };
    match encoding {
        PayloadEncoding::Base64 => as_base64(out),
        PayloadEncoding::Text => {
            out.extend_from_slice(b"\"payload\":");
            string(out, payload);
        }
        PayloadEncoding::Auto => {
            if is_json(payload) {
                out.extend_from_slice(b"\"payload\":");
                // Copied in runs between line breaks (most payloads have none).
                let mut rest = payload;
                while let Some(i) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
                    out.extend_from_slice(&rest[..i]);
                    rest = &rest[i + 1..];
                }
                out.extend_from_slice(rest);
            } else if std::str::from_utf8(payload).is_ok() {
                out.extend_from_slice(b"\"payload\":");
                string(out, payload);
            } else {
                as_base64(out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(input: &[u8]) -> String {
        let mut out = Vec::new();
        string(&mut out, input);
        String::from_utf8(out).unwrap_or_default()
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
