/* A lock-bound program with knobs, to check what-if estimates against the real change.
 *
 *   whatif THREADS ROUNDS HOLD_US OUTSIDE_US spin|sleep
 *
 * THREADS threads each do ROUNDS rounds of: OUTSIDE_US of work outside the lock (spinning
 * on the clock, or sleeping as if waiting for I/O), then HOLD_US spinning while holding
 * one shared mutex. Prints `elapsed_ns=N` (from before the first thread starts to after
 * the last one ends, its own clock) and the rounds done.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long rounds, hold_ns, outside_ns;
static int outside_sleeps;
static long done;

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void spin(long ns) {
    long long end = now_ns() + ns;
    while (now_ns() < end) {
    }
}

static void *worker(void *arg) {
    (void)arg;
    for (long i = 0; i < rounds; i++) {
        if (outside_sleeps) {
            struct timespec ts = {0, outside_ns};
            nanosleep(&ts, NULL);
        } else {
            spin(outside_ns);
        }
        pthread_mutex_lock(&lock);
        spin(hold_ns);
        done++;
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 6 || (strcmp(argv[5], "spin") && strcmp(argv[5], "sleep"))) {
        fprintf(stderr, "usage: whatif THREADS ROUNDS HOLD_US OUTSIDE_US spin|sleep\n");
        return 2;
    }
    int threads = atoi(argv[1]);
    rounds = atol(argv[2]);
    hold_ns = atol(argv[3]) * 1000;
    outside_ns = atol(argv[4]) * 1000;
    outside_sleeps = !strcmp(argv[5], "sleep");
    if (threads < 1 || threads > 256 || rounds < 1 || outside_ns >= 1000000000L) {
        fprintf(stderr, "whatif: 1-256 threads, at least 1 round, outside under 1 s\n");
        return 2;
    }
    pthread_t t[256];
    long long start = now_ns();
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    printf("elapsed_ns=%lld rounds=%ld\n", now_ns() - start, done);
    return 0;
}
