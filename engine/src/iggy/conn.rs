//! One TCP (or TLS) connection to Iggy on monoio: one request in flight at a time, each reply
//! read into one buffer that the polled payloads then slice without copying.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use monoio::net::TcpStream;
use monoio::time::timeout;
use monoio_rustls::ClientTlsStream;

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

/// An open connection.
pub struct Connection {
    stream: Stream,
    state: RequestState,
    read: BytesMut,
    write: BytesMut,
    request_timeout: Duration,
    /// No request runs past this (a drain's deadline, a stop's grace), whatever
    /// `request_timeout` allows.
    cap: Option<Instant>,
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
        let tcp = spillway_net::connect_address(&endpoint.address, endpoint.connect_timeout)
            .await
            .map_err(|e| IggyError::Io(e.into()))?;
        let stream = match &endpoint.tls {
            None => Stream::Plain(tcp),
            Some((config, name)) => {
                use spillway_net::tls::HandshakeError;
                let tls = spillway_net::tls::handshake(
                    config,
                    name.clone(),
                    tcp,
                    endpoint.connect_timeout,
                )
                .await
                .map_err(|e| match e {
                    HandshakeError::TimedOut => IggyError::Timeout("the TLS handshake"),
                    HandshakeError::Tls(e) => {
                        IggyError::Tls(format!("TLS handshake with {}: {e}", endpoint.address))
                    }
                    HandshakeError::Io(e) => IggyError::Io(io::Error::new(
                        e.kind(),
                        format!("TLS handshake with {}: {e}", endpoint.address),
                    )),
                })?;
                Stream::Tls(Box::new(tls))
            }
        };
        Ok(Connection {
            stream,
            state: RequestState::new(),
            read: BytesMut::with_capacity(MIN_READ),
            write: BytesMut::with_capacity(4096),
            request_timeout: endpoint.request_timeout,
            cap: None,
        })
    }

    /// Bounds every request from now on by `until` as well (`None`: by `request_timeout`
    /// alone): a drain or a stop must not wait for the server longer than it has.
    pub fn cap_requests(&mut self, until: Option<Instant>) {
        self.cap = until;
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
        let full = Instant::now() + self.request_timeout;
        let deadline = self.cap.map_or(full, |cap| cap.min(full));
        let capped = deadline < full;
        let what = |full: &'static str| {
            if capped {
                "a request cut at the shutdown deadline"
            } else {
                full
            }
        };
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            timeout(left, self.write_all(out.clone()))
                .await
                .map_err(|_| IggyError::Timeout(what("the request write")))??;
            let left = deadline.saturating_duration_since(Instant::now());
            let frame = timeout(left, self.read_frame())
                .await
                .map_err(|_| IggyError::Timeout(what("a request")))??;
            match self.state.reply_body(&frame) {
                Err(IggyError::Status { code: status })
                    if status.is_transient_refusal()
                        && Instant::now() + TRANSIENT_RETRY < deadline =>
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

    async fn write_all(&mut self, data: Bytes) -> Result<(), IggyError> {
        let limit = self.request_timeout;
        match &mut self.stream {
            Stream::Plain(tcp) => spillway_net::io::write_all(tcp, data, limit).await?,
            Stream::Tls(tls) => {
                spillway_net::io::write_all(tls.as_mut(), data, limit).await?;
                spillway_net::io::flush(tls.as_mut(), limit).await?;
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
        let room = need.max(MIN_READ);
        let result = match &mut self.stream {
            Stream::Plain(tcp) => spillway_net::io::read_more(tcp, &mut self.read, room).await,
            Stream::Tls(tls) => {
                spillway_net::io::read_more(tls.as_mut(), &mut self.read, room).await
            }
        };
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
