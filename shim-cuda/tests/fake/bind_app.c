/*
 * A driver-API program with dependent launches on several streams, for the bind-mode CI test
 * (tests/bind.rs). Runs against the fake libcuda in its asynchronous mode (FAKE_CUDA_DELAY_US),
 * natively and under the shim in bind mode; prints only deterministic results, so both runs must
 * print the same. The fake's execution log (FAKE_CUDA_EXEC_LOG) shows which operation ran where
 * and when; the test checks the happens-before edges listed at each step against it.
 *
 * Kernel: step(dst, src, n, tag, mul, add): dst[i] = dst[i] * mul + src[i] + add; the tag names
 * the launch ("k<tag>" in the execution log). Allocations: x = A1, y = A2, z = A3, w = A4,
 * pinned = A5 (the fake numbers them in allocation order).
 *
 * Covers: pageable H2D staged at the call (the buffer is overwritten right after), a chain on a
 * blocking stream, an event waited on by a non-blocking stream and re-recorded (the earlier wait
 * keeps its generation), a fill, cuLaunchKernelEx with attributes, the legacy default stream's
 * implicit ordering with blocking streams, the extra-buffer argument form, a host function, D2H
 * to pageable memory (complete on return), the per-thread default stream (_ptsz), pinned D2H with
 * an event synchronize, a query while a long kernel runs, timing events, dynamic shared memory
 * raised with cuFuncSetAttribute, cluster and cooperative launches (bound only to partitions that
 * hold them), invalid launches incl. a cooperative grid larger than the device and a partial
 * cluster (same error as the driver, synchronously), context sync. BIND_APP_IPC=1: first a CUDA IPC import,
 * a launch on it and its unmapping.
 *
 * Build: cc -o bind_app bind_app.c -L<dir> -lcuda
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
typedef struct {
    unsigned id;
    char pad[4];
    unsigned char value[64];
} CUlaunchAttribute;
typedef struct {
    unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned numAttrs;
} CUlaunchConfig;

CUresult cuInit(unsigned);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, int);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuModuleGetFunction(CUfunction *, void *, const char *);
CUresult cuFuncSetAttribute(CUfunction, int, int);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemAllocHost_v2(void **, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
typedef struct {
    char reserved[64];
} CUipcMemHandle;
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *, CUipcMemHandle, unsigned);
CUresult cuIpcCloseMemHandle(CUdeviceptr);
CUresult cuMemFreeHost(void *);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr, const void *, size_t, CUstream);
CUresult cuMemcpyDtoHAsync_v2(void *, CUdeviceptr, size_t, CUstream);
CUresult cuMemsetD32Async(CUdeviceptr, unsigned, size_t, CUstream);
CUresult cuStreamCreate(CUstream *, unsigned);
CUresult cuStreamCreateWithPriority(CUstream *, unsigned, int);
CUresult cuStreamDestroy_v2(CUstream);
CUresult cuStreamSynchronize(CUstream);
CUresult cuStreamSynchronize_ptsz(CUstream);
CUresult cuStreamQuery(CUstream);
CUresult cuStreamWaitEvent(CUstream, CUevent, unsigned);
CUresult cuLaunchHostFunc(CUstream, void (*)(void *), void *);
CUresult cuEventCreate(CUevent *, unsigned);
CUresult cuEventRecord(CUevent, CUstream);
CUresult cuEventQuery(CUevent);
CUresult cuEventSynchronize(CUevent);
CUresult cuEventDestroy_v2(CUevent);
CUresult cuCtxSynchronize(void);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **, void **);
CUresult cuLaunchKernel_ptsz(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
CUresult cuLaunchKernelEx(const CUlaunchConfig *, CUfunction, void **, void **);
CUresult cuLaunchCooperativeKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   CUstream, void **);
void fake_mark(const char *);

#define N 4096
#define BYTES (N * sizeof(float))
#define CHECK(x) do { CUresult r_ = (x); if (r_) { printf("FAILED %s = %d\n", #x, r_); exit(1); } } while (0)

static CUfunction STEP;

static unsigned checksum(const float *v) {
    unsigned h = 2166136261u;
    for (int i = 0; i < N; i++) {
        unsigned bits;
        memcpy(&bits, &v[i], 4);
        h = (h ^ bits) * 16777619u;
    }
    return h;
}
static const float *dev(CUdeviceptr p) { return (const float *)(uintptr_t)p; } /* fake device memory is host memory */

/* step(dst, src, N, tag, mul, add) on `s` through cuLaunchKernel */
static CUresult step(CUstream s, CUdeviceptr dst, CUdeviceptr src, int tag, float mul, float add) {
    int n = N;
    void *params[] = {&dst, &src, &n, &tag, &mul, &add};
    return cuLaunchKernel(STEP, N / 256, 1, 1, 256, 1, 1, 0, s, params, NULL);
}

static float HOST_SEEN;
static void host_fn(void *p) { HOST_SEEN = *(const float *)p; fake_mark("host function ran"); }

int main(void) {
    static float host[N], back[N];
    for (int i = 0; i < N; i++) host[i] = (float)(i % 97) * 0.25f;

    CHECK(cuInit(0));
    CUcontext ctx;
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleGetFunction(&STEP, NULL, "step"));
    CUstream s1, s2, s3;
    CHECK(cuStreamCreate(&s1, 0));                 /* blocking */
    CHECK(cuStreamCreate(&s2, 1));                 /* CU_STREAM_NON_BLOCKING */
    CHECK(cuStreamCreateWithPriority(&s3, 0, -1)); /* blocking, high priority */
    CUevent e1, e2, t0, t1;
    CHECK(cuEventCreate(&e1, 2)); /* CU_EVENT_DISABLE_TIMING */
    CHECK(cuEventCreate(&e2, 2));
    CHECK(cuEventCreate(&t0, 0)); /* timing events */
    CHECK(cuEventCreate(&t1, 0));
    CUdeviceptr x, y, z, w;
    CHECK(cuMemAlloc_v2(&x, BYTES));
    CHECK(cuMemAlloc_v2(&y, BYTES));
    CHECK(cuMemAlloc_v2(&z, BYTES));
    CHECK(cuMemAlloc_v2(&w, BYTES));
    float *pinned;
    CHECK(cuMemAllocHost_v2((void **)&pinned, BYTES));
    fake_mark("start");
    if (getenv("BIND_APP_IPC")) { /* import another process's memory (CUDA IPC); prints nothing */
        CUipcMemHandle h;
        memset(&h, 0, sizeof h);
        CUdeviceptr imported;
        CHECK(cuIpcOpenMemHandle_v2(&imported, h, 1)); /* CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS */
        CHECK(step(s2, imported, imported, 90, 1.0f, 0.0f)); /* k90 uses the imported memory */
        CHECK(cuIpcCloseMemHandle(imported));                /* which k90 must have used by now */
    }

    /* copy A1+0<-staged: pageable source, overwritten as soon as the call returns */
    CHECK(cuMemcpyHtoDAsync_v2(x, host, BYTES, s1));
    for (int i = 0; i < N; i++) host[i] = -1000.0f;
    CHECK(cuEventRecord(t0, s1));
    CHECK(step(s1, x, x, 1, 0.5f, 1.0f));   /* k1 after the copy */
    CHECK(step(s1, x, x, 2, 0.25f, 3.0f));  /* k2 after k1 */
    CHECK(cuEventRecord(t1, s1));
    CHECK(cuEventRecord(e1, s1));
    CHECK(cuStreamWaitEvent(s2, e1, 0));
    CHECK(cuMemsetD32Async(z, 0x3f800000u, N, s3)); /* fill A3+0 */
    CHECK(step(s2, y, x, 3, 1.0f, 0.0f));   /* k3 after k2 (e1, first generation) */
    CHECK(step(s3, z, z, 4, 2.0f, 0.5f));   /* k4 after the fill */
    CHECK(cuEventRecord(e1, s3));           /* a new generation; the earlier wait keeps the old one */
    CHECK(cuStreamWaitEvent(s2, e1, 0));
    {   /* k5 after k3 (stream order) and k4 (e1, second generation), through cuLaunchKernelEx */
        int n = N, tag = 5;
        float mul = 0.5f, add = 1.0f;
        void *params[] = {&y, &z, &n, &tag, &mul, &add};
        CUlaunchAttribute attrs[2];
        memset(attrs, 0, sizeof attrs);
        attrs[0].id = 8;  /* CU_LAUNCH_ATTRIBUTE_PRIORITY */
        int prio = -1;
        memcpy(attrs[0].value, &prio, 4);
        attrs[1].id = 10; /* CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN: passed through raw */
        attrs[1].value[0] = 1;
        CUlaunchConfig cfg = {N / 256, 1, 1, 256, 1, 1, 0, s2, attrs, 2};
        CHECK(cuLaunchKernelEx(&cfg, STEP, params, NULL));
    }
    CHECK(cuStreamSynchronize(s2));
    fake_mark("after sync s2");
    printf("y after sync s2: %08x\n", checksum(dev(y)));

    CHECK(step(NULL, w, x, 6, 0.0f, 2.0f)); /* k6, legacy stream: after k2 (s1) and k4 (s3) */
    {   /* k7 on blocking s1, after k6 (legacy), arguments in the extra buffer form */
        struct { CUdeviceptr dst, src; int n, tag; float mul, add; } buf = {x, w, N, 7, 1.0f, 0.0f};
        size_t size = sizeof buf;
        void *extra[] = {(void *)1, &buf, (void *)2, &size, (void *)0};
        CHECK(cuLaunchKernel(STEP, N / 256, 1, 1, 256, 1, 1, 0, s1, NULL, extra));
    }
    CHECK(cuLaunchHostFunc(s1, host_fn, (void *)(uintptr_t)(x + 5 * sizeof(float)))); /* after k7 */
    CHECK(cuMemcpyDtoHAsync_v2(back, x, BYTES, s1)); /* pageable destination: complete on return */
    fake_mark("after d2h pageable");
    printf("x via pageable d2h: %08x\n", checksum(back));
    printf("host function saw x[5] = %g\n", HOST_SEEN);

    {   /* k8 on the per-thread default stream: after k6 (legacy) */
        int n = N, tag = 8;
        float mul = 1.0f, add = 0.0f;
        void *params[] = {&z, &w, &n, &tag, &mul, &add};
        CHECK(cuLaunchKernel_ptsz(STEP, N / 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    }
    CHECK(cuStreamSynchronize_ptsz(NULL));
    fake_mark("after sync ptsz");
    printf("z after sync ptsz: %08x\n", checksum(dev(z)));

    CHECK(cuMemcpyDtoHAsync_v2(pinned, z, BYTES, s3)); /* copy A5+0<-A3+0 */
    CHECK(cuEventRecord(e2, s3));
    CHECK(step(s3, w, w, 99, 1.0f, 0.0f));   /* k99: a long kernel (300 ms) */
    printf("stream query while a kernel runs: %d\n", cuStreamQuery(s3));
    CHECK(cuEventSynchronize(e2));
    fake_mark("after event sync e2");
    printf("pinned after event sync: %08x\n", checksum(pinned));

    CHECK(cuFuncSetAttribute(STEP, 8, 98304)); /* raise the dynamic shared memory limit */
    {   /* k9: 64 KiB of dynamic shared memory, now allowed */
        int n = N, tag = 9;
        float mul = 1.0f, add = 1.0f;
        void *params[] = {&w, &w, &n, &tag, &mul, &add};
        CHECK(cuLaunchKernel(STEP, N / 256, 1, 1, 256, 1, 1, 65536, s3, params, NULL));
    }
    {   /* k10: a cluster launch (1x1x1 clusters) on s2, in place on y (k9 on s3 writes w
         * unordered with s2: reading w here would make the output depend on timing) */
        int n = N, tag = 10;
        float mul = 1.0f, add = 0.0f;
        void *params[] = {&y, &y, &n, &tag, &mul, &add};
        CUlaunchAttribute attr;
        memset(&attr, 0, sizeof attr);
        attr.id = 4; /* CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION */
        unsigned dims[3] = {1, 1, 1};
        memcpy(attr.value, dims, sizeof dims);
        CUlaunchConfig cfg = {N / 256, 1, 1, 256, 1, 1, 0, s2, &attr, 1};
        CHECK(cuLaunchKernelEx(&cfg, STEP, params, NULL));
    }
    {   /* cooperative and cluster launches: bound only to partitions that hold them (the fake holds 8
         * blocks per SM and needs one SM per block of a cluster; its leaves have 8, 8, 8, 8, 4 SMs) */
        int n = N, tag = 11;
        float mul = 1.0f, add = 2.0f;
        void *params[] = {&z, &z, &n, &tag, &mul, &add};
        /* k11: 100 co-resident blocks need 13 SMs */
        CHECK(cuLaunchCooperativeKernel(STEP, 100, 1, 1, 256, 1, 1, 0, s3, params));
        int tag12 = 12;
        void *params12[] = {&y, &y, &n, &tag12, &mul, &add};
        CUlaunchAttribute coop;
        memset(&coop, 0, sizeof coop);
        coop.id = 2; /* CU_LAUNCH_ATTRIBUTE_COOPERATIVE */
        coop.value[0] = 1;
        CUlaunchConfig cfg = {40, 1, 1, 256, 1, 1, 0, s2, &coop, 1}; /* k12: 40 blocks need 5 SMs */
        CHECK(cuLaunchKernelEx(&cfg, STEP, params12, NULL));
        int tag13 = 13;
        void *params13[] = {&x, &x, &n, &tag13, &mul, &add};
        CUlaunchAttribute cl;
        memset(&cl, 0, sizeof cl);
        cl.id = 4; /* CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION: clusters of 8 blocks need 8 SMs */
        unsigned dims[3] = {8, 1, 1};
        memcpy(cl.value, dims, sizeof dims);
        CUlaunchConfig ccfg = {16, 1, 1, 256, 1, 1, 0, s1, &cl, 1}; /* k13 */
        CHECK(cuLaunchKernelEx(&ccfg, STEP, params13, NULL));
    }
    CHECK(cuCtxSynchronize());
    fake_mark("after ctx sync");
    printf("queries after sync: stream %d event %d\n", cuStreamQuery(s3), cuEventQuery(e2));

    /* invalid launches: the driver's error, synchronously */
    {
        int n = N, tag = 0;
        float mul = 1.0f, add = 0.0f;
        void *params[] = {&w, &w, &n, &tag, &mul, &add};
        size_t size = 32;
        void *extra[] = {(void *)1, params, (void *)2, &size, (void *)0};
        printf("invalid: 2048 threads %d\n", cuLaunchKernel(STEP, 1, 1, 1, 2048, 1, 1, 0, s1, params, NULL));
        printf("invalid: zero grid %d\n", cuLaunchKernel(STEP, 0, 1, 1, 32, 1, 1, 0, s1, params, NULL));
        printf("invalid: 128 KiB shared %d\n", cuLaunchKernel(STEP, 1, 1, 1, 32, 1, 1, 131072, s1, params, NULL));
        printf("invalid: params and extra %d\n", cuLaunchKernel(STEP, 1, 1, 1, 32, 1, 1, 0, s1, params, extra));
        /* more than the device's 36 SMs x 8 blocks co-resident: CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE */
        printf("invalid: cooperative 300 blocks %d\n", cuLaunchCooperativeKernel(STEP, 300, 1, 1, 32, 1, 1, 0, s1, params));
        CUlaunchAttribute cl;
        memset(&cl, 0, sizeof cl);
        cl.id = 4;
        unsigned dims[3] = {4, 1, 1};
        memcpy(cl.value, dims, sizeof dims);
        CUlaunchConfig bad = {10, 1, 1, 32, 1, 1, 0, s2, &cl, 1}; /* 10 blocks are not whole clusters of 4 */
        printf("invalid: partial cluster %d\n", cuLaunchKernelEx(&bad, STEP, params, NULL));
    }

    printf("final x %08x y %08x z %08x w %08x\n", checksum(dev(x)), checksum(dev(y)), checksum(dev(z)),
           checksum(dev(w)));
    CHECK(cuEventDestroy_v2(e1));
    CHECK(cuEventDestroy_v2(e2));
    CHECK(cuEventDestroy_v2(t0));
    CHECK(cuEventDestroy_v2(t1));
    CHECK(cuStreamDestroy_v2(s1));
    CHECK(cuStreamDestroy_v2(s2));
    CHECK(cuStreamDestroy_v2(s3));
    CHECK(cuMemFreeHost(pinned));
    CHECK(cuMemFree_v2(x));
    CHECK(cuMemFree_v2(y));
    CHECK(cuMemFree_v2(z));
    CHECK(cuMemFree_v2(w));
    puts("done");
    return 0;
}
