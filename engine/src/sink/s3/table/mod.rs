//! `[sink.s3.iceberg]`: the sink's objects are the data files of an Apache Iceberg table, and
//! their offsets are confirmed only once a snapshot that holds them is committed.
//!
//! The catalog client (iceberg-rust, async on tokio) runs on a thread of its own, one per sink,
//! shared by the sink's shards: the shards keep writing and uploading files, and hand each
//! complete file to it over a queue ([`Table::commit`]). It gathers the files that come within
//! `commit_interval` into one append snapshot whose summary records, for every partition of the
//! sink, the last offset in the table (`spillway.<sink>.<partition>`), carried forward from the
//! snapshot before.
//!
//! Exactly once, by the table alone:
//! - A partition taken up ([`Table::resume`]) starts after the offset the table records for it
//!   (Iggy's stored offset only when the table has none), and the partition's lease remembers
//!   that offset.
//! - A commit goes onto the snapshot it was checked against and nothing else: the catalog's
//!   compare-and-swap of the table's metadata, with the main branch's snapshot as the
//!   requirement ([`pinned`]). If another commit came first, the table is read again and the
//!   files checked again.
//! - A file is committed only while the table still records the offset its partition's lease
//!   expects: otherwise another member committed the partition since (it owns it now) and this
//!   member's file is left out; the partition is given up and taken up anew. If the table
//!   records the file's own last offset, the file's commit landed already (an answer lost).
//! - A crash between a file's upload and its commit leaves the file unreferenced (an orphan,
//!   see the README's maintenance step); its rows are written again after the restart.

// Without the feature, only the protocol's pure parts and the handle's refusals remain.
#![cfg_attr(not(feature = "iceberg"), allow(dead_code))]

#[cfg(feature = "iceberg")]
mod commit;
#[cfg(feature = "iceberg")]
pub(crate) mod orphans;
#[cfg(feature = "iceberg")]
mod pinned;
mod sink;
pub(crate) mod spec;

pub(super) use self::sink::commit_object;

use std::sync::Arc;

use crate::config::S3SinkConfig;
use crate::error::EngineError;

/// A data file uploaded and waiting for its commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewFile {
    /// The Iggy partition its rows are of.
    pub partition: u32,
    pub first: u64,
    pub last: u64,
    /// Its key in the sink's bucket.
    pub key: String,
    pub records: u64,
    pub size: u64,
    /// The lease the partition was taken up with ([`Table::resume`]).
    pub lease: u64,
    /// Its values of the table's partition fields, in the spec's order.
    pub values: Vec<spec::PartValue>,
}

/// How a file's commit ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Committed {
    /// The table holds it (committed now, or before an answer was lost).
    Yes,
    /// Another member committed its partition since the lease began: the file is left out.
    Fenced(String),
}

/// What a partition taken up starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lease {
    pub id: u64,
    /// The last offset the table records for the partition.
    pub last: Option<u64>,
}

/// The sink's table: a handle on its committer thread.
#[derive(Clone)]
pub(crate) struct Table {
    #[cfg(feature = "iceberg")]
    inner: Arc<commit::Handle>,
    #[cfg(not(feature = "iceberg"))]
    inner: Arc<()>,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table").finish_non_exhaustive()
    }
}

/// What the sink's committer did so far.
#[derive(Debug, Default)]
pub(crate) struct TableStats {
    pub commits: std::sync::atomic::AtomicU64,
    pub files: std::sync::atomic::AtomicU64,
    pub retries: std::sync::atomic::AtomicU64,
}

/// Where the table's data files go: the sink's bucket, under this key prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DataPath {
    pub prefix: String,
}

impl Table {
    /// The table of sink `sink`: its committer thread, started on first use.
    pub(crate) fn of(sink: &str, cfg: &S3SinkConfig) -> Result<Table, String> {
        #[cfg(feature = "iceberg")]
        {
            commit::handle(sink, cfg).map(|inner| Table { inner })
        }
        #[cfg(not(feature = "iceberg"))]
        {
            let _ = (
                sink,
                cfg,
                &Table {
                    inner: Arc::new(()),
                }
                .inner,
            );
            Err("this spillway was built without Iceberg tables (feature `iceberg`)".to_owned())
        }
    }

    /// Opens the table (creating its namespace and itself when missing): where its data files
    /// go. An error names what does not fit (the catalog, the schema, the location).
    pub(crate) async fn open(&self) -> Result<DataPath, EngineError> {
        #[cfg(feature = "iceberg")]
        {
            self.inner.open().await
        }
        #[cfg(not(feature = "iceberg"))]
        {
            Err(EngineError::permanent(
                "no Iceberg tables in this build".to_owned(),
            ))
        }
    }

    /// Takes `partition` up: the last offset the table records for it, under a new lease.
    pub(crate) async fn resume(&self, partition: u32) -> Result<Lease, EngineError> {
        #[cfg(feature = "iceberg")]
        {
            self.inner.resume(partition).await
        }
        #[cfg(not(feature = "iceberg"))]
        {
            let _ = partition;
            Err(EngineError::permanent(
                "no Iceberg tables in this build".to_owned(),
            ))
        }
    }

    /// What the committer did so far.
    pub(crate) fn stats(&self) -> crate::acks::SinkStatus {
        #[cfg(feature = "iceberg")]
        {
            use std::sync::atomic::Ordering::Relaxed;
            let s = self.inner.stats();
            crate::acks::SinkStatus {
                table_commits: s.commits.load(Relaxed),
                table_files: s.files.load(Relaxed),
                table_retries: s.retries.load(Relaxed),
                ..Default::default()
            }
        }
        #[cfg(not(feature = "iceberg"))]
        {
            crate::acks::SinkStatus::default()
        }
    }

    /// Commits `file` (with the files of other partitions that come meanwhile).
    pub(crate) async fn commit(&self, file: NewFile) -> Result<Committed, EngineError> {
        #[cfg(feature = "iceberg")]
        {
            self.inner.commit(file).await
        }
        #[cfg(not(feature = "iceberg"))]
        {
            let _ = file;
            Err(EngineError::permanent(
                "no Iceberg tables in this build".to_owned(),
            ))
        }
    }
}

/// The snapshot-summary key of `sink`'s offsets of `partition`.
pub(crate) fn offset_key(sink: &str, partition: u32) -> String {
    format!("spillway.{sink}.{partition}")
}

/// `sink`'s offsets in a snapshot summary: partition to last offset; `None` when the summary
/// has none of the sink's keys. A key of the sink whose value is not an offset is an error.
pub(crate) fn offsets_in<'a>(
    sink: &str,
    summary: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Result<Option<std::collections::BTreeMap<u32, u64>>, String> {
    let prefix = format!("spillway.{sink}.");
    let mut found = None;
    for (k, v) in summary {
        let Some(partition) = k.strip_prefix(&prefix) else {
            continue;
        };
        let Ok(partition) = partition.parse::<u32>() else {
            continue;
        };
        let offset = v
            .parse::<u64>()
            .map_err(|_| format!("the snapshot summary's {k} = {v:?} is not an offset"))?;
        found
            .get_or_insert_with(std::collections::BTreeMap::new)
            .insert(partition, offset);
    }
    Ok(found)
}

/// What the committer decides for a file, given the offset the table records for its
/// partition (`table`) and the partition's lease as this member holds it (`lease`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Into this commit.
    Include,
    /// In the table already (a commit whose answer was lost).
    Already,
    /// Another member committed the partition, or it was taken up again since.
    Fenced(String),
}

pub(crate) fn verdict(file: &NewFile, lease: Option<Lease>, table: Option<u64>) -> Verdict {
    let Some(lease) = lease.filter(|l| l.id == file.lease) else {
        return Verdict::Fenced(format!(
            "partition {} was taken up again since its file was written",
            file.partition
        ));
    };
    if table == lease.last {
        Verdict::Include
    } else if table == Some(file.last) {
        Verdict::Already
    } else {
        let show = |o: Option<u64>| o.map_or_else(|| "none".to_owned(), |o| o.to_string());
        Verdict::Fenced(format!(
            "the table records offset {} for partition {} where this member expected {}: \
             another member committed it",
            show(table),
            file.partition,
            show(lease.last)
        ))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn file(partition: u32, first: u64, last: u64, lease: u64) -> NewFile {
        NewFile {
            partition,
            first,
            last,
            key: String::new(),
            records: last - first + 1,
            size: 1,
            lease,
            values: Vec::new(),
        }
    }

    #[test]
    fn a_file_goes_in_only_while_the_table_holds_what_its_lease_expects() {
        let lease = Some(Lease {
            id: 7,
            last: Some(99),
        });
        assert_eq!(
            verdict(&file(3, 100, 199, 7), lease, Some(99)),
            Verdict::Include
        );
        // The commit landed before, its answer lost.
        assert_eq!(
            verdict(&file(3, 100, 199, 7), lease, Some(199)),
            Verdict::Already
        );
        // Another member committed the partition past it (or short of it).
        for table in [Some(150), Some(250), None, Some(98)] {
            assert!(matches!(
                verdict(&file(3, 100, 199, 7), lease, table),
                Verdict::Fenced(_)
            ));
        }
        // A file of an earlier lease, or of a partition not taken up.
        assert!(matches!(
            verdict(&file(3, 100, 199, 6), lease, Some(99)),
            Verdict::Fenced(_)
        ));
        assert!(matches!(
            verdict(&file(3, 100, 199, 7), None, Some(99)),
            Verdict::Fenced(_)
        ));
        // A partition the table never had.
        let fresh = Some(Lease { id: 1, last: None });
        assert_eq!(verdict(&file(0, 0, 9, 1), fresh, None), Verdict::Include);
    }

    #[test]
    fn the_summary_keys_of_a_sink_are_its_partitions_offsets() {
        let summary: std::collections::HashMap<String, String> = [
            ("spillway.orders.0", "41"),
            ("spillway.orders.12", "7"),
            ("spillway.orders-eu.0", "5"),
            ("spillway.orders.x", "5"),
            ("added-records", "100"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let found = offsets_in("orders", &summary).unwrap().unwrap();
        assert_eq!(
            found.into_iter().collect::<Vec<_>>(),
            vec![(0, 41), (12, 7)]
        );
        assert_eq!(offsets_in("other", &summary).unwrap(), None);
        let bad: std::collections::HashMap<String, String> =
            [("spillway.orders.1".to_owned(), "-1".to_owned())].into();
        assert!(
            offsets_in("orders", &bad)
                .unwrap_err()
                .contains("spillway.orders.1")
        );
        assert_eq!(offset_key("orders", 12), "spillway.orders.12");
    }
}
