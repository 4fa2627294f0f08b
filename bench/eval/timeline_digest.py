"""A compact digest of a vitamin daemon binding timeline (`vitamin daemon --timeline FILE`: Chrome
trace JSON, one process per pool node, one thread per lane, one "X" event per completed op).

  python3 timeline_digest.py TRACE.json[.gz] [--bin-s 1]    (prints the digest JSON)

The digest (`digest()`), every duration in ms rounded to 3 decimals:
  nodes:   node label by pid (the trace's process_name metadata; "pid N" where it has none)
  clients: per client (the span's args.client, else its cat):
    bins:  per time bin of `bin_s` seconds (by the span's start, relative to the earliest span of
           the whole trace; empty bins left out): {"bin": i, "t_s": start of the bin, "nodes":
           {label: {"n": spans, "ms": sum of durations, "continued": spans bound by continuation}}}
    total: the whole run per node label: {"n", "ms", "median_ms"}
    graphs: the same for CUDA graph launches (spans named "graph": bound by the daemon, or "graph
           (continued)": launched by the client on its own lease)
Standard library only.
"""
import argparse
import gzip
import json
import statistics
import sys

GRAPH_NAMES = ("graph", "graph (continued)")


def load(path):
    """The trace object of a .json or gzip-compressed .json file."""
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    with (gzip.open(path, "rt") if gz else open(path)) as f:
        return json.load(f)


def _r(x):
    return round(x, 3)


def _pid_order(pid):
    return (0, pid, "") if isinstance(pid, (int, float)) else (1, 0, str(pid))


def _table(durs):
    """{label: [dur ms, ...]} -> {label: {"n", "ms", "median_ms"}}."""
    return {label: {"n": len(ds), "ms": _r(sum(ds)), "median_ms": _r(statistics.median(ds))}
            for label, ds in sorted(durs.items())}


def digest(trace, bin_s=1.0):
    """The digest of a Chrome trace object ({"traceEvents": [...]} or a bare event list)."""
    if not bin_s > 0:
        raise ValueError(f"bin_s must be > 0, not {bin_s}")
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    labels = {}
    spans = []
    for e in events:
        if not isinstance(e, dict):
            continue
        if e.get("ph") == "M" and e.get("name") == "process_name":
            labels[e.get("pid")] = (e.get("args") or {}).get("name", f"pid {e.get('pid')}")
        elif e.get("ph") == "X" and isinstance(e.get("ts"), (int, float)):
            spans.append(e)
    out = {"bin_s": bin_s, "spans": len(spans),
           "nodes": {str(pid): labels[pid] for pid in sorted(labels, key=_pid_order)},
           "clients": {}}
    if not spans:
        return out
    t0 = min(e["ts"] for e in spans)
    t_end = max(e["ts"] + float(e.get("dur") or 0.0) for e in spans)
    out["t0_us"] = t0
    out["length_s"] = _r((t_end - t0) / 1e6)
    per = {}  # client -> (bins {i: {label: [n, ms, continued]}}, totals {label: [ms]}, graph {label: [ms]})
    for e in spans:
        args = e.get("args") or {}
        client = str(args.get("client", e.get("cat", "?")))
        pid = e.get("pid")
        label = labels.get(pid, f"pid {pid}")
        dur_ms = float(e.get("dur") or 0.0) / 1000.0
        bins, total, graph = per.setdefault(client, ({}, {}, {}))
        i = int((e["ts"] - t0) / (bin_s * 1e6))
        cell = bins.setdefault(i, {}).setdefault(label, [0, 0.0, 0])
        cell[0] += 1
        cell[1] += dur_ms
        cell[2] += 1 if args.get("continued") else 0
        total.setdefault(label, []).append(dur_ms)
        if e.get("name") in GRAPH_NAMES:
            graph.setdefault(label, []).append(dur_ms)
    for client, (bins, total, graph) in sorted(per.items()):
        out["clients"][client] = {
            "bins": [{"bin": i, "t_s": _r(i * bin_s),
                      "nodes": {label: {"n": c[0], "ms": _r(c[1]), "continued": c[2]}
                                for label, c in sorted(bins[i].items())}}
                     for i in sorted(bins)],
            "total": _table(total),
            "graphs": _table(graph),
        }
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace", help="the daemon's timeline (.json, or gzip-compressed)")
    ap.add_argument("--bin-s", type=float, default=1.0, help="time bin in seconds (default 1)")
    a = ap.parse_args(argv)
    if not a.bin_s > 0:
        ap.error("--bin-s must be > 0")
    try:
        trace = load(a.trace)
    except (OSError, ValueError) as e:
        print(f"timeline_digest: cannot read {a.trace}: {e}", file=sys.stderr)
        return 2
    json.dump(digest(trace, a.bin_s), sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
