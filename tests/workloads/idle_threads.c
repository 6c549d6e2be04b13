/* A process with many threads that do nothing during a trace: blocked since before
 * the attach, they must still count as its threads.
 *
 *   idle_threads N    starts N threads blocked on a condition variable that is never
 *                     signalled, prints "ready PID", and sleeps until killed
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;

static void *idle(void *arg) {
    (void)arg;
    pthread_mutex_lock(&m);
    for (;;)
        pthread_cond_wait(&never, &m);
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 64 * 1024);
    for (int i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, &a, idle, NULL) != 0) {
            perror("pthread_create");
            return 1;
        }
    }
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    for (;;)
        pause();
}
