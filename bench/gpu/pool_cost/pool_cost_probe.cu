// What a pool of green contexts costs, by part: the contexts, their streams, their CUcontext
// views, a first launch in each. Prints GPU memory in use (device-wide, from cuMemGetInfo) and
// the process's host RSS (VmRSS, VmHWM) after each step. The pool's shape follows vitamin's H200
// hierarchy: 16 leaves of one split (minCount 8), 15 internal nodes, 28 remainders = 59 nodes.
// Build and run: bash bench/gpu/pool_cost/run.sh
#include <cuda.h>
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char* s_ = nullptr; cuGetErrorString(r_, &s_); printf("FAIL %s -> %d %s (line %d)\n", #x, (int)r_, s_ ? s_ : "?", __LINE__); exit(1); } } while (0)

__global__ void touch(int* p) { if (p && threadIdx.x == 0) p[blockIdx.x] = blockIdx.x; }

static long status_kib(const char* key) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256]; long v = -1; size_t n = strlen(key);
  while (f && fgets(line, sizeof line, f)) if (!strncmp(line, key, n)) v = atol(line + n + 1);
  if (f) fclose(f);
  return v;
}

static double t0;
static double now_ms() { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
static size_t used0; static long rss0;

static void report(const char* step, int count) {
  size_t fr, tot; CK(cuMemGetInfo(&fr, &tot));
  double gpu = (double)(tot - fr - used0) / (1 << 20);
  double rss = (status_kib("VmRSS:") - rss0) / 1024.0;
  printf("{\"step\": \"%s\", \"count\": %d, \"gpu_mib\": %.1f, \"rss_mib\": %.1f, \"hwm_mib\": %.1f, \"ms\": %.1f}\n",
         step, count, gpu, rss, status_kib("VmHWM:") / 1024.0, now_ms() - t0);
  fflush(stdout);
}

int main() {
  CK(cuInit(0));
  cudaFree(0);
  CUdevice dev; CK(cuDeviceGet(&dev, 0));
  size_t fr, tot; CK(cuMemGetInfo(&fr, &tot)); used0 = tot - fr; rss0 = status_kib("VmRSS:");
  t0 = now_ms();
  report("primary", 0);
  CUdevResource sm; CK(cuDeviceGetDevResource(dev, &sm, CU_DEV_RESOURCE_TYPE_SM));
  unsigned groups = 32; std::vector<CUdevResource> leaves(32); CUdevResource rem;
  CK(cuDevSmResourceSplitByCount(leaves.data(), &groups, &sm, &rem, 0, 8));
  leaves.resize(groups); leaves.push_back(rem);
  int n = (int)leaves.size();
  // Tree nodes [lo, hi) by recursive halving, then the complement of every non-root tree node.
  std::vector<std::pair<int, int>> tree;
  std::vector<std::pair<int, int>> stack{{0, n}};
  while (!stack.empty()) {
    auto [lo, hi] = stack.back(); stack.pop_back(); tree.push_back({lo, hi});
    if (hi - lo > 1) { int mid = lo + (hi - lo + 1) / 2; stack.push_back({mid, hi}); stack.push_back({lo, mid}); }
  }
  std::vector<std::vector<int>> nodes;
  for (auto [lo, hi] : tree) { std::vector<int> v; for (int i = lo; i < hi; i++) v.push_back(i); nodes.push_back(v); }
  for (size_t k = 1; k < tree.size(); k++) {
    auto [lo, hi] = tree[k];
    if ((lo == 0 && hi == (n + 1) / 2) || (lo == (n + 1) / 2 && hi == n)) continue;  // the root's children complement each other
    std::vector<int> v; for (int i = 0; i < n; i++) if (i < lo || i >= hi) v.push_back(i); nodes.push_back(v);
  }
  // vitamin's whole-device node runs on primary-context streams (root_context = "primary").
  nodes.erase(nodes.begin());
  int count = (int)nodes.size();
  std::vector<CUgreenCtx> g(count);
  for (int k = 0; k < count; k++) {
    std::vector<CUdevResource> r; for (int i : nodes[k]) r.push_back(leaves[i]);
    CUdevResourceDesc desc; CK(cuDevResourceGenerateDesc(&desc, r.data(), (unsigned)r.size()));
    CK(cuGreenCtxCreate(&g[k], desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
  }
  report("green contexts", count);
  std::vector<std::vector<CUstream>> s(count);
  for (int lane = 1; lane <= 4; lane++) {
    for (int k = 0; k < count; k++) { CUstream st; CK(cuGreenCtxStreamCreate(&st, g[k], CU_STREAM_NON_BLOCKING, 0)); s[k].push_back(st); }
    report(("streams per context " + std::to_string(lane)).c_str(), count * lane);
  }
  std::vector<CUcontext> c(count);
  for (int k = 0; k < count; k++) CK(cuCtxFromGreenCtx(&c[k], g[k]));
  report("cuCtxFromGreenCtx", count);
  int* d = nullptr; cudaMalloc(&d, 4096);
  for (int k = 0; k < count; k++) {
    touch<<<8, 32, 0, (cudaStream_t)s[k][0]>>>(d);
    CK(cuStreamSynchronize(s[k][0]));
  }
  report("a launch on lane 0 of each", count);
  for (int k = 0; k < count; k++) for (int l = 1; l < 4; l++) { touch<<<8, 32, 0, (cudaStream_t)s[k][l]>>>(d); }
  CK(cuCtxSynchronize());
  report("a launch on every lane", count * 4);
  size_t v = 0; CK(cuCtxSetCurrent(c[0]));
  const char* names[] = {"stack", "printf_fifo", "malloc_heap"};
  CUlimit lims[] = {CU_LIMIT_STACK_SIZE, CU_LIMIT_PRINTF_FIFO_SIZE, CU_LIMIT_MALLOC_HEAP_SIZE};
  for (int i = 0; i < 3; i++) { CK(cuCtxGetLimit(&v, lims[i])); printf("{\"limit\": \"%s\", \"green\": %zu", names[i], v); CUcontext p; CK(cuDevicePrimaryCtxRetain(&p, dev)); CK(cuCtxSetCurrent(p)); CK(cuCtxGetLimit(&v, lims[i])); printf(", \"primary\": %zu}\n", v); CK(cuCtxSetCurrent(c[0])); }
  // Ten more contexts, each with one stream and no launch: the marginal cost of a node kept cold.
  std::vector<CUgreenCtx> more(10);
  for (int k = 0; k < 10; k++) {
    std::vector<CUdevResource> r; for (int i : nodes[k]) r.push_back(leaves[i]);
    CUdevResourceDesc desc; CK(cuDevResourceGenerateDesc(&desc, r.data(), (unsigned)r.size()));
    CK(cuGreenCtxCreate(&more[k], desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    CUstream st; CK(cuGreenCtxStreamCreate(&st, more[k], CU_STREAM_NON_BLOCKING, 0));
  }
  report("ten more contexts, one stream each", 10);
  return 0;
}
