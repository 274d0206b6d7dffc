//! The engine's integration tests, in one binary so that the engine is linked into tests once.
//!
//! Each module was its own test binary before; the names stayed, so `cargo test -p spillway
//! --test integration e2e_s3_memory::` runs what `--test e2e_s3_memory` ran. The modules that
//! start servers take them from `spillway_tests` on ephemeral loopback ports and share nothing
//! but `common`, so any two of them may run at once.

mod common;

mod config_reference;
mod e2e_check;
mod e2e_control;
mod e2e_dashboard;
mod e2e_file;
// Commits to an Iceberg table read back with PyIceberg: only with the feature.
#[cfg(feature = "iceberg")]
mod e2e_iceberg;
mod e2e_iggy;
mod e2e_iggy_cluster;
mod e2e_logs;
mod e2e_mqtt;
mod e2e_mqtt_brokers;
mod e2e_operate;
mod e2e_s3;
// Runs the AWS credential chain against loopback fakes: only with the feature.
#[cfg(feature = "aws-chain")]
mod e2e_s3_credentials;
mod e2e_s3_handover;
mod e2e_s3_hostile;
mod e2e_s3_memory;
// Reads Parquet objects back with arrow-rs: only with the feature.
#[cfg(feature = "parquet")]
mod e2e_s3_parquet;
mod e2e_s3_split;
mod e2e_tls;
mod examples;
mod never_panics;
