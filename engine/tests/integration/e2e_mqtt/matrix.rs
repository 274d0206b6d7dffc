//! MQTT end to end: the matrix.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Routing {
    Static,
    Template,
    Dynamic,
}

#[derive(Debug, Clone, Copy)]
struct Combo {
    version: MqttVersion,
    qos: u8,
    routing: Routing,
    retain: bool,
}

impl Combo {
    fn name(&self) -> String {
        format!(
            "{}-q{}-{}{}",
            match self.version {
                MqttVersion::V4 => "v311",
                MqttVersion::V5 => "v5",
            },
            self.qos,
            match self.routing {
                Routing::Static => "static",
                Routing::Template => "tpl",
                Routing::Dynamic => "dyn",
            },
            if self.retain { "-r" } else { "" }
        )
    }
}

const MATRIX_PER_PARTITION: u64 = 10;

/// The header `kind` of message `n`.
fn kind_of(n: u64) -> &'static str {
    ["alpha", "beta", "gamma"][(n % 3) as usize]
}

/// The topic message `n` of partition `p` must reach in combination `c`.
fn matrix_topic(c: &Combo, t: &Topic, p: u32, n: u64) -> String {
    let root = format!("mx/{}", c.name());
    match c.routing {
        Routing::Static => format!("{root}/static"),
        Routing::Template => format!(
            "{root}/{}/{}/{p}/{}/d{}/s{}",
            t.stream,
            t.topic,
            kind_of(n),
            n % 2,
            n % 4
        ),
        Routing::Dynamic if n == 4 => format!("{root}/fallback"),
        Routing::Dynamic => format!("{root}/dyn/k{}", n % 3),
    }
}

fn matrix_payload(p: u32, n: u64) -> String {
    format!(
        "{{\"dev\":\"d{}\",\"meta\":{{\"site\":\"s{}\"}},\"p\":{p},\"n\":{n}}}",
        n % 2,
        n % 4
    )
}

fn run_combo(broker: &Mosquitto, iggy: &IggyServer, c: Combo) {
    let name = c.name();
    let t = topic(iggy, &format!("mx-{name}"), 2);
    let mut admin = iggy.admin().unwrap();
    for p in 0..2u32 {
        let batch: Vec<TestMessage> = (0..MATRIX_PER_PARTITION)
            .map(|n| {
                let mut m = TestMessage::new(
                    u128::from(p) * 1000 + u128::from(n) + 1,
                    matrix_payload(p, n).into_bytes(),
                )
                .with_header("kind", kind_of(n));
                if c.routing == Routing::Dynamic && n != 4 {
                    m = m.with_header("mqtt_topic", &format!("mx/{name}/dyn/k{}", n % 3));
                }
                m
            })
            .collect();
        send_all(&mut admin, &t, p, &batch);
    }
    let filter = format!("mx/{name}/#");
    let sub = Subscriber::connect(
        broker.addr(),
        SubscriberOpts::new(c.version, filter.clone()).qos(2),
    )
    .unwrap();

    let routing = match c.routing {
        Routing::Static => format!("topic = \"mx/{name}/static\""),
        Routing::Template => format!(
            "topic = \"mx/{name}/{{stream}}/{{topic}}/{{partition}}/{{header.kind}}/{{json./dev}}/{{json.meta.site}}\""
        ),
        Routing::Dynamic => {
            format!("topic_header = \"mqtt_topic\"\ntopic = \"mx/{name}/fallback\"")
        }
    };
    let sink = format!("mx-{name}");
    let config = engine_sections(iggy)
        + &mqtt_sink(
            &sink,
            &t,
            "partitions = [0, 1]",
            "",
            &broker.host_port(),
            &format!(
                "protocol = \"{}\"\nqos = {}\nretain = {}\n{routing}",
                protocol(c.version),
                c.qos,
                c.retain
            ),
        );
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::start(dir.path(), &sink, &config);
    let last = MATRIX_PER_PARTITION - 1;
    wait_stored(&mut engine, &mut admin, &t, &sink, last, LONG);
    let total = (2 * MATRIX_PER_PARTITION) as usize;
    sub.wait_for(total, SHORT)
        .unwrap_or_else(|e| panic!("{name}: {e}\n{}", engine.log()));
    stop_clean(&mut engine, SHORT * 3);

    let got = settled(&sub, Duration::from_millis(300));
    assert_eq!(
        got.len(),
        total,
        "{name}: every message exactly once: {got:?}"
    );
    let mut order: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for r in &got {
        let v = json(r);
        let (p, n) = (v["p"].as_u64().unwrap() as u32, v["n"].as_u64().unwrap());
        assert_eq!(
            text(r),
            matrix_payload(p, n),
            "{name}: the payload is unchanged"
        );
        assert_eq!(
            r.topic,
            matrix_topic(&c, &t, p, n),
            "{name}: topic of p{p} n{n}"
        );
        assert_eq!(r.qos, c.qos, "{name}: QoS of p{p} n{n}");
        assert!(!r.retain, "{name}: live deliveries carry RETAIN 0");
        assert!(!r.dup, "{name}: no re-sends without a reconnect");
        if c.version == MqttVersion::V5 {
            assert_eq!(
                r.user_property("kind"),
                Some(kind_of(n)),
                "{name}: Iggy headers travel as user properties"
            );
        }
        order.entry(p).or_default().push(n);
    }
    for (p, ns) in &order {
        assert_eq!(
            ns,
            &(0..MATRIX_PER_PARTITION).collect::<Vec<u64>>(),
            "{name}: partition {p} in offset order"
        );
    }

    // Retained messages: a later subscriber gets the last message of each topic, RETAIN 1.
    let mut last_per_topic: BTreeMap<String, String> = BTreeMap::new();
    for r in &got {
        last_per_topic.insert(r.topic.clone(), text(r));
    }
    let late =
        Subscriber::connect(broker.addr(), SubscriberOpts::new(c.version, filter).qos(2)).unwrap();
    if c.retain {
        late.wait_for(last_per_topic.len(), SHORT)
            .unwrap_or_else(|e| panic!("{name}: retained messages: {e}"));
    }
    let retained = settled(&late, Duration::from_millis(300));
    if c.retain {
        let seen: BTreeMap<String, String> = retained
            .iter()
            .map(|r| (r.topic.clone(), text(r)))
            .collect();
        assert_eq!(retained.len(), last_per_topic.len(), "{name}: {retained:?}");
        assert_eq!(
            seen, last_per_topic,
            "{name}: one retained message per topic, the last one"
        );
        for r in &retained {
            assert!(r.retain, "{name}: a retained message carries RETAIN 1");
            assert_eq!(r.qos, c.qos, "{name}: retained QoS");
        }
    } else {
        assert!(
            retained.is_empty(),
            "{name}: retain = false stores nothing: {retained:?}"
        );
    }
}

/// Every protocol x QoS x routing (static, template, dynamic with a fallback), some with
/// retain: the subscriber records exactly the expected topics, payloads, QoS and flags, in
/// offset order per partition. One broker, one Iggy; one engine per combination, a few at a
/// time.
#[test]
fn matrix_protocol_qos_routing_delivers_exact_topics_payloads_qos_and_retain() {
    const WORKERS: usize = 3;
    let broker = Mosquitto::start_default().unwrap();
    let iggy = iggy();
    let mut combos = Vec::new();
    for version in [MqttVersion::V4, MqttVersion::V5] {
        for qos in 0..=2u8 {
            for (i, routing) in [Routing::Static, Routing::Template, Routing::Dynamic]
                .into_iter()
                .enumerate()
            {
                combos.push(Combo {
                    version,
                    qos,
                    routing,
                    retain: (usize::from(qos) + i) % 2 == 1,
                });
            }
        }
    }
    assert_eq!(combos.len(), 18);
    let queue = Mutex::new(combos);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..WORKERS {
            s.spawn(|| {
                loop {
                    let Some(c) = queue.lock().unwrap().pop() else {
                        return;
                    };
                    if let Err(panic) =
                        catch_unwind(AssertUnwindSafe(|| run_combo(&broker, &iggy, c)))
                    {
                        let msg = panic
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                            .unwrap_or_default();
                        failures
                            .lock()
                            .unwrap()
                            .push(format!("{}: {}", c.name(), tail(&msg, 40)));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of 18 combinations failed:\n{}",
        failures.len(),
        failures.join("\n----\n")
    );
}
