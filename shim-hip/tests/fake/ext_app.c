/*
 * The extended launches of HIP on the test double, natively and under LD_PRELOAD=libvitamin_hip.so
 * (shim-hip/tests/ext_launch.rs). Written in C against Debian's HIP 5.2 headers: hip_ext.h is C++
 * (default arguments), so hipExtModuleLaunchKernel is declared here under both of its names, and
 * ROCm 6's hipLaunchKernelExC / hipDrvLaunchKernelEx with their types from ROCm 6's
 * hip_runtime_api.h.
 *
 * On one blocking stream s1, in this order, each an axpy (y += a*x, n = 4096) of its own `a`:
 *   0. hipModuleLaunchKernel of launch 1's shape into y0, then s1 synchronized
 *   1. hipExtModuleLaunchKernel (C name if the process has one), global 4096 / local 256, kernel parameters, events t0
 *      and t1 around it, into y1 (the others go into y)
 *   2. hipExtModuleLaunchKernel (C++ name), global 4096 / local 512, an `extra` buffer
 *   3. hipLaunchKernelExC, no attributes (host stub)
 *   4. hipLaunchKernelExC, hipLaunchAttributeCooperative = 0
 *   5. hipLaunchKernelExC, hipLaunchAttributeCooperative = 1 (grid 16 x 256: fits the device)
 *   6. hipDrvLaunchKernelEx, no attributes, an `extra` buffer
 *   7. hipDrvLaunchKernelEx, hipLaunchAttributePriority
 *   8. hipLaunchKernel of launch 9's shape into y0, s1 synchronized before and after
 *   9. hipExtLaunchKernel (host stub) with events t2 and t3 around it
 * and on s2 (non-blocking): waits t1, copies y1 to host (it must hold step 1's result).
 * Refused synchronously (codes printed): hipExtModuleLaunchKernel with global 4000 / local 256
 * (not whole work-groups of a uniform-work-group kernel: hipErrorInvalidValue), and
 * hipDrvLaunchKernelEx with attribute id 99 (hipErrorInvalidValue).
 *
 * Prints one line: results=<hash of y> snap_ok=<0|1> elapsed_ok=<0|1> nondiv=<code> badattr=<code>
 */
#define _GNU_SOURCE 1
#define __HIP_PLATFORM_AMD__ 1
#include <hip/hip_runtime_api.h>

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void **__hipRegisterFatBinary(const void *data);
void __hipRegisterFunction(void **modules, const void *hostFunction, char *deviceFunction, const char *deviceName,
                           unsigned int threadLimit, void *tid, void *bid, dim3 *blockDim, dim3 *gridDim, int *wSize);

/* hipExtModuleLaunchKernel: the C name (what applications built against ROCm >= 5.3 call; looked
 * up at run time, since the double, like HIP 5.2, lacks it: under the interposer it is the
 * interposer's) and HIP 5.2's C++ name. */
typedef hipError_t (*ext_module_launch_fn)(hipFunction_t f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx,
                                           uint32_t ly, uint32_t lz, size_t smem, hipStream_t stream, void **params,
                                           void **extra, hipEvent_t start, hipEvent_t stop, uint32_t flags);
hipError_t ext_module_launch_cxx(hipFunction_t f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx, uint32_t ly,
                                 uint32_t lz, size_t smem, hipStream_t stream, void **params, void **extra,
                                 hipEvent_t start, hipEvent_t stop, uint32_t flags)
    __asm__("_Z24hipExtModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12ihipStream_tPPvS4_P11ihipEvent_tS6_j");

/* ROCm 6's types (hip_runtime_api.h): a 72-byte attribute, 56-byte configurations. */
typedef struct {
    int id;
    char pad[4];
    union {
        char bytes[64];
        int cooperative;
        int priority;
    } val;
} launch_attribute;
typedef struct {
    dim3 gridDim, blockDim;
    size_t dynamicSmemBytes;
    hipStream_t stream;
    launch_attribute *attrs;
    unsigned int numAttrs;
} launch_config;
typedef struct {
    unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    hipStream_t hStream;
    launch_attribute *attrs;
    unsigned int numAttrs;
} drv_launch_config;
hipError_t hipLaunchKernelExC(const launch_config *config, const void *f, void **args);
hipError_t hipDrvLaunchKernelEx(const drv_launch_config *config, hipFunction_t f, void **params, void **extra);

static const char stub_axpy = 0;

#define CHECK(call)                                                                                 \
    do {                                                                                            \
        hipError_t e_ = (call);                                                                     \
        if (e_ != hipSuccess) {                                                                     \
            fprintf(stderr, "%s:%d: %s = %d\n", __FILE__, __LINE__, #call, (int)e_);                 \
            exit(2);                                                                                \
        }                                                                                           \
    } while (0)

/* axpy's arguments packed as the kernel reads them: a @0, x @8, y @16, n @24. */
typedef struct {
    float a;
    uint32_t pad;
    const float *x;
    float *y;
    uint32_t n;
    uint32_t pad2;
} axpy_args;

int main(void) {
    const unsigned n = 4096;
    ext_module_launch_fn hipExtModuleLaunchKernel =
        (ext_module_launch_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "hipExtModuleLaunchKernel");
    if (!hipExtModuleLaunchKernel) hipExtModuleLaunchKernel = ext_module_launch_cxx;
    void **h = __hipRegisterFatBinary("fake fat binary");
    __hipRegisterFunction(h, &stub_axpy, "axpy", "axpy", (unsigned)-1, 0, 0, 0, 0, 0);
    hipModule_t module;
    hipFunction_t axpy;
    CHECK(hipModuleLoadData(&module, "FAKEHIPCO1\nextern \"C\" __global__ void axpy(...) {}"));
    CHECK(hipModuleGetFunction(&axpy, module, "axpy"));

    hipStream_t s1, s2;
    CHECK(hipStreamCreate(&s1));
    CHECK(hipStreamCreateWithFlags(&s2, hipStreamNonBlocking));
    hipEvent_t t0, t1, t2, t3;
    CHECK(hipEventCreate(&t0));
    CHECK(hipEventCreate(&t1));
    CHECK(hipEventCreate(&t2));
    CHECK(hipEventCreate(&t3));

    float *h_x, *h_y, *h_y1, *d_x, *d_y, *d_y1;
    CHECK(hipHostMalloc((void **)&h_x, n * sizeof(float), 0));
    CHECK(hipHostMalloc((void **)&h_y, n * sizeof(float), 0));
    CHECK(hipHostMalloc((void **)&h_y1, n * sizeof(float), 0));
    CHECK(hipMalloc((void **)&d_x, n * sizeof(float)));
    CHECK(hipMalloc((void **)&d_y, n * sizeof(float)));
    CHECK(hipMalloc((void **)&d_y1, n * sizeof(float)));
    for (unsigned i = 0; i < n; i++) h_x[i] = (float)(i % 97) * 0.03125f + 0.5f;
    CHECK(hipMemcpy(d_x, h_x, n * sizeof(float), hipMemcpyHostToDevice));
    CHECK(hipMemset(d_y, 0, n * sizeof(float)));
    CHECK(hipMemset(d_y1, 0, n * sizeof(float)));
    CHECK(hipDeviceSynchronize());

    /* 0. The same launch without events, into y0, waited for: with the pool idle again, a binding
     * policy has a plan for this shape at once (launch-first, which binds a launch with events). */
    float a0 = 1.0f;
    float *d_y0;
    CHECK(hipMalloc((void **)&d_y0, n * sizeof(float)));
    void *p0[] = {&a0, &d_x, &d_y0, (void *)&n};
    CHECK(hipModuleLaunchKernel(axpy, n / 256, 1, 1, 256, 1, 1, 0, s1, p0, NULL));
    CHECK(hipStreamSynchronize(s1));

    /* 1. C name, kernel parameters, timing events, into y1. */
    float a1 = 0.5f;
    void *p1[] = {&a1, &d_x, &d_y1, (void *)&n};
    CHECK(hipExtModuleLaunchKernel(axpy, n, 1, 1, 256, 1, 1, 0, s1, p1, NULL, t0, t1, 0));
    /* s2: after t1, a copy of y1. */
    CHECK(hipStreamWaitEvent(s2, t1, 0));
    CHECK(hipMemcpyAsync(h_y1, d_y1, n * sizeof(float), hipMemcpyDeviceToHost, s2));

    /* 2. C++ name, `extra` buffer. */
    axpy_args b2 = {0.25f, 0, d_x, d_y, n, 0};
    size_t b2_size = sizeof b2;
    void *extra2[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, &b2, HIP_LAUNCH_PARAM_BUFFER_SIZE, &b2_size,
                      HIP_LAUNCH_PARAM_END};
    CHECK(ext_module_launch_cxx(axpy, n, 1, 1, 512, 1, 1, 0, s1, NULL, extra2, NULL, NULL, 0));

    /* 3.-5. hipLaunchKernelExC. */
    float a3 = 2.0f, a4 = -0.75f, a5 = 1.5f;
    void *p3[] = {&a3, &d_x, &d_y, (void *)&n}, *p4[] = {&a4, &d_x, &d_y, (void *)&n},
         *p5[] = {&a5, &d_x, &d_y, (void *)&n};
    launch_config c = {{n / 256, 1, 1}, {256, 1, 1}, 0, s1, NULL, 0};
    CHECK(hipLaunchKernelExC(&c, &stub_axpy, p3));
    launch_attribute coop;
    memset(&coop, 0, sizeof coop);
    coop.id = 2; /* hipLaunchAttributeCooperative */
    coop.val.cooperative = 0;
    c.attrs = &coop, c.numAttrs = 1;
    CHECK(hipLaunchKernelExC(&c, &stub_axpy, p4));
    coop.val.cooperative = 1;
    CHECK(hipLaunchKernelExC(&c, &stub_axpy, p5));

    /* 6.-7. hipDrvLaunchKernelEx. */
    axpy_args b6 = {3.0f, 0, d_x, d_y, n, 0};
    size_t b6_size = sizeof b6;
    void *extra6[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, &b6, HIP_LAUNCH_PARAM_BUFFER_SIZE, &b6_size,
                      HIP_LAUNCH_PARAM_END};
    drv_launch_config d = {n / 128, 1, 1, 128, 1, 1, 0, s1, NULL, 0};
    CHECK(hipDrvLaunchKernelEx(&d, axpy, NULL, extra6));
    float a7 = -1.25f;
    void *p7[] = {&a7, &d_x, &d_y, (void *)&n};
    launch_attribute prio;
    memset(&prio, 0, sizeof prio);
    prio.id = 8; /* hipLaunchAttributePriority */
    prio.val.priority = 1;
    d.attrs = &prio, d.numAttrs = 1;
    CHECK(hipDrvLaunchKernelEx(&d, axpy, p7, NULL));

    /* 8. hipExtLaunchKernel (host stub) with events t2 and t3, after the same launch without
     * events into y0 and s1 idle again (as for launch 1). */
    CHECK(hipStreamSynchronize(s1));
    float a8 = 0.125f;
    void *p8[] = {&a8, &d_x, &d_y, (void *)&n}, *p8_warm[] = {&a8, &d_x, &d_y0, (void *)&n};
    CHECK(hipLaunchKernel(&stub_axpy, (dim3){n / 256, 1, 1}, (dim3){256, 1, 1}, p8_warm, 0, s1));
    CHECK(hipStreamSynchronize(s1));
    CHECK(hipExtLaunchKernel(&stub_axpy, (dim3){n / 256, 1, 1}, (dim3){256, 1, 1}, p8, 0, s1, t2, t3, 0));

    /* Refused synchronously. */
    hipError_t nondiv = hipExtModuleLaunchKernel(axpy, 4000, 1, 1, 256, 1, 1, 0, s1, p7, NULL, NULL, NULL, 0);
    launch_attribute bad;
    memset(&bad, 0, sizeof bad);
    bad.id = 99;
    d.attrs = &bad;
    hipError_t badattr = hipDrvLaunchKernelEx(&d, axpy, p7, NULL);

    CHECK(hipMemcpyAsync(h_y, d_y, n * sizeof(float), hipMemcpyDeviceToHost, s1));
    CHECK(hipStreamSynchronize(s1));
    CHECK(hipStreamSynchronize(s2));
    CHECK(hipEventSynchronize(t1));
    float ms = -1.0f;
    int elapsed_ok = hipEventElapsedTime(&ms, t0, t1) == hipSuccess && ms >= 0.0f;
    CHECK(hipEventSynchronize(t3));
    elapsed_ok = elapsed_ok && hipEventElapsedTime(&ms, t2, t3) == hipSuccess && ms >= 0.0f;
    int snap_ok = 1;
    for (unsigned i = 0; i < n; i++)
        if (h_y1[i] != 0.5f * h_x[i]) snap_ok = 0;
    uint64_t hash = 1469598103934665603ull;
    const unsigned char *bytes = (const unsigned char *)h_y;
    for (size_t i = 0; i < n * sizeof(float); i++) hash = (hash ^ bytes[i]) * 1099511628211ull;
    printf("results=%016llx snap_ok=%d elapsed_ok=%d nondiv=%d badattr=%d\n", (unsigned long long)hash, snap_ok,
           elapsed_ok, (int)nondiv, (int)badattr);
    return 0;
}
