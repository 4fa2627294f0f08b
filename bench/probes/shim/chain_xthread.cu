// Why does bind mode's 10,000-kernel chain run slower than native? In bind mode the application
// thread records each launch (copying its arguments into a heap descriptor) and returns; the
// dispatcher thread continues the op on a lane of an 8-SM green context (Throughput's plan for a
// one-block kernel) and hands it to the submission thread, which calls cuLaunchKernel with
// pointers into the descriptor and drops it. That thread's launches measured 4.2-4.5 us each
// against 3.4-3.6 natively (docs/results/shim-bind-overhead.md, session 5). No interposer here:
// the same chain (a tiny kernel adding 1 to a counter, one stream), per way of launching it:
//   self_primary     the main thread launches on a primary-context stream (the native program)
//   self_green_all   the main thread launches on a green-context stream over every SM
//   self_green8      the main thread launches on an 8-SM green-context stream
//   self_green8_spin self_green8 beside a thread spinning with pause + sched_yield (a dispatcher)
//   handoff          the main thread pushes heap descriptors (argument bytes copied) into a
//                    single-producer queue; a consumer thread launches each with pointers into
//                    it and frees it, and records an event after every 64th (what the
//                    submission thread does); 8-SM green stream
//   handoff_spin     handoff beside a spinning thread (the dispatcher's idle spin)
//   handoff_query    handoff beside a thread querying an event of the lane every 20 us
//   handoff_poll     handoff; the main thread, once done pushing, polls an event of the lane in a
//                    tight loop until the chain is done (a waiting thread's assist)
// Each chain's time runs from the first push or launch to the end of a stream synchronize; the
// counter is checked after every chain. Rounds alternate the modes.
// Build: nvcc -O2 -arch=sm_90 chain_xthread.cu -lcuda -o chain_xthread
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "common.cuh"

using clk = std::chrono::steady_clock;

// A recorded launch: its argument bytes and the pointer array into them (as an OpDesc holds).
struct Desc {
    unsigned char bytes[8];
    void* params[1];
};

// A bounded single-producer single-consumer ring of descriptors.
struct Ring {
    static constexpr size_t N = 1 << 14;
    Desc* slots[N];
    alignas(64) std::atomic<size_t> head{0};  // next to pop (consumer)
    alignas(64) std::atomic<size_t> tail{0};  // next to push (producer)
    void push(Desc* d) {
        size_t t = tail.load(std::memory_order_relaxed);
        while (t - head.load(std::memory_order_acquire) >= N) {
        }
        slots[t % N] = d;
        tail.store(t + 1, std::memory_order_release);
    }
    Desc* pop() {
        size_t h = head.load(std::memory_order_relaxed);
        if (h == tail.load(std::memory_order_acquire)) return nullptr;
        Desc* d = slots[h % N];
        head.store(h + 1, std::memory_order_release);
        return d;
    }
};

static CUstream green_stream(CUdevice dev, unsigned sms) {
    CUdevResource all, rem;
    CK(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
    CUdevResource group;
    unsigned n = 1;
    CK(cuDevSmResourceSplitByCount(&group, &n, &all, &rem, 0, sms));
    CUdevResourceDesc desc;
    CK(cuDevResourceGenerateDesc(&desc, &group, 1));
    CUgreenCtx g;
    CK(cuGreenCtxCreate(&g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    CUstream s;
    CK(cuGreenCtxStreamCreate(&s, g, CU_STREAM_NON_BLOCKING, 0));
    return s;
}

int main(int argc, char** argv) {
    const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
    const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
    const int n = argc > 3 ? std::atoi(argv[3]) : 10000;
    const Primary pc = primary_current();
    CUstream prim;
    CK(cuStreamCreate(&prim, CU_STREAM_NON_BLOCKING));
    const GreenAll gall = green_all(pc.dev);
    const CUstream g8 = green_stream(pc.dev, 8);
    unsigned long long* c;
    RK(cudaMalloc(&c, 8));
    CUfunction f;
    RK(cudaGetFuncBySymbol(&f, (const void*)bump));
    CUevent lane_ev;
    CK(cuEventCreate(&lane_ev, CU_EVENT_DISABLE_TIMING));

    static Ring ring;
    std::atomic<bool> stop{false};
    std::atomic<int> helper_mode{0};  // 0 idle, 1 spin (pause + yield), 2 query every 20 us
    std::atomic<size_t> launched{0};
    std::thread consumer([&] {
        CK(cuCtxSetCurrent(pc.ctx));
        while (!stop.load(std::memory_order_acquire)) {
            Desc* d = ring.pop();
            if (!d) {
                __builtin_ia32_pause();
                continue;
            }
            CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, g8, d->params, nullptr));
            delete d;
            // The lane's fence every 64 launches, as vitamin records them.
            if (launched.fetch_add(1, std::memory_order_release) % 64 == 63) CK(cuEventRecord(lane_ev, g8));
        }
    });
    std::thread helper([&] {
        CK(cuCtxSetCurrent(pc.ctx));
        auto last = clk::now();
        while (!stop.load(std::memory_order_acquire)) {
            int m = helper_mode.load(std::memory_order_relaxed);
            if (m == 0) {
                std::this_thread::sleep_for(std::chrono::microseconds(200));
            } else if (m == 1) {
                __builtin_ia32_pause();
                sched_yield();
            } else {
                __builtin_ia32_pause();
                auto now = clk::now();
                if (now - last >= std::chrono::microseconds(20)) {
                    cuEventQuery(lane_ev);
                    last = now;
                }
            }
        }
    });

    const char* names[] = {"self_primary", "self_green_all", "self_green8", "self_green8_spin",
                           "handoff",      "handoff_spin",   "handoff_query", "handoff_poll"};
    const int modes = 8;
    for (int r = 1; r <= rounds; r++) {
        for (int m = 0; m < modes; m++) {
            helper_mode.store(m == 3 || m == 5 ? 1 : m == 6 ? 2 : 0);
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
            CUstream s = m == 0 ? prim : m == 1 ? gall.stream : g8;
            std::vector<double> ms;
            bool ok = true;
            for (int rep = 0; rep < reps; rep++) {
                CK(cuMemsetD8Async((CUdeviceptr)c, 0, 8, s));
                CK(cuStreamSynchronize(s));
                launched.store(0);
                auto t0 = clk::now();
                if (m < 4) {
                    void* args[] = {&c};
                    for (int i = 0; i < n; i++) CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, args, nullptr));
                } else {
                    for (int i = 0; i < n; i++) {
                        Desc* d = new Desc;
                        std::memcpy(d->bytes, &c, sizeof(c));
                        d->params[0] = d->bytes;
                        ring.push(d);
                    }
                    if (m == 7) {
                        while (launched.load(std::memory_order_acquire) < (size_t)n) cuEventQuery(lane_ev);
                    } else {
                        while (launched.load(std::memory_order_acquire) < (size_t)n) __builtin_ia32_pause();
                    }
                }
                CK(cuStreamSynchronize(s));
                auto t1 = clk::now();
                ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
                unsigned long long got = 0;
                RK(cudaMemcpy(&got, c, 8, cudaMemcpyDeviceToHost));
                ok = ok && got == (unsigned long long)n;
            }
            std::printf("{\"round\": %d, \"mode\": \"%s\", \"kernels\": %d, \"median_ms\": %.3f, \"min_ms\": %.3f, "
                        "\"us_per_kernel\": %.3f, \"counter_ok\": %s}\n",
                        r, names[m], n, pct(ms, 0.5), pct(ms, 0.0), pct(ms, 0.5) * 1000.0 / n, ok ? "true" : "false");
            std::fflush(stdout);
        }
    }
    stop.store(true);
    consumer.join();
    helper.join();
    return 0;
}
