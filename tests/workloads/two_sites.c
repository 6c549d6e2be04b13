/* Two call sites, each taking its own contended mutex, for the sampled-stacks test.
 *
 *   two_sites THREADS ROUNDS
 *
 * Each thread takes a lock ROUNDS times, holding it ~20 us, so waiters sleep: two
 * threads in three `lock_a` from site_a(), the others `lock_b` from site_b(). The waits
 * through each site are then the exact waits on its lock, counted by the tracer in the
 * same run. Prints `lock_a=ADDR lock_b=ADDR`, then per thread
 * `truth tid=T site_a=N site_b=M` (acquisitions by site).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t lock_b = PTHREAD_MUTEX_INITIALIZER;
static volatile long sink;
static long rounds;

static void spin_us(long us) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        sink++;
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000 < us);
}

__attribute__((noinline)) void site_a(void) {
    pthread_mutex_lock(&lock_a);
    spin_us(20);
    pthread_mutex_unlock(&lock_a);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void site_b(void) {
    pthread_mutex_lock(&lock_b);
    spin_us(20);
    pthread_mutex_unlock(&lock_b);
    __asm__ volatile("" ::: "memory");
}

static void *worker(void *arg) {
    int on_b = (int)(long)arg % 3 == 2;
    long a = 0, b = 0;
    for (long i = 0; i < rounds; i++) {
        if (on_b) {
            site_b();
            b++;
        } else {
            site_a();
            a++;
        }
        spin_us(5);
    }
    printf("truth tid=%ld site_a=%ld site_b=%ld\n", (long)syscall(SYS_gettid), a, b);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: two_sites THREADS ROUNDS\n");
        return 2;
    }
    int n = atoi(argv[1]);
    rounds = atol(argv[2]);
    if (n < 1 || n > 64 || rounds < 1)
        return 2;
    pthread_t t[64];
    printf("lock_a=%p lock_b=%p\n", (void *)&lock_a, (void *)&lock_b);
    fflush(stdout);
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], NULL, worker, (void *)(long)i);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    return 0;
}
