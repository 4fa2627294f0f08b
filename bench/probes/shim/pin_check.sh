#!/usr/bin/env bash
# Does CPU placement explain the bimodal chain times under bind mode? chain_bench natively and
# under bind mode (defaults), unpinned and pinned to CPUs 4-7 (taskset), alternating ROUNDS times.
# Stage: bash bench/gpu/shim/stage_overhead.sh (copies this script too). Run: bash .device/overhead/pin_check.sh
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
W=$(mktemp -d /tmp/pin.XXXXXX)
ROUNDS=${ROUNDS:-3}
{
  date -u; lscpu | grep -E 'Model name|NUMA|On-line'; nproc
  nvcc -O2 -arch=sm_90 "$HERE/chain_bench.cu" -o "$W/cb" || exit 1
  CB=("$W/cb" 10000 5 200 50)
  for r in $(seq 1 "$ROUNDS"); do
    for pin in none 4-7; do
      P=(); [ "$pin" != none ] && P=(taskset -c "$pin")
      echo "native pin=$pin $r $(timeout 60 "${P[@]}" "${CB[@]}" | head -1)"
      echo "bind pin=$pin $r $(LD_PRELOAD="$HERE/libvitamin_cuda.so" VITAMIN_MODE=bind timeout 60 "${P[@]}" "${CB[@]}" | head -1)"
    done
  done
} 2>&1 | tee "$OUT/pin.log"
