//! `spillway-bench chaos`: a fault campaign against the real servers, on loopback only.
//!
//! The real Iggy server (with a 2 s heartbeat: a group member silent for about 2.4 s is
//! evicted), mosquitto (behind the harness's MQTT count proxy) and s3s-fs (behind the fault
//! proxy, which also drops, fails and stalls a share of the requests). Two release engines, A
//! and B, each its own process with the same two sinks: an MQTT sink (QoS 1, JSON envelope) in
//! the consumer group `chaos-mqtt` and an S3 sink (json_lines, the same name and prefix in both)
//! in the group `chaos-s3`, both groups made by the campaign on a topic of four partitions, so
//! Iggy deals the partitions over the two engines and moves them whenever one leaves, is
//! evicted or comes back. Engine A reaches Iggy through a black-hole proxy (its broker and store
//! paths are direct). A producer appends messages all along; a nemesis, at seeded random
//! moments (every 1.5-4 s), does one of:
//! - SIGKILL engine A or B and start it again;
//! - pause engine A or B (SIGSTOP) for 3-6 s, past its eviction, then SIGCONT: the other
//!   engine takes its partitions over while the frozen one still believes it owns them (the
//!   S3 sink's fencing is what keeps its late objects from replacing its successor's);
//! - cut engine A off from Iggy alone for 4-7 s (its Iggy connections black-holed: nothing
//!   flows, nothing is closed) while its MQTT and S3 paths stay up, then restore the link;
//! - SIGKILL and restart the Iggy server or s3s-fs, restart mosquitto, drop every MQTT
//!   connection, black-hole the broker for 1 s, stall or fail a share of the S3 requests.
//!
//! After an Iggy restart the campaign clears the group members the server restores from
//! before it: Iggy 0.9.0-edge.5 brings them back without their sessions, never evicts them and
//! keeps dealing partitions to them, so those partitions would never be read again (a server
//! bug, not the engine's contract). With both engines frozen it reads each group's stored
//! offsets, deletes and re-creates the group, stores the offsets back as its only member and
//! thaws the engines, which join again (`Campaign::clear_restored_members`).
//!
//! **On a cluster** (`SPILLWAY_BENCH_CHAOS_CLUSTER=N`, N ≥ 3 nodes of the same server, see
//! `spillway_tests::IggyCluster`): both engines are given every node's address (no cut proxy),
//! and the Iggy faults (a cut, a kill) become leader kills: the node that leads is SIGKILLed,
//! another leads within the server's 5 s heartbeat timeout, the killed node is started again
//! 0.5-3 s later and brought in step before the next fault. The producer and the campaign's own
//! connections follow the leader; no group is re-created. Not part of `all` or CI; run by hand.
//!
//! Pauses and cuts run on while the next faults come (they overlap); a pause or a cut drawn while
//! one is under way extends it. The first fault of every run is a pause and the second a cut, so
//! even the one-minute run has both.
//!
//! The nemesis's seed is fresh each run, printed at the start and in the report;
//! `SPILLWAY_BENCH_CHAOS_SEED` (decimal, or hex with `0x` as printed) replays its choices (the
//! processes' own timing is not replayed). The engines' logs, the Iggy server's, the fault
//! timeline, a listing of the objects (`objects.txt`: key, partition, first and last offset)
//! and the S3 sink's markers are kept under `target/bench/chaos/<seed>-<unix time>/`.
//!
//! What is checked, at the end, against what Iggy holds (read back from offset 0):
//! - **MQTT, at least once**: every offset was acknowledged by the broker (PUBACK, counted by
//!   the proxy) at least once; more than once is counted as duplicates.
//! - **S3, exactly once**: every offset is in exactly one record of the complete objects, with
//!   Iggy's payload.
//! - **Never stored before it was confirmed**: every 100 ms the campaign reads the offsets the
//!   group `chaos-mqtt` stored in Iggy and checks that the broker had acknowledged every offset
//!   up to them by then; every second it reads the offsets the group `chaos-s3` stored, then
//!   the complete objects (s3s-fs renames an object into place when it is complete), and checks
//!   that every offset up to them is in one. The exactly-once check backs that up: an offset
//!   stored before its object was complete would, after the next SIGKILL or handover, never be
//!   written (delivery resumes past it).
//! - **The engines stay up**: one that exits by itself (it is started again) or does not stop
//!   cleanly on SIGTERM at the end fails the campaign; how long each took to stop is reported.
//!
//! The Iggy server is killed only with every message flushed: topics flush every 1,024
//! messages (the server's default), the producer sends batches of 1,024, and a SIGKILL loses
//! what was not flushed (the server's documented behaviour, not the engine's).
//!
//! The broker is restarted with SIGTERM (no persistence: it forgets what it holds, the engine
//! publishes again what was not acknowledged); a SIGKILLed broker loses what it acknowledged and
//! had not delivered yet, which is its own contract, and the campaign checks the engine's.

mod campaign;
mod support;
mod verdict;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use spillway_tests::iggy::{DEFAULT_CREDENTIALS, IggyCluster, LEADER_TIMEOUT, leader_admin};
use spillway_tests::{
    BlackHoleProxy, FaultPlan, FaultProxy, IggyAdmin, IggyProcess, IggyProcessOpts, Mosquitto,
    MqttCountProxy, S3Server, TestConsumer, TestMessage,
};

use crate::engine_process::{self, EngineProcess};
use crate::report::{self, Better, Row};

use self::support::*;
use self::verdict::*;

const TOPIC: &str = "chaos";
const PARTITIONS: u32 = 4;
/// The server flushes a topic every 1,024 messages: a batch of that many is on disk once
/// acknowledged.
const BATCH: usize = 1024;
/// The Iggy server's heartbeat interval: a group member that sends nothing for 1.2 x this is
/// evicted. The engines ping every 500 ms.
const HEARTBEAT: Duration = Duration::from_secs(2);
/// The MQTT sink's name and consumer group (the same in both engines).
const MQTT_SINK: &str = "chaos-mqtt";
/// The S3 sink's name and consumer group (the same in both engines).
const S3_SINK: &str = "chaos-s3";
/// The S3 sink's prefix (the same in both engines).
const PREFIX: &str = "c/";
/// The engines; A reaches Iggy through the black-hole proxy.
const ENGINES: [&str; 2] = ["A", "B"];
/// How long a pause lasts, ms: past the eviction (about 2.4 s).
const PAUSE_MS: Range<u64> = 3000..6000;
/// How long an Iggy cut lasts, ms: a few seconds past the eviction.
const CUT_MS: Range<u64> = 4000..7000;
/// Time between faults, ms.
const FAULT_EVERY_MS: Range<u64> = 1500..4000;
/// Seconds of campaign, instead of the default.
pub const SECS_ENV: &str = "SPILLWAY_BENCH_CHAOS_SECS";
/// Run against a replicated Iggy cluster of this many nodes (3 or more) instead of one server.
pub const CLUSTER_ENV: &str = "SPILLWAY_BENCH_CHAOS_CLUSTER";
/// The nemesis's seed (decimal, or hex with `0x`), instead of a fresh one.
pub const SEED_ENV: &str = "SPILLWAY_BENCH_CHAOS_SEED";

/// The kinds of fault, in the report's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    EngineKill,
    EnginePause,
    IggyCut,
    IggyKill,
    S3Kill,
    MosquittoRestart,
    MqttDrop,
    MqttBlackHole,
    S3Stall,
    S3Faults,
    IggyLeaderKill,
}

impl Fault {
    const ALL: [Fault; 11] = [
        Fault::EngineKill,
        Fault::EnginePause,
        Fault::IggyCut,
        Fault::IggyKill,
        Fault::S3Kill,
        Fault::MosquittoRestart,
        Fault::MqttDrop,
        Fault::MqttBlackHole,
        Fault::S3Stall,
        Fault::S3Faults,
        Fault::IggyLeaderKill,
    ];

    fn label(self) -> &'static str {
        match self {
            Fault::EngineKill => "engine SIGKILL + restart (A or B)",
            Fault::EnginePause => "engine pause (SIGSTOP 3-6 s, past the eviction)",
            Fault::IggyCut => "Iggy cut (A's Iggy link black-holed 4-7 s)",
            Fault::IggyKill => "Iggy SIGKILL",
            Fault::IggyLeaderKill => "Iggy leader SIGKILL + restart (cluster)",
            Fault::S3Kill => "s3s-fs SIGKILL",
            Fault::MosquittoRestart => "mosquitto restart",
            Fault::MqttDrop => "MQTT connections dropped",
            Fault::MqttBlackHole => "MQTT black hole (1 s)",
            Fault::S3Stall => "S3 stall (share of requests, 2 s)",
            Fault::S3Faults => "S3 faults (drops, 500, 503 for 2 s)",
        }
    }

    fn metric(self) -> &'static str {
        match self {
            Fault::EngineKill => "faults_engine_sigkill",
            Fault::EnginePause => "faults_engine_pause",
            Fault::IggyCut => "faults_iggy_cut",
            Fault::IggyKill => "faults_iggy_sigkill",
            Fault::IggyLeaderKill => "faults_iggy_leader_sigkill",
            Fault::S3Kill => "faults_s3s_fs_sigkill",
            Fault::MosquittoRestart => "faults_mosquitto_restart",
            Fault::MqttDrop => "faults_mqtt_dropped",
            Fault::MqttBlackHole => "faults_mqtt_black_hole",
            Fault::S3Stall => "faults_s3_stall",
            Fault::S3Faults => "faults_s3_faults",
        }
    }
}

/// What the campaign found.
#[derive(Debug, Default)]
struct Outcome {
    faults: BTreeMap<Fault, u64>,
    /// One line per fault: when, what, which engine, how long.
    timeline: Vec<String>,
    in_iggy: u64,
    mqtt_lost: u64,
    mqtt_duplicates: u64,
    s3_lost: u64,
    s3_duplicates: u64,
    s3_wrong_payload: u64,
    /// Offsets the MQTT group stored before the broker acknowledged them.
    premature: u64,
    /// Offsets the S3 group stored before they were in a complete object.
    s3_premature: u64,
    /// Engines that exited by themselves, or not cleanly when stopped at the end.
    engine_problems: Vec<String>,
    /// Group assignments the engines logged (a partition moving shows as two).
    assignments: u64,
    /// Times an engine found, at the store, that another member had taken its partition over.
    fenced: u64,
    /// How long each engine took to stop with SIGTERM at the end.
    stops: Vec<(&'static str, Duration)>,
    first_problems: Vec<String>,
    logs: PathBuf,
}

/// The seed: `SPILLWAY_BENCH_CHAOS_SEED` (decimal, or hex with `0x`), else a fresh one.
fn seed() -> Result<u64, String> {
    match std::env::var(SEED_ENV) {
        Ok(v) if !v.trim().is_empty() => {
            let v = v.trim();
            let parsed = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => v.parse::<u64>(),
            };
            parsed.map_err(|e| format!("{SEED_ENV}={v}: {e} (decimal, or hex with 0x)"))
        }
        _ => Ok(fastrand::u64(..)),
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
    let seed = seed()?;
    // On its own line: the progress line is overwritten.
    eprintln!("  chaos: nemesis seed {seed:#x} ({SEED_ENV}={seed:#x} replays its choices)");
    // One directory per run: a replay keeps the logs of the run it replays.
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let logs = report::workspace_root()
        .join("target")
        .join("bench")
        .join("chaos")
        .join(format!("{seed:x}-{now}"));
    std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    let binary = engine_process::binary()?;
    let cluster = std::env::var(CLUSTER_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .map(|v| match v.trim().parse::<usize>() {
            Ok(n) if n >= 3 => Ok(n),
            _ => Err(format!("{CLUSTER_ENV}={v}: a node count of 3 or more")),
        })
        .transpose()?;
    let iggy = match cluster {
        None => IggyKind::Single(Box::new(
            IggyProcess::start_with(IggyProcessOpts::new().heartbeat_interval(HEARTBEAT))
                .map_err(|e| format!("chaos needs the real Iggy server: {e}"))?,
        )),
        Some(n) => {
            let heartbeat = format!("{}ms", HEARTBEAT.as_millis());
            IggyKind::Cluster(
                IggyCluster::start_with(n, &[("IGGY_HEARTBEAT_INTERVAL", heartbeat.as_str())])
                    .map_err(|e| format!("chaos needs the real Iggy server as a cluster: {e}"))?,
            )
        }
    };
    let first = match &iggy {
        IggyKind::Single(p) => p.addr(),
        IggyKind::Cluster(c) => c.addr(0),
    };
    let cut = BlackHoleProxy::start(first).map_err(|e| format!("black-hole proxy: {e}"))?;
    let broker = Mosquitto::start_default().map_err(|e| format!("mosquitto: {e}"))?;
    let mqtt = MqttCountProxy::start(broker.addr()).map_err(|e| format!("MQTT proxy: {e}"))?;
    let s3 = S3Server::start().map_err(|e| format!("s3s-fs: {e}"))?;
    let store = FaultProxy::start(s3.addr(), FaultPlan::passthrough())
        .map_err(|e| format!("fault proxy: {e}"))?;
    let world = World {
        iggy,
        cut,
        broker,
        mqtt,
        s3,
        store,
        stream: format!("chaos-{seed:x}"),
        binary,
        logs,
    };
    {
        let mut admin = world.admin()?;
        admin
            .create_stream(&world.stream)
            .map_err(|e| e.to_string())?;
        admin
            .create_topic(&world.stream, TOPIC, PARTITIONS)
            .map_err(|e| e.to_string())?;
        for group in [MQTT_SINK, S3_SINK] {
            admin
                .create_consumer_group(&world.stream, TOPIC, group)
                .map_err(|e| format!("creating the consumer group {group}: {e}"))?;
        }
    }
    let started = Instant::now();
    let outcome = Campaign::new(world, seed, progress).run(Duration::from_secs(secs))?;
    let took = started.elapsed();
    Ok(report(&outcome, secs, seed, took))
}

/// Where the campaign's own Iggy connections go: the server, or whichever node of the cluster
/// leads.
#[derive(Clone)]
struct IggyAt {
    nodes: Vec<SocketAddr>,
    username: String,
    password: String,
}

impl IggyAt {
    fn connect(&self) -> Result<IggyAdmin, String> {
        leader_admin(&self.nodes, &self.username, &self.password)
            .map_err(|e| format!("Iggy admin: {e}"))
    }
}

/// The Iggy the campaign runs: one server, or a replicated cluster.
enum IggyKind {
    Single(Box<IggyProcess>),
    Cluster(IggyCluster),
}

struct World {
    iggy: IggyKind,
    /// Engine A's way to Iggy.
    cut: BlackHoleProxy,
    broker: Mosquitto,
    mqtt: MqttCountProxy,
    s3: S3Server,
    store: FaultProxy,
    stream: String,
    binary: PathBuf,
    /// Where the logs and the timeline go.
    logs: PathBuf,
}

impl World {
    fn iggy_at(&self) -> IggyAt {
        match &self.iggy {
            IggyKind::Single(p) => IggyAt {
                nodes: vec![p.addr()],
                username: p.username().to_owned(),
                password: p.password().to_owned(),
            },
            IggyKind::Cluster(c) => IggyAt {
                nodes: c.addrs(),
                username: DEFAULT_CREDENTIALS.0.to_owned(),
                password: DEFAULT_CREDENTIALS.1.to_owned(),
            },
        }
    }

    fn admin(&self) -> Result<IggyAdmin, String> {
        self.iggy_at().connect()
    }

    /// The config of engine `name`: A reaches Iggy through the black-hole proxy, B directly.
    fn engine_config(&self, name: &str) -> String {
        let at = self.iggy_at();
        let iggy = match &self.iggy {
            // On a cluster both engines are given every node: a cut of one proxied node would
            // not cut an engine that follows the leader elsewhere.
            IggyKind::Cluster(c) => c.addresses(),
            IggyKind::Single(_) if name == "A" => self.cut.host_port(),
            IggyKind::Single(p) => p.addr().to_string(),
        };
        let user = at.username;
        format!(
            r#"
[iggy]
address = "{iggy}"
username = "{user}"
reconnect_min = "50ms"
reconnect_max = "500ms"
ping_interval = "500ms"

[runtime]
shutdown_timeout = "20s"

[metrics]
address = ""
log_interval = "0s"

[[sink]]
name = "{MQTT_SINK}"
type = "mqtt"
stream = "{stream}"
topic = "{TOPIC}"
consumer_group = "{MQTT_SINK}"
group_sync_interval = "200ms"
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
name = "{S3_SINK}"
type = "s3"
stream = "{stream}"
topic = "{TOPIC}"
consumer_group = "{S3_SINK}"
group_sync_interval = "200ms"
poll_interval = "5ms"
commit_interval = "50ms"

[sink.s3]
bucket = "{bucket}"
endpoint = "http://{store}"
region = "{region}"
access_key_id = "{ak}"
secret_access_key = "{sk}"
prefix = "{PREFIX}"
max_object_messages = 2000
idle_flush = "200ms"
request_timeout = "2s"
request_attempts = 3
retry_min = "100ms"
retry_max = "1s"
"#,
            stream = self.stream,
            mqtt = self.mqtt.host_port(),
            bucket = self.s3.bucket(),
            store = self.store.host_port(),
            region = self.s3.region(),
            ak = self.s3.access_key(),
            sk = self.s3.secret_key(),
        )
    }
}

/// One of the two engines.
struct Member {
    name: &'static str,
    process: Option<EngineProcess>,
    /// Processes started so far (the log files are numbered by it).
    runs: u32,
    /// Frozen (SIGSTOP) until then.
    paused_until: Option<Instant>,
}

/// The S3 objects seen so far: each complete object's records, read once (s3s-fs renames an
/// object into place when it is complete, and the sink writes a key once).
#[derive(Default)]
struct SeenObjects {
    files: HashMap<PathBuf, (u64, Option<SystemTime>)>,
    present: HashSet<(u32, u64)>,
}

struct Campaign<'a> {
    world: World,
    members: Vec<Member>,
    addr: IggyAt,
    admin: Option<IggyAdmin>,
    /// The broker's acknowledgements so far, (partition, offset) -> count.
    acked: HashMap<(u32, u64), u32>,
    /// Per partition, every offset below it was acknowledged / is in an object.
    mqtt_verified: Vec<u64>,
    s3_verified: Vec<u64>,
    objects: SeenObjects,
    next_check: Instant,
    next_s3_check: Instant,
    /// Engine A's Iggy link is black-holed until then.
    cut_until: Option<Instant>,
    outcome: Outcome,
    started: Instant,
    rng: fastrand::Rng,
    progress: &'a mut dyn FnMut(&str),
}
