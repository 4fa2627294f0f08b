#!/usr/bin/env bash
# Peak RSS of 10^7 launches without a sync, natively and under the shim in bind mode, and the
# driver's launch queue depth (issue 22, bounded memory), in one call on the GPU machine.
#
# Prepare here:   cargo build --release -p vitamin-shim-cuda
#                 bench/gpu/rss/stage.sh            # -> .device/rss (git-ignored)
# Run there:      bash .device/rss/run.sh           (the device tool, carry .device/rss)
#
# Writes $OUT/rss.json (one JSON object per run) and $OUT/log.txt (date, commit, GPU, each run's
# output, the table); prints a table last. About 3-5 minutes.
# LAUNCHES (default 10^7) sets the flood's size.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
export PATH=/usr/local/cuda/bin:$PATH
N=${LAUNCHES:-10000000}
W=$(mktemp -d /tmp/rss.XXXXXX)
date -u; cat "$HERE/COMMIT" 2>/dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
nvcc -O2 -arch=sm_90 -o "$W/rss_bench" "$HERE/rss_bench.cu" || { echo "nvcc failed"; exit 1; }
: > "$OUT/rss.json"
one() { # label, env..., -- args...
    local label=$1; shift
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    echo "=== $label $* ($(date -u +%H:%M:%S))"
    local line
    line=$(env "${envs[@]}" timeout 300 "$W/rss_bench" "$@" | tail -1)
    echo "$line"
    [ -n "$line" ] && echo "{\"run\": \"$label\", \"result\": $line}" >> "$OUT/rss.json"
}
SHIM=(LD_PRELOAD="$HERE/libvitamin_cuda.so" VITAMIN_MODE=bind VITAMIN_LOG=warn)
one depth-native X=1 -- depth 100000
one depth-shim "${SHIM[@]}" -- depth 100000
one flood-native X=1 -- flood "$N"
one flood-shim "${SHIM[@]}" -- flood "$N"
one flood-shim-chaos "${SHIM[@]}" VITAMIN_POLICY=chaos -- flood "$N"
# The bound lifted (10^8 ops): what the shim's memory would grow to without it.
one flood-shim-unbounded "${SHIM[@]}" VITAMIN_MAX_OUTSTANDING_OPS=100000000 -- flood "$N"
python3 - "$OUT/rss.json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"{'run':24} {'launches':>10} {'VmHWM MiB':>10} {'launch s':>9} {'total s':>8} {'queue depth':>12}")
for r in rows:
    x = r["result"]
    if x["what"] == "flood":
        print(f"{r['run']:24} {x['launches']:>10} {x['vmhwm_kb']/1024:>10.1f} {x['launch_s']:>9.2f} {x['total_s']:>8.2f} {'':>12}")
    else:
        print(f"{r['run']:24} {'':>10} {'':>10} {'':>9} {'':>8} {x['first_blocking_launch']:>12}")
PY
