//! MQTT end to end: authentication and TLS.

use super::*;

#[test]
fn a_right_password_delivers_on_both_protocols_and_a_wrong_one_stops_the_engine() {
    const PASSWORD: &str = "s3cret-Pw";
    let broker = Mosquitto::start(MosquittoOpts::new().user("spw", PASSWORD)).unwrap();
    let iggy = iggy();
    let t = topic(&iggy, "auth", 1);
    let mut admin = iggy.admin().unwrap();
    small_batch(&mut admin, &t, "auth", 5);
    let sub = Subscriber::connect(
        broker.addr(),
        SubscriberOpts::v5("auth/#")
            .qos(1)
            .credentials("spw", PASSWORD),
    )
    .unwrap();
    let addr = broker.host_port();
    let dir = tempfile::tempdir().unwrap();

    // The 3.1.1 sink has its password in the file, the MQTT 5 one from the environment.
    let good = engine_sections(&iggy)
        + &mqtt_sink(
            "auth-v4",
            &t,
            "partitions = [0]",
            "",
            &addr,
            &format!(
                "protocol = \"3.1.1\"\ntopic = \"auth/v4\"\nusername = \"spw\"\npassword = \"{PASSWORD}\""
            ),
        )
        + &mqtt_sink(
            "auth.v5",
            &t,
            "partitions = [0]",
            "",
            &addr,
            "protocol = \"5\"\ntopic = \"auth/v5\"\nusername = \"spw\"",
        );
    let mut engine = Engine::start_with_env(
        dir.path(),
        "good",
        &good,
        &[("SPILLWAY_MQTT_PASSWORD_AUTH_V5", PASSWORD)],
    );
    wait_stored(&mut engine, &mut admin, &t, "auth-v4", 4, LONG);
    wait_stored(&mut engine, &mut admin, &t, "auth.v5", 4, LONG);
    sub.wait_for(10, SHORT).unwrap();
    stop_clean(&mut engine, SHORT * 3);
    let got = settled(&sub, Duration::from_millis(200));
    assert_payloads(&got, "auth/v4", "auth", 5);
    assert_payloads(&got, "auth/v5", "auth", 5);
    assert!(
        !engine.log().contains(PASSWORD),
        "the password must not be logged"
    );

    // A wrong password: mosquitto answers "not authorized" (3.1.1: 5, MQTT 5: 0x87); the
    // engine stops by itself with exit status 1, names the reason and stores nothing.
    let mut bad = Vec::new();
    for (name, proto) in [("bad-v4", "3.1.1"), ("bad-v5", "5")] {
        let cfg = engine_sections(&iggy)
            + &mqtt_sink(
                name,
                &t,
                "partitions = [0]",
                "",
                &addr,
                &format!(
                    "protocol = \"{proto}\"\ntopic = \"auth/{name}\"\nusername = \"spw\"\npassword = \"Wr0ng-pass\""
                ),
            );
        bad.push((name, Engine::start(dir.path(), name, &cfg)));
    }
    for (name, engine) in &mut bad {
        let code = wait_exit_code(engine, LONG);
        let log = engine.log();
        assert_eq!(code, Some(1), "{name}\n{log}");
        let lower = log.to_lowercase();
        assert!(
            lower.contains("not authori"),
            "{name}: the log names the CONNACK reason\n{log}"
        );
        // Once, as the reason the engine stops (the connection, the shard and the control
        // thread each logged it before).
        assert_eq!(
            lower.matches("not authori").count(),
            1,
            "{name}: the fatal error is logged once\n{log}"
        );
        assert!(
            !log.contains("not connected to the MQTT broker"),
            "{name}: no warning that only repeats the refusal\n{log}"
        );
        if *name == "bad-v5" {
            assert!(
                lower.contains("0x87") || lower.contains("135"),
                "{name}: the log names the MQTT 5 reason code\n{log}"
            );
        }
        assert!(
            !log.contains("Wr0ng-pass"),
            "{name}: the password must not be logged"
        );
        assert_eq!(stored(&mut admin, &t, name, 0), None, "{name}");
    }
    assert!(
        settled(&sub, Duration::ZERO)
            .iter()
            .all(|r| !r.topic.starts_with("auth/bad")),
        "nothing delivered with a wrong password"
    );
}

#[test]
fn tls_with_the_broker_ca_delivers() {
    let broker = Mosquitto::start(MosquittoOpts::new().tls()).unwrap();
    let iggy = iggy();
    let t = topic(&iggy, "tls", 1);
    let mut admin = iggy.admin().unwrap();
    small_batch(&mut admin, &t, "tls", 20);
    let sub = Subscriber::connect(
        broker.addr(),
        SubscriberOpts::v5("tls/#")
            .qos(2)
            .tls(broker.client_tls().unwrap()),
    )
    .unwrap();
    let cfg = engine_sections(&iggy)
        + &mqtt_sink(
            "tls-ca",
            &t,
            "partitions = [0]",
            "",
            &broker.host_port(),
            &format!(
                "protocol = \"5\"\nqos = 2\ntopic = \"tls/ca\"\ntls = true\ntls_ca = \"{}\"\ntls_server_name = \"localhost\"",
                broker.ca_path().unwrap().display()
            ),
        );
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::start(dir.path(), "tls-ca", &cfg);
    wait_stored(&mut engine, &mut admin, &t, "tls-ca", 19, LONG);
    sub.wait_for(20, SHORT).unwrap();
    stop_clean(&mut engine, SHORT * 3);
    assert_payloads(
        &settled(&sub, Duration::from_millis(200)),
        "tls/ca",
        "tls",
        20,
    );
}

#[test]
fn mutual_tls_with_a_client_certificate_delivers_and_without_one_stops_the_engine() {
    let broker = Mosquitto::start(MosquittoOpts::new().mutual_tls()).unwrap();
    let iggy = iggy();
    let t = topic(&iggy, "mtls", 1);
    let mut admin = iggy.admin().unwrap();
    small_batch(&mut admin, &t, "mtls", 20);
    let sub_cert = broker.issue_client_cert("subscriber").unwrap();
    let sub = Subscriber::connect(
        broker.addr(),
        SubscriberOpts::v4("mtls/#")
            .qos(1)
            .tls(broker.client_tls().unwrap().with_client_cert(sub_cert)),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = broker
        .issue_client_cert("spillway")
        .unwrap()
        .write_to(dir.path(), "engine-client")
        .unwrap();
    let ca = broker.ca_path().unwrap().display().to_string();
    let with_cert = engine_sections(&iggy)
        + &mqtt_sink(
            "mtls-cert",
            &t,
            "partitions = [0]",
            "",
            &broker.host_port(),
            &format!(
                "protocol = \"3.1.1\"\nqos = 1\ntopic = \"mtls/cert\"\ntls = true\ntls_ca = \"{ca}\"\ntls_server_name = \"localhost\"\ntls_cert = \"{}\"\ntls_key = \"{}\"",
                cert.display(),
                key.display()
            ),
        );
    let mut engine = Engine::start(dir.path(), "mtls-cert", &with_cert);
    wait_stored(&mut engine, &mut admin, &t, "mtls-cert", 19, LONG);
    sub.wait_for(20, SHORT).unwrap();
    stop_clean(&mut engine, SHORT * 3);
    assert_payloads(
        &settled(&sub, Duration::from_millis(200)),
        "mtls/cert",
        "mtls",
        20,
    );

    // Without a client certificate the broker refuses the handshake (TLS 1.3: the alert comes
    // after the client's Finished, on the first read): the engine stops with a clear error.
    let no_cert = engine_sections(&iggy)
        + &mqtt_sink(
            "mtls-none",
            &t,
            "partitions = [0]",
            "",
            &broker.host_port(),
            &format!(
                "protocol = \"5\"\nqos = 1\ntopic = \"mtls/none\"\ntls = true\ntls_ca = \"{ca}\"\ntls_server_name = \"localhost\""
            ),
        );
    let mut engine = Engine::start(dir.path(), "mtls-none", &no_cert);
    let code = wait_exit_code(&mut engine, Duration::from_secs(30));
    let log = engine.log();
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.to_lowercase().contains("certificate"),
        "the log names the missing client certificate\n{log}"
    );
    assert_eq!(stored(&mut admin, &t, "mtls-none", 0), None);
}
