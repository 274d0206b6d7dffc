#!/usr/bin/env bash
# Runs every check and test of the workspace. Needs what scripts/setup.sh installs.
set -euo pipefail
cd "$(dirname "$0")/.."

# Free space where the build and the test servers write, printed at each stage so that a run
# that ends in ENOSPC says so. The S3 test servers keep their data in /dev/shm when they can.
disk() { echo "-- disk: $(df -h --output=file,avail . "${TMPDIR:-/tmp}" /dev/shm 2>/dev/null | tail -n +2 | awk '{printf "%s %s free; ", $1, $2}')"; }
disk

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy (workspace, all targets, the engine with Iceberg tables; warnings are errors)"
cargo clippy --workspace --all-targets --locked --features spillway/iceberg -- -D warnings
echo "== cargo clippy (the engine's default build, without Iceberg tables)"
cargo clippy -p spillway --all-targets --locked -- -D warnings

echo "== the S3 crate's sans-IO core builds without the runtime (no monoio, rustls or sockets)"
cargo clippy -p spillway-s3 --no-default-features --lib --locked -- -D warnings

echo "== cargo clippy (the engine without Parquet, as the README's first run builds it)"
cargo clippy -p spillway --no-default-features --all-targets --locked -- -D warnings
echo "== cargo clippy (test harness with the testcontainers path; compiled, not run: no Docker here)"
cargo clippy -p spillway-tests --all-targets --features containers --locked -- -D warnings

disk
echo "== cargo test (unit, property, differential, session and integration tests against real servers)"
# The bench's S3 peers (aws-sdk-s3, rust-s3) are linted above but not built for tests: they
# take many minutes to compile and the bench's own tests do not need them.
# The engine with its feature `iceberg` (Iceberg tables, read back with PyIceberg).
cargo test --workspace --locked --exclude spillway-bench --features spillway/iceberg
cargo test --locked -p spillway-bench --no-default-features
# The engine's unit tests as the README's first run builds it (no Parquet, no AWS chain).
cargo test --locked -p spillway --no-default-features --lib

disk
echo "== bench smoke run: every scenario, quick (writes target/bench/report.md, report.json and each scenario's JSON)"
rm -f target/bench/report.md target/bench/report.json
# The pipeline, scaling and latency scenarios run the release engine binary as its own process.
# With Iceberg tables, as the package has them (scripts/package.sh builds the same binary).
cargo build --release --locked -p spillway --bin spillway --features iceberg
cargo run --release --locked -p spillway-bench --no-default-features -- all --quick
test -s target/bench/report.md && test -s target/bench/report.json

echo "== the .deb: built with cargo-deb, its contents checked (and, as root, installed and purged)"
if [ "$(id -u)" -eq 0 ]; then ./scripts/package.sh --install; else ./scripts/package.sh; fi

echo "== fuzz targets: build every one (nightly, overflow checks on), run each for 30 s"
./scripts/fuzz.sh run 30

disk
echo "== chaos campaign: one minute of faults against the real servers, then every offset checked"
cargo run --release --locked -p spillway-bench --no-default-features -- chaos --quick

disk
echo "== all checks passed"
