//! `spillway orphans`: the data files under a table's `data/` that no snapshot references, left
//! by a crash between a file's upload and its commit, a failed commit or a fenced member; listed,
//! and deleted with `--delete`. A file younger than `--older-than` is left alone: it may be one a
//! running engine has uploaded and not committed yet.

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use iceberg::spec::ManifestList;

use super::commit::Committer;
use crate::config::S3SinkConfig;

/// What was found (and deleted), as text for the operator.
pub(crate) fn run(
    sink: &str,
    cfg: &S3SinkConfig,
    older_than: Duration,
    delete: bool,
) -> Result<String, String> {
    let mut committer = Committer::new(sink, cfg)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("a tokio runtime: {e}"))?;
    let runtime = iceberg::Runtime::new(&rt);
    rt.block_on(async move {
        let catalog = committer.catalog(&runtime).await.map_err(|e| e.message)?;
        let table = catalog
            .load_table(&committer.ident)
            .await
            .map_err(|e| format!("Iceberg table {}: {e}", committer.ident))?;
        let io = table.file_io();
        let meta = table.metadata();
        let mut referenced = HashSet::new();
        for snapshot in meta.snapshots() {
            let bytes = io
                .new_input(snapshot.manifest_list())
                .map_err(|e| e.to_string())?
                .read()
                .await
                .map_err(|e| format!("manifest list {}: {e}", snapshot.manifest_list()))?;
            let list = ManifestList::parse_with_version(&bytes, meta.format_version())
                .map_err(|e| format!("manifest list {}: {e}", snapshot.manifest_list()))?;
            for file in list.entries() {
                let manifest = file
                    .load_manifest(io)
                    .await
                    .map_err(|e| format!("manifest {}: {e}", file.manifest_path))?;
                for entry in manifest.entries() {
                    referenced.insert(entry.data_file().file_path().to_owned());
                }
            }
        }
        let inside = format!("s3://{}/", committer.bucket);
        let location = meta.location();
        let path = location.strip_prefix(&inside).ok_or_else(|| {
            format!("the table's location {location} is not in the sink's bucket")
        })?;
        let prefix = format!("{}/data/", path.trim_end_matches('/'));
        let store = operator(&committer)?;
        let entries = store
            .list_with(&prefix)
            .recursive(true)
            .await
            .map_err(|e| format!("listing s3://{}/{prefix}: {e}", committer.bucket))?;
        let cutoff = SystemTime::now()
            .checked_sub(older_than)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let mut out = String::new();
        let (mut files, mut orphans, mut young, mut bytes) = (0u64, 0u64, 0u64, 0u64);
        for entry in entries {
            let m = entry.metadata();
            if !m.is_file() {
                continue;
            }
            files += 1;
            let key = entry.path();
            if referenced.contains(&format!("{inside}{key}")) {
                continue;
            }
            let modified = m.last_modified().map(SystemTime::from);
            if modified.is_none_or(|t| t > cutoff) {
                young += 1;
                continue;
            }
            orphans += 1;
            bytes += m.content_length();
            out.push_str(&format!("{inside}{key}\t{}\n", m.content_length()));
            if delete {
                store
                    .delete(key)
                    .await
                    .map_err(|e| format!("deleting {inside}{key}: {e}"))?;
            }
        }
        out.push_str(&format!(
            "# table {}: {files} files under {inside}{prefix}, {} referenced by its {} \
             snapshots; {orphans} orphans ({bytes} bytes){}; {young} newer than {} left alone\n",
            committer.ident,
            referenced.len(),
            meta.snapshots().len(),
            if delete { " deleted" } else { "" },
            crate::units::Rounded(older_than),
        ));
        Ok(out)
    })
}

/// The store as OpenDAL reaches it, with the catalog's FileIO properties.
fn operator(c: &Committer) -> Result<opendal::Operator, String> {
    let prop = |k: &str| c.props.get(k).map(String::as_str);
    let mut b = opendal::services::S3::default()
        .bucket(&c.bucket)
        .region(prop("s3.region").unwrap_or("us-east-1"))
        .disable_config_load()
        .disable_ec2_metadata();
    if let Some(e) = prop("s3.endpoint") {
        b = b.endpoint(e);
    }
    if let Some(k) = prop("s3.access-key-id") {
        b = b.access_key_id(k);
    }
    if let Some(k) = prop("s3.secret-access-key") {
        b = b.secret_access_key(k);
    }
    if let Some(t) = prop("s3.session-token") {
        b = b.session_token(t);
    }
    if prop("s3.path-style-access") != Some("true") {
        b = b.enable_virtual_host_style();
    }
    Ok(opendal::Operator::new(b)
        .map_err(|e| format!("the store: {e}"))?
        .finish())
}
