"""A training loop fed by a `DataLoader` with two forked worker processes and a pin-memory thread
(pinned host buffers allocated off the main thread, non-blocking copies), on PyTorch's expandable
segments (`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`: the driver's virtual memory management,
`cuMemCreate` / `cuMemMap` / `cuMemSetAccess`), with growing batches and `empty_cache` between
epochs (unmapping)."""
import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
from common import deterministic_torch, digest, finish  # noqa: E402

torch = deterministic_torch(0)
from torch.utils.data import DataLoader, Dataset  # noqa: E402


class Synthetic(Dataset):
    """Deterministic samples computed on the host from the index alone (any worker, any order)."""

    def __len__(self):
        return 384

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(1000 + i)
        return torch.randn(3, 48, 48, generator=g), i % 10


def main():
    dev = "cuda"
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(4),
        torch.nn.Flatten(), torch.nn.Linear(64 * 36, 10),  # adaptive pooling's backward is nondeterministic
    ).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for epoch, batch in enumerate((16, 32, 64)):
        loader = DataLoader(Synthetic(), batch_size=batch, shuffle=False, num_workers=2, pin_memory=True)
        for x, y in loader:
            assert x.is_pinned()
            x = x.to(dev, non_blocking=True)
            y = y.to(dev, non_blocking=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        big = torch.empty(64 << 20, dtype=torch.uint8, device=dev)  # grows a segment, then unmapped
        big.fill_(epoch)
        del big
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    finish({"losses": digest(torch.stack(losses)), "params": digest(params)}, steps=len(losses),
           reserved_mib=torch.cuda.memory_reserved() >> 20)


if __name__ == "__main__":
    main()
