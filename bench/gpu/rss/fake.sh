#!/usr/bin/env bash
# The fake-driver variant of run.sh, runnable without a GPU: shim-cuda's fake libcuda (kernels run
# on the CPU, inline at submission unless FAKE_DELAY_US is set) and tests/fake/robust_app.c issue
# LAUNCHES launches (default 10^7) without a sync, natively and under the release interposer in
# bind mode (bound on, and lifted); prints peak RSS (VmHWM) per run.
#   cargo build --release -p vitamin-shim-cuda && bash bench/gpu/rss/fake.sh
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
LIB="${CARGO_TARGET_DIR:-$ROOT/target}/release/libvitamin_cuda.so"
[ -f "$LIB" ] || { echo "missing $LIB: cargo build --release -p vitamin-shim-cuda" >&2; exit 1; }
N=${LAUNCHES:-10000000}
W=$(mktemp -d /tmp/rss-fake.XXXXXX)
FAKE="$ROOT/shim-cuda/tests/fake"
cc -shared -fPIC -pthread -O2 -Wl,-Bsymbolic -Wl,-soname,libcuda.so.1 -o "$W/libcuda.so.1" "$FAKE/libcuda.c"
ln -sf libcuda.so.1 "$W/libcuda.so"
cc -O2 -o "$W/robust_app" "$FAKE/robust_app.c" -L"$W" -lcuda
delay=()
[ -n "${FAKE_DELAY_US:-}" ] && delay=(FAKE_CUDA_DELAY_US="$FAKE_DELAY_US")
run() { # label, env...
    local label=$1; shift
    local t0=$SECONDS out
    out=$(env -i PATH="$PATH" LD_LIBRARY_PATH="$W" VITAMIN_CONFIG=none "${delay[@]}" "$@" timeout 1800 "$W/robust_app" flood "$N")
    local x0 hwm
    x0=$(sed -n 's/^x0=//p' <<<"$out")
    hwm=$(sed -n 's/^vmhwm_kb=//p' <<<"$out")
    printf '| %s | %s | %s | %.1f | %d |\n' "$label" "$N" "$x0" "$(echo "$hwm / 1024" | bc -l)" $((SECONDS - t0))
}
echo "| run | launches | result (x0) | VmHWM MiB | wall s |"
echo "| --- | --- | --- | --- | --- |"
run native
run "shim, bind (max_outstanding_ops 1024)" LD_PRELOAD="$LIB" VITAMIN_MODE=bind
run "shim, bind, bound lifted (10^8)" LD_PRELOAD="$LIB" VITAMIN_MODE=bind VITAMIN_MAX_OUTSTANDING_OPS=100000000
rm -rf "$W"
