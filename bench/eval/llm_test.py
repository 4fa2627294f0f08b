"""Tests of the hand-written Llama's capturable decode step (tenants/llm.py: decode_static, the step
decoder.py --cuda-graph replays) against its eager decode, on the CPU with torch (cd bench/eval &&
python3 llm_test.py); without torch it says SKIPPED. Where CUDA is visible it also captures the step
in a CUDA graph and checks the replays against the same step run eagerly.

decode_static attends over the cache's whole length with a mask, decode over position+1 keys: the
values are the same, the reductions' lengths are not, and on the CPU the logits differ in the last
bits (about 1e-7 relative in float32, an ulp or two of bf16), so the comparison is a tolerance plus
equal greedy tokens; the count of bitwise-equal steps is printed, not asserted.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "tenants"))

try:
    import torch
except ImportError:
    torch = None

CFG = dict(vocab=512, d=128, layers=2, heads=4, ffn=256)


def pair(cfg, dtype, cache_len, seed=0):
    """Two copies of one random model: `a` with decode's 4096-long cache, `b` with a cache_len one."""
    import llm
    torch.manual_seed(seed)
    a = llm.Llama(**cfg).to(dtype).eval()
    b = llm.Llama(**cfg).to(dtype).eval()
    b.load_state_dict(a.state_dict())
    a.alloc_cache(2, 4096)
    b.alloc_cache(2, cache_len)
    return a, b


def tol(dtype, ref):
    # float32: a few ulps; bf16 (8 significant bits): a few ulps of the largest logit
    return (1e-5 if dtype == torch.float32 else 2.0 ** -5) * max(1.0, float(ref.float().abs().max()))


def assert_same_greedy(la, lb, t, ctx):
    """The same greedy tokens where the choice is clear: a row's argmax may differ only where the eager
    logits' two candidates are within t of each other (a near tie that last-bit differences flip)."""
    ia, ib = la.argmax(-1), lb.argmax(-1)
    for r in range(la.shape[0]):
        if ia[r] != ib[r]:
            gap = float(la[r, ia[r]].float() - la[r, ib[r]].float())
            assert gap <= t, (ctx, r, gap, t)


def test_decode_static_matches_decode_over_steps():
    for kv_heads in (None, 2):  # multi-head and grouped-query attention
        for dtype in (torch.float32, torch.bfloat16):
            for cache_len in (24, 32, 64):
                cfg = dict(CFG, kv_heads=kv_heads)
                a, b = pair(cfg, dtype, cache_len)
                prompt = torch.randint(0, CFG["vocab"], (1, 7), generator=torch.Generator().manual_seed(1))
                la, lb = a.prefill(prompt, 0), b.prefill(prompt, 0)
                assert torch.equal(la, lb)  # the same eager prefill
                tok = la.argmax(-1)
                slot, pos = torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.long)
                equal = 0
                for i in range(cache_len - 7):  # up to the cache's last position
                    la = a.decode(tok, [0], [7 + i])
                    pos.fill_(7 + i)
                    lb = b.decode_static(tok.clone(), slot, pos)
                    assert lb.shape == la.shape and lb.dtype == la.dtype
                    diff = float((la.float() - lb.float()).abs().max())
                    assert diff <= tol(dtype, la), (kv_heads, dtype, cache_len, i, diff)
                    assert_same_greedy(la, lb, tol(dtype, la), (kv_heads, dtype, cache_len, i))
                    equal += torch.equal(la, lb)
                    tok = la.argmax(-1)
                # the first layer's K/V depend on the tokens and positions alone: the static writes put
                # the same bits at the same places, and nothing elsewhere (slot 1 untouched)
                for ca, cb in ((a.k_cache, b.k_cache), (a.v_cache, b.v_cache)):
                    assert torch.equal(ca[0, :, :, :cache_len], cb[0]), (kv_heads, dtype, cache_len)
                    assert not cb[:, 1].any()
                print(f"  kv_heads={kv_heads} {dtype} cache {cache_len}: {equal} of {cache_len - 7} steps"
                      " bitwise equal")


def test_decode_static_batched_slots():
    """Two requests in slots 1 and 0 at different positions, as decode takes them."""
    for dtype in (torch.float32, torch.bfloat16):
        a, b = pair(dict(CFG, kv_heads=2), dtype, 48)
        g = torch.Generator().manual_seed(2)
        p1 = torch.randint(0, CFG["vocab"], (1, 5), generator=g)
        p0 = torch.randint(0, CFG["vocab"], (1, 11), generator=g)
        toks = []
        for m in (a, b):
            toks.append(torch.cat([m.prefill(p1, 1).argmax(-1), m.prefill(p0, 0).argmax(-1)]))
        assert torch.equal(toks[0], toks[1])
        tok = toks[0]
        slots = torch.tensor([1, 0])
        for i in range(10):
            la = a.decode(tok, [1, 0], [5 + i, 11 + i])
            lb = b.decode_static(tok, slots, torch.tensor([5 + i, 11 + i]))
            diff = float((la.float() - lb.float()).abs().max())
            assert diff <= tol(dtype, la), (dtype, i, diff)
            assert_same_greedy(la, lb, tol(dtype, la), (dtype, i))
            tok = la.argmax(-1)
        for ca, cb in ((a.k_cache, b.k_cache), (a.v_cache, b.v_cache)):
            assert torch.equal(ca[0, :, :, :48], cb[0]), dtype


def test_buckets():
    import llm
    assert llm.buckets(1) == [1]
    assert llm.buckets(5) == [1, 2, 4, 5]
    assert llm.buckets(16) == [1, 2, 4, 8, 16]


def test_step_graphs_pad_to_a_bucket_and_follow_decode():
    """serve.py --cuda-graph's batched steps (llm.StepGraphs, eager on the CPU) against the eager
    batched decode: requests in 5 slots, steps of 3 (padded to 4), 1, 5 and 2 requests. The logits
    agree within the tolerance, and so do the K/V of the first layer in every request's slot (not the
    same bits: on the CPU a projection of 4 rows, the padded step, rounds a row otherwise than one of
    3); the padding writes only the scratch slot's position 0; the selection and index_put_ writes
    give the same bits everywhere but the scratch slot."""
    import llm
    slots, length = 5, 48
    for dtype in (torch.float32, torch.bfloat16):
        torch.manual_seed(5)
        cfg = dict(CFG, kv_heads=2)
        ref = llm.Llama(**cfg).to(dtype).eval()
        ref.alloc_cache(slots, 4096)
        runs = {}
        for put in ("select", "index"):
            m = llm.Llama(**cfg).to(dtype).eval()
            m.load_state_dict(ref.state_dict())
            m.alloc_cache(slots + 1, length)
            m.static_put = put
            runs[put] = (m, llm.StepGraphs(m, slots), [])
        g = torch.Generator().manual_seed(6)
        prompts = [torch.randint(0, CFG["vocab"], (1, 3 + 2 * s), generator=g) for s in range(slots)]
        pos = [p.shape[1] for p in prompts]
        last = [ref.prefill(p, s).argmax(-1) for s, p in enumerate(prompts)]
        for m, _, _ in runs.values():
            for s, p in enumerate(prompts):
                m.prefill(p, s)
        for active in ([4, 0, 2], [3], [0, 1, 2, 3, 4], [1, 3]) * 3:
            toks = torch.cat([last[s] for s in active])
            at = [pos[s] for s in active]
            la = ref.decode(toks, active, at)
            for put, (m, steps, outs) in runs.items():
                lb = steps.step(toks, active, at)
                assert lb.shape == la.shape, (put, lb.shape)
                diff = float((la.float() - lb.float()).abs().max())
                assert diff <= tol(dtype, la), (dtype, put, active, diff)
                assert_same_greedy(la, lb, tol(dtype, la), (dtype, put, active))
                outs.append(lb.clone())
            for j, s in enumerate(active):
                last[s] = la[j:j + 1].argmax(-1)
                pos[s] += 1
        (ms, _, outs_s), (mi, _, outs_i) = runs["select"], runs["index"]
        assert all(torch.equal(x, y) for x, y in zip(outs_s, outs_i)), dtype
        for m in (ms, mi):
            for c_ref, c in ((ref.k_cache, m.k_cache), (ref.v_cache, m.v_cache)):
                diff = float((c_ref[0, :, :, :length].float() - c[0, :slots].float()).abs().max())
                assert diff <= tol(dtype, c_ref[0]), (dtype, diff)
                assert not c[:, slots, :, 1:].any(), dtype  # padding: the scratch slot's position 0 only
        assert torch.equal(ms.k_cache[:, :slots], mi.k_cache[:, :slots])
        assert torch.equal(ms.v_cache[:, :slots], mi.v_cache[:, :slots])


def test_step_graphs_refuse_bad_steps():
    import llm
    m = llm.Llama(**CFG).eval()
    m.alloc_cache(4, 32)
    try:
        llm.StepGraphs(m, 4)  # needs 5 slots: 4 + the scratch
        raise AssertionError("a cache without a scratch slot was accepted")
    except ValueError as e:
        assert "scratch" in str(e)
    steps = llm.StepGraphs(m, 3)
    for toks, sl, at in ((torch.zeros(4, dtype=torch.long), [0, 1, 2, 0], [1, 1, 1, 1]),
                         (torch.zeros(0, dtype=torch.long), [], []),
                         (torch.zeros(2, dtype=torch.long), [0, 1], [1])):
        try:
            steps.step(toks, sl, at)
            raise AssertionError(f"a step of {sl} at {at} was accepted")
        except ValueError as e:
            assert "with 3 slots" in str(e)


def test_grouped_query_attention_is_repeated_kv_heads():
    """A kv_heads=2 model equals the multi-head model whose K/V projections repeat each K/V head for
    its query heads (what Llama's grouped-query attention means)."""
    import llm
    torch.manual_seed(3)
    gqa = llm.Llama(**dict(CFG, kv_heads=2)).eval()
    mha = llm.Llama(**CFG).eval()
    sd = gqa.state_dict()
    hd, rep = CFG["d"] // CFG["heads"], CFG["heads"] // 2
    for k, v in list(sd.items()):
        if k.endswith(("wk.weight", "wv.weight")):
            sd[k] = v.view(2, hd, CFG["d"]).repeat_interleave(rep, dim=0).reshape(CFG["d"], CFG["d"])
    mha.load_state_dict(sd)
    for m in (gqa, mha):
        m.alloc_cache(1, 64)
    prompt = torch.randint(0, CFG["vocab"], (1, 9), generator=torch.Generator().manual_seed(4))
    lg, lm = gqa.prefill(prompt, 0), mha.prefill(prompt, 0)
    assert torch.allclose(lg, lm, rtol=1e-5, atol=1e-5)
    assert gqa.k_cache.shape[2] == 2 and mha.k_cache.shape[2] == CFG["heads"]
    tok = lg.argmax(-1)
    for i in range(6):
        lg, lm = gqa.decode(tok, [0], [9 + i]), mha.decode(tok, [0], [9 + i])
        assert torch.allclose(lg, lm, rtol=1e-5, atol=1e-5), i
        tok = lg.argmax(-1)


def test_8b_shape_is_llama3_8b():
    import llm
    m = llm.build("8b", torch.device("meta"), on_device=True)
    n = sum(p.numel() for p in m.parameters())
    assert n == 8_030_261_248, n  # Llama 3 8B's parameter count
    assert m.layers[0].wk.weight.shape == (1024, 4096) and m.kv_heads == 8
    assert all(p.dtype == torch.bfloat16 for p in m.parameters())


def test_graph_generate_on_the_cpu_follows_the_eager_decoder():
    """decoder.py --cuda-graph's generate (on the CPU the static step runs without a graph) gives the
    eager hand-written decoder's tokens, and refuses a request longer than its cache."""
    import decoder
    import llm
    torch.manual_seed(0)
    cfg = dict(CFG, kv_heads=2)
    eager = llm.Llama(**cfg).to(torch.bfloat16).eval()
    static = llm.Llama(**cfg).to(torch.bfloat16).eval()
    static.load_state_dict(eager.state_dict())
    eager.alloc_cache(1, 4096)
    static.alloc_cache(1, decoder.graph_len(16, 8))
    gen_e = decoder.hand_generate(eager)
    gen_s, how = decoder.graph_generate(static, torch.device("cpu"))
    assert "no CUDA graph" in how, how
    for seed in range(3):
        prompt = torch.randint(0, CFG["vocab"], (1, 16), generator=torch.Generator().manual_seed(seed))
        te, le = gen_e(prompt, 8)
        stamps = []
        ts, ls = gen_s(prompt, 8, stamps)
        assert torch.equal(te, ts), (seed, te, ts)
        assert float((le.float() - ls.float()).abs().max()) <= tol(torch.bfloat16, le)
        assert len(stamps) == 8
    try:
        gen_s(torch.zeros(1, 30, dtype=torch.long), 8)  # 30 + 7 positions > 32
        raise AssertionError("a request longer than the cache was accepted")
    except ValueError as e:
        assert "does not fit" in str(e)


def cuda_twins():
    """(ref, cap, device): two copies of one random bf16 model (grouped-query attention) on the CUDA
    device; None, after printing SKIPPED, without one."""
    if not torch.cuda.is_available():
        print("  SKIPPED: no CUDA device (the capture itself is checked on the GPU machine)")
        return None
    import llm
    dev = torch.device("cuda")
    torch.manual_seed(0)
    cfg = dict(CFG, kv_heads=2)
    ref = llm.Llama(**cfg).to(dev, torch.bfloat16).eval()
    cap = llm.Llama(**cfg).to(dev, torch.bfloat16).eval()
    cap.load_state_dict(ref.state_dict())
    return ref, cap, dev


def test_cuda_graph_replays_the_static_step():
    """With CUDA: the captured step's replays equal the same step run eagerly, bit for bit, at
    several positions (the graph reads the position from its device tensor)."""
    twins = cuda_twins()
    if twins is None:
        return
    import decoder
    ref, cap, dev = twins
    for m in (ref, cap):
        m.alloc_cache(1, decoder.graph_len(16, 8))
    gen_r, _ = decoder.graph_generate(ref, dev, capture=False)  # the static step, eagerly
    gen_c, how = decoder.graph_generate(cap, dev)
    assert "CUDA graph" in how and "no CUDA graph" not in how, how
    for seed in range(3):
        prompt = torch.randint(0, CFG["vocab"], (1, 16), generator=torch.Generator().manual_seed(seed)).to(dev)
        tr, lr = gen_r(prompt, 8)
        tc, lc = gen_c(prompt, 8)
        assert torch.equal(tr, tc) and torch.equal(lr, lc), seed


def test_step_graphs_replay_the_eager_static_step():
    """With CUDA: serve.py --cuda-graph's captured steps (index_put_ writes, padded batches) give the
    same logits and caches, bit for bit, as the same padded decode_static run eagerly."""
    twins = cuda_twins()
    if twins is None:
        return
    import llm
    ref, cap, dev = twins
    slots = 5
    for m in (ref, cap):
        m.alloc_cache(slots + 1, 48)
        m.static_put = "index"
    steps = llm.StepGraphs(cap, slots)
    assert sorted(steps.graphs) == [1, 2, 4, 5], steps.graphs
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(0, CFG["vocab"], (1, 4 + s), generator=g).to(dev) for s in range(slots)]
    pos = [p.shape[1] for p in prompts]
    last = [ref.prefill(p, s).argmax(-1) for s, p in enumerate(prompts)]
    for s, p in enumerate(prompts):
        cap.prefill(p, s)
    for active in ([4, 0, 2], [3], [0, 1, 2, 3, 4], [1, 3]) * 2:
        n = len(active)
        b = next(x for x in llm.buckets(slots) if x >= n)
        toks = torch.cat([last[s] for s in active])
        lc = steps.step(toks, active, [pos[s] for s in active]).clone()
        pad = torch.cat([toks, steps.inputs[b][0][n:]])  # the padding rows' tokens, as the replay had them
        lr = ref.decode_static(pad, torch.tensor(active + [slots] * (b - n), device=dev),
                               torch.tensor([pos[s] for s in active] + [0] * (b - n), device=dev))[:n]
        assert torch.equal(lr, lc), active
        for j, s in enumerate(active):
            last[s] = lr[j:j + 1].argmax(-1)
            pos[s] += 1
    assert torch.equal(ref.k_cache[:, :slots], cap.k_cache[:, :slots])
    assert torch.equal(ref.v_cache[:, :slots], cap.v_cache[:, :slots])


if __name__ == "__main__":
    if torch is None:
        print("SKIPPED: torch is not importable; llm_test needs it")
        print("llm_test: 0 passed, 0 failed, 1 skipped")
        sys.exit(0)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    tests = [v for k, v in sorted(globals().items()) if k.startswith("test_")]
    for t in tests:
        with torch.no_grad():
            t()
        print(f"ok {t.__name__}")
    print(f"llm_test: {len(tests)} passed")
