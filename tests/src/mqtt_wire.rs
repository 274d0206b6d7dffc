//! The MQTT packets a harness client needs, encoded and decoded with the independent `mqttbytes`
//! crate (modules `v4` and `v5`), behind one version-neutral view.

use bytes::{Buf, BytesMut};
use mqttbytes::{PacketType, QoS, v4, v5};

use crate::HarnessError;
use crate::received::{Received, RecordedProps};

/// The largest packet the harness accepts: the MQTT maximum remaining length.
pub(crate) const MAX_PACKET: usize = 268_435_455;

/// The MQTT protocol version of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MqttVersion {
    /// MQTT 3.1.1 (protocol level 4).
    #[default]
    V4,
    /// MQTT 5.0.
    V5,
}

/// What the broker said in CONNACK.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnAckInfo {
    /// Session Present flag.
    pub session_present: bool,
    /// Return code (3.1.1) or reason code (5); 0 is success.
    pub code: u8,
    /// Receive Maximum (MQTT 5; mosquitto sends `max_inflight_messages`).
    pub receive_maximum: Option<u16>,
    /// Topic Alias Maximum (MQTT 5).
    pub topic_alias_maximum: Option<u16>,
    /// Maximum QoS (MQTT 5).
    pub maximum_qos: Option<u8>,
    /// Maximum Packet Size (MQTT 5).
    pub maximum_packet_size: Option<u32>,
    /// Server Keep Alive (MQTT 5; mosquitto sends it when it lowers the client's keep-alive).
    pub server_keep_alive: Option<u16>,
    /// Assigned Client Identifier (MQTT 5).
    pub assigned_client_id: Option<String>,
    /// Retain Available (MQTT 5).
    pub retain_available: Option<u8>,
}

/// A decoded packet from the broker.
#[derive(Debug)]
pub(crate) enum Incoming {
    ConnAck(ConnAckInfo),
    SubAck { pkid: u16, codes: Vec<u8> },
    Publish { pkid: u16, msg: Received },
    PubRel { pkid: u16 },
    PingResp,
    Disconnect { reason: u8 },
    Other(&'static str),
}

impl Incoming {
    /// The packet kind, for error messages.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Incoming::ConnAck(_) => "CONNACK",
            Incoming::SubAck { .. } => "SUBACK",
            Incoming::Publish { .. } => "PUBLISH",
            Incoming::PubRel { .. } => "PUBREL",
            Incoming::PingResp => "PINGRESP",
            Incoming::Disconnect { .. } => "DISCONNECT",
            Incoming::Other(name) => name,
        }
    }
}

/// Which acknowledgement to send for a received PUBLISH or PUBREL.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ack {
    /// PUBACK (QoS 1).
    Publish,
    /// PUBREC (QoS 2, first reply).
    Received,
    /// PUBCOMP (QoS 2, answer to PUBREL).
    Complete,
}

/// CONNECT fields the harness sets.
#[derive(Debug)]
pub(crate) struct ConnectParams<'a> {
    pub client_id: &'a str,
    pub keep_alive: u16,
    pub clean_start: bool,
    pub credentials: Option<(&'a str, &'a str)>,
    pub receive_maximum: Option<u16>,
    pub topic_alias_maximum: Option<u16>,
    pub session_expiry: Option<u32>,
}

pub(crate) fn to_qos(qos: u8) -> Result<QoS, HarnessError> {
    match qos {
        0 => Ok(QoS::AtMostOnce),
        1 => Ok(QoS::AtLeastOnce),
        2 => Ok(QoS::ExactlyOnce),
        other => Err(HarnessError::InvalidOption(format!(
            "QoS must be 0, 1 or 2, not {other}"
        ))),
    }
}

fn encode_err(what: &str, e: mqttbytes::Error) -> HarnessError {
    HarnessError::Protocol(format!("encoding {what}: {e:?}"))
}

/// Encodes CONNECT.
pub(crate) fn encode_connect(
    version: MqttVersion,
    p: &ConnectParams<'_>,
) -> Result<BytesMut, HarnessError> {
    let mut out = BytesMut::new();
    match version {
        MqttVersion::V4 => {
            let mut c = v4::Connect::new(p.client_id);
            c.keep_alive = p.keep_alive;
            c.clean_session = p.clean_start;
            if let Some((user, pass)) = p.credentials {
                c.set_login(user, pass);
            }
            c.write(&mut out).map_err(|e| encode_err("CONNECT", e))?;
        }
        MqttVersion::V5 => {
            let mut c = v5::Connect::new(p.client_id);
            c.keep_alive = p.keep_alive;
            c.clean_session = p.clean_start;
            if let Some((user, pass)) = p.credentials {
                c.set_login(user, pass);
            }
            if p.receive_maximum.is_some()
                || p.topic_alias_maximum.is_some()
                || p.session_expiry.is_some()
            {
                c.properties = Some(v5::ConnectProperties {
                    session_expiry_interval: p.session_expiry,
                    receive_maximum: p.receive_maximum,
                    max_packet_size: None,
                    topic_alias_max: p.topic_alias_maximum,
                    request_response_info: None,
                    request_problem_info: None,
                    user_properties: Vec::new(),
                    authentication_method: None,
                    authentication_data: None,
                });
            }
            c.write(&mut out).map_err(|e| encode_err("CONNECT", e))?;
        }
    }
    Ok(out)
}

/// Encodes SUBSCRIBE for `filters`, all at `qos`, with an optional MQTT 5 subscription id.
pub(crate) fn encode_subscribe(
    version: MqttVersion,
    pkid: u16,
    filters: &[String],
    qos: u8,
    subscription_id: Option<usize>,
) -> Result<BytesMut, HarnessError> {
    let qos = to_qos(qos)?;
    let mut out = BytesMut::new();
    match version {
        MqttVersion::V4 => {
            let mut s = v4::Subscribe::new_many(
                filters
                    .iter()
                    .map(|f| v4::SubscribeFilter::new(f.clone(), qos)),
            );
            s.pkid = pkid;
            s.write(&mut out).map_err(|e| encode_err("SUBSCRIBE", e))?;
        }
        MqttVersion::V5 => {
            let mut s = v5::Subscribe::new_many(
                filters
                    .iter()
                    .map(|f| v5::SubscribeFilter::new(f.clone(), qos)),
            );
            s.pkid = pkid;
            if let Some(id) = subscription_id {
                s.properties = Some(v5::SubscribeProperties {
                    id: Some(id),
                    user_properties: Vec::new(),
                });
            }
            s.write(&mut out).map_err(|e| encode_err("SUBSCRIBE", e))?;
        }
    }
    Ok(out)
}

/// Encodes PUBACK, PUBREC or PUBCOMP for `pkid`.
pub(crate) fn encode_ack(
    version: MqttVersion,
    ack: Ack,
    pkid: u16,
) -> Result<BytesMut, HarnessError> {
    let mut out = BytesMut::new();
    let written = match (version, ack) {
        (MqttVersion::V4, Ack::Publish) => v4::PubAck::new(pkid).write(&mut out),
        (MqttVersion::V4, Ack::Received) => v4::PubRec::new(pkid).write(&mut out),
        (MqttVersion::V4, Ack::Complete) => v4::PubComp::new(pkid).write(&mut out),
        (MqttVersion::V5, Ack::Publish) => v5::PubAck::new(pkid).write(&mut out),
        (MqttVersion::V5, Ack::Received) => v5::PubRec::new(pkid).write(&mut out),
        (MqttVersion::V5, Ack::Complete) => v5::PubComp::new(pkid).write(&mut out),
    };
    written.map_err(|e| encode_err("an acknowledgement", e))?;
    Ok(out)
}

/// Encodes PINGREQ.
pub(crate) fn encode_pingreq(version: MqttVersion) -> Result<BytesMut, HarnessError> {
    let mut out = BytesMut::new();
    let written = match version {
        MqttVersion::V4 => v4::PingReq.write(&mut out),
        MqttVersion::V5 => v5::PingReq.write(&mut out),
    };
    written.map_err(|e| encode_err("PINGREQ", e))?;
    Ok(out)
}

/// Encodes DISCONNECT (normal disconnection).
pub(crate) fn encode_disconnect(version: MqttVersion) -> Result<BytesMut, HarnessError> {
    let mut out = BytesMut::new();
    let written = match version {
        MqttVersion::V4 => v4::Disconnect.write(&mut out),
        MqttVersion::V5 => v5::Disconnect::new().write(&mut out),
    };
    written.map_err(|e| encode_err("DISCONNECT", e))?;
    Ok(out)
}

/// Decodes one packet from the front of `buf`; `Ok(None)` means more bytes are needed.
pub(crate) fn decode(
    version: MqttVersion,
    buf: &mut BytesMut,
) -> Result<Option<Incoming>, HarnessError> {
    let header = match mqttbytes::check(buf.iter(), MAX_PACKET) {
        Ok(header) => header,
        Err(mqttbytes::Error::InsufficientBytes(_)) => return Ok(None),
        Err(e) => {
            return Err(HarnessError::Protocol(format!(
                "framing a packet from the broker: {e:?}"
            )));
        }
    };
    // mqttbytes 0.6 rejects an MQTT 5 DISCONNECT with no reason code (remaining length 0),
    // which means "normal disconnection".
    if version == MqttVersion::V5
        && header.packet_type() == Ok(PacketType::Disconnect)
        && header.frame_length() == 2
    {
        buf.advance(2);
        return Ok(Some(Incoming::Disconnect { reason: 0 }));
    }
    let decoded = match version {
        MqttVersion::V4 => v4::read(buf, MAX_PACKET).map(from_v4),
        MqttVersion::V5 => v5::read(buf, MAX_PACKET).map(from_v5),
    };
    match decoded {
        Ok(incoming) => Ok(Some(incoming)),
        // A CONNACK code mqttbytes does not know is still a CONNACK refusal.
        Err(mqttbytes::Error::InvalidConnectReturnCode(code)) => {
            Ok(Some(Incoming::ConnAck(ConnAckInfo {
                code,
                ..ConnAckInfo::default()
            })))
        }
        Err(e) => Err(HarnessError::Protocol(format!(
            "decoding a packet from the broker: {e:?}"
        ))),
    }
}

fn from_v4(packet: v4::Packet) -> Incoming {
    match packet {
        v4::Packet::ConnAck(c) => Incoming::ConnAck(ConnAckInfo {
            session_present: c.session_present,
            code: c.code as u8,
            ..ConnAckInfo::default()
        }),
        v4::Packet::SubAck(s) => Incoming::SubAck {
            pkid: s.pkid,
            codes: s
                .return_codes
                .iter()
                .map(|c| match c {
                    v4::SubscribeReasonCode::Success(q) => *q as u8,
                    v4::SubscribeReasonCode::Failure => 0x80,
                })
                .collect(),
        },
        v4::Packet::Publish(p) => Incoming::Publish {
            pkid: p.pkid,
            msg: Received {
                topic: p.topic,
                payload: p.payload,
                qos: p.qos as u8,
                retain: p.retain,
                dup: p.dup,
                properties: None,
            },
        },
        v4::Packet::PubRel(r) => Incoming::PubRel { pkid: r.pkid },
        v4::Packet::PingResp => Incoming::PingResp,
        v4::Packet::Disconnect => Incoming::Disconnect { reason: 0 },
        v4::Packet::Connect(_) => Incoming::Other("CONNECT"),
        v4::Packet::PubAck(_) => Incoming::Other("PUBACK"),
        v4::Packet::PubRec(_) => Incoming::Other("PUBREC"),
        v4::Packet::PubComp(_) => Incoming::Other("PUBCOMP"),
        v4::Packet::Subscribe(_) => Incoming::Other("SUBSCRIBE"),
        v4::Packet::Unsubscribe(_) => Incoming::Other("UNSUBSCRIBE"),
        v4::Packet::UnsubAck(_) => Incoming::Other("UNSUBACK"),
        v4::Packet::PingReq => Incoming::Other("PINGREQ"),
    }
}

fn from_v5(packet: v5::Packet) -> Incoming {
    match packet {
        v5::Packet::ConnAck(c) => {
            let mut info = ConnAckInfo {
                session_present: c.session_present,
                code: c.code as u8,
                ..ConnAckInfo::default()
            };
            if let Some(p) = c.properties {
                info.receive_maximum = p.receive_max;
                info.topic_alias_maximum = p.topic_alias_max;
                info.maximum_qos = p.max_qos;
                info.maximum_packet_size = p.max_packet_size;
                info.server_keep_alive = p.server_keep_alive;
                info.assigned_client_id = p.assigned_client_identifier;
                info.retain_available = p.retain_available;
            }
            Incoming::ConnAck(info)
        }
        v5::Packet::SubAck(s) => Incoming::SubAck {
            pkid: s.pkid,
            codes: s.return_codes.iter().map(|c| *c as u8).collect(),
        },
        v5::Packet::Publish(p) => {
            let props = p
                .properties
                .map(|props| RecordedProps {
                    user_properties: props.user_properties,
                    content_type: props.content_type,
                    payload_format_indicator: props.payload_format_indicator,
                    message_expiry_interval: props.message_expiry_interval,
                    response_topic: props.response_topic,
                    correlation_data: props.correlation_data,
                    topic_alias: props.topic_alias,
                    subscription_ids: props.subscription_identifiers,
                })
                .unwrap_or_default();
            Incoming::Publish {
                pkid: p.pkid,
                msg: Received {
                    topic: p.topic,
                    payload: p.payload,
                    qos: p.qos as u8,
                    retain: p.retain,
                    dup: p.dup,
                    properties: Some(props),
                },
            }
        }
        v5::Packet::PubRel(r) => Incoming::PubRel { pkid: r.pkid },
        v5::Packet::PingResp => Incoming::PingResp,
        v5::Packet::Disconnect(d) => Incoming::Disconnect {
            reason: d.reason_code as u8,
        },
        v5::Packet::Connect(_) => Incoming::Other("CONNECT"),
        v5::Packet::PubAck(_) => Incoming::Other("PUBACK"),
        v5::Packet::PubRec(_) => Incoming::Other("PUBREC"),
        v5::Packet::PubComp(_) => Incoming::Other("PUBCOMP"),
        v5::Packet::Subscribe(_) => Incoming::Other("SUBSCRIBE"),
        v5::Packet::Unsubscribe(_) => Incoming::Other("UNSUBSCRIBE"),
        v5::Packet::UnsubAck(_) => Incoming::Other("UNSUBACK"),
        v5::Packet::PingReq => Incoming::Other("PINGREQ"),
    }
}

/// A readable name for a CONNACK code.
pub(crate) fn connack_reason(version: MqttVersion, code: u8) -> &'static str {
    match (version, code) {
        (_, 0) => "success",
        (MqttVersion::V4, 1) => "unacceptable protocol version",
        (MqttVersion::V4, 2) => "identifier rejected",
        (MqttVersion::V4, 3) => "server unavailable",
        (MqttVersion::V4, 4) => "bad user name or password",
        (MqttVersion::V4, 5) => "not authorized",
        (MqttVersion::V5, 128) => "unspecified error",
        (MqttVersion::V5, 129) => "malformed packet",
        (MqttVersion::V5, 130) => "protocol error",
        (MqttVersion::V5, 131) => "implementation specific error",
        (MqttVersion::V5, 132) => "unsupported protocol version",
        (MqttVersion::V5, 133) => "client identifier not valid",
        (MqttVersion::V5, 134) => "bad user name or password",
        (MqttVersion::V5, 135) => "not authorized",
        (MqttVersion::V5, 136) => "server unavailable",
        (MqttVersion::V5, 137) => "server busy",
        (MqttVersion::V5, 138) => "banned",
        (MqttVersion::V5, 140) => "bad authentication method",
        (MqttVersion::V5, 149) => "packet too large",
        (MqttVersion::V5, 151) => "quota exceeded",
        (MqttVersion::V5, 159) => "connection rate exceeded",
        _ => "unknown code",
    }
}
