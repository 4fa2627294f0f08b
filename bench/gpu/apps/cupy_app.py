"""CuPy: a RawKernel, two streams joined by an event, cuBLAS (matmul) and cuFFT."""
import cupy as cp
from common import digest, finish

saxpy = cp.RawKernel(r'''
extern "C" __global__ void saxpy(const float* x, const float* y, float a, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + y[i];
}''', "saxpy")
rs = cp.random.RandomState(7)
n = 1 << 20
x = rs.standard_normal(n, dtype=cp.float32)
y = rs.standard_normal(n, dtype=cp.float32)
out = cp.empty_like(x)
s1 = cp.cuda.Stream(non_blocking=True)
s2 = cp.cuda.Stream(non_blocking=True)
with s1:
    saxpy(((n + 255) // 256,), (256,), (x, y, cp.float32(2.5), out, cp.int32(n)))
    ev = s1.record()
s2.wait_event(ev)
with s2:
    a = rs.standard_normal((512, 512), dtype=cp.float32)
    m = a @ out[: 512 * 512].reshape(512, 512)
    f = cp.fft.rfft(out.reshape(1024, 1024), axis=1)
s2.synchronize()
finish({"saxpy": digest(out), "matmul": digest(m), "fft": digest(f)})
