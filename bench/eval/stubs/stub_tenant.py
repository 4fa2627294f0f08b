"""A stub tenant for harness_test.py: speaks tenant.py's protocol, sleeps instead of computing, and
reports what it saw of its environment (MPS, share, vitamin policy and class) so that the test can
check the orchestration. Its fake throughput is BASE x the factor of the configuration it ran under.

  python3 stub_tenant.py --base 10 [--warmup S] [--role train|latency] [--crash-under CONFIG]
                         [--hang-under CONFIG] [--pid-file F] [--tpot-p50 MS]
"""
import argparse
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tenant  # noqa: E402

FACTOR = {"alone": 1.0, "alone_mps": 0.8, "timeslice": 0.5, "mps": 0.7, "mps_pct": 0.6, "vitamin_static": 0.55,
          "vitamin_exclusive": 0.5, "vitamin_throughput": 0.8, "vitamin_tpot": 0.75, "vitamin_inproc": 0.65}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=0.0)
    ap.add_argument("--role", default="train")
    ap.add_argument("--crash-under")
    ap.add_argument("--hang-under")
    ap.add_argument("--pid-file")
    ap.add_argument("--tpot-p50", type=float, help="report this as tpot_p50_ms")
    a = ap.parse_args()
    config = os.environ.get("EVAL_CONFIG", "")
    if a.pid_file:
        with open(a.pid_file, "a") as f:
            f.write(f"{os.getpid()}\n")
    t = tenant.Tenant("stub")
    time.sleep(a.warmup)
    if config == a.hang_under:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the harness must escalate to SIGKILL
        while True:
            time.sleep(1)
    if config == a.crash_under:
        raise SystemExit("stub: crashing as asked")
    t.ready()
    seen = sorted(f[:-6] for f in os.listdir(t.barrier) if f.endswith(".ready")) if t.barrier else []
    while t.measuring():
        time.sleep(0.01)
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "")
    f = FACTOR.get(config, 1.0)
    doc = {
        "role": a.role,
        "config_seen": config,
        "mps_seen": bool(pipe) and os.path.exists(os.path.join(pipe, "control")),
        "pct_seen": os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
        "policy_seen": os.environ.get("EVAL_STUB_POLICY"),
        "class_seen": os.environ.get("EVAL_STUB_CLASS"),
        "tpot_seen": os.environ.get("EVAL_STUB_TPOT"),
        "vitamin_config_seen": os.environ.get("VITAMIN_CONFIG"),
        "slo_seen": os.environ.get("EVAL_TPOT_SLO_MS"),
        "ttft_slo_seen": os.environ.get("EVAL_TTFT_SLO_MS"),
        "ready_at_start": seen,
        "t_ready": t.t_ready,
        "throughput": a.base * f,
        "unit": "steps/s",
    }
    if a.tpot_p50 is not None:
        doc["tpot_p50_ms"] = a.tpot_p50
    if a.role == "latency":
        doc.update({"p50_ms": 10.0 / f, "p99_ms": 30.0 / f, "requests": 100})
    t.write(doc)


if __name__ == "__main__":
    main()
