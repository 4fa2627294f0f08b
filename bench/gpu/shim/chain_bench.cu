// Overhead checks of issue 8 that need no framework:
//  1. chain: N dependent tiny kernels on one stream (each adds 1 to a counter the next one reads),
//     timed from the first launch to cudaStreamSynchronize; throughput = N / time. Run natively and
//     under bind mode (with and without lane continuation): the ratio is what the issue targets.
//  2. small_op: latency of one tiny kernel + cudaStreamSynchronize, repeated; p50 / p95.
//  3. operator: latency of a small operator like the paper's overhead experiment (native p95 about
//     0.4 ms there): 8 dependent compute kernels (528 blocks x 256 threads, a fixed FMA loop each,
//     about 50 us apiece on the whole H200) + cudaStreamSynchronize, repeated; p50 / p95, and a
//     checksum of the result (identical natively and under bind mode if nothing was reordered), and
//     the medians of the first launch call, of all 8 launch calls and of the synchronize call.
//  4. operator_gpu: the same operator with each kernel stamping the GPU's %globaltimer (earliest
//     block start, latest block end): splits the host-measured latency into the GPU's span (first
//     kernel start -> last kernel end, including the gaps between kernels) and the host's share
//     (total - span: the time before the first kernel starts plus the time until the synchronize
//     call returns). Medians over its repetitions.
// The counter is checked after every chain (a lost or reordered launch would change it).
// Output: one JSON object per measurement on stdout. Build: nvcc -O2 -arch=sm_90 chain_bench.cu -o chain_bench
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common.cuh"

using clk = std::chrono::steady_clock;

int main(int argc, char** argv) {
    const int n = argc > 1 ? std::atoi(argv[1]) : 10000;
    const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
    const int small_ops = argc > 3 ? std::atoi(argv[3]) : 2000;
    const int op_reps = argc > 4 ? std::atoi(argv[4]) : 300;
    const int layer_iters = argc > 5 ? std::atoi(argv[5]) : 2000;
    cudaStream_t s;
    RK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned long long* c;
    RK(cudaMalloc(&c, sizeof(*c)));
    RK(cudaMemsetAsync(c, 0, sizeof(*c), s));
    for (int i = 0; i < 100; i++) bump<<<1, 32, 0, s>>>(c);  // warm-up (pool realization in bind mode)
    RK(cudaStreamSynchronize(s));
    unsigned long long expected = 100;
    std::vector<double> ms;
    for (int r = 0; r < reps; r++) {
        auto t0 = clk::now();
        for (int i = 0; i < n; i++) bump<<<1, 32, 0, s>>>(c);
        RK(cudaStreamSynchronize(s));
        ms.push_back(std::chrono::duration<double, std::milli>(clk::now() - t0).count());
        expected += n;
    }
    unsigned long long got = 0;
    RK(cudaMemcpy(&got, c, sizeof(got), cudaMemcpyDeviceToHost));
    std::sort(ms.begin(), ms.end());
    std::printf("{\"test\": \"chain\", \"kernels\": %d, \"reps\": %d, \"median_ms\": %.3f, \"min_ms\": %.3f, "
                "\"kernels_per_s\": %.0f, \"counter_ok\": %s}\n",
                n, reps, ms[ms.size() / 2], ms[0], n / (ms[ms.size() / 2] / 1000.0), got == expected ? "true" : "false");
    std::vector<double> us;
    for (int i = 0; i < small_ops; i++) {
        auto t0 = clk::now();
        bump<<<1, 32, 0, s>>>(c);
        RK(cudaStreamSynchronize(s));
        us.push_back(std::chrono::duration<double, std::micro>(clk::now() - t0).count());
    }
    std::sort(us.begin(), us.end());
    auto q = [&](double f) { return us[(size_t)(f * (us.size() - 1))]; };
    std::printf("{\"test\": \"small_op\", \"ops\": %d, \"p50_us\": %.2f, \"p95_us\": %.2f, \"p99_us\": %.2f}\n", small_ops,
                q(0.5), q(0.95), q(0.99));

    const int blocks = 528, threads = 256, elems = blocks * threads, layers = 8;
    std::vector<float> h(elems);
    for (int i = 0; i < elems; i++) h[i] = (float)(i % 1000) / 1000.0f;
    float *a, *b;
    RK(cudaMalloc(&a, elems * sizeof(float)));
    RK(cudaMalloc(&b, elems * sizeof(float)));
    std::vector<double> op_us, first_us, launches_us, sync_us;
    auto us_since = [](clk::time_point a, clk::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); };
    for (int r = 0; r < op_reps + 10; r++) {  // 10 warm-up repetitions, not counted
        RK(cudaMemcpy(a, h.data(), elems * sizeof(float), cudaMemcpyHostToDevice));
        auto t0 = clk::now();
        clk::time_point t1;
        for (int l = 0; l < layers; l++) {
            if (l % 2 == 0) layer<<<blocks, threads, 0, s>>>(a, b, layer_iters);
            else layer<<<blocks, threads, 0, s>>>(b, a, layer_iters);
            if (l == 0) t1 = clk::now();
        }
        auto t2 = clk::now();
        RK(cudaStreamSynchronize(s));
        auto t3 = clk::now();
        if (r >= 10) {
            op_us.push_back(us_since(t0, t3));
            first_us.push_back(us_since(t0, t1));
            launches_us.push_back(us_since(t0, t2));
            sync_us.push_back(us_since(t2, t3));
        }
    }
    auto med = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    RK(cudaMemcpy(h.data(), a, elems * sizeof(float), cudaMemcpyDeviceToHost));
    unsigned long long sum = 1469598103934665603ull;  // FNV-1a over the result bits
    for (int i = 0; i < elems; i++) {
        unsigned int u;
        std::memcpy(&u, &h[i], 4);
        sum = (sum ^ u) * 1099511628211ull;
    }
    std::sort(op_us.begin(), op_us.end());
    auto qo = [&](double f) { return op_us[(size_t)(f * (op_us.size() - 1))]; };
    std::printf("{\"test\": \"operator\", \"reps\": %d, \"kernels\": %d, \"p50_us\": %.2f, \"p95_us\": %.2f, "
                "\"p99_us\": %.2f, \"first_launch_p50_us\": %.2f, \"launches_p50_us\": %.2f, \"sync_p50_us\": %.2f, "
                "\"checksum\": \"%016llx\"}\n",
                op_reps, layers, qo(0.5), qo(0.95), qo(0.99), med(first_us), med(launches_us), med(sync_us), sum);

    // 4. operator_gpu (see the header).
    unsigned long long* ts;
    RK(cudaMalloc(&ts, 2 * layers * sizeof(*ts)));
    std::vector<unsigned long long> ts_init(2 * layers), ts_h(2 * layers);
    for (int l = 0; l < layers; l++) ts_init[2 * l] = ~0ull, ts_init[2 * l + 1] = 0;
    std::vector<double> g_total, g_span, g_gaps, g_kernel, g_host;
    const int gpu_reps = op_reps / 3 > 50 ? op_reps / 3 : 50;
    for (int r = 0; r < gpu_reps + 10; r++) {
        RK(cudaMemcpy(ts, ts_init.data(), ts_init.size() * sizeof(*ts), cudaMemcpyHostToDevice));
        RK(cudaMemcpy(a, h.data(), elems * sizeof(float), cudaMemcpyHostToDevice));
        auto t0 = clk::now();
        for (int l = 0; l < layers; l++) {
            if (l % 2 == 0) layer_ts<<<blocks, threads, 0, s>>>(a, b, layer_iters, ts + 2 * l);
            else layer_ts<<<blocks, threads, 0, s>>>(b, a, layer_iters, ts + 2 * l);
        }
        RK(cudaStreamSynchronize(s));
        auto t3 = clk::now();
        RK(cudaMemcpy(ts_h.data(), ts, ts_h.size() * sizeof(*ts), cudaMemcpyDeviceToHost));
        if (r < 10) continue;
        double total = us_since(t0, t3);
        double span = (double)(ts_h[2 * layers - 1] - ts_h[0]) / 1000.0, gaps = 0, kern = 0;
        for (int l = 0; l < layers; l++) {
            kern += (double)(ts_h[2 * l + 1] - ts_h[2 * l]) / 1000.0 / layers;
            if (l > 0) gaps += ((double)ts_h[2 * l] - (double)ts_h[2 * l - 1]) / 1000.0;
        }
        g_total.push_back(total), g_span.push_back(span), g_gaps.push_back(gaps), g_kernel.push_back(kern);
        g_host.push_back(total - span);
    }
    std::printf("{\"test\": \"operator_gpu\", \"reps\": %d, \"total_p50_us\": %.2f, \"span_p50_us\": %.2f, "
                "\"gaps_p50_us\": %.2f, \"kernel_p50_us\": %.2f, \"host_p50_us\": %.2f}\n",
                gpu_reps, med(g_total), med(g_span), med(g_gaps), med(g_kernel), med(g_host));
    return got == expected ? 0 : 2;
}
