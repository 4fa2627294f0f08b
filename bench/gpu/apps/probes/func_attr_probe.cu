// Does a function attribute set in the primary context (the dynamic shared memory limit raised past
// 48 KiB) hold when the function is launched on a green context's stream? For a runtime-API kernel
// (cudaFuncSetAttribute), a module function (cuModuleGetFunction + cuFuncSetAttribute) and a library
// kernel (cuLibraryGetKernel + cuKernelSetAttribute), and whether re-applying the attribute with the
// green context current (cuKernelGetFunction there + cuFuncSetAttribute) makes the launch valid.
// Build: nvcc -arch=sm_90 -o func_attr_probe func_attr_probe.cu -lcuda
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstring>
#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char* s; cuGetErrorName(r_, &s); printf("%s -> %s (%d)\n", #x, s, r_); } } while (0)
static const int SMEM = 100 * 1024;
__global__ void big(float* out) { extern __shared__ float s[]; s[threadIdx.x] = threadIdx.x; __syncthreads(); out[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x]; }
__global__ void big2(float* out) { extern __shared__ float s[]; s[threadIdx.x] = 2.f; __syncthreads(); out[threadIdx.x] = s[(threadIdx.x + 3) % blockDim.x]; }
int main() {
  CK(cuInit(0)); CUdevice dev; CK(cuDeviceGet(&dev, 0));
  cudaFree(0);  // primary context current
  CUcontext primary; CK(cuCtxGetCurrent(&primary));
  CUdevResource all, leaves[16], rem; unsigned n = 16;
  CK(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
  CK(cuDevSmResourceSplitByCount(leaves, &n, &all, &rem, 0, 8));
  CUdevResourceDesc desc; CK(cuDevResourceGenerateDesc(&desc, leaves, 2));
  CUgreenCtx g; CK(cuGreenCtxCreate(&g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
  CUstream gs; CK(cuGreenCtxStreamCreate(&gs, g, CU_STREAM_NON_BLOCKING, 0));
  CUcontext gctx; CK(cuCtxFromGreenCtx(&gctx, g));
  float* out; cudaMalloc(&out, 4096);
  // 1. runtime-API kernel
  cudaError_t e = cudaFuncSetAttribute(big, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
  printf("cudaFuncSetAttribute: %d\n", (int)e);
  big<<<1, 256, SMEM, (cudaStream_t)gs>>>(out);
  printf("1 runtime kernel on green stream: %s\n", cudaGetErrorName(cudaGetLastError()));
  big<<<1, 256, SMEM, 0>>>(out);
  printf("1b runtime kernel on primary stream: %s\n", cudaGetErrorName(cudaGetLastError()));
  cudaFunction_t rf; cudaGetFuncBySymbol(&rf, (const void*)big);
  void* args[] = {&out};
  CUresult r = cuLaunchKernel((CUfunction)rf, 1, 1, 1, 256, 1, 1, SMEM, gs, args, nullptr);
  printf("1c cuLaunchKernel(cudaGetFuncBySymbol handle) on green: %d\n", r);
  CUkernel kk = nullptr; cudaGetKernel((cudaKernel_t*)&kk, (const void*)big);
  r = cuLaunchKernel((CUfunction)kk, 1, 1, 1, 256, 1, 1, SMEM, gs, args, nullptr);
  printf("1d cuLaunchKernel(cudaGetKernel handle) on green: %d (handle %p vs func %p)\n", r, (void*)kk, (void*)rf);
  CK(cuCtxSynchronize());
  // 2. the same with the attribute re-applied in the green context
  CK(cuCtxPushCurrent(gctx));
  CUfunction gf = nullptr; CUresult gr = cuKernelGetFunction(&gf, kk);
  printf("2 cuKernelGetFunction in green ctx: %d gf=%p\n", gr, (void*)gf);
  if (gr == CUDA_SUCCESS) CK(cuFuncSetAttribute(gf, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, SMEM));
  CUresult fr = cuFuncSetAttribute((CUfunction)rf, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, SMEM);
  printf("2b cuFuncSetAttribute(primary handle) with green current: %d\n", fr);
  CUcontext popped; CK(cuCtxPopCurrent(&popped));
  r = cuLaunchKernel((CUfunction)kk, 1, 1, 1, 256, 1, 1, SMEM, gs, args, nullptr);
  printf("2c kernel handle on green after re-apply: %d\n", r);
  r = cuLaunchKernel((CUfunction)rf, 1, 1, 1, 256, 1, 1, SMEM, gs, args, nullptr);
  printf("2d function handle on green after re-apply: %d\n", r);
  big<<<1, 256, SMEM, (cudaStream_t)gs>>>(out);
  printf("2e runtime launch on green after re-apply: %s\n", cudaGetErrorName(cudaGetLastError()));
  // 3. a second kernel whose limit is raised only with cuKernelSetAttribute for the device
  CUkernel k2 = nullptr; cudaGetKernel((cudaKernel_t*)&k2, (const void*)big2);
  CK(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, SMEM, k2, dev));
  r = cuLaunchKernel((CUfunction)k2, 1, 1, 1, 256, 1, 1, SMEM, gs, args, nullptr);
  printf("3 kernel2 handle on green after cuKernelSetAttribute(dev) only: %d\n", r);
  r = cuLaunchKernel((CUfunction)k2, 1, 1, 1, 256, 1, 1, SMEM, 0, args, nullptr);
  printf("3b kernel2 handle on primary after cuKernelSetAttribute(dev) only: %d\n", r);
  CK(cuCtxSynchronize());
  int v = 0; CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (CUfunction)rf));
  printf("primary function attr: %d\n", v);
  return 0;
}
