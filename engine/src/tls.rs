//! rustls client configurations for the engine's connections (Iggy, MQTT brokers) from the
//! files the config names: a CA file or the Mozilla roots, an optional client certificate for
//! mutual TLS. The TLS set-up itself is `spillway_net::tls`, shared with the S3 transport.

use std::path::Path;
use std::sync::Arc;

use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use spillway_net::tls::{ClientAuth, Roots};

fn read(path: &Path, what: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("reading {what} {}: {e}", path.display()))
}

/// Builds a client configuration. `ca` is a PEM file of CA certificates (without it the
/// webpki-roots set); `client` is a (certificate chain PEM, private key PEM) pair for mutual
/// TLS. Errors name the file.
pub fn client_config(
    ca: Option<&Path>,
    client: Option<(&Path, &Path)>,
    alpn: &[&[u8]],
) -> Result<Arc<ClientConfig>, String> {
    let ca_pem = ca.map(|p| read(p, "the CA file")).transpose()?;
    let ca_name = ca.map(|p| format!("the CA file {}", p.display()));
    let auth = match client {
        None => None,
        Some((cert, key)) => Some((
            read(cert, "the client certificate")?,
            cert.display().to_string(),
            read(key, "the client key")?,
            format!("the client key {}", key.display()),
        )),
    };
    let roots = Roots {
        pem: ca_pem.as_deref().zip(ca_name.as_deref()),
        extra: &[],
        mozilla_when_empty: true,
    };
    let client = auth
        .as_ref()
        .map(|(chain, chain_name, key, key_name)| ClientAuth {
            chain_pem: chain,
            chain_name,
            key_pem: key,
            key_name,
        });
    spillway_net::tls::client_config(roots, client, alpn)?
        .ok_or_else(|| "no trusted roots".to_owned())
}

/// The name to verify: the override, else the host part of `address` (`host:port`).
pub fn server_name(address: &str, name: Option<&str>) -> Result<ServerName<'static>, String> {
    let host = name.unwrap_or_else(|| address.rsplit_once(':').map_or(address, |(h, _)| h));
    spillway_net::tls::server_name(host)
}
