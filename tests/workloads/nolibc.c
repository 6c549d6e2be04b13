/* A process with no libc at all: it sleeps in pause() forever. rtm-trace must refuse it
 * with a clear error. Built with -nostdlib -static. */
static long sys0(long n) {
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "a"(n) : "rcx", "r11", "memory");
    return r;
}
void _start(void) {
    for (;;) sys0(34 /* pause */);
}
