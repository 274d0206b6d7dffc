//! `spillway-bench mqtt`: 100-byte messages over one MQTT 5 connection, QoS 0, 1 and 2, from
//! ours (the Spillway engine's MQTT sink, fed by its `generate` source) and from the peer,
//! rumqttc 0.25 (the client of the proposed Apache Iggy MQTT sink), in the same run, to the
//! same broker, with the same settings:
//!
//! - **mosquitto** (started by the bench through the test harness, `max_inflight_messages`
//!   = the window, so that its MQTT 5 Receive Maximum is the window too), with a counting
//!   subscriber ([`subscriber`]) on the run's topic: 200,000 messages, window 100. The
//!   subscription is QoS 0 for every row and both clients, so the broker forwards each message
//!   once at the cheapest level and its work per message is the publisher-facing flow under
//!   test; every delivery is still counted, and a run where deliveries != messages sent is
//!   flagged in the table and makes the command fail after writing its report.
//! - **a discard broker** in this process ([`discard`]: acknowledges as fast as it can,
//!   Receive Maximum 65535): 2,000,000 messages for ours, window 1000; the peer, for
//!   reference, with the same window and [`PEER_DISCARD_MESSAGES`] messages (it is many
//!   times slower, and a run of millions would take minutes).
//!
//! Both clients use MQTT 5 (rumqttc's `v5` client), no topic aliases (ours: `topic_aliases =
//! 0`; the peer has none unless set per message), the same topic (one per run), no retain.
//!
//! **Timing.** A run's clock starts just before the client starts (the engine's config is
//! parsed before; its threads, runtime, connection and CONNECT are inside the clock, as the
//! peer's runtime, connection and CONNECT are) and stops when the receiving end (the
//! subscriber, or the discard broker) has counted the last message: the same observer for
//! both clients, whatever each does at its end. msgs/s = messages / that time. The client is
//! then waited for (the engine exits by itself once every message is confirmed; the peer once
//! it has counted every PUBACK / PUBCOMP, or every written PUBLISH at QoS 0).
//!
//! **Publisher CPU** (µs per message): the CPU time (user + system) of every thread the
//! publisher ran, from its start until it has exited: the process's CPU time minus that of
//! the bench's own threads over the same interval (see [`cpu`]). For ours that is the shard
//! thread and the control thread; for the peer its tokio thread (and any blocking-pool
//! thread tokio starts).
//!
//! **Broker CPU** (mosquitto): its CPU time over the run's clock divided by that time, in % of
//! one core. mosquitto is single-threaded: near 100% the broker is the limit, not the client.
//!
//! Placement: the publisher (ours' shard, the peer's thread) is pinned to the last allowed
//! core, mosquitto to the others (on two cores: the first, which ours' control thread, pinned
//! there by the engine, shares but mostly sleeps through). Unpinned, the scheduler often woke
//! mosquitto on the publisher's core (the core of the thread that woke it), where the two
//! slowed each other while the other core idled, and the figures varied from run to run.
//! The subscriber runs unpinned at `SCHED_IDLE` priority on whatever a core leaves idle (see
//! [`subscriber`]); the discard broker's threads are pinned to the broker's cores.
//!
//! Each figure is the median of the runs (3; 1 with `--quick`, which also sends 10x fewer
//! messages); the clients' runs alternate. To profile, narrow the runs down: set
//! `SPILLWAY_BENCH_MQTT_CLIENTS` to `ours` or `rumqttc`, and `SPILLWAY_BENCH_MQTT_CASES` to
//! some of `mosquitto-qos0` … `discard-qos2` (comma-separated); `SPILLWAY_BENCH_MQTT_ACK_BATCHING`
//! (`true`/`false`) overrides the sink's `ack_batching`; `SPILLWAY_BENCH_MQTT_NAGLE=1` runs
//! mosquitto as shipped, with Nagle's algorithm on (no `set_tcp_nodelay true`). Built without the `peers`
//! feature the peer is compiled out and ours is measured alone.

/// `1`: mosquitto with Nagle's algorithm on, as shipped.
const NAGLE_ENV: &str = "SPILLWAY_BENCH_MQTT_NAGLE";

pub(crate) mod cpu;
pub mod discard;
pub mod ours;
#[cfg(feature = "peers")]
mod peer;
mod results;
pub(crate) mod subscriber;
pub(crate) mod tally;
mod wire;

/// A stand-in for the peer when it is not compiled in.
#[cfg(not(feature = "peers"))]
mod peer {
    use super::Job;

    pub const AVAILABLE: bool = false;

    #[derive(Debug)]
    pub struct Running;

    impl Running {
        pub fn finish(self) -> Result<std::time::Instant, String> {
            Err("built without the `peers` feature".into())
        }

        pub fn is_finished(&self) -> bool {
            true
        }
    }

    pub fn start(_: &Job<'_>) -> Result<Running, String> {
        Err("built without the `peers` feature".into())
    }
}

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use spillway::coremap::Machine;
use spillway_codec::{Protocol, QoS};
use spillway_tests::{Mosquitto, MosquittoOpts};

use crate::report::{self, Row};
use discard::DiscardBroker;
use results::Measured;
use subscriber::CountingSubscriber;
use tally::{Tally, Waited};

/// The protocol of both clients.
pub const PROTOCOL: Protocol = Protocol::V5;
/// Payload size.
pub const SIZE: usize = 100;
/// The window (QoS 1/2 messages in flight) against mosquitto.
pub const MOSQUITTO_WINDOW: u16 = 100;
/// The window against the discard broker.
pub const DISCARD_WINDOW: u16 = 1000;
/// The subscriber's subscription QoS (the same for every row and both clients).
pub const SUBSCRIPTION_QOS: QoS = QoS::AtMostOnce;
/// The peer's message count against the discard broker (full runs).
pub const PEER_DISCARD_MESSAGES: u64 = 500_000;

pub const PEER: &str = "rumqttc 0.25";
const ONLY_ENV: &str = "SPILLWAY_BENCH_MQTT_CLIENTS";
const CASES_ENV: &str = "SPILLWAY_BENCH_MQTT_CASES";

/// A run that makes no progress for this long is given up (and flagged).
const IDLE: Duration = Duration::from_secs(20);

/// One run to make.
#[derive(Debug, Clone)]
pub struct Job<'a> {
    /// Unique per run: the sink name / client id.
    pub name: &'a str,
    pub addr: SocketAddr,
    pub protocol: Protocol,
    pub qos: u8,
    pub messages: u64,
    pub window: u16,
    pub topic: &'a str,
    pub size: usize,
    /// The core the publisher runs on.
    pub core: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    Ours,
    Peer,
}

impl Client {
    fn name(self) -> &'static str {
        match self {
            Client::Ours => "ours",
            Client::Peer => PEER,
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Client::Ours => "ours",
            Client::Peer => "rumqttc",
        }
    }
}

enum Started {
    Ours(ours::Running),
    Peer(peer::Running),
}

impl Started {
    fn start(client: Client, job: &Job<'_>) -> Result<Started, String> {
        Ok(match client {
            Client::Ours => Started::Ours(ours::start(job)?),
            Client::Peer => Started::Peer(peer::start(job)?),
        })
    }

    fn finish(self, deadline: Instant) -> Result<Instant, String> {
        match self {
            Started::Ours(r) => r.finish(deadline),
            Started::Peer(r) => r.finish(),
        }
    }

    /// Whether the client has ended (done or failed).
    fn is_finished(&self) -> bool {
        match self {
            Started::Ours(r) => r.is_finished(),
            Started::Peer(r) => r.is_finished(),
        }
    }
}

/// What one run measured.
#[derive(Debug, Clone, Copy)]
struct Sample {
    /// Start to the last delivery counted (or to giving up).
    wall: Duration,
    /// The publisher's CPU time.
    cpu: Duration,
    /// mosquitto's CPU over `wall`, in % of one core.
    broker_percent: f64,
    delivered: u64,
    sent: u64,
    /// No progress for [`IDLE`]: the run was given up.
    stalled: bool,
    /// Allocations on the engine's shard thread over the run (ours only; the engine's start,
    /// its connection and its end included).
    shard_allocs: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BrokerKind {
    Mosquitto,
    Discard,
}

impl BrokerKind {
    fn name(self) -> &'static str {
        match self {
            BrokerKind::Mosquitto => "mosquitto",
            BrokerKind::Discard => "discard",
        }
    }
}

enum Broker<'a> {
    Mosquitto(&'a Mosquitto, Option<cpu::ProcessCpu>),
    Discard(&'a DiscardBroker),
}

impl Broker<'_> {
    fn kind(&self) -> BrokerKind {
        match self {
            Broker::Mosquitto(..) => BrokerKind::Mosquitto,
            Broker::Discard(_) => BrokerKind::Discard,
        }
    }

    fn addr(&self) -> SocketAddr {
        match self {
            Broker::Mosquitto(m, _) => m.addr(),
            Broker::Discard(d) => d.addr(),
        }
    }

    fn broker_cpu(&self) -> Option<Duration> {
        match self {
            Broker::Mosquitto(_, Some(c)) => c.read(),
            _ => None,
        }
    }

    fn context(&self) -> String {
        match self {
            Broker::Mosquitto(m, _) => format!("\nmosquitto log:\n{}", m.log_tail(20)),
            Broker::Discard(d) => format!(
                " (the discard broker accepted {} connections, received {:?} PUBLISH at QoS \
                 0/1/2; last connection error: {})",
                d.connections(),
                d.publishes(),
                d.last_error().unwrap_or_else(|| "none".into())
            ),
        }
    }
}

/// The core the publisher runs on: the last allowed core (the engine's control thread takes
/// the first).
fn publisher_core() -> usize {
    Machine::detect().cores.last().copied().unwrap_or(0)
}

/// The cores of the broker: all but the publisher's (none on a one-core machine).
fn broker_cores() -> Vec<usize> {
    let publisher = publisher_core();
    Machine::detect()
        .cores
        .into_iter()
        .filter(|c| *c != publisher)
        .collect()
}

/// One run of `client` to `broker`.
fn one_run(
    client: Client,
    broker: &Broker<'_>,
    qos: u8,
    messages: u64,
    window: u16,
    name: &str,
) -> Result<Sample, String> {
    let topic = format!("bench/spillway/{name}");
    let job = Job {
        name,
        addr: broker.addr(),
        protocol: PROTOCOL,
        qos,
        messages,
        window,
        topic: &topic,
        size: SIZE,
        core: publisher_core(),
    };
    let subscriber = match broker {
        Broker::Mosquitto(m, _) => Some(
            CountingSubscriber::connect(
                m.addr(),
                PROTOCOL,
                &topic,
                SUBSCRIPTION_QOS,
                &format!("sub-{name}"),
            )
            .map_err(|e| format!("the counting subscriber: {e}"))?,
        ),
        Broker::Discard(_) => None,
    };
    let tally: &Tally = match (&subscriber, broker) {
        (Some(s), _) => s.tally(),
        (None, Broker::Discard(d)) => d.tally(),
        (None, Broker::Mosquitto(..)) => return Err("no subscriber".into()),
    };
    let base = tally.arm(messages);
    let broker_before = broker.broker_cpu();
    let meter = cpu::PublisherMeter::start();
    let allocs = (client == Client::Ours).then(crate::harness::ShardAllocs::start);
    let t0 = Instant::now();
    let started = Started::start(client, &job)?;
    let waited = tally.wait(IDLE, t0 + Duration::from_secs(900), &|| {
        started.is_finished()
    });
    let seen = Instant::now();
    let broker_after = broker.broker_cpu();
    let (wall, stalled) = match waited {
        Waited::Reached(at) => (at.duration_since(t0), false),
        Waited::Stalled => (seen.duration_since(t0), true),
    };
    let finished = started.finish(Instant::now() + Duration::from_secs(30));
    let cpu = meter.spent();
    let shard_allocs = allocs.map(crate::harness::ShardAllocs::stop);
    let delivered = tally.count() - base;
    if let Err(e) = finished {
        return Err(format!(
            "{e}; {delivered} of {messages} messages had arrived{}",
            broker.context()
        ));
    }
    if let Some(s) = subscriber {
        s.finish().map_err(|e| {
            format!(
                "the counting subscriber failed after {delivered} of {messages} deliveries: \
                 {e}{}",
                broker.context()
            )
        })?;
    }
    let broker_percent = match (broker_before, broker_after) {
        (Some(b), Some(a)) => {
            a.saturating_sub(b).as_secs_f64() / seen.duration_since(t0).as_secs_f64() * 100.0
        }
        _ => f64::NAN,
    };
    Ok(Sample {
        wall,
        cpu,
        broker_percent,
        delivered,
        sent: messages,
        stalled,
        shard_allocs,
    })
}

/// How much and how often.
#[derive(Debug, Clone, Copy)]
struct Plan {
    mosquitto_messages: u64,
    discard_messages: u64,
    peer_discard_messages: u64,
    runs: usize,
    /// One untimed run per client and broker first (a tenth of the messages, QoS 1).
    warmup: bool,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                mosquitto_messages: 20_000,
                discard_messages: 200_000,
                peer_discard_messages: 50_000,
                runs: 1,
                warmup: false,
            }
        } else {
            Plan {
                mosquitto_messages: 200_000,
                discard_messages: 2_000_000,
                peer_discard_messages: PEER_DISCARD_MESSAGES,
                runs: 3,
                warmup: true,
            }
        }
    }
}

/// Measures `clients` on `broker` at QoS 0, 1 and 2, runs interleaved.
fn measure(
    clients: &[Client],
    broker: &Broker<'_>,
    plan: &Plan,
    cases: &dyn Fn(BrokerKind, u8) -> bool,
    seq: &mut u64,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Measured>, String> {
    let kind = broker.kind();
    let window = match kind {
        BrokerKind::Mosquitto => MOSQUITTO_WINDOW,
        BrokerKind::Discard => DISCARD_WINDOW,
    };
    let count = |client: Client| match (kind, client) {
        (BrokerKind::Mosquitto, _) => plan.mosquitto_messages,
        (BrokerKind::Discard, Client::Ours) => plan.discard_messages,
        (BrokerKind::Discard, Client::Peer) => plan.peer_discard_messages,
    };
    let mut run = |client: Client, qos: u8, messages: u64, what: &str| {
        *seq += 1;
        let name = format!("{}-{}-q{qos}-{}", client.tag(), kind.name(), *seq);
        progress(&format!(
            "{}: {} QoS {qos} {what}",
            kind.name(),
            client.name()
        ));
        one_run(client, broker, qos, messages, window, &name).map_err(|e| {
            format!(
                "{} at QoS {qos} to {} ({what}): {e}",
                client.name(),
                kind.name()
            )
        })
    };
    if !(0..=2).any(|q| cases(kind, q)) {
        return Ok(Vec::new());
    }
    if plan.warmup {
        for &client in clients {
            run(client, 1, count(client) / 10, "warm-up")?;
        }
    }
    let mut out = Vec::new();
    for qos in (0..=2u8).filter(|q| cases(kind, *q)) {
        let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); clients.len()];
        for r in 0..plan.runs {
            let n = clients.len();
            for i in (0..n).map(|k| (k + r) % n) {
                let client = clients[i];
                let what = format!("run {}/{}", r + 1, plan.runs);
                samples[i].push(run(client, qos, count(client), &what)?);
            }
        }
        for (&client, s) in clients.iter().zip(&samples) {
            out.push(results::summarize(kind, qos, client, window, s));
        }
    }
    Ok(out)
}

/// The scenario's report: JSON rows, the text to print, and the problems (deliveries that did
/// not match) that must fail the command once the report is out.
#[derive(Debug)]
pub struct Outcome {
    pub rows: Vec<Row>,
    pub text: String,
    pub problems: Vec<String>,
}

/// Runs the scenario.
pub fn run(quick: bool, progress: &mut dyn FnMut(&str)) -> Result<Outcome, String> {
    let plan = Plan::new(quick);
    let only: Option<Vec<String>> = std::env::var(ONLY_ENV)
        .ok()
        .map(|v| v.split(',').map(|t| t.trim().to_owned()).collect());
    let wanted = |c: &Client| only.as_ref().is_none_or(|o| o.iter().any(|t| t == c.tag()));
    let mut clients = vec![Client::Ours];
    if peer::AVAILABLE {
        clients.push(Client::Peer);
    }
    clients.retain(wanted);
    if clients.is_empty() {
        return Err(format!(
            "{ONLY_ENV} names no client that is built in (ours, rumqttc)"
        ));
    }
    let case_list: Option<Vec<String>> = std::env::var(CASES_ENV)
        .ok()
        .map(|v| v.split(',').map(|t| t.trim().to_owned()).collect());
    let cases = |broker: BrokerKind, qos: u8| {
        let tag = format!("{}-qos{qos}", broker.name());
        case_list.as_ref().is_none_or(|l| l.contains(&tag))
    };
    // This thread only waits during runs: its CPU is the bench's, not the publisher's.
    let _main = cpu::helper_thread();
    let mut seq = 0;

    let mut opts = MosquittoOpts::new()
        .max_inflight_messages(MOSQUITTO_WINDOW)
        .max_queued_messages(0);
    if std::env::var(NAGLE_ENV).is_ok_and(|v| v == "1") {
        opts = opts.nagle();
    }
    let mosquitto = Mosquitto::start(opts).map_err(|e| format!("starting mosquitto: {e}"))?;
    let mosquitto_cpu = mosquitto.pid().map(cpu::ProcessCpu::of);
    let broker_cores = broker_cores();
    if let (Some(pid), false) = (mosquitto.pid(), broker_cores.is_empty()) {
        cpu::pin_process(pid, &broker_cores)
            .map_err(|e| format!("pinning mosquitto to cores {broker_cores:?}: {e}"))?;
    }
    let mut results = measure(
        &clients,
        &Broker::Mosquitto(&mosquitto, mosquitto_cpu),
        &plan,
        &cases,
        &mut seq,
        progress,
    )?;
    drop(mosquitto);

    let discard =
        DiscardBroker::start(&broker_cores).map_err(|e| format!("discard broker: {e}"))?;
    results.extend(measure(
        &clients,
        &Broker::Discard(&discard),
        &plan,
        &cases,
        &mut seq,
        progress,
    )?);
    drop(discard);

    let rows = results::rows(&results);
    let mut text = String::new();
    let _ = writeln!(
        text,
        "\nspillway-bench mqtt: {SIZE} B messages, one MQTT 5 connection, QoS 0/1/2, \
         publisher on core {}; median of {} run(s){}\n  mosquitto: {} messages, window \
         {MOSQUITTO_WINDOW} (max_inflight_messages {MOSQUITTO_WINDOW}), a counting subscriber \
         at QoS {}\n  discard broker (in-process): {} messages for ours, {} for rumqttc, \
         window {DISCARD_WINDOW}",
        publisher_core(),
        plan.runs,
        if peer::AVAILABLE {
            ""
        } else {
            "; built without the `peers` feature: rumqttc not measured"
        },
        plan.mosquitto_messages,
        SUBSCRIPTION_QOS as u8,
        plan.discard_messages,
        plan.peer_discard_messages,
    );
    let _ = writeln!(text, "\nevery client (median)");
    text.push_str(&results::results_table(&results));
    text.push_str(
        "  msgs/s: messages / time from the client's start to the last delivery counted by \
         the subscriber (mosquitto) or the discard broker\n  CPU µs/msg: the publisher's \
         CPU (user + system, all its threads); msgs/CPU-s: messages per publisher CPU second\n  \
         broker CPU: mosquitto's CPU over the run, % of one core (~100%: the broker is the \
         limit)\n  delivered: \"all\" when every run's deliveries equal the messages sent\n\n",
    );
    text.push_str(&report::peer_table(
        "throughput (median, higher is better)",
        &rows,
        "msgs_per_s",
    ));
    text.push('\n');
    text.push_str(&report::peer_table(
        "publisher CPU per message (median, lower is better)",
        &rows,
        "cpu_us_per_msg",
    ));
    let _ = writeln!(text, "\ntargets");
    for line in results::target_lines(&results) {
        let _ = writeln!(text, "  {line}");
    }
    let problems: Vec<String> = results
        .iter()
        .flat_map(|m| {
            m.bad_runs
                .iter()
                .map(move |r| format!("{} QoS {} {}: {r}", m.broker.name(), m.qos, m.client.name()))
        })
        .collect();
    if !problems.is_empty() {
        let _ = writeln!(text, "\ndeliveries that do not match the messages sent:");
        for p in &problems {
            let _ = writeln!(text, "  {p}");
        }
    }
    Ok(Outcome {
        rows,
        text,
        problems,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use spillway_codec::{EncodeOptions, MqttStr, Packet, PacketId, Publish};
    use std::io::Write as _;

    #[test]
    fn the_subscriber_counts_what_mosquitto_delivers() -> Result<(), String> {
        let m = Mosquitto::start(MosquittoOpts::new().max_inflight_messages(100))
            .map_err(|e| e.to_string())?;
        // MQTT 5 subscribed at QoS 0, 3.1.1 at QoS 2 (delivered at QoS 1, so the subscriber's
        // PUBACKs are what lets mosquitto deliver more than its 100 in flight).
        for (protocol, sub_qos, pub_qos) in [
            (Protocol::V5, QoS::AtMostOnce, QoS::AtMostOnce),
            (Protocol::V311, QoS::ExactlyOnce, QoS::AtLeastOnce),
        ] {
            let topic = format!("t/{}", protocol.level());
            let sub = CountingSubscriber::connect(m.addr(), protocol, &topic, sub_qos, "s1")?;
            let base = sub.tally().arm(300);
            let mut s = std::net::TcpStream::connect(m.addr()).map_err(|e| e.to_string())?;
            let opts = EncodeOptions::new(protocol);
            let mut out = BytesMut::new();
            let connect = spillway_codec::Connect::new(
                protocol,
                MqttStr::from_str("p1").map_err(|e| e.to_string())?,
            );
            Packet::Connect(Box::new(connect))
                .encode(&mut out, &opts)
                .map_err(|e| e.to_string())?;
            // 300 messages at once (3.1.1 has no Receive Maximum; the PUBACKs are not read).
            for id in 1..=300u16 {
                let mut p = Publish::new(
                    MqttStr::from_str(&topic).map_err(|e| e.to_string())?,
                    Bytes::from_static(&[1; 100]),
                );
                p.qos = pub_qos;
                p.packet_id = (pub_qos != QoS::AtMostOnce)
                    .then_some(PacketId::new(id))
                    .flatten();
                Packet::Publish(p)
                    .encode(&mut out, &opts)
                    .map_err(|e| e.to_string())?;
            }
            s.write_all(&out).map_err(|e| e.to_string())?;
            let waited = sub.tally().wait(
                Duration::from_secs(5),
                Instant::now() + Duration::from_secs(10),
                &|| false,
            );
            assert!(
                matches!(waited, Waited::Reached(_)),
                "{protocol}: {}",
                sub.tally().count()
            );
            assert_eq!(sub.tally().count() - base, 300);
            sub.finish()?;
        }
        Ok(())
    }
}
