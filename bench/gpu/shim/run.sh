#!/usr/bin/env bash
# GPU check of the CUDA interposer in observe mode (issue 7), in one call on the GPU machine.
#
# Prepare here (x86-64 builds run there):
#   cargo build --release -p vitamin -p vitamin-shim-cuda
#   cargo build --release -p vitamin-shim-cuda --example cudarc_app
#   bench/gpu/shim/stage.sh /work/main/.device/shim     # copies binaries + these scripts
# Run there (the device tool, carry .device/shim):
#   bash .device/shim/run.sh
#
# Steps: build the CUDA C++ programs with nvcc; run each application natively and under
# `vitamin run --observe` and compare their outputs byte for byte (runtime-API C++ program,
# cudarc driver-API program, PyTorch script with cuBLAS/cuDNN/Triton/events/.item()/graphs/
# allocator churn); compare the shim's kernel-launch census with the torch profiler's kernel
# count for the same run; check invalid launches return the same error; measure the per-launch
# cost (native / observe / passthrough, interleaved x5) and a training step (native / observe,
# interleaved x3). Writes everything under $OUT and prints a summary table last.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/out}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/shimcheck.XXXXXX)
exec > >(tee -a "$OUT/log.txt") 2>&1

VITAMIN="$HERE/vitamin"
SHIM="$HERE/libvitamin_cuda.so"
chmod +x "$VITAMIN" "$HERE/cudarc_app" 2>/dev/null
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export CUBLAS_WORKSPACE_CONFIG=:4096:8
export PYTHONUNBUFFERED=1
T=(timeout 60)
TPY=(timeout 150)

step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
observe() { # observe CENSUS -- cmd...
    local census=$1; shift; shift
    timeout "${OBS_TIMEOUT:-60}" "$VITAMIN" run --observe --census "$census" -- "$@"
}

step "environment"
date -u | tee "$W/date.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$W/gpu.txt"
lscpu | grep 'Model name' | tee "$W/cpu.txt"
nproc | tee "$W/nproc.txt"
nvcc --version | tail -2
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
ldd --version | head -1

step "build CUDA C++ programs (nvcc -O2 -arch=sm_90, static cudart, -lcuda)"
nvcc -O2 -arch=sm_90 -o "$W/runtime_app" "$HERE/runtime_app.cu" -lcuda || echo "BUILD FAILED runtime_app"
nvcc -O2 -arch=sm_90 -o "$W/launch_bench" "$HERE/launch_bench.cu" -lcuda || echo "BUILD FAILED launch_bench"

step "runtime-API C++ program: native vs observe"
"${T[@]}" "$W/runtime_app" > "$W/rt_native.out"; echo "native exit $?"
observe "$W/census_runtime_app.json" -- "$W/runtime_app" > "$W/rt_shim.out"; echo "observe exit $?"
cat "$W/rt_native.out"
cmp -s "$W/rt_native.out" "$W/rt_shim.out" && echo "runtime_app: OUTPUT IDENTICAL" || { echo "runtime_app: OUTPUT DIFFERS"; diff "$W/rt_native.out" "$W/rt_shim.out"; }

step "cudarc driver-API program: native vs observe"
"${T[@]}" "$HERE/cudarc_app" > "$W/cudarc_native.out"; echo "native exit $?"
observe "$W/census_cudarc.json" -- "$HERE/cudarc_app" > "$W/cudarc_shim.out"; echo "observe exit $?"
cat "$W/cudarc_native.out"
cmp -s "$W/cudarc_native.out" "$W/cudarc_shim.out" && echo "cudarc_app: OUTPUT IDENTICAL" || { echo "cudarc_app: OUTPUT DIFFERS"; diff "$W/cudarc_native.out" "$W/cudarc_shim.out"; }

step "PyTorch script: native vs observe (each inside torch.profiler)"
"${TPY[@]}" python3 "$HERE/torch_check.py" "$W/torch_native.json" "$W/trace_native.json"; echo "native exit $?"
OBS_TIMEOUT=150 observe "$W/census_torch.json" -- python3 "$HERE/torch_check.py" "$W/torch_shim.json" "$W/trace_shim.json"; echo "observe exit $?"
ls "$W"/census_torch.json* 2>/dev/null

step "per-launch cost: native / observe / passthrough, interleaved x5"
for i in 1 2 3 4 5; do
    "${T[@]}" "$W/launch_bench" | sed 's/^/native /' | tee -a "$W/launch.txt"
    "${T[@]}" "$VITAMIN" run --observe -- "$W/launch_bench" | sed 's/^/observe /' | tee -a "$W/launch.txt"
    LD_PRELOAD="$SHIM" VITAMIN_MODE=passthrough "${T[@]}" "$W/launch_bench" | sed 's/^/passthrough /' | tee -a "$W/launch.txt"
done

step "training step: native / observe, interleaved x3"
for i in 1 2 3; do
    timeout 90 python3 "$HERE/train_bench.py" "$W/train_native_$i.json" > /dev/null && echo "native $(cat "$W/train_native_$i.json")"
    OBS_TIMEOUT=90 observe "$W/census_train_$i.json" -- python3 "$HERE/train_bench.py" "$W/train_shim_$i.json" > /dev/null \
        && echo "observe $(cat "$W/train_shim_$i.json")"
done

step "summary"
python3 "$HERE/summarize.py" "$W" "$OUT"
cp "$W/census_torch.json" "$W/census_runtime_app.json" "$W/census_cudarc.json" "$OUT/" 2>/dev/null
cat "$OUT/summary.md"
sleep 1
