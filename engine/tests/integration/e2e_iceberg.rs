//! Iceberg tables end to end: the real Iggy server -> the `spillway` binary -> data files in
//! s3s-fs (it verifies SigV4) committed to an Iceberg table in a SQL catalog (SQLite) -> read
//! back with PyIceberg (an independent implementation, from PyPI in the test set-up) through
//! that same catalog and store.
//!
//! The engine is killed (SIGKILL) at random points while it writes: files uploaded and not yet
//! committed among them (the table's commit interval keeps files waiting), and commits whose
//! offsets Iggy has not stored yet (the sink's offset commit interval is long). The table must
//! then hold
//! every offset Iggy holds exactly once, its snapshot summary the last offset of each
//! partition, and its schema the sink's columns.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::e2e_s3_handover::{
    Producer, group_topic, pause, real_iggy, seed_timings, start_member, stop_member,
    wait_group_stored,
};

use common::{Engine, engine_sections, s3_sink, stop_clean, tail, topic, wait_stored};
use serde_json::Value;
use spillway_tests::{IggyServer, S3Server, TestMessage};

const LONG: Duration = Duration::from_secs(120);

/// Reads the table through the SQL catalog with PyIceberg and prints one JSON line: its
/// schema, its current snapshot's `spillway.` summary keys, its data files and every row's
/// partition and offset.
const PYICEBERG_READER: &str = r#"
import json, sys
from pyiceberg.catalog.sql import SqlCatalog

db, warehouse, endpoint, ak, sk, region, ident = sys.argv[1:8]
catalog = SqlCatalog("spillway", **{
    "uri": "sqlite:///" + db,
    "warehouse": warehouse,
    "s3.endpoint": endpoint,
    "s3.access-key-id": ak,
    "s3.secret-access-key": sk,
    "s3.region": region,
    "s3.force-virtual-addressing": "false",
})
table = catalog.load_table(ident)
snapshot = table.current_snapshot()
summary = {k: v for k, v in snapshot.summary.additional_properties.items() if k.startswith("spillway.")}
files = [t.file.file_path for t in table.scan().plan_files()]
rows = table.scan(selected_fields=("partition", "offset", "payload")).to_arrow()
print(json.dumps({
    "schema": [[f.field_id, f.name, str(f.field_type), f.required] for f in table.schema().fields],
    "summary": summary,
    "snapshots": len(table.metadata.snapshots),
    "files": files,
    "rows": [[p, o, bytes(b).decode()] for p, o, b in zip(rows["partition"].to_pylist(), rows["offset"].to_pylist(), rows["payload"].to_pylist())],
}))
"#;

fn pyiceberg_read(db: &Path, s3: &S3Server, ident: &str) -> Value {
    let warehouse = format!("s3://{}/warehouse", s3.bucket());
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(PYICEBERG_READER)
        .arg(db)
        .arg(&warehouse)
        .arg(s3.endpoint())
        .arg(s3.access_key())
        .arg(s3.secret_key())
        .arg(s3.region())
        .arg(ident)
        .output()
        .expect("python3 (scripts/setup.sh installs pyiceberg)");
    assert!(
        out.status.success(),
        "PyIceberg could not read the table: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every offset below `counts[p]` of every partition `p` is in exactly one row of the table,
/// with the payload produced at it (`{"p":p,"n":offset,…}`); a summary of what was read.
fn check_rows(table: &Value, counts: &[u64]) -> Result<String, String> {
    let mut seen: BTreeMap<(u64, u64), u32> = BTreeMap::new();
    for row in table["rows"].as_array().unwrap() {
        let (p, o) = (row[0].as_u64().unwrap(), row[1].as_u64().unwrap());
        let payload: Value = serde_json::from_str(row[2].as_str().unwrap()).unwrap();
        if payload["p"] != p || payload["n"] != o {
            return Err(format!(
                "the row of partition {p} at offset {o} holds {payload}"
            ));
        }
        *seen.entry((p, o)).or_default() += 1;
    }
    let twice: Vec<_> = seen
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(k, _)| *k)
        .collect();
    if !twice.is_empty() {
        return Err(format!(
            "{} rows are in the table more than once: {:?}",
            twice.len(),
            &twice[..twice.len().min(20)]
        ));
    }
    for (p, &count) in counts.iter().enumerate() {
        let missing: Vec<u64> = (0..count)
            .filter(|o| !seen.contains_key(&(p as u64, *o)))
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "partition {p} misses {} offsets: {:?}",
                missing.len(),
                &missing[..missing.len().min(20)]
            ));
        }
    }
    let expected: u64 = counts.iter().sum();
    if seen.len() as u64 != expected {
        return Err(format!("{} rows, {expected} produced", seen.len()));
    }
    Ok(format!(
        "{} rows once each in {} files, {} snapshots",
        seen.len(),
        table["files"].as_array().map_or(0, Vec::len),
        table["snapshots"]
    ))
}

fn iceberg_sink(name: &str, t: &common::Topic, s3: &S3Server, db: &Path) -> String {
    let extra = format!(
        r#"format = "parquet"
max_object_messages = 40
idle_flush = "200ms"

[sink.s3.iceberg]
catalog = "sql"
uri = "sqlite://{db}?mode=rwc"
namespace = "lake.raw"
table = "events"
commit_interval = "700ms"
"#,
        db = db.display()
    );
    // Iggy's stored offset lags the table's commits by up to 1.5 s, so that kills land between
    // a commit and the store too: the restart must start from the table, not from Iggy.
    s3_sink(name, t, s3, &extra)
        .replace("commit_interval = \"50ms\"", "commit_interval = \"1500ms\"")
}

#[test]
fn an_iceberg_table_holds_every_offset_once_through_sigkills() {
    let s3 = S3Server::start().unwrap();
    sigkill_rounds(&s3, None, false);
}

/// The same through the REST catalog protocol, with a bearer token from the environment: the
/// sink's REST client (iceberg-rust's) against `tests/python/rest_catalog.py`, a stand-in
/// server over PyIceberg's SQL catalog (no REST catalog server can be installed here from a
/// package registry; the reference servers ship as container images). PyIceberg then reads
/// the table through the SQL catalog underneath.
#[test]
fn a_rest_catalog_table_holds_every_offset_once_through_sigkills() {
    let s3 = S3Server::start().unwrap();
    sigkill_rounds(&s3, None, true);
}

/// The stand-in REST catalog on a free loopback port, over the SQLite catalog `db`; killed
/// when dropped.
struct RestCatalog {
    child: std::process::Child,
    uri: String,
}

impl RestCatalog {
    fn start(db: &Path, s3: &S3Server, token: &str) -> RestCatalog {
        let port = spillway_tests::ports::free_loopback_port().unwrap();
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/python/rest_catalog.py"
        );
        let mut child = std::process::Command::new("python3")
            .arg(script)
            .arg(port.to_string())
            .arg(db)
            .arg(format!("s3://{}/warehouse", s3.bucket()))
            .arg(s3.endpoint())
            .arg(s3.access_key())
            .arg(s3.secret_key())
            .arg(s3.region())
            .arg(token)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("python3 (scripts/setup.sh installs pyiceberg)");
        let addr = std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port));
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(
                child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline,
                "the stand-in REST catalog did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        RestCatalog {
            child,
            uri: format!("http://{addr}"),
        }
    }
}

impl Drop for RestCatalog {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The same through a fault proxy in front of the store: 5% of the requests answered 500,
/// 5% 503 SlowDown, 2% cut mid-body; the sink's uploads and the catalog's metadata writes and
/// reads alike (the catalog's FileIO goes through the proxy too).
#[test]
fn an_iceberg_table_holds_every_offset_once_through_store_faults_and_sigkills() {
    use spillway_tests::{FaultPlan, FaultProxy};
    let s3 = S3Server::start().unwrap();
    let seed = fastrand::u64(..);
    eprintln!("fault seed {seed}");
    let plan = FaultPlan::seeded(seed)
        .status_500(0.05)
        .slow_down_503(0.05)
        .drop_mid_body(0.02);
    let proxy = FaultProxy::start(s3.addr(), plan).unwrap();
    sigkill_rounds(&s3, Some(&proxy), false);
    let stats = proxy.stats();
    let heads = proxy.requests();
    let metadata = heads
        .iter()
        .filter(|h| h.target.contains("/metadata/"))
        .count();
    eprintln!(
        "{} of {} requests faulted; {metadata} of the catalog's metadata requests went through the proxy",
        stats.faults(),
        heads.len()
    );
    assert!(stats.faults() > 0, "no fault was injected");
    assert!(
        metadata > 0,
        "the catalog's FileIO did not go through the proxy"
    );
}

/// Messages sent in rounds, each round an engine killed at a random point, then one that
/// finishes; the table checked through PyIceberg (reading the store directly).
fn sigkill_rounds(s3: &S3Server, proxy: Option<&spillway_tests::FaultProxy>, rest: bool) {
    const ROUNDS: u64 = 5;
    const PER_ROUND: u64 = 120;
    const TOKEN: &str = "a-test-token-not-a-secret";
    let iggy = IggyServer::start().unwrap();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "ice", 2);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("catalog.db");
    let mut cfg = engine_sections(&iggy) + &iceberg_sink("ice", &t, s3, &db);
    if let Some(proxy) = proxy {
        cfg = cfg.replace(&s3.endpoint(), &format!("http://{}", proxy.host_port()));
    }
    let catalog = rest.then(|| RestCatalog::start(&db, s3, TOKEN));
    if let Some(c) = &catalog {
        cfg = cfg.replace(
            &format!(
                "catalog = \"sql\"\nuri = \"sqlite://{}?mode=rwc\"",
                db.display()
            ),
            &format!(
                "catalog = \"rest\"\nuri = \"{}\"\ntoken = \"${{SPILLWAY_TEST_ICEBERG_TOKEN}}\"",
                c.uri
            ),
        );
        assert!(cfg.contains("catalog = \"rest\""), "{cfg}");
    }
    let env = [("SPILLWAY_TEST_ICEBERG_TOKEN", TOKEN)];
    let mut sent = 0u64;
    let mut seed = fastrand::Rng::new();
    eprintln!("seed {}", seed.get_seed());
    for round in 0..ROUNDS {
        for p in 0..2u32 {
            let batch: Vec<TestMessage> = (sent..sent + PER_ROUND)
                .map(|n| {
                    TestMessage::new(
                        u128::from(n) + 1,
                        format!("{{\"p\":{p},\"n\":{n}}}").into_bytes(),
                    )
                })
                .collect();
            common::send_all(&mut admin, &t, p, &batch);
        }
        sent += PER_ROUND;
        let mut engine = Engine::start_with_env(dir.path(), &format!("ice{round}"), &cfg, &env);
        // Killed somewhere between its start and well past its first commits.
        std::thread::sleep(Duration::from_millis(seed.u64(300..3000)));
        engine.signal("KILL");
        let _ = engine.wait(Duration::from_secs(10));
    }
    let mut engine = Engine::start_with_env(dir.path(), "ice-last", &cfg, &env);
    wait_stored(&mut engine, &mut admin, &t, "ice", sent - 1, LONG);
    stop_clean(&mut engine, Duration::from_secs(30));
    let log = engine.log();

    let table = pyiceberg_read(&db, s3, "lake.raw.events");
    if let Err(e) = check_rows(&table, &[sent, sent]) {
        panic!("{e}\n{}", tail(&log, 40));
    }
    // The summary carries every partition's last offset.
    for p in 0..2 {
        assert_eq!(
            table["summary"][format!("spillway.ice.{p}")],
            Value::String((sent - 1).to_string()),
            "summary {}",
            table["summary"]
        );
    }
    // The schema is the sink's columns, with their ids.
    let schema: Vec<(i64, String, String)> = table["schema"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f[0].as_i64().unwrap(),
                f[1].as_str().unwrap().to_owned(),
                f[2].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let names: Vec<&str> = schema.iter().map(|(_, n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "stream",
            "topic",
            "partition",
            "offset",
            "id",
            "timestamp",
            "origin_timestamp",
            "headers",
            "payload"
        ]
    );
    assert_eq!(schema[2], (3, "partition".to_owned(), "int".to_owned()));
    assert_eq!(schema[3], (4, "offset".to_owned(), "long".to_owned()));
    // Files the kills left behind (uploaded, never committed) are in the store, not the table.
    let committed: std::collections::BTreeSet<String> = table["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_owned())
        .collect();
    let stored: Vec<String> = common::object_files(&s3.bucket_dir())
        .into_iter()
        .map(|(key, _, _)| format!("s3://{}/{key}", s3.bucket()))
        .filter(|k| k.ends_with(".parquet"))
        .collect();
    let orphans = stored.iter().filter(|k| !committed.contains(*k)).count();
    eprintln!(
        "{} rows in {} files and {} snapshots; {orphans} orphan files",
        2 * sent,
        committed.len(),
        table["snapshots"]
    );
    for f in &committed {
        assert!(
            stored.contains(f),
            "the table names a file the store lacks: {f}"
        );
    }
    // `spillway orphans` lists exactly the files no snapshot references, then deletes them;
    // the table still reads whole.
    if let Some(proxy) = proxy {
        proxy
            .set_plan(spillway_tests::FaultPlan::passthrough())
            .unwrap();
    }
    let config = dir.path().join("ice-last.toml");
    let tool = |more: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_spillway"))
            .env("SPILLWAY_TEST_ICEBERG_TOKEN", TOKEN)
            .arg("orphans")
            .arg("--config")
            .arg(&config)
            .args(["--sink", "ice", "--older-than", "0s"])
            .args(more)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "spillway orphans: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let listed: std::collections::BTreeSet<String> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split('\t').next())
            .map(str::to_owned)
            .collect();
        (listed, text)
    };
    let expected: std::collections::BTreeSet<String> = stored
        .iter()
        .filter(|k| !committed.contains(*k))
        .cloned()
        .collect();
    let (listed, text) = tool(&[]);
    assert_eq!(listed, expected, "{text}");
    let (deleted, _) = tool(&["--delete"]);
    assert_eq!(deleted, expected);
    let (left, text) = tool(&[]);
    assert!(left.is_empty(), "orphans left after --delete: {text}");
    let after = pyiceberg_read(&db, s3, "lake.raw.events");
    check_rows(&after, &[sent, sent]).unwrap_or_else(|e| panic!("after --delete: {e}"));
}

/// `[iggy]`, `[runtime]`, `[metrics]` and a consumer group's Iceberg sink on `table`: pings every
/// 500 ms (a live member is never evicted), the assignment re-read every 200 ms, data files of
/// about 250 rows, a commit at most every 1.5 s, so a frozen member holds files not committed.
fn group_config(
    iggy: &IggyServer,
    t: &common::Topic,
    s3: &S3Server,
    group: &str,
    db: &Path,
    table: &str,
) -> String {
    let sections = engine_sections(iggy).replace(
        "reconnect_max = \"500ms\"",
        "reconnect_max = \"500ms\"\nping_interval = \"500ms\"",
    );
    let extra = format!(
        r#"format = "parquet"
max_object_size = "256KiB"
idle_flush = "1s"
retry_min = "50ms"
retry_max = "500ms"

[sink.s3.iceberg]
catalog = "sql"
uri = "sqlite://{db}?mode=rwc"
namespace = "lake.raw"
table = "{table}"
commit_interval = "1500ms"
"#,
        db = db.display()
    );
    let sink = s3_sink("icegroup", t, s3, &extra)
        .lines()
        .map(|l| {
            if l.starts_with("partitions = [") {
                format!("consumer_group = \"{group}\"\ngroup_sync_interval = \"200ms\"")
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    sections + &sink + "\n"
}

/// Two members, two partitions, a live producer, one member frozen (SIGSTOP) for 6-10 s: the
/// server evicts it after about 2.4 s and its partition goes to the other, which takes it up
/// from the table. Thawed (SIGCONT), the old owner still holds files of that partition that it
/// had not committed; whichever of the two commits second for that partition finds the table
/// moved past what its lease expects and is fenced. The table must hold every offset once.
#[test]
fn a_frozen_member_and_its_successor_never_commit_an_offset_twice() {
    seed_timings();
    let iggy = real_iggy();
    let s3 = S3Server::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("catalog.db");
    let mut outcomes = Vec::new();
    let mut fenced = 0;
    for round in 0..2 {
        let group = "icefrozen";
        let t = group_topic(&iggy, &format!("icefrozen{round}"), 2, group);
        let table = format!("frozen{round}");
        let cfg = group_config(&iggy, &t, &s3, group, &db, &table);
        let producer = Producer::start(&iggy, &t, 300);
        let a = start_member(dir.path(), &format!("ice-r{round}-a"), &cfg);
        let b = start_member(dir.path(), &format!("ice-r{round}-b"), &cfg);
        let mut engines = [("A", a), ("B", b)];
        let before = pause(2000..4000);
        engines[0].1.signal("STOP");
        let frozen = pause(6000..10_000);
        engines[0].1.signal("CONT");
        let after = pause(2500..4500);
        let counts = producer.finish();
        let mut problems = Vec::new();
        if let Err(e) = wait_group_stored(&iggy, &t, group, &counts) {
            problems.push(e);
        }
        for (name, e) in &mut engines {
            if let Some(p) = stop_member(name, e) {
                problems.push(p);
            }
        }
        let logs: String = engines.iter().map(|(_, e)| e.log()).collect();
        if logs.contains("another member committed it") || logs.contains("taken up again") {
            fenced += 1;
        }
        let read = pyiceberg_read(&db, &s3, &format!("lake.raw.{table}"));
        let what = format!(
            "round {round}: ran {before:?}, A frozen {frozen:?}, thawed {after:?}, produced {counts:?}"
        );
        match check_rows(&read, &counts) {
            Ok(summary) if problems.is_empty() => outcomes.push(Ok(format!("{what}: {summary}"))),
            Ok(summary) => {
                outcomes.push(Err(format!("{what}: {summary}; {}", problems.join("; "))))
            }
            Err(e) => {
                let tails: Vec<String> = engines
                    .iter()
                    .map(|(name, e)| format!("{name}:\n{}", tail(&e.log(), 25)))
                    .collect();
                outcomes.push(Err(format!("{what}: {e}\n{}", tails.join("\n"))));
            }
        }
    }
    for o in &outcomes {
        match o {
            Ok(s) => eprintln!("ok   {s}"),
            Err(e) => eprintln!("FAIL {e}"),
        }
    }
    assert!(
        outcomes.iter().all(Result::is_ok),
        "a table broke exactly once"
    );
    eprintln!("a member was fenced in {fenced} of 2 rounds");
}

/// Reads every data file of the table through PyIceberg's FileIO and prints one JSON line: the
/// spec, and per file its partition tuple with the distinct regions and hours of its rows.
const PYICEBERG_PARTITIONS: &str = r#"
import json, sys
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo

db, warehouse, endpoint, ak, sk, region, ident = sys.argv[1:8]
catalog = SqlCatalog("spillway", **{
    "uri": "sqlite:///" + db, "warehouse": warehouse, "s3.endpoint": endpoint,
    "s3.access-key-id": ak, "s3.secret-access-key": sk, "s3.region": region,
    "s3.force-virtual-addressing": "false",
})
table = catalog.load_table(ident)
files = []
for task in table.scan().plan_files():
    f = task.file
    with table.io.new_input(f.file_path).open() as fh:
        t = pq.read_table(fh, columns=["region", "ts"])
    files.append({
        "partition": [f.partition[i] for i in range(len(f.partition))],
        "regions": sorted(set(t["region"].to_pylist())),
        "hours": sorted(set(int(x.timestamp() // 3600) for x in t["ts"].to_pylist())),
        "rows": t.num_rows,
    })
eu = table.scan(row_filter=EqualTo("region", "eu")).to_arrow().num_rows
eu_files = len(list(table.scan(row_filter=EqualTo("region", "eu")).plan_files()))
print(json.dumps({
    "spec": [[f.source_id, f.name, str(f.transform)] for f in table.spec().fields],
    "files": files, "eu_rows": eu, "eu_files": eu_files,
}))
"#;

/// A table partitioned by identity of a typed string column and the hour of a typed timestamp
/// column: every data file holds one region and one hour, its partition tuple says which, and
/// PyIceberg prunes by it.
#[test]
fn a_partitioned_table_has_one_partition_value_per_file() {
    const N: u64 = 600;
    let s3 = S3Server::start().unwrap();
    let iggy = IggyServer::start().unwrap();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "icepart", 1);
    // 2026-12-07T00:00:00Z, a message every 20 s: about 3.3 hours (milliseconds, as a
    // Parquet timestamp column reads numbers).
    let base = 1_796_601_600_000u64;
    let regions = ["eu", "us", "ap"];
    let batch: Vec<TestMessage> = (0..N)
        .map(|n| {
            let ts = base + n * 20_000;
            TestMessage::new(
                u128::from(n) + 1,
                format!(
                    r#"{{"p":0,"n":{n},"region":"{}","ts":{ts}}}"#,
                    regions[(n % 3) as usize]
                )
                .into_bytes(),
            )
        })
        .collect();
    common::send_all(&mut admin, &t, 0, &batch);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("catalog.db");
    let extra = format!(
        r#"format = "parquet"
time_source = "json:/ts"
idle_flush = "300ms"

[[sink.s3.parquet.columns]]
name = "region"
pointer = "/region"
type = "string"
required = true

[[sink.s3.parquet.columns]]
name = "ts"
pointer = "/ts"
type = "timestamp"

[sink.s3.iceberg]
catalog = "sql"
uri = "sqlite://{db}?mode=rwc"
namespace = "lake"
table = "parted"
commit_interval = "200ms"
partition_by = ["region", "hour(ts)"]
"#,
        db = db.display()
    );
    let metrics = std::net::SocketAddr::from((
        std::net::Ipv4Addr::LOCALHOST,
        spillway_tests::ports::free_loopback_port().unwrap(),
    ));
    let cfg = engine_sections(&iggy).replace("address = \"\"", &format!("address = \"{metrics}\""))
        + &s3_sink("icepart", &t, &s3, &extra);
    let mut engine = Engine::start(dir.path(), "icepart", &cfg);
    wait_stored(&mut engine, &mut admin, &t, "icepart", N - 1, LONG);
    // The commit metrics: the 12 files (checked below) in at least one snapshot.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let (files, commits) = loop {
        let body = common::scrape_metrics(metrics).unwrap_or_default();
        let of = |name: &str| common::metric_of_sink(&body, name, "icepart").unwrap_or(0.0);
        let got = (
            of("spillway_sink_table_files_total"),
            of("spillway_sink_table_commits_total"),
        );
        if got.0 >= 12.0 || std::time::Instant::now() > deadline {
            break got;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(files, 12.0, "spillway_sink_table_files_total");
    assert!(
        (1.0..=12.0).contains(&commits),
        "spillway_sink_table_commits_total {commits}"
    );
    stop_clean(&mut engine, Duration::from_secs(30));

    let table = pyiceberg_read(&db, &s3, "lake.parted");
    check_rows(&table, &[N]).unwrap_or_else(|e| panic!("{e}\n{}", tail(&engine.log(), 30)));
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(PYICEBERG_PARTITIONS)
        .arg(&db)
        .arg(format!("s3://{}/warehouse", s3.bucket()))
        .arg(s3.endpoint())
        .arg(s3.access_key())
        .arg(s3.secret_key())
        .arg(s3.region())
        .arg("lake.parted")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let parts: Value = serde_json::from_slice(&out.stdout).unwrap();
    // Field ids: region and ts are the first two typed columns (10 and 11).
    assert_eq!(
        parts["spec"],
        serde_json::json!([[10, "region", "identity"], [11, "ts_hour", "hour"]])
    );
    let files = parts["files"].as_array().unwrap();
    // 3 regions x 4 hours (00:00 to 03:19).
    assert_eq!(files.len(), 12, "{}", parts["files"]);
    let mut rows = 0;
    for f in files {
        let regions = f["regions"].as_array().unwrap();
        let hours = f["hours"].as_array().unwrap();
        assert_eq!(regions.len(), 1, "a file of several regions: {f}");
        assert_eq!(hours.len(), 1, "a file of several hours: {f}");
        assert_eq!(f["partition"][0], regions[0], "{f}");
        assert_eq!(f["partition"][1], hours[0], "{f}");
        rows += f["rows"].as_u64().unwrap();
    }
    assert_eq!(rows, N);
    // PyIceberg prunes by the partition: the files of one region only.
    assert_eq!(parts["eu_rows"], N / 3);
    assert_eq!(parts["eu_files"], 4);
}
