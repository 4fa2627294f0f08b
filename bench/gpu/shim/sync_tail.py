#!/usr/bin/env python3
"""What happens in the last microseconds of a synchronize call, from an op timeline trace of the
shim (VITAMIN_TRACE): per segment of N launches (a synchronous segment, as in trace_phases.py),
over the window of the last W us before the synchronize call returns, the waiting (application)
thread's polls and the other threads' polls (count, duration, idle time between the waiting
thread's polls), which thread published the completion the call returned on, how long after
that poll began the call returned, and when each of that poll's marks (numbered steps, issue
marks) came after its begin. Fast waits (the waiting thread saw its ops' fence words reached,
step 25, and left them for the next lock, step 26): how many segments ended so, and how long
before the return each step came. Medians (and p90) over segments.

Usage: sync_tail.py TRACE.csv [N] [W_us]   (default N 8, W 30)
"""
import collections

from trace_phases import segment_args, segments


def tail(rows, n, window_us):
    d = collections.defaultdict(list)
    count = 0
    for s0, e0 in segments(rows, n):
        count += 1
        th = rows[s0][2]
        t_exit = rows[e0][0]
        lo = t_exit - window_us * 1000
        app_polls, other_polls, open_ = [], [], {}
        last_sat = None
        fast = {}  # the waiting thread's last fast-wait steps in the window
        inside = collections.defaultdict(list)  # marks of each thread since its poll began
        for t, tag, thr, arg in rows[s0 : e0 + 1]:
            if tag == "step":
                tag = f"step{arg}"
            if thr in open_ and tag not in ("poll_begin", "poll_end"):
                inside[thr].append((tag, t))
            if t < lo:
                if tag == "poll_begin":
                    open_[thr] = t
                continue
            if thr == th and tag in ("step25", "step26"):
                fast[tag] = t
            if tag == "poll_begin":
                open_[thr] = t
                inside[thr] = []
            elif tag == "poll_end" and thr in open_:
                (app_polls if thr == th else other_polls).append((open_.pop(thr), t))
            elif tag == "satisfied":
                last_sat = (t, thr, open_.get(thr), list(inside[thr]))
        us = lambda x: x / 1000
        d["app_polls"].append(len(app_polls))
        d["other_polls"].append(len(other_polls))
        if app_polls:
            d["app_poll_us"].extend(us(e - b) for b, e in app_polls)
            d["app_idle_between_us"].extend(us(b2 - e1) for (_, e1), (b2, _) in zip(app_polls, app_polls[1:]))
        if other_polls:
            d["other_poll_us"].extend(us(e - b) for b, e in other_polls)
        d["fast_wait"].append(1 if "step25" in fast else 0)
        for tag, t in fast.items():
            d[f"fast_wait: {tag}_to_exit_us"].append(us(t_exit - t))
        if last_sat and "step25" not in fast:
            t, thr, began, marks = last_sat
            d["published_by_app"].append(1 if thr == th else 0)
            d["satisfied_to_exit_us"].append(us(t_exit - t))
            if began is not None:
                d["detecting_poll_begin_to_exit_us"].append(us(t_exit - began))
                seen = set()
                for tag, tm in marks:
                    if tag not in seen:
                        seen.add(tag)
                        d["detecting_poll: " + tag].append(us(tm - began))
    return count, d


def main():
    rows, n, w = segment_args(__doc__, 30.0)
    count, d = tail(rows, n, w)
    print(f"segments of {n} launches: {count}; last {w:g} us of each synchronize call")
    for k, v in d.items():
        v = sorted(v)
        if not v:
            continue
        mean = sum(v) / len(v)
        print(f"  {k:34s} p50 {v[len(v) // 2]:8.3f} p90 {v[9 * len(v) // 10]:8.3f} mean {mean:8.3f} (n {len(v)})")


if __name__ == "__main__":
    main()
