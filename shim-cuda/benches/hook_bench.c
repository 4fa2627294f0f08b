/*
 * Host cost of one intercepted driver call, measured against the fake driver
 * (tests/fake/libcuda.c), so that only the interposer's own work varies between runs:
 * 1,000,000 cuLaunchKernel calls (the fake's launch does no work for n = 0) and 1,000,000
 * cuStreamQuery calls, three repetitions; prints the fastest repetition of each in ns per call
 * as one JSON object. Run by benches/hook_cost.rs natively, with the shim in observe mode and in
 * passthrough mode.
 */
#include <stdint.h>
#include <stdio.h>
#include <time.h>

typedef int CUresult;
CUresult cuModuleGetFunction(void **, void *, const char *);
CUresult cuStreamCreate(void **, unsigned);
CUresult cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **,
                        void **);
CUresult cuStreamQuery(void *);

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(void) {
    void *f, *s;
    if (cuModuleGetFunction(&f, 0, "scale") || cuStreamCreate(&s, 0)) return 1;
    uint64_t x = 0;
    float k = 1.0f;
    int n = 0;
    void *params[] = {&x, &k, &n};
    const int N = 1000000;
    double best_launch = 1e30, best_query = 1e30;
    for (int r = 0; r < 3; r++) {
        double t0 = now_ns();
        for (int i = 0; i < N; i++)
            if (cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, params, 0)) return 2;
        double t1 = now_ns();
        for (int i = 0; i < N; i++) cuStreamQuery(s);
        double t2 = now_ns();
        if ((t1 - t0) / N < best_launch) best_launch = (t1 - t0) / N;
        if ((t2 - t1) / N < best_query) best_query = (t2 - t1) / N;
    }
    printf("{\"launch_ns\": %.2f, \"query_ns\": %.2f}\n", best_launch, best_query);
    return 0;
}
