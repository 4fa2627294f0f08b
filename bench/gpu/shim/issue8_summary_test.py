"""Tests of issue8_summary.py (standard library only): python3 bench/gpu/shim/issue8_summary_test.py

1. Committed H200 results, laid out the way issue8_check.sh names its files, must give the figures
   the committed reports state (docs/results/shim-bind-h200.md run 3, shim-bind-decode.md run 1).
2. Synthetic work directories: each fault must be reported (stdout differs, no census, bind mode
   inactive, dispatcher failures, a timeout, a budget stop, a skipped reference, token changes).
"""

import json
import os
import shutil
import sys
import tarfile
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
RESULTS = os.path.join(ROOT, "docs", "results")
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree

import issue8_summary  # noqa: E402


class Dir:
    """A work directory under construction."""

    def __init__(self, path):
        self.path = path
        self.plan = []

    def write(self, name, data):
        mode = "wb" if isinstance(data, bytes) else "w"
        with open(os.path.join(self.path, name), mode) as f:
            f.write(data if isinstance(data, (bytes, str)) else json.dumps(data))

    def run(self, check, name, kind, seed="-", reps="-", rc=0):
        self.plan.append(f"{check} {name} {kind} {seed} {reps}")
        if rc is not None:
            self.write(f"{name}.rc", f"{rc}\n")
            self.write(f"{name}.wall", "1.0\n")

    def summarize(self):
        self.write("plan.txt", "\n".join(self.plan) + "\n")
        out = os.path.join(self.path, "out")
        res = issue8_summary.summarize(self.path, out)
        with open(os.path.join(out, "summary.md")) as f:
            return res, f.read()


def census(per_node, active=True, failed=0, kernels=None):
    labels = [f"SM {8 * i}-{8 * i + 7}" for i in range(len(per_node))]
    return {"totals": {"kernel_launches": kernels if kernels is not None else sum(per_node)},
            "bind": {"active": active, "reason": None if active else "no green contexts", "nodes": labels,
                     "realize_ms": 100.0, "ops": {"kernels": sum(per_node), "native_unmodelled": 4},
                     "dispatcher": {"per_node": per_node, "failed": failed, "submit_failures": 0, "rejected": 0}}}


def rep(r, same=True, split=0, changes=0, drift=0.0):
    return {"rep": r, "split": split, "alloc_sms": split * 8 or None, "tokens": [1, 2, 3],
            "logits_sha256": "a" if same else "b", "probs_sha256": "c" if same else "d", "min_top2_margin": 1e-3,
            "logits_identical_to_ref": same, "probs_identical_to_ref": same, "token_changes": changes,
            "first_token_change": 1 if changes else None, "max_abs_logit_drift": drift,
            "max_abs_logit_drift_before_divergence": drift}


def decode_doc(reps, asked, complete=True):
    return {"mode": "plain", "complete": complete, "reps_requested": asked, "reps_run": len(reps), "tokens": 3,
            "background_matmuls": 10, "background_error": None, "reps": reps}


class Committed(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="issue8-summary-test.")
        self.d = Dir(self.tmp)

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def extract(self, archive, renames):
        with tarfile.open(archive) as t:
            for m in t.getmembers():
                base = os.path.basename(m.name)
                if base in renames:
                    self.d.write(renames[base], t.extractfile(m).read())

    def test_bind_run3_apps(self):
        """shim-bind-h200 run 3: C++ program identical in Chaos seeds 1-3 on 11, 11, 12 of 59 nodes;
        PyTorch Chaos seed 1 identical on 54 of 59."""
        renames = {"rt_native.out": "rt_native.out", "torch_native.json": "torch_native_1.json"}
        for s in (1, 2, 3):
            renames[f"rt_chaos_{s}.out"] = f"rt_chaos_{s}.out"
            renames[f"census_rt_chaos_{s}.json"] = f"census_rt_chaos_{s}.json"
        renames["torch_chaos_1.json"] = "torch_chaos_1.json"
        renames["census_torch_chaos_1.json"] = "census_torch_chaos_1.json"
        self.extract(os.path.join(RESULTS, "shim-bind-h200", "run3", "censuses.tar.gz"), renames)
        self.d.run("rt", "rt_native", "native")
        for s in (1, 2, 3):
            self.d.run("rt", f"rt_chaos_{s}", "bind", s)
        self.d.run("torch", "torch_native_1", "native")
        self.d.run("torch", "torch_chaos_1", "bind", 1)
        res, md = self.d.summarize()
        rt, torch = res["apps"]["rt"], res["apps"]["torch"]
        self.assertEqual(rt["verdict"], "PASS", md)
        self.assertEqual((rt["identical"], rt["bind_runs_done"]), (3, 3))
        self.assertEqual(rt["nodes_used_per_run"], [11, 11, 12])
        self.assertEqual(rt["pool_nodes"], 59)
        self.assertGreaterEqual(len(rt["nodes_union"]), 12)
        self.assertLessEqual(len(rt["nodes_union"]), 34)
        self.assertEqual(torch["verdict"], "PASS", md)
        self.assertEqual(torch["nodes_used_per_run"], [54])
        self.assertEqual(torch["runs"][0]["census"]["kernels_on_nodes"], 301)
        self.assertEqual(torch["runs"][0]["census"]["kernel_launches"], 302)
        self.assertIn("| runtime-API C++ program (runtime_app.cu) | **PASS** | 1 | 3/3 | 3 | 11-12 |", md)

    def test_decode_run1(self):
        """shim-bind-decode run 1: 62 Chaos reps (15+16+16+15 of 25 asked each) all identical, 0 token
        changes; reshaping: LM head 16 reps (1 identical: split 1), all layers 5; drift 1.43e-6 / 8.11e-6."""
        renames = {"native.json": "decode_native.json", "reshape_lm_head.json": "decode_reshape_lm_head_p1.json",
                   "reshape_all.json": "decode_reshape_all_p1.json", "date.txt": "date.txt", "gpu.txt": "gpu.txt"}
        for s in (1, 2, 3, 4):
            renames[f"chaos_{s}.json"] = f"decode_chaos_{s}.json"
            renames[f"census_chaos_{s}.json"] = f"census_decode_chaos_{s}.json"
        self.extract(os.path.join(RESULTS, "shim-bind-decode", "run1", "runs.tar.gz"), renames)
        self.d.run("decode", "decode_native", "ref", "-", 5)
        for s in (1, 2, 3, 4):
            self.d.run("decode", f"decode_chaos_{s}", "bind", s, 25)
        self.d.run("decode", "decode_reshape_lm_head_p1", "reshape_lm_head", 8, 100)
        self.d.run("decode", "decode_reshape_all_p1", "reshape_all", 8, 100)
        res, md = self.d.summarize()
        dec = res["decode"]
        self.assertEqual(dec["ref"]["verdict"], "PASS")
        self.assertEqual(dec["ref"]["reps_run"], 5)
        b = dec["bind"]
        self.assertEqual((b["reps_run"], b["reps_asked"]), (62, 100))
        self.assertEqual((b["logits_identical"], b["probs_identical"]), (62, 62))
        self.assertEqual(b["reps_with_token_changes"], 0)
        self.assertEqual(b["verdict"], "INCOMPLETE")  # 62 of the 100 asked: the processes hit their deadline
        self.assertEqual(len(b["census"]["nodes_union"]), 59)
        self.assertEqual(b["census"]["kernels_on_nodes"], 223997 + 238708 + 238600 + 223697)
        lm, al = dec["reshape_lm_head"], dec["reshape_all"]
        self.assertEqual((lm["reps_run"], lm["logits_identical"], lm["reps_with_token_changes"]), (16, 1, 0))
        self.assertAlmostEqual(lm["max_abs_logit_drift"], 1.430511474609375e-06)
        self.assertEqual(lm["by_split"]["1"]["logits_identical"], 1)
        self.assertEqual((al["reps_run"], al["logits_identical"]), (5, 0))
        self.assertAlmostEqual(al["max_abs_logit_drift"], 8.106231689453125e-06)
        self.assertEqual(al["verdict"], "INCOMPLETE")
        self.assertAlmostEqual(res["decode"]["reference"]["min_top2_margin"], 0.0003085136413574219)
        self.assertIn("reshaping, LM head, per split count", md)


class Synthetic(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="issue8-summary-test.")
        self.d = Dir(self.tmp)

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def app(self, outs, censuses, rcs=None):
        self.d.run("rt", "rt_native", "native")
        self.d.write("rt_native.out", b"y=1\n")
        for i, out in enumerate(outs, 1):
            rc = (rcs or {}).get(i, 0)
            self.d.run("rt", f"rt_chaos_{i}", "bind", i, rc=rc)
            if out is not None:
                self.d.write(f"rt_chaos_{i}.out", out)
            if censuses[i - 1] is not None:
                self.d.write(f"census_rt_chaos_{i}.json", censuses[i - 1])
        return self.d.summarize()

    def test_all_good_union_of_nodes(self):
        res, md = self.app([b"y=1\n"] * 3, [census([1, 0, 2, 0]), census([0, 0, 1, 1]), census([3, 0, 0, 0])])
        rt = res["apps"]["rt"]
        self.assertEqual(rt["verdict"], "PASS", md)
        self.assertEqual(rt["nodes_used_per_run"], [2, 2, 1])
        self.assertEqual(rt["nodes_union"], ["SM 0-7", "SM 16-23", "SM 24-31"])
        self.assertIn("| 1-2 | 3 of 4 | 0 |", md)

    def test_extra_runs_under_another_policy_are_their_own_check(self):
        d = self.d
        d.run("rt", "rt_native", "native")
        d.write("rt_native.out", b"y=1\n")
        d.run("rt", "rt_chaos_1", "bind", seed="1")
        d.write("rt_chaos_1.out", b"y=1\n")
        d.write("census_rt_chaos_1.json", census([1, 1]))
        d.run("rt@throughput", "rt_tp_1", "bind")
        d.write("rt_tp_1.out", b"y=2\n")
        d.write("census_rt_tp_1.json", census([2]))
        d.run("rt@throughput", "rt_native", "native")
        res, md = d.summarize()
        self.assertEqual(list(res["apps"]), ["rt", "rt@throughput"])
        self.assertEqual(res["apps"]["rt"]["verdict"], "PASS", md)
        tp = res["apps"]["rt@throughput"]
        self.assertEqual(tp["verdict"], "FAIL", md)
        self.assertEqual(tp["label"], "runtime-API C++ program (runtime_app.cu), under Throughput")
        self.assertIn("stdout differs", tp["runs"][0]["problems"])
        self.assertIn("under Throughput", md)

    def test_stdout_differs(self):
        res, _ = self.app([b"y=1\n", b"y=2\n"], [census([1]), census([1])])
        rt = res["apps"]["rt"]
        self.assertEqual(rt["verdict"], "FAIL")
        self.assertEqual(rt["identical"], 1)
        self.assertIn("stdout differs", rt["runs"][1]["problems"])

    def test_census_faults(self):
        res, _ = self.app([b"y=1\n"] * 3, [None, census([1], active=False), census([1], failed=2)])
        probs = [r["problems"] for r in res["apps"]["rt"]["runs"]]
        self.assertEqual(probs[0], ["no census"])
        self.assertTrue(probs[1][0].startswith("bind mode inactive"))
        self.assertTrue(probs[2][0].startswith("dispatcher: 2 failed"))
        self.assertEqual(res["apps"]["rt"]["verdict"], "FAIL")

    def test_timeout_fails_but_budget_stop_is_incomplete(self):
        res, _ = self.app([b"y=1\n", b""], [census([1]), None], rcs={2: 124})
        self.assertEqual(res["apps"]["rt"]["verdict"], "FAIL")
        self.assertIn("timed out (exit 124)", res["apps"]["rt"]["runs"][1]["problems"])
        self.d.write("rt_chaos_2.cut", "7\n")
        res, md = self.d.summarize()
        rt = res["apps"]["rt"]
        self.assertEqual(rt["verdict"], "INCOMPLETE", md)
        self.assertEqual(rt["bind_runs_done"], 1)
        self.assertIn("rt_chaos_2", res["skipped"])

    def test_skipped_reference_is_incomplete(self):
        self.d.run("torch", "torch_native_1", "native", rc=None)
        self.d.write("torch_native_1.skipped", "only 3 s of the budget left\n")
        self.d.run("torch", "torch_chaos_1", "bind", 1, rc=None)
        self.d.write("torch_chaos_1.skipped", "only 3 s of the budget left\n")
        res, md = self.d.summarize()
        self.assertEqual(res["apps"]["torch"]["verdict"], "INCOMPLETE", md)
        self.assertIn("## Skipped or stopped (time budget)", md)

    def test_torch_profiler_difference_is_a_note(self):
        self.d.run("torch", "torch_native_1", "native")
        self.d.write("torch_native_1.json", {"results": {"a": "1"}, "profiler": {"kernels": 3}})
        self.d.run("torch", "torch_chaos_1", "bind", 1)
        self.d.write("torch_chaos_1.json", {"results": {"a": "1"}, "profiler": {"kernels": 2}})
        self.d.write("census_torch_chaos_1.json", census([3]))
        self.d.run("torch", "torch_chaos_2", "bind", 2)
        self.d.write("torch_chaos_2.json", {"results": {"a": "2"}, "profiler": {"kernels": 3}})
        self.d.write("census_torch_chaos_2.json", census([3]))
        res, _ = self.d.summarize()
        runs = res["apps"]["torch"]["runs"]
        self.assertEqual((runs[0]["identical"], runs[0]["problems"]), (True, []))
        self.assertTrue(runs[0]["notes"][0].startswith("profiler counts differ"))
        self.assertEqual(runs[1]["problems"], ["differs: a"])
        self.assertEqual(res["apps"]["torch"]["verdict"], "FAIL")

    def test_decode_token_change_fails_and_split_processes_add_up(self):
        self.d.run("decode", "decode_native", "ref", "-", 2)
        self.d.write("decode_native.json", decode_doc([rep(0), rep(1)], 2))
        self.d.run("decode", "decode_chaos_7", "bind", 7, 3)
        self.d.write("decode_chaos_7.json", decode_doc([rep(0), rep(1, same=False, changes=2, drift=0.5), rep(2)], 3))
        self.d.write("census_decode_chaos_7.json", census([5, 5]))
        for k, reps in ((1, [rep(0, False, 4, 0, 1e-6), rep(1, True, 1)]), (2, [rep(0, False, 9, 1, 2e-6)])):
            self.d.run("decode", f"decode_reshape_all_p{k}", "reshape_all", 7 + k, 2 if k == 1 else 1)
            self.d.write(f"decode_reshape_all_p{k}.json", decode_doc(reps, 2 if k == 1 else 1))
        res, _ = self.d.summarize()
        b, al = res["decode"]["bind"], res["decode"]["reshape_all"]
        self.assertEqual(b["verdict"], "FAIL")
        self.assertEqual((b["logits_identical"], b["reps_with_token_changes"]), (2, 1))
        self.assertEqual((al["reps_run"], al["reps_asked"], al["verdict"]), (3, 3, "reported"))
        self.assertEqual(al["reps_with_token_changes"], 1)
        self.assertEqual(al["drift_range_restructured"], [1e-6, 2e-6])
        self.assertEqual(sorted(al["by_split"]), ["1", "4", "9"])

    def test_decode_killed_process_keeps_its_reps(self):
        self.d.run("decode", "decode_native", "ref", "-", 1)
        self.d.write("decode_native.json", decode_doc([rep(0)], 1))
        self.d.run("decode", "decode_reshape_lm_head_p1", "reshape_lm_head", 8, 50, rc=124)
        self.d.write("decode_reshape_lm_head_p1.json", decode_doc([rep(0, False, 3, 0, 1e-6)] * 7, 50, complete=False))
        res, _ = self.d.summarize()
        lm = res["decode"]["reshape_lm_head"]
        self.assertEqual((lm["reps_run"], lm["verdict"]), (7, "INCOMPLETE"))
        self.assertIn("timed out (exit 124) after 7 reps", lm["problems"][0])

    def test_gpu_tests_slot(self):
        cases = [
            (0, "test graph_sms ... ok\ntest result: ok. 1 passed; 0 failed\n", "PASS"),
            (0, "running 0 tests\ntest result: ok. 0 passed; 0 failed; 14 filtered out\n", "NO TESTS RAN"),
            (0, "SKIPPED: no CUDA GPU (no libcuda)\ntest graph_sms ... ok\ntest result: ok. 1 passed\n", "SKIPPED"),
            (101, "test graph_sms ... FAILED\ntest result: FAILED. 0 passed; 1 failed\n", "FAIL"),
        ]
        for rc, log, verdict in cases:
            self.d.write("gpu_tests.rc", f"{rc}\n")
            self.d.write("gpu_tests.log", log)
            res, md = self.d.summarize()
            self.assertTrue(res["gpu_tests"]["verdict"].startswith(verdict), (log, res["gpu_tests"]))
            self.assertIn(f"- **{res['gpu_tests']['verdict']}**", md)

    def test_empty_work_directory(self):
        res, md = self.d.summarize()
        self.assertEqual(res["apps"], {})
        self.assertIn("not staged", md)


if __name__ == "__main__":
    unittest.main()
