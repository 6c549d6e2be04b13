// Threads that contend on one mutex through static functions named with one letter, as
// C allows: w (the thread function) -> d -> pthread_mutex_lock, and w -> i ->
// pthread_mutex_unlock. Those letters are also the codes C++ name mangling gives types
// (wchar_t, double, int): a name read as mangled turns into a type's.
// The functions are noinline and do work after their calls, so every frame stays; the
// mutex is passed to them, so no copy specialized for it renames them.
//
// usage: short_names THREADS ITERATIONS HOLD_US
// prints: lock=ADDR threads=N iterations=N
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
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

static NOINLINE void d(pthread_mutex_t *m) {
    pthread_mutex_lock(m);
    depth++;
}

static NOINLINE void i(pthread_mutex_t *m) {
    pthread_mutex_unlock(m);
    depth--;
}

static void *w(void *arg) {
    pthread_mutex_t *m = arg;
    for (int n = 0; n < iterations; n++) {
        d(m);
        spin(hold_ns);
        i(m);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    iterations = argc > 2 ? atoi(argv[2]) : 2000;
    hold_ns = (argc > 3 ? atol(argv[3]) : 20) * 1000;
    if (threads < 1 || threads > 64 || iterations < 1) {
        fprintf(stderr, "usage: short_names THREADS ITERATIONS HOLD_US\n");
        return 2;
    }
    printf("lock=%p threads=%d iterations=%d\n", (void *)&lock, threads, iterations);
    fflush(stdout);
    pthread_t t[64];
    for (int n = 0; n < threads; n++)
        pthread_create(&t[n], NULL, w, &lock);
    for (int n = 0; n < threads; n++)
        pthread_join(t[n], NULL);
    return 0;
}
