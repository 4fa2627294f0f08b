"""Smoke test of every tenant's code on the CPU (EVAL_DEVICE=cpu, small sizes): each tenant runs its
measured mode through the protocol (barrier directory, EVAL_OUT) and, where it has one, its digest
mode twice, which must agree. Not a measurement. Needs torch (torchvision, transformers and peft
where present are used; the fallbacks are forced once too); without torch it says SKIPPED.

  python3 tenants_smoke.py [NAME ...]
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

CASES = {
    "lm": ["tenants/lm.py", "--size", "tiny", "--warmup", "1", "--steps", "2"],
    "resnet": ["tenants/resnet.py", "--batch", "2", "--image", "32", "--warmup", "1", "--steps", "2"],
    "lora": ["tenants/lora.py", "--size", "tiny", "--warmup", "1", "--steps", "2"],
    "lora_hand": ["tenants/lora.py", "--size", "tiny", "--impl", "hand", "--warmup", "1", "--steps", "2"],
    "loader": ["tenants/idle.py", "--mode", "loader", "--size", "tiny", "--load-ms", "5", "--warmup", "1",
               "--steps", "2"],
    "offload": ["tenants/idle.py", "--mode", "offload", "--size", "tiny", "--warmup", "1", "--steps", "2"],
    "comm": ["tenants/comm.py", "--size", "tiny", "--comm-ms", "5", "--warmup", "1", "--steps", "2"],
    "bert": ["tenants/bert.py", "--layers", "2", "--batch", "2", "--seq", "16", "--warmup", "1", "--steps", "2"],
    "bert_hand": ["tenants/bert.py", "--impl", "hand", "--layers", "2", "--batch", "2", "--seq", "16", "--warmup", "1",
                  "--steps", "2"],
    "decoder": ["tenants/decoder.py", "--size", "tiny", "--rates", "2,4", "--prompt", "16", "--gen", "4"],
    "decoder_stream": ["tenants/decoder.py", "--size", "tiny", "--rates", "2,4", "--prompt", "16", "--gen", "4",
                       "--sync-per-token"],
    "decoder_stream_hand": ["tenants/decoder.py", "--impl", "hand", "--size", "tiny", "--rate", "3", "--prompt", "16",
                            "--gen", "4", "--sync-per-token"],
    "decoder_hand": ["tenants/decoder.py", "--impl", "hand", "--size", "tiny", "--rate", "3", "--prompt", "16",
                     "--gen", "4"],
    "serve": ["tenants/serve.py", "--size", "tiny", "--slots", "4", "--speed", "8", "--max-prompt", "32",
              "--max-gen", "4"],
    "footprint": ["tenants/footprint.py", "--n", "128"],
}
DIGEST = {"lm", "resnet", "lora", "lora_hand", "decoder", "loader", "offload", "comm", "bert_hand", "decoder_hand", "serve"}


def run(name, args, d, seconds="1"):
    out = os.path.join(d, name + ".json")
    env = dict(os.environ, EVAL_DEVICE="cpu", EVAL_OUT=out, EVAL_BARRIER=d, EVAL_PEERS="1", EVAL_NAME=name,
               EVAL_SECONDS=seconds, OMP_NUM_THREADS="2")
    r = subprocess.run([sys.executable] + args, cwd=HERE, env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise AssertionError(f"{name}: exit {r.returncode}\n{r.stderr[-2000:]}")
    os.unlink(os.path.join(d, name + ".ready"))
    with open(out) as f:
        return json.load(f)


def main():
    try:
        import torch  # noqa: F401
    except ImportError:
        print("SKIPPED: torch is not importable; the tenants' smoke test needs it")
        return 0
    want = sys.argv[1:] or list(CASES)
    failed = []
    for name in want:
        args = CASES[name]
        with tempfile.TemporaryDirectory() as d:
            try:
                doc = run(name, args, d)
                key = "tpot_violation_pct" if name == "serve" else "p99_ms" if name.startswith("decoder") else "throughput"
                assert key in doc, (name, doc)
                if name.startswith("decoder_stream"):
                    assert doc["tokens_timed"] == doc["completed"] * 3, doc  # --gen 4: 3 gaps per request
                    assert all("tpot_p99_ms" in v for v in doc["by_rate"].values()), doc
                line = f"ok {name}: {key}={doc.get(key)} " + " ".join(
                    f"{k}={str(doc[k])[:60]}" for k in ("impl", "lora_impl", "completed", "host_phase_ms_median")
                    if k in doc)
                if name in DIGEST:
                    a = run(name + "_d1", args + ["--digest"], d)
                    b = run(name + "_d2", args + ["--digest"], d)
                    assert a["digest"] == b["digest"], (name, a["digest"], b["digest"])
                    line += f" digest {a['digest'][:12]} (twice)"
                    if name == "decoder_hand":
                        c = run(name + "_r", args + ["--digest", "--reshape", "4"], d)
                        line += f" reshape {c['reshape']}"
                print(line, flush=True)
            except (AssertionError, subprocess.TimeoutExpired) as e:
                failed.append(name)
                print(f"FAILED {name}: {e}", flush=True)
    print(f"tenants_smoke: {len(want) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
