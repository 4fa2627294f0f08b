#!/usr/bin/env python3
"""Draws a daemon binding timeline (`vitamin daemon --timeline FILE`, Chrome trace JSON) as a picture:
time across, the device's units down, one rectangle per op over the units of the node it ran on,
coloured by client. Shows the last `--window-ms` of the trace (default 20 ms).

  python3 timeline_plot.py timeline.json out.png [--window-ms 20] [--title TEXT]
"""
import argparse
import json
import re
import sys

LABEL = re.compile(r"\((\d+) units: ([0-9,\-]+)\)")


def units_of(label):
    """Unit runs [(first, last)] from a node label `... (N units: 0-7,16-23)`; [] if absent."""
    m = LABEL.search(label)
    if not m:
        return []
    runs = []
    for part in m.group(2).split(","):
        a, _, b = part.partition("-")
        runs.append((int(a), int(b or a)))
    return runs


def load(path):
    """(labels by pid, spans [(start_us, dur_us, pid, client)]) of a trace file."""
    with open(path) as f:
        doc = json.load(f)
    labels, spans = {}, []
    for e in doc.get("traceEvents", []):
        if e.get("ph") == "M" and e.get("name") == "process_name":
            labels[e["pid"]] = e.get("args", {}).get("name", "")
        elif e.get("ph") == "X":
            spans.append((float(e["ts"]), float(e["dur"]), e["pid"], e.get("cat", "")))
    return labels, spans


def window(spans, window_us):
    """The spans that overlap the last `window_us` of the trace, with times relative to its start."""
    if not spans:
        return [], 0.0
    end = max(s + d for s, d, _, _ in spans)
    t0 = end - window_us
    return [(s - t0, d, p, c) for s, d, p, c in spans if s + d >= t0], t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("png")
    ap.add_argument("--window-ms", type=float, default=20.0)
    ap.add_argument("--title", default="")
    a = ap.parse_args(argv)
    labels, spans = load(a.trace)
    shown, _ = window(spans, a.window_ms * 1000.0)
    if not shown:
        print(f"{a.trace}: no spans", file=sys.stderr)
        return 1
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    clients = sorted({c for _, _, _, c in shown})
    colours = {c: plt.get_cmap("tab10")(i % 10) for i, c in enumerate(clients)}
    top = max((b for lab in labels.values() for _, b in units_of(lab)), default=0) + 1
    fig, ax = plt.subplots(figsize=(10, 4))
    for s, d, pid, c in shown:
        for a0, b0 in units_of(labels.get(pid, "")):
            ax.add_patch(Rectangle((s / 1000.0, a0), max(d, 1.0) / 1000.0, b0 - a0 + 1, color=colours[c], lw=0))
    ax.set_xlim(0, a.window_ms)
    ax.set_ylim(top, 0)
    ax.set_xlabel("time (ms, last %.0f ms of the trace)" % a.window_ms)
    ax.set_ylabel("unit (SM)")
    ax.set_title(a.title or a.trace)
    ax.legend(handles=[Patch(color=colours[c], label=c) for c in clients], loc="upper right", fontsize=7)
    fig.tight_layout()
    fig.savefig(a.png, dpi=110)
    print(f"{a.png}: {len(shown)} spans of {len(clients)} clients")
    return 0


if __name__ == "__main__":
    sys.exit(main())
