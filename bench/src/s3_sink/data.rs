//! The data of the s3-sink scenario: 1 KiB JSON payloads filled into the Iggy stand-in, and the
//! objects read back from s3s-fs's data directory (checked, then removed).

use std::io::Read as _;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use spillway_tests::{IggyAdmin, TestMessage};

/// Payload bytes per message.
pub const SIZE: usize = 1024;

const WORDS: &[&str] = &[
    "pressure",
    "valve",
    "nominal",
    "sensor",
    "reading",
    "flow",
    "north",
    "south",
    "pump",
    "cycle",
    "alarm",
    "cleared",
    "stable",
    "drift",
    "calibrated",
    "line",
    "batch",
    "queue",
    "temperature",
    "humidity",
    "gateway",
    "uplink",
    "retry",
    "ok",
    "warn",
    "spillway",
    "gate",
    "level",
    "inflow",
    "outflow",
    "reservoir",
    "turbine",
    "rpm",
    "load",
    "phase",
    "voltage",
];

/// The payload of message `seq` of `partition`: a JSON object of exactly `size` bytes
/// ([`SIZE`] in this scenario), some fields varying per message and a note of words, like a
/// device event. It is valid JSON, so the json_lines encoder embeds it as JSON
/// (`payload = "auto"`). Where the fields do not fit (below about 100 bytes), the object is
/// `{"seq":N}` padded with JSON whitespace, or `seq`'s digits cut to fit below that.
pub fn payload_sized(size: usize, partition: u32, seq: u64) -> Vec<u8> {
    let mut x = (seq + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(partition) << 48;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut s = format!(
        "{{\"seq\":{seq},\"device\":\"sensor-{:04}\",\"site\":\"plant-{}\",\"temp\":{}.{:02},\
         \"status\":\"{}\",\"note\":\"",
        next() % 10_000,
        next() % 8,
        next() % 40,
        next() % 100,
        if next() % 20 == 0 { "alarm" } else { "ok" },
    );
    let end = "\"}";
    if s.len() + end.len() > size {
        let mut short = format!("{{\"seq\":{seq}}}").into_bytes();
        if short.len() > size {
            short =
                format!("{}", seq % 10u64.pow(size.saturating_sub(1).min(19) as u32)).into_bytes();
        }
        short.resize(size.max(short.len()), b' ');
        short.truncate(size);
        return short;
    }
    while s.len() < size - end.len() {
        let w = WORDS[(next() % WORDS.len() as u64) as usize];
        let room = size - end.len() - s.len();
        if room <= w.len() {
            s.push_str(&"x".repeat(room));
        } else {
            s.push_str(w);
            s.push(' ');
        }
    }
    s.push_str(end);
    s.into_bytes()
}

/// Sends `per_partition` messages to each of `partitions` partitions of `stream`/`topic`, in
/// batches of 1000 (ids from 1).
pub fn fill(
    admin: &mut IggyAdmin,
    stream: &str,
    topic: &str,
    partitions: u32,
    per_partition: u64,
) -> Result<(), String> {
    fill_sized(admin, stream, topic, partitions, per_partition, SIZE)
}

/// [`fill`] with payloads of `size` bytes ([`payload_sized`]).
pub fn fill_sized(
    admin: &mut IggyAdmin,
    stream: &str,
    topic: &str,
    partitions: u32,
    per_partition: u64,
    size: usize,
) -> Result<(), String> {
    fill_with(admin, stream, topic, partitions, per_partition, |p, seq| {
        payload_sized(size, p, seq)
    })
    .map(|_| ())
}

/// Sends `per_partition` order rows ([`super::orders::order_row`]) to each of `partitions`
/// partitions, in batches of 1000 (ids from 1); returns the payload bytes sent.
pub fn fill_orders(
    admin: &mut IggyAdmin,
    stream: &str,
    topic: &str,
    partitions: u32,
    per_partition: u64,
) -> Result<u64, String> {
    fill_with(
        admin,
        stream,
        topic,
        partitions,
        per_partition,
        super::orders::order_row,
    )
}

/// Sends `per_partition` messages to each of `partitions` partitions, message `seq` of
/// partition `p` carrying `payload(p, seq)`, in batches of 1000 (ids from 1); the payload bytes
/// sent.
fn fill_with(
    admin: &mut IggyAdmin,
    stream: &str,
    topic: &str,
    partitions: u32,
    per_partition: u64,
    payload: impl Fn(u32, u64) -> Vec<u8>,
) -> Result<u64, String> {
    let mut bytes = 0;
    for p in 0..partitions {
        let mut sent = 0;
        while sent < per_partition {
            let n = (per_partition - sent).min(1000);
            let batch: Vec<TestMessage> = (sent..sent + n)
                .map(|seq| {
                    let body = payload(p, seq);
                    bytes += body.len() as u64;
                    TestMessage::new(u128::from(seq) + 1, Bytes::from(body))
                })
                .collect();
            admin
                .send(stream, topic, p, &batch)
                .map_err(|e| format!("filling partition {p} of {topic}: {e}"))?;
            sent += n;
        }
    }
    Ok(bytes)
}

/// The object files under `dir` (a key prefix in s3s-fs's bucket directory), in key order,
/// without s3s-fs's own bookkeeping files.
pub fn object_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    spillway_tests::object_files(dir).map_err(|e| format!("listing {}: {e}", dir.display()))
}

/// How an object was compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    None,
    Gzip,
    Zstd,
}

impl Codec {
    pub fn name(self) -> &'static str {
        match self {
            Codec::None => "none",
            Codec::Gzip => "gzip",
            Codec::Zstd => "zstd",
        }
    }
}

/// What the objects under a prefix hold.
#[derive(Debug, Default)]
pub struct Stored {
    pub objects: usize,
    /// Bytes stored (compressed).
    pub bytes: u64,
    /// Records: JSON lines after decompression, or Parquet rows.
    pub lines: u64,
    /// The decompressed bytes, when asked for.
    pub json: Option<Vec<u8>>,
}

/// Reads every object under `dir`, decompresses it and counts its lines; keeps the json_lines
/// bytes when `keep` (in key order: per partition, by first offset).
pub fn read_objects(dir: &Path, codec: Codec, keep: bool) -> Result<Stored, String> {
    let mut stored = Stored {
        json: keep.then(Vec::new),
        ..Stored::default()
    };
    for path in object_files(dir)? {
        let raw = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        stored.objects += 1;
        stored.bytes += raw.len() as u64;
        let text = match codec {
            Codec::None => raw,
            Codec::Gzip => {
                let mut out = Vec::with_capacity(raw.len() * 4);
                flate2::read::MultiGzDecoder::new(&raw[..])
                    .read_to_end(&mut out)
                    .map_err(|e| format!("{}: gunzip: {e}", path.display()))?;
                out
            }
            Codec::Zstd => zstd::stream::decode_all(&raw[..])
                .map_err(|e| format!("{}: zstd: {e}", path.display()))?,
        };
        if text.last().is_some_and(|&b| b != b'\n') {
            return Err(format!("{}: the last line is not ended", path.display()));
        }
        stored.lines += text.iter().filter(|&&b| b == b'\n').count() as u64;
        if let Some(json) = &mut stored.json {
            json.extend_from_slice(&text);
        }
    }
    Ok(stored)
}

/// Checks the objects of the split row: each key under `dir` begins with a site, and every
/// record of the object (zstd json_lines) has that site in its payload.
pub fn check_split_by_site(dir: &Path) -> Result<(), String> {
    let mut sites = std::collections::BTreeSet::new();
    for path in object_files(dir)? {
        let site = path
            .strip_prefix(dir)
            .ok()
            .and_then(|p| p.components().next())
            .and_then(|c| c.as_os_str().to_str())
            .ok_or_else(|| format!("{}: no site in the key", path.display()))?
            .to_owned();
        let raw = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let text = zstd::stream::decode_all(&raw[..])
            .map_err(|e| format!("{}: zstd: {e}", path.display()))?;
        for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let v: serde_json::Value = serde_json::from_slice(line)
                .map_err(|e| format!("{}: a line that is not JSON: {e}", path.display()))?;
            let got = v["payload"]["site"].as_str().unwrap_or("");
            if got != site {
                return Err(format!(
                    "{}: offset {} of site {got:?} in the object of {site:?}",
                    path.display(),
                    v["offset"]
                ));
            }
        }
        sites.insert(site);
    }
    if sites.len() < 2 {
        return Err(format!(
            "the split objects name {} sites, not 8",
            sites.len()
        ));
    }
    Ok(())
}

/// The Parquet objects under `dir`: their bytes, and their rows counted from each footer
/// (every object must be a whole Parquet file).
pub fn read_parquet(dir: &Path) -> Result<Stored, String> {
    use parquet::file::reader::FileReader as _;
    let mut stored = Stored::default();
    // An Iceberg table's metadata (JSON, Avro) lies beside its data files.
    for path in object_files(dir)?
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
    {
        let file = std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        stored.bytes += file
            .metadata()
            .map_err(|e| format!("{}: {e}", path.display()))?
            .len();
        let reader = parquet::file::reader::SerializedFileReader::new(file)
            .map_err(|e| format!("{}: not a Parquet file: {e}", path.display()))?;
        stored.objects += 1;
        stored.lines += u64::try_from(reader.metadata().file_metadata().num_rows()).unwrap_or(0);
    }
    Ok(stored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_1_kib_of_json_and_differ() {
        for (p, seq) in [(0, 0), (3, 1), (1, 999_999), (2, 12_345_678_901)] {
            let v = payload_sized(SIZE, p, seq);
            assert_eq!(v.len(), SIZE, "{p}/{seq}");
            let parsed: Result<serde_json::Value, _> = serde_json::from_slice(&v);
            assert!(parsed.is_ok(), "{}", String::from_utf8_lossy(&v));
        }
        assert_ne!(payload_sized(SIZE, 0, 1), payload_sized(SIZE, 0, 2));
        assert_ne!(payload_sized(SIZE, 0, 1), payload_sized(SIZE, 1, 1));
    }

    #[test]
    fn smaller_payloads_are_json_of_their_size() {
        for size in [100, 64, 20, 12] {
            for (p, seq) in [(0, 0), (3, 249_999), (1, 12_345_678_901)] {
                let v = payload_sized(size, p, seq);
                assert_eq!(v.len(), size, "{size} {p}/{seq}");
                let parsed: Result<serde_json::Value, _> = serde_json::from_slice(&v);
                assert!(parsed.is_ok(), "{}", String::from_utf8_lossy(&v));
            }
        }
        // 100 bytes hold every field for the seqs a run uses.
        assert!(payload_sized(100, 2, 249_999).starts_with(b"{\"seq\":249999,\"device\""));
    }
}
