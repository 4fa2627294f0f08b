"""Tables (Markdown, stdout) and plots (PNG) from the harness's raw results (bench/eval/README.md).

  python3 summary.py OUT_DIR [OUT_DIR ...] [--plots DIR]

Each OUT_DIR is one harness output (results.json, or rounds/round-N.json if the call was cut
short). What is reported depends on the group's kind:

- train: per scenario and configuration, each tenant's throughput over its throughput alone in the
  same round, and their sum (aggregate normalized throughput); median and range over rounds; the
  geometric mean over scenarios; vitamin's ratio to the strongest baseline per scenario and its
  geometric-mean ratio to each baseline.
- mixed: the latency tenant's p50/p99 (median over rounds) and the background tenants' aggregate
  normalized throughput; p99 and background ratios of vitamin to each baseline.
- serving: TPOT and TTFT SLO violations, TTFT p50/p99, TPOT p90/p99, background throughput;
  TPOT-First against Throughput-Oriented.
- overhead: the operator's p50/p95 and the footprint (process GPU memory, host RSS high-water mark,
  time to the first kernel) per configuration, against native.
- digest: each tenant's digest per configuration and round against its first native run; the
  reshaping treatment's drift for contrast.

Plots need matplotlib; without it the tables are still printed and a note says the plots were skipped.
"""
import argparse
import glob
import json
import math
import os
import statistics
import sys

BASELINES = ["timeslice", "mps", "mps_pct", "vitamin_static", "vitamin_exclusive"]
OURS = ["vitamin_throughput", "vitamin_tpot", "vitamin_throughput_profiled"]
LABELS = {
    "alone": "native, alone",
    "timeslice": "time slicing",
    "mps": "MPS",
    "mps_pct": "MPS + thread %",
    "vitamin_inproc": "vitamin in-process",
    "vitamin_nomps": "vitamin in-process, no MPS",
    "vitamin_flat": "vitamin in-process, no MPS, flat pool",
    "vitamin_ondemand": "vitamin in-process, no MPS, on-demand pool",
    "vitamin_full_pool": "vitamin in-process, no MPS, hierarchical pool, every node and lane stream at start-up",
    "vitamin_static": "vitamin Static",
    "vitamin_exclusive": "vitamin Exclusive",
    "vitamin_throughput": "vitamin Throughput",
    "vitamin_tpot": "vitamin TPOT-First",
    "vitamin_chaos": "vitamin Chaos",
    "vitamin_throughput_ref": "vitamin Throughput, reference build",
    "vitamin_tpot_ref": "vitamin TPOT-First, reference build",
    "vitamin_record": "vitamin Chaos, recording a profile",
    "vitamin_throughput_profiled": "vitamin Throughput, sized by the recorded profile",
}


def load(*dirs):
    """One {"meta", "runs"} per directory (results.json, else the per-round files)."""
    groups = []
    for d in dirs:
        p = os.path.join(d, "results.json")
        if os.path.exists(p):
            with open(p) as f:
                groups.append(json.load(f))
            continue
        meta, runs = None, []
        for q in sorted(glob.glob(os.path.join(d, "rounds", "round-*.json"))):
            with open(q) as f:
                doc = json.load(f)
            meta = meta or doc["meta"]
            runs += doc["runs"]
        if meta is None:
            raise SystemExit(f"summary: no results.json or rounds/round-*.json under {d}")
        groups.append({"meta": meta, "runs": runs})
    return merge_parts(groups)


def merge_parts(groups):
    """Outputs of one group's parts (meta.group "NAME:PART", one device call each) become one group:
    each call's rounds keep their own alone runs (renumbered part x 100 + round), configurations
    are the union in order."""
    merged, order = {}, []
    for g in groups:
        base = g["meta"]["group"].split(":")[0]
        if base not in merged:
            m = dict(g["meta"], group=base, configs=list(g["meta"]["configs"]), calls=1)
            merged[base] = {"meta": m, "runs": []}
            order.append(base)
        else:
            m = merged[base]["meta"]
            m["calls"] += 1
            m["configs"] += [c for c in g["meta"]["configs"] if c not in m["configs"]]
            m["wall_s"] = (m.get("wall_s") or 0) + (g["meta"].get("wall_s") or 0)
            m["estimate_s"] = (m.get("estimate_s") or 0) + (g["meta"].get("estimate_s") or 0)
        k = merged[base]["meta"]["calls"]
        for r in g["runs"]:
            merged[base]["runs"].append(dict(r, round=r["round"] if k == 1 else k * 100 + r["round"]))
    return [merged[b] for b in order]


def geomean(xs):
    xs = [x for x in xs if x is not None and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def fmt(x, p=3):
    return "-" if x is None else f"{x:.{p}f}"


def spread(xs, p=3):
    return "-" if not xs else f"{min(xs):.{p}f}-{max(xs):.{p}f}"


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


class Index:
    """Results by (round, config, scenario) -> {tenant: result}; only tenants that finished."""

    def __init__(self, group):
        self.meta = group["meta"]
        self.by, self.slo, self.pool = {}, {}, {}
        for r in group["runs"]:
            pools = {n: t["pool"] for n, t in r.get("tenants", {}).items() if t.get("rc") == 0 and t.get("pool")}
            if pools:
                self.pool[(r["round"], r["config"], r["scenario"])] = pools
            for kind, per in (r.get("slo_targets") or {}).items():
                for t, v in per.items():
                    self.slo.setdefault(r["round"], {}).setdefault(kind, {})[t] = v.get("ms")
            res = {n: t.get("result") for n, t in r.get("tenants", {}).items()
                   if t.get("rc") == 0 and t.get("result") is not None}
            self.by[(r["round"], r["config"], r["scenario"])] = res
        self.rounds = sorted({k[0] for k in self.by})
        self.configs = [c for c in self.meta["configs"]]
        self.scenarios = [s["name"] for s in self.meta["scenarios"]]
        self.members = {s["name"]: s["tenants"] for s in self.meta["scenarios"]}
        self.role = {k: v.get("role", "train") for k, v in self.meta["tenants"].items()}

    def get(self, r, config, scenario):
        return self.by.get((r, config, scenario), {})

    def alone(self, r, tenant, kind="alone"):
        """Tenant's alone result in round r: natively (`alone`) or under MPS (`alone_mps`)."""
        return self.get(r, kind, f"{kind}:{tenant}").get(tenant)

    def norm(self, r, config, scenario, tenants, kind="alone"):
        """Sum of the tenants' normalized throughputs in round r (over their `kind` alone runs),
        None unless all are complete."""
        got = self.get(r, config, scenario)
        parts = []
        for t in tenants:
            a, b = self.alone(r, t, kind), got.get(t)
            if not a or not b or not a.get("throughput") or b.get("throughput") is None:
                return None, None
            parts.append(b["throughput"] / a["throughput"])
        return sum(parts), parts

    def metric(self, config, scenario, tenant, key):
        return [self.get(r, config, scenario).get(tenant, {}).get(key) for r in self.rounds
                if self.get(r, config, scenario).get(tenant, {}).get(key) is not None]


def train_section(ix, plots):
    out = [f"### {ix.meta['group']}: colocated training (aggregate normalized throughput)", ""]
    out.append("| scenario | configuration | per tenant (norm., median) | aggregate (median) | range | rounds |")
    out.append("| --- | --- | --- | --- | --- | --- |")
    table = {}
    for s in ix.scenarios:
        ts = [t for t in ix.members[s] if ix.role.get(t) != "latency"]
        for c in ix.configs:
            per = [ix.norm(r, c, s, ts) for r in ix.rounds]
            per = [p for p in per if p[0] is not None]
            aggs = [p[0] for p in per]
            table[(s, c)] = aggs
            if not per:
                out.append(f"| {s} | {LABELS.get(c, c)} | - | - | no complete round | 0 |")
                continue
            tenants = ", ".join(f"{t} {statistics.median(p[1][i] for p in per):.3f}" for i, t in enumerate(ts))
            out.append(f"| {s} | {LABELS.get(c, c)} | {tenants} | **{statistics.median(aggs):.3f}** | "
                       f"{spread(aggs)} | {len(aggs)} |")
    out += ["", "Geometric mean over scenarios (of the per-scenario medians):", ""]
    out += ["| configuration | geomean aggregate | scenarios |", "| --- | --- | --- |"]
    gm = {}
    for c in ix.configs:
        ms = [med(table[(s, c)]) for s in ix.scenarios]
        ms = [m for m in ms if m is not None]
        gm[c] = geomean(ms) if len(ms) == len(ix.scenarios) else None
        out.append(f"| {LABELS.get(c, c)} | {fmt(gm[c])} | {len(ms)} of {len(ix.scenarios)} |")
    out += ratio_lines(ix, {k: med(v) for k, v in table.items()}, higher_better=True,
                       what="aggregate normalized throughput")
    alone = []
    for t in sorted({t for s in ix.scenarios for t in ix.members[s]}):
        xs = [ix.alone(r, t).get("throughput") for r in ix.rounds if ix.alone(r, t)]
        unit = next((ix.alone(r, t).get("unit", "/s") for r in ix.rounds if ix.alone(r, t)), "/s")
        alone.append(f"{t} {fmt(med(xs), 2)} {unit} ({spread(xs, 2)})")
    out += ["", "Alone (native, per-round normalization; median and range): " + "; ".join(alone), ""]
    out += train_rounds(ix)
    if any(ix.alone(r, t, "alone_mps") for r in ix.rounds for s in ix.scenarios for t in ix.members[s]):
        # The same runs over each tenant alone under MPS: tells what MPS itself does to a job alone.
        cells = []
        for s in ix.scenarios:
            ts = [t for t in ix.members[s] if ix.role.get(t) != "latency"]
            for c in ix.configs:
                aggs = [a for a, _ in (ix.norm(r, c, s, ts, "alone_mps") for r in ix.rounds) if a is not None]
                cells.append(f"{s} {LABELS.get(c, c)} {fmt(med(aggs))}")
        xs = []
        for t in sorted({t for s in ix.scenarios for t in ix.members[s]}):
            v = [ix.alone(r, t, "alone_mps").get("throughput") for r in ix.rounds if ix.alone(r, t, "alone_mps")]
            xs.append(f"{t} {fmt(med(v), 2)} ({spread(v, 2)})")
        out += ["Normalized by each tenant alone under MPS instead (aggregate medians): " + "; ".join(cells),
                "", "Alone under MPS (median and range): " + "; ".join(xs), ""]
    if plots is not None:
        bars(plots, f"{ix.meta['group']}-throughput.png", ix.scenarios, ix.configs, table,
             "aggregate normalized throughput", ix.meta["group"], ref=1.0)
    return out


def train_rounds(ix):
    """Per round (several rounds only): each scenario's tenants alone and, per configuration, the
    aggregate with each tenant's rate and, where MPS ran in that round, the aggregate over MPS's."""
    if len(ix.rounds) < 2:
        return []
    out = ["Per round (each tenant's rate in its unit; alone: that round's native runs):", "",
           "| round | scenario | configuration | aggregate | per tenant | vs MPS (same round) |",
           "| --- | --- | --- | --- | --- | --- |"]
    for s in ix.scenarios:
        ts = [t for t in ix.members[s] if ix.role.get(t) != "latency"]
        for r in ix.rounds:
            rates = [fmt((ix.alone(r, t) or {}).get("throughput"), 2) for t in ts]
            out.append(f"| {r} | {s} | alone | - | " + ", ".join(f"{t} {x}" for t, x in zip(ts, rates)) + " | - |")
            mps = ix.norm(r, "mps", s, ts)[0] if "mps" in ix.configs else None
            for c in ix.configs:
                agg, _ = ix.norm(r, c, s, ts)
                if agg is None:
                    continue
                got = ix.get(r, c, s)
                rates = ", ".join(f"{t} {fmt((got.get(t) or {}).get('throughput'), 2)}" for t in ts)
                vs = f"{agg / mps:.3f}" if mps and c != "mps" else "-"
                out.append(f"| {r} | {s} | {LABELS.get(c, c)} | {agg:.3f} | {rates} | {vs} |")
    return out + [""]


def ratio_lines(ix, medians, higher_better, what):
    """vitamin's figure over the strongest baseline's per scenario, and the geometric-mean ratio to each
    baseline (below 1 is better where lower is better)."""
    out = []
    bases = [c for c in ix.configs if c in BASELINES]
    for o in [c for c in ix.configs if c in OURS]:
        per, vs = [], {b: [] for b in bases}
        for s in ix.scenarios:
            mine = medians.get((s, o))
            got = {b: medians.get((s, b)) for b in bases if medians.get((s, b))}
            if mine is None or not got:
                continue
            best = max(got, key=got.get) if higher_better else min(got, key=got.get)
            per.append(f"{s}: {fmt(mine / got[best])}x vs {LABELS.get(best, best)}")
            for b, v in got.items():
                vs[b].append(mine / v)
        if not per:
            continue
        better = "higher" if higher_better else "lower"
        out += ["", f"{LABELS[o]}, {what} ({better} is better), ratio to the strongest baseline: " + "; ".join(per)]
        each = [f"{LABELS.get(b, b)} {fmt(geomean(v))}x" for b, v in vs.items() if v]
        allr = geomean([x for v in vs.values() for x in v])
        out.append(f"{LABELS[o]}, geometric-mean ratio over scenarios to each baseline: " + "; ".join(each)
                   + f"; over all baselines {fmt(allr)}x")
    return out


def _lat(res, rate, key):
    """A latency tenant's figure, for one rate phase (by_rate) or over the whole window (rate None)."""
    if not res:
        return None
    if rate is None:
        return res.get(key)
    return (res.get("by_rate") or {}).get(rate, {}).get(key)


def mixed_section(ix, plots):
    out = [f"### {ix.meta['group']}: training + latency-critical inference", ""]
    out.append("| scenario | rate /s | configuration | p50 ms | p99 ms (median) | p99 range | background norm. | rounds |")
    out.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
    p99s, bgs, keys, cells = {}, {}, [], []
    p99_rounds, bg_rounds = {}, {}
    for s in ix.scenarios:
        lat = [t for t in ix.members[s] if ix.role.get(t) == "latency"]
        bg = [t for t in ix.members[s] if ix.role.get(t) != "latency"]
        rates = []
        for (r, c, sc), res in ix.by.items():
            for t in lat:
                for k in (res.get(t) or {}).get("by_rate") or {}:
                    if sc == s and k not in rates:
                        rates.append(k)
        rates = sorted(rates, key=float) or [None]
        for c in ix.configs:
            norm = [n for n in (ix.norm(r, c, s, bg)[0] for r in ix.rounds) if n is not None]
            bgs[(s, c)] = med(norm)
            bg_rounds[(s, c)] = norm
        for rate in rates:
            key = s if rate is None else f"{s} @{rate}/s"
            keys.append(key)
            cells.append((s, rate, key))
            for c in ix.configs:
                got = [ix.get(r, c, s).get(t) for r in ix.rounds for t in lat]
                p50 = [x for x in (_lat(g, rate, "p50_ms") for g in got) if x is not None]
                p99 = [x for x in (_lat(g, rate, "p99_ms") for g in got) if x is not None]
                p99s[(key, c)] = med(p99)
                p99_rounds[(key, c)] = p99
                out.append(f"| {s} | {rate or '-'} | {LABELS.get(c, c)} | {fmt(med(p50), 2)} | **{fmt(med(p99), 2)}** | "
                           f"{spread(p99, 2)} | {fmt(bgs[(s, c)])} | {len(p99)} |")
            for t in lat:
                al = [x for x in (_lat(ix.alone(r, t), rate, "p99_ms") for r in ix.rounds) if x is not None]
                out.append(f"| {s} | {rate or '-'} | {t} alone (native) | - | {fmt(med(al), 2)} | {spread(al, 2)} | - | "
                           f"{len(al)} |")
    view = Index.__new__(Index)
    view.__dict__.update(ix.__dict__)
    view.scenarios = keys
    out += ratio_lines(view, p99s, higher_better=False, what="inference p99")
    tpots, tpot_rounds = per_token_table(ix, cells, out)
    if tpots:
        out += ratio_lines(view, tpots, higher_better=False, what="per-token p99")
    out += ratio_lines(ix, bgs, higher_better=True, what="background throughput")
    out += ["", "Goals (issue 25): p99 at most 0.4x MPS's and 0.9x Static's; background at least 1.05x the best "
            "baseline's.", ""]
    if plots is not None:
        # Bars at the median over rounds, whiskers at the rounds' minimum and maximum.
        bars(plots, f"{ix.meta['group']}-p99.png", keys, ix.configs, p99_rounds, "inference p99 (ms)",
             ix.meta["group"])
        if tpot_rounds:
            bars(plots, f"{ix.meta['group']}-per-token-p99.png", keys, ix.configs, tpot_rounds,
                 "per-token p99 (ms)", ix.meta["group"])
        bars(plots, f"{ix.meta['group']}-background.png", ix.scenarios, ix.configs, bg_rounds,
             "background normalized throughput", ix.meta["group"], ref=1.0)
    return out


def per_token_table(ix, cells, out):
    """For latency tenants that streamed their tokens (`--sync-per-token`): the time between
    consecutive tokens of a request (queueing excluded) per (scenario, rate, row key) of `cells` and
    configuration, median over rounds, appended to `out`; returns {(row key, config): p99 median} and
    {(row key, config): [p99 of each round]}."""
    rows, tpots, rounds = [], {}, {}
    for s, rate, key in cells:
        lat = [t for t in ix.members[s] if ix.role.get(t) == "latency"]
        for c in ix.configs:
            got = [ix.get(r, c, s).get(t) for r in ix.rounds for t in lat]
            p50 = [x for x in (_lat(g, rate, "tpot_p50_ms") for g in got) if x is not None]
            p99 = [x for x in (_lat(g, rate, "tpot_p99_ms") for g in got) if x is not None]
            if not p99:
                continue
            tpots[(key, c)] = med(p99)
            rounds[(key, c)] = p99
            rows.append(f"| {s} | {rate or '-'} | {LABELS.get(c, c)} | {fmt(med(p50), 2)} | **{fmt(med(p99), 2)}** | "
                        f"{spread(p99, 2)} | {len(p99)} |")
        for t in lat:
            al = [x for x in (_lat(ix.alone(r, t), rate, "tpot_p99_ms") for r in ix.rounds) if x is not None]
            if al:
                rows.append(f"| {s} | {rate or '-'} | {t} alone (native) | - | {fmt(med(al), 2)} | "
                            f"{spread(al, 2)} | {len(al)} |")
    if rows:
        out += ["", "Per-token time (between consecutive tokens of a request, each token brought to the host; "
                "queueing excluded):", "",
                "| scenario | rate /s | configuration | p50 ms | p99 ms (median) | p99 range | rounds |",
                "| --- | --- | --- | --- | --- | --- | --- |"] + rows
    return tpots, rounds


SERVE_KEYS = [("tpot_violation_pct", "TPOT viol. %"), ("ttft_violation_pct", "TTFT viol. %"),
              ("ttft_p50_ms", "TTFT p50 ms"), ("ttft_p99_ms", "TTFT p99 ms"), ("tpot_p90_ms", "TPOT p90 ms"),
              ("tpot_p99_ms", "TPOT p99 ms"), ("completed", "requests done")]


SLO_FACTORS = (1.25, 1.5, 2.0)


def _pct_over(xs, limit):
    return 100.0 * sum(x > limit for x in xs) / len(xs) if xs and limit else None


def serve_violations(ix, r, res, t, tpot_slo=None):
    """(TPOT, TTFT) SLO violation % of serving tenant t's result `res` in round r, recomputed from its
    per-request records at the round's targets (the alone run is judged by the colocated runs'
    targets); the tenant's own figures where it kept no records or the round has no targets."""
    if not res:
        return None, None
    targets = ix.slo.get(r, {})
    tp = tpot_slo or targets.get("tpot", {}).get(t)
    tt = targets.get("ttft", {}).get(t)
    a = _pct_over(res.get("tpot_ms"), tp) if isinstance(res.get("tpot_ms"), list) else None
    b = _pct_over(res.get("ttft_ms"), tt) if isinstance(res.get("ttft_ms"), list) else None
    return (res.get("tpot_violation_pct") if a is None else a), (res.get("ttft_violation_pct") if b is None else b)


def serving_section(ix, plots):
    out = [f"### {ix.meta['group']}: serving replay (Azure conversation trace)", ""]
    out.append("| scenario | configuration | " + " | ".join(h for _, h in SERVE_KEYS) + " | background norm. | rounds |")
    out.append("| --- | --- | " + " | ".join("---" for _ in SERVE_KEYS) + " | --- | --- |")
    viol, viol_rounds, sens, by_round, bg_norm = {}, {}, [], {}, {}
    for s in ix.scenarios:
        srv = [t for t in ix.members[s] if ix.role.get(t) == "serving"]
        bg = [t for t in ix.members[s] if ix.role.get(t) not in ("serving", "latency")]
        if len(srv) == 1:
            sens += [f"| {s} | {LABELS.get(c, c) if c != 'alone' else srv[0] + ' alone (native)'} | "
                     + " | ".join(fmt(med(_sensitivity(ix, s, c, srv[0], f)), 2) for f in SLO_FACTORS) + " |"
                     for c in ix.configs + ["alone"]]
        for c in ix.configs + ["alone"]:
            if c == "alone":
                if len(srv) != 1:
                    continue
                pairs = [(r, srv[0], ix.alone(r, srv[0]) or {}) for r in ix.rounds]
                norm = []
            else:
                pairs = [(r, t, ix.get(r, c, s).get(t)) for r in ix.rounds for t in srv if ix.get(r, c, s).get(t)]
                norm = [v for v in (ix.norm(r, c, s, bg)[0] for r in ix.rounds) if v is not None]
            pairs = [p for p in pairs if p[2]]
            vals = {k: med([res.get(k) for _, _, res in pairs]) for k, _ in SERVE_KEYS}
            v = [serve_violations(ix, r, res, t) for r, t, res in pairs]
            by_round[(s, c)] = {r: x[0] for (r, _, _), x in zip(pairs, v)}
            vals["tpot_violation_pct"], vals["ttft_violation_pct"] = med([x[0] for x in v]), med([x[1] for x in v])
            viol[(s, c)] = (vals["tpot_violation_pct"], vals["ttft_violation_pct"])
            viol_rounds[(s, c)] = [x[0] for x in v if x[0] is not None]
            bg_norm[(s, c)] = med(norm)
            cells = " | ".join(fmt(vals[k], 0 if k == "completed" else 2) for k, _ in SERVE_KEYS)
            label = f"{srv[0]} alone (native)" if c == "alone" else LABELS.get(c, c)
            out.append(f"| {s} | {label} | {cells} | {fmt(med(norm))} | {len(pairs)} |")
        a, b = viol.get((s, "vitamin_throughput")), viol.get((s, "vitamin_tpot"))
        if a and b and a[0] is not None and b[0] is not None:
            red = (a[0] - b[0]) / a[0] * 100 if a[0] else 0.0
            dt = (b[1] - a[1]) if a[1] is not None and b[1] is not None else None
            na, nb = bg_norm.get((s, "vitamin_throughput")), bg_norm.get((s, "vitamin_tpot"))
            ratio = f" ({nb / na:.2f}x)" if na and nb is not None else ""
            out += ["", f"{s}: TPOT-First vs Throughput-Oriented: TPOT SLO violations {fmt(a[0], 2)}% -> "
                    f"{fmt(b[0], 2)}% ({red:+.1f}% relative reduction; goal >= 40%), TTFT violations "
                    f"{'-' if dt is None else f'{dt:+.2f}'} points (goal <= +2); background (normalized) "
                    f"{fmt(na)} -> {fmt(nb)}{ratio}"]
            ra, rb = by_round[(s, "vitamin_throughput")], by_round[(s, "vitamin_tpot")]
            out += ["", "TPOT SLO violations per round, Throughput -> TPOT-First: " + "; ".join(
                f"round {r} {fmt(ra[r], 2)}% -> {fmt(rb[r], 2)}%" for r in sorted(set(ra) & set(rb))), ""]
    out += ["Violation rates are recomputed from every finished request's TTFT and TPOT at the round's "
            "targets (the alone run at the colocated runs' targets).", ""]
    if sens:
        out += ["TPOT SLO violations (%, median over rounds) at other targets: a factor times the round's alone "
                "TPOT p50.", "", "| scenario | configuration | " + " | ".join(f"{f}x" for f in SLO_FACTORS) + " |",
                "| --- | --- | " + " | ".join("---" for _ in SLO_FACTORS) + " |"] + sens + [""]
    if plots is not None:
        bars(plots, f"{ix.meta['group']}-tpot-violations.png", ix.scenarios, ix.configs, viol_rounds,
             "TPOT SLO violations (%)", ix.meta["group"])
    return out


def _sensitivity(ix, s, c, t, factor):
    """Per round: t's TPOT violation % in configuration c (or alone) at factor x its alone TPOT p50."""
    got = []
    for r in ix.rounds:
        base = (ix.alone(r, t) or {}).get("tpot_p50_ms")
        res = ix.alone(r, t) if c == "alone" else ix.get(r, c, s).get(t)
        if base and res and isinstance(res.get("tpot_ms"), list):
            got.append(_pct_over(res["tpot_ms"], factor * base))
    return got


FOOT_KEYS = [("gpu_used_mib", "process GPU memory MiB"), ("vm_hwm_mib", "host RSS high-water MiB"),
             ("first_kernel_s", "start to first kernel s"), ("device_free_delta_mib", "device memory taken MiB")]


def overhead_section(ix, plots):
    out = [f"### {ix.meta['group']}: overhead and footprint", ""]
    configs = ["alone"] + ix.configs
    rows, row_scen = [], []
    for s in ix.scenarios:
        for t in ix.members[s]:
            for c in configs:
                res = [ix.alone(r, t) if c == "alone" else ix.get(r, c, s).get(t) for r in ix.rounds]
                res = [x for x in res if x]
                rows.append((t, c, res))
                row_scen.append((s, c))
    op = [(t, c, res) for t, c, res in rows if any("p95_us" in x for x in res)]
    if op:
        out += ["| tenant | configuration | p50 us | p95 us (median) | p95 range | p95 vs native | rounds |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        native = {t: med([x.get("p95_us") for x in res]) for t, c, res in op if c == "alone"}
        p95 = {}
        for t, c, res in op:
            a = [x.get("p95_us") for x in res if x.get("p95_us") is not None]
            m, n = med(a), native.get(t)
            p95[(t, c)] = a
            rel = f"{(m / n - 1) * 100:+.1f}%" if m is not None and n else "-"
            out.append(f"| {t} | {LABELS.get(c, c)} | {fmt(med([x.get('p50_us') for x in res]), 1)} | "
                       f"**{fmt(m, 1)}** | {spread(a, 1)} | {rel} | {len(a)} |")
        out.append("")
        if plots is not None:
            bars(plots, f"{ix.meta['group']}-operator-p95.png", sorted({t for t, _, _ in op}), configs, p95,
                 "operator p95 (us)", ix.meta["group"])
    # scenarios of several footprint tenants get their own table (each tenant's device reading
    # there includes the others' memory, so it has no native counterpart)
    shared = {s for s in ix.scenarios if len(ix.members[s]) > 1}
    solo = [(t, c, res) for (t, c, res), (s, _) in zip(rows, row_scen) if s not in shared or c == "alone"]
    fp = [(t, c, res) for t, c, res in solo if any("vm_hwm_mib" in x for x in res)]
    if fp:
        out += ["| tenant | configuration | " + " | ".join(h for _, h in FOOT_KEYS) + " | rounds |",
                "| --- | --- | " + " | ".join("---" for _ in FOOT_KEYS) + " | --- |"]
        native = {t: {k: med([x.get(k) for x in res]) for k, _ in FOOT_KEYS} for t, c, res in fp if c == "alone"}
        for t, c, res in fp:
            cells = []
            for k, _ in FOOT_KEYS:
                m, n = med([x.get(k) for x in res]), native.get(t, {}).get(k)
                d = f" ({m - n:+.1f})" if c != "alone" and m is not None and n is not None else ""
                cells.append(fmt(m, 2 if k == "first_kernel_s" else 0) + d)
            out.append(f"| {t} | {LABELS.get(c, c)} | " + " | ".join(cells) + f" | {len(res)} |")
        out += ["", "In parentheses: the difference to native (vitamin's pool and runtime). Goals (issue 25): at "
                "most 400 MiB GPU memory and 100 MiB host RSS.", ""]
    for sc in sorted(shared):
        out += footprint_side_by_side(ix, sc)
    out += pool_table(ix, [(t, c) for t, c, _ in rows if c != "alone"])
    return out


def footprint_side_by_side(ix, scenario):
    """Several footprint tenants at once: per configuration the device memory in use at the end of
    the window (the median of the tenants' readings in a run, then over rounds), its difference to
    the same tenants under MPS natively, per process, and each tenant's host RSS against its native
    alone run."""
    tenants = ix.members[scenario]
    per = {}
    for c in ix.configs:
        dev, rss = [], {t: [] for t in tenants}
        for r in ix.rounds:
            got = ix.get(r, c, scenario)
            vals = [got[t].get("device_free_delta_mib") for t in tenants if got.get(t)]
            vals = [v for v in vals if v is not None]
            if len(vals) == len(tenants):
                dev.append(med(vals))
            for t in tenants:
                if got.get(t) and got[t].get("vm_hwm_mib") is not None:
                    rss[t].append(got[t]["vm_hwm_mib"])
        per[c] = (dev, rss)
    if not any(d for d, _ in per.values()):
        return []
    native_rss = {t: med([(ix.alone(r, t) or {}).get("vm_hwm_mib") for r in ix.rounds]) for t in tenants}
    base = med(per["mps"][0]) if "mps" in per and per["mps"][0] else None
    n = len(tenants)
    out = [f"{n} processes side by side (`{scenario}`): device memory in use at the end of the window, and "
           "each process's host RSS high-water mark", "",
           "| configuration | device memory in use MiB (median) | range | vs MPS | per process vs MPS | "
           + " | ".join(f"{t} RSS MiB (vs native alone)" for t in tenants) + " | rounds |",
           "| --- | --- | --- | --- | --- | " + " | ".join("---" for _ in tenants) + " | --- |"]
    for c, (dev, rss) in per.items():
        m = med(dev)
        d = m - base if m is not None and base is not None and c != "mps" else None
        cells = []
        for t in tenants:
            r_ = med(rss[t])
            nr = native_rss.get(t)
            cells.append(fmt(r_, 0) + (f" ({r_ - nr:+.1f})" if r_ is not None and nr is not None else ""))
        out.append(f"| {LABELS.get(c, c)} | {fmt(m, 0)} | {spread(dev, 0)} | {'-' if d is None else f'{d:+.0f}'} | "
                   f"{'-' if d is None else f'{d / n:+.0f}'} | " + " | ".join(cells) + f" | {len(dev)} |")
    out += ["", "Under MPS nvidia-smi lists the MPS server, not the processes, so the device's memory in use "
            "(total - free, read by each tenant at the end of its window) stands for the processes' GPU "
            "memory; against the same processes under MPS natively, the difference is vitamin's pools and "
            "runtimes (goal, issue 25: at most 400 MiB GPU memory and 100 MiB host RSS per process).", ""]
    return out


def pool_table(ix, pairs):
    """The pool as each vitamin configuration realized it (from the runs' censuses): layout, nodes,
    partitions created at start and on the dispatch path, realization and creation times."""
    lines = []
    for t, c in pairs:
        got = [ix.pool.get((r, c, s), {}).get(t) for r in ix.rounds for s in ix.scenarios]
        got = [p for p in got if p]
        if not got:
            continue
        od = [p.get("on_demand") or {} for p in got]
        lines.append(f"| {t} | {LABELS.get(c, c)} | {got[0].get('layout') or '-'} | {fmt(med([p.get('nodes') for p in got]), 0)} | "
                     f"{fmt(med([p.get('created') for p in got]), 0)} | {fmt(med([p.get('realize_ms') for p in got]), 1)} | "
                     f"{spread([p.get('realize_ms') for p in got if p.get('realize_ms') is not None], 1)} | "
                     f"{fmt(med([o.get('created') for o in od]), 0)} | {fmt(med([o.get('total_ms') for o in od]), 1)} | "
                     f"{fmt(med([o.get('max_ms') for o in od]), 1)} | {len(got)} |")
    if not lines:
        return []
    return ["| tenant | configuration | pool | nodes | partitions at exit | start-up realization ms (median) | range | "
            "created on dispatch | creation ms total | longest creation ms | runs |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"] + lines + [
            "", "From each run's census: the pool's layout and nodes, the partitions that existed at exit, the time "
            "the process took to realize its pool before the first launch, and (on-demand pools) the partitions "
            "created on the dispatch path and how long those creations took.", ""]


def digest_section(ix, _plots):
    out = [f"### {ix.meta['group']}: determinism under colocation", ""]
    out += ["| scenario | tenant | configuration | round | digest (first 16) | equal to native |",
            "| --- | --- | --- | --- | --- | --- |"]
    ok, drift = True, []
    tenants = sorted({t for s in ix.scenarios for t in ix.members[s]})
    ref = {}
    for t in tenants:
        first = next((ix.alone(r, t) for r in ix.rounds if ix.alone(r, t)), None)
        ref[t] = first.get("digest") if first else None
        for r in ix.rounds:
            a = ix.alone(r, t)
            if a:
                same = a.get("digest") == ref[t]
                ok &= same
                out.append(f"| alone | {t} | native | {r} | {str(a.get('digest'))[:16]} | {'yes' if same else 'NO'} |")
                if a.get("reshape"):
                    drift.append((t, r, a["reshape"]))
    for s in ix.scenarios:
        for c in ix.configs:
            for r in ix.rounds:
                got = ix.get(r, c, s)
                for t in ix.members[s]:
                    d = got.get(t, {}).get("digest")
                    same = d is not None and d == ref.get(t)
                    ok &= same
                    out.append(f"| {s} | {t} | {LABELS.get(c, c)} | {r} | {(d or '-')[:16]} | "
                               f"{'yes' if same else 'NO'} |")
    out += ["", "all identical to native: " + ("yes" if ok else "NO"), ""]
    if drift:
        out += ["Reshaping treatment (native, contrast; the tenant recomputes its output with a changed "
                "reduction split):", "", "| tenant | round | max abs logit diff | tokens changed | bitwise equal |",
                "| --- | --- | --- | --- | --- |"]
        for t, r, d in drift:
            out.append(f"| {t} | {r} | {d.get('max_abs_diff', '-')} | {d.get('tokens_changed', '-')} | "
                       f"{'yes' if d.get('bitwise_equal') else 'no'} |")
        out.append("")
    return out


SECTIONS = {"train": train_section, "mixed": mixed_section, "serving": serving_section,
            "overhead": overhead_section, "digest": digest_section}


def bars(plots, name, groups, configs, values, ylabel, title, ref=None):
    """Grouped bars: one group per scenario, one bar per configuration (median, min-max whiskers)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    os.makedirs(plots, exist_ok=True)
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(groups) * max(1, len(configs)) / 3), 4))
    w = 0.8 / max(1, len(configs))
    for i, c in enumerate(configs):
        xs, ys, lo, hi = [], [], [], []
        for j, s in enumerate(groups):
            v = [x for x in values.get((s, c), []) if x is not None]
            if not v:
                continue
            m = statistics.median(v)
            xs.append(j + (i - (len(configs) - 1) / 2) * w)
            ys.append(m)
            lo.append(m - min(v))
            hi.append(max(v) - m)
        if xs:
            ax.bar(xs, ys, w, yerr=[lo, hi], capsize=2, label=LABELS.get(c, c))
    if ref is not None:
        ax.axhline(ref, color="grey", lw=0.8, ls="--")
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, rotation=15, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(plots, name)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def daemon_view(group):
    """Per run through the daemon: the latency-critical clients' standing node in each status
    snapshot, each tenant's bindings refused by its partitions (census) and the unit sets that
    refused its cluster launches (the daemon's status); nothing where no run has any of them."""
    rows = []
    for r in group["runs"]:
        view = r.get("daemon_view") or {}
        refused = {n: (t.get("pool") or {}).get("refused_bindings") for n, t in r.get("tenants", {}).items()}
        refused = {n: v for n, v in refused.items() if v is not None}
        if not view and not refused:
            continue
        sets = "; ".join(f"{n} {', '.join(u)}" for n, u in sorted((view.get("cluster_refused") or {}).items()))
        rows.append(f"| {r['round']} | {LABELS.get(r['config'], r['config'])} | {r['scenario']} | "
                    f"{' '.join(view.get('standing') or []) or '-'} | "
                    f"{', '.join(f'{n} {v}' for n, v in sorted(refused.items())) or '-'} | {sets or '-'} |")
    if not rows:
        return []
    return ["Through the daemon, per run: the standing node of each latency-critical client in each status "
            "snapshot (units and state: r reserved, l leased, d draining, i idle), the bindings each "
            "tenant's partitions refused, and the units that refused its cluster launches:", "",
            "| round | configuration | scenario | standing node per snapshot | refused bindings | cluster launches "
            "refused on units |", "| --- | --- | --- | --- | --- | --- |"] + rows + [""]


def failures(group):
    out = []
    for r in group["runs"]:
        if r.get("ok"):
            continue
        why = r.get("skipped") or r.get("error") or "; ".join(
            f"{n} exit {t.get('rc')}{' (timed out)' if t.get('timed_out') else ''}"
            f"{' (' + t['killed'] + ')' if t.get('killed') else ''}"
            for n, t in r.get("tenants", {}).items() if t.get("rc") != 0 or t.get("result") is None)
        out.append(f"- r{r['round']} {r['config']} {r['scenario']}: {why}")
    return out


def render(groups, plots):
    out = []
    have_mpl = True
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        have_mpl = False
    for g in groups:
        ix = Index(g)
        m = g["meta"]
        out += [f"## Group {m['group']} ({m['kind']})", "",
                f"{m.get('date_utc', '?')} UTC, host {m.get('host', '?')}, commit {m.get('commit', '?')}; "
                f"{len(ix.rounds)} rounds, window {m.get('seconds')} s; configurations rotated per round; "
                f"call {fmt(m.get('wall_s'), 0)} s (estimate {fmt(m.get('estimate_s'), 0)} s).", ""]
        section = SECTIONS.get(m["kind"])
        if section is None:
            out += [f"(no summary for kind {m['kind']!r})", ""]
        else:
            out += section(ix, plots if have_mpl else None)
        out += daemon_view(g)
        bad = failures(g)
        if bad:
            out += [f"Runs not complete ({len(bad)}):", ""] + bad + [""]
    if plots is not None and not have_mpl:
        out.append("(plots skipped: matplotlib is not importable)")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--plots", help="directory for the PNG plots")
    a = ap.parse_args(argv)
    print(render(load(*a.dirs), a.plots))
    return 0


if __name__ == "__main__":
    sys.exit(main())
