#!/usr/bin/env python3
"""Where the slowest synchronous segments lose their time, from an op timeline trace of the shim
(VITAMIN_TRACE=path; runtime/src/trace.rs).

Segments are those of trace_phases.py: what an application thread did from its first launch
after a synchronize call up to and including the next synchronize call (chain_bench.cu: N=8 the
operator, N=1 the small op). A segment's duration runs from its first `launch_enter` to its
`sync_exit`. The script compares the slowest segments (the top TAIL share, at least one) with the
middle ones (those between the 40th and 60th percentile). For every tag it gives the median time
of its first occurrence after the segment began, in both groups, and how much later it came in
the tail. Tags are listed in the middle group's order. The growth of that lateness from one tag
to the next shows where the tail's extra time accrues. Tags of other threads are prefixed `d_`,
as in trace_phases.py. The share of segments in which a tag occurs is given for each group: a tag
that occurs mostly in the tail (a lock wait, a dispatcher round) points at a cause. Last, the
duration of each segment's first driver call made by its own thread (`issue_begin` to
`issue_end`) over all segments, and how many marks other threads made during the calls that took
more than twice the median (work of vitamin's own threads overlapping them).

Usage: trace_tail.py TRACE.csv [N] [TAIL]   (defaults: N 8, TAIL 0.05)
"""
import statistics

from trace_phases import segment_args, segments


def first_times(rows, s0, e0):
    """Each tag's first time in the segment (us after its first launch entered), and the
    segment's duration."""
    t0, th = rows[s0][0], rows[s0][2]
    seen = {}
    for t, tag, thr, arg in rows[s0 : e0 + 1]:
        if tag == "step":
            tag = f"step{arg}"
        seen.setdefault(tag if thr == th else "d_" + tag, (t - t0) / 1000)
    return seen, (rows[e0][0] - t0) / 1000


def split(rows, n, tail):
    """(middle, tail) lists of (first times, duration) for segments of `n` launches."""
    segs = sorted((first_times(rows, s0, e0) for s0, e0 in segments(rows, n)), key=lambda s: s[1])
    if not segs:
        return [], []
    k = max(1, int(len(segs) * tail))
    lo, hi = int(len(segs) * 0.4), max(int(len(segs) * 0.6), int(len(segs) * 0.4) + 1)
    return segs[lo:hi], segs[-k:]


def compare(middle, tail):
    """Rows (tag, share in middle, share in tail, median in middle, median in tail, lateness,
    lateness growth over the previous row), in the middle group's order. Tags that occur in
    fewer than half of either group's segments have no medians (None) and are listed last."""
    tags = {t for s, _ in middle + tail for t in s}
    out, rest = [], []
    for tag in tags:
        m = [s[tag] for s, _ in middle if tag in s]
        t = [s[tag] for s, _ in tail if tag in s]
        sm, st = len(m) / len(middle), len(t) / len(tail)
        if sm >= 0.5 and st >= 0.5:
            out.append([tag, sm, st, statistics.median(m), statistics.median(t)])
        else:
            rest.append([tag, sm, st, None, None, None, None])
    out.sort(key=lambda r: r[3])
    prev = 0.0
    for r in out:
        late = r[4] - r[3]
        r += [late, late - prev]
        prev = late
    return out + sorted(rest, key=lambda r: -r[2])


def first_calls(rows, n):
    """Per segment of `n` launches: (duration of its thread's first driver call in us, number of
    other threads' marks during it)."""
    out = []
    for s0, e0 in segments(rows, n):
        th = rows[s0][2]
        begin = next((j for j in range(s0, e0) if rows[j][1] == "issue_begin" and rows[j][2] == th), None)
        if begin is None:
            continue
        end = next((j for j in range(begin, e0) if rows[j][1] == "issue_end" and rows[j][2] == th), None)
        if end is None:
            continue
        others = sum(1 for j in range(begin, end) if rows[j][2] != th)
        out.append(((rows[end][0] - rows[begin][0]) / 1000, others))
    return out


def main():
    rows, n, tail = segment_args(__doc__, 0.05)
    middle, slow = split(rows, n, tail)
    if not middle:
        print(f"no segments of {n} launches")
        return
    dm = statistics.median(d for _, d in middle)
    ds = statistics.median(d for _, d in slow)
    print(f"segments of {n} launches: middle {len(middle)} (duration median {dm:.2f} us), "
          f"tail {len(slow)} (median {ds:.2f} us, {ds - dm:+.2f})")
    print(f"  {'tag':20s} {'in mid':>6s} {'in tail':>7s} {'mid us':>8s} {'tail us':>8s} {'late':>7s} {'growth':>7s}")
    for tag, sm, st, m, t, late, growth in compare(middle, slow):
        if m is None:
            print(f"  {tag:20s} {sm:6.0%} {st:7.0%}")
        else:
            print(f"  {tag:20s} {sm:6.0%} {st:7.0%} {m:8.2f} {t:8.2f} {late:+7.2f} {growth:+7.2f}")
    calls = first_calls(rows, n)
    if calls:
        d = sorted(c for c, _ in calls)
        med = statistics.median(d)
        slow = [o for c, o in calls if c > 2 * med]
        print(f"  first driver call of the segment's thread: p50 {med:.2f} us, p90 {d[9 * len(d) // 10]:.2f}, "
              f"max {d[-1]:.2f} ({len(d)} segments); {len(slow)} took more than twice the median, "
              f"with {sum(slow)} marks of other threads during them")


if __name__ == "__main__":
    main()
