//! Spillway: a thread-per-core sink engine that delivers Apache Iggy partitions to MQTT brokers
//! and S3-compatible stores.
//!
//! The data path of one shard: the Iggy source polls the partitions pinned to its core
//! ([`iggy`], [`runner`]); batches go to the sink ([`sink`]); the sink's confirmations move a
//! per-partition watermark ([`ack`]) and only that watermark is stored in Iggy. Every decision
//! on that path (what to poll, when to store, when to reconnect, when a drain is over) is made
//! by the sans-IO flow core ([`flow`]); the runner only performs its actions. The control
//! thread ([`control`]) owns signals, metrics ([`metrics`]) and the shards ([`shard`]), which it
//! reaches only through bounded lock-free queues.

pub(crate) mod ack;
pub(crate) mod acks;
pub mod check;
pub mod config;
pub mod control;
pub mod coremap;
pub(crate) mod credentials;
pub mod error;
pub(crate) mod flow;
pub(crate) mod generate;
pub(crate) mod ids;
pub mod iggy;
pub mod json;
pub mod message;
pub(crate) mod metrics;
pub(crate) mod metrics_http;
pub(crate) mod notify;
pub mod offsets;
pub mod operator;
pub mod orphans;
pub(crate) mod ratelog;
pub(crate) mod runner;
pub(crate) mod shard;
pub(crate) mod signal;
pub mod sink;
pub(crate) mod status;
pub(crate) mod template;
pub(crate) mod tls;
pub(crate) mod units;
