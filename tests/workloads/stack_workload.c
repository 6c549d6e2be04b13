// Threads that contend on locks through known call chains, for the call-stack tests:
//   worker -> lock_a -> lock_b -> lock_c -> pthread_mutex_lock(&chain_lock)
//   worker -> unlock_a -> unlock_b -> unlock_c -> pthread_mutex_unlock(&chain_lock)
// a mutex on the heap taken in cache_get() (named by that code in the report), and the
// lock inside a stdio FILE, taken by fputs() called from log_line(); at the end the
// main thread waits on a condition variable that nobody signals, in wait_timeout(), until
// its 30 ms timeout.
// Every function on the chains is noinline and does work after its call, so neither
// inlining nor tail calls remove a frame, with or without frame pointers.
//
// usage: stack_workload THREADS ITERATIONS HOLD_US
// prints: chain_lock=ADDR cache_lock=ADDR stdio_lock=ADDR threads=N iterations=N
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

pthread_mutex_t chain_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t idle_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t idle_cond = PTHREAD_COND_INITIALIZER;

struct cache {
    long hits;
    pthread_mutex_t lock;
};

static struct cache *cache;
static FILE *out;
static char line[2048];
static volatile long depth;
static int iterations;
static long hold_ns;

static void spin(long ns) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do {
        clock_gettime(CLOCK_MONOTONIC, &b);
    } while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < ns);
}

// Inlined into lock_c: its frame shows both.
static inline __attribute__((always_inline)) void take_lock(pthread_mutex_t *m) {
    pthread_mutex_lock(m);
    depth++;
}

NOINLINE void lock_c(pthread_mutex_t *m) {
    take_lock(m);
    depth++;
}

NOINLINE void lock_b(pthread_mutex_t *m) {
    lock_c(m);
    depth++;
}

NOINLINE void lock_a(pthread_mutex_t *m) {
    lock_b(m);
    depth++;
}

NOINLINE void unlock_c(pthread_mutex_t *m) {
    pthread_mutex_unlock(m);
    depth--;
}

NOINLINE void unlock_b(pthread_mutex_t *m) {
    unlock_c(m);
    depth--;
}

NOINLINE void unlock_a(pthread_mutex_t *m) {
    unlock_b(m);
    depth--;
}

NOINLINE long cache_get(struct cache *c) {
    pthread_mutex_lock(&c->lock);
    long h = ++c->hits;
    spin(hold_ns);
    pthread_mutex_unlock(&c->lock);
    return h;
}

NOINLINE void log_line(FILE *f) {
    for (int i = 0; i < 32; i++) {
        fputs(line, f);
        depth++;
    }
}

NOINLINE int wait_timeout(long ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&idle_lock);
    int r = pthread_cond_timedwait(&idle_cond, &idle_lock, &ts);
    pthread_mutex_unlock(&idle_lock);
    depth++;
    return r;
}

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < iterations; i++) {
        lock_a(&chain_lock);
        spin(hold_ns);
        unlock_a(&chain_lock);
        cache_get(cache);
        log_line(out);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    iterations = argc > 2 ? atoi(argv[2]) : 2000;
    hold_ns = (argc > 3 ? atol(argv[3]) : 20) * 1000;
    if (threads < 1 || threads > 64 || iterations < 1) {
        fprintf(stderr, "usage: stack_workload THREADS ITERATIONS HOLD_US\n");
        return 2;
    }
    cache = calloc(1, sizeof *cache);
    pthread_mutex_init(&cache->lock, NULL);
    out = fopen("/dev/null", "w");
    if (!out)
        return 1;
    setvbuf(out, NULL, _IOFBF, 1 << 16);
    for (size_t i = 0; i < sizeof line - 2; i++)
        line[i] = 'a' + i % 26;
    line[sizeof line - 2] = '\n';
    // The futex word of a FILE's lock is the first word its _lock points to.
    printf("chain_lock=%p cache_lock=%p stdio_lock=%p threads=%d iterations=%d\n",
           (void *)&chain_lock, (void *)&cache->lock, (void *)out->_lock, threads, iterations);
    fflush(stdout);
    pthread_t t[64];
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    int r = wait_timeout(30);
    printf("done hits=%ld timedwait=%s\n", cache->hits, r == ETIMEDOUT ? "timeout" : "other");
    return 0;
}
