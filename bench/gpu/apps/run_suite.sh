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
# DAEMON=N adds N passes in which every program is a client of one `vitamin daemon` (the `vitamin`
# beside SHIM, or VITAMIN) under DAEMON_POLICY (chaos, seed 1): JOBS programs at once share the GPU
# through it, under an MPS control daemon this script starts with its own pipe directory
# (DAEMON_MPS=0: without MPS, time-sliced). The daemon's log and last status land in $OUT/daemon/.
# Processes a program leaves behind when it ends are listed in runs/TAG.left and killed.
# Knobs: CHAOS (3), THROUGHPUT (2), EXCLUSIVE (0), DAEMON (0), JOBS (4), BUDGET_S (540), RUN_TIMEOUT_S (240), WHEELS (a folder of
# wheels installed first, e.g. expecttest for the OpInfo sweep), EXTRA_ENV (added to bind runs), MPS_QUIT_S (30).
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
    local t0 pid rc left_behind; t0=$(date +%s.%N)
    # Each program runs in a session of its own, so what it leaves behind when it ends (a spawned
    # child of an aborted parent still holding its CUDA context, which keeps MPS from quitting) is
    # found and killed afterwards. This subshell leads no process group, so setsid does not fork
    # and the session's id is its pid (-w keeps the exit status were it ever to fork).
    (
        cd "$HERE" || exit 1
        export APP_OUT="$runs/$tag.json"
        if [ "$kind" != native ]; then
            local policy=$kind
            # a daemon client's own policy only serves if its daemon goes away
            [ "$kind" = daemon ] && { policy=throughput; export VITAMIN_DAEMON=$DAEMON_SOCK; }
            export LD_PRELOAD=$SHIM VITAMIN_MODE=bind VITAMIN_POLICY=$policy VITAMIN_SEED=$i \
                VITAMIN_CENSUS="$runs/$tag.census.json" VITAMIN_LOG=${VITAMIN_LOG:-warn}
            [ -n "${EXTRA_ENV:-}" ] && export $EXTRA_ENV
        fi
        # The program's own pid names the main census; processes it starts (torch.multiprocessing,
        # a compiler) that use CUDA write theirs beside it as $tag.census.json.PID.
        exec setsid -w timeout -k 5 "$left" sh -c 'export VITAMIN_CENSUS_PID=$$; exec python3 "$0"' "$prog.py"
    ) > "$runs/$tag.log" 2>&1 &
    pid=$!; wait "$pid"; rc=$?
    echo "$rc" > "$runs/$tag.rc"
    # Zombies are left out: dead already, they hold no CUDA context (a spawned child's exited
    # helper stays one when its parent is gone and nothing reaps it).
    left_behind=$(pgrep -s "$pid" | while read -r p; do
        case $(ps -o stat= -p "$p" 2>/dev/null) in Z*|"") ;; *) echo "$p $(ps -o args= -p "$p")" ;; esac
    done)
    if [ -n "$left_behind" ]; then
        echo "$left_behind" > "$runs/$tag.left"
        pkill -KILL -s "$pid"
    fi
    echo "$(date +%s.%N) $t0" | awk '{printf "%.1f\n", $1-$2}' > "$runs/$tag.wall"
    echo "$(date +%T) $tag rc=$(cat "$runs/$tag.rc") $(cat "$runs/$tag.wall")s"
}
export -f one; export HERE runs start BUDGET_S RUN_TIMEOUT_S SHIM

# native pairs first (warming the compile caches), then the bind runs, JOBS at a time
{
    for p in "${progs[@]}"; do echo "$p native 1"; done
    for p in "${progs[@]}"; do echo "$p native 2"; done
} | xargs -r -P "$JOBS" -L 1 bash -c 'one "$@"' _
{
    for i in $(seq 1 "$CHAOS"); do for p in "${progs[@]}"; do echo "$p chaos $i"; done; done
    for i in $(seq 1 "$THROUGHPUT"); do for p in "${progs[@]}"; do echo "$p throughput $i"; done; done
    for i in $(seq 1 "$EXCLUSIVE"); do for p in "${progs[@]}"; do echo "$p exclusive $i"; done; done
} | xargs -r -P "$JOBS" -L 1 bash -c 'one "$@"' _
if [ "${DAEMON:-0}" -gt 0 ]; then
    dd=$OUT/daemon; mkdir -p "$dd"
    VITAMIN=$(readlink -f "${VITAMIN:-$(dirname "$SHIM")/vitamin}")
    sockdir=$(mktemp -d /tmp/vitamin-apps.XXXXXX)  # short socket paths (sun_path holds 108 bytes)
    export DAEMON_SOCK=$sockdir/daemon.sock
    mps=0
    if [ "${DAEMON_MPS:-1}" = 1 ]; then
        export CUDA_MPS_PIPE_DIRECTORY=$sockdir/mps-pipe CUDA_MPS_LOG_DIRECTORY=$dd/mps-log
        mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
        if nvidia-cuda-mps-control -d; then mps=1; else echo "MPS control daemon did not start: time-sliced" | tee -a "$dd/notes.txt"; fi
    fi
    if VITAMIN_LOG=info "$VITAMIN" daemon --socket "$DAEMON_SOCK" --policy "${DAEMON_POLICY:-chaos}" --seed 1 \
            --mps check --detach --pid-file "$dd/daemon.pid" --log-file "$dd/daemon.log" > "$dd/start.txt" 2>&1; then
        for i in $(seq 1 "$DAEMON"); do for p in "${progs[@]}"; do echo "$p daemon $i"; done; done |
            xargs -r -P "$JOBS" -L 1 bash -c 'one "$@"' _
        "$VITAMIN" daemon status --socket "$DAEMON_SOCK" > "$dd/status.txt" 2>&1
        "$VITAMIN" daemon stop --socket "$DAEMON_SOCK" >> "$dd/start.txt" 2>&1
    else
        echo "vitamin daemon did not start (daemon/start.txt): no daemon runs" | tee "$dd/failed.txt"
    fi
    # MPS's quit waits for its clients; one that never detaches must not hold the call
    if [ "$mps" = 1 ] && ! echo quit | timeout "${MPS_QUIT_S:-30}" nvidia-cuda-mps-control; then
        echo "MPS control daemon did not quit within ${MPS_QUIT_S:-30} s: its processes killed" | tee -a "$dd/notes.txt"
        pkill -KILL -f "nvidia-cuda-mps-(control|server)"  # -f: the names pass comm's 15 characters
    fi
fi
python3 "$HERE/summary.py" "$OUT" | tee "$OUT/summary.txt"
