#!/usr/bin/env bash
# One scenario group (or one part of it) in one device call: bench/eval/README.md.
#   OUT=$OUT bash .device/eval/run_group.sh GROUP[:PART] [harness options, e.g. --rounds 3]
# GROUP is a name under groups/ (colo-gpt-resnet, mixed-resnet50, serving, overhead, determinism, ...)
# or a path to a group file. Staged by stage.sh (vitamin, libvitamin_cuda.so, the scripts, the trace,
# chain_bench.cu); EVAL_VITAMIN overrides the vitamin binary, EVAL_VITAMIN_REF names the reference
# build the *_ref configurations run (another stage.sh output, e.g. .device/eval-ref). Writes at most 7 files to $OUT:
# summary.md, results.json (every run's raw record), log.txt, env.txt, plots.tgz (PNG), runs.tgz
# (each tenant's result, stdout and stderr, daemon logs and status, per-round files), timelines.tar
# (the daemon's compressed binding timelines, for the group's timeline_configs).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/out}
spec=${1:?usage: run_group.sh GROUP[:PART] [harness options]}
shift
group=${spec%%:*}
part=
[[ $spec == *:* ]] && part=${spec#*:}
case $group in
    */*|*.json) gfile=$group ;;
    *) gfile=$HERE/groups/$group.json ;;
esac
[ -f "$gfile" ] || { echo "run_group.sh: no group file $gfile (groups: $(cd "$HERE/groups" && ls | sed 's/.json$//' | grep -v tenants | tr '\n' ' '))" >&2; exit 2; }
mkdir -p "$OUT"
W=$(mktemp -d /tmp/eval-run.XXXXXX)
R=$W/res
mkdir -p "$R"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
export EVAL_VITAMIN=${EVAL_VITAMIN:-$HERE/vitamin}
[ -f "$EVAL_VITAMIN" ] && chmod +x "$EVAL_VITAMIN" 2> /dev/null
[ -f "${EVAL_VITAMIN_REF:-}" ] && chmod +x "$EVAL_VITAMIN_REF" 2> /dev/null

{
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S') UTC"
    echo "group: $spec ($gfile) args: $*"
    echo "commit: $(cat "$HERE/COMMIT" 2> /dev/null || git -C "$HERE" rev-parse HEAD 2> /dev/null || echo unknown)"
    [ -n "${EVAL_VITAMIN_REF:-}" ] && echo "reference build: $EVAL_VITAMIN_REF, $(cat "$(dirname "$EVAL_VITAMIN_REF")/COMMIT" 2> /dev/null | head -1 || echo unknown)"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 | head -3
    nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv 2>&1 | head -5
    echo "cpu: $(lscpu 2> /dev/null | grep 'Model name' | sed 's/.*: *//') x $(nproc)"
    python3 - << 'PY' 2>&1
import importlib
for m in ("torch", "torchvision", "transformers", "peft", "matplotlib"):
    try:
        print(m, importlib.import_module(m).__version__)
    except Exception as e:
        print(m, "not importable:", type(e).__name__)
PY
} > "$OUT/env.txt"

# The overhead group's operator tenant runs chain_bench (bench/gpu/shim/chain_bench.cu).
if grep -q op_latency "$gfile" "$(dirname "$gfile")/tenants.json" 2> /dev/null && [ -f "$HERE/chain_bench.cu" ]; then
    if nvcc -O2 -arch=sm_90 "$HERE/chain_bench.cu" -o "$W/chain_bench" >> "$OUT/env.txt" 2>&1; then
        export EVAL_CHAIN_BENCH=$W/chain_bench
    else
        echo "nvcc chain_bench failed: the operator tenant will fail" >> "$OUT/env.txt"
    fi
fi

python3 "$HERE/harness.py" "$gfile" --out "$R" ${part:+--part "$part"} "$@"
rc=$?
if [ -f "$R/results.json" ] || ls "$R/rounds"/round-*.json > /dev/null 2>&1; then
    python3 "$HERE/summary.py" "$R" --plots "$R/plots" > "$OUT/summary.md" 2>&1
    cat "$OUT/summary.md"
fi
[ -f "$R/results.json" ] && cp "$R/results.json" "$OUT/"
[ -f "$R/log.txt" ] && cp "$R/log.txt" "$OUT/"
if ls "$R/plots"/*.png > /dev/null 2>&1; then tar czf "$OUT/plots.tgz" -C "$R" plots; fi
tar czf "$OUT/runs.tgz" -C "$R" --exclude='*-timeline.json.gz' $(cd "$R" && ls -d runs rounds 2> /dev/null) 2> /dev/null
# The daemon's binding timelines (group key timeline_configs), compressed already: a file of their own.
if ls "$R"/runs/*-timeline.json.gz > /dev/null 2>&1; then
    tar cf "$OUT/timelines.tar" -C "$R" $(cd "$R" && ls runs/*-timeline.json.gz)
fi
rm -rf "$W"
exit $rc
