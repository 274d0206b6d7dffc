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

impl<'a> Campaign<'a> {
    fn new(world: World, seed: u64, progress: &'a mut dyn FnMut(&str)) -> Campaign<'a> {
        let addr = world.iggy_at();
        let outcome = Outcome {
            logs: world.logs.clone(),
            ..Outcome::default()
        };
        Campaign {
            members: ENGINES
                .iter()
                .map(|&name| Member {
                    name,
                    process: None,
                    runs: 0,
                    paused_until: None,
                })
                .collect(),
            world,
            addr,
            admin: None,
            acked: HashMap::new(),
            mqtt_verified: vec![0; PARTITIONS as usize],
            s3_verified: vec![0; PARTITIONS as usize],
            objects: SeenObjects::default(),
            next_check: Instant::now(),
            next_s3_check: Instant::now(),
            cut_until: None,
            outcome,
            started: Instant::now(),
            rng: fastrand::Rng::with_seed(seed),
            progress,
        }
    }

    fn run(mut self, length: Duration) -> Result<Outcome, String> {
        let stop = Arc::new(AtomicBool::new(false));
        // While set, the producer holds its batches: the Iggy server is being killed.
        let hold = Arc::new(AtomicBool::new(false));
        let producer = {
            let (stop, hold) = (Arc::clone(&stop), Arc::clone(&hold));
            let stream = self.world.stream.clone();
            let addr = self.addr.clone();
            std::thread::spawn(move || produce(&addr, &stream, &stop, &hold))
        };
        let result = self.faults(length, &hold);
        stop.store(true, Ordering::SeqCst);
        let _ = producer.join();
        if let Err(e) = result {
            self.save_logs();
            return Err(format!(
                "{e}\nfault timeline:\n  {}\nlogs: {}",
                self.outcome.timeline.join("\n  "),
                self.world.logs.display()
            ));
        }
        self.finish()
    }

    /// The campaign proper: the engines in their group, then a fault every 1.5-4 s.
    fn faults(&mut self, length: Duration, hold: &AtomicBool) -> Result<(), String> {
        for i in 0..self.members.len() {
            self.start_member(i)?;
        }
        self.await_assignments()?;
        self.started = Instant::now();
        let end = self.started + length;
        let mut next_fault = Instant::now() + Duration::from_millis(self.rng.u64(FAULT_EVERY_MS));
        while Instant::now() < end {
            self.tick()?;
            if Instant::now() < next_fault {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            next_fault = Instant::now() + Duration::from_millis(self.rng.u64(FAULT_EVERY_MS));
            // Every fault draws the same values, whichever it is, so a seed replays the same
            // choices even when timing makes one of them extend a pause or a cut.
            // A run on one server draws from the kinds before the leader kill, as it always did
            // (a seed replays the same choices).
            let kinds = match self.world.iggy {
                IggyKind::Single(_) => &Fault::ALL[..Fault::ALL.len() - 1],
                IggyKind::Cluster(_) => &Fault::ALL[..],
            };
            let drawn = kinds[self.rng.usize(..kinds.len())];
            let target = self.rng.usize(..self.members.len());
            let fraction = self.rng.f64();
            let sub_seed = self.rng.u64(..);
            // The first two faults are always a pause and a cut: even the one-minute run has
            // both.
            let injected: u64 = self.outcome.faults.values().sum();
            let kind = match injected {
                0 => Fault::EnginePause,
                1 => Fault::IggyCut,
                _ => drawn,
            };
            // On a cluster the Iggy faults are leader kills: the engines are given every node
            // (no cut proxy), and a kill of a whole one-node server is the single run's.
            let kind = match (&self.world.iggy, kind) {
                (IggyKind::Cluster(_), Fault::IggyCut | Fault::IggyKill) => Fault::IggyLeaderKill,
                (IggyKind::Single(_), Fault::IggyLeaderKill) => Fault::IggyKill,
                (_, kind) => kind,
            };
            *self.outcome.faults.entry(kind).or_default() += 1;
            self.inject(kind, target, fraction, sub_seed, hold)?;
        }
        Ok(())
    }

    fn within(range: &Range<u64>, fraction: f64) -> Duration {
        let span = (range.end - range.start) as f64;
        Duration::from_millis(range.start + (span * fraction) as u64)
    }

    fn note_fault(&mut self, what: String) {
        let line = format!("{:>5.1}s  {what}", self.started.elapsed().as_secs_f64());
        (self.progress)(&line);
        self.outcome.timeline.push(line);
    }

    fn inject(
        &mut self,
        kind: Fault,
        target: usize,
        fraction: f64,
        sub_seed: u64,
        hold: &AtomicBool,
    ) -> Result<(), String> {
        let name = self.members[target].name;
        match kind {
            Fault::EngineKill => {
                let gap = Self::within(&(100..800), fraction);
                self.note_fault(format!(
                    "{}: engine {name}, restarted after {} ms",
                    kind.label(),
                    gap.as_millis()
                ));
                self.retire_member(target);
                self.wait(gap)?;
                self.start_member(target)?;
            }
            Fault::EnginePause => {
                let d = Self::within(&PAUSE_MS, fraction);
                let until = Instant::now() + d;
                let member = &mut self.members[target];
                let extended = member.paused_until.is_some();
                member.paused_until = Some(member.paused_until.map_or(until, |u| u.max(until)));
                if let Some(p) = &member.process {
                    p.pause();
                }
                self.note_fault(format!(
                    "{}: engine {name} frozen {} ms{}",
                    kind.label(),
                    d.as_millis(),
                    if extended {
                        " (already frozen: extended)"
                    } else {
                        ""
                    }
                ));
            }
            Fault::IggyCut => {
                let d = Self::within(&CUT_MS, fraction);
                let until = Instant::now() + d;
                let extended = self.cut_until.is_some();
                self.cut_until = Some(self.cut_until.map_or(until, |u| u.max(until)));
                self.world.cut.black_hole(true);
                self.note_fault(format!(
                    "{}: engine A cut off from Iggy {} ms{}",
                    kind.label(),
                    d.as_millis(),
                    if extended {
                        " (already cut: extended)"
                    } else {
                        ""
                    }
                ));
            }
            Fault::IggyKill => {
                let settle = Self::within(&(300..1500), fraction);
                self.note_fault(format!(
                    "{}: the restored group members cleared {} ms after the restart",
                    kind.label(),
                    settle.as_millis()
                ));
                hold.store(true, Ordering::SeqCst);
                // The producer's batch in flight finishes (and is flushed) first.
                self.wait(Duration::from_millis(300))?;
                self.admin = None;
                let restarted = match &mut self.world.iggy {
                    IggyKind::Single(p) => p.kill_and_restart(),
                    IggyKind::Cluster(c) => c.restart_all(),
                };
                hold.store(false, Ordering::SeqCst);
                restarted.map_err(|e| format!("restarting Iggy: {e}"))?;
                // The engines reconnect and join again meanwhile.
                self.wait(settle)?;
                self.clear_restored_members()?;
            }
            Fault::IggyLeaderKill => self.kill_leader(fraction)?,
            Fault::S3Kill => {
                let gap = Self::within(&(200..1500), fraction);
                self.note_fault(format!("{}: down {} ms", kind.label(), gap.as_millis()));
                self.world.s3.stop().map_err(|e| format!("s3s-fs: {e}"))?;
                self.wait(gap)?;
                self.world
                    .s3
                    .start_again()
                    .map_err(|e| format!("s3s-fs: {e}"))?;
            }
            Fault::MosquittoRestart => {
                let gap = Self::within(&(100..1000), fraction);
                self.note_fault(format!("{}: down {} ms", kind.label(), gap.as_millis()));
                self.world
                    .broker
                    .stop_graceful(Duration::from_secs(5))
                    .map_err(|e| format!("mosquitto: {e}"))?;
                self.wait(gap)?;
                self.world
                    .broker
                    .start_again()
                    .map_err(|e| format!("mosquitto: {e}"))?;
            }
            Fault::MqttDrop => {
                self.note_fault(kind.label().to_owned());
                self.world.mqtt.close_all();
            }
            Fault::MqttBlackHole => {
                self.note_fault(kind.label().to_owned());
                self.world.mqtt.black_hole(true);
                let waited = self.wait(Duration::from_secs(1));
                self.world.mqtt.black_hole(false);
                waited?;
            }
            Fault::S3Stall => {
                self.note_fault(kind.label().to_owned());
                let plan = FaultPlan::seeded(sub_seed).stall(0.3, Duration::from_secs(3));
                self.s3_plan_for(plan, Duration::from_secs(2))?;
            }
            Fault::S3Faults => {
                self.note_fault(kind.label().to_owned());
                let plan = FaultPlan::seeded(sub_seed)
                    .drop_mid_body(0.1)
                    .status_500(0.1)
                    .slow_down_503(0.1);
                self.s3_plan_for(plan, Duration::from_secs(2))?;
            }
        }
        Ok(())
    }

    /// On a cluster: SIGKILLs the node that leads, waits for another to lead, keeps the killed
    /// one down 0.5-3 s more, starts it again and waits until it is in step (it holds what the
    /// leader holds), so that the next kill leaves a quorum. The producer and the engines go on
    /// throughout; they follow the new leader by themselves.
    fn kill_leader(&mut self, fraction: f64) -> Result<(), String> {
        let down = Self::within(&(500..3000), fraction);
        let stream = self.world.stream.clone();
        let IggyKind::Cluster(cluster) = &mut self.world.iggy else {
            return Ok(());
        };
        let leader = cluster
            .wait_for_leader(LEADER_TIMEOUT)
            .map_err(|e| format!("the cluster before a leader kill: {e}"))?;
        let killed = Instant::now();
        cluster.kill(leader).map_err(|e| e.to_string())?;
        let next = cluster
            .wait_for_new_leader(leader, LEADER_TIMEOUT)
            .map_err(|e| format!("after killing leader node {leader}: {e}"))?;
        let elected = killed.elapsed();
        self.admin = None;
        self.note_fault(format!(
            "{}: node {leader} killed, node {next} led after {} ms; back after {} ms more",
            Fault::IggyLeaderKill.label(),
            elected.as_millis(),
            down.as_millis()
        ));
        self.wait(down)?;
        let IggyKind::Cluster(cluster) = &mut self.world.iggy else {
            return Ok(());
        };
        cluster.restart(leader).map_err(|e| e.to_string())?;
        cluster
            .wait_in_step(leader, &stream, TOPIC, Duration::from_secs(20))
            .map_err(|e| format!("node {leader} after its restart: {e}"))?;
        Ok(())
    }

    /// After an Iggy restart: the server restores each group's members from before it (their
    /// sessions gone), never evicts them, and keeps dealing partitions to them, so those
    /// partitions are never read again (Iggy 0.9.0-edge.5, after SIGKILL and SIGTERM alike).
    /// Not the engine's contract: the campaign clears them. With both engines frozen (SIGSTOP,
    /// so that neither stores an offset or joins meanwhile), it reads each group's stored
    /// offsets, deletes and re-creates the group, joins it as its only member, stores the
    /// offsets back, leaves, and thaws the engines (a paused one stays paused until its time);
    /// they find they are no longer members and join again.
    fn clear_restored_members(&mut self) -> Result<(), String> {
        let frozen: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.members[i].paused_until.is_none())
            .collect();
        for &i in &frozen {
            if let Some(p) = &self.members[i].process {
                p.pause();
            }
        }
        // Requests the engines had sent reach the server first.
        std::thread::sleep(Duration::from_millis(200));
        let result = self.recreate_groups();
        for &i in &frozen {
            if let Some(p) = &self.members[i].process {
                p.resume();
            }
        }
        result
    }

    fn recreate_groups(&mut self) -> Result<(), String> {
        let stream = self.world.stream.clone();
        let mut admin = reconnect(&self.addr)?;
        for group in [MQTT_SINK, S3_SINK] {
            let consumer = TestConsumer::Group(group.to_owned());
            let e = |what: &str, e: spillway_tests::HarnessError| {
                format!("clearing the group {group} after the Iggy restart: {what}: {e}")
            };
            let stored = (0..PARTITIONS)
                .map(|p| admin.stored_offset(&consumer, &stream, TOPIC, p))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|x| e("reading its offsets", x))?;
            admin
                .delete_consumer_group(&stream, TOPIC, group)
                .map_err(|x| e("deleting it", x))?;
            admin
                .create_consumer_group(&stream, TOPIC, group)
                .map_err(|x| e("creating it", x))?;
            admin
                .join_group(&stream, TOPIC, group)
                .map_err(|x| e("joining it", x))?;
            let assigned = admin
                .sync_group(&stream, TOPIC, group)
                .map_err(|x| e("reading the assignment", x))?;
            if assigned.as_ref().map(|(_, parts)| parts.len()) != Some(PARTITIONS as usize) {
                return Err(format!(
                    "clearing the group {group} after the Iggy restart: its only member was \
                     assigned {assigned:?}, not every partition"
                ));
            }
            for (p, offset) in (0..PARTITIONS).zip(&stored) {
                if let Some(offset) = offset {
                    admin
                        .store_offset(&consumer, &stream, TOPIC, p, *offset)
                        .map_err(|x| e("storing its offsets back", x))?;
                }
            }
            admin
                .leave_group(&stream, TOPIC, group)
                .map_err(|x| e("leaving it", x))?;
        }
        Ok(())
    }

    fn s3_plan_for(&mut self, plan: FaultPlan, d: Duration) -> Result<(), String> {
        self.world.store.set_plan(plan).map_err(|e| e.to_string())?;
        let waited = self.wait(d);
        self.world
            .store
            .set_plan(FaultPlan::passthrough())
            .map_err(|e| e.to_string())?;
        waited
    }

    /// Waits `d`, doing the periodic work meanwhile.
    fn wait(&mut self, d: Duration) -> Result<(), String> {
        let until = Instant::now() + d;
        loop {
            self.tick()?;
            let now = Instant::now();
            if now >= until {
                return Ok(());
            }
            std::thread::sleep((until - now).min(Duration::from_millis(20)));
        }
    }

    /// The periodic work: the broker's acknowledgements, the stored-offset checks, thawing
    /// paused engines and restoring the cut when due, and engines that exited by themselves.
    fn tick(&mut self) -> Result<(), String> {
        collect_acks(&self.world.mqtt, &mut self.acked);
        let now = Instant::now();
        for m in &mut self.members {
            if m.paused_until.is_some_and(|u| u <= now) {
                m.paused_until = None;
                if let Some(p) = &m.process {
                    p.resume();
                }
            }
        }
        if self.cut_until.is_some_and(|u| u <= now) {
            self.cut_until = None;
            self.world.cut.black_hole(false);
        }
        if now >= self.next_check {
            self.next_check = now + Duration::from_millis(100);
            self.check_mqtt_stored();
            self.check_exits()?;
        }
        if now >= self.next_s3_check {
            self.next_s3_check = now + Duration::from_secs(1);
            self.check_s3_stored();
        }
        Ok(())
    }

    fn start_member(&mut self, i: usize) -> Result<(), String> {
        let name = self.members[i].name;
        let config = self.world.engine_config(name);
        let password = self.world.iggy_at().password;
        let process = EngineProcess::start(
            &self.world.binary,
            &config,
            &[
                (spillway::config::ENV_IGGY_PASSWORD, password.as_str()),
                ("NO_COLOR", "1"),
            ],
        )?;
        let m = &mut self.members[i];
        m.runs += 1;
        m.paused_until = None;
        m.process = Some(process);
        Ok(())
    }

    /// SIGKILLs engine `i` (frozen or not) and keeps its log.
    fn retire_member(&mut self, i: usize) {
        let m = &mut self.members[i];
        m.paused_until = None;
        if let Some(mut p) = m.process.take() {
            p.kill();
            let (name, run) = (m.name, m.runs);
            self.keep_log(name, run, &p.log());
        }
    }

    /// Writes an engine's log beside the others and counts what it shows.
    fn keep_log(&mut self, name: &str, run: u32, log: &str) {
        let path = self.world.logs.join(format!("engine-{name}-{run}.log"));
        let _ = std::fs::write(&path, log);
        for line in log.lines() {
            if line.contains("consumer group assignment") {
                self.outcome.assignments += 1;
            }
            if line.contains("is owned by another member in the store") {
                self.outcome.fenced += 1;
            }
        }
    }

    /// Kills every engine still running (keeping their logs) and writes the Iggy server's log
    /// and the timeline.
    fn save_logs(&mut self) {
        for i in 0..self.members.len() {
            self.retire_member(i);
        }
        let iggy_log = match &self.world.iggy {
            IggyKind::Single(p) => p.log(),
            IggyKind::Cluster(c) => c.logs(),
        };
        let _ = std::fs::write(self.world.logs.join("iggy.log"), iggy_log);
        let _ = std::fs::write(
            self.world.logs.join("timeline.txt"),
            self.outcome.timeline.join("\n") + "\n",
        );
        dump_store(&self.world.s3, &self.world.logs);
    }

    /// Waits until both engines logged a group assignment for both sinks.
    fn await_assignments(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            self.tick()?;
            let ready = self.members.iter().all(|m| {
                m.process
                    .as_ref()
                    .is_some_and(|p| p.log().matches("consumer group assignment").count() >= 2)
            });
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                let tails = self
                    .members
                    .iter()
                    .map(|m| {
                        let tail = m
                            .process
                            .as_ref()
                            .map(|p| p.log_tail(20))
                            .unwrap_or_default();
                        format!("engine {}:\n{tail}", m.name)
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                return Err(format!(
                    "the engines got no group assignment within 30 s:\n{tails}"
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// An engine that exited by itself is a problem: noted (with its log), and started again
    /// so that the campaign goes on.
    fn check_exits(&mut self) -> Result<(), String> {
        for i in 0..self.members.len() {
            let Some(p) = self.members[i].process.as_mut() else {
                continue;
            };
            let how = match p.try_exit() {
                Ok(None) => continue,
                Ok(Some(_)) => "exited 0 by itself".to_owned(),
                Err(e) => e,
            };
            let name = self.members[i].name;
            let at = self.started.elapsed().as_secs_f64();
            let line = format!("{at:>5.1}s  engine {name} exited by itself: {how}");
            self.outcome.timeline.push(line.clone());
            self.outcome.engine_problems.push(line);
            self.retire_member(i);
            self.start_member(i)?;
        }
        Ok(())
    }

    /// The admin connection, connected again if it was lost.
    fn admin(&mut self) -> Option<&mut IggyAdmin> {
        if self.admin.is_none() {
            self.admin = self.addr.connect().ok();
        }
        self.admin.as_mut()
    }

    /// The stored offset of `group` on `partition`; `Err` when Iggy did not answer (the
    /// connection is dropped and made again next time).
    fn group_stored(&mut self, group: &str, partition: u32) -> Result<Option<u64>, ()> {
        let stream = self.world.stream.clone();
        let Some(admin) = self.admin() else {
            return Err(());
        };
        match admin.stored_offset(
            &TestConsumer::Group(group.to_owned()),
            &stream,
            TOPIC,
            partition,
        ) {
            Ok(s) => Ok(s),
            Err(_) => {
                self.admin = None;
                Err(())
            }
        }
    }

    /// The offsets the MQTT group stored must all have been acknowledged by the broker.
    fn check_mqtt_stored(&mut self) {
        for p in 0..PARTITIONS {
            // The server is restarting, or the connection was lost: next time.
            let Ok(stored) = self.group_stored(MQTT_SINK, p) else {
                return;
            };
            let Some(stored) = stored else { continue };
            // Acknowledgements read after the stored offset, so none is missed.
            collect_acks(&self.world.mqtt, &mut self.acked);
            let from = self.mqtt_verified[p as usize];
            let missing = (from..=stored).find(|o| !self.acked.contains_key(&(p, *o)));
            if let Some(o) = missing {
                self.outcome.premature += 1;
                note(
                    &mut self.outcome.first_problems,
                    format!(
                        "MQTT: the group stored offset {stored} of partition {p} while offset \
                         {o} was not acknowledged ({:.1} s)",
                        self.started.elapsed().as_secs_f64()
                    ),
                );
            }
            // Reported once: the next check starts past it.
            self.mqtt_verified[p as usize] = self.mqtt_verified[p as usize].max(stored + 1);
        }
    }

    /// The offsets the S3 group stored must all be in complete objects.
    fn check_s3_stored(&mut self) {
        let mut stored = Vec::new();
        for p in 0..PARTITIONS {
            let Ok(s) = self.group_stored(S3_SINK, p) else {
                return;
            };
            stored.push(s);
        }
        // The objects after the stored offsets, so none completed before is missed.
        if self.objects.scan(&self.world.s3).is_err() {
            return;
        }
        for (p, s) in (0..PARTITIONS).zip(stored) {
            let Some(s) = s else { continue };
            let from = self.s3_verified[p as usize];
            let missing = (from..=s).find(|o| !self.objects.present.contains(&(p, *o)));
            if let Some(o) = missing {
                self.outcome.s3_premature += 1;
                note(
                    &mut self.outcome.first_problems,
                    format!(
                        "S3: the group stored offset {s} of partition {p} while offset {o} was \
                         in no complete object ({:.1} s)",
                        self.started.elapsed().as_secs_f64()
                    ),
                );
            }
            self.s3_verified[p as usize] = self.s3_verified[p as usize].max(s + 1);
        }
    }

    /// The end: no more faults; the engines (restarted if needed) catch up, stop, and every
    /// offset is checked.
    fn finish(mut self) -> Result<Outcome, String> {
        (self.progress)("catching up");
        for m in &mut self.members {
            m.paused_until = None;
            if let Some(p) = &m.process {
                p.resume();
            }
        }
        self.cut_until = None;
        self.world.cut.black_hole(false);
        let heads = heads(&mut reconnect(&self.addr)?, &self.world.stream)?;
        for i in 0..self.members.len() {
            if self.members[i].process.is_none() {
                self.start_member(i)?;
            }
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            self.tick()?;
            let mut done = true;
            for (p, head) in &heads {
                let Some(head) = head else { continue };
                for group in [MQTT_SINK, S3_SINK] {
                    let stored = self.group_stored(group, *p).ok().flatten();
                    done &= stored.is_some_and(|s| s >= *head);
                }
            }
            if done {
                break;
            }
            if Instant::now() > deadline {
                let mut stored = String::new();
                for (p, head) in &heads {
                    let m = self.group_stored(MQTT_SINK, *p).ok().flatten();
                    let s = self.group_stored(S3_SINK, *p).ok().flatten();
                    let _ = write!(
                        stored,
                        "\n  partition {p}: head {head:?}, stored by {MQTT_SINK} {m:?}, by \
                         {S3_SINK} {s:?}"
                    );
                }
                let tails = self
                    .members
                    .iter()
                    .map(|m| {
                        let tail = m
                            .process
                            .as_ref()
                            .map(|p| p.log_tail(30))
                            .unwrap_or_default();
                        format!("engine {}'s log:\n{tail}", m.name)
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                self.save_logs();
                return Err(format!(
                    "the engines did not catch up within 120 s after the campaign:{stored}\n\
                     fault timeline:\n  {}\n{tails}\nlogs: {}",
                    self.outcome.timeline.join("\n  "),
                    self.world.logs.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // A last look at the stored offsets, then a clean stop of both.
        self.check_s3_stored();
        for i in 0..self.members.len() {
            let name = self.members[i].name;
            if let Some(p) = self.members[i].process.as_mut() {
                let asked = Instant::now();
                if let Err(e) = p.stop(Duration::from_secs(30)) {
                    self.outcome.engine_problems.push(format!(
                        "engine {name}, stopped with SIGTERM at the end: {e}"
                    ));
                }
                self.outcome.stops.push((name, asked.elapsed()));
            }
            self.retire_member(i);
        }
        self.save_logs();
        collect_acks(&self.world.mqtt, &mut self.acked);
        self.compare(&heads)?;
        Ok(self.outcome)
    }

    /// Against what Iggy holds.
    fn compare(&mut self, heads: &[(u32, Option<u64>)]) -> Result<(), String> {
        let held = read_back(&mut reconnect(&self.addr)?, &self.world.stream, heads)?;
        let o = &mut self.outcome;
        o.in_iggy = held.len() as u64;
        let records = s3_records(&self.world.s3)?;
        for ((p, off), payload) in &held {
            match self.acked.get(&(*p, *off)) {
                None => {
                    o.mqtt_lost += 1;
                    note(
                        &mut o.first_problems,
                        format!(
                            "MQTT: offset {off} of partition {p} never acknowledged by the broker"
                        ),
                    );
                }
                Some(n) => o.mqtt_duplicates += u64::from(n.saturating_sub(1)),
            }
            // The producer's payloads are JSON, embedded as JSON in the records.
            let payload: serde_json::Value = serde_json::from_slice(payload).unwrap_or_else(|_| {
                serde_json::Value::String(String::from_utf8_lossy(payload).into())
            });
            match records.get(&(*p, *off)) {
                None => {
                    o.s3_lost += 1;
                    note(
                        &mut o.first_problems,
                        format!("S3: offset {off} of partition {p} in no object"),
                    );
                }
                Some(stored) => {
                    o.s3_duplicates += (stored.len() as u64).saturating_sub(1);
                    if stored.len() > 1 {
                        note(
                            &mut o.first_problems,
                            format!(
                                "S3: offset {off} of partition {p} in {} objects: {}",
                                stored.len(),
                                stored
                                    .iter()
                                    .map(|(key, _)| key.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        );
                    }
                    if stored.iter().any(|(_, s)| *s != payload) {
                        o.s3_wrong_payload += 1;
                        note(
                            &mut o.first_problems,
                            format!("S3: offset {off} of partition {p} holds another payload"),
                        );
                    }
                }
            }
        }
        Ok(())
    }
}

impl SeenObjects {
    /// Reads the objects not read yet (or changed since).
    fn scan(&mut self, s3: &S3Server) -> Result<(), String> {
        let bucket = s3.bucket_dir();
        let dir = bucket.join(PREFIX.trim_end_matches('/'));
        if !dir.exists() {
            return Ok(());
        }
        let files = spillway_tests::object_files(&dir).map_err(|e| e.to_string())?;
        for path in files {
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            let stamp = (meta.len(), meta.modified().ok());
            if self.files.get(&path) == Some(&stamp) {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            for line in text.lines() {
                let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                    continue;
                };
                if let (Some(p), Some(o)) = (v["partition"].as_u64(), v["offset"].as_u64()) {
                    self.present.insert((p as u32, o));
                }
            }
            self.files.insert(path, stamp);
        }
        Ok(())
    }
}

fn note(list: &mut Vec<String>, what: String) {
    if list.len() < 10 {
        list.push(what);
    }
}

fn reconnect(addr: &IggyAt) -> Result<IggyAdmin, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match addr.connect() {
            Ok(a) => return Ok(a),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Appends batches of [`BATCH`] messages to the partitions in turn, about 10,000 a second,
/// holding while `hold` is set and reconnecting after a failure.
fn produce(addr: &IggyAt, stream: &str, stop: &AtomicBool, hold: &AtomicBool) {
    let mut admin: Option<IggyAdmin> = None;
    let mut seq = 0u64;
    let mut partition = 0u32;
    while !stop.load(Ordering::SeqCst) {
        if hold.load(Ordering::SeqCst) {
            admin = None;
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        let Some(a) = admin.as_mut() else {
            admin = addr.connect().ok();
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
fn collect_acks(proxy: &MqttCountProxy, acked: &mut HashMap<(u32, u64), u32>) {
    for payload in proxy.take_acked() {
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

/// (partition, offset) -> (key, payload) of each record found.
type Records = HashMap<(u32, u64), Vec<(String, serde_json::Value)>>;

/// Every record of the S3 sink's objects (the JSON payloads embedded as JSON).
fn s3_records(s3: &S3Server) -> Result<Records, String> {
    let mut out = Records::new();
    let bucket = s3.bucket_dir();
    let dir = bucket.join(PREFIX.trim_end_matches('/'));
    if !dir.exists() {
        return Ok(out);
    }
    let files =
        spillway_tests::object_files(&dir).map_err(|e| format!("listing the objects: {e}"))?;
    for path in files {
        let key = key_of(&bucket, &path);
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{key}: {e}"))?;
        for line in text.lines() {
            let v: serde_json::Value =
                serde_json::from_str(line).map_err(|e| format!("{key}: a damaged record: {e}"))?;
            let (Some(p), Some(o)) = (v["partition"].as_u64(), v["offset"].as_u64()) else {
                return Err(format!("{key}: a record without partition or offset"));
            };
            out.entry((p as u32, o))
                .or_default()
                .push((key.clone(), v["payload"].clone()));
        }
    }
    Ok(out)
}

/// Keeps what the store holds beside the logs: `objects.txt` (every object's key, partition,
/// first and last offset and records, in partition and offset order) and the sink's markers
/// (`markers/`, the JSON of each partition's marker).
fn dump_store(s3: &S3Server, logs: &Path) {
    let bucket = s3.bucket_dir();
    let dir = bucket.join(PREFIX.trim_end_matches('/'));
    let mut rows: Vec<(u64, u64, String)> = Vec::new();
    for path in spillway_tests::object_files(&dir).unwrap_or_default() {
        let key = key_of(&bucket, &path);
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let mut span: Option<(u64, u64, u64)> = None;
        let mut records = 0u64;
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let (Some(p), Some(o)) = (v["partition"].as_u64(), v["offset"].as_u64()) else {
                continue;
            };
            records += 1;
            span = Some(span.map_or((p, o, o), |(p, a, b)| (p, a.min(o), b.max(o))));
        }
        let (p, first, last) = span.unwrap_or((u64::MAX, 0, 0));
        rows.push((p, first, format!("{p}\t{first}\t{last}\t{records}\t{key}")));
    }
    rows.sort();
    let mut text = String::from("partition\tfirst\tlast\trecords\tkey\n");
    for (_, _, row) in rows {
        text.push_str(&row);
        text.push('\n');
    }
    let _ = std::fs::write(logs.join("objects.txt"), text);
    // The markers: c/.spillway/<sink>/<stream>/<topic>/<partition>.json.
    let markers = logs.join("markers");
    let mut stack = vec![dir.join(".spillway")];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if !path.to_string_lossy().ends_with(".metadata.json") {
                let name = key_of(&bucket, &path).replace('/', "_");
                let _ = std::fs::create_dir_all(&markers);
                let _ = std::fs::copy(&path, markers.join(name));
            }
        }
    }
}

fn key_of(bucket: &Path, path: &Path) -> String {
    path.strip_prefix(bucket)
        .map_or_else(|_| path.display().to_string(), |k| k.display().to_string())
}

fn report(o: &Outcome, secs: u64, seed: u64, took: Duration) -> (Vec<Row>, String, Vec<String>) {
    let total: u64 = o.faults.values().sum();
    let mut text = String::new();
    let _ = writeln!(
        text,
        "\nspillway-bench chaos: {secs} s of faults (seed {seed:#x}: {SEED_ENV}={seed:#x} replays \
         it; {:.0} s in all with the catch-up) against the real Iggy server (2 s heartbeat), \
         mosquitto and s3s-fs; two engines in the consumer groups {MQTT_SINK} (MQTT QoS 1) and \
         {S3_SINK} (S3 json_lines) on {PARTITIONS} partitions\n",
        took.as_secs_f64()
    );
    let _ = writeln!(text, "faults injected: {total}");
    for kind in Fault::ALL {
        let n = o.faults.get(&kind).copied().unwrap_or(0);
        let _ = writeln!(text, "  {}: {n}", kind.label());
    }
    let _ = writeln!(text, "\nfault timeline:");
    for line in &o.timeline {
        let _ = writeln!(text, "  {line}");
    }
    let _ = writeln!(
        text,
        "\ngroup assignments logged by the engines: {}; S3 partitions fenced (taken over by the \
         other engine at the store): {}",
        o.assignments, o.fenced
    );
    let stops: Vec<String> = o
        .stops
        .iter()
        .map(|(name, took)| {
            // The engines run with runtime.shutdown_timeout = "20s".
            let cut_short = if *took >= Duration::from_secs(19) {
                " (drained until runtime.shutdown_timeout: see its log)"
            } else {
                ""
            };
            format!("{name} {:.1} s{cut_short}", took.as_secs_f64())
        })
        .collect();
    let _ = writeln!(
        text,
        "engines stopped with SIGTERM at the end in: {}",
        stops.join(", ")
    );
    let _ = writeln!(text, "messages in Iggy: {}", o.in_iggy);
    let _ = writeln!(
        text,
        "MQTT (at least once): lost {}, duplicates {}\nS3 (exactly once): lost {}, duplicates {}, \
         other payload {}\nstored before confirmed: MQTT {}, S3 {}",
        o.mqtt_lost,
        o.mqtt_duplicates,
        o.s3_lost,
        o.s3_duplicates,
        o.s3_wrong_payload,
        o.premature,
        o.s3_premature
    );
    for p in &o.engine_problems {
        let _ = writeln!(text, "  {p}");
    }
    for p in &o.first_problems {
        let _ = writeln!(text, "  {p}");
    }
    let _ = writeln!(text, "logs and timeline: {}", o.logs.display());
    let mut problems = Vec::new();
    let early = o.premature + o.s3_premature;
    if o.mqtt_lost + o.s3_lost + o.s3_duplicates + o.s3_wrong_payload + early > 0 {
        problems.push(format!(
            "chaos (seed {seed:#x}): {} lost to MQTT, {} lost / {} duplicated / {} changed in S3, \
             {} stored early (MQTT {}, S3 {}); logs in {}",
            o.mqtt_lost,
            o.s3_lost,
            o.s3_duplicates,
            o.s3_wrong_payload,
            early,
            o.premature,
            o.s3_premature,
            o.logs.display()
        ));
    }
    for p in &o.engine_problems {
        problems.push(format!("chaos (seed {seed:#x}): {p}"));
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
    let mut rows = vec![Row {
        better: Better::Neither,
        ..row("faults", total as f64, "faults injected")
    }];
    for kind in Fault::ALL {
        rows.push(Row {
            better: Better::Neither,
            ..row(
                kind.metric(),
                o.faults.get(&kind).copied().unwrap_or(0) as f64,
                "faults injected",
            )
        });
    }
    rows.extend([
        Row {
            better: Better::Neither,
            ..row("messages", o.in_iggy as f64, "messages in Iggy")
        },
        Row {
            better: Better::Neither,
            ..row(
                "group_assignments",
                o.assignments as f64,
                "assignments logged",
            )
        },
        Row {
            better: Better::Neither,
            ..row("s3_fenced", o.fenced as f64, "partitions fenced")
        },
        row("mqtt_lost", o.mqtt_lost as f64, "messages"),
        row("mqtt_duplicates", o.mqtt_duplicates as f64, "messages"),
        row("s3_lost", o.s3_lost as f64, "messages"),
        row("s3_duplicates", o.s3_duplicates as f64, "messages"),
        row("stored_early", o.premature as f64, "offsets"),
        row("s3_stored_early", o.s3_premature as f64, "offsets"),
        row(
            "engine_problems",
            o.engine_problems.len() as f64,
            "engine exits",
        ),
    ]);
    (rows, text, problems)
}
