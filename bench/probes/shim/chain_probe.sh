#!/usr/bin/env bash
# Why the bind-mode chain is slower than native, in one device call: chain_xthread.cu (the chain
# launched by the main thread vs handed to a consumer thread, on primary / green streams, beside
# spinning or querying helpers; no interposer), then chain_bench's chain natively and under bind
# mode with the op timeline trace, whose driver calls chain_issue.py times per thread.
# Stage here: bash bench/gpu/shim/stage_overhead.sh; run there: bash .device/overhead/chain_probe.sh
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/out}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/chainprobe.XXXXXX)
mkdir -p "$W/census"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
exec > >(tee -a "$OUT/chain_probe.log") 2>&1
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
step environment
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat "$HERE/COMMIT" 2>/dev/null
nvcc -O2 -arch=sm_90 "$HERE/chain_xthread.cu" -lcuda -o "$W/chain_xthread" || { echo "nvcc chain_xthread failed"; exit 1; }
nvcc -O2 -arch=sm_90 "$HERE/chain_bench.cu" -o "$W/chain_bench" || { echo "nvcc chain_bench failed"; exit 1; }
step "chain_xthread (no interposer): ${XROUNDS:=3} rounds"
[ "$XROUNDS" -gt 0 ] && timeout 180 "$W/chain_xthread" "$XROUNDS" 5 10000
step "chain_bench chain, native and traced bind runs: ${TROUNDS:=2} rounds"
for r in $(seq 1 "$TROUNDS"); do
    timeout 60 "$W/chain_bench" 10000 3 10 10 | sed "s/^/native $r /" | grep chain
    LD_PRELOAD="$HERE/libvitamin_cuda.so" VITAMIN_MODE=bind VITAMIN_TRACE="$W/trace_$r.csv" \
        timeout 60 "$W/chain_bench" 10000 3 10 10 | sed "s/^/bind_traced $r /" | grep chain
    python3 "$HERE/chain_issue.py" "$W/trace_$r.csv"
    [ -n "${KEEP_TRACE:-}" ] && gzip -c "$W/trace_$r.csv" > "$OUT/chain_trace_$r.csv.gz"
    # Untraced, with the dispatcher's per-phase times (the chain's ops are nearly all of the run's).
    LD_PRELOAD="$HERE/libvitamin_cuda.so" VITAMIN_MODE=bind VITAMIN_PROFILE_DISPATCH=1 \
        VITAMIN_CENSUS="$W/census/census_chain_$r.json" timeout 60 "$W/chain_bench" 10000 5 2 2 | sed "s/^/bind $r /" | grep chain
done
python3 "$HERE/census_phases.py" "$W/census"
step done
