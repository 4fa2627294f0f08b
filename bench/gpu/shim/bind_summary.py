"""Summarizes bench/gpu/shim/bind_check.sh: usage: python3 bind_summary.py WORKDIR OUT.

Reads the runs' outputs, censuses and timings from WORKDIR; writes OUT/summary.md (a markdown
table with what matched and where kernels ran) and OUT/results.json (the same, machine-readable).
"""

import glob
import json
import os
import statistics
import sys

W, OUT = sys.argv[1], sys.argv[2]


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def census(name):
    text = read(os.path.join(W, f"census_{name}.json"))
    return json.loads(text) if text else None


def bind_facts(c):
    if not c or "bind" not in c:
        return {"census": False}
    b = c["bind"]
    d = b.get("dispatcher") or {}
    per_node = d.get("per_node") or []
    return {
        "active": b.get("active"),
        "reason": b.get("reason"),
        "policy": b.get("policy"),
        "realize_ms": b.get("realize_ms"),
        "pool_nodes": len(b.get("nodes") or []),
        "ops": b.get("ops"),
        "kernels_on_nodes": sum(per_node),
        "nodes_used": sum(1 for n in per_node if n > 0),
        "per_node": per_node,
        "bound": d.get("bound"),
        "continued": d.get("continued"),
        "rejected": d.get("rejected"),
        "submit_failures": d.get("submit_failures"),
        "failed": d.get("failed"),
        "census_kernel_launches": c.get("totals", {}).get("kernel_launches"),
    }


results = {"runtime_app": {}, "launch": {}, "torch": {}}
native_rt = read(os.path.join(W, "rt_native.out"))
for out in sorted(glob.glob(os.path.join(W, "rt_*_*.out"))):
    name = os.path.basename(out)[:-4]
    results["runtime_app"][name] = {
        "identical_to_native": native_rt is not None and read(out) == native_rt,
        **bind_facts(census(name)),
    }

runs = {"native": {"runtime": [], "driver": []}, "bind": {"runtime": [], "driver": []}}
for line in (read(os.path.join(W, "launch.txt")) or "").splitlines():
    mode, _, rest = line.partition(" ")
    if mode in runs and rest.startswith("{"):
        j = json.loads(rest)
        runs[mode][j["api"]].append(j["median_us"])
for api in ("runtime", "driver"):
    n, b = runs["native"][api], runs["bind"][api]
    if n and b:
        results["launch"][api] = {
            "native_median_us": statistics.median(n),
            "bind_median_us": statistics.median(b),
            "delta_us": statistics.median(b) - statistics.median(n),
            "runs": len(b),
        }

native_torch = read(os.path.join(W, "torch_native.json"))
native_torch = json.loads(native_torch) if native_torch else None
for name in ("torch_chaos_1", "torch_throughput_0"):
    text = read(os.path.join(W, f"{name}.json"))
    entry = {"completed": text is not None, **bind_facts(census(name))}
    if text and native_torch:
        got = json.loads(text)
        diffs = sorted(k for k in native_torch["results"] if native_torch["results"][k] != got["results"].get(k))
        entry.update(
            identical_to_native=not diffs,
            differing=diffs,
            wall_s=got.get("wall_s"),
            native_wall_s=native_torch.get("wall_s"),
            profiler=got.get("profiler"),
            native_profiler=native_torch.get("profiler"),
        )
    results["torch"][name] = entry

with open(os.path.join(OUT, "results.json"), "w") as f:
    json.dump(results, f, indent=1, sort_keys=True)

lines = ["# bind mode on the GPU", ""]
for key in ("date.txt", "gpu.txt", "cpu.txt", "nproc.txt"):
    v = read(os.path.join(W, key))
    if v:
        lines.append(f"- {key[:-4]}: {v.strip()}")
lines += ["", "| run | output identical to native | kernels bound | nodes used / pool | realize ms | native-path calls | notes |",
          "| --- | --- | --- | --- | --- | --- | --- |"]
for group in ("runtime_app", "torch"):
    for name, r in results[group].items():
        ops = r.get("ops") or {}
        ident = r.get("identical_to_native")
        note = r.get("reason") or ""
        if r.get("differing"):
            note += " differs: " + ", ".join(r["differing"])
        if group == "torch" and not r.get("completed"):
            note += " did not complete"
        lines.append(
            f"| {name} | {ident} | {ops.get('kernels')} | {r.get('nodes_used')} / {r.get('pool_nodes')} | "
            f"{r.get('realize_ms') and round(r['realize_ms'], 1)} | {ops.get('native_unmodelled')} | {note.strip()} |"
        )
lines += ["", "| API | native us/launch | bind us/launch | delta |", "| --- | --- | --- | --- |"]
for api, r in results["launch"].items():
    lines.append(f"| {api} | {r['native_median_us']:.3f} | {r['bind_median_us']:.3f} | {r['delta_us']:+.3f} |")
with open(os.path.join(OUT, "summary.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
