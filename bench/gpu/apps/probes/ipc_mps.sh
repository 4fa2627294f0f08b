#!/usr/bin/env bash
# CUDA IPC between two processes (torch_ipc.py) under MPS, natively and under bind mode (one device
# call): which combination faults. Each case gets its own MPS control daemon (own pipe directory),
# each program its own process group, killed after it ends (a spawned child outlives an aborted
# parent and keeps MPS from quitting), and MPS's quit is bounded.
#   SHIM=.device/apps/libvitamin_cuda.so OUT=dir bash bench/gpu/apps/probes/ipc_mps.sh [CASE ...]
# Cases: native, native-mps, bind-mps, bind-mps-exclusive, bind, daemon-mps.
set -uo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
SHIM=$(readlink -f "${SHIM:?}"); VITAMIN=$(dirname "$SHIM")/vitamin; D=${OUT:?}; mkdir -p "$D"
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8 PYTHONHASHSEED=0
cases=("$@"); [ ${#cases[@]} -gt 0 ] || cases=(native native-mps bind-mps bind-mps-exclusive bind daemon-mps)
run() { # TAG ENV...: torch_ipc.py in its own process group, bounded, the group killed after
    local tag=$1; shift
    ( cd "$HERE" && exec env "$@" APP_OUT="$D/$tag.json" VITAMIN_CENSUS="$D/$tag.census.json" \
        setsid timeout -k 5 60 python3 torch_ipc.py ) > "$D/$tag.log" 2>&1 &
    local pid=$!; wait $pid; local rc=$?
    # setsid: the session and group id is the child's pid; zombies (dead already) are not counted
    local left; left=$(pgrep -g "$pid" 2>/dev/null | while read -r p; do ps -o stat= -p "$p"; done | grep -vc '^Z')
    pkill -KILL -g "$pid" 2>/dev/null
    echo "$tag rc=$rc leftover_processes=$left" | tee -a "$D/results.txt"
}
mps_start() { export CUDA_MPS_PIPE_DIRECTORY=$(mktemp -d /tmp/ipcmps.XXXX) CUDA_MPS_LOG_DIRECTORY=$D/mps-$1; mkdir -p "$CUDA_MPS_LOG_DIRECTORY"; nvidia-cuda-mps-control -d; }
mps_stop() {
    echo quit | timeout 20 nvidia-cuda-mps-control || { echo "MPS quit timed out: server killed" | tee -a "$D/results.txt"; pkill -KILL -f "nvidia-cuda-mps-(control|server)"; }
    sleep 1; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}
bind=(LD_PRELOAD=$SHIM VITAMIN_MODE=bind VITAMIN_POLICY=throughput VITAMIN_LOG=info)
for c in "${cases[@]}"; do
    case $c in
        native) run native X=1 ;;
        native-mps) mps_start "$c"; run native-mps X=1; mps_stop ;;
        bind) run bind "${bind[@]}" ;;
        bind-mps) mps_start "$c"; run bind-mps "${bind[@]}"; mps_stop ;;
        # every launch on the whole-device node (the primary context): Exclusive
        bind-mps-exclusive) mps_start "$c"; run bind-mps-exclusive "${bind[@]}" VITAMIN_POLICY=exclusive; mps_stop ;;
        daemon-mps) mps_start "$c"; sock=$(mktemp -d /tmp/ipcd.XXXX)/d.sock
            VITAMIN_LOG=info "$VITAMIN" daemon --socket "$sock" --policy throughput --mps check --detach \
                --pid-file "$D/daemon.pid" --log-file "$D/daemon.log" > "$D/daemon-start.txt" 2>&1
            run daemon-mps "${bind[@]}" VITAMIN_DAEMON="$sock"
            "$VITAMIN" daemon status --socket "$sock" > "$D/daemon-status.txt" 2>&1
            "$VITAMIN" daemon stop --socket "$sock" >> "$D/daemon-start.txt" 2>&1; mps_stop ;;
    esac
done
python3 - "$D" <<'PY' | tee -a "$D/results.txt"
import json, os, sys
d = sys.argv[1]
ref = ref_tag = None
for tag in ("native", "native-mps", "bind", "bind-mps", "bind-mps-exclusive", "daemon-mps"):
    p = f"{d}/{tag}.json"
    if not os.path.exists(p):
        print(tag, "no output"); continue
    r = json.load(open(p)).get("digests")
    if ref is None:
        ref, ref_tag = r, tag
    print(tag, "identical to" if r == ref else "DIFFERS from", ref_tag)
PY
