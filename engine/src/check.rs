//! `spillway check --connect`: reach every endpoint a config names, as `spillway run` would, and
//! report every problem found by sink, not only the first.
//!
//! - Iggy (once, when a sink reads from it): connect and log in; per sink, the stream, the topic,
//!   the configured partitions and the consumer group exist.
//! - MQTT: TCP (and TLS), CONNECT with the sink's credentials under a client id of its own
//!   (`<client id>-check`, so a running engine's session is not taken over), the CONNACK read
//!   against the sink's settings (Maximum QoS, Retain Available, Receive Maximum), DISCONNECT.
//! - S3: HeadBucket with the sink's endpoint, region, credentials and TLS.
//!
//! Nothing is published, written, polled or committed.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt};
use spillway_codec::session::{Event, Session, SessionConfig, SessionError};
use spillway_codec::{Connect, Decoded, Disconnect, MqttStr, Outbound, Protocol, QoS, decode};

use crate::config::{Config, MqttSinkConfig, MqttVersion, SinkConfig, SinkType, SourceKind};
use crate::iggy::{Credentials, Endpoint, Finder, IggyClient, wire_ident};
use crate::template::name::Place;

/// What one check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The sink (`None` for the Iggy server itself).
    pub sink: Option<String>,
    /// What was checked (`iggy`, `mqtt`, `s3`).
    pub what: &'static str,
    /// `Ok(what was seen)` or `Err(the problem)`.
    pub outcome: Result<String, String>,
}

/// Every finding for `config`, in config order; a thread of its own runs the checks.
pub fn run(config: &Config) -> Vec<Finding> {
    let config = config.clone();
    let worker = std::thread::Builder::new()
        .name("spillway-check".to_owned())
        .spawn(move || {
            let mut rt = match monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
                .enable_timer()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    return vec![Finding {
                        sink: None,
                        what: "runtime",
                        outcome: Err(format!("cannot start the I/O runtime: {e}")),
                    }];
                }
            };
            rt.block_on(check_all(&config))
        });
    match worker.map(std::thread::JoinHandle::join) {
        Ok(Ok(findings)) => findings,
        _ => vec![Finding {
            sink: None,
            what: "runtime",
            outcome: Err("the check thread failed".to_owned()),
        }],
    }
}

/// The findings as lines, and whether all passed.
pub fn render(findings: &[Finding]) -> (String, bool) {
    let mut out = String::new();
    let mut ok = true;
    for f in findings {
        let who = f
            .sink
            .as_ref()
            .map_or_else(|| "iggy".to_owned(), |s| format!("sink {s:?} {}", f.what));
        match &f.outcome {
            Ok(seen) => {
                let _ = writeln!(out, "ok      {who}: {seen}");
            }
            Err(problem) => {
                ok = false;
                let _ = writeln!(out, "PROBLEM {who}: {problem}");
            }
        }
    }
    (out, ok)
}

async fn check_all(config: &Config) -> Vec<Finding> {
    let mut findings = Vec::new();
    let mut iggy = None;
    if config.sinks.iter().any(|s| s.source == SourceKind::Iggy) {
        let outcome = iggy_login(config).await;
        match outcome {
            Ok((client, finder)) => {
                let at = finder.current().unwrap_or(config.iggy.address.as_str());
                let seen = match finder.roster() {
                    Some(roster) => format!("logged in at {at}, the leader; {}", roster.describe()),
                    None => format!("logged in at {at}"),
                };
                findings.push(Finding {
                    sink: None,
                    what: "iggy",
                    outcome: Ok(seen),
                });
                iggy = Some(client);
            }
            Err(e) => findings.push(Finding {
                sink: None,
                what: "iggy",
                outcome: Err(e),
            }),
        }
    }
    for sink in &config.sinks {
        if sink.source == SourceKind::Iggy
            && let Some(client) = iggy.as_mut()
        {
            findings.push(Finding {
                sink: Some(sink.name.clone()),
                what: "iggy",
                outcome: iggy_sink(client, sink).await,
            });
        }
        let (what, outcome) = match sink.kind {
            SinkType::Mqtt => match &sink.mqtt {
                Some(m) => ("mqtt", mqtt(sink, m).await),
                None => continue,
            },
            SinkType::S3 => ("s3", s3(sink).await),
            SinkType::File | SinkType::Stdout => continue,
        };
        findings.push(Finding {
            sink: Some(sink.name.clone()),
            what,
            outcome,
        });
    }
    findings
}

pub(crate) async fn iggy_login(config: &Config) -> Result<(IggyClient, Finder), String> {
    let endpoint: Endpoint =
        crate::control::endpoint(config)?.ok_or_else(|| "no sink reads from Iggy".to_owned())?;
    let iggy = &config.iggy;
    let creds = match (&iggy.token, &iggy.username, &iggy.password) {
        (Some(t), _, _) => Credentials::Token(t.clone()),
        (None, Some(u), Some(p)) => Credentials::Password {
            username: u.clone(),
            password: p.clone(),
        },
        _ => {
            return Err("no credentials: set iggy.username and iggy.password (or \
                        SPILLWAY_IGGY_PASSWORD), or iggy.token"
                .to_owned());
        }
    };
    let mut finder = Finder::new(endpoint.addresses.clone());
    let client = finder
        .connect(&endpoint, &creds)
        .await
        .map_err(|e| format!("{}: {e}", iggy.address))?;
    Ok((client, finder))
}

async fn iggy_sink(client: &mut IggyClient, sink: &SinkConfig) -> Result<String, String> {
    let (Some(stream), Some(topic)) = (&sink.stream, &sink.topic) else {
        return Err("stream and topic are needed".to_owned());
    };
    let s = wire_ident(stream).map_err(|e| format!("stream: {e}"))?;
    let t = wire_ident(topic).map_err(|e| format!("topic: {e}"))?;
    if !client.stream_exists(&s).await.map_err(|e| e.to_string())? {
        return Err(format!("stream {stream} does not exist"));
    }
    let Some(parts) = client.topic(&s, &t).await.map_err(|e| e.to_string())? else {
        return Err(format!("topic {topic} does not exist in stream {stream}"));
    };
    let missing: Vec<u32> = sink
        .partitions
        .iter()
        .flatten()
        .copied()
        .filter(|p| !parts.iter().any(|q| q.id == *p))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "partitions {missing:?} are not in {stream}/{topic}, which has {}",
            parts.len()
        ));
    }
    if let Some(g) = &sink.consumer_group {
        let gid = iggy_binary_protocol::WireIdentifier::named(g.clone())
            .map_err(|e| format!("consumer_group: {e}"))?;
        if !client
            .group_exists(&s, &t, &gid)
            .await
            .map_err(|e| e.to_string())?
        {
            return Err(format!(
                "consumer group {g:?} does not exist on {stream}/{topic} (create it first)"
            ));
        }
    }
    Ok(format!(
        "{stream}/{topic}: {} partitions{}",
        parts.len(),
        sink.consumer_group
            .as_ref()
            .map_or_else(String::new, |g| format!(", consumer group {g:?}"))
    ))
}

async fn s3(sink: &SinkConfig) -> Result<String, String> {
    let s3 = crate::sink::s3::S3Sink::new(sink, 0, false, crate::acks::Acks::new())
        .map_err(|e| e.message)?;
    s3.probe().await.map_err(|e| e.message)
}

/// The broker, at the first of its addresses that answers (each is tried in turn, as the
/// sink does).
async fn mqtt(sink: &SinkConfig, cfg: &MqttSinkConfig) -> Result<String, String> {
    let mut problems = Vec::new();
    for address in cfg.addresses() {
        match mqtt_at(sink, cfg, address).await {
            Ok(seen) => return Ok(seen),
            Err(e) => problems.push(e),
        }
    }
    Err(problems.join("; "))
}

async fn mqtt_at(sink: &SinkConfig, cfg: &MqttSinkConfig, address: &str) -> Result<String, String> {
    let limit = cfg.connect_timeout.0;
    let tcp = spillway_net::connect_address(address, limit)
        .await
        .map_err(|e| format!("{address}: {e}"))?;
    if !cfg.tls {
        return mqtt_session(sink, cfg, address, tcp).await;
    }
    let client = match (&cfg.tls_cert, &cfg.tls_key) {
        (Some(c), Some(k)) => Some((c.as_path(), k.as_path())),
        _ => None,
    };
    let config = crate::tls::client_config(
        cfg.tls_ca.as_deref(),
        client,
        &cfg.alpn.iter().map(String::as_bytes).collect::<Vec<_>>(),
    )
    .map_err(|e| format!("mqtt TLS: {e}"))?;
    let name = crate::tls::server_name(address, cfg.tls_server_name.as_deref())
        .map_err(|e| format!("mqtt.tls_server_name: {e}"))?;
    let tls = spillway_net::tls::handshake(&config, name, tcp, limit)
        .await
        .map_err(|e| format!("{address}: TLS handshake: {e}"))?;
    mqtt_session(sink, cfg, address, tls).await
}

async fn mqtt_session<S: AsyncReadRent + AsyncWriteRent>(
    sink: &SinkConfig,
    cfg: &MqttSinkConfig,
    address: &str,
    mut stream: S,
) -> Result<String, String> {
    let protocol = match cfg.protocol {
        MqttVersion::V311 => Protocol::V311,
        MqttVersion::V5 => Protocol::V5,
    };
    let mut session: Session<()> = Session::new(SessionConfig::new(protocol, cfg.window()));
    let id = cfg.client_id.render(Place {
        sink: &sink.name,
        shard: 0,
        conn: 0,
    });
    let id = format!("{id}-check");
    let client_id = MqttStr::from_str(&id).map_err(|e| format!("mqtt.client_id: {e}"))?;
    let mut connect = Connect::new(protocol, client_id);
    connect.keep_alive = cfg.keep_alive_secs();
    if let Some(u) = &cfg.username {
        connect.username = Some(MqttStr::from_str(u).map_err(|e| format!("mqtt.username: {e}"))?);
    }
    if let Some(p) = &cfg.password {
        connect.password = Some(Bytes::copy_from_slice(p.expose().as_bytes()));
    }
    let mut out = Outbound::with_capacity(1024, 8);
    session
        .connect(&connect, &mut out, Instant::now())
        .map_err(|e| format!("CONNECT: {e}"))?;
    send(&mut stream, &mut out).await?;
    let deadline = Instant::now() + cfg.connect_timeout.0;
    let opts = session.decode_options();
    let mut buf = BytesMut::with_capacity(4096);
    loop {
        match decode(&mut buf, &opts) {
            Ok(Decoded::Packet(packet)) => match session.handle(packet, &mut out, Instant::now()) {
                Ok(Some(Event::Connected { .. })) => break,
                Ok(Some(Event::Disconnected(d))) => {
                    return Err(format!(
                        "the broker sent DISCONNECT instead of CONNACK: {} ({:#04x})",
                        d.reason.name(),
                        d.reason.0
                    ));
                }
                Ok(_) => {}
                Err(e @ SessionError::ConnectionRefused { .. }) => {
                    return Err(format!("{address}: {e}"));
                }
                Err(e) => return Err(e.to_string()),
            },
            Ok(Decoded::Incomplete { .. }) => {
                let left = deadline.saturating_duration_since(Instant::now());
                match monoio::time::timeout(
                    left.max(Duration::from_millis(1)),
                    spillway_net::io::read_more(&mut stream, &mut buf, 4096),
                )
                .await
                {
                    Err(_) => return Err("no CONNACK within mqtt.connect_timeout".to_owned()),
                    Ok(Ok(0)) => return Err("the broker closed the connection".to_owned()),
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => return Err(format!("waiting for CONNACK: {e}")),
                }
            }
            Err(e) => return Err(format!("malformed packet from the broker: {e}")),
        }
    }
    let maximum_qos = session.broker_maximum_qos();
    let retain = session.broker_retain_available();
    let window = session.window_limit();
    let _ = session.disconnect(Disconnect::default(), &mut out, Instant::now());
    let _ = send(&mut stream, &mut out).await;
    let mut problems = Vec::new();
    if cfg.qos_header.is_none() && cfg.qos > maximum_qos as u8 {
        problems.push(format!(
            "CONNACK Maximum QoS is {}, below sink.mqtt.qos = {}",
            maximum_qos as u8, cfg.qos
        ));
    }
    if cfg.retain && cfg.retain_header.is_none() && !retain {
        problems.push("CONNACK Retain Available is 0, but sink.mqtt.retain = true".to_owned());
    }
    if let Some(b) = &cfg.birth
        && b.retain
        && !retain
    {
        problems
            .push("CONNACK Retain Available is 0, but sink.mqtt.birth.retain = true".to_owned());
    }
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    let mut seen = format!(
        "CONNACK from {} (MQTT {}): window {window}",
        address, cfg.protocol
    );
    if window < usize::from(cfg.window()) {
        let _ = write!(
            seen,
            " (the broker's Receive Maximum, below max_inflight {})",
            cfg.window()
        );
    }
    if maximum_qos != QoS::ExactlyOnce {
        let _ = write!(seen, ", Maximum QoS {}", maximum_qos as u8);
    }
    Ok(seen)
}

async fn send<S: AsyncWriteRent>(stream: &mut S, out: &mut Outbound) -> Result<(), String> {
    out.seal();
    let mut bytes = Vec::new();
    while let Some(chunk) = out.pop_chunk() {
        bytes.extend_from_slice(&chunk);
    }
    let (r, _) = stream.write_all(bytes).await;
    r.map_err(|e| format!("writing to the broker: {e}"))?;
    stream
        .flush()
        .await
        .map_err(|e| format!("writing to the broker: {e}"))
}
