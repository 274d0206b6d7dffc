//! Checks that need more than a type: required keys per source, value ranges, references.
//! Core ids are checked against the machine by [`crate::coremap::resolve`].

use std::collections::HashSet;
use std::net::SocketAddr;

use super::{Config, Envelope, ErrorPolicy, MqttVersion, SinkConfig, SinkType, SourceKind};
use crate::template::Name;
use crate::template::name::Place;
use crate::template::topic::topic_name;

type Problem = (String, String);

fn problem(key: impl Into<String>, message: impl Into<String>) -> Problem {
    (key.into(), message.into())
}

/// The first problem found, as (key, message).
pub(super) fn validate(config: &Config) -> Result<(), Problem> {
    if config.sinks.is_empty() {
        return Err(problem(
            "sink",
            "no [[sink]] block: there is nothing to run (see examples/)",
        ));
    }
    let mut names = HashSet::new();
    for (i, sink) in config.sinks.iter().enumerate() {
        validate_sink(i, sink)?;
        if !names.insert(sink.name.as_str()) {
            return Err(problem(
                format!("sink[{i}].name"),
                format!("the name {:?} is used by an earlier sink", sink.name),
            ));
        }
    }
    if config.sinks.iter().any(|s| s.source == SourceKind::Iggy) {
        validate_iggy(config)?;
    }
    if !config.metrics.address.is_empty() {
        config
            .metrics
            .address
            .parse::<SocketAddr>()
            .map_err(|_| {
                problem(
                    "metrics.address",
                    format!(
                        "{:?} is not an IP address and port such as \"127.0.0.1:9464\" (\"\" turns the endpoint off)",
                        config.metrics.address
                    ),
                )
            })?;
    }
    if config
        .metrics
        .token
        .as_ref()
        .is_some_and(|t| t.expose().trim().is_empty())
    {
        return Err(problem(
            "metrics.token",
            "is empty (leave it out to take pause and resume on a loopback address only)",
        ));
    }
    if config.metrics.health_timeout.0.is_zero() {
        return Err(problem("metrics.health_timeout", "must be more than 0s"));
    }
    if config.runtime.shard_memory_budget.0 == 0 {
        return Err(problem(
            "runtime.shard_memory_budget",
            "must be more than 0 bytes",
        ));
    }
    Ok(())
}

fn validate_iggy(config: &Config) -> Result<(), Problem> {
    let iggy = &config.iggy;
    if iggy.addresses().next().is_none() {
        return Err(problem(
            "iggy.address",
            "is empty: give host:port (e.g. \"127.0.0.1:8090\"), or a cluster's nodes \
             separated by commas",
        ));
    }
    if let Some(bad) = iggy.addresses().find(|a| !host_port(a)) {
        return Err(problem(
            "iggy.address",
            format!(
                "{bad:?} is not host:port (e.g. \"127.0.0.1:8090\"; a cluster's nodes are \
                 separated by commas)"
            ),
        ));
    }
    let has_password = iggy.username.is_some() && iggy.password.is_some();
    if iggy.token.is_none() && !has_password {
        let which = if iggy.username.is_some() {
            "iggy.password"
        } else {
            "iggy.username"
        };
        return Err(problem(
            which,
            "missing: set iggy.username and iggy.password (the password may come from \
             SPILLWAY_IGGY_PASSWORD), or iggy.token (or SPILLWAY_IGGY_TOKEN)",
        ));
    }
    if let Some(ca) = &iggy.tls_ca {
        if !iggy.tls {
            return Err(problem(
                "iggy.tls_ca",
                "is set but iggy.tls is false: set tls = true or remove tls_ca",
            ));
        }
        if !ca.is_file() {
            return Err(problem(
                "iggy.tls_ca",
                format!("{} is not a readable file", ca.display()),
            ));
        }
    }
    if iggy.reconnect_min.0.is_zero() || iggy.reconnect_min > iggy.reconnect_max {
        return Err(problem(
            "iggy.reconnect_min",
            "must be more than 0 and at most iggy.reconnect_max",
        ));
    }
    for (key, value) in [
        ("iggy.connect_timeout", iggy.connect_timeout),
        ("iggy.request_timeout", iggy.request_timeout),
        ("iggy.ping_interval", iggy.ping_interval),
    ] {
        if value.0.is_zero() {
            return Err(problem(key, "must be more than 0"));
        }
    }
    Ok(())
}

fn validate_sink(i: usize, sink: &SinkConfig) -> Result<(), Problem> {
    let key = |k: &str| format!("sink[{i}].{k}");
    if sink.name.is_empty()
        || sink.name.len() > 255
        || !sink
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(problem(
            key("name"),
            format!("{:?}: use 1 to 255 of A-Z a-z 0-9 - _ .", sink.name),
        ));
    }
    match sink.source {
        SourceKind::Iggy => {
            if sink.generate.is_some() {
                return Err(problem(
                    key("generate"),
                    "is only for source = \"generate\"",
                ));
            }
            if sink.stream.is_none() {
                return Err(problem(key("stream"), "missing: the Iggy stream to read"));
            }
            if sink.topic.is_none() {
                return Err(problem(key("topic"), "missing: the Iggy topic to read"));
            }
            match (&sink.partitions, &sink.consumer_group) {
                (Some(_), Some(_)) => {
                    return Err(problem(
                        key("consumer_group"),
                        "set either partitions (an explicit list) or consumer_group, not both",
                    ));
                }
                (None, None) => {
                    return Err(problem(
                        key("partitions"),
                        "missing: list the partition ids (e.g. [0, 1, 2]) or set consumer_group",
                    ));
                }
                (Some(list), None) => {
                    if list.is_empty() {
                        return Err(problem(key("partitions"), "is empty"));
                    }
                    let mut seen = HashSet::new();
                    for p in list {
                        if !seen.insert(*p) {
                            return Err(problem(
                                key("partitions"),
                                format!("partition {p} is listed twice"),
                            ));
                        }
                    }
                }
                (None, Some(group)) => {
                    if group.is_empty() || group.len() > 255 {
                        return Err(problem(key("consumer_group"), "must be 1 to 255 bytes"));
                    }
                }
            }
            if let Some(c) = &sink.consumer
                && (c.is_empty() || c.len() > 255)
            {
                return Err(problem(key("consumer"), "must be 1 to 255 bytes"));
            }
        }
        SourceKind::Generate => {
            for (k, set) in [
                ("stream", sink.stream.is_some()),
                ("topic", sink.topic.is_some()),
                ("partitions", sink.partitions.is_some()),
                ("consumer_group", sink.consumer_group.is_some()),
            ] {
                if set {
                    return Err(problem(
                        key(k),
                        "is for source = \"iggy\"; a generate source has its partitions in [sink.generate]",
                    ));
                }
            }
            if let Some(g) = &sink.generate {
                if g.partitions == 0 || g.partitions > 100_000 {
                    return Err(problem(key("generate.partitions"), "must be 1 to 100000"));
                }
                if !(g.rate.is_finite() && g.rate >= 0.0) {
                    return Err(problem(
                        key("generate.rate"),
                        "must be 0 (unlimited) or a positive number of messages per second",
                    ));
                }
                if g.size.0 > 64 << 20 {
                    return Err(problem(key("generate.size"), "must be at most 64 MiB"));
                }
            }
        }
    }
    if sink.batch_size == 0 || sink.batch_size > 1_000_000 {
        return Err(problem(key("batch_size"), "must be 1 to 1000000"));
    }
    if sink.window_messages == 0 {
        return Err(problem(
            key("window_messages"),
            "must be at least 1 (it bounds unconfirmed messages per partition)",
        ));
    }
    if sink.window_bytes.0 == 0 {
        return Err(problem(key("window_bytes"), "must be more than 0 bytes"));
    }
    if sink.commit_every == 0 {
        return Err(problem(key("commit_every"), "must be at least 1"));
    }
    if sink.commit_interval.0.is_zero() {
        return Err(problem(key("commit_interval"), "must be more than 0"));
    }
    if sink.group_sync_interval.0.is_zero() {
        return Err(problem(key("group_sync_interval"), "must be more than 0"));
    }
    if sink.kind != SinkType::Mqtt && sink.mqtt.is_some() {
        return Err(problem(key("mqtt"), "is only for type = \"mqtt\""));
    }
    if sink.kind != SinkType::S3 && sink.s3.is_some() {
        return Err(problem(key("s3"), "is only for type = \"s3\""));
    }
    match sink.kind {
        SinkType::File => match &sink.file {
            Some(f) if f.path.is_some() => {}
            _ => {
                return Err(problem(
                    key("file.path"),
                    "missing: type = \"file\" needs [sink.file] with path = \"...\" (\"-\" for standard output)",
                ));
            }
        },
        SinkType::Stdout => {
            if sink.file.as_ref().is_some_and(|f| f.path.is_some()) {
                return Err(problem(
                    key("file.path"),
                    "type = \"stdout\" writes to standard output; use type = \"file\" for a path",
                ));
            }
        }
        SinkType::S3 => {
            if sink.file.is_some() {
                return Err(problem(
                    key("file"),
                    "is only for type = \"file\" or \"stdout\"",
                ));
            }
            validate_s3(i, sink)?;
        }
        SinkType::Mqtt => {
            if sink.file.is_some() {
                return Err(problem(
                    key("file"),
                    "is only for type = \"file\" or \"stdout\"",
                ));
            }
            validate_mqtt(i, sink)?;
        }
    }
    if sink.on_error == ErrorPolicy::DeadLetter
        && !matches!(sink.kind, SinkType::Mqtt | SinkType::S3)
    {
        return Err(problem(
            key("on_error"),
            "dead_letter needs a sink with a dead-letter destination; file and stdout sinks have none (use fail or skip)",
        ));
    }
    Ok(())
}

fn host_port(value: &str) -> bool {
    matches!(value.rsplit_once(':'), Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok())
}

fn validate_mqtt(i: usize, sink: &SinkConfig) -> Result<(), Problem> {
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

fn validate_s3(i: usize, sink: &SinkConfig) -> Result<(), Problem> {
    let key = |k: &str| format!("sink[{i}].s3.{k}");
    let Some(c) = &sink.s3 else {
        return Err(problem(
            format!("sink[{i}].s3"),
            "missing: type = \"s3\" needs [sink.s3] with at least bucket",
        ));
    };
    if c.bucket.is_empty() {
        return Err(problem(key("bucket"), "must not be empty"));
    }
    match (sink.on_error, c.dead_letter_prefix.as_deref()) {
        (ErrorPolicy::DeadLetter, None | Some("")) => {
            return Err(problem(
                key("dead_letter_prefix"),
                "missing: on_error = \"dead_letter\" needs the prefix rejected messages go to",
            ));
        }
        (ErrorPolicy::DeadLetter, Some(p)) if p == c.prefix => {
            return Err(problem(
                key("dead_letter_prefix"),
                "must differ from prefix, so dead letters are not taken for data",
            ));
        }
        (ErrorPolicy::DeadLetter, Some(_)) | (_, None) => {}
        (_, Some(_)) => {
            return Err(problem(
                key("dead_letter_prefix"),
                "is set but on_error is not \"dead_letter\"",
            ));
        }
    }
    let region = c.region.clone().unwrap_or_else(|| "us-east-1".to_owned());
    let endpoint = c
        .endpoint(&region)
        .map_err(|e| problem(key("endpoint"), e))?;
    endpoint
        .check_bucket(&c.bucket)
        .map_err(|e| problem(key("bucket"), e.to_string()))?;
    if let Some(ca) = &c.tls_ca
        && !ca.is_file()
    {
        return Err(problem(
            key("tls_ca"),
            format!("{} is not a readable file", ca.display()),
        ));
    }
    // Static keys: both or neither (neither: the AWS credential chain, unless
    // `credentials = "static"`); an empty one (AWS_ACCESS_KEY_ID="") would only fail at the
    // first signed request.
    let static_only = c.credentials == super::CredentialSource::Static;
    let chain_hint = if static_only {
        ""
    } else {
        " (or set neither, for the AWS credential chain)"
    };
    match (
        c.access_key_id.as_deref().map(str::trim),
        &c.secret_access_key,
    ) {
        (None, None) if static_only => {
            return Err(problem(
                key("access_key_id"),
                "missing: set access_key_id and secret_access_key, or AWS_ACCESS_KEY_ID and \
                 AWS_SECRET_ACCESS_KEY (credentials = \"static\")",
            ));
        }
        (None, None) => {}
        (Some(""), _) => {
            return Err(problem(
                key("access_key_id"),
                "empty (from the file or AWS_ACCESS_KEY_ID): give the access key id",
            ));
        }
        (_, Some(s)) if s.expose().is_empty() => {
            return Err(problem(
                key("secret_access_key"),
                "empty (from the file or AWS_SECRET_ACCESS_KEY): give the secret access key",
            ));
        }
        (None, Some(_)) => {
            return Err(problem(
                key("access_key_id"),
                format!(
                    "missing, though secret_access_key is set: set access_key_id or \
                     AWS_ACCESS_KEY_ID{chain_hint}"
                ),
            ));
        }
        (Some(_), None) => {
            return Err(problem(
                key("secret_access_key"),
                format!("missing: set it or AWS_SECRET_ACCESS_KEY{chain_hint}"),
            ));
        }
        (Some(_), Some(_)) => {}
    }
    let uses_chain = match c.credentials {
        super::CredentialSource::Chain => true,
        super::CredentialSource::Auto => c.access_key_id.is_none(),
        super::CredentialSource::Static => false,
    };
    if uses_chain {
        chain_built(c.credentials, crate::credentials::BUILT, &key)?;
    }
    if c.key.needs_last_offset() && c.max_object_size.0 > c.part_size.0 {
        return Err(problem(
            key("key"),
            "{last_offset} is only known when an object is closed, so such objects are sent whole: set max_object_size to at most part_size",
        ));
    }
    c.format_options()
        .level_in_use()
        .map_err(|e| problem(key("compression_level"), e))?;
    if c.part_size.0 < 5 << 20 || c.part_size.0 > 5 << 30 {
        return Err(problem(
            key("part_size"),
            "must be 5 MiB to 5 GiB (S3's limits)",
        ));
    }
    if c.parts_in_flight == 0 || c.parts_in_flight > 64 {
        return Err(problem(key("parts_in_flight"), "must be 1 to 64"));
    }
    if c.max_object_size.0 == 0 {
        return Err(problem(key("max_object_size"), "must be more than 0 bytes"));
    }
    if c.max_open_objects == 0 || c.max_open_objects > 4096 {
        return Err(problem(key("max_open_objects"), "must be 1 to 4096"));
    }
    if c.max_split_lag == 0 {
        return Err(problem(key("max_split_lag"), "must be at least 1 message"));
    }
    if c.request_timeout.0 < std::time::Duration::from_millis(100) {
        return Err(problem(key("request_timeout"), "must be at least 100ms"));
    }
    if c.request_attempts == 0 || c.request_attempts > 100 {
        return Err(problem(key("request_attempts"), "must be 1 to 100"));
    }
    if c.retry_min.0.is_zero() || c.retry_min > c.retry_max {
        return Err(problem(
            key("retry_min"),
            "must be more than 0 and at most s3.retry_max",
        ));
    }
    if c.profile.is_some() && c.credentials == super::CredentialSource::Static {
        return Err(problem(
            key("profile"),
            "is for the credential chain: not with credentials = \"static\"",
        ));
    }
    if c.sse_kms_key_id.is_some() && c.sse != Some(super::SseKind::Kms) {
        return Err(problem(key("sse_kms_key_id"), "is only for sse = \"kms\""));
    }
    for (k, set) in [
        ("sse_customer_key_file", c.sse_customer_key_file.is_some()),
        ("sse_customer_key_env", c.sse_customer_key_env.is_some()),
    ] {
        if set && c.sse != Some(super::SseKind::Customer) {
            return Err(problem(key(k), "is only for sse = \"customer\""));
        }
    }
    for name in c.user_metadata.keys() {
        let token = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !token {
            return Err(problem(
                key(&format!("user_metadata.{name}")),
                "a metadata name is letters, digits and - _ . (an HTTP token)",
            ));
        }
        if super::s3::OWN_METADATA
            .iter()
            .any(|own| own.eq_ignore_ascii_case(name))
        {
            return Err(problem(
                key(&format!("user_metadata.{name}")),
                format!(
                    "the sink sets {name:?} itself (with {}); choose another name",
                    super::s3::OWN_METADATA.join(", ")
                ),
            ));
        }
    }
    if c.tags.len() > spillway_s3::options::MAX_TAGS {
        return Err(problem(
            key("tags"),
            format!(
                "{} tags: S3 takes at most {}",
                c.tags.len(),
                spillway_s3::options::MAX_TAGS
            ),
        ));
    }
    for name in c.tags.keys() {
        let chars = name.chars().count();
        if chars == 0 || chars > spillway_s3::options::MAX_TAG_KEY_CHARS {
            return Err(problem(
                key(&format!("tags.{name}")),
                format!(
                    "a tag key is 1 to {} characters",
                    spillway_s3::options::MAX_TAG_KEY_CHARS
                ),
            ));
        }
    }
    if c.length_prefix && c.format != super::Format::Raw {
        return Err(problem(
            key("length_prefix"),
            "is only for format = \"raw\"",
        ));
    }
    parquet(c, &key)
}

/// An S3 sink that would use the AWS credential chain (no static keys, or `credentials =
/// "chain"`) in a build without the `aws-chain` feature (`built`) is refused, naming the keys to
/// set and the build that has the chain.
fn chain_built(
    source: super::CredentialSource,
    built: bool,
    key: &dyn Fn(&str) -> String,
) -> Result<(), Problem> {
    if built {
        return Ok(());
    }
    let k = if source == super::CredentialSource::Chain {
        "credentials"
    } else {
        "access_key_id"
    };
    Err(problem(key(k), crate::credentials::NOT_BUILT))
}

/// `format = "parquet"` in a build without the `parquet` feature (`built`) is refused, naming
/// the build that has it.
fn parquet_built(
    format: super::Format,
    built: bool,
    key: &dyn Fn(&str) -> String,
) -> Result<(), Problem> {
    if format == super::Format::Parquet && !built {
        return Err(problem(
            key("format"),
            "this spillway was built without Parquet (the README's first run builds it so, to build faster): build it with `cargo build --release -p spillway`, which has it",
        ));
    }
    Ok(())
}

/// `[sink.s3.parquet]`, and what `format = "parquet"` rules out.
fn parquet(c: &super::S3SinkConfig, key: &dyn Fn(&str) -> String) -> Result<(), Problem> {
    let pq = &c.parquet;
    parquet_built(c.format, cfg!(feature = "parquet"), key)?;
    if c.format != super::Format::Parquet {
        if *pq != super::ParquetConfig::default() {
            return Err(problem(key("parquet"), "is only for format = \"parquet\""));
        }
        return Ok(());
    }
    if c.compression != super::Compression::None {
        return Err(problem(
            key("compression"),
            "a Parquet object compresses its pages: set s3.parquet.compression (zstd, snappy, none) and leave s3.compression out",
        ));
    }
    match (pq.compression, pq.compression_level) {
        (super::ParquetCompression::Zstd, Some(l)) if !(1..=22).contains(&l) => {
            return Err(problem(
                key("parquet.compression_level"),
                format!("{l} is out of range for zstd: use 1 to 22"),
            ));
        }
        (super::ParquetCompression::Zstd, _) | (_, None) => {}
        (_, Some(_)) => {
            return Err(problem(
                key("parquet.compression_level"),
                "is only for parquet.compression = \"zstd\"",
            ));
        }
    }
    if pq.row_group_size.0 == 0 || pq.row_group_size.0 > 1 << 30 {
        return Err(problem(
            key("parquet.row_group_size"),
            "must be more than 0 bytes and at most 1 GiB",
        ));
    }
    if pq.row_group_rows == 0 {
        return Err(problem(key("parquet.row_group_rows"), "must be at least 1"));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, col) in pq.columns.iter().enumerate() {
        let at = key(&format!("parquet.columns[{i}]"));
        if col.name.is_empty() {
            return Err(problem(at, "name is empty"));
        }
        if super::PARQUET_OWN_COLUMNS.contains(&col.name.as_str()) {
            return Err(problem(
                at,
                format!(
                    "the name {:?} is one of the sink's own columns ({}); choose another",
                    col.name,
                    super::PARQUET_OWN_COLUMNS.join(", ")
                ),
            ));
        }
        if !seen.insert(col.name.as_str()) {
            return Err(problem(at, format!("a second column named {:?}", col.name)));
        }
        if !col.pointer.is_empty() && !col.pointer.starts_with('/') {
            return Err(problem(
                at,
                format!(
                    "pointer {:?} is not a JSON pointer: it starts with / (\"/user/id\"), or is \"\" for the whole payload",
                    col.pointer
                ),
            ));
        }
    }
    if pq.payload == super::ParquetPayload::None && pq.columns.is_empty() && !c.metadata {
        return Err(problem(
            key("parquet.payload"),
            "\"none\" with no typed columns and metadata = false leaves no column to write",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod built_tests {
    use super::*;

    #[test]
    fn parquet_in_a_build_without_it_names_the_key_and_the_build_that_has_it() {
        let key = |k: &str| format!("sink[0].s3.{k}");
        let (k, message) = match parquet_built(super::super::Format::Parquet, false, &key) {
            Err(p) => p,
            Ok(()) => panic!("refused"),
        };
        assert_eq!(k, "sink[0].s3.format");
        assert!(
            message.contains("cargo build --release -p spillway"),
            "{message}"
        );
        assert!(parquet_built(super::super::Format::Parquet, true, &key).is_ok());
        assert!(parquet_built(super::super::Format::JsonLines, false, &key).is_ok());
    }

    #[test]
    fn the_credential_chain_in_a_build_without_it_names_the_keys_to_set() {
        use super::super::CredentialSource;
        let key = |k: &str| format!("sink[0].s3.{k}");
        for (source, expected) in [
            (CredentialSource::Auto, "sink[0].s3.access_key_id"),
            (CredentialSource::Chain, "sink[0].s3.credentials"),
        ] {
            let (k, message) = match chain_built(source, false, &key) {
                Err(p) => p,
                Ok(()) => panic!("refused"),
            };
            assert_eq!(k, expected);
            assert!(message.contains("secret_access_key"), "{message}");
            assert!(
                message.contains("cargo build --release -p spillway"),
                "{message}"
            );
            assert!(chain_built(source, true, &key).is_ok());
        }
    }
}
