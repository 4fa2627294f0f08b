"""Tests of summary.py on synthetic harness outputs (CI: cd bench/eval && python3 summary_test.py).
The plot test needs matplotlib and says SKIPPED without it."""
import json
import math
import os
import tempfile

import summary


def tenant_rec(result, rc=0):
    return {"rc": rc, "timed_out": False, "startup_s": 1.0, "result": result}


def write(d, group, kind, configs, scenarios, tenants, runs, name="out"):
    out = os.path.join(d, name)
    os.makedirs(out, exist_ok=True)
    meta = {"group": group, "kind": kind, "configs": configs, "seconds": 8, "scenarios": scenarios,
            "tenants": {k: {"role": v} for k, v in tenants.items()}, "date_utc": "2026-12-02 10:00:00",
            "commit": "abc", "host": "h", "wall_s": 500, "estimate_s": 510}
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"meta": meta, "runs": runs}, f)
    return out


def run(r, config, scenario, results, ok=True):
    return {"round": r, "config": config, "scenario": scenario, "ok": ok,
            "tenants": {n: tenant_rec(v) for n, v in results.items()}}


def train_runs(factors, alone=(10.0, 4.0), rounds=3):
    """Scenario g+n; alone throughput doubles in round 2 (normalization must follow the round)."""
    runs = []
    for r in range(1, rounds + 1):
        k = 2.0 if r == 2 else 1.0
        runs.append(run(r, "alone", "alone:g", {"g": {"throughput": alone[0] * k, "unit": "steps/s"}}))
        runs.append(run(r, "alone", "alone:n", {"n": {"throughput": alone[1] * k, "unit": "steps/s"}}))
        for c, (fg, fn) in factors.items():
            runs.append(run(r, c, "g+n", {"g": {"throughput": alone[0] * k * fg}, "n": {"throughput": alone[1] * k * fn}}))
    return runs


def test_train_normalizes_per_round_geomean_and_ratios():
    with tempfile.TemporaryDirectory() as d:
        f = {"timeslice": (0.5, 0.5), "mps": (0.6, 0.5), "vitamin_static": (0.5, 0.4), "vitamin_throughput": (0.7, 0.6)}
        runs = train_runs(f)
        # a second scenario, only two configurations complete in it
        for r in (1, 2, 3):
            k = 2.0 if r == 2 else 1.0
            runs.append(run(r, "alone", "alone:h", {"h": {"throughput": 5.0 * k}}))
            runs.append(run(r, "mps", "g+h", {"g": {"throughput": 10 * k * 0.5}, "h": {"throughput": 5 * k * 0.5}}))
            runs.append(run(r, "vitamin_throughput", "g+h", {"g": {"throughput": 10 * k * 0.6},
                                                             "h": {"throughput": 5 * k * 0.6}}))
        # one failed run: reported, left out
        runs.append({"round": 3, "config": "timeslice", "scenario": "g+h", "ok": False,
                     "tenants": {"g": {"rc": 1, "timed_out": True, "result": None}}})
        out = write(d, "colo", "train", list(f), [{"name": "g+n", "tenants": ["g", "n"]},
                                                  {"name": "g+h", "tenants": ["g", "h"]}],
                    {"g": "train", "n": "train", "h": "train"}, runs)
        text = summary.render(summary.load(out), None)
        assert "| g+n | MPS | g 0.600, n 0.500 | **1.100** | 1.100-1.100 | 3 |" in text, text
        assert "| g+n | vitamin Throughput | g 0.700, n 0.600 | **1.300** | 1.300-1.300 | 3 |" in text, text
        assert "| g+h | time slicing | - | - | no complete round | 0 |" in text, text
        # geomean over both scenarios: sqrt(1.3 * 1.2)
        assert f"| vitamin Throughput | {math.sqrt(1.3 * 1.2):.3f} | 2 of 2 |" in text, text
        assert "| time slicing | - | 1 of 2 |" in text, text
        # strongest baseline per scenario: MPS in both (1.1, then 1.0)
        assert "g+n: 1.182x vs MPS; g+h: 1.200x vs MPS" in text, text
        assert "MPS 1.191x" in text, text  # geomean(1.3/1.1, 1.2/1.0)
        assert "- r3 timeslice g+h: g exit 1 (timed out)" in text, text
        assert "g 10.00 steps/s (10.00-20.00)" in text, text
        # per round: rates in their unit (round 2's alone rates doubled), the ratio to MPS's aggregate
        # of the same round; no row for the failed run
        assert "| 2 | g+n | alone | - | g 20.00, n 8.00 | - |" in text, text
        assert "| 2 | g+n | vitamin Throughput | 1.300 | g 14.00, n 4.80 | 1.182 |" in text, text
        assert "| 1 | g+h | MPS | 1.000 | g 5.00, h 2.50 | - |" in text, text
        assert "| 3 | g+h | time slicing |" not in text, text


def test_parts_of_one_group_merge():
    with tempfile.TemporaryDirectory() as d:
        a = write(d, "colo:a", "train", ["timeslice", "vitamin_throughput"], [{"name": "g+n", "tenants": ["g", "n"]}],
                  {"g": "train", "n": "train"},
                  train_runs({"timeslice": (0.5, 0.5), "vitamin_throughput": (0.7, 0.6)}), name="a")
        b = write(d, "colo:b", "train", ["vitamin_static", "vitamin_throughput"],
                  [{"name": "g+n", "tenants": ["g", "n"]}], {"g": "train", "n": "train"},
                  train_runs({"vitamin_static": (0.5, 0.4), "vitamin_throughput": (0.8, 0.6)}, alone=(20, 8)), name="b")
        groups = summary.load(a, b)
        assert len(groups) == 1 and groups[0]["meta"]["configs"] == ["timeslice", "vitamin_throughput", "vitamin_static"]
        text = summary.render(groups, None)
        assert "## Group colo (train)" in text, text
        # vitamin_throughput in both calls: 3 rounds at 1.3 and 3 at 1.4, each normalized within its call
        assert "| g+n | vitamin Throughput | g 0.750, n 0.600 | **1.350** | 1.300-1.400 | 6 |" in text, text
        assert "| g+n | vitamin Static | g 0.500, n 0.400 | **0.900** | 0.900-0.900 | 3 |" in text, text


def test_mixed_reports_p99_per_rate_and_background():
    with tempfile.TemporaryDirectory() as d:
        p99 = {"mps": (40.0, 80.0), "vitamin_static": (30.0, 50.0), "vitamin_tpot": (12.0, 30.0)}
        runs = []
        for r in (1, 2, 3):
            runs.append(run(r, "alone", "alone:dec", {"dec": {"role": "latency", "p99_ms": 9.0, "by_rate": {
                "5": {"p50_ms": 4.0, "p99_ms": 8.0}, "20": {"p50_ms": 5.0, "p99_ms": 10.0}}}}))
            runs.append(run(r, "alone", "alone:bg", {"bg": {"throughput": 3.0}}))
            for c, (lo, hi) in p99.items():
                runs.append(run(r, c, "dec+bg", {
                    "dec": {"role": "latency", "p50_ms": lo / 2, "p99_ms": hi + r, "by_rate": {
                        "5": {"p50_ms": lo / 2, "p99_ms": lo + r}, "20": {"p50_ms": hi / 2, "p99_ms": hi + r}}},
                    "bg": {"throughput": 3.0 * (0.9 if c == "vitamin_tpot" else 0.8)}}))
        out = write(d, "mixed", "mixed", list(p99), [{"name": "dec+bg", "tenants": ["dec", "bg"]}],
                    {"dec": "latency", "bg": "train"}, runs)
        text = summary.render(summary.load(out), None)
        assert "| dec+bg | 5 | MPS | 20.00 | **42.00** | 41.00-43.00 | 0.800 | 3 |" in text, text
        assert "| dec+bg | 20 | vitamin TPOT-First | 15.00 | **32.00** | 31.00-33.00 | 0.900 | 3 |" in text, text
        assert "| dec+bg | 20 | dec alone (native) | - | 10.00 |" in text, text
        # p99, lower is better: ratio = ours / best baseline's, per rate
        assert "dec+bg @5/s: 0.438x vs vitamin Static" in text, text  # 14/32
        assert "dec+bg: 1.125x vs MPS" in text, text  # background 0.9 / 0.8 (MPS first of the ties)


def test_mixed_adds_per_token_times_when_the_decoder_streamed_them():
    with tempfile.TemporaryDirectory() as d:
        tpot = {"mps": 30.0, "vitamin_tpot": 9.0}
        runs = []
        for r in (1, 2):
            runs.append(run(r, "alone", "alone:dec", {"dec": {"role": "latency", "p99_ms": 9.0, "by_rate": {
                "1": {"p50_ms": 4.0, "p99_ms": 8.0, "tpot_p50_ms": 5.0, "tpot_p99_ms": 6.0}}}}))
            runs.append(run(r, "alone", "alone:bg", {"bg": {"throughput": 3.0}}))
            for c, t in tpot.items():
                runs.append(run(r, c, "dec+bg", {
                    "dec": {"role": "latency", "p50_ms": 50, "p99_ms": 90, "by_rate": {
                        "1": {"p50_ms": 50, "p99_ms": 90, "tpot_p50_ms": t / 2, "tpot_p99_ms": t + r}}},
                    "bg": {"throughput": 2.4}}))
        out = write(d, "mixed", "mixed", list(tpot), [{"name": "dec+bg", "tenants": ["dec", "bg"]}],
                    {"dec": "latency", "bg": "train"}, runs)
        text = summary.render(summary.load(out), None)
        assert "| dec+bg | 1 | MPS | 15.00 | **31.50** | 31.00-32.00 | 2 |" in text, text
        assert "| dec+bg | 1 | dec alone (native) | - | 6.00 | 6.00-6.00 | 2 |" in text, text
        assert "per-token p99 (lower is better), ratio to the strongest baseline: dec+bg @1/s: 0.333x vs MPS" in text, text
    # without per-token times the table is absent
    with tempfile.TemporaryDirectory() as d:
        runs = [run(1, "alone", "alone:dec", {"dec": {"role": "latency", "p99_ms": 9.0}}),
                run(1, "mps", "dec+bg", {"dec": {"role": "latency", "p99_ms": 12.0}, "bg": {"throughput": 1.0}})]
        out = write(d, "mixed", "mixed", ["mps"], [{"name": "dec+bg", "tenants": ["dec", "bg"]}],
                    {"dec": "latency", "bg": "train"}, runs)
        assert "Per-token time" not in summary.render(summary.load(out), None)


def test_serving_compares_tpot_first_with_throughput():
    with tempfile.TemporaryDirectory() as d:
        runs = []
        for r in (1, 2, 3):
            runs.append(run(r, "alone", "alone:srv", {"srv": {"role": "serving", "tpot_violation_pct": 1.0,
                                                            "ttft_violation_pct": 0.5, "completed": 90}}))
            runs.append(run(r, "alone", "alone:bg", {"bg": {"throughput": 2.0}}))
            for c, tv, fv, bg in (("vitamin_throughput", 20.0, 3.0, 1.0), ("vitamin_tpot", 10.0, 4.0, 0.5)):
                runs.append(run(r, c, "srv+bg", {"srv": {"role": "serving", "tpot_violation_pct": tv,
                                                         "ttft_violation_pct": fv, "ttft_p50_ms": 100,
                                                         "completed": 80}, "bg": {"throughput": bg}}))
        out = write(d, "serving", "serving", ["vitamin_throughput", "vitamin_tpot"],
                    [{"name": "srv+bg", "tenants": ["srv", "bg"]}], {"srv": "serving", "bg": "train"}, runs)
        text = summary.render(summary.load(out), None)
        assert ("srv+bg: TPOT-First vs Throughput-Oriented: TPOT SLO violations 20.00% -> 10.00% "
                "(+50.0% relative reduction; goal >= 40%), TTFT violations +1.00 points (goal <= +2); "
                "background (normalized) 0.500 -> 0.250 (0.50x)") in text, text
        assert ("TPOT SLO violations per round, Throughput -> TPOT-First: round 1 20.00% -> 10.00%; "
                "round 2 20.00% -> 10.00%; round 3 20.00% -> 10.00%") in text, text
        assert "| srv+bg | srv alone (native) | 1.00 | 0.50 |" in text, text
        assert "| srv+bg | vitamin TPOT-First | 10.00 | 4.00 | 100.00 | - | - | - | 80 | 0.250 | 3 |" in text, text


def test_serving_violations_are_recomputed_at_the_rounds_targets():
    # every request's TPOT/TTFT recorded; the tenant judged itself at its flags' SLOs (the alone run
    # always does), the round's targets are 1.5 x the alone TPOT p50 (30 ms) and 3 x its TTFT p50
    with tempfile.TemporaryDirectory() as d:
        targets = {"tpot": {"srv": {"ms": 45.0}}, "ttft": {"srv": {"ms": 300.0}}}
        alone = {"role": "serving", "tpot_ms": [20.0, 30.0, 40.0, 50.0], "ttft_ms": [100.0, 100.0, 100.0, 400.0],
                 "tpot_p50_ms": 30.0, "tpot_violation_pct": 75.0, "ttft_violation_pct": 0.0}
        tput = {"role": "serving", "tpot_ms": [30.0, 50.0, 70.0, 100.0], "ttft_ms": [100.0] * 4,
                "tpot_violation_pct": 99.0, "ttft_violation_pct": 99.0}
        runs = [run(1, "alone", "alone:srv", {"srv": alone}), run(1, "alone", "alone:bg", {"bg": {"throughput": 2.0}}),
                dict(run(1, "vitamin_throughput", "srv+bg", {"srv": tput, "bg": {"throughput": 1.0}}),
                     slo_targets=targets)]
        out = write(d, "serving", "serving", ["vitamin_throughput"], [{"name": "srv+bg", "tenants": ["srv", "bg"]}],
                    {"srv": "serving", "bg": "train"}, runs)
        text = summary.render(summary.load(out), None)
        assert "| srv+bg | srv alone (native) | 25.00 | 25.00 |" in text, text  # 50 > 45; 400 > 300
        assert "| srv+bg | vitamin Throughput | 75.00 | 0.00 |" in text, text  # 50, 70, 100 > 45
        # at 1.25 / 1.5 / 2 x 30 ms = 37.5 / 45 / 60 ms
        assert "| srv+bg | vitamin Throughput | 75.00 | 75.00 | 50.00 |" in text, text
        assert "| srv+bg | srv alone (native) | 50.00 | 25.00 | 0.00 |" in text, text


def test_overhead_and_footprint_against_native():
    with tempfile.TemporaryDirectory() as d:
        runs = []
        for r in (1, 2, 3):
            runs.append(run(r, "alone", "alone:op", {"op": {"p50_us": 300.0, "p95_us": 400.0}}))
            runs.append(run(r, "alone", "alone:fp", {"fp": {"vm_hwm_mib": 900.0, "gpu_used_mib": 500.0,
                                                          "first_kernel_s": 3.0, "device_free_delta_mib": 600.0}}))
            runs.append(run(r, "vitamin_throughput", "operator", {"op": {"p50_us": 301.0, "p95_us": 404.0}}))
            runs.append(run(r, "vitamin_throughput", "footprint", {"fp": {
                "vm_hwm_mib": 950.0, "gpu_used_mib": 800.0, "first_kernel_s": 4.5, "device_free_delta_mib": 900.0}}))
            pool = {"realize_ms": 100.0 + r, "nodes": 59, "layout": "on-demand", "created": 4,
                    "on_demand": {"created": 4, "failed": 0, "total_ms": 40.0, "max_ms": 12.0}}
            runs.append(run(r, "vitamin_ondemand", "operator", {"op": {"p50_us": 302.0, "p95_us": 420.0}}))
            runs[-1]["tenants"]["op"]["pool"] = pool
        out = write(d, "overhead", "overhead", ["vitamin_throughput", "vitamin_ondemand"],
                    [{"name": "operator", "tenants": ["op"]}, {"name": "footprint", "tenants": ["fp"]}],
                    {"op": "operator", "fp": "footprint"}, runs)
        text = summary.render(summary.load(out), None)
        assert "| op | vitamin Throughput | 301.0 | **404.0** | 404.0-404.0 | +1.0% | 3 |" in text, text
        assert "| fp | vitamin Throughput | 800 (+300.0) | 950 (+50.0) | 4.50 (+1.5) | 900 (+300.0) | 3 |" in text, text
        assert "| op | vitamin in-process, no MPS, on-demand pool | 302.0 | **420.0** | 420.0-420.0 | +5.0% | 3 |" in text
        assert ("| op | vitamin in-process, no MPS, on-demand pool | on-demand | 59 | 4 | 102.0 | 101.0-103.0 | 4 | "
                "40.0 | 12.0 | 3 |") in text, text
        assert "| op | vitamin Throughput | hierarchical" not in text  # no census, no row


def test_footprint_of_two_processes_side_by_side():
    with tempfile.TemporaryDirectory() as d:
        runs = []
        for r in (1, 2, 3):
            for t in ("fa", "fb"):
                runs.append(run(r, "alone", f"alone:{t}", {t: {"vm_hwm_mib": 700.0, "first_kernel_s": 4.0,
                                                              "device_free_delta_mib": 650.0}}))
            # each tenant reads the whole device's memory in use: both processes (and MPS's server)
            runs.append(run(r, "mps", "pair", {
                "fa": {"vm_hwm_mib": 710.0, "device_free_delta_mib": 1400.0},
                "fb": {"vm_hwm_mib": 712.0, "device_free_delta_mib": 1402.0 + r}}))
            runs.append(run(r, "vitamin_throughput", "pair", {
                "fa": {"vm_hwm_mib": 800.0, "device_free_delta_mib": 1800.0 + 10 * r},
                "fb": {"vm_hwm_mib": 790.0, "device_free_delta_mib": 1800.0 + 10 * r}}))
        runs.append(run(4, "vitamin_throughput", "pair", {"fa": {"vm_hwm_mib": 800.0}}))  # a run missing a reading
        out = write(d, "footprint-pair", "overhead", ["mps", "vitamin_throughput"],
                    [{"name": "pair", "tenants": ["fa", "fb"]}], {"fa": "footprint", "fb": "footprint"}, runs)
        text = summary.render(summary.load(out), None)
        # MPS: medians of (1400, 1402+r) per round = 1401.5, 1402, 1402.5 -> 1402
        assert "| MPS | 1402 | 1402-1402 | - | - | 710 (+10.0) | 712 (+12.0) | 3 |" in text, text
        # vitamin: 1810, 1820, 1830 -> 1820; +418 over MPS, +209 per process; the round-4 run without a
        # device reading adds no device figure
        assert "| vitamin Throughput | 1820 | 1810-1830 | +418 | +209 | 800 (+100.0) | 790 (+90.0) | 3 |" in text, text
        # the per-tenant table keeps only the native alone rows: a reading beside another process
        # has no native counterpart
        assert "| fa | vitamin Throughput |" not in text, text
        assert "| fa | native, alone |" in text, text


def test_digest_flags_a_mismatch_and_shows_reshape_drift():
    with tempfile.TemporaryDirectory() as d:
        runs = []
        for r in (1, 2):
            runs.append(run(r, "alone", "alone:a", {"a": {"digest": "a" * 64, "reshape": {
                "max_abs_diff": 0.03, "tokens_changed": 2, "bitwise_equal": False}}}))
            runs.append(run(r, "alone", "alone:b", {"b": {"digest": "b" * 64}}))
            runs.append(run(r, "vitamin_chaos", "a+b", {"a": {"digest": "a" * 64},
                                                       "b": {"digest": ("c" if r == 2 else "b") * 64}}))
        out = write(d, "det", "digest", ["vitamin_chaos"], [{"name": "a+b", "tenants": ["a", "b"]}],
                    {"a": "train", "b": "train"}, runs)
        text = summary.render(summary.load(out), None)
        assert "| a+b | b | vitamin Chaos | 2 | cccccccccccccccc | NO |" in text, text
        assert "| a+b | a | vitamin Chaos | 1 | aaaaaaaaaaaaaaaa | yes |" in text, text
        assert "all identical to native: NO" in text, text
        assert "| a | 1 | 0.03 | 2 | no |" in text, text


def test_plots_get_every_rounds_figure_for_their_whiskers():
    """The plots draw the median over rounds with min-max whiskers: each bar gets every round's figure,
    not the median alone (which drew no whiskers)."""
    with tempfile.TemporaryDirectory() as d:
        runs = []
        for r in (1, 2, 3):
            runs.append(run(r, "alone", "alone:dec", {"dec": {"role": "latency", "p99_ms": 9.0, "by_rate": {
                "1": {"p50_ms": 4.0, "p99_ms": 8.0, "tpot_p50_ms": 5.0, "tpot_p99_ms": 6.0}}}}))
            runs.append(run(r, "alone", "alone:bg", {"bg": {"throughput": 3.0}}))
            runs.append(run(r, "mps", "dec+bg", {
                "dec": {"role": "latency", "p50_ms": 50, "p99_ms": 90, "by_rate": {
                    "1": {"p50_ms": 50, "p99_ms": 90 + r, "tpot_p50_ms": 10, "tpot_p99_ms": 20 + r}}},
                "bg": {"throughput": 0.3 * r}}))
        out = write(d, "mixed", "mixed", ["mps"], [{"name": "dec+bg", "tenants": ["dec", "bg"]}],
                    {"dec": "latency", "bg": "train"}, runs)
        drawn = {}
        real = summary.bars
        summary.bars = lambda plots, name, groups, configs, values, *a, **k: drawn.__setitem__(name, values)
        try:
            # The section itself (render skips plots where matplotlib is not importable).
            summary.mixed_section(summary.Index(summary.load(out)[0]), os.path.join(d, "plots"))
        finally:
            summary.bars = real
        assert sorted(drawn["mixed-p99.png"][("dec+bg @1/s", "mps")]) == [91, 92, 93], drawn
        assert sorted(drawn["mixed-per-token-p99.png"][("dec+bg @1/s", "mps")]) == [21, 22, 23], drawn
        assert [round(x, 3) for x in sorted(drawn["mixed-background.png"][("dec+bg", "mps")])] == [0.1, 0.2, 0.3]


def test_plots_are_written():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("SKIPPED: test_plots_are_written (matplotlib not importable)")
        return
    with tempfile.TemporaryDirectory() as d:
        out = write(d, "colo", "train", ["mps", "vitamin_throughput"], [{"name": "g+n", "tenants": ["g", "n"]}],
                    {"g": "train", "n": "train"}, train_runs({"mps": (0.6, 0.5), "vitamin_throughput": (0.7, 0.6)}))
        plots = os.path.join(d, "plots")
        summary.render(summary.load(out), plots)
        png = os.path.join(plots, "colo-throughput.png")
        assert os.path.getsize(png) > 1000 and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_the_daemon_view_lists_each_runs_standing_nodes_and_refusals():
    runs = [run(1, "alone", "alone:d", {"d": {"p99_ms": 1.0}}),
            run(1, "vitamin_tpot", "d+b", {"d": {"p99_ms": 2.0}, "b": {"throughput": 1.0}}),
            run(1, "mps", "d+b", {"d": {"p99_ms": 3.0}, "b": {"throughput": 1.0}})]
    runs[1]["daemon_view"] = {"standing": ["8r", "124l"], "cluster_refused": {"b": ["120-131"]}}
    runs[1]["tenants"]["b"]["pool"] = {"nodes": 59, "refused_bindings": 3}
    runs[1]["tenants"]["d"]["pool"] = {"nodes": 59, "refused_bindings": 0}
    with tempfile.TemporaryDirectory() as d:
        out = write(d, "mixed", "mixed", ["vitamin_tpot", "mps"], [{"name": "d+b", "tenants": ["d", "b"]}],
                    {"d": "latency", "b": "train"}, runs)
        text = summary.render(summary.load(out), None)
        row = "| 1 | vitamin TPOT-First | d+b | 8r 124l | b 3, d 0 | b 120-131 |"
        assert row in text, text
        assert text.count("| 1 | ") == 1, "only the run through the daemon has a row: " + text
        runs[1].pop("daemon_view")
        for t in runs[1]["tenants"].values():
            t.pop("pool")
        out = write(d, "mixed", "mixed", ["vitamin_tpot", "mps"], [{"name": "d+b", "tenants": ["d", "b"]}],
                    {"d": "latency", "b": "train"}, runs, name="plain")
        assert "standing node per snapshot" not in summary.render(summary.load(out), None)


if __name__ == "__main__":
    tests = [v for k, v in sorted(globals().items()) if k.startswith("test_")]
    for t in tests:
        t()
        print(f"ok {t.__name__}")
    print(f"summary_test: {len(tests)} passed")
