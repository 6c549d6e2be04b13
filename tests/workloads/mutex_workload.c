/* Ground-truth mutex workload for rtm-trace's tests.
 *
 *   mutex_workload [options]
 *     --threads N        worker threads (default 4)
 *     --iters N          acquisitions of the global `shared_lock` per thread (default 200)
 *     --hold-us N        busy time inside each shared critical section (default 200)
 *     --private N        acquisitions of the thread's own `private_locks[i]` (default 1000)
 *     --trylocks N       pthread_mutex_trylock attempts on shared_lock per thread (default 0)
 *     --wait-stdin       print "ready PID" and wait for a line on stdin before starting
 *     --linger-ms N      sleep before exiting (default 0)
 *     --exit-code N      exit status (default 0)
 *     --quiet            print only deterministic totals (for output comparisons)
 *
 * Every thread prints what it did, measured by itself, one line each:
 *   truth tid=T shared=N private=N try_ok=N try_busy=N hold_ns=N wait_ns=N edge_delay_ns=N
 *         busy=N
 * (hold_ns: time holding the shared lock, taken by pthread_mutex_lock or _trylock;
 * wait_ns: time inside pthread_mutex_lock on the shared lock; busy: how many of those
 * calls found the lock held, its word read just before the call; edge_delay_ns: time the
 * thread spent runnable but not running (its schedstat run_delay) around its lock,
 * trylock and unlock calls on the shared lock, where a tracer's probes and its own clock
 * reads are apart: a preemption there is in one's times and not the other's)
 * Threads are created after the stdin gate, so an attached tracer sees them start.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 64

pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t private_locks[MAX_THREADS];

static int n_threads = 4, iters = 200, hold_us = 200, n_private = 1000, n_try = 0;

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* This thread's time spent runnable but not running so far (/proc's schedstat), or 0
 * where the kernel does not keep it. */
static long long run_delay_ns(int fd) {
    char buf[96];
    ssize_t n = fd < 0 ? -1 : pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    unsigned long long run, delay;
    return sscanf(buf, "%llu %llu", &run, &delay) == 2 ? (long long)delay : 0;
}

static void spin_ns(long long ns) {
    long long end = now_ns() + ns;
    while (now_ns() < end) {
    }
}

struct result {
    long tid;
    long shared, priv, try_ok, try_busy, busy;
    long long hold_ns, wait_ns, edge_delay_ns;
};

static struct result results[MAX_THREADS];

static void *run(void *arg) {
    long i = (long)arg;
    struct result *r = &results[i];
    char name[16];
    snprintf(name, sizeof name, "worker-%ld", i);
    pthread_setname_np(pthread_self(), name);
    r->tid = syscall(SYS_gettid);
    int sched = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    for (int k = 0; k < iters; k++) {
        /* Run-queue delays are read outside each pair of clock read and call. */
        long long d0 = run_delay_ns(sched);
        long long w0 = now_ns();
        r->busy += __atomic_load_n(&shared_lock.__data.__lock, __ATOMIC_RELAXED) != 0;
        pthread_mutex_lock(&shared_lock);
        long long t0 = now_ns();
        long long d1 = run_delay_ns(sched);
        r->wait_ns += t0 - w0;
        spin_ns(hold_us * 1000LL);
        r->shared++;
        long long d2 = run_delay_ns(sched);
        r->hold_ns += now_ns() - t0;
        pthread_mutex_unlock(&shared_lock);
        r->edge_delay_ns += d1 - d0 + run_delay_ns(sched) - d2;
        spin_ns(hold_us * 250LL); /* outside the lock, so others get a turn */
    }
    for (int k = 0; k < n_try; k++) {
        long long d0 = run_delay_ns(sched);
        if (pthread_mutex_trylock(&shared_lock) == 0) {
            long long t0 = now_ns();
            long long d1 = run_delay_ns(sched);
            r->try_ok++;
            spin_ns(hold_us * 1000LL);
            long long d2 = run_delay_ns(sched);
            r->hold_ns += now_ns() - t0;
            pthread_mutex_unlock(&shared_lock);
            r->edge_delay_ns += d1 - d0 + run_delay_ns(sched) - d2;
        } else {
            r->try_busy++;
        }
        spin_ns(hold_us * 100LL);
    }
    for (int k = 0; k < n_private; k++) {
        pthread_mutex_lock(&private_locks[i]);
        r->priv++;
        pthread_mutex_unlock(&private_locks[i]);
    }
    if (sched >= 0)
        close(sched);
    return NULL;
}

int main(int argc, char **argv) {
    int wait_stdin = 0, exit_code = 0, linger_ms = 0, quiet = 0;
    for (int a = 1; a < argc; a++) {
        const char *o = argv[a];
        const char *v = a + 1 < argc ? argv[a + 1] : "0";
        if (!strcmp(o, "--threads")) n_threads = atoi(v), a++;
        else if (!strcmp(o, "--iters")) iters = atoi(v), a++;
        else if (!strcmp(o, "--hold-us")) hold_us = atoi(v), a++;
        else if (!strcmp(o, "--private")) n_private = atoi(v), a++;
        else if (!strcmp(o, "--trylocks")) n_try = atoi(v), a++;
        else if (!strcmp(o, "--linger-ms")) linger_ms = atoi(v), a++;
        else if (!strcmp(o, "--exit-code")) exit_code = atoi(v), a++;
        else if (!strcmp(o, "--wait-stdin")) wait_stdin = 1;
        else if (!strcmp(o, "--quiet")) quiet = 1;
        else {
            fprintf(stderr, "mutex_workload: unknown option %s\n", o);
            return 2;
        }
    }
    if (n_threads < 1 || n_threads > MAX_THREADS) {
        fprintf(stderr, "mutex_workload: --threads must be 1..%d\n", MAX_THREADS);
        return 2;
    }
    for (int i = 0; i < MAX_THREADS; i++) pthread_mutex_init(&private_locks[i], NULL);
    if (wait_stdin) {
        printf("ready %d\n", getpid());
        fflush(stdout);
        char line[64];
        if (!fgets(line, sizeof line, stdin)) return 3;
    }
    pthread_t th[MAX_THREADS];
    for (long i = 0; i < n_threads; i++) pthread_create(&th[i], NULL, run, (void *)i);
    for (int i = 0; i < n_threads; i++) pthread_join(th[i], NULL);
    long shared = 0, priv = 0;
    for (int i = 0; i < n_threads; i++) {
        struct result *r = &results[i];
        shared += r->shared;
        priv += r->priv;
        if (quiet) continue;
        printf("truth tid=%ld shared=%ld private=%ld try_ok=%ld try_busy=%ld hold_ns=%lld "
               "wait_ns=%lld edge_delay_ns=%lld busy=%ld\n",
               r->tid, r->shared, r->priv, r->try_ok, r->try_busy, r->hold_ns, r->wait_ns,
               r->edge_delay_ns, r->busy);
    }
    if (quiet) printf("done threads=%d shared=%ld private=%ld\n", n_threads, shared, priv);
    fflush(stdout);
    if (linger_ms) usleep(linger_ms * 1000);
    return exit_code;
}
