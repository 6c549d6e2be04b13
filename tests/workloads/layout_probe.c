// Prints the offsets of the glibc mutex fields rtm-trace reads (model/blocked.rs), from
// the installed headers, and the `__kind` each type of mutex gets from the installed
// C library, for the test that checks them.
#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>

static int kind(int type, int robust, int protocol, int pshared) {
    pthread_mutexattr_t a;
    pthread_mutex_t m;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, type);
    pthread_mutexattr_setrobust(&a, robust);
    pthread_mutexattr_setprotocol(&a, protocol);
    pthread_mutexattr_setpshared(&a, pshared);
    pthread_mutex_init(&m, &a);
    return m.__data.__kind;
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
    return 0;
}
