//! Multipart uploads an earlier run left open: aborted at start by the sink's first shard.

use std::time::Duration;

use tracing::{info, warn};

use super::S3Sink;

impl S3Sink {
    /// Aborts the multipart uploads an earlier run left open under the prefix: those initiated
    /// before this process started (less a minute for clock skew), once per sink and process (by its first shard).
    /// Where the store cannot list uploads, says so: a lifecycle rule
    /// (AbortIncompleteMultipartUpload) must clean them up there.
    pub(super) async fn abort_stale_uploads(&self) {
        use spillway_s3::actions::{abort_multipart_upload, list_multipart_uploads};
        // Only the sink's first shard sweeps (the core map says which): shards share nothing.
        if !self.lead {
            return;
        }
        let cutoff = process_start() - Duration::from_secs(60);
        let mut args = list_multipart_uploads::ListMultipartUploadsArgs {
            prefix: (!self.cfg.prefix.is_empty()).then(|| self.cfg.prefix.clone()),
            key_marker: None,
            upload_id_marker: None,
            max_uploads: None,
        };
        let mut aborted = 0;
        loop {
            let listed = match list_multipart_uploads::request(
                self.client.endpoint(),
                &self.cfg.bucket,
                &args,
            ) {
                Ok(req) => {
                    self.client
                        .execute(req, list_multipart_uploads::parse)
                        .await
                }
                Err(e) => Err(e),
            };
            let page = match listed {
                Ok(p) => p,
                Err(e) => {
                    warn!(
                        sink = %self.name,
                        "cannot list open multipart uploads to abort those an earlier run left ({e}); set a lifecycle rule (AbortIncompleteMultipartUpload) on the bucket"
                    );
                    return;
                }
            };
            for u in &page.uploads {
                let stale = u.initiated_time().is_some_and(|t| t < cutoff);
                if !stale {
                    continue;
                }
                if let Ok(req) = abort_multipart_upload::request(
                    self.client.endpoint(),
                    &self.cfg.bucket,
                    &u.key,
                    &u.upload_id,
                ) && self
                    .client
                    .execute(req, abort_multipart_upload::parse)
                    .await
                    .is_ok()
                {
                    aborted += 1;
                }
            }
            match page.next_args(&args) {
                Some(next) => args = next,
                None => break,
            }
        }
        if aborted > 0 {
            info!(sink = %self.name, "aborted {aborted} multipart uploads an earlier run left open");
        }
    }
}

/// When the first S3 sink of this process was built: uploads initiated before it belong to an
/// earlier run.
pub(super) fn process_start() -> std::time::SystemTime {
    static START: std::sync::OnceLock<std::time::SystemTime> = std::sync::OnceLock::new();
    *START.get_or_init(std::time::SystemTime::now)
}
