"""A training tenant with emulated communication waits (a GPT, `medium` by default): after the
backward pass the host waits for the GPU, then sleeps --comm-ms standing for a data-parallel
all-reduce of the gradients in --buckets pieces (the GPU of this rank idles meanwhile), then steps
the optimizer. The wait is host time, so the tenant's GPU demand has the gaps a rank of a
distributed job shows.

  python3 tenants/comm.py [--comm-ms 30] [--buckets 1] [--size medium] [--digest]
"""
import time

import common
import torch


def main():
    ap = common.base_args(__doc__)
    ap.add_argument("--comm-ms", type=float, default=30.0)
    ap.add_argument("--buckets", type=int, default=1)
    ap.add_argument("--size", choices=sorted(common.GPT_SIZES), default="medium")
    a = ap.parse_args()
    if a.buckets < 1 or a.comm_ms < 0:
        raise SystemExit("--buckets must be >= 1 and --comm-ms >= 0")
    t = common.tenant.Tenant("comm")
    dev = common.setup(a.digest)
    vocab, d, layers, heads, tlen, b = common.GPT_SIZES[a.size]
    net = common.GPT(vocab, d, layers, heads, tlen).to(dev)
    opt = torch.optim.AdamW(net.parameters(), lr=3e-4)
    x, y = common.gpt_batch(vocab, tlen, b, dev)

    def step():
        loss = common.lm_loss(net, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        for _ in range(a.buckets):
            common.sync()
            time.sleep(a.comm_ms / 1000 / a.buckets)
        opt.step()
        return loss

    common.train_main(t, a, net, step, {"model": f"gpt-{a.size}", "comm_ms": a.comm_ms, "buckets": a.buckets},
                      samples_per_step=b)


if __name__ == "__main__":
    main()
