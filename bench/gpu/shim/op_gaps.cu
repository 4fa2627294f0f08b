// Where the operator's GPU gaps and host share come from, without the interposer: chain_bench.cu's
// operator (8 dependent ~50 us kernels that stamp %globaltimer, after a synchronous H2D copy, then
// a stream synchronize) launched with cuLaunchKernel by the main thread in several placements:
//   primary          a non-blocking stream of the primary context (what the native program uses)
//   green_all        a stream of a green context over every SM (vitamin's root pool node)
//   green_fence1     green_all + an event recorded after kernel 1 (launch-first's fence)
//   green_fence_all  green_all + an event recorded after every kernel
//   primary_fence1   primary + an event recorded after kernel 1
//   green_ev_sync    green_fence1, but waiting by polling an event recorded after kernel 8
//                    (cuEventQuery in a loop: how vitamin's waiter sees completion)
//   primary_split    primary, kernel 1 launched by the main thread and kernels 2-8 by a spinning
//                    helper thread (as vitamin's dispatcher continues them)
// Per mode and round: host latency p50 / p95 (first launch to synchronize return), the first
// launch call p50, and the medians of the GPU span, the gaps between kernels and the host share
// (total - span). Rounds interleave the modes. Output: one JSON line per mode and round.
// Build: nvcc -O2 -arch=sm_90 op_gaps.cu -lcuda -o op_gaps; run: op_gaps [rounds] [reps]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <cstdlib>
#include <vector>

#include "common.cuh"

using clk = std::chrono::steady_clock;

int main(int argc, char** argv) {
    const int rounds = argc > 1 ? std::atoi(argv[1]) : 4;
    const int reps = argc > 2 ? std::atoi(argv[2]) : 200;
    const int layers = 8, blocks = 528, threads = 256, iters = 2000, elems = blocks * threads;
    const Primary pc = primary_current();
    CUstream prim;
    CK(cuStreamCreate(&prim, CU_STREAM_NON_BLOCKING));
    const GreenAll gall = green_all(pc.dev);
    CUfunction f;
    RK(cudaGetFuncBySymbol(&f, (const void*)layer_ts));
    CUevent ev, last;
    CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CK(cuEventCreate(&last, CU_EVENT_DISABLE_TIMING));
    std::vector<float> h(elems);
    for (int i = 0; i < elems; i++) h[i] = (float)(i % 1000) / 1000.0f;
    float *a, *b;
    unsigned long long* ts;
    RK(cudaMalloc(&a, elems * sizeof(float)));
    RK(cudaMalloc(&b, elems * sizeof(float)));
    RK(cudaMalloc(&ts, 2 * layers * sizeof(*ts)));
    std::vector<unsigned long long> ts_init(2 * layers), ts_h(2 * layers);
    for (int l = 0; l < layers; l++) ts_init[2 * l] = ~0ull, ts_init[2 * l + 1] = 0;

    const char* names[] = {"primary",        "green_all",     "green_fence1", "green_fence_all",
                           "primary_fence1", "green_ev_sync", "primary_split"};
    const int modes = 7;
    auto launch_layer = [&](int l, CUstream s) {
        float* x = l % 2 == 0 ? a : b;
        float* y = l % 2 == 0 ? b : a;
        unsigned long long* t = ts + 2 * l;
        int it = iters;
        void* params[] = {&x, &y, &it, &t};
        CK(cuLaunchKernel(f, blocks, 1, 1, threads, 1, 1, 0, s, params, nullptr));
    };
    // primary_split's helper: launches kernels 2-8 on `prim` when `go` is raised, then lowers it.
    std::atomic<int> go{0};
    std::atomic<bool> quit{false};
    std::thread helper([&] {
        CK(cuCtxSetCurrent(pc.ctx));
        while (!quit.load(std::memory_order_acquire)) {
            if (go.load(std::memory_order_acquire) == 0) {
                __builtin_ia32_pause();
                continue;
            }
            for (int l = 1; l < layers; l++) launch_layer(l, prim);
            go.store(0, std::memory_order_release);
        }
    });
    auto us = [](clk::time_point x, clk::time_point y) { return std::chrono::duration<double, std::micro>(y - x).count(); };
    for (int r = 1; r <= rounds; r++) {
        for (int m = 0; m < modes; m++) {
            const bool split = m == 6;
            const CUstream s = (m == 0 || m == 4 || split) ? prim : gall.stream;
            const bool fence1 = m == 2 || m == 4 || m == 5, fence_all = m == 3, ev_sync = m == 5;
            std::vector<double> total, first, span, gaps, host;
            for (int k = 0; k < reps + 10; k++) {
                RK(cudaMemcpy(ts, ts_init.data(), ts_init.size() * sizeof(*ts), cudaMemcpyHostToDevice));
                RK(cudaMemcpy(a, h.data(), elems * sizeof(float), cudaMemcpyHostToDevice));
                auto t0 = clk::now();
                clk::time_point t1;
                for (int l = 0; l < (split ? 1 : layers); l++) {
                    launch_layer(l, s);
                    if (l == 0) t1 = clk::now();
                    if ((l == 0 && fence1) || fence_all) CK(cuEventRecord(ev, s));
                }
                if (split) {
                    go.store(1, std::memory_order_release);
                    while (go.load(std::memory_order_acquire) != 0) __builtin_ia32_pause();
                }
                if (ev_sync) {
                    CK(cuEventRecord(last, s));
                    while (cuEventQuery(last) == CUDA_ERROR_NOT_READY) __builtin_ia32_pause();
                } else {
                    CK(cuStreamSynchronize(s));
                }
                auto t3 = clk::now();
                RK(cudaMemcpy(ts_h.data(), ts, ts_h.size() * sizeof(*ts), cudaMemcpyDeviceToHost));
                if (k < 10) continue;
                double tot = us(t0, t3), sp = (double)(ts_h[2 * layers - 1] - ts_h[0]) / 1000.0, g = 0;
                for (int l = 1; l < layers; l++) g += ((double)ts_h[2 * l] - (double)ts_h[2 * l - 1]) / 1000.0;
                total.push_back(tot), first.push_back(us(t0, t1)), span.push_back(sp), gaps.push_back(g);
                host.push_back(tot - sp);
            }
            std::printf("{\"mode\": \"%s\", \"round\": %d, \"reps\": %d, \"p50_us\": %.2f, \"p95_us\": %.2f, "
                        "\"first_launch_p50_us\": %.2f, \"span_p50_us\": %.2f, \"gaps_p50_us\": %.2f, \"host_p50_us\": %.2f}\n",
                        names[m], r, reps, pct(total, 0.5), pct(total, 0.95), pct(first, 0.5), pct(span, 0.5),
                        pct(gaps, 0.5), pct(host, 0.5));
            std::fflush(stdout);
        }
    }
    quit.store(true, std::memory_order_release);
    helper.join();
    return 0;
}
