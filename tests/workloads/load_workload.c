/* Known loads with known answers, for the ambient-statistics and counter tests.
 *
 *   load_workload spin  SECS          one thread busy on one CPU for SECS seconds
 *   load_workload alloc MIB SECS      allocate and touch MIB MiB, then hold it SECS seconds
 *   load_workload sleep N MS          N sleeps of MS milliseconds (N voluntary switches)
 *   load_workload net   BYTES         send BYTES over a loopback TCP connection, then
 *                                     wait a second so a sample sees it
 *
 * Each prints `truth k=v` lines saying what it did, and `done MODE` at the end.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void spin(double secs) {
    /* On the CPU it is on, and only there: the scheduler would otherwise move it
     * between CPUs now and then, splitting "one CPU busy" over two in an interval. */
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    sched_setaffinity(0, sizeof one, &one);
    volatile unsigned long x = 0;
    double c0 = cpu_now(), t0 = now();
    double end = t0 + secs;
    while (now() < end)
        for (int i = 0; i < 10000; i++) x++;
    /* Its own measure of what it got: on a loaded machine less than a whole CPU. */
    printf("truth spin_cpu_ns=%.0f spin_wall_ns=%.0f\n", (cpu_now() - c0) * 1e9,
           (now() - t0) * 1e9);
}

static void nap_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static void *receiver(void *arg) {
    int c = *(int *)arg;
    char buf[65536];
    long total = 0, n;
    while ((n = read(c, buf, sizeof buf)) > 0) total += n;
    printf("truth received=%ld\n", total);
    return NULL;
}

static int net(long bytes) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1) ||
        getsockname(l, (struct sockaddr *)&a, &len))
        return perror("listen"), 1;
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(s, (struct sockaddr *)&a, sizeof a)) return perror("connect"), 1;
    int c = accept(l, NULL, NULL);
    pthread_t t;
    pthread_create(&t, NULL, receiver, &c);
    static char buf[65536];
    memset(buf, 'x', sizeof buf);
    long left = bytes;
    while (left > 0) {
        long n = write(s, buf, left < (long)sizeof buf ? left : (long)sizeof buf);
        if (n <= 0) return perror("write"), 1;
        left -= n;
    }
    close(s);
    pthread_join(t, NULL);
    printf("truth sent=%ld\n", bytes);
    fflush(stdout);
    nap_ms(1500);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "spin") && argc == 3) {
        nap_ms(1200); /* the first samples see it idle, then busy */
        spin(atof(argv[2]));
        printf("truth spun=%s\n", argv[2]);
    } else if (!strcmp(mode, "alloc") && argc == 4) {
        long mib = atol(argv[2]);
        char *p = malloc(mib << 20);
        for (long i = 0; i < mib << 20; i += 4096) p[i] = 1;
        printf("truth touched_bytes=%ld\n", mib << 20);
        nap_ms(atol(argv[3]) * 1000);
        free(p);
    } else if (!strcmp(mode, "sleep") && argc == 4) {
        long n = atol(argv[2]), ms = atol(argv[3]);
        for (long i = 0; i < n; i++) nap_ms(ms);
        printf("truth sleeps=%ld\n", n);
        nap_ms(1500);
    } else if (!strcmp(mode, "net") && argc == 3) {
        if (net(atol(argv[2]))) return 1;
    } else {
        fprintf(stderr, "usage: load_workload spin|alloc|sleep|net ARGS (see source)\n");
        return 2;
    }
    printf("done %s\n", mode);
    return 0;
}
