"""Data-parallel GPT training under torchrun (bench/gpu/multi/README.md): one process per GPU,
DistributedDataParallel over NCCL, the GPT of the pair benchmark (job.py, staged beside this file).

  torchrun --nproc-per-node 2 ddp_gpt.py digest OUT.json [--steps N]
  torchrun --nproc-per-node 2 ddp_gpt.py throughput OUT.json [--seconds S] [--barrier DIR --peers N]

digest: deterministic settings (fixed seed and data per rank, deterministic algorithms), a fixed number
of steps; rank 0 writes the SHA-256 of every parameter's bytes and the losses. throughput: warm up,
wait at the barrier (rank 0 for the job), train S seconds, rank 0 writes steps/s.
"""
import argparse
import hashlib
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from job import GPT, barrier


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["digest", "throughput"])
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=12)
    ap.add_argument("--barrier")
    ap.add_argument("--peers", type=int, default=1)
    a = ap.parse_args()
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    if a.kind == "digest":
        torch.use_deterministic_algorithms(True)
        torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    net = DDP(GPT().to(dev), device_ids=[local])
    opt = torch.optim.AdamW(net.parameters(), lr=3e-4)
    g = torch.Generator(device="cpu").manual_seed(1234 + rank)
    x = torch.randint(0, 32768, (8, 512), generator=g).to(dev)
    y = torch.randint(0, 32768, (8, 512), generator=g).to(dev)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(net(x).view(-1, 32768).float(), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    if a.kind == "digest":
        losses = [step().item() for _ in range(a.steps)]
        torch.cuda.synchronize()
        h = hashlib.sha256()
        for p in net.module.parameters():
            h.update(p.detach().float().cpu().numpy().tobytes())
        doc = {"steps": a.steps, "digest": h.hexdigest(), "losses": losses, "world": dist.get_world_size()}
    else:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
        dist.barrier()
        if a.barrier and rank == 0:
            barrier(a.barrier, f"ddp-{os.getpid()}", a.peers)
        dist.barrier()
        t0, n = time.perf_counter(), 0
        while time.perf_counter() - t0 < a.seconds:
            step()
            n += 1
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        doc = {"steps": n, "seconds": dt, "steps_per_s": n / dt, "world": dist.get_world_size()}
    if rank == 0:
        json.dump(doc, open(a.out, "w"))
        print(json.dumps(doc))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
