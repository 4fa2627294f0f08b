"""Operator-latency tenant: runs chain_bench (bench/gpu/shim/chain_bench.cu, built on the GPU
machine by run_group.sh; path in EVAL_CHAIN_BENCH) and reports its small operator's p50/p95 (8
compute kernels + synchronize, like the paper's overhead experiment) and the tiny-op and chain
figures. Under `vitamin run` the binary inherits the shim through LD_PRELOAD.

  python3 tenants/op_latency.py [--reps 300] [--chain 2000]
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tenant  # noqa: E402


def parse(text):
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                d = json.loads(line)
            except ValueError:
                continue
            out[d.get("test")] = d
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--chain", type=int, default=2000)
    ap.add_argument("--small", type=int, default=1000)
    a = ap.parse_args()
    t = tenant.Tenant("operator")
    exe = os.environ.get("EVAL_CHAIN_BENCH")
    if not exe or not os.access(exe, os.X_OK):
        raise SystemExit(f"EVAL_CHAIN_BENCH={exe!r} is not an executable chain_bench (run_group.sh builds it)")
    t.ready()
    r = subprocess.run([exe, str(a.chain), "3", str(a.small), str(a.reps)], capture_output=True, text=True,
                       timeout=max(60, 10 * t.seconds))
    if r.returncode != 0:
        raise SystemExit(f"chain_bench exit {r.returncode}: {r.stderr[-400:]}")
    got = parse(r.stdout)
    op = got.get("operator")
    if not op:
        raise SystemExit("chain_bench printed no operator line")
    return t.write({"role": "operator", "p50_us": op.get("p50_us"), "p95_us": op.get("p95_us"),
                    "small_op": got.get("small_op"), "chain": got.get("chain"), "operator": op,
                    "throughput": 1e6 / op["p50_us"] if op.get("p50_us") else None, "unit": "ops/s"})


if __name__ == "__main__":
    main()
