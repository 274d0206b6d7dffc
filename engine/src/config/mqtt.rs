//! `[sink.mqtt]`: the broker, the session, routing, envelopes and per-message properties.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use super::{PayloadEncoding, Secret};
use crate::template::name::NameTemplate;
use crate::template::topic::TopicTemplate;
use crate::units::{ByteSize, Dur};

/// The MQTT protocol version of a sink's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MqttVersion {
    /// MQTT 3.1.1 (`"3.1.1"`).
    V311,
    /// MQTT 5.0 (`"5"`).
    #[default]
    V5,
}

impl fmt::Display for MqttVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MqttVersion::V311 => "3.1.1",
            MqttVersion::V5 => "5",
        })
    }
}

impl<'de> Deserialize<'de> for MqttVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = MqttVersion;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"3.1.1\" or \"5\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<MqttVersion, E> {
                match v {
                    "3.1.1" | "311" | "v3.1.1" => Ok(MqttVersion::V311),
                    "5" | "5.0" | "v5" => Ok(MqttVersion::V5),
                    other => Err(E::custom(format!(
                        "{other:?} is not an MQTT version: use \"3.1.1\" or \"5\""
                    ))),
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<MqttVersion, E> {
                match v {
                    5 => Ok(MqttVersion::V5),
                    other => Err(E::custom(format!(
                        "{other} is not an MQTT version: use \"3.1.1\" or \"5\""
                    ))),
                }
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<MqttVersion, E> {
                if v == 5.0 {
                    Ok(MqttVersion::V5)
                } else {
                    Err(E::custom(format!(
                        "{v} is not an MQTT version: use \"3.1.1\" or \"5\""
                    )))
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// What travels with the payload besides the payload itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Envelope {
    /// The payload as it is.
    #[default]
    None,
    /// MQTT 5 only: the payload as it is, the Iggy metadata as user properties
    /// (`iggy-stream`, `iggy-topic`, `iggy-partition`, `iggy-offset`, `iggy-id`,
    /// `iggy-timestamp`, `iggy-origin-timestamp`).
    Properties,
    /// A JSON object `{"metadata": {...}, "headers": {...}, "payload": ...}` (any version).
    Json,
}

/// `[sink.mqtt.will]`: the last will the broker publishes if the connection dies.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WillConfig {
    /// Topic of the will (`{sink}`, `{shard}`, `{conn}`, `{pid}` and `{host}` are replaced).
    pub topic: NameTemplate,
    /// Payload (UTF-8 text).
    #[serde(default)]
    pub payload: String,
    /// QoS 0, 1 or 2.
    #[serde(default)]
    pub qos: u8,
    /// Retain the will.
    #[serde(default)]
    pub retain: bool,
}

/// `[sink.mqtt.birth]`: the message published after every CONNACK (the counterpart of the
/// will: a retained `online` on the topic where the will says `offline`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BirthConfig {
    /// Topic (`{sink}`, `{shard}`, `{conn}`, `{pid}` and `{host}` are replaced, as in the
    /// will's).
    pub topic: NameTemplate,
    /// Payload (UTF-8 text).
    #[serde(default)]
    pub payload: String,
    /// QoS 0, 1 or 2.
    #[serde(default)]
    pub qos: u8,
    /// Retain it (default `true`: a client that subscribes later sees the state).
    #[serde(default = "defaults::yes")]
    pub retain: bool,
}

/// The default packet-id window.
pub const DEFAULT_WINDOW: u16 = 1000;
/// The default window over MQTT 3.1.1 when QoS 2 may be used: mosquitto's and VerneMQ's
/// `max_inflight_messages` default (EMQX holds up to `max_awaiting_rel`, 100, QoS 2 messages).
pub const V311_QOS2_WINDOW: u16 = 20;

/// `[sink.mqtt]`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MqttSinkConfig {
    /// `host:port` of the broker; several, separated by commas, are tried in turn (the next
    /// after each failed attempt or lost connection).
    pub address: String,
    /// `"5"` (default) or `"3.1.1"`.
    #[serde(default)]
    pub protocol: MqttVersion,
    /// Broker connections per shard; partitions are spread over them (one partition always
    /// uses the same connection, so its messages stay in order).
    #[serde(default = "defaults::connections")]
    pub connections: u16,
    /// Client id template: `{sink}`, `{shard}`, `{conn}` (the connection number on the shard),
    /// `{pid}`, `{host}` (the host name). It must contain `{shard}` and `{conn}` when there is
    /// more than one connection in all, so ids never collide (a broker drops the older of two
    /// connections with one id); with several hosts add `{host}`. Over MQTT 3.1.1 an id that
    /// is not 1-23 letters and digits is logged once: strict brokers may refuse it.
    #[serde(default)]
    pub client_id: NameTemplate,
    /// Username.
    pub username: Option<String>,
    /// Password (needs `username`). Or env `SPILLWAY_MQTT_PASSWORD_<SINK NAME>` (upper case,
    /// `-` and `.` as `_`).
    pub password: Option<Secret>,
    /// Connect with TLS.
    #[serde(default)]
    pub tls: bool,
    /// PEM file of the CA to trust; without it, the Mozilla roots.
    pub tls_ca: Option<PathBuf>,
    /// Name to check the broker certificate against (default: the host of `address`).
    pub tls_server_name: Option<String>,
    /// PEM client certificate chain for mutual TLS (with `tls_key`).
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `tls_cert`.
    pub tls_key: Option<PathBuf>,
    /// The most PUBLISH packets per second on one connection (AWS IoT Core allows 100): the
    /// rest waits, nothing is dropped; a tenth of a second's worth may go at once. `0`: no
    /// limit.
    #[serde(default)]
    pub max_publish_rate: f64,
    /// ALPN protocol names offered in the TLS handshake (AWS IoT Core takes MQTT on port 443
    /// with `["x-amzn-mqtt-ca"]`).
    #[serde(default)]
    pub alpn: Vec<String>,
    /// MQTT keep-alive; a PINGREQ goes out after this long without sending. `"0s"` turns it
    /// off.
    #[serde(default = "defaults::keep_alive")]
    pub keep_alive: Dur,
    /// How long messages may wait for acknowledgement with nothing at all from the broker
    /// before the connection is given up (and made again, re-sending what was not
    /// confirmed). It catches a silent broker also with `keep_alive = "0s"` or a broker's
    /// Server Keep Alive of 0. `"0s"` turns it off.
    #[serde(default = "defaults::ack_timeout")]
    pub ack_timeout: Dur,
    /// Time for TCP connect, TLS handshake and CONNACK.
    #[serde(default = "defaults::connect_timeout")]
    pub connect_timeout: Dur,
    /// First wait before reconnecting (doubles, with jitter, up to `reconnect_max`).
    #[serde(default = "defaults::reconnect_min")]
    pub reconnect_min: Dur,
    /// Longest wait between reconnect attempts.
    #[serde(default = "defaults::reconnect_max")]
    pub reconnect_max: Dur,
    /// QoS 1/2 messages in flight per connection (packet-id window); the broker's Receive
    /// Maximum (MQTT 5) lowers it. Unset: see [`MqttSinkConfig::window`].
    #[serde(default)]
    pub max_inflight: Option<u16>,
    /// The largest packet the sink accepts from the broker, fixed header included. The sink
    /// only expects CONNACK, acknowledgements, PINGRESP and DISCONNECT, so the default is
    /// small (64 KiB); over MQTT 5 it is sent in CONNECT as the Maximum Packet Size. A larger
    /// packet is refused as soon as its fixed header is read, before its body is buffered, and
    /// the connection is dropped and made again: a broker cannot make the sink hold more than
    /// this per connection. 128 B to 256 MiB.
    #[serde(default = "defaults::max_incoming_packet_size")]
    pub max_incoming_packet_size: ByteSize,
    /// Wake up for acknowledgements in batches: while enough messages are on the wire, a
    /// read completes only once the bytes of a quarter of the window's acknowledgements
    /// (QoS 1; an eighth for QoS 2, whose PUBRELs must not wait long) have arrived
    /// (`SO_RCVLOWAT`), instead of once per PUBACK from a broker that writes each on its own
    /// (mosquitto). Saves most of the publisher's CPU at some latency (see tuning.md). A
    /// batched read that has waited 1 ms completes with what has arrived, so a broker with
    /// Nagle's algorithm on (which holds acknowledgements back until the last is ACKed) does
    /// not wait for this side's delayed ACK. A connection whose batched reads still wait over
    /// 30 ms twice running turns it off for itself.
    #[serde(default = "defaults::yes")]
    pub ack_batching: bool,
    /// Start every connection with a fresh session. With `false` the session survives
    /// reconnects (MQTT 5: for `session_expiry`; 3.1.1: a persistent session), so a
    /// reconnect re-sends unconfirmed messages with DUP and the pending PUBRELs. The first
    /// connection of a process always starts clean: the engine keeps no session state across
    /// restarts (Iggy offsets replay what was not confirmed).
    #[serde(default = "defaults::yes")]
    pub clean_start: bool,
    /// MQTT 5 Session Expiry Interval (used with `clean_start = false`).
    #[serde(default = "defaults::session_expiry")]
    pub session_expiry: Dur,
    /// Default QoS (0, 1 or 2).
    #[serde(default = "defaults::qos")]
    pub qos: u8,
    /// Default RETAIN flag.
    #[serde(default)]
    pub retain: bool,
    /// The topic: static (`"plant/telemetry"`) or a template with `{stream}`, `{topic}`,
    /// `{partition}`, `{offset}`, `{id}`, `{header.NAME}` and `{json.POINTER}` (a JSON
    /// pointer such as `/device/id`, or dotted: `{json.device.id}`). Needed unless
    /// `topic_header` is set; with both, it is the fallback for messages without the header.
    pub topic: Option<TopicTemplate>,
    /// Dynamic routing: the topic is the value of this Iggy header.
    pub topic_header: Option<String>,
    /// MQTT 5 topic aliases to use per connection (the broker's Topic Alias Maximum caps it);
    /// 0 turns them off.
    #[serde(default = "defaults::topic_aliases")]
    pub topic_aliases: u16,
    /// `none`, `properties` (MQTT 5) or `json`.
    #[serde(default)]
    pub envelope: Envelope,
    /// How a payload goes into the JSON envelope (and the 3.1.1 dead-letter envelope).
    #[serde(default)]
    pub payload: PayloadEncoding,
    /// MQTT 5: send the Iggy user headers as user properties.
    #[serde(default = "defaults::yes")]
    pub headers_as_properties: bool,
    /// Per message: the QoS from this Iggy header (`0`, `1`, `2`).
    pub qos_header: Option<String>,
    /// Per message: the RETAIN flag from this header (`true`/`false`/`1`/`0`).
    pub retain_header: Option<String>,
    /// MQTT 5, per message: Content Type from this header.
    pub content_type_header: Option<String>,
    /// MQTT 5, per message: Payload Format Indicator (`0`/`1`, `bytes`/`utf8`) from this
    /// header.
    pub payload_format_header: Option<String>,
    /// MQTT 5, per message: Message Expiry Interval in seconds from this header.
    pub message_expiry_header: Option<String>,
    /// MQTT 5, per message: Response Topic from this header.
    pub response_topic_header: Option<String>,
    /// MQTT 5, per message: Correlation Data from this header.
    pub correlation_data_header: Option<String>,
    /// With `on_error = "dead_letter"`: where rejected messages go, with the reason (MQTT 5:
    /// user properties `spillway-error`, `spillway-reason-code` and the Iggy metadata; 3.1.1:
    /// a JSON envelope with an `"error"` field).
    pub dead_letter_topic: Option<String>,
    /// The last will.
    pub will: Option<WillConfig>,
    /// The birth message, published after each CONNACK. With a will as well, a controlled
    /// shutdown has the broker publish the will too (MQTT 5: DISCONNECT with reason 0x04;
    /// 3.1.1: the sink publishes the will's message before DISCONNECT), so the status topic
    /// never says online after the engine has stopped.
    pub birth: Option<BirthConfig>,
}

impl fmt::Debug for MqttSinkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MqttSinkConfig")
            .field("address", &self.address)
            .field("protocol", &self.protocol)
            .field("client_id", &self.client_id.template().text())
            .field("username", &self.username)
            .field("password", &self.password)
            .field("tls", &self.tls)
            .field("qos", &self.qos)
            .field("topic", &self.topic.as_ref().map(|t| t.template().text()))
            .field("topic_header", &self.topic_header)
            .finish_non_exhaustive()
    }
}

impl MqttSinkConfig {
    /// The broker addresses, in the order they are tried.
    pub fn addresses(&self) -> impl Iterator<Item = &str> {
        self.address
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
    }

    /// The keep-alive in whole seconds for CONNECT (at most 65535).
    pub fn keep_alive_secs(&self) -> u16 {
        u16::try_from(self.keep_alive.0.as_secs()).unwrap_or(u16::MAX)
    }

    /// Whether this sink can publish at QoS 2 (the default QoS, or a per-message QoS header).
    pub fn may_use_qos2(&self) -> bool {
        self.qos == 2 || self.qos_header.is_some()
    }

    /// The packet-id window: `max_inflight`, or by default 1000, except over MQTT 3.1.1 with
    /// QoS 2, where it is [`V311_QOS2_WINDOW`]: 3.1.1 has no Receive Maximum, and mosquitto
    /// (`max_inflight_messages`, 20 by default) acknowledges QoS 2 messages past its limit and
    /// drops them, so only a window within the broker's limit is safe.
    pub fn window(&self) -> u16 {
        match self.max_inflight {
            Some(n) => n,
            None if self.protocol == MqttVersion::V311 && self.may_use_qos2() => V311_QOS2_WINDOW,
            None => DEFAULT_WINDOW,
        }
    }

    /// [`MqttSinkConfig::max_incoming_packet_size`] as the u32 MQTT carries (validated to fit).
    pub fn max_incoming_packet(&self) -> u32 {
        u32::try_from(self.max_incoming_packet_size.0).unwrap_or(u32::MAX)
    }

    /// The session expiry in seconds for CONNECT (`u32::MAX` means never).
    pub fn session_expiry_secs(&self) -> u32 {
        u32::try_from(self.session_expiry.0.as_secs()).unwrap_or(u32::MAX)
    }
}

/// The environment variable that holds the MQTT password of sink `name`.
pub fn password_env(name: &str) -> String {
    let mut v = String::from("SPILLWAY_MQTT_PASSWORD_");
    v.extend(name.chars().map(|c| match c {
        '-' | '.' => '_',
        c => c.to_ascii_uppercase(),
    }));
    v
}

mod defaults {
    use super::*;

    pub fn connections() -> u16 {
        1
    }
    pub fn ack_timeout() -> Dur {
        Dur(Duration::from_secs(30))
    }
    pub fn max_incoming_packet_size() -> ByteSize {
        ByteSize(64 * 1024)
    }
    pub fn keep_alive() -> Dur {
        Dur(Duration::from_secs(30))
    }
    pub fn connect_timeout() -> Dur {
        Dur(Duration::from_secs(10))
    }
    pub fn reconnect_min() -> Dur {
        Dur(Duration::from_millis(100))
    }
    pub fn reconnect_max() -> Dur {
        Dur(Duration::from_secs(10))
    }
    pub fn session_expiry() -> Dur {
        Dur(Duration::from_secs(3600))
    }
    pub fn qos() -> u8 {
        1
    }
    pub fn topic_aliases() -> u16 {
        64
    }
    pub fn yes() -> bool {
        true
    }
}
