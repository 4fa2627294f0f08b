#!/usr/bin/env bash
# Do busy helper threads slow a native CUDA program on this host? chain_bench.cu (no interposer)
# alone and next to SPINNERS spinning processes (spinner.c: pause + sched_yield, like vitamin's
# dispatcher and submission threads while they wait), ROUNDS rounds alternating.
# Run from the repository root on the GPU machine: bash bench/gpu/host/spin_check.sh
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SHIM_DIR=${SHIM_DIR:-$HERE/../shim}
OUT=${OUT:-$HERE/out}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/spin.XXXXXX)
export PATH=/usr/local/cuda/bin:$PATH
ROUNDS=${ROUNDS:-3}; SPINNERS=${SPINNERS:-2}
cc -O2 -o "$W/spinner" "$HERE/spinner.c" || exit 1
nvcc -O2 -arch=sm_90 "$SHIM_DIR/chain_bench.cu" -o "$W/chain_bench" || exit 1
for r in $(seq 1 "$ROUNDS"); do
    "$W/chain_bench" 10000 5 2000 300 | sed "s/^/alone $r /"
    pids=()
    for _ in $(seq 1 "$SPINNERS"); do "$W/spinner" 30 & pids+=($!); done
    "$W/chain_bench" 10000 5 2000 300 | sed "s/^/spinning $r /"
    kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null
done | tee "$OUT/spin_check.log"
