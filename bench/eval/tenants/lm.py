"""GPT-style LM training tenant (two sizes; bf16 autocast, AdamW, fixed random tokens).

  python3 tenants/lm.py --size small|medium|large [--digest] [--steps N]
"""
import common
import torch


def main():
    ap = common.base_args(__doc__)
    ap.add_argument("--size", choices=sorted(common.GPT_SIZES), default="small")
    a = ap.parse_args()
    t = common.tenant.Tenant("lm-" + a.size)
    dev = common.setup(a.digest)
    vocab, d, layers, heads, tlen, b = common.GPT_SIZES[a.size]
    net = common.GPT(vocab, d, layers, heads, tlen).to(dev)
    opt = torch.optim.AdamW(net.parameters(), lr=3e-4)
    x, y = common.gpt_batch(vocab, tlen, b, dev)

    def step():
        loss = common.lm_loss(net, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    params = sum(p.numel() for p in net.parameters())
    common.train_main(t, a, net, step, {"model": f"gpt-{a.size}", "params": params, "batch": b, "seq": tlen},
                      samples_per_step=b)


if __name__ == "__main__":
    main()
