#!/usr/bin/env bash
# Runs every check and test of the workspace. Needs what scripts/setup.sh installs.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy (workspace, all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== cargo clippy (test harness with the testcontainers path; compiled, not run: no Docker here)"
cargo clippy -p spillway-tests --all-targets --features containers --locked -- -D warnings

echo "== cargo test (unit, property, differential, session and integration tests against real servers)"
cargo test --workspace --locked

echo "== codec bench, quick smoke run (writes target/bench/codec.json)"
cargo run --release --locked -p spillway-bench -- codec --quick

echo "== all checks passed"
