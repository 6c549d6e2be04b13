/* Lock/unlock microbenchmark for `cargo xtask bench probes`.
 *
 *   bench_lock THREADS PAIRS CS_NS
 *
 * THREADS threads each do PAIRS lock+unlock pairs on one shared mutex, spinning CS_NS
 * inside the critical section (0: empty) and as long again outside it. With one thread
 * the lock is never contended. Prints `ns_per_pair=N` (wall time of the whole run divided
 * by the pairs of one thread) and nothing else.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long pairs, cs_ns;
static pthread_barrier_t start;
static volatile long sink;

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void work(long ns) {
    if (ns <= 0)
        return;
    long long end = now_ns() + ns;
    while (now_ns() < end)
        sink++;
}

static void *run(void *arg) {
    (void)arg;
    pthread_barrier_wait(&start);
    for (long i = 0; i < pairs; i++) {
        pthread_mutex_lock(&lock);
        work(cs_ns);
        pthread_mutex_unlock(&lock);
        work(cs_ns);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: bench_lock THREADS PAIRS CS_NS\n");
        return 2;
    }
    int threads = atoi(argv[1]);
    pairs = atol(argv[2]);
    cs_ns = atol(argv[3]);
    if (threads < 1 || threads > 64 || pairs < 1)
        return 2;
    pthread_t th[64];
    pthread_barrier_init(&start, NULL, threads + 1);
    for (int i = 0; i < threads; i++)
        pthread_create(&th[i], NULL, run, NULL);
    pthread_barrier_wait(&start);
    long long t0 = now_ns();
    for (int i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    long long t1 = now_ns();
    printf("ns_per_pair=%.1f\n", (double)(t1 - t0) / (double)pairs);
    return 0;
}
