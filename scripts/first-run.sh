#!/usr/bin/env bash
# The first run: installs what is missing for it (scripts/setup.sh --first-run), builds the
# engine and the first-run program (profile first-run), then runs the demo: the engine with the generate source
# (no Iggy server needed) delivering to a local mosquitto and a local S3 (moto), with a live
# progress line and a summary that checks sent = received = in objects.
# Arguments go to the program: --messages N (default 200000), --engine PATH, and
# --iggy HOST:PORT (or SPILLWAY_IGGY_ADDRESS) to read from a real Iggy server instead: it logs in
# as SPILLWAY_IGGY_USERNAME / SPILLWAY_IGGY_PASSWORD (default iggy / iggy), sends the messages
# into a new stream, runs the engine on it, stops it (SIGTERM) once both sinks stored their last
# offsets, and deletes the stream.
set -euo pipefail
cd "$(dirname "$0")/.."

# The setup (a Debian package and a pip install: mostly waiting on the network) runs beside the
# build (mostly CPU) when it can run unattended: as root, or with sudo that asks no password.
setup_log="$(mktemp -t spillway-first-run-setup.XXXXXX)"
trap 'rm -f "$setup_log"' EXIT
setup_pid=""
if [ "$(id -u)" -eq 0 ] || sudo -n true 2>/dev/null; then
  echo "first-run: scripts/setup.sh --first-run runs beside the build (its output follows it)"
  ./scripts/setup.sh --first-run >"$setup_log" 2>&1 &
  setup_pid=$!
else
  ./scripts/setup.sh --first-run
fi
# The `first-run` profile (release without LTO, parallel code generation) and neither Parquet nor
# the AWS credential chain: about 45% of the time of `cargo build --release`; tuning.md says what
# that costs at run time.
echo "first-run: building spillway and spillway-first-run (profile first-run, without Parquet and the AWS credential chain)"
build_status=0
cargo build --profile first-run --no-default-features --locked -p spillway -p spillway-tests \
    --bin spillway --bin spillway-first-run || build_status=$?
if [ -n "$setup_pid" ]; then
  setup_status=0
  wait "$setup_pid" || setup_status=$?
  cat "$setup_log"
  if [ "$setup_status" -ne 0 ]; then
    echo "first-run: scripts/setup.sh --first-run failed (exit $setup_status); its output is above" >&2
    exit "$setup_status"
  fi
fi
[ "$build_status" -eq 0 ] || exit "$build_status"
target_dir="${CARGO_TARGET_DIR:-target}"
rm -f "$setup_log"
exec "$target_dir/first-run/spillway-first-run" --engine "$target_dir/first-run/spillway" "$@"
