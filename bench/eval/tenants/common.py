"""Shared torch pieces of the tenants (bench/eval/README.md): the training driver (warm-up, barrier,
measured window or the deterministic digest mode), parameter digests and a small GPT.

Every training tenant is `python3 tenants/X.py [--digest] [--steps N] [--warmup N] [options]`:
without --digest it warms up, waits at the barrier (tenant.py), trains for EVAL_SECONDS and writes
steps/s as `throughput`; with --digest it runs N steps in the deterministic configuration (fixed
seeds and data, deterministic algorithms, no autotuning) after the barrier (so colocated digests
overlap) and writes the SHA-256 of every parameter and the losses.
"""
import argparse
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tenant  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def base_args(description):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--digest", action="store_true", help="deterministic fixed-step run, SHA-256 of the parameters")
    ap.add_argument("--steps", type=int, default=8, help="steps of the digest mode")
    ap.add_argument("--warmup", type=int, default=3, help="warm-up steps before the barrier")
    return ap


SMOKE_CPU = os.environ.get("EVAL_DEVICE") == "cpu"  # smoke test of the tenants' code on a CPU only


def sync():
    """Waits for the device's queued work (nothing to wait for on the CPU smoke path)."""
    if not SMOKE_CPU:
        torch.cuda.synchronize()


def pinned(t):
    return t if SMOKE_CPU else t.pin_memory()


def autocast():
    return torch.autocast("cpu" if SMOKE_CPU else "cuda", dtype=torch.bfloat16)


def setup(digest, seed=0):
    """The device, in the deterministic configuration for digests. EVAL_DEVICE=cpu runs the tenant
    on the CPU (a smoke test of its code, never a measurement)."""
    if SMOKE_CPU:
        torch.manual_seed(seed)
        if digest:
            torch.use_deterministic_algorithms(True, warn_only=True)
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device visible to torch")
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if digest:
        # warn_only: an op without a deterministic implementation warns (recorded in the result by
        # train_main) instead of failing; the digest comparison then shows whether it mattered.
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
        # Attention by its math backend (matmuls and a softmax): the cuDNN backend's backward is
        # not deterministic (it warned, and a GPT tenant's digest differed run to run:
        # docs/results/eval.md, determinism run 1), nor are the fused backends' backward passes
        # guaranteed to be.
        torch.backends.cuda.enable_cudnn_sdp(False)
        torch.backends.cuda.enable_flash_sdp(False)
        torch.backends.cuda.enable_mem_efficient_sdp(False)
    else:
        torch.backends.cudnn.benchmark = True
    torch.manual_seed(seed)
    return torch.device("cuda")


def param_digest(module):
    return tenant.sha256_hex(p.detach().float().cpu().numpy().tobytes() for p in module.parameters())


def train_main(t, a, net, step, extra=None, samples_per_step=None, late=None):
    """Runs `step()` (one training step, returning the loss tensor) per the protocol; writes the
    result (`extra`, and what `late()` returns once the steps are done)."""
    extra = dict(extra or {})
    if a.digest:
        t.ready()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            losses = [float(step().item()) for _ in range(a.steps)]
        sync()
        nondet = sorted({str(w.message)[:200] for w in caught if "deterministic" in str(w.message)})
        extra.update(late() if late else {})
        return t.write({"role": "train", "digest": param_digest(net), "losses": losses, "steps": a.steps,
                        "nondeterministic_warnings": nondet, **extra})
    for _ in range(a.warmup):
        step()
    sync()
    t.ready()
    t0 = time.perf_counter()
    n = 0
    while t.measuring():
        step()
        n += 1
    sync()
    dt = time.perf_counter() - t0
    extra.update(late() if late else {})
    doc = {"role": "train", "throughput": n / dt, "unit": "steps/s", "steps": n, "seconds": dt, **extra}
    if samples_per_step:
        doc["samples_per_s"] = n * samples_per_step / dt
    return t.write(doc)


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
    def __init__(self, vocab, d, layers, heads, t):
        super().__init__()
        self.vocab = vocab
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(t, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


# name -> (vocab, d, layers, heads, T, batch)
GPT_SIZES = {
    "tiny": (1024, 64, 2, 4, 64, 2),  # the CPU smoke test only
    "small": (32768, 512, 4, 8, 512, 16),
    "medium": (32768, 768, 6, 12, 512, 16),
    "large": (32768, 1024, 12, 16, 512, 8),
}


def gpt_batch(vocab, t, b, dev, seed=1234):
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randint(0, vocab, (b, t), generator=g).to(dev)
    y = torch.randint(0, vocab, (b, t), generator=g).to(dev)
    return x, y


def lm_loss(net, x, y):
    with autocast():
        logits = net(x)
    return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), y.view(-1))
