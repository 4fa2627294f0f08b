"""Tests of pooled_rounds.py (standard library only): python3 bench/gpu/shim/pooled_rounds_test.py

1. Synthetic logs: the configuration's own line is found (not another's, not the per-configuration
   medians line), the last paired line wins, medians and target counts come out right, a missing
   configuration is an error.
2. A committed H200 log must give the figures docs/results/shim-bind-overhead.md states for it.
"""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree

import pooled_rounds  # noqa: E402


def line(name, chain, p50, p95):
    fields = {"chain_x": chain, "op_p50_pct": p50, "op_p95_pct": p95}
    body = ", ".join(f'"{k}": {{"rounds": {v}, "median": 0}}' for k, v in fields.items())
    return f"{name} {{{body}, \"rounds\": [1]}}"


class Synthetic(unittest.TestCase):
    def test_picks_the_named_paired_line(self):
        text = "\n".join(
            [
                'default runs 3 medians {"chain_ms": 1.0}',
                line("cover", [0.5, 0.5], [9.0, 9.0], [9.0, 9.0]),
                line("default", [1.0, 0.8, 0.95], [0.1, 0.2, 0.3], [0.5, 2.0, 1.0]),
            ]
        )
        r = pooled_rounds.rounds_of(text, "default")
        self.assertEqual(r["chain_x"], [1.0, 0.8, 0.95])
        self.assertEqual(r["op_p95_pct"], [0.5, 2.0, 1.0])

    def test_last_line_wins_and_missing_name_fails(self):
        text = line("bind", [0.1], [0.1], [0.1]) + "\n" + line("bind", [0.2], [0.2], [0.2])
        self.assertEqual(pooled_rounds.rounds_of(text, "bind")["chain_x"], [0.2])
        with self.assertRaises(ValueError):
            pooled_rounds.rounds_of(text, "default")

    def test_pool_counts_rounds_meeting_the_targets(self):
        a = {"chain_x": [0.95, 0.85], "op_p50_pct": [0.1, 0.2], "op_p95_pct": [0.5, 1.5]}
        b = {"chain_x": [0.9], "op_p50_pct": [0.3], "op_p95_pct": [1.0]}
        p = pooled_rounds.pool([a, b])
        self.assertEqual(p["chain_x"]["rounds"], 3)
        self.assertEqual(p["chain_x"]["median"], 0.9)
        self.assertEqual(p["chain_x"]["rounds_meeting"], 2)  # 0.95 and 0.9
        self.assertEqual(p["op_p95_pct"]["median"], 1.0)
        self.assertEqual(p["op_p95_pct"]["rounds_meeting"], 2)  # 0.5 and 1.0
        self.assertTrue(p["targets"]["chain_median_ok"])
        self.assertTrue(p["targets"]["op_p95_median_ok"])
        worse = {"chain_x": [0.8, 0.8], "op_p50_pct": [0.0, 0.0], "op_p95_pct": [2.0, 2.0]}
        q = pooled_rounds.pool([a, worse])
        self.assertFalse(q["targets"]["chain_median_ok"])
        self.assertFalse(q["targets"]["op_p95_median_ok"])


class Committed(unittest.TestCase):
    def test_session12_call5(self):
        path = os.path.join(ROOT, "docs/results/shim-bind-overhead/session12/call5/lat/latency.log")
        with open(path, encoding="utf-8") as f:
            r = pooled_rounds.rounds_of(f.read(), "default")
        p = pooled_rounds.pool([r])
        self.assertEqual(p["op_p95_pct"]["rounds"], 20)
        self.assertEqual(p["op_p95_pct"]["median"], 0.652)
        self.assertEqual(p["op_p95_pct"]["rounds_meeting"], 13)
        # The log's own median (0.936) was taken before its rounds were rounded to 3 places.
        self.assertAlmostEqual(p["chain_x"]["median"], 0.936, delta=0.0015)


if __name__ == "__main__":
    unittest.main()
