//! A blocking client byte stream: plain TCP, or TLS (rustls `StreamOwned`) over TCP.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use rustls::{ClientConnection, StreamOwned};

use crate::HarnessError;
use crate::tls::ClientTls;

/// A connected client stream.
#[derive(Debug)]
pub enum Transport {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP; the handshake has completed.
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Transport {
    /// Connects to `addr` within `timeout`, and with `tls` completes the TLS handshake.
    ///
    /// TLS failures (an untrusted server, a refused client certificate) are reported as
    /// [`HarnessError::Tls`]. With TLS 1.3 a server that rejects the client certificate may only
    /// say so after the client considers the handshake done; that shows up on the first read.
    pub fn connect(
        addr: SocketAddr,
        tls: Option<&ClientTls>,
        timeout: Duration,
    ) -> Result<Transport, HarnessError> {
        let tcp = TcpStream::connect_timeout(&addr, timeout)
            .map_err(|e| HarnessError::io(format!("connecting to {addr}"), e))?;
        tcp.set_nodelay(true)
            .map_err(|e| HarnessError::io("setting TCP_NODELAY", e))?;
        tcp.set_read_timeout(Some(timeout))
            .map_err(|e| HarnessError::io("setting the read timeout", e))?;
        tcp.set_write_timeout(Some(timeout))
            .map_err(|e| HarnessError::io("setting the write timeout", e))?;
        let Some(tls) = tls else {
            return Ok(Transport::Plain(tcp));
        };
        let conn = ClientConnection::new(tls.client_config()?, tls.server_name()?)
            .map_err(|e| HarnessError::Tls(format!("creating the TLS session: {e}")))?;
        let mut stream = StreamOwned::new(conn, tcp);
        while stream.conn.is_handshaking() {
            stream
                .conn
                .complete_io(&mut stream.sock)
                .map_err(|e| tls_io_error("TLS handshake", e))?;
        }
        Ok(Transport::Tls(Box::new(stream)))
    }

    /// Sets the read timeout of the underlying socket.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> Result<(), HarnessError> {
        self.tcp()
            .set_read_timeout(timeout)
            .map_err(|e| HarnessError::io("setting the read timeout", e))
    }

    /// The underlying TCP socket.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Transport::Plain(s) => s,
            Transport::Tls(s) => &s.sock,
        }
    }
}

/// Turns an I/O error into [`HarnessError::Tls`] if it carries a rustls error, else into
/// [`HarnessError::Io`].
pub(crate) fn tls_io_error(context: &str, e: io::Error) -> HarnessError {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(tls) => HarnessError::Tls(format!("{context}: {tls}")),
        None => HarnessError::io(context, e),
    }
}

impl Read for Transport {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.read(buf),
            Transport::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Transport {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.write(buf),
            Transport::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Transport::Plain(s) => s.flush(),
            Transport::Tls(s) => s.flush(),
        }
    }
}
