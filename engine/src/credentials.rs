//! The AWS credential chain for S3 sinks without static keys: the AWS SDK's own resolver
//! (`aws-config`'s default chain: environment, shared config and credentials files with
//! profiles, web identity / IRSA through STS, ECS container credentials, EC2 IMDSv2), run on a
//! thread of its own with a small tokio runtime, never on a shard.
//!
//! One chain per (profile, region), started by the first shard whose sink needs it. It resolves
//! at once and then again when half of the credentials' remaining life has passed (at most five
//! minutes before they expire), and publishes each set into a [`SharedCredentials`] that every
//! shard's S3 client reads before it signs: a request is never signed with keys past their
//! expiry while the chain can renew them. A failed resolution is retried with backoff (1 s
//! doubling to 60 s), logged at most once a minute, and reported to sinks still waiting for their
//! first set.
//!
//! The chain is the cargo feature `aws-chain` (on by default). A build without it (the README's
//! first run) refuses an S3 sink without static keys when the configuration is checked, naming
//! the key; [`chain`] then only answers why.

#[cfg(feature = "aws-chain")]
use std::collections::HashMap;
#[cfg(feature = "aws-chain")]
use std::sync::OnceLock;
use std::sync::{Arc, Mutex, PoisonError};
#[cfg(any(feature = "aws-chain", test))]
use std::time::{Duration, SystemTime};

#[cfg(feature = "aws-chain")]
use aws_credential_types::provider::ProvideCredentials as _;
#[cfg(feature = "aws-chain")]
use spillway_s3::credentials::Credentials;
use spillway_s3::credentials::SharedCredentials;
#[cfg(feature = "aws-chain")]
use tracing::{info, warn};

/// A running chain: the credentials it keeps fresh, and its last error.
#[derive(Debug, Clone)]
pub struct Chain {
    /// What the shards sign with.
    pub shared: SharedCredentials,
    /// Why the last resolution failed (cleared by a success).
    pub last_error: Arc<Mutex<Option<String>>>,
}

impl Chain {
    /// The last error, if the newest resolution failed.
    pub fn error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[cfg(feature = "aws-chain")]
type Key = (Option<String>, String);

#[cfg(feature = "aws-chain")]
fn chains() -> &'static Mutex<HashMap<Key, Chain>> {
    static CHAINS: OnceLock<Mutex<HashMap<Key, Chain>>> = OnceLock::new();
    CHAINS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Whether this build has the AWS credential chain (the cargo feature `aws-chain`).
pub const BUILT: bool = cfg!(feature = "aws-chain");

/// The chain for `profile` (the default profile when `None`) in `region`, started on first
/// use; in a build without the chain, why there is none.
#[cfg(not(feature = "aws-chain"))]
pub fn chain(_profile: Option<&str>, _region: &str) -> Result<Chain, String> {
    Err(NOT_BUILT.to_owned())
}

/// Why a build without the `aws-chain` feature has no credential chain, and what to do.
pub const NOT_BUILT: &str = "this spillway was built without the AWS credential chain (the \
    README's first run builds it so, to build faster): set access_key_id and \
    secret_access_key (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), or build it with \
    `cargo build --release -p spillway`, which has the chain";

/// The chain for `profile` (the default profile when `None`) in `region`, started on first
/// use.
#[cfg(feature = "aws-chain")]
pub fn chain(profile: Option<&str>, region: &str) -> Result<Chain, String> {
    let key = (profile.map(str::to_owned), region.to_owned());
    let mut all = chains().lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(c) = all.get(&key) {
        return Ok(c.clone());
    }
    let chain = Chain {
        shared: SharedCredentials::new(),
        last_error: Arc::default(),
    };
    let run = chain.clone();
    let (profile, region) = key.clone();
    std::thread::Builder::new()
        .name("spillway-aws-creds".to_owned())
        .spawn(move || resolve_forever(run, profile, region))
        .map_err(|e| format!("starting the AWS credential thread: {e}"))?;
    all.insert(key, chain.clone());
    Ok(chain)
}

/// When to resolve again, for credentials that expire at `expiry` (now is `now`): half of the
/// remaining life, but no later than five minutes before the expiry, and not sooner than
/// 200 ms; credentials without an expiry (static keys in a profile or the environment) are
/// read again every 15 minutes.
#[cfg(any(feature = "aws-chain", test))]
pub fn refresh_after(expiry: Option<SystemTime>, now: SystemTime) -> Duration {
    let Some(expiry) = expiry else {
        return Duration::from_secs(15 * 60);
    };
    let left = expiry.duration_since(now).unwrap_or(Duration::ZERO);
    let half = left / 2;
    let margin = left.saturating_sub(Duration::from_secs(5 * 60));
    half.max(margin).max(Duration::from_millis(200))
}

#[cfg(feature = "aws-chain")]
fn resolve_forever(chain: Chain, profile: Option<String>, region: String) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            *chain
                .last_error
                .lock()
                .unwrap_or_else(PoisonError::into_inner) =
                Some(format!("cannot start the credential runtime: {e}"));
            return;
        }
    };
    rt.block_on(async move {
        use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(Provider::Rustls(CryptoMode::Ring))
            .build_https();
        let conf = aws_config::provider_config::ProviderConfig::default()
            .with_http_client(http)
            .with_region(Some(aws_config::Region::new(region.clone())));
        let mut builder =
            aws_config::default_provider::credentials::DefaultCredentialsChain::builder()
                .configure(conf)
                .region(aws_config::Region::new(region.clone()));
        if let Some(p) = &profile {
            builder = builder.profile_name(p);
        }
        let provider = builder.build().await;
        let mut backoff = Duration::from_secs(1);
        let mut last_warning: Option<std::time::Instant> = None;
        let mut first = true;
        loop {
            match provider.provide_credentials().await {
                Ok(c) => {
                    let expiry = c.expiry();
                    chain.shared.set(
                        Credentials::new(
                            c.access_key_id(),
                            c.secret_access_key(),
                            c.session_token().map(str::to_owned),
                        ),
                        expiry,
                    );
                    *chain
                        .last_error
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) = None;
                    let wait = refresh_after(expiry, SystemTime::now());
                    if first {
                        info!(
                            access_key_id = c.access_key_id(),
                            "AWS credentials from the credential chain{}; next refresh in {}",
                            expiry
                                .and_then(|e| e.duration_since(SystemTime::now()).ok())
                                .map_or_else(String::new, |d| format!(
                                    ", expiring in {}",
                                    crate::units::Rounded(d)
                                )),
                            crate::units::Rounded(wait)
                        );
                        first = false;
                    }
                    backoff = Duration::from_secs(1);
                    tokio::time::sleep(wait).await;
                }
                Err(e) => {
                    // The whole chain of causes: the SDK's top-level text says little.
                    let mut text = format!("the AWS credential chain found no credentials: {e}");
                    let mut source = std::error::Error::source(&e);
                    while let Some(cause) = source {
                        text.push_str(": ");
                        text.push_str(&cause.to_string());
                        source = cause.source();
                    }
                    if last_warning.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                        warn!("{text}; trying again in {}", crate::units::Rounded(backoff));
                        last_warning = Some(std::time::Instant::now());
                    }
                    *chain
                        .last_error
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) = Some(text);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(60));
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refreshes_at_half_life_and_at_least_five_minutes_before_expiry() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let at = |secs| Some(now + Duration::from_secs(secs));
        assert_eq!(refresh_after(at(6), now), Duration::from_secs(3));
        assert_eq!(refresh_after(at(3600), now), Duration::from_secs(3300));
        assert_eq!(refresh_after(at(400), now), Duration::from_secs(200));
        assert_eq!(refresh_after(Some(now), now), Duration::from_millis(200));
        assert_eq!(
            refresh_after(Some(now - Duration::from_secs(5)), now),
            Duration::from_millis(200)
        );
        assert_eq!(refresh_after(None, now), Duration::from_secs(900));
    }
}
