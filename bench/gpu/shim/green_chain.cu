// Does a green context itself cost anything per kernel? The same three workloads as chain_bench.cu
// (10,000 dependent tiny kernels; one tiny kernel + sync; an 8-kernel operator + sync), run with
// no interposer on (a) a non-blocking stream of the primary context and (b) a stream of a green
// context built over every SM of the device (what vitamin's root pool node is), alternating
// ROUNDS times. Also the host cost of issuing one empty-kernel launch on each (cuLaunchKernel and
// cuLaunchKernelEx). Output: one JSON object per measurement.
// Build: nvcc -O2 -arch=sm_90 green_chain.cu -lcuda -o green_chain
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common.cuh"

using clk = std::chrono::steady_clock;

__global__ void empty() {}


static void run(const char* name, cudaStream_t s, int round, unsigned long long* c, float* a, float* b, int n) {
    for (int i = 0; i < 100; i++) bump<<<1, 32, 0, s>>>(c);
    RK(cudaStreamSynchronize(s));
    std::vector<double> ms;
    for (int r = 0; r < 5; r++) {
        auto t0 = clk::now();
        for (int i = 0; i < n; i++) bump<<<1, 32, 0, s>>>(c);
        RK(cudaStreamSynchronize(s));
        ms.push_back(std::chrono::duration<double, std::milli>(clk::now() - t0).count());
    }
    std::printf("{\"ctx\": \"%s\", \"round\": %d, \"test\": \"chain\", \"kernels\": %d, \"median_ms\": %.3f, \"min_ms\": %.3f}\n",
                name, round, n, pct(ms, 0.5), pct(ms, 0.0));
    std::vector<double> us;
    for (int i = 0; i < 2000; i++) {
        auto t0 = clk::now();
        bump<<<1, 32, 0, s>>>(c);
        RK(cudaStreamSynchronize(s));
        us.push_back(std::chrono::duration<double, std::micro>(clk::now() - t0).count());
    }
    std::printf("{\"ctx\": \"%s\", \"round\": %d, \"test\": \"small_op\", \"p50_us\": %.2f, \"p95_us\": %.2f}\n", name, round,
                pct(us, 0.5), pct(us, 0.95));
    std::vector<double> op;
    for (int r = 0; r < 310; r++) {
        auto t0 = clk::now();
        for (int l = 0; l < 8; l++) {
            if (l % 2 == 0) layer<<<528, 256, 0, s>>>(a, b, 2000);
            else layer<<<528, 256, 0, s>>>(b, a, 2000);
        }
        RK(cudaStreamSynchronize(s));
        if (r >= 10) op.push_back(std::chrono::duration<double, std::micro>(clk::now() - t0).count());
    }
    std::printf("{\"ctx\": \"%s\", \"round\": %d, \"test\": \"operator\", \"p50_us\": %.2f, \"p95_us\": %.2f}\n", name, round,
                pct(op, 0.5), pct(op, 0.95));
    // Host cost of issuing: batches of 256 empty launches, timed issue loop only.
    CUfunction f;
    RK(cudaGetFuncBySymbol(&f, (const void*)empty));
    std::vector<double> plain, ex;
    CUlaunchConfig cfg = {};
    cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = 32;
    cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.hStream = (CUstream)s;
    for (int r = 0; r < 100; r++) {
        auto t0 = clk::now();
        for (int i = 0; i < 256; i++) CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, (CUstream)s, nullptr, nullptr));
        plain.push_back(std::chrono::duration<double, std::nano>(clk::now() - t0).count() / 256);
        RK(cudaStreamSynchronize(s));
        t0 = clk::now();
        for (int i = 0; i < 256; i++) CK(cuLaunchKernelEx(&cfg, f, nullptr, nullptr));
        ex.push_back(std::chrono::duration<double, std::nano>(clk::now() - t0).count() / 256);
        RK(cudaStreamSynchronize(s));
    }
    std::printf("{\"ctx\": \"%s\", \"round\": %d, \"test\": \"issue_ns\", \"cuLaunchKernel_p50\": %.0f, \"cuLaunchKernelEx_p50\": %.0f}\n",
                name, round, pct(plain, 0.5), pct(ex, 0.5));
}

int main(int argc, char** argv) {
    const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
    const int n = argc > 2 ? std::atoi(argv[2]) : 10000;
    RK(cudaFree(0));
    CUdevice dev;
    CK(cuCtxGetDevice(&dev));
    CUstream gs = green_all(dev).stream;
    cudaStream_t ps;
    RK(cudaStreamCreateWithFlags(&ps, cudaStreamNonBlocking));
    const Buffers m = operator_buffers();
    unsigned long long* c = m.c;
    float *a = m.a, *b = m.b;
    for (int r = 1; r <= rounds; r++) {
        run("primary", ps, r, c, a, b, n);
        run("green_all", (cudaStream_t)gs, r, c, a, b, n);
    }
    return 0;
}
