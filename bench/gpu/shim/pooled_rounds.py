"""Pools the per-round pairs of several device calls into one verdict on issue 8's targets.

latency_check.sh and overhead_check.sh each end with one line per bind configuration,
`NAME {"chain_x": {"rounds": [...]}, "op_p50_pct": ..., "op_p95_pct": ..., ...}` (each round's
bind run against the same round's native run). One call's median over 5-20 rounds swings with the
VM's slow and fast processes; the honest figure is the median over every round of every call that
ran the same hot path. Usage:

    python3 pooled_rounds.py LOG:NAME [LOG:NAME ...]

LOG is a latency.log or overhead.log, NAME the configuration's label in it (`default`, `bind`,
`cover`, ...). Prints one JSON object per input (its rounds) and a pooled one: rounds, median, mean,
and how many rounds meet the targets (chain >= 0.9x native, operator p95 <= +1%).
Standard library only; tested by pooled_rounds_test.py.
"""

import json
import statistics
import sys

CHAIN_TARGET = 0.9  # chain throughput, bind / native
P95_TARGET = 1.0  # operator p95 excess over native, %
FIELDS = ("chain_x", "op_p50_pct", "op_p95_pct")


def rounds_of(text, name):
    """The per-round values of configuration `name` in a log's paired block (the last such line)."""
    found = None
    prefix = name + " {"
    for line in text.splitlines():
        if line.startswith(prefix) and '"chain_x"' in line:
            found = json.loads(line[len(name) + 1 :])
    if found is None:
        raise ValueError(f"no paired line for configuration {name!r}")
    return {f: [float(x) for x in found[f]["rounds"]] for f in FIELDS}


def pool(parts):
    """Pooled statistics over a list of `rounds_of` results."""
    out = {}
    for f in FIELDS:
        xs = [x for p in parts for x in p[f]]
        out[f] = {"rounds": len(xs), "median": round(statistics.median(xs), 3), "mean": round(statistics.fmean(xs), 3)}
    out["chain_x"]["rounds_meeting"] = sum(x >= CHAIN_TARGET for p in parts for x in p["chain_x"])
    out["op_p95_pct"]["rounds_meeting"] = sum(x <= P95_TARGET for p in parts for x in p["op_p95_pct"])
    out["targets"] = {
        "chain_median_ok": out["chain_x"]["median"] >= CHAIN_TARGET,
        "op_p95_median_ok": out["op_p95_pct"]["median"] <= P95_TARGET,
    }
    return out


def main(args):
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    parts = []
    for spec in args:
        path, sep, name = spec.rpartition(":")
        if not sep or not path or not name:
            print(f"expected LOG:NAME, got {spec!r}", file=sys.stderr)
            return 2
        with open(path, encoding="utf-8", errors="replace") as f:
            r = rounds_of(f.read(), name)
        parts.append(r)
        print(json.dumps({"input": spec, **r}))
    print(json.dumps({"pooled": pool(parts)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
