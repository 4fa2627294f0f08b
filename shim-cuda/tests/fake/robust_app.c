/*
 * A driver-API program for the robustness tests (tests/robust.rs) and the fake-driver variant of the
 * peak-RSS benchmark (bench/gpu/rss): one scenario per run, chosen by argv[1] (or ROBUST_SCENARIO; the
 * count by argv[2] or ROBUST_COUNT); it prints the result
 * codes of the calls that matter ("name=<CUresult>") and deterministic values, so a test compares
 * them with the native run's or with the native code it expects.
 *
 *   chain N      N dependent launches of step on a non-blocking stream, then cuStreamSynchronize,
 *                cuEventSynchronize on an event recorded after them, cuCtxSynchronize.
 *   flood N      N launches without a sync (each adds 1 to every element), then one sync; prints
 *                the value and the process's peak resident set (VmHWM, kB).
 *   pageable N   N copies of 64 KiB from pageable memory, the source overwritten right after each,
 *                without a sync, each into its own slice of a device buffer, behind a long kernel;
 *                then one sync and a checksum.
 *   evquery      kernels k1..k6 then a (logically recorded) event; cuEventQuery polled until it
 *                stops saying not-ready (the fake faults at k5 with FAKE_CUDA_FAULT_KERNEL=k5).
 *   copy         a pinned host-to-device copy, then a sync: each call's code.
 *   host         a host function, then a sync: each call's code and whether it ran.
 *   timing       a timing event recorded on the stream, then a stream wait on it: each call's code.
 *
 * Build: cc -o robust_app robust_app.c -L<dir> -lcuda
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
CUresult cuMemAllocHost_v2(void **, size_t);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr, const void *, size_t, CUstream);
CUresult cuStreamCreate(CUstream *, unsigned);
CUresult cuStreamSynchronize(CUstream);
CUresult cuStreamWaitEvent(CUstream, CUevent, unsigned);
CUresult cuLaunchHostFunc(CUstream, void (*)(void *), void *);
CUresult cuEventCreate(CUevent *, unsigned);
CUresult cuEventRecord(CUevent, CUstream);
CUresult cuEventQuery(CUevent);
CUresult cuEventSynchronize(CUevent);
CUresult cuCtxSynchronize(void);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **, void **);

#define N 256
#define CHECK(x)                                                        \
    do {                                                                \
        CUresult r_ = (x);                                              \
        if (r_) { printf("FAILED %s = %d\n", #x, r_); fflush(stdout); exit(1); } \
    } while (0)

static CUfunction STEP;
static CUresult step(CUstream s, CUdeviceptr dst, CUdeviceptr src, int tag, float mul, float add) {
    int n = N;
    void *params[] = {&dst, &src, &n, &tag, &mul, &add};
    return cuLaunchKernel(STEP, 1, 1, 1, N, 1, 1, 0, s, params, NULL);
}
static const float *dev(CUdeviceptr p) { return (const float *)(uintptr_t)p; }

static long peak_rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) kb = atol(line + 6);
    if (f) fclose(f);
    return kb;
}

static int HOST_RAN;
static void host_fn(void *p) { (void)p; HOST_RAN = 1; }

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : getenv("ROBUST_SCENARIO") ? getenv("ROBUST_SCENARIO") : "chain";
    const char *n = argc > 2 ? argv[2] : getenv("ROBUST_COUNT");
    long count = n ? atol(n) : 16;
    CHECK(cuInit(0));
    CUcontext ctx;
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleGetFunction(&STEP, NULL, "step"));
    CUstream s;
    CHECK(cuStreamCreate(&s, 1)); /* CU_STREAM_NON_BLOCKING */
    CUdeviceptr x, zero;
    CHECK(cuMemAlloc_v2(&x, N * sizeof(float)));
    CHECK(cuMemAlloc_v2(&zero, N * sizeof(float)));
    memset((void *)(uintptr_t)x, 0, N * sizeof(float));
    memset((void *)(uintptr_t)zero, 0, N * sizeof(float));

    if (strcmp(what, "chain") == 0) {
        CUevent e;
        CHECK(cuEventCreate(&e, 2)); /* CU_EVENT_DISABLE_TIMING: recorded logically under bind mode */
        for (long i = 0; i < count; i++) CHECK(step(s, x, zero, (int)(i % 80), 1.0f, 1.0f));
        CHECK(cuEventRecord(e, s));
        printf("stream_sync=%d\n", cuStreamSynchronize(s));
        printf("event_sync=%d\n", cuEventSynchronize(e));
        printf("ctx_sync=%d\n", cuCtxSynchronize());
        printf("x0=%.1f\n", dev(x)[0]);
    } else if (strcmp(what, "flood") == 0) {
        for (long i = 0; i < count; i++) CHECK(step(s, x, zero, (int)(i % 80), 1.0f, 1.0f));
        printf("stream_sync=%d\n", cuStreamSynchronize(s));
        printf("x0=%.1f\n", dev(x)[0]);
        printf("vmhwm_kb=%ld\n", peak_rss_kb());
    } else if (strcmp(what, "pageable") == 0) {
        enum { CHUNK = 64 * 1024 };
        CUdeviceptr big;
        CHECK(cuMemAlloc_v2(&big, (size_t)count * CHUNK));
        unsigned char *src = malloc(CHUNK); /* pageable */
        CHECK(step(s, x, zero, 95, 1.0f, 1.0f)); /* 300 ms in the fake: the copies queue behind it */
        for (long i = 0; i < count; i++) {
            memset(src, (int)(i % 251) + 1, CHUNK);
            CHECK(cuMemcpyHtoDAsync_v2(big + (CUdeviceptr)i * CHUNK, src, CHUNK, s));
            memset(src, 0, CHUNK); /* changed right after the call: the copy must carry the old bytes */
        }
        printf("stream_sync=%d\n", cuStreamSynchronize(s));
        unsigned long sum = 0;
        for (long i = 0; i < count * CHUNK; i++) sum += ((const unsigned char *)(uintptr_t)big)[i];
        printf("sum=%lu\n", sum);
    } else if (strcmp(what, "evquery") == 0) {
        CUevent e;
        CHECK(cuEventCreate(&e, 2));
        for (int k = 1; k <= 6; k++) CHECK(step(s, x, zero, k, 1.0f, 1.0f));
        CHECK(cuEventRecord(e, s));
        CUresult q = 600;
        for (int i = 0; i < 10000 && q == 600; i++) { /* CUDA_ERROR_NOT_READY; 10 s at most */
            q = cuEventQuery(e);
            if (q == 600) usleep(1000);
        }
        printf("event_query=%d\n", q);
    } else if (strcmp(what, "copy") == 0) {
        float *pinned;
        CHECK(cuMemAllocHost_v2((void **)&pinned, N * sizeof(float)));
        for (int i = 0; i < N; i++) pinned[i] = 3.0f;
        printf("copy=%d\n", cuMemcpyHtoDAsync_v2(x, pinned, N * sizeof(float), s));
        printf("stream_sync=%d\n", cuStreamSynchronize(s));
    } else if (strcmp(what, "host") == 0) {
        printf("host_func=%d\n", cuLaunchHostFunc(s, host_fn, NULL));
        printf("stream_sync=%d\n", cuStreamSynchronize(s));
        printf("host_ran=%d\n", HOST_RAN);
    } else if (strcmp(what, "timing") == 0) {
        CUevent t;
        CUstream other;
        CHECK(cuStreamCreate(&other, 1));
        CHECK(cuEventCreate(&t, 0)); /* a timing event: recorded by the driver under bind mode too */
        CHECK(step(s, x, zero, 1, 1.0f, 1.0f));
        printf("event_record=%d\n", cuEventRecord(t, s));
        printf("stream_wait_event=%d\n", cuStreamWaitEvent(other, t, 0));
        printf("stream_sync=%d\n", cuStreamSynchronize(other));
    } else {
        printf("unknown scenario %s\n", what);
        return 2;
    }
    printf("done\n");
    return 0;
}
