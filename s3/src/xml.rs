//! S3's XML: a small element tree read with quick-xml (0.38), error documents turned into
//! [`S3Error`], and text escaping for the bodies we send.
//!
//! The reader is strict where it matters: mismatched end tags, undefined entities (no DTD
//! expansion, so no entity tricks) and nesting deeper than [`MAX_DEPTH`] are errors. Text is
//! kept exactly (keys may start or end with spaces); entity and character references are
//! resolved (quick-xml 0.38 reports them as separate `GeneralRef` events).

use std::borrow::Cow;

use quick_xml::Reader;
use quick_xml::events::Event;

use crate::error::{Error, S3Error};
use crate::request::Response;

/// The deepest nesting accepted (S3's documents are 3 or 4 levels deep).
pub const MAX_DEPTH: usize = 32;

/// An XML element: its local name (namespace prefix dropped), its text (the concatenated
/// character data directly inside it, unescaped) and its child elements. Attributes are not
/// kept: S3's responses carry no data in them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Element {
    pub name: String,
    pub text: String,
    pub children: Vec<Element>,
}

impl Element {
    /// The first child named `name`.
    pub fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }

    /// Every child named `name`, in document order.
    pub fn children_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }

    /// The text of the first child named `name`.
    pub fn child_text(&self, name: &str) -> Option<&str> {
        self.child(name).map(|c| c.text.as_str())
    }

    /// The text of the first child named `name`, `None` when absent or empty.
    pub fn child_text_nonempty(&self, name: &str) -> Option<&str> {
        self.child_text(name).filter(|t| !t.is_empty())
    }
}

/// Parses a whole document and returns its root element.
pub fn parse_document(body: &[u8]) -> Result<Element, Error> {
    let text = std::str::from_utf8(body)
        .map_err(|e| Error::InvalidResponse(format!("XML body is not UTF-8: {e}")))?;
    let bad = |what: String| Error::InvalidResponse(format!("malformed XML: {what}"));
    let mut reader = Reader::from_str(text);
    reader.config_mut().expand_empty_elements = true;
    reader.config_mut().check_end_names = true;

    let mut stack: Vec<Element> = Vec::new();
    loop {
        let event = reader
            .read_event()
            .map_err(|e| bad(format!("{e} at byte {}", reader.error_position())))?;
        match event {
            Event::Start(start) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(bad(format!("nested deeper than {MAX_DEPTH} elements")));
                }
                let name = std::str::from_utf8(start.local_name().as_ref())
                    .map_err(|e| bad(format!("element name is not UTF-8: {e}")))?
                    .to_string();
                stack.push(Element {
                    name,
                    ..Element::default()
                });
            }
            Event::End(_) => {
                let Some(done) = stack.pop() else {
                    return Err(bad("end tag without a start tag".into()));
                };
                match stack.last_mut() {
                    Some(parent) => parent.children.push(done),
                    None => return Ok(done),
                }
            }
            Event::Text(t) => {
                if let Some(cur) = stack.last_mut() {
                    let s = t
                        .xml10_content()
                        .map_err(|e| bad(format!("text is not valid: {e}")))?;
                    cur.text.push_str(&s);
                }
            }
            Event::CData(t) => {
                if let Some(cur) = stack.last_mut() {
                    let s = t
                        .decode()
                        .map_err(|e| bad(format!("CDATA is not valid: {e}")))?;
                    cur.text.push_str(&s);
                }
            }
            Event::GeneralRef(r) => {
                let c = if r.is_char_ref() {
                    r.resolve_char_ref()
                        .map_err(|e| bad(format!("bad character reference: {e}")))?
                } else {
                    let name = r
                        .decode()
                        .map_err(|e| bad(format!("bad entity reference: {e}")))?;
                    match name.as_ref() {
                        "amp" => Some('&'),
                        "lt" => Some('<'),
                        "gt" => Some('>'),
                        "quot" => Some('"'),
                        "apos" => Some('\''),
                        other => return Err(bad(format!("undefined entity &{other};"))),
                    }
                };
                match (c, stack.last_mut()) {
                    (Some(c), Some(cur)) => cur.text.push(c),
                    (None, _) => return Err(bad("bad character reference".into())),
                    (Some(_), None) => {}
                }
            }
            Event::Empty(_) => {
                // Not produced with `expand_empty_elements`.
            }
            Event::Decl(_) | Event::PI(_) | Event::Comment(_) | Event::DocType(_) => {}
            Event::Eof => {
                return Err(bad(if stack.is_empty() {
                    "no root element".into()
                } else {
                    "document ends inside an element".into()
                }));
            }
        }
    }
}

/// The [`S3Error`] of a response with an error status. The code, message, request id, host id
/// and resource come from the `<Error>` document when there is one; the request id and host
/// id otherwise from the `x-amz-request-id` and `x-amz-id-2` headers. Without a document (a
/// HEAD, or a proxy's HTML page) the code is `Http{status}` and the message says what came.
///
/// The document is read as a stream ([`error_fields`]): no tree is built, each field is kept up
/// to [`MAX_ERROR_FIELD`] bytes, and a document cut short (the transport reads error bodies only
/// up to a limit) still gives the fields before the cut.
pub fn parse_error(resp: &Response) -> S3Error {
    let mut err = S3Error {
        status: resp.status,
        code: format!("Http{}", resp.status),
        message: None,
        request_id: resp.header("x-amz-request-id").map(str::to_string),
        host_id: resp.header("x-amz-id-2").map(str::to_string),
        resource: None,
    };
    if resp.body.iter().all(u8::is_ascii_whitespace) {
        return err;
    }
    match error_fields(&resp.body) {
        Some(fields) => fill_error(&mut err, fields),
        // Anything else (another document, a proxy's HTML page, plain text): say what came.
        None => {
            err.message = Some(format!(
                "error response is not an S3 error document: {}",
                snippet(&resp.body)
            ));
        }
    }
    err
}

/// The error in a 2xx response whose body is an `<Error>` document (S3 answers
/// CompleteMultipartUpload with 200 before it knows the outcome, and may then send an error
/// in the body). `None` when the body is anything else.
pub fn error_in_success(resp: &Response) -> Option<S3Error> {
    let fields = error_fields(&resp.body)?;
    let mut err = S3Error {
        status: resp.status,
        code: format!("Http{}", resp.status),
        message: None,
        request_id: resp.header("x-amz-request-id").map(str::to_string),
        host_id: resp.header("x-amz-id-2").map(str::to_string),
        resource: None,
    };
    fill_error(&mut err, fields);
    Some(err)
}

/// The longest value kept of one field of an error document; the rest is cut with `…`.
pub const MAX_ERROR_FIELD: usize = 1024;

/// What an `<Error>` document says, as read by [`error_fields`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ErrorFields {
    pub code: Option<String>,
    pub message: Option<String>,
    pub request_id: Option<String>,
    pub host_id: Option<String>,
    pub resource: Option<String>,
    pub bucket: Option<String>,
    pub key: Option<String>,
}

impl ErrorFields {
    fn slot(&mut self, name: &[u8]) -> Option<&mut Option<String>> {
        Some(match name {
            b"Code" => &mut self.code,
            b"Message" => &mut self.message,
            b"RequestId" => &mut self.request_id,
            b"HostId" => &mut self.host_id,
            b"Resource" => &mut self.resource,
            b"BucketName" => &mut self.bucket,
            b"Key" => &mut self.key,
            _ => return None,
        })
    }
}

/// Reads the fields of an `<Error>` document as a stream: `None` when the root element is not
/// `Error` (or no root comes before the document breaks). Memory stays within the fields kept
/// (each up to [`MAX_ERROR_FIELD`] bytes) whatever the document holds: other elements are
/// skipped without being kept, and a document that breaks after its root gives what came
/// before the break (invalid UTF-8 ends it the same way).
pub fn error_fields(body: &[u8]) -> Option<ErrorFields> {
    let text = match std::str::from_utf8(body) {
        Ok(t) => t,
        Err(e) => std::str::from_utf8(&body[..e.valid_up_to()]).ok()?,
    };
    let mut reader = Reader::from_str(text);
    reader.config_mut().expand_empty_elements = true;
    reader.config_mut().check_end_names = true;
    let mut fields = ErrorFields::default();
    let mut depth = 0usize;
    // The field being read: a direct child of the root that `ErrorFields` keeps.
    let mut current: Option<Vec<u8>> = None;
    let mut seen_root = false;
    let push = |fields: &mut ErrorFields, current: &Option<Vec<u8>>, piece: &str| {
        let Some(slot) = current.as_deref().and_then(|n| fields.slot(n)) else {
            return;
        };
        let value = slot.get_or_insert_with(String::new);
        if value.len() >= MAX_ERROR_FIELD {
            // Full: what comes on is cut, and the value says so (once).
            if !piece.is_empty() && !value.ends_with('…') {
                value.push('…');
            }
            return;
        }
        let room = MAX_ERROR_FIELD - value.len();
        if piece.len() <= room {
            value.push_str(piece);
        } else {
            let mut cut = room;
            while !piece.is_char_boundary(cut) {
                cut -= 1;
            }
            value.push_str(&piece[..cut]);
            value.push('…');
        }
    };
    while let Ok(event) = reader.read_event() {
        match event {
            Event::Start(start) => {
                depth += 1;
                match depth {
                    1 => {
                        if start.local_name().as_ref() != b"Error" {
                            return None;
                        }
                        seen_root = true;
                    }
                    2 => current = Some(start.local_name().as_ref().to_vec()),
                    _ => {}
                }
            }
            Event::End(_) => {
                if depth == 2 {
                    current = None;
                }
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    break;
                }
            }
            Event::Text(t) if depth == 2 => match t.xml10_content() {
                Ok(s) => push(&mut fields, &current, &s),
                Err(_) => break,
            },
            Event::CData(t) if depth == 2 => match t.decode() {
                Ok(s) => push(&mut fields, &current, &s),
                Err(_) => break,
            },
            Event::GeneralRef(r) if depth == 2 => {
                let c = if r.is_char_ref() {
                    r.resolve_char_ref().ok().flatten()
                } else {
                    match r.decode().ok().as_deref() {
                        Some("amp") => Some('&'),
                        Some("lt") => Some('<'),
                        Some("gt") => Some('>'),
                        Some("quot") => Some('"'),
                        Some("apos") => Some('\''),
                        _ => None,
                    }
                };
                let Some(c) = c else { break };
                push(&mut fields, &current, c.encode_utf8(&mut [0u8; 4]));
            }
            Event::Eof => break,
            _ => {}
        }
    }
    seen_root.then_some(fields)
}

fn fill_error(err: &mut S3Error, fields: ErrorFields) {
    let nonempty = |v: Option<String>| v.filter(|t| !t.is_empty());
    if let Some(c) = nonempty(fields.code) {
        err.code = c;
    }
    err.message = nonempty(fields.message);
    if let Some(id) = nonempty(fields.request_id) {
        err.request_id = Some(id);
    }
    if let Some(id) = nonempty(fields.host_id) {
        err.host_id = Some(id);
    }
    err.resource = nonempty(fields.resource).or_else(|| {
        let bucket = nonempty(fields.bucket)?;
        Some(match nonempty(fields.key) {
            Some(k) => format!("{bucket}/{k}"),
            None => bucket,
        })
    });
}

/// The start of a body that is not XML, as printable text, for an error message.
fn snippet(body: &[u8]) -> String {
    const MAX: usize = 200;
    let s = String::from_utf8_lossy(&body[..body.len().min(MAX)]);
    let mut out: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if body.len() > MAX {
        out.push('…');
    }
    out
}

/// Escapes text for an XML element's content: `&`, `<`, `>` and `\r` (which a parser would
/// turn into `\n`). Characters XML 1.0 cannot carry at all (control characters other than tab,
/// newline and carriage return) are refused: no escape makes them valid.
pub fn escape_text(s: &str) -> Result<Cow<'_, str>, Error> {
    if let Some(c) = s
        .chars()
        .find(|&c| matches!(c, '\0'..='\x08' | '\x0b' | '\x0c' | '\x0e'..='\x1f' | '\u{fffe}' | '\u{ffff}'))
    {
        return Err(Error::Config(format!(
            "{c:?} cannot be written in an XML document (XML 1.0 forbids it)"
        )));
    }
    if !s.contains(['&', '<', '>', '\r']) {
        return Ok(Cow::Borrowed(s));
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\r' => out.push_str("&#13;"),
            c => out.push(c),
        }
    }
    Ok(Cow::Owned(out))
}
