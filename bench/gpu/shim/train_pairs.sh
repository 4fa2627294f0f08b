#!/usr/bin/env bash
# Training-step overhead only, with less noise than run.sh's 3 pairs: 4 ABBA-ordered pairs
# (native, observe, observe, native, ...) pinned to CPUs 4-7, so drift over time cancels.
# Same staging as run.sh; writes $OUT/train_pairs.json and prints a one-line summary.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/out}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/trainpairs.XXXXXX)
chmod +x "$HERE/vitamin"
export PYTHONUNBUFFERED=1
PIN=(taskset -c 4-7)
run() { # run MODE INDEX
    if [ "$1" = native ]; then
        timeout 90 "${PIN[@]}" python3 "$HERE/train_bench.py" "$W/$1_$2.json" > /dev/null
    else
        timeout 90 "${PIN[@]}" "$HERE/vitamin" run --observe -- python3 "$HERE/train_bench.py" "$W/$1_$2.json" > /dev/null
    fi
    echo "$1 $2 $(cat "$W/$1_$2.json")"
}
for i in 1 2 3 4; do
    if [ $((i % 2)) = 1 ]; then run native "$i"; run observe "$i"; else run observe "$i"; run native "$i"; fi
done
python3 - "$W" "$OUT" <<'PY'
import json, glob, os, statistics, sys
w, out = sys.argv[1], sys.argv[2]
runs = {m: [json.load(open(p))["median_step_ms"] for p in sorted(glob.glob(os.path.join(w, m + "_*.json")))]
        for m in ("native", "observe")}
n, o = statistics.median(runs["native"]), statistics.median(runs["observe"])
pairs = [100 * (b - a) / a for a, b in zip(runs["native"], runs["observe"])]
doc = {"runs_ms": runs, "native_median_ms": n, "observe_median_ms": o, "overhead_pct": 100 * (o - n) / n,
       "pairwise_overhead_pct": pairs, "pairwise_median_pct": statistics.median(pairs)}
json.dump(doc, open(os.path.join(out, "train_pairs.json"), "w"), indent=1)
print(json.dumps(doc))
PY
