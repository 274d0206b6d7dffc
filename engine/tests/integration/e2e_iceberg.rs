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
    const ROUNDS: u64 = 5;
    const PER_ROUND: u64 = 120;
    let s3 = S3Server::start().unwrap();
    let iggy = IggyServer::start().unwrap();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "ice", 2);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("catalog.db");
    let cfg = engine_sections(&iggy) + &iceberg_sink("ice", &t, &s3, &db);
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
        let mut engine = Engine::start(dir.path(), &format!("ice{round}"), &cfg);
        // Killed somewhere between its start and well past its first commits.
        std::thread::sleep(Duration::from_millis(seed.u64(300..3000)));
        engine.signal("KILL");
        let _ = engine.wait(Duration::from_secs(10));
    }
    let mut engine = Engine::start(dir.path(), "ice-last", &cfg);
    wait_stored(&mut engine, &mut admin, &t, "ice", sent - 1, LONG);
    stop_clean(&mut engine, Duration::from_secs(30));
    let log = engine.log();

    let table = pyiceberg_read(&db, &s3, "lake.raw.events");
    // Every offset once, with the payload Iggy holds at it.
    let mut seen: BTreeMap<(u64, u64), u32> = BTreeMap::new();
    for row in table["rows"].as_array().unwrap() {
        let (p, o) = (row[0].as_u64().unwrap(), row[1].as_u64().unwrap());
        let payload: Value = serde_json::from_str(row[2].as_str().unwrap()).unwrap();
        assert_eq!(payload["p"], p, "row of partition {p} at {o}");
        assert_eq!(payload["n"], o, "row of partition {p} at {o}");
        *seen.entry((p, o)).or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "rows in the table more than once: {twice:?}"
    );
    for p in 0..2 {
        let missing: Vec<u64> = (0..sent).filter(|o| !seen.contains_key(&(p, *o))).collect();
        assert!(
            missing.is_empty(),
            "partition {p} misses offsets {missing:?}\n{}",
            tail(&log, 40)
        );
    }
    assert_eq!(seen.len() as u64, 2 * sent);
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
        seen.len(),
        committed.len(),
        table["snapshots"]
    );
    for f in &committed {
        assert!(
            stored.contains(f),
            "the table names a file the store lacks: {f}"
        );
    }
}
