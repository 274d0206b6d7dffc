//! A TLS front that requires an ALPN protocol, as AWS IoT Core does for MQTT on port 443
//! (`x-amzn-mqtt-ca`), terminating TLS and piping the plaintext to a broker (mosquitto).
//!
//! A stand-in: mosquitto's listeners have no ALPN setting, so a test of the sink's `alpn` key
//! needs a TLS server that looks at what the client offers. A connection that offers other
//! protocols fails its handshake (no application protocol in common); one that offers none is
//! closed right after the handshake, as AWS IoT Core closes it.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rustls::{ServerConnection, StreamOwned};

use crate::HarnessError;
use crate::certs::TestCa;

/// See the module docs.
#[derive(Debug)]
pub struct AlpnTlsProxy {
    addr: SocketAddr,
    ca: TestCa,
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    accepted: AtomicU64,
    refused: AtomicU64,
}

impl AlpnTlsProxy {
    /// Listens on a free loopback port with a certificate for `localhost` and `127.0.0.1`
    /// from a CA of its own, takes connections that negotiate `protocol`, and pipes them to
    /// `upstream`.
    pub fn start(upstream: SocketAddr, protocol: &str) -> Result<AlpnTlsProxy, HarnessError> {
        let ca = TestCa::new("spillway test ALPN front")?;
        let cert = ca.issue_server_cert(&["localhost", "127.0.0.1"])?;
        let mut config = (*crate::tls::server_config(&cert)?).clone();
        config.alpn_protocols = vec![protocol.as_bytes().to_vec()];
        let config = Arc::new(config);
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .map_err(|e| HarnessError::io("binding the ALPN front's port", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| HarnessError::io("reading the ALPN front's address", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| HarnessError::io("setting the ALPN front's listener", e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Counts::default());
        {
            let (stop, counts) = (Arc::clone(&stop), Arc::clone(&counts));
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((client, _)) => {
                            let (config, counts) = (Arc::clone(&config), Arc::clone(&counts));
                            std::thread::spawn(move || serve(client, config, upstream, &counts));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            });
        }
        Ok(AlpnTlsProxy {
            addr,
            ca,
            stop,
            counts,
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `127.0.0.1:port`.
    pub fn host_port(&self) -> String {
        self.addr.to_string()
    }

    /// The CA that issued its certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        self.ca.cert_pem()
    }

    /// Connections that negotiated the protocol.
    pub fn accepted(&self) -> u64 {
        self.counts.accepted.load(Ordering::SeqCst)
    }

    /// Connections refused for their ALPN (none offered, or none in common).
    pub fn refused(&self) -> u64 {
        self.counts.refused.load(Ordering::SeqCst)
    }
}

impl Drop for AlpnTlsProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn serve(
    client: TcpStream,
    config: Arc<rustls::ServerConfig>,
    upstream: SocketAddr,
    counts: &Counts,
) {
    let _ = client.set_nonblocking(false);
    let _ = client.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok(conn) = ServerConnection::new(config) else {
        return;
    };
    let mut tls = StreamOwned::new(conn, client);
    while tls.conn.is_handshaking() {
        if tls.conn.complete_io(&mut tls.sock).is_err() {
            // No protocol in common: rustls refused the handshake.
            counts.refused.fetch_add(1, Ordering::SeqCst);
            return;
        }
    }
    if tls.conn.alpn_protocol().is_none() {
        counts.refused.fetch_add(1, Ordering::SeqCst);
        let _ = tls.sock.shutdown(Shutdown::Both);
        return;
    }
    counts.accepted.fetch_add(1, Ordering::SeqCst);
    let Ok(broker) = TcpStream::connect(upstream) else {
        return;
    };
    let _ = tls.sock.set_read_timeout(Some(Duration::from_millis(5)));
    let _ = broker.set_read_timeout(Some(Duration::from_millis(5)));
    let mut broker = broker;
    let mut buf = vec![0u8; 16 * 1024];
    // One thread, both directions, polling with short read timeouts: a test's traffic.
    loop {
        let mut moved = false;
        match tls.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if broker.write_all(&buf[..n]).is_err() {
                    break;
                }
                moved = true;
            }
            Err(e) if timed_out(&e) => {}
            Err(_) => break,
        }
        match broker.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if tls.write_all(&buf[..n]).and_then(|()| tls.flush()).is_err() {
                    break;
                }
                moved = true;
            }
            Err(e) if timed_out(&e) => {}
            Err(_) => break,
        }
        if !moved {
            std::thread::yield_now();
        }
    }
    let _ = broker.shutdown(Shutdown::Both);
    let _ = tls.sock.shutdown(Shutdown::Both);
}

fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}
