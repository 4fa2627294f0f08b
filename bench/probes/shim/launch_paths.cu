// What one kernel launch costs the host on each path vitamin's dispatcher could take, without any
// interposer: the runtime's <<<>>> and cuLaunchKernel with the runtime's CUfunction or CUkernel
// handle, on a stream of the primary context and on a stream of a green context over every SM,
// from the main thread and from a second thread while the main thread spins (as an application
// thread waits in a synchronize call under bind mode). Each figure: median over 60 batches of 256
// dependent launches (each kernel adds 1 to a counter), ns per launch, issue loop only; the counter
// is checked at the end. Output: one JSON object per path.
// Build: nvcc -O2 -arch=sm_90 launch_paths.cu -lcuda -o launch_paths
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "common.cuh"

using clk = std::chrono::steady_clock;


static unsigned long long expected = 0;

enum Via { RUNTIME, FUNCTION, KERNEL };

// 60 batches of 256 launches on `s` via `via`; returns the median ns per launch.
static double batches(Via via, cudaStream_t s, CUfunction f, CUkernel k, unsigned long long* c) {
    void* args[] = {&c};
    std::vector<double> ns;
    for (int b = 0; b < 60; b++) {
        auto t0 = clk::now();
        for (int i = 0; i < 256; i++) {
            if (via == RUNTIME) bump<<<1, 32, 0, s>>>(c);
            else if (via == FUNCTION) CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, (CUstream)s, args, nullptr));
            else CK(cuLaunchKernel((CUfunction)k, 1, 1, 1, 32, 1, 1, 0, (CUstream)s, args, nullptr));
        }
        ns.push_back(std::chrono::duration<double, std::nano>(clk::now() - t0).count() / 256);
        RK(cudaStreamSynchronize(s));
        expected += 256;
    }
    std::sort(ns.begin(), ns.end());
    return ns[ns.size() / 2];
}

int main() {
    const Primary pc = primary_current();
    const CUdevice dev = pc.dev;
    const CUcontext primary = pc.ctx;
    unsigned long long* c;
    RK(cudaMalloc(&c, sizeof(*c)));
    RK(cudaMemset(c, 0, sizeof(*c)));
    CUfunction f;
    RK(cudaGetFuncBySymbol(&f, (const void*)bump));
    cudaKernel_t rk;
    RK(cudaGetKernel(&rk, (const void*)bump));
    CUkernel k = (CUkernel)rk;

    cudaStream_t ps;
    RK(cudaStreamCreateWithFlags(&ps, cudaStreamNonBlocking));
    // A green context over every SM (vitamin's root node).
    CUstream gs = green_all(dev).stream;
    CK(cuCtxSetCurrent(primary));

    struct Path {
        const char* name;
        Via via;
        cudaStream_t s;
    } paths[] = {
        {"primary_runtime", RUNTIME, ps}, {"primary_cuLaunchKernel_function", FUNCTION, ps},
        {"primary_cuLaunchKernel_kernel", KERNEL, ps}, {"green_runtime", RUNTIME, (cudaStream_t)gs},
        {"green_cuLaunchKernel_function", FUNCTION, (cudaStream_t)gs}, {"green_cuLaunchKernel_kernel", KERNEL, (cudaStream_t)gs},
    };
    for (int round = 0; round < 2; round++) {
        for (auto& p : paths) {
            double main_ns = batches(p.via, p.s, f, k, c);
            // The same from a second thread while this one spins (yielding) on an atomic.
            std::atomic<bool> done{false};
            double other_ns = 0;
            std::thread t([&] {
                CK(cuCtxSetCurrent(primary));
                other_ns = batches(p.via, p.s, f, k, c);
                done.store(true);
            });
            while (!done.load()) std::this_thread::yield();
            t.join();
            std::printf("{\"round\": %d, \"path\": \"%s\", \"main_thread_ns\": %.0f, \"second_thread_ns\": %.0f}\n", round,
                        p.name, main_ns, other_ns);
        }
    }
    unsigned long long got = 0;
    RK(cudaMemcpy(&got, c, sizeof(got), cudaMemcpyDeviceToHost));
    std::printf("{\"counter_ok\": %s}\n", got == expected ? "true" : "false");
    return got == expected ? 0 : 2;
}
