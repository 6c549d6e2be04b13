// A shared library the function-timing workload calls into (--func lib_step@libfuncs).
#include <time.h>

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// Busy for `us` microseconds of wall time; returns how long it ran by its own clock.
__attribute__((noinline)) long long lib_step(long us) {
    long long start = now_ns(), end = start + us * 1000;
    volatile long spin = 0;
    while (now_ns() < end)
        spin++;
    return now_ns() - start;
}
