"""Numba CUDA: kernels compiled by Numba (NVVM to PTX, loaded through the driver's linker) on the legacy
default stream and on two blocking streams joined by events, a shared-memory tree reduction, a 2-D
stencil, integer atomics, a cooperative kernel with a grid-wide barrier (`cuLaunchCooperativeKernel`),
pinned, pageable and mapped (zero-copy) host memory, and timing events."""
import numpy as np

if not hasattr(np, "row_stack"):
    # numba-cuda 0.x registers an overload for `np.row_stack` at import; NumPy 2.4 removed that alias
    # of `np.vstack` (the GPU machine's numba-cuda failed to import without this line).
    np.row_stack = np.vstack
from numba import cuda, float32, int32  # noqa: E402

from common import digest, finish

TPB = 256


@cuda.jit
def saxpy(a, x, y, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = a * x[i] + y[i]


@cuda.jit
def block_sum(x, partial):
    # A fixed tree in shared memory: the same additions in the same order on any SM count.
    s = cuda.shared.array(TPB, dtype=float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    s[t] = x[i] if i < x.size else float32(0.0)
    cuda.syncthreads()
    step = TPB // 2
    while step > 0:
        if t < step:
            s[t] += s[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        partial[cuda.blockIdx.x] = s[0]


@cuda.jit
def stencil(a, b):
    i, j = cuda.grid(2)
    n, m = a.shape
    if 0 < i < n - 1 and 0 < j < m - 1:
        b[i, j] = float32(0.25) * (a[i - 1, j] + a[i + 1, j] + a[i, j - 1] + a[i, j + 1])


@cuda.jit
def histogram(x, bins):
    # Integer atomics: the counts do not depend on the order the blocks run in.
    i = cuda.grid(1)
    if i < x.size:
        k = int32(abs(x[i]) * float32(16.0)) % bins.size
        cuda.atomic.add(bins, k, 1)


@cuda.jit
def two_phase(x, tmp, out):
    # A cooperative kernel: every block must be resident for the grid-wide barrier.
    g = cuda.cg.this_grid()
    n = x.size
    stride = cuda.gridsize(1)
    for k in range(cuda.grid(1), n, stride):
        tmp[k] = x[k] * float32(2.0)
    g.sync()
    for k in range(cuda.grid(1), n, stride):
        out[k] = tmp[k] + tmp[(k + 1) % n]


@cuda.jit
def scale_into_mapped(x, host_out):
    i = cuda.grid(1)
    if i < x.size:
        host_out[i] = x[i] * float32(3.0)


rng = np.random.default_rng(3)
n = 1 << 20
x = rng.standard_normal(n).astype(np.float32)
y = rng.standard_normal(n).astype(np.float32)
blocks = (n + TPB - 1) // TPB
results = {}

# Legacy default stream: transfers and launches without a stream.
dx = cuda.to_device(x)
dy = cuda.to_device(y)
dout = cuda.device_array_like(dx)
saxpy[blocks, TPB](np.float32(2.5), dx, dy, dout)
partial = cuda.device_array(blocks, dtype=np.float32)
block_sum[blocks, TPB](dout, partial)
results["saxpy"] = digest(dout.copy_to_host())
results["block_sum"] = digest(partial.copy_to_host())

# Two blocking streams joined by an event, pinned and pageable sources, timing events.
s1, s2 = cuda.stream(), cuda.stream()
grid = rng.standard_normal((1024, 1024)).astype(np.float32)
pinned = cuda.pinned_array(grid.shape, dtype=np.float32)
pinned[:] = grid
start, stop = cuda.event(timing=True), cuda.event(timing=True)
start.record(stream=s1)
da = cuda.to_device(pinned, stream=s1)
db = cuda.device_array_like(da)
db.copy_to_device(da, stream=s1)
for _ in range(8):
    stencil[(64, 64), (16, 16), s1](da, db)
    stencil[(64, 64), (16, 16), s1](db, da)
ready = cuda.event()
ready.record(stream=s1)
ready.wait(stream=s2)
bins = cuda.to_device(np.zeros(64, dtype=np.int32), stream=s2)
histogram[(1024 * 1024 + TPB - 1) // TPB, TPB, s2](da.reshape(1024 * 1024), bins)
pageable = rng.standard_normal(n).astype(np.float32)
dp = cuda.to_device(pageable, stream=s2)
pageable[:] = 0.0  # the copy above read the pageable buffer in the call
stop.record(stream=s2)
stop.synchronize()
assert cuda.event_elapsed_time(start, stop) >= 0.0
results["stencil"] = digest(da.copy_to_host(stream=s2))
results["histogram"] = digest(bins.copy_to_host(stream=s2))
results["pageable"] = digest(dp.copy_to_host(stream=s2))
s2.synchronize()

# A cooperative launch with a grid-wide barrier, on a small grid every SM count holds.
tmp = cuda.device_array(n, dtype=np.float32)
out2 = cuda.device_array(n, dtype=np.float32)
two_phase[32, 128, s1](dp, tmp, out2)
results["cooperative"] = digest(out2.copy_to_host(stream=s1))

# Mapped host memory written by a kernel, read by the host after a synchronize.
mapped = cuda.mapped_array(n, dtype=np.float32)
scale_into_mapped[blocks, TPB, s1](dy, mapped)
s1.synchronize()
results["mapped"] = digest(np.array(mapped))
cuda.synchronize()
finish(results, numba=__import__("numba").__version__)
