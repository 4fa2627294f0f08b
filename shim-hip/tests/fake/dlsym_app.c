/*
 * A HIP application that also calls the runtime behind the interposer's back, as Triton's AMD
 * launcher does: it dlopens libamdhip64 with RTLD_LOCAL and launches through the function dlsym
 * returns (shim-hip/tests/dlsym_bypass.rs, docs/amd.md). On one stream s1, axpy (y += a*x, x = 1):
 *   A. hipModuleLaunchKernel, a = 1 (linked: the interposer's hook)
 *   B. the dlsym'd hipModuleLaunchKernel, a = 2 (the runtime's own function)
 *   C. hipModuleLaunchKernel, a = 4 (the hook)
 * then synchronizes s1 and copies y out. Prints: results=<1 if every y is 7, else 0>
 */
#define __HIP_PLATFORM_AMD__ 1
#include <hip/hip_runtime_api.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef hipError_t (*module_launch_fn)(hipFunction_t, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                       unsigned, hipStream_t, void **, void **);

#define CHECK(call)                                                                                 \
    do {                                                                                            \
        hipError_t e_ = (call);                                                                     \
        if (e_ != hipSuccess) {                                                                     \
            fprintf(stderr, "%s:%d: %s = %d\n", __FILE__, __LINE__, #call, (int)e_);                 \
            exit(2);                                                                                \
        }                                                                                           \
    } while (0)

int main(void) {
    const unsigned n = 4096;
    hipModule_t module;
    hipFunction_t axpy;
    hipStream_t s1;
    CHECK(hipModuleLoadData(&module, "FAKEHIPCO1\nextern \"C\" __global__ void axpy(...) {}"));
    CHECK(hipModuleGetFunction(&axpy, module, "axpy"));
    CHECK(hipStreamCreate(&s1));
    float *x, *y, *h;
    CHECK(hipMalloc((void **)&x, n * sizeof(float)));
    CHECK(hipMalloc((void **)&y, n * sizeof(float)));
    CHECK(hipHostMalloc((void **)&h, n * sizeof(float), 0));
    for (unsigned i = 0; i < n; i++) h[i] = 1.0f;
    CHECK(hipMemcpy(x, h, n * sizeof(float), hipMemcpyHostToDevice));
    CHECK(hipMemset(y, 0, n * sizeof(float)));
    CHECK(hipDeviceSynchronize());

    void *lib = dlopen("libamdhip64.so.5", RTLD_NOW | RTLD_LOCAL);
    module_launch_fn direct = lib ? (module_launch_fn)(uintptr_t)dlsym(lib, "hipModuleLaunchKernel") : NULL;
    if (!direct) {
        fprintf(stderr, "dlopen/dlsym: %s\n", dlerror());
        return 2;
    }
    float a1 = 1.0f, a2 = 2.0f, a4 = 4.0f;
    void *p1[] = {&a1, &x, &y, (void *)&n}, *p2[] = {&a2, &x, &y, (void *)&n}, *p4[] = {&a4, &x, &y, (void *)&n};
    CHECK(hipModuleLaunchKernel(axpy, n / 256, 1, 1, 256, 1, 1, 0, s1, p1, NULL));
    CHECK(direct(axpy, n / 256, 1, 1, 256, 1, 1, 0, s1, p2, NULL));
    CHECK(hipModuleLaunchKernel(axpy, n / 256, 1, 1, 256, 1, 1, 0, s1, p4, NULL));
    CHECK(hipStreamSynchronize(s1));
    CHECK(hipDeviceSynchronize());
    CHECK(hipMemcpy(h, y, n * sizeof(float), hipMemcpyDeviceToHost));
    int ok = 1;
    for (unsigned i = 0; i < n; i++)
        if (h[i] != 7.0f) ok = 0;
    printf("results=%d\n", ok);
    return 0;
}
