"""A small Llama-style decoder written with torch (RMSNorm, rotary embeddings, SwiGLU, no biases),
random init, with a slot-indexed KV cache for prefill and batched decode (continuous batching).
Used by serve.py, and by decoder.py when transformers is not importable or with --cuda-graph.

  m = Llama(**SIZES["small"]).to(dev, torch.bfloat16); m.alloc_cache(slots, max_len)
  logits = m.prefill(tokens[1, P], slot)            # writes positions 0..P-1 of the slot
  logits = m.decode(tokens[B], slots, positions)    # one token per slot at its position
  logits = m.decode_static(tokens[B], slots[B], positions[B])   # the same, capturable (device tensors)

decode attends over the first max(positions)+1 keys of the cache (a shape that changes every step).
decode_static, the step decoder.py --cuda-graph captures in one CUDA graph, takes the slots and
positions as device tensors and attends over the cache's whole length with a mask (key index <=
position), so its shapes, and the graph, are the same at every step. It computes the same values
(the masked keys weigh exactly 0), but its softmax and attention-times-V reductions run over the
cache's length instead of position+1 keys, so the last bits may differ from decode's where a kernel
associates the sums differently for another length (llm_test.py measures it on the CPU).

Grouped-query attention: a size with `kv_heads` (8b) has that many K/V heads, each shared by
heads / kv_heads query heads (Llama 3 8B's shape); the cache holds the K/V heads. Without it
kv_heads = heads and nothing is expanded (the outputs of the other sizes are those before it).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from llm_sizes import SIZES  # noqa: F401 (llm.SIZES: the sizes, in a torch-free module)


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.w


def rotate(x, cos, sin):
    """Rotary embedding; x [..., T, hd], cos/sin [T, hd/2] broadcast over the leading dims."""
    x1, x2 = x[..., ::2], x[..., 1::2]
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.flatten(-2)


class Layer(nn.Module):
    def __init__(self, d, heads, ffn, kv_heads=None):
        super().__init__()
        self.heads, self.hd = heads, d // heads
        self.kv_heads = kv_heads or heads
        assert heads % self.kv_heads == 0, (heads, self.kv_heads)
        kvd = self.kv_heads * self.hd
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        # created in this order whatever kv_heads is (the random init of kv_heads = heads is unchanged)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d, o, bias=False) for o in (d, kvd, kvd, d))
        self.w1, self.w3 = nn.Linear(d, ffn, bias=False), nn.Linear(d, ffn, bias=False)
        self.w2 = nn.Linear(ffn, d, bias=False)

    def qkv(self, x):
        b, t, _ = x.shape
        h = self.n1(x)
        return [w(h).view(b, t, n, self.hd).transpose(1, 2)
                for w, n in ((self.wq, self.heads), (self.wk, self.kv_heads), (self.wv, self.kv_heads))]

    def expand(self, kv):
        """K or V [B, kv_heads, T, hd] -> [B, heads, T, hd]: each K/V head repeated for its query heads
        (grouped-query attention); the tensor itself where kv_heads = heads."""
        if self.kv_heads == self.heads:
            return kv
        return kv.repeat_interleave(self.heads // self.kv_heads, dim=1)

    def mlp(self, x):
        h = self.n2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(nn.Module):
    def __init__(self, vocab, d, layers, heads, ffn, max_len=4096, kv_heads=None):
        super().__init__()
        self.vocab, self.d, self.heads, self.hd = vocab, d, heads, d // heads
        self.kv_heads = kv_heads or heads
        self.emb = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Layer(d, heads, ffn, self.kv_heads) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2).float() / self.hd))
        ang = torch.outer(torch.arange(max_len).float(), inv)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)
        self.k_cache = self.v_cache = self.key_pos = self.slot_ids = None
        self.head_splits = 1  # >1: the reshaping treatment (the LM head's reduction split in pieces)
        # decode_static's cache writes: "select" (_select_static: torch.where over the layer's cache, the
        # same kernels in the deterministic mode) or "index" (index_put_ at the (slot, position)
        # pairs: a write of B rows, capturable outside the deterministic mode only)
        self.static_put = "select"

    def alloc_cache(self, slots, max_len):
        p = self.head.weight
        shape = (len(self.layers), slots, self.kv_heads, max_len, self.hd)
        self.k_cache = torch.zeros(shape, dtype=p.dtype, device=p.device)
        self.v_cache = torch.zeros(shape, dtype=p.dtype, device=p.device)
        # decode_static's index tensors: its mask (key index <= position) and its writes (slot, position)
        self.key_pos = torch.arange(max_len, device=p.device)
        self.slot_ids = torch.arange(slots, device=p.device)

    def logits(self, h):
        h = self.norm(h)
        if self.head_splits <= 1:
            return self.head(h)
        # same product, K split in pieces summed in another order: what a resource-driven reshaping
        # of the GEMM's reduction does; the bits may differ
        w = self.head.weight
        parts = torch.tensor_split(torch.arange(self.d, device=h.device), self.head_splits)
        out = None
        for idx in parts:
            y = h[..., idx] @ w[:, idx].t()
            out = y if out is None else out + y
        return out

    @torch.no_grad()
    def prefill(self, tokens, slot):
        t = tokens.shape[1]
        x = self.emb(tokens)
        cos, sin = self.cos[:t].to(x.dtype), self.sin[:t].to(x.dtype)
        for i, layer in enumerate(self.layers):
            q, k, v = layer.qkv(x)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            self.k_cache[i, slot, :, :t] = k[0]
            self.v_cache[i, slot, :, :t] = v[0]
            a = F.scaled_dot_product_attention(q, layer.expand(k), layer.expand(v), is_causal=True)
            x = x + layer.wo(a.transpose(1, 2).reshape(1, t, self.d))
            x = layer.mlp(x)
        return self.logits(x[:, -1])

    @torch.no_grad()
    def decode(self, tokens, slots, positions):
        """tokens [B] (device), slots and positions: Python lists of ints (positions = tokens so far)."""
        b = tokens.shape[0]
        span = max(positions) + 1
        dev = tokens.device
        s = torch.tensor(slots, device=dev)
        pos = torch.tensor(positions, device=dev)
        x = self.emb(tokens).view(b, 1, self.d)
        cos, sin = self.cos[pos].to(x.dtype)[:, None, None], self.sin[pos].to(x.dtype)[:, None, None]
        mask = (torch.arange(span, device=dev)[None, :] <= pos[:, None]).view(b, 1, 1, span)
        for i, layer in enumerate(self.layers):
            q, k, v = layer.qkv(x)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            self.k_cache[i][s, :, pos] = k[:, :, 0]
            self.v_cache[i][s, :, pos] = v[:, :, 0]
            kk, vv = self.k_cache[i][s, :, :span], self.v_cache[i][s, :, :span]
            a = F.scaled_dot_product_attention(q, layer.expand(kk), layer.expand(vv), attn_mask=mask)
            x = x + layer.wo(a.transpose(1, 2).reshape(b, 1, self.d))
            x = layer.mlp(x)
        return self.logits(x[:, 0])

    def _put_static(self, cache, slots, positions, new):
        if self.static_put == "index":
            cache[slots, :, positions] = new
            return
        self._select_static(cache, slots, positions, new)

    def _select_static(self, cache, slots, positions, new):
        """cache [S, kv_heads, L, hd] gets new[j] [kv_heads, hd] at (slots[j], positions[j]) for every j,
        by selection (torch.where over the cache, then a copy back) rather than index_put_: the same
        kernels in the deterministic mode (whose index_put_ sorts its indices, which CUDA graphs do not
        take) and fixed shapes whatever the indices. It rewrites the whole cache of the layer once per
        request, a few hundred KB for the decoder's batch 1 (one slot, prompt + gen positions)."""
        for j in range(new.shape[0]):
            sel = (self.slot_ids == slots[j])[:, None] & (self.key_pos == positions[j])[None, :]  # [S, L]
            cache.copy_(torch.where(sel[:, None, :, None], new[j][None, :, None, :], cache))

    @torch.no_grad()
    def decode_static(self, tokens, slots, positions):
        """decode with every shape fixed, capturable in a CUDA graph: tokens, slots and positions are
        device tensors [B] (long) whose values may change between replays. The new K/V go into the
        cache at (slot, position) read from those tensors (_put_static); attention runs over the
        cache's whole length L (alloc_cache's max_len) with the mask key index <= position. No host
        sync, no Python value that changes per step, and the same allocations every step. Same values
        as decode (the K/V written are the same bits); the logits' bits may differ (module docstring)."""
        b = tokens.shape[0]
        length = self.k_cache.shape[3]
        x = self.emb(tokens).view(b, 1, self.d)
        cos, sin = self.cos[positions].to(x.dtype)[:, None, None], self.sin[positions].to(x.dtype)[:, None, None]
        mask = (self.key_pos[None, :] <= positions[:, None]).view(b, 1, 1, length)
        for i, layer in enumerate(self.layers):
            q, k, v = layer.qkv(x)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            self._put_static(self.k_cache[i], slots, positions, k[:, :, 0])
            self._put_static(self.v_cache[i], slots, positions, v[:, :, 0])
            kk, vv = self.k_cache[i][slots], self.v_cache[i][slots]
            a = F.scaled_dot_product_attention(q, layer.expand(kk), layer.expand(vv), attn_mask=mask)
            x = x + layer.wo(a.transpose(1, 2).reshape(b, 1, self.d))
            x = layer.mlp(x)
        return self.logits(x[:, 0])


def buckets(slots):
    """The batch sizes StepGraphs captures for `slots` slots: the powers of two below it, and it."""
    out, b = [], 1
    while b < slots:
        out.append(b)
        b *= 2
    return out + [slots]


class StepGraphs:
    """Batched decode steps over a slot KV cache (continuous batching, serve.py --cuda-graph):
    decode_static captured once per batch size of buckets(slots), in CUDA graphs that share one
    memory pool, on a CUDA device; run eagerly elsewhere (the CPU smoke path). A step of n requests
    replays the smallest size >= n; its rows past n are padding that write the scratch slot (the
    cache's last, which no request is given) at position 0, and their logits are dropped. The model's
    cache must have slots + 1 slots.

    The graphs share their pool because they never run at once and none reads another's output;
    each output is read before the next replay (step returns a view of it: the caller's argmax or
    copy must come first)."""

    def __init__(self, m, slots):
        if m.k_cache is None or m.k_cache.shape[1] != slots + 1:
            raise ValueError(f"StepGraphs({slots} slots) needs a cache of {slots + 1} slots (one scratch)")
        dev = m.head.weight.device
        self.m, self.scratch, self.sizes = m, slots, buckets(slots)
        # static inputs per size: tokens, slots (the scratch slot until a request fills the row), positions
        self.inputs = {b: (torch.zeros(b, dtype=torch.long, device=dev),
                           torch.full((b,), slots, dtype=torch.long, device=dev),
                           torch.zeros(b, dtype=torch.long, device=dev)) for b in self.sizes}
        self.graphs, self.outputs = {}, {}
        if dev.type == "cuda":
            self._capture()

    def _capture(self):
        # Warm-up on a side stream before capture (torch's rule for CUDA graphs); it writes the scratch slot only.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for b in self.sizes:
                for _ in range(2):
                    self.m.decode_static(*self.inputs[b])
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        pool = torch.cuda.graph_pool_handle()
        for b in reversed(self.sizes):  # the largest first: the smaller ones fit in its blocks
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                self.outputs[b] = self.m.decode_static(*self.inputs[b])
            self.graphs[b] = g
        torch.cuda.synchronize()

    def describe(self):
        how = "CUDA graphs" if self.graphs else "run eagerly (no CUDA device: no graphs)"
        return (f"decode step per batch size {self.sizes} ({how}, cache length {self.m.k_cache.shape[3]}, "
                f"writes by {self.m.static_put}), prefill eager")

    @torch.no_grad()
    def step(self, tokens, slots, positions):
        """Logits [n, vocab] of one decode step: tokens [n] (device), slots and positions lists of n ints."""
        n = len(slots)
        if not 1 <= n <= self.scratch or len(positions) != n or tokens.shape[0] != n:
            raise ValueError(f"a step of {n} requests ({len(positions)} positions, {tokens.shape[0]} tokens) "
                             f"with {self.scratch} slots")
        b = next(x for x in self.sizes if x >= n)
        tok, slot, pos = self.inputs[b]
        pad = b - n
        tok[:n].copy_(tokens)  # device to device; the padding rows keep earlier (valid) token ids
        slot.copy_(torch.tensor(list(slots) + [self.scratch] * pad))
        pos.copy_(torch.tensor(list(positions) + [0] * pad))
        if self.graphs:
            self.graphs[b].replay()
            out = self.outputs[b]
        else:
            out = self.m.decode_static(tok, slot, pos)
        return out[:n]


def build(size, dev, seed=0, on_device=False):
    """The model of SIZES[size], random init (seed), bf16, in eval mode. on_device: created on `dev`
    directly in bf16 (the 8b shape: on the host in fp32 it would take minutes and 32 GB; the random
    init then comes from the device's generator, so its weights differ from a host-built model's)."""
    torch.manual_seed(seed)
    if on_device:
        old = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)
        try:
            with torch.device(dev):
                m = Llama(**SIZES[size])
        finally:
            torch.set_default_dtype(old)
    else:
        m = Llama(**SIZES[size]).to(dev)
    return m.to(torch.bfloat16).eval()
