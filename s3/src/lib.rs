//! # spillway-s3
//!
//! The S3 client of Spillway: SigV4 signing (with the `aws-sigv4` crate), one file per S3
//! action ([`actions`]), HTTP/1.1 framing ([`http`]), and a monoio transport ([`transport`]:
//! TCP and rustls, a keep-alive pool, timeouts) that writes request bodies as lists of `Bytes`
//! chunks with vectored writes; on top, [`upload::ObjectWriter`], a streaming multipart
//! uploader with bounded memory and per-part retries.
//!
//! The core is sans-IO: building, signing and parsing requests needs no runtime. The client
//! is one per shard (not `Send`) and runs on a monoio runtime built with `enable_timer()`.
//!
//! ## Uploading a file
//!
//! ```no_run
//! use std::io::Read;
//! use std::rc::Rc;
//!
//! use bytes::Bytes;
//! use spillway_s3::client::{ClientConfig, S3Client};
//! use spillway_s3::credentials::Credentials;
//! use spillway_s3::endpoint::Endpoint;
//! use spillway_s3::multipart::MIB;
//! use spillway_s3::upload::{ObjectWriter, UploadConfig};
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // Credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (/ AWS_SESSION_TOKEN).
//!     let credentials = Credentials::from_env()?;
//!     // A custom endpoint gets path-style addressing; `Endpoint::aws("eu-west-1")` for AWS.
//!     let endpoint = Endpoint::parse("http://127.0.0.1:9000", "us-east-1", None)?;
//!     let mut rt = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
//!         .enable_timer()
//!         .build()?;
//!     rt.block_on(async {
//!         let client = Rc::new(S3Client::new(ClientConfig::new(endpoint, credentials))?);
//!         // 8 MiB parts, 4 uploading at once: about 40 MiB held whatever the file's size.
//!         let cfg = UploadConfig::new(8 * MIB, 4);
//!         let mut object = ObjectWriter::new(client, "my-bucket", "backups/data.bin", &cfg)?;
//!         let mut file = std::fs::File::open("data.bin")?;
//!         loop {
//!             let mut buf = vec![0u8; MIB as usize];
//!             let n = file.read(&mut buf)?;
//!             if n == 0 {
//!                 break;
//!             }
//!             buf.truncate(n);
//!             object.append(Bytes::from(buf)).await?;
//!         }
//!         let info = object.close().await?;
//!         println!("{} bytes, ETag {}", info.size, info.etag);
//!         Ok(())
//!     })
//! }
//! ```

pub mod actions;
#[cfg(feature = "runtime")]
pub mod client;
pub mod credentials;
pub mod endpoint;
pub mod error;
pub mod http;
pub mod multipart;
pub mod options;
pub mod request;
pub mod retry;
pub mod sign;
pub mod skew;
#[cfg(feature = "runtime")]
pub mod transport;
#[cfg(feature = "runtime")]
pub mod upload;
pub mod xml;

pub use error::{Error, S3Error, TransportError};
pub use request::{Body, Method, Request, Response};
