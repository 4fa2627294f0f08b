#!/usr/bin/env python3
"""Where the dispatcher thread was when a launch-first launch waited for its lock, from an op
timeline trace of the shim (VITAMIN_TRACE): for each application-thread launch whose time from
step 7 (before the dispatcher lock is taken) to step 8 (dispatcher and vCtx locks held) exceeds
THRESHOLD us (default 0.5), the dispatcher thread's (thread 0) latest mark before step 7, and
the application thread's previous call (synchronize call or launch). Prints the counts of each,
the wait's median per dispatcher mark, and how many launches were checked. A launch-first
launch's wait shows what the dispatcher thread does while the application thread returns from
a synchronize call.

Usage: lock_waits.py TRACE.csv [THRESHOLD_US]
"""
import collections
import statistics
import sys

from trace_phases import load


def waits(rows, threshold_us):
    """(checked launches, [(wait us, dispatcher's latest mark, app's previous call)])"""
    app = next((th for _, tag, th, _ in rows if tag == "launch_enter"), None)
    last_d = None
    prev_call = None
    step7 = None
    checked = 0
    out = []
    for t, tag, th, arg in rows:
        if th == 0:
            last_d = tag if tag != "step" else f"step{arg}"
            continue
        if th != app:
            continue
        if tag in ("sync_exit", "launch_exit"):
            prev_call = tag
        elif tag == "step" and arg == 7:
            step7 = (t, last_d, prev_call)
        elif tag == "step" and arg == 8 and step7 is not None:
            checked += 1
            wait = (t - step7[0]) / 1000
            if wait > threshold_us:
                out.append((wait, step7[1], step7[2]))
            step7 = None
    return checked, out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    threshold = float(sys.argv[2]) if len(sys.argv) > 2 else 0.5
    checked, out = waits(sorted(load(sys.argv[1]), key=lambda r: r[0]), threshold)
    print(f"{sys.argv[1]}: {checked} launch-first launches, {len(out)} waited over {threshold} us for the locks")
    by = collections.defaultdict(list)
    for wait, d, prev in out:
        by[(d, prev)].append(wait)
    for (d, prev), w in sorted(by.items(), key=lambda kv: -len(kv[1])):
        print(f"  dispatcher's last mark {d}, app's previous call {prev}: n {len(w)}, wait p50 {statistics.median(w):.2f} us")


if __name__ == "__main__":
    main()
