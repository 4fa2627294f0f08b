#!/usr/bin/env bash
# Which launches of each pair job carry a size floor under the daemon, and why (the client logs
# each floored kernel once, with the smallest node's refusal): each job alone under a Throughput
# daemon (MPS underneath) for a short window, with its status mid-window, then the pair.
# Staged by stage.sh into .device/pair.   OUT=$OUT SECONDS_=4 bash floors.sh
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/out}; SECS=${SECONDS_:-4}
mkdir -p "$OUT"
V="$HERE/vitamin"; chmod +x "$V"
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
MPSDIR=$(mktemp -d /tmp/floors-mps.XXXXXX); mkdir -p "$MPSDIR/pipe" "$MPSDIR/log"
export CUDA_MPS_PIPE_DIRECTORY=$MPSDIR/pipe CUDA_MPS_LOG_DIRECTORY=$MPSDIR/log
SOCK=$MPSDIR/daemon.sock
nvidia-cuda-mps-control -d && sleep 1
VITAMIN_LOG=info "$V" daemon --socket "$SOCK" --policy throughput --mps check --detach \
    --pid-file "$MPSDIR/d.pid" --log-file "$OUT/daemon.log" > "$OUT/daemon-start.txt" 2>&1
run_one() { # TAG MODEL...
    local tag=$1; shift
    local b; b=$(mktemp -d /tmp/floors-bar.XXXXXX)
    for m in "$@"; do
        VITAMIN_LOG=info timeout 120 "$V" run --daemon "$SOCK" -- python3 "$HERE/job.py" "$m" throughput \
            "$OUT/$tag-$m.json" --seconds "$SECS" --barrier "$b" --peers $# > /dev/null 2> "$OUT/$tag-$m.err" &
    done
    for _ in $(seq 1 600); do [ "$(ls "$b" | wc -l)" -ge $# ] && break; sleep 0.2; done
    sleep $((SECS / 2)); "$V" daemon status --socket "$SOCK" > "$OUT/$tag-status.txt" 2>&1
    wait; rm -rf "$b"
}
run_one alone resnet
run_one alone gpt
run_one pair gpt resnet
"$V" daemon status --socket "$SOCK" --json > "$OUT/final-status.json" 2>&1
"$V" daemon stop --socket "$SOCK" > /dev/null 2>&1; sleep 0.5
echo quit | nvidia-cuda-mps-control > /dev/null 2>&1
for f in "$OUT"/*.err; do
    echo "== $(basename "$f"): $(grep -c 'only on nodes this large' "$f") floored kernels"
    grep 'only on nodes this large' "$f" | sed 's/^.*INFO //' | cut -c1-400 | head -40
done > "$OUT/floors.txt"
for f in "$OUT"/*.json; do echo "$(basename "$f"): $(cat "$f")"; done >> "$OUT/floors.txt"
cat "$OUT"/*-status.txt >> "$OUT/floors.txt"
cat "$OUT/floors.txt"
tar czf /tmp/floors-raw.tgz -C "$OUT" . && find "$OUT" -type f ! -name floors.txt -delete && mv /tmp/floors-raw.tgz "$OUT/raw.tgz"
