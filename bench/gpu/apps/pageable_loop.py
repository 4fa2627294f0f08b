"""A data-loading loop on a high-priority side stream: a pageable host->device copy of a 1M-float
tensor changed right after the call, consumers on the side and main streams joined with events,
record_stream, the caching allocator reusing the blocks, and .item() only every few iterations (many
iterations in flight at once)."""
from common import deterministic_torch, digest, finish

torch = deterministic_torch(0)
dev = "cuda"
side = torch.cuda.Stream(priority=-1)
main = torch.cuda.current_stream()
host = torch.arange(1 << 20, dtype=torch.float32).mul_(1e-6)
w = torch.linspace(-1, 1, 1 << 20, device=dev)
acc = torch.zeros((), device=dev)
items = []
for it in range(200):
    ev = torch.cuda.Event()
    with torch.cuda.stream(side):
        side.wait_stream(main)
        d = host.to(dev, non_blocking=True)
        host.add_(1.0)
        e = d * w + it
        ev.record(side)
    main.wait_event(ev)
    d.record_stream(main)
    e.record_stream(main)
    acc = acc + (e * 0.5).sum() - d.mean()
    if it % 16 == 15:
        items.append(acc.item())
    if it % 7 == 0:
        ev.query()
torch.cuda.synchronize()
finish({"acc": digest(acc), "items": digest(torch.tensor(items, dtype=torch.float64)), "host": digest(host)},
       last=items[-1])
