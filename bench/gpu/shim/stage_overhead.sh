#!/usr/bin/env bash
# Builds the shim and stages what overhead_check.sh needs into .device/overhead (git-ignored).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$ROOT"
cargo build --release -p vitamin-shim-cuda
D="$ROOT/.device/overhead"
rm -rf "$D"; mkdir -p "$D"
cp target/release/libvitamin_cuda.so "$D/"
cp bench/gpu/shim/{overhead_check.sh,latency_check.sh,trace_summary.py,census_phases.py,launch_paths.cu,check.cuh,pin_check.sh,chain_bench.cu,common.cuh,green_chain.cu,launch_bench.cu,train_bench.py,memfence_probe.cu,launch_idle.cu,trace_phases.py,launch_xthread.cu,train_ab.sh,overhead_paired.py,chain_xthread.cu,chain_probe.sh,chain_issue.py,lfcensus.sh,stream_switch.py,op_gaps.cu,op_phases.cu,phase_check.sh,sync_tail.py,placement_check.sh,trace_threads.py,lock_waits.py,trace_tail.py,launch_after.cu} "$D/"
cp bench/gpu/host/{spinner.c,spin_check.sh,sibling_probe.c,c2c_probe.c} "$D/"
cp bench/gpu/host/host_probe.c "$D/"
git rev-parse HEAD > "$D/COMMIT"
git status --short | sed 's/^/dirty: /' >> "$D/COMMIT"
du -sh "$D"
