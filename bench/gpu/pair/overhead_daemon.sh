#!/usr/bin/env bash
# Bind mode's overhead through the daemon against in-process, side by side (issue 24): chain_bench
# (10,000-kernel chain, tiny kernel + sync, the 8-kernel operator) natively, in-process
# (`default`) and with every binding from a `vitamin daemon` on this host (`daemon`), rounds
# interleaved by latency_check.sh. Staged next to latency_check.sh:
#   bash bench/gpu/shim/stage_overhead.sh && strip -o .device/overhead/vitamin target/release/vitamin \
#     && cp bench/gpu/pair/overhead_daemon.sh .device/overhead/
#   OUT=$OUT ROUNDS=10 bash .device/overhead/overhead_daemon.sh     # carry .device/overhead
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/out}; mkdir -p "$OUT"
SOCK=$(mktemp -d /tmp/vd.XXXXXX)/daemon.sock
chmod +x "$HERE/vitamin"
"$HERE/vitamin" daemon --socket "$SOCK" --policy throughput --mps off --detach --log-file "$OUT/daemon.log" || exit 1
trap '"$HERE/vitamin" daemon stop --socket "$SOCK" >/dev/null 2>&1' EXIT
ROUNDS=${ROUNDS:-10} PATHS=0 TRACE="" CONFIGS="native default daemon:VITAMIN_DAEMON=$SOCK" OUT="$OUT" \
    bash "$HERE/latency_check.sh"
"$HERE/vitamin" daemon status --socket "$SOCK" > "$OUT/daemon-status.txt" 2>&1
