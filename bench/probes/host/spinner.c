/*
 * A thread that spins like vitamin's helper threads for the given number of seconds:
 * spin_check.sh runs a native program next to some of these to see whether busy helper vCPUs
 * slow the application's vCPU on a host, and whether the way they spin matters.
 * Modes: "yield" (a pause and a sched_yield per iteration, reading the clock: how vitamin's
 * dispatcher thread spun until session 6), "pause" (8 pause instructions per clock read, no
 * system call).
 * Build: cc -O2 -o spinner spinner.c     Run: spinner SECONDS [yield|pause]
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 10;
    int yield = !(argc > 2 && strcmp(argv[2], "pause") == 0);
    double end = now_s() + secs;
    while (now_s() < end) {
        if (yield) {
            __builtin_ia32_pause();
            sched_yield();
        } else {
            for (int i = 0; i < 8; i++) __builtin_ia32_pause();
        }
    }
    return 0;
}
