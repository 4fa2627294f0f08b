// App-thread cost of one kernel launch, for the shim's overhead check (bench/gpu/shim/run.sh).
//
// Launches an empty kernel in batches of BATCH on one stream and times only the issuing loop of
// each batch on the host (steady_clock), then synchronizes outside the timed region so the
// launch queue never fills (a full queue would make the host wait for the GPU and measure the
// device instead). Reports the median, p10 and p90 of per-launch issue time over all batches,
// for the runtime API (`<<<>>>`, static cudart -> cuGetProcAddress route) and the driver API
// (`cuLaunchKernel` linked directly -> the shim's exported symbol). Run it with and without the
// shim; the difference of medians is the shim's cost per launch.
//
// Output: one JSON object per API on stdout.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void empty_kernel() {}

#define CK(x)                                                                        \
    do {                                                                             \
        cudaError_t e_ = (x);                                                        \
        if (e_ != cudaSuccess) {                                                     \
            std::fprintf(stderr, "FAILED %s: %s\n", #x, cudaGetErrorString(e_));     \
            std::exit(1);                                                            \
        }                                                                            \
    } while (0)

static const int BATCH = 256;
static const int BATCHES = 200;
static const int WARMUP_BATCHES = 10;

template <typename Launch>
static void measure(const char* api, cudaStream_t s, Launch launch) {
    std::vector<double> per_launch_ns;
    per_launch_ns.reserve(BATCHES);
    for (int b = 0; b < WARMUP_BATCHES + BATCHES; b++) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < BATCH; i++) launch();
        auto t1 = std::chrono::steady_clock::now();
        CK(cudaStreamSynchronize(s));
        if (b >= WARMUP_BATCHES)
            per_launch_ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / BATCH);
    }
    std::sort(per_launch_ns.begin(), per_launch_ns.end());
    auto q = [&](double f) { return per_launch_ns[(size_t)(f * (per_launch_ns.size() - 1))] / 1000.0; };
    std::printf("{\"api\": \"%s\", \"batch\": %d, \"batches\": %d, \"median_us\": %.4f, \"p10_us\": %.4f, \"p90_us\": %.4f}\n",
                api, BATCH, BATCHES, q(0.5), q(0.1), q(0.9));
}

int main() {
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    measure("runtime", s, [&] { empty_kernel<<<1, 32, 0, s>>>(); });
    CK(cudaGetLastError());
    cudaFunction_t fn;
    CK(cudaGetFuncBySymbol(&fn, (const void*)empty_kernel));
    measure("driver", s, [&] {
        CUresult r = cuLaunchKernel((CUfunction)fn, 1, 1, 1, 32, 1, 1, 0, (CUstream)s, nullptr, nullptr);
        if (r != CUDA_SUCCESS) {
            std::fprintf(stderr, "cuLaunchKernel failed: %d\n", (int)r);
            std::exit(1);
        }
    });
    CK(cudaStreamDestroy(s));
    return 0;
}
