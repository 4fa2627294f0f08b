/*
 * One process, two devices (the fake libcuda with FAKE_CUDA_DEVICES=2), switching with
 * cuCtxSetCurrent between the devices' primary contexts: a chain of kernels alternating between
 * a stream of device 0 and a stream of device 1, each waiting on the other device's event (both
 * directions); then, with device 0 current, an event synchronize on device 1's event and a stream
 * synchronize on device 1's stream, each after a long kernel on device 1, and a stream synchronize
 * with no context current, each followed at once by a host read of what that kernel wrote (fake device memory is host memory: a wait that returned
 * early shows as a wrong checksum).
 *
 * Prints checksums and `done`.
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
CUresult cuDeviceGetCount(int *);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, int);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxSynchronize(void);
CUresult cuModuleGetFunction(CUfunction *, void *, const char *);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void *, size_t);
CUresult cuStreamCreate(CUstream *, unsigned);
CUresult cuStreamSynchronize(CUstream);
CUresult cuStreamWaitEvent(CUstream, CUevent, unsigned);
CUresult cuEventCreate(CUevent *, unsigned);
CUresult cuEventRecord(CUevent, CUstream);
CUresult cuEventSynchronize(CUevent);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **, void **);

#define N 4096
#define BYTES (N * sizeof(float))
#define CHECK(x) do { CUresult r_ = (x); if (r_) { printf("FAILED %s = %d\n", #x, r_); exit(1); } } while (0)

static CUfunction STEP;

/* step(dst, src, N, tag, mul, add): dst = dst * mul + src + add; tags >= 90 run 300 ms on the fake */
static void step(CUstream s, CUdeviceptr dst, CUdeviceptr src, int tag, float mul, float add) {
    int n = N;
    void *params[] = {&dst, &src, &n, &tag, &mul, &add};
    CHECK(cuLaunchKernel(STEP, N / 256, 1, 1, 256, 1, 1, 0, s, params, NULL));
}

static unsigned checksum(CUdeviceptr d) {
    const float *v = (const float *)(uintptr_t)d;
    unsigned h = 2166136261u;
    for (int i = 0; i < N; i++) {
        unsigned bits;
        memcpy(&bits, &v[i], 4);
        h = (h ^ bits) * 16777619u;
    }
    return h;
}

int main(void) {
    static float host[N];
    for (int i = 0; i < N; i++) host[i] = (float)(i % 61) * 0.125f;
    CHECK(cuInit(0));
    int devices = 0;
    CHECK(cuDeviceGetCount(&devices));
    if (devices < 2) {
        printf("needs 2 devices, found %d\n", devices);
        return 2;
    }
    CUcontext c0, c1;
    CHECK(cuDevicePrimaryCtxRetain(&c0, 0));
    CHECK(cuDevicePrimaryCtxRetain(&c1, 1));
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuModuleGetFunction(&STEP, NULL, "step"));
    CUstream a;
    CUevent ea;
    CUdeviceptr x;
    CHECK(cuStreamCreate(&a, 1));
    CHECK(cuEventCreate(&ea, 2));
    CHECK(cuMemAlloc_v2(&x, BYTES));
    CHECK(cuMemcpyHtoD_v2(x, host, BYTES));
    CHECK(cuCtxSetCurrent(c1));
    CUstream b;
    CUevent eb;
    CUdeviceptr y;
    CHECK(cuStreamCreate(&b, 1));
    CHECK(cuEventCreate(&eb, 2));
    CHECK(cuMemAlloc_v2(&y, BYTES));
    CHECK(cuMemcpyHtoD_v2(y, host, BYTES));

    for (int i = 0; i < 4; i++) {
        CHECK(cuCtxSetCurrent(c0));
        if (i > 0) CHECK(cuStreamWaitEvent(a, eb, 0)); /* device 0 after device 1 */
        step(a, x, y, 10 + i, 0.5f, 1.0f);             /* k1<i> on device 0 */
        CHECK(cuEventRecord(ea, a));
        CHECK(cuCtxSetCurrent(c1));
        CHECK(cuStreamWaitEvent(b, ea, 0));            /* device 1 after device 0 */
        step(b, y, x, 20 + i, 0.25f, 2.0f);            /* k2<i> on device 1 */
        CHECK(cuEventRecord(eb, b));
    }
    step(b, y, x, 95, 1.0f, 0.5f);                     /* k95: long, on device 1 */
    CHECK(cuEventRecord(eb, b));
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuEventSynchronize(eb));                     /* device 1's event, device 0 current */
    printf("after event sync y=%08x\n", checksum(y));
    CHECK(cuCtxSetCurrent(c1));
    step(b, y, y, 96, 0.5f, 0.0f);                     /* k96: long, on device 1 */
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuStreamSynchronize(b));                     /* device 1's stream, device 0 current */
    printf("after stream sync y=%08x\n", checksum(y));
    CHECK(cuCtxSetCurrent(c1));
    step(b, y, x, 97, 0.25f, 1.0f);                    /* k97: long, on device 1 */
    CHECK(cuCtxSetCurrent(NULL));
    CHECK(cuStreamSynchronize(b));                     /* device 1's stream, no context current */
    printf("after sync without a context y=%08x\n", checksum(y));
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuCtxSynchronize());
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuCtxSynchronize());
    printf("x=%08x y=%08x\ndone\n", checksum(x), checksum(y));
    return 0;
}
