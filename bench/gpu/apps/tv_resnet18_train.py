"""torchvision ResNet-18 training with cuDNN (batch 32, 3x96x96, SGD with momentum, 10 steps)."""
from common import deterministic_torch, digest, digest_all, finish

torch = deterministic_torch(0)
import torchvision

dev = "cuda"
model = torchvision.models.resnet18(num_classes=10).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
g = torch.Generator(device=dev).manual_seed(1)
losses = []
for step in range(10):
    x = torch.randn(32, 3, 96, 96, device=dev, generator=g)
    y = torch.randint(0, 10, (32,), device=dev, generator=g)
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    losses.append(loss.detach())
torch.cuda.synchronize()
finish({"losses": digest(torch.stack(losses)), "params": digest_all(model.parameters()),
        "buffers": digest_all(model.buffers())}, loss=float(losses[-1]))
