#!/usr/bin/env bash
# The determinism records on the H200, in one call of about 2-4 minutes (staged by stage.sh):
#   bash .device/det/run.sh
# 1. Suite record A (process 1): every kernel x dtype x seeds 1,2 x variants default, nocontract,
#    fastmath; 50 trials per case on random pool nodes with a co-runner.
# 2. Suite record B (process 2, another binding seed, 10 trials): the H200 against itself across
#    processes.
# 3. The CPU reference record (the simulated device), made here from the same binary.
# 4. The PyTorch program (torch_app.py) recorded natively twice and once under vitamin (bind mode,
#    Chaos policy).
# 5. vitamin compare: A vs B vs CPU (suite), the CPU reference made there vs the one committed from
#    the CI machine, and native vs native vs vitamin (application).
# Writes 4 files under $OUT: records.tar.gz (every record), reports.tar.gz (report.md/html, the
# histogram PNGs and compare JSON of both comparisons), summary.txt, log.txt.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/out}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/detrun.XXXXXX)
exec > >(tee -a "$OUT/log.txt") 2>&1
V="$HERE/vitamin"
chmod +x "$V"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export VITAMIN_COMMIT=$(cat "$HERE/COMMIT" 2>/dev/null)
export CUBLAS_WORKSPACE_CONFIG=:4096:8
export PYTHONUNBUFFERED=1
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }

step "environment (commit $VITAMIN_COMMIT)"
date -u
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'

step "suite record A: process 1, 50 trials per case, variants default,nocontract,fastmath"
timeout 150 "$V" --backend cuda determinism --record "$W/h200_a.json.gz" --trials 50 \
    --variants default,nocontract,fastmath > "$W/record_a.txt"; echo "exit $?"
tail -n 3 "$W/record_a.txt"
step "suite record B: process 2, binding seed 7, 10 trials per case"
timeout 90 "$V" --backend cuda determinism --record "$W/h200_b.json.gz" --trials 10 --seed 7 \
    --variants default,nocontract,fastmath > "$W/record_b.txt"; echo "exit $?"
tail -n 1 "$W/record_b.txt"
step "CPU reference record (simulated device, same binary)"
timeout 120 "$V" --sim determinism --record "$W/cpu.json.gz" --trials 2 > "$W/record_cpu.txt"; echo "exit $?"
tail -n 1 "$W/record_cpu.txt"

step "application: torch_app.py natively (twice) and under vitamin (bind mode, Chaos)"
timeout 60 python3 "$HERE/torch_app.py" "$W/app_native_1.json.gz"; echo "exit $?"
timeout 60 python3 "$HERE/torch_app.py" "$W/app_native_2.json.gz"; echo "exit $?"
timeout 90 "$V" run --policy chaos --lib-dir "$HERE" -- python3 "$HERE/torch_app.py" "$W/app_vitamin.json.gz"
echo "exit $?"

step "compare: suite (A = H200 process 1, B = H200 process 2, C = CPU reference)"
mkdir -p "$W/reports/suite" "$W/reports/app"
"$V" compare "$W/h200_a.json.gz" "$W/h200_b.json.gz" "$W/cpu.json.gz" --out "$W/reports/suite" \
    --json "$W/reports/suite/compare.json" > "$W/summary_suite.txt"
echo "compare exit $? (1 = some mismatch, expected across vendors)"
step "compare: CPU reference made here vs the one committed from the CI machine (host libm expf)"
if [ -f "$HERE/cpu_ci.json.gz" ]; then
    "$V" compare "$W/cpu.json.gz" "$HERE/cpu_ci.json.gz" > "$W/summary_cpu.txt"
    echo "compare exit $?"
    cat "$W/summary_cpu.txt"
fi
step "compare: application (A = native 1, B = native 2, C = under vitamin)"
"$V" compare "$W/app_native_1.json.gz" "$W/app_native_2.json.gz" "$W/app_vitamin.json.gz" \
    --out "$W/reports/app" --json "$W/reports/app/compare.json" > "$W/summary_app.txt"
echo "compare exit $?"

{
    echo "# determinism records on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(date -u +%FT%TZ), commit $VITAMIN_COMMIT"
    echo; echo "## suite"; cat "$W/summary_suite.txt"
    echo; echo "## suite record A (per case: variant, case, structure, digest, invariance)"; cat "$W/record_a.txt"
    echo; echo "## CPU reference: GPU machine vs CI machine"; cat "$W/summary_cpu.txt" 2>/dev/null
    echo; echo "## application"; cat "$W/summary_app.txt"
} > "$OUT/summary.txt"
tar czf "$OUT/records.tar.gz" -C "$W" $(cd "$W" && ls ./*.json.gz)
tar czf "$OUT/reports.tar.gz" -C "$W" reports record_a.txt record_b.txt record_cpu.txt
step "summary"
cat "$OUT/summary.txt" | head -80
ls -la "$OUT"
