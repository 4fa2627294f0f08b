#!/usr/bin/env bash
# Stages the peak-RSS benchmark for the GPU machine: the release interposer and this folder's
# sources into DEST (default <repo>/.device/rss, git-ignored). Build first:
#   cargo build --release -p vitamin-shim-cuda
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
DEST=${1:-$ROOT/.device/rss}
LIB="${CARGO_TARGET_DIR:-$ROOT/target}/release/libvitamin_cuda.so"
[ -f "$LIB" ] || { echo "missing $LIB: cargo build --release -p vitamin-shim-cuda" >&2; exit 1; }
rm -rf "$DEST"
mkdir -p "$DEST"
cp "$LIB" "$HERE/run.sh" "$HERE/rss_bench.cu" "$DEST/"
git -C "$ROOT" rev-parse HEAD > "$DEST/COMMIT"
du -sh "$DEST"
