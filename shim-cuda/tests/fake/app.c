/*
 * A CUDA driver-API client exercising every route to the driver, for the interposer's CI test.
 * Linked directly against (the fake) libcuda.so.1; prints only deterministic results, so its
 * stdout with and without the shim must be identical.
 *
 * Routes: (1) direct calls to exported driver symbols; (2) dlopen("libcuda.so.1") + dlsym, as
 * Triton does for cuLaunchKernelEx; (3) cuGetProcAddress_v2 fetched with dlsym, asked for
 * "cuGetProcAddress" itself, then used for cuLaunchKernel at two versions/flags, as every cudart
 * does. Also: an invalid launch, a host function, events, fills, a stream capture replayed as a
 * graph twice, RTLD_DEFAULT lookups, pass-through of cuGetExportTable and of an old ABI, and a
 * fork whose child launches once.
 *
 * Build: cc -o app app.c -L<dir> -lcuda -ldl
 */
#include <dlfcn.h>
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
typedef void *CUgraph;
typedef struct {
    unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    CUstream hStream;
    void *attrs;
    unsigned numAttrs;
} CUlaunchConfig;

CUresult cuInit(unsigned);
CUresult cuModuleGetFunction(CUfunction *, void *, const char *);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void *, size_t);
CUresult cuMemcpyDtoH_v2(void *, CUdeviceptr, size_t);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr, const void *, size_t, CUstream);
CUresult cuMemsetD8Async(CUdeviceptr, unsigned char, size_t, CUstream);
CUresult cuMemsetD32_v2(CUdeviceptr, unsigned, size_t);
CUresult cuStreamCreate(CUstream *, unsigned);
CUresult cuStreamDestroy_v2(CUstream);
CUresult cuStreamSynchronize(CUstream);
CUresult cuStreamBeginCapture_v2(CUstream, int);
CUresult cuStreamEndCapture(CUstream, CUgraph *);
CUresult cuGraphLaunch(CUgraph, CUstream);
CUresult cuLaunchHostFunc(CUstream, void (*)(void *), void *);
CUresult cuEventCreate(CUevent *, unsigned);
CUresult cuEventRecord(CUevent, CUstream);
CUresult cuEventQuery(CUevent);
CUresult cuEventSynchronize(CUevent);
CUresult cuEventDestroy_v2(CUevent);
CUresult cuCtxSynchronize(void);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **, void **);

typedef CUresult (*launch_kernel_t)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    CUstream, void **, void **);
typedef CUresult (*launch_kernel_ex_t)(const CUlaunchConfig *, CUfunction, void **, void **);
typedef CUresult (*get_proc_v2_t)(const char *, void **, int, uint64_t, int *);
typedef CUresult (*stream_query_t)(CUstream);
typedef CUresult (*driver_version_t)(int *);
typedef CUresult (*memcpy_htod_v1_t)(unsigned, const void *, unsigned);

#define N 1024
#define CHECK(x) do { CUresult r_ = (x); if (r_) { printf("FAILED %s = %d\n", #x, r_); exit(1); } } while (0)

static unsigned checksum(const float *v, int n) {
    unsigned h = 2166136261u;
    for (int i = 0; i < n; i++) {
        unsigned bits;
        memcpy(&bits, &v[i], 4);
        h = (h ^ bits) * 16777619u;
    }
    return h;
}

static void host_fn(void *p) { *(int *)p += 41; }

int main(void) {
    float a[N], b[N], c[N];
    for (int i = 0; i < N; i++) { a[i] = (float)i * 0.5f; b[i] = (float)(N - i) * 0.25f; }

    /* ---- route 1: direct calls */
    CHECK(cuInit(0));
    CUfunction vadd;
    CHECK(cuModuleGetFunction(&vadd, NULL, "vector_add"));
    CUstream s, s2;
    CHECK(cuStreamCreate(&s, 1));
    CHECK(cuStreamCreate(&s2, 1));
    CUdeviceptr da, db, dc;
    CHECK(cuMemAlloc_v2(&da, sizeof a));
    CHECK(cuMemAlloc_v2(&db, sizeof b));
    CHECK(cuMemAlloc_v2(&dc, sizeof c));
    CHECK(cuMemcpyHtoD_v2(da, a, sizeof a));
    CHECK(cuMemcpyHtoDAsync_v2(db, b, sizeof b, s));
    CHECK(cuMemsetD8Async(dc, 0, sizeof c, s));
    int n = N;
    void *params[] = {&da, &db, &dc, &n};
    CHECK(cuLaunchKernel(vadd, 4, 1, 1, 256, 1, 1, 0, s, params, NULL));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH_v2(c, dc, sizeof c));
    printf("direct: c[0]=%g c[1023]=%g checksum=%08x\n", c[0], c[N - 1], checksum(c, N));

    CUresult invalid = cuLaunchKernel(vadd, 1, 1, 1, 2048, 1, 1, 0, s, params, NULL);
    printf("invalid launch (2048 threads per block): %d\n", invalid);

    int flag = 1;
    CHECK(cuLaunchHostFunc(s, host_fn, &flag));
    printf("host function: flag=%d\n", flag);

    CUevent e;
    CHECK(cuEventCreate(&e, 0));
    CHECK(cuEventRecord(e, s));
    printf("event query: %d\n", cuEventQuery(e));
    CHECK(cuEventSynchronize(e));
    CHECK(cuEventDestroy_v2(e));
    CHECK(cuMemsetD32_v2(dc, 0x3f800000u, N)); /* 1.0f */
    CHECK(cuMemcpyDtoH_v2(c, dc, sizeof c));
    printf("fill: c[7]=%g\n", c[7]);

    /* ---- route 2: dlopen + dlsym */
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) { printf("dlopen failed: %s\n", dlerror()); return 1; }
    launch_kernel_ex_t lkex = (launch_kernel_ex_t)dlsym(h, "cuLaunchKernelEx");
    CUlaunchConfig cfg = {2, 1, 1, 128, 1, 1, 0, s, NULL, 0};
    printf("dlsym cuLaunchKernelEx: %d\n", lkex(&cfg, vadd, params, NULL));
    stream_query_t sq = (stream_query_t)dlsym(RTLD_DEFAULT, "cuStreamQuery");
    printf("dlsym(RTLD_DEFAULT) cuStreamQuery: %d\n", sq(s));
    printf("dlsym non-driver name found: %d\n", dlsym(RTLD_DEFAULT, "strlen") != NULL);
    printf("dlsym missing driver name: %d\n", dlsym(h, "cuDoesNotExist") == NULL);

    /* ---- route 3: cuGetProcAddress, self-lookup first */
    get_proc_v2_t gpa = (get_proc_v2_t)dlsym(h, "cuGetProcAddress_v2");
    get_proc_v2_t self = NULL;
    int st = -1;
    CHECK(gpa("cuGetProcAddress", (void **)&self, 12000, 0, &st));
    launch_kernel_t lk = NULL, lkpt = NULL, lkodd = NULL;
    CHECK(self("cuLaunchKernel", (void **)&lk, 4000, 0, &st));
    CHECK(self("cuLaunchKernel", (void **)&lkpt, 7000, 2, &st));
    CHECK(self("cuLaunchKernel", (void **)&lkodd, 4000, 3, &st)); /* unknown flag combination */
    printf("proc cuLaunchKernel v4000: %d\n", lk(vadd, 3, 1, 1, 64, 1, 1, 0, s, params, NULL));
    printf("proc cuLaunchKernel v7000 ptds: %d\n", lkpt(vadd, 5, 1, 1, 32, 1, 1, 0, NULL, params, NULL));
    stream_query_t sync_internal = NULL;
    CHECK(self("cuStreamSynchronize", (void **)&sync_internal, 13000, 0, &st));
    printf("proc cuStreamSynchronize: %d\n", sync_internal(s));
    driver_version_t dgv = NULL;
    CHECK(self("cuDriverGetVersion", (void **)&dgv, 2020, 0, &st));
    int version = 0;
    CHECK(dgv(&version));
    printf("proc cuDriverGetVersion: %d\n", version);
    void *export_table_proc = NULL;
    CHECK(self("cuGetExportTable", &export_table_proc, 3000, 0, &st));
    printf("cuGetExportTable passes through: %d\n", export_table_proc == dlsym(h, "cuGetExportTable"));
    memcpy_htod_v1_t old = NULL;
    CHECK(self("cuMemcpyHtoD", (void **)&old, 2000, 0, &st));
    CHECK(old(0, a, 16));
    void *missing = (void *)1;
    CHECK(self("cuNotADriverFunction", &missing, 13000, 0, &st));
    printf("proc unknown symbol: null=%d status=%d\n", missing == NULL, st);
    printf("proc version too new: %d\n", self("cuLaunchKernel", (void **)&lk, 99000, 0, &st));

    /* ---- capture, then replay twice */
    CUgraph g;
    CHECK(cuStreamBeginCapture_v2(s2, 0));
    CHECK(cuLaunchKernel(vadd, 2, 1, 1, 64, 1, 1, 0, s2, params, NULL));
    CHECK(cuStreamEndCapture(s2, &g));
    CHECK(cuGraphLaunch(g, s));
    CHECK(cuGraphLaunch(g, s));
    CHECK(cuCtxSynchronize());

    /* ---- fork: the child launches once and exits normally (runs atexit handlers) */
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        CHECK(cuLaunchKernel(vadd, 7, 1, 1, 32, 1, 1, 0, s, params, NULL));
        CHECK(cuStreamSynchronize(s));
        exit(0);
    }
    int wstatus = 0;
    waitpid(child, &wstatus, 0);
    printf("child exit: %d\n", WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1);
    fprintf(stderr, "child_pid=%d\n", (int)child);

    CHECK(cuMemcpyDtoH_v2(c, dc, sizeof c));
    printf("final checksum=%08x\n", checksum(c, N));
    CHECK(cuMemFree_v2(da));
    CHECK(cuMemFree_v2(db));
    CHECK(cuMemFree_v2(dc));
    CHECK(cuStreamDestroy_v2(s));
    CHECK(cuStreamDestroy_v2(s2));
    puts("done");
    return 0;
}
