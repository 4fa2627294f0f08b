"""A small Llama-style decoder written with torch (RMSNorm, rotary embeddings, SwiGLU, no biases),
random init, with a slot-indexed KV cache for prefill and batched decode (continuous batching).
Used by serve.py, and by decoder.py when transformers is not importable.

  m = Llama(**SIZES["small"]).to(dev, torch.bfloat16); m.alloc_cache(slots, max_len)
  logits = m.prefill(tokens[1, P], slot)            # writes positions 0..P-1 of the slot
  logits = m.decode(tokens[B], slots, positions)    # one token per slot at its position
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = {
    "tiny": dict(vocab=32000, d=512, layers=4, heads=8, ffn=1408),
    "small": dict(vocab=32000, d=1024, layers=8, heads=16, ffn=2816),
    "medium": dict(vocab=32000, d=2048, layers=16, heads=16, ffn=5632),
    # Llama 3 8B's shape (grouped-query attention, 8 KV heads; 16 GB of bf16 weights read per token).
    # Under eager transformers on the H200 its decode was still host-bound: 32-33 ms per token alone
    # (docs/results/eval.md, mixed-llama8b). The hand-written model has no grouped-query attention
    # and builds it with kv_heads = heads.
    "8b": dict(vocab=128256, d=4096, layers=32, heads=32, ffn=14336, kv_heads=8),
}


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
    def __init__(self, d, heads, ffn):
        super().__init__()
        self.heads, self.hd = heads, d // heads
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.w1, self.w3 = nn.Linear(d, ffn, bias=False), nn.Linear(d, ffn, bias=False)
        self.w2 = nn.Linear(ffn, d, bias=False)

    def qkv(self, x):
        b, t, _ = x.shape
        h = self.n1(x)
        return [w(h).view(b, t, self.heads, self.hd).transpose(1, 2) for w in (self.wq, self.wk, self.wv)]

    def mlp(self, x):
        h = self.n2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(nn.Module):
    def __init__(self, vocab, d, layers, heads, ffn, max_len=4096):
        super().__init__()
        self.vocab, self.d, self.heads, self.hd = vocab, d, heads, d // heads
        self.emb = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Layer(d, heads, ffn) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2).float() / self.hd))
        ang = torch.outer(torch.arange(max_len).float(), inv)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)
        self.k_cache = self.v_cache = None
        self.head_splits = 1  # >1: the reshaping treatment (the LM head's reduction split in pieces)

    def alloc_cache(self, slots, max_len):
        p = self.head.weight
        shape = (len(self.layers), slots, self.heads, max_len, self.hd)
        self.k_cache = torch.zeros(shape, dtype=p.dtype, device=p.device)
        self.v_cache = torch.zeros(shape, dtype=p.dtype, device=p.device)

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
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
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
            a = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask)
            x = x + layer.wo(a.transpose(1, 2).reshape(b, 1, self.d))
            x = layer.mlp(x)
        return self.logits(x[:, 0])


def build(size, dev, seed=0):
    torch.manual_seed(seed)
    m = Llama(**{k: v for k, v in SIZES[size].items() if k != "kv_heads"}).to(dev)
    return m.to(torch.bfloat16).eval()
