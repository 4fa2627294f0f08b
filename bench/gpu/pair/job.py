"""One training job of the pair benchmark (bench/gpu/pair/README.md).

  python3 job.py gpt|resnet throughput OUT.json [--barrier DIR --peers N] [--seconds S]
  python3 job.py gpt|resnet digest OUT.json [--steps N]
  python3 job.py gpt|resnet idle OUT.json --barrier DIR [--seconds S]

throughput: warm up, wait at the barrier until every peer is warm, then train for S seconds
(wall clock, synchronized at both ends) and write steps/s. digest: a fixed number of steps in the
deterministic configuration (fixed seed and data, deterministic algorithms, no autotuning) and
the SHA-256 of every parameter's bytes plus the losses, so two runs can be compared bitwise.
idle: a peer that only holds a CUDA context (under a Static daemon it holds a share and leaves it
unused): it writes DIR/idle.ready once its context exists and exits when DIR/stop appears (or after
S seconds).
"""
import argparse
import hashlib
import json
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    """d768, 6 layers, 12 heads, T512 (the issue's GPT job)."""

    def __init__(self, vocab=32768, d=768, layers=6, heads=12, t=512):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(t, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def build(model, dev):
    g = torch.Generator(device="cpu").manual_seed(1234)
    if model == "gpt":
        torch.manual_seed(0)
        net = GPT().to(dev)
        opt = torch.optim.AdamW(net.parameters(), lr=3e-4)
        x = torch.randint(0, 32768, (16, 512), generator=g).to(dev)
        y = torch.randint(0, 32768, (16, 512), generator=g).to(dev)

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = F.cross_entropy(net(x).view(-1, 32768).float(), y.view(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss
    else:
        import torchvision

        torch.manual_seed(0)
        net = torchvision.models.resnet50().to(dev).to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        x = torch.randn(64, 3, 224, 224, generator=g).to(dev).to(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (64,), generator=g).to(dev)

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = F.cross_entropy(net(x).float(), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss
    return net, step


def barrier(d, name, peers, limit=180):
    open(os.path.join(d, name + ".ready"), "w").close()
    t = time.time()
    while len([f for f in os.listdir(d) if f.endswith(".ready")]) < peers:
        if time.time() - t > limit:
            raise SystemExit(f"barrier: {peers} peers not ready after {limit} s")
        time.sleep(0.005)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=["gpt", "resnet"])
    ap.add_argument("kind", choices=["throughput", "digest", "idle"])
    ap.add_argument("out")
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--barrier")
    ap.add_argument("--peers", type=int, default=1)
    a = ap.parse_args()
    dev = torch.device("cuda")
    if a.kind == "digest":
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
    else:
        torch.backends.cudnn.benchmark = True
    if a.kind == "idle":
        torch.ones(1, device=dev).sum().item()
        open(os.path.join(a.barrier, "idle.ready"), "w").close()
        t = time.time()
        while not os.path.exists(os.path.join(a.barrier, "stop")) and time.time() - t < a.seconds:
            time.sleep(0.05)
        json.dump({"model": a.model, "idle_s": time.time() - t}, open(a.out, "w"))
        return
    net, step = build(a.model, dev)
    if a.kind == "digest":
        losses = [step().item() for _ in range(a.steps)]
        torch.cuda.synchronize()
        h = hashlib.sha256()
        for p in net.parameters():
            h.update(p.detach().float().cpu().numpy().tobytes())
        doc = {"model": a.model, "steps": a.steps, "digest": h.hexdigest(), "losses": losses}
    else:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
        if a.barrier:
            barrier(a.barrier, f"{a.model}-{os.getpid()}", a.peers)
        t0 = time.perf_counter()
        n = 0
        while time.perf_counter() - t0 < a.seconds:
            step()
            n += 1
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        doc = {"model": a.model, "steps": n, "seconds": dt, "steps_per_s": n / dt}
    json.dump(doc, open(a.out, "w"))
    print(json.dumps(doc))


if __name__ == "__main__":
    main()
