#!/usr/bin/env python3
"""Render a vitamin binding timeline (Chrome trace JSON from `vitamin demo --timeline` or
`vitamin daemon --timeline`) as a PNG: one row per SM, each op drawn over the SMs of the pool node it
was bound to, coloured by client.

usage: scripts/plot_timeline.py TRACE.json OUT.png [--from-ms A] [--to-ms B] [--last-ms W [--ago-ms E]] [--title T]
`--last-ms W` shows the trace's last W ms (a daemon's trace is on the host's monotonic clock), with
times relative to the start of that window; with `--ago-ms E` the window ends E ms before the trace's
end (away from the jobs' final synchronizations). Needs matplotlib (pip install matplotlib)."""
import argparse
import json
import re
import sys


def node_sms(label):
    """'node #3: SM 0-15' -> list of (first, last) runs."""
    m = re.search(r"SM ([0-9,\-]+)", label)
    if not m:
        return []
    runs = []
    for part in m.group(1).split(","):
        a, _, b = part.partition("-")
        runs.append((int(a), int(b or a)))
    return runs


def load(path):
    """(labels by pid, span events) of a trace file."""
    with open(path) as f:
        ev = json.load(f)["traceEvents"]
    labels = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M"}
    return labels, [e for e in ev if e.get("ph") == "X"]


def select(spans, from_ms, to_ms, last_ms, ago_ms=0.0):
    """(spans shown, with ts relative to the window's origin, window start ms, window end ms)."""
    if last_ms is not None:
        end = max((e["ts"] + e["dur"] for e in spans), default=0.0) - ago_ms * 1e3
        t0 = end - last_ms * 1e3
        shown = [dict(e, ts=e["ts"] - t0) for e in spans if e["ts"] + e["dur"] >= t0 and e["ts"] <= end]
        return shown, 0.0, last_ms
    return [e for e in spans if from_ms * 1e3 <= e["ts"] <= to_ms * 1e3], from_ms, to_ms


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--from-ms", type=float, default=0.0)
    ap.add_argument("--to-ms", type=float, default=20.0)
    ap.add_argument("--last-ms", type=float, help="show the trace's last W ms instead")
    ap.add_argument("--ago-ms", type=float, default=0.0, help="with --last-ms: end the window this long before the end")
    ap.add_argument("--title", default="vitamin binding timeline (simulated H200): each launch, unchanged, "
                                        "on the SMs of the pool node it was bound to")
    a = ap.parse_args(argv)
    labels, spans = load(a.trace)
    shown, lo_ms, hi_ms = select(spans, a.from_ms, a.to_ms, a.last_ms, a.ago_ms)
    if not shown:
        print(f"{a.trace}: no spans in the window", file=sys.stderr)
        return 1
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    clients = sorted({e["cat"] for e in shown})
    colours = dict(zip(clients, plt.cm.tab10.colors))
    top = max((hi for lab in labels.values() for _, hi in node_sms(lab)), default=131) + 1
    fig, ax = plt.subplots(figsize=(12, 4.5))
    for e in shown:
        for lo, hi in node_sms(labels.get(e["pid"], "")):
            ax.broken_barh([(e["ts"] / 1e3, e["dur"] / 1e3)], (lo, hi - lo + 1), facecolors=colours[e["cat"]],
                           edgecolor="black", linewidth=0.2, alpha=0.85)
    for c in clients:
        ax.plot([], [], color=colours[c], linewidth=8, label=c)
    ax.set_xlabel("time (ms)" if a.last_ms is not None else "virtual time (ms)")
    ax.set_ylabel("SM")
    ax.set_ylim(0, top)
    ax.set_xlim(lo_ms, hi_ms)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(a.title)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"{a.out}: {len(shown)} spans of {len(clients)} clients")
    return 0


if __name__ == "__main__":
    sys.exit(main())
