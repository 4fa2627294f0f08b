// Where the operator's host share goes, natively and under the interposer: chain_bench.cu's
// 8-kernel operator (runtime API, one non-blocking stream, after a synchronous H2D copy, then
// cudaStreamSynchronize), with kernel 1's first block writing a start flag and kernel 8's last
// block an end flag into pinned, device-mapped host memory, and a helper thread spinning on both
// flags with the host clock. Splits each repetition into
//   pre   the first launch call's entry -> kernel 1 seen started (includes the flag's PCIe write)
//   gpu   kernel 1 seen started -> kernel 8 seen ended
//   post  kernel 8 seen ended -> cudaStreamSynchronize returned
// The flag writes' latency is the same natively and under bind mode, so differences between the
// two are vitamin's: before the first kernel starts, between kernels, and after the last ends.
// Output: one JSON line with p50 / p95 of total, pre, gpu, post and of the first launch call.
// Build: nvcc -O2 -arch=sm_90 op_phases.cu -o op_phases; run: op_phases [reps]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "common.cuh"

// `layer` that writes `flag` = `value` from its first block's first thread at its start
// (`at_end` = 0) or from the last block to finish, at its end (`at_end` = 1).
__global__ void layer_flag(const float* x, float* y, int iters, volatile unsigned* flag, unsigned value, int at_end,
                           unsigned* done) {
    if (!at_end && blockIdx.x == 0 && threadIdx.x == 0) {
        *flag = value;
        __threadfence_system();
    }
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = x[i];
    for (int k = 0; k < iters; k++) v = fmaf(v, 0.999f, 0.001f * (float)(k & 7));
    y[i] = v;
    if (at_end) {
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence();
            if (atomicAdd(done, 1u) == gridDim.x - 1) {
                *done = 0;
                *flag = value;
                __threadfence_system();
            }
        }
    }
}

using clk = std::chrono::steady_clock;

int main(int argc, char** argv) {
    const int reps = argc > 1 ? std::atoi(argv[1]) : 300;
    const int layers = 8, blocks = 528, threads = 256, iters = 2000, elems = blocks * threads;
    cudaStream_t s;
    RK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::vector<float> h(elems);
    for (int i = 0; i < elems; i++) h[i] = (float)(i % 1000) / 1000.0f;
    float *a, *b;
    unsigned* done;
    RK(cudaMalloc(&a, elems * sizeof(float)));
    RK(cudaMalloc(&b, elems * sizeof(float)));
    RK(cudaMalloc(&done, sizeof(unsigned)));
    RK(cudaMemset(done, 0, sizeof(unsigned)));
    unsigned* flags_h;  // [0] start flag, [1] end flag
    RK(cudaHostAlloc(&flags_h, 2 * sizeof(unsigned), cudaHostAllocMapped));
    unsigned* flags_d;
    RK(cudaHostGetDevicePointer(&flags_d, flags_h, 0));
    volatile unsigned* fh = flags_h;
    fh[0] = fh[1] = 0;

    // The helper: waits for rep r's start flag, then its end flag, stamping each.
    std::atomic<int> armed{-1};
    std::atomic<bool> stop{false};
    std::vector<clk::time_point> seen_start(reps + 10), seen_end(reps + 10);
    std::thread helper([&] {
        while (!stop.load(std::memory_order_acquire)) {
            int r = armed.load(std::memory_order_acquire);
            if (r < 0) {
                __builtin_ia32_pause();
                continue;
            }
            unsigned want = (unsigned)r + 1;
            while (fh[0] != want && !stop.load(std::memory_order_relaxed)) __builtin_ia32_pause();
            seen_start[r] = clk::now();
            while (fh[1] != want && !stop.load(std::memory_order_relaxed)) __builtin_ia32_pause();
            seen_end[r] = clk::now();
            armed.store(-1, std::memory_order_release);
        }
    });

    std::vector<double> total, pre, gpu, post, first;
    auto us = [](clk::time_point x, clk::time_point y) { return std::chrono::duration<double, std::micro>(y - x).count(); };
    for (int r = 0; r < reps + 10; r++) {  // 10 warm-up repetitions, not counted
        RK(cudaMemcpy(a, h.data(), elems * sizeof(float), cudaMemcpyHostToDevice));
        armed.store(r, std::memory_order_release);
        const unsigned v = (unsigned)r + 1;
        auto t0 = clk::now();
        clk::time_point t1;
        for (int l = 0; l < layers; l++) {
            const float* x = l % 2 == 0 ? a : b;
            float* y = l % 2 == 0 ? b : a;
            if (l == 0) {
                layer_flag<<<blocks, threads, 0, s>>>(x, y, iters, flags_d, v, 0, done);
                t1 = clk::now();
            } else if (l == layers - 1) {
                layer_flag<<<blocks, threads, 0, s>>>(x, y, iters, flags_d + 1, v, 1, done);
            } else {
                layer<<<blocks, threads, 0, s>>>(x, y, iters);
            }
        }
        RK(cudaStreamSynchronize(s));
        auto t3 = clk::now();
        while (armed.load(std::memory_order_acquire) != -1) __builtin_ia32_pause();
        if (r < 10) continue;
        total.push_back(us(t0, t3));
        first.push_back(us(t0, t1));
        pre.push_back(us(t0, seen_start[r]));
        gpu.push_back(us(seen_start[r], seen_end[r]));
        post.push_back(us(seen_end[r], t3));
    }
    stop.store(true, std::memory_order_release);
    helper.join();
    std::printf("{\"test\": \"op_phases\", \"reps\": %d, \"total_p50_us\": %.2f, \"total_p95_us\": %.2f, "
                "\"pre_p50_us\": %.2f, \"pre_p95_us\": %.2f, \"gpu_p50_us\": %.2f, \"gpu_p95_us\": %.2f, "
                "\"post_p50_us\": %.2f, \"post_p95_us\": %.2f, \"first_launch_p50_us\": %.2f}\n",
                reps, pct(total, 0.5), pct(total, 0.95), pct(pre, 0.5), pct(pre, 0.95), pct(gpu, 0.5),
                pct(gpu, 0.95), pct(post, 0.5), pct(post, 0.95), pct(first, 0.5));
    return 0;
}
