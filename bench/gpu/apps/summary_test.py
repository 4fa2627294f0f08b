"""Unit test of summary.py on a synthetic suite run (no GPU): stable and unstable digests, an
identical and a differing bind run, a failed exit status, a census without kernels on nodes, a child
process's census added to its run's, one of a child that did no GPU work left out, a run cut by
the call's budget, daemon runs (every process a client, one that bound alone, one that lost its
daemon) and a daemon pass that did not start."""
import json
import os
import tempfile
import unittest

import summary


def write(path, obj):
    with open(path, "w") as f:
        f.write(obj if isinstance(obj, str) else json.dumps(obj))


def census(nodes_used, kernels=10, failed=0, daemon=None):
    per_node = [0] * 4
    for n in nodes_used:
        per_node[n] = kernels
    return {"totals": {"kernel_launches": kernels * len(nodes_used), "graph_launches": 0},
            "bind": {"active": True, "nodes": ["SM 0-131", "SM 0-7", "SM 8-15", "SM 16-23"],
                     "dispatcher": {"per_node": per_node, "failed": failed, "submit_failures": 0,
                                    **({"daemon": daemon} if daemon is not None else {})}}}


class SummaryTest(unittest.TestCase):
    def test_summary(self):
        with tempfile.TemporaryDirectory() as out:
            runs = os.path.join(out, "runs")
            os.makedirs(runs)
            write(os.path.join(out, "programs.txt"), "good\nbad\n")
            for p in ("good", "bad"):
                for i in (1, 2):
                    write(os.path.join(runs, f"{p}.native.{i}.json"),
                          {"digests": {"a": "1", "b": "2", "r": f"random{i}"}})
                    write(os.path.join(runs, f"{p}.native.{i}.rc"), "0")
            write(os.path.join(runs, "good.chaos.1.json"), {"digests": {"a": "1", "b": "2", "r": "x"}})
            write(os.path.join(runs, "good.chaos.1.rc"), "0")
            write(os.path.join(runs, "good.chaos.1.census.json"), census([1, 2]))
            write(os.path.join(runs, "good.chaos.1.census.json.4242"), census([3], kernels=5))  # a child process
            # a child that launched nothing and never started bind mode (a compile worker)
            idle = {"totals": {"kernel_launches": 0, "graph_launches": 0},
                    "bind": {"active": False, "reason": "not started: no bind-mode call was made with a current context"}}
            write(os.path.join(runs, "good.chaos.1.census.json.4243"), idle)
            write(os.path.join(runs, "bad.chaos.1.json"), {"digests": {"a": "1", "b": "9"}})
            write(os.path.join(runs, "bad.chaos.1.rc"), "0")
            write(os.path.join(runs, "bad.chaos.1.census.json"), census([3]))
            write(os.path.join(runs, "bad.chaos.2.rc"), "1")
            write(os.path.join(runs, "bad.chaos.2.census.json"), census([]))
            # a throughput run stopped where the call's budget ran out: cut, not a failure; one
            # stopped at the run timeout (no .cut file) is a failure
            write(os.path.join(runs, "good.throughput.1.rc"), "124")
            write(os.path.join(runs, "good.throughput.1.cut"), "25")
            write(os.path.join(runs, "bad.throughput.1.rc"), "124")
            # daemon runs: every process a client of the daemon; one that decided alone, one that
            # lost its daemon
            client = {"client": 3, "policy": "chaos", "refused_bindings": 2, "safe_mode": False}
            write(os.path.join(runs, "good.daemon.1.json"), {"digests": {"a": "1", "b": "2"}})
            write(os.path.join(runs, "good.daemon.1.rc"), "0")
            write(os.path.join(runs, "good.daemon.1.census.json"), census([1], daemon=client))
            write(os.path.join(runs, "good.daemon.1.census.json.77"), census([2], daemon=dict(client, client=4)))
            write(os.path.join(runs, "bad.daemon.1.json"), {"digests": {"a": "1", "b": "2"}})
            write(os.path.join(runs, "bad.daemon.1.rc"), "0")
            write(os.path.join(runs, "bad.daemon.1.census.json"), census([1], daemon=client))
            write(os.path.join(runs, "bad.daemon.1.census.json.78"), census([2]))
            write(os.path.join(runs, "bad.daemon.2.json"), {"digests": {"a": "1", "b": "2"}})
            write(os.path.join(runs, "bad.daemon.2.rc"), "0")
            write(os.path.join(runs, "bad.daemon.2.census.json"), census([1], daemon=dict(client, safe_mode=True)))
            s = summary.summarize(out)
            good, bad = s["programs"]
            self.assertEqual(good["runs"]["throughput"], [{"tag": "good.throughput.1", "cut_s": "25"}])
            self.assertIn("exit status 124", " ".join(bad["problems"]))
            self.assertEqual(s["kinds"], ["chaos", "daemon", "throughput"])
            d = good["runs"]["daemon"][0]
            self.assertTrue(d["identical"])
            self.assertEqual((d["census"]["daemon_clients"], d["census"]["refused_bindings"]), (2, 4))
            self.assertEqual([r["identical"] for r in bad["runs"]["daemon"]], [False, False])
            self.assertIn("bad.daemon.1: 1 of 2 processes bound without the daemon", bad["problems"])
            self.assertIn("bad.daemon.2: lost its daemon (safe mode)", bad["problems"])
            self.assertEqual(good["stable_keys"], 2)
            self.assertEqual(good["unstable_keys"], ["r"])
            self.assertEqual(good["problems"], [])
            self.assertEqual(good["nodes_union"], ["SM 0-7", "SM 16-23", "SM 8-15"])
            c = good["runs"]["chaos"][0]["census"]
            self.assertEqual((c["processes"], c["kernel_launches"], c["kernels_on_nodes"]), (2, 25, 25))
            self.assertEqual((c["idle_processes"], c["active"]), (1, True))
            self.assertTrue(good["runs"]["chaos"][0]["identical"])
            self.assertEqual([r["identical"] for r in bad["runs"]["chaos"]], [False, False])
            probs = " ".join(bad["problems"])
            self.assertIn("1 of 2 digests differ: b", probs)
            self.assertIn("exit status 1", probs)
            self.assertIn("no kernel ran on a pool node", probs)
            self.assertFalse(summary.all_identical(s))
            md = summary.markdown(s)
            self.assertIn("| good | yes (2, 1 not) | 25 | 0 | 3 | 1/1 | 1/1 | 0/0 (1 cut by the budget) |", md)
            self.assertIn("| bad |", md)
            # a pass that could not run at all (the daemon did not start) is a problem of the suite
            os.makedirs(os.path.join(out, "daemon"))
            write(os.path.join(out, "daemon", "failed.txt"), "vitamin daemon did not start")
            s = summary.summarize(out)
            self.assertEqual(s["suite_problems"], ["vitamin daemon did not start"])
            self.assertIn("- suite: vitamin daemon did not start", summary.markdown(s))


if __name__ == "__main__":
    unittest.main()
