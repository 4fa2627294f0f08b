#!/usr/bin/env bash
# Do busy helper threads slow a native CUDA program on this host, and does the way they spin
# matter? chain_bench.cu (no interposer) alone and next to SPINNERS spinning processes of each
# mode in MODES (spinner.c: "yield" = pause + sched_yield per check, as vitamin's dispatcher spins
# by default, spin_yield in docs/config.md; "pause" = 8 pauses per check, no system call), ROUNDS rounds alternating.
# Run from the repository root on the GPU machine: bash bench/probes/host/spin_check.sh
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SHIM_DIR=${SHIM_DIR:-$HERE/../shim}
OUT=${OUT:-$HERE/out}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/spin.XXXXXX)
export PATH=/usr/local/cuda/bin:$PATH
ROUNDS=${ROUNDS:-3}; SPINNERS=${SPINNERS:-2}; MODES=${MODES:-yield pause}
cc -O2 -o "$W/spinner" "$HERE/spinner.c" || exit 1
nvcc -O2 -arch=sm_90 "$SHIM_DIR/chain_bench.cu" -o "$W/chain_bench" || exit 1
for r in $(seq 1 "$ROUNDS"); do
    "$W/chain_bench" 10000 5 2000 300 | sed "s/^/alone $r /"
    for mode in $MODES; do
        pids=()
        for _ in $(seq 1 "$SPINNERS"); do "$W/spinner" 30 "$mode" & pids+=($!); done
        "$W/chain_bench" 10000 5 2000 300 | sed "s/^/spinning_$mode $r /"
        kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null
    done
done | tee "$OUT/spin_check.log"
# Chain medians per placement (ms), over rounds.
python3 - "$OUT/spin_check.log" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    parts = line.split(" ", 2)
    if len(parts) == 3 and parts[2].startswith("{"):
        d = json.loads(parts[2])
        if d.get("test") == "chain":
            runs.setdefault(parts[0], []).append(d["median_ms"])
for k, v in runs.items():
    print(f"{k}: chain ms {v} median {statistics.median(v):.2f}")
PY
