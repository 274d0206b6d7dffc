#!/usr/bin/env bash
# Builds or runs the cargo-fuzz targets of every fuzz directory (codec/fuzz, s3/fuzz,
# engine/fuzz). Needs a nightly toolchain (`rustup toolchain install nightly`); installs
# cargo-fuzz when it is missing.
#
#   scripts/fuzz.sh build           build every target (cargo +nightly fuzz build)
#   scripts/fuzz.sh run SECONDS     run each target for SECONDS, one after the other, from its
#                                   corpus (corpus/<target>, kept out of git) and its seeds
#                                   (seeds/<target>, when there are any); stop at the first
#                                   crash and print how to replay it
#   scripts/fuzz.sh list            the targets, as DIR TARGET
#
# The three workspaces build into one target directory, target/fuzz (FUZZ_TARGET_DIR).
# FUZZ_DIRS (space separated) and FUZZ_TARGETS (space separated names) narrow the set;
# FUZZ_ARGS adds libFuzzer options (for example "-max_len=8192"). One target runs at a time, in
# one process: on a shared machine run the script under `nice -n 19`.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
# One target directory for the three fuzz workspaces: what they share is built once.
target_dir="${FUZZ_TARGET_DIR:-$root/target/fuzz}"

read -r -a dirs <<<"${FUZZ_DIRS:-codec/fuzz s3/fuzz engine/fuzz}"
read -r -a only <<<"${FUZZ_TARGETS:-}"
read -r -a extra <<<"${FUZZ_ARGS:-}"

usage() {
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2
    exit 2
}

command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz@0.13.2 --locked

# The targets of one fuzz directory, filtered by FUZZ_TARGETS.
targets() {
    local t
    for t in $(cd "$1" && cargo +nightly fuzz list); do
        if [ ${#only[@]} -eq 0 ] || [[ " ${only[*]} " == *" $t "* ]]; then
            echo "$t"
        fi
    done
}

build() {
    local dir
    for dir in "${dirs[@]}"; do
        echo "== $dir: cargo +nightly fuzz build"
        (cd "$dir" && cargo +nightly fuzz build --target-dir "$target_dir")
    done
}

# Runs one target for $3 seconds; sets `line` to its executions (libFuzzer's final stats) and
# corpus; on a crash (or any failure) prints the end of the log and exits.
line=""
run_target() {
    local dir=$1 target=$2 seconds=$3
    local log="$root/$dir/artifacts/$target.log"
    local corpora=("corpus/$target") args=()
    mkdir -p "$dir/corpus/$target" "$dir/artifacts/$target"
    if [ -d "$dir/seeds/$target" ]; then
        corpora+=("seeds/$target")
    fi
    if [ -f "$dir/dict/$target.dict" ]; then
        args+=("-dict=dict/$target.dict")
    fi
    echo "== $dir $target: ${seconds}s"
    local status=0
    (cd "$dir" && cargo +nightly fuzz run --target-dir "$target_dir" "$target" "${corpora[@]}" -- \
        -max_total_time="$seconds" -print_final_stats=1 ${args[@]+"${args[@]}"} \
        ${extra[@]+"${extra[@]}"}) >"$log" 2>&1 || status=$?
    local execs rate corp files bytes
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    # The corpus libFuzzer ended with (units/size), and the files kept on disk.
    corp=$(sed -n 's/.*DONE .* corp: \([^ ]*\).*/\1/p' "$log" | tail -n 1)
    files=$(find "$dir/corpus/$target" -type f | wc -l)
    bytes=$(du -sk "$dir/corpus/$target" | cut -f1)
    if [ "$status" -ne 0 ]; then
        tail -n 60 "$log"
        echo "FAILED: $dir $target (exit $status, after ${execs:-?} execs); log: $log"
        local crash
        crash=$(grep -o 'artifacts/[^ ]*' "$log" | tail -n 1 || true)
        if [ -n "$crash" ]; then
            echo "replay: (cd $dir && cargo +nightly fuzz run $target $crash)"
            echo "shrink: (cd $dir && cargo +nightly fuzz tmin $target $crash)"
        fi
        exit 1
    fi
    line=$(printf '%-12s %-14s execs %-10s execs/s %-6s corpus %s (files: %s, %s KiB)' \
        "$dir" "$target" "${execs:-?}" "${rate:-?}" "${corp:-?}" "$files" "$bytes")
}

case "${1:-}" in
    build)
        [ $# -eq 1 ] || usage
        build
        ;;
    run)
        [ $# -eq 2 ] && [[ "$2" =~ ^[0-9]+$ ]] && [ "$2" -gt 0 ] || usage
        build
        summary=()
        for dir in "${dirs[@]}"; do
            for target in $(targets "$dir"); do
                run_target "$dir" "$target" "$2"
                echo "$line"
                summary+=("$line")
            done
        done
        echo "== all targets ran ${2}s without a crash"
        printf '%s\n' "${summary[@]}"
        ;;
    list)
        for dir in "${dirs[@]}"; do
            for target in $(targets "$dir"); do
                echo "$dir $target"
            done
        done
        ;;
    *)
        usage
        ;;
esac
