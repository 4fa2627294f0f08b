"""Driver calls beyond launches and copies: PyTorch on the stream-ordered allocator (cudaMallocAsync:
cuMemAllocAsync / cuMemFreeAsync), stream memory operations from cuda-bindings (cuStreamWriteValue32
on one stream, cuStreamWaitValue32 on another, the only thing ordering the second stream's work
behind the first's; bind mode then hands that stream to the driver). The flag word comes from
cuMemAlloc: cuStreamWriteValue32 on a word of a torch tensor from the stream-ordered pool returned
CUDA_ERROR_INVALID_VALUE natively on the H200 (docs/results/apps-suite.md, run 4)."""
import os

import numpy as np

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
from common import deterministic_torch, digest, digest_all, finish

torch = deterministic_torch(3)
import cuda.bindings.driver as drv


def check(r):
    err = r[0] if isinstance(r, tuple) else r
    assert int(err) == 0, f"driver error {err}"
    return r[1] if isinstance(r, tuple) and len(r) > 1 else None


dev = torch.device("cuda")
main = torch.cuda.current_stream()
side = torch.cuda.Stream(priority=-1)
flag = check(drv.cuMemAlloc(4))
check(drv.cuMemsetD32(flag, 0, 1))
x = torch.randn(1 << 20, device=dev)
w = torch.randn(512, 512, device=dev)
outs = []
for it in range(6):
    y = (x * 1.5 + it).sin()  # main: allocations from the stream-ordered pool
    check(drv.cuStreamWriteValue32(drv.CUstream(main.cuda_stream), flag, it + 1, 0))
    with torch.cuda.stream(side):
        # CU_STREAM_WAIT_VALUE_GEQ: side's work below sees y only through this wait.
        check(drv.cuStreamWaitValue32(drv.CUstream(side.cuda_stream), flag, it + 1, 0))
        z = (y.cos() * 2).view(2048, 512) @ w
        y.record_stream(side)
    main.wait_stream(side)
    z.record_stream(main)
    outs.append((z.sum(0) + x[:512]).clone())
    x = x + z.view(-1)[: x.numel()].mean()
    del y, z
torch.cuda.synchronize()
word = np.zeros(1, dtype=np.int32)
check(drv.cuMemcpyDtoH(word.ctypes.data, flag, 4))
check(drv.cuMemFree(flag))
finish({"outs": digest_all(outs), "x": digest(x), "flag": digest(torch.from_numpy(word))}, flag=int(word[0]))
