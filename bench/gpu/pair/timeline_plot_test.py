#!/usr/bin/env python3
"""Tests of timeline_plot.py on a synthetic trace (no GPU): label parsing, the window, the picture."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import timeline_plot as tp  # noqa: E402


def trace(path):
    ev = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "device 0 node #0 (132 units: 0-131)"}},
          {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "device 0 node #1 (16 units: 0-7,64-71)"}}]
    for i in range(100):
        ev.append({"name": "k", "cat": "gpt (client 1)", "ph": "X", "pid": 1, "tid": 0, "ts": i * 100.0, "dur": 90.0})
    ev.append({"name": "k", "cat": "resnet (client 2)", "ph": "X", "pid": 0, "tid": 0, "ts": 9950.0, "dur": 40.0})
    with open(path, "w") as f:
        json.dump({"traceEvents": ev}, f)


def main():
    assert tp.units_of("device 0 node #1 (16 units: 0-7,64-71)") == [(0, 7), (64, 71)]
    assert tp.units_of("node 3: 0-15") == []
    with tempfile.TemporaryDirectory() as d:
        t = os.path.join(d, "t.json")
        trace(t)
        labels, spans = tp.load(t)
        assert labels[1].endswith("0-7,64-71)") and len(spans) == 101
        shown, t0 = tp.window(spans, 1000.0)
        assert t0 == 9990.0 - 1000.0, t0
        assert len(shown) == 12, len(shown)  # client 1's ops 89-99 (89 ends at the window's start) and client 2's
        assert all(s + dur >= 0 for s, dur, _, _ in shown)
        png = os.path.join(d, "t.png")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("timeline_plot_test: SKIPPED the picture (no matplotlib)")
        else:
            assert tp.main([t, png, "--window-ms", "1"]) == 0
            assert os.path.getsize(png) > 1000
    print("timeline_plot_test: ok")


if __name__ == "__main__":
    main()
