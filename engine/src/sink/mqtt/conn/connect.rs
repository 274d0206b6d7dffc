//! CONNECT and CONNACK: the packet the connection opens with (client id, credentials, will,
//! MQTT 5 properties), the birth message, and what a CONNACK's limits and refusals mean.

use super::*;

/// CONNACK codes worth retrying: the broker is unavailable, busy or rate-limiting for now.
pub(super) fn transient_refusal(protocol: Protocol, code: ReasonCode) -> bool {
    match protocol {
        Protocol::V311 => code.0 == 3,
        Protocol::V5 => matches!(code.0, 0x88 | 0x89 | 0x97 | 0x9F),
    }
}

pub(super) fn connect_packet(ctx: &Ctx, link: &Link, clean: bool) -> Result<Connect, EngineError> {
    let cfg = &ctx.cfg;
    let protocol = link.session.borrow().protocol();
    let place = Place {
        sink: &ctx.sink,
        shard: ctx.shard,
        conn: link.index,
    };
    let bad = |what: &str, e: String| EngineError::permanent(format!("{what}: {e}"));
    let id = cfg.client_id.render(place);
    if protocol == Protocol::V311 && !link.tried() && !portable_v311_id(&id) {
        warn!(
            sink = %ctx.sink,
            conn = link.index,
            "client id {id:?} is {} bytes{}: an MQTT 3.1.1 broker only has to accept 1-23 \
             letters and digits (mosquitto takes more; a strict broker answers CONNACK 2, \
             identifier rejected); set mqtt.client_id if this broker refuses it",
            id.len(),
            if id.bytes().all(|b| b.is_ascii_alphanumeric()) {
                ""
            } else {
                " with characters other than letters and digits"
            }
        );
    }
    let client_id = MqttStr::from_str(&id).map_err(|e| bad("mqtt.client_id", e.to_string()))?;
    let mut c = Connect::new(protocol, client_id);
    c.clean_start = clean;
    c.keep_alive = cfg.keep_alive_secs();
    if let Some(u) = &cfg.username {
        c.username = Some(MqttStr::from_str(u).map_err(|e| bad("mqtt.username", e.to_string()))?);
    }
    if let Some(p) = &cfg.password {
        c.password = Some(Bytes::copy_from_slice(p.expose().as_bytes()));
    }
    if protocol == Protocol::V5 && !clean {
        c.properties.session_expiry_interval = Some(cfg.session_expiry_secs());
    }
    if protocol == Protocol::V5 {
        // Tell the broker what the decoder refuses (MQTT 5 §3.1.2.11.4): it must not send a
        // larger packet (it drops or truncates what would be).
        c.properties.maximum_packet_size = NonZeroU32::new(cfg.max_incoming_packet());
    }
    if let Some(w) = &cfg.will {
        let topic = topic_name(w.topic.render(place)).map_err(|e| bad("mqtt.will.topic", e))?;
        c.will = Some(Will {
            topic,
            payload: Bytes::copy_from_slice(w.payload.as_bytes()),
            qos: QoS::from_u8(w.qos).unwrap_or(QoS::AtMostOnce),
            retain: w.retain,
            properties: Default::default(),
        });
    }
    Ok(c)
}

/// The place of this connection, for the name templates.
pub(super) fn place<'a>(ctx: &'a Ctx, link: &Link) -> Place<'a> {
    Place {
        sink: &ctx.sink,
        shard: ctx.shard,
        conn: link.index,
    }
}

/// After CONNACK: the birth message goes first in the queue (ahead of new messages; what the
/// session re-sends goes out before it). A birth still queued from a connection that ended
/// before writing it is dropped: one per connection.
pub(super) fn queue_birth(ctx: &Ctx, link: &Link) -> Result<(), EngineError> {
    let Some(b) = &ctx.cfg.birth else {
        return Ok(());
    };
    let topic = topic_name(b.topic.render(place(ctx, link)))
        .map_err(|e| EngineError::permanent(format!("mqtt.birth.topic: {e}")))?;
    let mut publish = Publish::new(topic, Bytes::copy_from_slice(b.payload.as_bytes()));
    publish.qos = QoS::from_u8(b.qos).unwrap_or(QoS::AtMostOnce);
    publish.retain = b.retain;
    let mut queue = link.queue.borrow_mut();
    queue.retain(|i| !i.token.status);
    queue.push_front(Item {
        publish,
        token: Token::status(),
    });
    Ok(())
}

/// At a controlled shutdown of a sink with both a birth message and a will: the will as a
/// message (QoS 0, its retain flag), so the status topic does not keep saying online.
pub(super) fn shutdown_will(ctx: &Ctx, link: &Link) -> Option<Publish> {
    let (Some(_), Some(w)) = (&ctx.cfg.birth, &ctx.cfg.will) else {
        return None;
    };
    let topic = topic_name(w.topic.render(place(ctx, link))).ok()?;
    let mut publish = Publish::new(topic, Bytes::copy_from_slice(w.payload.as_bytes()));
    publish.retain = w.retain;
    Some(publish)
}

/// Whether an MQTT 3.1.1 broker must accept `id` (1-23 bytes of 0-9, a-z, A-Z; MQTT-3.1.3-5).
pub(super) fn portable_v311_id(id: &str) -> bool {
    (1..=23).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// A CONNACK limit that refuses every message this sink would send (its static QoS above the
/// broker's Maximum QoS, its static retain flag where retain is not available) is a
/// configuration problem, stopped at CONNACK like a refused CONNECT: sent anyway, each message
/// would be rejected on its own and, under `on_error = "skip"`, committed undelivered. A limit
/// only some messages break (a QoS or retain header) goes to `on_error` per message.
pub(super) fn refuse_unsendable(cfg: &MqttSinkConfig, link: &Link) -> Result<(), EngineError> {
    let (maximum_qos, retain_available, maximum_packet) = {
        let s = link.session.borrow();
        (
            s.broker_maximum_qos(),
            s.broker_retain_available(),
            s.broker_maximum_packet_size(),
        )
    };
    let refuse = |why: String| {
        EngineError::permanent(format!(
            "MQTT broker {}: {why}; no message of this sink could be delivered",
            link.address(cfg)
        ))
    };
    if cfg.qos_header.is_none() && cfg.qos > maximum_qos as u8 {
        return Err(refuse(format!(
            "CONNACK Maximum QoS is {}, below sink.mqtt.qos = {}: lower sink.mqtt.qos or allow \
             QoS {} on the broker",
            maximum_qos as u8, cfg.qos, cfg.qos
        )));
    }
    let smallest = smallest_publish(cfg);
    if (maximum_packet as usize) < smallest {
        return Err(refuse(format!(
            "CONNACK Maximum Packet Size is {maximum_packet} bytes, below the smallest PUBLISH \
             this sink can send ({smallest} bytes: header, topic and packet id, no payload); \
             raise the broker's limit"
        )));
    }
    if cfg.retain && cfg.retain_header.is_none() && !retain_available {
        return Err(refuse(
            "CONNACK Retain Available is 0 (the broker takes no retained messages), but \
             sink.mqtt.retain = true: set it to false or allow retain on the broker"
                .to_owned(),
        ));
    }
    Ok(())
}

/// The fewest bytes a PUBLISH of this sink takes on the wire: the fixed header (2), the topic
/// (its length and bytes: the static topic, else at least one byte), the packet id when every
/// message goes at QoS 1 or 2, the MQTT 5 property length (1), an empty payload.
pub(super) fn smallest_publish(cfg: &MqttSinkConfig) -> usize {
    let topic = match (&cfg.topic, &cfg.topic_header) {
        (Some(t), None) if t.is_static() => t.literal().len(),
        _ => 1,
    };
    let packet_id = if cfg.qos_header.is_none() && cfg.qos > 0 {
        2
    } else {
        0
    };
    let properties = usize::from(cfg.protocol == MqttVersion::V5);
    2 + 2 + topic + packet_id + properties
}
