// Functions of known duration and call counts, for the --func tests.
//
// usage: func_workload THREADS ROUNDS DELAY_MS [PIN] [LONG_MS] [SAME_MOD] [LINGER_MS]
//   Each thread waits DELAY_MS (tracers attach then; -1: until a line on stdin), then
//   ROUNDS times: work_1ms(),
//   and every fifth round work_10ms(); descend(3) once per round (a static, recursive
//   function: 4 calls, 3 of them recursive, 200 us busy at the bottom); lib_step(300)
//   in libfuncs.so once per round. With PIN=1 thread i runs on CPU i % CPUs only.
//   With LONG_MS > 0 one more thread sits in long_call() that long after DELAY_MS (still
//   running when a shorter trace ends); with LONG_MS -1, until a second line on stdin,
//   and the call prints `long_call in` once it is in (its entry probes have fired).
//   With SAME_MOD > 0 every worker's tid is the
//   first's modulo SAME_MOD (threads with other tids are started and let go until one
//   fits), and they start their calls together: they share one slot of a tracer's
//   per-thread table of that size at once. With LINGER_MS > 0 each worker sleeps that
//   long after its truth line before it exits.
// prints: `truth tid=T index=I started=1` as each thread starts, then per thread its
//   counts and each function's own total time:
//   truth tid=T index=I cpu=C (1000000: not pinned) work_1ms=N work_1ms_ns=NS
//   work_10ms=... descend=... descend_ns=... (outermost calls) lib_step=... lib_step_ns=...
//   and each function's time around its calls, read by the caller: work_1ms_around_ns=...
//   (a tracer's entry and return probes fire between the two clocks: inside <= traced
//   <= around, whatever the machine's load); and, after a long_call that waited for
//   stdin, `truth long_call_before_ns=T long_call_inside_ns=T`: CLOCK_MONOTONIC read by
//   the caller just before it and by the call as it began (its entry probe fired
//   between the two)
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
/* cpu= of a thread not pinned. */
#define NOT_PINNED 1000000L

long long lib_step(long us);

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void busy_us(long us) {
    long long end = now_ns() + us * 1000;
    volatile long spin = 0;
    while (now_ns() < end)
        spin++;
}

struct counts {
    long work_1ms, work_10ms, descend, lib;
    long long work_1ms_ns, work_10ms_ns, descend_ns, lib_ns;
    long long work_1ms_around, work_10ms_around, descend_around, lib_around;
};

// Each returns how long it ran by its own clock.
NOINLINE long long work_1ms(void) {
    long long s = now_ns();
    busy_us(1000);
    return now_ns() - s;
}

NOINLINE long long work_10ms(void) {
    long long s = now_ns();
    busy_us(10000);
    return now_ns() - s;
}

// Static: found through the symbol table only. Recursive: depth more calls of itself.
static NOINLINE long long descend(int depth) {
    long long s = now_ns();
    if (depth > 0)
        descend(depth - 1);
    else
        busy_us(200);
    __asm__ volatile("" ::: "memory"); // no tail call
    return now_ns() - s;
}

// LONG_MS -1: the end of long_call, posted on the second line of stdin.
static sem_t long_end;
static long long long_inside_ns;

NOINLINE void long_call(long ms) {
    if (ms < 0) {
        long_inside_ns = now_ns();
        printf("long_call in\n");
        fflush(stdout);
        while (sem_wait(&long_end) != 0) // a signal: wait on
            ;
        return;
    }
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

// DELAY_MS -1: the start of every thread's calls, posted on the first line of stdin.
static sem_t gate;

static void wait_to_start(long delay_ms) {
    if (delay_ms < 0) {
        while (sem_wait(&gate) != 0)
            ;
        return;
    }
    struct timespec d = {delay_ms / 1000, (delay_ms % 1000) * 1000000L};
    nanosleep(&d, NULL);
}

static int threads, rounds, pin;
static long delay_ms, long_ms, same_mod, linger_ms;
// SAME_MOD: the tid residue wanted (-1: any), and each candidate's verdict.
static long wanted_residue = -1;
static sem_t verdict;
static int accepted;
// SAME_MOD: the workers start their calls together (so they share the slot at once).
static pthread_barrier_t all_in;
static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;

static void *worker(void *arg) {
    long i = (long)arg;
    if (same_mod > 0) {
        long residue = (long)syscall(SYS_gettid) % same_mod;
        accepted = wanted_residue < 0 || residue == wanted_residue;
        if (wanted_residue < 0)
            wanted_residue = residue;
        sem_post(&verdict);
        if (!accepted)
            return NULL;
        pthread_barrier_wait(&all_in);
    }
    if (pin) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(i % sysconf(_SC_NPROCESSORS_ONLN), &set);
        pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    }
    pthread_mutex_lock(&print_lock);
    printf("truth tid=%ld index=%ld started=1\n", (long)syscall(SYS_gettid), i);
    fflush(stdout);
    pthread_mutex_unlock(&print_lock);
    wait_to_start(delay_ms);
    struct counts c = {0};
    long long t;
    for (int r = 0; r < rounds; r++) {
        t = now_ns();
        c.work_1ms_ns += work_1ms();
        c.work_1ms_around += now_ns() - t;
        c.work_1ms++;
        if (r % 5 == 4) {
            t = now_ns();
            c.work_10ms_ns += work_10ms();
            c.work_10ms_around += now_ns() - t;
            c.work_10ms++;
        }
        t = now_ns();
        c.descend_ns += descend(3);
        c.descend_around += now_ns() - t;
        c.descend += 4;
        t = now_ns();
        c.lib_ns += lib_step(300);
        c.lib_around += now_ns() - t;
        c.lib++;
    }
    pthread_mutex_lock(&print_lock);
    printf("truth tid=%ld index=%ld cpu=%ld work_1ms=%ld work_1ms_ns=%lld work_10ms=%ld "
           "work_10ms_ns=%lld descend=%ld descend_ns=%lld lib_step=%ld lib_step_ns=%lld "
           "work_1ms_around_ns=%lld work_10ms_around_ns=%lld descend_around_ns=%lld "
           "lib_step_around_ns=%lld\n",
           (long)syscall(SYS_gettid), i, pin ? i % sysconf(_SC_NPROCESSORS_ONLN) : NOT_PINNED,
           c.work_1ms, c.work_1ms_ns, c.work_10ms, c.work_10ms_ns, c.descend, c.descend_ns,
           c.lib, c.lib_ns, c.work_1ms_around, c.work_10ms_around, c.descend_around,
           c.lib_around);
    fflush(stdout);
    pthread_mutex_unlock(&print_lock);
    if (linger_ms > 0) {
        struct timespec l = {linger_ms / 1000, (linger_ms % 1000) * 1000000L};
        nanosleep(&l, NULL);
    }
    return NULL;
}

static void *long_worker(void *arg) {
    (void)arg;
    printf("truth long_tid=%ld\n", (long)syscall(SYS_gettid));
    fflush(stdout);
    wait_to_start(delay_ms);
    long long before = now_ns();
    long_call(long_ms);
    if (long_ms < 0) {
        printf("truth long_call_before_ns=%lld long_call_inside_ns=%lld\n", before,
               long_inside_ns);
        fflush(stdout);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: func_workload THREADS ROUNDS DELAY_MS [PIN] [LONG_MS]\n");
        return 2;
    }
    threads = atoi(argv[1]);
    rounds = atoi(argv[2]);
    delay_ms = atol(argv[3]);
    pin = argc > 4 ? atoi(argv[4]) : 0;
    long_ms = argc > 5 ? atol(argv[5]) : 0;
    same_mod = argc > 6 ? atol(argv[6]) : 0;
    linger_ms = argc > 7 ? atol(argv[7]) : 0;
    sem_init(&verdict, 0, 0);
    sem_init(&gate, 0, 0);
    sem_init(&long_end, 0, 0);
    if (same_mod > 0)
        pthread_barrier_init(&all_in, NULL, threads);
    if (threads < 1 || threads > 64)
        return 2;
    printf("truth pid=%d\n", getpid());
    fflush(stdout);
    pthread_t th[65];
    for (long i = 0; i < threads; i++) {
        pthread_create(&th[i], NULL, worker, (void *)i);
        if (same_mod <= 0)
            continue;
        // A candidate whose tid does not fit exits at once: try another.
        for (long tries = 0;; tries++) {
            while (sem_wait(&verdict) != 0) // a signal: wait on
                ;
            if (accepted)
                break;
            pthread_join(th[i], NULL);
            if (tries > 200000) {
                fprintf(stderr, "no thread with a fitting tid\n");
                return 3;
            }
            pthread_create(&th[i], NULL, worker, (void *)i);
        }
    }
    if (long_ms != 0)
        pthread_create(&th[threads], NULL, long_worker, NULL);
    char line[64];
    if (delay_ms < 0) {
        if (!fgets(line, sizeof line, stdin))
            return 3;
        for (int i = 0; i <= threads; i++)
            sem_post(&gate);
    }
    if (long_ms < 0) {
        if (!fgets(line, sizeof line, stdin))
            return 3;
        sem_post(&long_end);
    }
    for (int i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    if (long_ms != 0)
        pthread_join(th[threads], NULL);
    printf("done\n");
    return 0;
}
