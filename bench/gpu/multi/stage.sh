#!/usr/bin/env bash
# Stages the multi-GPU check into .device/multi (git-ignored; carry it). Run from the repository root.
set -euo pipefail
cargo build --release -p vitamin -p vitamin-shim-cuda
D=.device/multi
rm -rf "$D"; mkdir -p "$D"
cp target/release/vitamin target/release/libvitamin_cuda.so "$D/"
strip "$D/vitamin" "$D/libvitamin_cuda.so"
cp bench/gpu/pair/job.py bench/gpu/multi/ddp_gpt.py bench/gpu/multi/run.sh "$D/"
du -sh "$D"
