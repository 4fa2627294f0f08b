// Does *who detects completion* change the cost of the next launch? In bind mode a tiny kernel's
// launch call into the driver took ~6 us (session 5 trace) against ~4.4 us for the whole first
// launch after a wait natively. Differences from a plain program: completion is detected by
// another thread polling a fence event (the dispatcher), the launching thread only spins on an
// atomic; and the process holds ~60 green contexts with streams (the pool). No interposer here:
// a launch-wait loop of one tiny kernel on a green-context stream (every SM, primary context
// current, as vitamin launches), per way of waiting:
//   sync_same      cudaStreamSynchronize on the launching thread (native)
//   poll_same      cuEventRecord after the kernel, the launching thread polls cuEventQuery
//   poll_other     cuEventRecord, a helper thread polls cuEventQuery and raises a flag; the
//                  launching thread spins on the flag (what vitamin does)
//   poll_other_bg  poll_other, and the helper queries another stream's event between waits
//                  (a dispatcher polling other lanes)
//   op_same        an operator: 8 launches then the event, all by the launching thread, which
//                  polls; only the first launch is timed
//   op_split       the operator's first launch by the launching thread (timed), the other 7
//                  and the event by the helper, which polls (vitamin: eager first launch,
//                  the rest continued by the dispatcher / submission thread)
// Times: the launch call (launch_us), the event record (record_us), launch call to completion
// seen by the launching thread (iter_us). Argument 3: extra green contexts (2 streams each) to
// create first, like vitamin's pool. Rounds alternate the modes.
// Build: nvcc -O2 -arch=sm_90 launch_xthread.cu -lcuda -o launch_xthread
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "common.cuh"

using clk = std::chrono::steady_clock;

static double us_between(clk::time_point a, clk::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
}

int main(int argc, char** argv) {
    const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
    const int reps = argc > 2 ? std::atoi(argv[2]) : 2000;
    const int extra = argc > 3 ? std::atoi(argv[3]) : 0;
    const Primary pc = primary_current();
    const CUdevice dev = pc.dev;
    const CUcontext primary = pc.ctx;
    std::vector<GreenAll> pool;
    std::vector<CUstream> pool_streams;
    for (int i = 0; i < extra; i++) {
        pool.push_back(green_all(dev));
        CUstream s2;
        CK(cuGreenCtxStreamCreate(&s2, pool.back().ctx, CU_STREAM_NON_BLOCKING, 0));
        pool_streams.push_back(s2);
    }
    GreenAll g = green_all(dev);
    CUstream gs = g.stream, other;
    CK(cuGreenCtxStreamCreate(&other, g.ctx, CU_STREAM_NON_BLOCKING, 0));
    unsigned long long* c;
    RK(cudaMalloc(&c, 8));
    CUfunction f;
    RK(cudaGetFuncBySymbol(&f, (const void*)bump));
    CUevent ev, ev_other;
    CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CK(cuEventCreate(&ev_other, CU_EVENT_DISABLE_TIMING));
    CK(cuEventRecord(ev_other, other));

    // The helper: polls `ev` when asked (request > done), then raises done.
    std::atomic<int> request{0}, done{0}, background{0}, follow{0};
    std::atomic<bool> stop{false};
    std::thread helper([&] {
        CK(cuCtxSetCurrent(primary));
        int seen = 0;
        while (!stop.load(std::memory_order_acquire)) {
            int want = request.load(std::memory_order_acquire);
            if (want == seen) {
                if (background.load(std::memory_order_relaxed)) cuEventQuery(ev_other);
                continue;
            }
            if (follow.load(std::memory_order_acquire)) {
                void* args[] = {&c};
                for (int k = 0; k < 7; k++) CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, gs, args, nullptr));
                CK(cuEventRecord(ev, gs));
            }
            while (cuEventQuery(ev) == CUDA_ERROR_NOT_READY) {
            }
            seen = want;
            done.store(want, std::memory_order_release);
        }
    });

    const char* names[] = {"sync_same", "poll_same", "poll_other", "poll_other_bg", "op_same", "op_split"};
    for (int r = 1; r <= rounds; r++) {
        for (int m = 0; m < 6; m++) {
            background.store(m == 3 ? 1 : 0);
            follow.store(m == 5 ? 1 : 0);
            std::vector<double> launch_us, record_us, iter_us;
            for (int i = 0; i < reps + 20; i++) {
                void* args[] = {&c};
                auto t0 = clk::now();
                CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, gs, args, nullptr));
                auto t1 = clk::now();
                if (m == 4)
                    for (int k = 0; k < 7; k++) CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, gs, args, nullptr));
                if (m > 0 && m != 5) CK(cuEventRecord(ev, gs));
                auto t2 = clk::now();
                if (m == 0) {
                    RK(cudaStreamSynchronize((cudaStream_t)gs));
                } else if (m == 1 || m == 4) {
                    while (cuEventQuery(ev) == CUDA_ERROR_NOT_READY) {
                    }
                } else {
                    int want = request.load() + 1;
                    request.store(want, std::memory_order_release);
                    while (done.load(std::memory_order_acquire) != want) {
                    }
                }
                auto t3 = clk::now();
                if (i >= 20) {
                    launch_us.push_back(us_between(t0, t1));
                    record_us.push_back(us_between(t1, t2));
                    iter_us.push_back(us_between(t0, t3));
                }
            }
            std::printf("{\"round\": %d, \"extra_green_contexts\": %d, \"mode\": \"%s\", \"launch_p50_us\": %.2f, "
                        "\"launch_p95_us\": %.2f, \"record_p50_us\": %.2f, \"iter_p50_us\": %.2f, \"iter_p95_us\": %.2f}\n",
                        r, extra, names[m], pct(launch_us, 0.5), pct(launch_us, 0.95), pct(record_us, 0.5),
                        pct(iter_us, 0.5), pct(iter_us, 0.95));
            std::fflush(stdout);
        }
    }
    stop.store(true);
    helper.join();
    return 0;
}
