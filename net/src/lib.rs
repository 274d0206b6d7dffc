//! The network edge every Spillway connection goes through: the Iggy client, the MQTT sink and
//! the S3 transport. Written once:
//!
//! - [`connect`]: a TCP connection to `host:port`, the name resolved off the calling thread (a
//!   shard must not block on DNS), every address tried in turn, each within the timeout,
//!   `TCP_NODELAY` on;
//! - [`io::read_more`]: one read into the free room at the end of a `BytesMut`;
//! - [`io::write_vectored`] / [`io::write_all`]: the write loops, vectored over [`IoVecs`] (no
//!   copy of a payload) or plain through TLS, each call within its timeout;
//! - [`sockopt`]: the socket options the engine sets (quick ACK, receive low-water mark);
//! - [`tls`]: the rustls client configuration (CA PEM, the Mozilla roots, a client certificate
//!   for mutual TLS, ALPN), the server name, and the handshake with its failure sorted into a TLS
//!   problem (a retry will not fix it) or an I/O one.

pub mod connect;
pub mod io;
mod iovecs;
pub mod resolve;
pub mod sockopt;
pub mod tls;

pub use connect::{ConnectError, connect, connect_address};
pub use iovecs::IoVecs;
pub use resolve::{resolve, split_host_port};
