/* Ground-truth workloads for every pthread primitive rtm-trace follows.
 *
 *   sync_workload barrier  THREADS ROUNDS UNIT_US   thread i sleeps (i+1)*UNIT_US per round
 *   sync_workload cond     WAITS WAIT_MS TIMEOUT_MS signaler wakes the waiter after WAIT_MS
 *                          (then prints, by CLOCK_MONOTONIC, when each pthread_cond_wait
 *                          call began, `truth cond call=K t0_ns=T`, and the span of each
 *                          pthread_cond_signal, `truth cond signal=K before_ns=T after_ns=T`:
 *                          a wait's wake falls in its signal's span)
 *   sync_workload rwlock   READERS WRITERS ITERS HOLD_US
 *   sync_workload sem      POSTS GAP_US
 *   sync_workload spin     THREADS ITERS HOLD_US
 *   sync_workload tree [LINGER_MS]                   main -> a -> (b, c), joins all, then
 *                                                    main sleeps LINGER_MS before it exits
 *   sync_workload forks N                            forks N children one after another,
 *                                                    each exiting at once
 *   sync_workload shared ITERS HOLD_US               a forked child and its parent take
 *                                                    turns on a process-shared mutex in a
 *                                                    shared anonymous mapping (/dev/zero)
 *
 * Each prints `truth key=value ...` lines the tests compare with rtm-trace's output.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long tid(void) { return syscall(SYS_gettid); }

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void spin_ns(long long ns) {
    long long end = now_ns() + ns;
    while (now_ns() < end) {
    }
}

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static void name(const char *fmt, long i) {
    char n[16];
    snprintf(n, sizeof n, fmt, i);
    pthread_setname_np(pthread_self(), n);
}

/* ---- barrier ---- */
static pthread_barrier_t round_barrier;
static int b_rounds;
static long b_unit_us;
/* Arrival times measured by the threads themselves: the ground truth for the spread. */
#define MAX_ROUNDS 256
static long long b_arrive[MAX_ROUNDS][64];
/* Whether the thread was preempted between its clock reading and the barrier's return
 * (if before its entry, a tracer's entry probe fired later than the thread's clock says
 * it arrived; after it, as when the waiters it woke preempt the last arriver, not). */
static int b_preempted[MAX_ROUNDS][64];
/* When the thread got back from the barrier. The last arriver entered it before it
 * released the others, so their earliest return bounds how late that entry was. */
static long long b_return[MAX_ROUNDS][64];

static long involuntary_switches(void) {
    struct rusage u;
    return getrusage(RUSAGE_THREAD, &u) == 0 ? u.ru_nivcsw : -1;
}

static void *barrier_thread(void *arg) {
    long i = (long)arg;
    name("bar-%ld", i);
    printf("truth barrier index=%ld tid=%ld\n", i, tid());
    for (int r = 0; r < b_rounds; r++) {
        sleep_us((i + 1) * b_unit_us);
        long before = involuntary_switches();
        if (r < MAX_ROUNDS) b_arrive[r][i] = now_ns();
        pthread_barrier_wait(&round_barrier);
        if (r < MAX_ROUNDS) b_return[r][i] = now_ns();
        if (r < MAX_ROUNDS) b_preempted[r][i] = involuntary_switches() != before;
    }
    return NULL;
}

/* ---- cond ---- */
static pthread_mutex_t cond_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ready_cond = PTHREAD_COND_INITIALIZER;
static int c_generation;
static int c_waits;
static long c_wait_ms;
#define MAX_SIGNALS 64
static long long c_signal_span[MAX_SIGNALS][2];

static void *signaler(void *arg) {
    (void)arg;
    name("signaler", 0);
    printf("truth cond signaler=%ld\n", tid());
    for (int k = 0; k < c_waits; k++) {
        sleep_us(c_wait_ms * 1000);
        pthread_mutex_lock(&cond_lock);
        c_generation++;
        long long before = now_ns();
        pthread_cond_signal(&ready_cond);
        if (k < MAX_SIGNALS) {
            c_signal_span[k][0] = before;
            c_signal_span[k][1] = now_ns();
        }
        pthread_mutex_unlock(&cond_lock);
    }
    return NULL;
}

/* ---- rwlock ---- */
static pthread_rwlock_t table_lock = PTHREAD_RWLOCK_INITIALIZER;
static int rw_iters;
static long rw_hold_us;

static void *reader(void *arg) {
    name("reader-%ld", (long)arg);
    printf("truth rwlock role=read tid=%ld iters=%d\n", tid(), rw_iters);
    for (int k = 0; k < rw_iters; k++) {
        pthread_rwlock_rdlock(&table_lock);
        spin_ns(rw_hold_us * 1000LL);
        pthread_rwlock_unlock(&table_lock);
        spin_ns(rw_hold_us * 100LL);
    }
    return NULL;
}

static void *writer(void *arg) {
    name("writer-%ld", (long)arg);
    printf("truth rwlock role=write tid=%ld iters=%d\n", tid(), rw_iters);
    for (int k = 0; k < rw_iters; k++) {
        pthread_rwlock_wrlock(&table_lock);
        spin_ns(rw_hold_us * 1000LL);
        pthread_rwlock_unlock(&table_lock);
        spin_ns(rw_hold_us * 100LL);
    }
    return NULL;
}

/* ---- sem ---- */
static sem_t items;
static int s_posts;
static long s_gap_us;

static void *producer(void *arg) {
    (void)arg;
    name("producer", 0);
    printf("truth sem producer=%ld\n", tid());
    for (int k = 0; k < s_posts; k++) {
        sleep_us(s_gap_us);
        sem_post(&items);
    }
    return NULL;
}

/* ---- spin ---- */
static pthread_spinlock_t counter_spin;
static int sp_iters;
static long sp_hold_us;

static void *spinner(void *arg) {
    name("spinner-%ld", (long)arg);
    printf("truth spin tid=%ld iters=%d\n", tid(), sp_iters);
    for (int k = 0; k < sp_iters; k++) {
        pthread_spin_lock(&counter_spin);
        spin_ns(sp_hold_us * 1000LL);
        pthread_spin_unlock(&counter_spin);
        spin_ns(sp_hold_us * 500LL);
    }
    return NULL;
}

/* ---- tree ---- */
static void *leaf(void *arg) {
    name("leaf-%ld", (long)arg);
    printf("truth tree node=leaf%ld tid=%ld\n", (long)arg, tid());
    sleep_us(20000 * (long)arg);
    return NULL;
}

static void *middle(void *arg) {
    (void)arg;
    name("middle", 0);
    printf("truth tree node=middle tid=%ld\n", tid());
    pthread_t b, c;
    pthread_create(&b, NULL, leaf, (void *)1);
    pthread_create(&c, NULL, leaf, (void *)2);
    pthread_join(b, NULL);
    pthread_join(c, NULL);
    return NULL;
}

static int usage(void) {
    fprintf(stderr, "usage: sync_workload barrier|cond|rwlock|sem|spin|tree ARGS (see source)\n");
    return 2;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2)
        return usage();
    const char *mode = argv[1];
    long a = argc > 2 ? atol(argv[2]) : 0, b = argc > 3 ? atol(argv[3]) : 0,
         c = argc > 4 ? atol(argv[4]) : 0, d = argc > 5 ? atol(argv[5]) : 0;
    pthread_t th[64];
    if (!strcmp(mode, "barrier") && argc == 5 && a > 0 && a <= 64) {
        b_rounds = b;
        b_unit_us = c;
        pthread_barrier_init(&round_barrier, NULL, a);
        for (long i = 0; i < a; i++)
            pthread_create(&th[i], NULL, barrier_thread, (void *)i);
        for (long i = 0; i < a; i++)
            pthread_join(th[i], NULL);
        for (int r = 0; r < b && r < MAX_ROUNDS; r++) {
            long long lo = b_arrive[r][0], hi = lo, next = 0;
            long last = 0;
            for (long i = 1; i < a; i++) {
                if (b_arrive[r][i] < lo) lo = b_arrive[r][i];
                if (b_arrive[r][i] > hi) {
                    hi = b_arrive[r][i];
                    last = i;
                }
            }
            /* The runner-up's arrival: how clear the last arriver was. */
            for (long i = 0; i < a; i++)
                if (i != last && b_arrive[r][i] > next) next = b_arrive[r][i];
            /* preempted: threads switched out involuntarily between their clock reading
             * and their return; waiters_preempted: those of them that waited (a thread
             * delayed before its entry, so that its truth is late). release_ns: from the
             * last arriver's clock reading to the waiters' first return, the longest its
             * entry can have come after that reading. */
            int preempted = 0, waiters_preempted = 0;
            long long released = 0;
            for (long i = 0; i < a; i++) {
                preempted += b_preempted[r][i];
                if (i == last) continue;
                waiters_preempted += b_preempted[r][i];
                if (!released || b_return[r][i] < released) released = b_return[r][i];
            }
            printf("truth barrier round=%d spread_ns=%lld last=%ld margin_ns=%lld preempted=%d "
                   "waiters_preempted=%d release_ns=%lld\n",
                   r, hi - lo, last, a > 1 ? hi - next : 0, preempted, waiters_preempted,
                   a > 1 ? released - hi : 0);
        }
    } else if (!strcmp(mode, "cond") && argc == 5) {
        c_waits = a;
        c_wait_ms = b;
        printf("truth cond waiter=%ld\n", tid());
        pthread_create(&th[0], NULL, signaler, NULL);
        pthread_mutex_lock(&cond_lock);
        /* Time inside the waits, by this thread's own clock, and when each began. */
        long long in_waits = 0, began[MAX_SIGNALS + 1];
        int calls = 0;
        for (int k = 0; k < c_waits; k++) {
            int seen = c_generation;
            while (c_generation == seen) {
                long long t0 = now_ns();
                if (calls < MAX_SIGNALS)
                    began[calls++] = t0;
                pthread_cond_wait(&ready_cond, &cond_lock);
                in_waits += now_ns() - t0;
            }
        }
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_nsec += c * 1000000L;
        dl.tv_sec += dl.tv_nsec / 1000000000L;
        dl.tv_nsec %= 1000000000L;
        long long t0 = now_ns();
        int r = pthread_cond_timedwait(&ready_cond, &cond_lock, &dl);
        in_waits += now_ns() - t0;
        printf("truth cond timedwait=%s\n", r ? "timeout" : "woken");
        printf("truth cond waited_ns=%lld\n", in_waits);
        pthread_mutex_unlock(&cond_lock);
        pthread_join(th[0], NULL);
        for (int k = 0; k < calls; k++)
            printf("truth cond call=%d t0_ns=%lld\n", k, began[k]);
        for (int k = 0; k < c_waits && k < MAX_SIGNALS; k++)
            printf("truth cond signal=%d before_ns=%lld after_ns=%lld\n", k,
                   c_signal_span[k][0], c_signal_span[k][1]);
    } else if (!strcmp(mode, "rwlock") && argc == 6 && a + b <= 64) {
        rw_iters = c;
        rw_hold_us = d;
        for (long i = 0; i < a; i++)
            pthread_create(&th[i], NULL, reader, (void *)i);
        for (long i = 0; i < b; i++)
            pthread_create(&th[a + i], NULL, writer, (void *)i);
        for (long i = 0; i < a + b; i++)
            pthread_join(th[i], NULL);
    } else if (!strcmp(mode, "sem") && argc == 4) {
        s_posts = a;
        s_gap_us = b;
        sem_init(&items, 0, 0);
        printf("truth sem consumer=%ld\n", tid());
        int busy = sem_trywait(&items) != 0;
        printf("truth sem trywait_failed=%d\n", busy);
        pthread_create(&th[0], NULL, producer, NULL);
        for (int k = 0; k < s_posts; k++)
            sem_wait(&items);
        pthread_join(th[0], NULL);
    } else if (!strcmp(mode, "spin") && argc == 5 && a <= 64) {
        sp_iters = b;
        sp_hold_us = c;
        pthread_spin_init(&counter_spin, PTHREAD_PROCESS_PRIVATE);
        for (long i = 0; i < a; i++)
            pthread_create(&th[i], NULL, spinner, (void *)i);
        for (long i = 0; i < a; i++)
            pthread_join(th[i], NULL);
    } else if (!strcmp(mode, "shared") && argc == 4) {
        pthread_mutex_t *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            return 1;
        pthread_mutexattr_t at;
        pthread_mutexattr_init(&at);
        pthread_mutexattr_setpshared(&at, PTHREAD_PROCESS_SHARED);
        pthread_mutex_init(m, &at);
        fflush(stdout);
        pid_t child = fork();
        for (long i = 0; i < a; i++) {
            pthread_mutex_lock(m);
            spin_ns(b * 1000LL);
            pthread_mutex_unlock(m);
        }
        if (child == 0)
            _exit(0);
        int status = 0;
        waitpid(child, &status, 0);
        printf("truth shared child_status=%d\n", status);
    } else if (!strcmp(mode, "forks") && argc == 3) {
        fflush(stdout);
        long ok = 0;
        for (long i = 0; i < a; i++) {
            pid_t c = fork();
            if (c == 0)
                _exit(0);
            int status = 1;
            if (c > 0 && waitpid(c, &status, 0) == c && status == 0)
                ok++;
        }
        printf("truth forks ok=%ld\n", ok);
    } else if (!strcmp(mode, "tree")) {
        printf("truth tree node=main tid=%ld\n", tid());
        pthread_create(&th[0], NULL, middle, NULL);
        pthread_join(th[0], NULL);
        printf("truth tree joined\n");
        fflush(stdout);
        sleep_us(a * 1000);
    } else {
        return usage();
    }
    printf("done %s\n", mode);
    return 0;
}
