"""ResNet-50 training tenant (torchvision, random init, B64 224 px, channels_last, bf16 autocast, SGD).

  python3 tenants/resnet.py [--batch 64] [--digest] [--steps N]
"""
import common
import torch
import torch.nn.functional as F


def main():
    ap = common.base_args(__doc__)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--image", type=int, default=224, help="image side, px")
    a = ap.parse_args()
    t = common.tenant.Tenant("resnet50")
    dev = common.setup(a.digest)
    import torchvision

    net = torchvision.models.resnet50().to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator(device="cpu").manual_seed(1234)
    x = torch.randn(a.batch, 3, a.image, a.image, generator=g).to(dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (a.batch,), generator=g).to(dev)

    def step():
        with common.autocast():
            loss = F.cross_entropy(net(x).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    common.train_main(t, a, net, step, {"model": "resnet50", "batch": a.batch, "image": a.image}, samples_per_step=a.batch)


if __name__ == "__main__":
    main()
