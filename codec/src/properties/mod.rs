//! MQTT 5 properties (§2.2.2): every property the specification defines, which packets may
//! carry each one, and their encoding. One `Properties` struct serves every packet; the
//! [`PropertyContext`] says which properties the packet at hand allows, and both the decoder
//! and the encoder enforce it.

mod decode;
mod encode;

use std::fmt;
use std::num::{NonZeroU16, NonZeroU32};

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{DecodeError, EncodeError};
use crate::string::MqttStr;
use crate::types::QoS;
use crate::varint;
use crate::wire::{Reader, check_field, field_len, put_binary};

/// Property identifiers (§2.2.2.2, table 2-4).
pub mod id {
    pub const PAYLOAD_FORMAT_INDICATOR: u8 = 0x01;
    pub const MESSAGE_EXPIRY_INTERVAL: u8 = 0x02;
    pub const CONTENT_TYPE: u8 = 0x03;
    pub const RESPONSE_TOPIC: u8 = 0x08;
    pub const CORRELATION_DATA: u8 = 0x09;
    pub const SUBSCRIPTION_IDENTIFIER: u8 = 0x0B;
    pub const SESSION_EXPIRY_INTERVAL: u8 = 0x11;
    pub const ASSIGNED_CLIENT_IDENTIFIER: u8 = 0x12;
    pub const SERVER_KEEP_ALIVE: u8 = 0x13;
    pub const AUTHENTICATION_METHOD: u8 = 0x15;
    pub const AUTHENTICATION_DATA: u8 = 0x16;
    pub const REQUEST_PROBLEM_INFORMATION: u8 = 0x17;
    pub const WILL_DELAY_INTERVAL: u8 = 0x18;
    pub const REQUEST_RESPONSE_INFORMATION: u8 = 0x19;
    pub const RESPONSE_INFORMATION: u8 = 0x1A;
    pub const SERVER_REFERENCE: u8 = 0x1C;
    pub const REASON_STRING: u8 = 0x1F;
    pub const RECEIVE_MAXIMUM: u8 = 0x21;
    pub const TOPIC_ALIAS_MAXIMUM: u8 = 0x22;
    pub const TOPIC_ALIAS: u8 = 0x23;
    pub const MAXIMUM_QOS: u8 = 0x24;
    pub const RETAIN_AVAILABLE: u8 = 0x25;
    pub const USER_PROPERTY: u8 = 0x26;
    pub const MAXIMUM_PACKET_SIZE: u8 = 0x27;
    pub const WILDCARD_SUBSCRIPTION_AVAILABLE: u8 = 0x28;
    pub const SUBSCRIPTION_IDENTIFIER_AVAILABLE: u8 = 0x29;
    pub const SHARED_SUBSCRIPTION_AVAILABLE: u8 = 0x2A;
}

use id::*;

const fn mask(ids: &[u8]) -> u64 {
    let mut m = 0u64;
    let mut i = 0;
    while i < ids.len() {
        m |= 1 << ids[i];
        i += 1;
    }
    m
}

/// The identifiers the specification defines.
const DEFINED: u64 = mask(&[
    PAYLOAD_FORMAT_INDICATOR,
    MESSAGE_EXPIRY_INTERVAL,
    CONTENT_TYPE,
    RESPONSE_TOPIC,
    CORRELATION_DATA,
    SUBSCRIPTION_IDENTIFIER,
    SESSION_EXPIRY_INTERVAL,
    ASSIGNED_CLIENT_IDENTIFIER,
    SERVER_KEEP_ALIVE,
    AUTHENTICATION_METHOD,
    AUTHENTICATION_DATA,
    REQUEST_PROBLEM_INFORMATION,
    WILL_DELAY_INTERVAL,
    REQUEST_RESPONSE_INFORMATION,
    RESPONSE_INFORMATION,
    SERVER_REFERENCE,
    REASON_STRING,
    RECEIVE_MAXIMUM,
    TOPIC_ALIAS_MAXIMUM,
    TOPIC_ALIAS,
    MAXIMUM_QOS,
    RETAIN_AVAILABLE,
    USER_PROPERTY,
    MAXIMUM_PACKET_SIZE,
    WILDCARD_SUBSCRIPTION_AVAILABLE,
    SUBSCRIPTION_IDENTIFIER_AVAILABLE,
    SHARED_SUBSCRIPTION_AVAILABLE,
]);

/// Where a property block sits: each packet (and the will of CONNECT) allows its own set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PropertyContext {
    Connect,
    Will,
    ConnAck,
    Publish,
    PubAck,
    PubRec,
    PubRel,
    PubComp,
    Subscribe,
    SubAck,
    Unsubscribe,
    UnsubAck,
    Disconnect,
    Auth,
}

impl PropertyContext {
    pub fn name(self) -> &'static str {
        use PropertyContext::*;
        match self {
            Connect => "CONNECT",
            Will => "the will properties",
            ConnAck => "CONNACK",
            Publish => "PUBLISH",
            PubAck => "PUBACK",
            PubRec => "PUBREC",
            PubRel => "PUBREL",
            PubComp => "PUBCOMP",
            Subscribe => "SUBSCRIBE",
            SubAck => "SUBACK",
            Unsubscribe => "UNSUBSCRIBE",
            UnsubAck => "UNSUBACK",
            Disconnect => "DISCONNECT",
            Auth => "AUTH",
        }
    }

    /// The properties this context allows (table 2-4, "Packet / Will Properties" column).
    pub fn allowed(self) -> u64 {
        use PropertyContext::*;
        const ACK: u64 = mask(&[REASON_STRING, USER_PROPERTY]);
        match self {
            Publish => mask(&[
                PAYLOAD_FORMAT_INDICATOR,
                MESSAGE_EXPIRY_INTERVAL,
                CONTENT_TYPE,
                RESPONSE_TOPIC,
                CORRELATION_DATA,
                SUBSCRIPTION_IDENTIFIER,
                TOPIC_ALIAS,
                USER_PROPERTY,
            ]),
            Will => mask(&[
                PAYLOAD_FORMAT_INDICATOR,
                MESSAGE_EXPIRY_INTERVAL,
                CONTENT_TYPE,
                RESPONSE_TOPIC,
                CORRELATION_DATA,
                WILL_DELAY_INTERVAL,
                USER_PROPERTY,
            ]),
            Connect => mask(&[
                SESSION_EXPIRY_INTERVAL,
                AUTHENTICATION_METHOD,
                AUTHENTICATION_DATA,
                REQUEST_PROBLEM_INFORMATION,
                REQUEST_RESPONSE_INFORMATION,
                RECEIVE_MAXIMUM,
                TOPIC_ALIAS_MAXIMUM,
                USER_PROPERTY,
                MAXIMUM_PACKET_SIZE,
            ]),
            ConnAck => mask(&[
                SESSION_EXPIRY_INTERVAL,
                ASSIGNED_CLIENT_IDENTIFIER,
                SERVER_KEEP_ALIVE,
                AUTHENTICATION_METHOD,
                AUTHENTICATION_DATA,
                RESPONSE_INFORMATION,
                SERVER_REFERENCE,
                REASON_STRING,
                RECEIVE_MAXIMUM,
                TOPIC_ALIAS_MAXIMUM,
                MAXIMUM_QOS,
                RETAIN_AVAILABLE,
                USER_PROPERTY,
                MAXIMUM_PACKET_SIZE,
                WILDCARD_SUBSCRIPTION_AVAILABLE,
                SUBSCRIPTION_IDENTIFIER_AVAILABLE,
                SHARED_SUBSCRIPTION_AVAILABLE,
            ]),
            PubAck | PubRec | PubRel | PubComp | SubAck | UnsubAck => ACK,
            Subscribe => mask(&[SUBSCRIPTION_IDENTIFIER, USER_PROPERTY]),
            Unsubscribe => mask(&[USER_PROPERTY]),
            Disconnect => mask(&[
                SESSION_EXPIRY_INTERVAL,
                SERVER_REFERENCE,
                REASON_STRING,
                USER_PROPERTY,
            ]),
            Auth => mask(&[
                AUTHENTICATION_METHOD,
                AUTHENTICATION_DATA,
                REASON_STRING,
                USER_PROPERTY,
            ]),
        }
    }

    /// Whether a property may appear more than once here (§2.2.2.2: User Property always,
    /// Subscription Identifier in PUBLISH only, MQTT-3.8.2-… for SUBSCRIBE).
    fn repeatable(self, id: u8) -> bool {
        id == USER_PROPERTY || (id == SUBSCRIPTION_IDENTIFIER && self == PropertyContext::Publish)
    }
}

/// MQTT 5 §3.1.2.11.10: "It is a Protocol Error to include Authentication Data if there is
/// no Authentication Method" (the error names the context this way).
const AUTH_DATA_WITHOUT_METHOD: &str = "CONNECT without an authentication method";

/// Every MQTT 5 property. Absent properties are `None` or empty; the packet's context decides
/// which may be set.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct PropertyFields {
    /// 0x01: `Some(true)` when the payload is UTF-8 (indicator 1).
    pub payload_format_indicator: Option<bool>,
    /// 0x02, seconds.
    pub message_expiry_interval: Option<u32>,
    /// 0x03.
    pub content_type: Option<MqttStr>,
    /// 0x08.
    pub response_topic: Option<MqttStr>,
    /// 0x09.
    pub correlation_data: Option<Bytes>,
    /// 0x0B: one in SUBSCRIBE, any number in PUBLISH; 1 to 268,435,455.
    pub subscription_identifiers: Vec<u32>,
    /// 0x11, seconds.
    pub session_expiry_interval: Option<u32>,
    /// 0x12.
    pub assigned_client_identifier: Option<MqttStr>,
    /// 0x13, seconds.
    pub server_keep_alive: Option<u16>,
    /// 0x15.
    pub authentication_method: Option<MqttStr>,
    /// 0x16 (redacted in `Debug`).
    pub authentication_data: Option<Bytes>,
    /// 0x17.
    pub request_problem_information: Option<bool>,
    /// 0x18, seconds.
    pub will_delay_interval: Option<u32>,
    /// 0x19.
    pub request_response_information: Option<bool>,
    /// 0x1A.
    pub response_information: Option<MqttStr>,
    /// 0x1C.
    pub server_reference: Option<MqttStr>,
    /// 0x1F.
    pub reason_string: Option<MqttStr>,
    /// 0x21 (0 is a protocol error, so the type excludes it).
    pub receive_maximum: Option<NonZeroU16>,
    /// 0x22.
    pub topic_alias_maximum: Option<u16>,
    /// 0x23 (0 is a protocol error).
    pub topic_alias: Option<NonZeroU16>,
    /// 0x24: only QoS 0 or 1 may be sent.
    pub maximum_qos: Option<QoS>,
    /// 0x25.
    pub retain_available: Option<bool>,
    /// 0x26, in order.
    pub user_properties: Vec<(MqttStr, MqttStr)>,
    /// 0x27 (0 is a protocol error).
    pub maximum_packet_size: Option<NonZeroU32>,
    /// 0x28.
    pub wildcard_subscription_available: Option<bool>,
    /// 0x29.
    pub subscription_identifier_available: Option<bool>,
    /// 0x2A.
    pub shared_subscription_available: Option<bool>,
}

/// The properties of a packet: nothing allocated and one pointer wide when there are none
/// (the common case), the fields boxed when there are some. Reads see every field through
/// `Deref` (an empty set when there are none); the first write through `DerefMut` boxes them.
#[derive(Clone, Default)]
pub struct Properties(Option<Box<PropertyFields>>);

static EMPTY: PropertyFields = PropertyFields::EMPTY;

impl PropertyFields {
    const EMPTY: PropertyFields = PropertyFields {
        payload_format_indicator: None,
        message_expiry_interval: None,
        content_type: None,
        response_topic: None,
        correlation_data: None,
        subscription_identifiers: Vec::new(),
        session_expiry_interval: None,
        assigned_client_identifier: None,
        server_keep_alive: None,
        authentication_method: None,
        authentication_data: None,
        request_problem_information: None,
        will_delay_interval: None,
        request_response_information: None,
        response_information: None,
        server_reference: None,
        reason_string: None,
        receive_maximum: None,
        topic_alias_maximum: None,
        topic_alias: None,
        maximum_qos: None,
        retain_available: None,
        user_properties: Vec::new(),
        maximum_packet_size: None,
        wildcard_subscription_available: None,
        subscription_identifier_available: None,
        shared_subscription_available: None,
    };
}

impl std::ops::Deref for Properties {
    type Target = PropertyFields;
    #[inline]
    fn deref(&self) -> &PropertyFields {
        match &self.0 {
            Some(b) => b,
            None => &EMPTY,
        }
    }
}

impl std::ops::DerefMut for Properties {
    #[inline]
    fn deref_mut(&mut self) -> &mut PropertyFields {
        self.0.get_or_insert_with(Default::default)
    }
}

impl PartialEq for Properties {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for Properties {}

impl fmt::Debug for Properties {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl Properties {
    /// True when no property is set.
    #[inline]
    pub fn is_empty(&self) -> bool {
        match &self.0 {
            None => true,
            Some(b) => b.present() == 0,
        }
    }

    /// Takes the reason string out (without boxing anything when there is none).
    pub fn take_reason_string(&mut self) -> Option<MqttStr> {
        self.0.as_mut().and_then(|f| f.reason_string.take())
    }

    /// Reads a property block (its length, then the properties) for `ctx`.
    #[inline]
    pub(crate) fn decode(r: &mut Reader<'_>, ctx: PropertyContext) -> Result<Self, DecodeError> {
        let len = r.varint("property length")? as usize;
        if len == 0 {
            return Ok(Properties(None));
        }
        let mut fields = Box::<PropertyFields>::default();
        PropertyFields::decode_fields(&mut fields, r, len, ctx)?;
        Ok(Properties(Some(fields)))
    }

    #[inline]
    pub(crate) fn check(
        &self,
        ctx: PropertyContext,
        alias: Option<Option<NonZeroU16>>,
    ) -> Result<usize, EncodeError> {
        if self.0.is_none() && alias.flatten().is_none() {
            return Ok(0);
        }
        (**self).check(ctx, alias)
    }

    #[inline]
    pub(crate) fn put(&self, buf: &mut BytesMut, len: usize, alias: Option<Option<NonZeroU16>>) {
        if len == 0 {
            varint::put(buf, 0);
            return;
        }
        (**self).put(buf, len, alias)
    }
}

fn bool_prop(r: &mut Reader<'_>, id: u8) -> Result<bool, DecodeError> {
    match r.u8("property value")? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(DecodeError::InvalidPropertyValue {
            id,
            value: u32::from(v),
        }),
    }
}

impl PropertyFields {
    /// True when no property is set.
    pub fn is_empty(&self) -> bool {
        self.present() == 0
    }

    /// A bit per property identifier that is set.
    pub fn present(&self) -> u64 {
        let mut m = 0u64;
        let mut set = |cond: bool, id: u8| {
            if cond {
                m |= 1 << id;
            }
        };
        set(
            self.payload_format_indicator.is_some(),
            PAYLOAD_FORMAT_INDICATOR,
        );
        set(
            self.message_expiry_interval.is_some(),
            MESSAGE_EXPIRY_INTERVAL,
        );
        set(self.content_type.is_some(), CONTENT_TYPE);
        set(self.response_topic.is_some(), RESPONSE_TOPIC);
        set(self.correlation_data.is_some(), CORRELATION_DATA);
        set(
            !self.subscription_identifiers.is_empty(),
            SUBSCRIPTION_IDENTIFIER,
        );
        set(
            self.session_expiry_interval.is_some(),
            SESSION_EXPIRY_INTERVAL,
        );
        set(
            self.assigned_client_identifier.is_some(),
            ASSIGNED_CLIENT_IDENTIFIER,
        );
        set(self.server_keep_alive.is_some(), SERVER_KEEP_ALIVE);
        set(self.authentication_method.is_some(), AUTHENTICATION_METHOD);
        set(self.authentication_data.is_some(), AUTHENTICATION_DATA);
        set(
            self.request_problem_information.is_some(),
            REQUEST_PROBLEM_INFORMATION,
        );
        set(self.will_delay_interval.is_some(), WILL_DELAY_INTERVAL);
        set(
            self.request_response_information.is_some(),
            REQUEST_RESPONSE_INFORMATION,
        );
        set(self.response_information.is_some(), RESPONSE_INFORMATION);
        set(self.server_reference.is_some(), SERVER_REFERENCE);
        set(self.reason_string.is_some(), REASON_STRING);
        set(self.receive_maximum.is_some(), RECEIVE_MAXIMUM);
        set(self.topic_alias_maximum.is_some(), TOPIC_ALIAS_MAXIMUM);
        set(self.topic_alias.is_some(), TOPIC_ALIAS);
        set(self.maximum_qos.is_some(), MAXIMUM_QOS);
        set(self.retain_available.is_some(), RETAIN_AVAILABLE);
        set(!self.user_properties.is_empty(), USER_PROPERTY);
        set(self.maximum_packet_size.is_some(), MAXIMUM_PACKET_SIZE);
        set(
            self.wildcard_subscription_available.is_some(),
            WILDCARD_SUBSCRIPTION_AVAILABLE,
        );
        set(
            self.subscription_identifier_available.is_some(),
            SUBSCRIPTION_IDENTIFIER_AVAILABLE,
        );
        set(
            self.shared_subscription_available.is_some(),
            SHARED_SUBSCRIPTION_AVAILABLE,
        );
        m
    }
}

impl fmt::Debug for PropertyFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Properties");
        macro_rules! field {
            ($name:ident) => {
                if let Some(v) = &self.$name {
                    d.field(stringify!($name), v);
                }
            };
        }
        field!(payload_format_indicator);
        field!(message_expiry_interval);
        field!(content_type);
        field!(response_topic);
        if let Some(b) = &self.correlation_data {
            d.field("correlation_data", &format_args!("<{} bytes>", b.len()));
        }
        if !self.subscription_identifiers.is_empty() {
            d.field("subscription_identifiers", &self.subscription_identifiers);
        }
        field!(session_expiry_interval);
        field!(assigned_client_identifier);
        field!(server_keep_alive);
        field!(authentication_method);
        if self.authentication_data.is_some() {
            d.field("authentication_data", &format_args!("<redacted>"));
        }
        field!(request_problem_information);
        field!(will_delay_interval);
        field!(request_response_information);
        field!(response_information);
        field!(server_reference);
        field!(reason_string);
        field!(receive_maximum);
        field!(topic_alias_maximum);
        field!(topic_alias);
        field!(maximum_qos);
        field!(retain_available);
        if !self.user_properties.is_empty() {
            d.field("user_properties", &self.user_properties);
        }
        field!(maximum_packet_size);
        field!(wildcard_subscription_available);
        field!(subscription_identifier_available);
        field!(shared_subscription_available);
        d.finish()
    }
}

impl From<PropertyFields> for Properties {
    /// Boxes the fields (or nothing, when none is set).
    fn from(fields: PropertyFields) -> Self {
        if fields.present() == 0 {
            Properties(None)
        } else {
            Properties(Some(Box::new(fields)))
        }
    }
}
