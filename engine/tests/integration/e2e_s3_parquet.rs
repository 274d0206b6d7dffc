//! Parquet objects end to end: the real Iggy server -> the `spillway` binary -> s3s-fs (it
//! verifies SigV4). Every object is read back twice, with arrow-rs's reader (the crate the
//! engine writes with) and with pyarrow (an independent implementation, from PyPI in the test
//! set-up), and both are compared row for row with what Iggy holds, polled back from it.
//!
//! Also the memory bound with Parquet, as `e2e_s3_memory.rs` checks it for raw objects: 512 MiB
//! from the `generate` source in one object, with what the sink holds within the part window
//! plus one row group.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use arrow_array::cast::AsArray as _;
use arrow_array::types::{
    Float64Type, Int64Type, TimestampMicrosecondType, UInt32Type, UInt64Type,
};
use arrow_array::{Array as _, RecordBatch};
use base64::Engine as _;
use common::{
    Engine, engine_sections, metric_of_sink, object_files, proc_status_kib, s3_sink,
    scrape_metrics, stop_clean, tail, topic, wait_stored,
};
use serde_json::{Value, json};
use spillway_tests::ports::free_loopback_port;
use spillway_tests::{IggyServer, S3Server, TestConsumer, TestMessage};

const LONG: Duration = Duration::from_secs(90);
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Reads each Parquet file named on the command line with pyarrow and prints, per file, a line
/// with its schema and a line per row, values as JSON (timestamps as integer µs, binary as
/// base64, maps as lists of pairs).
const PYARROW_READER: &str = r#"
import base64, json, sys
import pyarrow as pa
import pyarrow.parquet as pq

for path in sys.argv[1:]:
    f = pq.ParquetFile(path)
    t = f.read()
    print(json.dumps({"file": path, "row_groups": f.num_row_groups,
                      "schema": {n: str(t.schema.field(n).type) for n in t.column_names}}))
    cols = {}
    for name in t.column_names:
        c = t.column(name)
        if pa.types.is_timestamp(c.type):
            c = c.cast(pa.int64())
        cols[name] = c.to_pylist()
    for i in range(t.num_rows):
        row = {}
        for name, values in cols.items():
            v = values[i]
            if isinstance(v, bytes):
                v = base64.b64encode(v).decode()
            elif isinstance(v, list):
                v = [list(kv) for kv in v]
            row[name] = v
        print(json.dumps({"file": path, "row": row}))
"#;

/// `(schema, row groups, rows)` of every file, as pyarrow reads them.
type PyFiles = BTreeMap<String, (Value, u64, Vec<Value>)>;

fn pyarrow_read(paths: &[PathBuf]) -> PyFiles {
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(PYARROW_READER)
        .args(paths)
        .output()
        .expect("python3 (scripts/setup.sh installs pyarrow)");
    assert!(
        out.status.success(),
        "pyarrow could not read the objects: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut files = PyFiles::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let file = v["file"].as_str().unwrap().to_owned();
        let entry = files
            .entry(file)
            .or_insert_with(|| (Value::Null, 0, Vec::new()));
        if v.get("schema").is_some() {
            entry.0 = v["schema"].clone();
            entry.1 = v["row_groups"].as_u64().unwrap();
        } else {
            entry.2.push(v["row"].clone());
        }
    }
    files
}

/// The rows of a file as arrow-rs reads them, in the shape the pyarrow script prints.
fn arrow_read(path: &Path) -> (usize, Vec<Value>) {
    let bytes = bytes::Bytes::from(std::fs::read(path).unwrap());
    let builder =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap();
    let groups = builder.metadata().num_row_groups();
    let mut rows = Vec::new();
    for batch in builder.build().unwrap() {
        rows.extend(batch_rows(&batch.unwrap()));
    }
    (groups, rows)
}

fn batch_rows(b: &RecordBatch) -> Vec<Value> {
    let schema = b.schema();
    (0..b.num_rows())
        .map(|i| {
            let mut row = serde_json::Map::new();
            for (c, field) in schema.fields().iter().enumerate() {
                let a = b.column(c);
                let v = if a.is_null(i) {
                    Value::Null
                } else {
                    match field.name().as_str() {
                        "stream" | "topic" | "id" | "region" => {
                            json!(a.as_string::<i32>().value(i))
                        }
                        "partition" => json!(a.as_primitive::<UInt32Type>().value(i)),
                        "offset" => json!(a.as_primitive::<UInt64Type>().value(i)),
                        "timestamp" | "origin_timestamp" => {
                            json!(a.as_primitive::<TimestampMicrosecondType>().value(i))
                        }
                        "n" => json!(a.as_primitive::<Int64Type>().value(i)),
                        "temp" => json!(a.as_primitive::<Float64Type>().value(i)),
                        "payload" => json!(B64.encode(a.as_binary::<i32>().value(i))),
                        "headers" => {
                            let entries = a.as_map().value(i);
                            let (k, v) = (
                                entries.column(0).as_string::<i32>(),
                                entries.column(1).as_string::<i32>(),
                            );
                            json!(
                                (0..k.len())
                                    .map(|j| json!([k.value(j), v.value(j)]))
                                    .collect::<Vec<_>>()
                            )
                        }
                        other => panic!("unexpected column {other}"),
                    }
                };
                row.insert(field.name().clone(), v);
            }
            Value::Object(row)
        })
        .collect()
}

/// Message `n` of a partition: JSON with a region, a count and a temperature, except every
/// 50th, which has no region (its required column) and must go to the dead letters.
fn payload(n: u64) -> String {
    if n % 50 == 49 {
        return format!("{{\"n\":{n}}}");
    }
    let region = ["eu", "us west", "ap"][(n % 3) as usize];
    format!(
        "{{\"region\":\"{region}\",\"n\":{n},\"temp\":{}}}",
        n as f64 * 0.5 - 20.0
    )
}

#[test]
fn parquet_objects_match_what_iggy_holds_row_for_row_in_arrow_rs_and_pyarrow() {
    const PER: u64 = 300;
    let s3 = S3Server::start().unwrap();
    let iggy = IggyServer::start().unwrap();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "s3pq", 2);
    for p in 0..2u32 {
        let batch: Vec<TestMessage> = (0..PER)
            .map(|n| {
                let m = TestMessage::new(u128::from(n) * 1_000_003 + 7, payload(n).into_bytes());
                if n % 4 == 0 {
                    m
                } else {
                    m.with_header("n", &n.to_string())
                        .with_header("kind", ["a", "b"][(n % 2) as usize])
                }
            })
            .collect();
        common::send_all(&mut admin, &t, p, &batch);
    }
    let extra = r#"prefix = "lake/"
key = "{partition}/{first_offset}.{ext}"
format = "parquet"
max_object_messages = 120
idle_flush = "300ms"
dead_letter_prefix = "dead/"

[sink.s3.parquet]
row_group_rows = 25

[[sink.s3.parquet.columns]]
name = "region"
pointer = "/region"
type = "string"
required = true

[[sink.s3.parquet.columns]]
name = "n"
pointer = "/n"
type = "int64"

[[sink.s3.parquet.columns]]
name = "temp"
pointer = "/temp"
type = "float64"
"#;
    let cfg = engine_sections(&iggy)
        + &s3_sink("pq", &t, &s3, extra).replace(
            "\n[sink.s3]\n",
            "\non_error = \"dead_letter\"\n\n[sink.s3]\n",
        );
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::start(dir.path(), "pq", &cfg);
    wait_stored(&mut engine, &mut admin, &t, "pq", PER - 1, LONG);
    stop_clean(&mut engine, Duration::from_secs(30));

    // What Iggy holds, polled back.
    let mut held = BTreeMap::new();
    for p in 0..2u32 {
        let mut from = 0;
        while from < PER {
            let msgs = admin
                .poll(
                    &TestConsumer::Named("check".to_owned()),
                    &t.stream,
                    &t.topic,
                    p,
                    from,
                    100,
                )
                .unwrap();
            assert!(
                !msgs.is_empty(),
                "nothing at offset {from} of partition {p}"
            );
            for m in msgs {
                from = m.offset + 1;
                held.insert((p, m.offset), m);
            }
        }
    }
    let expected = |p: u32, m: &spillway_tests::PolledTestMessage| -> Value {
        let doc: Value = serde_json::from_slice(&m.payload).unwrap();
        json!({
            "stream": t.stream,
            "topic": t.topic,
            "partition": p,
            "offset": m.offset,
            "id": m.id.to_string(),
            "timestamp": m.timestamp,
            "origin_timestamp": m.origin_timestamp,
            "headers": m.headers.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
            "payload": B64.encode(&m.payload),
            "region": doc["region"],
            "n": doc["n"],
            "temp": doc["temp"].as_f64(),
        })
    };

    let files: Vec<(String, PathBuf, u64)> = object_files(&s3.bucket_dir());
    let objects: Vec<&(String, PathBuf, u64)> = files
        .iter()
        .filter(|(k, _, _)| k.starts_with("lake/") && !k.contains(".spillway/"))
        .collect();
    let paths: Vec<PathBuf> = objects.iter().map(|(_, p, _)| p.clone()).collect();
    let py = pyarrow_read(&paths);
    assert_eq!(py.len(), objects.len(), "pyarrow read every object");
    let mut seen = BTreeMap::new();
    for (key, path, _) in &objects {
        let p: u32 = key.split('/').nth(1).unwrap().parse().unwrap();
        assert!(key.ends_with(".parquet"), "{key}");
        let (groups, rows) = arrow_read(path);
        let (schema, py_groups, py_rows) = &py[&path.to_string_lossy().into_owned()];
        assert_eq!(
            schema,
            &json!({
                "stream": "string", "topic": "string", "partition": "uint32",
                "offset": "uint64", "id": "string",
                "timestamp": "timestamp[us, tz=UTC]",
                "origin_timestamp": "timestamp[us, tz=UTC]",
                // pyarrow names a map's entries after its column when it reads Parquet.
                "headers": "map<string, string ('headers')>",
                "payload": "binary", "region": "string", "n": "int64", "temp": "double",
            }),
            "{key}: the schema pyarrow sees"
        );
        assert_eq!(
            rows, *py_rows,
            "{key}: arrow-rs and pyarrow read different rows"
        );
        assert_eq!(groups as u64, *py_groups);
        assert_eq!(
            groups,
            rows.len().div_ceil(25),
            "{key}: row groups of 25 rows"
        );
        for row in &rows {
            let offset = row["offset"].as_u64().unwrap();
            let m = &held[&(p, offset)];
            assert_eq!(*row, expected(p, m), "{key}: the row of offset {offset}");
            assert!(
                seen.insert((p, offset), key.clone()).is_none(),
                "offset {offset} of partition {p} in two objects"
            );
        }
    }
    // The messages without a region are dead letters, and nowhere else.
    let letters: Vec<&(String, PathBuf, u64)> = files
        .iter()
        .filter(|(k, _, _)| k.starts_with("dead/"))
        .collect();
    for (key, path, _) in &letters {
        let v: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        let reason = v["reason"].as_str().unwrap();
        assert!(
            reason.contains("s3.parquet.columns[0] (\"region\"): no value at \"/region\""),
            "{key}: {reason}"
        );
        let (p, offset) = (
            v["record"]["partition"].as_u64().unwrap() as u32,
            v["record"]["offset"].as_u64().unwrap(),
        );
        assert!(
            seen.insert((p, offset), key.clone()).is_none(),
            "{key} also in an object"
        );
    }
    assert_eq!(
        letters.len(),
        2 * 6,
        "6 messages per partition have no region"
    );
    assert_eq!(
        seen.keys().copied().collect::<Vec<_>>(),
        held.keys().copied().collect::<Vec<_>>(),
        "every offset Iggy holds is in exactly one object or dead letter"
    );
}

const MIB: u64 = 1 << 20;

#[test]
fn parquet_memory_stays_within_the_part_window_and_one_row_group() {
    const SIZE: u64 = 64 << 10;
    const MESSAGES: u64 = 8192;
    const PART: u64 = 8 * MIB;
    const IN_FLIGHT: u64 = 2;
    const ROW_GROUP: u64 = 8 * MIB;
    /// The part window (as for raw objects, e2e_s3_memory.rs), one row group encoded and
    /// waiting to be handed to the upload, and the rows of the next: at most a row group plus
    /// one row.
    const BOUND: u64 = PART * (IN_FLIGHT + 1) + ROW_GROUP + ROW_GROUP + SIZE + 64 * 1024;
    /// The debug build, besides what the sink counts: the row group's arrays while they are
    /// encoded (a row group, and its encoding).
    const RSS_LIMIT_KIB: u64 = 384 * 1024;
    let s3 = S3Server::start().unwrap();
    let metrics = SocketAddr::from((Ipv4Addr::LOCALHOST, free_loopback_port().unwrap()));
    let cfg = format!(
        r#"
[runtime]
shutdown_timeout = "20s"

[metrics]
address = "{metrics}"
log_interval = "2s"

[[sink]]
name = "pqmem"
type = "s3"
source = "generate"

[sink.generate]
rate = 0
partitions = 1
size = "64KiB"
messages = {MESSAGES}

[sink.s3]
bucket = "{bucket}"
endpoint = "{endpoint}"
region = "{region}"
access_key_id = "{ak}"
secret_access_key = "{sk}"
format = "parquet"
part_size = "8MiB"
parts_in_flight = {IN_FLIGHT}
max_object_size = "1GiB"

[sink.s3.parquet]
compression = "none"
row_group_size = "{ROW_GROUP}"
"#,
        bucket = s3.bucket(),
        endpoint = s3.endpoint(),
        region = s3.region(),
        ak = s3.access_key(),
        sk = s3.secret_key(),
    );
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut engine = Engine::start(dir.path(), "pqmem", &cfg);
    let pid = engine.pid();
    let (mut peak, mut hwm) = (0u64, 0u64);
    let status = loop {
        if let Some(kib) = proc_status_kib(pid, "VmHWM") {
            hwm = hwm.max(kib);
        }
        if let Some(body) = scrape_metrics(metrics)
            && let Some(v) = metric_of_sink(&body, "spillway_sink_buffered_peak_bytes", "pqmem")
        {
            peak = peak.max(v as u64);
        }
        if let Some(status) = engine.wait(Duration::from_millis(100)) {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "the engine did not finish\n{}",
            tail(&engine.log(), 30)
        );
    };
    let log = engine.log();
    assert!(status.success(), "{status:?}\n{}", tail(&log, 30));
    eprintln!(
        "parquet 512 MiB in {:.1?}: peak buffered {:.2} MiB (bound {:.2} MiB), VmHWM {:.1} MiB",
        started.elapsed(),
        peak as f64 / MIB as f64,
        BOUND as f64 / MIB as f64,
        hwm as f64 / 1024.0
    );
    assert!(
        peak >= PART,
        "peak buffered {peak}: a part is held whole while it uploads"
    );
    assert!(peak <= BOUND, "peak buffered {peak} bytes, over {BOUND}");
    assert!(
        hwm < RSS_LIMIT_KIB,
        "peak RSS {hwm} KiB, not under {RSS_LIMIT_KIB} KiB"
    );

    // One object, every payload of the generator in offset order.
    let objects: Vec<(String, PathBuf, u64)> = object_files(&s3.bucket_dir())
        .into_iter()
        .filter(|(k, _, _)| !k.contains(".spillway/"))
        .collect();
    assert_eq!(objects.len(), 1, "{objects:?}");
    let (key, path, _) = &objects[0];
    assert!(key.ends_with(".parquet"), "{key}");
    let file = std::fs::File::open(path).unwrap();
    let builder =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
    let groups = builder.metadata().num_row_groups();
    let pattern = b"spillway generated payload 0123456789 abcdefghijklmnopqrstuvwxyz ";
    let mut pool = Vec::new();
    while pool.len() < (SIZE as usize) + 4096 {
        pool.extend_from_slice(pattern);
    }
    let mut next = 0u64;
    for batch in builder.build().unwrap() {
        let batch = batch.unwrap();
        let offsets = batch
            .column_by_name("offset")
            .unwrap()
            .as_primitive::<UInt64Type>()
            .clone();
        let payloads = batch
            .column_by_name("payload")
            .unwrap()
            .as_binary::<i32>()
            .clone();
        for i in 0..batch.num_rows() {
            assert_eq!(offsets.value(i), next);
            let start = (next as usize * 7) % 4096;
            assert!(
                payloads.value(i) == &pool[start..start + SIZE as usize],
                "the payload of offset {next}"
            );
            next += 1;
        }
    }
    assert_eq!(next, MESSAGES);
    // A row counts its 64 KiB payload and 100-400 bytes of metadata: the 128th fills 8 MiB.
    assert_eq!(
        groups as u64,
        MESSAGES.div_ceil(128),
        "row groups of {ROW_GROUP} bytes"
    );
}

/// (partition, offset) of every row of the Parquet objects under `prefix`, sorted.
fn parquet_offsets(bucket: &Path, prefix: &str) -> Vec<(u64, u64)> {
    let mut all = Vec::new();
    for (key, path, _) in object_files(bucket) {
        if !key.starts_with(prefix) || key.contains(".spillway/") {
            continue;
        }
        let bytes = bytes::Bytes::from(std::fs::read(&path).unwrap());
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes)
            .unwrap_or_else(|e| panic!("{key} is not a whole Parquet file: {e}"))
            .build()
            .unwrap();
        for batch in reader {
            let b = batch.unwrap();
            let p = b
                .column_by_name("partition")
                .unwrap()
                .as_primitive::<UInt32Type>()
                .clone();
            let o = b
                .column_by_name("offset")
                .unwrap()
                .as_primitive::<UInt64Type>()
                .clone();
            all.extend((0..b.num_rows()).map(|i| (u64::from(p.value(i)), o.value(i))));
        }
    }
    all.sort_unstable();
    all
}

/// The marker test of `e2e_s3.rs` with Parquet objects: a store that drops bodies and answers
/// 500 and 503 now and then (the fault proxy), and three SIGKILLs at random moments. After each
/// kill, what Iggy holds as stored never passes what is in complete objects; at the end every
/// offset is in exactly one object (objects written again after a failure or a kill are the
/// same objects under the same keys), and every object is a whole Parquet file.
#[test]
fn parquet_objects_survive_faults_and_sigkills_with_every_offset_once() {
    const PER_PARTITION: u64 = 20_000;
    let s3 = S3Server::start().unwrap();
    let proxy = common::faulty_store(&s3, 0x9a7);
    let iggy = IggyServer::start().unwrap();
    let mut admin = iggy.admin().unwrap();
    let t = topic(&iggy, "s3pqkill", 2);
    let filler = "y".repeat(900);
    for p in 0..2u32 {
        let batch: Vec<TestMessage> = (0..PER_PARTITION)
            .map(|n| {
                TestMessage::new(
                    u128::from(n) + 1,
                    format!("{{\"p\":{p},\"n\":{n},\"f\":\"{filler}\"}}").into_bytes(),
                )
            })
            .collect();
        common::send_all(&mut admin, &t, p, &batch);
    }
    let cfg = engine_sections(&iggy)
        + &s3_sink(
            "pqkill",
            &t,
            &s3,
            "prefix = \"k/\"\nformat = \"parquet\"\nmax_object_size = \"6MiB\"\npart_size = \"5MiB\"\n\
             idle_flush = \"500ms\"\nretry_min = \"50ms\"\nretry_max = \"500ms\"\n\
             [sink.s3.parquet]\ncompression = \"none\"\nrow_group_size = \"1MiB\"\n\
             [[sink.s3.parquet.columns]]\nname = \"n\"\npointer = \"/n\"\ntype = \"int64\"\nrequired = true",
        )
        .replace(&s3.endpoint(), &format!("http://{}", proxy.host_port()));
    let dir = tempfile::tempdir().unwrap();
    for round in 0..3 {
        let mut engine = Engine::start(dir.path(), &format!("pqkill{round}"), &cfg);
        std::thread::sleep(Duration::from_millis(fastrand::u64(800..3000)));
        engine.signal("KILL");
        let _ = engine.wait(Duration::from_secs(10));
        let done = parquet_offsets(&s3.bucket_dir(), "k/");
        common::assert_stored_in_objects(&mut admin, &t, "pqkill", &done, round);
    }
    let mut engine = Engine::start(dir.path(), "pqkill-last", &cfg);
    wait_stored(
        &mut engine,
        &mut admin,
        &t,
        "pqkill",
        PER_PARTITION - 1,
        Duration::from_secs(240),
    );
    stop_clean(&mut engine, Duration::from_secs(60));
    let all = parquet_offsets(&s3.bucket_dir(), "k/");
    let want: Vec<(u64, u64)> = (0..2u64)
        .flat_map(|p| (0..PER_PARTITION).map(move |o| (p, o)))
        .collect();
    assert!(
        all == want,
        "every offset in exactly one object: {} rows for {} offsets",
        all.len(),
        want.len()
    );
    // Objects stay within max_object_size (the footer aside: a few KiB).
    for (key, _, size) in object_files(&s3.bucket_dir()) {
        assert!(size <= (6 << 20) + (64 << 10), "{key}: {size} bytes");
    }
    assert!(
        proxy.stats().faults() > 0,
        "no fault injected: {:?}",
        proxy.stats()
    );
}
