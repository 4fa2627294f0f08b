// Cache-line transfer latency between every pair of vCPUs of this (virtual) machine: two threads,
// pinned to vCPUs a and b, hand one cache line back and forth (a writes an odd value, b answers
// with the next even one) ITERS times; the round trip's median over 5 batches, in ns, is printed
// as a matrix. A guest that reports one NUMA node and one L3 may still run on host cores of
// different sockets or core complexes, where a transfer costs several times more; vitamin's
// threads (application, dispatcher, submission) hand cache lines to each other at every op.
// Build: cc -O2 -pthread c2c_probe.c -o c2c_probe; run: ./c2c_probe [iters]
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static _Alignas(128) atomic_long line;
static long iters = 20000;

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    if (pthread_setaffinity_np(pthread_self(), sizeof(s), &s) != 0) {
        fprintf(stderr, "cannot pin to cpu %d\n", cpu);
        exit(1);
    }
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void* answer(void* arg) {
    pin((int)(long)arg);
    for (long i = 0; i < iters; i++) {
        long want = 2 * i + 1;
        while (atomic_load_explicit(&line, memory_order_acquire) != want) __builtin_ia32_pause();
        atomic_store_explicit(&line, want + 1, memory_order_release);
    }
    return NULL;
}

static int cmp(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

// Median round trip between vCPUs a and b, ns.
static double round_trip(int a, int b) {
    double batch[5];
    for (int k = 0; k < 5; k++) {
        atomic_store(&line, 0);
        pthread_t t;
        pthread_create(&t, NULL, answer, (void*)(long)b);
        pin(a);
        double t0 = now_ns();
        for (long i = 0; i < iters; i++) {
            atomic_store_explicit(&line, 2 * i + 1, memory_order_release);
            while (atomic_load_explicit(&line, memory_order_acquire) != 2 * i + 2) __builtin_ia32_pause();
        }
        batch[k] = (now_ns() - t0) / iters;
        pthread_join(t, NULL);
    }
    qsort(batch, 5, sizeof(double), cmp);
    return batch[2];
}

int main(int argc, char** argv) {
    if (argc > 1) iters = atol(argv[1]);
    int n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n > 64) n = 64;
    printf("c2c round trip, ns (median of 5 batches of %ld), %d vCPUs\n     ", iters, n);
    for (int b = 0; b < n; b++) printf("%5d", b);
    printf("\n");
    for (int a = 0; a < n; a++) {
        printf("%4d ", a);
        for (int b = 0; b < n; b++) printf("%5.0f", a == b ? 0.0 : round_trip(a, b));
        printf("\n");
        fflush(stdout);
    }
    return 0;
}
