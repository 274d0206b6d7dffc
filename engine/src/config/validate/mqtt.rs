//! The `[sink.mqtt]` table's checks: addresses, TLS files, topics and templates, limits and
//! the keys that go together.

use super::*;

pub(super) fn validate_mqtt(i: usize, sink: &SinkConfig) -> Result<(), Problem> {
    let key = |k: &str| format!("sink[{i}].mqtt.{k}");
    let Some(m) = &sink.mqtt else {
        return Err(problem(
            format!("sink[{i}].mqtt"),
            "missing: type = \"mqtt\" needs [sink.mqtt] with at least address and topic",
        ));
    };
    if m.addresses().next().is_none() {
        return Err(problem(
            key("address"),
            "is empty: name the broker as host:port (e.g. \"127.0.0.1:1883\"; several, separated by commas, are tried in turn)",
        ));
    }
    if let Some(bad) = m.addresses().find(|a| !host_port(a)) {
        return Err(problem(
            key("address"),
            format!("{bad:?} is not host:port (e.g. \"127.0.0.1:1883\")"),
        ));
    }
    if m.connections == 0 || m.connections > 1024 {
        return Err(problem(key("connections"), "must be 1 to 1024"));
    }
    if !m.max_publish_rate.is_finite() || m.max_publish_rate < 0.0 {
        return Err(problem(
            key("max_publish_rate"),
            "must be a number of PUBLISH packets per second, 0 or more (0: no limit)",
        ));
    }
    if !m.alpn.is_empty() && !m.tls {
        return Err(problem(
            key("alpn"),
            "ALPN is part of the TLS handshake: set tls = true as well",
        ));
    }
    if let Some(bad) = m.alpn.iter().find(|p| p.is_empty() || p.len() > 255) {
        return Err(problem(
            key("alpn"),
            format!("{bad:?}: a protocol name is 1 to 255 bytes"),
        ));
    }
    if m.connections > 1 && !m.client_id.has(Name::Conn) {
        return Err(problem(
            key("client_id"),
            "must contain {conn} when connections > 1: a broker drops the older of two connections with one client id",
        ));
    }
    if !(128..=256 * 1024 * 1024).contains(&m.max_incoming_packet_size.0) {
        return Err(problem(
            key("max_incoming_packet_size"),
            format!(
                "{} bytes: must be 128 B to 256 MiB",
                m.max_incoming_packet_size.0
            ),
        ));
    }
    if m.max_inflight == Some(0) {
        return Err(problem(key("max_inflight"), "must be 1 to 65535"));
    }
    if m.qos > 2 {
        return Err(problem(key("qos"), format!("{} is not 0, 1 or 2", m.qos)));
    }
    if let Some(w) = &m.will {
        if w.qos > 2 {
            return Err(problem(
                key("will.qos"),
                format!("{} is not 0, 1 or 2", w.qos),
            ));
        }
        // Checked as rendered here (pid, host); per-shard values only change digits.
        let sample = w.topic.render(Place {
            sink: &sink.name,
            shard: 0,
            conn: 0,
        });
        topic_name(sample).map_err(|e| problem(key("will.topic"), e))?;
    }
    if let Some(b) = &m.birth {
        if b.qos > 2 {
            return Err(problem(
                key("birth.qos"),
                format!("{} is not 0, 1 or 2", b.qos),
            ));
        }
        let sample = b.topic.render(Place {
            sink: &sink.name,
            shard: 0,
            conn: 0,
        });
        topic_name(sample).map_err(|e| problem(key("birth.topic"), e))?;
    }
    if m.keep_alive.0.as_secs() > u64::from(u16::MAX) {
        return Err(problem(key("keep_alive"), "must be at most 65535 s"));
    }
    if m.connect_timeout.0.is_zero() {
        return Err(problem(key("connect_timeout"), "must be more than 0"));
    }
    if m.reconnect_min.0.is_zero() || m.reconnect_min > m.reconnect_max {
        return Err(problem(
            key("reconnect_min"),
            "must be more than 0 and at most mqtt.reconnect_max",
        ));
    }
    if m.password.is_some() && m.username.is_none() {
        return Err(problem(
            key("username"),
            "missing: a password needs a username",
        ));
    }
    match (&m.topic, &m.topic_header) {
        (None, None) => {
            return Err(problem(
                key("topic"),
                "missing: set topic (static, or a template such as \"{stream}/{topic}/{partition}\") or topic_header",
            ));
        }
        (Some(t), _) if t.is_static() => {
            topic_name(t.literal()).map_err(|e| problem(key("topic"), e))?;
        }
        (None, Some(h)) if h.is_empty() => {
            return Err(problem(key("topic_header"), "must not be empty"));
        }
        _ => {}
    }
    for (k, set) in [
        ("tls_ca", m.tls_ca.is_some()),
        ("tls_cert", m.tls_cert.is_some()),
        ("tls_key", m.tls_key.is_some()),
        ("tls_server_name", m.tls_server_name.is_some()),
    ] {
        if set && !m.tls {
            return Err(problem(
                key(k),
                "is set but mqtt.tls is false: set tls = true or remove it",
            ));
        }
    }
    if m.tls_cert.is_some() != m.tls_key.is_some() {
        return Err(problem(
            key(if m.tls_cert.is_some() {
                "tls_key"
            } else {
                "tls_cert"
            }),
            "missing: mutual TLS needs both tls_cert and tls_key",
        ));
    }
    for (k, path) in [
        ("tls_ca", &m.tls_ca),
        ("tls_cert", &m.tls_cert),
        ("tls_key", &m.tls_key),
    ] {
        if let Some(p) = path
            && !p.is_file()
        {
            return Err(problem(
                key(k),
                format!("{} is not a readable file", p.display()),
            ));
        }
    }
    if m.protocol == MqttVersion::V311 {
        if m.envelope == Envelope::Properties {
            return Err(problem(
                key("envelope"),
                "\"properties\" needs protocol = \"5\" (MQTT 3.1.1 has no properties); use \"json\"",
            ));
        }
        for (k, set) in [
            ("content_type_header", m.content_type_header.is_some()),
            ("payload_format_header", m.payload_format_header.is_some()),
            ("message_expiry_header", m.message_expiry_header.is_some()),
            ("response_topic_header", m.response_topic_header.is_some()),
            (
                "correlation_data_header",
                m.correlation_data_header.is_some(),
            ),
        ] {
            if set {
                return Err(problem(
                    key(k),
                    "is an MQTT 5 property: set protocol = \"5\"",
                ));
            }
        }
    }
    match (sink.on_error, &m.dead_letter_topic) {
        (ErrorPolicy::DeadLetter, None) => {
            return Err(problem(
                key("dead_letter_topic"),
                "missing: on_error = \"dead_letter\" needs the topic rejected messages go to",
            ));
        }
        (ErrorPolicy::DeadLetter, Some(t)) => {
            topic_name(t.clone()).map_err(|e| problem(key("dead_letter_topic"), e))?;
        }
        (_, Some(_)) => {
            return Err(problem(
                key("dead_letter_topic"),
                "is set but on_error is not \"dead_letter\"",
            ));
        }
        _ => {}
    }
    Ok(())
}
