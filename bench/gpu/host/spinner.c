/*
 * A thread that spins like vitamin's helper threads (a pause and a sched_yield per iteration,
 * reading the clock) for the given number of seconds: spin_check.sh runs a native program next to
 * some of these to see whether busy helper vCPUs slow the application's vCPU on a host.
 * Build: cc -O2 -o spinner spinner.c
 */
#include <sched.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 10;
    double end = now_s() + secs;
    while (now_s() < end) {
        __builtin_ia32_pause();
        sched_yield();
    }
    return 0;
}
