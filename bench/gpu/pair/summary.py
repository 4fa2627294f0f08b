"""Summarizes bench/gpu/pair/run.sh's runs (a Markdown table on stdout).

  python3 summary.py RUNS_DIR throughput|digest|scaling|share

throughput: per configuration and round, each job's steps/s over its steps/s alone in the same
round, and their sum (aggregate normalized throughput); median and range over rounds.
digest: each job's parameter digest per run, and whether every run matches the first native one.
scaling: each job alone at an MPS thread percentage (25, 50, 75) over the job alone, and the pair at
shares (GPT/ResNet-50) 75/25, 50/50, 25/75; the best sum of the alone curves at complementary shares is
what a fixed split of the SMs could give the pair if the jobs did not slow each other down.
share: each job alone on half the device, under an MPS 50% share and under vitamin Static (the
daemon, an idle peer holding the other half), over the job alone on the whole device.
"""
import glob
import json
import os
import re
import statistics
import sys

CONFIGS = ["timeslice", "mps", "inproc", "daemon_static", "daemon_throughput"]
LABELS = {
    "timeslice": "time-sliced (no MPS)",
    "mps": "MPS",
    "inproc": "vitamin in-process each (MPS underneath)",
    "daemon_static": "vitamin daemon, Static 50/50",
    "daemon_throughput": "vitamin daemon, Throughput",
}


def load(d):
    runs = {}
    for p in glob.glob(os.path.join(d, "*.json")):
        m = re.match(r"(.+)-(gpt|resnet)\.json$", os.path.basename(p))
        if not m:
            continue
        try:
            runs[(m.group(1), m.group(2))] = json.load(open(p))
        except (OSError, ValueError):
            pass
    return runs


def rounds_of(runs):
    """The round numbers of the `rN-...` runs, ascending."""
    return sorted({int(t.split("-")[0][1:]) for t, _ in runs if re.match(r"r\d+-", t)})


def cell(vals, fmt="{:.3f}"):
    """The median of `vals` (formatted by `fmt`) and, over several, their range; "-" for none."""
    if not vals:
        return "-"
    return fmt.format(statistics.median(vals)) + (f" ({min(vals):.3f}-{max(vals):.3f})" if len(vals) > 1 else "")


def throughput(runs):
    rounds = rounds_of(runs)
    rows, agg = [], {}
    for c in CONFIGS:
        per = []
        for r in rounds:
            alone = {m: runs.get((f"r{r}-alone", m), {}).get("steps_per_s") for m in ("gpt", "resnet")}
            got = {m: runs.get((f"r{r}-{c}", m), {}).get("steps_per_s") for m in ("gpt", "resnet")}
            if all(alone.values()) and all(got.values()):
                norm = {m: got[m] / alone[m] for m in got}
                per.append((norm["gpt"], norm["resnet"], norm["gpt"] + norm["resnet"]))
        if per:
            agg[c] = [p[2] for p in per]
            med = [statistics.median(p[i] for p in per) for i in range(3)]
            spread = f"{min(p[2] for p in per):.3f}-{max(p[2] for p in per):.3f}"
            rows.append(f"| {LABELS[c]} | {med[0]:.3f} | {med[1]:.3f} | **{med[2]:.3f}** | {spread} | {len(per)} |")
        else:
            rows.append(f"| {LABELS[c]} | - | - | - | no complete round | 0 |")
    alone = []
    for r in rounds:
        a = [runs.get((f"r{r}-alone", m), {}).get("steps_per_s") for m in ("gpt", "resnet")]
        alone.append(" / ".join("-" if x is None else f"{x:.2f}" for x in a))
    out = ["| configuration | GPT (norm.) | ResNet-50 (norm.) | aggregate | aggregate range | rounds |",
           "| --- | --- | --- | --- | --- | --- |"] + rows
    out.append("")
    out.append("Alone, steps/s (GPT / ResNet-50) per round: " + "; ".join(alone))
    if "mps" in agg and "daemon_throughput" in agg:
        m, t = statistics.median(agg["mps"]), statistics.median(agg["daemon_throughput"])
        out.append(f"Daemon Throughput / MPS (medians): {t / m:.3f}x (target >= 1.10x)")
    return "\n".join(out)


def scaling(runs):
    rounds = rounds_of(runs)
    pcts = (25, 50, 75)

    def norm(tag, m):
        vals = []
        for r in rounds:
            a = runs.get((f"r{r}-alone", m), {}).get("steps_per_s")
            g = runs.get((f"r{r}-{tag}", m), {}).get("steps_per_s")
            if a and g:
                vals.append(g / a)
        return vals

    out = ["| MPS thread percentage | GPT alone (norm.) | ResNet-50 alone (norm.) |", "| --- | --- | --- |"]
    curve = {}
    for p in pcts:
        curve[p] = {m: norm(f"pct{p}", m) for m in ("gpt", "resnet")}
        out.append(f"| {p}% | {cell(curve[p]['gpt'])} | {cell(curve[p]['resnet'])} |")
    out += ["", "| shares GPT / ResNet-50 | GPT (norm.) | ResNet-50 (norm.) | aggregate | "
            "sum of the alone curves |", "| --- | --- | --- | --- | --- |"]
    bound = None
    for p in pcts:
        g, n = norm(f"split{p}", "gpt"), norm(f"split{p}", "resnet")
        ag, an = curve[p]["gpt"], curve.get(100 - p, {}).get("resnet", [])
        agg = [x + y for x, y in zip(g, n)] if len(g) == len(n) else []
        alone_sum = statistics.median(ag) + statistics.median(an) if ag and an else None
        if alone_sum is not None:
            bound = alone_sum if bound is None else max(bound, alone_sum)
        out.append(f"| {p} / {100 - p} | {cell(g)} | {cell(n)} | **{cell(agg)}** | "
                   f"{'-' if alone_sum is None else f'{alone_sum:.3f}'} |")
    out.append("")
    out.append("Best sum of the alone curves at complementary shares: "
               + ("-" if bound is None else f"{bound:.3f}"))
    return "\n".join(out)


def share(runs):
    rounds = rounds_of(runs)
    out = ["| job | alone, whole device (steps/s) | MPS 50% share (norm.) | vitamin Static half (norm.) | "
           "Static / MPS |", "| --- | --- | --- | --- | --- |"]
    for m in ("gpt", "resnet"):
        alone, mps, half = [], [], []
        for r in rounds:
            a = runs.get((f"r{r}-alone", m), {}).get("steps_per_s")
            p = runs.get((f"r{r}-mps50", m), {}).get("steps_per_s")
            h = runs.get((f"r{r}-static_half", m), {}).get("steps_per_s")
            if a:
                alone.append(a)
                if p:
                    mps.append(p / a)
                if h:
                    half.append(h / a)
        ratio = f"{statistics.median(half) / statistics.median(mps):.3f}" if mps and half else "-"
        out.append(f"| {m} | {cell(alone, '{:.2f}')} | {cell(mps)} | {cell(half)} | {ratio} |")
    return "\n".join(out)


def digest(runs):
    out = ["| job | run | digest (first 16) | equal to native1 |", "| --- | --- | --- | --- |"]
    ok = True
    for m in ("gpt", "resnet"):
        ref = runs.get(("native1", m), {}).get("digest")
        for tag in sorted(t for t, mm in runs if mm == m):
            d = runs[(tag, m)].get("digest")
            same = d is not None and d == ref
            ok &= same or tag == "native1"
            out.append(f"| {m} | {tag} | {(d or '-')[:16]} | {'yes' if same else 'NO'} |")
    out.append("")
    out.append("all identical: " + ("yes" if ok else "NO"))
    return "\n".join(out)


if __name__ == "__main__":
    d, part = sys.argv[1], sys.argv[2]
    runs = load(d)
    print({"throughput": throughput, "digest": digest, "scaling": scaling, "share": share}[part](runs))
