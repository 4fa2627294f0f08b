"""NCCL on one GPU, two ways: torch.distributed (backend nccl, world size 1) with a DistributedDataParallel
training loop (NCCL's own streams and events, gradient bucket all-reduces) plus direct all_reduce and
broadcast; and NCCL loaded with ctypes as vLLM's pynccl loads it (ncclGetUniqueId, ncclCommInitRank,
ncclAllReduce on a torch tensor's memory and stream). One rank: NCCL runs its single-rank paths, which is
what one GPU allows; the multi-GPU check is issue 28's."""
import ctypes
import glob
import os
import tempfile

from common import deterministic_torch, digest, finish

torch = deterministic_torch(0)
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

store = tempfile.NamedTemporaryFile(prefix="vitamin-nccl-", delete=False).name
dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1)
dev = torch.device("cuda", 0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 64)).to(dev)
ddp = DDP(model, device_ids=[0], bucket_cap_mb=1)
opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
g = torch.Generator(device=dev).manual_seed(1)
losses = []
for step in range(12):
    x = torch.randn(64, 256, device=dev, generator=g)
    y = torch.randn(64, 64, device=dev, generator=g)
    loss = torch.nn.functional.mse_loss(ddp(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    losses.append(loss.detach())
t = torch.arange(1 << 16, device=dev, dtype=torch.float32).mul_(0.5)
dist.all_reduce(t)
b = torch.full((1 << 12,), 3.0, device=dev)
dist.broadcast(b, src=0)
torch.cuda.synchronize()
dist.destroy_process_group()
os.unlink(store)


def load_nccl():
    import torch as _t

    names = [os.environ.get("VITAMIN_NCCL_SO", "")]
    base = os.path.dirname(os.path.dirname(_t.__file__))
    names += glob.glob(os.path.join(base, "nvidia", "nccl", "lib", "libnccl.so*"))
    names.append("libnccl.so.2")
    for n in names:
        if n:
            try:
                return ctypes.CDLL(n)
            except OSError:
                continue
    raise RuntimeError("libnccl.so.2 not found")


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


nccl = load_nccl()
uid = UniqueId()
assert nccl.ncclGetUniqueId(ctypes.byref(uid)) == 0
comm = ctypes.c_void_p()
assert nccl.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0) == 0
s = torch.cuda.Stream()
src = torch.linspace(-1, 1, 1 << 18, device=dev)
dst = torch.empty_like(src)
# src and dst were made on the current stream; s (non-blocking) must wait for them. Without this
# wait the program races (its output differed once in 5 bind runs: docs/results/apps-suite.md, run 4).
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    src.mul_(3.0)  # on the stream the collective then uses
    for _ in range(4):
        rc = nccl.ncclAllReduce(ctypes.c_void_p(src.data_ptr()), ctypes.c_void_p(dst.data_ptr()),
                                ctypes.c_size_t(src.numel()), 7, 0, comm, ctypes.c_void_p(s.cuda_stream))
        assert rc == 0, rc  # ncclFloat32 = 7, ncclSum = 0
        src.add_(dst)
s.synchronize()
nccl.ncclCommDestroy(comm)
finish({"losses": digest(torch.stack(losses)), "params": digest(torch.cat([p.detach().flatten() for p in model.parameters()])),
        "all_reduce": digest(t), "broadcast": digest(b), "ctypes_all_reduce": digest(src)},
       last_loss=float(losses[-1]))
