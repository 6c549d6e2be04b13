/* Many distinct mutexes for `cargo xtask bench memory`: THREADS threads, each locking
 * and unlocking its share of MUTEXES heap-allocated mutexes (every mutex is used by two
 * threads), ROUNDS times over.
 *
 *   bench_mutexes MUTEXES THREADS ROUNDS
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_mutex_t *locks;
static long n_locks, n_threads, rounds;

static void *run(void *arg) {
    long t = (long)arg;
    for (long r = 0; r < rounds; r++)
        for (long i = 0; i < n_locks; i++)
            if (i % n_threads == t || (i + 1) % n_threads == t) {
                pthread_mutex_lock(&locks[i]);
                pthread_mutex_unlock(&locks[i]);
            }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: bench_mutexes MUTEXES THREADS ROUNDS\n");
        return 2;
    }
    n_locks = atol(argv[1]);
    n_threads = atol(argv[2]);
    rounds = atol(argv[3]);
    if (n_threads < 1 || n_threads > 256) return 2;
    locks = calloc(n_locks, sizeof *locks);
    for (long i = 0; i < n_locks; i++) pthread_mutex_init(&locks[i], NULL);
    pthread_t th[256];
    for (long t = 0; t < n_threads; t++) pthread_create(&th[t], NULL, run, (void *)t);
    for (long t = 0; t < n_threads; t++) pthread_join(th[t], NULL);
    printf("mutexes=%ld threads=%ld\n", n_locks, n_threads);
    return 0;
}
