//! The monoio transport: HTTP/1.1 exchanges over TCP or TLS (rustls through monoio-rustls), with
//! a keep-alive connection pool per shard.
//!
//! - [`Client`] is one shard's transport (`!Send`; clone it to share the pool). Its
//!   [`Client::send`] writes a [`Request`](crate::Request) to a [`Target`] and reads the whole
//!   [`Response`](crate::Response) with the sans-IO parser of [`crate::http`].
//! - On plain TCP the request head and the body chunks go out with vectored writes (`writev`),
//!   one iovec per `Bytes` chunk: the body is never joined into one buffer. Over TLS the chunks
//!   are encrypted by rustls, small ones gathered into records of up to 16 KiB first.
//! - Idle connections are kept per (scheme, host, port) and reused, newest first. A request
//!   that fails on a reused connection before any byte of the response arrived (the server had
//!   closed the idle connection) is sent once more on a new connection, if it is idempotent.
//! - Timeouts ([`TransportConfig`]): connecting (TCP and TLS handshake each), every read and
//!   write making progress, and optionally the whole exchange. They need a runtime built with
//!   `enable_timer()`.

mod client;
mod config;
mod conn;
mod pool;
mod tls;

pub use client::{Client, Target, TransportStats};
pub use config::{TlsConfig, TransportConfig};
pub use spillway_net::IoVecs;
