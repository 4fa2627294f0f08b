"""CUDA graph capture and replay (torch.cuda.graph) of a small MLP training step, plus
torch.compile mode="reduce-overhead" (CUDA graphs via Inductor)."""
from common import deterministic_torch, digest, digest_all, finish

torch = deterministic_torch(0)
torch.use_deterministic_algorithms(False)
import torch.nn as nn

dev = "cuda"
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator(device=dev).manual_seed(11)
static_x = torch.randn(64, 256, device=dev, generator=g)
static_y = torch.randint(0, 10, (64,), device=dev, generator=g)
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3):  # warm-up on a side stream, as the docs ask
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(static_x), static_y).backward()
        opt.step()
torch.cuda.current_stream().wait_stream(s)
graph = torch.cuda.CUDAGraph()
opt.zero_grad(set_to_none=True)
with torch.cuda.graph(graph):
    static_loss = nn.functional.cross_entropy(model(static_x), static_y)
    static_loss.backward()
losses = []
for i in range(8):
    static_x.copy_(torch.randn(64, 256, device=dev, generator=g))
    graph.replay()
    opt.step()
    losses.append(static_loss.detach().clone())
f = torch.compile(lambda a, b: (a @ b).relu().sum(dim=1), mode="reduce-overhead")
a = torch.randn(128, 128, device=dev, generator=g)
r = [f(a, a + i).clone() for i in range(5)]
torch.cuda.synchronize()
finish({"losses": digest(torch.stack(losses)), "params": digest_all(model.parameters()),
        "reduce_overhead": digest_all(r)})
