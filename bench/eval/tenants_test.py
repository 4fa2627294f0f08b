"""Tests of the tenants' torch-free parts (CI: cd bench/eval && python3 tenants_test.py): the protocol
module (barrier, result file, bad environment), percentiles, Poisson arrivals, the Azure trace loader,
the open-loop server and the continuous batcher with its metrics, on a simulated clock; decoder.py's
arguments (--cuda-graph) and every decoder definition in groups/tenants.json (decoder.py imports
without torch for that).
"""
import contextlib
import io
import json
import os
import random
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "tenants"))
import decoder  # noqa: E402
import serving_core  # noqa: E402
import tenant  # noqa: E402

TRACE = os.path.join(HERE, "..", "..", "runtime", "data", "azure-llm-2023-conv.csv")


class Env:
    def __init__(self, **kw):
        self.kw = kw

    def __enter__(self):
        self.old = {k: os.environ.get(k) for k in self.kw}
        os.environ.update({k: str(v) for k, v in self.kw.items()})

    def __exit__(self, *exc):
        for k, v in self.old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_barrier_and_result_file():
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.json")
        open(os.path.join(d, "peer.ready"), "w").close()  # the peer is already warm
        with Env(EVAL_NAME="me", EVAL_OUT=out, EVAL_BARRIER=d, EVAL_PEERS=2, EVAL_SECONDS=5):
            t = tenant.Tenant()
            t.ready()
            assert os.path.exists(os.path.join(d, "me.ready"))
            assert t.measuring()
            t.write({"throughput": 3.0})
        doc = json.load(open(out))
        assert doc["tenant"] == "me" and doc["throughput"] == 3.0 and doc["t_start"] >= doc["t_end"] - 60
        assert not os.path.exists(out + ".tmp")


def test_barrier_timeout_and_bad_environment_are_errors():
    with tempfile.TemporaryDirectory() as d:
        with Env(EVAL_NAME="me", EVAL_BARRIER=d, EVAL_PEERS=2, EVAL_BARRIER_TIMEOUT=0.05, EVAL_SECONDS=1):
            t = tenant.Tenant()
            try:
                t.ready()
                raise AssertionError("the barrier returned without its peer")
            except tenant.TenantError as e:
                assert "1 of 2 tenants ready" in str(e), e
        for bad in ({"EVAL_SECONDS": "soon"}, {"EVAL_SECONDS": "-1"}, {"EVAL_PEERS": "0"}):
            with Env(**bad):
                try:
                    tenant.Tenant()
                    raise AssertionError(f"accepted {bad}")
                except tenant.TenantError:
                    pass


def test_percentile_matches_a_reference():
    rng = random.Random(3)
    for n in (1, 2, 7, 100):
        xs = [rng.random() for _ in range(n)]
        s = sorted(xs)
        assert tenant.percentile(xs, 0) == s[0] and tenant.percentile(xs, 100) == s[-1]
        for q in (50, 90, 99):
            pos = (n - 1) * q / 100
            lo = int(pos)
            ref = s[lo] + (s[min(lo + 1, n - 1)] - s[lo]) * (pos - lo)
            assert abs(tenant.percentile(xs, q) - ref) < 1e-12
    assert tenant.percentile([], 50) is None


def test_poisson_arrivals_are_seeded_and_in_window():
    a = tenant.poisson_arrivals(20, 50, seed=1)
    assert a == tenant.poisson_arrivals(20, 50, seed=1) and a != tenant.poisson_arrivals(20, 50, seed=2)
    assert all(0 < x < 50 for x in a) and a == sorted(a)
    assert 800 < len(a) < 1200, len(a)  # mean 1000, sd ~32
    for bad in (0, -1, float("inf")):
        try:
            tenant.poisson_arrivals(bad, 1, 0)
            raise AssertionError("accepted a bad rate")
        except tenant.TenantError:
            pass


def test_trace_loader_reads_the_azure_trace():
    if not os.path.exists(TRACE):
        print("SKIPPED: trace not found at", TRACE)
        return
    r = serving_core.load_trace(TRACE, count=3, max_prompt=400, max_gen=64)
    # first rows: 18:15:46.680590 374 44; 18:15:50.995169 396 109; 18:15:51.222467 879 55
    assert [(x.prompt, x.gen) for x in r] == [(374, 44), (396, 64), (400, 55)]
    assert r[0].arrival == 0 and abs(r[1].arrival - 4.314579) < 1e-5 and abs(r[2].arrival - 4.541877) < 1e-5
    fast = serving_core.load_trace(TRACE, seconds=10, speed=4)
    slow = serving_core.load_trace(TRACE, seconds=40)
    assert len(fast) == len(slow) and all(abs(f.arrival * 4 - s.arrival) < 1e-6 for f, s in zip(fast, slow))
    assert all(x.arrival < 10 for x in fast)


class SimClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += max(s, 1e-6)


def test_open_loop_queues_late_requests():
    c = SimClock()

    def serve():
        c.t += 1.0

    lat, left = serving_core.open_loop([0.0, 0.5, 3.0, 100.0], serve, c, c.sleep, stop_at=10)
    assert lat == [1.0, 1.5, 1.0] and left == 1, (lat, left)


def test_continuous_batcher_against_a_reference_model():
    rng = random.Random(5)
    for case in range(30):
        c = SimClock()
        slots = rng.randint(1, 4)
        reqs = [serving_core.Request(i, rng.random() * 5, rng.randint(1, 50), rng.randint(1, 6)) for i in range(12)]
        log = []

        def prefill(r, slot):
            # no request still holding the slot
            assert not [q for q in reqs if q.slot == slot and q.t_first is not None and q.t_done is None]
            c.t += 0.01 * r.prompt
            log.append(("p", r.rid))

        def decode(batch):
            assert len(batch) <= slots and len({s for _, s in batch}) == len(batch)
            c.t += 0.02 + 0.005 * len(batch)
            log.append(("d", len(batch)))

        b = serving_core.ContinuousBatcher(slots, prefill, decode, c, c.sleep)
        b.run(reqs, stop_at=1000)
        # every request done, with gen tokens, first token after arrival, FIFO admission
        assert all(r.t_done is not None and r.tokens == r.gen for r in reqs), case
        assert all(r.t_first >= r.arrival and r.t_done >= r.t_first for r in reqs)
        assert [x[1] for x in log if x[0] == "p"] == [r.rid for r in sorted(reqs, key=lambda r: r.arrival)]
        # decode steps: every token after the first comes from one step
        assert sum(x[1] for x in log if x[0] == "d") == sum(r.gen - 1 for r in reqs)
        m = serving_core.serving_metrics(reqs, tpot_slo_ms=30, ttft_slo_ms=200, window_s=5)
        tp = [(r.t_done - r.t_first) * 1000 / (r.gen - 1) for r in reqs if r.gen > 1]
        assert m["completed"] == 12 and m["unfinished"] == 0
        if tp:
            assert abs(m["tpot_violation_pct"] - 100 * sum(x > 30 for x in tp) / len(tp)) < 1e-9
            assert min(tp) >= 25 - 1e-9  # a decode step of one request costs 25 ms here
        assert [round(x, 3) for x in tp] == m["tpot_ms"] and len(m["ttft_ms"]) == 12
        assert m["output_tokens"] == sum(r.gen for r in reqs)


def test_batcher_stops_at_the_deadline_and_counts_unfinished():
    c = SimClock()

    def prefill(r, slot):
        c.t += 0.1

    def decode(batch):
        c.t += 0.1

    reqs = [serving_core.Request(i, 0.0, 8, 100) for i in range(3)]
    serving_core.ContinuousBatcher(2, prefill, decode, c, c.sleep).run(reqs, stop_at=2.0)
    m = serving_core.serving_metrics(reqs, 50, 500, 2.0)
    assert m["completed"] == 0 and m["unfinished"] == 3 and m["tpot_violation_pct"] is None
    assert 2.0 <= c.t < 2.3


def parse_error(argv):
    """decoder.parse_args(argv)'s usage error (exit 2) and its message."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            decoder.parse_args(argv)
    except SystemExit as e:
        assert e.code == 2, e.code
        return err.getvalue()
    raise AssertionError(f"decoder.py accepted {argv}")


def test_decoder_arguments_take_cuda_graph():
    a = decoder.parse_args(["--size", "8b", "--cuda-graph", "--rates", "1,2,4", "--prompt", "128", "--gen", "32",
                            "--sync-per-token"])
    assert a.cuda_graph and a.size == "8b" and a.sync_per_token and a.rates == "1,2,4", a
    assert a.prompt == 128 and a.gen == 32 and a.impl == "auto" and not a.digest, a
    a = decoder.parse_args(["--cuda-graph", "--digest", "--size", "small", "--impl", "hand"])
    assert a.cuda_graph and a.digest and a.size == "small", a
    assert not decoder.parse_args([]).cuda_graph  # eager unless asked
    assert "--cuda-graph runs the hand-written" in parse_error(["--cuda-graph", "--impl", "transformers"])
    assert "invalid choice" in parse_error(["--cuda-graph", "--size", "70b"])
    assert "at least 1" in parse_error(["--cuda-graph", "--gen", "0"])
    # the graph's cache: every position a request writes (prompt + gen - 1), rounded up to 16
    assert decoder.graph_len(128, 32) == 160 and decoder.graph_len(16, 4) == 32 and decoder.graph_len(1, 1) == 16
    for p, g in ((128, 32), (16, 4), (17, 16), (1, 1), (100, 29)):
        n = decoder.graph_len(p, g)
        assert n >= p + g - 1 and n % decoder.GRAPH_LEN_ROUND == 0 and n - (p + g) < decoder.GRAPH_LEN_ROUND


def test_every_decoder_definition_parses():
    with open(os.path.join(HERE, "groups", "tenants.json")) as f:
        defs = json.load(f)
    seen = {}
    for name, t in defs.items():
        if name.startswith("_") or "tenants/decoder.py" not in t["cmd"]:
            continue
        argv = t["cmd"][t["cmd"].index("tenants/decoder.py") + 1:]
        seen[name] = decoder.parse_args(argv)
    assert {"decoder", "decoder_8b", "decoder_graph_8b", "decoder_digest"} <= set(seen), sorted(seen)
    g = seen["decoder_graph_8b"]
    assert g.cuda_graph and g.size == "8b" and g.sync_per_token and g.rates == "1,2,4" and g.gen == 32, g
    assert not any(a.cuda_graph for n, a in seen.items() if n != "decoder_graph_8b")  # the others stay eager
    t = defs["decoder_graph_8b"]
    assert t["latency"] and t["role"] == "latency" and t["tpot_from_alone"] == {"field": "per_token_ms", "factor": 1.5}


if __name__ == "__main__":
    tests = [v for k, v in sorted(globals().items()) if k.startswith("test_")]
    for t in tests:
        t()
        print(f"ok {t.__name__}")
    print(f"tenants_test: {len(tests)} passed")
