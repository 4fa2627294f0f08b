"""Smoke test of every tenant's code on the CPU (EVAL_DEVICE=cpu, small sizes): each tenant runs its
measured mode through the protocol (barrier directory, EVAL_OUT) and, where it has one, its digest
mode twice, which must agree. Not a measurement. Needs torch (torchvision, transformers and peft
where present are used; the fallbacks are forced once too); without torch it says SKIPPED.

  python3 tenants_smoke.py [NAME ...]
  python3 tenants_smoke.py --gpu [NAME ...]    # on the GPU machine: the CUDA-graph decoder cases on the device

The serve_graph* cases (serve.py --cuda-graph) report their digest beside the eager serve.py's
(equal or not, as the decoder's: the captured step attends over the whole cache). serve_graph_8b is
the serving-graph group's tenant: --gpu only.

The decoder_graph* cases (decoder.py --cuda-graph) also run the eager hand-written decoder's digest
with the same arguments and report whether the two digests and token lists are equal (the static
step attends over the whole cache, so the bits are not expected to be: tenants/llm.py); on the CPU
the static step runs without a graph, with --gpu it is captured and replayed, and the line adds the
per-token times. decoder_graph_8b is the group's tenant itself (16 GB of weights): --gpu only.
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
    "decoder_graph": ["tenants/decoder.py", "--cuda-graph", "--size", "tiny", "--rates", "2,4", "--prompt", "16",
                      "--gen", "4", "--sync-per-token"],
    "decoder_graph_small": ["tenants/decoder.py", "--cuda-graph", "--size", "small", "--rates", "2,4", "--prompt",
                            "128", "--gen", "32", "--sync-per-token"],
    "decoder_graph_8b": ["tenants/decoder.py", "--cuda-graph", "--size", "8b", "--rates", "1,2,4", "--prompt", "128",
                         "--gen", "32", "--sync-per-token"],
    "serve": ["tenants/serve.py", "--size", "tiny", "--slots", "4", "--speed", "8", "--max-prompt", "32",
              "--max-gen", "4"],
    "serve_graph": ["tenants/serve.py", "--cuda-graph", "--size", "tiny", "--slots", "4", "--speed", "8",
                    "--max-prompt", "32", "--max-gen", "4"],
    "serve_graph_8b": ["tenants/serve.py", "--cuda-graph", "--size", "8b", "--slots", "16", "--speed", "2"],
    "footprint": ["tenants/footprint.py", "--n", "128"],
}
DIGEST = {"lm", "resnet", "lora", "lora_hand", "decoder", "loader", "offload", "comm", "bert_hand", "decoder_hand", "serve",
          "decoder_graph", "decoder_graph_small", "decoder_graph_8b", "serve_graph"}
GPU_CASES = ["decoder_graph", "decoder_graph_small", "decoder_graph_8b", "serve_graph", "serve_graph_8b"]  # --gpu's
GPU_ONLY = {"decoder_graph_small", "decoder_graph_8b", "serve_graph_8b"}  # left out of the CPU run's default list
GPU = False  # --gpu: the cases run on the CUDA device (no EVAL_DEVICE=cpu)


def run(name, args, d, seconds="1"):
    out = os.path.join(d, name + ".json")
    env = dict(os.environ, EVAL_OUT=out, EVAL_BARRIER=d, EVAL_PEERS="1", EVAL_NAME=name,
               EVAL_SECONDS=seconds, OMP_NUM_THREADS="2")
    if GPU:
        env.pop("EVAL_DEVICE", None)
    else:
        env["EVAL_DEVICE"] = "cpu"
    r = subprocess.run([sys.executable] + args, cwd=HERE, env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise AssertionError(f"{name}: exit {r.returncode}\n{r.stderr[-2000:]}")
    os.unlink(os.path.join(d, name + ".ready"))
    with open(out) as f:
        return json.load(f)


def graph_vs_eager(name, args, d, graph):
    """The eager hand-written decoder's digest with the same arguments, against the graph mode's."""
    eager = run(name + "_eager", [x for x in args if x != "--cuda-graph"] + ["--impl", "hand", "--digest"], d)
    same = {k: "equal" if eager[k] == graph[k] else "differ" for k in ("digest", "tokens")}
    return f" eager-hand digest {eager['digest'][:12]}: digests {same['digest']}, tokens {same['tokens']}"


def main():
    global GPU
    try:
        import torch  # noqa: F401
    except ImportError:
        print("SKIPPED: torch is not importable; the tenants' smoke test needs it")
        return 0
    argv = sys.argv[1:]
    if "--gpu" in argv:
        argv.remove("--gpu")
        GPU = True
        if not torch.cuda.is_available():
            print("FAILED: --gpu, but torch sees no CUDA device")
            return 1
    want = argv or (GPU_CASES if GPU else [n for n in CASES if n not in GPU_ONLY])
    failed = []
    for name in want:
        args = CASES[name]
        with tempfile.TemporaryDirectory() as d:
            try:
                doc = run(name, args, d)
                key = "tpot_violation_pct" if name.startswith("serve") else "p99_ms" if name.startswith("decoder") else "throughput"
                assert key in doc, (name, doc)
                if name.startswith(("decoder_stream", "decoder_graph")):
                    gaps = int(args[args.index("--gen") + 1]) - 1
                    assert doc["tokens_timed"] == doc["completed"] * gaps, doc  # gen - 1 gaps per request
                    assert all("tpot_p99_ms" in v for v in doc["by_rate"].values()), doc
                if name.startswith("decoder_graph"):
                    assert doc["cuda_graph"] and ("no CUDA graph" in doc["impl"]) != GPU, doc["impl"]
                if name.startswith("serve_graph"):
                    assert doc["cuda_graph"] and ("no CUDA device" in doc["impl"]) != GPU, doc["impl"]
                line = f"ok {name}: {key}={doc.get(key)} " + " ".join(
                    f"{k}={str(doc[k])[:60]}" for k in ("impl", "lora_impl", "completed", "host_phase_ms_median",
                                                        "per_token_ms", "tpot_p50_ms", "tpot_p99_ms")
                    if k in doc)
                if name in DIGEST:
                    a = run(name + "_d1", args + ["--digest"], d)
                    b = run(name + "_d2", args + ["--digest"], d)
                    assert a["digest"] == b["digest"], (name, a["digest"], b["digest"])
                    line += f" digest {a['digest'][:12]} (twice)"
                    if name == "decoder_hand":
                        c = run(name + "_r", args + ["--digest", "--reshape", "4"], d)
                        line += f" reshape {c['reshape']}"
                    if name.startswith("decoder_graph"):
                        line += graph_vs_eager(name, args, d, a)
                    if name.startswith("serve_graph"):
                        e = run(name + "_eager", [x for x in args if x != "--cuda-graph"] + ["--digest"], d)
                        line += f" eager digest {e['digest'][:12]}: {'equal' if e['digest'] == a['digest'] else 'differ'}"
                print(line, flush=True)
            except (AssertionError, subprocess.TimeoutExpired) as e:
                failed.append(name)
                print(f"FAILED {name}: {e}", flush=True)
    print(f"tenants_smoke: {len(want) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
