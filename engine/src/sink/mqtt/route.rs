//! Topic routing: a static topic, a template rendered per message, or a topic taken whole from
//! an Iggy header. Templates are parsed (and unknown placeholders refused) at start-up; what a
//! message renders to is checked before it is sent, and a topic that cannot be sent is a
//! rejected message with the reason, handled by the sink's error policy.

use std::fmt::Write as _;

use bytes::Bytes;
use spillway_codec::MqttStr;
use spillway_codec::topic::check_topic_name;

use crate::message::{Message, PartitionInfo, header};

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Lit(String),
    Stream,
    Topic,
    Partition,
    Offset,
    Id,
    Header(String),
    /// A JSON pointer (RFC 6901), e.g. `/device/id`.
    Json(String),
}

impl Part {
    /// Same value for every message of a partition.
    fn per_partition(&self) -> bool {
        matches!(
            self,
            Part::Lit(_) | Part::Stream | Part::Topic | Part::Partition
        )
    }
}

/// A parsed topic template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

/// Placeholders a topic template may use, for error messages.
pub const PLACEHOLDERS: &str =
    "{stream}, {topic}, {partition}, {offset}, {id}, {header.NAME}, {json./POINTER} or {json.a.b}";

impl Template {
    /// Parses `text`. `{{` and `}}` stand for literal braces.
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut lit = String::new();
        let mut rest = text;
        while let Some(i) = rest.find(['{', '}']) {
            lit.push_str(&rest[..i]);
            let tail = &rest[i..];
            if let Some(after) = tail.strip_prefix("{{") {
                lit.push('{');
                rest = after;
                continue;
            }
            if let Some(after) = tail.strip_prefix("}}") {
                lit.push('}');
                rest = after;
                continue;
            }
            if tail.starts_with('}') {
                return Err(format!(
                    "unmatched '}}' in {text:?} (write '}}}}' for a literal brace)"
                ));
            }
            let Some(end) = tail.find('}') else {
                return Err(format!("unclosed '{{' in {text:?}"));
            };
            let name = &tail[1..end];
            let part = match name {
                "stream" => Part::Stream,
                "topic" => Part::Topic,
                "partition" => Part::Partition,
                "offset" => Part::Offset,
                "id" => Part::Id,
                _ => {
                    if let Some(h) = name.strip_prefix("header.").filter(|h| !h.is_empty()) {
                        Part::Header(h.to_owned())
                    } else if let Some(p) = name.strip_prefix("json.").filter(|p| !p.is_empty()) {
                        Part::Json(if p.starts_with('/') {
                            p.to_owned()
                        } else {
                            format!("/{}", p.replace('.', "/"))
                        })
                    } else {
                        return Err(format!(
                            "unknown placeholder {{{name}}} in {text:?}; use {PLACEHOLDERS}"
                        ));
                    }
                }
            };
            if !lit.is_empty() {
                parts.push(Part::Lit(std::mem::take(&mut lit)));
            }
            parts.push(part);
            rest = &tail[end + 1..];
        }
        lit.push_str(rest);
        if !lit.is_empty() {
            parts.push(Part::Lit(lit));
        }
        Ok(Template { parts })
    }

    /// No placeholders at all.
    pub fn is_static(&self) -> bool {
        self.parts.iter().all(|p| matches!(p, Part::Lit(_)))
    }

    /// Renders to the same topic for every message of a partition.
    pub fn per_partition(&self) -> bool {
        self.parts.iter().all(Part::per_partition)
    }

    /// The literal text of a static template.
    pub fn literal(&self) -> String {
        let mut s = String::new();
        for p in &self.parts {
            if let Part::Lit(l) = p {
                s.push_str(l);
            }
        }
        s
    }

    /// Renders the template for `m` of `p` into `out` (cleared first).
    pub fn render(
        &self,
        p: &PartitionInfo,
        m: Option<&Message>,
        out: &mut String,
    ) -> Result<(), String> {
        out.clear();
        let mut json: Option<serde_json::Value> = None;
        for part in &self.parts {
            match part {
                Part::Lit(l) => out.push_str(l),
                Part::Stream => out.push_str(&p.stream),
                Part::Topic => out.push_str(&p.topic),
                Part::Partition => {
                    let _ = write!(out, "{}", p.partition);
                }
                Part::Offset | Part::Id | Part::Header(_) | Part::Json(_) => {
                    let Some(m) = m else {
                        return Err("the template needs a message".to_owned());
                    };
                    match part {
                        Part::Offset => {
                            let _ = write!(out, "{}", m.offset);
                        }
                        Part::Id => {
                            let _ = write!(out, "{}", m.id);
                        }
                        Part::Header(name) => {
                            match header(&m.headers, name).map(|h| h.value_string()) {
                                Some(v) => out.push_str(&v),
                                None => {
                                    return Err(format!(
                                        "the topic template needs header {name:?}, which the message does not have"
                                    ));
                                }
                            }
                        }
                        Part::Json(pointer) => {
                            if json.is_none() {
                                json = Some(serde_json::from_slice(&m.payload).map_err(|e| {
                                    format!(
                                        "the topic template reads {{json.{pointer}}} but the payload is not JSON: {e}"
                                    )
                                })?);
                            }
                            let value = json.as_ref().and_then(|j| j.pointer(pointer));
                            match value {
                                Some(serde_json::Value::String(s)) => out.push_str(s),
                                Some(
                                    v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_)),
                                ) => {
                                    let _ = write!(out, "{v}");
                                }
                                Some(_) => {
                                    return Err(format!(
                                        "the payload's {pointer} is not a string, number or boolean"
                                    ));
                                }
                                None => {
                                    return Err(format!("the payload has no field {pointer}"));
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
        Ok(())
    }
}

/// Checks a rendered topic name: not empty, no `+`/`#`, no U+0000, valid UTF-8, at most
/// 65,535 bytes. The error says which.
pub fn topic_name(topic: Bytes) -> Result<MqttStr, String> {
    let shown = || {
        let s = String::from_utf8_lossy(&topic);
        if s.len() > 80 {
            format!("{:?}…", s.chars().take(80).collect::<String>())
        } else {
            format!("{s:?}")
        }
    };
    check_topic_name(&topic).map_err(|e| format!("topic {}: {e}", shown()))?;
    MqttStr::from_bytes(topic.clone()).map_err(|e| format!("topic {}: {e}", shown()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::rc::Rc;

    use super::*;

    fn part() -> PartitionInfo {
        PartitionInfo {
            slot: 0,
            stream: Rc::from("events"),
            topic: Rc::from("orders"),
            partition: 3,
        }
    }

    fn msg(payload: &'static [u8], headers: Bytes) -> Message {
        Message {
            offset: 41,
            id: 7,
            timestamp: 1,
            origin_timestamp: 2,
            payload: Bytes::from_static(payload),
            headers,
        }
    }

    fn render(t: &str, m: &Message) -> Result<String, String> {
        let t = Template::parse(t)?;
        let mut out = String::new();
        t.render(&part(), Some(m), &mut out)?;
        Ok(out)
    }

    #[test]
    fn placeholders_render() {
        let headers = crate::message::encode_headers(&[("site", "north")]);
        let m = msg(br#"{"device":{"id":"d-9","n":5}}"#, headers);
        assert_eq!(
            render(
                "x/{stream}/{topic}/{partition}/{offset}/{id}/{header.site}/{json.device.id}/{json./device/n}",
                &m
            )
            .unwrap(),
            "x/events/orders/3/41/7/north/d-9/5"
        );
        assert_eq!(render("a{{b}}c", &m).unwrap(), "a{b}c");
    }

    #[test]
    fn bad_templates_and_missing_values_are_named() {
        assert!(Template::parse("a/{nope}").unwrap_err().contains("{nope}"));
        assert!(
            Template::parse("a/{stream")
                .unwrap_err()
                .contains("unclosed")
        );
        assert!(Template::parse("a}b").unwrap_err().contains("unmatched"));
        let m = msg(b"not json", Bytes::new());
        assert!(
            render("{header.site}", &m)
                .unwrap_err()
                .contains("\"site\"")
        );
        assert!(render("{json.a}", &m).unwrap_err().contains("not JSON"));
        let m = msg(br#"{"a":{"b":1}}"#, Bytes::new());
        assert!(render("{json.a}", &m).unwrap_err().contains("not a string"));
        assert!(render("{json.z}", &m).unwrap_err().contains("no field /z"));
    }

    #[test]
    fn kinds() {
        assert!(Template::parse("a/b").unwrap().is_static());
        assert!(Template::parse("a/{partition}").unwrap().per_partition());
        assert!(!Template::parse("a/{offset}").unwrap().per_partition());
    }

    #[test]
    fn topic_checks() {
        assert!(topic_name(Bytes::from_static(b"a/b")).is_ok());
        assert!(topic_name(Bytes::new()).unwrap_err().contains("empty"));
        assert!(
            topic_name(Bytes::from_static(b"a/+"))
                .unwrap_err()
                .contains("wildcard")
        );
        assert!(
            topic_name(Bytes::from_static(b"a\0b"))
                .unwrap_err()
                .contains("U+0000")
        );
        assert!(
            topic_name(Bytes::from(vec![b'a'; 70_000]))
                .unwrap_err()
                .contains("65535")
        );
    }
}
