/*
 * A test double of libamdhip64.so for vitamin's CI (no AMD GPU anywhere).
 *
 * Compiled against Debian's real HIP headers (libamdhip64-dev 5.2.3), so every function here has
 * the real prototype, and hipDeviceProp_t / the enums have the real layout and values. Exported
 * symbols carry the real library's version nodes (libamdhip64.map, checked against Debian's
 * libamdhip64.so.5 by hal-hip's symbol test).
 *
 * What it simulates:
 * - One device (FAKE_HIP_DEVICE): "mi300x" (default: AMD Instinct MI300X, gfx942, 304 CUs),
 *   "wgp" (AMD Radeon RX 7900 XTX, gfx1100, 96 CUs, WGP mode: a CU mask must hold whole CU pairs,
 *   2k and 2k+1, or stream creation fails), or "none" (hipGetDeviceCount: hipErrorNoDevice).
 * - "Device" memory is host memory. FAKE_HIP_MEM_BYTES caps hipMalloc (hipErrorOutOfMemory).
 * - Devices: FAKE_HIP_DEVICES (1..8, default 1) devices of one kind; a stream belongs to the device
 *   current at its creation (hipSetDevice; "dev=N" on its creation line for N > 0).
 * - Streams: hipExtStreamCreateWithCUMask remembers its mask (hipExtStreamGetCUMask reads it
 *   back); plain streams get the full mask. Each stream is a FIFO executed by its own worker
 *   thread (started at its first operation), so streams run concurrently and each in order.
 *   FAKE_HIP_DELAY_US: every kernel takes at least that long.
 * - Kernels run on the CPU: reduce_partial, reduce_final, busy, axpy, empty_kernel, with the block
 *   structure of vitamin's simulated device (hal::sim), so results are bitwise those of the sim;
 *   and every kernel of vitamin's determinism suite (suite_kernels.c, which documents them and
 *   FAKE_HIP_PERTURB). Modules come from the fake hipRTC (a "code object" is the source text
 *   behind a header and an "// options:" line with the compile options).
 * - Events and hipStreamWriteValue64 complete when their stream reaches them; hipStreamWaitEvent
 *   holds its stream until the event's generation at the call is reached.
 * - The null stream is the legacy default stream: an operation on it waits for every stream's
 *   earlier work and runs on the calling thread (stronger than HIP's rule, which exempts
 *   non-blocking streams; never weaker). hipStreamPerThread is a stream of the calling thread.
 * - Stream capture: hipStreamBeginCapture .. hipStreamEndCapture records a stream's operations
 *   into a graph instead of running them; hipGraphInstantiate / hipGraphLaunch run them in order
 *   on the launching stream (logged as "graph", with the captured operations inside).
 * - Launch arguments: kernel parameters, or an `extra` array of the one form HIP takes
 *   ({HIP_LAUNCH_PARAM_BUFFER_POINTER, buffer, HIP_LAUNCH_PARAM_BUFFER_SIZE, &size,
 *   HIP_LAUNCH_PARAM_END}; any other: hipErrorInvalidValue), the buffer laid out at the
 *   parameters' natural alignment.
 * - hipExtModuleLaunchKernel, exported as HIP 5.2 does, under its C++ name only: global work
 *   sizes in threads; a local size above the global one is cut to it; every kernel here has a
 *   uniform work-group size, so a global size that is not a multiple of the local one is
 *   hipErrorInvalidValue; the start and stop events are recorded around the kernel on its stream.
 * - hipLaunchKernelExC and hipDrvLaunchKernelEx (ROCm 6; their types declared here, from ROCm 6's
 *   hip_runtime_api.h): the attribute hipLaunchAttributeCooperative (non-zero) makes the launch
 *   cooperative ("launch-cooperative-ex" in the log); the other ids ROCm 6 defines (1, 3, 8, 9,
 *   10) are accepted and logged ("attrs=<id>,.."); any other id is hipErrorInvalidValue.
 * - Host-side kernel stubs: __hipRegisterFatBinary / __hipRegisterFunction (what hipcc's start-up
 *   code calls) bind a host address to a kernel by name; hipLaunchKernel, hipExtLaunchKernel and
 *   hipLaunchCooperativeKernel launch through it. hipGetFuncBySymbol (ROCm 6) and
 *   hipKernelGetParamInfo (ROCm 7) answer for registered and module functions.
 * - Log (FAKE_HIP_LOG, one global order): "call ..." lines for stream creation/destruction,
 *   launches and event records, "exec begin/end ..." lines as the workers run operations, with the stream and its
 *   CU mask, so a test sees which kernel ran on which stream with which mask, and in what order.
 * - Failure injection:
 *     FAKE_HIP_FAIL_KERNEL=<name>   kernels of that name fail asynchronously: hipErrorLaunchFailure
 *                                   (sticky) from every later query or synchronize call
 *     FAKE_HIP_FAIL_STREAM_CREATE=n the n-th stream creation (1-based) fails (hipErrorInvalidValue)
 *     FAKE_HIP_MAX_STREAMS=n        more than n live streams: hipErrorOutOfMemory (queue memory)
 *     FAKE_HIP_API=5.2              hipGetFuncBySymbol and hipKernelGetParamInfo (ROCm 6, 7) answer
 *                                   hipErrorNotSupported, as on a runtime without them
 * - HIP green contexts (ROCm 7.14) only in the variant built with FAKE_HIP_GREEN_CONTEXTS: see the
 *   section at the end of this file (split, descriptors, contexts, context streams).
 * - hipModuleLoadData also takes a real code object (ELF) or offload bundle as holding every
 *   reference kernel (their metadata is the interposer's to read).
 *
 * Build: cc -shared -fPIC -pthread -I/usr/include -Wl,--version-script=libamdhip64.map
 *           -Wl,-soname,libamdhip64.so.5 -o libamdhip64.so.5 libamdhip64.c
 */
#define __HIP_PLATFORM_AMD__ 1
#include <hip/hip_runtime_api.h>
#include <hip/hiprtc.h>

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_MASK_WORDS 16

/* ------------------------------------------------------------------ configuration */
typedef struct {
    const char *name, *arch;
    int cus, gcn_arch, major, minor, warp;
    int wgp;
} device_t;

static const device_t MI300X = {"AMD Instinct MI300X", "gfx942:sramecc+:xnack-", 304, 942, 9, 4, 64, 0};
static const device_t RX7900 = {"AMD Radeon RX 7900 XTX", "gfx1100", 96, 1100, 11, 0, 32, 1};

static const device_t *device(void) {
    const char *d = getenv("FAKE_HIP_DEVICE");
    if (d && strcmp(d, "none") == 0) return NULL;
    if (d && strcmp(d, "wgp") == 0) return &RX7900;
    return &MI300X;
}

static long env_long(const char *name, long dflt) {
    const char *v = getenv(name);
    return v && *v ? atol(v) : dflt;
}

/* ------------------------------------------------------------------ log */
static pthread_mutex_t LOG_LOCK = PTHREAD_MUTEX_INITIALIZER;

static void logf_(const char *fmt, ...) {
    const char *path = getenv("FAKE_HIP_LOG");
    if (!path) return;
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&LOG_LOCK);
    FILE *f = fopen(path, "a");
    if (f) {
        vfprintf(f, fmt, ap);
        fputc('\n', f);
        fclose(f);
    }
    pthread_mutex_unlock(&LOG_LOCK);
    va_end(ap);
}

/* ------------------------------------------------------------------ sticky error */
static pthread_mutex_t STATE_LOCK = PTHREAD_MUTEX_INITIALIZER;
static hipError_t STICKY = hipSuccess;
static __thread hipError_t LAST = hipSuccess;

static hipError_t ret(hipError_t e) {
    if (e != hipSuccess) LAST = e;
    return e;
}

static hipError_t sticky(void) {
    pthread_mutex_lock(&STATE_LOCK);
    hipError_t e = STICKY;
    pthread_mutex_unlock(&STATE_LOCK);
    return e;
}

static void set_sticky(hipError_t e) {
    pthread_mutex_lock(&STATE_LOCK);
    if (STICKY == hipSuccess) STICKY = e;
    pthread_mutex_unlock(&STATE_LOCK);
}

/* ------------------------------------------------------------------ memory */
typedef struct alloc {
    char *base;
    size_t size;
    struct alloc *next;
} alloc_t;
static alloc_t *ALLOCS, *HOST_ALLOCS;
static size_t ALLOCATED;

static const size_t TOTAL_MEM = (size_t)192 << 30;

static size_t mem_limit(void) { return (size_t)env_long("FAKE_HIP_MEM_BYTES", (long)(64L << 30)); }

/* ------------------------------------------------------------------ kernels */
#define MAX_PARAMS 8

typedef struct {
    const char *name;
    int nparams;
    int sizes[MAX_PARAMS];
    int suite; /* flags of a suite kernel (suite_kernels.c), 0 for the kernels below */
} kernel_sig_t;

/* suite_kernels.c */
int fake_suite_lookup(const char *name, const char *image, int *nparams, int *sizes, int max, int *flags);
void fake_suite_run(const char *name, int flags, const unsigned grid[3], const unsigned block[3],
                    const unsigned char *args, const int *offsets);

static const kernel_sig_t KERNELS[] = {
    {"reduce_partial", 3, {8, 4, 8}},
    {"reduce_final", 3, {8, 4, 8}},
    {"busy", 1, {4}},
    {"axpy", 4, {4, 8, 8, 4}},
    {"empty_kernel", 0, {0}},
    /* An RCCL collective's name with axpy's parameters and arithmetic (shim-hip/tests/collectives.rs). */
    {"ncclDevKernel_AllReduce_Sum_f32_RING_LL", 4, {4, 8, 8, 4}},
};
#define NKERNELS (int)(sizeof(KERNELS) / sizeof(KERNELS[0]))

struct ihipModule_t {
    char *image;
};
struct ihipModuleSymbol_t {
    const kernel_sig_t *sig;
    struct ihipModule_t *module;
};

typedef struct {
    unsigned gx, gy, gz, bx, by, bz;
    unsigned char args[64];
    int offsets[MAX_PARAMS];
} launch_t;

static uint64_t arg_u64(const launch_t *l, int i) {
    uint64_t v;
    memcpy(&v, l->args + l->offsets[i], 8);
    return v;
}
static uint32_t arg_u32(const launch_t *l, int i) {
    uint32_t v;
    memcpy(&v, l->args + l->offsets[i], 4);
    return v;
}
static float arg_f32(const launch_t *l, int i) {
    float v;
    memcpy(&v, l->args + l->offsets[i], 4);
    return v;
}

/* The CPU reference of each kernel, block by block, exactly as hal::sim computes it. */
static void run_kernel(const kernel_sig_t *k, const launch_t *l) {
    uint64_t blocks = (uint64_t)l->gx * l->gy * l->gz;
    uint64_t t = (uint64_t)l->bx * l->by * l->bz;
    if (k->suite) {
        const unsigned grid[3] = {l->gx, l->gy, l->gz}, block[3] = {l->bx, l->by, l->bz};
        fake_suite_run(k->name, k->suite, grid, block, l->args, l->offsets);
    } else if (strcmp(k->name, "reduce_partial") == 0) {
        const float *x = (const float *)(uintptr_t)arg_u64(l, 0);
        uint64_t n = arg_u32(l, 1);
        float *partial = (float *)(uintptr_t)arg_u64(l, 2);
        float *s = calloc(t, sizeof(float));
        for (uint64_t b = 0; b < blocks; b++) {
            for (uint64_t ti = 0; ti < t; ti++) {
                float acc = 0.0f;
                for (uint64_t i = b * t + ti; i < n; i += blocks * t) acc += x[i];
                s[ti] = acc;
            }
            for (uint64_t half = t / 2; half > 0; half /= 2)
                for (uint64_t ti = 0; ti < half; ti++) s[ti] += s[ti + half];
            partial[b] = s[0];
        }
        free(s);
    } else if (strcmp(k->name, "reduce_final") == 0) {
        const float *p = (const float *)(uintptr_t)arg_u64(l, 0);
        uint32_t m = arg_u32(l, 1);
        float *out = (float *)(uintptr_t)arg_u64(l, 2);
        float sum = 0.0f;
        for (uint32_t i = 0; i < m; i++) sum += p[i];
        *out = sum;
    } else if (strcmp(k->name, "axpy") == 0 || strncmp(k->name, "ncclDevKernel_", 14) == 0) {
        float a = arg_f32(l, 0);
        const float *x = (const float *)(uintptr_t)arg_u64(l, 1);
        float *y = (float *)(uintptr_t)arg_u64(l, 2);
        uint64_t n = arg_u32(l, 3);
        for (uint64_t i = 0; i < n; i++) y[i] = a * x[i] + y[i];
    }
    /* busy and empty_kernel compute nothing. */
}

/* ------------------------------------------------------------------ streams and workers */
enum op_kind { OP_KERNEL, OP_COPY, OP_FILL, OP_CALLBACK, OP_EVENT, OP_WRITE64, OP_GRAPH, OP_WAIT };

struct ihipEvent_t;

typedef struct op {
    enum op_kind kind;
    struct op *next;
    /* kernel */
    const kernel_sig_t *sig;
    launch_t launch;
    /* copy / fill / write */
    void *dst;
    const void *src;
    size_t bytes;
    uint32_t value;
    int element_size;
    uint64_t value64;
    /* callback */
    hipStreamCallback_t callback;
    void *user;
    /* event */
    struct ihipEvent_t *event;
    uint64_t generation;
    /* graph launch */
    struct hipGraphExec *exec;
} op_t;

/* A captured graph: the captured operations, in order; an executable graph runs them in order
 * on the stream it is launched on. */
struct ihipGraph {
    op_t *head;
};
struct hipGraphExec {
    struct ihipGraph *graph;
};

struct ihipStream_t {
    int id;
    int dev; /* the device current at creation */
    uint32_t mask[MAX_MASK_WORDS];
    int mask_words;
    int cus;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    op_t *head, *tail;
    int running; /* an op is executing */
    int worker_started, quit;
    int capturing;           /* hipStreamBeginCapture .. hipStreamEndCapture */
    struct op *cap_head, *cap_tail; /* what was captured, in order */
    pthread_t worker;
    int gctx; /* the green context it was created on (0: none) */
};

static struct ihipStream_t LEGACY;

struct ihipEvent_t {
    uint64_t recorded, reached;
    double reached_ms; /* CLOCK_MONOTONIC when the newest generation was reached */
};

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int NEXT_STREAM_ID = 1, LIVE_STREAMS, STREAM_CREATIONS;
static uint64_t EXEC_SEQ;
static pthread_cond_t EVENT_COND = PTHREAD_COND_INITIALIZER;

/* All streams, for device-wide synchronization. */
#define MAX_STREAMS 4096
static struct ihipStream_t *STREAMS[MAX_STREAMS];

static void mask_hex(const struct ihipStream_t *s, char *out, size_t cap) {
    size_t n = 0;
    out[0] = 0;
    for (int w = s->mask_words - 1; w >= 0 && n + 10 < cap; w--)
        n += (size_t)snprintf(out + n, cap - n, "%08x", s->mask[w]);
}

static void describe(const op_t *o, char *out, size_t cap) {
    switch (o->kind) {
    case OP_KERNEL:
        snprintf(out, cap, "kernel %s grid=%ux%ux%u block=%ux%ux%u", o->sig->name, o->launch.gx, o->launch.gy,
                 o->launch.gz, o->launch.bx, o->launch.by, o->launch.bz);
        break;
    case OP_COPY: snprintf(out, cap, "copy %zu", o->bytes); break;
    case OP_FILL: snprintf(out, cap, "fill %zu x %d", o->bytes, o->element_size); break;
    case OP_CALLBACK: snprintf(out, cap, "callback"); break;
    case OP_EVENT: snprintf(out, cap, "event"); break;
    case OP_WRITE64: snprintf(out, cap, "write64 %llu", (unsigned long long)o->value64); break;
    case OP_GRAPH: snprintf(out, cap, "graph"); break;
    case OP_WAIT: snprintf(out, cap, "wait-event"); break;
    }
}

static void execute(struct ihipStream_t *s, op_t *o);
static void execute(struct ihipStream_t *s, op_t *o) {
    char what[160], mask[MAX_MASK_WORDS * 8 + 1];
    describe(o, what, sizeof what);
    mask_hex(s, mask, sizeof mask);
    pthread_mutex_lock(&STATE_LOCK);
    uint64_t seq = ++EXEC_SEQ;
    pthread_mutex_unlock(&STATE_LOCK);
    if (o->kind != OP_EVENT && o->kind != OP_WRITE64)
        logf_("exec begin %llu s%d cus=%d mask=%s %s", (unsigned long long)seq, s->id, s->cus, mask, what);
    int failed = 0;
    switch (o->kind) {
    case OP_KERNEL: {
        const char *fail = getenv("FAKE_HIP_FAIL_KERNEL");
        long delay = env_long("FAKE_HIP_DELAY_US", 0);
        if (delay > 0) usleep((useconds_t)delay);
        if (fail && strcmp(fail, o->sig->name) == 0) {
            failed = 1;
            set_sticky(hipErrorLaunchFailure);
        } else if (sticky() == hipSuccess) {
            run_kernel(o->sig, &o->launch);
        }
        break;
    }
    case OP_COPY: memmove(o->dst, o->src, o->bytes); break;
    case OP_FILL:
        for (size_t i = 0; i < o->bytes; i++) {
            if (o->element_size == 1) ((uint8_t *)o->dst)[i] = (uint8_t)o->value;
            else if (o->element_size == 2) ((uint16_t *)o->dst)[i] = (uint16_t)o->value;
            else ((uint32_t *)o->dst)[i] = o->value;
        }
        break;
    case OP_CALLBACK: o->callback(s == &LEGACY ? NULL : s, sticky(), o->user); break;
    case OP_EVENT:
        pthread_mutex_lock(&STATE_LOCK);
        if (o->event->reached < o->generation) o->event->reached = o->generation;
        o->event->reached_ms = now_ms();
        pthread_cond_broadcast(&EVENT_COND);
        pthread_mutex_unlock(&STATE_LOCK);
        break;
    case OP_WRITE64: __atomic_store_n((uint64_t *)o->dst, o->value64, __ATOMIC_RELEASE); break;
    case OP_GRAPH:
        for (op_t *inner = o->exec && o->exec->graph ? o->exec->graph->head : NULL; inner; inner = inner->next)
            execute(s, inner);
        break;
    case OP_WAIT:
        pthread_mutex_lock(&STATE_LOCK);
        while (o->event->reached < o->generation) pthread_cond_wait(&EVENT_COND, &STATE_LOCK);
        pthread_mutex_unlock(&STATE_LOCK);
        break;
    }
    if (o->kind != OP_EVENT && o->kind != OP_WRITE64)
        logf_("exec end %llu s%d %s%s", (unsigned long long)seq, s->id, what, failed ? " FAILED" : "");
}

static void *worker(void *arg) {
    struct ihipStream_t *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->head && !s->quit) pthread_cond_wait(&s->cond, &s->lock);
        if (!s->head && s->quit) break;
        op_t *o = s->head;
        s->running = 1;
        pthread_mutex_unlock(&s->lock);
        execute(s, o);
        pthread_mutex_lock(&s->lock);
        s->head = o->next;
        if (!s->head) s->tail = NULL;
        s->running = 0;
        free(o);
        pthread_cond_broadcast(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static void drain_all(void);
static struct ihipStream_t *stream_of(hipStream_t s);
static struct ihipStream_t *legacy_stream(void);

static hipError_t enqueue(hipStream_t handle, op_t *o) {
    struct ihipStream_t *s = stream_of(handle);
    if (!s) {
        free(o);
        return ret(hipErrorNoDevice);
    }
    if (s->capturing) {
        /* Captured into the stream's graph, not executed. */
        o->next = NULL;
        if (s->cap_tail) s->cap_tail->next = o;
        else s->cap_head = o;
        s->cap_tail = o;
        return hipSuccess;
    }
    if (s == legacy_stream()) {
        /* The legacy default stream: after every stream's earlier work, on the calling thread. */
        drain_all();
        execute(s, o);
        free(o);
        return hipSuccess;
    }
    o->next = NULL;
    pthread_mutex_lock(&s->lock);
    if (!s->worker_started) {
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setstacksize(&a, 256 * 1024);
        if (pthread_create(&s->worker, &a, worker, s) != 0) {
            pthread_attr_destroy(&a);
            pthread_mutex_unlock(&s->lock);
            free(o);
            return ret(hipErrorOutOfMemory);
        }
        pthread_attr_destroy(&a);
        s->worker_started = 1;
    }
    if (s->tail) s->tail->next = o;
    else s->head = o;
    s->tail = o;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    return hipSuccess;
}

static op_t *new_op(enum op_kind k) {
    op_t *o = calloc(1, sizeof *o);
    o->kind = k;
    return o;
}

static void drain(struct ihipStream_t *s) {
    pthread_mutex_lock(&s->lock);
    while (s->head || s->running) pthread_cond_wait(&s->cond, &s->lock);
    pthread_mutex_unlock(&s->lock);
}

static void drain_all(void) {
    for (int i = 0; i < MAX_STREAMS; i++) {
        pthread_mutex_lock(&STATE_LOCK);
        struct ihipStream_t *s = STREAMS[i];
        pthread_mutex_unlock(&STATE_LOCK);
        if (s) drain(s);
    }
}

static int popcount_mask(const uint32_t *m, int words, int cus) {
    int n = 0;
    for (int i = 0; i < cus && i / 32 < words; i++) n += (m[i / 32] >> (i % 32)) & 1;
    return n;
}

/* The calling thread's current device (hipSetDevice). */
static __thread int CURRENT;

/* Devices: FAKE_HIP_DEVICES (1..8, default 1) of the same kind; a stream belongs to the device
 * current when it was created (logged as dev=N on its creation line when N > 0). */
static int device_count(void) {
    if (!device()) return 0;
    long n = env_long("FAKE_HIP_DEVICES", 1);
    return n < 1 ? 1 : n > 8 ? 8 : (int)n;
}

/* `gctx`: the green context the stream belongs to (0: none), logged as gctx=N. */
static hipError_t create_stream(hipStream_t *out, uint32_t words, const uint32_t *mask, int gctx) {
    const device_t *d = device();
    if (!d) return ret(hipErrorNoDevice);
    if (!out) return ret(hipErrorInvalidValue);
    pthread_mutex_lock(&STATE_LOCK);
    int n = ++STREAM_CREATIONS;
    long fail_at = env_long("FAKE_HIP_FAIL_STREAM_CREATE", 0);
    long max_live = env_long("FAKE_HIP_MAX_STREAMS", 100000);
    hipError_t e = hipSuccess;
    if (fail_at > 0 && n == fail_at) e = hipErrorInvalidValue;
    else if (LIVE_STREAMS >= max_live) e = hipErrorOutOfMemory;
    int id = NEXT_STREAM_ID;
    if (e == hipSuccess && id >= MAX_STREAMS) e = hipErrorOutOfMemory;
    if (e == hipSuccess) {
        NEXT_STREAM_ID++;
        LIVE_STREAMS++;
    }
    pthread_mutex_unlock(&STATE_LOCK);
    if (e != hipSuccess) {
        logf_("call stream-create-failed %d code=%d", n, (int)e);
        return ret(e);
    }
    struct ihipStream_t *s = calloc(1, sizeof *s);
    s->id = id;
    s->dev = CURRENT;
    s->gctx = gctx;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    s->mask_words = (d->cus + 31) / 32;
    for (int i = 0; i < d->cus; i++)
        if (!mask || ((uint32_t)(i / 32) < words && ((mask[i / 32] >> (i % 32)) & 1)))
            s->mask[i / 32] |= 1u << (i % 32);
    s->cus = popcount_mask(s->mask, s->mask_words, d->cus);
    pthread_mutex_lock(&STATE_LOCK);
    STREAMS[id] = s;
    pthread_mutex_unlock(&STATE_LOCK);
    *out = s;
    char hex[MAX_MASK_WORDS * 8 + 1];
    mask_hex(s, hex, sizeof hex);
    char dev[16] = "";
    if (s->dev) snprintf(dev, sizeof dev, " dev=%d", s->dev);
    char green[24] = "";
    if (gctx) snprintf(green, sizeof green, " gctx=g%d", gctx);
    logf_("call stream-create s%d cus=%d mask=%s%s%s%s", id, s->cus, hex, mask ? "" : " (unmasked)", dev, green);
    return hipSuccess;
}

/* The legacy default stream (id 0, every CU), executed inline by enqueue. */
static pthread_once_t LEGACY_ONCE = PTHREAD_ONCE_INIT;

static void legacy_init(void) {
    const device_t *d = device();
    int cus = d ? d->cus : 0;
    LEGACY.id = 0;
    LEGACY.mask_words = (cus + 31) / 32;
    for (int i = 0; i < cus; i++) LEGACY.mask[i / 32] |= 1u << (i % 32);
    LEGACY.cus = cus;
}

static struct ihipStream_t *legacy_stream(void) {
    pthread_once(&LEGACY_ONCE, legacy_init);
    return &LEGACY;
}

/* hipStreamPerThread: one stream per host thread, created at its first use. */
static __thread struct ihipStream_t *PER_THREAD;

/* The stream a handle names: NULL is the legacy stream; NULL only without a device. */
static struct ihipStream_t *stream_of(hipStream_t s) {
    if (!device()) return NULL;
    if (!s) return legacy_stream();
    if (s == hipStreamPerThread) {
        if (!PER_THREAD) {
            hipStream_t made;
            if (create_stream(&made, 0, NULL, 0) != hipSuccess) return NULL;
            PER_THREAD = made;
        }
        return PER_THREAD;
    }
    return s;
}

hipError_t hipExtStreamCreateWithCUMask(hipStream_t *stream, uint32_t cuMaskSize, const uint32_t *cuMask) {
    const device_t *d = device();
    if (!d) return ret(hipErrorNoDevice);
    if (!cuMask || cuMaskSize == 0 || cuMaskSize > MAX_MASK_WORDS) return ret(hipErrorInvalidValue);
    int bits = popcount_mask(cuMask, (int)cuMaskSize, d->cus);
    if (bits == 0) return ret(hipErrorInvalidValue);
    if (d->wgp) {
        for (int i = 0; i + 1 < d->cus; i += 2) {
            int a = ((uint32_t)(i / 32) < cuMaskSize) && ((cuMask[i / 32] >> (i % 32)) & 1);
            int b = ((uint32_t)((i + 1) / 32) < cuMaskSize) && ((cuMask[(i + 1) / 32] >> ((i + 1) % 32)) & 1);
            if (a != b) {
                logf_("call stream-create-refused split WGP at CU %d", i);
                return ret(hipErrorInvalidValue);
            }
        }
    }
    return create_stream(stream, cuMaskSize, cuMask, 0);
}

hipError_t hipExtStreamGetCUMask(hipStream_t stream, uint32_t cuMaskSize, uint32_t *cuMask) {
    if (!stream || !cuMask) return ret(hipErrorInvalidValue);
    for (uint32_t w = 0; w < cuMaskSize; w++) cuMask[w] = w < MAX_MASK_WORDS ? stream->mask[w] : 0;
    return hipSuccess;
}

hipError_t hipStreamCreateWithFlags(hipStream_t *stream, unsigned int flags) {
    (void)flags;
    return create_stream(stream, 0, NULL, 0);
}

hipError_t hipStreamCreate(hipStream_t *stream) { return create_stream(stream, 0, NULL, 0); }

hipError_t hipStreamCreateWithPriority(hipStream_t *stream, unsigned int flags, int priority) {
    (void)flags, (void)priority;
    return create_stream(stream, 0, NULL, 0);
}

hipError_t hipStreamDestroy(hipStream_t s) {
    if (!s) return ret(hipErrorInvalidResourceHandle);
    drain(s);
    pthread_mutex_lock(&s->lock);
    s->quit = 1;
    pthread_cond_broadcast(&s->cond);
    int started = s->worker_started;
    pthread_mutex_unlock(&s->lock);
    if (started) pthread_join(s->worker, NULL);
    pthread_mutex_lock(&STATE_LOCK);
    STREAMS[s->id] = NULL;
    LIVE_STREAMS--;
    pthread_mutex_unlock(&STATE_LOCK);
    logf_("call stream-destroy s%d", s->id);
    free(s);
    return hipSuccess;
}

hipError_t hipStreamSynchronize(hipStream_t handle) {
    struct ihipStream_t *s = stream_of(handle);
    if (!s) return ret(hipErrorNoDevice);
    if (s == legacy_stream()) drain_all();
    else drain(s);
    return ret(sticky());
}

hipError_t hipStreamQuery(hipStream_t handle) {
    struct ihipStream_t *s = stream_of(handle);
    if (!s) return ret(hipErrorNoDevice);
    if (s == legacy_stream()) return ret(sticky()); /* its work ran inline */
    hipError_t e = sticky();
    if (e != hipSuccess) return ret(e);
    pthread_mutex_lock(&s->lock);
    int busy = s->head || s->running;
    pthread_mutex_unlock(&s->lock);
    return busy ? hipErrorNotReady : hipSuccess;
}

hipError_t hipStreamAddCallback(hipStream_t stream, hipStreamCallback_t callback, void *userData,
                                unsigned int flags) {
    if (!callback || flags != 0) return ret(hipErrorInvalidValue);
    op_t *o = new_op(OP_CALLBACK);
    o->callback = callback;
    o->user = userData;
    return enqueue(stream, o);
}

hipError_t hipStreamWaitEvent(hipStream_t stream, hipEvent_t event, unsigned int flags) {
    if (!event || flags != 0) return ret(hipErrorInvalidValue);
    op_t *o = new_op(OP_WAIT);
    o->event = event;
    pthread_mutex_lock(&STATE_LOCK);
    o->generation = event->recorded;
    pthread_mutex_unlock(&STATE_LOCK);
    return enqueue(stream, o);
}

hipError_t hipStreamWriteValue64(hipStream_t stream, void *ptr, uint64_t value, unsigned int flags) {
    (void)flags;
    if (!ptr || ((uintptr_t)ptr & 7)) return ret(hipErrorInvalidValue);
    op_t *o = new_op(OP_WRITE64);
    o->dst = ptr;
    o->value64 = value;
    if (stream && stream != hipStreamPerThread) logf_("call write64 s%d %llu", stream->id, (unsigned long long)value);
    return enqueue(stream, o);
}

hipError_t hipDeviceSynchronize(void) {
    drain_all();
    return ret(sticky());
}

/* ------------------------------------------------------------------ events */
hipError_t hipEventCreateWithFlags(hipEvent_t *event, unsigned flags) {
    (void)flags;
    if (!event) return ret(hipErrorInvalidValue);
    *event = calloc(1, sizeof(struct ihipEvent_t));
    return hipSuccess;
}

hipError_t hipEventCreate(hipEvent_t *event) { return hipEventCreateWithFlags(event, 0); }

hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream) {
    if (!event) return ret(hipErrorInvalidResourceHandle);
    pthread_mutex_lock(&STATE_LOCK);
    uint64_t gen = ++event->recorded;
    pthread_mutex_unlock(&STATE_LOCK);
    struct ihipStream_t *rs = stream_of(stream);
    logf_("call event-record s%d", rs ? rs->id : -1);
    op_t *o = new_op(OP_EVENT);
    o->event = event;
    o->generation = gen;
    return enqueue(stream, o);
}

hipError_t hipEventQuery(hipEvent_t event) {
    if (!event) return ret(hipErrorInvalidResourceHandle);
    hipError_t e = sticky();
    if (e != hipSuccess) return ret(e);
    pthread_mutex_lock(&STATE_LOCK);
    int done = event->reached >= event->recorded;
    pthread_mutex_unlock(&STATE_LOCK);
    return done ? hipSuccess : hipErrorNotReady;
}

hipError_t hipEventSynchronize(hipEvent_t event) {
    if (!event) return ret(hipErrorInvalidResourceHandle);
    pthread_mutex_lock(&STATE_LOCK);
    while (event->reached < event->recorded && STICKY == hipSuccess) pthread_cond_wait(&EVENT_COND, &STATE_LOCK);
    pthread_mutex_unlock(&STATE_LOCK);
    return ret(sticky());
}

hipError_t hipEventElapsedTime(float *ms, hipEvent_t start, hipEvent_t stop) {
    if (!ms) return ret(hipErrorInvalidValue);
    if (!start || !stop) return ret(hipErrorInvalidHandle);
    pthread_mutex_lock(&STATE_LOCK);
    hipError_t e = hipSuccess;
    if (!start->recorded || !stop->recorded) e = hipErrorInvalidHandle;
    else if (start->reached < start->recorded || stop->reached < stop->recorded) e = hipErrorNotReady;
    else *ms = (float)(stop->reached_ms - start->reached_ms);
    pthread_mutex_unlock(&STATE_LOCK);
    return ret(e);
}

hipError_t hipEventDestroy(hipEvent_t event) {
    if (!event) return ret(hipErrorInvalidResourceHandle);
    free(event);
    return hipSuccess;
}

/* ------------------------------------------------------------------ device */
hipError_t hipInit(unsigned int flags) {
    (void)flags;
    return device() ? hipSuccess : ret(hipErrorInvalidDevice);
}

hipError_t hipGetDeviceCount(int *count) {
    if (!count) return ret(hipErrorInvalidValue);
    *count = device_count();
    return device() ? hipSuccess : ret(hipErrorNoDevice);
}

hipError_t hipSetDevice(int id) {
    if (!device()) return ret(hipErrorNoDevice);
    if (id < 0 || id >= device_count()) return ret(hipErrorInvalidDevice);
    CURRENT = id;
    return hipSuccess;
}

hipError_t hipGetDevice(int *id) {
    if (!id) return ret(hipErrorInvalidValue);
    *id = CURRENT;
    return hipSuccess;
}

hipError_t hipRuntimeGetVersion(int *v) {
    if (!v) return ret(hipErrorInvalidValue);
    *v = 50221153;
    return hipSuccess;
}

hipError_t hipDriverGetVersion(int *v) { return hipRuntimeGetVersion(v); }

hipError_t hipDeviceGetAttribute(int *pi, hipDeviceAttribute_t attr, int dev) {
    const device_t *d = device();
    if (!d) return ret(hipErrorNoDevice);
    if (!pi) return ret(hipErrorInvalidValue);
    if (dev < 0 || dev >= device_count()) return ret(hipErrorInvalidDevice);
    switch (attr) {
    case hipDeviceAttributeMultiprocessorCount: *pi = d->cus; break;
    case hipDeviceAttributeCooperativeLaunch: *pi = 1; break;
    case hipDeviceAttributeMaxThreadsPerBlock: *pi = 1024; break;
    case hipDeviceAttributeComputeCapabilityMajor: *pi = d->major; break;
    case hipDeviceAttributeComputeCapabilityMinor: *pi = d->minor; break;
    case hipDeviceAttributeWarpSize: *pi = d->warp; break;
    default: return ret(hipErrorInvalidValue);
    }
    return hipSuccess;
}

hipError_t hipGetDeviceProperties(hipDeviceProp_t *p, int dev) {
    const device_t *d = device();
    if (!d) return ret(hipErrorNoDevice);
    if (!p) return ret(hipErrorInvalidValue);
    if (dev < 0 || dev >= device_count()) return ret(hipErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", d->name);
    snprintf(p->gcnArchName, sizeof p->gcnArchName, "%s", d->arch);
    p->totalGlobalMem = TOTAL_MEM;
    p->multiProcessorCount = d->cus;
    p->gcnArch = d->gcn_arch;
    p->major = d->major;
    p->minor = d->minor;
    p->warpSize = d->warp;
    p->maxThreadsPerBlock = 1024;
    p->cooperativeLaunch = 1;
    return hipSuccess;
}

hipError_t hipDeviceGetName(char *name, int len, hipDevice_t dev) {
    const device_t *d = device();
    if (!d) return ret(hipErrorNoDevice);
    if (!name || len <= 0) return ret(hipErrorInvalidValue);
    if (dev < 0 || dev >= device_count()) return ret(hipErrorInvalidDevice);
    snprintf(name, (size_t)len, "%s", d->name);
    return hipSuccess;
}

hipError_t hipDeviceTotalMem(size_t *bytes, hipDevice_t dev) {
    if (!device()) return ret(hipErrorNoDevice);
    if (!bytes || dev < 0 || dev >= device_count()) return ret(hipErrorInvalidValue);
    *bytes = TOTAL_MEM;
    return hipSuccess;
}

hipError_t hipMemGetInfo(size_t *free_, size_t *total) {
    if (!free_ || !total) return ret(hipErrorInvalidValue);
    pthread_mutex_lock(&STATE_LOCK);
    size_t lim = mem_limit();
    *free_ = ALLOCATED < lim ? lim - ALLOCATED : 0;
    *total = lim;
    pthread_mutex_unlock(&STATE_LOCK);
    return hipSuccess;
}

const char *hipGetErrorName(hipError_t e) {
    switch (e) {
    case hipSuccess: return "hipSuccess";
    case hipErrorInvalidValue: return "hipErrorInvalidValue";
    case hipErrorOutOfMemory: return "hipErrorOutOfMemory";
    case hipErrorNoDevice: return "hipErrorNoDevice";
    case hipErrorInvalidDevice: return "hipErrorInvalidDevice";
    case hipErrorInvalidImage: return "hipErrorInvalidImage";
    case hipErrorInvalidResourceHandle: return "hipErrorInvalidResourceHandle";
    case hipErrorNotFound: return "hipErrorNotFound";
    case hipErrorNotReady: return "hipErrorNotReady";
    case hipErrorLaunchFailure: return "hipErrorLaunchFailure";
    case hipErrorCooperativeLaunchTooLarge: return "hipErrorCooperativeLaunchTooLarge";
    default: return "hipErrorUnknown";
    }
}

const char *hipGetErrorString(hipError_t e) {
    switch (e) {
    case hipErrorLaunchFailure: return "unspecified launch failure (injected by FAKE_HIP_FAIL_KERNEL)";
    case hipErrorOutOfMemory: return "out of memory";
    case hipErrorNoDevice: return "no ROCm-capable device is detected";
    default: return hipGetErrorName(e);
    }
}

hipError_t hipGetLastError(void) {
    hipError_t e = LAST;
    LAST = hipSuccess;
    return e;
}

/* ------------------------------------------------------------------ memory API */
hipError_t hipMalloc(void **ptr, size_t size) {
    if (!device()) return ret(hipErrorNoDevice);
    if (!ptr) return ret(hipErrorInvalidValue);
    size_t rounded = (size + 255) & ~(size_t)255;
    if (rounded == 0) rounded = 256;
    pthread_mutex_lock(&STATE_LOCK);
    if (ALLOCATED + rounded > mem_limit()) {
        pthread_mutex_unlock(&STATE_LOCK);
        return ret(hipErrorOutOfMemory);
    }
    char *p = aligned_alloc(256, rounded);
    if (!p) {
        pthread_mutex_unlock(&STATE_LOCK);
        return ret(hipErrorOutOfMemory);
    }
    memset(p, 0, rounded);
    alloc_t *a = malloc(sizeof *a);
    a->base = p;
    a->size = rounded;
    a->next = ALLOCS;
    ALLOCS = a;
    ALLOCATED += rounded;
    pthread_mutex_unlock(&STATE_LOCK);
    *ptr = p;
    return hipSuccess;
}

hipError_t hipFree(void *ptr) {
    if (!ptr) return hipSuccess;
    pthread_mutex_lock(&STATE_LOCK);
    for (alloc_t **a = &ALLOCS; *a; a = &(*a)->next) {
        if ((*a)->base == ptr) {
            alloc_t *dead = *a;
            *a = dead->next;
            ALLOCATED -= dead->size;
            pthread_mutex_unlock(&STATE_LOCK);
            free(dead->base);
            free(dead);
            return hipSuccess;
        }
    }
    pthread_mutex_unlock(&STATE_LOCK);
    return ret(hipErrorInvalidValue);
}

hipError_t hipHostMalloc(void **ptr, size_t size, unsigned int flags) {
    (void)flags;
    if (!ptr) return ret(hipErrorInvalidValue);
    size_t rounded = (size + 4095) & ~(size_t)4095;
    if (rounded == 0) rounded = 4096;
    *ptr = aligned_alloc(4096, rounded);
    if (!*ptr) return ret(hipErrorOutOfMemory);
    memset(*ptr, 0, size);
    alloc_t *a = malloc(sizeof *a);
    a->base = *ptr;
    a->size = rounded;
    pthread_mutex_lock(&STATE_LOCK);
    a->next = HOST_ALLOCS;
    HOST_ALLOCS = a;
    pthread_mutex_unlock(&STATE_LOCK);
    return hipSuccess;
}

hipError_t hipHostFree(void *ptr) {
    pthread_mutex_lock(&STATE_LOCK);
    for (alloc_t **a = &HOST_ALLOCS; *a; a = &(*a)->next) {
        if ((*a)->base == ptr) {
            alloc_t *dead = *a;
            *a = dead->next;
            free(dead);
            break;
        }
    }
    pthread_mutex_unlock(&STATE_LOCK);
    free(ptr);
    return hipSuccess;
}

static const alloc_t *find_alloc(const alloc_t *list, const void *ptr) {
    for (const alloc_t *a = list; a; a = a->next)
        if ((const char *)ptr >= a->base && (const char *)ptr < a->base + a->size) return a;
    return NULL;
}

/* Device allocations are hipMemoryTypeDevice, hipHostMalloc'd ones hipMemoryTypeHost; any other
 * address is unknown to the runtime (hipErrorInvalidValue), like pageable memory. */
hipError_t hipPointerGetAttributes(hipPointerAttribute_t *attributes, const void *ptr) {
    if (!attributes || !ptr) return ret(hipErrorInvalidValue);
    pthread_mutex_lock(&STATE_LOCK);
    const alloc_t *dev = find_alloc(ALLOCS, ptr);
    const alloc_t *host = dev ? NULL : find_alloc(HOST_ALLOCS, ptr);
    pthread_mutex_unlock(&STATE_LOCK);
    if (!dev && !host) return ret(hipErrorInvalidValue);
    memset(attributes, 0, sizeof *attributes);
    attributes->memoryType = dev ? hipMemoryTypeDevice : hipMemoryTypeHost;
    attributes->devicePointer = (void *)ptr;
    attributes->hostPointer = host ? (void *)ptr : NULL;
    return hipSuccess;
}

hipError_t hipHostGetDevicePointer(void **devPtr, void *hstPtr, unsigned int flags) {
    (void)flags;
    if (!devPtr || !hstPtr) return ret(hipErrorInvalidValue);
    *devPtr = hstPtr;
    return hipSuccess;
}

/* Synchronous copies wait for the device first, like copies on the legacy null stream. */
hipError_t hipMemcpy(void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind) {
    (void)kind;
    if ((!dst || !src) && sizeBytes) return ret(hipErrorInvalidValue);
    drain_all();
    if (sizeBytes) memmove(dst, src, sizeBytes);
    return hipSuccess;
}

hipError_t hipMemcpyAsync(void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind, hipStream_t stream) {
    (void)kind;
    if ((!dst || !src) && sizeBytes) return ret(hipErrorInvalidValue);
    op_t *o = new_op(OP_COPY);
    o->dst = dst;
    o->src = src;
    o->bytes = sizeBytes;
    return enqueue(stream, o);
}

static hipError_t fill(hipDeviceptr_t dest, uint32_t value, int size, size_t count, hipStream_t stream) {
    if (!dest && count) return ret(hipErrorInvalidValue);
    op_t *o = new_op(OP_FILL);
    o->dst = dest;
    o->value = value;
    o->element_size = size;
    o->bytes = count;
    return enqueue(stream, o);
}

hipError_t hipMemsetAsync(void *dst, int value, size_t sizeBytes, hipStream_t stream) {
    return fill(dst, (uint32_t)(value & 0xff), 1, sizeBytes, stream);
}

/* Synchronous, on the legacy stream (after every stream's earlier work). */
hipError_t hipMemset(void *dst, int value, size_t sizeBytes) { return hipMemsetAsync(dst, value, sizeBytes, NULL); }

hipError_t hipMemsetD8Async(hipDeviceptr_t dest, unsigned char value, size_t count, hipStream_t stream) {
    return fill(dest, value, 1, count, stream);
}
hipError_t hipMemsetD16Async(hipDeviceptr_t dest, unsigned short value, size_t count, hipStream_t stream) {
    return fill(dest, value, 2, count, stream);
}
hipError_t hipMemsetD32Async(hipDeviceptr_t dest, int value, size_t count, hipStream_t stream) {
    return fill(dest, (uint32_t)value, 4, count, stream);
}

/* ------------------------------------------------------------------ modules and launches */
static const char CODE_MAGIC[] = "FAKEHIPCO1\n";

/* A real code object (ELF) or offload bundle holds, for the double, every reference kernel (it
 * runs their CPU references; the image's metadata is for the interposer to read). */
static int is_code_object(const void *image) {
    return memcmp(image, "\x7f" "ELF", 4) == 0 || memcmp(image, "__CLANG_OFFLOAD_BUNDLE__", 24) == 0;
}

hipError_t hipModuleLoadData(hipModule_t *module, const void *image) {
    if (!module || !image) return ret(hipErrorInvalidValue);
    int code_object = is_code_object(image);
    if (!code_object && strncmp(image, CODE_MAGIC, strlen(CODE_MAGIC)) != 0) return ret(hipErrorInvalidImage);
    struct ihipModule_t *m = calloc(1, sizeof *m);
    m->image = strdup(code_object ? "code object: reduce_partial reduce_final busy axpy empty_kernel" : image);
    *module = m;
    logf_("call module-load");
    return hipSuccess;
}

hipError_t hipModuleUnload(hipModule_t module) {
    if (!module) return ret(hipErrorInvalidResourceHandle);
    free(module->image);
    free(module);
    return hipSuccess;
}

hipError_t hipModuleGetFunction(hipFunction_t *function, hipModule_t module, const char *kname) {
    if (!function || !module || !kname) return ret(hipErrorInvalidValue);
    /* Suite kernels first (reduce_final is also one of the built-ins: same arithmetic). */
    kernel_sig_t suite = {0};
    if (fake_suite_lookup(kname, module->image, &suite.nparams, suite.sizes, MAX_PARAMS, &suite.suite) == 0) {
        kernel_sig_t *sig = malloc(sizeof *sig);
        *sig = suite;
        sig->name = strdup(kname);
        struct ihipModuleSymbol_t *f = calloc(1, sizeof *f);
        f->sig = sig;
        f->module = module;
        *function = f;
        return hipSuccess;
    }
    for (int i = 0; i < NKERNELS; i++) {
        if (strcmp(KERNELS[i].name, kname) == 0 && strstr(module->image, kname)) {
            struct ihipModuleSymbol_t *f = calloc(1, sizeof *f);
            f->sig = &KERNELS[i];
            f->module = module;
            *function = f;
            return hipSuccess;
        }
    }
    return ret(hipErrorNotFound);
}

hipError_t hipModuleOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, hipFunction_t f, int blockSize,
                                                              size_t dynSharedMemPerBlk) {
    if (!numBlocks || !f || blockSize <= 0) return ret(hipErrorInvalidValue);
    logf_("occupancy %s threads=%d smem=%zu", f->sig->name, blockSize, dynSharedMemPerBlk);
    int n = blockSize > 1024 ? 0 : 2048 / blockSize;
    *numBlocks = n > 8 ? 8 : n;
    return hipSuccess;
}

/* The packed argument buffer of an `extra` array, in the one form HIP takes (it checks entries
 * 0, 2 and 4 in that order): NULL with *err set when malformed. */
static const char *extra_buffer(void **extra, size_t *size, hipError_t *err) {
    *err = hipSuccess;
    if (extra[0] != HIP_LAUNCH_PARAM_BUFFER_POINTER || extra[2] != HIP_LAUNCH_PARAM_BUFFER_SIZE ||
        extra[4] != HIP_LAUNCH_PARAM_END || !extra[3]) {
        *err = hipErrorInvalidValue;
        return NULL;
    }
    *size = *(size_t *)extra[3];
    return (const char *)extra[1];
}

static hipError_t launch(const char *how, hipFunction_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                         unsigned by, unsigned bz, hipStream_t stream, void **params, void **extra) {
    if (!f) return ret(hipErrorInvalidResourceHandle);
    uint64_t threads = (uint64_t)bx * by * bz;
    if (gx == 0 || gy == 0 || gz == 0 || threads == 0 || threads > 1024) return ret(hipErrorInvalidValue);
    const char *buffer = NULL;
    size_t buffer_size = 0;
    if (extra) {
        hipError_t e;
        if (params) return ret(hipErrorInvalidValue);
        buffer = extra_buffer(extra, &buffer_size, &e);
        if (e != hipSuccess) return ret(e);
    } else if (f->sig->nparams > 0 && !params) {
        return ret(hipErrorInvalidValue);
    }
    struct ihipStream_t *s = stream_of(stream);
    if (!s) return ret(hipErrorNoDevice);
    op_t *o = new_op(OP_KERNEL);
    o->sig = f->sig;
    launch_t *l = &o->launch;
    l->gx = gx, l->gy = gy, l->gz = gz, l->bx = bx, l->by = by, l->bz = bz;
    int off = 0;
    for (int i = 0; i < f->sig->nparams; i++) {
        int size = f->sig->sizes[i];
        off = (off + size - 1) / size * size;
        if (extra) {
            if (!buffer || (size_t)(off + size) > buffer_size) {
                free(o);
                return ret(hipErrorInvalidValue);
            }
            memcpy(l->args + off, buffer + off, (size_t)size);
        } else {
            memcpy(l->args + off, params[i], (size_t)size);
        }
        l->offsets[i] = off;
        off += size;
    }
    logf_("call %s s%d %s grid=%ux%ux%u block=%ux%ux%u%s", how, s->id, f->sig->name, gx, gy, gz, bx, by, bz,
          extra ? " extra" : "");
    return enqueue(stream, o);
}

hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int gridDimX, unsigned int gridDimY,
                                 unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                 unsigned int blockDimZ, unsigned int sharedMemBytes, hipStream_t stream,
                                 void **kernelParams, void **extra) {
    (void)sharedMemBytes;
    return launch("launch", f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, stream, kernelParams,
                  extra);
}

/* Not in HIP 5.2 (ROCm 5.5 added it: hip_5.5); exported under the node the version script names. A
 * cooperative launch ignores the stream's CU mask, so the log says "cooperative". */
hipError_t hipModuleLaunchCooperativeKernel(hipFunction_t f, unsigned int gridDimX, unsigned int gridDimY,
                                            unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                            unsigned int blockDimZ, unsigned int sharedMemBytes, hipStream_t stream,
                                            void **kernelParams);
hipError_t hipModuleLaunchCooperativeKernel(hipFunction_t f, unsigned int gridDimX, unsigned int gridDimY,
                                            unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                            unsigned int blockDimZ, unsigned int sharedMemBytes, hipStream_t stream,
                                            void **kernelParams) {
    (void)sharedMemBytes;
    const device_t *d = device();
    if (!d) return ret(hipErrorNoDevice);
    uint64_t blocks = (uint64_t)gridDimX * gridDimY * gridDimZ;
    uint64_t threads = (uint64_t)blockDimX * blockDimY * blockDimZ;
    int per_cu = threads == 0 || threads > 1024 ? 0 : (int)(2048 / threads);
    if (per_cu > 8) per_cu = 8;
    if (blocks > (uint64_t)per_cu * (uint64_t)d->cus) return ret(hipErrorCooperativeLaunchTooLarge);
    return launch("launch-cooperative", f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, stream,
                  kernelParams, NULL);
}

/* ---- host-side kernel stubs (what hipcc's generated start-up code registers) */
#define MAX_STUBS 256
static struct {
    const void *host;
    struct ihipModuleSymbol_t *function;
} STUBS[MAX_STUBS];
static int NSTUBS;

/* Not in the public headers: the prototypes hipcc's generated code calls. */
void **__hipRegisterFatBinary(const void *data);
void __hipRegisterFunction(void **modules, const void *hostFunction, char *deviceFunction, const char *deviceName,
                           unsigned int threadLimit, void *tid, void *bid, dim3 *blockDim, dim3 *gridDim, int *wSize);
void __hipUnregisterFatBinary(void **modules);

void **__hipRegisterFatBinary(const void *data) {
    void **handle = calloc(1, sizeof(void *));
    *handle = (void *)data;
    logf_("call register-fat-binary");
    return handle;
}

void __hipRegisterFunction(void **modules, const void *hostFunction, char *deviceFunction, const char *deviceName,
                           unsigned int threadLimit, void *tid, void *bid, dim3 *blockDim, dim3 *gridDim, int *wSize) {
    (void)modules, (void)deviceFunction, (void)threadLimit, (void)tid, (void)bid, (void)blockDim, (void)gridDim,
        (void)wSize;
    if (!hostFunction || !deviceName) return;
    for (int i = 0; i < NKERNELS; i++) {
        if (strcmp(KERNELS[i].name, deviceName) != 0) continue;
        pthread_mutex_lock(&STATE_LOCK);
        if (NSTUBS < MAX_STUBS) {
            struct ihipModuleSymbol_t *f = calloc(1, sizeof *f);
            f->sig = &KERNELS[i];
            STUBS[NSTUBS].host = hostFunction;
            STUBS[NSTUBS].function = f;
            NSTUBS++;
        }
        pthread_mutex_unlock(&STATE_LOCK);
        logf_("call register-function %s", deviceName);
        return;
    }
}

void __hipUnregisterFatBinary(void **modules) { free(modules); }

static hipFunction_t stub_function(const void *host) {
    hipFunction_t f = NULL;
    pthread_mutex_lock(&STATE_LOCK);
    for (int i = 0; i < NSTUBS && !f; i++)
        if (STUBS[i].host == host) f = STUBS[i].function;
    pthread_mutex_unlock(&STATE_LOCK);
    return f;
}

/* hipExtModuleLaunchKernel under the C++ name HIP 5.2's hip_ext.h gives it (declared there without
 * extern "C": Debian's libamdhip64.so.5 exports only this name). */
hipError_t fake_ext_module_launch_kernel(hipFunction_t f, uint32_t globalWorkSizeX, uint32_t globalWorkSizeY,
                                         uint32_t globalWorkSizeZ, uint32_t localWorkSizeX, uint32_t localWorkSizeY,
                                         uint32_t localWorkSizeZ, size_t sharedMemBytes, hipStream_t hStream,
                                         void **kernelParams, void **extra, hipEvent_t startEvent,
                                         hipEvent_t stopEvent, uint32_t flags)
    __asm__("_Z24hipExtModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12ihipStream_tPPvS4_P11ihipEvent_tS6_j");
hipError_t fake_ext_module_launch_kernel(hipFunction_t f, uint32_t globalWorkSizeX, uint32_t globalWorkSizeY,
                                         uint32_t globalWorkSizeZ, uint32_t localWorkSizeX, uint32_t localWorkSizeY,
                                         uint32_t localWorkSizeZ, size_t sharedMemBytes, hipStream_t hStream,
                                         void **kernelParams, void **extra, hipEvent_t startEvent,
                                         hipEvent_t stopEvent, uint32_t flags) {
    (void)sharedMemBytes, (void)flags;
    if (!f) return ret(hipErrorInvalidResourceHandle);
    uint32_t global[3] = {globalWorkSizeX, globalWorkSizeY, globalWorkSizeZ};
    uint32_t local[3] = {localWorkSizeX, localWorkSizeY, localWorkSizeZ};
    unsigned grid[3];
    for (int i = 0; i < 3; i++) {
        if (global[i] == 0 || local[i] == 0) return ret(hipErrorInvalidValue);
        if (local[i] > global[i]) local[i] = global[i];
        if (global[i] % local[i] != 0) return ret(hipErrorInvalidValue); /* uniform work-group size */
        grid[i] = global[i] / local[i];
    }
    if (startEvent) {
        hipError_t e = hipEventRecord(startEvent, hStream);
        if (e != hipSuccess) return e;
    }
    hipError_t e = launch("ext-launch", f, grid[0], grid[1], grid[2], local[0], local[1], local[2], hStream,
                          kernelParams, extra);
    if (e == hipSuccess && stopEvent) e = hipEventRecord(stopEvent, hStream);
    return e;
}

/* ---- ROCm 6's extensible launches: types from ROCm 6's hip_runtime_api.h (absent from 5.2) */
typedef struct {
    int id; /* hipLaunchAttributeID */
    char pad[4];
    union {
        char bytes[64];
        int cooperative;
        int priority;
    } val;
} fake_launch_attribute_t;

typedef struct {
    dim3 gridDim;
    dim3 blockDim;
    size_t dynamicSmemBytes;
    hipStream_t stream;
    fake_launch_attribute_t *attrs;
    unsigned int numAttrs;
} fake_launch_config_t;

typedef struct {
    unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    hipStream_t hStream;
    fake_launch_attribute_t *attrs;
    unsigned int numAttrs;
} fake_drv_launch_config_t;

_Static_assert(sizeof(fake_launch_attribute_t) == 72, "hipLaunchAttribute");
_Static_assert(sizeof(fake_launch_config_t) == 56 && offsetof(fake_launch_config_t, attrs) == 40, "hipLaunchConfig_t");
_Static_assert(sizeof(fake_drv_launch_config_t) == 56 && offsetof(fake_drv_launch_config_t, hStream) == 32,
               "HIP_LAUNCH_CONFIG");

/* Reads a launch's attributes: 1 if cooperative, 0 if not, -1 for an id ROCm 6 does not define.
 * `ids` gets the ids, comma-separated, for the log. */
static int launch_attributes(const fake_launch_attribute_t *attrs, unsigned n, char *ids, size_t cap) {
    int cooperative = 0;
    size_t used = 0;
    ids[0] = 0;
    if (n && !attrs) return -1;
    for (unsigned i = 0; i < n; i++) {
        int id = attrs[i].id;
        if (used + 12 < cap) used += (size_t)snprintf(ids + used, cap - used, "%s%d", i ? "," : "", id);
        if (id == 2) cooperative = attrs[i].val.cooperative != 0;
        else if (id != 1 && id != 3 && id != 8 && id != 9 && id != 10) return -1;
    }
    return cooperative;
}

static hipError_t launch_ex(const char *how, hipFunction_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                            unsigned by, unsigned bz, hipStream_t stream, const fake_launch_attribute_t *attrs,
                            unsigned n, void **params, void **extra) {
    char ids[128], what[160];
    int cooperative = launch_attributes(attrs, n, ids, sizeof ids);
    if (cooperative < 0) return ret(hipErrorInvalidValue);
    snprintf(what, sizeof what, "%s%s%s%s", how, cooperative ? "-cooperative" : "", n ? " attrs=" : "", ids);
    if (cooperative) {
        const device_t *d = device();
        if (!d) return ret(hipErrorNoDevice);
        uint64_t blocks = (uint64_t)gx * gy * gz, threads = (uint64_t)bx * by * bz;
        int per_cu = threads == 0 || threads > 1024 ? 0 : (int)(2048 / threads);
        if (per_cu > 8) per_cu = 8;
        if (blocks > (uint64_t)per_cu * (uint64_t)d->cus) return ret(hipErrorCooperativeLaunchTooLarge);
    }
    return launch(what, f, gx, gy, gz, bx, by, bz, stream, params, extra);
}

hipError_t hipLaunchKernelExC(const fake_launch_config_t *config, const void *fPtr, void **args);
hipError_t hipLaunchKernelExC(const fake_launch_config_t *config, const void *fPtr, void **args) {
    if (!config) return ret(hipErrorInvalidValue);
    hipFunction_t f = stub_function(fPtr);
    if (!f) return ret(hipErrorInvalidDeviceFunction);
    const fake_launch_config_t *c = config;
    return launch_ex("launch-ex", f, c->gridDim.x, c->gridDim.y, c->gridDim.z, c->blockDim.x, c->blockDim.y,
                     c->blockDim.z, c->stream, c->attrs, c->numAttrs, args, NULL);
}

hipError_t hipDrvLaunchKernelEx(const fake_drv_launch_config_t *config, hipFunction_t f, void **params,
                                void **extra);
hipError_t hipDrvLaunchKernelEx(const fake_drv_launch_config_t *config, hipFunction_t f, void **params,
                                void **extra) {
    if (!config) return ret(hipErrorInvalidValue);
    const fake_drv_launch_config_t *c = config;
    return launch_ex("drv-launch-ex", f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY,
                     c->blockDimZ, c->hStream, c->attrs, c->numAttrs, params, extra);
}

hipError_t hipLaunchKernel(const void *function_address, dim3 numBlocks, dim3 dimBlocks, void **args,
                           size_t sharedMemBytes, hipStream_t stream) {
    (void)sharedMemBytes;
    hipFunction_t f = stub_function(function_address);
    if (!f) return ret(hipErrorInvalidDeviceFunction);
    return launch("launch-stub", f, numBlocks.x, numBlocks.y, numBlocks.z, dimBlocks.x, dimBlocks.y, dimBlocks.z,
                  stream, args, NULL);
}

hipError_t hipExtLaunchKernel(const void *function_address, dim3 numBlocks, dim3 dimBlocks, void **args,
                              size_t sharedMemBytes, hipStream_t stream, hipEvent_t startEvent, hipEvent_t stopEvent,
                              int flags) {
    (void)flags;
    if (startEvent) {
        hipError_t e = hipEventRecord(startEvent, stream);
        if (e != hipSuccess) return e;
    }
    hipError_t e = hipLaunchKernel(function_address, numBlocks, dimBlocks, args, sharedMemBytes, stream);
    if (e == hipSuccess && stopEvent) e = hipEventRecord(stopEvent, stream);
    return e;
}

hipError_t hipLaunchCooperativeKernel(const void *f, dim3 gridDim, dim3 blockDimX, void **kernelParams,
                                      unsigned int sharedMemBytes, hipStream_t stream) {
    hipFunction_t fn = stub_function(f);
    if (!fn) return ret(hipErrorInvalidDeviceFunction);
    return hipModuleLaunchCooperativeKernel(fn, gridDim.x, gridDim.y, gridDim.z, blockDimX.x, blockDimX.y,
                                            blockDimX.z, sharedMemBytes, stream, kernelParams);
}

/* ROCm 6 (hipGetFuncBySymbol) and ROCm 7 (hipKernelGetParamInfo); not in 5.2, so declared here.
 * Parameters are laid out at their natural alignment, as launch() packs them. */
hipError_t hipGetFuncBySymbol(hipFunction_t *functionPtr, const void *symbolPtr);
hipError_t hipKernelGetParamInfo(hipFunction_t kernel, size_t paramIndex, size_t *paramOffset, size_t *paramSize);

/* FAKE_HIP_API=5.2: the runtime predates these two (they answer hipErrorNotSupported). */
static int api_5_2(void) {
    const char *v = getenv("FAKE_HIP_API");
    return v && strcmp(v, "5.2") == 0;
}

hipError_t hipGetFuncBySymbol(hipFunction_t *functionPtr, const void *symbolPtr) {
    if (api_5_2()) return ret(hipErrorNotSupported);
    if (!functionPtr) return ret(hipErrorInvalidValue);
    hipFunction_t f = stub_function(symbolPtr);
    if (!f) return ret(hipErrorInvalidDeviceFunction);
    *functionPtr = f;
    return hipSuccess;
}

hipError_t hipKernelGetParamInfo(hipFunction_t kernel, size_t paramIndex, size_t *paramOffset, size_t *paramSize) {
    if (api_5_2()) return ret(hipErrorNotSupported);
    if (!kernel || !paramOffset) return ret(hipErrorInvalidValue);
    if (paramIndex >= (size_t)kernel->sig->nparams) return ret(hipErrorInvalidValue);
    int off = 0;
    for (size_t i = 0;; i++) {
        int size = kernel->sig->sizes[i];
        off = (off + size - 1) / size * size;
        if (i == paramIndex) {
            *paramOffset = (size_t)off;
            if (paramSize) *paramSize = (size_t)size;
            return hipSuccess;
        }
        off += size;
    }
}

/* Stream capture (on streams other than the legacy one). */
hipError_t hipStreamBeginCapture(hipStream_t stream, hipStreamCaptureMode mode) {
    (void)mode;
    struct ihipStream_t *s = stream_of(stream);
    if (!s || s == legacy_stream()) return ret(hipErrorInvalidValue);
    if (s->capturing) return ret(hipErrorIllegalState);
    s->capturing = 1;
    s->cap_head = s->cap_tail = NULL;
    logf_("call begin-capture s%d", s->id);
    return hipSuccess;
}

hipError_t hipStreamEndCapture(hipStream_t stream, hipGraph_t *pGraph) {
    struct ihipStream_t *s = stream_of(stream);
    if (!s || !pGraph) return ret(hipErrorInvalidValue);
    if (!s->capturing) return ret(hipErrorStreamCaptureUnmatched);
    struct ihipGraph *g = calloc(1, sizeof *g);
    g->head = s->cap_head;
    s->cap_head = s->cap_tail = NULL;
    s->capturing = 0;
    *pGraph = g;
    logf_("call end-capture s%d", s->id);
    return hipSuccess;
}

hipError_t hipStreamIsCapturing(hipStream_t stream, hipStreamCaptureStatus *pCaptureStatus) {
    struct ihipStream_t *s = stream_of(stream);
    if (!s || !pCaptureStatus) return ret(hipErrorInvalidValue);
    *pCaptureStatus = s->capturing ? hipStreamCaptureStatusActive : hipStreamCaptureStatusNone;
    return hipSuccess;
}

/* Live executable graphs (a launch of any other handle runs nothing). */
#define MAX_EXECS 256
static struct hipGraphExec *EXECS[MAX_EXECS];

static int exec_slot(const struct hipGraphExec *e) {
    for (int i = 0; i < MAX_EXECS; i++)
        if (EXECS[i] == e) return i;
    return -1;
}

hipError_t hipGraphInstantiate(hipGraphExec_t *pGraphExec, hipGraph_t graph, hipGraphNode_t *pErrorNode,
                               char *pLogBuffer, size_t bufferSize) {
    (void)pErrorNode, (void)pLogBuffer, (void)bufferSize;
    if (!pGraphExec || !graph) return ret(hipErrorInvalidValue);
    struct hipGraphExec *e = calloc(1, sizeof *e);
    e->graph = graph;
    pthread_mutex_lock(&STATE_LOCK);
    int slot = exec_slot(NULL);
    if (slot >= 0) EXECS[slot] = e;
    pthread_mutex_unlock(&STATE_LOCK);
    if (slot < 0) {
        free(e);
        return ret(hipErrorOutOfMemory);
    }
    *pGraphExec = e;
    return hipSuccess;
}

hipError_t hipGraphExecDestroy(hipGraphExec_t graphExec) {
    if (!graphExec) return ret(hipErrorInvalidValue);
    pthread_mutex_lock(&STATE_LOCK);
    int slot = exec_slot(graphExec);
    if (slot >= 0) EXECS[slot] = NULL;
    pthread_mutex_unlock(&STATE_LOCK);
    if (slot < 0) return ret(hipErrorInvalidValue);
    free(graphExec);
    return hipSuccess;
}

hipError_t hipGraphDestroy(hipGraph_t graph) {
    if (!graph) return ret(hipErrorInvalidValue);
    for (op_t *o = graph->head; o;) {
        op_t *next = o->next;
        free(o);
        o = next;
    }
    free(graph);
    return hipSuccess;
}

/* An executable graph from hipGraphInstantiate runs its captured operations in order; any other
 * non-null handle (hal-hip's tests pass opaque ones) runs nothing. */
hipError_t hipGraphLaunch(hipGraphExec_t graphExec, hipStream_t stream) {
    if (!graphExec) return ret(hipErrorInvalidValue);
    op_t *o = new_op(OP_GRAPH);
    pthread_mutex_lock(&STATE_LOCK);
    o->exec = exec_slot(graphExec) >= 0 ? graphExec : NULL;
    pthread_mutex_unlock(&STATE_LOCK);
    return enqueue(stream, o);
}

/* ------------------------------------------------------------------ hipRTC */
struct _hiprtcProgram {
    char *src, *name, *code, *log;
};

const char *hiprtcGetErrorString(hiprtcResult r) {
    switch (r) {
    case HIPRTC_SUCCESS: return "HIPRTC_SUCCESS";
    case HIPRTC_ERROR_INVALID_INPUT: return "HIPRTC_ERROR_INVALID_INPUT";
    case HIPRTC_ERROR_INVALID_PROGRAM: return "HIPRTC_ERROR_INVALID_PROGRAM";
    case HIPRTC_ERROR_COMPILATION: return "HIPRTC_ERROR_COMPILATION";
    default: return "HIPRTC_ERROR_INTERNAL_ERROR";
    }
}

hiprtcResult hiprtcVersion(int *major, int *minor) {
    if (!major || !minor) return HIPRTC_ERROR_INVALID_INPUT;
    *major = 5;
    *minor = 2;
    return HIPRTC_SUCCESS;
}

hiprtcResult hiprtcCreateProgram(hiprtcProgram *prog, const char *src, const char *name, int numHeaders,
                                 const char **headers, const char **includeNames) {
    (void)headers, (void)includeNames;
    if (!prog || !src || numHeaders < 0) return HIPRTC_ERROR_INVALID_INPUT;
    struct _hiprtcProgram *p = calloc(1, sizeof *p);
    p->src = strdup(src);
    p->name = strdup(name ? name : "program.hip");
    *prog = p;
    return HIPRTC_SUCCESS;
}

/* "Compiles" by wrapping the source in the fake code-object header; a source with "#error"
 * fails with a log naming the line, like a compiler would. */
hiprtcResult hiprtcCompileProgram(hiprtcProgram prog, int numOptions, const char **options) {
    if (!prog || numOptions < 0) return HIPRTC_ERROR_INVALID_INPUT;
    size_t cap = 64;
    for (int i = 0; i < numOptions; i++) cap += strlen(options[i]) + 1;
    free(prog->log);
    free(prog->code);
    prog->code = NULL;
    const char *err = strstr(prog->src, "#error");
    if (err) {
        const char *end = strchr(err, '\n');
        int len = end ? (int)(end - err) : (int)strlen(err);
        prog->log = malloc(strlen(prog->name) + (size_t)len + 32);
        sprintf(prog->log, "%s: error: %.*s", prog->name, len, err);
        return HIPRTC_ERROR_COMPILATION;
    }
    prog->log = malloc(cap);
    prog->log[0] = 0;
    for (int i = 0; i < numOptions; i++) {
        strcat(prog->log, options[i]);
        strcat(prog->log, " ");
    }
    prog->code = malloc(strlen(CODE_MAGIC) + strlen(prog->log) + strlen(prog->src) + 16);
    sprintf(prog->code, "%s// options: %s\n%s", CODE_MAGIC, prog->log, prog->src);
    return HIPRTC_SUCCESS;
}

hiprtcResult hiprtcGetProgramLogSize(hiprtcProgram prog, size_t *size) {
    if (!prog || !size) return HIPRTC_ERROR_INVALID_INPUT;
    *size = prog->log ? strlen(prog->log) + 1 : 1;
    return HIPRTC_SUCCESS;
}

hiprtcResult hiprtcGetProgramLog(hiprtcProgram prog, char *log) {
    if (!prog || !log) return HIPRTC_ERROR_INVALID_INPUT;
    strcpy(log, prog->log ? prog->log : "");
    return HIPRTC_SUCCESS;
}

hiprtcResult hiprtcGetCodeSize(hiprtcProgram prog, size_t *size) {
    if (!prog || !size) return HIPRTC_ERROR_INVALID_INPUT;
    if (!prog->code) return HIPRTC_ERROR_INVALID_PROGRAM;
    *size = strlen(prog->code) + 1;
    return HIPRTC_SUCCESS;
}

hiprtcResult hiprtcGetCode(hiprtcProgram prog, char *code) {
    if (!prog || !code) return HIPRTC_ERROR_INVALID_INPUT;
    if (!prog->code) return HIPRTC_ERROR_INVALID_PROGRAM;
    strcpy(code, prog->code);
    return HIPRTC_SUCCESS;
}

hiprtcResult hiprtcDestroyProgram(hiprtcProgram *prog) {
    if (!prog || !*prog) return HIPRTC_ERROR_INVALID_INPUT;
    free((*prog)->src);
    free((*prog)->name);
    free((*prog)->code);
    free((*prog)->log);
    free(*prog);
    *prog = NULL;
    return HIPRTC_SUCCESS;
}

/* ------------------------------------------------------------------ HIP green contexts */
#ifdef FAKE_HIP_GREEN_CONTEXTS
/*
 * Built only into the green-context variant (test_double::Variant::GreenContexts, which defines
 * FAKE_HIP_GREEN_CONTEXTS and exports these symbols). Debian's 5.2 headers lack the types, so they
 * are declared here with the layout of ROCm's hip_runtime_api.h (ROCm/rocm-systems,
 * projects/hip/include/hip/hip_runtime_api.h at 0ff4546a8c145316e90118fcc08eb3a0cc057806).
 * The behaviour follows that commit's clr (projects/clr/hipamd/src/hip_executionctx.cpp):
 * - hipDeviceGetDevResource: one CU resource of every CU (smCount = CU count; alignment 2 on the
 *   WGP part, else 1). The double keeps its own bookkeeping in _internal_padding (a tag, the first
 *   CU, the device, the split family), as clr keeps a resource id there.
 * - hipDevSmResourceSplit: groups of the requested counts (each a positive multiple of its
 *   co-scheduling count, the input's alignment by default) dealt out in order from the input's
 *   first CU; the remainder (optional) is what is left after them. hipDevSmResourceSplitByCount
 *   deals equal groups the same way.
 * - hipDevResourceGenerateDesc: CU resources of one split (or the device resource) into a
 *   descriptor; hipGreenCtxCreate takes it over, its CU mask the union of the resources' ranges.
 * - hipExecutionCtxStreamCreate: a stream with the context's mask (logged "gctx=gN").
 * - FAKE_HIP_FAIL_GREEN_CTX=n: the n-th hipGreenCtxCreate (1-based) fails (hipErrorOutOfMemory).
 * Log lines: "call green-ctx-create gN cus=C mask=M", "call green-ctx-destroy gN live-streams=K".
 */
#define FAKE_ERROR_INVALID_RESOURCE_TYPE ((hipError_t)914)
#define FAKE_ERROR_INVALID_RESOURCE_CONFIGURATION ((hipError_t)915)
#define FAKE_RESOURCE_TAG 0x6772656eu /* "gren" */

typedef enum hipDevResourceType {
    hipDevResourceTypeInvalid = 0,
    hipDevResourceTypeSm = 1,
    hipDevResourceTypeWorkqueueConfig = 1000,
    hipDevResourceTypeWorkqueue = 10000,
} hipDevResourceType;

typedef struct hipDevSmResource {
    unsigned int smCount, minSmPartitionSize, smCoscheduledAlignment, flags;
} hipDevSmResource;

typedef struct hipDevResource_st {
    hipDevResourceType type;
    unsigned char _internal_padding[92];
    union {
        hipDevSmResource sm;
        unsigned char _oversize[40];
    };
    struct hipDevResource_st *nextResource;
} hipDevResource;

typedef struct hipDevSmResourceGroupParams_st {
    unsigned int smCount, coscheduledSmCount, preferredCoscheduledSmCount, flags;
    unsigned int reserved[12];
} hipDevSmResourceGroupParams;

_Static_assert(sizeof(hipDevResource) == 144, "hipDevResource is 144 bytes in ROCm's header");
_Static_assert(offsetof(hipDevResource, sm) == 96, "the payload follows 4 + 92 bytes");
_Static_assert(offsetof(hipDevResource, nextResource) == 136, "then the 8-aligned next pointer");
_Static_assert(sizeof(hipDevSmResourceGroupParams) == 64, "16 words");

/* The double's bookkeeping inside _internal_padding. */
typedef struct {
    uint32_t tag, first_cu, device, family;
} resource_meta_t;

static resource_meta_t *meta_of(const hipDevResource *r) { return (resource_meta_t *)(void *)r->_internal_padding; }

static unsigned alignment_of_device(const device_t *d) { return d->wgp ? 2 : 1; }

static uint32_t NEXT_FAMILY = 1;
static int GREEN_CREATIONS, NEXT_GREEN_ID = 1;

struct ihipDevResourceDesc_t {
    int device;
    unsigned count;
    hipDevResource resources[64];
};
typedef struct ihipDevResourceDesc_t *hipDevResourceDesc_t;

struct ihipExecutionCtx_t {
    int id, device;
    uint32_t mask[MAX_MASK_WORDS];
    int cus;
    hipDevResourceDesc_t desc;
};
typedef struct ihipExecutionCtx_t *hipExecutionCtx_t;

static void fill_cu_resource(hipDevResource *r, unsigned first, unsigned count, unsigned align, uint32_t device,
                             uint32_t family) {
    memset(r, 0, sizeof *r);
    r->type = hipDevResourceTypeSm;
    r->sm.smCount = count;
    r->sm.minSmPartitionSize = align;
    r->sm.smCoscheduledAlignment = align;
    resource_meta_t *m = meta_of(r);
    m->tag = FAKE_RESOURCE_TAG;
    m->first_cu = first;
    m->device = device;
    m->family = family;
}

static int is_cu_resource(const hipDevResource *r) {
    return r && r->type == hipDevResourceTypeSm && meta_of(r)->tag == FAKE_RESOURCE_TAG;
}

hipError_t hipDeviceGetDevResource(int dev, hipDevResource *resource, hipDevResourceType type) {
    const device_t *d = device();
    if (!d) return ret(hipErrorNoDevice);
    if (!resource) return ret(hipErrorInvalidValue);
    if (dev < 0 || dev >= device_count()) return ret(hipErrorInvalidDevice);
    if (type != hipDevResourceTypeSm) return ret(FAKE_ERROR_INVALID_RESOURCE_TYPE);
    fill_cu_resource(resource, 0, (unsigned)d->cus, alignment_of_device(d), (uint32_t)dev, 0);
    return hipSuccess;
}

hipError_t hipDevSmResourceSplit(hipDevResource *result, unsigned int nbGroups, const hipDevResource *input,
                                 hipDevResource *remainder, unsigned int flags,
                                 hipDevSmResourceGroupParams *groupParams) {
    if (!is_cu_resource(input) || !groupParams || flags != 0) return ret(hipErrorInvalidValue);
    unsigned total = input->sm.smCount, align = input->sm.smCoscheduledAlignment, used = 0;
    for (unsigned i = 0; i < nbGroups; i++) {
        hipDevSmResourceGroupParams *g = &groupParams[i];
        if (g->coscheduledSmCount == 0) g->coscheduledSmCount = align;
        if (g->smCount == 0) g->smCount = (total - used) / g->coscheduledSmCount * g->coscheduledSmCount;
        if (g->smCount == 0 || g->smCount % g->coscheduledSmCount != 0 || used + g->smCount > total)
            return ret(FAKE_ERROR_INVALID_RESOURCE_CONFIGURATION);
        used += g->smCount;
    }
    const resource_meta_t *in = meta_of(input);
    pthread_mutex_lock(&STATE_LOCK);
    uint32_t family = NEXT_FAMILY++;
    pthread_mutex_unlock(&STATE_LOCK);
    unsigned first = in->first_cu;
    if (result) {
        for (unsigned i = 0; i < nbGroups; i++) {
            fill_cu_resource(&result[i], first, groupParams[i].smCount, groupParams[i].coscheduledSmCount, in->device,
                             family);
            first += groupParams[i].smCount;
        }
    }
    if (remainder) {
        if (used < total) fill_cu_resource(remainder, in->first_cu + used, total - used, align, in->device, family);
        else memset(remainder, 0, sizeof *remainder);
    }
    logf_("call dev-resource-split groups=%u first=%u used=%u of %u", nbGroups, in->first_cu, used, total);
    return hipSuccess;
}

hipError_t hipDevSmResourceSplitByCount(hipDevResource *result, unsigned int *nbGroups, const hipDevResource *input,
                                        hipDevResource *remainder, unsigned int flags, unsigned int minCount) {
    if (!nbGroups || !is_cu_resource(input) || flags != 0) return ret(hipErrorInvalidValue);
    unsigned align = input->sm.smCoscheduledAlignment;
    unsigned size = (minCount + align - 1) / align * align;
    if (size == 0) size = align;
    unsigned possible = input->sm.smCount / size;
    if (!result) {
        *nbGroups = possible;
        return hipSuccess;
    }
    unsigned n = *nbGroups < possible ? *nbGroups : possible;
    hipDevSmResourceGroupParams params[64];
    if (n > 64) n = 64;
    memset(params, 0, sizeof params);
    for (unsigned i = 0; i < n; i++) params[i].smCount = size;
    *nbGroups = n;
    return hipDevSmResourceSplit(result, n, input, remainder, 0, params);
}

hipError_t hipDevResourceGenerateDesc(hipDevResourceDesc_t *phDesc, hipDevResource *resources,
                                      unsigned int nbResources) {
    if (!phDesc || !resources || nbResources == 0 || nbResources > 64) return ret(hipErrorInvalidValue);
    uint32_t family = 0;
    for (unsigned i = 0; i < nbResources; i++) {
        if (!is_cu_resource(&resources[i])) return ret(FAKE_ERROR_INVALID_RESOURCE_TYPE);
        const resource_meta_t *m = meta_of(&resources[i]);
        if (m->device != meta_of(&resources[0])->device) return ret(FAKE_ERROR_INVALID_RESOURCE_CONFIGURATION);
        if (m->family != 0) {
            if (family != 0 && m->family != family) return ret(FAKE_ERROR_INVALID_RESOURCE_CONFIGURATION);
            family = m->family;
        }
    }
    hipDevResourceDesc_t desc = calloc(1, sizeof *desc);
    desc->device = (int)meta_of(&resources[0])->device;
    desc->count = nbResources;
    memcpy(desc->resources, resources, nbResources * sizeof *resources);
    *phDesc = desc;
    return hipSuccess;
}

hipError_t hipGreenCtxCreate(hipExecutionCtx_t *ctx, hipDevResourceDesc_t desc, int dev, unsigned int flags) {
    const device_t *d = device();
    if (!d) return ret(hipErrorNoDevice);
    if (!ctx || !desc || flags != 0) return ret(hipErrorInvalidValue);
    if (dev < 0 || dev >= device_count() || desc->device != dev) return ret(hipErrorInvalidDevice);
    pthread_mutex_lock(&STATE_LOCK);
    int n = ++GREEN_CREATIONS;
    int id = NEXT_GREEN_ID++;
    pthread_mutex_unlock(&STATE_LOCK);
    long fail_at = env_long("FAKE_HIP_FAIL_GREEN_CTX", 0);
    if (fail_at > 0 && n == fail_at) {
        logf_("call green-ctx-create-failed %d", n);
        return ret(hipErrorOutOfMemory);
    }
    struct ihipExecutionCtx_t *c = calloc(1, sizeof *c);
    c->id = id;
    c->device = dev;
    c->desc = desc;
    for (unsigned r = 0; r < desc->count; r++) {
        const resource_meta_t *m = meta_of(&desc->resources[r]);
        for (unsigned i = m->first_cu; i < m->first_cu + desc->resources[r].sm.smCount && i < (unsigned)d->cus; i++)
            c->mask[i / 32] |= 1u << (i % 32);
    }
    for (int i = 0; i < d->cus; i++) c->cus += (c->mask[i / 32] >> (i % 32)) & 1;
    char hex[MAX_MASK_WORDS * 8 + 1];
    size_t len = 0;
    for (int w = (d->cus + 31) / 32 - 1; w >= 0; w--) len += (size_t)snprintf(hex + len, sizeof hex - len, "%08x", c->mask[w]);
    logf_("call green-ctx-create g%d cus=%d mask=%s", id, c->cus, hex);
    *ctx = c;
    return hipSuccess;
}

hipError_t hipExecutionCtxStreamCreate(hipStream_t *stream, hipExecutionCtx_t ctx, unsigned int flags, int priority) {
    (void)priority;
    if (!stream || !ctx) return ret(hipErrorInvalidValue);
    if (flags != hipStreamDefault && flags != hipStreamNonBlocking) return ret(hipErrorInvalidValue);
    const device_t *d = device();
    if (!d) return ret(hipErrorNoDevice);
    return create_stream(stream, (uint32_t)((d->cus + 31) / 32), ctx->mask, ctx->id);
}

hipError_t hipExecutionCtxDestroy(hipExecutionCtx_t ctx) {
    if (!ctx) return ret(hipErrorInvalidValue);
    int live = 0;
    pthread_mutex_lock(&STATE_LOCK);
    for (int i = 0; i < MAX_STREAMS; i++)
        if (STREAMS[i] && STREAMS[i]->gctx == ctx->id) live++;
    pthread_mutex_unlock(&STATE_LOCK);
    logf_("call green-ctx-destroy g%d live-streams=%d", ctx->id, live);
    free(ctx->desc);
    free(ctx);
    return hipSuccess;
}
#endif /* FAKE_HIP_GREEN_CONTEXTS */
