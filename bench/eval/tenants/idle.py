"""A training tenant with idle GPU phases (a GPT, `medium` by default):

  --mode loader   host-side data loading: every step first builds its batch on the CPU (random
                  tokens, a CPU shuffle standing for decoding/augmentation, at least --load-ms of
                  host time), copies it over and only then trains; the GPU idles meanwhile.
  --mode offload  optimizer CPU offload (ZeRO-Offload style): forward and backward on the GPU, the
                  gradients copied to pinned host memory, AdamW on fp32 master weights on the CPU,
                  the weights copied back; the GPU idles during the CPU step.

  python3 tenants/idle.py --mode loader|offload [--load-ms 40] [--size medium] [--digest]
"""
import time

import common
import torch


def main():
    ap = common.base_args(__doc__)
    ap.add_argument("--mode", choices=["loader", "offload"], default="loader")
    ap.add_argument("--load-ms", type=float, default=40.0)
    ap.add_argument("--size", choices=sorted(common.GPT_SIZES), default="medium")
    a = ap.parse_args()
    t = common.tenant.Tenant("idle-" + a.mode)
    dev = common.setup(a.digest)
    vocab, d, layers, heads, tlen, b = common.GPT_SIZES[a.size]
    net = common.GPT(vocab, d, layers, heads, tlen).to(dev)
    gen = torch.Generator(device="cpu").manual_seed(1234)
    host_busy = []

    if a.mode == "loader":
        opt = torch.optim.AdamW(net.parameters(), lr=3e-4)
        pinned_x = common.pinned(torch.empty(b, tlen, dtype=torch.long))
        pinned_y = common.pinned(torch.empty(b, tlen, dtype=torch.long))

        def step():
            common.sync()  # a loader without prefetch: the next batch is built after this step
            t0 = time.perf_counter()
            xb = torch.randint(0, vocab, (b, tlen), generator=gen)
            perm = torch.randperm(b * tlen, generator=gen)
            pinned_x.copy_(xb.view(-1)[perm].view(b, tlen))
            pinned_y.copy_(torch.roll(pinned_x, -1, dims=1))
            left = a.load_ms / 1000 - (time.perf_counter() - t0)
            if left > 0:
                time.sleep(left)
            host_busy.append(time.perf_counter() - t0)
            x, y = pinned_x.to(dev, non_blocking=True), pinned_y.to(dev, non_blocking=True)
            loss = common.lm_loss(net, x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss
    else:
        params = list(net.parameters())
        master = [p.detach().float().cpu().clone().requires_grad_(False) for p in params]
        grads = [common.pinned(torch.empty_like(m)) for m in master]
        for m, g in zip(master, grads):
            m.grad = g
        opt = torch.optim.AdamW(master, lr=3e-4)
        x, y = common.gpt_batch(vocab, tlen, b, dev)

        def step():
            for p in params:
                p.grad = None
            loss = common.lm_loss(net, x, y)
            loss.backward()
            for p, g in zip(params, grads):
                g.copy_(p.grad, non_blocking=True)
            common.sync()
            t0 = time.perf_counter()
            opt.step()
            host_busy.append(time.perf_counter() - t0)
            with torch.no_grad():
                for p, m in zip(params, master):
                    p.copy_(m, non_blocking=True)
            return loss

    def late():
        # the host phase per step (median over every step run, warm-up included)
        return {"host_phase_ms_median": sorted(host_busy)[len(host_busy) // 2] * 1000 if host_busy else None,
                "load_ms": a.load_ms if a.mode == "loader" else None}

    common.train_main(t, a, net, step, {"model": f"gpt-{a.size}", "mode": a.mode}, samples_per_step=b, late=late)


if __name__ == "__main__":
    main()
