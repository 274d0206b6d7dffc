#!/usr/bin/env bash
# Installs what Spillway's run and tests need, idempotently: quick when everything is present.
#   - mosquitto, mosquitto-clients (Debian packages): the MQTT broker the tests and the bench start
#   - s3s-fs 0.14.1 (cargo): an S3 server that verifies SigV4 signatures, for tests and the bench
#   - libhwloc15, libudev1 (Debian packages): the runtime needs of the real Iggy server in
#     ../shared/iggy/, which the tests and the bench start
#   - prometheus (Debian package): the dashboard test runs every panel's query against a
#     Prometheus that scrapes a live engine
#   - ejabberd (Debian package, 23.01): the second MQTT broker the interop tests start (its
#     system service is stopped and disabled; the tests run their own)
#   - faketime (Debian package): libfaketime, so a test runs the engine with its clock 2 h ahead
#   - linux-perf (Debian package): `perf`, for the flame graphs of the bench's s3-sink scenario
#     (the bench smoke run draws them; without perf it says so and goes on)
#   - the nightly toolchain and cargo-fuzz 0.13.2 (cargo): the fuzz targets the tests build and run
#   - moto[server] 5.2.1 (PyPI): STS on loopback for the AWS credential-chain test, and the
#     S3 store of the README's first run (spillway-first-run and its test)
#   - duckdb 2.0.1 (PyPI): a reader the gzip objects are checked with
#   - cargo-deb 3.8.0 (cargo): builds the .deb (scripts/package.sh), which the tests check
#
# `scripts/setup.sh --first-run` installs only what the README's first run needs: mosquitto, and
# moto with its S3 server (moto[s3] 5.2.1, flask, flask-cors from PyPI: seconds, where s3s-fs
# compiles for about two minutes), so a fresh machine gets to the demo sooner; without it,
# everything above.
set -euo pipefail

first_run=false
[ "${1:-}" = "--first-run" ] && first_run=true

need_apt=()
command -v mosquitto >/dev/null 2>&1 || need_apt+=(mosquitto)
if ! $first_run; then
  command -v mosquitto_sub >/dev/null 2>&1 || need_apt+=(mosquitto-clients)
  command -v prometheus >/dev/null 2>&1 || need_apt+=(prometheus)
  command -v faketime >/dev/null 2>&1 || need_apt+=(faketime)
  [ -x /usr/sbin/ejabberdctl ] || need_apt+=(ejabberd)
  for pkg in libhwloc15 libudev1 linux-perf; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$pkg")
  done
fi
if [ "${#need_apt[@]}" -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
  # The Debian packages enable a system-wide broker on port 1883 and a Prometheus on 9090; the
  # tests start their own.
  if command -v systemctl >/dev/null 2>&1; then
    for unit in mosquitto prometheus prometheus-node-exporter ejabberd; do
      $SUDO systemctl disable --now "$unit" >/dev/null 2>&1 || true
    done
  fi
  # Without systemd the ejabberd package may have started its system node by itself.
  if id ejabberd >/dev/null 2>&1; then
    $SUDO pkill -u ejabberd -f 'ejabberd@localhost' >/dev/null 2>&1 || true
  fi
fi

MOTO_VERSION="5.2.1"
if $first_run; then
  # moto's S3 server alone (the demo's store); the tests' setup below adds the [server] extras.
  if ! python3 -c "import moto, moto.server, flask_cors, yaml, sys; sys.exit(moto.__version__ != '$MOTO_VERSION')" 2>/dev/null; then
    echo "setup: installing moto[s3] $MOTO_VERSION with flask and flask-cors (pip)"
    python3 -m pip install -q --disable-pip-version-check "moto[s3]==$MOTO_VERSION" flask flask-cors
  fi
  echo "setup: mosquitto $(mosquitto -h 2>/dev/null | head -n1 | awk '{print $3}'), moto $MOTO_VERSION ready (the first run's needs; scripts/setup.sh without --first-run installs what the tests need)"
  exit 0
fi

S3S_VERSION="0.14.1"
if ! (command -v s3s-fs >/dev/null 2>&1 && s3s-fs --version 2>/dev/null | grep -q "$S3S_VERSION"); then
  echo "setup: installing s3s-fs $S3S_VERSION (cargo install, a few minutes the first time)"
  cargo install "s3s-fs@$S3S_VERSION" --features binary --locked
fi

# The fuzz targets (codec/fuzz, s3/fuzz, engine/fuzz): cargo-fuzz on the nightly toolchain.
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  echo "setup: installing the nightly toolchain (the fuzz targets need it)"
  rustup toolchain install nightly --profile minimal
fi
CARGO_FUZZ_VERSION="0.13.2"
if ! (command -v cargo-fuzz >/dev/null 2>&1 && cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"); then
  echo "setup: installing cargo-fuzz $CARGO_FUZZ_VERSION (cargo install, about a minute the first time)"
  cargo install "cargo-fuzz@$CARGO_FUZZ_VERSION" --locked
fi

# moto's server: a real STS (AssumeRoleWithWebIdentity) on loopback for the credential-chain
# test, and the first run's S3. joserfc and docker come only with the [server] extras, so a
# machine that had the first run's moto[s3] gets them here.
if ! python3 -c "import moto, moto.server, flask_cors, joserfc, docker, sys; sys.exit(moto.__version__ != '$MOTO_VERSION')" 2>/dev/null; then
  echo "setup: installing moto[server] $MOTO_VERSION (pip)"
  python3 -m pip install -q "moto[server]==$MOTO_VERSION"
fi

# pyarrow: an independent Parquet reader for the S3 sink's Parquet test (e2e_s3_parquet.rs).
PYARROW_VERSION="18.1.0"
if ! python3 -c "import pyarrow, pyarrow.parquet, sys; sys.exit(pyarrow.__version__ != '$PYARROW_VERSION')" 2>/dev/null; then
  echo "setup: installing pyarrow $PYARROW_VERSION (pip)"
  python3 -m pip install -q "pyarrow==$PYARROW_VERSION"
fi

# DuckDB: one of the independent readers the gzip objects are checked with (e2e_s3.rs).
DUCKDB_VERSION="2.0.1"
if ! python3 -c "import duckdb, sys; sys.exit(duckdb.__version__ != '$DUCKDB_VERSION')" 2>/dev/null; then
  echo "setup: installing duckdb $DUCKDB_VERSION (pip)"
  python3 -m pip install -q "duckdb==$DUCKDB_VERSION"
fi

# PyIceberg: the independent reader of the Iceberg tables the S3 sink commits to (through the
# same SQL catalog in SQLite, with SQLAlchemy); it reads the data files with the pyarrow above.
PYICEBERG_VERSION="0.12.0"
if ! python3 -c "import pyiceberg, sqlalchemy, sys; sys.exit(pyiceberg.__version__ != '$PYICEBERG_VERSION')" 2>/dev/null; then
  echo "setup: installing pyiceberg[sql-sqlite] $PYICEBERG_VERSION (pip)"
  python3 -m pip install -q "pyiceberg[sql-sqlite]==$PYICEBERG_VERSION" "pyarrow==$PYARROW_VERSION"
fi

CARGO_DEB_VERSION="3.8.0"
if ! (command -v cargo-deb >/dev/null 2>&1 && cargo deb --version 2>/dev/null | grep -q "$CARGO_DEB_VERSION"); then
  echo "setup: installing cargo-deb $CARGO_DEB_VERSION (cargo install, a few minutes the first time)"
  cargo install "cargo-deb@$CARGO_DEB_VERSION" --locked
fi

echo "setup: mosquitto $(mosquitto -h 2>/dev/null | head -n1 | awk '{print $3}'), s3s-fs $S3S_VERSION, pyarrow $PYARROW_VERSION, pyiceberg $PYICEBERG_VERSION, cargo-fuzz $CARGO_FUZZ_VERSION, cargo-deb $CARGO_DEB_VERSION ready"
