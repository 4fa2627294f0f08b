#!/usr/bin/env bash
# The outside-application suite, in one device call (bench/gpu/apps/README.md).
#
#   SHIM=path/libvitamin_cuda.so OUT=dir bash bench/gpu/apps/run_suite.sh [PROGRAM ...]
#
# Each program (default: every *.py here but common.py and summary.py) runs natively twice (its
# digests must repeat, else it is listed as nondeterministic and not compared), then under bind mode
# (LD_PRELOAD=$SHIM) with Chaos CHAOS times (seeds 1..) and Throughput THROUGHPUT times, each with a
# census. Runs go JOBS at a time; every process runs under `timeout`; nothing is started past
# BUDGET_S seconds of the call. summary.py writes summary.md/summary.json under $OUT.
# Knobs: CHAOS (3), THROUGHPUT (2), EXCLUSIVE (0), JOBS (4), BUDGET_S (540), RUN_TIMEOUT_S (240), WHEELS (a folder of
# wheels installed first, e.g. expecttest for the OpInfo sweep), EXTRA_ENV (added to bind runs).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
: "${SHIM:?SHIM=path to libvitamin_cuda.so}" "${OUT:?OUT=results folder}"
CHAOS=${CHAOS:-3}; THROUGHPUT=${THROUGHPUT:-2}; EXCLUSIVE=${EXCLUSIVE:-0}; JOBS=${JOBS:-4}
BUDGET_S=${BUDGET_S:-540}; RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-240}
SHIM=$(readlink -f "$SHIM")
start=$(date +%s)
runs=$OUT/runs; mkdir -p "$runs"
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8 PYTHONHASHSEED=0
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/vitamin-inductor}
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/vitamin-triton}
if [ -n "${WHEELS:-}" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/vitamin-site \
        "$WHEELS"/*.whl && export PYTHONPATH=/tmp/vitamin-site${PYTHONPATH:+:$PYTHONPATH}
fi
if [ $# -gt 0 ]; then progs=("$@"); else
    progs=(); for f in "$HERE"/*.py; do b=$(basename "$f" .py)
        case $b in common|summary|*_test) ;; *) progs+=("$b");; esac; done
fi
printf '%s\n' "${progs[@]}" > "$OUT/programs.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1 || true
cat "$(dirname "$SHIM")/COMMIT" > "$OUT/commit.txt" 2>/dev/null || true

# one run: NAME KIND(native|chaos|throughput) INDEX
one() {
    local prog=$1 kind=$2 i=$3 tag="$1.$2.$3" left
    left=$(( BUDGET_S - ($(date +%s) - start) ))
    if [ "$left" -lt 20 ]; then echo "skipped (budget)" > "$runs/$tag.skipped"; return; fi
    # A limit below RUN_TIMEOUT_S is what the call's budget has left: a run stopped there (exit
    # status 124) is reported as cut by the budget, not as a failure (summary.py).
    if [ "$left" -ge "$RUN_TIMEOUT_S" ]; then left=$RUN_TIMEOUT_S; else echo "$left" > "$runs/$tag.cut"; fi
    local t0; t0=$(date +%s.%N)
    (
        cd "$HERE" || exit 1
        export APP_OUT="$runs/$tag.json"
        if [ "$kind" != native ]; then
            export LD_PRELOAD=$SHIM VITAMIN_MODE=bind VITAMIN_POLICY=$kind VITAMIN_SEED=$i \
                VITAMIN_CENSUS="$runs/$tag.census.json" VITAMIN_LOG=${VITAMIN_LOG:-warn}
            [ -n "${EXTRA_ENV:-}" ] && export $EXTRA_ENV
        fi
        # The program's own pid names the main census; processes it starts (torch.multiprocessing,
        # a compiler) that use CUDA write theirs beside it as $tag.census.json.PID.
        exec timeout -k 5 "$left" sh -c 'export VITAMIN_CENSUS_PID=$$; exec python3 "$0"' "$prog.py"
    ) > "$runs/$tag.log" 2>&1
    echo $? > "$runs/$tag.rc"
    echo "$(date +%s.%N) $t0" | awk '{printf "%.1f\n", $1-$2}' > "$runs/$tag.wall"
    echo "$(date +%T) $tag rc=$(cat "$runs/$tag.rc") $(cat "$runs/$tag.wall")s"
}
export -f one; export HERE runs start BUDGET_S RUN_TIMEOUT_S SHIM

# native pairs first (warming the compile caches), then the bind runs, JOBS at a time
{
    for p in "${progs[@]}"; do echo "$p native 1"; done
    for p in "${progs[@]}"; do echo "$p native 2"; done
} | xargs -P "$JOBS" -L 1 bash -c 'one "$@"' _
{
    for i in $(seq 1 "$CHAOS"); do for p in "${progs[@]}"; do echo "$p chaos $i"; done; done
    for i in $(seq 1 "$THROUGHPUT"); do for p in "${progs[@]}"; do echo "$p throughput $i"; done; done
    for i in $(seq 1 "$EXCLUSIVE"); do for p in "${progs[@]}"; do echo "$p exclusive $i"; done; done
} | xargs -P "$JOBS" -L 1 bash -c 'one "$@"' _
python3 "$HERE/summary.py" "$OUT" | tee "$OUT/summary.txt"
