//! The S3 client of one shard: an endpoint, credentials and a connection pool, and the loop
//! that signs, sends and retries one request. Each S3 action is a function in
//! [`crate::actions`] that builds the request and parses the answer; [`S3Client::execute`]
//! runs them.
//!
//! Runs on a monoio runtime built with `enable_timer()` (retries sleep, requests time out).

use std::cell::{Cell, RefCell};
use std::fmt;
use std::time::SystemTime;

use crate::credentials::{Credentials, SharedCredentials};
use crate::endpoint::Endpoint;
use crate::error::{Error, TransportError};
use crate::request::{Request, Response};
use crate::retry::{Backoff, RetryPolicy};
use crate::sign::{self, PayloadMode};
use crate::transport::{Client as Transport, Target, TransportConfig};

/// Everything a client needs.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub endpoint: Endpoint,
    pub credentials: Credentials,
    pub payload: PayloadMode,
    pub retry: RetryPolicy,
    pub transport: TransportConfig,
    /// Seed of the retry jitter (vary it per shard so shards do not retry in step).
    pub jitter_seed: u64,
    /// Credentials another thread refreshes; when set, they replace `credentials` as soon
    /// as a set is published.
    pub shared_credentials: Option<SharedCredentials>,
}

impl ClientConfig {
    pub fn new(endpoint: Endpoint, credentials: Credentials) -> Self {
        ClientConfig {
            endpoint,
            credentials,
            payload: PayloadMode::default(),
            retry: RetryPolicy::default(),
            transport: TransportConfig::default(),
            jitter_seed: 0x5eed,
            shared_credentials: None,
        }
    }
}

/// Counters of one client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Requests sent, retries included.
    pub attempts: u64,
    /// Attempts that were retries.
    pub retries: u64,
    /// Body bytes of the requests the store answered with success (uploaded parts and
    /// objects, markers).
    pub body_bytes: u64,
}

/// A clock, so that tests can sign at fixed times.
pub type Clock = Box<dyn Fn() -> SystemTime>;

/// Told of every failed attempt that is about to be retried: the error, the attempt that
/// failed (1 for the first) and the wait before the next. The crate does no logging itself.
pub type RetryObserver = Box<dyn Fn(&Error, u32, std::time::Duration)>;

/// The S3 client of one shard (not `Send`: one per thread).
pub struct S3Client {
    endpoint: Endpoint,
    target: Target,
    credentials: RefCell<Credentials>,
    /// The refreshed credentials and the version last taken from them.
    shared: Option<(SharedCredentials, Cell<u64>)>,
    payload: PayloadMode,
    retry: RetryPolicy,
    transport: Transport,
    backoff: RefCell<Backoff>,
    clock: Clock,
    on_retry: Option<RetryObserver>,
    stats: Cell<ClientStats>,
}

impl fmt::Debug for S3Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Client")
            .field("endpoint", &self.endpoint)
            .field("credentials", &self.credentials)
            .field("payload", &self.payload)
            .field("retry", &self.retry)
            .field("stats", &self.stats.get())
            .finish_non_exhaustive()
    }
}

impl S3Client {
    pub fn new(cfg: ClientConfig) -> Result<Self, Error> {
        let transport = Transport::new(cfg.transport)?;
        Ok(S3Client {
            target: Target::from(&cfg.endpoint),
            endpoint: cfg.endpoint,
            credentials: RefCell::new(cfg.credentials),
            shared: cfg.shared_credentials.map(|s| (s, Cell::new(0))),
            payload: cfg.payload,
            retry: cfg.retry,
            transport,
            backoff: RefCell::new(Backoff::new(cfg.jitter_seed)),
            clock: Box::new(SystemTime::now),
            on_retry: None,
            stats: Cell::new(ClientStats::default()),
        })
    }

    /// Replaces the clock used for signing.
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Sets the observer of retried attempts (to log them, say).
    pub fn with_retry_observer(mut self, observer: RetryObserver) -> Self {
        self.on_retry = Some(observer);
        self
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    pub fn payload_mode(&self) -> PayloadMode {
        self.payload
    }

    pub fn stats(&self) -> ClientStats {
        self.stats.get()
    }

    /// Whether the client has credentials to sign with: always with static ones; with shared
    /// ones once the first set is published.
    pub fn has_credentials(&self) -> bool {
        self.shared.as_ref().is_none_or(|(s, _)| s.version() > 0)
    }

    /// Takes a newer set of shared credentials, if one was published since the last request.
    fn refresh_credentials(&self) -> Result<(), Error> {
        let Some((shared, seen)) = &self.shared else {
            return Ok(());
        };
        let version = shared.version();
        if version == seen.get() {
            return Ok(());
        }
        match shared.get() {
            Some((c, _)) => {
                *self.credentials.borrow_mut() = c;
                seen.set(version);
                Ok(())
            }
            None => Err(Error::Config(
                "no credentials yet from the AWS credential chain".to_owned(),
            )),
        }
    }

    /// Signs and sends `req`, and parses the answer with `parse`; retries with backoff while
    /// the error may pass and the request may be repeated (a connection that could not be
    /// opened never received the request, so that one is retried for any request). Every
    /// attempt is signed anew.
    pub async fn execute<T>(
        &self,
        req: Request,
        parse: impl Fn(Response) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let mut attempt = 1u32;
        loop {
            let mut signed = req.clone();
            self.refresh_credentials()?;
            let signed_at = (self.clock)();
            sign::sign(
                &mut signed,
                &self.credentials.borrow(),
                &self.endpoint.region,
                signed_at,
                self.payload,
            )?;
            let mut stats = self.stats.get();
            stats.attempts += 1;
            if attempt > 1 {
                stats.retries += 1;
            }
            self.stats.set(stats);
            let err = match self.transport.send(&self.target, &signed).await {
                Ok(resp) => {
                    let skew = crate::skew::skew_secs(resp.header("date"), signed_at);
                    match parse(resp) {
                        Ok(v) => {
                            let mut stats = self.stats.get();
                            stats.body_bytes += req.body.len();
                            self.stats.set(stats);
                            return Ok(v);
                        }
                        Err(e) => with_skew(e, skew),
                    }
                }
                Err(e) => Error::Transport(e),
            };
            let repeatable =
                req.idempotent || matches!(err, Error::Transport(TransportError::Connect { .. }));
            if !(err.is_retryable() && repeatable && self.retry.may_retry(attempt)) {
                return Err(err);
            }
            let delay = self.backoff.borrow_mut().delay(&self.retry, attempt);
            if let Some(observe) = &self.on_retry {
                observe(&err, attempt, delay);
            }
            monoio::time::sleep(delay).await;
            attempt += 1;
        }
    }
}

/// An S3 error answered while this host's clock and the store's are far apart names that
/// first: a skew S3 refuses reads like wrong keys otherwise.
fn with_skew(e: Error, skew: Option<i64>) -> Error {
    match (e, skew.and_then(crate::skew::skew_note)) {
        (Error::S3(mut s), Some(note)) => {
            s.message = Some(match s.message.take() {
                Some(m) => format!("{note}; {m}"),
                None => note,
            });
            Error::S3(s)
        }
        (e, _) => e,
    }
}
