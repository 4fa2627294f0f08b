"""Tests of chain_issue.py, lock_waits.py, stream_switch.py, sync_tail.py, trace_phases.py,
trace_tail.py and trace_threads.py on synthetic traces (standard library
only):
python3 bench/gpu/shim/chain_trace_test.py
"""

import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree

import chain_issue  # noqa: E402
import lock_waits  # noqa: E402
import stream_switch  # noqa: E402
import sync_tail  # noqa: E402
import trace_phases  # noqa: E402
import trace_tail  # noqa: E402
import trace_threads  # noqa: E402

FENCE = 1 << 63


class Trace:
    """A trace file under construction: marks one microsecond apart unless told otherwise."""

    def __init__(self):
        self.t = 0
        self.rows = ["t_ns,tag,thread,arg"]

    def mark(self, tag, thread, arg=0, after_ns=1000):
        self.t += after_ns
        self.rows.append(f"{self.t},{tag},{thread},{arg}")

    def write(self, d):
        path = os.path.join(d, "trace.csv")
        with open(path, "w") as f:
            f.write("\n".join(self.rows) + "\n")
        return path

    def loaded(self):
        """The trace as trace_phases.load reads it back, in time order."""
        with tempfile.TemporaryDirectory() as d:
            return sorted(trace_phases.load(self.write(d)), key=lambda r: r[0])


class ChainIssueTest(unittest.TestCase):
    def test_a_chain_window_splits_issuer_time_and_idle_gaps(self):
        tr = Trace()
        for i in range(1000):
            tr.mark("launch_enter", 1, after_ns=100)
            tr.mark("launch_exit", 1, i, after_ns=100)
            tr.mark("round_begin", 0, after_ns=100)
            tr.mark("issue_begin", 2, 7, after_ns=100)
            # Every 100th launch the issuing thread then waits 10 us (an idle gap).
            tr.mark("issue_end", 2, after_ns=3000)
            if i % 100 == 99:
                tr.t += 10_000
        tr.mark("sync_enter", 1)
        tr.mark("sync_exit", 1)
        with tempfile.TemporaryDirectory() as d:
            rows = chain_issue.summarize(tr.write(d))
        chains = [r for r in rows if "chain" in r]
        self.assertEqual(len(chains), 1)
        c = chains[0]
        self.assertEqual(c["launches"], 1000)
        issuer = c["threads"]["2"]
        self.assertEqual((issuer["role"], issuer["issues"]), ("issuer", 1000))
        self.assertAlmostEqual(issuer["issue_ms"], 3.0, places=3)
        self.assertEqual(issuer["idle_gaps"], 9)  # after launches 100, 200, ..., 900
        self.assertEqual(c["threads"]["0"]["rounds"], 1000)
        self.assertEqual(c["threads"]["0"]["role"], "dispatcher")

    def test_short_runs_of_launches_are_no_chain(self):
        tr = Trace()
        for _ in range(10):
            tr.mark("launch_enter", 1)
            tr.mark("launch_exit", 1)
            tr.mark("sync_enter", 1)
            tr.mark("sync_exit", 1)
        with tempfile.TemporaryDirectory() as d:
            rows = chain_issue.summarize(tr.write(d))
        self.assertEqual([r for r in rows if "chain" in r], [])


class StreamSwitchTest(unittest.TestCase):
    def test_launches_are_grouped_by_who_called_on_the_stream_before(self):
        tr = Trace()
        tr.mark("launch_enter", 1)
        tr.mark("round_begin", 0)
        for thread, arg, ns in [
            (1, 7, 4000),  # the stream's first call: not grouped
            (1, 7 | FENCE, 500),  # a fence by the application thread: not grouped
            (1, 7, 4000),  # app after its own fence
            (0, 7 | FENCE, 500),  # the dispatcher fences
            (1, 7, 6000),  # app after another thread's fence
            (0, 9, 5000),  # another stream's first call
            (0, 7, 7000),  # dispatcher after the app's op
        ]:
            tr.mark("issue_begin", thread, arg)
            tr.mark("issue_end", thread, after_ns=ns)
        with tempfile.TemporaryDirectory() as d:
            rows = stream_switch.summarize(tr.write(d))
        got = {(r["issuer"], r["previous_call_on_stream"]): (r["n"], r["p50_us"]) for r in rows}
        self.assertEqual(
            got,
            {
                ("app", "fence by same thread"): (1, 4.0),
                ("app", "fence by other thread"): (1, 6.0),
                ("dispatcher", "op by other thread"): (1, 7.0),
            },
        )


class SyncTailTest(unittest.TestCase):
    def test_the_detecting_poll_is_split_into_its_steps(self):
        tr = Trace()
        app, disp = 1, 2
        for _ in range(8):
            tr.mark("launch_enter", app)
        tr.mark("sync_enter", app)
        # Three polls that find nothing (1 us each, 0.5 us apart), then the detecting poll: its
        # fence seen complete 2 us in, completions published 3 us in, the call returns 0.5 later.
        for _ in range(3):
            tr.mark("poll_begin", app, after_ns=500)
            tr.mark("poll_end", app)
        tr.mark("poll_begin", app, after_ns=500)
        tr.mark("step", app, 21, after_ns=2000)
        tr.mark("poll_begin", disp, after_ns=100)
        tr.mark("poll_end", disp, after_ns=300)
        tr.mark("satisfied", app, after_ns=600)
        tr.mark("poll_end", app, after_ns=100)
        tr.mark("sync_exit", app, after_ns=400)
        rows = tr.loaded()
        count, res = sync_tail.tail(rows, 8, 30.0)
        self.assertEqual(count, 1)
        self.assertEqual(res["app_polls"], [4])
        self.assertEqual(res["other_polls"], [1])
        self.assertEqual(res["app_idle_between_us"], [0.5, 0.5, 0.5])
        self.assertEqual(res["published_by_app"], [1])
        self.assertAlmostEqual(res["satisfied_to_exit_us"][0], 0.5)
        self.assertAlmostEqual(res["detecting_poll_begin_to_exit_us"][0], 3.5)
        self.assertAlmostEqual(res["detecting_poll: step21"][0], 2.0)
        self.assertAlmostEqual(res["detecting_poll: satisfied"][0], 3.0)

    def test_a_fast_wait_is_reported_with_its_steps_and_no_detecting_poll(self):
        tr = Trace()
        app = 1
        tr.mark("launch_enter", app)
        tr.mark("sync_enter", app)
        # One poll that learns the fence words, then the words are seen reached (step 25), the
        # vCtx lock is held to leave the ops (step 26) and the call returns.
        tr.mark("poll_begin", app, after_ns=500)
        tr.mark("poll_end", app)
        tr.mark("step", app, 25, after_ns=5000)
        tr.mark("step", app, 26, after_ns=300)
        tr.mark("sync_exit", app, after_ns=200)
        rows = tr.loaded()
        count, res = sync_tail.tail(rows, 1, 30.0)
        self.assertEqual(count, 1)
        self.assertEqual(res["fast_wait"], [1])
        self.assertAlmostEqual(res["fast_wait: step25_to_exit_us"][0], 0.5)
        self.assertAlmostEqual(res["fast_wait: step26_to_exit_us"][0], 0.2)
        self.assertNotIn("detecting_poll_begin_to_exit_us", res)


class TraceThreadsTest(unittest.TestCase):
    def test_driver_calls_and_polls_are_timed_per_thread(self):
        tr = Trace()
        tr.mark("issue_begin", 0)
        tr.mark("issue_begin", 1, after_ns=100)
        tr.mark("issue_end", 0, after_ns=3900)  # thread 0: 4 us
        tr.mark("issue_end", 1, after_ns=1900)  # thread 1: 5.8 us
        tr.mark("poll_begin", 1)
        tr.mark("poll_end", 1, after_ns=500)
        tr.mark("poll_end", 0)  # no poll began on thread 0: ignored
        rows = tr.loaded()
        spans = trace_threads.durations(rows)
        self.assertEqual(spans["issue"][0], [4.0])
        self.assertEqual(spans["issue"][1], [5.8])
        self.assertEqual(spans["poll"][1], [0.5])
        self.assertNotIn(0, spans["poll"])


class LockWaitsTest(unittest.TestCase):
    def test_waits_are_split_by_the_synchronize_call_before_them(self):
        tr = Trace()
        # A launch right after a synchronize call, whose lock wait overlaps a dispatcher round
        # that began 0.5 us after the call returned.
        tr.mark("launch_enter", 1)  # the application thread is the one launching
        tr.mark("sync_exit", 1)
        tr.mark("round_begin", 0, after_ns=500)
        tr.mark("step", 1, 7, after_ns=500)
        tr.mark("intake_end", 0, after_ns=100)
        tr.mark("step", 1, 8, after_ns=2000)  # waited 2.1 us
        # A launch 10 us after that call: no wait.
        tr.mark("step", 1, 7, after_ns=10_000)
        tr.mark("step", 1, 8, after_ns=100)
        rows = tr.loaded()
        w = lock_waits.waits(rows)
        self.assertEqual(len(w), 2)
        wait, mark, split, since = w[0]
        self.assertAlmostEqual(wait, 2.1)
        self.assertEqual((mark, split), ("round_begin", "after sync"))
        self.assertAlmostEqual(since, 0.5)
        self.assertAlmostEqual(w[1][0], 0.1)
        self.assertEqual(w[1][2], "other")


class TraceTailTest(unittest.TestCase):
    def test_the_tail_s_extra_time_is_placed_where_it_accrues(self):
        tr = Trace()
        # 40 operators of 8 launches and a synchronize call; in every 20th, the first launch
        # waits 10 us between its entry (step 7) and the driver call (step 8), while a
        # dispatcher round runs.
        for i in range(40):
            slow = i % 20 == 19
            tr.mark("step", 1, 7, after_ns=5000)
            tr.mark("launch_enter", 1)
            if slow:
                tr.mark("round_begin", 0, after_ns=500)
            tr.mark("step", 1, 8, after_ns=9500 if slow else 1000)
            for _ in range(7):
                tr.mark("launch_enter", 1)
            tr.mark("sync_exit", 1, after_ns=400_000)
        rows = tr.loaded()
        middle, tail = trace_tail.split(rows, 8, 0.05)
        self.assertEqual(len(tail), 2)
        self.assertTrue(all(d > 410 for _, d in tail))
        self.assertEqual(len(middle), 8)
        rows = {r[0]: r for r in trace_tail.compare(middle, tail)}
        # The step before the wait comes no later in the tail; the driver call 9 us later
        # (10 us against 1 us), and everything after it by as much, with no further growth.
        self.assertAlmostEqual(rows["launch_enter"][5], 0.0)
        self.assertAlmostEqual(rows["step8"][5], 9.0)
        self.assertAlmostEqual(rows["step8"][6], 9.0)
        self.assertAlmostEqual(rows["sync_exit"][5], 9.0)
        self.assertAlmostEqual(rows["sync_exit"][6], 0.0)
        # The dispatcher round occurs only in the tail: no medians, shares 0 and 1.
        self.assertEqual(rows["d_round_begin"][1:4], [0.0, 1.0, None])

    def test_first_driver_calls_are_timed_with_the_marks_of_other_threads_during_them(self):
        tr = Trace()
        for i in range(3):
            tr.mark("launch_enter", 1)
            tr.mark("issue_begin", 1)
            if i == 2:
                tr.mark("poll_begin", 0, after_ns=5000)  # another thread, during a slow call
            tr.mark("issue_end", 1, after_ns=4000)
            tr.mark("sync_exit", 1)
        self.assertEqual(trace_tail.first_calls(tr.loaded(), 1), [(4.0, 0), (4.0, 0), (9.0, 1)])


if __name__ == "__main__":
    unittest.main()
