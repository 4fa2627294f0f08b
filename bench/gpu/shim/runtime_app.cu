// A CUDA C++ runtime-API program for the shim's GPU check (bench/gpu/shim/run.sh).
//
// Built with nvcc on the GPU machine (static cudart, so the runtime reaches the driver through
// cuGetProcAddress) and linked with -lcuda for one direct driver call. Exercises: a non-blocking
// and a blocking stream plus the legacy default stream, events (ordering and timing), pageable
// and pinned copies (sync and async), memset, host functions and stream callbacks, and invalid
// launches (2048 threads per block) through the runtime and through cuLaunchKernel directly.
// Prints only deterministic results on stdout (timings on stderr), so runs with and without the
// shim must print identical stdout.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                         \
    do {                                                                              \
        cudaError_t e_ = (x);                                                         \
        if (e_ != cudaSuccess) {                                                      \
            std::printf("FAILED %s: %s (%d)\n", #x, cudaGetErrorString(e_), (int)e_); \
            std::exit(1);                                                             \
        }                                                                             \
    } while (0)

__global__ void axpb(float* y, const float* x, float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
}

// Fixed structure: 256 threads, one partial per block, fixed tree order.
__global__ void block_sum(float* out, const float* x, int n) {
    __shared__ float s[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int w = 128; w > 0; w >>= 1) {
        if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

static uint64_t fnv1a(const void* p, size_t n) {
    const unsigned char* b = static_cast<const unsigned char*>(p);
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static void CUDART_CB host_fn(void* p) { *static_cast<int*>(p) += 1; }
static void CUDART_CB stream_cb(cudaStream_t, cudaError_t status, void* p) {
    *static_cast<int*>(p) += (status == cudaSuccess) ? 10 : 1000;
}

int main() {
    const int n = 1 << 22;
    const int blocks = (n + 255) / 256;
    std::vector<float> pageable(n);
    for (int i = 0; i < n; i++) pageable[i] = (float)(((long long)i * 7919) % 1000) * 0.001f;

    float *dx, *dy, *dz, *dpart, *pinned;
    CK(cudaMalloc(&dx, n * sizeof(float)));
    CK(cudaMalloc(&dy, n * sizeof(float)));
    CK(cudaMalloc(&dz, n * sizeof(float)));
    CK(cudaMalloc(&dpart, blocks * sizeof(float)));
    CK(cudaMallocHost(&pinned, n * sizeof(float)));

    cudaStream_t s_nb, s_b;
    CK(cudaStreamCreateWithFlags(&s_nb, cudaStreamNonBlocking));
    CK(cudaStreamCreate(&s_b));
    cudaEvent_t copied, t0, t1;
    CK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
    CK(cudaEventCreate(&t0));
    CK(cudaEventCreate(&t1));

    // Pageable H2D on the non-blocking stream, ordered before the blocking stream by an event.
    CK(cudaMemcpyAsync(dx, pageable.data(), n * sizeof(float), cudaMemcpyHostToDevice, s_nb));
    CK(cudaEventRecord(copied, s_nb));
    CK(cudaStreamWaitEvent(s_b, copied, 0));
    CK(cudaEventRecord(t0, s_b));
    CK(cudaMemsetAsync(dy, 0, n * sizeof(float), s_b));
    for (int r = 0; r < 20; r++) axpb<<<blocks, 256, 0, s_b>>>(dy, dx, 1.0f + r * 0.5f, (float)r, n);
    CK(cudaGetLastError());
    CK(cudaEventRecord(t1, s_b));
    int host_counter = 0;
    CK(cudaLaunchHostFunc(s_b, host_fn, &host_counter));
    CK(cudaStreamAddCallback(s_b, stream_cb, &host_counter, 0));
    // Legacy default stream: implicitly ordered after the blocking stream s_b.
    block_sum<<<blocks, 256>>>(dpart, dy, n);
    CK(cudaGetLastError());
    // Pinned async D2H on the non-blocking stream, after the default-stream work (event).
    cudaEvent_t summed;
    CK(cudaEventCreateWithFlags(&summed, cudaEventDisableTiming));
    CK(cudaEventRecord(summed, 0));
    CK(cudaStreamWaitEvent(s_nb, summed, 0));
    CK(cudaMemcpyAsync(pinned, dy, n * sizeof(float), cudaMemcpyDeviceToHost, s_nb));
    CK(cudaStreamSynchronize(s_nb));
    std::vector<float> part(blocks);
    CK(cudaMemcpy(part.data(), dpart, blocks * sizeof(float), cudaMemcpyDeviceToHost));  // pageable, sync
    CK(cudaMemcpy(dz, dy, n * sizeof(float), cudaMemcpyDeviceToDevice));
    CK(cudaDeviceSynchronize());
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, t0, t1));
    std::printf("event query after sync: %d\n", (int)cudaEventQuery(t1));
    std::printf("stream query after sync: %d\n", (int)cudaStreamQuery(s_b));

    double sum = 0;
    for (int b = 0; b < blocks; b++) sum += part[b];
    std::printf("y fnv1a=%016llx\n", (unsigned long long)fnv1a(pinned, n * sizeof(float)));
    std::printf("partials fnv1a=%016llx sum=%.6f\n", (unsigned long long)fnv1a(part.data(), blocks * sizeof(float)), sum);
    std::printf("host function + callback counter=%d\n", host_counter);

    // Invalid launch through the runtime.
    axpb<<<1, 2048, 0, s_b>>>(dy, dx, 1.0f, 0.0f, n);
    cudaError_t rt_err = cudaGetLastError();
    std::printf("invalid launch (runtime, 2048 threads/block): %d %s\n", (int)rt_err, cudaGetErrorName(rt_err));

    // Invalid launch through the driver API, linked directly (the shim's exported cuLaunchKernel).
    cudaFunction_t fn;
    CK(cudaGetFuncBySymbol(&fn, (const void*)axpb));
    float a = 1.0f, b = 0.0f;
    int nn = n;
    void* args[] = {&dy, &dx, &a, &b, &nn};
    CUresult drv_err = cuLaunchKernel((CUfunction)fn, 1, 1, 1, 2048, 1, 1, 0, (CUstream)s_b, args, nullptr);
    std::printf("invalid launch (driver, 2048 threads/block): %d\n", (int)drv_err);
    // And a valid direct driver launch, checked.
    CUresult ok = cuLaunchKernel((CUfunction)fn, blocks, 1, 1, 256, 1, 1, 0, (CUstream)s_b, args, nullptr);
    CK(cudaStreamSynchronize(s_b));
    CK(cudaMemcpy(pinned, dy, n * sizeof(float), cudaMemcpyDeviceToHost));
    std::printf("direct driver launch: %d y fnv1a=%016llx\n", (int)ok, (unsigned long long)fnv1a(pinned, n * sizeof(float)));

    std::fprintf(stderr, "runtime_app: 20 launches in %.3f ms\n", ms);
    CK(cudaStreamDestroy(s_nb));
    CK(cudaStreamDestroy(s_b));
    CK(cudaEventDestroy(copied));
    CK(cudaEventDestroy(summed));
    CK(cudaEventDestroy(t0));
    CK(cudaEventDestroy(t1));
    CK(cudaFreeHost(pinned));
    CK(cudaFree(dx));
    CK(cudaFree(dy));
    CK(cudaFree(dz));
    CK(cudaFree(dpart));
    return 0;
}
