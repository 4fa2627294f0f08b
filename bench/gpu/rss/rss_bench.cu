// Peak resident memory of a program that never synchronizes, and the driver's own launch queue
// depth (bench/gpu/rss/run.sh runs it natively and under the shim).
//
//   rss_bench flood N   N launches of an empty kernel on one stream without a sync, then one sync;
//                       prints launches, wall seconds and VmHWM (kB) as JSON.
//   rss_bench depth N   a kernel spinning about 2 s, then up to N empty launches behind it, each
//                       call timed: the first call that takes over 1 ms is where the driver's
//                       queue was full (the launch blocked); prints that index as JSON.
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CK(x)                                                                             \
    do {                                                                                  \
        cudaError_t e_ = (x);                                                             \
        if (e_ != cudaSuccess) {                                                          \
            std::fprintf(stderr, "%s failed: %s\n", #x, cudaGetErrorString(e_));          \
            std::exit(1);                                                                 \
        }                                                                                 \
    } while (0)

__global__ void empty_kernel(int *p) {
    if (p && threadIdx.x == 0 && blockIdx.x == 0) atomicAdd(p, 1);
}

__device__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void spin_kernel(unsigned long long ns) {
    unsigned long long start = now_ns();
    while (now_ns() - start < ns) {
    }
}

static long vmhwm_kb() {
    FILE *f = std::fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && std::fgets(line, sizeof line, f))
        if (std::strncmp(line, "VmHWM:", 6) == 0) kb = std::atol(line + 6);
    if (f) std::fclose(f);
    return kb;
}

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "flood";
    long n = argc > 2 ? std::atol(argv[2]) : 10000000L;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int *counter;
    CK(cudaMalloc(&counter, sizeof(int)));
    CK(cudaMemset(counter, 0, sizeof(int)));
    CK(cudaDeviceSynchronize());
    long rss_before = vmhwm_kb();
    auto t0 = std::chrono::steady_clock::now();
    if (std::strcmp(what, "flood") == 0) {
        for (long i = 0; i < n; i++) empty_kernel<<<1, 32, 0, s>>>(counter);
        CK(cudaGetLastError());
        double launch_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        CK(cudaStreamSynchronize(s));
        double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        int ran = 0;
        CK(cudaMemcpy(&ran, counter, sizeof ran, cudaMemcpyDeviceToHost));
        std::printf("{\"what\": \"flood\", \"launches\": %ld, \"ran\": %d, \"launch_s\": %.3f, \"total_s\": %.3f, "
                    "\"vmhwm_kb_before\": %ld, \"vmhwm_kb\": %ld}\n",
                    n, ran, launch_s, total_s, rss_before, vmhwm_kb());
    } else {
        spin_kernel<<<1, 1, 0, s>>>(2000000000ull);
        long blocked_at = -1;
        for (long i = 0; i < n; i++) {
            auto a = std::chrono::steady_clock::now();
            empty_kernel<<<1, 32, 0, s>>>(nullptr);
            double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count();
            if (us > 1000.0) {
                blocked_at = i;
                break;
            }
        }
        CK(cudaStreamSynchronize(s));
        std::printf("{\"what\": \"depth\", \"first_blocking_launch\": %ld, \"tried\": %ld}\n", blocked_at, n);
    }
    return 0;
}
