//! rustls client set-up (ring provider) and the handshake, for every TLS connection.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use monoio::net::TcpStream;
use monoio::time::timeout;
use monoio_rustls::{ClientTlsStream, TlsConnector, TlsError};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

/// What to trust.
#[derive(Debug, Default, Clone, Copy)]
pub struct Roots<'a> {
    /// CA certificates in PEM, and how to name them in errors ("the CA file /etc/ca.pem").
    pub pem: Option<(&'a [u8], &'a str)>,
    /// More trusted certificates.
    pub extra: &'a [CertificateDer<'static>],
    /// With neither of the above, trust the Mozilla roots (webpki-roots); else no roots at
    /// all, and [`client_config`] answers `None`.
    pub mozilla_when_empty: bool,
}

/// A client certificate chain and its key, in PEM, with their names for errors.
#[derive(Debug, Clone, Copy)]
pub struct ClientAuth<'a> {
    /// The chain.
    pub chain_pem: &'a [u8],
    /// Its name ("the client certificate /etc/c.pem").
    pub chain_name: &'a str,
    /// The private key.
    pub key_pem: &'a [u8],
    /// Its name.
    pub key_name: &'a str,
}

/// A client configuration for `roots`, with `client` for mutual TLS and `alpn` protocols;
/// `None` when there is nothing to trust. Errors name the PEM they come from.
pub fn client_config(
    roots: Roots<'_>,
    client: Option<ClientAuth<'_>>,
    alpn: &[&[u8]],
) -> Result<Option<Arc<ClientConfig>>, String> {
    let mut store = RootCertStore::empty();
    if let Some((pem, name)) = roots.pem {
        let mut count = 0usize;
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| format!("parsing {name}: {e}"))?;
            store
                .add(cert)
                .map_err(|e| format!("a certificate in {name}: {e}"))?;
            count += 1;
        }
        if count == 0 {
            return Err(format!("{name} holds no certificate"));
        }
    }
    for cert in roots.extra {
        store
            .add(cert.clone())
            .map_err(|e| format!("adding a root certificate: {e}"))?;
    }
    if store.is_empty() {
        if !roots.mozilla_when_empty {
            return Ok(None);
        }
        store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("choosing TLS protocol versions: {e}"))?
        .with_root_certificates(store);
    let mut config = match client {
        None => builder.with_no_client_auth(),
        Some(auth) => {
            let chain: Vec<CertificateDer<'static>> =
                CertificateDer::pem_slice_iter(auth.chain_pem)
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("parsing {}: {e}", auth.chain_name))?;
            if chain.is_empty() {
                return Err(format!("{} holds no certificate", auth.chain_name));
            }
            let key = PrivateKeyDer::from_pem_slice(auth.key_pem)
                .map_err(|e| format!("parsing {}: {e}", auth.key_name))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("the client certificate and key: {e}"))?
        }
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Some(Arc::new(config)))
}

/// `name` as the server name to verify (brackets of an IPv6 literal removed).
pub fn server_name(name: &str) -> Result<ServerName<'static>, String> {
    let name = name.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(name.to_owned()).map_err(|e| format!("TLS server name {name:?}: {e}"))
}

/// Why a handshake failed.
#[derive(Debug)]
pub enum HandshakeError {
    /// A TLS problem (an untrusted certificate, a wrong name, an alert from the server): a
    /// retry will not fix it.
    Tls(String),
    /// An I/O failure during the handshake (reset, closed): it may pass.
    Io(io::Error),
    /// No handshake within the time allowed.
    TimedOut,
}

impl std::fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandshakeError::Tls(e) => f.write_str(e),
            HandshakeError::Io(e) => e.fmt(f),
            HandshakeError::TimedOut => f.write_str("the TLS handshake timed out"),
        }
    }
}

/// The rustls error inside an I/O error from a TLS stream (an alert from the peer, a bad
/// record), if that is what it is.
pub fn rustls_cause(e: &io::Error) -> Option<&rustls::Error> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
}

/// Sorts a failed handshake. (`TlsError`'s own `Display` says only "io error" / "rustls
/// error", and monoio-rustls reports the rustls errors of received records as an `io::Error`
/// of kind `InvalidData`.)
pub fn sort_failure(e: TlsError) -> HandshakeError {
    match e {
        TlsError::Rustls(e) => HandshakeError::Tls(e.to_string()),
        TlsError::Io(e) => match rustls_cause(&e) {
            Some(tls) => HandshakeError::Tls(tls.to_string()),
            None if e.kind() == io::ErrorKind::InvalidData => HandshakeError::Tls(e.to_string()),
            None => HandshakeError::Io(e),
        },
    }
}

/// Runs the handshake on `tcp` within `within`.
pub async fn handshake(
    config: &Arc<ClientConfig>,
    name: ServerName<'static>,
    tcp: TcpStream,
    within: Duration,
) -> Result<ClientTlsStream<TcpStream>, HandshakeError> {
    let connector = TlsConnector::from(Arc::clone(config));
    match timeout(within, connector.connect(name, tcp)).await {
        Err(_) => Err(HandshakeError::TimedOut),
        Ok(Err(e)) => Err(sort_failure(e)),
        Ok(Ok(tls)) => Ok(tls),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn pem_problems_are_named_and_empty_roots_are_none() {
        let none = client_config(Roots::default(), None, &[]).unwrap();
        assert!(none.is_none());
        let mozilla = Roots {
            mozilla_when_empty: true,
            ..Roots::default()
        };
        assert!(client_config(mozilla, None, &[b"h2"]).unwrap().is_some());
        let empty = Roots {
            pem: Some((b"no pem here", "the CA file /x.pem")),
            ..Roots::default()
        };
        assert_eq!(
            client_config(empty, None, &[]).unwrap_err(),
            "the CA file /x.pem holds no certificate"
        );
        assert!(server_name("[::1]").is_ok());
        assert!(server_name("bad name!").is_err());
    }
}
