//! Test harness for Spillway: real servers started as child processes on ephemeral loopback
//! ports, and an independent MQTT subscriber to observe what they deliver.
//!
//! - [`Mosquitto`]: an MQTT broker (plain, user/password, TLS, mutual TLS, ACL, limits), with
//!   [`Mosquitto::stop`], [`Mosquitto::start_again`] and [`Mosquitto::restart`] on the same port.
//! - [`S3Server`]: `s3s-fs`, an S3 server that verifies SigV4, with a bucket ready.
//! - [`Subscriber`]: records every message a broker delivers (MQTT 3.1.1 or 5, QoS 0/1/2, TLS),
//!   built on the `mqttbytes` crate rather than Spillway's codec.
//! - [`TestCa`]: certificates made with rcgen for TLS tests.
//! - [`MqttCountProxy`]: a TCP proxy between an MQTT client and a broker that parses both
//!   directions and counts QoS 1/2 messages in flight and what the broker acknowledged.
//! - [`FaultProxy`]: an HTTP proxy that injects faults (dropped connections, 500, 503 SlowDown,
//!   stalls, a fixed error answer) into a seeded share of S3 requests.
//! - [`BlackHoleProxy`]: a plain TCP proxy that can black-hole its connections both ways without
//!   closing them (a network cut, here between an engine and Iggy).
//! - [`IggyProcess`]: the real Iggy server (`../shared/iggy/iggy-server`) in a temporary data
//!   directory on a free loopback port; [`IggyStandIn`]: a stand-in for it (not the real
//!   server), built on the real wire-format crate, for what the real server cannot be made to
//!   do; [`IggyServer::start`] picks (an external server with `SPILLWAY_TEST_IGGY`, else the
//!   real one, else the stand-in with a notice, an error under `SPILLWAY_REQUIRE_REAL_IGGY=1`),
//!   and [`IggyAdmin`] is a small synchronous client for all of them (see [`iggy`]).
//! - `containers` (feature `containers`): EMQX and MinIO through testcontainers where Docker
//!   exists.
//!
//! Every server lives in its own temporary directory and is killed on drop, so tests can run
//! in parallel. A missing server binary is reported as [`HarnessError::BinaryMissing`]: run
//! `scripts/setup.sh`.

pub mod alpn_proxy;
pub mod blackhole;
mod certs;
#[cfg(feature = "containers")]
pub mod containers;
mod ejabberd;
mod error;
pub mod faultproxy;
mod fsutil;
pub mod iggy;
pub mod imds;
mod mosquitto;
pub mod moto;
pub mod mqtt_count_proxy;
mod mqtt_wire;
pub mod ports;
mod process;
mod received;
mod s3server;
mod subscriber;
mod tls;
mod transport;

pub use alpn_proxy::AlpnTlsProxy;
pub use blackhole::BlackHoleProxy;
pub use certs::{IssuedCert, TestCa};
pub use ejabberd::{EJABBERD_PASSWORD, EJABBERD_USER, Ejabberd, EjabberdOpts};
pub use error::{HarnessError, IggyChannel};
pub use faultproxy::{FaultPlan, FaultProxy, FaultStats, FixedAnswer, RequestHead};
pub use iggy::{
    IggyAdmin, IggyCluster, IggyProcess, IggyProcessOpts, IggyServer, IggyStandIn, IggyStandInOpts,
    PolledTestBatch, PolledTestMessage, TestConsumer, TestMessage, TestPolling,
};
pub use mosquitto::{Mosquitto, MosquittoOpts, TlsMode};
pub use moto::{MOTO_BUCKET, MotoS3};
pub use mqtt_count_proxy::{MqttCountProxy, ProxyStats};
pub use mqtt_wire::{ConnAckInfo, MqttVersion};
pub use process::{LOG_TAIL_LINES, ServerProcess};
pub use received::{Received, RecordedProps};
pub use s3server::{REGION, S3Server, S3ServerOpts, object_files};
pub use subscriber::{Subscriber, SubscriberOpts};
pub use tls::{ClientTls, DEFAULT_SERVER_NAME};
pub use transport::Transport;
