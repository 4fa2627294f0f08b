#!/usr/bin/env python3
"""Summarizes an op timeline trace of the shim (VITAMIN_TRACE=path, runtime/src/trace.rs).

The application's work is cut at its synchronize calls: each segment is the launches an
application thread made after its previous sync, up to and including the sync. Segments are
grouped by launch count (1: chain_bench's small op, 8: its operator, 10000: a chain), and for each
group the script prints median / p95 of where the time went, in microseconds:

  record       first launch call's duration on the application thread
  handoff      first launch call returns -> the dispatcher starts submitting that op
  submit       the dispatcher's backend call for the first op (driver launch + fence)
  submit_each  mean backend call per op over the segment
  gap_each     mean time between consecutive submissions' starts (the dispatcher's cycle)
  tail         last op's submission ends -> the last ops' completion is satisfied (the
               dispatcher observed it and published it to waiting threads)
  wake         that moment -> the synchronize call returns
  polls        polls during the synchronize call, and their mean duration
  total        first launch call -> the synchronize call returns

Usage: trace_summary.py TRACE.csv [--json OUT.json]
"""
import csv
import json
import statistics
import sys
from collections import defaultdict


def pct(v, f):
    v = sorted(v)
    return v[min(len(v) - 1, int(f * (len(v) - 1)))] if v else None


def load(path):
    rows = []
    with open(path) as f:
        for r in csv.DictReader(f):
            rows.append((int(r["t_ns"]), r["tag"], int(r["thread"]), int(r["arg"])))
    return rows


def segments(rows):
    """Yields (app_thread, launches[(enter, exit, op)], sync_enter, sync_exit) per sync call."""
    open_launch = {}
    pending = defaultdict(list)
    sync_open = {}
    for t, tag, th, arg in rows:
        if tag == "launch_enter":
            open_launch[th] = t
        elif tag == "launch_exit" and th in open_launch:
            pending[th].append((open_launch.pop(th), t, arg))
        elif tag == "sync_enter":
            sync_open[th] = t
        elif tag == "sync_exit" and th in sync_open:
            yield th, pending.pop(th, []), sync_open.pop(th), t


def summarize(rows):
    submit_begin, submit_end = {}, {}
    polls = []  # (begin, end, n)
    satisfied = []  # times completed ops were published
    poll_open = None
    for t, tag, th, arg in rows:
        if tag == "satisfied":
            satisfied.append(t)
        if tag == "submit_begin":
            submit_begin[arg] = t
        elif tag == "submit_end":
            submit_end[arg] = t
        elif tag == "poll_begin":
            poll_open = t
        elif tag == "poll_end" and poll_open is not None:
            polls.append((poll_open, t, arg))
            poll_open = None
    polls.sort()
    poll_ends = [p[1] for p in polls]
    import bisect

    groups = defaultdict(lambda: defaultdict(list))
    for th, launches, s_in, s_out in segments(rows):
        if not launches:
            continue
        ops = [op for _, _, op in launches]
        if any(op not in submit_begin or op not in submit_end for op in ops):
            continue
        g = groups[len(launches)]
        first, last = ops[0], ops[-1]
        g["record"].append(launches[0][1] - launches[0][0])
        g["handoff"].append(submit_begin[first] - launches[0][1])
        g["submit"].append(submit_end[first] - submit_begin[first])
        g["submit_each"].append(sum(submit_end[o] - submit_begin[o] for o in ops) / len(ops))
        if len(ops) > 1:
            g["gap_each"].append((submit_begin[last] - submit_begin[first]) / (len(ops) - 1))
        # The last publication of completions before the sync returned.
        i = bisect.bisect_right(satisfied, s_out) - 1
        if i >= 0 and satisfied[i] >= submit_end[last]:
            g["tail"].append(satisfied[i] - submit_end[last])
            g["wake"].append(s_out - satisfied[i])
        lo = bisect.bisect_left(poll_ends, s_in)
        hi = bisect.bisect_right(poll_ends, s_out)
        during = polls[lo:hi]
        g["polls"].append(len(during))
        if during:
            g["poll_each"].append(sum(e - b for b, e, _ in during) / len(during))
        g["total"].append(s_out - launches[0][0])
    out = {}
    for n, g in sorted(groups.items()):
        out[str(n)] = {"segments": len(g["total"])}
        for k, v in g.items():
            scale = 1 if k == "polls" else 1e-3
            out[str(n)][k] = {"p50": round(pct(v, 0.5) * scale, 3), "p95": round(pct(v, 0.95) * scale, 3),
                              "mean": round(statistics.mean(v) * scale, 3)}
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = summarize(load(sys.argv[1]))
    for n, g in out.items():
        print(f"segments of {n} launches: {g['segments']}")
        for k, v in g.items():
            if k != "segments":
                print(f"  {k:12s} p50 {v['p50']:>10} p95 {v['p95']:>10} mean {v['mean']:>10}")
    if "--json" in sys.argv:
        json.dump(out, open(sys.argv[sys.argv.index("--json") + 1], "w"), indent=1)


if __name__ == "__main__":
    main()
