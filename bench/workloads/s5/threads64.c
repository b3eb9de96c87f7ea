// N threads computing in phases separated by a barrier; prints each phase's combined sum.
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <pthread.h>
#define MAXT 256
static int nt, phases; static long iters;
static pthread_barrier_t bar;
static uint64_t res[MAXT];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t shared_total;
static void *work(void *arg) {
    long id = (long)arg;
    uint64_t x = 0x12345678ULL + id * 7919;
    for (int p = 0; p < phases; p++) {
        for (long i = 0; i < iters; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; }
        res[id] = x;
        pthread_mutex_lock(&mu); shared_total += x >> 40; pthread_mutex_unlock(&mu);
        pthread_barrier_wait(&bar);
        if (id == 0) {
            uint64_t s = 0; for (int t = 0; t < nt; t++) s = s * 31 + res[t];
            printf("phase %d sum %016llx total %llu\n", p, (unsigned long long)s, (unsigned long long)shared_total);
            fflush(stdout);
        }
        pthread_barrier_wait(&bar);
    }
    return NULL;
}
int main(int argc, char **argv) {
    nt = argc > 1 ? atoi(argv[1]) : 64; phases = argc > 2 ? atoi(argv[2]) : 20; iters = argc > 3 ? atol(argv[3]) : 300000;
    pthread_t th[MAXT];
    pthread_barrier_init(&bar, NULL, nt);
    for (long t = 0; t < nt; t++) pthread_create(&th[t], NULL, work, (void *)t);
    for (int t = 0; t < nt; t++) pthread_join(th[t], NULL);
    printf("done %d threads\n", nt);
    return 0;
}
