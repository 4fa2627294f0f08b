#!/usr/bin/env python3
"""Per-run dispatcher statistics from bind-mode censuses (VITAMIN_CENSUS, with
VITAMIN_PROFILE_DISPATCH=1 for the per-phase times): one line per census_*.json in DIR with the
dispatcher's counters, its per-op phase times (ns per bound/continued/unit-free op), the backend's
submission cost per submit, the mean poll, the nodes used, the submission thread's counts, the
launch-first path's refusals and lock waits, and the waits that ended on fence words.

Usage: census_phases.py DIR
"""
import glob
import json
import os
import sys


def find(o, k):
    if isinstance(o, dict):
        for a, b in o.items():
            if a == k:
                return b
            r = find(b, k)
            if r is not None:
                return r
    return None


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    for p in sorted(glob.glob(os.path.join(sys.argv[1], "census_*.json"))):
        try:
            d = json.load(open(p))
        except Exception as e:  # a run that died leaves no or a partial census
            print(os.path.basename(p), "unreadable:", e)
            continue
        s = find(d, "dispatcher") or {}
        ph = s.get("phases") or {}
        ops = max(1, s.get("bound", 0) + s.get("continued", 0) + s.get("unit_free", 0))
        per = {k: round(v / ops, 3) for k, v in ph.items() if k.endswith("_ns")}
        counts = {k: s.get(k) for k in ("bound", "continued", "unit_free", "completed", "rounds", "inline_rounds",
                                        "polls", "rejected", "submit_failures")}
        nodes = sum(1 for x in s.get("per_node", []) if x)
        submit_us = ph.get("backend_submit_ns", 0) / max(1, ph.get("backend_submits", 1)) / 1e3
        poll_us = ph.get("poll_ns", 0) / max(1, s.get("polls") or 1) / 1e3
        print(os.path.basename(p), json.dumps(counts), "nodes", nodes, "ns/op", json.dumps(per),
              "submit us each %.3f" % submit_us, "poll us each %.3f" % poll_us,
              "submit thread", json.dumps(s.get("submit_thread")),
              "launch-first", json.dumps(s.get("launch_first_shim")), "fast waits", s.get("fast_waits"))


if __name__ == "__main__":
    main()
