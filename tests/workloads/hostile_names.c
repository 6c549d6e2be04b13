/* A program that names everything a tracer prints with terminal escapes: its command
 * name (prctl), its threads (pthread_setname_np) and a global mutex (its symbol). A
 * tracer that prints them raw retitles or clears root's terminal and forges report
 * lines; rtm-trace's text outputs must show them escaped.
 *
 *   hostile_names MS                each of two threads takes the mutex, sleeping 20 us
 *                                   inside, over and over for MS milliseconds by its own
 *                                   clock (once at least): as long on a loaded machine,
 *                                   where each wake waits for a CPU, as on an idle one
 *   hostile_names MS markup         the same with names that are HTML markup (threads
 *                                   "<svg onload=x>" and "<b>bold</b>", the mutex
 *                                   "<img src=x onerror=alert(1)>"), for the HTML report
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

/* The assembler takes any bytes in a quoted symbol name. */
pthread_mutex_t evil_lock __asm__("\"evil\x1b[2J\x07lock\"") = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t markup_lock __asm__("\"<img src=x onerror=alert(1)>\"") = PTHREAD_MUTEX_INITIALIZER;

static long long run_ms = 400;
static pthread_mutex_t *lock = &evil_lock;

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *worker(void *arg) {
    long *acquisitions = arg;
    long long end = now_ns() + run_ms * 1000000LL;
    do {
        pthread_mutex_lock(lock);
        usleep(20);
        pthread_mutex_unlock(lock);
        ++*acquisitions;
    } while (now_ns() < end);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1)
        run_ms = atoll(argv[1]);
    int markup = argc > 2 && !strcmp(argv[2], "markup");
    if (markup)
        lock = &markup_lock;
    pthread_t t[2];
    long acquisitions[2] = {0, 0};
    prctl(PR_SET_NAME, markup ? "<i>x</i>&amp;" : "\x1b]0;pwned\x07", 0, 0, 0);
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, worker, &acquisitions[i]);
    pthread_setname_np(t[0], markup ? "<svg onload=x>" : "a\rb\nc\x1b[2J");
    pthread_setname_np(t[1], markup ? "<b>bold</b>" : "\x9b" "31m\xe2\x80\xaered");
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    printf("hostile_names: %ld acquisitions\n", acquisitions[0] + acquisitions[1]);
    return 0;
}
