//! Building the S3 sink from its config (client, credentials, upload and object options),
//! and the start-up check that the bucket is there.

use super::*;

pub(super) fn checksum_of(c: &S3SinkConfig) -> spillway_s3::options::Checksum {
    match c.checksum {
        ChecksumKind::Crc32c => spillway_s3::options::Checksum::Crc32c,
        ChecksumKind::None => spillway_s3::options::Checksum::None,
    }
}

pub(super) fn sse_of(c: &S3SinkConfig, customer_key: Option<[u8; 32]>) -> Option<Sse> {
    match (c.sse, customer_key) {
        (Some(SseKind::S3), _) => Some(Sse::S3),
        (Some(SseKind::Kms), _) => Some(Sse::Kms {
            key_id: c.sse_kms_key_id.clone(),
        }),
        (Some(SseKind::Customer), Some(key)) => Some(Sse::CustomerKey { key }),
        (Some(SseKind::Customer), None) | (None, _) => None,
    }
}

pub(super) fn acl_of(c: &S3SinkConfig) -> Option<CannedAcl> {
    c.acl.map(|a| match a {
        AclKind::Private => CannedAcl::Private,
        AclKind::PublicRead => CannedAcl::PublicRead,
        AclKind::PublicReadWrite => CannedAcl::PublicReadWrite,
        AclKind::AuthenticatedRead => CannedAcl::AuthenticatedRead,
        AclKind::AwsExecRead => CannedAcl::AwsExecRead,
        AclKind::BucketOwnerRead => CannedAcl::BucketOwnerRead,
        AclKind::BucketOwnerFullControl => CannedAcl::BucketOwnerFullControl,
    })
}

impl S3Sink {
    /// The sink of `config` on shard `shard`.
    pub fn new(
        config: &SinkConfig,
        shard: usize,
        lead: bool,
        acks: Acks,
    ) -> Result<S3Sink, EngineError> {
        process_start();
        let err = |e: String| EngineError::config(format!("sink {:?}: {e}", config.name));
        let mut cfg = config
            .s3
            .clone()
            .ok_or_else(|| err("[sink.s3] is missing".to_owned()))?;
        let part_sources = match cfg.iceberg.clone() {
            Some(t) => {
                // A table's files are cut one partition value each (`table::spec`).
                if cfg.key == crate::template::key::KeyTemplate::default() {
                    let text =
                        super::table::spec::default_key(&t.partition_by, &cfg.parquet.columns);
                    cfg.key = crate::template::key::KeyTemplate::parse(&text)
                        .map_err(|e| err(format!("s3.key {text:?}: {e}")))?;
                }
                if cfg.record_interval.0.is_zero()
                    && let Some(every) = super::table::spec::record_interval(&t.partition_by)
                {
                    cfg.record_interval = crate::units::Dur(every);
                }
                // A typed timestamp column's day or hour: cut by the time as the column reads
                // it (milliseconds), so each file's value is its rows' own.
                if let crate::template::key::TimeSource::Json(p) = &cfg.time_source
                    && super::table::spec::record_interval(&t.partition_by).is_some()
                {
                    cfg.time_source = crate::template::key::TimeSource::JsonMillis(p.clone());
                }
                super::table::spec::sources(&cfg, &cfg.key).map_err(err)?
            }
            None => Vec::new(),
        };
        let region = cfg.region.clone().unwrap_or_else(|| "us-east-1".to_owned());
        let endpoint = cfg
            .endpoint(&region)
            .map_err(|e| err(format!("s3.endpoint: {e}")))?;
        let credentials = Credentials::new(
            cfg.access_key_id.clone().unwrap_or_default(),
            cfg.secret_access_key
                .as_ref()
                .map(|s| s.expose().to_owned())
                .unwrap_or_default(),
            cfg.session_token.as_ref().map(|s| s.expose().to_owned()),
        );
        let has_keys = cfg.access_key_id.is_some() && cfg.secret_access_key.is_some();
        let chain = match (cfg.credentials, has_keys) {
            (CredentialSource::Static, false) => {
                return Err(err(
                    "s3.credentials = \"static\" but there are no keys: set \
                     s3.access_key_id and s3.secret_access_key (or AWS_ACCESS_KEY_ID and \
                     AWS_SECRET_ACCESS_KEY)"
                        .to_owned(),
                ));
            }
            (CredentialSource::Static, true) | (CredentialSource::Auto, true) => None,
            (CredentialSource::Chain, _) | (CredentialSource::Auto, false) => {
                Some(crate::credentials::chain(cfg.profile.as_deref(), &region).map_err(err)?)
            }
        };
        let mut client_cfg = ClientConfig::new(endpoint, credentials);
        client_cfg.shared_credentials = chain.as_ref().map(|c| c.shared.clone());
        // https: the Mozilla roots, or the store's own CA.
        client_cfg.transport.tls.client_config = Some(
            crate::tls::client_config(cfg.tls_ca.as_deref(), None, &[b"http/1.1"])
                .map_err(|e| err(format!("s3.tls_ca: {e}")))?,
        );
        client_cfg.jitter_seed = shard as u64 + 1;
        client_cfg.retry.max_attempts = cfg.request_attempts.max(1);
        client_cfg.transport.request_timeout = cfg.request_timeout.0;
        if cfg.signed_payload {
            client_cfg.payload = spillway_s3::sign::PayloadMode::Signed;
        }
        client_cfg.transport.min_rate = cfg.min_transfer_rate.0;
        let client = S3Client::new(client_cfg)
            .map_err(|e| err(format!("S3 client: {e}")))?
            .with_retry_observer(retry_logger(&config.name));
        let probe = Encoder::new(cfg.format_options()).map_err(err)?;
        let total = {
            let acks = acks.clone();
            Rc::new(Gauge::watched(move |bytes| acks.hold(bytes)))
        };
        let customer_key = cfg
            .customer_key(&|name| std::env::var(name).ok())
            .map_err(|(key, e)| err(format!("s3.{key}: {e}")))?;
        let sse = sse_of(&cfg, customer_key);
        let fencing = cfg.conditional_writes == ConditionalWrites::Require;
        if !fencing && lead && config.consumer_group.is_some() {
            warn!(
                sink = %config.name,
                "s3.conditional_writes = \"off\" in a consumer group: when a partition changes \
                 hands while its old owner is still alive (a pause, a cut from Iggy, a member \
                 leaving), the old owner's late upload may replace its successor's object"
            );
        }
        let mut upload = UploadConfig::new(cfg.part_size.0, cfg.parts_in_flight);
        upload.total = Some(Rc::clone(&total));
        upload.options = ObjectOptions {
            content_type: Some(probe.content_type().to_owned()),
            content_encoding: probe.content_encoding().map(str::to_owned),
            storage_class: cfg.storage_class.clone(),
            sse,
            acl: acl_of(&cfg),
            content_md5: cfg.content_md5,
            checksum: checksum_of(&cfg),
            condition: fencing.then_some(Condition::Absent),
            ..ObjectOptions::default()
        };
        upload
            .options
            .validate()
            .map_err(|e| err(format!("s3 object options: {e}")))?;
        let client = Rc::new(client);
        let finisher = Finisher {
            sink: config.name.as_str().into(),
            client: Rc::clone(&client),
            bucket: cfg.bucket.as_str().into(),
            small: ObjectOptions {
                content_type: Some("application/json".to_owned()),
                sse: upload.options.sse.clone(),
                acl: upload.options.acl,
                content_md5: cfg.content_md5,
                checksum: checksum_of(&cfg),
                ..ObjectOptions::default()
            },
            acks: acks.clone(),
            failures: Rc::default(),
            failing: Rc::default(),
            events: TaskEvents::default(),
            fencing,
            part_sources: part_sources.into(),
            table: match cfg.iceberg {
                Some(_) => Some(super::table::Table::of(&config.name, &cfg).map_err(err)?),
                None => None,
            },
        };
        let dead_letter = match (config.on_error, &cfg.dead_letter_prefix) {
            (ErrorPolicy::DeadLetter, Some(prefix)) => Some((
                prefix.clone(),
                Encoder::new(FormatOptions::default()).map_err(err)?,
            )),
            (ErrorPolicy::DeadLetter, None) => {
                return Err(err(
                    "on_error = \"dead_letter\" needs s3.dead_letter_prefix".to_owned(),
                ));
            }
            _ => None,
        };
        Ok(S3Sink {
            name: config.name.clone(),
            lead,
            client,
            acks,
            upload,
            parts: Vec::new(),
            key_buf: String::new(),
            encoded: 0,
            chain,
            finisher,
            dead_letter,
            total,
            fatal: None,
            epochs: 0,
            splits: cfg.key.splits(),
            rules: Rules {
                max_object_size: cfg.max_object_size.0,
                max_object_messages: cfg.max_object_messages,
                idle_flush: cfg.idle_flush.0,
                splits: cfg.key.splits(),
                max_open_objects: cfg.max_open_objects.max(1),
                max_split_lag: cfg.max_split_lag,
                max_marks: MAX_MARKS,
                window: cfg
                    .part_size
                    .0
                    .saturating_mul(cfg.parts_in_flight as u64 + 1),
            },
            values: Vec::new(),
            skip_rejects: config.on_error == ErrorPolicy::Skip,
            resumed: HashMap::new(),
            owner: marker::owner_id(shard),
            gave_up: Default::default(),
            batch_at: Instant::now(),
            dead_letter_log: RefCell::new(crate::ratelog::RateLimit::new(
                crate::ratelog::PER_MESSAGE_INTERVAL,
                crate::ratelog::PER_MESSAGE_BURST,
            )),
            data_prefix: None,
            leases: HashMap::new(),
            cfg,
        })
    }
}

impl S3Sink {
    /// HeadBucket with the sink's endpoint, credentials and TLS: a missing bucket, wrong
    /// credentials or a wrong region is found before anything is polled (`spillway check
    /// --connect` runs it alone). What was seen, or the problem.
    pub async fn probe(&self) -> Result<String, EngineError> {
        if let Some(chain) = &self.chain {
            // The first set of credentials from the chain (resolved on its own thread).
            let deadline = Instant::now() + self.cfg.request_timeout.0;
            while !self.client.has_credentials() {
                if Instant::now() >= deadline {
                    return Err(EngineError::permanent(format!(
                        "S3 bucket {:?}: no credentials within s3.request_timeout ({}): {}",
                        self.cfg.bucket,
                        self.cfg.request_timeout,
                        chain.error().unwrap_or_else(|| {
                            "the AWS credential chain has not answered".to_owned()
                        })
                    )));
                }
                monoio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let req =
            spillway_s3::actions::head_bucket::request(self.client.endpoint(), &self.cfg.bucket)
                .map_err(|e| EngineError::permanent(format!("s3: {e}")))?;
        self.client
            .execute(req, spillway_s3::actions::head_bucket::parse)
            .await
            .map_err(|e| {
                EngineError::permanent(format!(
                    "S3 bucket {:?} at {}: {e}",
                    self.cfg.bucket,
                    self.client.endpoint().authority()
                ))
            })?;
        Ok(format!(
            "bucket {:?} at {} reachable (HeadBucket)",
            self.cfg.bucket,
            self.client.endpoint().authority()
        ))
    }
}
