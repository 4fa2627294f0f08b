/*
 * One process, two devices of the HIP test double (FAKE_HIP_DEVICES=2), switching with
 * hipSetDevice: a chain alternating between a stream of device 0 and one of device 1, each waiting
 * on the other device's event (both directions), with axpy (Y += a*X) in an order-revealing
 * pattern: on device 0 y += x (grid 16 x 256), on device 1 x += 2y (grid 32 x 128). Then, with
 * device 0 current, an event synchronize on device 1's event followed at once by a host read of
 * what device 1 wrote (the double's device memory is host memory: a wait that returned early
 * shows as a wrong value). Prints: results=<1 if x and y are the values of the chain in order>
 */
#define __HIP_PLATFORM_AMD__ 1
#include <hip/hip_runtime_api.h>

#include <stdio.h>
#include <stdlib.h>

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
    int count = 0;
    CHECK(hipGetDeviceCount(&count));
    if (count < 2) {
        fprintf(stderr, "needs 2 devices, found %d\n", count);
        return 2;
    }
    hipModule_t m0, m1;
    hipFunction_t axpy0, axpy1;
    hipStream_t s0, s1;
    hipEvent_t e0, e1;
    float *x, *y, *h;
    CHECK(hipSetDevice(0));
    CHECK(hipModuleLoadData(&m0, "FAKEHIPCO1\nextern \"C\" __global__ void axpy(...) {}"));
    CHECK(hipModuleGetFunction(&axpy0, m0, "axpy"));
    CHECK(hipStreamCreateWithFlags(&s0, hipStreamNonBlocking));
    CHECK(hipEventCreateWithFlags(&e0, hipEventDisableTiming));
    CHECK(hipMalloc((void **)&x, n * sizeof(float)));
    CHECK(hipMalloc((void **)&y, n * sizeof(float)));
    CHECK(hipHostMalloc((void **)&h, n * sizeof(float), 0));
    for (unsigned i = 0; i < n; i++) h[i] = 1.0f;
    CHECK(hipMemcpy(x, h, n * sizeof(float), hipMemcpyHostToDevice));
    CHECK(hipMemset(y, 0, n * sizeof(float)));
    CHECK(hipDeviceSynchronize());
    CHECK(hipSetDevice(1));
    CHECK(hipModuleLoadData(&m1, "FAKEHIPCO1\nextern \"C\" __global__ void axpy(...) {}"));
    CHECK(hipModuleGetFunction(&axpy1, m1, "axpy"));
    CHECK(hipStreamCreateWithFlags(&s1, hipStreamNonBlocking));
    CHECK(hipEventCreateWithFlags(&e1, hipEventDisableTiming));

    float one = 1.0f, two = 2.0f;
    void *p0[] = {&one, &x, &y, (void *)&n}, *p1[] = {&two, &y, &x, (void *)&n};
    float ex = 1.0f, ey = 0.0f; /* the chain on the host */
    for (int i = 0; i < 4; i++) {
        CHECK(hipSetDevice(0));
        if (i > 0) CHECK(hipStreamWaitEvent(s0, e1, 0)); /* device 0 after device 1 */
        CHECK(hipModuleLaunchKernel(axpy0, n / 256, 1, 1, 256, 1, 1, 0, s0, p0, NULL)); /* y += x */
        CHECK(hipEventRecord(e0, s0));
        CHECK(hipSetDevice(1));
        CHECK(hipStreamWaitEvent(s1, e0, 0)); /* device 1 after device 0 */
        CHECK(hipModuleLaunchKernel(axpy1, n / 128, 1, 1, 128, 1, 1, 0, s1, p1, NULL)); /* x += 2y */
        CHECK(hipEventRecord(e1, s1));
        ey += ex;
        ex += 2.0f * ey;
    }
    CHECK(hipSetDevice(0));
    CHECK(hipEventSynchronize(e1)); /* device 1's event, device 0 current */
    int ok = 1;
    for (unsigned i = 0; i < n; i++)
        if (x[i] != ex || y[i] != ey) ok = 0; /* host reads of what both devices wrote */
    CHECK(hipDeviceSynchronize());
    CHECK(hipSetDevice(1));
    CHECK(hipDeviceSynchronize());
    printf("results=%d\n", ok);
    return 0;
}
