//! One TCP (or TLS) connection to Iggy on monoio: one request in flight at a time, each reply
//! read into one buffer that the polled payloads then slice without copying.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use monoio::buf::{IoBufMut, SliceMut};
use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt};
use monoio::net::TcpStream;
use monoio::time::timeout;
use monoio_rustls::{ClientTlsStream, TlsConnector, TlsError};

use super::error::IggyError;
use super::proto::{HEADER_SIZE, RequestState, frame_size};

/// Smallest room made in the read buffer before a read.
const MIN_READ: usize = 64 * 1024;
/// The wait before a request refused as transient is sent again (the official SDK waits 50 ms).
pub const TRANSIENT_RETRY: Duration = Duration::from_millis(50);

enum Stream {
    Plain(TcpStream),
    Tls(Box<ClientTlsStream<TcpStream>>),
}

/// How to reach the server.
#[derive(Clone)]
pub struct Endpoint {
    /// `host:port`.
    pub address: String,
    /// TLS configuration and the name to check, when TLS is on.
    pub tls: Option<(
        Arc<rustls::ClientConfig>,
        rustls::pki_types::ServerName<'static>,
    )>,
    /// Time for TCP connect (and again for the TLS handshake).
    pub connect_timeout: Duration,
    /// Time for one reply.
    pub request_timeout: Duration,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("address", &self.address)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// A failed TLS handshake: a TLS failure is [`IggyError::Tls`], a plain I/O failure during the
/// handshake [`IggyError::Io`] (see [`crate::tls::handshake_failure`]).
fn handshake_error(address: &str, e: TlsError) -> IggyError {
    match crate::tls::handshake_failure(address, e) {
        Ok(io) => IggyError::Io(io),
        Err(tls) => IggyError::Tls(tls),
    }
}

/// An open connection.
pub struct Connection {
    stream: Stream,
    state: RequestState,
    read: BytesMut,
    write: BytesMut,
    request_timeout: Duration,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("client", &format_args!("{:x}", self.state.client()))
            .finish()
    }
}

impl Connection {
    /// Connects (TCP, then TLS when configured) within the connect timeout.
    pub async fn open(endpoint: &Endpoint) -> Result<Connection, IggyError> {
        let addrs: Vec<SocketAddr> = endpoint
            .address
            .to_socket_addrs()
            .map_err(|e| {
                IggyError::Io(io::Error::new(
                    e.kind(),
                    format!("resolving {}: {e}", endpoint.address),
                ))
            })?
            .collect();
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
        let mut tcp = None;
        for addr in addrs {
            match timeout(endpoint.connect_timeout, TcpStream::connect(addr)).await {
                Ok(Ok(s)) => {
                    tcp = Some(s);
                    break;
                }
                Ok(Err(e)) => last = e,
                Err(_) => last = io::Error::new(io::ErrorKind::TimedOut, "connect timed out"),
            }
        }
        let tcp = tcp.ok_or_else(|| {
            IggyError::Io(io::Error::new(
                last.kind(),
                format!("connecting to {}: {last}", endpoint.address),
            ))
        })?;
        tcp.set_nodelay(true)?;
        let stream = match &endpoint.tls {
            None => Stream::Plain(tcp),
            Some((config, name)) => {
                let connector = TlsConnector::from(Arc::clone(config));
                let tls = timeout(
                    endpoint.connect_timeout,
                    connector.connect(name.clone(), tcp),
                )
                .await
                .map_err(|_| IggyError::Timeout("the TLS handshake"))?
                .map_err(|e| handshake_error(&endpoint.address, e))?;
                Stream::Tls(Box::new(tls))
            }
        };
        Ok(Connection {
            stream,
            state: RequestState::new(),
            read: BytesMut::with_capacity(MIN_READ),
            write: BytesMut::with_capacity(4096),
            request_timeout: endpoint.request_timeout,
        })
    }

    /// The request numbering (client id, session).
    pub fn state_mut(&mut self) -> &mut RequestState {
        &mut self.state
    }

    /// The server-side client id of this connection.
    pub fn client_id(&self) -> u128 {
        self.state.client()
    }

    /// Sends request `code` and returns the reply payload.
    ///
    /// A request the server answers with a transient refusal (57 `TransientNotCommitted`: a
    /// metadata change of this client still in the pipeline, or the outcome unknown; 58
    /// `TransientNotAccepted`: not admitted) is sent again, the same frame with the same request
    /// number, every [`TRANSIENT_RETRY`] until `request_timeout` has passed since the first
    /// send, on this connection: the server executes a resent request once, or replays the
    /// reply of the one it committed, so nothing is applied twice and nothing reconnects.
    pub async fn call(&mut self, code: u32, body: &[u8]) -> Result<Bytes, IggyError> {
        self.write.clear();
        self.state.encode(code, body, &mut self.write)?;
        let out = self.write.split().freeze();
        let deadline = std::time::Instant::now() + self.request_timeout;
        loop {
            timeout(self.request_timeout, self.write_all(out.clone()))
                .await
                .map_err(|_| IggyError::Timeout("the request write"))??;
            let frame = timeout(self.request_timeout, self.read_frame())
                .await
                .map_err(|_| IggyError::Timeout("a request"))??;
            match self.state.reply_body(&frame) {
                Err(IggyError::Status { code: status })
                    if status.is_transient_refusal()
                        && std::time::Instant::now() + TRANSIENT_RETRY < deadline =>
                {
                    tracing::debug!(
                        code,
                        status = status.raw(),
                        "Iggy answered a transient refusal; sending the same request again"
                    );
                    monoio::time::sleep(TRANSIENT_RETRY).await;
                }
                other => return other,
            }
        }
    }

    async fn write_all(&mut self, mut data: Bytes) -> Result<(), IggyError> {
        match &mut self.stream {
            Stream::Plain(tcp) => {
                let (result, _) = tcp.write_all(data).await;
                result?;
            }
            Stream::Tls(tls) => {
                while !data.is_empty() {
                    let (result, back) = tls.write(data).await;
                    data = back;
                    match result {
                        Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero).into()),
                        Ok(n) => data.advance(n),
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                let result = tls.flush().await;
                result?;
            }
        }
        Ok(())
    }

    async fn read_frame(&mut self) -> Result<Bytes, IggyError> {
        while self.read.len() < HEADER_SIZE {
            self.read_more(HEADER_SIZE - self.read.len()).await?;
        }
        let mut head = [0u8; HEADER_SIZE];
        head.copy_from_slice(&self.read[..HEADER_SIZE]);
        let size = frame_size(&head)?;
        while self.read.len() < size {
            self.read_more(size - self.read.len()).await?;
        }
        // A frame that fills little of the read buffer is copied out, so the buffer stays
        // ours to reuse: handed out as is, every message of the frame would keep the whole
        // buffer (64 KiB or more) alive while it is in flight. Polls of a few messages each
        // held hundreds of MiB that way against a slow sink.
        if size.saturating_mul(4) < self.read.capacity() {
            let frame = Bytes::copy_from_slice(&self.read[..size]);
            self.read.advance(size);
            return Ok(frame);
        }
        Ok(self.read.split_to(size).freeze())
    }

    async fn read_more(&mut self, need: usize) -> Result<(), IggyError> {
        self.read.reserve(need.max(MIN_READ));
        let buf = std::mem::take(&mut self.read);
        let len = buf.len();
        let cap = buf.capacity();
        let room: SliceMut<BytesMut> = buf.slice_mut(len..cap);
        let (result, room) = match &mut self.stream {
            Stream::Plain(tcp) => tcp.read(room).await,
            Stream::Tls(tls) => tls.read(room).await,
        };
        self.read = room.into_inner();
        match result {
            Ok(0) => Err(IggyError::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            ))),
            Ok(_) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}
