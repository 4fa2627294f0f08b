/*
 * An RCCL collective on the HIP test double: a step loop on two streams, compute (axpy, y += x) on
 * one, the collective (the double's ncclDevKernel_AllReduce_Sum_f32_RING_LL: axpy's arithmetic,
 * x += 2y) on a communication stream after an event, the next compute after the collective.
 * Prints: results=<1 if x and y are the values of the chain in order>
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
    hipModule_t m;
    hipFunction_t axpy, allreduce;
    CHECK(hipModuleLoadData(&m, "FAKEHIPCO1\nextern \"C\" __global__ void axpy(...) {}\n"
                                "extern \"C\" __global__ void ncclDevKernel_AllReduce_Sum_f32_RING_LL(...) {}"));
    CHECK(hipModuleGetFunction(&axpy, m, "axpy"));
    CHECK(hipModuleGetFunction(&allreduce, m, "ncclDevKernel_AllReduce_Sum_f32_RING_LL"));
    hipStream_t compute, comm;
    hipEvent_t grads, reduced;
    CHECK(hipStreamCreateWithFlags(&compute, hipStreamNonBlocking));
    CHECK(hipStreamCreateWithFlags(&comm, hipStreamNonBlocking));
    CHECK(hipEventCreateWithFlags(&grads, hipEventDisableTiming));
    CHECK(hipEventCreateWithFlags(&reduced, hipEventDisableTiming));
    float *x, *y, *h;
    CHECK(hipMalloc((void **)&x, n * sizeof(float)));
    CHECK(hipMalloc((void **)&y, n * sizeof(float)));
    CHECK(hipHostMalloc((void **)&h, n * sizeof(float), 0));
    for (unsigned i = 0; i < n; i++) h[i] = 1.0f;
    CHECK(hipMemcpy(x, h, n * sizeof(float), hipMemcpyHostToDevice));
    CHECK(hipMemset(y, 0, n * sizeof(float)));
    CHECK(hipDeviceSynchronize());
    float one = 1.0f, two = 2.0f;
    void *pc[] = {&one, &x, &y, (void *)&n}, *pr[] = {&two, &y, &x, (void *)&n};
    float ex = 1.0f, ey = 0.0f;
    for (int i = 0; i < 4; i++) {
        CHECK(hipModuleLaunchKernel(axpy, n / 256, 1, 1, 256, 1, 1, 0, compute, pc, NULL)); /* y += x */
        CHECK(hipEventRecord(grads, compute));
        CHECK(hipStreamWaitEvent(comm, grads, 0));
        CHECK(hipModuleLaunchKernel(allreduce, 16, 1, 1, 256, 1, 1, 0, comm, pr, NULL)); /* x += 2y */
        CHECK(hipEventRecord(reduced, comm));
        CHECK(hipStreamWaitEvent(compute, reduced, 0));
        ey += ex;
        ex += 2.0f * ey;
    }
    CHECK(hipStreamSynchronize(compute));
    CHECK(hipMemcpy(h, x, n * sizeof(float), hipMemcpyDeviceToHost));
    int ok = 1;
    for (unsigned i = 0; i < n; i++)
        if (h[i] != ex) ok = 0;
    CHECK(hipMemcpy(h, y, n * sizeof(float), hipMemcpyDeviceToHost));
    for (unsigned i = 0; i < n; i++)
        if (h[i] != ey) ok = 0;
    printf("results=%d\n", ok);
    return 0;
}
