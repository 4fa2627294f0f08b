"""LoRA fine-tune tenant: a frozen GPT (the `large` size by default) with rank-r adapters on every
attention and MLP linear layer; only the adapters train (AdamW). Uses peft when `import peft` works,
else a hand-written adapter on nn.Linear (the result's `lora_impl` says which, and why).

  python3 tenants/lora.py [--size large] [--rank 16] [--digest] [--steps N]
"""
import math

import common
import torch
import torch.nn as nn

TARGETS = ["qkv", "proj", "fc1", "fc2"]


class LoRALinear(nn.Module):
    """y = base(x) + (x A^T) B^T * alpha / r, base frozen, B zero-initialized (the LoRA paper's init)."""

    def __init__(self, base, r, alpha):
        super().__init__()
        self.base = base
        for p in self.base.parameters():
            p.requires_grad_(False)
        self.lora_a = nn.Parameter(torch.empty(r, base.in_features, device=base.weight.device))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, r, device=base.weight.device))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))
        self.scale = alpha / r

    def forward(self, x):
        return self.base(x) + (x @ self.lora_a.t().to(x.dtype)) @ self.lora_b.t().to(x.dtype) * self.scale


def hand_written(net, r, alpha):
    for p in net.parameters():
        p.requires_grad_(False)
    for blk in net.blocks:
        for name in TARGETS:
            setattr(blk, name, LoRALinear(getattr(blk, name), r, alpha))
    return net


def main():
    ap = common.base_args(__doc__)
    ap.add_argument("--size", choices=sorted(common.GPT_SIZES), default="large")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--impl", choices=["auto", "peft", "hand"], default="auto")
    a = ap.parse_args()
    t = common.tenant.Tenant("lora")
    dev = common.setup(a.digest)
    vocab, d, layers, heads, tlen, b = common.GPT_SIZES[a.size]
    base = common.GPT(vocab, d, layers, heads, tlen).to(dev)
    impl = None
    if a.impl in ("auto", "peft"):
        try:
            import peft

            cfg = peft.LoraConfig(r=a.rank, lora_alpha=2 * a.rank, target_modules=TARGETS, lora_dropout=0.0)
            net = peft.get_peft_model(base, cfg)
            impl = f"peft {peft.__version__}"
        except Exception as e:  # peft missing or unable to wrap the custom module
            if a.impl == "peft":
                raise
            impl = f"hand-written (peft unavailable: {type(e).__name__}: {str(e)[:120]})"
    if impl is None or impl.startswith("hand"):
        impl = impl or "hand-written (asked)"
        torch.manual_seed(0)
        net = hand_written(base, a.rank, 2 * a.rank)
    net = net.to(dev)
    train = [p for p in net.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(train, lr=1e-4)
    x, y = common.gpt_batch(vocab, tlen, b, dev)

    def step():
        loss = common.lm_loss(net, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    common.train_main(t, a, net, step, {"model": f"gpt-{a.size}+lora-r{a.rank}", "lora_impl": impl,
                                        "trainable_params": sum(p.numel() for p in train)}, samples_per_step=b)


if __name__ == "__main__":
    main()
