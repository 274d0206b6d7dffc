//! Reading a property block: each property by its identifier, its value checked as it is read,
//! a repeated one refused unless the specification allows it.

use super::*;

impl PropertyFields {
    /// Reads the properties into `p` (already boxed, so the large struct is filled in place
    /// rather than built on the stack and copied).
    pub(super) fn decode_fields(
        p: &mut PropertyFields,
        r: &mut Reader<'_>,
        len: usize,
        ctx: PropertyContext,
    ) -> Result<(), DecodeError> {
        let mut r = r.sub(len)?;
        let allowed = ctx.allowed();
        let mut seen = 0u64;
        while r.remaining() > 0 {
            let raw = r.varint("property identifier")?;
            if raw >= 64 || DEFINED & (1u64 << raw) == 0 {
                return Err(DecodeError::UnknownProperty(raw));
            }
            let pid = raw as u8;
            let bit = 1u64 << pid;
            if allowed & bit == 0 {
                return Err(DecodeError::PropertyNotAllowed {
                    id: pid,
                    context: ctx.name(),
                });
            }
            if seen & bit != 0 && !ctx.repeatable(pid) {
                return Err(DecodeError::DuplicateProperty { id: pid });
            }
            seen |= bit;
            match pid {
                PAYLOAD_FORMAT_INDICATOR => {
                    p.payload_format_indicator = Some(bool_prop(&mut r, pid)?)
                }
                MESSAGE_EXPIRY_INTERVAL => {
                    p.message_expiry_interval = Some(r.u32("message expiry interval")?)
                }
                CONTENT_TYPE => p.content_type = Some(r.string("content type")?),
                RESPONSE_TOPIC => {
                    let t = r.string("response topic")?;
                    crate::topic::check_topic_name(t.as_bytes())
                        .map_err(|reason| DecodeError::InvalidTopicName { reason })?;
                    p.response_topic = Some(t);
                }
                CORRELATION_DATA => p.correlation_data = Some(r.binary("correlation data")?),
                SUBSCRIPTION_IDENTIFIER => {
                    let v = r.varint("subscription identifier")?;
                    if v == 0 {
                        return Err(DecodeError::InvalidPropertyValue { id: pid, value: 0 });
                    }
                    p.subscription_identifiers.push(v);
                }
                SESSION_EXPIRY_INTERVAL => {
                    p.session_expiry_interval = Some(r.u32("session expiry interval")?)
                }
                ASSIGNED_CLIENT_IDENTIFIER => {
                    p.assigned_client_identifier = Some(r.string("assigned client identifier")?)
                }
                SERVER_KEEP_ALIVE => p.server_keep_alive = Some(r.u16("server keep alive")?),
                AUTHENTICATION_METHOD => {
                    p.authentication_method = Some(r.string("authentication method")?)
                }
                AUTHENTICATION_DATA => {
                    p.authentication_data = Some(r.binary("authentication data")?)
                }
                REQUEST_PROBLEM_INFORMATION => {
                    p.request_problem_information = Some(bool_prop(&mut r, pid)?)
                }
                WILL_DELAY_INTERVAL => p.will_delay_interval = Some(r.u32("will delay interval")?),
                REQUEST_RESPONSE_INFORMATION => {
                    p.request_response_information = Some(bool_prop(&mut r, pid)?)
                }
                RESPONSE_INFORMATION => {
                    p.response_information = Some(r.string("response information")?)
                }
                SERVER_REFERENCE => p.server_reference = Some(r.string("server reference")?),
                REASON_STRING => p.reason_string = Some(r.string("reason string")?),
                RECEIVE_MAXIMUM => {
                    let v = r.u16("receive maximum")?;
                    p.receive_maximum = Some(
                        NonZeroU16::new(v)
                            .ok_or(DecodeError::InvalidPropertyValue { id: pid, value: 0 })?,
                    );
                }
                TOPIC_ALIAS_MAXIMUM => p.topic_alias_maximum = Some(r.u16("topic alias maximum")?),
                TOPIC_ALIAS => {
                    let v = r.u16("topic alias")?;
                    p.topic_alias = Some(
                        NonZeroU16::new(v)
                            .ok_or(DecodeError::InvalidPropertyValue { id: pid, value: 0 })?,
                    );
                }
                MAXIMUM_QOS => {
                    p.maximum_qos = Some(match r.u8("maximum qos")? {
                        0 => QoS::AtMostOnce,
                        1 => QoS::AtLeastOnce,
                        v => {
                            return Err(DecodeError::InvalidPropertyValue {
                                id: pid,
                                value: u32::from(v),
                            });
                        }
                    })
                }
                RETAIN_AVAILABLE => p.retain_available = Some(bool_prop(&mut r, pid)?),
                USER_PROPERTY => {
                    let k = r.string("user property name")?;
                    let v = r.string("user property value")?;
                    p.user_properties.push((k, v));
                }
                MAXIMUM_PACKET_SIZE => {
                    let v = r.u32("maximum packet size")?;
                    p.maximum_packet_size = Some(
                        NonZeroU32::new(v)
                            .ok_or(DecodeError::InvalidPropertyValue { id: pid, value: 0 })?,
                    );
                }
                WILDCARD_SUBSCRIPTION_AVAILABLE => {
                    p.wildcard_subscription_available = Some(bool_prop(&mut r, pid)?)
                }
                SUBSCRIPTION_IDENTIFIER_AVAILABLE => {
                    p.subscription_identifier_available = Some(bool_prop(&mut r, pid)?)
                }
                SHARED_SUBSCRIPTION_AVAILABLE => {
                    p.shared_subscription_available = Some(bool_prop(&mut r, pid)?)
                }
                _ => return Err(DecodeError::UnknownProperty(raw)),
            }
        }
        if ctx == PropertyContext::Connect
            && p.authentication_data.is_some()
            && p.authentication_method.is_none()
        {
            return Err(DecodeError::PropertyNotAllowed {
                id: AUTHENTICATION_DATA,
                context: AUTH_DATA_WITHOUT_METHOD,
            });
        }
        Ok(())
    }
}
