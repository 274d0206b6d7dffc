//! TCP connect: resolve (off the thread), try each address within the timeout, `TCP_NODELAY`.

use std::fmt;
use std::io;
use std::time::Duration;

use monoio::net::TcpStream;
use monoio::time::timeout;

use crate::resolve::{resolve, split_host_port};

/// Why no connection came up.
#[derive(Debug)]
pub struct ConnectError {
    /// `host:port` as given.
    pub address: String,
    /// Whether the name did not resolve (else no address accepted).
    pub resolving: bool,
    /// The last failure.
    pub source: io::Error,
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.resolving {
            write!(f, "resolving {}: {}", self.address, self.source)
        } else {
            write!(f, "connecting to {}: {}", self.address, self.source)
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

impl From<ConnectError> for io::Error {
    fn from(e: ConnectError) -> io::Error {
        io::Error::new(e.source.kind(), e.to_string())
    }
}

/// Connects to `host` at `port`: the name resolved within `within`, then each address in
/// turn, each given `within`. `TCP_NODELAY` is set on the connection.
pub async fn connect(host: &str, port: u16, within: Duration) -> Result<TcpStream, ConnectError> {
    let shown = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let failed = |resolving, source| ConnectError {
        address: shown.clone(),
        resolving,
        source,
    };
    let addrs = match timeout(within, resolve(host, port)).await {
        Ok(Ok(addrs)) => addrs,
        Ok(Err(e)) => return Err(failed(true, e)),
        Err(_) => {
            return Err(failed(
                true,
                io::Error::new(io::ErrorKind::TimedOut, "name resolution timed out"),
            ));
        }
    };
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the host name has no address");
    for addr in addrs {
        match timeout(within, TcpStream::connect_addr(addr)).await {
            Ok(Ok(tcp)) => {
                tcp.set_nodelay(true).map_err(|e| failed(false, e))?;
                return Ok(tcp);
            }
            Ok(Err(e)) => last = e,
            Err(_) => last = io::Error::new(io::ErrorKind::TimedOut, "connect timed out"),
        }
    }
    Err(failed(false, last))
}

/// [`connect`] to `address` given as `host:port`.
pub async fn connect_address(address: &str, within: Duration) -> Result<TcpStream, ConnectError> {
    let (host, port) = split_host_port(address).map_err(|source| ConnectError {
        address: address.to_owned(),
        resolving: true,
        source,
    })?;
    let mut out = connect(host, port, within).await;
    if let Err(e) = &mut out {
        e.address = address.to_owned();
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn connects_and_names_the_address_it_could_not_reach() {
        let mut rt = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()
            .unwrap();
        rt.block_on(async {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port();
            let tcp = connect_address(&format!("localhost:{port}"), Duration::from_secs(2))
                .await
                .unwrap();
            drop(tcp);
            drop(listener);
            let e = connect_address(&format!("127.0.0.1:{port}"), Duration::from_secs(2))
                .await
                .unwrap_err();
            assert!(!e.resolving);
            assert!(
                e.to_string()
                    .starts_with(&format!("connecting to 127.0.0.1:{port}: ")),
                "{e}"
            );
            let e = connect_address("no-such-host.invalid:1", Duration::from_secs(5))
                .await
                .unwrap_err();
            assert!(e.resolving, "{e}");
            assert!(
                connect_address("no port", Duration::from_secs(1))
                    .await
                    .is_err()
            );
        });
    }
}
