//! MQTT end to end: MQTT 5 properties.

use super::*;

const BIG_ID: u128 = 0x0123_4567_89ab_cdef_0011_2233_4455_6677;

/// Three messages with the per-message property headers, four sinks reading them: MQTT 5 with
/// the properties envelope and every per-message header; MQTT 5 with the JSON envelope and no
/// headers as properties; MQTT 3.1.1 with the JSON envelope and base64 payloads; MQTT 5
/// without envelope, routed by `{offset}` and `{id}`.
#[test]
fn mqtt5_properties_from_headers_and_both_envelopes_arrive_as_specified() {
    let broker = Mosquitto::start_default().unwrap();
    let iggy = iggy();
    let t = topic(&iggy, "props", 1);
    let mut admin = iggy.admin().unwrap();
    let m0_payload = br#"{"meta":{"site":"north"},"v":1}"#.to_vec();
    let m1_payload = "plain text \u{e9}".as_bytes().to_vec();
    let m2_payload = vec![0xffu8, 0x00, 0x01];
    let messages = vec![
        TestMessage::new(BIG_ID, m0_payload.clone())
            .with_header("ct", "application/json")
            .with_header("pfi", "1")
            .with_header("exp", "3600")
            .with_header("rt", "reply/to/me")
            .with_header("cd", "corr-0")
            .with_header("mqtt_qos", "2")
            .with_header("mqtt_retain", "true")
            .with_header("user-k", "v0"),
        TestMessage::new(2, m1_payload.clone())
            .with_header("mqtt_qos", "0")
            .with_header("user-k", "v1"),
        TestMessage::new(3, m2_payload.clone())
            .with_header("pfi", "0")
            .with_header("user-k", "v2"),
    ];
    send_all(&mut admin, &t, 0, &messages);
    let stored_msgs = polled(&mut admin, &t, 0, 10);
    assert_eq!(stored_msgs.len(), 3);

    let sub = Subscriber::connect(broker.addr(), SubscriberOpts::v5("props/#").qos(2)).unwrap();
    let addr = broker.host_port();
    let config = engine_sections(&iggy)
        + &mqtt_sink(
            "props-a",
            &t,
            "partitions = [0]",
            "",
            &addr,
            r#"protocol = "5"
qos = 1
topic = "props/a"
envelope = "properties"
headers_as_properties = true
qos_header = "mqtt_qos"
retain_header = "mqtt_retain"
content_type_header = "ct"
payload_format_header = "pfi"
message_expiry_header = "exp"
response_topic_header = "rt"
correlation_data_header = "cd""#,
        )
        + &mqtt_sink(
            "props-b",
            &t,
            "partitions = [0]",
            "",
            &addr,
            "protocol = \"5\"\nqos = 1\ntopic = \"props/b\"\nenvelope = \"json\"\nheaders_as_properties = false",
        )
        + &mqtt_sink(
            "props-c",
            &t,
            "partitions = [0]",
            "",
            &addr,
            "protocol = \"3.1.1\"\nqos = 2\ntopic = \"props/c\"\nenvelope = \"json\"\npayload = \"base64\"",
        )
        + &mqtt_sink(
            "props-d",
            &t,
            "partitions = [0]",
            "",
            &addr,
            "protocol = \"5\"\nqos = 1\ntopic = \"props/d/{offset}/{id}\"\nheaders_as_properties = true",
        );
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::start(dir.path(), "props", &config);
    for sink in ["props-a", "props-b", "props-c", "props-d"] {
        wait_stored(&mut engine, &mut admin, &t, sink, 2, LONG);
    }
    sub.wait_for(12, SHORT)
        .unwrap_or_else(|e| panic!("{e}\n{}", engine.log()));
    stop_clean(&mut engine, SHORT * 3);
    let got = settled(&sub, Duration::from_millis(300));
    assert_eq!(got.len(), 12, "{got:?}");
    let on = |prefix: &str| -> Vec<Received> {
        got.iter()
            .filter(|r| r.topic.starts_with(prefix))
            .cloned()
            .collect()
    };

    // A: the properties envelope and the per-message properties. Its messages have different
    // QoS, and MQTT orders deliveries only within one QoS (mosquitto forwards a QoS 2 message
    // on PUBREL): sort them by offset.
    let mut a = on("props/a");
    assert_eq!(a.len(), 3);
    a.sort_by_key(|r| {
        r.user_property("iggy-offset")
            .and_then(|o| o.parse::<u64>().ok())
            .unwrap_or(u64::MAX)
    });
    assert_eq!(
        a.iter().map(|r| r.payload.to_vec()).collect::<Vec<_>>(),
        vec![m0_payload.clone(), m1_payload.clone(), m2_payload.clone()],
        "payloads unchanged, in order"
    );
    for (r, m) in a.iter().zip(&stored_msgs) {
        let props = r.properties.as_ref().unwrap();
        for (key, value) in [
            ("iggy-stream", t.stream.clone()),
            ("iggy-topic", t.topic.clone()),
            ("iggy-partition", "0".to_owned()),
            ("iggy-offset", m.offset.to_string()),
            ("iggy-id", m.id.to_string()),
            ("iggy-timestamp", m.timestamp.to_string()),
            ("iggy-origin-timestamp", m.origin_timestamp.to_string()),
        ] {
            assert_eq!(
                props.user_property(key),
                Some(value.as_str()),
                "{key} on offset {}: {props:?}",
                m.offset
            );
        }
        assert_eq!(
            props.user_property("user-k"),
            Some(format!("v{}", m.offset).as_str()),
            "Iggy headers as user properties: {props:?}"
        );
    }
    assert_eq!(
        a[0].user_property("iggy-id"),
        Some(BIG_ID.to_string().as_str()),
        "a u128 id in decimal"
    );
    let p0 = a[0].properties.as_ref().unwrap();
    assert_eq!(a[0].qos, 2, "QoS from the qos header");
    assert_eq!(p0.content_type.as_deref(), Some("application/json"));
    assert_eq!(p0.payload_format_indicator, Some(1));
    let expiry = p0.message_expiry_interval.unwrap_or(0);
    assert!(
        (3590..=3600).contains(&expiry),
        "message expiry from the header (the broker sends what remains): {expiry}"
    );
    assert_eq!(p0.response_topic.as_deref(), Some("reply/to/me"));
    assert_eq!(p0.correlation_data.as_deref(), Some(&b"corr-0"[..]));
    let p1 = a[1].properties.as_ref().unwrap();
    assert_eq!(a[1].qos, 0, "QoS 0 from the qos header");
    assert_eq!(
        (
            &p1.content_type,
            p1.payload_format_indicator,
            p1.message_expiry_interval,
            &p1.response_topic,
            &p1.correlation_data
        ),
        (&None, None, None, &None, &None),
        "no property without its header"
    );
    assert_eq!(a[2].qos, 1, "the default QoS");
    assert_eq!(
        a[2].properties.as_ref().unwrap().payload_format_indicator,
        Some(0)
    );

    // B: the JSON envelope over MQTT 5, no headers as properties.
    let b = on("props/b");
    assert_eq!(b.len(), 3);
    for (r, m) in b.iter().zip(&stored_msgs) {
        let v = json(r);
        let meta = &v["metadata"];
        assert_eq!(meta["stream"], t.stream.as_str(), "{v}");
        assert_eq!(meta["topic"], t.topic.as_str(), "{v}");
        assert_eq!(meta["partition"], 0, "{v}");
        assert_eq!(meta["offset"], m.offset, "{v}");
        assert_eq!(meta["id"], m.id.to_string().as_str(), "{v}");
        assert_eq!(meta["timestamp"], m.timestamp, "{v}");
        assert_eq!(meta["origin_timestamp"], m.origin_timestamp, "{v}");
        assert_eq!(
            v["headers"]["user-k"],
            format!("v{}", m.offset).as_str(),
            "{v}"
        );
        let props = r.properties.as_ref().unwrap();
        assert!(
            props.user_properties.is_empty(),
            "headers_as_properties = false and no properties envelope: {props:?}"
        );
    }
    let v0 = json(&b[0]);
    assert_eq!(v0["payload"]["meta"]["site"], "north", "JSON is embedded");
    assert_eq!(v0["headers"]["ct"], "application/json");
    assert_eq!(v0["headers"]["mqtt_qos"], "2");
    assert_eq!(json(&b[1])["payload"], "plain text \u{e9}", "UTF-8 as text");
    assert_eq!(
        json(&b[2])["payload_base64"],
        "/wAB",
        "other bytes as base64"
    );
    assert!(json(&b[2]).get("payload").is_none());

    // C: the JSON envelope over 3.1.1 with payload = "base64".
    let c = on("props/c");
    assert_eq!(c.len(), 3);
    for ((r, m), raw) in c
        .iter()
        .zip(&stored_msgs)
        .zip([&m0_payload, &m1_payload, &m2_payload])
    {
        let v = json(r);
        assert_eq!(v["metadata"]["offset"], m.offset, "{v}");
        assert_eq!(
            v["payload_base64"],
            base64::engine::general_purpose::STANDARD
                .encode(raw)
                .as_str(),
            "{v}"
        );
        assert_eq!(r.qos, 2);
        assert!(
            r.properties
                .as_ref()
                .is_some_and(|p| p.user_properties.is_empty()),
            "a 3.1.1 publish has no properties: {r:?}"
        );
    }

    // D: no envelope, headers as user properties only, routed by {offset}/{id}.
    let d = on("props/d/");
    assert_eq!(
        d.iter().map(|r| r.topic.as_str()).collect::<Vec<_>>(),
        vec![
            format!("props/d/0/{BIG_ID}").as_str(),
            "props/d/1/2",
            "props/d/2/3"
        ]
    );
    for (r, m) in d.iter().zip(&messages) {
        assert_eq!(r.payload, m.payload, "unchanged payload");
        let props = r.properties.as_ref().unwrap();
        for (k, v) in &m.headers {
            assert!(
                props.user_properties.contains(&(k.clone(), v.clone())),
                "header {k}={v} as a user property: {props:?}"
            );
        }
        assert!(
            !props
                .user_properties
                .iter()
                .any(|(k, _)| k.starts_with("iggy-")),
            "no metadata properties without the properties envelope: {props:?}"
        );
    }

    // Retain from the header: only message 0 of sink A asked for it.
    let late = Subscriber::connect(broker.addr(), SubscriberOpts::v5("props/#").qos(2)).unwrap();
    late.wait_for(1, SHORT).unwrap();
    let retained = settled(&late, Duration::from_millis(300));
    assert_eq!(retained.len(), 1, "{retained:?}");
    assert_eq!(retained[0].topic, "props/a");
    assert_eq!(retained[0].payload.as_ref(), &m0_payload[..]);
    assert!(retained[0].retain);
    assert_eq!(
        retained[0]
            .properties
            .as_ref()
            .and_then(|p| p.content_type.as_deref()),
        Some("application/json"),
        "the retained message keeps its properties"
    );
}
