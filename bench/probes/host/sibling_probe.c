// Are some vCPUs of this (virtual) machine hyperthread siblings on the host, though the guest's
// topology says one thread per core? A thread pinned to vCPU `base` times a fixed integer loop
// (best of 5) alone, then beside a thread spinning (pause) on each other vCPU in turn. A spinner on
// the host sibling of `base` slows the loop markedly; one on another core does not. (A launch-bound
// thread beside vitamin's spinning helper threads would be slowed the same way.)
// Build: cc -O2 -pthread sibling_probe.c -o sibling_probe; run: ./sibling_probe [base] [pause|int|yield]
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static atomic_int spin_on = -1;
static atomic_int stop = 0;
// What the spinner runs: 0 pause (as a spinning wait), 1 integer work (a busy thread: a hidden
// host sibling then shows as a 1.5-2x slowdown, which a pause spinner barely causes), 2 pause +
// sched_yield (vitamin's helper threads' spin).
static int mode = 0;
static volatile unsigned long sink = 1;

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    pthread_setaffinity_np(pthread_self(), sizeof(s), &s);
}

static void* spinner(void* arg) {
    int cpu = (int)(long)arg;
    pin(cpu);
    while (!atomic_load(&stop)) {
        if (atomic_load(&spin_on) == cpu) {
            if (mode == 1) {
                for (int i = 0; i < 1000; i++) sink = sink * 6364136223846793005UL + 1;
            } else if (mode == 2) {
                __builtin_ia32_pause();
                sched_yield();
            } else {
                __builtin_ia32_pause();
            }
        } else {
            usleep(1000);
        }
    }
    return NULL;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static double work(void) {
    double best = 1e9;
    for (int r = 0; r < 5; r++) {
        volatile unsigned long x = 1;
        double t0 = now_ms();
        for (unsigned long i = 0; i < 20000000UL; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
        double t = now_ms() - t0;
        if (t < best) best = t;
    }
    return best;
}

int main(int argc, char** argv) {
    int base = argc > 1 ? atoi(argv[1]) : 2;
    const char* m = argc > 2 ? argv[2] : "pause";
    mode = m[0] == 'i' ? 1 : m[0] == 'y' ? 2 : 0;
    int n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    pthread_t th[256];
    for (int c = 0; c < n && c < 256; c++) pthread_create(&th[c], NULL, spinner, (void*)(long)c);
    pin(base);
    atomic_store(&spin_on, -1);
    usleep(20000);
    double alone = work();
    printf("{\"base\": %d, \"spinner\": \"%s\", \"alone_ms\": %.2f, \"beside\": {", base, m, alone);
    for (int c = 0; c < n; c++) {
        if (c == base) continue;
        atomic_store(&spin_on, c);
        usleep(20000);
        double t = work();
        printf("%s\"%d\": %.3f", c == (base == 0 ? 1 : 0) ? "" : ", ", c, t / alone);
        fflush(stdout);
    }
    printf("}}\n");
    atomic_store(&stop, 1);
    for (int c = 0; c < n; c++) pthread_join(th[c], NULL);
    return 0;
}
