// Does the way an operator's completion is awaited change what the *next* launch costs the host?
// No interposer. An operator is chain_bench.cu's 8 `layer` kernels on one stream; after it, one of
// four tails, rotated per operator so drift hits every tail alike:
//   sync       cuStreamSynchronize (what a native application does)
//   word       cuStreamWriteValue64 of the operator's number into pinned, device-mapped host
//              memory, then a host spin on that word (vitamin's fast wait)
//   word_sync  the same write, then cuStreamSynchronize (the write without the spin)
//   event      cuEventRecord, then a cuEventQuery spin (vitamin's fallback wait)
// Timed per operator: the next operator's first cuLaunchKernel call, its second one, and the
// operator's latency (first launch to the end of the wait). Streams: a primary-context stream and a
// stream of a green context over every SM (vitamin's whole-device node either way). Output: one JSON
// object per stream and tail (p50/p95/p99/max, us) and a checksum line.
// Build: nvcc -O2 -arch=sm_90 launch_after.cu -lcuda -o launch_after
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common.cuh"

using clk = std::chrono::steady_clock;

static double us(clk::time_point a, clk::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
}

enum Tail { SYNC, WORD, WORD_SYNC, EVENT, NTAILS };
static const char* NAMES[NTAILS] = {"sync", "word", "word_sync", "event"};

struct Series {
    std::vector<double> first, second, op;
};

int main(int argc, char** argv) {
    const int ops = argc > 1 ? std::atoi(argv[1]) : 4000;  // per stream, all tails together
    const int iters = argc > 2 ? std::atoi(argv[2]) : 2000;
    const Primary pc = primary_current();
    Buffers m = operator_buffers();
    CUfunction f;
    RK(cudaGetFuncBySymbol(&f, (const void*)layer));
    cudaStream_t ps;
    RK(cudaStreamCreateWithFlags(&ps, cudaStreamNonBlocking));
    GreenAll g = green_all(pc.dev);
    CK(cuCtxSetCurrent(pc.ctx));
    CUevent ev;
    CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    // The fence word: pinned, device-mapped host memory, as vitamin allocates it.
    void* hp = nullptr;
    CK(cuMemHostAlloc(&hp, 64, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    CUdeviceptr dword;
    CK(cuMemHostGetDevicePointer(&dword, hp, 0));
    auto* word = static_cast<volatile unsigned long long*>(hp);
    *word = 0;

    struct Stream {
        const char* name;
        CUstream s;
    } streams[] = {{"primary", (CUstream)ps}, {"green_all", g.stream}};
    unsigned long long seq = 0;
    for (auto& st : streams) {
        Series series[NTAILS];
        float* a = m.a;
        float* b = m.b;
        for (int i = 0; i < ops + 40; i++) {
            const Tail tail = (Tail)(i % NTAILS);
            clk::time_point t[4];
            for (int l = 0; l < 8; l++) {
                float* x = l % 2 == 0 ? a : b;
                float* y = l % 2 == 0 ? b : a;
                int it = iters;
                void* args[] = {&x, &y, &it};
                if (l == 0) t[0] = clk::now();
                CK(cuLaunchKernel(f, 528, 1, 1, 256, 1, 1, 0, st.s, args, nullptr));
                if (l == 0) t[1] = clk::now();
                if (l == 1) t[2] = clk::now();
            }
            switch (tail) {
                case SYNC:
                    CK(cuStreamSynchronize(st.s));
                    break;
                case WORD:
                    CK(cuStreamWriteValue64(st.s, dword, ++seq, CU_STREAM_WRITE_VALUE_DEFAULT));
                    while (*word < seq) std::atomic_signal_fence(std::memory_order_seq_cst);
                    break;
                case WORD_SYNC:
                    CK(cuStreamWriteValue64(st.s, dword, ++seq, CU_STREAM_WRITE_VALUE_DEFAULT));
                    CK(cuStreamSynchronize(st.s));
                    break;
                case EVENT:
                    CK(cuEventRecord(ev, st.s));
                    while (cuEventQuery(ev) == CUDA_ERROR_NOT_READY) {
                    }
                    break;
                default:
                    break;
            }
            t[3] = clk::now();
            // The operator's first launch follows the *previous* operator's tail.
            if (i >= 40) {
                Series& p = series[(i + NTAILS - 1) % NTAILS];
                p.first.push_back(us(t[0], t[1]));
                p.second.push_back(us(t[1], t[2]));
                series[tail].op.push_back(us(t[0], t[3]));
            }
        }
        for (int k = 0; k < NTAILS; k++) {
            const Series& s = series[k];
            std::printf(
                "{\"stream\": \"%s\", \"tail\": \"%s\", \"n\": %zu, \"next_first_launch_us\": [%.2f, %.2f, %.2f, %.2f], "
                "\"next_second_launch_us\": [%.2f, %.2f, %.2f, %.2f], \"op_us\": [%.1f, %.2f, %.2f, %.1f]}\n",
                st.name, NAMES[k], s.first.size(), pct(s.first, 0.5), pct(s.first, 0.95), pct(s.first, 0.99),
                pct(s.first, 1.0), pct(s.second, 0.5), pct(s.second, 0.95), pct(s.second, 0.99), pct(s.second, 1.0),
                pct(s.op, 0.5), pct(s.op, 0.95), pct(s.op, 0.99), pct(s.op, 1.0));
        }
    }
    std::printf("{\"fields\": \"p50, p95, p99, max\", \"word\": %llu, \"writes\": %llu}\n", *word, seq);
    return *word == seq ? 0 : 2;
}
