// Prints the offsets of the glibc mutex fields rtm-trace reads (model/blocked.rs), from
// the installed headers, and the `__kind` each type of mutex gets from the installed
// C library, for the test that checks them; and, for each type, the head of a mutex of
// that type as this C library leaves it while a thread holds it
// (`held_TYPE=lock,count,owner,nusers,kind`, with `tid=N` the holder), so the test checks
// the holder rule on what glibc really writes.
#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <unistd.h>

static pthread_mutex_t m;

static int kind(int type, int robust, int protocol, int pshared) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, type);
    pthread_mutexattr_setrobust(&a, robust);
    pthread_mutexattr_setprotocol(&a, protocol);
    pthread_mutexattr_setpshared(&a, pshared);
    pthread_mutex_init(&m, &a);
    return m.__data.__kind;
}

/* Locks a mutex made by kind() (twice when recursive) and prints its head. */
static void held(const char *name, int type, int robust, int pshared) {
    kind(type, robust, PTHREAD_PRIO_NONE, pshared);
    pthread_mutex_lock(&m);
    if (type == PTHREAD_MUTEX_RECURSIVE)
        pthread_mutex_lock(&m);
    printf("held_%s=%d,%u,%d,%u,%d\n", name, m.__data.__lock, m.__data.__count,
           m.__data.__owner, m.__data.__nusers, m.__data.__kind);
    if (type == PTHREAD_MUTEX_RECURSIVE)
        pthread_mutex_unlock(&m);
    pthread_mutex_unlock(&m);
}

int main(void) {
    printf("mutex_lock=%zu mutex_owner=%zu mutex_kind=%zu mutex_size=%zu\n",
           offsetof(pthread_mutex_t, __data.__lock), offsetof(pthread_mutex_t, __data.__owner),
           offsetof(pthread_mutex_t, __data.__kind), sizeof(pthread_mutex_t));
    int p = PTHREAD_PROCESS_PRIVATE, s = PTHREAD_PROCESS_SHARED;
    printf("normal=%d recursive=%d errorcheck=%d adaptive=%d robust=%d pi=%d pshared=%d\n",
           kind(PTHREAD_MUTEX_NORMAL, 0, PTHREAD_PRIO_NONE, p),
           kind(PTHREAD_MUTEX_RECURSIVE, 0, PTHREAD_PRIO_NONE, p),
           kind(PTHREAD_MUTEX_ERRORCHECK, 0, PTHREAD_PRIO_NONE, p),
           kind(PTHREAD_MUTEX_ADAPTIVE_NP, 0, PTHREAD_PRIO_NONE, p),
           kind(PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_ROBUST, PTHREAD_PRIO_NONE, p),
           kind(PTHREAD_MUTEX_NORMAL, 0, PTHREAD_PRIO_INHERIT, p),
           kind(PTHREAD_MUTEX_NORMAL, 0, PTHREAD_PRIO_NONE, s));
    printf("tid=%d\n", gettid());
    held("normal", PTHREAD_MUTEX_NORMAL, 0, p);
    held("recursive", PTHREAD_MUTEX_RECURSIVE, 0, p);
    held("errorcheck", PTHREAD_MUTEX_ERRORCHECK, 0, p);
    held("adaptive", PTHREAD_MUTEX_ADAPTIVE_NP, 0, p);
    held("robust", PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_ROBUST, p);
    held("pshared", PTHREAD_MUTEX_NORMAL, 0, s);
    return 0;
}
