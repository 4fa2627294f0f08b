/*
 * A small HIP application for shim-hip's tests, written against Debian's HIP 5.2 headers and run
 * on the HIP test double (hal-hip/tests/fake/libamdhip64.c), natively and under
 * LD_PRELOAD=libvitamin_hip.so.
 *
 * Per iteration k (of ITERS, argv[1]):
 *   s1 (blocking):     waits e2 (iteration k-1 done), memset partial, reduce_partial (host stub,
 *                      grid 8+k%5), records e1 (no timing) and the timing events around it
 *   s2 (non-blocking): waits e1, reduce_final (module function), axpy (host stub, y += a*x),
 *                      a host callback that reads the sum (happens-before: it must see it),
 *                      copies sum and y to pinned host memory, records e2
 * then s2 is synchronized and the results folded into a hash. Also: a copy from pageable memory
 * (staged), three host threads each launching on its hipStreamPerThread, a launch on
 * hipStreamPerThread, synchronous hipMemcpy / hipMemset on the null stream,
 * stream and event queries, hipEventElapsedTime, an invalid launch (2048 threads: the runtime's
 * hipErrorInvalidValue, synchronously) and, with argv[2] = "fault" (and FAKE_HIP_FAIL_KERNEL set),
 * the code an asynchronous failure reports at the next synchronize.
 *
 * Each iteration also launches, on s2 after the copies, a graph captured from s2 before the loop
 * (y += x; the next iteration's axpy and copy see it).
 * Also two module launches the runtime refuses (a malformed `extra` array: hipErrorInvalidValue; a
 * null function).
 *
 * With APP_FATBIN=<file> the host stubs are registered from that offload bundle (behind a HIPF
 * fat-binary wrapper, as hipcc's start-up code does), and with APP_CODE_OBJECT=<file> the module
 * is loaded from that code object, instead of the double's text images.
 *
 * Prints one line: results=<hash> sum=<bits> cb_ok=<0|1> invalid=<code> elapsed_ok=<0|1> sync=<code>
 *                  extra=<code> null=<code>
 */
#define __HIP_PLATFORM_AMD__ 1
#include <hip/hip_runtime_api.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void **__hipRegisterFatBinary(const void *data);
void __hipRegisterFunction(void **modules, const void *hostFunction, char *deviceFunction, const char *deviceName,
                           unsigned int threadLimit, void *tid, void *bid, dim3 *blockDim, dim3 *gridDim, int *wSize);

/* Host stubs: what hipcc generates for each __global__ function is a host symbol whose address
 * the program launches with; here plain objects stand in for them. */
static const char stub_reduce_partial = 0, stub_axpy = 0, stub_empty = 0;

#define CHECK(call)                                                                                 \
    do {                                                                                            \
        hipError_t e_ = (call);                                                                     \
        if (e_ != hipSuccess) {                                                                     \
            fprintf(stderr, "%s:%d: %s = %d\n", __FILE__, __LINE__, #call, (int)e_);                 \
            exit(2);                                                                                \
        }                                                                                           \
    } while (0)

/* The bytes of file `path` (exits on failure). */
static void *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc((size_t)n + 1);
    if (fread(p, 1, (size_t)n, f) != (size_t)n) exit(2);
    fclose(f);
    return p;
}

typedef struct {
    unsigned magic, version;
    void *binary, *unused;
} fatbin_wrapper;

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

typedef struct {
    const float *sum; /* device memory (host-addressable on the double) */
    float seen;
    int calls;
} cb_state;

static void callback(hipStream_t s, hipError_t status, void *user) {
    (void)s, (void)status;
    cb_state *c = user;
    c->seen = *c->sum;
    c->calls++;
}

/* One of THREADS host threads: y_t = 0; y_t += a_t * x (twice) on its hipStreamPerThread, then
 * synchronizes it and copies y_t out. */
#define THREADS 3
typedef struct {
    int t;
    unsigned n;
    const float *d_x;
    float *d_y, *h_y;
} worker_t;

static void *worker(void *arg) {
    worker_t *w = arg;
    float a = 0.125f * (float)(w->t + 1);
    CHECK(hipMemsetAsync(w->d_y, 0, w->n * sizeof(float), hipStreamPerThread));
    for (int r = 0; r < 2; r++) {
        void *args[] = {&a, &w->d_x, &w->d_y, &w->n};
        CHECK(hipLaunchKernel(&stub_axpy, (dim3){(w->n + 255) / 256, 1, 1}, (dim3){256, 1, 1}, args, 0,
                              hipStreamPerThread));
    }
    CHECK(hipMemcpyAsync(w->h_y, w->d_y, w->n * sizeof(float), hipMemcpyDeviceToHost, hipStreamPerThread));
    CHECK(hipStreamSynchronize(hipStreamPerThread));
    return NULL;
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 4;
    int fault = argc > 2 && strcmp(argv[2], "fault") == 0;
    const unsigned n = 40000, block = 64, max_grid = 16;

    static const char fake_fatbin[] = "fake fat binary";
    static fatbin_wrapper wrapper = {0x48495046, 1, NULL, NULL};
    const char *fatbin_path = getenv("APP_FATBIN");
    if (fatbin_path) wrapper.binary = slurp(fatbin_path);
    void **h = __hipRegisterFatBinary(fatbin_path ? (const void *)&wrapper : (const void *)fake_fatbin);
    __hipRegisterFunction(h, &stub_reduce_partial, "reduce_partial", "reduce_partial", (unsigned)-1, 0, 0, 0, 0, 0);
    __hipRegisterFunction(h, &stub_axpy, "axpy", "axpy", (unsigned)-1, 0, 0, 0, 0, 0);
    __hipRegisterFunction(h, &stub_empty, "empty_kernel", "empty_kernel", (unsigned)-1, 0, 0, 0, 0, 0);

    hipModule_t module;
    hipFunction_t reduce_final;
    const char *co_path = getenv("APP_CODE_OBJECT");
    CHECK(hipModuleLoadData(&module, co_path ? slurp(co_path)
                                             : "FAKEHIPCO1\nextern \"C\" __global__ void reduce_final(...) {}"));
    CHECK(hipModuleGetFunction(&reduce_final, module, "reduce_final"));

    hipStream_t s1, s2;
    CHECK(hipStreamCreate(&s1));
    CHECK(hipStreamCreateWithFlags(&s2, hipStreamNonBlocking));
    hipEvent_t e1, e2, t0, t1;
    CHECK(hipEventCreateWithFlags(&e1, hipEventDisableTiming));
    CHECK(hipEventCreateWithFlags(&e2, hipEventDisableTiming));
    CHECK(hipEventCreate(&t0));
    CHECK(hipEventCreate(&t1));

    float *h_x, *h_sum, *h_y, *d_x, *d_y, *d_partial, *d_sum;
    CHECK(hipHostMalloc((void **)&h_x, n * sizeof(float), 0));
    CHECK(hipHostMalloc((void **)&h_sum, sizeof(float), 0));
    CHECK(hipHostMalloc((void **)&h_y, n * sizeof(float), 0));
    CHECK(hipMalloc((void **)&d_x, n * sizeof(float)));
    CHECK(hipMalloc((void **)&d_y, n * sizeof(float)));
    CHECK(hipMalloc((void **)&d_partial, max_grid * sizeof(float)));
    CHECK(hipMalloc((void **)&d_sum, sizeof(float)));
    uint32_t seed = 12345;
    for (unsigned i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        h_x[i] = (float)(seed >> 8) / (float)(1u << 24) - 0.5f;
    }
    /* Synchronous copy and memset on the null stream. */
    CHECK(hipMemcpy(d_x, h_x, n * sizeof(float), hipMemcpyHostToDevice));
    CHECK(hipMemset(d_y, 0, n * sizeof(float)));
    /* A copy from pageable memory (staged by the interposer in bind mode). */
    float scale[4] = {0.5f, 0.25f, 2.0f, 1.5f};
    float *d_scale;
    CHECK(hipMalloc((void **)&d_scale, sizeof scale));
    CHECK(hipMemcpyAsync(d_scale, scale, sizeof scale, hipMemcpyHostToDevice, s1));
    CHECK(hipStreamSynchronize(s1));

    /* A graph captured on s2: y += 1.0 * x (axpy, host stub). */
    hipGraph_t graph;
    hipGraphExec_t graph_exec;
    float one = 1.0f;
    unsigned nn0 = n;
    void *gargs[] = {&one, &d_x, &d_y, &nn0};
    CHECK(hipStreamBeginCapture(s2, hipStreamCaptureModeGlobal));
    CHECK(hipLaunchKernel(&stub_axpy, (dim3){(n + 255) / 256, 1, 1}, (dim3){256, 1, 1}, gargs, 0, s2));
    CHECK(hipStreamEndCapture(s2, &graph));
    CHECK(hipGraphInstantiate(&graph_exec, graph, NULL, NULL, 0));

    cb_state cb = {d_sum, 0.0f, 0};
    uint64_t hash = 1469598103934665603ull;
    int cb_ok = 1;
    hipError_t sync = hipSuccess;
    for (int k = 0; k < iters && sync == hipSuccess; k++) {
        unsigned grid = 8 + (unsigned)k % 5, nn = n;
        CHECK(hipStreamWaitEvent(s1, e2, 0));
        CHECK(hipMemsetAsync(d_partial, 0, max_grid * sizeof(float), s1));
        if (k == 0) CHECK(hipEventRecord(t0, s1));
        void *pargs[] = {&d_x, &nn, &d_partial};
        CHECK(hipLaunchKernel(&stub_reduce_partial, (dim3){grid, 1, 1}, (dim3){block, 1, 1}, pargs, 0, s1));
        if (k == 0) CHECK(hipEventRecord(t1, s1));
        CHECK(hipEventRecord(e1, s1));

        CHECK(hipStreamWaitEvent(s2, e1, 0));
        void *fargs[] = {&d_partial, &grid, &d_sum};
        CHECK(hipModuleLaunchKernel(reduce_final, 1, 1, 1, 1, 1, 1, 0, s2, fargs, NULL));
        float a = scale[k % 4];
        void *aargs[] = {&a, &d_x, &d_y, &nn};
        CHECK(hipLaunchKernel(&stub_axpy, (dim3){(n + 255) / 256, 1, 1}, (dim3){256, 1, 1}, aargs, 0, s2));
        CHECK(hipStreamAddCallback(s2, callback, &cb, 0));
        CHECK(hipMemcpyAsync(h_sum, d_sum, sizeof(float), hipMemcpyDeviceToHost, s2));
        CHECK(hipMemcpyAsync(h_y, d_y, n * sizeof(float), hipMemcpyDeviceToHost, s2));
        CHECK(hipGraphLaunch(graph_exec, s2));
        CHECK(hipEventRecord(e2, s2));
        sync = hipStreamSynchronize(s2);
        if (sync != hipSuccess) break;
        if (hipStreamQuery(s2) != hipSuccess || hipEventQuery(e2) != hipSuccess) {
            fprintf(stderr, "query after synchronize: not complete\n");
            return 3;
        }
        if (cb.calls != k + 1 || memcmp(&cb.seen, h_sum, sizeof(float)) != 0) cb_ok = 0;
        hash = fnv(hash, h_sum, sizeof(float));
        hash = fnv(hash, h_y, n * sizeof(float));
    }
    if (fault) {
        /* The failure is sticky: the device reports it too. */
        hipError_t dev = hipDeviceSynchronize();
        printf("device_sync=%d ", (int)dev);
    } else {
        /* Host threads, each on its own per-thread default stream, concurrently. */
        worker_t w[THREADS];
        pthread_t tid[THREADS];
        for (int t = 0; t < THREADS; t++) {
            w[t] = (worker_t){t, n, d_x, NULL, NULL};
            CHECK(hipMalloc((void **)&w[t].d_y, n * sizeof(float)));
            CHECK(hipHostMalloc((void **)&w[t].h_y, n * sizeof(float), 0));
            pthread_create(&tid[t], NULL, worker, &w[t]);
        }
        for (int t = 0; t < THREADS; t++) {
            pthread_join(tid[t], NULL);
            hash = fnv(hash, w[t].h_y, n * sizeof(float));
        }
        /* hipStreamPerThread, and a launch the runtime refuses synchronously. */
        CHECK(hipLaunchKernel(&stub_empty, (dim3){1, 1, 1}, (dim3){32, 1, 1}, NULL, 0, hipStreamPerThread));
        CHECK(hipStreamSynchronize(hipStreamPerThread));
    }
    hipError_t invalid = hipLaunchKernel(&stub_empty, (dim3){1, 1, 1}, (dim3){2048, 1, 1}, NULL, 0, s1);
    /* Launch forms the runtime refuses synchronously: an `extra` array without its size, a null function. */
    unsigned m = 1;
    void *fargs2[] = {&d_partial, &m, &d_sum};
    void *extra[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, fargs2, HIP_LAUNCH_PARAM_END};
    hipError_t extra_code = hipModuleLaunchKernel(reduce_final, 1, 1, 1, 1, 1, 1, 0, s2, NULL, extra);
    hipError_t null_code = hipModuleLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, s2, NULL, NULL);
    float ms = -1.0f;
    int elapsed_ok = fault || (hipEventElapsedTime(&ms, t0, t1) == hipSuccess && ms >= 0.0f);
    uint32_t bits;
    memcpy(&bits, h_sum, sizeof bits);
    printf("results=%016llx sum=%08x cb_ok=%d invalid=%d elapsed_ok=%d sync=%d extra=%d null=%d\n",
           (unsigned long long)hash, bits, cb_ok, (int)invalid, elapsed_ok, (int)sync, (int)extra_code, (int)null_code);
    if (!fault) {
        CHECK(hipDeviceSynchronize());
        CHECK(hipStreamDestroy(s1));
        CHECK(hipStreamDestroy(s2));
        CHECK(hipEventDestroy(e1));
        CHECK(hipEventDestroy(e2));
        CHECK(hipFree(d_x));
        CHECK(hipHostFree(h_x));
    }
    return 0;
}
