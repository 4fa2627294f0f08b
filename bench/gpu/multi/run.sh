#!/usr/bin/env bash
# Data-parallel jobs on a 2-GPU host (README.md here), one device call. Staged by stage.sh into
# .device/multi (vitamin, libvitamin_cuda.so, job.py, ddp_gpt.py, this script).
#   PART=digest OUT=$OUT bash run.sh      torchrun --nproc-per-node 2 natively twice, then under
#                                         `vitamin run` with Chaos (seeds 1, 2): digests compared
#   PART=pair OUT=$OUT bash run.sh        two such jobs at once: time slicing, MPS, and through one
#                                         `vitamin daemon` (Throughput, MPS underneath); each job alone
#                                         first; ROUNDS rounds, SECONDS_ per window
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/out}; PART=${PART:-digest}; ROUNDS=${ROUNDS:-2}; SECS=${SECONDS_:-12}
mkdir -p "$OUT/runs"; V="$HERE/vitamin"; chmod +x "$V"
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/log.txt"; }
nvidia-smi --query-gpu=index,name,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
n=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$n" -lt 2 ]; then log "SKIPPED: $n GPU(s); this check needs 2"; exit 0; fi
port=29500
tr() { # WRAP TAG ARGS...: one torchrun job (2 ranks); WRAP native | chaos:SEED | daemon
    local wrap=$1 tag=$2; shift 2; port=$((port + 1))
    local cmd=(torchrun --nproc-per-node 2 --master-port "$port" "$HERE/ddp_gpt.py" "$@")
    case $wrap in
        native) timeout 300 "${cmd[@]}" ;;
        chaos:*) VITAMIN_SEED=${wrap#chaos:} VITAMIN_CENSUS="$OUT/runs/$tag.census.%p.json" \
                 timeout 300 "$V" run --no-daemon --policy chaos -- "${cmd[@]}" ;;
        daemon) timeout 300 "$V" run --daemon "$SOCK" -- "${cmd[@]}" ;;
    esac > "$OUT/runs/$tag.log" 2>&1
    local rc=$?; [ $rc = 0 ] || log "$tag exit $rc: $(tail -c 300 "$OUT/runs/$tag.log" | tr '\n' ' ')"
}
if [ "$PART" = digest ]; then
    for w in native native chaos:1 chaos:2; do
        tag="digest-${w/:/}-$RANDOM"; tr "$w" "$tag" digest "$OUT/runs/$tag.json" --steps 10
        log "$tag $(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['digest'][:16])" "$OUT/runs/$tag.json" 2>/dev/null)"
    done
    exit 0
fi
MPSDIR=$(mktemp -d /tmp/multi-mps.XXXXXX); mkdir -p "$MPSDIR/pipe" "$MPSDIR/log"
export CUDA_MPS_PIPE_DIRECTORY=$MPSDIR/pipe CUDA_MPS_LOG_DIRECTORY=$MPSDIR/log
SOCK=$MPSDIR/daemon.sock
pair() { # WRAP TAG
    local b; b=$(mktemp -d /tmp/multi-bar.XXXXXX)
    tr "$1" "$2-a" throughput "$OUT/runs/$2-a.json" --seconds "$SECS" --barrier "$b" --peers 2 &
    tr "$1" "$2-b" throughput "$OUT/runs/$2-b.json" --seconds "$SECS" --barrier "$b" --peers 2 &
    wait; rm -rf "$b"; log "pair $2 done"
}
for R in $(seq 1 "$ROUNDS"); do
    tr native "alone-$R" throughput "$OUT/runs/alone-$R.json" --seconds "$SECS"
    pair native "timeslice-$R"
    nvidia-cuda-mps-control -d && sleep 1
    pair native "mps-$R"
    VITAMIN_LOG=info "$V" daemon --socket "$SOCK" --policy throughput --mps check --detach \
        --pid-file "$MPSDIR/d.pid" --log-file "$OUT/runs/daemon-$R.log" >> "$OUT/log.txt" 2>&1
    pair daemon "vitamin-$R"
    "$V" daemon status --socket "$SOCK" --json > "$OUT/runs/status-$R.json" 2>&1
    "$V" daemon stop --socket "$SOCK" >> "$OUT/log.txt" 2>&1; sleep 0.5
    echo quit | nvidia-cuda-mps-control >/dev/null 2>&1; sleep 1
done
python3 - "$OUT" <<'PY'
import glob, json, os, statistics, sys
out = sys.argv[1]
def sps(p):
    try: return json.load(open(p))["steps_per_s"]
    except Exception: return None
alone = [v for v in map(sps, glob.glob(f"{out}/runs/alone-*.json")) if v]
rows = []
for sysname in ["timeslice", "mps", "vitamin"]:
    agg = []
    for a in glob.glob(f"{out}/runs/{sysname}-*-a.json"):
        b = a[:-7] + "-b.json"
        va, vb = sps(a), sps(b)
        if va and vb and alone:
            agg.append((va + vb) / statistics.median(alone))
    rows.append({"system": sysname, "aggregate_normalized": agg,
                 "median": statistics.median(agg) if agg else None})
json.dump({"alone_steps_per_s": alone, "rows": rows}, open(f"{out}/summary.json", "w"), indent=1)
for r in rows: print(r["system"], r["median"], r["aggregate_normalized"])
PY
