// Completion detection on a green-context stream (every SM), no interposer: how soon, and at what
// host cost, a host thread learns that work finished, by
//  (a) cudaStreamSynchronize (the native wait, spinning under the default schedule),
//  (b) cuEventRecord after the work + a loop of cuEventQuery (vitamin's event fences),
//  (c) cuStreamWriteValue64_v2 of a sequence number into host-mapped pinned memory after the work
//      + a loop reading that memory (a memory fence: no driver call to poll).
// Workloads: one tiny kernel; the 8-kernel operator of chain_bench.cu (528 x 256, ~50 us each).
// Also the host cost of each fence call and of one query. Every figure a median (p95) in us.
// Build: nvcc -O2 -arch=sm_90 memfence_probe.cu -lcuda -o memfence_probe
#include <atomic>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common.cuh"

using clk = std::chrono::steady_clock;


static double us(clk::time_point a, clk::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); }

int main(int argc, char** argv) {
    const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
    RK(cudaFree(0));
    CUdevice dev;
    CK(cuCtxGetDevice(&dev));
    int memops = -1;
    CK(cuDeviceGetAttribute(&memops, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev));
    CUstream s = green_all(dev).stream;
    volatile unsigned long long* slot;
    CK(cuMemHostAlloc((void**)&slot, 4096, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    CUdeviceptr dslot;
    CK(cuMemHostGetDevicePointer(&dslot, (void*)slot, 0));
    *slot = 0;
    CUevent ev;
    CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    const Buffers m = operator_buffers();
    unsigned long long* c = m.c;
    float *a = m.a, *b = m.b;
    std::printf("{\"test\": \"attributes\", \"can_use_64_bit_stream_mem_ops\": %d}\n", memops);
    unsigned long long seq = 0;
    auto work = [&](bool op) {
        if (!op) {
            bump<<<1, 32, 0, (cudaStream_t)s>>>(c);
            return;
        }
        for (int l = 0; l < 8; l++) {
            if (l % 2 == 0) layer<<<528, 256, 0, (cudaStream_t)s>>>(a, b, 2000);
            else layer<<<528, 256, 0, (cudaStream_t)s>>>(b, a, 2000);
        }
    };
    for (int r = 1; r <= rounds; r++) {
        for (int op = 0; op <= 1; op++) {
            const int reps = op ? 300 : 2000;
            std::vector<double> sync_t, ev_t, mem_t, rec_cost, write_cost, query_cost;
            for (int i = 0; i < reps + 10; i++) {
                // (a) native wait
                auto t0 = clk::now();
                work(op);
                RK(cudaStreamSynchronize((cudaStream_t)s));
                auto t1 = clk::now();
                // (b) event fence
                auto t2 = clk::now();
                work(op);
                auto t3 = clk::now();
                CK(cuEventRecord(ev, s));
                auto t4 = clk::now();
                int queries = 0;
                double qsum = 0;
                for (;;) {
                    auto q0 = clk::now();
                    CUresult rq = cuEventQuery(ev);
                    qsum += us(q0, clk::now());
                    queries++;
                    if (rq == CUDA_SUCCESS) break;
                    if (rq != CUDA_ERROR_NOT_READY) CK(rq);
                }
                auto t5 = clk::now();
                // (c) memory fence
                seq++;
                auto t6 = clk::now();
                work(op);
                auto t7 = clk::now();
                CK(cuStreamWriteValue64(s, dslot, seq, CU_STREAM_WRITE_VALUE_DEFAULT));
                auto t8 = clk::now();
                while (*slot < seq) std::atomic_thread_fence(std::memory_order_acquire);
                auto t9 = clk::now();
                if (i < 10) continue;
                sync_t.push_back(us(t0, t1));
                ev_t.push_back(us(t2, t5));
                mem_t.push_back(us(t6, t9));
                rec_cost.push_back(us(t3, t4));
                write_cost.push_back(us(t7, t8));
                query_cost.push_back(qsum / queries);
            }
            RK(cudaStreamSynchronize((cudaStream_t)s));
            std::printf("{\"round\": %d, \"work\": \"%s\", \"native_sync_p50\": %.2f, \"native_sync_p95\": %.2f, "
                        "\"event_fence_p50\": %.2f, \"event_fence_p95\": %.2f, \"memory_fence_p50\": %.2f, "
                        "\"memory_fence_p95\": %.2f, \"event_record_p50\": %.2f, \"write_value_p50\": %.2f, "
                        "\"event_query_p50\": %.2f}\n",
                        r, op ? "operator" : "tiny", pct(sync_t, 0.5), pct(sync_t, 0.95), pct(ev_t, 0.5), pct(ev_t, 0.95),
                        pct(mem_t, 0.5), pct(mem_t, 0.95), pct(rec_cost, 0.5), pct(write_cost, 0.5), pct(query_cost, 0.5));
        }
    }
    // A write after a failing kernel never lands; the stream reports the error instead.
    std::printf("{\"final_slot\": %llu, \"seq\": %llu}\n", (unsigned long long)*slot, seq);
    return 0;
}
