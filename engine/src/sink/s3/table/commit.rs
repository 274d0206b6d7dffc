//! The committer thread of a sink's Iceberg table: the catalog (iceberg-rust's SQL catalog, its
//! metadata written through its S3 FileIO) on a small tokio runtime, and the requests of the
//! sink's shards over a queue. See the parent module for the protocol.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use iceberg::spec::{
    DataContentType, DataFileBuilder, DataFileFormat, Datum, Literal, Struct, Transform,
    UnboundPartitionSpec,
};
use iceberg::table::Table as IcebergTable;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, CatalogBuilder, ErrorKind, NamespaceIdent, TableCreation, TableIdent};
use iceberg_catalog_rest::RestCatalogBuilder;
use iceberg_catalog_sql::{
    SQL_CATALOG_PROP_BIND_STYLE, SQL_CATALOG_PROP_URI, SQL_CATALOG_PROP_WAREHOUSE,
    SqlCatalogBuilder,
};
use iceberg_storage_opendal::OpenDalStorageFactory;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, warn};

use super::pinned::Pinned;
use super::spec::PartValue;
use super::{Committed, DataPath, Lease, NewFile, Verdict, offset_key, offsets_in, verdict};
use crate::config::PartitionTransform;
use crate::config::{CatalogKind, IcebergConfig, S3SinkConfig};
use crate::error::EngineError;
use crate::sink::s3::format::parquet::{field_id, table_schema};

/// Attempts of one commit (a conflict with another writer, a catalog or store failure) before
/// its files are given back as failed (their partitions are written again).
const COMMIT_ATTEMPTS: u32 = 8;

/// The field id of the `offset` column (see `format::parquet`): its bounds go into each file's
/// entry, so a reader looking for offsets skips the files without them.
const OFFSET_FIELD: i32 = 4;

enum Request {
    Open(oneshot::Sender<Result<DataPath, EngineError>>),
    Resume(u32, oneshot::Sender<Result<Lease, EngineError>>),
    Commit(NewFile, oneshot::Sender<Result<Committed, EngineError>>),
}

/// The shards' side of a committer.
pub(super) struct Handle {
    queue: mpsc::UnboundedSender<Request>,
    stats: Arc<super::TableStats>,
}

fn handles() -> &'static Mutex<HashMap<String, Arc<Handle>>> {
    static HANDLES: OnceLock<Mutex<HashMap<String, Arc<Handle>>>> = OnceLock::new();
    HANDLES.get_or_init(Default::default)
}

/// The committer of sink `sink` on the table `cfg` names, started on first use (an engine run
/// again in one process with another table gets another committer).
pub(super) fn handle(sink: &str, cfg: &S3SinkConfig) -> Result<Arc<Handle>, String> {
    let mut all = handles()
        .lock()
        .map_err(|_| "the committer registry is poisoned")?;
    let key = match &cfg.iceberg {
        Some(t) => format!("{sink}\n{}\n{}.{}", t.uri, t.namespace, t.table),
        None => sink.to_owned(),
    };
    if let Some(h) = all.get(&key)
        && !h.queue.is_closed()
    {
        return Ok(Arc::clone(h));
    }
    let stats = Arc::new(super::TableStats::default());
    let mut committer = Committer::new(sink, cfg)?;
    committer.stats = Arc::clone(&stats);
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::Builder::new()
        .name(format!("iceberg-{sink}"))
        .spawn(move || committer.run(rx))
        .map_err(|e| format!("cannot start the Iceberg committer thread: {e}"))?;
    let h = Arc::new(Handle { queue: tx, stats });
    all.insert(key, Arc::clone(&h));
    Ok(h)
}

impl Handle {
    pub(super) fn stats(&self) -> &super::TableStats {
        &self.stats
    }

    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, EngineError>>) -> Request,
    ) -> Result<T, EngineError> {
        let (tx, rx) = oneshot::channel();
        let gone = || EngineError::transient("the Iceberg committer thread stopped".to_owned());
        self.queue.send(make(tx)).map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }

    pub(super) async fn open(&self) -> Result<DataPath, EngineError> {
        self.ask(Request::Open).await
    }

    pub(super) async fn resume(&self, partition: u32) -> Result<Lease, EngineError> {
        self.ask(|tx| Request::Resume(partition, tx)).await
    }

    pub(super) async fn commit(&self, file: NewFile) -> Result<Committed, EngineError> {
        self.ask(|tx| Request::Commit(file, tx)).await
    }
}

struct Pending {
    file: NewFile,
    reply: oneshot::Sender<Result<Committed, EngineError>>,
}

/// The thread's state.
pub(super) struct Committer {
    sink: String,
    cfg: IcebergConfig,
    pub(super) bucket: String,
    /// The catalog's and its FileIO's properties (the secret key among them: never logged).
    pub(super) props: HashMap<String, String>,
    schema: arrow_schema::Schema,
    /// Whether the files have the metadata columns (`offset` among them).
    metadata: bool,
    /// The partition spec: each field's source column id, name and transform.
    spec: Vec<(i32, String, Transform)>,
    catalog: Option<Arc<dyn Catalog>>,
    pub(super) ident: TableIdent,
    location: Option<DataPath>,
    leases: HashMap<u32, Lease>,
    next_lease: u64,
    last_commit: Option<Instant>,
    stats: Arc<super::TableStats>,
    /// The longest one exchange with the catalog (an open, a take-up, one commit attempt)
    /// may take: a store or catalog that stops answering must not hold the sink's commits
    /// for ever. Four of the sink's `request_timeout`s.
    deadline: Duration,
}

fn iceberg_error(what: &str, e: &iceberg::Error) -> EngineError {
    let text = format!("Iceberg {what}: {e}");
    match e.kind() {
        ErrorKind::DataInvalid | ErrorKind::FeatureUnsupported => EngineError::permanent(text),
        _ => EngineError::transient(text),
    }
}

impl Committer {
    pub(super) fn new(sink: &str, cfg: &S3SinkConfig) -> Result<Committer, String> {
        let t = cfg
            .iceberg
            .clone()
            .ok_or("the sink has no [sink.s3.iceberg]")?;
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let key_id = cfg
            .access_key_id
            .clone()
            .or_else(|| env("AWS_ACCESS_KEY_ID"))
            .ok_or("s3.access_key_id (or AWS_ACCESS_KEY_ID) is needed for an Iceberg table")?;
        let secret = cfg
            .secret_access_key
            .as_ref()
            .map(|s| s.expose().to_owned())
            .or_else(|| env("AWS_SECRET_ACCESS_KEY"))
            .ok_or(
                "s3.secret_access_key (or AWS_SECRET_ACCESS_KEY) is needed for an Iceberg table",
            )?;
        let region = cfg
            .region
            .clone()
            .or_else(|| env("AWS_REGION"))
            .unwrap_or_else(|| "us-east-1".to_owned());
        let warehouse = t
            .warehouse
            .clone()
            .unwrap_or_else(|| format!("s3://{}/{}warehouse", cfg.bucket, cfg.prefix));
        let mut props: HashMap<String, String> = [
            (SQL_CATALOG_PROP_URI, t.uri.clone()),
            ("s3.region", region.clone()),
            ("s3.access-key-id", key_id),
            ("s3.secret-access-key", secret),
            // Only the keys above: no profile files, and never the instance metadata service.
            ("s3.disable-ec2-metadata", "true".to_owned()),
            ("s3.disable-config-load", "true".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let token = cfg
            .session_token
            .as_ref()
            .map(|s| s.expose().to_owned())
            .or_else(|| env("AWS_SESSION_TOKEN"));
        if let Some(token) = token {
            props.insert("s3.session-token".to_owned(), token);
        }
        match t.catalog {
            CatalogKind::Sql => {
                props.insert(SQL_CATALOG_PROP_WAREHOUSE.to_owned(), warehouse);
                props.insert(SQL_CATALOG_PROP_BIND_STYLE.to_owned(), "QMark".to_owned());
            }
            CatalogKind::Rest => {
                // The REST catalog's own keys (iceberg-rust's and the Java client's names).
                if let Some(w) = &t.warehouse {
                    props.insert("warehouse".to_owned(), w.clone());
                }
                if let Some(token) = &t.token {
                    props.insert("token".to_owned(), token.expose().to_owned());
                }
                if let Some(c) = &t.credential {
                    props.insert("credential".to_owned(), c.expose().to_owned());
                }
            }
        }
        if let Some(endpoint) = &cfg.endpoint {
            props.insert("s3.endpoint".to_owned(), endpoint.clone());
        }
        // As the sink addresses the store: path-style for a custom endpoint unless told.
        let path_style = cfg.path_style.unwrap_or(cfg.endpoint.is_some());
        props.insert("s3.path-style-access".to_owned(), path_style.to_string());
        let namespace = NamespaceIdent::from_strs(t.namespace.split('.'))
            .map_err(|e| format!("s3.iceberg.namespace: {e}"))?;
        let ident = TableIdent::new(namespace, t.table.clone());
        let mut parquet = cfg.parquet.clone();
        parquet.table = true;
        let spec = t
            .partition_by
            .iter()
            .map(|f| {
                let transform = match f.transform {
                    PartitionTransform::Identity => Transform::Identity,
                    PartitionTransform::Day => Transform::Day,
                    PartitionTransform::Hour => Transform::Hour,
                };
                (field_id(&parquet, &f.column), f.name(), transform)
            })
            .collect();
        Ok(Committer {
            spec,
            sink: sink.to_owned(),
            schema: table_schema(&parquet, cfg.metadata, cfg.headers),
            metadata: cfg.metadata,
            bucket: cfg.bucket.clone(),
            cfg: t,
            props,
            catalog: None,
            ident,
            location: None,
            leases: HashMap::new(),
            next_lease: 1,
            last_commit: None,
            stats: Arc::default(),
            deadline: cfg.request_timeout.0.saturating_mul(4),
        })
    }

    fn run(mut self, mut queue: mpsc::UnboundedReceiver<Request>) {
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                warn!(sink = %self.sink, "cannot start the Iceberg committer's runtime: {e}");
                return;
            }
        };
        let runtime = iceberg::Runtime::new(&rt);
        rt.block_on(async move {
            let mut waiting: Vec<Pending> = Vec::new();
            loop {
                let request = if waiting.is_empty() {
                    queue.recv().await
                } else {
                    let due = self
                        .last_commit
                        .map_or_else(Instant::now, |at| at + self.cfg.commit_interval.0);
                    let left = due.saturating_duration_since(Instant::now());
                    match tokio::time::timeout(left, queue.recv()).await {
                        Ok(r) => r,
                        Err(_) => {
                            self.commit_all(std::mem::take(&mut waiting), &runtime)
                                .await;
                            continue;
                        }
                    }
                };
                match request {
                    None => {
                        if !waiting.is_empty() {
                            self.commit_all(std::mem::take(&mut waiting), &runtime)
                                .await;
                        }
                        return;
                    }
                    Some(Request::Open(reply)) => {
                        let deadline = self.deadline;
                        let opened =
                            within(deadline, "opening the table", self.open(&runtime)).await;
                        let _ = reply.send(opened);
                    }
                    Some(Request::Resume(partition, reply)) => {
                        let deadline = self.deadline;
                        let lease = within(
                            deadline,
                            "taking a partition up",
                            self.resume(partition, &runtime),
                        )
                        .await;
                        let _ = reply.send(lease);
                    }
                    Some(Request::Commit(file, reply)) => waiting.push(Pending { file, reply }),
                }
            }
        });
    }

    pub(super) async fn catalog(
        &mut self,
        runtime: &iceberg::Runtime,
    ) -> Result<Arc<dyn Catalog>, EngineError> {
        if let Some(c) = &self.catalog {
            return Ok(Arc::clone(c));
        }
        let storage = Arc::new(OpenDalStorageFactory::S3 {
            customized_credential_load: None,
        });
        let failed = |e: iceberg::Error| {
            EngineError::transient(format!(
                "Iceberg catalog at s3.iceberg.uri {:?}: {e}",
                self.cfg.uri
            ))
        };
        let catalog: Arc<dyn Catalog> = match self.cfg.catalog {
            CatalogKind::Sql => Arc::new(
                SqlCatalogBuilder::default()
                    .with_storage_factory(storage)
                    .with_runtime(runtime.clone())
                    .load(self.cfg.catalog_name.clone(), self.props.clone())
                    .await
                    .map_err(failed)?,
            ),
            CatalogKind::Rest => Arc::new(
                RestCatalogBuilder::default()
                    .with_storage_factory(storage)
                    .with_runtime(runtime.clone())
                    .load(self.cfg.catalog_name.clone(), self.props.clone())
                    .await
                    .map_err(failed)?,
            ),
        };
        self.catalog = Some(Arc::clone(&catalog));
        Ok(catalog)
    }

    /// The table, created (with its namespace) when missing; its schema checked against the
    /// files' and its location against the sink's bucket.
    async fn open(&mut self, runtime: &iceberg::Runtime) -> Result<DataPath, EngineError> {
        if let Some(p) = &self.location {
            return Ok(p.clone());
        }
        let catalog = self.catalog(runtime).await?;
        let ns = self.ident.namespace().clone();
        let exists = catalog
            .namespace_exists(&ns)
            .await
            .map_err(|e| iceberg_error("namespace", &e))?;
        if !exists {
            match catalog.create_namespace(&ns, HashMap::new()).await {
                Ok(_) => {
                    info!(sink = %self.sink, namespace = %self.cfg.namespace, "Iceberg namespace created")
                }
                Err(e) if e.kind() == ErrorKind::NamespaceAlreadyExists => {}
                Err(e) => return Err(iceberg_error("creating the namespace", &e)),
            }
        }
        let table = self.load_or_create(&catalog).await?;
        self.check_schema(&table)?;
        let location = table.metadata().location();
        let inside = format!("s3://{}/", self.bucket);
        let Some(path) = location.strip_prefix(&inside) else {
            return Err(EngineError::permanent(format!(
                "Iceberg table {}: its location {location} is not in the sink's bucket {:?} \
                 (the sink writes the data files)",
                self.ident, self.bucket
            )));
        };
        let prefix = format!("{}/data/", path.trim_end_matches('/'));
        let p = DataPath { prefix };
        self.location = Some(p.clone());
        Ok(p)
    }

    async fn load_or_create(
        &mut self,
        catalog: &Arc<dyn Catalog>,
    ) -> Result<IcebergTable, EngineError> {
        let exists = catalog
            .table_exists(&self.ident)
            .await
            .map_err(|e| iceberg_error("table lookup", &e))?;
        if exists {
            return catalog
                .load_table(&self.ident)
                .await
                .map_err(|e| iceberg_error("loading the table", &e));
        }
        let schema = iceberg::arrow::arrow_schema_to_schema(&self.schema)
            .map_err(|e| iceberg_error("the files' schema", &e))?;
        let mut spec = UnboundPartitionSpec::builder();
        for (source, name, transform) in &self.spec {
            spec = spec
                .add_partition_field(*source, name, *transform)
                .map_err(|e| iceberg_error("the partition spec", &e))?;
        }
        let creation = TableCreation::builder()
            .name(self.ident.name().to_owned())
            .schema(schema)
            .partition_spec(spec.build())
            .properties([(
                "spillway.created-by".to_owned(),
                format!(
                    "spillway {} (sink {})",
                    env!("CARGO_PKG_VERSION"),
                    self.sink
                ),
            )])
            .build();
        match catalog.create_table(self.ident.namespace(), creation).await {
            Ok(t) => {
                info!(sink = %self.sink, table = %self.ident, location = t.metadata().location(), "Iceberg table created");
                Ok(t)
            }
            // Another member created it meanwhile.
            Err(e) if e.kind() == ErrorKind::TableAlreadyExists => catalog
                .load_table(&self.ident)
                .await
                .map_err(|e| iceberg_error("loading the table", &e)),
            Err(e) => Err(iceberg_error("creating the table", &e)),
        }
    }

    /// Every column the files have is in the table's schema with the same field id and type,
    /// and the table is unpartitioned.
    fn check_schema(&self, table: &IcebergTable) -> Result<(), EngineError> {
        let ours = iceberg::arrow::arrow_schema_to_schema(&self.schema)
            .map_err(|e| iceberg_error("the files' schema", &e))?;
        let theirs = table.metadata().current_schema();
        for field in ours.as_struct().fields() {
            let found = theirs.field_by_id(field.id);
            let fits =
                found.is_some_and(|f| f.name == field.name && f.field_type == field.field_type);
            if !fits {
                return Err(EngineError::permanent(format!(
                    "Iceberg table {}: its schema does not take the sink's column {:?} \
                     (field id {}, {}): the table has {}; write to a new table, or make the \
                     sink's columns (s3.metadata, s3.headers, s3.parquet) the table's",
                    self.ident,
                    field.name,
                    field.id,
                    field.field_type,
                    found.map_or_else(
                        || "no field of that id".to_owned(),
                        |f| format!("{:?} ({})", f.name, f.field_type)
                    )
                )));
            }
        }
        let theirs: Vec<(i32, &str, Transform)> = table
            .metadata()
            .default_partition_spec()
            .fields()
            .iter()
            .map(|f| (f.source_id, f.name.as_str(), f.transform))
            .collect();
        let ours: Vec<(i32, &str, Transform)> = self
            .spec
            .iter()
            .map(|(s, n, t)| (*s, n.as_str(), *t))
            .collect();
        if theirs != ours {
            let show = |spec: &[(i32, &str, Transform)]| {
                if spec.is_empty() {
                    return "unpartitioned".to_owned();
                }
                spec.iter()
                    .map(|(s, n, t)| format!("{n} = {t}(field {s})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Err(EngineError::permanent(format!(
                "Iceberg table {} is partitioned {} where s3.iceberg.partition_by says {}: \
                 make them agree, or write to a new table",
                self.ident,
                show(&theirs),
                show(&ours)
            )));
        }
        Ok(())
    }

    /// The offsets of the sink the table records: those of the newest snapshot (back from the
    /// current one) whose summary has any of the sink's keys.
    fn table_offsets(&self, table: &IcebergTable) -> Result<BTreeMap<u32, u64>, EngineError> {
        let meta = table.metadata();
        let mut at = meta.current_snapshot();
        while let Some(snapshot) = at {
            let found =
                offsets_in(&self.sink, &snapshot.summary().additional_properties).map_err(|e| {
                    EngineError::permanent(format!(
                        "Iceberg table {}, snapshot {}: {e}",
                        self.ident,
                        snapshot.snapshot_id()
                    ))
                })?;
            if let Some(found) = found {
                return Ok(found);
            }
            at = snapshot
                .parent_snapshot_id()
                .and_then(|id| meta.snapshot_by_id(id));
        }
        Ok(BTreeMap::new())
    }

    async fn resume(
        &mut self,
        partition: u32,
        runtime: &iceberg::Runtime,
    ) -> Result<Lease, EngineError> {
        self.open(runtime).await?;
        let catalog = self.catalog(runtime).await?;
        let table = catalog
            .load_table(&self.ident)
            .await
            .map_err(|e| iceberg_error("loading the table", &e))?;
        let last = self.table_offsets(&table)?.get(&partition).copied();
        let lease = Lease {
            id: self.next_lease,
            last,
        };
        self.next_lease += 1;
        self.leases.insert(partition, lease);
        debug!(sink = %self.sink, partition, ?last, lease = lease.id, "partition taken up from the Iceberg table");
        Ok(lease)
    }

    /// Commits what waits, in one snapshot, retrying on conflicts and failures; answers every
    /// file.
    async fn commit_all(&mut self, mut waiting: Vec<Pending>, runtime: &iceberg::Runtime) {
        self.last_commit = Some(Instant::now());
        let mut wait = Duration::from_millis(100);
        for attempt in 1..=COMMIT_ATTEMPTS {
            let deadline = self.deadline;
            // A commit cut short may have landed: the next attempt's check finds it in the
            // table (the file's own last offset) and answers it so.
            match within(deadline, "a commit", self.try_commit(&mut waiting, runtime)).await {
                Ok(()) => return,
                Err(e) if attempt < COMMIT_ATTEMPTS && e.is_transient() => {
                    self.stats.retries.fetch_add(1, Ordering::Relaxed);
                    debug!(sink = %self.sink, attempt, "Iceberg commit again: {}", e.message);
                    let jitter = wait.mul_f64(fastrand::f64());
                    tokio::time::sleep(jitter).await;
                    wait = (wait * 2).min(Duration::from_secs(5));
                }
                Err(e) => {
                    warn!(sink = %self.sink, files = waiting.len(), "Iceberg commit failed, the files' partitions are written again: {}", e.message);
                    for p in waiting.drain(..) {
                        let _ = p.reply.send(Err(e.clone()));
                    }
                    return;
                }
            }
        }
    }

    /// One attempt: the table read, each file checked against it, the rest appended onto that
    /// very snapshot. Files decided (fenced, in the table already) are answered and leave
    /// `waiting`; on success all of it is answered.
    async fn try_commit(
        &mut self,
        waiting: &mut Vec<Pending>,
        runtime: &iceberg::Runtime,
    ) -> Result<(), EngineError> {
        let catalog = self.catalog(runtime).await?;
        let table = catalog
            .load_table(&self.ident)
            .await
            .map_err(|e| iceberg_error("loading the table", &e))?;
        let mut offsets = self.table_offsets(&table)?;
        // Decided and answered without an await: a deadline that cuts the attempt short
        // leaves every file not answered in `waiting`, for the next attempt.
        let mut include = Vec::new();
        for p in std::mem::take(waiting) {
            let lease = self.leases.get(&p.file.partition).copied();
            match verdict(&p.file, lease, offsets.get(&p.file.partition).copied()) {
                Verdict::Include => include.push(p),
                Verdict::Already => {
                    self.settle(&p.file);
                    let _ = p.reply.send(Ok(Committed::Yes));
                }
                Verdict::Fenced(why) => {
                    // Nothing more of this lease commits.
                    if lease.is_some_and(|l| l.id == p.file.lease) {
                        self.leases.remove(&p.file.partition);
                    }
                    let _ = p.reply.send(Ok(Committed::Fenced(why)));
                }
            }
        }
        *waiting = include;
        if waiting.is_empty() {
            return Ok(());
        }
        let spec = table.metadata().default_partition_spec_id();
        let mut files = Vec::with_capacity(waiting.len());
        for p in waiting.iter() {
            let f = &p.file;
            let mut b = DataFileBuilder::default();
            b.content(DataContentType::Data)
                .file_path(format!("s3://{}/{}", self.bucket, f.key))
                .file_format(DataFileFormat::Parquet)
                .partition_spec_id(spec)
                .partition(partition_struct(&f.values))
                .record_count(f.records)
                .file_size_in_bytes(f.size);
            if self.metadata {
                let long = |o: u64| Datum::long(i64::try_from(o).unwrap_or(i64::MAX));
                b.lower_bounds(HashMap::from([(OFFSET_FIELD, long(f.first))]))
                    .upper_bounds(HashMap::from([(OFFSET_FIELD, long(f.last))]));
            }
            files.push(b.build().map_err(|e| {
                EngineError::permanent(format!("Iceberg data file {}: {e}", f.key))
            })?);
            offsets.insert(f.partition, f.last);
        }
        let summary: HashMap<String, String> = offsets
            .iter()
            .map(|(p, o)| (offset_key(&self.sink, *p), o.to_string()))
            .collect();
        let tx = Transaction::new(&table);
        let append = tx
            .fast_append()
            .with_check_duplicate(false)
            .add_data_files(files)
            .set_snapshot_properties(summary);
        let tx = append
            .apply(tx)
            .map_err(|e| iceberg_error("the append", &e))?;
        let pinned = Pinned {
            inner: Arc::clone(&catalog),
            table,
        };
        match tx.commit(&pinned).await {
            Ok(_) => {
                debug!(sink = %self.sink, files = waiting.len(), "Iceberg snapshot committed");
                self.stats.commits.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .files
                    .fetch_add(waiting.len() as u64, Ordering::Relaxed);
                for p in std::mem::take(waiting) {
                    self.settle(&p.file);
                    let _ = p.reply.send(Ok(Committed::Yes));
                }
                Ok(())
            }
            Err(e) => Err(iceberg_error("commit", &e)),
        }
    }

    /// A file of the partition's lease is in the table: the lease expects its last offset.
    fn settle(&mut self, file: &NewFile) {
        if let Some(l) = self.leases.get_mut(&file.partition)
            && l.id == file.lease
        {
            l.last = Some(file.last);
        }
    }
}

/// A file's partition values as Iceberg's partition tuple.
fn partition_struct(values: &[PartValue]) -> Struct {
    values
        .iter()
        .map(|v| {
            Some(match v {
                PartValue::Text(s) => Literal::string(s),
                PartValue::Long(n) => Literal::long(*n),
                PartValue::Bool(b) => Literal::bool(*b),
                PartValue::Int(n) => Literal::int(*n),
                PartValue::Date(d) => Literal::date(*d),
            })
        })
        .collect()
}

/// `work`, or a transient error once `deadline` passed.
async fn within<T>(
    deadline: Duration,
    what: &str,
    work: impl std::future::Future<Output = Result<T, EngineError>>,
) -> Result<T, EngineError> {
    tokio::time::timeout(deadline, work)
        .await
        .unwrap_or_else(|_| {
            Err(EngineError::transient(format!(
                "Iceberg: {what} took longer than {} (4 x s3.request_timeout)",
                crate::units::Rounded(deadline)
            )))
        })
}
