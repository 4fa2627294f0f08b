/*
 * A test double of libcuda.so.1 for the interposer's CI tests (no GPU needed).
 *
 * "Device" memory is host memory; the kernels (vector_add, scale, step) run on the CPU. Every
 * application-visible call is appended to the file named by FAKE_CUDA_LOG with its arguments
 * (kernel arguments are logged by value, device pointers as allocation ids "A<n>+<offset>", so logs
 * of two runs compare equal), which is how the tests prove that the shim forwarded every call
 * unchanged, or, in bind mode, submitted every launch unchanged.
 *
 * Two execution modes:
 * - inline (default): every operation executes inside the call that submits it, as in part 1.
 * - asynchronous (FAKE_CUDA_DELAY_US=<n>): each stream is a FIFO executed by its own worker
 *   thread, every kernel takes at least n microseconds (a kernel with tag 90-99 takes 300 ms), events
 *   complete when their stream reaches them, and the native semantics a real driver has are
 *   emulated: the legacy default stream waits for blocking streams and they wait for it, pageable
 *   host->device async copies are staged at the call, device->pageable copies complete before the
 *   call returns, synchronous copies and fills drain the device first, queries say NOT_READY for
 *   pending work. Begin and end of every executed operation go to FAKE_CUDA_EXEC_LOG (one global
 *   order, with the context: "p" = primary, "g<n>" = green context n), so a test can check what ran
 *   where and in which order. The application can add a line with fake_mark().
 *
 * Green contexts (FAKE_CUDA_NO_GREEN=1: a device without them): a device of 36 SMs; cuDevSmResourceSplitByCount(minCount 8) gives 4 groups of 8
 * plus a 4-SM remainder (like the H200's 15 x 8 + 12); descriptors combine groups; green-context
 * streams are non-blocking streams whose work is logged with their context.
 *
 * cuGetProcAddress(_v2) follows the documented rule (newest ABI introduced at or before the
 * requested version; per-thread variant with flag 2) and, like the real driver may, hands out
 * INTERNAL entry points that differ from the exported symbols for some names (cuLaunchKernel,
 * cuStreamSynchronize), plus an old 32-bit cuMemcpyHtoD ABI at version 2000.
 *
 * Build: cc -shared -fPIC -pthread -Wl,-Bsymbolic -Wl,-soname,libcuda.so.1 -o libcuda.so.1 libcuda.c
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef uint64_t CUdeviceptr;
typedef void *CUstream;
typedef void *CUevent;
typedef void *CUcontext;
typedef void *CUgraph;
typedef void *CUgraphExec;
typedef void (*CUhostFn)(void *);
typedef void (*CUstreamCallback)(CUstream, CUresult, void *);

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_INVALID_HANDLE 400
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_NOT_READY 600
#define CUDA_ERROR_NOT_SUPPORTED 801
#define EXPORT __attribute__((visibility("default")))

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

/* CUdevResource of CUDA 13.0: type, 92 bytes of padding, a 48-byte union (SM: count, minimum
 * partition size, co-scheduling alignment). The fake keeps a leaf bit mask in the padding. */
typedef struct {
    int type;
    unsigned char pad[92];
    union {
        struct { unsigned smCount, minSmPartitionSize, smCoscheduledAlignment; } sm;
        unsigned char oversize[48];
    } u;
} CUdevResource;

/* ---------------------------------------------------------------- logs */
static pthread_mutex_t LOG_LOCK = PTHREAD_MUTEX_INITIALIZER;

static void vlog_to(const char *env, const char *fmt, va_list ap) {
    const char *path = getenv(env);
    if (!path) return;
    pthread_mutex_lock(&LOG_LOCK);
    FILE *f = fopen(path, "a");
    if (f) {
        vfprintf(f, fmt, ap);
        fputc('\n', f);
        fclose(f);
    }
    pthread_mutex_unlock(&LOG_LOCK);
}
static void logf_(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog_to("FAKE_CUDA_LOG", fmt, ap);
    va_end(ap);
}
static void exec_log(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog_to("FAKE_CUDA_EXEC_LOG", fmt, ap);
    va_end(ap);
}
/* Lets the application put a line into the execution log (in its global order). */
EXPORT void fake_mark(const char *text) { exec_log("mark %s", text); }

/* Host-cost emulation for profiling the shim (not used by the tests): FAKE_CUDA_LAUNCH_NS and
 * FAKE_CUDA_QUERY_NS busy-wait that long in every kernel launch / event query, like the driver's
 * own host cost (FACTS.md: about 3.6 us and 1.3 us on the H200). */
static long env_ns(const char *name, long *cache) {
    if (*cache < 0) {
        const char *v = getenv(name);
        *cache = v ? atol(v) : 0;
    }
    return *cache;
}
static void spin_ns(long ns) {
    if (ns <= 0) return;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do clock_gettime(CLOCK_MONOTONIC, &b);
    while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < ns);
}
static long LAUNCH_NS = -1, QUERY_NS = -1;

static long DELAY_US = -1;
static int async_mode(void) {
    if (DELAY_US < 0) {
        const char *d = getenv("FAKE_CUDA_DELAY_US");
        DELAY_US = d ? atol(d) : 0;
    }
    return DELAY_US > 0;
}

/* ---------------------------------------------------------------- memory */
typedef struct { uintptr_t base; size_t size; int id; int pinned; } alloc_t;
static alloc_t ALLOCS[256];
static int NALLOCS, NEXT_ALLOC_ID;
static pthread_mutex_t ALLOC_LOCK = PTHREAD_MUTEX_INITIALIZER;

static alloc_t *find_alloc(uintptr_t p) {
    alloc_t *found = NULL;
    pthread_mutex_lock(&ALLOC_LOCK);
    for (int i = 0; i < NALLOCS; i++)
        if (ALLOCS[i].base && p >= ALLOCS[i].base && p < ALLOCS[i].base + ALLOCS[i].size) { found = &ALLOCS[i]; break; }
    pthread_mutex_unlock(&ALLOC_LOCK);
    return found;
}
/* Internal allocations (vitamin's fence words) get id 0, so the application's keep their names. */
static void *new_alloc_as(size_t bytes, int pinned, int internal) {
    void *p = calloc(1, bytes ? bytes : 1);
    pthread_mutex_lock(&ALLOC_LOCK);
    if (NALLOCS < 256)
        ALLOCS[NALLOCS++] = (alloc_t){(uintptr_t)p, bytes ? bytes : 1, internal ? 0 : ++NEXT_ALLOC_ID, pinned};
    pthread_mutex_unlock(&ALLOC_LOCK);
    return p;
}
static void *new_alloc(size_t bytes, int pinned) { return new_alloc_as(bytes, pinned, 0); }
static void drop_alloc(uintptr_t p) {
    pthread_mutex_lock(&ALLOC_LOCK);
    for (int i = 0; i < NALLOCS; i++) if (ALLOCS[i].base == p) ALLOCS[i].base = 0;
    pthread_mutex_unlock(&ALLOC_LOCK);
    free((void *)p);
}
/* "A<id>+<off>" for a known allocation, else "host". */
static void describe(char *out, size_t n, uintptr_t p) {
    alloc_t *a = find_alloc(p);
    if (a) snprintf(out, n, "A%d+%lu", a->id, (unsigned long)(p - a->base));
    else snprintf(out, n, "host");
}

/* ---------------------------------------------------------------- kernels */
typedef struct { int magic; const char *name; int nparams; unsigned offset[8], size[8]; unsigned total; } fake_func;
static fake_func FUNCS[] = {
    /* vector_add(float *a, float *b, float *c, int n) */
    {0x5eed, "vector_add", 4, {0, 8, 16, 24}, {8, 8, 8, 4}, 28},
    /* scale(float *x, float k, int n) */
    {0x5eed, "scale", 3, {0, 8, 12}, {8, 4, 4}, 16},
    /* step(float *dst, const float *src, int n, int tag, float mul, float add):
     * dst[i] = dst[i] * mul + src[i] + add (a non-commutative chain reveals reordering) */
    {0x5eed, "step", 6, {0, 8, 16, 20, 24, 28}, {8, 8, 4, 4, 4, 4}, 32},
    /* An NCCL collective's name with step's parameters and arithmetic (tests/fake/collective_app.c):
     * logged as nccl<tag>. A plain launch to the driver; vitamin must place it where its whole grid
     * is resident at once. */
    {0x5eed, "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE", 6,
     {0, 8, 16, 20, 24, 28}, {8, 8, 4, 4, 4, 4}, 32},
};
#define NFUNCS 4
static int MAX_DYNAMIC_SMEM[NFUNCS] = {49152, 49152, 49152, 49152};

static int func_index(void *f) {
    for (int i = 0; i < NFUNCS; i++) if (f == &FUNCS[i]) return i;
    return -1;
}

static void fmt_args(char *out, size_t n, int fi, const unsigned char *bytes) {
    size_t len = 0;
    out[0] = 0;
    for (int p = 0; p < FUNCS[fi].nparams && len + 40 < n; p++) {
        const unsigned char *v = bytes + FUNCS[fi].offset[p];
        unsigned sz = FUNCS[fi].size[p];
        if (p) out[len++] = ',';
        if (sz == 8) {
            uint64_t x;
            memcpy(&x, v, 8);
            char d[48];
            describe(d, sizeof d, (uintptr_t)x);
            if (strcmp(d, "host") != 0) { len += snprintf(out + len, n - len, "%s", d); continue; }
        }
        for (unsigned b = 0; b < sz; b++) len += snprintf(out + len, n - len, "%02x", v[b]);
    }
    out[len] = 0;
}

static void run_kernel(int fi, unsigned long threads, const unsigned char *pb) {
#define ARG(T, i) (*(T *)(pb + FUNCS[fi].offset[i]))
    if (fi == 0) {
        float *a = (float *)(uintptr_t)ARG(CUdeviceptr, 0), *b = (float *)(uintptr_t)ARG(CUdeviceptr, 1);
        float *c = (float *)(uintptr_t)ARG(CUdeviceptr, 2);
        int n = ARG(int, 3);
        for (unsigned long i = 0; i < threads && i < (unsigned long)n; i++) c[i] = a[i] + b[i];
    } else if (fi == 1) {
        float *x = (float *)(uintptr_t)ARG(CUdeviceptr, 0);
        float k = ARG(float, 1);
        int n = ARG(int, 2);
        for (unsigned long i = 0; i < threads && i < (unsigned long)n; i++) x[i] *= k;
    } else {
        float *dst = (float *)(uintptr_t)ARG(CUdeviceptr, 0);
        const float *src = (const float *)(uintptr_t)ARG(CUdeviceptr, 1);
        int n = ARG(int, 2);
        float mul = ARG(float, 4), add = ARG(float, 5);
        for (unsigned long i = 0; i < threads && i < (unsigned long)n; i++) dst[i] = dst[i] * mul + src[i] + add;
    }
#undef ARG
}

/* ---------------------------------------------------------------- streams and commands */
enum { C_KERNEL, C_COPY, C_FILL, C_HOST, C_CALLBACK, C_RECORD, C_WAIT, C_GRAPH, C_WRITE64, C_OP };

struct fstream;
typedef struct cmd {
    int kind;
    struct cmd *next;
    /* kernel */
    int fi;
    unsigned long threads;
    unsigned char params[64];
    /* copy / fill */
    uintptr_t dst, src;
    size_t bytes;
    unsigned char *staged;
    unsigned value, elem;
    /* 64-bit stream memory write */
    unsigned long long value64;
    /* host function / callback */
    CUhostFn fn;
    CUstreamCallback cb;
    void *user;
    /* wait */
    struct fstream *target;
    unsigned long seq;
    int graph_launches, graph_index, graph_seq, graph_version, graph_nodes_green;
    /* C_OP: a stream-ordered operation of the later entry points (run by `op` on the worker) */
    void (*op)(struct cmd *);
    char label[48];
} cmd;

typedef struct fstream {
    int magic;
    int index;
    int ctx; /* 0 = primary, n = green context n */
    unsigned flags;
    int priority;
    int capturing, captured;
    unsigned long submitted, completed;
    cmd *head, *tail;
    int has_thread;
    struct fstream *next_stream;
} fstream;

static pthread_mutex_t G = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t GC = PTHREAD_COND_INITIALIZER;
static fstream LEGACY = {0x57, 0, 0, 0, 0, 0, 0, 0, 0, NULL, NULL, 0, NULL};
static fstream *ALL_STREAMS; /* created streams, for device-wide drains and legacy semantics */
static int NSTREAMS;

static fstream *stream_of(CUstream s) {
    if (s == NULL || s == (CUstream)1 || s == (CUstream)2) return &LEGACY;
    return (fstream *)s;
}
static const char *ctx_name(fstream *st, char *buf, size_t n) {
    if (st->ctx) snprintf(buf, n, "g%d", st->ctx); else snprintf(buf, n, "p");
    return buf;
}

static unsigned GREEN_SMS[256];
static unsigned sms_of(void *stream) {
    fstream *st = stream_of(stream);
    return st->ctx > 0 && st->ctx < 256 ? GREEN_SMS[st->ctx] : 36;
}

/* Fault injection (FAKE_CUDA_FAULT_KERNEL=LABEL, e.g. k5): when the kernel of that label finishes
 * executing, the context takes a sticky asynchronous error, CUDA_ERROR_ILLEGAL_ADDRESS (700), as a
 * faulting kernel leaves it: every later synchronization, query and launch returns it. */
static int STICKY;
static int sticky(void) { return __atomic_load_n(&STICKY, __ATOMIC_ACQUIRE); }
static void execute(fstream *st, cmd *c) {
    char ctx[16], a[48], b[48];
    ctx_name(st, ctx, sizeof ctx);
    switch (c->kind) {
    case C_KERNEL: {
        char label[32];
        if (c->fi == 2) snprintf(label, sizeof label, "k%d", *(int *)(c->params + 20));
        else if (c->fi == 3) snprintf(label, sizeof label, "nccl%d", *(int *)(c->params + 20));
        else snprintf(label, sizeof label, "%s", FUNCS[c->fi].name);
        exec_log("begin %s ctx=%s stream=%d", label, ctx, st->index);
        if (async_mode()) usleep(c->fi == 2 && *(int *)(c->params + 20) >= 90 ? 300000 : (useconds_t)DELAY_US);
        run_kernel(c->fi, c->threads, c->params);
        exec_log("end %s", label);
        {
            const char *fault = getenv("FAKE_CUDA_FAULT_KERNEL");
            if (fault && strcmp(fault, label) == 0) {
                exec_log("fault %s: ILLEGAL_ADDRESS", label);
                __atomic_store_n(&STICKY, 700, __ATOMIC_RELEASE);
            }
        }
        break;
    }
    case C_COPY:
        describe(a, sizeof a, c->dst);
        if (c->staged) snprintf(b, sizeof b, "staged"); else describe(b, sizeof b, c->src);
        exec_log("begin copy %s<-%s %zu ctx=%s stream=%d", a, b, c->bytes, ctx, st->index);
        memcpy((void *)c->dst, c->staged ? (void *)c->staged : (void *)c->src, c->bytes);
        exec_log("end copy %s<-%s %zu", a, b, c->bytes);
        free(c->staged);
        break;
    case C_FILL:
        describe(a, sizeof a, c->dst);
        exec_log("begin fill %s ctx=%s stream=%d", a, ctx, st->index);
        for (size_t i = 0; i < c->bytes; i++) {
            if (c->elem == 1) ((unsigned char *)c->dst)[i] = (unsigned char)c->value;
            else if (c->elem == 2) ((unsigned short *)c->dst)[i] = (unsigned short)c->value;
            else ((unsigned *)c->dst)[i] = c->value;
        }
        exec_log("end fill %s", a);
        break;
    case C_HOST:
        exec_log("begin host ctx=%s stream=%d", ctx, st->index);
        c->fn(c->user);
        exec_log("end host");
        break;
    case C_CALLBACK:
        exec_log("begin callback ctx=%s stream=%d", ctx, st->index);
        c->cb(st == &LEGACY ? NULL : (CUstream)st, CUDA_SUCCESS, c->user);
        exec_log("end callback");
        break;
    case C_WRITE64: /* a fence word (pool internals: not logged) */
        __atomic_store_n((unsigned long long *)c->dst, c->value64, __ATOMIC_RELEASE);
        break;
    case C_GRAPH:
    {
        char nodes[16];
        if (c->graph_nodes_green) snprintf(nodes, sizeof nodes, "g%d", c->graph_nodes_green);
        else snprintf(nodes, sizeof nodes, "p");
        exec_log("begin graph%d.%d v%d launches=%d ctx=%s stream=%d nodes=%s", c->graph_index, c->graph_seq,
                 c->graph_version, c->graph_launches, ctx, st->index, nodes);
    }
        if (async_mode()) usleep((useconds_t)DELAY_US);
        exec_log("end graph%d.%d", c->graph_index, c->graph_seq);
        break;
    case C_OP:
        c->op(c);
        break;
    default:
        break;
    }
}

static void *worker(void *arg) {
    fstream *st = arg;
    pthread_mutex_lock(&G);
    for (;;) {
        while (!st->head) pthread_cond_wait(&GC, &G);
        cmd *c = st->head;
        if (c->kind == C_WAIT) {
            while (c->target->completed < c->seq) pthread_cond_wait(&GC, &G);
        } else if (c->kind != C_RECORD) {
            pthread_mutex_unlock(&G);
            execute(st, c);
            pthread_mutex_lock(&G);
        }
        st->head = c->next;
        if (!st->head) st->tail = NULL;
        st->completed++;
        free(c);
        pthread_cond_broadcast(&GC);
    }
    return NULL;
}

/* Appends a command (G held). In inline mode executes it at once. Returns its sequence number. */
static unsigned long push_locked(fstream *st, cmd *c) {
    unsigned long seq = ++st->submitted;
    if (!async_mode()) {
        if (c->kind != C_WAIT && c->kind != C_RECORD) {
            pthread_mutex_unlock(&G);
            execute(st, c);
            pthread_mutex_lock(&G);
        }
        st->completed++;
        free(c);
        return seq;
    }
    c->next = NULL;
    if (st->tail) st->tail->next = c; else st->head = c;
    st->tail = c;
    if (!st->has_thread) {
        pthread_t t;
        st->has_thread = 1;
        pthread_create(&t, NULL, worker, st);
        pthread_detach(t);
    }
    pthread_cond_broadcast(&GC);
    return seq;
}
static cmd *new_cmd(int kind) {
    cmd *c = calloc(1, sizeof *c);
    c->kind = kind;
    return c;
}
static int is_blocking_app_stream(fstream *s) { return s->ctx == 0 && !(s->flags & 1) && s != &LEGACY; }
/* The legacy default stream's implicit synchronization (native semantics; G held). */
static void legacy_edges_locked(fstream *st) {
    if (!async_mode()) return;
    if (st == &LEGACY) {
        for (fstream *s = ALL_STREAMS; s; s = s->next_stream)
            if (is_blocking_app_stream(s) && s->submitted > s->completed) {
                cmd *w = new_cmd(C_WAIT);
                w->target = s;
                w->seq = s->submitted;
                push_locked(&LEGACY, w);
            }
    } else if (is_blocking_app_stream(st) && LEGACY.submitted > LEGACY.completed) {
        cmd *w = new_cmd(C_WAIT);
        w->target = &LEGACY;
        w->seq = LEGACY.submitted;
        push_locked(st, w);
    }
}
static unsigned long submit(fstream *st, cmd *c) {
    pthread_mutex_lock(&G);
    legacy_edges_locked(st);
    unsigned long seq = push_locked(st, c);
    pthread_mutex_unlock(&G);
    return seq;
}
static void drain_stream(fstream *st) {
    pthread_mutex_lock(&G);
    while (st->completed < st->submitted) pthread_cond_wait(&GC, &G);
    pthread_mutex_unlock(&G);
}
static void drain_device(void) {
    pthread_mutex_lock(&G);
    for (;;) {
        int busy = LEGACY.completed < LEGACY.submitted;
        for (fstream *s = ALL_STREAMS; s; s = s->next_stream) busy |= s->completed < s->submitted;
        if (!busy) break;
        pthread_cond_wait(&GC, &G);
    }
    pthread_mutex_unlock(&G);
}
static fstream *new_stream(unsigned flags, int priority, int ctx) {
    fstream *st = calloc(1, sizeof *st);
    st->magic = 0x57;
    st->flags = flags;
    st->priority = priority;
    st->ctx = ctx;
    pthread_mutex_lock(&G);
    st->index = ++NSTREAMS;
    st->next_stream = ALL_STREAMS;
    ALL_STREAMS = st;
    pthread_mutex_unlock(&G);
    return st;
}

/* ---------------------------------------------------------------- basics, device, contexts */
static int PRIMARY_CTX = 0x1c;
static __thread void *CURRENT;

EXPORT CUresult cuInit(unsigned flags) { logf_("cuInit %u", flags); return CUDA_SUCCESS; }
EXPORT CUresult cuDriverGetVersion(int *v) { *v = 13000; logf_("cuDriverGetVersion"); return CUDA_SUCCESS; }
static int device_count(void);
EXPORT CUresult cuDeviceGetCount(int *n) { *n = device_count(); return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGet(int *d, int ordinal) { if (ordinal < 0 || ordinal >= device_count()) return CUDA_ERROR_INVALID_VALUE; *d = ordinal; return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGetName(char *name, int len, int dev) { (void)dev; snprintf(name, (size_t)len, "Fake GPU"); return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) { (void)dev; *bytes = (size_t)1 << 30; return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
    (void)dev;
    switch (attr) {
    case 16: *v = 36; break;  /* MULTIPROCESSOR_COUNT */
    case 75: *v = 9; break;   /* COMPUTE_CAPABILITY_MAJOR */
    case 76: *v = 0; break;   /* COMPUTE_CAPABILITY_MINOR */
    case 95: *v = 1; break;   /* COOPERATIVE_LAUNCH */
    case 120: *v = 1; break;  /* CLUSTER_LAUNCH */
    case 122: *v = getenv("FAKE_CUDA_NO_MEMOPS") ? 0 : 1; break; /* CAN_USE_64_BIT_STREAM_MEM_OPS */
    default: *v = 0; break;
    }
    return CUDA_SUCCESS;
}
static int OTHER_PRIMARY_CTX[8]; /* the primary contexts of devices 1.. (FAKE_CUDA_DEVICES) */
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, int dev) {
    if (dev < 0 || dev >= device_count()) return CUDA_ERROR_INVALID_VALUE;
    *c = dev ? (void *)&OTHER_PRIMARY_CTX[dev] : (void *)&PRIMARY_CTX;
    logf_("cuDevicePrimaryCtxRetain");
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int dev) { (void)dev; return CUDA_SUCCESS; }
EXPORT CUresult cuCtxSetCurrent(CUcontext c) { CURRENT = c; return CUDA_SUCCESS; }
/* A green context's CUcontext (cuCtxFromGreenCtx): a tag whose offset in GREEN_CTX_TAGS is the
 * green context's index; push/pop keep a small per-thread stack. */
static char GREEN_CTX_TAGS[256];
static int green_of_ctx(void *c) {
    char *p = (char *)c;
    return (p > GREEN_CTX_TAGS && p < GREEN_CTX_TAGS + 256) ? (int)(p - GREEN_CTX_TAGS) : 0;
}
static __thread void *CTX_STACK[16];
static __thread int CTX_DEPTH;
EXPORT CUresult cuCtxPushCurrent_v2(CUcontext c) {
    if (CTX_DEPTH >= 16) return CUDA_ERROR_INVALID_VALUE;
    CTX_STACK[CTX_DEPTH++] = CURRENT;
    CURRENT = c;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *c) {
    if (CTX_DEPTH == 0) return 201; /* CUDA_ERROR_INVALID_CONTEXT */
    if (c) *c = CURRENT;
    CURRENT = CTX_STACK[--CTX_DEPTH];
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxGetCurrent(CUcontext *c) { *c = CURRENT; return CUDA_SUCCESS; }
static int device_of_ctx(void *c);
EXPORT CUresult cuCtxGetDevice(int *d) { if (!CURRENT) return 201; /* CUDA_ERROR_INVALID_CONTEXT */ *d = device_of_ctx(CURRENT); return CUDA_SUCCESS; }
EXPORT CUresult cuMemGetInfo_v2(size_t *free_, size_t *total) { *free_ = (size_t)1 << 29; *total = (size_t)1 << 30; return CUDA_SUCCESS; }
EXPORT CUresult cuGetErrorName(CUresult r, const char **s) {
    *s = r == 0 ? "CUDA_SUCCESS" : r == 1 ? "CUDA_ERROR_INVALID_VALUE" : r == 600 ? "CUDA_ERROR_NOT_READY" : "CUDA_ERROR_FAKE";
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGetErrorString(CUresult r, const char **s) { return cuGetErrorName(r, s); }
EXPORT CUresult cuModuleGetFunction(void **f, void *mod, const char *name) {
    (void)mod;
    for (int i = 0; i < NFUNCS; i++)
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
/* Parameter layout; the first index past the end is CUDA_ERROR_INVALID_VALUE, like the driver. */
EXPORT CUresult cuFuncGetParamInfo(void *f, size_t index, size_t *offset, size_t *size) {
    int i = func_index(f);
    if (i < 0) return CUDA_ERROR_INVALID_HANDLE;
    if (index >= (size_t)FUNCS[i].nparams) return CUDA_ERROR_INVALID_VALUE;
    *offset = FUNCS[i].offset[index];
    *size = FUNCS[i].size[index];
    return CUDA_SUCCESS;
}
EXPORT CUresult cuKernelGetParamInfo(void *k, size_t index, size_t *offset, size_t *size) {
    (void)k; (void)index; (void)offset; (void)size;
    return CUDA_ERROR_INVALID_HANDLE;
}
EXPORT CUresult cuFuncGetAttribute(int *v, int attr, void *f) {
    int i = func_index(f);
    if (i < 0) return CUDA_ERROR_INVALID_HANDLE;
    if (attr == 0) *v = 1024;                       /* MAX_THREADS_PER_BLOCK */
    else if (attr == 8) *v = MAX_DYNAMIC_SMEM[i];   /* MAX_DYNAMIC_SHARED_SIZE_BYTES */
    else *v = 0;
    return CUDA_SUCCESS;
}
/* Each green context has its own instance of a function, whose dynamic shared memory limit starts
 * at the default (48 KiB) whatever the primary context's is: a launch on a green stream is checked
 * against it (the behaviour of cuDNN's kernels on the H200, docs/results/apps-suite.md). Setting the
 * attribute with a green context current sets that instance's; FAKE_CUDA_GREEN_SETATTR_FAILS=1 makes
 * that refused. */
static int GREEN_SMEM[256][NFUNCS];
static int green_limit(int green, int fi) { return GREEN_SMEM[green][fi] ? GREEN_SMEM[green][fi] : 49152; }
EXPORT CUresult cuFuncSetAttribute(void *f, int attr, int v) {
    int i = func_index(f);
    if (i < 0) return CUDA_ERROR_INVALID_HANDLE;
    if (attr != 8 || v < 0 || v > 232448) return CUDA_ERROR_INVALID_VALUE;
    int green = green_of_ctx(CURRENT);
    if (green) {
        if (getenv("FAKE_CUDA_GREEN_SETATTR_FAILS")) return CUDA_ERROR_INVALID_VALUE;
        GREEN_SMEM[green][i] = v;
        return CUDA_SUCCESS; /* not logged: the pool raises it in every green context it considers */
    }
    MAX_DYNAMIC_SMEM[i] = v;
    logf_("cuFuncSetAttribute %s max_dynamic_smem=%d", FUNCS[i].name, v);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuKernelGetAttribute(int *v, int attr, void *k, int dev) { (void)v; (void)attr; (void)k; (void)dev; return CUDA_ERROR_INVALID_HANDLE; }
static const void *EXPORT_TABLE[4];
EXPORT CUresult cuGetExportTable(const void **table, const void *uuid) {
    (void)uuid; *table = EXPORT_TABLE; logf_("cuGetExportTable"); return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxSynchronize(void) { drain_device(); logf_("cuCtxSynchronize"); return sticky(); }
/* Only exported so that a green-context backend's symbol check passes; never called in tests. */
EXPORT CUresult cuLibraryLoadData(void) { return CUDA_ERROR_NOT_SUPPORTED; }
EXPORT CUresult cuLibraryGetKernel(void) { return CUDA_ERROR_NOT_SUPPORTED; }
static char FAKE_KERNEL_HANDLE; /* the CUkernel of graph kernel nodes (FAKE_CUDA_GRAPH_KERNELS) */
EXPORT CUresult cuKernelGetFunction(void **f, void *kern) {
    if (kern != &FAKE_KERNEL_HANDLE || !f) return CUDA_ERROR_NOT_SUPPORTED;
    *f = (void *)&FUNCS[0];
    return CUDA_SUCCESS;
}
EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, void *f, int threads, size_t smem) {
    int fi = func_index(f);
    logf_("cuOccupancyMaxActiveBlocksPerMultiprocessor %s threads=%d smem=%zu", fi >= 0 ? FUNCS[fi].name : "?", threads,
          smem);
    *n = 8;
    return CUDA_SUCCESS;
}
/* Co-residency model: 8 blocks of any function per SM (above); a cluster needs one SM per block
 * of the context the config's stream belongs to (NULL: the whole device of 36 SMs). */
static unsigned sms_of(void *stream);
static unsigned cluster_volume(const CUlaunchAttribute *attrs, unsigned n) {
    for (unsigned k = 0; k < n; k++)
        if (attrs[k].id == 4) {
            unsigned d[3];
            memcpy(d, attrs[k].value, sizeof d);
            return d[0] * d[1] * d[2];
        }
    return 0;
}
EXPORT CUresult cuOccupancyMaxActiveClusters(int *n, void *f, const CUlaunchConfig *c) {
    (void)f;
    unsigned vol = cluster_volume(c->attrs, c->numAttrs);
    if (vol == 0 || vol > 16) return 912; /* CUDA_ERROR_INVALID_CLUSTER_SIZE */
    *n = (int)(sms_of(c->hStream) / vol);
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- green contexts */
#define FAKE_SMS 36
#define FAKE_MIN_PARTITION 8
typedef struct { int magic; int index; unsigned sms; unsigned mask; } fake_green;
typedef struct { unsigned sms; unsigned mask; } fake_desc;
static int NGREENS; /* GREEN_SMS (above) holds the SMs of green context n at index n */

static void sm_resource(CUdevResource *r, unsigned count, unsigned mask) {
    memset(r, 0, sizeof *r);
    r->type = 1; /* CU_DEV_RESOURCE_TYPE_SM */
    memcpy(r->pad, &mask, sizeof mask);
    r->u.sm.smCount = count;
    r->u.sm.minSmPartitionSize = FAKE_MIN_PARTITION;
    r->u.sm.smCoscheduledAlignment = FAKE_MIN_PARTITION;
}
EXPORT CUresult cuDeviceGetDevResource(int dev, CUdevResource *r, int type) {
    (void)dev;
    if (type != 1) return CUDA_ERROR_INVALID_VALUE;
    if (getenv("FAKE_CUDA_NO_GREEN")) return CUDA_ERROR_NOT_SUPPORTED; /* a device without green contexts */
    sm_resource(r, FAKE_SMS, 0);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDevSmResourceSplitByCount(CUdevResource *result, unsigned *nb, const CUdevResource *input,
                                            CUdevResource *remaining, unsigned flags, unsigned min_count) {
    (void)flags;
    unsigned total = input->u.sm.smCount, groups = total / min_count;
    if (groups > *nb) groups = *nb;
    for (unsigned i = 0; i < groups; i++) sm_resource(&result[i], min_count, 1u << i);
    sm_resource(remaining, total - groups * min_count, total > groups * min_count ? 1u << groups : 0);
    *nb = groups;
    logf_("cuDevSmResourceSplitByCount min=%u -> %u groups + %u", min_count, groups, total - groups * min_count);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDevResourceGenerateDesc(fake_desc **desc, CUdevResource *resources, unsigned n) {
    fake_desc *d = calloc(1, sizeof *d);
    for (unsigned i = 0; i < n; i++) {
        unsigned m;
        memcpy(&m, resources[i].pad, sizeof m);
        d->sms += resources[i].u.sm.smCount;
        d->mask |= m;
    }
    *desc = d;
    return CUDA_SUCCESS;
}
static void fake_green_delay(void);
static int GREEN_DEV[256]; /* the device of green context n */
EXPORT CUresult cuGreenCtxCreate(fake_green **g, fake_desc *desc, int dev, unsigned flags) {
    (void)flags;
    if (dev < 0 || dev >= device_count()) return CUDA_ERROR_INVALID_VALUE;
    /* Fault injection (FAKE_CUDA_GREEN_OOM_AT=N): the N-th green context creation (and every later
     * one) fails with CUDA_ERROR_OUT_OF_MEMORY, as on a device whose memory is taken. */
    const char *oom = getenv("FAKE_CUDA_GREEN_OOM_AT");
    if (oom && NGREENS + 1 >= atoi(oom)) return CUDA_ERROR_OUT_OF_MEMORY;
    fake_green_delay();
    fake_green *x = calloc(1, sizeof *x);
    x->magic = 0x6c;
    x->index = ++NGREENS;
    x->sms = desc->sms;
    x->mask = desc->mask;
    if (x->index < 256) GREEN_SMS[x->index] = x->sms, GREEN_DEV[x->index] = dev;
    *g = x;
    logf_("cuGreenCtxCreate g%d sms=%u leaves=%x dev=%d", x->index, x->sms, x->mask, dev);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxFromGreenCtx(CUcontext *c, fake_green *g) {
    if (!g || g->index <= 0 || g->index >= 256) return CUDA_ERROR_INVALID_HANDLE;
    *c = &GREEN_CTX_TAGS[g->index];
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGreenCtxDestroy(fake_green *g) { logf_("cuGreenCtxDestroy g%d", g->index); return CUDA_SUCCESS; }
EXPORT CUresult cuGreenCtxGetDevResource(fake_green *g, CUdevResource *r, int type) {
    if (type != 1) return CUDA_ERROR_INVALID_VALUE;
    sm_resource(r, g->sms, g->mask);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGreenCtxStreamCreate(CUstream *s, fake_green *g, unsigned flags, int priority) {
    fstream *st = new_stream(flags, priority, g->index);
    *s = st;
    /* Logged only under FAKE_CUDA_LOG_STREAMS=1: the pool creates many, in an order that is no
     * other test's concern. */
    const char *log = getenv("FAKE_CUDA_LOG_STREAMS");
    if (log && strcmp(log, "1") == 0) logf_("cuGreenCtxStreamCreate g%d s%d", g->index, st->index);
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- fault injection at submission
 * FAKE_CUDA_FAIL_CALL=<prefix> (e.g. cuMemcpy, cuLaunchHostFunc, cuEventRecord, cuStreamWaitEvent,
 * cuMemset): every call whose name starts with it fails with FAKE_CUDA_FAIL_CODE (default
 * CUDA_ERROR_INVALID_VALUE, 1) and does nothing, on the streams FAKE_CUDA_FAIL_ON names: "pool"
 * (green-context streams: vitamin's submissions), "app" (the application's own streams) or, unset,
 * both. As a driver refusing the call at submission would. */
static CUresult fake_injected(const char *call, fstream *st) {
    const char *prefix = getenv("FAKE_CUDA_FAIL_CALL");
    if (!prefix || !*prefix || strncmp(call, prefix, strlen(prefix)) != 0) return CUDA_SUCCESS;
    const char *on = getenv("FAKE_CUDA_FAIL_ON");
    int pool = st && st->ctx > 0;
    if (on && ((strcmp(on, "pool") == 0 && !pool) || (strcmp(on, "app") == 0 && pool))) return CUDA_SUCCESS;
    const char *code = getenv("FAKE_CUDA_FAIL_CODE");
    logf_("%s -> FAILED (injected)", call);
    return code ? atoi(code) : CUDA_ERROR_INVALID_VALUE;
}
/* FAKE_CUDA_GREEN_DELAY_MS=<n>: every green context creation takes n ms (a slow pool realization). */
static void fake_green_delay(void) {
    const char *ms = getenv("FAKE_CUDA_GREEN_DELAY_MS");
    if (ms) usleep((useconds_t)atoi(ms) * 1000);
}

/* ---------------------------------------------------------------- memory API */
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
    *p = (CUdeviceptr)(uintptr_t)new_alloc(bytes, 0);
    logf_("cuMemAlloc_v2 %zu", bytes);
    return CUDA_SUCCESS;
}
/* CUDA IPC import (both ABIs): a fresh allocation stands for the exporter's memory. */
typedef struct { char reserved[64]; } CUipcMemHandle;
EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned flags) {
    (void)h;
    *p = (CUdeviceptr)(uintptr_t)new_alloc(1 << 16, 0);
    logf_("cuIpcOpenMemHandle flags=%u", flags);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *p, CUipcMemHandle h, unsigned flags) {
    return cuIpcOpenMemHandle_v2(p, h, flags);
}
/* Unmapping: marked in the execution log at the call, so a test sees what ran before it. */
EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
    exec_log("mark ipc close");
    logf_("cuIpcCloseMemHandle %s", p ? "ok" : "null");
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemAllocHost_v2(void **p, size_t bytes) {
    *p = new_alloc(bytes, 1);
    logf_("cuMemAllocHost_v2 %zu", bytes);
    return CUDA_SUCCESS;
}
/* Pinned, device-mapped host memory: the device address is the host address. Not logged (the
 * pool's fence words). */
EXPORT CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned flags) {
    (void)flags;
    *p = new_alloc_as(bytes, 1, 1);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned flags) {
    (void)flags;
    if (!find_alloc((uintptr_t)p)) return CUDA_ERROR_INVALID_VALUE;
    *d = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}
/* A stream-ordered 64-bit write (vitamin's memory fences; pool internals: not logged). */
EXPORT CUresult cuStreamWriteValue64_v2(CUstream s, CUdeviceptr addr, unsigned long long value, unsigned flags) {
    (void)flags;
    fstream *st = stream_of(s);
    if (!find_alloc((uintptr_t)addr)) return CUDA_ERROR_INVALID_VALUE;
    cmd *c = new_cmd(C_WRITE64);
    c->dst = (uintptr_t)addr;
    c->value64 = value;
    submit(st, c);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemFree_v2(CUdeviceptr p) { drain_device(); drop_alloc((uintptr_t)p); logf_("cuMemFree_v2"); return CUDA_SUCCESS; }
EXPORT CUresult cuMemFreeHost(void *p) { drain_device(); drop_alloc((uintptr_t)p); logf_("cuMemFreeHost"); return CUDA_SUCCESS; }
EXPORT CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p) {
    if (attr != 2) return CUDA_ERROR_INVALID_VALUE; /* only CU_POINTER_ATTRIBUTE_MEMORY_TYPE */
    alloc_t *a = find_alloc((uintptr_t)p);
    if (!a) return CUDA_ERROR_INVALID_VALUE; /* pageable host memory is unknown to the driver */
    *(unsigned *)data = a->pinned ? 1 : 2;  /* CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE */
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
    drain_device();
    memcpy((void *)(uintptr_t)dst, src, n); logf_("cuMemcpyHtoD_v2 %zu", n); return CUDA_SUCCESS;
}
EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
    drain_device();
    memcpy(dst, (void *)(uintptr_t)src, n); logf_("cuMemcpyDtoH_v2 %zu", n); return CUDA_SUCCESS;
}
/* A stream-ordered copy with the native rules for pageable host memory. */
static CUresult copy_async(const char *via, uintptr_t dst, uintptr_t src, size_t n, CUstream s) {
    fstream *st = stream_of(s);
    CUresult injected = fake_injected(via, st);
    if (injected) return injected;
    char a[48], b[48];
    describe(a, sizeof a, dst);
    describe(b, sizeof b, src);
    logf_("%s %s<-%s %zu stream=%d", via, a, b, n, st->index);
    int dst_pageable = !find_alloc(dst), src_pageable = !find_alloc(src);
    cmd *c = new_cmd(C_COPY);
    c->dst = dst; c->src = src; c->bytes = n;
    if (dst_pageable && async_mode()) { /* device -> pageable: completes before returning */
        submit(st, c);
        drain_stream(st);
        return CUDA_SUCCESS;
    }
    if (src_pageable && async_mode()) { /* pageable -> device: staged at the call */
        c->staged = malloc(n ? n : 1);
        memcpy(c->staged, (void *)src, n);
    }
    submit(st, c);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
    return copy_async("cuMemcpyAsync", (uintptr_t)dst, (uintptr_t)src, n, s);
}
EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
    if (!async_mode()) { /* part 1's log format, kept for the observe-mode tests */
        memcpy((void *)(uintptr_t)dst, src, n);
        logf_("cuMemcpyHtoDAsync_v2 %zu stream=%d", n, stream_of(s)->index);
        return CUDA_SUCCESS;
    }
    return copy_async("cuMemcpyHtoDAsync_v2", (uintptr_t)dst, (uintptr_t)src, n, s);
}
EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
    return copy_async("cuMemcpyDtoHAsync_v2", (uintptr_t)dst, (uintptr_t)src, n, s);
}
EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
    return copy_async("cuMemcpyDtoDAsync_v2", (uintptr_t)dst, (uintptr_t)src, n, s);
}
static CUresult fill_async(const char *via, CUdeviceptr dst, unsigned v, unsigned elem, size_t n, CUstream s) {
    fstream *st = stream_of(s);
    CUresult injected = fake_injected(via, st);
    if (injected) return injected;
    char a[48];
    describe(a, sizeof a, (uintptr_t)dst);
    if (!async_mode() && elem == 1) logf_("%s %u %zu stream=%d", via, v, n, st->index); /* part 1's format */
    else logf_("%s %s %u %zu stream=%d", via, a, v, n, st->index);
    cmd *c = new_cmd(C_FILL);
    c->dst = (uintptr_t)dst; c->value = v; c->elem = elem; c->bytes = n;
    submit(st, c);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) { return fill_async("cuMemsetD8Async", dst, v, 1, n, s); }
EXPORT CUresult cuMemsetD16Async(CUdeviceptr dst, unsigned short v, size_t n, CUstream s) { return fill_async("cuMemsetD16Async", dst, v, 2, n, s); }
EXPORT CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned v, size_t n, CUstream s) { return fill_async("cuMemsetD32Async", dst, v, 4, n, s); }
EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned v, size_t n) {
    drain_device();
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
    fstream *st = new_stream(flags, 0, 0);
    *s = st;
    logf_("cuStreamCreate flags=%u -> stream=%d", flags, st->index);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamCreateWithPriority(CUstream *s, unsigned flags, int priority) {
    fstream *st = new_stream(flags, priority, 0);
    *s = st;
    logf_("cuStreamCreateWithPriority flags=%u priority=%d -> stream=%d", flags, priority, st->index);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamGetFlags(CUstream s, unsigned *flags) { *flags = stream_of(s)->flags; return CUDA_SUCCESS; }
EXPORT CUresult cuStreamGetPriority(CUstream s, int *p) { *p = stream_of(s)->priority; return CUDA_SUCCESS; }
EXPORT CUresult cuStreamDestroy_v2(CUstream s) { logf_("cuStreamDestroy_v2 stream=%d", stream_of(s)->index); return CUDA_SUCCESS; }
static CUresult stream_sync(const char *via, CUstream s) {
    fstream *st = stream_of(s);
    drain_stream(st);
    if (st->ctx == 0) logf_("%s stream=%d", via, st->index); /* green-context lanes: pool internals */
    return sticky();
}
EXPORT CUresult cuStreamSynchronize(CUstream s) { return stream_sync("cuStreamSynchronize", s); }
EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s) { return stream_sync("cuStreamSynchronize_ptsz", s); }
static CUresult stream_synchronize_internal(CUstream s) { return stream_sync("cuStreamSynchronize[internal]", s); }
EXPORT CUresult cuStreamQuery(CUstream s) {
    fstream *st = stream_of(s);
    logf_("cuStreamQuery stream=%d", st->index);
    pthread_mutex_lock(&G);
    int busy = st->completed < st->submitted;
    pthread_mutex_unlock(&G);
    return sticky() ? sticky() : busy ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}
EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, int mode) {
    fstream *st = stream_of(s);
    st->capturing = 1; st->captured = 0;
    logf_("cuStreamBeginCapture_v2 stream=%d mode=%d", st->index, mode);
    return CUDA_SUCCESS;
}
/* Graphs (from stream capture) and executable graphs (instantiated from a graph) share one type:
 * `launches` = kernels captured into it. An executable graph has a version, raised by every update
 * or parameter change; each launch runs with the version current when it was launched (native:
 * changes only affect later launches). Launches of one executable graph are ordered behind its
 * previous launch whatever the stream (native rule); launching a destroyed one fails. */
/* Kernel nodes: one per captured launch. They name a module function (no CUkernel: a copy of the
 * graph cannot move them) unless FAKE_CUDA_GRAPH_KERNELS is set at capture, and run in the primary
 * context unless their parameters were set to a green context (`node_ctx`, cuCtxFromGreenCtx's tag)
 * with `func` null and `kern` set; a launch logs where they ran (`nodes=`). */
typedef struct {
    int launches, index, is_exec, destroyed, version, nlaunched;
    fstream *last_stream;
    unsigned long last_seq;
    void *wait_event; /* an event-wait node (cuGraphAddEventWaitNode) */
    int kern;         /* kernel nodes carry a CUkernel */
    unsigned cluster; /* kernel nodes' cluster size in blocks (FAKE_CUDA_GRAPH_CLUSTER; 0: none) */
    void *node_ctx;   /* the context the kernel nodes name (NULL: primary) */
} fake_graph;
static void graph_event_wait_locked(fstream *st, void *event);
static fake_graph GRAPHS[256];
static int NGRAPHS;
static fake_graph *new_graph(int launches, int is_exec) {
    if (NGRAPHS >= 256) return NULL;
    fake_graph *g = &GRAPHS[NGRAPHS];
    memset(g, 0, sizeof *g);
    g->launches = launches;
    g->index = ++NGRAPHS;
    g->is_exec = is_exec;
    return g;
}
EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *g) {
    fstream *st = stream_of(s);
    if (!st->capturing) return CUDA_ERROR_INVALID_VALUE;
    st->capturing = 0;
    fake_graph *graph = new_graph(st->captured, 0);
    if (!graph) return CUDA_ERROR_INVALID_VALUE;
    graph->kern = getenv("FAKE_CUDA_GRAPH_KERNELS") != NULL;
    graph->cluster = getenv("FAKE_CUDA_GRAPH_CLUSTER") ? (unsigned)atoi(getenv("FAKE_CUDA_GRAPH_CLUSTER")) : 0;
    *g = graph;
    logf_("cuStreamEndCapture stream=%d launches=%d", st->index, st->captured);
    return CUDA_SUCCESS;
}
static CUresult is_capturing(CUstream s, int *status) { *status = stream_of(s)->capturing; return CUDA_SUCCESS; }
EXPORT CUresult cuStreamIsCapturing(CUstream s, int *status) { return is_capturing(s, status); }
EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream s, int *status) { return is_capturing(s, status); }
EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph, unsigned long long flags) {
    fake_graph *g = graph;
    if (!g || !exec) return CUDA_ERROR_INVALID_VALUE;
    fake_graph *e = new_graph(g->launches, 1);
    if (!e) return CUDA_ERROR_INVALID_VALUE;
    e->wait_event = g->wait_event;
    e->kern = g->kern;
    e->cluster = g->cluster;
    e->node_ctx = g->node_ctx;
    *exec = e;
    logf_("cuGraphInstantiateWithFlags graph=%d flags=%llu -> exec=%d", g->index, flags, e->index);
    return CUDA_SUCCESS;
}
static void nodes_name(fake_graph *g, char *buf, size_t n) {
    int gi = g->node_ctx ? green_of_ctx(g->node_ctx) : 0;
    if (gi) snprintf(buf, n, "g%d", gi); else snprintf(buf, n, "p");
}
EXPORT CUresult cuGraphClone(CUgraph *out, CUgraph graph) {
    fake_graph *g = graph;
    if (!g || !out || g->is_exec) return CUDA_ERROR_INVALID_VALUE;
    fake_graph *c = new_graph(g->launches, 0);
    if (!c) return CUDA_ERROR_INVALID_VALUE;
    c->wait_event = g->wait_event;
    c->kern = g->kern;
    c->cluster = g->cluster;
    c->node_ctx = g->node_ctx;
    *out = c;
    logf_("cuGraphClone graph=%d -> graph=%d", g->index, c->index);
    return CUDA_SUCCESS;
}
/* Node handles: (graph index << 8) | (node number + 1); kernel nodes first, then the event-wait
 * node if any. */
static fake_graph *graph_of_node(void *node, int *i) {
    uintptr_t v = (uintptr_t)node;
    int gi = (int)(v >> 8);
    if (gi <= 0 || gi > NGRAPHS || (v & 0xff) == 0) return NULL;
    *i = (int)(v & 0xff) - 1;
    return &GRAPHS[gi - 1];
}
EXPORT CUresult cuGraphGetNodes(CUgraph graph, void **nodes, size_t *n) {
    fake_graph *g = graph;
    if (!g || !n) return CUDA_ERROR_INVALID_VALUE;
    size_t total = (size_t)g->launches + (g->wait_event ? 1 : 0);
    if (!nodes) { *n = total; return CUDA_SUCCESS; }
    size_t k = *n < total ? *n : total;
    for (size_t i = 0; i < k; i++) nodes[i] = (void *)(((uintptr_t)g->index << 8) | (i + 1));
    *n = k;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphNodeGetType(void *node, int *type) {
    int i;
    fake_graph *g = graph_of_node(node, &i);
    if (!g || !type) return CUDA_ERROR_INVALID_VALUE;
    *type = i < g->launches ? 0 /* kernel */ : 6 /* event wait */;
    return CUDA_SUCCESS;
}
typedef struct {
    void *func;
    unsigned grid[3], block[3], smem;
    void **params, **extra;
    void *kern, *ctx;
} fake_kernel_node_params;
EXPORT CUresult cuGraphKernelNodeGetParams_v2(void *node, fake_kernel_node_params *p) {
    int i;
    fake_graph *g = graph_of_node(node, &i);
    if (!g || !p || i >= g->launches) return CUDA_ERROR_INVALID_VALUE;
    memset(p, 0, sizeof *p);
    p->func = g->node_ctx ? NULL : (void *)&FUNCS[0];
    p->kern = g->kern ? (void *)&FAKE_KERNEL_HANDLE : NULL;
    p->ctx = g->node_ctx ? g->node_ctx : (void *)&PRIMARY_CTX;
    p->grid[0] = p->grid[1] = p->grid[2] = p->block[0] = p->block[1] = p->block[2] = 1;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphKernelNodeSetParams_v2(void *node, const fake_kernel_node_params *p) {
    int i;
    fake_graph *g = graph_of_node(node, &i);
    if (!g || !p || g->is_exec || i >= g->launches) return CUDA_ERROR_INVALID_VALUE;
    if (!p->func && !p->kern) return CUDA_ERROR_INVALID_VALUE;
    if (!p->func) g->node_ctx = p->ctx; /* with func set, ctx is ignored (as the driver does) */
    char nodes[16];
    nodes_name(g, nodes, sizeof nodes);
    logf_("cuGraphKernelNodeSetParams_v2 graph=%d node=%d nodes=%s", g->index, i, nodes);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphKernelNodeGetAttribute(void *node, int attr, void *value) {
    int i;
    fake_graph *g = graph_of_node(node, &i);
    if (!g || !value) return CUDA_ERROR_INVALID_VALUE;
    memset(value, 0, 64);
    if (attr == 2 && getenv("FAKE_CUDA_GRAPH_COOPERATIVE")) *(int *)value = 1;
    if (attr == 4 && g->cluster) { /* CLUSTER_DIMENSION: {cluster, 1, 1} */
        unsigned d[3] = {g->cluster, 1, 1};
        memcpy(value, d, sizeof d);
    }
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphDestroy(CUgraph graph) {
    logf_("cuGraphDestroy graph=%d", ((fake_graph *)graph)->index);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec) {
    fake_graph *e = exec;
    if (!e || !e->is_exec || e->destroyed) return CUDA_ERROR_INVALID_VALUE;
    e->destroyed = 1; /* launches in flight finish (they copied what they need) */
    logf_("cuGraphExecDestroy exec=%d launched=%d", e->index, e->nlaunched);
    exec_log("mark exec%d destroyed", e->index);
    return CUDA_SUCCESS;
}
static CUresult exec_changed(const char *via, fake_graph *e, int launches) {
    if (!e || !e->is_exec || e->destroyed) return CUDA_ERROR_INVALID_VALUE;
    e->version++;
    if (launches >= 0) e->launches = launches;
    logf_("%s exec=%d launched=%d -> v%d", via, e->index, e->nlaunched, e->version);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph, void *result_info) {
    (void)result_info;
    return exec_changed("cuGraphExecUpdate_v2", exec, graph ? ((fake_graph *)graph)->launches : -1);
}
EXPORT CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, void *node, const void *params) {
    (void)node; (void)params;
    return exec_changed("cuGraphExecKernelNodeSetParams_v2", exec, -1);
}
static CUresult graph_upload(const char *via, CUgraphExec exec, CUstream s) {
    fake_graph *e = exec;
    if (!e || !e->is_exec || e->destroyed) return CUDA_ERROR_INVALID_VALUE;
    logf_("%s exec=%d launched=%d stream=%d", via, e->index, e->nlaunched, stream_of(s)->index);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphUpload(CUgraphExec exec, CUstream s) { return graph_upload("cuGraphUpload", exec, s); }
EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec exec, CUstream s) { return graph_upload("cuGraphUpload_ptsz", exec, s); }
static CUresult graph_launch(const char *via, CUgraphExec exec, CUstream s) {
    fake_graph *g = exec;
    fstream *st = stream_of(s);
    char ctx[16];
    if (!g || g->destroyed) {
        logf_("%s -> DESTROYED", via);
        return CUDA_ERROR_INVALID_VALUE;
    }
    ctx_name(st, ctx, sizeof ctx);
    if (st->capturing) { /* becomes a child-graph node of the capture */
        st->captured += g->launches;
        logf_("%s graph=%d launches=%d stream=%d captured ctx=%s", via, g->index, g->launches, st->index, ctx);
        return CUDA_SUCCESS;
    }
    char nodes[16];
    nodes_name(g, nodes, sizeof nodes);
    if (g->cluster && g->node_ctx && GREEN_SMS[green_of_ctx(g->node_ctx)] < g->cluster) {
        /* kernel nodes in clusters larger than their green context holds */
        logf_("%s graph=%d stream=%d ctx=%s nodes=%s -> CLUSTER_TOO_LARGE", via, g->index, st->index, ctx, nodes);
        return 912; /* CUDA_ERROR_INVALID_CLUSTER_SIZE */
    }
    pthread_mutex_lock(&G);
    int seq = ++g->nlaunched;
    logf_("%s graph=%d.%d launches=%d v%d stream=%d ctx=%s nodes=%s", via, g->index, seq, g->launches, g->version,
          st->index, ctx, nodes);
    legacy_edges_locked(st);
    if (async_mode() && g->last_stream && g->last_stream != st && g->last_stream->completed < g->last_seq) {
        cmd *w = new_cmd(C_WAIT); /* behind the previous launch of this executable graph */
        w->target = g->last_stream;
        w->seq = g->last_seq;
        push_locked(st, w);
    }
    if (g->wait_event) graph_event_wait_locked(st, g->wait_event);
    cmd *c = new_cmd(C_GRAPH);
    c->graph_index = g->index;
    c->graph_launches = g->launches;
    c->graph_seq = seq;
    c->graph_version = g->version;
    c->graph_nodes_green = g->node_ctx ? green_of_ctx(g->node_ctx) : 0;
    g->last_seq = push_locked(st, c);
    g->last_stream = st;
    pthread_mutex_unlock(&G);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphLaunch(CUgraphExec g, CUstream s) { return graph_launch("cuGraphLaunch", g, s); }
EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s) { return graph_launch("cuGraphLaunch_ptsz", g, s); }
EXPORT CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data) {
    fstream *st = stream_of(s);
    if (!fn) return CUDA_ERROR_INVALID_VALUE;
    CUresult injected = fake_injected("cuLaunchHostFunc", st);
    if (injected) return injected;
    if (st->ctx == 0) logf_("cuLaunchHostFunc stream=%d", st->index);
    else logf_("cuLaunchHostFunc ctx=g%d", st->ctx);
    cmd *c = new_cmd(C_HOST);
    c->fn = fn; c->user = data;
    submit(st, c);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void *data, unsigned flags) {
    fstream *st = stream_of(s);
    if (!cb || flags) return CUDA_ERROR_INVALID_VALUE;
    logf_("cuStreamAddCallback stream=%d", st->index);
    cmd *c = new_cmd(C_CALLBACK);
    c->cb = cb; c->user = data;
    submit(st, c);
    return CUDA_SUCCESS;
}

typedef struct { int index; unsigned flags; fstream *st; unsigned long seq; } fake_event;
static int EVENTS;
EXPORT CUresult cuEventCreate(CUevent *e, unsigned flags) {
    fake_event *ev = calloc(1, sizeof *ev);
    ev->index = ++EVENTS;
    ev->flags = flags;
    *e = ev;
    logf_("cuEventCreate flags=%u -> event=%d", flags, ev->index);
    return CUDA_SUCCESS;
}
static int event_done_locked(fake_event *ev) { return !ev->st || ev->st->completed >= ev->seq; }
EXPORT CUresult cuEventRecord(CUevent e, CUstream s) {
    fake_event *ev = e;
    fstream *st = stream_of(s);
    CUresult injected = fake_injected("cuEventRecord", st);
    if (injected) return injected;
    if (st->ctx == 0) logf_("cuEventRecord event=%d stream=%d", ev->index, st->index); /* pool fences: not logged */
    pthread_mutex_lock(&G);
    legacy_edges_locked(st);
    ev->st = st;
    ev->seq = push_locked(st, new_cmd(C_RECORD));
    pthread_mutex_unlock(&G);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventQuery(CUevent e) {
    fake_event *ev = e;
    spin_ns(env_ns("FAKE_CUDA_QUERY_NS", &QUERY_NS));
    pthread_mutex_lock(&G);
    int done = event_done_locked(ev);
    int pool = ev->st && ev->st->ctx;
    pthread_mutex_unlock(&G);
    if (!pool) logf_("cuEventQuery event=%d", ev->index);
    return sticky() ? sticky() : done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
EXPORT CUresult cuEventSynchronize(CUevent e) {
    fake_event *ev = e;
    pthread_mutex_lock(&G);
    while (!event_done_locked(ev)) pthread_cond_wait(&GC, &G);
    pthread_mutex_unlock(&G);
    logf_("cuEventSynchronize event=%d", ev->index);
    return sticky();
}
EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags) {
    fake_event *ev = e;
    fstream *st = stream_of(s);
    CUresult injected = fake_injected("cuStreamWaitEvent", st);
    if (injected) return injected;
    logf_("cuStreamWaitEvent stream=%d event=%d flags=%u", st->index, ev->index, flags);
    pthread_mutex_lock(&G);
    if (ev->st && async_mode()) {
        cmd *w = new_cmd(C_WAIT);
        w->target = ev->st;
        w->seq = ev->seq;
        legacy_edges_locked(st);
        push_locked(st, w);
    }
    pthread_mutex_unlock(&G);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventDestroy_v2(CUevent e) {
    fake_event *ev = e;
    if (!ev->st || ev->st->ctx == 0) logf_("cuEventDestroy_v2 event=%d", ev->index);
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- launches */
static CUresult launch(const char *via, void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                       unsigned bz, unsigned smem, CUstream s, void **params, void **extra,
                       const CUlaunchAttribute *attrs, unsigned nattrs) {
    int fi = func_index(f);
    spin_ns(env_ns("FAKE_CUDA_LAUNCH_NS", &LAUNCH_NS));
    if (sticky()) return sticky();
    if (fi < 0) return CUDA_ERROR_INVALID_HANDLE;
    if (bx == 0 || by == 0 || bz == 0 || gx == 0 || gy == 0 || gz == 0 || (unsigned long)bx * by * bz > 1024 ||
        (int)smem > MAX_DYNAMIC_SMEM[fi] || (params && extra)) {
        logf_("%s %s grid=%u,%u,%u block=%u,%u,%u -> INVALID", via, FUNCS[fi].name, gx, gy, gz, bx, by, bz);
        return CUDA_ERROR_INVALID_VALUE;
    }
    fstream *target = stream_of(s);
    if (target && target->ctx > 0 && target->ctx < 256 && (int)smem > green_limit(target->ctx, fi)) {
        logf_("%s %s smem=%u on g%d -> INVALID (green context limit %d)", via, FUNCS[fi].name, smem, target->ctx,
              green_limit(target->ctx, fi));
        return CUDA_ERROR_INVALID_VALUE;
    }
    unsigned long blocks = (unsigned long)gx * gy * gz;
    int cooperative = 0;
    for (unsigned k = 0; k < nattrs; k++)
        if (attrs[k].id == 2 && attrs[k].value[0]) cooperative = 1;
    unsigned cvol = cluster_volume(attrs, nattrs), sms = sms_of(target);
    if (cooperative && blocks > 8ul * sms) { /* co-residency on this stream's context */
        logf_("%s %s grid=%u,%u,%u block=%u,%u,%u sms=%u -> TOO_LARGE", via, FUNCS[fi].name, gx, gy, gz, bx, by, bz, sms);
        return 720; /* CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE */
    }
    if (fi == 3 && target->ctx > 0 && blocks > 8ul * sms) {
        /* A collective whose blocks cannot all be resident on this green context (a partition
         * smaller than the device): on a GPU its resident blocks could spin for ever on peers whose
         * blocks wait for units here. Modelled as a timeout the context keeps (sticky). On the
         * whole device a collective runs as the application launched it, with or without vitamin. */
        logf_("%s %s grid=%u,%u,%u sms=%u -> WOULD_HANG", via, FUNCS[fi].name, gx, gy, gz, sms);
        __atomic_store_n(&STICKY, 702, __ATOMIC_RELEASE); /* CUDA_ERROR_LAUNCH_TIMEOUT */
        return CUDA_SUCCESS;
    }
    if (cvol) {
        unsigned d[3];
        for (unsigned k = 0; k < nattrs; k++) if (attrs[k].id == 4) memcpy(d, attrs[k].value, sizeof d);
        if (!d[0] || !d[1] || !d[2] || gx % d[0] || gy % d[1] || gz % d[2] || cvol > 16 || cvol > sms) {
            logf_("%s %s grid=%u,%u,%u block=%u,%u,%u sms=%u -> INVALID", via, FUNCS[fi].name, gx, gy, gz, bx, by, bz,
                  sms);
            return 912; /* CUDA_ERROR_INVALID_CLUSTER_SIZE */
        }
    }
    /* Fault injection (FAKE_CUDA_FAIL_GREEN_LAUNCH=N): the N-th kernel launch on a green-context
     * stream (vitamin's lanes) and every later one fails as an unexpected launch error would. */
    static long fail_at = -2;
    static unsigned long green_launches = 0;
    if (fail_at == -2) {
        const char *v = getenv("FAKE_CUDA_FAIL_GREEN_LAUNCH");
        fail_at = v ? atol(v) : -1;
    }
    if (fail_at > 0 && target->ctx > 0 && (long)__atomic_add_fetch(&green_launches, 1, __ATOMIC_SEQ_CST) >= fail_at) {
        logf_("%s %s -> LAUNCH_FAILED (injected)", via, FUNCS[fi].name);
        return 719; /* CUDA_ERROR_LAUNCH_FAILED */
    }
    cmd *c = new_cmd(C_KERNEL);
    c->fi = fi;
    c->threads = (unsigned long)gx * gy * gz * bx * by * bz;
    if (extra) { /* {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END} */
        void *buf = NULL;
        size_t size = 0;
        for (int i = 0; extra[i]; i += 2) {
            if (extra[i] == (void *)1) buf = extra[i + 1];
            else if (extra[i] == (void *)2) size = *(size_t *)extra[i + 1];
            else { free(c); return CUDA_ERROR_INVALID_VALUE; }
        }
        if (!buf || size < FUNCS[fi].total || size > sizeof c->params) { free(c); return CUDA_ERROR_INVALID_VALUE; }
        memcpy(c->params, buf, FUNCS[fi].total);
    } else {
        for (int p = 0; p < FUNCS[fi].nparams; p++) memcpy(c->params + FUNCS[fi].offset[p], params[p], FUNCS[fi].size[p]);
    }
    fstream *st = stream_of(s);
    if (getenv("FAKE_CUDA_LOG")) { /* formatting costs: only when logging (the hook-cost bench does not) */
        char args[512], at[256], ctx[16];
        fmt_args(args, sizeof args, fi, c->params);
        /* attributes sorted by id: id:first 8 value bytes */
        size_t len = 0;
        at[0] = 0;
        for (unsigned id = 0; id < 64; id++)
            for (unsigned k = 0; k < nattrs; k++)
                if (attrs[k].id == id) {
                    len += snprintf(at + len, sizeof at - len, "%s%u:", len ? "," : "", id);
                    for (int b = 0; b < 8; b++) len += snprintf(at + len, sizeof at - len, "%02x", attrs[k].value[b]);
                }
        logf_("%s %s grid=%u,%u,%u block=%u,%u,%u smem=%u stream=%d%s ctx=%s args=%s attrs=%s", via, FUNCS[fi].name, gx,
              gy, gz, bx, by, bz, smem, st->index, st->capturing ? " captured" : "", ctx_name(st, ctx, sizeof ctx), args,
              at);
    }
    if (st->capturing) { st->captured++; free(c); return CUDA_SUCCESS; }
    submit(st, c);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                               unsigned smem, CUstream s, void **params, void **extra) {
    return launch("cuLaunchKernel", f, gx, gy, gz, bx, by, bz, smem, s, params, extra, NULL, 0);
}
EXPORT CUresult cuLaunchKernel_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                    unsigned bz, unsigned smem, CUstream s, void **params, void **extra) {
    return launch("cuLaunchKernel_ptsz", f, gx, gy, gz, bx, by, bz, smem, s, params, extra, NULL, 0);
}
static CUresult launch_kernel_internal(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                       unsigned bz, unsigned smem, CUstream s, void **params, void **extra) {
    return launch("cuLaunchKernel[internal]", f, gx, gy, gz, bx, by, bz, smem, s, params, extra, NULL, 0);
}
/* Cooperative launches: the same as cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_COOPERATIVE = 1 (so
 * their log lines compare equal to the shim's resubmission through cuLaunchKernelEx). */
static CUresult launch_cooperative(const char *via, void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                   unsigned by, unsigned bz, unsigned smem, CUstream s, void **params) {
    CUlaunchAttribute coop;
    memset(&coop, 0, sizeof coop);
    coop.id = 2;
    coop.value[0] = 1;
    return launch(via, f, gx, gy, gz, bx, by, bz, smem, s, params, NULL, &coop, 1);
}
EXPORT CUresult cuLaunchCooperativeKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                          unsigned bz, unsigned smem, CUstream s, void **params) {
    return launch_cooperative("cuLaunchCooperativeKernel", f, gx, gy, gz, bx, by, bz, smem, s, params);
}
EXPORT CUresult cuLaunchCooperativeKernel_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                               unsigned by, unsigned bz, unsigned smem, CUstream s, void **params) {
    return launch_cooperative("cuLaunchCooperativeKernel_ptsz", f, gx, gy, gz, bx, by, bz, smem, s, params);
}
EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *c, void *f, void **params, void **extra) {
    return launch("cuLaunchKernelEx", f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
                  c->sharedMemBytes, c->hStream, params, extra, c->attrs, c->numAttrs);
}
EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, void *f, void **params, void **extra) {
    return launch("cuLaunchKernelEx_ptsz", f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY,
                  c->blockDimZ, c->sharedMemBytes, c->hStream, params, extra, c->attrs, c->numAttrs);
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

/* ---------------------------------------------------------------- later entry points
 * Stream-ordered calls bind mode forwards after draining the logical stream (the list in
 * shim-cuda/data/native_entry_points.txt), minimal: each is one C_OP command run in stream order
 * on the stream's worker, with its begin and end in the execution log. Plus contexts made with
 * cuCtxCreate, devices beyond the first (FAKE_CUDA_DEVICES=n, at most 8: same SMs, same memory),
 * and module/library unloads (they drain the device first, as the driver synchronizes). */
static int device_count(void) {
    const char *n = getenv("FAKE_CUDA_DEVICES");
    int d = n ? atoi(n) : 1;
    return d < 1 ? 1 : d > 8 ? 8 : d;
}
typedef struct { int magic; int device; int index; } fake_ctx;
static int NCTXS;
static int device_of_ctx(void *c) {
    if (c >= (void *)&OTHER_PRIMARY_CTX[1] && c < (void *)&OTHER_PRIMARY_CTX[8]) return (int)((int *)c - OTHER_PRIMARY_CTX);
    for (int i = 0; i < 256; i++) if (c == (void *)&GREEN_CTX_TAGS[i]) return GREEN_DEV[i];
    if (c != (void *)&PRIMARY_CTX && ((fake_ctx *)c)->magic == 0xc7) return ((fake_ctx *)c)->device;
    return 0;
}
EXPORT CUresult cuCtxCreate_v2(CUcontext *c, unsigned flags, int dev) {
    if (dev < 0 || dev >= device_count()) return CUDA_ERROR_INVALID_VALUE;
    fake_ctx *x = calloc(1, sizeof *x);
    x->magic = 0xc7; x->device = dev; x->index = ++NCTXS;
    *c = x;
    CURRENT = x;
    logf_("cuCtxCreate_v2 flags=%u dev=%d -> ctx=%d", flags, dev, x->index);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxDestroy_v2(CUcontext c) {
    drain_device();
    logf_("cuCtxDestroy_v2");
    exec_log("mark cuCtxDestroy_v2");
    if (CURRENT == c) CURRENT = NULL;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuModuleLoadData(void **mod, const void *image) { (void)image; static int m; *mod = &m; logf_("cuModuleLoadData"); return CUDA_SUCCESS; }
EXPORT CUresult cuModuleUnload(void *mod) {
    (void)mod;
    drain_device();
    logf_("cuModuleUnload");
    exec_log("mark cuModuleUnload");
    return CUDA_SUCCESS;
}
EXPORT CUresult cuLibraryUnload(void *lib) {
    (void)lib;
    drain_device();
    logf_("cuLibraryUnload");
    exec_log("mark cuLibraryUnload");
    return CUDA_SUCCESS;
}
static void op_log(cmd *c) {
    fstream *st = c->target;
    char ctx[16];
    exec_log("begin %s ctx=%s stream=%d", c->label, ctx_name(st, ctx, sizeof ctx), st->index);
    exec_log("end %s", c->label);
}
static void op_write32(cmd *c) { __atomic_store_n((unsigned *)c->dst, c->value, __ATOMIC_RELEASE); op_log(c); }
static void op_wait32(cmd *c) { /* CU_STREAM_WAIT_VALUE_GEQ */
    fstream *st = c->target;
    char ctx[16];
    exec_log("begin %s ctx=%s stream=%d", c->label, ctx_name(st, ctx, sizeof ctx), st->index);
    while ((int)(__atomic_load_n((unsigned *)c->dst, __ATOMIC_ACQUIRE) - c->value) < 0) usleep(100);
    exec_log("end %s", c->label);
}
static void op_copies(cmd *c) { /* cuMemcpyBatchAsync: c->src = {dsts, srcs, sizes}, c->bytes = count */
    uintptr_t *a = (uintptr_t *)c->src;
    for (size_t i = 0; i < c->bytes; i++)
        memcpy((void *)((uintptr_t *)a[0])[i], (void *)((uintptr_t *)a[1])[i], ((size_t *)a[2])[i]);
    free(a);
    op_log(c);
}
static CUresult submit_op(CUstream s, void (*op)(cmd *), const char *label, uintptr_t dst, unsigned value) {
    fstream *st = stream_of(s);
    cmd *c = new_cmd(C_OP);
    c->op = op; c->target = st; c->dst = dst; c->value = value;
    snprintf(c->label, sizeof c->label, "%s", label);
    logf_("%s stream=%d", label, st->index);
    submit(st, c);
    return sticky();
}
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t bytes, CUstream s) {
    *p = (CUdeviceptr)(uintptr_t)new_alloc(bytes, 0);
    return submit_op(s, op_log, "allocasync", 0, 0);
}
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t bytes, void *pool, CUstream s) {
    (void)pool;
    *p = (CUdeviceptr)(uintptr_t)new_alloc(bytes, 0);
    return submit_op(s, op_log, "poolallocasync", 0, 0);
}
EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { (void)p; return submit_op(s, op_log, "freeasync", 0, 0); }
typedef struct { int type, id; } CUmemLocation;
EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned flags, CUstream s) {
    (void)p; (void)n; (void)flags;
    char label[48];
    snprintf(label, sizeof label, "prefetch loc=%d.%d", loc.type, loc.id);
    return submit_op(s, op_log, label, 0, 0);
}
EXPORT CUresult cuStreamWriteValue32_v2(CUstream s, CUdeviceptr addr, unsigned value, unsigned flags) {
    (void)flags;
    if (!find_alloc((uintptr_t)addr)) return CUDA_ERROR_INVALID_VALUE;
    return submit_op(s, op_write32, "write32", (uintptr_t)addr, value);
}
EXPORT CUresult cuStreamWaitValue32_v2(CUstream s, CUdeviceptr addr, unsigned value, unsigned flags) {
    if (flags != 0 || !find_alloc((uintptr_t)addr)) return CUDA_ERROR_INVALID_VALUE; /* GEQ only */
    return submit_op(s, op_wait32, "wait32", (uintptr_t)addr, value);
}
EXPORT CUresult cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, void *attrs,
                                      size_t *attr_idxs, size_t num_attrs, CUstream s) {
    (void)attrs; (void)attr_idxs; (void)num_attrs;
    fstream *st = stream_of(s);
    uintptr_t *a = malloc(3 * sizeof *a);
    a[0] = (uintptr_t)dsts; a[1] = (uintptr_t)srcs; a[2] = (uintptr_t)sizes;
    cmd *c = new_cmd(C_OP);
    c->op = op_copies; c->target = st; c->src = (uintptr_t)a; c->bytes = count;
    snprintf(c->label, sizeof c->label, "batchcopy");
    logf_("cuMemcpyBatchAsync_v2 %zu stream=%d", count, st->index);
    submit(st, c);
    return sticky();
}
EXPORT CUresult cuSignalExternalSemaphoresAsync(const void *sems, const void *params, unsigned n, CUstream s) {
    (void)sems; (void)params; (void)n;
    return submit_op(s, op_log, "extsignal", 0, 0);
}
EXPORT CUresult cuStreamAttachMemAsync(CUstream s, CUdeviceptr p, size_t n, unsigned flags) {
    (void)p; (void)n; (void)flags;
    return submit_op(s, op_log, "attach", 0, 0);
}
/* A forked child: the parent's stream workers do not exist here and the locks may hold their
 * state; start over (each stream gets a new worker at its next command). Real CUDA does not
 * support a context across fork; the fake lets a child use new streams, which is what the shim's
 * fork test needs. */
static void fake_after_fork_in_child(void) {
    pthread_mutex_init(&G, NULL);
    pthread_cond_init(&GC, NULL);
    pthread_mutex_init(&LOG_LOCK, NULL);
    pthread_mutex_init(&ALLOC_LOCK, NULL);
    LEGACY.has_thread = 0;
    for (fstream *s = ALL_STREAMS; s; s = s->next_stream) s->has_thread = 0;
}
__attribute__((constructor)) static void fake_register_fork_handler(void) {
    pthread_atfork(NULL, NULL, fake_after_fork_in_child);
}

/* A graph's event-wait node: each launch waits for the event's latest record, as natively. */
EXPORT CUresult cuGraphAddEventWaitNode(void **node, CUgraph graph, const void *deps, size_t n, CUevent e) {
    (void)deps; (void)n;
    fake_graph *g = graph;
    if (!g || g->is_exec || !e) return CUDA_ERROR_INVALID_VALUE;
    g->wait_event = e;
    *node = g;
    logf_("cuGraphAddEventWaitNode graph=%d event=%d", g->index, ((fake_event *)e)->index);
    return CUDA_SUCCESS;
}
static void graph_event_wait_locked(fstream *st, void *event) {
    fake_event *ev = event;
    if (!ev->st || !async_mode()) return;
    cmd *w = new_cmd(C_WAIT);
    w->target = ev->st;
    w->seq = ev->seq;
    push_locked(st, w);
}
