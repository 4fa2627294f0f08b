/*
 * The determinism suite's kernels (kernels/common/suite.cu) for the HIP test double, on the CPU.
 *
 * Compiled together with libamdhip64.c (hal-hip's test_double::build); libamdhip64.c calls the two
 * functions at the end of this file: fake_suite_lookup from hipModuleGetFunction (is this name a
 * suite kernel of this module, with which parameters and compile flags) and fake_suite_run from
 * its kernel executor.
 *
 * Every kernel is computed block by block with the structure of suite.cu: the same per-thread
 * strides, the same shared-memory trees (s[t] += s[t + k], k = T/2 .. 1), the same split-K
 * chunks and in-order loops, in FP32 whatever the storage type, BF16 and FP16 converted with
 * suite.cu's round-to-nearest-even bit functions. The result is a deterministic function of the
 * launch (grid, block, arguments) alone, which is what vitamin's determinism record measures.
 *
 * Compile options of the module (the fake hipRTC keeps them in the code object's "// options:"
 * line) select the arithmetic of products:
 *   -ffp-contract=off       every a * b + c rounds twice, as written (plain C; this file is
 *                           compiled with -ffp-contract=off so the C compiler fuses nothing)
 *   anything else           (-ffp-contract=fast, -ffast-math, no option: clang's HIP default is
 *                           contraction on) every a * b + c of the source is one fmaf, one
 *                           rounding: the acc += a * b of GEMM, GEMV, LayerNorm's variance and
 *                           attention, and LayerNorm's (x - mean) * rstd * gamma + beta.
 * That is a model, not clang's behaviour: clang chooses which products to fuse (it fuses 4 of the
 * GEMM's 16 unrolled products for gfx90a, docs/determinism.md), and -ffast-math's approximate
 * division, square root and expf are not modelled. expf is the host libm's, as in vitamin's CPU
 * reference (kernels/cuda/src/cpu.rs), so the -ffp-contract=off build computes exactly what that
 * reference computes.
 *
 * FAKE_HIP_PERTURB=<names> (comma-separated): kernels that match one of the names flip the lowest
 * bit of output element 0 after computing it, so a record of the double differs from an
 * unperturbed one in exactly those kernels (a test aid). A name matches the kernel's extern name
 * (softmax_f32), its name without the dtype suffix (softmax), or the suite kernel whose final
 * output it writes (reduction: reduce_final; splitk_gemm: splitk_reduce_*).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define HIDDEN __attribute__((visibility("hidden")))

/* Flags fake_suite_lookup returns (and fake_suite_run takes). */
#define SUITE_KERNEL 1
#define SUITE_CONTRACT 2

enum dtype { DT_F32, DT_BF16, DT_F16 };

/* ------------------------------------------------------------------ BF16 / FP16 (suite.cu's functions) */
static float as_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t as_uint(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bf16_to_f32(uint16_t h) { return as_float((uint32_t)h << 16); }

static uint16_t f32_to_bf16(float f) {
    uint32_t u = as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)((u + rounding) >> 16);
}

static float f16_to_f32(uint16_t h) {
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t e = ((uint32_t)h >> 10) & 0x1fu, m = (uint32_t)h & 0x3ffu;
    if (e == 0x1fu) return as_float(sign | 0x7f800000u | (m << 13)); /* inf, NaN */
    if (e == 0u) {                                                   /* zero or subnormal: m * 2^-24 */
        float v = (float)m * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return as_float(sign | ((e + 112u) << 23) | (m << 13));
}

static uint16_t f32_to_f16(float f) {
    uint32_t x = as_uint(f);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu)); /* NaN */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);                        /* infinity */
    if (ax >= 0x38800000u) return (uint16_t)(sign | ((ax - 0x38000000u + 0xfffu + ((ax >> 13) & 1u)) >> 13));
    if (ax < 0x33000000u) return (uint16_t)sign; /* below 2^-25: zero */
    uint32_t m = (ax & 0x7fffffu) | 0x800000u, shift = 126u - (ax >> 23); /* subnormal */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}

static float ld(const void *p, enum dtype d, uint64_t i) {
    switch (d) {
    case DT_BF16: return bf16_to_f32(((const uint16_t *)p)[i]);
    case DT_F16: return f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static void st(void *p, enum dtype d, uint64_t i, float v) {
    switch (d) {
    case DT_BF16: ((uint16_t *)p)[i] = f32_to_bf16(v); break;
    case DT_F16: ((uint16_t *)p)[i] = f32_to_f16(v); break;
    default: ((float *)p)[i] = v;
    }
}

/* ------------------------------------------------------------------ launches */
typedef struct {
    unsigned gx, gy, gz, bx, by, bz;
    const unsigned char *args;
    const int *offsets;
    int contract;
} suite_launch_t;

static void *arg_ptr(const suite_launch_t *l, int i) {
    uint64_t v;
    memcpy(&v, l->args + l->offsets[i], 8);
    return (void *)(uintptr_t)v;
}

static uint32_t arg_u32(const suite_launch_t *l, int i) {
    uint32_t v;
    memcpy(&v, l->args + l->offsets[i], 4);
    return v;
}

static float arg_f32(const suite_launch_t *l, int i) { return as_float(arg_u32(l, i)); }

static uint64_t blocks(const suite_launch_t *l) { return (uint64_t)l->gx * l->gy * l->gz; }
static uint64_t threads(const suite_launch_t *l) { return (uint64_t)l->bx * l->by * l->bz; }

/* acc + a * b: one rounding with contraction, two without. */
static float madd(const suite_launch_t *l, float a, float b, float acc) { return l->contract ? fmaf(a, b, acc) : acc + a * b; }

/* s[0..t) summed into s[0] by the shared-memory tree. */
static float tree_sum(float *s, uint64_t t) {
    for (uint64_t k = t / 2; k > 0; k >>= 1)
        for (uint64_t i = 0; i < k; i++) s[i] += s[i + k];
    return s[0];
}

static float tree_max(float *s, uint64_t t) {
    for (uint64_t k = t / 2; k > 0; k >>= 1)
        for (uint64_t i = 0; i < k; i++) s[i] = fmaxf(s[i], s[i + k]);
    return s[0];
}

#define NEG_MAX (-3.402823466e38f)
#define TILE 16u

/* ------------------------------------------------------------------ kernels */
static void reduce_partial(const suite_launch_t *l, enum dtype d) {
    const void *x = arg_ptr(l, 0);
    uint64_t n = arg_u32(l, 1);
    float *partial = arg_ptr(l, 2);
    uint64_t t = threads(l), stride = blocks(l) * t;
    float *s = malloc(t * sizeof *s);
    for (uint64_t b = 0; b < blocks(l); b++) {
        for (uint64_t ti = 0; ti < t; ti++) {
            float acc = 0.0f;
            for (uint64_t i = b * t + ti; i < n; i += stride) acc += ld(x, d, i);
            s[ti] = acc;
        }
        partial[b] = tree_sum(s, t);
    }
    free(s);
}

static void reduce_final(const suite_launch_t *l) {
    const float *partial = arg_ptr(l, 0);
    uint32_t m = arg_u32(l, 1);
    float *out = arg_ptr(l, 2);
    float acc = 0.0f;
    for (uint32_t i = 0; i < m; i++) acc += partial[i];
    *out = acc;
}

/* Block (bx, by, s), thread (tx, ty): As[ty][k] = A[row][t*16 + k] and Bs[k][tx] = B[t*16 + k][col]
 * (zero outside the matrices), acc += As[ty][k] * Bs[k][tx] for k-tiles t of chunk s in order. */
static void gemm_splitk_partial(const suite_launch_t *l, enum dtype d) {
    const void *A = arg_ptr(l, 0), *B = arg_ptr(l, 1);
    float *ws = arg_ptr(l, 2);
    uint32_t M = arg_u32(l, 3), N = arg_u32(l, 4), K = arg_u32(l, 5);
    uint32_t S = l->gz, kt = (K + TILE - 1) / TILE;
    for (uint32_t s = 0; s < S; s++) {
        uint32_t t0 = (uint32_t)((uint64_t)s * kt / S), t1 = (uint32_t)((uint64_t)(s + 1) * kt / S);
        for (uint32_t by = 0; by < l->gy; by++)
            for (uint32_t bx = 0; bx < l->gx; bx++)
                for (uint32_t ty = 0; ty < l->by; ty++)
                    for (uint32_t tx = 0; tx < l->bx; tx++) {
                        uint32_t row = by * TILE + ty, col = bx * TILE + tx;
                        float acc = 0.0f;
                        for (uint32_t t = t0; t < t1; t++)
                            for (uint32_t k = 0; k < TILE; k++) {
                                uint32_t kk = t * TILE + k;
                                float a = (row < M && kk < K) ? ld(A, d, (uint64_t)row * K + kk) : 0.0f;
                                float b = (kk < K && col < N) ? ld(B, d, (uint64_t)kk * N + col) : 0.0f;
                                acc = madd(l, a, b, acc);
                            }
                        if (row < M && col < N) ws[((uint64_t)s * M + row) * N + col] = acc;
                    }
    }
}

static void splitk_reduce(const suite_launch_t *l, enum dtype d) {
    const float *ws = arg_ptr(l, 0);
    uint32_t S = arg_u32(l, 1), count = arg_u32(l, 2);
    void *C = arg_ptr(l, 3);
    for (uint64_t e = 0; e < count; e++) { /* every e is owned by one thread; the order is irrelevant */
        float acc = 0.0f;
        for (uint32_t s = 0; s < S; s++) acc += ws[(uint64_t)s * count + e];
        st(C, d, e, acc);
    }
}

static void layernorm(const suite_launch_t *l, enum dtype d) {
    const void *x = arg_ptr(l, 0), *gamma = arg_ptr(l, 1), *beta = arg_ptr(l, 2);
    void *y = arg_ptr(l, 3);
    uint32_t R = arg_u32(l, 4), C = arg_u32(l, 5);
    float eps = arg_f32(l, 6);
    uint64_t T = threads(l);
    float *s = malloc(T * sizeof *s);
    for (uint64_t b = 0; b < blocks(l); b++)
        for (uint64_t r = b; r < R; r += blocks(l)) {
            uint64_t base = r * C;
            for (uint64_t t = 0; t < T; t++) {
                float acc = 0.0f;
                for (uint64_t c = t; c < C; c += T) acc += ld(x, d, base + c);
                s[t] = acc;
            }
            float mean = tree_sum(s, T) / (float)C;
            for (uint64_t t = 0; t < T; t++) {
                float acc = 0.0f;
                for (uint64_t c = t; c < C; c += T) {
                    float dv = ld(x, d, base + c) - mean;
                    acc = madd(l, dv, dv, acc);
                }
                s[t] = acc;
            }
            float rstd = 1.0f / sqrtf(tree_sum(s, T) / (float)C + eps);
            for (uint64_t c = 0; c < C; c++)
                st(y, d, base + c, madd(l, (ld(x, d, base + c) - mean) * rstd, ld(gamma, d, c), ld(beta, d, c)));
        }
    free(s);
}

static void gemv(const suite_launch_t *l, enum dtype d) {
    const void *A = arg_ptr(l, 0), *x = arg_ptr(l, 1);
    void *y = arg_ptr(l, 2);
    uint32_t M = arg_u32(l, 3), K = arg_u32(l, 4);
    uint64_t T = threads(l);
    float *s = malloc(T * sizeof *s);
    for (uint64_t b = 0; b < blocks(l); b++)
        for (uint64_t r = b; r < M; r += blocks(l)) {
            for (uint64_t t = 0; t < T; t++) {
                float acc = 0.0f;
                for (uint64_t k = t; k < K; k += T) acc = madd(l, ld(A, d, r * K + k), ld(x, d, k), acc);
                s[t] = acc;
            }
            st(y, d, r, tree_sum(s, T));
        }
    free(s);
}

static void softmax(const suite_launch_t *l, enum dtype d) {
    const void *x = arg_ptr(l, 0);
    void *y = arg_ptr(l, 1);
    uint32_t R = arg_u32(l, 2), C = arg_u32(l, 3);
    uint64_t T = threads(l);
    float *s = malloc(T * sizeof *s);
    for (uint64_t b = 0; b < blocks(l); b++)
        for (uint64_t r = b; r < R; r += blocks(l)) {
            uint64_t base = r * C;
            for (uint64_t t = 0; t < T; t++) {
                float m = NEG_MAX;
                for (uint64_t c = t; c < C; c += T) m = fmaxf(m, ld(x, d, base + c));
                s[t] = m;
            }
            float rmax = tree_max(s, T);
            for (uint64_t t = 0; t < T; t++) {
                float acc = 0.0f;
                for (uint64_t c = t; c < C; c += T) acc += expf(ld(x, d, base + c) - rmax);
                s[t] = acc;
            }
            float sum = tree_sum(s, T);
            for (uint64_t c = 0; c < C; c++) st(y, d, base + c, expf(ld(x, d, base + c) - rmax) / sum);
        }
    free(s);
}

static void attention(const suite_launch_t *l, enum dtype d) {
    const void *Q = arg_ptr(l, 0), *K = arg_ptr(l, 1), *V = arg_ptr(l, 2);
    void *O = arg_ptr(l, 3);
    uint32_t L = arg_u32(l, 4), D = arg_u32(l, 5);
    float scale = arg_f32(l, 6);
    uint64_t T = threads(l);
    float *s = malloc(T * sizeof *s), *p = malloc((L ? L : 1) * sizeof *p);
    for (uint64_t b = 0; b < blocks(l); b++)
        for (uint64_t i = b; i < L; i += blocks(l)) {
            uint64_t qbase = i * D;
            for (uint64_t t = 0; t < T; t++) {
                float m = NEG_MAX;
                for (uint64_t j = t; j < L; j += T) {
                    float dot = 0.0f;
                    for (uint64_t dd = 0; dd < D; dd++) dot = madd(l, ld(Q, d, qbase + dd), ld(K, d, j * D + dd), dot);
                    float sc = dot * scale;
                    p[j] = sc;
                    m = fmaxf(m, sc);
                }
                s[t] = m;
            }
            float rmax = tree_max(s, T);
            for (uint64_t t = 0; t < T; t++) {
                float acc = 0.0f;
                for (uint64_t j = t; j < L; j += T) {
                    float e = expf(p[j] - rmax);
                    p[j] = e;
                    acc += e;
                }
                s[t] = acc;
            }
            float sum = tree_sum(s, T);
            for (uint64_t c = 0; c < D; c++) {
                float o = 0.0f;
                for (uint64_t j = 0; j < L; j++) o = madd(l, p[j], ld(V, d, j * D + c), o);
                st(O, d, qbase + c, o / sum);
            }
        }
    free(s);
    free(p);
}

/* ------------------------------------------------------------------ the table */
typedef struct {
    const char *op;    /* name without the dtype suffix */
    const char *suite; /* the suite kernel whose final output it writes, or NULL */
    int output;        /* parameter index of its output pointer */
    int nparams;
    int sizes[7];
} suite_sig_t;

static const suite_sig_t SIGS[] = {
    {"reduce_partial", NULL, 2, 3, {8, 4, 8}},
    {"reduce_final", "reduction", 2, 3, {8, 4, 8}},
    {"gemm_splitk_partial", NULL, 2, 6, {8, 8, 8, 4, 4, 4}},
    {"splitk_reduce", "splitk_gemm", 3, 4, {8, 4, 4, 8}},
    {"layernorm", "layernorm", 3, 7, {8, 8, 8, 8, 4, 4, 4}},
    {"gemv", "gemv", 2, 5, {8, 8, 8, 4, 4}},
    {"softmax", "softmax", 1, 4, {8, 8, 4, 4}},
    {"attention", "attention", 3, 7, {8, 8, 8, 8, 4, 4, 4}},
};
#define NSIGS (int)(sizeof(SIGS) / sizeof(SIGS[0]))

/* The signature of `name` (an extern name of suite.cu) and its dtype, or NULL. */
static const suite_sig_t *find(const char *name, enum dtype *d) {
    if (strcmp(name, "reduce_final") == 0) {
        *d = DT_F32;
        return &SIGS[1];
    }
    const char *us = strrchr(name, '_');
    if (!us) return NULL;
    if (strcmp(us, "_f32") == 0) *d = DT_F32;
    else if (strcmp(us, "_bf16") == 0) *d = DT_BF16;
    else if (strcmp(us, "_f16") == 0) *d = DT_F16;
    else return NULL;
    size_t oplen = (size_t)(us - name);
    for (int i = 0; i < NSIGS; i++)
        if (i != 1 && strlen(SIGS[i].op) == oplen && strncmp(SIGS[i].op, name, oplen) == 0) return &SIGS[i];
    return NULL;
}

/* Whether FAKE_HIP_PERTURB names kernel `name`. */
static int perturbed(const char *name, const suite_sig_t *sig) {
    const char *env = getenv("FAKE_HIP_PERTURB");
    if (!env || !*env) return 0;
    const char *p = env;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if ((strlen(name) == n && strncmp(name, p, n) == 0) || (strlen(sig->op) == n && strncmp(sig->op, p, n) == 0) ||
            (sig->suite && strlen(sig->suite) == n && strncmp(sig->suite, p, n) == 0))
            return 1;
        if (!end) break;
        p = end + 1;
    }
    return 0;
}

/* If `name` is a suite kernel and `image` (a fake code object) contains it: its parameter count
 * and sizes (up to `max`) and its flags (SUITE_KERNEL, plus SUITE_CONTRACT unless the module was
 * compiled with -ffp-contract=off); returns 0. Otherwise -1. */
HIDDEN int fake_suite_lookup(const char *name, const char *image, int *nparams, int *sizes, int max, int *flags);
HIDDEN int fake_suite_lookup(const char *name, const char *image, int *nparams, int *sizes, int max, int *flags) {
    enum dtype d;
    const suite_sig_t *sig = find(name, &d);
    if (!sig || sig->nparams > max || !strstr(image, name)) return -1;
    *nparams = sig->nparams;
    memcpy(sizes, sig->sizes, (size_t)sig->nparams * sizeof(int));
    /* The options line the fake hipRTC writes after the code object's first line. */
    const char *opt = strstr(image, "\n// options: ");
    const char *eol = opt ? strchr(opt + 1, '\n') : NULL;
    const char *off = opt ? strstr(opt, "-ffp-contract=off") : NULL;
    *flags = SUITE_KERNEL | ((off && eol && off < eol) ? 0 : SUITE_CONTRACT);
    return 0;
}

/* Runs suite kernel `name` (found by fake_suite_lookup, with its flags) over the launch's argument
 * bytes (parameter i at args + offsets[i]). */
HIDDEN void fake_suite_run(const char *name, int flags, const unsigned grid[3], const unsigned block[3],
                           const unsigned char *args, const int *offsets);
HIDDEN void fake_suite_run(const char *name, int flags, const unsigned grid[3], const unsigned block[3],
                           const unsigned char *args, const int *offsets) {
    enum dtype d;
    const suite_sig_t *sig = find(name, &d);
    if (!sig) return;
    suite_launch_t l = {grid[0], grid[1], grid[2], block[0], block[1], block[2], args, offsets,
                        (flags & SUITE_CONTRACT) != 0};
    const char *op = sig->op;
    if (strcmp(op, "reduce_partial") == 0) reduce_partial(&l, d);
    else if (strcmp(op, "reduce_final") == 0) reduce_final(&l);
    else if (strcmp(op, "gemm_splitk_partial") == 0) gemm_splitk_partial(&l, d);
    else if (strcmp(op, "splitk_reduce") == 0) splitk_reduce(&l, d);
    else if (strcmp(op, "layernorm") == 0) layernorm(&l, d);
    else if (strcmp(op, "gemv") == 0) gemv(&l, d);
    else if (strcmp(op, "softmax") == 0) softmax(&l, d);
    else if (strcmp(op, "attention") == 0) attention(&l, d);
    if (perturbed(name, sig)) {
        unsigned char *out = arg_ptr(&l, sig->output);
        out[0] ^= 1; /* the lowest bit of element 0 (little-endian), whatever its width */
    }
}
