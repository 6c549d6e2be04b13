/* Forked children that synchronize from their first instruction: a tracer following
 * forks must count every call of every child, not only those made after it noticed the
 * child.
 *
 *   fork_children N ITERS [--wait-stdin]
 *     forks N children one after another (each runs while the next is forked); each
 *     child, right after fork, takes its own mutex `child_lock` ITERS times and exits.
 *     Each child prints "truth pid=P locks=ITERS"; the parent waits for all.
 *     --wait-stdin: print "ready PID" and wait for a line on stdin before forking.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

pthread_mutex_t child_lock = PTHREAD_MUTEX_INITIALIZER;
volatile unsigned long sink;

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: fork_children N ITERS [--wait-stdin]\n");
        return 2;
    }
    int n = atoi(argv[1]);
    long iters = atol(argv[2]);
    if (argc > 3 && strcmp(argv[3], "--wait-stdin") == 0) {
        printf("ready %d\n", (int)getpid());
        fflush(stdout);
        char line[64];
        if (!fgets(line, sizeof line, stdin))
            return 1;
    }
    fflush(stdout);
    for (int i = 0; i < n; i++) {
        pid_t p = fork();
        if (p < 0) {
            perror("fork");
            return 1;
        }
        if (p == 0) {
            for (long k = 0; k < iters; k++) {
                pthread_mutex_lock(&child_lock);
                sink++;
                pthread_mutex_unlock(&child_lock);
            }
            printf("truth pid=%d locks=%ld\n", (int)getpid(), iters);
            fflush(stdout);
            _exit(0);
        }
    }
    int status, failed = 0;
    while (wait(&status) > 0)
        failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    return failed;
}
