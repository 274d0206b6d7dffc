//! Checks that need more than a type: required keys per source, value ranges, references.
//! Core ids are checked against the machine by [`crate::coremap::resolve`].

mod mqtt;
mod s3;

use std::collections::HashSet;
use std::net::SocketAddr;

use super::{Config, Envelope, ErrorPolicy, MqttVersion, SinkConfig, SinkType, SourceKind};
use crate::template::Name;
use crate::template::name::Place;
use crate::template::topic::topic_name;

use self::mqtt::validate_mqtt;
use self::s3::validate_s3;

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

#[cfg(test)]
mod built_tests {
    use super::s3::{chain_built, parquet_built};

    #[test]
    fn parquet_in_a_build_without_it_names_the_key_and_the_build_that_has_it() {
        let key = |k: &str| format!("sink[0].s3.{k}");
        let (k, message) = match parquet_built(crate::config::Format::Parquet, false, &key) {
            Err(p) => p,
            Ok(()) => panic!("refused"),
        };
        assert_eq!(k, "sink[0].s3.format");
        assert!(
            message.contains("cargo build --release -p spillway"),
            "{message}"
        );
        assert!(parquet_built(crate::config::Format::Parquet, true, &key).is_ok());
        assert!(parquet_built(crate::config::Format::JsonLines, false, &key).is_ok());
    }

    #[test]
    fn the_credential_chain_in_a_build_without_it_names_the_keys_to_set() {
        use crate::config::CredentialSource;
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
