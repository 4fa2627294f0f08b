#!/usr/bin/env bash
# Builds and runs the pool-cost probe on the GPU machine: bash bench/gpu/pool_cost/run.sh (stdout: JSON lines).
set -euo pipefail
cd "$(dirname "$0")"
nvcc -O2 -arch=sm_90 pool_cost_probe.cu -lcuda -o /tmp/pool_cost_probe
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for i in 1 2 3; do echo "# run $i"; /tmp/pool_cost_probe; done
