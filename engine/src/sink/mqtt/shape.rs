//! From an Iggy message to an MQTT PUBLISH: the topic (see [`crate::template::topic`]), QoS and retain
//! (configured, or per message from headers), the envelope, and the MQTT 5 properties.
//!
//! The payload is shared, never copied, unless the JSON envelope wraps it. A message that
//! cannot be sent as configured (a topic that does not render or is not a valid topic name, a
//! header value that is not a QoS, a header that cannot be a user property…) is an `Err` with
//! the reason; the sink hands it to its error policy.

use std::rc::Rc;

use bytes::Bytes;
use spillway_codec::{MqttStr, Properties, Publish, QoS, ReasonCode};

use crate::config::{Envelope, MqttSinkConfig, MqttVersion, PayloadEncoding};
use crate::ids::Slot;
use crate::json;
use crate::message::{self, Message, PartitionInfo};
use crate::template::topic::{TopicTemplate, topic_name};

/// The user-property keys of the `properties` envelope, in the order they are sent.
pub const META_KEYS: [&str; 7] = [
    "iggy-stream",
    "iggy-topic",
    "iggy-partition",
    "iggy-offset",
    "iggy-id",
    "iggy-timestamp",
    "iggy-origin-timestamp",
];

/// The headers a message may set its PUBLISH from, each named by its own config key.
#[derive(Debug, Clone, Copy)]
enum Field {
    Topic,
    Qos,
    Retain,
    ContentType,
    PayloadFormat,
    MessageExpiry,
    ResponseTopic,
    CorrelationData,
}

const FIELDS: usize = 8;

/// The configured headers found in one message, from one pass over its headers (the first
/// of a name wins, and the pass stops at the first malformed header, as
/// [`message::header`] does).
#[derive(Default)]
struct Found<'a>([Option<message::Header<'a>>; FIELDS]);

impl<'a> Found<'a> {
    fn get(&self, field: Field) -> Option<message::Header<'a>> {
        self.0[field as usize]
    }

    /// The header's name (for errors) and its value as text.
    fn text<'n>(&self, field: Field, name: &'n Option<String>) -> Option<(&'n str, String)> {
        let name = name.as_deref()?;
        Some((name, self.get(field)?.value_string()))
    }
}

/// How messages are routed.
#[derive(Debug)]
enum Route {
    /// One topic for everything.
    Static(MqttStr),
    /// A template; per-partition templates are rendered once per partition.
    Template {
        template: TopicTemplate,
        cache: Vec<Option<MqttStr>>,
    },
    /// The value of a header, else the fallback.
    Header {
        name: String,
        fallback: Option<Box<Route>>,
    },
}

fn static_str(s: &'static str) -> MqttStr {
    // The keys above are valid MQTT strings.
    MqttStr::from_bytes(Bytes::from_static(s.as_bytes())).unwrap_or_default()
}

fn text(s: &str) -> Result<MqttStr, String> {
    MqttStr::from_str(s).map_err(|e| format!("{s:?}: {e}"))
}

/// Turns messages into PUBLISH packets for one sink on one shard.
#[derive(Debug)]
pub struct Shaper {
    v5: bool,
    qos: QoS,
    retain: bool,
    route: Route,
    envelope: Envelope,
    payload: PayloadEncoding,
    headers_as_properties: bool,
    qos_header: Option<String>,
    retain_header: Option<String>,
    content_type_header: Option<String>,
    payload_format_header: Option<String>,
    message_expiry_header: Option<String>,
    response_topic_header: Option<String>,
    /// Every configured header name with the field it sets: one scan of a message's headers
    /// finds them all.
    lookups: Vec<(Box<[u8]>, Field)>,
    meta_keys: [MqttStr; 7],
    scratch: String,
}

impl Shaper {
    /// Compiles the routing and options of `cfg`; the error names the key.
    pub fn new(cfg: &MqttSinkConfig) -> Result<Shaper, String> {
        let route_of = |template: &TopicTemplate| -> Result<Route, String> {
            let template = template.clone();
            if template.is_static() {
                let topic = topic_name(Bytes::from(template.literal()))
                    .map_err(|e| format!("mqtt.topic: {e}"))?;
                Ok(Route::Static(topic))
            } else {
                Ok(Route::Template {
                    template,
                    cache: Vec::new(),
                })
            }
        };
        let route = match (&cfg.topic, &cfg.topic_header) {
            (Some(t), None) => route_of(t)?,
            (t, Some(h)) => Route::Header {
                name: h.clone(),
                fallback: t.as_ref().map(route_of).transpose()?.map(Box::new),
            },
            (None, None) => {
                return Err(
                    "mqtt.topic: missing: set topic (static or a template) or topic_header"
                        .to_owned(),
                );
            }
        };
        let qos = QoS::from_u8(cfg.qos)
            .ok_or_else(|| format!("mqtt.qos: {} is not 0, 1 or 2", cfg.qos))?;
        let lookups = [
            (&cfg.topic_header, Field::Topic),
            (&cfg.qos_header, Field::Qos),
            (&cfg.retain_header, Field::Retain),
            (&cfg.content_type_header, Field::ContentType),
            (&cfg.payload_format_header, Field::PayloadFormat),
            (&cfg.message_expiry_header, Field::MessageExpiry),
            (&cfg.response_topic_header, Field::ResponseTopic),
            (&cfg.correlation_data_header, Field::CorrelationData),
        ]
        .into_iter()
        .filter_map(|(name, field)| Some((name.as_deref()?.as_bytes().into(), field)))
        .collect();
        Ok(Shaper {
            v5: cfg.protocol == MqttVersion::V5,
            qos,
            retain: cfg.retain,
            route,
            envelope: cfg.envelope,
            payload: cfg.payload,
            headers_as_properties: cfg.headers_as_properties,
            qos_header: cfg.qos_header.clone(),
            retain_header: cfg.retain_header.clone(),
            content_type_header: cfg.content_type_header.clone(),
            payload_format_header: cfg.payload_format_header.clone(),
            message_expiry_header: cfg.message_expiry_header.clone(),
            response_topic_header: cfg.response_topic_header.clone(),
            lookups,
            meta_keys: META_KEYS.map(static_str),
            scratch: String::new(),
        })
    }

    /// Forgets what was cached for partition slot `slot`.
    pub fn release(&mut self, slot: Slot) {
        let slot = slot.0;
        fn clear(route: &mut Route, slot: usize) {
            match route {
                Route::Template { cache, .. } => {
                    if let Some(c) = cache.get_mut(slot) {
                        *c = None;
                    }
                }
                Route::Header {
                    fallback: Some(f), ..
                } => clear(f, slot),
                _ => {}
            }
        }
        clear(&mut self.route, slot);
    }

    fn topic(
        route: &mut Route,
        scratch: &mut String,
        p: &PartitionInfo,
        m: &Message,
        header: Option<message::Header<'_>>,
    ) -> Result<MqttStr, String> {
        match route {
            Route::Static(t) => Ok(t.clone()),
            Route::Template { template, cache } => {
                if template.per_partition() {
                    if let Some(Some(t)) = cache.get(p.slot.0) {
                        return Ok(t.clone());
                    }
                    template.render(p, None, scratch)?;
                    let t = topic_name(Bytes::copy_from_slice(scratch.as_bytes()))?;
                    if cache.len() <= p.slot.0 {
                        cache.resize(p.slot.0 + 1, None);
                    }
                    cache[p.slot.0] = Some(t.clone());
                    return Ok(t);
                }
                template.render(p, Some(m), scratch)?;
                topic_name(Bytes::copy_from_slice(scratch.as_bytes()))
            }
            Route::Header { name, fallback } => match header {
                Some(h) => topic_name(Bytes::copy_from_slice(h.value)),
                None => match fallback {
                    Some(f) => Self::topic(f, scratch, p, m, None),
                    None => Err(format!(
                        "the message has no header {name:?} to take its topic from (topic_header)"
                    )),
                },
            },
        }
    }

    /// One pass over `m`'s headers for every configured one.
    fn scan<'a>(&self, m: &'a Message) -> Found<'a> {
        let mut found = Found::default();
        if m.headers.is_empty() || self.lookups.is_empty() {
            return found;
        }
        for h in message::headers(&m.headers).map_while(Result::ok) {
            for (name, field) in &self.lookups {
                let slot = &mut found.0[*field as usize];
                if slot.is_none() && h.key == &name[..] {
                    *slot = Some(h);
                }
            }
        }
        found
    }

    /// The PUBLISH for `m` of `p`, or why it cannot be sent.
    pub fn shape(&mut self, p: &PartitionInfo, m: &Message) -> Result<Publish, String> {
        let found = self.scan(m);
        let topic = Self::topic(
            &mut self.route,
            &mut self.scratch,
            p,
            m,
            found.get(Field::Topic),
        )?;
        let mut qos = self.qos;
        if let Some((name, v)) = found.text(Field::Qos, &self.qos_header) {
            qos = match v.trim() {
                "0" => QoS::AtMostOnce,
                "1" => QoS::AtLeastOnce,
                "2" => QoS::ExactlyOnce,
                other => {
                    return Err(format!(
                        "header {name:?} = {other:?} is not a QoS (0, 1, 2)"
                    ));
                }
            };
        }
        let mut retain = self.retain;
        if let Some((name, v)) = found.text(Field::Retain, &self.retain_header) {
            retain = parse_bool(&v)
                .ok_or_else(|| format!("header {name:?} = {v:?} is not true/false"))?;
        }
        let payload = match self.envelope {
            Envelope::Json => Bytes::from(self.json_envelope(p, m, None)),
            Envelope::None | Envelope::Properties => m.payload.clone(),
        };
        let mut publish = Publish::new(topic, payload);
        publish.qos = qos;
        publish.retain = retain;
        if self.v5 {
            publish.properties = self.properties(p, m, &found)?;
        }
        Ok(publish)
    }

    /// MQTT 5 properties of `m`: none (nothing allocated) unless configured.
    fn properties(
        &self,
        p: &PartitionInfo,
        m: &Message,
        found: &Found<'_>,
    ) -> Result<Properties, String> {
        let mut props = Properties::default();
        if self.envelope == Envelope::Properties {
            self.metadata_properties(&mut props, p, m)?;
        }
        if self.headers_as_properties && !m.headers.is_empty() {
            for h in message::headers(&m.headers) {
                let h = h.map_err(|e| format!("the message's user headers: {e}"))?;
                let key = text(&h.key_str()).map_err(|e| format!("header key {e}"))?;
                let value = text(&h.value_string()).map_err(|e| format!("header value {e}"))?;
                props.user_properties.push((key, value));
            }
        }
        if let Some((_, v)) = found.text(Field::ContentType, &self.content_type_header) {
            props.content_type = Some(text(&v).map_err(|e| format!("content type {e}"))?);
        }
        if let Some((name, v)) = found.text(Field::PayloadFormat, &self.payload_format_header) {
            props.payload_format_indicator = Some(match v.trim() {
                "1" | "utf8" | "utf-8" | "UTF-8" | "true" => true,
                "0" | "bytes" | "false" => false,
                other => {
                    return Err(format!(
                        "header {name:?} = {other:?} is not a payload format (0/bytes, 1/utf8)"
                    ));
                }
            });
        }
        if let Some((name, v)) = found.text(Field::MessageExpiry, &self.message_expiry_header) {
            props.message_expiry_interval = Some(v.trim().parse::<u32>().map_err(|_| {
                format!("header {name:?} = {v:?} is not a message expiry in seconds")
            })?);
        }
        if let Some((_, v)) = found.text(Field::ResponseTopic, &self.response_topic_header) {
            props.response_topic = Some(
                topic_name(Bytes::from(v.into_bytes()))
                    .map_err(|e| format!("response topic: {e}"))?,
            );
        }
        if let Some(h) = found.get(Field::CorrelationData) {
            props.correlation_data = Some(m.headers.slice_ref(h.value));
        }
        Ok(props)
    }

    fn metadata_properties(
        &self,
        props: &mut Properties,
        p: &PartitionInfo,
        m: &Message,
    ) -> Result<(), String> {
        let values = [
            text(&p.stream)?,
            text(&p.topic)?,
            text(&p.partition.to_string())?,
            text(&m.offset.to_string())?,
            text(&m.id.to_string())?,
            text(&m.timestamp.to_string())?,
            text(&m.origin_timestamp.to_string())?,
        ];
        for (k, v) in self.meta_keys.iter().zip(values) {
            props.user_properties.push((k.clone(), v));
        }
        Ok(())
    }

    /// `{"metadata":{...},"headers":{...},"payload":...}` (with `"error"` for a dead letter).
    fn json_envelope(&self, p: &PartitionInfo, m: &Message, error: Option<&str>) -> Vec<u8> {
        let mut out = Vec::with_capacity(m.payload.len() + 256);
        json::envelope(&mut out, p, m, error, self.payload);
        out
    }

    /// The dead letter of `m`: to `topic`, QoS 1, with the reason as user properties (MQTT 5)
    /// or inside a JSON envelope (3.1.1).
    pub fn dead_letter(
        &self,
        topic: &MqttStr,
        p: &PartitionInfo,
        m: &Message,
        reason: &str,
        code: Option<ReasonCode>,
    ) -> Publish {
        let payload = if self.v5 {
            m.payload.clone()
        } else {
            Bytes::from(self.json_envelope(p, m, Some(reason)))
        };
        let mut publish = Publish::new(topic.clone(), payload);
        publish.qos = QoS::AtLeastOnce;
        if self.v5 {
            let mut props = Properties::default();
            // Reasons and metadata come from the broker and Iggy: replace what an MQTT string
            // may not hold rather than lose the dead letter.
            let clean =
                |s: &str| MqttStr::from_str(&s.replace('\0', "\u{fffd}")).unwrap_or_default();
            props
                .user_properties
                .push((static_str("spillway-error"), clean(reason)));
            if let Some(c) = code {
                props.user_properties.push((
                    static_str("spillway-reason-code"),
                    clean(&format!("{:#04x}", c.0)),
                ));
            }
            let values = [
                clean(&p.stream),
                clean(&p.topic),
                clean(&p.partition.to_string()),
                clean(&m.offset.to_string()),
                clean(&m.id.to_string()),
                clean(&m.timestamp.to_string()),
                clean(&m.origin_timestamp.to_string()),
            ];
            for (k, v) in self.meta_keys.iter().zip(values) {
                props.user_properties.push((k.clone(), v));
            }
            publish.properties = props;
        }
        publish
    }
}

fn parse_bool(v: &str) -> Option<bool> {
    match v.trim() {
        "1" | "true" | "TRUE" | "True" | "yes" => Some(true),
        "0" | "false" | "FALSE" | "False" | "no" => Some(false),
        _ => None,
    }
}

/// What the dead-letter path needs of a message once its PUBLISH is gone: kept only under
/// `on_error = "dead_letter"`.
#[derive(Debug)]
pub struct Kept {
    pub partition: Rc<PartitionInfo>,
    pub message: Message,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ids::PartitionId;
    use crate::message::encode_headers;

    fn cfg(extra: &str) -> MqttSinkConfig {
        toml::from_str(&format!("address = \"127.0.0.1:1883\"\n{extra}")).unwrap()
    }

    fn part() -> PartitionInfo {
        PartitionInfo {
            slot: Slot(1),
            stream: Rc::from("events"),
            topic: Rc::from("orders"),
            partition: PartitionId(2),
        }
    }

    fn msg(payload: &'static [u8], headers: &[(&str, &str)]) -> Message {
        Message {
            offset: 9,
            id: 77,
            timestamp: 100,
            origin_timestamp: 99,
            payload: Bytes::from_static(payload),
            headers: encode_headers(headers),
        }
    }

    #[test]
    fn static_and_per_partition_topics() {
        let mut s = Shaper::new(&cfg("topic = \"a/b\"")).unwrap();
        let p = s.shape(&part(), &msg(b"x", &[])).unwrap();
        assert_eq!(p.topic.as_str(), "a/b");
        assert_eq!(p.qos, QoS::AtLeastOnce);
        assert!(p.properties.is_empty());
        let mut s = Shaper::new(&cfg("topic = \"{stream}/{topic}/{partition}\"")).unwrap();
        let a = s.shape(&part(), &msg(b"x", &[])).unwrap();
        let b = s.shape(&part(), &msg(b"y", &[])).unwrap();
        assert_eq!(a.topic.as_str(), "events/orders/2");
        // Rendered once per partition: the same buffer.
        assert_eq!(a.topic.bytes().as_ptr(), b.topic.bytes().as_ptr());
    }

    #[test]
    fn header_routing_with_fallback_and_rejections() {
        let mut s = Shaper::new(&cfg("topic_header = \"to\"")).unwrap();
        assert_eq!(
            s.shape(&part(), &msg(b"x", &[("to", "d/1")]))
                .unwrap()
                .topic
                .as_str(),
            "d/1"
        );
        assert!(
            s.shape(&part(), &msg(b"x", &[]))
                .unwrap_err()
                .contains("\"to\"")
        );
        assert!(
            s.shape(&part(), &msg(b"x", &[("to", "d/#")]))
                .unwrap_err()
                .contains("wildcard")
        );
        let mut s = Shaper::new(&cfg("topic_header = \"to\"\ntopic = \"fb\"")).unwrap();
        assert_eq!(
            s.shape(&part(), &msg(b"x", &[])).unwrap().topic.as_str(),
            "fb"
        );
    }

    #[test]
    fn one_scan_finds_each_configured_header_as_a_lookup_by_name_would() {
        // Two options on one header, a name given twice (the first wins), and a malformed
        // header after which nothing is read (as `message::header` reads them).
        let mut s = Shaper::new(&cfg(
            "topic_header = \"to\"\nqos_header = \"q\"\nretain_header = \"q2\"\n\
             content_type_header = \"q\"\nresponse_topic_header = \"late\"\n\
             headers_as_properties = false",
        ))
        .unwrap();
        let mut m = msg(
            b"{}",
            &[("q", "1"), ("to", "a/b"), ("q", "2"), ("q2", "false")],
        );
        let mut raw = m.headers.to_vec();
        raw.extend_from_slice(&[2, 9, 0, 0, 0, b'x']);
        m.headers = Bytes::from(raw);
        let p = s.shape(&part(), &m).unwrap();
        assert_eq!(p.topic.as_str(), "a/b");
        assert_eq!(p.qos, QoS::AtLeastOnce);
        assert!(!p.retain);
        assert_eq!(p.properties.content_type.as_ref().unwrap().as_str(), "1");
        assert!(p.properties.response_topic.is_none());
        for field in ["to", "q", "q2"] {
            let h = message::header(&m.headers, field).unwrap();
            assert_eq!(
                h.value,
                s.scan(&m)
                    .0
                    .iter()
                    .flatten()
                    .find(|f| f.key == field.as_bytes())
                    .unwrap()
                    .value
            );
        }
    }

    #[test]
    fn per_message_overrides_and_properties() {
        let mut s = Shaper::new(&cfg(
            "topic = \"t\"\nqos_header = \"q\"\nretain_header = \"r\"\ncontent_type_header = \"ct\"\n\
             payload_format_header = \"pf\"\nmessage_expiry_header = \"exp\"\n\
             response_topic_header = \"rt\"\ncorrelation_data_header = \"cd\"\nenvelope = \"properties\"",
        ))
        .unwrap();
        let m = msg(
            b"{}",
            &[
                ("q", "2"),
                ("r", "true"),
                ("ct", "application/json"),
                ("pf", "utf8"),
                ("exp", "60"),
                ("rt", "reply/here"),
                ("cd", "abc"),
            ],
        );
        let p = s.shape(&part(), &m).unwrap();
        assert_eq!(p.qos, QoS::ExactlyOnce);
        assert!(p.retain);
        assert_eq!(
            p.properties.content_type.as_ref().unwrap().as_str(),
            "application/json"
        );
        assert_eq!(p.properties.payload_format_indicator, Some(true));
        assert_eq!(p.properties.message_expiry_interval, Some(60));
        assert_eq!(
            p.properties.response_topic.as_ref().unwrap().as_str(),
            "reply/here"
        );
        assert_eq!(p.properties.correlation_data.as_deref(), Some(&b"abc"[..]));
        let user: Vec<(String, String)> = p
            .properties
            .user_properties
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.as_str().to_owned()))
            .collect();
        assert_eq!(user[0], ("iggy-stream".into(), "events".into()));
        assert_eq!(user[3], ("iggy-offset".into(), "9".into()));
        assert_eq!(user[4], ("iggy-id".into(), "77".into()));
        assert!(user.contains(&("q".into(), "2".into())));
        assert!(
            s.shape(&part(), &msg(b"x", &[("q", "7")]))
                .unwrap_err()
                .contains("not a QoS")
        );
    }

    #[test]
    fn json_envelope_and_v311() {
        let mut s = Shaper::new(&cfg(
            "topic = \"t\"\nenvelope = \"json\"\nprotocol = \"3.1.1\"",
        ))
        .unwrap();
        let p = s
            .shape(&part(), &msg(br#"{"a":1}"#, &[("k", "v")]))
            .unwrap();
        assert!(p.properties.is_empty());
        let v: serde_json::Value = serde_json::from_slice(&p.payload).unwrap();
        assert_eq!(v["metadata"]["offset"], 9);
        assert_eq!(v["metadata"]["id"], "77");
        assert_eq!(v["metadata"]["stream"], "events");
        assert_eq!(v["headers"]["k"], "v");
        assert_eq!(v["payload"]["a"], 1);
        let dl = s.dead_letter(
            &MqttStr::from_str("dlq").unwrap(),
            &part(),
            &msg(b"raw", &[]),
            "denied",
            Some(ReasonCode::NOT_AUTHORIZED),
        );
        let v: serde_json::Value = serde_json::from_slice(&dl.payload).unwrap();
        assert_eq!(v["error"], "denied");
        assert_eq!(v["payload"], "raw");
    }
}
