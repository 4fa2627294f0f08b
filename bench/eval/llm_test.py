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
                    assert torch.equal(la.argmax(-1), lb.argmax(-1)), (kv_heads, dtype, cache_len, i)
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
            assert torch.equal(la.argmax(-1), lb.argmax(-1)), (dtype, i)
            tok = la.argmax(-1)
        for ca, cb in ((a.k_cache, b.k_cache), (a.v_cache, b.v_cache)):
            assert torch.equal(ca[0, :, :, :48], cb[0]), dtype


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


def test_cuda_graph_replays_the_static_step():
    """With CUDA: the captured step's replays equal the same step run eagerly, bit for bit, at
    several positions (the graph reads the position from its device tensor)."""
    if not torch.cuda.is_available():
        print("  SKIPPED: no CUDA device (the capture itself is checked on the GPU machine)")
        return
    import decoder
    import llm
    dev = torch.device("cuda")
    torch.manual_seed(0)
    cfg = dict(CFG, kv_heads=2)
    ref = llm.Llama(**cfg).to(dev, torch.bfloat16).eval()
    cap = llm.Llama(**cfg).to(dev, torch.bfloat16).eval()
    cap.load_state_dict(ref.state_dict())
    for m in (ref, cap):
        m.alloc_cache(1, decoder.graph_len(16, 8))
    gen_r, _ = decoder.graph_generate(ref, torch.device("cpu"))  # the static step, eagerly
    gen_c, how = decoder.graph_generate(cap, dev)
    assert "CUDA graph" in how and "no CUDA graph" not in how, how
    for seed in range(3):
        prompt = torch.randint(0, CFG["vocab"], (1, 16), generator=torch.Generator().manual_seed(seed)).to(dev)
        tr, lr = gen_r(prompt, 8)
        tc, lc = gen_c(prompt, 8)
        assert torch.equal(tr, tc) and torch.equal(lr, lc), seed


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
