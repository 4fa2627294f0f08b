"""torch.compile mode="max-autotune-no-cudagraphs": autotuned Triton GEMMs and fused epilogues (MLP)."""
from common import deterministic_torch, digest, digest_all, finish

torch = deterministic_torch(0)
torch.use_deterministic_algorithms(False)
import torch.nn as nn

dev = "cuda"
mlp = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 512)).to(dev, dtype=torch.float16)
f = torch.compile(mlp, mode="max-autotune-no-cudagraphs")
g = torch.Generator(device=dev).manual_seed(6)
outs = []
with torch.no_grad():
    for i in range(4):
        x = torch.randn(256, 512, device=dev, generator=g, dtype=torch.float16)
        outs.append(f(x))
torch.cuda.synchronize()
finish({"outs": digest_all(outs)})
