//! The transport of one shard: sends a request to a target over a pooled connection.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::rc::Rc;
use std::time::Instant;

use bytes::Bytes;
use monoio_rustls::TlsConnector;

use crate::endpoint::{Endpoint, Scheme};
use crate::error::TransportError;
use crate::http::{Parsed, check_request, encode_head};
use crate::request::{Request, Response};

use super::config::TransportConfig;
use super::conn::Conn;
use super::pool::Pool;
use super::tls;

/// Where connections go: the endpoint's address. The `Host` header is the request's own
/// (`Request::host`), which differs for virtual-hosted-style addressing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    pub scheme: Scheme,
    /// Host name or IP address (an IPv6 literal with or without brackets).
    pub host: String,
    pub port: u16,
}

impl Target {
    pub fn new(scheme: Scheme, host: impl Into<String>, port: u16) -> Self {
        Target {
            scheme,
            host: host.into(),
            port,
        }
    }
}

impl From<&Endpoint> for Target {
    fn from(e: &Endpoint) -> Self {
        Target::new(e.scheme, e.host.clone(), e.port)
    }
}

/// Counters of a [`Client`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransportStats {
    /// Calls of [`Client::send`].
    pub requests: u64,
    /// Connections opened (TCP connect, and TLS handshake for https).
    pub connections_opened: u64,
    /// Requests sent on a pooled connection.
    pub connections_reused: u64,
    /// Requests sent again on a new connection because a pooled one turned out closed.
    pub stale_retries: u64,
}

/// The HTTP/1.1 transport of one shard, with its keep-alive pool. Not `Send`: create one per
/// runtime thread. Cloning shares the pool.
///
/// Must run on a monoio runtime built with `enable_timer()`: every exchange is timed, and
/// monoio panics when a timer is used without it.
#[derive(Clone)]
pub struct Client {
    inner: Rc<Inner>,
}

struct Inner {
    config: TransportConfig,
    connector: Option<TlsConnector>,
    pool: RefCell<Pool>,
    stats: Cell<TransportStats>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("config", &self.inner.config)
            .field("tls_ready", &self.inner.connector.is_some())
            .field("stats", &self.inner.stats.get())
            .finish()
    }
}

impl Client {
    /// A transport with `config`. Fails when the TLS settings cannot be used (a PEM without
    /// certificates, an invalid certificate).
    pub fn new(config: TransportConfig) -> Result<Client, TransportError> {
        let connector = tls::connector(&config.tls)?;
        let pool = Pool::new(config.max_idle_per_host, config.idle_timeout);
        Ok(Client {
            inner: Rc::new(Inner {
                config,
                connector,
                pool: RefCell::new(pool),
                stats: Cell::new(TransportStats::default()),
            }),
        })
    }

    pub fn config(&self) -> &TransportConfig {
        &self.inner.config
    }

    pub fn stats(&self) -> TransportStats {
        self.inner.stats.get()
    }

    /// Idle connections parked for `target`.
    pub fn idle_connections(&self, target: &Target) -> usize {
        self.inner.pool.borrow().idle_count(target)
    }

    /// Closes every idle connection.
    pub fn close_idle(&self) {
        self.inner.pool.borrow_mut().clear();
    }

    /// Sends `req` to `target` and reads the whole response, whatever its status.
    ///
    /// A pooled connection is used when one is idle; if the request fails on it before any
    /// response byte arrived (the server had closed it) and `req.idempotent`, it is sent once
    /// more on a new connection. The connection is parked for reuse afterwards when the
    /// response allows keep-alive and was read to its end.
    pub async fn send(&self, target: &Target, req: &Request) -> Result<Response, TransportError> {
        check_request(req)?;
        let head = encode_head(req);
        self.count(|s| s.requests += 1);
        let cfg = &self.inner.config;
        let bytes = req.body.len();
        match cfg.deadline_for(bytes) {
            None => self.send_inner(target, req, &head).await,
            Some(deadline) => monoio::time::timeout(deadline, self.send_inner(target, req, &head))
                .await
                .map_err(|_| TransportError::TooSlow {
                    bytes,
                    deadline,
                    min_rate: if cfg.total_timeout.is_some_and(|t| t <= deadline) {
                        0
                    } else {
                        cfg.min_rate
                    },
                })?,
        }
    }

    async fn send_inner(
        &self,
        target: &Target,
        req: &Request,
        head: &Bytes,
    ) -> Result<Response, TransportError> {
        let cfg = &self.inner.config;
        let pooled = self.inner.pool.borrow_mut().take(target, Instant::now());
        if let Some(mut conn) = pooled {
            self.count(|s| s.connections_reused += 1);
            match conn.exchange(req, head, cfg).await {
                Ok(parsed) => return Ok(self.finish(target, conn, parsed)),
                Err(f)
                    if req.idempotent
                        && !f.response_started
                        && matches!(f.error, TransportError::Io(_) | TransportError::Closed) =>
                {
                    self.count(|s| s.stale_retries += 1);
                }
                Err(f) => return Err(f.error),
            }
        }
        let mut conn = Conn::open(target, cfg, self.inner.connector.as_ref()).await?;
        self.count(|s| s.connections_opened += 1);
        match conn.exchange(req, head, cfg).await {
            Ok(parsed) => Ok(self.finish(target, conn, parsed)),
            Err(f) => Err(f.error),
        }
    }

    fn finish(&self, target: &Target, conn: Conn, parsed: Parsed) -> Response {
        if parsed.keep_alive && conn.is_clean() {
            self.inner
                .pool
                .borrow_mut()
                .put(target, conn, Instant::now());
        }
        parsed.response
    }

    fn count(&self, f: impl FnOnce(&mut TransportStats)) {
        let mut stats = self.inner.stats.get();
        f(&mut stats);
        self.inner.stats.set(stats);
    }
}
