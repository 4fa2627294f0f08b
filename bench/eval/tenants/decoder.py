"""Latency-critical decoder tenant: batch-1 requests at Poisson arrivals (--rate per second, seeded
by EVAL_SEED), each a --prompt token prefill and --gen greedy decode steps with a KV cache; one
request at a time in arrival order (open loop: a late request queues). --rates splits the window in
equal phases, one per rate, reported apart (`by_rate`) and together. Reports p50/p99 latency
(arrival to last token, queueing included) and the per-token time (`per_token_ms`: the request
served before the window, prefill included, over --gen). Model: transformers'
LlamaForCausalLM (random init, bf16) when importable, else the hand-written llm.Llama; `impl` says
which.

  python3 tenants/decoder.py --rate 10 | --rates 2,4,6 [--prompt 128] [--gen 16] [--size small|8b]
                             [--sync-per-token] [--cuda-graph] [--digest [--reshape 4]]

--sync-per-token: each generated token is brought to the host as a server streaming it would (a
synchronize per token); the result then adds the per-token times of the window's requests
(`tpot_p50_ms`, `tpot_p99_ms`, also per rate: the time between consecutive tokens of one request,
without queueing), the first token's (`ttft_p50_ms`, `ttft_p99_ms`, queueing excluded) and each
served request's times between tokens (`token_ms`, in arrival order).
--size 8b: Llama 3 8B's shape (16 GB of bf16 weights), built directly on the device.

--cuda-graph: the hand-written llm.Llama (--impl transformers is refused; `impl` names it) with its decode step
captured once, after a warm-up on a side stream, in one torch.cuda.CUDAGraph that every generated
token after the first replays: per token, the token and its position are copied into the graph's
static input tensors (device to device, and a fill), the graph replays, and the next token is the
argmax of its static output logits. Prefill (the first token) stays eager. Eager decoding launches
every kernel from Python (about 32 ms per token for the 8b shape under transformers on the H200,
against about 5 ms of GPU time: host-bound); replayed, a token costs its GPU time, so GPU sharing
shows in the per-token times. The captured step is llm.Llama.decode_static: positions are device
tensors, the K/V are written into the preallocated cache at the position read from them, and
attention runs over the cache's whole length (--prompt + --gen, rounded up to 16) with a mask
built from the position. Same values as the eager hand-written decode, not the same bits: on the
CPU (float32 and bf16) the logits differ in the last bits at every step (about 1 bf16 ulp), since
the softmax and attention-times-V reductions run over another length (llm.py); so the digest of
--cuda-graph is not expected to equal `--impl hand`'s (tenants_smoke.py reports both). On the CPU
smoke path (EVAL_DEVICE=cpu) there are no CUDA graphs: the same static step runs eagerly.

--digest: one fixed prompt, --gen greedy tokens; SHA-256 of the tokens and the last logits' bytes.
--reshape K (with --digest, hand-written model only): the same decode with the LM head's reduction
split in K pieces (the reshaping treatment), natively; reports the logits' drift and changed tokens.
"""
import argparse
import time

from llm_sizes import ON_DEVICE, SIZES

try:
    import common  # first: puts bench/eval (tenant.py) on the path
    import llm
    import serving_core
    import torch
except ImportError as e:  # without torch only the arguments can be checked (tenants_test.py)
    common = llm = serving_core = torch = None
    NO_TORCH = e

tenant = common.tenant if common else None


GRAPH_LEN_ROUND = 16  # --cuda-graph: the cache (and the captured attention) spans --prompt + --gen rounded up to this


def stamp(stamps, tok):
    """With a list: the token to the host (a synchronize, as a server streaming it), then the time."""
    if stamps is not None:
        tok.tolist()
        stamps.append(time.perf_counter())


def token_times(stamps, start):
    """(time to the first token, [times between consecutive tokens]) in ms, from generate's stamps
    and the request's start of service."""
    if not stamps:
        return None, []
    return (stamps[0] - start) * 1000, [(b - a) * 1000 for a, b in zip(stamps, stamps[1:])]


def hand_model(size, dev):
    return llm.build(size, dev, on_device=size in ON_DEVICE)


def graph_len(prompt, gen):
    """--cuda-graph's cache length: every position a request writes (prompt + gen - 1), rounded up."""
    return -(-(prompt + gen) // GRAPH_LEN_ROUND) * GRAPH_LEN_ROUND


def build(size, dev, impl, cache_len=None):
    """(generate, impl description, model). cache_len: --cuda-graph, the hand-written model with a
    cache of that length and its decode step in a CUDA graph."""
    if cache_len:
        m = hand_model(size, dev)
        m.alloc_cache(1, cache_len)
        generate, how = graph_generate(m, dev)
        return generate, f"hand-written llm.Llama, {how}", m
    if impl in ("auto", "transformers"):
        try:
            import transformers

            c = llm.SIZES[size]
            cfg = transformers.LlamaConfig(vocab_size=c["vocab"], hidden_size=c["d"], intermediate_size=c["ffn"],
                                           num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
                                           num_key_value_heads=c.get("kv_heads", c["heads"]),
                                           max_position_embeddings=4096)
            torch.manual_seed(0)
            if size in ON_DEVICE:
                # initialized in place, in bf16: on the host in fp32 this shape takes minutes and 32 GB
                old = torch.get_default_dtype()
                torch.set_default_dtype(torch.bfloat16)
                try:
                    with torch.device(dev):
                        m = transformers.LlamaForCausalLM(cfg).eval()
                finally:
                    torch.set_default_dtype(old)
            else:
                m = transformers.LlamaForCausalLM(cfg).to(dev, torch.bfloat16).eval()

            @torch.no_grad()
            def generate(prompt, n, stamps=None):
                out = m(input_ids=prompt, use_cache=True)
                past, toks = out.past_key_values, []
                nxt = out.logits[:, -1].argmax(-1)
                toks.append(nxt)
                stamp(stamps, nxt)
                last = out.logits[:, -1]
                for _ in range(n - 1):
                    out = m(input_ids=nxt[:, None], past_key_values=past, use_cache=True)
                    past, last = out.past_key_values, out.logits[:, -1]
                    nxt = last.argmax(-1)
                    toks.append(nxt)
                    stamp(stamps, nxt)
                return torch.cat(toks), last

            return generate, f"transformers {transformers.__version__} LlamaForCausalLM", m
        except ImportError as e:
            if impl == "transformers":
                raise
            why = f"hand-written llm.Llama (transformers unavailable: {e})"
    else:
        why = "hand-written llm.Llama (asked)"
    m = hand_model(size, dev)
    m.alloc_cache(1, 4096)
    return hand_generate(m), why, m


def hand_generate(m):
    @torch.no_grad()
    def generate(prompt, n, stamps=None):
        last = m.prefill(prompt, 0)
        nxt = last.argmax(-1)
        toks = [nxt]
        stamp(stamps, nxt)
        p = prompt.shape[1]
        for i in range(n - 1):
            last = m.decode(nxt, [0], [p + i])
            nxt = last.argmax(-1)
            toks.append(nxt)
            stamp(stamps, nxt)
        return torch.cat(toks), last

    return generate


def graph_generate(m, dev, capture=None):
    """(generate, description): m's decode step (llm.Llama.decode_static, batch 1, slot 0) captured
    in one CUDA graph on a CUDA device (replayed per token), run eagerly on the CPU or with
    capture=False (the same step without a graph, llm_test.py's reference)."""
    capture = dev.type == "cuda" if capture is None else capture
    tok = torch.zeros(1, dtype=torch.long, device=dev)  # the graph's static inputs
    slot = torch.zeros(1, dtype=torch.long, device=dev)
    pos = torch.zeros(1, dtype=torch.long, device=dev)
    length = m.k_cache.shape[3]
    if capture:
        # Warm-up on a side stream before capture (torch's rule: lazy initialization, cuBLAS
        # workspaces and the allocator's first blocks happen outside the graph). It writes position 0
        # of slot 0, which every request's prefill writes again.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                m.decode_static(tok, slot, pos)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = m.decode_static(tok, slot, pos)  # the static output logits [1, vocab]
        torch.cuda.synchronize()
        # The graph reads its inputs at their captured addresses: they must outlive it. `slot` is
        # not used by the closures below, so without this its memory went back to the allocator and
        # a later tensor's bytes became the slot index (an out-of-bounds gather on the GPU).
        m.graph_inputs = (tok, slot, pos, graph)

        def step():
            graph.replay()
            return out

        how = f"decode step in one CUDA graph (cache length {length}), prefill eager"
    else:
        def step():
            return m.decode_static(tok, slot, pos)

        how = f"static decode step run eagerly (cache length {length}; no CUDA graph), prefill eager"

    @torch.no_grad()
    def generate(prompt, n, stamps=None):
        p = prompt.shape[1]
        if p + n - 1 > length:
            raise ValueError(f"prompt {p} + {n} tokens does not fit the graph's cache of {length}")
        last = m.prefill(prompt, 0)
        nxt = last.argmax(-1)
        toks = [nxt]
        stamp(stamps, nxt)
        for i in range(n - 1):
            tok.copy_(nxt)  # device to device, no sync
            pos.fill_(p + i)  # a fill kernel with the value as its argument, no copy from the host
            last = step()
            nxt = last.argmax(-1)
            toks.append(nxt)
            stamp(stamps, nxt)
        # the graph's output is overwritten by the next replay: the caller gets its own copy
        return torch.cat(toks), last.clone()

    return generate, how


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rate", type=float, default=10.0, help="requests per second (Poisson)")
    ap.add_argument("--rates", help="comma-separated rates: the window is split in equal phases, one per rate")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=16)
    ap.add_argument("--size", choices=sorted(SIZES), default="small")
    ap.add_argument("--impl", choices=["auto", "transformers", "hand"], default="auto")
    ap.add_argument("--drain-s", type=float, default=2.0, help="time after the window to finish started work")
    ap.add_argument("--digest", action="store_true")
    ap.add_argument("--reshape", type=int, default=0)
    ap.add_argument("--sync-per-token", action="store_true",
                    help="bring each token to the host; report per-token times (tpot_*) and first-token times")
    ap.add_argument("--cuda-graph", action="store_true",
                    help="hand-written model, decode step captured once in a CUDA graph and replayed per token")
    a = ap.parse_args(argv)
    if a.cuda_graph and a.impl == "transformers":
        ap.error("--cuda-graph runs the hand-written llm.Llama (transformers' dynamic KV cache is not capturable)")
    if a.prompt < 1 or a.gen < 1:
        ap.error("--prompt and --gen must be at least 1")
    return a


def main():
    a = parse_args()
    if torch is None:
        raise SystemExit(f"decoder.py needs torch: {NO_TORCH}")
    t = tenant.Tenant("decoder")
    dev = common.setup(a.digest)
    generate, impl, _ = build(a.size, dev, a.impl, graph_len(a.prompt, a.gen) if a.cuda_graph else None)
    g = torch.Generator(device="cpu").manual_seed(1234)
    prompt = torch.randint(0, SIZES[a.size]["vocab"], (1, a.prompt), generator=g).to(dev)
    if a.digest:
        t.ready()
        toks, last = generate(prompt, a.gen)
        common.sync()
        toks_l = toks.tolist()
        doc = {"role": "latency", "impl": impl, "cuda_graph": a.cuda_graph, "tokens": toks_l,
               "digest": tenant.sha256_hex([str(toks_l).encode(), last.float().cpu().numpy().tobytes()])}
        if a.reshape > 1:
            m = hand_model(a.size, dev)
            m.alloc_cache(1, 4096)
            ref_t, ref_l = hand_generate(m)(prompt, a.gen)
            m.head_splits = a.reshape
            rt, rl = hand_generate(m)(prompt, a.gen)
            common.sync()
            doc["reshape"] = {"splits": a.reshape, "max_abs_diff": float((rl.float() - ref_l.float()).abs().max()),
                              "tokens_changed": int(sum(x != y for x, y in zip(rt.tolist(), ref_t.tolist()))),
                              "bitwise_equal": bool(torch.equal(rl, ref_l) and torch.equal(rt, ref_t))}
        return t.write(doc)
    for _ in range(3):
        generate(prompt, a.gen)
    common.sync()
    # one request before the window (no queueing; a co-tenant may be warming up)
    t1 = time.perf_counter()
    generate(prompt, a.gen)
    common.sync()
    service_ms = (time.perf_counter() - t1) * 1000
    rates = [float(x) for x in a.rates.split(",")] if a.rates else [a.rate]
    phase = t.seconds / len(rates)
    arrivals, tags = [], []
    for k, rate in enumerate(rates):
        got = tenant.poisson_arrivals(rate, phase, t.seed * 1000 + k)
        arrivals += [k * phase + x for x in got]
        tags += [k] * len(got)
    t.ready()

    served = []  # per served request, in arrival order: (first-token ms, [per-token ms])

    def serve():
        stamps = [] if a.sync_per_token else None
        start = time.perf_counter()
        generate(prompt, a.gen, stamps)
        common.sync()
        served.append(token_times(stamps, start))

    lat, not_started = serving_core.open_loop(arrivals, serve, time.perf_counter, time.sleep,
                                              t.seconds + a.drain_s)
    ms = [x * 1000 for x in lat]  # in arrival order: ms[i] belongs to arrivals[i]

    def figures(mk, tk):
        f = {"completed": len(mk), "p50_ms": tenant.percentile(mk, 50), "p90_ms": tenant.percentile(mk, 90),
             "p99_ms": tenant.percentile(mk, 99)}
        if a.sync_per_token:
            tpot = [x for _, per in tk for x in per]
            ttft = [x for x, _ in tk if x is not None]
            f.update({"tpot_p50_ms": tenant.percentile(tpot, 50), "tpot_p99_ms": tenant.percentile(tpot, 99),
                      "ttft_p50_ms": tenant.percentile(ttft, 50), "ttft_p99_ms": tenant.percentile(ttft, 99),
                      "tokens_timed": len(tpot)})
        return f

    by_rate = {}
    for k, rate in enumerate(rates):
        mk = [x for x, tag in zip(ms, tags) if tag == k]
        tk = [x for x, tag in zip(served, tags) if tag == k]
        by_rate[f"{rate:g}"] = {"requests": tags.count(k), **figures(mk, tk)}
    return t.write({
        "role": "latency", "impl": impl, "cuda_graph": a.cuda_graph, "size": a.size, "rates": rates,
        "by_rate": by_rate, "prompt": a.prompt, "gen": a.gen, "requests": len(arrivals), "not_started": not_started,
        **figures(ms, served), "max_ms": max(ms) if ms else None,
        # Per served request, in arrival order: the times between its consecutive tokens (ms).
        "token_ms": [[round(x, 3) for x in per] for _, per in served] if a.sync_per_token else None,
        "service_before_window_ms": service_ms, "per_token_ms": service_ms / a.gen, "throughput": len(ms) / t.seconds, "unit": "requests/s",
    })


if __name__ == "__main__":
    main()
