//! `spillway-bench chaos`: a fault campaign against the real servers, on loopback only.
//!
//! The real Iggy server, mosquitto (behind the harness's MQTT count proxy) and s3s-fs (behind
//! the fault proxy, which also drops, fails and stalls a share of the requests); the release
//! engine as its own process with an MQTT sink (QoS 1, JSON envelope) and an S3 sink
//! (json_lines) reading the same two partitions. A producer appends messages all along; a
//! nemesis, at seeded random moments, SIGKILLs and restarts the engine, SIGKILLs and restarts
//! the Iggy server or s3s-fs, restarts mosquitto, drops every MQTT connection, black-holes the
//! broker or stalls the store for a while.
//!
//! What is checked, at the end, against what Iggy holds (read back from offset 0):
//! - **MQTT, at least once**: every offset was acknowledged by the broker (PUBACK, counted by
//!   the proxy) at least once; more than once is counted as duplicates.
//! - **S3, exactly once**: every offset is in exactly one record of the complete objects, with
//!   Iggy's payload.
//! - **Never stored before it was confirmed**: every 100 ms the campaign reads the offsets the
//!   MQTT sink stored in Iggy and checks that the broker had acknowledged every offset up to
//!   them by then. For S3 the check is the end state: an offset stored before its object was
//!   complete would, after the next engine SIGKILL, never be written (the engine resumes past
//!   it), and the exactly-once check finds it missing.
//!
//! The Iggy server is killed only with every message flushed: topics flush every 1,024
//! messages (the server's default), the producer sends batches of 1,024, and a SIGKILL loses
//! what was not flushed (the server's documented behaviour, not the engine's).
//!
//! The broker is restarted with SIGTERM (no persistence: it forgets what it holds, the engine
//! publishes again what was not acknowledged); a SIGKILLed broker loses what it acknowledged and
//! had not delivered yet, which is its own contract, and the campaign checks the engine's.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use spillway_tests::{
    FaultPlan, FaultProxy, IggyAdmin, IggyProcess, IggyProcessOpts, Mosquitto, MqttCountProxy,
    S3Server, TestConsumer, TestMessage,
};

use crate::engine_process::{self, EngineProcess};
use crate::report::{Better, Row};

const TOPIC: &str = "chaos";
const PARTITIONS: u32 = 2;
/// The server flushes a topic every 1,024 messages: a batch of that many is on disk once
/// acknowledged.
const BATCH: usize = 1024;
/// Seconds of campaign, instead of the default.
pub const SECS_ENV: &str = "SPILLWAY_BENCH_CHAOS_SECS";
/// The nemesis's seed, instead of the default.
pub const SEED_ENV: &str = "SPILLWAY_BENCH_CHAOS_SEED";

/// The kinds of fault, in the report's order.
const FAULTS: [&str; 8] = [
    "engine SIGKILL",
    "Iggy SIGKILL",
    "s3s-fs SIGKILL",
    "mosquitto restart",
    "MQTT connections dropped",
    "MQTT black hole (1 s)",
    "S3 stall (share of requests, 2 s)",
    "S3 faults (drops, 500, 503 for 2 s)",
];

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the campaign found.
#[derive(Debug, Default)]
struct Outcome {
    faults: BTreeMap<&'static str, u64>,
    in_iggy: u64,
    mqtt_lost: u64,
    mqtt_duplicates: u64,
    s3_lost: u64,
    s3_duplicates: u64,
    s3_wrong_payload: u64,
    premature: u64,
    first_problems: Vec<String>,
}

struct World {
    iggy: IggyProcess,
    broker: Mosquitto,
    mqtt: MqttCountProxy,
    s3: S3Server,
    store: FaultProxy,
    stream: String,
    binary: std::path::PathBuf,
}

impl World {
    fn admin(&self) -> Result<IggyAdmin, String> {
        IggyAdmin::connect(self.iggy.addr(), self.iggy.username(), self.iggy.password())
            .map_err(|e| format!("Iggy admin: {e}"))
    }

    fn engine_config(&self) -> String {
        format!(
            r#"
[iggy]
address = "{iggy}"
username = "{user}"
reconnect_min = "50ms"
reconnect_max = "500ms"

[runtime]
shutdown_timeout = "20s"

[metrics]
address = ""
log_interval = "0s"

[[sink]]
name = "chaos-mqtt"
type = "mqtt"
stream = "{stream}"
topic = "{TOPIC}"
partitions = [0, 1]
poll_interval = "5ms"
commit_interval = "50ms"

[sink.mqtt]
address = "{mqtt}"
qos = 1
topic = "chaos/{{partition}}"
envelope = "json"
keep_alive = "2s"
ack_timeout = "3s"
reconnect_min = "50ms"
reconnect_max = "500ms"

[[sink]]
name = "chaos-s3"
type = "s3"
stream = "{stream}"
topic = "{TOPIC}"
partitions = [0, 1]
poll_interval = "5ms"
commit_interval = "50ms"

[sink.s3]
bucket = "{bucket}"
endpoint = "http://{store}"
region = "{region}"
access_key_id = "{ak}"
secret_access_key = "{sk}"
prefix = "c/"
max_object_messages = 2000
idle_flush = "200ms"
request_timeout = "2s"
request_attempts = 3
retry_min = "100ms"
retry_max = "1s"
"#,
            iggy = self.iggy.addr(),
            user = self.iggy.username(),
            stream = self.stream,
            mqtt = self.mqtt.host_port(),
            bucket = self.s3.bucket(),
            store = self.store.host_port(),
            region = self.s3.region(),
            ak = self.s3.access_key(),
            sk = self.s3.secret_key(),
        )
    }

    fn start_engine(&self) -> Result<EngineProcess, String> {
        EngineProcess::start(
            &self.binary,
            &self.engine_config(),
            &[(spillway::config::ENV_IGGY_PASSWORD, self.iggy.password())],
        )
    }
}

/// Runs the campaign: `quick` for one minute, else three (or `SPILLWAY_BENCH_CHAOS_SECS`).
pub fn run(
    quick: bool,
    progress: &mut dyn FnMut(&str),
) -> Result<(Vec<Row>, String, Vec<String>), String> {
    let secs = std::env::var(SECS_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(if quick { 60 } else { 180 });
    let seed = std::env::var(SEED_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0xc4a05);
    let binary = engine_process::binary()?;
    let iggy = IggyProcess::start_with(IggyProcessOpts::new())
        .map_err(|e| format!("chaos needs the real Iggy server: {e}"))?;
    let broker = Mosquitto::start_default().map_err(|e| format!("mosquitto: {e}"))?;
    let mqtt = MqttCountProxy::start(broker.addr()).map_err(|e| format!("MQTT proxy: {e}"))?;
    let s3 = S3Server::start().map_err(|e| format!("s3s-fs: {e}"))?;
    let store = FaultProxy::start(s3.addr(), FaultPlan::passthrough())
        .map_err(|e| format!("fault proxy: {e}"))?;
    let world = World {
        iggy,
        broker,
        mqtt,
        s3,
        store,
        stream: format!("chaos-{seed:x}"),
        binary,
    };
    {
        let mut admin = world.admin()?;
        admin
            .create_stream(&world.stream)
            .map_err(|e| e.to_string())?;
        admin
            .create_topic(&world.stream, TOPIC, PARTITIONS)
            .map_err(|e| e.to_string())?;
    }
    let started = Instant::now();
    let outcome = campaign(world, Duration::from_secs(secs), seed, progress)?;
    let took = started.elapsed();
    Ok(report(&outcome, secs, seed, took))
}

fn campaign(
    mut world: World,
    length: Duration,
    seed: u64,
    progress: &mut dyn FnMut(&str),
) -> Result<Outcome, String> {
    let mut outcome = Outcome::default();
    let stop = Arc::new(AtomicBool::new(false));
    // While set, the producer holds its batches: the Iggy server is being killed.
    let pause = Arc::new(AtomicBool::new(false));
    let produced = Arc::new(AtomicU64::new(0));
    let addr = (
        world.iggy.addr(),
        world.iggy.username().to_owned(),
        world.iggy.password().to_owned(),
    );
    let producer = {
        let (stop, pause, produced) =
            (Arc::clone(&stop), Arc::clone(&pause), Arc::clone(&produced));
        let stream = world.stream.clone();
        let addr = addr.clone();
        std::thread::spawn(move || produce(&addr, &stream, &stop, &pause, &produced))
    };
    // The broker's acknowledgements so far, (partition, offset) -> count, and the stored
    // offsets' checks against them.
    let acked: Arc<Mutex<HashMap<(u32, u64), u32>>> = Arc::default();
    let premature: Arc<Mutex<Vec<String>>> = Arc::default();

    let mut rng = fastrand::Rng::with_seed(seed);
    let mut engine = Some(world.start_engine()?);
    let end = Instant::now() + length;
    let mut next_fault = Instant::now() + Duration::from_millis(rng.u64(1500..4000));
    let mut next_check = Instant::now();
    let mut admin = world.admin()?;
    while Instant::now() < end {
        collect_acks(&world.mqtt, &acked);
        if Instant::now() >= next_check {
            next_check = Instant::now() + Duration::from_millis(100);
            check_stored(&mut admin, &world, &acked, &premature, &addr);
        }
        if Instant::now() < next_fault {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        next_fault = Instant::now() + Duration::from_millis(rng.u64(1500..4000));
        let kind = FAULTS[rng.usize(..FAULTS.len())];
        progress(&format!(
            "{:>3}s: {kind}",
            length
                .saturating_sub(end.saturating_duration_since(Instant::now()))
                .as_secs()
        ));
        *outcome.faults.entry(kind).or_default() += 1;
        match kind {
            "engine SIGKILL" => {
                drop(engine.take());
                std::thread::sleep(Duration::from_millis(rng.u64(100..800)));
                engine = Some(world.start_engine()?);
            }
            "Iggy SIGKILL" => {
                pause.store(true, Ordering::SeqCst);
                // The producer's batch in flight finishes (and is flushed) first.
                std::thread::sleep(Duration::from_millis(300));
                world
                    .iggy
                    .kill_and_restart()
                    .map_err(|e| format!("restarting Iggy: {e}"))?;
                pause.store(false, Ordering::SeqCst);
                admin = reconnect(&addr)?;
            }
            "s3s-fs SIGKILL" => {
                world.s3.stop().map_err(|e| format!("s3s-fs: {e}"))?;
                std::thread::sleep(Duration::from_millis(rng.u64(200..1500)));
                world.s3.start_again().map_err(|e| format!("s3s-fs: {e}"))?;
            }
            "mosquitto restart" => {
                world
                    .broker
                    .stop_graceful(Duration::from_secs(5))
                    .map_err(|e| format!("mosquitto: {e}"))?;
                std::thread::sleep(Duration::from_millis(rng.u64(100..1000)));
                world
                    .broker
                    .start_again()
                    .map_err(|e| format!("mosquitto: {e}"))?;
            }
            "MQTT connections dropped" => world.mqtt.close_all(),
            "MQTT black hole (1 s)" => {
                world.mqtt.black_hole(true);
                std::thread::sleep(Duration::from_secs(1));
                world.mqtt.black_hole(false);
            }
            "S3 stall (share of requests, 2 s)" => {
                let plan = FaultPlan::seeded(rng.u64(..)).stall(0.3, Duration::from_secs(3));
                world.store.set_plan(plan).map_err(|e| e.to_string())?;
                std::thread::sleep(Duration::from_secs(2));
                world
                    .store
                    .set_plan(FaultPlan::passthrough())
                    .map_err(|e| e.to_string())?;
            }
            _ => {
                let plan = FaultPlan::seeded(rng.u64(..))
                    .drop_mid_body(0.1)
                    .status_500(0.1)
                    .slow_down_503(0.1);
                world.store.set_plan(plan).map_err(|e| e.to_string())?;
                std::thread::sleep(Duration::from_secs(2));
                world
                    .store
                    .set_plan(FaultPlan::passthrough())
                    .map_err(|e| e.to_string())?;
            }
        }
    }

    // The end: no more messages or faults; the engine (restarted if needed) catches up.
    stop.store(true, Ordering::SeqCst);
    let _ = producer.join();
    progress("catching up");
    let heads = heads(&mut reconnect(&addr)?, &world.stream)?;
    if engine
        .as_mut()
        .is_none_or(|e| e.try_exit().ok().flatten().is_some())
    {
        engine = Some(world.start_engine()?);
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        collect_acks(&world.mqtt, &acked);
        check_stored(&mut admin, &world, &acked, &premature, &addr);
        let mut done = true;
        for (p, head) in &heads {
            for sink in ["chaos-mqtt", "chaos-s3"] {
                let stored = admin
                    .stored_offset(
                        &TestConsumer::Named(sink.to_owned()),
                        &world.stream,
                        TOPIC,
                        *p,
                    )
                    .ok()
                    .flatten();
                done &= head.is_none_or(|h| stored.is_some_and(|s| s >= h));
            }
        }
        if done {
            break;
        }
        if Instant::now() > deadline {
            let log = engine.as_ref().map(|e| e.log_tail(30)).unwrap_or_default();
            return Err(format!(
                "the engine did not catch up within 120 s after the campaign; its log:\n{log}"
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if let Some(mut e) = engine.take() {
        e.stop(Duration::from_secs(30))?;
    }
    collect_acks(&world.mqtt, &acked);

    // Against what Iggy holds.
    let held = read_back(&mut admin, &world.stream, &heads)?;
    outcome.in_iggy = held.len() as u64;
    let records = s3_records(&world.s3)?;
    let acked = lock(&acked);
    for ((p, o), payload) in &held {
        match acked.get(&(*p, *o)) {
            None => {
                outcome.mqtt_lost += 1;
                note(
                    &mut outcome.first_problems,
                    format!("MQTT: offset {o} of partition {p} never acknowledged by the broker"),
                );
            }
            Some(n) => outcome.mqtt_duplicates += u64::from(n.saturating_sub(1)),
        }
        // The producer's payloads are JSON, embedded as JSON in the records.
        let payload: serde_json::Value = serde_json::from_slice(payload)
            .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(payload).into()));
        match records.get(&(*p, *o)) {
            None => {
                outcome.s3_lost += 1;
                note(
                    &mut outcome.first_problems,
                    format!("S3: offset {o} of partition {p} in no object"),
                );
            }
            Some(stored) => {
                outcome.s3_duplicates += (stored.len() as u64).saturating_sub(1);
                if stored.len() > 1 {
                    note(
                        &mut outcome.first_problems,
                        format!(
                            "S3: offset {o} of partition {p} in {} objects",
                            stored.len()
                        ),
                    );
                }
                if stored.iter().any(|s| *s != payload) {
                    outcome.s3_wrong_payload += 1;
                    note(
                        &mut outcome.first_problems,
                        format!("S3: offset {o} of partition {p} holds another payload"),
                    );
                }
            }
        }
    }
    let premature = lock(&premature);
    outcome.premature = premature.len() as u64;
    for p in premature.iter().take(5) {
        note(&mut outcome.first_problems, p.clone());
    }
    let _ = produced.load(Ordering::SeqCst);
    Ok(outcome)
}

fn note(list: &mut Vec<String>, what: String) {
    if list.len() < 10 {
        list.push(what);
    }
}

fn reconnect(addr: &(std::net::SocketAddr, String, String)) -> Result<IggyAdmin, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match IggyAdmin::connect(addr.0, &addr.1, &addr.2) {
            Ok(a) => return Ok(a),
            Err(e) if Instant::now() > deadline => return Err(format!("Iggy admin: {e}")),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Appends batches of [`BATCH`] messages to the partitions in turn, about 10,000 a second,
/// holding while `pause` is set and reconnecting after a failure.
fn produce(
    addr: &(std::net::SocketAddr, String, String),
    stream: &str,
    stop: &AtomicBool,
    pause: &AtomicBool,
    produced: &AtomicU64,
) {
    let mut admin: Option<IggyAdmin> = None;
    let mut seq = 0u64;
    let mut partition = 0u32;
    while !stop.load(Ordering::SeqCst) {
        if pause.load(Ordering::SeqCst) {
            admin = None;
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        let Some(a) = admin.as_mut() else {
            admin = IggyAdmin::connect(addr.0, &addr.1, &addr.2).ok();
            if admin.is_none() {
                std::thread::sleep(Duration::from_millis(100));
            }
            continue;
        };
        let batch: Vec<TestMessage> = (0..BATCH as u64)
            .map(|i| {
                TestMessage::new(
                    u128::from(seq + i + 1),
                    format!("{{\"seq\":{},\"p\":{partition}}}", seq + i).into_bytes(),
                )
            })
            .collect();
        match a.send(stream, TOPIC, partition, &batch) {
            Ok(()) => {
                seq += BATCH as u64;
                produced.fetch_add(BATCH as u64, Ordering::SeqCst);
                partition = (partition + 1) % PARTITIONS;
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(_) => {
                admin = None;
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Moves the broker's acknowledgements from the proxy into `acked`.
fn collect_acks(proxy: &MqttCountProxy, acked: &Mutex<HashMap<(u32, u64), u32>>) {
    let payloads = proxy.take_acked();
    if payloads.is_empty() {
        return;
    }
    let mut acked = lock(acked);
    for payload in payloads {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&payload) else {
            continue;
        };
        let meta = &v["metadata"];
        let (Some(p), Some(o)) = (json_u64(&meta["partition"]), json_u64(&meta["offset"])) else {
            continue;
        };
        *acked.entry((p as u32, o)).or_default() += 1;
    }
}

/// A number, or a string holding one (the envelope writes some metadata as strings).
fn json_u64(v: &serde_json::Value) -> Option<u64> {
    v.as_u64().or_else(|| v.as_str()?.parse().ok())
}

/// The offsets the MQTT sink stored must all have been acknowledged by the broker.
fn check_stored(
    admin: &mut IggyAdmin,
    world: &World,
    acked: &Mutex<HashMap<(u32, u64), u32>>,
    premature: &Mutex<Vec<String>>,
    addr: &(std::net::SocketAddr, String, String),
) {
    for p in 0..PARTITIONS {
        let stored = match admin.stored_offset(
            &TestConsumer::Named("chaos-mqtt".to_owned()),
            &world.stream,
            TOPIC,
            p,
        ) {
            Ok(s) => s,
            Err(_) => {
                // The server is restarting: next time.
                if let Ok(a) = IggyAdmin::connect(addr.0, &addr.1, &addr.2) {
                    *admin = a;
                }
                return;
            }
        };
        let Some(stored) = stored else { continue };
        // Acknowledgements read after the stored offset, so none is missed.
        collect_acks(&world.mqtt, acked);
        let acked = lock(acked);
        if let Some(o) = (0..=stored).find(|o| !acked.contains_key(&(p, *o))) {
            let mut list = lock(premature);
            if list.len() < 1000 {
                list.push(format!(
                    "MQTT: offset {stored} of partition {p} stored while offset {o} was not acknowledged"
                ));
            }
        }
    }
}

/// Each partition's last offset (`None`: empty).
fn heads(admin: &mut IggyAdmin, stream: &str) -> Result<Vec<(u32, Option<u64>)>, String> {
    let consumer = TestConsumer::Named("chaos-reader".to_owned());
    (0..PARTITIONS)
        .map(|p| {
            let batch = admin
                .poll_with(
                    &consumer,
                    stream,
                    TOPIC,
                    Some(p),
                    spillway_tests::TestPolling::Offset(0),
                    1,
                    false,
                )
                .map_err(|e| format!("reading the head of partition {p}: {e}"))?;
            Ok((
                p,
                (!batch.messages.is_empty()).then_some(batch.current_offset),
            ))
        })
        .collect()
}

/// Every message up to the heads, (partition, offset) -> payload.
fn read_back(
    admin: &mut IggyAdmin,
    stream: &str,
    heads: &[(u32, Option<u64>)],
) -> Result<BTreeMap<(u32, u64), Vec<u8>>, String> {
    let consumer = TestConsumer::Named("chaos-reader".to_owned());
    let mut out = BTreeMap::new();
    for (p, head) in heads {
        let Some(head) = head else { continue };
        let mut next = 0u64;
        while next <= *head {
            let got = admin
                .poll(&consumer, stream, TOPIC, *p, next, 1000)
                .map_err(|e| format!("reading partition {p} back: {e}"))?;
            if got.is_empty() {
                break;
            }
            for m in got {
                next = m.offset + 1;
                if m.offset <= *head {
                    out.insert((*p, m.offset), m.payload.to_vec());
                }
            }
        }
    }
    Ok(out)
}

/// Every record of the S3 sink's objects, (partition, offset) -> the payloads found (the JSON
/// payloads embedded as JSON).
fn s3_records(s3: &S3Server) -> Result<HashMap<(u32, u64), Vec<serde_json::Value>>, String> {
    let mut out: HashMap<(u32, u64), Vec<serde_json::Value>> = HashMap::new();
    let bucket = s3.bucket_dir();
    let files = spillway_tests::object_files(&bucket.join("c"))
        .map_err(|e| format!("listing the objects: {e}"))?;
    for path in files {
        let key = path
            .strip_prefix(&bucket)
            .map_or_else(|_| path.display().to_string(), |k| k.display().to_string());
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{key}: {e}"))?;
        for line in text.lines() {
            let v: serde_json::Value =
                serde_json::from_str(line).map_err(|e| format!("{key}: a damaged record: {e}"))?;
            let (Some(p), Some(o)) = (v["partition"].as_u64(), v["offset"].as_u64()) else {
                return Err(format!("{key}: a record without partition or offset"));
            };
            out.entry((p as u32, o))
                .or_default()
                .push(v["payload"].clone());
        }
    }
    Ok(out)
}

fn report(o: &Outcome, secs: u64, seed: u64, took: Duration) -> (Vec<Row>, String, Vec<String>) {
    let total: u64 = o.faults.values().sum();
    let mut text = String::new();
    let _ = writeln!(
        text,
        "\nspillway-bench chaos: {secs} s of faults (seed {seed:#x}, {:.0} s in all with the \
         catch-up) against the real Iggy server, mosquitto and s3s-fs; MQTT QoS 1 and S3 \
         json_lines sinks on 2 partitions\n",
        took.as_secs_f64()
    );
    let _ = writeln!(text, "faults injected: {total}");
    for (kind, n) in &o.faults {
        let _ = writeln!(text, "  {kind}: {n}");
    }
    let _ = writeln!(text, "\nmessages in Iggy: {}", o.in_iggy);
    let _ = writeln!(
        text,
        "MQTT (at least once): lost {}, duplicates {}\nS3 (exactly once): lost {}, duplicates {}, other payload {}\nstored before acknowledged (MQTT): {}",
        o.mqtt_lost, o.mqtt_duplicates, o.s3_lost, o.s3_duplicates, o.s3_wrong_payload, o.premature
    );
    for p in &o.first_problems {
        let _ = writeln!(text, "  {p}");
    }
    let mut problems = Vec::new();
    if o.mqtt_lost + o.s3_lost + o.s3_duplicates + o.s3_wrong_payload + o.premature > 0 {
        problems.push(format!(
            "chaos: {} lost to MQTT, {} lost / {} duplicated / {} changed in S3, {} stored early",
            o.mqtt_lost, o.s3_lost, o.s3_duplicates, o.s3_wrong_payload, o.premature
        ));
    }
    if o.in_iggy == 0 {
        problems.push("chaos: no message reached Iggy".to_owned());
    }
    let row = |metric: &'static str, value: f64, unit: &'static str| Row {
        scenario: format!("chaos_{secs}s"),
        metric,
        ours: value,
        peer: f64::NAN,
        peer_name: "-",
        unit,
        better: Better::Lower,
    };
    let rows = vec![
        Row {
            better: Better::Neither,
            ..row("faults", total as f64, "faults injected")
        },
        Row {
            better: Better::Neither,
            ..row("messages", o.in_iggy as f64, "messages in Iggy")
        },
        row("mqtt_lost", o.mqtt_lost as f64, "messages"),
        row("mqtt_duplicates", o.mqtt_duplicates as f64, "messages"),
        row("s3_lost", o.s3_lost as f64, "messages"),
        row("s3_duplicates", o.s3_duplicates as f64, "messages"),
        row("stored_early", o.premature as f64, "offsets"),
    ];
    (rows, text, problems)
}
