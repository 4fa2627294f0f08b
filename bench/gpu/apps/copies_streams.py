"""PyTorch copies and streams: pageable and pinned host->device copies with the host buffer changed right
after the call, device->host copies, streams with priorities, events with timing (elapsed_time),
wait_stream, record_stream and .item() — the pattern of a data-loading side stream."""
from common import deterministic_torch, digest, digest_all, finish

torch = deterministic_torch(0)
dev = "cuda"
side = torch.cuda.Stream(priority=-1)
low = torch.cuda.Stream(priority=0)
main = torch.cuda.current_stream()
g = torch.Generator(device=dev).manual_seed(10)
w = torch.randn(1024, 1024, device=dev, generator=g)
pageable = torch.arange(1 << 20, dtype=torch.float32).mul_(1e-6)   # 1M floats, pageable
pinned = torch.arange(1 << 20, dtype=torch.float32).mul_(2e-6).pin_memory()
acc = torch.zeros(1024, device=dev)
items, outs = [], []
for it in range(12):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(side):
        side.wait_stream(main)
        start.record(side)
        d = pageable.to(dev, non_blocking=True)      # pageable source: the driver reads it in the call
        pageable.add_(1.0)                            # ... so changing it right after must not matter
        p = pinned.to(dev, non_blocking=True)         # pinned source: read when the copy runs
        e = (d.view(1024, 1024) @ w).sum(dim=0) + p.view(1024, 1024)[0]
        stop.record(side)
    with torch.cuda.stream(low):
        low.wait_stream(side)
        f = e.relu().cumsum(0)
    main.wait_stream(low)
    d.record_stream(main)
    e.record_stream(main)
    f.record_stream(main)
    acc += f
    items.append(acc.sum().item())                    # memset + DtoH + sync
    pinned_back = torch.empty(1024, pin_memory=True)
    pinned_back.copy_(acc, non_blocking=True)
    torch.cuda.current_stream().synchronize()
    outs.append(pinned_back.clone())
    # pinned host buffer changed only after the copy that reads it completed
    side.synchronize()
    pinned.add_(0.5)
    assert stop.elapsed_time(start) is not None
torch.cuda.synchronize()
finish({"acc": digest(acc), "outs": digest_all(outs), "items": digest(torch.tensor(items, dtype=torch.float64))},
       last=items[-1])
