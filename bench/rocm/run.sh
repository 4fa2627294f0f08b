#!/usr/bin/env bash
# The ROCm host run, staged by stage.sh (NEVER RUN: nobody here has an AMD GPU; docs/amd.md).
#   OUT=/some/dir bash rocm/run.sh        # default OUT: ./rocm-out next to this script
# (TRIALS: trials per determinism case, default 50; PYTHON: the interpreter with PyTorch-ROCm.)
# Steps (each under a timeout; a failing step is reported and the run goes on):
# 1. Environment: rocminfo / rocm-smi excerpts, PyTorch and its HIP version, the loaded runtime.
# 2. `vitamin --backend hip info` (text and JSON): expect "hip usable", the CU count, XCDs, leaves.
# 3. `vitamin --backend hip determinism --record`: the suite on random CU-masked pool nodes
#    (variants default, nocontract, fastmath), then `vitamin compare` of it with itself as a sanity
#    check of the record (and with the committed H200 / CPU records when COMPARE_WITH names them).
# 4. The conformance suite on the device (hip_tests with VITAMIN_HIP_CONFORMANCE=device), if staged.
# 5. The PyTorch-ROCm program (torch_app.py): natively twice, then under `vitamin --backend hip run`
#    in observe mode and in bind mode with the Chaos policy (two seeds), each with a census; then
#    `vitamin compare` of every output record: the interposed runs must match native bitwise.
# Everything goes into one tarball, $OUT/rocm-results.tar.gz, plus $OUT/summary.txt.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/../rocm-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
W="$OUT/rocm-results"
rm -rf "$W"
mkdir -p "$W/records" "$W/census" "$W/reports"
exec > >(tee "$W/log.txt") 2>&1
V="$HERE/vitamin"
chmod +x "$V" "$HERE/hip_tests" 2>/dev/null
export VITAMIN_COMMIT=$(cat "$HERE/COMMIT" 2>/dev/null)
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=/opt/rocm/lib:${LD_LIBRARY_PATH:-}
PY=${PYTHON:-python3}
TRIALS=${TRIALS:-50}
status=0
results=()
step() { # name timeout_s command... : runs, logs the exit code, remembers it for the summary
  local name=$1 t=$2; shift 2
  echo; echo "=== $name ($(date -u +%H:%M:%S))"
  timeout "$t" "$@"; local rc=$?
  echo "=== $name: exit $rc"
  results+=("$(printf '%-58s exit %s' "$name" "$rc")")
  [ $rc -eq 0 ] || status=1
  return $rc
}

echo "=== environment (commit $VITAMIN_COMMIT, $(date -u +%FT%TZ))"
uname -a
{ command -v rocminfo >/dev/null && rocminfo | grep -E 'Marketing Name|Name: +gfx|Compute Unit' | head -12; } || echo "no rocminfo"
{ command -v rocm-smi >/dev/null && rocm-smi --showproductname; } || echo "no rocm-smi"
ls -l /dev/kfd /dev/dri/renderD* 2>&1 | head -4
env | grep -E '^(ROC_GLOBAL_CU_MASK|HSA_CU_MASK|HIP_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES)=' || echo "no CU-mask / visibility variables set"
$PY -c 'import torch; print("torch", torch.__version__, "hip", torch.version.hip, "device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)' \
  || echo "no PyTorch-ROCm: step 5 will fail"

step "vitamin info" 60 "$V" --backend hip info > "$W/info.txt" 2>&1; cat "$W/info.txt"
step "vitamin info --json" 60 "$V" --backend hip info --json > "$W/info.json" 2> "$W/info.err"

step "determinism --record ($TRIALS trials, 3 variants)" 900 "$V" --backend hip determinism \
  --record "$W/records/rocm.json.gz" --trials "$TRIALS" --variants default,nocontract,fastmath > "$W/determinism.txt" 2>&1
tail -n 5 "$W/determinism.txt"
if [ -f "$W/records/rocm.json.gz" ]; then
  step "compare: the record with itself" 120 "$V" compare "$W/records/rocm.json.gz" "$W/records/rocm.json.gz" \
    > "$W/reports/self.txt" 2>&1
  others=()
  for f in ${COMPARE_WITH:-}; do [ -f "$f" ] && others+=("$f"); done
  if [ ${#others[@]} -gt 0 ]; then
    # Across vendors a mismatch is expected (exit 1): the report is the result.
    step "compare: ROCm vs ${others[*]}" 300 "$V" compare "$W/records/rocm.json.gz" "${others[@]}" \
      --out "$W/reports/cross" --json "$W/reports/cross.json" > "$W/reports/cross.txt" 2>&1
  fi
fi

if [ -x "$HERE/hip_tests" ]; then
  step "conformance suite on the device" 600 env VITAMIN_HIP_CONFORMANCE=device "$HERE/hip_tests" --test-threads=1 \
    > "$W/conformance.txt" 2>&1
  grep -E "^test |test result|SKIPPED|panicked" "$W/conformance.txt" | tail -40
else
  echo "=== conformance suite: hip_tests not staged, skipped"
fi

app() { step "$1" 300 "${@:2}"; }
app "torch_app: native 1" $PY "$HERE/torch_app.py" "$W/records/app_native_1.json.gz"
app "torch_app: native 2" $PY "$HERE/torch_app.py" "$W/records/app_native_2.json.gz"
app "torch_app: vitamin run --observe" "$V" --backend hip run --observe --lib-dir "$HERE" \
  --census "$W/census/observe.json" -- $PY "$HERE/torch_app.py" "$W/records/app_observe.json.gz"
app "torch_app: vitamin run --policy chaos (seed 1)" env VITAMIN_SEED=1 "$V" --backend hip run --policy chaos \
  --no-daemon --lib-dir "$HERE" --census "$W/census/chaos_1.json" -- $PY "$HERE/torch_app.py" "$W/records/app_chaos_1.json.gz"
app "torch_app: vitamin run --policy chaos (seed 2)" env VITAMIN_SEED=2 "$V" --backend hip run --policy chaos \
  --no-daemon --lib-dir "$HERE" --census "$W/census/chaos_2.json" -- $PY "$HERE/torch_app.py" "$W/records/app_chaos_2.json.gz"
apps=()
for f in app_native_1 app_native_2 app_observe app_chaos_1 app_chaos_2; do
  [ -f "$W/records/$f.json.gz" ] && apps+=("$W/records/$f.json.gz")
done
if [ ${#apps[@]} -ge 2 ]; then
  # Exit 0 only if every output digest agrees bitwise across the runs.
  step "compare: torch_app native vs observe vs chaos (bitwise)" 300 "$V" compare "${apps[@]}" \
    --out "$W/reports/app" --json "$W/reports/app.json" > "$W/reports/app.txt" 2>&1
  head -n 40 "$W/reports/app.txt"
fi
for c in "$W"/census/*.json; do
  [ -f "$c" ] && echo "census $(basename "$c"): $(head -c 400 "$c")"
done

{
  echo "# vitamin on a ROCm host, $(date -u +%FT%TZ), commit $VITAMIN_COMMIT"
  grep -m1 -iE 'hip' "$W/info.txt" || true
  printf '%s\n' "${results[@]}"
  echo "overall: $([ $status -eq 0 ] && echo ALL STEPS PASSED || echo SOME STEP FAILED)"
} > "$W/summary.txt"
cp "$W/summary.txt" "$OUT/summary.txt"
tar -C "$OUT" -czf "$OUT/rocm-results.tar.gz" rocm-results
cat "$OUT/summary.txt"
echo "results: $OUT/rocm-results.tar.gz"
exit $status
