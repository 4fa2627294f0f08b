"""A small GPT training loop in plain PyTorch: SDPA attention, LayerNorm, GELU, AdamW, bf16 autocast."""
from common import deterministic_torch, digest, digest_all, finish

torch = deterministic_torch(0)
import torch.nn as nn
import torch.nn.functional as F

dev = "cuda"


class Block(nn.Module):
    def __init__(s, d, h):
        super().__init__()
        s.h = h
        s.ln1, s.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        s.qkv, s.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        s.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(s, x):
        B, T, C = x.shape
        q, k, v = s.qkv(s.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, s.h, C // s.h).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + s.proj(a)
        return x + s.mlp(s.ln2(x))


V, D, T = 2048, 256, 128
emb, pos = nn.Embedding(V, D).to(dev), nn.Embedding(T, D).to(dev)
blocks = nn.Sequential(*[Block(D, 4) for _ in range(4)]).to(dev)
head = nn.Linear(D, V).to(dev)
params = list(emb.parameters()) + list(pos.parameters()) + list(blocks.parameters()) + list(head.parameters())
opt = torch.optim.AdamW(params, lr=3e-4)
g = torch.Generator(device=dev).manual_seed(12)
losses = []
for step in range(10):
    idx = torch.randint(0, V, (8, T + 1), device=dev, generator=g)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        x = emb(idx[:, :-1]) + pos(torch.arange(T, device=dev))
        loss = F.cross_entropy(head(blocks(x)).float().view(-1, V), idx[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    losses.append(loss.detach())
torch.cuda.synchronize()
finish({"losses": digest(torch.stack(losses)), "params": digest_all(params)})
