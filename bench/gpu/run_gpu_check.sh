#!/usr/bin/env bash
# The whole GPU check in one device call (see bench/gpu/build.sh): environment, `vitamin info`
# and `vitamin pool` on the real device, the CUDA conformance suite and GPU tests, the
# determinism suite (TRIALS, default 1000) with its %smid census and pool realization cost, and
# the submit benchmark. Logs and JSON go to $OUT (at most 8 files come back; 7 are written).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/vitamin-gpu-check}
TRIALS=${TRIALS:-1000}
mkdir -p "$OUT"

# NVRTC for vitamin's kernels: the CUDA toolkit's, else the one a Python wheel ships.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -e "$d/libnvrtc.so.13" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
if ! ldconfig -p | grep -q libnvrtc.so.13 && [[ "${LD_LIBRARY_PATH:-}" != *cuda* ]]; then
  lib=$(find /usr/local /usr/lib /opt $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null) \
        -name 'libnvrtc.so.13' 2>/dev/null | head -1)
  [ -n "$lib" ] && export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
fi

status=0
step() { # name timeout_s command...
  local name=$1 t=$2; shift 2
  echo "== $name ($(date -u +%H:%M:%S))"
  timeout "$t" "$@"; local rc=$?
  echo "== $name: exit $rc"
  [ $rc -eq 0 ] || status=1
}

{
  echo "commit $(cat "$HERE/COMMIT" 2>/dev/null)"
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  lscpu | grep 'Model name'; nproc
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  step "vitamin info" 30 "$HERE/vitamin" --backend cuda info
  step "vitamin info --json" 30 "$HERE/vitamin" --backend cuda info --json
  step "vitamin pool" 30 "$HERE/vitamin" --backend cuda pool
} > "$OUT/device.txt" 2>&1
cat "$OUT/device.txt" | head -40

# The graph %smid census (test graph_launch_census_stays_within_the_node) also writes its JSON here.
export VITAMIN_GRAPH_CENSUS_OUT="$OUT/graph_census.json"
step "cuda tests" 150 "$HERE/cuda_tests" --test-threads=1 --nocapture > "$OUT/tests.log" 2>&1
grep -E "^test |test result|panicked|SKIPPED" "$OUT/tests.log" | tail -30

step "determinism ($TRIALS trials)" 270 "$HERE/vitamin" --backend cuda determinism --trials "$TRIALS" \
  --json "$OUT/determinism.json" > "$OUT/determinism.txt" 2>&1
tail -30 "$OUT/determinism.txt"

export VITAMIN_BENCH_JSON="$OUT/bench.json"
step "submit benchmark" 90 "$HERE/submit_bench" --bench > "$OUT/bench.log" 2>&1
grep -E "^paired|^launch/|time:" "$OUT/bench.log"

echo "gpu check: $([ $status -eq 0 ] && echo ALL STEPS PASSED || echo SOME STEP FAILED)"
exit $status
