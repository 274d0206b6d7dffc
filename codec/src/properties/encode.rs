//! Writing a property block: what may be sent in a context and its length
//! ([`PropertyFields::check`]), then the bytes ([`PropertyFields::put`]).

use super::*;

impl PropertyFields {
    /// Checks that every property is allowed in `ctx` and has a valid value; returns the
    /// length of the property block's content (without its own length prefix).
    /// `alias` replaces `topic_alias` (the session assigns aliases per connection).
    pub(crate) fn check(
        &self,
        ctx: PropertyContext,
        alias: Option<Option<NonZeroU16>>,
    ) -> Result<usize, EncodeError> {
        let mut present = self.present();
        if let Some(a) = alias {
            present &= !(1u64 << TOPIC_ALIAS);
            if a.is_some() {
                present |= 1u64 << TOPIC_ALIAS;
            }
        }
        if present == 0 {
            return Ok(0);
        }
        let bad = present & !ctx.allowed();
        if bad != 0 {
            return Err(EncodeError::PropertyNotAllowed {
                id: bad.trailing_zeros() as u8,
                context: ctx.name(),
            });
        }
        // The sink's usual case: user properties (and perhaps a topic alias) only.
        const USER_AND_ALIAS: u64 = (1 << USER_PROPERTY) | (1 << TOPIC_ALIAS);
        if present & !USER_AND_ALIAS == 0 {
            let alias_len = if present & (1 << TOPIC_ALIAS) != 0 {
                3
            } else {
                0
            };
            return Ok(alias_len + self.user_properties_len());
        }
        if ctx == PropertyContext::Connect
            && self.authentication_data.is_some()
            && self.authentication_method.is_none()
        {
            return Err(EncodeError::PropertyNotAllowed {
                id: AUTHENTICATION_DATA,
                context: AUTH_DATA_WITHOUT_METHOD,
            });
        }
        let mut n = 0usize;
        // `MqttStr` holds at most 65,535 bytes by construction: no length check needed.
        for s in [
            &self.content_type,
            &self.response_topic,
            &self.assigned_client_identifier,
            &self.authentication_method,
            &self.response_information,
            &self.server_reference,
            &self.reason_string,
        ]
        .into_iter()
        .flatten()
        {
            n += 1 + field_len(s.len());
        }
        for (v, field) in [
            (&self.correlation_data, "correlation data"),
            (&self.authentication_data, "authentication data"),
        ] {
            if let Some(b) = v {
                check_field(b.len(), field)?;
                n += 1 + field_len(b.len());
            }
        }
        if let Some(t) = &self.response_topic {
            crate::topic::check_topic_name(t.as_bytes())
                .map_err(|reason| EncodeError::InvalidTopicName { reason })?;
        }
        let byte_props = [
            self.payload_format_indicator.is_some(),
            self.request_problem_information.is_some(),
            self.request_response_information.is_some(),
            self.maximum_qos.is_some(),
            self.retain_available.is_some(),
            self.wildcard_subscription_available.is_some(),
            self.subscription_identifier_available.is_some(),
            self.shared_subscription_available.is_some(),
        ];
        n += 2 * byte_props.iter().filter(|&&b| b).count();
        if self.maximum_qos == Some(QoS::ExactlyOnce) {
            return Err(EncodeError::InvalidPropertyValue {
                id: MAXIMUM_QOS,
                value: 2,
            });
        }
        let u16_props = [
            self.server_keep_alive.is_some(),
            self.receive_maximum.is_some(),
            self.topic_alias_maximum.is_some(),
            match alias {
                Some(a) => a.is_some(),
                None => self.topic_alias.is_some(),
            },
        ];
        n += 3 * u16_props.iter().filter(|&&b| b).count();
        let u32_props = [
            self.message_expiry_interval.is_some(),
            self.session_expiry_interval.is_some(),
            self.will_delay_interval.is_some(),
            self.maximum_packet_size.is_some(),
        ];
        n += 5 * u32_props.iter().filter(|&&b| b).count();
        if ctx == PropertyContext::Subscribe && self.subscription_identifiers.len() > 1 {
            return Err(EncodeError::InvalidPropertyValue {
                id: SUBSCRIPTION_IDENTIFIER,
                value: self.subscription_identifiers.len() as u32,
            });
        }
        for &s in &self.subscription_identifiers {
            if s == 0 || s > varint::MAX {
                return Err(EncodeError::InvalidPropertyValue {
                    id: SUBSCRIPTION_IDENTIFIER,
                    value: s,
                });
            }
            n += 1 + varint::len(s);
        }
        for (k, v) in &self.user_properties {
            n += 1 + field_len(k.len()) + field_len(v.len());
        }
        Ok(n)
    }

    /// Encoded length of the user properties.
    #[inline]
    pub(super) fn user_properties_len(&self) -> usize {
        self.user_properties
            .iter()
            .map(|(k, v)| 1 + field_len(k.len()) + field_len(v.len()))
            .sum()
    }

    /// Writes the property block: `len` (from [`Properties::check`]) and the properties.
    pub(crate) fn put(&self, buf: &mut BytesMut, len: usize, alias: Option<Option<NonZeroU16>>) {
        varint::put(buf, len as u32);
        if len == 0 {
            return;
        }
        // Fast path: when the user properties (and the alias) account for the whole length,
        // nothing else is set, since every other property takes at least two bytes.
        let alias = match alias {
            Some(a) => a,
            None => self.topic_alias,
        };
        let alias_len = if alias.is_some() { 3 } else { 0 };
        if len == alias_len + self.user_properties_len() {
            if let Some(a) = alias {
                buf.put_u8(TOPIC_ALIAS);
                buf.put_u16(a.get());
            }
            for (k, v) in &self.user_properties {
                buf.put_u8(USER_PROPERTY);
                put_binary(buf, k.as_bytes());
                put_binary(buf, v.as_bytes());
            }
            return;
        }
        let alias = Some(alias);
        let put_str = |buf: &mut BytesMut, pid: u8, v: &Option<MqttStr>| {
            if let Some(s) = v {
                buf.put_u8(pid);
                put_binary(buf, s.as_bytes());
            }
        };
        let put_bool = |buf: &mut BytesMut, pid: u8, v: Option<bool>| {
            if let Some(b) = v {
                buf.put_u8(pid);
                buf.put_u8(u8::from(b));
            }
        };
        let put_u32 = |buf: &mut BytesMut, pid: u8, v: Option<u32>| {
            if let Some(x) = v {
                buf.put_u8(pid);
                buf.put_u32(x);
            }
        };
        let put_u16 = |buf: &mut BytesMut, pid: u8, v: Option<u16>| {
            if let Some(x) = v {
                buf.put_u8(pid);
                buf.put_u16(x);
            }
        };
        put_bool(buf, PAYLOAD_FORMAT_INDICATOR, self.payload_format_indicator);
        put_u32(buf, MESSAGE_EXPIRY_INTERVAL, self.message_expiry_interval);
        put_str(buf, CONTENT_TYPE, &self.content_type);
        put_str(buf, RESPONSE_TOPIC, &self.response_topic);
        if let Some(b) = &self.correlation_data {
            buf.put_u8(CORRELATION_DATA);
            put_binary(buf, b);
        }
        for &s in &self.subscription_identifiers {
            buf.put_u8(SUBSCRIPTION_IDENTIFIER);
            varint::put(buf, s);
        }
        put_u32(buf, SESSION_EXPIRY_INTERVAL, self.session_expiry_interval);
        put_str(
            buf,
            ASSIGNED_CLIENT_IDENTIFIER,
            &self.assigned_client_identifier,
        );
        put_u16(buf, SERVER_KEEP_ALIVE, self.server_keep_alive);
        put_str(buf, AUTHENTICATION_METHOD, &self.authentication_method);
        if let Some(b) = &self.authentication_data {
            buf.put_u8(AUTHENTICATION_DATA);
            put_binary(buf, b);
        }
        put_bool(
            buf,
            REQUEST_PROBLEM_INFORMATION,
            self.request_problem_information,
        );
        put_u32(buf, WILL_DELAY_INTERVAL, self.will_delay_interval);
        put_bool(
            buf,
            REQUEST_RESPONSE_INFORMATION,
            self.request_response_information,
        );
        put_str(buf, RESPONSE_INFORMATION, &self.response_information);
        put_str(buf, SERVER_REFERENCE, &self.server_reference);
        put_str(buf, REASON_STRING, &self.reason_string);
        put_u16(
            buf,
            RECEIVE_MAXIMUM,
            self.receive_maximum.map(NonZeroU16::get),
        );
        put_u16(buf, TOPIC_ALIAS_MAXIMUM, self.topic_alias_maximum);
        let alias = match alias {
            Some(a) => a,
            None => self.topic_alias,
        };
        put_u16(buf, TOPIC_ALIAS, alias.map(NonZeroU16::get));
        if let Some(q) = self.maximum_qos {
            buf.put_u8(MAXIMUM_QOS);
            buf.put_u8(q as u8);
        }
        put_bool(buf, RETAIN_AVAILABLE, self.retain_available);
        for (k, v) in &self.user_properties {
            buf.put_u8(USER_PROPERTY);
            put_binary(buf, k.as_bytes());
            put_binary(buf, v.as_bytes());
        }
        put_u32(
            buf,
            MAXIMUM_PACKET_SIZE,
            self.maximum_packet_size.map(NonZeroU32::get),
        );
        put_bool(
            buf,
            WILDCARD_SUBSCRIPTION_AVAILABLE,
            self.wildcard_subscription_available,
        );
        put_bool(
            buf,
            SUBSCRIPTION_IDENTIFIER_AVAILABLE,
            self.subscription_identifier_available,
        );
        put_bool(
            buf,
            SHARED_SUBSCRIPTION_AVAILABLE,
            self.shared_subscription_available,
        );
    }
}
