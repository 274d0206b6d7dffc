//! Credentials: an access key id, its secret, and a session token for temporary credentials;
//! from the configuration or from the standard environment variables. `Debug` shows the access
//! key id (which AWS treats as an identifier, not a secret) and redacts the rest.

use std::fmt;

use crate::error::Error;

/// Credentials another thread keeps fresh (the AWS credential chain, resolved off the shards):
/// each shard's client reads them before it signs a request. The common case, nothing new, is
/// one atomic load; a new set is taken under a lock held only for the copy.
#[derive(Clone, Default)]
pub struct SharedCredentials {
    inner: std::sync::Arc<SharedInner>,
}

#[derive(Default)]
struct SharedInner {
    /// Bumped on every [`SharedCredentials::set`]; 0 until the first.
    version: std::sync::atomic::AtomicU64,
    value: std::sync::Mutex<Option<(Credentials, Option<std::time::SystemTime>)>>,
}

impl fmt::Debug for SharedCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedCredentials")
            .field("version", &self.version())
            .finish_non_exhaustive()
    }
}

impl SharedCredentials {
    /// Empty: no credentials yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Publishes a new set (and when it expires, if it does).
    pub fn set(&self, credentials: Credentials, expires: Option<std::time::SystemTime>) {
        let mut v = self
            .inner
            .value
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *v = Some((credentials, expires));
        self.inner
            .version
            .fetch_add(1, std::sync::atomic::Ordering::Release);
    }

    /// How many sets have been published (0: none yet).
    pub fn version(&self) -> u64 {
        self.inner
            .version
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// The newest set and its expiry, if there is one yet.
    pub fn get(&self) -> Option<(Credentials, Option<std::time::SystemTime>)> {
        self.inner
            .value
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// AWS credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    /// Set for temporary credentials (STS); sent as `x-amz-security-token`.
    pub session_token: Option<String>,
}

impl Credentials {
    pub fn new(
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        session_token: Option<String>,
    ) -> Self {
        Credentials {
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            session_token,
        }
    }

    /// Reads `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and (optionally) `AWS_SESSION_TOKEN`
    /// from the process environment. The error names the variable that is missing or wrong.
    pub fn from_env() -> Result<Self, Error> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`Credentials::from_env`] with the environment given as a function, so it can be
    /// tested without touching the process environment.
    ///
    /// A variable that is unset or empty counts as missing (an empty `AWS_SESSION_TOKEN` as no
    /// token); a value with leading or trailing whitespace (a pasted newline) is refused.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, Error> {
        let access_key_id = required(&lookup, "AWS_ACCESS_KEY_ID")?;
        let secret_access_key = required(&lookup, "AWS_SECRET_ACCESS_KEY")?;
        let session_token = optional(&lookup, "AWS_SESSION_TOKEN")?;
        Ok(Credentials {
            access_key_id,
            secret_access_key,
            session_token,
        })
    }

    /// The region from `AWS_REGION`, or else `AWS_DEFAULT_REGION`.
    pub fn region_from_env() -> Result<String, Error> {
        Self::region_from_lookup(|name| std::env::var(name).ok())
    }

    /// [`Credentials::region_from_env`] with the environment given as a function.
    pub fn region_from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<String, Error> {
        if let Some(r) = optional(&lookup, "AWS_REGION")? {
            return Ok(r);
        }
        if let Some(r) = optional(&lookup, "AWS_DEFAULT_REGION")? {
            return Ok(r);
        }
        Err(Error::Config(
            "no region: neither AWS_REGION nor AWS_DEFAULT_REGION is set".into(),
        ))
    }

    /// The identity `aws-sigv4` signs with.
    pub(crate) fn to_identity(&self) -> aws_smithy_runtime_api::client::identity::Identity {
        aws_credential_types::Credentials::new(
            self.access_key_id.clone(),
            self.secret_access_key.clone(),
            self.session_token.clone(),
            None,
            "spillway",
        )
        .into()
    }
}

fn optional(lookup: &impl Fn(&str) -> Option<String>, name: &str) -> Result<Option<String>, Error> {
    match lookup(name) {
        None => Ok(None),
        Some(v) if v.is_empty() => Ok(None),
        Some(v) if v.trim() != v => Err(Error::Config(format!(
            "environment variable {name} has leading or trailing whitespace"
        ))),
        Some(v) => Ok(Some(v)),
    }
}

fn required(lookup: &impl Fn(&str) -> Option<String>, name: &str) -> Result<String, Error> {
    optional(lookup, name)?.ok_or_else(|| {
        Error::Config(format!(
            "environment variable {name} is not set (or empty, or not valid UTF-8)"
        ))
    })
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}
