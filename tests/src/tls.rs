//! Client-side TLS settings for harness clients: which CA to trust, an optional client
//! certificate, and the name to verify — turned into a rustls `ClientConfig` (ring provider);
//! and the `ServerConfig` of harness servers that serve TLS themselves (the Iggy stand-in).

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use crate::HarnessError;
use crate::certs::IssuedCert;

/// The name harness servers' certificates carry (besides `127.0.0.1`).
pub const DEFAULT_SERVER_NAME: &str = "localhost";

/// TLS settings for a client connecting to a harness server.
#[derive(Debug, Clone)]
pub struct ClientTls {
    /// The CA certificate(s) to trust, PEM.
    pub ca_pem: String,
    /// A client certificate and key for mutual TLS.
    pub client_cert: Option<IssuedCert>,
    /// The name to verify the server certificate against (default `localhost`).
    pub server_name: String,
}

impl ClientTls {
    /// Trusts the CA given as PEM, presents no client certificate, verifies `localhost`.
    pub fn new(ca_pem: impl Into<String>) -> Self {
        ClientTls {
            ca_pem: ca_pem.into(),
            client_cert: None,
            server_name: DEFAULT_SERVER_NAME.to_owned(),
        }
    }

    /// Presents `cert` when the server asks for a client certificate.
    pub fn with_client_cert(mut self, cert: IssuedCert) -> Self {
        self.client_cert = Some(cert);
        self
    }

    /// Verifies the server certificate against `name` (a DNS name or an IP address).
    pub fn with_server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = name.into();
        self
    }

    /// The parsed server name.
    pub fn server_name(&self) -> Result<ServerName<'static>, HarnessError> {
        ServerName::try_from(self.server_name.clone()).map_err(|e| {
            HarnessError::Tls(format!("invalid server name {:?}: {e}", self.server_name))
        })
    }

    /// Builds a rustls client configuration (TLS 1.2 and 1.3, ring).
    pub fn client_config(&self) -> Result<Arc<ClientConfig>, HarnessError> {
        let mut roots = RootCertStore::empty();
        let mut count = 0usize;
        for cert in CertificateDer::pem_slice_iter(self.ca_pem.as_bytes()) {
            let cert = cert.map_err(|e| HarnessError::Tls(format!("parsing the CA PEM: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| HarnessError::Tls(format!("adding the CA certificate: {e}")))?;
            count += 1;
        }
        if count == 0 {
            return Err(HarnessError::Tls(
                "the CA PEM contains no certificate".to_owned(),
            ));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| HarnessError::Tls(format!("choosing protocol versions: {e}")))?
            .with_root_certificates(roots);
        let config = match &self.client_cert {
            None => builder.with_no_client_auth(),
            Some(client) => {
                let chain = CertificateDer::pem_slice_iter(client.cert_pem().as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| {
                        HarnessError::Tls(format!("parsing the client certificate: {e}"))
                    })?;
                let key = PrivateKeyDer::from_pem_slice(client.key_pem().as_bytes())
                    .map_err(|e| HarnessError::Tls(format!("parsing the client key: {e}")))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| HarnessError::Tls(format!("using the client certificate: {e}")))?
            }
        };
        Ok(Arc::new(config))
    }
}

/// Builds a rustls server configuration (TLS 1.2 and 1.3, ring, no client authentication)
/// presenting `cert`.
pub(crate) fn server_config(cert: &IssuedCert) -> Result<Arc<ServerConfig>, HarnessError> {
    let chain = CertificateDer::pem_slice_iter(cert.cert_pem().as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| HarnessError::Tls(format!("parsing the server certificate: {e}")))?;
    let key = PrivateKeyDer::from_pem_slice(cert.key_pem().as_bytes())
        .map_err(|e| HarnessError::Tls(format!("parsing the server key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| HarnessError::Tls(format!("choosing protocol versions: {e}")))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| HarnessError::Tls(format!("using the server certificate: {e}")))?;
    Ok(Arc::new(config))
}
