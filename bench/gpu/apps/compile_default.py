"""torch.compile (Inductor, Triton kernels) default mode: a transformer block's forward and backward."""
from common import deterministic_torch, digest, digest_all, finish

torch = deterministic_torch(0)
torch.use_deterministic_algorithms(False)  # Inductor's generated reductions are fixed-structure anyway
import torch.nn as nn

dev = "cuda"
block = nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024, batch_first=True,
                                   dropout=0.0).to(dev)
opt = torch.optim.SGD(block.parameters(), lr=1e-2)
step = torch.compile(lambda x: block(x).square().mean())
g = torch.Generator(device=dev).manual_seed(5)
losses = []
for i in range(6):
    x = torch.randn(8, 64, 256, device=dev, generator=g)
    loss = step(x)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    losses.append(loss.detach())
torch.cuda.synchronize()
finish({"losses": digest(torch.stack(losses)), "params": digest_all(block.parameters())})
