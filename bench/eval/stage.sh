#!/usr/bin/env bash
# Stages the evaluation into .device/eval (git-ignored; carry it to the GPU machine): release
# vitamin and libvitamin_cuda.so (stripped), bench/eval's scripts, groups and tenants, the Azure
# trace and chain_bench.cu with its headers. Run from the repository root (bench/eval/README.md).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
D=.device/eval
if [ "${STAGE_NO_BUILD:-0}" != 1 ]; then
    cargo build --release -p vitamin -p vitamin-shim-cuda
fi
rm -rf "$D"
mkdir -p "$D/data"
cp target/release/vitamin target/release/libvitamin_cuda.so "$D/"
strip "$D/vitamin" "$D/libvitamin_cuda.so"
cp bench/eval/*.py bench/eval/run_group.sh "$D/"
cp -r bench/eval/groups bench/eval/tenants "$D/"
rm -rf "$D/tenants/__pycache__"
cp runtime/data/azure-llm-2023-conv.csv "$D/data/"
cp bench/gpu/shim/chain_bench.cu bench/gpu/shim/common.cuh bench/gpu/shim/check.cuh "$D/"
{ git rev-parse HEAD; git status --short | sed 's/^/dirty: /'; } > "$D/COMMIT"
du -sh "$D"
