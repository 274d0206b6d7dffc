//! What the campaign does with the servers: a producer, Iggy reconnects and reads, the
//! broker's acknowledgements, the store's objects.

use super::*;

pub(super) fn note(list: &mut Vec<String>, what: String) {
    if list.len() < 10 {
        list.push(what);
    }
}

pub(super) fn reconnect(addr: &IggyAt) -> Result<IggyAdmin, String> {
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
pub(super) fn produce(addr: &IggyAt, stream: &str, stop: &AtomicBool, hold: &AtomicBool) {
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
pub(super) fn collect_acks(proxy: &MqttCountProxy, acked: &mut HashMap<(u32, u64), u32>) {
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
pub(super) fn json_u64(v: &serde_json::Value) -> Option<u64> {
    v.as_u64().or_else(|| v.as_str()?.parse().ok())
}

/// Each partition's last offset (`None`: empty).
pub(super) fn heads(
    admin: &mut IggyAdmin,
    stream: &str,
) -> Result<Vec<(u32, Option<u64>)>, String> {
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
pub(super) fn read_back(
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
pub(super) type Records = HashMap<(u32, u64), Vec<(String, serde_json::Value)>>;

/// Every record of the S3 sink's objects (the JSON payloads embedded as JSON).
pub(super) fn s3_records(s3: &S3Server) -> Result<Records, String> {
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
pub(super) fn dump_store(s3: &S3Server, logs: &Path) {
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

pub(super) fn key_of(bucket: &Path, path: &Path) -> String {
    path.strip_prefix(bucket)
        .map_or_else(|_| path.display().to_string(), |k| k.display().to_string())
}
