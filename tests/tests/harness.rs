//! Tests of the harness itself, against the real servers (mosquitto, s3s-fs): each test checks
//! that a harness feature does what it says, and would fail without it.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use spillway_tests::ports::accepts_tcp;
use spillway_tests::{
    ClientTls, HarnessError, Mosquitto, MosquittoOpts, MqttVersion, S3Server, ServerProcess,
    Subscriber, SubscriberOpts, TestCa,
};

const WAIT: Duration = Duration::from_secs(5);

fn publish(broker: &Mosquitto, args: &[&str]) {
    broker
        .publish_cli(args)
        .unwrap_or_else(|e| panic!("mosquitto_pub {args:?} failed: {e}"));
}

// ---------------------------------------------------------------- mosquitto, plain

#[test]
fn plain_broker_delivers_qos_0_1_2_to_v4_subscriber() {
    let broker = Mosquitto::start(MosquittoOpts::new()).expect("start mosquitto");
    let sub =
        Subscriber::connect(broker.addr(), SubscriberOpts::v4("t/#").qos(2)).expect("subscribe");
    assert_eq!(sub.suback_codes(), &[2]);

    publish(&broker, &["-t", "t/zero", "-m", "m0", "-q", "0"]);
    publish(&broker, &["-t", "t/one", "-m", "m1", "-q", "1"]);
    publish(&broker, &["-t", "t/two", "-m", "m2", "-q", "2"]);

    let got = sub.wait_for(3, WAIT).expect("three messages");
    assert_eq!(got.len(), 3, "{got:?}");
    let seen: Vec<(&str, &[u8], u8)> = got
        .iter()
        .map(|m| (m.topic.as_str(), m.payload.as_ref(), m.qos))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("t/zero", &b"m0"[..], 0),
            ("t/one", &b"m1"[..], 1),
            ("t/two", &b"m2"[..], 2)
        ]
    );
    assert!(
        got.iter()
            .all(|m| !m.retain && !m.dup && m.properties.is_none())
    );
}

#[test]
fn subscription_qos_caps_delivery_qos() {
    let broker = Mosquitto::start(MosquittoOpts::new()).expect("start mosquitto");
    let sub =
        Subscriber::connect(broker.addr(), SubscriberOpts::v4("cap/#").qos(1)).expect("subscribe");
    publish(&broker, &["-t", "cap/x", "-m", "capped", "-q", "2"]);
    let got = sub.wait_for(1, WAIT).expect("one message");
    assert_eq!(got[0].qos, 1, "QoS 2 publish to a QoS 1 subscription");
}

#[test]
fn retained_message_reaches_a_later_subscriber_with_retain_flag() {
    let broker = Mosquitto::start(MosquittoOpts::new()).expect("start mosquitto");
    let live = Subscriber::connect(broker.addr(), SubscriberOpts::v4("r/#").qos(1))
        .expect("live subscriber");
    publish(&broker, &["-t", "r/state", "-m", "on", "-q", "1", "-r"]);

    // A live subscriber gets it with RETAIN clear (MQTT 3.1.1 §3.3.1.3).
    let live_got = live.wait_for(1, WAIT).expect("live delivery");
    assert!(!live_got[0].retain);

    let late = Subscriber::connect(broker.addr(), SubscriberOpts::v4("r/#").qos(1))
        .expect("late subscriber");
    let late_got = late.wait_for(1, WAIT).expect("retained delivery");
    assert_eq!(late_got[0].topic, "r/state");
    assert_eq!(late_got[0].payload.as_ref(), b"on");
    assert!(late_got[0].retain, "retained message must carry RETAIN");
}

#[test]
fn v5_subscriber_records_publish_properties() {
    let broker = Mosquitto::start(MosquittoOpts::new()).expect("start mosquitto");
    let sub = Subscriber::connect(
        broker.addr(),
        SubscriberOpts::v5("p/#").qos(1).subscription_id(7),
    )
    .expect("subscribe");
    publish(
        &broker,
        &[
            "-V",
            "mqttv5",
            "-t",
            "p/1",
            "-m",
            "{}",
            "-q",
            "1",
            "-D",
            "publish",
            "user-property",
            "k",
            "v",
            "-D",
            "publish",
            "user-property",
            "trace",
            "abc",
            "-D",
            "publish",
            "content-type",
            "application/json",
            "-D",
            "publish",
            "payload-format-indicator",
            "1",
            "-D",
            "publish",
            "response-topic",
            "reply/here",
            "-D",
            "publish",
            "correlation-data",
            "corr-1",
            "-D",
            "publish",
            "message-expiry-interval",
            "60",
        ],
    );
    let got = sub.wait_for(1, WAIT).expect("one message");
    let msg = &got[0];
    assert_eq!(msg.topic, "p/1");
    assert_eq!(msg.qos, 1);
    assert_eq!(msg.user_property("k"), Some("v"));
    let props = msg.properties.as_ref().expect("MQTT 5 properties");
    assert_eq!(
        props.user_properties,
        vec![
            ("k".to_owned(), "v".to_owned()),
            ("trace".to_owned(), "abc".to_owned())
        ]
    );
    assert_eq!(props.content_type.as_deref(), Some("application/json"));
    assert_eq!(props.payload_format_indicator, Some(1));
    assert_eq!(props.response_topic.as_deref(), Some("reply/here"));
    assert_eq!(props.correlation_data.as_deref(), Some(&b"corr-1"[..]));
    let expiry = props.message_expiry_interval.expect("expiry forwarded");
    assert!((55..=60).contains(&expiry), "remaining expiry {expiry}");
    assert_eq!(props.subscription_ids, vec![7]);
}

#[test]
fn qos_1_and_2_flows_complete_with_one_inflight_slot() {
    // With max_inflight_messages 1 the broker sends the next QoS 1/2 message only after the
    // previous one is acknowledged (PUBACK, or PUBREC + PUBCOMP), so all arriving proves the
    // subscriber completes both flows.
    let broker =
        Mosquitto::start(MosquittoOpts::new().max_inflight_messages(1)).expect("start mosquitto");
    let sub =
        Subscriber::connect(broker.addr(), SubscriberOpts::v5("f/#").qos(2)).expect("subscribe");
    assert_eq!(sub.connack().receive_maximum, Some(1));
    for i in 0..4 {
        let payload = format!("q1-{i}");
        publish(&broker, &["-t", "f/q1", "-m", &payload, "-q", "1"]);
        let payload = format!("q2-{i}");
        publish(&broker, &["-t", "f/q2", "-m", &payload, "-q", "2"]);
    }
    let got = sub.wait_for(8, WAIT).expect("all eight messages");
    assert_eq!(got.len(), 8);
    assert!(got.iter().all(|m| !m.dup), "nothing re-sent: {got:?}");
    let q2: Vec<&[u8]> = got
        .iter()
        .filter(|m| m.qos == 2)
        .map(|m| m.payload.as_ref())
        .collect();
    assert_eq!(q2, vec![&b"q2-0"[..], b"q2-1", b"q2-2", b"q2-3"]);
}

#[test]
fn broker_limits_and_extra_config_lines_reach_clients() {
    let default = Mosquitto::start(MosquittoOpts::new()).expect("start default mosquitto");
    let sub = Subscriber::connect(default.addr(), SubscriberOpts::v5("x")).expect("connect");
    assert_eq!(sub.connack().receive_maximum, Some(20), "mosquitto default");
    assert_eq!(sub.connack().server_keep_alive, None);

    let tuned = Mosquitto::start(
        MosquittoOpts::new()
            .max_inflight_messages(7)
            .config_line("max_keepalive 15"),
    )
    .expect("start tuned mosquitto");
    let sub =
        Subscriber::connect(tuned.addr(), SubscriberOpts::v5("x").keep_alive(60)).expect("connect");
    assert_eq!(sub.connack().receive_maximum, Some(7));
    assert_eq!(sub.connack().server_keep_alive, Some(15));
    let conf = std::fs::read_to_string(tuned.config_path()).expect("config");
    assert!(conf.contains("max_queued_messages 1000000"), "{conf}");
    assert!(conf.contains("max_queued_bytes 0"), "{conf}");
}

#[test]
fn subscriber_keeps_the_connection_alive_with_pings() {
    // mosquitto checks keep-alive only every few seconds, so waiting for a disconnect is slow;
    // its verbose log shows the PINGREQs instead.
    let broker = Mosquitto::start(MosquittoOpts::new().verbose_log()).expect("start mosquitto");
    let sub = Subscriber::connect(broker.addr(), SubscriberOpts::v4("ka").keep_alive(1))
        .expect("subscribe");
    let expected = format!("Received PINGREQ from {}", sub.client_id());
    let deadline = Instant::now() + WAIT;
    while broker.log().matches(&expected).count() < 2 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
    }
    assert!(
        broker.log().matches(&expected).count() >= 2,
        "no keep-alive pings: {}",
        broker.log_tail(20)
    );
    assert!(sub.is_connected(), "dropped: {:?}", sub.closed_reason());
    publish(&broker, &["-t", "ka", "-m", "still here"]);
    sub.wait_for(1, WAIT).expect("delivery after idle time");
}

#[test]
fn wait_for_reports_how_many_arrived() {
    let broker = Mosquitto::start(MosquittoOpts::new()).expect("start mosquitto");
    let sub = Subscriber::connect(broker.addr(), SubscriberOpts::v4("w")).expect("subscribe");
    publish(&broker, &["-t", "w", "-m", "only one"]);
    let err = sub
        .wait_for(2, Duration::from_millis(700))
        .expect_err("only one message was published");
    match &err {
        HarnessError::MessagesTimeout {
            expected, received, ..
        } => assert_eq!((*expected, *received), (2, 1)),
        other => panic!("unexpected error {other}"),
    }
    assert!(err.to_string().contains("only 1 arrived"), "{err}");
    assert_eq!(sub.count(), 1);
}

// ---------------------------------------------------------------- authentication

#[test]
fn password_auth_accepts_right_and_refuses_wrong_credentials() {
    let broker =
        Mosquitto::start(MosquittoOpts::new().user("alice", "s3cret")).expect("start mosquitto");
    let conf = std::fs::read_to_string(broker.config_path()).expect("config");
    assert!(conf.contains("allow_anonymous false"), "{conf}");

    let ok = Subscriber::connect(
        broker.addr(),
        SubscriberOpts::v4("a/#")
            .qos(1)
            .credentials("alice", "s3cret"),
    )
    .expect("right credentials");
    publish(&broker, &["-t", "a/1", "-m", "authed", "-q", "1"]);
    assert_eq!(
        ok.wait_for(1, WAIT).expect("delivery")[0].payload.as_ref(),
        b"authed"
    );

    // mosquitto answers a wrong password with "not authorized": 5 in 3.1.1, 135 in 5.
    for (version, expected) in [(MqttVersion::V4, 5u8), (MqttVersion::V5, 135u8)] {
        let err = Subscriber::connect(
            broker.addr(),
            SubscriberOpts::new(version, "a/#").credentials("alice", "wrong"),
        )
        .expect_err("wrong password must be refused");
        match err {
            HarnessError::ConnectRefused { code, .. } => assert_eq!(code, expected, "{version:?}"),
            other => panic!("{version:?}: expected ConnectRefused, got {other}"),
        }
    }
    let anonymous = Subscriber::connect(broker.addr(), SubscriberOpts::v4("a/#"));
    assert!(
        matches!(anonymous, Err(HarnessError::ConnectRefused { code: 5, .. })),
        "anonymous must be refused: {anonymous:?}"
    );
}

#[test]
fn acl_blocks_reading_a_denied_topic() {
    let acl = "user alice\ntopic read allowed/#\ntopic write #\n";
    let broker = Mosquitto::start(MosquittoOpts::new().user("alice", "pw").acl(acl))
        .expect("start mosquitto");
    let sub = Subscriber::connect(
        broker.addr(),
        SubscriberOpts::v4("#").qos(1).credentials("alice", "pw"),
    )
    .expect("subscribe");
    // Published in this order through a single-threaded broker: once the allowed message is
    // in, the denied one would have been delivered before it.
    publish(&broker, &["-t", "denied/x", "-m", "secret", "-q", "1"]);
    publish(&broker, &["-t", "allowed/x", "-m", "public", "-q", "1"]);
    let got = sub.wait_for(1, WAIT).expect("the allowed message");
    thread::sleep(Duration::from_millis(200));
    let got_all = sub.messages();
    assert_eq!(got_all.len(), 1, "{got_all:?}");
    assert_eq!(got[0].topic, "allowed/x");
}

// ---------------------------------------------------------------- TLS

#[test]
fn tls_subscriber_trusting_the_ca_receives() {
    let broker = Mosquitto::start(MosquittoOpts::new().tls()).expect("start mosquitto");
    assert!(broker.url().starts_with("mqtts://"));
    let tls = broker.client_tls().expect("TLS material");
    let sub = Subscriber::connect(broker.addr(), SubscriberOpts::v5("s/#").qos(1).tls(tls))
        .expect("TLS subscribe");
    publish(&broker, &["-t", "s/1", "-m", "over tls", "-q", "1"]);
    assert_eq!(
        sub.wait_for(1, WAIT).expect("delivery")[0].payload.as_ref(),
        b"over tls"
    );

    // Verifying by IP address works too: the certificate carries 127.0.0.1.
    let by_ip = broker
        .client_tls()
        .expect("TLS material")
        .with_server_name("127.0.0.1");
    Subscriber::connect(broker.addr(), SubscriberOpts::v4("s/#").tls(by_ip))
        .expect("TLS by IP address");
}

#[test]
fn tls_subscriber_with_another_ca_is_rejected() {
    let broker = Mosquitto::start(MosquittoOpts::new().tls()).expect("start mosquitto");
    let other_ca = TestCa::new("some other CA").expect("CA");
    let err = Subscriber::connect(
        broker.addr(),
        SubscriberOpts::v4("s/#").tls(ClientTls::new(other_ca.cert_pem())),
    )
    .expect_err("untrusted server certificate");
    match &err {
        HarnessError::Tls(msg) => assert!(msg.contains("UnknownIssuer"), "{msg}"),
        other => panic!("expected a TLS error, got {other}"),
    }

    let plain = Subscriber::connect(
        broker.addr(),
        SubscriberOpts::v4("s/#").connect_timeout(Duration::from_secs(2)),
    );
    assert!(plain.is_err(), "plain MQTT on a TLS listener must fail");
}

#[test]
fn mutual_tls_requires_a_client_certificate_from_the_ca() {
    let broker = Mosquitto::start(MosquittoOpts::new().mutual_tls()).expect("start mosquitto");
    let no_cert = Subscriber::connect(
        broker.addr(),
        SubscriberOpts::v4("m/#").tls(broker.client_tls().expect("TLS material")),
    );
    // TLS 1.3: the client finishes its handshake first; the broker's alert arrives on read.
    match no_cert {
        Err(HarnessError::Tls(msg)) => assert!(msg.contains("CertificateRequired"), "{msg}"),
        other => panic!("no client certificate must fail TLS: {other:?}"),
    }

    let stranger = TestCa::new("stranger CA")
        .and_then(|ca| ca.issue_client_cert("mallory"))
        .expect("foreign client cert");
    let foreign = Subscriber::connect(
        broker.addr(),
        SubscriberOpts::v4("m/#").tls(
            broker
                .client_tls()
                .expect("TLS material")
                .with_client_cert(stranger),
        ),
    );
    match foreign {
        Err(HarnessError::Tls(msg)) => assert!(msg.contains("UnknownCA"), "{msg}"),
        other => panic!("a client certificate from another CA must fail TLS: {other:?}"),
    }

    let cert = broker.issue_client_cert("spillway").expect("client cert");
    let tls = broker
        .client_tls()
        .expect("TLS material")
        .with_client_cert(cert);
    let sub = Subscriber::connect(broker.addr(), SubscriberOpts::v4("m/#").qos(2).tls(tls))
        .expect("mutual TLS subscribe");
    publish(&broker, &["-t", "m/1", "-m", "mutual", "-q", "2"]);
    let got = sub.wait_for(1, WAIT).expect("delivery");
    assert_eq!((got[0].payload.as_ref(), got[0].qos), (&b"mutual"[..], 2));
}

// ---------------------------------------------------------------- restart

#[test]
fn stop_and_restart_keep_the_port() {
    let mut broker = Mosquitto::start(MosquittoOpts::new()).expect("start mosquitto");
    let port = broker.port();
    let before = Subscriber::connect(broker.addr(), SubscriberOpts::v4("rs")).expect("subscribe");

    broker.stop().expect("stop");
    assert!(!broker.is_running());
    assert!(!accepts_tcp(broker.addr(), Duration::from_millis(300)));
    assert!(Subscriber::connect(broker.addr(), SubscriberOpts::v4("rs")).is_err());
    let deadline = Instant::now() + WAIT;
    while before.is_connected() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !before.is_connected(),
        "the old connection must notice the broker is gone"
    );

    broker.start_again().expect("start again");
    assert_eq!(broker.port(), port);
    let after = Subscriber::connect(broker.addr(), SubscriberOpts::v4("rs")).expect("reconnect");
    publish(&broker, &["-t", "rs", "-m", "back"]);
    after.wait_for(1, WAIT).expect("delivery after start_again");

    broker.restart().expect("restart");
    assert_eq!(broker.port(), port);
    let again = Subscriber::connect(broker.addr(), SubscriberOpts::v4("rs")).expect("reconnect");
    publish(&broker, &["-t", "rs", "-m", "again"]);
    again.wait_for(1, WAIT).expect("delivery after restart");
    assert!(
        broker.start_again().is_err(),
        "start_again while running is refused"
    );
    assert!(
        broker.log().matches("running").count() >= 3,
        "{}",
        broker.log()
    );
}

#[test]
fn missing_binary_names_setup_script() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut process = ServerProcess::new(
        "nothing",
        "spillway-no-such-server",
        ["--help"],
        dir.path().join("log"),
    );
    let err = process.spawn().expect_err("binary does not exist");
    assert!(matches!(err, HarnessError::BinaryMissing { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("spillway-no-such-server") && text.contains("scripts/setup.sh"));
}

// ---------------------------------------------------------------- S3 (s3s-fs)

/// A minimal HTTP/1.1 exchange over a fresh connection: returns status and body.
fn http(
    server: &S3Server,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> (u16, String) {
    let mut stream = TcpStream::connect(server.addr()).expect("connect to s3s-fs");
    stream.set_read_timeout(Some(WAIT)).expect("read timeout");
    let mut req = format!("{method} {path} HTTP/1.1\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("host: {}\r\n", server.host_port()));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!(
        "content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    ));
    stream.write_all(req.as_bytes()).expect("send request");
    stream.write_all(body).expect("send body");
    let mut response = Vec::new();
    if let Err(e) = stream.read_to_end(&mut response) {
        panic!(
            "reading the response to {method} {path}: {e} (got {:?})\nserver log:\n{}",
            String::from_utf8_lossy(&response),
            server.log_tail(30)
        );
    }
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// Signs a path-style request with aws-sigv4 and returns the headers to send.
fn signed_headers(
    server: &S3Server,
    secret: &str,
    method: &str,
    path: &str,
    body: &[u8],
) -> Vec<(String, String)> {
    use aws_credential_types::Credentials;
    use aws_sigv4::http_request::{
        PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
        UriPathNormalizationMode, sign,
    };
    use aws_sigv4::sign::v4;
    use aws_smithy_runtime_api::client::identity::Identity;

    let identity: Identity =
        Credentials::new(server.access_key(), secret, None, None, "harness-test").into();
    let mut settings = SigningSettings::default();
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(server.region())
        .name("s3")
        .time(SystemTime::now())
        .settings(settings)
        .build()
        .expect("signing params")
        .into();
    let url = format!("{}{}", server.endpoint(), path);
    let host = server.host_port();
    let signable = SignableRequest::new(
        method,
        url.as_str(),
        [("host", host.as_str())].into_iter(),
        SignableBody::Bytes(body),
    )
    .expect("signable request");
    let (instructions, _signature) = sign(signable, &params).expect("sign").into_parts();
    let mut request = http::Request::builder()
        .method(method)
        .uri(url.as_str())
        .header("host", host.as_str())
        .body(())
        .expect("http request");
    instructions.apply_to_request_http1x(&mut request);
    request
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                v.to_str().expect("ASCII header").to_owned(),
            )
        })
        .collect()
}

#[test]
fn s3server_starts_with_its_bucket_and_refuses_anonymous_requests() {
    let server = S3Server::start().expect("start s3s-fs");
    assert!(server.bucket_dir().is_dir());
    assert!(server.endpoint().starts_with("http://127.0.0.1:"));
    assert_eq!(server.region(), "us-east-1");

    let path = format!("/{}/", server.bucket());
    let (status, body) = http(&server, "GET", &path, &[], b"");
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("AccessDenied"), "{body}");
}

#[test]
fn s3server_rejects_a_wrong_secret_with_signature_does_not_match() {
    let server = S3Server::start().expect("start s3s-fs");
    let path = format!("/{}/some-key", server.bucket());
    let headers = signed_headers(&server, "not-the-secret", "GET", &path, b"");
    let (status, body) = http(&server, "GET", &path, &headers, b"");
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("SignatureDoesNotMatch"), "{body}");
}

#[test]
fn s3server_accepts_signed_put_and_get_with_the_exposed_credentials() {
    let server = S3Server::start().expect("start s3s-fs");
    let key = "spillway/p0/00000000000000000000.jsonl";
    let path = format!("/{}/{key}", server.bucket());
    let payload = b"{\"offset\":0}\n{\"offset\":1}\n";

    let headers = signed_headers(&server, server.secret_key(), "PUT", &path, payload);
    let (status, body) = http(&server, "PUT", &path, &headers, payload);
    assert_eq!(status, 200, "PUT: {body}\n{}", server.log_tail(20));
    let stored = std::fs::read(server.object_path(key)).expect("object stored as a file");
    assert_eq!(stored, payload);

    let headers = signed_headers(&server, server.secret_key(), "GET", &path, b"");
    let (status, body) = http(&server, "GET", &path, &headers, b"");
    assert_eq!(status, 200, "GET: {body}");
    assert_eq!(body.as_bytes(), payload);
}

#[test]
fn s3server_serves_buckets_created_later_and_restarts_on_the_same_port() {
    let mut server = S3Server::start().expect("start s3s-fs");
    server
        .create_bucket("second-bucket")
        .expect("create bucket");
    let path = "/second-bucket/k";
    let headers = signed_headers(&server, server.secret_key(), "PUT", path, b"x");
    let (status, body) = http(&server, "PUT", path, &headers, b"x");
    assert_eq!(status, 200, "{body}");

    let port = server.port();
    server.restart().expect("restart");
    assert_eq!(server.port(), port);
    let headers = signed_headers(&server, server.secret_key(), "GET", path, b"");
    let (status, body) = http(&server, "GET", path, &headers, b"");
    assert_eq!((status, body.as_str()), (200, "x"));
}
