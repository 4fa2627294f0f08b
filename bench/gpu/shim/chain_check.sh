#!/usr/bin/env bash
# Issue 8 overhead checks in one device call: a chain of N dependent tiny kernels and a small-op
# sync latency loop, natively and under bind mode (Throughput policy; lane continuation on, then
# off). Stage here:
#   cargo build --release -p vitamin-shim-cuda
#   D=/work/main/.device/chain; mkdir -p $D; cp target/release/libvitamin_cuda.so bench/gpu/shim/{chain_bench.cu,common.cuh,check.cuh,chain_check.sh} $D/
# Run there (carry .device/chain): bash .device/chain/chain_check.sh
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
N=${N:-10000}; REPS=${REPS:-5}; SMALL=${SMALL:-2000}
{
  date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep 'Model name'; nproc
  nvcc -O2 -arch=sm_90 "$HERE/chain_bench.cu" -o /tmp/chain_bench || exit 1
  for round in 1 2; do
    echo "== round $round native";     timeout 120 /tmp/chain_bench $N $REPS $SMALL | sed "s/^/native $round /"
    echo "== round $round bind lc";    VITAMIN_MODE=bind VITAMIN_CENSUS=$OUT/census_lc_$round.json LD_PRELOAD=$HERE/libvitamin_cuda.so \
                                         timeout 120 /tmp/chain_bench $N $REPS $SMALL | sed "s/^/bind_lc $round /"
    echo "== round $round bind strict"; VITAMIN_MODE=bind VITAMIN_LANE_CONTINUATION=0 VITAMIN_CENSUS=$OUT/census_strict_$round.json \
                                         LD_PRELOAD=$HERE/libvitamin_cuda.so timeout 120 /tmp/chain_bench $N $REPS $SMALL | sed "s/^/bind_strict $round /"
  done
} 2>&1 | tee "$OUT/chain.log"
