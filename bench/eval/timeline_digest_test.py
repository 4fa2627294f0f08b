"""Tests of timeline_digest.py on a small handmade trace (CI: cd bench/eval && python3 timeline_digest_test.py).

Checked: node labels by pid, each client's spans per time bin and node (count, summed duration,
continued ones), its whole-run table with medians, the graph-or-continued table, bins relative to the
earliest span of the whole trace (spans come in completion order), the CLI on a gzip-compressed trace.
"""
import gzip
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import timeline_digest  # noqa: E402

A, B = "gpt (client 1)", "resnet (client 2)"


def span(name, client, pid, ts_us, dur_us, continued=False):
    return {"name": name, "cat": client, "ph": "X", "pid": pid, "tid": 0, "ts": ts_us, "dur": dur_us,
            "args": {"client": client, "op": 1, "continued": continued}}


def trace():
    return {"traceEvents": [
        {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "node 0: SM 0-15"}},
        {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "node 1: SM 16-31"}},
        # completion order: the earliest span (t0 = 100 us) is not the first one
        span("continued", A, 0, 500_100, 3000, continued=True),  # a continued kernel: not a graph
        span("gemm", A, 0, 100, 1000),
        span("k", B, 0, 900_000, 1500),
        span("graph", A, 1, 1_200_100, 2000),
        span("graph (continued)", A, 1, 1_300_100, 500, continued=True),
        span("graph", A, 1, 1_400_100, 6000),
        span("conv", B, 2, 2_500_100, 4000),  # a node without a label
    ], "displayTimeUnit": "ns"}


def test_bins_nodes_and_tables():
    d = timeline_digest.digest(trace())
    assert d["spans"] == 7 and d["t0_us"] == 100 and d["bin_s"] == 1.0, d
    assert d["length_s"] == 2.504, d["length_s"]
    assert d["nodes"] == {"0": "node 0: SM 0-15", "1": "node 1: SM 16-31"}, d["nodes"]
    assert sorted(d["clients"]) == [A, B], d["clients"].keys()
    a = d["clients"][A]
    assert [b["bin"] for b in a["bins"]] == [0, 1], a["bins"]
    assert a["bins"][0]["t_s"] == 0.0 and a["bins"][1]["t_s"] == 1.0, a["bins"]
    assert a["bins"][0]["nodes"] == {"node 0: SM 0-15": {"n": 2, "ms": 4.0, "continued": 1}}, a["bins"][0]
    assert a["bins"][1]["nodes"] == {"node 1: SM 16-31": {"n": 3, "ms": 8.5, "continued": 1}}, a["bins"][1]
    assert a["total"] == {"node 0: SM 0-15": {"n": 2, "ms": 4.0, "median_ms": 2.0},
                          "node 1: SM 16-31": {"n": 3, "ms": 8.5, "median_ms": 2.0}}, a["total"]
    assert a["graphs"] == {"node 1: SM 16-31": {"n": 3, "ms": 8.5, "median_ms": 2.0}}, a
    b = d["clients"][B]
    # 900000 us is 899900 us after t0: bin 0; the unlabelled node is named by its pid
    assert [(x["bin"], x["nodes"]) for x in b["bins"]] == [
        (0, {"node 0: SM 0-15": {"n": 1, "ms": 1.5, "continued": 0}}),
        (2, {"pid 2": {"n": 1, "ms": 4.0, "continued": 0}})], b["bins"]
    assert b["total"]["pid 2"] == {"n": 1, "ms": 4.0, "median_ms": 4.0}, b["total"]
    assert b["graphs"] == {}, b


def test_other_bin_width_and_empty_traces():
    d = timeline_digest.digest(trace(), bin_s=0.5)
    a = d["clients"][A]
    assert [(x["bin"], x["t_s"], sum(c["n"] for c in x["nodes"].values())) for x in a["bins"]] == [
        (0, 0.0, 1), (1, 0.5, 1), (2, 1.0, 3)], a["bins"]
    e = timeline_digest.digest({"traceEvents": []})
    assert e == {"bin_s": 1.0, "spans": 0, "nodes": {}, "clients": {}}, e
    # the daemon's trace when no client came: node labels only
    e = timeline_digest.digest({"traceEvents": trace()["traceEvents"][:2]})
    assert e["spans"] == 0 and e["nodes"]["1"] == "node 1: SM 16-31", e
    try:
        timeline_digest.digest(trace(), bin_s=0)
        raise AssertionError("bin_s 0 accepted")
    except ValueError:
        pass


def test_cli_reads_a_compressed_trace():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.json.gz")
        with gzip.open(path, "wt") as f:
            json.dump(trace(), f)
        r = subprocess.run([sys.executable, os.path.join(HERE, "timeline_digest.py"), path, "--bin-s", "2"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["bin_s"] == 2.0 and [x["bin"] for x in doc["clients"][B]["bins"]] == [0, 1], doc
        assert doc == timeline_digest.digest(trace(), 2.0), doc
        plain = os.path.join(d, "t.json")
        with open(plain, "w") as f:
            json.dump(trace(), f)
        assert timeline_digest.load(plain) == trace()
        r = subprocess.run([sys.executable, os.path.join(HERE, "timeline_digest.py"), os.path.join(d, "none.json")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "cannot read" in r.stderr, r.stderr


if __name__ == "__main__":
    tests = [v for k, v in sorted(globals().items()) if k.startswith("test_")]
    for t in tests:
        t()
        print(f"ok {t.__name__}")
    print(f"timeline_digest_test: {len(tests)} passed")
