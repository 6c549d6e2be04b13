/* rtm-trace's demo: a small order-processing service with a lock problem to find.
 *
 * Four workers take orders from a shared queue (queue_lock), update per-account balances
 * under striped locks (account_locks[16], rarely contended), and every 25 orders append to
 * an audit log under audit_lock, which they hold while "formatting" the entry: the slow
 * critical section that makes everyone else wait. Runs for about a second.
 *
 *   demo [--audit-us N]   (how long the audit entry is held, default 2000: the knob the
 *                          suite turns to check rtm-trace's what-if against the real fix)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WORKERS 4
#define ORDERS 6000
#define ACCOUNTS 16

pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t audit_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t account_locks[ACCOUNTS];

static int next_order;
static long balances[ACCOUNTS];
static long audit_entries;
static long audit_us = 2000;

static void busy_us(long us) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do {
        clock_gettime(CLOCK_MONOTONIC, &b);
    } while ((b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000 < us);
}

static void *worker(void *arg) {
    char name[16];
    snprintf(name, sizeof name, "worker-%ld", (long)arg);
    pthread_setname_np(pthread_self(), name);
    unsigned seed = (unsigned)(long)arg;
    for (;;) {
        pthread_mutex_lock(&queue_lock);
        int order = next_order < ORDERS ? next_order++ : -1;
        pthread_mutex_unlock(&queue_lock);
        if (order < 0) break;

        int acct = rand_r(&seed) % ACCOUNTS;
        busy_us(150); /* price the order, outside any lock */
        pthread_mutex_lock(&account_locks[acct]);
        balances[acct] += order % 97;
        busy_us(5);
        pthread_mutex_unlock(&account_locks[acct]);

        if (order % 25 == 0) {
            pthread_mutex_lock(&audit_lock);
            busy_us(audit_us); /* formatting the audit entry while holding the lock */
            audit_entries++;
            pthread_mutex_unlock(&audit_lock);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--audit-us") && atol(argv[2]) >= 0)
        audit_us = atol(argv[2]);
    else if (argc != 1) {
        fprintf(stderr, "usage: demo [--audit-us N]\n");
        return 2;
    }
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (int i = 0; i < ACCOUNTS; i++) pthread_mutex_init(&account_locks[i], NULL);
    pthread_t t[WORKERS];
    for (long i = 0; i < WORKERS; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < WORKERS; i++) pthread_join(t[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &end);
    long total = 0;
    for (int i = 0; i < ACCOUNTS; i++) total += balances[i];
    printf("demo: processed %d orders, %ld audit entries, balance total %ld in %.3f s\n",
           ORDERS, audit_entries, total,
           (end.tv_sec - start.tv_sec) + (end.tv_nsec - start.tv_nsec) / 1e9);
    return 0;
}
