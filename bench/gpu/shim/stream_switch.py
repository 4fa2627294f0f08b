#!/usr/bin/env python3
"""Does a launch cost more when another thread made the previous driver call on its stream?

Reads op timeline traces (VITAMIN_TRACE, from a build whose issue_begin marks carry the stream
handle, bit 63 set for fence records) and groups every kernel/copy issue's driver-call time by
the issuing thread's role (application thread: it marks launch calls; dispatcher: it marks
rounds; else the submission thread) and by who made the previous driver call on the same stream
(the same thread or another; a fence record or an op). Prints one JSON object per trace and group:
count, p50 and p90 in us. Usage: stream_switch.py trace.csv ...
"""
import json
import sys

from chain_issue import quantile, read_marks

FENCE = 1 << 63


def summarize(path):
    marks = read_marks(path)
    app = {th for _, tag, th, _ in marks if tag == "launch_enter"}
    dispatcher = {th for _, tag, th, _ in marks if tag == "round_begin"}

    def role(th):
        return "app" if th in app else "dispatcher" if th in dispatcher else "submit"

    last_on_stream = {}  # stream -> (thread, was_fence)
    open_issue = {}  # thread -> (t, stream, fence)
    groups = {}
    for t, tag, th, arg in marks:
        if tag == "issue_begin":
            open_issue[th] = (t, arg & ~FENCE, bool(arg & FENCE))
        elif tag == "issue_end" and th in open_issue:
            t0, stream, fence = open_issue.pop(th)
            if stream == 0:
                continue
            prev = last_on_stream.get(stream)
            last_on_stream[stream] = (th, fence)
            if fence or prev is None:
                continue
            prev_by = "same thread" if prev[0] == th else "other thread"
            prev_what = "fence" if prev[1] else "op"
            key = (role(th), prev_by, prev_what)
            groups.setdefault(key, []).append(t - t0)
    rows = []
    for (r, by, what), v in sorted(groups.items()):
        rows.append({"trace": path, "issuer": r, "previous_call_on_stream": f"{what} by {by}",
                     "n": len(v), "p50_us": quantile(v, 0.5), "p90_us": quantile(v, 0.9)})
    return rows


if __name__ == "__main__":
    for p in sys.argv[1:]:
        for row in summarize(p):
            print(json.dumps(row))
