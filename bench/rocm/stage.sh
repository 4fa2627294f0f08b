#!/usr/bin/env bash
# Builds, here, what the ROCm host run (run.sh) needs and packs it into one tarball to copy to a
# ROCm host (x86-64 Linux, glibc >= 2.36; nothing here has run on one):
#   bench/rocm/stage.sh [DEST]          # default DEST: $ROOT/.device/rocm (git-ignored)
# DEST then holds the staged folder and vitamin-rocm.tar.gz. On the ROCm host:
#   tar xzf vitamin-rocm.tar.gz && OUT=$PWD/rocm-out bash rocm/run.sh
# Staged: release `vitamin` and libvitamin_hip.so side by side, the HIP conformance suite's test
# binary (tests/tests/hip.rs, run there with VITAMIN_HIP_CONFORMANCE=device), the PyTorch program
# and its recorder (bench/gpu/determinism/torch_app.py, scripts/vitamin_record.py), run.sh, COMMIT.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DEST=${1:-$ROOT/.device/rocm}
cd "$ROOT"

exe_of() { # cargo --message-format=json on stdin -> the executable built for target $1
  python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]:
        print(m["executable"])' "$1" | tail -1
}

cargo build --release --locked -p vitamin -p vitamin-shim-hip
R="${CARGO_TARGET_DIR:-$ROOT/target}/release"
tests=$(cargo test --release --locked -p vitamin-tests --test hip --no-run --message-format=json 2>/dev/null | exe_of hip)
[ -n "$tests" ] || { echo "stage.sh: the hip conformance test binary was not built" >&2; exit 1; }

# The interposer must carry libamdhip64's version nodes (the workspace's linker wrapper).
if command -v objdump >/dev/null && ! objdump -T "$R/libvitamin_hip.so" | grep -q 'hip_4\.2 *hipLaunchKernel$'; then
  echo "stage.sh: $R/libvitamin_hip.so lacks hipLaunchKernel@@hip_4.2 (built without scripts/cc-link.sh?)" >&2
  exit 1
fi

rm -rf "$DEST"
S="$DEST/rocm"
mkdir -p "$S"
cp "$R/vitamin" "$R/libvitamin_hip.so" "$S/"
cp "$tests" "$S/hip_tests"
cp "$HERE/run.sh" "$ROOT/bench/gpu/determinism/torch_app.py" "$ROOT/scripts/vitamin_record.py" "$S/"
git rev-parse HEAD > "$S/COMMIT"
tar -C "$DEST" -czf "$DEST/vitamin-rocm.tar.gz" rocm
ls -la "$S"
du -sh "$DEST/vitamin-rocm.tar.gz"
