/*
 * A test double of libcuda.so.1 for the interposer's CI tests (no GPU needed).
 *
 * It implements just enough of the driver API for tests/fake/app.c: "device" memory is host
 * memory, the two kernels (vector_add, scale) run on the CPU, streams record whether they are
 * capturing, graphs count captured launches. Every call is appended to the file named by
 * FAKE_CUDA_LOG with its arguments (no addresses, so logs of two runs compare equal), which is
 * how the tests prove that the shim forwarded every call unchanged.
 *
 * cuGetProcAddress(_v2) follows the documented rule (newest ABI introduced at or before the
 * requested version; per-thread variant with flag 2) and, like the real driver may, hands out
 * INTERNAL entry points that differ from the exported symbols for some names (cuLaunchKernel,
 * cuStreamSynchronize), plus an old 32-bit cuMemcpyHtoD ABI at version 2000.
 *
 * Build: cc -shared -fPIC -Wl,-Bsymbolic -Wl,-soname,libcuda.so.1 -o libcuda.so.1 libcuda.c
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef uint64_t CUdeviceptr;
typedef void *CUstream;
typedef void *CUevent;
typedef void *CUcontext;
typedef void *CUgraph;
typedef void *CUgraphExec;
typedef void (*CUhostFn)(void *);

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NOT_FOUND 500
#define EXPORT __attribute__((visibility("default")))

typedef struct {
    unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    CUstream hStream;
    void *attrs;
    unsigned numAttrs;
} CUlaunchConfig;

/* ---------------------------------------------------------------- log */
static void logf_(const char *fmt, ...) {
    const char *path = getenv("FAKE_CUDA_LOG");
    if (!path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fclose(f);
}

/* ---------------------------------------------------------------- objects */
typedef struct { int magic; const char *name; } fake_func;
static fake_func FUNCS[] = {{0x5eed, "vector_add"}, {0x5eed, "scale"}};

typedef struct { int magic; int index; int capturing; int captured; } fake_stream;
static fake_stream STREAMS[16];
static int NSTREAMS;
static fake_stream LEGACY = {0x57, 0, 0, 0};

typedef struct { int launches; int index; } fake_graph;
static fake_graph GRAPHS[16];
static int NGRAPHS;

static int EVENTS;

static fake_stream *stream_of(CUstream s) {
    if (s == NULL || s == (CUstream)1 || s == (CUstream)2) return &LEGACY;
    return (fake_stream *)s;
}

static int func_index(void *f) {
    for (int i = 0; i < 2; i++) if (f == &FUNCS[i]) return i;
    return -1;
}

/* ---------------------------------------------------------------- basics */
EXPORT CUresult cuInit(unsigned flags) { logf_("cuInit %u", flags); return CUDA_SUCCESS; }
EXPORT CUresult cuDriverGetVersion(int *v) { *v = 13000; logf_("cuDriverGetVersion"); return CUDA_SUCCESS; }
EXPORT CUresult cuModuleGetFunction(void **f, void *mod, const char *name) {
    (void)mod;
    for (int i = 0; i < 2; i++)
        if (strcmp(name, FUNCS[i].name) == 0) { *f = &FUNCS[i]; logf_("cuModuleGetFunction %s", name); return CUDA_SUCCESS; }
    return CUDA_ERROR_NOT_FOUND;
}
EXPORT CUresult cuFuncGetName(const char **name, void *f) {
    int i = func_index(f);
    if (i < 0) return CUDA_ERROR_INVALID_VALUE;
    *name = FUNCS[i].name;
    return CUDA_SUCCESS; /* not logged: the shim calls it, the application does not */
}
EXPORT CUresult cuKernelGetName(const char **name, void *k) { (void)name; (void)k; return CUDA_ERROR_NOT_FOUND; }
static const void *EXPORT_TABLE[4];
EXPORT CUresult cuGetExportTable(const void **table, const void *uuid) {
    (void)uuid; *table = EXPORT_TABLE; logf_("cuGetExportTable"); return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxSynchronize(void) { logf_("cuCtxSynchronize"); return CUDA_SUCCESS; }

/* ---------------------------------------------------------------- memory */
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
    *p = (CUdeviceptr)(uintptr_t)calloc(1, bytes);
    logf_("cuMemAlloc_v2 %zu", bytes);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemFree_v2(CUdeviceptr p) { free((void *)(uintptr_t)p); logf_("cuMemFree_v2"); return CUDA_SUCCESS; }
EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
    memcpy((void *)(uintptr_t)dst, src, n); logf_("cuMemcpyHtoD_v2 %zu", n); return CUDA_SUCCESS;
}
EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
    memcpy(dst, (void *)(uintptr_t)src, n); logf_("cuMemcpyDtoH_v2 %zu", n); return CUDA_SUCCESS;
}
EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
    memcpy((void *)(uintptr_t)dst, src, n); logf_("cuMemcpyHtoDAsync_v2 %zu stream=%d", n, stream_of(s)->index); return CUDA_SUCCESS;
}
EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
    memset((void *)(uintptr_t)dst, v, n); logf_("cuMemsetD8Async %u %zu stream=%d", v, n, stream_of(s)->index); return CUDA_SUCCESS;
}
EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned v, size_t n) {
    for (size_t i = 0; i < n; i++) ((unsigned *)(uintptr_t)dst)[i] = v;
    logf_("cuMemsetD32_v2 %u %zu", v, n);
    return CUDA_SUCCESS;
}
/* The CUDA 2.0 ABI: 32-bit device pointer and size. Only reachable through cuGetProcAddress. */
static CUresult memcpy_htod_v1(unsigned dst, const void *src, unsigned n) {
    (void)dst; (void)src; logf_("cuMemcpyHtoD[v1] %u", n); return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- streams and events */
EXPORT CUresult cuStreamCreate(CUstream *s, unsigned flags) {
    fake_stream *st = &STREAMS[NSTREAMS];
    st->magic = 0x57; st->index = ++NSTREAMS; st->capturing = 0;
    *s = st;
    logf_("cuStreamCreate flags=%u -> stream=%d", flags, st->index);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamDestroy_v2(CUstream s) { logf_("cuStreamDestroy_v2 stream=%d", stream_of(s)->index); return CUDA_SUCCESS; }
EXPORT CUresult cuStreamSynchronize(CUstream s) { logf_("cuStreamSynchronize stream=%d", stream_of(s)->index); return CUDA_SUCCESS; }
EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s) { logf_("cuStreamSynchronize_ptsz stream=%d", stream_of(s)->index); return CUDA_SUCCESS; }
static CUresult stream_synchronize_internal(CUstream s) { logf_("cuStreamSynchronize[internal] stream=%d", stream_of(s)->index); return CUDA_SUCCESS; }
EXPORT CUresult cuStreamQuery(CUstream s) { logf_("cuStreamQuery stream=%d", stream_of(s)->index); return CUDA_SUCCESS; }
EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, int mode) {
    fake_stream *st = stream_of(s);
    st->capturing = 1; st->captured = 0;
    logf_("cuStreamBeginCapture_v2 stream=%d mode=%d", st->index, mode);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *g) {
    fake_stream *st = stream_of(s);
    if (!st->capturing) return CUDA_ERROR_INVALID_VALUE;
    st->capturing = 0;
    GRAPHS[NGRAPHS].launches = st->captured;
    GRAPHS[NGRAPHS].index = NGRAPHS + 1;
    *g = &GRAPHS[NGRAPHS++];
    logf_("cuStreamEndCapture stream=%d launches=%d", st->index, st->captured);
    return CUDA_SUCCESS;
}
static CUresult is_capturing(CUstream s, int *status) { *status = stream_of(s)->capturing; return CUDA_SUCCESS; }
EXPORT CUresult cuStreamIsCapturing(CUstream s, int *status) { return is_capturing(s, status); }
EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream s, int *status) { return is_capturing(s, status); }
EXPORT CUresult cuGraphLaunch(CUgraphExec g, CUstream s) {
    logf_("cuGraphLaunch graph=%d launches=%d stream=%d", ((fake_graph *)g)->index, ((fake_graph *)g)->launches, stream_of(s)->index);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data) {
    logf_("cuLaunchHostFunc stream=%d", stream_of(s)->index);
    fn(data);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventCreate(CUevent *e, unsigned flags) {
    *e = (CUevent)(uintptr_t)(0x1000 + ++EVENTS);
    logf_("cuEventCreate flags=%u -> event=%d", flags, EVENTS);
    return CUDA_SUCCESS;
}
static int event_index(CUevent e) { return (int)((uintptr_t)e - 0x1000); }
EXPORT CUresult cuEventRecord(CUevent e, CUstream s) { logf_("cuEventRecord event=%d stream=%d", event_index(e), stream_of(s)->index); return CUDA_SUCCESS; }
EXPORT CUresult cuEventQuery(CUevent e) { logf_("cuEventQuery event=%d", event_index(e)); return CUDA_SUCCESS; }
EXPORT CUresult cuEventSynchronize(CUevent e) { logf_("cuEventSynchronize event=%d", event_index(e)); return CUDA_SUCCESS; }
EXPORT CUresult cuEventDestroy_v2(CUevent e) { logf_("cuEventDestroy_v2 event=%d", event_index(e)); return CUDA_SUCCESS; }

/* ---------------------------------------------------------------- launches */
static CUresult launch(const char *via, void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                       unsigned bz, unsigned smem, CUstream s, void **params) {
    int fi = func_index(f);
    if (fi < 0) return CUDA_ERROR_INVALID_VALUE;
    if (bx == 0 || by == 0 || bz == 0 || gx == 0 || gy == 0 || gz == 0 || (unsigned long)bx * by * bz > 1024) {
        logf_("%s %s grid=%u,%u,%u block=%u,%u,%u -> INVALID", via, FUNCS[fi].name, gx, gy, gz, bx, by, bz);
        return CUDA_ERROR_INVALID_VALUE;
    }
    fake_stream *st = stream_of(s);
    logf_("%s %s grid=%u,%u,%u block=%u,%u,%u smem=%u stream=%d%s", via, FUNCS[fi].name, gx, gy, gz, bx, by, bz, smem,
          st->index, st->capturing ? " captured" : "");
    if (st->capturing) { st->captured++; return CUDA_SUCCESS; }
    unsigned long threads = (unsigned long)gx * gy * gz * bx * by * bz;
    if (fi == 0) { /* vector_add(float *a, float *b, float *c, int n) */
        float *a = (float *)(uintptr_t)*(CUdeviceptr *)params[0];
        float *b = (float *)(uintptr_t)*(CUdeviceptr *)params[1];
        float *c = (float *)(uintptr_t)*(CUdeviceptr *)params[2];
        int n = *(int *)params[3];
        for (unsigned long i = 0; i < threads && i < (unsigned long)n; i++) c[i] = a[i] + b[i];
    } else { /* scale(float *x, float k, int n) */
        float *x = (float *)(uintptr_t)*(CUdeviceptr *)params[0];
        float k = *(float *)params[1];
        int n = *(int *)params[2];
        for (unsigned long i = 0; i < threads && i < (unsigned long)n; i++) x[i] *= k;
    }
    return CUDA_SUCCESS;
}
EXPORT CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                               unsigned smem, CUstream s, void **params, void **extra) {
    (void)extra; return launch("cuLaunchKernel", f, gx, gy, gz, bx, by, bz, smem, s, params);
}
EXPORT CUresult cuLaunchKernel_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                    unsigned bz, unsigned smem, CUstream s, void **params, void **extra) {
    (void)extra; return launch("cuLaunchKernel_ptsz", f, gx, gy, gz, bx, by, bz, smem, s, params);
}
static CUresult launch_kernel_internal(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                       unsigned bz, unsigned smem, CUstream s, void **params, void **extra) {
    (void)extra; return launch("cuLaunchKernel[internal]", f, gx, gy, gz, bx, by, bz, smem, s, params);
}
EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *c, void *f, void **params, void **extra) {
    (void)extra;
    return launch("cuLaunchKernelEx", f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
                  c->sharedMemBytes, c->hStream, params);
}
EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, void *f, void **params, void **extra) {
    (void)extra;
    return launch("cuLaunchKernelEx_ptsz", f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY,
                  c->blockDimZ, c->sharedMemBytes, c->hStream, params);
}

/* ---------------------------------------------------------------- entry points */
typedef struct { const char *base; int abi; int per_thread; void *fn; } proc_entry;
EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags);
EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, uint64_t flags, int *status);
static proc_entry PROCS[] = {
    {"cuLaunchKernel", 4000, 0, (void *)launch_kernel_internal},
    {"cuLaunchKernel", 7000, 1, (void *)cuLaunchKernel_ptsz},
    {"cuLaunchKernelEx", 11060, 0, (void *)cuLaunchKernelEx},
    {"cuLaunchKernelEx", 11060, 1, (void *)cuLaunchKernelEx_ptsz},
    {"cuStreamSynchronize", 2000, 0, (void *)stream_synchronize_internal},
    {"cuStreamSynchronize", 7000, 1, (void *)cuStreamSynchronize_ptsz},
    {"cuMemcpyHtoD", 2000, 0, (void *)memcpy_htod_v1},
    {"cuMemcpyHtoD", 3020, 0, (void *)cuMemcpyHtoD_v2},
    {"cuDriverGetVersion", 2020, 0, (void *)cuDriverGetVersion},
    {"cuGetExportTable", 3000, 0, (void *)cuGetExportTable},
    {"cuGetProcAddress", 11030, 0, (void *)cuGetProcAddress},
    {"cuGetProcAddress", 12000, 0, (void *)cuGetProcAddress_v2},
};

static CUresult get_proc(const char *symbol, void **pfn, int version, uint64_t flags, int *status) {
    logf_("cuGetProcAddress %s %d %llu", symbol, version, (unsigned long long)flags);
    if (version > 13000) return CUDA_ERROR_INVALID_VALUE;
    proc_entry *legacy = NULL, *pt = NULL;
    for (size_t i = 0; i < sizeof PROCS / sizeof PROCS[0]; i++) {
        proc_entry *e = &PROCS[i];
        if (strcmp(e->base, symbol) != 0 || e->abi > version) continue;
        if (e->per_thread) { if (!pt || e->abi > pt->abi) pt = e; }
        else if (!legacy || e->abi > legacy->abi) legacy = e;
    }
    proc_entry *chosen = ((flags & 2) && pt) ? pt : legacy;
    *pfn = chosen ? chosen->fn : NULL;
    if (status) *status = chosen ? 0 : 1;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags) {
    return get_proc(symbol, pfn, version, flags, NULL);
}
EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, uint64_t flags, int *status) {
    return get_proc(symbol, pfn, version, flags, status);
}
