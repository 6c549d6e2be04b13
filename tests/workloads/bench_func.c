/* bench_func CALLS: calls timed_leaf() CALLS times and prints the time per call, for
 * `cargo xtask bench func` (untraced, then with --func timed_leaf). timed_leaf is a
 * small function of the usual shape: it saves a register (a `push`, which the kernel
 * emulates, so its probe costs one trap) and calls another. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

__attribute__((noinline)) long helper(long x) {
    __asm__ volatile("" : "+r"(x));
    return x * 3 + 1;
}

__attribute__((noinline)) long timed_leaf(long x) {
    long a = helper(x);
    long b = helper(a);
    return a ^ b;
}

int main(int argc, char **argv) {
    long calls = argc > 1 ? atol(argv[1]) : 0;
    if (calls <= 0) {
        fprintf(stderr, "usage: bench_func CALLS\n");
        return 2;
    }
    long sum = 0;
    double start = now_ns();
    for (long i = 0; i < calls; i++)
        sum += timed_leaf(i);
    double elapsed = now_ns() - start;
    printf("ns_per_call=%.1f sum=%ld\n", elapsed / calls, sum);
    return 0;
}
