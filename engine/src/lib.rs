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

pub mod ack;
pub mod acks;
pub mod check;
pub mod config;
pub mod control;
pub mod coremap;
pub mod credentials;
pub mod error;
pub mod flow;
pub mod generate;
pub mod ids;
pub mod iggy;
pub mod json;
pub mod message;
pub mod metrics;
pub mod metrics_http;
pub mod notify;
pub mod offsets;
pub mod operator;
pub mod ratelog;
pub mod runner;
pub mod shard;
pub mod signal;
pub mod sink;
pub mod status;
pub mod template;
pub mod tls;
pub mod units;
