/* Shapes of real software for `cargo xtask bench production`: what contention mode
 * costs programs whose critical sections are not pure spinning.
 *
 *   bench_shapes yield   THREADS LOCKS SECONDS   threads take LOCKS mutexes in turn and
 *                                                call sched_yield() inside each critical
 *                                                section (a classic thread benchmark)
 *   bench_shapes serve   WORKERS SECONDS         a request loop: one producer, a queue on
 *                                                a condition variable, WORKERS that take a
 *                                                request, make a system call for it and
 *                                                count it under a shared stats lock
 *   bench_shapes pingpong SECONDS                two threads hand a futex word back and
 *                                                forth (FUTEX_WAIT / FUTEX_WAKE)
 *   bench_shapes hammer  THREADS SECONDS [CS_NS] one mutex, short critical sections
 *                                                (1 us by default), many threads: as many
 *                                                sleeping waits a second as it makes
 *
 * With --gate, prints "ready PID" and waits for a line on stdin before the timed part
 * (a tracer attaches meanwhile). Prints `ops=N seconds=S ops_per_s=R` by its own clock.
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 64

static atomic_int stop;
static atomic_long ops;
static pthread_barrier_t start;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- yield: critical sections that give up the CPU ---- */
static pthread_mutex_t locks[16];
static int nlocks;

static void *yielder(void *arg) {
    long id = (long)arg;
    long n = 0;
    pthread_barrier_wait(&start);
    for (long i = id; !atomic_load_explicit(&stop, memory_order_relaxed); i++) {
        pthread_mutex_t *m = &locks[i % nlocks];
        pthread_mutex_lock(m);
        sched_yield();
        n++;
        pthread_mutex_unlock(m);
    }
    atomic_fetch_add(&ops, n);
    return NULL;
}

/* ---- serve: a queue, workers idle on a condition variable, a stats lock ---- */
#define QUEUE 64
static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qnonempty = PTHREAD_COND_INITIALIZER;
static pthread_cond_t qnonfull = PTHREAD_COND_INITIALIZER;
static long queue[QUEUE];
static int qhead, qlen;
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;
static long served, bytes_total;

static void *producer(void *arg) {
    (void)arg;
    pthread_barrier_wait(&start);
    for (long r = 0; !atomic_load_explicit(&stop, memory_order_relaxed); r++) {
        pthread_mutex_lock(&qlock);
        while (qlen == QUEUE && !atomic_load(&stop))
            pthread_cond_wait(&qnonfull, &qlock);
        queue[(qhead + qlen) % QUEUE] = r;
        qlen++;
        pthread_cond_signal(&qnonempty);
        pthread_mutex_unlock(&qlock);
    }
    pthread_mutex_lock(&qlock);
    pthread_cond_broadcast(&qnonempty);
    pthread_mutex_unlock(&qlock);
    return NULL;
}

static void *server(void *arg) {
    (void)arg;
    pthread_barrier_wait(&start);
    for (;;) {
        pthread_mutex_lock(&qlock);
        while (qlen == 0 && !atomic_load(&stop))
            pthread_cond_wait(&qnonempty, &qlock);
        if (qlen == 0) {
            pthread_mutex_unlock(&qlock);
            break;
        }
        long r = queue[qhead];
        qhead = (qhead + 1) % QUEUE;
        qlen--;
        pthread_cond_signal(&qnonfull);
        pthread_mutex_unlock(&qlock);
        /* The request's work: a system call. */
        long x = syscall(SYS_getppid) + r;
        pthread_mutex_lock(&stats_lock);
        served++;
        bytes_total += x & 0xff;
        pthread_mutex_unlock(&stats_lock);
    }
    return NULL;
}

/* ---- pingpong: a futex word handed back and forth ---- */
static atomic_int turn;

static void futex_wait(atomic_int *w, int val) {
    syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(atomic_int *w) {
    syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void *ponger(void *arg) {
    int me = (int)(long)arg;
    long n = 0;
    pthread_barrier_wait(&start);
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        int t = atomic_load(&turn);
        if (t != me) {
            if (t == -1)
                break;
            futex_wait(&turn, t);
            continue;
        }
        atomic_store(&turn, 1 - me);
        futex_wake(&turn);
        n++;
    }
    atomic_store(&turn, -1);
    futex_wake(&turn);
    atomic_fetch_add(&ops, n);
    return NULL;
}

/* ---- hammer: one mutex, tiny critical sections ---- */
static pthread_mutex_t hammer_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile long shared;
static long hammer_cs_ns = 1000;

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *hammerer(void *arg) {
    (void)arg;
    long n = 0;
    pthread_barrier_wait(&start);
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        pthread_mutex_lock(&hammer_lock);
        long long end = now_ns() + hammer_cs_ns;
        while (now_ns() < end)
            shared++;
        pthread_mutex_unlock(&hammer_lock);
        n++;
    }
    atomic_fetch_add(&ops, n);
    return NULL;
}

static void usage(void) {
    fprintf(stderr, "usage: bench_shapes [--gate] yield THREADS LOCKS SECONDS | serve WORKERS "
                    "SECONDS | pingpong SECONDS | hammer THREADS SECONDS [CS_NS]\n");
    exit(2);
}

int main(int argc, char **argv) {
    int a = 1, gate = 0;
    if (a < argc && strcmp(argv[a], "--gate") == 0) {
        gate = 1;
        a++;
    }
    if (a >= argc)
        usage();
    const char *shape = argv[a++];
    int threads = 0;
    double seconds = 0;
    void *(*fn)(void *) = NULL;
    if (strcmp(shape, "yield") == 0 && argc - a == 3) {
        threads = atoi(argv[a]);
        nlocks = atoi(argv[a + 1]);
        seconds = atof(argv[a + 2]);
        if (nlocks < 1 || nlocks > 16)
            usage();
        for (int i = 0; i < nlocks; i++)
            pthread_mutex_init(&locks[i], NULL);
        fn = yielder;
    } else if (strcmp(shape, "serve") == 0 && argc - a == 2) {
        threads = atoi(argv[a]);
        seconds = atof(argv[a + 1]);
        fn = server;
    } else if (strcmp(shape, "pingpong") == 0 && argc - a == 1) {
        threads = 2;
        seconds = atof(argv[a]);
        fn = ponger;
    } else if (strcmp(shape, "hammer") == 0 && (argc - a == 2 || argc - a == 3)) {
        threads = atoi(argv[a]);
        seconds = atof(argv[a + 1]);
        if (argc - a == 3)
            hammer_cs_ns = atol(argv[a + 2]);
        fn = hammerer;
    } else {
        usage();
    }
    if (threads < 1 || threads > MAX_THREADS || seconds <= 0)
        usage();
    if (gate) {
        printf("ready %d\n", getpid());
        fflush(stdout);
        char line[64];
        if (!fgets(line, sizeof line, stdin))
            return 1;
    }
    int extra = fn == server ? 1 : 0;
    pthread_barrier_init(&start, NULL, threads + extra + 1);
    pthread_t t[MAX_THREADS + 1];
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, fn, (void *)(long)i);
    if (extra)
        pthread_create(&t[threads], NULL, producer, NULL);
    pthread_barrier_wait(&start);
    double t0 = now_s();
    struct timespec d = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
    nanosleep(&d, NULL);
    atomic_store(&stop, 1);
    double elapsed = now_s() - t0;
    if (fn == server) {
        pthread_mutex_lock(&qlock);
        pthread_cond_broadcast(&qnonempty);
        pthread_cond_broadcast(&qnonfull);
        pthread_mutex_unlock(&qlock);
    }
    for (int i = 0; i < threads + extra; i++)
        pthread_join(t[i], NULL);
    long n = fn == server ? served : atomic_load(&ops);
    printf("ops=%ld seconds=%.3f ops_per_s=%.0f\n", n, elapsed, n / elapsed);
    return 0;
}
