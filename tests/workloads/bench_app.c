/* A realistic multi-threaded program for `cargo xtask bench app`: a bounded job queue
 * (mutex + two condition variables) feeding a pool of workers that do real work (sort
 * a block of pseudo-random numbers, hash it) and merge their results into a shared
 * table under a second mutex. Moderate locking: a few lock operations per ~50 us job.
 *
 *   bench_app THREADS JOBS
 *
 * Prints `checksum=N` (the same whatever the scheduling) and `elapsed_ns=N`.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define QUEUE 64
#define BLOCK 1024
#define BUCKETS 256

static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER;
static pthread_cond_t not_full = PTHREAD_COND_INITIALIZER;
static long queue[QUEUE];
static int qhead, qlen, done;

static pthread_mutex_t rlock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t table[BUCKETS];

static int cmp(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static uint64_t job(long seed) {
    uint32_t v[BLOCK];
    uint64_t s = (uint64_t)seed * 0x9E3779B97F4A7C15ull + 1;
    for (int i = 0; i < BLOCK; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        v[i] = (uint32_t)s;
    }
    qsort(v, BLOCK, sizeof v[0], cmp);
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < BLOCK; i++) h = (h ^ v[i]) * 1099511628211ull;
    return h;
}

static void *worker(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&qlock);
        while (qlen == 0 && !done) pthread_cond_wait(&not_empty, &qlock);
        if (qlen == 0 && done) {
            pthread_mutex_unlock(&qlock);
            return NULL;
        }
        long j = queue[qhead];
        qhead = (qhead + 1) % QUEUE;
        qlen--;
        pthread_cond_signal(&not_full);
        pthread_mutex_unlock(&qlock);
        uint64_t h = job(j);
        pthread_mutex_lock(&rlock);
        table[h % BUCKETS] += h >> 32;
        pthread_mutex_unlock(&rlock);
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: bench_app THREADS JOBS\n");
        return 2;
    }
    int threads = atoi(argv[1]);
    long jobs = atol(argv[2]);
    pthread_t th[64];
    if (threads < 1 || threads > 64) return 2;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < threads; i++) pthread_create(&th[i], NULL, worker, NULL);
    for (long j = 0; j < jobs; j++) {
        pthread_mutex_lock(&qlock);
        while (qlen == QUEUE) pthread_cond_wait(&not_full, &qlock);
        queue[(qhead + qlen) % QUEUE] = j;
        qlen++;
        pthread_cond_signal(&not_empty);
        pthread_mutex_unlock(&qlock);
    }
    pthread_mutex_lock(&qlock);
    done = 1;
    pthread_cond_broadcast(&not_empty);
    pthread_mutex_unlock(&qlock);
    for (int i = 0; i < threads; i++) pthread_join(th[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    uint64_t sum = 0;
    for (int i = 0; i < BUCKETS; i++) sum += table[i] * (i + 1);
    printf("checksum=%llu\n", (unsigned long long)sum);
    printf("elapsed_ns=%lld\n", (b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec));
    return 0;
}
