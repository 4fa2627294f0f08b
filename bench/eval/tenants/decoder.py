"""Latency-critical decoder tenant: batch-1 requests at Poisson arrivals (--rate per second, seeded
by EVAL_SEED), each a --prompt token prefill and --gen greedy decode steps with a KV cache; one
request at a time in arrival order (open loop: a late request queues). --rates splits the window in
equal phases, one per rate, reported apart (`by_rate`) and together. Reports p50/p99 latency
(arrival to last token, queueing included) and the per-token time (`per_token_ms`: the request
served before the window, prefill included, over --gen). Model: transformers'
LlamaForCausalLM (random init, bf16) when importable, else the hand-written llm.Llama; `impl` says
which.

  python3 tenants/decoder.py --rate 10 | --rates 2,4,6 [--prompt 128] [--gen 16] [--size small|8b]
                             [--sync-per-token] [--digest [--reshape 4]]

--sync-per-token: each generated token is brought to the host as a server streaming it would (a
synchronize per token); the result then adds the per-token times of the window's requests
(`tpot_p50_ms`, `tpot_p99_ms`, also per rate: the time between consecutive tokens of one request,
without queueing) and the first token's (`ttft_p50_ms`, `ttft_p99_ms`, queueing excluded).
--size 8b: Llama 3 8B's shape (16 GB of bf16 weights), built directly on the device.

--digest: one fixed prompt, --gen greedy tokens; SHA-256 of the tokens and the last logits' bytes.
--reshape K (with --digest, hand-written model only): the same decode with the LM head's reduction
split in K pieces (the reshaping treatment), natively; reports the logits' drift and changed tokens.
"""
import argparse
import time

import common
import llm
import serving_core
import torch

tenant = common.tenant


# Sizes built directly on the device (in bf16) rather than on the host and copied.
ON_DEVICE = {"8b"}


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


def build(size, dev, impl):
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
    m = llm.build(size, dev)
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


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rate", type=float, default=10.0, help="requests per second (Poisson)")
    ap.add_argument("--rates", help="comma-separated rates: the window is split in equal phases, one per rate")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=16)
    ap.add_argument("--size", choices=sorted(llm.SIZES), default="small")
    ap.add_argument("--impl", choices=["auto", "transformers", "hand"], default="auto")
    ap.add_argument("--drain-s", type=float, default=2.0, help="time after the window to finish started work")
    ap.add_argument("--digest", action="store_true")
    ap.add_argument("--reshape", type=int, default=0)
    ap.add_argument("--sync-per-token", action="store_true",
                    help="bring each token to the host; report per-token times (tpot_*) and first-token times")
    a = ap.parse_args()
    t = tenant.Tenant("decoder")
    dev = common.setup(a.digest)
    generate, impl, _ = build(a.size, dev, a.impl)
    g = torch.Generator(device="cpu").manual_seed(1234)
    prompt = torch.randint(0, llm.SIZES[a.size]["vocab"], (1, a.prompt), generator=g).to(dev)
    if a.digest:
        t.ready()
        toks, last = generate(prompt, a.gen)
        common.sync()
        toks_l = toks.tolist()
        doc = {"role": "latency", "impl": impl, "tokens": toks_l,
               "digest": tenant.sha256_hex([str(toks_l).encode(), last.float().cpu().numpy().tobytes()])}
        if a.reshape > 1:
            m = llm.build(a.size, dev)
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
        "role": "latency", "impl": impl, "size": a.size, "rates": rates, "by_rate": by_rate, "prompt": a.prompt,
        "gen": a.gen, "requests": len(arrivals), "not_started": not_started, **figures(ms, served),
        "max_ms": max(ms) if ms else None,
        "service_before_window_ms": service_ms, "per_token_ms": service_ms / a.gen, "throughput": len(ms) / t.seconds, "unit": "requests/s",
    })


if __name__ == "__main__":
    main()
