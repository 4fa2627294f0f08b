// Does a stream's priority order one MPS client's kernels ahead of another's, and how does that
// compare with a disjoint green-context partition? Two roles, run as separate processes under MPS:
//   prio_probe bg  WHERE PRIO SECONDS   floods the device with wide kernels (132*16 blocks of 256 threads, ~BG_US us each: two full waves)
//                                        until SECONDS pass; prints kernels/s
//   prio_probe lat WHERE PRIO ITERS      ITERS times: a chain of 10 small kernels (8 blocks of ~5 us),
//                                        then a synchronize; prints the iteration time p50/p90/p99 in us
// WHERE: "primary" (a stream of the primary context), "gc" (a green context of the whole device) or
// "gc:A:N" (a green context over leaves A..A+N-1 of the 8-SM split; N may reach into the remainder,
// which is leaf 15). PRIO: 0 (default) or "hi" (the context's greatest priority).
// Build: nvcc -O2 -arch=sm_90 prio_probe.cu -lcuda -o prio_probe
#include <cuda.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char* s_ = nullptr; cuGetErrorString(r_, &s_); \
  fprintf(stderr, "FAIL %s -> %d %s\n", #x, (int)r_, s_ ? s_ : "?"); exit(1);} } while (0)

__device__ unsigned long long now_ns() { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
__global__ void spin(float* out, unsigned ns) {
  unsigned long long t0 = now_ns();
  float a = threadIdx.x;
  while (now_ns() - t0 < ns) a = a * 1.0001f + 0.5f;
  if (a == -1.f) out[blockIdx.x] = a;
}

static CUstream make_stream(const char* where, int prio) {
  CUdevice dev; CK(cuDeviceGet(&dev, 0));
  int lo = 0, hi = 0; CK(cuCtxGetStreamPriorityRange(&lo, &hi));
  int p = prio ? hi : 0;
  CUstream s = nullptr;
  if (!strcmp(where, "primary")) {
    CK(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, p));
    return s;
  }
  CUdevResource all; CK(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
  CUdevResource res[17]; unsigned nl = 16; CUdevResource rem;
  CK(cuDevSmResourceSplitByCount(res, &nl, &all, &rem, 0, 8));
  res[nl] = rem;
  int first = 0, count = (int)nl + 1;
  if (sscanf(where, "gc:%d:%d", &first, &count) != 2 && strcmp(where, "gc")) { fprintf(stderr, "bad WHERE %s\n", where); exit(2); }
  CUdevResourceDesc desc;
  CK(cuDevResourceGenerateDesc(&desc, &res[first], count));
  CUgreenCtx g; CK(cuGreenCtxCreate(&g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
  CK(cuGreenCtxStreamCreate(&s, g, CU_STREAM_NON_BLOCKING, p));
  return s;
}

int main(int argc, char** argv) {
  if (argc < 5) { fprintf(stderr, "usage: prio_probe bg|lat WHERE 0|hi SECONDS|ITERS\n"); return 2; }
  cudaFree(0);
  int prio = !strcmp(argv[3], "hi");
  CUstream s = make_stream(argv[2], prio);
  float* d; cudaMalloc(&d, 1 << 20);
  cudaStream_t cs = (cudaStream_t)s;
  spin<<<8, 128, 0, cs>>>(d, 1000); cudaStreamSynchronize(cs);
  if (!strcmp(argv[1], "bg")) {
    double secs = atof(argv[4]);
    unsigned bg_us = getenv("BG_US") ? atoi(getenv("BG_US")) : 50;
    auto t0 = std::chrono::steady_clock::now();
    long n = 0;
    for (;;) {
      for (int k = 0; k < 16; k++) spin<<<132 * 16, 256, 0, cs>>>(d, bg_us * 1000);
      cudaStreamSynchronize(cs);
      n += 16;
      double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (el >= secs) { printf("bg %s prio=%s kernels/s %.1f\n", argv[2], argv[3], n / el); break; }
    }
  } else {
    int iters = atoi(argv[4]);
    std::vector<double> us(iters);
    for (int i = 0; i < iters; i++) {
      auto t0 = std::chrono::steady_clock::now();
      for (int k = 0; k < 10; k++) spin<<<8, 128, 0, cs>>>(d, 5000);
      cudaStreamSynchronize(cs);
      us[i] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    }
    std::sort(us.begin(), us.end());
    auto q = [&](double f) { return us[std::min<size_t>(us.size() - 1, (size_t)(f * us.size()))]; };
    printf("lat %s prio=%s iters %d p50 %.1f p90 %.1f p99 %.1f us\n", argv[2], argv[3], iters, q(0.5), q(0.9), q(0.99));
  }
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) { fprintf(stderr, "error %s\n", cudaGetErrorString(e)); return 1; }
  return 0;
}
