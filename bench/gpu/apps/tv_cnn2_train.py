"""torchvision MobileNetV3-Small and DenseNet-121 training with cuDNN, bf16 autocast, channels_last."""
from common import deterministic_torch, digest, digest_all, finish

torch = deterministic_torch(0)
import torchvision

dev = "cuda"
out = {}
for name, ctor in [("mobilenet_v3_small", torchvision.models.mobilenet_v3_small),
                   ("densenet121", torchvision.models.densenet121)]:
    torch.manual_seed(0)
    model = ctor(num_classes=10).to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator(device=dev).manual_seed(2)
    losses = []
    for step in range(6):
        x = torch.randn(16, 3, 64, 64, device=dev, generator=g).to(memory_format=torch.channels_last)
        y = torch.randint(0, 10, (16,), device=dev, generator=g)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach().float())
    out[name + ".losses"] = digest(torch.stack(losses))
    out[name + ".params"] = digest_all(model.parameters())
torch.cuda.synchronize()
finish(out)
