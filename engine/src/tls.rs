//! rustls client configurations for the engine's connections (Iggy now; brokers later): a CA
//! file or the Mozilla roots, an optional client certificate for mutual TLS.

use std::io;
use std::path::Path;
use std::sync::Arc;

use monoio_rustls::TlsError;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

/// Builds a client configuration. `ca` is a PEM file of CA certificates (without it the
/// webpki-roots set); `client` is a (certificate chain PEM, private key PEM) pair for mutual
/// TLS. Errors name the file.
pub fn client_config(
    ca: Option<&Path>,
    client: Option<(&Path, &Path)>,
    alpn: &[&[u8]],
) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    match ca {
        Some(path) => {
            let pem = std::fs::read(path)
                .map_err(|e| format!("reading the CA file {}: {e}", path.display()))?;
            let mut count = 0;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert =
                    cert.map_err(|e| format!("parsing the CA file {}: {e}", path.display()))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("a certificate in {}: {e}", path.display()))?;
                count += 1;
            }
            if count == 0 {
                return Err(format!(
                    "the CA file {} holds no certificate",
                    path.display()
                ));
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("choosing TLS versions: {e}"))?
        .with_root_certificates(roots);
    let mut config = match client {
        None => builder.with_no_client_auth(),
        Some((cert_path, key_path)) => {
            let pem = std::fs::read(cert_path).map_err(|e| {
                format!(
                    "reading the client certificate {}: {e}",
                    cert_path.display()
                )
            })?;
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("parsing {}: {e}", cert_path.display()))?;
            if chain.is_empty() {
                return Err(format!("{} holds no certificate", cert_path.display()));
            }
            let key_pem = std::fs::read(key_path)
                .map_err(|e| format!("reading the client key {}: {e}", key_path.display()))?;
            let key = PrivateKeyDer::from_pem_slice(&key_pem)
                .map_err(|e| format!("parsing the client key {}: {e}", key_path.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("the client certificate and key: {e}"))?
        }
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// The name to verify: the override, else the host part of `address` (`host:port`).
pub fn server_name(address: &str, name: Option<&str>) -> Result<ServerName<'static>, String> {
    let host = name.unwrap_or_else(|| {
        address
            .rsplit_once(':')
            .map_or(address, |(h, _)| h)
            .trim_start_matches('[')
            .trim_end_matches(']')
    });
    ServerName::try_from(host.to_owned()).map_err(|e| format!("TLS server name {host:?}: {e}"))
}

/// Sorts a failed TLS handshake with `address`: `Err` with the rustls reason for a TLS failure
/// (an untrusted certificate, a wrong name, an alert from the server), which a retry will not
/// fix; `Ok` with the I/O error for a plain I/O failure during the handshake (reset, closed),
/// to be retried like a failed connect. (`TlsError`'s own `Display` says only "io error" /
/// "rustls error", and monoio-rustls wraps the rustls errors of received records in an
/// `io::Error`.)
pub fn handshake_failure(address: &str, e: TlsError) -> Result<io::Error, String> {
    let e = match e {
        TlsError::Rustls(e) => return Err(format!("TLS handshake with {address}: {e}")),
        TlsError::Io(e) => e,
    };
    match rustls_cause(&e) {
        Some(tls) => Err(format!("TLS handshake with {address}: {tls}")),
        None => Ok(io::Error::new(
            e.kind(),
            format!("TLS handshake with {address}: {e}"),
        )),
    }
}

/// The rustls error inside an I/O error from a TLS stream (an alert from the peer, a bad
/// record), if that is what it is.
pub fn rustls_cause(e: &io::Error) -> Option<&rustls::Error> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
}
