"""Summarize the shim GPU check (run.sh): checks with PASS/FAIL, measured figures.

usage: python3 summarize.py WORKDIR OUTDIR  -> OUTDIR/results.json, OUTDIR/summary.md
"""

import json
import os
import re
import statistics
import sys

W, OUT = sys.argv[1], sys.argv[2]


def read(name, default=None):
    try:
        with open(os.path.join(W, name)) as f:
            return f.read()
    except OSError:
        return default


def load(name):
    text = read(name)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


checks = []  # (name, ok, detail)


def check(name, ok, detail):
    checks.append((name, bool(ok), detail))


# ---- application outputs
for app in ("rt", "cudarc"):
    native, shim = read(f"{app}_native.out"), read(f"{app}_shim.out")
    label = {"rt": "CUDA C++ runtime-API program", "cudarc": "cudarc driver-API program"}[app]
    check(f"{label}: output identical with and without the shim", native is not None and native == shim and native != "",
          "stdout compared byte for byte")

rt = read("rt_native.out", "")
rt_invalid = re.findall(r"invalid launch \((runtime|driver), 2048 threads/block\): (-?\d+)", rt)
cudarc_invalid = re.findall(r"invalid_launch_error=(\S+)", read("cudarc_native.out", ""))
invalid_same = (read("rt_native.out") == read("rt_shim.out") and read("cudarc_native.out") == read("cudarc_shim.out")
                and len(rt_invalid) == 2 and len(cudarc_invalid) == 1)
check("invalid launch (2048 threads/block): same error code with and without the shim", invalid_same,
      f"runtime/driver/cudarc: {dict(rt_invalid)} / cudarc {cudarc_invalid}")

# ---- PyTorch
tn, ts = load("torch_native.json"), load("torch_shim.json")
census = load("census_torch.json")
torch_ok = tn is not None and ts is not None
check("PyTorch script: all output hashes identical", torch_ok and tn["results"] == ts["results"],
      "elementwise, matmul fp32/fp16, conv2d, triton, side stream, .item(), pinned copy, 3 graph replays, churn")
check("PyTorch script: profiler counts identical", torch_ok and tn["profiler"] == ts["profiler"],
      f"native {tn and tn['profiler']} / observe {ts and ts['profiler']}")
if torch_ok and census:
    prof = ts["profiler"]
    tot = census["totals"]
    check("census kernel launches == profiler kernels (graph replays excluded)",
          tot["kernel_launches"] == prof["kernels_not_from_graphs"],
          f"census {tot['kernel_launches']} vs profiler {prof['kernels_not_from_graphs']}")
    check("census graph launches == profiler cudaGraphLaunch calls", tot["graph_launches"] == prof["graph_launch_calls"],
          f"census {tot['graph_launches']} vs profiler {prof['graph_launch_calls']}; captured launches "
          f"{tot['captured_kernel_launches']}, profiler kernels from replays {prof['kernels_from_graph_replays']}")
    ip = census["interposition"]
    check("interposition complete (no full slots, no missing driver functions)",
          ip["slots_full"] == 0 and ip["missing_real"] == 0, json.dumps(ip))
else:
    check("census kernel launches == profiler kernels (graph replays excluded)", False, "missing torch outputs or census")

for name, expected, label in (("census_runtime_app.json", 22, "runtime-API program"), ("census_cudarc.json", 11, "cudarc")):
    c = load(name)
    got = c and c["totals"]["kernel_launches"]
    check(f"{label}: census counts its {expected} launches", got == expected, f"census {got}")

# ---- per-launch cost
launch = {}
for line in (read("launch.txt", "") or "").splitlines():
    mode, _, js = line.partition(" ")
    try:
        d = json.loads(js)
    except ValueError:
        continue
    launch.setdefault(d["api"], {}).setdefault(mode, []).append(d["median_us"])
launch_summary = {}
for api, modes in launch.items():
    med = {m: statistics.median(v) for m, v in modes.items()}
    launch_summary[api] = {"runs": modes, "median_of_medians_us": med}
    if "native" in med and "observe" in med:
        over = med["observe"] - med["native"]
        launch_summary[api]["observe_overhead_us"] = over
        check(f"per-launch app-thread cost ({api} API): observe <= native + 0.2 us", over <= 0.2,
              f"native {med['native']:.3f} us, observe {med['observe']:.3f} us, passthrough "
              f"{med.get('passthrough', float('nan')):.3f} us (+{over:.3f} us)")

if not launch_summary:
    check("per-launch app-thread cost measured", False, "no launch_bench results")

# ---- training step
tr = {"native": [], "observe": []}
for i in (1, 2, 3):
    for mode, name in (("native", f"train_native_{i}.json"), ("observe", f"train_shim_{i}.json")):
        d = load(name)
        if d:
            tr[mode].append(d["median_step_ms"])
train_summary = {"runs_ms": tr}
if tr["native"] and tr["observe"]:
    n, s = statistics.median(tr["native"]), statistics.median(tr["observe"])
    train_summary.update(native_ms=n, observe_ms=s, overhead_pct=100 * (s - n) / n,
                         native_spread_pct=100 * (max(tr["native"]) - min(tr["native"])) / n)
    check("training step (2-layer transformer, fp32, AdamW): observe <= 1% slower", s <= 1.01 * n,
          f"native {n:.4f} ms, observe {s:.4f} ms ({train_summary['overhead_pct']:+.2f}%), native run spread "
          f"{train_summary['native_spread_pct']:.2f}%")

ct = load("census_train_1.json")
if ct and "overhead_pct" in train_summary:
    steps = 30 + 15 * 20  # warm-up + timed steps in train_bench.py
    per_step = {"kernel_launches": ct["totals"]["kernel_launches"] / steps,
                "intercepted_calls_excluding_entry_lookups":
                    (ct["totals"]["intercepted_calls"] - ct["api_by_family"].get("entry", 0)) / steps}
    train_summary["per_step"] = per_step
    train_summary["implied_us_per_intercepted_call"] = (
        1000 * (train_summary["observe_ms"] - train_summary["native_ms"]) / per_step["intercepted_calls_excluding_entry_lookups"])
if "overhead_pct" not in train_summary:
    check("training step measured", False, "no train_bench results")

env = {k: (read(f) or "").strip() for k, f in (("date", "date.txt"), ("gpu", "gpu.txt"), ("cpu", "cpu.txt"),
                                               ("nproc", "nproc.txt"))}
results = {
    "env": env,
    "checks": [{"name": n, "pass": ok, "detail": d} for n, ok, d in checks],
    "launch": launch_summary,
    "train": train_summary,
    "torch": {"native": tn, "observe": ts},
    "census_torch_totals": census and census["totals"],
    "census_torch_api_by_family": census and census["api_by_family"],
    "census_torch_interposition": census and census["interposition"],
}
with open(os.path.join(OUT, "results.json"), "w") as f:
    json.dump(results, f, indent=1)

lines = [
    "# Shim GPU check (observe mode)",
    "",
    f"- date: {env['date']}",
    f"- GPU: {env['gpu']}",
    f"- CPU: {env['cpu']} ({env['nproc']} cores)",
    "- command: `bash .device/shim/run.sh` (bench/gpu/shim/run.sh, one device call)",
    "",
    "| check | result | detail |",
    "| --- | --- | --- |",
]
for n, ok, d in checks:
    lines.append(f"| {n} | {'PASS' if ok else 'FAIL'} | {d} |")
lines.append("")
lines.append(f"{sum(ok for _, ok, _ in checks)}/{len(checks)} checks passed.")
with open(os.path.join(OUT, "summary.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
