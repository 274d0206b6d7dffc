//! `spillway orphans`: the data files of an S3 sink's Iceberg table that no snapshot references
//! (a crash between upload and commit, a failed commit, a fenced member leave them), listed and,
//! with `--delete`, removed. Files younger than `--older-than` are left alone: a running engine
//! may have uploaded them and not committed them yet.

use std::time::Duration;

use crate::config::Config;

/// The report for the operator, or what stopped it.
pub fn run(cfg: &Config, sink: &str, older_than: Duration, delete: bool) -> Result<String, String> {
    let s = cfg
        .sinks
        .iter()
        .find(|s| s.name == sink)
        .ok_or_else(|| format!("the config has no sink {sink:?}"))?;
    let s3 =
        s.s3.as_ref()
            .filter(|c| c.iceberg.is_some())
            .ok_or_else(|| format!("sink {sink:?} has no [sink.s3.iceberg] table"))?;
    #[cfg(feature = "iceberg")]
    {
        crate::sink::s3::table::orphans::run(sink, s3, older_than, delete)
    }
    #[cfg(not(feature = "iceberg"))]
    {
        let _ = (s3, older_than, delete);
        Err(
            "this spillway was built without Iceberg tables: build it with `cargo build \
             --release -p spillway --features iceberg`"
                .to_owned(),
        )
    }
}
