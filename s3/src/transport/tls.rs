//! The rustls client configuration (ring provider) and the TLS handshake.

use std::sync::Arc;

use monoio::net::TcpStream;
use monoio_rustls::{ClientTlsStream, TlsConnector};
use rustls::pki_types::ServerName;

use crate::error::TransportError;

use super::config::TlsConfig;

/// A connector for the roots of `cfg`, or `None` when it names no roots at all.
pub(crate) fn connector(cfg: &TlsConfig) -> Result<Option<TlsConnector>, TransportError> {
    if let Some(config) = &cfg.client_config {
        return Ok(Some(TlsConnector::from(Arc::clone(config))));
    }
    let roots = spillway_net::tls::Roots {
        pem: cfg.ca_pem.as_deref().map(|pem| (pem, "the CA PEM")),
        extra: &cfg.roots,
        mozilla_when_empty: false,
    };
    let config = spillway_net::tls::client_config(roots, None, &[b"http/1.1"])
        .map_err(TransportError::Tls)?;
    Ok(config.map(TlsConnector::from))
}

/// The name to verify: the override, else the target host (brackets of an IPv6 literal
/// removed).
pub(crate) fn server_name(
    cfg: &TlsConfig,
    host: &str,
) -> Result<ServerName<'static>, TransportError> {
    let name = cfg
        .server_name
        .as_deref()
        .unwrap_or_else(|| host.trim_start_matches('[').trim_end_matches(']'));
    ServerName::try_from(name.to_owned())
        .map_err(|e| TransportError::Tls(format!("invalid TLS server name {name:?}: {e}")))
}

/// Runs the handshake on `tcp`.
pub(crate) async fn handshake(
    connector: &TlsConnector,
    name: ServerName<'static>,
    tcp: TcpStream,
) -> Result<ClientTlsStream<TcpStream>, TransportError> {
    use spillway_net::tls::HandshakeError;
    let shown = name.to_str().into_owned();
    connector
        .connect(name, tcp)
        .await
        .map_err(|e| match spillway_net::tls::sort_failure(e) {
            HandshakeError::Tls(e) => TransportError::Tls(format!("handshake with {shown}: {e}")),
            HandshakeError::Io(e) => TransportError::Io(e),
            HandshakeError::TimedOut => TransportError::Timeout {
                phase: "the TLS handshake",
            },
        })
}
