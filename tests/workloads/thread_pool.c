/* A thread pool idle on a condition variable beside a contended mutex: the shape of a
 * server. The pool's workers sleep most of the run waiting for work, a housekeeping
 * thread wakes from timed waits, the main thread sits in pthread_join; the lock that
 * costs anything is the stats lock, taken by every request.
 *
 *   thread_pool MILLISECONDS [BEFORE_JOIN_MS]
 *
 * Main starts the threads, sleeps BEFORE_JOIN_MS (default 0: a tracer that attaches
 * late then sees its join begin), and joins the producer for the rest of the run.
 * Everything is on the heap (no symbol names the words: only what the waits are for
 * tells them apart). Prints `truth stats_lock=ADDR` and, at the end,
 * `truth requests=N jobs=M ticks=K`.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct pool {
    pthread_mutex_t lock;
    pthread_cond_t work;
    int queued, stop;
    long jobs;
};

struct stats {
    pthread_mutex_t lock;
    long requests;
};

struct housekeeping {
    pthread_mutex_t lock;
    pthread_cond_t tick;
    int stop;
    long ticks;
    /* Timed waits called with their deadline (nearly) passed: the thread was preempted
       for ~100 ms after reading the clock (a loaded machine). Such a wait may return
       without sleeping, which contention mode does not count. */
    long late;
};

static struct pool *pool;
static struct stats *stats;
static struct housekeeping *hk;
static volatile int running = 1;
static volatile long sink;

static long now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000L + t.tv_nsec / 1000;
}

static void spin_us(long us) {
    long t0 = now_us();
    while (now_us() - t0 < us)
        sink++;
}

/* A pool worker: idle on the condition variable until a job comes. */
static void *pool_worker(void *arg) {
    (void)arg;
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        while (!pool->queued && !pool->stop)
            pthread_cond_wait(&pool->work, &pool->lock);
        if (pool->stop)
            break;
        pool->queued--;
        pthread_mutex_unlock(&pool->lock);
        spin_us(200);
        pthread_mutex_lock(&pool->lock);
        pool->jobs++;
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

/* A request handler: every request updates the shared stats under their lock. */
static void *handler(void *arg) {
    (void)arg;
    while (running) {
        pthread_mutex_lock(&stats->lock);
        stats->requests++;
        spin_us(30);
        pthread_mutex_unlock(&stats->lock);
        spin_us(10);
    }
    return NULL;
}

/* Housekeeping: wakes every 100 ms from a timed wait nobody signals. */
static void *housekeeper(void *arg) {
    (void)arg;
    pthread_mutex_lock(&hk->lock);
    while (!hk->stop) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += 100 * 1000000L;
        if (t.tv_nsec >= 1000000000L) {
            t.tv_sec++;
            t.tv_nsec -= 1000000000L;
        }
        struct timespec before;
        clock_gettime(CLOCK_REALTIME, &before);
        long left_ns = (t.tv_sec - before.tv_sec) * 1000000000L + (t.tv_nsec - before.tv_nsec);
        if (left_ns < 1000000L)
            hk->late++;
        pthread_cond_timedwait(&hk->tick, &hk->lock, &t);
        hk->ticks++;
    }
    pthread_mutex_unlock(&hk->lock);
    return NULL;
}

/* Queues a job every 20 ms for the run's length. */
static void *produce(void *arg) {
    long end = now_us() + *(long *)arg * 1000;
    while (now_us() < end) {
        struct timespec d = {0, 20 * 1000000L};
        nanosleep(&d, NULL);
        pthread_mutex_lock(&pool->lock);
        pool->queued++;
        pthread_cond_signal(&pool->work);
        pthread_mutex_unlock(&pool->lock);
    }
    return NULL;
}

int main(int argc, char **argv) {
    long ms = argc > 1 ? atol(argv[1]) : 2000;
    pool = calloc(1, sizeof *pool);
    stats = calloc(1, sizeof *stats);
    hk = calloc(1, sizeof *hk);
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->work, NULL);
    pthread_mutex_init(&stats->lock, NULL);
    pthread_mutex_init(&hk->lock, NULL);
    pthread_cond_init(&hk->tick, NULL);
    printf("truth stats_lock=%p\n", (void *)&stats->lock);
    fflush(stdout);
    enum { WORKERS = 4, HANDLERS = 3 };
    pthread_t w[WORKERS], h[HANDLERS], k;
    for (int i = 0; i < WORKERS; i++)
        pthread_create(&w[i], NULL, pool_worker, NULL);
    for (int i = 0; i < HANDLERS; i++)
        pthread_create(&h[i], NULL, handler, NULL);
    pthread_create(&k, NULL, housekeeper, NULL);
    /* A job every 20 ms, from a thread of its own; main waits in pthread_join. */
    pthread_t producer;
    pthread_create(&producer, NULL, produce, &ms);
    long before_join = argc > 2 ? atol(argv[2]) : 0;
    struct timespec d = {before_join / 1000, before_join % 1000 * 1000000L};
    nanosleep(&d, NULL);
    printf("truth joining=1\n");
    fflush(stdout);
    pthread_join(producer, NULL);
    running = 0;
    pthread_mutex_lock(&pool->lock);
    pool->stop = 1;
    pthread_cond_broadcast(&pool->work);
    pthread_mutex_unlock(&pool->lock);
    pthread_mutex_lock(&hk->lock);
    hk->stop = 1;
    pthread_mutex_unlock(&hk->lock);
    for (int i = 0; i < HANDLERS; i++)
        pthread_join(h[i], NULL);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(w[i], NULL);
    pthread_join(k, NULL);
    printf("truth requests=%ld jobs=%ld ticks=%ld late_ticks=%ld\n", stats->requests, pool->jobs,
           hk->ticks, hk->late);
    return 0;
}
