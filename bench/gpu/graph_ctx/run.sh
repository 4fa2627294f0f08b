#!/usr/bin/env bash
# Builds and runs the graph-context probe on the GPU machine: bash bench/gpu/graph_ctx/run.sh (stdout).
set -euo pipefail
cd "$(dirname "$0")"
nvcc -O2 -arch=sm_90 graph_ctx_probe.cu -lcuda -o /tmp/graph_ctx_probe
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
/tmp/graph_ctx_probe
