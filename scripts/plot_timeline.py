#!/usr/bin/env python3
"""Render a vitamin binding timeline (Chrome trace JSON from `vitamin demo --timeline`) as a PNG:
one row per SM, each op drawn over the SMs of the pool node it was bound to, coloured by client.

usage: scripts/plot_timeline.py TRACE.json OUT.png [--from-ms A] [--to-ms B]
Needs matplotlib (pip install matplotlib)."""
import argparse
import json
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--from-ms", type=float, default=0.0)
    ap.add_argument("--to-ms", type=float, default=20.0)
    a = ap.parse_args()
    ev = json.load(open(a.trace))["traceEvents"]
    labels = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M"}
    spans = [e for e in ev if e.get("ph") == "X" and a.from_ms * 1e3 <= e["ts"] <= a.to_ms * 1e3]
    clients = sorted({e["cat"] for e in spans})
    colours = dict(zip(clients, plt.cm.tab10.colors))
    fig, ax = plt.subplots(figsize=(12, 4.5))
    for e in spans:
        for lo, hi in node_sms(labels.get(e["pid"], "")):
            ax.broken_barh([(e["ts"] / 1e3, e["dur"] / 1e3)], (lo, hi - lo + 1), facecolors=colours[e["cat"]],
                           edgecolor="black", linewidth=0.2, alpha=0.85)
    for c in clients:
        ax.plot([], [], color=colours[c], linewidth=8, label=c)
    ax.set_xlabel("virtual time (ms)")
    ax.set_ylabel("SM")
    ax.set_ylim(0, 132)
    ax.set_xlim(a.from_ms, a.to_ms)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title("vitamin binding timeline (simulated H200): each launch, unchanged, on the SMs of the pool node it was bound to")
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
