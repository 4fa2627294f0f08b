#!/usr/bin/env bash
# Copies what the GPU check needs into DEST (default /work/main/.device/shim, git-ignored there):
# the release builds (vitamin, libvitamin_cuda.so, cudarc_app) and this folder's scripts.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
DEST=${1:-/work/main/.device/shim}
R="$ROOT/target/release"
for f in "$R/vitamin" "$R/libvitamin_cuda.so" "$R/examples/cudarc_app"; do
    [ -f "$f" ] || { echo "missing $f: cargo build --release -p vitamin -p vitamin-shim-cuda && cargo build --release -p vitamin-shim-cuda --example cudarc_app" >&2; exit 1; }
done
rm -rf "$DEST"
mkdir -p "$DEST"
cp "$R/vitamin" "$R/libvitamin_cuda.so" "$R/examples/cudarc_app" "$DEST/"
cp "$HERE"/run.sh "$HERE"/bind_check.sh "$HERE"/bind_summary.py "$HERE"/summarize.py "$HERE"/torch_check.py "$HERE"/train_bench.py "$HERE"/*.cu "$DEST/"
du -sh "$DEST"
