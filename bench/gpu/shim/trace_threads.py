#!/usr/bin/env python3
"""Per-thread driver-call and poll durations from an op timeline trace of the shim
(VITAMIN_TRACE): for each thread of the trace, the median time between its `issue_begin` and
`issue_end` marks (one driver call: a launch, a fence record) and between its `poll_begin` and
`poll_end` marks (one completion poll), in microseconds, with counts. Comparing traces of fast
and slow processes shows whether a slowdown is the whole machine's or one thread's.

Usage: trace_threads.py TRACE.csv [TRACE.csv ...]
"""
import collections
import statistics
import sys

from trace_phases import load


def durations(rows):
    spans = {"issue": collections.defaultdict(list), "poll": collections.defaultdict(list)}
    open_ = {}
    for t, tag, thread, _ in rows:
        kind, _, edge = tag.partition("_")
        if kind not in spans or edge not in ("begin", "end"):
            continue
        if edge == "begin":
            open_[(kind, thread)] = t
        elif (kind, thread) in open_:
            spans[kind][thread].append((t - open_.pop((kind, thread))) / 1000)
    return spans


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for path in sys.argv[1:]:
        spans = durations(sorted(load(path), key=lambda r: r[0]))
        parts = []
        for kind in ("issue", "poll"):
            for thread, v in sorted(spans[kind].items()):
                parts.append(f"thread {thread} {kind} p50 {statistics.median(v):.2f} us (n {len(v)})")
        print(f"{path}: " + "; ".join(parts))


if __name__ == "__main__":
    main()
