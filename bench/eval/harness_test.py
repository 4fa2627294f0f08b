"""End-to-end tests of harness.py with stub tenants and fake `vitamin` / `nvidia-cuda-mps-control`
(stubs/), no GPU (CI: cd bench/eval && python3 harness_test.py).

Checked: the time estimate and its refusal, the plan's rotation, the barrier (every tenant's window
starts after every peer was ready), each configuration's environment (MPS on or off, per-tenant
thread percentage, the daemon's policy, latency class and TPOT target), per-round raw files, and
that the MPS stand-in and the daemon stand-in are stopped on every path: tenant crash, tenant hang
(killed by the run timeout, SIGTERM ignored; the timeout cut to the call's budget), daemon start
failure, and SIGTERM to the harness. The daemon's periodic status snapshots, and its binding
timeline (digested, compressed) under the configurations that ask for it.
Every child wait is bounded (watchdogs), so a broken harness fails the test instead of hanging it.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STUBS = os.path.join(HERE, "stubs")
HARNESS = os.path.join(HERE, "harness.py")


def stub_cmd(*args):
    return ["python3", os.path.join(STUBS, "stub_tenant.py")] + list(args)


def write_group(d, **kw):
    g = {
        "name": "stubgroup", "kind": "train", "rounds": 3, "seconds": 0.3, "budget_s": 300, "grace_s": 5,
        "configs": ["timeslice", "mps", "mps_pct", "vitamin_static", "vitamin_throughput", "vitamin_tpot"],
        "tenants": {
            "a": {"cmd": stub_cmd("--base", "10", "--warmup", "0.4"), "startup_s": 1},
            "b": {"cmd": stub_cmd("--base", "4", "--role", "latency"), "startup_s": 1, "role": "latency",
                  "latency": True, "tpot_ms": 30},
        },
        "scenarios": [{"name": "a+b", "tenants": ["a", "b"], "mps_pct": {"a": 70, "b": 30}}],
    }
    g.update(kw)
    path = os.path.join(d, "group.json")
    with open(path, "w") as f:
        json.dump(g, f)
    return path


def env_for(d, **extra):
    e = dict(os.environ)
    e["PATH"] = STUBS + os.pathsep + e["PATH"]
    e["EVAL_STUB_LOG"] = os.path.join(d, "stub.log")
    e["EVAL_VITAMIN"] = os.path.join(STUBS, "vitamin")
    e.update(extra)
    return e


def harness(d, *args, timeout=240, **extra):
    return subprocess.run([sys.executable, HARNESS, os.path.join(d, "group.json"), "--out", os.path.join(d, "out")]
                          + list(args), env=env_for(d, **extra), capture_output=True, text=True, timeout=timeout)


def alive(pid, within=5.0):
    """Whether `pid` still runs after up to `within` s (a killed process takes a moment to go; a
    zombie counts as gone)."""
    deadline = time.monotonic() + within
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return False
        except (OSError, IndexError):
            return False
        if time.monotonic() > deadline:
            return True
        time.sleep(0.05)


def assert_stand_ins_stopped(d):
    """Every MPS and daemon stand-in started was stopped and is gone; kills leftovers so a failing
    test leaves nothing behind."""
    path = os.path.join(d, "stub.log")
    lines = open(path).read().split("\n") if os.path.exists(path) else []
    started, stopped = [], []
    for ln in lines:
        w = ln.split()
        if w[:2] == ["mps", "start"]:
            started.append(int(w[2]))
        elif w[:2] == ["mps", "stop"]:
            stopped.append(int(w[2]))
        elif w[:3] == ["vitamin", "daemon", "start"]:
            started.append(int(w[4]))
        elif w[:3] == ["vitamin", "daemon", "stop"]:
            stopped.append(int(w[4]))
    leftovers = [p for p in started if alive(p)]
    for p in leftovers:
        os.kill(p, signal.SIGKILL)
    assert not leftovers, f"stand-ins still running: {leftovers}\n{lines}"
    assert sorted(started) == sorted(stopped), f"started {started}, stopped {stopped}"
    return lines


def results(d):
    with open(os.path.join(d, "out", "results.json")) as f:
        return json.load(f)


def test_estimate_refuses_a_group_that_would_not_fit():
    with tempfile.TemporaryDirectory() as d:
        write_group(d, budget_s=60)
        r = harness(d)
        assert r.returncode == 2, r
        assert "would not fit one device call" in r.stderr and "--rounds" in r.stderr, r.stderr
        assert not os.path.exists(os.path.join(d, "out", "results.json"))
        # with fewer configurations and a larger budget it fits; the dry run lists the plan, rotated per round
        r = harness(d, "--configs", "timeslice,mps", "--budget", "100", "--dry-run")
        assert r.returncode == 0, r.stderr
        plan = [ln.split() for ln in r.stdout.splitlines() if ln.startswith("  r")]
        assert [p[1] for p in plan if p[0] == "r1"] == ["alone", "alone", "timeslice", "mps"], plan
        assert [p[1] for p in plan if p[0] == "r2"] == ["alone", "alone", "mps", "timeslice"], plan
        assert "estimate" in r.stdout and len(plan) == 12, r.stdout


def test_bad_group_is_a_clear_error():
    with tempfile.TemporaryDirectory() as d:
        write_group(d, configs=["timeslice", "mig"])
        r = harness(d)
        assert r.returncode == 2 and "unknown configuration 'mig'" in r.stderr, r.stderr
        write_group(d, scenarios=[{"name": "x", "tenants": ["a", "nope"]}])
        r = harness(d)
        assert r.returncode == 2 and "unknown tenant 'nope'" in r.stderr, r.stderr


def test_end_to_end_rounds_barrier_and_environments():
    with tempfile.TemporaryDirectory() as d:
        write_group(d)
        r = harness(d)
        assert r.returncode == 0, r.stdout + r.stderr
        doc = results(d)
        runs = doc["runs"]
        assert len(runs) == 3 * (2 + 6), len(runs)
        assert all(x["ok"] for x in runs), [x for x in runs if not x["ok"]]
        firsts = [next(x["config"] for x in runs if x["round"] == k and x["config"] != "alone") for k in (1, 2, 3)]
        assert firsts == ["timeslice", "mps", "mps_pct"], firsts
        for k in (1, 2, 3):
            assert os.path.exists(os.path.join(d, "out", "rounds", f"round-{k}.json"))
        for x in runs:
            res = {n: t["result"] for n, t in x["tenants"].items()}
            c = x["config"]
            for n, v in res.items():
                assert v["config_seen"] == c
                assert v["mps_seen"] == (c not in ("alone", "timeslice")), (c, n, v)
                want_pct = {"a": "70", "b": "30"}[n] if c == "mps_pct" else None
                assert v["pct_seen"] == want_pct, (c, n, v["pct_seen"])
                if c.startswith("vitamin_"):
                    assert v["policy_seen"] == c[len("vitamin_"):], (c, v["policy_seen"])
                    assert v["class_seen"] == ("latency" if n == "b" else "batch")
                    assert v["tpot_seen"] == ("30" if n == "b" else "")
                else:
                    assert v["policy_seen"] is None, (c, v)
                assert t_ok(x["tenants"][n])
            if len(res) == 2:
                # the barrier: each window started after both were ready (a warms up 0.4 s longer)
                assert res["a"]["ready_at_start"] == ["a", "b"] == res["b"]["ready_at_start"], res
                assert res["b"]["t_start"] >= res["a"]["t_ready"], res
        lines = assert_stand_ins_stopped(d)
        daemon_starts = [ln for ln in lines if ln.startswith("vitamin daemon start")]
        assert len(daemon_starts) == 9 and all(ln.endswith("mps=yes") for ln in daemon_starts), daemon_starts
        # MPS is switched lazily: at most two switches per round plus the final stop
        assert sum(ln.startswith("mps start") for ln in lines) <= 6, lines
        log = open(os.path.join(d, "out", "log.txt")).read()
        assert log.count("-> ok") == 24, log
        assert os.path.exists(os.path.join(d, "out", "runs", "r1-vitamin_static-a_b-status.json"))
        # the summary reads the harness's own output
        sys.path.insert(0, HERE)
        import summary
        text = summary.render(summary.load(os.path.join(d, "out")), None)
        # a's stub throughput is 10 x the configuration's factor, alone 10; b is a latency tenant,
        # left out of the training aggregate
        assert "| a+b | vitamin Throughput | a 0.800 | **0.800** | 0.800-0.800 | 3 |" in text, text
        assert "a+b: 1.143x vs MPS" in text, text


def test_alone_under_mps_is_a_second_normalization():
    with tempfile.TemporaryDirectory() as d:
        write_group(d, rounds=1, configs=["mps", "vitamin_throughput"])
        r = harness(d, "--alone-mps", "1")
        assert r.returncode == 0, r.stdout + r.stderr
        runs = results(d)["runs"]
        assert all(x["ok"] for x in runs), runs
        am = [x for x in runs if x["config"] == "alone_mps"]
        assert sorted(x["scenario"] for x in am) == ["alone_mps:a", "alone_mps:b"], runs
        assert all(t["result"]["mps_seen"] and t["result"]["policy_seen"] is None
                   for x in am for t in x["tenants"].values()), am
        sys.path.insert(0, HERE)
        import summary
        text = summary.render(summary.load(os.path.join(d, "out")), None)
        # a: 10 x 0.7 under MPS over 10 x 0.8 alone under MPS; 10 x 0.8 under Throughput
        assert "a+b MPS 0.875; a+b vitamin Throughput 1.000" in text, text
        assert "Alone under MPS (median and range): a 8.00" in text, text
        # without the option: no such runs, no such lines
        write_group(d, rounds=1, configs=["mps"])
        r = harness(d)
        assert r.returncode == 0 and not any(x["config"] == "alone_mps" for x in results(d)["runs"])


def test_pool_layouts_run_in_process_with_their_config_and_census():
    with tempfile.TemporaryDirectory() as d:
        write_group(d, rounds=1, configs=["vitamin_nomps", "vitamin_full_pool", "vitamin_flat", "vitamin_ondemand",
                                          "vitamin_throughput"])
        r = harness(d)
        assert r.returncode == 0, r.stdout + r.stderr
        runs = [x for x in results(d)["runs"] if x["config"] != "alone"]
        assert len(runs) == 5 and all(x["ok"] for x in runs), runs
        want = {"vitamin_nomps": "hierarchical", "vitamin_flat": "flat", "vitamin_ondemand": "on-demand",
                "vitamin_throughput": "hierarchical", "vitamin_full_pool": "hierarchical"}
        for x in runs:
            for n, t in x["tenants"].items():
                v = t["result"]
                assert not v["mps_seen"] or x["config"] == "vitamin_throughput", (x["config"], v)
                cfg = v["vitamin_config_seen"]
                if x["config"] in ("vitamin_flat", "vitamin_ondemand", "vitamin_full_pool"):
                    assert v["policy_seen"] == "inproc" and cfg and os.path.exists(cfg), (x["config"], v)
                    text = open(cfg).read()
                    assert f'pool = "{want[x["config"]]}"' in text
                    full = x["config"] == "vitamin_full_pool"
                    assert ('lane_streams = "start-up"' in text) == full and ('remainders = "start-up"' in text) == full, text
                else:
                    assert cfg is None, (x["config"], cfg)
                assert t["pool"]["layout"] == want[x["config"]], (x["config"], t)
                assert t["pool"]["realize_ms"] == 12.5 and t["pool"]["nodes"] == 59
        # native runs carry no census
        assert all("pool" not in t for x in results(d)["runs"] if x["config"] == "alone"
                   for t in x["tenants"].values())
        sys.path.insert(0, HERE)
        import summary
        assert "vitamin in-process, no MPS, on-demand pool" in summary.render(summary.load(os.path.join(d, "out")), None)


def test_slo_targets_come_from_the_rounds_alone_run():
    with tempfile.TemporaryDirectory() as d:
        tenants = {
            "a": {"cmd": stub_cmd("--base", "10"), "startup_s": 1},
            # b reports tpot_p50_ms 7 in every run; its target is twice its alone figure
            "b": {"cmd": stub_cmd("--base", "4", "--role", "latency", "--tpot-p50", "7"), "startup_s": 1,
                  "role": "latency", "latency": True, "tpot_ms": 30,
                  "tpot_from_alone": {"field": "tpot_p50_ms", "factor": 2},
                  "ttft_from_alone": {"field": "tpot_p50_ms", "factor": 3}},
            # c has no such field: it keeps its fixed target
            "c": {"cmd": stub_cmd("--base", "4", "--role", "latency"), "startup_s": 1, "role": "latency",
                  "latency": True, "tpot_ms": 25, "tpot_from_alone": {"field": "tpot_p50_ms", "factor": 2}},
        }
        write_group(d, rounds=1, configs=["mps", "vitamin_tpot"], tenants=tenants,
                    scenarios=[{"name": "a+b+c", "tenants": ["a", "b", "c"]}])
        r = harness(d)
        assert r.returncode == 0, r.stdout + r.stderr
        runs = results(d)["runs"]
        assert all(x["ok"] for x in runs), runs
        for x in runs:
            res = {n: t["result"] for n, t in x["tenants"].items()}
            if x["config"] == "alone":
                assert all(v["slo_seen"] is None and v["ttft_slo_seen"] is None for v in res.values()), res
                continue
            assert res["a"]["slo_seen"] is None and res["b"]["slo_seen"] == "14", res
            assert res["c"]["slo_seen"] == "25", res
            assert x["slo_targets"]["tpot"]["b"]["ms"] == 14.0, x["slo_targets"]
            assert x["slo_targets"]["tpot"]["c"]["source"].startswith("fixed"), x["slo_targets"]
            assert res["b"]["ttft_slo_seen"] == "21" and res["c"]["ttft_slo_seen"] is None, res
            if x["config"] == "vitamin_tpot":
                assert res["b"]["tpot_seen"] == "14" and res["c"]["tpot_seen"] == "25", res
        write_group(d, tenants={"b": dict(tenants["b"], tpot_from_alone={"factor": 2})},
                    scenarios=[{"name": "b", "tenants": ["b"]}])
        r = harness(d)
        assert r.returncode == 2 and "tpot_from_alone" in r.stderr, r.stderr


def t_ok(t):
    return t["rc"] == 0 and not t["timed_out"] and t["startup_s"] is not None and t["startup_s"] >= 0


def test_failures_are_recorded_and_everything_is_stopped():
    with tempfile.TemporaryDirectory() as d:
        pids = os.path.join(d, "pids")
        write_group(
            d, rounds=1, grace_s=1,
            configs=["mps", "vitamin_static", "vitamin_throughput", "timeslice"],
            tenants={
                "c": {"cmd": stub_cmd("--crash-under", "vitamin_throughput"), "startup_s": 0.5},
                "h": {"cmd": stub_cmd("--hang-under", "mps", "--pid-file", pids), "startup_s": 0.5},
            },
            scenarios=[{"name": "c+h", "tenants": ["c", "h"]}])
        r = harness(d, EVAL_STUB_DAEMON_FAIL="static")
        assert r.returncode == 0, r.stdout + r.stderr
        by = {x["config"]: x for x in results(d)["runs"] if x["config"] != "alone"}
        # h hangs before its ready file: killed at the deadline, or when c gave up at the barrier
        h = by["mps"]["tenants"]["h"]
        assert not by["mps"]["ok"] and (h["timed_out"] or "c exited" in h.get("killed", "")), by["mps"]
        assert by["mps"]["tenants"]["c"]["rc"] != 0, by["mps"]
        # c crashes at once: h, waiting at the barrier, is stopped then instead of at the deadline
        h = by["vitamin_throughput"]["tenants"]["h"]
        assert not h["timed_out"] and h["killed"] == "stopped because c exited 1", h
        assert "did not start" in by["vitamin_static"]["error"], by["vitamin_static"]
        assert by["vitamin_throughput"]["tenants"]["c"]["rc"] == 1, by["vitamin_throughput"]
        assert "crashing as asked" in by["vitamin_throughput"]["tenants"]["c"]["stderr_tail"]
        assert by["timeslice"]["ok"], by["timeslice"]
        for p in open(pids).read().split():
            assert not alive(int(p)), f"tenant {p} survived"
        assert_stand_ins_stopped(d)


def test_a_hang_never_outlives_the_budget():
    """The run timeout (here 200 s) is cut to the end of the call's budget (20 s): a hanging tenant
    is killed then, not later (the 120 s watchdog would fail the test)."""
    with tempfile.TemporaryDirectory() as d:
        pids = os.path.join(d, "pids")
        write_group(d, rounds=1, budget_s=20, grace_s=200, configs=["mps"], alone=False,
                    tenants={"h": {"cmd": stub_cmd("--hang-under", "mps", "--pid-file", pids), "startup_s": 0.2}},
                    scenarios=[{"name": "h", "tenants": ["h"]}])
        r = harness(d, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        (rec,) = results(d)["runs"]
        assert rec["tenants"]["h"]["timed_out"] and not rec["ok"], rec
        for q in open(pids).read().split():
            assert not alive(int(q)), f"tenant {q} survived"
        assert_stand_ins_stopped(d)


def test_sigterm_stops_the_daemon_and_mps():
    with tempfile.TemporaryDirectory() as d:
        pids = os.path.join(d, "pids")
        write_group(d, rounds=1, grace_s=120, configs=["vitamin_throughput"], alone=False,
                    tenants={"h": {"cmd": stub_cmd("--hang-under", "vitamin_throughput", "--pid-file", pids),
                                   "startup_s": 1}},
                    scenarios=[{"name": "h", "tenants": ["h"]}])
        p = subprocess.Popen([sys.executable, HARNESS, os.path.join(d, "group.json"), "--out",
                              os.path.join(d, "out")], env=env_for(d), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 60  # watchdog, not a timing assertion
            while not (os.path.exists(pids) and open(pids).read().strip()):
                assert time.monotonic() < deadline and p.poll() is None, "the hanging tenant never started"
                time.sleep(0.05)
            p.send_signal(signal.SIGTERM)
            out, _ = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
        assert p.returncode == 130, (p.returncode, out)
        assert "interrupted" in out, out
        for q in open(pids).read().split():
            assert not alive(int(q)), f"tenant {q} survived"
        lines = assert_stand_ins_stopped(d)
        assert any(ln.startswith("vitamin daemon stop") for ln in lines), lines
        assert results(d)["runs"] == [] or not results(d)["runs"][0]["ok"]


def test_every_committed_group_fits_one_call():
    """Each group under groups/ (each part, where it has parts) passes the estimate; every tenant
    script it names exists."""
    gdir = os.path.join(HERE, "groups")
    names = sorted(f for f in os.listdir(gdir) if f.endswith(".json") and f != "tenants.json")
    assert len(names) >= 5, names
    sys.path.insert(0, HERE)
    import harness
    for n in names:
        g = harness.load_group(os.path.join(gdir, n))
        for t in g["tenants"].values():
            scripts = [a for a in t["cmd"] if a.endswith(".py")]
            assert all(os.path.exists(os.path.join(HERE, a)) for a in scripts), (n, t["cmd"])
        for part in g.get("parts") or [None]:
            args = ["--part", part] if part else []
            r = subprocess.run([sys.executable, HARNESS, os.path.join(gdir, n), "--out", "/nonexistent", "--dry-run"]
                               + args, capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, (n, part, r.stderr)


def test_graph_decoder_group_loads_and_part_a_fits():
    """mixed-graph (the 8B-shaped decoder with its decode step in a CUDA graph, beside ResNet-50) through
    the harness's own loading and validation, and its estimate: the whole group and each part fit
    the 560 s of one call at one round."""
    sys.path.insert(0, HERE)
    import harness
    g = harness.load_group(os.path.join(HERE, "groups", "mixed-graph.json"))
    assert g["kind"] == "mixed" and g["rounds"] == 1 and g["seconds"] == 16 and g["budget_s"] == 560, g
    assert "CUDA graph" in g["description"], g["description"]
    t = g["tenants"]["decoder_graph_8b"]
    cmd = t["cmd"]
    assert cmd[1] == "tenants/decoder.py" and "--cuda-graph" in cmd and "--sync-per-token" in cmd, cmd
    assert cmd[cmd.index("--size") + 1] == "8b" and cmd[cmd.index("--rates") + 1] == "1,2,4", cmd
    assert t["latency"] and t["tpot_from_alone"]["field"] == "per_token_ms", t
    (s,) = g["scenarios"]
    assert s["name"] == "decoder_graph_8b+resnet50" and s["tenants"] == ["decoder_graph_8b", "resnet50"], s
    assert s["mps_pct"] == {"decoder_graph_8b": 50, "resnet50": 50}, s
    assert g["configs"] == ["timeslice", "mps", "mps_pct", "vitamin_static", "vitamin_throughput", "vitamin_tpot",
                            "vitamin_exclusive"]
    assert g["parts"] == {"a": ["mps", "vitamin_static", "vitamin_throughput", "vitamin_tpot"],
                          "b": ["timeslice", "mps_pct", "mps", "vitamin_throughput", "vitamin_exclusive"]}, g["parts"]
    for part, configs in list(g["parts"].items()) + [(None, g["configs"])]:
        est = harness.estimate(g, harness.plan(dict(g, configs=configs)))
        assert est <= 560, (part, est)
        r = subprocess.run([sys.executable, HARNESS, os.path.join(HERE, "groups", "mixed-graph.json"), "--out",
                            "/nonexistent", "--dry-run"] + (["--part", part] if part else []),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and f"estimate {est:.0f} s, budget 560 s" in r.stdout, (part, r.stdout, r.stderr)


def test_serving_graph_group_loads_and_parts_fit():
    """serving-graph (the trace through continuous batching of the 8B-shaped decoder whose decode steps
    replay CUDA graphs, beside ResNet-50): loads, its SLOs come from the alone run, and each part fits
    the 560 s of one call at its 3 rounds."""
    sys.path.insert(0, HERE)
    import harness
    path = os.path.join(HERE, "groups", "serving-graph.json")
    g = harness.load_group(path)
    assert g["kind"] == "serving" and g["rounds"] == 3 and g["budget_s"] == 560, g
    t = g["tenants"]["serve_graph_8b"]
    cmd = t["cmd"]
    assert cmd[1] == "tenants/serve.py" and "--cuda-graph" in cmd and cmd[cmd.index("--size") + 1] == "8b", cmd
    assert t["role"] == "serving" and t["tpot_from_alone"]["field"] == "tpot_p50_ms", t
    assert t["ttft_from_alone"]["field"] == "ttft_p50_ms", t
    (s,) = g["scenarios"]
    assert s["tenants"] == ["serve_graph_8b", "resnet50"], s
    assert g["parts"]["a"] == ["vitamin_throughput", "vitamin_tpot", "mps"], g["parts"]
    for part, configs in g["parts"].items():
        est = harness.estimate(g, harness.plan(dict(g, configs=configs)))
        assert est <= 560, (part, est)
        r = subprocess.run([sys.executable, HARNESS, path, "--out", "/nonexistent", "--dry-run", "--part", part],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and f"estimate {est:.0f} s, budget 560 s" in r.stdout, (part, r.stdout, r.stderr)


def test_run_group_packs_at_most_eight_files():
    with tempfile.TemporaryDirectory() as d:
        group = write_group(d, rounds=1, configs=["mps", "vitamin_throughput"])
        out = os.path.join(d, "device-out")
        r = subprocess.run(["bash", os.path.join(HERE, "run_group.sh"), group], env=env_for(d, OUT=out),
                           capture_output=True, text=True, timeout=240)
        assert r.returncode == 0, r.stdout + r.stderr
        files = sorted(os.listdir(out))
        assert len(files) <= 8, files
        for f in ("env.txt", "summary.md", "results.json", "log.txt", "runs.tgz"):
            assert f in files, files
        assert "| a+b | vitamin Throughput |" in open(os.path.join(out, "summary.md")).read()
        listing = subprocess.run(["tar", "tzf", os.path.join(out, "runs.tgz")], capture_output=True, text=True).stdout
        assert "rounds/round-1.json" in listing and "-a.err" in listing, listing
        assert_stand_ins_stopped(d)
        r = subprocess.run(["bash", os.path.join(HERE, "run_group.sh"), "no-such-group"], env=env_for(d, OUT=out),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "no group file" in r.stderr and "colo-gpt-resnet" in r.stderr, r.stderr


def test_ref_configurations_run_through_the_reference_build():
    with tempfile.TemporaryDirectory() as d:
        ref_dir = os.path.join(d, "ref")
        os.makedirs(ref_dir)
        ref = os.path.join(ref_dir, "vitamin")
        # the reference build: the stub CLI, its every call marked in the stub log
        with open(ref, "w") as f:
            f.write(f'#!/usr/bin/env bash\necho "ref $1 ${{2:-}}" >> "$EVAL_STUB_LOG"\nexec {STUBS}/vitamin "$@"\n')
        os.chmod(ref, 0o755)
        with open(os.path.join(ref_dir, "COMMIT"), "w") as f:
            f.write("0123abc\n")
        write_group(d, rounds=1, configs=["vitamin_throughput", "vitamin_throughput_ref", "vitamin_tpot_ref"])
        r = harness(d)
        assert r.returncode == 2 and "--vitamin-ref" in r.stderr, r.stderr
        r = harness(d, "--vitamin-ref", ref)
        assert r.returncode == 0, r.stdout + r.stderr
        runs = {x["config"]: x for x in results(d)["runs"] if x["config"] != "alone"}
        assert all(x["ok"] for x in runs.values()), runs
        assert runs["vitamin_throughput_ref"]["tenants"]["a"]["result"]["policy_seen"] == "throughput"
        assert runs["vitamin_tpot_ref"]["tenants"]["a"]["result"]["policy_seen"] == "tpot"
        marks = [l.split()[1:] for l in open(os.path.join(d, "stub.log")) if l.startswith("ref ")]
        # the reference runs' daemon start, status, stop and both tenants each; nothing of the other run
        assert marks.count(["run", "--daemon"]) == 4, marks
        assert ["daemon", "--socket"] in marks and ["daemon", "stop"] in marks, marks
        assert results(d)["meta"]["builds"]["vitamin_ref"] == "0123abc", results(d)["meta"]
        assert_stand_ins_stopped(d)


def test_record_and_profiled_configurations_get_their_profile_keys():
    with tempfile.TemporaryDirectory() as d:
        write_group(d, rounds=1, configs=["vitamin_record", "vitamin_throughput_profiled", "vitamin_throughput"])
        r = harness(d)
        assert r.returncode == 2 and "--profiles" in r.stderr, r.stderr
        prof = os.path.join(d, "merged profile.json")
        with open(prof, "w") as f:
            json.dump({"version": 1, "device": "stub", "entries": {"k|1|1|0": {}}}, f)
        r = harness(d, "--profiles", prof)
        assert r.returncode == 0, r.stdout + r.stderr
        runs = {x["config"]: x for x in results(d)["runs"] if x["config"] != "alone"}
        assert all(x["ok"] for x in runs.values()), runs
        rundir = os.path.join(d, "out", "runs")
        for name, t in runs["vitamin_record"]["tenants"].items():
            assert t["result"]["policy_seen"] == "chaos", t
            text = open(t["result"]["vitamin_config_seen"]).read()
            assert f'profile_out = "{os.path.abspath(rundir)}/' in text and f"-{name}.profile.%p.json" in text, text
            assert 'lane_continuation = "0"' in text, text
        for name, t in runs["vitamin_throughput_profiled"]["tenants"].items():
            assert t["result"]["policy_seen"] == "throughput", t
            assert f"profiles = {json.dumps(prof)}" in open(t["result"]["vitamin_config_seen"]).read()
        assert all(t["result"]["vitamin_config_seen"] is None for t in runs["vitamin_throughput"]["tenants"].values())
        logs = {c: open(next(os.path.join(rundir, f) for f in os.listdir(rundir)
                             if f.endswith(f"-{c}-a_b-daemon.log"))).read() for c in runs}
        assert f"profiles {prof}" in logs["vitamin_throughput_profiled"], logs
        assert "profiles" not in logs["vitamin_record"] and "profiles" not in logs["vitamin_throughput"], logs
        meta = results(d)["meta"]["profiles"]
        assert meta["path"] == prof and meta["configurations"] == 1 and len(meta["sha256"]) == 64, meta
        sys.path.insert(0, HERE)
        import summary
        text = summary.render(summary.load(os.path.join(d, "out")), None)
        assert "vitamin Throughput, sized by the recorded profile" in text, text
        assert_stand_ins_stopped(d)


def _status_times(path):
    return [ln.split() for ln in open(path).read().splitlines()]


def slow_start_group(d, every, warmup):
    """One TPOT-First run whose tenant "a" is ready `warmup` s late; start-up snapshots every `every` s."""
    write_group(d, rounds=1, seconds=0.3, status_every_s=0, startup_status_s=every, configs=["vitamin_tpot"],
                alone=False,
                tenants={"a": {"cmd": stub_cmd("--base", "10", "--warmup", str(warmup)), "startup_s": 1},
                         "b": {"cmd": stub_cmd("--base", "4", "--role", "latency"), "startup_s": 1,
                               "role": "latency", "latency": True, "tpot_ms": 30}})


def test_status_snapshots_during_a_slow_start_up():
    """Before every tenant is ready the daemon's status is taken every startup_status_s seconds
    (`status-start-<j>.json`, its times from the tenants' start), then the first snapshot as usual."""
    with tempfile.TemporaryDirectory() as d:
        runs_dir = os.path.join(d, "out", "runs")
        slow_start_group(d, every=0.2, warmup=1.0)
        r = harness(d)
        assert r.returncode == 0, r.stdout + r.stderr
        tag = "r1-vitamin_tpot-a_b"
        times = _status_times(os.path.join(runs_dir, tag + "-status-times.txt"))
        ks = [t[0] for t in times]
        assert ks[-1] == "0" and ks[:-1] == [f"start-{j}" for j in range(1, len(ks))] and len(ks) >= 3, times
        since = [float(t[1]) for t in times[:-1]]
        assert since == sorted(since) and since[0] >= 0.2, times
        for k in ks:
            name = f"{tag}-status.json" if k == "0" else f"{tag}-status-{k}.json"
            assert json.load(open(os.path.join(runs_dir, name))) == {"policy": "tpot"}, k
        # 0 turns them off
        shutil.rmtree(os.path.join(d, "out"))
        slow_start_group(d, every=0, warmup=0.6)
        r = harness(d)
        assert r.returncode == 0, r.stdout + r.stderr
        assert [t[0] for t in _status_times(os.path.join(runs_dir, tag + "-status-times.txt"))] == ["0"]


def test_periodic_status_snapshots_and_the_binding_timeline():
    with tempfile.TemporaryDirectory() as d:
        runs_dir = os.path.join(d, "out", "runs")
        write_group(d, rounds=1, seconds=1.2, status_every_s=0.2, configs=["mps", "vitamin_throughput", "vitamin_tpot"],
                    timeline_configs=["vitamin_throughput"])
        r = harness(d)
        assert r.returncode == 0, r.stdout + r.stderr
        by = {x["config"]: x for x in results(d)["runs"] if x["config"] != "alone"}
        assert all(x["ok"] for x in by.values()), by
        assert results(d)["meta"]["timeline_configs"] == ["vitamin_throughput"], results(d)["meta"]
        for c in ("vitamin_throughput", "vitamin_tpot"):
            tag = f"r1-{c}-a_b"
            # the first snapshot as before, then one every 0.2 s while the tenants run
            assert json.load(open(os.path.join(runs_dir, tag + "-status.json"))) == {"policy": c[len("vitamin_"):]}
            times = _status_times(os.path.join(runs_dir, tag + "-status-times.txt"))
            ks = [int(t[0]) for t in times]
            assert ks == list(range(len(ks))) and 3 <= len(ks) <= 41, times
            since = [float(t[1]) for t in times]
            assert since == sorted(since) and since[0] >= 0 and since[-1] < 5, times
            assert all(len(t[1].split(".")[1]) == 3 and len(t[2].split(".")[1]) == 6 for t in times), times
            assert abs(float(times[0][2]) - time.time()) < 120, times
            for k in ks[1:]:
                doc = json.load(open(os.path.join(runs_dir, f"{tag}-status-{k}.json")))
                assert doc == {"policy": c[len("vitamin_"):]}, (k, doc)
            assert not os.path.exists(os.path.join(runs_dir, f"{tag}-status-{len(ks)}.json"))
        # no daemon, no snapshot
        assert not [f for f in os.listdir(runs_dir) if f.startswith("r1-mps-") and "status" in f]
        # the timeline under vitamin_throughput only: digested, compressed, the raw file gone
        tag = "r1-vitamin_throughput-a_b"
        assert f"spans {600000}" in open(os.path.join(runs_dir, tag + "-daemon.log")).read()
        assert by["vitamin_throughput"]["timeline_digest"] == tag + "-timeline-digest.json", by["vitamin_throughput"]
        dig = json.load(open(os.path.join(runs_dir, tag + "-timeline-digest.json")))
        assert dig["spans"] == 3 and dig["timeline_gz"] == tag + "-timeline.json.gz", dig
        assert dig["clients"]["a (client 1)"]["total"] == {"node 0: SM 0-65": {"n": 2, "ms": 0.8, "median_ms": 0.4}}, dig
        assert dig["clients"]["b (client 2)"]["graphs"]["node 1: SM 66-131"]["n"] == 1, dig
        assert os.path.exists(os.path.join(runs_dir, tag + "-timeline.json.gz"))
        assert not os.path.exists(os.path.join(runs_dir, tag + "-timeline.json"))
        assert "timeline_digest" not in by["vitamin_tpot"] and "timeline_digest" not in by["mps"], by
        assert not [f for f in os.listdir(runs_dir) if "timeline" in f and not f.startswith(tag)], os.listdir(runs_dir)
        assert "timeline" not in open(os.path.join(runs_dir, "r1-vitamin_tpot-a_b-daemon.log")).read()
        assert_stand_ins_stopped(d)

        # EVAL_TIMELINE_CONFIGS replaces the group's list; the file written 0.5 s after the stop is
        # waited for; status_every_s 0: the first snapshot only
        shutil.rmtree(os.path.join(d, "out"))
        write_group(d, rounds=1, seconds=1.2, status_every_s=0, configs=["vitamin_throughput", "vitamin_tpot"],
                    timeline_configs=["vitamin_throughput"])
        r = harness(d, EVAL_TIMELINE_CONFIGS="vitamin_tpot", EVAL_STUB_TIMELINE_DELAY="0.5")
        assert r.returncode == 0, r.stdout + r.stderr
        by = {x["config"]: x for x in results(d)["runs"] if x["config"] != "alone"}
        assert "timeline_digest" not in by["vitamin_throughput"], by
        assert by["vitamin_tpot"]["timeline_digest"] == "r1-vitamin_tpot-a_b-timeline-digest.json", by
        assert os.path.exists(os.path.join(runs_dir, "r1-vitamin_tpot-a_b-timeline.json.gz"))
        times = _status_times(os.path.join(runs_dir, "r1-vitamin_tpot-a_b-status-times.txt"))
        assert [t[0] for t in times] == ["0"], times
        assert not os.path.exists(os.path.join(runs_dir, "r1-vitamin_tpot-a_b-status-1.json"))
        assert_stand_ins_stopped(d)

        # only daemon configurations have a timeline
        write_group(d, timeline_configs=["mps"])
        r = harness(d, "--dry-run")
        assert r.returncode == 2 and "timeline_configs: 'mps'" in r.stderr, r.stderr
        write_group(d)
        r = harness(d, "--dry-run", EVAL_TIMELINE_CONFIGS="vitamin_throughput,bogus")
        assert r.returncode == 2 and "'bogus'" in r.stderr, r.stderr
        write_group(d, status_every_s=-1)
        r = harness(d, "--dry-run")
        assert r.returncode == 2 and "status_every_s" in r.stderr, r.stderr


def test_timeline_estimate_and_finish_without_a_file_or_over_the_size_limit():
    sys.path.insert(0, HERE)
    import harness
    with tempfile.TemporaryDirectory() as d:
        g = harness.load_group(write_group(d, timeline_configs=["vitamin_tpot"]))
        assert g["status_every_s"] == harness.STATUS_EVERY_S
        plain, with_tl = (harness.run_estimate(g, c, ["a", "b"]) for c in ("vitamin_throughput", "vitamin_tpot"))
        assert with_tl == plain + harness.TIMELINE_S, (plain, with_tl)
        logged = []
        wait, limit = harness.TIMELINE_WAIT_S, harness.TIMELINE_GZ_MAX
        try:
            harness.TIMELINE_WAIT_S = 0.2
            assert harness.finish_timeline(os.path.join(d, "none.json"), os.path.join(d, "dig.json"), logged.append) is None
            assert not os.path.exists(os.path.join(d, "dig.json")) and "no binding timeline" in logged[-1], logged
            # over the limit: the compressed file goes, the digest says how large it was
            harness.TIMELINE_GZ_MAX = 10
            path = os.path.join(d, "t.json")
            with open(path, "w") as f:
                json.dump({"traceEvents": [{"name": "k", "ph": "X", "pid": 0, "ts": 5, "dur": 2000,
                                            "args": {"client": "x (client 1)"}}]}, f)
            assert harness.finish_timeline(path, os.path.join(d, "dig.json"), logged.append) == "dig.json"
            dig = json.load(open(os.path.join(d, "dig.json")))
            assert dig["timeline_gz_dropped"] > 10 and "timeline_gz" not in dig, dig
            assert dig["clients"]["x (client 1)"]["total"] == {"pid 0": {"n": 1, "ms": 2.0, "median_ms": 2.0}}, dig
            assert not os.path.exists(path) and not os.path.exists(path + ".gz")
            # a truncated file (a daemon killed while writing): the error in the digest, the file kept compressed
            harness.TIMELINE_GZ_MAX = limit
            with open(path, "w") as f:
                f.write('{"traceEvents": [{"name"')
            assert harness.finish_timeline(path, os.path.join(d, "dig.json"), logged.append) == "dig.json"
            dig = json.load(open(os.path.join(d, "dig.json")))
            assert dig["error"].startswith("JSONDecodeError") and dig["timeline_gz"] == "t.json.gz", dig
        finally:
            harness.TIMELINE_WAIT_S, harness.TIMELINE_GZ_MAX = wait, limit


def test_the_daemon_view_of_a_run_from_its_snapshots_and_censuses():
    """The standing node per periodic snapshot (start-up ones left out, missing files skipped), the
    units that refused each tenant's cluster launches (by pid, else the client's name and id), and
    each census's refused bindings (absent where the census has no daemon section)."""
    import harness
    with tempfile.TemporaryDirectory() as d:
        tag = "r1-vitamin_tpot-a_b"
        assert harness.standing_digest(d, tag) is None, "no snapshots"
        with open(os.path.join(d, tag + "-status-times.txt"), "w") as f:
            f.write("start-1 10.0 1.0\n0 1.0 2.0\n1 3.0 5.0\n2 6.0 8.0\n3 9.0 11.0\n")

        def status(k, standing, refused=None):
            clients = [{"id": 1, "pid": 11, "name": "python3", "class": "latency (tpot 16.0 ms)", "standing": standing},
                       {"id": 2, "pid": 12, "name": "python3", "class": "batch", "cluster_refused": refused or []},
                       {"id": 3, "pid": 99, "name": "other", "class": "batch", "cluster_refused": ["0-3"]}]
            name = f"{tag}-status.json" if k == 0 else f"{tag}-status-{k}.json"
            with open(os.path.join(d, name), "w") as f:
                json.dump({"clients": clients}, f)
        status("start-1", "#9 (8 units) reserved")
        status(0, "#9 (8 units) reserved")
        status(1, "#58 (120 units) draining", ["120-127"])
        status(3, None, ["120-127", "120-131"])  # snapshot 2 missing
        view = harness.standing_digest(d, tag, {11: "dec", 12: "resnet"})
        assert view == {"standing": ["8r", "120d", "-"],
                        "cluster_refused": {"resnet": ["120-127", "120-131"], "other 3": ["0-3"]}}, view
        census = os.path.join(d, "c.json")
        doc = {"bind": {"realize_ms": 5.0, "dispatcher": {"pool": {"nodes": 59}, "daemon": {"refused_bindings": 7}}}}
        with open(census, "w") as f:
            json.dump(doc, f)
        assert harness.pool_digest(census)["refused_bindings"] == 7
        del doc["bind"]["dispatcher"]["daemon"]
        with open(census, "w") as f:
            json.dump(doc, f)
        assert "refused_bindings" not in harness.pool_digest(census)


if __name__ == "__main__":
    tests = [v for k, v in sorted(globals().items()) if k.startswith("test_")]
    for t in tests:
        t()
        print(f"ok {t.__name__}")
    print(f"harness_test: {len(tests)} passed")
