#!/usr/bin/env bash
# Does the operator's excess depend on where the scheduler put vitamin's threads? Runs op_phases.cu
# ROUNDS times natively and under bind mode (CONFIGS as in phase_check.sh), and while each process
# runs samples every thread's CPU (`ps -L`, every 50 ms). Prints per process the CPUs the
# application, dispatcher and submission threads ran on most, and the phases; with the c2c matrix
# (bench/probes/host/c2c_probe.c) the cache-line transfer cost between those CPUs. Stage:
# bash bench/gpu/shim/stage_overhead.sh; run there: bash placement_check.sh
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/out}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/placement.XXXXXX)
export PATH=/usr/local/cuda/bin:$PATH
ROUNDS=${ROUNDS:-6}; REPS=${REPS:-300}; C2C=${C2C:-1}
CONFIGS=${CONFIGS:-"native new"}
exec > >(tee -a "$OUT/placement.log") 2>&1
echo "=== $(date -u) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"; cat "$HERE/COMMIT" 2>/dev/null
nvcc -O2 -arch=sm_90 "$HERE/op_phases.cu" -o "$W/op_phases" || exit 1
if [ "$C2C" = 1 ]; then
    cc -O2 -pthread "$HERE/c2c_probe.c" -o "$W/c2c_probe" && "$W/c2c_probe" 20000
fi
for r in $(seq 1 "$ROUNDS"); do
    for cfg in $CONFIGS; do
        name=${cfg%%:*}; vars=""; [[ $cfg == *:* ]] && vars=${cfg#*:}
        (
            IFS=','; for kv in $vars; do [ -n "$kv" ] && export "$kv"; done; unset IFS
            if [ "$name" = native ]; then
                timeout 120 "$W/op_phases" "$REPS" > "$W/res" &
            else
                LD_PRELOAD="${SHIM:-$HERE/libvitamin_cuda.so}" VITAMIN_MODE=bind VITAMIN_POLICY=${POLICY:-throughput} \
                    timeout 120 "$W/op_phases" "$REPS" > "$W/res" &
            fi
            tpid=$!
            sleep 0.3
            pid=$(pgrep -P "$tpid" op_phases | head -1)
            : > "$W/samples"
            while kill -0 "$tpid" 2>/dev/null; do
                [ -n "$pid" ] && ps -L -o psr=,comm= -p "$pid" >> "$W/samples" 2>/dev/null
                sleep 0.05
            done
            wait "$tpid"
            cpus=$(python3 - "$W/samples" <<'PY'
import collections, sys
c = collections.defaultdict(collections.Counter)
for line in open(sys.argv[1]):
    p = line.split(None, 1)
    if len(p) == 2:
        c[p[1].strip()][int(p[0])] += 1
def top(name):
    k = [n for n in c if n.startswith(name)]
    if not k:
        return "-"
    (cpu, n), = c[k[0]].most_common(1)
    return f"{cpu}({n}/{sum(c[k[0]].values())})"
print(f"app={top('op_phases')} dispatch={top('vitamin-dispatc')} submit={top('vitamin-submit')}")
PY
)
            sed "s#^#$name $r [$cpus] #" "$W/res"
        )
    done
done
