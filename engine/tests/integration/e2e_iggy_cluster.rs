//! End to end through a replicated Iggy cluster: real server processes
//! (`spillway_tests::IggyCluster`, `../shared/iggy/` in cluster mode on loopback), a producer
//! writing to whichever node leads, the engine given every node's address. The leader is
//! SIGKILLed mid-run, restarted, and the next leader killed too: the engine must follow each
//! new leader without a restart, deliver every offset the cluster holds, and store nothing that
//! was not delivered.
//!
//! CI runs it on five nodes. On three, the sequence the issue asks for (kill the leader,
//! restart it, kill the next leader) leaves the 0.9.0-edge.5 cluster taking no write ever
//! again in about half the runs, with or without Spillway reading (the producer's sends time
//! out too, a restart of every node does not cure it): the three-node test is kept, ignored,
//! to run by hand.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use std::collections::{BTreeMap, BTreeSet};

use common::{Engine, Topic, by_partition, lines, wait_until};
use spillway_tests::iggy::{IggyCluster, LEADER_TIMEOUT, leader_admin};
use spillway_tests::{HarnessError, IggyAdmin, TestConsumer, TestMessage};
use spillway_tests::{Mosquitto, MosquittoOpts, S3Server, Subscriber, SubscriberOpts};

const PARTITIONS: u32 = 2;

/// The cluster, or `None` (the test is skipped, said on stderr) where no server binary exists
/// and `SPILLWAY_REQUIRE_REAL_IGGY` does not ask for one.
fn cluster(size: usize) -> Option<IggyCluster> {
    match IggyCluster::start(size) {
        Ok(c) => Some(c),
        Err(HarnessError::BinaryMissing { .. }) if !spillway_tests::iggy::real_iggy_required() => {
            eprintln!("no Iggy server binary: the cluster test is skipped");
            None
        }
        Err(e) => panic!("starting the Iggy cluster: {e}"),
    }
}

/// Creates a stream and topic on the leader.
fn cluster_topic(cluster: &mut IggyCluster, test: &str) -> Topic {
    let stream = format!("spw-{test}-{:x}", fastrand::u32(..));
    let mut admin = cluster.admin().unwrap();
    admin.create_stream(&stream).unwrap();
    admin.create_topic(&stream, "events", PARTITIONS).unwrap();
    Topic {
        stream,
        topic: "events".to_owned(),
        partitions: PARTITIONS,
    }
}

/// A producer thread: batches of 10 messages to each partition in turn, every `pace`, to the
/// node that leads, redialling (any node, then the leader it names) when a send fails. A send
/// whose outcome is unknown is sent again: Iggy then holds it twice, at two offsets, which is
/// what the engine must deliver.
struct Producer {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    last_error: Arc<std::sync::Mutex<String>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Producer {
    fn start(addrs: Vec<std::net::SocketAddr>, t: &Topic, pace: Duration) -> Producer {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let last_error = Arc::new(std::sync::Mutex::new(String::new()));
        let (stream, topic) = (t.stream.clone(), t.topic.clone());
        let thread = {
            let (stop, sent) = (Arc::clone(&stop), Arc::clone(&sent));
            let last_error = Arc::clone(&last_error);
            std::thread::spawn(move || {
                let mut admin: Option<IggyAdmin> = None;
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if admin.is_none() {
                        admin = leader_admin(&addrs, "iggy", "iggy").ok();
                        if admin.is_none() {
                            std::thread::sleep(Duration::from_millis(100));
                            continue;
                        }
                    }
                    let partition = (n % u64::from(PARTITIONS)) as u32;
                    let batch: Vec<TestMessage> = (0..10)
                        .map(|i| TestMessage::new(u128::from(n * 10 + i) + 1, format!("m-{n}-{i}")))
                        .collect();
                    match admin
                        .as_mut()
                        .map(|a| a.send(&stream, &topic, partition, &batch))
                    {
                        Some(Ok(())) => {
                            sent.fetch_add(10, Ordering::Relaxed);
                            n += 1;
                            std::thread::sleep(pace);
                        }
                        Some(Err(e)) => {
                            *last_error.lock().unwrap_or_else(|p| p.into_inner()) = e.to_string();
                            admin = None;
                        }
                        None => admin = None,
                    }
                }
            })
        };
        Producer {
            stop,
            sent,
            last_error,
            thread: Some(thread),
        }
    }

    fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

/// Each partition's message count on the leader.
fn heads(cluster: &mut IggyCluster, t: &Topic) -> Vec<u64> {
    let mut admin = cluster.admin().unwrap();
    let heads = admin.partition_heads(&t.stream, &t.topic).unwrap();
    (0..t.partitions)
        .map(|p| heads.iter().find(|h| h.0 == p).map_or(0, |h| h.2))
        .collect()
}

/// `[iggy]`, `[runtime]` and `[metrics]` for an engine reading the cluster at `addresses`.
fn engine_sections(addresses: &str) -> String {
    format!(
        r#"
[iggy]
address = "{addresses}"
username = "iggy"
password = "iggy"
reconnect_min = "100ms"
reconnect_max = "1s"

[runtime]
shutdown_timeout = "10s"

[metrics]
address = ""
log_interval = "0s"
"#
    )
}

fn file_sink(t: &Topic, out: &std::path::Path) -> String {
    format!(
        r#"
[[sink]]
name = "file-out"
type = "file"
stream = "{stream}"
topic = "{topic}"
partitions = [0, 1]
poll_interval = "5ms"
batch_size = 100
commit_interval = "50ms"

[sink.file]
path = "{out}"
"#,
        stream = t.stream,
        topic = t.topic,
        out = out.display(),
    )
}

/// What one failover cost, as the test saw it.
#[derive(Debug)]
struct Failover {
    node: usize,
    elected: Duration,
    resumed: Duration,
}

/// Kills the leader, waits until `progress` moves 200 past where it was (delivery goes on
/// through the new leader), starts the killed node again and waits until it is in step; twice.
fn two_leader_kills(
    cluster: &mut IggyCluster,
    t: &Topic,
    producer: &Producer,
    engine: &Engine,
    progress: &dyn Fn() -> usize,
) -> Vec<Failover> {
    let mut out = Vec::new();
    for round in 0..2 {
        let leader = cluster.wait_for_leader(LEADER_TIMEOUT).unwrap();
        let before = progress();
        let killed = Instant::now();
        cluster.kill(leader).unwrap();
        let next = cluster
            .wait_for_new_leader(leader, LEADER_TIMEOUT)
            .unwrap_or_else(|e| panic!("round {round}: {e}\n{}", cluster.log_tails(40)));
        let elected = killed.elapsed();
        let until = Instant::now() + Duration::from_secs(60);
        while progress() < before + 200 {
            assert!(
                Instant::now() < until,
                "round {round}: node {leader} killed, node {next} leads, delivery did not go on \
                 within 60 s ({} sent, last send error {:?}, progress {})\n{}\n{}",
                producer.sent(),
                producer
                    .last_error
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()),
                progress(),
                engine.log(),
                cluster.log_tails(30)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let resumed = killed.elapsed();
        eprintln!(
            "round {round}: killed node {leader}; node {next} led after {elected:?}; delivery \
             went on {resumed:?} after the kill"
        );
        out.push(Failover {
            node: leader,
            elected,
            resumed,
        });
        cluster.restart(leader).unwrap();
        // The next kill leaves a quorum that includes the restarted node: it must be in step.
        cluster
            .wait_in_step(leader, &t.stream, &t.topic, Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("{e}\n{}", cluster.log_tails(40)));
    }
    out
}

/// The issue's sequence on three nodes with a file sink. Ignored: the server wedges in about
/// half the runs after the second kill (see the module docs); run it by hand with
/// `cargo test -p spillway --test integration e2e_iggy_cluster:: -- --ignored`.
#[test]
#[ignore = "0.9.0-edge.5 on three nodes at times takes no write after the second leader kill"]
fn three_nodes_the_engine_follows_two_leader_kills_with_a_file_sink() {
    let Some(mut cluster) = cluster(3) else {
        return;
    };
    let t = cluster_topic(&mut cluster, "cluster-file");
    let addrs: Vec<_> = (0..cluster.size()).map(|i| cluster.addr(i)).collect();
    let mut producer = Producer::start(addrs, &t, Duration::from_millis(5));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let cfg = engine_sections(&cluster.addresses()) + &file_sink(&t, &out);
    let mut engine = Engine::start(dir.path(), "cluster", &cfg);
    wait_until("the first 200 lines", Duration::from_secs(60), || {
        lines(&out).len() >= 200
    });
    two_leader_kills(&mut cluster, &t, &producer, &engine, &|| lines(&out).len());
    producer.stop();
    let heads = heads(&mut cluster, &t);
    wait_until("every offset delivered", Duration::from_secs(90), || {
        let got = by_partition(&lines(&out));
        (0..PARTITIONS).all(|p| {
            got.get(&p).is_some_and(|o| {
                o.iter().collect::<BTreeSet<_>>().len() as u64 >= heads[p as usize]
            })
        })
    });
    engine.signal("TERM");
    assert!(
        engine
            .wait(Duration::from_secs(30))
            .expect("exits")
            .success()
    );
}

/// Two sinks through five nodes with a live producer: MQTT (QoS 1 to mosquitto, explicit
/// partitions, every offset at least once) and S3 (json_lines to s3s-fs, a consumer group,
/// every offset in exactly one object). Two leader kills; the engine runs on throughout.
#[test]
fn mqtt_and_s3_through_a_cluster_follow_two_leader_kills_and_lose_nothing() {
    let Some(mut cluster) = cluster(5) else {
        return;
    };
    let t = cluster_topic(&mut cluster, "cluster-sinks");
    cluster
        .admin()
        .unwrap()
        .create_consumer_group(&t.stream, &t.topic, "cl-group")
        .unwrap();
    let broker = Mosquitto::start(MosquittoOpts::new()).unwrap();
    let s3 = S3Server::start().unwrap();
    let sub = Subscriber::connect(broker.addr(), SubscriberOpts::v4("cl/#").qos(1)).unwrap();
    let addrs: Vec<_> = (0..cluster.size()).map(|i| cluster.addr(i)).collect();
    let mut producer = Producer::start(addrs, &t, Duration::from_millis(5));
    let cfg = engine_sections(&cluster.addresses())
        + &common::mqtt_sink(
            "cl-mqtt",
            &t,
            "partitions = [0, 1]",
            "",
            &broker.host_port(),
            "protocol = \"3.1.1\"\nqos = 1\ntopic = \"cl/{partition}/{offset}\"",
        )
        + &common::s3_sink(
            "cl-s3",
            &t,
            &s3,
            "prefix = \"cl/\"\nidle_flush = \"300ms\"\nmax_object_messages = 500",
        )
        .replacen("partitions = [0, 1]", "consumer_group = \"cl-group\"", 1);
    let dir = tempfile::tempdir().unwrap();
    // check --connect names the leader and the roster, whichever node it asked first.
    let path = dir.path().join("check.toml");
    std::fs::write(
        &path,
        cfg.replace(&cluster.addresses(), &cluster.addr(4).to_string()),
    )
    .unwrap();
    let checked = std::process::Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["check", "--connect", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&checked.stdout).into_owned();
    let leader = cluster.wait_for_leader(LEADER_TIMEOUT).unwrap();
    assert!(
        said.contains(&format!(
            "logged in at {}, the leader; cluster \"spillway-test\": node-0 ",
            cluster.addr(leader)
        )) && said.contains(&format!("node-{leader} {} leader", cluster.addr(leader)))
            && checked.status.success(),
        "{said}"
    );
    let mut engine = Engine::start(dir.path(), "cluster-sinks", &cfg);
    let received = || sub.count();
    wait_until(
        "the first 200 MQTT messages",
        Duration::from_secs(60),
        || received() >= 200,
    );
    let failovers = two_leader_kills(&mut cluster, &t, &producer, &engine, &received);
    producer.stop();
    let heads = heads(&mut cluster, &t);
    let sent = producer.sent();
    assert!(
        heads.iter().sum::<u64>() >= sent,
        "{heads:?} < {sent} acknowledged sends"
    );

    // MQTT: every offset the cluster holds, at least once.
    let mqtt_offsets = || -> BTreeMap<u64, BTreeSet<u64>> {
        let mut by: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
        for r in sub.messages() {
            let mut parts = r.topic.split('/').skip(1);
            if let (Some(Ok(p)), Some(Ok(o))) = (
                parts.next().map(str::parse::<u64>),
                parts.next().map(str::parse::<u64>),
            ) {
                by.entry(p).or_default().insert(o);
            }
        }
        by
    };
    // S3: every offset in exactly one object.
    let s3_records = || -> Vec<(u64, u64)> {
        let mut all = Vec::new();
        for (key, path, _) in common::object_files(&s3.bucket_dir()) {
            if key.contains(".spillway/") {
                continue;
            }
            for l in std::fs::read_to_string(path).unwrap_or_default().lines() {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                all.push((
                    v["partition"].as_u64().unwrap(),
                    v["offset"].as_u64().unwrap(),
                ));
            }
        }
        all.sort_unstable();
        all
    };
    let expected: Vec<(u64, u64)> = (0..u64::from(PARTITIONS))
        .flat_map(|p| (0..heads[p as usize]).map(move |o| (p, o)))
        .collect();
    let until = Instant::now() + Duration::from_secs(90);
    loop {
        let m = mqtt_offsets();
        let mqtt_done = (0..u64::from(PARTITIONS))
            .all(|p| m.get(&p).map_or(0, BTreeSet::len) as u64 >= heads[p as usize]);
        if mqtt_done && s3_records() == expected {
            break;
        }
        assert!(
            Instant::now() < until,
            "not everything delivered within 90 s: heads {heads:?}, MQTT {:?}, S3 {} of {}\n{}",
            m.iter().map(|(p, o)| (p, o.len())).collect::<Vec<_>>(),
            s3_records().len(),
            expected.len(),
            engine.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let m = mqtt_offsets();
    for p in 0..u64::from(PARTITIONS) {
        assert_eq!(
            m[&p],
            (0..heads[p as usize]).collect::<BTreeSet<_>>(),
            "MQTT partition {p}"
        );
    }
    assert_eq!(s3_records(), expected, "every offset in exactly one object");

    // Nothing stored past what was delivered; everything stored once drained.
    let mut admin = cluster.admin().unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let stored: Vec<(Option<u64>, Option<u64>)> = (0..PARTITIONS)
            .map(|p| {
                (
                    admin
                        .stored_offset(
                            &TestConsumer::Named("cl-mqtt".into()),
                            &t.stream,
                            &t.topic,
                            p,
                        )
                        .unwrap(),
                    admin
                        .stored_offset(
                            &TestConsumer::Group("cl-group".into()),
                            &t.stream,
                            &t.topic,
                            p,
                        )
                        .unwrap(),
                )
            })
            .collect();
        for (p, (a, b)) in stored.iter().enumerate() {
            for s in [a, b].into_iter().flatten() {
                assert!(
                    *s < heads[p],
                    "partition {p}: stored {s}, head {}",
                    heads[p]
                );
            }
        }
        let all = stored
            .iter()
            .enumerate()
            .all(|(p, (a, b))| *a == Some(heads[p] - 1) && *b == Some(heads[p] - 1));
        if all {
            break;
        }
        assert!(
            Instant::now() < until,
            "stored {stored:?}, heads {heads:?}\n{}",
            engine.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let total: usize = sub.count();
    let unique: usize = m.values().map(BTreeSet::len).sum();
    let figures: Vec<String> = failovers
        .iter()
        .map(|f| {
            format!(
                "node {} killed: a new leader after {:.1} s, delivery on after {:.1} s",
                f.node,
                f.elected.as_secs_f64(),
                f.resumed.as_secs_f64()
            )
        })
        .collect();
    eprintln!(
        "failovers: {}; MQTT: {total} messages for {unique} offsets ({} duplicates over \
         {} failovers); {} S3 objects",
        figures.join("; "),
        total - unique,
        failovers.len(),
        common::object_files(&s3.bucket_dir()).len()
    );
    engine.signal("TERM");
    let status = engine.wait(Duration::from_secs(30)).expect("exits");
    let log = engine.log();
    assert!(status.success(), "{log}");
    assert!(log.contains("talking to the Iggy leader"), "{log}");
}
