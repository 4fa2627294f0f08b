"""Summary of an outside-application suite run (run_suite.sh): summary.md and summary.json under OUT.

Per program: whether its two native runs gave the same digests (keys that differ between them are
nondeterministic natively, listed and left out of the comparison; a program with no stable key is
dropped); per bind run, whether every stable digest equals the native one, its exit status, and what
its census says (kernel launches, graph launches, pool nodes that ran kernels, failures). A run stopped
at what the call's budget had left (a `.cut` file beside an exit status of 124) is counted as cut, not
as a failure.

usage: python3 summary.py OUT
"""
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def text(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def census_facts(c):
    if not isinstance(c, dict):
        return None
    b = c.get("bind") or {}
    d = b.get("dispatcher") or {}
    labels = b.get("nodes") or []
    per_node = d.get("per_node") or []
    used = sorted({labels[i] if i < len(labels) else f"node {i}" for i, n in enumerate(per_node) if n})
    t = c.get("totals") or {}
    dm = d.get("daemon")  # present when the process bound under a vitamin daemon (its client section)
    return {"active": b.get("active"), "reason": b.get("reason"),
            "daemon_clients": int(isinstance(dm, dict)),
            "safe_mode": bool(isinstance(dm, dict) and dm.get("safe_mode")),
            "refused_bindings": dm.get("refused_bindings", 0) if isinstance(dm, dict) else 0,
            "kernel_launches": t.get("kernel_launches"), "graph_launches": t.get("graph_launches"),
            "kernels_on_nodes": sum(per_node), "nodes_used": used, "pool_nodes": len(labels),
            "failed": d.get("failed"), "submit_failures": d.get("submit_failures")}


def run_census(runs, tag):
    """The census facts of one run: its main process's (`TAG.census.json`), with those of the processes
    it started that used CUDA (`TAG.census.json.PID`) added in (`idle_processes` counts those that
    launched nothing and never started bind mode); None without a main census."""
    main = census_facts(load(os.path.join(runs, tag + ".census.json")))
    if main is None:
        return None
    main["processes"] = 1
    prefix = tag + ".census.json."
    for f in sorted(os.listdir(runs)):
        child = census_facts(load(os.path.join(runs, f))) if f.startswith(prefix) else None
        if child is None:
            continue
        # A process that never made a bind-mode call and launched nothing (e.g. a compile worker
        # that imported torch) did no GPU work to bind: counted apart, never an inactive run.
        if not child["active"] and not (child["kernel_launches"] or child["graph_launches"]):
            main["idle_processes"] = main.get("idle_processes", 0) + 1
            continue
        main["processes"] += 1
        main["active"] = main["active"] and child["active"]
        main["reason"] = main["reason"] or child["reason"]
        main["safe_mode"] = main["safe_mode"] or child["safe_mode"]
        for k in ("kernel_launches", "graph_launches", "kernels_on_nodes", "failed", "submit_failures",
                  "daemon_clients", "refused_bindings"):
            main[k] = (main[k] or 0) + (child[k] or 0)
        main["nodes_used"] = sorted(set(main["nodes_used"]) | set(child["nodes_used"]))
    return main


def summarize(out):
    runs = os.path.join(out, "runs")
    progs = [p for p in (text(os.path.join(out, "programs.txt")) or "").split("\n") if p]
    kinds = sorted({f.split(".")[1] for f in os.listdir(runs) if f.endswith(".rc")} - {"native"}) \
        if os.path.isdir(runs) else []
    rows = []
    for p in progs:
        def run(kind, i):
            tag = f"{p}.{kind}.{i}"
            return {"tag": tag, "rc": text(os.path.join(runs, tag + ".rc")),
                    "wall_s": text(os.path.join(runs, tag + ".wall")),
                    "skipped": os.path.exists(os.path.join(runs, tag + ".skipped")),
                    "cut": text(os.path.join(runs, tag + ".cut")),
                    "left": text(os.path.join(runs, tag + ".left")),
                    "result": load(os.path.join(runs, tag + ".json")),
                    "census": run_census(runs, tag)}
        n1, n2 = run("native", 1), run("native", 2)
        d1 = (n1["result"] or {}).get("digests") or {}
        d2 = (n2["result"] or {}).get("digests") or {}
        stable = sorted(k for k in d1 if d2.get(k) == d1[k])
        unstable = sorted(k for k in set(d1) | set(d2) if d1.get(k) != d2.get(k))
        row = {"program": p, "native_ok": bool(d1) and n1["rc"] == "0" and n2["rc"] == "0",
               "stable_keys": len(stable), "unstable_keys": unstable, "runs": {}, "problems": []}
        if not row["native_ok"]:
            row["problems"].append(f"native runs failed (rc {n1['rc']}, {n2['rc']})")
        elif not stable:
            row["problems"].append("dropped: nondeterministic natively (no digest repeats)")
        union, launches, graphs = set(), [], []
        for kind in kinds:
            i = 1
            while os.path.exists(os.path.join(runs, f"{p}.{kind}.{i}.rc")) or \
                    os.path.exists(os.path.join(runs, f"{p}.{kind}.{i}.skipped")):
                r = run(kind, i)
                i += 1
                if r["skipped"]:
                    row["runs"].setdefault(kind, []).append({"tag": r["tag"], "skipped": True})
                    continue
                if r["cut"] and r["rc"] == "124":
                    # stopped at what the call's budget had left (run_suite.sh), not at RUN_TIMEOUT_S
                    row["runs"].setdefault(kind, []).append({"tag": r["tag"], "cut_s": r["cut"]})
                    continue
                dig = (r["result"] or {}).get("digests") or {}
                diff = [k for k in stable if dig.get(k) != d1[k]]
                c = r["census"]
                ok = r["rc"] == "0" and not diff and bool(stable)
                prob = []
                if r["rc"] != "0":
                    prob.append(f"exit status {r['rc']}")
                if r["left"]:
                    procs = r["left"].split("\n")
                    prob.append(f"left {len(procs)} process(es) behind when it ended (killed): "
                                + "; ".join(x[:80] for x in procs[:3]))
                if diff:
                    prob.append(f"{len(diff)} of {len(stable)} digests differ: {', '.join(diff[:5])}")
                if c is None:
                    prob.append("no census")
                else:
                    if not c["active"]:
                        prob.append(f"bind mode inactive ({c['reason']})")
                    if c["failed"] or c["submit_failures"]:
                        prob.append(f"{c['failed']} failed ops, {c['submit_failures']} refused submissions")
                    if not c["kernels_on_nodes"]:
                        prob.append("no kernel ran on a pool node")
                    if kind == "daemon" and c["daemon_clients"] < c["processes"]:
                        prob.append(f"{c['processes'] - c['daemon_clients']} of {c['processes']} processes "
                                    "bound without the daemon")
                    if c["safe_mode"]:
                        prob.append("lost its daemon (safe mode)")
                    union.update(c["nodes_used"])
                    launches.append(c["kernel_launches"] or 0)
                    graphs.append(c["graph_launches"] or 0)
                ok = ok and not prob
                row["runs"].setdefault(kind, []).append({"tag": r["tag"], "identical": ok, "wall_s": r["wall_s"],
                                                         "problems": prob, "census": c})
                row["problems"].extend(f"{r['tag']}: {x}" for x in prob)
        row["kernel_launches"] = max(launches) if launches else None
        row["graph_launches"] = max(graphs) if graphs else None
        row["nodes_union"] = sorted(union)
        row["digest"] = ",".join(f"{k}={d1[k]}" for k in stable[:2]) + (" ..." if len(stable) > 2 else "")
        rows.append(row)
    # what kept a whole pass from running (run_suite.sh: the daemon did not start), and its notes
    failed = text(os.path.join(out, "daemon", "failed.txt"))
    notes = text(os.path.join(out, "daemon", "notes.txt"))
    suite = [failed] if failed else []
    # An MPS fault fails the work of every client of the server and refuses new clients until they
    # exit: the daemon pass's later failures follow from it (the daemon's status names it).
    status = text(os.path.join(out, "daemon", "status.txt")) or ""
    suite += [x.strip() for x in status.split("\n") if "MPS server FAULT" in x]
    return {"gpu": text(os.path.join(out, "gpu.txt")), "commit": text(os.path.join(out, "commit.txt")),
            "kinds": kinds, "programs": rows, "suite_problems": suite,
            "notes": notes.split("\n") if notes else []}


def markdown(s):
    kinds = s["kinds"]
    head = "| program | native repeats (stable digests) | kernel launches | graph launches | nodes used | " + \
        " | ".join(f"{k} identical" for k in kinds) + " | digests (first two) |"
    lines = [f"GPU: {s['gpu']}; shim commit: {s['commit']}", "", head,
             "|" + " --- |" * (6 + len(kinds))]
    for r in s["programs"]:
        cells = []
        for k in kinds:
            runs = r["runs"].get(k, [])
            rs = [x for x in runs if not x.get("skipped") and "cut_s" not in x]
            sk = sum(1 for x in runs if x.get("skipped"))
            cut = sum(1 for x in runs if "cut_s" in x)
            notes = [f"{sk} skipped"] * bool(sk) + [f"{cut} cut by the budget"] * bool(cut)
            cells.append(f"{sum(x['identical'] for x in rs)}/{len(rs)}" + (f" ({', '.join(notes)})" if notes else ""))
        nat = ("yes" if r["native_ok"] else "no") + f" ({r['stable_keys']}" + \
            (f", {len(r['unstable_keys'])} not" if r["unstable_keys"] else "") + ")"
        lines.append(f"| {r['program']} | {nat} | {r['kernel_launches']} | {r['graph_launches']} | "
                     f"{len(r['nodes_union'])} | " + " | ".join(cells) + f" | `{r['digest']}` |")
    probs = [("suite", p) for p in s.get("suite_problems", [])] + \
        [(r["program"], p) for r in s["programs"] for p in r["problems"]]
    unstable = [(r["program"], r["unstable_keys"]) for r in s["programs"] if r["unstable_keys"]]
    if unstable:
        lines += ["", "Digests that differ between the two native runs (not compared):"]
        lines += [f"- {p}: {', '.join(k[:20])}" + (" ..." if len(k) > 20 else "") for p, k in unstable]
    if s.get("notes"):
        lines += ["", "Notes:"] + [f"- {n}" for n in s["notes"]]
    lines += ["", "Problems:" if probs else "Problems: none."]
    lines += [f"- {p}: {x}" for p, x in probs]
    return "\n".join(lines) + "\n"


def all_identical(s):
    return not s.get("suite_problems") and \
        all(r["native_ok"] and r["stable_keys"] and not r["problems"] and r["runs"] for r in s["programs"])


if __name__ == "__main__":
    out = sys.argv[1]
    s = summarize(out)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(s, f, indent=1)
    md = markdown(s)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(md)
    print(md)
    print("SUITE:", "ALL IDENTICAL" if all_identical(s) else "PROBLEMS")
