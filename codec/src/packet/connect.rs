//! CONNECT (MQTT 3.1.1 §3.1, MQTT 5 §3.1), with the will message.

use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};

use super::EncodeOptions;
use crate::error::{DecodeError, EncodeError};
use crate::properties::{Properties, PropertyContext};
use crate::string::MqttStr;
use crate::types::{Protocol, QoS};
use crate::wire::{Reader, check_field, field_len, put_binary, put_fixed_header};

/// The first packet of a connection. `Debug` redacts the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Connect {
    pub protocol: Protocol,
    /// Clean Session (3.1.1) / Clean Start (5).
    pub clean_start: bool,
    /// Seconds; 0 turns keep-alive off.
    pub keep_alive: u16,
    /// MQTT 5 only.
    pub properties: Properties,
    pub client_id: MqttStr,
    pub will: Option<Will>,
    pub username: Option<MqttStr>,
    pub password: Option<Bytes>,
}

/// The will message of a CONNECT (§3.1.2.5 and §3.1.3.2–3.1.3.4).
#[derive(Clone, PartialEq, Eq)]
pub struct Will {
    pub topic: MqttStr,
    pub payload: Bytes,
    pub qos: QoS,
    pub retain: bool,
    /// MQTT 5 only: the will properties.
    pub properties: Properties,
}

const PROTOCOL_NAME: &[u8] = b"MQTT";

impl Connect {
    /// A clean-start CONNECT with the given client id and no will or credentials.
    pub fn new(protocol: Protocol, client_id: MqttStr) -> Self {
        Connect {
            protocol,
            clean_start: true,
            keep_alive: 60,
            properties: Properties::default(),
            client_id,
            will: None,
            username: None,
            password: None,
        }
    }

    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let name = r.binary("protocol name")?;
        if &name[..] != PROTOCOL_NAME {
            return Err(DecodeError::InvalidProtocolName);
        }
        let protocol = match r.u8("protocol level")? {
            4 => Protocol::V311,
            5 => Protocol::V5,
            l => return Err(DecodeError::UnsupportedProtocolLevel(l)),
        };
        let flags = r.u8("connect flags")?;
        if flags & 0x01 != 0 {
            return Err(DecodeError::ReservedConnectFlag);
        }
        let clean_start = flags & 0x02 != 0;
        let will_flag = flags & 0x04 != 0;
        let will_qos_bits = (flags >> 3) & 0b11;
        let will_retain = flags & 0x20 != 0;
        let password_flag = flags & 0x40 != 0;
        let username_flag = flags & 0x80 != 0;
        if !will_flag && (will_qos_bits != 0 || will_retain) {
            return Err(DecodeError::WillFieldsWithoutWill);
        }
        let will_qos = QoS::from_u8(will_qos_bits).ok_or(DecodeError::InvalidQos {
            field: "will",
            value: will_qos_bits,
        })?;
        if protocol == Protocol::V311 && password_flag && !username_flag {
            return Err(DecodeError::PasswordWithoutUsername);
        }
        let keep_alive = r.u16("keep alive")?;
        let properties = if protocol == Protocol::V5 {
            Properties::decode(r, PropertyContext::Connect)?
        } else {
            Properties::default()
        };
        let client_id = r.string("client identifier")?;
        let will = if will_flag {
            let properties = if protocol == Protocol::V5 {
                Properties::decode(r, PropertyContext::Will)?
            } else {
                Properties::default()
            };
            let topic = r.string("will topic")?;
            crate::topic::check_topic_name(topic.as_bytes())
                .map_err(|reason| DecodeError::InvalidTopicName { reason })?;
            let payload = r.binary("will payload")?;
            Some(Will {
                topic,
                payload,
                qos: will_qos,
                retain: will_retain,
                properties,
            })
        } else {
            None
        };
        let username = if username_flag {
            Some(r.string("user name")?)
        } else {
            None
        };
        let password = if password_flag {
            Some(r.binary("password")?)
        } else {
            None
        };
        Ok(Connect {
            protocol,
            clean_start,
            keep_alive,
            properties,
            client_id,
            will,
            username,
            password,
        })
    }

    pub(crate) fn write(
        &self,
        out: &mut BytesMut,
        opts: &EncodeOptions,
    ) -> Result<usize, EncodeError> {
        let v5 = self.protocol == Protocol::V5;
        // Variable header: protocol name, level, flags, keep alive.
        let mut n = field_len(PROTOCOL_NAME.len()) + 1 + 1 + 2;
        let mut props_len = 0;
        let mut will_props_len = 0;
        if v5 {
            props_len = self.properties.check(PropertyContext::Connect, None)?;
            n += crate::varint::len(props_len as u32) + props_len;
        } else if !self.properties.is_empty() {
            return Err(EncodeError::NotInProtocol {
                what: "CONNECT properties",
            });
        }
        n += field_len(self.client_id.len());
        let mut flags = 0u8;
        if self.clean_start {
            flags |= 0x02;
        }
        if let Some(w) = &self.will {
            crate::topic::check_topic_name(w.topic.as_bytes())
                .map_err(|reason| EncodeError::InvalidTopicName { reason })?;
            check_field(w.payload.len(), "will payload")?;
            if v5 {
                will_props_len = w.properties.check(PropertyContext::Will, None)?;
                n += crate::varint::len(will_props_len as u32) + will_props_len;
            } else if !w.properties.is_empty() {
                return Err(EncodeError::NotInProtocol {
                    what: "will properties",
                });
            }
            n += field_len(w.topic.len()) + field_len(w.payload.len());
            flags |= 0x04 | ((w.qos as u8) << 3);
            if w.retain {
                flags |= 0x20;
            }
        }
        if let Some(u) = &self.username {
            n += field_len(u.len());
            flags |= 0x80;
        }
        if let Some(p) = &self.password {
            if !v5 && self.username.is_none() {
                return Err(EncodeError::NotInProtocol {
                    what: "a password without a user name",
                });
            }
            check_field(p.len(), "password")?;
            n += field_len(p.len());
            flags |= 0x40;
        }
        let total = put_fixed_header(out, 0x10, n, opts.max_packet_size, 0)?;
        put_binary(out, PROTOCOL_NAME);
        out.put_u8(self.protocol.level());
        out.put_u8(flags);
        out.put_u16(self.keep_alive);
        if v5 {
            self.properties.put(out, props_len, None);
        }
        put_binary(out, self.client_id.as_bytes());
        if let Some(w) = &self.will {
            if v5 {
                w.properties.put(out, will_props_len, None);
            }
            put_binary(out, w.topic.as_bytes());
            put_binary(out, &w.payload);
        }
        if let Some(u) = &self.username {
            put_binary(out, u.as_bytes());
        }
        if let Some(p) = &self.password {
            put_binary(out, p);
        }
        Ok(total)
    }
}

impl fmt::Debug for Connect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connect")
            .field("protocol", &self.protocol)
            .field("clean_start", &self.clean_start)
            .field("keep_alive", &self.keep_alive)
            .field("properties", &self.properties)
            .field("client_id", &self.client_id)
            .field("will", &self.will)
            .field("username", &self.username)
            .field(
                "password",
                &self.password.as_ref().map(|_| format_args!("<redacted>")),
            )
            .finish()
    }
}

impl fmt::Debug for Will {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Will")
            .field("topic", &self.topic)
            .field("payload", &format_args!("<{} bytes>", self.payload.len()))
            .field("qos", &self.qos)
            .field("retain", &self.retain)
            .field("properties", &self.properties)
            .finish()
    }
}
