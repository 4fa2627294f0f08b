#!/usr/bin/env bash
# Stages the pair benchmark into .device/pair (git-ignored; carry it): release vitamin and
# libvitamin_cuda.so, stripped, and the scripts. Run from the repository root.
set -euo pipefail
cargo build --release -p vitamin -p vitamin-shim-cuda
D=.device/pair
rm -rf "$D"; mkdir -p "$D"
cp target/release/vitamin target/release/libvitamin_cuda.so "$D/"
strip "$D/vitamin" "$D/libvitamin_cuda.so"
cp bench/gpu/pair/*.py bench/gpu/pair/run.sh bench/gpu/pair/floors.sh "$D/"
du -sh "$D"
