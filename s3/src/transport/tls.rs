//! The rustls client configuration (ring provider) and the TLS handshake.

use std::io;
use std::sync::Arc;

use monoio::net::TcpStream;
use monoio_rustls::{ClientTlsStream, TlsConnector, TlsError};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

use crate::error::TransportError;

use super::config::TlsConfig;

/// A connector for the roots of `cfg`, or `None` when it names no roots at all.
pub(crate) fn connector(cfg: &TlsConfig) -> Result<Option<TlsConnector>, TransportError> {
    if let Some(config) = &cfg.client_config {
        return Ok(Some(TlsConnector::from(Arc::clone(config))));
    }
    let mut roots = RootCertStore::empty();
    if let Some(pem) = &cfg.ca_pem {
        let mut count = 0usize;
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| TransportError::Tls(format!("parsing the CA PEM: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| TransportError::Tls(format!("adding a CA certificate: {e}")))?;
            count += 1;
        }
        if count == 0 {
            return Err(TransportError::Tls(
                "the CA PEM contains no certificate".to_owned(),
            ));
        }
    }
    for cert in &cfg.roots {
        roots
            .add(cert.clone())
            .map_err(|e| TransportError::Tls(format!("adding a root certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Ok(None);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TransportError::Tls(format!("choosing TLS protocol versions: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Some(TlsConnector::from(Arc::new(config))))
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
    let shown = name.to_str().into_owned();
    connector.connect(name, tcp).await.map_err(|e| match e {
        TlsError::Rustls(e) => TransportError::Tls(format!("handshake with {shown}: {e}")),
        // monoio-rustls reports the rustls errors it meets while reading (a certificate that
        // does not verify, an alert from the server) as InvalidData. A close during the
        // handshake (UnexpectedEof) or a reset stays an I/O error: it may pass.
        TlsError::Io(e) if e.kind() == io::ErrorKind::InvalidData => {
            TransportError::Tls(format!("handshake with {shown}: {e}"))
        }
        TlsError::Io(e) => TransportError::Io(e),
    })
}
