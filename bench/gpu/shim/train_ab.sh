#!/usr/bin/env bash
# The PyTorch training step (train_bench.py) natively and under bind mode in several shim
# configurations, in one device call: ROUNDS rounds, each running every configuration once in an
# order rotated by one per round (so no configuration always follows another), pinned to CPUs
# PIN_CPUS. Prints every run's median step time and, per configuration, the median over rounds
# and the excess over the same round's native run (per round and median).
# CONFIGS="native name:VAR=v,VAR=v ..." as in latency_check.sh (`native` runs without the shim;
# the pseudo-variable SHIM=path runs another build of the shim).
# Stage here: bash bench/gpu/shim/stage_overhead.sh; run there: bash .device/overhead/train_ab.sh
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/out}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/trainab.XXXXXX)
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
ROUNDS=${ROUNDS:-4}; PIN_CPUS=${PIN_CPUS:-4-7}
CONFIGS=${CONFIGS:-"native default"}
exec > >(tee -a "$OUT/train_ab.log") 2>&1
echo "=== training step A/B ($(date -u +%H:%M:%S)), $ROUNDS rounds, pinned to CPUs $PIN_CPUS: $CONFIGS"
cat "$HERE/COMMIT" 2>/dev/null
read -r -a cfgs <<< "$CONFIGS"
n=${#cfgs[@]}
for r in $(seq 1 "$ROUNDS"); do
    for i in $(seq 0 $((n - 1))); do
        cfg=${cfgs[$(((i + r) % n))]}
        name=${cfg%%:*}; vars=""; [[ $cfg == *:* ]] && vars=${cfg#*:}
        (
            shim="$HERE/libvitamin_cuda.so"
            IFS=','
            for kv in $vars; do
                case $kv in SHIM=*) shim=${kv#SHIM=} ;; ?*) export "$kv" ;; esac
            done
            unset IFS
            json="$W/train_${name}_$r.json"
            if [ "$name" = native ]; then
                timeout 120 taskset -c "$PIN_CPUS" python3 "$HERE/train_bench.py" "$json" > /dev/null
            else
                LD_PRELOAD="$shim" VITAMIN_MODE=bind VITAMIN_POLICY=${POLICY:-throughput} \
                    VITAMIN_CENSUS="$W/census_train_${name}_$r.json" \
                    timeout 120 taskset -c "$PIN_CPUS" python3 "$HERE/train_bench.py" "$json" > /dev/null
            fi
            echo "$name $r $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["median_step_ms"])' "$json" 2>/dev/null || echo failed)"
        )
    done
done
python3 - "$OUT/train_ab.log" <<'PY'
import collections, json, re, statistics, sys
runs = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    m = re.match(r"^(\S+) (\d+) ([0-9.]+)$", line.strip())
    if m:
        runs[m.group(1)][int(m.group(2))] = float(m.group(3))
nat = runs.get("native", {})
for name, v in runs.items():
    doc = {"runs": len(v), "median_step_ms": round(statistics.median(v.values()), 3)}
    if name != "native" and nat:
        paired = [100 * (v[r] - nat[r]) / nat[r] for r in sorted(v) if r in nat]
        if paired:
            doc["vs_native_pct_per_round"] = [round(x, 1) for x in paired]
            doc["vs_native_pct_median"] = round(statistics.median(paired), 2)
    print("summary", name, json.dumps(doc))
PY
tar czf "$OUT/train_ab_runs.tar.gz" -C "$W" $(cd "$W" && ls ./*.json 2>/dev/null) 2>/dev/null
echo "=== done ($(date -u +%H:%M:%S))"
