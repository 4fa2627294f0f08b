"""Tests of ir_iters.py on synthetic callgrind dumps (no valgrind needed)."""
import os
import tempfile
import unittest

import ir_iters


def write_dumps(d, irs):
    for i, ir in enumerate(irs, start=1):
        with open(os.path.join(d, f"cg.out.{i}"), "w") as f:
            f.write(f"# callgrind format\nversion: 1\nevents: Ir\nsummary: {ir}\n")


class IrIters(unittest.TestCase):
    def test_drops_warm_up_and_exit_and_orders_numerically(self):
        with tempfile.TemporaryDirectory() as d:
            # dumps 1-3 warm-up, 4-11 iterations, 12 the exit; numeric order, not lexical (10 < 2)
            write_dumps(d, [9, 9, 9, 256, 512, 256, 256, 768, 256, 256, 256, 5])
            self.assertEqual(ir_iters.iteration_irs(d), [256, 512, 256, 256, 768, 256, 256, 256])

    def test_row_per_op(self):
        r = ir_iters.row("a", "cfg", [2560, 2560, 5120, 2560], 256)
        self.assertEqual(r, ["a", "cfg", "4", "10.0", "10.0", "20.0"])

    def test_row_matches_the_header_ir_ab_writes(self):
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "ir_ab.sh")) as f:
            self.assertIn('echo "%s" > "$OUT/ir.csv"' % ",".join(ir_iters.HEADER), f.read())
        self.assertEqual(len(ir_iters.row("a", "cfg", [1], 1)), len(ir_iters.HEADER))

    def test_row_without_iterations_is_an_error(self):
        with self.assertRaises(ValueError):
            ir_iters.row("a", "cfg", [], 256)

    def test_dump_without_summary_is_skipped(self):
        with tempfile.TemporaryDirectory() as d:
            write_dumps(d, [1, 1, 1, 100, 200, 7])
            with open(os.path.join(d, "cg.out.4"), "w") as f:
                f.write("events: Ir\n")
            self.assertEqual(ir_iters.iteration_irs(d), [200])

    def test_table_ratio(self):
        rows = [{"build": "old", "config": "c", "median_ir_per_op": "100.0", "min_ir_per_op": "90.0"},
                {"build": "new", "config": "c", "median_ir_per_op": "102.5", "min_ir_per_op": "99.0"},
                {"build": "old", "config": "lonely", "median_ir_per_op": "1.0", "min_ir_per_op": "1.0"}]
        t = ir_iters.table(rows, "old", "new")
        self.assertIn("| c | 100.0 (90.0) | 102.5 (99.0) | 1.0250 | 1.1000 |", t)
        self.assertNotIn("lonely", t)


ANNOTATE = """--------------------------------------------------------------------------------
Ir                 file:function
--------------------------------------------------------------------------------
1,000 (50.00%)  ???:a::hot [/bin/x]
  512 (25.00%)  ./malloc/malloc.c:_int_malloc [/lib/libc.so.6]
"""
TREE = """  9,000 (90.00%)  < ???:criterion::Bencher::iter (3x) [/bin/x]
  1,000 (10.00%)  < ???:setup (1x) [/bin/x]
 10,000 (100.0%)  *  ???:vitamin_runtime::dispatch::Dispatcher<B,P>::run_until_idle [/bin/x]
"""


class Functions(unittest.TestCase):
    def test_exclusive_ir(self):
        self.assertEqual(ir_iters.exclusive_ir(ANNOTATE), {"???:a::hot": 1000, "./malloc/malloc.c:_int_malloc": 512})

    def test_calls_sums_every_caller(self):
        self.assertEqual(ir_iters.calls_of(TREE), 4)

    def test_calls_of_a_missing_function_is_an_error(self):
        with self.assertRaises(ValueError):
            ir_iters.calls_of(TREE, "nothing::here")

    def test_function_diff_per_op(self):
        after = ANNOTATE.replace("1,000 (50.00%)  ???:a::hot", "1,400 (50.00%)  ???:a::hot")
        lines = ir_iters.function_diff((ANNOTATE, TREE), (after, TREE), 2).splitlines()
        # 4 iterations x 2 ops: 1000 / 8 = 125, 1400 / 8 = 175; the largest difference first
        self.assertEqual(lines[1].split(), ["125.0", "175.0", "+50.0", "???:a::hot"])
        self.assertEqual(lines[2].split()[2], "+0.0")


if __name__ == "__main__":
    unittest.main()
