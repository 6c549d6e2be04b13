// Threads that deadlock, or just wait, for `rtm-trace --blocked`.
//
// usage: deadlock MODE
//   abba      thread 1 takes lock_a then lock_b, thread 2 lock_b then lock_a: a deadlock
//   three     three threads, lock_a -> lock_b -> lock_c -> lock_a: a deadlock
//   pshared   two processes, process-shared mutexes in shared memory, taken in opposite
//             orders: a deadlock across processes
//   types [MS] for each mutex type (normal, recursive, errorcheck, robust, pi) a thread
//             holds one and another waits on it; a thread waits on a condition
//             variable (after MS ms, when given; -1: after a line on stdin); `ready`
//             once every thread sleeps (its state in /proc), not after a guessed time
//   contended four threads pass one mutex around for ever (no deadlock)
//   many N    the main thread holds lock_a; N threads wait on it (no deadlock)
//   inversion one thread takes lock_a then lock_b (in path_ab), later another takes
//             lock_b then lock_a (in path_ba): never at once, so it never hangs; exits
//   semaphores two binary semaphores used as locks (initial value 1), taken in opposite
//             orders by two threads: a deadlock no owner field shows (a semaphore has
//             no owner), as Python's threading.Lock deadlocks
// prints: `truth ...` lines (who holds and waits on what), then `ready` once every
// thread is about to block; then hangs until killed.
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t lock_b = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t lock_c = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t type_locks[5];
pthread_cond_t never_signalled = PTHREAD_COND_INITIALIZER;
pthread_mutex_t cond_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t all_hold;
static const char *type_names[5] = {"normal", "recursive", "errorcheck", "robust", "pi"};

static long tid(void) { return syscall(SYS_gettid); }

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void say(const char *fmt, long a, long b) {
    printf(fmt, a, b);
    fflush(stdout);
}

struct pair {
    pthread_mutex_t *first, *second;
    int index;
};

static void *take_two(void *arg) {
    struct pair *p = arg;
    pthread_mutex_lock(p->first);
    say("truth index=%ld tid=%ld\n", p->index, tid());
    pthread_barrier_wait(&all_hold);
    printf("truth blocking=%d at_ns=%lld\n", p->index, now_ns());
    fflush(stdout);
    pthread_mutex_lock(p->second); // never returns
    return NULL;
}

static sem_t sem_a, sem_b;

struct sem_pair {
    sem_t *first, *second;
    int index;
};

static void *take_two_sems(void *arg) {
    struct sem_pair *p = arg;
    sem_wait(p->first);
    say("truth sem_index=%ld tid=%ld\n", p->index, tid());
    pthread_barrier_wait(&all_hold);
    printf("truth blocking=%d at_ns=%lld\n", p->index, now_ns());
    fflush(stdout);
    sem_wait(p->second); // never returns
    return NULL;
}

static void *holder(void *arg) {
    long i = (long)arg;
    pthread_mutex_lock(&type_locks[i]);
    printf("truth holder=%s tid=%ld\n", type_names[i], tid());
    fflush(stdout);
    pthread_barrier_wait(&all_hold);
    pause();
    return NULL;
}

// `types`: the threads past the barrier, about to block.
static int about_to_block;

static void *waiter(void *arg) {
    long i = (long)arg;
    pthread_barrier_wait(&all_hold);
    printf("truth waiter=%s tid=%ld\n", type_names[i], tid());
    fflush(stdout);
    __atomic_add_fetch(&about_to_block, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(&type_locks[i]);
    return NULL;
}

static void *cond_waiter(void *arg) {
    (void)arg;
    pthread_mutex_lock(&cond_lock);
    say("truth cond_waiter=1 tid=%ld%.0ld\n", tid(), 0);
    pthread_barrier_wait(&all_hold);
    __atomic_add_fetch(&about_to_block, 1, __ATOMIC_SEQ_CST);
    for (;;)
        pthread_cond_wait(&never_signalled, &cond_lock);
    return NULL;
}

static void *passer(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&lock_a);
        for (volatile int i = 0; i < 20000; i++)
            ;
        pthread_mutex_unlock(&lock_a);
    }
    return NULL;
}

__attribute__((noinline)) static void path_ab(void) {
    pthread_mutex_lock(&lock_a);
    pthread_mutex_lock(&lock_b);
    pthread_mutex_unlock(&lock_b);
    pthread_mutex_unlock(&lock_a);
}

__attribute__((noinline)) static void path_ba(void) {
    pthread_mutex_lock(&lock_b);
    pthread_mutex_lock(&lock_a);
    pthread_mutex_unlock(&lock_a);
    pthread_mutex_unlock(&lock_b);
}

static void *run_path(void *arg) {
    void (*path)(void) = (void (*)(void))arg;
    for (int i = 0; i < 3; i++)
        path();
    return NULL;
}

// Whether every thread but the calling one sleeps (state S in /proc/self/task/*/stat).
static int others_asleep(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return 0;
    int all = 1;
    for (struct dirent *e; all && (e = readdir(d));) {
        if (e->d_name[0] == '.' || atol(e->d_name) == tid())
            continue;
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f)
            fclose(f);
        buf[n] = 0;
        char *end = strrchr(buf, ')');
        all = end && end[1] == ' ' && end[2] == 'S';
    }
    closedir(d);
    return all;
}

static void ready_then_hang(void) {
    usleep(200 * 1000);
    printf("ready\n");
    fflush(stdout);
    for (;;)
        pause();
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    pthread_t th[16];
    if (!strcmp(mode, "abba") || !strcmp(mode, "three")) {
        int n = !strcmp(mode, "abba") ? 2 : 3;
        pthread_mutex_t *locks[3] = {&lock_a, &lock_b, &lock_c};
        static struct pair pairs[3];
        pthread_barrier_init(&all_hold, NULL, n);
        for (int i = 0; i < n; i++) {
            pairs[i] = (struct pair){locks[i], locks[(i + 1) % n], i};
            pthread_create(&th[i], NULL, take_two, &pairs[i]);
        }
        ready_then_hang();
    } else if (!strcmp(mode, "semaphores")) {
        static struct sem_pair pairs[2];
        sem_init(&sem_a, 0, 1);
        sem_init(&sem_b, 0, 1);
        pthread_barrier_init(&all_hold, NULL, 2);
        pairs[0] = (struct sem_pair){&sem_a, &sem_b, 0};
        pairs[1] = (struct sem_pair){&sem_b, &sem_a, 1};
        for (int i = 0; i < 2; i++)
            pthread_create(&th[i], NULL, take_two_sems, &pairs[i]);
        ready_then_hang();
    } else if (!strcmp(mode, "pshared")) {
        pthread_mutex_t *m = mmap(NULL, 2 * sizeof *m, PROT_READ | PROT_WRITE,
                                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        pthread_mutexattr_t a;
        pthread_mutexattr_init(&a);
        pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
        pthread_mutex_init(&m[0], &a);
        pthread_mutex_init(&m[1], &a);
        int to_child[2], to_parent[2];
        if (pipe(to_child) || pipe(to_parent))
            return 1;
        char c = 0;
        pid_t child = fork();
        int me = child == 0;
        pthread_mutex_lock(&m[me]);
        printf("truth pshared_index=%d tid=%ld\n", me, tid());
        fflush(stdout);
        // Each tells the other it holds its mutex, then takes the other's.
        if (write(me ? to_parent[1] : to_child[1], &c, 1) != 1 ||
            read(me ? to_child[0] : to_parent[0], &c, 1) != 1)
            return 1;
        if (!me) {
            usleep(100 * 1000);
            printf("ready\n");
            fflush(stdout);
        }
        printf("truth blocking=%d at_ns=%lld\n", me, now_ns());
        fflush(stdout);
        pthread_mutex_lock(&m[!me]); // never returns
        return 0;
    } else if (!strcmp(mode, "types")) {
        // `types MS`: the threads start after MS ms, or a line on stdin (a tracer
        // attaches meanwhile).
        char line[64];
        if (argc > 2 && atoi(argv[2]) < 0) {
            if (!fgets(line, sizeof line, stdin))
                return 3;
        } else if (argc > 2) {
            usleep(atoi(argv[2]) * 1000);
        }
        pthread_barrier_init(&all_hold, NULL, 11);
        for (long i = 0; i < 5; i++) {
            pthread_mutexattr_t a;
            pthread_mutexattr_init(&a);
            if (i == 1)
                pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
            if (i == 2)
                pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
            if (i == 3)
                pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
            if (i == 4)
                pthread_mutexattr_setprotocol(&a, PTHREAD_PRIO_INHERIT);
            pthread_mutex_init(&type_locks[i], &a);
            pthread_create(&th[2 * i], NULL, holder, (void *)i);
            pthread_create(&th[2 * i + 1], NULL, waiter, (void *)i);
        }
        pthread_create(&th[10], NULL, cond_waiter, NULL);
        while (__atomic_load_n(&about_to_block, __ATOMIC_SEQ_CST) < 6 || !others_asleep())
            usleep(1000);
        printf("ready\n");
        fflush(stdout);
        for (;;)
            pause();
    } else if (!strcmp(mode, "many") && argc > 2) {
        int n = atoi(argv[2]);
        pthread_mutex_lock(&lock_a);
        for (int i = 0; i < n; i++) {
            pthread_t t;
            pthread_create(&t, NULL, passer, NULL);
        }
        ready_then_hang();
    } else if (!strcmp(mode, "inversion")) {
        // One path, then the other: never both at once.
        pthread_create(&th[0], NULL, run_path, (void *)path_ab);
        pthread_join(th[0], NULL);
        pthread_create(&th[1], NULL, run_path, (void *)path_ba);
        pthread_join(th[1], NULL);
        printf("done\n");
        return 0;
    } else if (!strcmp(mode, "contended")) {
        for (int i = 0; i < 4; i++)
            pthread_create(&th[i], NULL, passer, NULL);
        ready_then_hang();
    }
    fprintf(stderr, "usage: deadlock abba|three|pshared|types|contended|semaphores\n");
    return 2;
}
