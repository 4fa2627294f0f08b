#!/usr/bin/env python3
"""When each step of a synchronous segment first happens, from an op timeline trace of the shim
(VITAMIN_TRACE=path; runtime/src/trace.rs), as medians over segments with N launches.

A segment is what an application thread did from its first launch after a synchronize call up to
and including the next synchronize call (chain_bench.cu: N=1 the small op, N=8 the operator).
For each tag, the first time it occurs in the segment, in microseconds after the segment's first
launch call entered; tags of other threads (the dispatcher, the submission thread) are prefixed
`d_`. `last_satisfied` is the last publication of completions before the synchronize call
returned. Complements trace_summary.py (which cuts segments into record / hand-off / submit /
tail / wake): this one shows, e.g., where an eagerly bound launch spends its time before the
driver call (eager_begin, bind_begin, submit_begin, submit_end).

Usage: trace_phases.py TRACE.csv [N ...]   (default N: 1 8)
"""
import collections
import csv
import sys


def load(path):
    with open(path) as f:
        return [(int(r["t_ns"]), r["tag"], int(r["thread"]), int(r["arg"])) for r in csv.DictReader(f)]


def segment_args(doc, third_default):
    """The command line of the scripts that cut a trace into segments (sync_tail.py, trace_tail.py):
    `TRACE.csv [N [X]]`. Returns the time-sorted rows, N (default 8) and X (`third_default`);
    exits with `doc` without a trace."""
    if len(sys.argv) < 2:
        sys.exit(doc)
    rows = sorted(load(sys.argv[1]), key=lambda r: r[0])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    third = float(sys.argv[3]) if len(sys.argv) > 3 else third_default
    return rows, n, third


def segments(rows, n):
    exits = [i for i, r in enumerate(rows) if r[1] == "sync_exit"]
    prev = 0
    for i in exits:
        th = rows[i][2]
        launches = [j for j in range(prev, i) if rows[j][1] == "launch_enter" and rows[j][2] == th]
        if len(launches) == n:
            yield launches[0], i
        prev = i


def phases(rows, n):
    d = collections.defaultdict(list)
    count = 0
    for s0, e0 in segments(rows, n):
        count += 1
        t0, th = rows[s0][0], rows[s0][2]
        seen = {}
        for t, tag, thr, arg in rows[s0 : e0 + 1]:
            if tag == "step":  # numbered points (runtime/hal trace::step)
                tag = f"step{arg}"
            key = tag if thr == th else "d_" + tag
            seen.setdefault(key, (t - t0) / 1000)
        sat = [(rows[j][0] - t0) / 1000 for j in range(s0, e0 + 1) if rows[j][1] == "satisfied"]
        if sat:
            seen["last_satisfied"] = sat[-1]
        for k, v in seen.items():
            d[k].append(v)
    return count, d


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows = load(sys.argv[1])
    for n in [int(x) for x in sys.argv[2:]] or [1, 8]:
        count, d = phases(rows, n)
        print(f"segments of {n} launches: {count}")
        med = lambda v: sorted(v)[len(v) // 2]
        for k, v in sorted(d.items(), key=lambda kv: med(kv[1])):
            v = sorted(v)
            print(f"  {k:18s} p50 {v[len(v) // 2]:9.2f} p90 {v[9 * len(v) // 10]:9.2f}  (in {len(v)} segments)")


if __name__ == "__main__":
    main()
