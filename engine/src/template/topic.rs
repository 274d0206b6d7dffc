//! MQTT topic templates (`mqtt.topic`), rendered per message, and the one check of an MQTT
//! topic name that config, routing, wills and dead letters all use.

use std::fmt::Write as _;

use bytes::Bytes;
use spillway_codec::MqttStr;
use spillway_codec::topic::check_topic_name;

use super::{Field, Name, Template, Vocabulary};
use crate::message::{Message, PartitionInfo, header};

/// What a topic template takes.
pub const VOCABULARY: Vocabulary = Vocabulary {
    names: &[
        ("stream", Name::Stream),
        ("topic", Name::Topic),
        ("partition", Name::Partition),
        ("offset", Name::Offset),
        ("id", Name::Id),
    ],
    header: true,
    json: true,
};

/// A parsed `mqtt.topic`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicTemplate(Template);

super::from_text!(TopicTemplate);

impl TopicTemplate {
    /// Parses `text`.
    pub fn parse(text: &str) -> Result<TopicTemplate, String> {
        Template::parse(text, &VOCABULARY).map(TopicTemplate)
    }

    /// The template itself.
    pub fn template(&self) -> &Template {
        &self.0
    }

    /// No placeholders at all.
    pub fn is_static(&self) -> bool {
        self.0.is_static()
    }

    /// What a static template renders to.
    pub fn literal(&self) -> String {
        self.0.literal()
    }

    /// Renders to the same topic for every message of a partition.
    pub fn per_partition(&self) -> bool {
        self.0.pieces().iter().all(|p| {
            !matches!(
                p,
                super::Piece::Field(
                    Field::Named(Name::Offset | Name::Id) | Field::Header(_) | Field::Json(_)
                )
            )
        })
    }

    /// Renders the template for `m` of `p` into `out` (cleared first); `m` may be absent when
    /// [`per_partition`](Self::per_partition) holds.
    pub fn render(
        &self,
        p: &PartitionInfo,
        m: Option<&Message>,
        out: &mut String,
    ) -> Result<(), String> {
        out.clear();
        let mut json: Option<serde_json::Value> = None;
        self.0.render_into(out, |field, out| {
            let message = || m.ok_or_else(|| "the template needs a message".to_owned());
            match field {
                Field::Named(Name::Stream) => out.push_str(&p.stream),
                Field::Named(Name::Topic) => out.push_str(&p.topic),
                Field::Named(Name::Partition) => {
                    let _ = write!(out, "{}", p.partition);
                }
                Field::Named(Name::Offset) => {
                    let _ = write!(out, "{}", message()?.offset);
                }
                Field::Named(Name::Id) => {
                    let _ = write!(out, "{}", message()?.id);
                }
                Field::Named(_) => {}
                Field::Header(name) => match header(&message()?.headers, name) {
                    Some(h) => out.push_str(&h.value_string()),
                    None => {
                        return Err(format!(
                            "the topic template needs header {name:?}, which the message does not have"
                        ));
                    }
                },
                Field::Json(pointer) => {
                    if json.is_none() {
                        json = Some(serde_json::from_slice(&message()?.payload).map_err(|e| {
                            format!(
                                "the topic template reads {{json.{pointer}}} but the payload is not JSON: {e}"
                            )
                        })?);
                    }
                    if let Some(j) = json.as_ref() {
                        super::json_field_into(j, pointer, out)?;
                    }
                }
            }
            Ok(())
        })
    }
}

/// Checks a topic name (what a PUBLISH or a will carries): not empty, no `+`/`#`, no U+0000,
/// valid UTF-8, at most 65,535 bytes. The error shows the topic (cut at 80 characters) and
/// says which rule it breaks.
pub fn topic_name(topic: impl Into<Bytes>) -> Result<MqttStr, String> {
    let topic: Bytes = topic.into();
    let shown = || {
        let s = String::from_utf8_lossy(&topic);
        if s.chars().count() > 80 {
            format!("{:?}…", s.chars().take(80).collect::<String>())
        } else {
            format!("{s:?}")
        }
    };
    check_topic_name(&topic).map_err(|e| format!("{} is not a topic name: {e}", shown()))?;
    MqttStr::from_bytes(topic.clone()).map_err(|e| format!("{} is not a topic name: {e}", shown()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::rc::Rc;

    use crate::ids::{PartitionId, Slot};

    use super::*;
    use crate::message::encode_headers;

    fn part() -> PartitionInfo {
        PartitionInfo {
            slot: Slot(0),
            stream: Rc::from("events"),
            topic: Rc::from("orders"),
            partition: PartitionId(3),
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
        let t = TopicTemplate::parse(t)?;
        let mut out = String::new();
        t.render(&part(), Some(m), &mut out)?;
        Ok(out)
    }

    #[test]
    fn renders_metadata_headers_and_json() {
        let h = encode_headers(&[("device", "d-9")]);
        let m = msg(br#"{"site":{"id":"eu-1"},"n":5,"ok":true}"#, h);
        assert_eq!(
            render("{stream}/{topic}/{partition}/{offset}/{id}", &m).unwrap(),
            "events/orders/3/41/7"
        );
        assert_eq!(render("d/{header.device}", &m).unwrap(), "d/d-9");
        assert_eq!(
            render("s/{json./site/id}/{json.n}/{json.ok}", &m).unwrap(),
            "s/eu-1/5/true"
        );
        assert!(
            render("{json.site}", &m)
                .unwrap_err()
                .contains("not a string")
        );
        assert!(render("{json.none}", &m).unwrap_err().contains("no field"));
        assert!(render("{header.x}", &m).unwrap_err().contains("\"x\""));
        let not_json = msg(b"plain", Bytes::new());
        assert!(
            render("{json.a}", &not_json)
                .unwrap_err()
                .contains("not JSON")
        );
    }

    #[test]
    fn knows_what_varies_per_message() {
        assert!(TopicTemplate::parse("a/b").unwrap().is_static());
        assert!(
            TopicTemplate::parse("a/{partition}")
                .unwrap()
                .per_partition()
        );
        assert!(!TopicTemplate::parse("a/{offset}").unwrap().per_partition());
        assert!(!TopicTemplate::parse("a/{json.x}").unwrap().per_partition());
        let t = TopicTemplate::parse("{stream}/{partition}").unwrap();
        let mut out = String::new();
        t.render(&part(), None, &mut out).unwrap();
        assert_eq!(out, "events/3");
        let t = TopicTemplate::parse("{offset}").unwrap();
        assert!(t.render(&part(), None, &mut out).is_err());
        assert!(
            TopicTemplate::parse("a/{first_offset}")
                .unwrap_err()
                .contains("{json./POINTER}")
        );
    }

    #[test]
    fn topic_names_are_checked_once() {
        assert!(topic_name("a/b").is_ok());
        assert!(topic_name("").unwrap_err().contains("empty"));
        assert!(
            topic_name("a/+")
                .unwrap_err()
                .contains("is not a topic name")
        );
        assert!(topic_name("a/+").unwrap_err().contains("wildcard"));
        assert!(topic_name("a/#").unwrap_err().contains("wildcard"));
        assert!(topic_name("a\0b").is_err());
        assert!(topic_name(vec![0xff, b'a']).is_err());
        assert!(topic_name("x".repeat(65_536)).unwrap_err().contains('…'));
    }
}
