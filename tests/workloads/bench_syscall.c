/* bench_syscall CALLS: makes CALLS getppid system calls (the cheapest there is) and
 * prints the time per call. `cargo xtask bench others` runs it untraced while rtm-trace
 * traces another process: what the tracer's system-wide tracepoints cost everyone else. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    long calls = argc > 1 ? atol(argv[1]) : 0;
    if (calls <= 0) {
        fprintf(stderr, "usage: bench_syscall CALLS\n");
        return 2;
    }
    long sum = 0;
    double start = now_ns();
    for (long i = 0; i < calls; i++)
        sum += syscall(SYS_getppid);
    double elapsed = now_ns() - start;
    printf("ns_per_call=%.1f ppid_sum=%ld\n", elapsed / calls, sum);
    return 0;
}
