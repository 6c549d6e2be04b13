/* The main thread calls pthread_exit while two workers go on: the process's leader is a
 * zombie, /proc/PID/{maps,root,environ,exe} read as empty, and the workers still run.
 *
 *   main_exits     prints "ready PID", then the workers take `exit_lock` until killed
 */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

pthread_mutex_t exit_lock = PTHREAD_MUTEX_INITIALIZER;

static void *worker(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&exit_lock);
        usleep(200);
        pthread_mutex_unlock(&exit_lock);
    }
    return NULL;
}

int main(void) {
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    pthread_exit(NULL);
}
