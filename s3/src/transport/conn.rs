//! One connection (TCP or TLS over TCP) with its read buffer, and one exchange on it: write the
//! request, read the response.

use std::io;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use monoio::net::TcpStream;
use monoio::time::timeout;
use monoio_rustls::{ClientTlsStream, TlsConnector};

use crate::endpoint::Scheme;
use crate::error::TransportError;
use crate::http::{Parsed, Progress, ResponseParser};
use crate::request::Request;

use super::client::Target;
use super::config::TransportConfig;
use super::tls;
use spillway_net::IoVecs;

/// Smallest room made in the read buffer before a read.
const MIN_READ: usize = 16 * 1024;

/// Over TLS, chunks smaller than this are gathered into one write (one TLS record holds at most
/// 16 KiB of plaintext); larger ones are written on their own.
const TLS_GATHER: usize = 16 * 1024;

enum Stream {
    Plain(TcpStream),
    Tls(Box<ClientTlsStream<TcpStream>>),
}

/// An open connection and the bytes read from it but not used yet.
pub(crate) struct Conn {
    stream: Stream,
    buf: BytesMut,
}

/// Why an exchange failed.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) error: TransportError,
    /// Whether any byte came back from the server during the exchange.
    pub(crate) response_started: bool,
}

impl Failure {
    fn new(error: TransportError, response_started: bool) -> Self {
        Failure {
            error,
            response_started,
        }
    }
}

impl Conn {
    /// Connects to `target` (every resolved address in turn, within `connect_timeout`) and, for
    /// `https`, runs the TLS handshake (within another `connect_timeout`).
    pub(crate) async fn open(
        target: &Target,
        cfg: &TransportConfig,
        connector: Option<&TlsConnector>,
    ) -> Result<Conn, TransportError> {
        let shown = format!("{}:{}", target.host, target.port);
        // Checked before connecting: an https target without roots is a configuration error.
        let tls = match target.scheme {
            Scheme::Http => None,
            Scheme::Https => {
                let Some(connector) = connector else {
                    return Err(TransportError::Tls(format!(
                        "https to {shown} needs trusted roots: set TlsConfig::ca_pem, roots or \
                         client_config"
                    )));
                };
                Some((connector, tls::server_name(&cfg.tls, &target.host)?))
            }
        };
        let tcp = timeout(
            cfg.connect_timeout,
            connect_tcp(target, &shown, cfg.connect_timeout),
        )
        .await
        .map_err(|_| TransportError::Timeout {
            phase: "connecting",
        })??;
        let stream = match tls {
            None => Stream::Plain(tcp),
            Some((connector, name)) => {
                let tls_stream = timeout(cfg.connect_timeout, tls::handshake(connector, name, tcp))
                    .await
                    .map_err(|_| TransportError::Timeout {
                        phase: "the TLS handshake",
                    })??;
                Stream::Tls(Box::new(tls_stream))
            }
        };
        Ok(Conn {
            stream,
            buf: BytesMut::new(),
        })
    }

    /// Whether no unread bytes are left (bytes nobody asked for make a connection unfit for
    /// another request).
    pub(crate) fn is_clean(&self) -> bool {
        self.buf.is_empty()
    }

    /// Sends `req` (its encoded `head`, then its body chunks) and reads the response.
    ///
    /// If writing fails, what the server may have answered before closing (an early error
    /// response) is still read and returned.
    pub(crate) async fn exchange(
        &mut self,
        req: &Request,
        head: &Bytes,
        cfg: &TransportConfig,
    ) -> Result<Parsed, Failure> {
        let mut parser =
            ResponseParser::new(req.method, cfg.limits).with_body_limit(req.max_response_body);
        let written = match &mut self.stream {
            Stream::Plain(tcp) => write_plain(tcp, head, req, cfg.request_timeout).await,
            Stream::Tls(tls) => write_tls(tls, head, req, cfg.request_timeout).await,
        };
        match written {
            Ok(()) => self.read_response(&mut parser, cfg.request_timeout).await,
            Err(error @ TransportError::Io(_)) => {
                // Best effort: the server may have answered (e.g. 403) and closed before reading
                // the whole body.
                match self.read_response(&mut parser, cfg.request_timeout).await {
                    Ok(mut parsed) => {
                        parsed.keep_alive = false;
                        Ok(parsed)
                    }
                    Err(f) => Err(Failure::new(error, f.response_started)),
                }
            }
            Err(error) => Err(Failure::new(error, false)),
        }
    }

    async fn read_response(
        &mut self,
        parser: &mut ResponseParser,
        io_timeout: Duration,
    ) -> Result<Parsed, Failure> {
        let mut started = !self.buf.is_empty();
        loop {
            let need = match parser.parse(&mut self.buf) {
                Ok(Progress::Complete(parsed)) => return Ok(parsed),
                Ok(Progress::Partial(need)) => need,
                Err(e) => return Err(Failure::new(e, started)),
            };
            let phase = if started {
                "reading the response"
            } else {
                "waiting for the response"
            };
            let n = match timeout(io_timeout, self.read_more(need)).await {
                Err(_) => return Err(Failure::new(TransportError::Timeout { phase }, started)),
                Ok(Err(e)) => return Err(Failure::new(TransportError::Io(e), started)),
                Ok(Ok(n)) => n,
            };
            if n == 0 {
                return parser
                    .finish_eof(&mut self.buf)
                    .map_err(|e| Failure::new(e, started));
            }
            started = true;
        }
    }

    /// Reads once into the free room at the end of the buffer, made at least `need` bytes
    /// (and at least [`MIN_READ`]). `Ok(0)` is the end of the stream.
    async fn read_more(&mut self, need: usize) -> io::Result<usize> {
        let room = need.max(MIN_READ);
        let result = match &mut self.stream {
            Stream::Plain(tcp) => spillway_net::io::read_more(tcp, &mut self.buf, room).await,
            Stream::Tls(tls) => {
                spillway_net::io::read_more(tls.as_mut(), &mut self.buf, room).await
            }
        };
        match result {
            // rustls reports a close without close_notify as UnexpectedEof: the end of the
            // stream as far as HTTP framing goes (a truncated body is caught by the parser,
            // which knows how long the body must be, except for bodies delimited by the close).
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
            other => other,
        }
    }
}

/// Connects to the first address of `target` that accepts (the name resolved off the
/// thread).
async fn connect_tcp(
    target: &Target,
    shown: &str,
    within: Duration,
) -> Result<TcpStream, TransportError> {
    spillway_net::connect(&target.host, target.port, within)
        .await
        .map_err(|e| TransportError::Connect {
            addr: shown.to_owned(),
            source: e.source,
        })
}

/// Writes the head and body with `writev`, one iovec per buffer, until all is written.
async fn write_plain(
    tcp: &mut TcpStream,
    head: &Bytes,
    req: &Request,
    io_timeout: Duration,
) -> Result<(), TransportError> {
    let bufs = IoVecs::new(std::iter::once(head.clone()).chain(req.body.chunks().iter().cloned()));
    spillway_net::io::write_vectored(tcp, bufs, io_timeout)
        .await
        .map(drop)
        .map_err(write_failure)
}

/// A write that timed out is a [`TransportError::Timeout`]; the others are I/O errors.
fn write_failure(e: io::Error) -> TransportError {
    if e.kind() == io::ErrorKind::TimedOut {
        TransportError::Timeout {
            phase: "sending the request",
        }
    } else {
        TransportError::Io(e)
    }
}

/// Writes the head and body through rustls: chunks under [`TLS_GATHER`] bytes are gathered
/// (a copy, which encryption makes anyway), larger ones written as they are.
async fn write_tls(
    tls: &mut ClientTlsStream<TcpStream>,
    head: &Bytes,
    req: &Request,
    io_timeout: Duration,
) -> Result<(), TransportError> {
    let mut gather = BytesMut::with_capacity(TLS_GATHER);
    gather.extend_from_slice(head);
    for chunk in req.body.chunks() {
        if gather.len() + chunk.len() <= TLS_GATHER {
            gather.extend_from_slice(chunk);
            continue;
        }
        if !gather.is_empty() {
            write_all_tls(tls, gather.split().freeze(), io_timeout).await?;
        }
        if chunk.len() >= TLS_GATHER {
            write_all_tls(tls, chunk.clone(), io_timeout).await?;
        } else {
            gather.extend_from_slice(chunk);
        }
    }
    if !gather.is_empty() {
        write_all_tls(tls, gather.freeze(), io_timeout).await?;
    }
    Ok(())
}

async fn write_all_tls(
    tls: &mut ClientTlsStream<TcpStream>,
    data: Bytes,
    io_timeout: Duration,
) -> Result<(), TransportError> {
    spillway_net::io::write_all(tls, data, io_timeout)
        .await
        .map_err(write_failure)
}
