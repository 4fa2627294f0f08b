#!/usr/bin/env bash
# The operator's excess split by phase, in one device call: op_gaps.cu (no interposer: GPU gaps
# and host share per stream placement and launching thread) and op_phases.cu (pre / gpu / post
# from flags the kernels write to mapped host memory) natively and under bind mode, rounds
# interleaved. CONFIGS="name:VAR=v,VAR=v ..." as in latency_check.sh (`native` runs without
# the shim). Stage: bash bench/gpu/shim/stage_overhead.sh; run there: bash phase_check.sh
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/out}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/phases.XXXXXX)
export PATH=/usr/local/cuda/bin:$PATH
ROUNDS=${ROUNDS:-5}; REPS=${REPS:-300}; GAP_ROUNDS=${GAP_ROUNDS:-3}
CONFIGS=${CONFIGS:-"native new"}
exec > >(tee -a "$OUT/phases.log") 2>&1
echo "=== $(date -u) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"; cat "$HERE/COMMIT" 2>/dev/null
nvcc -O2 -arch=sm_90 "$HERE/op_gaps.cu" -lcuda -o "$W/op_gaps" || exit 1
nvcc -O2 -arch=sm_90 "$HERE/op_phases.cu" -o "$W/op_phases" || exit 1
if [ "$GAP_ROUNDS" -gt 0 ]; then
    echo "=== op_gaps (no interposer)"
    "$W/op_gaps" "$GAP_ROUNDS" "$REPS"
fi
echo "=== op_phases"
for r in $(seq 1 "$ROUNDS"); do
    for cfg in $CONFIGS; do
        name=${cfg%%:*}; vars=""; [[ $cfg == *:* ]] && vars=${cfg#*:}
        (
            IFS=','; for kv in $vars; do [ -n "$kv" ] && export "$kv"; done; unset IFS
            if [ "$name" = native ]; then
                timeout 120 "$W/op_phases" "$REPS"
            else
                LD_PRELOAD="${SHIM:-$HERE/libvitamin_cuda.so}" VITAMIN_MODE=bind VITAMIN_POLICY=${POLICY:-throughput} \
                    timeout 120 "$W/op_phases" "$REPS"
            fi | sed "s/^/$name $r /"
        )
    done
done
# Traced configurations (a VITAMIN_TRACE=/tmp/phtrace_%p.csv among their variables): where the
# operator's time went in each trace (trace_phases.py, segments of 8 launches).
for t in /tmp/phtrace_*.csv; do
    [ -f "$t" ] || continue
    echo "--- $(basename "$t")"
    python3 "$HERE/trace_phases.py" "$t" 8
    (cd "$HERE" && python3 sync_tail.py "$t" 8 30)
done
echo "=== medians over rounds, and per-round excess over native"
python3 - "$OUT/phases.log" <<'PY'
import collections, json, re, statistics, sys
d = collections.defaultdict(lambda: collections.defaultdict(dict))
for line in open(sys.argv[1]):
    m = re.match(r"^(\S+) (\d+) (\{.*\"op_phases\".*\})$", line.strip())
    if m:
        d[m.group(1)][int(m.group(2))] = json.loads(m.group(3))
keys = ["total_p50_us", "total_p95_us", "pre_p50_us", "pre_p95_us", "gpu_p50_us", "post_p50_us", "post_p95_us", "first_launch_p50_us"]
for name, rounds in d.items():
    med = {k: round(statistics.median(r[k] for r in rounds.values()), 2) for k in keys}
    print(name, "rounds", len(rounds), "medians", json.dumps(med))
    if name != "native" and "native" in d:
        ex = {k: round(statistics.median(rounds[i][k] - d["native"][i][k] for i in rounds if i in d["native"]), 2) for k in keys}
        print(name, "minus native, median of per-round differences", json.dumps(ex))
PY
