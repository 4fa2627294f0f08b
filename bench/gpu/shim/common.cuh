// Pieces shared by the benchmark programs (chain_bench.cu, op_gaps.cu, op_phases.cu, green_chain.cu,
// launch_paths.cu, memfence_probe.cu, launch_idle.cu, launch_xthread.cu): their kernels, a percentile helper, the
// primary context and a green context over every SM with one stream (vitamin's whole-device pool
// node under VITAMIN_ROOT_CONTEXT=green). Error checks: check.cuh.
#pragma once
#include <algorithm>
#include <vector>

#include "check.cuh"

// Adds 1 to a counter (a tiny kernel; a chain of them is dependent).
__global__ void bump(unsigned long long* c) {
    if (threadIdx.x == 0) c[0] += 1;
}

// One layer of the 8-kernel operator: a fixed FMA loop per element (528 x 256 threads: ~50 us
// on the whole H200).
__global__ void layer(const float* x, float* y, int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = x[i];
    for (int k = 0; k < iters; k++) v = fmaf(v, 0.999f, 0.001f * (float)(k & 7));
    y[i] = v;
}

// The GPU's nanosecond clock (%globaltimer).
__device__ __forceinline__ unsigned long long gtimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// `layer` that also stamps its earliest block start (ts[0], atomicMin) and latest block end
// (ts[1], atomicMax): the operator's GPU span and inter-kernel gaps (chain_bench.cu, op_gaps.cu).
__global__ void layer_ts(const float* x, float* y, int iters, unsigned long long* ts) {
    unsigned long long t0 = gtimer();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = x[i];
    for (int k = 0; k < iters; k++) v = fmaf(v, 0.999f, 0.001f * (float)(k & 7));
    y[i] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        atomicMin(&ts[0], t0);
        atomicMax(&ts[1], gtimer());
    }
}

// The device buffers of the chain and the operator: a counter for `bump` and the operator's two
// activations (528 x 256 floats each, the first zeroed).
struct Buffers {
    unsigned long long* c;
    float* a;
    float* b;
};
static inline Buffers operator_buffers() {
    const size_t bytes = 528 * 256 * sizeof(float);
    Buffers m;
    RK(cudaMalloc(&m.c, sizeof(*m.c)));
    RK(cudaMalloc(&m.a, bytes));
    RK(cudaMalloc(&m.b, bytes));
    RK(cudaMemset(m.a, 0, bytes));
    return m;
}

// The `f` quantile (0..1) of `v`.
static inline double pct(std::vector<double> v, double f) {
    std::sort(v.begin(), v.end());
    return v[(size_t)(f * (v.size() - 1))];
}

// The CUDA runtime's primary context, made current by the runtime (cudaFree(0)), and its device.
struct Primary {
    CUcontext ctx;
    CUdevice dev;
};
static inline Primary primary_current() {
    RK(cudaFree(0));
    Primary p;
    CK(cuCtxGetCurrent(&p.ctx));
    CK(cuCtxGetDevice(&p.dev));
    return p;
}

// A green context over every SM of `dev` and one non-blocking stream in it.
struct GreenAll {
    CUgreenCtx ctx;
    CUstream stream;
};
static inline GreenAll green_all(CUdevice dev) {
    CUdevResource sms;
    CK(cuDeviceGetDevResource(dev, &sms, CU_DEV_RESOURCE_TYPE_SM));
    CUdevResourceDesc desc;
    CK(cuDevResourceGenerateDesc(&desc, &sms, 1));
    GreenAll g;
    CK(cuGreenCtxCreate(&g.ctx, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    CK(cuGreenCtxStreamCreate(&g.stream, g.ctx, CU_STREAM_NON_BLOCKING, 0));
    return g;
}
