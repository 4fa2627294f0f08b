/*
 * The driver surface beyond launches, copies and events, for the bind-mode CI test
 * tests/bind_surface.rs: stream-taking entry points bind mode forwards after a drain (stream-ordered
 * allocation and free, prefetch, stream memory writes and waits, a batched copy, an external
 * semaphore signal, attach), lifetimes (module unload, stream and event destroy with work pending,
 * per-thread default streams of exited threads), other contexts and devices (FAKE_CUDA_DEVICES=2),
 * and fork. Runs natively and under the shim against the asynchronous fake libcuda; prints only
 * deterministic results. Kernel step(dst, src, n, tag, mul, add): dst = dst * mul + src + add,
 * "k<tag>" in the execution log (tags 90-99 take 300 ms).
 *
 * Usage: surface_app [fork]
 * Build: cc -o surface_app surface_app.c -L<dir> -lcuda -pthread
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int CUresult;
typedef uint64_t CUdeviceptr;
typedef void *CUstream;
typedef void *CUevent;
typedef void *CUfunction;
typedef void *CUcontext;
typedef struct { int type, id; } CUmemLocation;

CUresult cuInit(unsigned);
CUresult cuDeviceGetCount(int *);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, int);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxCreate_v2(CUcontext *, unsigned, int);
CUresult cuCtxDestroy_v2(CUcontext);
CUresult cuModuleLoadData(void **, const void *);
CUresult cuModuleUnload(void *);
CUresult cuModuleGetFunction(CUfunction *, void *, const char *);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemAllocAsync(CUdeviceptr *, size_t, CUstream);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
CUresult cuMemPrefetchAsync_v2(CUdeviceptr, size_t, CUmemLocation, unsigned, CUstream);
CUresult cuStreamWriteValue32_v2(CUstream, CUdeviceptr, unsigned, unsigned);
CUresult cuStreamWaitValue32_v2(CUstream, CUdeviceptr, unsigned, unsigned);
CUresult cuMemcpyBatchAsync_v2(CUdeviceptr *, CUdeviceptr *, size_t *, size_t, void *, size_t *, size_t, CUstream);
CUresult cuSignalExternalSemaphoresAsync(const void *, const void *, unsigned, CUstream);
CUresult cuStreamAttachMemAsync(CUstream, CUdeviceptr, size_t, unsigned);
CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void *, size_t);
CUresult cuMemcpyDtoH_v2(void *, CUdeviceptr, size_t);
CUresult cuStreamCreate(CUstream *, unsigned);
CUresult cuStreamDestroy_v2(CUstream);
CUresult cuStreamSynchronize(CUstream);
CUresult cuStreamSynchronize_ptsz(CUstream);
CUresult cuStreamWaitEvent(CUstream, CUevent, unsigned);
CUresult cuEventCreate(CUevent *, unsigned);
CUresult cuEventRecord(CUevent, CUstream);
CUresult cuEventDestroy_v2(CUevent);
CUresult cuCtxSynchronize(void);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **, void **);
CUresult cuLaunchKernel_ptsz(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
CUresult cuStreamBeginCapture_v2(CUstream, int);
CUresult cuStreamEndCapture(CUstream, void **);
CUresult cuGraphAddEventWaitNode(void **, void *, const void *, size_t, CUevent);
CUresult cuGraphInstantiateWithFlags(void **, void *, unsigned long long);
CUresult cuGraphLaunch(void *, CUstream);
void fake_mark(const char *);

#define N 256
#define CHECK(x)                                                                  \
    do {                                                                          \
        CUresult r_ = (x);                                                        \
        if (r_) { printf("%s failed: %d\n", #x, r_); exit(1); }                   \
    } while (0)

static CUfunction STEP;

static void step(CUstream s, CUdeviceptr dst, CUdeviceptr src, int tag, float mul, float add, int per_thread) {
    int n = N;
    void *p[] = {&dst, &src, &n, &tag, &mul, &add};
    if (per_thread) CHECK(cuLaunchKernel_ptsz(STEP, 1, 1, 1, N, 1, 1, 0, s, p, NULL));
    else CHECK(cuLaunchKernel(STEP, 1, 1, 1, N, 1, 1, 0, s, p, NULL));
}

static unsigned checksum(CUdeviceptr d) {
    float h[N];
    CHECK(cuMemcpyDtoH_v2(h, d, sizeof h));
    unsigned sum = 0;
    for (int i = 0; i < N; i++) {
        unsigned u;
        memcpy(&u, &h[i], 4);
        sum = sum * 31 + u;
    }
    return sum;
}

static CUdeviceptr THREAD_BUF[3];
static CUcontext CTX;
static void *worker(void *arg) {
    long i = (long)arg;
    CHECK(cuCtxSetCurrent(CTX)); /* a new thread has no current context */
    step(NULL, THREAD_BUF[i], THREAD_BUF[i], 30 + (int)i, 2.0f, 1.0f, 1); /* the per-thread default stream */
    CHECK(cuStreamSynchronize_ptsz(NULL));
    return NULL;
}

int main(int argc, char **argv) {
    int fork_too = argc > 1 && strcmp(argv[1], "fork") == 0;
    CUcontext ctx;
    void *mod;
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CTX = ctx;
    CHECK(cuModuleLoadData(&mod, "image"));
    CHECK(cuModuleGetFunction(&STEP, mod, "step"));
    CUdeviceptr x, y, flag, z, q;
    CHECK(cuMemAlloc_v2(&q, N * 4)); /* the created context's own buffer */
    CHECK(cuMemAlloc_v2(&x, N * 4));
    CHECK(cuMemAlloc_v2(&y, N * 4));
    CHECK(cuMemAlloc_v2(&flag, 4));
    CHECK(cuMemAlloc_v2(&z, N * 4));
    float ones[N];
    for (int i = 0; i < N; i++) ones[i] = 1.0f + (float)i / 8;
    CHECK(cuMemcpyHtoD_v2(x, ones, sizeof ones));
    CHECK(cuMemcpyHtoD_v2(y, ones, sizeof ones));
    CHECK(cuMemcpyHtoD_v2(q, ones, sizeof ones));
    unsigned zero = 0;
    CHECK(cuMemcpyHtoD_v2(flag, &zero, 4));
    CUstream s1, s2, s3;
    CHECK(cuStreamCreate(&s1, 1));
    CHECK(cuStreamCreate(&s2, 1));
    CHECK(cuStreamCreate(&s3, 1));

    /* Stream-ordered allocation, prefetch, attach and an external semaphore signal follow the
     * logical work of their stream (drained first). */
    step(s1, x, y, 1, 1.5f, 0.5f, 0);
    CUdeviceptr a;
    CHECK(cuMemAllocAsync(&a, N * 4, s1));
    step(s1, x, y, 2, 0.5f, 1.0f, 0);
    CUmemLocation loc = {1, 0};
    CHECK(cuMemPrefetchAsync_v2(x, N * 4, loc, 0, s1));
    step(s1, x, y, 3, 1.25f, 0.0f, 0);
    CHECK(cuStreamAttachMemAsync(s1, x, 0, 0));
    step(s1, x, y, 4, 2.0f, -1.0f, 0);
    CHECK(cuSignalExternalSemaphoresAsync(NULL, NULL, 0, s1));
    /* A batched copy x -> a, then a kernel reading a: the copy follows k4, k5 follows the copy. */
    static CUdeviceptr dsts[1], srcs[1];
    static size_t sizes[1] = {N * 4};
    dsts[0] = a;
    srcs[0] = x;
    CHECK(cuMemcpyBatchAsync_v2(dsts, srcs, sizes, 1, NULL, NULL, 0, s1));
    step(s1, y, a, 5, 1.0f, 0.25f, 0);
    /* A stream memory write on s1 after k6; s2 waits for the value, then runs k7 (handed to the
     * driver: k7 and k8 follow the wait natively). */
    step(s1, x, y, 6, 0.75f, 2.0f, 0);
    CHECK(cuStreamWriteValue32_v2(s1, flag, 1, 0));
    CHECK(cuStreamWaitValue32_v2(s2, flag, 1, 0));
    step(s2, y, x, 7, 1.0f, 1.0f, 0);
    step(s2, y, x, 8, 0.5f, 0.0f, 0);
    CHECK(cuMemFreeAsync(a, s1));
    CHECK(cuStreamSynchronize(s2));
    fake_mark("after sync s2");
    CHECK(cuStreamSynchronize(s1));
    printf("surface x=%08x y=%08x\n", checksum(x), checksum(y));

    /* A graph with an event-wait node on an event recorded logically (behind the long k91) waits
     * for it (the fake's graphs 1 and 2: the captured graph and its executable graph). */
    void *graph, *exec, *node;
    CUevent gate;
    CHECK(cuEventCreate(&gate, 2));
    CHECK(cuStreamBeginCapture_v2(s3, 0));
    step(s3, y, x, 50, 1.0f, 1.0f, 0);
    CHECK(cuStreamEndCapture(s3, &graph));
    CHECK(cuGraphAddEventWaitNode(&node, graph, NULL, 0, gate));
    CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0));
    step(s1, z, x, 91, 1.0f, 0.0f, 0);
    CHECK(cuEventRecord(gate, s1));
    CHECK(cuGraphLaunch(exec, s3)); /* bound */
    CHECK(cuGraphLaunch(exec, s2)); /* s2 was handed to the driver: native */
    CHECK(cuCtxSynchronize());

    /* Lifetimes: stream and event destroy with work pending return at once; the work completes. */
    step(s3, z, x, 90, 1.0f, 3.0f, 0);
    CUevent e;
    CHECK(cuEventCreate(&e, 2));
    CHECK(cuEventRecord(e, s3));
    CHECK(cuStreamDestroy_v2(s3));
    CHECK(cuEventDestroy_v2(e));
    fake_mark("after destroy");
    CHECK(cuCtxSynchronize());
    fake_mark("after ctx sync");
    printf("destroyed z=%08x\n", checksum(z));

    /* Per-thread default streams of threads that exit. */
    for (int i = 0; i < 3; i++) {
        CHECK(cuMemAlloc_v2(&THREAD_BUF[i], N * 4));
        CHECK(cuMemcpyHtoD_v2(THREAD_BUF[i], ones, sizeof ones));
    }
    pthread_t t[3];
    for (long i = 0; i < 3; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    printf("threads %08x %08x %08x\n", checksum(THREAD_BUF[0]), checksum(THREAD_BUF[1]), checksum(THREAD_BUF[2]));

    /* Other devices and contexts: a launch on device 1 is bound to its own pool, a launch on a created
     * context forwarded natively, each after what it waits on. */
    int devices = 0;
    CHECK(cuDeviceGetCount(&devices));
    CUevent done;
    CHECK(cuEventCreate(&done, 2));
    step(s1, x, y, 19, 1.0f, 0.5f, 0);
    CHECK(cuEventRecord(done, s1));
    if (devices > 1) {
        CUcontext dev1;
        CUstream t1;
        CHECK(cuDevicePrimaryCtxRetain(&dev1, 1));
        CHECK(cuCtxSetCurrent(dev1));
        CHECK(cuStreamCreate(&t1, 1));
        CHECK(cuStreamWaitEvent(t1, done, 0));
        step(t1, y, x, 20, 1.0f, 1.0f, 0);
        CHECK(cuStreamSynchronize(t1));
        fake_mark("after device 1");
        CHECK(cuCtxSetCurrent(ctx));
    }
    CUcontext created;
    CUstream t2;
    CHECK(cuCtxCreate_v2(&created, 0, 0));
    CHECK(cuStreamCreate(&t2, 1));
    step(t2, q, q, 21, 2.0f, 0.0f, 0); /* unordered with s1's work: touches only q */
    CHECK(cuStreamSynchronize(t2));
    fake_mark("after created context");
    CHECK(cuCtxDestroy_v2(created));
    CHECK(cuCtxSetCurrent(ctx));
    step(s1, x, y, 22, 0.5f, 0.5f, 0);
    CHECK(cuStreamSynchronize(s1));
    printf("contexts x=%08x y=%08x q=%08x devices=%d\n", checksum(x), checksum(y), checksum(q), devices);

    /* A module unload waits for the work launched from it; a reloaded function launches again. */
    step(s1, x, y, 23, 1.0f, 1.0f, 0);
    CHECK(cuModuleUnload(mod));
    CHECK(cuModuleLoadData(&mod, "image"));
    CHECK(cuModuleGetFunction(&STEP, mod, "step"));
    step(s1, x, y, 24, 1.0f, 1.0f, 0);
    CHECK(cuCtxSynchronize());
    printf("reloaded x=%08x\n", checksum(x));

    if (fork_too) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            /* The child: its own stream and launch (the fake driver runs it on a new worker). */
            CUstream c;
            CUdeviceptr w;
            CHECK(cuStreamCreate(&c, 1));
            CHECK(cuMemAlloc_v2(&w, N * 4));
            CHECK(cuMemcpyHtoD_v2(w, ones, sizeof ones));
            step(c, w, w, 40, 3.0f, 1.0f, 0);
            step(c, w, w, 41, 0.5f, 1.0f, 0);
            CHECK(cuStreamSynchronize(c));
            printf("child w=%08x\n", checksum(w));
            fflush(stdout);
            _exit(0);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        printf("child exited %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    printf("done\n");
    return 0;
}
