//! One TCP (or TLS) connection to Iggy on monoio: one request in flight at a time, each reply
//! read into one buffer that the polled payloads then slice without copying.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use monoio::net::TcpStream;
use monoio::time::timeout;
use monoio_rustls::ClientTlsStream;

use super::error::{IggyError, ResultCode};
use super::proto::{HEADER_SIZE, Identity, RequestState, frame_size, legacy_reply};

/// Smallest room made in the read buffer before a read.
const MIN_READ: usize = 64 * 1024;
/// The wait before a request refused as transient is sent again (the official SDK waits 50 ms).
pub const TRANSIENT_RETRY: Duration = Duration::from_millis(50);
/// How many times a cluster node's 58 (`TransientNotAccepted`) is resent on the same
/// connection before the refusal is returned and the leader looked for again.
pub const CLUSTER_RESENDS: u32 = 2;

enum Stream {
    Plain(TcpStream),
    Tls(Box<ClientTlsStream<TcpStream>>),
}

/// How to reach the server.
#[derive(Clone)]
pub struct Endpoint {
    /// `host:port` of the server, or of several nodes of a cluster (the seeds the leader is
    /// found from; see [`super::cluster`]).
    pub addresses: Vec<String>,
    /// TLS configuration, and the name to check when it is not the host of each address.
    pub tls: Option<(Arc<rustls::ClientConfig>, Option<String>)>,
    /// Time for TCP connect (and again for the TLS handshake).
    pub connect_timeout: Duration,
    /// Time for one reply.
    pub request_timeout: Duration,
}

impl Endpoint {
    /// The configured addresses as the config wrote them (comma-separated).
    pub fn listed(&self) -> String {
        self.addresses.join(",")
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("addresses", &self.addresses)
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
    /// The server is a node of a cluster: 58 may mean "not the leader (any more)", which
    /// no resend on this connection cures.
    clustered: bool,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("client", &format_args!("{:x}", self.state.client()))
            .finish()
    }
}

impl Connection {
    /// Connects to `address` (TCP, then TLS when configured) within the connect timeout, as
    /// `identity` (a fresh one when `None`).
    pub async fn open(
        endpoint: &Endpoint,
        address: &str,
        identity: Option<Identity>,
    ) -> Result<Connection, IggyError> {
        let tcp = spillway_net::connect_address(address, endpoint.connect_timeout)
            .await
            .map_err(|e| IggyError::Io(e.into()))?;
        let stream = match &endpoint.tls {
            None => Stream::Plain(tcp),
            Some((config, name)) => {
                use spillway_net::tls::HandshakeError;
                let name = crate::tls::server_name(address, name.as_deref())
                    .map_err(|e| IggyError::Tls(format!("server name for {address}: {e}")))?;
                let tls = spillway_net::tls::handshake(config, name, tcp, endpoint.connect_timeout)
                    .await
                    .map_err(|e| match e {
                        HandshakeError::TimedOut => IggyError::Timeout("the TLS handshake"),
                        HandshakeError::Tls(e) => {
                            IggyError::Tls(format!("TLS handshake with {address}: {e}"))
                        }
                        HandshakeError::Io(e) => IggyError::Io(io::Error::new(
                            e.kind(),
                            format!("TLS handshake with {address}: {e}"),
                        )),
                    })?;
                Stream::Tls(Box::new(tls))
            }
        };
        Ok(Connection {
            stream,
            state: identity.map_or_else(RequestState::new, RequestState::for_identity),
            read: BytesMut::with_capacity(MIN_READ),
            write: BytesMut::with_capacity(4096),
            request_timeout: endpoint.request_timeout,
            cap: None,
            clustered: false,
        })
    }

    /// Bounds every request from now on by `until` as well (`None`: by `request_timeout`
    /// alone): a drain or a stop must not wait for the server longer than it has.
    pub fn cap_requests(&mut self, until: Option<Instant>) {
        self.cap = until;
    }

    /// Marks the connection as one to a node of a cluster: a request refused with 58
    /// (`TransientNotAccepted`) is sent again [`CLUSTER_RESENDS`] times at most, then the
    /// refusal is returned, so the caller finds the leader again (a follower refuses every
    /// write with 58, for good).
    pub fn set_clustered(&mut self, clustered: bool) {
        self.clustered = clustered;
    }

    /// This connection's client identity (id and request counter).
    pub fn identity(&self) -> Identity {
        self.state.identity()
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
    /// reply of the one it committed, so nothing is applied twice and nothing reconnects. On a
    /// cluster's node, 58 is resent [`CLUSTER_RESENDS`] times at most (see
    /// [`Connection::set_clustered`]).
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
        let mut not_accepted = 0;
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
                    if self.clustered
                        && status == ResultCode::TransientNotAccepted
                        && not_accepted >= CLUSTER_RESENDS =>
                {
                    return Err(IggyError::Status { code: status });
                }
                Err(IggyError::Status { code: status })
                    if status.is_transient_refusal()
                        && Instant::now() + TRANSIENT_RETRY < deadline =>
                {
                    if status == ResultCode::TransientNotAccepted {
                        not_accepted += 1;
                    }
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
            if let Err(e) = self.read_more(HEADER_SIZE - self.read.len()).await {
                // A pre-0.9 server may close after its error answers.
                return Err(
                    legacy_reply(&self.read).map_or(e, |status| IggyError::LegacyServer { status })
                );
            }
        }
        let mut head = [0u8; HEADER_SIZE];
        head.copy_from_slice(&self.read[..HEADER_SIZE]);
        let size = frame_size(&head).map_err(|e| {
            legacy_reply(&head).map_or(e, |status| IggyError::LegacyServer { status })
        })?;
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
