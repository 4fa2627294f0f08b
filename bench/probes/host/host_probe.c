/*
 * Host costs that bound vitamin's per-op work on a machine (no GPU needed): the clock source and
 * the cost of one clock_gettime(CLOCK_MONOTONIC) (Rust's Instant::now), one sched_yield, one
 * futex wake with no waiter (a parking_lot/std unpark of a thread that is not parked costs no
 * syscall; one that is parked costs this plus the wake-up), and the latency of waking a parked
 * thread (futex wait/wake round trip between two threads). Prints one JSON object.
 *
 * Build: cc -O2 -pthread -o host_probe host_probe.c
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void read_line(const char *path, char *out, size_t n) {
    FILE *f = fopen(path, "r");
    out[0] = 0;
    if (!f) return;
    if (fgets(out, (int)n, f)) out[strcspn(out, "\n")] = 0;
    fclose(f);
}

static _Atomic int word = 0;
static _Atomic int stage = 0;
static double woke_at[2000];

static long futex(_Atomic int *w, int op, int v) { return syscall(SYS_futex, (int *)w, op, v, NULL, NULL, 0); }

static void *sleeper(void *arg) {
    (void)arg;
    for (int i = 0; i < 2000; i++) {
        while (atomic_load(&word) == 0) futex(&word, FUTEX_WAIT_PRIVATE, 0);
        woke_at[i] = now_ns();
        atomic_store(&word, 0);
        atomic_store(&stage, i + 1);
    }
    return NULL;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(void) {
    char cur[128], avail[256];
    read_line("/sys/devices/system/clocksource/clocksource0/current_clocksource", cur, sizeof cur);
    read_line("/sys/devices/system/clocksource/clocksource0/available_clocksource", avail, sizeof avail);
    const int N = 1000000;
    double t0 = now_ns();
    for (int i = 0; i < N; i++) now_ns();
    double clock_ns = (now_ns() - t0) / N;
    t0 = now_ns();
    for (int i = 0; i < 100000; i++) sched_yield();
    double yield_ns = (now_ns() - t0) / 100000;
    _Atomic int nobody = 0;
    t0 = now_ns();
    for (int i = 0; i < 100000; i++) futex(&nobody, FUTEX_WAKE_PRIVATE, 1);
    double wake_ns = (now_ns() - t0) / 100000;
    /* Wake-up latency of a parked thread and the waker's cost per wake. */
    pthread_t th;
    pthread_create(&th, NULL, sleeper, NULL);
    static double lat[2000], cost[2000];
    for (int i = 0; i < 2000; i++) {
        usleep(200); /* let it park */
        double a = now_ns();
        atomic_store(&word, 1);
        futex(&word, FUTEX_WAKE_PRIVATE, 1);
        double b = now_ns();
        while (atomic_load(&stage) != i + 1) {
        }
        lat[i] = woke_at[i] - a;
        cost[i] = b - a;
    }
    pthread_join(th, NULL);
    qsort(lat, 2000, sizeof(double), cmp);
    qsort(cost, 2000, sizeof(double), cmp);
    printf("{\"clocksource\": \"%s\", \"available\": \"%s\", \"clock_gettime_ns\": %.1f, \"sched_yield_ns\": %.1f, "
           "\"futex_wake_nobody_ns\": %.1f, \"wake_parked_cost_p50_ns\": %.0f, \"wake_latency_p50_ns\": %.0f, "
           "\"wake_latency_p95_ns\": %.0f}\n",
           cur, avail, clock_ns, yield_ns, wake_ns, cost[1000], lat[1000], lat[1900]);
    return 0;
}
