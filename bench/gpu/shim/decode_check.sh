#!/usr/bin/env bash
# Decoding determinism check of issue 8 under the CUDA interposer's bind mode, in one device call.
#
# Prepare here (x86-64 builds run there):
#   cargo build --release -p vitamin-shim-cuda
#   D=/work/main/.device/decode; mkdir -p $D; cp target/release/libvitamin_cuda.so $D/
#   cp bench/gpu/shim/{decode_check.sh,decode_check.py} $D/
# Run there (the device tool, carry .device/decode):
#   bash .device/decode/decode_check.sh
#
# Steps (each process has a timeout and a deadline for starting repetitions, so the call ends
# inside its budget; the JSON says how many repetitions ran):
#   1. native reference: plain LM head, REPS_NATIVE repetitions with the background load; the
#      first repetition's logits and tokens are the reference.
#   2. bind mode, Chaos, seeds 1..4: REPS_BIND repetitions each, with the background load, every
#      repetition compared with the native reference (hashes of all logits and probabilities,
#      logit drift, token changes); each writes a census (which pool nodes its kernels ran on).
#   3. reshaping treatment, natively: REPS_RESHAPE repetitions, split-K products sized to a
#      simulated allocation per repetition, compared with the same reference; once with the LM
#      head only reshaped (scope lm_head), once with every linear layer reshaped too (scope all).
# Writes under $OUT: log.txt, summary.md, results.json, and runs.tar.gz (every JSON, census, stderr).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/out}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/decodecheck.XXXXXX)
exec > >(tee -a "$OUT/log.txt") 2>&1

SHIM="$HERE/libvitamin_cuda.so"
export PATH=/usr/local/cuda/bin:$PATH
export CUBLAS_WORKSPACE_CONFIG=:4096:8
export PYTHONUNBUFFERED=1
REPS_NATIVE=${REPS_NATIVE:-5}
REPS_BIND=${REPS_BIND:-25}
REPS_RESHAPE=${REPS_RESHAPE:-100}
SEEDS=${SEEDS:-"1 2 3 4"}
BIND_DEADLINE=${BIND_DEADLINE:-22}
BIND_TIMEOUT=${BIND_TIMEOUT:-60}
RESHAPE_DEADLINE=${RESHAPE_DEADLINE:-18}
# No new run starts after this many seconds of the script (a run in flight has its own timeout).
BUDGET_S=${BUDGET_S:-170}
# PYTHON and EXTRA (extra decode_check.py arguments) let the flow be tried without a GPU:
#   PYTHON=venv/bin/python EXTRA="--device cpu --tokens 8" REPS_BIND=2 SEEDS=1 bash decode_check.sh
PYTHON=${PYTHON:-python3}
PY="$PYTHON $HERE/decode_check.py ${EXTRA:-}"

step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }

step "environment"
date -u | tee "$W/date.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$W/gpu.txt"
lscpu | grep 'Model name' | tee "$W/cpu.txt"
nproc | tee "$W/nproc.txt"
$PYTHON -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' \
    | tee "$W/versions.txt"

step "native reference ($REPS_NATIVE reps, background load)"
timeout 60 $PY --mode plain --reps "$REPS_NATIVE" --deadline-s 30 --out "$W/native.json" --save-ref "$W/ref.pt" \
    2> "$W/native.err"
echo "native exit $?"; tail -3 "$W/native.err"

if [ -f "$W/ref.pt" ]; then
    for s in $SEEDS; do
        if [ $SECONDS -gt "$BUDGET_S" ]; then step "chaos seed $s skipped: over the ${BUDGET_S} s budget"; continue; fi
        step "bind mode, Chaos seed $s ($REPS_BIND reps, background load)"
        LD_PRELOAD="$SHIM" VITAMIN_MODE=bind VITAMIN_POLICY=chaos VITAMIN_SEED="$s" VITAMIN_LOG=warn \
            VITAMIN_CENSUS="$W/census_chaos_$s.json" timeout "$BIND_TIMEOUT" \
            $PY --mode plain --reps "$REPS_BIND" --deadline-s "$BIND_DEADLINE" --out "$W/chaos_$s.json" \
            --ref "$W/ref.pt" 2> "$W/chaos_$s.err" | tail -2
        echo "chaos seed $s exit ${PIPESTATUS[0]}"; tail -3 "$W/chaos_$s.err"
    done
    for scope in lm_head all; do
        if [ $SECONDS -gt "$BUDGET_S" ]; then step "reshape $scope skipped: over the ${BUDGET_S} s budget"; continue; fi
        step "reshaping treatment ($scope), native ($REPS_RESHAPE reps, background load)"
        timeout 60 $PY --mode reshape --scope "$scope" --reps "$REPS_RESHAPE" --deadline-s "$RESHAPE_DEADLINE" \
            --out "$W/reshape_$scope.json" --ref "$W/ref.pt" 2> "$W/reshape_$scope.err" | tail -2
        echo "reshape $scope exit ${PIPESTATUS[0]}"; tail -3 "$W/reshape_$scope.err"
    done
else
    step "no native reference: bind and reshape runs skipped"
fi

step "summary"
$PYTHON "$HERE/decode_check.py" summarize "$W" "$OUT"
(cd "$W" && tar czf "$OUT/runs.tar.gz" ./*.json ./*.err ./*.txt 2>/dev/null)
cat "$OUT/summary.md"
