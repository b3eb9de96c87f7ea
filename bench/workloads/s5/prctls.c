// Per-process and per-thread prctl state: thread names, CHILD_SUBREAPER,
// TIMERSLACK, THP_DISABLE, DUMPABLE=0, KEEPCAPS, a sigaltstack, per-thread signal masks,
// CPU affinity per thread; computes, then prints it all from every thread.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <signal.h>
#include <sched.h>
#include <pthread.h>
#include <unistd.h>
#include <sys/prctl.h>
static long rounds;
static pthread_barrier_t bar;
static void report(const char *who) {
    char name[32] = {0}; prctl(PR_GET_NAME, name);
    stack_t ss; sigaltstack(NULL, &ss);
    sigset_t m; pthread_sigmask(SIG_BLOCK, NULL, &m);
    cpu_set_t cs; CPU_ZERO(&cs); sched_getaffinity(0, sizeof cs, &cs);
    printf("%s: name=%s altstack=%s/%zu usr1blocked=%d usr2blocked=%d cpus=%d%d timerslack=%d\n", who, name,
           ss.ss_flags & SS_DISABLE ? "off" : "on", ss.ss_size, sigismember(&m, SIGUSR1), sigismember(&m, SIGUSR2),
           CPU_ISSET(0, &cs), CPU_ISSET(1, &cs), prctl(PR_GET_TIMERSLACK));
}
static void *thr(void *arg) {
    prctl(PR_SET_NAME, "worker-b");
    sigset_t m; sigemptyset(&m); sigaddset(&m, SIGUSR2); pthread_sigmask(SIG_BLOCK, &m, NULL);
    cpu_set_t cs; CPU_ZERO(&cs); CPU_SET(1, &cs); sched_setaffinity(0, sizeof cs, &cs);
    prctl(PR_SET_TIMERSLACK, 123456);
    static char alt[65536]; stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt}; sigaltstack(&ss, NULL);
    pthread_barrier_wait(&bar); pthread_barrier_wait(&bar);
    report("thread"); fflush(stdout);
    (void)arg; return NULL;
}
int main(int argc, char **argv) {
    rounds = argc > 1 ? atol(argv[1]) : 60;
    prctl(PR_SET_NAME, "main-a");
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);
    prctl(PR_SET_KEEPCAPS, 1);
    prctl(PR_SET_DUMPABLE, 0);
    sigset_t m; sigemptyset(&m); sigaddset(&m, SIGUSR1); pthread_sigmask(SIG_BLOCK, &m, NULL);
    pthread_barrier_init(&bar, NULL, 2);
    pthread_t t; pthread_create(&t, NULL, thr, NULL);
    pthread_barrier_wait(&bar);
    uint64_t x = 1, s = 0;
    for (long r = 0; r < rounds; r++) {
        for (long i = 0; i < 50000000; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; s += x >> 60; }
        printf("round %ld %llx\n", r, (unsigned long long)s); fflush(stdout);
    }
    pthread_barrier_wait(&bar); pthread_join(t, NULL);
    report("main");
    int v = 0; prctl(PR_GET_CHILD_SUBREAPER, &v); printf("subreaper %d\n", v);
    printf("thp_disable %d keepcaps %d dumpable %d\n", prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0), prctl(PR_GET_KEEPCAPS), prctl(PR_GET_DUMPABLE));
    return 0;
}
