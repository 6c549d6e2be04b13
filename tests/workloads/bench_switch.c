/* bench_switch ROUNDS: two processes pass a byte back and forth through two pipes ROUNDS
 * times and print the time per round trip. Each side sleeps in read() until the other
 * writes: every round trip is two wakeups and two context switches. Both run on one CPU
 * (the one it starts on), so no idle CPU has to be woken: on a virtual machine that
 * takes tens of microseconds and varies from run to run, drowning the rest. `cargo
 * xtask bench others` runs it untraced while rtm-trace traces another process: what the
 * tracer's scheduler tracepoints (sched_waking, sched_switch) cost everyone else. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 0;
    if (rounds <= 0) {
        fprintf(stderr, "usage: bench_switch ROUNDS\n");
        return 2;
    }
    int ping[2], pong[2];
    if (pipe(ping) || pipe(pong)) {
        perror("pipe");
        return 1;
    }
    char b = 0;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    if (sched_setaffinity(0, sizeof one, &one)) {
        perror("sched_setaffinity");
        return 1;
    }
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    if (child == 0) {
        for (long i = 0; i < rounds; i++) {
            if (read(ping[0], &b, 1) != 1 || write(pong[1], &b, 1) != 1) _exit(1);
        }
        _exit(0);
    }
    double start = now_ns();
    for (long i = 0; i < rounds; i++) {
        if (write(ping[1], &b, 1) != 1 || read(pong[0], &b, 1) != 1) {
            perror("pingpong");
            return 1;
        }
    }
    double elapsed = now_ns() - start;
    int status = 0;
    waitpid(child, &status, 0);
    printf("ns_per_round_trip=%.1f rounds=%ld\n", elapsed / rounds, rounds);
    return status == 0 ? 0 : 1;
}
