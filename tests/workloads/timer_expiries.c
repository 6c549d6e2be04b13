/* Timed futex waits that expire while another thread of the process, on the same CPU,
 * is inside futex calls on the same word: the timer's expiry runs in whatever thread
 * has the CPU, so a tracer that takes the wake's context for its waker would credit the
 * busy thread with waking a wait that timed out.
 *
 *   timer_expiries WAITS TIMEOUT_US
 *
 * One thread waits WAITS times on `word` (FUTEX_WAIT_BITSET, bit 0, value 0, TIMEOUT_US
 * each), nobody ever waking it; another, pinned to the same CPU, calls FUTEX_WAKE_BITSET
 * on the same word for bit 1 (which wakes no waiter of bit 0) until the first is done. Prints `word=ADDR` and
 * `truth timeouts=N woken=W eagain=E other=O slept_timeouts=S` (the waits' own results;
 * S: the timeouts during which the thread slept, by its own voluntary context switches:
 * on a busy CPU the deadline can pass before the call sleeps, and the kernel then
 * returns ETIMEDOUT at once).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static _Alignas(4) int word;
static atomic_int done;
static long waits, timeout_us;

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}

static void *busy(void *arg) {
    pin(*(int *)arg);
    while (!atomic_load(&done))
        syscall(SYS_futex, &word, FUTEX_WAKE_BITSET_PRIVATE, 1, NULL, NULL, 2);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: timer_expiries WAITS TIMEOUT_US\n");
        return 2;
    }
    waits = atol(argv[1]);
    timeout_us = atol(argv[2]);
    if (waits < 1 || timeout_us < 1 || timeout_us >= 1000000)
        return 2;
    int cpu = sched_getcpu();
    if (cpu < 0)
        cpu = 0;
    pin(cpu);
    printf("word=%p\n", (void *)&word);
    fflush(stdout);
    pthread_t t;
    pthread_create(&t, NULL, busy, &cpu);
    long timeouts = 0, woken = 0, eagain = 0, other = 0, slept_timeouts = 0;
    for (long i = 0; i < waits; i++) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += timeout_us * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        struct rusage before, after;
        getrusage(RUSAGE_THREAD, &before);
        long r = syscall(SYS_futex, &word, FUTEX_WAIT_BITSET_PRIVATE, 0, &ts, NULL, 1);
        int err = errno;
        getrusage(RUSAGE_THREAD, &after);
        if (r == 0)
            woken++;
        else if (err == ETIMEDOUT) {
            timeouts++;
            if (after.ru_nvcsw > before.ru_nvcsw)
                slept_timeouts++;
        } else if (err == EAGAIN)
            eagain++;
        else
            other++;
    }
    atomic_store(&done, 1);
    pthread_join(t, NULL);
    printf("truth timeouts=%ld woken=%ld eagain=%ld other=%ld slept_timeouts=%ld\n", timeouts,
           woken, eagain, other, slept_timeouts);
    return 0;
}
