/* Many heap locks, many numbered threads: what a metrics agent must not turn into
 * thousands of series.
 *
 *   many_locks THREADS LOCKS MS
 *
 * Allocates LOCKS mutexes on the heap, prints "ready PID" and waits for a line on stdin,
 * then starts THREADS threads named worker-0 ... worker-(THREADS-1). Each takes random
 * locks for MS milliseconds, sleeping 200 us inside each so that others collide on it.
 * Prints "truth acquisitions=N" at the end.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t *locks;
static int n_locks, ms;
static long long total;
static pthread_mutex_t total_lock = PTHREAD_MUTEX_INITIALIZER;

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static void *worker(void *arg) {
    unsigned seed = (unsigned)(long)arg * 2654435761u;
    long long end = now_ms() + ms, n = 0;
    while (now_ms() < end) {
        pthread_mutex_t *m = &locks[rand_r(&seed) % n_locks];
        pthread_mutex_lock(m);
        usleep(200);
        pthread_mutex_unlock(m);
        n++;
    }
    pthread_mutex_lock(&total_lock);
    total += n;
    pthread_mutex_unlock(&total_lock);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: many_locks THREADS LOCKS MS\n");
        return 2;
    }
    int n_threads = atoi(argv[1]);
    n_locks = atoi(argv[2]);
    ms = atoi(argv[3]);
    if (n_threads < 1 || n_locks < 1 || ms < 1) return 2;
    locks = calloc(n_locks, sizeof *locks);
    for (int i = 0; i < n_locks; i++) pthread_mutex_init(&locks[i], NULL);
    printf("ready %d\n", getpid());
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 1;
    pthread_t *t = calloc(n_threads, sizeof *t);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    for (int i = 0; i < n_threads; i++) {
        if (pthread_create(&t[i], &attr, worker, (void *)(long)(i + 1))) return 1;
        char name[16];
        snprintf(name, sizeof name, "worker-%d", i % 100000000);
        pthread_setname_np(t[i], name);
    }
    for (int i = 0; i < n_threads; i++) pthread_join(t[i], NULL);
    printf("truth acquisitions=%lld\n", total);
    return 0;
}
