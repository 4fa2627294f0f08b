#!/usr/bin/env python3
"""Where the dispatcher thread was when a launch-first launch waited for its lock, from an op
timeline trace of the shim (VITAMIN_TRACE). For each application-thread launch, the wait is the
time from its step 7 (before the dispatcher lock is taken) to its step 8 (dispatcher and vCtx
locks held). Launches are split by what came before them: `after sync` when the application
thread's previous synchronize call returned at most 3 us before (a launch-sync loop), `other`
otherwise. Prints, per split, how many launches waited more than THRESHOLD us (default 0.5) and
their median wait, and when the dispatcher thread's (thread 0) latest round began relative to
that synchronize call's return; then the waits by the dispatcher thread's latest mark.

Usage: lock_waits.py TRACE.csv [THRESHOLD_US]
"""
import collections
import statistics
import sys

from trace_phases import load

AFTER_SYNC_US = 3.0


def waits(rows):
    """[(wait us, dispatcher's latest mark, split, dispatcher round start minus the app's
    previous sync_exit in us or None)] for every launch with steps 7 and 8."""
    app = next((th for _, tag, th, _ in rows if tag == "launch_enter"), None)
    last_mark = last_round = last_sync_exit = step7 = None
    out = []
    for t, tag, th, arg in rows:
        if th == 0:
            last_mark = f"step{arg}" if tag == "step" else tag
            if tag == "round_begin":
                last_round = t
            continue
        if th != app:
            continue
        if tag == "sync_exit":
            last_sync_exit = t
        elif tag == "step" and arg == 7:
            step7 = (t, last_mark, last_round, last_sync_exit)
        elif tag == "step" and arg == 8 and step7 is not None:
            t7, mark, rnd, sync = step7
            after = sync is not None and (t7 - sync) / 1000 <= AFTER_SYNC_US
            since = (rnd - sync) / 1000 if rnd is not None and sync is not None else None
            out.append(((t - t7) / 1000, mark, "after sync" if after else "other", since))
            step7 = None
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    threshold = float(sys.argv[2]) if len(sys.argv) > 2 else 0.5
    all_ = waits(sorted(load(sys.argv[1]), key=lambda r: r[0]))
    long_ = [w for w in all_ if w[0] > threshold]
    print(f"{sys.argv[1]}: {len(all_)} launch-first launches, {len(long_)} waited over {threshold} us for the locks")
    for split in ("after sync", "other"):
        n = sum(1 for w in all_ if w[2] == split)
        ws = [w for w in long_ if w[2] == split]
        if not ws:
            print(f"  {split}: {n} launches, none waited")
            continue
        rounds = [w[3] for w in ws if w[3] is not None]
        rs = f", the dispatcher's round began p50 {statistics.median(rounds):.2f} us after the sync returned" if rounds else ""
        print(f"  {split}: {n} launches, {len(ws)} waited, wait p50 {statistics.median(w[0] for w in ws):.2f} us{rs}")
    by = collections.defaultdict(list)
    for wait, mark, split, _ in long_:
        by[(mark, split)].append(wait)
    for (mark, split), w in sorted(by.items(), key=lambda kv: -len(kv[1])):
        print(f"  dispatcher's last mark {mark} ({split}): n {len(w)}, wait p50 {statistics.median(w):.2f} us")


if __name__ == "__main__":
    main()
