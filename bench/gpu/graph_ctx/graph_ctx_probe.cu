// Which route confines a CUDA graph's kernels to a green context? (FACTS.md: a graph launched on a
// green-context stream uses every SM.) For each route, a graph of one kernel that writes each block's
// %smid is launched and the distinct SMs are counted against the green context's SM count.
// Build: nvcc -O2 -arch=sm_90 graph_ctx_probe.cu -lcuda -o graph_ctx_probe
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <set>
#include <vector>

#define CK(x) ck((x), #x, __LINE__)
static CUresult ck(CUresult r, const char* what, int line) {
  if (r != CUDA_SUCCESS) {
    const char* s = nullptr;
    cuGetErrorName(r, &s);
    printf("  FAIL %s -> %d %s (line %d)\n", what, (int)r, s ? s : "?", line);
  }
  return r;
}

__global__ void where(unsigned* out) {
  unsigned r;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
  if (threadIdx.x == 0) out[blockIdx.x] = r;
}

static const int BLOCKS = 2112;
static unsigned* d_out;

static int distinct_after(CUstream s) {
  if (CK(cuStreamSynchronize(s)) != CUDA_SUCCESS) return -1;
  std::vector<unsigned> h(BLOCKS);
  cudaMemcpy(h.data(), d_out, BLOCKS * 4, cudaMemcpyDeviceToHost);
  std::set<unsigned> u(h.begin(), h.end());
  cudaMemset(d_out, 0xff, BLOCKS * 4);
  cudaDeviceSynchronize();
  return (int)u.size();
}

static int launch_exec(CUgraphExec e, CUstream s) {
  if (CK(cuGraphLaunch(e, s)) != CUDA_SUCCESS) return -1;
  return distinct_after(s);
}

// A graph of one kernel node built with the driver API: `func` or `kern`, and `ctx`.
static CUgraph node_graph(CUfunction func, CUkernel kern, CUcontext ctx) {
  CUgraph g;
  CK(cuGraphCreate(&g, 0));
  void* args[] = {&d_out};
  CUDA_KERNEL_NODE_PARAMS p = {};
  p.func = func;
  p.kern = kern;
  p.ctx = ctx;
  p.gridDimX = BLOCKS; p.gridDimY = 1; p.gridDimZ = 1;
  p.blockDimX = 32; p.blockDimY = 1; p.blockDimZ = 1;
  p.kernelParams = args;
  CUgraphNode n;
  if (CK(cuGraphAddKernelNode(&n, g, nullptr, 0, &p)) != CUDA_SUCCESS) { cuGraphDestroy(g); return nullptr; }
  return g;
}

static CUgraphExec inst(CUgraph g) {
  CUgraphExec e = nullptr;
  if (!g || CK(cuGraphInstantiate(&e, g, 0)) != CUDA_SUCCESS) return nullptr;
  return e;
}

int main() {
  int drv = 0;
  cuDriverGetVersion(&drv);
  cudaFree(0);
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  CUcontext primary;
  CK(cuCtxGetCurrent(&primary));
  cudaMalloc(&d_out, BLOCKS * 4);
  CUdevResource all;
  CK(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
  CUdevResource leaves[132];
  unsigned nl = 132;
  CUdevResource rem;
  CK(cuDevSmResourceSplitByCount(leaves, &nl, &all, &rem, 0, 8));
  CUdevResourceDesc desc;
  CK(cuDevResourceGenerateDesc(&desc, leaves, 2));  // 16 SMs
  CUgreenCtx gc;
  CK(cuGreenCtxCreate(&gc, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
  CUstream gs, ps;
  CK(cuGreenCtxStreamCreate(&gs, gc, CU_STREAM_NON_BLOCKING, 0));
  CK(cuStreamCreate(&ps, CU_STREAM_NON_BLOCKING));
  CUcontext gctx;
  CK(cuCtxFromGreenCtx(&gctx, gc));
  CUdevResource gr;
  CK(cuGreenCtxGetDevResource(gc, &gr, CU_DEV_RESOURCE_TYPE_SM));
  printf("driver %d, device %u SMs, green context %u SMs, %d blocks per launch\n", drv, all.sm.smCount, gr.sm.smCount,
         BLOCKS);

  CUfunction func;
  cudaGetFuncBySymbol((cudaFunction_t*)&func, (const void*)where);
  CUkernel kern = nullptr;
  cudaError_t ke = cudaGetKernel((cudaKernel_t*)&kern, (const void*)where);
  printf("runtime CUfunction %p, CUkernel %p (%s)\n", (void*)func, (void*)kern, cudaGetErrorString(ke));

  // Baselines: a plain launch on the green stream and on a primary stream.
  void* args[] = {&d_out};
  CK(cuLaunchKernel(func, BLOCKS, 1, 1, 32, 1, 1, 0, gs, args, nullptr));
  printf("A  direct launch, green stream: %d SMs\n", distinct_after(gs));
  CK(cuLaunchKernel(func, BLOCKS, 1, 1, 32, 1, 1, 0, ps, args, nullptr));
  printf("B  direct launch, primary stream: %d SMs\n", distinct_after(ps));

  // Captured on the green stream (the shape torch and JAX graphs have).
  CUgraph cap;
  CK(cuStreamBeginCapture(gs, CU_STREAM_CAPTURE_MODE_RELAXED));
  CK(cuLaunchKernel(func, BLOCKS, 1, 1, 32, 1, 1, 0, gs, args, nullptr));
  CK(cuStreamEndCapture(gs, &cap));
  CUgraphExec capx = inst(cap);
  if (capx) {
    printf("C  captured on green stream, launched on green stream: %d SMs\n", launch_exec(capx, gs));
    printf("C' same exec, launched on primary stream: %d SMs\n", launch_exec(capx, ps));
  }
  // What the captured node holds.
  size_t nn = 0;
  CK(cuGraphGetNodes(cap, nullptr, &nn));
  std::vector<CUgraphNode> nodes(nn);
  CK(cuGraphGetNodes(cap, nodes.data(), &nn));
  CUgraphNode kn = nullptr;
  for (auto n : nodes) {
    CUgraphNodeType t;
    CK(cuGraphNodeGetType(n, &t));
    if (t == CU_GRAPH_NODE_TYPE_KERNEL) kn = n;
  }
  if (kn) {
    CUDA_KERNEL_NODE_PARAMS p = {};
    CK(cuGraphKernelNodeGetParams(kn, &p));
    printf("   captured node: func %p kern %p ctx %p (green ctx %p, primary %p)\n", (void*)p.func, (void*)p.kern,
           (void*)p.ctx, (void*)gctx, (void*)primary);
    // D: set the node's ctx to the green context before instantiating (func kept).
    CUDA_KERNEL_NODE_PARAMS q = p;
    q.ctx = gctx;
    if (CK(cuGraphKernelNodeSetParams(kn, &q)) == CUDA_SUCCESS) {
      CUgraphExec x = inst(cap);
      if (x) printf("D  captured node, ctx := green (func kept), launched on primary stream: %d SMs\n", launch_exec(x, ps));
    }
    // E: func cleared, kern + ctx.
    if (kern) {
      q = p;
      q.func = nullptr;
      q.kern = kern;
      q.ctx = gctx;
      if (CK(cuGraphKernelNodeSetParams(kn, &q)) == CUDA_SUCCESS) {
        CUgraphExec x = inst(cap);
        if (x) {
          printf("E  captured node, kern + ctx := green, launched on primary stream: %d SMs\n", launch_exec(x, ps));
          printf("E' same exec, launched on green stream: %d SMs\n", launch_exec(x, gs));
        }
      }
    }
  }
  // F, G: graphs built with the driver API.
  CUgraphExec fx = inst(node_graph(func, nullptr, gctx));
  if (fx) printf("F  built node, func + ctx green, on primary stream: %d SMs\n", launch_exec(fx, ps));
  if (kern) {
    CUgraphExec gx = inst(node_graph(nullptr, kern, gctx));
    if (gx) printf("G  built node, kern + ctx green, on primary stream: %d SMs\n", launch_exec(gx, ps));
    CUgraphExec hx = inst(node_graph(nullptr, kern, primary));
    if (hx) {
      printf("H  built node, kern + ctx primary, on primary stream: %d SMs\n", launch_exec(hx, ps));
      // I: the instantiated exec's node moved to the green context (cuGraphExecKernelNodeSetParams).
      CUgraph hg = node_graph(nullptr, kern, primary);
      CUgraphExec ix = inst(hg);
      size_t m = 1;
      CUgraphNode hn;
      CK(cuGraphGetNodes(hg, &hn, &m));
      CUDA_KERNEL_NODE_PARAMS p = {};
      CK(cuGraphKernelNodeGetParams(hn, &p));
      p.ctx = gctx;
      if (ix && CK(cuGraphExecKernelNodeSetParams(ix, hn, &p)) == CUDA_SUCCESS)
        printf("I  exec node ctx updated to green, on primary stream: %d SMs\n", launch_exec(ix, ps));
      // I2: the same update with `func` cleared (only `kern` + `ctx`), then back to the primary context.
      p.func = nullptr;
      p.kern = kern;
      if (ix && CK(cuGraphExecKernelNodeSetParams(ix, hn, &p)) == CUDA_SUCCESS) {
        printf("I2 exec node kern + ctx updated to green, on primary stream: %d SMs\n", launch_exec(ix, ps));
        p.ctx = primary;
        if (CK(cuGraphExecKernelNodeSetParams(ix, hn, &p)) == CUDA_SUCCESS)
          printf("I3 ... and back to the primary context: %d SMs\n", launch_exec(ix, ps));
      }
      // K: whole-graph exec update from a graph whose node is kern + ctx green.
      CUgraph kg = node_graph(nullptr, kern, gctx);
      CUgraphExecUpdateResultInfo info = {};
      if (ix && kg && CK(cuGraphExecUpdate(ix, kg, &info)) == CUDA_SUCCESS)
        printf("K  exec updated from a kern + ctx green graph, on primary stream: %d SMs\n", launch_exec(ix, ps));
      else
        printf("K  exec update refused: result %d\n", (int)info.result);
    }
  }
  // J: instantiated while the green context is current, launched on the green stream.
  CK(cuCtxPushCurrent(gctx));
  CUgraphExec jx = inst(cap);
  CUcontext popped;
  CK(cuCtxPopCurrent(&popped));
  if (jx) printf("J  captured graph (as modified above) instantiated with the green context current, on green stream: %d SMs\n",
                 launch_exec(jx, gs));
  printf("done\n");
  return 0;
}
