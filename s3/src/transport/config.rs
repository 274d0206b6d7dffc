//! Settings of the transport.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rustls::ClientConfig;
use rustls::pki_types::CertificateDer;

use crate::http::Limits;

/// Settings of a [`Client`](super::Client).
#[derive(Debug, Clone)]
pub struct TransportConfig {
    /// Limit for opening a connection: the TCP connect, and then the TLS handshake, each get
    /// this long. Default 10 s.
    pub connect_timeout: Duration,
    /// Progress timeout: every single read or write of an exchange must complete within this
    /// time (a write completes when the kernel took some bytes, a read when some arrived).
    /// A large body that keeps flowing never times out; a server that stops reading, or holds
    /// its response, does. Default 30 s.
    pub request_timeout: Duration,
    /// Optional limit for the whole exchange (connect, write, response), retry on a stale
    /// connection included, whatever the body size. Default none.
    pub total_timeout: Option<Duration>,
    /// The slowest transfer accepted, bytes per second: each exchange gets a deadline of
    /// `request_timeout` plus its body size at this rate ([`TransportConfig::deadline_for`]),
    /// so a store that drips its answer (every read arriving just within `request_timeout`)
    /// is still given up on. 0: no such deadline. Default 64 KiB/s.
    pub min_rate: u64,
    /// Most idle connections kept per (scheme, host, port). 0 disables reuse. Default 16.
    pub max_idle_per_host: usize,
    /// Idle connections older than this are closed instead of reused (servers close idle
    /// connections themselves, AWS S3 after about 20 s). Default 15 s.
    pub idle_timeout: Duration,
    /// Bounds on response heads and bodies.
    pub limits: Limits,
    pub tls: TlsConfig,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            total_timeout: None,
            min_rate: 64 * 1024,
            max_idle_per_host: 16,
            idle_timeout: Duration::from_secs(15),
            limits: Limits::default(),
            tls: TlsConfig::default(),
        }
    }
}

impl TransportConfig {
    /// The deadline of a whole exchange with a request body of `bytes`: the tighter of
    /// `total_timeout` and `request_timeout + bytes / min_rate`; `None` when neither is set.
    pub fn deadline_for(&self, bytes: u64) -> Option<Duration> {
        let by_rate = (self.min_rate > 0).then(|| {
            self.request_timeout
                .saturating_add(Duration::from_secs_f64(bytes as f64 / self.min_rate as f64))
        });
        match (self.total_timeout, by_rate) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Which servers `https` targets are trusted to be. There are no built-in roots: give a CA as
/// PEM, roots loaded by the caller (for example from the system store with
/// `rustls-native-certs`), or a complete rustls configuration. An `https` request without any
/// of them fails with [`TransportError::Tls`](crate::TransportError::Tls).
#[derive(Clone, Default)]
pub struct TlsConfig {
    /// CA certificates to trust, PEM (one or more `CERTIFICATE` blocks).
    pub ca_pem: Option<Vec<u8>>,
    /// Further trusted root certificates, DER.
    pub roots: Vec<CertificateDer<'static>>,
    /// The name the server certificate is checked against (and sent as SNI) instead of the
    /// target host, e.g. when connecting to an IP address.
    pub server_name: Option<String>,
    /// A complete rustls client configuration; when set, `ca_pem` and `roots` are not used.
    pub client_config: Option<Arc<ClientConfig>>,
}

impl TlsConfig {
    /// Trusts the CA certificates in `pem`.
    pub fn with_ca_pem(pem: impl Into<Vec<u8>>) -> Self {
        TlsConfig {
            ca_pem: Some(pem.into()),
            ..TlsConfig::default()
        }
    }
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field(
                "ca_pem",
                &self
                    .ca_pem
                    .as_ref()
                    .map(|p| format!("<{} bytes of PEM>", p.len())),
            )
            .field(
                "roots",
                &format_args!("<{} certificates>", self.roots.len()),
            )
            .field("server_name", &self.server_name)
            .field(
                "client_config",
                &self.client_config.as_ref().map(|_| "<rustls ClientConfig>"),
            )
            .finish()
    }
}
