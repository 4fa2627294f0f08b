"""Summarizes bench/gpu/shim/issue8_check.sh (the issue 8 GPU check in one device call).

usage: python3 issue8_summary.py WORKDIR OUTDIR   -> OUTDIR/summary.md, OUTDIR/results.json

Standard library only (it must also run where torch is missing). What it reads from WORKDIR:

- plan.txt: one line per planned process, `CHECK NAME KIND SEED REPS` (REPS `-` for the
  application runs), written by the check script before it starts anything; a planned process
  that left no result is reported as missing, never silently dropped.
- NAME.skipped: the reason a planned process was not started (the global time budget).
- NAME.rc / NAME.wall: exit status and wall seconds of a finished process (124/137: timeout).
- Applications (CHECK rt, cudarc: stdout in NAME.out; CHECK torch: torch_check.py's JSON in
  NAME.json): KIND native or bind. The first native run is the reference; every bind run is compared
  with it (stdout byte for byte; torch: every result hash and value, and separately the profiler
  counts); further native runs show that native itself repeats.
- census_NAME.json (bind runs): the shim's census, whose `bind` section says which pool nodes the
  run's kernels ran on (`dispatcher.per_node[i]` kernels on node `nodes[i]`, a label like
  `SM 0-63`). Nodes are compared across processes by label (the pool is built the same way in
  every process).
- Decoding (CHECK decode: decode_check.py's JSONs): KIND ref (the native reference), bind (Chaos,
  compared with the reference inside decode_check.py), reshape_lm_head / reshape_all (several
  processes, each with its own --reshape-seed, whose repetitions add up to the treatment's total).
- gpu_tests.rc / gpu_tests.log: the optional GPU test binary.
- date.txt, gpu.txt, cpu.txt, nproc.txt, versions.txt, COMMIT, elapsed.txt, settings.txt.

Verdicts: an application check PASSes when every planned bind run finished with exit status 0,
matched native, and its census shows bind mode active with no failed or refused submissions; the
decoding bind check when every repetition's logits and probabilities are bitwise identical to the
reference and no token changed, with all planned repetitions run. The reshaping treatment has no
verdict: it reports drift and token changes, and says INCOMPLETE when fewer repetitions ran than
were asked.
"""

import json
import os
import sys

TIMEOUT_RCS = (124, 137)


class Work:
    """Reads files of one work directory; every reader tolerates a missing or malformed file."""

    def __init__(self, path):
        self.path = path

    def text(self, name):
        try:
            with open(os.path.join(self.path, name), errors="replace") as f:
                return f.read()
        except OSError:
            return None

    def bytes(self, name):
        try:
            with open(os.path.join(self.path, name), "rb") as f:
                return f.read()
        except OSError:
            return None

    def json(self, name):
        text = self.text(name)
        if text is None:
            return None
        try:
            return json.loads(text)
        except ValueError:
            return None

    def line(self, name):
        text = self.text(name)
        return text.strip() if text else ""

    def rc(self, name):
        text = self.text(f"{name}.rc")
        try:
            return int(text.strip()) if text else None
        except ValueError:
            return None

    def wall(self, name):
        text = self.text(f"{name}.wall")
        try:
            return round(float(text.strip()), 1) if text else None
        except ValueError:
            return None


def read_plan(w):
    plan = []
    for line in (w.text("plan.txt") or "").splitlines():
        parts = line.split()
        if len(parts) != 5:
            continue
        check, name, kind, seed, reps = parts
        plan.append({"check": check, "name": name, "kind": kind, "seed": seed,
                     "reps": int(reps) if reps.isdigit() else None})
    return plan


def census_facts(c):
    """What one census says about bind mode. None when there is no census."""
    if not isinstance(c, dict):
        return None
    b = c.get("bind") or {}
    d = b.get("dispatcher") or {}
    ops = b.get("ops") or {}
    per_node = d.get("per_node") or []
    labels = b.get("nodes") or []
    used = [labels[i] if i < len(labels) else f"node {i}" for i, n in enumerate(per_node) if n]
    return {
        "active": b.get("active"),
        "reason": b.get("reason"),
        "policy": b.get("policy"),
        "seed": b.get("seed"),
        "pool_nodes": len(labels),
        "kernel_launches": (c.get("totals") or {}).get("kernel_launches"),
        "graph_launches": (c.get("totals") or {}).get("graph_launches"),
        "ops_kernels": ops.get("kernels"),
        "kernels_on_nodes": sum(per_node),
        "nodes_used": len(used),
        "nodes_used_labels": used,
        "native_unmodelled": ops.get("native_unmodelled"),
        "native_cooperative_or_cluster": ops.get("native_cooperative_or_cluster"),
        "realize_ms": b.get("realize_ms"),
        "failed": d.get("failed"),
        "submit_failures": d.get("submit_failures"),
        "rejected": d.get("rejected"),
    }


def census_problem(f):
    """Why a bind run's census does not show a healthy bind mode, or None."""
    if f is None:
        return "no census"
    if not f["active"]:
        return f"bind mode inactive ({f['reason']})"
    if f["failed"] or f["submit_failures"]:
        return f"dispatcher: {f['failed']} failed, {f['submit_failures']} refused submissions"
    return None


def budget_stopped(w, name):
    """True when the process timed out after its timeout had been cut to the global budget
    (NAME.cut): stopped by the budget, which says nothing about the program."""
    return w.rc(name) in TIMEOUT_RCS and bool(w.line(f"{name}.cut"))


def process_problem(w, name):
    """Exit status problems of a finished process, or None (also None when it never ran)."""
    rc = w.rc(name)
    if rc is None or rc == 0:
        return None
    if budget_stopped(w, name):
        return f"stopped by the budget (timeout cut to {w.line(f'{name}.cut')} s)"
    return f"timed out (exit {rc})" if rc in TIMEOUT_RCS else f"exit {rc}"


def span(values):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    lo, hi = min(values), max(values)
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


# ---------------------------------------------------------------- applications

APP_LABELS = {
    "rt": "runtime-API C++ program (runtime_app.cu)",
    "cudarc": "cudarc driver-API program (cudarc_app)",
    "torch": "PyTorch script (torch_check.py)",
}


def app_label(check):
    """A check's label; `CHECK@POLICY` names bind runs of CHECK's program under POLICY, not Chaos."""
    base, _, policy = check.partition("@")
    label = APP_LABELS.get(base, base)
    return f"{label}, under {policy.capitalize()}" if policy else label


def app_output(w, check, name):
    """The run's comparable output: stdout bytes, or torch_check.py's JSON (None when missing)."""
    if check.partition("@")[0] == "torch":
        doc = w.json(f"{name}.json")
        return doc if isinstance(doc, dict) and "results" in doc else None
    return w.bytes(f"{name}.out")


def compare(check, ref, got):
    """(identical, problem, note) of one output against the native reference. The torch profiler's
    counts are a note, not a problem: they are not the program's output (and how the profiler
    attributes kernels may change when vitamin issues them)."""
    if ref is None or got is None:
        return None, "no output" if got is None else "no native reference", None
    if check.partition("@")[0] == "torch":
        r, g = ref.get("results") or {}, got.get("results") or {}
        differing = sorted(k for k in set(r) | set(g) if r.get(k) != g.get(k))
        note = None
        if ref.get("profiler") != got.get("profiler"):
            note = f"profiler counts differ: {got.get('profiler')} vs native {ref.get('profiler')}"
        return not differing, "differs: " + ", ".join(differing) if differing else None, note
    if got == b"" and ref == b"":
        return None, "empty output", None
    return got == ref, None if got == ref else "stdout differs", None


def summarize_app(w, check, runs):
    natives = [r for r in runs if r["kind"] == "native"]
    binds = [r for r in runs if r["kind"] == "bind"]
    ref_run = natives[0] if natives else None
    ref = app_output(w, check, ref_run["name"]) if ref_run else None
    ref_ok = ref is not None and w.rc(ref_run["name"]) == 0
    ref_skipped = bool(ref_run and w.line(f"{ref_run['name']}.skipped"))
    native_rows = []
    for r in natives:
        out = app_output(w, check, r["name"])
        same = compare(check, ref, out)[0] if r is not ref_run else out is not None
        native_rows.append({"name": r["name"], "exit": w.rc(r["name"]), "wall_s": w.wall(r["name"]),
                            "skipped": w.line(f"{r['name']}.skipped") or None,
                            "identical_to_first_native": same})
    rows = []
    union = set()
    pool = None
    for r in binds:
        name = r["name"]
        skipped = w.line(f"{name}.skipped") or None
        stopped = budget_stopped(w, name)
        rc = None if stopped else w.rc(name)  # stopped by the budget: counted as not run
        out = app_output(w, check, name)
        ident, problem, note = compare(check, ref, out) if rc is not None else (None, None, None)
        facts = census_facts(w.json(f"census_{name}.json"))
        problems = [p for p in (skipped and f"skipped: {skipped}", process_problem(w, name),
                                rc is not None and census_problem(facts), problem) if p]
        if rc is None and not skipped and not stopped:
            problems.append("no result")
        if facts:
            union.update(facts["nodes_used_labels"])
            pool = max(pool or 0, facts["pool_nodes"])
        rows.append({"name": name, "seed": r["seed"], "exit": w.rc(name), "counted": rc is not None,
                     "wall_s": w.wall(name), "identical": ident, "census": facts, "problems": problems,
                     "notes": [note] if note else [], "skipped": skipped})
    done = [x for x in rows if x["counted"]]
    identical = sum(1 for x in rows if x["identical"])
    failures = [x for x in rows if x["problems"]]
    # A run that finished and went wrong (differs, exit status, census) fails the check; runs that
    # never ran (budget) leave it incomplete.
    broken = [x for x in done if x["problems"] or x["identical"] is not True]
    if ref_skipped and not broken:
        verdict = "INCOMPLETE"  # the native reference did not run (budget): nothing to compare with
    elif not binds or not ref_ok or broken:
        verdict = "FAIL"
    elif len(done) < len(binds):
        verdict = "INCOMPLETE"
    else:
        verdict = "PASS"
    return {
        "label": app_label(check),
        "native": native_rows,
        "native_reference_ok": ref_ok,
        "native_repeatable": (all(x["identical_to_first_native"] for x in native_rows[1:])
                              if len(native_rows) > 1 else None),
        "bind_runs_planned": len(binds),
        "bind_runs_done": len(done),
        "identical": identical,
        "failures": len(failures),
        "nodes_used_per_run": [x["census"]["nodes_used"] if x["census"] else None for x in rows],
        "nodes_union": sorted(union),
        "pool_nodes": pool,
        "verdict": verdict,
        "runs": rows,
    }


# ---------------------------------------------------------------- decoding


def summarize_decode(w, runs):
    groups = {}
    for r in runs:
        groups.setdefault(r["kind"], []).append(r)
    res = {}
    ref_doc = None
    for kind in ("ref", "bind", "reshape_lm_head", "reshape_all"):
        procs = groups.get(kind, [])
        if not procs:
            continue
        reps, asked, problems, census, bg = [], 0, [], [], 0
        proc_rows = []
        for p in procs:
            name = p["name"]
            doc = w.json(f"{name}.json")
            asked += p["reps"] or 0
            skipped = w.line(f"{name}.skipped") or None
            prob = process_problem(w, name)
            if skipped:
                problems.append(f"{name} skipped: {skipped}")
            elif doc is None:
                problems.append(f"{name}: no result" + (f" ({prob})" if prob else ""))
            else:
                if kind == "ref" and ref_doc is None:
                    ref_doc = doc
                reps += doc.get("reps") or []
                bg += doc.get("background_matmuls") or 0
                if prob or not doc.get("complete", True):
                    problems.append(f"{name}: {prob or 'did not complete'} after {len(doc.get('reps') or [])} reps")
                if doc.get("background_error"):
                    problems.append(f"{name}: background load failed: {doc['background_error']}")
            facts = census_facts(w.json(f"census_{name}.json")) if kind == "bind" else None
            if kind == "bind" and doc is not None:
                cp = census_problem(facts)
                if cp:
                    problems.append(f"{name}: {cp}")
            if facts:
                census.append(facts)
            proc_rows.append({"name": name, "seed": p["seed"], "reps_asked": p["reps"],
                              "reps_run": len(doc.get("reps") or []) if doc else 0, "exit": w.rc(name),
                              "wall_s": w.wall(name), "complete": doc.get("complete") if doc else None,
                              "census": facts})
        if kind == "ref" and ref_doc and ref_doc.get("reps"):
            first = ref_doc["reps"][0]
            for r in reps:
                r.setdefault("logits_identical_to_ref", r["logits_sha256"] == first["logits_sha256"])
                r.setdefault("probs_identical_to_ref", r["probs_sha256"] == first["probs_sha256"])
                r.setdefault("token_changes", sum(1 for x, y in zip(r["tokens"], first["tokens"]) if x != y))
                r.setdefault("max_abs_logit_drift", 0.0 if r["logits_identical_to_ref"] else None)
        drifts = [r.get("max_abs_logit_drift") for r in reps if r.get("max_abs_logit_drift") is not None]
        restructured = [r.get("max_abs_logit_drift") for r in reps if (r.get("split") or 0) > 1]
        entry = {
            "processes": proc_rows,
            "reps_asked": asked,
            "reps_run": len(reps),
            "logits_identical": sum(1 for r in reps if r.get("logits_identical_to_ref")),
            "probs_identical": sum(1 for r in reps if r.get("probs_identical_to_ref")),
            "reps_with_token_changes": sum(1 for r in reps if r.get("token_changes")),
            "max_abs_logit_drift": max(drifts, default=None),
            "drift_range_restructured": ([min(restructured), max(restructured)]
                                         if restructured and None not in restructured else None),
            "background_matmuls": bg,
            "problems": problems,
        }
        if census:
            union = set()
            for f in census:
                union.update(f["nodes_used_labels"])
            entry["census"] = {
                "kernel_launches": sum(f["kernel_launches"] or 0 for f in census),
                "kernels_on_nodes": sum(f["kernels_on_nodes"] for f in census),
                "nodes_used_per_process": [f["nodes_used"] for f in census],
                "nodes_union": sorted(union),
                "pool_nodes": max(f["pool_nodes"] for f in census),
            }
        if kind.startswith("reshape"):
            by_split = {}
            for r in reps:
                s = by_split.setdefault(r.get("split"), {"reps": 0, "alloc_sms": set(), "logits_identical": 0,
                                                         "reps_with_token_changes": 0, "max_abs_logit_drift": 0.0,
                                                         "max_drift_before_divergence": 0.0,
                                                         "first_token_changes": []})
                s["reps"] += 1
                s["alloc_sms"].add(r.get("alloc_sms"))
                s["logits_identical"] += bool(r.get("logits_identical_to_ref"))
                s["reps_with_token_changes"] += bool(r.get("token_changes"))
                s["max_abs_logit_drift"] = max(s["max_abs_logit_drift"], r.get("max_abs_logit_drift") or 0.0)
                s["max_drift_before_divergence"] = max(s["max_drift_before_divergence"],
                                                       r.get("max_abs_logit_drift_before_divergence") or 0.0)
                if r.get("first_token_change") is not None:
                    s["first_token_changes"].append(r["first_token_change"])
            for s in by_split.values():
                s["alloc_sms"] = sorted(x for x in s["alloc_sms"] if x is not None)
            entry["by_split"] = {str(k): v for k, v in sorted(by_split.items(), key=lambda kv: kv[0] or 0)}
        if kind == "bind":
            ok = (entry["reps_run"] == asked and asked > 0 and entry["logits_identical"] == asked
                  and entry["probs_identical"] == asked and entry["reps_with_token_changes"] == 0 and not problems)
            bad = entry["logits_identical"] < entry["reps_run"] or entry["reps_with_token_changes"] > 0
            # No repetition at all is a failure unless the budget kept every process from running.
            held = all(w.line(f"{p['name']}.skipped") or budget_stopped(w, p["name"]) for p in procs)
            if not bad and entry["reps_run"] == 0 and not held:
                bad = True
            entry["verdict"] = "PASS" if ok else ("FAIL" if bad else "INCOMPLETE")
        elif kind.startswith("reshape"):
            entry["verdict"] = "reported" if entry["reps_run"] >= asked and not problems else "INCOMPLETE"
        else:
            same = ref_doc and entry["reps_run"] and entry["logits_identical"] == entry["reps_run"]
            entry["verdict"] = "PASS" if same else "FAIL"
        res[kind] = entry
    if ref_doc and ref_doc.get("reps"):
        res["reference"] = {"tokens": ref_doc.get("tokens"), "model": ref_doc.get("model"),
                            "min_top2_margin": ref_doc["reps"][0].get("min_top2_margin"),
                            "logits_sha256": ref_doc["reps"][0].get("logits_sha256"),
                            "probs_sha256": ref_doc["reps"][0].get("probs_sha256")}
    return res


# ---------------------------------------------------------------- GPU tests


def summarize_gpu_tests(w):
    rc = w.rc("gpu_tests")
    skipped = w.line("gpu_tests.skipped") or None
    log = w.text("gpu_tests.log")
    if rc is None and not skipped:
        return {"ran": False, "note": "not staged (no gpu_tests binary)"}
    all_lines = (log or "").splitlines()
    lines = [ln.strip() for ln in all_lines
             if ln.startswith("test ") or "test result" in ln or "SKIPPED" in ln or "panicked" in ln]
    results = [ln for ln in all_lines if ln.startswith("test ") and (ln.endswith(" ok") or " FAILED" in ln)]
    passed = sum(1 for ln in results if ln.endswith(" ok"))
    skipped_no_gpu = any("SKIPPED" in ln for ln in all_lines)
    # libtest prints "ok" for a test that skipped itself (no GPU), and "test result: ok. 0 passed"
    # when the filter matched nothing: neither is a pass of a GPU test.
    if rc is None:
        verdict = "not run"
    elif rc != 0 or passed < len(results):
        verdict = "FAIL"
    elif not results:
        verdict = "NO TESTS RAN (check GPU_TESTS_ARGS)"
    elif skipped_no_gpu:
        verdict = "SKIPPED by the test (no usable GPU?)"
    else:
        verdict = "PASS"
    return {"ran": rc is not None, "exit": rc, "skipped": skipped, "wall_s": w.wall("gpu_tests"),
            "tests": len(results), "passed": passed, "verdict": verdict, "lines": lines[-20:]}


# ---------------------------------------------------------------- report


def fmt(v, digits=3):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


def render(res):
    env = res["env"]
    lines = [
        "# Issue 8 GPU check (bench/gpu/shim/issue8_check.sh)",
        "",
        f"- date: {env.get('date') or '-'}",
        f"- GPU: {env.get('gpu') or '-'}",
        f"- host: {env.get('cpu') or '-'}, {env.get('nproc') or '?'} cores",
        f"- software: {env.get('versions') or '-'}",
        f"- commit: {env.get('commit') or '-'}",
        f"- settings: {env.get('settings') or '-'}",
        f"- command time: {env.get('elapsed') or '-'} s",
        "",
    ]
    apps = res["apps"]
    if apps:
        runs_per = max((a["bind_runs_planned"] for a in apps.values()), default=0)
        lines += [f"## Applications under bind mode, Chaos, {runs_per} runs each", ""]
        if any("@" in c for c in apps):
            lines += ["(Programs marked \"under Throughput\": extra bind runs under the default policy, "
                      "`THROUGHPUT_RUNS`, against the same native reference.)", ""]
        lines += [
                  "Bind run = `LD_PRELOAD=libvitamin_cuda.so VITAMIN_MODE=bind VITAMIN_POLICY=chaos "
                  "VITAMIN_SEED=s`; compared with the first native run (C++ and cudarc: stdout byte for byte; "
                  "PyTorch: every result hash and value). Nodes: pool nodes (green-context partitions; the whole-device node runs on the primary context by default) that ran "
                  "at least one of the run's kernels, from its census.", "",
                  "| program | verdict | native runs (repeatable) | bind runs done/planned | identical | "
                  "nodes used per run | union of nodes over the runs | failures |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for a in apps.values():
            rep = a["native_repeatable"]
            nat = f"{sum(1 for n in a['native'] if n['exit'] == 0)}" + (
                "" if rep is None else f" ({'yes' if rep else 'NO'})")
            pool = a["pool_nodes"] if a["pool_nodes"] is not None else "?"
            lines.append(f"| {a['label']} | **{a['verdict']}** | {nat} | "
                         f"{a['bind_runs_done']}/{a['bind_runs_planned']} | {a['identical']} | "
                         f"{span(a['nodes_used_per_run'])} | {len(a['nodes_union'])} of {pool} | {a['failures']} |")
        lines += ["", "| run | seed | exit | identical | kernels launched / on pool nodes | nodes used | "
                  "realize ms | native-path calls | wall s | problems, notes |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for a in apps.values():
            for r in a["runs"]:
                c = r["census"] or {}
                lines.append(f"| {r['name']} | {r['seed']} | {fmt(r['exit'])} | {fmt(r['identical'])} | "
                             f"{fmt(c.get('kernel_launches'))} / {fmt(c.get('kernels_on_nodes'))} | "
                             f"{fmt(c.get('nodes_used'))} | {fmt(c.get('realize_ms'))} | "
                             f"{fmt(c.get('native_unmodelled'))} | {fmt(r['wall_s'])} | "
                             f"{'; '.join(r['problems'] + r['notes'])} |")
        lines.append("")
    dec = res["decode"]
    if dec:
        ref = dec.get("reference") or {}
        lines += ["## Decoding (decode_check.py: seeded random Llama-style model, greedy decoding)", "",
                  f"Reference: the native run's first repetition ({fmt(ref.get('tokens'))} tokens; logits "
                  f"{(ref.get('logits_sha256') or '-')[:12]}, probabilities {(ref.get('probs_sha256') or '-')[:12]}); "
                  f"its smallest top-2 logit gap: {fmt(ref.get('min_top2_margin'))}. Identical = SHA-256 of "
                  "all steps' fp32 logits / probabilities equal to the reference's.", "",
                  "| run | verdict | processes | reps run/asked | logits identical | probs identical | "
                  "reps with token changes | max abs logit drift | drift range, split > 1 | background matmuls | "
                  "nodes (census) | problems |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        labels = {"ref": "native reference", "bind": "bind mode, Chaos", "reshape_lm_head": "reshaping, LM head",
                  "reshape_all": "reshaping, all linear layers"}
        for kind, label in labels.items():
            e = dec.get(kind)
            if not e:
                continue
            c = e.get("census")
            nodes = (f"{span(c['nodes_used_per_process'])} per process, union {len(c['nodes_union'])} of "
                     f"{c['pool_nodes']}; {c['kernels_on_nodes']} of {c['kernel_launches']} kernels on nodes"
                     if c else "-")
            dr = e["drift_range_restructured"]
            lines.append(f"| {label} | **{e['verdict']}** | {len(e['processes'])} | {e['reps_run']}/{e['reps_asked']} "
                         f"| {e['logits_identical']} | {e['probs_identical']} | {e['reps_with_token_changes']} | "
                         f"{fmt(e['max_abs_logit_drift'])} | {f'{dr[0]:.3g} .. {dr[1]:.3g}' if dr else '-'} | "
                         f"{e['background_matmuls']} | {nodes} | {'; '.join(e['problems'])} |")
        for kind in ("reshape_lm_head", "reshape_all"):
            e = dec.get(kind)
            if not e or not e.get("by_split"):
                continue
            lines += ["", f"{labels[kind]}, per split count (split-K with max(1, m // 8) chunks, m = simulated "
                      "allocation in SMs):", "",
                      "| split | simulated SMs | reps | logits identical | reps with token changes | max abs drift | "
                      "max drift up to the first change | first change at steps |",
                      "| --- | --- | --- | --- | --- | --- | --- | --- |"]
            for k, s in e["by_split"].items():
                firsts = sorted(set(s["first_token_changes"]))
                lines.append(f"| {k} | {s['alloc_sms']} | {s['reps']} | {s['logits_identical']} | "
                             f"{s['reps_with_token_changes']} | {s['max_abs_logit_drift']:.3g} | "
                             f"{s['max_drift_before_divergence']:.3g} | {firsts if firsts else '-'} |")
        lines.append("")
    g = res["gpu_tests"]
    lines += ["## GPU tests (optional slot: `$HERE/gpu_tests $GPU_TESTS_ARGS`)", ""]
    if not g["ran"] and not g.get("skipped"):
        lines.append(f"- {g['note']}")
    elif g.get("skipped"):
        lines.append(f"- skipped: {g['skipped']}")
    else:
        lines.append(f"- **{g['verdict']}**: {g['passed']} of {g['tests']} tests passed, exit {g['exit']} in "
                     f"{fmt(g['wall_s'])} s (full output: gpu_tests.log)")
        lines += [f"- `{ln}`" for ln in g["lines"]]
    lines.append("")
    if res["skipped"]:
        lines += ["## Skipped or stopped (time budget)", ""] + [f"- {k}: {v}" for k, v in res["skipped"].items()] + [""]
    verdicts = [a["verdict"] for a in apps.values()] + [dec[k]["verdict"] for k in ("bind",) if k in dec]
    lines.append(f"Verdicts: {sum(v == 'PASS' for v in verdicts)} of {len(verdicts)} checks PASS"
                 + ("" if all(v == "PASS" for v in verdicts) and verdicts else " (see the tables)") + ".")
    return "\n".join(lines) + "\n"


def summarize(work, out):
    w = Work(work)
    plan = read_plan(w)
    by_check = {}
    for p in plan:
        by_check.setdefault(p["check"], []).append(p)
    checks = [c for c in by_check if c.partition("@")[0] in APP_LABELS]
    order = list(APP_LABELS)
    apps = {c: summarize_app(w, c, by_check[c])
            for c in sorted(checks, key=lambda c: ("@" in c, order.index(c.partition("@")[0])))}
    skipped = {p["name"]: w.line(f"{p['name']}.skipped") for p in plan if w.line(f"{p['name']}.skipped")}
    for p in plan:
        if budget_stopped(w, p["name"]):
            skipped[p["name"]] = f"started, stopped by the budget (timeout cut to {w.line(p['name'] + '.cut')} s)"
    if w.line("gpu_tests.skipped"):
        skipped["gpu_tests"] = w.line("gpu_tests.skipped")
    env = {"date": w.line("date.txt"), "gpu": w.line("gpu.txt"),
           "cpu": w.line("cpu.txt").replace("Model name:", "").strip(), "nproc": w.line("nproc.txt"),
           "versions": " ".join(w.line("versions.txt").split()), "commit": w.line("COMMIT"),
           "elapsed": w.line("elapsed.txt"), "settings": " ".join(w.line("settings.txt").split())}
    res = {"env": env, "plan": plan, "apps": apps, "decode": summarize_decode(w, by_check.get("decode", [])),
           "gpu_tests": summarize_gpu_tests(w), "skipped": skipped}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(render(res))
    return res


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python3 issue8_summary.py WORKDIR OUTDIR")
    summarize(sys.argv[1], sys.argv[2])
