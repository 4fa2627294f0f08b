#!/usr/bin/env bash
# Builds here what bench/gpu/shim/issue8_check.sh needs and copies it into one folder, DEST
# (default /work/main/.device/issue8, which the device tool carries: carry [".device/issue8"]).
#
#   bench/gpu/shim/issue8_stage.sh [DEST]
#
# Copies: libvitamin_cuda.so (release), cudarc_app (the cudarc driver-API program: release example,
# stripped), runtime_app.cu (built with nvcc there), torch_check.py, decode_check.py, the check and
# summary scripts, and COMMIT (the commit staged, `-dirty` when the work tree has changes).
# Optional GPU test slot: GPU_TESTS=build stages the `tests` crate's CUDA test binary
# (`cargo test --release -p vitamin-tests --test cuda --no-run`) as gpu_tests; GPU_TESTS_BIN=PATH
# stages that binary instead. The check runs it with GPU_TESTS_ARGS (default
# "--test-threads=1 --nocapture graph").
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
DEST=${1:-/work/main/.device/issue8}
cd "$ROOT"

exe_of() { # cargo --message-format=json on stdin -> the executable built for target $1
    python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]:
        print(m["executable"])' "$1" | tail -1
}

cargo build --release --locked -p vitamin-shim-cuda --lib
app=$(cargo build --release --locked -p vitamin-shim-cuda --example cudarc_app --message-format=json |
    exe_of cudarc_app)
[ -n "$app" ] || { echo "cudarc_app was not built" >&2; exit 1; }
tests=""
if [ -n "${GPU_TESTS_BIN:-}" ]; then
    tests=$GPU_TESTS_BIN
elif [ "${GPU_TESTS:-}" = build ]; then
    tests=$(cargo test --release --locked -p vitamin-tests --test cuda --no-run --message-format=json | exe_of cuda)
    [ -n "$tests" ] || { echo "the CUDA test binary was not built" >&2; exit 1; }
fi

rm -rf "$DEST"
mkdir -p "$DEST"
cp target/release/libvitamin_cuda.so "$DEST/"
strip -o "$DEST/cudarc_app" "$app"
[ -n "$tests" ] && cp "$tests" "$DEST/gpu_tests"
cp "$HERE"/{issue8_check.sh,issue8_summary.py,runtime_app.cu,torch_check.py,decode_check.py} "$DEST/"
commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- || commit="$commit-dirty"
echo "$commit" > "$DEST/COMMIT"
ls -la "$DEST"
du -sh "$DEST"
