#!/usr/bin/env python3
"""Session 11's offline analysis of the kept trace (call 8, round 1), quoted in
docs/results/shim-bind-overhead.md (findings 5 and 6) and in the closing note:
  1. what made the previous driver call on the lane stream of each operator's first launch, and
     that launch's driver-call duration by group;
  2. the operators whose synchronize call did not end on the fence words (no step 25): when the
     dispatcher thread's poll began, when another thread recorded a fence, and when the waiting
     thread's own first poll began (us after the call entered), and the operator's duration.
Usage (from the repository root):
  tar xzf docs/results/shim-bind-overhead/session11/call8-trace/lat/latency_traces.tar.gz -C /tmp
  python3 docs/results/shim-bind-overhead/session11/call8-trace/analysis.py /tmp/trace_default_1.csv
"""
import collections
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../../../bench/gpu/shim"))
from trace_phases import load, segments  # noqa: E402

FENCE = 1 << 63


def tag(r):
    return r[1] if r[1] != "step" else f"step{r[3]}"


def main():
    rows = sorted(load(sys.argv[1]), key=lambda r: r[0])
    last, prev = {}, {}
    for i, (_, t, thr, arg) in enumerate(rows):
        if t == "issue_begin":
            prev[i] = last.get(arg & ~FENCE)
            last[arg & ~FENCE] = (thr, bool(arg & FENCE))
    groups = collections.defaultdict(list)
    misses = []
    for s0, e0 in segments(rows, 8):
        th = rows[s0][2]
        b = next((j for j in range(s0, e0) if rows[j][1] == "issue_begin" and rows[j][2] == th), None)
        e = b is not None and next((j for j in range(b, e0) if rows[j][1] == "issue_end" and rows[j][2] == th), None)
        if b is not None and e:
            p = prev.get(b)
            key = "none" if p is None else ("same thread" if p[0] == th else "other thread") + (" fence" if p[1] else " launch")
            groups[key].append((rows[e][0] - rows[b][0]) / 1000)
        if any(r[2] == th and tag(r) == "step25" for r in rows[s0 : e0 + 1]):
            continue
        se = next(j for j in range(s0, e0 + 1) if rows[j][1] == "sync_enter" and rows[j][2] == th)
        at = lambda j: round((rows[j][0] - rows[se][0]) / 1000, 2)  # noqa: E731
        after = range(se, e0 + 1)
        misses.append({
            "operator_us": round((rows[e0][0] - rows[s0][0]) / 1000, 1),
            "dispatcher_poll": next((at(j) for j in after if rows[j][2] != th and rows[j][1] == "poll_begin"), None),
            "other_thread_fence": next((at(j) for j in after if rows[j][2] != th and rows[j][1] == "issue_begin" and rows[j][3] & FENCE), None),
            "waiter_fences": sum(1 for j in after if rows[j][2] == th and rows[j][1] == "issue_begin" and rows[j][3] & FENCE),
            "waiter_first_poll": next((at(j) for j in after if rows[j][2] == th and rows[j][1] == "poll_begin"), None),
        })
    print("first driver call of each operator, by what made the previous driver call on its stream:")
    for k, v in sorted(groups.items()):
        v.sort()
        print(f"  {k}: {len(v)} operators, p50 {statistics.median(v):.2f} us, p90 {v[9 * len(v) // 10]:.2f}, max {v[-1]:.2f}")
    print(f"operators whose synchronize call did not end on the fence words: {len(misses)}")
    for m in misses:
        print("  ", m)


if __name__ == "__main__":
    main()
