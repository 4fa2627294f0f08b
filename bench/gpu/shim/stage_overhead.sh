#!/usr/bin/env bash
# Builds the shim and stages what overhead_check.sh needs into .device/overhead (git-ignored).
# BEFORE=COMMIT also builds that commit's shim (a git worktree under target/) and stages it as
# libvitamin_cuda_before.so, for an A/B of the two builds side by side (latency_check.sh's SHIM=, the
# session step `lat`).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$ROOT"
cargo build --release -p vitamin-shim-cuda
D="$ROOT/.device/overhead"
rm -rf "$D"; mkdir -p "$D"
cp target/release/libvitamin_cuda.so "$D/"
cp bench/gpu/shim/{overhead_check.sh,latency_check.sh,trace_summary.py,census_phases.py,check.cuh,chain_bench.cu,common.cuh,green_chain.cu,launch_bench.cu,train_bench.py,trace_phases.py,train_ab.sh,overhead_paired.py,chain_issue.py,stream_switch.py,op_gaps.cu,op_phases.cu,phase_check.sh,sync_tail.py,trace_threads.py,lock_waits.py,trace_tail.py} "$D/"
# One-off probes (bench/README.md), staged flat beside the scripts and headers they use.
cp bench/probes/shim/{launch_paths.cu,pin_check.sh,memfence_probe.cu,launch_idle.cu,launch_xthread.cu,chain_xthread.cu,chain_probe.sh,lfcensus.sh,placement_check.sh,launch_after.cu} "$D/"
cp bench/probes/host/{spinner.c,spin_check.sh,sibling_probe.c,c2c_probe.c} "$D/"
cp bench/probes/host/host_probe.c "$D/"
git rev-parse HEAD > "$D/COMMIT"
if [ -n "${BEFORE:-}" ]; then
    wt="$ROOT/target/before-worktree"
    git worktree remove --force "$wt" 2>/dev/null || rm -rf "$wt"
    git worktree add -q --detach "$wt" "$BEFORE"
    (cd "$wt" && CARGO_TARGET_DIR="$ROOT/target/before" cargo build --release -p vitamin-shim-cuda)
    cp "$ROOT/target/before/release/libvitamin_cuda.so" "$D/libvitamin_cuda_before.so"
    git worktree remove --force "$wt"
    echo "libvitamin_cuda_before.so: $(git rev-parse "$BEFORE")" >> "$D/COMMIT"
fi
git status --short | sed 's/^/dirty: /' >> "$D/COMMIT"
du -sh "$D"
