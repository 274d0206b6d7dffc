//! What a harness subscriber records for each message the broker delivers.

use std::fmt;

use bytes::Bytes;

/// One delivered PUBLISH, as the subscriber saw it.
#[derive(Clone, PartialEq, Eq)]
pub struct Received {
    /// The topic name (resolved through the topic alias if the broker used one).
    pub topic: String,
    /// The payload.
    pub payload: Bytes,
    /// The QoS of the delivery (at most the subscription QoS).
    pub qos: u8,
    /// The RETAIN flag (set for retained messages sent on subscribe).
    pub retain: bool,
    /// The DUP flag.
    pub dup: bool,
    /// MQTT 5 publish properties; `None` on an MQTT 3.1.1 connection. On MQTT 5 a PUBLISH without
    /// properties records `Some` of the empty default.
    pub properties: Option<RecordedProps>,
}

impl fmt::Debug for Received {
    // Payloads are shown by length only: they may be large or sensitive.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Received")
            .field("topic", &self.topic)
            .field("payload_len", &self.payload.len())
            .field("qos", &self.qos)
            .field("retain", &self.retain)
            .field("dup", &self.dup)
            .field("properties", &self.properties)
            .finish()
    }
}

/// MQTT 5 PUBLISH properties as delivered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordedProps {
    /// User properties, in order, repeats kept.
    pub user_properties: Vec<(String, String)>,
    /// Content Type.
    pub content_type: Option<String>,
    /// Payload Format Indicator (0 bytes, 1 UTF-8).
    pub payload_format_indicator: Option<u8>,
    /// Message Expiry Interval in seconds (the broker sends what remains of it).
    pub message_expiry_interval: Option<u32>,
    /// Response Topic.
    pub response_topic: Option<String>,
    /// Correlation Data.
    pub correlation_data: Option<Bytes>,
    /// Topic Alias, if the broker used one.
    pub topic_alias: Option<u16>,
    /// Subscription Identifiers of the matching subscriptions.
    pub subscription_ids: Vec<usize>,
}

impl RecordedProps {
    /// The value of the first user property named `key`.
    pub fn user_property(&self, key: &str) -> Option<&str> {
        self.user_properties
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

impl Received {
    /// The value of the first MQTT 5 user property named `key`.
    pub fn user_property(&self, key: &str) -> Option<&str> {
        self.properties.as_ref()?.user_property(key)
    }
}
