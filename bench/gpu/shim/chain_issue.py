#!/usr/bin/env python3
"""Per-thread driver-call times of an op timeline trace (VITAMIN_TRACE) of a launch chain.

For every thread that issued driver calls (issue_begin / issue_end marks): how many, the
median and p90 of the driver call's duration and of the gap since that thread's previous call
returned, split by what the application threads were doing when the call began: recording
(outside any synchronize call) or waiting (inside one). Then, per chain (a run of at least
`MIN_CHAIN` launch calls ended by a synchronize call), where its time went: the window from the
first launch call to the synchronize call's return, each issuing thread's time inside driver
calls and its idle gaps longer than `IDLE_GAP_NS`, and the dispatcher thread's (the one marking
rounds) rounds, submissions and time inside the backend's submit and poll calls.
Usage: chain_issue.py trace.csv ... Prints one JSON object per trace and thread, then per chain.
"""
import bisect
import csv
import json
import sys


def quantile(v, f):
    if not v:
        return None
    v = sorted(v)
    return round(v[int(f * (len(v) - 1))] / 1000.0, 3)


def read_marks(path):
    """A trace's marks as (t_ns, tag, thread, arg) tuples in time order."""
    with open(path) as fh:
        marks = [(int(r["t_ns"]), r["tag"], int(r["thread"]), int(r["arg"])) for r in csv.DictReader(fh)]
    marks.sort()
    return marks


def summarize(path):
    marks = read_marks(path)
    # Intervals during which some application thread was inside a synchronize call.
    waits, open_since = [], {}
    for t, tag, th, _ in marks:
        if tag == "sync_enter":
            open_since[th] = t
        elif tag == "sync_exit" and th in open_since:
            waits.append((open_since.pop(th), t))
    waits.sort()
    starts = [w[0] for w in waits]

    def waiting(t):
        i = bisect.bisect_right(starts, t) - 1
        return i >= 0 and waits[i][1] >= t

    app = {th for _, tag, th, _ in marks if tag == "launch_enter"}
    per = {}
    begun, last_end = {}, {}
    for t, tag, th, _ in marks:
        if tag == "issue_begin":
            begun[th] = t
        elif tag == "issue_end" and th in begun:
            b = begun.pop(th)
            state = "waiting" if waiting(b) else "recording"
            d = per.setdefault(th, {"recording": ([], []), "waiting": ([], [])})
            d[state][0].append(t - b)
            if th in last_end:
                d[state][1].append(b - last_end[th])
            last_end[th] = t
    out = []
    for th, d in sorted(per.items()):
        row = {"trace": path, "thread": th, "app_thread": th in app}
        for state, (calls, gaps) in d.items():
            row[state] = {
                "calls": len(calls),
                "call_p50_us": quantile(calls, 0.5),
                "call_p90_us": quantile(calls, 0.9),
                "gap_p50_us": quantile(gaps, 0.5),
                "gap_p90_us": quantile(gaps, 0.9),
            }
        out.append(row)
    out.extend(chains(marks))
    return out


MIN_CHAIN = 1000
IDLE_GAP_NS = 2000


def chains(marks):
    """Per chain window: see the module docs."""
    dispatcher = {th for _, tag, th, _ in marks if tag == "round_begin"}
    windows, first, launches = [], None, 0
    for t, tag, _, _ in marks:
        if tag == "launch_enter":
            first = t if first is None else first
            launches += 1
        elif tag == "sync_exit" and first is not None:
            if launches >= MIN_CHAIN:
                windows.append((first, t, launches))
            first, launches = None, 0
    rows = []
    for i, (a, b, n) in enumerate(windows):
        inside = [m for m in marks if a <= m[0] <= b]
        row = {"chain": i, "launches": n, "window_ms": round((b - a) / 1e6, 3), "threads": {}}
        open_at, last_end = {}, {}
        # The app thread's last launch call of the chain: before it the chain is being recorded.
        rec_end = max((t for t, tag, _, _ in inside if tag == "launch_exit"), default=a)
        row["recording_ms"] = round((rec_end - a) / 1e6, 3)
        gaps = []
        for t, tag, th, _ in inside:
            d = row["threads"].setdefault(th, {"issues": 0, "issue_ms": 0.0, "idle_gaps": 0, "idle_ms": 0.0})
            if tag == "issue_begin":
                open_at[("i", th)] = t
                if th in last_end and t - last_end[th] > IDLE_GAP_NS:
                    d["idle_gaps"] += 1
                    d["idle_ms"] += (t - last_end[th]) / 1e6
                    if th not in dispatcher:
                        gaps.append((round((last_end[th] - a) / 1e6, 3), round((t - last_end[th]) / 1e3, 1)))
            elif tag == "issue_end" and ("i", th) in open_at:
                d["issues"] += 1
                d["issue_ms"] += (t - open_at.pop(("i", th))) / 1e6
                last_end[th] = t
            elif th in dispatcher and tag in ("submit_begin", "poll_begin"):
                open_at[(tag, th)] = t
            elif th in dispatcher and tag in ("submit_end", "poll_end"):
                key = ("submit_begin" if tag == "submit_end" else "poll_begin", th)
                if key in open_at:
                    name = tag.split("_")[0]
                    d[name + "s"] = d.get(name + "s", 0) + 1
                    d[name + "_ms"] = d.get(name + "_ms", 0.0) + (t - open_at.pop(key)) / 1e6
            elif th in dispatcher and tag == "round_begin":
                d["rounds"] = d.get("rounds", 0) + 1
        for th, d in row["threads"].items():
            d["role"] = "dispatcher" if th in dispatcher else ("issuer" if d["issues"] else "other")
            for k in list(d):
                if k.endswith("_ms"):
                    d[k] = round(d[k], 3)
        # The issuing threads' idle gaps: (ms into the chain, us long), the 12 longest.
        row["longest_gaps"] = sorted(gaps, key=lambda g: -g[1])[:12]
        row["gaps_recording"] = sum(1 for g in gaps if g[0] * 1e6 + a <= rec_end)
        row["threads"] = {str(k): v for k, v in row["threads"].items() if v["role"] != "other" or v["issues"]}
        rows.append(row)
    return rows


if __name__ == "__main__":
    for p in sys.argv[1:]:
        for row in summarize(p):
            print(json.dumps(row))
