#!/usr/bin/env bash
# Builds everything the GPU check needs (here, on the CPU machine) and stages it for the device
# machine: release `vitamin`, the CUDA conformance/GPU test binary, the submit benchmark, and
# run_gpu_check.sh, copied into DEST (default: /work/main/.device/cuda, which the device `run`
# tool carries). Then, on the device machine: `bash .device/cuda/run_gpu_check.sh`.
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=${1:-/work/main/.device/cuda}
mkdir -p "$DEST"

exe_of() { # cargo --message-format=json output -> path of the one executable built for $1 (target name)
  python3 -c '
import json, sys
name = sys.argv[1]
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == name:
        print(m["executable"])' "$1" | tail -1
}

cargo build --release --locked -p vitamin
cp target/release/vitamin "$DEST/vitamin"
tests=$(cargo test --release --locked -p vitamin-tests --test cuda --no-run --message-format=json 2>/dev/null | exe_of cuda)
cp "$tests" "$DEST/cuda_tests"
bench=$(cargo bench --locked -p vitamin-hal-cuda --bench submit --no-run --message-format=json 2>/dev/null | exe_of submit)
cp "$bench" "$DEST/submit_bench"
diag=$(cargo build --release --locked -p vitamin-hal-cuda --example gc_memory --message-format=json 2>/dev/null | exe_of gc_memory)
cp "$diag" "$DEST/gc_memory"
cp bench/gpu/run_gpu_check.sh "$DEST/run_gpu_check.sh"
git rev-parse HEAD > "$DEST/COMMIT"
ls -la "$DEST"
du -sh "$DEST"
