"""Serving tenant for the Azure trace replay: the hand-written llm.Llama (random init, bf16) behind
continuous batching (serving_core.ContinuousBatcher): arrived requests enter free slots (prefill ->
first token), then one batched decode step over every active request, with a slot-indexed KV cache.
Requests come from the Azure conversation trace (arrivals time-compressed by --speed, lengths
clamped); reports TTFT and TPOT per request, their percentiles and the SLO violation rates. The SLOs
are --tpot-slo-ms / --ttft-slo-ms unless EVAL_TPOT_SLO_MS / EVAL_TTFT_SLO_MS are set (the harness
sets them from the round's alone run).

  python3 tenants/serve.py [--trace PATH] [--start-row 0] [--speed 1] [--slots 16] [--size small]
                           [--tpot-slo-ms 50] [--ttft-slo-ms 1000] [--max-prompt 512] [--max-gen 64]
                           [--cuda-graph] [--digest]

--cuda-graph: every decode step replays a CUDA graph of llm.Llama.decode_static captured for the
smallest batch size of 1, 2, 4, ... --slots that holds the step's requests (llm.StepGraphs: the
padding rows write a scratch slot), so a step costs its GPU time rather than the launches of
several hundred kernels from Python; prefill stays eager. The cache spans --max-prompt + --max-gen
rounded up to 16, over which the captured attention runs with a mask. Outside --digest the K/V
writes are index_put_ at the (slot, position) pairs; with --digest (deterministic mode, whose
index_put_ CUDA graphs do not take) they are the selection writes of decoder.py --cuda-graph.

--digest: the first --slots requests of the trace, all at time 0, served to completion; SHA-256 of
every generated token.
"""
import argparse
import os
import time

import common
import llm
import serving_core
import torch
from llm_sizes import ON_DEVICE

tenant = common.tenant
HERE = os.path.dirname(os.path.abspath(__file__))
TRACES = [os.path.join(HERE, "..", "data", "azure-llm-2023-conv.csv"),
          os.path.join(HERE, "..", "..", "..", "runtime", "data", "azure-llm-2023-conv.csv")]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trace", default=next((p for p in TRACES if os.path.exists(p)), TRACES[0]))
    ap.add_argument("--start-row", type=int, default=0)
    ap.add_argument("--speed", type=float, default=1.0, help="time compression of the trace's arrivals")
    ap.add_argument("--slots", type=int, default=16)
    ap.add_argument("--size", choices=sorted(llm.SIZES), default="small")
    ap.add_argument("--tpot-slo-ms", type=float, default=50.0)
    ap.add_argument("--ttft-slo-ms", type=float, default=1000.0)
    ap.add_argument("--max-prompt", type=int, default=512)
    ap.add_argument("--max-gen", type=int, default=64)
    ap.add_argument("--drain-s", type=float, default=2.0)
    ap.add_argument("--digest", action="store_true")
    ap.add_argument("--cuda-graph", action="store_true",
                    help="decode steps replay CUDA graphs captured per batch size (prefill eager)")
    a = ap.parse_args()
    # targets the harness derived from this round's alone run (bench/eval/README.md) win over the flags
    a.tpot_slo_ms = float(os.environ.get("EVAL_TPOT_SLO_MS") or a.tpot_slo_ms)
    a.ttft_slo_ms = float(os.environ.get("EVAL_TTFT_SLO_MS") or a.ttft_slo_ms)
    t = tenant.Tenant("serve")
    dev = common.setup(a.digest)
    m = llm.build(a.size, dev, on_device=a.size in ON_DEVICE)
    graphs = None
    if a.cuda_graph:
        m.alloc_cache(a.slots + 1, -(-(a.max_prompt + a.max_gen) // 16) * 16)  # + the scratch slot
        m.static_put = "select" if torch.are_deterministic_algorithms_enabled() else "index"
        graphs = llm.StepGraphs(m, a.slots)
        impl = f"hand-written llm.Llama, {graphs.describe()}"
    else:
        m.alloc_cache(a.slots, a.max_prompt + a.max_gen + 1)
        impl = "hand-written llm.Llama, eager"
    vocab = llm.SIZES[a.size]["vocab"]
    last = {}

    def prefill(r, slot):
        g = torch.Generator(device="cpu").manual_seed(r.rid)
        p = torch.randint(0, vocab, (1, r.prompt), generator=g).to(dev)
        last[slot] = m.prefill(p, slot).argmax(-1)
        return last[slot]

    generated = {}

    def decode(batch):
        toks = torch.cat([last[s] for _, s in batch])
        slots, positions = [s for _, s in batch], [r.prompt + r.tokens - 1 for r, _ in batch]
        out = (graphs.step(toks, slots, positions) if graphs else m.decode(toks, slots, positions)).argmax(-1)
        common.sync()  # the step's tokens are out: TPOT is measured per step
        for i, (r, s) in enumerate(batch):
            last[s] = out[i:i + 1]
            if a.digest:
                generated.setdefault(r.rid, []).append(out[i:i + 1])

    def sync_prefill(r, slot):
        x = prefill(r, slot)
        common.sync()
        if a.digest:
            generated.setdefault(r.rid, []).append(x)

    if a.digest:
        reqs = serving_core.load_trace(a.trace, a.start_row, count=a.slots, max_prompt=a.max_prompt,
                                       max_gen=a.max_gen)
        for r in reqs:
            r.arrival = 0.0
        t.ready()
        serving_core.ContinuousBatcher(a.slots, sync_prefill, decode, time.perf_counter, time.sleep,
                                       prefills_per_step=a.slots).run(reqs, stop_at=600)
        toks = [torch.cat(generated[r.rid]).tolist() for r in reqs]
        return t.write({"role": "serving", "impl": impl, "cuda_graph": a.cuda_graph,
                        "digest": tenant.sha256_hex([str(toks).encode()]),
                        "requests": len(reqs), "tokens": sum(len(x) for x in toks)})
    warm = serving_core.load_trace(a.trace, a.start_row, count=a.slots, max_prompt=a.max_prompt,
                                   max_gen=min(8, a.max_gen))
    for r in warm:
        r.arrival = 0.0
    serving_core.ContinuousBatcher(a.slots, sync_prefill, decode, time.perf_counter, time.sleep,
                                   prefills_per_step=a.slots).run(warm, stop_at=120)
    reqs = serving_core.load_trace(a.trace, a.start_row, seconds=t.seconds, speed=a.speed,
                                   max_prompt=a.max_prompt, max_gen=a.max_gen)
    t.ready()
    b = serving_core.ContinuousBatcher(a.slots, sync_prefill, decode, time.perf_counter, time.sleep)
    b.run(reqs, stop_at=t.seconds + a.drain_s)
    doc = serving_core.serving_metrics(reqs, a.tpot_slo_ms, a.ttft_slo_ms, t.seconds)
    doc.update({"role": "serving", "trace": os.path.basename(a.trace), "start_row": a.start_row,
                "speed": a.speed, "slots": a.slots, "size": a.size, "decode_steps": b.steps,
                "impl": impl, "cuda_graph": a.cuda_graph})
    return t.write(doc)


if __name__ == "__main__":
    main()
