#!/usr/bin/env bash
# The first run: installs what is missing for it (scripts/setup.sh --first-run), builds the
# engine and the first-run program (profile first-run), then runs the demo: the engine with the generate source
# (no Iggy server needed) delivering to a local mosquitto and a local s3s-fs, with a live
# progress line and a summary that checks sent = received = in objects.
# Arguments go to the program: --messages N (default 200000), --engine PATH, and
# --iggy HOST:PORT (or SPILLWAY_IGGY_ADDRESS) to read from a real Iggy server instead: it logs in
# as SPILLWAY_IGGY_USERNAME / SPILLWAY_IGGY_PASSWORD (default iggy / iggy), sends the messages
# into a new stream, runs the engine on it, stops it (SIGTERM) once both sinks stored their last
# offsets, and deletes the stream.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh --first-run
# The `first-run` profile (release without LTO, parallel code generation) and no Parquet build
# in about half the time of `cargo build --release`; tuning.md says what that costs at run time.
echo "first-run: building spillway and spillway-first-run (profile first-run, without Parquet)"
cargo build --profile first-run --no-default-features --locked -p spillway -p spillway-tests \
    --bin spillway --bin spillway-first-run
target_dir="${CARGO_TARGET_DIR:-target}"
exec "$target_dir/first-run/spillway-first-run" --engine "$target_dir/first-run/spillway" "$@"
