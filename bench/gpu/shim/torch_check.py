"""PyTorch workload for the shim's GPU check (bench/gpu/shim/run.sh).

Runs, entirely inside torch.profiler: eager elementwise ops, matmul (cuBLAS, fp32 and fp16),
conv2d (cuDNN), a Triton kernel, torch.cuda.Event timing, .item(), a side stream joined with
wait_stream, pinned non-blocking copies, CUDA graph capture + 3 replays, and allocator churn.
Deterministic settings throughout, so two runs (with and without the shim) must produce the same
output hashes.

Writes a JSON file with the output hashes and the profiler's counts: kernels not launched by a
graph replay, graph launches (cudaGraphLaunch calls), kernels run by replays, memcpy and memset
activities. The shim's census of the same run must report the same kernel launches and graph
launches.

usage: python3 torch_check.py OUT.json TRACE.json
"""

import hashlib
import json
import os
import random
import sys
import time

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.profiler import ProfilerActivity, profile


@triton.jit
def add_scale_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * alpha + y, mask=mask)


def digest(t):
    b = t.detach().contiguous().view(-1).view(torch.uint8).cpu().numpy().tobytes()
    return hashlib.sha256(b).hexdigest()[:16]


def work():
    out = {}
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(1234)
    x = torch.randn(1024, 1024, device=dev, generator=g)

    # Eager elementwise.
    y = (x * 2.0 + 1.0).relu().sin() - x.exp().clamp(max=4.0)
    out["elementwise"] = digest(y)

    # cuBLAS.
    out["matmul_fp32"] = digest(x @ x.T)
    xh = x.half()
    out["matmul_fp16"] = digest(xh @ xh)

    # cuDNN.
    img = torch.randn(8, 16, 64, 64, device=dev, generator=g)
    w = torch.randn(32, 16, 3, 3, device=dev, generator=g)
    out["conv2d"] = digest(F.conv2d(img, w, padding=1))

    # Triton.
    n = x.numel()
    tri = torch.empty_like(x)
    add_scale_kernel[(triton.cdiv(n, 1024),)](x, y, tri, n, 0.5, BLOCK=1024)
    out["triton"] = digest(tri)

    # Events, .item(), side stream joined both ways.
    e0 = torch.cuda.Event(enable_timing=True)
    e1 = torch.cuda.Event(enable_timing=True)
    e0.record()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        z = (y * 3.0).tanh() + x
    torch.cuda.current_stream().wait_stream(side)
    z.record_stream(torch.cuda.current_stream())
    e1.record()
    e1.synchronize()
    out["event_elapsed_ms_positive"] = e0.elapsed_time(e1) >= 0.0
    out["side_stream"] = digest(z)
    out["item"] = repr(z.sum().item())

    # Pinned non-blocking copy back, then sync.
    host = torch.empty(z.shape, dtype=z.dtype, pin_memory=True)
    host.copy_(z, non_blocking=True)
    torch.cuda.current_stream().synchronize()
    out["pinned_copy"] = digest(host)

    # CUDA graph: capture once, replay three times with new inputs.
    static_in = torch.randn(256, 256, device=dev, generator=g)
    warm = torch.cuda.Stream()
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):
        for _ in range(2):
            _ = (static_in @ static_in).relu() + 1.0
    torch.cuda.current_stream().wait_stream(warm)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = (static_in @ static_in).relu() + 1.0
    replays = []
    for r in range(3):
        static_in.copy_(torch.full((256, 256), 0.01 * (r + 1), device=dev))
        graph.replay()
        replays.append(digest(static_out))
    out["graph_replays"] = replays

    # Allocator churn: many sizes, freed and reused.
    rng = random.Random(7)
    acc = torch.zeros((), device=dev)
    for _ in range(64):
        m = rng.choice([1, 3, 17, 256, 4096, 65536, 1 << 20])
        t = torch.empty(m, device=dev).fill_(0.5)
        acc = acc + t.sum()
        del t
    out["churn"] = repr(acc.item())
    torch.cuda.synchronize()
    return out


def profiler_counts(trace_path):
    with open(trace_path) as f:
        trace = json.load(f)
    events = trace.get("traceEvents", trace if isinstance(trace, list) else [])
    graph_corr = set()
    graph_launch_calls = 0
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "GraphLaunch" in e.get("name", ""):
            graph_launch_calls += 1
            c = (e.get("args") or {}).get("correlation")
            if c is not None:
                graph_corr.add(c)
    direct = replayed = memcpy = memset = 0
    for e in events:
        cat = e.get("cat")
        if cat == "kernel":
            if (e.get("args") or {}).get("correlation") in graph_corr:
                replayed += 1
            else:
                direct += 1
        elif cat == "gpu_memcpy":
            memcpy += 1
        elif cat == "gpu_memset":
            memset += 1
    return {
        "kernels_not_from_graphs": direct,
        "graph_launch_calls": graph_launch_calls,
        "kernels_from_graph_replays": replayed,
        "memcpy": memcpy,
        "memset": memset,
    }


def main():
    out_path, trace_path = sys.argv[1], sys.argv[2]
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    t0 = time.time()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        results = work()
    prof.export_chrome_trace(trace_path)
    doc = {
        "results": results,
        "profiler": profiler_counts(trace_path),
        "shim_preloaded": "libvitamin_cuda" in os.environ.get("LD_PRELOAD", ""),
        "wall_s": round(time.time() - t0, 2),
        "torch": torch.__version__,
        "triton": triton.__version__,
    }
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
    print(json.dumps(doc["profiler"]))


if __name__ == "__main__":
    main()
