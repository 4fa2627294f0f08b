"""Per-round comparison of chain_bench runs with the same round's native run (overhead_check.sh's
and latency_check.sh's logs: lines `CONFIG ROUND {json}`; traced runs, `trace_*`, are left out).

Rounds interleave native and bind runs, and on the H200 host the native chain varies 33-45 ms and
the operator's p95 about 1% from round to round, so each bind configuration is compared with its
own round's native run: chain throughput ratio (native ms / bind ms), the operator's p50 / p95 and
the small op's p95 excess, per round and their median, plus every chain counter and operator
checksum.

usage: python3 overhead_paired.py overhead.log|latency.log
"""

import collections
import json
import re
import statistics
import sys

LINE = re.compile(r"^(\S+) (\d+) (\{.*\})$")


def parse(path):
    runs = collections.defaultdict(dict)  # (config, test) -> round -> record
    for line in open(path):
        m = LINE.match(line.strip())
        if not m:
            continue
        rec = json.loads(m.group(3))
        if "test" in rec:
            runs[(m.group(1), rec["test"])][int(m.group(2))] = rec
    return runs


def paired(runs):
    native_chain = runs.get(("native", "chain"), {})
    native_op = runs.get(("native", "operator"), {})
    out = {}
    native_small = runs.get(("native", "small_op"), {})
    configs = sorted({c for c, _ in runs if c != "native" and not c.startswith("trace_")})
    for c in configs:
        chain, op = runs.get((c, "chain"), {}), runs.get((c, "operator"), {})
        rounds = sorted(r for r in chain if r in native_chain and r in op and r in native_op)
        if not rounds:
            continue
        series = {
            "chain_x": [native_chain[r]["median_ms"] / chain[r]["median_ms"] for r in rounds],
            "op_p50_pct": [100 * (op[r]["p50_us"] / native_op[r]["p50_us"] - 1) for r in rounds],
            "op_p95_pct": [100 * (op[r]["p95_us"] / native_op[r]["p95_us"] - 1) for r in rounds],
        }
        small = runs.get((c, "small_op"), {})
        if all(r in small and r in native_small for r in rounds):
            series["small_p95_pct"] = [100 * (small[r]["p95_us"] / native_small[r]["p95_us"] - 1) for r in rounds]
        out[c] = {k: {"rounds": [round(x, 3) for x in v], "median": round(statistics.median(v), 3)}
                  for k, v in series.items()}
        out[c]["rounds"] = rounds
        out[c]["counters_ok"] = all(chain[r].get("counter_ok") for r in rounds)
        out[c]["checksums_match_native"] = all(op[r]["checksum"] == native_op[r]["checksum"] for r in rounds)
    return out


def main():
    for config, doc in paired(parse(sys.argv[1])).items():
        print(config, json.dumps(doc))


if __name__ == "__main__":
    main()
