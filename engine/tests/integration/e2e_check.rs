//! `spillway check --connect` against the REAL servers the harness starts (the Iggy server,
//! mosquitto with a password file, s3s-fs): a config with a problem at every endpoint reports
//! each one by sink and exits 1; the same config with the problems fixed reaches everything
//! and exits 0. Nothing is delivered or committed by a check.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Command;

use common::{engine_sections, mqtt_sink, s3_sink, stored, topic};
use spillway_tests::{IggyServer, Mosquitto, MosquittoOpts, S3Server, Subscriber, SubscriberOpts};

fn check_connect(dir: &std::path::Path, config: &str) -> (i32, String) {
    let path = dir.join("check.toml");
    std::fs::write(&path, config).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["check", "--connect", "--config"])
        .arg(&path)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn check_connect_reports_every_problem_by_sink_and_passes_when_all_are_fixed() {
    let iggy = IggyServer::start().unwrap();
    let broker = Mosquitto::start(MosquittoOpts::new().user("spw", "right-pass")).unwrap();
    let s3 = S3Server::start().unwrap();
    let t = topic(&iggy, "check", 2);
    let mut admin = iggy.admin().unwrap();
    admin
        .create_consumer_group(&t.stream, &t.topic, "readers")
        .unwrap();
    let watcher = Subscriber::connect(
        broker.addr(),
        SubscriberOpts::v5("#").credentials("spw", "right-pass"),
    )
    .unwrap();
    let addr = broker.addr().to_string();

    let config = |password: &str, bucket: &str, group: &str, partitions: &str| {
        engine_sections(&iggy)
            + &mqtt_sink(
                "to-broker",
                &t,
                partitions,
                "",
                &addr,
                &format!("topic = \"c/x\"\nusername = \"spw\"\npassword = \"{password}\""),
            )
            + &mqtt_sink(
                "in-group",
                &t,
                &format!("consumer_group = \"{group}\""),
                "",
                &addr,
                "topic = \"c/y\"\nusername = \"spw\"\npassword = \"right-pass\"",
            )
            + &s3_sink("to-store", &t, &s3, "").replace(
                &format!("bucket = \"{}\"", s3.bucket()),
                &format!("bucket = \"{bucket}\""),
            )
    };
    let dir = tempfile::tempdir().unwrap();

    let (code, out) = check_connect(
        dir.path(),
        &config(
            "Wr0ng-pass",
            "no-such-bucket",
            "nobody",
            "partitions = [0, 5]",
        ),
    );
    eprintln!("{out}");
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("ok      iggy: logged in"), "{out}");
    let problem = |sink: &str, what: &str, needle: &str| {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("PROBLEM sink \"{sink}\" {what}:")))
            .unwrap_or_else(|| panic!("no {what} problem for {sink}:\n{out}"));
        assert!(
            line.to_lowercase().contains(&needle.to_lowercase()),
            "{needle:?} not in {line:?}"
        );
    };
    problem("to-broker", "iggy", "partitions [5]");
    problem("to-broker", "mqtt", "not authorized");
    problem(
        "in-group",
        "iggy",
        "consumer group \"nobody\" does not exist",
    );
    problem("to-store", "s3", "NoSuchBucket");
    assert!(
        out.contains("ok      sink \"in-group\" mqtt: CONNACK"),
        "the good broker login is reported as such: {out}"
    );
    assert!(!out.contains("Wr0ng-pass"), "the password is not printed");

    let (code, out) = check_connect(
        dir.path(),
        &config("right-pass", s3.bucket(), "readers", "partitions = [0, 1]"),
    );
    eprintln!("{out}");
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("PROBLEM"), "{out}");
    assert!(out.contains("every endpoint reached"), "{out}");
    assert!(
        out.contains("ok      sink \"to-store\" s3: bucket"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "{}/{}: 2 partitions, consumer group \"readers\"",
            t.stream, t.topic
        )),
        "{out}"
    );
    // A check delivers nothing and commits nothing.
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(watcher.messages().is_empty());
    assert_eq!(stored(&mut admin, &t, "to-broker", 0), None);
}
