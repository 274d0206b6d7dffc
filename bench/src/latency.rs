//! `spillway-bench latency`: how long a message waits between being offered to Iggy and its
//! delivery being confirmed, at fixed offered rates from light load to near saturation, for
//! MQTT QoS 1 (mosquitto) and for S3 objects (s3s-fs).
//!
//! Each run starts the `spillway` binary (one shard, one partition, the pipeline scenario's
//! sink settings) on a fresh topic, confirms one warm-up message, then a producer in a process
//! of its own (`spillway-bench latency-producer`, so that the bench's subscriber and watcher
//! threads do not delay it) sends 100-byte JSON messages into Iggy on a fixed schedule by the
//! wall clock: message `i` is due at `t0 + (i - 1) / rate`. Latency is measured from that scheduled time, not from when the
//! message was actually sent or polled, so a stall anywhere (the engine, the broker, the
//! producer itself) delays every message behind it in the figures: the correction for
//! coordinated omission that wrk2 makes, by construction rather than by back-filling.
//!
//! - MQTT QoS 1: the message carries its scheduled time; a QoS 0 subscriber on mosquitto
//!   records `arrival - scheduled`. mosquitto sends the PUBACK as it forwards, so arrival at
//!   the subscriber stands for the engine's confirmation. The sink runs with
//!   `envelope = "properties"`, so every message also carries Iggy's append timestamp
//!   (`iggy-timestamp`, µs): `arrival - appended` is the latency without the producer's own
//!   delay (append to confirm). The engine's own poll-to-confirm histogram
//!   (`spillway_poll_to_confirm_seconds`, read from its `/metrics` after the run) gives the
//!   third view, as bucket bounds.
//! - S3: the end of the delivery contract: the bench watches the offset the sink stores in
//!   Iggy (every millisecond) and records `stored - scheduled` for every offset the store
//!   covers. Objects close each second of record time (`record_interval = "1s"`), and the
//!   sink stores offsets every 20 ms, so this latency is the rotation interval's by design.
//!
//! The rates are fractions of what the same path sustains from a prefilled topic (one
//! probe run), or `SPILLWAY_BENCH_LATENCY_RATES` (msgs/s, comma-separated). The producer,
//! the Iggy stand-in, the broker and the store share the machine's cores with the engine,
//! so live saturation comes earlier than the probe's.
//! Percentiles from an hdrhistogram (1 µs .. 1 h, 3 significant digits); each figure is the
//! median over the runs at that rate.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hdrhistogram::Histogram;
use spillway::coremap::Machine;
use spillway_codec::{Protocol, QoS};
use spillway_tests::{IggyAdmin, IggyServer, TestConsumer, TestMessage};

use crate::chart::{Chart, Series};
use crate::engine_process;
use crate::harness::median;
use crate::mqtt::cpu::ProcessCpu;
use crate::mqtt::subscriber::CountingSubscriber;
use crate::pipeline::{self, Dest, Job, Servers};
use crate::report::{self, Better, Row};

/// Payload bytes per message.
const SIZE: usize = 100;
/// Offered rates as fractions of the probe's rate.
const FRACTIONS: [f64; 5] = [0.1, 0.3, 0.5, 0.7, 0.9];
const FRACTIONS_QUICK: [f64; 3] = [0.1, 0.5, 0.9];
/// Fixed offered rates instead (msgs/s, comma-separated).
pub const RATES_ENV: &str = "SPILLWAY_BENCH_LATENCY_RATES";

/// What is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    MqttQos1,
    S3,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::MqttQos1 => "mqtt_qos1",
            Kind::S3 => "s3",
        }
    }

    fn dest(self) -> Dest {
        match self {
            Kind::MqttQos1 => Dest::Mosquitto,
            Kind::S3 => Dest::S3sFs,
        }
    }

    fn what(self) -> &'static str {
        match self {
            Kind::MqttQos1 => "MQTT QoS 1 to mosquitto, offered -> at a subscriber",
            Kind::S3 => "S3 json_lines to s3s-fs, 1 s objects, offered -> offset stored",
        }
    }
}

/// Nanoseconds since the Unix epoch: the clock the producer process, the subscriber and
/// Iggy's timestamps share (they run on one machine).
fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// When each message is due: `t0` (wall-clock ns) plus `(seq - 1) / rate`.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    t0: u64,
    rate: f64,
}

impl Schedule {
    /// The due time of message `seq` (from 1), wall-clock ns.
    fn at(&self, seq: u64) -> u64 {
        self.t0 + (seq.saturating_sub(1) as f64 * 1e9 / self.rate) as u64
    }

    /// Messages due by `now` (wall-clock ns).
    fn due(&self, now: u64) -> u64 {
        if now < self.t0 {
            0
        } else {
            ((now - self.t0) as f64 * self.rate / 1e9) as u64 + 1
        }
    }

    fn now(&self) -> u64 {
        wall_ns()
    }
}

/// The value of the MQTT 5 user property `iggy-timestamp` (µs since the epoch) in a PUBLISH
/// packet, found by its encoding (property 0x26, then the name and the value as UTF-8
/// strings with 2-byte lengths).
fn iggy_timestamp(packet: &[u8]) -> Option<u64> {
    const NAME: &[u8] = b"\x26\x00\x0eiggy-timestamp";
    let at = packet.windows(NAME.len()).position(|w| w == NAME)? + NAME.len();
    let len = usize::from(u16::from_be_bytes([*packet.get(at)?, *packet.get(at + 1)?]));
    std::str::from_utf8(packet.get(at + 2..at + 2 + len)?)
        .ok()?
        .parse()
        .ok()
}

/// `{"t":"<due ns, 20 digits>","i":"<seq, 12 digits>","p":"xx…"}`, [`SIZE`] bytes, valid
/// JSON (the numbers are strings: JSON numbers cannot have leading zeros).
fn payload(seq: u64, due: u64) -> Vec<u8> {
    let mut s = format!("{{\"t\":\"{due:020}\",\"i\":\"{seq:012}\",\"p\":\"");
    while s.len() < SIZE - 2 {
        s.push('x');
    }
    s.push_str("\"}");
    s.into_bytes()
}

/// (seq, due) from a payload made by [`payload`]; `None` for anything else.
fn parse_payload(p: &[u8]) -> Option<(u64, u64)> {
    let digits = |r: std::ops::Range<usize>| -> Option<u64> {
        std::str::from_utf8(p.get(r)?).ok()?.parse().ok()
    };
    if p.len() != SIZE || !p.starts_with(b"{\"t\":\"") {
        return None;
    }
    Some((digits(33..45)?, digits(6..26)?))
}

fn new_histogram() -> Result<Histogram<u64>, String> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).map_err(|e| format!("histogram: {e}"))
}

type Shared = Arc<Mutex<Histogram<u64>>>;

fn record(hist: &Shared, latency_ns: u64) {
    let mut h = hist.lock().unwrap_or_else(PoisonError::into_inner);
    h.saturating_record((latency_ns / 1000).max(1));
}

/// Produces `count` messages (seq 1..=count) into partition 0 on `schedule`; the largest
/// lag of a send behind its first message's due time.
fn produce(
    admin: &mut IggyAdmin,
    stream: &str,
    topic: &str,
    schedule: Schedule,
    count: u64,
) -> Result<Duration, String> {
    let mut sent = 0u64;
    let mut max_lag = 0u64;
    while sent < count {
        let now = schedule.now();
        let due = schedule.due(now).min(count);
        if due > sent {
            let n = (due - sent).min(1000);
            let batch: Vec<TestMessage> = (sent + 1..=sent + n)
                .map(|seq| {
                    TestMessage::new(
                        u128::from(seq) + 1,
                        Bytes::from(payload(seq, schedule.at(seq))),
                    )
                })
                .collect();
            max_lag = max_lag.max(now.saturating_sub(schedule.at(sent + 1)));
            admin
                .send(stream, topic, 0, &batch)
                .map_err(|e| format!("producing: {e}"))?;
            sent += n;
        } else {
            let wait = schedule.at(sent + 1).saturating_sub(now);
            std::thread::sleep(Duration::from_nanos(wait.clamp(20_000, 1_000_000)));
        }
    }
    Ok(Duration::from_nanos(max_lag))
}

/// Environment of the producer process: the Iggy user and password.
const PRODUCER_USER_ENV: &str = "SPILLWAY_BENCH_PRODUCER_USERNAME";
const PRODUCER_PASSWORD_ENV: &str = "SPILLWAY_BENCH_PRODUCER_PASSWORD";

/// `spillway-bench latency-producer ADDRESS STREAM TOPIC RATE COUNT T0_NS`: produces the
/// messages of one run on its schedule (user and password from the environment), then prints
/// `lag_ns N`, how far it fell behind the schedule at most.
pub fn producer_main(args: &[String]) -> Result<(), String> {
    let [address, stream, topic, rate, count, t0] = args else {
        return Err("usage: latency-producer ADDRESS STREAM TOPIC RATE COUNT T0_NS".to_owned());
    };
    let num = |what: &str, v: &str| -> Result<f64, String> {
        v.parse::<f64>()
            .map_err(|e| format!("latency-producer: {what} {v:?}: {e}"))
    };
    let addr: std::net::SocketAddr = address
        .parse()
        .map_err(|e| format!("latency-producer: address {address:?}: {e}"))?;
    let user = std::env::var(PRODUCER_USER_ENV).unwrap_or_else(|_| "iggy".to_owned());
    let password = std::env::var(PRODUCER_PASSWORD_ENV).unwrap_or_else(|_| "iggy".to_owned());
    let mut admin = IggyAdmin::connect(addr, &user, &password).map_err(|e| e.to_string())?;
    let schedule = Schedule {
        t0: num("t0", t0)? as u64,
        rate: num("rate", rate)?,
    };
    let lag = produce(
        &mut admin,
        stream,
        topic,
        schedule,
        num("count", count)? as u64,
    )?;
    println!("lag_ns {}", lag.as_nanos());
    Ok(())
}

/// Runs [`producer_main`] in a process of its own (this program again) and waits for it; the
/// producer's lag.
fn produce_in_process(
    fx: &Fixture<'_>,
    stream: &str,
    topic: &str,
    schedule: Schedule,
    count: u64,
) -> Result<Duration, String> {
    let exe = std::env::current_exe().map_err(|e| format!("the bench's own path: {e}"))?;
    let out = std::process::Command::new(exe)
        .arg("latency-producer")
        .arg(fx.iggy.addr().to_string())
        .arg(stream)
        .arg(topic)
        .arg(format!("{}", schedule.rate))
        .arg(count.to_string())
        .arg(schedule.t0.to_string())
        .env(PRODUCER_USER_ENV, fx.iggy.username())
        .env(PRODUCER_PASSWORD_ENV, fx.iggy.password())
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("starting the producer: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "the producer failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("lag_ns ")?.trim().parse::<u64>().ok())
        .map(Duration::from_nanos)
        .ok_or_else(|| format!("the producer printed no lag: {stdout}"))
}

/// The figures of one run, in ms.
#[derive(Debug, Clone, Copy)]
struct Percentiles {
    p50: f64,
    p99: f64,
    p999: f64,
    max: f64,
    /// Messages recorded.
    count: u64,
    producer_lag: Duration,
    /// The engine's CPU while no messages arrive (after the run), % of one core.
    idle_cpu_percent: f64,
    /// Append (Iggy's timestamp) to arrival, p50 and p99 (MQTT; NaN for S3).
    append_p50: f64,
    append_p99: f64,
    /// The engine's poll-to-confirm p50 and p99 as bucket bounds (ms; NaN if not read).
    poll_p50_le: f64,
    poll_p99_le: f64,
}

fn percentiles(h: &Histogram<u64>, producer_lag: Duration, idle_cpu_percent: f64) -> Percentiles {
    let ms = |us: u64| us as f64 / 1000.0;
    Percentiles {
        p50: ms(h.value_at_quantile(0.5)),
        p99: ms(h.value_at_quantile(0.99)),
        p999: ms(h.value_at_quantile(0.999)),
        max: ms(h.max()),
        count: h.len(),
        producer_lag,
        idle_cpu_percent,
        append_p50: f64::NAN,
        append_p99: f64::NAN,
        poll_p50_le: f64::NAN,
        poll_p99_le: f64::NAN,
    }
}

/// Everything a run needs.
struct Fixture<'a> {
    binary: &'a std::path::Path,
    iggy: &'a IggyServer,
    servers: &'a Servers,
    stream: &'a str,
    core: usize,
}

/// One run at `rate` for `seconds`.
fn one(
    fx: &Fixture<'_>,
    kind: Kind,
    rate: f64,
    seconds: f64,
    name: &str,
) -> Result<Percentiles, String> {
    // A stream of its own, deleted after the run: the stand-in keeps every message in memory.
    let stream = pipeline::fresh_stream(fx.iggy, name)?;
    let result = one_in(fx, &stream, kind, rate, seconds, name);
    if let Ok(mut admin) = fx.iggy.admin() {
        let _ = admin.delete_stream(&stream);
    }
    result
}

/// [`one`] in `stream`.
fn one_in(
    fx: &Fixture<'_>,
    stream: &str,
    kind: Kind,
    rate: f64,
    seconds: f64,
    name: &str,
) -> Result<Percentiles, String> {
    let topic = format!("lat-{name}");
    let mut admin = fx.iggy.admin().map_err(|e| e.to_string())?;
    admin
        .create_topic(stream, &topic, 1)
        .map_err(|e| e.to_string())?;
    let count = ((rate * seconds) as u64).max(1);
    let hist: Shared = Arc::new(Mutex::new(new_histogram()?));
    let appended: Shared = Arc::new(Mutex::new(new_histogram()?));
    let subscriber = match kind {
        Kind::MqttQos1 => {
            let m = fx
                .servers
                .mosquitto_addr()
                .ok_or("mosquitto was not started")?;
            let (h, a) = (Arc::clone(&hist), Arc::clone(&appended));
            Some(CountingSubscriber::connect_observed(
                m,
                Protocol::V5,
                &format!("bench/pipeline/{name}"),
                QoS::AtMostOnce,
                &format!("{name}-sub"),
                Some(Box::new(move |packet: &[u8]| {
                    let now = wall_ns();
                    let tail = &packet[packet.len().saturating_sub(SIZE)..];
                    if let Some((seq, due)) = parse_payload(tail)
                        && seq > 0
                    {
                        record(&h, now.saturating_sub(due));
                        if let Some(us) = iggy_timestamp(packet) {
                            record(&a, now.saturating_sub(us.saturating_mul(1000)));
                        }
                    }
                })),
            )?)
        }
        Kind::S3 => None,
    };
    let job = Job {
        iggy: fx.iggy,
        stream,
        topic: &topic,
        partitions: 1,
        per_partition: count + 1,
        size: SIZE,
        cores: &[fx.core],
        name,
        dest: kind.dest(),
        extra: match kind {
            Kind::MqttQos1 => "envelope = \"properties\"\n",
            Kind::S3 => "record_interval = \"1s\"\n",
        },
    };
    let (mut engine, metrics_addr) = pipeline::start_engine_metered(fx.binary, &job, fx.servers)?;
    let consumer = TestConsumer::Named(name.to_owned());
    let mut watcher = fx.iggy.admin().map_err(|e| e.to_string())?;
    let stored = |w: &mut IggyAdmin| {
        w.stored_offset(&consumer, stream, &topic, 0)
            .map_err(|e| e.to_string())
    };

    // Warm-up: message 0, confirmed before the clock starts.
    admin
        .send(
            stream,
            &topic,
            0,
            &[TestMessage::new(1, Bytes::from(payload(0, 0)))],
        )
        .map_err(|e| format!("producing: {e}"))?;
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let ready = match &subscriber {
            Some(s) => s.tally().count() >= 1,
            None => stored(&mut watcher)?.is_some(),
        };
        if ready {
            break;
        }
        if Instant::now() > until {
            return Err(format!(
                "{name}: the warm-up message was not confirmed in 30 s; the engine's log:\n{}",
                engine.log_tail(20)
            ));
        }
        if let Some(e) = engine.try_exit()? {
            return Err(format!("{name}: the engine exited early ({e:?})"));
        }
        std::thread::sleep(Duration::from_millis(2));
    }

    // The producer process starts in a few ms: the schedule begins 50 ms ahead.
    let schedule = Schedule {
        t0: wall_ns() + 50_000_000,
        rate,
    };
    // S3: a watcher thread turns stored offsets into latencies while the producer runs.
    let stop = Arc::new(AtomicBool::new(false));
    let s3_watch = match kind {
        Kind::S3 => {
            let (h, stop) = (Arc::clone(&hist), Arc::clone(&stop));
            let (stream, topic, consumer) = (stream.to_owned(), topic.clone(), consumer.clone());
            let mut w = fx.iggy.admin().map_err(|e| e.to_string())?;
            Some(
                std::thread::Builder::new()
                    .name("latency-offsets".into())
                    .spawn(move || -> Result<u64, String> {
                        let mut seen = 0u64;
                        while seen < count && !stop.load(Ordering::Relaxed) {
                            let s = w
                                .stored_offset(&consumer, &stream, &topic, 0)
                                .map_err(|e| e.to_string())?
                                .unwrap_or(0);
                            if s > seen {
                                let now = schedule.now();
                                for seq in seen + 1..=s.min(count) {
                                    record(&h, now.saturating_sub(schedule.at(seq)));
                                }
                                seen = s;
                            }
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        Ok(seen)
                    })
                    .map_err(|e| e.to_string())?,
            )
        }
        Kind::MqttQos1 => None,
    };
    let lag = produce_in_process(fx, stream, &topic, schedule, count);
    // Every message confirmed (or a generous deadline).
    let until = Instant::now() + Duration::from_secs(60);
    let recorded = || hist.lock().unwrap_or_else(PoisonError::into_inner).len();
    while lag.is_ok() && recorded() < count && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(t) = s3_watch {
        t.join()
            .map_err(|_| "the offset watcher panicked".to_owned())??;
    }
    // Idle: nothing arrives any more; the engine's CPU over `idle` after its polls have backed
    // off (they reach poll_interval within about 10 ms of the last message).
    std::thread::sleep(Duration::from_millis(200));
    let idle = Duration::from_secs_f64(seconds.min(2.0));
    let cpu = ProcessCpu::of(engine.pid());
    let idle_cpu_percent = match cpu.read() {
        Some(before) => {
            std::thread::sleep(idle);
            cpu.read().map_or(f64::NAN, |after| {
                100.0 * after.saturating_sub(before).as_secs_f64() / idle.as_secs_f64()
            })
        }
        None => f64::NAN,
    };
    let poll = crate::metrics::scrape(metrics_addr)
        .map(|b| crate::metrics::buckets(&b, "spillway_poll_to_confirm_seconds", name))
        .unwrap_or_default();
    engine.stop(Duration::from_secs(60))?;
    if let Some(s) = subscriber {
        s.finish()?;
    }
    let lag = lag?;
    let got = recorded();
    if got < count {
        return Err(format!(
            "{name}: {got} of {count} messages confirmed within 60 s of the last one offered"
        ));
    }
    let h = hist.lock().unwrap_or_else(PoisonError::into_inner);
    let mut p = percentiles(&h, lag, idle_cpu_percent);
    let a = appended.lock().unwrap_or_else(PoisonError::into_inner);
    if kind == Kind::MqttQos1 {
        if a.len() < count {
            return Err(format!(
                "{name}: {} of {count} messages carried iggy-timestamp",
                a.len()
            ));
        }
        p.append_p50 = a.value_at_quantile(0.5) as f64 / 1000.0;
        p.append_p99 = a.value_at_quantile(0.99) as f64 / 1000.0;
    }
    p.poll_p50_le = crate::metrics::quantile_bound(&poll, 0.5) * 1e3;
    p.poll_p99_le = crate::metrics::quantile_bound(&poll, 0.99) * 1e3;
    Ok(p)
}

/// The probe: msgs/s of the same path from a prefilled single-partition topic.
fn probe(fx: &Fixture<'_>, kind: Kind, quick: bool) -> Result<f64, String> {
    let per = if quick { 20_000 } else { 200_000 };
    let topic = format!("probe-{}", kind.name());
    pipeline::fill_topic(fx.iggy, fx.stream, &topic, 1, per, SIZE)?;
    let name = format!("lprobe{}", kind.name().replace('_', ""));
    let job = Job {
        iggy: fx.iggy,
        stream: fx.stream,
        topic: &topic,
        partitions: 1,
        per_partition: per,
        size: SIZE,
        cores: &[fx.core],
        name: &name,
        dest: kind.dest(),
        extra: "",
    };
    let m = pipeline::run_once(fx.binary, &job, fx.servers)?;
    Ok(per as f64 / m.wall.as_secs_f64())
}

fn rates_from_env() -> Result<Option<Vec<f64>>, String> {
    match std::env::var(RATES_ENV) {
        Ok(text) => parse_rates(&text).map(Some),
        Err(_) => Ok(None),
    }
}

/// `1000, 5000` -> [1000, 5000]; anything but rates >= 1 msgs/s is refused by name.
fn parse_rates(text: &str) -> Result<Vec<f64>, String> {
    text.split(',')
        .map(|r| {
            r.trim()
                .parse::<f64>()
                .ok()
                .filter(|v| *v >= 1.0 && v.is_finite())
                .ok_or_else(|| format!("{RATES_ENV}: {r:?} is not a rate in msgs/s (>= 1)"))
        })
        .collect()
}

/// Runs both kinds at every rate; rows, text and charts.
pub fn run(quick: bool, progress: &mut dyn FnMut(&str)) -> Result<(Vec<Row>, String), String> {
    let binary = engine_process::binary()?;
    let iggy = crate::harness::iggy()?;
    let servers = Servers::start(&[Dest::Mosquitto, Dest::S3sFs])?;
    let stream = pipeline::fresh_stream(&iggy, "latency")?;
    let fixed = rates_from_env()?;
    let (runs, seconds) = if quick { (1, 1.0) } else { (3, 5.0) };
    let fx = Fixture {
        binary: &binary,
        iggy: &iggy,
        servers: &servers,
        stream: &stream,
        core: Machine::detect().cores.last().copied().unwrap_or(0),
    };
    let mut rows = Vec::new();
    let mut text = format!(
        "\nlatency: offered -> confirmed, 100 B messages, {} -> spillway (own process, 1 shard) -> destination; {runs} run(s) of {seconds} s per rate, median; measured from each message's scheduled time (coordinated omission corrected)\n",
        crate::harness::iggy_name(&iggy)
    );
    let mut seq = 0;
    for kind in [Kind::MqttQos1, Kind::S3] {
        let (rates, probe_rate) = match &fixed {
            Some(r) => (r.clone(), None),
            None => {
                progress(&format!("{}: probing the sustained rate", kind.name()));
                let p = probe(&fx, kind, quick)?;
                let fr: &[f64] = if quick { &FRACTIONS_QUICK } else { &FRACTIONS };
                (
                    fr.iter().map(|f| (p * f).round().max(1.0)).collect(),
                    Some(p),
                )
            }
        };
        let mut body = Vec::new();
        let mut points: Vec<(f64, [f64; 4])> = Vec::new();
        for &rate in &rates {
            let mut got = Vec::new();
            for r in 0..runs {
                progress(&format!(
                    "{} at {rate:.0} msgs/s, run {}/{runs}",
                    kind.name(),
                    r + 1
                ));
                seq += 1;
                let name = format!("lat{seq}");
                got.push(
                    one(&fx, kind, rate, seconds, &name)
                        .map_err(|e| format!("{} at {rate:.0} msgs/s: {e}", kind.name()))?,
                );
            }
            let pick = |f: fn(&Percentiles) -> f64| median(got.iter().map(f).collect());
            let fig = [
                pick(|p| p.p50),
                pick(|p| p.p99),
                pick(|p| p.p999),
                pick(|p| p.max),
            ];
            let lag_ms = pick(|p| p.producer_lag.as_secs_f64() * 1e3);
            let idle = pick(|p| p.idle_cpu_percent);
            let append = [pick(|p| p.append_p50), pick(|p| p.append_p99)];
            let poll = [pick(|p| p.poll_p50_le), pick(|p| p.poll_p99_le)];
            let scenario = format!("latency_{}_{rate:.0}_per_s", kind.name());
            for (metric, v) in ["p50_ms", "p99_ms", "p99_9_ms", "max_ms"]
                .into_iter()
                .zip(fig)
            {
                rows.push(Row {
                    scenario: scenario.clone(),
                    metric,
                    ours: v,
                    peer: f64::NAN,
                    peer_name: "-",
                    unit: "ms",
                    better: Better::Lower,
                });
            }
            for (metric, v, unit) in [
                ("append_p50_ms", append[0], "ms, Iggy append to arrival"),
                ("append_p99_ms", append[1], "ms, Iggy append to arrival"),
                ("poll_to_confirm_p50_le_ms", poll[0], "ms, bucket bound"),
                ("poll_to_confirm_p99_le_ms", poll[1], "ms, bucket bound"),
            ] {
                if !v.is_nan() {
                    rows.push(Row::alone(&scenario, metric, v, unit, Better::Lower));
                }
            }
            rows.push(Row::alone(
                &scenario,
                "idle_cpu_percent",
                idle,
                "% of a core, no messages arriving",
                Better::Lower,
            ));
            body.push([
                format!("{rate:.0}"),
                probe_rate.map_or("-".into(), |p| format!("{:.0}%", rate / p * 100.0)),
                format!("{:.2}", fig[0]),
                format!("{:.2}", fig[1]),
                format!("{:.2}", fig[2]),
                format!("{:.2}", fig[3]),
                format!("{lag_ms:.2}"),
                fmt_pair(append),
                fmt_pair(poll),
                format!("{}", got.iter().map(|p| p.count).sum::<u64>()),
                format!("{idle:.2}"),
            ]);
            points.push((rate, fig));
        }
        let _ = writeln!(
            text,
            "\n  {}{}",
            kind.what(),
            probe_rate.map_or(String::new(), |p| format!(
                "; the prefilled path sustains {p:.0} msgs/s (one probe run)"
            ))
        );
        let head = [
            "offered msgs/s".to_owned(),
            "of probe".to_owned(),
            "p50 ms".to_owned(),
            "p99 ms".to_owned(),
            "p99.9 ms".to_owned(),
            "max ms".to_owned(),
            "producer lag ms".to_owned(),
            "append p50/p99 ms".to_owned(),
            "poll->confirm p50/p99 <= ms".to_owned(),
            "messages".to_owned(),
            "idle CPU %".to_owned(),
        ];
        text.push_str(&report::text_table(&head, &body, |_| false));
        let path =
            report::default_json_path(&format!("latency_{}", kind.name())).with_extension("svg");
        let chart = latency_chart(kind, &points);
        let _ = match chart.write(&path) {
            Ok(()) => {
                report::picture(
                    &path,
                    &format!("latency against offered rate: {}", kind.name()),
                );
                writeln!(text, "  chart: {}", path.display())
            }
            Err(e) => writeln!(text, "  chart not written ({}: {e})", path.display()),
        };
    }
    text.push_str(
        "  producer lag: how far the producer (a process of its own) fell behind its schedule (it \
         shares the cores); it is inside the latencies, as it would be for a real producer\n  \
         append: from Iggy's append timestamp (iggy-timestamp) to the subscriber, MQTT only\n  \
         poll->confirm: the engine's own histogram, as the bucket bounds the quantiles fall in\n  idle CPU: \
         the engine process's CPU over 2 s after the run (1 s with --quick), nothing arriving, \
         % of one core\n",
    );
    if let Ok(mut admin) = iggy.admin() {
        let _ = admin.delete_stream(&stream);
    }
    Ok((rows, text))
}

/// `p50/p99` with 2 decimals, or `-` when not measured.
fn fmt_pair(v: [f64; 2]) -> String {
    if v[0].is_nan() {
        "-".to_owned()
    } else {
        format!("{:.2}/{:.2}", v[0], v[1])
    }
}

fn latency_chart(kind: Kind, points: &[(f64, [f64; 4])]) -> Chart {
    let series = |i: usize, name: &str, color: &'static str| Series {
        name: name.to_owned(),
        color,
        dashed: false,
        points: points.iter().map(|(r, f)| (*r, f[i])).collect(),
    };
    Chart {
        title: format!(
            "latency against offered rate: {}",
            match kind {
                Kind::MqttQos1 => "MQTT QoS 1 (mosquitto)",
                Kind::S3 => "S3 objects (s3s-fs, 1 s)",
            }
        ),
        x_label: "offered msgs/s".into(),
        y_label: "ms (log)".into(),
        log_y: true,
        fmt_x: |v| {
            if v >= 1e6 {
                format!("{:.1}M", v / 1e6)
            } else if v >= 1e3 {
                format!("{:.0}k", v / 1e3)
            } else {
                format!("{v:.0}")
            }
        },
        fmt_y: |v| format!("{v}"),
        series: vec![
            series(0, "p50", "steelblue"),
            series(1, "p99", "darkorange"),
            series(2, "p99.9", "firebrick"),
            series(3, "max", "gray"),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_carry_their_schedule_and_are_json() {
        for (seq, due) in [(0, 0), (1, 123_456_789), (999_999, u64::MAX / 2)] {
            let p = payload(seq, due);
            assert_eq!(p.len(), SIZE);
            assert_eq!(parse_payload(&p), Some((seq, due)));
            let v: Result<serde_json::Value, _> = serde_json::from_slice(&p);
            assert!(v.is_ok(), "{}", String::from_utf8_lossy(&p));
        }
        assert_eq!(parse_payload(b"{\"seq\":1}"), None);
        assert_eq!(parse_payload(&[b'x'; SIZE]), None);
    }

    #[test]
    fn the_schedule_spaces_messages_by_the_rate() {
        let s = Schedule {
            t0: 1_000,
            rate: 1000.0,
        };
        assert_eq!(s.at(1), 1_000);
        assert_eq!(s.at(2), 1_001_000);
        assert_eq!(s.due(999), 0);
        assert_eq!(s.due(1_000), 1);
        assert_eq!(s.due(1_000 + 2_500_000), 3);
    }

    #[test]
    fn a_late_confirmation_counts_from_the_schedule() {
        // Coordinated omission: a message confirmed 50 ms after its due time counts 50 ms,
        // whenever it was actually sent.
        let Ok(h) = new_histogram() else {
            panic!("histogram")
        };
        let hist = Arc::new(Mutex::new(h));
        record(&hist, 50_000_000);
        record(&hist, 1_000);
        let p = percentiles(
            &hist.lock().unwrap_or_else(PoisonError::into_inner),
            Duration::ZERO,
            f64::NAN,
        );
        assert!((p.max - 50.0).abs() < 0.1, "{p:?}");
        assert_eq!(p.count, 2);
    }

    #[test]
    fn the_append_timestamp_is_read_from_the_user_property() {
        // A PUBLISH's property block with two user properties, then the payload.
        let mut packet = vec![0x30, 0x00, 0x00, 0x01, b't'];
        for (k, v) in [("iggy-offset", "7"), ("iggy-timestamp", "1796515200123456")] {
            packet.push(0x26);
            packet.extend_from_slice(&(k.len() as u16).to_be_bytes());
            packet.extend_from_slice(k.as_bytes());
            packet.extend_from_slice(&(v.len() as u16).to_be_bytes());
            packet.extend_from_slice(v.as_bytes());
        }
        packet.extend_from_slice(&payload(1, 2));
        assert_eq!(iggy_timestamp(&packet), Some(1_796_515_200_123_456));
        assert_eq!(iggy_timestamp(&payload(1, 2)), None);
        // Cut short inside the value: no value, no panic.
        let at = packet.len() - SIZE - 4;
        assert_eq!(iggy_timestamp(&packet[..at]), None);
    }

    #[test]
    fn rates_come_from_a_list_and_bad_ones_are_named() {
        assert_eq!(parse_rates("1000, 5000"), Ok(vec![1000.0, 5000.0]));
        for bad in ["", "1000,x", "0", "-5", "inf"] {
            let e = parse_rates(bad).err().unwrap_or_default();
            assert!(e.contains(RATES_ENV), "{bad:?}: {e}");
        }
    }
}
