/* Offers rtm-trace's full mode a steady event rate, for `cargo xtask bench ingest`:
 * THREADS threads lock and unlock their own mutex, paced so that together they make
 * RATE lock+unlock pairs per second (two events each), for SECS seconds.
 *
 *   bench_rate THREADS PAIRS_PER_SEC SECS
 *
 * Prints `pairs=N secs=S` at the end: the events offered are 2*N.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double rate_per_thread, secs;
static long done_pairs[64];

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void *run(void *arg) {
    long i = (long)arg;
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    double start = now(), t = start;
    long n = 0;
    while (t - start < secs) {
        /* Catch up with the schedule in small bursts, then look at the clock again. */
        long due = (long)((t - start) * rate_per_thread);
        if (n >= due) {
            /* Ahead of the schedule: sleep until the next pair is due (at least 50 us,
             * at most 10 ms), so a slow-paced process is idle, not spinning. */
            double wait = (n + 1) / rate_per_thread - (t - start);
            long ns = (long)(wait * 1e9);
            if (ns < 50000) ns = 50000;
            if (ns > 10000000) ns = 10000000;
            struct timespec nap = {0, ns};
            nanosleep(&nap, NULL);
        }
        for (int k = 0; k < 64 && n < due; k++, n++) {
            pthread_mutex_lock(&m);
            pthread_mutex_unlock(&m);
        }
        t = now();
    }
    done_pairs[i] = n;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: bench_rate THREADS PAIRS_PER_SEC SECS\n");
        return 2;
    }
    int threads = atoi(argv[1]);
    if (threads < 1 || threads > 64) return 2;
    rate_per_thread = atof(argv[2]) / threads;
    secs = atof(argv[3]);
    pthread_t th[64];
    double a = now();
    for (long i = 0; i < threads; i++) pthread_create(&th[i], NULL, run, (void *)i);
    long total = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        total += done_pairs[i];
    }
    printf("pairs=%ld secs=%.3f\n", total, now() - a);
    return 0;
}
