/*
 * A data-parallel step loop against the fake libcuda, as DDP issues it: compute kernels on one
 * stream, an all-reduce on a high-priority communication stream after an event, the next step's
 * compute after the all-reduce. The all-reduce is an NCCL kernel (by name: the fake's function
 * `_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL...`), launched plainly with NCCL's grid shapes:
 * one block per channel, a ring collective on many channels (100 blocks: 13 of the fake's SMs at
 * 8 resident blocks each) and a tree collective on few (24 blocks: 3 SMs). A last all-reduce of
 * 400 blocks is more than the whole device holds at once (36 SMs x 8). The fake driver fails a
 * collective launched where its grid cannot be resident (`WOULD_HANG`: on a GPU it could spin
 * for ever on peers), so a wrong placement shows as a failed run.
 *
 * Prints a checksum of the result and `done`.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef uint64_t CUdeviceptr;
typedef void *CUstream;
typedef void *CUevent;
typedef void *CUfunction;
typedef void *CUcontext;

CUresult cuInit(unsigned);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, int);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuModuleGetFunction(CUfunction *, void *, const char *);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void *, size_t);
CUresult cuMemcpyDtoH_v2(void *, CUdeviceptr, size_t);
CUresult cuStreamCreate(CUstream *, unsigned);
CUresult cuStreamCreateWithPriority(CUstream *, unsigned, int);
CUresult cuStreamWaitEvent(CUstream, CUevent, unsigned);
CUresult cuEventCreate(CUevent *, unsigned);
CUresult cuEventRecord(CUevent, CUstream);
CUresult cuCtxSynchronize(void);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **, void **);

#define N 4096
#define BYTES (N * sizeof(float))
#define CHECK(x) do { CUresult r_ = (x); if (r_) { printf("FAILED %s = %d\n", #x, r_); exit(1); } } while (0)

static CUresult launch(CUfunction f, unsigned grid, CUstream s, CUdeviceptr dst, CUdeviceptr src, int tag, float mul,
                       float add) {
    int n = N;
    void *params[] = {&dst, &src, &n, &tag, &mul, &add};
    return cuLaunchKernel(f, grid, 1, 1, 256, 1, 1, 0, s, params, NULL);
}

int main(void) {
    static float host[N];
    for (int i = 0; i < N; i++) host[i] = (float)(i % 89) * 0.5f;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CUfunction step, allreduce;
    CHECK(cuModuleGetFunction(&step, NULL, "step"));
    CHECK(cuModuleGetFunction(&allreduce, NULL,
                              "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE"));
    CUstream compute, comm;
    CHECK(cuStreamCreate(&compute, 1));
    CHECK(cuStreamCreateWithPriority(&comm, 1, -1));
    CUevent grads, reduced;
    CHECK(cuEventCreate(&grads, 2));
    CHECK(cuEventCreate(&reduced, 2));
    CUdeviceptr w, g;
    CHECK(cuMemAlloc_v2(&w, BYTES));
    CHECK(cuMemAlloc_v2(&g, BYTES));
    CHECK(cuMemcpyHtoD_v2(w, host, BYTES));
    CHECK(cuMemcpyHtoD_v2(g, host, BYTES));
    for (int i = 0; i < 8; i++) {
        CHECK(launch(step, N / 256, compute, g, w, 1 + i, 0.5f, 1.0f)); /* k<i>: gradients from weights */
        CHECK(cuEventRecord(grads, compute));
        CHECK(cuStreamWaitEvent(comm, grads, 0));
        unsigned grid = i == 7 ? 400 : i % 2 == 0 ? 100 : 24; /* ring, tree; the last: wider than the device */
        CHECK(launch(allreduce, grid, comm, g, g, 20 + i, 0.5f, 0.0f)); /* nccl<20+i> */
        CHECK(cuEventRecord(reduced, comm));
        CHECK(cuStreamWaitEvent(compute, reduced, 0));
        CHECK(launch(step, N / 256, compute, w, g, 40 + i, 1.0f, -0.25f)); /* k<40+i>: the update */
    }
    CHECK(cuCtxSynchronize());
    CHECK(cuMemcpyDtoH_v2(host, w, BYTES));
    unsigned h = 2166136261u;
    for (int i = 0; i < N; i++) {
        unsigned bits;
        memcpy(&bits, &host[i], 4);
        h = (h ^ bits) * 16777619u;
    }
    printf("checksum %08x\ndone\n", h);
    return 0;
}
