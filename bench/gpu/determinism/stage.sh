#!/usr/bin/env bash
# Builds the release `vitamin` (and the CUDA interposer) here and stages what the H200
# determinism run (run.sh) needs into DEST, default $ROOT/.device/det (git-ignored), where ROOT is
# the repository this script sits in:
#   bench/gpu/determinism/stage.sh [DEST]
# Then on the GPU machine (the device tool, carrying .device/det): bash .device/det/run.sh
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
DEST=${1:-$ROOT/.device/det}
cd "$ROOT"
cargo build --release --locked -p vitamin -p vitamin-shim-cuda
R="${CARGO_TARGET_DIR:-$ROOT/target}/release"
rm -rf "$DEST"
mkdir -p "$DEST"
cp "$R/vitamin" "$R/libvitamin_cuda.so" "$DEST/"
cp "$HERE/run.sh" "$HERE/torch_app.py" "$ROOT/scripts/vitamin_record.py" "$DEST/"
# The CPU reference record committed from the CI machine, to compare with the one made there.
cp "$ROOT/docs/results/determinism/sim-cpu-reference.json.gz" "$DEST/cpu_ci.json.gz"
git rev-parse HEAD > "$DEST/COMMIT"
ls -la "$DEST"
du -sh "$DEST"
