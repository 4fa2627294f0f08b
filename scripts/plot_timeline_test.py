#!/usr/bin/env python3
"""Tests of plot_timeline.py on a synthetic daemon trace (no GPU): labels, the last-ms window, the PNG."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot_timeline as pt  # noqa: E402


def trace(path):
    ev = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "device 0 node #0: SM 0-131"}},
          {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "device 0 node #1: SM 0-7,64-71"}}]
    for i in range(100):
        ev.append({"name": "k", "cat": "gpt (client 1)", "ph": "X", "pid": 1, "tid": 0, "ts": 5e6 + i * 100.0,
                   "dur": 90.0})
    ev.append({"name": "k", "cat": "resnet (client 2)", "ph": "X", "pid": 0, "tid": 0, "ts": 5e6 + 9950.0,
               "dur": 40.0})
    with open(path, "w") as f:
        json.dump({"traceEvents": ev}, f)


def main():
    assert pt.node_sms("device 0 node #1: SM 0-7,64-71") == [(0, 7), (64, 71)]
    assert pt.node_sms("service (copies, host functions)") == []
    with tempfile.TemporaryDirectory() as d:
        t = os.path.join(d, "t.json")
        trace(t)
        labels, spans = pt.load(t)
        assert labels[1].endswith("SM 0-7,64-71") and len(spans) == 101
        shown, lo, hi = pt.select(spans, 0.0, 20.0, 1.0)
        # The trace ends at 5e6 + 9990 us: client 1's ops 89-99 and client 2's overlap its last 1 ms.
        assert (lo, hi, len(shown)) == (0.0, 1.0, 12), (lo, hi, len(shown))
        assert min(e["ts"] for e in shown) >= -100.0 and max(e["ts"] for e in shown) < 1000.0
        assert pt.select(spans, 0.0, 20.0, None)[0] == [], "absolute windows still select by absolute time"
        # A 1 ms window ending 5 ms before the end: client 1's ops 39-49 (49 starts at 4900 us of
        # 9990, ends at 4990 = the window's end), and not client 2's (it starts after the window).
        shown, _, _ = pt.select(spans, 0.0, 20.0, 1.0, 5.0)
        assert {e["cat"] for e in shown} == {"gpt (client 1)"} and len(shown) == 11, len(shown)
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("plot_timeline_test: SKIPPED the picture (no matplotlib)")
        else:
            png = os.path.join(d, "t.png")
            assert pt.main([t, png, "--last-ms", "1"]) == 0 and os.path.getsize(png) > 1000
    print("plot_timeline_test: ok")


if __name__ == "__main__":
    main()
