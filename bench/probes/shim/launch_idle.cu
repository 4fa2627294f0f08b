// Host cost of the *first* launch after the application waited (a launch-sync loop: one tiny
// kernel, then a spinning cudaStreamSynchronize), per launch path, no interposer: only the launch
// call is timed. Paths: the runtime's <<<>>> and cuLaunchKernel (its CUfunction) on a primary-
// context stream; cuLaunchKernel on a green-context stream (every SM) with the primary context
// current (what vitamin does) and with the green context current (cuCtxFromGreenCtx); <<<>>> on
// the green-context stream; cuLaunchKernel with the runtime's CUkernel handle (cudaGetKernel) on the
// green-context stream (the driver resolves it for the stream's context). Rounds alternate the paths. Output: one JSON object per path and round
// (median and p95 of the launch call, us).
// Build: nvcc -O2 -arch=sm_90 launch_idle.cu -lcuda -o launch_idle
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common.cuh"

using clk = std::chrono::steady_clock;



int main(int argc, char** argv) {
    const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
    const int reps = argc > 2 ? std::atoi(argv[2]) : 2000;
    const Primary pc = primary_current();
    const CUdevice dev = pc.dev;
    const CUcontext primary = pc.ctx;
    GreenAll g = green_all(dev);
    CUcontext gctx;
    CK(cuCtxFromGreenCtx(&gctx, g.ctx));
    CUstream gs = g.stream;
    cudaStream_t ps;
    RK(cudaStreamCreateWithFlags(&ps, cudaStreamNonBlocking));
    unsigned long long* c;
    RK(cudaMalloc(&c, 8));
    CUfunction f;
    RK(cudaGetFuncBySymbol(&f, (const void*)bump));
    cudaKernel_t rk;
    RK(cudaGetKernel(&rk, (const void*)bump));
    const char* names[] = {"runtime_primary", "driver_primary", "driver_green_primary_current",
                           "driver_green_green_current", "runtime_green", "driver_green_cukernel"};
    for (int r = 1; r <= rounds; r++) {
        for (int p = 0; p < 6; p++) {
            std::vector<double> us;
            CUstream s = (p <= 1) ? (CUstream)ps : gs;
            for (int i = 0; i < reps + 20; i++) {
                void* args[] = {&c};
                if (p == 3) CK(cuCtxSetCurrent(gctx));
                auto t0 = clk::now();
                switch (p) {
                case 0: bump<<<1, 32, 0, ps>>>(c); break;
                case 4: bump<<<1, 32, 0, (cudaStream_t)gs>>>(c); break;
                case 5: CK(cuLaunchKernel((CUfunction)rk, 1, 1, 1, 32, 1, 1, 0, gs, args, nullptr)); break;
                default: CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, args, nullptr)); break;
                }
                auto t1 = clk::now();
                if (p == 3) CK(cuCtxSetCurrent(primary));
                RK(cudaStreamSynchronize((cudaStream_t)s));
                if (i >= 20) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
            }
            std::printf("{\"round\": %d, \"path\": \"%s\", \"launch_p50_us\": %.2f, \"launch_p95_us\": %.2f}\n", r, names[p],
                        pct(us, 0.5), pct(us, 0.95));
        }
    }
    return 0;
}
