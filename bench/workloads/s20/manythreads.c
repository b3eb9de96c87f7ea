/* manythreads N ROUNDS (BENCHMARKS.md, "A twentieth sweep"): N threads,
 * each doing a fixed amount of hashing with a 1 ms sleep every eighth round,
 * results joined and summed: the output depends on every thread. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static long rounds;
static void *work(void *arg) {
    unsigned long x = (unsigned long)arg * 0x9e3779b97f4a7c15ul | 1;
    for (long r = 0; r < rounds; r++) {
        for (int i = 0; i < 20000; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; }
        if (r % 8 == 0) { struct timespec t = {0, 1000000}; nanosleep(&t, NULL); }
    }
    return (void *)x;
}
int main(int argc, char **argv) {
    int n = atoi(argv[1]);
    rounds = atol(argv[2]);
    pthread_t *t = calloc(n, sizeof *t);
    pthread_attr_t a; pthread_attr_init(&a); pthread_attr_setstacksize(&a, 256 * 1024);
    for (long i = 0; i < n; i++) pthread_create(&t[i], &a, work, (void *)(i + 1));
    unsigned long s = 0;
    for (int i = 0; i < n; i++) { void *v; pthread_join(t[i], &v); s += (unsigned long)v; }
    printf("%d threads: %lx\n", n, s);
    return 0;
}
