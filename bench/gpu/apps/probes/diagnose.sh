#!/usr/bin/env bash
# Diagnosis of issue 22's two bind-mode bugs on the GPU (one device call): the driver's view of
# pageable memory, which copy entry points the pageable-copy program uses (observe census), and the
# ResNet-18 cuDNN training and the copy program under bind mode with logging.
set -uo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
SHIM=$(readlink -f "$1"); D=$2; mkdir -p "$D"
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
cd "$HERE"
timeout 60 python3 probes/pointer_probe.py > "$D/pointer.txt" 2>&1
APP_OUT=$D/copies.native.json timeout 120 python3 copies_streams.py > "$D/copies.native.log" 2>&1
LD_PRELOAD=$SHIM VITAMIN_MODE=observe VITAMIN_CENSUS=$D/copies.observe.census.json APP_OUT=$D/copies.observe.json \
  timeout 120 python3 copies_streams.py > "$D/copies.observe.log" 2>&1
for i in 1 2 3; do
  LD_PRELOAD=$SHIM VITAMIN_POLICY=chaos VITAMIN_SEED=$i VITAMIN_LOG=debug VITAMIN_CENSUS=$D/copies.chaos$i.census.json \
    APP_OUT=$D/copies.chaos$i.json timeout 120 python3 copies_streams.py > "$D/copies.chaos$i.log" 2>&1 &
done
APP_OUT=$D/resnet.native.json timeout 120 python3 tv_resnet18_train.py > "$D/resnet.native.log" 2>&1
wait
for i in 1 2 3; do
  LD_PRELOAD=$SHIM VITAMIN_POLICY=chaos VITAMIN_SEED=$i VITAMIN_LOG=debug VITAMIN_CENSUS=$D/resnet.chaos$i.census.json \
    APP_OUT=$D/resnet.chaos$i.json timeout 150 python3 tv_resnet18_train.py > "$D/resnet.chaos$i.log" 2>&1 &
done
wait
for f in "$D"/*.log; do
  echo "== $f ($(wc -l < "$f") lines)"; grep -v "DEBUG" "$f" | tail -15
  grep -c "DEBUG" "$f"
done
python3 - "$D" <<'PY'
import json, sys, glob, os
d = sys.argv[1]
for prog in ("copies", "resnet"):
    nat = json.load(open(f"{d}/{prog}.native.json"))["digests"] if os.path.exists(f"{d}/{prog}.native.json") else {}
    for f in sorted(glob.glob(f"{d}/{prog}.*.json")):
        if "census" in f: continue
        r = json.load(open(f))["digests"]
        print(prog, os.path.basename(f), "identical" if r == nat else f"DIFFERS {[k for k in r if r[k] != nat.get(k)]}")
c = json.load(open(f"{d}/copies.observe.census.json"))
print(json.dumps({k: v for k, v in (c.get("calls") or c.get("api") or {}).items() if "cpy" in k.lower() or "Memset" in k}, indent=0)[:3000])
PY
cat "$D/pointer.txt"
