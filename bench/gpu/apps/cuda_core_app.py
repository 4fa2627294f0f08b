"""NVIDIA's cuda-core / cuda-bindings Python driver API: NVRTC-compiled kernel, two streams, an event."""
import numpy as np
try:
    from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch
except ImportError:
    from cuda.core.experimental import Device, LaunchConfig, Program, ProgramOptions, launch
from common import digest, finish

dev = Device()
dev.set_current()
code = r'''
extern "C" __global__ void tri(float* out, const float* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float v = in[i]; out[i] = v * v * 0.5f + __sinf(v); }
}
extern "C" __global__ void reduce(const float* in, float* out, int n) {
    __shared__ float s[256];
    float acc = 0.f;
    for (int i = blockIdx.x * 256 + threadIdx.x; i < n; i += gridDim.x * 256) acc += in[i];
    s[threadIdx.x] = acc; __syncthreads();
    for (int w = 128; w > 0; w >>= 1) { if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w]; __syncthreads(); }
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}'''
prog = Program(code, code_type="c++", options=ProgramOptions(arch=f"sm_{dev.arch}"))
mod = prog.compile("cubin", name_expressions=("tri", "reduce"))
tri, red = mod.get_kernel("tri"), mod.get_kernel("reduce")
n = 1 << 20
s1, s2 = dev.create_stream(), dev.create_stream()
host_in = np.random.default_rng(8).standard_normal(n).astype(np.float32)
buf_in = dev.memory_resource.allocate(n * 4, stream=s1)
buf_mid = dev.memory_resource.allocate(n * 4, stream=s1)
buf_out = dev.memory_resource.allocate(240 * 4, stream=s1)
import cuda.bindings.driver as drv


def check(r):
    err = r[0] if isinstance(r, tuple) else r
    assert int(err) == 0, f"driver error {err}"


def cu_stream(s):
    return drv.CUstream(int(s.handle))


check(drv.cuMemcpyHtoDAsync(drv.CUdeviceptr(int(buf_in.handle)), host_in.ctypes.data, n * 4, cu_stream(s1)))
launch(s1, LaunchConfig(grid=(n + 255) // 256, block=256), tri, buf_mid, buf_in, np.int32(n))
ev = s1.record()
s2.wait(ev)
launch(s2, LaunchConfig(grid=240, block=256), red, buf_mid, buf_out, np.int32(n))
res = np.empty(240, dtype=np.float32)
check(drv.cuMemcpyDtoHAsync(res.ctypes.data, drv.CUdeviceptr(int(buf_out.handle)), 240 * 4, cu_stream(s2)))
s2.sync()
finish({"partials": digest(res)})
