//! The `[sink.s3]` table's checks: bucket and endpoint, credentials (and the cargo features
//! they need), keys, formats and Parquet columns, sizes and retries.

use super::*;

pub(super) fn validate_s3(i: usize, sink: &SinkConfig) -> Result<(), Problem> {
    let key = |k: &str| format!("sink[{i}].s3.{k}");
    let Some(c) = &sink.s3 else {
        return Err(problem(
            format!("sink[{i}].s3"),
            "missing: type = \"s3\" needs [sink.s3] with at least bucket",
        ));
    };
    if c.bucket.is_empty() {
        return Err(problem(key("bucket"), "must not be empty"));
    }
    match (sink.on_error, c.dead_letter_prefix.as_deref()) {
        (ErrorPolicy::DeadLetter, None | Some("")) => {
            return Err(problem(
                key("dead_letter_prefix"),
                "missing: on_error = \"dead_letter\" needs the prefix rejected messages go to",
            ));
        }
        (ErrorPolicy::DeadLetter, Some(p)) if p == c.prefix => {
            return Err(problem(
                key("dead_letter_prefix"),
                "must differ from prefix, so dead letters are not taken for data",
            ));
        }
        (ErrorPolicy::DeadLetter, Some(_)) | (_, None) => {}
        (_, Some(_)) => {
            return Err(problem(
                key("dead_letter_prefix"),
                "is set but on_error is not \"dead_letter\"",
            ));
        }
    }
    let region = c.region.clone().unwrap_or_else(|| "us-east-1".to_owned());
    let endpoint = c
        .endpoint(&region)
        .map_err(|e| problem(key("endpoint"), e))?;
    endpoint
        .check_bucket(&c.bucket)
        .map_err(|e| problem(key("bucket"), e.to_string()))?;
    if let Some(ca) = &c.tls_ca
        && !ca.is_file()
    {
        return Err(problem(
            key("tls_ca"),
            format!("{} is not a readable file", ca.display()),
        ));
    }
    // Static keys: both or neither (neither: the AWS credential chain, unless
    // `credentials = "static"`); an empty one (AWS_ACCESS_KEY_ID="") would only fail at the
    // first signed request.
    let static_only = c.credentials == crate::config::CredentialSource::Static;
    let chain_hint = if static_only {
        ""
    } else {
        " (or set neither, for the AWS credential chain)"
    };
    match (
        c.access_key_id.as_deref().map(str::trim),
        &c.secret_access_key,
    ) {
        (None, None) if static_only => {
            return Err(problem(
                key("access_key_id"),
                "missing: set access_key_id and secret_access_key, or AWS_ACCESS_KEY_ID and \
                 AWS_SECRET_ACCESS_KEY (credentials = \"static\")",
            ));
        }
        (None, None) => {}
        (Some(""), _) => {
            return Err(problem(
                key("access_key_id"),
                "empty (from the file or AWS_ACCESS_KEY_ID): give the access key id",
            ));
        }
        (_, Some(s)) if s.expose().is_empty() => {
            return Err(problem(
                key("secret_access_key"),
                "empty (from the file or AWS_SECRET_ACCESS_KEY): give the secret access key",
            ));
        }
        (None, Some(_)) => {
            return Err(problem(
                key("access_key_id"),
                format!(
                    "missing, though secret_access_key is set: set access_key_id or \
                     AWS_ACCESS_KEY_ID{chain_hint}"
                ),
            ));
        }
        (Some(_), None) => {
            return Err(problem(
                key("secret_access_key"),
                format!("missing: set it or AWS_SECRET_ACCESS_KEY{chain_hint}"),
            ));
        }
        (Some(_), Some(_)) => {}
    }
    let uses_chain = match c.credentials {
        crate::config::CredentialSource::Chain => true,
        crate::config::CredentialSource::Auto => c.access_key_id.is_none(),
        crate::config::CredentialSource::Static => false,
    };
    if uses_chain {
        chain_built(c.credentials, crate::credentials::BUILT, &key)?;
    }
    if c.key.needs_last_offset() && c.max_object_size.0 > c.part_size.0 {
        return Err(problem(
            key("key"),
            "{last_offset} is only known when an object is closed, so such objects are sent whole: set max_object_size to at most part_size",
        ));
    }
    c.format_options()
        .level_in_use()
        .map_err(|e| problem(key("compression_level"), e))?;
    if c.part_size.0 < 5 << 20 || c.part_size.0 > 5 << 30 {
        return Err(problem(
            key("part_size"),
            "must be 5 MiB to 5 GiB (S3's limits)",
        ));
    }
    if c.parts_in_flight == 0 || c.parts_in_flight > 64 {
        return Err(problem(key("parts_in_flight"), "must be 1 to 64"));
    }
    if c.max_object_size.0 == 0 {
        return Err(problem(key("max_object_size"), "must be more than 0 bytes"));
    }
    if c.max_open_objects == 0 || c.max_open_objects > 4096 {
        return Err(problem(key("max_open_objects"), "must be 1 to 4096"));
    }
    if c.max_split_lag == 0 {
        return Err(problem(key("max_split_lag"), "must be at least 1 message"));
    }
    if c.request_timeout.0 < std::time::Duration::from_millis(100) {
        return Err(problem(key("request_timeout"), "must be at least 100ms"));
    }
    if c.request_attempts == 0 || c.request_attempts > 100 {
        return Err(problem(key("request_attempts"), "must be 1 to 100"));
    }
    if c.retry_min.0.is_zero() || c.retry_min > c.retry_max {
        return Err(problem(
            key("retry_min"),
            "must be more than 0 and at most s3.retry_max",
        ));
    }
    if c.profile.is_some() && c.credentials == crate::config::CredentialSource::Static {
        return Err(problem(
            key("profile"),
            "is for the credential chain: not with credentials = \"static\"",
        ));
    }
    if c.sse_kms_key_id.is_some() && c.sse != Some(crate::config::SseKind::Kms) {
        return Err(problem(key("sse_kms_key_id"), "is only for sse = \"kms\""));
    }
    for (k, set) in [
        ("sse_customer_key_file", c.sse_customer_key_file.is_some()),
        ("sse_customer_key_env", c.sse_customer_key_env.is_some()),
    ] {
        if set && c.sse != Some(crate::config::SseKind::Customer) {
            return Err(problem(key(k), "is only for sse = \"customer\""));
        }
    }
    for name in c.user_metadata.keys() {
        let token = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !token {
            return Err(problem(
                key(&format!("user_metadata.{name}")),
                "a metadata name is letters, digits and - _ . (an HTTP token)",
            ));
        }
        if crate::config::s3::OWN_METADATA
            .iter()
            .any(|own| own.eq_ignore_ascii_case(name))
        {
            return Err(problem(
                key(&format!("user_metadata.{name}")),
                format!(
                    "the sink sets {name:?} itself (with {}); choose another name",
                    crate::config::s3::OWN_METADATA.join(", ")
                ),
            ));
        }
    }
    if c.tags.len() > spillway_s3::options::MAX_TAGS {
        return Err(problem(
            key("tags"),
            format!(
                "{} tags: S3 takes at most {}",
                c.tags.len(),
                spillway_s3::options::MAX_TAGS
            ),
        ));
    }
    for name in c.tags.keys() {
        let chars = name.chars().count();
        if chars == 0 || chars > spillway_s3::options::MAX_TAG_KEY_CHARS {
            return Err(problem(
                key(&format!("tags.{name}")),
                format!(
                    "a tag key is 1 to {} characters",
                    spillway_s3::options::MAX_TAG_KEY_CHARS
                ),
            ));
        }
    }
    if c.length_prefix && c.format != crate::config::Format::Raw {
        return Err(problem(
            key("length_prefix"),
            "is only for format = \"raw\"",
        ));
    }
    parquet(c, &key)?;
    iceberg(c, cfg!(feature = "iceberg"), &key)
}

/// `s3.iceberg.partition_by`: each field a column the files have, with a transform the sink can
/// cut files by (see `sink::s3::table::spec`).
fn partition_by(
    c: &crate::config::S3SinkConfig,
    t: &crate::config::IcebergConfig,
    key: &dyn Fn(&str) -> String,
) -> Result<(), Problem> {
    use crate::config::{ColumnType, PartitionTransform};
    use crate::template::key::TimeSource;
    let mut names = std::collections::HashSet::new();
    let mut time_fields = 0;
    for (i, f) in t.partition_by.iter().enumerate() {
        let at = key(&format!("iceberg.partition_by[{i}]"));
        if !names.insert(f.name()) {
            return Err(problem(at, format!("{} is in the spec twice", f.name())));
        }
        let typed = c.parquet.columns.iter().find(|col| col.name == f.column);
        let own = c.metadata
            && ["partition", "timestamp", "origin_timestamp"].contains(&f.column.as_str());
        if typed.is_none() && !own {
            return Err(problem(
                at,
                format!(
                    "{:?} is no column the sink writes that it can partition by: a typed column \
                     of s3.parquet.columns, or (with s3.metadata) partition, timestamp, \
                     origin_timestamp",
                    f.column
                ),
            ));
        }
        match f.transform {
            PartitionTransform::Identity => match (f.column.as_str(), typed) {
                ("partition", None) => {}
                (_, Some(col))
                    if matches!(
                        col.kind,
                        ColumnType::String | ColumnType::Int64 | ColumnType::Boolean
                    ) =>
                {
                    if !col.required {
                        return Err(problem(
                            at,
                            format!(
                                "identity on {:?} needs the column required = true: each file \
                                 holds one value of it, and a message without one has no file",
                                col.name
                            ),
                        ));
                    }
                    let default = c.key == crate::template::key::KeyTemplate::default();
                    if !default && !c.key.split_pointers().contains(&Some(col.pointer.as_str())) {
                        return Err(problem(
                            key("key"),
                            format!(
                                "must split by the partition column {:?}: put {{json.{}}} in \
                                 it (or leave s3.key out: the sink then names the files by \
                                 their partition values)",
                                col.name, col.pointer
                            ),
                        ));
                    }
                }
                _ => {
                    return Err(problem(
                        at,
                        format!(
                            "identity partitions a string, int64 or boolean typed column, or \
                             partition; not {:?}",
                            f.column
                        ),
                    ));
                }
            },
            PartitionTransform::Day | PartitionTransform::Hour => {
                time_fields += 1;
                let source = match (f.column.as_str(), typed) {
                    ("timestamp", None) => TimeSource::Append,
                    ("origin_timestamp", None) => TimeSource::Origin,
                    (_, Some(col)) if col.kind == ColumnType::Timestamp => {
                        TimeSource::Json(col.pointer.clone())
                    }
                    _ => {
                        return Err(problem(
                            at,
                            format!(
                                "day and hour take a timestamp column; {:?} is not one",
                                f.column
                            ),
                        ));
                    }
                };
                if c.time_source != source {
                    let want = match &source {
                        TimeSource::Append => "\"timestamp\"".to_owned(),
                        TimeSource::Origin => "\"origin_timestamp\"".to_owned(),
                        TimeSource::Json(p) | TimeSource::JsonMillis(p) => format!("\"json:{p}\""),
                    };
                    return Err(problem(
                        key("time_source"),
                        format!(
                            "must be {want}, the source of the partition column {:?}: objects \
                             are cut by it, so each file holds one {}",
                            f.column,
                            if f.transform == PartitionTransform::Day {
                                "day"
                            } else {
                                "hour"
                            }
                        ),
                    ));
                }
                let unit = if f.transform == PartitionTransform::Day {
                    86_400
                } else {
                    3_600
                };
                let every = c.record_interval.0.as_secs();
                if !c.record_interval.0.is_zero()
                    && (c.record_interval.0.subsec_nanos() != 0 || every == 0 || unit % every != 0)
                {
                    return Err(problem(
                        key("record_interval"),
                        format!(
                            "must divide the {} of {}(…) (or be left out: the sink then cuts \
                             objects at each {})",
                            if unit == 3_600 { "hour" } else { "day" },
                            if unit == 3_600 { "hour" } else { "day" },
                            if unit == 3_600 { "hour" } else { "day" },
                        ),
                    ));
                }
            }
        }
    }
    if time_fields > 1 {
        return Err(problem(
            key("iceberg.partition_by"),
            "takes one day or hour field at most (objects are cut by one time source)",
        ));
    }
    Ok(())
}

/// `[sink.s3.iceberg]`: the build has it, the objects are Parquet data files the table can
/// take, and the catalog and warehouse are where the sink can reach them.
pub(super) fn iceberg(
    c: &crate::config::S3SinkConfig,
    built: bool,
    key: &dyn Fn(&str) -> String,
) -> Result<(), Problem> {
    let Some(t) = &c.iceberg else {
        return Ok(());
    };
    if !built {
        return Err(problem(
            key("iceberg"),
            "this spillway was built without Iceberg tables: build it with `cargo build \
             --release -p spillway --features iceberg` (the .deb has them)",
        ));
    }
    if c.format != crate::config::Format::Parquet {
        return Err(problem(
            key("format"),
            "must be \"parquet\" for an Iceberg table (its data files are Parquet)",
        ));
    }
    if c.tls_ca.is_some() {
        return Err(problem(
            key("tls_ca"),
            "an Iceberg table's metadata is written through OpenDAL, which trusts the \
             system's and Mozilla's roots only, not a CA of the sink's: use a store whose \
             certificate chains to them",
        ));
    }
    if c.credentials == crate::config::CredentialSource::Chain {
        return Err(problem(
            key("credentials"),
            "an Iceberg table's catalog writes its metadata with static keys: set \
             access_key_id and secret_access_key (or AWS_ACCESS_KEY_ID and \
             AWS_SECRET_ACCESS_KEY)",
        ));
    }
    match t.catalog {
        crate::config::CatalogKind::Sql if !t.uri.starts_with("sqlite:") => {
            return Err(problem(
                key("iceberg.uri"),
                "the SQL catalog takes a SQLite database: sqlite:///PATH (add ?mode=rwc to \
                 create it)",
            ));
        }
        crate::config::CatalogKind::Sql => {
            for (name, set) in [
                ("token", t.token.is_some()),
                ("credential", t.credential.is_some()),
            ] {
                if set {
                    return Err(problem(
                        key(&format!("iceberg.{name}")),
                        "is for catalog = \"rest\" only",
                    ));
                }
            }
        }
        crate::config::CatalogKind::Rest => {
            if !(t.uri.starts_with("http://") || t.uri.starts_with("https://")) {
                return Err(problem(
                    key("iceberg.uri"),
                    "the REST catalog takes the server's base URL: http[s]://HOST[:PORT][/PATH]",
                ));
            }
            if t.token.is_some() && t.credential.is_some() {
                return Err(problem(
                    key("iceberg.credential"),
                    "give token or credential, not both",
                ));
            }
        }
    }
    for (name, value) in [
        ("catalog_name", &t.catalog_name),
        ("namespace", &t.namespace),
        ("table", &t.table),
    ] {
        if value.trim().is_empty() {
            return Err(problem(
                key(&format!("iceberg.{name}")),
                "must not be empty",
            ));
        }
    }
    if t.namespace.split('.').any(str::is_empty) {
        return Err(problem(
            key("iceberg.namespace"),
            "has an empty level: levels are separated by single dots",
        ));
    }
    partition_by(c, t, key)?;
    if let Some(w) = &t.warehouse
        && t.catalog == crate::config::CatalogKind::Sql
    {
        let inside = format!("s3://{}/", c.bucket);
        if !w.starts_with(&inside) && w != &format!("s3://{}", c.bucket) {
            return Err(problem(
                key("iceberg.warehouse"),
                format!("must be in the sink's bucket: {inside}PATH"),
            ));
        }
    }
    Ok(())
}

/// An S3 sink that would use the AWS credential chain (no static keys, or `credentials =
/// "chain"`) in a build without the `aws-chain` feature (`built`) is refused, naming the keys to
/// set and the build that has the chain.
pub(super) fn chain_built(
    source: crate::config::CredentialSource,
    built: bool,
    key: &dyn Fn(&str) -> String,
) -> Result<(), Problem> {
    if built {
        return Ok(());
    }
    let k = if source == crate::config::CredentialSource::Chain {
        "credentials"
    } else {
        "access_key_id"
    };
    Err(problem(key(k), crate::credentials::NOT_BUILT))
}

/// `format = "parquet"` in a build without the `parquet` feature (`built`) is refused, naming
/// the build that has it.
pub(super) fn parquet_built(
    format: crate::config::Format,
    built: bool,
    key: &dyn Fn(&str) -> String,
) -> Result<(), Problem> {
    if format == crate::config::Format::Parquet && !built {
        return Err(problem(
            key("format"),
            "this spillway was built without Parquet (the README's first run builds it so, to build faster): build it with `cargo build --release -p spillway`, which has it",
        ));
    }
    Ok(())
}

/// `[sink.s3.parquet]`, and what `format = "parquet"` rules out.
pub(super) fn parquet(
    c: &crate::config::S3SinkConfig,
    key: &dyn Fn(&str) -> String,
) -> Result<(), Problem> {
    let pq = &c.parquet;
    parquet_built(c.format, cfg!(feature = "parquet"), key)?;
    if c.format != crate::config::Format::Parquet {
        if *pq != crate::config::ParquetConfig::default() {
            return Err(problem(key("parquet"), "is only for format = \"parquet\""));
        }
        return Ok(());
    }
    if c.compression != crate::config::Compression::None {
        return Err(problem(
            key("compression"),
            "a Parquet object compresses its pages: set s3.parquet.compression (zstd, snappy, none) and leave s3.compression out",
        ));
    }
    match (pq.compression, pq.compression_level) {
        (crate::config::ParquetCompression::Zstd, Some(l)) if !(1..=22).contains(&l) => {
            return Err(problem(
                key("parquet.compression_level"),
                format!("{l} is out of range for zstd: use 1 to 22"),
            ));
        }
        (crate::config::ParquetCompression::Zstd, _) | (_, None) => {}
        (_, Some(_)) => {
            return Err(problem(
                key("parquet.compression_level"),
                "is only for parquet.compression = \"zstd\"",
            ));
        }
    }
    if pq.row_group_size.0 == 0 || pq.row_group_size.0 > 1 << 30 {
        return Err(problem(
            key("parquet.row_group_size"),
            "must be more than 0 bytes and at most 1 GiB",
        ));
    }
    if pq.row_group_rows == 0 {
        return Err(problem(key("parquet.row_group_rows"), "must be at least 1"));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, col) in pq.columns.iter().enumerate() {
        let at = key(&format!("parquet.columns[{i}]"));
        if col.name.is_empty() {
            return Err(problem(at, "name is empty"));
        }
        if crate::config::PARQUET_OWN_COLUMNS.contains(&col.name.as_str()) {
            return Err(problem(
                at,
                format!(
                    "the name {:?} is one of the sink's own columns ({}); choose another",
                    col.name,
                    crate::config::PARQUET_OWN_COLUMNS.join(", ")
                ),
            ));
        }
        if !seen.insert(col.name.as_str()) {
            return Err(problem(at, format!("a second column named {:?}", col.name)));
        }
        if !col.pointer.is_empty() && !col.pointer.starts_with('/') {
            return Err(problem(
                at,
                format!(
                    "pointer {:?} is not a JSON pointer: it starts with / (\"/user/id\"), or is \"\" for the whole payload",
                    col.pointer
                ),
            ));
        }
    }
    if pq.payload == crate::config::ParquetPayload::None && pq.columns.is_empty() && !c.metadata {
        return Err(problem(
            key("parquet.payload"),
            "\"none\" with no typed columns and metadata = false leaves no column to write",
        ));
    }
    Ok(())
}
