#!/usr/bin/env bash
# GPU check of the CUDA interposer's bind mode (issue 8, first slice), in one call on the GPU machine.
#
# Prepare here (x86-64 builds run there):
#   cargo build --release -p vitamin-shim-cuda
#   D=/work/main/.device/shim-bind; mkdir -p $D; cp target/release/libvitamin_cuda.so $D/
#   cp bench/gpu/shim/{bind_check.sh,bind_summary.py,runtime_app.cu,launch_bench.cu,torch_check.py} $D/
# Run there (the device tool, carry .device/shim-bind):
#   bash .device/shim-bind/bind_check.sh
#
# Steps: build the CUDA C++ programs with nvcc; run the runtime-API program natively and under
# bind mode (Chaos with three seeds, Throughput) and compare stdout byte for byte; the per-launch
# issue cost natively and under bind mode; then, only if the C++ program matched, the PyTorch script
# natively and under bind mode (Chaos, Throughput) with its output hashes compared. Every bind run
# writes a census (which pool nodes its kernels landed on). Each run has a timeout, so a hang is
# reported, not waited for. Writes logs under $OUT and prints a summary table last.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/out}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/bindcheck.XXXXXX)
exec > >(tee -a "$OUT/log.txt") 2>&1

SHIM="$HERE/libvitamin_cuda.so"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export CUBLAS_WORKSPACE_CONFIG=:4096:8
export PYTHONUNBUFFERED=1

step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
# bind NAME POLICY SEED TIMEOUT -- cmd...: one bind-mode run, census and stderr under $W.
bind() {
    local name=$1 policy=$2 seed=$3 limit=$4; shift 5
    LD_PRELOAD="$SHIM" VITAMIN_MODE=bind VITAMIN_POLICY="$policy" VITAMIN_SEED="$seed" VITAMIN_LOG=warn \
        VITAMIN_CENSUS="$W/census_$name.json" timeout "$limit" "$@" 2> "$W/$name.err"
    local rc=$?
    # To stderr: the caller redirects stdout (the program's output) to a file.
    echo "$name exit $rc" >&2
    tail -5 "$W/$name.err" >&2
    return $rc
}

step "environment"
date -u | tee "$W/date.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$W/gpu.txt"
lscpu | grep 'Model name' | tee "$W/cpu.txt"
nproc | tee "$W/nproc.txt"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'

step "build CUDA C++ programs (nvcc -O2 -arch=sm_90, static cudart, -lcuda)"
nvcc -O2 -arch=sm_90 -o "$W/runtime_app" "$HERE/runtime_app.cu" -lcuda || echo "BUILD FAILED runtime_app"
nvcc -O2 -arch=sm_90 -o "$W/launch_bench" "$HERE/launch_bench.cu" -lcuda || echo "BUILD FAILED launch_bench"

step "runtime-API C++ program: native vs bind (chaos seeds 1-3, throughput)"
timeout 60 "$W/runtime_app" > "$W/rt_native.out"; echo "native exit $?"
cat "$W/rt_native.out"
rt_ok=1
for run in chaos:1 chaos:2 chaos:3 throughput:0; do
    policy=${run%%:*}; seed=${run##*:}; name="rt_${policy}_$seed"
    bind "$name" "$policy" "$seed" 90 -- "$W/runtime_app" > "$W/$name.out"
    if cmp -s "$W/rt_native.out" "$W/$name.out"; then echo "$name: OUTPUT IDENTICAL"; else
        echo "$name: OUTPUT DIFFERS"; diff "$W/rt_native.out" "$W/$name.out" | head -20; rt_ok=0; fi
done

step "per-launch issue cost: native vs bind (chaos), interleaved x3"
for i in 1 2 3; do
    timeout 60 "$W/launch_bench" | sed 's/^/native /' | tee -a "$W/launch.txt"
    bind "launch_$i" chaos 1 90 -- "$W/launch_bench" | sed 's/^/bind /' | tee -a "$W/launch.txt"
done

if [ "$rt_ok" = 1 ]; then
    step "PyTorch script: native vs bind (chaos seed 1, throughput)"
    timeout 60 python3 "$HERE/torch_check.py" "$W/torch_native.json" "$W/trace_native.json"; echo "native exit $?"
    bind torch_chaos_1 chaos 1 75 -- python3 "$HERE/torch_check.py" "$W/torch_chaos_1.json" "$W/trace_chaos.json"
    bind torch_throughput_0 throughput 0 60 -- python3 "$HERE/torch_check.py" "$W/torch_throughput_0.json" \
        "$W/trace_tp.json"
else
    step "PyTorch script: skipped (the C++ program's output differed under bind mode)"
fi

step "summary"
python3 "$HERE/bind_summary.py" "$W" "$OUT"
# At most 8 files come back: the censuses and stderr logs travel as one archive.
(cd "$W" && tar czf "$OUT/censuses.tar.gz" census_*.json ./*.err ./*.out torch_*.json 2>/dev/null)
cat "$OUT/summary.md"
