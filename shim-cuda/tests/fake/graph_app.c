/*
 * Graph launches for the bind-mode CI test (tests/bind_graph.rs). Runs against the fake libcuda in
 * its asynchronous mode, natively and under the shim in bind mode; prints only deterministic
 * results. The fake's execution log shows where and when each kernel and graph launch ran
 * ("begin graph<exec>.<n> v<version>": the n-th launch of an executable graph, with the version of
 * the executable graph it ran with) and the test checks the happens-before edges below against it.
 *
 * Kernel: step(dst, src, n, tag, mul, add) ("k<tag>" in the execution log; tags 90-99 take 300 ms).
 * Graph indices (the fake numbers graphs and executable graphs together, in creation order):
 * G = 1 (captured: one step launch), E = 2 (instantiated from G), E3 = 3 (instantiated from G, only
 * launched into a capture), G2 = 4 (captured: that launch of E3).
 *
 * Covers: a graph launch between kernels on one stream (stream order both ways); an update of the
 * executable graph issued while a launch of it is still held behind a long kernel (the held launch
 * must run with the old version); a launch on another stream issued while the previous launch is
 * held, which the driver orders behind that launch; a kernel-node parameter change; destroying the
 * executable graph right after launching it behind a long kernel (the launch must still run); an
 * upload; a launch into a capturing stream (captured natively, a child-graph node).
 *
 * Build: cc -o graph_app graph_app.c -L<dir> -lcuda
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef uint64_t CUdeviceptr;
typedef void *CUstream;
typedef void *CUfunction;
typedef void *CUcontext;
typedef void *CUgraph;
typedef void *CUgraphExec;

CUresult cuInit(unsigned);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, int);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuModuleGetFunction(CUfunction *, void *, const char *);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr, const void *, size_t, CUstream);
CUresult cuStreamCreate(CUstream *, unsigned);
CUresult cuStreamDestroy_v2(CUstream);
CUresult cuStreamSynchronize(CUstream);
CUresult cuStreamBeginCapture_v2(CUstream, int);
CUresult cuStreamEndCapture(CUstream, CUgraph *);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *, CUgraph, unsigned long long);
CUresult cuGraphLaunch(CUgraphExec, CUstream);
CUresult cuGraphUpload(CUgraphExec, CUstream);
CUresult cuGraphExecUpdate_v2(CUgraphExec, CUgraph, void *);
CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec, void *, const void *);
CUresult cuGraphExecDestroy(CUgraphExec);
CUresult cuGraphDestroy(CUgraph);
CUresult cuCtxSynchronize(void);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **, void **);
void fake_mark(const char *);

#define N 4096
#define BYTES (N * sizeof(float))
#define CHECK(x) do { CUresult r_ = (x); if (r_) { printf("FAILED %s = %d\n", #x, r_); exit(1); } } while (0)

static CUfunction STEP;

static unsigned checksum(const float *v) {
    unsigned h = 2166136261u;
    for (int i = 0; i < N; i++) {
        unsigned bits;
        memcpy(&bits, &v[i], 4);
        h = (h ^ bits) * 16777619u;
    }
    return h;
}
static const float *dev(CUdeviceptr p) { return (const float *)(uintptr_t)p; } /* fake device memory is host memory */

static CUresult step(CUstream s, CUdeviceptr dst, CUdeviceptr src, int tag, float mul, float add) {
    int n = N;
    void *params[] = {&dst, &src, &n, &tag, &mul, &add};
    return cuLaunchKernel(STEP, N / 256, 1, 1, 256, 1, 1, 0, s, params, NULL);
}

int main(void) {
    static float host[N];
    for (int i = 0; i < N; i++) host[i] = (float)(i % 89) * 0.5f;

    CHECK(cuInit(0));
    CUcontext ctx;
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleGetFunction(&STEP, NULL, "step"));
    CUstream s1, s2, s3;
    CHECK(cuStreamCreate(&s1, 0)); /* blocking */
    CHECK(cuStreamCreate(&s2, 1)); /* non-blocking */
    CHECK(cuStreamCreate(&s3, 1)); /* non-blocking, for captures */
    CUdeviceptr x, y;
    CHECK(cuMemAlloc_v2(&x, BYTES));
    CHECK(cuMemAlloc_v2(&y, BYTES));
    CHECK(cuMemcpyHtoDAsync_v2(x, host, BYTES, s1));
    CHECK(cuMemcpyHtoDAsync_v2(y, host, BYTES, s1));
    CHECK(cuStreamSynchronize(s1));

    /* G: one captured launch; E: its executable graph */
    CUgraph g, g2;
    CUgraphExec e, e3;
    CHECK(cuStreamBeginCapture_v2(s3, 0));
    CHECK(step(s3, y, x, 50, 1.0f, 0.0f));
    CHECK(cuStreamEndCapture(s3, &g));
    CHECK(cuGraphInstantiateWithFlags(&e, g, 0));
    CHECK(cuGraphUpload(e, s1));
    fake_mark("start");

    CHECK(step(s1, x, x, 1, 0.5f, 1.0f));    /* k1 */
    CHECK(cuGraphLaunch(e, s1));             /* graph2.1 after k1 */
    CHECK(step(s1, x, x, 2, 0.25f, 3.0f));   /* k2 after graph2.1 */
    CHECK(step(s1, x, x, 91, 1.0f, 1.0f));   /* k91: 300 ms */
    CHECK(cuGraphLaunch(e, s1));             /* graph2.2, held behind k91 */
    CHECK(cuGraphLaunch(e, s2));             /* graph2.3: the driver orders it behind graph2.2 */
    CHECK(cuGraphExecUpdate_v2(e, g, NULL)); /* v1: only launches after this call see it */
    fake_mark("after update");
    CHECK(cuGraphLaunch(e, s2));             /* graph2.4 (v1) */
    CHECK(cuGraphExecKernelNodeSetParams_v2(e, NULL, NULL)); /* v2 */
    CHECK(cuGraphLaunch(e, s2));             /* graph2.5 (v2) */
    CHECK(step(s2, y, y, 3, 2.0f, 0.0f));    /* k3 after graph2.5 */
    CHECK(cuStreamSynchronize(s2));
    fake_mark("after sync s2");
    printf("y after sync s2: %08x\n", checksum(dev(y)));

    CHECK(step(s1, x, x, 92, 1.0f, 0.0f));   /* k92: 300 ms */
    CHECK(cuGraphLaunch(e, s1));             /* graph2.6, held behind k92 */
    CHECK(cuGraphExecDestroy(e));            /* legal natively: the launch still runs */
    fake_mark("after destroy");
    CHECK(step(s1, x, x, 4, 1.0f, 0.5f));    /* k4 after graph2.6 */

    /* a launch into a capturing stream is captured (natively), not run */
    CHECK(cuGraphInstantiateWithFlags(&e3, g, 0));
    CHECK(cuStreamBeginCapture_v2(s3, 0));
    CHECK(cuGraphLaunch(e3, s3));
    CHECK(cuStreamEndCapture(s3, &g2));
    CHECK(cuGraphExecDestroy(e3));

    CHECK(cuCtxSynchronize());
    fake_mark("after ctx sync");
    printf("final x %08x y %08x\n", checksum(dev(x)), checksum(dev(y)));
    CHECK(cuGraphDestroy(g));
    CHECK(cuGraphDestroy(g2));
    CHECK(cuStreamDestroy_v2(s1));
    CHECK(cuStreamDestroy_v2(s2));
    CHECK(cuStreamDestroy_v2(s3));
    CHECK(cuMemFree_v2(x));
    CHECK(cuMemFree_v2(y));
    puts("done");
    return 0;
}
