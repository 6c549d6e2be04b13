/* Two processes, each blocked forever on its own *private* mutex whose owner field
 * names a thread of the other: no deadlock between them (a private mutex is owned in
 * its own process only), though each owner field points across.
 *
 *   fork_owned
 *
 * The parent locks `copied` and forks: the child's copy of `copied` is locked, its
 * owner field the parent's TID. `shared_page` is a page both see (MAP_SHARED), holding a
 * mutex initialised as private: the child locks it (owner field: the child's TID), then
 * blocks on its copy of `copied`; the parent, once told, blocks on the shared page's
 * mutex (a private futex wait, in its own address space, that the child's unlock could
 * never wake). Prints `truth parent=PID child=PID ready` once both are about to block; they
 * hang until killed.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static pthread_mutex_t copied = PTHREAD_MUTEX_INITIALIZER;

int main(void) {
    pthread_mutex_t *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    pthread_mutex_init(shared, NULL);
    int go[2];
    if (pipe(go) != 0) {
        perror("pipe");
        return 1;
    }
    pthread_mutex_lock(&copied);
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    if (child == 0) {
        pthread_mutex_lock(shared);
        if (write(go[1], "x", 1) != 1)
            _exit(1);
        pthread_mutex_lock(&copied); /* its copy: locked, owner the parent's TID */
        _exit(0);
    }
    char c;
    if (read(go[0], &c, 1) != 1) {
        perror("read");
        return 1;
    }
    printf("truth parent=%d child=%d ready\n", getpid(), child);
    fflush(stdout);
    pthread_mutex_lock(shared); /* owner field: the child's TID */
    waitpid(child, NULL, 0);
    return 0;
}
