#!/usr/bin/env bash
# Issue 8 overhead checks in one device call (bind mode vs native, the Throughput policy):
#   1. chain_bench (bench/gpu/shim/chain_bench.cu): 10,000 dependent tiny kernels (throughput),
#      one tiny kernel + sync (p50/p95), and a small operator of 8 compute kernels + sync (p50/p95,
#      like the paper's overhead experiment), ROUNDS rounds of: native; bind with the defaults
#      (lane continuation, the dispatcher thread submits); the same under the Exclusive policy
#      (every kernel on the whole device, as natively: the mechanism's own cost); bind with inline
#      submission from the application thread (KNOBS=inline=1, the [advanced] key); bind with strict readiness.
#      Every bind run writes a census with the dispatcher's per-phase times
#      (VITAMIN_PROFILE_DISPATCH=1).
#   2. launch_bench (app-thread cost per launch), native vs bind.
#   3. PyTorch training step (train_bench.py), PAIRS ABBA-ordered native/bind pairs pinned to CPUs 4-7.
# Stage here:
#   bash bench/gpu/shim/stage_overhead.sh            (builds the shim, copies into .device/overhead)
# Run there (device tool, carry .device/overhead):  bash .device/overhead/overhead_check.sh
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/out}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/overhead.XXXXXX)
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
N=${N:-10000}; REPS=${REPS:-5}; SMALL=${SMALL:-2000}; OPREPS=${OPREPS:-300}; ROUNDS=${ROUNDS:-3}; PAIRS=${PAIRS:-4}
SHIM="$HERE/libvitamin_cuda.so"
exec > >(tee -a "$OUT/overhead.log") 2>&1
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
bind() { # bind NAME -- cmd... (extra VITAMIN_* settings come from the caller's environment;
           # KNOBS="key=value,..." sets [advanced] keys of docs/config.md through a file of its own)
    local name=$1; shift 2
    local config=none
    if [ -n "${KNOBS:-}" ]; then
        config="$W/config_$name.toml"
        (echo "[advanced]"; IFS=","; for kv in $KNOBS; do echo "${kv%%=*} = \"${kv#*=}\""; done) > "$config"
    fi
    LD_PRELOAD="$SHIM" VITAMIN_CONFIG="$config" VITAMIN_MODE=bind VITAMIN_POLICY=${POLICY:-throughput} \
        VITAMIN_PROFILE_DISPATCH=1 VITAMIN_CENSUS="$W/census_$name.json" "$@"
}

step environment
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep 'Model name'; nproc
cat "$HERE/COMMIT" 2>/dev/null
nvcc -O2 -arch=sm_90 "$HERE/chain_bench.cu" -o "$W/chain_bench" || { echo "nvcc chain_bench failed"; exit 1; }
nvcc -O2 -arch=sm_90 "$HERE/launch_bench.cu" -lcuda -o "$W/launch_bench" || echo "nvcc launch_bench failed"
if [ -f "$HERE/green_chain.cu" ] && [ "${GREEN:-1}" = 1 ]; then
    step "green context vs primary context, no interposer (green_chain.cu)"
    nvcc -O2 -arch=sm_90 "$HERE/green_chain.cu" -lcuda -o "$W/green_chain" && timeout 120 "$W/green_chain" 2 "$N"
fi
CB=("$W/chain_bench" "$N" "$REPS" "$SMALL" "$OPREPS")

# Optional sweep of the tuning knobs (docs/config.md, [advanced]): SWEEP="name:key=v,key=v name2:..."
# runs chain_bench under bind mode once per configuration (after a native run), e.g.
# SWEEP="nobound:continuation_us=1000000 deep:continuation_us=1000000,continuation_depth=1024"
if [ -n "${SWEEP:-}" ]; then
    step "sweep"
    timeout 120 "${CB[@]}" | sed "s/^/native sweep /"
    for cfg in $SWEEP; do
        name=${cfg%%:*}; vars=${cfg#*:}
        KNOBS="$vars" bind "sweep_$name" -- timeout 120 "${CB[@]}" | sed "s/^/sweep_$name /"
    done
fi

for r in $(seq 1 "$ROUNDS"); do
    step "chain_bench round $r"
    timeout 120 "${CB[@]}" | sed "s/^/native $r /"
    bind "default_$r" -- timeout 120 "${CB[@]}" | sed "s/^/bind $r /"
    POLICY=exclusive bind "exclusive_$r" -- timeout 120 "${CB[@]}" | sed "s/^/bind_exclusive $r /"
    KNOBS=inline=1 bind "inline_$r" -- timeout 120 "${CB[@]}" | sed "s/^/bind_inline $r /"
    VITAMIN_LANE_CONTINUATION=0 bind "strict_$r" -- timeout 120 "${CB[@]}" | sed "s/^/bind_strict $r /"
done

step "chain and operator paired with each round's native run (overhead_paired.py)"
python3 "$HERE/overhead_paired.py" "$OUT/overhead.log"

if [ -x "$W/launch_bench" ]; then
    step "launch_bench (app-thread cost per launch)"
    timeout 60 "$W/launch_bench" | sed "s/^/native /"
    bind launch -- timeout 60 "$W/launch_bench" | sed "s/^/bind /"
fi

step "dispatcher phases per bind run (census)"
python3 "$HERE/census_phases.py" "$W"

if [ "$PAIRS" -gt 0 ] && [ -f "$HERE/train_bench.py" ]; then
    step "training step: $PAIRS ABBA pairs native/bind pinned to CPUs 4-7"
    PIN=(taskset -c 4-7)
    tr() {
        if [ "$1" = native ]; then timeout 120 "${PIN[@]}" python3 "$HERE/train_bench.py" "$W/train_$1_$2.json" > /dev/null
        else bind "train_$2" -- timeout 120 "${PIN[@]}" python3 "$HERE/train_bench.py" "$W/train_$1_$2.json" > /dev/null; fi
        echo "$1 $2 $(cat "$W/train_$1_$2.json" 2>/dev/null)"
    }
    for i in $(seq 1 "$PAIRS"); do
        if [ $((i % 2)) = 1 ]; then tr native "$i"; tr bind "$i"; else tr bind "$i"; tr native "$i"; fi
    done
    python3 - "$W" "$OUT" <<'PY'
import json, glob, os, statistics, sys
w, out = sys.argv[1], sys.argv[2]
runs = {m: [json.load(open(p))["median_step_ms"] for p in sorted(glob.glob(os.path.join(w, "train_" + m + "_*.json")))]
        for m in ("native", "bind")}
if runs["native"] and runs["bind"]:
    n, b = statistics.median(runs["native"]), statistics.median(runs["bind"])
    pairs = [100 * (y - x) / x for x, y in zip(runs["native"], runs["bind"])]
    doc = {"runs_ms": runs, "native_median_ms": n, "bind_median_ms": b, "overhead_pct": 100 * (b - n) / n,
           "pairwise_overhead_pct": pairs, "pairwise_median_pct": statistics.median(pairs)}
    json.dump(doc, open(os.path.join(out, "train_pairs.json"), "w"), indent=1)
    print(json.dumps(doc))
else:
    print("training runs missing:", runs)
PY
fi
if [ -x "$HERE/gpu_tests" ] && [ -n "${GPU_TESTS_ARGS:-}" ]; then
    step "GPU tests: $GPU_TESTS_ARGS"
    # shellcheck disable=SC2086
    timeout 120 "$HERE/gpu_tests" $GPU_TESTS_ARGS 2>&1 | tail -30
fi
if [ -f "$HERE/torch_check.py" ] && [ -n "${TORCH_SEEDS:-}" ]; then
    step "PyTorch script under Chaos (seeds $TORCH_SEEDS) vs native"
    export CUBLAS_WORKSPACE_CONFIG=:4096:8
    same() { python3 -c 'import json,sys; a,b=(json.load(open(p))["results"] for p in sys.argv[1:]); print("yes" if a==b else "NO")' "$@"; }
    timeout 120 python3 "$HERE/torch_check.py" "$W/torch_native.json" "$W/torch_native_trace.json" > /dev/null 2> "$W/torch_native.err"
    echo "native exit $?"
    for seed in $TORCH_SEEDS; do
        POLICY=chaos VITAMIN_SEED=$seed bind "torch_$seed" -- timeout 120 python3 "$HERE/torch_check.py" "$W/torch_$seed.json" \
            "$W/torch_${seed}_trace.json" > /dev/null 2> "$W/torch_$seed.err"
        echo "chaos seed $seed exit $? results identical to native: $(same "$W/torch_native.json" "$W/torch_$seed.json")"
        python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); b=d.get("bind",d); print(" census:", json.dumps({k: v for k, v in (b.get("counters") or {}).items() if "graph" in k}))' \
            "$W/census_torch_$seed.json" 2>/dev/null || true
    done
    rm -f "$W"/torch_*_trace.json "$W"/torch_native_trace.json
fi
tar czf "$OUT/overhead_runs.tar.gz" -C "$W" . 2>/dev/null
step done
