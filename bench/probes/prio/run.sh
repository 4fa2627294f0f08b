#!/usr/bin/env bash
# Runs prio_probe's conditions under an MPS control daemon of its own (results: docs/results/prio-probe.md).
# On the GPU machine, from the repository root: OUT=$OUT bash bench/probes/prio/run.sh
set -u
D=$(cd "$(dirname "$0")" && pwd)
P=/tmp/prio_probe
nvcc -O2 -arch=sm_90 "$D/prio_probe.cu" -lcuda -o $P || exit 1
export CUDA_MPS_PIPE_DIRECTORY=/tmp/prio-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/prio-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d || { echo "MPS failed to start"; exit 1; }
sleep 1
ITERS=${ITERS:-2000}
pair() { # NAME BG_WHERE BG_PRIO LAT_WHERE LAT_PRIO
  echo "== $1"
  $P bg "$2" "$3" 4 & local b=$!
  sleep 1.5
  $P lat "$4" "$5" $ITERS
  wait $b
}
for round in 1 2; do
  echo "#### round $round"
  echo "== lat alone"; $P lat primary 0 $ITERS
  echo "== bg alone"; $P bg primary 0 3
  pair "overlap, primary streams, no priority (MPS as is)" primary 0 primary 0
  pair "overlap, primary streams, lat high priority" primary 0 primary hi
  pair "overlap, whole-device green contexts, no priority" gc 0 gc 0
  pair "overlap, whole-device green contexts, lat high priority" gc 0 gc hi
  pair "disjoint: lat on 16 SMs, bg on the other 116" gc:2:14 0 gc:0:2 0
  pair "lat on 16 SMs high priority, bg on the whole device" gc 0 gc:0:2 hi
done
echo quit | nvidia-cuda-mps-control; sleep 1
