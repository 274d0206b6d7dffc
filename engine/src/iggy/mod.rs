//! The Iggy source: the TCP binary protocol of Iggy server 0.9.0-edge.5 on monoio, built on the
//! `iggy_binary_protocol` codec (`engine/iggy-protocol.md` has the wire notes).

mod client;
pub mod cluster;
mod conn;
mod error;
mod poll;
pub mod proto;
mod source;

pub use client::{Credentials, IggyClient, PartitionState, wire_ident};
pub use cluster::{Finder, Roster};
pub use conn::{Connection, Endpoint};
pub use error::{IggyError, ResultCode, code_name, eviction_name};
/// The poll reply decoder, for the fuzz targets and property tests (`engine/fuzz`,
/// `engine/tests/integration/never_panics.rs`); the engine calls it through [`IggyClient::poll`].
#[doc(hidden)]
pub use poll::decode as decode_poll_reply;
pub use poll::{Polled, RESYNC_SENTINEL};
pub use source::{IggySource, Target};
