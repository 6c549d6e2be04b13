/* Two processes wake each other through process-shared semaphores in shared memory: a
 * wait in one is ended by a thread of the other. Then one wait that times out.
 *
 *   pingpong ROUNDS [--timed] [--wait-stdin]
 *     The parent (the "waiter" side) and a forked child ping-pong ROUNDS times:
 *     the parent posts `ping` and waits on `pong`, the child waits on `ping` and posts
 *     `pong`. With --timed every wait is a sem_timedwait with a 30 s deadline (none
 *     expires). Finally the parent waits 20 ms on a semaphore nobody posts: one timeout.
 *     --wait-stdin: print "ready PID CHILD" once the child is forked and wait for a
 *     line on stdin before playing.
 *     Prints "truth rounds=ROUNDS timeouts=1 parent=P child=C".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct shared {
    sem_t ping, pong, never, go;
};

static int timed;

static void wait_on(sem_t *s, long ms) {
    if (!timed && ms == 0) {
        while (sem_wait(s) != 0 && errno == EINTR)
            ;
        return;
    }
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    long add = ms ? ms : 30000;
    t.tv_sec += add / 1000;
    t.tv_nsec += (add % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    while (sem_timedwait(s, &t) != 0 && errno == EINTR)
        ;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: pingpong ROUNDS [--timed] [--wait-stdin]\n");
        return 2;
    }
    long rounds = atol(argv[1]);
    int gate = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--timed") == 0)
            timed = 1;
        if (strcmp(argv[i], "--wait-stdin") == 0)
            gate = 1;
    }
    struct shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return 1;
    sem_init(&sh->ping, 1, 0);
    sem_init(&sh->pong, 1, 0);
    sem_init(&sh->never, 1, 0);
    sem_init(&sh->go, 1, 0);
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        wait_on(&sh->go, 0);
        for (long i = 0; i < rounds; i++) {
            wait_on(&sh->ping, 0);
            sem_post(&sh->pong);
        }
        _exit(0);
    }
    if (gate) {
        printf("ready %d %d\n", (int)getpid(), (int)child);
        fflush(stdout);
        char line[64];
        if (!fgets(line, sizeof line, stdin))
            return 1;
    }
    sem_post(&sh->go);
    for (long i = 0; i < rounds; i++) {
        sem_post(&sh->ping);
        wait_on(&sh->pong, 0);
    }
    wait_on(&sh->never, 20);
    int status;
    waitpid(child, &status, 0);
    printf("truth rounds=%ld timeouts=1 parent=%d child=%d\n", rounds, (int)getpid(),
           (int)child);
    return 0;
}
